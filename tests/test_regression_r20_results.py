"""Results whose entry points disagreed on one value (a tester's round 20).

A top-level ``str`` holding a lone surrogate (a file name or a process's output decoded
with ``surrogateescape``) was replaced and marked by `bounded_tool` and
`mcp.bounded_result`, but raised `EncodeError` in `ResultGate` and `TurnBudget`, so every
framework adapter aborted a run that works without jsonbudget. MCP's structured copy
read ``Decimal("-0")`` as the integer 0 while the text kept ``-0``. And a 0-d NumPy array
is written as its scalar, where orjson calls ``default``: documented, pinned here.
"""

from __future__ import annotations

import asyncio
import json
from decimal import Decimal
from pathlib import Path
from typing import Any

import numpy as np
import pytest
from langchain_core.messages import ToolMessage
from langchain_core.tools import tool
from mcp.types import CallToolResult, TextContent

from jsonbudget import (
    ResultGate,
    SpillStore,
    Truncation,
    TurnBudget,
    bounded_dumps,
    bounded_tool,
    gate_result,
)
from jsonbudget.integrations.langchain import budget_tool
from jsonbudget.mcp import bounded_result

NAME = "caf\udce9.txt"  # os.listdir() of a Latin-1 file name on a UTF-8 system
TEXT = "caf\ufffd.txt…[replaced: 1 lone surrogates]"
REPORT = (Truncation("", "unencodable", 1, "chars"),)


def _text(result: CallToolResult) -> str:
    block = result.content[0]
    assert isinstance(block, TextContent)
    return block.text


def test_regression_gate_result_replaces_a_str_results_lone_surrogates() -> None:
    out = gate_result(NAME, max_bytes=4000)
    assert (out.text, out.truncations, out.spilled) == (TEXT, REPORT, False)
    assert out.size == len(TEXT.encode()) == len(out.data)
    # The same text as the other entry points that take a str as text.
    assert out.text == _text(bounded_result(NAME, max_bytes=4000))
    assert out.text == json.loads(bounded_tool(max_bytes=200)(lambda: NAME)())


def test_regression_result_gate_counts_the_replaced_text_in_its_budget(tmp_path: Path) -> None:
    text = ("x" * 95 + "\udc80") * 10  # 960 chars: fits 1000 bytes only as they stand
    gate = ResultGate(max_bytes=1000, store=SpillStore(tmp_path))
    small = gate.gate(NAME)
    assert (small.text, small.truncations) == (TEXT, REPORT)
    passed = gate.gate(text[:600])
    assert passed.text == text[:600].replace("\udc80", "\ufffd") + "…[replaced: 6 lone surrogates]"
    assert passed.truncations == (Truncation("", "unencodable", 6, "chars"),)
    # 950 ASCII bytes, 10 U+FFFD of 3 and the note: over the limit, so spilled whole,
    # replaced and marked in the file.
    spilled = gate.gate(text)
    assert spilled.spilled
    assert spilled.spill is not None
    whole = text.replace("\udc80", "\ufffd") + "…[replaced: 10 lone surrogates]"
    assert spilled.size == len(whole.encode())
    assert gate.store.read(spilled.spill.ref, 0, spilled.size) == whole.encode()
    assert len(spilled.data) <= gate.preview_bytes


def test_regression_result_gate_streams_a_long_str_with_lone_surrogates(tmp_path: Path) -> None:
    # Past the gate's 1 MiB slices: the count is the whole text's, its note at the end.
    text = "\udc80" + "y" * (2**20) + "\udcff"
    gate = ResultGate(max_bytes=1000, store=SpillStore(tmp_path))
    out = gate.gate(text)
    assert out.spill is not None
    tail = gate.store.read(out.spill.ref, out.size - 40, 40)
    assert tail.endswith("y\ufffd…[replaced: 2 lone surrogates]".encode())
    assert gate.store.read(out.spill.ref, 0, 4) == "\ufffdy".encode()


def test_regression_turn_budget_admits_a_str_with_lone_surrogates() -> None:
    turn = TurnBudget(max_bytes=10_000)
    admitted = turn.admit(NAME, tool="ls")
    assert (admitted.text, admitted.truncations, admitted.reason) == (TEXT, REPORT, "fits")
    again = asyncio.run(turn.aadmit(NAME, tool="ls"))
    assert (again.text, again.truncations) == (TEXT, REPORT)
    assert turn.report().used_bytes == 2 * len(TEXT.encode())


def test_regression_langchain_budget_tool_passes_a_str_with_lone_surrogates() -> None:
    @tool
    def ls() -> str:
        """List the directory."""
        return NAME

    assert ls.invoke({}) == NAME  # the run works without jsonbudget
    turn = TurnBudget(max_bytes=10_000)
    bounded = budget_tool(ls, turn)
    assert bounded.invoke({}) == TEXT
    call: Any = {"name": "ls", "args": {}, "id": "call-1", "type": "tool_call"}
    message = bounded.invoke(call)
    assert isinstance(message, ToolMessage)
    assert (message.content, message.tool_call_id) == (TEXT, "call-1")
    assert [r.truncations for r in turn.report().results] == [REPORT, REPORT]


@pytest.mark.parametrize(
    ("value", "text"),
    [
        (Decimal("-0"), '"-0"'),
        (Decimal("-0E+3"), "-0E+3"),
        (Decimal("-0.0"), "-0.0"),
        (Decimal("-0E-5"), "-0.00000"),
        (-0.0, "-0.0"),
        (Decimal("0"), "0"),
    ],
)
def test_regression_mcp_negative_zero_is_the_same_value_in_both_copies(
    value: Any, text: str
) -> None:
    result = bounded_result({"v": value}, max_bytes=4000)
    assert _text(result) == '{"v":' + text + "}"
    written = json.loads(_text(result))["v"]
    sent = json.loads(result.model_dump_json(by_alias=True))["structuredContent"]["v"]
    if isinstance(written, str):
        assert sent == written  # a string of its exact text, in both copies
    else:
        # The same number, its sign included, as a double reads each copy.
        assert (float(written), str(float(written))) == (float(sent), str(float(sent)))


def test_zero_d_array_is_written_as_its_scalar() -> None:
    seen: list[Any] = []

    def hook(obj: Any) -> Any:
        seen.append(obj)
        return f"H<{type(obj).__name__}>"

    assert bounded_dumps(np.array(3.5), max_bytes=100, default=hook) == b"3.5"
    assert bounded_dumps(np.array(True), max_bytes=100, default=hook) == b"true"
    assert bounded_dumps(np.array(3.5), max_bytes=100) == b"3.5"
    assert seen == []


def test_regression_a_json_looking_str_with_lone_surrogates_is_text(tmp_path: Path) -> None:
    """Sniffed as JSON, such a str was passed on as kind "json" with the note after its
    closing bracket (no parser reads it), and a long one was spilled as JSON whose
    read-back never showed the note. It is text: U+FFFD, the note, spilled as text."""
    store = SpillStore(tmp_path)
    small = ResultGate(max_bytes=600, store=store).gate('{"name": "caf\udce9.txt"}')
    assert small.kind == "text"
    assert small.text == '{"name": "caf\ufffd.txt"}…[replaced: 1 lone surrogates]'
    admitted = TurnBudget(max_bytes=1000, store=store).admit('["a\ud800"]')
    assert (admitted.kind, admitted.text) == ("text", '["a\ufffd"]…[replaced: 1 lone surrogates]')
    big = "[" + ", ".join(f'"f{i}\udce9"' for i in range(20_000)) + "]"
    spilled = ResultGate(max_bytes=600, store=store).gate(big)
    assert spilled.spill is not None
    assert spilled.kind == "text"
    whole = store.read(spilled.spill.ref, 0, spilled.size).decode()
    assert whole.endswith("]…[replaced: 20000 lone surrogates]")
    # Plain JSON text without them is still sniffed as JSON.
    assert ResultGate(max_bytes=600, store=store).gate('{"name": "café"}').kind == "json"

"""Guards for agent loops: bounded_tool, ResultGate, TurnBudget."""

from __future__ import annotations

import asyncio
import dataclasses
import functools
import gc
import hashlib
import inspect
import io
import itertools
import json
import re
import threading
import typing
from collections.abc import AsyncIterator, Callable, Iterator
from decimal import Decimal
from pathlib import Path
from typing import Any, Literal

import msgspec
import orjson
import pydantic
import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from jsonbudget import (
    Admitted,
    GateResult,
    Limits,
    ResultGate,
    SpillRef,
    SpillStore,
    Truncation,
    TurnBudget,
    _frozen,
    bounded_tool,
    encode,
    gate_result,
)
from jsonbudget._agents.guards import READ_RESULT_HINT
from jsonbudget._agents.reader import LEAST_READ_BYTES, ResultReader, read_result
from jsonbudget._encode.encoder import dumps_whole
from jsonbudget.errors import (
    CursorScopeError,
    EncodeError,
    InvalidCursor,
    LimitError,
    SpillError,
)
from tests.jsonptr import resolve
from tests.limited import run_limited
from tests.strategies import json_values as shared_json_values
from tests.strategies import odd_values

ROWS = [{"id": i, "name": f"row {i}", "body": "é" * 40} for i in range(500)]


@pytest.fixture
def store(tmp_path: Path) -> SpillStore:
    return SpillStore(tmp_path / "spill")


class Price:
    """A type only a default hook can encode (Decimal is native now)."""

    def __init__(self, text: str) -> None:
        self.text = text

    def __str__(self) -> str:
        return self.text


def spilled_file(store: SpillStore, gated: GateResult | Admitted) -> bytes:
    assert gated.spill is not None
    return store.read(gated.spill.ref, 0, gated.spill.size + 1)


# --- ResultGate -------------------------------------------------------------------------


def test_small_results_pass_through_unchanged(store: SpillStore) -> None:
    gate = ResultGate(max_bytes=1000, store=store)
    raw = b'{"ok": true}'
    out = gate.gate(raw)
    assert out.data is raw
    assert out.spill is None
    assert not out.spilled
    assert gate.gate("plain text").data == b"plain text"
    assert gate.gate({"a": [1, 2.5, None]}).data == orjson.dumps({"a": [1, 2.5, None]})
    assert gate.gate(iter([b"ab", b"cd"])).data == b"abcd"
    assert gate.gate(io.BytesIO(b"file")).data == b"file"
    assert list(store.directory.iterdir()) == []


def test_exactly_the_limit_passes_one_more_byte_spills(store: SpillStore) -> None:
    gate = ResultGate(max_bytes=1000, store=store, preview_bytes=600)
    assert gate.gate(b"x" * 1000).spill is None
    out = gate.gate(b"x" * 1001)
    assert out.spill is not None
    assert out.size == 1001
    assert len(out.data) <= 600


def test_large_object_spilled_whole_with_valid_json_preview(store: SpillStore) -> None:
    gate = ResultGate(max_bytes=2000, store=store, preview_bytes=1200)
    out = gate.gate(ROWS, label="search_rows")
    whole = orjson.dumps(ROWS)
    assert out.kind == "json"
    assert out.spill is not None
    assert spilled_file(store, out) == whole
    assert out.size == len(whole) == out.spill.size
    assert out.spill.sha256 == hashlib.sha256(whole).hexdigest()
    assert len(out.data) <= 1200
    preview = orjson.loads(out.data)
    assert preview["spilled"] == {
        "ref": out.spill.ref,
        "size": len(whole),
        "sha256": out.spill.sha256,
        "media_type": "application/json",
        "read_more": "read more with SpillStore.read(ref, offset, limit)",
    }
    assert preview["preview"][0]["id"] == 0
    assert preview["preview"][-1].startswith("…[omitted: ")
    assert out.spill.ref.startswith("search_rows.")


def test_large_dict_spilled_byte_identical_to_orjson(store: SpillStore) -> None:
    value = {f"key{i}": {"n": i, "s": "x" * 30} for i in range(300)}
    out = ResultGate(max_bytes=1000, store=store, preview_bytes=800).gate(value)
    assert spilled_file(store, out) == orjson.dumps(value)
    assert len(out.data) <= 800
    orjson.loads(out.data)


def test_object_orjson_refuses_is_spilled_with_markers(store: SpillStore) -> None:
    value = {1: "int key", "big": ["y" * 100] * 50, "s": {1, 2}}
    out = ResultGate(max_bytes=1000, store=store, preview_bytes=800).gate(value)
    stored = orjson.loads(spilled_file(store, out))
    assert len(stored["big"]) == 50
    assert "1" in stored or any(k.startswith("…") for k in stored)
    orjson.loads(out.data)


def test_regression_nan_in_a_spilled_result_is_marked_not_null(store: SpillStore) -> None:
    # The spill file was orjson's bytes, and orjson writes NaN as null: a value lost
    # without a word. It now carries the encoder's marker, as a result that fits does.
    value = {"rows": [{"i": i, "x": float("nan") if i == 7 else 1.5} for i in range(100)]}
    out = ResultGate(max_bytes=1000, store=store, preview_bytes=800).gate(value)
    stored = orjson.loads(spilled_file(store, out))
    assert stored["rows"][7]["x"] == "…[unencodable: nan]"
    assert stored["rows"][8]["x"] == 1.5
    assert len(stored["rows"]) == 100


def test_small_object_with_unencodable_value_passes_with_its_marker(store: SpillStore) -> None:
    out = ResultGate(max_bytes=1000, store=store).gate({"s": {1, 2}})
    assert out.spill is None
    assert orjson.loads(out.data)["s"].startswith("…[")


def test_json_bytes_preview_is_json_and_never_counts_what_the_prefix_cut(
    store: SpillStore,
) -> None:
    whole = orjson.dumps({"total": 5000, "rows": [{"i": i, "pad": "p" * 50} for i in range(5000)]})
    out = ResultGate(max_bytes=2000, store=store, preview_bytes=1500).gate(whole)
    assert out.kind == "json"
    assert spilled_file(store, out) == whole
    assert len(out.data) <= 1500
    preview = orjson.loads(out.data)["preview"]
    assert preview["total"] == 5000
    # The file held 5000 rows; only the prefix was parsed, so no count is claimed.
    assert preview["rows"][-1] == "…[omitted: more items]"
    assert b"more items" in out.data
    assert b" more items]" not in out.data.replace(b"omitted: more items]", b"")


def test_json_bytes_object_prefix_says_more_keys(store: SpillStore) -> None:
    whole = orjson.dumps({f"k{i}": "v" * 100 for i in range(2000)})
    out = ResultGate(max_bytes=2000, store=store, preview_bytes=1000).gate(whole)
    preview = orjson.loads(out.data)["preview"]
    markers = [v for k, v in preview.items() if k.startswith("…")]
    assert markers == ["[omitted: more keys]"]


def test_small_complete_json_file_keeps_exact_counts(store: SpillStore) -> None:
    whole = orjson.dumps(list(range(1000)))  # small enough to parse whole
    out = ResultGate(max_bytes=1000, store=store, preview_bytes=800).gate(whole)
    preview = orjson.loads(out.data)["preview"]
    assert isinstance(preview[-1], str)
    assert preview[-1] == f"…[omitted: {1000 - (len(preview) - 1)} more items]"


def test_broken_json_falls_back_to_a_text_preview(store: SpillStore) -> None:
    broken = b"[" + b"1," * 2000  # starts like JSON, never parses whole
    out = ResultGate(max_bytes=1000, store=store, preview_bytes=800, kind="json").gate(
        b"{ nope" + broken
    )
    assert out.kind == "text"
    assert out.spill is not None
    assert out.text.startswith("{ nope")


def test_text_preview_ends_on_a_line_end_and_a_character_boundary(store: SpillStore) -> None:
    text = "".join(f"ligne {i}: café ☕ naïve\n" for i in range(1000))
    gate = ResultGate(max_bytes=2000, store=store, preview_bytes=1000)
    out = gate.gate(text, label="log")
    assert out.kind == "text"
    assert spilled_file(store, out) == text.encode()
    assert len(out.data) <= 1000
    body, _, footer = out.text.rpartition("…[spilled: ")
    assert body.endswith("\n")
    assert text.startswith(body)
    shown = len(body.encode())
    assert f"the first {shown} of {len(text.encode())} bytes" in footer
    assert f"from offset {shown}]" in footer
    assert out.spill is not None
    assert out.spill.ref in footer
    assert out.spill.sha256 in footer


def test_text_without_newlines_is_cut_on_a_character_boundary(store: SpillStore) -> None:
    text = "€" * 3000
    out = ResultGate(max_bytes=1000, store=store, preview_bytes=700).gate(text)
    body = out.text.rpartition("\n…[spilled: ")[0]
    assert body
    assert set(body) == {"€"}
    assert len(out.data) <= 700


def test_binary_result_preview_stops_at_the_first_invalid_byte(store: SpillStore) -> None:
    blob = b"header line\n" + bytes(range(256)) * 20
    out = ResultGate(max_bytes=1000, store=store, preview_bytes=700).gate(blob)
    assert out.text.startswith("header line\n")
    assert spilled_file(store, out) == blob


@pytest.mark.parametrize("blob", [b"\xff\xfe\x00", b"ok\n\xc3", bytearray(b"[1, \xff]")])
def test_a_small_result_that_is_not_utf8_is_spilled_never_passed(
    store: SpillStore, blob: bytes
) -> None:
    """Regression: a binary result that fitted passed through, and its .text raised."""
    out = ResultGate(max_bytes=1000, store=store, preview_bytes=700).gate(blob)
    assert out.spill is not None
    assert spilled_file(store, out) == blob
    out.data.decode("utf-8")  # what reaches the model is text
    admitted = TurnBudget(max_bytes=4096, store=store).admit(blob)
    assert admitted.reason == "result_limit"
    assert admitted.spill is not None
    admitted.data.decode("utf-8")
    assert ResultGate(max_bytes=1000, store=store).gate(b"ok \xc3\xa9").spill is None


def test_streamed_result_is_written_whole_without_joining(store: SpillStore) -> None:
    chunks = [bytes([65 + i % 26]) * 10_000 for i in range(100)]
    out = ResultGate(max_bytes=5000, store=store, preview_bytes=1000).gate(
        iter(chunks), label="stream"
    )
    assert spilled_file(store, out) == b"".join(chunks)
    assert out.size == 1_000_000


def test_crash_in_a_streamed_result_passes_through_and_leaves_no_file(store: SpillStore) -> None:
    def crashing() -> Iterator[bytes]:
        yield b"x" * 3000
        yield b"y" * 3000
        raise ConnectionResetError("upstream went away")

    with pytest.raises(ConnectionResetError, match="upstream"):
        ResultGate(max_bytes=1000, store=store).gate(crashing())
    assert list(store.directory.iterdir()) == []


def test_lone_surrogate_in_a_str_result_is_replaced_and_marked(store: SpillStore) -> None:
    out = ResultGate(max_bytes=1000, store=store).gate("ok \ud800 bad")
    assert out.text == "ok \ufffd bad…[replaced: 1 lone surrogates]"


def test_non_bytes_chunk_in_a_stream_is_a_type_error(store: SpillStore) -> None:
    with pytest.raises(TypeError, match="must yield bytes"):
        ResultGate(max_bytes=1000, store=store).gate(iter(["text"]))


@pytest.mark.parametrize(
    "kwargs",
    [
        {"max_bytes": 0},
        {"max_bytes": 2**62},
        {"max_bytes": 100},  # cannot hold even the default preview
        {"max_bytes": 1000, "preview_bytes": 100},
        {"max_bytes": 1000, "preview_bytes": 2000},
        {"max_bytes": 1000, "kind": "xml"},
        {"max_bytes": 1000, "read_hint": "x" * 500},
    ],
)
def test_gate_options_validated_up_front(kwargs: dict[str, Any]) -> None:
    with pytest.raises(LimitError):
        ResultGate(**kwargs)


def test_default_store_is_created_lazily_in_the_private_directory(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setenv("XDG_CACHE_HOME", str(tmp_path / "cache"))
    gate = ResultGate(max_bytes=1000)
    gate.gate(b"small")
    assert not (tmp_path / "cache").exists()
    out = gate.gate(b"z" * 5000)
    assert out.spill is not None
    assert out.spill.path.parent == tmp_path / "cache" / "jsonbudget" / "spill"


def test_gate_result_convenience(store: SpillStore) -> None:
    out = gate_result(b"q" * 3000, max_bytes=1000, store=store, label="conv", preview_bytes=700)
    assert out.spill is not None
    assert out.spill.label == "conv"
    assert gate_result(b"ok", max_bytes=1000, store=store).data == b"ok"


async def test_async_gate(store: SpillStore) -> None:
    gate = ResultGate(max_bytes=1000, store=store)
    outs = await asyncio.gather(*(gate.agate(b"k" * (500 * i)) for i in range(1, 5)))
    assert [o.spilled for o in outs] == [False, False, True, True]


json_values = st.recursive(
    st.none() | st.booleans() | st.integers(-(2**63), 2**63 - 1) | st.text(max_size=200),
    lambda children: (
        st.lists(children, max_size=30)
        | st.dictionaries(st.text(max_size=10), children, max_size=20)
    ),
    max_leaves=200,
)


@settings(
    max_examples=60, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture]
)
@given(value=json_values, limit=st.integers(min_value=700, max_value=3000))
def test_property_gate_output_within_its_limit_and_nothing_lost(
    store: SpillStore, value: Any, limit: int
) -> None:
    gate = ResultGate(max_bytes=limit, store=store, preview_bytes=min(limit, 700))
    # A str result is text, passed on as its UTF-8 (regression: hypothesis found '').
    as_given = value.encode() if isinstance(value, str) else orjson.dumps(value)
    for result, whole in ((value, as_given), (orjson.dumps(value), orjson.dumps(value))):
        out = gate.gate(result)
        assert len(out.data) <= limit
        orjson.loads(out.data) if out.kind == "json" else out.data.decode()
        if out.spill is None:
            assert out.data == whole
        else:
            assert len(out.data) <= gate.preview_bytes
            assert spilled_file(store, out) == whole


@settings(
    max_examples=60, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture]
)
@given(text=st.text(st.characters(codec="utf-8"), max_size=2000))
def test_property_text_preview_is_a_valid_prefix(store: SpillStore, text: str) -> None:
    gate = ResultGate(max_bytes=700, store=store, kind="text")
    out = gate.gate(text)
    assert len(out.data) <= 700
    shown = out.data.decode()
    if out.spill is None:
        assert shown == text
    else:
        body = shown[: shown.rindex("…[spilled: ")].removesuffix("\n")
        assert text.startswith(body)


# --- TurnBudget ---------------------------------------------------------------------------


def test_turn_whose_results_each_fit_but_together_overflow(store: SpillStore) -> None:
    turn = TurnBudget(
        max_bytes=3000, store=store, max_result_bytes=2000, preview_bytes=700, max_calls=1
    )
    results = [{"call": i, "text": "w" * 780} for i in range(4)]
    each = len(orjson.dumps(results[0]))
    assert each < 2000  # every result is under the per-result limit...
    assert 4 * each > 3000  # ...but together they overflow the turn
    admitted = [turn.admit(r, tool=f"tool{i}") for i, r in enumerate(results)]
    assert [a.reason for a in admitted] == ["fits", "fits", "fits", "turn_limit"]
    assert [a.data for a in admitted[:3]] == [orjson.dumps(r) for r in results[:3]]
    last = admitted[3]
    assert last.spill is not None
    assert spilled_file(store, last) == orjson.dumps(results[3])
    assert last.admitted_bytes <= 3000 - 3 * each  # its preview was cut to what was left
    assert orjson.loads(last.data)["preview"]["call"] == 3
    assert not last.over_budget
    report = turn.report()
    assert report.used_bytes == sum(a.admitted_bytes for a in admitted) <= 3000
    assert not report.over_budget
    assert report.spilled == 1
    assert report.results == tuple(admitted)


def test_turn_past_max_calls_answers_with_the_bare_reference(store: SpillStore) -> None:
    turn = TurnBudget(
        max_bytes=4000, store=store, max_result_bytes=3500, preview_bytes=1500, max_calls=2
    )
    assert turn.admit(b"a" * 3000, tool="first").reason == "fits"
    assert turn.admit(b"line\n" * 200, tool="second").reason == "fits"  # exactly fills it
    third = turn.admit(b"[" + b"1," * 600 + b"1]", tool="third")
    assert third.reason == "turn_limit"
    assert third.spill is not None
    # A third call in a turn of max_calls=2 still needs an answer: the bare reference
    # goes in, flagged over budget.
    assert third.over_budget
    bare = {"spilled": {"ref": third.spill.ref, "size": third.spill.size}}
    assert orjson.loads(third.data) == bare
    assert len(third.data) <= turn.gate.bare_reference_bytes
    assert turn.report().over_budget
    assert turn.report().used_bytes == 4000 + len(third.data)


def test_turn_result_over_the_per_result_limit(store: SpillStore) -> None:
    turn = TurnBudget(max_bytes=10_000, store=store, max_result_bytes=1000, preview_bytes=800)
    out = turn.admit(ROWS, tool="rows")
    assert out.reason == "result_limit"
    assert out.admitted_bytes <= 800
    assert not out.over_budget
    orjson.loads(out.data)
    # What is left, less a bare reference for each of the other calls the turn can answer.
    bare = turn.gate.bare_reference_bytes
    assert turn.remaining == 10_000 - out.admitted_bytes - (turn.max_calls - 2) * bare


def test_turn_reset_starts_a_new_turn(store: SpillStore) -> None:
    turn = TurnBudget(max_bytes=1000, store=store, preview_bytes=700, max_calls=1)
    turn.admit(b"x" * 900)
    ended = turn.reset()
    assert ended.used_bytes == 900
    assert len(ended.results) == 1
    assert turn.report().used_bytes == 0
    assert turn.admit(b"x" * 900).reason == "fits"
    assert turn.new_turn().used_bytes == 900


def test_turn_summary_never_contains_content(store: SpillStore) -> None:
    turn = TurnBudget(max_bytes=1000, store=store, preview_bytes=700, max_calls=1)
    turn.admit(b"SECRET-TOKEN " * 10, tool="t1")
    turn.admit(b"SECRET-TOKEN " * 200, tool="t2")
    text = orjson.dumps(turn.report().summary())
    assert b"SECRET" not in text
    assert b'"spilled":1' in text


def test_turn_parallel_threads_never_overspend(store: SpillStore) -> None:
    turn = TurnBudget(
        max_bytes=6000, store=store, max_result_bytes=2000, preview_bytes=700, max_calls=12
    )
    barrier = threading.Barrier(12)
    outs: list[Admitted] = []
    lock = threading.Lock()

    def call(i: int) -> None:
        barrier.wait()
        a = turn.admit(bytes([97 + i]) * 900, tool=f"t{i}")
        with lock:
            outs.append(a)

    threads = [threading.Thread(target=call, args=(i,)) for i in range(12)]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    report = turn.report()
    assert len(outs) == 12
    assert report.used_bytes == sum(a.admitted_bytes for a in outs)
    # Twelve calls, max_calls=12: the turn never passes its limit, however they race.
    assert report.used_bytes <= 6000
    assert not any(a.over_budget for a in outs)
    assert sum(1 for a in outs if a.reason == "fits") <= 6
    for a in outs:
        if a.spill is not None:
            assert spilled_file(store, a) == a.spill.path.read_bytes()
            assert len(set(spilled_file(store, a))) == 1


async def test_turn_parallel_asyncio_tasks(store: SpillStore) -> None:
    turn = TurnBudget(
        max_bytes=3000, store=store, max_result_bytes=2000, preview_bytes=700, max_calls=10
    )
    outs = await asyncio.gather(*(turn.aadmit(b"%d" % i * 400, tool=f"t{i}") for i in range(10)))
    report = turn.report()
    assert report.used_bytes == sum(a.admitted_bytes for a in outs) <= 3000
    assert not any(a.over_budget for a in outs)
    assert {a.reason for a in outs} >= {"fits", "turn_limit"}


@pytest.mark.parametrize("parallel", ["asyncio", "threads"])
def test_regression_six_parallel_calls_stay_within_the_turn(
    store: SpillStore, parallel: str
) -> None:
    """Six parallel calls once used 10,524 of a 10,000-byte turn (two bare references past
    the limit); the turn now keeps room for a reference per call (max_calls=8)."""
    turn = TurnBudget(max_bytes=10_000, store=store)
    results = [[{"call": i, "row": j, "text": "t" * 60} for j in range(40)] for i in range(6)]
    if parallel == "asyncio":

        async def run() -> list[Admitted]:
            return await asyncio.gather(
                *(turn.aadmit(r, tool=f"search{i}") for i, r in enumerate(results))
            )

        outs = asyncio.run(run())
    else:
        outs = []
        lock = threading.Lock()
        barrier = threading.Barrier(6)

        def call(i: int) -> None:
            barrier.wait()
            got = turn.admit(results[i], tool=f"search{i}")
            with lock:
                outs.append(got)

        threads = [threading.Thread(target=call, args=(i,)) for i in range(6)]
        for t in threads:
            t.start()
        for t in threads:
            t.join()
    report = turn.report()
    assert len(outs) == 6
    assert report.used_bytes == sum(len(a.data) for a in outs) <= 10_000
    assert not report.over_budget
    for a in outs:
        orjson.loads(a.data)  # every answer is JSON, the bare references included
        if a.spill is not None:
            assert orjson.loads(spilled_file(store, a)) == results[int(a.tool[-1])]


def test_turn_max_calls_must_leave_room_for_their_references(store: SpillStore) -> None:
    bare = ResultGate(max_bytes=1000).bare_reference_bytes
    with pytest.raises(LimitError, match="max_calls"):
        TurnBudget(max_bytes=1000, store=store, max_calls=1000 // bare + 1)
    assert TurnBudget(max_bytes=1000, store=store, max_calls=1000 // bare).max_calls == 5
    # By default as many as the limit holds references for, at most 8.
    assert TurnBudget(max_bytes=1000, store=store).max_calls == 5
    assert TurnBudget(max_bytes=10_000, store=store).max_calls == 8


def test_turn_limits_validated(store: SpillStore) -> None:
    with pytest.raises(LimitError, match="max_bytes"):
        TurnBudget(max_bytes=10, store=store)
    with pytest.raises(LimitError, match="max_result_bytes"):
        TurnBudget(max_bytes=1000, store=store, max_result_bytes=2000)
    with pytest.raises(LimitError, match="max_calls"):
        TurnBudget(max_bytes=10_000, store=store, max_calls=0)


# --- bounded_tool -------------------------------------------------------------------------


def test_bounded_tool_sync_result_is_bounded_json() -> None:
    @bounded_tool(max_bytes=200)
    def search(q: str) -> list[dict[str, Any]]:
        """Search things."""
        return [{"q": q, "i": i, "pad": "p" * 30} for i in range(100)]

    out = search("x")
    assert isinstance(out, str)
    assert len(out.encode()) <= 200
    assert orjson.loads(out)[-1].startswith("…[omitted: ")
    assert search.__name__ == "search"
    assert search.__doc__ == "Search things."


def test_bounded_tool_small_result_is_plain_orjson() -> None:
    @bounded_tool(limits=Limits(1000), output="bytes")
    def small() -> dict[str, int]:
        return {"a": 1}

    assert small() == orjson.dumps({"a": 1})


async def test_bounded_tool_async() -> None:
    @bounded_tool(max_bytes=100, output="bytes")
    async def fetch() -> str:
        await asyncio.sleep(0)
        return "z" * 1000

    out = await fetch()
    assert isinstance(out, bytes)
    assert len(out) <= 100
    assert orjson.loads(out).endswith("more chars]")


def test_bounded_tool_methods() -> None:
    class Tools:
        def __init__(self) -> None:
            self.n = 50

        @bounded_tool(max_bytes=100)
        def items(self) -> list[int]:
            return list(range(self.n))

        @bounded_tool(max_bytes=100)
        @classmethod
        def kind(cls) -> str:
            return cls.__name__

        @bounded_tool(max_bytes=100)
        @staticmethod
        def static() -> list[int]:
            return [1]

    tools = Tools()
    assert len(tools.items()) <= 100
    assert orjson.loads(tools.items())[0] == 0
    assert Tools.kind() == '"Tools"'
    assert tools.static() == "[1]"


async def test_bounded_tool_async_method() -> None:
    class Api:
        @bounded_tool(max_bytes=64)
        async def get(self, n: int) -> list[int]:
            return list(range(n))

    assert len(await Api().get(1000)) <= 64


def test_bounded_tool_exceptions_pass_through_unchanged() -> None:
    boom = KeyError("missing")

    @bounded_tool(max_bytes=100)
    def fails() -> None:
        raise boom

    with pytest.raises(KeyError) as info:
        fails()
    assert info.value is boom


async def test_bounded_tool_async_exceptions_pass_through_unchanged() -> None:
    boom = TimeoutError("slow")

    @bounded_tool(max_bytes=100)
    async def fails() -> None:
        raise boom

    with pytest.raises(TimeoutError) as info:
        await fails()
    assert info.value is boom


@pytest.mark.parametrize(
    "kwargs",
    [
        {},
        {"max_bytes": 10},
        {"max_bytes": 2**62},
        {"max_bytes": 100, "output": "xml"},
        {"limits": Limits(100), "max_bytes": 100},
        {"limits": Limits(100), "max_keys": 3},
        {"max_bytes": 100, "max_keys": 0},
        {"max_bytes": 100, "strategy": "greedy"},
    ],
)
def test_bounded_tool_options_validated_when_decorating(kwargs: dict[str, Any]) -> None:
    with pytest.raises(LimitError):
        bounded_tool(**kwargs)


def test_bounded_tool_forwards_max_keys() -> None:
    # Regression: bounded_tool took every Limits option but max_keys.
    @bounded_tool(max_bytes=4096, max_keys=2)
    def tool() -> dict[str, int]:
        return {"a": 1, "b": 2, "c": 3, "d": 4}

    assert json.loads(tool()) == {"a": 1, "b": 2, "…": "[omitted: 2 more keys]"}


def test_bare_bounded_tool_is_a_clear_type_error() -> None:
    def tool() -> int:
        return 1

    # Every option is keyword-only: a bare decorator passes the function positionally.
    with pytest.raises(TypeError, match="positional"):
        bounded_tool(tool)  # type: ignore[call-overload]


# --- hostile results ----------------------------------------------------------------------


def test_regression_nested_iterator_items_read_by_the_size_check_are_spilled(
    store: SpillStore,
) -> None:
    """The size check read the first 151 rows of a nested generator; the spill then wrote
    only the other 849 and the preview showed ``"rows": []``."""
    out = ResultGate(max_bytes=500, store=store).gate({"rows": (i for i in range(1000))})
    assert orjson.loads(spilled_file(store, out)) == {"rows": list(range(1000))}
    preview = orjson.loads(out.data)["preview"]
    assert preview["rows"][:5] == [0, 1, 2, 3, 4]
    assert preview["rows"][-1].startswith("…[omitted")


def test_nested_iterators_everywhere_are_replayed_in_order(store: SpillStore) -> None:
    def tags(i: int) -> Iterator[str]:
        return (f"t{i}-{j}" for j in range(30))

    value = [{"id": i, "tags": tags(i)} for i in range(40)]
    expected = [{"id": i, "tags": [f"t{i}-{j}" for j in range(30)]} for i in range(40)]
    out = ResultGate(max_bytes=1000, store=store).gate(value)
    assert orjson.loads(spilled_file(store, out)) == expected


def test_endless_generator_is_refused_at_max_file_bytes_while_writing(tmp_path: Path) -> None:
    """An endless generator inside a result once filled memory until orjson crashed; it is
    now written as it is made and refused when the file reaches ``max_file_bytes``."""
    proc = run_limited(
        f"""
        import itertools, os
        from jsonbudget import ResultGate, SpillStore
        from jsonbudget.errors import SpillError
        store = SpillStore({str(tmp_path / "spill")!r}, max_file_bytes=20_000_000)
        gate = ResultGate(max_bytes=4096, store=store)
        try:
            gate.gate({{"rows": ({{"i": i}} for i in itertools.count())}})
        except SpillError as exc:
            print("refused:", exc)
        print("left:", os.listdir(store.directory))
        """,
        memory=600 << 20,
    )
    assert proc.returncode == 0, proc.stderr
    assert "refused: the result is larger than the store's max_file_bytes (20000000)" in proc.stdout
    assert "left: []" in proc.stdout


def test_large_list_is_spilled_byte_identical_in_runs(store: SpillStore) -> None:
    rows = [{"id": i, "text": "z" * (i % 300), "n": None} for i in range(20_000)]
    out = ResultGate(max_bytes=4096, store=store).gate({"meta": {"q": "x"}, "rows": rows})
    assert spilled_file(store, out) == orjson.dumps({"meta": {"q": "x"}, "rows": rows})


@pytest.mark.parametrize("via", ["store", "gate"])
def test_full_disk_raises_spill_error_and_leaves_nothing(tmp_path: Path, via: str) -> None:
    """A write that fails (here past a file-size limit, as on a full disk) once raised a bare
    OSError from the file's close() that replaced the SpillError."""
    proc = run_limited(
        f"""
        import os
        from jsonbudget import ResultGate, SpillStore
        from jsonbudget.errors import SpillError
        store = SpillStore({str(tmp_path / "spill")!r})
        try:
            if {via!r} == "store":
                store.put((b"x" * 65536 for _ in range(100)), label="big")
            else:
                ResultGate(max_bytes=4096, store=store).gate(list(range(2_000_000)))
        except SpillError as exc:
            print("spill error:", exc, type(exc.__context__).__name__)
        print("left:", os.listdir(store.directory))
        """,
        file_size=1 << 20,
    )
    assert proc.returncode == 0, proc.stderr
    assert "spill error: cannot write the spill file: File too large" in proc.stdout
    assert "left: []" in proc.stdout


def test_regression_real_ellipsis_key_survives_a_json_preview(store: SpillStore) -> None:
    """The "more keys" member of an open object overwrote a real ``"…"`` key."""
    whole = orjson.dumps({"…": "real value", "rows": list(range(40_000)), "z": 1})
    out = ResultGate(max_bytes=1000, store=store, preview_bytes=900).gate(whole)
    preview = orjson.loads(out.data)["preview"]
    assert preview["…"] == "real value"
    assert "[omitted: more keys]" in preview.values()


def test_regression_thirty_digit_integer_keeps_a_json_preview(store: SpillStore) -> None:
    """ijson's C backend refuses integers beyond 64 bits, so a valid JSON result once got
    a text preview (a JSON result's preview is JSON)."""
    whole = b"[123456789012345678901234567890," + b",".join(b"%d" % i for i in range(5000)) + b"]"
    out = ResultGate(max_bytes=1000, store=store, preview_bytes=900).gate(whole)
    assert out.kind == "json"
    preview = orjson.loads(out.data)["preview"]
    assert preview[0] == "…[unencodable: int beyond 64 bits]"
    assert preview[1:4] == [0, 1, 2]


class AsyncCallable:
    """A tool object whose ``__call__`` is async."""

    async def __call__(self, n: int) -> list[int]:
        await asyncio.sleep(0)
        return list(range(n))


async def test_regression_bounded_tool_awaits_an_async_call_object() -> None:
    """An object with an async ``__call__`` once gave ``"…[unencodable: coroutine]"``."""
    call: AsyncCallable = AsyncCallable()
    tool = bounded_tool(max_bytes=100)(call.__call__)
    assert inspect.iscoroutinefunction(bounded_tool(max_bytes=100)(call))
    out = await bounded_tool(max_bytes=100)(call)(1000)
    assert await tool(3) == "[0,1,2]"
    assert out.startswith("[0,1,2,")
    assert len(out.encode()) <= 100


def test_bounded_tool_sync_function_returning_a_coroutine_is_a_type_error() -> None:
    async def work() -> int:
        return 1

    def tool() -> Any:
        return work()

    with pytest.raises(TypeError, match="returned an awaitable"):
        bounded_tool(max_bytes=100)(tool)()


async def test_regression_bounded_tool_refuses_async_iterables_rather_than_lose_them() -> None:
    """An async generator function's result was encoded as one "…[unencodable:
    async_generator]" marker: the generator was never iterated and every row lost."""

    async def rows() -> AsyncIterator[dict[str, int]]:
        for i in range(1000):
            yield {"id": i}

    with pytest.raises(TypeError, match="async generator function"):
        bounded_tool(max_bytes=300)(rows)

    def hands_back() -> Any:
        return rows()

    async def awaits_then_hands_back() -> Any:
        return rows()

    with pytest.raises(TypeError, match="returned an async iterable"):
        bounded_tool(max_bytes=300)(hands_back)()
    with pytest.raises(TypeError, match="returned an async iterable"):
        await bounded_tool(max_bytes=300)(awaits_then_hands_back)()

    def sync_rows() -> Iterator[dict[str, int]]:
        yield from ({"id": i} for i in range(1000))

    # A sync generator is still read lazily, cut and marked.
    out = bounded_tool(max_bytes=300)(sync_rows)()
    assert out.startswith('[{"id":0},')
    assert out.endswith('more items]"]')


def test_bounded_tool_signature_says_what_it_returns() -> None:
    def search(query: str, limit: int = 10) -> list[dict[str, Any]]:
        """Search."""
        return []

    as_text = bounded_tool(max_bytes=100)(search)
    as_json = bounded_tool(max_bytes=100, output="json")(search)
    as_bytes = bounded_tool(max_bytes=100, output="bytes")(search)
    for wrapped, returns in ((as_text, str), (as_json, list[Any]), (as_bytes, bytes)):
        sig = inspect.signature(wrapped)
        assert list(sig.parameters) == ["query", "limit"]
        # The postponed annotations of this module are resolved where the function lives.
        assert sig.parameters["query"].annotation is str
        assert sig.return_annotation == returns
        assert typing.get_type_hints(wrapped)["return"] == returns
        assert wrapped.__name__ == "search"
        assert wrapped.__doc__ == "Search."
        assert not hasattr(wrapped, "__wrapped__")  # nothing leads a framework back to list[dict]

    def lookup(key: str) -> dict[str, int]:
        return {}

    shaped = bounded_tool(max_bytes=100, output="json")(lookup)
    assert inspect.signature(shaped).return_annotation == dict[str, Any]


class TicketModel(pydantic.BaseModel):
    id: int
    subject: str


class TicketStruct(msgspec.Struct):
    id: int


class TicketRow(msgspec.Struct, array_like=True):
    id: int


@dataclasses.dataclass
class TicketRecord:
    id: int


@pytest.mark.parametrize(
    ("returns", "value", "shape"),
    [
        (TicketModel, TicketModel(id=1, subject="s"), dict[str, Any]),
        (TicketStruct, TicketStruct(id=1), dict[str, Any]),
        (TicketRecord, TicketRecord(id=1), dict[str, Any]),
        (TicketRow, TicketRow(id=1), list[Any]),
        (set[int], {1, 2}, Any),
        (Iterator[int], iter([1, 2]), list[Any]),
        (bytes, b"abc", Any),
        (bytearray, bytearray(b"abc"), Any),
    ],
    ids=lambda x: getattr(x, "__name__", None) or str(x)[:20],
)
def test_regression_json_output_declares_the_shape_it_writes(
    returns: Any, value: Any, shape: Any
) -> None:
    """A pydantic model is iterable (it yields its fields), so a tool returning one was
    declared `list[Any]` while it returned an object: the MCP SDK published an array
    output schema and answered every call with isError. bytes were declared an array."""

    def tool() -> Any:
        return value

    tool.__annotations__["return"] = returns
    wrapped: Any = bounded_tool(max_bytes=500, output="json")(tool)
    assert inspect.signature(wrapped).return_annotation == shape
    got = wrapped()
    if shape == dict[str, Any]:
        assert isinstance(got, dict)
    elif shape == list[Any]:
        assert isinstance(got, list)
    else:
        assert isinstance(got, str)


@pytest.mark.parametrize("nested", [False, True])
def test_regression_a_generator_tools_exception_passes_through(nested: bool) -> None:
    """A generator tool that raised while its items were read came out as EncodeError:
    pydantic-ai's ModelRetry or FastMCP's ToolError was no longer recognised."""

    class ToolRetry(Exception):
        pass

    def rows() -> Iterator[int]:
        yield 1
        raise ToolRetry("try again")

    @bounded_tool(max_bytes=300)
    def tool() -> Any:
        return {"rows": rows()} if nested else rows()

    with pytest.raises(ToolRetry, match="try again"):
        tool()


def test_regression_bounded_tool_takes_its_limits_as_the_spec_writes_them() -> None:
    # SPEC writes bounded_tool(limits); the decorator took keywords only (TypeError).
    @bounded_tool(Limits(200, max_items=5))
    def rows() -> list[int]:
        return list(range(1000))

    assert orjson.loads(rows()) == [0, 1, 2, 3, 4, "…[omitted: 995 more items]"]
    with pytest.raises(LimitError, match="given twice"):
        bounded_tool(Limits(200), limits=Limits(300))
    with pytest.raises(TypeError, match=r"@bounded_tool\(max_bytes=N\)"):
        bounded_tool(rows)  # type: ignore[call-overload]


def test_bounded_tool_json_output_is_the_bounded_value() -> None:
    @bounded_tool(max_bytes=300, output="json")
    def search() -> dict[str, Any]:
        return {"rows": [{"id": i} for i in range(1000)]}

    value = search()
    assert isinstance(value, dict)
    assert len(orjson.dumps(value)) <= 300
    assert value["rows"][-1].startswith("…[omitted: ")


# --- reading back: ResultReader / read_result ----------------------------------------------

MARKER = re.compile(r"…\[truncated: (\d+) more chars\]$")


def follow_read(reader: ResultReader, ref: str, pointer: str, principal: str) -> list[Any]:
    """Every page of a read, in order; each page within the reader's budget."""
    pages: list[Any] = []
    cursor = None
    for _ in range(100_000):
        page = reader.read(ref, pointer, cursor, principal=principal)
        assert len(page.data) <= reader.max_bytes
        env = orjson.loads(page.data)
        assert env["pointer"] == pointer
        assert env["complete"] is page.complete
        pages.append(env)
        cursor = page.next_cursor
        if cursor is None:
            return pages
    raise AssertionError("the read did not end")


def joined(pages: list[Any]) -> str:
    """A string read back page by page, each page's marker taken off."""
    text = ""
    for env in pages:
        (chunk,) = env["items"]
        text += MARKER.sub("", chunk)
    return text


@pytest.fixture
def reader(store: SpillStore) -> ResultReader:
    return ResultReader(spill=store, max_bytes=2000)


BIG = {
    "meta": {"query": "all", "note": "é—" * 20_000, "n": 123456789012345678901234567890},
    "rows": [{"i": i, "body": f"row {i} " * 5} for i in range(100_000)],
}


def test_read_item_50000_of_a_spilled_result(store: SpillStore, reader: ResultReader) -> None:
    gate = ResultGate(max_bytes=4096, store=store, reader=reader, principal="alice")
    out = gate.gate(BIG, label="search")
    preview = orjson.loads(out.data)
    ref = preview["spilled"]["ref"]
    assert out.spill is not None
    assert ref != out.spill.ref  # an opaque reference, not the file's name
    assert out.spill.ref.encode() not in out.data
    assert preview["spilled"]["read_more"] == READ_RESULT_HINT
    page = read_result(ref, "/rows/50000", reader=reader, principal="alice")
    members = orjson.loads(page.data)["items"]
    assert {m["key"]: m["value"] for m in members} == BIG["rows"][50_000]  # type: ignore[index]
    assert page.kind == "object"
    assert page.complete


def test_read_pages_reassemble_a_list_a_string_and_an_object(
    store: SpillStore, reader: ResultReader
) -> None:
    out = ResultGate(max_bytes=4096, store=store, reader=reader, principal="alice").gate(BIG)
    ref = orjson.loads(out.data)["spilled"]["ref"]
    rows = [{"i": i, "body": "x" * (i % 700)} for i in range(3000)]
    small = ResultGate(max_bytes=4096, store=store, reader=reader, principal="alice").gate(rows)
    small_ref = orjson.loads(small.data)["spilled"]["ref"]
    items = [it for env in follow_read(reader, small_ref, "", "alice") for it in env["items"]]
    # An item too large for a page is fitted (cut and marked); read it by its own pointer.
    assert len(items) == 3000
    for i, item in enumerate(items):
        if item != rows[i]:
            body = joined(follow_read(reader, small_ref, f"/{i}/body", "alice"))
            assert body == rows[i]["body"]
    note = follow_read(reader, ref, "/meta/note", "alice")
    assert len(note) > 10
    assert joined(note) == BIG["meta"]["note"]  # type: ignore[index]
    meta = [m for env in follow_read(reader, ref, "/meta", "alice") for m in env["items"]]
    assert [m["key"] for m in meta] == ["query", "note", "n"]
    # The 30-digit integer is read exactly (the Python backend), as the encoder marks it.
    (value,) = orjson.loads(reader.read(ref, "/meta/n", principal="alice").data)["items"]
    assert value == "…[unencodable: int beyond 64 bits]"


def test_read_a_spilled_text_result(store: SpillStore, reader: ResultReader) -> None:
    text = "".join(f"line {i}: naïve café ☕\n" for i in range(5000))
    out = ResultGate(max_bytes=4096, store=store, reader=reader, principal="bob").gate(text)
    ref = out.text.rsplit("the whole result is ", 1)[1].split(" ", 1)[0]
    pages = follow_read(reader, ref, "", "bob")
    assert all(env["kind"] == "text" for env in pages)
    assert "".join(env["items"][0] for env in pages) == text


@pytest.mark.parametrize(
    ("text", "least"),
    [("plain words, " * 8000, 0.9), ('tab\tand "quotes"\n' * 5000, 0.8)],
    ids=["plain", "escapes"],
)
def test_regression_text_pages_fill_their_budget(
    store: SpillStore, reader: ResultReader, text: str, least: float
) -> None:
    # Found by a tester: every byte of text was charged as 6 (the worst escape), so a
    # page of plain text showed a sixth of its budget: 127 calls for 90 KB.
    out = ResultGate(max_bytes=4096, store=store, reader=reader, principal="bob").gate(text)
    ref = out.text.rsplit("the whole result is ", 1)[1].split(" ", 1)[0]
    pages = follow_read(reader, ref, "", "bob")
    assert "".join(env["items"][0] for env in pages) == text
    for env in pages[:-1]:
        assert len(orjson.dumps(env)) >= least * reader.max_bytes


@pytest.mark.parametrize(
    "body",
    [
        b"".join(orjson.dumps({"id": i}) + b"\n" for i in range(10_000)),  # JSON Lines
        b"[1,2,3]\n" * 3000,
        b'{"a": 1} trailing' * 10_000,
    ],
    ids=["json-lines", "arrays-one-a-line", "a-value-and-more"],
)
@pytest.mark.parametrize("kind", ["auto", "json"])
def test_regression_a_result_of_more_than_one_json_value_is_spilled_as_text(
    store: SpillStore, reader: ResultReader, body: bytes, kind: Literal["auto", "json"]
) -> None:
    """Regression: it starts with { or [, so it was spilled as JSON: the preview showed
    its first value as if it were all (``{"preview":{"id":0}}``) and read_result served
    that value with complete=true; 9,999 records were out of reach."""
    for result in (body, iter([body[:10], body[10:]])):
        out = ResultGate(max_bytes=2000, store=store, reader=reader, principal="c", kind=kind)
        assert spilled_text_read_back(out.gate(result), reader, "c") == body


def spilled_text_read_back(gated: Any, reader: ResultReader, principal: str) -> bytes:
    """What read_result gives back of a result *gated* spilled as text, page by page."""
    assert gated.kind == "text"
    assert gated.spill is not None
    assert gated.spill.media_type == "text/plain"
    ref = gated.text.rsplit("the whole result is ", 1)[1].split(" ", 1)[0]
    pages = follow_read(reader, ref, "", principal)
    return "".join(env["items"][0] for env in pages).encode()


@pytest.mark.parametrize(
    "body",
    [
        b"".join(b"[INFO] request %d served in 3 ms\n" % i for i in range(500)),
        b"[section]\nkey=value\n" * 500,
        b"[a link](http://example.com) " * 500,
        str([{"id": i, "name": "x"} for i in range(500)]).encode(),  # a Python repr
        b'{"a": 1, "b": [1 2 3]}' + b" " * 5000,
    ],
    ids=["log-lines", "ini", "markdown", "python-repr", "json-with-an-error"],
)
def test_regression_text_that_starts_like_json_is_spilled_as_text(
    store: SpillStore, reader: ResultReader, body: bytes
) -> None:
    """Regression: text that starts with [ or { and fails to parse inside the sniffed
    head (not where the head was cut) was stored as JSON: read_result then raised
    "not valid JSON" on the first call, and the result was out of reach."""
    for result in (body, body.decode(), iter([body[:10], body[10:]])):
        gated = ResultGate(max_bytes=1000, store=store, reader=reader, principal="c").gate(result)
        assert spilled_text_read_back(gated, reader, "c") == body


@pytest.mark.parametrize("index", ["²", "1" * 5000, "١", "１", "01", "-1", "+1", " 1"])
def test_regression_an_array_index_is_ascii_digits_as_rfc_6901_says(
    store: SpillStore, reader: ResultReader, index: str
) -> None:
    # str.isdigit() took "²" (int() then raised a bare ValueError), 5,000 digits (past
    # int()'s limit) and "١" or "１" (read as item 1: two pointers for one value).
    out = ResultGate(max_bytes=4096, store=store, reader=reader, principal="alice").gate(BIG)
    ref = orjson.loads(out.data)["spilled"]["ref"]
    with pytest.raises(SpillError, match="nothing stands at"):
        reader.read(ref, f"/rows/{index}", principal="alice")
    assert orjson.loads(reader.read(ref, "/rows/1", principal="alice").data)["items"]


def test_read_refuses_other_principals_and_other_reads(
    store: SpillStore, reader: ResultReader
) -> None:
    out = ResultGate(max_bytes=4096, store=store, reader=reader, principal="alice").gate(BIG)
    ref = orjson.loads(out.data)["spilled"]["ref"]
    with pytest.raises(CursorScopeError):
        reader.read(ref, "/rows", principal="mallory")
    first = reader.read(ref, "/rows", principal="alice")
    assert first.next_cursor is not None
    with pytest.raises(CursorScopeError):
        reader.read(ref, "/rows", first.next_cursor, principal="mallory")
    with pytest.raises(InvalidCursor, match="another read"):
        reader.read(ref, "/meta", first.next_cursor, principal="alice")
    with pytest.raises(InvalidCursor):
        reader.read(first.next_cursor, "/rows", principal="alice")  # a cursor is no reference
    with pytest.raises(InvalidCursor):
        reader.read("garbled-reference", principal="alice")
    with pytest.raises(SpillError, match="nothing stands at"):
        reader.read(ref, "/rows/100000", principal="alice")
    with pytest.raises(LimitError, match="pointer"):
        reader.read(ref, "rows", principal="alice")
    broken = reader.reference(store.put(b'[1, 2, "three", nope]', label="broken"), principal="a")
    with pytest.raises(SpillError, match="not valid JSON"):
        reader.read(broken, principal="a")
    assert out.spill is not None
    with pytest.raises(SpillError):
        reader.reference("result." + "0" * 64 + ".json", principal="alice")


# From the least budget a reader takes (LEAST_READ_BYTES): below it one is refused.
@given(
    st.lists(st.text(max_size=300), max_size=60),
    st.integers(min_value=LEAST_READ_BYTES, max_value=3000),
)
@settings(
    max_examples=30, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture]
)
def test_property_reads_reassemble_within_their_budget(
    tmp_path: Path, items: list[str], budget: int
) -> None:
    store = SpillStore(tmp_path / f"p{budget}")
    reader = ResultReader(spill=store, max_bytes=budget)
    ref = reader.reference(store.put(orjson.dumps(items), label="p"), principal="p")
    pages = follow_read(reader, ref, "", "p")
    got = [it for env in pages for it in env["items"]]
    assert len(got) == len(items)
    for i, item in enumerate(got):
        if item != items[i]:
            assert joined(follow_read(reader, ref, f"/{i}", "p")) == items[i]


def _bytes_read() -> int:
    """What this process has read through read(2) so far (Linux)."""
    for line in Path("/proc/self/io").read_text().splitlines():
        if line.startswith("rchar:"):
            return int(line.split()[1])
    raise AssertionError("no rchar in /proc/self/io")


def test_reading_a_spilled_list_page_by_page_reads_the_file_about_once(
    store: SpillStore,
) -> None:
    # Regression: every page parsed the result again from its first byte, so reading a
    # spilled list through read n**2 / 2 bytes; the reader now keeps the read open.
    rows = [{"i": i, "body": f"row {i} " * 8} for i in range(40_000)]
    data = orjson.dumps(rows)
    reader = ResultReader(spill=store, max_bytes=16384)
    ref = reader.reference(store.put(data, label="rows"), principal="p")
    before = _bytes_read()
    pages = follow_read(reader, ref, "", "p")
    read = _bytes_read() - before
    assert [it for env in pages for it in env["items"]] == rows
    assert len(pages) > 100
    assert read < 2 * len(data), (read, len(data))


def test_reading_a_long_spilled_string_page_by_page_reads_it_once(
    store: SpillStore, monkeypatch: pytest.MonkeyPatch
) -> None:
    # Regression: each page of a string value parsed the file up to it, built the whole
    # string and copied its rest; the string is now kept for the next page.
    import jsonbudget._agents.reader as reader_module

    note = "".join(f"line {i}: naïve — café\n" for i in range(60_000))
    data = orjson.dumps({"meta": {"note": note}})
    reader = ResultReader(spill=store, max_bytes=16384)
    ref = reader.reference(store.put(data, label="note"), principal="p")
    before = _bytes_read()
    pages = follow_read(reader, ref, "/meta/note", "p")
    read = _bytes_read() - before
    assert joined(pages) == note
    assert len(pages) > 50
    assert read < 2 * len(data), (read, len(data))
    # Past KEPT_CHARS the string is not kept: each page reads the file again, and the
    # pages are the same.
    monkeypatch.setattr(reader_module, "KEPT_CHARS", 1000)
    before = _bytes_read()
    again = follow_read(reader, ref, "/meta/note", "p")
    assert _bytes_read() - before > 20 * len(data)
    assert [env["items"] for env in again] == [env["items"] for env in pages]


def test_kept_reads_give_the_pages_a_fresh_reader_gives(store: SpillStore) -> None:
    rows = [{"i": i, "s": "é" * (i % 50)} for i in range(3000)]
    doc = {"a": rows, "b": {f"k{i}": i for i in range(2000)}}
    keeps = ResultReader(spill=store, max_bytes=1500)
    ref = keeps.reference(store.put(orjson.dumps(doc), label="doc"), principal="p")
    cursors: dict[str, str | None] = {"/a": None, "/b": None}
    done: set[str] = set()
    while len(done) < 2:
        for pointer, cursor in list(cursors.items()):  # two reads interleaved on one reader
            if pointer in done:
                continue
            fresh = ResultReader(spill=store, cursors=keeps.cursors, max_bytes=1500)
            want = fresh.read(ref, pointer, cursor, principal="p")
            got = keeps.read(ref, pointer, cursor, principal="p")
            assert orjson.loads(got.data)["items"] == orjson.loads(want.data)["items"]
            assert got.complete is want.complete
            cursors[pointer] = got.next_cursor
            if got.next_cursor is None:
                done.add(pointer)
    # A retried cursor (its kept read already used) is read again from the start.
    first = keeps.read(ref, "/a", principal="p")
    again = [keeps.read(ref, "/a", first.next_cursor, principal="p") for _ in range(2)]
    assert again[0].data.split(b'"next_cursor"')[0] == again[1].data.split(b'"next_cursor"')[0]


def test_reads_kept_open_are_bounded_and_closed(store: SpillStore) -> None:
    from jsonbudget._agents.reader import KEPT_READS

    def open_files() -> int:
        return len(list(Path("/proc/self/fd").iterdir()))

    reader = ResultReader(spill=store, max_bytes=1000)
    refs = [
        reader.reference(
            store.put(orjson.dumps(list(range(n, n + 2000))), label="n"), principal="p"
        )
        for n in range(KEPT_READS + 5)
    ]
    before = open_files()
    firsts = [reader.read(ref, principal="p") for ref in refs]
    assert open_files() - before == KEPT_READS  # the oldest were closed
    # The oldest read was let go: its next page is read again, and right.
    page = reader.read(refs[0], "", firsts[0].next_cursor, principal="p")
    first_items = orjson.loads(firsts[0].data)["items"]
    assert orjson.loads(page.data)["items"][0] == first_items[-1] + 1
    reader.close()
    assert open_files() == before


def _with_iterators(value: Any, make_iter: bool) -> Any:
    """*value* with every other list turned into an iterator over its (converted) items."""
    if isinstance(value, list):
        items = [_with_iterators(v, not make_iter) for v in value]
        return iter(items) if make_iter else items
    if isinstance(value, dict):
        return {k: _with_iterators(v, not make_iter) for k, v in value.items()}
    return value


@given(shared_json_values(60), st.booleans(), st.integers(min_value=0, max_value=3))
@settings(
    max_examples=150, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture]
)
def test_property_spill_file_is_orjson_of_the_value_iterators_included(
    tmp_path: Path, value: Any, iterators: bool, widen: int
) -> None:
    """The streamed writer is byte-identical to orjson.dumps of the (materialized) value,
    for wide values (streamed in runs) and iterators anywhere (replayed once)."""
    wide = {"pad": ["p" * 50] * (200 * widen), "value": value, "rows": [value] * (300 * widen)}
    expected = orjson.dumps(wide)
    given_value = _with_iterators(wide, True) if iterators else wide
    store = SpillStore(tmp_path / "prop")
    out = ResultGate(max_bytes=500, store=store).gate(given_value)
    if out.spill is None:
        assert out.data == expected
    else:
        assert spilled_file(store, out) == expected
        orjson.loads(out.data)


@given(odd_values(40))
@settings(
    max_examples=150, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture]
)
def test_property_spill_of_odd_values_is_the_encoders_whole_rendering(
    tmp_path: Path, value: Any
) -> None:
    # Over 512 members: streamed in runs; a nested list: the object streamed member by member.
    wide = {"big": [value] * 513, "nested": {"a": [value, {"b": value}] * 3}}
    store = SpillStore(tmp_path / "odd")
    out = ResultGate(max_bytes=500, store=store).gate(wide)
    assert out.spill is not None
    assert spilled_file(store, out) == dumps_whole(wide)


def test_default_hook_reaches_every_guard(store: SpillStore) -> None:
    small = {"price": Price("1.10")}
    big = {"prices": [Price(f"{i}.5") for i in range(5000)]}
    assert ResultGate(max_bytes=1000, store=store, default=str).gate(small).data == (
        b'{"price":"1.10"}'
    )
    out = ResultGate(max_bytes=1000, store=store, default=str).gate(big)
    assert orjson.loads(spilled_file(store, out))["prices"][4999] == "4999.5"
    assert orjson.loads(out.data)["preview"]["prices"][0] == "0.5"
    turn = TurnBudget(max_bytes=5000, store=store, default=str, max_calls=1)
    assert turn.admit(small).data == b'{"price":"1.10"}'
    assert bounded_tool(max_bytes=200, default=str)(lambda: small)() == '{"price":"1.10"}'
    assert ResultGate(max_bytes=1000, store=store).gate(small).data == (
        b'{"price":"\xe2\x80\xa6[unencodable: Price]"}'
    )


def test_read_back_a_result_nested_50000_deep(tmp_path: Path) -> None:
    """Pages of a deeply nested spilled result: depth markers, no recursion, bounded."""
    proc = run_limited(
        f"""
        import orjson
        from jsonbudget import SpillStore
        from jsonbudget._agents.reader import ResultReader
        store = SpillStore({str(tmp_path / "deep")!r})
        reader = ResultReader(spill=store, max_bytes=2000)
        deep = b"[" + b"[" * 50_000 + b"]" * 50_000 + b',"after"]'
        ref = reader.reference(store.put(deep, label="deep"), principal="p")
        for pointer in ("", "/0/0/0", "/1"):
            page = reader.read(ref, pointer, principal="p")
            assert len(page.data) <= 2000
            items = orjson.loads(page.data)["items"]
            print(items[-1] if pointer != "/0/0/0" else "…[depth: " in page.text)
        """,
        memory=1 << 30,
    )
    assert proc.returncode == 0, proc.stderr
    assert proc.stdout.splitlines() == ["after", "True", "after"]


def test_regression_results_nested_50000_deep_get_a_json_preview(tmp_path: Path) -> None:
    """A 100 KB JSON result nested 50,000 deep raised MemoryError: ijson's prefix paths,
    one per level, grew with the square of the depth. Events without them stay small."""
    proc = run_limited(
        f"""
        import orjson
        from jsonbudget import ResultGate, SpillStore
        gate = ResultGate(max_bytes=4096, store=SpillStore({str(tmp_path / "s")!r}))
        deep = b"[" * 50_000 + b"]" * 50_000
        out = gate.gate(deep)
        print(out.kind, len(out.data) <= 4096, "…[depth: " in out.text)
        value = []
        for _ in range(50_000):
            value = [value]
        out = gate.gate(value)
        whole = gate.store.read(out.spill.ref, 0, 10**7)
        orjson.loads(whole)
        print(out.kind, len(out.data) <= 4096, "…[depth: " in whole.decode())
        """,
        memory=1 << 30,
    )
    assert proc.returncode == 0, proc.stderr
    assert proc.stdout.splitlines() == ["json True True", "json True True"]


def test_a_gate_with_a_reader_spills_to_the_readers_store(tmp_path: Path) -> None:
    reader = ResultReader(spill=SpillStore(tmp_path / "r"))
    assert ResultGate(max_bytes=1000, reader=reader).store is reader.spill
    with pytest.raises(LimitError, match="the reader's spill store"):
        ResultGate(max_bytes=1000, reader=reader, store=SpillStore(tmp_path / "other"))


# --- regressions: bad bytes, parser errors, empty chunks, exact numbers, long keys --------

NOT_UTF8 = re.compile(r"…\[not UTF-8: (\d+) bytes, hex ([0-9a-f]+)\]")


def test_read_back_text_with_invalid_utf8_terminates_and_covers_every_byte(
    tmp_path: Path,
) -> None:
    """A spilled text result with a bad byte gave an empty page with the same cursor
    forever. Now each run of bad bytes is a marker with their hex, in place, and the
    pages rebuild the file byte for byte (in a subprocess: a loop here would hang)."""
    code = """
        import re, tempfile
        from jsonbudget import ResultGate, ResultReader, SpillStore, read_result
        MARK = re.compile(r"…\\[not UTF-8: (\\d+) bytes, hex ([0-9a-f]+)\\]")
        reader = ResultReader(spill=SpillStore(tempfile.mkdtemp()), max_bytes=2000)
        gate = ResultGate(max_bytes=1000, reader=reader, principal="alice")
        blobs = [
            b"log line\\n" * 50 + b"\\xff" + b"tail " * 1000,
            b"\\xff\\xfe" * 3000,                      # all bad: hex only
            bytes(range(256)) * 40,                    # binary, bad and good mixed
            b"caf\\xc3\\xa9 " * 900 + b"\\xe2\\x82",   # a character cut at the end
        ]
        for blob in blobs:
            out = gate.gate(blob, label="blob")
            ref = out.text.split("the whole result is ")[1].split(" ")[0]
            cursor, text, pages = None, "", 0
            while True:
                page = read_result(ref, "", cursor, reader=reader, principal="alice")
                assert len(page.data) <= 2000
                envelope = __import__("orjson").loads(page.data)
                (item,) = envelope["items"]
                assert item, "an empty page"
                # Every marker is reported side-band too: one report, their bytes in all.
                bad = sum(int(n) for n, _ in MARK.findall(item))
                report = {"path": "/items/0", "kind": "unencodable", "omitted": bad,
                          "unit": "bytes"}
                assert envelope.get("truncated", []) == ([report] if bad else []), envelope
                text += item
                pages += 1
                cursor = page.next_cursor
                if cursor is None:
                    break
            assert page.complete
            parts = MARK.split(text)
            rebuilt = parts[0].encode()
            for n, hexed, after in zip(parts[1::3], parts[2::3], parts[3::3]):
                assert len(bytes.fromhex(hexed)) == int(n)
                rebuilt += bytes.fromhex(hexed) + after.encode()
            assert rebuilt == blob, (len(rebuilt), len(blob))
            print(pages, end=" ")
    """
    # The spill directory is the test's own, so the run leaves nothing behind.
    done = run_limited(code.replace("tempfile.mkdtemp()", repr(str(tmp_path))), timeout=60)
    assert done.returncode == 0, done.stderr
    pages = [int(n) for n in done.stdout.split()]
    assert len(pages) == 4
    assert all(n > 1 for n in pages)


@pytest.mark.parametrize("max_bytes", [LEAST_READ_BYTES, 600, 4096])
def test_regression_read_pages_report_their_markers_side_band(
    tmp_path: Path, max_bytes: int
) -> None:
    """A string page's cut and lone-surrogate markers, and a text page's not-UTF-8
    markers, were in-band only: guarantee 3 wants each reported in `truncated` too."""
    reader = ResultReader(spill=SpillStore(tmp_path), max_bytes=max_bytes)
    gate = ResultGate(max_bytes=1000, reader=reader, principal="p")
    out = gate.gate({"s": "x" * 5000 + "é" * 3000})
    ref = orjson.loads(out.data)["spilled"]["ref"]
    pages = follow_read(reader, ref, "/s", "p")
    assert len(pages) > 1
    text = ""
    for page in pages[:-1]:
        left = int(re.findall(r"…\[truncated: (\d+) more chars\]\Z", page["items"][0])[0])
        assert page["truncated"] == [
            {"path": "/items/0", "kind": "string", "omitted": left, "unit": "chars"}
        ]
        text += page["items"][0].rsplit("…[", 1)[0]
    assert "truncated" not in pages[-1]
    assert text + pages[-1]["items"][0] == "x" * 5000 + "é" * 3000
    out = gate.gate(b"ok \xff\xfe then more\n" * 200, label="blob")
    ref = out.text.rsplit("the whole result is ", 1)[1].split(" ", 1)[0]
    for page in follow_read(reader, ref, "", "p"):
        bad = sum(int(n) for n, _ in NOT_UTF8.findall(page["items"][0]))
        assert bad
        assert page["truncated"] == [
            {"path": "/items/0", "kind": "unencodable", "omitted": bad, "unit": "bytes"}
        ]


def test_read_back_text_marks_bad_bytes_in_place(store: SpillStore, reader: ResultReader) -> None:
    blob = b"ok \xff\xfe then more\n" * 200
    out = ResultGate(max_bytes=1000, store=store, reader=reader, principal="bob").gate(blob)
    ref = out.text.rsplit("the whole result is ", 1)[1].split(" ", 1)[0]
    first = orjson.loads(reader.read(ref, principal="bob").data)["items"][0]
    assert first.startswith("ok …[not UTF-8: 2 bytes, hex fffe] then more\nok ")
    text = "".join(env["items"][0] for env in follow_read(reader, ref, "", "bob"))
    assert NOT_UTF8.sub(lambda m: bytes.fromhex(m[2]).decode("latin-1"), text) == blob.decode(
        "latin-1"
    )


@pytest.mark.parametrize(
    "body",
    [
        b'{"log": "' + b"col1\tcol2\t" * 400 + b'"}',  # whole file parsed: not JSON
        b'{"log": "' + b"col1\tcol2\t" * 40_000 + b'"}',  # a prefix parsed
        b'{"a": 1, "b": "x\ny"}' + b" " * 5000,
    ],
    ids=["whole", "prefix", "newline"],
)
def test_gate_and_turn_on_raw_control_characters_give_a_preview(
    store: SpillStore, body: bytes
) -> None:
    """ijson's Python backend raised json.JSONDecodeError through the gate."""
    out = ResultGate(max_bytes=1000, store=store).gate(body, label="logs")
    assert out.spilled
    assert len(out.data) <= 1000
    assert spilled_file(store, out) == body
    if out.kind == "json":
        orjson.loads(out.data)
    admitted = TurnBudget(max_bytes=2000, store=store).admit(body, tool="logs")
    assert admitted.spill is not None
    assert admitted.reason == "result_limit"
    assert len(admitted.data) <= 2000


def test_gate_reads_an_invalid_json_file_back_as_spill_error(
    store: SpillStore, reader: ResultReader
) -> None:
    body = b'{"log": "' + b"a\tb" * 2000 + b'"}'
    out = ResultGate(max_bytes=1000, store=store, reader=reader, principal="a", kind="json")
    gated = out.gate(body)
    assert gated.kind == "text"  # not JSON after all: a text preview says what it is
    ref = gated.text.rsplit("the whole result is ", 1)[1].split(" ", 1)[0]
    with pytest.raises(SpillError, match="not valid JSON"):
        reader.read(ref, "/log", principal="a")


def test_gate_skips_empty_chunks_when_sniffing(store: SpillStore) -> None:
    body = orjson.dumps({"rows": [{"i": i} for i in range(500)]})
    gate = ResultGate(max_bytes=1000, store=store)
    plain = gate.gate(iter([body]), label="a")
    for chunks in ([b"", body], [b"", b"", body[:1], b"", body[1:]], [bytearray(), body]):
        out = gate.gate(iter(chunks), label="b")
        assert out.kind == plain.kind == "json"
        assert out.data.split(b'"spilled"')[0] == plain.data.split(b'"spilled"')[0]
        assert spilled_file(store, out) == body
    small = gate.gate(iter([b"", b'{"a": 1}', b""]))
    assert small.kind == "json"
    assert small.data == b'{"a": 1}'


def test_gate_refuses_an_endless_run_of_empty_chunks(tmp_path: Path) -> None:
    """gate(iter(lambda: b"", None)) hung; MAX_EMPTY_CHUNKS in a row is a SpillError."""
    code = """
        import os, tempfile
        from jsonbudget import ResultGate, SpillStore, TurnBudget
        from jsonbudget._reader import MAX_EMPTY_CHUNKS
        from jsonbudget.errors import SpillError
        where = tempfile.mkdtemp()
        gate = ResultGate(max_bytes=1000, store=SpillStore(where))
        for source in (iter(lambda: b"", None),
                       __import__("itertools").chain([b"[1," * 400], iter(lambda: b"", None))):
            try:
                gate.gate(source)
            except SpillError as exc:
                assert str(MAX_EMPTY_CHUNKS) in str(exc)
            else:
                raise AssertionError("no error")
        assert os.listdir(where) == [], os.listdir(where)
        # Fewer empty chunks than the bound are only skipped.
        out = gate.gate(iter([b""] * (MAX_EMPTY_CHUNKS - 1) + [b"[1]"]))
        assert out.data == b"[1]" and out.kind == "json"
        print("ok")
    """
    # The spill directory is the test's own, so the run leaves nothing behind.
    done = run_limited(code.replace("tempfile.mkdtemp()", repr(str(tmp_path))), timeout=60)
    assert done.returncode == 0, done.stderr
    assert done.stdout.strip() == "ok"


def test_numbers_come_back_as_written(store: SpillStore, reader: ResultReader) -> None:
    """The reader and the preview parsed with floats: 19.90 came back 19.9."""
    from decimal import Decimal

    rows = [{"id": 12345678901234567, "price": Decimal("19.90"), "f": 2.5,
             "rate": Decimal("0.1000000000000000055511151231257827"), "pad": "x" * 40}
            for _ in range(100)]  # fmt: skip
    out = ResultGate(max_bytes=1024, store=store, reader=reader, principal="a").gate({"rows": rows})
    preview = out.data.split(b'"spilled"')[0]
    assert b'"price":19.90' in preview
    assert b'"rate":0.1000000000000000055511151231257827' in preview
    ref = orjson.loads(out.data)["spilled"]["ref"]
    page = reader.read(ref, "/rows/7", principal="a").data
    assert b'{"key":"price","value":19.90}' in page
    assert b'{"key":"rate","value":0.1000000000000000055511151231257827}' in page
    assert b'{"key":"f","value":2.5}' in page
    assert b'{"key":"id","value":12345678901234567}' in page
    # Regression: a pointer to one number that is not an int raised orjson's TypeError.
    price = reader.read(ref, "/rows/7/price", principal="a")
    assert orjson.loads(price.data)["items"] == [19.9]
    assert b'"items":[19.90]' in price.data
    # JSON bytes spilled as they are: the reader reads them back as they are written.
    body = b'{"v": [' + b",".join(b"1.10, 1e-7, -0.0, 3" for _ in range(300)) + b"]}"
    spilled = ResultGate(max_bytes=1000, store=store, reader=reader, principal="a").gate(body)
    ref = orjson.loads(spilled.data)["spilled"]["ref"]
    first = reader.read(ref, "/v", principal="a").data
    assert first.startswith(b'{"items":[1.10,1E-7,-0.0,3,1.10,')
    items = [i for env in follow_read(reader, ref, "/v", "a") for i in env["items"]]
    assert len(items) == 1200


@pytest.mark.parametrize("escape", [b"\\ud800", b"\\udc00", b"\\uDBFF"])
def test_preview_marks_lone_surrogates_as_the_encoder_does(
    store: SpillStore, escape: bytes
) -> None:
    """yajl wrote a lone high surrogate as "?" (and raised UnicodeDecodeError for a low
    one); the preview now marks it as the encoder marks a str."""
    rows = b",".join(b'"%d"' % i for i in range(2000))
    data = b'{"name": "caf' + escape + b'e", "rows": [' + rows + b"]}"
    out = ResultGate(max_bytes=1000, store=store).gate(data, label="r")
    assert out.kind == "json"
    name = orjson.loads(out.data)["preview"]["name"]
    assert name == "caf\ufffde…[replaced: 1 lone surrogates]"
    # A valid pair is a character, not a marker.
    pair = b'{"name": "\\ud83d\\ude00", "rows": [' + rows + b"]}"
    assert (
        orjson.loads(ResultGate(max_bytes=1000, store=store).gate(pair).data)["preview"]["name"]
        == "\U0001f600"
    )


@pytest.mark.parametrize("escape", [b"\\ud800", b"\\udc00", b"\\uDBFF"])
def test_read_back_marks_lone_surrogates_as_the_encoder_does(
    store: SpillStore, reader: ResultReader, escape: bytes
) -> None:
    """Regression: reading a spilled result back wrote a lone high surrogate as "?"
    (yajl's way), unmarked, and raised for a low one. A result holding a surrogate
    escape is now read by the Python backend, and the encoder marks the surrogate."""
    rows = b",".join(b'"%d"' % i for i in range(2000))
    data = b'{"name": "caf' + escape + b'e", "rows": [' + rows + b"]}"
    out = ResultGate(max_bytes=1000, store=store, reader=reader, principal="a").gate(data)
    ref = orjson.loads(out.data)["spilled"]["ref"]
    page = orjson.loads(reader.read(ref, "/name", principal="a").data)
    assert page["items"] == ["caf\ufffde…[replaced: 1 lone surrogates]"]
    assert [int(x) for x in follow_read(reader, ref, "/rows", "a")[0]["items"][:3]] == [0, 1, 2]


def test_a_value_under_a_long_key_is_read_by_its_pointer(
    store: SpillStore, reader: ResultReader
) -> None:
    """The page echoed the whole 2,129-character pointer and raised LimitError."""
    url = "https://example.com/search?q=" + "x" * 2100
    value = {"hits": {url: {"n": 42, "s": "é" * 3000}, "short": 1}, "pad": "p" * 5000}
    out = ResultGate(max_bytes=4096, store=store, reader=reader, principal="a").gate(value)
    ref = orjson.loads(out.data)["spilled"]["ref"]
    ptr = "/hits/" + url.replace("~", "~0").replace("/", "~1")
    members = [m for env in follow_read_long(reader, ref, ptr) for m in env["items"]]
    assert members[0] == {"key": "n", "value": 42}
    text = joined(follow_read_long(reader, ref, ptr + "/s"))
    assert text == "é" * 3000
    (n,) = orjson.loads(reader.read(ref, ptr + "/n", principal="a").data)["items"]
    assert n == 42


def follow_read_long(reader: ResultReader, ref: str, pointer: str) -> list[Any]:
    """`follow_read` for a pointer too long to echo: the echo is its start, marked."""
    pages: list[Any] = []
    cursor = None
    for _ in range(10_000):
        page = reader.read(ref, pointer, cursor, principal="a")
        assert len(page.data) <= reader.max_bytes
        env = orjson.loads(page.data)
        echo = MARKER.sub("", env["pointer"])
        assert env["pointer"] != echo
        assert pointer.startswith(echo)
        pages.append(env)
        cursor = page.next_cursor
        if cursor is None:
            return pages
    raise AssertionError("the read did not end")


# --- integers past int()'s digit limit, numbers no Decimal holds -------------------------

DIGITS_MARKER = "…[unencodable: Decimal beyond the float range]"


def test_regression_20000_digit_integer_keeps_a_json_preview(store: SpillStore) -> None:
    """Past `sys.get_int_max_str_digits()` (4,300) ijson's int() raised a bare ValueError
    out of `gate`; the integer is now read as the exact Decimal `load_json` makes of it."""
    whole = b'{"n": ' + b"9" * 20_000 + b', "x": 1}'
    out = ResultGate(max_bytes=4096, store=store).gate(whole)
    assert out.kind == "json"
    assert orjson.loads(out.data)["preview"] == {"n": DIGITS_MARKER, "x": 1}
    assert out.spill is not None
    assert store.read(out.spill.ref, 0, len(whole) + 1) == whole  # the file is the result


def test_long_integers_in_a_cut_prefix_are_marked_and_digits_in_strings_kept(
    store: SpillStore,
) -> None:
    digits = "7" * 5000  # a run past the limit inside a string: text, left as it is
    big = b"[" + b",".join(
        [orjson.dumps(digits), b"-" + b"9" * 20_000] + [b"%d" % i for i in range(100_000)]
    ) + b"]"  # fmt: skip
    out = ResultGate(max_bytes=40_000, store=store, preview_bytes=36_000).gate(big)
    assert out.kind == "json"
    preview = orjson.loads(out.data)["preview"]
    assert preview[:5] == [digits, DIGITS_MARKER, 0, 1, 2]
    assert preview[-1] == "…[omitted: more items]"  # the prefix was cut: no count


def test_regression_number_no_decimal_holds_is_a_text_preview(store: SpillStore) -> None:
    """yajl raised decimal.InvalidOperation out of `gate` for an exponent past Decimal's."""
    for number in (b"1E99999999999999999999", b"1e" + b"9" * 20_000, b"1E-" + b"9" * 5000):
        whole = b"[" + number + b", 2]" + b" " * 5000
        out = ResultGate(max_bytes=1000, store=store).gate(whole)
        assert out.kind == "text"
        assert out.text.startswith("[" + number[:40].decode())


def test_hostile_four_mib_of_long_integers_previews_in_bounded_memory(
    tmp_path: Path,
) -> None:
    code = """
        import orjson
        from jsonbudget import ResultGate, SpillStore
        huge = b"[" + b",".join([b"9" * 4301] * 1000) + b"]"  # past the 4 MiB prefix
        gate = ResultGate(max_bytes=600_000, preview_bytes=600_000,
                          store=SpillStore(TMP))
        out = gate.gate(huge)
        preview = orjson.loads(out.data)["preview"]
        assert out.kind == "json" and len(huge) > 4 << 20, out.kind
        assert preview[0] == "…[unencodable: Decimal beyond the float range]", preview[0]
        print("ok")
    """.replace("TMP", repr(str(tmp_path)))
    proc = run_limited(code, memory=1 << 30, timeout=60)
    assert proc.returncode == 0, proc.stderr[-2000:]
    assert proc.stdout == "ok\n"


@pytest.mark.parametrize("tail", [b"1234567890123", b"-12.5e+30", b"0.000001"])
def test_regression_a_number_cut_by_the_preview_prefix_is_not_shown_shortened(
    store: SpillStore, tail: bytes
) -> None:
    """The preview parses the first max(64 KiB, 8 x preview) bytes; a number that reached
    that cut was shown as the digits before it (12345 of 1234567890123)."""
    window = 64 * 1024
    head = b'{"a":['
    fill = window - len(head) - len(b'0],"n":') - 5  # the cut falls 5 bytes into the number
    whole = head + b"0," * (fill // 2) + b"0" * (fill % 2) + b'0],"n":' + tail + b"}"
    assert whole.index(tail) + 5 == window
    out = ResultGate(max_bytes=1000, store=store, preview_bytes=1000).gate(whole)
    preview = orjson.loads(out.data)["preview"]
    assert "n" not in preview  # the number was never read whole: not shown at all
    assert any(k.startswith("…") for k in preview)  # and the object says it has more


@pytest.mark.parametrize(
    ("number", "n"),
    [
        (b"1E15", 20_000),
        (b"19.90", 20_000),
        (b"0.1000000000000000055511151231257827", 5_000),
        (b"1E-400", 20_000),
    ],
)
def test_regression_a_preview_of_a_long_result_keeps_its_numbers_and_budget(
    store: SpillStore, number: bytes, n: int
) -> None:
    # Found by a tester: past the parsed prefix, the preview's counts were fixed by a
    # round trip through orjson, which made 1E+15 1000000000000000.0 and 19.90 19.9: a
    # 4 KiB preview came out 12 KiB, and a one-call turn passed its budget.
    data = b"[" + b",".join([number] * n) + b"]"
    gate = ResultGate(max_bytes=4096, store=store)
    out = gate.gate(data, label="nums")
    assert len(out.data) <= gate.preview_bytes
    preview = orjson.loads(out.data)["preview"]
    assert preview[-1] == "…[omitted: more items]"  # the prefix's count is not known
    written = out.data.split(b"[", 2)[1].split(b",")[0]
    assert written == str(Decimal(number.decode())).encode()  # as the encoder writes it
    turn = TurnBudget(max_bytes=4096, store=store, max_calls=1)
    admitted = turn.admit(data, tool="nums")
    assert not admitted.over_budget
    assert turn.report().used_bytes <= 4096


# --- regressions: hostile values met while a result is spilled ---------------------------


def test_regression_a_default_hook_that_changes_a_dict_being_spilled(tmp_path: Path) -> None:
    """The spill iterated the dict itself while the hook added to it: a bare RuntimeError
    ("dictionary changed size during iteration"). It reads a snapshot, as the encoder does."""
    code = f"""
        import orjson
        from jsonbudget import ResultGate, SpillStore, TurnBudget, gate_result

        class Handle:
            def __init__(self, owner):
                self.owner = owner

        def grow(o):
            o.owner["resolved_at"] = "now"
            return "resolved"

        def shrink(o):
            o.owner.pop("k0", None)
            return "resolved"

        store = SpillStore({str(tmp_path)!r})
        for hook in (grow, shrink):
            for call in (
                lambda d: ResultGate(max_bytes=3000, store=store, default=hook).gate(d),
                lambda d: gate_result(d, max_bytes=3000, store=store, default=hook),
                lambda d: TurnBudget(max_bytes=3000, store=store, default=hook).admit(d),
            ):
                d = {{f"k{{i}}": "v" * 50 for i in range(600)}}
                d["k300"] = Handle(d)
                out = call(d)
                spilled = orjson.loads(out.spill.path.read_bytes())
                assert list(spilled) == [f"k{{i}}" for i in range(600)], hook
                assert spilled["k300"] == "resolved"
        print("ok")
    """
    done = run_limited(code, timeout=60)
    assert done.returncode == 0, done.stderr
    assert done.stdout.split() == ["ok"]


class _Unwritable:
    pass


def _refuse(obj: object) -> object:
    raise ValueError(f"cannot serialize {type(obj).__name__}")


@pytest.mark.parametrize(
    ("value", "path"),
    [
        ([*(["x" * 60] * 300), _Unwritable(), *(["x" * 60] * 299)], "/300"),
        ({"data": {"rows": [*(["x" * 60] * 300), _Unwritable()]}}, "/data/rows/300"),
        ({**{f"k{i}": "x" * 60 for i in range(600)}, "k/300": _Unwritable()}, "/k~1300"),
        ([[*(["x" * 60] * 600), {"a": _Unwritable()}]], "/0/600/a"),
    ],
    ids=["list", "nested", "object", "deep"],
)
def test_regression_an_encode_error_met_while_spilling_names_its_place(
    store: SpillStore, value: Any, path: str
) -> None:
    """A long list is spilled in runs of items, one encoder call a run: the error named
    the item's index in its run (/45), a different, valid item."""
    for admit in (
        lambda: ResultGate(max_bytes=3000, store=store, default=_refuse).gate(value),
        lambda: TurnBudget(max_bytes=3000, store=store, default=_refuse).admit(value),
    ):
        with pytest.raises(EncodeError) as info:
            admit()
        assert info.value.path == path
        assert str(info.value).endswith(f"(at {path})")
        assert isinstance(info.value.__cause__, ValueError)


def test_regression_a_strided_or_released_memoryview_is_a_result(store: SpillStore) -> None:
    """memoryview(result).cast("B") raised a bare TypeError for a strided view and a
    ValueError for a released one."""
    data = b'{"a": 1}' + b" " * 5000
    strided = memoryview(data + data)[::2]
    released = memoryview(b'{"a": 1}')
    released.release()
    for call in (
        lambda r: ResultGate(max_bytes=1000, store=store).gate(r),
        lambda r: gate_result(r, max_bytes=1000, store=store),
        lambda r: TurnBudget(max_bytes=1000, store=store).admit(r),
    ):
        out = call(strided)
        assert out.spill is not None
        assert spilled_file(store, out) == bytes(strided)
        assert orjson.loads(call(released).data) == "…[unencodable: released memoryview]"
    chunks = iter([b"[1,", released])
    with pytest.raises(TypeError, match="released memoryview"):
        ResultGate(max_bytes=1000, store=store).gate(chunks)


@pytest.mark.parametrize("fails", [False, True], ids=["spilled", "failed"])
def test_regression_a_call_in_flight_at_reset_does_not_change_the_next_turn(
    store: SpillStore, fails: bool
) -> None:
    """Found by a tester: a call still spilling when reset() started the next turn (a
    cancelled aadmit's thread goes on) settled its reserved room against the new turn:
    its total went negative (-3,162 bytes), the turn then sent 7,148 bytes against
    max_bytes=4,000 with no over_budget anywhere; a failed spill gave the new turn a
    call it never used."""
    turn = TurnBudget(max_bytes=4000, store=store, max_calls=4)
    spilling, finish = threading.Event(), threading.Event()

    def log() -> Iterator[bytes]:
        yield b"build started\n" + b"=" * 5000  # past the limit: spilled
        spilling.set()
        assert finish.wait(30)
        if fails:
            raise RuntimeError("the tool died mid-stream")
        yield b"=" * 5000

    errors: list[BaseException] = []

    def call() -> None:
        try:
            turn.admit(log(), tool="build_log")
        except RuntimeError as exc:
            errors.append(exc)

    worker = threading.Thread(target=call)
    worker.start()
    assert spilling.wait(30)
    ended = turn.reset()
    assert ended.used_bytes > 0  # the reservation belongs to the turn it was made in
    finish.set()
    worker.join(30)
    assert not worker.is_alive()
    assert [type(e) for e in errors] == ([RuntimeError] if fails else [])
    fresh = TurnBudget(max_bytes=4000, store=store, max_calls=4)
    assert turn.report() == fresh.report()
    assert turn.remaining == fresh.remaining
    sent = [turn.admit([{"i": c, "t": "y" * 60}] * 25, tool=f"t{c}") for c in range(4)]
    assert sum(a.admitted_bytes for a in sent) == turn.report().used_bytes <= 4000


@dataclasses.dataclass
class _PageOfRows:
    query: str
    rows: Any


class _ModelOfRows(pydantic.BaseModel):
    query: str
    rows: typing.Iterable[dict[str, Any]]


class _ModelOfAnyRows(pydantic.BaseModel):
    query: str
    rows: Any


def _rows(n: int) -> Iterator[dict[str, Any]]:
    for i in range(n):
        yield {"id": i, "body": "lorem ipsum " * 20}


def test_regression_a_generator_inside_a_dataclass_is_spilled_whole(store: SpillStore) -> None:
    """Found by a tester: the size check pulled rows 0-3 from a generator inside a
    dataclass; the spill wrote the dataclass whole, re-reading the generator, and the
    file held row 4 alone (the preview showing rows the file did not have)."""
    want = orjson.dumps({"query": "cats", "rows": list(_rows(5))})
    for admit in (
        lambda v: ResultGate(max_bytes=1000, store=store).gate(v),
        lambda v: TurnBudget(max_bytes=1000, store=store).admit(v),
    ):
        out = admit(_PageOfRows("cats", _rows(5)))
        assert spilled_file(store, out) == want


def test_regression_a_pydantic_iterable_field_is_never_silently_empty() -> None:
    """Found by a tester: pydantic wrote an Iterable field (a one-shot iterator) whole to
    learn that it did not fit, and the walk after it found it drained: "rows": [] under
    complete=True, and the gate passed that on. Now it is read as a stream: its items
    as they fit, then a marker."""
    whole = encode(_ModelOfRows(query="cats", rows=_rows(5)), max_bytes=100_000)
    assert whole.complete
    assert len(orjson.loads(whole.data)["rows"]) == 5
    cut = encode(_ModelOfRows(query="cats", rows=_rows(5)), max_bytes=1000)
    assert not cut.complete
    shown = orjson.loads(cut.data)["rows"]
    assert shown[:-1] == list(_rows(len(shown) - 1))
    assert shown[-1] in ("…[omitted: more items]", f"…[omitted: {6 - len(shown)} more items]")
    assert [t.path for t in cut.truncations] == [f"/rows/{len(shown) - 1}"]


@pytest.mark.parametrize("model", [_ModelOfRows, _ModelOfAnyRows])
def test_regression_a_pydantic_iterable_field_is_spilled_whole(
    store: SpillStore, model: type[pydantic.BaseModel]
) -> None:
    """Found by a tester: the size check let pydantic write an Iterable field (or a
    generator under Any) to learn the model's size, which drained it; the preview marked
    the field, and the spill file, "the whole result", held "rows": []."""
    want = orjson.dumps({"query": "cats", "rows": list(_rows(30))})
    for admit in (
        lambda v: ResultGate(max_bytes=500, store=store).gate(v),
        lambda v: TurnBudget(max_bytes=1000, store=store).admit(v),
    ):
        out = admit(model(query="cats", rows=_rows(30)))
        assert spilled_file(store, out) == want


def test_regression_a_turns_result_limit_is_refused_by_its_own_name(store: SpillStore) -> None:
    """Found by a tester: TurnBudget(max_bytes=10_000, max_result_bytes=200) said
    "max_bytes=200 is invalid", an option the caller did not pass as 200."""
    with pytest.raises(LimitError) as info:
        TurnBudget(max_bytes=10_000, store=store, max_result_bytes=200)
    assert (info.value.name, info.value.value) == ("max_result_bytes", 200)
    assert "preview" in info.value.reason
    with pytest.raises(LimitError) as info:
        TurnBudget(max_bytes=200, store=store)
    assert (info.value.name, info.value.value) == ("max_bytes", 200)


def test_regression_json_output_numbers_parsed_longer_than_written() -> None:
    """output="json" returned the cut bytes parsed back, but a Decimal written ``1E+15``
    parses to the float 1e15, which orjson writes ``1000000000000000.0``: a list cut to
    1,000 bytes re-encoded to 3,091."""

    @bounded_tool(max_bytes=1000, output="json")
    def amounts() -> list[Decimal]:
        return [Decimal("1E+15")] * 500

    value = amounts()
    again = orjson.dumps(value)
    assert len(again) <= 1000
    assert value[0] == 1e15  # the numbers are still there, as floats
    assert "more items" in str(value[-1])  # and the cut is marked


@given(
    st.lists(
        st.one_of(
            st.builds(Decimal, st.sampled_from(["1E+15", "-9E+15", "1E+2", "1.5E+10", "0.1"])),
            st.sampled_from([b"1e15", b"2E+9", b"[1e1,1e2]", b"-1e3"]).map(orjson.Fragment),
            st.text(max_size=5),
        ),
        max_size=60,
    ),
    st.integers(64, 600),
)
def test_json_output_reencodes_within_the_budget(items: list[Any], budget: int) -> None:
    @bounded_tool(max_bytes=budget, output="json")
    def tool() -> list[Any]:
        return items

    value = tool()
    written = orjson.dumps(value)
    assert len(written) <= budget
    assert orjson.dumps(orjson.loads(written)) == written  # a framework re-encodes the same


@pytest.mark.parametrize("n", [5, 40, 300])
def test_regression_json_output_recut_counts_what_the_value_holds(n: int) -> None:
    """Found by a tester: where parsed numbers passed the budget, the parsed (already
    cut) value was cut again, so the first cut's marker counted as data: "9 more items"
    where 37 were left out."""
    for budget in range(140, 3000, 37):

        @bounded_tool(max_bytes=budget, output="json")
        def amounts() -> list[Decimal]:
            return [Decimal("1E+15")] * n

        value = amounts()
        assert len(orjson.dumps(value)) <= budget
        if isinstance(value[-1], str):
            shown = len(value) - 1
            assert value[-1] == f"…[omitted: {n - shown} more items]", (budget, value)
            assert value[:-1] == [1e15] * shown
        else:
            assert value == [1e15] * n


def test_regression_json_output_of_an_int_past_64_bits_is_that_int() -> None:
    """Found by a tester: a model holding 10**400 made output="json" raise a bare
    orjson.JSONDecodeError (orjson reads no integer past 64 bits)."""

    class Big(pydantic.BaseModel):
        x: int

    for n in (2**64, 2**70, -(2**65)):

        @bounded_tool(max_bytes=1000, output="json")
        def tool() -> Big:
            return Big(x=n)  # noqa: B023 - called at once, in this round

        # Found again by a tester: orjson reads one below the float range as a rounded
        # float, silently (2**70 came back 1.1805916207174113e+21).
        got = tool()
        assert got == {"x": n}
        assert type(got["x"]) is int
    # Past the float range no parser reading doubles reads it: marked, as everywhere
    # (tests/test_regression_r19_numbers.py).

    @bounded_tool(max_bytes=1000, output="json")
    def huge() -> Big:
        return Big(x=10**400)

    assert huge() == {"x": "…[unencodable: int beyond the float range]"}


# --- regressions: r15 (side-band reports, re-cut counts, async detection) ---------------


#: Values whose numbers parse back longer than written, and the size of each container
#: in them by its parent's pointer pattern (None: an iterator, its count unknown).
_GROWING: dict[str, tuple[Callable[[], Any], dict[str, int | None]]] = {
    "rows": (
        lambda: [{"price": Decimal("1E+15"), "i": i} for i in range(1000)],
        {"": 1000, "/#": 2},
    ),
    "flat": (lambda: [Decimal("1E+15")] * 1000, {"": 1000}),
    "object": (lambda: {f"k{i}": Decimal("5E+6") for i in range(500)}, {"": 500}),
    "long keys": (lambda: {f"{'k' * 12}{i}": Decimal("-1E+15") for i in range(500)}, {"": 500}),
    "nested": (lambda: [[Decimal("1E+15")] * 3 for _ in range(100)], {"": 100, "/#": 3}),
    "endless": (lambda: (Decimal("1E+15") for _ in itertools.count()), {"": None}),
    "endless rows": (
        lambda: ({"v": Decimal("1E+15"), "w": 1} for _ in itertools.count()),
        {"": None, "/#": 2},
    ),
}


@pytest.mark.parametrize("markers", ["text", "structured"])
@pytest.mark.parametrize("case", sorted(_GROWING))
def test_regression_json_output_at_the_least_budgets_counts_only_what_it_knows(
    case: str, markers: Literal["text", "structured"]
) -> None:
    """Found by a tester: at budgets of 64-126 bytes, where even the 64-byte cut parsed
    back grew past the budget, the parsed (already cut) value was cut again: the first
    cut's marker counted as one of its items ("1 more items" for 999), an endless
    generator was said to have "2 more items", and an object's "…" marker member was
    taken for a real key (the new marker keyed "…1", "2 more keys" for 498)."""
    make, sizes = _GROWING[case]
    for budget in range(64, 140):
        out = bounded_tool(max_bytes=budget, output="json", markers=markers)(make)()
        written = orjson.dumps(out)
        assert len(written) <= budget
        assert "…1" not in written.decode(), (budget, written)
        if markers == "structured" or not isinstance(out, list | dict):
            continue
        # Each in-band count is what the value holds; an iterator's is never given.
        stack: list[tuple[str, Any]] = [("", out)]
        while stack:
            path, node = stack.pop()
            if not isinstance(node, list | dict):
                continue
            members = list(node.items()) if isinstance(node, dict) else list(enumerate(node))
            last = members[-1][1] if members else None
            counted = re.fullmatch(r"(?:…)?\[omitted: (\d+ )?more (?:items|keys)\]", str(last))
            if counted is not None:
                size = sizes[re.sub(r"/\d+", "/#", path)]
                expected = None if size is None else size - (len(members) - 1)
                told = None if counted[1] is None else int(counted[1])
                assert told is None or told == expected, (budget, path, written)
                assert size is not None or told is None, (budget, path, written)
            stack.extend((f"{path}/{key}", item) for key, item in members)


@pytest.mark.parametrize("case", sorted(_GROWING))
def test_json_output_reports_its_cuts_to_on_truncation(case: str) -> None:
    """The side-band report of output="json" is the final cut's: each entry stands at a
    marker of the value returned, and each count is what the value holds."""
    make, sizes = _GROWING[case]
    for budget in [*range(64, 140, 3), 400, 4000]:
        reports: list[tuple[str, tuple[Truncation, ...]]] = []
        tool = bounded_tool(
            max_bytes=budget,
            output="json",
            on_truncation=lambda name, cuts: reports.append((name, cuts)),  # noqa: B023
        )(make)
        out = tool()
        ((name, cuts),) = reports
        assert name == "<lambda>"
        assert cuts
        for cut in cuts:
            at = resolve(out, cut.path)
            assert isinstance(at, str), (budget, cut, out)
            assert at.startswith(("…[", "[omitted:")), (budget, cut, out)
            if cut.kind in ("items", "keys"):
                parent, _, _ = cut.path.rpartition("/")
                size = sizes[re.sub(r"/\d+", "/#", parent)]
                shown = len(resolve(out, parent)) - 1
                assert cut.omitted == (None if size is None else size - shown), (budget, cut)
        if not isinstance(out, list | dict):
            # The last round: the whole value is one marker, reported at the root.
            assert [(t.path, t.kind) for t in cuts] == [("", "depth")]


def test_bounded_tool_on_truncation_is_called_only_for_a_cut_and_may_raise() -> None:
    seen: list[tuple[str, tuple[Truncation, ...]]] = []

    def report(name: str, cuts: tuple[Truncation, ...]) -> None:
        seen.append((name, cuts))

    value = {"tags": {"a", "b"}, "rows": list(range(500))}

    def search() -> dict[str, Any]:
        return value

    def small() -> list[int]:
        return [1, 2]

    for output in ("str", "bytes", "json"):
        tool: Any = bounded_tool(max_bytes=200, output=output, on_truncation=report)
        tool(search)()
        assert tool(small)() in ("[1,2]", b"[1,2]", [1, 2])
        ((name, cuts),) = seen
        assert name == "search"
        assert cuts == encode(value, max_bytes=200).truncations
        seen.clear()

    def fails(name: str, cuts: tuple[Truncation, ...]) -> None:
        raise RuntimeError(f"{name}: {len(cuts)} cuts")

    with pytest.raises(RuntimeError, match="<lambda>: 1 cuts"):
        bounded_tool(max_bytes=100, on_truncation=fails)(lambda: list(range(100)))()
    with pytest.raises(TypeError, match="on_truncation must be callable"):
        bounded_tool(max_bytes=100, on_truncation="log")  # type: ignore[call-overload]


_UNENCODABLE = {"tags": {"a", "b", "c"}, "score": float("nan"), "id": 2**70}


def test_regression_guards_report_the_cuts_they_pass(store: SpillStore) -> None:
    """Found by a tester: a result passed with in-band markers (a set, a NaN, a 70-bit
    int) was reported side-band nowhere: GateResult and Admitted carried no truncations,
    and the values the markers replaced existed nowhere after the gate."""
    want = encode(_UNENCODABLE, max_bytes=1000).truncations
    assert [t.kind for t in want] == ["unencodable"] * 3
    gated = ResultGate(max_bytes=1000, store=store).gate(_UNENCODABLE)
    one_call = gate_result(_UNENCODABLE, max_bytes=5000, store=store)
    admitted = TurnBudget(max_bytes=2000, store=store).admit(_UNENCODABLE)
    for out in (gated, one_call, admitted):
        assert out.spill is None
        assert out.truncations == want
        assert out.summary()["truncations"] == 3
    # Nothing cut, nothing reported: the compiled pass-through and the others.
    for clean in ({"a": [1, 2]}, b'{"a": 1}', "plain text"):
        assert ResultGate(max_bytes=1000, store=store).gate(clean).truncations == ()
        assert gate_result(clean, max_bytes=5000).truncations == ()
        assert TurnBudget(max_bytes=2000, store=store).admit(clean).truncations == ()


def _at_markers(data: bytes, cuts: tuple[Truncation, ...]) -> list[str]:
    document = orjson.loads(data)
    return [resolve(document, cut.path) for cut in cuts]


def test_regression_a_spilled_results_preview_reports_its_cuts(store: SpillStore) -> None:
    """A spilled result is whole in the store; its preview's own cuts are reported,
    under /preview, the paths pointing at the preview's markers."""
    rows = [{"id": i, "tags": {"x"}, "note": "n" * 30} for i in range(1000)]
    gated = ResultGate(max_bytes=2000, store=store).gate(rows)
    assert gated.spilled
    kinds = [t.kind for t in gated.truncations]
    assert kinds[-1] == "items"
    assert set(kinds[:-1]) == {"unencodable"}
    assert all(t.path.startswith("/preview/") for t in gated.truncations)
    markers = _at_markers(gated.data, gated.truncations)
    assert all(m.startswith("…[") for m in markers)
    shown = len(orjson.loads(gated.data)["preview"]) - 1
    assert gated.truncations[-1].omitted == 1000 - shown
    assert markers[-1] == f"…[omitted: {1000 - shown} more items]"
    # A turn's preview cut to what is left of it reports the same way.
    turn = TurnBudget(max_bytes=6000, store=store, max_calls=2)
    assert turn.admit(list(range(900))).reason == "fits"
    late = turn.admit(rows[:40])
    assert late.reason == "turn_limit"
    assert late.truncations
    assert _at_markers(late.data, late.truncations)[-1].startswith("…[omitted: ")
    # A text preview is the file's beginning, as its footer says: no JSON cut in it.
    text = ResultGate(max_bytes=1000, store=store).gate("line\n" * 1000)
    assert text.kind == "text"
    assert text.truncations == ()


def test_regression_a_parsed_previews_prefix_markers_are_reported_without_counts(
    store: SpillStore,
) -> None:
    """A JSON result spilled as bytes is previewed from its file's beginning: the
    containers that prefix cut are closed with a "more" marker (reported with no count),
    and every count inside them is unknown (None), as the in-band marker says "more"."""
    data = orjson.dumps({"rows": [{"id": i, "body": "b" * 40} for i in range(50_000)], "n": 1})
    gated = ResultGate(max_bytes=2000, store=store).gate(data)
    assert gated.spilled
    assert [(t.path, t.kind, t.omitted) for t in gated.truncations] == [
        (gated.truncations[0].path, "items", None),
        ("/preview/…", "keys", None),
    ]
    assert _at_markers(gated.data, gated.truncations) == [
        "…[omitted: more items]",
        "[omitted: more keys]",
    ]
    # The whole file within the parsed prefix: the counts are known.
    small = orjson.dumps([{"id": i} for i in range(300)])
    gated = ResultGate(max_bytes=1000, store=store).gate(small)
    ((cut,),) = [gated.truncations]
    shown = len(orjson.loads(gated.data)["preview"]) - 1
    assert (cut.kind, cut.omitted) == ("items", 300 - shown)


def test_the_pass_through_record_stays_out_of_the_cycle_collector(store: SpillStore) -> None:
    """The fast path's records have every slot filled (truncations among them), so the
    compiled constructor keeps them out of the collector: a turn keeps thousands."""
    if _frozen._maker is None:  # pragma: no cover - built without a C compiler
        return
    gated = ResultGate(max_bytes=1000, store=store).gate({"a": [1, 2]})
    admitted = TurnBudget(max_bytes=2000, store=store).admit({"a": [1, 2]})
    one_call = gate_result({"a": [1, 2]}, max_bytes=5000)
    for record in (gated, admitted, one_call):
        assert record.truncations == ()
        assert not gc.is_tracked(record)


@pytest.mark.parametrize("make", [ResultGate, TurnBudget])
def test_regression_a_read_hint_with_a_lone_surrogate_is_refused_by_name(
    make: Callable[..., object], store: SpillStore
) -> None:
    """Found by a tester: a read_hint holding a lone surrogate raised a bare TypeError
    from orjson ("str is not valid UTF-8") inside the constructor."""
    with pytest.raises(LimitError) as info:
        make(max_bytes=5000, store=store, read_hint="read it \ud800 later")
    assert info.value.name == "read_hint"
    assert "lone surrogate at character 8" in info.value.reason


async def test_regression_an_async_tool_returning_a_coroutine_is_refused_and_closed() -> None:
    """Found by a tester: an async tool that returned a coroutine (an await forgotten)
    was answered "…[unencodable: coroutine]" and the coroutine never awaited (a
    RuntimeWarning later), where the sync path closes it and raises TypeError."""

    async def work() -> int:
        return 1

    made: list[Any] = []

    async def tool() -> Any:
        made.append(work())
        return made[-1]

    with pytest.raises(TypeError, match="returned an awaitable from an async call"):
        await bounded_tool(max_bytes=100)(tool)()
    assert inspect.getcoroutinestate(made[0]) == inspect.CORO_CLOSED

    def sync_tool() -> Any:
        made.append(work())
        return made[-1]

    with pytest.raises(TypeError, match="returned an awaitable from a sync call"):
        bounded_tool(max_bytes=100)(sync_tool)()
    assert inspect.getcoroutinestate(made[1]) == inspect.CORO_CLOSED


async def test_regression_a_partial_of_an_async_call_object_is_awaited() -> None:
    """Found by a tester: a functools.partial of an object with an async __call__ was
    taken for sync (its class is partial) and refused at call time, while a partial of
    an async function was awaited."""

    async def rows(n: int) -> list[int]:
        return list(range(n))

    for fn in (
        functools.partial(AsyncCallable(), 5),
        functools.partial(functools.partial(AsyncCallable()), 5),
        functools.partial(rows, 5),
    ):
        tool = bounded_tool(max_bytes=100)(fn)
        assert inspect.iscoroutinefunction(tool)
        assert await tool() == "[0,1,2,3,4]"
    # A partial of a sync function, or of a class, stays sync.
    assert bounded_tool(max_bytes=100)(functools.partial(list, range(3)))() == "[0,1,2]"
    made = bounded_tool(max_bytes=100)(functools.partial(AsyncCallable))
    assert not inspect.iscoroutinefunction(made)  # a class: calling it makes the object
    assert made() == '"…[unencodable: AsyncCallable]"'


# --- regressions: r16 (repeated keys, keys longer than a page, the preview's marker key) --


def _json_ref(reader: ResultReader, data: bytes) -> str:
    """A reference to *data* spilled as JSON bytes, whose keys may repeat."""
    return reader.reference(reader.spill.put(data, label="r"), principal="a")


def _read_all(reader: ResultReader, ref: str, pointer: str) -> Any:
    """The whole value at *pointer*, read back page by page (members as pairs)."""
    pages = follow_read(reader, ref, pointer, "a")
    kind = pages[0]["kind"]
    items = [x for env in pages for x in env["items"]]
    if kind == "object":
        return [(m["key"], m["value"]) for m in items]
    if kind in ("string", "text"):
        return joined(pages)
    return items if kind == "array" else items[0]


def test_regression_a_repeated_key_reads_the_member_the_preview_cut(
    store: SpillStore, reader: ResultReader
) -> None:
    """Found by a tester: for `{"a":"short","a":"<5000 x>"}` the JSON preview showed the
    last `a` (as json.loads reads it) and reported its cut at /preview/a, but reading
    "/a" gave the first member, "short": the cut value could not be read back."""
    data = b'{"a":"short","a":"' + b"x" * 5000 + b'"}'
    out = ResultGate(max_bytes=600, store=store, reader=reader, principal="a").gate(data)
    assert [(t.path, t.kind) for t in out.truncations] == [("/preview/a", "string")]
    ref = orjson.loads(out.data)["spilled"]["ref"]
    assert _read_all(reader, ref, "/a") == "x" * 5000
    # The listing shows both members, as written; the first is read by its place.
    listed = _read_all(reader, ref, "")
    assert [key for key, _ in listed] == ["a", "a"]
    assert listed[0][1] == "short"
    assert listed[1][1].startswith("xxx")
    assert _read_all(reader, ref, "/~v0") == "short"


#: A result repeating keys at several depths, each pointer into it, and what it reads.
_REPEATED = (
    b'{"a":{"b":"first","c":[1]},"rows":[{"id":1,"id":2},{"x":{"y":1},"x":{"y":[5,6]}}],'
    b'"a":{"b":{"deep":"last","deep":"later"},"c":"s"},"z":null,"rows":[0,{"x":{"q":1}}]}'
)
_REPEATED_READS: dict[str, Any] = {
    "/a": [("b", {"deep": "later"}), ("c", "s")],
    "/a/b": [("deep", "last"), ("deep", "later")],
    "/a/b/deep": "later",
    "/a/c": "s",
    "/rows": [0, {"x": {"q": 1}}],
    "/rows/1/x/q": 1,
    "/~v0/c": [1],  # the first "a" by its place
    "/~v1/1/x": [("y", [5, 6])],  # the first "rows": its second "x"
    "/~v1/0/id": 2,
    "/~v1/0/~v0": 1,
    "/~k3": "z",
    "/z": None,
}


@pytest.mark.parametrize("surrogate", [False, True])
def test_regression_pointers_resolve_repeated_keys_as_json_loads(
    store: SpillStore, surrogate: bool
) -> None:
    """A pointer took the first member with each key; json.loads (and the preview) take
    the last, at every depth: `/a/b/deep` reads the last `deep` of the last `a`. (A lone
    surrogate escape sends the reader to ijson's Python backend.)"""
    data = _REPEATED[:-1] + b',"s":"\\ud800"}' if surrogate else _REPEATED
    loaded = json.loads(data)
    for pointer, want in _REPEATED_READS.items():
        reader = ResultReader(spill=store, max_bytes=1000)
        ref = _json_ref(reader, data)
        assert _read_all(reader, ref, pointer) == want, pointer
        # Read again, with what the reader learnt of the objects read to their end.
        assert _read_all(reader, ref, pointer) == want, pointer
        if "~" not in pointer and not isinstance(want, list):
            assert resolve(loaded, pointer) == want
    # The last member with a key decides, even where an earlier one holds the rest.
    reader = ResultReader(spill=store, max_bytes=1000)
    ref = _json_ref(reader, data)
    for pointer in ("/a/b/c", "/rows/0/id", "/a/b/deep/x", "/~k3/x", "/~v9", "/rows/~v0"):
        with pytest.raises(SpillError, match="nothing stands"):
            reader.read(ref, pointer, principal="a")


@pytest.mark.parametrize("kept_tail_pages", [32, 0])
def test_regression_each_listed_member_with_a_repeated_key_shows_its_own_rest(
    store: SpillStore, monkeypatch: pytest.MonkeyPatch, kept_tail_pages: int
) -> None:
    """A member cut at the page's budget read the rest of itself again by its key: where
    the events read past were not kept (`KEPT_TAIL_PAGES`), the second `a` showed the
    rest of the first. Rests are now found by the members' places."""
    from jsonbudget._agents import reader as reader_module

    monkeypatch.setattr(reader_module, "KEPT_TAIL_PAGES", kept_tail_pages)

    def member(tag: str) -> str:
        after = ",".join(f'{{"t":"{tag}{i}"}}' for i in range(30))
        return f'{{"x":"{tag}","big":"{"y" * 900}","after":[{after}],"z":"{tag}"}}'

    data = f'{{"a":{member("A1")},"b":1,"a":{member("A2")}}}'
    reader = ResultReader(spill=store, max_bytes=700)
    ref = _json_ref(reader, data.encode())
    items = [m for env in follow_read(reader, ref, "", "a") for m in env["items"]]
    assert [m["key"] for m in items] == ["a", "b", "a"]
    for item, tag in ((items[0], "A1"), (items[2], "A2")):
        value = item["value"]
        assert value["x"] == value["z"] == tag
        shown = [t for t in value["after"] if isinstance(t, dict)]
        assert shown == [{"t": f"{tag}{i}"} for i in range(len(shown))]
        assert len(shown) > 1


class _CountingSpill(SpillStore):
    """A spill store that counts the bytes its files give to readers."""

    read_bytes = 0

    def open(self, ref: SpillRef | str) -> typing.BinaryIO:
        store = self
        raw = super().open(ref)

        class Counted(io.RawIOBase):
            def readable(self) -> bool:
                return True

            def readinto(self, buffer: Any) -> int:
                data = raw.read(len(buffer))
                buffer[: len(data)] = data
                store.read_bytes += len(data)
                return len(data)

            def close(self) -> None:
                raw.close()
                super().close()

        return io.BufferedReader(Counted())


def test_repeated_key_lookups_hold_nothing_and_are_remembered(tmp_path: Path) -> None:
    """A key looked for as json.loads does reads the object to its end, holding none of
    what it passes (a 25 MB member here), parses once more only for a container, and
    a later pointer through the same object reads past it no more."""
    store = _CountingSpill(tmp_path)
    reader = ResultReader(spill=store, max_bytes=2000)
    big = b"[" + b",".join(b"%d" % i for i in range(3_000_000)) + b"]"
    data = b'{"a":1,"rows":[{"n":1}],"big":' + big + b',"a":{"k":"last"}}'
    ref = _json_ref(reader, data)
    size = len(data)
    tracemalloc_peak = _peak_of(lambda: reader.read(ref, "/a/k", principal="a"))
    assert orjson.loads(tracemalloc_peak[0].data)["items"] == ["last"]
    assert tracemalloc_peak[1] < 4 << 20
    assert size <= store.read_bytes <= size + (64 << 10)  # once: the string found on the way
    store.read_bytes = 0
    # Known now: the root repeats "a" only, so "/rows" reads up to it, as with unique keys.
    env = orjson.loads(reader.read(ref, "/rows", principal="a").data)
    assert env["items"] == [{"n": 1}]
    assert store.read_bytes <= 64 << 10
    store.read_bytes = 0
    # "a" again: the object holds it twice, so it is read to its end, and then again to
    # the container found.
    env = orjson.loads(reader.read(ref, "/a", principal="a").data)
    assert env["items"] == [{"key": "k", "value": "last"}]
    assert 2 * size - (64 << 10) <= store.read_bytes <= 2 * size + (128 << 10)
    # A reference that says the keys are unique reads the first member, up to it only.
    store.read_bytes = 0
    unique = reader.reference(store.put(data, label="r"), principal="a", unique_keys=True)
    assert orjson.loads(reader.read(unique, "/a", principal="a").data)["items"] == [1]
    assert store.read_bytes <= 64 << 10
    with pytest.raises(TypeError, match="unique_keys must be a bool"):
        reader.reference(store.put(data, label="r"), principal="a", unique_keys=1)  # type: ignore[arg-type]


def _peak_of(read: Callable[[], Any]) -> tuple[Any, int]:
    import tracemalloc

    tracemalloc.start()
    try:
        return read(), tracemalloc.get_traced_memory()[1]
    finally:
        tracemalloc.stop()


def test_a_gate_spilling_a_python_value_says_its_keys_are_unique(
    tmp_path: Path,
) -> None:
    """The encoder writes each key once: the gate's reference for a Python value lets a
    pointer take the first member, so following a result's pages reads it about once;
    JSON bytes may repeat a key, and a pointer into them reads the object to its end."""
    store = _CountingSpill(tmp_path)
    reader = ResultReader(spill=store, max_bytes=2000)
    gate = ResultGate(max_bytes=4096, reader=reader, principal="a")
    value = {"rows": [{"id": i, "note": "n" * 50} for i in range(2000)], "tail": 1}
    for result, once in ((value, True), (orjson.dumps(value), False)):
        out = gate.gate(result)
        ref = orjson.loads(out.data)["spilled"]["ref"]
        store.read_bytes = 0
        assert orjson.loads(reader.read(ref, "/rows/0", principal="a").data)["items"][0] == {
            "key": "id",
            "value": 0,
        }
        assert (store.read_bytes < out.size // 2) is once
        reader.close()


@pytest.mark.parametrize(
    ("pointer", "error"),
    [
        ("/~k0/x", "nothing stands"),  # a key holds nothing
        ("/list/~v0", "nothing stands"),  # an array has no members
        ("/~v7", "nothing stands"),
        ("/~v01", "nothing stands"),  # no place: the key "~v01", which is not there
    ],
)
def test_members_by_place_name_only_members(
    store: SpillStore, reader: ResultReader, pointer: str, error: str
) -> None:
    ref = _json_ref(reader, b'{"~v3":"a key spelled like a place","list":[1,2]}')
    with pytest.raises(SpillError, match=error):
        reader.read(ref, pointer, principal="a")
    # The key "~v3" is spelled as RFC 6901 escapes it; `~v1` is the second member.
    assert _read_all(reader, ref, "/~0v3") == "a key spelled like a place"
    assert _read_all(reader, ref, "/~v1") == [1, 2]
    assert _read_all(reader, ref, "/~k1") == "list"


def test_regression_a_member_whose_key_is_longer_than_a_page_is_read_by_its_place(
    store: SpillStore,
) -> None:
    """Found by a tester: listing an object showed a 3,000-character key cut, and its
    value could be read on only by a pointer holding the whole key, which no page
    showed: 4,271 characters of the value and 2,271 of the key could not be read back.
    The listing now gives the pointers that read both by the member's place."""
    key = hashlib.sha256(b"k").hexdigest() * 47  # 3,008 characters, e.g. a blob as a key
    value = "important " * 500
    reader = ResultReader(spill=store, max_bytes=2000)
    out = ResultGate(max_bytes=600, reader=reader, principal="a").gate(
        {"first": 1, key: value, "other": 2}
    )
    ref = orjson.loads(out.data)["spilled"]["ref"]
    items = [m for env in follow_read(reader, ref, "", "a") for m in env["items"]]
    assert [m.get("key") for m in items][::2] == ["first", "other"]
    cut = items[1]
    assert list(cut) == ["key_pointer", "value_pointer", "key", "value"]
    assert cut["key"] != key
    assert key.startswith(MARKER.sub("", cut["key"]))
    assert (cut["key_pointer"], cut["value_pointer"]) == ("/~k1", "/~v1")
    assert _read_all(reader, ref, cut["key_pointer"]) == key
    assert _read_all(reader, ref, cut["value_pointer"]) == value
    # Under a pointer, the pointers are the read's own; a key shown whole has none.
    out = ResultGate(max_bytes=600, reader=reader, principal="a").gate({"in": {key: value}})
    ref = orjson.loads(out.data)["spilled"]["ref"]
    (env,) = follow_read(reader, ref, "/in", "a")
    assert env["items"][0]["value_pointer"] == "/in/~v0"
    assert _read_all(reader, ref, "/in/~v0") == value
    (env,) = follow_read(reader, ref, "", "a")
    assert list(env["items"][0]) == ["key", "value"]


@pytest.mark.parametrize("max_bytes", [LEAST_READ_BYTES, 560, 600, 650, 2000])
@pytest.mark.parametrize("key", ["\\ud800" + "x" * 2000, "\\u0001" * 400, "k" * 3000])
def test_regression_a_member_whose_key_a_page_cannot_show_is_always_reachable(
    store: SpillStore, max_bytes: int, key: str
) -> None:
    """Found by a tester: with a key holding a lone surrogate, a 521- or 560-byte page
    showed the member as `{"…": "[omitted: 2 more keys]"}` (not even the key's start),
    and a 600-byte one with none of the key. However little of it shows, the member
    now comes with the pointers that read its key and value."""
    reader = ResultReader(spill=store, max_bytes=max_bytes)
    ref = _json_ref(reader, b'{"%s":"%s","b":1}' % (key.encode(), b"v" * 3000))
    items = [m for env in follow_read(reader, ref, "", "a") for m in env["items"]]
    assert items[0]["key_pointer"] == "/~k0"
    assert items[0]["value_pointer"] == "/~v0"
    assert items[-1] == {"key": "b", "value": 1}
    assert _read_all(reader, ref, "/~v0") == "v" * 3000
    whole = json.loads(b'"%s"' % key.encode())
    read = _read_all(reader, ref, "/~k0")
    if "\\ud800" in key:
        assert read.startswith("\ufffd")
        assert read.endswith("x" * 100)
    else:
        assert read == whole


@pytest.mark.parametrize(
    ("keys", "marker"), [([], "…"), (["…"], "…1"), (["…", "…1"], "…2"), (["…1"], "…")]
)
def test_regression_the_previews_more_keys_member_is_named_as_the_encoder_names_it(
    store: SpillStore, keys: list[str], marker: str
) -> None:
    """Found by a tester: an object the file's prefix cut was closed by a "more keys"
    member keyed "……" (then "………") where the object had a real "…" key; guards.md and
    the encoder's own cut use "…1", "…2", .... One rule, the encoder's, now names it."""
    head = ",".join(f'"{k}":{i}' for i, k in enumerate(keys))
    data = ("{" + head + ("," if head else "") + '"big":"' + "y" * 100_000 + '"}').encode()
    out = ResultGate(max_bytes=600, store=store).gate(data)
    preview = orjson.loads(out.data)["preview"]
    assert list(preview) == [*keys, marker]
    assert preview[marker] == "[omitted: more keys]"
    assert [(t.path, t.kind, t.omitted) for t in out.truncations] == [
        (f"/preview/{marker}", "keys", None)
    ]
    # The encoder's own cut of the same object names its member the same way.
    whole = {**{k: i for i, k in enumerate(keys)}, "big": 1, **{f"z{i}": i for i in range(50)}}
    assert marker in orjson.loads(encode(whole, max_bytes=64 + 8 * len(keys)).data)


def test_regression_a_member_whose_key_holds_a_lone_surrogate_is_read_by_its_place(
    store: SpillStore, reader: ResultReader
) -> None:
    """A key with a lone surrogate escape shows with U+FFFD in its place, which no pointer
    names: wherever it stands on the page, the member comes with its places."""
    ref = _json_ref(reader, b'{"a":1,"\\ud800x":{"in":2},"c":3}')
    (env,) = follow_read(reader, ref, "", "a")
    assert env["items"][0] == {"key": "a", "value": 1}
    assert env["items"][1]["key_pointer"] == "/~k1"
    assert env["items"][1]["value"] == {"in": 2}
    assert env["items"][2] == {"key": "c", "value": 3}
    assert _read_all(reader, ref, env["items"][1]["value_pointer"]) == [("in", 2)]
    assert _read_all(reader, ref, "/~k1").startswith("\ufffdx")


@pytest.mark.parametrize("size", [10, 200_000])
def test_regression_a_label_that_is_not_a_str_is_refused_before_the_result_is_read(
    tmp_path: Path, size: int
) -> None:
    # A small result passed with label=5 unchecked, and a streamed one had about eleven
    # chunks taken from the caller's generator before the spill refused the label.
    pulled = 0

    def chunks() -> Iterator[bytes]:
        nonlocal pulled
        for _ in range(size // 10):
            pulled += 1
            yield b"x" * 10

    gate = ResultGate(max_bytes=4096, store=SpillStore(tmp_path / "g"))
    turn = TurnBudget(max_bytes=100_000, store=SpillStore(tmp_path / "t"))
    before = turn.remaining
    calls: list[Callable[[], object]] = [
        lambda: gate.gate(chunks(), label=5),  # type: ignore[arg-type]
        lambda: gate.gate({"a": 1}, label=5),  # type: ignore[arg-type]
        lambda: gate_result(chunks(), max_bytes=4096, label=None),  # type: ignore[arg-type]
        lambda: turn.admit(chunks(), tool=5),  # type: ignore[arg-type]
        lambda: turn.admit({"a": 1}, tool=b"t"),  # type: ignore[arg-type]
    ]
    for call in calls:
        with pytest.raises(TypeError, match=r"(label|tool) must be a str"):
            call()
    assert pulled == 0
    assert turn.remaining == before  # no call was counted


@pytest.mark.parametrize(
    ("value", "max_bytes", "pointer"),
    [
        ([{"a": 1, "k" * 1300: "the value"}, "pad" * 300], 1000, ""),
        ({"rows": [{"k" * 2000: "v" * 2000, "b": 1}]}, 700, ""),
        ([{"a": 1, "k" * 1300: {"b": list(range(2000))}}], 600, ""),
    ],
    ids=["item", "member", "nested"],
)
def test_regression_a_key_that_spends_the_page_keeps_its_value(
    tmp_path: Path, value: Any, max_bytes: int, pointer: str
) -> None:
    # The reader's lazy rest began its tape at the member's value, not its key, once a
    # long key spent the page's budget: the value was listed as a key, the next event as
    # its value ({"a":1,"the value":null}), unmarked.
    reader = ResultReader(spill=SpillStore(tmp_path), max_bytes=max_bytes)
    gate = ResultGate(max_bytes=600, reader=reader, principal="p")
    ref = orjson.loads(gate.gate(value).data)["spilled"]["ref"]
    page = orjson.loads(read_result(ref, pointer, reader=reader, principal="p").data)
    shown = page["items"][0]
    if isinstance(value, dict):  # a member of the listed object: {"key": ..., "value": ...}
        shown, value = shown["value"], next(iter(value.values()))
    listed, truth = shown[0] if isinstance(shown, list) else shown, value[0]
    assert len(listed) <= len(truth)
    for (key, got), (real_key, real) in zip(listed.items(), truth.items(), strict=False):
        if key.startswith("…"):  # the "more keys" member
            break
        assert real_key.startswith(key.partition("…")[0])
        if isinstance(real, str):
            assert isinstance(got, str)
            assert real.startswith(got.partition("…")[0])
        elif isinstance(real, int):
            assert got == real
        else:
            assert isinstance(got, type(real) | str)


# --- regressions: r17 (what a repeated-key lookup holds, and what one scan teaches) ---


def test_regression_a_repeated_key_lookup_holds_no_key_text(tmp_path: Path) -> None:
    # Found by a tester: reading an object to its end for a later member with the key
    # kept every key's text while it read (20 MB for 400 keys of 50 KB), and the reader
    # kept each repeated key whole for its lifetime (50 MB after ten results repeating a
    # 5 MB key), where guards.md says the read holds none of it.
    reader = ResultReader(spill=SpillStore(tmp_path), max_bytes=2000)
    keys = b"".join(b'"%d' % i + b"k" * 20_000 + b'":%d,' % i for i in range(200))
    ref = _json_ref(reader, b"{" + keys + b'"last":1}')
    del keys
    page, peak = _peak_of(lambda: reader.read(ref, "/last", principal="a"))
    assert orjson.loads(page.data)["items"] == [1]
    assert peak < 1 << 20  # the object's keys are 4 MB
    import tracemalloc

    refs = []
    for i in range(3):
        key = b"%d" % i + b"k" * 1_000_000
        refs.append(_json_ref(reader, b'{"' + key + b'":1,"' + key + b'":2,"x":0}'))
    del key
    gc.collect()
    tracemalloc.start()
    try:
        for ref in refs:
            assert orjson.loads(reader.read(ref, "/x", principal="a").data)["items"] == [0]
        gc.collect()
        held = tracemalloc.get_traced_memory()[0]
    finally:
        tracemalloc.stop()
    assert held < 256 << 10  # three repeated keys of 1 MB were kept whole
    assert reader._repeats  # what was learnt is remembered: its keys' fingerprints


def test_repeated_keys_resolve_the_same_when_every_key_shares_one_fingerprint(
    store: SpillStore, monkeypatch: pytest.MonkeyPatch
) -> None:
    """The reader remembers fingerprints of repeated keys, not the keys: a key sharing
    its fingerprint with a repeated one costs a read to the object's end, never a wrong
    member."""
    import jsonbudget._agents.reader as reader_module

    monkeypatch.setattr(reader_module, "_print", lambda key: (0, 0))
    data = _REPEATED[:-1] + b',"u":{"p":1,"q":2}}'
    reader = ResultReader(spill=store, max_bytes=1000)
    ref = _json_ref(reader, data)
    reads = {**_REPEATED_READS, "/u/q": 2, "/u/p": 1}
    for pointer, want in [*reads.items(), *reversed(reads.items())]:
        assert _read_all(reader, ref, pointer) == want, pointer


def test_regression_one_scan_notes_every_object_it_read_to_its_end(tmp_path: Path) -> None:
    # Found by a tester: a scan for a repeated key noted only the object it began in, so
    # a result nested N objects deep cost N whole-file parses on its first N pointers
    # (/a/b/c/d/0, /1, /2, /3 each read all 8 MB), not one.
    store = _CountingSpill(tmp_path)
    reader = ResultReader(spill=store, max_bytes=4000)
    rows = [{"id": i, "body": "b" * 60} for i in range(20_000)]
    data = orjson.dumps({"a": {"b": {"c": {"d": rows}}}})
    ref = _json_ref(reader, data)
    reads = []
    for i in range(4):
        store.read_bytes = 0
        env = orjson.loads(reader.read(ref, f"/a/b/c/d/{i}/id", principal="a").data)
        assert env["items"] == [i]
        reads.append(store.read_bytes)
    assert reads[0] >= len(data)
    assert max(reads[1:]) <= 64 << 10, reads


def test_notes_of_nested_objects_follow_the_last_member_with_a_key(store: SpillStore) -> None:
    """Objects below an earlier member with a repeated key are noted by the same scan;
    one reader reading every pointer, in both orders, still reads what json.loads
    gives, and nothing where the last member holds nothing."""
    data = (
        b'{"a":{"b":{"k":1,"m":{"n":1}},"b":{"k":2,"k":3}},"x":{"y":{"z":1}},'
        b'"a":{"b":{"m":{"n":2}}},"x":"s"}'
    )
    reads: dict[str, Any] = {"/a/b/m/n": 2, "/a/b/m": [("n", 2)], "/~v0/b/k": 3}
    missing = ["/a/b/k", "/x/y/z", "/x/y", "/~v0/b/m"]
    for order in (1, -1):
        reader = ResultReader(spill=store, max_bytes=1000)
        ref = _json_ref(reader, data)
        for pointer in [*reads, *missing][::order] * 2:
            if pointer in reads:
                assert _read_all(reader, ref, pointer) == reads[pointer], pointer
            else:
                with pytest.raises(SpillError, match="nothing stands"):
                    reader.read(ref, pointer, principal="a")


def _no_repeated_keys(pairs: list[tuple[str, Any]]) -> dict[str, Any]:
    keys = [k for k, _ in pairs]
    assert len(set(keys)) == len(keys), keys
    return dict(pairs)


def test_regression_a_spilled_fragment_that_repeats_a_key_reads_as_its_file_says(
    store: SpillStore, reader: ResultReader
) -> None:
    """The gate mints its references with ``unique_keys=True`` (the encoder writes each
    key of an object once), but a caller's JSON text (an orjson.Fragment) was copied
    into the file byte for byte, repeated keys and all: a pointer to such a key read the
    first member where json.loads of the file reads the last. The repeat is now marked
    as any other, so the file holds no key twice and both readings agree."""
    raw = b'{"a":"first","pad":"' + b"x" * 500 + b'","a":"last","n":[{"c":1,"c":2}]}'
    value = {"x": orjson.Fragment(raw), "rows": [{"i": i, "s": "y" * 40} for i in range(200)]}
    out = ResultGate(max_bytes=1024, store=store, reader=reader, principal="alice").gate(value)
    assert out.spill is not None
    with store.open(out.spill.ref) as f:
        spilled = json.loads(f.read(), object_pairs_hook=_no_repeated_keys)
    ref = orjson.loads(out.data)["spilled"]["ref"]
    for pointer, want in (("/x/a", spilled["x"]["a"]), ("/x/n/0/c", 1)):
        page = read_result(ref, pointer, reader=reader, principal="alice")
        assert orjson.loads(page.data)["items"] == [want]
    assert spilled["x"]["a"] == "first"
    assert "last" in spilled["x"].values()


def test_regression_a_fragment_past_the_budget_is_spilled_not_passed_as_unencodable(
    store: SpillStore,
) -> None:
    """A Fragment longer than the budget was the marker "unencodable: Fragment of N
    bytes" to the renderer's whole rendering, which the gate passes on as the encoder's
    answer at any size; it is only too big, and a gate spills what is too big (its text
    was read into members when it repeated a key, which took that path)."""
    gate = ResultGate(max_bytes=1024, store=store)
    for raw in (
        b'{"a":"first","pad":"' + b"x" * 6000 + b'","a":"last"}',
        b'{"a":"first","pad":"' + b"x" * 6000 + b'","b":"last"}',
    ):
        out = gate.gate({"x": orjson.Fragment(raw), "n": 1})
        assert out.spill is not None
        with store.open(out.spill.ref) as f:
            assert json.loads(f.read())["x"]["pad"] == "x" * 6000


@pytest.mark.parametrize("fits", [True, False], ids=["fits", "spilled"])
async def test_regression_a_cancelled_aadmit_still_reading_at_reset_stays_in_its_turn(
    store: SpillStore, fits: bool
) -> None:
    """Found by a tester: an aadmit cancelled by a timeout while its thread still read the
    stream took its turn only once the stream ended, after reset() had started the next:
    turn 1's report was empty, turn 2 counted the ghost call (and one of its two calls),
    and a result of turn 2 that fitted was spilled with reason "turn_limit"."""
    turn = TurnBudget(max_bytes=2000, store=store, max_calls=2)
    reading, finish = threading.Event(), threading.Event()

    def slow() -> Iterator[bytes]:
        yield b'{"rows": ['
        reading.set()
        assert finish.wait(30)
        yield b"1, 2, 3]}" if fits else b'"' + b"z" * 5000 + b'"]}'

    import concurrent.futures

    # One worker: turn 2's calls run after the ghost's thread has ended, as they did.
    pool = concurrent.futures.ThreadPoolExecutor(1)
    asyncio.get_running_loop().set_default_executor(pool)
    call = asyncio.ensure_future(turn.aadmit(slow(), tool="slow"))
    for _ in range(3000):
        if reading.is_set():
            break
        await asyncio.sleep(0.01)
    call.cancel()  # a framework's timeout: its thread goes on reading
    with pytest.raises(asyncio.CancelledError):
        await call
    ended = turn.reset()
    assert ended.results == ()
    finish.set()
    a = await turn.aadmit("x" * 950, tool="b1")
    b = await turn.aadmit("y" * 1040, tool="b2")
    report = turn.report()
    assert [r.tool for r in report.results] == ["b1", "b2"]
    assert (a.reason, b.reason) == ("fits", "fits")
    assert report.used_bytes == 1990

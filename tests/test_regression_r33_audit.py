"""Regressions found by the r33 docs-versus-code audit: the pydantic-ai capability's
``reports``, the telemetry names, the `jsonbudget.typing` page and the MCP minimum
messages."""

from __future__ import annotations

import logging
import re
import typing
from pathlib import Path
from typing import Any

import pytest
from pydantic_ai import Agent as PydanticAgent
from pydantic_ai.messages import ModelMessage, ModelResponse, TextPart, ToolCallPart
from pydantic_ai.models.function import AgentInfo, FunctionModel
from pydantic_ai.models.test import TestModel

import jsonbudget.typing as jtyping
from jsonbudget import (
    LimitError,
    ResultReader,
    SpillStore,
    Summarizer,
    SummaryFilter,
    TurnBudget,
    encode,
    summary_attributes,
    summary_extra,
)
from jsonbudget.integrations.pydantic_ai import TurnBudgetCapability
from jsonbudget.mcp import McpPager, read_result_tool

DOCS = Path(__file__).resolve().parent.parent / "docs"


@pytest.fixture
def turn(tmp_path: Path) -> TurnBudget:
    return TurnBudget(max_bytes=10_000, store=SpillStore(tmp_path / "spill"))


# --- 1. TurnBudgetCapability's reports ----------------------------------------------------


def test_regression_capability_takes_no_reports_argument(turn: TurnBudget) -> None:
    # `reports` was a positional dataclass field: `TurnBudgetCapability(turn, ())` was
    # accepted, and the first run failed after its tools ran (a tuple has no append). As
    # on TurnBudgetHooks and TurnBudgetCallback, it is the adapter's output, no option.
    with pytest.raises(TypeError):
        TurnBudgetCapability(turn, ())  # type: ignore[arg-type, call-arg]
    with pytest.raises(TypeError):
        TurnBudgetCapability(turn, reports=[])  # type: ignore[call-arg]
    capability = TurnBudgetCapability(turn, max_reports=5)
    assert capability.reports == []
    assert TurnBudgetCapability(turn).reports is not capability.reports


def _search_agent(capability: TurnBudgetCapability) -> PydanticAgent[None, str]:
    def model(messages: list[ModelMessage], info: AgentInfo) -> ModelResponse:
        if len(messages) == 1:
            return ModelResponse(parts=[ToolCallPart("search", {"q": "x"})])
        return ModelResponse(parts=[TextPart("done")])

    agent = PydanticAgent(FunctionModel(model), capabilities=[capability])

    @agent.tool_plain
    def search(q: str) -> list[dict[str, Any]]:
        """Search."""
        return [{"q": q, "row": i} for i in range(3)]

    return agent


def test_capability_runs_share_one_reports_list(turn: TurnBudget) -> None:
    # Each run works on a copy (its for_run: dataclasses.replace, which makes an
    # init=False field anew); every run's reports still go to the capability's one list.
    capability = TurnBudgetCapability(turn)
    reports = capability.reports
    agent = _search_agent(capability)
    assert agent.run_sync("find").output == "done"
    assert agent.run_sync("find again").output == "done"
    assert capability.reports is reports
    assert len(reports) == 2
    assert all(len(report.results) == 1 for report in reports)
    # pydantic-ai's own copy of a capability (with_authority copies without __init__).
    lowered = capability.with_authority("none")
    assert lowered.reports is reports
    assert _search_agent(lowered).run_sync("find").output == "done"
    assert len(reports) == 3


def test_capability_reports_with_the_test_model(turn: TurnBudget) -> None:
    capability = TurnBudgetCapability(turn, max_reports=1)
    agent = PydanticAgent(TestModel(), capabilities=[capability])

    @agent.tool_plain
    def rows() -> list[int]:
        """Rows."""
        return list(range(10))

    agent.run_sync("go")
    agent.run_sync("go")
    assert len(capability.reports) == 1  # the newest only, in the one list


# --- 2. telemetry names -------------------------------------------------------------------


@pytest.mark.parametrize("prefix", [None, b"app.", 1, ["app."]])
def test_regression_summary_prefix_must_be_a_str(prefix: object) -> None:
    # An unchecked prefix was formatted into every name: keys such as 'Nonebytes' and
    # "b'app.'bytes" were returned, no error.
    encoded = encode({"a": 1}, max_bytes=100)
    for attributes in (summary_attributes, Summarizer().attributes):
        with pytest.raises(LimitError) as caught:
            attributes(encoded, prefix=prefix)  # type: ignore[arg-type]
        assert caught.value.name == "prefix"
        assert caught.value.value is prefix


def test_regression_summary_prefix_was_checked_after_summarizing() -> None:
    # The docs check the prefix before the object is summarized: an object no summary
    # takes raised EncodeError, and the prefix's error was never seen.
    with pytest.raises(LimitError, match="prefix"):
        summary_attributes(object(), prefix=None)  # type: ignore[arg-type]


@pytest.mark.parametrize("key", [None, b"jsonbudget", 1])
def test_regression_summary_key_must_be_a_str(key: object) -> None:
    # The same unchecked name: `extra` returned {None: summary}, and a filter with a
    # non-str key failed inside logging, at every record.
    encoded = encode({"a": 1}, max_bytes=100)
    for make in (
        lambda: summary_extra(encoded, key=key),  # type: ignore[arg-type]
        lambda: Summarizer().extra(encoded, key=key),  # type: ignore[arg-type]
        lambda: SummaryFilter(key=key),  # type: ignore[arg-type]
    ):
        with pytest.raises(LimitError) as caught:
            make()
        assert caught.value.name == "key"


def test_summary_names_that_are_str_are_kept() -> None:
    encoded = encode({"a": 1}, max_bytes=100)
    assert summary_attributes(encoded, prefix="")["kind"] == "encoded"
    assert summary_attributes(encoded, prefix="app.")["app.kind"] == "encoded"
    record = logging.makeLogRecord({"msg": "x", "app": encoded})
    SummaryFilter(key="app").filter(record)
    assert getattr(record, "app")["kind"] == "encoded"  # noqa: B009 - set by the filter


# --- 4. the jsonbudget.typing page ----------------------------------------------------------


def _typing_rows() -> dict[str, list[str]]:
    """Each name the tables of docs/typing.md list, with the string values in its row's
    second cell (the code spans that are quoted strings)."""
    rows: dict[str, list[str]] = {}
    for line in (DOCS / "typing.md").read_text(encoding="utf-8").splitlines():
        cells = [cell.strip() for cell in line.strip().strip("|").split("|")]
        if not line.startswith("| `") or len(cells) < 3:
            continue
        values = re.findall(r'`"([^"`]*)"`', cells[1])
        for name in re.findall(r"`([A-Za-z_]\w*)`", cells[0]):
            rows[name] = values
    return rows


def test_regression_typing_page_names_every_type_and_literal_value() -> None:
    # README says jsonbudget.typing names the modes, but 14 of its 25 names appeared
    # nowhere in the docs.
    rows = _typing_rows()
    assert sorted(set(jtyping.__all__) - set(rows)) == []
    assert sorted(set(rows) - set(jtyping.__all__)) == []
    for name in jtyping.__all__:
        alias = getattr(jtyping, name)
        if typing.get_origin(alias) is typing.Literal:
            assert rows[name] == list(typing.get_args(alias)), name
        else:
            assert rows[name] == [], name  # no values listed for a protocol or an alias


def test_typing_page_is_linked_from_the_readme() -> None:
    readme = (DOCS.parent / "README.md").read_text(encoding="utf-8")
    assert "(docs/typing.md)" in readme


# --- 6. the MCP minimum messages ------------------------------------------------------------

_SUM = re.compile(
    r"must be at least (\d+)\b.*envelope takes (\d+) bytes and a (?:read )?page at least "
    r"(\d+)\b.*up to (\d+) times: (\d+) \+ (\d+) \* (\d+) = (\d+)$"
)


def _check_sum(message: str, growth: int) -> int:
    found = _SUM.search(message)
    assert found is not None, message
    need, fixed, least, times, fixed2, times2, least2, total = map(int, found.groups())
    assert times == times2 == growth
    assert (fixed2, least2) == (fixed, least)
    assert fixed + growth * least == total == need
    return need


@pytest.mark.parametrize(
    ("content", "growth", "minimum"),
    [("both", 6, 2461), ("structured", 3, 1503), ("text", 3, 1420)],
)
def test_regression_mcp_pager_minimum_message_adds_up(
    content: str, growth: int, minimum: int
) -> None:
    # "at least 2461: the message's envelope takes 421 bytes and a page at least 340"
    # left out the worst-case escaping (x6, x3): the numbers did not add up.
    with pytest.raises(LimitError) as caught:
        McpPager(max_bytes=1000, content=content)  # type: ignore[arg-type]
    assert _check_sum(str(caught.value), growth) == minimum
    McpPager(max_bytes=minimum, content=content)  # type: ignore[arg-type]


def test_regression_read_result_tool_minimum_message_adds_up(tmp_path: Path) -> None:
    reader = ResultReader(spill=SpillStore(tmp_path / "spill"))
    with pytest.raises(LimitError) as caught:
        read_result_tool(reader=reader, max_bytes=1000)
    assert _check_sum(str(caught.value), 6) == 3547
    read_result_tool(reader=reader, max_bytes=3547)

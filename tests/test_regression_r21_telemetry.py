"""Token budgets, telemetry and the size-error classifier (tester report r21-tokens):
a str subclass smuggling content into a summary, guard summaries showing a free-text tool
name, odd log records, huge token counts, botocore's 413 and a counter set afterwards."""

from __future__ import annotations

import io
import logging
from collections.abc import Iterator, Mapping
from pathlib import Path
from typing import Any

import orjson
import pytest
from botocore.exceptions import ClientError  # type: ignore[import-untyped]

from jsonbudget import (
    EstimatedTokenCounter,
    Limits,
    MemoryCursorStore,
    PromptTooLong,
    ResultGate,
    Scope,
    SpillStore,
    SummaryFilter,
    TokenFitter,
    TurnBudget,
    classify_size_error,
    fit_tokens,
    paginate,
    summarize,
    summary_attributes,
)
from jsonbudget.errors import LimitError

SECRET = "alice.secret@example.com"
FREE_TEXT_TOOL = f"lookup {SECRET}"


class Smuggle(str):
    """A str whose value passes every check, but whose repr and str show a secret."""

    def __repr__(self) -> str:
        return repr(SECRET)

    def __str__(self) -> str:
        return SECRET


class LeakyInt(int):
    def __repr__(self) -> str:
        return SECRET

    __str__ = __repr__


def _plain_only(value: object) -> None:
    """Every value and key in a summary is exactly a dict, str, int, bool, float or None."""
    if type(value) is dict:
        for key, item in value.items():
            assert type(key) is str, key
            _plain_only(item)
    else:
        assert value is None or type(value) in (str, int, bool, float), type(value)


SHA = "a" * 64


class DuckSpill:
    ref = Smuggle(f"search.{SHA}.json")
    size = 10
    sha256 = Smuggle(SHA)
    media_type = Smuggle("application/json")


class DuckPage:
    items = (1,)
    complete = False
    next_cursor = None
    oversized = ({"outcome": Smuggle("skipped"), "encoded_bytes": LeakyInt(5)},)
    incomplete_reason = Smuggle("page_full")
    truncations = ({"kind": Smuggle("string"), "omitted": LeakyInt(1)},)

    def to_json(self) -> bytes:
        return b"{}"


class DuckAdmitted:
    tool = Smuggle("search")
    data = b"{}"
    kind = Smuggle("json")
    size = LeakyInt(3)
    spill = DuckSpill()
    truncations = ()
    admitted_bytes = 2
    reason = Smuggle("result_limit")
    over_budget = False


class DuckGate:
    data = b"{}"
    kind = Smuggle("text")
    size = 3
    spill = DuckSpill()
    truncations = ()


@pytest.mark.parametrize("obj", [DuckPage(), DuckSpill(), DuckAdmitted(), DuckGate()])
def test_regression_a_str_subclass_cannot_smuggle_content_into_a_summary(obj: object) -> None:
    """Found by a tester: the checks passed a str subclass's value, then kept the object
    itself, whose repr/str (what a log line and a span show) was the secret."""
    summary = summarize(obj)
    _plain_only(summary)
    assert SECRET not in repr(summary)
    assert SECRET not in str(summary_attributes(obj))
    assert SECRET not in str(list(summary_attributes(obj).values()))


def test_a_str_subclass_is_kept_as_its_plain_value() -> None:
    page = summarize(DuckPage())
    assert page["incomplete_reason"] == "page_full"
    assert page["truncation_kinds"] == {"string": 1}
    assert page["oversized_outcomes"] == {"skipped": 1}
    admitted = summarize(DuckAdmitted())
    assert (admitted["tool"], admitted["reason"], admitted["result_kind"]) == (
        "search",
        "result_limit",
        "json",
    )
    assert admitted["spill"]["ref"] == f"search.{SHA}.json"
    assert admitted["spill"]["media_type"] == "application/json"
    assert admitted["size"] is None  # an int subclass is no count
    assert summarize(DuckGate())["result_kind"] == "text"


def _turn(tmp_path: Path) -> TurnBudget:
    return TurnBudget(max_bytes=4000, store=SpillStore(tmp_path / "spill"), max_calls=2)


ROWS = [{"id": i, "email": "x"} for i in range(200)]


def test_regression_guard_summaries_drop_a_free_text_tool_name_and_its_ref(
    tmp_path: Path,
) -> None:
    """Found by a tester: `Admitted.summary()` and `TurnReport.summary()` ("never content:
    safe for logs") showed a free-text tool name and the spill ref built from it, where
    `summarize` of the same objects left both out."""
    turn = _turn(tmp_path)
    admitted = turn.admit(ROWS, tool=FREE_TEXT_TOOL)
    assert admitted.spill is not None
    for summary in (admitted.summary(), turn.report().summary(), summarize(admitted)):
        assert "alice" not in orjson.dumps(summary).decode()
    assert admitted.summary()["tool"] is None
    assert admitted.summary()["spill"]["ref"] is None


def test_regression_guard_summaries_and_summarize_show_the_same_tool_and_ref(
    tmp_path: Path,
) -> None:
    turn = _turn(tmp_path)
    gate = ResultGate(max_bytes=600, store=SpillStore(tmp_path / "gate"))
    for tool in ("search", FREE_TEXT_TOOL, "Search", "lookup-user", "x" * 41, "9lives"):
        admitted = turn.admit(ROWS, tool=tool)
        turn.reset()
        own, summary = admitted.summary(), summarize(admitted)
        assert own["tool"] == summary["tool"]
        assert own["spill"]["ref"] == summary["spill"].get("ref")
        gated = gate.gate(ROWS, label=tool)
        assert gated.summary()["spill"]["ref"] == summarize(gated)["spill"].get("ref")
    kept = turn.admit(ROWS, tool="search")
    assert kept.summary()["tool"] == "search"
    assert kept.summary()["spill"]["ref"] == kept.spill.ref  # type: ignore[union-attr]
    # A gate's ref shows its label only if that label is a short identifier.
    assert gate.gate(ROWS, label="lookup-user").summary()["spill"]["ref"] is None


def _page() -> Any:
    return paginate([{"email": SECRET}] * 50, scope=Scope("a", {}),
                    store=MemoryCursorStore(), limits=Limits(1024))  # fmt: skip


@pytest.mark.parametrize("wrap", [lambda p: p, lambda p: [p], lambda p: [[p], 1]])
def test_regression_summary_filter_scrubs_args_that_are_one_object_or_a_list(wrap: Any) -> None:
    """Found by a tester: a record whose ``args`` is a single object or a list (made by
    `logging.makeLogRecord`, as queue and socket receivers do) reached the handler with
    the page's rows, as ``%`` formats such an ``args`` as one argument."""
    page = _page()
    stream = io.StringIO()
    handler = logging.StreamHandler(stream)
    handler.addFilter(SummaryFilter())
    handler.handle(logging.makeLogRecord({"msg": "served %s", "args": wrap(page)}))
    shown = stream.getvalue()
    assert "'kind': 'page'" in shown
    assert SECRET not in shown
    assert page.next_cursor not in shown


def test_summary_filter_leaves_odd_args_without_pages_alone() -> None:
    args: object
    for args in (["a", 1], "text", 5):
        record = logging.makeLogRecord({"msg": "x %s", "args": args})
        assert SummaryFilter().filter(record)
        kept: object = record.args
        assert kept is args


class _Constant:
    def __init__(self, count: int) -> None:
        self.value = count

    def count(self, text: str) -> int:
        return self.value


def test_regression_a_huge_token_count_gives_a_bounded_limit_error() -> None:
    """Found by a tester: a count past 4,300 digits raised Python's own ValueError while
    the LimitError's message was made; 10**100 put 100 digits in it."""
    for count in (10**5000, 10**100):
        with pytest.raises(LimitError) as info:
            fit_tokens({"a": "x" * 1000}, max_tokens=10, counter=_Constant(count))
        message = str(info.value)
        assert "64-byte output counts over 1,000,000,000,000,000 tokens" in message
        assert len(message) < 200
    with pytest.raises(LimitError, match="counts 40 tokens"):
        fit_tokens({"a": "x" * 1000}, max_tokens=10, counter=_Constant(40))


def _client_error(status: object, response: Mapping[str, Any] | None = None) -> ClientError:
    body: Any = response or {
        "Error": {"Code": "413", "Message": "Request Entity Too Large"},
        "ResponseMetadata": {"HTTPStatusCode": status},
    }
    return ClientError(body, "InvokeModel")


def test_regression_botocore_client_error_with_http_413_is_prompt_too_long() -> None:
    """Found by a tester: the 413 botocore keeps in ``response["ResponseMetadata"]`` was
    never read, so a ClientError with it was None, where any other 413 is a size error."""
    assert classify_size_error(_client_error(413)) == PromptTooLong(None, None, "bedrock")
    wrapped = RuntimeError("call failed")
    wrapped.__cause__ = _client_error(413)
    assert classify_size_error(wrapped) == PromptTooLong(None, None, "bedrock")
    for status in (400, "413", True, None, 10**5000):
        assert classify_size_error(_client_error(status)) is None


class _RaisingDict(dict[str, Any]):
    def get(self, key: str, default: Any = None) -> Any:
        raise RuntimeError("no")

    def __getitem__(self, key: str) -> Any:
        raise RuntimeError("no")


class _RaisingMapping(Mapping[str, Any]):
    def __getitem__(self, key: str) -> Any:
        raise KeyError(key)

    def __iter__(self) -> Iterator[str]:
        raise RuntimeError("no")

    def __len__(self) -> int:
        return 1

    def get(self, key: str, default: Any = None) -> Any:
        raise ValueError("no")


@pytest.mark.parametrize(
    "response",
    [
        _RaisingDict(ResponseMetadata={"HTTPStatusCode": 413}),
        {"ResponseMetadata": _RaisingDict(HTTPStatusCode=413)},
        {"ResponseMetadata": _RaisingMapping()},
        _RaisingMapping(),
        {"ResponseMetadata": ["HTTPStatusCode"]},
        {"ResponseMetadata": None},
    ],
)
def test_a_hostile_botocore_response_never_raises(response: Any) -> None:
    error = RuntimeError("failed")
    error.response = response  # type: ignore[attr-defined]
    assert classify_size_error(error) is None


@pytest.mark.parametrize("counter", ["o200k_base", b"o200k_base", ["x"], ("x",), object()])
def test_regression_a_counter_set_after_construction_is_checked_at_fit(counter: Any) -> None:
    """Found by a tester: `fit` re-checked only a counter class; a str set afterwards
    (its count counts occurrences) made every output "fit" at 0 tokens."""
    fitter = TokenFitter(max_tokens=10, counter=EstimatedTokenCounter())
    fitter.counter = counter
    with pytest.raises(LimitError) as info:
        fitter.fit(["x" * 1000] * 100)
    assert info.value.name == "counter"


def test_regression_max_tokens_set_after_construction_is_checked_at_fit() -> None:
    fitter = TokenFitter(max_tokens=10, counter=EstimatedTokenCounter())
    fitter.max_tokens = 0
    with pytest.raises(LimitError, match="max_tokens=0 is invalid: must be at least 1"):
        fitter.fit([1])

"""Safe telemetry: summaries carry counts, sizes, sha256 and reasons, never content."""

from __future__ import annotations

import collections
import contextlib
import functools
import hashlib
import io
import logging
import logging.config
import math
from collections.abc import Iterator
from dataclasses import dataclass, field
from pathlib import Path
from types import SimpleNamespace
from typing import Any

import orjson
import pytest
import structlog

from jsonbudget import (
    Limits,
    MemoryCursorStore,
    ResultGate,
    Scope,
    SpillRef,
    SpillStore,
    SummaryFilter,
    Truncation,
    TurnBudget,
    encode,
    paginate,
    summarize,
    summary_attributes,
    summary_extra,
)
from jsonbudget._agents.telemetry import SUMMARY_KEY, Summarizer, summary_processor
from jsonbudget.errors import EncodeError, LimitError

SECRET = "sk-live-SECRET-4242"
CURSOR = "CURSOR-TOKEN-do-not-log"
SECRET_KEY = "alice@example.com"


@dataclass
class FakePage:
    """Duck-typed like `Page`: the fields the spec names, holding secrets everywhere."""

    items: list[Any]
    complete: bool
    next_cursor: str | None
    truncations: tuple[Truncation, ...] = ()
    oversized: list[dict[str, Any]] = field(default_factory=list)
    incomplete_reason: str | None = None

    def to_json(self) -> bytes:
        return orjson.dumps(
            {"items": self.items, "complete": self.complete, "next_cursor": self.next_cursor}
        )


def _page() -> FakePage:
    return FakePage(
        items=[{"token": SECRET, SECRET_KEY: "x" * 50}, {"token": SECRET}],
        complete=False,
        next_cursor=CURSOR,
        truncations=(
            Truncation(path=f"/items/0/{SECRET_KEY}", kind="string", omitted=48213, unit="chars"),
            Truncation(path="/items/1", kind="items", omitted=None, unit="items"),
            Truncation(path="/items/2", kind="string", omitted=7, unit="chars"),
        ),
        oversized=[{"index": 17, "encoded_bytes": 1_048_576, "outcome": "truncated"}],
        incomplete_reason="page_full",
    )


def _assert_clean(summary: object) -> None:
    text = repr(summary)
    for needle in (SECRET, CURSOR, SECRET_KEY, "/items/"):
        assert needle not in text


def test_page_summary_counts_and_hides_content() -> None:
    page = _page()
    summary = summarize(page)
    data = page.to_json()
    assert summary == {
        "kind": "page",
        "bytes": len(data),
        "sha256": hashlib.sha256(data).hexdigest(),
        "items": 2,
        "complete": False,
        "has_next_cursor": True,
        "truncations": 3,
        "truncation_kinds": {"items": 1, "string": 2},
        "omitted_known": 48220,
        "omitted_unknown": 1,
        "oversized": 1,
        "oversized_outcomes": {"truncated": 1},
        "oversized_encoded_bytes": 1_048_576,
        "oversized_unmeasured": 0,
        "incomplete_reason": "page_full",
    }
    _assert_clean(summary)


def test_hostile_duck_typed_fields_are_not_copied() -> None:
    page = _page()
    page.incomplete_reason = f"reason with {SECRET}"
    page.oversized = [{"index": 1, "encoded_bytes": SECRET, "outcome": SECRET}]
    summary = summarize(page)
    _assert_clean(summary)
    assert "incomplete_reason" not in summary
    assert summary["oversized_outcomes"] == {"other": 1}
    assert summary["oversized_encoded_bytes"] == 0


def test_encoded_summary() -> None:
    out = encode({"token": SECRET * 100, SECRET_KEY: list(range(100))}, max_bytes=200)
    summary = summarize(out)
    assert summary["kind"] == "encoded"
    assert summary["bytes"] == len(out.data)
    assert summary["sha256"] == hashlib.sha256(out.data).hexdigest()
    assert summary["complete"] is False
    assert summary["truncations"] == len(out.truncations)
    assert sum(summary["truncation_kinds"].values()) == len(out.truncations)
    _assert_clean(summary)


def test_spill_summary_keeps_ref_shape_only(tmp_path: Path) -> None:
    sha = hashlib.sha256(b"whatever").hexdigest()
    ref = SpillRef(
        ref=f"search_tool.{sha}.json",
        size=123,
        sha256=sha,
        media_type="application/json",
        label="search_tool",
        path=tmp_path / "home" / SECRET_KEY / "x.json",
    )
    summary = summarize(ref)
    assert summary == {
        "kind": "spill",
        "bytes": 123,
        "sha256": sha,
        "ref": f"search_tool.{sha}.json",
        "media_type": "application/json",
    }
    _assert_clean(summary)

    @dataclass
    class Forged:
        ref: str = SECRET
        size: int = 5
        sha256: str = SECRET
        media_type: str = SECRET

    forged = summarize(Forged())
    assert forged == {"kind": "spill", "bytes": 5, "sha256": None}


def test_bytes_and_no_hash_option() -> None:
    assert summarize(b"abc") == {
        "kind": "bytes",
        "bytes": 3,
        "sha256": hashlib.sha256(b"abc").hexdigest(),
    }
    assert Summarizer(sha256=False).summarize(b"abc") == {"kind": "bytes", "bytes": 3}
    with pytest.raises(LimitError):
        Summarizer(sha256="yes")  # type: ignore[arg-type]


def test_unknown_objects_are_refused_by_type_name_only() -> None:
    with pytest.raises(EncodeError) as info:
        summarize({"token": SECRET})
    assert SECRET not in str(info.value)
    assert "dict" in str(info.value)


def test_attributes_are_flat_and_primitive() -> None:
    attributes = summary_attributes(_page())
    assert attributes["jsonbudget.kind"] == "page"
    assert attributes["jsonbudget.truncation_kinds.string"] == 2
    assert attributes["jsonbudget.has_next_cursor"] is True
    assert all(isinstance(v, str | int | bool) for v in attributes.values())
    _assert_clean(attributes)


def test_regression_attributes_leave_out_none_in_nested_summaries() -> None:
    # Only top-level None values were left out: a gate's spill summary with a size or
    # sha256 that was not valid gave jsonbudget.spill.bytes=None, which OpenTelemetry
    # refuses as an attribute value.
    spill = SimpleNamespace(ref="not-a-store-ref", size=None, sha256="zz", media_type=None)
    gate = SimpleNamespace(data=b"{}", kind="yaml", size="2", spill=spill)
    attributes = Summarizer(sha256=False).attributes(gate, prefix="p.")
    assert attributes == {
        "p.kind": "gate",
        "p.bytes": 2,
        "p.spilled": True,
        "p.spill.kind": "spill",
        "p.truncations": 0,
        "p.omitted_known": 0,
        "p.omitted_unknown": 0,
    }
    assert None not in summary_attributes(gate).values()
    _assert_clean(attributes)


def test_logging_with_extra(caplog: pytest.LogCaptureFixture) -> None:
    logger = logging.getLogger("jsonbudget.test.extra")
    with caplog.at_level(logging.INFO, logger=logger.name):
        logger.info("served page", extra=summary_extra(_page()))
    (record,) = caplog.records
    assert getattr(record, SUMMARY_KEY)["items"] == 2
    _assert_clean(record.__dict__)
    assert SECRET not in caplog.text


def test_logging_filter_replaces_raw_objects(caplog: pytest.LogCaptureFixture) -> None:
    logger = logging.getLogger("jsonbudget.test.filter")
    guard = SummaryFilter()
    logger.addFilter(guard)
    try:
        with caplog.at_level(logging.INFO, logger=logger.name):
            logger.info("served %s", "page", extra={SUMMARY_KEY: _page()})
            logger.info("odd", extra={SUMMARY_KEY: {"token": SECRET}})
            logger.info("plain record")
            # Regression: a dict that said the kind of a summary was kept unread, with a
            # page (rows, cursor) under another key.
            logger.info("posing", extra={SUMMARY_KEY: {"kind": "page", "page": _page()}})
            logger.info("summary", extra={SUMMARY_KEY: summarize(_page())})
    finally:
        logger.removeFilter(guard)
    page_record, odd_record, plain, posing, already = caplog.records
    assert getattr(posing, SUMMARY_KEY) == {"kind": "unknown", "type": "dict"}
    assert getattr(already, SUMMARY_KEY) == summarize(_page())  # a summary stays one
    summary = getattr(page_record, SUMMARY_KEY)
    assert summary["kind"] == "page"
    assert summary["has_next_cursor"] is True
    assert getattr(odd_record, SUMMARY_KEY) == {"kind": "unknown", "type": "dict"}
    assert not hasattr(plain, SUMMARY_KEY)
    for record in caplog.records:
        _assert_clean(record.__dict__)
    formatter = logging.Formatter("%(message)s %(" + SUMMARY_KEY + ")s")
    assert SECRET not in formatter.format(page_record)
    assert CURSOR not in formatter.format(page_record)


# --- guards' results, child loggers, structlog --------------------------------------------


def _real_page() -> Any:
    rows = [{"token": SECRET, "email": SECRET_KEY, "i": i} for i in range(50)]
    return paginate(rows, scope=Scope("alice", {"q": 1}), store=MemoryCursorStore(),
                    limits=Limits(600))  # fmt: skip


def test_guard_results_are_summarized_without_content(tmp_path: Path) -> None:
    store = SpillStore(tmp_path / "spill")
    gate = ResultGate(max_bytes=1000, store=store)
    small = gate.gate({"token": SECRET})
    big = gate.gate([{"token": SECRET, "i": i} for i in range(500)], label="search")
    turn = TurnBudget(max_bytes=5000, store=store, max_calls=2)
    admitted = turn.admit([{"token": SECRET}] * 400, tool="search")
    for obj in (small, big, admitted, turn.report()):
        _assert_clean(summarize(obj))
    assert summarize(small) == {
        "kind": "gate", "bytes": len(small.data), "sha256": hashlib.sha256(small.data).hexdigest(),
        "result_kind": "json", "size": small.size, "spilled": False, "spill": None,
        "truncations": 0, "truncation_kinds": {}, "omitted_known": 0, "omitted_unknown": 0,
    }  # fmt: skip
    marked = summarize(gate.gate({"x": math.nan, "tags": {1, 2}}))
    assert (marked["truncations"], marked["truncation_kinds"]) == (2, {"unencodable": 2})
    assert marked["omitted_unknown"] == 2
    spilled = summarize(big)
    assert spilled["spilled"] is True
    assert spilled["spill"]["ref"] == big.spill.ref  # type: ignore[union-attr]
    one = summarize(admitted)
    assert (one["kind"], one["tool"], one["reason"]) == ("admitted", "search", "result_limit")
    assert one["admitted_bytes"] == len(admitted.data)
    report = summarize(turn.report())
    assert report == {"kind": "turn", "max_bytes": 5000, "used_bytes": len(admitted.data),
                      "results": 1, "spilled": 1, "over_budget": False}  # fmt: skip


def test_admitted_with_a_tool_name_that_is_not_an_identifier_drops_it(tmp_path: Path) -> None:
    turn = TurnBudget(max_bytes=5000, store=SpillStore(tmp_path / "spill"), max_calls=1)
    assert summarize(turn.admit({"a": 1}, tool=SECRET_KEY))["tool"] is None


def test_regression_a_spilled_tool_name_that_is_not_an_identifier_is_not_in_its_ref(
    tmp_path: Path,
) -> None:
    """Found by a tester: the summary dropped such a tool name, but the spill's ref,
    which starts with the name lowered (lookup_customer_alice_smith_example_com.<sha>),
    carried it into span attributes and every summarized log line."""
    turn = TurnBudget(max_bytes=2000, store=SpillStore(tmp_path / "spill"))
    admitted = turn.admit(["x" * 100] * 100, tool="lookup customer Alice.Smith@example.com")
    assert admitted.spill is not None
    summary = summarize(admitted)
    assert summary["tool"] is None
    assert "alice" not in orjson.dumps(summary).decode().lower()
    kept = summarize(turn.admit(["x" * 100] * 100, tool="lookup"))
    assert kept["spill"]["ref"].startswith("lookup.")  # an identifier's name is kept


def test_regression_handler_filter_covers_child_loggers() -> None:
    """A `SummaryFilter` on a logger let a child's record through its handler with an email,
    an SSN and a cursor in it; on the handler it covers every logger that reaches it."""
    parent = logging.getLogger("jsonbudget.test.tools")
    child = logging.getLogger("jsonbudget.test.tools.search")
    stream = io.StringIO()
    handler = logging.StreamHandler(stream)
    fmt = "%(message)s %(" + SUMMARY_KEY + ")s"
    handler.setFormatter(logging.Formatter(fmt, defaults={SUMMARY_KEY: "-"}))
    parent.addHandler(handler)
    parent.setLevel(logging.INFO)
    page = _real_page()
    try:
        parent.addFilter(SummaryFilter())  # the wrong place: children bypass it
        child.info("served", extra={SUMMARY_KEY: page})
        assert SECRET in stream.getvalue()
        stream.truncate(0)
        stream.seek(0)
        handler.addFilter(SummaryFilter())  # the right place
        child.info("served", extra={SUMMARY_KEY: page})
        child.info("served %s", page)
        child.info(page)
        logged = stream.getvalue()
    finally:
        parent.removeHandler(handler)
        parent.filters.clear()
    assert logged.count("'kind': 'page'") == 3
    assert SECRET not in logged
    assert SECRET_KEY not in logged
    assert page.next_cursor not in logged


def test_logging_config_recipe_summarizes_every_logger() -> None:
    stream = io.StringIO()
    logging.config.dictConfig({
        "version": 1,
        "disable_existing_loggers": False,
        "filters": {"jsonbudget": {"()": "jsonbudget.SummaryFilter"}},
        "handlers": {"capture": {"class": "logging.StreamHandler", "stream": stream,
                                 "filters": ["jsonbudget"]}},
        "loggers": {"jsonbudget.test.app": {"handlers": ["capture"], "level": "INFO"}},
    })  # fmt: skip
    logger = logging.getLogger("jsonbudget.test.app.deep.child")
    try:
        logger.info("page %s", _real_page())
    finally:
        logging.getLogger("jsonbudget.test.app").handlers.clear()
    assert "'kind': 'page'" in stream.getvalue()
    assert SECRET not in stream.getvalue()


def test_structlog_processor_summarizes_jsonbudget_values(tmp_path: Path) -> None:
    capture = structlog.testing.LogCapture()
    structlog.configure(processors=[summary_processor, capture])
    try:
        log = structlog.get_logger()
        gated = ResultGate(max_bytes=1000, store=SpillStore(tmp_path / "s")).gate(
            [{"token": SECRET}] * 300
        )
        log.info("page", page=_real_page(), gated=gated, count=3)
    finally:
        structlog.reset_defaults()
    (event,) = capture.entries
    assert event["page"]["kind"] == "page"
    assert event["gated"]["kind"] == "gate"
    assert event["count"] == 3
    assert SECRET not in repr(event)
    rendered = structlog.processors.JSONRenderer()(None, "info", dict(event))
    assert SECRET not in rendered


@contextlib.contextmanager
def filtered_logger(name: str) -> Iterator[tuple[logging.Logger, io.StringIO]]:
    """Logger *name* writing INFO records to a string through a `SummaryFilter`'d
    handler, as the docs attach it; the handler is removed afterwards."""
    stream = io.StringIO()
    handler = logging.StreamHandler(stream)
    handler.addFilter(SummaryFilter())
    logger = logging.getLogger(name)
    logger.addHandler(handler)
    logger.setLevel(logging.INFO)
    logger.propagate = False
    try:
        yield logger, stream
    finally:
        logger.removeHandler(handler)


def test_regression_nested_pages_in_logging_args_are_summarized() -> None:
    # A page inside a list or dict argument reached the formatter whole.
    with filtered_logger("jsonbudget.test.nested") as (logger, stream):
        page = _real_page()
        logger.info("pages %s %s", [page], ({"p": (page,)}, "x"))
        logger.info("by id %(pages)s", {"pages": {"p1": page}})
        logger.info([page])
    text = stream.getvalue()
    assert text.count("'kind': 'page'") == 4
    assert SECRET not in text
    assert SECRET_KEY not in text


def test_regression_nested_pages_in_structlog_events_are_summarized() -> None:
    capture = structlog.testing.LogCapture()
    structlog.configure(processors=[summary_processor, capture])
    try:
        page = _real_page()
        encoded = encode({"token": SECRET}, max_bytes=200)  # hashable: a set can hold it
        structlog.get_logger().info("served", pages=[page], by_id={"p1": page}, sets={encoded})
    finally:
        structlog.reset_defaults()
    (event,) = capture.entries
    assert event["pages"][0]["kind"] == "page"
    assert event["by_id"]["p1"]["kind"] == "page"
    assert event["sets"][0]["kind"] == "encoded"  # a set holding one becomes a list
    assert SECRET not in repr(event)


def test_containers_without_jsonbudget_objects_are_not_copied() -> None:
    rows = [{"a": [1, 2, (3, "x")]}, {"b": {4, 5}}]
    event = summary_processor(None, "info", {"rows": rows, "n": 3})
    assert event["rows"] is rows
    record = logging.LogRecord("t", logging.INFO, __file__, 1, "%s", (rows,), None)
    args = record.args
    SummaryFilter().filter(record)
    assert record.args is args


def test_containers_past_the_bounds_are_replaced_whole() -> None:
    # Too deep or too large to check whole: a page could hide anywhere in them.
    deep: list[Any] = [_real_page()]
    for _ in range(20):
        deep = [deep]
    wide = [*range(20_000), _real_page()]
    cyclic: list[Any] = ["a"]
    cyclic.append(cyclic)
    event = summary_processor(None, "info", {"deep": deep, "wide": wide, "cyclic": cyclic})
    assert event["deep"] == {"kind": "unchecked", "type": "list"}
    assert event["wide"] == {"kind": "unchecked", "type": "list"}
    assert event["cyclic"] == {"kind": "unchecked", "type": "list"}
    assert SECRET not in repr(event)
    shallow = summary_processor(None, "info", {"v": [[[_real_page()]]], "w": list(range(100))})
    assert shallow["v"][0][0][0]["kind"] == "page"
    assert shallow["w"] == list(range(100))


def test_a_jsonbudget_object_as_a_dict_key_replaces_the_dict() -> None:
    event = summary_processor(None, "info", {"m": {Limits(4096): 1}})  # Limits is hashable
    assert event["m"] == {"kind": "unchecked", "type": "dict"}


def test_regression_a_value_that_raises_while_read_does_not_fail_logging() -> None:
    # The filter caught EncodeError only: an attribute dict's KeyError, a failing
    # property's RuntimeError or a mapping argument that failed to iterate escaped
    # log.info() itself, as summary_processor let them escape a structlog call.
    import collections.abc

    class AttrDict(dict[str, Any]):
        __getattr__ = dict.__getitem__

    class Failing:
        @property
        def data(self) -> Any:
            raise RuntimeError("connection closed")

    class Lazy(collections.abc.Mapping[str, Any]):
        def __getitem__(self, k: str) -> Any:
            raise RuntimeError("backend gone")

        def __iter__(self) -> Any:
            raise RuntimeError("backend gone")

        def __len__(self) -> int:
            return 1

    with filtered_logger("test.telemetry.raising") as (log, stream):
        for value in (AttrDict(user="alice@example.com"), Failing()):
            log.info("served", extra={"jsonbudget": value})
        log.info("row %s", Lazy())
        log.info("rows %s %s", [Lazy()], "x")
    text = stream.getvalue()
    assert "alice@example.com" not in text
    assert text.count("served") == 2
    assert "'kind': 'unchecked'" in text
    assert "'error': 'RuntimeError'" in text
    event = summary_processor(None, "info", {"event": "x", "row": Lazy()})
    assert event["row"] == {"kind": "unchecked", "type": "Lazy", "error": "RuntimeError"}


def test_regression_a_bad_sha256_option_is_reported_as_passed() -> None:
    """Found by a tester: LimitError.value was the argument's type name, so
    Summarizer(sha256=1) said "sha256='int' is invalid", as if the string 'int' had
    been passed; errors.md says value is what was passed."""
    for bad in (1, "yes", None):
        with pytest.raises(LimitError) as info:
            Summarizer(sha256=bad)  # type: ignore[arg-type]
        assert info.value.name == "sha256"
        assert info.value.value is bad
        assert str(info.value) == (
            f"sha256={bad!r} is invalid: must be a bool, not {type(bad).__name__}"
        )


class _Holder:
    """A user's object holding a page, whose repr shows it (as a dataclass's would)."""

    def __init__(self, page: Any) -> None:
        self.page = page

    def __repr__(self) -> str:
        return f"_Holder(page={self.page!r})"


def test_regression_a_page_inside_any_other_object_does_not_reach_the_formatter() -> None:
    """Found by a tester: the filter opened lists, tuples, sets and dicts only, so a page
    in a deque, a dict view or an object's attributes reached the formatter, whose
    repr(Page) printed every row."""
    page = _real_page()
    assert SECRET in repr(page)  # what would be logged if the filter let it through
    holders = [
        collections.deque([page]),
        {"p": page}.values(),
        {"p": page}.items(),
        SimpleNamespace(page=page),
        _Holder(page),
        functools.partial(print, page),
        page.to_json,  # a bound method's repr shows the page it is bound to
    ]
    with filtered_logger("jsonbudget.test.holders") as (logger, stream):
        for holder in holders:
            logger.info("%s", holder)
            logger.info("nested %r", [holder])
    text = stream.getvalue()
    assert SECRET not in text
    assert SECRET_KEY not in text
    assert text.count("'kind': 'unchecked'") == 2 * len(holders)
    assert "'type': 'deque'" in text
    event = summary_processor(None, "info", {"q": collections.deque([page])})
    assert event["q"] == {"kind": "unchecked", "type": "deque"}
    # Holding none, they pass as they are: the same objects, not copies.
    plain = (collections.deque([1, 2]), SimpleNamespace(a=[1]), {"a": 1}.values(), _Holder(3))
    record = logging.LogRecord("t", logging.INFO, __file__, 1, "%s %s %s %s", plain, None)
    SummaryFilter().filter(record)
    assert record.args is plain

"""Safe telemetry: summaries carry counts, sizes, sha256 and reasons, never content."""

from __future__ import annotations

import hashlib
import logging
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import orjson
import pytest

from jsonbudget import (
    SpillRef,
    SummaryFilter,
    Truncation,
    encode,
    summarize,
    summary_attributes,
    summary_extra,
)
from jsonbudget._agents.telemetry import SUMMARY_KEY, Summarizer
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
    finally:
        logger.removeFilter(guard)
    page_record, odd_record, plain = caplog.records
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

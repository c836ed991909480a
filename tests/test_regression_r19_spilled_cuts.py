"""r19-options defect 1: the markers a spill file holds (a NaN, a set, lone surrogates) are
cuts; the store keeps their reports beside the file and a read reports each it serves."""

from __future__ import annotations

import os
from pathlib import Path
from typing import Any

import orjson
import pytest

from jsonbudget import (
    Limits,
    Paginator,
    RedisSpillStore,
    ResultGate,
    ResultReader,
    Scope,
    SpillStore,
    Truncation,
    read_result,
)
from tests.fixtures_redis import RedisServer

ROW = {"id": 0, "x": float("nan"), "tags": {"a"}, "big": "y" * 5000}


def _spilled_row(store: Any, markers: str = "text") -> tuple[ResultReader, str]:
    reader = ResultReader(spill=store, max_bytes=1000)
    pager = Paginator(
        Limits(700),
        oversized="spill",
        spill_store=store,
        markers=markers,  # type: ignore[arg-type]
        spill_ref=lambda s, sc: reader.reference(s, principal=sc.principal),
    )
    page = pager.paginate([ROW], scope=Scope("p", {}))
    assert page.oversized[0].outcome == "spilled"
    ref = page.oversized[0].ref
    assert ref is not None
    return reader, ref


def _read(reader: ResultReader, ref: str, pointer: str, cursor: str | None = None) -> Any:
    page = read_result(ref, pointer, cursor, reader=reader, principal="p")
    assert len(page.data) <= reader.max_bytes
    return orjson.loads(page.data), page.next_cursor


def _at(doc: Any, path: str) -> Any:
    for token in path.split("/")[1:]:
        key = token.replace("~1", "/").replace("~0", "~")
        doc = doc[int(key)] if isinstance(doc, list) else doc[key]
    return doc


def test_regression_spilled_item_unencodable_reported_on_read(tmp_path: Path) -> None:
    store = SpillStore(tmp_path)
    reader, ref = _spilled_row(store)
    doc, _ = _read(reader, ref, "/x")
    assert doc["items"] == ["…[unencodable: nan]"]
    assert doc["truncated"] == [
        {"path": "/items/0", "kind": "unencodable", "omitted": None, "unit": "bytes"}
    ]
    doc, _ = _read(reader, ref, "")
    reported = {t["path"]: t["kind"] for t in doc["truncated"]}
    assert reported["/items/1/value"] == "unencodable"  # x
    assert reported["/items/2/value"] == "unencodable"  # tags
    for path in reported:
        assert _at(doc, path) is not None


def test_regression_spilled_item_structured_marker_reported_on_read(tmp_path: Path) -> None:
    reader, ref = _spilled_row(SpillStore(tmp_path), "structured")
    doc, _ = _read(reader, ref, "/tags")
    assert doc["items"] == [
        {"key": "$truncated", "value": {"kind": "unencodable", "what": "set of 1 items"}}
    ]
    assert {"path": "/items", "kind": "unencodable", "omitted": None, "unit": "bytes"} in doc[
        "truncated"
    ]


def test_regression_spill_store_keeps_cuts_beside_result(tmp_path: Path) -> None:
    store = SpillStore(tmp_path)
    page = Paginator(Limits(700), oversized="spill", spill_store=store).paginate(
        [ROW], scope=Scope("p", {})
    )
    ref = page.oversized[0].ref
    assert ref is not None
    assert store.cuts(ref) == (
        Truncation("/x", "unencodable", None, "bytes"),
        Truncation("/tags", "unencodable", None, "bytes"),
    )
    # A result stored by older code has no cuts file: none, and it reads as before.
    plain = store.put(b'{"a":1}', label="old")
    assert store.cuts(plain.ref) == ()
    # The cuts go with their result.
    store2 = SpillStore(tmp_path, max_total_bytes=1)
    store2.cleanup()
    assert not [n for n in os.listdir(tmp_path) if n.endswith(".cuts")]


def test_regression_long_string_lone_surrogates_reported_on_read(tmp_path: Path) -> None:
    store = SpillStore(tmp_path)
    reader = ResultReader(spill=store, max_bytes=1000)
    gate = ResultGate(max_bytes=600, store=store, reader=reader, principal="p")
    text = "\ud800" + "z" * 70_000 + "\udfff"
    out = gate.gate({"s": text, "n": [1, float("inf")]})
    ref = orjson.loads(out.data)["spilled"]["ref"]
    doc, _ = _read(reader, ref, "/n")
    assert doc["truncated"] == [
        {"path": "/items/1", "kind": "unencodable", "omitted": None, "unit": "bytes"}
    ]
    cursor: str | None = None
    last: Any = None
    while True:
        last, cursor = _read(reader, ref, "/s", cursor)
        if cursor is None:
            break
    assert {"path": "/items/0", "kind": "unencodable", "omitted": 2, "unit": "chars"} in last[
        "truncated"
    ]


@pytest.mark.parametrize("max_bytes", [521, 2000])
def test_regression_many_spilled_cuts_stay_within_page(tmp_path: Path, max_bytes: int) -> None:
    store = SpillStore(tmp_path)
    reader = ResultReader(spill=store, max_bytes=max_bytes)
    gate = ResultGate(max_bytes=600, store=store, reader=reader, principal="p")
    value = {"rows": [{"v": float("nan"), "k": i} for i in range(300)] + [float("nan")] * 300}
    ref = orjson.loads(gate.gate(value).data)["spilled"]["ref"]
    seen = 0
    cursor: str | None = None
    while True:
        doc, cursor = _read(reader, ref, "/rows", cursor)
        for report in doc.get("truncated", ()):
            if report["kind"] == "unencodable":
                assert _at(doc, report["path"]) in ("…[unencodable: nan]",)
                seen += 1
        if cursor is None:
            break
    assert seen == 600


def test_regression_redis_spill_keeps_cuts(redis_server: RedisServer) -> None:
    store = RedisSpillStore(redis_server.url, prefix="test:r19cuts:")
    reader, ref = _spilled_row(store)
    doc, _ = _read(reader, ref, "/x")
    assert doc["truncated"] == [
        {"path": "/items/0", "kind": "unencodable", "omitted": None, "unit": "bytes"}
    ]
    plain = store.put(b'{"a":1}', label="old")
    assert store.cuts(plain.ref) == ()

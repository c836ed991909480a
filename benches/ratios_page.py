"""Page measures against issue 4's target, each in the same run as ``orjson.dumps(rows)``.

``run(quick)`` returns rows ``(measure, value, unit, target)``: paging all N generated
database-like rows (200,000 = 52 MB; 50,000 with ``quick``) in 64 KiB pages,

* through one configured `Paginator` with a `MemoryCursorStore` and a `SequenceSource`,
  following ``next_cursor`` to the end: the way to page in a loop (target >= 0.85);
* through the one-call `paginate`, which finds its configured pager by its options
  (target >= 0.80);
* through `PageBuilder.add`, item by item from one list iterator, the item that did not
  fit carried to the next page: the path of sources read one item at a time (info);

as throughput / ``orjson.dumps(rows)`` throughput, plus the peak memory of one pass.
Before timing, one pass of each is checked: every page within 64 KiB and valid JSON,
every row exactly once and in order.

Run: ``python benches/ratios_page.py [--quick]`` (or through ``benches/ratios.py``).
"""

from __future__ import annotations

import sys
from collections.abc import Callable
from pathlib import Path
from typing import Any

if __name__ == "__main__":  # run as a script: make `benches` importable
    sys.path.insert(0, str(Path(__file__).resolve().parent.parent))

import orjson
from benches import _data
from benches._timing import Row, interleaved, peak_bytes

from jsonbudget import (
    Limits,
    MemoryCursorStore,
    Page,
    PageBuilder,
    Paginator,
    Scope,
    SequenceSource,
    paginate,
)

KIB = 1024
PAGE_BYTES = 64 * KIB
SCOPE = Scope("bench-principal", {"table": "orders"})


def builder_pages(rows: list[Any], limits: Limits) -> list[bytes]:
    """Every row, page after page, through `PageBuilder` alone."""
    pages: list[bytes] = []
    it = iter(rows)
    carried: list[Any] = []  # the look-ahead item the last page refused
    while True:
        builder = PageBuilder(limits)
        for item in carried:
            if not builder.add(item):  # pragma: no cover - an empty page takes any item
                raise AssertionError("an empty page refused an item")
        carried = []
        more = False
        for item in it:
            if not builder.add(item):
                carried.append(item)
                more = True
                break
        if more:
            pages.append(builder.finish(complete=False, next_cursor="c" * 32).data)
        else:
            pages.append(builder.finish(complete=True).data)
            return pages


def _follow(
    rows: list[Any], page: Callable[[SequenceSource[Any], str | None], Page], *, keep: bool = True
) -> list[bytes]:
    """Page through *rows*, following ``next_cursor`` to the end: every page's bytes, or
    with ``keep=False`` only the last one (pages are handed on one at a time in real use).
    """
    source = SequenceSource(rows)
    pages: list[bytes] = []
    cursor: str | None = None
    while True:
        got = page(source, cursor)
        if keep or got.complete:
            pages.append(got.data)
        if got.complete:
            return pages
        cursor = got.next_cursor


def pager_pages(rows: list[Any], pager: Paginator) -> list[bytes]:
    """Every row through one configured `Paginator`."""
    return _follow(rows, lambda source, cursor: pager.paginate(source, scope=SCOPE, cursor=cursor))


def paginated_pages(
    rows: list[Any], limits: Limits, store: MemoryCursorStore, *, keep: bool = True
) -> list[bytes]:
    """Every row through the one-call `paginate`."""
    return _follow(
        rows,
        lambda source, cursor: paginate(
            source, scope=SCOPE, cursor=cursor, store=store, limits=limits
        ),
        keep=keep,
    )


def check(pages: list[bytes], rows: list[Any], what: str) -> None:
    """Every page within budget and valid; every row once, in order, unchanged."""
    ids: list[int] = []
    for i, data in enumerate(pages):
        if len(data) > PAGE_BYTES:
            raise AssertionError(f"{what}: page {i} has {len(data)} bytes")
        env = orjson.loads(data)
        if env.get("truncated") or env.get("oversized"):
            raise AssertionError(f"{what}: page {i} cut a row that fits a page")
        ids.extend(item["id"] for item in env["items"])
        if (i == len(pages) - 1) != env["complete"]:
            raise AssertionError(f"{what}: page {i} says complete={env['complete']}")
    if ids != [r["id"] for r in rows]:
        raise AssertionError(f"{what}: rows lost, repeated or out of order")


def run(quick: bool = False) -> list[Row]:
    n_rows = 50_000 if quick else 200_000
    rows = _data.rows(n_rows)
    limits = Limits(PAGE_BYTES)
    store = MemoryCursorStore()
    whole = orjson.dumps(rows)
    mb = len(whole) / 1e6
    del whole

    pager = Paginator(limits, store=store)
    built = pager_pages(rows, pager)
    check(built, rows, "Paginator")
    check(paginated_pages(rows, limits, store), rows, "paginate")
    check(builder_pages(rows, limits), rows, "PageBuilder")

    t = interleaved(
        {
            "orjson": lambda: orjson.dumps(rows),
            "pager": lambda: pager_pages(rows, pager),
            "paginate": lambda: paginated_pages(rows, limits, store),
            "builder": lambda: builder_pages(rows, limits),
        },
        rounds=5 if quick else 7,
    )
    # Pages are handed on one at a time in real use: the peak of one pass that keeps
    # only the last page says what paging itself holds.
    peak_page, _ = peak_bytes(lambda: paginated_pages(rows, limits, store, keep=False))
    peak_orjson, _ = peak_bytes(lambda: len(orjson.dumps(rows)))

    label = f"paging {n_rows:,} rows ({mb:.0f} MB) in 64 KiB pages"
    return [
        (
            f"{label}, Paginator+MemoryCursorStore: throughput / orjson.dumps",
            t.median("orjson") / t.median("pager"),
            "x",
            ">= 0.85",
        ),
        (
            "  the one-call paginate: throughput / orjson.dumps",
            t.median("orjson") / t.median("paginate"),
            "x",
            ">= 0.80",
        ),
        (
            "  PageBuilder.add, one item at a time: throughput / orjson.dumps",
            t.median("orjson") / t.median("builder"),
            "x",
            "(info)",
        ),
        ("  Paginator throughput", mb / t.median("pager"), "MB/s", "(info)"),
        ("  orjson.dumps(rows) throughput (ref)", mb / t.median("orjson"), "MB/s", "(ref)"),
        ("  pages per pass", float(len(built)), "pages", "(info)"),
        ("  paginate, one pass: peak memory (last page kept)", peak_page / KIB, "KiB", "(info)"),
        ("  orjson.dumps(rows): peak memory (ref)", peak_orjson / KIB, "KiB", "(ref)"),
    ]


if __name__ == "__main__":
    for name, value, unit, target in run(quick="--quick" in sys.argv):
        print(f"{name:80s} {value:12.3f} {unit:5s} target {target}")

"""Pages under pytest-benchmark: paging rows in 64 KiB pages, next to ``orjson.dumps``.

Run: ``python -m pytest benches/bench_page.py --benchmark-only`` (timings), or with
``--benchmark-disable`` as a smoke test: every case checks each page is within 64 KiB and
valid JSON, and that every row comes back once, in order. The issue's target (paging
throughput >= 0.80 of ``orjson.dumps(rows)``) is checked at 200,000 rows by
``benches/ratios.py``.
"""

from __future__ import annotations

from typing import Any

import orjson
import pytest
from benches import _data
from benches.ratios_page import PAGE_BYTES, SCOPE, builder_pages, check, paginated_pages

from jsonbudget import Limits, MemoryCursorStore, PageBuilder, SequenceSource, paginate

LIMITS = Limits(PAGE_BYTES)


@pytest.fixture(scope="module")
def rows() -> list[dict[str, Any]]:
    return _data.rows(5_000)


def test_page_all_rows_page_builder(benchmark: Any, rows: list[dict[str, Any]]) -> None:
    pages = benchmark(builder_pages, rows, LIMITS)
    assert len(pages) > 10
    check(pages, rows, "PageBuilder")


def test_page_all_rows_paginate(benchmark: Any, rows: list[dict[str, Any]]) -> None:
    store = MemoryCursorStore()
    pages = benchmark(paginated_pages, rows, LIMITS, store)
    assert len(pages) > 10
    check(pages, rows, "paginate")


def test_page_all_rows_orjson_reference(benchmark: Any, rows: list[dict[str, Any]]) -> None:
    data = benchmark(orjson.dumps, rows)
    assert len(data) > 10 * PAGE_BYTES


def test_first_page_paginate(benchmark: Any, rows: list[dict[str, Any]]) -> None:
    store = MemoryCursorStore()
    source = SequenceSource(rows)
    page = benchmark(lambda: paginate(source, scope=SCOPE, cursor=None, store=store, limits=LIMITS))
    env = orjson.loads(page.to_json())
    assert len(page.data) <= PAGE_BYTES
    assert env["items"] == rows[: len(env["items"])]
    assert env["complete"] is False
    assert env["next_cursor"] == page.next_cursor


def test_one_page_builder_fill(benchmark: Any, rows: list[dict[str, Any]]) -> None:
    def one() -> tuple[bool, bytes]:
        builder = PageBuilder(LIMITS)
        more = builder.fill(rows)
        return more, builder.finish(complete=not more, next_cursor="c" * 32).data

    more, data = benchmark(one)
    assert more
    env = orjson.loads(data)
    assert len(data) <= PAGE_BYTES
    assert env["items"] == rows[: len(env["items"])]

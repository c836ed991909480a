"""Regression (r19): a page that ends on a key too long to store resumes at its row.

The position was the last short key plus an offset from it: a row inserted or deleted
between the two between pages moved the offset, and the next page skipped a row that
never changed (complete all the same) or served one twice.
"""

from __future__ import annotations

import sqlite3
from collections.abc import Callable, Iterator
from typing import Any

import psycopg
import pytest

from jsonbudget import Limits, MemoryCursorStore, PostgresSource, Scope, SQLiteSource, paginate
from jsonbudget._sources.base import Position
from jsonbudget.errors import InvalidCursor
from tests.fixtures_postgres import PostgresServer

LONG_X, LONG_W, LONG_Y = "x" * 5000, "w" * 5000, "y" * 5000  # keys over 4,096 bytes

# Runs SQL on the table the source reads (the PostgreSQL form of the marks).
Execute = Callable[[str, tuple[Any, ...]], None]


@pytest.fixture(params=["sqlite", "postgres"])
def table(
    request: pytest.FixtureRequest,
) -> Iterator[tuple[Callable[[], Any], Execute]]:
    """A table t (id, c) ordered by ``-c``: rows 1 and 2 long-keyed, then 'b' and 'a'."""
    rows = [(1, LONG_X), (2, LONG_W), (3, "b"), (4, "a")]
    if request.param == "sqlite":
        conn = sqlite3.connect(":memory:", isolation_level=None)
        conn.execute("CREATE TABLE t (id INTEGER PRIMARY KEY, c TEXT)")
        conn.executemany("INSERT INTO t VALUES (?, ?)", rows)

        def run(sql: str, params: tuple[Any, ...]) -> None:
            conn.execute(sql.replace("%s", "?"), params)

        yield (lambda: SQLiteSource(conn, table="t", order_by=("-c",))), run
        conn.close()
        return
    server: PostgresServer = request.getfixturevalue("postgres_server")
    with psycopg.connect(server.dsn, autocommit=True) as pg:
        pg.execute("DROP TABLE IF EXISTS r19_long")
        pg.execute('CREATE TABLE r19_long (id int PRIMARY KEY, c text COLLATE "C")')
        with pg.cursor() as cur:
            cur.executemany("INSERT INTO r19_long VALUES (%s, %s)", rows)

        def run_pg(sql: str, params: tuple[Any, ...]) -> None:
            pg.execute(sql.replace(" t ", " r19_long "), params)

        try:
            yield (lambda: PostgresSource(pg, table="r19_long", order_by=("-c",))), run_pg
        finally:
            pg.execute("DROP TABLE r19_long")


def _paged(source: Any, pages_before: int, change: Callable[[], None]) -> list[int]:
    """Ids served by paginate, one a page, *change* run after *pages_before* pages."""
    store, scope, limits = MemoryCursorStore(), Scope("u", {}), Limits(400, max_items=1)
    page = paginate(source, scope=scope, store=store, limits=limits)
    seen = [row["id"] for row in page.items]
    while page.next_cursor:
        if len(seen) == pages_before:
            change()
        page = paginate(source, scope=scope, cursor=page.next_cursor, store=store, limits=limits)
        seen += [row["id"] for row in page.items]
    assert page.complete
    return seen


def _opened(source: Any, pages_before: int, change: Callable[[], None]) -> list[int]:
    """The same through `open`, the position of each page's one row kept."""
    seen: list[int] = []
    position: Position | None = None
    while True:
        if len(seen) == pages_before:
            change()
        rows = list(source.open(position, limit_hint=1))[:1]
        if not rows:
            return seen
        seen.append(rows[0][0]["id"])
        position = rows[0][1]


@pytest.mark.parametrize("pages", [_paged, _opened])
def test_regression_long_key_position_skips_no_row_deleted_before_it(
    table: tuple[Callable[[], Any], Execute], pages: Callable[..., list[int]]
) -> None:
    # After rows 1 and 2 (both long-keyed: the position is an offset of 2 from the
    # start), row 1 is deleted: OFFSET 2 then skipped row 3, which never changed.
    source, run = table
    assert pages(source(), 2, lambda: run("DELETE FROM t WHERE id = %s", (1,))) == [1, 2, 3, 4]


@pytest.mark.parametrize("pages", [_paged, _opened])
def test_regression_long_key_position_repeats_no_row_inserted_before_it(
    table: tuple[Callable[[], Any], Execute], pages: Callable[..., list[int]]
) -> None:
    # A long key sorting before row 1 inserted after page 1: OFFSET 1 served row 1 again.
    source, run = table
    insert = "INSERT INTO t VALUES (%s, %s)"
    assert pages(source(), 1, lambda: run(insert, (5, LONG_Y))) == [1, 2, 3, 4]


@pytest.mark.parametrize("pages", [_paged, _opened])
def test_regression_long_key_position_whose_row_is_gone_is_refused(
    table: tuple[Callable[[], Any], Execute], pages: Callable[..., list[int]]
) -> None:
    # The row the page ended on deleted: its place cannot be found again, and row 2 was
    # skipped silently (the offset of 1 then landed on row 3).
    source, run = table
    with pytest.raises(InvalidCursor, match="changed since the cursor was minted"):
        pages(source(), 1, lambda: run("DELETE FROM t WHERE id = %s", (1,)))


# --- found by a sweep of this fix ---------------------------------------------------------


def _long_keyed(rows: int, body: int) -> sqlite3.Connection:
    conn = sqlite3.connect(":memory:", isolation_level=None)
    conn.execute("CREATE TABLE t (id INTEGER PRIMARY KEY, c TEXT, body TEXT)")
    conn.executemany(
        "INSERT INTO t VALUES (?, ?, ?)",
        [(i, f"{LONG_X}5{i:03d}", "b" * body) for i in range(1, rows + 1)],
    )
    return conn


def test_regression_finding_a_long_key_row_again_reads_no_whole_cells() -> None:
    # The rows looked at to find the page's row again were read with every cell whole:
    # with 2 MB cells beside the key, one 8 KiB page after an insert held ~70 MB.
    import tracemalloc

    conn = _long_keyed(12, 2_000_000)
    source = SQLiteSource(conn, table="t", order_by=("c",))  # no max_cell_bytes
    store, scope, limits = MemoryCursorStore(), Scope("u", {}), Limits(8192, max_items=1)
    page = paginate(source, scope=scope, store=store, limits=limits)
    conn.execute("INSERT INTO t VALUES (1000, ?, 'x')", (LONG_X + "0000",))  # behind it
    tracemalloc.start()
    try:
        page = paginate(source, scope=scope, cursor=page.next_cursor, store=store, limits=limits)
        peak = tracemalloc.get_traced_memory()[1]
    finally:
        tracemalloc.stop()
    assert [row["id"] for row in page.items] == [2]
    assert peak < 1_000_000  # a page of 8 KiB, not the cells around the row
    conn.close()


def test_regression_a_long_key_position_counts_from_where_its_row_was_found() -> None:
    # The 32-row window was measured from where the run of long keys first started:
    # 17 rows inserted before page 2 and 16 before page 3 refused page 3, though only 16
    # changed since its cursor was minted.
    conn = _long_keyed(10, 10)
    source = SQLiteSource(conn, table="t", order_by=("c",), max_cell_bytes=64)
    store, scope, limits = MemoryCursorStore(), Scope("u", {}), Limits(1000, max_items=1)
    page = paginate(source, scope=scope, store=store, limits=limits)
    seen = [row["id"] for row in page.items]
    new = 100
    for inserted in (17, 16, 20, 20):
        for _ in range(inserted):  # long keys sorting before every row served
            conn.execute("INSERT INTO t VALUES (?, ?, '')", (new, f"{LONG_X}0{new:03d}"))
            new += 1
        page = paginate(source, scope=scope, cursor=page.next_cursor, store=store, limits=limits)
        seen += [row["id"] for row in page.items]
    assert seen == [1, 2, 3, 4, 5]
    conn.close()

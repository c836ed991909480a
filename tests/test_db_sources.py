"""Database sources over a real SQLite file and a real PostgreSQL started by the suite."""

from __future__ import annotations

import contextlib
import datetime as dt
import enum
import os
import sqlite3
import sys
import tempfile
import threading
import time
import uuid
from collections.abc import Callable, Iterator
from concurrent.futures import ThreadPoolExecutor
from decimal import Decimal
from pathlib import Path
from typing import Any, Literal

import orjson
import psycopg
import pytest
from hypothesis import HealthCheck, example, given, settings
from hypothesis import strategies as st
from psycopg.types.json import Json, Jsonb

from jsonbudget import (
    Limits,
    MemoryCursorStore,
    PageBuilder,
    PostgresSource,
    Scope,
    Source,
    SQLiteSource,
    paginate,
)
from jsonbudget._sources.base import Clipped, Position
from jsonbudget._sources.sql import KEY_POSITION_BYTES, MIN_CELL_BYTES
from jsonbudget.errors import InvalidCursor, LimitError, SpillError
from tests.fixtures_postgres import PostgresServer
from tests.limited import bounded_run
from tests.test_file_sources import PAGE_ALL_4K
from tests.test_sources import pages_by_fill, pages_by_paginate, read_in_pages, roundtrip, take


def ids(rows: list[tuple[dict[str, Any], Position]]) -> list[int]:
    return [row["id"] for row, _ in rows]


def all_ids(source: Source[dict[str, Any]], position: Position | None = None) -> list[int]:
    return ids(list(source.open(position)))


def page_through(source: Source[dict[str, Any]], size: int, between: Any = None) -> list[int]:
    """Follow positions page by page; call between(page_no) after each page."""
    out: list[int] = []
    position: Position | None = None
    for page_no in range(10_000):
        got = take(source, position, size + 1)
        out.extend(ids(got[:size]))
        if len(got) <= size:
            return out
        position = roundtrip(got[size - 1][1])
        if between is not None:
            between(page_no)
    raise AssertionError("did not terminate")


# --- SQLite -----------------------------------------------------------------------------


@pytest.fixture
def sqlite_db(tmp_path: Path) -> Iterator[tuple[Path, sqlite3.Connection]]:
    path = tmp_path / "db.sqlite"
    conn = sqlite3.connect(path, isolation_level=None)
    conn.execute("CREATE TABLE t (id INTEGER PRIMARY KEY, grp TEXT NOT NULL, body BLOB)")
    conn.executemany(
        "INSERT INTO t VALUES (?, ?, ?)",
        [(i, "ab"[(i // 2) % 2], bytes([i % 256]) * 3) for i in range(2, 202, 2)],
    )
    yield path, conn
    conn.close()


def test_sqlite_rows_are_dicts_in_key_order(sqlite_db: tuple[Path, sqlite3.Connection]) -> None:
    path, conn = sqlite_db
    for source in (SQLiteSource(conn, table="t"), SQLiteSource(path, table="t")):
        got = list(source.open(None))
        assert got[0] == ({"id": 2, "grp": "b", "body": b"\x02\x02\x02"}, [2])
        assert ids(got) == list(range(2, 202, 2))


def test_sqlite_resume_at_every_position_equals_tail(
    sqlite_db: tuple[Path, sqlite3.Connection],
) -> None:
    _, conn = sqlite_db
    for source in (
        SQLiteSource(conn, table="t"),
        SQLiteSource(conn, table="t", mode="offset"),
        SQLiteSource(conn, table="t", order_by=("grp", "-id")),
        SQLiteSource(conn, table="t", order_by=("body",)),
    ):
        full = list(source.open(None))
        assert len(full) == 100
        for i, (_, pos) in enumerate(full):
            assert all_ids(source, roundtrip(pos)) == ids(full[i + 1 :])


def test_sqlite_mixed_directions_order(sqlite_db: tuple[Path, sqlite3.Connection]) -> None:
    _, conn = sqlite_db
    got = all_ids(SQLiteSource(conn, table="t", order_by=("grp", "-id")))
    assert got == list(range(200, 0, -4)) + list(range(198, 0, -4))


def test_sqlite_asks_for_limit_plus_one(sqlite_db: tuple[Path, sqlite3.Connection]) -> None:
    _, conn = sqlite_db
    produced: list[int] = []

    def seen(x: int) -> int:
        produced.append(x)
        return x

    conn.create_function("seen", 1, seen)
    statements: list[str] = []
    conn.set_trace_callback(statements.append)
    source = SQLiteSource(
        conn, query="SELECT id, seen(id) AS s FROM t", unique=True, batch_size=1000
    )
    got = take(source, [40], 11)
    assert ids(got) == list(range(42, 64, 2))
    assert statements[-1].endswith("LIMIT 11")
    assert '(_jb_q."id" > 40)' in statements[-1]
    # The database itself stopped after limit_hint + 1 rows (SQLite inlines the query,
    # so a select-list expression runs once per mention in the bounded select list).
    assert sorted(set(produced)) == list(range(42, 64, 2))


def test_sqlite_unbounded_stream_fetches_in_batches(
    sqlite_db: tuple[Path, sqlite3.Connection],
) -> None:
    _, conn = sqlite_db
    produced: list[int] = []

    def seen(x: int) -> int:
        produced.append(x)
        return x

    conn.create_function("seen", 1, seen)
    it = SQLiteSource(
        conn, query="SELECT id, seen(id) AS s FROM t", unique=True, batch_size=8
    ).open(None)
    assert next(it)[0] == {"id": 2, "s": 2}
    # A first fetch of 8 rows (batch_size caps the first 16), plus the row the sqlite3
    # module steps ahead.
    assert len(set(produced)) == 9
    it.close()


def test_sqlite_keyset_survives_inserts_and_deletes(
    sqlite_db: tuple[Path, sqlite3.Connection],
) -> None:
    path, conn = sqlite_db
    source = SQLiteSource(path, table="t")
    deleted: set[int] = set()
    inserted_after: set[int] = set()

    def mutate(page_no: int) -> None:
        # Before the cursor: a new row and a deleted one (neither may disturb the rest).
        low = 2 * page_no + 1
        conn.execute("INSERT INTO t VALUES (?, 'a', NULL)", (low,))
        conn.execute("DELETE FROM t WHERE id = ?", (2 + page_no * 10,))
        # After the cursor: a new row (must appear) and a deleted one (must not).
        high = 1001 + page_no
        conn.execute("INSERT INTO t VALUES (?, 'b', NULL)", (high,))
        inserted_after.add(high)
        victim = 200 - page_no * 2
        conn.execute("DELETE FROM t WHERE id = ?", (victim,))
        deleted.add(victim)

    got = page_through(source, 10, mutate)
    assert len(got) == len(set(got))  # no repeats
    assert got == sorted(got)
    expected = [i for i in range(2, 202, 2) if i not in deleted] + sorted(inserted_after)
    assert got == expected  # nothing vanished


def test_offset_mode_shifts_when_rows_are_deleted_before_the_cursor(
    sqlite_db: tuple[Path, sqlite3.Connection],
) -> None:
    # The documented weakness of offset mode, and the reason keyset is the default.
    _, conn = sqlite_db
    source = SQLiteSource(conn, table="t", mode="offset")
    first = take(source, None, 3)
    conn.execute("DELETE FROM t WHERE id = 2")
    assert all_ids(source, first[-1][1])[0] == 10  # 8 was skipped


def test_sqlite_named_and_positional_params(sqlite_db: tuple[Path, sqlite3.Connection]) -> None:
    _, conn = sqlite_db
    named = SQLiteSource(
        conn, query="SELECT * FROM t WHERE grp = :g", params={"g": "b"}, unique=True
    )
    positional = SQLiteSource(
        conn, query="SELECT * FROM t WHERE grp = ?", params=["b"], unique=True
    )
    for source in (named, positional):
        full = list(source.open(None))
        assert ids(full) == list(range(2, 202, 4))
        assert ids(take(source, full[4][1], 3)) == [22, 26, 30]
    assert named.describe()["params"] == {"g": "b"}
    assert positional.describe()["params"] == ["b"]


def test_sqlite_identifiers_are_quoted_not_formatted(tmp_path: Path) -> None:
    conn = sqlite3.connect(tmp_path / "q.sqlite")
    conn.execute('CREATE TABLE "we""ird tbl" ("my id" INTEGER PRIMARY KEY, "x;y" TEXT)')
    conn.execute("INSERT INTO \"we\"\"ird tbl\" VALUES (1, 'one'), (2, 'two')")
    source = SQLiteSource(conn, table='we"ird tbl', order_by=("my id",))
    assert list(source.open(None)) == [
        ({"my id": 1, "x;y": "one"}, [1]),
        ({"my id": 2, "x;y": "two"}, [2]),
    ]
    evil = SQLiteSource(conn, table='we"ird tbl', order_by=("1; DROP TABLE x --",))
    with pytest.raises(LimitError, match="not a column"):
        list(evil.open(None))


def test_regression_a_column_named_empty_pages(tmp_path: Path) -> None:
    """Found by a tester: a table or query with a column named "" (SQLite allows it) was
    refused before its first page with LimitError "identifier='' is invalid", naming no
    parameter of the API: every quoted name had to be non-empty, the result's column
    names (which are data) included. Now such a column pages, as a value and as a key,
    and only the names a caller gives must be non-empty, refused naming their parameter."""
    path = tmp_path / "empty.sqlite"
    long = {i: ("x" * (20 * i) if i % 3 else None) for i in range(1, 13)}
    with contextlib.closing(sqlite3.connect(path)) as db:
        db.execute('CREATE TABLE t (id INTEGER PRIMARY KEY, "" TEXT)')
        db.executemany("INSERT INTO t VALUES (?, ?)", list(long.items()))
        db.execute('CREATE TABLE k ("" INTEGER PRIMARY KEY, a TEXT)')  # the table's own key
        db.executemany("INSERT INTO k VALUES (?, ?)", [(i, f"a{i}") for i in range(1, 13)])
        db.execute('CREATE TABLE w (a TEXT, "" TEXT PRIMARY KEY) WITHOUT ROWID')
        db.executemany("INSERT INTO w VALUES (?, ?)", [("ab"[i % 2], f"{i:02}") for i in range(12)])
        db.commit()
    t_rows = [{"id": i, "": v} for i, v in long.items()]
    k_rows = [{"": i, "a": f"a{i}"} for i in range(1, 13)]
    w_rows = [{"a": "ab"[i % 2], "": f"{i:02}"} for i in [*range(0, 12, 2), *range(1, 12, 2)]]
    # Descending by a, the key appended follows the last direction (see "order_by").
    w_desc = w_rows[::-1]
    # A connection with a database attached under the name "" too (its counters are read
    # before each page).
    attached = sqlite3.connect(path)
    attached.execute('ATTACH DATABASE ? AS ""', (str(path),))
    limits = Limits(700, max_items=5)
    try:
        for db_or_path in (path, attached):
            expected: list[tuple[SQLiteSource, list[dict[str, Any]]]] = [
                (SQLiteSource(db_or_path, table="t"), t_rows),
                (SQLiteSource(db_or_path, table="t", mode="offset"), t_rows),
                (SQLiteSource(db_or_path, query='SELECT id, "" AS "" FROM t', unique=True), t_rows),
                (SQLiteSource(db_or_path, table="k"), k_rows),
                (SQLiteSource(db_or_path, table="k", mode="offset"), k_rows),
                (SQLiteSource(db_or_path, table="w", order_by=("a",)), w_rows),
                (SQLiteSource(db_or_path, table="w", order_by=("-a",), mode="offset"), w_desc),
            ]
            for source, rows in expected:
                for pages in (pages_by_paginate(source, limits), pages_by_fill(source, limits)):
                    assert [row for page in pages for row in page] == rows, source.describe()
                assert [row for row, _ in source.open(None)] == rows
            # Ties on a value, ordered by the whole row: the column named "" among them.
            by_value = SQLiteSource(
                db_or_path,
                query='SELECT id % 3 AS v, id AS "" FROM t',
                order_by=("v",),
                mode="offset",
            )
            got = [row for page in pages_by_paginate(by_value, limits) for row in page]
            assert got == sorted(({"v": i % 3, "": i} for i in long), key=lambda r: (r["v"], r[""]))
            # A long cell of the column is cut and marked, on the path (bare reads and blob
            # I/O) and on the connection (the cut query).
            cut = SQLiteSource(db_or_path, table="t", max_cell_bytes=64)
            for row in [row for page in pages_by_fill(cut, limits) for row in page]:
                whole = long[row["id"]]
                if whole is None or len(whole) <= 64:
                    assert row[""] == whole
                else:
                    cell = row[""]
                    assert isinstance(cell, Clipped)
                    assert isinstance(cell.head, str)
                    assert whole.startswith(cell.head)
                    assert cell.length == len(whole)
    finally:
        attached.close()
    # The names a caller gives must be non-empty: refused naming the parameter.
    for kwargs, name in (
        ({"table": ""}, "table"),
        ({"table": ("", "t")}, "table"),
        ({"table": ("main", "")}, "table"),
        ({"table": "t", "order_by": ("",)}, "order_by"),
        ({"table": "t", "order_by": ("-",)}, "order_by"),
        ({"table": "t\x00"}, "table"),
        ({"table": "t", "order_by": ("id\x00",)}, "order_by"),
    ):
        for make in (
            lambda: SQLiteSource(path, **kwargs),  # noqa: B023  # called at once
            lambda: PostgresSource("host=unused", **kwargs),  # noqa: B023
        ):
            with pytest.raises(LimitError) as raised:
                make()
            assert raised.value.name == name, kwargs


def test_sqlite_path_source_is_read_only_and_never_creates(tmp_path: Path) -> None:
    with pytest.raises(sqlite3.OperationalError):
        list(SQLiteSource(tmp_path / "missing.sqlite", table="t").open(None))
    assert not (tmp_path / "missing.sqlite").exists()


def test_closing_the_iterator_releases_the_read_lock(
    sqlite_db: tuple[Path, sqlite3.Connection],
) -> None:
    path, _ = sqlite_db
    it = SQLiteSource(path, table="t", batch_size=1).open(None)
    next(it)
    writer = sqlite3.connect(path, timeout=0, isolation_level=None)
    try:
        with pytest.raises(sqlite3.OperationalError, match="locked"):
            writer.execute("DROP TABLE t")  # the open statement holds a shared lock
        it.close()
        writer.execute("CREATE TABLE after_close (x)")
        writer.execute("DROP TABLE t")  # and now the lock is gone
    finally:
        writer.close()


def test_null_order_keys_page_where_the_database_sorts_them(
    sqlite_db: tuple[Path, sqlite3.Connection],
) -> None:
    """Regression: a NULL in an order column was an error; now it pages like any value."""
    _, conn = sqlite_db
    conn.execute("INSERT INTO t VALUES (500, 'a', NULL), (501, 'a', NULL)")
    for order in (("body", "id"), ("-body", "id"), ("body", "-id")):
        source = SQLiteSource(conn, table="t", order_by=order)
        full = ids(list(source.open(None)))
        assert len(full) == 102
        assert page_through(source, 3) == full
        nulls = [500, 501] if order[1] == "id" else [501, 500]
        # NULL is SQLite's smallest value: first ascending, last descending.
        assert (full[:2] if order[0] == "body" else full[-2:]) == nulls


def test_sqlite_renames_duplicate_columns_so_nothing_is_lost(
    sqlite_db: tuple[Path, sqlite3.Connection],
) -> None:
    _, conn = sqlite_db
    source = SQLiteSource(
        conn, query="SELECT a.id, b.grp AS id FROM t a JOIN t b ON a.id = b.id", unique=True
    )
    assert take(source, None, 1)[0][0] == {"id": 2, "id:1": "b"}


@pytest.mark.parametrize(
    "bad", [5, [1, 2], ["x", {"bytes": "!!"}], [{"nope": 1}], [[None]], "2", {"o": 1}]
)
def test_malformed_keyset_positions_are_invalid_cursors(
    sqlite_db: tuple[Path, sqlite3.Connection], bad: Any
) -> None:
    _, conn = sqlite_db
    with pytest.raises(InvalidCursor):
        SQLiteSource(conn, table="t").open(bad)


@pytest.mark.parametrize(
    ("kwargs", "match"),
    [
        ({"table": "t", "mode": "cursor"}, "mode"),
        ({"table": "t", "order_by": ()}, "order_by"),
        ({"table": "t", "order_by": "id"}, "order_by"),
        ({"table": "t", "order_by": ("id", "id")}, "order_by"),
        ({"table": "t", "batch_size": 0}, "batch_size"),
        ({"table": ""}, "table"),
        ({"query": "  "}, "query"),
        ({"query": "SELECT 1", "params": {"_jb_0": 1}}, "params"),
    ],
)
def test_bad_options_are_refused(
    sqlite_db: tuple[Path, sqlite3.Connection], kwargs: dict[str, Any], match: str
) -> None:
    _, conn = sqlite_db
    with pytest.raises(LimitError, match=match):
        SQLiteSource(conn, **kwargs)


def test_table_or_query_exactly_one(sqlite_db: tuple[Path, sqlite3.Connection]) -> None:
    _, conn = sqlite_db
    with pytest.raises(TypeError):
        SQLiteSource(conn)
    with pytest.raises(TypeError):
        SQLiteSource(conn, table="t", query="SELECT 1")


def test_describe_has_no_page_size_and_changes_with_the_query(
    sqlite_db: tuple[Path, sqlite3.Connection],
) -> None:
    path, conn = sqlite_db
    a = SQLiteSource(conn, table="t", batch_size=5).describe()
    assert a == SQLiteSource(conn, table="t", batch_size=50).describe()
    assert a == {
        "kind": "sqlite",
        "table": ["t"],
        "query": None,
        "params": [],
        "order_by": None,
        "unique": False,
        "mode": "keyset",
        "max_cell_bytes": None,
    }
    assert a != SQLiteSource(conn, table="t", order_by=("-id",)).describe()
    assert a != SQLiteSource(conn, table="t", order_by=("id",)).describe()
    assert SQLiteSource(path, table="t").describe()["database"] == str(path)


def test_regression_json_params_that_print_alike_describe_apart() -> None:
    """psycopg's Json and Jsonb print an abbreviation of their document: two long
    documents of one length described alike, and a cursor minted for one query served
    the other's rows under the same scope."""
    query = "SELECT id FROM docs WHERE %s::jsonb @> tags"
    a, b = [*range(1, 100), 150], [*range(1, 100), 170]
    assert str(Jsonb(a)) == str(Jsonb(b))  # what the description used to be made of
    described = [
        PostgresSource("dbname=unused", query=query, params=[p], unique=True).describe()
        for p in (Jsonb(a), Jsonb(b), Json(a), Jsonb(a))
    ]
    assert described[0] != described[1]
    assert described[0] != described[2]  # json and jsonb are other parameters
    assert described[0] == described[3]


@settings(
    max_examples=30, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture]
)
@given(
    keys=st.lists(st.integers(min_value=-(2**63), max_value=2**63 - 1), unique=True, max_size=40),
    sizes=st.lists(st.integers(min_value=1, max_value=7), min_size=1, max_size=3),
    offset_mode=st.booleans(),
)
def test_sqlite_pages_reassemble(keys: list[int], sizes: list[int], offset_mode: bool) -> None:
    conn = sqlite3.connect(":memory:")
    conn.execute("CREATE TABLE r (id INTEGER PRIMARY KEY, v TEXT)")
    conn.executemany("INSERT INTO r VALUES (?, ?)", [(k, str(k)) for k in keys])
    source = SQLiteSource(conn, table="r", mode="offset" if offset_mode else "keyset")
    got = read_in_pages(source, sizes)
    assert [row["id"] for row in got] == sorted(keys)


# --- PostgreSQL -------------------------------------------------------------------------


@pytest.fixture
def pg(postgres_server: PostgresServer) -> Iterator[psycopg.Connection[Any]]:
    with psycopg.connect(postgres_server.dsn, autocommit=True) as conn:
        conn.execute("DROP TABLE IF EXISTS ev")
        conn.execute(
            "CREATE TABLE ev (id bigint PRIMARY KEY, at timestamptz NOT NULL,"
            " amount numeric NOT NULL, note text)"
        )
        base = dt.datetime(2024, 1, 1, tzinfo=dt.UTC)
        with conn.cursor() as cur:
            cur.executemany(
                "INSERT INTO ev VALUES (%s, %s, %s, %s)",
                [
                    (i, base + dt.timedelta(minutes=i // 3), f"{i}.25", f"n{i}")
                    for i in range(1, 301)
                ],
            )
        yield conn
        conn.execute("DROP TABLE ev")


@pytest.mark.postgres
def test_pg_rows_stream_and_resume_at_every_position(
    postgres_server: PostgresServer, pg: psycopg.Connection[Any]
) -> None:
    for source in (
        PostgresSource(postgres_server.dsn, table="ev"),
        PostgresSource(pg, table="ev", order_by=("at", "id")),
        PostgresSource(pg, table="ev", order_by=("-at", "id")),
        PostgresSource(pg, table=("public", "ev"), order_by=("amount",)),
        PostgresSource(pg, table="ev", mode="offset"),
    ):
        full = list(source.open(None))
        assert len(full) == 300
        assert full == [(row, roundtrip(pos)) for row, pos in full]  # positions are JSON
        for i in range(0, 300, 37):
            assert all_ids(source, roundtrip(full[i][1])) == ids(full[i + 1 :])


@pytest.mark.postgres
def test_pg_timestamp_keys_round_trip(pg: psycopg.Connection[Any]) -> None:
    source = PostgresSource(pg, table="ev", order_by=("-at", "id"))
    got = take(source, None, 4)
    assert ids(got) == [300, 297, 298, 299]
    assert got[1][1] == [{"text": "2024-01-01 01:39:00+00:00"}, 297]
    assert ids(take(source, roundtrip(got[1][1]), 3)) == [298, 299, 294]


@pytest.mark.postgres
def test_pg_uses_a_server_side_cursor_and_closes_it(pg: psycopg.Connection[Any]) -> None:
    it = PostgresSource(pg, table="ev", batch_size=10).open(None)
    assert next(it)[0]["id"] == 1
    cursors = pg.execute("SELECT name FROM pg_cursors").fetchall()
    assert len(cursors) == 1
    assert cursors[0][0].startswith("jsonbudget_")
    it.close()
    assert pg.execute("SELECT name FROM pg_cursors").fetchall() == []
    assert pg.info.transaction_status == psycopg.pq.TransactionStatus.IDLE


@pytest.mark.postgres
def test_pg_asks_for_limit_plus_one(pg: psycopg.Connection[Any]) -> None:
    pg.execute("DROP SEQUENCE IF EXISTS produced")
    pg.execute("CREATE SEQUENCE produced")
    source = PostgresSource(
        pg, query="SELECT nextval('produced') AS n, * FROM ev ORDER BY id", unique=True
    )
    got = take(source, [100], 6)
    assert ids(got) == [101, 102, 103, 104, 105, 106]
    # nextval ran only for the rows the database produced: LIMIT 6 stopped it there.
    assert pg.execute("SELECT last_value FROM produced").fetchone() == (6,)


@pytest.mark.postgres
def test_pg_keyset_survives_inserts_and_deletes(
    postgres_server: PostgresServer, pg: psycopg.Connection[Any]
) -> None:
    pg.execute("DELETE FROM ev WHERE id % 2 = 1")
    source = PostgresSource(postgres_server.dsn, table="ev", params=())
    deleted: set[int] = set()
    inserted_after: set[int] = set()
    at = dt.datetime(2025, 1, 1, tzinfo=dt.UTC)

    def mutate(page_no: int) -> None:
        pg.execute("INSERT INTO ev VALUES (%s, %s, 1, NULL)", (2 * page_no + 1, at))
        pg.execute("DELETE FROM ev WHERE id = %s", (2 + page_no * 20,))
        high = 1001 + page_no
        pg.execute("INSERT INTO ev VALUES (%s, %s, 1, NULL)", (high, at))
        inserted_after.add(high)
        victim = 300 - page_no * 2
        pg.execute("DELETE FROM ev WHERE id = %s", (victim,))
        deleted.add(victim)

    got = page_through(source, 25, mutate)
    assert len(got) == len(set(got))
    expected = [i for i in range(2, 301, 2) if i not in deleted] + sorted(inserted_after)
    assert got == expected


@pytest.mark.postgres
def test_pg_inside_the_callers_transaction(postgres_server: PostgresServer) -> None:
    with psycopg.connect(postgres_server.dsn) as conn:  # not autocommit
        conn.execute("CREATE TEMP TABLE tmp_rows AS SELECT g AS id FROM generate_series(1, 5) g")
        assert conn.info.transaction_status == psycopg.pq.TransactionStatus.INTRANS
        source = PostgresSource(conn, table="tmp_rows", params={}, unique=True)
        assert all_ids(source) == [1, 2, 3, 4, 5]
        assert all_ids(source, [3]) == [4, 5]
        # The caller's transaction is still theirs (the temp table is still there).
        assert conn.execute("SELECT count(*) FROM tmp_rows").fetchone() == (5,)


@pytest.mark.postgres
def test_pg_named_params(pg: psycopg.Connection[Any]) -> None:
    source = PostgresSource(
        pg, query="SELECT id, note FROM ev WHERE id <= %(top)s", params={"top": 10}, unique=True
    )
    first = take(source, None, 3)
    assert ids(first) == [1, 2, 3]
    assert ids(list(source.open(first[-1][1]))) == list(range(4, 11))


def test_import_jsonbudget_sources_without_psycopg_loaded() -> None:
    import subprocess
    import sys

    code = (
        "import sys; import jsonbudget._sources.sql, jsonbudget._sources.files;"
        "assert 'psycopg' not in sys.modules, 'psycopg imported eagerly'"
    )
    subprocess.run([sys.executable, "-c", code], check=True, env={"PYTHONPATH": "src"})


@pytest.mark.postgres
def test_pg_duplicate_result_columns_are_refused(pg: psycopg.Connection[Any]) -> None:
    source = PostgresSource(pg, query="SELECT id, note AS id FROM ev", mode="offset", order_by=())
    with pytest.raises(LimitError, match="duplicate column"):
        all_ids(source)


# --- a total order: no row lost at a page boundary ----------------------------------------


def test_sqlite_ties_in_the_order_get_the_rowid_appended(tmp_path: Path) -> None:
    """Regression: order_by=("grp",) over 3,000 rows of 7 groups served 119 rows, complete."""
    conn = sqlite3.connect(tmp_path / "g.sqlite")
    conn.execute("CREATE TABLE t (grp TEXT, n INTEGER)")  # no primary key: the rowid decides
    conn.executemany("INSERT INTO t VALUES (?, ?)", [(f"g{i % 7}", i) for i in range(3000)])
    conn.commit()
    source = SQLiteSource(conn, table="t", order_by=("grp",))
    got = read_in_pages(source, [25])
    assert sorted(row["n"] for row in got) == list(range(3000))
    assert [row["grp"] for row in got] == sorted(row["grp"] for row in got)
    assert all("_jb_rowid" not in row for row in got)  # the hidden key stays hidden


# Found by trying a table without an `id` column: the default order named `id` and every
# such table was refused, though the table's own key orders it.
_DEFAULT_ORDER_TABLES = {
    "a text primary key": ("CREATE TABLE t (code TEXT PRIMARY KEY NOT NULL, n INTEGER)", "code"),
    "a composite primary key, without rowid": (
        "CREATE TABLE t (a TEXT, b INTEGER, n INTEGER, PRIMARY KEY (a, b)) WITHOUT ROWID",
        "a,b",
    ),
    "no primary key: the rowid": ("CREATE TABLE t (code TEXT, n INTEGER)", "rowid"),
    "a primary key that allows NULL: the rowid": (
        "CREATE TABLE t (code TEXT PRIMARY KEY, n INTEGER)",
        "rowid",
    ),
}


@pytest.mark.parametrize("mode", ["keyset", "offset"])
@pytest.mark.parametrize("shape", sorted(_DEFAULT_ORDER_TABLES))
def test_the_default_order_of_a_table_without_id_is_its_own_key(shape: str, mode: Any) -> None:
    # Regression (offset): the catalog was read in keyset mode only, so offset mode kept
    # the `id` default and refused the table ("is not a column of the result").
    ddl, key = _DEFAULT_ORDER_TABLES[shape]
    conn = sqlite3.connect(":memory:")
    conn.execute(ddl)
    rows = [(f"k{(i * 37) % 101:03}", i % 3, i) for i in range(101)]
    if key == "a,b":
        conn.executemany("INSERT INTO t VALUES (?, ?, ?)", rows)
    else:
        conn.executemany("INSERT INTO t VALUES (?, ?)", [(a, n) for a, _, n in rows])
    statements: list[str] = []
    conn.set_trace_callback(statements.append)
    source = SQLiteSource(conn, table="t", mode=mode)
    got = read_in_pages(source, [7, 30])
    assert sorted(row["n"] for row in got) == list(range(101))  # every row once
    if key == "rowid":
        assert [row["n"] for row in got] == list(range(101))
        assert all("_jb_rowid" not in row for row in got)
    elif key == "code":
        assert [row["code"] for row in got] == sorted(row["code"] for row in got)
    else:
        assert [(row["a"], row["b"]) for row in got] == sorted((r["a"], r["b"]) for r in got)
    assert "ORDER BY" in statements[-1]
    assert source.describe()["order_by"] is None


def test_the_default_order_keeps_id_where_the_table_has_that_column() -> None:
    conn = sqlite3.connect(":memory:")
    conn.execute("CREATE TABLE t (code TEXT PRIMARY KEY NOT NULL, id INTEGER)")
    conn.executemany("INSERT INTO t VALUES (?, ?)", [(f"c{i:02}", 30 - i) for i in range(30)])
    got = read_in_pages(SQLiteSource(conn, table="t"), [4])
    assert [row["id"] for row in got] == list(range(1, 31))  # by id, the key breaking ties


def test_the_default_order_of_a_view_without_id_is_refused_naming_order_by() -> None:
    conn = sqlite3.connect(":memory:")
    conn.execute("CREATE TABLE t (a INTEGER, b TEXT)")
    conn.execute("CREATE VIEW v AS SELECT a, b FROM t")
    with pytest.raises(LimitError, match="no `id` column and no primary key") as caught:
        SQLiteSource(conn, table="v").open(None)
    assert caught.value.name == "order_by"
    # A query has no table key to fall back on: its missing `id` is named as before.
    with pytest.raises(LimitError, match="is not a column of the result"):
        SQLiteSource(conn, query="SELECT a FROM t").open(None)


def test_a_query_order_that_is_not_known_unique_is_refused_before_any_row(
    sqlite_db: tuple[Path, sqlite3.Connection],
) -> None:
    _, conn = sqlite_db
    source = SQLiteSource(conn, query="SELECT grp, id FROM t", order_by=("grp",))
    with pytest.raises(LimitError, match="add a column that is unique in the result"):
        source.open(None)  # refused at open: nothing served


def test_a_declared_unique_order_with_ties_raises_instead_of_skipping(
    sqlite_db: tuple[Path, sqlite3.Connection],
) -> None:
    _, conn = sqlite_db
    source = SQLiteSource(conn, query="SELECT grp, id FROM t", order_by=("grp",), unique=True)
    with pytest.raises(LimitError, match="share the order key"):
        all_ids(source)


def test_a_table_without_any_key_is_refused_on_postgres_but_unique_true_pages() -> None:
    """Covered on PostgreSQL below; SQLite views have no rowid either."""
    conn = sqlite3.connect(":memory:")
    conn.execute("CREATE TABLE t (a INTEGER, b TEXT)")
    conn.execute("CREATE VIEW v AS SELECT a, b FROM t")
    with pytest.raises(LimitError, match="no primary key"):
        SQLiteSource(conn, table="v", order_by=("a",)).open(None)
    assert list(SQLiteSource(conn, table="v", order_by=("a",), unique=True).open(None)) == []


def test_a_unique_not_null_index_is_enough(tmp_path: Path) -> None:
    conn = sqlite3.connect(":memory:")
    conn.execute("CREATE TABLE t (id INTEGER PRIMARY KEY, email TEXT NOT NULL UNIQUE)")
    conn.executemany("INSERT INTO t VALUES (?, ?)", [(i, f"u{50 - i}@x") for i in range(50)])
    statements: list[str] = []
    conn.set_trace_callback(statements.append)
    got = read_in_pages(SQLiteSource(conn, table="t", order_by=("email",)), [7])
    assert [row["email"] for row in got] == sorted(f"u{50 - i}@x" for i in range(50))
    assert 'ORDER BY _jb_q."email" ASC LIMIT' in statements[-1]  # nothing appended


# Each table below has 40 rows sharing keys in the order, and a unique-looking key that
# SQLite does not enforce in the order's own terms. Found by probing with real schemas.
_NOT_UNIQUE_IN_THE_ORDER = {
    "a partial unique index": (
        "CREATE TABLE t (id INTEGER PRIMARY KEY, a INTEGER NOT NULL);"
        " CREATE UNIQUE INDEX u ON t (a) WHERE a > 100",
        "INSERT INTO t (a) VALUES (1)",
        ("a",),
    ),
    "a text primary key holding NULLs": (
        "CREATE TABLE t (k TEXT PRIMARY KEY, a INTEGER)",
        "INSERT INTO t VALUES (NULL, 1)",
        ("k",),
    ),
    "a nullable primary key as the tiebreaker": (
        "CREATE TABLE t (k TEXT PRIMARY KEY, a INTEGER)",
        "INSERT INTO t VALUES (NULL, 1)",
        ("a",),
    ),
    "a unique index under another collation": (
        "CREATE TABLE t (id INTEGER PRIMARY KEY, a TEXT NOT NULL COLLATE NOCASE);"
        " CREATE UNIQUE INDEX u ON t (a COLLATE BINARY)",
        "INSERT INTO t (a) SELECT CASE WHEN n % 2 THEN 'x' ELSE 'X' END || (n / 2)"
        " FROM (SELECT count(*) AS n FROM t)",
        ("a",),
    ),
    "a column named rowid": (
        "CREATE TABLE t (rowid TEXT, a INTEGER)",
        "INSERT INTO t VALUES ('x', 0)",
        ("a",),
    ),
    "a column named rowid and one named oid": (
        "CREATE TABLE t (rowid TEXT, oid TEXT, a INTEGER)",
        "INSERT INTO t VALUES ('x', 'y', 0)",
        ("a",),
    ),
    # Not the rowid (SQLite's documented quirk): k stays NULL, it was taken as NOT NULL.
    "INTEGER PRIMARY KEY DESC": (
        "CREATE TABLE t (k INTEGER PRIMARY KEY DESC, a INTEGER)",
        "INSERT INTO t VALUES (NULL, 1)",
        ("k",),
    ),
    "INT PRIMARY KEY": (
        "CREATE TABLE t (k INT PRIMARY KEY, a INTEGER)",
        "INSERT INTO t VALUES (NULL, 1)",
        ("k",),
    ),
    # An ordinary table was read as WITHOUT ROWID (NOT NULL key) from its CREATE text.
    "WITHOUT ROWID in a default value": (
        "CREATE TABLE t (k TEXT PRIMARY KEY, a INTEGER, note TEXT DEFAULT 'made WITHOUT ROWID')",
        "INSERT INTO t (k, a) VALUES (NULL, 1)",
        ("k",),
    ),
    # The user's column was read as the hidden rowid tiebreaker.
    "a column named _jb_rowid": (
        "CREATE TABLE t (a INTEGER, _jb_rowid INTEGER)",
        "INSERT INTO t VALUES (1, 7)",
        ("a",),
    ),
    "columns named _jb_rowid and _JB_ROWID_": (
        "CREATE TABLE t (a INTEGER, _jb_rowid INTEGER, _JB_ROWID_ TEXT)",
        "INSERT INTO t VALUES (1, 7, 'x')",
        ("a",),
    ),
}


@pytest.mark.parametrize("shape", sorted(_NOT_UNIQUE_IN_THE_ORDER))
def test_sqlite_keys_count_only_where_sqlite_enforces_them_in_the_order(shape: str) -> None:
    """Regression: each of these served 16 of 30 rows, or 75 of 80, or 16 of 20, with
    complete=True."""
    schema, insert, order = _NOT_UNIQUE_IN_THE_ORDER[shape]
    conn = sqlite3.connect(":memory:")
    conn.executescript(schema)
    for _ in range(40):
        conn.execute(insert)
    expected = sorted(conn.execute("SELECT a FROM t").fetchall())
    columns = [row[1] for row in conn.execute("PRAGMA table_info(t)")]
    source = SQLiteSource(conn, table="t", order_by=order)
    got = read_in_pages(source, [3, 7])
    assert len(got) == 40
    assert sorted((row["a"],) for row in got) == expected
    assert all(list(row) == columns for row in got)  # the hidden rowid never shows


def test_a_unique_index_under_the_columns_own_collation_is_enough() -> None:
    conn = sqlite3.connect(":memory:")
    conn.executescript(
        "CREATE TABLE t (id INTEGER PRIMARY KEY, a TEXT NOT NULL COLLATE NOCASE UNIQUE);"
        " CREATE TABLE w (k TEXT NOT NULL COLLATE NOCASE PRIMARY KEY, v) WITHOUT ROWID"
    )
    conn.executemany("INSERT INTO t (a) VALUES (?)", [(f"x{i:02}",) for i in range(30)])
    conn.executemany("INSERT INTO w VALUES (?, 1)", [(f"K{i:02}",) for i in range(30)])
    statements: list[str] = []
    conn.set_trace_callback(statements.append)
    assert len(read_in_pages(SQLiteSource(conn, table="t", order_by=("a",)), [7])) == 30
    assert 'ORDER BY _jb_q."a" ASC LIMIT' in statements[-1]  # nothing appended
    assert len(read_in_pages(SQLiteSource(conn, table="w", order_by=("k",)), [7])) == 30


def test_sqlite_kept_rows_are_fetched_again_after_a_schema_change() -> None:
    """Regression: a table dropped and another renamed to its name between two pages
    changes no row count, and the rows kept from the first page were served stale."""
    conn = sqlite3.connect(":memory:", isolation_level=None)
    conn.execute("CREATE TABLE t (id INTEGER PRIMARY KEY, v TEXT)")
    conn.executemany("INSERT INTO t VALUES (?, 'old')", [(i,) for i in range(1, 41)])
    conn.execute("CREATE TABLE t2 (id INTEGER PRIMARY KEY, v TEXT)")
    conn.executemany("INSERT INTO t2 VALUES (?, 'new')", [(i,) for i in range(1, 41)])
    source, store, scope = SQLiteSource(conn, table="t"), MemoryCursorStore(), Scope("u")
    first = paginate(source, scope=scope, store=store, limits=Limits(400))
    assert first.next_cursor is not None
    conn.execute("DROP TABLE t")
    conn.execute("ALTER TABLE t2 RENAME TO t")
    second = paginate(
        source, scope=scope, cursor=first.next_cursor, store=store, limits=Limits(400)
    )
    assert second.items
    assert {row["v"] for row in second.items} == {"new"}


# The property: random tables with duplicate keys and NULLs, random orders, random pages.

_key_values = st.one_of(st.none(), st.integers(-3, 3))
_tables = st.lists(st.tuples(_key_values, _key_values), max_size=30)
_orders = st.lists(
    st.sampled_from(["a", "-a", "b", "-b"]), min_size=1, max_size=2, unique_by=lambda s: s[-1]
)
_sizes = st.lists(st.integers(min_value=1, max_value=6), min_size=1, max_size=3)


def _null_rank(value: Any, desc: bool, nulls_first_ascending: bool) -> tuple[int, Any]:
    """A sort key that places NULL as the database does (None first or last)."""
    null_first = nulls_first_ascending != desc
    if value is None:
        return (0 if null_first else 2, 0)
    return (1, -value if desc else value)


def _check_every_row_once_in_order(
    got: list[dict[str, Any]], rows: list[tuple[Any, Any]], order: list[str], nulls_first: bool
) -> None:
    assert sorted(r["id"] for r in got) == list(range(len(rows)))  # every row exactly once
    keys = [
        tuple(_null_rank(r[spec.lstrip("-")], spec.startswith("-"), nulls_first) for spec in order)
        for r in got
    ]
    assert keys == sorted(keys)  # in the requested order


@settings(max_examples=40, deadline=None)
@given(rows=_tables, order=_orders, sizes=_sizes)
def test_property_sqlite_every_row_once_in_order(
    rows: list[tuple[Any, Any]], order: list[str], sizes: list[int]
) -> None:
    conn = sqlite3.connect(":memory:")
    conn.execute("CREATE TABLE r (id INTEGER PRIMARY KEY, a INTEGER, b INTEGER)")
    conn.executemany("INSERT INTO r VALUES (?, ?, ?)", [(i, *r) for i, r in enumerate(rows)])
    got = read_in_pages(SQLiteSource(conn, table="r", order_by=order), sizes)
    _check_every_row_once_in_order(got, rows, order, nulls_first=True)


@pytest.mark.postgres
def test_property_postgres_every_row_once_in_order(postgres_server: PostgresServer) -> None:
    with psycopg.connect(postgres_server.dsn, autocommit=True) as conn:

        @settings(max_examples=25, deadline=None)
        @given(rows=_tables, order=_orders, sizes=_sizes)
        def prop(rows: list[tuple[Any, Any]], order: list[str], sizes: list[int]) -> None:
            conn.execute("DROP TABLE IF EXISTS prop")
            conn.execute("CREATE TABLE prop (id int PRIMARY KEY, a int, b int)")
            with conn.cursor() as cur:
                cur.executemany(
                    "INSERT INTO prop VALUES (%s, %s, %s)", [(i, *r) for i, r in enumerate(rows)]
                )
            got = read_in_pages(PostgresSource(conn, table="prop", order_by=order), sizes)
            _check_every_row_once_in_order(got, rows, order, nulls_first=False)

        try:
            prop()
        finally:
            conn.execute("DROP TABLE IF EXISTS prop")


# A UNIQUE on nullable columns keeps rows apart only where they hold no NULL: pages
# compare the tiebreaker after a NULL key and nowhere else.
_nullable_unique = st.lists(
    st.tuples(st.one_of(st.none(), st.integers(-20, 20)), _key_values), max_size=30
).map(
    lambda rows: [
        (None, b) if a is not None and a in [r[0] for r in rows[:i]] else (a, b)
        for i, (a, b) in enumerate(rows)
    ]
)
_NULLABLE_UNIQUE_TABLES = (
    "CREATE TABLE r (id INTEGER NOT NULL, a UNIQUE, b INTEGER, PRIMARY KEY (id))",
    "CREATE TABLE r (a PRIMARY KEY, id INTEGER NOT NULL, b INTEGER)",  # the rowid appended
)


@settings(max_examples=40, deadline=None)
@given(
    rows=_nullable_unique,
    order=_orders,
    sizes=_sizes,
    schema=st.sampled_from(_NULLABLE_UNIQUE_TABLES),
)
def test_property_sqlite_nullable_unique_keys_every_row_once(
    rows: list[tuple[Any, Any]], order: list[str], sizes: list[int], schema: str
) -> None:
    conn = sqlite3.connect(":memory:")
    conn.execute(schema)
    conn.executemany(
        "INSERT INTO r (id, a, b) VALUES (?, ?, ?)", [(i, *r) for i, r in enumerate(rows)]
    )
    got = read_in_pages(SQLiteSource(conn, table="r", order_by=order), sizes)
    _check_every_row_once_in_order(got, rows, order, nulls_first=True)


def test_sqlite_a_nullable_primary_key_compares_the_rowid_only_after_a_null() -> None:
    """Regression: every page after a non-NULL key also asked for `id = ? AND rowid > ?`,
    which made paging a table keyed by an untyped PRIMARY KEY four times slower."""
    conn = sqlite3.connect(":memory:")
    conn.execute("CREATE TABLE t (id PRIMARY KEY, v)")
    conn.executemany("INSERT INTO t VALUES (?, 'x')", [(None,)] * 3 + [(i,) for i in range(9)])
    statements: list[str] = []
    conn.set_trace_callback(statements.append)
    source = SQLiteSource(conn, table="t", order_by=("id",))
    after_null = [pos for row, pos in take(source, None, 2)][-1]
    assert isinstance(after_null, list)
    assert after_null[0] is None
    list(take(source, after_null, 1))
    assert "_jb_rowid" in statements[-1].split("WHERE", 1)[1].split("ORDER BY")[0]
    after_key = [pos for row, pos in take(source, None, 5)][-1]
    assert isinstance(after_key, list)
    assert after_key[0] == 1
    statements.clear()
    got = [row["id"] for row, _ in take(source, after_key, 20)]
    assert got == list(range(2, 9))
    where = statements[-1].split("WHERE", 1)[1].split("ORDER BY")[0]
    assert "rowid" not in where
    assert '"id" > ' in where


@pytest.mark.postgres
def test_property_postgres_nullable_unique_keys_every_row_once(
    postgres_server: PostgresServer,
) -> None:
    with psycopg.connect(postgres_server.dsn, autocommit=True) as conn:

        @settings(max_examples=25, deadline=None)
        @given(rows=_nullable_unique, order=_orders, sizes=_sizes)
        def prop(rows: list[tuple[Any, Any]], order: list[str], sizes: list[int]) -> None:
            conn.execute("DROP TABLE IF EXISTS propu")
            conn.execute("CREATE TABLE propu (id int PRIMARY KEY, a int UNIQUE, b int)")
            with conn.cursor() as cur:
                cur.executemany(
                    "INSERT INTO propu VALUES (%s, %s, %s)",
                    [(i, *r) for i, r in enumerate(rows)],
                )
            got = read_in_pages(PostgresSource(conn, table="propu", order_by=order), sizes)
            _check_every_row_once_in_order(got, rows, order, nulls_first=False)

        try:
            prop()
        finally:
            conn.execute("DROP TABLE IF EXISTS propu")


@pytest.mark.postgres
def test_pg_table_keys_come_from_the_catalog(pg: psycopg.Connection[Any]) -> None:
    pg.execute("DROP TABLE IF EXISTS nokey")
    pg.execute("CREATE TABLE nokey (a int)")
    try:
        with pytest.raises(LimitError, match="no primary key"):
            PostgresSource(pg, table="nokey", order_by=("a",)).open(None)
        # ev's primary key is appended after a column with ties (three rows a minute).
        source = PostgresSource(pg, table="ev", order_by=("-at",))
        got = read_in_pages(source, [7])
        assert len(got) == 300
        assert len({row["id"] for row in got}) == 300
        assert source.open(None, limit_hint=0).__next__()[1] == [
            {"text": "2024-01-01 01:40:00+00:00"},
            300,
        ]
    finally:
        pg.execute("DROP TABLE nokey")


@pytest.mark.postgres
def test_pg_real_keys_page_once_each(pg: psycopg.Connection[Any]) -> None:
    """Regression: a real key came back as the float its text reads as (0.1), compared as
    float8 below the stored 0.100000001, so the row at the position was served again; a
    column of equal reals paged forever."""
    pg.execute("DROP TABLE IF EXISTS fr")
    pg.execute("CREATE TABLE fr (id int PRIMARY KEY, a real)")
    try:
        pg.execute("INSERT INTO fr SELECT g, (g % 7) * 0.1 FROM generate_series(1, 60) g")
        pg.execute("INSERT INTO fr VALUES (61, 'nan'), (62, 'infinity'), (63, NULL)")
        for order in (("a",), ("-a",)):
            got = read_in_pages(PostgresSource(pg, table="fr", order_by=order), [4, 9])
            assert sorted(row["id"] for row in got) == list(range(1, 64))
    finally:
        pg.execute("DROP TABLE fr")


@pytest.mark.postgres
@pytest.mark.parametrize(
    ("kind", "value"), [("jsonb", "jsonb_build_object('k', g)"), ("int[]", "ARRAY[g, 0]")]
)
def test_pg_keys_that_do_not_come_back_from_a_position_are_refused_first(
    pg: psycopg.Connection[Any], kind: str, value: str
) -> None:
    """Regression: page 1 was served, then page 2 raised psycopg's own error."""
    pg.execute("DROP TABLE IF EXISTS tk")
    pg.execute(f"CREATE TABLE tk (id int PRIMARY KEY, a {kind})")
    try:
        pg.execute(f"INSERT INTO tk SELECT g, {value} FROM generate_series(1, 20) g")
        with pytest.raises(LimitError, match="order by scalar columns"):
            PostgresSource(pg, table="tk", order_by=("a",)).open(None)
        assert len(all_ids(PostgresSource(pg, table="tk", order_by=("a",), mode="offset"))) == 20
    finally:
        pg.execute("DROP TABLE tk")


@pytest.mark.postgres
def test_regression_pg_keys_that_do_not_hold_are_not_trusted(pg: psycopg.Connection[Any]) -> None:
    """A parent table's PRIMARY KEY does not span its inheritance children, whose rows
    `SELECT * FROM parent` includes, and an index a failed CREATE UNIQUE INDEX
    CONCURRENTLY left behind (not valid) enforces nothing: both were taken as unique,
    and keyset pages skipped rows (9 of 10, 7 of 12) under complete: true."""
    pg.execute("DROP TABLE IF EXISTS inh_child, inh_parent, inv")
    try:
        pg.execute("CREATE TABLE inh_parent (id int PRIMARY KEY, src text)")
        pg.execute("CREATE TABLE inh_child () INHERITS (inh_parent)")
        pg.execute("INSERT INTO inh_parent SELECT g, 'p' FROM generate_series(1, 5) g")
        pg.execute("INSERT INTO inh_child SELECT g, 'c' FROM generate_series(1, 5) g")
        with pytest.raises(LimitError, match="order_by"):
            PostgresSource(pg, table="inh_parent").open(None)
        # Told what makes the order total, it pages every row.
        query = "SELECT tableoid::oid::bigint AS t, * FROM inh_parent"
        keyed = PostgresSource(pg, query=query, order_by=("id", "t"), unique=True)
        assert sorted(page_through(keyed, 2)) == sorted([*range(1, 6)] * 2)

        pg.execute("CREATE TABLE inv (id int, k int NOT NULL)")
        pg.execute("INSERT INTO inv SELECT g, g % 6 FROM generate_series(1, 12) g")
        with pytest.raises(psycopg.errors.UniqueViolation):
            pg.execute("CREATE UNIQUE INDEX CONCURRENTLY inv_k ON inv (k)")
        with pytest.raises(LimitError, match="order_by"):
            PostgresSource(pg, table="inv", order_by=("k",)).open(None)
    finally:
        pg.execute("DROP TABLE IF EXISTS inh_child, inh_parent, inv")


@pytest.mark.postgres
@pytest.mark.parametrize("order", ["id", "until", "-until"])
def test_regression_pg_infinite_dates_page_as_their_names(
    pg: psycopg.Connection[Any], order: str
) -> None:
    """psycopg refuses 'infinity' dates ("timestamp too large (after year 10K)"): a
    table with an open-ended validity column could not be paged past that row. They
    are read as PostgreSQL's own JSON has them, the strings "infinity" and "-infinity",
    and as keys they are cast back exactly."""
    pg.execute("DROP TABLE IF EXISTS inf")
    pg.execute("CREATE TABLE inf (id int PRIMARY KEY, until timestamptz, d date, ts timestamp)")
    try:
        pg.execute(
            "INSERT INTO inf VALUES (1, '2020-01-02 03:04:05+00', '2020-01-02', NULL),"
            " (2, 'infinity', 'infinity', '-infinity'), (3, '-infinity', '-infinity',"
            " 'infinity'), (4, NULL, NULL, '2020-01-02'), (5, '2021-01-01+00', NULL, NULL)"
        )
        expected = {
            r[0]: {"id": r[0], "until": r[1], "d": r[2], "ts": r[3]}
            for r in pg.execute(
                "SELECT id, to_json(until)#>>'{}', to_json(d)#>>'{}', to_json(ts)#>>'{}' FROM inf"
            )
        }
        want = {"id": [1, 2, 3, 4, 5], "until": [3, 1, 5, 2, 4], "-until": [4, 2, 5, 1, 3]}
        by_order = want[order]
        keys = (order,) if order == "id" else (order, "id")
        for pages in (
            pages_by_fill(PostgresSource(pg, table="inf", order_by=keys), Limits(4096)),
            pages_by_paginate(
                PostgresSource(pg, table="inf", order_by=keys), Limits(4096, max_items=1)
            ),
            [[row for row, _ in PostgresSource(pg, table="inf", order_by=keys).open(None)]],
        ):
            rows = [row for page in pages for row in page]
            assert [row["id"] for row in rows] == by_order
            for row in rows:
                want_row = expected[row["id"]]
                for column in ("until", "d", "ts"):
                    value = row[column]
                    if value in ("infinity", "-infinity") or value is None:
                        assert value == want_row[column]
                    else:  # a finite date is still a date
                        assert isinstance(value, dt.date)
    finally:
        pg.execute("DROP TABLE inf")


@pytest.mark.postgres
@pytest.mark.parametrize("order", ["iv", "-iv"])
def test_regression_pg_interval_keys_are_refused_not_skipped(
    pg: psycopg.Connection[Any], order: str
) -> None:
    """psycopg reads interval '1 year' as 365 days, PostgreSQL compares it as 360: by
    iv, rows 2-4 were skipped and the paging said complete; by -iv it never ended."""
    pg.execute("DROP TABLE IF EXISTS iv")
    pg.execute("CREATE TABLE iv (id int PRIMARY KEY, iv interval NOT NULL)")
    try:
        pg.execute(
            "INSERT INTO iv VALUES (1, '1 year'), (2, '361 days'), (3, '362 days'),"
            " (4, '364 days'), (5, '2 years')"
        )
        with pytest.raises(LimitError, match="interval column") as raised:
            PostgresSource(pg, table="iv", order_by=(order,)).open(None)
        assert raised.value.name == "order_by"
        # Ordered by a number the query makes, every row comes once, in its order (to
        # extract, a year is 365.25 days).
        query = "SELECT id, iv, extract(epoch FROM iv) AS iv_key FROM iv"
        keyed = PostgresSource(pg, query=query, order_by=("iv_key", "id"), unique=True)
        assert page_through(keyed, 1) == [2, 3, 4, 1, 5]
    finally:
        pg.execute("DROP TABLE iv")


@pytest.mark.postgres
def test_regression_pg_a_connection_that_makes_dict_rows_pages_as_any_other(
    postgres_server: PostgresServer,
) -> None:
    """The source's cursors took the connection's row_factory: with dict_row, paging
    raised KeyError: 0, and offset mode served the column names as the values."""
    with psycopg.connect(postgres_server.dsn, row_factory=psycopg.rows.dict_row) as conn:
        conn.execute("CREATE TEMP TABLE dr (id int PRIMARY KEY, name text)")
        conn.execute("INSERT INTO dr SELECT g, 'n' || g FROM generate_series(1, 7) g")
        for mode in ("keyset", "offset"):
            source = PostgresSource(conn, table="dr", mode=mode)
            assert page_through(source, 3) == list(range(1, 8))
            first = next(source.open(None))[0]
            assert first == {"id": 1, "name": "n1"}
        assert conn.row_factory is psycopg.rows.dict_row  # the caller's, untouched


def test_regression_sqlite_a_connection_that_converts_keys_is_refused(tmp_path: Path) -> None:
    """With detect_types, a TIMESTAMP key came back a datetime whose text is not what
    SQLite stores ('10:00:00' for '10:00:00.000'): the next page began at the same row
    again, and paging never ended."""
    path = tmp_path / "conv.db"
    with contextlib.closing(sqlite3.connect(path)) as setup:
        setup.execute("CREATE TABLE t (id INTEGER PRIMARY KEY, at TIMESTAMP NOT NULL)")
        setup.executemany(
            "INSERT INTO t VALUES (?, ?)",
            [(i, f"2024-01-01 10:00:0{i}.000") for i in range(1, 4)],
        )
        setup.commit()
    with contextlib.closing(sqlite3.connect(path, detect_types=sqlite3.PARSE_DECLTYPES)) as conn:
        with pytest.raises(LimitError, match="detect_types") as raised:
            page_through(SQLiteSource(conn, table="t", order_by=("at",)), 1)
        assert raised.value.name == "connection"
        # Keys it leaves as stored page as usual, the other columns converted.
        rows = list(SQLiteSource(conn, table="t").open(None))
        assert [row["id"] for row, _ in rows] == [1, 2, 3]
        assert isinstance(rows[0][0]["at"], dt.datetime)
    # By path, the source's own connection converts nothing.
    assert page_through(SQLiteSource(path, table="t", order_by=("at",)), 1) == [1, 2, 3]


def test_regression_sqlite_a_connection_that_reads_text_as_bytes_is_refused(
    tmp_path: Path,
) -> None:
    """With text_factory=bytes, a text key was bound as a BLOB, which sorts after every
    text: ids 3-5 were lost under an empty page that said complete."""
    with contextlib.closing(sqlite3.connect(tmp_path / "tf.db")) as conn:
        conn.execute("CREATE TABLE t (id INTEGER PRIMARY KEY, name TEXT NOT NULL UNIQUE)")
        conn.executemany("INSERT INTO t VALUES (?, ?)", [(i, f"n{i}") for i in range(1, 6)])
        conn.text_factory = bytes
        for source in (
            SQLiteSource(conn, query="SELECT id, name FROM t", order_by=("name",), unique=True),
            SQLiteSource(conn, table="t"),
        ):
            with pytest.raises(LimitError, match="text_factory") as raised:
                page_through(source, 2)
            assert raised.value.name == "connection"
        conn.text_factory = str
        assert page_through(SQLiteSource(conn, table="t", order_by=("name",)), 2) == [1, 2, 3, 4, 5]


def test_regression_sqlite_text_that_is_not_utf8_is_a_decode_error(tmp_path: Path) -> None:
    """A short TEXT value that is not UTF-8 made every page that reached it fail with
    sqlite3's own OperationalError: no JsonBudgetError, and no way past it."""
    from jsonbudget.errors import DecodeError

    path = tmp_path / "bad.db"
    with contextlib.closing(sqlite3.connect(path)) as setup:
        setup.execute("CREATE TABLE t (id INTEGER PRIMARY KEY, x TEXT)")
        setup.execute("INSERT INTO t VALUES (1, 'ok'), (2, CAST(x'61ff62' AS TEXT)), (3, 'after')")
        setup.commit()
    for source in (SQLiteSource(path, table="t"), SQLiteSource(path, table="t", mode="offset")):
        with pytest.raises(DecodeError, match="column 'x'") as raised:
            page_through(source, 5)
        assert raised.value.offset is None
        with pytest.raises(DecodeError):
            list(source.open(None))
        source.close()
    # A connection that decodes such text its own way pages every row.
    with contextlib.closing(sqlite3.connect(path)) as conn:
        conn.text_factory = lambda b: b.decode("utf-8", "replace")
        assert page_through(SQLiteSource(conn, table="t"), 1) == [1, 2, 3]
        assert next(SQLiteSource(conn, table="t").open([1]))[0]["x"] == "a\ufffdb"


@pytest.mark.postgres
def test_pg_a_unique_index_under_another_collation_is_not_enough(
    pg: psycopg.Connection[Any],
) -> None:
    pg.execute("DROP TABLE IF EXISTS tc")
    pg.execute(
        "CREATE COLLATION IF NOT EXISTS jb_ci"
        " (provider = icu, locale = 'und-u-ks-level2', deterministic = false)"
    )
    pg.execute("CREATE TABLE tc (id int PRIMARY KEY, name text COLLATE jb_ci NOT NULL)")
    try:
        pg.execute('CREATE UNIQUE INDEX tcu ON tc (name COLLATE "C")')
        pg.execute(
            "INSERT INTO tc SELECT g, CASE WHEN g % 2 = 0 THEN 'n' ELSE 'N' END"
            " || (g / 2)::text FROM generate_series(1, 80) g"
        )
        got = read_in_pages(PostgresSource(pg, table="tc", order_by=("name",)), [7])
        assert sorted(row["id"] for row in got) == list(range(1, 81))
    finally:
        pg.execute("DROP TABLE tc")


@pytest.mark.postgres
def test_pg_default_order_of_a_table_without_id_is_its_primary_key(
    pg: psycopg.Connection[Any],
) -> None:
    pg.execute("DROP TABLE IF EXISTS nk")
    pg.execute("CREATE TABLE nk (code text, part int, n int, PRIMARY KEY (code, part))")
    try:
        with pg.cursor() as cur:
            cur.executemany(
                "INSERT INTO nk VALUES (%s, %s, %s)",
                [(f"k{(i * 37) % 61:02}", i % 2, i) for i in range(61)],
            )
        for mode in ("keyset", "offset"):
            got = read_in_pages(PostgresSource(pg, table="nk", mode=mode), [6])
            assert sorted(row["n"] for row in got) == list(range(61))
            keys = [(row["code"], row["part"]) for row in got]
            assert keys == sorted(keys)
        pg.execute("ALTER TABLE nk DROP CONSTRAINT nk_pkey")
        with pytest.raises(LimitError, match="no `id` column and no primary key"):
            PostgresSource(pg, table="nk").open(None)
    finally:
        pg.execute("DROP TABLE nk")


@pytest.mark.postgres
def test_pg_query_order_refused_unless_declared(pg: psycopg.Connection[Any]) -> None:
    with pytest.raises(LimitError, match="unique=True"):
        PostgresSource(pg, query="SELECT id, at FROM ev", order_by=("at",)).open(None)
    source = PostgresSource(pg, query="SELECT id, at FROM ev", order_by=("at",), unique=True)
    with pytest.raises(LimitError, match="share the order key"):
        all_ids(source)


@pytest.mark.postgres
def test_regression_pg_a_declared_unique_order_tied_as_numeric_compares_raises(
    pg: psycopg.Connection[Any],
) -> None:
    """Regression: numeric 1, 1.0 and 1.00 are one key to PostgreSQL and three to the
    check in Python: 3 of 6 rows with complete=True."""
    query = "SELECT v::numeric AS k, i FROM (VALUES ('1', 1), ('1.0', 2), ('1.00', 3),"
    query += " ('2', 4), ('2.0', 5), ('2.00', 6)) AS t(v, i)"
    source = PostgresSource(pg, query=query, order_by=("k",), unique=True)
    with pytest.raises(LimitError, match="share the order key"):
        pages_by_fill(source, Limits(1024, max_items=2))


# --- the cut goes into the SQL ------------------------------------------------------------


def test_sqlite_long_cells_arrive_cut_with_their_exact_length(tmp_path: Path) -> None:
    conn = sqlite3.connect(":memory:")
    conn.execute("CREATE TABLE c (id INTEGER PRIMARY KEY, body, n)")
    text = "é" * 5000 + "tail"
    conn.execute("INSERT INTO c VALUES (1, ?, 12345)", (text,))
    conn.execute("INSERT INTO c VALUES (2, ?, 1.5)", (b"\x00\xff" * 4000,))
    conn.execute("INSERT INTO c VALUES (3, 'short', NULL)")
    statements: list[str] = []
    conn.set_trace_callback(statements.append)
    rows = [row for row, _ in SQLiteSource(conn, table="c", max_cell_bytes=100).open(None)]
    # Counted in UTF-8 bytes, as the bound is: 100 bytes hold 50 of the "é"s.
    assert rows[0] == {"id": 1, "body": Clipped("é" * 50, 10004, "bytes"), "n": 12345}
    assert rows[1] == {"id": 2, "body": Clipped(b"\x00\xff" * 50, 8000, "bytes"), "n": 1.5}
    assert rows[2] == {"id": 3, "body": "short", "n": None}
    assert rows[0]["body"].omitted == 9904
    # The database cut it: the statement selected a 100-byte prefix.
    assert 'substr(CAST(_jb_q."body" AS BLOB), 1, 100)' in statements[-1]


@settings(max_examples=150, deadline=None)
@given(
    cells=st.lists(
        st.one_of(
            st.text(max_size=120),
            st.binary(max_size=120),
            st.integers(-(2**63), 2**63 - 1),
            st.none(),
        ),
        min_size=1,
        max_size=8,
    ),
    bound=st.integers(64, 100),
)
def test_sqlite_cells_arrive_whole_or_cut_to_a_prefix_with_their_size(
    cells: list[Any], bound: int
) -> None:
    # Whatever a cell holds (digits and tag letters included), it arrives as itself when
    # it has at most *bound* bytes, else as a prefix of at most *bound* bytes that says
    # the cell's exact size.
    conn = sqlite3.connect(":memory:")
    conn.execute("CREATE TABLE c (id INTEGER PRIMARY KEY, body)")
    conn.executemany("INSERT INTO c VALUES (?, ?)", enumerate(cells))
    got = [r["body"] for r, _ in SQLiteSource(conn, table="c", max_cell_bytes=bound).open(None)]
    assert len(got) == len(cells)
    for cell, value in zip(cells, got, strict=True):
        if not isinstance(cell, str | bytes):
            assert value == cell
            assert type(value) is type(cell)
            continue
        size = len(cell.encode("utf-8", "surrogatepass") if isinstance(cell, str) else cell)
        if size <= bound:
            assert value == cell
            assert type(value) is type(cell)
            continue
        assert isinstance(value, Clipped)
        assert value.length == size
        assert value.unit == "bytes"
        assert type(value.head) is type(cell)
        assert cell.startswith(value.head)  # type: ignore[arg-type]  # same type, checked above
        head = value.head.encode("utf-8") if isinstance(value.head, str) else value.head
        assert bound - 3 <= len(head) <= bound


@pytest.mark.parametrize("declared", ["NUMERIC", "INTEGER", "TEXT COLLATE NOCASE", "BLOB", "REAL"])
def test_sqlite_cuts_long_text_whatever_the_column_declares(declared: str) -> None:
    # The cut asks `col >= ''` (only texts and blobs are) before sizing a value: a
    # column's affinity or collation must not hide a long text from it.
    conn = sqlite3.connect(":memory:")
    conn.execute(f"CREATE TABLE c (id INTEGER PRIMARY KEY, body {declared})")
    conn.executemany("INSERT INTO c VALUES (?, ?)", [(1, "w" * 500), (2, 7), (3, 2.5), (4, None)])
    got = [r["body"] for r, _ in SQLiteSource(conn, table="c", max_cell_bytes=100).open(None)]
    assert got[0] == Clipped("w" * 100, 500, "bytes")
    # Each number as its column's affinity stored it (TEXT makes them texts).
    assert got[1:] == [str(v) if declared.startswith("TEXT") else v for v in (7, 2.5)] + [None]


@pytest.mark.parametrize("encoding", ["UTF-8", "UTF-16le", "UTF-16be"])
def test_sqlite_cells_at_the_bound_and_past_a_nul(encoding: str) -> None:
    # Regression: length() and substr() stop at a NUL inside a TEXT, so a long text
    # with an early NUL was fetched whole. In a UTF-8 database a cell is sized and cut
    # in bytes; a cut that falls inside a character leaves that character out.
    conn = sqlite3.connect(":memory:")
    conn.execute(f'PRAGMA encoding = "{encoding}"')
    conn.execute("CREATE TABLE c (id INTEGER PRIMARY KEY, body)")
    cells = {
        1: "ab\x00" + "x" * 300,  # a NUL early in a long text
        2: b"\x01" * 100,  # a blob exactly at the bound
        3: b"\x01" * 101,  # one byte over
        4: "y" * 100,  # a text exactly at the bound
        5: "z" * 101,
        6: "a" + "€" * 40,  # 121 bytes; the bound falls inside the 34th euro sign
        7: "T00000000000000000999" + "q" * 50,  # looks like a tagged cell, is short
        8: b"B00000000000000000999" + b"q" * 79,  # the same as a blob, at the bound
    }
    conn.executemany("INSERT INTO c VALUES (?, ?)", cells.items())
    got = {
        r["id"]: r["body"] for r, _ in SQLiteSource(conn, table="c", max_cell_bytes=100).open(None)
    }
    assert got[2] == cells[2]
    assert got[4] == cells[4]
    assert got[7] == cells[7]
    assert got[8] == cells[8]
    assert got[3] == Clipped(b"\x01" * 100, 101, "bytes")
    if encoding == "UTF-8":
        assert got[1] == Clipped("ab\x00" + "x" * 97, 303, "bytes")
        assert got[5] == Clipped("z" * 100, 101, "bytes")
        assert got[6] == Clipped("a" + "€" * 33, 121, "bytes")
        assert got[6].omitted == 21  # 121 - 1 - 33 * 3: the split character is counted
    else:
        # UTF-16: counted in characters, which SQLite stops counting at a NUL.
        assert got[1] == cells[1]
        assert got[5] == Clipped("z" * 100, 101, "chars")
        assert got[6] == cells[6]


def test_clipped_never_passes_for_the_whole_value() -> None:
    clipped: object = Clipped("abc", 10, "chars")
    assert clipped != "abc"
    # Written by a plain JSON library it still says it is a part: head and full length.
    assert orjson.loads(orjson.dumps(clipped)) == {"head": "abc", "length": 10, "unit": "chars"}
    assert Clipped("ü" * 3, 10, "bytes").omitted == 4  # UTF-8 bytes of a text


def test_order_columns_are_never_cut(tmp_path: Path) -> None:
    conn = sqlite3.connect(":memory:")
    conn.execute("CREATE TABLE k (name TEXT PRIMARY KEY)")
    conn.executemany("INSERT INTO k VALUES (?)", [("x" * 200 + str(i),) for i in range(5)])
    source = SQLiteSource(conn, table="k", order_by=("name",), max_cell_bytes=64)
    got = read_in_pages(source, [2])
    assert [row["name"] for row in got] == sorted("x" * 200 + str(i) for i in range(5))


# A source that opened its own connection reads cells bare under SQLite's length limit
# (the cut select costs SQLite about a fifth more a row); a longer value stops the query,
# which runs again cut. The pages must be the cut select's, byte for byte.


@settings(max_examples=60, deadline=None)
@given(
    cells=st.lists(
        st.one_of(
            st.text(max_size=90),
            st.binary(max_size=90),
            # around the bound, where a cell is read whole or by blob I/O
            st.text(min_size=40, max_size=100),
            st.binary(min_size=60, max_size=100),
            st.integers(-(2**63), 2**63 - 1),
            st.none(),
        ),
        min_size=1,
        max_size=30,
    ),
    bound=st.integers(64, 80),
    page_bytes=st.integers(500, 2000),
    max_items=st.integers(1, 8),
    # Where blob I/O reads a long cell (a rowid, under its own name or another), and
    # where it cannot (no rowid; every name of it taken by a column).
    extra=st.sampled_from(
        ["", ") WITHOUT ROWID", ", rowid TEXT)", ", rowid, _rowid_, oid)", ", _jb_blob_rowid)"]
    ),
)
def test_a_path_source_pages_as_the_cut_select_does(
    cells: list[Any], bound: int, page_bytes: int, max_items: int, extra: str
) -> None:
    with tempfile.TemporaryDirectory() as tmp:
        path = Path(tmp) / "cells.sqlite"
        conn = sqlite3.connect(path)
        conn.execute(f"CREATE TABLE c (id INTEGER PRIMARY KEY, body, name TEXT{extra or ')'}")
        conn.executemany(
            "INSERT INTO c (id, body, name) VALUES (?, ?, ?)",
            [(i, c, f"n{i}") for i, c in enumerate(cells)],
        )
        conn.commit()
        limits = Limits(page_bytes, max_items=max_items)
        cut = pages_by_fill(SQLiteSource(conn, table="c", max_cell_bytes=bound), limits)
        with SQLiteSource(path, table="c", max_cell_bytes=bound) as source:
            assert pages_by_fill(source, limits) == cut
            # The limit is lifted after every page: open() reads long cells cut again.
            streamed = [row for row, _ in source.open(None)]
        conn.close()
    assert streamed == [row for page in cut for row in page]


@pytest.mark.parametrize("bound", [64, 1000])
@pytest.mark.parametrize(
    "over",
    [
        lambda n: "x" * (n + 3),
        lambda n: "é" * (n // 2 + 1),
        lambda n: b"x" * (n + 3),
        lambda n: b"B%020d" % 5000 + b"y" * (n + 3 - 21),  # looks like the cut's tag
    ],
    ids=["text", "multibyte", "blob", "tag-like blob"],
)
def test_regression_a_cell_just_over_the_bound_is_cut_on_a_path_source_too(
    tmp_path: Path, bound: int, over: Callable[[int], str | bytes]
) -> None:
    # Regression: SQLite checks the length limit only where it grows a buffer, so after
    # a cell at the bound one a few bytes over passed the bare read: a text came whole,
    # a blob was taken for the cut's tag (a ValueError, or a made-up Clipped).
    path = tmp_path / "slip.sqlite"
    conn = sqlite3.connect(path)
    conn.execute("CREATE TABLE t (id INTEGER PRIMARY KEY, body)")
    at = "x" * bound if isinstance(over(bound), str) else b"x" * bound
    conn.executemany("INSERT INTO t VALUES (?, ?)", enumerate([at, over(bound), at]))
    conn.commit()
    limits = Limits(100_000)
    cut = pages_by_fill(SQLiteSource(conn, table="t", max_cell_bytes=bound), limits)
    with SQLiteSource(path, table="t", max_cell_bytes=bound) as source:
        assert pages_by_fill(source, limits) == cut
    conn.close()
    body = cut[0][1]["body"]
    assert isinstance(body, Clipped)
    raw = over(bound)
    assert body.length == len(raw.encode() if isinstance(raw, str) else raw)


def test_a_path_source_reads_a_long_cell_of_a_rowid_table_by_blob_io(tmp_path: Path) -> None:
    path = tmp_path / "cells.sqlite"
    conn = sqlite3.connect(path)
    conn.execute("CREATE TABLE c (id INTEGER PRIMARY KEY, body)")
    conn.executemany("INSERT INTO c VALUES (?, ?)", [(i, f"row {i}") for i in range(40)])
    conn.execute("UPDATE c SET body = ? WHERE id = 25", ("é" * 300,))
    conn.execute("UPDATE c SET body = ? WHERE id = 27", (b"\x01" * 5000,))
    conn.commit()
    conn.close()
    statements: list[str] = []
    with SQLiteSource(path, table="c", max_cell_bytes=100, batch_size=10) as source:
        # The source's own connection: the only way to watch the statements it runs.
        source._connection().set_trace_callback(statements.append)
        pages = pages_by_fill(source, Limits(4096, max_items=100))
    rows = [row for page in pages for row in page]
    assert [row["id"] for row in rows] == list(range(40))
    assert rows[25]["body"] == Clipped("é" * 50, 600, "bytes")
    assert rows[27]["body"] == Clipped(b"\x01" * 100, 5000, "bytes")
    # The cut select never ran. The batches are read bare; the one that holds rows 20-29
    # stopped at row 25 and was read again a row at a time (its rowids, then each row).
    assert not any("substr(" in s for s in statements)
    batches = [s for s in statements if s.startswith('SELECT _jb_q."id", _jb_q."body" FROM')]
    by_rowid = [s for s in batches if s.endswith('WHERE _jb_q."_jb_blob_rowid" = ?')]
    assert len(batches) - len(by_rowid) == 5  # 0-9, 10-19, 20-29 (stopped), 30-39, end
    assert len(by_rowid) == 10


@pytest.mark.parametrize(
    ("schema", "source"),
    [
        ("", {"query": "SELECT id, printf('%.*c', n, 'x') AS v FROM t", "unique": True}),
        (
            "",
            {
                "query": "SELECT id, v || v AS v FROM (SELECT id, printf('%.*c', n, 'x') v FROM t)",
                "unique": True,
            },
        ),
        (
            "CREATE VIEW w AS SELECT id, printf('%.*c', n, 'x') AS v FROM t",
            {"table": "w", "order_by": ("id",), "unique": True},
        ),
        (
            "ALTER TABLE t ADD COLUMN v GENERATED ALWAYS AS (printf('%.*c', n, 'x')) VIRTUAL",
            {"table": "t"},
        ),
    ],
    ids=["query", "query-concat", "view", "virtual-column"],
)
def test_regression_a_path_source_reads_a_made_value_cut_not_null(
    tmp_path: Path, schema: str, source: dict[str, Any]
) -> None:
    # Regression: under the length limit of a bare read, printf() past it returns NULL
    # instead of stopping the query: row 2 came back {"v": null}, complete, unmarked. A
    # value the query makes is never read bare; only a table's stored columns are.
    path = tmp_path / "made.sqlite"
    conn = sqlite3.connect(path)
    conn.execute("CREATE TABLE t (id INTEGER PRIMARY KEY, n INTEGER)")
    conn.executemany("INSERT INTO t VALUES (?, ?)", [(1, 10), (2, 5000)])
    if schema:
        conn.execute(schema)
    conn.commit()
    limits = Limits(4096)
    cut = pages_by_fill(SQLiteSource(conn, max_cell_bytes=64, **source), limits)
    with SQLiteSource(path, max_cell_bytes=64, **source) as bare:
        assert pages_by_fill(bare, limits) == cut
    conn.close()
    (v,) = {row["v"] for page in cut for row in page if row["id"] == 2}
    assert isinstance(v, Clipped)
    assert v.length >= 5000


def test_a_path_source_lifts_its_length_limit_when_a_page_fails(tmp_path: Path) -> None:
    path = tmp_path / "ties.sqlite"
    conn = sqlite3.connect(path)
    conn.execute("CREATE TABLE t (id INTEGER PRIMARY KEY, grp INTEGER, body TEXT)")
    # Two groups of three short rows (ties under unique=True), then long rows, one a group.
    rows = [(i, i // 3, "short") for i in range(6)] + [(i, i - 4, "x" * 200) for i in (6, 7, 8)]
    conn.executemany("INSERT INTO t VALUES (?, ?, ?)", rows)
    conn.commit()
    conn.close()
    with SQLiteSource(path, table="t", order_by=("grp",), unique=True, max_cell_bytes=64) as s:
        with pytest.raises(LimitError, match="share the order key"):
            pages_by_fill(s, Limits(4096, max_items=2))  # the first page meets the tie
        streamed = [row["body"] for row, _ in s.open([1])]
    assert streamed == [Clipped("x" * 64, 200, "bytes")] * 3


def test_max_cell_bytes_is_validated() -> None:
    conn = sqlite3.connect(":memory:")
    with pytest.raises(LimitError, match="max_cell_bytes"):
        SQLiteSource(conn, table="t", max_cell_bytes=MIN_CELL_BYTES - 1)


@pytest.fixture
def pg_cells(pg: psycopg.Connection[Any]) -> Iterator[psycopg.Connection[Any]]:
    pg.execute("DROP TABLE IF EXISTS cells")
    pg.execute(
        "CREATE TABLE cells (id int PRIMARY KEY, t text, v varchar, b bytea, j jsonb, js json,"
        " arr int[], n numeric, at timestamptz, u uuid, iv interval)"
    )
    yield pg
    pg.execute("DROP TABLE cells")


@pytest.mark.postgres
def test_pg_long_cells_are_cut_in_the_query(pg_cells: psycopg.Connection[Any]) -> None:
    pg = pg_cells
    big_json = {"k": ["v" * 50] * 100}
    pg.execute(
        "INSERT INTO cells (id, t, v, b, j, js, arr) VALUES (1, %s, %s, %s, %s, %s, %s)",
        (
            "ü" * 10_000,
            "x" * 300,
            b"\x01" * 100_000,
            Jsonb(big_json),
            Json(big_json),
            list(range(1000)),
        ),
    )
    ((row, _),) = list(PostgresSource(pg, table="cells", max_cell_bytes=100).open(None))
    # Text lengths are the stored size in bytes (UTF-8 here): counting the characters of a
    # 1 GB text would read all of it.
    assert row["t"] == Clipped("ü" * 100, 20_000, "bytes")
    assert row["t"].omitted == 20_000 - 200
    assert row["v"] == Clipped("x" * 100, 300, "bytes")
    assert row["b"] == Clipped(b"\x01" * 100, 100_000, "bytes")
    text = pg.execute("SELECT j::text, js::text, arr::text FROM cells").fetchone()
    assert text is not None
    assert row["j"] == Clipped(text[0][:100], len(text[0]), "chars")
    assert row["js"] == Clipped(text[1][:100], len(text[1]), "chars")
    assert row["arr"] == Clipped(text[2][:100], len(text[2]), "chars")


@pytest.mark.postgres
def test_pg_multibyte_text_over_the_byte_bound_but_within_characters_is_whole(
    pg_cells: psycopg.Connection[Any],
) -> None:
    pg_cells.execute("INSERT INTO cells (id, t) VALUES (1, %s)", ("ü" * 80,))  # 160 bytes
    ((row, _),) = list(PostgresSource(pg_cells, table="cells", max_cell_bytes=100).open(None))
    assert row["t"] == "ü" * 80


@pytest.fixture
def pg_wide(pg: psycopg.Connection[Any]) -> Iterator[psycopg.Connection[Any]]:
    """A table of values that may be as long as a cell, none text, bytea, JSON or array:
    row 1 holds long ones (50,000 characters of text or more each), row 2 short ones."""
    pg.execute("DROP TABLE IF EXISTS wide")
    pg.execute("DROP TYPE IF EXISTS pair")
    pg.execute("DROP TYPE IF EXISTS trange")
    pg.execute("CREATE TYPE pair AS (n int, body text)")
    pg.execute("CREATE TYPE trange AS RANGE (subtype = text, multirange_type_name = tmultirange)")
    pg.execute(
        "CREATE TABLE wide (id int PRIMARY KEY, c pair, r trange, m tmultirange, nr numrange,"
        " vb varbit, poly polygon, pa path, tv tsvector)"
    )
    points = "SELECT string_agg(format('(%s,%s)', g, g % 7), ',') FROM generate_series(1, {}) AS g"
    words = (
        "SELECT to_tsvector('simple', string_agg('w' || g, ' ')) FROM generate_series(1, {}) AS g"
    )
    for row_id, n in ((1, 10_000), (2, 3)):
        pg.execute(
            f"INSERT INTO wide VALUES ({row_id}, row(1, repeat('x', 5 * {n}))::pair,"
            f" trange('a', repeat('z', 5 * {n})), tmultirange(trange('a', repeat('z', 5 * {n}))),"
            f" numrange(0, ('1' || repeat('0', 5 * {n}))::numeric), repeat('1', 5 * {n})::varbit,"
            f" ('(' || ({points.format(n)}) || ')')::polygon,"
            f" ('[' || ({points.format(n)}) || ']')::path, ({words.format(n)}))"
        )
    yield pg
    pg.execute("DROP TABLE wide")
    pg.execute("DROP TYPE pair")
    pg.execute("DROP TYPE trange")


_WIDE = ("c", "r", "m", "nr", "vb", "poly", "pa", "tv")


@pytest.mark.postgres
def test_regression_pg_cells_of_any_unbounded_type_are_cut_in_the_query(
    pg_wide: psycopg.Connection[Any], postgres_server: PostgresServer, tmp_path: Path
) -> None:
    """Regression: only text, bytea, JSON, XML and arrays were cut in the query; a
    composite, range, bit string, polygon, tsvector or record came whole whatever the
    bound (a 50 MB composite cell: 468 MB at the client for a 4 KiB page)."""
    pg = pg_wide
    query = "SELECT *, row(id, c) AS rec FROM wide"
    columns = (*_WIDE, "rec")
    texts = pg.execute(
        f"SELECT {', '.join(f'{c}::text' for c in columns)} FROM ({query}) AS q ORDER BY id"
    ).fetchall()
    assert min(map(len, texts[0])) >= 50_000
    trace = tmp_path / "libpq.trace"
    with (
        psycopg.connect(postgres_server.dsn, autocommit=True) as reader,
        trace.open("w") as f,
    ):
        reader.pgconn.trace(f.fileno())
        source = PostgresSource(
            reader, query=query, order_by=("id",), unique=True, max_cell_bytes=100
        )
        long, short = (row for row, _ in source.open(None))
        pages = pages_by_fill(PostgresSource(reader, query=query, unique=True), Limits(2048))
        reader.pgconn.untrace()
    for name, text in zip(columns, texts[0], strict=True):
        assert long[name] == Clipped(text[:100], len(text), "chars"), name
        (cut,) = [row[name] for page in pages for row in page if row["id"] == 1]
        assert isinstance(cut, Clipped)
        assert text.startswith(cut.head)
        assert 0 < len(cut.head) <= 2048
    # What came over the wire is the cut (nine cells of at most 2,048 characters), not
    # the cells (each of 50,000 bytes or more).
    rows_sent = [line for line in trace.read_text().splitlines() if "DataRow" in line]
    assert rows_sent
    assert max(map(len, rows_sent)) < 25_000
    # A short value arrives as psycopg loads it.
    assert short == {
        "id": 2,
        **dict(zip(columns, pg.execute(f"{query} WHERE id = 2").fetchone()[1:], strict=True)),  # type: ignore[index]
    }


@pytest.mark.postgres
def test_pg_values_bounded_by_their_type_are_never_cut(pg_cells: psycopg.Connection[Any]) -> None:
    # A numeric's text is at most 147,457 characters: it arrives as the Decimal it is,
    # as do the other types bounded by their type, even under the smallest bound.
    long_number = Decimal("9" * 300 + "." + "1" * 100)
    uid = uuid.UUID("12345678-1234-5678-1234-567812345678")
    pg_cells.execute(
        "INSERT INTO cells (id, n, u, iv) VALUES (1, %s, %s, '1 day')", (long_number, uid)
    )
    source = PostgresSource(
        pg_cells,
        query="SELECT id, n, u, iv, '10.0.0.1'::inet AS ip, point(1, 2) AS pt FROM cells",
        unique=True,
        max_cell_bytes=MIN_CELL_BYTES,
    )
    ((row, _),) = list(source.open(None))
    assert row["n"] == long_number
    assert row["u"] == uid
    assert row["iv"] == dt.timedelta(days=1)
    assert str(row["ip"]) == "10.0.0.1"
    assert row["pt"] == "(1,2)"


@pytest.mark.postgres
def test_pg_driver_types_arrive_as_values(pg_cells: psycopg.Connection[Any]) -> None:
    """Values as psycopg loads them: never strings standing for them."""
    at = dt.datetime(2024, 5, 6, 7, 8, 9, tzinfo=dt.UTC)
    uid = uuid.UUID("12345678-1234-5678-1234-567812345678")
    pg_cells.execute(
        "INSERT INTO cells VALUES (1, 't', 'v', %s, %s, %s, %s, %s, %s, %s, %s)",
        (
            b"\x00\x01",
            Jsonb({"a": [1, 2.5, None]}),
            Json([True, "x"]),
            [1, 2, 3],
            Decimal("12345678901234567890.123"),
            at,
            uid,
            dt.timedelta(days=2, seconds=5),
        ),
    )
    ((row, pos),) = list(PostgresSource(pg_cells, table="cells").open(None))
    assert row == {
        "id": 1,
        "t": "t",
        "v": "v",
        "b": b"\x00\x01",
        "j": {"a": [1, 2.5, None]},
        "js": [True, "x"],
        "arr": [1, 2, 3],
        "n": Decimal("12345678901234567890.123"),
        "at": at,
        "u": uid,
        "iv": dt.timedelta(days=2, seconds=5),
    }
    assert row["at"].tzinfo is not None
    assert pos == [1]


@pytest.mark.postgres
def test_pg_keys_of_driver_types_round_trip(pg_cells: psycopg.Connection[Any]) -> None:
    base = dt.datetime(2024, 1, 1, tzinfo=dt.UTC)
    with pg_cells.cursor() as cur:
        cur.executemany(
            "INSERT INTO cells (id, n, at, u, b) VALUES (%s, %s, %s, %s, %s)",
            [
                (
                    i,
                    Decimal(i % 4) / 3,
                    base + dt.timedelta(hours=i % 3),
                    uuid.uuid4(),
                    bytes([i % 5]),
                )
                for i in range(40)
            ],
        )
    for order in (("n",), ("-at", "u"), ("b",), ("u",)):
        source = PostgresSource(pg_cells, table="cells", order_by=order)
        got = read_in_pages(source, [3, 5])
        assert sorted(row["id"] for row in got) == list(range(40))


# --- one connection per source ------------------------------------------------------------


def _backends(pg: psycopg.Connection[Any]) -> int:
    row = pg.execute(
        "SELECT count(*) FROM pg_stat_activity WHERE backend_type = 'client backend'"
    ).fetchone()
    assert row is not None
    return int(row[0])


@pytest.mark.postgres
def test_pg_conninfo_source_keeps_one_connection_until_close(
    postgres_server: PostgresServer, pg: psycopg.Connection[Any]
) -> None:
    """Regression: a conninfo source opened a connection for every page."""
    before = _backends(pg)
    with PostgresSource(
        postgres_server.dsn, query="SELECT id, pg_backend_pid() AS pid FROM ev", unique=True
    ) as source:
        got = read_in_pages(source, [40])
        assert len(got) == 300
        assert len({row["pid"] for row in got}) == 1  # every page on the same backend
        assert _backends(pg) == before + 1
        (pid,) = {row["pid"] for row in got}
    # Closed by the with block; the server ends the backend asynchronously, so wait for it.
    for _ in range(200):
        gone = pg.execute("SELECT count(*) FROM pg_stat_activity WHERE pid = %s", (pid,))
        if gone.fetchone() == (0,):
            break
        time.sleep(0.05)
    else:
        raise AssertionError(f"backend {pid} still there after close()")


@pytest.mark.postgres
def test_pg_pool_lends_a_connection_per_page(
    postgres_server: PostgresServer, pg: psycopg.Connection[Any]
) -> None:
    import psycopg_pool  # the postgres extra's pool, used only here

    with psycopg_pool.ConnectionPool(postgres_server.dsn, min_size=1, max_size=2) as pool:
        source = PostgresSource(pool, table="ev")
        assert len(read_in_pages(source, [70])) == 300
        source.close()  # a pool is the caller's: still usable
        with pool.connection() as conn:
            assert conn.execute("SELECT 1").fetchone() == (1,)


def test_sqlite_path_source_keeps_one_connection_until_close(
    sqlite_db: tuple[Path, sqlite3.Connection],
) -> None:
    path, _ = sqlite_db

    def handles() -> int:
        return sum(
            1
            for fd in os.listdir("/proc/self/fd")
            if os.path.realpath(f"/proc/self/fd/{fd}") == str(path)
        )

    before = handles()
    with SQLiteSource(path, table="t") as source:
        read_in_pages(source, [10])
        assert handles() == before + 1
        read_in_pages(source, [10])
        assert handles() == before + 1
    assert handles() == before


# --- sources that change between pages ----------------------------------------------------


def test_a_row_whose_key_changes_between_pages_is_served_where_its_key_is_then(
    sqlite_db: tuple[Path, sqlite3.Connection],
) -> None:
    """The documented outcome: keyset pages follow the key as each page reads it."""
    _, conn = sqlite_db
    source = SQLiteSource(conn, table="t", order_by=("id",))
    first = take(source, None, 5)  # ids 2..10
    conn.execute("UPDATE t SET id = 1000 WHERE id = 4")  # served already; moves ahead
    conn.execute("UPDATE t SET id = 1 WHERE id = 50")  # not served yet; moves behind
    rest = all_ids(source, roundtrip(first[-1][1]))
    assert 1000 in rest  # served again at its new place
    assert 1 not in rest  # now behind the cursor: not in this operation
    assert 50 not in rest
    assert rest == sorted(rest)


def test_paginate_over_ties_serves_every_row_once(tmp_path: Path) -> None:
    """Regression through the real pager: ties at page boundaries lost rows, complete."""
    conn = sqlite3.connect(tmp_path / "p.sqlite")
    conn.execute("CREATE TABLE t (grp TEXT, n INTEGER)")
    conn.executemany("INSERT INTO t VALUES (?, ?)", [(f"g{i % 7}", i) for i in range(3000)])
    conn.commit()
    store = MemoryCursorStore()
    scope = Scope("alice", {"report": "groups"})
    limits = Limits(4096)
    seen: list[int] = []
    cursor = None
    with SQLiteSource(tmp_path / "p.sqlite", table="t", order_by=("grp",)) as source:
        for _ in range(10_000):
            page = paginate(source, scope=scope, cursor=cursor, store=store, limits=limits)
            seen.extend(row["n"] for row in page.items)
            cursor = page.next_cursor
            if cursor is None:
                break
    assert page.complete
    assert sorted(seen) == list(range(3000))
    assert len(seen) == 3000


# --- batch path: fill() builds the same pages as the pager's item loop --------------------


@settings(max_examples=30, deadline=None)
@given(
    rows=_tables,
    order=_orders,
    max_bytes=st.integers(min_value=400, max_value=2000),
    max_items=st.none() | st.integers(min_value=1, max_value=7),
    offset_mode=st.booleans(),
)
def test_property_sqlite_fill_builds_the_pagers_pages(
    rows: list[tuple[Any, Any]],
    order: list[str],
    max_bytes: int,
    max_items: int | None,
    offset_mode: bool,
) -> None:
    conn = sqlite3.connect(":memory:")
    conn.execute("CREATE TABLE r (id INTEGER PRIMARY KEY, a INTEGER, b INTEGER, pad TEXT)")
    conn.executemany(
        "INSERT INTO r VALUES (?, ?, ?, ?)", [(i, *r, "p" * (i * 7)) for i, r in enumerate(rows)]
    )
    source = SQLiteSource(
        conn, table="r", order_by=order, mode="offset" if offset_mode else "keyset", batch_size=5
    )
    limits = Limits(max_bytes, max_items=max_items)
    by_fill = pages_by_fill(source, limits)
    assert by_fill == pages_by_paginate(source, limits)
    assert sorted(r["id"] for page in by_fill for r in page) == list(range(len(rows)))


@pytest.mark.postgres
def test_pg_fill_builds_the_pagers_pages(pg: psycopg.Connection[Any]) -> None:
    for limits in (Limits(2048), Limits(900, max_items=4), Limits(65536)):
        for order, mode in (
            (("id",), "keyset"),
            (("-at",), "keyset"),
            (("note", "-id"), "keyset"),
            (("id",), "offset"),
        ):
            source = PostgresSource(
                pg,
                table="ev",
                order_by=order,
                mode=mode,  # type: ignore[arg-type]  # a str from the table above
                batch_size=50,
            )
            by_fill = pages_by_fill(source, limits)
            assert by_fill == pages_by_paginate(source, limits)
            assert len([r for page in by_fill for r in page]) == 300


def test_fill_of_a_declared_unique_order_with_a_tie_at_the_boundary_raises(
    sqlite_db: tuple[Path, sqlite3.Connection],
) -> None:
    _, conn = sqlite_db
    source = SQLiteSource(conn, query="SELECT grp, id FROM t", order_by=("grp",), unique=True)
    with pytest.raises(LimitError, match="share the order key"):
        pages_by_fill(source, Limits(1024, max_items=3))


@pytest.mark.parametrize(
    ("declared", "spell"),
    [
        ("TEXT COLLATE NOCASE", lambda i: ("a", "A")[i % 2] + str(i // 2)),
        ("TEXT COLLATE RTRIM", lambda i: "a" + str(i // 2) + " " * (i % 2)),
        ("NUMERIC", lambda i: (str(i // 2), f"{i // 2}.0")[i % 2]),  # 1 and '1.0' are 1
    ],
)
def test_regression_a_declared_unique_order_tied_as_the_database_compares_raises(
    declared: str, spell: Any
) -> None:
    """Regression: keys the database holds equal but Python does not ('a0' and 'A0'
    under NOCASE) passed the boundary check, and the next page's `name > 'a3'` skipped
    'A3': 16 of 20 rows with complete=True."""
    conn = sqlite3.connect(":memory:")
    conn.execute(f"CREATE TABLE t (name {declared}, n INTEGER)")
    conn.executemany("INSERT INTO t VALUES (?, ?)", [(spell(i), i) for i in range(20)])
    source = SQLiteSource(conn, query="SELECT name, n FROM t", order_by=("name",), unique=True)
    with pytest.raises(LimitError, match="share the order key"):
        pages_by_fill(source, Limits(1024, max_items=3))
    with pytest.raises(LimitError, match="share the order key"):
        pages_by_paginate(source, Limits(1024, max_items=3))


def test_a_declared_unique_order_that_holds_pages_every_row_with_named_params() -> None:
    """The boundary check binds the user's parameters like the page query does."""
    conn = sqlite3.connect(":memory:")
    conn.execute("CREATE TABLE t (name TEXT COLLATE NOCASE, n INTEGER)")
    conn.executemany("INSERT INTO t VALUES (?, ?)", [(f"k{i:02}", i) for i in range(30)])
    for query, params in (
        ("SELECT name, n FROM t WHERE n >= :low", {"low": 5}),
        ("SELECT name, n FROM t WHERE n >= ?", [5]),
    ):
        source = SQLiteSource(conn, query=query, params=params, order_by=("name",), unique=True)
        pages = pages_by_fill(source, Limits(1024, max_items=4))
        assert [row["n"] for page in pages for row in page] == list(range(5, 30))


def _tied_keys_source(
    keys: list[int], *, nocase: bool, batch_size: int
) -> tuple[SQLiteSource, list[int]]:
    """A declared-unique source ordered by *keys* (row ids 0, 1, …; equal ints tie; with
    *nocase* a key k is spelled 'k' or 'K' by its parity, so k // 2 ties, equal only as
    the database compares), and the ids in key order (ties by id)."""
    conn = sqlite3.connect(":memory:")
    if nocase:
        conn.execute("CREATE TABLE t (id INTEGER PRIMARY KEY, k TEXT COLLATE NOCASE, pad TEXT)")
        spelled: list[Any] = [f"{'kK'[k % 2]}{k // 2:03}" for k in keys]
        rank = [k // 2 for k in keys]
    else:
        conn.execute("CREATE TABLE t (id INTEGER PRIMARY KEY, k INTEGER, pad TEXT)")
        spelled, rank = list(keys), list(keys)
    conn.executemany(
        "INSERT INTO t VALUES (?, ?, ?)", [(i, k, "p" * 40) for i, k in enumerate(spelled)]
    )
    source = SQLiteSource(
        conn, query="SELECT id, k, pad FROM t", order_by=("k",), unique=True, batch_size=batch_size
    )
    return source, sorted(range(len(keys)), key=lambda i: (rank[i], i))


@pytest.mark.parametrize("batch_size", [1, 2, 3, 16, 256])
@pytest.mark.parametrize("max_items", [None, 1, 4])
@pytest.mark.parametrize("nocase", [False, True])
def test_regression_a_declared_unique_order_tied_past_a_fetch_raises(
    batch_size: int, max_items: int | None, nocase: bool
) -> None:
    """Regression: each further fetch of a page asked for the rows strictly after the
    last one fetched, and the next page for those after the last row it carried over,
    so a row tied with that one was never asked for: over keys id // 2 in one 64 KiB
    page, 99 of 100 rows and complete=True (row 17, tied at the first 16-row fetch's
    end), with max_items=1 every other row."""
    # Every key twice: equal ints, or 'k007' and 'K007' under NOCASE.
    keys = list(range(100)) if nocase else [i // 2 for i in range(100)]
    source, _ = _tied_keys_source(keys, nocase=nocase, batch_size=batch_size)
    limits = Limits(65536, max_items=max_items)
    with pytest.raises(LimitError, match="share the order key"):
        pages_by_fill(source, limits)
    with pytest.raises(LimitError, match="share the order key"):
        pages_by_paginate(source, limits)


@settings(max_examples=150, deadline=None)
@given(
    keys=st.lists(st.integers(min_value=0, max_value=40), min_size=1, max_size=50),
    nocase=st.booleans(),
    batch_size=st.sampled_from([1, 2, 3, 5, 256]),
    max_bytes=st.integers(min_value=400, max_value=4000),
    max_items=st.none() | st.integers(min_value=1, max_value=6),
)
def test_property_a_declared_unique_order_never_loses_a_row(
    keys: list[int], nocase: bool, batch_size: int, max_bytes: int, max_items: int | None
) -> None:
    # Declared unique, right or wrong: the pages hold every row once, in order, or a tie
    # raises LimitError naming unique; a right declaration never raises.
    source, want = _tied_keys_source(keys, nocase=nocase, batch_size=batch_size)
    distinct = len({k // 2 if nocase else k for k in keys}) == len(keys)
    limits = Limits(max_bytes, max_items=max_items)
    for read in (pages_by_fill, pages_by_paginate):
        tie: LimitError | None = None
        try:
            got = [row["id"] for page in read(source, limits) for row in page]
        except LimitError as e:
            tie = e
        if tie is not None:
            assert not distinct
            assert "share the order key" in str(tie)
            continue
        assert sorted(got) == list(range(len(keys)))
        if distinct:
            assert got == want


def test_a_declared_unique_order_is_checked_by_one_query_a_page(
    sqlite_db: tuple[Path, sqlite3.Connection],
) -> None:
    # The page-end check also clears the key the next page's query starts after (the row
    # it carries): one query a page, none between a page's carried rows and its fetch.
    _, conn = sqlite_db
    statements: list[str] = []
    source = SQLiteSource(conn, query="SELECT id, grp FROM t", unique=True)
    conn.set_trace_callback(statements.append)
    pages = pages_by_fill(source, Limits(4096, max_items=7))
    conn.set_trace_callback(None)
    assert [row["id"] for page in pages for row in page] == list(range(2, 201, 2))
    fetches = [q for q in statements if q.startswith("SELECT _jb_q.")]
    checks = [q for q in statements if q.startswith("SELECT 1 FROM")]
    assert len(pages) == 15
    assert len(fetches) == len(pages)  # the carried row, then one fetch after it
    assert len(checks) == len(pages) - 1  # the last page has no row after it
    assert all(q.endswith("LIMIT 2") for q in checks)


@pytest.mark.postgres
@pytest.mark.parametrize("batch_size", [1, 2, 16, 256])
@pytest.mark.parametrize("max_items", [None, 3])
def test_regression_pg_a_declared_unique_order_tied_past_a_fetch_raises(
    pg: psycopg.Connection[Any], batch_size: int, max_items: int | None
) -> None:
    limits = Limits(65536, max_items=max_items)
    for query in (
        "SELECT i AS id, i / 2 AS k FROM generate_series(1, 100) AS i",
        # numeric 7 and 7.0: one key to PostgreSQL, two to Python
        "SELECT i AS id, CASE WHEN i %% 2 = 0 THEN (i / 2)::numeric"
        " ELSE (i / 2)::numeric(10, 1) END AS k FROM generate_series(1, 100) AS i",
    ):
        source = PostgresSource(
            pg, query=query, order_by=("k",), unique=True, batch_size=batch_size
        )
        with pytest.raises(LimitError, match="share the order key"):
            pages_by_fill(source, limits)
        with pytest.raises(LimitError, match="share the order key"):
            pages_by_paginate(source, limits)


def _spilled_rows(source: Any, spill: Any) -> list[Any]:
    """The one page of *source* at a 700-byte budget with oversized="spill", its spilled
    items read back from *spill*."""
    from jsonbudget import MemoryCursorStore, Scope, paginate

    page = paginate(
        source,
        scope=Scope("u", {}),
        store=MemoryCursorStore(),
        limits=Limits(700),
        oversized="spill",
        spill_store=spill,
    )
    assert page.complete
    return [orjson.loads(spill.read(o.ref, 0, 1 << 20)) for o in page.oversized]


def test_regression_a_spilled_row_holds_its_long_cells_whole(tmp_path: Path) -> None:
    """Regression: the source cut each cell to what one page shows before the builder
    saw the row, so the spill file held `yyy…[truncated: 4300 more bytes]`: 4,300
    bytes out of reach, though oversized="spill" writes the item whole."""
    from jsonbudget import MemoryCursorStore, Scope, SpillStore, paginate

    conn = sqlite3.connect(":memory:")
    conn.execute("CREATE TABLE t (id INTEGER PRIMARY KEY, body TEXT, raw BLOB)")
    conn.execute("INSERT INTO t VALUES (1, ?, NULL)", ("y" * 5000,))
    spill = SpillStore(tmp_path / "spill")
    assert _spilled_rows(SQLiteSource(conn, table="t"), spill) == [
        {"id": 1, "body": "y" * 5000, "raw": None}
    ]
    # Still bounded: a cell is read up to the store's largest file, and a row that passes
    # it is refused as any item the store cannot hold (nothing kept, nothing served).
    small = SpillStore(tmp_path / "small", max_file_bytes=2000)
    with pytest.raises(SpillError, match="max_file_bytes"):
        _spilled_rows(SQLiteSource(conn, table="t"), small)
    # max_cell_bytes, when given, is the cut: the row is spilled with its cell cut, and
    # the page reports that cut at the row's place.
    (row,) = _spilled_rows(SQLiteSource(conn, table="t", max_cell_bytes=1000), small)
    assert row["body"] == "y" * 1000 + "…[truncated: 4000 more bytes]"
    page = paginate(SQLiteSource(conn, table="t", max_cell_bytes=1000), scope=Scope("u", {}),
                    store=MemoryCursorStore(), limits=Limits(700), oversized="spill",
                    spill_store=small)  # fmt: skip
    assert [(t.path, t.kind, t.omitted, t.unit) for t in page.truncations] == [
        ("/items/0", "item", None, "bytes"),
        ("/items/0", "string", 4000, "bytes"),
    ]


@pytest.mark.postgres
def test_regression_pg_a_spilled_row_holds_its_long_cells_whole(
    pg: psycopg.Connection[Any], tmp_path: Path
) -> None:
    from jsonbudget import SpillStore

    pg.execute("CREATE TABLE sp (id int PRIMARY KEY, body text)")
    try:
        pg.execute("INSERT INTO sp VALUES (1, repeat('y', 5000))")
        rows = _spilled_rows(PostgresSource(pg, table="sp"), SpillStore(tmp_path / "s"))
        assert rows == [{"id": 1, "body": "y" * 5000}]
    finally:
        pg.execute("DROP TABLE sp")


def test_paginate_cuts_a_long_cell_in_the_query_by_default(tmp_path: Path) -> None:
    # Regression: paginate read through open(), which fetched every cell whole; a page
    # now goes through the source's batch path, which cuts a cell to what a page can show.
    from jsonbudget import Clipped, Limits, MemoryCursorStore, Scope, paginate

    db = tmp_path / "cells.sqlite3"
    conn = sqlite3.connect(db)
    conn.execute("CREATE TABLE t (id INTEGER PRIMARY KEY, body TEXT)")
    conn.execute("INSERT INTO t VALUES (1, ?)", ("é" * 2_000_000,))
    conn.commit()
    conn.close()
    page = paginate(
        SQLiteSource(db, table="t", order_by=["id"]),
        scope=Scope("a"),
        store=MemoryCursorStore(),
        limits=Limits(4096),
    )
    body = page.items[0]["body"]
    assert isinstance(body, Clipped)  # the database cut it: the row never held 2M chars
    assert len(body.head) <= 1 << 20
    shown = orjson.loads(page.to_json())["items"][0]["body"]
    kept = shown.split("…[")[0]
    left = 4_000_000 - len(kept.encode())  # the database sized it in UTF-8 bytes
    assert shown == f"{kept}…[truncated: {left} more bytes]"
    assert page.truncations[0].omitted == left


# --- no row is fetched twice -------------------------------------------------------------
#
# A page ends with the first row that did not fit and whatever else its last fetch
# returned; the next page starts with them. The source keeps those rows and uses them
# when it can prove the database unchanged, so no row crosses the wire twice, and a
# change between pages still shows.


def follow(source: Any, limits: Limits, between: Any = None) -> list[dict[str, Any]]:
    """Page through *source* with cursors; call ``between(last_id)`` after each page."""
    store, scope = MemoryCursorStore(), Scope("t", {})
    got: list[dict[str, Any]] = []
    cursor = None
    for _ in range(10_000):
        page = paginate(source, scope=scope, cursor=cursor, store=store, limits=limits)
        got.extend(page.items)
        cursor = page.next_cursor
        if cursor is None:
            return got
        if between is not None:
            between(page.items[-1]["id"])
    raise AssertionError("did not terminate")


@pytest.fixture
def counted(tmp_path: Path) -> Iterator[tuple[sqlite3.Connection, sqlite3.Connection, list[int]]]:
    """A writer, a reader whose query records every row id it fetches, and the record."""
    path = tmp_path / "rows.sqlite3"
    writer = sqlite3.connect(path, isolation_level=None)
    writer.execute("CREATE TABLE t (id INTEGER PRIMARY KEY, body TEXT)")
    writer.executemany(
        "INSERT INTO t VALUES (?, ?)", [(i, f"r{i}-" + "x" * 150) for i in range(1, 61)]
    )
    reader = sqlite3.connect(path, isolation_level=None)
    fetched: list[int] = []

    def seen(row_id: int, body: str) -> str:
        fetched.append(row_id)
        return body

    reader.create_function("seen", 2, seen)
    yield writer, reader, fetched
    reader.close()
    writer.close()


def counted_source(reader: sqlite3.Connection) -> SQLiteSource:
    # The wrapped query names the cell several times: seen() may run more than once per
    # row and query, so what counts is in which pages' queries a row appears.
    return SQLiteSource(
        reader, query="SELECT id, seen(id, body) AS body FROM t", order_by=("id",), unique=True
    )


def test_sqlite_look_ahead_row_is_fetched_by_one_page_only(
    counted: tuple[sqlite3.Connection, sqlite3.Connection, list[int]],
) -> None:
    _, reader, fetched = counted
    pages: list[set[int]] = []

    def mark(_: int) -> None:
        pages.append(set(fetched))
        fetched.clear()

    got = follow(counted_source(reader), Limits(1024), mark)
    pages.append(set(fetched))
    assert [r["id"] for r in got] == list(range(1, 61))
    assert len(pages) > 5
    everywhere = [i for page in pages for i in page]
    assert sorted(everywhere) == list(range(1, 61))  # each row in one page's fetch


@pytest.mark.parametrize("writer_is_reader", [False, True])
@pytest.mark.parametrize("change", ["delete", "update", "insert-before"])
def test_sqlite_carried_row_follows_changes_between_pages(
    counted: tuple[sqlite3.Connection, sqlite3.Connection, list[int]],
    change: str,
    writer_is_reader: bool,
) -> None:
    writer, reader, _ = counted
    if writer_is_reader:
        writer = reader  # its own writes: total_changes, not data_version
    writer.execute("DELETE FROM t WHERE id % 2 = 0")  # room for inserts between rows
    expected = {i: f"r{i}-" + "x" * 150 for i in range(1, 61, 2)}

    def mutate(last: int) -> None:
        ahead = last + 2  # the row the page left over
        if ahead not in expected:
            return
        if change == "delete":
            writer.execute("DELETE FROM t WHERE id = ?", (ahead,))
            del expected[ahead]
        elif change == "update":
            writer.execute("UPDATE t SET body = 'new' WHERE id = ?", (ahead,))
            expected[ahead] = "new"
        else:
            writer.execute("INSERT INTO t VALUES (?, 'between')", (last + 1,))
            expected[last + 1] = "between"

    got = follow(counted_source(reader), Limits(1024), mutate)
    assert {r["id"]: r["body"] for r in got} == expected
    assert [r["id"] for r in got] == sorted(expected)


def test_sqlite_keeps_a_bounded_number_of_look_ahead_runs(
    counted: tuple[sqlite3.Connection, sqlite3.Connection, list[int]],
) -> None:
    # AHEAD_ROWS + 1 conversations, each at its own position (its own budget): the next
    # page of a kept one fetches nothing twice; the oldest was pushed out and refetches.
    from jsonbudget._sources.sql import AHEAD_ROWS

    _, reader, fetched = counted
    source = counted_source(reader)
    store = MemoryCursorStore()
    limits = [Limits(1024 + 16 * n) for n in range(AHEAD_ROWS + 1)]
    firsts = [
        paginate(source, scope=Scope("t", {"n": n}), store=store, limits=limits[n])
        for n in range(AHEAD_ROWS + 1)
    ]
    # (Each next page keeps a run of its own, pushing out the least recently used.)
    for n, kept in ((1, True), (AHEAD_ROWS, True), (0, False)):
        fetched.clear()
        page = paginate(
            source,
            scope=Scope("t", {"n": n}),
            cursor=firsts[n].next_cursor,
            store=store,
            limits=limits[n],
        )
        ahead = firsts[n].items[-1]["id"] + 1
        assert page.items[0]["id"] == ahead
        assert (ahead not in fetched) is kept


@pytest.mark.parametrize("end", ["ROLLBACK", "COMMIT"])
@pytest.mark.parametrize("written", ["before-the-first-page", "between-the-pages"])
def test_regression_sqlite_rows_read_in_a_transaction_are_not_served_after_it(
    written: str, end: str
) -> None:
    """Regression: rows a page read inside the caller's transaction were kept for the
    next page, and served after a ROLLBACK took their values back ('uncommitted'):
    total_changes does not go down, and the connection's own writes leave data_version
    as it is."""
    conn = sqlite3.connect(":memory:", isolation_level=None)
    conn.execute("CREATE TABLE t (id INTEGER PRIMARY KEY, v TEXT)")
    conn.executemany("INSERT INTO t VALUES (?, ?)", [(i, "a" * 50) for i in range(1, 40)])
    source = SQLiteSource(conn, table="t")
    limits = Limits(400)

    def write() -> None:
        conn.execute("BEGIN")
        conn.execute("UPDATE t SET v = 'uncommitted' WHERE id BETWEEN 4 AND 12")

    if written == "before-the-first-page":
        write()
    first, position = one_page(source, limits, None)
    if written == "between-the-pages":
        write()
    conn.execute(end)
    page, _ = one_page(source, limits, position)
    assert page[0]["id"] == first[-1]["id"] + 1
    assert page == one_page(SQLiteSource(conn, table="t"), limits, position)[0]
    now = dict(conn.execute("SELECT id, v FROM t").fetchall())
    assert {row["id"]: row["v"] for row in page} == {row["id"]: now[row["id"]] for row in page}


def test_sqlite_inside_the_callers_transaction_nothing_is_kept(
    counted: tuple[sqlite3.Connection, sqlite3.Connection, list[int]],
) -> None:
    # As on PostgreSQL: inside a transaction the look-ahead is fetched again rather than
    # kept, even with nothing written, since nothing proves what its end will leave.
    _, reader, fetched = counted

    def fetched_by_page(in_transaction: bool) -> list[int]:
        """Each row id once per page whose queries fetched it."""
        pages: list[set[int]] = []

        def mark(_: int) -> None:
            pages.append(set(fetched))
            fetched.clear()

        fetched.clear()
        if in_transaction:
            reader.execute("BEGIN")
        got = follow(counted_source(reader), Limits(1024), mark)
        if in_transaction:
            reader.execute("ROLLBACK")
        assert [r["id"] for r in got] == list(range(1, 61))
        pages.append(set(fetched))
        return sorted(i for page in pages for i in page)

    assert fetched_by_page(in_transaction=False) == list(range(1, 61))
    inside = fetched_by_page(in_transaction=True)
    assert set(inside) == set(range(1, 61))
    assert len(inside) > 60  # look-ahead rows fetched by two pages


@pytest.fixture
def pg_traced(
    postgres_server: PostgresServer, tmp_path: Path
) -> Iterator[tuple[psycopg.Connection[Any], psycopg.Connection[Any], LibpqTrace]]:
    """A writer, and a reader whose protocol traffic libpq writes to a file."""
    with (
        psycopg.connect(postgres_server.dsn, autocommit=True) as writer,
        psycopg.connect(postgres_server.dsn, autocommit=True) as reader,
    ):
        writer.execute("DROP TABLE IF EXISTS la")
        writer.execute("CREATE TABLE la (id int PRIMARY KEY, body text)")
        with writer.cursor() as cur:
            cur.executemany(
                "INSERT INTO la VALUES (%s, %s)",
                [(i, f"r{i}-" + "x" * 150) for i in range(1, 61, 2)],
            )
        path = tmp_path / "libpq.trace"
        with path.open("w") as f:
            trace = LibpqTrace(path, reader, f.fileno())
            trace.start()
            yield writer, reader, trace
            reader.pgconn.untrace()
        writer.execute("DROP TABLE la")


class LibpqTrace:
    """libpq's trace of *conn*'s traffic, written to *path* through *fileno*.

    libpq writes it through a buffered stream: `text` flushes it first (PQuntrace does,
    and tracing starts again on the same file), or the last round trips are missing.
    """

    def __init__(self, path: Path, conn: psycopg.Connection[Any], fileno: int) -> None:
        self.path, self.conn, self.fileno = path, conn, fileno

    def start(self) -> None:
        self.conn.pgconn.trace(self.fileno)
        self.conn.pgconn.set_trace_flags(psycopg.pq.Trace.SUPPRESS_TIMESTAMPS)

    def text(self) -> str:
        self.conn.pgconn.untrace()
        self.start()
        return self.path.read_text()


def _trace_text(trace: Path | LibpqTrace) -> str:
    return trace.text() if isinstance(trace, LibpqTrace) else trace.read_text()


def rows_on_the_wire(trace: Path | LibpqTrace) -> list[int]:
    """The ids of every row whose body crossed the wire, as often as it did."""
    import re

    return [
        int(m)
        for line in _trace_text(trace).splitlines()
        if "DataRow" in line
        for m in re.findall(r"'r(\d+)-x", line)
    ]


@pytest.mark.postgres
@pytest.mark.parametrize("pipelined", [True, False])
def test_pg_look_ahead_row_crosses_the_wire_once(
    pg_traced: tuple[psycopg.Connection[Any], psycopg.Connection[Any], LibpqTrace],
    pipelined: bool,
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    # Without pipelining (libpq before 14) the snapshot goes first, on its own.
    monkeypatch.setattr(psycopg.Pipeline, "is_supported", classmethod(lambda cls: pipelined))
    _, reader, trace = pg_traced
    got = follow(PostgresSource(reader, table="la"), Limits(1024))
    assert [r["id"] for r in got] == list(range(1, 61, 2))
    assert sorted(rows_on_the_wire(trace)) == list(range(1, 61, 2))


def round_trips(trace: Path | LibpqTrace) -> int:
    """How many times the client waited on the server: each Sync ends a round trip, as a
    simple Query does (a snapshot sent alone, where the carried rows fill the page)."""
    sent = [line.split("\t") for line in _trace_text(trace).splitlines()]
    return sum(parts[0] == "F" and ("Sync" in parts or "Query" in parts) for parts in sent)


@pytest.mark.postgres
def test_pg_page_checks_its_carried_rows_and_fetches_in_one_round_trip(
    pg_traced: tuple[psycopg.Connection[Any], psycopg.Connection[Any], LibpqTrace],
) -> None:
    # The snapshot that proves the carried rows current and the page's first query
    # are pipelined: a page that needs one query costs one round trip, not two.
    _, reader, trace = pg_traced
    source = PostgresSource(reader, table="la")
    got: list[Any] = []
    pages = 0
    position = None
    first_page_trips = None
    while True:
        builder = PageBuilder(Limits(1024))
        more, position = source.fill(builder, position)
        got += builder.finish(complete=not more).items
        pages += 1
        if first_page_trips is None:
            first_page_trips = round_trips(trace)  # the plan's probes, then the first page
        if not more:
            break
    assert [r["id"] for r in got] == list(range(1, 61, 2))
    assert pages >= 4
    assert round_trips(trace) - first_page_trips == pages - 1
    assert sorted(rows_on_the_wire(trace)) == list(range(1, 61, 2))


@pytest.mark.postgres
@pytest.mark.parametrize("batch_size", [1, 3])
def test_pg_a_declared_unique_order_is_checked_in_the_round_trips_it_has(
    pg_traced: tuple[psycopg.Connection[Any], psycopg.Connection[Any], LibpqTrace],
    tmp_path: Path,
    batch_size: int,
) -> None:
    # Pages of several fetches each: the check of the key a fetch starts after shares
    # that fetch's round trip, and the page end's one round trip of its own checks both
    # keys the next page may start after. The checks fetch no row: each crosses once.
    _, reader, _ = pg_traced
    reader.pgconn.untrace()
    reader.prepare_threshold = None  # preparing a statement costs a round trip of its own

    def page_all(mode: Literal["keyset", "offset"]) -> tuple[list[int], int, int, list[int]]:
        """The ids, the pages, the round trips and the rows on the wire."""
        source = PostgresSource(
            reader,
            query="SELECT * FROM la",
            order_by=("id",),
            unique=True,
            mode=mode,
            batch_size=batch_size,
        )
        trace = tmp_path / f"{mode}.trace"
        with trace.open("w") as f:
            reader.pgconn.trace(f.fileno())
            pages = pages_by_fill(source, Limits(1024))
            reader.pgconn.untrace()  # flushes the trace
        sent = [line.split("\t") for line in trace.read_text().splitlines()]
        # A Sync ends a round trip, as a simple Query does (the snapshot sent alone).
        trips = sum("Sync" in parts or "Query" in parts for parts in sent)
        got = [row["id"] for page in pages for row in page]
        return got, len(pages), trips, rows_on_the_wire(trace)

    got, pages, trips, wire = page_all("keyset")
    assert got == list(range(1, 61, 2))
    assert sorted(wire) == got
    assert pages >= 4
    # Offset mode sends the same queries for the same rows, and checks no key.
    assert page_all("offset") == (got, pages, trips - (pages - 1), wire)


@pytest.mark.postgres
@pytest.mark.parametrize("autocommit", [True, False])
def test_pg_query_that_fails_in_the_pipeline_raises_its_own_error(
    postgres_server: PostgresServer, autocommit: bool
) -> None:
    # The page's query is sent in a pipeline with the snapshot: a row it fails on (here,
    # a division by zero at row 50) raises the database's own error, not a pipeline
    # error, and the caller's connection is left idle and usable.
    with psycopg.connect(postgres_server.dsn, autocommit=autocommit) as conn:
        conn.execute("CREATE TEMP TABLE dz (id int PRIMARY KEY, d int)")
        with conn.cursor() as cur:
            cur.executemany(
                "INSERT INTO dz VALUES (%s, %s)", [(i, 0 if i == 50 else 1) for i in range(100)]
            )
        if not autocommit:
            conn.commit()
        source = PostgresSource(
            conn, query="SELECT id, 10 / d AS q FROM dz", order_by=("id",), unique=True
        )
        seen: list[int] = []

        def read_all() -> None:
            position = None
            for _ in range(100):
                builder = PageBuilder(Limits(400))
                more, position = source.fill(builder, position)
                seen.extend(r["id"] for r in builder.finish(complete=not more).items)

        with pytest.raises(psycopg.errors.DivisionByZero):
            read_all()
        assert seen == list(range(len(seen)))
        assert 0 < len(seen) < 50
        assert conn.info.transaction_status == psycopg.pq.TransactionStatus.IDLE
        assert conn.execute("SELECT count(*) FROM dz").fetchone() == (100,)


@pytest.mark.postgres
@pytest.mark.parametrize("writer_is_reader", [False, True])
@pytest.mark.parametrize("change", ["delete", "update", "insert-before", "delete-and-insert"])
def test_pg_carried_row_follows_changes_between_pages(
    pg_traced: tuple[psycopg.Connection[Any], psycopg.Connection[Any], LibpqTrace],
    change: str,
    writer_is_reader: bool,
) -> None:
    writer, reader, _ = pg_traced
    if writer_is_reader:
        writer = reader
    expected = {i: f"r{i}-" + "x" * 150 for i in range(1, 61, 2)}

    def mutate(last: int) -> None:
        ahead = last + 2
        if ahead not in expected:
            return
        if change == "delete":
            writer.execute("DELETE FROM la WHERE id = %s", (ahead,))
            del expected[ahead]
        elif change == "update":
            writer.execute("UPDATE la SET body = 'new' WHERE id = %s", (ahead,))
            expected[ahead] = "new"
        elif change == "insert-before":
            writer.execute("INSERT INTO la VALUES (%s, 'between')", (last + 1,))
            expected[last + 1] = "between"
        else:
            with writer.transaction():
                writer.execute("DELETE FROM la WHERE id = %s", (ahead,))
                writer.execute("INSERT INTO la VALUES (%s, 'again')", (ahead,))
            expected[ahead] = "again"

    got = follow(PostgresSource(reader, table="la"), Limits(1024), mutate)
    assert {r["id"]: r["body"] for r in got} == expected
    assert [r["id"] for r in got] == sorted(expected)


@pytest.mark.postgres
def test_pg_query_source_look_ahead_crosses_the_wire_once(
    pg_traced: tuple[psycopg.Connection[Any], psycopg.Connection[Any], LibpqTrace],
) -> None:
    _, reader, trace = pg_traced
    source = PostgresSource(reader, query="SELECT * FROM la", order_by=("id",), unique=True)
    got = follow(source, Limits(1024))
    assert [r["id"] for r in got] == list(range(1, 61, 2))
    assert sorted(rows_on_the_wire(trace)) == list(range(1, 61, 2))


@pytest.mark.postgres
def test_pg_inside_the_callers_transaction_nothing_is_kept(
    pg_traced: tuple[psycopg.Connection[Any], psycopg.Connection[Any], LibpqTrace],
) -> None:
    # The caller's own writes inside its transaction leave the snapshot unchanged, so
    # there the look-ahead is fetched again rather than trusted.
    _, reader, trace = pg_traced
    source = PostgresSource(reader, table="la")
    expected = {i: f"r{i}-" + "x" * 150 for i in range(1, 61, 2)}

    def mutate(last: int) -> None:
        if last + 2 in expected:
            reader.execute("UPDATE la SET body = 'mine' WHERE id = %s", (last + 2,))
            expected[last + 2] = "mine"

    with reader.transaction():
        got = follow(source, Limits(1024), mutate)
    assert {r["id"]: r["body"] for r in got} == expected
    wire = rows_on_the_wire(trace)
    assert len(wire) > len(set(wire))


def one_page(source: Any, limits: Limits, position: Position | None) -> tuple[list[Any], Any]:
    builder = PageBuilder(limits)
    more, after = source.fill(builder, position, limit_hint=limits.max_items)
    page = builder.finish(complete=not more, next_cursor="x" if more else None)
    return list(page.items), roundtrip(after) if more else None


_changes = st.lists(
    st.tuples(
        st.sampled_from(["delete", "update", "insert"]),
        st.integers(min_value=-3, max_value=6),  # relative to the page's last row
    ),
    max_size=3,
)


def compare_with_fresh(make: Any, limits: Limits, mutate: Any) -> None:
    """Page one source of *make*; each page must equal a fresh source's at that moment.

    ``mutate(step, last_id)`` writes between pages.
    """
    kept = make()
    position: Any = None
    for step in range(1000):
        fresh = one_page(make(), limits, position)
        page = one_page(kept, limits, position)
        assert page == fresh
        items, position = page
        if position is None:
            return
        mutate(step, items[-1]["id"] if items else 0)
    raise AssertionError("did not terminate")


def _mutate(conn: Any, last: int, changes: list[tuple[str, int]], mark: str) -> None:
    for kind, offset in changes:
        row_id = last + offset
        if kind == "delete":
            conn.execute(f"DELETE FROM t WHERE id = {mark}", (row_id,))
        elif kind == "update":
            conn.execute(f"UPDATE t SET body = {mark} WHERE id = {mark}", (f"u{row_id}", row_id))
        else:
            conn.execute(
                f"INSERT INTO t VALUES ({mark}, {mark}) ON CONFLICT (id) DO NOTHING",
                # Ids 100 to 199, ahead of the first rows: finitely many, so paging ends
                # even when every page inserts one ahead of itself.
                (100 + row_id % 100, f"i{row_id}"),
            )


@settings(max_examples=40, deadline=None)
# Regression: each page inserted a row ahead of itself, and paging never ended.
@example(budget=400, max_items=1, changes=[[("insert", 0)]], offset_mode=False)
@given(
    budget=st.integers(min_value=400, max_value=1500),
    max_items=st.none() | st.integers(min_value=1, max_value=5),
    changes=st.lists(_changes, min_size=1, max_size=8),
    offset_mode=st.booleans(),
)
def test_property_sqlite_pages_with_carried_rows_are_the_pages_of_a_fresh_read(
    budget: int, max_items: int | None, changes: list[list[tuple[str, int]]], offset_mode: bool
) -> None:
    # Whatever changes between pages, each page equals what a source with nothing kept
    # reads at that position at that moment.
    conn = sqlite3.connect(":memory:", isolation_level=None)
    conn.execute("CREATE TABLE t (id INTEGER PRIMARY KEY, body TEXT)")
    conn.executemany("INSERT INTO t VALUES (?, ?)", [(i, "b" * (i % 7 * 30)) for i in range(40)])
    mode: Literal["keyset", "offset"] = "offset" if offset_mode else "keyset"
    compare_with_fresh(
        lambda: SQLiteSource(conn, table="t", mode=mode),
        Limits(budget, max_items=max_items),
        lambda step, last: _mutate(conn, last, changes[step % len(changes)], "?"),
    )


@pytest.mark.postgres
@settings(
    max_examples=15, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture]
)
@given(
    budget=st.integers(min_value=400, max_value=1500),
    changes=st.lists(_changes, min_size=1, max_size=8),
    offset_mode=st.booleans(),
)
def test_property_pg_pages_with_carried_rows_are_the_pages_of_a_fresh_read(
    pg_traced: tuple[psycopg.Connection[Any], psycopg.Connection[Any], LibpqTrace],
    budget: int,
    changes: list[list[tuple[str, int]]],
    offset_mode: bool,
) -> None:
    writer, reader, _ = pg_traced
    writer.execute("DROP TABLE IF EXISTS t")
    writer.execute("CREATE TABLE t (id int PRIMARY KEY, body text)")
    with writer.cursor() as cur:
        cur.executemany(
            "INSERT INTO t VALUES (%s, %s)", [(i, "b" * (i % 7 * 30)) for i in range(40)]
        )
    mode: Literal["keyset", "offset"] = "offset" if offset_mode else "keyset"
    compare_with_fresh(
        lambda: PostgresSource(reader, table="t", mode=mode),
        Limits(budget),
        lambda step, last: _mutate(writer, last, changes[step % len(changes)], "%s"),
    )
    writer.execute("DROP TABLE t")


def test_rows_past_the_kept_bytes_are_fetched_again(
    counted: tuple[sqlite3.Connection, sqlite3.Connection, list[int]],
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    # A run is kept only as far as AHEAD_BYTES of its text and binary values allow; what
    # is past that is fetched again, and the pages are the same.
    import jsonbudget._sources.sql as sql_module

    _, reader, fetched = counted
    whole = follow(counted_source(reader), Limits(1024))
    monkeypatch.setattr(sql_module, "AHEAD_BYTES", 100)  # less than one row's body
    fetched.clear()
    pages: list[set[int]] = []

    def mark(_: int) -> None:
        pages.append(set(fetched))
        fetched.clear()

    assert follow(counted_source(reader), Limits(1024), mark) == whole
    pages.append(set(fetched))
    everywhere = [i for page in pages for i in page]
    assert len(everywhere) > len(set(everywhere))  # look-ahead rows fetched twice


def test_fill_refuses_a_position_that_is_not_json(
    sqlite_db: tuple[Path, sqlite3.Connection],
) -> None:
    _, conn = sqlite_db
    with pytest.raises(InvalidCursor):
        SQLiteSource(conn, table="t").fill(PageBuilder(Limits(1024)), {1, 2})  # type: ignore[arg-type]


# --- keys too long to store ----------------------------------------------------------------

# Names that sort around long ones: a long key first, two in a row, one last.
_LONG_NAMES = ["a" + "x" * 9000, "b1", "b2", "c" + "y" * 9000, "c" + "z" * 9000, "d1"]
_LONG_NAMES += [f"e{i:02d}" for i in range(12)] + ["f" + "é" * 5000]


def _long_key_rows() -> list[tuple[int, str]]:
    return [(i, name) for i, name in enumerate(_LONG_NAMES)]  # ids in name order


def _check_long_keys(source: Any, *, descending: bool = False) -> None:
    want = list(range(len(_LONG_NAMES)))[:: -1 if descending else 1]
    assert [row["id"] for row in follow(source, Limits(4096))] == want
    for size in (1, 2, 3):
        assert page_through(source, size) == want
    for _row, position in source.open(None):
        assert len(orjson.dumps(position)) <= KEY_POSITION_BYTES  # what a store must hold
        # An offset counts from the last short key (at most two long keys in a row here),
        # not from the page's start: a run of long keys does not make each page dearer.
        assert isinstance(position, list) or position["skip"] <= 2


def test_sqlite_a_key_too_long_to_store_is_paged_past(tmp_path: Path) -> None:
    # A 100 KB order key made the page's position too big for the cursor store
    # (LimitError), and every row after it was out of reach.
    conn = sqlite3.connect(tmp_path / "long.db")
    conn.execute("CREATE TABLE t (id INTEGER PRIMARY KEY, name TEXT NOT NULL)")
    conn.executemany("INSERT INTO t VALUES (?, ?)", _long_key_rows())
    conn.commit()
    _check_long_keys(SQLiteSource(conn, table="t", order_by=("name",)))
    _check_long_keys(
        SQLiteSource(conn, table="t", order_by=("-name",), unique=True), descending=True
    )
    conn.close()


@pytest.mark.postgres
def test_pg_a_key_too_long_to_store_is_paged_past(pg: psycopg.Connection[Any]) -> None:
    pg.execute("DROP TABLE IF EXISTS longkeys")
    pg.execute('CREATE TABLE longkeys (id int PRIMARY KEY, name text COLLATE "C" NOT NULL)')
    with pg.cursor() as cur:
        cur.executemany("INSERT INTO longkeys VALUES (%s, %s)", _long_key_rows())
    try:
        _check_long_keys(PostgresSource(pg, table="longkeys", order_by=("name",)))
    finally:
        pg.execute("DROP TABLE longkeys")


@pytest.mark.parametrize(
    "bad",
    [
        {"after": None, "skip": 0},
        {"after": None, "skip": True},
        {"after": "b1", "skip": 1},
        {"after": ["b1"], "skip": 1, "x": 1},
        {"skip": 1},
        {"after": None, "skip": 2**63},  # past a database's integer: OverflowError once
    ],
)
def test_malformed_skip_positions_are_invalid_cursors(
    sqlite_db: tuple[Path, sqlite3.Connection], bad: Any
) -> None:
    _, conn = sqlite_db
    with pytest.raises(InvalidCursor):
        list(SQLiteSource(conn, table="t").open(bad))


def test_an_offset_past_a_database_integer_is_an_invalid_cursor(
    sqlite_db: tuple[Path, sqlite3.Connection],
) -> None:
    _, conn = sqlite_db
    with pytest.raises(InvalidCursor):
        list(SQLiteSource(conn, table="t", mode="offset").open(2**63))


def test_a_path_source_pages_past_a_200_mb_cell_without_loading_it(tmp_path: Path) -> None:
    # Through blob I/O a page reads a long cell's size and first bytes only: under a
    # 300 MB address-space limit (the cut select loads such a cell about three times).
    path = tmp_path / "big.sqlite"
    conn = sqlite3.connect(path)
    conn.execute("CREATE TABLE t (id INTEGER PRIMARY KEY, body)")
    conn.execute("INSERT INTO t VALUES (1, 'small')")
    conn.execute("INSERT INTO t VALUES (2, 'é' || printf('%.*c', 200000000, 'x'))")
    conn.execute("INSERT INTO t VALUES (3, zeroblob(150000000))")
    conn.execute("INSERT INTO t VALUES (4, 'after')")
    conn.commit()
    conn.close()
    out = bounded_run(
        f"""
from jsonbudget import Clipped, SQLiteSource
source = SQLiteSource({str(path)!r}, table="t")
{PAGE_ALL_4K}text, blob = items[1]["body"], items[2]["body"]
assert isinstance(text, Clipped) and isinstance(blob, Clipped)
assert text.head.startswith("éxxx") and blob.head[:3] == bytes(3)
print([i["id"] for i in items], text.length, blob.length, items[3]["body"])
""",
        memory=300 << 20,
        timeout=120,
    )
    assert out.split() == ["[1,", "2,", "3,", "4]", "200000002", "150000000", "after"]


def test_a_path_source_pages_from_many_threads_at_once(tmp_path: Path) -> None:
    # A page holds the own connection's length limit low and may open a read
    # transaction: pages and open() steps of other threads wait for it, so each thread
    # sees what it would alone (a limit lifted under a page let a long cell in whole;
    # two transactions collided).
    path = tmp_path / "threads.sqlite"
    conn = sqlite3.connect(path)
    conn.execute("CREATE TABLE t (id INTEGER PRIMARY KEY, body)")
    cells = [("é" * 40 if i % 3 else "x" * 3000) if i % 5 else b"\x02" * 900 for i in range(300)]
    conn.executemany("INSERT INTO t VALUES (?, ?)", enumerate(cells))
    conn.commit()
    limits = Limits(2048, max_items=7)
    expected = pages_by_fill(SQLiteSource(conn, table="t", max_cell_bytes=100), limits)
    streamed = [row for row, _ in SQLiteSource(conn, table="t", max_cell_bytes=100).open(None)]
    conn.close()
    switch = sys.getswitchinterval()
    sys.setswitchinterval(1e-6)  # threads switch between statements as often as they can
    try:
        for _ in range(8):  # each source starts cold: its plan and connection made in a race
            with SQLiteSource(path, table="t", max_cell_bytes=100) as source:

                def work(k: int, source: SQLiteSource = source) -> Any:
                    if k % 4 == 3:
                        return [row for row, _ in source.open(None)]
                    return pages_by_fill(source, limits)

                with ThreadPoolExecutor(max_workers=8) as pool:
                    results = list(pool.map(work, range(16)))
            for k, got in enumerate(results):
                assert got == (streamed if k % 4 == 3 else expected), k
    finally:
        sys.setswitchinterval(switch)


class _CountingCursor(sqlite3.Cursor):
    """Counts the rows of wide results (more than 100 columns) fetched through it."""

    fetched = 0

    def _count(self, rows: list[Any]) -> list[Any]:
        if rows and len(rows[0]) > 100:
            _CountingCursor.fetched += len(rows)
        return rows

    def fetchmany(self, size: int | None = 1) -> list[Any]:
        return self._count(super().fetchmany(size))

    def fetchall(self) -> list[Any]:
        return self._count(super().fetchall())


class _CountingConnection(sqlite3.Connection):
    """A real connection whose cursors count the rows fetched through them."""

    def cursor(self, factory: Any = _CountingCursor) -> Any:
        return super().cursor(factory)


def test_regression_a_first_page_of_wide_rows_fetches_few_of_them() -> None:
    """Every first page fetched 16 rows and every later one at least 16, each cell up to
    the page's budget: a 64 KiB page of rows with 200 text columns of 60 KB received
    192 MB. A first fetch is now held to what AHEAD_BYTES allows at the cut (two rows at
    least), and a later page fetches about as many rows as the last held, plus two."""
    conn = sqlite3.connect(":memory:", factory=_CountingConnection)
    cols = [f"c{i}" for i in range(300)]
    conn.execute(f"CREATE TABLE w (id INTEGER PRIMARY KEY, {', '.join(cols)})")
    conn.executemany(
        f"INSERT INTO w VALUES (?{', ?' * len(cols)})",
        [(i, *(["v" * 200] * len(cols))) for i in range(1, 11)],
    )
    _CountingCursor.fetched = 0
    pages = pages_by_fill(SQLiteSource(conn, table="w"), Limits(65536))
    assert [row["id"] for page in pages for row in page] == list(range(1, 11))
    assert all(len(page) == 1 for page in pages)  # one 60 KB row a page
    # The first page fetches 2 rows (one kept for the next page), each later one up to
    # 3: at most 2 + 3 * 9 rows for 10, where 16 a page were fetched before.
    assert _CountingCursor.fetched <= 2 + 3 * 9


@pytest.mark.postgres
def test_regression_rows_fetched_ahead_for_one_principal_are_not_anothers(
    postgres_server: PostgresServer,
) -> None:
    """Found by a tester: one source on one connection, the app switching the role (row-
    level security) or the search_path per request. The rows a page fetched ahead were
    kept by position alone, trusted while the snapshot was unchanged (no write), and
    served to the next principal whose page ended there: a private row to a user the
    policy hides it from, another tenant's row. They are now kept per reader."""
    with psycopg.connect(postgres_server.dsn, autocommit=True) as conn:
        conn.execute("DROP TABLE IF EXISTS docs")
        conn.execute("DROP ROLE IF EXISTS jb_reader")
        conn.execute("CREATE ROLE jb_reader")
        conn.execute("CREATE TABLE docs (id int PRIMARY KEY, private bool NOT NULL)")
        conn.execute("INSERT INTO docs SELECT g, g % 4 = 0 FROM generate_series(1, 12) g")
        conn.execute("ALTER TABLE docs ENABLE ROW LEVEL SECURITY")
        conn.execute("CREATE POLICY public_only ON docs TO jb_reader USING (NOT private)")
        conn.execute("GRANT SELECT ON docs TO jb_reader")
        try:
            source = PostgresSource(conn, table="docs")
            store, limits = MemoryCursorStore(), Limits(4000, max_items=3)

            def page(principal: str, cursor: str | None = None) -> Any:
                role = "jb_reader" if principal == "user" else "NONE"
                conn.execute(f"SET ROLE {role}")
                return paginate(
                    source, scope=Scope(principal, {}), cursor=cursor, store=store, limits=limits
                )

            first = page("user")
            assert [r["id"] for r in first.items] == [1, 2, 3]
            assert [r["id"] for r in page("admin").items] == [1, 2, 3]  # ends where the user's did
            second = page("user", first.next_cursor)
            assert [r["id"] for r in second.items] == [5, 6, 7]  # never the private 4
        finally:
            conn.execute("RESET ROLE")
            conn.execute("DROP TABLE docs")
            conn.execute("DROP ROLE jb_reader")


def _offset_ids(source: Source[Any]) -> list[int]:
    """The ids of every row *source* pages, 10 a page, in order."""
    pages = pages_by_paginate(source, Limits(4000, max_items=10))
    return [row["id"] for page in pages for row in page]


@pytest.mark.postgres
def test_regression_offset_mode_orders_ties_the_same_on_every_page(
    postgres_server: PostgresServer,
) -> None:
    """Found by a tester: mode="offset" with a non-unique order on an unchanging table
    served 753 distinct rows of 1000, complete. PostgreSQL's top-N sort gives tied rows
    another order for each LIMIT and OFFSET; the order is now made total (the table's
    key, or for a query the whole row)."""
    with psycopg.connect(postgres_server.dsn, autocommit=True) as conn:
        conn.execute("DROP TABLE IF EXISTS ties")
        conn.execute("CREATE TABLE ties (id int PRIMARY KEY, g int, doc json)")
        conn.execute(
            "INSERT INTO ties SELECT i, i % 3, json_build_object('i', i) "
            "FROM generate_series(1, 1000) i"
        )
        try:
            for source in (
                PostgresSource(conn, table="ties", order_by=("g",), mode="offset"),
                PostgresSource(conn, query="SELECT * FROM ties", order_by=("g",), mode="offset"),
            ):
                assert sorted(_offset_ids(source)) == list(range(1, 1001))
        finally:
            conn.execute("DROP TABLE ties")


def test_offset_mode_on_sqlite_orders_ties_by_the_key_or_the_row(tmp_path: Path) -> None:
    conn = sqlite3.connect(tmp_path / "ties.db")
    conn.execute("CREATE TABLE ties (id INTEGER PRIMARY KEY, g INTEGER, note TEXT)")
    conn.executemany("INSERT INTO ties VALUES (?, ?, ?)", [(i, i % 3, None) for i in range(1, 301)])
    conn.commit()
    for source in (
        SQLiteSource(conn, table="ties", order_by=("g",), mode="offset"),
        SQLiteSource(conn, query="SELECT * FROM ties", order_by=("g",), mode="offset"),
    ):
        ids = _offset_ids(source)
        assert sorted(ids) == list(range(1, 301))
        # the ties in a total order: by the key (the table) or by every column (the query)
        assert ids == sorted(ids, key=lambda i: (i % 3, i))
    conn.close()


@pytest.mark.postgres
def test_regression_a_percent_sign_in_a_name_pages(postgres_server: PostgresServer) -> None:
    """Found by a tester: psycopg reads "%" as a placeholder in every statement the source
    runs (it always passes parameters), and names were quoted with it bare: a column
    "margin %" or a table "growth%" failed every page with a ProgrammingError."""
    with psycopg.connect(postgres_server.dsn, autocommit=True) as conn:
        conn.execute('DROP TABLE IF EXISTS "growth%"')
        conn.execute(
            'CREATE TABLE "growth%" (id int PRIMARY KEY, "margin %" numeric, "%s" text,'
            ' "%(x)s" text)'
        )
        conn.execute(
            "INSERT INTO \"growth%\" SELECT i, i / 4.0, 'a' || i, repeat('b', 300)"
            " FROM generate_series(1, 40) i"
        )
        try:
            for source in (
                PostgresSource(conn, table="growth%", max_cell_bytes=64),
                PostgresSource(conn, table="growth%", order_by=("margin %", "id")),
                PostgresSource(
                    conn, query='SELECT * FROM "growth%%" WHERE id > %s', params=(0,), unique=True
                ),
            ):
                limits = Limits(2000, max_items=7)
                for pages in (pages_by_paginate(source, limits), pages_by_fill(source, limits)):
                    rows = [row for page in pages for row in page]
                    assert sorted(row["id"] for row in rows) == list(range(1, 41))
                    assert {row["margin %"] for row in rows if row["id"] == 4} == {1}
                    assert {row["%s"] for row in rows if row["id"] == 4} == {"a4"}
        finally:
            conn.execute('DROP TABLE "growth%"')


@pytest.mark.parametrize(
    ("stored", "factory"),
    [
        ([b"a\x80", b"a\x81", b"a\x82", b"b"], lambda b: b.decode("utf-8", "replace")),
        ([b"caf\xe9", b"na\xefve", b"zeta"], lambda b: b.decode("latin-1")),
        ([b"caf\xe9", b"zeta"], lambda b: b.decode("utf-8", "surrogateescape")),
    ],
    ids=["replace", "latin-1", "surrogateescape"],
)
def test_regression_an_order_key_a_text_factory_changed_is_refused(
    stored: list[bytes], factory: Any
) -> None:
    """Found by a tester: an order column read through a text_factory (the docs' advice
    for text that is not UTF-8) put the decoded text in the position, which SQLite then
    compared as other text: rows 2-4 skipped under complete: true ("replace"), or row 1
    served on every page, forever (latin-1). Such a key is refused before any page."""
    conn = sqlite3.connect(":memory:")
    conn.execute("CREATE TABLE t (id INTEGER PRIMARY KEY, k TEXT)")
    for i, raw in enumerate(stored, 1):
        conn.execute("INSERT INTO t VALUES (?, CAST(? AS TEXT))", (i, raw))
    conn.text_factory = factory
    with pytest.raises(LimitError, match="connection") as info:
        paginate(
            SQLiteSource(conn, table="t", order_by=("k",)),
            scope=Scope("p", {}),
            store=MemoryCursorStore(),
            limits=Limits(2000, max_items=1),
        )
    assert "text_factory" in str(info.value)
    # The same table by a key that is no text pages every row, each read the factory's way.
    source = SQLiteSource(conn, table="t")
    rows = [row for page in pages_by_paginate(source, Limits(2000, max_items=1)) for row in page]
    assert [row["k"] for row in rows] == [factory(raw) for raw in stored]
    conn.close()


def test_an_order_key_a_text_factory_reads_as_stored_pages() -> None:
    conn = sqlite3.connect(":memory:")
    conn.execute("CREATE TABLE t (id INTEGER PRIMARY KEY, k TEXT)")
    conn.executemany("INSERT INTO t VALUES (?, ?)", [(1, "a"), (2, "é"), (3, "b"), (4, "zz")])
    conn.text_factory = lambda b: b.decode("utf-8", "replace")
    source = SQLiteSource(conn, table="t", order_by=("k",))
    pages = pages_by_paginate(source, Limits(2000, max_items=1))
    assert [row["id"] for page in pages for row in page] == [1, 3, 4, 2]
    conn.close()


@pytest.mark.postgres
@pytest.mark.parametrize("order", ["id", "at", "-at"])
def test_regression_pg_dates_python_cannot_hold_page_as_their_text(
    pg: psycopg.Connection[Any], order: str
) -> None:
    """Found by a tester: a year past 9999 or before 1, or a time of 24:00:00, are valid
    PostgreSQL values that psycopg refuses (DataError): the first page that fetched one,
    its look-ahead included, failed, so no row of the table could be served. They are
    read as the text PostgreSQL writes, and as keys they are cast back exactly."""
    pg.execute("DROP TABLE IF EXISTS odd")
    pg.execute(
        "CREATE TABLE odd (id int PRIMARY KEY, at timestamp, d date, t time, tz timestamptz)"
    )
    try:
        pg.execute(
            "INSERT INTO odd VALUES (1, '2020-01-02 03:04:05', '2020-01-02', '12:00', NULL),"
            " (2, '10000-01-01', '0044-03-15 BC', '24:00:00', '0044-03-15 00:00+00 BC'),"
            " (3, '0001-01-01 BC', '12000-06-01', '00:00', '2020-01-01+00'),"
            " (4, NULL, NULL, NULL, NULL)"
        )
        want = {"id": [1, 2, 3, 4], "at": [3, 1, 2, 4], "-at": [4, 2, 1, 3]}[order]
        keys = (order,) if order == "id" else (order, "id")
        for pages in (
            pages_by_fill(PostgresSource(pg, table="odd", order_by=keys), Limits(4096)),
            pages_by_paginate(
                PostgresSource(pg, table="odd", order_by=keys), Limits(4096, max_items=1)
            ),
        ):
            rows = {row["id"]: row for page in pages for row in page}
            assert [row["id"] for page in pages for row in page] == want
            assert rows[2]["at"] == "10000-01-01 00:00:00"
            assert rows[2]["d"] == "0044-03-15 BC"
            assert rows[2]["t"] == "24:00:00"
            assert rows[3]["d"] == "12000-06-01"
            assert isinstance(rows[1]["at"], dt.datetime)
            assert isinstance(rows[3]["tz"], dt.datetime)
    finally:
        pg.execute("DROP TABLE odd")


def test_regression_rows_kept_ahead_are_not_served_from_a_reattached_file(
    tmp_path: Path,
) -> None:
    """Found by a tester: a dataset refreshed in place (a new file moved over the old
    one, DETACH, ATTACH under the same name) moved none of the counters the source
    checks: the next page served the rows kept from the old file."""

    def build(tag: str) -> None:
        new = tmp_path / "data.db.new"
        db = sqlite3.connect(new)
        db.execute("CREATE TABLE prices (id INTEGER PRIMARY KEY, price TEXT)")
        db.executemany("INSERT INTO prices VALUES (?, ?)", [(i, f"{tag}-{i}") for i in range(40)])
        db.commit()
        db.close()
        os.replace(new, tmp_path / "data.db")

    build("old")
    conn = sqlite3.connect(":memory:", isolation_level=None)
    conn.execute("ATTACH ? AS data", (str(tmp_path / "data.db"),))
    source = SQLiteSource(conn, table=("data", "prices"))
    store, scope, limits = MemoryCursorStore(), Scope("p", {}), Limits(600)
    first = paginate(source, scope=scope, store=store, limits=limits)
    assert first.next_cursor is not None
    build("new")
    conn.execute("DETACH data")
    conn.execute("ATTACH ? AS data", (str(tmp_path / "data.db"),))
    second = paginate(source, scope=scope, store=store, limits=limits, cursor=first.next_cursor)
    assert [row["price"] for row in second.items] == [f"new-{row['id']}" for row in second.items]
    conn.close()


@pytest.mark.postgres
def test_regression_float_keys_of_a_session_that_rounds_floats(
    postgres_server: PostgresServer,
) -> None:
    """Found by a tester: under extra_float_digits <= 0 (PostgreSQL's output before 12,
    set by a database, a role or a pool) a float key came back rounded to 15 digits:
    rows tied with the page's last one were skipped under complete: true, or, where it
    rounded down, one row was served forever. A caller's such session is refused for
    float keys; the source's own connection writes floats exactly."""
    values = [0.1 + i * 1e-15 for i in range(12)]
    with psycopg.connect(postgres_server.dsn, autocommit=True) as conn:
        conn.execute("DROP TABLE IF EXISTS fl")
        conn.execute("CREATE TABLE fl (id int PRIMARY KEY, score float8)")
        with conn.cursor() as cur:
            cur.executemany("INSERT INTO fl VALUES (%s, %s)", list(enumerate(values, 1)))
        try:
            conn.execute("SET extra_float_digits = 0")
            with pytest.raises(LimitError, match="extra_float_digits") as info:
                pages_by_paginate(
                    PostgresSource(conn, table="fl", order_by=("score", "id")),
                    Limits(2000, max_items=1),
                )
            assert info.value.name == "order_by"
            rounded = f"{postgres_server.dsn} options='-c extra_float_digits=0'"
            source = PostgresSource(rounded, table="fl", order_by=("score", "id"))
            try:
                pages = pages_by_paginate(source, Limits(2000, max_items=1))
            finally:
                source.close()
            assert [row["id"] for page in pages for row in page] == list(range(1, 13))
        finally:
            conn.execute("RESET extra_float_digits")
            conn.execute("DROP TABLE fl")


@pytest.mark.postgres
def test_regression_a_table_too_wide_for_the_cut_query_is_refused_clearly(
    pg: psycopg.Connection[Any],
) -> None:
    """Found by a tester: past 832 text columns the page query (a cut value and a length
    a column) passed PostgreSQL's 1,664 select-list entries: every page failed with
    psycopg's TooManyColumns. It is refused before the first page, naming the table."""
    for n, fits in ((830, True), (840, False)):
        columns = ", ".join(f"c{i} text" for i in range(n))
        pg.execute("DROP TABLE IF EXISTS wide")
        pg.execute(f"CREATE TABLE wide (id int PRIMARY KEY, {columns})")
        pg.execute("INSERT INTO wide (id, c0) VALUES (1, 'a'), (2, 'b')")
        try:
            source = PostgresSource(pg, table="wide")
            if fits:
                rows = [row for page in pages_by_paginate(source, Limits(1 << 20)) for row in page]
                assert [row["c0"] for row in rows] == ["a", "b"]
            else:
                with pytest.raises(LimitError, match="1664") as info:
                    pages_by_paginate(source, Limits(1 << 20))
                assert info.value.name == "table"
        finally:
            pg.execute("DROP TABLE wide")


@pytest.mark.parametrize("batch_size", [1, 2, 256])
def test_regression_offset_without_an_order_counts_rows_in_one_query_form(
    tmp_path: Path, batch_size: int
) -> None:
    """Found by a property test: with `order_by=()` in offset mode a path source read
    cells bare, and a cell past the length limit sent the rows again through another
    form of the query (rowids, then each row): without an ORDER BY SQLite scanned a
    covering index for one and the table for the other, so offsets counted in two
    orders and a complete page served row 2 twice and row 1 never."""
    path = tmp_path / "db.sqlite3"
    with contextlib.closing(sqlite3.connect(path)) as setup:
        setup.execute("CREATE TABLE t (id INTEGER PRIMARY KEY, k2 TEXT, b BLOB)")
        setup.execute("CREATE INDEX ix ON t(k2)")
        setup.executemany(
            "INSERT INTO t VALUES (?, ?, ?)",
            [(1, "a", b"\x01" * 381), (2, None, None), (3, "c", b"\x02" * 900), (4, "b", None)],
        )
        setup.commit()
    with SQLiteSource(path, table="t", order_by=(), mode="offset", batch_size=batch_size) as source:
        pages = pages_by_paginate(source, Limits(380))
    served = sorted(row["id"] for page in pages for row in page)
    assert served == [1, 2, 3, 4]


def test_interrupt_aborts_the_query_a_page_runs(tmp_path: Path) -> None:
    """`SQLiteSource.interrupt()`, from another thread, stops the query of a page in
    progress (a signal's watcher calls it: the CLI's Ctrl-C). A page after it runs."""
    path = tmp_path / "db.sqlite3"
    with contextlib.closing(sqlite3.connect(path)) as setup:
        setup.execute("CREATE TABLE t (id INTEGER PRIMARY KEY)")
        setup.execute("INSERT INTO t VALUES (1)")
        setup.commit()
    endless = (
        "WITH RECURSIVE c(x) AS (SELECT 1 UNION ALL SELECT x + 1 FROM c)"
        " SELECT x AS id FROM c WHERE x < 0"
    )
    source = SQLiteSource(path, query=endless, unique=True)
    timer = threading.Timer(0.5, source.interrupt)
    timer.start()
    with pytest.raises(sqlite3.OperationalError, match="interrupted"):
        pages_by_paginate(source, Limits(4096))
    timer.join()
    source.interrupt()  # nothing runs: a no-op
    rows = SQLiteSource(path, table="t")
    assert pages_by_paginate(rows, Limits(4096)) == [[{"id": 1}]]


@pytest.mark.skipif(sys.platform == "darwin", reason="macOS file names must be UTF-8")
def test_regression_a_database_named_in_bytes_that_are_not_utf8_pages(tmp_path: Path) -> None:
    """Found by a tester: the read-only URI quoted the path's str as strict UTF-8, so a
    POSIX name that is not UTF-8 (lone surrogates in Python) raised UnicodeEncodeError on
    the first page; past it, the attached files' names were read back as text, which
    failed to decode (for a caller's connection to such a file too)."""
    latin = os.fsdecode(os.fsencode(tmp_path) + b"/caf\xe9.db")
    utf8 = os.fsdecode(os.fsencode(tmp_path) + "/café.db".encode())
    for name, tag in ((latin, "latin"), (utf8, "utf8")):
        db = sqlite3.connect(name)
        db.execute("CREATE TABLE t (id INTEGER PRIMARY KEY, v TEXT)")
        db.executemany("INSERT INTO t VALUES (?, ?)", [(i, tag) for i in range(3)])
        db.commit()
        db.close()
    scope, limits = Scope("u"), Limits(400, max_items=2)

    def rows(source: SQLiteSource) -> list[tuple[int, str]]:
        store = MemoryCursorStore()
        first = paginate(source, scope=scope, store=store, limits=limits)
        rest = paginate(source, scope=scope, store=store, limits=limits, cursor=first.next_cursor)
        return [(row["id"], row["v"]) for row in [*first.items, *rest.items]]

    # Each name opens its own file: the bytes reach the OS as they are.
    with SQLiteSource(latin, table="t") as source:
        assert "database_bytes" in source.describe()
        assert rows(source) == [(0, "latin"), (1, "latin"), (2, "latin")]
    with SQLiteSource(utf8, table="t") as source:
        assert rows(source) == [(0, "utf8"), (1, "utf8"), (2, "utf8")]
    conn = sqlite3.connect(latin)
    try:
        assert rows(SQLiteSource(conn, table="t")) == [(0, "latin"), (1, "latin"), (2, "latin")]
    finally:
        conn.close()


def test_regression_a_database_path_with_uri_characters_or_two_leading_slashes_pages(
    tmp_path: Path,
) -> None:
    """Found with the one above: the path is a URI's, so its own '?', '#' and '%' must be
    escaped, and POSIX keeps a leading '//' (os.path.abspath), which after 'file:' SQLite
    read as a host ('invalid uri authority')."""
    name = tmp_path / "a?b#c%20 d.db"
    db = sqlite3.connect(name)
    db.execute("CREATE TABLE t (id INTEGER PRIMARY KEY)")
    db.execute("INSERT INTO t VALUES (1)")
    db.commit()
    db.close()
    paths = [str(name)] + (["/" + str(name)] if sys.platform != "win32" else [])
    for path in paths:
        with SQLiteSource(path, table="t") as source:
            page = paginate(source, scope=Scope("u"), store=MemoryCursorStore(), limits=Limits(400))
            assert list(page.items) == [{"id": 1}]


def test_regression_str_subclass_params_and_names_describe_as_plain_str() -> None:
    """A StrEnum key of ``params`` stayed in the description as the member: orjson
    refuses it as a key, so the description had no exact text, and a str subclass's own
    __str__ described its value (two values that spell themselves alike were one
    query). Both sources share the code; as `Scope` does, each is its plain text."""

    class Param(enum.StrEnum):
        GROUP = "g"

    class Mode(enum.StrEnum):
        KEYSET = "keyset"

    class Level(enum.IntEnum):
        ONE = 1

    class Lying(str):
        def __str__(self) -> str:
            return "same"

    query = "SELECT * FROM t WHERE grp = :g"
    keyset: Any = Mode.KEYSET  # typed as the Literal it equals
    for make in (SQLiteSource, PostgresSource):
        where: Any = sqlite3.connect(":memory:") if make is SQLiteSource else "dbname=unused"
        source = make(
            where,
            query=Lying(query),
            params={Param.GROUP: Lying("b")},
            order_by=[Lying("-id")],
            mode=keyset,
            unique=True,
        )
        described = source.describe()
        assert described["params"] == {"g": "b"}
        params = described["params"]
        assert isinstance(params, dict)
        assert [type(k) for k in params] == [str]
        assert type(params["g"]) is str
        assert type(described["query"]) is str
        assert described["order_by"] == ["-id"]
        assert type(described["mode"]) is str
        assert orjson.loads(orjson.dumps(described)) == described
        other = make(where, query=query, params={"g": Lying("c")}, unique=True).describe()
        assert other["params"] == {"g": "c"}
        counted = make(where, query=query, params={"g": Level.ONE}, unique=True).describe()
        assert counted["params"] == {"g": 1}
        assert type(counted["params"]["g"]) is int
        table = make(where, table=(Lying("main"), Lying("t"))).describe()
        assert [type(p) for p in table["table"]] == [str, str]  # type: ignore[union-attr]


def test_a_str_enum_param_key_pages_with_its_cursor() -> None:
    """With the one above, end to end: a query named by a StrEnum key binds, pages and
    resumes."""

    class Param(enum.StrEnum):
        LOW = "low"

    conn = sqlite3.connect(":memory:")
    conn.execute("CREATE TABLE n (id INTEGER PRIMARY KEY, v INTEGER)")
    conn.executemany("INSERT INTO n (v) VALUES (?)", [(i,) for i in range(6)])
    source = SQLiteSource(
        conn, query="SELECT * FROM n WHERE v >= :low", params={Param.LOW: 2}, unique=True
    )
    store = MemoryCursorStore()
    limits = Limits(400, max_items=2)
    seen: list[Any] = []
    page = paginate(source, scope=Scope("u"), store=store, limits=limits)
    seen += page.items
    while page.next_cursor is not None:
        page = paginate(
            source, scope=Scope("u"), store=store, limits=limits, cursor=page.next_cursor
        )
        seen += page.items
    assert [row["v"] for row in seen] == [2, 3, 4, 5]

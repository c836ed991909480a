"""Database values and settings at their edges (tester report r19-sqltypes).

A UTF-16 SQLite database could not be paged at all; on PostgreSQL a deeply nested JSON
value, an interval past a timedelta's range and a row whose text the client encoding
cannot hold failed every page whose fetch held the row, and an SQL_ASCII client
encoding failed with an internal error.
"""

from __future__ import annotations

import contextlib
import sqlite3
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

import psycopg
import pytest

from jsonbudget import Limits, MemoryCursorStore, PostgresSource, Scope, SQLiteSource, paginate
from jsonbudget.errors import DecodeError, LimitError
from tests.fixtures_postgres import PostgresServer, sql_ascii_database
from tests.test_sources import pages_by_fill, pages_by_paginate


def _ids(pages: list[list[Any]]) -> list[Any]:
    return [row["id"] for page in pages for row in page]


# --- SQLite, UTF-16 ---------------------------------------------------------------------


@pytest.mark.parametrize("encoding", ["UTF-16le", "UTF-16be"])
def test_regression_utf16_sqlite_database_pages(tmp_path: Path, encoding: str) -> None:
    """Found by a tester: the page token read each database file's name cast to a blob,
    which in a UTF-16 database is UTF-16 bytes, and os.stat raised "embedded null
    character": no page of such a database could be served (ValueError)."""
    path = tmp_path / "u16.db"
    other = tmp_path / "other.db"
    for each in (path, other):
        with contextlib.closing(sqlite3.connect(each)) as conn:
            conn.execute(f"PRAGMA encoding='{encoding}'")
            conn.execute("CREATE TABLE t (id INTEGER PRIMARY KEY, k TEXT)")
            conn.executemany("INSERT INTO t(k) VALUES (?)", [(f"v{i}" * 20,) for i in range(30)])
            conn.commit()
    limits = Limits(600)
    with SQLiteSource(path, table="t") as source:
        assert _ids(pages_by_paginate(source, limits)) == list(range(1, 31))
        assert _ids(pages_by_fill(source, limits)) == list(range(1, 31))
    with contextlib.closing(sqlite3.connect(path)) as conn:
        conn.execute("ATTACH DATABASE ? AS aux", (str(other),))
        with SQLiteSource(conn, table=("aux", "t")) as source:
            assert _ids(pages_by_paginate(source, limits)) == list(range(1, 31))
        # The token names each file by its inode: a database attached again from
        # another file under the same name is told apart.
        cur = conn.cursor()
        token = SQLiteSource._changes_and_layout(conn, cur)[0]
        assert token is not None
        files = token[-1]  # type: ignore[index]
        assert [(name, path_) for name, path_, _ in files] == [
            ("main", str(path).encode()),
            ("aux", str(other).encode()),
        ]
        assert all(file_id is not None for _, _, file_id in files)


# --- PostgreSQL ---------------------------------------------------------------------------


@pytest.fixture
def pg(postgres_server: PostgresServer) -> Iterator[psycopg.Connection[Any]]:
    with psycopg.connect(postgres_server.dsn, autocommit=True) as conn:
        yield conn


@pytest.mark.postgres
def test_regression_pg_deep_json_loads_without_recursion(
    postgres_server: PostgresServer, pg: psycopg.Connection[Any]
) -> None:
    """Found by a tester: psycopg's default json/jsonb loaders use the stdlib's recursive
    json.loads, so a 2.4 KB document nested 1,200 levels raised RecursionError for every
    page whose fetch held its row (and open()), the row before it never served."""
    deep = "[" * 1200 + "]" * 1200
    pg.execute("DROP TABLE IF EXISTS r19_deep")
    pg.execute("CREATE TABLE r19_deep (id int PRIMARY KEY, j json, jb jsonb)")
    pg.execute(
        "INSERT INTO r19_deep VALUES (1, '1', '1'), (2, %s::json, %s::jsonb),"
        ' (3, \'{"a": [1, 2.5, "x"], "a": 9}\', \'{"b": 18446744073709551616}\')',
        (deep, deep),
    )
    try:
        with PostgresSource(postgres_server.dsn, table="r19_deep") as source:
            for pages in (
                pages_by_paginate(source, Limits(65536)),
                pages_by_fill(source, Limits(65536)),
                [[row for row, _ in source.open(None)]],
            ):
                rows = {row["id"]: row for page in pages for row in page}
                assert sorted(rows) == [1, 2, 3]
                assert rows[1]["j"] == rows[1]["jb"] == 1
                for col in ("j", "jb"):
                    value, depth = rows[2][col], 0
                    while isinstance(value, list):
                        value, depth = value[0] if value else None, depth + 1
                    # Lists at depths 0 to 128, the deepest a page can show, then a marker.
                    assert depth == 129
                    assert value == "…[depth: list of 1 items]"
                # Ordinary values as json.loads reads them: the last duplicate key wins,
                # an integer past 64 bits exact.
                assert rows[3]["j"] == {"a": 9}
                assert rows[3]["jb"] == {"b": 18446744073709551616}
        # A loader the application registered on its connection is its choice.
        with psycopg.connect(postgres_server.dsn, autocommit=True) as conn:
            psycopg.types.json.set_json_loads(lambda data: "mine", conn)
            with PostgresSource(
                conn, query="SELECT id, j FROM r19_deep WHERE id = 1", unique=True
            ) as mine:
                assert [row for row, _ in mine.open(None)] == [{"id": 1, "j": "mine"}]
    finally:
        pg.execute("DROP TABLE r19_deep")


@pytest.mark.postgres
def test_regression_pg_interval_past_timedelta_arrives_as_text(
    postgres_server: PostgresServer, pg: psycopg.Connection[Any]
) -> None:
    """Found by a tester: an interval of 1,000,000,000 days (valid in PostgreSQL, past a
    timedelta's 999,999,999) raised psycopg.DataError for the whole fetch: the first page
    failed for a row it did not reach, and no retry ever passed the row."""
    big = ["1000000000 days", "-2147483647 days", "178956970 years 7 mons 2147483647 days"]
    pg.execute("DROP TABLE IF EXISTS r19_iv")
    pg.execute("CREATE TABLE r19_iv (id int PRIMARY KEY, v interval, vs interval[], pad text)")
    pg.execute(
        "INSERT INTO r19_iv SELECT g, '1 day', NULL, repeat('p', 300) FROM generate_series(1, 10) g"
    )
    pg.execute(
        "UPDATE r19_iv SET v = (%s::text[])[id - 5]::interval,"
        " vs = ARRAY[v, (%s::text[])[id - 5]::interval] WHERE id BETWEEN 6 AND 8",
        (big, big),
    )
    try:
        with PostgresSource(postgres_server.dsn, table="r19_iv") as source:
            for pages in (
                pages_by_paginate(source, Limits(1000)),
                pages_by_paginate(source, Limits(1000, max_items=2)),
                pages_by_fill(source, Limits(1000)),
                [[row for row, _ in source.open(None)]],
            ):
                rows = {row["id"]: row for page in pages for row in page}
                assert sorted(rows) == list(range(1, 11))
                assert [rows[i]["v"] for i in (6, 7, 8)] == big
                assert rows[6]["vs"][1] == big[0]
                assert str(rows[5]["v"]) == "1 day, 0:00:00"  # the rest as timedeltas
        # A session style psycopg cannot parse refused every interval
        # (NotImplementedError): they arrive as the text PostgreSQL writes.
        with psycopg.connect(postgres_server.dsn, autocommit=True) as conn:
            conn.execute("SET IntervalStyle = iso_8601")
            with PostgresSource(conn, table="r19_iv") as styled:
                rows = {
                    row["id"]: row for page in pages_by_fill(styled, Limits(1000)) for row in page
                }
                assert rows[1]["v"] == "P1D"
                assert rows[6]["v"] == "P1000000000D"
    finally:
        pg.execute("DROP TABLE r19_iv")


@pytest.mark.postgres
def test_regression_pg_sql_ascii_client_encoding_is_refused(
    postgres_server: PostgresServer,
) -> None:
    """Found by a tester: under the client encoding SQL_ASCII (an SQL_ASCII database's
    default) psycopg reads text and column names as bytes: a table= source failed with
    the internal "ValueError: b'id' is not in list", a query= source made every text,
    plain ASCII too, an "unencodable: bytes" marker."""
    with sql_ascii_database(postgres_server, "r19_ascii") as dsn:
        with psycopg.connect(dsn, autocommit=True) as conn:
            conn.execute("CREATE TABLE s (id int PRIMARY KEY, t text)")
            conn.execute("INSERT INTO s VALUES (1, 'plain ascii'), (2, 'more')")
        makers: list[Callable[[str], PostgresSource]] = [
            lambda d: PostgresSource(d, table="s"),
            lambda d: PostgresSource(d, table="s", mode="offset"),
            lambda d: PostgresSource(d, query="SELECT id, t FROM s", unique=True),
        ]
        for make in makers:
            with make(dsn) as source:
                with pytest.raises(LimitError, match="client_encoding") as info:
                    paginate(
                        source, scope=Scope("a", {}), store=MemoryCursorStore(), limits=Limits(1000)
                    )
                assert info.value.name == "connection"
                with pytest.raises(LimitError, match="client_encoding"):
                    list(source.open(None))
            with make(dsn + " client_encoding=UTF8") as source:
                assert pages_by_paginate(source, Limits(1000)) == [
                    [{"id": 1, "t": "plain ascii"}, {"id": 2, "t": "more"}]
                ]
        # Set on a connection after the plan was made: refused on the next page.
        with psycopg.connect(dsn + " client_encoding=UTF8", autocommit=True) as conn:
            source = PostgresSource(conn, table="s")
            assert _ids(pages_by_fill(source, Limits(1000))) == [1, 2]
            conn.execute("SET client_encoding = SQL_ASCII")
            with pytest.raises(LimitError, match="client_encoding"):
                pages_by_fill(source, Limits(1000))


@pytest.mark.postgres
def test_regression_pg_row_the_client_encoding_cannot_hold_fails_only_its_page(
    postgres_server: PostgresServer,
) -> None:
    """Found by a fixer: an SQL_ASCII database read through a UTF-8 client, one row's
    text not UTF-8: the server failed the whole query (psycopg's CharacterNotInRepertoire,
    no JsonBudgetError), so every page whose fetch covered the row failed and the rows
    before it were never served."""
    with sql_ascii_database(postgres_server, "r19_ascii_bad") as ascii_dsn:
        with psycopg.connect(ascii_dsn, autocommit=True) as conn:
            conn.execute("CREATE TABLE b (id int PRIMARY KEY, t text)")
            conn.execute("INSERT INTO b SELECT g, repeat('x', 100) FROM generate_series(1, 40) g")
            conn.execute(
                "UPDATE b SET t = convert_from('\\x61ff62'::bytea, 'SQL_ASCII') WHERE id = 30"
            )
        dsn = ascii_dsn + " client_encoding=UTF8"
        for limits in (Limits(1000), Limits(5000, max_items=7), Limits(100_000)):
            with PostgresSource(dsn, table="b") as source:
                store, scope = MemoryCursorStore(), Scope("a", {})
                served: list[int] = []
                cursor = None
                for _ in range(100):
                    try:
                        page = paginate(
                            source, scope=scope, cursor=cursor, store=store, limits=limits
                        )
                    except DecodeError:
                        # Not lost: every retry of the page raises it again.
                        with pytest.raises(DecodeError, match="client encoding"):
                            paginate(source, scope=scope, cursor=cursor, store=store, limits=limits)
                        break
                    served += [row["id"] for row in page.items]
                    assert page.next_cursor is not None, "ended without reaching the row"
                    cursor = page.next_cursor
                assert served == list(range(1, 30)), limits
        # In a transaction the failed statement ends it: the page raises DecodeError.
        with (
            psycopg.connect(dsn) as conn,
            PostgresSource(conn, table="b") as source,
            pytest.raises(DecodeError, match="client encoding"),
        ):
            pages_by_fill(source, Limits(100_000))

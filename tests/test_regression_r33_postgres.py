"""PostgresSource under server configurations (r33).

An SQL_ASCII database read as UTF-8 cut a long text inside a character (``left()``
counts bytes there): every page from its row on raised DecodeError for valid text. The
float check of a keyset order ran only when the plan was made, so a session SET to write
floats rounded after page 1 paged on and skipped rows. Rows kept from a page were served
on the next after the session's role or ``search_path`` changed under the same reader.
"""

from __future__ import annotations

from collections.abc import Iterator
from typing import Any

import psycopg
import pytest

from jsonbudget import Clipped, Limits, MemoryCursorStore, PostgresSource, Scope, paginate
from jsonbudget.errors import LimitError
from tests.fixtures_postgres import PostgresServer, sql_ascii_database
from tests.test_sources import pages_by_paginate

pytestmark = pytest.mark.postgres

LONG = "a" + "é" * 2000


@pytest.fixture(scope="module")
def ascii_dsn(postgres_server: PostgresServer) -> Iterator[str]:
    """An SQL_ASCII database read through a UTF-8 client; table ``t`` holds a valid UTF-8
    text whose cut at any even byte count ends inside a character."""
    with sql_ascii_database(postgres_server, "r33_pg_ascii") as dsn:
        with psycopg.connect(dsn, autocommit=True) as conn:
            conn.execute("CREATE TABLE t (id int PRIMARY KEY, body text, tags text[])")
            conn.execute(
                "INSERT INTO t VALUES (1, 'ok', '{}'), (2, %s, %s), (3, 'after', '{}')",
                (LONG, [LONG]),
            )
        yield dsn + " client_encoding=UTF8"


def test_regression_sqlascii_utf8_cut_never_splits_a_character(ascii_dsn: str) -> None:
    with PostgresSource(ascii_dsn, table="t", max_cell_bytes=64) as source:
        rows = [row for row, _ in source.open(None)]
    assert [row["id"] for row in rows] == [1, 2, 3]
    body, tags = rows[1]["body"], rows[1]["tags"]
    size = len(LONG.encode())
    assert isinstance(body, Clipped)
    assert isinstance(body.head, str)
    assert (body.length, body.unit) == (size, "bytes")
    assert LONG.startswith(body.head)
    assert 61 <= len(body.head.encode()) <= 64  # the characters whole in 64 bytes
    assert isinstance(tags, Clipped)
    assert isinstance(tags.head, str)
    text = "{" + LONG + "}"
    assert (tags.length, tags.unit) == (len(text.encode()), "bytes")
    assert text.startswith(tags.head)
    assert 61 <= len(tags.head.encode()) <= 64
    # The page's own cut (no max_cell_bytes) too, through the pager.
    with PostgresSource(ascii_dsn, table="t") as source:
        pages = pages_by_paginate(source, Limits(1024))
    assert [item["id"] for page in pages for item in page] == [1, 2, 3]


@pytest.fixture
def pg(postgres_server: PostgresServer) -> Iterator[psycopg.Connection[Any]]:
    with psycopg.connect(postgres_server.dsn, autocommit=True) as conn:
        yield conn


def test_regression_float_digits_set_after_the_first_page_is_refused(
    pg: psycopg.Connection[Any],
) -> None:
    pg.execute("DROP TABLE IF EXISTS r33_fl")
    pg.execute("CREATE TABLE r33_fl (id int PRIMARY KEY, f float8)")
    # Distinct floats that read alike with 15 significant digits.
    pg.execute("INSERT INTO r33_fl SELECT g, 0.2 - g * 1e-17 FROM generate_series(1, 60) g")
    pg.execute("INSERT INTO r33_fl SELECT g, 0.3 + g * 0.01 FROM generate_series(61, 90) g")
    try:
        source = PostgresSource(pg, table="r33_fl", order_by=["f"])
        store, scope = MemoryCursorStore(), Scope("t", {})
        page = paginate(source, scope=scope, store=store, limits=Limits(600))
        assert page.next_cursor is not None
        pg.execute("SET extra_float_digits = 0")
        with pytest.raises(LimitError) as caught:  # served rounded, rows were skipped
            paginate(source, scope=scope, cursor=page.next_cursor, store=store, limits=Limits(600))
        assert (caught.value.name, caught.value.value) == ("order_by", "f")
        assert "extra_float_digits = 0" in str(caught.value)
        # open(), and a page in the caller's transaction, read no snapshot: checked too.
        with pytest.raises(LimitError):
            next(source.open(None))
        with pg.transaction(), pytest.raises(LimitError):
            paginate(source, scope=scope, cursor=page.next_cursor, store=store, limits=Limits(600))
        pg.execute("SET extra_float_digits = 1")
        ids = [item["id"] for item in page.items]
        cursor: str | None = page.next_cursor
        while cursor is not None:
            page = paginate(source, scope=scope, cursor=cursor, store=store, limits=Limits(600))
            ids += [item["id"] for item in page.items]
            cursor = page.next_cursor
        assert sorted(ids) == list(range(1, 91))
    finally:
        pg.execute("RESET extra_float_digits")
        pg.execute("DROP TABLE r33_fl")


def test_regression_search_path_change_drops_the_rows_kept(
    pg: psycopg.Connection[Any],
) -> None:
    pg.execute("DROP SCHEMA IF EXISTS r33_s1 CASCADE; DROP SCHEMA IF EXISTS r33_s2 CASCADE")
    for schema in ("r33_s1", "r33_s2"):
        pg.execute(f"CREATE SCHEMA {schema}")
        pg.execute(f"CREATE TABLE {schema}.t (id int PRIMARY KEY, s text)")
        pg.execute(f"INSERT INTO {schema}.t SELECT g, '{schema}' FROM generate_series(1, 40) g")
    try:
        pg.execute("SET search_path = r33_s1")
        source = PostgresSource(pg, table="t")
        store, scope = MemoryCursorStore(), Scope("t", {})
        page = paginate(source, scope=scope, store=store, limits=Limits(700))
        assert {item["s"] for item in page.items} == {"r33_s1"}
        assert page.next_cursor is not None
        pg.execute("SET search_path = r33_s2")
        page = paginate(
            source, scope=scope, cursor=page.next_cursor, store=store, limits=Limits(700)
        )
        assert page.items
        assert {item["s"] for item in page.items} == {"r33_s2"}  # none kept from r33_s1
    finally:
        pg.execute("RESET search_path")
        pg.execute("DROP SCHEMA r33_s1 CASCADE; DROP SCHEMA r33_s2 CASCADE")

"""A PostgresSource paging on a connection inside the caller's transaction (r20).

Its statements ran directly in the caller's transaction: one that failed (a row the
client encoding cannot hold, a division by zero, a statement timeout) aborted it, so every
later statement of the caller's failed and their uncommitted writes could only be rolled
back; and the rows before an unreadable row were never served, where on an autocommit
connection they are.
"""

from __future__ import annotations

from collections.abc import Callable, Iterator
from typing import Any

import psycopg
import pytest

from jsonbudget import Limits, MemoryCursorStore, PostgresSource, Scope, paginate
from jsonbudget.errors import DecodeError, LimitError
from tests.fixtures_postgres import PostgresServer, sql_ascii_database
from tests.test_sources import pages_by_fill, pages_by_paginate

pytestmark = pytest.mark.postgres

INTRANS = psycopg.pq.TransactionStatus.INTRANS


@pytest.fixture(scope="module")
def ascii_dsn(postgres_server: PostgresServer) -> Iterator[str]:
    """An SQL_ASCII database read through a UTF-8 client, whose table ``b`` holds rows 1
    to 40 and, at row 30, text that is not UTF-8 (the server cannot send it)."""
    with sql_ascii_database(postgres_server, "r20_txn_ascii") as dsn:
        with psycopg.connect(dsn, autocommit=True) as conn:
            conn.execute("CREATE TABLE b (id int PRIMARY KEY, t text)")
            conn.execute("INSERT INTO b SELECT g, repeat('x', 100) FROM generate_series(1, 40) g")
            conn.execute(
                "UPDATE b SET t = convert_from('\\x61ff62'::bytea, 'SQL_ASCII') WHERE id = 30"
            )
            conn.execute("CREATE TABLE mine (v int)")
        yield dsn + " client_encoding=UTF8"


def _callers(dsn: str) -> psycopg.Connection[Any]:
    """A connection inside a transaction of its caller's, which wrote a row in it."""
    conn = psycopg.connect(dsn)  # not autocommit
    conn.execute("INSERT INTO mine VALUES (7)")
    assert conn.info.transaction_status == INTRANS
    return conn


def _still_usable(conn: psycopg.Connection[Any], dsn: str) -> None:
    """The caller's transaction goes on: its write is there, and it commits."""
    assert conn.info.transaction_status == INTRANS
    assert conn.execute("SELECT 1").fetchone() == (1,)
    assert conn.execute("SELECT count(*) FROM mine WHERE v = 7").fetchone() == (1,)
    conn.commit()
    with psycopg.connect(dsn, autocommit=True) as other:
        assert other.execute("SELECT count(*) FROM mine WHERE v = 7").fetchone() == (1,)
        other.execute("DELETE FROM mine")


def _served_until_unreadable(source: PostgresSource, limits: Limits) -> list[int]:
    """The ids paginate serves before the page that raises DecodeError, which it raises
    again when retried."""
    store, scope = MemoryCursorStore(), Scope("a", {})
    served: list[int] = []
    cursor = None
    for _ in range(100):
        try:
            page = paginate(source, scope=scope, cursor=cursor, store=store, limits=limits)
        except DecodeError:
            assert served == list(range(1, 30)), limits
            with pytest.raises(DecodeError, match="client encoding"):
                paginate(source, scope=scope, cursor=cursor, store=store, limits=limits)
            return served
        served += [row["id"] for row in page.items]
        assert page.next_cursor is not None, "ended without reaching the row"
        cursor = page.next_cursor
    raise AssertionError("did not terminate")


def test_regression_pg_unreadable_row_leaves_the_callers_transaction_usable(
    ascii_dsn: str,
) -> None:
    """A page that failed on a row the client encoding cannot hold aborted the caller's
    transaction: their next statement raised InFailedSqlTransaction, their write was lost."""
    reads: list[Callable[[PostgresSource], object]] = [
        lambda source: pages_by_fill(source, Limits(100_000)),
        lambda source: pages_by_paginate(source, Limits(100_000)),
        lambda source: list(source.open(None)),
    ]
    for read in reads:
        with _callers(ascii_dsn) as conn:
            source = PostgresSource(conn, table="b")
            with pytest.raises(DecodeError, match="client encoding"):
                read(source)
            _still_usable(conn, ascii_dsn)


def test_regression_pg_rows_before_an_unreadable_row_served_in_the_callers_transaction(
    ascii_dsn: str,
) -> None:
    """In the caller's transaction the row-by-row read again could not run (the failure
    had aborted it): the rows of the fetch before the unreadable row were never served.
    Served now as on an autocommit connection: each once, then the page that starts with
    the row raises, on every retry."""
    for limits in (Limits(1000), Limits(5000, max_items=7), Limits(100_000)):
        with psycopg.connect(ascii_dsn, autocommit=True) as auto:
            assert _served_until_unreadable(PostgresSource(auto, table="b"), limits) == list(
                range(1, 30)
            )
        with _callers(ascii_dsn) as conn:
            source = PostgresSource(conn, table="b")
            assert _served_until_unreadable(source, limits) == list(range(1, 30)), limits
            _still_usable(conn, ascii_dsn)
        # A unique order: the tie check after the rows served runs in the transaction too.
        with _callers(ascii_dsn) as conn:
            source = PostgresSource(conn, query="SELECT id, t FROM b", unique=True)
            assert _served_until_unreadable(source, limits) == list(range(1, 30)), limits
            _still_usable(conn, ascii_dsn)


def test_regression_pg_failed_statement_leaves_the_callers_transaction_usable(
    postgres_server: PostgresServer,
) -> None:
    """Any statement of the source's that failed aborted the caller's transaction: a
    division by zero in a view's column, a statement timeout, an error in the query found
    while learning its columns."""
    dsn = postgres_server.dsn
    with psycopg.connect(dsn, autocommit=True) as admin:
        admin.execute("DROP TABLE IF EXISTS r20_rows, mine CASCADE")
        admin.execute("CREATE TABLE mine (v int)")
        admin.execute("CREATE TABLE r20_rows AS SELECT g AS id FROM generate_series(1, 40) g")
        admin.execute("ALTER TABLE r20_rows ADD PRIMARY KEY (id)")
        admin.execute("CREATE VIEW r20_zero AS SELECT id, 1 / (id - 30) AS q FROM r20_rows")
        admin.execute(
            "CREATE VIEW r20_slow AS SELECT id, CASE WHEN id = 30 THEN pg_sleep(5)::text END AS s"
            " FROM r20_rows"
        )
    try:
        cases: list[tuple[dict[str, Any], str | None, type[Exception]]] = [
            (
                {"table": "r20_zero", "order_by": ["id"], "unique": True},
                None,
                psycopg.errors.DivisionByZero,
            ),
            (
                {"table": "r20_slow", "order_by": ["id"], "unique": True},
                "SET LOCAL statement_timeout = '200ms'",
                psycopg.errors.QueryCanceled,
            ),
            ({"query": "SELECT id FROM r20_missing"}, None, psycopg.errors.UndefinedTable),
        ]
        reads: list[Callable[[PostgresSource], object]] = [
            lambda source: pages_by_fill(source, Limits(100_000)),
            lambda source: pages_by_paginate(source, Limits(100_000)),
            lambda source: list(source.open(None)),
        ]
        for kwargs, setting, error in cases:
            for read in reads:
                with _callers(dsn) as conn:
                    if setting is not None:
                        conn.execute(setting)
                    source = PostgresSource(conn, **kwargs)
                    with pytest.raises(error):
                        read(source)
                    _still_usable(conn, dsn)
    finally:
        with psycopg.connect(dsn, autocommit=True) as admin:
            admin.execute("DROP TABLE r20_rows, mine CASCADE")


def test_pg_open_in_the_callers_transaction_keeps_what_they_ran_between_rows(
    postgres_server: PostgresServer,
) -> None:
    """open()'s savepoint ends with its iterator: closed early, or ended by an error that
    aborted nothing (a tie in an order declared unique), it is released, not rolled back
    to, so what the caller wrote between two rows stays; and the caller then commits."""
    dsn = postgres_server.dsn
    with psycopg.connect(dsn, autocommit=True) as admin:
        admin.execute("DROP TABLE IF EXISTS r20_ties, mine CASCADE")
        admin.execute("CREATE TABLE mine (v int)")
        admin.execute("CREATE TABLE r20_ties AS SELECT g / 10 AS k FROM generate_series(1, 40) g")
    try:
        with _callers(dsn) as conn:
            source = PostgresSource(conn, table="r20_ties", order_by=["k"], unique=True)

            def write_between_rows() -> None:
                for _ in source.open(None):
                    conn.execute("INSERT INTO mine VALUES (8)")

            with pytest.raises(LimitError, match="order_by"):
                write_between_rows()
            rows = source.open(None, limit_hint=5)
            next(rows)
            conn.execute("INSERT INTO mine VALUES (9)")
            rows.close()
            assert conn.execute("SELECT v FROM mine ORDER BY v").fetchall() == [(7,), (8,), (9,)]
            _still_usable(conn, dsn)
    finally:
        with psycopg.connect(dsn, autocommit=True) as admin:
            admin.execute("DROP TABLE r20_ties, mine CASCADE")


def test_regression_two_open_iterators_in_the_callers_transaction(
    postgres_server: PostgresServer,
) -> None:
    """Each open() iterator held one savepoint for its life, and psycopg ends savepoints
    in the order they began: two read side by side, or one closed after another began,
    raised OutOfOrderTransactionNesting, and the caller's commit was refused while one
    was open. The savepoints are now a statement's each."""
    dsn = postgres_server.dsn
    with psycopg.connect(dsn, autocommit=True) as admin:
        admin.execute("DROP TABLE IF EXISTS r20_pairs, mine CASCADE")
        admin.execute("CREATE TABLE mine (v int)")
        admin.execute("CREATE TABLE r20_pairs (id int PRIMARY KEY)")
        admin.execute("INSERT INTO r20_pairs SELECT generate_series(1, 600)")
    try:
        with _callers(dsn) as conn:
            a = PostgresSource(conn, table="r20_pairs", batch_size=7)
            b = PostgresSource(conn, table="r20_pairs", order_by=["-id"], batch_size=5)
            pairs = [
                (x["id"], y["id"])
                for (x, _), (y, _) in zip(a.open(None), b.open(None), strict=True)
            ]
            assert pairs == [(i, 601 - i) for i in range(1, 601)]
            first, second = a.open(None), b.open(None)
            assert next(first)[0] == {"id": 1}
            assert next(second)[0] == {"id": 600}
            first.close()  # before the one opened after it
            conn.execute("INSERT INTO mine VALUES (8)")
            conn.commit()  # an iterator still open: its cursor ends with the transaction
            second.close()
            assert conn.execute("SELECT v FROM mine ORDER BY v").fetchall() == [(7,), (8,)]
    finally:
        with psycopg.connect(dsn, autocommit=True) as admin:
            admin.execute("DROP TABLE r20_pairs, mine CASCADE")

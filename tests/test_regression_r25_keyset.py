"""Keyset positions that did not name their row again (tester report r25-keyset).

SQLite: a table without a declared key is ordered by its rowid, which ``VACUUM`` may
renumber; pages after it silently skipped rows or served one twice. PostgreSQL: a date
or time stamp key under a non-ISO ``DateStyle`` was kept as the session's text, whose
zone abbreviation read back as another zone (rows skipped) or not at all (a raw
psycopg error on every page after the first).
"""

from __future__ import annotations

import contextlib
import sqlite3
from collections.abc import Iterator, Sequence
from pathlib import Path
from typing import Any

import psycopg
import pytest

from jsonbudget import (
    InvalidCursor,
    Limits,
    MemoryCursorStore,
    PostgresSource,
    Scope,
    SQLiteSource,
    paginate,
)
from tests.fixtures_postgres import PostgresServer


def _pages(source: Any, limits: Limits, between: Any = None) -> list[dict[str, Any]]:
    """Every row, page by page through `paginate`; *between* runs after the first page."""
    store, scope = MemoryCursorStore(), Scope("alice", {"t": "r25"})
    page = paginate(source, scope=scope, store=store, limits=limits)
    rows = list(page.items)
    if between is not None:
        between()
    while page.next_cursor:
        page = paginate(source, scope=scope, cursor=page.next_cursor, store=store, limits=limits)
        rows += page.items
    assert page.complete
    return rows


# --- SQLite: rowids renumbered by VACUUM ----------------------------------------------


def _notes(path: Path) -> sqlite3.Connection:
    conn = sqlite3.connect(path, isolation_level=None)
    conn.execute("CREATE TABLE notes (body TEXT, tag TEXT)")  # no declared key: the rowid
    conn.executemany(
        "INSERT INTO notes VALUES (?, ?)", [(f"n{i}", f"t{i % 3}") for i in range(1, 13)]
    )
    conn.execute("DELETE FROM notes WHERE body IN ('n1', 'n2', 'n3', 'n4')")
    return conn


@pytest.mark.parametrize("order_by", [None, ("tag",), ("-tag",)])
@pytest.mark.parametrize("given", ["path", "connection"])
def test_regression_sqlite_vacuum_between_pages_is_refused_not_rows_lost(
    tmp_path: Path, order_by: tuple[str, ...] | None, given: str
) -> None:
    """Found by a tester: `VACUUM` renumbered the rowids of a table without an INTEGER
    PRIMARY KEY between two pages; the cursor held the old rowid, and the rows now
    numbered below it were never served (n7 to n10 lost, the last page complete), or
    one was served twice (rowid as the tiebreaker of a DESC order)."""
    path = tmp_path / "notes.db"
    with contextlib.closing(_notes(path)) as conn:
        source = SQLiteSource(
            conn if given == "connection" else path, table="notes", order_by=order_by
        )
        with source, pytest.raises(InvalidCursor, match="VACUUM"):
            _pages(source, Limits(4096, max_items=2), between=lambda: conn.execute("VACUUM"))
        # open()'s positions name their row too (rowids with a gap again).
        conn.execute("DELETE FROM notes WHERE body IN ('n5', 'n6')")
        with SQLiteSource(conn, table="notes", order_by=order_by) as source:
            first = list(source.open(None, limit_hint=1))[:2]
            conn.execute("VACUUM")
            with pytest.raises(InvalidCursor, match="rowid"):
                list(source.open(first[-1][1]))


def test_regression_sqlite_rowid_position_without_its_row_is_refused(tmp_path: Path) -> None:
    """A position after a rowid that does not say which row it ended on (one written
    before positions did, or made up) cannot be checked against a renumbering: it is
    refused, never resumed at a rowid that may name another row."""
    path = tmp_path / "notes.db"
    with contextlib.closing(_notes(path)) as conn, SQLiteSource(conn, table="notes") as source:
        ((_, position),) = list(source.open(None, limit_hint=0))[:1]
        assert isinstance(position, list)
        assert position[0] == 5  # the rowid, then the row's digest
        with pytest.raises(InvalidCursor, match="which row"):
            list(source.open([6]))
        with pytest.raises(InvalidCursor, match="which row"):
            source.fill(_Builder(), [6])
        with pytest.raises(InvalidCursor, match="not a valid"):
            list(source.open([6, 7]))


class _Builder:
    """The least `Filler`: takes every row."""

    def __init__(self) -> None:
        self.rows: list[Any] = []

    def fill_from(self, items: list[Any], start: int = 0) -> tuple[bool, int]:
        self.rows += items[start:]
        return False, len(items) - start


def _bodies(rows: Sequence[dict[str, Any]]) -> list[str]:
    return [row["body"] if isinstance(row["body"], str) else "cut" for row in rows]


def test_sqlite_rowid_positions_hold_across_cuts_and_other_changes(tmp_path: Path) -> None:
    """The row a position names is checked as the least cut reads it: pages that cut
    long cells at other bounds (or not at all), rows inserted after the cursor and other
    rows deleted pass; the row itself deleted or updated is refused, as renumbered."""
    path = tmp_path / "long.db"
    with contextlib.closing(sqlite3.connect(path, isolation_level=None)) as conn:
        conn.execute("CREATE TABLE t (body TEXT, data BLOB, n REAL)")
        rows = [
            ("é" * (40 + 13 * i) + str(i), bytes([i]) * (50 + 17 * i), i / 3) for i in range(30)
        ]
        conn.executemany("INSERT INTO t VALUES (?, ?, ?)", rows)
        conn.execute("DELETE FROM t WHERE rowid % 7 = 0")
        expected = [r[0] for i, r in enumerate(rows) if (i + 1) % 7]
        with SQLiteSource(path, table="t") as source:
            store, scope = MemoryCursorStore(), Scope("alice", {"t": "long"})
            page = paginate(source, scope=scope, store=store, limits=Limits(900))
            seen = _bodies(page.items)
            budgets = [4000, 700, 1 << 20, 2500]
            inserted = "z" * 300
            conn.execute("INSERT INTO t VALUES (?, NULL, NULL)", (inserted,))
            conn.execute("DELETE FROM t WHERE rowid = 1")  # served already
            while page.next_cursor:
                limits = Limits(budgets[len(seen) % len(budgets)])
                page = paginate(
                    source, scope=scope, cursor=page.next_cursor, store=store, limits=limits
                )
                seen += _bodies(page.items)
            assert len(seen) == len(expected) + 1
            assert [s for s in seen if s != "cut"] == [
                s for s in [*expected, inserted] if s in seen
            ]
            # The row a position ended on, updated: refused.
            page = paginate(source, scope=scope, store=store, limits=Limits(900))
            last = conn.execute(
                "SELECT max(rowid) FROM t WHERE body = ?", (page.items[-1]["body"],)
            )
            conn.execute("UPDATE t SET n = -1 WHERE rowid = ?", (last.fetchone()[0],))
            with pytest.raises(InvalidCursor, match="deleted or changed"):
                paginate(
                    source, scope=scope, cursor=page.next_cursor, store=store, limits=Limits(900)
                )


# --- PostgreSQL: date and time stamp keys in a non-ISO DateStyle --------------------------


@pytest.fixture
def pg(postgres_server: PostgresServer) -> Iterator[psycopg.Connection[Any]]:
    with psycopg.connect(postgres_server.dsn, autocommit=True) as conn:
        yield conn


@pytest.mark.postgres
@pytest.mark.parametrize("zone", ["Asia/Kolkata", "Asia/Shanghai"])
@pytest.mark.parametrize("style", ["SQL, DMY", "Postgres, MDY", "German"])
def test_regression_pg_timestamptz_key_under_non_iso_datestyle_loses_no_row(
    postgres_server: PostgresServer, pg: psycopg.Connection[Any], zone: str, style: str
) -> None:
    """Found by a tester: under DateStyle SQL the position kept the session's text,
    '01/01/2024 06:30:00 IST', which PostgreSQL reads with IST as Israel's time (CST as
    US Central under Asia/Shanghai): 6 of 12 rows skipped, silently."""
    pg.execute("DROP TABLE IF EXISTS r25_events")
    pg.execute(
        "CREATE TABLE r25_events (id serial PRIMARY KEY, at timestamptz NOT NULL,"
        " day date NOT NULL, local timestamp NOT NULL)"
    )
    pg.execute(
        "INSERT INTO r25_events (at, day, local) SELECT"
        " timestamptz '2024-01-01 00:00+00' + g * interval '1 hour',"
        " date '2024-01-13' - g, timestamp '2024-01-01 00:00' + (g % 4) * interval '1 day'"
        " FROM generate_series(0, 11) g"
    )
    options = f" options='-c TimeZone={zone} -c DateStyle={style.replace(' ', '')}'"
    limits = Limits(4096, max_items=2)
    for order_by, expected in (
        (("at",), list(range(1, 13))),
        (("-at",), list(range(12, 0, -1))),
        (("day",), list(range(12, 0, -1))),
        (("local",), [1, 5, 9, 2, 6, 10, 3, 7, 11, 4, 8, 12]),
    ):
        with PostgresSource(
            postgres_server.dsn + options, table="r25_events", order_by=order_by
        ) as source:
            assert [row["id"] for row in _pages(source, limits)] == expected, order_by
    # A caller's connection keeps its own settings, and its values as psycopg makes them.
    with psycopg.connect(postgres_server.dsn + options, autocommit=True) as conn:
        with PostgresSource(conn, table="r25_events", order_by=("at",)) as source:
            rows = _pages(source, limits)
        assert [row["id"] for row in rows] == list(range(1, 13))
        assert isinstance(rows[0]["at"], str)  # the session's text (psycopg cannot parse it)
        shown = conn.execute("SELECT current_setting('DateStyle'), current_setting('TimeZone')")
        assert shown.fetchone() == (
            {"SQL, DMY": "SQL, DMY", "Postgres, MDY": "Postgres, MDY", "German": "German, DMY"}[
                style
            ],
            zone,
        )


@pytest.mark.postgres
def test_regression_pg_lmt_timestamptz_key_pages_past_the_first(
    postgres_server: PostgresServer, pg: psycopg.Connection[Any]
) -> None:
    """Found by a tester: a time stamp from before standard time, under America/New_York
    and DateStyle SQL, DMY, is written '02/01/1850 19:03:58 LMT', which PostgreSQL cannot
    read back: every page after the first raised a raw psycopg InvalidDatetimeFormat."""
    pg.execute("DROP TABLE IF EXISTS r25_old")
    pg.execute("CREATE TABLE r25_old (id serial PRIMARY KEY, at timestamptz NOT NULL)")
    pg.execute(
        "INSERT INTO r25_old (at) SELECT timestamptz '1850-01-01 00:00+00' + g * interval '7 hours'"
        " FROM generate_series(0, 9) g"
    )
    pg.execute("INSERT INTO r25_old (at) VALUES ('0044-03-15 12:00+00 BC'), ('infinity')")
    limits = Limits(4096, max_items=3)
    for zone in ("America/New_York", "Asia/Tokyo", "Europe/Amsterdam"):
        options = f" options='-c TimeZone={zone} -c DateStyle=SQL,DMY'"
        with PostgresSource(
            postgres_server.dsn + options, table="r25_old", order_by=("at",)
        ) as source:
            rows = _pages(source, limits)
            assert [row["id"] for row in rows] == [11, *range(1, 11), 12], zone
            assert isinstance(rows[1]["at"], str)  # the value stays the session's text
            # open() too, from a position written in another session's style.
            after = list(source.open(None, limit_hint=2))[2][1]
        other = " options='-c TimeZone=Asia/Kolkata -c DateStyle=Postgres,MDY'"
        with PostgresSource(
            postgres_server.dsn + other, table="r25_old", order_by=("at",)
        ) as source:
            assert [row["id"] for row, _ in source.open(after)] == [*range(3, 11), 12], zone

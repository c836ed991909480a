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
    Clipped,
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
        with pytest.raises(InvalidCursor, match="does not fit the source's keys"):
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


# --- SQLite: a declared key that allows NULL; cut text that is not UTF-8; the check's cost --


NULLABLE_KEYS = [
    "CREATE TABLE t (id INT PRIMARY KEY, s TEXT)",
    "CREATE TABLE t (id TEXT PRIMARY KEY, s TEXT)",
    "CREATE TABLE t (id INT, s TEXT, UNIQUE (id))",
]


def _keyed(path: Path, ddl: str, ids: Sequence[Any]) -> sqlite3.Connection:
    conn = sqlite3.connect(path, isolation_level=None)
    conn.execute(ddl)
    conn.executemany("INSERT INTO t VALUES (?, 's')", [(i,) for i in ids])
    return conn


@pytest.mark.parametrize("ddl", NULLABLE_KEYS)
def test_regression_sqlite_nullable_declared_key_survives_updates_of_other_columns(
    tmp_path: Path, ddl: str
) -> None:
    """Found by a sweep: a declared key SQLite lets hold NULL gets the rowid appended, and
    every position after it carried a digest of the whole row: a non-key column of the
    page's last row updated (or a VACUUM) refused the next page, which the key alone
    places. Only a position whose key is NULL, which the rowid orders, is checked."""
    ids = [f"k{i:02d}" if "TEXT" in ddl else i for i in range(20)]
    with contextlib.closing(_keyed(tmp_path / "k.db", ddl, ids)) as conn:
        conn.execute("INSERT INTO t VALUES (NULL, 'a'), (NULL, 'b'), (NULL, 'c')")

        def churn() -> None:
            conn.execute("UPDATE t SET s = s || '!' WHERE id IS NOT NULL")
            conn.execute("VACUUM")

        with SQLiteSource(conn, table="t", order_by=["-id"]) as source:
            rows = _pages(source, Limits(4096, max_items=5), between=churn)
            assert [r["id"] for r in rows] == [*reversed(ids), None, None, None]
            # A key with no NULL: the position is the key and the rowid, no digest.
            ((_, position),) = list(source.open(None, limit_hint=0))[:1]
            assert position == [ids[-1], 20]
            # After a NULL key the rowid decides: its row is still checked.
            ((_, after_null),) = list(source.open([ids[0], 1], limit_hint=0))[:1]
            assert isinstance(after_null, list)
            assert after_null[0] is None
            assert len(after_null) == 3
            conn.execute("UPDATE t SET s = 'changed' WHERE rowid = ?", (after_null[1],))
            with pytest.raises(InvalidCursor, match="deleted or changed"):
                source.fill(_Builder(), after_null)


@pytest.mark.parametrize("ddl", NULLABLE_KEYS)
def test_regression_sqlite_nullable_key_positions_from_before_the_digest_resume(
    tmp_path: Path, ddl: str
) -> None:
    """Cursors minted before positions after a rowid held a digest (``[key, rowid]``)
    were all refused for these tables; so are only those after a NULL key, which the
    rowid orders. A position written with a digest after a key with no NULL resumes too."""
    ids = [f"k{i:02d}" if "TEXT" in ddl else i for i in range(10)]
    with contextlib.closing(_keyed(tmp_path / "k.db", ddl, ids)) as conn:
        conn.execute("INSERT INTO t VALUES (NULL, 'a'), (NULL, 'b')")
        with SQLiteSource(conn, table="t", order_by=["id"]) as source:
            old_positions: list[Any] = [[ids[3], 4], [ids[3], 4, "0123456789abcdef"]]
            for old in old_positions:
                assert [r["id"] for r, _ in source.open(old)] == ids[4:]
                builder = _Builder()
                source.fill(builder, old)
                assert [r["id"] for r in builder.rows] == ids[4:]
            with pytest.raises(InvalidCursor, match="which row"):
                source.fill(_Builder(), [None, 11])


@pytest.mark.parametrize(
    ("ddl", "given", "max_cell_bytes"),
    [
        # The rowid orders: the check reads the page's last row again.
        ("CREATE TABLE t (id INT, s TEXT)", "connection", None),
        ("CREATE TABLE t (id INT, s TEXT)", "connection", 64),
        ("CREATE TABLE t (id INTEGER PRIMARY KEY, s TEXT)", "connection", 64),
        # Its own connection reads cut cells by blob I/O (uncut, the text raises).
        ("CREATE TABLE t (id INT, s TEXT)", "path", 64),
    ],
)
def test_regression_sqlite_cut_text_that_is_not_utf8_is_a_valid_clipped(
    tmp_path: Path, ddl: str, given: str, max_cell_bytes: int | None
) -> None:
    """Found by a sweep: a text of 80 bytes that are not UTF-8, cut at 64 bytes, read its
    head as 64 U+FFFD, 192 bytes, longer than its length: ``Clipped`` refused it and
    the page raised LimitError, at any budget, with the docs' own ``text_factory`` (the
    rowid check re-read the row cut at 64 on every resumed page). A cut head now holds
    no more bytes than were read."""
    path = tmp_path / "bad.db"
    with contextlib.closing(sqlite3.connect(path, isolation_level=None)) as conn:
        conn.execute(ddl)
        for i in range(6):
            conn.execute("INSERT INTO t VALUES (?, CAST(? AS TEXT))", (i, b"\xff" * 80))
        conn.text_factory = lambda b: b.decode("utf-8", "replace")
        source = SQLiteSource(
            conn if given == "connection" else path,
            table="t",
            order_by=["id"],
            max_cell_bytes=max_cell_bytes,
        )
        with source:
            rows = _pages(source, Limits(20000, max_items=2))
        assert [r["id"] for r in rows] == list(range(6))
        for row in rows:
            value = row["s"]
            if max_cell_bytes is None and given == "connection":
                assert value == "\ufffd" * 80  # whole, as the factory decodes it
                continue
            assert isinstance(value, Clipped)
            assert (value.length, value.unit) == (80, "bytes")
            assert value.head == "\ufffd" * 21  # 63 bytes of the 64 read
            assert value.omitted == 17


def test_regression_sqlite_utf16_cut_head_a_text_factory_lengthens_is_valid(
    tmp_path: Path,
) -> None:
    """In a UTF-16 database the cut counts characters; a connection's text_factory that
    makes more characters of the head's bytes (latin-1 of "é") gave a head longer than
    the length SQLite counted, a ``Clipped`` refused: the page raised LimitError."""
    path = tmp_path / "u16.db"
    with contextlib.closing(sqlite3.connect(path, isolation_level=None)) as conn:
        conn.execute("PRAGMA encoding = 'UTF-16le'")
        conn.execute("CREATE TABLE t (id INTEGER PRIMARY KEY, s TEXT)")
        conn.execute("INSERT INTO t VALUES (1, ?)", ("é" * 100,))
        conn.text_factory = lambda b: b.decode("latin-1")
        with SQLiteSource(conn, table="t", max_cell_bytes=64) as source:
            (row,) = _pages(source, Limits(4096))
        value = row["s"]
        assert isinstance(value, Clipped)
        assert (len(value.head), value.length, value.unit) == (64, 100, "chars")


def _statements(
    path: Path, ddl: str, limits: Limits, pages: int = 4
) -> tuple[list[int], list[str]]:
    """Statements per page where each page gets a new source (`paginated_tool`'s way), and
    the last page's statements."""
    conn = sqlite3.connect(path, isolation_level=None)
    with contextlib.closing(conn):
        conn.execute(ddl)
        conn.executemany("INSERT INTO t VALUES (?, ?)", [(i, "s" * (i % 50)) for i in range(400)])
        seen: list[str] = []
        conn.set_trace_callback(seen.append)
        store, scope = MemoryCursorStore(), Scope("alice", {"t": "cost"})
        counts: list[int] = []
        cursor = None
        for _ in range(pages):
            seen.clear()
            with SQLiteSource(conn, table="t", order_by=["id"]) as source:
                page = paginate(source, scope=scope, cursor=cursor, store=store, limits=limits)
            counts.append(len(seen))
            cursor = page.next_cursor
        return counts, list(seen)


@pytest.mark.parametrize(
    ("ddl", "lookups"),
    [
        ("CREATE TABLE t (id INTEGER PRIMARY KEY, s TEXT)", 0),
        ("CREATE TABLE t (id INT PRIMARY KEY, s TEXT)", 0),  # the key has no NULL here
        ("CREATE TABLE t (id INT, s TEXT)", 1),
    ],
)
def test_regression_sqlite_rowid_check_reads_the_schema_once_a_page(
    tmp_path: Path, ddl: str, lookups: int
) -> None:
    """Found by a sweep (statements counted with set_trace_callback): the check built a
    second plan, cut at 64 bytes, on the first resumed page of each source, repeating
    9 statements that read the schema: 17 became 26 statements a page for an INTEGER
    PRIMARY KEY table that needs no check, 18 became 29 for ``INT PRIMARY KEY``. The
    check reads with the page's own plan: its one lookup by rowid where it is needed,
    nothing else."""
    counts, last = _statements(tmp_path / "c.db", ddl, Limits(2000))
    assert counts[1:] == [counts[0] + lookups] * (len(counts) - 1)
    assert sum('_jb_rowid" =' in s for s in last) == lookups
    assert sum(s.startswith("PRAGMA table_xinfo") for s in last) == 1


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

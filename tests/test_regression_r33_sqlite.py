"""Round 33 regressions, SQLiteSource over real-world SQLite shapes: a schema changed in
place under a long-lived source, names SQLite finds in temp or an attached database,
``detect_types`` converters on every path, and the CLI's read-only cursor store."""

from __future__ import annotations

import contextlib
import datetime as dt
import sqlite3
from pathlib import Path
from typing import Any

import pytest

from jsonbudget import (
    InvalidCursor,
    LimitError,
    Limits,
    MemoryCursorStore,
    Scope,
    SQLiteSource,
    paginate,
)
from jsonbudget._cli import main as cli

SCOPE = Scope("alice", {"table": "t"})


def _page(source: SQLiteSource, store: MemoryCursorStore, cursor: str | None = None) -> Any:
    return paginate(
        source, scope=SCOPE, cursor=cursor, store=store, limits=Limits(4096, max_items=1)
    )


def _all(source: SQLiteSource) -> list[Any]:
    """Every row's ``v``, paged one row a page, and whether the last page was complete."""
    store = MemoryCursorStore()
    page = _page(source, store)
    served = [row["v"] for row in page.items]
    while page.next_cursor:
        page = _page(source, store, page.next_cursor)
        served += [row["v"] for row in page.items]
    assert page.complete
    return served


# -- 1. a schema changed under a long-lived source -----------------------------------------


REBUILD = """
BEGIN;
CREATE TABLE t_new (id INT, v TEXT);
INSERT INTO t_new SELECT * FROM t;
INSERT INTO t_new VALUES (3, 'dup3'), (4, 'dup4'), (5, 'dup5');
DROP TABLE t;
ALTER TABLE t_new RENAME TO t;
COMMIT;
"""

DROP_INDEX = """
BEGIN;
DROP INDEX t_id;
INSERT INTO t VALUES (3, 'dup3'), (4, 'dup4'), (5, 'dup5');
COMMIT;
"""


@pytest.mark.parametrize(
    ("ddl", "change"),
    [
        ("CREATE TABLE t (id INTEGER PRIMARY KEY, v TEXT)", REBUILD),
        (
            "CREATE TABLE t (id INT NOT NULL, v TEXT); CREATE UNIQUE INDEX t_id ON t (id)",
            DROP_INDEX,
        ),
    ],
    ids=["alter-recipe", "drop-index"],
)
def test_regression_sqlite_schema_change_under_a_kept_source_skips_no_rows(
    tmp_path: Path, ddl: str, change: str
) -> None:
    """Found by a tester: one source kept for a server's life learned the table's keys on
    its first page and kept them until the file was replaced. After the table was
    rebuilt (SQLite's ALTER TABLE recipe) or its unique index dropped, with ids
    repeated, the next pages ordered by ``id`` alone: rows tied with a page's last row
    were skipped, and the last page said complete. The plans now follow the schema:
    the old cursor is refused as a fresh source refuses it, and a new listing serves
    every row."""
    path = tmp_path / "app.db"
    writer = sqlite3.connect(path, isolation_level=None)
    with contextlib.closing(writer):
        writer.executescript(ddl)
        writer.executemany("INSERT INTO t VALUES (?, ?)", [(i, f"old{i}") for i in range(6)])
        with SQLiteSource(path, table="t") as source:
            store = MemoryCursorStore()
            first = _page(source, store)
            assert [row["v"] for row in first.items] == ["old0"]
            position = next(source.open(None))[1]
            writer.executescript(change)
            # Said as what happened, not as a garbled cursor.
            with pytest.raises(InvalidCursor, match="changed since the cursor was minted"):
                _page(source, store, first.next_cursor)
            with pytest.raises(InvalidCursor, match="changed since the cursor was minted"):
                next(source.open(position))
            expected = [v for (v,) in writer.execute("SELECT v FROM t ORDER BY id, rowid")]
            assert _all(source) == expected
            assert len(expected) == 9


def test_regression_sqlite_added_column_is_served_by_a_kept_source(tmp_path: Path) -> None:
    """The same cause, milder: a column added in place was never served by the source
    that learned the table before it (a dropped one failed its query)."""
    path = tmp_path / "app.db"
    writer = sqlite3.connect(path, isolation_level=None)
    with contextlib.closing(writer), SQLiteSource(path, table="t") as source:
        writer.execute("CREATE TABLE t (id INTEGER PRIMARY KEY, v TEXT)")
        writer.executemany("INSERT INTO t VALUES (?, ?)", [(i, f"v{i}") for i in range(3)])
        store = MemoryCursorStore()
        page = _page(source, store)
        writer.execute("ALTER TABLE t ADD COLUMN w TEXT DEFAULT 'x'")
        page = _page(source, store, page.next_cursor)
        assert list(page.items) == [{"id": 1, "v": "v1", "w": "x"}]


# -- 2. a name SQLite finds in temp or in an attached database -----------------------------


def test_regression_sqlite_unqualified_name_resolves_as_sqlite_resolves_it(
    tmp_path: Path,
) -> None:
    """Found by a tester: the keys were read from main's catalog only, while the query
    found the name in temp first: a TEMP table (or one only in an attached database)
    named without its schema was refused as having no primary key."""
    conn = sqlite3.connect(tmp_path / "main.db")
    with contextlib.closing(conn):
        conn.execute("ATTACH DATABASE ? AS aux", (str(tmp_path / "aux.db"),))
        conn.execute("CREATE TEMP TABLE tt (id INTEGER PRIMARY KEY, v TEXT)")
        conn.execute("CREATE TEMP TABLE nokey (v TEXT)")
        conn.execute("CREATE TABLE aux.logs (id INTEGER PRIMARY KEY, v TEXT)")
        for table in ("tt", "nokey", "logs"):
            conn.executemany(f"INSERT INTO {table}(v) VALUES (?)", [(f"r{i}",) for i in range(5)])
        for table in ("tt", "nokey", "logs"):
            assert _all(SQLiteSource(conn, table=table)) == [f"r{i}" for i in range(5)]


def test_regression_sqlite_temp_view_over_a_main_table_is_paged_as_the_view(
    tmp_path: Path,
) -> None:
    """Found by a tester: a TEMP VIEW shadowing a main TABLE of its name took the table's
    keys (a rowid appended) for the view's rows (whose rowid is NULL): the first page
    was served, and the source's own cursor refused on the second. The view is what
    the query reads: without a key it is refused before the first page, and with a
    unique order it pages."""
    conn = sqlite3.connect(tmp_path / "main.db")
    with contextlib.closing(conn):
        conn.execute("CREATE TABLE s (id INTEGER PRIMARY KEY, v TEXT)")
        conn.executemany("INSERT INTO s VALUES (?, ?)", [(i, f"row{i}") for i in range(6)])
        conn.execute("CREATE TEMP VIEW s AS SELECT id % 2 AS grp, id, v FROM main.s")
        with pytest.raises(LimitError, match="order_by"):
            _page(SQLiteSource(conn, table="s", order_by=["grp"]), MemoryCursorStore())
        source = SQLiteSource(conn, table="s", order_by=["grp", "id"], unique=True)
        assert _all(source) == [f"row{i}" for i in (0, 2, 4, 1, 3, 5)]


# -- 3. detect_types converters ------------------------------------------------------------


def test_regression_sqlite_converted_columns_are_converted_on_every_path(tmp_path: Path) -> None:
    """Found by a tester: with ``detect_types=PARSE_DECLTYPES`` open() gave a TIMESTAMP
    column as a datetime, but the pages (fill) and open() with max_cell_bytes gave the
    stored text: their cut select wraps each column in a CASE, which has no declared
    type, so sqlite3 applied no converter."""
    path = tmp_path / "conv.db"
    with contextlib.closing(sqlite3.connect(path)) as setup:
        setup.execute("CREATE TABLE t (id INTEGER PRIMARY KEY, ts TIMESTAMP, note TEXT)")
        setup.execute("INSERT INTO t VALUES (1, '2024-01-01 10:00:00', ?)", ("n" * 500,))
        setup.commit()
    conn = sqlite3.connect(path, detect_types=sqlite3.PARSE_DECLTYPES)
    with contextlib.closing(conn):
        expected = dt.datetime(2024, 1, 1, 10, 0)
        assert next(SQLiteSource(conn, table="t").open(None))[0]["ts"] == expected
        cut = next(SQLiteSource(conn, table="t", max_cell_bytes=64).open(None))[0]
        assert cut["ts"] == expected
        assert cut["note"].length == 500  # the other columns are still cut
        page = paginate(
            SQLiteSource(conn, table="t"),
            scope=SCOPE,
            store=MemoryCursorStore(),
            limits=Limits(4096),
        )
        assert page.items[0]["ts"] == expected


# -- 4. the CLI's read-only cursor store ---------------------------------------------------


def test_regression_cli_read_only_store_is_named(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    """Found by a tester: a store that opens but cannot be written gave SQLite's bare
    "attempt to write a readonly database", the message a WAL data file in a read-only
    directory gives too: the user could not tell which file was meant."""
    data = tmp_path / "data.db"
    with contextlib.closing(sqlite3.connect(data)) as setup:
        setup.execute("CREATE TABLE t (id INTEGER PRIMARY KEY)")
        setup.execute("INSERT INTO t VALUES (1)")
        setup.commit()
    store = tmp_path / "cursors.db"

    def read_only(path: str, **_: object) -> None:
        # SQLite's own error for a write to a database opened read-only.
        with contextlib.closing(sqlite3.connect(f"file:{data}?mode=ro", uri=True)) as ro:
            ro.execute("CREATE TABLE x (a)")

    monkeypatch.setattr(cli, "SQLiteCursorStore", read_only)
    code = cli.main(["page", str(data), "--table", "t", "--store", str(store)])
    err = capsys.readouterr().err
    assert code == 1
    assert f"cannot write the cursor store {store}: attempt to write a readonly database" in err

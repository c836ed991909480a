"""An SQLite TEXT value that is not UTF-8 fails only the page that reaches it.

Found by a tester (r19): sqlite3 decodes every row a fetch asks for and drops them all
for one it cannot decode, so a bad row failed pages that never reached it (16 rows
ahead on a first page, the rows of the page before plus two later), and the good rows
before it could never be served: with 14 wide rows before it, none was.
"""

from __future__ import annotations

import contextlib
import sqlite3
import subprocess
import sys
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

from jsonbudget import Clipped, Limits, MemoryCursorStore, Scope, SQLiteSource, paginate
from jsonbudget.errors import DecodeError, LimitError

BAD = "CAST(X'61FF62' AS TEXT)"


def _database(path: Path, good: int, size: int, *, key: str = "") -> None:
    """*good* rows of *size* characters (ids 1 to *good*), one whose text is not UTF-8
    next, then a good one after it."""
    with contextlib.closing(sqlite3.connect(path)) as conn:
        conn.execute("CREATE TABLE t (id INTEGER PRIMARY KEY, k INTEGER, body TEXT)")
        conn.executemany(
            "INSERT INTO t VALUES (?, ?, ?)", [(i, i, "x" * size) for i in range(1, good + 1)]
        )
        conn.execute(f"INSERT INTO t VALUES (?, ?, {BAD})", (good + 1, key or good + 1))
        conn.execute("INSERT INTO t VALUES (?, ?, 'after')", (good + 2, good + 2))
        conn.commit()


@contextlib.contextmanager
def _sources(path: Path, **options: Any) -> Iterator[list[SQLiteSource]]:
    """A source on a connection of the caller's (whose row factory the rows read again
    never go through) and one built from the path."""
    with contextlib.closing(sqlite3.connect(path)) as conn:
        conn.row_factory = sqlite3.Row
        sources = [
            SQLiteSource(conn, table="t", **options),
            SQLiteSource(path, table="t", **options),
        ]
        try:
            yield sources
        finally:
            for source in sources:
                source.close()


def _page_until_error(source: SQLiteSource, limits: Limits) -> tuple[list[int], str | None]:
    """The ids served before the DecodeError, and the cursor of the page that raised it
    (None: the first). Fails if the paging ends without one."""
    store, scope = MemoryCursorStore(), Scope("u", {})
    served: list[int] = []
    cursor = None
    for _ in range(1000):
        try:
            page = paginate(source, scope=scope, cursor=cursor, store=store, limits=limits)
        except DecodeError:
            # Not lost: the same page raises again.
            with pytest.raises(DecodeError, match="column 'body'"):
                paginate(source, scope=scope, cursor=cursor, store=store, limits=limits)
            return served, cursor
        served += [row["id"] for row in page.items]
        assert not page.complete, "the paging ended without reaching the bad row"
        cursor = page.next_cursor
    raise AssertionError("did not terminate")


def _drain(rows: Iterator[tuple[dict[str, Any], Any]], served: list[int]) -> None:
    """Add the ids of *rows* to *served*, up to the end or an error."""
    for row, _ in rows:
        served.append(row["id"])


@pytest.mark.parametrize(
    ("good", "size", "limits", "options"),
    [
        (14, 3000, Limits(1000), {}),  # the tester's: one wide row a page
        (14, 3000, Limits(1000), {"max_cell_bytes": 64}),
        (1, 3000, Limits(1000), {}),
        (100, 3000, Limits(1000), {}),
        (100, 10, Limits(1000), {}),  # short rows: many a page
        (40, 10, Limits(100_000), {}),  # one page holds them all
        (100, 10, Limits(1_000_000, max_items=40), {}),  # a hint: fetches read in steps
        (100, 10, Limits(1000), {"mode": "offset"}),
    ],
)
def test_regression_r19_sqlite_bad_text_fails_only_the_page_that_reaches_it(
    tmp_path: Path, good: int, size: int, limits: Limits, options: dict[str, Any]
) -> None:
    path = tmp_path / "t.db"
    _database(path, good, size)
    with _sources(path, **options) as sources:
        for source in sources:
            served, _ = _page_until_error(source, limits)
            # Every good row before the bad one, once each, in order; the row after it
            # is never served past it.
            assert served == list(range(1, good + 1))


@pytest.mark.parametrize("layout", ["", " WITHOUT ROWID"])
def test_regression_r19_sqlite_bad_text_the_rows_before_it_are_cut(
    tmp_path: Path, layout: str
) -> None:
    """The rows before the bad one, read again, are cut as every page's are: a path
    source reads a table bare (long cells by blob I/O, or, without a rowid, by the cut
    select), and the rows read again after a bare read fell back to the cut select were
    read bare without the length limit, their 3,000-byte cells whole."""
    path = tmp_path / "t.db"
    with contextlib.closing(sqlite3.connect(path)) as conn:
        conn.execute(f"CREATE TABLE t (id INTEGER PRIMARY KEY, body TEXT){layout}")
        conn.executemany("INSERT INTO t VALUES (?, ?)", [(i, "x" * 3000) for i in range(1, 6)])
        conn.execute(f"INSERT INTO t VALUES (6, {BAD})")
        conn.commit()
    with _sources(path, max_cell_bytes=64) as sources:
        for source in sources:
            page = paginate(
                source, scope=Scope("u", {}), store=MemoryCursorStore(), limits=Limits(100_000)
            )
            assert [row["id"] for row in page.items] == [1, 2, 3, 4, 5]
            for row in page.items:
                assert isinstance(row["body"], Clipped)
                assert row["body"].length == 3000


def test_regression_r19_sqlite_bad_text_ends_the_page_before_it(tmp_path: Path) -> None:
    """The page that serves the rows before the bad one ends there, not complete; the
    next page starts with it and raises (it served nothing)."""
    path = tmp_path / "t.db"
    _database(path, 3, 10)
    store, scope = MemoryCursorStore(), Scope("u", {})
    with _sources(path) as sources:
        for source in sources:
            page = paginate(source, scope=scope, store=store, limits=Limits(100_000))
            assert [row["id"] for row in page.items] == [1, 2, 3]
            assert not page.complete
            assert page.next_cursor is not None
            for _ in range(2):
                with pytest.raises(DecodeError, match="not valid UTF-8"):
                    paginate(
                        source,
                        scope=scope,
                        cursor=page.next_cursor,
                        store=store,
                        limits=Limits(100_000),
                    )


@pytest.mark.parametrize("good", [3, 14, 15, 16, 40, 100])
def test_regression_r19_sqlite_bad_text_open_yields_the_rows_before_it(
    tmp_path: Path, good: int
) -> None:
    """open() yields every row before the bad one, then raises at it (with a
    limit_hint, where its query reaches it: it reads the hint's rows and one more)."""
    path = tmp_path / "t.db"
    _database(path, good, 10)
    with _sources(path) as sources:
        for source in sources:
            for hint in (None, 7):
                served: list[int] = []
                it = source.open(None, limit_hint=hint)
                if hint is not None and good > hint:
                    assert [row["id"] for row, _ in it] == list(range(1, hint + 2))
                    continue
                with pytest.raises(DecodeError, match="column 'body'"):
                    _drain(it, served)
                assert served == list(range(1, good + 1))


def test_regression_r19_sqlite_bad_text_open_reads_the_same_rows(tmp_path: Path) -> None:
    """open() reads the rows before the bad one again in the read transaction its
    stopped statement holds: a row another connection commits meanwhile is not
    served twice or in place of another."""
    path = tmp_path / "t.db"
    _database(path, 40, 10)
    with contextlib.closing(sqlite3.connect(path)) as conn:
        conn.execute("PRAGMA journal_mode=WAL")
    with contextlib.closing(sqlite3.connect(path)) as writer, _sources(path) as sources:
        for source in sources:
            served: list[int] = []
            it = source.open(None)
            for row, _ in it:
                served.append(row["id"])
                if len(served) == 16:
                    # Before the next fetch, which meets the bad row.
                    writer.execute("DELETE FROM t WHERE id = 30")
                    writer.execute("INSERT INTO t VALUES (0, 0, 'new')")
                    writer.commit()
                    break
            with pytest.raises(DecodeError):
                _drain(it, served)
            assert served == list(range(1, 41))
            writer.execute("INSERT INTO t VALUES (30, 30, 'x')")
            writer.execute("DELETE FROM t WHERE id = 0")
            writer.commit()


def test_regression_r19_sqlite_bad_text_tied_with_the_page_end_is_not_skipped(
    tmp_path: Path,
) -> None:
    """Under a declared-unique order that is not, the page that ends before the bad row
    checks the ties of its last row: the next page, strictly after it, would skip a
    bad row tied with it (and the rows tied after it) without an error."""
    path = tmp_path / "t.db"
    _database(path, 5, 10, key="5")  # the bad row's k ties with row 5's
    with contextlib.closing(sqlite3.connect(path)) as conn:
        source = SQLiteSource(conn, query="SELECT * FROM t", order_by=["k"], unique=True)
        with pytest.raises(LimitError, match="not unique"):
            _page_until_error(source, Limits(100_000))


def test_regression_r19_sqlite_bad_text_cli_pages_the_rows_before_it(tmp_path: Path) -> None:
    """``jsonbudget page`` served no page of such a table; its message now says what a
    command line user can do (a connection's text_factory is no option there)."""
    path = tmp_path / "t.db"
    _database(path, 14, 3000)
    store = ["--store", str(tmp_path / "cursors.sqlite3")]
    command = [sys.executable, "-m", "jsonbudget", "page", str(path), "--table", "t", *store]
    first = subprocess.run(
        [*command, "--max-bytes", "1000"], capture_output=True, text=True, timeout=60, check=False
    )
    assert first.returncode == 0, first.stderr
    assert '"id":1' in first.stdout
    whole = subprocess.run(
        [*command, "--max-bytes", "100000"], capture_output=True, text=True, timeout=60, check=False
    )
    assert whole.returncode == 0, whole.stderr  # the page of the 14 good rows
    assert '"id":14' in whole.stdout
    assert '"complete":false' in whole.stdout
    cursor = whole.stdout.split('"next_cursor":"')[1].split('"')[0]
    failed = subprocess.run(
        [*command, "--max-bytes", "100000", "--cursor", cursor],
        capture_output=True,
        text=True,
        timeout=60,
        check=False,
    )
    assert failed.returncode == 1
    assert "not valid UTF-8" in failed.stderr
    assert "--query" in failed.stderr


def test_regression_r19_sqlite_bad_text_open_after_own_writes_skips_nothing_unsaid(
    tmp_path: Path,
) -> None:
    # Found by the sweep of this fix: the recovery stepped over the rows it had yielded
    # by count, but a read transaction does not hide the connection's own writes: two
    # rows deleted through it made rows 17 and 18 vanish, with nothing said.
    _database(tmp_path / "w.db", 39, 10)
    conn = sqlite3.connect(tmp_path / "w.db", isolation_level=None)
    served: list[int] = []

    def read_deleting() -> None:
        for row, _ in SQLiteSource(conn, table="t").open(None):
            served.append(row["id"])
            if row["id"] == 1:
                conn.execute("DELETE FROM t WHERE id IN (2, 3)")

    with contextlib.closing(conn), pytest.raises(DecodeError):
        read_deleting()
    assert served == sorted(served)
    assert set(range(1, served[-1] + 1)) - set(served) <= {2, 3}  # only what was deleted
    assert served[-1] < 40

"""`SQLiteSource.close()` while a page, or an `open()` iterator, reads the connection."""

from __future__ import annotations

import contextlib
import sqlite3
from pathlib import Path
from typing import Any

import pytest

from jsonbudget import Limits, PageBuilder, SQLiteSource
from tests.limited import bounded_run

ROWS = 300


def _database(path: Path, n: int = ROWS) -> Path:
    with contextlib.closing(sqlite3.connect(path)) as db:
        db.execute("CREATE TABLE t (id INTEGER PRIMARY KEY, body TEXT)")
        db.executemany("INSERT INTO t VALUES (?, ?)", [(i, "x" * (i % 90)) for i in range(n)])
        db.commit()
    return path


def test_regression_close_from_another_thread_while_paging() -> None:
    """Found by a tester: a close() in another thread closed the connection under the
    statement a page (or an open() step) was running: SIGSEGV, or ProgrammingError,
    InterfaceError or an AssertionError from `_connection` in the paging thread. Each
    round pages chains and steps open() iterators while a thread closes the source."""
    code = """
        import os, sqlite3, sys, tempfile, threading, time
        from jsonbudget import Limits, Paginator, Scope, SQLiteSource

        sys.setswitchinterval(1e-6)
        N = 2000
        path = os.path.join(tempfile.mkdtemp(), "db.sqlite3")
        with sqlite3.connect(path) as db:
            db.execute("create table t (id integer primary key, body text)")
            db.executemany(
                "insert into t values (?, ?)", [(i, "x" * (i % 90)) for i in range(N)]
            )
        db.close()
        for _ in range(3):
            src = SQLiteSource(path, table="t", order_by=("id",))
            pager = Paginator(Limits(1500))
            stop = False
            stepped = []

            def closer():
                while not stop:
                    time.sleep(0.001)
                    src.close()

            def stepper():
                while not stop:
                    it = src.open(None)
                    stepped.append([row["id"] for row, _ in it])
                    it.close()

            threads = [threading.Thread(target=f, daemon=True) for f in (closer, stepper)]
            for t in threads:
                t.start()
            for chain in range(15):
                scope = Scope("alice", {"chain": chain})
                page = pager.paginate(src, scope=scope)
                got = [row["id"] for row in page.items]
                while page.next_cursor:
                    page = pager.paginate(src, scope=scope, cursor=page.next_cursor)
                    got += [row["id"] for row in page.items]
                assert got == list(range(N)), (chain, len(got))
            stop = True
            for t in threads:
                t.join()
            assert stepped and all(ids == list(range(N)) for ids in stepped)
            src.close()
        print("survived")
    """
    assert bounded_run(code, timeout=240).strip() == "survived"


def test_regression_close_while_an_open_iterator_is_held(tmp_path: Path) -> None:
    """A close() while an open() iterator was held closed the connection it read: its next
    step raised sqlite3's ProgrammingError. The iterator serves its remaining rows, the
    connection closes with it, and a page after close() opens the path again."""
    source = SQLiteSource(_database(tmp_path / "db.sqlite3"), table="t", batch_size=10)
    it = source.open(None)
    ids = [row["id"] for row, _ in (next(it), next(it))]
    held = source._own
    assert held is not None
    source.close()
    # A page between the iterator's steps: the path opened again.
    assert [row["id"] for row, _ in source.open(None, limit_hint=3)] == [0, 1, 2, 3]
    assert source._own is not None
    assert source._own is not held
    for row, _ in it:
        ids.append(row["id"])
        if row["id"] == 150:
            source.close()  # from the loop that reads it, too
        assert held.total_changes == 0  # open while the iterator reads it
    assert ids == list(range(ROWS))
    with pytest.raises(sqlite3.ProgrammingError, match="closed"):
        held.total_changes  # noqa: B018  # closed with its last reader, the iterator
    source.close()


class _Closes:
    """A page builder that closes *source* when the page hands it its first rows."""

    def __init__(self, source: SQLiteSource, limits: Limits) -> None:
        self.source, self.builder, self.closed = source, PageBuilder(limits), False

    def fill_from(self, seq: list[Any], start: int = 0) -> tuple[bool, int]:
        if not self.closed:
            self.closed = True
            self.source.close()
        return self.builder.fill_from(seq, start)


def test_regression_close_from_inside_a_page(tmp_path: Path) -> None:
    """A close() from code the page calls (its builder) closed the connection under the
    page's own statement: its next fetch raised ProgrammingError. The page ends on it."""
    path = _database(tmp_path / "db.sqlite3")
    for cells in (None, 64):  # cells read bare under a length limit, and cut by the query
        source = SQLiteSource(path, table="t", batch_size=5, max_cell_bytes=cells)
        limits = Limits(4000, max_items=40)
        filler = _Closes(source, limits)
        more, after = source.fill(filler, None, limit_hint=limits.max_items)
        page = filler.builder.finish(complete=not more, next_cursor=None)
        assert filler.closed
        assert more
        assert [row["id"] for row in page.items] == list(range(40))
        assert source._own is None  # closed, and not opened again by the page
        more, _ = source.fill(PageBuilder(limits), after, limit_hint=limits.max_items)
        assert more
        assert source._own is not None
        source.close()

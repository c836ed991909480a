"""`SQLiteSource.close()` while a page, or an `open()` iterator, reads the connection."""

from __future__ import annotations

import contextlib
import sqlite3
import threading
from collections.abc import Iterator
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


def test_regression_close_from_another_thread_while_paging(tmp_path: Path) -> None:
    """Found by a tester: a close() in another thread closed the connection under the
    statement a page (or an open() step) was running: SIGSEGV, or ProgrammingError,
    InterfaceError or an AssertionError from `_connection` in the paging thread. Each
    round pages chains and steps open() iterators while a thread closes the source."""
    code = f"""
        import sqlite3, sys, threading, time
        from jsonbudget import Limits, Paginator, Scope, SQLiteSource

        sys.setswitchinterval(1e-6)
        N = 2000
        path = {str(tmp_path / "db.sqlite3")!r}
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
                scope = Scope("alice", {{"chain": chain}})
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


def test_regression_interrupt_reaches_an_iterator_kept_after_close(tmp_path: Path) -> None:
    """interrupt() reached only the connection the source held: an open() iterator that
    kept reading its own after close() ran its query to the end (22 s in the report)."""
    path = tmp_path / "slow.sqlite3"
    with contextlib.closing(sqlite3.connect(path)) as db:
        db.execute("create table t (id integer primary key)")
        db.executemany("insert into t values (?)", [(i,) for i in range(1, 7)])
        db.commit()
    # Each step reads one row ahead: the fifth meets row 6, whose condition counts up to
    # 50 million first, a long step; the four before it are quick.
    slow = (
        "SELECT id FROM t WHERE id <= 5 OR (WITH RECURSIVE c(x) AS (SELECT 1 UNION ALL"
        " SELECT x + 1 FROM c WHERE x < 50000000) SELECT max(x) FROM c) > 0"
    )
    source = SQLiteSource(str(path), query=slow, order_by=("id",), unique=True, batch_size=1)
    it = source.open(None)
    assert [next(it)[0]["id"] for _ in range(4)] == [1, 2, 3, 4]
    source.close()
    got: list[object] = []
    step = threading.Thread(target=lambda: got.append(_step(it)), daemon=True)
    step.start()
    while step.is_alive() and not got:
        source.interrupt()  # until the step's statement runs and is stopped
        step.join(0.05)
    step.join(120)
    assert got
    assert isinstance(got[0], sqlite3.OperationalError), got
    assert "interrupted" in str(got[0])
    it.close()  # its connection closes now, not whenever the collector finds it


def _step(it: Iterator[Any]) -> object:
    try:
        return next(it)
    except sqlite3.OperationalError as exc:
        return exc


def test_regression_interrupt_meets_a_connection_closed_by_its_last_reader(
    tmp_path: Path,
) -> None:
    """Found by a sweep: a connection's `_Closing.__del__` closes it before the weak
    reference `interrupt` follows is cleared, so a watchdog's interrupt() raised
    ProgrammingError ("Cannot operate on a closed database") within seconds."""
    code = f"""
        import sqlite3, sys, threading, time
        from jsonbudget import SQLiteSource

        sys.setswitchinterval(1e-6)
        path = {str(tmp_path / "db.sqlite3")!r}
        with sqlite3.connect(path) as db:
            db.execute("create table t (id integer primary key)")
            db.executemany("insert into t values (?)", [(i,) for i in range(100)])
        db.close()
        src = SQLiteSource(path, table="t", order_by=("id",))
        stop = False

        def churn():
            while not stop:
                try:
                    it = src.open(None)
                    next(it)
                except sqlite3.OperationalError:
                    continue  # interrupted: what interrupt() is for
                src.close()
                del it  # its last reader gone, the connection closes

        t = threading.Thread(target=churn)
        t.start()
        calls, deadline = 0, time.monotonic() + 5
        try:
            while time.monotonic() < deadline:
                src.interrupt()
                calls += 1
        finally:
            stop = True
            t.join()
        print(calls > 0)
    """
    assert bounded_run(code, timeout=120).strip() == "True"

"""Regressions a security review of a multi-user tool server caught."""

from __future__ import annotations

import os
import sqlite3
import threading
from pathlib import Path

import pytest

from jsonbudget import CursorError, Limits, MemoryCursorStore, Scope, SQLiteSource, paginate


def test_regression_a_moved_row_error_quoted_the_positions_rowid(tmp_path: Path) -> None:
    # The rowid is part of the stored position, never in a row served: cursor errors
    # reach the client (MCP sends the message) and must not quote a position.
    path = tmp_path / "t.db"
    with sqlite3.connect(path) as conn:
        conn.execute("CREATE TABLE t (name TEXT, v TEXT)")  # no key: the rowid breaks ties
        conn.executemany("INSERT INTO t VALUES (?, ?)", [(f"n{i}", "x") for i in range(10)])
        conn.execute("UPDATE t SET rowid = rowid + 1000000")
    conn.close()
    store, scope = MemoryCursorStore(), Scope("alice", {"t": 1})
    limits = Limits(2000, max_items=3)
    with SQLiteSource(path, table="t") as source:
        page = paginate(source, scope=scope, store=store, limits=limits)
        assert page.next_cursor is not None
        with sqlite3.connect(path) as conn:
            conn.execute("UPDATE t SET v = 'changed' WHERE name = 'n2'")
        conn.close()
        with pytest.raises(CursorError, match="no longer at its rowid") as caught:
            paginate(source, scope=scope, store=store, limits=limits, cursor=page.next_cursor)
    assert "1000003" not in str(caught.value)
    assert not any(ch.isdigit() for ch in str(caught.value))


def test_regression_sqlite_source_on_a_fifo_waited_forever(tmp_path: Path) -> None:
    # A database path a client gave a tool: SQLite's open() of a FIFO waits for a writer,
    # and every such call held a worker thread for good.
    fifo = tmp_path / "db.sqlite"
    os.mkfifo(fifo)
    outcome: list[BaseException] = []

    def page() -> None:
        try:
            with SQLiteSource(fifo, table="t") as source:
                paginate(
                    source, scope=Scope("a", {}), store=MemoryCursorStore(), limits=Limits(1000)
                )
        except sqlite3.OperationalError as exc:
            outcome.append(exc)

    thread = threading.Thread(target=page, daemon=True)
    thread.start()
    thread.join(30)
    if thread.is_alive():
        os.close(os.open(fifo, os.O_WRONLY | os.O_NONBLOCK))  # lets the open go
        pytest.fail("the page of a FIFO waited for a writer")
    assert len(outcome) == 1
    assert "is not a regular file" in str(outcome[0])

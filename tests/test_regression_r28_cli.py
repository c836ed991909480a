"""r28: a Ctrl-C that came just before the CLI's SQLite query started left that query
running for good (CI's test of Ctrl-C, under load, waited 30 s for it)."""

from __future__ import annotations

import contextlib
import sqlite3
from pathlib import Path

from tests.limited import run_limited


def test_regression_ctrl_c_before_the_query_started_was_lost(tmp_path: Path) -> None:
    db = tmp_path / "slow.sqlite3"
    with contextlib.closing(sqlite3.connect(db)) as setup:
        setup.execute("CREATE TABLE t (id INTEGER PRIMARY KEY)")
    done = run_limited(
        f"""
        import os, signal, sqlite3, time
        from jsonbudget import SQLiteSource
        from jsonbudget._cli.main import _interruptible

        # The handler runs late, as when SQLite took over before the interpreter ran it:
        # only the wakeup fd the command watches tells of the signal.
        signal.signal(signal.SIGINT, lambda *_: None)
        endless = (
            "WITH RECURSIVE c(x) AS (SELECT 1 UNION ALL SELECT x + 1 FROM c)"
            " SELECT x AS id FROM c WHERE x < 0"
        )
        source = SQLiteSource({str(db)!r}, query=endless, order_by=["id"], unique=True)
        with _interruptible(source):
            os.kill(os.getpid(), signal.SIGINT)
            time.sleep(0.5)  # its watcher interrupted a connection running nothing
            try:
                next(source.open(None))
            except sqlite3.OperationalError as exc:
                print(exc)
        source.close()
        """,
        timeout=20,
    )
    assert done.returncode == 0, done.stderr
    assert done.stdout.split() == ["interrupted"]

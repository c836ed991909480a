"""The demo end to end: every row once, the huge row oversized, every page within budget."""

from __future__ import annotations

import os
import re
import sqlite3
import subprocess
import sys
from pathlib import Path
from typing import Any

import orjson
import pytest

from jsonbudget._cli.demo import Demo, make_demo_database, run_demo
from jsonbudget._cli.main import EXIT_OK, EXIT_USAGE, main
from jsonbudget.errors import LimitError

ROOT = Path(__file__).resolve().parent.parent
ENV = {**os.environ, "PYTHONPATH": str(ROOT / "src")}


def check_report(report: dict[str, Any]) -> None:
    """The consistency a reader of the demo relies on."""
    pages = report["pages"]
    assert sum(p["items"] for p in pages) == report["rows"]
    ids: list[int] = []
    for p in pages:
        assert p["bytes"] <= report["max_bytes"]
        ids.extend(range(p["first_id"], p["last_id"] + 1))
    assert ids == list(range(1, report["rows"] + 1))
    assert report["every_row_once_in_order"] is True
    assert [p["complete"] for p in pages] == [False] * (len(pages) - 1) + [True]
    huge = [o for p in pages for o in p["oversized"]]
    assert huge == [
        {"id": report["huge_id"], "index": 0, "encoded_bytes": None, "outcome": "truncated"}
    ]
    assert report["huge_outcome"] == "truncated"
    assert report["refused"].startswith("CursorScopeError: ")
    assert report["budget_page"]["incomplete_reason"] == "budget_exhausted"
    assert any(r["id"] == report["huge_id"] for r in report["huge_page"]["items"])
    first = report["first_page"]
    assert [row["id"] for row in first["items"]] == list(
        range(pages[0]["first_id"], pages[0]["last_id"] + 1)
    )


def test_demo_database_is_realistic(tmp_path: Path) -> None:
    path = tmp_path / "t.sqlite3"
    huge_id = make_demo_database(path, rows=30, huge_bytes=100_000)
    conn = sqlite3.connect(path)
    try:
        count, longest, multibyte = conn.execute(
            "SELECT count(*), max(length(notes)), sum(length(CAST(notes AS BLOB)) > length(notes))"
            " FROM tickets"
        ).fetchone()
        (attachment,) = conn.execute(
            "SELECT length(attachment) FROM tickets WHERE id = ?", (huge_id,)
        ).fetchone()
        others = conn.execute("SELECT count(attachment) FROM tickets").fetchone()[0]
    finally:
        conn.close()
    assert count == 30
    assert 200 <= longest <= 4000
    assert multibyte == 30  # every note has multibyte characters
    assert attachment == 100_000
    assert others == 1
    with pytest.raises(FileExistsError):
        make_demo_database(path)


def test_run_demo_in_process(tmp_path: Path) -> None:
    seen: list[int] = []
    report = run_demo(
        tmp_path,
        rows=40,
        max_bytes=8192,
        huge_bytes=500_000,
        on_page=lambda p: seen.append(p.number),
    )
    assert seen == list(range(1, len(report.pages) + 1))
    check_report(report.to_dict())
    assert len(report.first_page) == report.pages[0].bytes
    assert Path(report.store).is_file()  # the durable store really was used


def test_demo_refuses_bad_options() -> None:
    with pytest.raises(LimitError, match="max_bytes"):
        Demo(max_bytes=10)
    with pytest.raises(LimitError, match="rows"):
        Demo(rows=0)


def test_cli_demo_json(capsys: pytest.CaptureFixture[str]) -> None:
    assert main(["demo", "--json", "--rows", "60", "--max-bytes", "12K"]) == EXIT_OK
    report = orjson.loads(capsys.readouterr().out)
    assert report["rows"] == 60
    assert report["max_bytes"] == 12288
    assert report["kept"] is False
    assert not os.path.exists(report["database"])  # the temporary directory is gone
    check_report(report)


def test_cli_demo_keeps_files_in_dir(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    target = tmp_path / "demo"
    assert main(["demo", "--dir", str(target), "--rows", "20"]) == EXIT_OK
    out = capsys.readouterr().out
    assert (target / "tickets.sqlite3").is_file()
    assert f"Kept: {target / 'tickets.sqlite3'}" in out
    assert main(["demo", "--dir", str(target)]) == EXIT_USAGE
    assert capsys.readouterr().err == f"jsonbudget: error: --dir {target} is not empty\n"
    # Regression: a file in its place was an I/O error (exit 1), not a usage error.
    assert main(["demo", "--dir", str(target / "tickets.sqlite3")]) == EXIT_USAGE
    err = capsys.readouterr().err
    assert err == f"jsonbudget: error: --dir {target / 'tickets.sqlite3'} is not a directory\n"


def test_demo_subprocess_default() -> None:
    cp = subprocess.run(
        [sys.executable, "-m", "jsonbudget", "demo"],
        capture_output=True,
        env=ENV,
        timeout=120,
        check=False,
    )
    assert cp.returncode == 0, cp.stderr
    out = cp.stdout.decode()
    lines = out.splitlines()
    assert out.startswith("Demo: 200 support tickets in SQLite")
    assert len(lines) <= 24  # one screen
    # The five points, each from the real run: a cut field with its marker, the
    # oversized outcome, an envelope, a refused cursor, the operation budget running out.
    assert re.search(r'attachment: ".*…\[truncated: \d+ more bytes\]"$', out, re.MULTILINE)
    assert '"outcome":"truncated"' in out
    assert re.search(r'\{"items":\["⋯"\],"complete":false,"next_cursor":"', out)
    assert "CursorScopeError: the cursor was issued to another principal" in out
    assert '{"complete":false,"next_cursor":null,"incomplete_reason":"budget_exhausted"}' in out
    assert lines[-1].startswith("200 rows served in 44 pages")
    assert lines[-1].endswith("every row once, in order: yes.")
    assert cp.stderr == b""  # no progress bar without a terminal


def test_demo_one_row_says_row_not_rows(capsys: pytest.CaptureFixture[str]) -> None:
    assert main(["demo", "--rows", "1"]) == EXIT_OK
    out = capsys.readouterr().out
    assert out.startswith("Demo: 1 support ticket in SQLite")
    assert "1 row served in 1 page," in out
    assert "(one page only: no cursor to refuse)" in out


def test_demo_subprocess_json() -> None:
    cp = subprocess.run(
        [sys.executable, "-m", "jsonbudget", "demo", "--json"],
        capture_output=True,
        env=ENV,
        timeout=120,
        check=False,
    )
    assert cp.returncode == 0
    report = orjson.loads(cp.stdout)
    assert report["rows"] == 200
    assert report["max_bytes"] == 16384
    check_report(report)


@pytest.mark.parametrize("budget", ["342", "500", "650", "700"])
def test_regression_the_demo_screen_at_the_smallest_budgets(
    budget: str, capsys: pytest.CaptureFixture[str]
) -> None:
    # Below about 700 bytes the large ticket's attachment is cut away (or the ticket is
    # a marker), and the screen raised KeyError or TypeError looking for the field.
    assert main(["demo", "--rows", "5", "--max-bytes", budget]) == EXIT_OK
    out = capsys.readouterr().out
    assert "attachment: " in out
    assert "every row once, in order: yes" in out


def test_regression_an_attachment_sqlite_cannot_hold_is_a_usage_error(tmp_path: Path) -> None:
    """Found by a tester: --huge-bytes took up to 1 GiB, and from 10**9 bytes on SQLite
    refused the row after about 2 GB were built ("string or blob too big", exit 1),
    leaving a half-made database in --dir."""
    done = subprocess.run(
        [sys.executable, "-m", "jsonbudget", "demo", "--huge-bytes", "1G", "--dir",
         str(tmp_path / "d")],
        capture_output=True, env=ENV, timeout=60, check=False,
    )  # fmt: skip
    assert done.returncode == 2
    assert b"huge" in done.stderr
    assert b"Traceback" not in done.stderr
    assert not (tmp_path / "d").exists() or not any((tmp_path / "d").iterdir())

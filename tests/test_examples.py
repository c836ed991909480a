"""Every example in examples/ runs as `python examples/<name>.py` and says what it should."""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parent.parent
EXAMPLES = ROOT / "examples"
ENV = {**os.environ, "PYTHONPATH": str(ROOT / "src")}


def run_example(name: str, *args: str) -> list[str]:
    cp = subprocess.run(
        [sys.executable, str(EXAMPLES / name), *args],
        capture_output=True,
        env=ENV,
        cwd=ROOT,
        timeout=120,
        check=False,
    )
    assert cp.returncode == 0, cp.stderr.decode()
    assert cp.stderr == b""
    return cp.stdout.decode().splitlines()


def test_bounded_tool() -> None:
    lines = run_example("bounded_tool.py")
    size, budget = lines[0].split(" bytes (budget ")
    assert int(size) <= int(budget.rstrip(")")) == 2048
    assert lines[1].startswith("hits kept: ")
    assert lines[2].startswith("last element: …[omitted: ")
    assert lines[3].endswith("more chars]'")
    assert lines[4].startswith("cut at /hits/")


def test_page_rows() -> None:
    lines = run_example("page_rows.py")
    assert lines[0] == "page 8: row 42 oversized -> truncated"
    assert lines[1] == "100 rows in 16 pages; every row once, in order: True"
    assert lines[2].startswith("PageBuilder: ")


def test_tune_limits(tmp_path: Path) -> None:
    chart = tmp_path / "chart.png"
    lines = run_example("tune_limits.py", str(chart))
    assert lines[0].startswith("items: p50=")
    assert lines[-2] == "recommended max_bytes: 65536"
    assert chart.read_bytes().startswith(b"\x89PNG\r\n\x1a\n")


def test_every_example_is_tested() -> None:
    tested = {"bounded_tool.py", "page_rows.py", "tune_limits.py", "mcp_server.py"}
    assert {p.name for p in EXAMPLES.glob("*.py")} == tested


@pytest.mark.parametrize("flag", ["--help"])
def test_mcp_server_example_cli(flag: str) -> None:
    # The server itself is driven by the real MCP client in tests/test_mcp.py.
    lines = run_example("mcp_server.py", flag)
    assert lines[0].startswith("usage: mcp_server.py")


def test_mcp_server_sample_database_pages_with_the_attachment_cut(tmp_path: Path) -> None:
    # The example makes its own sample data when run without --db.
    import importlib.util

    from jsonbudget import Limits, MemoryCursorStore, Scope, SQLiteSource, paginate

    spec = importlib.util.spec_from_file_location("mcp_server_sample", EXAMPLES / "mcp_server.py")
    assert spec is not None
    assert spec.loader is not None
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    db = str(tmp_path / "tickets.sqlite3")
    module.make_sample_database(db, rows=40)
    store, scope, cursor = MemoryCursorStore(), Scope("u"), None
    ids: list[int] = []
    cuts = []
    while True:
        source = SQLiteSource(db, table="tickets", order_by=["id"])
        page = paginate(source, scope=scope, cursor=cursor, store=store, limits=Limits(16384))
        assert len(page.data) <= 16384
        ids += [row["id"] for row in page.items]
        cuts += [t for t in page.truncations if t.kind == "string"]
        if page.complete:
            break
        cursor = page.next_cursor
    assert ids == list(range(1, 41))
    assert any(t.path.endswith("/attachment") for t in cuts)

"""The ``jsonbudget`` command: in-process (``main([...])``) and as a subprocess."""

from __future__ import annotations

import contextlib
import gzip
import json
import os
import signal
import sqlite3
import subprocess
import sys
import threading
import time
from pathlib import Path
from typing import Any, ClassVar, SupportsIndex, overload

import orjson
import pytest

from jsonbudget._cli.main import (
    EXIT_CURSOR,
    EXIT_ERROR,
    EXIT_INTERRUPTED,
    EXIT_OK,
    EXIT_USAGE,
    default_store_path,
    main,
    parse_size,
)

ROOT = Path(__file__).resolve().parent.parent
ENV = {**os.environ, "PYTHONPATH": str(ROOT / "src")}


def run(*args: str, stdin: bytes | None = None, env: dict[str, str] | None = None) -> Any:
    return subprocess.run(
        [sys.executable, "-m", "jsonbudget", *args],
        input=stdin,
        capture_output=True,
        env=env or ENV,
        timeout=120,
        check=False,
    )


@pytest.fixture
def items_file(tmp_path: Path) -> Path:
    path = tmp_path / "items.json"
    path.write_text(json.dumps([{"id": i, "text": "grüß " * (i % 30)} for i in range(300)]))
    return path


@pytest.fixture
def tickets_db(tmp_path: Path) -> Path:
    path = tmp_path / "t.sqlite3"
    conn = sqlite3.connect(path)
    conn.execute("CREATE TABLE t (id INTEGER PRIMARY KEY, status TEXT, body TEXT)")
    conn.executemany(
        "INSERT INTO t VALUES (?, ?, ?)",
        [(i, "open" if i % 3 else "closed", "ü" * (i * 7)) for i in range(1, 121)],
    )
    conn.commit()
    conn.close()
    return path


def page_all(capsys: pytest.CaptureFixture[str], args: list[str], max_bytes: int) -> list[Any]:
    """Follow the cursor through `page` calls; check each envelope's size; return items."""
    items: list[Any] = []
    cursor: str | None = None
    for _ in range(1000):
        extra = ["--cursor", cursor] if cursor else []
        assert main([*args, "--max-bytes", str(max_bytes), *extra]) == EXIT_OK
        out = capsys.readouterr().out
        assert out.endswith("\n")
        assert len(out[:-1].encode()) <= max_bytes
        env = orjson.loads(out)
        items.extend(env["items"])
        cursor = env["next_cursor"]
        if cursor is None:
            assert env["complete"] is True
            return items
    raise AssertionError("pagination did not end")


# -- sizes and helpers ---------------------------------------------------------------


@pytest.mark.parametrize(
    ("text", "value"),
    [
        ("100", 100),
        ("4K", 4096),
        ("4kib", 4096),
        ("1M", 1 << 20),
        ("2MiB", 2 << 20),
        ("1G", 1 << 30),
    ],
)
def test_parse_size(text: str, value: int) -> None:
    assert parse_size(text) == value


def test_default_store_path_follows_xdg(monkeypatch: pytest.MonkeyPatch, tmp_path: Path) -> None:
    monkeypatch.setenv("XDG_CACHE_HOME", str(tmp_path))
    assert default_store_path() == str(tmp_path / "jsonbudget" / "cursors.sqlite3")
    monkeypatch.delenv("XDG_CACHE_HOME")
    monkeypatch.setenv("HOME", str(tmp_path / "home"))
    assert default_store_path() == str(
        tmp_path / "home" / ".cache" / "jsonbudget" / "cursors.sqlite3"
    )


# -- dump ----------------------------------------------------------------------------


def test_dump_small_file_is_passed_whole(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    path = tmp_path / "a.json"
    path.write_text('{"b": [1, 2.5, null, true], "a": "ü"}')
    assert main(["dump", str(path)]) == EXIT_OK
    assert capsys.readouterr().out == '{"b":[1,2.5,null,true],"a":"ü"}\n'


def test_dump_cuts_and_reports(items_file: Path, capsys: pytest.CaptureFixture[str]) -> None:
    assert main(["dump", str(items_file), "--max-bytes", "1K", "--report"]) == EXIT_OK
    cap = capsys.readouterr()
    data = cap.out[:-1].encode()
    assert len(data) <= 1024
    doc = orjson.loads(data)
    assert doc[-1].startswith("…[omitted: ")
    kept = len(doc) - 1
    lines = cap.err.splitlines()
    assert lines[0] == f"jsonbudget: {len(data)} bytes, 1 cut"
    # A streamed array's length is unknown: the marker says "more".
    assert lines[1:] == [f"  /{kept}\titems\tmore items"]


def test_regression_the_report_tells_the_root_from_the_member_named_empty() -> None:
    # Both printed "/": a cut top-level string and a cut value under the key "".
    root = run("dump", "--max-bytes", "64", "--report", stdin=b'"' + b"x" * 500 + b'"')
    member = run("dump", "--max-bytes", "64", "--report", stdin=b'{"": "' + b"x" * 500 + b'"}')
    assert root.stderr.splitlines()[1] == b'  ""\tstring\t468 chars'
    assert member.stderr.splitlines()[1] == b"  /\tstring\t473 chars"


def test_regression_the_report_escapes_pointers_that_would_break_its_lines() -> None:
    # A key's line break split a cut's line in two, and an escape sequence in a key
    # (clear the screen, set the title) reached the terminal as it was.
    keys = ["a\nb", "t\tab", "\x1b[2J", "\x9b1m", 'q"', "b\\", "plain"]
    doc = dict.fromkeys(keys, "x" * 500)
    out = run("dump", "--max-bytes", "400", "--report", stdin=json.dumps(doc).encode())
    lines = out.stderr.decode().splitlines()[1:]
    assert lines, out.stderr
    shown = {}
    for line in lines:
        where, kind, _ = line.strip().split("\t")
        assert not any(ord(c) < 0x20 or 0x7F <= ord(c) <= 0x9F for c in where)
        shown[json.loads(where) if where.startswith('"') else where] = kind
    for key in shown:
        assert key.startswith("/")
        assert key[1:] in keys


@pytest.mark.parametrize("encoding", ["latin-1", "ascii", "ascii:surrogateescape"])
def test_regression_tune_and_demo_finish_on_a_stdout_that_is_not_utf8(
    items_file: Path, encoding: str
) -> None:
    # The tables' "←" and rich's "⋯" could not be encoded: exit 1 midway, no
    # recommendation printed.
    env = {**ENV, "PYTHONIOENCODING": encoding}
    tune = run("tune", str(items_file), env=env)
    assert tune.returncode == 0, tune.stderr
    assert b"Recommended: --max-bytes" in tune.stdout
    demo = run("demo", "--rows", "10", "-q", env=env)
    assert demo.returncode == 0, demo.stderr
    assert b"every row once, in order: yes" in demo.stdout


def test_dump_report_json(items_file: Path, capsys: pytest.CaptureFixture[str]) -> None:
    assert main(["dump", str(items_file), "--max-bytes", "1K", "--report", "--json"]) == 0
    cap = capsys.readouterr()
    report = orjson.loads(cap.err)
    assert report["bytes"] == len(cap.out[:-1].encode())
    assert report["complete"] is False
    assert report["truncations"][0]["kind"] == "items"


def test_dump_max_field_bytes_and_structured_markers(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    path = tmp_path / "a.json"
    path.write_text(json.dumps({"note": "x" * 500}))
    args = ["dump", str(path), "--max-field-bytes", "64", "--markers", "structured"]
    assert main(args) == EXIT_OK
    doc = orjson.loads(capsys.readouterr().out)
    assert doc["note"]["$truncated"]["kind"] == "string"


def test_dump_jsonl_by_extension_and_flag(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    path = tmp_path / "rows.ndjson"
    path.write_text('{"id": 1}\n\n{"id": 2}\r\n{"id": 123456789012345678901234567890}\n')
    assert main(["dump", str(path)]) == EXIT_OK
    out = capsys.readouterr().out
    # integers beyond 64 bits are not silently made floats: the encoder marks them
    doc = orjson.loads(out)
    assert doc[:2] == [{"id": 1}, {"id": 2}]
    assert doc[2]["id"].startswith("…[unencodable")
    other = tmp_path / "rows.txt"
    other.write_text('{"id": 1}\n{"id": 2}\n')
    assert main(["dump", "--jsonl", str(other)]) == EXIT_OK
    assert capsys.readouterr().out == '[{"id":1},{"id":2}]\n'


def test_dump_jsonl_bad_line_is_one_clear_line(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    path = tmp_path / "rows.jsonl"
    path.write_text('{"id": 1}\n{"id": \n')
    assert main(["dump", str(path)]) == EXIT_ERROR
    err = capsys.readouterr().err
    assert err.startswith("jsonbudget: error: line at byte 10: invalid JSON: ")
    assert err.count("\n") == 1


def test_dump_invalid_json(
    capsys: pytest.CaptureFixture[str], monkeypatch: pytest.MonkeyPatch
) -> None:
    cp = run("dump", stdin=b"[1, 2")
    assert cp.returncode == EXIT_ERROR
    assert cp.stdout == b""
    assert cp.stderr.decode() == (
        "jsonbudget: error: invalid JSON: the input ends inside the array (at decoded byte 5)\n"
    )


def test_dump_empty_input() -> None:
    cp = run("dump", stdin=b"  \n")
    assert cp.returncode == EXIT_ERROR
    assert cp.stderr.decode() == "jsonbudget: error: the input is empty (at decoded byte 3)\n"


def test_dump_bom_and_scalar_on_stdin() -> None:
    cp = run("dump", stdin=b'\xef\xbb\xbf "h\xc3\xa9"')
    assert cp.returncode == EXIT_OK
    assert cp.stdout == '"hé"\n'.encode()


def test_dump_bad_limit_is_a_usage_error(
    items_file: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    assert main(["dump", str(items_file), "--max-bytes", "10"]) == EXIT_USAGE
    assert capsys.readouterr().err == (
        "jsonbudget: error: max_bytes=10 is invalid: must be at least 64\n"
    )


def test_dump_missing_file(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    missing = tmp_path / "nope.json"
    assert main(["dump", str(missing)]) == EXIT_ERROR
    assert capsys.readouterr().err == f"jsonbudget: error: No such file or directory: {missing}\n"


def test_usage_errors_exit_2(capsys: pytest.CaptureFixture[str]) -> None:
    assert main(["dump", "--max-bytes", "lots"]) == EXIT_USAGE
    assert "argument --max-bytes: 'lots' is not a size" in capsys.readouterr().err
    assert main([]) == EXIT_USAGE
    assert main(["frobnicate"]) == EXIT_USAGE


def test_dump_streams_an_endless_array_from_stdin() -> None:
    """Regression guard for "large files streamed": stdin never closes, dump still ends."""
    proc = subprocess.Popen(
        [sys.executable, "-m", "jsonbudget", "dump", "--max-bytes", "200"],
        stdin=subprocess.PIPE,
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        env=ENV,
    )
    assert proc.stdin is not None

    def feed() -> None:
        assert proc.stdin is not None
        try:
            proc.stdin.write(b"[")
            for _ in range(2000):  # 8 MB, far past the budget; never closed
                proc.stdin.write(b'"abc",' * 1000)
        except (BrokenPipeError, ValueError):
            pass  # the process stopped reading: exactly what streaming means

    writer = threading.Thread(target=feed, daemon=True)
    writer.start()
    try:
        code = proc.wait(timeout=60)
        out = proc.stdout.read() if proc.stdout else b""
    finally:
        proc.kill()
        if proc.stdin:
            with contextlib.suppress(BrokenPipeError):
                proc.stdin.close()
    assert code == EXIT_OK
    doc = orjson.loads(out)
    assert len(out) - 1 <= 200
    assert doc[-1] == "…[omitted: more items]"
    assert set(doc[:-1]) == {"abc"}


def test_dump_object_larger_than_load_limit_is_refused(
    tmp_path: Path, capsys: pytest.CaptureFixture[str], monkeypatch: pytest.MonkeyPatch
) -> None:
    import jsonbudget._cli.main as cli

    monkeypatch.setattr(cli, "MAX_LOAD_BYTES", 1000)
    path = tmp_path / "big.json"
    path.write_text(json.dumps({"a": "x" * 200_000}))
    assert main(["dump", str(path)]) == EXIT_ERROR
    err = capsys.readouterr().err
    assert err.startswith("jsonbudget: error: a top-level value that is not an array is loaded")


# -- page ----------------------------------------------------------------------------


def test_page_json_file_reassembles(
    items_file: Path, tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    store = str(tmp_path / "c.sqlite3")
    items = page_all(capsys, ["page", str(items_file), "--store", store], 2048)
    assert [it["id"] for it in items] == list(range(300))


def test_page_jsonl_and_default_store(
    tmp_path: Path, capsys: pytest.CaptureFixture[str], monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setenv("XDG_CACHE_HOME", str(tmp_path / "cache"))
    path = tmp_path / "rows.jsonl"
    path.write_text("".join(json.dumps({"n": i, "s": "é" * i}) + "\n" for i in range(60)))
    items = page_all(capsys, ["page", str(path)], 1024)
    assert [it["n"] for it in items] == list(range(60))
    store = tmp_path / "cache" / "jsonbudget" / "cursors.sqlite3"
    assert store.is_file()
    assert (store.parent.stat().st_mode & 0o777) == 0o700


def test_page_sqlite_table_and_query(
    tickets_db: Path, tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    store = ["--store", str(tmp_path / "c.sqlite3")]
    rows = page_all(capsys, ["page", str(tickets_db), "--table", "t", *store], 4096)
    assert [r["id"] for r in rows] == list(range(1, 121))
    q = ["--query", "SELECT id, status FROM t WHERE status = ?", "--param", "closed"]
    rows = page_all(
        capsys, ["page", str(tickets_db), *q, "--order-by=-id", "--unique", *store], 512
    )
    assert [r["id"] for r in rows] == list(range(120, 0, -3))


def test_page_cursor_errors_exit_3(
    tickets_db: Path, tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    store = ["--store", str(tmp_path / "c.sqlite3")]
    q = ["page", str(tickets_db), "--query", "SELECT * FROM t WHERE status = ?", "--unique"]
    assert main([*q, "--param", "open", "--max-items", "5", *store]) == EXIT_OK
    cursor = orjson.loads(capsys.readouterr().out)["next_cursor"]
    assert isinstance(cursor, str)

    assert main([*q, "--param", "closed", "--cursor", cursor, *store]) == EXIT_CURSOR
    cap = capsys.readouterr()
    assert cap.out == ""
    assert cap.err == (
        "jsonbudget: cursor refused (scope_query): "
        "the cursor was issued for other query parameters\n"
    )
    assert main([*q, "--param", "open", "--cursor", cursor, "--principal", "mallory", *store]) == 3
    assert capsys.readouterr().err == (
        "jsonbudget: cursor refused (scope_principal): the cursor was issued to another principal\n"
    )
    assert main([*q, "--param", "open", "--cursor", "garbage", *store]) == EXIT_CURSOR
    assert capsys.readouterr().err.startswith("jsonbudget: cursor refused (invalid): ")
    # The right query continues (the page size may change).
    assert main([*q, "--param", "open", "--cursor", cursor, "--max-items", "3", *store]) == 0
    assert [r["id"] for r in orjson.loads(capsys.readouterr().out)["items"]] == [8, 10, 11]
    # So may the byte budget: it once set the source's cell cut, which the cursor is
    # bound to, and --max-bytes 32K after the default was "scope_query".
    grown = [*q, "--param", "open", "--cursor", cursor, "--max-items", "2", *store]
    assert main([*grown, "--max-bytes", "32K"]) == EXIT_OK
    assert [r["id"] for r in orjson.loads(capsys.readouterr().out)["items"]] == [8, 10]


def test_page_max_pages_and_mcp_keys(
    items_file: Path, tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    args = ["page", str(items_file), "--store", str(tmp_path / "c"), "--max-items", "10"]
    assert main([*args, "--max-pages", "2", "--mcp-keys"]) == EXIT_OK
    first = orjson.loads(capsys.readouterr().out)
    assert set(first) == {"items", "complete", "nextCursor", "incompleteReason"}
    assert main([*args, "--mcp-keys", "--cursor", first["nextCursor"]]) == EXIT_OK
    second = orjson.loads(capsys.readouterr().out)
    assert second["nextCursor"] is None
    assert second["complete"] is False
    assert second["incompleteReason"] == "budget_exhausted"


def test_page_usage_errors(
    tickets_db: Path, items_file: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    assert main(["page", str(tickets_db)]) == EXIT_USAGE
    assert capsys.readouterr().err == (
        "jsonbudget: error: an SQLite source needs exactly one of --table or --query\n"
    )
    assert main(["page", str(items_file), "--order-by", "id"]) == EXIT_USAGE
    assert "apply to SQLite sources only" in capsys.readouterr().err
    # Regression: with --kind auto, --table took a JSON file for SQLite, which then
    # failed at run time (exit 1) instead of as the usage error the docs list.
    assert main(["page", str(items_file), "--table", "t"]) == EXIT_USAGE
    assert "need an SQLite database" in capsys.readouterr().err
    assert main(["page", str(tickets_db), "--table", "t", "--order-by", "nope"]) == EXIT_USAGE
    assert capsys.readouterr().err.startswith("jsonbudget: error: order_by='nope' is invalid")


@pytest.mark.parametrize(
    ("option", "says"), [("--ttl=0", "ttl=0 is invalid"), ("--principal=", "principal='' is")]
)
def test_regression_page_checks_ttl_and_principal_before_opening_the_input(
    tmp_path: Path, capsys: pytest.CaptureFixture[str], option: str, says: str
) -> None:
    # Both were checked after the input was opened: on a FIFO with no writer the command
    # hung, and on a missing file it said "no such file" (exit 1), not the bad option.
    assert main(["page", str(tmp_path / "missing.json"), option]) == EXIT_USAGE
    assert capsys.readouterr().err.startswith(f"jsonbudget: error: {says}")


def test_page_oversized_error_outcome(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    path = tmp_path / "big.json"
    path.write_text(json.dumps([{"blob": "x" * 10_000}]))
    args = ["page", str(path), "--store", str(tmp_path / "c"), "--max-bytes", "1K"]
    assert main([*args, "--oversized", "error"]) == EXIT_ERROR
    assert capsys.readouterr().err == (
        "jsonbudget: error: item 0 encodes to more than the budget, "
        "which cannot fit a page of 1024 bytes\n"
    )
    assert main([*args, "--oversized", "placeholder"]) == EXIT_OK
    env = orjson.loads(capsys.readouterr().out)
    assert env["oversized"] == [{"index": 0, "encoded_bytes": None, "outcome": "placeholder"}]


@pytest.mark.redis
def test_page_with_redis_store(
    items_file: Path, capsys: pytest.CaptureFixture[str], redis_server: Any
) -> None:
    items = page_all(capsys, ["page", str(items_file), "--store", redis_server.url], 4096)
    assert [it["id"] for it in items] == list(range(300))


# -- subprocess ----------------------------------------------------------------------


def test_subprocess_version_and_help() -> None:
    from jsonbudget import __version__

    cp = run("--version")
    assert cp.returncode == 0
    assert cp.stdout.decode() == f"jsonbudget {__version__}\n"
    cp = run("--help")
    assert cp.returncode == 0
    assert (
        "exit codes: 0 ok, 1 runtime or data error, 2 usage error, 3 cursor" in cp.stdout.decode()
    )


def test_subprocess_dump_page_and_errors(items_file: Path, tmp_path: Path) -> None:
    cp = run("dump", "--max-bytes", "64", stdin=b'{"a": [1, 2, 3]}')
    assert (cp.returncode, cp.stdout, cp.stderr) == (0, b'{"a":[1,2,3]}\n', b"")
    env = {**ENV, "XDG_CACHE_HOME": str(tmp_path / "cache")}
    cp = run("page", str(items_file), "--max-items", "3", env=env)
    assert cp.returncode == 0
    page = orjson.loads(cp.stdout)
    assert [it["id"] for it in page["items"]] == [0, 1, 2]
    cp = run("page", str(items_file), "--cursor", page["next_cursor"], env=env)
    assert cp.returncode == 0
    assert orjson.loads(cp.stdout)["items"][0]["id"] == 3
    cp = run("page", str(items_file), "--cursor", "x" * 56, env=env)
    assert cp.returncode == EXIT_CURSOR
    assert cp.stderr.startswith(b"jsonbudget: cursor refused (invalid): ")
    assert cp.stderr.count(b"\n") == 1
    cp = run("dump", "--max-bytes", "0", stdin=b"1")
    assert cp.returncode == EXIT_USAGE
    assert cp.stderr == b"jsonbudget: error: max_bytes=0 is invalid: must be at least 64\n"
    assert b"Traceback" not in cp.stderr


# -- one input layer: dump, page and tune read the same way --------------------------------


def test_dump_refuses_content_after_the_value() -> None:
    """Regression: '{"a":1} garbage' was dumped as complete."""
    cp = run("dump", "--report", stdin=b'{"a":1} garbage')
    assert cp.returncode == EXIT_ERROR
    assert cp.stdout == b""
    assert cp.stderr.decode() == (
        "jsonbudget: error: invalid JSON: content after the value (at decoded byte 8)\n"
    )


def test_dump_reads_several_records_as_json_lines() -> None:
    """Regression: a file of two records printed only the first, 'complete'."""
    cp = run("dump", "--report", stdin=b'{"a": 1}\n{"b": 2}\n')
    assert cp.returncode == EXIT_OK
    assert cp.stdout == b'[{"a":1},{"b":2}]\n'
    assert cp.stderr.decode() == "jsonbudget: 17 bytes, complete\n"


@pytest.mark.parametrize("data", [b"[1] [2]\n", b"[1,\n2] x\n", b"[1]\n}\n"])
def test_dump_refuses_content_after_a_top_level_array(data: bytes) -> None:
    cp = run("dump", stdin=data)
    assert cp.returncode == EXIT_ERROR
    assert "content after the top-level array (is this JSON Lines?)" in cp.stderr.decode()


def test_regression_arrays_on_lines_of_their_own_are_json_lines(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    # Found by a tester: `[1]` on each line was refused as "content after the top-level
    # array", though a first line that is a whole value followed by more is JSON Lines.
    cp = run("dump", stdin=b"[1]\n\n[2, 3]\n")
    assert (cp.returncode, cp.stdout) == (EXIT_OK, b"[[1],[2,3]]\n")
    path = tmp_path / "rows.json"
    path.write_text("".join(json.dumps([i, "x" * i]) + "\n" for i in range(40)))
    items = page_all(capsys, ["page", str(path), "--store", str(tmp_path / "c.db")], 1024)
    assert items == [[i, "x" * i] for i in range(40)]
    # A first line longer than 64 KiB is the start of one array, streamed: a 1 GB array
    # on one line is not read whole to tell.
    path.write_bytes(b"[" + b"1," * 40_000 + b"1]\n[2]\n")
    assert main(["dump", str(path), "--max-bytes", "100"]) == EXIT_OK
    assert orjson.loads(capsys.readouterr().out)[-1] == "…[omitted: more items]"


def test_dump_and_page_mark_a_big_integer_the_same_way(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    """Regression: dump failed with 'integer overflow' where page wrote a marker."""
    doc = b'[{"n": 123456789012345678901234567890}]'
    path = tmp_path / "big.json"
    path.write_bytes(doc)
    assert main(["dump", str(path)]) == EXIT_OK
    dumped = orjson.loads(capsys.readouterr().out)
    assert main(["page", str(path), "--store", str(tmp_path / "c.sqlite3")]) == EXIT_OK
    paged = orjson.loads(capsys.readouterr().out)
    assert dumped == paged["items"]
    assert dumped[0]["n"].startswith("…[unencodable")


def test_dump_marks_a_lone_surrogate_escape() -> None:
    """Regression: '"a\\ud800b"' came out as "a?b", 'complete'."""
    cp = run("dump", "--report", "--json", stdin=b'"a\\ud800b"')
    assert cp.returncode == EXIT_OK
    assert orjson.loads(cp.stdout) == "a\ufffdb…[replaced: 1 lone surrogates]"
    report = orjson.loads(cp.stderr)
    assert report["complete"] is False
    assert report["truncations"][0]["kind"] == "unencodable"


@pytest.mark.parametrize("command", ["dump", "page", "tune"])
def test_gzip_and_bom_read_the_same_in_every_command(
    tmp_path: Path, capsys: pytest.CaptureFixture[str], command: str
) -> None:
    """Regression: dump could not read gzip; page refused a BOM."""
    path = tmp_path / "rows.json.gz"
    path.write_bytes(
        gzip.compress(b"\xef\xbb\xbf" + json.dumps([{"i": i} for i in range(5)]).encode())
    )
    extra = {
        "dump": [],
        "page": ["--store", str(tmp_path / "c.sqlite3")],
        "tune": ["--json", "-q"],
    }[command]
    assert main([command, str(path), *extra]) == EXIT_OK
    out = orjson.loads(capsys.readouterr().out)
    if command == "dump":
        assert out == [{"i": i} for i in range(5)]
    elif command == "page":
        assert out["items"] == [{"i": i} for i in range(5)]
    else:
        assert out["items"] == 5


def test_page_detects_json_lines_without_the_extension(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    path = tmp_path / "rows.txt"
    path.write_text('{"n": 1}\n{"n": 2}\n')
    assert main(["page", str(path), "--store", str(tmp_path / "c.sqlite3")]) == EXIT_OK
    assert orjson.loads(capsys.readouterr().out)["items"] == [{"n": 1}, {"n": 2}]


def test_truncated_gzip_is_one_line(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    data = gzip.compress(json.dumps({"a": "x" * 100_000}).encode() * 3)
    path = tmp_path / "t.json.gz"
    path.write_bytes(data[: len(data) // 2])
    assert main(["dump", str(path)]) == EXIT_ERROR
    err = capsys.readouterr().err
    assert err.startswith("jsonbudget: error: the gzip stream ends inside a member (truncated)")
    assert err.count("\n") == 1
    assert "b'" not in err  # never a Python bytes literal


@pytest.mark.parametrize("command", ["dump", "page", "tune"])
def test_regression_trailing_bytes_after_gzip_show_no_bytes_literal(
    tmp_path: Path, capsys: pytest.CaptureFixture[str], command: str
) -> None:
    # The gzip module's "Not a gzipped file (b'ga')" went out as it was.
    path = tmp_path / "x.json.gz"
    path.write_bytes(gzip.compress(b"[1, 2, 3]") + b"garbage")
    extra = ["--store", str(tmp_path / "c.sqlite3")] if command == "page" else []
    assert main([command, str(path), *extra]) == EXIT_ERROR
    err = capsys.readouterr().err
    assert err.startswith("jsonbudget: error: invalid gzip data: bytes after a member")
    assert err.count("\n") == 1
    assert "b'" not in err


def test_page_query_with_ties_is_refused_not_short(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    """Regression: --order-by service over a query returned 17,437 of 22,082 rows, complete."""
    path = tmp_path / "ops.sqlite3"
    conn = sqlite3.connect(path)
    conn.execute("CREATE TABLE ops (service TEXT, name TEXT)")
    conn.executemany("INSERT INTO ops VALUES (?, ?)", [(f"s{i % 5}", f"op{i}") for i in range(400)])
    conn.commit()
    conn.close()
    store = ["--store", str(tmp_path / "c.sqlite3")]
    q = ["page", str(path), "--query", "select service, name from ops", "--order-by", "service"]
    assert main([*q, *store]) == EXIT_USAGE
    assert "pass unique=True" in capsys.readouterr().err
    # The table itself pages completely: its rowid breaks the ties.
    rows = page_all(
        capsys, ["page", str(path), "--table", "ops", "--order-by", "service", *store], 1024
    )
    assert sorted(r["name"] for r in rows) == sorted(f"op{i}" for i in range(400))


def test_page_never_fetches_a_long_cell_whole(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    path = tmp_path / "cell.sqlite3"
    conn = sqlite3.connect(path)
    conn.execute("CREATE TABLE t (id INTEGER PRIMARY KEY, body TEXT)")
    conn.execute("INSERT INTO t VALUES (1, ?)", ("x" * 5_000_000,))
    conn.commit()
    conn.close()
    statements: list[str] = []
    real_connect = sqlite3.connect

    def traced(*args: Any, **kwargs: Any) -> sqlite3.Connection:
        c: sqlite3.Connection = real_connect(*args, **kwargs)
        c.set_trace_callback(statements.append)
        return c

    with pytest.MonkeyPatch.context() as mp:
        mp.setattr(sqlite3, "connect", traced)
        assert (
            main(["page", str(path), "--table", "t", "--store", str(tmp_path / "c.sqlite3")]) == 0
        )
    out = capsys.readouterr().out
    assert len(out) <= 65537
    assert "more bytes]" in out  # the cell's cut, with its exact size
    # A page of a path's own connection reads the cell's size and first bytes by blob
    # I/O (its type asked alone), never its value, and not through the cut select.
    assert any(s.startswith('SELECT typeof(_jb_q."body")') for s in statements)
    assert not any("substr(" in s for s in statements)


DEEP = 1_000_000


def test_dump_of_a_million_deep_array_is_bounded(tmp_path: Path) -> None:
    """Regression: 10,000 levels took 276 MB; 1,000,000 levels were killed by the kernel."""
    path = tmp_path / "deep.json"
    path.write_bytes(b"[" * DEEP + b"]" * DEEP)
    code = (
        "import resource, sys\n"
        "resource.setrlimit(resource.RLIMIT_AS, (400 << 20, 400 << 20))\n"
        "from jsonbudget._cli.main import main\n"
        f"sys.exit(main(['dump', '--max-bytes', '200', '--report', {str(path)!r}]))\n"
    )
    cp = subprocess.run(
        [sys.executable, "-c", code], capture_output=True, env=ENV, timeout=60, check=False
    )
    assert cp.returncode == EXIT_OK, cp.stderr
    assert len(cp.stdout) - 1 <= 200
    assert b"\xe2\x80\xa6[depth: list of 1 items]" in cp.stdout
    assert b"depth" in cp.stderr


@pytest.mark.parametrize("command", ["page", "tune"])
@pytest.mark.parametrize("suffix", [".json", ".jsonl"])
def test_deep_files_page_and_tune_without_a_traceback(
    tmp_path: Path, command: str, suffix: str
) -> None:
    """Regression: RecursionError tracebacks from page, tune and dump x.jsonl."""
    path = tmp_path / f"deep{suffix}"
    deep = b"[" * 5000 + b"]" * 5000
    path.write_bytes(b"[" + deep + b"]" if suffix == ".json" else deep + b"\n")
    extra = ["--store", str(tmp_path / "c.sqlite3")] if command == "page" else ["--json", "-q"]
    cp = run(command, str(path), *extra)
    assert cp.returncode == EXIT_OK, cp.stderr
    assert b"Traceback" not in cp.stderr


def test_page_binary_flag_writes_blobs_as_base64(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    db = tmp_path / "blobs.sqlite3"
    with sqlite3.connect(db) as conn:
        conn.execute("create table t (id integer primary key, b blob)")
        conn.execute("insert into t values (1, x'00ff10')")
    assert main(["page", str(db), "--table", "t", "--binary", "base64"]) == EXIT_OK
    assert orjson.loads(capsys.readouterr().out)["items"] == [{"id": 1, "b": "AP8Q"}]
    assert main(["page", str(db), "--table", "t"]) == EXIT_OK
    assert "unencodable" in orjson.loads(capsys.readouterr().out)["items"][0]["b"]


@pytest.mark.parametrize("command", ["dump", "page", "tune", "demo"])
def test_every_command_reports_a_closed_output_the_same_way(command: str, items_file: Path) -> None:
    """`| head` that closed early: one line on stderr and exit 1, whoever writes stdout."""
    read_end, write_end = os.pipe()
    os.close(read_end)  # the reader is gone before the command writes a byte
    args = [command] if command == "demo" else [command, str(items_file)]
    try:
        proc = subprocess.run(
            [sys.executable, "-m", "jsonbudget", *args],
            stdout=write_end,
            stderr=subprocess.PIPE,
            env=ENV,
            timeout=120,
            check=False,
        )
    finally:
        os.close(write_end)
    assert proc.returncode == EXIT_ERROR
    assert proc.stderr.decode() == "jsonbudget: error: output closed early (broken pipe)\n"


# -- linear input work, whole output, closed streams ---------------------------------


class _CountingBytes(bytes):
    """bytes whose slices (and the slices of those) add the bytes they copy to ``copied``."""

    copied: ClassVar[list[int]] = [0]

    @overload
    def __getitem__(self, key: SupportsIndex, /) -> int: ...
    @overload
    def __getitem__(self, key: slice, /) -> bytes: ...
    def __getitem__(self, key: SupportsIndex | slice, /) -> int | bytes:
        part = bytes.__getitem__(self, key)
        if isinstance(part, int):
            return part
        _CountingBytes.copied[0] += len(part)
        return _CountingBytes(part)


class _CountingStream:
    """A binary stream whose chunks are `_CountingBytes`, so slicing them is counted."""

    def __init__(self, data: bytes) -> None:
        self.data = data
        self.at = 0

    def read(self, size: int = -1, /) -> bytes:
        end = len(self.data) if size < 0 else self.at + size
        chunk = self.data[self.at : end]
        self.at += len(chunk)
        return _CountingBytes(chunk)


def test_dump_long_first_line_is_copied_once_not_once_per_read(
    tmp_path: Path, capsysbinary: pytest.CaptureFixture[bytes], monkeypatch: pytest.MonkeyPatch
) -> None:
    """Regression: a 4 MiB first line replayed 64 KiB at a time was re-sliced per read."""
    import jsonbudget._cli.main as cli

    class Counting(cli._Prepended):
        __slots__ = ()

        def __init__(
            self, head: bytes, stream: Any, cap: int | None, *, ends: bool = False
        ) -> None:
            super().__init__(_CountingBytes(head), stream, cap, ends=ends)

    monkeypatch.setattr(cli, "_Prepended", Counting)
    line = b'{"a": "' + b"x" * (4 << 20) + b'",'  # not a whole value: the object is read whole
    path = tmp_path / "long.json"
    path.write_bytes(line + b'\n"b": 1}')
    _CountingBytes.copied[0] = 0
    assert main(["dump", str(path), "--max-bytes", "200"]) == EXIT_OK
    assert set(orjson.loads(capsysbinary.readouterr().out)) == {"a", "b"}
    # Each held byte is copied out once (the line is held whole while it is replayed);
    # slicing off what was read copied the rest again per 64 KiB read: 32 times the line.
    assert _CountingBytes.copied[0] <= 2 * len(line)


def test_json_lines_of_short_lines_are_sliced_in_linear_work() -> None:
    """Regression: every short line re-sliced the rest of its 64 KiB chunk (1 GB here)."""
    import jsonbudget._cli.main as cli

    data = b"1234567\n" * (128 * 1024 // 8)
    _CountingBytes.copied[0] = 0
    values = list(cli._lines(cli._Prepended(b"", _CountingStream(data), None)))
    assert values == [1234567] * (128 * 1024 // 8)
    assert _CountingBytes.copied[0] <= 2 * len(data)


def test_unbuffered_stdout_on_a_slow_non_blocking_pipe_gets_every_byte(tmp_path: Path) -> None:
    """Regression: with PYTHONUNBUFFERED=1 a short write was ignored: 64 KiB out, exit 0."""
    value = [f"{i:04d}" + "x" * 1000 for i in range(600)]
    path = tmp_path / "big.json"
    path.write_bytes(orjson.dumps(value))
    read_end, write_end = os.pipe()
    # A pipe shared with a non-blocking reader takes only what fits, then EAGAIN.
    os.set_blocking(write_end, False)
    try:
        proc = subprocess.Popen(
            [sys.executable, "-m", "jsonbudget", "dump", str(path), "--max-bytes", "1M"],
            stdout=write_end,
            stderr=subprocess.PIPE,
            env={**ENV, "PYTHONUNBUFFERED": "1"},
        )
    finally:
        os.close(write_end)
    chunks: list[bytes] = []
    try:
        with os.fdopen(read_end, "rb", buffering=0) as reader:
            while chunk := reader.read(4096):  # a slow reader: the pipe fills up
                chunks.append(chunk)
                time.sleep(0.0005)
        assert proc.wait(timeout=120) == EXIT_OK
    finally:
        proc.kill()
    assert proc.stderr is not None
    assert proc.stderr.read() == b""
    assert b"".join(chunks) == orjson.dumps(value) + b"\n"


def _in_shell(redirect: str, *args: str) -> Any:
    """Run the command with a shell redirection such as ``<&-`` (close stdin)."""
    return subprocess.run(
        ["sh", "-c", f'exec "$@" {redirect}', "sh", sys.executable, "-m", "jsonbudget", *args],
        stdout=subprocess.PIPE,
        stderr=None if "2>" in redirect else subprocess.PIPE,
        env=ENV,
        timeout=120,
        check=False,
    )


def test_closed_stdin_is_one_line_and_exit_1() -> None:
    """Regression: `jsonbudget dump <&-` was an AttributeError traceback (stdin is None)."""
    proc = _in_shell("<&-", "dump")
    assert proc.returncode == EXIT_ERROR
    assert proc.stdout == b""
    assert proc.stderr == (
        b"jsonbudget: error: stdin is closed (give a FILE, or feed it with < or |)\n"
    )


@pytest.mark.parametrize("command", ["dump", "page", "tune", "demo"])
def test_closed_stdout_is_one_line_and_exit_1(command: str, items_file: Path) -> None:
    """Regression: `jsonbudget dump FILE >&-` was an AttributeError traceback."""
    args = [command] if command == "demo" else [command, str(items_file)]
    proc = _in_shell(">&-", *args)
    assert proc.returncode == EXIT_ERROR
    assert proc.stderr == b"jsonbudget: error: stdout is closed\n"


def test_closed_stderr_still_gives_the_output_and_the_exit_code(items_file: Path) -> None:
    proc = _in_shell("2>&-", "dump", str(items_file), "--max-bytes", "300", "--report")
    assert proc.returncode == EXIT_OK
    assert len(orjson.loads(proc.stdout)) >= 1
    proc = _in_shell("<&- 2>&-", "dump")
    assert proc.returncode == EXIT_ERROR
    assert proc.stdout == b""


def test_regression_a_pipe_needs_its_kind_not_a_sniff(tmp_path: Path) -> None:
    # --kind auto read the start of a pipe to tell its kind, and the source then read
    # the rest: a valid array lost its "[" and was called invalid JSON.
    items = b'[{"id": 1}, {"id": 2}]'
    store = str(tmp_path / "c.sqlite3")
    proc = run("page", "/dev/stdin", "--store", store, stdin=items)
    assert proc.returncode == EXIT_USAGE
    assert b"give --kind json or --kind jsonl" in proc.stderr
    proc = run("page", "/dev/stdin", "--kind", "json", "--store", store, stdin=items)
    assert proc.returncode == EXIT_OK, proc.stderr
    assert orjson.loads(proc.stdout)["items"] == [{"id": 1}, {"id": 2}]


def test_regression_page_refuses_a_small_budget_before_reading_a_fifo(tmp_path: Path) -> None:
    # The page minimum was checked only after the input was opened: a FIFO blocked.
    fifo = tmp_path / "items.fifo"
    os.mkfifo(fifo)
    store = tmp_path / "cursors.sqlite3"
    proc = run("page", str(fifo), "--max-bytes", "100", "--store", str(store))
    assert proc.returncode == EXIT_USAGE
    assert b"a page needs at least" in proc.stderr
    assert not store.exists()  # refused before the store was made, too


def test_regression_dump_refuses_binary_input_at_its_first_byte() -> None:
    # /dev/zero (or binary junk) was read up to MAX_LOAD_BYTES, 256 MiB, and about 820 MB
    # of memory, before being refused, though a NUL at byte 0 starts no JSON value.
    code = (
        "import resource, sys\n"
        "resource.setrlimit(resource.RLIMIT_AS, (300 << 20, 300 << 20))\n"
        "from jsonbudget._cli.main import main\n"
        "sys.exit(main(['dump', '--max-bytes', '100', '/dev/zero']))\n"
    )
    done = subprocess.run(
        [sys.executable, "-c", code], capture_output=True, env=ENV, timeout=60, check=False
    )
    assert done.returncode == 1
    said = b"jsonbudget: error: invalid JSON: no value starts with the byte 0x00"
    assert done.stderr == said + b" (at decoded byte 0)\n"
    junk = run("dump", "--max-bytes", "100", "-", stdin=b"  \x89PNG\r\n")
    assert junk.returncode == 1
    assert b"no value starts with the byte 0x89 (at decoded byte 2)" in junk.stderr
    # A top-level string still starts a value.
    assert run("dump", "--max-bytes", "100", "-", stdin=b'"abc"').stdout == b'"abc"\n'


def test_regression_dump_waits_on_a_non_blocking_stdin() -> None:
    """Found by a tester: on a stdin left non-blocking by the program that started the
    command, a read with nothing ready (None) was taken for the end: lines sent later
    were lost under a "complete" report, exit 0; with nothing ready at the start, a
    traceback."""
    import fcntl

    for first, second, want in (
        (b'{"id": 1}\n{"id": 2}\n', b'{"id": 3}\n', [{"id": 1}, {"id": 2}, {"id": 3}]),
        (b"", b"[1, 2]", [1, 2]),
        (b'[{"id": 1}, ', b'{"id": 2}]', [{"id": 1}, {"id": 2}]),
    ):
        r, w = os.pipe()
        fcntl.fcntl(r, fcntl.F_SETFL, fcntl.fcntl(r, fcntl.F_GETFL) | os.O_NONBLOCK)
        os.write(w, first)
        proc = subprocess.Popen(
            [sys.executable, "-m", "jsonbudget", "dump", "--report"],
            stdin=r,
            stdout=subprocess.PIPE,
            stderr=subprocess.PIPE,
            env=ENV,
        )
        os.close(r)
        time.sleep(0.5)  # the command is reading, and finds nothing ready
        os.write(w, second)
        os.close(w)
        out, err = proc.communicate(timeout=60)
        assert proc.returncode == 0, err
        assert orjson.loads(out) == want
        assert b"complete" in err


def test_regression_a_gzip_file_cut_short_is_one_line_for_page_and_tune(tmp_path: Path) -> None:
    """Found by a tester: with --kind auto, page and tune sniffed the first line of a
    truncated gzip file outside the error wrapper: an EOFError traceback."""
    data = gzip.compress(b'[{"id": 1}, {"id": 2}, {"id": 3}]\n')
    cut = tmp_path / "cut.json.gz"
    cut.write_bytes(data[:-6])
    for args in (("page", str(cut), "--store", str(tmp_path / "c.db")), ("tune", str(cut), "-q")):
        done = run(*args)
        assert done.returncode == 1
        assert done.stderr.count(b"\n") == 1, done.stderr
        assert b"Traceback" not in done.stderr
        assert b"gzip" in done.stderr


def test_regression_ctrl_c_while_the_command_loads_is_one_line() -> None:
    """A Ctrl-C while rich and the command's module loaded printed a traceback. The
    interrupt is made to arrive there: the module's first attribute read raises it."""
    code = (
        "import sys, types\n"
        "class Loading(types.ModuleType):\n"
        "    def __getattr__(self, name):\n"
        "        raise KeyboardInterrupt\n"
        "sys.modules['jsonbudget._cli.main'] = Loading('jsonbudget._cli.main')\n"
        "from jsonbudget._cli import run\n"
        "sys.exit(run())\n"
    )
    done = subprocess.run(
        [sys.executable, "-c", code], capture_output=True, env=ENV, timeout=60, check=False
    )
    assert done.returncode == 130
    assert done.stderr == b"jsonbudget: interrupted\n"


def test_regression_a_stderr_that_takes_no_bytes_drops_the_report_not_the_exit_code(
    items_file: Path,
) -> None:
    """Found by a tester: with stderr a read-only descriptor (what a shell-script shim
    leaves for ``2>&-``), the --report write failed with EBADF after the output was
    written whole, and the command exited 1."""
    with open(os.devnull, "rb") as read_only:
        done = subprocess.run(
            [sys.executable, "-m", "jsonbudget", "dump", str(items_file), "--report"],
            stdout=subprocess.PIPE,
            stderr=read_only,
            env=ENV,
            timeout=60,
            check=False,
        )
    assert done.returncode == 0
    json.loads(done.stdout)


def test_regression_sigterm_removes_the_demos_temporary_directory(tmp_path: Path) -> None:
    """Found by a tester: SIGTERM (kill, timeout, a cancelled CI job) ended the demo
    without its clean-up: 80-300 MB left in /tmp/jsonbudget-demo-*. It now exits 143
    once what the command made is removed."""
    env = {**ENV, "TMPDIR": str(tmp_path)}
    proc = subprocess.Popen(
        [sys.executable, "-m", "jsonbudget", "demo", "--rows", "200000", "-q"],
        stdout=subprocess.DEVNULL,
        stderr=subprocess.PIPE,
        env=env,
    )
    deadline = time.monotonic() + 60
    while not any(tmp_path.iterdir()) and time.monotonic() < deadline:
        time.sleep(0.05)  # until the demo has made its directory
    assert any(tmp_path.iterdir())
    proc.terminate()
    _, err = proc.communicate(timeout=60)
    assert proc.returncode == 143
    assert err == b"jsonbudget: terminated\n"
    assert list(tmp_path.iterdir()) == []


def _bytes_read() -> int:
    """What this process has read so far, by its read calls (Linux's /proc/self/io)."""
    with open("/proc/self/io", "rb") as f:
        return int(dict(line.split(b": ") for line in f.read().splitlines())[b"rchar"])


def test_regression_a_page_does_not_read_a_long_first_line_to_tell_the_kind(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    """Found by a tester: `page` of a JSON Lines file not named .jsonl parsed its whole
    first line (up to 256 MiB) on every call to learn its kind: a continuation page of
    five short lines after a 120 MB record read all of it again (0.5 GB of memory)."""
    path = tmp_path / "export.json"
    first = orjson.dumps({"id": 0, "blob": "x" * 8_000_000})
    path.write_bytes(first + b"\n" + b"".join(b'{"id":%d}\n' % i for i in range(1, 50)))
    assert main(["page", str(path), "--max-bytes", "2000", "--store", str(tmp_path / "c")]) == 0
    page = orjson.loads(capsys.readouterr().out)
    assert page["items"][0]["id"] == 0  # read as JSON Lines, the long record cut
    before = _bytes_read()
    args = ["page", str(path), "--max-bytes", "2000", "--store", str(tmp_path / "c")]
    assert main([*args, "--cursor", page["next_cursor"]]) == 0
    read = _bytes_read() - before
    assert [item["id"] for item in orjson.loads(capsys.readouterr().out)["items"]][:1] == [1]
    assert read < 1_000_000, read  # the page's lines and the cursor store, not the record


def test_regression_sigterm_ends_a_page_inside_a_long_sqlite_query(tmp_path: Path) -> None:
    """Found by a tester: the command line's SIGTERM handler runs only between bytecodes,
    so `timeout` could not end a page while SQLite ran a query (11.9 s for a 2 s limit;
    a query that never returns, never). Only the demo, which has a directory to remove,
    handles SIGTERM now: a page ends at once."""
    db = tmp_path / "loop.db"
    with contextlib.closing(sqlite3.connect(db)) as conn:
        conn.execute("CREATE TABLE t (id INTEGER PRIMARY KEY)")
    endless = (
        "WITH RECURSIVE c(x) AS (SELECT 1 UNION ALL SELECT x + 1 FROM c) "
        "SELECT x AS id FROM c WHERE x < 0"
    )
    args = ["page", str(db), "--query", endless, "--order-by", "id", "--unique"]
    proc = subprocess.Popen(
        [sys.executable, "-m", "jsonbudget", *args, "--store", str(tmp_path / "c")],
        stdout=subprocess.DEVNULL,
        stderr=subprocess.PIPE,
        env=ENV,
    )
    try:
        with pytest.raises(subprocess.TimeoutExpired):
            proc.wait(timeout=2)  # inside the endless query by then
        proc.terminate()
        assert proc.wait(timeout=30) == -15  # ended by the signal, not held off by a handler
    finally:
        proc.kill()
        proc.communicate()


def test_regression_an_sqlite_source_that_is_a_pipe_is_refused(tmp_path: Path) -> None:
    """Found by a tester: `page fifo --table t` hung forever (SQLite's open of a pipe
    waits for a writer), and SIGTERM could not end it."""
    fifo = tmp_path / "db.pipe"
    os.mkfifo(fifo)
    for kind in ([], ["--kind", "sqlite"]):
        done = subprocess.run(
            [sys.executable, "-m", "jsonbudget", "page", str(fifo), "--table", "t", *kind],
            capture_output=True,
            env=ENV,
            timeout=60,
            check=False,
        )
        assert done.returncode == EXIT_USAGE
        assert done.stderr.endswith(b"is not one\n")


@pytest.mark.parametrize(
    "name", ["no\nsuch.json", "x\x1b[2Jy.json", "tab\there.jsonl", "c1\x9bz.json"]
)
def test_regression_an_error_names_a_file_on_one_line_without_controls(
    tmp_path: Path, name: str
) -> None:
    """Found by a tester: an error printed a file's name raw: a line break split the one
    line, an escape sequence reached the terminal."""
    for command in ("page", "dump"):
        done = run(command, str(tmp_path / name))
        assert done.returncode == EXIT_ERROR
        err = done.stderr.decode("utf-8", "surrogateescape")
        assert err.startswith("jsonbudget: error: ")
        assert err.count("\n") == 1
        assert err.endswith("\n")
        assert not any(c < " " or "\x7f" <= c <= "\x9f" for c in err[:-1]), err


@pytest.mark.parametrize(
    ("name", "data", "offset"),
    [
        ("lead.json", b"\n\n\n\n[1,\n x]", 9),
        ("lead.ndjson.json", b'\n\n\n\n{"a":1}\n{"b":x}\n', 17),
        ("bom.jsonl", b'\xef\xbb\xbf{"a":1}\n{"b":x}\n', 16),
        ("after.json", b'  {"a":1} x', 10),
        ("whole.json", b'  {"a":\n1 x', 10),
        ("array.json", b"[1,2]\n\n  ]", 9),
    ],
)
def test_regression_dump_counts_error_offsets_from_the_inputs_first_byte(
    tmp_path: Path, name: str, data: bytes, offset: int
) -> None:
    """Found by a tester: `dump` counted its error offsets from the value's first byte,
    leaving out the whitespace before it and a byte order mark, where `page` counts from
    the input's first byte (9 against 5 for four leading line breaks)."""
    path = tmp_path / name
    path.write_bytes(data)
    done = run("dump", str(path))
    assert done.returncode == EXIT_ERROR
    assert done.stderr.endswith(f"(at decoded byte {offset})\n".encode()), done.stderr


def test_regression_dump_passes_over_a_long_item_of_a_regular_file_to_its_end(
    tmp_path: Path, capsys: pytest.CaptureFixture[str], monkeypatch: pytest.MonkeyPatch
) -> None:
    """Found by a tester: `dump` read a regular file through the input layer, and the
    array reader took it for a stream whose end is not known: an item longer than the
    pass-over bound (256 MiB) was refused as in a pipe, while `page` showed it cut. The
    bound is lowered here so that an item just past the parse bound (64 MiB) passes it;
    a regular file (by path or as stdin) is passed over to the item's end, gzip still
    stops at the bound."""
    import jsonbudget._cli.main as cli_main  # the bound it reads

    monkeypatch.setattr(cli_main, "MAX_PASS_OVER", 1 << 20)
    path = tmp_path / "long.json"
    path.write_bytes(b'["' + b"x" * (65 << 20) + b'", 1, 2]')
    assert main(["dump", str(path), "--max-bytes", "4K"]) == EXIT_OK
    out = json.loads(capsys.readouterr().out)
    # The item's text cut where it was passed over, then the page's budget spent.
    assert out[0].startswith('"xxx')
    assert "…[" in out[0]
    assert out[-1].startswith("…[omitted")
    with path.open("rb") as f:
        monkeypatch.setattr(sys, "stdin", _BinaryStdin(f))
        assert main(["dump", "-", "--max-bytes", "4K"]) == EXIT_OK
    assert json.loads(capsys.readouterr().out) == out
    zipped = tmp_path / "long.json.gz"
    zipped.write_bytes(gzip.compress(path.read_bytes(), compresslevel=1))
    assert main(["dump", str(zipped), "--max-bytes", "4K"]) == EXIT_ERROR
    assert "stream whose end is not known" in capsys.readouterr().err


class _BinaryStdin:
    """A stdin whose buffer is the open file *f* (as `< file` gives)."""

    def __init__(self, f: Any) -> None:
        self.buffer = f


def test_regression_dump_clips_a_long_json_lines_line_as_the_file_sources_do(
    tmp_path: Path, capsys: pytest.CaptureFixture[str], monkeypatch: pytest.MonkeyPatch
) -> None:
    """Found by a tester: `dump` read each JSON Lines line whole, up to 256 MiB (a
    longer one refused, a 200 MB one costing 800 MB), where `page` clips a line past
    the file sources' item bound (64 MiB) and passes over the rest. `dump` reads lines
    through the same code now. The bounds are lowered here to keep the file small."""
    import jsonbudget._cli.main as cli_main  # the bounds it reads

    monkeypatch.setattr(cli_main, "MAX_LOAD_BYTES", 2 << 20)
    monkeypatch.setattr(cli_main, "DEFAULT_MAX_ITEM_BYTES", 1 << 20)
    path = tmp_path / "long.jsonl"
    path.write_bytes(b'{"a": 1}\n"' + b"y" * (3 << 20) + b'"\n{"b": 2}\n')
    assert main(["dump", str(path), "--max-bytes", "64K"]) == EXIT_OK
    out = json.loads(capsys.readouterr().out)
    assert out[0] == {"a": 1}
    assert len(out) >= 2
    assert out[-1].startswith("…[")  # the long line (or what follows) marked, never lost


def test_regression_a_file_that_is_not_an_sqlite_database_is_named_as_a_usage_error(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    """Found by a tester: `page k.json --kind sqlite --table t` and `--store k.json`
    failed with SQLite's bare "file is not a database" (exit 1), naming neither file,
    where `--table` under `--kind auto` says which file is not one (exit 2)."""
    data = tmp_path / "k.json"
    data.write_bytes(b"[1, 2, 3]")
    assert main(["page", str(data), "--kind", "sqlite", "--table", "t"]) == EXIT_USAGE
    assert capsys.readouterr().err.endswith(f"{data} is not one\n")
    store = tmp_path / "store.json"
    store.write_bytes(b'{"not": "a database"}')
    assert main(["page", str(data), "--store", str(store)]) == EXIT_USAGE
    err = capsys.readouterr().err
    assert f"--store {store} is not an SQLite database" in err
    assert store.read_bytes() == b'{"not": "a database"}'  # left as it was


def test_regression_ctrl_c_stops_a_long_sqlite_query(tmp_path: Path) -> None:
    """Found by a tester: SIGINT was handled only when SQLite returned, so `page` with a
    query SQLite took long to answer ran on after Ctrl-C (16 s here; forever for one
    that does not end). A thread watching for the signal interrupts the query now."""
    db = tmp_path / "slow.sqlite3"
    with contextlib.closing(sqlite3.connect(db)) as setup:
        setup.execute("CREATE TABLE t (id INTEGER PRIMARY KEY)")
    endless = (
        "WITH RECURSIVE c(x) AS (SELECT 1 UNION ALL SELECT x + 1 FROM c)"
        " SELECT x AS id FROM c WHERE x < 0"
    )
    args = ["page", str(db), "--query", endless, "--unique", "--store", str(tmp_path / "s")]

    def as_from_a_shell() -> None:
        # SIGINT as a terminal's foreground command has it, whatever the test process
        # left to its children (an ignored or blocked SIGINT is inherited through exec).
        signal.signal(signal.SIGINT, signal.SIG_DFL)
        signal.pthread_sigmask(signal.SIG_UNBLOCK, {signal.SIGINT})

    child = subprocess.Popen(
        [sys.executable, "-m", "jsonbudget", *args],
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        env={**ENV, "PYTHONFAULTHANDLER": "1"},
        preexec_fn=as_from_a_shell,  # noqa: PLW1509 - two signal calls, then exec
    )
    try:
        time.sleep(2)  # the query is running: it never ends by itself
        assert child.poll() is None
        status = Path(f"/proc/{child.pid}/status").read_text()
        child.send_signal(signal.SIGINT)
        try:
            _out, err = child.communicate(timeout=30)
        except subprocess.TimeoutExpired:
            # Still running: faulthandler writes where each of its threads is.
            child.send_signal(signal.SIGABRT)
            _out, err = child.communicate(timeout=10)
            signals = [line for line in status.splitlines() if line.startswith("Sig")]
            pytest.fail(f"no exit 30 s after SIGINT; {signals}\n{err.decode(errors='replace')}")
    finally:
        child.kill()
    assert child.returncode == EXIT_INTERRUPTED
    assert err == b"jsonbudget: interrupted\n"


def test_regression_page_closes_its_sqlite_source(
    tickets_db: Path,
    tmp_path: Path,
    capsys: pytest.CaptureFixture[str],
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    """Found by a tester: `page` never closed the SQLiteSource it built, so `main()` called
    200 times in one process held 200 database fds until a forced gc.collect(), after a
    page served and after a bad query alike. The command closes it now."""
    import gc

    import jsonbudget._cli.main as cli
    from jsonbudget import SQLiteSource

    closed: list[object] = []

    class Recording(SQLiteSource):
        __slots__ = ()

        def close(self) -> None:
            closed.append(self)
            super().close()

    monkeypatch.setattr(cli, "SQLiteSource", Recording)

    def fds() -> int:
        return len(os.listdir("/proc/self/fd"))

    store = ["--store", str(tmp_path / "store.sqlite3")]
    gc.disable()
    try:
        before = fds()
        for _ in range(10):
            assert main(["page", str(tickets_db), "--table", "t", *store]) == EXIT_OK
            bad = ["page", str(tickets_db), "--query", "SELECT * FROM nowhere", *store]
            assert main(bad) == EXIT_ERROR
        assert fds() == before
    finally:
        gc.enable()
    capsys.readouterr()
    assert len(closed) == 20

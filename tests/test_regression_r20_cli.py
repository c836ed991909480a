"""Regressions from the r20 probe of the command line as a Unix citizen: paths that are
not UTF-8 in JSON reports, the locale in cursor scopes, ASCII-only counts, the cursor
store's option, and the small ones (the demo's hint, --chart, dump --json, --kind's
help, a bad JSON line, `page -`, an OSError without a file name)."""

from __future__ import annotations

import base64
import json
import os
import shlex
import sqlite3
import subprocess
import sys
from pathlib import Path
from typing import Any

import pytest

from jsonbudget._cli.main import default_store_path

ROOT = Path(__file__).resolve().parent.parent
ENV = {**os.environ, "PYTHONPATH": str(ROOT / "src")}
#: Python under the C locale without its UTF-8 mode: argv and file names are decoded
#: as ASCII, their other bytes held as lone surrogates.
C_LOCALE = {**ENV, "LC_ALL": "C", "PYTHONUTF8": "0"}
#: Built into glibc (Debian's default has it without the locales package).
UTF8_LOCALE = {**ENV, "LC_ALL": "C.UTF-8", "PYTHONUTF8": "0"}

pytestmark = pytest.mark.skipif(sys.platform != "linux", reason="POSIX names and locales")


def run(
    *args: str | bytes,
    env: dict[str, str] | None = None,
    stdin: bytes | None = None,
    cwd: Path | None = None,
) -> Any:
    return subprocess.run(
        [sys.executable, "-m", "jsonbudget", *args],
        input=stdin,
        capture_output=True,
        env=env or ENV,
        cwd=cwd,
        timeout=120,
        check=False,
    )


def one_error_line(result: Any) -> str:
    err: str = result.stderr.decode("utf-8", "backslashreplace")
    assert err.count("\n") == 1, err
    assert err.startswith("jsonbudget: error: "), err
    assert b"Traceback" not in result.stderr
    return err


@pytest.fixture
def items_file(tmp_path: Path) -> Path:
    path = tmp_path / "items.json"
    path.write_text(json.dumps([{"id": i} for i in range(5)]))
    return path


def _b64(path: bytes) -> str:
    return base64.b64encode(path).decode("ascii")


# -- 1. paths that are not UTF-8 in --json reports ---------------------------------------


def test_regression_json_reports_write_paths_that_are_not_utf8(
    items_file: Path, tmp_path: Path
) -> None:
    # orjson refused the str (it holds lone surrogates): a traceback, after the chart
    # was written and the demo's directory kept.
    base = os.fsencode(tmp_path)
    chart = base + b"/c\xffd.png"
    tune = run("tune", str(items_file), "-q", "--json", "--budgets", "1K", "--chart", chart)
    assert tune.returncode == 0, tune.stderr
    report = json.loads(tune.stdout)
    assert report["chart_bytes"] == _b64(chart)
    assert "chart" not in report
    assert os.path.exists(chart)

    directory = base + b"/d\xffir"
    demo = run("demo", "--rows", "3", "--huge-bytes", "10", "-q", "--json", "--dir", directory)
    assert demo.returncode == 0, demo.stderr
    report = json.loads(demo.stdout)
    assert report["database_bytes"] == _b64(directory + b"/tickets.sqlite3")
    assert report["store_bytes"] == _b64(directory + b"/cursors.sqlite3")

    # UTF-8 bytes are text under any locale, also where Python decodes them as ASCII.
    utf8 = base + "/dé".encode()
    demo = run(
        "demo", "--rows", "3", "--huge-bytes", "10", "-q", "--json", "--dir", utf8, env=C_LOCALE
    )
    assert demo.returncode == 0, demo.stderr
    assert json.loads(demo.stdout)["database"] == os.fsdecode(utf8) + "/tickets.sqlite3"
    tune = run(
        "tune", str(items_file), "-q", "--json", "--budgets", "1K",
        "--chart", base + "/ché.png".encode(), env=C_LOCALE,
    )  # fmt: skip
    assert tune.returncode == 0, tune.stderr
    assert json.loads(tune.stdout)["chart"] == str(tmp_path / "ché.png")


# -- 2. the locale in cursor scopes and text options -------------------------------------


def _next_cursor(result: Any) -> str:
    assert result.returncode == 0, result.stderr
    cursor: str = json.loads(result.stdout)["next_cursor"]
    return cursor


@pytest.mark.parametrize(("first", "then"), [(C_LOCALE, UTF8_LOCALE), (UTF8_LOCALE, C_LOCALE)])
def test_regression_a_cursor_continues_under_another_locale(
    tmp_path: Path, first: dict[str, str], then: dict[str, str]
) -> None:
    # The path went into the scope as text under a UTF-8 locale and as base64 bytes
    # under LC_ALL=C (the same principal likewise): the cursor was refused, scope_query.
    (tmp_path / "é.json").write_text(json.dumps([{"id": i} for i in range(5)]))
    args = ["page", "é.json", "--store", "st.db", "--max-items", "2", "--principal", "ü"]
    cursor = _next_cursor(run(*args, env=first, cwd=tmp_path))
    rest = run(*args, "--cursor", cursor, env=then, cwd=tmp_path)
    assert rest.returncode == 0, rest.stderr
    assert [item["id"] for item in json.loads(rest.stdout)["items"]] == [2, 3]


def test_regression_text_options_are_utf8_whatever_the_locale(tmp_path: Path) -> None:
    # Under LC_ALL=C "ü" was held as lone surrogates: "query value holds a lone
    # surrogate" for page, a raw codec error for tune.
    db = tmp_path / "t.db"
    conn = sqlite3.connect(db)
    conn.execute("CREATE TABLE t (id INTEGER PRIMARY KEY, v TEXT)")
    conn.executemany("INSERT INTO t VALUES (?, ?)", [(1, "ü"), (2, "a"), (3, "ü")])
    conn.commit()
    conn.close()
    query = ["--query", "SELECT * FROM t WHERE v = ?", "--param", "ü", "--unique"]
    page = run("page", str(db), "--store", str(tmp_path / "st.db"), *query, env=C_LOCALE)
    assert page.returncode == 0, page.stderr
    assert [row["id"] for row in json.loads(page.stdout)["items"]] == [1, 3]
    tune = run("tune", str(db), *query, "-q", "--json", env=C_LOCALE)
    assert tune.returncode == 0, tune.stderr
    assert json.loads(tune.stdout)["items"] == 2
    # Bytes that are not UTF-8: a usage error naming the option, under any locale.
    for env in (ENV, C_LOCALE):
        bad = run("page", str(db), "--query", "SELECT 1", "--param", b"\xff", env=env)
        assert bad.returncode == 2
        assert "argument --param:" in one_error_line(bad)


# -- 3. counts and fractions: ASCII digits only ------------------------------------------


@pytest.mark.parametrize(
    "args",
    [
        ["dump", "{f}", "--max-items", "٢"],
        ["dump", "{f}", "--max-items", " +1_0 "],
        ["dump", "{f}", "--max-keys", "１"],
        ["dump", "{f}", "--max-depth", "٣"],
        ["page", "{f}", "--max-pages", "١"],
        ["page", "{f}", "--ttl", "٥"],
        ["demo", "--rows", "٣"],
        ["tune", "{f}", "--sample", "٢"],
        ["tune", "{f}", "--max-items", "+2"],
        ["tune", "{f}", "--goal-truncated", "٠.٥"],
        ["tune", "{f}", "--goal-truncated", "0.0_1"],
        ["tune", "{f}", "--goal-truncated", " 0.5"],
    ],
)
def test_regression_counts_take_ascii_digits_only(items_file: Path, args: list[str]) -> None:
    # type=int and float() took any script's digits ("٢" as 2), "_", "+" and spaces.
    result = run(*(a.replace("{f}", str(items_file)) for a in args))
    assert result.returncode == 2
    assert f"argument {args[-2]}:" in one_error_line(result)


def test_regression_a_negative_zero_goal_is_zero(items_file: Path) -> None:
    # "-0" was shown as "goal_truncated":-0.0 and "at most -0.0% cut".
    tune = run("tune", str(items_file), "-q", "--json", "--goal-truncated", "-0", "--budgets", "1K")
    assert tune.returncode == 0, tune.stderr
    assert b'"goal_truncated":0.0,' in tune.stdout
    table = run("tune", str(items_file), "-q", "--goal-truncated", "-0", "--budgets", "1K")
    assert table.returncode == 0, table.stderr
    assert b"at most 0.0% cut" in table.stdout


# -- 4. the cursor store -----------------------------------------------------------------


def test_regression_an_empty_store_is_a_usage_error(items_file: Path, tmp_path: Path) -> None:
    # It was taken for no option: the cursors went to the default store, unnamed.
    cache = tmp_path / "cache"
    env = {**ENV, "XDG_CACHE_HOME": str(cache)}
    result = run("page", str(items_file), "--store", "", "--max-items", "2", env=env)
    assert result.returncode == 2
    assert "--store is empty" in one_error_line(result)
    assert not cache.exists()


def test_regression_a_store_sqlite_cannot_open_is_named(items_file: Path, tmp_path: Path) -> None:
    # SQLite's "unable to open database file" named neither the store nor the cause.
    directory = tmp_path / "a dir"
    directory.mkdir()
    for store, cause in ((directory, "(a directory)"), (tmp_path / "no/x.db", "does not exist")):
        result = run("page", str(items_file), "--store", str(store))
        assert result.returncode == 1
        err = one_error_line(result)
        assert f"cannot open the cursor store {store}" in err
        assert cause in err


def test_regression_a_relative_xdg_cache_home_is_ignored(
    monkeypatch: pytest.MonkeyPatch, items_file: Path, tmp_path: Path
) -> None:
    # It was used relative to the current directory: a store wherever the command ran.
    monkeypatch.setenv("XDG_CACHE_HOME", "rel")
    monkeypatch.setenv("HOME", str(tmp_path / "home"))
    assert default_store_path() == str(tmp_path / "home/.cache/jsonbudget/cursors.sqlite3")
    work = tmp_path / "work"
    work.mkdir()
    env = {**ENV, "XDG_CACHE_HOME": "rel", "HOME": str(tmp_path / "home")}
    result = run("page", str(items_file), env=env, cwd=work)
    assert result.returncode == 0, result.stderr
    assert not (work / "rel").exists()
    assert (tmp_path / "home/.cache/jsonbudget/cursors.sqlite3").exists()


# -- 5. small ones -----------------------------------------------------------------------


def test_regression_the_demo_hint_pastes_as_printed(tmp_path: Path) -> None:
    # "try: jsonbudget page my demo/tickets.sqlite3" ran as two arguments: exit 2.
    directory = tmp_path / "my demo"
    demo = run("demo", "--rows", "3", "--huge-bytes", "10", "-q", "--dir", str(directory))
    assert demo.returncode == 0, demo.stderr
    last = demo.stdout.decode().splitlines()[-1]
    command = shlex.split(last.split(" — try: ", 1)[1])
    assert command[:3] == ["jsonbudget", "page", str(directory / "tickets.sqlite3")]
    store = ["--store", str(tmp_path / "st.db")]
    page = run(*command[1:], *store)
    assert page.returncode == 0, page.stderr
    assert len(json.loads(page.stdout)["items"]) == 3


def test_regression_the_chart_line_escapes_the_name(items_file: Path, tmp_path: Path) -> None:
    # "Chart written to NAME" wrote the name's newline and escape sequences raw.
    chart = tmp_path / "a\nb\x1b[2J.png"
    tune = run("tune", str(items_file), "-q", "--budgets", "1K", "--chart", str(chart))
    assert tune.returncode == 0, tune.stderr
    last = tune.stdout.decode().splitlines()[-1]
    assert last == f"Chart written to {tmp_path}/a\\x0ab\\x1b[2J.png"
    assert chart.exists()


@pytest.mark.parametrize("name", ["-", "", "x.svg", "chart"])
def test_regression_a_chart_name_is_checked_before_measuring(
    items_file: Path, tmp_path: Path, name: str
) -> None:
    # PNG bytes went into "x.svg", "-" made a file named "-", and "" failed only after
    # all the measuring, with an error naming nothing.
    result = run("tune", str(items_file), "-q", "--chart", name, cwd=tmp_path)
    assert result.returncode == 2
    assert "argument --chart:" in one_error_line(result)
    assert result.stdout == b""
    assert sorted(os.listdir(tmp_path)) == ["items.json"]


def test_regression_dump_json_without_report_is_a_usage_error(items_file: Path) -> None:
    # --json was ignored silently: no report, exit 0.
    result = run("dump", str(items_file), "--json")
    assert result.returncode == 2
    assert "--report" in one_error_line(result)
    assert result.stdout == b""


@pytest.mark.parametrize("command", ["page", "tune"])
def test_regression_the_kind_help_describes_auto_as_the_docs_do(command: str) -> None:
    # It said only "JSON Lines by .jsonl/.ndjson, else a JSON array".
    result = run(command, "--help")
    assert result.returncode == 0
    text = " ".join(result.stdout.decode().split())
    assert "the first value is not an array" in text
    assert "a whole array followed by more values" in text
    assert "a pipe needs --kind json or jsonl" in text


@pytest.mark.parametrize(
    ("data", "said"),
    [
        (b"1\nNaN\n", "line at byte 2: invalid JSON: NaN is not valid JSON"),
        (b'{"a": 1}\n\n Infinity', "Infinity is not valid JSON (at decoded byte 11)"),
        (b"1\nx\n", "invalid JSON: Expecting value (at decoded byte 2)"),
    ],
)
def test_regression_a_bad_line_after_a_first_value_is_named(data: bytes, said: str) -> None:
    # The line was not taken for JSON Lines (N, I and x start no value), and the error
    # said "content after the value" where --jsonl says what is wrong with the line.
    result = run("dump", stdin=data)
    assert result.returncode == 1
    err = one_error_line(result)
    assert said in err
    assert "content after the value" not in err
    assert said in one_error_line(run("dump", "--jsonl", stdin=data))


@pytest.mark.parametrize("command", ["page", "tune"])
def test_regression_a_dash_source_says_a_file_is_needed(command: str, tmp_path: Path) -> None:
    # "no such file: -" (exit 1), where dump reads stdin as "-".
    result = run(command, "-", stdin=b"[1, 2]", cwd=tmp_path)
    assert result.returncode == 2
    err = one_error_line(result)
    assert f"{command} needs a regular file, not -" in err
    assert "/dev/stdin" in err


@pytest.mark.skipif(not os.path.exists("/proc/self/mem"), reason="needs /proc/self/mem")
@pytest.mark.parametrize("command", ["dump", "page", "tune"])
def test_regression_an_os_error_without_a_file_name_names_the_input(
    command: str, tmp_path: Path
) -> None:
    # A read's EIO carries no file name: "error: [Errno 5] Input/output error".
    extra = ["--kind", "json"] if command != "dump" else []
    store = ["--store", str(tmp_path / "st.db")] if command == "page" else []
    result = run(command, "/proc/self/mem", *extra, *store)
    assert result.returncode == 1
    assert one_error_line(result).endswith("Input/output error: /proc/self/mem\n")

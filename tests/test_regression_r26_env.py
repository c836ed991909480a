"""The command line and the MCP read tool under other environments: a locale that is not
UTF-8, no home directory or a relative one, and ``python -OO``."""

from __future__ import annotations

import json
import os
import subprocess
import sys
import textwrap
from pathlib import Path
from typing import Any

import pytest

from jsonbudget import ResultReader, SpillStore
from jsonbudget._agents.spill import default_spill_dir

ROOT = Path(__file__).resolve().parent.parent
# The interpreter's own path, so that a subprocess imports the package this test imports.
ENV = {
    **os.environ,
    "PYTHONPATH": os.pathsep.join(p for p in sys.path if p),
    # -OO would write .opt-2.pyc files into the tree.
    "PYTHONDONTWRITEBYTECODE": "1",
}
#: Python's own non-UTF-8 locale: ASCII, names' other bytes held as surrogates.
C_LOCALE = {"LC_ALL": "C", "PYTHONUTF8": "0"}
#: What names a home or a user to Python: left out, as a container's user without a
#: passwd entry has none.
LOGIN = ("HOME", "USER", "LOGNAME", "LNAME", "USERNAME", "XDG_CACHE_HOME")
#: Runs the command as a user without a passwd entry (``docker run --user 12345``).
NO_PASSWD = textwrap.dedent(
    """
    import pwd, runpy, sys
    def no_entry(uid):
        raise KeyError(f"getpwuid(): uid not found: {uid}")
    pwd.getpwuid = no_entry
    sys.argv = ["jsonbudget", *sys.argv[1:]]
    runpy.run_module("jsonbudget", run_name="__main__", alter_sys=True)
    """
)


def env_with(**changes: str | None) -> dict[str, str]:
    env = {k: v for k, v in ENV.items() if k not in ("LANG", "LANGUAGE", "PYTHONIOENCODING")}
    for key, value in changes.items():
        if value is None:
            env.pop(key, None)
        else:
            env[key] = value
    return env


def run(
    *args: str | bytes, env: dict[str, str], cwd: Path | None = None, flags: tuple[str, ...] = ()
) -> Any:
    return subprocess.run(
        [sys.executable, *flags, "-m", "jsonbudget", *args],
        capture_output=True,
        env=env,
        cwd=cwd,
        timeout=120,
        check=False,
    )


# -- 1. JSON on stderr is UTF-8 whatever its encoding -----------------------------------


@pytest.mark.parametrize(
    "locale",
    [{"PYTHONIOENCODING": "ascii"}, {"PYTHONIOENCODING": "latin-1"}, C_LOCALE],
    ids=["ascii", "latin-1", "C"],
)
def test_regression_dump_json_report_was_not_json_under_a_non_utf8_stderr(
    tmp_path: Path, locale: dict[str, str]
) -> None:
    # orjson's bytes were decoded and encoded again by stderr's text layer: "é" came out
    # as `\xe9` (no JSON escape) under ASCII, as the byte 0xe9 (not UTF-8) under latin-1.
    doc = tmp_path / "k.json"
    doc.write_text(
        json.dumps({"clé→日本": "x" * 5000, "ü": list(range(300))}, ensure_ascii=False),
        encoding="utf-8",
    )
    result = run(
        "dump", str(doc), "--max-bytes", "300", "--report", "--json", env=env_with(**locale)
    )
    assert result.returncode == 0, result.stderr
    report = json.loads(result.stderr.decode("utf-8"))
    assert [t["path"] for t in report["truncations"]] == ["/clé→日本", "/ü/38"]
    assert result.stderr.count(b"\n") == 1
    # And stdout, as it always was: the document's own UTF-8 bytes.
    assert json.loads(result.stdout.decode("utf-8"))["clé→日本"].startswith("xxx")


@pytest.mark.parametrize("locale", [{"PYTHONIOENCODING": "ascii"}, C_LOCALE], ids=["ascii", "C"])
def test_every_json_output_is_utf8_under_a_non_utf8_locale(
    tmp_path: Path, locale: dict[str, str]
) -> None:
    items = tmp_path / "items.json"
    items.write_text(json.dumps([{"clé": "→" * 40}] * 30, ensure_ascii=False), encoding="utf-8")
    env = env_with(**locale, XDG_CACHE_HOME=str(tmp_path / "cache"))
    page = run("page", str(items), "--max-bytes", "1K", env=env)
    assert page.returncode == 0, page.stderr
    assert json.loads(page.stdout.decode("utf-8"))["items"][0] == {"clé": "→" * 40}
    tune = run("tune", str(items), "--json", "-q", env=env)
    assert tune.returncode == 0, tune.stderr
    assert json.loads(tune.stdout.decode("utf-8"))["items"] == 30


# -- 2. the default stores without a home ------------------------------------------------


@pytest.mark.parametrize("home", [None, "hm"], ids=["no-home", "relative-home"])
def test_regression_default_cursor_store_followed_the_current_directory(
    tmp_path: Path, home: str | None
) -> None:
    # With no home to expand "~" to, the store was ./~/.cache/jsonbudget/cursors.sqlite3
    # (a relative HOME: ./hm/.cache/...): one per directory, and a cursor made in one
    # directory was refused (exit 3) in another.
    runner = tmp_path / "no_passwd.py"
    runner.write_text(NO_PASSWD)
    items = tmp_path / "items.jsonl"
    items.write_text("".join(f'{{"id": {i}, "body": "{"x" * 50}"}}\n' for i in range(60)))
    temp = tmp_path / "tmp"
    temp.mkdir()
    env = env_with(**dict.fromkeys(LOGIN), TMPDIR=str(temp))
    if home is not None:
        env["HOME"] = home
    first, second = tmp_path / "a", tmp_path / "b"
    first.mkdir()
    second.mkdir()

    def page(cwd: Path, *extra: str) -> Any:
        return subprocess.run(
            [sys.executable, str(runner), "page", str(items), "--max-bytes", "1K", *extra],
            capture_output=True,
            env=env,
            cwd=cwd,
            timeout=120,
            check=False,
        )

    result = page(first)
    assert result.returncode == 0, result.stderr
    cursor = json.loads(result.stdout)["next_cursor"]
    result = page(second, "--cursor", cursor)
    assert result.returncode == 0, result.stderr
    assert json.loads(result.stdout)["items"][0]["id"] > 0
    assert not list(first.iterdir())
    assert not list(second.iterdir())
    store = temp / f"jsonbudget-cursors-{os.geteuid()}"
    assert (store / "cursors.sqlite3").is_file()
    assert store.stat().st_mode & 0o777 == 0o700


def test_a_shared_temp_store_directory_is_refused(tmp_path: Path) -> None:
    # Without a home the store is under the temporary directory every user shares: one
    # another user could have made first is not used.
    items = tmp_path / "items.json"
    items.write_text("[1, 2, 3]")
    temp = tmp_path / "tmp"
    store = temp / f"jsonbudget-cursors-{os.geteuid()}"
    store.mkdir(parents=True)
    store.chmod(0o777)
    result = run(
        "page", str(items), env=env_with(HOME="rel", XDG_CACHE_HOME=None, TMPDIR=str(temp))
    )
    assert result.returncode == 1
    err = result.stderr.decode()
    assert err.count("\n") == 1, err
    assert err.startswith(f"jsonbudget: error: the default cursor store's directory {store} ")
    assert "writable by group or others (mode 777)" in err
    assert err.endswith(": give --store\n")
    assert result.stdout == b""
    assert not list(store.iterdir())


def test_regression_spill_default_directory_was_relative_with_a_relative_home(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    # `Path.home()` gave HOME as it was: a result spilled before a chdir could not be
    # read after it.
    import tempfile

    from jsonbudget import ResultGate, read_result

    monkeypatch.delenv("XDG_CACHE_HOME", raising=False)
    monkeypatch.setenv("HOME", "h")
    monkeypatch.setattr(tempfile, "tempdir", str(tmp_path / "tmp"))
    (tmp_path / "tmp").mkdir()
    (tmp_path / "a").mkdir()
    (tmp_path / "b").mkdir()
    monkeypatch.chdir(tmp_path / "a")
    expected = tmp_path / "tmp" / f"jsonbudget-spill-{os.geteuid()}"
    assert default_spill_dir() == expected
    store = SpillStore()
    assert store.directory == expected
    reader = ResultReader(spill=store)
    gate = ResultGate(max_bytes=512, store=store, reader=reader, principal="alice")
    ref = json.loads(gate.gate({"rows": list(range(5000))}, label="tool").data)["spilled"]["ref"]
    monkeypatch.chdir(tmp_path / "b")
    page = read_result(ref, "/rows/4000", reader=reader, principal="alice")
    assert json.loads(page.data)["items"][0] == 4000
    assert not list((tmp_path / "a").iterdir())


# -- 3 and 4. python -OO -------------------------------------------------------------------

LIST_TOOLS = textwrap.dedent(
    """
    import asyncio, json, sys
    import fastmcp
    from mcp import Client
    from mcp.server.mcpserver import MCPServer
    from jsonbudget import ResultReader, SpillStore
    from jsonbudget.mcp import read_result_tool

    assert sys.flags.optimize == 2
    reader = ResultReader(spill=SpillStore(sys.argv[1]))  # the test's tmp_path
    server = MCPServer("s")
    server.tool()(read_result_tool(reader=reader))
    app = fastmcp.FastMCP("f")
    app.tool(read_result_tool(reader=reader))

    async def main():
        found = {}
        async with Client(server, mode="legacy") as c:
            found["mcp"] = [(t.name, t.description) for t in (await c.list_tools()).tools]
        async with fastmcp.Client(app) as c:
            found["fastmcp"] = [(t.name, t.description) for t in await c.list_tools()]
        print(json.dumps(found))

    asyncio.run(main())
    """
)


def test_regression_read_result_tool_had_no_description_under_OO(tmp_path: Path) -> None:
    # Its description was the inner function's docstring, which -OO drops: '' under the
    # SDK, None under FastMCP, for the tool every spill marker names.
    result = subprocess.run(
        [sys.executable, "-OO", "-c", LIST_TOOLS, str(tmp_path)],
        capture_output=True,
        env=ENV,
        timeout=120,
        check=False,
    )
    assert result.returncode == 0, result.stderr.decode()
    found = json.loads(result.stdout.splitlines()[-1])
    for sdk in ("mcp", "fastmcp"):
        [(name, description)] = found[sdk]
        assert name == "read_result"
        assert description.startswith("Read more of a spilled result: the value at the JSON")
        assert "pass the page's next_cursor back as `cursor`" in description


def test_regression_mcp_server_example_crashed_under_OO() -> None:
    # `__doc__.splitlines()` on the module's docstring, None under -OO.
    result = subprocess.run(
        [sys.executable, "-OO", str(ROOT / "examples" / "mcp_server.py"), "--help"],
        capture_output=True,
        env=ENV,
        timeout=120,
        check=False,
    )
    assert result.returncode == 0, result.stderr.decode()
    assert result.stderr == b""
    assert b"An MCP server (official `mcp` SDK 2.x)" in result.stdout


# -- 5. file names under a locale that is not UTF-8 ----------------------------------------


def test_regression_name_bytes_were_shown_as_surrogate_escapes_under_the_c_locale(
    tmp_path: Path,
) -> None:
    # The name's undecodable bytes were escaped (`\udcc3\udca9`) before the stream could
    # write them back: the demo's suggested command named no file.
    env = env_with(**C_LOCALE)
    demo = run("demo", "-q", "--dir", "dé".encode(), "--rows", "20", "--huge-bytes", "50000",
               env=env, cwd=tmp_path)  # fmt: skip
    assert demo.returncode == 0, demo.stderr
    last = demo.stdout.splitlines()[-1]
    assert last.startswith("Kept: dé/tickets.sqlite3 ".encode())
    assert last.endswith("try: jsonbudget page 'dé/tickets.sqlite3' --table tickets".encode())
    assert b"\\udc" not in demo.stdout
    # The command as printed, under the same locale, pages the database.
    page = run("page", "dé/tickets.sqlite3".encode(), "--table", "tickets", "--max-bytes", "4K",
               env={**env, "XDG_CACHE_HOME": str(tmp_path / "cache")}, cwd=tmp_path)  # fmt: skip
    assert page.returncode == 0, page.stderr
    missing = run("dump", "missing-é.json".encode(), env=env, cwd=tmp_path)
    assert missing.returncode == 1
    assert (
        missing.stderr == "jsonbudget: error: No such file or directory: missing-é.json\n".encode()
    )


@pytest.mark.parametrize("locale", [C_LOCALE, {"LC_ALL": "C.UTF-8"}], ids=["C", "C.UTF-8"])
def test_name_bytes_that_are_not_utf8_text_stay_escaped(
    tmp_path: Path, locale: dict[str, str]
) -> None:
    # Bytes that are not UTF-8, or spell a control character, never reach the terminal.
    for name, shown in (
        (b"x\xff\x1b.json", b"x\\udcff\\x1b.json"),
        (b"y\xc2\x9b.json", b"y\\udcc2\\udc9b.json" if "PYTHONUTF8" in locale else b"y\\x9b.json"),
    ):
        result = run("dump", name, env=env_with(**locale), cwd=tmp_path)
        assert result.returncode == 1
        assert result.stderr == b"jsonbudget: error: No such file or directory: " + shown + b"\n"

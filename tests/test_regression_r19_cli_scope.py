"""Regressions from reading the docs' shell claims against the command line, and the
query depth rule of `Scope`."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import pytest

from jsonbudget import Scope
from jsonbudget._cli.main import EXIT_USAGE, main, parse_size
from jsonbudget._cursors.scope import MAX_QUERY_DEPTH
from jsonbudget.errors import EncodeError


@pytest.fixture
def items_file(tmp_path: Path) -> Path:
    path = tmp_path / "items.json"
    path.write_text(json.dumps([{"id": i} for i in range(10)]))
    return path


@pytest.mark.parametrize(
    ("args", "help_of"),
    [
        (["dump", "-", "--max-bytes", "1.5K"], "jsonbudget dump"),
        (["tune", "x.json", "--budgets", "4K,,8K"], "jsonbudget tune"),
        (["page", "x.json", "--no-such-option"], "jsonbudget page"),
        (["no-such-command"], "jsonbudget"),
    ],
)
def test_regression_usage_errors_argparse_finds_are_one_line(
    args: list[str], help_of: str, capsys: pytest.CaptureFixture[str]
) -> None:
    # argparse printed its whole usage block and prefixed the message with the
    # subcommand ("jsonbudget dump: error: ..."), where the docs promise one line
    # starting "jsonbudget: error:".
    assert main(args) == EXIT_USAGE
    err = capsys.readouterr().err
    assert err.count("\n") == 1, err
    assert err.startswith("jsonbudget: error: ")
    assert err.endswith(f"(see '{help_of} --help')\n")


def test_regression_mode_is_refused_for_a_file_source(
    items_file: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    # --mode offset was accepted silently for a JSON file, where every other
    # SQLite-only option is a usage error.
    assert main(["page", str(items_file), "--mode", "offset"]) == EXIT_USAGE
    assert "apply to SQLite sources only" in capsys.readouterr().err
    assert main(["page", str(items_file), "--max-bytes", "4K"]) == 0
    assert json.loads(capsys.readouterr().out)["complete"] is True


@pytest.mark.parametrize("text", ["٦٤", "６４", "64\u0660"])
def test_regression_sizes_take_ascii_digits_only(text: str) -> None:
    # `\d` matched any script's digits: "٦٤" (Arabic-Indic) was read as 64 bytes.
    with pytest.raises(Exception, match="is not a size"):
        parse_size(text)
    assert parse_size("64b") == 64
    assert parse_size("64KiB") == 64 * 1024


def _chain(levels: int, leaf: Any) -> Any:
    value = leaf
    for _ in range(levels - 1):
        value = {"a": value}
    return value


@pytest.mark.parametrize("leaf", [{}, [], set(), {"b": 1}, [1]])
def test_regression_an_empty_container_past_the_query_depth_is_refused(leaf: Any) -> None:
    # The depth was checked on entering a child value, so an empty `{}` or `[]` at
    # level 65 was accepted while a non-empty one was refused.
    Scope("u", _chain(MAX_QUERY_DEPTH, leaf))  # 64 levels: accepted
    with pytest.raises(EncodeError, match=f"deeper than {MAX_QUERY_DEPTH}"):
        Scope("u", _chain(MAX_QUERY_DEPTH + 1, leaf))


@pytest.mark.parametrize(
    ("args", "help_of"),
    [(["dump", "--bogus"], "jsonbudget dump"), (["demo", "--mode", "offset"], "jsonbudget demo")],
)
def test_regression_an_unknown_option_names_its_subcommands_help(
    args: list[str], help_of: str, capsys: pytest.CaptureFixture[str]
) -> None:
    # "unrecognized arguments" comes from the top-level parser, which pointed at
    # `jsonbudget --help`, where dump's options are not listed.
    assert main(args) == EXIT_USAGE
    err = capsys.readouterr().err
    unknown = " ".join(args[1:])
    assert err == f"jsonbudget: error: unrecognized arguments: {unknown} (see '{help_of} --help')\n"


def test_regression_a_locked_database_is_named(tmp_path: Path) -> None:
    # "database is locked" said nothing of which file, where a page opens two.
    import argparse
    import sqlite3

    from jsonbudget._cli.main import _locked_by

    db = tmp_path / "tickets.db"
    with sqlite3.connect(db) as conn:
        conn.execute("CREATE TABLE t (id INTEGER PRIMARY KEY)")
    holder = sqlite3.connect(db, isolation_level=None)
    holder.execute("BEGIN EXCLUSIVE")
    try:
        with pytest.raises(sqlite3.OperationalError) as busy:
            sqlite3.connect(db, timeout=0).execute("SELECT * FROM t")
    finally:
        holder.close()
    args = argparse.Namespace(
        command="page", source=str(db), table="t", query=None, kind="auto", store="c.db"
    )
    assert _locked_by(busy.value, args) == (
        f" (another process holds a write lock on {db} or c.db)"
    )
    assert _locked_by(ValueError("x"), args) == ""
    args.store = "redis://localhost:6379/0"
    assert _locked_by(busy.value, args) == f" (another process holds a write lock on {db})"

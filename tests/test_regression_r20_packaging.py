"""Regressions found by a tester installing jsonbudget as a new user would (round 20).

Without redis or psycopg the stores and `PostgresSource` raised a bare
ModuleNotFoundError naming no extra; ``import jsonbudget.fastmcp`` without either extra
named the 'mcp' extra, then, once that was installed, 'fastmcp'; the hint for a missing
extra only worked in jsonbudget's source tree. The licence was declared without its text,
in a form setuptools stops taking; the wheel shipped the C sources and the sdist shipped
tests without the files they read.
"""

from __future__ import annotations

import re
import subprocess
import sys
import tomllib
from pathlib import Path
from typing import Any

import pytest

from jsonbudget._extras import missing_extra

ROOT = Path(__file__).resolve().parent.parent


def _hint(extra: str) -> str:
    return (
        f"install the '{extra}' extra (pip install 'jsonbudget[{extra}]',"
        f" or in jsonbudget's source tree: pip install '.[{extra}]')"
    )


def _without(module: str, code: str, *args: str) -> subprocess.CompletedProcess[str]:
    """Run *code* in a fresh interpreter where importing *module* fails."""
    return subprocess.run(
        [sys.executable, "-c", f"import sys; sys.modules[{module!r}] = None\n{code}", *args],
        capture_output=True,
        text=True,
        check=False,
    )


_RAISES = """
import jsonbudget
from jsonbudget._agents.redis_spill import RedisSpillStore
try:
    {call}
except ImportError as exc:
    print(type(exc).__name__, exc.name, exc, sep="|")
"""


@pytest.mark.parametrize(
    ("module", "call", "message"),
    [
        (
            "redis",
            "jsonbudget.RedisCursorStore('redis://127.0.0.1:1')",
            f"RedisCursorStore needs redis: {_hint('redis')}",
        ),
        (
            "redis",
            "RedisSpillStore('redis://127.0.0.1:1')",
            f"RedisSpillStore needs redis: {_hint('redis')}",
        ),
        (
            "psycopg",
            "jsonbudget.PostgresSource('host=x', table='t')",
            f"PostgresSource needs psycopg: {_hint('postgres')}",
        ),
    ],
    ids=["RedisCursorStore", "RedisSpillStore", "PostgresSource"],
)
def test_regression_missing_redis_or_psycopg_names_the_extra(
    module: str, call: str, message: str
) -> None:
    cp = _without(module, _RAISES.format(call=call))
    assert cp.stderr == ""
    assert cp.stdout == f"ImportError|{module}|{message}\n"


def test_regression_cli_without_redis_names_the_extra(tmp_path: Path) -> None:
    data = tmp_path / "a.json"
    data.write_bytes(b"[1,2,3]")
    cp = _without(
        "redis",
        "from jsonbudget._cli import run; raise SystemExit(run())",
        "page",
        str(data),
        "--store",
        "redis://127.0.0.1:1",
    )
    assert cp.returncode == 1
    assert cp.stderr == f"jsonbudget: error: RedisCursorStore needs redis: {_hint('redis')}\n"


def test_regression_fastmcp_without_either_extra_names_fastmcp() -> None:
    # The 'fastmcp' extra installs mcp too: naming 'mcp' first meant a second error.
    code = (
        "sys.modules['fastmcp'] = None\n"
        "try:\n"
        "    import jsonbudget.fastmcp\n"
        "except ImportError as exc:\n"
        "    print(exc)\n"
    )
    cp = _without("mcp", code)
    assert cp.stderr == ""
    assert cp.stdout == f"jsonbudget's FastMCP middleware needs fastmcp: {_hint('fastmcp')}\n"


def test_regression_missing_extra_hint_works_outside_the_source_tree() -> None:
    # '.[cli]' run in a wheel user's own project installs their project, not jsonbudget.
    message = str(missing_extra("cli", "rich", "the command line"))
    assert "pip install 'jsonbudget[cli]'" in message
    assert message == f"the command line needs rich: {_hint('cli')}"


def _pyproject() -> dict[str, Any]:
    return tomllib.loads((ROOT / "pyproject.toml").read_text(encoding="utf-8"))


def test_regression_license_text_ships_declared_as_pep_639() -> None:
    project = _pyproject()["project"]
    assert project["license"] == "MIT"
    assert project["license-files"] == ["LICENSE"]
    text = (ROOT / "LICENSE").read_text(encoding="utf-8")
    assert text.startswith("MIT License\n\nCopyright (c) 2026 the jsonbudget authors\n")
    assert "The above copyright notice and this permission notice shall be included" in text
    # The SPDX string and license-files are read from setuptools 77 on; older ones refuse.
    (requirement,) = _pyproject()["build-system"]["requires"]
    found = re.fullmatch(r"setuptools>=(\d+)", requirement)
    assert found is not None
    assert int(found[1]) >= 77


def test_regression_wheel_leaves_out_the_c_sources() -> None:
    excluded = _pyproject()["tool"]["setuptools"]["exclude-package-data"]
    assert excluded == {"*": ["*.c"]}
    # ... which the sdist still has, to build the extensions from.
    sources = re.findall(r'"(src/[^"]+\.c)"', (ROOT / "setup.py").read_text(encoding="utf-8"))
    assert len(sources) == 4
    assert all((ROOT / source).is_file() for source in sources)


def test_regression_sdist_holds_what_its_tests_read() -> None:
    manifest = (ROOT / "MANIFEST.in").read_text(encoding="utf-8").splitlines()
    grafted = {line.split()[1] for line in manifest if line.startswith("graft ")}
    assert grafted >= {"tests", "docs", "examples", "benches", "scripts", "fuzz"}
    assert "include LICENSE" in manifest


def test_regression_docs_quote_extras_for_zsh() -> None:
    # zsh reads an unquoted jsonbudget[redis] as a glob: "no matches found".
    pages = [ROOT / "README.md", *sorted((ROOT / "docs").glob("*.md"))]
    unquoted = [
        f"{page.name}: {line}"
        for page in pages
        for line in page.read_text(encoding="utf-8").splitlines()
        if re.search(r"pip install (?!['\"])\S*\[", line)
    ]
    assert unquoted == []

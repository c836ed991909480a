"""Regressions of the missing-extra message, caught by a user with another release of an
extra's package installed (langchain-mcp-adapters 0.3 asks for mcp<2)."""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path


def _release(root: Path, name: str, version: str) -> None:
    """An installed release of *name* that holds nothing: an import from it fails, as an
    import of a name a 1.x release lacks does."""
    (root / name).mkdir()
    (root / name / "__init__.py").write_text("")
    info = root / f"{name}-{version}.dist-info"
    info.mkdir()
    (info / "METADATA").write_text(f"Metadata-Version: 2.1\nName: {name}\nVersion: {version}\n")
    (info / "top_level.txt").write_text(f"{name}\n")


def _import(root: Path, module: str) -> str:
    code = f"try:\n    import {module}\nexcept ImportError as exc:\n    print(exc)\n"
    cp = subprocess.run(
        [sys.executable, "-c", f"import sys; sys.path.insert(0, {str(root)!r})\n{code}"],
        capture_output=True,
        text=True,
        check=False,
        timeout=120,
    )
    assert cp.stderr == ""
    return cp.stdout


def test_regression_an_old_mcp_release_was_reported_as_not_installed(tmp_path: Path) -> None:
    _release(tmp_path, "mcp", "1.30.0")
    said = _import(tmp_path, "jsonbudget.mcp")
    assert said.startswith("jsonbudget.mcp needs mcp<3,>=2.3; mcp 1.30.0 is installed,")
    assert "importing from it failed (No module named 'mcp." in said
    assert "pip install 'jsonbudget[mcp]'" in said


def test_a_package_that_is_not_installed_gets_the_plain_hint(tmp_path: Path) -> None:
    # Kept out of the import as the program may: the plain message, no release named.
    said = _import(tmp_path, "sys; sys.modules['mcp'] = None; import jsonbudget.mcp")
    assert said.startswith("jsonbudget.mcp needs mcp: install the 'mcp' extra")


def test_regression_a_half_removed_install_crashed_the_message(tmp_path: Path) -> None:
    # pip interrupted: a dist-info without its METADATA beside a package that holds
    # nothing. The message builder raised TypeError where the import's ImportError was due.
    (tmp_path / "mcp").mkdir()
    (tmp_path / "mcp" / "__init__.py").write_text("")
    info = tmp_path / "mcp-1.9.0.dist-info"
    info.mkdir()
    (info / "top_level.txt").write_text("mcp\n")
    said = _import(tmp_path, "jsonbudget.mcp")
    assert said.startswith("jsonbudget.mcp needs mcp")
    assert "None" not in said

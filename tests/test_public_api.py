"""One front door: the package exports exactly its curated, sorted ``__all__``."""

from __future__ import annotations

import subprocess
import sys
import types

import jsonbudget
from jsonbudget import errors


def _isort_key(name: str) -> tuple[int, str]:
    """Constants, then classes, then functions, each alphabetical (ruff's RUF022 order)."""
    return (0 if name.isupper() else 1 if name[0].isupper() else 2, name)


def test_all_is_sorted_and_unique() -> None:
    assert list(jsonbudget.__all__) == sorted(set(jsonbudget.__all__), key=_isort_key)


def test_public_names_match_all() -> None:
    public = {
        name
        for name, value in vars(jsonbudget).items()
        if not name.startswith("_")
        and not isinstance(value, types.ModuleType)
        and name != "annotations"
    }
    assert public == set(jsonbudget.__all__)


def test_every_error_is_exported_and_under_the_base() -> None:
    for name in errors.__all__:
        cls = getattr(errors, name)
        assert issubclass(cls, jsonbudget.JsonBudgetError)
        assert getattr(jsonbudget, name) is cls


def test_error_leaves_keep_the_stdlib_class_users_catch() -> None:
    assert issubclass(jsonbudget.LimitError, ValueError)
    assert issubclass(jsonbudget.EncodeError, TypeError)
    assert issubclass(jsonbudget.CursorError, ValueError)
    assert issubclass(jsonbudget.OversizedItemError, ValueError)
    assert issubclass(jsonbudget.SpillError, OSError)


def test_import_needs_no_optional_dependency() -> None:
    code = (
        "import sys, jsonbudget; "
        "bad = [m for m in ('redis', 'psycopg', 'mcp', 'matplotlib') if m in sys.modules]; "
        "print(bad)"
    )
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True)
    assert out.stdout.strip() == "[]"

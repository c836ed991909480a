"""One front door: the package exports exactly its curated, sorted ``__all__``."""

from __future__ import annotations

import ast
import re
import subprocess
import sys
import types
import typing
from pathlib import Path

import pytest

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


ERROR_SAMPLES = [
    errors.LimitError("max_bytes", 3, "too small"),
    errors.EncodeError("no JSON form", path="/a"),
    errors.DecodeError("bad byte", offset=3),
    errors.OversizedItemError(index=1, encoded_bytes=5000, limit=300),
    errors.SpillError("gone"),
    errors.SpillError(2, "No such file or directory", "spill/x.json"),
    errors.TokenizerUnavailable("not cached"),
    errors.InvalidCursor("garbled"),
    errors.ExpiredCursor("expired"),
    errors.CursorScopeError("another principal", mismatch="principal"),
    errors.BudgetExhausted(limit=2, used=2),
]


def _raise(error: Exception) -> None:
    raise error


def test_regression_errors_cross_process_boundaries() -> None:
    """Errors with keyword-only data could not be unpickled (their __init__ was called
    with the message alone): a process pool whose worker raised CursorScopeError or
    BudgetExhausted broke (BrokenProcessPool) instead of raising it."""
    import copy
    import pickle
    from concurrent.futures import ProcessPoolExecutor

    for error in ERROR_SAMPLES:
        for back in (pickle.loads(pickle.dumps(error)), copy.copy(error)):
            assert type(back) is type(error)
            assert str(back) == str(error)
            assert back.__dict__ == error.__dict__
            assert getattr(back, "reason", None) == getattr(error, "reason", None)
            # Fields of ImportError and OSError of their own, which `args` does not hold.
            for field in ("msg", "name", "path", "errno", "strerror", "filename"):
                assert getattr(back, field, None) == getattr(error, field, None), field
    with ProcessPoolExecutor(1) as pool:
        for error in ERROR_SAMPLES[-2:]:
            raised = pool.submit(_raise, error).exception()
            assert type(raised) is type(error)
            assert raised.http_status == error.http_status  # type: ignore[attr-defined]


def test_import_needs_no_optional_dependency() -> None:
    code = (
        "import sys, jsonbudget; "
        "optional = ('redis', 'psycopg', 'mcp', 'matplotlib', 'rich', 'pydantic', 'attrs', "
        "'numpy', 'msgspec', 'fastmcp', 'agents', 'pydantic_ai', 'langchain_core', 'structlog'); "
        "bad = [m for m in optional if m in sys.modules]; "
        "print(bad)"
    )
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True)
    assert out.stdout.strip() == "[]"


def test_public_objects_name_the_front_door() -> None:
    for name in jsonbudget.__all__:
        value = getattr(jsonbudget, name)
        if isinstance(value, type) or callable(value):
            assert value.__module__ == "jsonbudget", name
    assert repr(jsonbudget.Limits(100)).startswith("Limits(")
    assert "jsonbudget.LimitError" in repr(jsonbudget.LimitError) or (
        jsonbudget.LimitError.__module__ == "jsonbudget"
    )


def test_typing_module_names_the_modes() -> None:
    import jsonbudget.typing as jt

    assert list(jt.__all__) == sorted(jt.__all__)
    assert typing.get_args(jt.Strategy) == ("balanced", "prefix")
    assert "truncate" in typing.get_args(jt.OversizedPolicy)
    for name in jt.__all__:
        assert getattr(jt, name) is not None


def test_regression_typing_names_are_runtime_types() -> None:
    """JSONValue, Position and SourceLike were string aliases: `Position | None` in a
    user's annotation raised TypeError at import (see tests/test_typing.py)."""
    import jsonbudget.typing as jt

    for name in jt.__all__:
        value = getattr(jt, name)
        assert not isinstance(value, str), name
        assert (value | None) is not None, name


SRC = Path(jsonbudget.__file__).parent


def _part(module: str) -> str:
    """The wing or core part a module belongs to: its first package below jsonbudget."""
    parts = module.split(".")
    return parts[1] if len(parts) > 2 else module


def _private_cross_imports(src: Path = SRC) -> list[str]:
    """Every ``from X import _name`` where X is in another part than the importer."""
    found = []
    for path in sorted(src.rglob("*.py")):
        rel = path.relative_to(src.parent).with_suffix("")
        module = ".".join(rel.parts).removesuffix(".__init__")
        package = module if path.name == "__init__.py" else module.rpartition(".")[0]
        for node in ast.walk(ast.parse(path.read_text(encoding="utf-8"))):
            if not isinstance(node, ast.ImportFrom):
                continue
            if node.level:
                base = package.split(".")
                base = base[: len(base) - node.level + 1]
                target = ".".join([*base, node.module] if node.module else base)
            else:
                target = node.module or ""
            if not target.startswith("jsonbudget"):
                continue
            for alias in node.names:
                full = f"{target}.{alias.name}"
                if _part(full if alias.name.startswith("_") else target) == _part(module):
                    continue  # inside one part, private names are shared freely
                if alias.name.startswith("_") and alias.name not in ("__version__",):
                    found.append(f"{module} imports {target}.{alias.name}")
    return found


def test_no_part_imports_another_parts_private_names() -> None:
    assert _private_cross_imports() == []


def test_cross_import_check_sees_a_violation(tmp_path: Path) -> None:
    # The check above must be able to fail: a private name taken across parts is caught,
    # one shared inside a part is not.
    pkg = tmp_path / "jsonbudget"
    (pkg / "_pages").mkdir(parents=True)
    (pkg / "_pages" / "builder.py").write_text(
        "from .._encode.encoder import Encoder, _complete\nfrom ._envelope import _keys\n",
        encoding="utf-8",
    )
    assert _private_cross_imports(pkg) == [
        "jsonbudget._pages.builder imports jsonbudget._encode.encoder._complete"
    ]


def test_regression_the_error_tree_in_the_docs_is_the_modules_docstring() -> None:
    # docs/errors.md says its tree is the docstring of jsonbudget.errors; the two had
    # drifted (the docstring named an `outcome="error"` option that does not exist).
    docs = (Path(__file__).resolve().parents[1] / "docs" / "errors.md").read_text()
    shown = docs.split("```text\n", 1)[1].split("```", 1)[0].rstrip("\n").splitlines()
    assert errors.__doc__ is not None
    drawn = errors.__doc__.split("::\n\n", 1)[1].split("\n\n", 1)[0].splitlines()
    assert [line.removeprefix("    ") for line in drawn] == shown


def _doc_code_spans() -> set[str]:
    """The identifiers inside inline code spans of docs/*.md (fenced blocks left out)."""
    fence = re.compile(r"^```.*?^```[ \t]*$", re.MULTILINE | re.DOTALL)
    span = re.compile(r"(?<!`)`([^`]+)`(?!`)")
    words: set[str] = set()
    for path in sorted((Path(__file__).resolve().parent.parent / "docs").glob("*.md")):
        prose = fence.sub("", path.read_text(encoding="utf-8"))
        for code in span.findall(prose):
            words.update(re.findall(r"[A-Za-z_]\w*", code))
    return words


def test_regression_every_public_name_is_documented() -> None:
    # BudgetRow, OversizedItem and SizeStats were exported and documented nowhere; an
    # import line or an example does not count, a code span in the prose does.
    documented = _doc_code_spans()
    assert [name for name in jsonbudget.__all__ if name not in documented] == []


def test_regression_public_classes_resolve_their_annotations() -> None:
    """Public classes are shown as `jsonbudget.X`, and typing.get_type_hints (pydantic,
    FastAPI) read their string annotations in that namespace: 13 classes (Page,
    Truncation, ReadPage, ...) raised NameError for the private modules' names."""
    import pydantic

    import jsonbudget.typing as jt

    classes = [getattr(jsonbudget, n) for n in jsonbudget.__all__]
    failed = []
    for cls in (c for c in classes if isinstance(c, type)):
        try:
            typing.get_type_hints(cls)
        except NameError as exc:
            failed.append(f"{cls.__name__}: {exc}")
    assert failed == []
    assert typing.get_type_hints(jsonbudget.ReadPage)["kind"] == jt.ReadKind
    adapter = pydantic.TypeAdapter(jsonbudget.Truncation)
    made = adapter.validate_python({"path": "/a", "kind": "string", "omitted": 3, "unit": "chars"})
    assert made == jsonbudget.Truncation("/a", "string", 3, "chars")
    with pytest.raises(pydantic.ValidationError):
        adapter.validate_python({"path": "/a", "kind": "nope", "omitted": 3, "unit": "chars"})

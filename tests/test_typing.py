"""What a user who type-checks sees: small programs checked by ``mypy --strict``, and the
public types at run time.

The programs are written into a temporary directory and checked in one mypy run (a
module fixture), each test asserting that its own program is clean. An error a program
expects is written with ``# type: ignore[code]``: strict mode reports an ignore that
nothing needed, so the expected error is asserted too (a call that should be refused).
"""

from __future__ import annotations

import importlib.util
import inspect
import re
import typing
from pathlib import Path

import pytest

import jsonbudget
import jsonbudget.fastmcp
import jsonbudget.integrations.langchain
import jsonbudget.integrations.openai_agents
import jsonbudget.integrations.pydantic_ai
import jsonbudget.mcp
import jsonbudget.typing
from tests.typecheck import strict_errors

DOCS = Path(__file__).resolve().parent.parent / "docs"

# Each program, by its file name. The docs' blocks that call `.close()` on an `open()`
# iterator are added by `_docs_close_blocks`.
PROGRAMS: dict[str, str] = {
    # Finding: `open()` was typed Iterator (no close()) and `aopen()` AsyncIterator (no
    # aclose()), though the docs tell callers to close what they opened.
    "sources_close": """
        import asyncio
        import json
        import os
        import sqlite3
        import tempfile
        from collections.abc import AsyncGenerator, Generator
        from typing import Any, assert_type

        from jsonbudget import (
            AsyncIterableSource,
            IterableSource,
            JsonArrayFileSource,
            JsonLinesSource,
            PostgresSource,
            SequenceSource,
            SQLiteSource,
        )
        from jsonbudget.typing import Position

        it = SequenceSource([1, 2]).open(None, limit_hint=1)
        assert_type(it, Generator[tuple[int, Position], None, None])
        next(it)
        it.close()
        IterableSource(lambda: iter(["a"])).open(None).close()

        path = os.path.join(tempfile.mkdtemp(), "rows.json")
        with open(path, "w") as f:
            json.dump([1, 2], f)
        JsonArrayFileSource(path).open(None).close()
        JsonLinesSource(path).open(None).close()

        conn = sqlite3.connect(":memory:")
        rows = SQLiteSource(conn, table="t").open(None, limit_hint=2)
        assert_type(rows, Generator[tuple[dict[str, Any], Position], None, None])
        rows.close()

        def close_pg(source: PostgresSource) -> None:
            source.open(None).close()

        class Numbers:
            def __aiter__(self) -> AsyncGenerator[int, None]:
                return self.gen()

            async def gen(self) -> AsyncGenerator[int, None]:
                yield 1

        async def main() -> None:
            ait = AsyncIterableSource(Numbers()).aopen(None)
            assert_type(ait, AsyncGenerator[tuple[int, Position], None])
            await anext(ait)
            await ait.aclose()

        asyncio.run(main())
    """,
    # Finding: the aliases were strings; statically they must stay the recursive JSON type.
    "aliases": """
        from collections.abc import Iterator

        from jsonbudget import Limits, MemoryCursorStore, Scope, paginate
        from jsonbudget.typing import JSONValue, Position, SourceLike

        class Numbers:
            def open(
                self, position: Position | None, *, limit_hint: int | None = None
            ) -> Iterator[tuple[int, Position]]:
                start = position if isinstance(position, int) else 0
                for i in range(start, 100):
                    yield i, i + 1

            def describe(self) -> dict[str, JSONValue]:
                return {"kind": "numbers"}

        good: JSONValue = {"a": [1, 2.5, "x", None, True, {"b": []}]}
        bad: JSONValue = {"a": [object()]}  # type: ignore[list-item]
        source: SourceLike = Numbers()
        page = paginate(source, scope=Scope("me"), store=MemoryCursorStore(), limits=Limits(512))
    """,
    # Finding: paginated_tool typed its tool `def (*Any, **Any) -> Any`: no parameters, and
    # a result that strict mode refused to return as the documented CallToolResult.
    "mcp_tool": """
        import asyncio
        from typing import Any, assert_type

        from mcp.server.mcpserver import MCPServer
        from mcp.types import CallToolResult

        from jsonbudget import MemoryCursorStore
        from jsonbudget.mcp import paginated_tool

        server = MCPServer("tickets")

        @server.tool()
        @paginated_tool(max_bytes=16384, store=MemoryCursorStore())
        def list_tickets(status: str | None = None) -> list[dict[str, Any]]:
            return [{"id": i, "status": status} for i in range(1000)]

        @server.tool()
        @paginated_tool(max_bytes=16384, store=MemoryCursorStore())
        async def search(query: str, *, limit: int = 10) -> list[dict[str, Any]]:
            return [{"id": i, "q": query} for i in range(limit)]

        @paginated_tool(max_bytes=16384, store=MemoryCursorStore())
        def loaded(raw: str) -> Any:
            return raw.split()

        def first_page() -> CallToolResult:
            return list_tickets(status="open", cursor=None)

        assert_type(list_tickets(status="open"), CallToolResult)
        assert_type(loaded("a b"), CallToolResult)

        async def main() -> None:
            assert_type(await search("cats", cursor=None), CallToolResult)

        result: CallToolResult = asyncio.run(search("cats", limit=3))
        list_tickets(42, colour="red")  # type: ignore[call-overload]
        _ = search(query=1)  # type: ignore[call-overload]
    """,
    # Finding: read_bounded_text and BoundedReader.read took bytes only, though the docs
    # (and the code) take bytearray and memoryview too.
    "reader": """
        from collections.abc import Iterator

        from jsonbudget import BoundedReader, read_bounded_text

        def chunks() -> Iterator[bytearray]:
            yield bytearray(b"ab")

        buf = bytearray(b'{"rows": [1, 2, 3]}')
        read_bounded_text(buf, 8)
        read_bounded_text(memoryview(buf), 8)
        read_bounded_text([bytearray(b"ab"), memoryview(b"cd"), b"ef"], 3)
        read_bounded_text(chunks(), 3)
        BoundedReader(8).read(buf)
        read_bounded_text("text", 8)  # type: ignore[arg-type]
    """,
    # Finding: bounded_tool lost the signature (mypy) when the tool's return type held Any,
    # and took a sync `-> Any` tool for a coroutine (pyright).
    "bounded_tool": """
        import asyncio
        import json
        from typing import Any, assert_type

        from jsonbudget import bounded_tool

        @bounded_tool(max_bytes=2000)
        async def search(query: str) -> list[dict[str, Any]]:
            return [{"id": i, "title": f"{query} #{i}"} for i in range(100)]

        @bounded_tool(max_bytes=2000)
        def lookup(raw: str) -> Any:
            return json.loads(raw)

        @bounded_tool(max_bytes=2000, output="bytes")
        def record(key: str) -> dict[str, Any]:
            return {"key": key}

        async def main() -> None:
            assert_type(await search("cats"), str)

        assert_type(lookup('{"a": 1}'), str)
        assert_type(record("k"), bytes)
        out: str = asyncio.run(search("cats"))
        _ = search(123)  # type: ignore[arg-type]
        lookup(raw=1)  # type: ignore[arg-type]
    """,
    # Minor findings: a langchain Tool stays a Tool; the compiled join_reports refuses a list.
    "minor": """
        from typing import assert_type

        from langchain_core.tools import BaseTool, StructuredTool, Tool

        from jsonbudget import TurnBudget
        from jsonbudget._encode import _speedups
        from jsonbudget.integrations.langchain import budget_tool

        def echo(text: str) -> str:
            return text

        turn = TurnBudget(max_bytes=4096)
        simple: Tool = budget_tool(Tool(name="echo", func=echo, description="Echo."), turn)
        structured = StructuredTool.from_function(echo)
        assert_type(budget_tool(structured, turn), BaseTool)
        _speedups.join_reports([], "", [], print)  # type: ignore[arg-type]
    """,
}


def _docs_close_blocks() -> dict[str, str]:
    """The ```python blocks of docs/sources.md that close an `open()` iterator."""
    text = (DOCS / "sources.md").read_text(encoding="utf-8")
    blocks = re.findall(r"^```python\n(.*?)^```", text, re.S | re.M)
    found = {f"docs_sources_{i}": b for i, b in enumerate(blocks) if ".close()" in b}
    assert found, "docs/sources.md has no example that closes an open() iterator"
    # One prints a file position's byte offset (`first[1]["o"]`) without narrowing the
    # JSON union first, as user code checked strictly would.
    header = '# mypy: disable-error-code="index, call-overload"\n'
    return {name: header + block for name, block in found.items()}


@pytest.fixture(scope="module")
def mypy_errors(tmp_path_factory: pytest.TempPathFactory) -> dict[str, list[str]]:
    """mypy --strict's errors for each program, by program name (one run for all)."""
    programs = dict(PROGRAMS)
    programs.update(_docs_close_blocks())
    return strict_errors(tmp_path_factory.mktemp("typing"), programs)


def test_regression_provided_sources_open_a_closable_generator(
    mypy_errors: dict[str, list[str]],
) -> None:
    """`open()` was typed `Iterator` and `aopen()` `AsyncIterator`, so the `.close()` /
    `.aclose()` the docs prescribe was a strict-mode error on every provided source."""
    assert mypy_errors["sources_close"] == []


def test_regression_docs_examples_that_close_an_iterator_type_check(
    mypy_errors: dict[str, list[str]],
) -> None:
    """docs/sources.md's SQLiteSource and JsonArrayFileSource examples call `it.close()`,
    which failed `mypy --strict` (`has no attribute "close"`)."""
    docs = {name: errs for name, errs in mypy_errors.items() if name.startswith("docs_")}
    assert docs
    assert all(errs == [] for errs in docs.values()), docs


def test_json_aliases_stay_recursive_for_type_checkers(mypy_errors: dict[str, list[str]]) -> None:
    assert mypy_errors["aliases"] == []


def test_regression_paginated_tool_keeps_parameters_and_result(
    mypy_errors: dict[str, list[str]],
) -> None:
    """paginated_tool was typed `Callable[..., Any]`: wrong arguments passed unnoticed, and
    returning a page as the documented `CallToolResult` was `no-any-return`."""
    assert mypy_errors["mcp_tool"] == []


def test_regression_reader_takes_bytes_like_objects(mypy_errors: dict[str, list[str]]) -> None:
    """read_bounded_text and BoundedReader.read were typed `bytes` only: a bytearray, a
    memoryview or chunks of them (documented, and read at run time) were refused."""
    assert mypy_errors["reader"] == []


def test_regression_bounded_tool_keeps_signature_when_return_holds_any(
    mypy_errors: dict[str, list[str]],
) -> None:
    """A tool returning `dict[str, Any]` (async) or `Any` (sync) matched both of
    `ToolDecorator.__call__`'s overloads "because of Any", and mypy typed it
    `def (*Any, **Any) -> Any`: every call an untyped call, wrong arguments unnoticed."""
    assert mypy_errors["bounded_tool"] == []


def test_regression_minor_types(mypy_errors: dict[str, list[str]]) -> None:
    """budget_tool typed a `Tool` back as `BaseTool` (docs: "a Tool stays a Tool"), and the
    stub of the compiled `join_reports` took any sequence, though it refuses a list."""
    assert mypy_errors["minor"] == []


# -- at run time ----------------------------------------------------------------------------

_USER_MODULE = """
import typing
from collections.abc import Iterator

from jsonbudget import Limits, MemoryCursorStore, Scope, paginate
from jsonbudget.typing import JSONValue, Position, SourceLike


class Numbers:
    def open(
        self, position: Position | None, *, limit_hint: int | None = None
    ) -> Iterator[tuple[int, Position]]:
        start = position if isinstance(position, int) else 0
        for i in range(start, 100):
            yield i, i + 1

    def describe(self) -> dict[str, JSONValue]:
        return {"kind": "numbers"}


def page_of(source: SourceLike) -> list[JSONValue]:
    return list(paginate(source, scope=Scope("me"), store=MemoryCursorStore(),
                         limits=Limits(512)).items)


HINTS = typing.get_type_hints(Numbers.open)
ITEMS = page_of(Numbers())
"""


def test_regression_aliases_are_runtime_types(tmp_path: Path) -> None:
    """`Position`, `JSONValue` and `SourceLike` were strings at run time: a source written
    as the docs show it (`position: Position | None`) raised TypeError at import in a
    module without `from __future__ import annotations`."""
    path = tmp_path / "user_source.py"
    path.write_text(_USER_MODULE, encoding="utf-8")
    spec = importlib.util.spec_from_file_location("user_source", path)
    assert spec is not None
    assert spec.loader is not None
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    assert module.ITEMS[:3] == [0, 1, 2]
    position = module.HINTS["position"]
    assert int in typing.get_args(position)
    assert type(None) in typing.get_args(position)
    for alias in (jsonbudget.typing.JSONValue, jsonbudget.typing.Position):
        assert not isinstance(alias, str)
        # The recursion resolves from a module that imports neither name.
        resolved = typing.get_type_hints(_annotated(alias))["value"]
        origins = {typing.get_origin(a) for a in typing.get_args(resolved)}
        assert {list, dict} <= origins
    assert jsonbudget.typing.Source[typing.Any] in typing.get_args(jsonbudget.typing.SourceLike)


def _annotated(hint: object) -> typing.Callable[..., None]:
    """A function whose parameter is annotated *hint*, in a module namespace that holds
    none of jsonbudget's names (where a forward reference would be looked up)."""
    namespace: dict[str, typing.Any] = {}
    exec("def f(value): pass", namespace)
    f: typing.Callable[..., None] = namespace["f"]
    f.__annotations__ = {"value": hint}
    return f


def _public_callables() -> list[tuple[str, object]]:
    """Every public function, and every public method (and ``__init__``) of every public
    class, of jsonbudget and its optional modules."""
    modules = [
        jsonbudget,
        jsonbudget.mcp,
        jsonbudget.fastmcp,
        jsonbudget.integrations.langchain,
        jsonbudget.integrations.openai_agents,
        jsonbudget.integrations.pydantic_ai,
    ]
    found: dict[int, tuple[str, object]] = {}
    for module in modules:
        for name in getattr(module, "__all__", ()):
            obj = getattr(module, name)
            if inspect.isclass(obj):
                for attr, value in vars(obj).items():
                    if callable(value) and (not attr.startswith("_") or attr == "__init__"):
                        found.setdefault(id(value), (f"{module.__name__}.{name}.{attr}", value))
            elif inspect.isfunction(obj) or inspect.isbuiltin(obj):
                found.setdefault(id(obj), (f"{module.__name__}.{name}", obj))
    return list(found.values())


# psycopg is an optional dependency: its module is imported for type checking only.
_UNRESOLVABLE = {"jsonbudget.PostgresSource.__init__"}


def test_regression_get_type_hints_resolves_public_callables() -> None:
    """`typing.get_type_hints` failed on paginate, apaginate, Paginator.paginate,
    Page.__init__, PageBuilder.finish, every source's open/aopen/fill and McpPager's
    pagers (NameError / TypeError), through the string aliases."""
    failed = []
    checked = 0
    for label, fn in _public_callables():
        if label in _UNRESOLVABLE:
            continue
        try:
            typing.get_type_hints(fn)
        except (NameError, TypeError) as exc:
            failed.append(f"{label}: {type(exc).__name__}: {exc}")
        checked += 1
    assert failed == []
    assert checked > 100

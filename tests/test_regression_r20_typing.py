"""The static types of bounded_tool, paginated_tool, read_result_tool, tune and the
mode names, as a user checking with ``mypy --strict`` sees them (round 20).

Each program is checked in one mypy run (a module fixture), as in test_typing.py; an
error a program expects is written with ``# type: ignore[code]``, which strict mode
reports when nothing needed it, so the refusal is asserted too.
"""

from __future__ import annotations

import re
import tempfile
import typing
from pathlib import Path

import pytest

import jsonbudget.typing as jt
from jsonbudget import OutputCapRetry
from tests.typecheck import strict_errors

DOCS = Path(__file__).resolve().parent.parent / "docs"

PROGRAMS: dict[str, str] = {
    # A function declared to return MCP results was typed as returning str (or bytes),
    # though the wrapper returns a fitted CallToolResult.
    "mcp_results": """
        import asyncio
        from typing import Any, assert_type
        from collections.abc import Coroutine

        from fastmcp.tools import ToolResult
        from mcp.server.mcpserver import Image
        from mcp.types import CallToolResult, ContentBlock, ImageContent, TextContent

        from jsonbudget import bounded_tool

        @bounded_tool(max_bytes=4096)
        def check() -> CallToolResult:
            return CallToolResult(content=[TextContent(text="disk full")], is_error=True)

        @bounded_tool(max_bytes=4096, output="bytes")
        async def blocks() -> list[ContentBlock]:
            return [ImageContent(data="AAAA", mime_type="image/png")]

        @bounded_tool(max_bytes=4096)
        def fm() -> ToolResult:
            return ToolResult(content="hi")

        @bounded_tool(max_bytes=4096, output="json")
        def picture(n: int) -> Image | TextContent:
            return TextContent(text=str(n))

        @bounded_tool(max_bytes=4096)
        def rows() -> list[Any]:
            return [1, 2]

        assert_type(check(), CallToolResult)
        assert_type(blocks(), Coroutine[Any, Any, CallToolResult]).close()
        assert_type(fm(), CallToolResult)
        assert_type(picture(1), CallToolResult)
        assert_type(rows(), str)
        print(check().is_error, asyncio.run(blocks()).content[0].type)
        check().upper()  # type: ignore[attr-defined]
    """,
    # A tool typed `Callable[P, Awaitable[T]]` (an async decorator's result) was typed
    # sync, though at run time it returns a coroutine.
    "awaitable": """
        import functools
        from collections.abc import Awaitable, Callable, Coroutine
        from typing import Any, ParamSpec, TypeVar, assert_type

        from mcp.types import CallToolResult

        from jsonbudget import bounded_tool
        from jsonbudget.mcp import paginated_tool

        P = ParamSpec("P")
        T = TypeVar("T")

        def logged(fn: Callable[P, Awaitable[T]]) -> Callable[P, Awaitable[T]]:
            @functools.wraps(fn)
            async def wrapper(*args: P.args, **kwargs: P.kwargs) -> T:
                return await fn(*args, **kwargs)
            return wrapper

        @bounded_tool(max_bytes=4096)
        @logged
        async def search(q: str) -> list[dict[str, str]]:
            return [{"q": q}]

        @paginated_tool(max_bytes=16384)
        @logged
        async def listing(q: str) -> list[int]:
            return [1, 2, 3]

        assert_type(search("cats"), Coroutine[Any, Any, str]).close()
        assert_type(listing("cats"), Coroutine[Any, Any, CallToolResult]).close()
        text: str = search("cats")  # type: ignore[assignment]
    """,
    # A sweep found the MCP shape too loose (a dataclass with a `content` and an
    # `is_error` was typed CallToolResult) and output="json" typed by a shape no union
    # keeps (`dict[str, int] | list[int]` as list[Any]): such values stay what they are.
    "look_alikes": """
        import dataclasses
        from typing import Any, assert_type

        from jsonbudget import bounded_tool

        @dataclasses.dataclass
        class Reply:
            content: list[str]
            is_error: bool = False

        @bounded_tool(max_bytes=4096)
        def reply() -> Reply:
            return Reply(["x"])

        @bounded_tool(max_bytes=4096, output="json")
        def either(key: str) -> dict[str, int] | list[int]:
            return {key: 1}

        assert_type(reply(), str)
        assert_type(either("a"), Any)
    """,
    # tune's progress refused a counter that returns a value.
    "progress": """
        from jsonbudget._cli.tune import tune

        class Meter:
            def __init__(self) -> None:
                self.total = 0

            def add(self, n: int) -> int:
                self.total += n
                return self.total

        report = tune([{"id": i} for i in range(10)], budgets=(4096,), progress=Meter().add)
    """,
    # The decorators' types had no public name: a helper returning one could not be
    # annotated without erasing the tool's signature.
    "factories": """
        from typing import Any, assert_type

        from mcp.types import CallToolResult

        from jsonbudget import bounded_tool
        from jsonbudget.mcp import PaginatedToolDecorator, ReadResultTool, paginated_tool
        from jsonbudget.typing import ToolDecorator

        def project_tool(max_bytes: int = 8192) -> ToolDecorator[str]:
            return bounded_tool(max_bytes=max_bytes)

        def project_json_tool(max_bytes: int = 8192) -> ToolDecorator[Any]:
            return bounded_tool(max_bytes=max_bytes, output="json")

        def project_pages(max_bytes: int = 16384) -> PaginatedToolDecorator:
            return paginated_tool(max_bytes=max_bytes)

        @project_tool()
        def lookup(key: str) -> dict[str, int]:
            return {key: 1}

        @project_json_tool()
        def fetch(key: str) -> dict[str, int]:
            return {key: 1}

        assert_type(lookup("k"), str)
        assert_type(fetch("k"), Any)
        lookup(1)  # type: ignore[arg-type]
    """,
    # read_result_tool was typed Callable[..., CallToolResult]: its parameters erased.
    "read_result": """
        from typing import assert_type

        from mcp.types import CallToolResult

        from jsonbudget import ResultReader, SpillStore
        from jsonbudget.mcp import read_result_tool

        reader = ResultReader(spill=SpillStore())
        read = read_result_tool(reader=reader)
        assert_type(read.__name__, str)

        def first_page(ref: str) -> CallToolResult:
            return read(ref, pointer="/rows", cursor=None)

        read(123)  # type: ignore[arg-type]
        read("r", colour="red")  # type: ignore[call-arg]
    """,
    # on_ambiguous had no name in jsonbudget.typing.
    "modes": """
        from jsonbudget import OutputCapRetry
        from jsonbudget.typing import OnAmbiguous

        def retry_for(mode: str) -> OutputCapRetry:
            on_ambiguous: OnAmbiguous = "shrink_cap" if mode == "shrink_cap" else "raise"
            return OutputCapRetry(on_ambiguous=on_ambiguous)
    """,
}


def _sources_position_block() -> str:
    """docs/sources.md's example that reads a file position's byte offset."""
    text = (DOCS / "sources.md").read_text(encoding="utf-8")
    blocks: list[str] = re.findall(r"^```python\n(.*?)^```", text, re.S | re.M)
    found = [b for b in blocks if "JsonArrayFileSource(path, prefix=" in b and "look_ahead" in b]
    assert len(found) == 1
    return found[0]


@pytest.fixture(scope="module")
def mypy_errors(tmp_path_factory: pytest.TempPathFactory) -> dict[str, list[str]]:
    """mypy --strict's errors for each program, by program name (one run for all)."""
    programs = dict(PROGRAMS)
    programs["docs_sources_position"] = _sources_position_block()
    return strict_errors(tmp_path_factory.mktemp("typing_r20"), programs)


def test_regression_bounded_tool_types_mcp_results_as_call_tool_result(
    mypy_errors: dict[str, list[str]],
) -> None:
    """docs/mcp.md's `print(check().is_error)` failed mypy (`"str" has no attribute
    "is_error"`), and `check().upper()` passed and crashed."""
    assert mypy_errors["mcp_results"] == []


def test_regression_awaitable_tools_are_typed_async(mypy_errors: dict[str, list[str]]) -> None:
    """A tool typed `Callable[P, Awaitable[T]]` was typed sync by bounded_tool (`-> str`)
    and paginated_tool (`PaginatedTool`): the missing await went unreported."""
    assert mypy_errors["awaitable"] == []


def test_regression_look_alikes_and_json_unions_keep_their_types(
    mypy_errors: dict[str, list[str]],
) -> None:
    """A user's class shaped like part of an MCP result stays a value, and a union under
    `output="json"` is `Any`, as the wrapper returns whichever member it was."""
    assert mypy_errors["look_alikes"] == []


def test_regression_tune_progress_takes_a_counter_that_returns(
    mypy_errors: dict[str, list[str]],
) -> None:
    """`progress` was `Callable[[int], None]`: a counter returning its total was refused."""
    assert mypy_errors["progress"] == []


def test_regression_decorator_types_are_public(mypy_errors: dict[str, list[str]]) -> None:
    """A helper returning `bounded_tool(...)` or `paginated_tool(...)` had no public type
    to be annotated with under --strict."""
    assert mypy_errors["factories"] == []


def test_regression_read_result_tool_keeps_its_parameters(
    mypy_errors: dict[str, list[str]],
) -> None:
    """`read_result_tool(...)` was `Callable[..., CallToolResult]`: `read(123)` passed."""
    assert mypy_errors["read_result"] == []


def test_regression_on_ambiguous_mode_is_named(mypy_errors: dict[str, list[str]]) -> None:
    """jsonbudget.typing named every mode but `on_ambiguous`'s."""
    assert mypy_errors["modes"] == []
    hints = typing.get_type_hints(OutputCapRetry.__init__)
    assert typing.get_args(jt.OnAmbiguous) == typing.get_args(hints["on_ambiguous"])
    assert "OnAmbiguous" in jt.__all__


def test_regression_docs_position_example_type_checks(
    mypy_errors: dict[str, list[str]],
    capsys: pytest.CaptureFixture[str],
    monkeypatch: pytest.MonkeyPatch,
    tmp_path: Path,
) -> None:
    """docs/sources.md indexed a source position (`first[1]["o"]`), which a strict
    checker refuses: positions are JSON values, narrowed before they are read."""
    assert mypy_errors["docs_sources_position"] == []
    # The block makes its file under mkdtemp(): here, in a directory pytest removes.
    monkeypatch.setattr(tempfile, "tempdir", str(tmp_path))
    exec(compile(_sources_position_block(), "sources.md", "exec"), {})
    assert capsys.readouterr().out == "{'id': 0} 34\n[1, 2, 3, 4]\n"

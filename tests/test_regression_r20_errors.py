"""Errors as data: what reaches an MCP client, public classes, bounded one-line messages.

Under the official SDK a jsonbudget error inside `read_result_tool` or a paginated tool
reached the client as ``Error executing tool <name>`` alone, logged as a crash; a pointer
where nothing stands raised a private class; a directory path the file system cannot
encode raised a codec's error; an `EncodeError`'s message held its whole path, and a
line or paragraph separator in it broke the line.
"""

from __future__ import annotations

import logging
import sys
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
from fastmcp import Client as FastMCPClient
from fastmcp import FastMCP
from mcp import Client
from mcp.server.mcpserver import MCPServer
from mcp.shared.exceptions import MCPError

import jsonbudget
from jsonbudget import EncodeError, ResultGate, SpillError, SpillStore, bounded_dumps
from jsonbudget._agents.reader import ResultReader, read_result
from jsonbudget.mcp import paginated_tool, read_result_tool

BIG_ROW = {"x": "a" * 50_000}
#: The most characters of a path an error's message shows, as docs/errors.md says.
POINTER_CHARS = 200


def spilled(tmp_path: Path) -> tuple[ResultReader, str]:
    """A reader and the reference of a result it spilled for principal "p"."""
    reader = ResultReader(spill=SpillStore(tmp_path / "spill"))
    gate = ResultGate(max_bytes=500, reader=reader, principal="p")
    ref = gate.gate({"r": list(range(1000))}).shown_ref
    assert ref is not None
    return reader, ref


def text_of(result: Any) -> str:
    assert len(result.content) == 1
    text: str = result.content[0].text
    return text


async def test_regression_mcp_tool_errors_reach_the_client_with_their_message(
    tmp_path: Path, caplog: pytest.LogCaptureFixture
) -> None:
    reader, ref = spilled(tmp_path)
    server = MCPServer("errors")
    server.tool()(read_result_tool(reader=reader, principal="p"))

    @server.tool()
    @paginated_tool(max_bytes=4096, oversized="error")
    def big() -> list[Any]:
        return [BIG_ROW]

    @server.tool()
    @paginated_tool(max_bytes=4096, oversized="error")
    async def abig() -> list[Any]:
        return [BIG_ROW]

    def broken() -> Iterator[int]:
        yield 1
        raise RuntimeError("a bug in the source")

    @server.tool()
    @paginated_tool(max_bytes=4096)
    def buggy() -> Iterator[int]:
        return broken()

    with caplog.at_level(logging.INFO):
        async with Client(server, mode="legacy") as client:
            calls: list[tuple[str, dict[str, Any], str]] = [
                ("read_result", {"ref": ref, "pointer": "/nope"},
                 "nothing stands at '/nope' in the spilled result"),
                ("read_result", {"ref": ref, "pointer": "/r/5/x"},
                 "nothing stands at '/r/5/x' in the spilled result"),
                ("read_result", {"ref": ref, "pointer": "nope"},
                 "pointer='nope' is invalid: must be a JSON Pointer"),
                ("big", {}, "item 0 encodes to more than the budget"),
                ("abig", {}, "item 0 encodes to more than the budget"),
            ]  # fmt: skip
            for name, args, message in calls:
                result = await client.call_tool(name, args)
                assert result.is_error
                assert text_of(result).startswith(f"Error executing tool {name}: {message}")
            assert not [r for r in caplog.records if r.exc_info or r.levelno >= logging.ERROR]
            # A refused reference is still the JSON-RPC error, not a tool error.
            with pytest.raises(MCPError) as info:
                await client.call_tool("read_result", {"ref": "garbage"})
            assert info.value.error.code == -32602
            # Gone: the result's file removed from the store.
            for file in (tmp_path / "spill").iterdir():
                file.unlink()
            result = await client.call_tool("read_result", {"ref": ref})
            assert result.is_error
            assert "the spilled result cannot be read" in text_of(result)
            assert not [r for r in caplog.records if r.exc_info or r.levelno >= logging.ERROR]
            # A bug keeps the SDK's handling: its text stays on the server.
            result = await client.call_tool("buggy", {})
            assert result.is_error
            assert text_of(result) == "Error executing tool buggy"
    assert any(r.exc_info and r.levelno >= logging.ERROR for r in caplog.records)


async def test_fastmcp_still_passes_a_tool_error_message_through(tmp_path: Path) -> None:
    reader, ref = spilled(tmp_path)
    app = FastMCP("errors")
    app.tool()(read_result_tool(reader=reader, principal="p"))

    @app.tool()
    @paginated_tool(max_bytes=4096, oversized="error")
    def big() -> list[Any]:
        return [BIG_ROW]

    async with FastMCPClient(app) as client:
        result = await client.call_tool(
            "read_result", {"ref": ref, "pointer": "/nope"}, raise_on_error=False
        )
        assert result.is_error
        assert text_of(result) == (
            "Error calling tool 'read_result': nothing stands at '/nope' in the spilled result"
        )
        result = await client.call_tool("big", {}, raise_on_error=False)
        assert result.is_error
        assert text_of(result).startswith(
            "Error calling tool 'big': item 0 encodes to more than the budget"
        )


def public(cls: type) -> bool:
    return cls.__module__ == "jsonbudget.errors" or (
        cls.__name__ in jsonbudget.__all__ and getattr(jsonbudget, cls.__name__) is cls
    )


@pytest.mark.parametrize("pointer", ["/nope", "/r/5/x", "/r/1000", "/r/0/0"])
def test_regression_read_result_raises_the_public_spill_error(tmp_path: Path, pointer: str) -> None:
    reader, ref = spilled(tmp_path)
    with pytest.raises(SpillError) as info:
        read_result(ref, pointer, reader=reader, principal="p")
    assert type(info.value) is SpillError
    assert public(type(info.value))
    assert str(info.value) == f"nothing stands at {pointer!r} in the spilled result"


@pytest.mark.parametrize("name", ["x\ud800", "a\x00b", "\udcff\ud800"])
def test_regression_spill_store_refuses_a_path_no_file_can_have(tmp_path: Path, name: str) -> None:
    for directory in (tmp_path / name, tmp_path / name / "spill", str(tmp_path / name)):
        with pytest.raises(SpillError, match="the spill directory path cannot name a file"):
            SpillStore(directory)
    assert list(tmp_path.iterdir()) == []


def encode_error(key: str) -> EncodeError:
    with pytest.raises(EncodeError) as info:
        bounded_dumps({key: float("nan")}, max_bytes=3 * len(key) + 100, unencodable="error")
    return info.value


def test_regression_encode_error_message_caps_a_long_path() -> None:
    key = "k" * 1_000_000
    error = encode_error(key)
    assert error.path == "/" + key
    shown, rest = "/" + "k" * (POINTER_CHARS - 1), len(key) + 1 - POINTER_CHARS
    assert str(error) == f'cannot encode nan (at "{shown}"…[{rest} more chars])'
    # Escapes grow the shown part, never past the 200 characters it shows.
    error = encode_error("\n" * 100_000)
    assert error.path == "/" + "\n" * 100_000
    shown, rest = "\\n" * (POINTER_CHARS - 1), 100_001 - POINTER_CHARS
    assert str(error) == f'cannot encode nan (at "/{shown}"…[{rest} more chars])'
    # Built directly, as a custom source builds one; a path of exactly the cap is whole.
    error = EncodeError("refused", path="/" + "é" * (POINTER_CHARS - 1))
    assert str(error) == f"refused (at /{'é' * (POINTER_CHARS - 1)})"
    error = EncodeError("refused", path="/" + "é" * POINTER_CHARS)
    assert str(error) == f'refused (at "/{"é" * (POINTER_CHARS - 1)}"…[1 more chars])'


LINE_ENDS = [chr(c) for c in range(sys.maxunicode + 1) if len(f"a{chr(c)}b".splitlines()) > 1]


def test_regression_pointer_line_separators_are_escaped() -> None:
    assert {"\u2028", "\u2029", "\x1c", "\x1d", "\x1e", "\x85"} <= set(LINE_ENDS)
    for char in LINE_ENDS:
        error = encode_error(f"a{char}b")
        assert error.path == f"/a{char}b"
        assert len(str(error).splitlines()) == 1, ascii(str(error))
        built = EncodeError("refused", path=f"/{char}/{char * 300}")
        assert len(str(built).splitlines()) == 1, ascii(str(built))
    error = encode_error("a\u2028b")
    assert str(error) == 'cannot encode nan (at "/a\\u2028b")'


def test_regression_an_unencodable_int_error_carries_no_orjson_context() -> None:
    """With unencodable="error", an int beyond 64 bits raised its EncodeError inside the
    except that caught orjson's TypeError: the traceback showed that first, "during
    handling of the above exception, another exception occurred"."""
    with pytest.raises(EncodeError) as info:
        bounded_dumps({"a": 10**30}, max_bytes=100, unencodable="error")
    assert info.value.path == "/a"
    assert info.value.__context__ is None


def test_regression_a_type_name_with_a_line_break_stays_one_line() -> None:
    """The path was escaped, but not the message naming the value's type: a class made
    with type() and a line break in its name split the message over lines."""
    odd = type("A\nB\u2028C\x1b[2J", (), {})
    with pytest.raises(EncodeError) as info:
        bounded_dumps({"k": odd()}, max_bytes=100, unencodable="error")
    assert len(str(info.value).splitlines()) == 1
    assert "\x1b" not in str(info.value)
    assert str(info.value).endswith("(at /k)")

"""MCP: the real SDK client against the example server (in-memory JSON-RPC and stdio)."""

from __future__ import annotations

import importlib.util
import os
import sqlite3
import sys
from pathlib import Path
from types import ModuleType
from typing import Any

import orjson
import pytest
from mcp import Client, StdioServerParameters
from mcp.server.mcpserver import MCPServer
from mcp.shared.exceptions import MCPError
from mcp.types import CallToolResult

from jsonbudget import MCP_KEYS, Limits, MemoryCursorStore, PageBuilder, Scope
from jsonbudget._cli.demo import make_demo_database
from jsonbudget.errors import InvalidCursor
from jsonbudget.mcp import McpPager, cursor_error, page_result, paginated_tool

ROOT = Path(__file__).resolve().parent.parent
EXAMPLE = ROOT / "examples" / "mcp_server.py"
BUDGET = 16384
INVALID_PARAMS = -32602


def load_example() -> ModuleType:
    spec = importlib.util.spec_from_file_location("mcp_server_example", EXAMPLE)
    assert spec is not None
    assert spec.loader is not None
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


@pytest.fixture(scope="module")
def database(tmp_path_factory: pytest.TempPathFactory) -> Path:
    path = tmp_path_factory.mktemp("mcp") / "tickets.sqlite3"
    make_demo_database(path, rows=80, huge_bytes=400_000)
    return path


def all_ids(database: Path, status: str | None = None) -> list[int]:
    conn = sqlite3.connect(database)
    try:
        sql = "SELECT id FROM tickets" + (" WHERE status = ?" if status else "") + " ORDER BY id"
        return [r[0] for r in conn.execute(sql, (status,) if status else ())]
    finally:
        conn.close()


def check_sizes(result: CallToolResult, budget: int) -> dict[str, Any]:
    """Both forms of the result fit the budget, and they are the same envelope."""
    assert result.is_error is False
    assert len(result.content) == 1
    text = result.content[0].text  # type: ignore[union-attr]
    assert len(text.encode()) <= budget
    structured: dict[str, Any] | None = result.structured_content
    assert structured is not None
    assert len(orjson.dumps(structured)) <= budget
    assert orjson.loads(text) == structured
    return structured


async def follow(client: Client, arguments: dict[str, Any]) -> tuple[list[Any], int, str]:
    """Call list_tickets until nextCursor is null; return rows, page count, a mid cursor."""
    rows: list[Any] = []
    cursor: str | None = None
    mid = ""
    for pages in range(1, 500):
        args = dict(arguments, **({"cursor": cursor} if cursor else {}))
        result = await client.call_tool("list_tickets", args)
        env = check_sizes(result, BUDGET)
        rows.extend(env["items"])
        cursor = env["nextCursor"]
        assert "next_cursor" not in env
        if cursor is None:
            assert env["complete"] is True
            return rows, pages, mid
        mid = mid or cursor
    raise AssertionError("pagination did not end")


# -- page_result and the pager -------------------------------------------------------


def test_page_result_is_the_envelope_twice() -> None:
    builder = PageBuilder(Limits(1024), keys=MCP_KEYS)
    builder.fill({"n": i, "s": "ü" * 50} for i in range(100))
    page = builder.finish(complete=False, next_cursor="c" * 56)
    result = page_result(page)
    assert result.content[0].text.encode() == page.to_json()  # type: ignore[union-attr]
    assert result.structured_content == orjson.loads(page.to_json())
    assert result.structured_content["nextCursor"] == "c" * 56
    wire = result.model_dump(mode="json", by_alias=True, exclude_none=True)
    assert wire["structuredContent"]["nextCursor"] == "c" * 56


def test_cursor_error_maps_to_invalid_params() -> None:
    err = cursor_error(InvalidCursor("the cursor is not one this server issued"))
    assert isinstance(err, MCPError)
    assert err.code == INVALID_PARAMS
    assert err.data == {"reason": "invalid"}


def test_pager_raises_mcp_error() -> None:
    pager = McpPager(Limits(1024))
    first = pager.page(list(range(500)), scope=Scope("p", {"q": 1}))
    cursor = first.structured_content["nextCursor"]
    with pytest.raises(MCPError) as info:
        pager.page(list(range(500)), scope=Scope("p", {"q": 2}), cursor=cursor)
    assert info.value.code == INVALID_PARAMS
    assert info.value.data == {"reason": "scope_query"}


def test_paginated_tool_refuses_a_cursor_parameter() -> None:
    with pytest.raises(TypeError, match="already has a 'cursor' parameter"):

        @paginated_tool(Limits(1024))
        def tool(cursor: str) -> list[int]:
            return []


# -- the example server through the real client --------------------------------------


async def test_example_server_in_memory(database: Path, tmp_path: Path) -> None:
    server = load_example().build_server(str(database), str(tmp_path / "c.sqlite3"))
    # legacy mode: the JSON-RPC stream transport, messages serialized as on a real wire
    async with Client(server, mode="legacy") as client:
        tools = (await client.list_tools()).tools
        assert [t.name for t in tools] == ["list_tickets"]
        props = tools[0].input_schema["properties"]
        assert set(props) == {"status", "cursor"}
        assert tools[0].description is not None
        assert tools[0].description.startswith("List support tickets")

        rows, pages, mid = await follow(client, {})
        assert [r["id"] for r in rows] == all_ids(database)
        assert pages > 5
        huge = [r for r in rows if r.get("attachment")]
        assert len(huge) == 1
        assert huge[0]["attachment"].endswith(" more chars]")  # cut in place, marked

        open_rows, _, open_mid = await follow(client, {"status": "open"})
        assert [r["id"] for r in open_rows] == all_ids(database, "open")

        # A garbled cursor, and a real cursor under another query: -32602 and no data.
        with pytest.raises(MCPError) as info:
            await client.call_tool("list_tickets", {"cursor": "not-a-cursor"})
        assert info.value.code == INVALID_PARAMS
        with pytest.raises(MCPError) as info:
            await client.call_tool("list_tickets", {"cursor": mid, "status": "open"})
        assert info.value.code == INVALID_PARAMS
        assert info.value.data == {"reason": "scope_query"}
        with pytest.raises(MCPError) as info:
            await client.call_tool("list_tickets", {"cursor": open_mid, "status": "closed"})
        assert info.value.code == INVALID_PARAMS

        # The same cursor under its own query still works (refusals counted nothing).
        result = await client.call_tool("list_tickets", {"cursor": mid})
        assert check_sizes(result, BUDGET)["items"]


async def test_example_server_over_stdio(database: Path, tmp_path: Path) -> None:
    params = StdioServerParameters(
        command=sys.executable,
        args=[str(EXAMPLE), "--db", str(database), "--store", str(tmp_path / "c.sqlite3")],
        env={**os.environ, "PYTHONPATH": str(ROOT / "src")},
    )
    async with Client(params, mode="legacy") as client:
        rows, _, mid = await follow(client, {"status": "pending"})
        assert [r["id"] for r in rows] == all_ids(database, "pending")
        with pytest.raises(MCPError) as info:
            await client.call_tool("list_tickets", {"cursor": mid + "x"})
        assert info.value.code == INVALID_PARAMS


async def test_async_tool_and_async_source() -> None:
    server = MCPServer("numbers")

    class Numbers:
        """An async re-iterable source."""

        def __init__(self, n: int) -> None:
            self.n = n

        async def __aiter__(self) -> Any:
            for i in range(self.n):
                yield {"i": i, "pad": "é" * 40}

    @server.tool()
    @paginated_tool(Limits(512), store=MemoryCursorStore(), principal=lambda: "tester")
    async def numbers(n: int, limit: int = 5) -> Numbers:
        """Count to n."""
        return Numbers(n)

    async with Client(server) as client:
        seen: list[int] = []
        cursor = None
        while True:
            args: dict[str, Any] = {"n": 23, "limit": 5}
            if cursor:
                args["cursor"] = cursor
                args["limit"] = 7  # a page-size argument may change between pages
            env = check_sizes(await client.call_tool("numbers", args), 512)
            seen.extend(item["i"] for item in env["items"])
            cursor = env["nextCursor"]
            if cursor is None:
                break
        assert seen == list(range(23))

"""MCP: the real SDK client against the example server (in-memory JSON-RPC and stdio)."""

from __future__ import annotations

import asyncio
import contextlib
import dataclasses
import datetime
import importlib.util
import json
import os
import re
import sqlite3
import sys
import threading
import time
import uuid
from collections.abc import Iterator
from decimal import Decimal
from pathlib import Path
from types import ModuleType
from typing import Annotated, Any

import httpx
import orjson
import pydantic
import pytest
import uvicorn
from hypothesis import given, settings
from hypothesis import strategies as st
from mcp import Client, StdioServerParameters
from mcp.server.mcpserver import Context, MCPServer
from mcp.server.mcpserver.resolve import Resolve
from mcp.server.streamable_http import EventStore
from mcp.shared.exceptions import MCPError
from mcp.types import CallToolResult, Implementation
from pydantic import BaseModel

from jsonbudget import (
    MCP_KEYS,
    Limits,
    MemoryCursorStore,
    PageBuilder,
    ResultGate,
    Scope,
    SpillStore,
    SQLiteCursorStore,
    bounded_tool,
)
from jsonbudget._agents.reader import ResultReader, read_result
from jsonbudget._cli.demo import make_demo_database
from jsonbudget._sources.jsonread import load_json
from jsonbudget.errors import InvalidCursor, LimitError
from jsonbudget.mcp import (
    SUMMARY_TEXT,
    McpPager,
    McpResultFitter,
    bounded_result,
    cursor_error,
    message_bytes,
    page_result,
    paginated_tool,
    read_result_tool,
)
from tests.loopback import free_port

ROOT = Path(__file__).resolve().parent.parent
EXAMPLE = ROOT / "examples" / "mcp_server.py"
BUDGET = 16384
INVALID_PARAMS = -32602


class Price:
    """A type only a default hook can encode (Decimal is native now)."""

    def __init__(self, text: str) -> None:
        self.text = text

    def __str__(self) -> str:
        return self.text


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
    """The whole response fits the budget, and its two forms are the same envelope."""
    assert result.is_error is False
    assert len(result.content) == 1
    assert message_bytes(result) <= budget
    text = result.content[0].text  # type: ignore[union-attr]
    structured: dict[str, Any] | None = result.structured_content
    assert structured is not None
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
    pager = McpPager(max_bytes=3072)
    first = pager.paginate(list(range(500)), scope=Scope("p", {"q": 1}))
    cursor = first.structured_content["nextCursor"]
    with pytest.raises(MCPError) as info:
        pager.paginate(list(range(500)), scope=Scope("p", {"q": 2}), cursor=cursor)
    assert info.value.code == INVALID_PARAMS
    assert info.value.data == {"reason": "scope_query"}


def test_paginated_tool_refuses_a_cursor_parameter() -> None:
    with pytest.raises(TypeError, match="already has a 'cursor' parameter"):

        @paginated_tool(max_bytes=3072)
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
        assert huge[0]["attachment"].endswith(" more bytes]")  # cut in place, marked

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
    @paginated_tool(max_bytes=2600, store=MemoryCursorStore(), principal=lambda: "tester")
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
            env = check_sizes(await client.call_tool("numbers", args), 2600)
            seen.extend(item["i"] for item in env["items"])
            cursor = env["nextCursor"]
            if cursor is None:
                break
        assert seen == list(range(23))


# -- the whole message within its budget, read off the wire -------------------------------

# Spawns the server and copies both directions byte for byte, logging every line: what the
# test reads is exactly what the client received.
TEE = r"""
import subprocess, sys, threading
child = subprocess.Popen(sys.argv[2:], stdin=subprocess.PIPE, stdout=subprocess.PIPE)
def pump(src, dst, log):
    with open(log, "wb") as f:
        for line in iter(src.readline, b""):
            f.write(line); f.flush()
            dst.write(line); dst.flush()
    dst.close()
up = threading.Thread(target=pump, args=(sys.stdin.buffer, child.stdin, sys.argv[1] + ".in"))
up.daemon = True
up.start()
pump(child.stdout, sys.stdout.buffer, sys.argv[1] + ".out")
sys.exit(child.wait())
"""

BUDGET_SERVER = r"""
import sys
from mcp.server.mcpserver import MCPServer
from jsonbudget import MemoryCursorStore
from jsonbudget.mcp import paginated_tool

CODE = 'print("a\\\\b", \'q\') # C:\\\\path\\\\"x"\n'
KINDS = {
    "prose": lambda i: {"id": i, "text": "Le café — 東京 — naïve façade. " * (1 + i % 9)},
    "rows": lambda i: {"id": i, "a": i % 7, "b": None, "c": True, "d": "x", "e": [1, 2]},
    "code": lambda i: {"id": i, "src": CODE * (1 + i % 5)},
    "control": lambda i: {"id": i, "raw": "".join(chr(c) for c in range(32)) * (1 + i % 4)},
}
server = MCPServer("budgets")
store = MemoryCursorStore()
for spec in sys.argv[1:]:
    mode, budget = spec.split(":")
    def make(mode=mode, budget=int(budget)):
        def tool(kind: str, n: int = 300) -> list:
            return [KINDS[kind](i) for i in range(n)]
        tool.__name__ = f"rows_{mode}_{budget}"
        server.tool()(paginated_tool(max_bytes=budget, store=store, content=mode)(tool))
    make()
server.run("stdio")
"""

SPECS = [("both", 2461), ("both", 3000), ("both", 16384), ("structured", 1503),
         ("structured", 4096), ("text", 1420), ("text", 4096)]  # fmt: skip


@pytest.mark.parametrize("protocol", ["legacy", "auto"])
async def test_every_response_line_fits_its_budget_on_the_wire(
    tmp_path: Path, protocol: str
) -> None:
    """A page of Limits(N) once made a 32,935-byte line for N = 16,384 (the envelope sent
    twice, the text copy escaped again); every line is now at most its budget, for every
    content mode, from the smallest budget up, and the pages still reassemble."""
    server = tmp_path / "server.py"
    server.write_text(BUDGET_SERVER)
    log = tmp_path / "wire"
    params = StdioServerParameters(
        command=sys.executable,
        args=["-c", TEE, str(log), sys.executable, str(server)] + [f"{m}:{b}" for m, b in SPECS],
        env={**os.environ, "PYTHONPATH": str(ROOT / "src")},
    )
    calls: dict[str, int] = {}
    # "auto" negotiates protocol 2026-07-28: the server adds resultType and its serverInfo.
    async with Client(params, mode=protocol) as client:
        tools = {t.name: t for t in (await client.list_tools()).tools}
        for mode, budget in SPECS:
            name = f"rows_{mode}_{budget}"
            schema = tools[name].output_schema
            if mode == "text":
                assert schema is None
            else:
                assert schema is not None
                assert {"items", "complete", "nextCursor"} <= set(schema["properties"])
            for kind in ("prose", "rows", "code", "control"):
                items: list[Any] = []
                cursor = None
                for _ in range(2000):
                    args: dict[str, Any] = {"kind": kind, "n": 120}
                    if cursor:
                        args["cursor"] = cursor
                    result = await client.call_tool(name, args)
                    assert result.is_error is False
                    calls[name] = calls.get(name, 0) + 1
                    env = (
                        orjson.loads(result.content[0].text)  # type: ignore[union-attr]
                        if mode == "text"
                        else result.structured_content
                    )
                    assert env is not None
                    if mode == "both":
                        assert orjson.loads(result.content[0].text) == env  # type: ignore[union-attr]
                    if mode == "structured":
                        assert result.content[0].text == SUMMARY_TEXT  # type: ignore[union-attr]
                    items.extend(env["items"])
                    cursor = env["nextCursor"]
                    if cursor is None:
                        break
                # Every item once, in order; at the smallest budgets an item too large
                # for a page stands at its place as the page builder's marker.
                assert len(items) == 120, (name, kind)
                for i, item in enumerate(items):
                    if isinstance(item, str):
                        assert item.startswith("…[oversized"), (name, kind, item)
                        assert budget < 2000
                    else:
                        assert item["id"] == i, (name, kind)
    budget_of = {}
    for line in (log.parent / "wire.in").read_bytes().splitlines():
        request = orjson.loads(line)
        if request.get("method") == "tools/call":
            budget_of[request["id"]] = int(request["params"]["name"].rsplit("_", 1)[1])
    seen = 0
    for line in (log.parent / "wire.out").read_bytes().splitlines(keepends=True):
        response = orjson.loads(line)
        if response.get("id") in budget_of:
            seen += 1
            assert len(line) <= budget_of[response["id"]]
            stamped = "io.modelcontextprotocol/serverInfo" in response["result"].get("_meta", {})
            assert stamped is (protocol == "auto")
    assert seen == sum(calls.values()) > len(SPECS) * 4


class UuidEvents(EventStore):
    """An event store as the SDK's resumable servers keep one: each event gets a UUID,
    sent in an ``id:`` line of its SSE event (replay is not exercised here)."""

    async def store_event(self, stream_id: str, message: Any) -> str:
        return str(uuid.uuid4())

    async def replay_events_after(self, last_event_id: str, send_callback: Any) -> None:
        return None


@contextlib.contextmanager
def serving(app: Any) -> Iterator[str]:
    """*app* served by uvicorn on a free loopback port; yields its MCP endpoint."""
    port = free_port()
    server = uvicorn.Server(uvicorn.Config(app, host="127.0.0.1", port=port, log_level="error"))
    thread = threading.Thread(target=server.run, daemon=True)
    thread.start()
    try:
        for _ in range(1000):
            if server.started or not thread.is_alive():
                break
            time.sleep(0.01)
        assert server.started, "uvicorn did not start"
        yield f"http://127.0.0.1:{port}/mcp"
    finally:
        server.should_exit = True
        thread.join(timeout=10)


@pytest.mark.parametrize("events", [None, UuidEvents()], ids=["sse", "sse-with-event-ids"])
def test_regression_every_sse_event_fits_its_budget_over_streamable_http(
    events: EventStore | None,
) -> None:
    """Budgets counted the stdio line (the JSON and a newline), while a Streamable HTTP
    server sends each response as an SSE event: ``event: message``, ``data:`` and the
    blank line (and an ``id:`` line with an event store) took up to 67 bytes more."""
    budget, worst_id = 3072, -(2**63)
    server = MCPServer("sse")

    @server.tool()
    @paginated_tool(max_bytes=budget, store=MemoryCursorStore(), content="both")
    def rows(n: int) -> list[dict[str, Any]]:
        return [{"i": i, "s": 'q"\\' * (i % 3)} for i in range(n)]

    @server.tool()
    def log(lines: int) -> CallToolResult:
        return bounded_result("line of output\n" * lines, max_bytes=budget)

    headers = {"accept": "application/json, text/event-stream",
               "content-type": "application/json"}  # fmt: skip

    def call(http: httpx.Client, url: str, name: str, args: dict[str, Any]) -> tuple[int, Any]:
        """The SSE event that answers the call (its size) and the result it carries."""
        message = {"jsonrpc": "2.0", "id": worst_id, "method": "tools/call",
                   "params": {"name": name, "arguments": args}}  # fmt: skip
        body = http.post(url, headers=headers, json=message).content
        # The body is SSE events, each ended by a blank line.
        for event in body.split(b"\r\n\r\n")[:-1]:
            data = [line[6:] for line in event.split(b"\r\n") if line.startswith(b"data: ")]
            answer = orjson.loads(data[0]) if data and data[0] else {}
            if answer.get("id") == worst_id:
                return len(event) + 4, answer["result"]
        raise AssertionError(f"no answer in {body[:200]!r}")

    sizes: list[int] = []
    items: list[Any] = []
    with serving(server.streamable_http_app(event_store=events)) as url, httpx.Client() as http:
        hello = {"protocolVersion": "2025-11-25", "capabilities": {},
                 "clientInfo": {"name": "test", "version": "1"}}  # fmt: skip
        opening = {"jsonrpc": "2.0", "id": 1, "method": "initialize", "params": hello}
        opened = http.post(url, headers=headers, json=opening)
        headers["mcp-session-id"] = opened.headers["mcp-session-id"]
        headers["mcp-protocol-version"] = "2025-11-25"
        ready = {"jsonrpc": "2.0", "method": "notifications/initialized"}
        http.post(url, headers=headers, json=ready)
        cursor = None
        for _ in range(100):
            size, result = call(
                http, url, "rows", {"n": 400, **({"cursor": cursor} if cursor else {})}
            )
            sizes.append(size)
            items.extend(result["structuredContent"]["items"])
            cursor = result["structuredContent"]["nextCursor"]
            if cursor is None:
                break
        log_size, logged = call(http, url, "log", {"lines": 1000})
    assert [item["i"] for item in items] == list(range(400))
    assert len(sizes) > 3
    assert max(sizes) <= budget
    assert "…[truncated: " in logged["content"][0]["text"]
    assert log_size <= budget
    # What the budgets count is the event exactly, with a 36-character id line and (on a
    # 2026-07-28 connection, which this legacy one is not) the resultType member and the
    # \uXXXX escape of each non-ASCII character (the marker's "…" here), which that
    # connection's HTTP path writes.
    counted = message_bytes(CallToolResult.model_validate(logged))
    no_id = 0 if events is not None else len("id: \r\n") + 36
    escapes = len(json.dumps(logged, separators=(",", ":"))) - len(orjson.dumps(logged))
    assert escapes == 3 * str(logged).count("…") > 0
    assert log_size == counted - len(',"resultType":"complete"') - no_id - escapes


class _BodySizes:
    """An ASGI app that passes every request to *app* and records each response body's
    bytes (a whole JSON body, or each SSE chunk), as the client receives them."""

    def __init__(self, app: Any) -> None:
        self.app = app
        self.sizes: list[int] = []

    async def __call__(self, scope: Any, receive: Any, send: Any) -> None:
        async def record(message: Any) -> None:
            if message["type"] == "http.response.body" and message.get("body"):
                self.sizes.append(len(message["body"]))
            await send(message)

        await self.app(scope, receive, record)


@pytest.mark.parametrize("text", ["é" * 40, "€" * 30, "😀" * 20, '\u2028 \x01 "q"'])
def test_regression_the_default_http_client_gets_every_message_within_budget(text: str) -> None:
    """The SDK's 2026-07-28 Streamable HTTP path (what its Client negotiates by default)
    writes messages with json.dumps, which escapes every non-ASCII character: "é", 2
    bytes, went as \\u00e9, 6, in both copies, and pages reached 2.3x max_bytes."""
    budget = 4096
    server = MCPServer("escapes")

    @server.tool()
    @paginated_tool(max_bytes=budget, store=MemoryCursorStore())
    def rows() -> list[dict[str, Any]]:
        return [{"id": i, "t": text} for i in range(300)]

    @server.tool()
    def blob() -> CallToolResult:
        return bounded_result({"t": [text] * 500}, max_bytes=budget)

    @server.tool()
    def log() -> CallToolResult:
        return bounded_result(text * 2000, max_bytes=budget)

    async def run(url: str) -> list[Any]:
        got: list[Any] = []
        async with Client(url) as client:
            cursor = None
            while True:
                page = await client.call_tool("rows", {"cursor": cursor} if cursor else {})
                got += page.structured_content["items"]
                cursor = page.structured_content["nextCursor"]
                if cursor is None:
                    break
            for name in ("blob", "log"):
                assert (await client.call_tool(name, {})).is_error is False
        return got

    app = _BodySizes(server.streamable_http_app())
    with serving(app) as url:
        got = asyncio.run(run(url))
    assert [row["id"] for row in got] == list(range(300))
    assert all(row["t"] == text for row in got)
    assert len(app.sizes) > 5
    assert max(app.sizes) <= budget


def test_page_result_content_modes() -> None:
    builder = PageBuilder(Limits(1024), keys=MCP_KEYS)
    builder.fill({"n": i} for i in range(500))
    page = builder.finish(complete=False, next_cursor="c" * 56)
    structured = page_result(page, content="structured")
    assert structured.content[0].text == SUMMARY_TEXT  # type: ignore[union-attr]
    assert structured.structured_content == orjson.loads(page.to_json())
    text = page_result(page, content="text")
    assert text.structured_content is None
    assert text.content[0].text.encode() == page.to_json()  # type: ignore[union-attr]
    with pytest.raises(LimitError, match="content"):
        page_result(page, content="html")  # type: ignore[arg-type]


def test_pager_options_validated() -> None:
    with pytest.raises(LimitError, match="content"):
        McpPager(max_bytes=4096, content="both-ways")  # type: ignore[arg-type]
    with pytest.raises(LimitError, match=r"max_bytes=1000 is invalid: must be at least 2461"):
        McpPager(max_bytes=1000)
    with pytest.raises(LimitError, match="limits"):
        McpPager(max_bytes=4096, limits=Limits(4096))
    with pytest.raises(LimitError, match="max_bytes"):
        McpPager()


@pytest.mark.parametrize(
    ("option", "value"),
    [("oversized", "marker"), ("oversized", "spill"), ("strategy", "nope"), ("markers", "x")],
)
def test_regression_an_invalid_pager_option_is_named_not_taken_for_a_small_budget(
    option: str, value: str
) -> None:
    # Found by a tester: the search for the smallest page budget took the option's
    # error, raised at every budget, for "too small", and blamed max_bytes.
    expected = "spill_store" if value == "spill" else option
    with pytest.raises(LimitError, match=f"^{expected}=") as raised:
        McpPager(max_bytes=16384, **{option: value})  # type: ignore[arg-type]  # bad on purpose
    assert raised.value.name == expected


def test_pager_default_hook_encodes_what_the_encoder_does_not_know() -> None:
    rows = [{"id": i, "price": Price(f"{i}.10")} for i in range(50)]
    plain = McpPager(max_bytes=4096).paginate(rows, scope=Scope("p", {}))
    hooked = McpPager(max_bytes=4096, default=str).paginate(rows, scope=Scope("p", {}))
    assert plain.structured_content["items"][1]["price"] == "…[unencodable: Price]"
    assert hooked.structured_content["items"][1]["price"] == "1.10"


def test_regression_message_budget_holds_with_a_page_budget_and_a_cursor() -> None:
    """With max_pages, a continuation cannot be read twice: it takes the safe budget."""
    pager = McpPager(limits=Limits(3000, max_pages=50))
    code = [{"src": '"\\\\"' * 40, "i": i} for i in range(200)]
    first = pager.paginate(code, scope=Scope("p", {}))
    assert message_bytes(first) <= 3000
    cursor = first.structured_content["nextCursor"]
    second = pager.paginate(code, scope=Scope("p", {}), cursor=cursor)
    assert message_bytes(second) <= 3000


async def test_regression_bounded_tool_under_mcpserver_keeps_structured_output() -> None:
    """`@server.tool()` over `@bounded_tool(max_bytes=3000)` on `-> list[dict]` declared
    an array output schema and returned a str: the server answered isError."""
    server = MCPServer("search")

    @server.tool()
    @bounded_tool(max_bytes=3000)
    def search(query: str) -> list[dict[str, Any]]:
        """Search."""
        return [{"id": i, "title": f"{query} {i}"} for i in range(1000)]

    @server.tool()
    @bounded_tool(max_bytes=3000, output="json")
    def lookup(query: str) -> dict[str, Any]:
        """Look up."""
        return {"query": query, "rows": [{"id": i} for i in range(1000)]}

    async with Client(server, mode="legacy") as client:
        tools = {t.name: t for t in (await client.list_tools()).tools}
        assert tools["search"].output_schema["properties"]["result"]["type"] == "string"  # type: ignore[index]
        assert tools["lookup"].output_schema["type"] == "object"  # type: ignore[index]
        text = await client.call_tool("search", {"query": "cats"})
        assert text.is_error is False
        bounded = text.structured_content["result"]
        assert len(bounded.encode()) <= 3000
        assert orjson.loads(bounded)[-1].startswith("…[omitted: ")
        value = await client.call_tool("lookup", {"query": "cats"})
        assert value.is_error is False
        assert len(orjson.dumps(value.structured_content)) <= 3000
        assert value.structured_content["rows"][-1].startswith("…[omitted: ")


class Ticket(pydantic.BaseModel):
    id: int
    notes: list[str]


async def test_regression_a_model_returned_as_json_is_an_object_under_mcpserver() -> None:
    """A tool returning a pydantic model with output="json" was declared list[Any] (a
    model is iterable): the SDK published an array schema and every call was isError."""
    server = MCPServer("tickets")

    @server.tool()
    @bounded_tool(max_bytes=3000, output="json")
    def ticket(id: int) -> Ticket:
        """One ticket."""
        return Ticket(id=id, notes=[f"note {i}" for i in range(1000)])

    async with Client(server, mode="legacy") as client:
        tools = {t.name: t for t in (await client.list_tools()).tools}
        assert tools["ticket"].output_schema["type"] == "object"  # type: ignore[index]
        got = await client.call_tool("ticket", {"id": 7})
        assert got.is_error is False
        assert got.structured_content["id"] == 7
        assert got.structured_content["notes"][-1].startswith("…[omitted: ")
        assert len(orjson.dumps(got.structured_content)) <= 3000


async def test_read_result_tool_reads_a_spill_back_for_its_principal_only(tmp_path: Path) -> None:
    reader = ResultReader(spill=SpillStore(tmp_path / "spill"))
    caller = {"name": "alice"}
    gate = ResultGate(max_bytes=4096, reader=reader, principal=lambda: caller["name"])
    server = MCPServer("search")

    @server.tool()
    def search(n: int) -> str:
        """Search; large results are spilled and previewed."""
        return gate.gate([{"row": i, "text": "t" * 40} for i in range(n)], label="search").text

    server.tool()(read_result_tool(reader=reader, max_bytes=4096,
                                   principal=lambda: caller["name"]))  # fmt: skip
    async with Client(server, mode="legacy") as client:
        tools = {t.name: t for t in (await client.list_tools()).tools}
        assert set(tools["read_result"].input_schema["properties"]) == {"ref", "pointer", "cursor"}
        preview = orjson.loads(
            (await client.call_tool("search", {"n": 3000})).structured_content["result"]
        )
        ref = preview["spilled"]["ref"]
        got = await client.call_tool("read_result", {"ref": ref, "pointer": "/2345/row"})
        assert message_bytes(got) <= 4096
        assert got.structured_content["items"] == [2345]
        rows: list[Any] = []
        cursor = None
        while True:
            args = {"ref": ref} | ({"cursor": cursor} if cursor else {})
            page = await client.call_tool("read_result", args)
            assert message_bytes(page) <= 4096
            rows += page.structured_content["items"]
            cursor = page.structured_content["next_cursor"]
            if cursor is None:
                break
        assert rows == [{"row": i, "text": "t" * 40} for i in range(3000)]
        caller["name"] = "mallory"
        with pytest.raises(MCPError) as info:
            await client.call_tool("read_result", {"ref": ref})
        assert info.value.code == INVALID_PARAMS
        assert info.value.data == {"reason": "scope_principal"}


READ_MARKER = re.compile(r"…\[truncated: \d+ more chars\]$")


async def read_back(client: Client, ref: str, pointer: str) -> list[Any]:
    """Every read_result page of the value at *pointer*, each within the tool's budget."""
    pages: list[Any] = []
    cursor = None
    while True:
        args = {"ref": ref, "pointer": pointer} | ({"cursor": cursor} if cursor else {})
        page = await client.call_tool("read_result", args)
        assert message_bytes(page) <= 4096
        assert page.structured_content is not None
        pages.append(page.structured_content)
        cursor = page.structured_content["next_cursor"]
        if cursor is None:
            return pages


async def test_regression_a_paginated_tool_spills_what_read_result_reads_back(
    tmp_path: Path,
) -> None:
    # Found by a tester: the page named a spilled item by the store's own name, which
    # read_result refuses ("not one this server issued"); nothing could read it back.
    reader = ResultReader(spill=SpillStore(tmp_path / "spill"))
    caller = {"name": "alice"}
    blob = 'z"é\\' * 6000
    rows: list[dict[str, Any]] = [{"i": 0}, {"i": 1, "blob": blob}, {"i": 2}]
    server = MCPServer("pages")

    @server.tool()
    @paginated_tool(max_bytes=6144, oversized="spill", reader=reader,
                    principal=lambda: caller["name"])  # fmt: skip
    def listing() -> list[dict[str, Any]]:
        """Rows; an oversized one is spilled."""
        return rows

    server.tool()(read_result_tool(reader=reader, max_bytes=4096,
                                   principal=lambda: caller["name"]))  # fmt: skip
    async with Client(server, mode="legacy") as client:
        items: list[Any] = []
        refs: list[str] = []
        cursor = None
        while True:
            page = check_sizes(
                await client.call_tool("listing", {"cursor": cursor} if cursor else {}), 4096
            )
            for entry in page.get("oversized", []):
                assert entry["outcome"] == "spilled"
                assert f"spilled as {entry['ref']}," in page["items"][entry["index"]]
                refs.append(entry["ref"])
            items += page["items"]
            cursor = page["nextCursor"]
            if cursor is None:
                break
        assert [items[0], items[2]] == [rows[0], rows[2]]
        (ref,) = refs
        members = [m for p in await read_back(client, ref, "") for m in p["items"]]
        assert [m["key"] for m in members] == ["i", "blob"]
        whole: dict[str, Any] = {"i": (await read_back(client, ref, "/i"))[0]["items"][0]}
        whole["blob"] = "".join(
            READ_MARKER.sub("", p["items"][0]) for p in await read_back(client, ref, "/blob")
        )
        assert whole == rows[1]
        caller["name"] = "mallory"
        with pytest.raises(MCPError) as info:
            await client.call_tool("read_result", {"ref": ref})
        assert info.value.code == INVALID_PARAMS
        assert info.value.data == {"reason": "scope_principal"}


def test_pager_reader_option(tmp_path: Path) -> None:
    reader = ResultReader(spill=SpillStore(tmp_path / "spill"))
    row = [{"blob": "z" * 20_000}]
    with pytest.raises(LimitError, match=r"^spill_store=.*must be the reader's spill store"):
        McpPager(max_bytes=6144, oversized="spill", reader=reader,
                 spill_store=SpillStore(tmp_path / "other"))  # fmt: skip
    with pytest.raises(TypeError, match="reader must be a ResultReader"):
        McpPager(max_bytes=6144, oversized="spill", reader=reader.spill)  # type: ignore[arg-type]
    same = McpPager(max_bytes=6144, oversized="spill", reader=reader, spill_store=reader.spill)
    ref = same.paginate(row, scope=Scope("alice", {})).structured_content["oversized"][0]["ref"]
    read = orjson.loads(read_result(ref, "/blob", reader=reader, principal="alice").data)
    assert read["items"][0].startswith("z" * 1000)
    # Without a reader, as before: the store's own name, read from the store.
    plain = McpPager(max_bytes=6144, oversized="spill", spill_store=reader.spill)
    name = plain.paginate(row, scope=Scope("alice", {})).structured_content["oversized"][0]["ref"]
    assert orjson.loads(reader.spill.read(name, 0, 100_000)) == row[0]
    with pytest.raises(InvalidCursor):
        read_result(name, reader=reader, principal="alice")


# -- bounded_result: every value shape, every mode, every budget --------------------------

VALUES = st.recursive(
    st.none() | st.booleans() | st.integers() | st.text() | st.floats(allow_nan=False),
    lambda inner: st.lists(inner, max_size=30) | st.dictionaries(st.text(), inner, max_size=10),
    max_leaves=200,
)


@given(
    value=VALUES | st.lists(st.text('"\\\x01a', max_size=40), min_size=50, max_size=400),
    budget=st.integers(min_value=600, max_value=6000),
    content=st.sampled_from(["both", "structured", "text"]),
)
@settings(max_examples=300, deadline=None)
def test_bounded_result_fits_every_value_shape(value: Any, budget: int, content: Any) -> None:
    """Non-object values go as {"result": ...}: the wrapper once went uncounted (a list at
    1,100 bytes made 1,108) and fit() raised EncodeError."""
    try:
        result = bounded_result(value, max_bytes=budget, content=content)
    except LimitError:
        assert budget < 1000  # only below the mode's documented minimum
        return
    assert message_bytes(result, server=DEFAULT_SIZED_SERVER) <= budget
    if content != "text" and not isinstance(value, str):
        assert isinstance(result.structured_content, dict)


# A server whose serverInfo stamp is as large as the default reservation (128 bytes).
DEFAULT_SIZED_SERVER = Implementation(name="n" * 96, version="v" * 32)


# -- protocol 2026-07-28: resultType and the serverInfo stamp ------------------------------


def big_server(budget: int, info: dict[str, Any]) -> MCPServer:
    server = MCPServer(**info)
    rows = [{"id": i, "p": 'C:\\"x"'} for i in range(3000)]

    @server.tool()
    def big() -> CallToolResult:
        return bounded_result(rows, max_bytes=budget, content="structured", server=server)

    @server.tool()
    def default_big() -> CallToolResult:
        return bounded_result(rows, max_bytes=budget, content="both")

    @server.tool()
    @paginated_tool(max_bytes=budget, content="structured", server=server)
    def pages() -> list[dict[str, Any]]:
        return rows

    return server


@pytest.mark.parametrize("protocol", ["legacy", "auto"])
async def test_modern_protocol_stamps_count_against_the_budget(protocol: str) -> None:
    """Under mode="auto" the server adds "resultType" and _meta serverInfo to every result;
    they went uncounted (budget 2000, 2065-byte lines). The stamp of a server with a long
    identity is counted exactly when the server is given, the default reservation covers
    a name and version; a legacy result carries neither."""
    budget = 2000
    info = {"name": "inventory-server", "version": "1.2.3", "title": "Inventory " * 20,
            "description": "Every item in stock. " * 10}  # fmt: skip
    small = {"name": "inventory-server", "version": "1.2.3"}
    for identity, tools in ((info, ("big", "pages")), (small, ("big", "default_big", "pages"))):
        server = big_server(budget, identity)
        async with Client(server, mode=protocol) as client:
            for name in tools:
                result = await client.call_tool(name, {})
                assert result.is_error is False
                stamp = (result.meta or {}).get("io.modelcontextprotocol/serverInfo")
                assert (stamp is not None) is (protocol == "auto"), name
                if stamp is not None:
                    assert stamp["name"] == "inventory-server"
                # The client's model holds exactly what came on the wire.
                wire = CallToolResult(content=result.content, _meta=result.meta,
                                      structured_content=result.structured_content)  # fmt: skip
                assert message_bytes(wire) <= budget, (identity, name)
                assert message_bytes(wire) > budget // 2  # the room is used, not wasted


def test_message_bytes_counts_the_stamp_of_a_server() -> None:
    server = MCPServer("x" * 300, version="9")
    result = bounded_result({"a": 1}, max_bytes=3000)
    assert message_bytes(result, server=server) - message_bytes(result) > 300
    assert message_bytes(result, server=server) == message_bytes(
        result, server=server._lowlevel_server
    )


# -- paginated_tool: injected Context and model arguments ----------------------------------


class Filter(BaseModel):
    status: str = "open"
    tags: list[str] = []


@dataclasses.dataclass
class Window:
    start: int
    end: int


async def test_paginated_tool_leaves_context_out_of_the_scope_and_dumps_models() -> None:
    """An injected ctx: Context and pydantic arguments once went into the cursor's scope
    and every call failed ("query value of type Context has no JSON form")."""
    server = MCPServer("ctx")
    seen: list[Any] = []

    @server.tool()
    @paginated_tool(max_bytes=3000)
    def with_ctx(ctx: Context, status: str = "open") -> list[dict[str, Any]]:
        """Rows."""
        seen.append(ctx)
        return [{"id": i, "status": status} for i in range(300)]

    @server.tool()
    @paginated_tool(max_bytes=3000)
    async def with_model(f: Filter, ctx: Context | None = None) -> list[dict[str, Any]]:
        """Rows."""
        return [{"id": i, "status": f.status} for i in range(300)]

    tools = {t.name: t for t in (await MCPServer.list_tools(server))}
    assert "ctx" not in tools["with_ctx"].input_schema["properties"]
    async with Client(server, mode="legacy") as client:
        calls: list[tuple[str, dict[str, Any], dict[str, Any]]] = [
            ("with_ctx", {"status": "open"}, {"status": "closed"}),
            ("with_model", {"f": {"status": "open", "tags": ["a"]}},
             {"f": {"status": "open", "tags": ["b"]}}),
        ]  # fmt: skip
        for name, args, other in calls:
            first = await client.call_tool(name, args)
            assert first.is_error is False, first.content
            assert first.structured_content is not None
            cursor = first.structured_content["nextCursor"]
            ids = [r["id"] for r in first.structured_content["items"]]
            second = await client.call_tool(name, {**args, "cursor": cursor})
            assert second.is_error is False
            assert second.structured_content is not None
            assert second.structured_content["items"][0]["id"] == ids[-1] + 1
            # The model's fields are in the scope: other fields refuse the cursor.
            with pytest.raises(MCPError) as refused:
                await client.call_tool(name, {**other, "cursor": cursor})
            assert refused.value.error.code == INVALID_PARAMS
    assert isinstance(seen[0], Context)


def test_scope_takes_the_json_form_of_models_and_dataclasses() -> None:
    @paginated_tool(max_bytes=3000)
    def rows(f: Filter, w: Window, many: list[Window]) -> list[int]:
        return list(range(500))

    first = rows(Filter(tags=["x"]), Window(1, 2), [Window(3, 4)])
    cursor = first.structured_content["nextCursor"]
    again = rows(Filter(tags=["x"]), Window(1, 2), [Window(3, 4)], cursor=cursor)
    assert again.structured_content["items"][0] == len(first.structured_content["items"])
    with pytest.raises(MCPError):
        rows(Filter(tags=["x"]), Window(1, 2), [Window(3, 5)], cursor=cursor)


# -- numbers the SDK would write back otherwise --------------------------------------------


def same_value_in_both_copies(result: CallToolResult) -> Any:
    """The text copy parsed exactly (integers of any size, no float rounding) is the
    structured copy; returns it."""
    (block,) = result.content
    text = load_json(block.text)  # type: ignore[union-attr]
    structured = result.structured_content
    assert structured is not None
    assert structured in (text, {"result": text})
    return structured


def test_regression_decimal_1e15_does_not_grow_past_max_bytes(tmp_path: Path) -> None:
    """Decimal("1E+15") went as 1E+15 (5 bytes) in the text copy and came back from the
    structured copy as 1000000000000000.0 (18): bounded_result, McpResultFitter.fit and
    paginated_tool raised EncodeError "over max_bytes", read_result_tool sent more than
    max_bytes. Such a number now goes as the string of its exact text in both copies."""
    budget = 4096
    values = [Decimal("1E+15")] * 3000
    for content in ("both", "structured"):
        fitted = McpResultFitter(max_bytes=budget, content=content).fit(values)
        assert message_bytes(fitted) <= budget
        assert fitted.structured_content is not None
        assert fitted.structured_content["result"][0] == "1E+15"
        one = bounded_result({"rows": values}, max_bytes=budget, content=content)
        assert message_bytes(one) <= budget
    assert same_value_in_both_copies(bounded_result(values, max_bytes=budget))["result"][1] == (
        "1E+15"
    )

    @paginated_tool(max_bytes=budget)
    def prices() -> list[Decimal]:
        return values

    page = prices()
    assert message_bytes(page) <= budget
    envelope = same_value_in_both_copies(page)
    assert envelope["items"][:2] == ["1E+15", "1E+15"]
    assert envelope["nextCursor"] is not None

    reader = ResultReader(spill=SpillStore(tmp_path / "spill"))
    gate = ResultGate(max_bytes=4096, reader=reader, principal="p")
    ref = orjson.loads(gate.gate(b"[" + b",".join([b"1E+15"] * 5000) + b"]").data)["spilled"]
    read = read_result_tool(reader=reader, max_bytes=budget, principal="p")(ref["ref"])
    assert message_bytes(read) <= budget
    assert same_value_in_both_copies(read)["items"][0] == "1E+15"


def test_regression_long_decimals_are_the_same_value_in_text_and_structured_copies() -> None:
    """The structured copy held a 30-digit Decimal as the nearest double
    (1.2345678901234568), the text copy all 30 digits."""
    exact = "1.23456789012345678901234567891"
    value = {"price": Decimal(exact), "tiny": Decimal("1E-400"), "plain": Decimal("19.90"),
             "float": 0.1, "e16": 1e16}  # fmt: skip
    for content in ("both", "structured"):
        result = bounded_result(value, max_bytes=3000, content=content)
        structured = result.structured_content
        assert structured is not None
        # What the SDK cannot write back as it stands is its exact text, as a string.
        assert structured["price"] == exact
        assert structured["tiny"] == "1E-400"
        # The rest stays a number: written back the same (19.90 as 19.9, fewer bytes).
        assert structured["plain"] == 19.9
        assert structured["float"] == 0.1
        assert structured["e16"] == 1e16
        if content == "both":
            assert same_value_in_both_copies(result) == structured


async def test_regression_decimals_reach_the_client_as_sent() -> None:
    server = MCPServer("prices")

    @server.tool()
    def quote() -> CallToolResult:
        """Prices, many."""
        return bounded_result([Decimal("1E+15"), Decimal("1.23456789012345678901234567891")]
                              * 500, max_bytes=3000)  # fmt: skip

    async with Client(server, mode="legacy") as client:
        got = await client.call_tool("quote", {})
    wire = CallToolResult(content=got.content, structured_content=got.structured_content)
    assert message_bytes(wire) <= 3000
    assert same_value_in_both_copies(wire)["result"][:2] == [
        "1E+15", "1.23456789012345678901234567891"
    ]  # fmt: skip


def test_regression_paginated_tool_binds_cursors_to_the_registered_name() -> None:
    """Cursors were bound to fn.__name__: two tools made from functions of one name (a
    factory) accepted each other's cursors and paged the other's rows."""
    store = MemoryCursorStore()

    def make(name: str, rows: list[int]) -> Any:
        @paginated_tool(max_bytes=3000, store=store, name=name)
        def rows_tool() -> list[int]:
            return rows

        return rows_tool

    evens, odds = make("evens", list(range(0, 2000, 2))), make("odds", list(range(1, 2000, 2)))
    cursor = evens().structured_content["nextCursor"]
    assert evens(cursor=cursor).structured_content["items"][0] % 2 == 0
    with pytest.raises(MCPError) as refused:
        odds(cursor=cursor)
    assert refused.value.error.code == INVALID_PARAMS
    assert refused.value.error.data == {"reason": "scope_query"}
    with pytest.raises(TypeError, match="name"):
        paginated_tool(max_bytes=3000, name="")


class _Db:
    """A per-request resource the server resolves (an SDK ``Resolve`` dependency)."""


def _get_db() -> _Db:
    return _Db()


async def test_regression_an_sdk_resolved_parameter_stays_out_of_the_cursor_scope() -> None:
    """Found with FastMCP's dependencies: a parameter the server fills per request
    (the SDK's ``Annotated[T, Resolve(...)]``) was fingerprinted into the cursor's scope,
    and every call failed ("query value of type Db has no JSON form")."""
    server = MCPServer("resolved")

    @server.tool()
    @paginated_tool(max_bytes=4096, store=MemoryCursorStore())
    def rows(q: str, db: Annotated[_Db, Resolve(_get_db)]) -> list[dict[str, Any]]:
        assert isinstance(db, _Db)
        return [{"i": i, "q": q} for i in range(300)]

    async with Client(server) as client:
        seen: list[int] = []
        cursor = None
        while True:
            args: dict[str, Any] = {"q": "x", **({"cursor": cursor} if cursor else {})}
            env = check_sizes(await client.call_tool("rows", args), 4096)
            seen.extend(item["i"] for item in env["items"])
            cursor = env["nextCursor"]
            if cursor is None:
                break
        assert seen == list(range(300))
        # The cursor is still bound to what the client sent.
        first = check_sizes(await client.call_tool("rows", {"q": "x"}), 4096)
        with pytest.raises(MCPError) as info:
            await client.call_tool("rows", {"q": "y", "cursor": first["nextCursor"]})
        assert info.value.code == INVALID_PARAMS


async def test_regression_arguments_of_rich_types_are_bound_as_sent() -> None:
    """Found by a tester: the SDK makes the client's JSON into the declared types (an
    HttpUrl, a Path, a timedelta, a SecretStr), which the cursor's scope had no JSON for:
    every call failed ("query value of type HttpUrl has no JSON form")."""
    server = MCPServer("typed")

    @server.tool()
    @paginated_tool(max_bytes=4096, store=MemoryCursorStore())
    def crawl(
        url: pydantic.HttpUrl, root: Path, every: datetime.timedelta, key: pydantic.SecretStr
    ) -> list[str]:
        return [f"{url}#{i}" for i in range(300)]

    args: dict[str, Any] = {
        "url": "https://example.com/",
        "root": "/tmp",
        "every": "PT1M",
        "key": "s3cret",
    }
    async with Client(server) as client:
        seen: list[str] = []
        cursor = None
        while True:
            env = check_sizes(
                await client.call_tool("crawl", {**args, **({"cursor": cursor} if cursor else {})}),
                4096,
            )
            seen += env["items"]
            cursor = env["nextCursor"]
            if cursor is None:
                break
        assert seen == [f"https://example.com/#{i}" for i in range(300)]
        first = check_sizes(await client.call_tool("crawl", args), 4096)
        for other in ({"url": "https://example.org/"}, {"key": "another"}):
            with pytest.raises(MCPError) as info:
                await client.call_tool("crawl", {**args, **other, "cursor": first["nextCursor"]})
            assert info.value.code == INVALID_PARAMS


TAGS_SERVER = """
import sys
from mcp.server.mcpserver import MCPServer
from jsonbudget import SQLiteCursorStore
from jsonbudget.mcp import paginated_tool

server = MCPServer("tags")

@server.tool()
@paginated_tool(max_bytes=4096, store=SQLiteCursorStore(sys.argv[1]))
def by_tags(tags: set[str], also: list[frozenset[str]]) -> list[dict[str, object]]:
    return [{"id": i, "tag": sorted(tags)[i % len(tags)]} for i in range(300)]

server.run("stdio")
"""


async def test_regression_a_set_argument_binds_the_same_query_in_every_process(
    tmp_path: Path,
) -> None:
    """Found by a tester: a set[str] argument was bound as a list in the order of the
    process's string hashes, so a restarted server (or another worker sharing a durable
    store) refused every cursor of the tool with scope_query."""
    script = tmp_path / "tags_server.py"
    script.write_text(TAGS_SERVER, encoding="utf-8")
    store = tmp_path / "cursors.sqlite3"
    tags = ["alpha", "beta", "gamma", "delta", "epsilon", "zeta", "eta", "theta"]
    args = {"tags": tags, "also": [tags[::-1], tags[:3]]}

    def process(seed: int) -> StdioServerParameters:
        env = {**os.environ, "PYTHONPATH": str(ROOT / "src"), "PYTHONHASHSEED": str(seed)}
        return StdioServerParameters(command=sys.executable, args=[str(script), str(store)],
                                     env=env)  # fmt: skip

    async with Client(process(1), mode="legacy") as first:
        page = check_sizes(await first.call_tool("by_tags", args), 4096)
    cursor, after = page["nextCursor"], page["items"][-1]["id"] + 1
    for seed in (2, 3, 4, 5):  # a set's order differs between (almost) any two seeds
        async with Client(process(seed), mode="legacy") as other:
            got = check_sizes(await other.call_tool("by_tags", {**args, "cursor": cursor}), 4096)
            assert got["items"][0]["id"] == after
            with pytest.raises(MCPError) as info:
                await other.call_tool("by_tags", {**args, "tags": tags[1:], "cursor": cursor})
            assert info.value.error.data == {"reason": "scope_query"}


class Creds(BaseModel):
    user: str
    token: pydantic.SecretStr


class Tenant(BaseModel):
    status: str
    tenant: str = pydantic.Field(exclude=True)


async def test_regression_nested_secrets_and_excluded_fields_are_bound(tmp_path: Path) -> None:
    """Found by a tester: a SecretStr inside a model or a list was bound by its mask, and
    a Field(exclude=True) not at all: a cursor was accepted with other arguments (another
    credential's or tenant's query). Bound by their text, the secrets still appear
    nowhere a client or the cursor store sees."""
    server = MCPServer("secrets")
    store = SQLiteCursorStore(tmp_path / "cursors.sqlite3")

    @server.tool()
    @paginated_tool(max_bytes=3000, store=store)
    def nested(creds: Creds) -> list[int]:
        return list(range(300))

    @server.tool()
    @paginated_tool(max_bytes=3000, store=store)
    def listed(tokens: list[pydantic.SecretStr]) -> list[int]:
        return list(range(300))

    @server.tool()
    @paginated_tool(max_bytes=3000, store=store)
    def excluded(f: Tenant) -> list[int]:
        return list(range(300))

    probes: list[tuple[str, dict[str, Any], dict[str, Any]]] = [
        ("nested", {"creds": {"user": "u", "token": "alice-s3cret"}},
         {"creds": {"user": "u", "token": "bob-s3cret"}}),
        ("listed", {"tokens": ["alice-s3cret"]}, {"tokens": ["bob-s3cret"]}),
        ("excluded", {"f": {"status": "open", "tenant": "acme"}},
         {"f": {"status": "open", "tenant": "globex"}}),
    ]  # fmt: skip
    sent: list[str] = []
    async with Client(server, mode="legacy") as client:
        for name, args, other in probes:
            page = check_sizes(await client.call_tool(name, args), 3000)
            again = check_sizes(
                await client.call_tool(name, {**args, "cursor": page["nextCursor"]}), 3000
            )
            assert again["items"][0] == page["items"][-1] + 1
            with pytest.raises(MCPError) as info:
                await client.call_tool(name, {**other, "cursor": page["nextCursor"]})
            assert info.value.error.data == {"reason": "scope_query"}, name
            sent += [page["nextCursor"], str(again["nextCursor"]), str(info.value)]
    stored = b"".join(p.read_bytes() for p in tmp_path.iterdir())
    for secret in ("alice-s3cret", "bob-s3cret"):
        assert secret.encode() not in stored
        assert not any(secret in text for text in sent)


class AsyncRows:
    """An async re-iterable, as a sync factory of an async stream returns."""

    def __init__(self, n: int) -> None:
        self.n = n

    def __aiter__(self) -> Any:
        async def rows() -> Any:
            for i in range(self.n):
                yield {"i": i}

        return rows()


async def test_regression_a_sync_tool_may_return_an_async_source() -> None:
    """Found by a tester: a sync function returning an async re-iterable (which the docs
    list among the sources) failed on every call: "an async source needs apage /
    apaginate"."""
    server = MCPServer("async-from-sync")

    @server.tool()
    @paginated_tool(max_bytes=3000, store=MemoryCursorStore())
    def rows(n: int) -> AsyncRows:
        return AsyncRows(n)

    seen: list[int] = []
    async with Client(server, mode="legacy") as client:
        cursor = None
        while True:
            args = {"n": 500, **({"cursor": cursor} if cursor else {})}
            env = check_sizes(await client.call_tool("rows", args), 3000)
            seen += [row["i"] for row in env["items"]]
            cursor = env["nextCursor"]
            if cursor is None:
                break
    assert seen == list(range(500))
    # Called in a thread where no event loop runs (not a server's), it pages on a loop of
    # its own; on a running loop it would block that loop, and says so.
    alone = await asyncio.to_thread(rows, 10)
    assert alone.structured_content is not None
    assert alone.structured_content["items"] == [{"i": i} for i in range(10)]
    with pytest.raises(TypeError, match="make it async def"):
        rows(10)

"""MCP results: the ``{"result": ...}`` wrapper under structured markers, and the plans
`BoundedResults` keeps per server identity.

With ``markers="structured"`` a value that is not an object went unwrapped whenever a
marker stood at its top (``nan``, an int beyond 64 bits, a set, bytes): the marker is an
object, and wrapping was decided from the output. A cut ``str`` raised pydantic's
validation error, as its marker is no text. `BoundedResults` kept each server's plan by
``id(server)``: a dropped server's id, reused by an app with a longer serverInfo stamp,
handed that app the old plan and its cut results went over the budget.
"""

from __future__ import annotations

import dataclasses
import gc
import types
from collections.abc import Callable, Iterator
from typing import Any

import msgspec
import pydantic
import pytest
from fastmcp import Client as FastMCPClient
from fastmcp import FastMCP
from mcp import Client
from mcp.server.mcpserver import MCPServer
from mcp.types import CallToolResult, TextContent

from jsonbudget._sources.jsonread import load_json
from jsonbudget.fastmcp import BoundedResults
from jsonbudget.mcp import bounded_result, message_bytes

BUDGET = 4096
LONG = 20_000


class ArrayStruct(msgspec.Struct, array_like=True):
    id: int
    body: str


class Rows(pydantic.RootModel[list[int]]):
    pass


class Row(pydantic.BaseModel):
    body: str


@dataclasses.dataclass
class Record:
    body: str


class Opaque:
    """A type only `default` knows: it writes it as an object."""

    def __init__(self, body: str) -> None:
        self.body = body


def as_object(value: Any) -> Any:
    if isinstance(value, Opaque):
        return {"body": value.body}
    raise TypeError(type(value).__name__)


def counting(n: int) -> Iterator[int]:
    yield from range(n)


# name -> (a maker of the value, whether the encoder writes it whole as an object)
VALUES: dict[str, tuple[Callable[[], Any], bool]] = {
    "nan": (lambda: float("nan"), False),
    "int beyond 64 bits": (lambda: 2**70, False),
    "set": (lambda: {1, 2}, False),
    "bytes": (lambda: b"abc", False),
    "float": (lambda: 1.5, False),
    "none": (lambda: None, False),
    "short str": (lambda: "short", False),
    "long str": (lambda: "x" * LONG, False),
    "short list": (lambda: [1, 2], False),
    "long list": (lambda: list(range(LONG)), False),
    "iterator": (lambda: counting(LONG), False),
    "root model of a list": (lambda: Rows(list(range(LONG))), False),
    "array-like struct": (lambda: ArrayStruct(1, "y" * LONG), False),
    "dict": (lambda: {"a": 1}, True),
    "long dict": (lambda: {"a": "z" * LONG}, True),
    "mapping": (lambda: types.MappingProxyType({"a": "z" * LONG}), True),
    "model": (lambda: Row(body="z" * LONG), True),
    "dataclass": (lambda: Record("z" * LONG), True),
    "converted by default": (lambda: Opaque("z" * LONG), True),
}


@pytest.mark.parametrize("markers", ["text", "structured"])
@pytest.mark.parametrize("content", ["both", "structured"])
@pytest.mark.parametrize("name", list(VALUES))
def test_regression_structured_markers_lost_the_result_wrapper(
    name: str, content: Any, markers: Any
) -> None:
    make, is_object = VALUES[name]
    default = as_object if name == "converted by default" else None
    result = bounded_result(
        make(), max_bytes=BUDGET, content=content, markers=markers, default=default
    )
    assert message_bytes(result) <= BUDGET
    first = result.content[0]
    assert isinstance(first, TextContent)
    if markers == "text" and name.endswith("str"):
        # Documented: a str is text, cut with its marker inside it, and only text.
        assert result.structured_content is None
        return
    structured = result.structured_content
    assert isinstance(structured, dict)
    if is_object:
        assert set(structured) != {"result"}
        whole = structured
    else:
        assert set(structured) == {"result"}
        whole = structured["result"]
    if content == "both":
        # The text is the value itself, as the SDK and FastMCP send a wrapped one.
        assert load_json(first.text) == whole


def test_regression_structured_marker_of_a_str_kept_the_budget_and_wrapper() -> None:
    # Every growth case of a str's JSON at once: escapes, non-ASCII, astral characters.
    value = ('"\\\x01é😀' * LONG)[:LONG]
    for content in ("both", "structured", "text"):
        result = bounded_result(value, max_bytes=BUDGET, content=content, markers="structured")
        assert message_bytes(result) <= BUDGET
        if content != "text":
            assert result.structured_content is not None
            assert result.structured_content["result"]["$truncated"]["kind"] == "string"


async def test_regression_structured_markers_wrapper_through_the_clients() -> None:
    def unencodable() -> CallToolResult:
        return bounded_result(float("nan"), max_bytes=BUDGET, markers="structured")

    sdk = MCPServer("sdk")
    sdk.tool()(unencodable)
    async with Client(sdk, mode="legacy") as client:
        got = await client.call_tool("unencodable", {})
    assert got.structured_content == {"result": {"$truncated": {"kind": "unencodable",
                                                                "what": "nan"}}}  # fmt: skip

    app = FastMCP("app")
    app.tool(unencodable)
    async with FastMCPClient(app) as fast:
        res = await fast.call_tool("unencodable", {})
    assert res.structured_content == got.structured_content


def big() -> dict[str, Any]:
    return {"rows": ["x" * 50 for _ in range(300)]}


async def _call_bytes(app: FastMCP) -> int:
    async with FastMCPClient(app) as client:
        got = await client.call_tool("big", {})
    wire = CallToolResult(content=got.content, structured_content=got.structured_content,
                          _meta=got.meta)  # fmt: skip
    return message_bytes(wire, server=app._mcp_server)


async def test_regression_bounded_results_plan_of_a_dropped_server_reused_by_id() -> None:
    budget = 6000
    middleware = BoundedResults(max_bytes=budget)
    # Whether an id is reused is the allocator's: about one round in ten reuses none
    # (measured), so up to five rounds are tried before nothing checked is a failure.
    for _ in range(5):
        if await _a_dropped_servers_id_reused(middleware, budget):
            return
    pytest.fail("no dropped server's id was reused in 5 rounds: nothing was checked")


async def _a_dropped_servers_id_reused(middleware: BoundedResults, budget: int) -> bool:
    """Whether an app made after others were dropped got one's server id (and, if so,
    its result was fitted to its own stamp)."""
    # The collector walks only what is made below: dropping a server is then quick.
    gc.collect()
    gc.freeze()
    try:
        # Servers with a short stamp, each with its plan made by a cut result, dropped.
        dropped = set()
        for _ in range(7):
            short = FastMCP("s", version="1", middleware=[middleware], tools=[big])
            dropped.add(id(short._mcp_server))
            assert await _call_bytes(short) <= budget
            del short
        gc.collect()
        # Apps whose stamp is 2,000 bytes longer, until one's server takes a dropped id.
        for _ in range(400):
            long = FastMCP("L" * 2000, version="1", middleware=[middleware], tools=[big])
            if id(long._mcp_server) in dropped:
                assert await _call_bytes(long) <= budget
                return True
            del long
            gc.collect()
    finally:
        gc.unfreeze()
    return False

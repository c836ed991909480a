"""Round 25, FastMCP: `BoundedResults` works with the budget, not the size of the result,
and a refused cursor's outcome under FastMCP is what docs/mcp.md says."""

from __future__ import annotations

import json
import logging
import sys
import threading
from collections.abc import Callable
from types import SimpleNamespace
from typing import Any

import orjson
import pytest
from fastmcp import Client, FastMCP
from fastmcp.tools.base import ToolResult
from mcp.shared.exceptions import MCPError
from mcp.types import CallToolResult, ImageContent, JSONRPCResponse, TextContent

import jsonbudget.fastmcp as bridge
from jsonbudget import DecodeError, MemoryCursorStore, mcp
from jsonbudget._sources import jsonread
from jsonbudget.fastmcp import BoundedResults
from jsonbudget.mcp import message_bytes, page_output_schema, paginated_tool

INVALID_PARAMS = -32602


def wire_of(result: Any) -> CallToolResult:
    return CallToolResult(
        content=result.content,
        structured_content=result.structured_content,
        _meta=result.meta,
        is_error=result.is_error,
    )


def scanned(monkeypatch: pytest.MonkeyPatch) -> list[int]:
    """The characters each call of the pure-Python parser reads, from where it starts."""
    sizes: list[int] = []
    scan = jsonread.scan_json

    def counted(text: str, start: int, **kwargs: Any) -> tuple[Any, int]:
        sizes.append(len(text) - start)
        return scan(text, start, **kwargs)

    monkeypatch.setattr(jsonread, "scan_json", counted)
    return sizes


def serialized(monkeypatch: pytest.MonkeyPatch) -> list[int]:
    """The length of every response line `message_bytes` writes, in either copy."""
    sizes: list[int] = []
    dump_json = JSONRPCResponse.model_dump_json

    def line(self: JSONRPCResponse, **kwargs: Any) -> str:
        out = dump_json(self, **kwargs)
        sizes.append(len(out))
        return out

    def dumps(value: Any, **kwargs: Any) -> str:
        out = json.dumps(value, **kwargs)
        sizes.append(len(out))
        return out

    monkeypatch.setattr(JSONRPCResponse, "model_dump_json", line)
    monkeypatch.setattr(mcp, "json", SimpleNamespace(dumps=dumps))
    return sizes


async def test_regression_a_large_results_text_is_parsed_by_orjson_off_the_loop(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    """A tester's 100,000 rows (6 MB) kept BoundedResults on the event loop for 3.8 s:
    FastMCP's text copy was parsed by the pure-Python parser (load_json took orjson only
    for bytes, and for no document of more than 128 brackets), and measured twice in
    full (pydantic's line and json.dumps'). Now nothing of it is scanned in Python, no
    line longer than a few budgets is written, and the parse runs in a worker thread."""
    rows = [{"id": i, "title": f"row {i} " + "x" * 40} for i in range(40_000)]
    app = FastMCP("search")
    app.add_middleware(BoundedResults(max_bytes=8192))

    @app.tool()
    def search() -> list[dict[str, Any]]:
        return rows

    threads: list[threading.Thread] = []
    read = mcp.value_of  # what jsonbudget.fastmcp calls, by its own name

    def value_of(result: Any) -> tuple[Any, int]:
        threads.append(threading.current_thread())
        return read(result)

    monkeypatch.setattr(bridge, "value_of", value_of)
    async with Client(app) as client:
        scans, lines = scanned(monkeypatch), serialized(monkeypatch)
        got = await client.call_tool("search", {})
    assert len(orjson.dumps(rows)) > 2_000_000  # a text copy of megabytes
    assert sum(scans) == 0, f"{sum(scans)} characters parsed in Python"
    assert lines, "the cut result was measured"
    assert max(lines) < 8 * 8192, f"a {max(lines)}-character line was written"
    assert threads
    assert threads[0] is not threading.main_thread()
    assert message_bytes(wire_of(got)) <= 8192
    listed = got.structured_content["result"]
    assert listed[0] == rows[0]
    assert listed[-1].startswith("…[omitted: ")
    assert orjson.loads(got.content[0].text) == got.structured_content


def test_regression_load_json_reads_a_str_and_many_brackets_with_orjson(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    """load_json sent every str, and any document of more than max_depth brackets, to
    the pure-Python parser. What orjson reads exactly now comes from orjson, with the
    exact parser's values; the rest is still read by it, with its markers and errors."""
    scans = scanned(monkeypatch)
    many = [{"id": i, "t": ["é", '"[', 0.1, -0.0, 10**18]} for i in range(3000)]
    text = json.dumps(many, ensure_ascii=False)
    for doc in (text, text.encode()):
        assert repr(jsonread.load_json(doc)) == repr(many)
    assert scans == []
    # Within the depth, read whole; one level more, cut by the exact parser as before.
    nested: Any = [[[1, 2]] * 50] * 3  # the lists [1, 2] at depth 2
    assert jsonread.load_json(json.dumps(nested), max_depth=2) == nested
    assert scans == []
    exact = jsonread.scan_json(json.dumps(nested), 0, max_depth=1)[0]
    assert jsonread.load_json(json.dumps(nested), max_depth=1) == exact
    assert exact[0][0] == "…[depth: list of 2 items]"
    assert scans
    # What orjson cannot read exactly: an integer beyond 64 bits, a lone surrogate in the
    # str itself or as an escape, and errors, all said as the exact parser says them.
    assert jsonread.load_json('[18446744073709551616, "a"]') == [2**64, "a"]
    assert jsonread.load_json('["\ud800"]') == ["\ud800"]
    assert jsonread.load_json('["\\ud800"]') == ["\ud800"]
    with pytest.raises(DecodeError, match="Expecting ',' delimiter") as info:
        jsonread.load_json('["é" "x"]')
    assert info.value.offset == 6  # in bytes: "é" is 2


def probe_results() -> dict[str, ToolResult]:
    """Results of every kind BoundedResults cuts, each over a 3,000-byte budget."""
    rows = [
        {
            "id": i,
            "name": f"row {i} é “{i}” 🙂",
            "note": 'say "hi" \\ ',
            "x": 0.1 * i,
            "big": 10**17 + i,
            "neg": -0.0,
            "e": 1e16,
        }
        for i in range(300)
    ]
    deep: Any = [{"k": [[i]] * 40} for i in range(200)]
    for _ in range(130):
        deep = [deep]
    image = ImageContent(type="image", data="iVBORw0KGgo=" * 10, mime_type="image/png")
    text = json.dumps(rows)
    return {
        "rows": ToolResult(
            content=[TextContent(type="text", text=text)], structured_content={"result": rows}
        ),
        "pretty": ToolResult(
            content=[TextContent(type="text", text=json.dumps(rows, indent=2))],
            structured_content={"result": rows},
        ),
        "other_text": ToolResult(
            content=[TextContent(type="text", text=text[::-1])], structured_content={"result": rows}
        ),
        "big_ints": ToolResult(
            content=[TextContent(type="text", text=json.dumps([2**70 + i for i in range(400)]))]
        ),
        "deep": ToolResult(content=[TextContent(type="text", text=json.dumps(deep))]),
        "prose": ToolResult(content=[TextContent(type="text", text="words, not JSON " * 400)]),
        "blocks": ToolResult(
            content=[
                TextContent(type="text", text=text),
                image,
                TextContent(type="text", text="a caption"),
            ],
            structured_content={"rows": rows},
        ),
        "meta": ToolResult(
            content=[TextContent(type="text", text=text)],
            structured_content={"result": rows},
            meta={"mine": "x" * 900},
        ),
        "error": ToolResult(
            content=[TextContent(type="text", text="failed: " + "é" * 3000)], is_error=True
        ),
        "page": ToolResult(
            content=[
                TextContent(
                    type="text",
                    text=json.dumps({"items": rows, "complete": False, "nextCursor": "c"}),
                )
            ]
        ),
    }


def returning(result: ToolResult) -> Callable[[], ToolResult]:
    def tool() -> ToolResult:
        return result

    return tool


async def outputs(results: dict[str, ToolResult]) -> dict[str, str]:
    app = FastMCP("probe")
    app.add_middleware(BoundedResults(max_bytes=3000))
    for name, result in results.items():
        app.tool(name=name)(returning(result))
    got: dict[str, str] = {}
    async with Client(app) as client:
        for name in results:
            answer = await client.call_tool(name, {}, raise_on_error=False)
            got[name] = wire_of(answer).model_dump_json(by_alias=True, exclude_none=True)
    return got


async def test_bounded_results_cuts_as_it_did_before_the_fast_paths(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    """The same results as with the pure-Python parser and the whole message measured
    (what BoundedResults did before it read texts with orjson and stopped measuring at
    the budget): the fast paths change the work, not one byte of what is sent."""
    results = probe_results()
    fast = await outputs(results)
    assert "omitted" in fast["rows"]  # cut: the corpus is over the budget
    assert "cutting its items would lose the rows" in fast["page"]

    def refused(_data: bytes) -> Any:
        raise orjson.JSONDecodeError("refused", "", 0)

    def measured(wire: CallToolResult, most: int, *, server: Any = None) -> bool:
        return message_bytes(wire, server=server) > most

    with monkeypatch.context() as patch:
        stub = SimpleNamespace(loads=refused, JSONDecodeError=orjson.JSONDecodeError)
        patch.setattr(jsonread, "orjson", stub)
        patch.setattr(bridge, "message_over", measured)
        slow = await outputs(results)
    assert fast == slow


def test_message_bytes_counts_the_escaped_copy_as_before() -> None:
    """The json.dumps copy is now written from the result's JSON-mode dump, not from a
    second dump of the whole response: the same count."""

    def before(result: CallToolResult, request_id: int | str) -> int:
        dumped = result.model_dump(by_alias=True, mode="json", exclude_none=True)
        dumped.setdefault("resultType", "complete")
        response = JSONRPCResponse(jsonrpc="2.0", id=request_id, result=dumped)
        line = response.model_dump_json(by_alias=True, exclude_unset=True).encode()
        body = response.model_dump(mode="json", by_alias=True, exclude_none=True)
        return max(len(line), len(json.dumps(body, separators=(",", ":")))) + mcp.FRAMING_BYTES

    values: list[Any] = [{"é": "\x7f\x00🙂", "n": None, "f": [1e16, 0.1, -0.0, 2**70]}, {}]
    for value in values:
        for request_id in (-(2**63), "req-é", 7):
            result = CallToolResult(
                content=[TextContent(type="text", text=json.dumps(value))],
                structured_content=value,
                _meta={"m": None},
            )
            assert message_bytes(result, request_id=request_id) == before(result, request_id)


# --- a refused cursor under FastMCP (docs/mcp.md, paginated_tool) ------------------------


def pages_app(name: str = "pages") -> FastMCP:
    app = FastMCP(name)

    @app.tool(output_schema=page_output_schema())
    @paginated_tool(max_bytes=4096, store=MemoryCursorStore())
    def rows() -> list[dict[str, Any]]:
        return [{"id": i} for i in range(2000)]

    return app


async def refusal(app: FastMCP, tool: str, caplog: pytest.LogCaptureFixture) -> tuple[Any, bool]:
    """What a client gets for a cursor the server never issued (the MCPError's error, or
    the isError result's text), and whether a traceback was logged."""
    caplog.clear()
    with caplog.at_level(logging.DEBUG):
        async with Client(app) as client:
            try:
                got = await client.call_tool(tool, {"cursor": "not-a-cursor"}, raise_on_error=False)
            except MCPError as exc:
                answer: Any = (exc.error.code, exc.error.data)
            else:
                assert got.is_error
                answer = got.content[0].text
    return answer, any(record.exc_info for record in caplog.records)


def mounted(child: FastMCP, on: Callable[[FastMCP], None] = lambda app: None) -> FastMCP:
    parent = FastMCP("parent")
    on(parent)
    parent.mount(child, namespace="c")
    return parent


async def test_under_fastmcp_a_refused_cursor_is_invalid_params_only_with_bounded_results(
    monkeypatch: pytest.MonkeyPatch, caplog: pytest.LogCaptureFixture
) -> None:
    # FastMCP's loggers do not propagate: let caplog see them.
    monkeypatch.setattr(logging.getLogger("fastmcp"), "propagate", True)
    message = "the cursor is not one this server issued (too short)"
    invalid = (INVALID_PARAMS, {"reason": "invalid"})

    def bounded(app: FastMCP) -> None:
        app.add_middleware(BoundedResults(max_bytes=8192))

    app = pages_app()
    bounded(app)
    assert await refusal(app, "rows", caplog) == (invalid, False)
    # For a mounted server's tool, on the mounting app: the one that answers.
    assert await refusal(mounted(pages_app(), bounded), "c_rows", caplog) == (invalid, False)
    child = pages_app()
    bounded(child)
    assert await refusal(mounted(child), "c_rows", caplog) == (
        f"Error calling tool 'c_rows': {message}",
        True,
    )
    # Without it: an isError result, logged in one line once jsonbudget.fastmcp is
    # imported, else with FastMCP's prefix and a traceback.
    assert await refusal(pages_app(), "rows", caplog) == (message, False)
    monkeypatch.delitem(sys.modules, "jsonbudget.fastmcp")
    assert await refusal(pages_app(), "rows", caplog) == (
        f"Error calling tool 'rows': {message}",
        True,
    )

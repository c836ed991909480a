"""FastMCP 4: jsonbudget's middleware and paginated tools, driven by FastMCP's own client."""

from __future__ import annotations

import json
import logging
import re
from pathlib import Path
from typing import Annotated, Any

import orjson
import pytest
from fastmcp import Client, FastMCP
from fastmcp.dependencies import CallArgument, CurrentFastMCP, Depends, Progress
from fastmcp.exceptions import ToolError
from fastmcp.server.middleware.response_limiting import ResponseLimitingMiddleware
from fastmcp.tools.base import ToolResult
from mcp.shared.exceptions import MCPError
from mcp.types import CallToolResult, Icon, ImageContent, TextContent

from jsonbudget import LimitError, MemoryCursorStore, SpillStore
from jsonbudget._agents.reader import ResultReader
from jsonbudget.fastmcp import SERVER_ERROR, BoundedResults
from jsonbudget.mcp import message_bytes, page_output_schema, paginated_tool, read_result_tool

INVALID_PARAMS = -32602
ROWS = [
    {"id": i, "name": f"row {i}", "note": 'say "hi" \\ bye ' * (1 + i % 4)} for i in range(2000)
]


def wire_bytes(result: Any) -> int:
    """The response line's length for what the client received (the same fields)."""
    return message_bytes(
        CallToolResult(
            content=result.content, structured_content=result.structured_content, _meta=result.meta
        )
    )


def paged_server(budget: int) -> FastMCP:
    server = FastMCP("pages")

    @server.tool(output_schema=page_output_schema())
    @paginated_tool(max_bytes=budget, store=MemoryCursorStore())
    def rows() -> list[dict[str, Any]]:
        """All rows, one page per call."""
        return ROWS

    return server


def text_of(result: Any) -> str:
    block = result.content[0]
    assert isinstance(block, TextContent)
    return block.text


async def follow(client: Client[Any], budget: int) -> list[Any]:
    items: list[Any] = []
    cursor = None
    for _ in range(1000):
        result = await client.call_tool("rows", {"cursor": cursor} if cursor else {})
        assert wire_bytes(result) <= budget
        env = result.structured_content
        assert env is not None
        assert orjson.loads(text_of(result)) == env
        items.extend(env["items"])
        cursor = env["nextCursor"]
        if cursor is None:
            return items
    raise AssertionError("pagination did not end")


async def test_regression_response_limiting_middleware_leaves_a_bounded_page_whole() -> None:
    """With FastMCP's limiter at 16,384 a Limits(16384) page measured 33,068 bytes: it was
    truncated, its structured content dropped and its text left as invalid JSON. A page
    whose whole message is bounded passes through it untouched."""
    server = paged_server(16384)
    server.add_middleware(ResponseLimitingMiddleware(max_size=16384))
    async with Client(server) as client:
        assert await follow(client, 16384) == ROWS


async def test_bounded_results_cuts_in_place_and_keeps_structured_content() -> None:
    server = paged_server(8192)

    @server.tool()
    def search(query: str) -> list[dict[str, Any]]:
        """Every match: far more than a message holds."""
        return [{"id": i, "title": f"{query} {i}", "body": "é" * 50} for i in range(100_000)]

    @server.tool()
    def fetch() -> str:
        """A 1 MB page of text."""
        return "line of text\n" * 80_000

    @server.tool()
    def small() -> dict[str, Any]:
        """Fits."""
        return {"ok": True}

    server.add_middleware(BoundedResults(max_bytes=8192))
    async with Client(server) as client:
        tools = {t.name: t for t in await client.list_tools()}
        assert tools["search"].output_schema is None  # a cut list holds marker strings
        page_schema = tools["rows"].output_schema  # a page is already within its budget
        assert page_schema is not None
        assert {"items", "complete", "nextCursor"} <= set(page_schema["properties"])
        found = await client.call_tool("search", {"query": "cats"})
        assert wire_bytes(found) <= 8192
        listed = found.structured_content["result"]
        assert listed[0] == {"id": 0, "title": "cats 0", "body": "é" * 50}
        assert listed[-1].startswith("…[omitted: ")
        assert listed[-1].endswith(" more items]")
        assert orjson.loads(text_of(found)) == found.structured_content
        text = await client.call_tool("fetch", {})
        assert wire_bytes(text) <= 8192
        # FastMCP wraps a str result as {"result": ...}: the string is cut in place.
        fetched = text.structured_content["result"]
        assert fetched.startswith("line of text\n")
        assert fetched.endswith(" more chars]")
        assert (await client.call_tool("small", {})).structured_content == {"ok": True}
        assert await follow(client, 8192) == ROWS


async def test_regression_cursor_errors_are_invalid_params_without_a_traceback(
    caplog: pytest.LogCaptureFixture,
) -> None:
    """A refused cursor arrived as isError text, with a 94-line traceback logged."""
    server = paged_server(4096)
    server.add_middleware(BoundedResults(max_bytes=4096))
    async with Client(server) as client:
        first = await client.call_tool("rows", {})
        cursor = first.structured_content["nextCursor"]
        # A character changed in the middle: the last ones may hold only base64's padding
        # bits, and "xx" could be what they were (this failed once in CI, not raising).
        changed = cursor[:8] + ("B" if cursor[8] == "A" else "A") + cursor[9:]
        with caplog.at_level(logging.DEBUG), pytest.raises(MCPError) as info:
            await client.call_tool("rows", {"cursor": changed})
    assert info.value.error.code == INVALID_PARAMS
    assert info.value.error.data == {"reason": "invalid"}
    assert not [r for r in caplog.records if r.exc_info], "a traceback was logged"


def test_bounded_results_options_validated() -> None:
    with pytest.raises(ValueError, match="max_bytes"):
        BoundedResults(max_bytes=100)
    with pytest.raises(TypeError, match="tool names"):
        BoundedResults(max_bytes=4096, tools="search")


async def test_bounded_results_with_a_reader_loses_nothing(tmp_path: Path) -> None:
    reader = ResultReader(spill=SpillStore(tmp_path / "spill"))
    server = FastMCP("search")

    @server.tool()
    def search(query: str) -> list[dict[str, Any]]:
        """Every match."""
        return [{"id": i, "title": f"{query} {i}"} for i in range(100_000)]

    server.tool()(read_result_tool(reader=reader, max_bytes=8192, principal="agent"))
    server.add_middleware(BoundedResults(max_bytes=8192, reader=reader, principal="agent"))
    async with Client(server) as client:
        found = await client.call_tool("search", {"query": "cats"})
        assert wire_bytes(found) <= 8192
        preview = found.structured_content
        assert preview["preview"]["result"][0] == {"id": 0, "title": "cats 0"}
        ref = preview["spilled"]["ref"]
        got = await client.call_tool("read_result", {"ref": ref, "pointer": "/result/70000/title"})
        assert wire_bytes(got) <= 8192
        assert got.structured_content["items"] == ["cats 70000"]


async def test_regression_a_paginated_tools_spilled_item_reads_back_under_fastmcp(
    tmp_path: Path,
) -> None:
    # Found by a tester: the page named the spilled item by the store's own name, which
    # read_result refuses; with the reader the page names it by a reference it reads.
    reader = ResultReader(spill=SpillStore(tmp_path / "spill"))
    row = {"id": 1, "body": "b" * 30_000}
    server = FastMCP("pages")

    @server.tool(output_schema=page_output_schema())
    @paginated_tool(max_bytes=6144, oversized="spill", reader=reader, principal="agent")
    def rows() -> list[dict[str, Any]]:
        """One oversized row."""
        return [row]

    server.tool()(read_result_tool(reader=reader, max_bytes=6144, principal="agent"))
    async with Client(server) as client:
        page = await client.call_tool("rows", {})
        assert wire_bytes(page) <= 4096
        (entry,) = page.structured_content["oversized"]
        got = await client.call_tool("read_result", {"ref": entry["ref"], "pointer": "/id"})
        assert got.structured_content["items"] == [1]


async def test_meta_counts_against_the_budget_and_too_much_meta_is_dropped() -> None:
    """result.meta (FastMCP's own wrap_result, the serverInfo stamp, a tool's _meta) went
    uncounted: 3,098 bytes at a budget of 3,000, 5,089 with a tool's 5 KB _meta."""
    budget = 3000
    app = FastMCP("probe")
    app.add_middleware(BoundedResults(max_bytes=budget, content="structured"))

    @app.tool()
    def search() -> list[dict[str, Any]]:
        return [{"id": i, "title": f"item {i}"} for i in range(5000)]

    @app.tool()
    def traced() -> ToolResult:
        return ToolResult(content=[TextContent(type="text", text="x" * 5000)],
                          meta={"trace": "t" * 1000})  # fmt: skip

    @app.tool()
    def heavy() -> ToolResult:
        return ToolResult(content=[TextContent(type="text", text="x" * 5000)],
                          meta={"trace": "t" * 5000, "span": "s"})  # fmt: skip

    async with Client(app) as client:
        found = await client.call_tool("search", {})
        assert found.meta is not None
        assert found.meta["fastmcp"] == {"wrap_result": True}
        assert "io.modelcontextprotocol/serverInfo" in found.meta
        assert found.data[-1].startswith("…[omitted:")  # FastMCP still unwraps the result
        traced_result = await client.call_tool("traced", {})
        assert traced_result.meta is not None
        assert traced_result.meta["trace"] == "t" * 1000
        heavy_result = await client.call_tool("heavy", {})
        assert heavy_result.meta is not None
        assert heavy_result.meta["jsonbudget/omittedMetaKeys"] == 2
        assert "trace" not in heavy_result.meta
        assert heavy_result.content[0].text.startswith("xxx")
        for result in (found, traced_result, heavy_result):
            wire = CallToolResult(content=result.content, _meta=result.meta,
                                  structured_content=result.structured_content)  # fmt: skip
            assert budget - 600 < message_bytes(wire) <= budget


# -- what a cut result carries beside its value --------------------------------------------


def wire_of(result: Any) -> CallToolResult:
    return CallToolResult(content=result.content, structured_content=result.structured_content,
                          _meta=result.meta, is_error=result.is_error)  # fmt: skip


async def test_regression_ints_beyond_64_bits_in_a_json_text_are_never_floats() -> None:
    """A JSON text result was parsed with orjson: an integer beyond 64 bits became the
    nearest float (silently another number) or, past the float range, the whole JSON was
    cut as plain text. It is now parsed exactly and marked by the encoder."""
    app = FastMCP("ids")
    app.add_middleware(BoundedResults(max_bytes=3000))
    big = 123456789012345678901234567890

    @app.tool()
    def ids() -> ToolResult:
        rows = [{"id": big, "huge": 10**400, "n": i} for i in range(500)]
        return ToolResult(content=[TextContent(type="text", text=json.dumps(rows))])

    async with Client(app) as client:
        got = await client.call_tool("ids", {})
    assert message_bytes(wire_of(got)) <= 3000
    rows = got.structured_content["result"]
    assert rows[0] == {"id": "…[unencodable: int beyond 64 bits]",
                       "huge": "…[unencodable: int beyond 64 bits]", "n": 0}  # fmt: skip
    assert rows[-1].startswith("…[omitted: ")


async def test_regression_blocks_beside_structured_content_are_counted_not_dropped() -> None:
    """With structured content, an image block (and any text that was not the JSON copy)
    was dropped from a cut result without a word."""
    app = FastMCP("shots")
    app.add_middleware(BoundedResults(max_bytes=3000))
    image = ImageContent(type="image", data="iVBORw0KGgo=" * 10, mime_type="image/png")

    @app.tool()
    def shot() -> ToolResult:
        rows = {"rows": [{"i": i} for i in range(2000)]}
        return ToolResult(content=[TextContent(type="text", text=json.dumps(rows)), image,
                                   TextContent(type="text", text="a caption")],
                          structured_content=rows)  # fmt: skip

    async with Client(app) as client:
        got = await client.call_tool("shot", {})
    assert message_bytes(wire_of(got)) <= 3000
    texts = [b.text for b in got.content if isinstance(b, TextContent)]
    assert len(got.content) == len(texts) == 2
    assert orjson.loads(texts[0]) == got.structured_content
    assert texts[1] == "…[omitted: 2 content blocks]"  # the image and the caption


async def test_regression_a_str_results_own_text_is_not_an_omitted_block() -> None:
    """FastMCP sends a str result as its text plus {"result": text}: the text was not
    seen as FastMCP's copy, and every cut str result said "…[omitted: 1 content
    blocks]" though nothing but that copy was left out."""
    app = FastMCP("logs")
    app.add_middleware(BoundedResults(max_bytes=2000))

    @app.tool()
    def log_text() -> str:
        """A long log."""
        return "line of log output\n" * 500

    async with Client(app) as client:
        got = await client.call_tool("log_text", {})
    assert message_bytes(wire_of(got)) <= 2000
    (block,) = got.content
    assert isinstance(block, TextContent)
    assert "omitted" not in block.text
    cut = got.structured_content["result"]
    assert cut.startswith("line of log output\n")
    assert "…[truncated: " in cut
    assert orjson.loads(block.text) == got.structured_content


async def test_regression_a_spilled_text_of_control_characters_keeps_its_reference(
    tmp_path: Path,
) -> None:
    """The preview of a text result was sized in raw bytes: control characters take 6
    bytes each escaped, the fitter cut the preview's end, and with it the reference."""
    reader = ResultReader(spill=SpillStore(tmp_path / "spill"))
    app = FastMCP("logs")
    budget = 6000
    app.add_middleware(BoundedResults(max_bytes=budget, reader=reader, principal="agent"))
    app.tool()(read_result_tool(reader=reader, max_bytes=budget, principal="agent"))
    log = "\x01\x02\x1b[0m" * 50_000

    @app.tool()
    def tail() -> ToolResult:
        return ToolResult(content=[TextContent(type="text", text=log)])  # text, not JSON

    async with Client(app) as client:
        got = await client.call_tool("tail", {})
        assert got.structured_content is None
        assert message_bytes(wire_of(got)) <= budget
        text = text_of(got)
        assert text.startswith("\x01\x02\x1b[0m")
        assert "…[truncated" not in text
        found = re.search(r"the whole result is (\S+)", text)
        assert found is not None
        back = await client.call_tool("read_result", {"ref": found.group(1)})
    assert back.structured_content["kind"] == "text"
    assert back.structured_content["items"][0].startswith("\x01\x02\x1b[0m")


async def test_regression_a_page_over_the_middleware_budget_is_refused_not_cut() -> None:
    """A paginated tool whose pages were larger than the middleware's max_bytes had its
    items cut: the rows between the cut and the nextCursor were lost for good."""
    server = paged_server(8192)
    server.add_middleware(BoundedResults(max_bytes=4096))
    async with Client(server) as client:
        got = await client.call_tool("rows", {}, raise_on_error=False)
    assert got.is_error
    assert message_bytes(wire_of(got)) <= 4096
    assert "give the paginated tool a max_bytes of at most 4096" in text_of(got)


async def test_regression_a_text_only_page_over_the_middleware_budget_is_refused() -> None:
    """A page sent as text only (content="text") has no structured content, so the
    middleware took it for a JSON result and cut its items: 261 of 2,000 rows arrived,
    the last page saying complete."""
    server = FastMCP("pages")

    @server.tool()
    @paginated_tool(max_bytes=8192, store=MemoryCursorStore(), content="text")
    def rows() -> list[dict[str, Any]]:
        """All rows, one page per call."""
        return ROWS

    server.add_middleware(BoundedResults(max_bytes=4096))
    async with Client(server) as client:
        got = await client.call_tool("rows", {}, raise_on_error=False)
    assert got.is_error
    assert "give the paginated tool a max_bytes of at most 4096" in text_of(got)


async def test_a_read_result_page_over_the_middleware_budget_is_refused(
    tmp_path: Path,
) -> None:
    """A read_result page cut would skip what its next_cursor resumes after, as a
    paginated tool's would: refused, never cut."""
    reader = ResultReader(spill=SpillStore(tmp_path / "spill"))
    app = FastMCP("reads")
    app.tool()(read_result_tool(reader=reader, max_bytes=16384, principal="agent"))
    app.add_middleware(BoundedResults(max_bytes=4096, tools=["read_result"]))
    ref = reader.reference(reader.spill.put(orjson.dumps(ROWS), label="rows"), principal="agent")
    async with Client(app) as client:
        got = await client.call_tool("read_result", {"ref": ref}, raise_on_error=False)
    assert got.is_error
    assert "give the paginated tool a max_bytes of at most 4096" in text_of(got)


async def test_regression_a_tool_errors_message_is_bounded() -> None:
    """A tool that failed with a 1 MB message sent it whole as its isError text."""
    app = FastMCP("fails")
    app.add_middleware(BoundedResults(max_bytes=2000))

    @app.tool()
    def refuse() -> str:
        raise ToolError("e" * 1_000_000)

    # Not 1 MB here: FastMCP's traceback log of a long message takes minutes by itself.
    @app.tool()
    def fail() -> str:
        raise ValueError("f" * 5000)

    @app.tool()
    def short() -> str:
        raise ValueError("no such row")

    async with Client(app) as client:
        refused = await client.call_tool("refuse", {}, raise_on_error=False)
        failed = await client.call_tool("fail", {}, raise_on_error=False)
        small = await client.call_tool("short", {}, raise_on_error=False)
    for got, head in ((refused, "eee"), (failed, "Error calling tool 'fail': fff")):
        assert got.is_error
        assert 1500 < message_bytes(wire_of(got)) <= 2000
        assert text_of(got).startswith(head)
        assert text_of(got).endswith(" more chars]")
    assert small.is_error
    assert text_of(small) == "Error calling tool 'short': no such row"


def iconic_app(budget: int, *, checked: bool = False) -> FastMCP:
    """A server whose identity (a 1 KiB data: icon) is far over the default allowance,
    with a tool whose result must be cut and one that fits."""
    icon = Icon(src="data:image/png;base64," + "A" * 1368, mime_type="image/png")
    app = FastMCP("docs-search", version="2.4.1", icons=[icon])
    checks: dict[str, Any] = {"server": app} if checked else {}
    app.add_middleware(BoundedResults(max_bytes=budget, **checks))

    @app.tool()
    def search(q: str) -> list[dict[str, Any]]:
        return [{"id": i, "title": f"{q} #{i}"} for i in range(1000)]

    @app.tool()
    def small() -> dict[str, Any]:
        return {"ok": True}

    return app


def stamped_bytes(result: Any, app: FastMCP) -> int:
    return message_bytes(wire_of(result), server=app._mcp_server)


async def test_regression_a_large_server_identity_is_a_defined_outcome_not_an_internal_error() -> (
    None
):
    """Found by a tester: a budget accepted at construction (checked against the default
    identity) turned every result that needed cutting into "-32603 Internal server error"
    on a server whose serverInfo stamp is larger (an icon as a data: URI): the fitter for
    that stamp raised LimitError at call time."""
    # Too small even for an error's one line: a JSON-RPC error (it carries no stamp),
    # naming the limit and the least.
    app = iconic_app(1500)
    async with Client(app) as client:
        with pytest.raises(MCPError) as info:
            await client.call_tool("search", {"q": "cats"})
    assert info.value.error.code == SERVER_ERROR
    assert info.value.error.data == {"reason": "max_bytes", "least": 2269}
    assert "needs max_bytes of at least 2269" in info.value.error.message
    # Room for that line: a tool error, within the budget.
    app = iconic_app(2200)
    async with Client(app) as client:
        assert (await client.call_tool("small", {})).structured_content == {"ok": True}
        got = await client.call_tool("search", {"q": "cats"}, raise_on_error=False)
    assert got.is_error
    assert text_of(got) == (
        "BoundedResults(max_bytes=2200) cannot cut this result: this server's identity "
        "(its serverInfo stamp) needs max_bytes of at least 2269 for content='both'"
    )
    assert stamped_bytes(got, app) <= 2200


async def test_regression_bounded_results_checks_a_servers_identity_when_built() -> None:
    """With server=, the least budget for that server's identity is refused up front."""
    app = iconic_app(4096)
    with pytest.raises(LimitError, match="this server's serverInfo stamp") as info:
        BoundedResults(max_bytes=2200, server=app)
    least = int(re.search(r"at least (\d+)", str(info.value)).group(1))  # type: ignore[union-attr]
    with pytest.raises(LimitError):
        BoundedResults(max_bytes=least - 1, server=app)
    app = iconic_app(least, checked=True)
    async with Client(app) as client:
        got = await client.call_tool("search", {"q": "cats"})
    assert not got.is_error
    assert got.structured_content["result"][-1].endswith(" more items]")
    assert stamped_bytes(got, app) <= least


class Db:
    """What a dependency yields: a handle with no JSON form."""

    def rows(self, q: str) -> list[dict[str, Any]]:
        return [{"id": i, "q": q} for i in range(300)]


def get_db() -> Db:
    return Db()


_ticks = iter(range(1_000_000))


def tick() -> int:
    """A dependency whose JSON-able value changes per request (a request id)."""
    return next(_ticks)


async def test_regression_fastmcp_dependencies_stay_out_of_the_cursor_scope() -> None:
    """Found by a tester: parameters FastMCP injects (Depends(...), Progress(),
    CurrentFastMCP(), ...) were bound into the cursor's scope as if the client sent them:
    every call failed ("query value of type Db has no JSON form"), and a value that
    changes per request would have refused every continuation."""
    app = FastMCP("deps")
    budget = 4096

    @app.tool(output_schema=page_output_schema())
    @paginated_tool(max_bytes=budget, store=MemoryCursorStore())
    def with_db(q: str, db: Db = Depends(get_db)) -> list[dict[str, Any]]:  # noqa: B008 - FastMCP DI
        return db.rows(q)

    @app.tool(output_schema=page_output_schema())
    @paginated_tool(max_bytes=budget, store=MemoryCursorStore())
    def annotated(
        q: str, db: Annotated[Db, Depends(get_db)], request_id: int = Depends(tick)
    ) -> list[dict[str, Any]]:
        return db.rows(q)

    @app.tool(output_schema=page_output_schema())
    @paginated_tool(max_bytes=budget, store=MemoryCursorStore())
    async def injected(
        q: str,
        progress: Progress = Progress(),  # noqa: B008 - FastMCP DI
        server: FastMCP = CurrentFastMCP(),  # noqa: B008
    ) -> list[dict[str, Any]]:
        return Db().rows(q)

    async with Client(app) as client:
        tools = {t.name: t for t in await client.list_tools()}
        for name in ("with_db", "annotated", "injected"):
            assert set(tools[name].input_schema["properties"]) == {"q", "cursor"}
            items: list[Any] = []
            cursor = None
            for _ in range(100):
                args = {"q": "x", **({"cursor": cursor} if cursor else {})}
                got = await client.call_tool(name, args)
                assert stamped_bytes(got, app) <= budget
                items += got.structured_content["items"]
                cursor = got.structured_content["nextCursor"]
                if cursor is None:
                    break
            assert items == Db().rows("x"), name
        first = await client.call_tool("with_db", {"q": "x"})
        # Still bound to what the client sent (without BoundedResults, an isError text).
        with pytest.raises(ToolError, match="other query parameters"):
            await client.call_tool(
                "with_db", {"q": "y", "cursor": first.structured_content["nextCursor"]}
            )


def test_a_dependency_on_an_undeclared_argument_is_refused() -> None:
    """A CallArgument naming an argument the function does not declare: the client sends
    it, the function never sees it, so no cursor could be bound to it."""

    def db_for(tenant: str = CallArgument("tenant")) -> str:
        return tenant

    def rows(q: str, db: str = Depends(db_for)) -> list[Any]:
        return []

    with pytest.raises(TypeError, match=r"\['tenant'\] which it does not declare"):
        paginated_tool(max_bytes=4096)(rows)

    def declared(q: str, tenant: str, db: str = Depends(db_for)) -> list[Any]:
        return []

    paginated_tool(max_bytes=4096)(declared)


def test_regression_a_fastmcp_app_is_a_server_for_the_mcp_helpers(tmp_path: Path) -> None:
    """Found by a tester: `server=` took a FastMCP app in BoundedResults only; the mcp
    module's helpers raised a bare AttributeError ('FastMCP' object has no attribute
    'title'). They read its identity from the SDK server that stamps its results."""
    from jsonbudget.mcp import McpPager, bounded_result

    icon = Icon(src="data:image/png;base64," + "A" * 1024, mime_type="image/png")
    app = FastMCP("search", icons=[icon])
    result = CallToolResult(content=[TextContent(type="text", text="x")])
    stamped = message_bytes(result, server=app)
    assert stamped == message_bytes(result, server=app._mcp_server)
    assert stamped > message_bytes(result) + 1000  # the icon is counted
    paginated_tool(max_bytes=8192, store=MemoryCursorStore(), server=app)
    McpPager(max_bytes=8192, server=app)
    assert message_bytes(bounded_result([1, 2], max_bytes=8192, server=app), server=app) <= 8192
    read_result_tool(reader=ResultReader(spill=SpillStore(tmp_path)), server=app)


def gateway(child: FastMCP) -> FastMCP:
    """A parent whose identity (a website and a 1 KiB data: icon) is far larger than the
    child it mounts: the stamp on the wire is the parent's."""
    icon = Icon(src="data:image/png;base64," + "A" * 1368, mime_type="image/png")
    parent = FastMCP("gateway", version="1.0.0", website_url="https://example.com/" + "p" * 200,
                     icons=[icon])  # fmt: skip
    parent.mount(child, namespace="c")
    return parent


async def test_regression_a_mounted_servers_results_fit_with_the_parents_stamp() -> None:
    """Found by a tester: BoundedResults (or paginated_tool(server=child)) on a FastMCP
    server mounted into a parent measured the child's serverInfo stamp, but the parent's
    SDK server sends the parent's: a response 1,334 bytes over its budget."""
    for checked in (False, True):
        child = FastMCP("child")
        child.add_middleware(BoundedResults(max_bytes=4000, server=child if checked else None))

        @child.tool()
        def rows() -> list[dict[str, Any]]:
            return [{"id": i, "t": "text " * 5} for i in range(5000)]

        parent = gateway(child)
        async with Client(parent) as client:
            got = await client.call_tool("c_rows", {})
        assert got.meta is not None
        assert got.meta["io.modelcontextprotocol/serverInfo"]["name"] == "gateway"
        assert got.structured_content["result"][-1].endswith(" more items]")
        assert wire_bytes(got) <= 4000  # the stamp received counted: what was sent

    # A paginated tool given the child as its server pages within the budget too, or,
    # with a budget too small for the parent's identity, fails naming the least.
    for budget in (3300, 4500):
        child = FastMCP("child")

        @child.tool(output_schema=page_output_schema())
        @paginated_tool(max_bytes=budget, store=MemoryCursorStore(), server=child)
        def pages() -> list[dict[str, Any]]:
            return [{"id": i, "t": "x" * (i % 90)} for i in range(400)]

        async with Client(gateway(child)) as client:
            if budget < 4015:
                with pytest.raises(ToolError, match="must be at least 4015"):
                    await client.call_tool("c_pages", {})
                continue
            seen: list[Any] = []
            cursor = None
            while True:
                got = await client.call_tool("c_pages", {"cursor": cursor} if cursor else {})
                assert wire_bytes(got) <= budget
                seen += got.structured_content["items"]
                cursor = got.structured_content["nextCursor"]
                if cursor is None:
                    break
        assert [row["id"] for row in seen] == list(range(400))


async def test_regression_a_mounted_read_result_tool_fits_with_the_parents_stamp(
    tmp_path: Path,
) -> None:
    """Found while fixing the mounted BoundedResults: read_result_tool sized its pages
    for the identity it was built with, but on a child mounted into a parent with a
    larger identity the parent's stamp goes on the wire."""
    reader = ResultReader(spill=SpillStore(tmp_path / "spill"))
    ref = reader.reference(
        reader.spill.put([orjson.dumps({"text": "\U0001f600" * 20_000})], label="big"),
        principal="agent",
    )
    child = FastMCP("child")
    child.tool()(read_result_tool(reader=reader, max_bytes=8000, principal="agent", server=child))
    async with Client(gateway(child)) as client:
        text, cursor = "", None
        while True:
            args = {"ref": ref, "pointer": "/text", **({"cursor": cursor} if cursor else {})}
            got = await client.call_tool("c_read_result", args)
            assert got.meta is not None
            assert got.meta["io.modelcontextprotocol/serverInfo"]["name"] == "gateway"
            assert wire_bytes(got) <= 8000
            (chunk,) = got.structured_content["items"]
            text += re.sub(r"…\[truncated: \d+ more chars\]$", "", chunk)
            cursor = got.structured_content["next_cursor"]
            if cursor is None:
                break
    assert text == "\U0001f600" * 20_000


async def test_regression_a_paginated_tool_pages_under_fastmcp_without_an_output_schema() -> None:
    """Found in review: `paginated_tool` declared Annotated[CallToolResult,
    McpPageEnvelope], which FastMCP read as a CallToolResult schema (content, is_error,
    ...): its client refused every page ("'content' is a required property") unless the
    tool was registered with output_schema=page_output_schema(). It declares the
    envelope now: the schema FastMCP publishes is the page's, and every page validates."""
    server = FastMCP("pages")

    @server.tool
    @paginated_tool(max_bytes=3000, store=MemoryCursorStore())
    def rows() -> list[dict[str, Any]]:
        """All rows, one page per call."""
        return ROWS

    async with Client(server) as client:
        (tool,) = await client.list_tools()
        schema = tool.output_schema
        assert schema is not None
        assert set(schema["properties"]) == set(page_output_schema()["properties"])
        assert schema["required"] == ["items", "complete", "nextCursor"]
        assert await follow(client, 3000) == ROWS

"""FastMCP integration: a middleware that bounds every tool result's whole message.

`BoundedResults` is what FastMCP's ``ResponseLimitingMiddleware`` cannot be: a result
over the budget becomes valid, marked JSON (the structured content kept, cut in place
with the encoder's markers) whose whole JSON-RPC response fits ``max_bytes``, instead of
a byte-truncated text with the structured content dropped. A refused jsonbudget cursor
becomes the JSON-RPC error ``-32602`` with ``data.reason``, without a logged traceback.

Needs ``fastmcp`` (4.x) and the ``mcp`` extra; ``import jsonbudget`` never imports it.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from typing import Any

import orjson

from ._agents.guards import ResultGate
from ._agents.reader import ResultReader
from ._extras import missing_extra
from .errors import LimitError
from .mcp import ContentMode, McpPageEnvelope, McpResultFitter, message_bytes

try:
    from fastmcp.exceptions import FastMCPError
    from fastmcp.server.middleware import CallNext, Middleware, MiddlewareContext
    from fastmcp.tools.base import Tool, ToolResult
    from mcp.shared.exceptions import MCPError
    from mcp.types import CallToolResult, TextContent
except ImportError as exc:  # pragma: no cover - exercised only without fastmcp
    raise missing_extra("fastmcp", "fastmcp", "jsonbudget's FastMCP middleware") from exc

__all__ = ["BoundedResults", "QuietCursorError"]


class QuietCursorError(MCPError, FastMCPError):
    """A refused cursor under FastMCP: an `MCPError` that FastMCP logs in one line.

    `jsonbudget.mcp.cursor_error` makes one of these once this module is imported;
    `BoundedResults` turns it into the JSON-RPC error on the wire.
    """


class BoundedResults(Middleware):
    """Bound every tool result so its whole JSON-RPC response is at most *max_bytes*.

    A result that already fits passes unchanged. A larger one is rebuilt from its
    structured content (or, without it, from its text parsed as JSON, or as plain text)
    with `McpResultFitter`: valid JSON, each cut marked in place, the text and structured
    content the same value (``content="both"``, the default). With a *reader*, the larger
    result is first spilled whole (a `ResultGate` with that reader) and the client gets
    its preview and a reference that *principal* can read back with the ``read_result``
    tool: nothing is lost. *tools* limits it to those tool names. Because a cut value
    holds markers that a tool's declared output schema may refuse, the tools it bounds
    are listed without an output schema (as FastMCP's own limiter does).
    """

    def __init__(
        self,
        *,
        max_bytes: int,
        tools: Sequence[str] | None = None,
        content: ContentMode = "both",
        default: Callable[[Any], Any] | None = None,
        reader: ResultReader | None = None,
        principal: str | Callable[[], str] = "anonymous",
    ) -> None:
        self._fitter = McpResultFitter(max_bytes=max_bytes, content=content, default=default)
        self._options: dict[str, Any] = {"max_bytes": max_bytes, "content": content,
                                         "default": default}  # fmt: skip
        # One fitter per server identity (its serverInfo stamp is part of every message).
        self._fitters: dict[int, McpResultFitter] = {}
        self._gate: ResultGate | None = None
        if reader is not None:
            # The preview gets what the message leaves at worst (its text copy may double).
            preview = (max_bytes - 300) // 3
            self._gate = ResultGate(max_bytes=preview, preview_bytes=preview, default=default,
                                    reader=reader, principal=principal)  # fmt: skip
        if tools is not None and (
            isinstance(tools, str) or not all(isinstance(t, str) for t in tools)
        ):
            raise TypeError("tools must be a sequence of tool names")
        self._tools = None if tools is None else frozenset(tools)

    @property
    def max_bytes(self) -> int:
        return self._fitter.max_bytes

    def _bounds(self, name: str) -> bool:
        return self._tools is None or name in self._tools

    async def on_list_tools(
        self, context: MiddlewareContext[Any], call_next: CallNext[Any, Sequence[Tool]]
    ) -> Sequence[Tool]:
        tools = await call_next(context)
        return [
            tool.model_copy(update={"output_schema": None})
            if self._bounds(tool.name) and _cuttable_schema(tool.output_schema)
            else tool
            for tool in tools
        ]

    async def on_call_tool(
        self, context: MiddlewareContext[Any], call_next: CallNext[Any, Any]
    ) -> Any:
        try:
            result = await call_next(context)
        except QuietCursorError as exc:
            # The dispatcher answers a plain MCPError with a JSON-RPC error response.
            raise MCPError(
                code=exc.error.code, message=exc.error.message, data=exc.error.data
            ) from None
        if not isinstance(result, ToolResult) or not self._bounds(context.message.name):
            return result  # an input-required or task result carries no tool content
        if result.is_error:
            return result
        server = _server_of(context)
        wire = CallToolResult(content=result.content, structured_content=result.structured_content,
                              _meta=result.meta)  # fmt: skip
        if message_bytes(wire, server=server) <= self._fitter.max_bytes:
            return result
        value = _value_of(result)
        if self._gate is not None:
            gated = await self._gate.agate(value, label=context.message.name)
            value = orjson.loads(gated.data) if gated.kind == "json" else gated.text
        fitter = self._fitter_for(server)
        try:
            fitted = fitter.fit(value, meta=result.meta)
        except LimitError:
            # The tool's _meta leaves no room for the value: it is dropped, and said so.
            fitted = fitter.fit(value, meta=_omitted_meta(result.meta))
        return ToolResult(content=fitted.content, structured_content=fitted.structured_content,
                          meta=fitted.meta)  # fmt: skip

    def _fitter_for(self, server: Any) -> McpResultFitter:
        if server is None:
            return self._fitter
        fitter = self._fitters.get(id(server))
        if fitter is None:
            fitter = McpResultFitter(**self._options, server=server)
            self._fitters = {id(server): fitter}  # a middleware serves one server
        return fitter


def _server_of(context: MiddlewareContext[Any]) -> Any:
    """The low-level server whose runner stamps its serverInfo on the result, if known.

    FastMCP keeps it as ``_mcp_server``: its ``server_info`` is the identity the SDK
    stamps (FastMCP's own version when the app gives none).
    """
    if context.fastmcp_context is None:
        return None
    return context.fastmcp_context.fastmcp._mcp_server


def _omitted_meta(meta: dict[str, Any] | None) -> dict[str, Any]:
    """*meta* too large to send: FastMCP's own key kept (its client unwraps results with
    it), the rest replaced by how many keys were left out (a count: always small)."""
    meta = meta or {}
    kept = {"fastmcp": meta["fastmcp"]} if "fastmcp" in meta else {}
    return {**kept, "jsonbudget/omittedMetaKeys": sum(k != "fastmcp" for k in meta)}


def _cuttable_schema(schema: dict[str, Any] | None) -> bool:
    # A paginated tool's envelope is already within its budget: its schema stays.
    return schema is not None and schema.get("title") != McpPageEnvelope.__name__


def _value_of(result: ToolResult) -> Any:
    """The value a result stands for: its structured content, else its text.

    Blocks that are not text (images, audio, resources) cannot be cut; they are left out
    and a marker line says how many.
    """
    if result.structured_content is not None:
        return result.structured_content
    texts = [block.text for block in result.content if isinstance(block, TextContent)]
    others = len(result.content) - len(texts)
    if len(texts) == 1 and not others:
        try:
            return orjson.loads(texts[0])
        except orjson.JSONDecodeError:
            return texts[0]  # not JSON: bounded as text
    if others:
        texts.append(f"…[omitted: {others} content blocks that are not text]")
    return "\n\n".join(texts)

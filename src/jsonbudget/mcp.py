"""MCP integration: bounded, paged tool results for the official ``mcp`` Python SDK (2.x).

`page_result` turns a `Page` into a ``CallToolResult`` whose text content and structured
content are the same envelope, so both fit the budget (never one bounded and the other
whole). `McpPager` and the `paginated_tool` decorator page a source per tool call, take a
``cursor`` argument and answer ``nextCursor``; a refused cursor becomes the JSON-RPC error
``-32602`` (Invalid params), as the MCP pagination spec asks.

This module needs the ``mcp`` extra (the MCP SDK 2.x); ``import jsonbudget`` never does.
"""

from __future__ import annotations

import functools
import inspect
from collections.abc import Awaitable, Callable, Mapping
from typing import Any

import orjson

from ._cursors.scope import Scope
from ._encode.encoder import MarkerStyle, Strategy
from ._extras import missing_extra
from ._limits import Limits
from ._pages.builder import MCP_KEYS, OversizedPolicy, Page, Paginator
from ._sources.base import Source, as_source
from .errors import CursorError

try:
    import anyio.to_thread
    from mcp.shared.exceptions import MCPError
    from mcp.types import CallToolResult, TextContent
except ImportError as exc:  # pragma: no cover - exercised only without the extra
    raise missing_extra("mcp", "mcp", "jsonbudget.mcp") from exc

__all__ = [
    "CURSOR_PARAM",
    "TOOL_KEY",
    "McpPager",
    "cursor_error",
    "page_result",
    "paginated_tool",
]

#: The argument a paginated tool takes its cursor from.
CURSOR_PARAM = "cursor"
#: The scope query key that holds the tool's name (no Python parameter can be named so).
TOOL_KEY = "$tool"


def page_result(page: Page) -> CallToolResult:
    """A tool result carrying *page*'s envelope as text and as structured content.

    The text is the envelope's bytes decoded (so its UTF-8 size is exactly
    ``len(page.to_json()) <= max_bytes``) and the structured content is the same
    envelope parsed, which re-encodes to the same bytes. Build the page with
    ``keys=MCP_KEYS`` for MCP's ``nextCursor`` spelling (`McpPager` does).
    """
    data = page.to_json()
    return CallToolResult(
        content=[TextContent(type="text", text=data.decode("utf-8"))],
        structured_content=orjson.loads(data),
    )


def cursor_error(exc: CursorError) -> MCPError:
    """The MCP error for a refused cursor: code ``exc.mcp_code`` (-32602), reason in data.

    The message names only the failure class (cursor errors never echo a principal or a
    query), so it is safe to send to the client.
    """
    return MCPError(code=exc.mcp_code, message=str(exc), data={"reason": exc.reason})


class McpPager:
    """A configured, reusable pager that answers MCP tool calls.

    Wraps a `Paginator` built with ``keys=MCP_KEYS``. `page` / `apage` return a
    ``CallToolResult`` (see `page_result`) and raise `cursor_error` for a refused cursor.
    """

    __slots__ = ("paginator",)

    def __init__(
        self,
        limits: Limits,
        *,
        store: Any = None,
        oversized: OversizedPolicy = "truncate",
        spill_store: Any = None,
        strategy: Strategy = "balanced",
        markers: MarkerStyle = "text",
    ) -> None:
        self.paginator = Paginator(
            limits,
            store=store,
            oversized=oversized,
            spill_store=spill_store,
            keys=MCP_KEYS,
            strategy=strategy,
            markers=markers,
        )

    @property
    def limits(self) -> Limits:
        return self.paginator.limits

    def page(self, source: Any, *, scope: Scope, cursor: str | None = None) -> CallToolResult:
        """The page of *source* at *cursor* as a tool result."""
        try:
            page = self.paginator.page(source, scope=scope, cursor=cursor)
        except CursorError as exc:
            raise cursor_error(exc) from exc
        return page_result(page)

    async def apage(
        self, source: Any, *, scope: Scope, cursor: str | None = None
    ) -> CallToolResult:
        """The async twin of `page`. A sync source is paged in a worker thread."""
        src = as_source(source)
        try:
            if isinstance(src, Source):
                call = functools.partial(self.paginator.page, src, scope=scope, cursor=cursor)
                page = await anyio.to_thread.run_sync(call)
            else:
                page = await self.paginator.apage(src, scope=scope, cursor=cursor)
        except CursorError as exc:
            raise cursor_error(exc) from exc
        return page_result(page)


def _principal_of(principal: str | Callable[[], str]) -> str:
    value = principal() if callable(principal) else principal
    if not isinstance(value, str):
        raise TypeError(f"principal must be a str, not {type(value).__name__}")
    return value


def _resolve(annotation: Any, fn: Callable[..., Any]) -> Any:
    """A parameter's annotation, evaluated if it is a string (postponed annotations)."""
    if not isinstance(annotation, str):
        return annotation
    try:
        # What inspect.get_annotations(eval_str=True) does, one parameter at a time.
        return eval(annotation, getattr(fn, "__globals__", {}))
    except NameError as exc:
        raise TypeError(
            f"cannot resolve the annotation {annotation!r} of {getattr(fn, '__name__', fn)!r}"
        ) from exc


def paginated_tool(
    limits: Limits,
    *,
    store: Any = None,
    principal: str | Callable[[], str] = "anonymous",
    oversized: OversizedPolicy = "truncate",
    spill_store: Any = None,
    strategy: Strategy = "balanced",
    markers: MarkerStyle = "text",
) -> Callable[[Callable[..., Any]], Callable[..., Any]]:
    """Decorate a function that returns a source into a paginated MCP tool.

    The decorated function keeps its name, docstring and parameters and gains a
    keyword-only ``cursor: str | None = None``; it returns a ``CallToolResult`` (see
    `page_result`) with ``nextCursor``. A cursor is bound to the principal, the tool's
    name and its arguments (page-size arguments such as ``limit`` excepted, see `Scope`),
    so a cursor presented with other arguments is refused with ``-32602``. *principal* is
    a str or a callable called per request (for example one that reads the caller's
    access token). Async functions (and async sources) work; sync sources are paged in
    a worker thread. Put it under the SDK's decorator::

        @server.tool()
        @paginated_tool(Limits(16384), store=SQLiteCursorStore("cursors.sqlite3"))
        def list_orders(status: str) -> SQLiteSource: ...
    """
    pager = McpPager(
        limits,
        store=store,
        oversized=oversized,
        spill_store=spill_store,
        strategy=strategy,
        markers=markers,
    )

    def decorate(fn: Callable[..., Any]) -> Callable[..., Any]:
        sig = inspect.signature(fn)
        if CURSOR_PARAM in sig.parameters:
            raise TypeError(f"{fn.__name__} already has a {CURSOR_PARAM!r} parameter")
        # Only the parameters feed the tool's input schema; the return annotation (a
        # source type, perhaps local to a function) is replaced and never evaluated.
        params = [p.replace(annotation=_resolve(p.annotation, fn)) for p in sig.parameters.values()]
        extra = inspect.Parameter(
            CURSOR_PARAM, inspect.Parameter.KEYWORD_ONLY, default=None, annotation=str | None
        )
        at = next(
            (i for i, p in enumerate(params) if p.kind is inspect.Parameter.VAR_KEYWORD),
            len(params),
        )
        params.insert(at, extra)
        new_sig = sig.replace(parameters=params, return_annotation=CallToolResult)
        name = getattr(fn, "__name__", type(fn).__name__)

        def scope_of(arguments: Mapping[str, Any]) -> Scope:
            return Scope(_principal_of(principal), {**arguments, TOOL_KEY: name})

        wrapper: Callable[..., Any]
        if inspect.iscoroutinefunction(fn):

            async def async_wrapper(
                *args: Any, cursor: str | None = None, **kwargs: Any
            ) -> CallToolResult:
                bound = sig.bind(*args, **kwargs)
                bound.apply_defaults()
                scope = scope_of(bound.arguments)
                coro: Awaitable[Any] = fn(*bound.args, **bound.kwargs)
                source = await coro
                return await pager.apage(source, scope=scope, cursor=cursor)

            wrapper = async_wrapper
        else:

            def sync_wrapper(
                *args: Any, cursor: str | None = None, **kwargs: Any
            ) -> CallToolResult:
                bound = sig.bind(*args, **kwargs)
                bound.apply_defaults()
                scope = scope_of(bound.arguments)
                source = fn(*bound.args, **bound.kwargs)
                return pager.page(source, scope=scope, cursor=cursor)

            wrapper = sync_wrapper
        functools.update_wrapper(wrapper, fn)
        # The SDK reads the signature to build the tool's input schema.
        setattr(wrapper, "__signature__", new_sig)  # noqa: B010 - mypy knows no such attribute
        wrapper.__annotations__ = {
            **{p.name: p.annotation for p in params if p.annotation is not p.empty},
            "return": CallToolResult,
        }
        return wrapper

    return decorate

"""MCP integration: bounded, paged tool results for the official ``mcp`` Python SDK (2.x).

The budget is the **whole JSON-RPC response** as the client receives it: the message
envelope, the text content after JSON escaping, and ``structuredContent``, counted
exactly with the SDK's own serializer. `McpPager` and the `paginated_tool` decorator page
a source per tool call, take a ``cursor`` argument and answer ``nextCursor``; a refused
cursor becomes the JSON-RPC error ``-32602`` (Invalid params), as the MCP pagination spec
asks. `page_result` turns one `Page` into a ``CallToolResult`` and `message_bytes` says
how long its response line is.

This module needs the ``mcp`` extra (the MCP SDK 2.x); ``import jsonbudget`` never does.
"""

from __future__ import annotations

import asyncio
import contextlib
import copy
import functools
import importlib
import inspect
import json
import math
import re
import secrets
import sys
import typing
from collections.abc import Awaitable, Callable, Coroutine, Iterator, Mapping, Sequence
from decimal import Decimal
from fractions import Fraction
from typing import Any, Final, Literal, Never, ParamSpec, Protocol, TypeVar, cast, overload

import orjson

from ._agents.guards import is_async_callable
from ._agents.reader import LEAST_READ_BYTES, ResultReader
from ._cursors.scope import Scope, as_sent
from ._cursors.store import TOKEN_CHARS, CursorState, CursorStore
from ._encode.encoder import Encoder, MarkerStyle, Strategy, encode_replaying
from ._extras import missing_extra
from ._limits import MIN_BYTES, Limits
from ._loops import running_loop
from ._pages.builder import (
    MCP_KEYS,
    OversizedPolicy,
    Page,
    Paginator,
    SpillTarget,
    StoreFront,
    store_blocks,
)
from ._sources.base import JSONValue, Source, SourceLike, as_source
from ._sources.jsonread import load_json
from .errors import CursorError, DecodeError, EncodeError, JsonBudgetError, LimitError

try:
    import anyio.from_thread
    import anyio.lowlevel
    import anyio.to_thread
    from mcp.server.mcpserver import Context as McpContext
    from mcp.server.mcpserver.exceptions import ToolError
    from mcp.server.mcpserver.resolve import find_resolved_parameters
    from mcp.shared.exceptions import MCPError
    from mcp.types import (
        CallToolResult,
        ContentBlock,
        Implementation,
        JSONRPCResponse,
        TextContent,
    )
    from mcp_types import SERVER_INFO_META_KEY
    from pydantic import TypeAdapter
    from pydantic_core import to_json

    # pydantic needs typing_extensions' TypedDict below Python 3.12 (the SDK depends on it).
    from typing_extensions import NotRequired, TypedDict  # noqa: UP035
except ImportError as exc:  # pragma: no cover - exercised only without the extra
    raise missing_extra("mcp", "mcp", "jsonbudget.mcp", cause=exc) from exc

__all__ = [
    "CURSOR_PARAM",
    "FRAMING_BYTES",
    "RESULT_SUMMARY_TEXT",
    "SUMMARY_TEXT",
    "TOOL_KEY",
    "AsyncPaginatedTool",
    "ContentMode",
    "McpPageEnvelope",
    "McpPager",
    "McpResultFitter",
    "PaginatedTool",
    "PaginatedToolDecorator",
    "ReadResultTool",
    "bounded_result",
    "cursor_error",
    "message_bytes",
    "page_output_schema",
    "page_result",
    "paginated_tool",
    "read_result_tool",
]

#: The argument a paginated tool takes its cursor from.
CURSOR_PARAM = "cursor"
#: The scope query key that holds the tool's name (no Python parameter can be named so).
TOOL_KEY = "$tool"

#: What a result carries: the envelope as text and as structured content (``"both"``),
#: structured content plus a one-line text summary (``"structured"``), or text only.
ContentMode = Literal["both", "structured", "text"]
_MODES: tuple[ContentMode, ...] = ("both", "structured", "text")
#: The response's id is the client's: budgets count one of up to 20 characters (every
#: 64-bit integer id; JSON-RPC clients number their requests).
_WORST_ID = -(2**63)
#: The most the SDK's transports put around a message: a Streamable HTTP server's SSE
#: event, ``id: <event id>\r\nevent: message\r\ndata: `` before the JSON and
#: ``\r\n\r\n`` after, with an event id of up to 36 characters (a UUID, as the SDK's
#: event stores make; a stream without an event store has no id line). stdio adds a
#: newline, a JSON response body nothing.
FRAMING_BYTES = len(b"id: \r\nevent: message\r\ndata: \r\n\r\n") + 36
#: The text of a ``"structured"`` result: fixed, so the message is the envelope plus it.
SUMMARY_TEXT = "The page is in structuredContent: items, complete, nextCursor."
#: The same for any other result (`bounded_result`).
RESULT_SUMMARY_TEXT = "The result is in structuredContent."
# Bytes of the message per envelope byte in the worst case. The SDK's 2026-07-28 HTTP path
# escapes every non-ASCII character (`_line_bytes`): "é", 2 bytes, is 6 in either copy,
# and an astral character's 4 bytes are 12 (a surrogate pair): 3 a byte in each copy, 6
# for "both", which carries the envelope twice. Elsewhere the text copy's escaping at
# most doubles a byte (a quote or a backslash), and a number the SDK cannot write back as
# it stands goes as a string in both copies (`_wire_copy`): `-0,`, 3 bytes, becomes 5
# in the structured copy and 7 in the escaped text copy (4 for "both").
_WORST_GROWTH = {"both": Fraction(6), "text": Fraction(3), "structured": Fraction(3)}
# The first try's guess for ordinary data (keys' quotes escaped once more in the text).
_FIRST_GROWTH = {"both": 2.3, "text": 1.3, "structured": 1.0}
_ROUNDS = 3
# Per-identity and per-budget caches keep this many before they start again.
_MOST_KEPT = 8
# What a server without a known identity is assumed to stamp on a 2026-era result:
# a name and a version of up to 128 bytes together as JSON writes them, escapes
# included (see `_stamp_of`).
_DEFAULT_INFO = Implementation(name="n" * 96, version="v" * 32)


class McpPageEnvelope(TypedDict):
    """The structured content of a paginated tool's result: its ``outputSchema``."""

    items: list[Any]
    complete: bool
    nextCursor: str | None
    truncated: NotRequired[list[dict[str, Any]]]
    oversized: NotRequired[list[dict[str, Any]]]
    incompleteReason: NotRequired[str]


def page_output_schema() -> dict[str, Any]:
    """`McpPageEnvelope` as a JSON Schema, for servers that take an output schema as a dict
    (FastMCP: ``@mcp.tool(output_schema=page_output_schema())``)."""
    schema: dict[str, Any] = TypeAdapter(McpPageEnvelope).json_schema()
    return schema


def page_result(page: Page, *, content: ContentMode = "both") -> CallToolResult:
    """A tool result carrying *page*'s envelope in the form *content* says.

    ``"both"``: the envelope's bytes decoded as text content and the same envelope parsed
    as structured content. ``"structured"``: the envelope as structured content and the
    fixed line `SUMMARY_TEXT` as text. ``"text"``: the envelope as text only. Build the
    page with ``keys=MCP_KEYS`` for MCP's ``nextCursor`` spelling (`McpPager` does); see
    `message_bytes` for the size of the message that carries it.
    """
    if content not in _MODES:
        raise LimitError("content", content, "must be 'both', 'structured' or 'text'")
    data = page.to_json()
    if content == "text":
        return CallToolResult(content=[TextContent(type="text", text=data.decode("utf-8"))])
    data, structured = _wire_copy(data)
    text = SUMMARY_TEXT if content == "structured" else data.decode("utf-8")
    return CallToolResult(
        content=[TextContent(type="text", text=text)], structured_content=structured
    )


# A JSON string (skipped whole: its digits are text) or a number, in the encoder's output.
_TOKEN = re.compile(rb'"[^"\\]*(?:\\.[^"\\]*)*"|-?[0-9][0-9.eE+-]*')


def _wire_copy(data: bytes) -> tuple[bytes, Any]:
    """*data* as both copies of a result carry it, and its value for the structured copy.

    The SDK writes structured content with pydantic, which keeps an integer of any size
    but holds every other number as a double. A number it would write back with another
    value (more digits than a double keeps, ``1E-400``) or in more bytes (``1E+15`` comes
    back as ``1000000000000000.0``) goes as a string of its exact text in both copies: they
    carry the same values, and the message measured is the one sent.
    """
    pieces: list[bytes] = []
    last = 0
    for match in _TOKEN.finditer(data):
        token = match.group()
        if token[:1] == b'"' or _as_written(token):
            continue
        pieces += (data[last : match.start()], b'"', token, b'"')
        last = match.end()
    if pieces:
        data = b"".join((*pieces, data[last:]))
    return data, load_json(data)


def _as_written(number: bytes) -> bool:
    """Whether the SDK writes the JSON number *number* back with its value, in no more bytes."""
    digits = number.lstrip(b"-")
    if digits.isdigit():
        if digits == b"0" and number != digits:
            # A Decimal's -0: read as the integer 0, it would lose the sign the text keeps
            # (as doubles, -0.0 and 0.0 are two values).
            return False
        # Integers stay exact, but one longer than int() takes is read as a Decimal,
        # which pydantic writes as a string.
        limit = sys.get_int_max_str_digits()
        return not limit or len(digits) <= limit
    value = float(number)
    if not math.isfinite(value):
        return False
    written: bytes = to_json(value)
    return written == number or (
        len(written) <= len(number) and Decimal(written.decode()) == Decimal(number.decode())
    )


def message_bytes(
    result: CallToolResult, *, request_id: int | str = _WORST_ID, server: Any = None
) -> int:
    """The bytes the client receives for the JSON-RPC response that carries *result*.

    Serialized as the SDK serializes it (the larger of pydantic's JSON and the
    ``json.dumps`` of its 2026-07-28 HTTP path, which escapes non-ASCII characters), plus
    `FRAMING_BYTES`, the most the SDK's transports put around a message (an SSE event;
    stdio adds a newline), for a request
    id of *request_id* (default: the longest 64-bit integer id), on a protocol 2026-07-28
    connection: ``"resultType":"complete"`` counted and, given *server* (the server or
    its ``Implementation``), the ``serverInfo`` stamp the SDK adds to ``_meta``. A legacy
    connection gets neither, so its line is shorter.
    """
    return _line_bytes(result, None if server is None else _stamp_of(server), request_id)


def _stamp_of(server: Any) -> dict[str, Any]:
    """The ``_meta`` serverInfo stamp *server* puts on every 2026-era result.

    The SDK's runner dumps the server's ``Implementation`` (``server_info``): a low-level
    ``Server`` has it, a FastMCP app's SDK server too; an ``MCPServer`` has the same
    identity fields as attributes.
    """
    info = server if isinstance(server, Implementation) else getattr(server, "server_info", None)
    if not isinstance(info, Implementation):
        # A FastMCP app keeps the SDK server that stamps its results as `_mcp_server`.
        info = getattr(getattr(server, "_mcp_server", None), "server_info", None)
    if not isinstance(info, Implementation):
        info = Implementation(name=server.name, version=server.version or "", title=server.title,
                              description=server.description, website_url=server.website_url,
                              icons=server.icons)  # fmt: skip
    stamp: dict[str, Any] = info.model_dump(by_alias=True, mode="json", exclude_none=True)
    return stamp


def _line_bytes(
    result: CallToolResult,
    stamp: dict[str, Any] | None,
    request_id: int | str = _WORST_ID,
    *,
    most: int | None = None,
) -> int:
    """`message_bytes` for a stamp already made; given *most*, a count over *most* may be
    returned as soon as one copy of the line is over it (the other is not written)."""
    dumped = result.model_dump(by_alias=True, mode="json", exclude_none=True)
    # What the SDK's runner adds on a 2026-07-28 connection (mcp.server.runner._serialize):
    # the required resultType, and the serverInfo stamp unless the handler set one.
    dumped.setdefault("resultType", "complete")
    meta = dumped.get("_meta")
    if stamp is not None and (meta is None or meta.get(SERVER_INFO_META_KEY) is None):
        dumped["_meta"] = {**(meta or {}), SERVER_INFO_META_KEY: stamp}
    response = JSONRPCResponse(jsonrpc="2.0", id=request_id, result=dumped)
    line = len(response.model_dump_json(by_alias=True, exclude_unset=True).encode("utf-8"))
    if most is not None and line + FRAMING_BYTES > most:
        return line + FRAMING_BYTES
    # The 2026-07-28 Streamable HTTP path writes the message with the standard library's
    # json.dumps, which escapes every non-ASCII character ("é", 2 bytes, as \u00e9, 6):
    # the larger of the two is what a client may receive. The response as JSON-mode
    # values is `dumped` beside its jsonrpc and id (JSONRPCResponse's model_dump gives
    # the same): dumped again, the whole result would be walked once more.
    body = {"jsonrpc": "2.0", "id": request_id, "result": dumped}
    escaped = json.dumps(body, separators=(",", ":"))
    return max(line, len(escaped)) + FRAMING_BYTES


def message_over(result: CallToolResult, most: int, *, server: Any = None) -> bool:
    """Whether `message_bytes` of *result* (with *server*'s stamp) is over *most*.

    Each character of a text block takes at least a byte on the wire, so texts longer
    than *most* settle it without a serialization (FastMCP's copy of a large structured
    result is one); else one copy of the line over *most* does, and the second is
    written only for a line within *most*: the work beyond the first copy grows with the
    budget, not the result.
    """
    texts = sum(len(block.text) for block in result.content if isinstance(block, TextContent))
    if texts + FRAMING_BYTES > most:
        return True
    stamp = None if server is None else _stamp_of(server)
    return _line_bytes(result, stamp, most=most) > most


def serving_apps(start: Any = None) -> list[Any]:
    """The FastMCP apps a FastMCP request in progress passes through, innermost first:
    the one whose tool runs (or that of *start*, a FastMCP ``Context``), then each that
    mounted it, out to the app whose SDK server answers the request and stamps its
    serverInfo on the result. Empty outside one (or while ``fastmcp`` is not imported).

    FastMCP enters a ``Context`` for each server a call passes through, the mounting one
    first, and hands a tool or a middleware only the innermost: each keeps the token of
    its entry, whose old value is the context it was entered in.
    """
    module = sys.modules.get("fastmcp.server.context")
    if module is None:
        return []
    ctx = module._current_context.get() if start is None else start
    apps: list[Any] = []
    seen: set[int] = set()
    while isinstance(ctx, module.Context) and id(ctx) not in seen:
        seen.add(id(ctx))
        apps.append(ctx.fastmcp)
        tokens = getattr(ctx, "_tokens", None)
        ctx = tokens[0].old_value if tokens else None
    return apps


_T = TypeVar("_T")


def _for_identity_now(own: Any, built: _T, larger: dict[str, _T], make: Callable[[Any], _T]) -> _T:
    """*built* (made for identity *own*), or, under FastMCP, what *make* makes for the
    serverInfo stamp of the app that answers this call when that is larger than *own*'s
    (a mounting app's, not the one the tool is on); kept in *larger*, a few at most."""
    apps = serving_apps()
    identity = largest_identity([own, *apps]) if apps else own
    if identity is own:
        return built
    key = identity_key(identity)
    found = larger.get(key)
    if found is None:
        if len(larger) > _MOST_KEPT:  # one per app that serves it: a few
            larger.clear()
        found = larger[key] = make(identity)
    return found


def identity_key(server: Any) -> str:
    """The serverInfo stamp of *server* as a key: what is made for one identity serves
    every server that stamps the same, and never one that stamps another."""
    return json.dumps(_stamp_of(server), sort_keys=True)


def largest_identity(servers: Sequence[Any]) -> Any:
    """Of *servers* (the first on a tie), the one whose serverInfo stamp takes the most
    bytes on the wire.

    Of `serving_apps`, the outermost stamps when a server is mounted; but a tool that
    serves another app in-process (a client over FastMCP's memory transport) nests that
    app's contexts inside its own, and the chain does not say where one request ends:
    counting the largest stamp on it holds the budget either way.
    """
    return max(servers, key=lambda server: _line_bytes(_BARE, _stamp_of(server)))


_BARE: Final = CallToolResult(content=[])


def cursor_error(exc: CursorError) -> MCPError:
    """The MCP error for a refused cursor: code ``exc.mcp_code`` (-32602), reason in data.

    The message names only the failure class (cursor errors never echo a principal or a
    query), so it is safe to send to the client. Under FastMCP with the jsonbudget
    middleware it is also a FastMCP error, so FastMCP logs one line, not a traceback.
    """
    bridge = sys.modules.get("jsonbudget.fastmcp")
    cls: type[MCPError] = MCPError if bridge is None else bridge.QuietCursorError
    return cls(code=exc.mcp_code, message=str(exc), data={"reason": exc.reason})


@contextlib.contextmanager
def _as_tool_errors() -> Iterator[None]:
    """jsonbudget's errors raised inside as the client is to get them: a refused
    cursor as `cursor_error`, any other as the SDK's ``ToolError`` with its message.

    The SDK sends the model the text of a ``ToolError`` only: any other exception is a
    crash to it, answered ``Error executing tool <name>`` and logged with its traceback,
    so the model could not learn that its pointer or reference was wrong, or why. A
    jsonbudget error is raised on purpose and its message is written to be shown (it
    never holds a spilled file's name, a principal or a query). Any other exception is
    a bug and keeps the SDK's handling.
    """
    try:
        yield
    except CursorError as exc:
        raise cursor_error(exc) from exc
    except JsonBudgetError as exc:
        raise ToolError(str(exc)) from exc


def _limits_of(limits: Limits | None, max_bytes: int | None) -> Limits:
    if limits is None:
        if max_bytes is None:
            raise LimitError("max_bytes", None, "give max_bytes or limits")
        return Limits(max_bytes)
    if not isinstance(limits, Limits):
        raise TypeError(f"limits must be a Limits, not {type(limits).__name__}")
    if max_bytes is not None:
        raise LimitError("limits", limits, "give limits or max_bytes, not both")
    return limits


class _OneCall(StoreFront):
    """The cursor store as the rounds of one `McpPager` call see it.

    A round whose message is over the budget is built again, smaller, and never served:
    a store call per round started an operation per round (counted against the store's
    caps, which then evicted live ones) or counted a continuation twice, and minted a
    cursor per round (pushing real ones out of the operation's last 256). So only the
    first start or resume reaches *store*, later rounds get its state again, and mint
    records its arguments and answers `placeholder`; `McpPager` mints once, for the round
    it serves.
    """

    __slots__ = ("minted", "placeholder", "state")

    def __init__(self, store: CursorStore) -> None:
        super().__init__(store)
        self.state: CursorState | None = None
        self.minted: tuple[CursorState, JSONValue] | None = None
        # As long as a cursor may be, so that no real token makes the message longer, and
        # random, so that the page holds it where its cursor is and nowhere else.
        self.placeholder = secrets.token_urlsafe(TOKEN_CHARS)[:TOKEN_CHARS]

    def start(self, scope: Scope, *, max_pages: int | None) -> CursorState:
        if self.state is None:
            self.state = self.store.start(scope, max_pages=max_pages)
        return self.state

    def resume(self, token: str, scope: Scope) -> CursorState:
        if self.state is None:
            self.state = self.store.resume(token, scope)
        return self.state

    def mint(self, state: CursorState, position: JSONValue) -> str:
        self.minted = (state, position)
        return self.placeholder

    def mint_once(self) -> object:
        """The store's token for the last round minted for: the round served."""
        if self.minted is None:  # pragma: no cover - a page with a cursor minted it
            raise AssertionError("no cursor was minted for the page")
        return self.store.mint(*self.minted)

    def served(self, result: CallToolResult, content: ContentMode, token: object) -> CallToolResult:
        """*result*, measured with the placeholder for its cursor, with the store's *token*
        in its place: never longer, so the message still fits.

        Swapped in the result, not built again from the page: `page_result` is about a
        third of the cost of a small page. The cursor is a member of the envelope both
        copies carry; the placeholder is random, so nothing else in the text matches it.
        """
        if type(token) is not str:
            # Checked as `Paginator` checks a token it mints itself.
            raise TypeError(
                f"the cursor store {type(self.store).__name__}.mint() must return a str "
                f"token, not {type(token).__name__}"
            )
        if not token or len(token) > TOKEN_CHARS or len(orjson.dumps(token)) != len(token) + 2:
            raise ValueError(
                f"next_cursor must be 1 to {TOKEN_CHARS} ASCII characters that JSON needs "
                "not escape"
            )
        key = MCP_KEYS["next_cursor"]
        structured = result.structured_content
        if structured is not None:
            # The envelope `page_result` parsed for this result alone: ours to change.
            structured[key] = token
        text = cast("TextContent", result.content[0]).text
        if content != "structured":  # else the text is `SUMMARY_TEXT`
            member = f'{json.dumps(key)}:"'
            at = text.rindex(member + self.placeholder + '"') + len(member)
            text = text[:at] + token + text[at + len(self.placeholder) :]
        return CallToolResult(
            content=[TextContent(type="text", text=text)], structured_content=structured
        )


class McpPager:
    """A configured, reusable pager that answers MCP tool calls within a message budget.

    ``max_bytes`` (or ``limits.max_bytes``) bounds the whole JSON-RPC response; the page
    inside gets what the message's envelope and the *content* form leave (see the docs
    for how it is fitted). `paginate` / `apaginate` return a ``CallToolResult`` and raise
    `cursor_error` for a refused cursor. With a *reader*, spilled items go to its store
    under a reference bound to the scope's principal, which `read_result_tool` reads.
    """

    __slots__ = ("_base", "_content", "_fixed", "_options", "_pagers", "_stamp", "limits")

    def __init__(
        self,
        *,
        max_bytes: int | None = None,
        limits: Limits | None = None,
        store: Any = None,
        oversized: OversizedPolicy = "truncate",
        spill_store: SpillTarget | None = None,
        strategy: Strategy = "balanced",
        markers: MarkerStyle = "text",
        default: Callable[[Any], Any] | None = None,
        content: ContentMode = "both",
        server: Any = None,
        reader: ResultReader | None = None,
    ) -> None:
        self.limits = _limits_of(limits, max_bytes)
        if content not in _MODES:
            raise LimitError("content", content, "must be 'both', 'structured' or 'text'")
        self._content: ContentMode = content
        self._stamp = _stamp_of(_DEFAULT_INFO if server is None else server)
        spill_ref = None
        if reader is not None:
            if not isinstance(reader, ResultReader):
                raise TypeError(f"reader must be a ResultReader, not {type(reader).__name__}")
            if oversized != "spill" and oversized in typing.get_args(OversizedPolicy):
                # (An unknown mode is the pager's to name.) A reader reads back spilled
                # items, and no other mode spills one.
                raise LimitError(
                    "reader",
                    reader,
                    f"only oversized='spill' has items to read back, not oversized={oversized!r}",
                )
            if spill_store is not None and spill_store is not reader.spill:
                raise LimitError("spill_store", spill_store, "must be the reader's spill store")
            # The reader reads what this pager spills, by a reference bound to the caller.
            spill_store = reader.spill
            spill_ref = functools.partial(_reader_ref, reader)
        self._options: dict[str, Any] = {
            "oversized": oversized, "spill_store": spill_store, "keys": MCP_KEYS,
            "strategy": strategy, "markers": markers, "default": default,
            "spill_ref": spill_ref,
        }  # fmt: skip
        # The message without the envelope: its bytes are counted once, here.
        empty = CallToolResult(
            content=[
                TextContent(type="text", text=SUMMARY_TEXT if content == "structured" else "")
            ],
            structured_content=None if content == "text" else {},
        )
        self._fixed = _line_bytes(empty, self._stamp) - (0 if content == "text" else 2)
        room = self.limits.max_bytes - self._fixed
        growth = _WORST_GROWTH[content]
        safe = room // growth
        least = _least_page_bytes(self.limits, self._options)
        if safe < least:
            need = self._fixed + math.ceil(least * growth)
            raise LimitError(
                "max_bytes",
                self.limits.max_bytes,
                f"must be at least {need} for content={content!r}: "
                f"{_least_sum(self._fixed, growth, least, 'page', need)}",
            )
        first = min(room, max(safe, int(room / _FIRST_GROWTH[content])))
        # The first try, and the one that always fits: built now, so options fail here.
        self._pagers: dict[int, Paginator] = {}
        self._base = Paginator(self.limits.replace(max_bytes=first), store=store, **self._options)
        self._pagers[first] = self._base
        self._paginator(safe)

    @property
    def store(self) -> Any:
        return self._base.store

    @property
    def content(self) -> ContentMode:
        return self._content

    def _paginator(self, budget: int) -> Paginator:
        pager = self._pagers.get(budget)
        if pager is None:
            if len(self._pagers) > _MOST_KEPT:  # budgets vary with the data: keep a few
                self._pagers = {self._base.limits.max_bytes: self._base}
            pager = Paginator(
                self.limits.replace(max_bytes=budget), store=self._base.store, **self._options
            )
            self._pagers[budget] = pager
        return pager

    def _round(self, budget: int, once: _OneCall) -> Paginator:
        """The pager for *budget* on *once*, the call's view of the store: a copy, since the
        configured one is shared by concurrent calls."""
        pager = copy.copy(self._paginator(budget))
        pager.store = once
        return pager

    def _safe_budget(self) -> int:
        return (self.limits.max_bytes - self._fixed) // _WORST_GROWTH[self._content]

    def _check(self, page: Page, budget: int, tried: int) -> tuple[CallToolResult | None, int]:
        """*page*'s result if its message fits, else None and the page budget to try next."""
        result = page_result(page, content=self._content)
        size = _line_bytes(result, self._stamp)
        if size <= self.limits.max_bytes:
            return result, budget
        safe = self._safe_budget()
        if budget <= safe or tried >= _ROUNDS - 1:
            # The safe budget fits by construction (the worst growth): never reached.
            raise EncodeError(  # pragma: no cover
                f"the MCP message is {size} bytes, over max_bytes={self.limits.max_bytes}",
                path=None,
            )
        if tried == _ROUNDS - 2:
            return None, safe
        # The growth this page showed, with 2% to spare for the next page's mix.
        room = self.limits.max_bytes - self._fixed
        growth = max((size - self._fixed) / max(len(page.to_json()), 1), 1.0)
        return None, max(safe, min(budget - 1, int(room / growth * 0.98)))

    def paginate(
        self, source: SourceLike, *, scope: Scope, cursor: str | None = None
    ) -> CallToolResult:
        """The page of *source* at *cursor* as a tool result."""
        src = as_source(source)
        once = _OneCall(self.store)
        budget = self._base.limits.max_bytes
        for tried in range(_ROUNDS):
            try:
                page = self._round(budget, once).paginate(src, scope=scope, cursor=cursor)
                result, budget = self._check(page, budget, tried)
                if result is None:
                    continue
                if page.next_cursor is None:
                    return result
                token = once.mint_once()
            except CursorError as exc:
                raise cursor_error(exc) from exc
            return once.served(result, self._content, token)
        raise AssertionError("unreachable: the last round raises or returns")  # pragma: no cover

    async def apaginate(
        self, source: SourceLike, *, scope: Scope, cursor: str | None = None
    ) -> CallToolResult:
        """The async twin of `paginate`. A sync source is paged in a worker thread."""
        src = as_source(source)
        if isinstance(src, Source):
            call = functools.partial(self.paginate, src, scope=scope, cursor=cursor)
            return await anyio.to_thread.run_sync(call)
        once = _OneCall(self.store)
        budget = self._base.limits.max_bytes
        for tried in range(_ROUNDS):
            try:
                page = await self._round(budget, once).apaginate(src, scope=scope, cursor=cursor)
                result, budget = self._check(page, budget, tried)
                if result is None:
                    continue
                if page.next_cursor is None:
                    return result
                # Where `Paginator.apaginate` would have minted it.
                if running_loop() == "asyncio" and store_blocks(self.store):
                    token = await asyncio.to_thread(once.mint_once)
                else:
                    token = once.mint_once()
            except CursorError as exc:
                raise cursor_error(exc) from exc
            return once.served(result, self._content, token)
        raise AssertionError("unreachable: the last round raises or returns")  # pragma: no cover


class McpResultFitter:
    """Fits any tool result value into one ``CallToolResult`` whose message is at most
    ``max_bytes`` (see `bounded_result`). Built once, used for every call."""

    __slots__ = ("_content", "_fixed", "_limits", "_options", "_stamp")

    def __init__(
        self,
        *,
        max_bytes: int | None = None,
        limits: Limits | None = None,
        content: ContentMode = "both",
        strategy: Strategy = "balanced",
        markers: MarkerStyle = "text",
        default: Callable[[Any], Any] | None = None,
        server: Any = None,
    ) -> None:
        self._limits = _limits_of(limits, max_bytes)
        if content not in _MODES:
            raise LimitError("content", content, "must be 'both', 'structured' or 'text'")
        self._content: ContentMode = content
        self._options: dict[str, Any] = {"strategy": strategy, "markers": markers,
                                         "default": default}  # fmt: skip
        Encoder(self._limits, **self._options)  # the options fail here, not on a call
        self._stamp = _stamp_of(_DEFAULT_INFO if server is None else server)
        self._fixed = {mode: self._fixed_of(mode, None) for mode in _MODES}
        least = max(self._fixed.values()) + math.ceil(MIN_BYTES * _WORST_GROWTH[content])
        if self._limits.max_bytes < least:
            raise LimitError(
                "max_bytes",
                self._limits.max_bytes,
                f"must be at least {least} for content={content!r}",
            )

    @property
    def max_bytes(self) -> int:
        return self._limits.max_bytes

    def _fixed_of(
        self, mode: ContentMode, meta: dict[str, Any] | None, notes: Sequence[str] = ()
    ) -> int:
        # The message without the value. A value that is not an object goes wrapped as
        # {"result": ...}: its fixed part is the larger, so it is the one counted. "[]"
        # stands for the value: 2 bytes in each copy the mode carries.
        empty = _value_result(b"[]", mode, notes)
        empty.meta = meta
        return _line_bytes(empty, self._stamp) - (4 if mode == "both" else 2)

    def _as_text(self, value: Any) -> bool:
        # A str is cut in place with a text marker inside it; a structured marker is an
        # object, which no text can hold, so with those a str is JSON as any value is.
        return isinstance(value, str) and self._options["markers"] == "text"

    def _mode_of(self, value: Any) -> ContentMode:
        return "text" if self._as_text(value) else self._content

    def fit(
        self,
        value: Any,
        *,
        meta: dict[str, Any] | None = None,
        notes: Sequence[str] = (),
        streams: dict[int, Any] | None = None,
    ) -> CallToolResult:
        """*value* bounded so that the whole response carrying it is at most ``max_bytes``.

        A ``str`` is text: it is cut (and marked) as text and sent as text content only;
        with structured markers (an object, which no text holds) it is JSON. Anything
        else is JSON: sent as *content* says; structured content must be an object, so a
        value the encoder does not write as one (or a marker at its top stands for) is
        wrapped as ``{"result": value}``, as the SDK wraps such outputs. *meta* is sent
        as the result's ``_meta`` and each of *notes* as a text block after the value's,
        whole: they are counted, and if they leave too little room for the value,
        `LimitError` is raised. *streams* holds what was already pulled from the
        iterators in *value* (see `encode_replaying`), when it was encoded before.
        """
        text = self._as_text(value)
        mode: ContentMode = "text" if text else self._content
        plain = meta is None and not notes
        fixed = self._fixed[mode] if plain else self._fixed_of(mode, meta, notes)
        room = self._limits.max_bytes - fixed
        worst = _worst(mode)
        safe = int(room // worst)
        if safe < MIN_BYTES:
            raise LimitError("meta", f"{fixed - self._fixed[mode]} bytes",
                             f"leaves {room} bytes of max_bytes={self.max_bytes} for the "
                             f"value, under the least {math.ceil(MIN_BYTES * worst)}")  # fmt: skip
        first_growth = 1.0 if text else _FIRST_GROWTH[mode]
        budget = min(room, max(safe, int(room / first_growth)))
        # Each round encodes the value again: an iterator in it gives each round the items
        # the last one pulled, not the ones after them.
        streams = {} if streams is None else streams
        for tried in range(_ROUNDS):
            encoder = Encoder(self._limits.replace(max_bytes=budget), **self._options)
            encoded = encode_replaying(encoder, value, streams)
            data = encoded.data
            # A marker at the top stands for the whole value (a cut string, an unencodable
            # one): in the structured style it is an object, which the value was not.
            marked = any(t.path == "" for t in encoded.truncations)
            result = _value_result(data, mode, notes, text=text, marked=marked)
            result.meta = meta
            size = _line_bytes(result, self._stamp)
            if size <= self._limits.max_bytes:
                return result
            if budget <= safe or tried >= _ROUNDS - 1:
                break
            growth = max((size - fixed) / len(data), 1.0)
            nxt = safe if tried == _ROUNDS - 2 else int(room / growth * 0.98)
            budget = max(safe, min(budget - 1, nxt))
        raise EncodeError(  # pragma: no cover - the safe budget fits by construction
            f"the MCP message is {size} bytes, over max_bytes={self._limits.max_bytes}", path=None
        )


def result_room(
    fitter: McpResultFitter,
    value: Any,
    *,
    meta: dict[str, Any] | None = None,
    notes: Sequence[str] = (),
) -> int:
    """The most bytes *value*'s encoding can take and always fit beside *meta* and
    *notes* in *fitter*'s results, whatever it holds (what the message leaves over the
    worst growth)."""
    mode = fitter._mode_of(value)
    return int((fitter._limits.max_bytes - fitter._fixed_of(mode, meta, notes)) // _worst(mode))


def least_result_bytes(fitter: McpResultFitter) -> int:
    """The smallest ``max_bytes`` at which a value of the least size, JSON or text, fits
    in *fitter*'s results beside `RESERVE_META` and `RESERVE_NOTES`.

    Ask a fitter with room to spare, so that every caller names the one minimum.
    """
    least = 0
    probes: tuple[Any, ...] = ([], "")  # a JSON value and a text
    for probe in probes:
        mode = fitter._mode_of(probe)
        fixed = fitter._fixed_of(mode, RESERVE_META, RESERVE_NOTES)
        least = max(least, fixed + math.ceil(MIN_BYTES * _worst(mode)))
    return least


def _least_sum(fixed: int, growth: Fraction, page: int, what: str, total: int) -> str:
    """The arithmetic of a least ``max_bytes``, for its message: the envelope, and the
    smallest page grown by the worst escaping (the envelope and the page alone did not
    add up to the minimum the message stated)."""
    return (
        f"the message's envelope takes {fixed} bytes and a {what} at least {page}, which "
        f"the wire's escaping may grow up to {growth} times: {fixed} + {growth} * {page} "
        f"= {total}"
    )


def _worst(mode: ContentMode) -> Fraction:
    # A str sent as text only is cut on its escaped bytes: it grows only where the SDK's
    # 2026-07-28 HTTP path escapes a non-ASCII character, 3 a byte, as JSON text does.
    return _WORST_GROWTH[mode]


def _value_result(
    data: bytes,
    mode: ContentMode,
    notes: Sequence[str] = (),
    *,
    text: bool = False,
    marked: bool = False,
) -> CallToolResult:
    """The result that carries *data*, the encoding of a value: as *text* only (a str cut
    with text markers), else as *mode* says, wrapped as ``{"result": ...}`` unless it is
    an object that no marker at the top (*marked*) stands in for."""
    after = [TextContent(type="text", text=note) for note in notes]
    if text:
        cut: str = orjson.loads(data)  # the cut string with its marker, unescaped
        return CallToolResult(content=[TextContent(type="text", text=cut), *after])
    if mode == "text":
        return CallToolResult(content=[TextContent(type="text", text=data.decode("utf-8")), *after])
    data, parsed = _wire_copy(data)
    structured = parsed if isinstance(parsed, dict) and not marked else {"result": parsed}
    shown = RESULT_SUMMARY_TEXT if mode == "structured" else data.decode("utf-8")
    return CallToolResult(content=[TextContent(type="text", text=shown), *after],
                          structured_content=structured)  # fmt: skip


def bounded_result(
    value: Any,
    /,
    *,
    max_bytes: int,
    content: ContentMode = "both",
    markers: MarkerStyle = "text",
    default: Callable[[Any], Any] | None = None,
    server: Any = None,
) -> CallToolResult:
    """One call: *value* as a tool result whose whole response is at most *max_bytes*.

    See `McpResultFitter.fit`; build a fitter once for a tool called many times.
    """
    fitter = McpResultFitter(max_bytes=max_bytes, content=content, markers=markers,
                             default=default, server=server)  # fmt: skip
    return fitter.fit(value)


def omitted_meta(meta: dict[str, Any] | None) -> dict[str, Any]:
    """*meta* too large to send: FastMCP's own key kept (its client unwraps results with
    it), the rest replaced by how many keys were left out (a count: always small)."""
    meta = meta or {}
    kept = {"fastmcp": meta["fastmcp"]} if "fastmcp" in meta else {}
    return {**kept, "jsonbudget/omittedMetaKeys": sum(k != "fastmcp" for k in meta)}


def value_of(result: Any) -> tuple[Any, int]:
    """The value a result (a ``CallToolResult`` or FastMCP's ``ToolResult``) stands for,
    and how many of its blocks the value leaves out.

    The value is its structured content (a text block that is FastMCP's JSON copy of it
    is not left out: the cut value gets a new one), else its single text block parsed as
    JSON (integers beyond 64 bits kept exact), else its texts joined. Blocks that are not
    text (images, audio, resources) cannot be cut: they are left out and counted.
    """
    texts = [block.text for block in result.content if isinstance(block, TextContent)]
    others = len(result.content) - len(texts)
    structured = result.structured_content
    if structured is not None:
        return structured, others + sum(not _copy_of(t, structured) for t in texts)
    if len(texts) == 1 and not others:
        try:
            return load_json(texts[0]), 0
        except DecodeError:
            return texts[0], 0  # not JSON: bounded as text
    return "\n\n".join(texts), others


def _copy_of(text: str, structured: dict[str, Any]) -> bool:
    """Whether *text* is FastMCP's copy of *structured* (or of the value it wraps): its
    JSON, or a wrapped string itself (FastMCP sends a ``str`` result as the text)."""
    wrapped = structured.get("result", structured) if len(structured) == 1 else structured
    if isinstance(wrapped, str) and text == wrapped:
        return True
    try:
        parsed = load_json(text)
    except DecodeError:
        return False  # prose: a text of its own
    return bool(parsed in (structured, wrapped))


def omitted_note(count: int) -> str:
    """The text block after a cut value that says how many blocks it left out."""
    return f"…[omitted: {count} content blocks]"


# The reserve a cut result always keeps room for: FastMCP's own _meta key with a count
# of dropped keys, and the line saying how many blocks were left out, at their longest.
_WORST_META: Final = {"fastmcp": {"wrap_result": True}, **{str(i): 0 for i in range(10)}}
_WORST_COUNT: Final = 10**9
RESERVE_META: Final = omitted_meta(_WORST_META)
RESERVE_NOTES: Final = (omitted_note(_WORST_COUNT),)


def refit_result(
    fitter: McpResultFitter,
    result: Any,
    value: Any,
    *,
    notes: Sequence[str],
    need: int,
    streams: dict[int, Any] | None = None,
) -> CallToolResult:
    """*result* (over the budget) as *value* fitted by *fitter* with *notes* after it,
    ``isError`` kept: its ``_meta`` whole when that leaves *value* at least *need* bytes,
    else `omitted_meta` of it. *streams* as `McpResultFitter.fit` takes them."""
    meta = result.meta
    if meta and result_room(fitter, value, meta=meta, notes=notes) < need:
        # The tool's _meta leaves no room for the value (or for a preview, which must
        # arrive whole with its reference): it is dropped, and said so.
        meta = omitted_meta(meta)
    fitted = fitter.fit(value, meta=meta, notes=notes, streams=streams)
    fitted.is_error = result.is_error
    return fitted


def tool_result_fitting(
    limits: Limits,
    *,
    strategy: Strategy,
    markers: MarkerStyle,
    default: Callable[[Any], Any] | None,
) -> Callable[[Any, bool], CallToolResult]:
    """What `bounded_tool` hands what a function declared to return MCP results returns
    to: a function of the value and whether it is an MCP result that makes it a
    ``CallToolResult`` whose whole message is at most ``limits.max_bytes``.

    An MCP result that fits is returned as it is (media stay media, ``isError`` stays);
    a larger one is fitted as `BoundedResults` fits one without a reader (`value_of`: the
    blocks its value leaves out are counted in a note, ``isError`` kept). Any other
    value (another member of a declared union) is fitted as `bounded_result` fits it. Measured with
    the serverInfo stamp of the default identity, or under FastMCP of the app that
    answers the call when that is larger. `LimitError` if *limits* leave too little room.
    """

    def make(server: Any) -> McpResultFitter:
        def fitter(max_bytes: int) -> McpResultFitter:
            return McpResultFitter(limits=limits.replace(max_bytes=max_bytes), strategy=strategy,
                                   markers=markers, default=default, server=server)  # fmt: skip

        least = least_result_bytes(fitter(max(limits.max_bytes, 1 << 20)))
        if limits.max_bytes < least:
            raise LimitError("max_bytes", limits.max_bytes,
                             f"must be at least {least} for a tool that returns an MCP result: "
                             f"its whole message is bounded, with a line saying how many "
                             f"content blocks were left out")  # fmt: skip
        return fitter(limits.max_bytes)

    own = make(None)
    # By the stamp of a larger identity met on a call (a FastMCP app's): its fitter.
    larger: dict[str, McpResultFitter] = {}

    def fit(value: Any, is_result: bool) -> CallToolResult:
        fitter = _for_identity_now(_DEFAULT_INFO, own, larger, make)
        if not is_result:
            return fitter.fit(value)
        # Its iterators are read once: the refit goes on from what was pulled to size it.
        streams: dict[int, Any] = {}
        result, left_out, may_fit, cut = as_call_result(value, fitter, streams)
        if may_fit and _line_bytes(result, fitter._stamp) <= fitter.max_bytes:
            return result
        kept, others = value_of(result)
        if cut is not _END and len(result.content) == 1:
            # Its one text, the JSON of an item cut to the budget, is the value: the
            # item itself is cut again, never that text parsed (whose marker would be an
            # item to it, and its count a count of what the first cut kept).
            kept = cut
        left_out += others
        notes = [omitted_note(left_out)] if left_out else []
        fitted = refit_result(fitter, result, kept, notes=notes, need=MIN_BYTES, streams=streams)
        first = fitted.content[0] if fitted.content else None
        if isinstance(kept, str) and cut is not _END and isinstance(first, TextContent):
            # The text ends with an item already cut, so a count of the chars after the
            # text's cut counts that cut, not what the item held (an endless iterator's
            # "more"): it is left unsaid.
            first.text = _COUNTED_CUT.sub("…[truncated]", first.text)
        return fitted

    return fit


def as_call_result(
    value: Any, fitter: McpResultFitter, streams: dict[int, Any]
) -> tuple[CallToolResult, int, bool, Any]:
    """An MCP result value as the ``CallToolResult`` a server sends for it, what the
    tool's own data in it takes bounded by *fitter*'s budget; how many blocks it left
    out; whether the result may fit that budget whole; and the list item cut to the
    budget that its last text block holds (`_END` if none).

    The result is the value itself, FastMCP's ``ToolResult`` with its fields, or content
    blocks, the SDKs' ``Image``, ``Audio`` (and FastMCP's ``File``) helpers and lists of
    them (flattened as the SDK flattens them: a str item is a text block, another value
    its JSON text). The SDK dumps that data whole, an endless iterator or 300,000 rows
    included, so it is written here with the bounded encoder instead (its iterators read
    through *streams*): structured content, ``_meta`` and a list's items that are no
    block. Structured content or ``_meta`` that fits the budget is sent as its encoding
    parsed back (the JSON the message is measured with); structured content that does not
    is kept for the refit to cut, and ``_meta`` that does not is `omitted_meta`. Blocks
    are sized by the lengths of their strings, never written, before the message is.
    """
    budget = fitter.max_bytes
    # Only the message's budget: other limits cut the value in the refit, not a result
    # that fits as it is.
    encoder = Encoder(Limits(budget), **fitter._options)
    tool_result = getattr(sys.modules.get("fastmcp.tools.base"), "ToolResult", None)
    if isinstance(value, CallToolResult):
        result = value
    elif tool_result is not None and isinstance(value, tool_result):
        result = CallToolResult(content=value.content, structured_content=value.structured_content,
                                _meta=value.meta, is_error=value.is_error)  # fmt: skip
    else:
        blocks, left_out, cut = _blocks_within(value, encoder, streams)
        may_fit = not left_out and cut is _END and _least_size(blocks, budget) <= budget
        return CallToolResult(content=blocks), left_out, may_fit, cut
    may_fit = _least_size(result.content, budget) <= budget
    update: dict[str, Any] = {}
    if result.structured_content is not None:
        encoded = encode_replaying(encoder, result.structured_content, streams)
        structured = _wire_copy(encoded.data)[1] if encoded.complete else None
        if isinstance(structured, dict):
            update["structured_content"] = structured
        else:
            may_fit = False
    if result.meta:
        encoded = encode_replaying(encoder, result.meta, streams)
        meta = load_json(encoded.data) if encoded.complete else None
        if not isinstance(meta, dict):
            meta = omitted_meta(result.meta)
            may_fit = False
        update["meta"] = meta
    return (result.model_copy(update=update) if update else result), 0, may_fit, _END


def _blocks_within(
    value: Any, encoder: Encoder, streams: dict[int, Any]
) -> tuple[list[ContentBlock], int, Any]:
    """*value* as content blocks, up to the one whose strings take them past *encoder*'s
    budget; how many blocks the items after it make, counted, not converted: a message
    that holds the blocks before them is over the budget already; and the item cut to
    the budget that the last block holds (`_END` if none).

    An item that is no block and no str is its JSON text as *encoder* writes it, within
    the budget and marked where cut or unencodable (bytes that are not UTF-8 among them),
    where the SDK writes the whole of it with pydantic.
    """
    budget = encoder.limits.max_bytes
    blocks: list[ContentBlock] = []
    size = left_out = 0
    cut: Any = _END
    # A stack, not recursion: a list nested a million levels deep is flattened too.
    stack: list[Iterator[Any]] = [iter((value,))]
    while stack:
        item = next(stack[-1], _END)
        if item is _END:
            stack.pop()
        elif isinstance(item, list | tuple):
            stack.append(iter(item))
        elif size > budget or cut is not _END:
            left_out += 1
        else:
            block, was_cut = _block_of(item, encoder, streams)
            size += _least_size((block,), budget)
            blocks.append(block)
            if was_cut:
                cut = item
    return blocks, left_out, cut


def _block_of(item: Any, encoder: Encoder, streams: dict[int, Any]) -> tuple[ContentBlock, bool]:
    """*item* as one content block, and whether it is an item cut to *encoder*'s budget."""
    if isinstance(item, _BLOCK_TYPES):
        return cast(ContentBlock, item), False
    for method in ("to_image_content", "to_audio_content", "to_resource_content"):
        convert = getattr(item, method, None)
        if convert is not None:
            return cast(ContentBlock, convert()), False
    if isinstance(item, str):
        return TextContent(type="text", text=item), False
    encoded = encode_replaying(encoder, item, streams)
    cut = any(t.kind != "unencodable" for t in encoded.truncations)
    return TextContent(type="text", text=encoded.data.decode()), cut


def _least_size(blocks: Sequence[Any], most: int) -> int:
    """At most the bytes *blocks* take in a message, read off the lengths of the strings
    they carry (a character takes a byte at least), without writing them; summed only
    until past *most*."""
    size = 0
    for block in blocks:
        resource = getattr(block, "resource", None)
        for field in (
            getattr(block, "text", None),
            getattr(block, "data", None),
            getattr(resource, "text", None),
            getattr(resource, "blob", None),
        ):
            if isinstance(field, str):
                size += len(field)
        if size > most:
            break
    return size


_BLOCK_TYPES: Final = typing.get_args(ContentBlock)
_END: Final = object()
# The count a text cut says at its end (text markers), dropped where it is not known.
_COUNTED_CUT: Final = re.compile(r"…\[truncated: \d+ more chars\]\Z")


def _reader_ref(reader: ResultReader, spilled: Any, scope: Scope) -> str:
    """A spilled item's reference that *reader* reads back for the page's principal only."""
    # Without unique_keys=True, though the encoder writes each key of a dict once: the
    # item's file copies a caller's own JSON text in it (an orjson.Fragment, a msgspec
    # Raw) byte for byte, and that may repeat a key. A pointer names the last member with
    # the key, as json.loads reads it; a reader told the keys are unique stops at the
    # first ({"a":1,"a":2} read "/a" as 1).
    return reader.reference(spilled.ref, principal=scope.principal)


def _least_page_bytes(limits: Limits, options: Mapping[str, Any]) -> int:
    """The smallest page budget the page builder accepts with these options."""
    low, high = MIN_BYTES, 1 << 16
    # An option that is invalid at any budget (an unknown `oversized`) raises its own
    # error here: the search below would report it as a budget too small.
    Paginator(limits.replace(max_bytes=high), **options)
    while low < high:  # the builder refuses budgets below a bound: find it
        mid = (low + high) // 2
        try:
            Paginator(limits.replace(max_bytes=mid), **options)
        except LimitError:
            low = mid + 1
        else:
            high = mid
    return low


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


def _is_context(annotation: Any) -> bool:
    """Whether a parameter so annotated receives the server's Context (as the SDKs find it:
    the class, or one of a generic's arguments such as ``Context | None``)."""
    classes: list[type] = [McpContext]
    fastmcp_context = sys.modules.get("fastmcp.server.context")  # imported if annotated so
    if fastmcp_context is not None:
        classes.append(fastmcp_context.Context)
    candidates = [annotation, *typing.get_args(annotation)]
    return any(isinstance(c, type) and issubclass(c, tuple(classes)) for c in candidates)


def _await_from_sync(
    call: Callable[[], Coroutine[Any, Any, CallToolResult]], name: Any
) -> CallToolResult:
    """*call* awaited from a sync tool: on the event loop of the worker thread the server
    runs the tool in (the SDK's and FastMCP's anyio threads; an async source may be bound
    to that loop), or, called where no event loop runs at all, on a loop of its own."""
    try:
        anyio.lowlevel.current_token()
    except RuntimeError:
        on_a_loop = False  # the server's worker thread, or plain sync code
    else:
        on_a_loop = True
    if on_a_loop:
        raise TypeError(
            f"{name!r} returned an async source and was called on a running event loop, "
            f"which paging it would block: call it from a worker thread, or make it "
            f"async def"
        )
    try:
        anyio.from_thread.run_sync(_nothing)
    except RuntimeError:
        in_worker = False  # not an anyio worker thread: no loop to go back to
    else:
        in_worker = True
    return anyio.from_thread.run(call) if in_worker else anyio.run(call)


def _nothing() -> None:
    """Run on the event loop only to learn whether this thread has one to go back to."""


def _injected(params: list[inspect.Parameter], fn: Callable[..., Any]) -> frozenset[str]:
    """The parameters the server fills per request, which the tool's input schema leaves
    out: by the servers' own rules, asked of a stand-in with these parameters.

    The SDK's: ``Context`` annotations and ``Annotated[T, Resolve(...)]``. FastMCP's
    (when it is imported): ``Context`` and ``UserSession`` annotations, and every
    dependency (a ``Dependency`` default such as ``Depends(...)``, ``Progress()`` or
    ``CurrentRequest()``, or one given in ``Annotated``). A dependency's ``CallArgument``
    naming an argument the function does not declare is refused: the client sends it but
    the function never sees it, so the cursor could not be bound to it.
    """

    def stand_in(*args: Any, **kwargs: Any) -> None:
        raise AssertionError("never called: only its signature is read")  # pragma: no cover

    names = {p.name for p in params}
    stand_in.__signature__ = inspect.Signature(params)  # type: ignore[attr-defined]
    stand_in.__annotations__ = {p.name: p.annotation for p in params if p.annotation is not p.empty}
    injected = {p.name for p in params if _is_context(p.annotation)}
    injected.update(find_resolved_parameters(stand_in))
    if "fastmcp" in sys.modules:  # a FastMCP tool's function names fastmcp's classes
        di = importlib.import_module("fastmcp.server.dependencies")
        # FastMCP builds the input schema from this wrapper's signature; unwrapped, as its
        # cache would keep every stand-in alive.
        schema_of = getattr(di.without_injected_parameters, "__wrapped__", None)
        schema_of = schema_of or di.without_injected_parameters
        sent = set(
            inspect.signature(schema_of(di.transform_context_annotations(stand_in))).parameters
        )
        if sent - names:
            raise TypeError(
                f"{getattr(fn, '__name__', fn)!r} has dependencies that take the arguments "
                f"{sorted(sent - names)} which it does not declare: declare them as "
                f"parameters so the cursor is bound to them"
            )
        injected |= names - sent
    return frozenset(injected)


_P = ParamSpec("_P")
_R = TypeVar("_R")
# The decorator's overloads tell a sync function from an async one by its return type. A
# return of bare Any (an unannotated function, `-> Any`) satisfies a bound of Never, which
# no other type does, so the first overload takes it as sync, as it is at run time, rather
# than the coroutine overload. The others take their return as a type variable, never a
# fixed type: where a return merely holds Any (`-> dict[str, Any]`), the overloads that
# match it then agree on what they matched, and mypy picks the first of them instead of
# giving up on the call as ambiguous (which erased the tool's signature). An async tool is
# one whose return is awaitable: a function that wraps an async one is typed `Awaitable`.
_AnyReturn = TypeVar("_AnyReturn", bound=Never)
_Awaited = TypeVar("_Awaited", bound=Awaitable[Any])


class PaginatedTool(Protocol[_P]):
    """What `paginated_tool` makes of a sync function: its parameters plus a keyword-only
    ``cursor``, returning the page's ``CallToolResult``.

    A call that passes ``cursor`` is checked loosely: a parameter list cannot say "the
    function's parameters and one keyword more" (PEP 612).
    """

    __name__: str

    @overload
    def __call__(self, *args: _P.args, **kwargs: _P.kwargs) -> CallToolResult: ...
    @overload
    def __call__(self, *args: Any, cursor: str | None, **kwargs: Any) -> CallToolResult: ...


class AsyncPaginatedTool(Protocol[_P]):
    """What `paginated_tool` makes of an async function: as `PaginatedTool`, awaited."""

    __name__: str

    @overload
    def __call__(
        self, *args: _P.args, **kwargs: _P.kwargs
    ) -> Coroutine[Any, Any, CallToolResult]: ...
    @overload
    def __call__(
        self, *args: Any, cursor: str | None, **kwargs: Any
    ) -> Coroutine[Any, Any, CallToolResult]: ...


class PaginatedToolDecorator(Protocol):
    """What `paginated_tool(...)` returns: wraps a sync or async function."""

    @overload
    def __call__(  # type: ignore[overload-overlap]  # bare Any only: see _AnyReturn
        self, fn: Callable[_P, _AnyReturn], /
    ) -> PaginatedTool[_P]: ...
    @overload
    def __call__(  # type: ignore[overload-overlap]  # the last overload takes it too
        self, fn: Callable[_P, _Awaited], /
    ) -> AsyncPaginatedTool[_P]: ...
    @overload
    def __call__(self, fn: Callable[_P, _R], /) -> PaginatedTool[_P]: ...


def paginated_tool(
    *,
    max_bytes: int | None = None,
    limits: Limits | None = None,
    store: Any = None,
    principal: str | Callable[[], str] = "anonymous",
    oversized: OversizedPolicy = "truncate",
    spill_store: SpillTarget | None = None,
    strategy: Strategy = "balanced",
    markers: MarkerStyle = "text",
    default: Callable[[Any], Any] | None = None,
    content: ContentMode = "both",
    server: Any = None,
    name: str | None = None,
    reader: ResultReader | None = None,
) -> PaginatedToolDecorator:
    """Decorate a function that returns a source into a paginated MCP tool.

    The decorated function keeps its name, docstring and parameters and gains a
    keyword-only ``cursor: str | None = None``; it returns a ``CallToolResult`` (see
    `McpPager`) with ``nextCursor``, whose whole response is at most ``max_bytes``, and
    declares `McpPageEnvelope` as its output schema (unless ``content="text"``). A cursor
    is bound to the principal, the tool's name and its arguments (page-size arguments
    such as ``limit`` excepted, see `Scope`), so a cursor presented with other arguments
    is refused with ``-32602``. *name* is the tool's name as registered (default: the
    function's): give it when the server registers the tool under another name, or two
    tools made from functions of one name would accept each other's cursors.
    *principal* is a str or a callable called per request. With a *reader*, an item
    spilled (``oversized="spill"``, into the reader's store) is shown by a reference
    that ``read_result_tool(reader=...)`` reads back for that principal only.
    Async functions (and async sources) work; sync sources are paged in a worker
    thread. Put it under the SDK's decorator::

        @server.tool()
        @paginated_tool(max_bytes=16384, store=SQLiteCursorStore("cursors.sqlite3"))
        def list_orders(status: str) -> SQLiteSource: ...
    """
    if name is not None and (not isinstance(name, str) or not name):
        raise TypeError("name must be a non-empty str, the tool's registered name")
    pager = McpPager(
        max_bytes=max_bytes,
        limits=limits,
        store=store,
        oversized=oversized,
        spill_store=spill_store,
        strategy=strategy,
        markers=markers,
        default=default,
        content=content,
        server=server,
        reader=reader,
    )
    own = _DEFAULT_INFO if server is None else server
    # By the stamp of a larger identity met on a call: the pager that counts it.
    larger: dict[str, McpPager] = {}

    def pager_for(identity: Any) -> McpPager:
        # The same store: a cursor continues whichever pager issued it.
        return McpPager(limits=pager.limits, store=pager.store, oversized=oversized,
                        spill_store=spill_store, strategy=strategy, markers=markers,
                        default=default, content=content, server=identity,
                        reader=reader)  # fmt: skip

    def pager_now() -> McpPager:
        return _for_identity_now(own, pager, larger, pager_for)

    # The envelope itself, not the SDK's Annotated[CallToolResult, McpPageEnvelope]: both
    # servers publish it as the tool's outputSchema and pass the returned CallToolResult
    # through (the official SDK after validating its structured content against it),
    # where FastMCP took the Annotated form for a CallToolResult schema and its client
    # refused every page. A text-only result declares none.
    returns: Any = CallToolResult if content == "text" else McpPageEnvelope

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
        new_sig = sig.replace(parameters=params, return_annotation=returns)
        tool = name if name is not None else getattr(fn, "__name__", type(fn).__name__)
        # What the server fills per request is not what the client asked for.
        injected = _injected(params, fn)

        def scope_of(arguments: Mapping[str, Any]) -> Scope:
            # As the client sent them: the server has made its JSON into the declared
            # types (an HttpUrl, a Path, a timedelta), which a scope has no JSON for.
            query = {k: as_sent(v) for k, v in arguments.items() if k not in injected}
            return Scope(_principal_of(principal), {**query, TOOL_KEY: tool})

        wrapper: Callable[..., Any]
        if is_async_callable(fn):  # an object with an async __call__ too

            async def async_wrapper(
                *args: Any, cursor: str | None = None, **kwargs: Any
            ) -> CallToolResult:
                bound = sig.bind(*args, **kwargs)
                bound.apply_defaults()
                scope = scope_of(bound.arguments)
                paging = pager_now()
                coro: Awaitable[Any] = fn(*bound.args, **bound.kwargs)
                source = await coro
                with _as_tool_errors():
                    return await paging.apaginate(source, scope=scope, cursor=cursor)

            wrapper = async_wrapper
        else:

            def sync_wrapper(
                *args: Any, cursor: str | None = None, **kwargs: Any
            ) -> CallToolResult:
                bound = sig.bind(*args, **kwargs)
                bound.apply_defaults()
                scope = scope_of(bound.arguments)
                paging = pager_now()
                source = as_source(fn(*bound.args, **bound.kwargs))
                with _as_tool_errors():
                    if isinstance(source, Source):
                        return paging.paginate(source, scope=scope, cursor=cursor)
                    # A sync function may return an async source (a sync factory of an
                    # async stream): it is paged on the server's event loop.
                    return _await_from_sync(
                        functools.partial(paging.apaginate, source, scope=scope, cursor=cursor),
                        getattr(fn, "__name__", fn),
                    )

            wrapper = sync_wrapper
        functools.update_wrapper(wrapper, fn)
        del wrapper.__wrapped__  # type: ignore[union-attr]  # the source type is not the output
        # The SDK reads the signature to build the tool's input schema.
        setattr(wrapper, "__signature__", new_sig)  # noqa: B010 - mypy knows no such attribute
        wrapper.__annotations__ = {
            **{p.name: p.annotation for p in params if p.annotation is not p.empty},
            "return": returns,
        }
        return wrapper

    return cast(PaginatedToolDecorator, decorate)


class ReadResultTool(Protocol):
    """What `read_result_tool` returns: the ``read_result`` function to register."""

    __name__: str

    def __call__(
        self, ref: str, pointer: str = "", cursor: str | None = None
    ) -> CallToolResult: ...


def read_result_tool(
    *,
    reader: ResultReader,
    max_bytes: int = 16384,
    principal: str | Callable[[], str] = "anonymous",
    server: Any = None,
) -> ReadResultTool:
    """A ``read_result(ref, pointer="", cursor=None)`` function to register as an MCP tool.

    It reads back, for the calling *principal*, a result that a `ResultGate`,
    `TurnBudget`, `McpPager` or `paginated_tool` with this *reader* spilled: one page of
    the value at *pointer*, the whole response at most *max_bytes* (text and structured
    content both carry the page).
    A reference or cursor that is not the principal's, garbled or expired is refused
    with ``-32602``; a result that is gone, a pointer where nothing stands, or any other
    jsonbudget error is a tool error that carries its message. Register it with
    ``server.tool()(read_result_tool(reader=...))``.
    """
    if not isinstance(reader, ResultReader):
        raise TypeError(f"reader must be a ResultReader, not {type(reader).__name__}")
    budget = _limits_of(None, max_bytes).max_bytes

    def reader_for(identity: Any) -> ResultReader:
        """A reader whose pages, in a message stamped with *identity*, fit *max_bytes*."""
        empty = CallToolResult(content=[TextContent(type="text", text="")], structured_content={})
        fixed = _line_bytes(empty, _stamp_of(identity)) - 2
        growth = _WORST_GROWTH["both"]
        page_bytes = int((budget - fixed) // growth)
        if page_bytes < LEAST_READ_BYTES:
            least = fixed + math.ceil(LEAST_READ_BYTES * growth)
            raise LimitError(
                "max_bytes",
                max_bytes,
                f"must be at least {least}: "
                f"{_least_sum(fixed, growth, LEAST_READ_BYTES, 'read page', least)}",
            )
        # The same stores: a cursor continues whichever reader issued it.
        return ResultReader(spill=reader.spill, cursors=reader.cursors, max_bytes=page_bytes)

    own = _DEFAULT_INFO if server is None else server
    pages = reader_for(own)
    # By the stamp of a larger identity met on a call (a mounting app's): its reader.
    larger: dict[str, ResultReader] = {}

    def pages_now() -> ResultReader:
        return _for_identity_now(own, pages, larger, reader_for)

    def read_result(ref: str, pointer: str = "", cursor: str | None = None) -> CallToolResult:
        with _as_tool_errors():
            page = pages_now().read(ref, pointer, cursor, principal=_principal_of(principal))
        data, structured = _wire_copy(page.data)
        return CallToolResult(
            content=[TextContent(type="text", text=data.decode("utf-8"))],
            structured_content=structured,
        )

    # The tool's description, which the SDKs take from __doc__: set here, not written as
    # a docstring, which `python -OO` drops (the tool every spill marker names came with
    # no word on what `pointer` and `cursor` mean).
    read_result.__doc__ = (
        'Read more of a spilled result: the value at the JSON Pointer `pointer` ("" for '
        'the whole result, "/rows/3000", "/items/2/body"), one page per call; pass the '
        "page's next_cursor back as `cursor` for the next page."
    )
    return read_result

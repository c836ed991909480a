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
from typing import Any, Final, NamedTuple

from ._agents.guards import ResultGate
from ._agents.reader import ResultReader
from ._extras import missing_extra
from ._limits import MIN_BYTES
from ._pages.builder import ENVELOPE_KEYS
from ._sources.jsonread import load_json
from .errors import LimitError

try:
    import anyio.to_thread
    from fastmcp import FastMCP
    from fastmcp.exceptions import FastMCPError, ToolError
    from fastmcp.server.middleware import CallNext, Middleware, MiddlewareContext
    from fastmcp.tools.base import Tool, ToolResult
    from mcp.shared.exceptions import MCPError
    from mcp.types import CallToolResult, TextContent
except ImportError as exc:  # pragma: no cover - exercised only without fastmcp
    raise missing_extra("fastmcp", "fastmcp", "jsonbudget's FastMCP middleware", cause=exc) from exc

# After fastmcp's check: the 'fastmcp' extra installs mcp too, so without both the one
# error names it, not the 'mcp' extra that jsonbudget.mcp's own check would.
from .mcp import (
    RESERVE_META,
    RESERVE_NOTES,
    ContentMode,
    McpPageEnvelope,
    McpResultFitter,
    identity_key,
    largest_identity,
    least_result_bytes,
    message_bytes,
    message_over,
    omitted_note,
    refit_result,
    result_room,
    serving_apps,
    value_of,
)

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
    content the same value (``content="both"``, the default); the content blocks the
    value does not carry are left out and a text block after it says how many. A tool
    error's message is cut as a text result is, and an error result stays one. A
    paginated tool's page over the budget is refused with a `ToolError` (cutting its
    items would lose the rows its ``nextCursor`` skips). With a *reader*, the larger
    result (an error's too) is first spilled whole (a `ResultGate` with that reader) and
    the client gets its preview and a reference that *principal* can read back with the
    ``read_result`` tool: nothing is lost. What is spilled is the value when it carries
    the whole result, else the whole result as the SDK writes it (``content`` with every
    block, ``structuredContent``, ``_meta``, ``isError``). *tools* limits it to those
    tool names. Because a cut value holds markers that a tool's declared output schema
    may refuse, the tools it bounds are listed without an output schema (as FastMCP's
    own limiter does). Each result is
    measured with the serverInfo stamp of the app that answers the request (a mounting
    parent's, for a mounted server). *server* (the FastMCP app that serves the
    connection) has the budget checked against its identity here; without it, a larger
    identity met on a call makes a result that needs cutting an error naming the least.
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
        server: Any = None,
    ) -> None:
        self._options: dict[str, Any] = {"max_bytes": max_bytes, "content": content,
                                         "default": default}  # fmt: skip
        self._reader, self._principal = reader, principal
        # Checked here against the identity given (or the default one every fitter
        # assumes): a budget too small for it never reaches a call.
        self._plan = self._plan_for(_identity(server))
        # The plan for each identity actually met, by its stamp (`identity_key`), or the
        # least budget it needs when it leaves too little. Not by the server's id: a
        # dropped server's id is reused by the next, whose stamp may be longer.
        self._plans: dict[str, _Plan | int] = {}
        if tools is not None and (
            isinstance(tools, str) or not all(isinstance(t, str) for t in tools)
        ):
            raise TypeError("tools must be a sequence of tool names")
        self._tools = None if tools is None else frozenset(tools)

    def _plan_for(self, server: Any) -> _Plan:
        """The fitter and gates for results stamped with *server*'s identity (None: the
        default one); `LimitError` naming the least budget if *max_bytes* is under it."""
        max_bytes, reader = self._options["max_bytes"], self._reader
        if type(max_bytes) is int and max_bytes < self._least_for(server, reader=None):
            raise self._too_small(server)
        fitter = McpResultFitter(**self._options, server=server)
        # With a reader, one gate for JSON values and one for text. Each preview is as
        # large as always fits whole, so the reference at its end always arrives: a JSON
        # preview's bytes grow at worst as the fitter's worst case (`_text_preview`).
        gates: dict[bool, ResultGate] = {}
        if reader is not None:
            for text in (False, True):
                room = result_room(
                    fitter, "" if text else [], meta=RESERVE_META, notes=RESERVE_NOTES
                )
                preview = _text_preview(room) if text else room
                try:
                    gates[text] = ResultGate(max_bytes=preview, preview_bytes=preview,
                                             default=self._options["default"], reader=reader,
                                             principal=self._principal)  # fmt: skip
                except LimitError as exc:
                    raise self._too_small(server) from exc
        return _Plan(fitter, gates)

    def _least_for(self, server: Any, *, reader: ResultReader | None) -> int:
        """The least ``max_bytes`` for *server*'s identity (None: the default one): room,
        beside the smallest value, for FastMCP's _meta key and the line saying how many
        blocks were left out; with a *reader*, also for previews that hold a reference
        (searched: only an error asks for it)."""
        content: ContentMode = self._options["content"]
        # Asked of a fitter with room to spare, so the message names the one minimum
        # (the fitter's own, for a bare result, is smaller).
        least = least_result_bytes(
            McpResultFitter(**{**self._options, "max_bytes": _ROOMY}, server=server)
        )
        if reader is None:
            return least

        def takes(preview: int) -> bool:
            try:
                ResultGate(max_bytes=preview, preview_bytes=preview, reader=reader)
            except LimitError:
                return False
            return True

        return max(least, _least_with_reader(content, takes, server))

    def _too_small(self, server: Any) -> LimitError:
        """The error for a budget below the least for *server*, which it names."""
        reader = self._reader
        what = "" if reader is None else " with a reader (each preview ends with its reference)"
        stamp = "" if server is None else "this server's serverInfo stamp, "
        return LimitError("max_bytes", self._options["max_bytes"],
                          f"must be at least {self._least_for(server, reader=reader)} for "
                          f"content={self._options['content']!r}{what}: a cut result keeps "
                          f"{stamp}FastMCP's _meta key and a line saying how many content "
                          f"blocks were left out")  # fmt: skip

    @property
    def max_bytes(self) -> int:
        return int(self._options["max_bytes"])

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
        name = context.message.name
        try:
            result = await call_next(context)
        except QuietCursorError as exc:
            # The dispatcher answers a plain MCPError with a JSON-RPC error response.
            raise MCPError(
                code=exc.error.code, message=exc.error.message, data=exc.error.data
            ) from None
        except FastMCPError as exc:
            # FastMCP sends a tool's failure (already masked if the server masks) as an
            # isError result whose text is str(exc): that text is bounded like a result.
            if not self._bounds(name):
                raise
            cut = await self._bound_error(str(exc), _server_of(context), name)
            if cut is None:
                raise
            raise ToolError(cut) from exc
        if not isinstance(result, ToolResult) or not self._bounds(name):
            return result  # an input-required or task result carries no tool content
        server = _server_of(context)
        wire = CallToolResult(content=result.content, structured_content=result.structured_content,
                              _meta=result.meta, is_error=result.is_error)  # fmt: skip
        if not message_over(wire, self.max_bytes, server=server):
            return result
        if _text_chars(result) < _OFF_LOOP_CHARS:
            value, left_out = value_of(result)
        else:
            # Reading the value parses the text (FastMCP's JSON copy is as long as the
            # result) and compares it: in a worker thread, the event loop runs between
            # those steps, and every few ms while the exact parser reads a text orjson
            # cannot (an integer beyond 64 bits), instead of waiting for all of it.
            value, left_out = await anyio.to_thread.run_sync(value_of, result)
        if _is_page(value):
            # Cut, the page's items would end before the row its nextCursor resumes at.
            size = message_bytes(wire, server=server)  # said exactly: a refusal is rare
            raise ToolError(
                f"the page of {name!r} is {size} bytes, over this server's max_bytes="
                f"{self.max_bytes}; cutting its items would lose the rows its "
                f"nextCursor skips: give the paginated tool a max_bytes of at most "
                f"{self.max_bytes}"
            )
        fitter, gates = self._plan_at(server)
        notes = [omitted_note(left_out)] if left_out else []
        need = MIN_BYTES
        if gates:
            if (
                left_out
                or _joined(result)
                or (
                    _own_meta(result.meta)
                    and result_room(fitter, value, meta=result.meta, notes=notes)
                    < _need(gates, value)
                )
            ):
                # The value does not carry all the client would miss (blocks it leaves
                # out, text blocks it joins into one string, the tool's _meta with no room
                # beside it): the whole result is
                # spilled as the SDK writes it, each part read back by its pointer.
                value = wire.model_dump(by_alias=True, mode="json", exclude_none=True)
            need = _need(gates, value)
            gated = await gates[isinstance(value, str)].agate(value, label=name)
            value = load_json(gated.data) if gated.kind == "json" else gated.text
        fitted = refit_result(fitter, result, value, notes=notes, need=need)
        return ToolResult(content=fitted.content, structured_content=fitted.structured_content,
                          meta=fitted.meta, is_error=fitted.is_error)  # fmt: skip

    async def _bound_error(self, message: str, server: Any, name: str) -> str | None:
        """The text of the isError result FastMCP makes of *message*, bounded; None if it
        fits. With a reader the message is spilled whole and the text is its preview."""
        wire = CallToolResult(content=[TextContent(type="text", text=message)], is_error=True)
        if not message_over(wire, self.max_bytes, server=server):
            return None
        gates = self._plan_at(server).gates
        if gates:
            # Sized for a result with the fullest _meta and notes: it fits an error's.
            message = (await gates[True].agate(message, label=name)).text
        return self._cut_error(message, server) or message

    def _cut_error(self, message: str, server: Any) -> str | None:
        """*message* cut so the isError result FastMCP makes of it fits; None if it fits."""
        wire = CallToolResult(content=[TextContent(type="text", text=message)], is_error=True)
        if not message_over(wire, self.max_bytes, server=server):
            return None
        block = self._plan_at(server).fitter.fit(message).content[0]
        assert isinstance(block, TextContent)  # a str value is one text block
        return block.text

    def _plan_at(self, server: Any) -> _Plan:
        """The plan for results stamped with *server*'s identity, read from the request.

        FastMCP tells a middleware nothing when it is added to a server, so an identity
        larger than the one checked at construction is first met here: a result that
        needs cutting then gets the error of `_unfit` (a defined outcome naming the least
        budget), never an internal error.
        """
        if server is None:
            return self._plan
        key = identity_key(server)
        plan = self._plans.get(key)
        if plan is None:
            try:
                plan = self._plan_for(server)
            except LimitError:
                plan = self._least_for(server, reader=self._reader)
            # One server, or a few: each app that mounts the one it is on answers with
            # its own stamp.
            plans = self._plans if len(self._plans) < _MOST_PLANS else {}
            self._plans = {**plans, key: plan}
        if isinstance(plan, int):
            raise self._unfit(plan, server)
        return plan

    def _unfit(self, least: int, server: Any) -> Exception:
        """The outcome of a result that needs cutting on a server whose identity needs a
        budget of at least *least*: a `ToolError` (an ``isError`` result) when that
        message fits the budget, else the JSON-RPC error `SERVER_ERROR` (an error
        response carries no serverInfo stamp: it always fits)."""
        text = (
            f"BoundedResults(max_bytes={self.max_bytes}) cannot cut this result: this "
            f"server's identity (its serverInfo stamp) needs max_bytes of at least {least} "
            f"for content={self._options['content']!r}"
        )
        wire = CallToolResult(content=[TextContent(type="text", text=text)], is_error=True)
        if message_bytes(wire, server=server) <= self.max_bytes:
            return ToolError(text)
        return MCPError(
            code=SERVER_ERROR, message=text, data={"reason": "max_bytes", "least": least}
        )


class _Plan(NamedTuple):
    """What cuts results for one server identity: the fitter, and with a reader the gates
    for JSON values (False) and texts (True)."""

    fitter: McpResultFitter
    gates: dict[bool, ResultGate]


def _identity(server: Any) -> Any:
    """The low-level server (or `Implementation`) whose serverInfo *server* stamps: a
    FastMCP app's is its ``_mcp_server``, as the request's context gives it."""
    return server._mcp_server if isinstance(server, FastMCP) else server


#: The JSON-RPC error of a result that needs cutting where even a one-line error result
#: would pass the budget (the first of the codes JSON-RPC leaves to servers).
SERVER_ERROR: Final = -32000


_PAGE_KEYS: Final = frozenset(McpPageEnvelope.__annotations__)
#: A `read_result` page's keys: cut, it too would skip what its next_cursor resumes after.
_READ_PAGE_KEYS: Final = frozenset({*ENVELOPE_KEYS.values(), "pointer", "kind"})


def _is_page(value: Any) -> bool:
    """Whether *value* (a result's structured content, or its text parsed) is a page of a
    paginated tool or of `read_result`: cut, it would lose what its cursor skips. A page
    sent as text only (``content="text"``) is one too."""
    if type(value) is not dict:
        return False
    keys = value.keys()
    return {"items", "complete", "nextCursor"} <= keys <= _PAGE_KEYS or (
        {"items", "complete", "next_cursor"} <= keys <= _READ_PAGE_KEYS
    )


def _server_of(context: MiddlewareContext[Any]) -> Any:
    """The low-level server whose runner stamps its serverInfo on the result, if known.

    That is the app that answers the request, not always the one this middleware is on:
    a server mounted into another (``parent.mount(child)``) runs its own middleware, but
    the parent's SDK server sends the result with the parent's stamp. The apps the call
    passed through are read from FastMCP's contexts (`jsonbudget.mcp.serving_apps`), and
    the largest stamp among them counted. FastMCP keeps an app's SDK server as
    ``_mcp_server``: its ``server_info`` is the identity the SDK stamps (FastMCP's own
    version when the app gives none).
    """
    if context.fastmcp_context is None:
        return None
    apps = serving_apps(context.fastmcp_context)
    return largest_identity(apps)._mcp_server


def _need(gates: dict[bool, ResultGate], value: Any) -> int:
    """The room the preview of *value* needs beside the rest of the message: a JSON
    preview's bytes, or a text's at their longest escaped (see `_plan_for`)."""
    text = isinstance(value, str)
    return gates[text].preview_bytes * (6 if text else 1)


#: The length of a result's text, in characters, from which `value_of` runs off the
#: event loop: reading such a text takes milliseconds (some 20 ms a MB), a thread hop
#: a tenth of one.
_OFF_LOOP_CHARS: Final = 1 << 18


def _text_chars(result: ToolResult) -> int:
    """The characters of *result*'s text blocks: what `value_of` parses."""
    return sum(len(block.text) for block in result.content if isinstance(block, TextContent))


def _joined(result: ToolResult) -> bool:
    """Whether `value_of` joins *result*'s text blocks into one string (no structured
    content, more than one text block): spilled so, the blocks could not be read back."""
    texts = sum(isinstance(block, TextContent) for block in result.content)
    return result.structured_content is None and texts > 1


def _own_meta(meta: dict[str, Any] | None) -> bool:
    """Whether *meta* holds keys of the tool's own, which `omitted_meta` drops."""
    return any(key != "fastmcp" for key in meta or ())


def _cuttable_schema(schema: dict[str, Any] | None) -> bool:
    # A paginated tool's envelope is already within its budget: its schema stays.
    return schema is not None and schema.get("title") != McpPageEnvelope.__name__


def _text_preview(room: int) -> int:
    """The bytes of a text preview that always fit the *room* a fitter gives a text (its
    escaped JSON, with 3 a byte of slack for the escapes of the SDK's HTTP path): a
    preview byte is at most 6 on the wire (a control character's \u001f), half that."""
    return room // 2


#: A budget every mode holds: for asking a fitter what the least budget is.
_ROOMY: Final = 1 << 20
#: A middleware keeps the plans of this many server identities before it starts again.
_MOST_PLANS: Final = 8


def _least_with_reader(content: ContentMode, takes: Callable[[int], bool], server: Any) -> int:
    """The least ``max_bytes`` whose previews (`BoundedResults.__init__`: the room beside
    the envelope, `_text_preview` of it for text) the reader's gate *takes*: the room
    grows with the budget, so the least is searched."""

    def fits(max_bytes: int) -> bool:
        fitter = McpResultFitter(max_bytes=max_bytes, content=content, default=None,
                                 server=server)  # fmt: skip
        text = _text_preview(result_room(fitter, "", meta=RESERVE_META, notes=RESERVE_NOTES))
        return takes(min(result_room(fitter, [], meta=RESERVE_META, notes=RESERVE_NOTES), text))

    lo, hi = 1, _ROOMY
    while lo < hi:
        mid = (lo + hi) // 2
        try:
            ok = fits(mid)
        except LimitError:  # below the fitter's own least
            ok = False
        if ok:
            hi = mid
        else:
            lo = mid + 1
    return lo

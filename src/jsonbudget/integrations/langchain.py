"""`TurnBudget` wired into LangChain: budgeted tools and a callback that starts turns.

    turn = TurnBudget(max_bytes=10_000)
    tools = [budget_tool(search, turn)]
    model.invoke(messages, config={"callbacks": [TurnBudgetCallback(turn)]})

Needs ``langchain-core``; ``import jsonbudget`` never imports it.
"""

from __future__ import annotations

import asyncio
import dataclasses
import datetime
import enum
import json
import threading
import uuid
from collections.abc import Generator
from typing import Any, overload
from uuid import UUID

from .._agents.guards import Admitted, TurnBudget, TurnReport
from .._encode.bound import BOUNDED_SCALARS, TOO_BIG, Caps, clean_dumps
from .._encode.encoder import dumps_whole
from .._extras import missing_extra
from .._limits import DEFAULT_MAX_DEPTH, MAX_LIMIT
from ..errors import EncodeError
from ._results import (
    DEFAULT_MAX_REPORTS,
    OnReport,
    check_reports,
    check_turn,
    end_turn,
    tool_result,
)

try:
    from langchain_core.callbacks import BaseCallbackHandler, BaseCallbackManager
    from langchain_core.messages import ToolMessage
    from langchain_core.messages.tool import ToolOutputMixin
    from langchain_core.runnables import RunnableConfig
    from langchain_core.tools import BaseTool, Tool

    # LangChain's own test of a tool's return value for message content, the one its
    # ToolMessage is made by.
    from langchain_core.tools.base import _normalize_message_content
    from langchain_core.utils.pydantic import TypeBaseModel
except ImportError as exc:  # pragma: no cover - exercised only without langchain-core
    raise missing_extra(
        "langchain", "langchain_core", "jsonbudget's LangChain adapter", cause=exc
    ) from exc

__all__ = ["MEDIA_BLOCK_TYPES", "MEDIA_DOCUMENT_SOURCES", "TurnBudgetCallback", "budget_tool"]


class TurnBudgetCallback(BaseCallbackHandler):
    """Starts a new turn of *turn* when a chat model starts a turn; keeps the ended reports.

    A chat model run inside a tool run (a tool that asks a model) is part of the turn
    that called the tool, so it does not start one: callbacks are passed down to child
    runs, and without this check such a model would reset the turn mid-turn. A model
    starts none either while a `budget_tool` call on *turn* is running: the handler sees
    the tool runs only when it is in their callbacks, and one given to the model alone
    (``ChatOpenAI(callbacks=[...])``) took the model a tool asks for the next turn's.

    A turn is one run's: the results of the tool calls between two of its model calls. A
    model or a `budget_tool` call on *turn* inside a run this handler saw start (a chain,
    a LangGraph agent: the handler in its callbacks) belongs to a turn of that run's own
    (the topmost run the handler saw), begun from *turn*, so that concurrent runs neither
    reset nor fill each other's turns; the run's last turn ends with it. A model or a tool
    called on its own, outside any such run, shares *turn* itself.

    The report of each turn that ended with results is kept in ``reports``: the
    *max_reports* newest (default 100), the older dropped. Each is also handed to
    *on_report*, if given, as its turn ends.
    """

    # Run where LangChain calls it, on the event loop in an async run, not in an executor
    # thread: a start run there after its task was cancelled had no end to follow, and
    # its run was kept for good (see `_start`).
    run_inline = True

    def __init__(
        self,
        turn: TurnBudget,
        *,
        max_reports: int = DEFAULT_MAX_REPORTS,
        on_report: OnReport | None = None,
    ) -> None:
        self.turn = check_turn(turn)
        self.max_reports = check_reports(max_reports, on_report)
        self.on_report = on_report
        self.reports: list[TurnReport] = []
        # Every live run this handler has seen: run id -> (parent run id, is a tool run,
        # the asyncio task it started in).
        self._runs: dict[UUID, tuple[UUID | None, bool, asyncio.Task[Any] | None]] = {}
        # The runs started in each asyncio task that has not ended (see `_start`).
        self._started: dict[asyncio.Task[Any], set[UUID]] = {}
        # The topmost run's id -> that run's turn, while it runs.
        self._turns: dict[UUID, TurnBudget] = {}
        # Sync tools run in LangChain's threads: two calls of one run make one turn.
        self._lock = threading.Lock()

    def _start(self, run_id: UUID, parent_run_id: UUID | None, *, tool: bool = False) -> None:
        # A run cancelled between its start and the code that reports its end (another
        # handler's start awaited, a timeout) ends with no end event: it is ended when the
        # task it started in ends, which its run cannot outlive. Else cancelled runs' ids
        # were kept for good, as many as the clients who cancelled.
        task = _running_task()
        self._runs[run_id] = (parent_run_id, tool, task)
        if task is None:
            return  # a sync run, in its thread: it reports its end
        with self._lock:
            started = self._started.get(task)
            if started is None:
                started = self._started[task] = set()
                task.add_done_callback(self._task_done)
            started.add(run_id)

    def _task_done(self, task: asyncio.Task[Any]) -> None:
        with self._lock:
            unended = self._started.pop(task, set())
        for run_id in unended:
            self._end(run_id)

    def _end(self, run_id: UUID) -> None:
        run = self._runs.pop(run_id, None)  # None: started before this handler was attached
        with self._lock:
            if run is not None and run[2] is not None:
                started = self._started.get(run[2])
                if started is not None:
                    started.discard(run_id)
            turn = self._turns.pop(run_id, None)
        if turn is not None:  # a run with a turn of its own ended: so did its last turn
            self._end_turn(turn)

    def _end_turn(self, turn: TurnBudget) -> None:
        end_turn(turn, self.reports, self.max_reports, self.on_report)

    def _turn_in(self, parent_run_id: UUID | None) -> TurnBudget:
        """The turn of a model or tool run under *parent_run_id*: the run's own, where the
        handler saw that run start; else *turn*."""
        root = None
        run = parent_run_id
        # `get`, not `in` then a lookup: a run may end in another thread between the two.
        while run is not None and (entry := self._runs.get(run)) is not None:
            root = run
            run = entry[0]
        if root is None:
            return self.turn
        with self._lock:
            turn = self._turns.get(root)
            if turn is None:
                turn = self._turns[root] = self.turn.for_run()
        return turn

    def _inside_tool(self, parent_run_id: UUID | None) -> bool:
        run = parent_run_id
        while run is not None and (entry := self._runs.get(run)) is not None:
            run, tool, _ = entry
            if tool:
                return True
        return False

    def on_chat_model_start(
        self,
        serialized: Any,
        messages: Any,
        *,
        run_id: UUID,
        parent_run_id: UUID | None = None,
        **kwargs: Any,
    ) -> None:
        self._start(run_id, parent_run_id)
        if self._inside_tool(parent_run_id):
            return
        turn = self._turn_in(parent_run_id)
        if not turn.calls_running:
            self._end_turn(turn)

    # The other runs are recorded only to tell whether a model runs inside a tool.

    def on_tool_start(
        self,
        serialized: Any,
        input_str: str,
        *,
        run_id: UUID,
        parent_run_id: UUID | None = None,
        **kwargs: Any,
    ) -> None:
        self._start(run_id, parent_run_id, tool=True)

    def on_chain_start(
        self,
        serialized: Any,
        inputs: Any,
        *,
        run_id: UUID,
        parent_run_id: UUID | None = None,
        **kwargs: Any,
    ) -> None:
        self._start(run_id, parent_run_id)

    def on_llm_start(
        self,
        serialized: Any,
        prompts: Any,
        *,
        run_id: UUID,
        parent_run_id: UUID | None = None,
        **kwargs: Any,
    ) -> None:
        self._start(run_id, parent_run_id)

    def on_retriever_start(
        self,
        serialized: Any,
        query: str,
        *,
        run_id: UUID,
        parent_run_id: UUID | None = None,
        **kwargs: Any,
    ) -> None:
        self._start(run_id, parent_run_id)

    def on_tool_end(self, output: Any, *, run_id: UUID, **kwargs: Any) -> None:
        self._end(run_id)

    def on_tool_error(self, error: BaseException, *, run_id: UUID, **kwargs: Any) -> None:
        self._end(run_id)

    def on_chain_end(self, outputs: Any, *, run_id: UUID, **kwargs: Any) -> None:
        self._end(run_id)

    def on_chain_error(self, error: BaseException, *, run_id: UUID, **kwargs: Any) -> None:
        self._end(run_id)

    def on_llm_end(self, response: Any, *, run_id: UUID, **kwargs: Any) -> None:
        self._end(run_id)

    def on_llm_error(self, error: BaseException, *, run_id: UUID, **kwargs: Any) -> None:
        self._end(run_id)

    def on_retriever_end(self, documents: Any, *, run_id: UUID, **kwargs: Any) -> None:
        self._end(run_id)

    def on_retriever_error(self, error: BaseException, *, run_id: UUID, **kwargs: Any) -> None:
        self._end(run_id)


def _running_task() -> asyncio.Task[Any] | None:
    """The asyncio task this runs in; None outside one (a sync run in its thread)."""
    try:
        return asyncio.current_task()
    except RuntimeError:  # no event loop runs in this thread
        return None


# A Tool comes back a Tool (the runtime class subclasses it), any other tool a BaseTool.
@overload
def budget_tool(tool: Tool, turn: TurnBudget) -> Tool: ...
@overload
def budget_tool(tool: BaseTool, turn: TurnBudget) -> BaseTool: ...
def budget_tool(tool: BaseTool, turn: TurnBudget) -> BaseTool:
    """*tool* with the content the model sees admitted to *turn*.

    The wrapped tool runs *tool* itself, so its name, description, schema, injected
    arguments, ``return_direct``, ``response_format`` (and artifact), error handling and
    callbacks are unchanged, sync and async alike; a ``Tool`` stays a ``Tool`` (a
    single-input one is still shown as ``{"__arg1": string}``). Only the content is
    budgeted: the admitted text (the content when it fits what is left of the turn, else
    a preview and its spill reference). In a list of content blocks, strings, text blocks
    and every other block that is text in the model's context (``json``,
    ``search_result``...) are admitted (such a block that does not fit becomes a text
    block with its preview); media blocks (`MEDIA_BLOCK_TYPES`: images, audio, video,
    files; and a ``document`` whose source is a file, `MEDIA_DOCUMENT_SOURCES`) reach the
    model unchanged and do not count against the turn. A block too deep for ``json`` and
    ``repr`` is counted as the encoder writes it (depth marked), and that text replaces
    the blocks. Each ``ToolMessage`` in a returned list of them is admitted as a returned
    ``ToolMessage`` is; a returned ``Command`` (LangGraph) passes unchanged.
    """
    check_turn(turn)
    fields: dict[str, Any] = {
        "wrapped": tool,
        "turn": turn,
        "name": tool.name,
        "description": tool.description,
        "args_schema": tool.args_schema,
        "return_direct": tool.return_direct,
        "response_format": tool.response_format,
        "extras": tool.extras,
        # Read by the converters: ``{"type": "custom_tool"}`` makes a Tool a custom tool.
        "metadata": tool.metadata,
        "tags": tool.tags,
    }
    if isinstance(tool, Tool):
        return _BudgetedSimpleTool(func=tool.func, coroutine=tool.coroutine, **fields)
    return _BudgetedTool(**fields)


#: Where ``callbacks`` stands among BaseTool.run's positional arguments after tool_input.
_CALLBACKS_ARG = 3


class _BudgetedTool(BaseTool):
    """Delegates every run to *wrapped* and admits what it returns to *turn*."""

    wrapped: BaseTool
    turn: TurnBudget

    # The schema is the wrapped tool's, also when it comes from its ``_run`` signature.
    @property
    def args(self) -> dict[str, Any]:
        return self.wrapped.args

    @property
    def tool_call_schema(self) -> Any:
        return self.wrapped.tool_call_schema

    def get_input_schema(self, config: RunnableConfig | None = None) -> TypeBaseModel:
        return self.wrapped.get_input_schema(config)

    def run(self, tool_input: str | dict[str, Any], *args: Any, **kwargs: Any) -> Any:
        turn = self._run_turn(args, kwargs)
        with turn.running_call():
            output = self.wrapped.run(tool_input, *args, **kwargs)
        return _Admit(turn, self.name).output(output)

    async def arun(self, tool_input: str | dict[str, Any], *args: Any, **kwargs: Any) -> Any:
        turn = self._run_turn(args, kwargs)
        with turn.running_call():
            output = await self.wrapped.arun(tool_input, *args, **kwargs)
        return await _Admit(turn, self.name).aoutput(output)

    def _run_turn(self, args: tuple[Any, ...], kwargs: dict[str, Any]) -> TurnBudget:
        """The turn this call belongs to: its run's (see `TurnBudgetCallback`), found by
        the handler for *turn* among the callbacks it is run with; else *turn*."""
        # run(tool_input, verbose, start_color, color, callbacks, ...), as BaseTool's.
        callbacks = kwargs.get(
            "callbacks", args[_CALLBACKS_ARG] if len(args) > _CALLBACKS_ARG else None
        )
        if isinstance(callbacks, BaseCallbackManager):
            handlers, parent = callbacks.handlers, callbacks.parent_run_id
        else:
            handlers, parent = callbacks or [], None
        for handler in handlers:
            if isinstance(handler, TurnBudgetCallback) and handler.turn is self.turn:
                return handler._turn_in(parent)
        return self.turn

    def _run(self, *args: Any, **kwargs: Any) -> Any:
        # Required by BaseTool, never reached: run and arun hand the call to the wrapped tool.
        raise NotImplementedError


class _BudgetedSimpleTool(_BudgetedTool, Tool):
    """A budgeted single-input `Tool`: still a `Tool`, which the converters read as
    ``{"__arg1": string}`` (or a custom tool), not by the signature of ``Tool._run``
    (``args``, ``config``, ``kwargs``: calls that followed it failed)."""


#: What `_Admit` makes of an output, step by step: it yields each value to admit and is
#: sent that value's answer; it returns the output the model gets.
_Steps = Generator[Any, Admitted, Any]


class _Admit:
    """One call's output admitted to the *turn* it belongs to, under the tool's *name*.

    What is admitted, and what the model then gets, is said once, by `_steps`; `output`
    admits its values with `TurnBudget.admit`, `aoutput` with `TurnBudget.aadmit`."""

    def __init__(self, turn: TurnBudget, name: str) -> None:
        self.turn = turn
        self.name = name

    def output(self, output: Any) -> Any:
        steps = self._steps(output)
        more, value = _step(steps, None)
        while more:
            more, value = _step(steps, self.turn.admit(value, tool=self.name))
        return value

    async def aoutput(self, output: Any) -> Any:
        """`output` on the event loop: each value admitted by `TurnBudget.aadmit`, so that
        a call cancelled while its answer is admitted (a timeout) does not count it.

        Of a list of ToolMessages (one admission each), those admitted before the
        cancellation stay counted: the turn has no public way to give them back."""
        steps = self._steps(output)
        # The work before the first admission (a generator's first item read, blocks
        # encoded) stays off the loop, where it ran before; it counts nothing, so a
        # cancellation that leaves it running in its thread leaves nothing counted either.
        more, value = await asyncio.to_thread(_step, steps, None)
        while more:
            answer = await self.turn.aadmit(value, tool=self.name)
            # On the loop, with no await between: a cancellation there (a timeout) lost an
            # answer already counted. What follows an admission is cheap: the output
            # built from it, or the next message's content taken.
            more, value = _step(steps, answer)
        return value

    def _steps(self, output: Any) -> _Steps:
        if isinstance(output, ToolMessage):
            content = yield from self._content(output.content)
            return output.model_copy(update={"content": content})
        if isinstance(output, ToolOutputMixin):
            return output  # a Command carries its own messages; LangChain passes it as is
        if (
            isinstance(output, list)
            and output
            and all(isinstance(item, ToolOutputMixin) for item in output)
        ):
            # LangChain passes such a list on unchanged, as messages: a ToolMessage in it
            # reaches the model as one returned alone does (it passed uncounted once).
            messages = []
            for item in output:
                messages.append((yield from self._steps(item)))
            return messages
        # Called without a tool call: the tool's own return value (with a tool call,
        # LangChain has already made a generator its repr). Message content (a sequence
        # of strings and content blocks) is admitted as a tool call's content is: taken
        # as one value, its images were counted and spilled as base64 text.
        content = None if isinstance(output, str) else _normalize_message_content(output)
        if isinstance(content, list):
            blocks = yield from self._blocks(content)
            return output if blocks is content else blocks
        return (yield tool_result(output, self.turn)).text

    def _content(self, content: Any) -> _Steps:
        # A ToolMessage's content is a string (LangChain turned any other value into its
        # JSON text) or a list of strings and content blocks, which LangChain checked.
        if isinstance(content, list):
            return (yield from self._blocks(content))
        return (yield content).text

    def _blocks(self, content: list[Any]) -> Generator[Any, Admitted, list[Any]]:
        """A list of blocks, admitted as the one result of one call: the text of its
        blocks joined by newlines. Where that fits, the blocks are kept as they are;
        else one text block with the preview takes their place, before the media."""
        media: list[Any] = []
        texts: list[str] = []
        exact = True
        for index, block in enumerate(content):
            if _is_media(block):
                media.append(block)  # an image, a file...: the model gets it as media
                continue
            text = _text_of(block)
            if text is None:
                text = _encoded(block, index)
                exact = False
            texts.append(text)
        if not texts:
            return content
        admitted = yield "\n".join(texts)
        if admitted.reason == "fits" and exact:
            return content
        # A block counted as the encoder wrote it (its depth cut) is not what the block
        # would put in the context: the model gets the text that was counted instead.
        return [{"type": "text", "text": admitted.text}, *media]


def _step(steps: _Steps, answer: Admitted | None) -> tuple[bool, Any]:
    """*steps* resumed with *answer* (None: started): (True, the next value to admit), or
    (False, the output) once it has none left. A tuple, not StopIteration, which cannot
    come back from a worker thread through an asyncio future."""
    try:
        return True, (next(steps) if answer is None else steps.send(answer))
    except StopIteration as done:
        return False, done.value


def _is_media(block: Any) -> bool:
    """Whether *block* reaches the model as media: a `MEDIA_BLOCK_TYPES` block, or a
    ``document`` whose source is a file (`MEDIA_DOCUMENT_SOURCES`), as langchain-core
    reads one (a ``file`` block); a document of text (``text``, ``content``) is text."""
    if not isinstance(block, dict):
        return False
    kind = block.get("type")
    if kind == "document":
        source = block.get("source")
        return isinstance(source, dict) and source.get("type") in MEDIA_DOCUMENT_SOURCES
    return kind in MEDIA_BLOCK_TYPES


def _text_of(block: str | dict[str, Any]) -> str | None:
    """What a block puts in the model's context as text: a string, a text block's text;
    any other block (json, search_result, ...) as its JSON. None for a block nested too
    deep for Python's recursion to write."""
    if isinstance(block, str):
        return block
    if block.get("type") == "text" and isinstance(block.get("text"), str):
        return str(block["text"])
    # orjson only for a block it writes with no code of the caller's run (no `default`,
    # the collector paused): `str` called in the middle of its write could change a
    # container it holds no reference to (a segfault), and it writes NaN as null.
    data = clean_dumps(block, MAX_LIMIT, 0, _BLOCK_CAPS, None, True)
    if type(data) is bytes:
        return data.decode()
    if data == TOO_BIG:
        return None  # `_encoded` finds it too long at the cost of the limit, and says so
    try:
        # Any other block (NaN, an integer beyond 64 bits, a non-string key, a type of no
        # JSON form) as the standard library writes it: its encoder calls `str` between
        # members, holding what it writes, and writes NaN as NaN.
        return _BLOCK_JSON.encode(block)
    except RecursionError:
        return None
    except (TypeError, ValueError):
        pass  # no JSON form at all (a key of no JSON type, a cycle): its repr counts
    try:
        return repr(block)
    except RecursionError:
        return None


def _as_json(value: Any) -> Any:
    """A value the standard library cannot write, as orjson wrote it (its ``default``,
    `str`, for the rest): a dataclass as its fields, a date or time in ISO 8601, an enum
    as its value, a UUID as its text."""
    if dataclasses.is_dataclass(value) and not isinstance(value, type):
        return {field.name: getattr(value, field.name) for field in dataclasses.fields(value)}
    if isinstance(value, datetime.date | datetime.time):
        return value.isoformat()
    if isinstance(value, enum.Enum):
        return value.value
    if isinstance(value, uuid.UUID):
        return str(value)
    return str(value)


#: The caps a block is written by orjson within: the gate's (any size, 64 levels deep).
_BLOCK_CAPS: Caps = (DEFAULT_MAX_DEPTH, MAX_LIMIT, MAX_LIMIT, MAX_LIMIT, BOUNDED_SCALARS)
#: Compact, as orjson writes, for the blocks it does not write.
_BLOCK_JSON = json.JSONEncoder(ensure_ascii=False, separators=(",", ":"), default=_as_json)


def _encoded(block: Any, index: int) -> str:
    """*block* as the encoder writes it: nesting past its depth limit as a marker, where
    the standard library's ``json`` and ``repr`` raise RecursionError."""
    data = dumps_whole(block, default=str)
    if data is None:  # shared subtrees whose encoding is astronomically long
        raise EncodeError(
            f"a content block encodes to more than {MAX_LIMIT} bytes", path=f"/{index}"
        )
    return data.decode()


#: Content block types that reach the model as media, not as text: not counted in a turn
#: (LangChain's standard blocks, and OpenAI's ``image_url`` / ``input_audio`` forms).
MEDIA_BLOCK_TYPES = frozenset({"image", "image_url", "video", "audio", "input_audio", "file"})
#: The sources that make a ``document`` block (Anthropic's form, one of LangChain's tool
#: message blocks) a file: a PDF in base64, at a URL, or uploaded (a file id). A document
#: of any other source (``text``, ``content``) puts its text in the model's context.
MEDIA_DOCUMENT_SOURCES = frozenset({"base64", "url", "file"})

"""`TurnBudget` wired into pydantic-ai as a capability.

    turn = TurnBudget(max_bytes=10_000)
    agent = Agent(model, capabilities=[TurnBudgetCapability(turn)])

Needs ``pydantic-ai-slim``; ``import jsonbudget`` never imports it.
"""

from __future__ import annotations

import dataclasses
from collections.abc import Awaitable, Callable
from dataclasses import dataclass, field
from typing import Any

import orjson

from .._agents.guards import Admitted, TurnBudget, TurnReport
from .._encode.encoder import dumps_whole
from .._extras import missing_extra
from ._results import (
    DEFAULT_MAX_REPORTS,
    OnReport,
    atool_result,
    check_reports,
    check_turn,
    end_turn,
)

try:
    from pydantic_ai import BinaryContent, ModelRetry, RunContext, ToolFailed, ToolReturn
    from pydantic_ai._utils import format_inlined_text_file, is_text_like_media_type
    from pydantic_ai.capabilities import AbstractCapability
    from pydantic_ai.capabilities.abstract import (
        RawOutput,
        WrapOutputProcessHandler,
        WrapOutputValidateHandler,
        WrapToolExecuteHandler,
        WrapToolValidateHandler,
    )
    from pydantic_ai.exceptions import ToolFailedError, ToolRetryError
    from pydantic_ai.messages import ToolCallPart, is_multi_modal_content, tool_return_ta
    from pydantic_ai.models import ModelRequestContext
    from pydantic_ai.output import OutputContext
    from pydantic_ai.tools import ToolDefinition
    from pydantic_core import ValidationError
except ImportError as exc:  # pragma: no cover - exercised only without pydantic-ai
    raise missing_extra(
        "pydantic-ai", "pydantic_ai", "jsonbudget's pydantic-ai adapter", cause=exc
    ) from exc

try:
    from pydantic_ai._utils import has_yaml_structured_suffix
except ImportError:  # pragma: no cover - pydantic-ai before 2.78 inlines no +yaml file

    def has_yaml_structured_suffix(media_type: str) -> bool:
        return False


__all__ = ["TurnBudgetCapability"]


@dataclass
class TurnBudgetCapability(AbstractCapability[Any]):
    """Every tool result is admitted to *turn*; a new turn starts before each model request.

    The model gets the admitted text (the result when it fits what is left of the turn,
    else a preview and its spill reference). Of a `ToolReturn` only ``return_value`` is
    the tool result and admitted; its ``content`` (sent as a user prompt) and ``metadata``
    (never sent) are kept as they are. Files (``BinaryContent``, ``ImageUrl``...) reach the
    model as files and do not count against the turn; the rest of a list holding files is
    admitted as one result, its text first, then the files. A ``BinaryContent`` of text
    (JSON, ``text/*``..., which the model adapters inline as text) is admitted as that
    text: alone, it is sent as the file where that fits, else as the admitted text of its
    data; in a list, its text is part of the list's. A ``None`` result is counted as the
    empty text pydantic-ai sends for it, and kept. A tool's ``ModelRetry`` or
    ``ToolFailed`` message also reaches the model as the call's answer: it is admitted the
    same way, and so are the validation errors of arguments that do not validate (sent
    as they are where they fit, else as a ``ModelRetry`` naming their spill). An output
    tool's call (``final_result``) is answered the same way when its arguments do not
    validate or an output validator or output function asks for a retry: those answers
    are admitted as a function tool's are (the retry feedback for output that is no tool
    call is not).

    A turn is one run's: the results its tools return between two of its model requests.
    Each run of the agent gets a turn of its own, begun from *turn* (its limits, gate and
    store), so that concurrent runs of one agent neither reset nor fill each other's;
    *turn* itself admits nothing of a run. The report of each turn that ended with
    results (the run's last ends with the run) is kept in ``reports``, which every run
    shares: the *max_reports* newest (default 100), the older dropped. Each is also
    handed to *on_report*, if given, as its turn ends.
    """

    turn: TurnBudget
    # The adapter's output, as TurnBudgetHooks' and TurnBudgetCallback's: no option (a
    # positional one took a tuple, and the first run failed after its tools ran).
    reports: list[TurnReport] = field(default_factory=list, init=False)
    max_reports: int = field(default=DEFAULT_MAX_REPORTS, kw_only=True)
    on_report: OnReport | None = field(default=None, kw_only=True)

    def __post_init__(self) -> None:
        check_turn(self.turn)
        check_reports(self.max_reports, self.on_report)

    async def for_run(self, ctx: RunContext[Any]) -> TurnBudgetCapability:
        # One TurnBudget shared by concurrent runs: a second run's model request reset the
        # turn while the first run's calls still ran, and its model got 18,222 bytes of a
        # 10,000-byte turn, split across two reports, neither over budget.
        run = dataclasses.replace(self, turn=self.turn.for_run())
        # replace() gives an init=False field a new default: every run's reports go to
        # the one list the agent's capability holds.
        run.reports = self.reports
        return run

    async def wrap_run(
        self,
        ctx: RunContext[Any],
        *,
        # Not WrapRunHandler: its string names AgentRunResult, which get_type_hints would
        # have to resolve here.
        handler: Callable[[], Awaitable[Any]],
    ) -> Any:
        try:
            return await handler()
        finally:
            # The run's last turn ends with it, though no model request follows.
            self._end_turn()

    async def before_model_request(
        self, ctx: RunContext[Any], request_context: ModelRequestContext
    ) -> ModelRequestContext:
        self._end_turn()
        return request_context

    def _end_turn(self) -> None:
        end_turn(self.turn, self.reports, self.max_reports, self.on_report)

    async def after_tool_execute(
        self,
        ctx: RunContext[Any],
        *,
        call: ToolCallPart,
        tool_def: ToolDefinition,
        args: Any,
        result: Any,
    ) -> Any:
        if isinstance(result, ToolReturn):
            value = await self._admit(result.return_value, call.tool_name)
            return dataclasses.replace(result, return_value=value)
        return await self._admit(result, call.tool_name)

    async def wrap_tool_execute(
        self,
        ctx: RunContext[Any],
        *,
        call: ToolCallPart,
        tool_def: ToolDefinition,
        args: Any,
        handler: WrapToolExecuteHandler,
    ) -> Any:
        # A retry or a failure is the call's answer too: its message goes to the model as
        # the tool's return. The tool manager turns a tool's ModelRetry / ToolFailed into
        # the part it sends (ToolRetryError / ToolFailedError) before this hook sees it;
        # a hook's reaches it raw. The message is admitted and the same kind raised again,
        # so pydantic-ai counts retries as before.
        tool = call.tool_name
        try:
            return await handler(args)
        except ModelRetry as exc:
            raise ModelRetry(await self._admit_error(exc.message, tool)) from exc
        except ToolFailed as exc:
            raise ToolFailed(await self._admit_error(exc.message, tool)) from exc
        except ToolRetryError as exc:
            retried = exc.tool_retry
            text = await self._admit_error(retried.content, tool)
            raise ToolRetryError(dataclasses.replace(retried, content=text)) from exc
        except ToolFailedError as exc:
            failed = exc.tool_failed
            text = await self._admit_error(failed.content, tool)
            raise ToolFailedError(dataclasses.replace(failed, content=text)) from exc

    async def wrap_tool_validate(
        self,
        ctx: RunContext[Any],
        *,
        call: ToolCallPart,
        tool_def: ToolDefinition,
        args: Any,
        handler: WrapToolValidateHandler,
    ) -> Any:
        # Arguments that do not validate are answered too: pydantic-ai sends the
        # validation errors, each with the input it refused, as the call's return (a
        # 20 KB argument came back whole, uncounted). Where they fit they go as they are;
        # else a ModelRetry names their spill.
        return await self._answered(handler, args, call.tool_name)

    async def wrap_output_validate(
        self,
        ctx: RunContext[Any],
        *,
        output_context: OutputContext,
        output: RawOutput,
        handler: WrapOutputValidateHandler,
    ) -> Any:
        # An output tool's call (final_result) is one of the turn's calls: pydantic-ai
        # answers arguments that do not validate with their errors, the input echoed, as
        # it answers a function tool's (an 18 KB argument came back whole, uncounted). The
        # function-tool hooks never see these calls.
        return await self._output_answered(ctx, output_context, handler, output)

    async def wrap_output_process(
        self,
        ctx: RunContext[Any],
        *,
        output_context: OutputContext,
        output: Any,
        handler: WrapOutputProcessHandler,
    ) -> Any:
        # An output validator's or output function's ModelRetry (or ValidationError) on an
        # output tool's call answers that call too, as its message.
        return await self._output_answered(ctx, output_context, handler, output)

    async def _output_answered(
        self,
        ctx: RunContext[Any],
        output_context: OutputContext,
        handler: Callable[[Any], Awaitable[Any]],
        output: Any,
    ) -> Any:
        call = output_context.tool_call
        if call is None or ctx.partial_output:
            # Output that is no tool call gets no call's answer (see the docs); a partial
            # output's errors, while streaming, are never sent.
            return await handler(output)
        return await self._answered(handler, output, call.tool_name)

    async def _answered(
        self, handler: Callable[[Any], Awaitable[Any]], value: Any, tool: str
    ) -> Any:
        """*handler*'s answer for *value*; its `ModelRetry` or `ValidationError`, which
        pydantic-ai sends as the call's answer, admitted first (see `_retry`)."""
        try:
            return await handler(value)
        except (ModelRetry, ValidationError) as exc:
            retry = await self._retry(exc, tool)
            if retry is None:
                raise  # counted as sent
            raise retry from exc

    async def _retry(self, exc: ModelRetry | ValidationError, tool: str) -> ModelRetry | None:
        """The retry to raise in place of *exc*, whose message pydantic-ai sends as the
        call's answer: the message admitted (a `ModelRetry` keeps its kind, so the retry
        counting is unchanged). None for validation errors that fit as they are: the error
        itself goes on."""
        if isinstance(exc, ModelRetry):
            return ModelRetry(await self._admit_error(exc.message, tool))
        errors = exc.errors(include_url=False, include_context=False)
        sent = await self._admit_error(errors, tool)
        return None if sent is errors else ModelRetry(sent)

    async def _admit_error(self, message: Any, tool: str) -> Any:
        """A retry's or a failure's message, admitted as pydantic-ai sends it: inside
        ``{"error": ...}``, a text JSON-escaped, validation errors as the array they are.
        Where that does not fit, the message becomes a short note naming the spill (the
        longest of `_notes` whose wrapped form is no longer than what the turn counted)."""
        try:
            # The bytes pydantic-ai sends (an int beyond 64 bits in full, where the encoder
            # writes a short marker), admitted as they are.
            sent: Any = tool_return_ta.dump_json({"error": message})
        except (ValueError, TypeError):  # a value it cannot write: the encoder's markers
            sent = {"error": message}
        admitted = await self.turn.aadmit(sent, tool=tool)
        if admitted.spill is None:
            return message  # counted as sent: the wrapper and the escapes
        counted = len(admitted.data)
        notes = _notes(admitted)
        for note in notes:
            if len(orjson.dumps({"error": note})) <= counted:
                return note
        # Not reached: the turn counted at least the gate's bare reference,
        # {"spilled":{"ref":REF,"size":N}}, longer than {"error":"…[spilled: REF]"}.
        return notes[-1]

    async def _admit(self, value: Any, tool: str) -> Any:
        if value is None:
            # pydantic-ai sends None as an empty text; the turn's text for it is "null".
            await self.turn.aadmit("", tool=tool)
            return None
        # pydantic-ai sends files natively and the other items as text: only text is
        # admitted, so an image stays an image (not base64 inside JSON). A text file is
        # text in the model's context, which its adapter inlines: it is admitted.
        if _is_media(value):
            return value
        if isinstance(value, list):
            files = [item for item in value if _is_media(item)]
            data = [item for item in value if not _is_media(item)]
            if files and not data:
                return value
            if files:
                return await self._admit_with_files(data, files, tool)
            if any(_is_text_file(item) for item in data):
                # Sent as counted, the text files' text in the array: as files, each
                # would add its uncounted reference beside it.
                value = [_as_sent(item) for item in data]
        elif _is_text_file(value):
            return await self._admit_text_file(value, tool)
        return (await self.turn.aadmit(await atool_result(value, self.turn), tool=tool)).text

    async def _admit_text_file(self, file: BinaryContent, tool: str) -> Any:
        """A text file returned alone: sent as the file, counted as the text its adapter
        inlines, where that fits; else its data is admitted as the tool's result text.

        Spilled as the inlined text, its preview was the file's first line, the frame's
        header: a JSON file spilled as its data is previewed and read as JSON."""
        inlined = _as_sent(file)
        # Fits the turn as it stands: else its data, not the file, is what is sent.
        if len(inlined.encode()) <= min(self.turn.remaining, self.turn.gate.max_bytes):
            admitted = await self.turn.aadmit(inlined, tool=tool)
            if admitted.spill is None:
                return file
            return admitted.text  # a concurrent call took the room first
        return (await self.turn.aadmit(file.data, tool=tool)).text

    async def _admit_with_files(self, data: list[Any], files: list[Any], tool: str) -> Any:
        """The items of a result that holds files: their text goes first, then the files
        (a text file's text, as its adapter would inline it, is part of that text).

        A provider whose tool results take text only (OpenAI's chat API, Groq, Mistral...)
        sends ``[text, "See file <id>.", ...]`` as one JSON array, the text escaped once
        more: that array is what is admitted. Where it does not fit, the text becomes a
        short note naming the spill, and the message (note and file references) is kept
        within what the turn counted: files are left out from the end, and the note says
        how many, until it is; with none left the note alone is sent, as a plain text."""
        inlined = [_as_sent(item) for item in data]
        one = inlined[0] if len(inlined) == 1 else inlined
        limit = self.turn.max_bytes
        default = self.turn.gate.default
        text = one
        if not isinstance(one, str):
            data_json = dumps_whole(one, default=default, max_bytes=limit)
            text = None if data_json is None else data_json.decode()
        refs = [f"See file {item.identifier}." for item in files]
        if text is None:  # longer than the turn: spilled whichever way it is counted
            admitted = await self.turn.aadmit(one, tool=tool)
        else:
            # Counted as sent (bytes are admitted as they are); a spill keeps the array,
            # whose first item is the text.
            admitted = await self.turn.aadmit(orjson.dumps([text, *refs]), tool=tool)
            if admitted.spill is None:
                return [text, *files]
        assert admitted.spill is not None
        counted = len(admitted.data)
        # The bytes each file adds to the array: a comma and its reference, escaped.
        ref_sizes = [1 + len(orjson.dumps(ref)) for ref in refs]
        sent = sum(ref_sizes)
        # Files come before a longer note: the first message (most files kept, longest
        # note) no longer than what was counted.
        for kept in range(len(files), -1, -1):
            notes = _notes(admitted, left_out=len(files) - kept, of=len(files))
            for note in notes:
                if kept == 0:  # a plain text, sent as it is
                    if len(note.encode()) <= counted:
                        return note
                elif len(orjson.dumps(note)) + 2 + sent <= counted:
                    return [note, *files[:kept]]
            if kept:
                sent -= ref_sizes[kept - 1]
        # Not reached (the shortest note is shorter than the gate's bare reference, the
        # least the turn counts for a spilled result); the gate's own answer fits.
        return admitted.text


def _is_text_file(item: Any) -> bool:
    """Whether pydantic-ai's model adapters put *item* into the model's context as text:
    a `BinaryContent` of a text-like media type (``text/*``, JSON, XML, YAML, TOML...),
    decided as they decide it (OpenAI's chat model and Mistral's inline a ``+yaml`` type
    that is neither an image nor a document too)."""
    if not isinstance(item, BinaryContent):
        return False
    media_type = item.media_type
    return is_text_like_media_type(media_type) or (
        has_yaml_structured_suffix(media_type) and not item.is_image and not item.is_document
    )


def _is_media(item: Any) -> bool:
    """Whether *item* reaches the model as a file (an image, audio, a PDF...), not as text."""
    return is_multi_modal_content(item) and not _is_text_file(item)


def _as_sent(item: Any) -> Any:
    """*item* as the model gets it: a text file as the text its adapter inlines (a 769 KB
    JSON file in a ``BinaryContent`` reached the model uncounted, as a file); any other
    item as it is."""
    if not _is_text_file(item):
        return item
    return format_inlined_text_file(
        item.data.decode("utf-8", "replace"), media_type=item.media_type, identifier=item.identifier
    )


def _notes(admitted: Admitted, *, left_out: int = 0, of: int = 0) -> list[str]:
    """The notes that may stand for a spilled message, longest first; each says it was
    spilled, names the spill and says how many files were left out of the message.

    The last, ``…[spilled: REF]`` (``…[spilled: REF; K files cut]``), is no longer than
    the gate's bare reference, ``{"spilled":{"ref":REF,"size":N}}``, the least the turn
    counts for a spilled result: inside ``{"error": ...}`` too, and with files cut while
    K has at most four digits more than N."""
    # The name the model was shown (with a reader, the bound reference, the only one
    # read_result takes), never the store's own.
    assert admitted.spill is not None
    assert admitted.shown_ref is not None
    ref = admitted.shown_ref
    size = admitted.spill.size
    files = f"; {left_out} of {of} files not sent" if left_out else ""
    return [
        f"…[spilled: {size} bytes as {ref}; read it with read_result{files}]",
        f"…[spilled: {size} bytes in {ref}{files}]",
        f"…[spilled: {ref}; {left_out} files cut]" if left_out else f"…[spilled: {ref}]",
    ]

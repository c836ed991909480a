"""`TurnBudget` wired into the OpenAI Agents SDK: run hooks and budgeted function tools.

    turn = TurnBudget(max_bytes=10_000)
    agent = Agent(name="a", tools=budget_tools([search], turn))
    await Runner.run(agent, "...", hooks=TurnBudgetHooks(turn))

Needs ``openai-agents``; ``import jsonbudget`` never imports it.
"""

from __future__ import annotations

import copy
import inspect
from collections.abc import Awaitable, Callable, Sequence
from typing import Any

from .._agents.guards import TurnBudget, TurnReport
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
    import pydantic
    from agents import (
        FunctionTool,
        RunContextWrapper,
        RunHooks,
        Tool,
        ToolOutputFileContent,
        ToolOutputImage,
        ToolOutputText,
    )

    # _FailureHandlingFunctionToolInvoker is private, but the SDK recognises its own
    # invoker by it: a callable needs_approval is evaluated on arguments as validation
    # leaves them, and FunctionTool.__wrapped__ is found, only through an instance of it.
    from agents.tool import _MISSING_FUNCTION_TOOL_WRAPPED_CALLABLE as _NO_CALLABLE
    from agents.tool import _SYNC_FUNCTION_TOOL_MARKER as _SYNC_MARKER
    from agents.tool import (
        ToolErrorFunction,
        ValidToolOutputPydanticModels,
        ValidToolOutputPydanticModelsTypeAdapter,
        _FailureHandlingFunctionToolInvoker,
        default_tool_timeout_error_message,
    )
    from agents.tool_context import ToolContext
except ImportError as exc:  # pragma: no cover - exercised only without the SDK
    raise missing_extra(
        "openai-agents", "agents", "jsonbudget's OpenAI Agents adapter", cause=exc
    ) from exc

__all__ = ["TurnBudgetHooks", "budget_tools"]


class TurnBudgetHooks(RunHooks[Any]):
    """Run hooks that start a new turn of *turn* before every model call.

    A turn is one run's: the outputs its function tools return between two of its model
    calls. The first model call of a run gives that run a turn of its own, begun from
    *turn* (its limits, gate and store), which the run's budgeted tools admit to, so that
    concurrent runs sharing the tools neither reset nor fill each other's turns. The
    report of each turn that ended (one with results; the run's last ends with its final
    output) is kept in ``reports``: the *max_reports* newest (default 100), the older
    dropped. Each is also handed to *on_report*, if given, as its turn ends.
    """

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

    async def on_llm_start(
        self, context: RunContextWrapper[Any], agent: Any, system_prompt: Any, input_items: Any
    ) -> None:
        self._end_turn(_run_turn(self.turn, context, start=True))

    async def on_agent_end(self, context: RunContextWrapper[Any], agent: Any, output: Any) -> None:
        # No model call follows the final output: the run's last turn ends here.
        self._end_turn(_run_turn(self.turn, context))

    def _end_turn(self, turn: TurnBudget) -> None:
        end_turn(turn, self.reports, self.max_reports, self.on_report)


def _run_turn(
    turn: TurnBudget, context: RunContextWrapper[Any], *, start: bool = False
) -> TurnBudget:
    """The turn of the run *context* belongs to: one of its own once *start* (the hooks)
    made it; else *turn*, shared, for a run without the hooks.

    The SDK gives every tool context of a run the run's own Usage object
    (ToolContext.from_agent_context), and a new one to each run: it is what the hooks and
    the tools both see of the run, and *turn* keeps the run's turn as long as it lives.
    """
    return turn.run_turn(context.usage, start=start)


def budget_tools(tools: Sequence[Tool], turn: TurnBudget) -> list[Tool]:
    """*tools* with every function tool's output admitted to *turn* (others unchanged).

    The model gets the admitted text: the output itself when it fits what is left of the
    turn, else a preview and its spill reference. Of a structured output (`ToolOutputText`,
    `ToolOutputImage`, `ToolOutputFileContent`, their dict forms, or a list of them) each
    text part is admitted; images and files reach the model as they are and do not count
    against the turn. A budgeted tool is a copy (no constructor called) whose invoker
    runs the tool's own: approval, validation and failure handling are the SDK's.
    """
    check_turn(turn)
    return [_budgeted(tool, turn) if isinstance(tool, FunctionTool) else tool for tool in tools]


def _budgeted(tool: FunctionTool, turn: TurnBudget) -> FunctionTool:
    # A copy, not dataclasses.replace: that calls the class's constructor, which a
    # FunctionTool subclass may define with its own arguments (TypeError). The SDK's own
    # copy rebinds an invoker that is a bound method of the tool to the copy.
    budgeted = copy.copy(tool)
    budgeted.on_invoke_tool = _AdmittingInvoker(budgeted.on_invoke_tool, turn, budgeted)
    if budgeted.timeout_seconds is not None and budgeted.timeout_behavior == "error_as_result":
        # The SDK answers a call that timed out outside the invoker: its answer (a custom
        # timeout_error_function's 4.5 KB) reached the model uncounted.
        budgeted.timeout_error_function = _AdmittingTimeout(
            budgeted.timeout_error_function, turn, budgeted
        )
    # What the model gets may be a preview, no longer the declared output type, which
    # the SDK validates every output of such a tool against (the run failed with
    # UserError once a result was spilled): the budgeted tool declares none.
    for name in ("output_json_schema", "_output_type_adapter"):
        if getattr(budgeted, name, None) is not None:
            setattr(budgeted, name, None)
    return budgeted


class _AdmittingInvoker(_FailureHandlingFunctionToolInvoker):
    """The tool's own invoker, run as it is (failure handling included); its output is
    then admitted to the turn.

    It replaced the SDK's invoker once, and the SDK, no longer recognising it, evaluated
    a callable ``needs_approval`` on the raw arguments, which validation then changed
    (``/tmp/../etc/passwd`` ran as ``/etc/passwd`` without the approval the plain tool
    asked for). So it is the SDK's invoker class, and what the SDK asks of one (argument
    preparation, the wrapped callable, rebinding to a copy) is the wrapped invoker's
    answer.
    """

    def __init__(
        self,
        invoke: Callable[[ToolContext[Any], str], Awaitable[Any]],
        turn: TurnBudget,
        tool: FunctionTool,
    ) -> None:
        # The base class's state is not set: every method that reads it is overridden.
        self._invoke = invoke
        self._turn = turn
        self._tool = tool
        self._function_tool = tool  # the base class's name for it: the SDK may read it
        if getattr(invoke, _SYNC_MARKER, False):
            # The SDK refuses a timeout on a sync tool by this mark on its invoker.
            setattr(self, _SYNC_MARKER, True)

    def _get_wrapped_callable(self) -> object:
        if isinstance(self._invoke, _FailureHandlingFunctionToolInvoker):
            return self._invoke._get_wrapped_callable()
        return _NO_CALLABLE  # an invoker of the tool's own (a subclass's method): none

    def prepare_arguments(self, input: str, tool_name: str) -> Any:
        prepare = getattr(self._invoke, "prepare_arguments", None)
        return prepare(input, tool_name) if prepare is not None else None

    def __agents_bind_function_tool__(self, function_tool: FunctionTool) -> _AdmittingInvoker:
        # The SDK's copy of a tool (a namespace, a clone) binds the invoker to the copy.
        if function_tool is self._tool:
            return self
        invoke = self._invoke
        bind = getattr(invoke, "__agents_bind_function_tool__", None)
        if callable(bind):
            invoke = bind(function_tool)
        elif inspect.ismethod(invoke) and invoke.__self__ is self._tool:
            # A subclass's own method (on_invoke_tool=self._invoke) runs against the
            # copy's state, as the SDK's copy of the plain tool rebinds it.
            invoke = invoke.__func__.__get__(function_tool, type(function_tool))
        return _AdmittingInvoker(invoke, self._turn, function_tool)

    async def __call__(self, ctx: ToolContext[Any], input: str) -> Any:
        output = await self._invoke(ctx, input)
        return await _admit(_run_turn(self._turn, ctx), self._tool.name, output)


class _AdmittingTimeout:
    """A budgeted tool's timeout answer: the tool's own ``timeout_error_function`` (or
    the SDK's default message), admitted to the turn as the call's output."""

    def __init__(self, answer: ToolErrorFunction | None, turn: TurnBudget, tool: FunctionTool):
        self._answer = answer
        self._turn = turn
        self._tool = tool

    async def __call__(self, ctx: RunContextWrapper[Any], error: Exception) -> Any:
        if self._answer is None:
            timeout = self._tool.timeout_seconds
            assert timeout is not None  # only a tool with a timeout gets this answer
            output: Any = default_tool_timeout_error_message(
                tool_name=self._tool.name, timeout_seconds=timeout
            )
        else:
            output = self._answer(ctx, error)
            if inspect.isawaitable(output):
                output = await output
        return await _admit(_run_turn(self._turn, ctx), self._tool.name, output)


async def _admit(turn: TurnBudget, name: str, output: Any) -> Any:
    """A function tool's *output* as the model gets it, admitted to *turn*."""
    if output is None:
        # The SDK sends None as its str, "None"; the turn's text for it is "null".
        await turn.aadmit(str(output), tool=name)
        return None
    parts = _structured(output)
    if parts is None:
        return (await turn.aadmit(await atool_result(output, turn), tool=name)).text
    # The text parts are one call's result: admitted as one (joined by newlines), so
    # that a call of many parts takes one call's room, not one a part.
    texts = [part.text for part in parts if isinstance(part, ToolOutputText)]
    if not texts:
        return parts
    admitted = await turn.aadmit("\n".join(texts), tool=name)
    if admitted.reason == "fits":
        return parts
    rest = [part for part in parts if not isinstance(part, ToolOutputText)]
    return [ToolOutputText(text=admitted.text), *rest]


def _structured(output: Any) -> list[ValidToolOutputPydanticModels] | None:
    """*output* as the SDK's structured parts, or None when the SDK would send it as text."""
    items = output if isinstance(output, list | tuple) else [output]
    parts = [_part(item) for item in items]
    if not parts or any(part is None for part in parts):
        return None  # the SDK stringifies a list unless every item is a part
    return [part for part in parts if part is not None]


def _part(item: Any) -> ValidToolOutputPydanticModels | None:
    if isinstance(item, ToolOutputText | ToolOutputImage | ToolOutputFileContent):
        return item
    if isinstance(item, dict) and "type" in item:
        try:
            return ValidToolOutputPydanticModelsTypeAdapter.validate_python(item)
        except pydantic.ValidationError:
            return None  # as for the SDK: a dict that is not a part is plain output
    return None

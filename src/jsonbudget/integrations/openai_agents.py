"""`TurnBudget` wired into the OpenAI Agents SDK: run hooks and budgeted function tools.

    turn = TurnBudget(max_bytes=10_000)
    agent = Agent(name="a", tools=budget_tools([search], turn))
    await Runner.run(agent, "...", hooks=TurnBudgetHooks(turn))

Needs ``openai-agents``; ``import jsonbudget`` never imports it.
"""

from __future__ import annotations

import dataclasses
from collections.abc import Sequence
from typing import Any

from .._agents.guards import TurnBudget, TurnReport
from .._extras import missing_extra
from ._results import tool_result

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
    from agents.tool import ValidToolOutputPydanticModels, ValidToolOutputPydanticModelsTypeAdapter
    from agents.tool_context import ToolContext
except ImportError as exc:  # pragma: no cover - exercised only without the SDK
    raise missing_extra("openai-agents", "agents", "jsonbudget's OpenAI Agents adapter") from exc

__all__ = ["TurnBudgetHooks", "budget_tools"]


class TurnBudgetHooks(RunHooks[Any]):
    """Run hooks that start a new turn of *turn* before every model call.

    The report of each turn that ended (one with results) is kept in ``reports``.
    """

    def __init__(self, turn: TurnBudget) -> None:
        if not isinstance(turn, TurnBudget):
            raise TypeError(f"turn must be a TurnBudget, not {type(turn).__name__}")
        self.turn = turn
        self.reports: list[TurnReport] = []

    async def on_llm_start(
        self, context: RunContextWrapper[Any], agent: Any, system_prompt: Any, input_items: Any
    ) -> None:
        ended = self.turn.reset()
        if ended.results:
            self.reports.append(ended)


def budget_tools(tools: Sequence[Tool], turn: TurnBudget) -> list[Tool]:
    """*tools* with every function tool's output admitted to *turn* (others unchanged).

    The model gets the admitted text: the output itself when it fits what is left of the
    turn, else a preview and its spill reference. Of a structured output (`ToolOutputText`,
    `ToolOutputImage`, `ToolOutputFileContent`, their dict forms, or a list of them) each
    text part is admitted; images and files reach the model as they are and do not count
    against the turn.
    """
    if not isinstance(turn, TurnBudget):
        raise TypeError(f"turn must be a TurnBudget, not {type(turn).__name__}")
    return [_budgeted(tool, turn) if isinstance(tool, FunctionTool) else tool for tool in tools]


def _budgeted(tool: FunctionTool, turn: TurnBudget) -> FunctionTool:
    invoke = tool.on_invoke_tool

    async def on_invoke_tool(context: ToolContext[Any], arguments: str) -> Any:
        output = await invoke(context, arguments)
        parts = _structured(output)
        if parts is None:
            return (await turn.aadmit(tool_result(output, turn), tool=tool.name)).text
        # The text parts are one call's result: admitted as one (joined by newlines), so
        # that a call of many parts takes one call's room, not one a part.
        texts = [part.text for part in parts if isinstance(part, ToolOutputText)]
        if not texts:
            return parts
        admitted = await turn.aadmit("\n".join(texts), tool=tool.name)
        if admitted.reason == "fits":
            return parts
        rest = [part for part in parts if not isinstance(part, ToolOutputText)]
        return [ToolOutputText(text=admitted.text), *rest]

    # What the model gets may be a preview, no longer the declared output type, which
    # the SDK validates every output of such a tool against (the run failed with
    # UserError once a result was spilled): the budgeted tool declares none.
    declared: dict[str, Any] = {
        name: None
        for name in ("output_json_schema", "_output_type_adapter")
        if getattr(tool, name, None) is not None
    }
    return dataclasses.replace(tool, on_invoke_tool=on_invoke_tool, **declared)


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

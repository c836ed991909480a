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

try:
    from agents import FunctionTool, RunContextWrapper, RunHooks, Tool
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
    turn, else a preview and its spill reference.
    """
    if not isinstance(turn, TurnBudget):
        raise TypeError(f"turn must be a TurnBudget, not {type(turn).__name__}")
    return [_budgeted(tool, turn) if isinstance(tool, FunctionTool) else tool for tool in tools]


def _budgeted(tool: FunctionTool, turn: TurnBudget) -> FunctionTool:
    invoke = tool.on_invoke_tool

    async def on_invoke_tool(context: ToolContext[Any], arguments: str) -> str:
        output = await invoke(context, arguments)
        return (await turn.aadmit(output, tool=tool.name)).text

    return dataclasses.replace(tool, on_invoke_tool=on_invoke_tool)

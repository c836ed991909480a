"""`TurnBudget` wired into LangChain: budgeted tools and a callback that starts turns.

    turn = TurnBudget(max_bytes=10_000)
    tools = [budget_tool(search, turn)]
    model.invoke(messages, config={"callbacks": [TurnBudgetCallback(turn)]})

Needs ``langchain-core``; ``import jsonbudget`` never imports it.
"""

from __future__ import annotations

from typing import Any

from .._agents.guards import TurnBudget, TurnReport
from .._extras import missing_extra

try:
    from langchain_core.callbacks import BaseCallbackHandler
    from langchain_core.tools import BaseTool, StructuredTool
except ImportError as exc:  # pragma: no cover - exercised only without langchain-core
    raise missing_extra("langchain", "langchain_core", "jsonbudget's LangChain adapter") from exc

__all__ = ["TurnBudgetCallback", "budget_tool"]


class TurnBudgetCallback(BaseCallbackHandler):
    """Starts a new turn of *turn* whenever a chat model starts; keeps the ended reports."""

    def __init__(self, turn: TurnBudget) -> None:
        if not isinstance(turn, TurnBudget):
            raise TypeError(f"turn must be a TurnBudget, not {type(turn).__name__}")
        self.turn = turn
        self.reports: list[TurnReport] = []

    def on_chat_model_start(self, serialized: Any, messages: Any, **kwargs: Any) -> None:
        ended = self.turn.reset()
        if ended.results:
            self.reports.append(ended)


def budget_tool(tool: BaseTool, turn: TurnBudget) -> BaseTool:
    """*tool* with its output admitted to *turn*: same name, description and arguments.

    The tool returns the admitted text (the output when it fits what is left of the turn,
    else a preview and its spill reference), sync and async alike.
    """
    if not isinstance(turn, TurnBudget):
        raise TypeError(f"turn must be a TurnBudget, not {type(turn).__name__}")

    def run(**kwargs: Any) -> str:
        return turn.admit(tool.invoke(kwargs), tool=tool.name).text

    async def arun(**kwargs: Any) -> str:
        return (await turn.aadmit(await tool.ainvoke(kwargs), tool=tool.name)).text

    return StructuredTool.from_function(
        func=run,
        coroutine=arun,
        name=tool.name,
        description=tool.description,
        args_schema=tool.args_schema,
    )

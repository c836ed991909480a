"""`TurnBudget` wired into pydantic-ai as a capability.

    turn = TurnBudget(max_bytes=10_000)
    agent = Agent(model, capabilities=[TurnBudgetCapability(turn)])

Needs ``pydantic-ai-slim``; ``import jsonbudget`` never imports it.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any

from .._agents.guards import TurnBudget, TurnReport
from .._extras import missing_extra

try:
    from pydantic_ai import RunContext
    from pydantic_ai.capabilities import AbstractCapability
    from pydantic_ai.messages import ToolCallPart
    from pydantic_ai.models import ModelRequestContext
    from pydantic_ai.tools import ToolDefinition
except ImportError as exc:  # pragma: no cover - exercised only without pydantic-ai
    raise missing_extra("pydantic-ai", "pydantic_ai", "jsonbudget's pydantic-ai adapter") from exc

__all__ = ["TurnBudgetCapability"]


@dataclass
class TurnBudgetCapability(AbstractCapability[Any]):
    """Every tool result is admitted to *turn*; a new turn starts before each model request.

    The model gets the admitted text (the result when it fits what is left of the turn,
    else a preview and its spill reference). The report of each turn that ended with
    results is kept in ``reports``.
    """

    turn: TurnBudget
    reports: list[TurnReport] = field(default_factory=list)

    def __post_init__(self) -> None:
        if not isinstance(self.turn, TurnBudget):
            raise TypeError(f"turn must be a TurnBudget, not {type(self.turn).__name__}")

    async def before_model_request(
        self, ctx: RunContext[Any], request_context: ModelRequestContext
    ) -> ModelRequestContext:
        ended = self.turn.reset()
        if ended.results:
            self.reports.append(ended)
        return request_context

    async def after_tool_execute(
        self,
        ctx: RunContext[Any],
        *,
        call: ToolCallPart,
        tool_def: ToolDefinition,
        args: Any,
        result: Any,
    ) -> Any:
        return (await self.turn.aadmit(result, tool=call.tool_name)).text

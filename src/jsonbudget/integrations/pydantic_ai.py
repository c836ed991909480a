"""`TurnBudget` wired into pydantic-ai as a capability.

    turn = TurnBudget(max_bytes=10_000)
    agent = Agent(model, capabilities=[TurnBudgetCapability(turn)])

Needs ``pydantic-ai-slim``; ``import jsonbudget`` never imports it.
"""

from __future__ import annotations

import dataclasses
from dataclasses import dataclass, field
from typing import Any

from .._agents.guards import TurnBudget, TurnReport
from .._extras import missing_extra

try:
    from pydantic_ai import RunContext, ToolReturn
    from pydantic_ai.capabilities import AbstractCapability
    from pydantic_ai.messages import ToolCallPart, is_multi_modal_content
    from pydantic_ai.models import ModelRequestContext
    from pydantic_ai.tools import ToolDefinition
except ImportError as exc:  # pragma: no cover - exercised only without pydantic-ai
    raise missing_extra("pydantic-ai", "pydantic_ai", "jsonbudget's pydantic-ai adapter") from exc

__all__ = ["TurnBudgetCapability"]


@dataclass
class TurnBudgetCapability(AbstractCapability[Any]):
    """Every tool result is admitted to *turn*; a new turn starts before each model request.

    The model gets the admitted text (the result when it fits what is left of the turn,
    else a preview and its spill reference). Of a `ToolReturn` only ``return_value`` is
    the tool result and admitted; its ``content`` (sent as a user prompt) and ``metadata``
    (never sent) are kept as they are. Files (``BinaryContent``, ``ImageUrl``...) reach the
    model as files and do not count against the turn; the rest of a list holding files is
    admitted as one result, its text first, then the files. The report of each turn that
    ended with results is kept in ``reports``.
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
        if isinstance(result, ToolReturn):
            value = await self._admit(result.return_value, call.tool_name)
            return dataclasses.replace(result, return_value=value)
        return await self._admit(result, call.tool_name)

    async def _admit(self, value: Any, tool: str) -> Any:
        # pydantic-ai sends files natively and the other items as text: only text is
        # admitted, so an image stays an image (not base64 inside JSON).
        if is_multi_modal_content(value):
            return value
        if isinstance(value, list):
            files = [item for item in value if is_multi_modal_content(item)]
            data = [item for item in value if not is_multi_modal_content(item)]
            if files and not data:
                return value
            if files:
                one = data[0] if len(data) == 1 else data
                return [(await self.turn.aadmit(one, tool=tool)).text, *files]
        return (await self.turn.aadmit(value, tool=tool)).text

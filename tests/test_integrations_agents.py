"""TurnBudget in the agent frameworks, each driven by its own test model.

Six parallel tool calls in one turn once used 10,524 of a 10,000-byte turn; with the
adapters, what the model receives as tool results never passes the turn's limit, and
every spilled result is whole on disk.
"""

from __future__ import annotations

import asyncio
from pathlib import Path
from typing import Any

import orjson
import pytest
from agents import Agent, RunConfig, Runner, function_tool
from agents.testing import ModelStep, ScriptedModel, assistant_message, function_call
from langchain_core.callbacks import BaseCallbackHandler
from langchain_core.language_models.fake_chat_models import GenericFakeChatModel
from langchain_core.messages import AIMessage, BaseMessage, HumanMessage, ToolMessage
from langchain_core.tools import tool
from pydantic_ai import Agent as PydanticAgent
from pydantic_ai.messages import ModelMessage, ModelResponse, TextPart, ToolCallPart, ToolReturnPart
from pydantic_ai.models.function import AgentInfo, FunctionModel

from jsonbudget import SpillStore, TurnBudget
from jsonbudget.integrations.langchain import TurnBudgetCallback, budget_tool
from jsonbudget.integrations.openai_agents import TurnBudgetHooks, budget_tools
from jsonbudget.integrations.pydantic_ai import TurnBudgetCapability

TURN = 10_000
CALLS = 6


def search_rows(q: str) -> list[dict[str, Any]]:
    return [{"q": q, "row": i, "text": "lorem ipsum " * 4} for i in range(45)]


@pytest.fixture
def turn(tmp_path: Path) -> TurnBudget:
    return TurnBudget(max_bytes=TURN, store=SpillStore(tmp_path / "spill"))


def check_turn(outputs: list[str], turn: TurnBudget, reports: list[Any]) -> None:
    """What reached the model fits the turn, every answer is JSON, nothing is lost."""
    assert len(outputs) == CALLS
    assert sum(len(o.encode()) for o in outputs) <= TURN
    spilled = 0
    for out in outputs:
        doc = orjson.loads(out)
        if isinstance(doc, dict) and "spilled" in doc:
            spilled += 1
            ref = doc["spilled"]["ref"]
            whole = orjson.loads(turn.gate.store.read(ref, 0, 10**7))
            assert whole == search_rows(whole[0]["q"])
        else:
            assert doc == search_rows(doc[0]["q"])
    assert spilled >= 1  # six ~3.9 KB results cannot all fit 10,000 bytes
    (report,) = reports
    assert len(report.results) == CALLS
    assert report.used_bytes <= TURN
    assert not report.over_budget


# --- OpenAI Agents SDK --------------------------------------------------------------------


async def test_openai_agents_parallel_calls_stay_within_the_turn(turn: TurnBudget) -> None:
    @function_tool
    async def search(q: str) -> str:
        """Search."""
        await asyncio.sleep(0)
        return orjson.dumps(search_rows(q)).decode()

    model = ScriptedModel([
        ModelStep(output=[function_call("search", {"q": f"q{i}"}, call_id=f"c{i}")
                          for i in range(CALLS)]),
        ModelStep(output=[assistant_message("done")]),
    ])  # fmt: skip
    hooks = TurnBudgetHooks(turn)
    agent = Agent(name="searcher", model=model, tools=budget_tools([search], turn))
    # No tracing: it would try to export the spans to the provider.
    config = RunConfig(tracing_disabled=True)
    result = await Runner.run(agent, "find everything", hooks=hooks, run_config=config)
    assert result.final_output == "done"
    second = model.calls[1].input
    outputs = [item["output"] for item in second if item.get("type") == "function_call_output"]
    hooks.reports.append(turn.reset())  # the run ended after the last model call
    check_turn(outputs, turn, [r for r in hooks.reports if r.results])


# --- pydantic-ai --------------------------------------------------------------------------


def test_pydantic_ai_parallel_calls_stay_within_the_turn(turn: TurnBudget) -> None:
    seen: list[list[ModelMessage]] = []

    def model(messages: list[ModelMessage], info: AgentInfo) -> ModelResponse:
        seen.append(list(messages))
        if len(seen) == 1:
            return ModelResponse(parts=[ToolCallPart("search", {"q": f"q{i}"}, tool_call_id=f"c{i}")
                                        for i in range(CALLS)])  # fmt: skip
        return ModelResponse(parts=[TextPart("done")])

    capability = TurnBudgetCapability(turn)
    agent = PydanticAgent(FunctionModel(model), capabilities=[capability])

    @agent.tool_plain
    async def search(q: str) -> list[dict[str, Any]]:
        """Search."""
        return search_rows(q)

    assert agent.run_sync("find everything").output == "done"
    returns = [p for p in seen[1][-1].parts if isinstance(p, ToolReturnPart)]
    outputs = [p.model_response_str() for p in returns]
    check_turn(outputs, turn, capability.reports)


# --- LangChain ----------------------------------------------------------------------------


async def test_langchain_parallel_calls_stay_within_the_turn(turn: TurnBudget) -> None:
    @tool
    async def search(q: str) -> list[dict[str, Any]]:
        """Search."""
        return search_rows(q)

    class Recorder(BaseCallbackHandler):
        def __init__(self) -> None:
            self.seen: list[list[BaseMessage]] = []

        def on_chat_model_start(self, serialized: Any, messages: Any, **kwargs: Any) -> None:
            self.seen.append(list(messages[0]))

    calls = [{"name": "search", "args": {"q": f"q{i}"}, "id": f"c{i}"} for i in range(CALLS)]
    model = GenericFakeChatModel(
        messages=iter([AIMessage("", tool_calls=calls), AIMessage("done")])
    )
    recorder = Recorder()
    budget = TurnBudgetCallback(turn)
    config: Any = {"callbacks": [budget, recorder]}
    bounded = budget_tool(search, turn)
    messages: list[BaseMessage] = [HumanMessage("find everything")]
    first = await model.ainvoke(messages, config=config)
    messages.append(first)
    assert isinstance(first, AIMessage)
    results = await asyncio.gather(*(bounded.ainvoke(call) for call in first.tool_calls))
    messages.extend(results)
    assert (await model.ainvoke(messages, config=config)).content == "done"
    received = [m for m in recorder.seen[1] if isinstance(m, ToolMessage)]
    check_turn([str(m.content) for m in received], turn, budget.reports)
    assert bounded.name == "search"
    assert set(bounded.args) == {"q"}

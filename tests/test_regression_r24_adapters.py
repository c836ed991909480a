"""r24: what the agent adapters hold for a long-running worker, and a Redis store's
message for an asyncio client.

Each adapter kept every ended turn's report, its results' admitted bytes in it, for as
long as the agent lived: 1,000 pydantic-ai runs held 1,050 reports and 6.1 MB. And a
``redis.asyncio`` client given to a Redis store was refused as "a redis.Redis client,
not Redis".
"""

from __future__ import annotations

import itertools
from collections.abc import Callable
from pathlib import Path
from typing import Any

import pytest
import redis.asyncio
from agents import Agent, RunConfig, Runner, function_tool
from agents.testing import ModelStep, ScriptedModel, assistant_message, function_call
from langchain_core.language_models.fake_chat_models import GenericFakeChatModel
from langchain_core.messages import AIMessage, BaseMessage, HumanMessage
from langchain_core.runnables import RunnableConfig, RunnableLambda
from langchain_core.tools import tool
from pydantic_ai import Agent as PydanticAgent
from pydantic_ai.models.test import TestModel

from jsonbudget import LimitError, SpillStore, TurnBudget, TurnReport
from jsonbudget._agents.redis_spill import RedisSpillStore
from jsonbudget._cursors.redis_store import RedisCursorStore
from jsonbudget.integrations.langchain import TurnBudgetCallback, budget_tool
from jsonbudget.integrations.openai_agents import TurnBudgetHooks, budget_tools
from jsonbudget.integrations.pydantic_ai import TurnBudgetCapability

TURN = 10_000
KEEP = 4
RUNS = 3 * KEEP


@pytest.fixture
def turn(tmp_path: Path) -> TurnBudget:
    return TurnBudget(max_bytes=TURN, store=SpillStore(tmp_path / "spill"))


def rows(run: int) -> str:
    """A run's tool result: 1.8 KB whatever the run, naming it."""
    return "".join(f'{{"run":"{run:04d}","row":{i},"text":"lorem ipsum"}}' for i in range(40))


def held(reports: list[TurnReport]) -> int:
    """The result bytes *reports* hold."""
    return sum(len(admitted.data) for report in reports for admitted in report.results)


def runs_of(reports: list[TurnReport]) -> list[int]:
    """The run each report's one result came from."""
    return [int(r.results[0].data.split(b'"run":"')[1][:4]) for r in reports]


def check_kept(reports: list[TurnReport], shipped: list[TurnReport]) -> None:
    """After RUNS runs: every report was shipped, in order; only the KEEP newest kept."""
    assert runs_of(shipped) == list(range(RUNS))
    assert len(reports) == KEEP
    assert reports == shipped[-KEEP:]
    assert held(reports) == KEEP * len(rows(0))


# --- 1. reports kept without a limit ------------------------------------------------------


def test_regression_pydantic_ai_reports_keep_the_newest_turns(turn: TurnBudget) -> None:
    counter = itertools.count()
    shipped: list[TurnReport] = []
    capability = TurnBudgetCapability(turn, max_reports=KEEP, on_report=shipped.append)
    agent = PydanticAgent(TestModel(), capabilities=[capability])

    @agent.tool_plain
    def search() -> str:
        """Search."""
        return rows(next(counter))

    sizes = []
    for _ in range(RUNS):
        agent.run_sync("find")
        sizes.append((len(capability.reports), held(capability.reports)))
    check_kept(capability.reports, shipped)
    # Held no more once KEEP runs are kept, however many follow.
    assert sizes[KEEP - 1 :] == [(KEEP, KEEP * len(rows(0)))] * (RUNS - KEEP + 1)


def test_regression_pydantic_ai_reports_default_to_the_newest_100(turn: TurnBudget) -> None:
    capability = TurnBudgetCapability(turn)
    agent = PydanticAgent(TestModel(), capabilities=[capability])

    @agent.tool_plain
    def search() -> str:
        """Search."""
        return rows(0)

    for _ in range(130):
        agent.run_sync("find")
    assert len(capability.reports) == 100
    assert capability.max_reports == 100


async def test_regression_openai_agents_reports_keep_the_newest_turns(turn: TurnBudget) -> None:
    counter = itertools.count()
    shipped: list[TurnReport] = []

    @function_tool
    def search(q: str) -> str:
        """Search."""
        return rows(next(counter))

    steps = []
    for i in range(RUNS):
        steps.append(ModelStep(output=[function_call("search", {"q": "a"}, call_id=f"c{i}")]))
        steps.append(ModelStep(output=[assistant_message("done")]))
    model = ScriptedModel(steps)
    hooks = TurnBudgetHooks(turn, max_reports=KEEP, on_report=shipped.append)
    agent = Agent(name="searcher", model=model, tools=budget_tools([search], turn))
    config = RunConfig(tracing_disabled=True)
    for _ in range(RUNS):
        result = await Runner.run(agent, "find", hooks=hooks, run_config=config)
        assert result.final_output == "done"
        assert len(hooks.reports) <= KEEP
    check_kept(hooks.reports, shipped)


def test_regression_langchain_reports_keep_the_newest_turns(turn: TurnBudget) -> None:
    counter = itertools.count()
    shipped: list[TurnReport] = []

    @tool
    def search(q: str) -> str:
        """Search."""
        return rows(next(counter))

    bounded = budget_tool(search, turn)
    call = {"name": "search", "args": {"q": "a"}, "id": "c1", "type": "tool_call"}
    model = GenericFakeChatModel(
        messages=iter([AIMessage("", tool_calls=[call]), AIMessage("done")] * RUNS)
    )

    def loop(question: str, config: RunnableConfig) -> str:
        messages: list[BaseMessage] = [HumanMessage(question)]
        first = model.invoke(messages, config=config)
        assert isinstance(first, AIMessage)
        results = [bounded.invoke({**c, "type": "tool_call"}, config=config)
                   for c in first.tool_calls]  # fmt: skip
        return str(model.invoke([*messages, first, *results], config=config).content)

    budget = TurnBudgetCallback(turn, max_reports=KEEP, on_report=shipped.append)
    agent = RunnableLambda(loop)
    for _ in range(RUNS):
        assert agent.invoke("find", config={"callbacks": [budget]}) == "done"
        assert len(budget.reports) <= KEEP
    check_kept(budget.reports, shipped)


def test_regression_pydantic_ai_max_reports_0_keeps_none_and_ships_all(
    turn: TurnBudget,
) -> None:
    shipped: list[TurnReport] = []
    capability = TurnBudgetCapability(turn, max_reports=0, on_report=shipped.append)
    agent = PydanticAgent(TestModel(), capabilities=[capability])

    @agent.tool_plain
    def search() -> str:
        """Search."""
        return rows(0)

    for _ in range(3):
        agent.run_sync("find")
    assert capability.reports == []
    assert len(shipped) == 3


ADAPTERS: list[Callable[..., Any]] = [TurnBudgetCapability, TurnBudgetHooks, TurnBudgetCallback]


@pytest.mark.parametrize("adapter", ADAPTERS, ids=lambda a: a.__name__)
@pytest.mark.parametrize("bad", [-1, "5", True, 2.0, 2**40 + 1])
def test_regression_adapters_refuse_a_bad_max_reports(
    turn: TurnBudget, adapter: Callable[..., Any], bad: Any
) -> None:
    with pytest.raises(LimitError, match="max_reports"):
        adapter(turn, max_reports=bad)


@pytest.mark.parametrize("adapter", ADAPTERS, ids=lambda a: a.__name__)
def test_regression_adapters_refuse_an_on_report_not_callable(
    turn: TurnBudget, adapter: Callable[..., Any]
) -> None:
    with pytest.raises(TypeError, match="on_report must be callable or None, not list"):
        adapter(turn, on_report=[])


# --- 2. an asyncio client's message -------------------------------------------------------


@pytest.mark.parametrize(
    ("store", "wanted"),
    [(RedisCursorStore, "redis.Redis or redis.RedisCluster"), (RedisSpillStore, "redis.Redis")],
    ids=["cursors", "spill"],
)
def test_regression_redis_stores_name_the_asyncio_client(
    store: Callable[..., Any], wanted: str
) -> None:
    client = redis.asyncio.Redis()  # not connected: refused before any command
    message = (
        f"url_or_client must be a redis URL or a sync {wanted} client, not the asyncio "
        "client redis.asyncio.Redis (the store calls Redis synchronously)"
    )
    with pytest.raises(TypeError) as caught:
        store(client)
    assert str(caught.value) == message

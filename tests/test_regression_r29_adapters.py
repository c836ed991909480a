"""r29: cancellation in the adapters.

An OpenAI Agents SDK call that timed out while its output was being admitted was counted
twice: the cancelled `TurnBudget.aadmit` went on in its thread and kept its bytes and its
call slot, and the SDK's timeout answer was admitted as well (three results for two
calls, the turn past its limit). LangChain's `TurnBudgetCallback` kept, for good, the
runs whose start it saw after their task was cancelled.
"""

from __future__ import annotations

import asyncio
import threading
from collections.abc import AsyncIterator
from pathlib import Path
from typing import Any

import pytest
from agents import Agent, RunConfig, RunContextWrapper, Runner, function_tool
from agents.testing import ModelStep, ScriptedModel, assistant_message, function_call
from langchain_core.callbacks import BaseCallbackHandler
from langchain_core.language_models.fake_chat_models import GenericFakeChatModel
from langchain_core.messages import AIMessage, HumanMessage
from langchain_core.runnables import RunnableLambda

from jsonbudget import SpillStore, TurnBudget
from jsonbudget.integrations._results import atool_result
from jsonbudget.integrations.langchain import TurnBudgetCallback
from jsonbudget.integrations.openai_agents import TurnBudgetHooks, budget_tools
from tests.held_store import WAIT, HeldStore, settled


async def _rows() -> AsyncIterator[dict[str, str]]:
    for i in range(10):
        yield {"row": str(i), "text": "r" * 300}


@pytest.mark.parametrize("kind", ["value", "async_iterator"])
async def test_regression_a_cancelled_aadmit_counts_nothing_once_its_thread_ends(
    tmp_path: Path, kind: str
) -> None:
    store = HeldStore(tmp_path / "spill")
    turn = TurnBudget(max_bytes=2000, max_calls=2, store=store)
    fresh = turn.remaining
    result: Any = "x" * 5000 if kind == "value" else await atool_result(_rows(), turn)
    call = asyncio.ensure_future(turn.aadmit(result, tool="big"))
    # Every item read (an async iterator's too): the spill is all that is left.
    assert await asyncio.to_thread(store.writing.wait, WAIT)
    call.cancel()
    with pytest.raises(asyncio.CancelledError):
        await call
    store.release.set()
    await settled(turn, 0)
    report = turn.report()
    assert (report.used_bytes, report.results, turn.remaining) == (0, (), fresh)


async def test_regression_an_openai_agents_timeout_during_admission_counts_once(
    tmp_path: Path,
) -> None:
    store = HeldStore(tmp_path / "spill")
    turn = TurnBudget(max_bytes=1200, max_calls=2, store=store)
    timed_out = asyncio.Event()
    answer = "the search timed out; " + "please retry later " * 6

    def on_timeout(ctx: RunContextWrapper[Any], error: Exception) -> str:
        timed_out.set()
        return answer

    @function_tool(timeout=0.1, timeout_error_function=on_timeout)
    async def big(q: str) -> str:
        """big"""
        return "x" * 5000  # spilled: the write waits, and the SDK's timeout fires

    @function_tool
    async def late(ctx: RunContextWrapper[Any], q: str) -> str:
        """late"""
        await asyncio.wait_for(timed_out.wait(), WAIT)
        store.release.set()
        # The timed-out admission's thread ends before this result is admitted.
        await settled(turn.run_turn(ctx.usage), len(answer))
        return "y" * 300

    model = ScriptedModel(
        [
            ModelStep(
                output=[
                    function_call("big", {"q": "a"}, call_id="c0"),
                    function_call("late", {"q": "a"}, call_id="c1"),
                ]
            ),
            ModelStep(output=[assistant_message("done")]),
        ]
    )
    hooks = TurnBudgetHooks(turn)
    agent = Agent(name="a", model=model, tools=budget_tools([big, late], turn))
    await Runner.run(agent, "go", hooks=hooks, run_config=RunConfig(tracing_disabled=True))
    sent = [item["output"] for item in model.calls[1].input
            if item.get("type") == "function_call_output"]  # fmt: skip
    assert sent == [answer, "y" * 300]
    (report,) = hooks.reports
    assert [(r.tool, r.reason, r.text) for r in report.results] == [
        ("big", "fits", answer),
        ("late", "fits", "y" * 300),
    ]
    assert report.used_bytes == sum(len(s.encode()) for s in sent)
    assert not report.over_budget


class _HeldStart(BaseCallbackHandler):
    """Another handler of the run, whose model start waits until released: a run
    cancelled there has had its start reported to `TurnBudgetCallback`, and no end."""

    def __init__(self) -> None:
        self.starting = threading.Event()
        self.release = threading.Event()

    def on_chat_model_start(self, serialized: Any, messages: Any, **kwargs: Any) -> None:
        self.starting.set()
        assert self.release.wait(WAIT)


async def test_regression_langchain_callback_keeps_no_run_a_cancellation_left_unended(
    tmp_path: Path,
) -> None:
    turn = TurnBudget(max_bytes=6000, store=SpillStore(tmp_path / "spill"))
    callback = TurnBudgetCallback(turn)

    async def body(_: str) -> Any:
        model = GenericFakeChatModel(messages=iter([AIMessage("done")]))
        return await model.ainvoke([HumanMessage("x")])

    chain = RunnableLambda(body)
    for _ in range(5):
        held = _HeldStart()
        run = asyncio.ensure_future(chain.ainvoke("x", config={"callbacks": [callback, held]}))
        assert await asyncio.to_thread(held.starting.wait, WAIT)
        for _ in range(500):  # the chain's and the model's starts reported to the handler
            if len(callback._runs) == 2:
                break
            await asyncio.sleep(0.01)
        run.cancel()
        with pytest.raises(asyncio.CancelledError):
            await run
        held.release.set()
        await asyncio.sleep(0)
    assert len(callback._runs) == 0
    # A run that is not cancelled still has a turn of its own, ended with it.
    done = await chain.ainvoke("x", config={"callbacks": [callback]})
    assert done.content == "done"
    assert (len(callback._runs), len(callback._turns)) == (0, 0)
    # This task, still running, is known to the handler once, with no run of its own left.
    assert list(callback._started.values()) == [set()]

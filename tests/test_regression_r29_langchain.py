"""r29: a LangChain tool call cancelled while its output was admitted still counted it.

`budget_tool`'s async path admitted the output with `TurnBudget.admit` in a worker
thread of its own: cancelled (a timeout around the tool, the agent's cancellation), the
call's thread went on and its answer, which no one received, kept its bytes and its call
slot in the turn. It now admits through `TurnBudget.aadmit`, which gives back what a
cancelled call admitted.
"""

from __future__ import annotations

import asyncio
from pathlib import Path
from typing import Any

import pytest
from langchain_core.messages import ToolMessage
from langchain_core.tools import tool

from jsonbudget import Admitted, SpillStore, TurnBudget
from jsonbudget.integrations.langchain import _Admit, budget_tool
from tests.held_store import WAIT, HeldStore, settled


@tool
async def text(q: str) -> str:
    """A result too big for the turn: spilled."""
    return "x" * 5000


@tool
async def blocks(q: str) -> list[dict[str, Any]]:
    """Content blocks too big for the turn, admitted as one result: spilled."""
    return [{"type": "text", "text": "b" * 3000}, {"type": "text", "text": "c" * 3000}]


@tool
async def messages(q: str) -> list[ToolMessage]:
    """Two results of one call: the first fits, the second is spilled."""
    return [
        ToolMessage(content="short", tool_call_id="c1", name="messages"),
        ToolMessage(content="M" * 5000, tool_call_id="c2", name="messages"),
    ]


@pytest.mark.parametrize(
    ("wrapped", "kept"),
    [
        (text, []),
        (blocks, []),
        # Admitted before the cancellation, the first message stays counted (see
        # docs/guards.md): the one being admitted when it came counts nothing.
        (messages, ["short"]),
    ],
    ids=["text", "blocks", "messages"],
)
async def test_regression_langchain_a_cancelled_async_call_counts_no_answer_it_lost(
    tmp_path: Path, wrapped: Any, kept: list[str]
) -> None:
    store = HeldStore(tmp_path / "spill")
    turn = TurnBudget(max_bytes=2000, max_calls=2, store=store)
    fresh = turn.remaining
    bounded = budget_tool(wrapped, turn)
    call: Any = {"name": wrapped.name, "args": {"q": "x"}, "id": "c1", "type": "tool_call"}
    running = asyncio.ensure_future(bounded.ainvoke(call))
    # The output is being spilled: its admission is under way, its room reserved.
    assert await asyncio.to_thread(store.writing.wait, WAIT)
    running.cancel()
    with pytest.raises(asyncio.CancelledError):
        await running
    store.release.set()
    used = sum(len(k) for k in kept)
    await settled(turn, used)
    report = turn.report()
    assert ([r.text for r in report.results], report.used_bytes) == (kept, used)
    if not kept:
        assert turn.remaining == fresh  # its call slot given back too
    # Not cancelled, the same call is admitted, each of its results counted once.
    await bounded.ainvoke(call)
    report = turn.report()
    assert [r.text for r in report.results[: 2 * len(kept)]] == kept * 2
    (spilled,) = report.results[2 * len(kept) :]
    assert spilled.spill is not None
    assert report.used_bytes == 2 * used + spilled.admitted_bytes


def test_regression_langchain_cancelled_after_its_admission_still_answers(tmp_path: Path) -> None:
    """Found by a sweep: after `aadmit` answered, the output was built in a worker
    thread, an await at which a timeout lost the answer the turn had counted."""

    class CancelledAfterAdmission(TurnBudget):
        async def aadmit(self, result: Any, *, tool: str = "result") -> Admitted:
            answer = await super().aadmit(result, tool=tool)
            task = asyncio.current_task()
            assert task is not None
            task.cancel()  # a timeout firing just after the admission
            return answer

    turn = CancelledAfterAdmission(max_bytes=8000, store=SpillStore(tmp_path / "spill"))
    got: list[Any] = []

    async def call() -> None:
        got.append(await _Admit(turn, "t").aoutput("hello"))

    with pytest.raises(asyncio.CancelledError):
        asyncio.run(call())
    # the answer counted is the answer given (the cancellation lands at the next await)
    assert got == ["hello"]
    assert turn.report().used_bytes == len("hello")

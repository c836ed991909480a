"""r29: a LangChain tool call cancelled while its output was admitted still counted it.

`budget_tool`'s async path admitted the output with `TurnBudget.admit` in a worker
thread of its own: cancelled (a timeout around the tool, the agent's cancellation), the
call's thread went on and its answer, which no one received, kept its bytes and its call
slot in the turn. It now admits through `TurnBudget.aadmit`, which gives back what a
cancelled call admitted.
"""

from __future__ import annotations

import asyncio
import threading
from collections.abc import Iterable
from pathlib import Path
from typing import Any

import pytest
from langchain_core.messages import ToolMessage
from langchain_core.tools import tool

from jsonbudget import SpillRef, SpillStore, TurnBudget
from jsonbudget.integrations.langchain import budget_tool

WAIT = 30.0


class _HeldStore(SpillStore):
    """A spill store whose writes wait until released: a spill still under way when its
    call is cancelled."""

    def __init__(self, directory: Path) -> None:
        super().__init__(directory)
        self.writing = threading.Event()
        self.release = threading.Event()

    def put(self, data: Any, *, label: str, media_type: str = "application/json") -> SpillRef:
        if not isinstance(data, bytes | bytearray | memoryview):
            chunks: Iterable[Any] = data
            data = b"".join(bytes(chunk) for chunk in chunks)
        self.writing.set()
        assert self.release.wait(WAIT)
        return super().put(data, label=label, media_type=media_type)


async def _settled(turn: TurnBudget, used: int) -> None:
    """Until *turn* has *used* bytes (a cancelled call's thread has ended), or a while."""
    for _ in range(500):
        if turn.report().used_bytes == used:
            return
        await asyncio.sleep(0.01)


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
    store = _HeldStore(tmp_path / "spill")
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
    await _settled(turn, used)
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

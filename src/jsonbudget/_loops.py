"""Which event loop a coroutine of ours runs under, and how a blocking call leaves it.

The async twins (`Paginator.apaginate`, `ResultGate.agate`, `TurnBudget.aadmit`) move
what may wait on I/O (a spill, a cursor store's round trip) off the loop's thread. Under
asyncio that is `asyncio.to_thread`; trio has no asyncio loop (`asyncio.to_thread` raises
"no running event loop" there, through anyio or not) and its own worker threads,
`trio.to_thread.run_sync`, which also copies the context. Under any other loop the call
runs where it is awaited.
"""

from __future__ import annotations

import asyncio
import sys
from collections.abc import Callable
from typing import Literal, TypeVar

__all__ = ["off_loop", "running_loop"]

_T = TypeVar("_T")


def running_loop() -> Literal["asyncio", "trio"] | None:
    """The event loop this coroutine runs under: asyncio's, trio's, or None for another.

    trio first: run as a guest of an asyncio loop (`trio.lowlevel.start_guest_run`), a
    trio task also sees that host loop as running, but only trio's awaitables work there.
    """
    trio = sys.modules.get("trio")  # never imported here: a trio loop has imported it
    if trio is not None:
        try:
            trio.lowlevel.current_trio_token()
        except RuntimeError:
            pass  # not in a trio run
        else:
            return "trio"
    try:
        asyncio.get_running_loop()
    except RuntimeError:
        return None
    return "asyncio"


async def off_loop(call: Callable[[], _T]) -> _T:
    """*call*'s result, computed in a worker thread of the running loop (see the module).

    Cancelled under asyncio, the thread goes on to its end and its result goes to no
    one; under trio the cancellation waits for the thread, then is raised.
    """
    loop = running_loop()
    if loop == "asyncio":
        return await asyncio.to_thread(call)
    if loop == "trio":
        trio = sys.modules["trio"]  # imported: its loop runs
        result: _T = await trio.to_thread.run_sync(call)
        return result
    return call()

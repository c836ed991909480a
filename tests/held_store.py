"""A spill store whose writes wait until the test releases them, and a wait for a turn's
count to settle: for tests that cancel a call while its spill is under way (counting
results and bytes, never timing anything)."""

from __future__ import annotations

import asyncio
import threading
from collections.abc import Iterable
from pathlib import Path
from typing import Any

from jsonbudget import SpillRef, SpillStore, TurnBudget

#: How long (seconds) a held write waits to be released before the test fails.
WAIT = 30.0


class HeldStore(SpillStore):
    """A spill store whose writes wait until released, the whole result read first: a
    spill still under way when its call is cancelled."""

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


async def settled(turn: TurnBudget, used: int) -> None:
    """Until *turn* has *used* bytes (a cancelled call's thread has ended), or a while."""
    for _ in range(500):
        if turn.report().used_bytes == used:
            return
        await asyncio.sleep(0.01)

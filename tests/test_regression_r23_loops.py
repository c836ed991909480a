"""r23: the async guards under trio, whose loop is not asyncio's.

`ResultGate.agate` and `TurnBudget.aadmit` called `asyncio.to_thread`, which raises
"no running event loop" under trio (through anyio or not): every call failed there.
"""

from __future__ import annotations

import threading
from collections.abc import Iterator
from pathlib import Path

import trio

from jsonbudget import Admitted, GateResult, ResultGate, SpillStore, TurnBudget


def _rows(seen: list[int]) -> Iterator[bytes]:
    seen.append(threading.get_ident())  # the thread that reads the result
    yield b"["
    for i in range(1000):
        yield b'%s{"i":%d}' % (b"," if i else b"", i)
    yield b"]"


def test_regression_agate_runs_under_trio_in_a_worker_thread(tmp_path: Path) -> None:
    gate = ResultGate(max_bytes=1_000, store=SpillStore(tmp_path / "spill"))
    seen: list[int] = []

    async def main() -> tuple[int, GateResult]:
        small = await gate.agate({"a": 1})
        assert small.data == b'{"a":1}'
        big = await gate.agate(_rows(seen), label="rows")
        return threading.get_ident(), big

    loop_thread, big = trio.run(main)
    assert big.spill is not None
    assert big.spill.size > 4_000
    assert len(big.data) <= 1_000
    assert seen
    assert seen[0] != loop_thread


def test_regression_aadmit_runs_under_trio_and_counts(tmp_path: Path) -> None:
    turn = TurnBudget(max_bytes=4_000, store=SpillStore(tmp_path / "spill"))
    seen: list[int] = []

    async def main() -> list[Admitted]:
        return [await turn.aadmit({"a": 1}, tool="small"), await turn.aadmit(_rows(seen))]

    small, big = trio.run(main)
    assert small.data == b'{"a":1}'
    assert small.reason == "fits"
    assert big.reason == "result_limit"
    assert big.spill is not None
    assert [r.tool for r in turn.report().results] == ["small", "result"]
    assert seen

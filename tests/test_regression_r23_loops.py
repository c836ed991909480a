"""r23: the async guards under trio, whose loop is not asyncio's.

`ResultGate.agate` and `TurnBudget.aadmit` called `asyncio.to_thread`, which raises
"no running event loop" under trio (through anyio or not): every call failed there.
"""

from __future__ import annotations

import threading
from collections.abc import AsyncGenerator, Iterator
from pathlib import Path

import pytest
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


def test_regression_agate_and_aadmit_run_under_trio_as_a_guest_of_asyncio(
    tmp_path: Path,
) -> None:
    # A trio task run as a guest of an asyncio loop also sees that loop as running:
    # asyncio.to_thread was taken there, and trio refused its Future ("unrecognized
    # yield message") after the spill was written and counted.
    import asyncio

    turn = TurnBudget(max_bytes=4_000, store=SpillStore(tmp_path / "spill"))
    got: list[Admitted] = []

    async def trio_main() -> None:
        got.append(await turn.aadmit(_rows([]), tool="search"))

    async def host() -> None:
        loop = asyncio.get_running_loop()
        done: asyncio.Future[object] = loop.create_future()
        trio.lowlevel.start_guest_run(
            trio_main,
            run_sync_soon_threadsafe=loop.call_soon_threadsafe,
            done_callback=done.set_result,
        )
        outcome = await done
        outcome.unwrap()  # type: ignore[attr-defined]  # trio's Outcome: raises what it raised

    asyncio.run(host())
    assert len(got) == 1
    assert got[0].reason == "result_limit"
    assert got[0].spill is not None
    assert [r.tool for r in turn.report().results] == ["search"]


def test_regression_an_async_iterable_result_is_refused_not_lost(tmp_path: Path) -> None:
    # It became one "…[unencodable: async_generator]" marker, every item lost and the
    # generator never closed; bounded_tool refused the same value.
    async def rows() -> AsyncGenerator[dict[str, int], None]:
        for i in range(3):
            yield {"i": i}

    gate = ResultGate(max_bytes=1_000, store=SpillStore(tmp_path / "spill"))
    turn = TurnBudget(max_bytes=4_000, store=SpillStore(tmp_path / "spill"))

    async def main() -> None:
        for call in (gate.agate, turn.aadmit):
            agen = rows()
            with pytest.raises(TypeError, match="async iterable"):
                await call(agen)
            await agen.aclose()

    trio.run(main)
    with pytest.raises(TypeError, match="async iterable"):
        gate.gate(rows())
    assert turn.report().results == ()  # the refused call counts nothing

"""Timing helpers shared by the ratio modules: interleaved rounds, medians, peak memory.

A measure and its reference run in the same round, one after the other, in an order that
alternates between rounds; the reported figure is the median over rounds. On a shared
2-core machine that cancels most of the drift a separate run of each would pick up.
"""

from __future__ import annotations

import gc
import statistics
import time
import tracemalloc
from collections.abc import Callable, Mapping
from typing import Any

__all__ = ["Row", "Timings", "calibrate", "interleaved", "peak_bytes"]

#: ``(measure, value, unit, target)``: the row every ratio module returns.
Row = tuple[str, float, str, str]


class Timings:
    """Per-call seconds of each contestant, one entry per round."""

    __slots__ = ("rounds",)

    def __init__(self, names: list[str]) -> None:
        self.rounds: dict[str, list[float]] = {name: [] for name in names}

    def median(self, name: str) -> float:
        """Median per-call seconds over rounds."""
        return statistics.median(self.rounds[name])

    def ratio(self, name: str, reference: str) -> float:
        """Median over rounds of ``time(name) / time(reference)``, each pair from one round."""
        pairs = zip(self.rounds[name], self.rounds[reference], strict=True)
        return statistics.median(a / b for a, b in pairs)


def calibrate(fn: Callable[[], Any], *, target_s: float, cap: int = 1_000_000) -> int:
    """How many calls of *fn* take about *target_s* seconds (at least one)."""
    fn()
    n = 1
    while n < cap:
        t0 = time.perf_counter_ns()
        for _ in range(n):
            fn()
        elapsed = (time.perf_counter_ns() - t0) / 1e9
        if elapsed >= target_s / 4:
            return max(1, min(cap, int(n * target_s / max(elapsed, 1e-9))))
        n *= 4
    return cap


def interleaved(
    fns: Mapping[str, Callable[[], Any]],
    *,
    rounds: int,
    inner: Mapping[str, int] | int = 1,
    warmup: int = 1,
    setup: Callable[[int], None] | None = None,
) -> Timings:
    """Run every function in each round (order alternating), *inner* calls per round.

    Garbage is collected before each contestant's turn, so one's garbage is not
    collected on the other's clock; the collector stays on, as in real use. With
    *setup*, each call is timed alone after an untimed ``setup(n)`` (e.g. to make a cold
    input; *n* counts all calls), and the round's figure is the median of its calls.
    """
    names = list(fns)
    counts = {name: inner if isinstance(inner, int) else inner[name] for name in names}
    calls = 0
    for name in names:
        for _ in range(warmup):
            if setup is not None:
                setup(calls)
                calls += 1
            fns[name]()
    out = Timings(names)
    clock = time.perf_counter_ns
    for r in range(rounds):
        order = names if r % 2 == 0 else names[::-1]
        for name in order:
            fn, n = fns[name], counts[name]
            gc.collect()
            if setup is None:
                t0 = clock()
                for _ in range(n):
                    fn()
                out.rounds[name].append((clock() - t0) / 1e9 / n)
                continue
            each = []
            for _ in range(n):
                setup(calls)
                calls += 1
                t0 = clock()
                fn()
                each.append((clock() - t0) / 1e9)
            out.rounds[name].append(statistics.median(each))
    return out


def peak_bytes(fn: Callable[[], Any]) -> tuple[int, Any]:
    """Peak bytes allocated (tracemalloc) while *fn* runs, above what existed before.

    Returns the peak and *fn*'s result; the result is kept alive by the caller, so its
    own size counts: the peak includes the output.
    """
    gc.collect()
    tracemalloc.start()
    try:
        base, _ = tracemalloc.get_traced_memory()
        result = fn()
        _, peak = tracemalloc.get_traced_memory()
    finally:
        tracemalloc.stop()
    return peak - base, result

"""Guard and reader measures against the issues' targets.

``run()`` returns rows ``(measure, value, unit, target)``. The headline measure pushes a
1 GB result (generated lazily, 1 MiB chunks of JSON rows) through `ResultGate` and
reports its peak extra memory (tracemalloc) next to the preview size. Set
``JSONBUDGET_BENCH_GATE_BYTES`` to use another size. Spill files go to a temp dir.
"""

from __future__ import annotations

import gc
import io
import os
import tempfile
import time
import tracemalloc
import zlib
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

import orjson
from benches._timing import calibrate, interleaved

from jsonbudget import (
    ResultGate,
    SpillStore,
    TurnBudget,
    bounded_tool,
    gate_result,
    read_bounded_text,
)
from jsonbudget._encode.bound import BOUNDED_SCALARS, clean_dumps

ROUNDS = 7
MIB = 1024 * 1024
ROW = orjson.dumps({"id": 123456, "name": "a row", "body": "lorem ipsum " * 8}) + b","


BODY = ROW * (MIB // len(ROW))
FIRST = b"[" + BODY


def _json_chunks(total: int) -> Iterator[bytes]:
    """*total* bytes of one JSON array, in 1 MiB chunks made once and yielded again."""
    body, first = BODY, FIRST
    sent = 0
    yield first
    sent += len(first)
    while sent + len(body) < total:
        yield body
        sent += len(body)
    yield ROW[:-1] + b"]"


def _median_us(fn: Callable[[], Any], n: int) -> float:
    rounds = []
    for _ in range(ROUNDS):
        t0 = time.perf_counter()
        for _ in range(n):
            fn()
        rounds.append((time.perf_counter() - t0) / n * 1e6)
    return sorted(rounds)[len(rounds) // 2]


def gate_big_result(total: int, tmp: Path) -> list[tuple[str, float, str, str]]:
    store = SpillStore(tmp / "spill", max_total_bytes=4 * total)
    gate = ResultGate(max_bytes=64 * 1024, store=store, preview_bytes=4096)
    gc.collect()
    tracemalloc.start()
    t0 = time.perf_counter()
    out = gate.gate(_json_chunks(total), label="big")
    elapsed = time.perf_counter() - t0
    _, peak = tracemalloc.get_traced_memory()
    tracemalloc.stop()
    assert out.spill is not None
    assert len(out.data) <= 4096
    orjson.loads(out.data)
    size = out.spill.size
    out.spill.path.unlink()
    return [
        (
            f"ResultGate {size / 1e9:.2f} GB: peak extra memory",
            peak / 1024,
            "KiB",
            "bounded by preview (4 KiB) + limit (64 KiB) + chunks, not the result",
        ),
        ("ResultGate big result: spill throughput", size / elapsed / 1e6, "MB/s", "(info)"),
    ]


def gate_pass_through(tmp: Path) -> list[tuple[str, float, str, str]]:
    value = {"id": 1, "items": list(range(20)), "name": "small result"}
    gate = ResultGate(max_bytes=64 * 1024, store=SpillStore(tmp / "pass"))
    ref = _median_us(lambda: orjson.dumps(value), 20000)
    ours = _median_us(lambda: gate.gate(value), 20000)
    raw = orjson.dumps(value)
    ours_bytes = _median_us(lambda: gate.gate(raw), 20000)
    return [
        ("gate pass-through (object) / orjson.dumps", ours / ref, "x", "(info)"),
        ("gate pass-through (object)", ours, "us", "(info)"),
        ("gate pass-through (bytes)", ours_bytes, "us", "(info)"),
    ]


def tool_overhead() -> list[tuple[str, float, str, str]]:
    rows = [{"id": i, "name": f"row {i}"} for i in range(50)]

    def plain() -> bytes:
        return orjson.dumps(rows)

    @bounded_tool(max_bytes=64 * 1024, output="bytes")
    def wrapped() -> list[dict[str, Any]]:
        return rows

    ref = _median_us(plain, 5000)
    ours = _median_us(wrapped, 5000)
    return [("bounded_tool (fits) / orjson.dumps", ours / ref, "x", "(info)")]


def turn_admit(tmp: Path) -> list[tuple[str, float, str, str]]:
    turn = TurnBudget(max_bytes=10**9, store=SpillStore(tmp / "turn"))
    value = {"id": 1, "text": "x" * 200}
    return [
        ("TurnBudget.admit (fits)", _median_us(lambda: turn.admit(value), 20000), "us", "(info)")
    ]


def fast_paths(tmp: Path) -> list[tuple[str, float, str, str]]:
    """A 1 KiB result that fits, each guard against ``orjson.dumps`` of it (issue 16)."""
    value = {"id": 1, "rows": [{"i": i, "name": f"row {i}", "ok": True} for i in range(30)]}
    assert 900 <= len(orjson.dumps(value)) <= 1300
    gate = ResultGate(max_bytes=64 * 1024, store=SpillStore(tmp / "fast"))
    # A turn answers a few dozen calls at most (max_calls defaults to 8): each turn here
    # takes 64 results, then a new one starts. The same calls in one turn that keeps
    # 10,000 results are timed too: there the heap grows by each kept 1 KiB result
    # (page faults, about 0.7 us a call on this machine), which orjson's loop does not pay.
    turn = TurnBudget(max_bytes=10**9, store=SpillStore(tmp / "fast-turn"), max_calls=64)
    long_turn = TurnBudget(max_bytes=10**9, store=SpillStore(tmp / "long-turn"), max_calls=1)

    @bounded_tool(max_bytes=64 * 1024)
    def tool() -> dict[str, Any]:
        return value

    admitted = {"turn": 0, "long": 0}  # calls in each one's current turn

    def admit() -> None:
        turn.admit(value)
        admitted["turn"] += 1
        if admitted["turn"] >= 64:
            turn.reset()
            admitted["turn"] = 0

    def admit_long() -> None:
        long_turn.admit(value)
        admitted["long"] += 1
        if admitted["long"] > 10_000:  # keep the turn's list from growing the whole run
            long_turn.reset()
            admitted["long"] = 0

    caps = (64, 2**40, 2**40, 2**40, BOUNDED_SCALARS)
    fns = {
        "orjson": lambda: orjson.dumps(value),
        "floor": lambda: clean_dumps(value, 64 * 1024, 0, caps),
        "gate": lambda: gate.gate(value),
        "gate_result": lambda: gate_result(value, max_bytes=64 * 1024),
        "admit": admit,
        "admit_long": admit_long,
        "tool": tool,
    }
    n = calibrate(fns["orjson"], target_s=0.02)
    t = interleaved(fns, rounds=9, inner=n)
    return [
        (
            "compiled fast path alone, 1 KiB / orjson.dumps",
            t.ratio("floor", "orjson"),
            "x",
            "(ref)",
        ),
        ("ResultGate.gate 1 KiB fits / orjson.dumps", t.ratio("gate", "orjson"), "x", "<= 1.5"),
        ("gate_result 1 KiB fits / orjson.dumps", t.ratio("gate_result", "orjson"), "x", "(info)"),
        ("TurnBudget.admit 1 KiB fits / orjson.dumps", t.ratio("admit", "orjson"), "x", "<= 2"),
        (
            "  the same, one turn keeping 10,000 results",
            t.ratio("admit_long", "orjson"),
            "x",
            "(info)",
        ),
        ("bounded_tool 1 KiB fits (str) / orjson.dumps", t.ratio("tool", "orjson"), "x", "(info)"),
    ]


def reader() -> list[tuple[str, float, str, str]]:
    data = ("héllo wörld, " * 1000).encode() * 500  # about 7 MB
    ref = _median_us(lambda: data.decode("utf-8"), 5)
    ours = _median_us(lambda: read_bounded_text(io.BytesIO(data), len(data)), 5)
    compressor = zlib.compressobj(9, zlib.DEFLATED, 31)
    zeros = bytes(MIB)
    bomb = b"".join(compressor.compress(zeros) for _ in range(1024)) + compressor.flush()
    bomb_us = _median_us(lambda: read_bounded_text(io.BytesIO(bomb), 64 * 1024, gzip=True), 20)
    return [
        ("read_bounded_text 7 MB / bytes.decode", ours / ref, "x", "(info)"),
        ("1 GB gzip bomb, 64 KiB limit", bomb_us / 1000, "ms", "stopped at the limit"),
    ]


def run() -> list[tuple[str, float, str, str]]:
    total = int(os.environ.get("JSONBUDGET_BENCH_GATE_BYTES", str(1024**3)))
    rows: list[tuple[str, float, str, str]] = []
    with tempfile.TemporaryDirectory() as name:
        tmp = Path(name)
        rows += gate_big_result(total, tmp)
        rows += gate_pass_through(tmp)
        rows += tool_overhead()
        rows += turn_admit(tmp)
        rows += fast_paths(tmp)
    rows += reader()
    return rows


if __name__ == "__main__":
    for name, value, unit, target in run():
        print(f"{name:52s} {value:10.2f} {unit:6s} target {target}")

"""Guards and the bounded reader under pytest-benchmark.

Run: ``PYTHONPATH=src python3 -m pytest benches/bench_guards.py --benchmark-only``.
The 1 GB memory measure lives in ``ratios_guards.py`` (tracemalloc, not timing).
"""

from __future__ import annotations

import io
from pathlib import Path
from typing import Any

import orjson

from jsonbudget import ResultGate, SpillStore, TurnBudget, bounded_tool, read_bounded_text

SMALL = {"id": 1, "items": list(range(20)), "name": "small result"}
ROWS = [{"id": i, "name": f"row {i}", "body": "lorem ipsum " * 8} for i in range(20_000)]
TEXT = ("héllo wörld, " * 1000).encode() * 100


def test_orjson_small_reference(benchmark: Any) -> None:
    benchmark(orjson.dumps, SMALL)


def test_gate_small_pass_through(benchmark: Any, tmp_path: Path) -> None:
    gate = ResultGate(max_bytes=64 * 1024, store=SpillStore(tmp_path))
    out = benchmark(gate.gate, SMALL)
    assert out.spill is None


def test_gate_spill_rows(benchmark: Any, tmp_path: Path) -> None:
    gate = ResultGate(max_bytes=64 * 1024, store=SpillStore(tmp_path), preview_bytes=4096)
    out = benchmark(gate.gate, ROWS)
    assert out.spill is not None


def test_orjson_rows_reference(benchmark: Any) -> None:
    benchmark(orjson.dumps, ROWS)


def test_bounded_tool_rows(benchmark: Any) -> None:
    @bounded_tool(max_bytes=64 * 1024, output="bytes")
    def tool() -> list[dict[str, Any]]:
        return ROWS

    assert len(benchmark(tool)) <= 64 * 1024


def test_turn_admit_small(benchmark: Any, tmp_path: Path) -> None:
    turn = TurnBudget(max_bytes=10**9, store=SpillStore(tmp_path))
    benchmark(turn.admit, SMALL)


def test_read_bounded_text_700k(benchmark: Any) -> None:
    out = benchmark(lambda: read_bounded_text(io.BytesIO(TEXT), len(TEXT)))
    assert out.complete


def test_decode_700k_reference(benchmark: Any) -> None:
    benchmark(TEXT.decode, "utf-8")

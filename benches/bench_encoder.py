"""The budgeted encoder under pytest-benchmark, next to orjson on the same inputs.

Run: ``python -m pytest benches/bench_encoder.py --benchmark-only`` (timings), or with
``--benchmark-disable`` as a seconds-long smoke test: every case asserts its output is
within budget and valid JSON. Sizes are small; the issue's targets are checked at full
size by ``benches/ratios.py``.
"""

from __future__ import annotations

import dataclasses
import math
from typing import Any

import orjson
import pytest
from benches import _data

from jsonbudget import Encoder

KIB = 1024
SHAPES = {
    "tool_result": _data.tool_result(200),
    "flat_rows": _data.rows(200, seed=6),
    "nested_document": _data.nested_document(50),
    "log_string": _data.log_text(100_000),
}


@pytest.fixture(scope="module")
def rows() -> list[dict[str, Any]]:
    return _data.rows(5_000)


@pytest.fixture(scope="module")
def multibyte() -> str:
    return _data.multibyte_text(100_000)


def _within(data: bytes, budget: int) -> Any:
    assert len(data) <= budget
    return orjson.loads(data)


@pytest.mark.parametrize("shape", list(SHAPES))
def test_fits_encoder(benchmark: Any, shape: str) -> None:
    obj = SHAPES[shape]
    enc = Encoder(max_bytes=1 << 30)
    out = benchmark(enc.encode, obj)
    assert out.complete
    assert out.data == orjson.dumps(obj)


@pytest.mark.parametrize("shape", list(SHAPES))
def test_fits_orjson_reference(benchmark: Any, shape: str) -> None:
    obj = SHAPES[shape]
    assert orjson.loads(benchmark(orjson.dumps, obj)) == obj


def test_64k_of_rows(benchmark: Any, rows: list[dict[str, Any]]) -> None:
    enc = Encoder(max_bytes=64 * KIB)
    out = benchmark(enc.encode, rows)
    parsed = _within(out.data, 64 * KIB)
    assert not out.complete
    # whole rows first, then the marker that counts the rest
    kept = parsed[:-1]
    assert kept == rows[: len(kept)]
    assert parsed[-1] == f"…[omitted: {len(rows) - len(kept)} more items]"


def test_64k_of_rows_orjson_prefix_reference(benchmark: Any, rows: list[dict[str, Any]]) -> None:
    cut = benchmark(lambda: orjson.dumps(rows)[: 64 * KIB])
    assert len(cut) == 64 * KIB
    with pytest.raises(orjson.JSONDecodeError):
        orjson.loads(cut)  # the reference is not JSON: that is the point


def test_4k_of_multibyte_string_cold(benchmark: Any, multibyte: str) -> None:
    enc = Encoder(max_bytes=4 * KIB)
    calls = iter(range(1 << 30))

    def fresh() -> tuple[tuple[str], dict[str, Any]]:
        return (_data.cold_copy(multibyte, next(calls)),), {}

    out = benchmark.pedantic(enc.encode, setup=fresh, rounds=50)
    text = _within(out.data, 4 * KIB)
    assert isinstance(text, str)
    assert len(out.data) > 4 * KIB - 16  # the budget is used, not wasted
    kept = text[: text.index("…[truncated: ")]
    assert multibyte[1:].startswith(kept[1:])
    assert text.endswith(f"…[truncated: {len(multibyte) - len(kept)} more chars]")


def test_4k_of_multibyte_string_orjson_prefix_reference(benchmark: Any, multibyte: str) -> None:
    calls = iter(range(1 << 30))

    def fresh() -> tuple[tuple[str], dict[str, Any]]:
        return (_data.cold_copy(multibyte, next(calls)),), {}

    cut = benchmark.pedantic(lambda s: orjson.dumps(s)[: 4 * KIB], setup=fresh, rounds=50)
    assert len(cut) == 4 * KIB


@dataclasses.dataclass
class _Node:
    kids: list[Any]


def _tree(depth: int) -> _Node:
    return _Node([_tree(depth - 1), _tree(depth - 1)] if depth else [])


@pytest.mark.parametrize("strategy", ["balanced", "prefix"])
def test_dataclass_tree_into_4k(benchmark: Any, strategy: str) -> None:
    enc = Encoder(max_bytes=4 * KIB, strategy=strategy)  # type: ignore[arg-type]
    out = benchmark(enc.encode, _tree(8))
    parsed = _within(out.data, 4 * KIB)
    assert isinstance(parsed, dict)
    assert not out.complete


def test_shared_nan_tree_into_4k(benchmark: Any) -> None:
    x: Any = [math.nan]
    for _ in range(20):
        x = [x, x]  # 2**20 paths, 21 distinct lists
    enc = Encoder(max_bytes=4 * KIB)
    out = benchmark(enc.encode, x)
    _within(out.data, 4 * KIB)
    assert any(t.kind == "unencodable" for t in out.truncations)


def test_balanced_cut_of_a_nested_document(benchmark: Any) -> None:
    doc = _data.nested_document(400)
    enc = Encoder(max_bytes=16 * KIB)
    out = benchmark(enc.encode, doc)
    parsed = _within(out.data, 16 * KIB)
    assert set(parsed) == {"data"}  # balanced keeps every key it can

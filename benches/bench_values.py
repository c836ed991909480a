"""Native values (pydantic, msgspec) under the encoder, next to their own libraries.

Run: ``python -m pytest benches/bench_values.py --benchmark-only`` (timings), or with
``--benchmark-disable`` as a smoke test (each case asserts its output). The issue's
targets are measured in interleaved rounds by ``python benches/bench_values.py``, which
prints one row per target (the same ``Row`` form the ratio modules return, from `rows`).
"""

from __future__ import annotations

import sys
from collections.abc import Callable
from pathlib import Path
from typing import Any

import attrs
import msgspec
import orjson
import pydantic
import pytest

if __package__ in (None, ""):  # run as a script: the repository's root on the path
    sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from benches._timing import Row, calibrate, interleaved, peak_bytes

from jsonbudget import bounded_dumps

KIB = 1024


class Item(pydantic.BaseModel):
    id: int
    name: str
    price: float
    tags: list[str]


class Report(pydantic.BaseModel):
    title: str
    total: int
    items: list[Item]
    meta: dict[str, str]


class Row_(msgspec.Struct):
    id: int
    name: str
    score: float
    active: bool
    tags: list[str]


class Big(pydantic.BaseModel):
    title: str
    values: list[int]


def report(size: int) -> Report:
    """A pydantic model of about *size* bytes encoded."""
    items: list[Item] = []
    m = Report(title="quarterly report", total=0, items=items, meta={"source": "bench"})
    while len(m.model_dump_json()) < size:
        n = len(items)
        items.append(Item(id=n, name=f"item {n}", price=n * 1.25, tags=["a", "bc"]))
        m = Report(title="quarterly report", total=n, items=items, meta={"source": "bench"})
    return m


def structs(size: int) -> list[Row_]:
    """msgspec Structs of about *size* bytes encoded."""
    rows: list[Row_] = []
    while len(msgspec.json.encode(rows)) < size:
        n = len(rows)
        rows.append(Row_(id=n, name=f"row {n}", score=n / 7, active=n % 2 == 0, tags=["x"]))
    return rows


def big_model(n: int = 10_000_000) -> Big:
    """A model holding an *n*-item list (built without validating it)."""
    return Big.model_construct(title="big", values=list(range(n)))


# -- pytest-benchmark ------------------------------------------------------------------


@pytest.mark.parametrize("size", [KIB, 64 * KIB], ids=["1KiB", "64KiB"])
def test_pydantic_fits(benchmark: Any, size: int) -> None:
    m = report(size)
    assert benchmark(bounded_dumps, m, max_bytes=1 << 20) == m.model_dump_json().encode()


@pytest.mark.parametrize("size", [KIB, 64 * KIB], ids=["1KiB", "64KiB"])
def test_pydantic_reference(benchmark: Any, size: int) -> None:
    m = report(size)
    assert orjson.loads(benchmark(m.model_dump_json))


def test_msgspec_list_fits(benchmark: Any) -> None:
    rows = structs(64 * KIB)
    assert benchmark(bounded_dumps, rows, max_bytes=1 << 20) == msgspec.json.encode(rows)


def test_msgspec_list_reference(benchmark: Any) -> None:
    rows = structs(64 * KIB)
    assert orjson.loads(benchmark(msgspec.json.encode, rows))


def test_4k_of_a_10m_item_model(benchmark: Any) -> None:
    m = big_model(1_000_000)  # the script measures 10 million; the cost is the same
    data = benchmark(bounded_dumps, m, max_bytes=4 * KIB)
    assert len(data) <= 4 * KIB
    assert orjson.loads(data)["values"][0] == 0


@attrs.define
class _Rows:
    rows: list[Any]


def test_64k_of_an_attrs_value_of_rows(benchmark: Any) -> None:
    # The rows are kept as they are (only a collection that may hold a set is viewed):
    # about 0.4 ms, where viewing every row took 14 ms.
    value = _Rows([{"id": i, "name": f"row {i}", "score": i / 7} for i in range(20_000)])
    data = benchmark(bounded_dumps, value, max_bytes=64 * KIB)
    assert len(data) <= 64 * KIB
    assert orjson.loads(data)["rows"][1] == {"id": 1, "name": "row 1", "score": 1 / 7}


# -- the targets ---------------------------------------------------------------


def rows(*, rounds: int = 9) -> list[Row]:
    """The issue's rows: ratios to each library's own encoder, and the 4 KiB cut."""
    out: list[Row] = []
    for label, size in (("1 KiB", KIB), ("64 KiB", 64 * KIB)):
        m = report(size)
        fns: dict[str, Callable[[], Any]] = {
            "ours": lambda m=m: bounded_dumps(m, max_bytes=1 << 20),  # type: ignore[misc]
            "ref": m.model_dump_json,
        }
        n = calibrate(fns["ref"], target_s=0.02)
        t = interleaved(fns, rounds=rounds, inner=n)
        out.append(
            (
                f"pydantic model that fits ({label}) ÷ model_dump_json()",
                t.ratio("ours", "ref"),
                "x",
                "<= 1.5",
            )
        )
    ss = structs(64 * KIB)
    fns = {
        "ours": lambda: bounded_dumps(ss, max_bytes=1 << 20),
        "ref": lambda: msgspec.json.encode(ss),
    }
    t = interleaved(fns, rounds=rounds, inner=calibrate(fns["ref"], target_s=0.02))
    out.append(
        (
            "msgspec Struct list that fits (64 KiB) ÷ msgspec.json.encode",
            t.ratio("ours", "ref"),
            "x",
            "<= 1.5",
        )
    )
    big = big_model()
    fns = {"ours": lambda: bounded_dumps(big, max_bytes=4 * KIB)}
    t = interleaved(fns, rounds=rounds, inner=calibrate(fns["ours"], target_s=0.02))
    out.append(
        (
            "4 KiB out of a model holding a 10-million-item list",
            t.median("ours") * 1e3,
            "ms",
            "<= 1",
        )
    )
    peak, _ = peak_bytes(fns["ours"])
    out.append(("  its extra memory (peak, output included)", peak / KIB, "KiB", "<= 1024"))
    return out


if __name__ == "__main__":
    for measure, value, unit, target in rows():
        print(f"{measure:64} {value:10.3f} {unit:4} target {target}")

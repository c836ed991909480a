"""Counting an encode's work: renderer calls plus the values the size walk visits.

Complexity is checked by counting, never by timing. The renderer counts its own calls
(`EncodeCall.work`); the size walk (`bound`) is compiled and counts nothing, so the
count runs it as its Python twin, which visits the same values and gives the same
numbers (tests/test_speedups.py), and counts each visit. The compiled balanced cut
(`bound.fill`) is turned off there so the renderer is what is counted; `fill_work`
counts the compiled cut by the nodes it sizes, cuts and writes. Shared by the
adversarial tests, the compiled-cut tests and the benchmark script.
"""

from __future__ import annotations

from collections.abc import Iterator
from contextlib import contextmanager
from typing import Any

from jsonbudget import Encoder
from jsonbudget._encode import bound as _bound
from jsonbudget._encode.render import EncodeCall


@contextmanager
def twin_walk() -> Iterator[list[int]]:
    """Run the size walk as its Python twin; yields a one-item list of visits so far."""
    visits = [0]
    walk = _bound._walk
    saved = (_bound._walk, _bound.bound, _bound.bound_items, _bound.clean_dumps, _bound.fill)

    def counted(*args: Any) -> int:
        visits[0] += 1
        return walk(*args)

    _bound._walk = counted  # type: ignore[assignment]  # the twin recurses through this name
    _bound.bound, _bound.bound_items = _bound.py_bound, _bound.py_bound_items
    _bound.clean_dumps = _bound.py_clean_dumps
    _bound.fill = None
    try:
        yield visits
    finally:
        _bound._walk, _bound.bound, _bound.bound_items, _bound.clean_dumps, _bound.fill = saved


def work(obj: Any, budget: int, **options: Any) -> tuple[bytes, int]:
    """(the bytes, renderer calls + walk visits) of one encode of *obj* into *budget*."""
    call = EncodeCall(Encoder(max_bytes=budget, **options))
    with twin_walk() as visits:
        out = call.fit(obj, budget, "")
    assert out is not None
    return out[0], call.work + visits[0]


def fill_work(obj: Any, budget: int) -> tuple[bytes, int]:
    """(the bytes, nodes sized + cut + written) of the compiled balanced cut of *obj*."""
    assert _bound.fill is not None, "the compiled extension is not built"
    count = [0]
    out = _bound.fill(obj, budget, Encoder(max_bytes=budget)._caps, count, 0)
    assert isinstance(out, tuple), out
    return out[0], count[0]

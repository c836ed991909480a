"""Regressions of round 24: views read in linear work, deque fields walked."""

from __future__ import annotations

import collections
import math
import types
from typing import Any

import pydantic
import pytest

from jsonbudget import encode
from jsonbudget._encode import values, whole


class _Counted:
    """`operator` as the values module uses it, counting identity checks."""

    def __init__(self) -> None:
        self.calls = 0

    def is_(self, a: Any, b: Any) -> bool:
        self.calls += 1
        return a is b


@pytest.mark.parametrize("src", [list, collections.deque])
def test_regression_quadratic_identity_checks(src: Any, monkeypatch: Any) -> None:
    # A spill reads a view 512 items at a time: each run re-checked every earlier item.
    n = 200_000
    counted = _Counted()
    monkeypatch.setattr(values, "operator", types.SimpleNamespace(is_=counted.is_))
    view = values.SeqView(src(range(n)), values._identity)
    got = list(whole._items(view, ""))
    assert got == list(range(n))
    assert counted.calls <= 2 * n


class _Deque(collections.deque[Any]):
    """A deque counting its reads by index (each one costs the distance from an end)."""

    reads = 0

    def __getitem__(self, i: Any) -> Any:
        _Deque.reads += 1
        return super().__getitem__(i)


def test_regression_deque_read_by_index() -> None:
    _Deque.reads = 0
    n = 50_000
    view = values.SeqView(_Deque(range(n)), values._identity)
    assert list(whole._items(view, "")) == list(range(n))
    assert _Deque.reads == 0


def test_view_reads_bounded() -> None:
    # Runs grow, but only as far as a cut shows: a 10M deque cut to 200 bytes.
    d = collections.deque(range(10_000_000))
    view = values.SeqView(d, values._identity)
    assert view[:50] == list(range(50))
    for i in range(50, 80):
        assert view[i] == i
    assert len(view._pulled) <= 200
    out = encode(d, max_bytes=200).data
    assert out.startswith(b"[0,1,2,")
    assert b"more items" in out


def test_view_snapshot_kept() -> None:
    d = collections.deque(range(10_000))
    view = values.SeqView(d, values._identity)
    assert view[:100] == list(range(100))
    d[5] = -1  # changed between runs: the view ends at its snapshot, its count kept
    assert view[:1000] == list(range(100))
    assert len(view) == 10_000
    spilled = whole._items(values.SeqView(d, values._identity), "")
    next(spilled)
    d.append(1)  # a whole rendering refuses it as changed
    with pytest.raises(Exception, match="then changed"):
        list(spilled)


class _DequeModel(pydantic.BaseModel):
    d: collections.deque[int]
    f: collections.deque[float] = collections.deque()
    note: str = ""


def test_regression_deque_field_reads_only_what_shows() -> None:
    n = 1_000_000
    m = _DequeModel.model_construct(d=collections.deque(range(n)), f=collections.deque([math.nan]))
    # A deque[X] field was handed to pydantic whole: every item written for a 200 B cut.
    view = values._pydantic(m, values.Options("base64", 200))
    d = dict(view.items())["d"]
    assert isinstance(d, values.SeqView)
    assert d._src is m.d  # the field itself, not all of it as pydantic wrote it
    out = encode(d, max_bytes=200).data
    assert out.startswith(b"[0,1,2,")
    assert b"more items" in out
    assert len(d._pulled) < 1000


class _Sub(pydantic.BaseModel):
    a: float = 0


class _Seqs(pydantic.BaseModel):
    d: collections.deque[int] = collections.deque()
    f: collections.deque[float] = collections.deque()
    o: collections.deque[float] | None = None
    s: Any = None
    m: collections.deque[_Sub] = collections.deque()
    note: str = ""


class _L(list[Any]):
    pass


@pytest.mark.parametrize(
    "kw",
    [
        {"d": collections.deque([1, True]), "f": [1, 2], "o": (3, True)},
        {"f": collections.deque([1, True, 2.5]), "o": _L([1, 2])},
        {"f": {1, 2}, "o": frozenset([True])},
        {"m": collections.deque([_Sub(a=1)]), "d": [True]},
    ],
)
def test_deque_field_as_pydantic(kw: dict[str, Any]) -> None:
    m = _Seqs.model_construct(**kw, note="n" * 300)
    want = m.model_dump_json()
    want = want[: want.index(',"note"')]
    got = encode(m, max_bytes=200).data.decode()
    assert got[: got.index(',"note"')] == want
    assert encode(m, max_bytes=1 << 20).data.decode() == m.model_dump_json()

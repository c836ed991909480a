"""In-memory sources: sequences, re-iterables, async iterables, and `as_source`."""

from __future__ import annotations

import itertools
import json
import tracemalloc
from collections.abc import AsyncIterator, Iterator, Sequence
from typing import Any

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from jsonbudget import (
    AsyncIterableSource,
    AsyncSource,
    IterableSource,
    Limits,
    MemoryCursorStore,
    PageBuilder,
    Scope,
    SequenceSource,
    Source,
    as_source,
    paginate,
)
from jsonbudget._sources.base import Position
from jsonbudget.errors import InvalidCursor, LimitError


def take(source: Source[Any], position: Position | None, n: int) -> list[tuple[Any, Position]]:
    """Read at most n items with limit_hint=n-1 (the page size plus look-ahead), then close."""
    it = source.open(position, limit_hint=max(n - 1, 0))
    try:
        return list(itertools.islice(it, n))
    finally:
        it.close()  # type: ignore[attr-defined]


def roundtrip(position: Position) -> Position:
    """What the cursor store does to a position."""
    return json.loads(json.dumps(position))  # type: ignore[no-any-return]


def read_in_pages(source: Source[Any], sizes: list[int]) -> list[Any]:
    """Page through the source with the given page sizes (cycled), via JSON-round-tripped
    positions, the way paginate does: take page+1, keep the page, resume after its last."""
    out: list[Any] = []
    position: Position | None = None
    for size in itertools.cycle(sizes):
        got = take(source, position, size + 1)
        page = got[:size]
        out.extend(item for item, _ in page)
        if len(got) <= size:
            return out
        position = roundtrip(page[-1][1])
    raise AssertionError("unreachable")


class CountingSequence(Sequence[int]):
    """A real Sequence that counts how many items were asked of it."""

    def __init__(self, n: int) -> None:
        self.n = n
        self.gets = 0

    def __len__(self) -> int:
        return self.n

    def __getitem__(self, i: Any) -> Any:
        if isinstance(i, slice):
            raise TypeError("no slices: force the indexing path")
        if not 0 <= i < self.n:
            raise IndexError(i)
        self.gets += 1
        return i * 10


class CountingIterable:
    """A re-iterable that counts the items handed out and the iterators closed."""

    def __init__(self, n: int | None) -> None:
        self.n = n
        self.pulled = 0
        self.closed = 0

    def __iter__(self) -> Iterator[int]:
        try:
            for i in itertools.count() if self.n is None else range(self.n):
                self.pulled += 1
                yield i
        finally:
            self.closed += 1


# --- SequenceSource ---------------------------------------------------------------------


@pytest.mark.parametrize("seq", [list(range(50)), tuple(range(50)), range(50)])
def test_sequence_resume_at_every_position_equals_tail(seq: Sequence[int]) -> None:
    source = SequenceSource(seq)
    full = list(source.open(None))
    assert [item for item, _ in full] == list(seq)
    assert [pos for _, pos in full] == list(range(1, 51))
    for i, (_, pos) in enumerate(full):
        assert [item for item, _ in source.open(roundtrip(pos))] == list(seq)[i + 1 :]


def test_sequence_limit_hint_bounds_the_items_yielded() -> None:
    source = SequenceSource(list(range(10_000)))
    assert len(list(source.open(None, limit_hint=7))) == 8
    assert [x for x, _ in source.open(9_995, limit_hint=100)] == list(range(9_995, 10_000))
    assert list(source.open(None, limit_hint=0)) == [(0, 1)]


def test_generic_sequence_is_indexed_only_as_far_as_the_look_ahead() -> None:
    seq = CountingSequence(1000)
    got = list(SequenceSource(seq).open(10, limit_hint=4))
    assert got == [(100, 11), (110, 12), (120, 13), (130, 14), (140, 15)]
    assert seq.gets == 5


def test_sequence_sees_items_appended_while_paging() -> None:
    data = [1, 2, 3]
    source = SequenceSource(data)
    (_, pos), *_ = take(source, None, 1)
    data.append(4)
    assert [x for x, _ in source.open(pos)] == [2, 3, 4]


def test_sequence_position_past_the_end_yields_nothing() -> None:
    assert list(SequenceSource([1, 2]).open(5)) == []


@pytest.mark.parametrize("bad", [-1, "3", True, 1.5, [1], {"o": 1}])
def test_bad_offset_position_is_an_invalid_cursor(bad: Any) -> None:
    with pytest.raises(InvalidCursor):
        SequenceSource([1, 2, 3]).open(bad)
    with pytest.raises(InvalidCursor):
        IterableSource([1, 2, 3]).open(bad)


@pytest.mark.parametrize("bad", [-1, True, 2.0, "5"])
def test_bad_limit_hint_is_refused(bad: Any) -> None:
    with pytest.raises(LimitError, match="limit_hint"):
        SequenceSource([1]).open(None, limit_hint=bad)


def test_sequence_source_refuses_text() -> None:
    with pytest.raises(TypeError, match="wrap it in a list"):
        SequenceSource("abc")


@settings(max_examples=40, deadline=None)
@given(
    items=st.lists(st.integers() | st.text(max_size=5), max_size=60),
    sizes=st.lists(st.integers(min_value=1, max_value=9), min_size=1, max_size=4),
)
def test_sequence_pages_reassemble(items: list[Any], sizes: list[int]) -> None:
    assert read_in_pages(SequenceSource(items), sizes) == items
    assert read_in_pages(IterableSource(items), sizes) == items


# --- IterableSource ---------------------------------------------------------------------


def test_iterable_resume_at_every_position_equals_tail() -> None:
    source = IterableSource(CountingIterable(30))
    full = list(source.open(None))
    assert [x for x, _ in full] == list(range(30))
    for i, (_, pos) in enumerate(full):
        assert [x for x, _ in source.open(roundtrip(pos))] == list(range(i + 1, 30))


def test_iterable_is_asked_for_at_most_offset_plus_limit_plus_one() -> None:
    data = CountingIterable(None)  # endless
    got = list(IterableSource(data).open(20, limit_hint=5))
    assert [x for x, _ in got] == list(range(20, 26))
    assert data.pulled == 26
    assert data.closed == 1


def test_closing_the_iterator_closes_the_underlying_generator() -> None:
    data = CountingIterable(None)
    it = IterableSource(data).open(None)
    assert next(it) == (0, 1)
    assert data.closed == 0
    it.close()
    assert data.closed == 1


def test_factory_is_called_afresh_for_each_open() -> None:
    calls = []

    def factory() -> Iterator[int]:
        calls.append(1)
        return iter(range(5))

    source = IterableSource(factory)
    assert [x for x, _ in source.open(None)] == [0, 1, 2, 3, 4]
    assert [x for x, _ in source.open(3)] == [3, 4]
    assert len(calls) == 2


def test_endless_iterable_streams_in_bounded_memory() -> None:
    source = IterableSource(itertools.count)
    it = source.open(None)
    tracemalloc.start()
    try:
        for _ in range(200_000):
            next(it)
        _, peak = tracemalloc.get_traced_memory()
    finally:
        tracemalloc.stop()
        it.close()
    assert peak < 64 * 1024


def test_one_shot_iterators_are_refused_with_advice() -> None:
    gen = (i for i in range(3))
    with pytest.raises(TypeError, match="factory"):
        as_source(gen)
    with pytest.raises(TypeError, match="cannot be resumed"):
        IterableSource(iter([1, 2]))
    assert list(gen) == [0, 1, 2]  # refused without consuming anything


# --- as_source --------------------------------------------------------------------------


def test_as_source_dispatch() -> None:
    assert isinstance(as_source([1]), SequenceSource)
    assert isinstance(as_source((1,)), SequenceSource)
    assert isinstance(as_source(range(3)), SequenceSource)
    assert isinstance(as_source({1, 2}), IterableSource)
    assert isinstance(as_source(CountingIterable(3)), IterableSource)
    own = SequenceSource([1])
    assert as_source(own) is own
    assert isinstance(as_source(AsyncRange(3)), AsyncIterableSource)
    assert isinstance(as_source(own), Source)
    assert isinstance(as_source(AsyncRange(3)), AsyncSource)


@pytest.mark.parametrize("bad", ["text", b"bytes", {"a": 1}, 42, None])
def test_as_source_refuses_non_sources(bad: object) -> None:
    with pytest.raises(TypeError):
        as_source(bad)


def test_describe_is_json_and_names_the_kind() -> None:
    for source, kind in [
        (SequenceSource([1]), "sequence"),
        (IterableSource([1]), "iterable"),
        (AsyncIterableSource(AsyncRange(1)), "async_iterable"),
    ]:
        assert roundtrip(source.describe()) == {"kind": kind}  # type: ignore[attr-defined]


# --- AsyncIterableSource ----------------------------------------------------------------


class AsyncRange:
    """A re-iterable async iterable that counts what it hands out and closes."""

    def __init__(self, n: int | None) -> None:
        self.n = n
        self.pulled = 0
        self.closed = 0

    async def _gen(self) -> AsyncIterator[int]:
        try:
            for i in itertools.count() if self.n is None else range(self.n):
                self.pulled += 1
                yield i
        finally:
            self.closed += 1

    def __aiter__(self) -> AsyncIterator[int]:
        return self._gen()


async def test_async_resume_and_look_ahead() -> None:
    data = AsyncRange(None)
    source = AsyncIterableSource(data)
    got = [pair async for pair in source.aopen(10, limit_hint=3)]
    assert got == [(10, 11), (11, 12), (12, 13), (13, 14)]
    assert data.pulled == 14
    assert data.closed == 1


async def test_async_every_position_resumes_at_the_tail() -> None:
    source = AsyncIterableSource(AsyncRange(12))
    full = [pair async for pair in source.aopen(None)]
    assert [x for x, _ in full] == list(range(12))
    for i, (_, pos) in enumerate(full):
        assert [x async for x, _ in source.aopen(roundtrip(pos))] == list(range(i + 1, 12))


async def test_async_aclose_releases_the_underlying_iterator() -> None:
    data = AsyncRange(None)
    it = AsyncIterableSource(data).aopen(None)
    assert await anext(it) == (0, 1)
    await it.aclose()
    assert data.closed == 1


async def test_async_one_shot_is_refused() -> None:
    with pytest.raises(TypeError, match="cannot be resumed"):
        as_source(AsyncRange(3)._gen())


def pages_by_fill(source: Any, limits: Any) -> list[list[Any]]:
    """Every page of *source* built through its batch path, ``source.fill(builder, ...)``."""
    pages: list[list[Any]] = []
    position: Any = None
    for _ in range(100_000):
        builder = PageBuilder(limits)
        more, after = source.fill(builder, position, limit_hint=limits.max_items)
        page = builder.finish(complete=not more, next_cursor="x" if more else None)
        pages.append(list(page.items))
        if not more:
            return pages
        assert after != position or page.items, "a page that neither served nor moved"
        position = roundtrip(after)
    raise AssertionError("did not terminate")


def pages_by_paginate(source: Any, limits: Any) -> list[list[Any]]:
    """Every page of *source* through the pager (one item at a time, then the look-ahead)."""
    store, scope = MemoryCursorStore(), Scope("t", {})
    pages: list[list[Any]] = []
    cursor = None
    for _ in range(100_000):
        page = paginate(source, scope=scope, cursor=cursor, store=store, limits=limits)
        pages.append(list(page.items))
        cursor = page.next_cursor
        if cursor is None:
            return pages
    raise AssertionError("did not terminate")


def test_regression_a_sequence_that_overstates_its_length_ends_where_indexing_does() -> None:
    # A bare IndexError escaped from the page that reached the shorter end.
    class Lying(Sequence[int]):
        def __len__(self) -> int:
            return 100

        def __getitem__(self, i: Any) -> Any:
            if isinstance(i, slice) or not 0 <= i < 10:
                raise IndexError(i)
            return i

    assert list(Lying()) == list(range(10))
    pages = pages_by_paginate(Lying(), Limits(1000, max_items=3))
    assert [x for page in pages for x in page] == list(range(10))


class Frame:
    """Shaped as pandas' and polars' DataFrame, which the test environment does not
    install: ``columns``, ``to_dict``, and iteration over the column labels."""

    def __init__(self, data: dict[str, list[Any]]) -> None:
        self._data = data

    @property
    def columns(self) -> list[str]:
        return list(self._data)

    def to_dict(self, orient: str = "dict") -> Any:
        assert orient == "records"
        rows = zip(*self._data.values(), strict=True)
        return [dict(zip(self._data, row, strict=True)) for row in rows]

    def __iter__(self) -> Iterator[str]:
        return iter(self._data)

    def __len__(self) -> int:
        return len(next(iter(self._data.values()), []))


def test_regression_a_data_frame_is_refused_not_paged_by_its_column_labels() -> None:
    """Found by a tester: paginate(DataFrame) took the frame as a re-iterable, whose
    iteration gives the column labels: 1,000 rows came back as {"items": ["id", "name"],
    "complete": true}. Refused as a mapping is, saying what to pass instead."""
    frame = Frame({"id": list(range(1000)), "name": ["x"] * 1000})
    for call in (
        lambda: as_source(frame),
        lambda: paginate(frame, scope=Scope("t"), store=MemoryCursorStore(), limits=Limits(4000)),
    ):
        with pytest.raises(TypeError, match=r"Frame iterates over its columns") as raised:
            call()
        assert 'df.to_dict("records")' in str(raised.value)
        assert "df.itertuples(index=False)" in str(raised.value)
    rows = [x for page in pages_by_paginate(frame.to_dict("records"), Limits(4000)) for x in page]
    assert rows == [{"id": i, "name": "x"} for i in range(1000)]

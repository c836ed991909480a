"""r25: the page builder and the pager meet the objects users write for them.

Copies of one builder shared its page; a cursor store's, a spill store's or a source's
mistake (a forgotten ``return``, bare items instead of pairs, a position that does not
move, a skipped scope check, a long reference) gave a raw internal error, a silent wrong
page or paging without end; an `IterableSource` over a frozenset did not pickle.
"""

from __future__ import annotations

import copy
import dataclasses
import hashlib
import io
import pathlib
import pickle
import secrets
import time
from collections.abc import AsyncIterator, Iterator
from typing import Any, NamedTuple

import orjson
import pytest

from jsonbudget import (
    AsyncIterableSource,
    CursorScopeError,
    CursorState,
    InvalidCursor,
    IterableSource,
    LimitError,
    Limits,
    MemoryCursorStore,
    PageBuilder,
    Scope,
    SpillRef,
    apaginate,
    paginate,
)

ROWS = [{"id": i, "t": "x" * 20} for i in range(50)]
SCOPE = Scope("alice", {"q": 1})
LIMITS = Limits(512)
#: More pages than any of these sources has: a paging that gets there never ends.
PAGES = 8


def _walk(source: Any, store: Any = None, limits: Limits = LIMITS) -> list[Any]:
    """Follow the cursors through at most `PAGES` pages; the items seen."""
    store = MemoryCursorStore() if store is None else store
    seen: list[Any] = []
    cursor = None
    for _ in range(PAGES):
        page = paginate(source, scope=SCOPE, cursor=cursor, store=store, limits=limits)
        assert len(page.to_json()) <= limits.max_bytes
        seen += page.items
        if page.next_cursor is None:
            return seen
        cursor = page.next_cursor
    raise AssertionError(f"no end after {PAGES} pages")


async def _awalk(source: Any, store: Any = None) -> list[Any]:
    """`_walk` through `apaginate`."""
    store = MemoryCursorStore() if store is None else store
    seen: list[Any] = []
    cursor = None
    for _ in range(PAGES):
        page = await apaginate(source, scope=SCOPE, cursor=cursor, store=store, limits=LIMITS)
        seen += page.items
        if page.next_cursor is None:
            return seen
        cursor = page.next_cursor
    raise AssertionError(f"no end after {PAGES} pages")


# -- copies of a builder -------------------------------------------------------------------


def test_regression_copied_builders_keep_their_own_pages() -> None:
    template = PageBuilder(Limits(1024))
    alice, bob = copy.copy(template), copy.copy(template)
    alice.add({"who": "alice"})
    bob.add({"who": "bob"})
    for builder, who in ((alice, "alice"), (bob, "bob")):
        page = builder.finish(complete=True)
        assert orjson.loads(page.data)["items"] == [{"who": who}]
        assert page.items == ({"who": who},)
    assert template.finish(complete=True).items == ()

    # Cut items: each copy's reports counted against its own page only.
    cut = PageBuilder(Limits(2048, max_field_bytes=80))
    a, b = copy.copy(cut), copy.copy(cut)
    while a.add({"a": "x" * 500, "b": "y" * 500}) | b.add({"c": "z" * 500, "d": "w" * 500}):
        pass
    for builder in (a, b):
        page = builder.finish(complete=False, next_cursor="x" * 56)
        assert len(page.data) <= 2048
        assert len(orjson.loads(page.data)["items"]) == builder.count


@pytest.mark.parametrize(
    "clone",
    [copy.copy, copy.deepcopy, lambda b: pickle.loads(pickle.dumps(b))],
    ids=["copy", "deepcopy", "pickle"],
)
def test_a_builder_copied_mid_page_is_equal_and_independent(clone: Any) -> None:
    builder = PageBuilder(Limits(1024, max_field_bytes=40))
    builder.add({"id": 0, "body": "b" * 100})
    before = builder.finish(complete=True)
    twin = clone(builder)
    assert type(twin) is PageBuilder
    assert twin.finish(complete=True) == before
    twin.add({"id": 1})
    assert (builder.count, twin.count) == (1, 2)
    assert builder.finish(complete=True) == before
    theirs = twin.finish(complete=True)
    assert orjson.loads(theirs.data)["items"][1:] == [{"id": 1}]
    assert theirs.truncations == before.truncations


# -- a cursor store's mistakes -------------------------------------------------------------


class DictStore:
    """A cursor store written from docs/cursors.md."""

    def __init__(self) -> None:
        self.tokens: dict[Any, tuple[CursorState, Any]] = {}
        self.pages: dict[str, int] = {}

    def start(self, scope: Scope, *, max_pages: int | None) -> Any:
        now = time.time()
        fps = (scope.principal_fingerprint, scope.query_fingerprint)
        return CursorState(secrets.token_hex(16), *fps, None, 1, now, now + 900, max_pages)

    def resume(self, token: str, scope: Scope) -> Any:
        if token not in self.tokens:
            raise InvalidCursor("unknown")
        state, position = self.tokens[token]
        if state.principal_fingerprint != scope.principal_fingerprint:
            raise CursorScopeError("principal", mismatch="principal")
        if state.query_fingerprint != scope.query_fingerprint:
            raise CursorScopeError("query", mismatch="query")
        return self._counted(state, position)

    def _counted(self, state: CursorState, position: Any) -> CursorState:
        pages = self.pages.get(state.operation_id, 1) + 1
        self.pages[state.operation_id] = pages
        return CursorState(
            state.operation_id,
            state.principal_fingerprint,
            state.query_fingerprint,
            position,
            pages,
            state.started_at,
            state.expires_at,
            state.max_pages,
        )

    def mint(self, state: CursorState, position: Any) -> Any:
        token = secrets.token_urlsafe(16)
        self.tokens[token] = (state, position)
        return token


def test_the_dict_store_pages_everything() -> None:
    assert _walk(ROWS, DictStore()) == ROWS


@pytest.mark.parametrize("token", [None, 7, b"token"], ids=["None", "int", "bytes"])
def test_regression_a_store_minting_no_str_token_is_refused(token: Any) -> None:
    class ForgetfulStore(DictStore):
        def mint(self, state: CursorState, position: Any) -> Any:
            super().mint(state, position)
            return token  # the forgotten `return token` is None

    with pytest.raises(TypeError, match=r"ForgetfulStore\.mint\(\) must return a str token"):
        paginate(ROWS, scope=SCOPE, store=ForgetfulStore(), limits=LIMITS)


class ResumesNone(DictStore):
    def resume(self, token: str, scope: Scope) -> Any:
        super().resume(token, scope)  # no return


class ResumesDict(DictStore):
    def resume(self, token: str, scope: Scope) -> Any:
        return {"position": super().resume(token, scope).position}


class StartsNone(DictStore):
    def start(self, scope: Scope, *, max_pages: int | None) -> Any:
        super().start(scope, max_pages=max_pages)  # no return


class StartsTuple(DictStore):
    def start(self, scope: Scope, *, max_pages: int | None) -> Any:
        return ("op", 1)


class StartsBadBudget(DictStore):
    def start(self, scope: Scope, *, max_pages: int | None) -> Any:
        bad: Any = "x"
        return dataclasses.replace(super().start(scope, max_pages=max_pages), max_pages=bad)


@pytest.mark.parametrize(
    ("store", "call", "what"),
    [
        (ResumesNone, "resume", "not NoneType"),
        (ResumesDict, "resume", "not dict"),
        (StartsNone, "start", "not NoneType"),
        (StartsTuple, "start", "not tuple"),
        (StartsBadBudget, "start", r"max_pages \(str\) is not an int"),
    ],
)
def test_regression_a_store_returning_no_cursor_state_is_refused_by_name(
    store: type[DictStore], call: str, what: str
) -> None:
    read: list[Any] = []

    class Watched:
        def open(self, position: Any, *, limit_hint: int | None = None) -> Iterator[Any]:
            start = 0 if position is None else position
            read.append(start)
            yield from ((r, i + 1) for i, r in enumerate(ROWS) if i >= start)

        def describe(self) -> dict[str, Any]:
            return {"kind": "watched"}

    pattern = rf"{store.__name__}\.{call}\(\) (must return a CursorState, )?.*{what}"
    if call == "start":
        with pytest.raises(TypeError, match=pattern):
            paginate(Watched(), scope=SCOPE, store=store(), limits=LIMITS)
        assert read == []  # refused before the source was read
        return
    good = store()
    first = paginate(Watched(), scope=SCOPE, store=good, limits=LIMITS)
    with pytest.raises(TypeError, match=pattern):
        paginate(Watched(), scope=SCOPE, cursor=first.next_cursor, store=good, limits=LIMITS)


class SkipsTheScope(DictStore):
    """Forgets step (4) of the documented order: the principal and query checks."""

    def resume(self, token: str, scope: Scope) -> Any:
        return self._counted(*self.tokens[token])


@pytest.mark.parametrize(
    ("other", "mismatch"),
    [(Scope("mallory", {"q": 1}), "principal"), (Scope("alice", {"q": 2}), "query")],
)
async def test_regression_a_store_that_skips_the_scope_check_hands_over_nothing(
    other: Scope, mismatch: str
) -> None:
    store = SkipsTheScope()
    first = paginate(ROWS, scope=SCOPE, store=store, limits=LIMITS)
    with pytest.raises(CursorScopeError) as caught:
        paginate(ROWS, scope=other, cursor=first.next_cursor, store=store, limits=LIMITS)
    assert caught.value.mismatch == mismatch
    with pytest.raises(CursorScopeError) as caught:
        await apaginate(ROWS, scope=other, cursor=first.next_cursor, store=store, limits=LIMITS)
    assert caught.value.mismatch == mismatch
    # its own principal pages on
    assert _walk(ROWS, store) == ROWS


# -- a source that makes no progress ------------------------------------------------------


class StuckSource:
    """Yields the position it was opened at, not the one after each item."""

    def open(self, position: Any, *, limit_hint: int | None = None) -> Iterator[Any]:
        start = 0 if position is None else position
        for i in range(start, len(ROWS)):
            yield ROWS[i], start

    def describe(self) -> dict[str, Any]:
        return {"kind": "stuck"}


class EmptyFill:
    """The batch path: says more follows, adds nothing."""

    def open(self, position: Any, *, limit_hint: int | None = None) -> Iterator[Any]:
        yield from ((r, i + 1) for i, r in enumerate(ROWS))

    def fill(self, builder: Any, position: Any, *, limit_hint: int | None = None) -> Any:
        return True, position

    def describe(self) -> dict[str, Any]:
        return {"kind": "empty-fill"}


class NonePositions:
    """Yields None as every position: each page starts again at the first item."""

    def open(self, position: Any, *, limit_hint: int | None = None) -> Iterator[Any]:
        for row in ROWS:
            yield row, None

    def describe(self) -> dict[str, Any]:
        return {"kind": "none"}


class NoneAfterResume:
    """Right on the first page; None as every position once resumed."""

    def open(self, position: Any, *, limit_hint: int | None = None) -> Iterator[Any]:
        start = 0 if position is None else position
        for i in range(start, len(ROWS)):
            yield ROWS[i], (i + 1 if position is None else None)

    def describe(self) -> dict[str, Any]:
        return {"kind": "none-after-resume"}


class AsyncStuck:
    """`StuckSource` as an async source."""

    async def _items(self, start: int) -> AsyncIterator[Any]:
        for i in range(start, len(ROWS)):
            yield ROWS[i], start

    def aopen(self, position: Any, *, limit_hint: int | None = None) -> AsyncIterator[Any]:
        return self._items(0 if position is None else position)

    def describe(self) -> dict[str, Any]:
        return {"kind": "async-stuck"}


@pytest.mark.parametrize(
    ("source", "why"),
    [
        (StuckSource, "at the position it was opened at"),
        (EmptyFill, "put no item on the page"),
        (NonePositions, "at position None"),
        (NoneAfterResume, "at position None"),
    ],
)
async def test_regression_a_source_that_makes_no_progress_is_refused(
    source: type, why: str
) -> None:
    pattern = rf"source {source.__name__} .*{why}"
    with pytest.raises(ValueError, match=pattern):
        _walk(source())
    with pytest.raises(ValueError, match=pattern):
        await _awalk(source())


async def test_regression_an_async_source_that_makes_no_progress_is_refused() -> None:
    with pytest.raises(ValueError, match="source AsyncStuck ended the page at the position"):
        await _awalk(AsyncStuck())


def test_regression_a_store_that_loses_the_position_does_not_restart() -> None:
    class LosesPosition(DictStore):
        def resume(self, token: str, scope: Scope) -> Any:
            state = super().resume(token, scope)
            return self._counted(state, None)

    with pytest.raises(ValueError, match=r"LosesPosition\.resume\(\) returned position None"):
        _walk(ROWS, LosesPosition())


# -- a source that yields something else than pairs ----------------------------------------


class Bare:
    """Yields its rows without positions."""

    def __init__(self, rows: list[Any]) -> None:
        self.rows = rows

    def open(self, position: Any, *, limit_hint: int | None = None) -> Iterator[Any]:
        yield from self.rows

    def describe(self) -> dict[str, Any]:
        return {"kind": "bare"}


class AsyncBare:
    """`Bare` as an async source."""

    def __init__(self, rows: list[Any]) -> None:
        self.rows = rows

    def describe(self) -> dict[str, Any]:
        return {"kind": "async-bare"}

    async def _items(self) -> AsyncIterator[Any]:
        for row in self.rows:
            yield row

    def aopen(self, position: Any, *, limit_hint: int | None = None) -> AsyncIterator[Any]:
        return self._items()


@pytest.mark.parametrize(
    ("rows", "got"),
    [
        ([{"id": i, "name": f"n{i}"} for i in range(50)], "got dict"),  # unpacked as a pair
        ([{"a": i, "b": i, "c": i} for i in range(50)], "got dict"),
        (["ab"] * 50, "got str"),
        ([(i, i + 1, 0) for i in range(50)], "got a tuple of 3"),
    ],
)
async def test_regression_a_source_yielding_bare_items_is_refused(
    rows: list[Any], got: str
) -> None:
    with pytest.raises(
        TypeError, match=rf"Bare\.open\(\) must yield \(item, position\) tuples, {got}"
    ):
        _walk(Bare(rows))
    with pytest.raises(TypeError, match=rf"AsyncBare\.aopen\(\) must yield .* tuples, {got}"):
        await _awalk(AsyncBare(rows))


class Pair(NamedTuple):
    item: Any
    position: Any


class Pair3(NamedTuple):
    item: Any
    position: Any
    extra: Any


class Paired(Bare):
    """Yields its rows as *pair* makes them of (row, position)."""

    def __init__(self, rows: list[Any], pair: Any) -> None:
        super().__init__([pair((row, i + 1)) for i, row in enumerate(rows)])

    def open(self, position: Any, *, limit_hint: int | None = None) -> Iterator[Any]:
        yield from self.rows[position or 0 :]


class AsyncPaired:
    """`Paired` as an async source."""

    def __init__(self, rows: list[Any], pair: Any) -> None:
        self.rows = [pair((row, i + 1)) for i, row in enumerate(rows)]

    def describe(self) -> dict[str, Any]:
        return {"kind": "async-paired"}

    async def _items(self, position: Any) -> AsyncIterator[Any]:
        for pair in self.rows[position or 0 :]:
            yield pair

    def aopen(self, position: Any, *, limit_hint: int | None = None) -> AsyncIterator[Any]:
        return self._items(position)


async def test_regression_a_source_yielding_named_tuple_pairs_pages() -> None:
    """Found by a sweep: the check for bare items refused a named tuple (any tuple
    subclass) as the (item, position) pair, which pages before it took and which unpacks
    exactly as a tuple does. Lists and tuple subclasses of another length are refused."""
    assert _walk(Paired(ROWS, lambda p: Pair(*p))) == ROWS
    assert await _awalk(AsyncPaired(ROWS, lambda p: Pair(*p))) == ROWS
    for pair, got in (
        (list, "got list"),
        (lambda p: Pair3(p[0], p[1], 0), "got Pair3, a tuple of 3"),
    ):
        with pytest.raises(TypeError, match=rf"Paired\.open\(\) must yield .* tuples, {got}"):
            _walk(Paired(ROWS, pair))
        with pytest.raises(TypeError, match=rf"Paired\.aopen\(\) must yield .* tuples, {got}"):
            await _awalk(AsyncPaired(ROWS, pair))


class OpensNone:
    def open(self, position: Any, *, limit_hint: int | None = None) -> Any:
        iter(ROWS)  # no return

    def describe(self) -> dict[str, Any]:
        return {"kind": "opens-none"}


class AsyncGeneratorOpen:
    async def open(self, position: Any, *, limit_hint: int | None = None) -> AsyncIterator[Any]:
        for i, row in enumerate(ROWS):
            yield row, i + 1

    def describe(self) -> dict[str, Any]:
        return {"kind": "async-generator-open"}


class CoroutineOpen:
    async def open(self, position: Any, *, limit_hint: int | None = None) -> Any:
        return iter([])

    def describe(self) -> dict[str, Any]:
        return {"kind": "coroutine-open"}


@pytest.mark.filterwarnings("error::RuntimeWarning")  # the coroutine is closed, not leaked
@pytest.mark.parametrize(
    ("source", "what"),
    [
        (OpensNone, "not NoneType"),
        (AsyncGeneratorOpen, "not async_generator; an async source defines aopen"),
        (CoroutineOpen, "not coroutine; an async def method is a coroutine"),
    ],
)
def test_regression_an_open_that_returns_no_iterator_is_refused_by_name(
    source: type, what: str
) -> None:
    pattern = rf"{source.__name__}\.open\(\) must return an iterator of .* tuples, {what}"
    with pytest.raises(TypeError, match=pattern):
        _walk(source())


async def test_regression_an_aopen_that_returns_a_sync_generator_is_refused_by_name() -> None:
    class SyncAopen:
        def aopen(self, position: Any, *, limit_hint: int | None = None) -> Any:
            yield from ((r, i + 1) for i, r in enumerate(ROWS))

        def describe(self) -> dict[str, Any]:
            return {"kind": "sync-aopen"}

    with pytest.raises(TypeError, match=r"SyncAopen\.aopen\(\) must return an async iterator"):
        await _awalk(SyncAopen())


def test_regression_an_attribute_named_fill_is_no_batch_path() -> None:
    class FillAttribute:
        fill = "#"  # what to pad with, say: not the batch path

        def open(self, position: Any, *, limit_hint: int | None = None) -> Iterator[Any]:
            start = 0 if position is None else position
            yield from ((r, i + 1) for i, r in enumerate(ROWS) if i >= start)

        def describe(self) -> dict[str, Any]:
            return {"kind": "fill-attribute"}

    assert _walk(FillAttribute()) == ROWS


@pytest.mark.parametrize(
    ("returned", "what"),
    [(None, "a .more, position. tuple, got NoneType"), ((1, 3), "more as a bool, not int")],
)
def test_regression_a_fill_returning_no_pair_is_refused_by_name(returned: Any, what: str) -> None:
    class BadFill(EmptyFill):
        def fill(self, builder: Any, position: Any, *, limit_hint: int | None = None) -> Any:
            builder.fill_from(ROWS)
            return returned

    with pytest.raises(TypeError, match=rf"BadFill\.fill\(\) must return {what}"):
        _walk(BadFill())


# -- a spill store's reference -------------------------------------------------------------


class LongRefSpill:
    """A spill store whose references are *n* characters long."""

    max_file_bytes = 1 << 30

    def __init__(self, n: int) -> None:
        self.n = n
        self.files: dict[str, bytes] = {}

    def put(self, data: Any, *, label: str, media_type: str = "application/json") -> SpillRef:
        raw = b"".join(bytes(c) for c in data)
        ref = "r" * self.n
        self.files[ref] = raw
        digest = hashlib.sha256(raw).hexdigest()
        return SpillRef(ref, len(raw), digest, media_type, label, pathlib.Path("/dev/null"))

    def read(self, ref: str, offset: int = 0, limit: int = 65536) -> bytes:
        return self.files[ref][offset : offset + limit]

    def open(self, ref: str) -> io.BytesIO:
        return io.BytesIO(self.files[ref])


def test_regression_a_spill_store_reference_too_long_for_the_page_is_a_limit_error() -> None:
    big = [{"big": "z" * 50_000}, {"i": 1}]
    for max_bytes in (622, 700):
        store = LongRefSpill(200)
        with pytest.raises(LimitError) as caught:
            paginate(
                big,
                scope=SCOPE,
                store=MemoryCursorStore(),
                limits=Limits(max_bytes),
                oversized="spill",
                spill_store=store,
            )
        assert caught.value.name == "spill_store"
        assert "LongRefSpill.put() returned a reference of 200 bytes" in str(caught.value)
        assert "room for 1 to 134" in str(caught.value)
    # A page with room for it shows it.
    page = paginate(
        big,
        scope=SCOPE,
        store=MemoryCursorStore(),
        limits=Limits(1000),
        oversized="spill",
        spill_store=LongRefSpill(200),
    )
    assert page.oversized[0].ref == "r" * 200
    assert len(page.to_json()) <= 1000


def test_regression_a_spill_store_put_returning_none_is_refused_by_name() -> None:
    class PutsNone(LongRefSpill):
        def put(self, data: Any, *, label: str, media_type: str = "application/json") -> Any:
            super().put(data, label=label)  # no return

    with pytest.raises(TypeError, match=r"PutsNone\.put\(\) must return a SpillRef"):
        paginate(
            [{"big": "z" * 5000}],
            scope=SCOPE,
            store=MemoryCursorStore(),
            limits=Limits(1000),
            oversized="spill",
            spill_store=PutsNone(10),
        )


# -- sources that pickle -------------------------------------------------------------------


def _rows() -> list[int]:
    return [3, 1, 2]


class Numbers:
    """A picklable async re-iterable."""

    async def _items(self) -> AsyncIterator[int]:
        for i in range(30):
            yield i

    def __aiter__(self) -> AsyncIterator[int]:
        return self._items()


def _pages(source: Any) -> list[Any]:
    return _walk(source, limits=Limits(400, max_items=4))


async def test_regression_iterable_sources_over_picklable_iterables_pickle() -> None:
    for source in (IterableSource(frozenset(range(30))), IterableSource(_rows)):
        again = pickle.loads(pickle.dumps(source))
        assert type(again) is IterableSource
        assert again.describe() == source.describe()
        assert _pages(again) == _pages(source)
    with pytest.raises((pickle.PicklingError, AttributeError, TypeError)):
        pickle.dumps(IterableSource(lambda: [1, 2]))  # a factory pickles iff it does
    asource = pickle.loads(pickle.dumps(AsyncIterableSource(Numbers())))
    assert await _awalk(asource) == list(range(30))


# -- PageBuilder.afill ---------------------------------------------------------------------


async def test_afill_fills_from_an_async_iterable_and_keeps_the_left_over() -> None:
    async def rows() -> AsyncIterator[dict[str, Any]]:
        for row in ROWS:
            yield row

    it = rows()
    builder = PageBuilder(LIMITS)
    assert await builder.afill(it) is True
    page = builder.finish(complete=False)
    assert len(page.data) <= LIMITS.max_bytes
    assert 0 < len(page.items) < len(ROWS)
    assert page.items == tuple(ROWS[: len(page.items)])
    assert builder.left_over == (ROWS[len(page.items)],)
    # The next page starts with the left-over item, then what the iterator still has.
    rest = PageBuilder(Limits(64 * 1024))
    assert rest.add(builder.left_over[0])
    assert await rest.afill(it) is False
    assert rest.left_over == ()
    assert [*page.items, *rest.finish(complete=True).items] == ROWS

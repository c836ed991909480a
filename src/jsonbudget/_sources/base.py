"""Page sources: where items come from, and how to continue after one of them.

A source yields ``(item, position_after_item)`` pairs. A position is a plain JSON value
(the cursor store serializes it), and re-opening the source at a position continues
exactly after the item that position was yielded with.
"""

from __future__ import annotations

import base64
import os
from collections.abc import (
    AsyncGenerator,
    AsyncIterable,
    AsyncIterator,
    Callable,
    Generator,
    Hashable,
    Iterable,
    Iterator,
    Mapping,
    Sequence,
)
from dataclasses import dataclass
from itertools import count, islice
from typing import (
    TYPE_CHECKING,
    Any,
    Final,
    ForwardRef,
    Literal,
    Protocol,
    TypeAlias,
    TypeVar,
    runtime_checkable,
)

from .._limits import check_int, check_mode
from ..errors import InvalidCursor, LimitError

__all__ = [
    "AsyncIterableSource",
    "AsyncSource",
    "Clipped",
    "Filler",
    "IterableSource",
    "JSONValue",
    "Position",
    "SequenceSource",
    "Source",
    "SourceLike",
    "as_source",
    "described_path",
    "page_budget",
    "read_bound",
    "spill_bytes",
]

# Users annotate with JSONValue and Position in modules without postponed annotations,
# so each must be a runtime type that takes `| None` and that `typing.get_type_hints`
# resolves from any module: a string alias does neither (and its inner name would be
# looked up in the user's module). At run time the recursion goes through a forward
# reference bound to this module (Python 3.11 has no TypeAliasType, and typing_extensions
# is not a dependency); type checkers read the plain recursive alias.
if TYPE_CHECKING:
    JSONValue: TypeAlias = (
        bool | int | float | str | list["JSONValue"] | dict[str, "JSONValue"] | None
    )
else:
    _JSON = ForwardRef("JSONValue", module=__name__)
    JSONValue = bool | int | float | str | list[_JSON] | dict[str, _JSON] | None
#: Where a source stands: a JSON value that survives a round trip through the cursor store.
Position: TypeAlias = JSONValue

T_co = TypeVar("T_co", covariant=True)
T = TypeVar("T")

#: Sequences are copied to the caller in slices of at most this many references, so an
#: unbounded read of a huge list never copies the whole list at once.
_SLICE = 1024


@dataclass(frozen=True, slots=True)
class Clipped:
    """A value a source cut where it read it: its first part and its full length.

    A database source fetches at most ``max_cell_bytes`` of a long text or binary cell;
    ``head`` is what it fetched (a `str` for text, `bytes` for binary data) and
    ``length`` the whole value's length in ``unit``: ``"chars"`` (characters of a text),
    or ``"bytes"`` (of binary data, or of a text's encoded form where counting its
    characters would mean reading all of it), so a marker can say exactly how much was
    left out (`omitted`). It never equals the whole value, and a plain JSON library
    writes it as an object with these three fields, so it cannot pass for the whole
    value unnoticed.
    """

    head: str | bytes
    length: int
    unit: Literal["chars", "bytes"]

    def __post_init__(self) -> None:
        # Every marker and report counts from these: a count that is not a measurement
        # (a negative one, an unknown unit) would be passed on as one (guarantee 4).
        if not isinstance(self.head, (str, bytes)):
            raise LimitError("Clipped.head", self.head, "must be str or bytes")
        # A tuple: an unhashable unit is refused too.
        check_mode("Clipped.unit", self.unit, ("chars", "bytes"))
        check_int("Clipped.length", self.length, minimum=0, maximum=2**63 - 1)
        if self.omitted < 0:
            raise LimitError("Clipped.length", self.length, f"is less than the head's {self.unit}")

    @property
    def omitted(self) -> int:
        """How much of the value ``head`` leaves out, in `unit` (UTF-8 bytes for text)."""
        head = self.head
        if self.unit == "chars" or isinstance(head, bytes):
            return self.length - len(head)
        return self.length - len(head.encode("utf-8", "surrogatepass"))


class Filler(Protocol):
    """What a source's ``fill`` needs of a page builder: its bulk path.

    `PageBuilder.fill_from` is one: it adds ``items[start:]`` until the page is full and
    returns whether an item was left over and the index of the first one not added.
    """

    def fill_from(self, seq: list[Any], start: int = 0) -> tuple[bool, int]: ...


def described_path(key: str, path: str) -> dict[str, JSONValue]:
    """*path* for a `describe()` under *key*: its bytes as text where they are UTF-8; a
    name that is not (POSIX allows any bytes, which Python holds as lone surrogates, and
    a cursor's scope is text) goes as its bytes in base64 under ``key + "_bytes"``, a
    key no text path uses, so two paths never describe alike.

    The bytes decide, not the str: Python decodes a name by the locale, so under
    ``LC_ALL=C`` "é" is held as two lone surrogates, and keying on the str described
    one file two ways (a cursor minted under one locale was refused under the other).
    """
    try:
        raw = os.fsencode(path)
    except UnicodeEncodeError:
        # Text the file system encoding cannot write ("é" under an ASCII locale), given
        # by a caller rather than read from the OS: its UTF-8 is the name's bytes. A
        # lone surrogate that stands for no byte still raises, as no file is so named.
        raw = path.encode("utf-8", "surrogateescape")
    try:
        return {key: raw.decode("utf-8")}
    except UnicodeDecodeError:
        return {key + "_bytes": base64.b64encode(raw).decode("ascii")}


def page_reader(builder: Filler) -> Hashable | None:
    """Who *builder*'s page is for (`PageBuilder.reader`), else None."""
    reader = getattr(builder, "reader", None)
    return reader if isinstance(reader, Hashable) else None


def page_budget(builder: Filler, default: int) -> int:
    """The page budget of *builder* in bytes (``builder.limits.max_bytes``), else *default*."""
    limits = getattr(builder, "limits", None)
    return int(getattr(limits, "max_bytes", default))


def spill_bytes(builder: Filler) -> int:
    """The largest item *builder* spills whole (`PageBuilder.spill_bytes`), else 0."""
    return int(getattr(builder, "spill_bytes", None) or 0)


def read_bound(builder: Filler, default: int) -> int:
    """The most of one long value worth reading for *builder*: its page budget (a longer
    value can never be shown whole), or more where it spills items whole (the largest
    it spills); *default* where it says neither."""
    return max(page_budget(builder, default), spill_bytes(builder))


@runtime_checkable
class Source(Protocol[T_co]):
    """A re-openable, ordered source of items (see the module docstring)."""

    def open(
        self, position: Position | None, *, limit_hint: int | None = None
    ) -> Iterator[tuple[T_co, Position]]:
        """Yield ``(item, position_after_item)`` starting right after *position*.

        ``None`` starts at the beginning. The caller takes at most ``limit_hint + 1``
        items and then closes the iterator where it can (the sources jsonbudget provides
        return generators); ``limit_hint=None`` streams lazily.
        """
        ...

    def describe(self) -> Mapping[str, JSONValue]:
        """The parameters that define what this source yields (never the page size); only
        read, so any mapping of JSON values will do (a ``dict[str, str]`` too)."""
        ...


@runtime_checkable
class AsyncSource(Protocol[T_co]):
    """The async twin of `Source`."""

    def aopen(
        self, position: Position | None, *, limit_hint: int | None = None
    ) -> AsyncIterator[tuple[T_co, Position]]:
        """Like `Source.open`, as an async iterator; the caller ``aclose()``-s it where it
        can (the sources jsonbudget provides return async generators)."""
        ...

    def describe(self) -> Mapping[str, JSONValue]:
        """The parameters that define what this source yields (never the page size); only
        read, so any mapping of JSON values will do (a ``dict[str, str]`` too)."""
        ...


def check_limit_hint(limit_hint: int | None) -> int | None:
    """Validate *limit_hint*: ``None`` or an int >= 0."""
    if limit_hint is None:
        return None
    return check_int("limit_hint", limit_hint, minimum=0)


#: The largest offset a position holds: a database's 64-bit integer.
MAX_OFFSET: Final = 2**63 - 1


def offset_position(position: Position | None, kind: str) -> int:
    """Return the offset stored in an offset *position* (``None`` is 0)."""
    if position is None:
        return 0
    if type(position) is not int or not 0 <= position <= MAX_OFFSET:
        raise InvalidCursor(f"the position is not a valid {kind} offset")
    return position


class SequenceSource(Source[T]):
    """Items of a sequence (list, tuple, range, any `Sequence`), by offset.

    The position after item *i* is ``i + 1``; resuming costs O(1). Items appended while
    paging are seen; items inserted or removed before the position shift the offsets.
    """

    __slots__ = ("_seq",)

    def __init__(self, seq: Sequence[T]) -> None:
        if isinstance(seq, str | bytes | bytearray | memoryview):
            raise TypeError(f"a {type(seq).__name__} is not a sequence of items; wrap it in a list")
        if not isinstance(seq, Sequence):
            raise TypeError(f"SequenceSource needs a Sequence, not {type(seq).__name__}")
        self._seq = seq

    @property
    def sequence(self) -> Sequence[T]:
        """The sequence itself (pages fill from it in runs)."""
        return self._seq

    def open(
        self, position: Position | None, *, limit_hint: int | None = None
    ) -> Generator[tuple[T, Position], None, None]:
        """Yield items from offset *position* on."""
        start = offset_position(position, "sequence")
        return self._iter(start, check_limit_hint(limit_hint))

    def _iter(
        self, start: int, limit_hint: int | None
    ) -> Generator[tuple[T, Position], None, None]:
        seq = self._seq
        stop = None if limit_hint is None else start + limit_hint + 1
        if isinstance(seq, list | tuple | range):
            # Slices run in C: far cheaper per item than indexing in a Python loop.
            i = start
            while stop is None or i < stop:
                end = i + _SLICE if stop is None else min(i + _SLICE, stop)
                chunk = seq[i:end]
                if not chunk:
                    return
                yield from zip(chunk, range(i + 1, i + 1 + len(chunk)), strict=True)
                i += len(chunk)
            return
        i = start
        while (stop is None or i < stop) and i < len(seq):
            try:
                item = seq[i]
            except IndexError:
                # A `__len__` that says more than `__getitem__` holds: the sequence ends
                # where indexing does, as Python's own iteration takes it.
                return
            i += 1
            yield item, i

    def describe(self) -> dict[str, JSONValue]:
        """``{"kind": "sequence"}``: a sequence is identified by the caller's scope."""
        return {"kind": "sequence"}


def _is_one_shot(obj: object) -> bool:
    return hasattr(obj, "__next__") or hasattr(obj, "__anext__")


class IterableSource(Source[T]):
    """Items of a re-iterable (or of a zero-argument factory returning an iterable).

    Each ``open`` iterates afresh and skips *position* items, so resuming costs
    O(position). The iterable must yield the same items in the same order each time.
    """

    __slots__ = ("_factory", "_iterable", "_order")

    def __init__(self, iterable_or_factory: Iterable[T] | Callable[[], Iterable[T]]) -> None:
        self._order: str | None = None
        # One of the two, the other None. The re-iterable is kept itself, not in a
        # closure, so that a source over one pickles when it does.
        self._iterable: Iterable[T] | None = None
        self._factory: Callable[[], Iterable[T]] | None = None
        if isinstance(iterable_or_factory, Iterable):
            if _is_one_shot(iterable_or_factory):
                raise TypeError(_ONE_SHOT)
            self._iterable = iterable_or_factory
            if isinstance(iterable_or_factory, set | frozenset):
                self._order = _HASH_ORDER
        elif callable(iterable_or_factory):
            self._factory = iterable_or_factory
        else:
            raise TypeError(
                "IterableSource needs a re-iterable or a factory, "
                f"not {type(iterable_or_factory).__name__}"
            )

    def open(
        self, position: Position | None, *, limit_hint: int | None = None
    ) -> Generator[tuple[T, Position], None, None]:
        """Yield items from offset *position* on (re-iterating and skipping)."""
        start = offset_position(position, "iterable")
        return self._iter(start, check_limit_hint(limit_hint))

    def _iter(
        self, start: int, limit_hint: int | None
    ) -> Generator[tuple[T, Position], None, None]:
        factory = self._factory
        it = iter(self._iterable if factory is None else factory())  # type: ignore[arg-type]
        try:
            stop = None if limit_hint is None else start + limit_hint + 1
            # islice never asks the iterable for more than `stop` items.
            yield from zip(islice(it, start, stop), count(start + 1))
        finally:
            close = getattr(it, "close", None)
            if close is not None:
                close()

    def describe(self) -> dict[str, JSONValue]:
        """``{"kind": "iterable"}``: an iterable is identified by the caller's scope. A
        set's order is its members' hash order, which for strings differs between
        processes unless they share the hash seed (forked workers, ``PYTHONHASHSEED``):
        a set adds ``"order"``, a mark of this process's seed, so that a cursor resumed
        where the order may differ is refused rather than skip or repeat items."""
        if self._order is not None:
            return {"kind": "iterable", "order": self._order}
        return {"kind": "iterable"}


#: A mark of this process's string hash seed: equal in two processes when their sets of
#: the same strings, built alike, iterate in one order.
_HASH_ORDER: Final = f"hash:{hash('jsonbudget/set-order') & 0xFFFFFFFFFFFF:012x}"


class AsyncIterableSource(AsyncSource[T]):
    """Items of a re-iterable async iterable (or a factory returning one), by offset.

    Resuming re-iterates and skips, so it costs O(position), like `IterableSource`.
    """

    __slots__ = ("_factory", "_iterable")

    def __init__(
        self, iterable_or_factory: AsyncIterable[T] | Callable[[], AsyncIterable[T]]
    ) -> None:
        # As in `IterableSource`: the re-iterable itself, so that the source pickles.
        self._iterable: AsyncIterable[T] | None = None
        self._factory: Callable[[], AsyncIterable[T]] | None = None
        if isinstance(iterable_or_factory, AsyncIterable):
            if _is_one_shot(iterable_or_factory):
                raise TypeError(_ONE_SHOT)
            self._iterable = iterable_or_factory
        elif callable(iterable_or_factory):
            self._factory = iterable_or_factory
        else:
            raise TypeError(
                "AsyncIterableSource needs a re-iterable async iterable or a factory, "
                f"not {type(iterable_or_factory).__name__}"
            )

    def aopen(
        self, position: Position | None, *, limit_hint: int | None = None
    ) -> AsyncGenerator[tuple[T, Position], None]:
        """Yield items from offset *position* on (re-iterating and skipping)."""
        start = offset_position(position, "async iterable")
        return self._aiter(start, check_limit_hint(limit_hint))

    async def _aiter(
        self, start: int, limit_hint: int | None
    ) -> AsyncGenerator[tuple[T, Position], None]:
        factory = self._factory
        it = aiter(self._iterable if factory is None else factory())  # type: ignore[arg-type]
        stop = None if limit_hint is None else start + limit_hint + 1
        i = 0
        try:
            while stop is None or i < stop:
                try:
                    item = await anext(it)
                except StopAsyncIteration:
                    return
                i += 1
                if i > start:
                    yield item, i
        finally:
            aclose = getattr(it, "aclose", None)
            if aclose is not None:
                await aclose()

    def describe(self) -> dict[str, JSONValue]:
        """``{"kind": "async_iterable"}``."""
        return {"kind": "async_iterable"}


_ONE_SHOT = (
    "a one-shot iterator or generator cannot be resumed at a cursor; pass a "
    "re-iterable (a list, or an object whose __iter__ starts afresh) or a factory "
    "such as `lambda: make_rows()` to IterableSource / AsyncIterableSource"
)


_FRAME = (
    "a {name} iterates over its columns, not its rows, so its pages would hold the column "
    'labels; pass its rows: df.to_dict("records") (pandas; df.to_dicts() in polars), or '
    "IterableSource(lambda: df.itertuples(index=False)) (each row an array, not copied "
    "out first)"
)


def _is_frame(obj: object) -> bool:
    """Whether *obj* is a data frame (pandas, polars, modin, ...), told by its type's
    ``columns`` and ``to_dict`` without importing any of them: iterating one gives its
    column labels (or columns), a mapping's keys in all but name."""
    cls = type(obj)
    return hasattr(cls, "columns") and callable(getattr(cls, "to_dict", None))


#: What `as_source` takes: a source, or a sequence, re-iterable or async re-iterable of
#: items (a one-shot iterator is refused at run time: it cannot be resumed).
SourceLike: TypeAlias = (
    Source[Any] | AsyncSource[Any] | Sequence[Any] | Iterable[Any] | AsyncIterable[Any]
)


def as_source(obj: object) -> Source[object] | AsyncSource[object]:
    """Return *obj* as a source.

    A `Source` or `AsyncSource` is returned as is; a sequence becomes a `SequenceSource`;
    a re-iterable an `IterableSource`; an async re-iterable an `AsyncIterableSource`.
    A one-shot iterator or generator raises `TypeError` (it cannot be resumed), as do
    strings, bytes, mappings and data frames (paging their characters, keys or column
    labels is almost always a mistake) and anything else.
    """
    if type(obj) is list or type(obj) is tuple:  # the common case, before the slow checks
        return SequenceSource(obj)
    if isinstance(obj, SequenceSource | IterableSource | AsyncIterableSource):
        return obj
    if isinstance(obj, Source | AsyncSource):  # structural (runtime_checkable): slower
        return obj
    if isinstance(obj, str | bytes | bytearray | memoryview | Mapping):
        raise TypeError(
            f"a {type(obj).__name__} is not a source of items; wrap it in a list "
            "(or page its items explicitly)"
        )
    if isinstance(obj, Sequence):
        return SequenceSource(obj)
    if _is_one_shot(obj):
        raise TypeError(_ONE_SHOT)
    if isinstance(obj, Iterable):
        if _is_frame(obj):
            raise TypeError(_FRAME.format(name=type(obj).__name__))
        return IterableSource(obj)
    if isinstance(obj, AsyncIterable):
        return AsyncIterableSource(obj)
    raise TypeError(f"cannot page a {type(obj).__name__}: it is neither a sequence nor iterable")

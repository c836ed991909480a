"""Native values: the types tools return, as their own libraries write them, walked lazily.

The encoder meets a value's type in one place (`adapt`, called before ``default``). A
pydantic model, a msgspec Struct or an attrs instance becomes a `MapView` (its members
in its library's order, under its library's names); a NumPy array, and a sequence
orjson would not write (a deque, a namedtuple without ``default``), a `SeqView`; a
`Decimal` or an ``orjson.Fragment`` a `Raw` JSON text; a source's `Clipped` cell a
`Clip`, a cut string whose marker counts from the whole value. The renderer walks a view
as it walks a dict or a list, and a view converts a member only when the renderer
reaches it, so a model with a 1 GB field or a 10-million-item list costs about the budget.

Byte identity comes from `whole`: when a lower bound of the value's size fits the room
(walked the way `bound` walks JSON, stopping once it passes the room) and nothing in it
needs a marker, the value's own library writes it (``model_dump_json()``,
``msgspec.json.encode``, orjson with ``OPT_SERIALIZE_NUMPY``), and those bytes are kept
if they fit.

A library is used only if something already imported it: a value of a type from a module
that is not in ``sys.modules`` cannot exist, so this module imports none of them.
"""

from __future__ import annotations

import base64
import collections
import dataclasses
import datetime as _dt
import decimal
import enum
import json
import math
import operator
import os
import sys
import types
import typing
import uuid
from collections.abc import Callable, Container, Iterable, Iterator, Mapping, Sequence, Sized
from functools import lru_cache, partial
from itertools import chain, islice
from typing import Any, Final, Literal

import orjson

from .._sources.base import Clipped
from ..errors import EncodeError
from . import bound as _bound

__all__ = [
    "COUNTED_VIEWS",
    "UNKNOWN",
    "VIEWS",
    "WALKABLE",
    "Binary",
    "Blob",
    "Clip",
    "Converted",
    "MapView",
    "Options",
    "Raw",
    "SeqView",
    "Unencodable",
    "adapt",
    "dataclass_members",
    "fallback",
    "whole",
    "written_alike",
]

Binary = Literal["marker", "base64"]

#: What `adapt` and `fallback` return for a value they do not handle.
UNKNOWN: Final = object()

_dumps = orjson.dumps
_loads = orjson.loads
_JSONError = orjson.JSONEncodeError
_NUMPY_OPT = orjson.OPT_SERIALIZE_NUMPY
# Inside `whole`, dataclasses go through `_as_fragment` too: a pydantic dataclass is one.
_WHOLE_OPT = orjson.OPT_SERIALIZE_NUMPY | orjson.OPT_PASSTHROUGH_DATACLASS
_BIG = 1 << 62
_PLAIN: frozenset[type] = frozenset({str, int, float, bool, type(None)})
_NUMBERLESS: frozenset[type] = frozenset({str, type(None)})
_JSON: frozenset[type] = frozenset(
    {str, int, float, bool, type(None), dict, list, tuple, *_bound.BOUNDED_SCALARS}
)
#: How deep the checks that walk a value (or a pydantic schema) go; past it they give up.
_CHECK_DEPTH: Final = 64
#: How deep annotations are followed: a recursive alias goes no deeper.
_ANNOTATION_DEPTH: Final = 16
_NS_PER_US: Final = 1000
#: The widest float dtype whose values a double holds exactly, in bytes.
_DOUBLE_BYTES: Final = 8


class Options:
    """The encoder options adapters need: the binary mode and the call's whole budget."""

    __slots__ = ("binary", "max_bytes")

    def __init__(self, binary: Binary, max_bytes: int) -> None:
        self.binary = binary
        self.max_bytes = max_bytes


_NO_LIMIT = Options("marker", _BIG)


class Raw:
    """A JSON text known to be valid (a Decimal's number, a checked Fragment): written as is.

    *what* is what the marker says when the text does not fit its room.
    """

    __slots__ = ("data", "what")

    def __init__(self, data: bytes, what: str) -> None:
        self.data = data
        self.what = what


class Clip:
    """A text a source cut before the encoder saw it (a `Clipped` value): written as a cut
    string, never whole, whose marker counts from the whole value's length.

    *text* is the head as written (a text head, or a binary head in base64); `omitted`
    says how much of the whole value a prefix of *text* leaves out, in *unit*.
    """

    __slots__ = ("b64", "text", "total", "unit")

    def __init__(
        self, text: str, total: int, unit: Literal["chars", "bytes"], *, b64: bool
    ) -> None:
        self.text = text
        self.total = total
        self.unit = unit
        self.b64 = b64

    def keep(self, kept: int) -> int:
        """The characters of a prefix of *kept* that can stand: whole base64 quanta only."""
        return kept - kept % 4 if self.b64 else kept

    def omitted(self, kept: int) -> int:
        """How much of the whole value the first *kept* characters of *text* leave out."""
        text = self.text
        if self.b64:
            return self.total - kept // 4 * 3
        if self.unit == "chars":
            return self.total - kept
        return self.total - len(text[:kept].encode("utf-8", "surrogatepass"))


class Blob:
    """Binary data under ``binary="base64"``, encoded no further than it is shown.

    Written as the base64 string of all of it (`text`) where that fits, else cut as that
    string is (`head`: a `Clip` of the first characters a room can show, counting from the
    whole string's length): the same bytes, without encoding megabytes to show a page.
    """

    __slots__ = ("chars", "data", "n")

    def __init__(self, data: bytes | bytearray | memoryview, n: int) -> None:
        self.data = data
        self.n = n
        self.chars = (n + 2) // 3 * 4  # its base64's characters

    def text(self) -> str:
        return base64.b64encode(self.data).decode("ascii")

    def head(self, room: int) -> Clip:
        """A cut string of its base64's first characters, at least *room* of them."""
        part = self.data[: min(self.n, (room + 3) // 4 * 3)]
        return Clip(base64.b64encode(part).decode("ascii"), self.chars, "chars", b64=False)


class Unencodable:
    """Said to the encoder: this value gets the unencodable marker saying *what*."""

    __slots__ = ("what",)

    def __init__(self, what: str) -> None:
        self.what = what


class Again:
    """Said to the encoder: dispatch *value* as any value is (`default`, the fallback,
    the marker), in place of the value `adapt` was given. A RootModel's root that
    pydantic refuses is such a value: it stands where the model stood."""

    __slots__ = ("value",)

    def __init__(self, value: Any) -> None:
        self.value = value


def _identity(v: Any) -> Any:
    return v


class _Computed:
    """A pydantic computed field: evaluated only when the renderer reaches it, and once:
    each size walk of the view and its rendering see the one value."""

    __slots__ = ("_value", "name", "obj")

    def __init__(self, obj: Any, name: str) -> None:
        self.obj = obj
        self.name = name
        self._value: Any = UNKNOWN

    def value(self) -> Any:
        v = self._value
        if v is not UNKNOWN:
            return v
        try:
            v = self._value = getattr(self.obj, self.name)
        except MemoryError:
            raise  # as itself, whatever raised it: the encoder's rule (see encoder.md)
        except Exception as exc:  # chained, not swallowed: the caller sees its own error
            raise EncodeError(
                f"computed field {self.name} raised {type(exc).__name__}", path=None
            ) from exc
        return v


class _Typed:
    """A model's member with a declared type: converted by the converter for that type."""

    __slots__ = ("pconv", "value")

    def __init__(self, value: Any, pconv: Any) -> None:
        self.value = value
        self.pconv = pconv


class MapView(Mapping[Any, Any]):
    """A native value's members as a read-only mapping, in its library's order.

    *members* holds ``(key, value)`` for the fields (as many as the class declares);
    *extra* is a mapping taken lazily after them (pydantic's extra fields). Values pass
    through *conv* once, when first reached, so a library's leaf types are written its
    way; *native* writes the whole value with its library.
    """

    __slots__ = ("_conv", "_extra", "_keys", "_native", "_raw", "_src", "_vals")

    def __init__(
        self,
        members: list[tuple[Any, Any]],
        conv: Callable[[Any], Any],
        *,
        src: Any,
        extra: Mapping[Any, Any] | None = None,
        native: Callable[[], bytes] | None = None,
    ) -> None:
        self._keys = [k for k, _ in members]
        self._raw = [v for _, v in members]
        self._vals: list[Any] = [UNKNOWN] * len(members)
        self._conv = conv
        self._extra = extra or None
        self._native = native
        self._src = src

    def __len__(self) -> int:
        return len(self._keys) + (len(self._extra) if self._extra else 0)

    def _value(self, i: int) -> Any:
        v = self._vals[i]
        if v is UNKNOWN:
            raw = self._raw[i]
            if type(raw) is _Typed:
                inner = raw.value
                if type(inner) is _Computed:
                    inner = inner.value()
                v = self._vals[i] = raw.pconv.conv(inner)
                return v
            if type(raw) is _Computed:
                raw = raw.value()
            v = self._vals[i] = self._conv(raw)
        return v

    def __iter__(self) -> Iterator[Any]:
        yield from self._keys
        if self._extra:
            yield from self._extra

    def items(self) -> Iterator[tuple[Any, Any]]:  # type: ignore[override]
        # A generator, not an ItemsView: the renderer takes a prefix, never all of it.
        for i, k in enumerate(self._keys):
            yield k, self._value(i)
        if self._extra:
            conv = self._conv
            for k, v in self._extra.items():
                yield k, conv(v)

    def raw_items(self) -> Iterator[tuple[Any, Any]]:
        """Members before conversion, for the size walk."""
        for k, raw in zip(self._keys, self._raw, strict=True):
            v = raw.value if type(raw) is _Typed else raw
            yield k, (v.value() if type(v) is _Computed else v)
        if self._extra:
            yield from self._extra.items()

    def __getitem__(self, key: Any) -> Any:
        for i, k in enumerate(self._keys):
            if k == key:
                return self._value(i)
        if self._extra and key in self._extra:
            return self._conv(self._extra[key])
        raise KeyError(key)

    def __contains__(self, key: object) -> bool:
        return key in self._keys or bool(self._extra and key in self._extra)

    def __repr__(self) -> str:
        return f"<fields of {type(self._src).__name__}>"


_KEY_SCAN = 4096


class _DictView(MapView):
    """A dict inside a native value: keys and values written as its library writes them."""

    __slots__ = ("_asked", "_key")

    def __init__(
        self, d: Mapping[Any, Any], conv: Callable[[Any], Any], key: Callable[[Any], Any]
    ) -> None:
        super().__init__([], conv, src=d)
        self._key = key
        self._asked: dict[object, bool] = {}  # `__contains__` answers: each render asks

    def __len__(self) -> int:
        return len(self._src)

    def __iter__(self) -> Iterator[Any]:
        key = self._key
        return (key(k) for k in self._src)

    def items(self) -> Iterator[tuple[Any, Any]]:  # type: ignore[override]
        key, conv = self._key, self._conv
        return ((key(k), conv(v)) for k, v in self._src.items())

    def raw_items(self) -> Iterator[tuple[Any, Any]]:
        key = self._key
        return ((key(k), v) for k, v in self._src.items())

    def __getitem__(self, k: Any) -> Any:
        if type(k) is str and k in self._src:
            return self._conv(self._src[k])
        for k2, v in self._src.items():
            if type(k2) is not str and self._key(k2) == k:
                return self._conv(v)
        raise KeyError(k)

    def __contains__(self, k: object) -> bool:
        # Asked for the key of the left-out-keys marker ("…"): a non-str key rewritten to
        # that text is looked for among the first keys only, so that a dict of millions
        # costs the budget; past them the marker's key could repeat one (never lose one).
        if k in self._src:
            return True
        found = self._asked.get(k)
        if found is None:
            head = islice(self._src, _KEY_SCAN)
            # A number's or a bool's text is never a marker's key: only other types are asked.
            found = self._asked[k] = any(
                type(k2) not in _PLAIN and self._key(k2) == k for k2 in head
            )
        return found


#: The items a view reads first for the size walk; each run after it is four times longer.
_FIRST_RUN: Final = 64
#: Sources whose items are the objects they store: an earlier run's are checked by identity.
_STORED: Final = frozenset({list, collections.deque})


class SeqView(Sequence[Any]):
    """A sequence the renderer can index and slice, items converted as they are reached.

    Over a NumPy array, a deque, a set, a namedtuple, a list inside a model. A set (or
    anything without indexing) is pulled in order and only as far as it is read.

    What it reads of its source it keeps: read once, a run at a time as the renderer asks
    for more, each run a snapshot of its items. A source that no longer holds the count
    the view measured (a hook, a finalizer or another thread emptied, popped from or added
    to it), or holds other objects where an earlier run read them, is read no further:
    the view then ends where its snapshot ends, its count still the one measured, so a cut
    counts what the source held when it was read (as for a list, `EncodeCall._read`).
    """

    __slots__ = ("_conv", "_ended", "_it", "_n", "_native", "_plain", "_pulled", "_src")

    def __init__(
        self,
        seq: Any,
        conv: Callable[[Any], Any],
        *,
        indexable: bool = True,
        native: Callable[[], bytes] | None = None,
        plain: frozenset[type] = frozenset(),
    ) -> None:
        self._src = seq
        self._n = len(seq)
        self._conv = conv
        self._plain = plain  # the types *conv* returns unchanged
        self._native = native
        self._it: Iterator[Any] | None = None if indexable else iter(seq)
        self._pulled: list[Any] = []  # the snapshot: the items read so far, in order
        self._ended = False  # the source changed: nothing past the snapshot is read

    def __len__(self) -> int:
        return self._n

    def _raw(self, start: int, stop: int) -> Any:
        """Items *start* to *stop* of the snapshot, read on as far as *stop*; fewer where
        the source changed before they were read."""
        pulled = self._pulled
        if stop > len(pulled) and not self._ended:
            self._read_on(stop)
        return pulled[start:stop]

    def _read_on(self, stop: int) -> None:
        """The snapshot read on to item *stop*, in one run, taken only if the source still
        is what the view measured and read: else the view ends (see the class)."""
        src = self._src
        pulled = self._pulled
        done = len(pulled)
        # A run reads at least as many items as all runs before it: whatever the
        # callers' slices (a spill's fixed batches), a view of n items is read in
        # O(log n) runs, and the checks below of what earlier runs read cost O(n) in
        # all. It reads at most twice what was asked for.
        stop = min(max(stop, 2 * done), self._n)
        earlier: list[Any] | None = None  # a deque's items the run read again
        try:
            it = self._it
            if it is None:
                if isinstance(src, list | tuple | range):
                    part = src[done:stop]
                elif isinstance(src, collections.deque):
                    # Indexing a deque costs the distance from an end: read from its
                    # start instead, which the identity check below walks anyway.
                    part = list(islice(src, stop))
                    earlier, part = part[:done], part[done:]
                else:  # a Sequence of the caller's: indexing is all it promises
                    part = [src[i] for i in range(done, stop)]
            else:
                part = list(islice(it, stop - done))
            # No Python code runs between the run and these checks (a compiled len; a
            # list's, a deque's items compared by identity), so the run is of one state.
            same = len(part) == stop - done and len(src) == self._n
            if same and done and type(src) in _STORED:
                same = all(map(operator.is_, pulled, earlier or islice(src, done)))
        except (IndexError, RuntimeError):  # it shrank mid-run; a set changed meanwhile
            same = False
        if same:
            pulled += part
        else:
            self._ended = True

    def changed(self) -> EncodeError:
        # Refused, never written as a lie: the length was promised in the output already.
        name = type(self._src).__name__
        return EncodeError(f"{name} said it held {self._n} items, then changed", path=None)

    def __getitem__(self, index: Any) -> Any:
        if isinstance(index, slice):
            start, stop, _ = index.indices(self._n)
            return self._slice(self._raw(start, stop))
        if not -self._n <= index < self._n:
            raise IndexError(index)
        index %= self._n
        part = self._raw(index, index + 1)
        if not part:
            raise IndexError(index)  # past where the view ended: its source changed
        return self._conv(part[0])

    def _slice(self, part: Any) -> list[Any]:
        conv = self._conv
        if conv is _identity:
            return list(part)
        # A run of plain items (a list of ints in a model) is taken as is: one C pass,
        # unless it holds an int its library writes and orjson refuses.
        types = set(map(type, part))
        if self._plain and types <= self._plain:
            ints = part if len(types) == 1 else [v for v in part if type(v) is int]
            if int not in types or not (_wide(min(ints)) or _wide(max(ints))):
                return list(part)
        return [conv(v) for v in part]

    def raw_iter(self) -> Iterable[Any]:
        """Items before conversion, for the size walk: from the snapshot, read on in
        growing runs as the walk goes (it stops at its cap), never from the live source
        (a deque or a set changed mid-walk raises). A list or a tuple is walked itself:
        its iteration never raises, and the walk only bounds what the renderer writes."""
        src = self._src
        if type(src) is list or type(src) is tuple:
            return src
        return self._runs()

    def _runs(self) -> Iterator[Any]:
        at, run = 0, _FIRST_RUN
        while at < self._n:
            part = self._raw(at, min(at + run, self._n))
            yield from part
            if len(part) < run and at + len(part) < self._n:
                return  # the view ended: its source changed
            at += len(part)
            run *= 4

    def __repr__(self) -> str:
        return f"<items of {type(self._src).__name__}>"


class _ArrayView(SeqView):
    """One level of a NumPy array: sub-arrays are views, scalars written as orjson does."""

    __slots__ = ()

    def _raw(self, start: int, stop: int) -> Any:
        # An array's shape cannot change while something refers to it: read as asked.
        part = self._src[start:stop]
        if len(part) != stop - start:  # only `resize(refcheck=False)` gets here
            raise self.changed()
        return part

    def raw_iter(self) -> Iterable[Any]:
        return self._src  # type: ignore[no-any-return]

    def _slice(self, part: Any) -> list[Any]:
        if part.ndim == 1 and part.dtype.kind in "iub":
            return part.tolist()  # type: ignore[no-any-return]  # exact ints and bools
        conv = self._conv
        return [conv(v) for v in part]


class _MaskedView(SeqView):
    """One level of a masked array, read element by element (a row of a masked array is
    a masked array again): a masked element is null."""

    __slots__ = ()

    def _raw(self, start: int, stop: int) -> Any:
        try:  # fixed in shape, as an array is (`_ArrayView`)
            return [self._src[i] for i in range(start, stop)]
        except IndexError as exc:
            raise self.changed() from exc

    def raw_iter(self) -> Iterable[Any]:
        return self._src  # type: ignore[no-any-return]


#: What the renderer walks as it is (besides the JSON types).
WALKABLE: Final = (MapView, SeqView, Raw, Clip, Blob)
#: What `adapt` makes of a dataclass, a model, a Struct, an attrs instance or a NumPy
#: array: views the encoder renders as it renders dicts and lists.
VIEWS: Final = frozenset({MapView, _DictView, SeqView, _ArrayView, _MaskedView})
#: The views whose len() costs no code of the caller's: each counts its own members, but
#: a dict's view asks its dict, which may be any Mapping.
COUNTED_VIEWS: Final = VIEWS - {_DictView}
#: What `adapt` returns that the renderer walks as it is.
_ADAPTED: Final = VIEWS | _JSON | {Raw, Clip, Blob, Unencodable}


# -- selection -----------------------------------------------------------------------


def adapt(obj: Any, opts: Options) -> Any:
    """*obj* as something the renderer walks, or `UNKNOWN`. Called before ``default``.

    Returns a view, a `Raw`, an `Unencodable`, or a plain JSON value.
    """
    t = type(obj)
    mods = sys.modules
    if t is Unencodable or t is Again:
        return obj  # a view's member that already said so
    if t is orjson.Fragment:
        return _fragment(obj, opts)
    if t is Clipped:
        return _clipped(obj, opts)
    if t.__name__ == "Decimal" and t.__module__ == "decimal":
        return _decimal(obj)
    if "decimal" in mods and isinstance(obj, mods["decimal"].Decimal):
        # A subclass as its base: its value copied in C, none of its own methods asked.
        return _decimal(mods["decimal"].Decimal(obj))
    if isinstance(obj, bytes | bytearray | memoryview):  # a subclass as its base
        return _binary(obj, opts)
    if "pydantic" in mods:
        out = _pydantic(obj, opts)
        if out is not UNKNOWN:
            return out
    if "msgspec" in mods and isinstance(obj, mods["msgspec"].Struct):
        return _struct(obj, opts)
    if "msgspec" in mods and t is mods["msgspec"].Raw:
        # msgspec inserts its bytes unchecked: invalid ones made invalid output.
        return _json_text(bytes(obj), "msgspec.Raw", opts)
    if "attr" in mods and getattr(t, "__attrs_attrs__", None) is not None:
        return _attrs(obj, opts)
    if "numpy" in mods:
        np = mods["numpy"]
        if isinstance(obj, np.ndarray):
            return _array(obj, opts)
        if isinstance(obj, np.generic):
            return _np_scalar(obj, opts)
    if dataclasses.is_dataclass(obj) and not isinstance(obj, type):
        return dataclass_members(obj)
    return UNKNOWN


def fallback(obj: Any) -> Any:
    """What a value orjson refuses becomes when there is no ``default``, or `UNKNOWN`.

    A subclass of a type orjson writes (float, UUID, datetime, date, time) is written as
    its base type; any other ``Mapping`` as an object; a ``UserString`` as its text; any
    other sized ``Sequence`` (a namedtuple, a tuple subclass, a deque, a range) as an
    array.
    """
    if isinstance(obj, float):
        return float.__float__(obj)  # its own value: a subclass's __float__ is not asked
    if isinstance(obj, uuid.UUID):
        return uuid.UUID(int=obj.int)
    if isinstance(obj, _dt.date | _dt.time):
        try:
            base = _as_base_time(obj)
        except (TypeError, ValueError, OverflowError):
            # Fields that make no time (pandas' NaT is a datetime whose fields are NaN):
            # not a value of its base type, so the marker, as for any other.
            return UNKNOWN
        if isinstance(base, _dt.datetime):
            # pandas' Timestamp holds nanoseconds past its fields: not to be lost unseen.
            ns = getattr(obj, "nanosecond", 0)
            if type(ns) is int and 0 < ns < _NS_PER_US:
                return _with_nanoseconds(base, ns, type(obj).__name__)
        return base
    if isinstance(obj, Mapping):
        return obj
    if isinstance(obj, collections.UserString) and isinstance(obj.data, str):
        # Its text: as a Sequence, each character is a UserString again, 64 levels deep.
        return str.__str__(obj.data)
    if isinstance(obj, Sequence) and not isinstance(obj, str | bytes | bytearray | memoryview):
        # A count from Python code may not be the truth, and items of its own (an
        # __iter__ or __getitem__ in Python, as list() would ask) are its items: such a
        # sequence is iterated.
        t = type(obj)
        indexed = counts_in_c(t) and _in_c(t, "__getitem__") and _in_c(t, "__iter__")
        return SeqView(obj, _identity) if indexed else obj
    return UNKNOWN


def _as_base_time(obj: _dt.date | _dt.time) -> _dt.date | _dt.time:
    """A datetime, date or time subclass's value as its base type, built from its fields."""
    if isinstance(obj, _dt.datetime):
        return _dt.datetime(
            obj.year, obj.month, obj.day, obj.hour, obj.minute, obj.second,
            obj.microsecond, obj.tzinfo, fold=obj.fold,
        )  # fmt: skip
    if isinstance(obj, _dt.date):
        return _dt.date(obj.year, obj.month, obj.day)
    return _dt.time(obj.hour, obj.minute, obj.second, obj.microsecond, obj.tzinfo, fold=obj.fold)


def _with_nanoseconds(base: _dt.datetime, ns: int, what: str) -> Any:
    """A datetime that holds *ns* nanoseconds past *base* (pandas' ``Timestamp``): as
    orjson writes *base*, with 9 fractional digits, as ``Timestamp.isoformat()`` has them.

    Built from *base*, its offset read as the renderer reads it for any datetime (then
    written as orjson writes that offset): ``datetime`` has no field to carry them, and
    orjson would cut them off unreported."""
    text = base.replace(microsecond=0, tzinfo=None).isoformat()
    text += f".{base.microsecond:06d}{ns:03d}"
    if base.tzinfo is not None:
        try:
            offset = base.utcoffset()
        except MemoryError:
            raise  # the interpreter's: the value is fine
        except Exception:  # noqa: BLE001 - a tzinfo's own code: unencodable, as anywhere
            return UNKNOWN
        text += offset_text(_dt.timedelta(0) if offset is None else offset)  # orjson: +00:00
    return Raw(_dumps(text), what)


def offset_text(offset: _dt.timedelta) -> str:
    """UTC offset *offset* as ``isoformat()`` writes it: ``+HH:MM`` as orjson does, then
    the seconds and microseconds where it has them, which orjson drops."""
    sign = "-" if offset < _dt.timedelta(0) else "+"
    minutes, rest = divmod(abs(offset), _dt.timedelta(minutes=1))
    text = f"{sign}{minutes // 60:02d}:{minutes % 60:02d}"
    if rest:
        text += f":{rest.seconds:02d}"
        if rest.microseconds:
            text += f".{rest.microseconds:06d}"
    return text


def datetime_json(d: _dt.datetime) -> bytes | None:
    """*d*, whose tzinfo is None or a built-in `timezone`, written whole where orjson
    would cut it: an offset with seconds (Paris's +00:09:21 before 1911) orjson writes
    in minutes (+00:09), another instant with no mark. Then its fields as orjson writes
    them and its offset as ``isoformat()`` does; None where orjson writes it whole."""
    tz = d.tzinfo
    offset = None if tz is None or tz is _dt.UTC else tz.utcoffset(None)
    if offset is None or not (offset.seconds % 60 or offset.microseconds):
        return None
    return _dumps(d.replace(tzinfo=None))[:-1] + offset_text(offset).encode() + b'"'


def _in_c(t: type, name: str) -> bool:
    return isinstance(getattr(t, name, None), _C_METHODS)


def counts_in_c(t: type) -> bool:
    """Whether *t*'s ``__len__`` is compiled (a deque, a range): a count no Python code
    can make disagree with the items."""
    return _in_c(t, "__len__")


def reads_stored(t: type) -> bool:
    """Whether a ``dict``, ``list`` or ``tuple`` subclass *t* is read as it stores its
    members (its ``items()``, for a dict, or its ``__iter__`` is compiled): only then is
    its stored count the count of what is written for it."""
    return _in_c(t, "items" if issubclass(t, dict) else "__iter__")


_C_METHODS: Final = (types.WrapperDescriptorType, types.MethodDescriptorType)


def dataclass_members(obj: Any) -> dict[Any, Any]:
    """A dataclass instance's members exactly as orjson selects them.

    Without ``__slots__``, every entry of the instance ``__dict__`` (attributes set after
    construction too); with ``__slots__``, the declared fields (not ``ClassVar`` or
    ``InitVar`` pseudo-fields). Either way a name that starts with ``_`` is left out.
    """
    t = type(obj)
    d = getattr(obj, "__dict__", None)
    if d is not None and "__slots__" not in t.__dict__:
        return {k: v for k, v in d.items() if not (type(k) is str and k.startswith("_"))}
    field_kind = dataclasses._FIELD  # type: ignore[attr-defined]  # what orjson compares with
    return {
        name: getattr(obj, name)
        for name, f in t.__dataclass_fields__.items()
        if f._field_type is field_kind and not name.startswith("_")
    }


# -- scalars ---------------------------------------------------------------------------


#: A Decimal's adjusted exponent from which it may round to an infinite double.
_FLOAT_EXPONENT: Final = 308


def _decimal(d: Any) -> Any:
    """A finite Decimal is the JSON number ``str(d)``; NaN and the infinities get a marker.

    ``str`` of a finite Decimal always matches JSON's number grammar (``1.10``, ``-0``,
    ``1E+2``, ``0E-7``: digits, an optional fraction, an optional signed exponent).
    """
    if not d.is_finite():
        return Unencodable(f"Decimal('{d}')")
    # 1E+400 is JSON's grammar, but every parser reading numbers as doubles (orjson, a
    # browser) refuses it or reads infinity: like an int beyond 64 bits, it gets a marker.
    if d.adjusted() >= _FLOAT_EXPONENT and math.isinf(float(d)):
        return Unencodable("Decimal beyond the float range")
    text = str(d)
    return Raw(text.encode("ascii"), f"Decimal of {_digits(text)} digits")


def _digits(text: str) -> int:
    """The digits of the coefficient of a finite Decimal written as *text* (``str(d)``),
    ``len(d.as_tuple().digits)`` without a tuple of them: its sign, point, leading zeros
    and exponent are not digits of the number (``-0.0012E+5`` has 2)."""
    coefficient = text.partition("E")[0].lstrip("-").replace(".", "")
    return len(coefficient.lstrip("0")) or 1  # zero's coefficient is the one digit 0


def _fragment(frag: Any, opts: Options) -> Any:
    # orjson offers no way to read a Fragment's length: writing it is reading it.
    try:
        data = _dumps(frag)
    except _JSONError:  # contents that are not bytes or str, or a str with surrogates
        return Unencodable("Fragment that is not valid JSON")
    return _json_text(data, "Fragment", opts)


def _json_text(data: bytes, what: str, opts: Options) -> Any:
    """A caller's encoded JSON (an ``orjson.Fragment``, a ``msgspec.Raw``) as a `Raw`, its
    bytes written as they are, once they parse as one JSON value; else a marker."""
    if len(data) > opts.max_bytes:
        # It never shows: cut, it is its marker; whole, it is too big, as any value that
        # does not fit (a gate spills it), not unencodable at every size. Never written,
        # so not parsed.
        return Raw(data, f"{what} of {len(data)} bytes")
    try:
        _loads(data)
    except orjson.JSONDecodeError:  # invalid UTF-8, several values, nothing at all
        return Unencodable(f"{what} that is not valid JSON")
    if b"{" in data:
        # No output holds a key twice (a pointer names one member; a spilled result's
        # reader takes the first): an object of the text that does is read into its
        # members, both in place, and the renderer marks the repeat as any other.
        repeats = _with_repeats(data)
        if repeats is not None:
            return repeats
    return Raw(data, f"{what} of {len(data)} bytes")


def _with_repeats(data: bytes) -> Any:
    """JSON text *data* read with every object that holds a key twice as a `_Repeated`,
    if one does; else None (its bytes can be written as they are)."""
    found = False

    def pairs(members: list[tuple[str, Any]]) -> Any:
        nonlocal found
        out = _object(members)
        found = found or type(out) is _Repeated
        return out

    try:
        # Numbers as written (1.10, 1E2, 3.14159265358979323846, integers past 64
        # bits): read into floats or ints they would be written otherwise.
        value = json.loads(
            data, object_pairs_hook=pairs, parse_float=_number_text, parse_int=_number_text
        )
    except RecursionError:
        # Nested past what the standard library's scanner takes (about 1,000 levels,
        # where orjson takes 1,024): written as it is, repeats and all (docs/values.md).
        return None
    return value if found else None


def _number_text(text: str) -> Raw:
    return Raw(text.encode("ascii"), f"number of {len(text)} characters")


def _binary(b: Any, opts: Options) -> Any:
    try:
        n = b.nbytes if type(b) is memoryview else len(b)
    except ValueError:  # a released memoryview: no bytes left to write
        return Unencodable("released memoryview")
    if opts.binary == "base64":
        if (n + 2) // 3 * 4 + 2 > opts.max_bytes:
            # It can never show whole: cut as a source's cut cell is, only what a budget
            # could show encoded (handed to `default`, it raised under
            # unencodable="error" where a shorter one was cut).
            return _clipped(Clipped(bytes(memoryview(b)[: opts.max_bytes]), n, "bytes"), opts)
        if type(b) is memoryview and not b.c_contiguous:
            b = b.tobytes()  # b64encode takes contiguous buffers only; this is at most n bytes
        # Encoded when written, as far as it shows: a hundred blobs of 700 KB, each
        # within the budget, were encoded whole to show one page (95 MB, 0.65 s).
        return Blob(b, n)
    return UNKNOWN  # `default`, then the encoder's marker: "bytes of N bytes"


def _clipped(c: Clipped, opts: Options) -> Any:
    """A source's cut cell: a text as a cut string; binary data as bytes are written."""
    head = c.head
    if isinstance(head, str):
        return Clip(head, c.length, c.unit, b64=False)
    if opts.binary == "base64":
        # Only what the budget could show is encoded: the rest is cut in any case. More
        # follows the head, so it ends at a whole group of 3 bytes: a padded last group
        # (`Pw==`) would not be a prefix of the whole value's base64.
        part = head[: min(len(head), opts.max_bytes // 4 * 3 + 3) // 3 * 3]
        return Clip(base64.b64encode(part).decode("ascii"), c.length, "bytes", b64=True)
    # Not `default`: it would see the head as if it were the whole value.
    return Unencodable(f"{type(head).__name__} of {c.length} bytes")


def _np_scalar(x: Any, opts: Options) -> Any:
    kind = x.dtype.kind
    if kind in "iub":
        return x.item()
    if kind == "f" and x.dtype.itemsize <= _DOUBLE_BYTES and not _finite(x):
        # A double holds these exactly. A long double is not one of them: orjson refuses
        # it, so it goes to ``default`` as itself (as a float, a finite 1e400 read inf).
        return Unencodable(repr(float(x)))
    if kind == "M":
        return _datetime64(x)
    if kind == "U":
        # A string like any other (cut, capped, its lone surrogates replaced), never
        # orjson's bytes, which could only be written whole or not at all. An exact str
        # of at most what the budget could show: the renderer reads no subclass.
        n = str.__len__(x)
        if n <= opts.max_bytes:
            return str.__str__(x)
        return Clip(str.__getitem__(x, slice(0, opts.max_bytes)), n, "chars", b64=False)
    try:
        data = _dumps(x, option=_NUMPY_OPT)
    except _JSONError:
        return UNKNOWN
    return Raw(data, type(x).__name__)


def _finite(x: Any) -> bool:
    f = float(x)
    return f - f == 0


def _datetime64(x: Any) -> Any:
    """A `np.datetime64` as orjson writes it, where that is the value it holds; else its
    full text, or `UNKNOWN` (``default`` and the marker meet it)."""
    np = sys.modules["numpy"]
    if np.isnat(x):
        # No time at all: orjson writes NaT as a real-looking one in some units (1970-01-01
        # in days, a day in 1677 in nanoseconds) and refuses it in others.
        return UNKNOWN
    unit, count = np.datetime_data(x.dtype)
    if count != 1:
        # orjson reads a multiple of a unit (`datetime64[2D]`) as the unit itself, and its
        # process dies on it: the same time in the unit, where that holds it exactly.
        base = x.astype(f"datetime64[{unit}]")
        if np.isnat(base) or base.astype(x.dtype) != x:
            return UNKNOWN
        x = base
    if unit == "ns" and x.astype("datetime64[us]") != x:
        # orjson writes microseconds: nanoseconds would be cut off unreported, and two
        # times would read as one. The ISO text with 9 digits, as numpy and pandas write it.
        return Raw(_dumps(np.datetime_as_string(x, unit="ns")), type(x).__name__)
    try:
        data = _dumps(x, option=_NUMPY_OPT)
    except _JSONError:
        return UNKNOWN
    return Raw(data, type(x).__name__)


def _array(a: Any, opts: Options) -> Any:
    np = sys.modules["numpy"]
    if type(a) is not np.ndarray:
        if isinstance(a, np.ma.MaskedArray):
            # A masked value is null, never the data under the mask: each element is
            # read, with its mask, only when it is written (never the whole array).
            if a.ndim == 0:
                v = a[()]
                return None if v is np.ma.masked else _np_zero_d(v, opts)
            return _MaskedView(a, partial(_masked_item, opts=opts), indexable=True)
        # A subclass indexes its own way: a matrix's row is a matrix again, so it
        # would never reach its values. Its data is an ordinary array's.
        a = a.view(np.ndarray)
    if a.ndim == 0:
        return _np_zero_d(a[()], opts)
    return _ArrayView(a, partial(_np_item, opts=opts), native=lambda: _dumps(a, option=_NUMPY_OPT))


def _np_zero_d(v: Any, opts: Options) -> Any:
    """What a 0-d array holds: a scalar of its dtype, or an object array's Python object,
    written as it is where JSON has it, else as `adapt` makes it (a Decimal, a model);
    anything else is `UNKNOWN`, so ``default`` and the marker meet the array."""
    np = sys.modules["numpy"]
    if isinstance(v, np.ndarray | np.generic):
        return _np_item(v, opts)
    if type(v) in _PLAIN_JSON:
        return v
    return adapt(v, opts)


_PLAIN_JSON: Final = frozenset({str, int, float, bool, type(None), dict, list, tuple})


def _masked_item(v: Any, opts: Options) -> Any:
    return None if v is sys.modules["numpy"].ma.masked else _np_item(v, opts)


def _np_item(v: Any, opts: Options) -> Any:
    np = sys.modules["numpy"]
    if isinstance(v, np.ndarray):
        return _array(v, opts)
    if isinstance(v, np.generic):
        out = _np_scalar(v, opts)
        # One orjson refuses (complex, bytes, void) meets `default` and the marker as
        # itself, so the marker names its type.
        return v if out is UNKNOWN else out
    return v  # an element of an object array: an ordinary value


# -- pydantic --------------------------------------------------------------------------


def _pydantic(obj: Any, opts: Options, t: Any = None, outer: _SerKey | None = None) -> Any:
    """*obj* as pydantic writes it; as class *t* (a base of its own) where a field
    declares *t*: pydantic then writes the declared fields only, never a subclass's.

    *outer*: the ``ser_json_*`` settings of the model a declared *obj* is written
    inside, which pydantic writes the values it infers in *obj* under (`_Writers`);
    None for a model written by its own serializer."""
    if t is None:
        t = type(obj)
    is_model = isinstance(obj, sys.modules["pydantic"].BaseModel)
    if not is_model and "__pydantic_fields__" not in t.__dict__:
        return UNKNOWN
    if not is_model and "__dataclass_fields__" not in t.__dict__:
        return UNKNOWN
    plan = _model_plan(t)
    if outer is None:
        outer = plan.ser_key
    if plan.whole_only:
        # A model serializer decides the whole shape: only pydantic can run it.
        if _holds_iterator(obj.__dict__):
            return _read_once(obj)
        return plan.jsonable(obj, outer=outer)
    writers = _writers(plan.ser_key, outer)
    ser = t.__pydantic_serializer__ if outer == plan.ser_key else _serializer_under(t, outer)
    fields = plan.fields_for(writers.split)
    pconv = _PydConv(writers, opts)
    conv = pconv.conv
    native = lambda: ser.to_json(obj)  # noqa: E731 - a thunk, run only if it fits
    if plan.root:
        if fields and fields[0][2]:
            # The root's type has a serializer: pydantic's.
            if _holds_iterator(obj.root):
                return _read_once(obj)
            return plan.jsonable(obj, outer=outer)
        spec = fields[0][4] if fields else None
        root = (conv if spec is None else pconv.typed(spec).conv)(obj.root)
        if type(root) not in _ADAPTED:
            # A member the converter hands back to be dispatched again (a model, a
            # pydantic or standard dataclass, a Struct, a Clipped): what `adapt` returns
            # is not dispatched again, so it is adapted here, or the renderer would
            # walk a model as the iterable of (name, value) pairs it is.
            if _root_cycle(obj):
                return Unencodable("cycle")  # the renderer's marker for one
            again = adapt(root, opts)
            if again is UNKNOWN:
                # A root pydantic refuses (an arbitrary class, bytes that are not UTF-8)
                # or a one-shot iterator: written as the same value anywhere, through
                # `default`, the fallback and the marker, or pulled as a stream. Handed
                # back as it is, the renderer would take it for a container.
                return Again(root)
            root = again
        if type(root) in VIEWS:
            root._native = native
        return root
    members: list[tuple[Any, Any]] = []
    if is_model and plan.names != tuple(obj.__dict__):
        # A field deleted and set again (or left unset): pydantic writes the fields in
        # the instance dict's order, so a cut keeps a prefix of what it writes.
        fields = _in_dict_order(fields, obj.__dict__)
    for name, key, custom, exclude_if, spec in fields:
        v = getattr(obj, name, _MISSING)
        if v is _MISSING:
            continue  # left unset by `model_construct`: pydantic leaves it out too
        if exclude_if is not None and exclude_if(v):
            continue
        if custom:
            # A field serializer sees the whole field: pydantic runs it, once, here.
            if _holds_iterator(v):
                v = _Typed(_read_once(v), _AS_IS)
            else:
                out = plan.jsonable(obj, {name}, outer)
                v = out if type(out) is Unencodable else out[key]
        elif spec is not None:
            v = _Typed(v, pconv.typed(spec))
        members.append((key, v))
    extra = getattr(obj, "__pydantic_extra__", None)
    if extra and t is not type(obj) and t.model_config.get("extra") != "allow":
        extra = None  # written as a declared base that takes no extras: pydantic drops them
    repeats = plan.may_repeat(extra)
    if plan.computed:
        if extra:
            # Extras come before computed fields: list them to keep that order.
            members += extra.items()
            extra = None
        members += [
            (
                key,
                _Computed(obj, name)
                if spec is None
                else _Typed(_Computed(obj, name), pconv.typed(spec)),
            )
            for name, key, spec in plan.computed
        ]
    if repeats:
        keys = [k for k, _ in members]
        keys += extra or ()
        if len(set(keys)) < len(keys):
            # pydantic writes a key twice (a reader keeps one): never its bytes; the
            # renderer marks the repeat.
            return _Repeated(members, conv, src=obj, extra=extra)
    return MapView(members, conv, src=obj, extra=extra, native=native)


def _in_dict_order(
    fields: list[tuple[str, str, bool, Any, _Spec | None]], d: dict[str, Any]
) -> list[tuple[str, str, bool, Any, _Spec | None]]:
    """*fields* in the order of instance dict *d*, as pydantic writes a model's fields;
    one *d* does not hold (unset by `model_construct`, deleted) pydantic leaves out."""
    at = {name: i for i, name in enumerate(d)}
    return sorted((f for f in fields if f[0] in at), key=lambda f: at[f[0]])


_MISSING = object()


def _root_cycle(obj: Any) -> bool:
    """Whether RootModel *obj*'s chain of roots that are RootModels comes back to one."""
    root_model = sys.modules["pydantic"].RootModel
    seen = {id(obj)}
    root = obj.root
    while isinstance(root, root_model):
        if id(root) in seen:
            return True
        seen.add(id(root))
        root = root.root
    return False


class Converted(Iterator[Any]):
    """The items of iterator *it*, each passed through *conv* (a library's leaf types
    written its way). The renderer keys its stream by *it*: a value converted again (a
    spill writes it) makes another `Converted`, which finds the items pulled so far."""

    __slots__ = ("conv", "it")

    def __init__(self, it: Iterator[Any], conv: Callable[[Any], Any]) -> None:
        self.it = it
        self.conv = conv

    def __next__(self) -> Any:
        return self.conv(next(self.it))


def _read_once(v: Any) -> Unencodable:
    """The marker for a value pydantic writes itself that holds a one-shot iterator: run
    to learn its size, pydantic would drain it, and every later write of it (the model
    whole, its parent's, a spill) would find it empty and say nothing."""
    name = type(v).__name__
    if isinstance(v, Iterator):
        return Unencodable(f"{name}, read once, under a serializer")
    return Unencodable(f"{name} holding an iterator, under a serializer")


def _holds_iterator(v: Any, depth: int = 0) -> bool:
    """Whether *v* holds a one-shot iterator: itself, or inside its dicts, lists, tuples,
    sets and pydantic models (to a depth of 64)."""
    if isinstance(v, Iterator):
        return True
    if depth > _CHECK_DEPTH:
        return False
    if isinstance(v, dict):
        return any(_holds_iterator(x, depth + 1) for x in chain(v, v.values()))
    if isinstance(v, list | tuple | set | frozenset):
        return any(_holds_iterator(x, depth + 1) for x in v)
    if isinstance(v, sys.modules["pydantic"].BaseModel):
        return _holds_iterator(v.__dict__, depth + 1)
    return False


class _AsIs:
    """A converter that keeps a member as it is (a `_Typed` member's, see `MapView`)."""

    __slots__ = ()
    conv = staticmethod(_identity)


_AS_IS: Final = _AsIs()


class _Plan:
    """How a pydantic class writes its members: computed once per class."""

    __slots__ = (
        "_by_split",
        "_fields",
        "_json_sers",
        "_schemas",
        "cls",
        "computed",
        "config",
        "fields",
        "keys",
        "names",
        "repeats",
        "root",
        "ser_key",
        "whole_only",
    )

    def __init__(self, t: Any) -> None:
        self.cls = t
        self._json_sers: dict[_SerKey, Any] = {}
        config = getattr(t, "model_config", None) or getattr(t, "__pydantic_config__", None)
        self.config: Mapping[str, Any] = config or {}
        self.ser_key = _ser_key(self.config)
        by_alias = bool(self.config.get("serialize_by_alias"))
        decorators = t.__pydantic_decorators__
        self.whole_only = bool(decorators.model_serializers)
        self.root = bool(getattr(t, "__pydantic_root_model__", False))
        custom = {f for d in decorators.field_serializers.values() for f in d.info.fields}
        self._schemas = _field_schemas(t)
        # Each field: name, key, whether a serializer of its own makes it pydantic's,
        # exclude_if, what it declares.
        self._fields: list[tuple[str, str, bool, Any, _Spec | None]] = []
        for name, info in t.__pydantic_fields__.items():
            if info.exclude is True:
                continue
            key = (info.serialization_alias or name) if by_alias else name
            marks = {type(m).__name__ for m in info.metadata}
            own = (
                name in custom
                or "*" in custom
                or bool(marks & {"PlainSerializer", "WrapSerializer"})
            )
            # SerializeAsAny: pydantic writes what the value is, not what is declared.
            spec = None if "SerializeAsAny" in marks else _declared(info.annotation)
            self._fields.append((name, key, own, getattr(info, "exclude_if", None), spec))
        self._by_split: dict[frozenset[type], list[tuple[str, str, bool, Any, _Spec | None]]] = {}
        self.fields = self.fields_for(_writers(self.ser_key, self.ser_key).split)
        self.computed = [
            (
                name,
                (d.info.alias or name) if by_alias else name,
                _declared(getattr(d.info, "return_type", None)),
            )
            for name, d in decorators.computed_fields.items()
        ]
        # Every field in the order validation fills the instance dict: pydantic writes a
        # model's fields in its dict's order, which this is unless one was deleted and set.
        self.names = tuple(t.__pydantic_fields__)
        # The keys pydantic writes for this class's own members. Two aliases alike, or a
        # computed field's key equal to a field's, make pydantic write one key twice (so
        # do extras named like any of them: `_pydantic` checks each instance's).
        keys = [f[1] for f in self._fields] + [c[1] for c in self.computed]
        self.keys = frozenset(keys)
        self.repeats = len(self.keys) < len(keys)

    def may_repeat(self, extra: dict[str, Any] | None) -> bool:
        """Whether pydantic may write one of this class's keys twice for an instance
        with these extras: its own keys repeat, or an extra is named like one of them."""
        return self.repeats or (extra is not None and not extra.keys().isdisjoint(self.keys))

    def fields_for(self, split: frozenset[type]) -> list[tuple[str, str, bool, Any, _Spec | None]]:
        """The fields (name, key, pydantic's to write whole, exclude_if, what it declares)
        where the leaf types in *split* are written one way declared, another inferred."""
        fields = self._by_split.get(split)
        if fields is None:
            schemas = self._schemas
            fields = self._by_split[split] = [
                (
                    name,
                    key,
                    # What the walk writes as pydantic does ("lazy"); anything else in
                    # the field's type (a serializer at any depth, an exclusion, a
                    # TypedDict...) is pydantic's to write, whole.
                    own
                    or not schemas
                    or _how_written(schemas.get(name), split, spec) == "pydantic",
                    exclude_if,
                    spec,
                )
                for name, key, own, exclude_if, spec in self._fields
            ]
        return fields

    def jsonable(
        self, obj: Any, include: set[str] | None = None, outer: _SerKey | None = None
    ) -> Any:
        """*obj* (its *include* fields) as pydantic's JSON mode makes it, serializers run,
        but with each NaN and infinity kept a float: the encoder writes its marker there,
        where pydantic writes null, and a lone surrogate is the encoder's to replace,
        where pydantic's ``to_json`` raises. Values inferred (under ``Any``, or returned
        by a serializer) are written under *outer*, the config of the model pydantic
        would be writing (this class's own when None).

        A value pydantic cannot write (an arbitrary class's instance, a NumPy array) is
        left in the output as it is, as pydantic's ``fallback`` would hand it to a hook:
        the encoder then writes it as anywhere else (NumPy, ``default``, the marker).
        Bytes that are not UTF-8, which pydantic refuses without asking ``fallback``,
        make all of it an `Unencodable` (its library cannot write it, and which bytes
        they were is pydantic's to know).

        Where two keys of one dict are spelled alike (``1`` and ``"1"``), JSON mode keeps
        one of them and ``model_dump_json()`` writes both: the object is then a
        `_Repeated`, both members in place, and the renderer marks the repeat as it does
        any repeated key (no output holds a key twice).
        """
        outer = self.ser_key if outer is None else outer
        ser = self._json_sers.get(outer)
        if ser is None:
            ser = self._json_sers[outer] = _nan_keeping(self.cls, outer)
        held: list[Any] = []
        # A string no value holds (a random one per call), and the index after it.
        tag = f"\x00jsonbudget-fallback-{os.urandom(8).hex()}-"

        def hold(v: Any) -> str:
            held.append(v)
            return f"{tag}{len(held) - 1}"

        out: Any = _MISSING
        try:
            if _keys_may_repeat(obj, include):
                out = _json_pairs(ser, obj, include, hold)
                if out is _MISSING:
                    held.clear()
            if out is _MISSING:
                out = ser.to_python(obj, mode="json", include=include, fallback=hold)
        except UnicodeDecodeError:
            # pydantic's own refusal (a serializer's error comes wrapped in its
            # PydanticSerializationError): bytes it writes as UTF-8 text that are not.
            v = obj if include is None else getattr(obj, next(iter(include)))
            if isinstance(v, bytes | bytearray | memoryview):
                n = memoryview(v).nbytes
                return Unencodable(f"{type(v).__name__} of {n} bytes, not UTF-8")
            return Unencodable(f"{type(v).__name__} holding bytes that are not UTF-8")
        return _put_back(out, tag, held) if held else out


class _Repeated(MapView):
    """An object of pydantic's JSON that holds a key twice (see `_Plan.jsonable`): its
    members in pydantic's order, written as they are; or a model whose own members
    pydantic writes under one key twice (`_pydantic`), converted as any model's. The size
    walk refuses it, so the model is never written by pydantic whole; the renderer marks
    the repeat."""

    __slots__ = ()


def _object(pairs: list[tuple[str, Any]]) -> Any:
    """A JSON object as `_json_pairs` reads it: a dict, or a `_Repeated` holding a key twice."""
    out = dict(pairs)
    return out if len(out) == len(pairs) else _Repeated(pairs, _identity, src=None)


def _json_pairs(ser: Any, obj: Any, include: set[str] | None, hold: Callable[[Any], str]) -> Any:
    """*obj* as `_Plan.jsonable` makes it, read from pydantic's JSON, which writes a key
    twice where JSON mode keeps it once; `_MISSING` where pydantic's JSON refuses what its
    JSON mode takes (a lone surrogate), or its numbers are past what Python reads."""
    try:
        data = ser.to_json(obj, include=include, fallback=hold)
    except UnicodeDecodeError:
        raise  # bytes that are not UTF-8: JSON mode refuses them too
    except ValueError:  # PydanticSerializationError: JSON mode then says what it is
        return _MISSING
    try:
        # NaN and the infinities come as the constants `_nan_keeping` asks for, which
        # json reads back as the floats.
        return json.loads(data, object_pairs_hook=_object)
    except ValueError:  # an int of more digits than Python converts
        return _MISSING


def _keys_may_repeat(obj: Any, include: set[str] | None, depth: int = 0) -> bool:
    """Whether pydantic may write a key twice for *obj* (its *include* fields): it holds
    a dict with a key that is not a str, which pydantic may spell as another key is
    (``1`` and ``"1"``), or a model whose own keys may repeat (`_own_keys_repeat`). Read
    as `_holds_iterator` reads (to a depth of 64)."""
    if include is None:
        if _own_keys_repeat(obj):
            return True
        extra = getattr(obj, "__pydantic_extra__", None) or {}
        values: Iterable[Any] = chain(obj.__dict__.values(), extra.values())
    else:
        values = (getattr(obj, name, None) for name in include)
    return any(_other_keys(v, depth) for v in values)


def _other_keys(v: Any, depth: int) -> bool:
    if depth > _CHECK_DEPTH:
        return False
    if isinstance(v, dict):
        if any(type(k) is not str for k in v):
            return True
        return any(_other_keys(x, depth + 1) for x in v.values())
    if isinstance(v, list | tuple):
        return any(_other_keys(x, depth + 1) for x in v)
    if isinstance(v, sys.modules["pydantic"].BaseModel):
        return _keys_may_repeat(v, None, depth + 1)
    if dataclasses.is_dataclass(v) and not isinstance(v, type):
        if _own_keys_repeat(v):
            return True
        fields = dataclasses.fields(v)
        return any(_other_keys(getattr(v, f.name, None), depth + 1) for f in fields)
    return False


def _own_keys_repeat(obj: Any) -> bool:
    """Whether pydantic may write one of the keys of model or pydantic dataclass *obj*'s
    own members twice: its class's keys repeat (`_Plan.repeats`), or an extra is named
    like one of them. A model serializer's output is not its members: False there."""
    t: Any = type(obj)
    if "__pydantic_fields__" not in t.__dict__:
        return False  # a standard dataclass: its members are its fields, by name
    plan = _model_plan(t)
    if plan.whole_only:
        return False
    extra = getattr(obj, "__pydantic_extra__", None)
    return plan.may_repeat(extra)


def _put_back(out: Any, tag: str, held: list[Any]) -> Any:
    """*out* (pydantic's JSON-mode output) with each string *tag* + index, a value
    pydantic's fallback was given, replaced by that value (in place: *out* is new)."""

    def back(v: Any) -> Any:
        if type(v) is str and v.startswith(tag):
            return held[int(v[len(tag) :])]
        return v

    top = back(out)
    walked = (dict, list, _Repeated)
    stack = [top] if type(top) in walked else []
    while stack:
        node = stack.pop()
        if type(node) is _Repeated:
            for i, (k, v) in enumerate(zip(node._keys, node._raw, strict=True)):
                node._keys[i] = back(k)
                x = node._raw[i] = back(v)
                if type(x) in walked:
                    stack.append(x)
        elif type(node) is dict:
            items = list(node.items())
            if any(type(k) is str and k.startswith(tag) for k, _ in items):
                node.clear()  # a key pydantic's fallback wrote: its value is the key again
            for k, v in items:
                x = node[back(k)] = back(v)
                if type(x) in walked:
                    stack.append(x)
        else:
            for i, v in enumerate(node):
                x = node[i] = back(v)
                if type(x) in walked:
                    stack.append(x)
    return top


#: A model config's ``ser_json_*`` settings, as a hashable key.
_SerKey = tuple[tuple[str, Any], ...]


def _ser_key(config: Mapping[str, Any]) -> _SerKey:
    """The settings of *config* that change how pydantic writes a leaf value."""
    return tuple(
        sorted(
            (k, v)
            for k, v in config.items()
            if type(k) is str and k.startswith("ser_json_") and v is not None
        )
    )


#: The leaf types whose spelling a model's config sets (`_Writers`), by core schema type.
_KIND_TYPES: Final[dict[str, type]] = {
    "datetime": _dt.datetime,
    "date": _dt.date,
    "time": _dt.time,
    "timedelta": _dt.timedelta,
    "bytes": bytes,
}
_KINDS: Final = tuple(_KIND_TYPES.values())
_PROBES: Final[dict[type, Any]] = {
    _dt.datetime: _dt.datetime(2000, 1, 1, tzinfo=_dt.UTC),
    _dt.date: _dt.date(2000, 1, 1),
    _dt.time: _dt.time(),
    _dt.timedelta: _dt.timedelta(seconds=1),
    bytes: b"a",
}


class _Writers:
    """How pydantic writes leaf values inside a model, as its own config and that of the
    model being written (*outer*: the outermost one, or one reached through ``Any``) say.

    pydantic writes a leaf its schema declares (a ``datetime`` field, ``list[bytes]``)
    under the config of the model that declares it, and one it infers (under ``Any``, in
    an arbitrary class's field) under *outer*'s; and a declared ``date``, ``time`` or
    ``datetime`` ignores ``ser_json_timedelta``, which an inferred one follows when
    ``ser_json_temporal`` is not set. Each is its own serializer, so whatever pydantic
    version is installed decides. NaN is null where a leaf holds one (floats themselves
    never reach these: the encoder marks them).
    """

    __slots__ = ("declared", "inferred", "outer", "split")

    def __init__(self, own: _SerKey, outer: _SerKey) -> None:
        serializer = sys.modules["pydantic_core"].SchemaSerializer
        self.outer = outer
        null = {"ser_json_inf_nan": "null"}
        self.inferred: Callable[[Any], bytes] = serializer(
            {"type": "any"}, {**dict(outer), **null}
        ).to_json
        self.declared: dict[type, Callable[[Any], bytes]] = {
            t: serializer({"type": kind}, {**dict(own), **null}).to_json
            for kind, t in _KIND_TYPES.items()
        }
        # The types pydantic writes one way declared and another inferred: the walk
        # must then know which a value is.
        self.split = frozenset(
            t for t, v in _PROBES.items() if self.declared[t](v) != self.inferred(v)
        )

    def of(self, v: Any, spec: _Spec | None) -> Callable[[Any], bytes]:
        """The writer for leaf *v* where *spec* is what is declared."""
        if spec is not None:
            for t in spec.kinds:
                # pydantic's date serializer refuses a datetime: it is inferred then.
                if isinstance(v, t) and not (t is _dt.date and isinstance(v, _dt.datetime)):
                    return self.declared[t]
        return self.inferred


@lru_cache(maxsize=256)  # a pure function of two configs' settings
def _writers(own: _SerKey, outer: _SerKey) -> _Writers:
    return _Writers(own, outer)


@lru_cache(maxsize=256)  # a pure function of a class and a config's settings
def _serializer_under(t: Any, outer: _SerKey) -> Any:
    """*t*'s serializer as pydantic runs it inside a model whose settings are *outer*:
    declared leaves under *t*'s own config, inferred ones under *outer*'s."""
    top = {k: v for k, v in _core_config(t).items() if not k.startswith("ser_json_")}
    return sys.modules["pydantic_core"].SchemaSerializer(
        t.__pydantic_core_schema__, {**top, **dict(outer)}
    )


def _core_config(t: Any) -> Mapping[str, Any]:
    """The core config pydantic built class *t*'s serializer with (its schema's)."""
    node = _class_schema(t)[0]
    return (node.get("config") if node else None) or {}


#: The core schemas that carry a config of their own.
_CONFIGURED: Final = frozenset({"model", "dataclass", "typed-dict"})
#: Schema keys whose values are the user's data (a field's default), never a schema.
_VALUES: Final = frozenset({"default", "metadata"})


def _nan_keeping(t: Any, outer: _SerKey) -> Any:
    """*t*'s serializer built again with ``ser_json_inf_nan="constants"``, with which JSON
    mode hands over a NaN or an infinity as the float (the default, "null", makes it None,
    which nothing later can tell from a None). Every model in the schema gets it, and so
    does the serializer's own config, which values the serializer infers (what a model
    serializer returns) are written with, under the ``ser_json_*`` settings *outer* (see
    `_Writers`); the rest of *t*'s config stays as it was."""
    own: list[Mapping[str, Any]] = []

    def rebuilt(node: Any) -> Any:
        if type(node) is list or type(node) is tuple:  # a union's choices may be pairs
            return type(node)(rebuilt(x) for x in node)
        if type(node) is not dict:
            return node  # a class, a function, a value: shared, never copied
        out = {k: x if k in _VALUES else rebuilt(x) for k, x in node.items()}
        kind = node.get("type")  # a field named "type" maps to its schema, not a str
        if type(kind) is str and kind in _CONFIGURED:
            out["config"] = {**(node.get("config") or {}), "ser_json_inf_nan": "constants"}
            if node.get("cls") is t and not own:
                own.append(out["config"])
        return out

    schema = rebuilt(t.__pydantic_core_schema__)
    config = {k: v for k, v in (own[0] if own else {}).items() if not k.startswith("ser_json_")}
    config.update(outer)
    config["ser_json_inf_nan"] = "constants"
    return sys.modules["pydantic_core"].SchemaSerializer(schema, config)


def _class_schema(t: Any) -> tuple[dict[str, Any] | None, dict[str, Any]]:
    """Pydantic class *t*'s own core schema node (a "model" or "dataclass") and the
    schema's definitions; None where the schema's shape is not one this reads."""
    schema = t.__pydantic_core_schema__
    defs: dict[str, Any] = {}
    if schema.get("type") == "definitions":
        defs = {d["ref"]: d for d in schema["definitions"] if "ref" in d}
        schema = schema["schema"]
    if schema.get("type") == "definition-ref":
        schema = defs.get(schema["schema_ref"], {})
    while schema.get("type") in _VALIDATORS and "serialization" not in schema:
        schema = schema["schema"]  # a model validator ("after", "wrap") wraps the model
    if schema.get("type") not in ("model", "dataclass") or schema.get("cls") is not t:
        return None, defs
    return schema, defs


def _field_schemas(t: Any) -> dict[str, tuple[Any, dict[str, Any]]]:
    """Each field of pydantic class *t* with its core schema and the schema's definitions;
    empty where the schema's shape is not one this reads (every field is then written
    by pydantic)."""
    schema, defs = _class_schema(t)
    if schema is None:
        return {}
    inner = schema["schema"]
    if schema.get("root_model"):
        return {"root": (inner, defs)}
    while inner.get("type") in _VALIDATORS:  # a model validator wraps the fields
        inner = inner["schema"]
    fields = inner.get("fields")
    if inner.get("type") == "model-fields" and isinstance(fields, dict):
        return {name: (f["schema"], defs) for name, f in fields.items()}
    if inner.get("type") == "dataclass-args" and isinstance(fields, list):
        return {f["name"]: (f["schema"], defs) for f in fields}
    return {}


#: Schemas that validate around an inner one and leave its serialization as it is.
_VALIDATORS: Final = frozenset({"function-before", "function-after", "function-wrap"})
#: Leaf schemas whose values the walk writes as pydantic does (by `_leaf`, the runtime
#: type's JSON, by the writer `_Writers.of` picks). An arbitrary class (``is-instance``,
#: ``arbitrary_types_allowed``), ``type[X]`` and a callable are written as under ``Any``:
#: pydantic infers them too, and refuses what it does not know (the encoder then writes
#: it, or ``default`` does, or the marker).
_PLAIN_LEAVES: Final = frozenset(
    {
        "any",
        "none",
        "bool",
        "int",
        "float",
        "str",
        "decimal",
        "uuid",
        "literal",
        "enum",
        "url",
        "is-instance",
        "is-subclass",
        "callable",
    }
)


def _how_written(
    field: tuple[Any, dict[str, Any]] | None, split: frozenset[type], spec: _Spec | None
) -> str:
    """How a model's field is written when the model is walked: "lazy" (by the walk, one
    level at a time, as pydantic would; a number under a float or int its declared type
    says, `_Spec.leaf`) or "pydantic" (its schema changes how pydantic writes it somewhere
    the walk cannot follow: a serializer at any depth, a TypedDict, a dataclass with an
    excluded or aliased field, keys that are not plain: pydantic writes it, whole).

    A leaf of a type in *split* (written one way declared, another inferred: `_Writers`)
    is the walk's only where *spec*, the field's annotation read, declares it there."""
    if field is None:
        return "pydantic"
    schema, defs = field
    seen: set[str] = set()

    def plain(node: Any, spec: _Spec | None, depth: int) -> bool:
        if type(node) is not dict or depth > _CHECK_DEPTH:
            return False
        items = spec.items if spec is not None else None
        if "serialization" in node:
            # pydantic's own serializer of a deque or a Sequence writes each item by the
            # item schema, as a list's does: walked like one (`_VIA_LIST`).
            ser = node["serialization"]
            if type(ser) is not dict or not _via_list(ser.get("function")):
                return False
            return plain(ser.get("schema", {"type": "any"}), items, depth + 1)
        kind = node.get("type")
        if kind in _PLAIN_LEAVES:
            return True
        if kind in _KIND_TYPES:
            t = _KIND_TYPES[kind]
            return t not in split or (spec is not None and t in spec.kinds)
        if kind == "definition-ref":
            ref = str(node.get("schema_ref"))
            if ref in seen:
                return True  # a recursive type: the first visit decides
            seen.add(ref)
            return ref in defs and plain(defs[ref], spec, depth + 1)
        if kind in ("model", "dataclass") and "__pydantic_fields__" in node["cls"].__dict__:
            return True  # a pydantic class: written by a plan of its own
        if kind == "dataclass":  # a standard dataclass: every field, by name, as it is
            args = node.get("schema", {})
            return args.get("type") == "dataclass-args" and all(
                not f.get("serialization_exclude")
                and not f.get("serialization_alias")
                and plain(f.get("schema"), None, depth + 1)
                for f in args.get("fields", ())
            )
        if kind in ("nullable", "default") or kind in _VALIDATORS:
            return plain(node.get("schema"), spec, depth + 1)
        if kind in ("list", "set", "frozenset", "generator", "deque"):  # deque: pydantic 2.14+
            return "items_schema" not in node or plain(node["items_schema"], items, depth + 1)
        if kind == "tuple":
            positions = node.get("items_schema", ())
            if (len(positions) > 1 or node.get("variadic_item_index") is None) and any(
                _number_schema(x) or _leaf_type(x) in split for x in positions
            ):
                # Numbers (or split leaves) declared by position: the walk converts
                # every item alike.
                return False
            return all(plain(x, items, depth + 1) for x in positions)
        if kind == "dict":
            keys = node.get("keys_schema", {"type": "any"})
            return (
                type(keys) is dict
                and keys.get("type") in ("any", "str", "int")
                and "serialization" not in keys
                and ("values_schema" not in node or plain(node["values_schema"], items, depth + 1))
            )
        if kind == "union":
            return all(
                plain(c[0] if type(c) is tuple else c, spec, depth + 1)
                for c in node.get("choices", ())
            )
        if kind == "tagged-union":
            return all(plain(c, spec, depth + 1) for c in node.get("choices", {}).values())
        if kind in ("lax-or-strict", "json-or-python"):
            return all(
                plain(node[k], spec, depth + 1)
                for k in ("lax_schema", "strict_schema", "json_schema", "python_schema")
                if k in node
            )
        return False  # typed-dict, function-plain, chain, anything new

    return "lazy" if plain(schema, spec, 0) else "pydantic"


@lru_cache(maxsize=1)
def _deque_schema() -> bool:
    """Whether pydantic gives ``deque[X]`` a core schema of its own (2.14 on), whose
    serializer takes a deque only, where ``serialize_sequence_via_list`` (before) took a
    list, a tuple or a set too."""
    version = str(getattr(sys.modules.get("pydantic"), "VERSION", "0.0")).split(".")
    try:
        return (int(version[0]), int(version[1])) >= (2, 14)
    except (IndexError, ValueError):  # not a release's version: the newer schema
        return True


def _via_list(f: Any) -> bool:
    """Whether *f* is pydantic's serializer function of a deque or a Sequence field."""
    ours = sys.modules.get("pydantic._internal._serializers")
    return f is not None and f is getattr(ours, "serialize_sequence_via_list", None)


def _leaf_type(node: Any) -> type | None:
    """The type in `_KIND_TYPES` that core schema *node* declares (optional, defaulted)."""
    while type(node) is dict and node.get("type") in ("nullable", "default"):
        node = node.get("schema")
    return _KIND_TYPES.get(node.get("type")) if type(node) is dict else None  # type: ignore[arg-type]


def _number_schema(node: Any) -> bool:
    """Whether core schema *node* declares an int or a float (optional, defaulted)."""
    while type(node) is dict and node.get("type") in ("nullable", "default"):
        node = node.get("schema")
    return type(node) is dict and node.get("type") in ("int", "float")


@lru_cache(maxsize=1024)  # a pure function of the class; holds no per-call state
def _model_plan(t: Any) -> _Plan:
    return _Plan(t)


class _Spec:
    """What an annotation declares that changes how pydantic writes a value: the model
    and dataclass classes it names (a subclass value is written as one of them), the
    spec of a container's items (a mapping's values), a number's *leaf* type, and the
    leaf types (*kinds*) written under the declaring model's config (`_Writers`).

    *leaf* is "float" or "int" where the value is declared one: a value assigned
    without validation is written as that type, as pydantic's serializer for it
    writes it (an int, a bool, a Decimal or an IntEnum under float as a float, ``3.0``;
    a bool or an IntEnum under int as an int, ``1``). *kinds* holds the types of
    `_KIND_TYPES` declared here (``datetime``, ``date | None``, ``datetime | str``).

    pydantic's serializer for a container takes only its own runtime type (*holds*: a
    list for ``list[X]``, a set for ``set[X]``, a dict for ``dict[K, X]``): handed
    another (a tuple assigned without validation), it infers that value and all it holds
    from their runtime types (with a warning), so *items* applies to a container of a
    type in *holds* only; *alts* are a union's other container choices, each taking its
    own type. *alone*: *models* holds the one class declared here, outside any union,
    whose serializer writes any object that has a ``__dict__`` (a model class) or
    ``__dataclass_fields__`` (a dataclass) as that class, reading its fields off it
    (``{}`` for an Enum member under a model type)."""

    __slots__ = ("alone", "alts", "holds", "items", "kinds", "leaf", "models")

    def __init__(
        self,
        models: tuple[type, ...],
        items: _Spec | None,
        leaf: str | None = None,
        kinds: tuple[type, ...] = (),
        *,
        holds: tuple[type, ...] = (),
        alts: tuple[_Spec, ...] = (),
        alone: bool = False,
    ) -> None:
        self.models = models
        self.items = items
        self.leaf = leaf
        self.kinds = kinds
        self.holds = holds
        self.alts = alts
        self.alone = alone

    def taking(self, v: Any) -> _Spec | None:
        """This spec, or the union choice, whose container serializer takes *v*; None
        where none does (pydantic then infers *v* and everything in it)."""
        if self.takes(v):
            return self
        return next((alt for alt in self.alts if alt.takes(v)), None)

    def takes(self, v: Any) -> bool:
        holds = self.holds
        if holds is _VIA_LIST:
            return type(v) in holds  # `SEQUENCE_ORIGIN_MAP.get(type(v))`: no subclass
        return isinstance(v, holds)


def _as_leaf(v: Any, leaf: str) -> Any:
    """*v* as pydantic's serializer for the number type *leaf* writes it."""
    if leaf == "float":
        if type(v) is not float and isinstance(v, int | decimal.Decimal):
            try:
                return float(v)
            except OverflowError:
                return v  # past the float range: pydantic writes the int, `_leaf` marks it
    elif type(v) is not int and isinstance(v, int):
        return int(v)  # a bool, an IntEnum
    return v


_LEAVES: Final = {float: "float", int: "int"}


#: A container type an annotation may name, and the runtime types pydantic's serializer
#: for it takes (see `_Spec`): the core schema's own ("list", "frozenset", "dict",
#: "generator": an iterator) where it has one. A deque and a Sequence are written by
#: pydantic's ``serialize_sequence_via_list``, which takes these exact types (`_VIA_LIST`)
#: and hands anything else back to be inferred. An OrderedDict and a defaultdict are
#: written by a serializer function (the walk leaves the field to pydantic whole).
#: ``Iterator[X]`` is not here: pydantic takes it only as an arbitrary class, whose values
#: it infers.
_VIA_LIST: Final = (collections.deque, list, tuple, set, frozenset)
_SEQUENCES: Final[dict[Any, tuple[type, ...]]] = {
    list: (list,),
    tuple: (tuple,),
    set: (set,),
    frozenset: (frozenset,),
    collections.deque: _VIA_LIST,
    collections.abc.Sequence: _VIA_LIST,
    collections.abc.MutableSequence: (list,),
    collections.abc.Set: (frozenset,),
    collections.abc.Iterable: (collections.abc.Iterator,),  # kept as one-shot iterators
    collections.abc.Generator: (collections.abc.Iterator,),
}
_MAPPINGS: Final[dict[Any, tuple[type, ...]]] = {
    dict: (dict,),
    collections.abc.Mapping: (dict,),
    collections.abc.MutableMapping: (dict,),
    collections.OrderedDict: (collections.OrderedDict,),
    collections.defaultdict: (collections.defaultdict,),
}


def _declared(ann: Any, depth: int = 0) -> _Spec | None:
    """*ann* as a `_Spec`; None where it declares nothing a `_Spec` holds (``str``,
    ``Any``, ``list[str]``: most fields)."""
    if depth > _ANNOTATION_DEPTH:  # a recursive alias: past this, values are written as they are
        return None
    supertype = getattr(ann, "__supertype__", None)  # a NewType: what it wraps
    if supertype is not None:
        return _declared(supertype, depth + 1)
    if type(ann).__name__ == "TypeAliasType":  # a `type X = ...` statement
        return _declared(getattr(ann, "__value__", None), depth + 1)
    origin = typing.get_origin(ann)
    args = typing.get_args(ann)
    if origin is typing.Annotated:
        if any(type(m).__name__ == "SerializeAsAny" for m in args[1:]):
            return None
        return _declared(args[0], depth + 1)
    if ann in _LEAVES:
        return _Spec((), None, _LEAVES[ann])
    if isinstance(ann, type) and issubclass(ann, _KINDS):
        # The first of `_KINDS` it is (a datetime is a date too).
        return _Spec((), None, kinds=(next(k for k in _KINDS if issubclass(ann, k)),))
    if origin is typing.Union or origin is types.UnionType:
        if len(args) == 2 and type(None) in args:  # noqa: PLR2004 - Optional[X]: what X declares
            return _declared(args[0] if args[1] is type(None) else args[1], depth + 1)
        declared = [_declared(a, depth + 1) for a in args]
        parts = [p for p in declared if p is not None]
        if not parts:
            return None
        # pydantic writes a value by the first choice that takes it as it is: one
        # that takes anything (Any, object) hides the kinds after it; a container goes
        # to the first container choice of its type.
        kinds: list[type] = []
        for a, p in zip(args, declared, strict=True):
            if a is Any or a is object:
                break
            kinds += p.kinds if p is not None else ()
        boxes = [p for p in parts if p.items is not None]
        first = boxes[0] if boxes else None
        return _Spec(
            tuple(m for p in parts for m in p.models),
            None if first is None else first.items,
            kinds=tuple(kinds),
            holds=() if first is None else first.holds,
            alts=tuple(boxes[1:]),
        )
    if isinstance(ann, type) and (
        issubclass(ann, sys.modules["pydantic"].BaseModel) or dataclasses.is_dataclass(ann)
    ):
        return _Spec((ann,), None, alone=True)
    if origin is None or not args:
        return None
    if origin in _SEQUENCES:
        if origin is collections.abc.Generator:
            args = args[:1]  # what it yields; not what it is sent or returns
        parts = [p for p in (_declared(a, depth + 1) for a in args if a is not ...) if p]
        if not parts:
            return None
        # A number type applies to every item only where every item declares it (a
        # tuple[int, str] declares two).
        declared_args = {a for a in args if a is not ...}
        one = len(declared_args) == 1
        leaf = parts[0].leaf if one else None
        models = tuple(m for p in parts for m in p.models)
        kinds = [k for p in parts for k in p.kinds]
        first = parts[0]
        items = _Spec(
            models,
            first.items,
            leaf,
            tuple(dict.fromkeys(kinds)),
            holds=first.holds,
            alts=first.alts,
            alone=one and first.alone,
        )
        holds = _SEQUENCES[origin]
        if origin is collections.deque and _deque_schema():
            holds = (collections.deque,)  # its own serializer takes only a deque
        return _Spec((), items, holds=holds)
    if origin in _MAPPINGS and len(args) == 2:  # noqa: PLR2004 - [key type, value type]
        inner = _declared(args[1], depth + 1)
        return None if inner is None else _Spec((), inner, holds=_MAPPINGS[origin])
    return None


class _Conv:
    """A native value's members converted one level at a time, as its library writes them.

    A collection becomes one view per collection (*views*, by identity), so a list that
    contains itself is the same view again and the renderer sees the cycle.
    """

    __slots__ = ("opts", "views")

    def __init__(self, opts: Options) -> None:
        self.opts = opts
        self.views: dict[int, Any] = {}

    def key(self, k: Any) -> Any:
        raise NotImplementedError

    def conv(self, v: Any) -> Any:
        raise NotImplementedError

    def items(self) -> _Conv:
        """The converter of a collection's items (and a mapping's values and keys)."""
        return self

    def container(self, v: Any, plain: frozenset[type]) -> Any:
        """*v* as a view if it is a collection (never written whole), else None; a
        sequence that counts in Python code as a generator of its converted items."""
        view = self.views.get(id(v))
        if view is not None and view._src is v:
            return view
        items = self.items()
        conv = items.conv
        if isinstance(v, Mapping):
            if not counts_in_c(type(v)):
                # Its count is Python code, which may lie: read by iteration, as the
                # renderer reads any such mapping (a count of -20 "more keys" was shown).
                return v
            view = _DictView(v, conv, items.key)
        elif isinstance(v, set | frozenset):
            view = SeqView(v, conv, indexable=False, plain=plain)
        elif isinstance(v, Sequence) and not isinstance(v, str | bytes | bytearray | memoryview):
            if not counts_in_c(type(v)):
                return (conv(x) for x in v)  # iterated, as `fallback` says: a stream
            view = SeqView(v, conv, plain=plain)
        else:
            return None
        self.views[id(v)] = view  # the view holds *v*: its id stays its own
        return view


class _PydConv(_Conv):
    """A value inside a pydantic model as pydantic writes it in JSON, one level at a time.

    *spec* is what the field declares here (None: nothing that changes how it is
    written): a model or dataclass declared as a base class is written as that class,
    a container's items by what it declares for them, and a leaf by the writer of
    *writers* for what it is declared (`_Writers.of`), as pydantic does.
    """

    __slots__ = ("_inferred", "_items", "spec", "to_json", "writers")

    def __init__(self, writers: _Writers, opts: Options, spec: _Spec | None = None) -> None:
        super().__init__(opts)
        self.writers = writers
        self.to_json = writers.inferred  # a value's JSON when nothing declares its type
        self.spec = spec
        self._items: _PydConv | None = None
        self._inferred: _PydConv | None = None

    def typed(self, spec: _Spec | None) -> _PydConv:
        """A converter for values declared as *spec*."""
        return self if spec is self.spec else _PydConv(self.writers, self.opts, spec)

    def conv(self, v: Any) -> Any:
        spec = self.spec
        if spec is not None and spec.leaf is not None:
            v = _as_leaf(v, spec.leaf)
        t: Any = type(v)
        if t in _PLAIN:
            return _leaf(v, self.opts, self.to_json) if t is int and _wide(v) else v
        if spec is not None and spec.alone and not isinstance(v, spec.models[0]):
            out = self._as_declared(v, spec.models[0])
            if out is not UNKNOWN:
                return out
        if isinstance(v, sys.modules["pydantic"].BaseModel) or (
            dataclasses.is_dataclass(v) and not isinstance(v, type)
        ):
            declared = spec is not None and t in spec.models
            if spec is not None and not declared:
                for base in spec.models:
                    if isinstance(v, base):
                        t = base  # a subclass is written as its declared base
                        declared = True
                        break
            if "__pydantic_fields__" in t.__dict__:
                # Declared, it is written inside this model (what pydantic infers in it
                # under the outer model's config); else by its own serializer.
                outer = self.writers.outer if declared else None
                if outer is not None and outer == _model_plan(t).ser_key:
                    outer = None  # its own settings: the same bytes as by itself
                if t is type(v) and outer is None:
                    return v  # dispatched again: a view of its own
                return _pydantic(v, self.opts, t, outer)
            if isinstance(v, sys.modules["pydantic"].BaseModel) or t is Clipped:
                return v  # dispatched again: a nested model is a view of its own
            return self._dataclass(v, t)
        if isinstance(v, float):
            return float(v)  # np.float64 too: a NaN gets the encoder's marker
        if spec is not None and spec.items is not None and _collection(v):
            taken = spec.taking(v)
            if taken is None:
                return self.inferred().conv(v)
            if taken is not spec:
                return self.typed(taken).conv(v)
        if isinstance(v, Iterator):
            # Read once (an Iterable field's ValidatorIterator, a generator under Any):
            # written by pydantic, its items would be gone wherever that output does not
            # fit, or a spill meets it again. The renderer pulls it as a stream and keeps
            # what it pulled, each item written as pydantic writes it.
            return Converted(v, self.items().conv)
        items = self.items().spec
        # Items declared a number type are converted (an int to a float): not plain.
        view = self.container(v, _PLAIN if items is None or items.leaf is None else _NUMBERLESS)
        if view is not None:
            return view
        return _leaf(v, self.opts, self.writers.of(v, spec))

    def items(self) -> _PydConv:
        items = self._items
        if items is None:
            spec = self.spec
            items = self._items = self if spec is None else self.typed(spec.items)
        return items

    def inferred(self) -> _PydConv:
        """The converter for a value pydantic infers here, and everything in it."""
        out = self._inferred
        if out is None:
            out = self._inferred = self.typed(None)
        return out

    def _as_declared(self, v: Any, t: Any) -> Any:
        """*v*, not an instance of *t*, as pydantic's serializer for declared class *t*
        writes it where that takes it (reading *t*'s fields off it); else `UNKNOWN`."""
        if "__pydantic_fields__" in t.__dict__:
            model = "__dataclass_fields__" not in t.__dict__
            if not hasattr(v, "__dict__" if model else "__dataclass_fields__"):
                return UNKNOWN  # inferred from what it is
            # Not its class: only pydantic knows which of its attributes it reads.
            return _model_plan(t).jsonable(v, outer=self.writers.outer)
        if dataclasses.is_dataclass(t) and hasattr(v, "__dataclass_fields__"):
            return self._dataclass(v, t)  # *t*'s fields, read off *v* by name
        return UNKNOWN

    def _dataclass(self, v: Any, t: Any) -> MapView:
        """A standard dataclass inside a model: every field of *t*, as pydantic writes
        it (``_private`` ones and ``init=False`` ones too, unlike orjson)."""
        members = []
        for f in dataclasses.fields(t):
            try:
                members.append((f.name, getattr(v, f.name)))
            except AttributeError as exc:
                raise EncodeError(
                    f"dataclass {t.__name__} has no value for field {f.name}", path=None
                ) from exc
        return MapView(members, self.typed(None).conv, src=v)

    def key(self, k: Any) -> Any:
        return k if type(k) is str else _key_text(self.to_json, k)


def _collection(v: Any) -> bool:
    """Whether *v* is a container the walk reads item by item (text and binary are not)."""
    return isinstance(v, Iterator | Mapping | Sequence | collections.abc.Set) and not isinstance(
        v, str | bytes | bytearray | memoryview
    )


def _wide(n: int) -> bool:
    """Whether orjson refuses *n* (beyond 64 bits), which pydantic and msgspec write."""
    return not -(1 << 63) <= n < 1 << 64


def _past_float(n: int) -> bool:
    """Whether a parser reading doubles refuses int *n* or reads it as infinity (from
    about ±1.8E+308): the value of an int subclass, none of its own methods asked."""
    try:
        int.__float__(n)
    except OverflowError:
        return True
    return False


def _leaf(v: Any, opts: Options, to_json: Callable[[Any], bytes]) -> Any:
    """A library's leaf value; one its library writes as a string stays a cuttable str."""
    if isinstance(v, int) and _past_float(v):
        # Its library writes the digits (msgspec only up to 4,300 of them), which orjson
        # refuses: marked, as a Decimal past the float range is.
        return Unencodable("int beyond the float range")
    if type(v) in (bytes, bytearray, memoryview) and memoryview(v).nbytes > opts.max_bytes:
        # Its library writes it whole as base64, which the budget cannot hold.
        return Unencodable(f"{type(v).__name__} of {memoryview(v).nbytes} bytes")
    try:
        data = to_json(v)
    except Exception as exc:
        if _refusal(exc):  # the library refuses it: the encoder's own rules
            return v
        raise
    if data[:1] == b'"':
        return _loads(data)
    if type(v) is int:  # a wide int: a marker names its size, as a long Decimal's does
        return Raw(data, f"int of {len(data.lstrip(b'-'))} digits")
    return Raw(data, type(v).__name__)


def _key_text(to_json: Callable[[Any], bytes], k: Any) -> Any:
    """Key *k* as its library spells a dict key (pydantic writes a tuple key as "0,1"
    and None as "None", not as their JSON values): read off a one-member dict."""
    try:
        data = to_json({k: None})
    except Exception as exc:
        if _refusal(exc):
            return k  # the encoder marks a key it cannot write
        raise
    return next(iter(_loads(data)))


# -- msgspec ---------------------------------------------------------------------------


def _struct(obj: Any, opts: Options) -> Any:
    ms = sys.modules["msgspec"]
    t = type(obj)
    cfg = t.__struct_config__
    conv = _MsgConv(opts).conv
    native = lambda: ms.json.encode(obj)  # noqa: E731 - a thunk, run only if it fits
    names = t.__struct_fields__
    defaults = t.__struct_defaults__
    first_default = len(names) - len(defaults)
    members: list[tuple[Any, Any]] = []
    if cfg.tag_field is not None:
        members.append((cfg.tag_field, cfg.tag))
    unset = ms.UNSET
    # An array's items are its fields by position: msgspec leaves none out there (it
    # writes defaults, and refuses UNSET), so neither does this, or positions would shift.
    omit = cfg.omit_defaults and not cfg.array_like
    for i, (name, key) in enumerate(zip(names, t.__struct_encode_fields__, strict=True)):
        v = getattr(obj, name)
        if v is unset:
            if cfg.array_like:
                members.append((key, Unencodable("msgspec.UNSET in an array_like Struct")))
            continue
        if omit and i >= first_default and _is_default(v, defaults[i - first_default]):
            continue
        members.append((key, v))
    if cfg.array_like:
        return SeqView([v for _, v in members], conv, native=native)
    return MapView(members, conv, src=obj, native=native)


def _is_default(v: Any, default: Any) -> bool:
    """msgspec's ``omit_defaults`` test: the default object itself, or an empty collection
    made by a collection factory."""
    factory = getattr(default, "factory", None)
    if factory is not None and type(default).__name__ == "Factory":
        # An empty collection made by a collection factory counts as the default.
        return type(v) is factory and factory in (list, dict, set, frozenset, bytearray) and not v
    return v is default  # msgspec compares by identity: an equal 1.0 or 1000 is written


class _MsgConv(_Conv):
    """A value inside a Struct as msgspec writes it in JSON, one level at a time."""

    __slots__ = ()

    def conv(self, v: Any) -> Any:
        t = type(v)
        if t is int:
            return _leaf(v, self.opts, _msgspec_json) if _wide(v) else v
        if t is str or t is bool or v is None:
            return v
        if t is float:
            # msgspec writes 1e20 where orjson writes 1e+20: its own bytes for a number.
            return Raw(_msgspec_json(v), "float") if v - v == 0 else v
        ms = sys.modules["msgspec"]
        if (
            isinstance(v, ms.Struct)
            or t is Clipped
            or t is ms.Raw
            or (dataclasses.is_dataclass(v) and not isinstance(v, type))
            or getattr(t, "__attrs_attrs__", None) is not None
        ):
            # Dispatched again: msgspec would write a Clipped as an object, a Raw's bytes
            # unchecked, and a dataclass or attrs instance whole (in one call, past the
            # caps and the budget) and by its own rules (`_Walk` keeps those off the
            # path where msgspec writes the Struct).
            return v
        view = self.container(v, _MSG_PLAIN)
        return _leaf(v, self.opts, _msgspec_json) if view is None else view

    def key(self, k: Any) -> Any:
        return k if type(k) is str else _key_text(_msgspec_json, k)


_MSG_PLAIN: frozenset[type] = frozenset(
    {str, int, bool, type(None)}
)  # not float: msgspec writes 1e20


def _msgspec_json(v: Any) -> bytes:
    return sys.modules["msgspec"].json.encode(v)  # type: ignore[no-any-return]


# -- attrs -----------------------------------------------------------------------------


def _attrs(obj: Any, opts: Options) -> Any:
    members = [(a.name, getattr(obj, a.name)) for a in type(obj).__attrs_attrs__]
    # `attrs.asdict`, then orjson: nested instances go through `_as_fragment`, and a set
    # is written in its own order (asdict copies it into a new set, of another order).
    native = lambda: _dumps_detached(dict(members))  # noqa: E731 - a closure, run if asked
    return MapView(members, _AttrsConv(opts).conv, src=obj, native=native)


class _AttrsConv(_Conv):
    """A value inside an attrs instance as `attrs.asdict` and then orjson write it.

    `asdict` keeps a set a set, which orjson refuses: it is an array, in its own order,
    at any depth, so a collection is walked with this converter; anything else (a nested
    instance too) is dispatched again, and a key is written as a dict's key is.
    """

    __slots__ = ()

    def conv(self, v: Any) -> Any:
        t = type(v)
        if t in _PLAIN:
            return v
        # A small dict or list of scalars (a row) holds no set: kept as it is, so the
        # compiled paths write it (a view costs a Python step an item: 100x for rows).
        if (
            (t is dict or t is list)
            and len(v) <= _FLAT_SCAN
            and all(type(x) in _PLAIN for x in (v.values() if t is dict else v))
        ):
            return v
        if isinstance(v, Mapping | list | tuple | set | frozenset):
            return self.container(v, _PLAIN)
        return v

    def key(self, k: Any) -> Any:
        return k


_FLAT_SCAN = 64  # the most items `_AttrsConv` looks through to keep a collection as it is


# -- whole values ----------------------------------------------------------------------


def whole(
    obj: Any,
    cap: int,
    depth: int,
    caps: _bound.Caps,
    known: dict[tuple[int, int], tuple[Any, int]] | None = None,
    *,
    views: dict[int, tuple[Any, Any]] | None = None,
    longer: bool = False,
    measured: bool = False,
) -> bytes | None:
    """The native libraries' bytes for *obj* if it needs no marker and they fit *cap*.

    *known*, the caller's record of lower bounds of sizes by ``(id, depth)``, gets each
    native value inside *obj* that the walk found larger than its room: asked about one
    of them again with no more room, the caller knows the answer without walking (a
    chain of attrs instances was walked once from each of its nodes). *views*, the
    caller's record of what `adapt` made of each native value a walk met (by id), is
    read, and added to unless the value fits (then nothing under it is walked again):
    a value walked again (each level of a cut tree walks what is under it) is
    converted once, its serializers run once.

    With *longer*, the bytes are returned also when they pass *cap* (the walk's lower
    bound fit, the bytes did not): they are then *obj*'s full rendering, and the
    caller keeps what they say of its size and of the sizes of the values in it.
    *measured*: the caller knows, from a library output that holds *obj* (whose walk
    found no marker needed in it), that it needs none and fits: it is not walked.

    *obj* is what the renderer holds: a view made by `adapt`, or (at the top, *depth*
    0) a JSON container that may hold native values. Costs about *cap*: a lower bound of
    the size is walked first, and stops once it passes *cap*.
    """
    t = type(obj)
    if t in VIEWS:
        native = obj._native
        if native is None:
            return None
    elif depth or not (t is dict or t is list or t is tuple):
        return None
    else:
        native = None
    # Models and Structs the compiled walk knows: one compiled call bounds all of it.
    src = obj if native is None else obj._src if t is MapView else None
    if measured and native is not None:
        n, run = 0, None  # not walked: its size is known
    else:
        n, run = (-1, None) if src is None else native_bound(src, cap, depth, caps)
    if n > cap:
        return None
    fresh: dict[int, tuple[Any, Any]] = {}
    try:
        if n < 0:  # not a value the compiled walk knows: the walk in Python
            walk = _Walk(caps, known, views, None if views is None else fresh)
            n = walk.size(obj, cap, depth, inside=int(native is not None))
            if n < 0 or n > cap:
                return _keep(None, views, fresh)
            if native is None and not walk.natives:
                return None  # plain JSON that the fast path refused: it needs markers
            run = walk.runs.get(id(obj))
    except (EncodeError, RuntimeError):  # a container that changed: the renderer says so
        return _keep(None, views, fresh)
    try:
        data: bytes
        if native is not None:
            data = native()
        elif run is not None:
            data = _run_json(obj, run)
        else:
            data = _dumps_detached(obj)
    except Exception as exc:
        if _refusal(exc):  # a library refuses a value: the renderer decides what it becomes
            return _keep(None, views, fresh)
        raise
    if not _doubles_read(data):
        # An int past the float range inside a model or Struct (the walks count an int as
        # a byte): the renderer marks it, and these bytes say nothing of its size.
        return _keep(None, views, fresh)
    if len(data) <= cap:
        return data
    return _keep(data if longer else None, views, fresh)


def _keep(out: bytes | None, views: dict[int, Any] | None, fresh: dict[int, Any]) -> bytes | None:
    """*out*, once the views a walk made are added to *views*: the value did not fit,
    and the renderer, going down into it, walks them again. (Not kept where it fits:
    held, they are what a garbage collection pass goes through.)"""
    if views is not None and fresh:
        views.update(fresh)
    return out


def written_alike(v: Any) -> bool:
    """Whether *v*, a value the renderer reads from a container, is rendered whole (when
    it needs no marker) as its own library writes it, bytes that are the same wherever
    it stands: inside its library's output of a value that holds it, it takes exactly
    its own full rendering. So a pydantic model (not one written by a model serializer,
    or a root model by its root's serializer: those the renderer writes as the JSON they
    make), a msgspec Struct, an attrs instance, and a view that carries its library's
    writer (a model declared as a base class or under another model's settings)."""
    t: Any = type(v)
    if t in VIEWS:
        return v._native is not None
    mods = sys.modules
    if "pydantic" in mods and issubclass(t, mods["pydantic"].BaseModel):
        plan = _model_plan(t)
        return not plan.whole_only and not (plan.root and plan.fields and plan.fields[0][2])
    if "msgspec" in mods and issubclass(t, mods["msgspec"].Struct):
        return True
    return "attr" in mods and getattr(t, "__attrs_attrs__", None) is not None


#: Classes the compiled walk enters, with what it needs: for a flat pydantic model the
#: bytes its keys add (aliases less names; it reads the instance ``__dict__``); for a
#: msgspec Struct those bytes and its field slots. Those `_flat_plan` finds flat; a cache
#: of a pure function of the class, cleared whole past 1,024 classes. Asked through
#: `has_class`: a class whose metaclass makes it unhashable is in no table.
NATIVE_KEYS: dict[type, int | tuple[int, tuple[Any, ...]]] = {}
_NATIVE_CLASSES = 1024


def hashable_class(t: type) -> bool:
    """Whether class *t* can be hashed (see `has_class`)."""
    try:
        hash(t)
    except MemoryError:
        raise  # the interpreter's, not the class's (see `has_class`)
    except Exception:  # noqa: BLE001 - the metaclass's own error
        return False
    return True


def has_class(t: object, table: Container[Any]) -> bool:
    """``t in table``, False where *t* cannot be hashed. A metaclass with ``__eq__`` and
    no ``__hash__`` (a common slip) makes its classes unhashable, and its ``__hash__``
    may raise: the encoder's tables of classes hold no such class, and its values go
    the way of any unknown type (``default``, then the unencodable marker or
    EncodeError), not out as a bare TypeError. Free where the hash works (3.11's
    exceptions cost nothing until raised).

    A `MemoryError` passes on: the interpreter ran out, and taken for "unhashable" it
    turned a good value into a marker. A `RecursionError` is the metaclass's: a class
    hashes without recursing unless its metaclass's own Python code recurses."""
    try:
        return t in table
    except MemoryError:
        raise  # as in `hashable_class`
    except Exception:  # noqa: BLE001 - the metaclass's own error: not in any table
        return False


def native_bound(obj: Any, cap: int, depth: int, caps: _bound.Caps) -> tuple[int, type | None]:
    """The compiled walk's bound of a value holding pydantic models or msgspec Structs, or
    -1 when it cannot say; and the class of every item when *obj* is a list of one
    native class's instances (its library writes the list in one call).

    Each class it meets and does not know is looked up once (`_flat_plan`); one that is
    not flat (custom serializers, excluded or computed fields) ends the attempt, and the
    walk in Python decides.
    """
    for _ in range(16):  # the distinct classes one value may introduce before giving up
        n, missing, run = _bound.bound_native(obj, cap, depth, caps, NATIVE_KEYS)
        if missing is None:
            return n, run
        plan = _native_plan(missing)
        if plan is None:
            return -1, None
        if len(NATIVE_KEYS) >= _NATIVE_CLASSES:
            NATIVE_KEYS.clear()
        NATIVE_KEYS[missing] = plan
    return -1, None


def _native_plan(t: type) -> int | tuple[int, tuple[Any, ...]] | None:
    """What the compiled walk needs to enter instances of *t*, or None if it cannot."""
    plan = _flat_plan(t)
    if plan is None:
        return None
    if plan[0] is _INSTANCE_DICT:
        return plan[1]
    # A msgspec Struct: its fields in order, each a slot of the instance.
    slots = tuple(getattr(t, name) for name in t.__struct_fields__)  # type: ignore[attr-defined]
    if any(type(d).__name__ != "member_descriptor" for d in slots):
        return None
    return plan[1], slots


def native_whole(
    obj: Any, cap: int, depth: int, caps: _bound.Caps, *, longer: bool = False
) -> bytes | None:
    """The library's bytes for *obj* (of a class in `NATIVE_KEYS`) if the compiled walk
    shows it needs no marker and they fit *cap*: no view is built. Else None. With
    *longer*, also bytes that pass *cap* once the walk's bound fit it (see `whole`)."""
    n, _ = native_bound(obj, cap, depth, caps)
    if n < 0 or n > cap:
        return None
    try:
        data = _library_json(obj)
        assert data is not None  # `NATIVE_KEYS` holds only models and Structs
    except Exception as exc:
        if _refusal(exc):  # the renderer decides what the refused value becomes
            return None
        raise
    if not _doubles_read(data):
        return None  # an int past the float range: the renderer marks it
    return data if longer or len(data) <= cap else None


#: Digits of the least int past the float range (1.8E+308): a library writes no other
#: number there (its floats are finite, a Decimal is a string).
_FLOAT_DIGITS: Final = 309
#: Every 13th byte of a run of 309 digits is a digit 23 times in a row.
_STRIDE: Final = 13
_ZERO: Final = 0x30  # "0"
_NINE: Final = 0x39  # "9"
_SPACE: Final = 0x20  # " "
_DIGIT_MASK: Final = bytes(_ZERO if _ZERO <= b <= _NINE else _SPACE for b in range(256))
_SAMPLED_RUN: Final = b"0" * (_FLOAT_DIGITS // _STRIDE)
_DIGIT_RUN: Final = b"0" * _FLOAT_DIGITS


def _doubles_read(data: bytes) -> bool:
    """Whether a parser reading doubles reads every number in *data*, a library's JSON.

    A number it cannot is a run of at least 309 digits. Every 13th byte, sampled, rules
    out most text in C passes over a 13th of it; where the sample holds such a run (text
    dense with digits), the whole text is scanned, about a nanosecond a byte; a run found
    there may be inside a string, so orjson, reading it, says whether it is a number."""
    if len(data) < _FLOAT_DIGITS:
        return True
    if data[::_STRIDE].translate(_DIGIT_MASK).find(_SAMPLED_RUN) < 0:
        return True
    if data.translate(_DIGIT_MASK).find(_DIGIT_RUN) < 0:
        return True
    try:
        _loads(data)
    except orjson.JSONDecodeError:
        return False
    return True


def _refusal(exc: Exception) -> bool:
    """Whether *exc* is a library saying it cannot write a value (not a bug to surface)."""
    if isinstance(exc, TypeError | ValueError | OverflowError):
        return True
    ms = sys.modules.get("msgspec")
    return ms is not None and isinstance(exc, ms.EncodeError)


def _run_json(items: list[Any] | tuple[Any, ...], t: Any) -> bytes:
    """A list of one class's instances, as one call of its library writes it."""
    if "msgspec" in sys.modules and issubclass(t, sys.modules["msgspec"].Struct):
        return sys.modules["msgspec"].json.encode(items)  # type: ignore[no-any-return]
    # Read past the metaclass, as the walk read the models: a metaclass __getattribute__
    # would run here, after the walk found them clean, and could change them.
    to_json = _bound.class_attr(t, "__pydantic_serializer__").to_json
    return b"[" + b",".join([to_json(m) for m in items]) + b"]"


def _library_json(v: Any) -> bytes | None:
    """A msgspec Struct or a pydantic model as its library writes it, else None."""
    mods = sys.modules
    if "msgspec" in mods and isinstance(v, mods["msgspec"].Struct):
        return mods["msgspec"].json.encode(v)  # type: ignore[no-any-return]
    if "pydantic" in mods and isinstance(v, mods["pydantic"].BaseModel):
        # Past the metaclass, as in `_run_json`.
        serializer = _bound.class_attr(type(v), "__pydantic_serializer__")
        return serializer.to_json(v)  # type: ignore[no-any-return]
    return None


def _dumps_detached(v: Any) -> bytes:
    """orjson's bytes for *v*, each value orjson does not write itself written as
    `_as_fragment` writes it, from one orjson call that runs no Python code.

    Given `_as_fragment` as its ``default``, orjson would call it in the middle of
    writing the containers around the value, reading them through pointers it does not
    hold: a pydantic serializer, a ``__getattribute__``, any Python code that runs there
    (or a collection it starts) and changes one of those containers crashes the
    process. So that code runs first (`_detached`), and orjson then only joins bytes.
    """
    clean = _clean_json(v)
    return clean if clean is not None else _dumps(_detached(v, 0), option=_WHOLE_OPT)


def _clean_json(v: Any) -> bytes | None:
    """orjson's bytes for container *v* if the size walk finds nothing in it that orjson
    runs Python code for or hands to a default (checked and written with nothing run in
    between, so what was checked is what is written), else None."""
    t = type(v)
    if not (t is dict or t is list or t is tuple):
        return None
    if _bound.bound(v, _BIG, 0, _DETACH_DEPTH, _BIG, _BIG, _BIG, _bound.BOUNDED_SCALARS) < 0:
        return None
    try:
        return _bound.paused_dumps(v)  # no finalizer changes *v* mid-write
    except _JSONError:
        # A subclass of a scalar type (orjson hands it to its default), an int past 64
        # bits: read member by member, where it is written or refused.
        return None


#: Levels `_detached` goes down before it refuses a value (the size walk's own ceiling,
#: far above any ``max_depth``): a value a hook made cyclic would otherwise never end.
_DETACH_DEPTH: Final = 255

# How `_detached` takes a value of a type other than dict, list and tuple (`_route`):
# exact types orjson writes itself (an aware datetime's Python tzinfo is asked its offset
# mid-write, but the containers orjson is in then are copies nothing else holds).
_KEEP, _FINITE, _DICT_COPY, _LIST_COPY, _ENUM, _DEFAULT = range(6)
_BASE_ROUTES: Final[dict[type, int]] = {
    **dict.fromkeys((str, int, bool, type(None), orjson.Fragment, *_bound.BOUNDED_SCALARS), _KEEP),
    float: _FINITE,
}
_ROUTES: dict[type, int] = dict(_BASE_ROUTES)
_ROUTED_CLASSES = 1024  # past this many classes the cache starts again
_type_flags = type.__dict__["__flags__"].__get__  # past a metaclass's attributes
_INT_OR_STR_SUBCLASS = 1 << 24 | 1 << 28  # Py_TPFLAGS_LONG_SUBCLASS, _UNICODE_SUBCLASS
_LIST_SUBCLASS = 1 << 25
_DICT_SUBCLASS = 1 << 29


def _route(t: type) -> int:
    """orjson's own choice for a value of type *t*, kept: in its order, a subclass of
    int or str (written from its value), of list or dict (by the type's flags, as it
    looks), an Enum (its value); anything else goes to its default."""
    flags = _type_flags(t)
    if flags & _INT_OR_STR_SUBCLASS:
        route = _KEEP
    elif flags & _LIST_SUBCLASS:
        route = _LIST_COPY
    elif flags & _DICT_SUBCLASS:
        route = _DICT_COPY
    elif issubclass(t, enum.Enum):
        route = _ENUM
    else:
        route = _DEFAULT
    if len(_ROUTES) >= _ROUTED_CLASSES:
        _ROUTES.clear()
        _ROUTES.update(_BASE_ROUTES)
    _ROUTES[t] = route
    return route


def _detached(v: Any, depth: int) -> Any:
    """*v* as orjson, with `_as_fragment` for its default, would write it, made of what
    no Python code can change any more: a part orjson writes by itself is its bytes (a
    Fragment: `_clean_json`), another container a copy read once, a value orjson would
    hand to its default that default's answer. A part a hook changed since the caller's
    walk so that it needs a marker (a NaN, past the depth) raises ValueError: the
    renderer writes it."""
    if depth > _DETACH_DEPTH:
        raise ValueError("nested deeper than a walk admits")
    t = type(v)
    if t is dict or t is list or t is tuple:
        clean = _clean_json(v)
        if clean is not None:
            return orjson.Fragment(clean)
        if t is dict:
            return {k: _detached(x, depth + 1) for k, x in list(v.items())}
        return [_detached(x, depth + 1) for x in tuple(v)]
    route = _ROUTES.get(t)
    if route is None:
        route = _route(t)
    if route == _DEFAULT:
        out = _as_fragment(v)
        return out if type(out) is orjson.Fragment else _detached(out, depth)
    if route == _KEEP:
        return v  # orjson writes it without running Python code
    if route == _FINITE:
        if not math.isfinite(v):
            raise ValueError("a float orjson writes as null")
        return v
    if route == _DICT_COPY:  # orjson reads a subclass's entries, past its methods
        return {k: _detached(x, depth + 1) for k, x in list(dict.items(v))}
    if route == _LIST_COPY:
        return [_detached(x, depth + 1) for x in list.copy(v)]
    return _detached(v.value, depth)  # an Enum: orjson writes its value


def _as_fragment(v: Any) -> Any:
    """A value orjson does not write itself, inside `whole`: a native value written by
    its library; a dataclass's members, a set's items, a model serializer's JSON as
    JSON values (which `_detached` reads)."""
    # Only a value written alike wherever it stands: written by pydantic here, a model
    # serializer's int past 64 bits was a number, marked everywhere else (docs/values.md),
    # and a spill written a member at a time disagreed with one encoder call.
    data = _library_json(v) if written_alike(v) else None
    if data is not None:
        return orjson.Fragment(data)
    if isinstance(v, set | frozenset):
        return list(v)  # only inside an attrs instance: the walk refuses sets elsewhere
    view = adapt(v, _NO_LIMIT)
    t = type(view)
    if t is Raw:
        return orjson.Fragment(view.data)
    native = view._native if t in VIEWS else None
    if native is None:
        if t in _JSON:
            return view  # a dataclass's members, a model serializer's JSON
        raise TypeError(type(v).__name__)
    return orjson.Fragment(native())


#: `_Walk`'s *inside* under a msgspec Struct, which msgspec writes whole.
STRUCT: Final = 2
#: `_Walk`'s *inside* under a pydantic model, which pydantic writes whole.
PYDANTIC: Final = 3


def _refused_by_pydantic(v: Any) -> bool:
    """Whether pydantic, writing a model that holds *v*, raises for it: an attrs
    instance, a msgspec Struct or Raw, an orjson Fragment, a NumPy array or scalar (but
    one of a type pydantic writes: a subclass of a Python type it knows, such as
    `np.float64`, `np.complex128`, `np.str_` or `np.bytes_`)."""
    t = type(v)
    if isinstance(v, _KNOWN_TO_PYDANTIC) or dataclasses.is_dataclass(v):
        return False
    mods = sys.modules
    if t is orjson.Fragment or getattr(t, "__attrs_attrs__", None) is not None:
        return True
    ms = mods.get("msgspec")
    if ms is not None and (isinstance(v, ms.Struct) or t is ms.Raw):
        return True
    np = mods.get("numpy")
    return np is not None and isinstance(v, np.ndarray | np.generic)


#: Types pydantic writes a subclass of as it writes them.
_KNOWN_TO_PYDANTIC: Final = (
    str, bytes, bytearray, int, float, complex, dict, list, tuple, set, frozenset,
    enum.Enum, decimal.Decimal, uuid.UUID, _dt.date, _dt.time, _dt.timedelta,
)  # fmt: skip


class _Walk:
    """A lower bound of a value's encoded size, or -1 when some part needs a marker.

    Inside a native value (*inside* 1, `STRUCT` under a msgspec Struct, `PYDANTIC` under
    a pydantic model; 0 outside), a leaf of a type the walk does not know is its
    library's business and counts one byte (or its length); outside, it needs the
    renderer, as does anything under a field cap, whose encoded length the walk cannot
    bound from below without writing it. Under a pydantic model, a value pydantic
    refuses needs the renderer too: asked to write it, pydantic would write all that
    comes before it and raise, at each level of a cut tree that holds it.
    """

    __slots__ = ("caps", "fresh", "known", "natives", "runs", "views")

    def __init__(
        self,
        caps: _bound.Caps,
        known: dict[tuple[int, int], tuple[Any, int]] | None = None,
        views: dict[int, tuple[Any, Any]] | None = None,
        fresh: dict[int, tuple[Any, Any]] | None = None,
    ) -> None:
        self.caps = caps
        self.known = known
        self.views = views  # what earlier walks made, read
        self.fresh = fresh  # what this walk makes (see `whole`)
        self.natives = False
        self.runs: dict[int, type] = {}  # id of a list bounded whole as one class's run

    def size(self, v: Any, cap: int, depth: int, *, inside: int) -> int:
        n = self._size(v, cap, depth, inside=inside)
        known = self.known
        if n > cap and known is not None and type(v) not in _JSON:
            # A lower bound of its own size: held, so its id stays its own (see `whole`).
            # A larger one known already (the value's exact size) is kept.
            had = known.get((id(v), depth))
            if had is None or had[0] is not v or had[1] < n:
                known[id(v), depth] = (v, n)
        return n

    def _adapt(self, v: Any) -> Any:
        """`adapt` for the walk, once per value where the caller keeps *views*."""
        fresh = self.fresh
        if fresh is None:
            return adapt(v, _NO_LIMIT)
        for seen in (self.views, fresh):
            hit = seen.get(id(v)) if seen is not None else None
            if hit is not None and hit[0] is v:
                return hit[1]
        view = adapt(v, _NO_LIMIT)
        fresh[id(v)] = (v, view)  # holding *v* keeps its id its own
        return view

    def _size(self, v: Any, cap: int, depth: int, *, inside: int) -> int:
        max_depth, max_items, max_keys, max_field, scalars = self.caps
        t: Any = type(v)
        if t in _JSON:
            # JSON: the compiled walk, and by hand only below what it does not know.
            if inside == STRUCT:  # the compiled walk would take a dataclass as orjson's
                n = native_bound(v, cap, depth, self.caps)[0]
            else:
                n = _bound.bound(v, cap, depth, max_depth, max_items, max_keys, max_field, scalars)
            if n >= 0 or not (t is dict or t is list or t is tuple):
                return n
            if depth >= max_depth or len(v) > (max_keys if t is dict else max_items):
                return -1
            if t is dict:
                return self._members(v.items(), len(v), cap, depth, inside=inside)
            return self._items(v, len(v), cap, depth, inside=inside)
        if t in VIEWS:
            view = v
            if "msgspec" in sys.modules and isinstance(v._src, sys.modules["msgspec"].Struct):
                inside = STRUCT
            elif _pydantic_model(v._src):
                inside = PYDANTIC
        else:
            if t is _Repeated or (inside == PYDANTIC and _refused_by_pydantic(v)):
                # A key twice: pydantic would write it twice; the renderer marks it.
                return -1
            plan = _flat_plan(t) if t.__module__ != "builtins" else None
            vals = plan[0](v) if plan is not None else None
            if vals is not None:
                # Its field values, bounded as a tuple, plus what its keys add.
                assert plan is not None
                # The values stand for an object's members (or an array-like Struct's
                # items): past either cap, the renderer writes the marker.
                if depth >= max_depth or len(vals) > min(max_items, max_keys):
                    return -1
                if type(vals) is dict:
                    n = _bound.bound(
                        vals, cap, depth, max_depth, max_items, max_keys, max_field, scalars
                    )
                    if n < 0:
                        n = self._members(
                            vals.items(), len(vals), cap - plan[1], depth, inside=PYDANTIC
                        )
                else:  # a Struct's field values: msgspec writes what they hold
                    n = native_bound(vals, cap, depth, self.caps)[0]
                    if n < 0 and _holds_unset(vals):
                        # Here an UNSET would count a byte and a comma msgspec does not
                        # write: the Struct's members, without it, are walked below.
                        vals = None
                    elif n < 0:
                        n = self._items(vals, len(vals), cap - plan[1], depth, inside=STRUCT)
                if vals is not None:
                    if n < 0:
                        return -1
                    self.natives = True
                    return n + plan[1]
            if inside == STRUCT and (
                dataclasses.is_dataclass(v) or getattr(t, "__attrs_attrs__", None) is not None
            ):
                # msgspec writes one by its own rules (a dataclass's private fields, no
                # attrs private ones, and past the caps): the renderer writes it by ours.
                return -1
            view = self._adapt(v)
            tv = type(view)
            if tv is Unencodable or tv is Clip or tv is Blob or tv is Again:
                return -1  # a NumPy NaN, say: the marker, never the library's null
            if "msgspec" in sys.modules and isinstance(v, sys.modules["msgspec"].Struct):
                inside = STRUCT
            elif tv in VIEWS and _pydantic_model(v):
                inside = PYDANTIC
            if view is UNKNOWN:
                if not inside or max_field < _BIG:
                    return -1
                container = isinstance(v, Mapping | Sequence | set | frozenset)
                if container and (depth >= max_depth or not counts_in_c(t)):
                    # The renderer writes the depth marker, or reads by iteration a
                    # container whose count is Python code (it may lie or raise).
                    return -1
                # Past its cap the renderer writes the marker: never proved clean.
                if isinstance(v, Mapping):
                    if len(v) > max_keys:
                        return -1
                    return self._members(v.items(), len(v), cap, depth, inside=inside)
                if isinstance(v, Sequence | set | frozenset) and not isinstance(v, str):
                    if len(v) > max_items:
                        return -1
                    return self._items(v, len(v), cap, depth, inside=inside)
                if isinstance(v, Iterator):
                    # Read once: written by its library, it is gone if that output does
                    # not fit (a pydantic Iterable field came out []). The renderer pulls
                    # it, and keeps what it pulled.
                    return -1
                # Its library's business: at least a byte, or a byte a unit of its length.
                return len(v) + 1 if isinstance(v, Sized) else 1
            self.natives = True  # orjson writes a dataclass; `_as_fragment` the rest
            if tv is Raw:
                return len(view.data)
            if tv not in VIEWS:
                return self.size(view, cap, depth, inside=inside)
        if depth >= max_depth or len(view) > (max_keys if isinstance(view, MapView) else max_items):
            return -1
        if type(view) is _ArrayView:
            return _array_size(view._src, cap, depth, self.caps)
        inside = inside or 1
        if isinstance(view, MapView):
            # A dict's keys as its library spells them may repeat (1 and "1": pydantic
            # writes "1" twice), a model's or Struct's fields never do.
            seen: set[str] | None = set() if type(view) is _DictView else None
            return self._members(view.raw_items(), len(view), cap, depth, inside=inside, seen=seen)
        return self._items(view.raw_iter(), len(view), cap, depth, inside=inside)

    def _members(
        self,
        members: Iterable[tuple[Any, Any]],
        n: int,
        cap: int,
        depth: int,
        *,
        inside: int,
        seen: set[str] | None = None,
    ) -> int:
        """*seen*: the keys so far, where a key may come twice (the renderer marks it)."""
        size = 1 + 4 * n  # braces, quotes, colons and commas
        for k, x in members:
            if type(k) is not str:
                return -1
            if seen is not None:
                if k in seen:
                    return -1
                seen.add(k)
            sub = self.size(x, cap - size, depth + 1, inside=inside)
            if sub < 0:
                return -1
            size += len(k) + sub
            if size > cap:
                return size
        return size

    def _items(self, items: Iterable[Any], n: int, cap: int, depth: int, *, inside: int) -> int:
        size = n + 1
        if size > cap:
            return size
        start = 0
        if n and (type(items) is list or type(items) is tuple):
            start, size = self._flat_run(items, n, size, cap, depth)
            if size > cap:
                return size
        for x in islice(items, start, None):
            sub = self.size(x, cap - size, depth + 1, inside=inside)
            if sub < 0:
                return -1
            size += sub
            if size > cap:
                return size
        return size

    def _flat_run(
        self, items: list[Any] | tuple[Any, ...], n: int, size: int, cap: int, depth: int
    ) -> tuple[int, int]:
        """Bound a list of flat native values of one class in runs, one compiled call each.

        Each value's field values go to the compiled walk as a tuple (a tuple is bounded
        as an array: commas and brackets), plus what its keys add. Returns how many items
        were bounded and the size so far; the caller walks the rest one by one.
        """
        t: Any = type(items[0])
        if t in _JSON:
            return 0, size
        plan = _flat_plan(t)
        if plan is None:
            return 0, size
        values, extra = plan
        max_depth, max_items, max_keys, max_field, scalars = self.caps
        both = min(max_items, max_keys)
        i = 0
        while i < n and size <= cap:
            k = min(n - i, max(8, (cap - size) // (max(extra, 0) + 2) + 1))
            run = items[i : i + k]
            if set(map(type, run)) != {t}:
                return i, size
            tuples = list(map(values, run))  # in C: `astuple`, or the instance dicts
            # A Struct's tuple stands for an object: it passes neither cap (a nested list
            # held to both is only walked one by one, never let through).
            sub = _bound.bound_items(
                tuples, cap - size, depth + 1, max_depth, both, max_keys, max_field, scalars
            )
            if sub < 0:
                return i, size
            self.natives = True
            size += sub - (k - 1) + extra * k  # the caller counted the commas already
            i += k
        if i == n:
            self.runs[id(items)] = t
        return i, size


_Flat = tuple[Callable[[Any], Any], int]
_INSTANCE_DICT = operator.attrgetter("__dict__")


@lru_cache(maxsize=1024)  # a pure function of the class; holds no per-call state
def _flat_plan(t: Any) -> _Flat | None:
    """For a class whose instances write one member per field: how to get the members
    in a form the compiled walk bounds (a tuple of the values, or the instance dict),
    and the bytes the keys add to that bound. None for classes that need the full walk.
    """
    mods = sys.modules
    if "msgspec" in mods and issubclass(t, mods["msgspec"].Struct):
        cfg = t.__struct_config__
        if cfg.omit_defaults:
            return None  # which fields are written depends on the values
        extra = 0 if cfg.array_like else _struct_keys(t)
        if extra is None:
            return None  # its field types cannot be read: the full walk
        if cfg.tag_field is not None:
            extra += len(cfg.tag_field.encode()) + len(_dumps(cfg.tag)) + 4
        return mods["msgspec"].structs.astuple, extra
    if "pydantic" in mods and issubclass(t, mods["pydantic"].BaseModel):
        plan = _model_plan(t)
        if plan.whole_only or plan.root or plan.computed or plan.repeats:
            return None  # `repeats`: pydantic writes a key twice, which the renderer marks
        # A declared model may hold a subclass, which pydantic writes as declared: the
        # bound then counts more than is written, and the renderer (typed) decides.
        if any(f[2] or f[3] is not None for f in plan.fields):
            return None
        if len(plan.fields) != len(t.__pydantic_fields__):
            return None  # excluded fields: the values are not the members
        if t.model_config.get("extra") == "allow":
            return None  # extras are members the instance dict does not hold: capped too
        # The instance dict holds the members under their names: the compiled walk bounds
        # it whole, keys included, and the keys' aliases correct it.
        names = sum(len(f[0].encode()) for f in plan.fields)
        keys = sum(len(f[1].encode()) for f in plan.fields)
        return _INSTANCE_DICT, keys - names
    return None


def _struct_keys(t: Any) -> int | None:
    """The bytes a Struct's keys add to the bound of its field values (a tuple: brackets
    and a comma between each two), whatever fields are `UNSET`; None if its field types
    cannot be resolved.

    msgspec leaves an `UNSET` field out, key, value and comma. Every walk of the tuple
    (the compiled one too) counts a comma per field before it reads the values, and may
    stop, past its room, before it reaches an `UNSET` one (which it otherwise refuses):
    so a field whose type admits `UNSET` adds no key here and takes its comma back, and
    the bound stays a lower bound of what msgspec writes, however many are unset.
    """
    ms = sys.modules["msgspec"]
    try:
        fields = ms.structs.fields(t)
    except (NameError, TypeError, AttributeError):  # a forward reference it cannot resolve
        return None
    unset = ms.UnsetType
    return sum(-1 if _admits(f.type, unset) else len(f.encode_name.encode()) + 3 for f in fields)


def _holds_unset(vals: tuple[Any, ...]) -> bool:
    """Whether a Struct's field values hold `msgspec.UNSET` (by identity: no ``__eq__``)."""
    unset = sys.modules["msgspec"].UNSET
    return any(v is unset for v in vals)


def _admits(ann: Any, unset: type, depth: int = 0) -> bool:
    """Whether a field of type *ann* may hold *unset* (`msgspec.UNSET`'s type): it names
    it, or it is a type that takes any value (``Any``, ``object``, a type variable)."""
    if depth > _ANNOTATION_DEPTH or ann is unset or ann is Any or ann is object:
        return True
    if isinstance(ann, typing.TypeVar) or getattr(ann, "__name__", None) == "Any":
        return True  # typing_extensions' Any too
    origin = typing.get_origin(ann)
    if origin is typing.Annotated:
        return _admits(typing.get_args(ann)[0], unset, depth + 1)
    if origin is typing.Union or origin is types.UnionType:
        return any(_admits(a, unset, depth + 1) for a in typing.get_args(ann))
    if type(ann).__name__ == "TypeAliasType":  # a `type X = ...` statement
        return _admits(ann.__value__, unset, depth + 1)
    supertype = getattr(ann, "__supertype__", None)  # a NewType
    return supertype is not None and _admits(supertype, unset, depth + 1)


def _pydantic_model(v: Any) -> bool:
    """Whether *v* is a pydantic model or a pydantic dataclass."""
    pydantic = sys.modules.get("pydantic")
    if pydantic is None:
        return False
    t = type(v)
    return issubclass(t, pydantic.BaseModel) or (
        "__pydantic_fields__" in t.__dict__ and "__dataclass_fields__" in t.__dict__
    )


def _array_size(a: Any, cap: int, depth: int, caps: _bound.Caps) -> int:
    max_depth, max_items, _, _, _ = caps
    low: int = 2 * a.size + 1
    if low > cap:
        return low
    if a.ndim + depth > max_depth or any(d > max_items for d in a.shape):
        return -1
    kind = a.dtype.kind
    if kind not in "iubfmM":
        return -1  # complex, object, strings: orjson refuses; the view writes them
    if kind == "f" and not sys.modules["numpy"].isfinite(a).all():
        return -1  # orjson writes NaN as null; the encoder marks it
    if kind == "M" and not _datetimes_as_orjson(a):
        return -1  # the view writes each time as `_datetime64` does
    return low


#: The datetime64 units orjson writes (of one unit each: it misreads `datetime64[2D]`).
_ORJSON_UNITS: Final = frozenset({"Y", "M", "W", "D", "h", "m", "s", "ms", "us", "ns"})


def _datetimes_as_orjson(a: Any) -> bool:
    """Whether orjson writes datetime64 array *a* as the times it holds, and does not
    refuse any: no NaT (a date in some units), no nanoseconds (cut off), a unit it
    writes, its earliest and latest times in its years 1 to 9999 (then all are). The
    process dies where orjson refuses one inside an array of more than one dimension.
    Reads the whole array: called where its bound fits."""
    np = sys.modules["numpy"]
    unit, count = np.datetime_data(a.dtype)
    if count != 1 or unit not in _ORJSON_UNITS or not a.size or np.isnat(a).any():
        return False
    if unit == "ns" and not (a.astype("datetime64[us]") == a).all():
        return False
    try:
        _dumps([a.min(), a.max()], option=_NUMPY_OPT)
    except _JSONError:
        return False
    return True

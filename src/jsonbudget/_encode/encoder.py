"""The budgeted encoder: JSON that always fits ``max_bytes`` and marks every cut.

Design (see README, "How the encoder works"):

* A subtree that is *clean* (only types orjson encodes exactly, within every cap) and
  provably small is encoded by one ``orjson.dumps`` call. "Provably small" comes from a
  walk (`_bound`, compiled in ``_speedups.c``) that stops as soon as a lower bound of the
  encoded size passes the budget, so a 50 MB object or a 1 GB string is never encoded
  whole.
* Everything else goes through `EncodeCall`, which renders container by container. Each
  scalar and each string prefix is still encoded by orjson; this module never escapes
  JSON by hand. Strings are cut by slicing characters first (a character is at least one
  byte), encoding the slice, and backing up until orjson accepts the cut as a string.
* ``balanced`` shares a container's budget among its values by water-filling: small
  values stay whole, large ones are cut to a common level. ``prefix`` fills in document
  order. Lists always keep a prefix of their items.
"""

from __future__ import annotations

import enum
import re
from collections.abc import Callable, Iterable, Iterator, Mapping
from dataclasses import dataclass
from itertools import chain, islice
from typing import Any, Literal, TypeAlias

import orjson

from .._frozen import fast_constructor
from .._limits import DEFAULT_MAX_DEPTH, MAX_DEPTH, MAX_LIMIT, Limits
from ..errors import EncodeError, LimitError
from . import bound as _bound
from . import values as _values
from .bound import BOUNDED_SCALARS as _BOUNDED_SCALARS
from .bound import TOO_BIG as _TOO_BIG
from .bound import UNCLEAN as _UNCLEAN
from .bound import compact as _compact

__all__ = [
    "EncodeCall",
    "Encoded",
    "Encoder",
    "MarkerStyle",
    "RunSizer",
    "Strategy",
    "Truncation",
    "TruncationKind",
    "TruncationUnit",
    "bounded_dumps",
    "dumps_whole",
    "encode",
    "pointer",
]

TruncationKind = Literal["string", "items", "keys", "depth", "item", "unencodable"]
TruncationUnit = Literal["chars", "bytes", "items", "keys"]
Strategy = Literal["balanced", "prefix"]
MarkerStyle = Literal["text", "structured"]
OnUnencodable = Literal["marker", "error"]


@dataclass(frozen=True, slots=True)
class Truncation:
    """One cut: where (an RFC 6901 pointer into the output), what, and how much was left out."""

    path: str
    kind: TruncationKind
    omitted: int | None
    unit: TruncationUnit

    def to_dict(self) -> dict[str, Any]:
        """The wire form used in page envelopes."""
        return {"path": self.path, "kind": self.kind, "omitted": self.omitted, "unit": self.unit}


@dataclass(frozen=True, slots=True)
class Encoded:
    """The bounded JSON bytes plus the side-band report of every cut."""

    data: bytes
    complete: bool
    truncations: tuple[Truncation, ...]


_truncation: Callable[[str, TruncationKind, int | None, TruncationUnit], Truncation] = (
    fast_constructor(Truncation)
)
_new_encoded: Callable[[bytes, bool, tuple[Truncation, ...]], Encoded] = fast_constructor(Encoded)


_Truncs: TypeAlias = list[Truncation]
_Out: TypeAlias = tuple[bytes, _Truncs]

_dumps = orjson.dumps
_loads = orjson.loads
_JSONError = orjson.JSONEncodeError
_NO_TRUNCS: _Truncs = []  # shared, never mutated: callers copy before appending
_BIG = 1 << 62
_SURROGATE = re.compile("[\ud800-\udfff]")
_CONTINUATION = bytes(range(0x80, 0xC0))  # UTF-8 bytes 10xxxxxx
#: From this many items on, a run of list items is bounded and encoded at once.
_BULK_MIN = 2
#: Long strings are encoded this many characters at a time (see `_encode_piece`).
_SLICE_CHARS = 2048
#: orjson output shorter than this is copied out of its oversized buffer (see `_encoded`).
_COMPACT_BELOW = 8192
_SCALARS = (int, float, *_BOUNDED_SCALARS)  # bool is an int
# orjson's own nesting limit; the encoder's max_depth is far below it.
_DEFAULT_CHAIN = 254


def pointer(parent: str, key: str | int) -> str:
    """Extend an RFC 6901 JSON Pointer by one reference token."""
    if type(key) is int:
        return f"{parent}/{key}"
    return parent + "/" + str(key).replace("~", "~0").replace("/", "~1")


class _Stream:
    """A lazily consumed iterator, pulled only as far as the budget needs."""

    __slots__ = ("done", "it", "items")

    def __init__(self, it: Iterator[Any]) -> None:
        self.it = it
        self.items: list[Any] = []
        self.done = False

    def has(self, index: int) -> bool:
        while len(self.items) <= index and not self.done:
            try:
                self.items.append(next(self.it))
            except StopIteration:
                self.done = True
        return index < len(self.items)


# What the renderer walks as it is: orjson's exact types, the subclasses orjson writes as
# their base (str, int, dict, list), and the views of native values. Anything else (a
# float or tuple subclass, a non-dict Mapping) meets `default` first, as in orjson.
_WALKED = frozenset(
    {str, int, float, bool, type(None), dict, list, tuple, _Stream, *_BOUNDED_SCALARS}
)
_WALKED_BASES = (str, int, dict, list, *_values.WALKABLE)


class _Markers:
    """Marker bytes for one style. Every text marker starts with U+2026 then ``[``."""

    __slots__ = ("structured",)

    def __init__(self, style: MarkerStyle) -> None:
        self.structured = style == "structured"

    def string(self, omitted: int) -> tuple[bytes, bytes]:
        """Bytes before and after a kept prefix's encoded content."""
        if self.structured:
            head = b'{"$truncated":{"kind":"string","omitted":%d,"prefix":"' % omitted
            return head, b'"}}'
        return b'"', b'\xe2\x80\xa6[truncated: %d more chars]"' % omitted

    def items(self, omitted: int | None) -> bytes:
        if self.structured:
            count = b"null" if omitted is None else b"%d" % omitted
            return b'{"$truncated":{"kind":"items","omitted":%s}}' % count
        if omitted is None:
            return '"…[omitted: more items]"'.encode()
        return '"…[omitted: %d more items]"'.encode() % omitted

    def key(self, obj: Mapping[Any, Any]) -> str:
        """The key of the member that stands for left-out keys, unused by *obj*."""
        key = "$truncated" if self.structured else "…"
        while key in obj:  # never a duplicate key: lengthen until unused
            key += "…"
        return key

    def keys(self, omitted: int | None, key: str) -> bytes:
        """A whole ``key:value`` member that stands for left-out keys."""
        name = _dumps(key)
        if self.structured:
            count = b"null" if omitted is None else b"%d" % omitted
            return name + b':{"kind":"keys","omitted":%s}' % count
        if omitted is None:
            return name + b':"[omitted: more keys]"'
        return name + b':"[omitted: %d more keys]"' % omitted

    def value(self, kind: str, what: str) -> bytes:
        """A marker that replaces a whole value (depth, unencodable, oversized)."""
        if self.structured:
            body = {"kind": kind, "what": what} if what else {"kind": kind}
            return _dumps({"$truncated": body})
        return _dumps(f"…[{kind}: {what}]" if what else f"…[{kind}]")


def _describe(obj: Any) -> str:
    """Say what stood where a marker now stands, without its content."""
    if isinstance(obj, Mapping):
        return f"object with {len(obj)} keys"
    if isinstance(obj, list | tuple | _values.SeqView):
        return f"list of {len(obj)} items"
    if isinstance(obj, set | frozenset):
        return f"{type(obj).__name__} of {len(obj)} items"
    if isinstance(obj, bytes | bytearray | memoryview):
        return f"{type(obj).__name__} of {len(obj)} bytes"
    if isinstance(obj, float):
        return repr(obj)
    if isinstance(obj, int):
        return "int beyond 64 bits"
    if isinstance(obj, Iterator):
        return "iterator"
    return type(obj).__name__[:40]


class Encoder:
    """A configured, reusable budgeted encoder. Thread-safe: per-call state is private.

    ``default`` works like orjson's: it is called with any object of a type the encoder
    does not know and returns something it does. ``unencodable`` chooses what happens to
    a value that still cannot be encoded: a marker in place (default) or `EncodeError`.
    ``binary`` writes bytes, bytearray and memoryview as a marker (default) or base64.
    Native values (pydantic, msgspec, attrs, Decimal, NumPy) are written as their own
    library writes them (see `values`).
    """

    __slots__ = (
        "_caps",
        "_mk",
        "_values",
        "binary",
        "default",
        "limits",
        "markers",
        "strategy",
        "unencodable",
    )

    def __init__(
        self,
        limits: Limits | None = None,
        *,
        max_bytes: int | None = None,
        max_items: int | None = None,
        max_field_bytes: int | None = None,
        max_depth: int | None = None,
        strategy: Strategy = "balanced",
        markers: MarkerStyle = "text",
        default: Callable[[Any], Any] | None = None,
        unencodable: OnUnencodable = "marker",
        binary: _values.Binary = "marker",
    ) -> None:
        self.limits = _resolve_limits(limits, max_bytes, max_items, max_field_bytes, max_depth)
        if binary not in ("marker", "base64"):
            raise LimitError("binary", binary, "must be 'marker' or 'base64'")
        self.binary: _values.Binary = binary
        self._values = _values.Options(binary, self.limits.max_bytes)
        if strategy not in ("balanced", "prefix"):
            raise ValueError(f"strategy must be 'balanced' or 'prefix', not {strategy!r}")
        if markers not in ("text", "structured"):
            raise ValueError(f"markers must be 'text' or 'structured', not {markers!r}")
        if unencodable not in ("marker", "error"):
            raise ValueError(f"unencodable must be 'marker' or 'error', not {unencodable!r}")
        self.strategy: Strategy = strategy
        self.markers: MarkerStyle = markers
        self._mk = _Markers(markers)
        self.default = default
        self.unencodable: OnUnencodable = unencodable
        lim = self.limits
        # As `_bound.clean_dumps` takes them.
        self._caps: _bound.Caps = (
            lim.max_depth,
            _BIG if lim.max_items is None else lim.max_items,
            _BIG if lim.max_field_bytes is None else lim.max_field_bytes,
            _BOUNDED_SCALARS,
        )

    def encode(self, obj: Any) -> Encoded:
        """Encode *obj* within the limits; report every cut."""
        out = self.fit(obj, self.limits.max_bytes)
        if out is None:  # pragma: no cover - MIN_BYTES is chosen so every marker fits
            raise AssertionError("a marker did not fit the minimum budget")
        return out

    def dumps(self, obj: Any) -> bytes:
        """Encode *obj* within the limits and return only the bytes."""
        if type(obj) is not str:  # a clean object that fits needs no Encoded
            data = _bound.clean_dumps(obj, self.limits.max_bytes, 0, self._caps)
            if type(data) is bytes:
                return _compact(data) if len(data) < _COMPACT_BELOW else data
        return self.encode(obj).data

    def whole(self, obj: Any, budget: int, *, path: str = "") -> Encoded | None:
        """*obj* encoded without any budget cut if that fits *budget* bytes, else None.

        Markers that do not depend on the budget (unencodable values, the depth, item and
        field caps) still apply. Costs about *budget*, however large *obj* is.
        """
        out = EncodeCall(self).measure(obj, budget, path, 0)
        return None if out is None else _encoded(out)

    def marker(self, kind: str, what: str) -> bytes:
        """A marker in this encoder's style that stands for a whole value."""
        return self._mk.value(kind, what)

    def fit(self, obj: Any, budget: int, *, path: str = "") -> Encoded | None:
        """Encode *obj* into at most *budget* bytes, or None if not even a marker fits.

        *path* prefixes every truncation's pointer (pages use ``/items/3``). The caller
        vouches for *budget*; `encode` passes ``limits.max_bytes``.
        """
        # One orjson call when the object is clean and fits; otherwise render once: a
        # rendering that has room for everything is the full one, so no exact pass first.
        if type(obj) is str:  # the string path sizes it without a walk
            out = EncodeCall(self)._string(obj, budget, path, exact=False)
            return None if out is None else _encoded(out)
        data = _bound.clean_dumps(obj, budget, 0, self._caps)
        if type(data) is bytes:
            return _complete(data)
        out = EncodeCall(self).render(obj, budget, path, 0)
        return None if out is None else _encoded(out)


def _encoded(out: _Out) -> Encoded:
    data, truncs = out
    if truncs is _NO_TRUNCS:
        return _complete(data)
    return _new_encoded(data, not truncs, tuple(truncs))  # a rendering may have cut nothing


def _complete(data: bytes) -> Encoded:
    """``Encoded(data, True, ())``, made faster, with *data* as it may come from orjson."""
    if len(data) < _COMPACT_BELOW:
        # orjson's bytes keep at least 4 KiB of capacity: hand out a compact copy of a
        # short one. A long one wastes little, and copying it would not.
        data = _compact(data)
    return _new_encoded(data, True, ())


def dumps_whole(
    obj: Any, *, default: Callable[[Any], Any] | None = None, markers: MarkerStyle = "text"
) -> bytes:
    """All of *obj*, uncut, for a spill file: orjson's bytes when it is clean, else markers.

    orjson writes NaN and the infinities as ``null``; this writes the encoder's marker
    for them, as for every value orjson refuses. Nesting past `MAX_DEPTH` gets a depth
    marker. Costs what encoding the whole object costs, which is what spilling it means.
    """
    return Encoder(
        max_bytes=MAX_LIMIT, max_depth=MAX_DEPTH, markers=markers, default=default
    ).dumps(obj)


def _resolve_limits(
    limits: Limits | None,
    max_bytes: int | None,
    max_items: int | None,
    max_field_bytes: int | None,
    max_depth: int | None,
) -> Limits:
    if limits is None:
        if max_bytes is None:
            raise TypeError("pass limits= or max_bytes=")
        return Limits(
            max_bytes,
            max_items=max_items,
            max_field_bytes=max_field_bytes,
            max_depth=DEFAULT_MAX_DEPTH if max_depth is None else max_depth,
        )
    overrides = {
        k: v
        for k, v in (
            ("max_bytes", max_bytes),
            ("max_items", max_items),
            ("max_field_bytes", max_field_bytes),
            ("max_depth", max_depth),
        )
        if v is not None
    }
    if not isinstance(limits, Limits):
        raise TypeError(f"limits must be a Limits, not {type(limits).__name__}")
    return limits.replace(**overrides) if overrides else limits


def encode(
    obj: Any,
    limits: Limits | None = None,
    *,
    max_bytes: int | None = None,
    max_items: int | None = None,
    max_field_bytes: int | None = None,
    max_depth: int | None = None,
    strategy: Strategy = "balanced",
    markers: MarkerStyle = "text",
    default: Callable[[Any], Any] | None = None,
    unencodable: OnUnencodable = "marker",
    binary: _values.Binary = "marker",
) -> Encoded:
    """Encode *obj* as JSON within *limits*, with the side-band report of every cut."""
    return Encoder(
        limits,
        max_bytes=max_bytes,
        max_items=max_items,
        max_field_bytes=max_field_bytes,
        max_depth=max_depth,
        strategy=strategy,
        markers=markers,
        default=default,
        unencodable=unencodable,
        binary=binary,
    ).encode(obj)


def bounded_dumps(
    obj: Any,
    *,
    max_bytes: int | None = None,
    limits: Limits | None = None,
    max_items: int | None = None,
    max_field_bytes: int | None = None,
    max_depth: int | None = None,
    strategy: Strategy = "balanced",
    markers: MarkerStyle = "text",
    default: Callable[[Any], Any] | None = None,
    unencodable: OnUnencodable = "marker",
    binary: _values.Binary = "marker",
) -> bytes:
    """Like ``orjson.dumps(obj)``, but the result always fits ``max_bytes``."""
    return Encoder(
        limits,
        max_bytes=max_bytes,
        max_items=max_items,
        max_field_bytes=max_field_bytes,
        max_depth=max_depth,
        strategy=strategy,
        markers=markers,
        default=default,
        unencodable=unencodable,
        binary=binary,
    ).dumps(obj)


class RunSizer:
    """How many items the next bulk run of a list or page takes (one orjson call a run).

    A run aims at a share of the room left, sized by the bytes per item so far; each run
    that does not fit halves the share, and below 5% the caller goes item by item.
    """

    __slots__ = ("share",)

    def __init__(self) -> None:
        self.share = 0.9

    @property
    def live(self) -> bool:
        """Whether runs are still worth trying."""
        return self.share > 0.05

    def size(self, room: int, done: int, done_bytes: int) -> int:
        """Items in the next run, given *done* items took *done_bytes* bytes so far."""
        return int(room * self.share * done / done_bytes)

    def missed(self) -> None:
        """The last run did not fit: aim lower."""
        self.share /= 2


class EncodeCall:
    """State of one encode call: options, active containers (cycles), pulled streams."""

    __slots__ = (
        "active",
        "caps",
        "converted",
        "default",
        "error_on_unencodable",
        "max_depth",
        "max_field",
        "max_items",
        "mk",
        "prefix",
        "sizing",
        "streams",
        "values",
    )

    def __init__(self, enc: Encoder) -> None:
        self.caps = enc._caps
        self.max_depth, self.max_items, self.max_field, _ = self.caps
        self.prefix = enc.strategy == "prefix"
        self.mk = enc._mk
        self.default = enc.default
        self.error_on_unencodable = enc.unencodable == "error"
        self.active: set[int] = set()
        self.streams: dict[int, _Stream] = {}
        self.converted: dict[int, tuple[Any, Any]] = {}
        self.sizing = False  # inside `_min_size`'s render of a member
        self.values = enc._values

    # -- the fast path ---------------------------------------------------------------

    def bulk_step(self, items: Any, start: int, count: int, room: int, depth: int) -> bytes | None:
        """orjson's encoding of ``items[start:start + count]`` if all are clean and fit.

        *room* includes a comma before the run; the result keeps orjson's brackets.
        """
        if count < _BULK_MIN:
            return None
        run = items[start : start + count]
        n = _bound.bound_items(
            run, room, depth, self.max_depth, self.max_items, self.max_field, _BOUNDED_SCALARS
        )
        if n < 0 or n + 1 > room:
            return None
        try:
            data = _dumps(run)
        except _JSONError:  # ints beyond 64 bits, lone surrogates
            return None
        return data if len(data) - 1 <= room else None

    def _fast(self, obj: Any, cap: int, depth: int) -> bytes | int:
        """orjson's bytes for *obj* if it is clean and fits *cap*, else `_TOO_BIG`/`_UNCLEAN`."""
        return _bound.clean_dumps(obj, cap, depth, self.caps)

    # -- measuring and rendering -----------------------------------------------------

    def measure(self, obj: Any, cap: int, path: str, depth: int) -> _Out | None:
        """The full (uncut) rendering of *obj* if it fits *cap*, else None."""
        data = self._fast(obj, cap, depth)
        if type(data) is bytes:
            return data, _NO_TRUNCS
        if data == _TOO_BIG:
            return None
        return self._render(obj, cap, path, depth, exact=True)

    def render(self, obj: Any, allot: int, path: str, depth: int) -> _Out | None:
        """*obj* cut to fit *allot* bytes; None only if not even its marker fits."""
        return self._render(obj, allot, path, depth, exact=False)

    def _render(self, obj: Any, allot: int, path: str, depth: int, *, exact: bool) -> _Out | None:
        """Render *obj* into *allot* bytes. With *exact*, only uncut: None if it does not fit."""
        obj = self._normalize(obj, path)
        if type(obj) is _Marker:
            return self._marker(obj.kind, obj.what, allot, path)
        if isinstance(obj, str):
            return self._string(obj, allot, path, exact=exact)
        if obj is None or isinstance(obj, _SCALARS):
            return self._scalar(obj, allot, path)
        if type(obj) is _values.Raw:
            return self._raw(obj, allot, path, exact=exact)
        # A native value's own library writes it when all of it fits (byte identity).
        data = _values.whole(obj, allot, depth, self.caps)
        if data is not None:
            return data, _NO_TRUNCS
        ident = id(obj)
        if ident in self.active:
            return self._unencodable("cycle", allot, path)
        if depth >= self.max_depth:
            return self._marker("depth", _describe(obj), allot, path)
        self.active.add(ident)
        try:
            if isinstance(obj, Mapping):
                if self.prefix:
                    return self._object_prefix(obj, allot, path, depth, exact=exact)
                return self._object(obj, allot, path, depth, exact=exact)
            return self._list(obj, allot, path, depth, exact=exact)
        finally:
            self.active.discard(ident)

    def _normalize(self, obj: Any, path: str) -> Any:
        """Map *obj* to something `_render` knows: JSON types, a stream, or a marker.

        Each object is converted once per call, so `default` runs once per object even
        though a value may be sized before it is rendered.
        """
        if type(obj) in _WALKED or isinstance(obj, _WALKED_BASES):
            return obj
        hit = self.converted.get(id(obj))
        if hit is not None and hit[0] is obj:
            return hit[1]
        out = self._convert(obj, path)
        self.converted[id(obj)] = (obj, out)  # holding obj keeps its id from being reused
        return out

    def _convert(self, obj: Any, path: str) -> Any:
        # orjson calls `default` up to 255 times in a row (its Recursive(254) test).
        for _ in range(_DEFAULT_CHAIN + 2):
            if type(obj) in _WALKED or isinstance(obj, _WALKED_BASES):
                return obj
            if isinstance(obj, enum.Enum):
                obj = obj.value
                continue
            # Native values (models, Structs, attrs, Decimal, NumPy, dataclasses as orjson
            # selects their fields, Fragment): as their own library writes them.
            native = _values.adapt(obj, self.values)
            if native is not _values.UNKNOWN:
                if type(native) is _values.Unencodable:
                    return self._unknown(native.what, path)
                return native
            if isinstance(obj, Iterator):
                stream = self.streams.get(id(obj))
                if stream is None:
                    stream = self.streams[id(obj)] = _Stream(obj)
                return stream
            if self.default is not None:
                try:
                    obj = self.default(obj)
                except Exception as exc:
                    # Chained, not swallowed: the caller sees the hook's own error.
                    raise EncodeError(
                        f"default raised {type(exc).__name__} for {type(obj).__name__}",
                        path=path,
                    ) from exc
                continue
            # Where orjson would raise: a subclass as its base, a Mapping or Sequence walked.
            native = _values.fallback(obj)
            if native is not _values.UNKNOWN:
                return native
            return self._unknown(_describe(obj), path)
        raise EncodeError("default kept returning unencodable values", path=path)

    def _unknown(self, what: str, path: str) -> _Marker:
        if self.error_on_unencodable:
            raise EncodeError(f"cannot encode {what}", path=path)
        return _Marker("unencodable", what)

    def _raw(self, raw: _values.Raw, allot: int, path: str, *, exact: bool) -> _Out | None:
        """A JSON text written as is; one that does not fit its room becomes a marker."""
        if len(raw.data) <= allot:
            return raw.data, _NO_TRUNCS
        return None if exact else self._marker("unencodable", raw.what, allot, path)

    def _scalar(self, obj: Any, allot: int, path: str) -> _Out | None:
        if isinstance(obj, float) and obj - obj != 0:
            return self._unencodable(repr(float(obj)), allot, path)
        try:
            data = _dumps(obj)
        except _JSONError:  # an int beyond 64 bits
            return self._unencodable(_describe(obj), allot, path)
        return (data, _NO_TRUNCS) if len(data) <= allot else None

    def _unencodable(self, what: str, allot: int, path: str) -> _Out | None:
        if self.error_on_unencodable:
            raise EncodeError(f"cannot encode {what}", path=path)
        return self._marker("unencodable", what, allot, path)

    def _marker(self, kind: str, what: str, allot: int, path: str) -> _Out | None:
        data = self.mk.value(kind, what)
        if len(data) > allot:
            data = self.mk.value(kind, "")  # the kind alone, when the details do not fit
            if len(data) > allot:
                return None
        tkind: TruncationKind = "depth" if kind == "depth" else "unencodable"
        return data, [_truncation(path, tkind, None, "bytes")]

    # -- strings ---------------------------------------------------------------------

    def _string(self, s: str, allot: int, path: str, *, exact: bool) -> _Out | None:
        field = self.max_field
        cap = min(allot, field)
        n = len(s)
        if n + 2 <= cap:
            try:
                data = _dumps(s)
            except _JSONError:  # lone surrogates
                return self._scrubbed(s, allot, path, exact=exact)
            if len(data) <= cap:
                return data, _NO_TRUNCS
            over_field = len(data) > field
        else:
            over_field = n + 2 > field  # a character is at least one byte
        if over_field:
            # The field cap cuts it whatever the budget: that cut is its full rendering.
            out = self._cut(s, field, path)
            if out is not None and len(out[0]) <= allot:
                return out
        if exact:
            return None
        return self._cut(s, cap, path)

    def _cut(self, s: str, allot: int, path: str) -> _Out | None:
        n = len(s)
        head, tail = self.mk.string(n)  # the longest count: the real one has no more digits
        room = allot - len(head) - len(tail)
        if room < 0:
            return None
        content, kept, replaced = _prefix(s, room)
        truncs = [_truncation(path, "string", n - kept, "chars")]
        if replaced:
            truncs.append(_truncation(path, "unencodable", replaced, "chars"))
        head, tail = self.mk.string(n - kept)
        return b"".join((head, content, tail)), truncs

    def _scrubbed(self, s: str, allot: int, path: str, *, exact: bool) -> _Out | None:
        """A string with lone surrogates: each becomes U+FFFD, and the string says so."""
        clean, replaced = _SURROGATE.subn("\ufffd", s)
        note = f"…[replaced: {replaced} lone surrogates]".encode()
        data = _dumps(clean)
        if len(data) + len(note) <= min(allot, self.max_field):
            return (
                data[:-1] + note + b'"',
                [_truncation(path, "unencodable", replaced, "chars")],
            )
        return None if exact else self._cut(s, min(allot, self.max_field), path)

    # -- containers ------------------------------------------------------------------

    def _min_size(self, v: Any, depth: int, path: str, room: int = _BIG) -> int:
        """Bytes of the smallest honest rendering of *v* (a marker, or *v* itself).

        A container that needs markers is rendered to learn whether it is smaller whole
        than cut, but only when its cut form does not fit *room*.
        """
        v = self._normalize(v, path)
        if type(v) is _Marker:
            return len(self.mk.value(v.kind, v.what))
        if isinstance(v, str):
            head, tail = self.mk.string(len(v))
            marker = len(head) + len(tail)
            if len(v) + 2 <= marker:
                full = self._fast(v, marker, depth)
                if type(full) is bytes:
                    return len(full)
            return marker
        if v is None or isinstance(v, _SCALARS):
            out = self._scalar(v, _BIG, "")
            return len(out[0]) if out is not None else 0
        if type(v) is _values.Raw:
            return min(len(v.data), len(self.mk.value("unencodable", v.what)))
        if depth >= self.max_depth:
            return len(self.mk.value("depth", _describe(v)))
        if isinstance(v, _Stream):
            cut = 2 + len(self.mk.items(None))
        elif not v:
            return 2
        elif isinstance(v, Mapping):
            cut = 2 + len(self.mk.keys(len(v), self.mk.key(v)))
        else:
            cut = 2 + len(self.mk.items(len(v)))
        # A short container may be smaller whole (`[null]`) than cut to its marker.
        whole = self._fast(v, cut, depth)
        if type(whole) is bytes:
            return len(whole)
        if whole == _UNCLEAN and cut > room and not self.sizing:
            # Rendered within `cut` bytes, once: sizing its members inside that render
            # asks only the walk, or each level would render the levels below again.
            self.sizing = True
            try:
                out = self.measure(v, cut, path, depth)
            finally:
                self.sizing = False
            if out is not None:
                return len(out[0])
        return cut

    def _key(
        self, k: Any, path: str, obj: Mapping[Any, Any], taken: set[str]
    ) -> tuple[bytes, str, _Truncs]:
        """Encoded key with its colon, its pointer, and a note if it was not a string.

        A key that had to be rewritten (lone surrogates replaced, or not a string) must
        not repeat a key of *obj* or one in *taken* (the keys rewritten so far and the
        left-out marker's): it is lengthened with "…" until it is unique, so every
        pointer names one member.
        """
        unit: TruncationUnit = "keys"
        if isinstance(k, str):
            try:
                return _dumps(k) + b":", pointer(path, k), _NO_TRUNCS
            except _JSONError:
                text, unit = _SURROGATE.sub("\ufffd", k), "chars"
        else:
            text = _SURROGATE.sub("\ufffd", f"…[key: {type(k).__name__} {k!r:.40}]")
        while text in taken or text in obj:
            text += "…"
        taken.add(text)
        p = pointer(path, text)
        return _dumps(text) + b":", p, [_truncation(p, "unencodable", None, unit)]

    def _keys_marker(
        self, buf: bytearray, omitted: int, shown: int, path: str, key: str
    ) -> Truncation:
        if shown:
            buf += b","
        buf += self.mk.keys(omitted, key)
        return _truncation(pointer(path, key), "keys", omitted, "keys")

    def _object(
        self, obj: Mapping[Any, Any], allot: int, path: str, depth: int, *, exact: bool
    ) -> _Out | None:
        n = len(obj)
        avail = allot - 2
        # A member needs at least 4 bytes ('"":0'), so no more than this many can show.
        members = islice(obj.items(), min(n, self.max_items, max(avail, 0) // 4 + 1))
        truncs: _Truncs = []
        mkey = self.mk.key(obj)
        taken = {mkey}
        # Keys are made once, as the members are reached; a second pass sizes the members
        # that need markers by rendering them, and runs only when the first left one out.
        more = ((*self._key(k, path, obj, taken), v) for k, v in members)
        entries: list[tuple[bytes, str, _Truncs, Any]] = []
        for precise in (False, True):
            kept = self._keep(
                entries, more, n=n, avail=avail, mkey=mkey, depth=depth, precise=precise
            )
            if len(kept) == n or n > self.max_items or self.sizing:
                break  # a second pass could not size more precisely inside a sizing
        kept_members = []
        for (kb, kp, ktr, v), m in zip(entries, kept, strict=False):  # entries may be more
            kept_members.append((kb, kp, v, m))
            truncs.extend(ktr)
        omitted = n - len(kept)
        if exact and len(kept) < min(n, self.max_items):
            return None  # cut by the budget; a cut by max_items is part of the full rendering
        space = avail - sum((1 if i else 0) + len(kb) for i, (kb, *_) in enumerate(kept_members))
        if omitted:
            space -= len(self.mk.keys(omitted, mkey)) + (1 if kept else 0)
        outs = self._share(kept_members, space, depth, exact=exact)
        if outs is None:
            return None
        buf = bytearray(b"{")
        for i, ((kb, *_), (data, tr)) in enumerate(zip(kept_members, outs, strict=True)):
            if i:
                buf += b","
            buf += kb
            buf += data
            truncs.extend(tr)
        if omitted:
            truncs.append(self._keys_marker(buf, omitted, len(kept), path, mkey))
        buf += b"}"
        return (bytes(buf), truncs) if len(buf) <= allot else None

    def _keep(
        self,
        entries: list[tuple[bytes, str, _Truncs, Any]],
        more: Iterator[tuple[bytes, str, _Truncs, Any]],
        *,
        n: int,
        avail: int,
        mkey: str,
        depth: int,
        precise: bool,
    ) -> list[int]:
        """The smallest sizes of the members to show: as many as fit, in document order.

        Room is left for the member that says how many were left out, unless every
        member fits without it: that room may be all the rest lacks. *entries* holds
        the members reached so far and grows from *more*. With *precise*, members that
        need markers are rendered to learn whether they are smaller whole than cut.
        """
        sizes: list[int] = []
        used = 0
        extra: list[int] = []  # members that needed the marker's room: all or none
        i = 0
        while True:
            if i == len(entries):
                entry = next(more, None)
                if entry is None:
                    break
                entries.append(entry)
            kb, kp, _, v = entries[i]
            rest = n - i - 1
            sep = 1 if i else 0
            reserve = len(self.mk.keys(rest, mkey)) + 1 if rest and not extra else 0
            room = -1 if precise else avail - used - sep - len(kb) - reserve
            m = self._min_size(v, depth + 1, kp, room)
            cost = sep + len(kb) + m
            if not extra:
                if used + cost + reserve <= avail:
                    used += cost
                    sizes.append(m)
                    i += 1
                    continue
                if n > self.max_items:
                    break  # capped: the full rendering has the marker anyway
            if used + cost > avail:
                break
            used += cost
            extra.append(m)
            i += 1
        if extra and len(sizes) + len(extra) == n:
            sizes += extra
        return sizes

    def _share(
        self, kept: list[tuple[bytes, str, Any, int]], space: int, depth: int, *, exact: bool
    ) -> list[_Out] | None:
        """Water-fill *space* among the values: small ones whole, large ones cut evenly."""
        count = len(kept)
        if not count:
            return []
        mins = [m for *_, m in kept]
        full: list[_Out | None] = [None] * count
        sizes = [_BIG] * count  # exact size where measured, else _BIG
        caps = [-1] * count
        level = max(space // count, 0)
        # Measure with a cap near the water level, raise the level with what turned out
        # small, and re-measure only what is still unknown: each round costs about
        # `space`, and a few rounds settle it.
        for _ in range(8):
            changed = False
            for i, (_, kp, v, m) in enumerate(kept):
                cap = max(level, m)
                if sizes[i] == _BIG and caps[i] < cap:
                    caps[i] = cap
                    out = self.measure(v, cap, kp, depth + 1)
                    if out is not None:
                        full[i] = out
                        sizes[i] = len(out[0])
                        # A whole value may be smaller than the cut form its floor assumed.
                        mins[i] = min(mins[i], sizes[i])
                        changed = True
            level = _water_level(sizes, mins, space)
            if not changed:
                break
        if exact and _BIG in sizes:
            return None
        outs: list[_Out] = []
        for i, (_, kp, v, m) in enumerate(kept):
            known = full[i]
            share = max(m, min(sizes[i], level))
            if known is not None and sizes[i] <= share:
                outs.append(known)
                continue
            out = self.render(v, share, kp, depth + 1)
            if out is None:
                return None
            outs.append(out)
        return outs

    def _object_prefix(
        self, obj: Mapping[Any, Any], allot: int, path: str, depth: int, *, exact: bool
    ) -> _Out | None:
        """Members in document order, each taking what it needs, until the budget is spent."""
        n = len(obj)
        avail = allot - 2
        buf = bytearray(b"{")
        truncs: _Truncs = []
        mkey = self.mk.key(obj)
        taken = {mkey}
        shown = 0
        members = islice(obj.items(), min(n, self.max_items))
        for i, (k, v) in enumerate(members):
            kb, kp, ktr = self._key(k, path, obj, taken)
            rest = n - i - 1
            reserve = len(self.mk.keys(rest, mkey)) + 1 if rest else 0
            sep = 1 if i else 0
            room = avail - (len(buf) - 1) - sep - len(kb) - reserve
            out = self.measure(v, room, kp, depth + 1) if room >= 0 else None
            if out is None and reserve and n <= self.max_items:
                # The room kept for the marker may be all that the rest lacks.
                rest_members = chain(
                    [(kb, kp, ktr, v)],
                    ((*self._key(k2, path, obj, taken), v2) for k2, v2 in members),
                )
                tail = self._whole_members(rest_members, sep, avail - (len(buf) - 1), depth)
                if tail is not None:
                    buf += tail[0]
                    truncs.extend(tail[1])
                    shown = n
                    break
            if room < 0:
                break
            cut = out is None
            if cut:
                if exact:
                    return None
                out = self.render(v, room, kp, depth + 1)
                if out is None:
                    break
            assert out is not None
            if sep:
                buf += b","
            buf += kb
            buf += out[0]
            truncs.extend(ktr)
            truncs.extend(out[1])
            shown += 1
            if cut:
                break
        omitted = n - shown
        if omitted:
            if exact and shown < min(n, self.max_items):
                return None
            truncs.append(self._keys_marker(buf, omitted, shown, path, mkey))
        buf += b"}"
        return (bytes(buf), truncs) if len(buf) <= allot else None

    def _whole_members(
        self, members: Iterable[tuple[bytes, str, _Truncs, Any]], sep: int, space: int, depth: int
    ) -> _Out | None:
        """``key:value`` members rendered whole, comma-joined, if they fit *space* bytes.

        *sep* says whether the first one needs a comma. Costs about *space*.
        """
        buf = bytearray()
        truncs: _Truncs = []
        for kb, kp, ktr, v in members:
            if sep:
                buf += b","
            buf += kb
            room = space - len(buf)
            out = self.measure(v, room, kp, depth + 1) if room > 0 else None
            if out is None:
                return None
            buf += out[0]
            truncs += ktr
            truncs += out[1]
            sep = 1
        return bytes(buf), truncs

    def _list(self, obj: Any, allot: int, path: str, depth: int, *, exact: bool) -> _Out | None:
        """A prefix of the items; the first item that does not fit ends the list."""
        stream = obj if isinstance(obj, _Stream) else None
        n = -1 if stream is not None else len(obj)
        items = stream.items if stream is not None else obj
        avail = allot - 2
        limit = self.max_items
        mk = self.mk
        # Room for the closing marker, sized for the largest count it can say.
        marker_room = len(mk.items(None if stream is not None else n)) + 1
        buf = bytearray(b"[")
        truncs: _Truncs = []
        i = 0
        cut = capped = False
        runs = RunSizer()
        while True:
            if stream is not None:
                if not stream.has(i):
                    break
                last = not stream.has(i + 1)
            else:
                if i and runs.live and n - i >= _BULK_MIN and i < limit:
                    # Flat rows go through in runs, one orjson call each; the items near
                    # the end go one by one.
                    room = avail - len(buf) + 1 - marker_room
                    k = min(runs.size(room, i, len(buf)), n - i, limit - i)
                    step = self.bulk_step(items, i, k, room, depth + 1)
                    if step is not None:
                        buf += b","
                        buf += memoryview(step)[1:-1]
                        i += k
                        continue
                    runs.missed()
                if i >= n:
                    break
                last = i == n - 1
            if i >= limit:
                cut = capped = True
                break
            item = items[i]
            room = avail - (len(buf) - 1) - (1 if i else 0) - (0 if last else marker_room)
            data = self._fast(item, room, depth + 1) if room >= 0 else _TOO_BIG
            if type(data) is bytes:
                out: _Out | None = (data, _NO_TRUNCS)
            elif data == _UNCLEAN:
                out = self._render(item, room, f"{path}/{i}", depth + 1, exact=True)
            else:
                out = None
            partial = False
            if out is None and not last:
                # The room kept for a marker may be all that the rest lacks: a list is
                # cut only when its whole rest does not fit.
                tail = self._tail(obj, i, avail - (len(buf) - 1), path=path, depth=depth)
                if tail is not None:
                    buf += tail[0]
                    truncs.extend(tail[1])
                    break
            if out is None:
                # Only the first item may be cut to fit ("prefix" cuts any): a list of
                # whole items followed by a count reads better than a ragged last item.
                if exact or room < 0 or (i and not self.prefix):
                    cut = True
                    break
                out = self.render(item, room, f"{path}/{i}", depth + 1)
                if out is None:
                    cut = True
                    break
                partial = True
            if i:
                buf += b","
            buf += out[0]
            if out[1]:
                truncs.extend(out[1])
            i += 1
            if partial:
                cut = not last
                break
        if cut:
            if exact and not capped:
                return None
            omitted: int | None = n - i
            if stream is not None:
                omitted = len(stream.items) - i if stream.done else None
            marker = mk.items(omitted)
            fallback = mk.items(None)
            room = allot - len(buf) - (1 if i else 0) - 1
            if len(marker) > room and len(fallback) < len(marker):
                marker, omitted = fallback, None  # a long exact count; "more" is shorter
            if i:
                buf += b","
            buf += marker
            truncs.append(_truncation(f"{path}/{i}", "items", omitted, "items"))
        buf += b"]"
        return (bytes(buf), truncs) if len(buf) <= allot else None

    def _tail(self, obj: Any, start: int, space: int, *, path: str, depth: int) -> _Out | None:
        """Items *start* to the end, rendered whole, comma-led, if they fit *space* bytes.

        Costs about *space*; a stream is pulled no further than *space* bytes of items.
        """
        stream = obj if isinstance(obj, _Stream) else None
        items = stream.items if stream is not None else obj
        buf = bytearray()
        truncs: _Truncs = []
        i = start
        while stream.has(i) if stream is not None else i < len(obj):
            if i >= self.max_items:
                return None  # capped: the full rendering ends with a marker
            if i:
                buf += b","
            room = space - len(buf)
            out = self.measure(items[i], room, f"{path}/{i}", depth + 1) if room > 0 else None
            if out is None:
                return None
            buf += out[0]
            truncs += out[1]
            i += 1
        return bytes(buf), truncs


class _Marker:
    """A value already replaced by a marker during normalization."""

    __slots__ = ("kind", "what")

    def __init__(self, kind: str, what: str) -> None:
        self.kind = kind
        self.what = what


def _water_level(sizes: list[int], mins: list[int], space: int) -> int:
    """The largest level L with sum(max(min_i, min(size_i, L))) <= space."""
    lo, hi = 0, max(space, 0)
    if sum(max(m, min(s, hi)) for s, m in zip(sizes, mins, strict=True)) <= space:
        return hi  # everything fits at the top: no search (the common case)
    while lo < hi:
        mid = (lo + hi + 1) // 2
        total = 0
        for s, m in zip(sizes, mins, strict=True):
            total += max(m, min(s, mid))
            if total > space:
                break
        if total <= space:
            lo = mid
        else:
            hi = mid - 1
    return lo


def _prefix(s: str, room: int) -> tuple[bytes | memoryview, int, int]:
    """The longest prefix of *s* whose encoded content fits *room* bytes.

    Returns the content (without quotes; a view, to spare a copy), the characters kept,
    and how many lone surrogates were replaced. Never cuts inside a UTF-8 character
    (backs up to a lead byte) or a JSON escape (near a backslash, backs up until orjson
    parses the cut).
    """
    # Every character encodes to at least one byte, so `room` characters always suffice;
    # text that is not ASCII mostly takes two or more, so try fewer first (isascii is
    # O(1) on CPython's str). Encoding a fresh slice costs its UTF-8 conversion.
    limit = min(room, len(s))
    took = limit if s.isascii() else room // 2
    data, kept, replaced = _encode_piece(s[:took])
    if len(data) - 2 <= room and took < limit:
        # Short of the room: take more, sized by the bytes per character seen so far.
        per_char = max((len(data) - 2) / max(took, 1), 1.0)
        took = min(limit, took + int((room - len(data) + 2) / per_char * 1.25) + 8)
        data, kept, replaced = _encode_piece(s[:took])
        if len(data) - 2 <= room and took < limit:
            data, kept, replaced = _encode_piece(s[:limit])  # denser text further on
    view = memoryview(data)
    if len(data) - 2 <= room:
        return view[1:-1], kept, replaced
    end = room + 1  # the cut is data[1:end]
    # Back up to the lead byte of the last character if that character is incomplete.
    i = end - 1
    while data[i] & 0xC0 == 0x80:  # a continuation byte
        i -= 1
    lead = data[i]
    width = 1 if lead < 0x80 else 2 if lead < 0xE0 else 3 if lead < 0xF0 else 4
    if i + width > end:
        end = i
    if data.find(b"\\", 1, -1) < 0:
        # Without escapes, characters are the bytes that do not continue a character:
        # count them on whichever side of the cut is shorter.
        if len(data) - 1 - end < end - 1:
            dropped = len(data[end:-1].translate(None, _CONTINUATION))
            return view[1:end], kept - dropped, replaced
        return view[1:end], len(data[1:end].translate(None, _CONTINUATION)), replaced
    while True:  # an escape may be cut: at most 5 steps back, an escape is 6 bytes
        try:
            text = _loads(b'"' + data[1:end] + b'"')
        except orjson.JSONDecodeError:
            end -= 1
            continue
        return view[1:end], len(text), replaced


def _encode_piece(piece: str) -> tuple[bytes | bytearray, int, int]:
    """*piece* encoded as a JSON string, its length in characters, surrogates replaced.

    orjson reserves about eight bytes of output per input character and its bytes keep
    that capacity, so a long piece is encoded in slices copied into one buffer: the
    memory stays near the output's size.
    """
    try:
        return _encode_slices(piece), len(piece), 0
    except _JSONError:  # lone surrogates: replace them, and say how many
        piece, replaced = _SURROGATE.subn("\ufffd", piece)
        return _encode_slices(piece), len(piece), replaced


def _encode_slices(piece: str) -> bytes | bytearray:
    if len(piece) <= _SLICE_CHARS:
        return _dumps(piece)
    buf = bytearray(b'"')
    for start in range(0, len(piece), _SLICE_CHARS):
        buf += memoryview(_dumps(piece[start : start + _SLICE_CHARS]))[1:-1]
    buf += b'"'
    return buf

"""The budgeted encoder: JSON that always fits ``max_bytes`` and marks every cut.

Design (see docs/encoder.md, "How the encoder works"):

* A value that is *clean* (only types orjson encodes exactly, within every cap) and
  provably small is encoded by one ``orjson.dumps`` call. "Provably small" comes from a
  walk (`bound`, compiled in ``_speedups.c``) that stops as soon as a lower bound of the
  encoded size passes the budget, so a 50 MB object or a 1 GB string is never encoded
  whole.
* Everything else goes to the renderer (``render.py``), which asks each node for its
  full rendering within a cap, remembers the answer, and cuts top down, each node once.
"""

from __future__ import annotations

import functools
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any, Final, Literal, TypedDict, TypeVar

from .._configured import Configured, hook_key
from .._frozen import Record, fast_constructor
from .._limits import (
    DEFAULT_MAX_DEPTH,
    MAX_DEPTH,
    MAX_LIMIT,
    MIN_BYTES,
    STRUCTURED_MIN_FIELD_BYTES,
    Limits,
    check_mode,
)
from ..errors import LimitError
from . import bound as _bound
from . import values as _values
from .bound import BOUNDED_SCALARS as _BOUNDED_SCALARS
from .bound import TOO_BIG as _TOO_BIG
from .bound import UNCLEAN as _UNCLEAN
from .bound import compact as _compact
from .markers import Markers, MarkerStyle
from .render import EncodeCall, Out, RunSizer, Stream, cut_text, pointer
from .values import NATIVE_KEYS as _NATIVE_KEYS

__all__ = [
    "EncodeCall",
    "EncodeOptions",
    "Encoded",
    "Encoder",
    "MarkerStyle",
    "OnUnencodable",
    "RunSizer",
    "Strategy",
    "Stream",
    "Truncation",
    "TruncationKind",
    "TruncationUnit",
    "bounded_dumps",
    "dumps_whole",
    "encode",
    "encode_replaying",
    "pointer",
]

TruncationKind = Literal["string", "items", "keys", "depth", "item", "unencodable"]
TruncationUnit = Literal["chars", "bytes", "items", "keys"]
Strategy = Literal["balanced", "prefix"]
OnUnencodable = Literal["marker", "error"]
#: How bytes, bytearray and memoryview are written: a marker, or a base64 string.
BinaryMode = _values.Binary


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


class Encoded(Record):
    """The bounded JSON bytes plus the side-band report of every cut. Immutable; equal,
    hashed and shown by its three fields.

    ``truncations`` is made when first read: a balanced cut of a documentation-heavy
    value reports hundreds of cuts, and making their `Truncation` objects cost more than
    the cut itself for callers that only want the bytes. Once made it is kept; two
    threads reading it first at once may each make one, and the two are equal.
    """

    # ``data`` and ``complete`` are plain slots, read at the cost of a slot load: as
    # properties, reading ``encode(...).data`` cost a twentieth of a 1 KiB encode.
    # Writes are refused by ``__setattr__``, as a frozen dataclass refuses them.
    __slots__ = ("_reports", "_truncations", "complete", "data")
    __match_args__ = _fields = ("data", "complete", "truncations")

    #: Compact JSON of at most the budget's bytes.
    data: bytes
    #: True exactly when nothing was cut or replaced.
    complete: bool
    _truncations: tuple[Truncation, ...] | None
    #: Set instead of ``_truncations`` by the renderer's path: (its reports, their base).
    _reports: tuple[Any, str]

    def __init__(self, data: bytes, complete: bool, truncations: tuple[Truncation, ...]) -> None:
        _set = object.__setattr__
        _set(self, "data", data)
        _set(self, "complete", complete)
        _set(self, "_truncations", truncations)

    def __setattr__(self, name: str, value: object) -> None:
        raise AttributeError(f"Encoded is immutable: cannot set {name!r}")

    def __delattr__(self, name: str) -> None:
        raise AttributeError(f"Encoded is immutable: cannot delete {name!r}")

    @property
    def truncations(self) -> tuple[Truncation, ...]:
        """One entry per cut, in document order."""
        made = self._truncations
        if made is None:  # the renderer's reports and their base, joined once
            trs, base = self._reports
            into: list[Truncation] = []
            _bound.join_reports(trs, base, into, _truncation)
            made = tuple(into)
            object.__setattr__(self, "_truncations", made)
        return made

    def __reduce__(self) -> tuple[type[Encoded], tuple[Any, ...]]:
        return Encoded, self._values()


_truncation: Callable[[str, TruncationKind, int | None, TruncationUnit], Truncation] = (
    fast_constructor(Truncation)
)
_new_encoded: Callable[[bytes, bool, tuple[Truncation, ...]], Encoded] = fast_constructor(
    Encoded, ("data", "complete", "_truncations")
)
#: An `Encoded` of a cut whose truncations are joined when read:
#: ``(data, False, None, (trs, base))``.
_new_reported: Callable[[bytes, bool, None, tuple[Any, str]], Encoded] = fast_constructor(
    Encoded, ("data", "complete", "_truncations", "_reports")
)

_BIG = 1 << 62
_STRATEGIES = ("balanced", "prefix")
_MARKERS = ("text", "structured")
_UNENCODABLE = ("marker", "error")
_BINARY = ("marker", "base64")
#: The caps of a budget-only call, as `bound.clean_dumps` takes them.
_DEFAULT_CAPS: _bound.Caps = (DEFAULT_MAX_DEPTH, _BIG, _BIG, _BIG, _BOUNDED_SCALARS)


def _clean_fit(  # noqa: PLR0917 - the hot path of encode and bounded_dumps, positional
    obj: Any,
    limits: object,
    max_bytes: object,
    max_items: object,
    max_keys: object,
    max_field_bytes: object,
    max_depth: object,
    strategy: object,
    markers: object,
    unencodable: object,
    default: object,
    binary: object,
) -> bytes | int | None:
    """orjson's bytes for *obj* when the call gives a budget alone and *obj* is clean and
    fits: one compiled walk and one orjson call, no configuration built. Else what the
    walk said (`TOO_BIG` or `UNCLEAN`, for the renderer), or None when it did not run.

    Any cap or an invalid mode sends the call down the slow path, which raises for the
    option at fault.
    """
    if not (
        type(max_bytes) is int
        and limits is None
        and max_items is None
        and max_keys is None
        and max_field_bytes is None
        and max_depth is None
        and MIN_BYTES <= max_bytes <= MAX_LIMIT
        and strategy in _STRATEGIES
        and markers in _MARKERS
        and unencodable in _UNENCODABLE
        and binary in _BINARY
        and (default is None or callable(default))
    ):
        return None
    return _native_fit(obj, max_bytes, _bound.clean_dumps(obj, max_bytes, 0, _DEFAULT_CAPS))


def _native_fit(obj: Any, max_bytes: int, walked: bytes | int) -> bytes | int:
    """*walked*, what the fast path said of *obj*; a flat model or Struct it found
    unclean written whole by its library where that fits."""
    if walked == _UNCLEAN and _values.has_class(type(obj), _NATIVE_KEYS):
        return _values.native_whole(obj, max_bytes, 0, _DEFAULT_CAPS) or _UNCLEAN
    return walked


class EncodeOptions(TypedDict, total=False):
    """The keyword options of `encode` and `bounded_dumps`, for functions that forward them."""

    max_bytes: int
    max_items: int | None
    max_keys: int | None
    max_field_bytes: int | None
    max_depth: int | None
    strategy: Strategy
    markers: MarkerStyle
    default: Callable[[Any], Any] | None
    unencodable: OnUnencodable
    binary: BinaryMode


class Encoder:
    """A configured, reusable budgeted encoder. Thread-safe: per-call state is private.

    ``default`` works like orjson's: it is called with any object of a type the encoder
    does not know and returns something it does. ``unencodable`` chooses what happens to
    a value that still cannot be encoded: a marker in place (default) or `EncodeError`.
    ``binary`` writes bytes, bytearray and memoryview as a marker (default) or base64.
    Native values (pydantic, msgspec, attrs, Decimal, NumPy) are written as their own
    library writes them (see docs/values.md). Every invalid limit or mode raises
    `LimitError` naming it. The options are fixed at construction (an encoder configured
    otherwise is made anew): setting one raises `AttributeError`.
    """

    # Plain slots, read at a slot load's cost on every call; writes are refused by
    # ``__setattr__``, as `Encoded` refuses them. A new ``limits`` or ``markers`` set
    # after construction was half applied: the caps and the marker maker are derived
    # from them once, here, while ``max_bytes`` and ``strategy`` were read per call.
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

    limits: Limits
    strategy: Strategy
    markers: MarkerStyle
    default: Callable[[Any], Any] | None
    unencodable: OnUnencodable
    binary: BinaryMode
    _mk: Markers
    _values: _values.Options
    _caps: _bound.Caps

    def __init__(
        self,
        limits: Limits | None = None,
        *,
        max_bytes: int | None = None,
        max_items: int | None = None,
        max_keys: int | None = None,
        max_field_bytes: int | None = None,
        max_depth: int | None = None,
        strategy: Strategy = "balanced",
        markers: MarkerStyle = "text",
        default: Callable[[Any], Any] | None = None,
        unencodable: OnUnencodable = "marker",
        binary: BinaryMode = "marker",
    ) -> None:
        check_mode("strategy", strategy, _STRATEGIES)
        check_mode("markers", markers, _MARKERS)
        check_mode("unencodable", unencodable, _UNENCODABLE)
        check_mode("binary", binary, _BINARY)
        if default is not None and not callable(default):
            raise LimitError("default", default, "must be callable or None")
        lim = _resolve_limits(limits, max_bytes, max_items, max_keys, max_field_bytes, max_depth)
        field = lim.max_field_bytes
        if markers == "structured" and field is not None and field < STRUCTURED_MIN_FIELD_BYTES:
            raise LimitError(
                "max_field_bytes",
                field,
                f"markers='structured' needs at least {STRUCTURED_MIN_FIELD_BYTES} "
                "(the structured string marker's size)",
            )
        _set = object.__setattr__
        _set(self, "limits", lim)
        _set(self, "strategy", strategy)
        _set(self, "markers", markers)
        _set(self, "_mk", Markers(markers))
        _set(self, "default", default)
        _set(self, "unencodable", unencodable)
        _set(self, "binary", binary)
        _set(self, "_values", _values.Options(binary, lim.max_bytes))
        # As `bound.clean_dumps` takes them.
        caps: _bound.Caps = (
            lim.max_depth,
            _BIG if lim.max_items is None else lim.max_items,
            _BIG if lim.max_keys is None else lim.max_keys,
            _BIG if field is None else field,
            _BOUNDED_SCALARS,
        )
        _set(self, "_caps", caps)

    def __setattr__(self, name: str, value: object) -> None:
        if name in _FIXED:
            raise AttributeError(f"Encoder options are fixed at construction: cannot set {name!r}")
        object.__setattr__(self, name, value)  # a subclass's own attribute

    def __delattr__(self, name: str) -> None:
        if name in _FIXED:
            raise AttributeError(
                f"Encoder options are fixed at construction: cannot delete {name!r}"
            )
        object.__delattr__(self, name)

    def __setstate__(self, state: tuple[dict[str, Any] | None, dict[str, Any]]) -> None:
        # Pickle and copy restore the slots (a subclass's too) through setattr, which
        # refuses the options: restored here as __init__ set them.
        own, slots = state
        for name, value in (*(own or {}).items(), *slots.items()):
            object.__setattr__(self, name, value)

    def encode(self, obj: Any, /) -> Encoded:
        """Encode *obj* within the limits; report every cut."""
        data = _bound.clean_dumps(obj, self.limits.max_bytes, 0, self._caps)
        if isinstance(data, bytes):
            return _complete(data)
        return self._fitting(obj, data)

    def dumps(self, obj: Any, /) -> bytes:
        """Encode *obj* within the limits and return only the bytes."""
        data = _bound.clean_dumps(obj, self.limits.max_bytes, 0, self._caps, None, True)
        if isinstance(data, bytes):  # a value that fits whole needs no Encoded
            return data
        if data == _UNCLEAN and _values.has_class(type(obj), _NATIVE_KEYS):  # a model, Struct
            native = _values.native_whole(obj, self.limits.max_bytes, 0, self._caps)
            if native is not None:
                return _compact(native)
        return self._fitting_data(obj, data)

    def _fitting(self, obj: Any, walked: int | None) -> Encoded:
        """`encode` of *obj* that the size walk under these caps did not take: it said
        *walked* (`TOO_BIG` or `UNCLEAN`), or None when it did not run."""
        if walked is None:
            return self.encode(obj)
        if walked == _TOO_BIG and type(obj) is str:
            text = self._text_cut(obj)
            if text is not None:
                data, trs = text
                return _new_encoded(data, False, tuple(_truncation(*tr) for tr in trs))
        return _encoded(_rendering(self._rendered(obj, self.limits.max_bytes, walked)), "")

    def _fitting_data(self, obj: Any, walked: int | None) -> bytes:
        """`_fitting(obj, walked).data`, without joining reports that nobody reads."""
        if walked is None:
            return self.dumps(obj)
        if walked == _TOO_BIG and type(obj) is str:
            text = self._text_cut(obj)
            if text is not None:
                return text[0]
        return _compact(_rendering(self._rendered(obj, self.limits.max_bytes, walked))[0])

    def _text_cut(self, s: str) -> Out | None:
        """What the renderer writes for a top-level str the walk found too big, without
        building a renderer (its setup was half of a 4 KiB cut), or None where the
        renderer must choose: a field cap between the budget and `_BIG` may cut *s* to
        something that fits whole. Every budget is at least `MIN_BYTES`, so the marker
        always fits."""
        budget, field = self.limits.max_bytes, self._caps[3]
        if len(s) + 2 <= budget or budget < field < _BIG:
            return None
        return _rendering(cut_text(s, min(budget, field), self._mk))

    def whole(self, obj: Any, budget: int, *, path: str = "") -> Encoded | None:
        """*obj* encoded without any budget cut if that fits *budget* bytes, else None.

        Markers that do not depend on the budget (unencodable values, the depth, item,
        key and field caps) still apply, and *path* prefixes their reports' pointers, as
        in `fit`. Costs about *budget*, however large *obj* is.
        """
        _check_budget(budget)
        _check_pointer(path)
        call = _call_for(self, budget)
        out = call.render_whole(obj, budget, path)
        return None if out is None else _encoded(out, path)

    def marker(self, kind: str, what: str) -> bytes:
        """A marker in this encoder's style that stands for a whole value: the JSON of
        ``"…[kind: what]"`` (``"…[kind]"`` when *what* is empty), or the structured
        ``{"$truncated":{"kind":kind,"what":what}}``. Not sized by the limits: the
        caller fits it. `TypeError` for a *kind* or *what* that is not a str,
        `LimitError` for one holding a lone surrogate (JSON cannot write it)."""
        for name, text in (("kind", kind), ("what", what)):
            if type(text) is not str:
                raise TypeError(f"{name} must be a str, not {type(text).__name__}")
            if not text.isascii():
                try:
                    text.encode()
                except UnicodeEncodeError:
                    raise LimitError(name, text, "must not hold a lone surrogate") from None
        return self._mk.value(kind, what)

    def fit(self, obj: Any, budget: int, *, path: str = "") -> Encoded | None:
        """Encode *obj* into at most *budget* bytes, or None if not even a marker fits.

        *path* prefixes every truncation's pointer (pages use ``/items/3``): a JSON
        Pointer, ``""`` or a str that starts with ``/`` (`LimitError` otherwise). *budget*
        is not checked against the limits, only for being an int of at most `MAX_LIMIT`
        (`LimitError` otherwise): a caller fitting parts of a page vouches for it.
        """
        _check_budget(budget)
        _check_pointer(path)
        data = _bound.clean_dumps(obj, budget, 0, self._caps)
        if isinstance(data, bytes):
            return _complete(data)
        return self._render(obj, budget, path, data)

    def _render(self, obj: Any, budget: int, path: str, walked: int) -> Encoded | None:
        """The renderer's fitting of *obj*, which `clean_dumps` answered with *walked*."""
        out = self._rendered(obj, budget, walked, path)
        return None if out is None else _encoded(out, path)

    def _rendered(self, obj: Any, budget: int, walked: int, path: str = "") -> Out | None:
        """*obj* fitted to *budget* by a new call, with relative reports."""
        call = _call_for(self, budget)
        if walked == _TOO_BIG:
            call.too_big(obj, budget)  # the renderer's first question, answered: no re-walk
        return call.fit(obj, budget, path)


#: What `Encoder.__setattr__` refuses: its options and what __init__ made of them.
_FIXED: Final = frozenset(Encoder.__slots__)


def _call_for(enc: Encoder, budget: int) -> EncodeCall:
    """A call of *enc* for *budget*, which `whole` and `fit` may set above ``max_bytes``:
    a str subclass is copied up to the larger of the two (copied up to ``max_bytes``
    only, a key past it was written short as if whole)."""
    call = EncodeCall(enc)
    call.most = max(call.most, budget)
    return call


def _rendering(out: Out | None) -> Out:
    """*out*, which a call given at least `MIN_BYTES` always renders."""
    if out is None:  # pragma: no cover - MIN_BYTES is chosen so every marker fits
        raise AssertionError("a marker did not fit the minimum budget")
    return out


def _encoded(out: Out, path: str) -> Encoded:
    """The renderer's output, whose reports become truncations under *path* when read."""
    data, trs = out
    if not trs:
        return _complete(data)
    return _new_reported(data, False, None, (trs, path))


def encode_replaying(enc: Encoder, obj: Any, streams: dict[int, Stream]) -> Encoded:
    """``enc.encode(obj)``, its iterators read through *streams*: what a call pulls from
    an iterator is kept there and given again to the next call with the same streams,
    which pulls on from where the last one stopped. For encoding one value several
    times (a fitter tries several budgets): read alone, an iterator gives its items to
    the first encode only."""
    budget = enc.limits.max_bytes
    data = _bound.clean_dumps(obj, budget, 0, enc._caps)
    if isinstance(data, bytes):
        return _complete(data)
    call = EncodeCall(enc, streams)
    if data == _TOO_BIG:
        call.too_big(obj, budget)
    return _encoded(_rendering(call.fit(obj, budget, "")), "")


def _complete(data: bytes) -> Encoded:
    """``Encoded(data, True, ())``, made faster, with *data* as it may come from orjson."""
    return _new_encoded(_compact(data), True, ())


def dumps_whole(
    obj: Any,
    /,
    *,
    default: Callable[[Any], Any] | None = None,
    markers: MarkerStyle = "text",
    binary: BinaryMode = "marker",
    max_bytes: int = MAX_LIMIT,
    streams: dict[int, Stream] | None = None,
) -> bytes | None:
    """All of *obj*, uncut, for a spill file: orjson's bytes when it is clean, else markers;
    None when that is longer than *max_bytes*.

    *streams* are the iterators a size check already pulled from (an encoder call's):
    an iterator met anywhere in *obj* (in a dataclass, a model, a Mapping) gives what
    it gave then first, and then the rest, so nothing it gave is lost.

    orjson writes NaN and the infinities as ``null``; this writes the encoder's marker
    for them, as for every value orjson refuses. Nesting past `MAX_DEPTH` gets a depth
    marker. Costs what encoding the whole object costs, which is what spilling it means,
    and at most about *max_bytes*: a value of shared subtrees whose encoding is
    astronomically long (2**40 paths) is found too long at the cost of the limit.
    """
    enc = Encoder(
        max_bytes=MAX_LIMIT, max_depth=MAX_DEPTH, markers=markers, default=default, binary=binary
    )
    cap = min(max(max_bytes, 0), MAX_LIMIT)
    data = _bound.clean_dumps(obj, cap, 0, enc._caps, None, True)  # as `Encoder.dumps` starts
    if type(data) is bytes:
        return data
    if data == _bound.TOO_BIG:
        return None
    out = EncodeCall(enc, streams).render_whole(obj, cap, "")
    return None if out is None else out[0]


def _check_budget(budget: object) -> None:
    if type(budget) is not int or budget > MAX_LIMIT:
        raise LimitError("budget", budget, f"must be an int of at most {MAX_LIMIT}")


def _check_pointer(path: object) -> None:
    """Refuse a *path* that `whole` and `fit` could not prefix a report's pointer with:
    checked before any work, as the reports are joined only when first read."""
    if type(path) is not str or path[:1] not in ("", "/"):
        raise LimitError("path", path, "must be a JSON Pointer: '' or a str starting with '/'")


def _resolve_limits(  # noqa: PLR0917 - private, called from one place with all six
    limits: Limits | None,
    max_bytes: int | None,
    max_items: int | None,
    max_keys: int | None,
    max_field_bytes: int | None,
    max_depth: int | None,
) -> Limits:
    if limits is None:
        if max_bytes is None:
            raise TypeError("pass limits= or max_bytes=")
        return Limits(
            max_bytes,
            max_items=max_items,
            max_keys=max_keys,
            max_field_bytes=max_field_bytes,
            max_depth=DEFAULT_MAX_DEPTH if max_depth is None else max_depth,
        )
    if not isinstance(limits, Limits):
        raise TypeError(f"limits must be a Limits, not {type(limits).__name__}")
    overrides = {
        k: v
        for k, v in (
            ("max_bytes", max_bytes),
            ("max_items", max_items),
            ("max_keys", max_keys),
            ("max_field_bytes", max_field_bytes),
            ("max_depth", max_depth),
        )
        if v is not None
    }
    return limits.replace(**overrides) if overrides else limits


#: Encoders made by the one-call verbs, by their options: a budget-only call makes none.
_configured: Configured[Encoder] = Configured()


def _encoder(key: tuple[Any, ...]) -> Encoder:
    """An encoder with these options (`_make`'s order), made once per distinct options."""
    for limit in key[1:6]:
        if limit is not None and type(limit) is not int:
            return _make(key)  # refused there: 64.0 == 64 must not find 64's encoder
    if key[8] is None:
        return _configured.get(key, lambda: _make(key))
    return _configured.get((*key[:8], hook_key(key[8]), *key[9:]), lambda: _make(key))


def _make(key: tuple[Any, ...]) -> Encoder:
    (
        limits,
        max_bytes,
        max_items,
        max_keys,
        field,
        depth,
        strategy,
        markers,
        default,
        unenc,
        binary,
    ) = key
    return Encoder(
        limits,
        max_bytes=max_bytes,
        max_items=max_items,
        max_keys=max_keys,
        max_field_bytes=field,
        max_depth=depth,
        strategy=strategy,
        markers=markers,
        default=default,
        unencodable=unenc,
        binary=binary,
    )


def encode(
    obj: Any,
    /,
    limits: Limits | None = None,
    *,
    max_bytes: int | None = None,
    max_items: int | None = None,
    max_keys: int | None = None,
    max_field_bytes: int | None = None,
    max_depth: int | None = None,
    strategy: Strategy = "balanced",
    markers: MarkerStyle = "text",
    default: Callable[[Any], Any] | None = None,
    unencodable: OnUnencodable = "marker",
    binary: BinaryMode = "marker",
) -> Encoded:
    """Encode *obj* as JSON within *limits*, with the side-band report of every cut."""
    data = _clean_fit(
        obj, limits, max_bytes, max_items, max_keys, max_field_bytes, max_depth,
        strategy, markers, unencodable, default, binary,
    )  # fmt: skip
    if isinstance(data, bytes):
        return _complete(data)
    options = (limits, max_bytes, max_items, max_keys, max_field_bytes, max_depth)
    enc = _encoder((*options, strategy, markers, default, unencodable, binary))
    return enc._fitting(obj, data)


def bounded_dumps(
    obj: Any,
    /,
    limits: Limits | None = None,
    *,
    max_bytes: int | None = None,
    max_items: int | None = None,
    max_keys: int | None = None,
    max_field_bytes: int | None = None,
    max_depth: int | None = None,
    strategy: Strategy = "balanced",
    markers: MarkerStyle = "text",
    default: Callable[[Any], Any] | None = None,
    unencodable: OnUnencodable = "marker",
    binary: BinaryMode = "marker",
) -> bytes:
    """Like ``orjson.dumps(obj)``, but the result always fits ``max_bytes``."""
    data = _clean_fit(
        obj, limits, max_bytes, max_items, max_keys, max_field_bytes, max_depth,
        strategy, markers, unencodable, default, binary,
    )  # fmt: skip
    if isinstance(data, bytes):
        return _compact(data)
    options = (limits, max_bytes, max_items, max_keys, max_field_bytes, max_depth)
    enc = _encoder((*options, strategy, markers, default, unencodable, binary))
    return enc._fitting_data(obj, data)


_F = TypeVar("_F", bound=Callable[..., Any])


def _budget_only(max_bytes: int) -> Encoder:
    """The encoder of a call that gives *max_bytes* alone."""
    return _encoder(
        (None, max_bytes, None, None, None, None, "balanced", "text", None, "marker", "marker")
    )


def _dumps_walked(obj: Any, max_bytes: int, walked: int) -> bytes:
    """``bounded_dumps(obj, max_bytes=max_bytes)`` where the fast path said *walked*."""
    data = _native_fit(obj, max_bytes, walked)
    if isinstance(data, bytes):
        return _compact(data)
    return _budget_only(max_bytes)._fitting_data(obj, data)


def _encode_walked(obj: Any, max_bytes: int, walked: int) -> Encoded:
    """``encode(obj, max_bytes=max_bytes)`` where the fast path said *walked*."""
    data = _native_fit(obj, max_bytes, walked)
    if isinstance(data, bytes):
        return _complete(data)
    return _budget_only(max_bytes)._fitting(obj, data)


# The headline calls, ``bounded_dumps(obj, max_bytes=n)`` and ``encode(obj, max_bytes=n)``,
# answered in C when *obj* is clean and fits: the Python frame and its checks cost as much
# as orjson does on a small result. A value the walk found too big or unclean goes on from
# what it found (a list whose bound fit but whose bytes did not was encoded twice whole);
# every other call runs the functions above as written.
def _front(
    fn: _F,
    finish: Callable[..., Any] | None,
    finish_args: tuple[Any, ...],
    known: Callable[[Any, int, int], Any],
) -> _F:
    door: _F = _bound.front(fn, _DEFAULT_CAPS, MIN_BYTES, MAX_LIMIT, finish, finish_args, known)
    if door is not fn:  # the Python twin hands back the function itself
        functools.update_wrapper(door, fn)
    return door


bounded_dumps = _front(bounded_dumps, None, (), _dumps_walked)
# A complete `Encoded` of the compact bytes: made by its constructor, called from C.
encode = _front(encode, _new_encoded, (True, ()), _encode_walked)

"""`Scope`: who asks and what they asked, fingerprinted canonically.

A cursor is bound to a scope. The query fingerprint ignores key order, equivalent
spellings (``10`` and ``10.0``, a tuple and a list, NFC and NFD text, the same instant in
two time zones), explicit defaults and the page size, so a caller may change the page size
between pages and nothing else.
"""

from __future__ import annotations

import dataclasses
import datetime as _dt
import decimal
import enum
import hashlib
import hmac
import math
import sys
import unicodedata
import uuid
from collections.abc import Collection, Iterator, Mapping, Set
from types import MappingProxyType
from typing import Any, Final, TypeAlias

import orjson

from .._encode.render import reports_itself
from ..errors import EncodeError, LimitError

__all__ = [
    "DEFAULT_PAGE_SIZE_KEYS",
    "MAX_QUERY_DEPTH",
    "Scope",
    "canonical_query",
]

#: Top-level query keys that say how much to return, or where to continue, rather than
#: what to return. They are left out of the fingerprint.
DEFAULT_PAGE_SIZE_KEYS: Final = frozenset(
    {
        "limit",
        "page_size",
        "pageSize",
        "per_page",
        "perPage",
        "max_items",
        "maxItems",
        "max_results",
        "maxResults",
        "cursor",
        "next_cursor",
        "nextCursor",
        "page_token",
        "pageToken",
    }
)
#: Nesting deeper than this in a query is refused (a query is parameters, not data).
MAX_QUERY_DEPTH: Final = 64

_PRINCIPAL_TAG: Final = b"jsonbudget/principal/1\x00"
_QUERY_TAG: Final = b"jsonbudget/query/1\x00"
_SCOPE_TAG: Final = b"jsonbudget/scope/1\x00"
_ABSENT: Final = object()
# what orjson (and most JSON readers) can hold as an integer
_INT_MIN: Final = -(2**63)
_INT_MAX: Final = 2**64 - 1


def _escape(key: str) -> str:
    return key.replace("~", "~0").replace("/", "~1")


#: Where a value is in the query: None for the query itself, else (the parent's place, a
#: key or an index). Built as the walk goes down (one tuple a value) and spelled as a
#: JSON Pointer only for an error: spelled at every value, a wide list under a long key
#: copied the key once an item (a 1.5 MB query took 6 s).
_Where: TypeAlias = "tuple[_Where, str | int] | None"


def _pointer(where: _Where) -> str:
    tokens: list[str] = []
    while where is not None:
        where, token = where
        tokens.append(_escape(token) if isinstance(token, str) else str(token))
    return "".join("/" + t for t in reversed(tokens))


def _canon(value: object, path: _Where, depth: int) -> object:
    """One value in canonical JSON form; raises `EncodeError` naming *path*, also where
    reading the value raised (a mapping that lies about its keys, a dataclass field
    never set, a tzinfo with an offset out of range), as the encoder does.

    The form holds only what orjson writes whatever the caller's classes do: ``None``,
    ``bool``, exact ``int`` in orjson's range, finite exact ``float``, exact ``str``
    without lone surrogates, and lists and dicts of them keyed by exact ``str``, at most
    `MAX_QUERY_DEPTH` deep (orjson's limit is 255). A ``str``, ``int``, ``float`` or
    ``Decimal`` subclass is read through its base type's own methods, never its own:
    orjson refuses a ``str`` subclass as a key, and an overridden ``__int__`` could give
    any number after the range check. A date's or UUID's own spelling is checked
    (`_spelled`). So `_dump` meets nothing orjson refuses.
    """
    try:
        return _canon_value(value, path, depth)
    except MemoryError:
        raise  # the interpreter's, not the query's: as itself, as the encoder does
    except Exception as exc:
        if reports_itself(exc):
            raise  # this walk's own refusal, already naming where
        # the caller's object raised (a jsonbudget error of an inner call too): chained,
        # with where it was
        raise _raised(value, path, exc) from exc


def _raised(value: object, path: _Where, exc: Exception) -> EncodeError:
    what = f"query value of type {type(value).__name__}"
    return EncodeError(f"{what} raised {type(exc).__name__} while read", path=_pointer(path))


def _too_deep(path: _Where) -> EncodeError:
    return EncodeError(f"query nests deeper than {MAX_QUERY_DEPTH} levels", path=_pointer(path))


def _canon_value(value: object, path: _Where, depth: int) -> object:
    if depth > MAX_QUERY_DEPTH:
        raise _too_deep(path)
    # bool before int: True is an int, but a JSON reader tells them apart.
    if value is None or isinstance(value, bool):
        return value
    if isinstance(value, enum.Enum):
        return _canon(value.value, path, depth)
    if isinstance(value, decimal.Decimal):
        return _canon_decimal(value, path)
    if isinstance(value, int):
        # the number it holds, by int's own method: a subclass's __int__ could give one
        # past the range check, which orjson refuses
        value = int.__int__(value)
        if not _INT_MIN <= value <= _INT_MAX:
            raise EncodeError("query holds an integer beyond 64 bits", path=_pointer(path))
        return value
    if isinstance(value, float):
        if not math.isfinite(value):
            raise EncodeError("query holds a non-finite number", path=_pointer(path))
        # 10.0 and 10 are one spelling; -0.0 is 0. Huge floats stay floats (JSON can hold them).
        value = float.__float__(value)  # a subclass (NumPy's float64) as the float it is
        return int(value) if value.is_integer() and _INT_MIN <= value <= _INT_MAX else value
    if isinstance(value, str):
        return _text(value, "value", path)
    if isinstance(value, Mapping):
        return _canon_mapping(value, path, depth)
    if isinstance(value, list | tuple):
        if depth >= MAX_QUERY_DEPTH:  # an empty one too: it is a level of its own
            raise _too_deep(path)
        return [_canon(v, (path, i), depth + 1) for i, v in enumerate(value)]
    if isinstance(value, Set):
        if depth >= MAX_QUERY_DEPTH:
            raise _too_deep(path)
        # A set has no order: its members sorted by their canonical encoding, each once
        # (two spellings of one value, NFC and NFD or an Enum and its value, are two
        # members to Python and one to the fingerprint).
        members = {_dump(m): m for m in (_canon(v, (path, "-"), depth + 1) for v in value)}
        return [members[k] for k in sorted(members)]
    if isinstance(value, _dt.datetime):
        if value.tzinfo is not None and value.utcoffset() is not None:
            try:
                value = value.astimezone(_dt.UTC)
            except OverflowError:
                raise EncodeError(
                    "query holds a datetime out of range in UTC", path=_pointer(path)
                ) from None
        return _spelled(value.isoformat(), value, path)
    if isinstance(value, _dt.date):
        return _spelled(value.isoformat(), value, path)
    if isinstance(value, uuid.UUID):
        return _spelled(str(value), value, path)
    numpy = sys.modules.get("numpy")
    if numpy is not None and isinstance(value, numpy.generic):
        # NumPy scalars as the Python number they hold (float64 is a float already):
        # a query built from an array's values says what a list of them says.
        if isinstance(value, numpy.bool_):
            return bool(value)
        if isinstance(value, numpy.integer):
            return _canon(int(value), path, depth)
        if isinstance(value, numpy.floating):
            return _canon(float(value), path, depth)
    # A tool's arguments as the client sent them: an SDK builds models and dataclasses
    # from the JSON arguments, and what the client sent is what was asked.
    pydantic = sys.modules.get("pydantic")
    if pydantic is not None and isinstance(
        value, pydantic.BaseModel | pydantic.SecretStr | pydantic.SecretBytes
    ):
        try:
            sent = as_sent(value)
        except (ValueError, TypeError) as exc:  # a value pydantic has no JSON form for
            raise EncodeError(f"query model has no JSON form: {exc}", path=_pointer(path)) from exc
        return _canon(sent, path, depth)
    if dataclasses.is_dataclass(value) and not isinstance(value, type):
        # Field by field, as the walk goes: asdict() recurses without a depth limit and
        # deep-copies every other value (a lock cannot be copied).
        fields = {f.name: getattr(value, f.name) for f in dataclasses.fields(value)}
        return _canon_mapping(fields, path, depth)
    raise EncodeError(
        f"query value of type {type(value).__name__} has no JSON form", path=_pointer(path)
    )


def as_sent(value: Any, depth: int = 0) -> Any:
    """A value a server made from a client's JSON (a tool's argument), as near as that JSON
    tells, for a `Scope`: what the client sent is what was asked.

    pydantic's JSON of it is not that: it masks a secret (two secrets would be one
    query), leaves out a field declared ``exclude=True`` and lists a set in the order of
    the process's string hashes (a cursor refused after a restart). So this walks it, at
    any depth: a model's every field and its extra fields (a ``RootModel`` as its root),
    a dataclass's fields, a secret's own text, a set as a set (`Scope` sorts its
    members), any other value as its JSON (pydantic's ``to_jsonable_python``). Lists and
    mappings come back hashable, so a set of them stays a set. Needs pydantic imported.
    """
    if depth > MAX_QUERY_DEPTH:
        return value  # `Scope` refuses it, naming where, by its own depth rule
    reveal = getattr(value, "get_secret_value", None)
    if callable(reveal):
        return as_sent(reveal(), depth)
    if value is None or isinstance(value, str | int | float):
        return value
    deeper = depth + 1
    pydantic = sys.modules["pydantic"]
    if isinstance(value, pydantic.BaseModel):
        if isinstance(value, pydantic.RootModel):
            return as_sent(value.root, depth)
        # Under the name the client sends a field by: its alias, where it has one.
        fields = {
            field.alias if isinstance(field.alias, str) else name: getattr(value, name)
            for name, field in type(value).model_fields.items()
        }
        fields.update(value.model_extra or {})
        return _Frozen({k: as_sent(v, deeper) for k, v in fields.items()})
    if dataclasses.is_dataclass(value) and not isinstance(value, type):
        fields = {f.name: getattr(value, f.name) for f in dataclasses.fields(value)}
        return _Frozen({k: as_sent(v, deeper) for k, v in fields.items()})
    to_json = sys.modules["pydantic_core"].to_jsonable_python
    if isinstance(value, Mapping):
        return _Frozen({
            k if isinstance(k, str) else next(iter(to_json({k: None}))): as_sent(v, deeper)
            for k, v in value.items()
        })  # fmt: skip
    if isinstance(value, list | tuple):
        return tuple(as_sent(v, deeper) for v in value)
    if isinstance(value, Set):
        return frozenset(as_sent(v, deeper) for v in value)
    sent = to_json(value)
    # Its JSON: a list or an object is walked to be hashable (JSON all, so the walk ends).
    return sent if sent is None or isinstance(sent, str | int | float) else as_sent(sent, depth)


class _Frozen(Mapping[str, Any]):
    """A mapping that can be a set's member: a model or a dict inside a set argument."""

    __slots__ = ("_items",)

    def __init__(self, items: dict[str, Any]) -> None:
        self._items = items

    def __getitem__(self, key: str) -> Any:
        return self._items[key]

    def __iter__(self) -> Iterator[str]:
        return iter(self._items)

    def __len__(self) -> int:
        return len(self._items)

    def __hash__(self) -> int:
        return hash(frozenset(self._items.items()))


def _text(value: str, what: str, path: _Where) -> str:
    """*value*'s text as an exact ``str`` in NFC; `EncodeError` naming *path* if it holds
    a lone surrogate.

    The encoder writes a lone surrogate as U+FFFD and marks it; a fingerprint cannot:
    two queries that differ only there would become one query and share cursors.
    """
    # A subclass (a StrEnum member, a `class Key(str)`) as its text, read by str's own
    # method: normalize() gives NFC text back as the same object, and orjson refuses a
    # subclass as a key; its own encode, isascii, __eq__ or __hash__ may lie.
    value = str.__str__(value)
    if not value.isascii():
        try:
            value.encode("utf-8")
        except UnicodeEncodeError:
            raise EncodeError(f"query {what} holds a lone surrogate", path=_pointer(path)) from None
    return unicodedata.normalize("NFC", value)


def _spelled(text: object, value: object, path: _Where) -> str:
    """A date's or UUID's own spelling of itself, as text `_text` checked.

    Its own method, not its base type's: a subclass may spell more than the base holds
    (pandas' Timestamp its nanoseconds), and two values it tells apart must stay two
    queries. So what it gives is checked: not a str, or a str subclass or lone surrogate
    that orjson would refuse, named where it is.
    """
    if not isinstance(text, str):
        raise EncodeError(
            f"query value of type {type(value).__name__} spells itself as"
            f" {type(text).__name__}, not str",
            path=_pointer(path),
        )
    return _text(text, "value", path)


def _canon_decimal(value: decimal.Decimal, path: _Where) -> object:
    if not value.is_finite():
        raise EncodeError("query holds a non-finite number", path=_pointer(path))
    if value == value.to_integral_value():
        if not _INT_MIN <= value <= _INT_MAX:
            # As an int is refused: as a float, 2**64 and 2**64 + 1 were one query. Checked
            # before the int is made: Decimal("1E+100000000") would take 41 MB.
            raise EncodeError("query holds an integer beyond 64 bits", path=_pointer(path))
        # Decimal's own __int__, checked again as an int: a subclass's could give any number
        return _canon(decimal.Decimal.__int__(value), path, 0)
    # compared at float precision, so Decimal("0.1") spells 0.1; one a float cannot hold
    # (1E-400 became 0, as -1E-400 did) is refused
    as_float = decimal.Decimal.__float__(value)
    if as_float == 0 or math.isinf(as_float):
        raise EncodeError("query holds a Decimal beyond the float range", path=_pointer(path))
    return _canon(as_float, path, 0)


def _canon_mapping(value: Mapping[Any, Any], path: _Where, depth: int) -> dict[str, object]:
    if depth >= MAX_QUERY_DEPTH:  # an empty one too: it is a level of its own
        raise _too_deep(path)
    out: dict[str, object] = {}
    for given, item in value.items():
        if not isinstance(given, str):
            raise EncodeError(
                f"query key of type {type(given).__name__} is not a string", path=_pointer(path)
            )
        key = str.__str__(given)  # its text, in the path too (a subclass's replace may lie)
        nkey = _text(key, "key", path)
        if nkey in out:
            raise EncodeError(
                "two query keys are one key after NFC normalization", path=_pointer(path)
            )
        out[nkey] = _canon(item, (path, key), depth + 1)
    return out


def _canon_top(value: Mapping[Any, Any]) -> dict[str, object]:
    """The query (or its defaults) in canonical form; reading it raising is an
    `EncodeError` at the root, as it is for a value inside it."""
    try:
        return _canon_mapping(value, None, 0)
    except MemoryError:
        raise  # the interpreter's, not the query's (see `_canon`)
    except Exception as exc:
        if reports_itself(exc):
            raise
        # the caller's mapping raised: chained, with where it was
        raise _raised(value, None, exc) from exc


def _dump(value: object) -> bytes:
    # No try: `_canon` builds only what orjson writes (see there), so an orjson error
    # here is a bug in `_canon`, not a query to refuse; it raises as orjson's own
    # JSONEncodeError (a TypeError) rather than as an EncodeError with no path.
    return orjson.dumps(value, option=orjson.OPT_SORT_KEYS)


def canonical_query(
    query: Mapping[str, Any] | None,
    *,
    defaults: Mapping[str, Any] | None = None,
    page_size_keys: Collection[str] = DEFAULT_PAGE_SIZE_KEYS,
) -> bytes:
    """The canonical JSON bytes of *query* that its fingerprint is taken over.

    Top-level keys in *page_size_keys* are dropped, and so are top-level keys whose value
    is ``None`` or equals the value in *defaults* (an explicit default is no default).
    """
    if query is None:
        query = {}
    if not isinstance(query, Mapping):
        raise TypeError(f"query must be a mapping, not {type(query).__name__}")
    if defaults is not None and not isinstance(defaults, Mapping):
        raise TypeError(f"defaults must be a mapping, not {type(defaults).__name__}")
    if isinstance(page_size_keys, str):
        raise TypeError("page_size_keys must be a collection of strings, not a string")
    skip = (
        DEFAULT_PAGE_SIZE_KEYS  # exact ASCII str already: not made again per query
        if page_size_keys is DEFAULT_PAGE_SIZE_KEYS
        else frozenset(_page_size_key(k) for k in page_size_keys)
    )
    canon = _canon_top(query)
    canon_defaults = _canon_top(defaults) if defaults else {}
    kept = {
        key: value
        for key, value in canon.items()
        if key not in skip
        and value is not None
        and not _same(canon_defaults.get(key, _ABSENT), value)
    }
    return _dump(kept)


def _page_size_key(key: object) -> str:
    if not isinstance(key, str):
        raise TypeError(f"page_size_keys must hold strings, not {type(key).__name__}")
    # compared with keys as `_text` makes them: exact str in NFC
    return unicodedata.normalize("NFC", str.__str__(key))


def _same(default: object, value: object) -> bool:
    return default is not _ABSENT and _dump(default) == _dump(value)


def _hex(tag: bytes, data: bytes) -> str:
    return hashlib.sha256(tag + data).hexdigest()


class Scope:
    """Who asks (*principal*) and what they asked (*query*); immutable.

    Two scopes are equal when their fingerprints are. The principal is never shown in
    ``repr`` and never stored: stores keep only the fingerprints.
    """

    __slots__ = (
        "_query",
        "fingerprint",
        "principal",
        "principal_fingerprint",
        "query_fingerprint",
    )

    principal: str
    fingerprint: str
    principal_fingerprint: str
    query_fingerprint: str
    _query: Mapping[str, Any]

    def __init__(
        self,
        principal: str,
        query: Mapping[str, Any] | None = None,
        *,
        defaults: Mapping[str, Any] | None = None,
        page_size_keys: Collection[str] = DEFAULT_PAGE_SIZE_KEYS,
    ) -> None:
        if not isinstance(principal, str):
            raise TypeError(f"principal must be a str, not {type(principal).__name__}")
        # its text, read by str's own method: a subclass's encode may lie (two principals
        # one fingerprint), and the scope keeps the plain text it was fingerprinted by
        principal = str.__str__(principal)
        if not principal:
            raise LimitError("principal", principal, "must be a non-empty string")
        canon = canonical_query(query, defaults=defaults, page_size_keys=page_size_keys)
        pfp = _hex(_PRINCIPAL_TAG, principal.encode("utf-8", "surrogatepass"))
        qfp = _hex(_QUERY_TAG, canon)
        set_ = object.__setattr__
        set_(self, "principal", principal)
        set_(self, "_query", MappingProxyType(dict(query or {})))
        set_(self, "principal_fingerprint", pfp)
        set_(self, "query_fingerprint", qfp)
        set_(self, "fingerprint", _hex(_SCOPE_TAG, f"{pfp}:{qfp}".encode()))

    @property
    def query(self) -> Mapping[str, Any]:
        """A read-only view of the query as given (not canonicalized)."""
        return self._query

    def __setattr__(self, name: str, value: object) -> None:
        raise AttributeError(f"Scope is immutable; cannot set {name}")

    def __delattr__(self, name: str) -> None:
        raise AttributeError(f"Scope is immutable; cannot delete {name}")

    def __eq__(self, other: object) -> bool:
        if not isinstance(other, Scope):
            return NotImplemented
        return hmac.compare_digest(self.fingerprint, other.fingerprint)

    def __hash__(self) -> int:
        return hash(self.fingerprint)

    def __repr__(self) -> str:
        return f"Scope(principal=<redacted>, fingerprint={self.fingerprint[:16]!r}…)"

    def __reduce__(self) -> tuple[Any, tuple[Any, ...]]:
        # Copied and pickled as made: its fingerprints (from options a copy cannot ask
        # again, such as ``defaults``) travel with it, not recomputed from the query.
        return (_restored, (self.principal, dict(self._query), self.query_fingerprint))


def _restored(principal: str, query: dict[str, Any], query_fingerprint: str) -> Scope:
    """A `Scope` as `Scope.__reduce__` gave it."""
    scope = Scope.__new__(Scope)
    pfp = _hex(_PRINCIPAL_TAG, principal.encode("utf-8", "surrogatepass"))
    set_ = object.__setattr__
    set_(scope, "principal", principal)
    set_(scope, "_query", MappingProxyType(query))
    set_(scope, "principal_fingerprint", pfp)
    set_(scope, "query_fingerprint", query_fingerprint)
    set_(scope, "fingerprint", _hex(_SCOPE_TAG, f"{pfp}:{query_fingerprint}".encode()))
    return scope

"""A lower bound of the encoded size of a clean value, and orjson's bytes when it fits.

Guarantee 5 forbids encoding an input whole to learn that it is too big, and orjson has
no bounded mode, so the encoder proves a lower bound of the size before each orjson
call. The compiled walk in ``_speedups.c`` does that in a few nanoseconds a value; where
it was not built, `py_bound` and `py_bound_items` give the same numbers in Python.

``bound(obj, cap, depth, max_depth, max_items, max_keys, max_field, scalars)`` returns -1
when the value is not *clean* (it needs markers or cuts: NaN or an infinity, a non-str
key, a container at ``max_depth``, a list over ``max_items``, a dict over ``max_keys``, an
aware datetime or time whose tzinfo is not the built-in `datetime.timezone`, a string
that passes ``max_field`` or holds a lone surrogate, a cycle, a type other than the
exact JSON ones, one of the types in *scalars* exactly (orjson writes a subclass
otherwise), or, when *scalars* is given, a dataclass instance orjson writes from its
``__dict__`` (no Enum, which orjson writes by its value), read by a lookup that runs no
Python code (`plain_dict`), with no empty member name), else
a lower bound of ``len(orjson.dumps(obj))``. The walk stops once the bound passes *cap*,
so it costs at most the budget.

Given a list as *spine*, a walk that stops at the cap appends ``(container, depth, bound)`` for
each container it was inside, deepest first; each bound is a lower bound of that
container's own size, so a renderer that splits the value learns without another walk
that each is too big for any smaller room (it would otherwise re-walk the same prefix
once a level).

``clean_dumps(obj, cap, depth, caps, spine=None, compact=False)`` is the encoder's fast
path: orjson's bytes when the value is clean and they fit, else `TOO_BIG` or `UNCLEAN`.
``compact(data)`` copies short bytes out of orjson's oversized buffer.
``paused_dumps(obj)`` is ``orjson.dumps(obj)`` with the garbage collector paused, as the
compiled functions call orjson: orjson allocates objects the collector tracks (asking a
built-in timezone for ``dst``), and a collection then runs finalizers and gc callbacks,
Python code that could change a container orjson is writing through pointers it does
not hold (the walk lets nothing else run there). It is Python, with no compiled twin.
``clean_result(obj, cap, caps, types, make, kind)`` is a guard's pass-through in one
call: ``make(data, kind, len(data), None)`` when ``type(obj)`` is in *types* and
`clean_dumps` gives bytes, else None.
``front(fallback, caps, min_bytes, max_bytes, finish, finish_args=(), known=None)``
wraps a one-call verb: a call with the value and ``max_bytes`` alone is answered in C
when the value is clean and fits (``finish(bytes, *finish_args)``), or handed with the
walk's outcome to ``known(obj, max_bytes, outcome)`` (not walked or encoded again);
every other call goes to *fallback*. ``bound_native(obj, cap, depth, caps,
natives)`` bounds a value holding pydantic models and msgspec Structs (the classes in
*natives*). All are compiled, with Python twins: the twin of `front` is *fallback*
itself, and that of `bound_native` knows no class, so the caller's Python walk decides.

``join_reports(trs, base, into, make)`` joins the renderer's relative reports into
``make(pointer, kind, omitted, unit)`` appended to *into*; its twin is the same loop in
Python.

``fill(obj, budget, caps, count, least)`` is the renderer's balanced cut of a clean value
in C (``_fill.c``): ``(bytes, relative reports)``, the reports packed (a sequence of the
renderer's ``(pointer, kind, omitted, unit)`` tuples, made one at a time when read, that
``join_reports`` reads without them), False when not even a marker fits, or
None where the renderer must do it; *least* is a lower bound of the value's size that a
walk already found (0 when none ran), so a value known too big is not measured again.
It has no twin: where it was not built, `fill` is None and the renderer does every cut.
"""

from __future__ import annotations

import datetime as _dt
import enum
import gc
import math
import uuid
from collections.abc import Callable, Sequence
from typing import Any, NamedTuple, TypeAlias, TypeVar

import orjson

__all__ = [
    "BOUNDED_SCALARS",
    "COMPACT_BELOW",
    "TOO_BIG",
    "UNCLEAN",
    "Caps",
    "bound",
    "bound_items",
    "bound_native",
    "class_attr",
    "clean_dumps",
    "clean_result",
    "compact",
    "fill",
    "front",
    "hashes_as_type",
    "join_reports",
    "paused_dumps",
    "plain_dict",
    "py_bound",
    "py_bound_items",
    "py_bound_native",
    "py_clean_dumps",
    "py_clean_result",
    "py_compact",
    "py_front",
    "py_join_reports",
]

#: Types orjson writes in a bounded form, at least 10 bytes long.
BOUNDED_SCALARS = (_dt.datetime, _dt.date, _dt.time, uuid.UUID)

#: orjson output shorter than this is copied out of its buffer, which keeps 4 KiB.
COMPACT_BELOW = 8192

#: `clean_dumps` outcomes besides bytes.
TOO_BIG = 1  # a lower bound of the encoding already exceeds the cap
UNCLEAN = 2  # the value needs markers or cuts: only the renderer knows its size

_isfinite = math.isfinite


# The tzinfo fields themselves, past any property a subclass defines over them.
_DATETIME_TZ = _dt.datetime.tzinfo.__get__
_TIME_TZ = _dt.time.tzinfo.__get__


def py_bound(  # noqa: PLR0917 - the compiled function's signature
    obj: Any,
    cap: int,
    depth: int,
    max_depth: int,
    max_items: int,
    max_keys: int,
    max_field: int,
    scalars: tuple[type, ...] | None,
    spine: list[tuple[Any, int, int]] | None = None,
) -> int:
    """`bound` in Python: the same walk and the same numbers as the compiled one."""
    # ancestors[d] is the container being walked at depth d; those above *depth* belong
    # to the caller, which checked them already.
    caps = _Caps(max_depth, max_items, max_keys, max_field, scalars, [], [None])
    # The compiled walk runs no Python code: no collection runs a finalizer or a gc
    # callback that changes a container mid-walk (a dict's would raise). So the
    # collector waits here too, and both give the same numbers.
    collecting = gc.isenabled()
    gc.disable()
    try:
        n = _walk(obj, cap, depth, caps, [-1] * depth)
    except RuntimeError:
        # The compiled walk uses no Python stack; this one, called by a caller already
        # deep in it, may run out (RecursionError). And it runs between bytecodes, where
        # another thread may change a dict it iterates ("changed size during
        # iteration"), which the compiled walk, holding the GIL throughout, never sees.
        # Unclean sends the value to the renderer, which reads a snapshot of it, or says
        # it cannot with an EncodeError that names the path.
        return -1
    finally:
        if collecting:
            gc.enable()
    if spine is not None and n > cap:
        spine.extend(caps.spine)
    return n


def py_bound_items(  # noqa: PLR0917 - the compiled function's signature
    items: list[Any] | tuple[Any, ...],
    cap: int,
    depth: int,
    max_depth: int,
    max_items: int,
    max_keys: int,
    max_field: int,
    scalars: tuple[type, ...] | None,
) -> int:
    """`bound` of the items, each at *depth*, joined by commas, without brackets."""
    caps = _Caps(max_depth, max_items, max_keys, max_field, scalars, [], [None])
    collecting = gc.isenabled()
    gc.disable()  # as in `py_bound`
    try:
        return _items(items, cap, depth, caps, [-1] * depth)
    except RuntimeError:
        return -1  # as in `py_bound`: the renderer decides
    finally:
        if collecting:
            gc.enable()


class _Caps(NamedTuple):
    max_depth: int
    max_items: int
    max_keys: int
    max_field: int
    scalars: tuple[type, ...] | None
    #: (container, depth, bound) for each container a walk stopped in, deepest first: what the
    #: compiled walk hands out as its *spine*.
    spine: list[tuple[Any, int, int]]
    #: The last dataclass found one orjson writes from its plain ``__dict__``.
    dataclass: list[type | None]


def _walk(obj: Any, cap: int, depth: int, caps: _Caps, ancestors: list[int]) -> int:
    t = type(obj)
    if t is str:
        n = len(obj)
        # A character encodes to at most 6 bytes (\u0000): under a field cap a string
        # that fits even then is clean without measuring it. A longer one is measured
        # (at most max_field bytes of it): a cap set as a guard is mostly not reached,
        # and an unclean string would send the whole value to the renderer.
        if 6 * n + 2 <= caps.max_field:
            return n + 2
        return n + 2 if n + 2 <= caps.max_field and _field_fits(obj, caps.max_field) else -1
    if t is int or obj is None or t is bool:
        return 1
    if t is float:
        return 1 if _isfinite(obj) else -1  # orjson writes NaN as null: needs a marker
    if t is dict:
        return _members(obj, cap, depth, caps, ancestors, dataclass=False)
    if t is list or t is tuple:
        n = len(obj)
        if depth >= caps.max_depth or n > caps.max_items:
            return -1
        if n + 1 > cap:
            caps.spine.append((obj, depth, n + 1))
            return n + 1
        del ancestors[depth:]
        if id(obj) in ancestors:
            return -1
        ancestors.append(id(obj))
        size = _items(obj, cap - 2, depth + 1, caps, ancestors)
        if size < 0:
            return size
        if size + 2 > cap:
            caps.spine.append((obj, depth, size + 2))
        return size + 2
    # By type, as the compiled walk does: isinstance() may consult a __class__ property.
    # The exact type only, as orjson: it writes a @dataclass subclass as a dataclass
    # (through getattr, maybe Python code, with members never walked) and refuses any
    # other. `in` only where the class's metaclass is `type`, which compares by identity:
    # another's __eq__ would run.
    if caps.scalars is not None and type(t) is type and t in caps.scalars:
        # orjson asks an aware value's tzinfo for its offset: Python code mid-walk.
        tz = None
        if t is _dt.datetime:
            tz = _DATETIME_TZ(obj)
        elif t is _dt.time:
            tz = _TIME_TZ(obj)
        if tz is None:
            return 10
        # orjson drops the seconds of an offset (Paris's before 1911, +00:09:21, comes
        # out +00:09) with no mark: the renderer writes them.
        return 10 if type(tz) is _dt.timezone and _whole_minutes(tz) else -1
    if caps.scalars is not None and (
        t is caps.dataclass[0] or (_native_dataclass(t) and plain_dict(t))
    ):
        # Nothing here changes a class: its instances are not checked again.
        caps.dataclass[0] = t
        # plain_dict(t): this getattr runs no Python code and finds the instance's own
        # dict, the one the compiled walk reads.
        d = getattr(obj, "__dict__", None)
        size = _members(d, cap, depth, caps, ancestors, dataclass=True) if type(d) is dict else -1
        if size > cap:
            caps.spine.append((obj, depth, size))
        return size
    return -1


def _whole_minutes(tz: _dt.timezone) -> bool:
    """Whether the offset of built-in timezone *tz* is in whole minutes."""
    offset = tz.utcoffset(None)
    return offset.seconds % 60 == 0 and offset.microseconds == 0


def _field_fits(s: str, max_field: int) -> bool:
    """Whether orjson writes *s* (at most *max_field* characters) in *max_field* bytes."""
    try:
        return len(orjson.dumps(s)) <= max_field
    except orjson.JSONEncodeError:
        return False  # a lone surrogate: the renderer writes it with its marker


def _native_dataclass(t: type) -> bool:
    """Whether orjson writes instances of *t* from their ``__dict__``, and so do we.

    A class decorated itself (orjson looks in the type's own dict) without ``__slots__``
    (orjson then reads the fields one by one, running descriptors), and not a pydantic
    dataclass or an attrs class, which the renderer writes their own way. No Enum: 3.11
    lets @dataclass decorate one, and orjson's Enum branch, which comes first, writes
    ``member.value`` (Python code mid-write, and a value never walked); the renderer
    writes any Enum by its value. By the MRO, as the compiled ``PyType_IsSubtype``.
    """
    # Only a class whose namespaces hold str keys alone (the compiled walk's str_keyed):
    # a name looked up in one holding another key may run that key's __eq__.
    if not _str_keyed(t):
        return False
    own = _namespace(t)
    return (
        "__dataclass_fields__" in own
        and "__slots__" not in own
        and "__pydantic_fields__" not in own
        and _lookup(t, "__attrs_attrs__") is _MISSING
        and not any(c is enum.Enum for c in _mro(t))
    )


# A class's own namespace, MRO and layout base, read past any metaclass (whose
# __getattribute__ could answer anything): what the compiled walk reads in the type.
_namespace = type.__dict__["__dict__"].__get__
_mro = type.__dict__["__mro__"].__get__
_base = type.__dict__["__base__"].__get__
_flags = type.__dict__["__flags__"].__get__
_dictoffset = type.__dict__["__dictoffset__"].__get__
_HEAPTYPE = 1 << 9
_MISSING: Any = object()
_OBJECT_GETATTRIBUTE = object.__dict__["__getattribute__"]
_OBJECT_HASH = object.__dict__["__hash__"]
_OBJECT_EQ = object.__dict__["__eq__"]
#: The ``__dict__`` descriptor type() makes for a Python class, known by its doc (its
#: getter, which the compiled walk compares, is out of Python's reach).
_DEFAULT_DICT_DOC = _namespace(type("_Plain", (), {}))["__dict__"].__doc__
_GetSet = type(_namespace(type("_Plain", (), {}))["__dict__"])


def hashes_as_type(t: object) -> bool:
    """Whether class *t* hashes and compares as type does (the compiled walk's check of
    its metaclass's ``tp_hash`` and ``tp_richcompare``): a set or dict of classes can then
    be asked for it. A metaclass with ``__eq__`` and no ``__hash__`` makes its classes
    unhashable, and its own ``__hash__`` or ``__eq__`` may raise or run anything; no such
    class is in the encoder's tables. Reads the metaclass past its own metaclass."""
    m = type(t)
    return m is type or (
        _lookup(m, "__hash__") is _OBJECT_HASH and _lookup(m, "__eq__") is _OBJECT_EQ
    )


def class_attr(t: type, name: str) -> Any:
    """*name* as class *t* holds it (its own namespace or its MRO's), read past its
    metaclass, whose ``__getattribute__`` could run anything; AttributeError if none."""
    found = _lookup(t, name)
    if found is _MISSING:
        raise AttributeError(name)
    return found


def _str_keyed(t: type) -> bool:
    """Whether *t*'s own namespace and those of its MRO hold exact str keys only (so a
    name is looked up in them without running a key's ``__eq__``); reads, runs nothing."""
    return all(type(k) is str for c in (t, *_mro(t)) for k in _namespace(c))


def _lookup(t: type, name: str) -> Any:
    """_PyType_Lookup: *name* in the first class of *t*'s MRO that has it."""
    for c in _mro(t):
        ns = _namespace(c)
        if name in ns:
            return ns[name]
    return _MISSING


def plain_dict(t: type) -> bool:
    """Whether ``getattr(instance, "__dict__")`` on class *t* runs no Python code and
    gives the instance's own dict (the compiled walk's ``plain_dict``, read in Python).

    orjson reads a dataclass's members, and pydantic a model's, through that getattr in
    the middle of writing the containers around it: a Python ``__getattribute__`` or a
    ``__dict__`` property would run there (code that changes a container being written
    crashes the process), and a ``__dict__`` other than the walked one would be written
    unchecked. So: the ``__getattribute__`` found is object's own (a ``__getattr__`` is
    called only when that lookup fails, and the default ``__dict__`` does not fail), the
    ``__dict__`` descriptor is the one type() made for a Python class *t* derives from,
    and no built-in base keeps the dict in a way of its own. Reads the class only.
    """
    if _lookup(t, "__getattribute__") is not _OBJECT_GETATTRIBUTE:
        return False
    d = _lookup(t, "__dict__")
    if type(d) is not _GetSet or d.__doc__ != _DEFAULT_DICT_DOC:
        return False
    owner = d.__objclass__
    if not _flags(owner) & _HEAPTYPE or not any(c is owner for c in _mro(t)):
        return False
    b = t
    while (up := _base(b)) is not None:
        if _dictoffset(b) and not _flags(b) & _HEAPTYPE:
            return False
        b = up
    return True


def _members(
    obj: dict[Any, Any], cap: int, depth: int, caps: _Caps, ancestors: list[int], *, dataclass: bool
) -> int:
    """The members of *obj*; with *dataclass*, only those orjson writes for an instance."""
    n = len(obj)
    if dataclass:
        # orjson aborts the process on an empty name (it reads its first byte).
        if any(type(k) is not str or not k for k in obj):
            return -1
        n -= sum(1 for k in obj if k.startswith("_"))
    if depth >= caps.max_depth or n > caps.max_keys:
        return -1
    del ancestors[depth:]
    if id(obj) in ancestors:
        return -1
    ancestors.append(id(obj))
    size = 1 + 4 * n  # braces, quotes, colons and commas
    for k, v in obj.items():
        if type(k) is not str:
            return -1
        if dataclass and k.startswith("_"):
            continue
        sub = _walk(v, cap - size, depth + 1, caps, ancestors)
        if sub < 0:
            return sub
        size += len(k) + sub
        if size > cap:
            break
    if size > cap and not dataclass:
        caps.spine.append((obj, depth, size))
    return size


def _items(
    items: list[Any] | tuple[Any, ...], cap: int, depth: int, caps: _Caps, ancestors: list[int]
) -> int:
    size = len(items) - 1 if items else 0  # the commas
    for v in items:
        if size > cap:
            break
        sub = _walk(v, cap - size, depth, caps, ancestors)
        if sub < 0:
            return sub
        size += sub
    return size


_dumps = orjson.dumps
_JSONError = orjson.JSONEncodeError

#: (max_depth, max_items, max_keys, max_field_bytes, scalars), a huge number for no cap.
Caps: TypeAlias = tuple[int, int, int, int, tuple[type, ...] | None]


def py_clean_dumps(  # noqa: PLR0917 - the compiled function's signature
    obj: Any,
    cap: int,
    depth: int,
    caps: Caps,
    spine: list[tuple[Any, int, int]] | None = None,
    compact: bool = False,
) -> bytes | int:
    """orjson's bytes for *obj* if it is clean and fits *cap*, else `TOO_BIG`/`UNCLEAN`;
    with *compact*, a short result copied out of orjson's oversized buffer."""
    # The collector waits from the walk to orjson's write, as in the compiled function,
    # where nothing runs between them: a finalizer could otherwise change what was
    # measured clean (put a NaN in it, which orjson writes as null).
    collecting = gc.isenabled()
    gc.disable()
    try:
        n = bound(obj, cap, depth, *caps, spine)
        if n < 0:
            return UNCLEAN
        if n > cap:
            return TOO_BIG
        data = _dumps(obj)
    except _JSONError:  # ints beyond 64 bits, lone surrogates
        return UNCLEAN
    finally:
        if collecting:
            gc.enable()
    if len(data) > cap:
        return TOO_BIG
    return py_compact(data) if compact else data


def py_clean_result(  # noqa: PLR0917 - the compiled function's signature
    obj: Any,
    cap: int,
    caps: Caps,
    types: frozenset[type],
    make: Callable[[bytes, str, int, None, None], R],
    kind: str,
) -> R | None:
    """A guard's pass-through in one call: ``make(data, kind, len(data), None, None)`` where
    ``type(obj)`` is in *types* and ``clean_dumps(obj, cap, 0, caps, None, True)`` gives
    bytes *data*; else None."""
    # Only a class that hashes as type does (the compiled function's check): another
    # metaclass may make it unhashable or run code, and *types* holds no such class.
    if not hashes_as_type(type(obj)) or type(obj) not in types:
        return None
    data = clean_dumps(obj, cap, 0, caps, None, True)
    return make(data, kind, len(data), None, None) if type(data) is bytes else None


def paused_dumps(obj: Any) -> bytes:
    """``orjson.dumps(obj)`` with the garbage collector paused (see the module's doc)."""
    collecting = gc.isenabled()
    gc.disable()
    try:
        return _dumps(obj)
    finally:
        if collecting:
            gc.enable()


def py_compact(data: bytes) -> bytes:
    """A copy of *data* that holds its length and no more (orjson's keep 4 KiB), if it is
    shorter than `COMPACT_BELOW`; else *data* itself (a long one wastes little)."""
    return bytes(memoryview(data)) if len(data) < COMPACT_BELOW else data


F = TypeVar("F", bound=Callable[..., Any])
R = TypeVar("R")


def py_bound_native(
    obj: Any, cap: int, depth: int, caps: Caps, natives: dict[type, Any]
) -> tuple[int, type | None, type | None]:
    """`bound_native` in Python: never known, so the caller's own (Python) walk decides."""
    return -1, None, None


def py_front(  # noqa: PLR0917  # positional, as the compiled door it stands in for
    fallback: F,
    caps: Caps,
    min_bytes: int,
    max_bytes: int,
    finish: Callable[..., Any] | None,
    finish_args: tuple[Any, ...] = (),
    known: Callable[[Any, int, int], Any] | None = None,
) -> F:
    """`front` in Python: the verb's own function, whose first step is the same fast path
    (so *known*, which takes over from that step, is never needed)."""
    return fallback


def py_join_reports(trs: Any, base: str, into: list[Any], make: Callable[..., Any]) -> None:
    """`join_reports` in Python."""
    for entry in trs:
        if len(entry) == 2:  # noqa: PLR2004 - a (pointer, reports) branch; a report has 4
            py_join_reports(entry[1], base + entry[0], into, make)
        else:
            into.append(make(base + entry[0], entry[1], entry[2], entry[3]))


bound: Callable[..., int]
bound_items: Callable[..., int]
bound_native: Callable[[Any, int, int, Caps, dict[type, Any]], tuple[int, type | None, type | None]]
clean_dumps: Callable[..., bytes | int]
clean_result: Callable[..., Any]
compact: Callable[[bytes], bytes]
front: Callable[..., Any]
join_reports: Callable[[Any, str, list[Any], Callable[..., Any]], None]
Fill: TypeAlias = Callable[
    [Any, int, Caps, list[int] | None, int], tuple[bytes, Sequence[Any]] | bool | None
]
fill: Fill | None
try:
    from ._speedups import (
        bound,
        bound_items,
        bound_native,
        clean_dumps,
        clean_result,
        compact,
        fill,
        front,
        join_reports,
    )
except ImportError:  # pragma: no cover - built without a C compiler
    bound, bound_items, bound_native = py_bound, py_bound_items, py_bound_native
    clean_dumps, compact, front = py_clean_dumps, py_compact, py_front
    clean_result = py_clean_result
    join_reports = py_join_reports
    fill = None

"""Frozen values made fast: a constructor that skips ``__init__``, and a record base.

A frozen dataclass's ``__init__`` sets each field through ``object.__setattr__``, about
800 ns for three fields; the compiled `_fastnew.maker` stores them in their slots in a
tenth of that. Results and cursor states are made on every call, so the hot paths use
this; the objects are the same frozen values. Compiled, a value whose fields are all
atomic (str, bytes, int, None) is also kept out of the cycle collector, which cannot
find a cycle through it: a turn that keeps thousands of results no longer has each
collection walk them all.

`Record` is the base of the small immutable results that are not dataclasses (a guard's
results, `Encoded`): equality, hash and repr by the values of their named fields.
"""

from __future__ import annotations

import dataclasses
from collections.abc import Callable
from typing import Any, TypeVar

__all__ = ["Record", "fast_constructor"]

T = TypeVar("T")


class Record:
    """A small immutable result: fields in read-only slots, equality and repr by value.

    Made for every result a guard hands on, so it is built by a plain ``__init__`` (a
    frozen dataclass's ``__init__`` costs several times that), and on the fast paths
    without one (`fast_constructor`); the fields, named in ``_fields``, are read-only
    properties over the slots.
    """

    __slots__ = ()
    _fields: tuple[str, ...] = ()

    def _values(self) -> tuple[Any, ...]:
        return tuple(getattr(self, name) for name in self._fields)

    def __eq__(self, other: object) -> bool:
        if type(other) is not type(self):
            return NotImplemented
        return self._values() == other._values()

    def __hash__(self) -> int:
        return hash(self._values())

    def __repr__(self) -> str:
        shown = ", ".join(f"{n}={v!r}" for n, v in zip(self._fields, self._values(), strict=True))
        return f"{type(self).__name__}({shown})"


def fast_constructor(cls: type[T], slots: tuple[str, ...] | None = None) -> Callable[..., T]:
    """A positional constructor for *cls*: a frozen ``slots=True`` dataclass, in field order,
    or any class with ``__slots__``, filling the named *slots* in that order.

    It does no validation: the caller vouches for every value, as ``__init__`` would not.
    Compiled where `_fastnew` is built (it stores each value in its slot directly);
    otherwise the slot descriptors set them from Python.
    """
    names = slots or tuple(f.name for f in dataclasses.fields(cls))  # type: ignore[arg-type]
    descriptors = tuple(vars(cls)[name] for name in names)
    if _maker is not None:
        return _maker(cls, descriptors)  # type: ignore[no-any-return]
    return _py_constructor(cls, descriptors)


def _py_constructor(cls: type[T], slots: tuple[Any, ...]) -> Callable[..., T]:
    """`fast_constructor` in Python."""
    setters = tuple(slot.__set__ for slot in slots)
    new = object.__new__

    def make(*values: Any) -> T:
        obj: T = new(cls)
        for set_, value in zip(setters, values, strict=True):
            set_(obj, value)
        return obj

    make.__doc__ = f"``{cls.__name__}(...)`` without its ``__init__``: see `fast_constructor`."
    return make


_maker: Callable[..., Any] | None
try:
    from ._fastnew import maker as _maker
except ImportError:  # pragma: no cover - built without a C compiler
    _maker = None

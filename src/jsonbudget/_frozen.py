"""One shared speed trick: building frozen, slotted dataclasses without their ``__init__``.

A frozen dataclass's ``__init__`` sets each field through ``object.__setattr__``, about
800 ns for three fields; the compiled `_fastnew.maker` stores them in their slots in a
tenth of that. Results and cursor states are made on every call, so the hot paths use
this; the objects are the same frozen values. Compiled, a value whose fields are all
atomic (str, bytes, int, None) is also kept out of the cycle collector, which cannot
find a cycle through it: a turn that keeps thousands of results no longer has each
collection walk them all.
"""

from __future__ import annotations

import dataclasses
from collections.abc import Callable
from typing import Any, TypeVar

__all__ = ["fast_constructor"]

T = TypeVar("T")


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

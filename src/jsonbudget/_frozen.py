"""One shared speed trick: building frozen, slotted dataclasses without their ``__init__``.

A frozen dataclass's ``__init__`` sets each field through ``object.__setattr__``; the
slot descriptors set them directly, in about half the time. Results and cursor states are
made on every call, so the hot paths use this; the objects are the same frozen values.
"""

from __future__ import annotations

import dataclasses
from collections.abc import Callable
from typing import Any, TypeVar

__all__ = ["fast_constructor"]

T = TypeVar("T")


def fast_constructor(cls: type[T]) -> Callable[..., T]:
    """A positional constructor for *cls* (a frozen ``slots=True`` dataclass), in field order.

    It does no validation: the caller vouches for every value, as ``__init__`` would not.
    """
    setters = tuple(
        vars(cls)[f.name].__set__
        for f in dataclasses.fields(cls)  # type: ignore[arg-type]
    )
    new = object.__new__

    def make(*values: Any) -> T:
        obj: T = new(cls)
        for set_, value in zip(setters, values, strict=True):
            set_(obj, value)
        return obj

    make.__doc__ = f"``{cls.__name__}(...)`` without its ``__init__``: see `fast_constructor`."
    return make

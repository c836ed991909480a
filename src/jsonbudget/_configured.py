"""One shared cache: what the one-call verbs configure, kept by their options.

`bounded_dumps`, `encode` and `paginate` take their options on every call; validating
them and building an `Encoder` or a `Paginator` each time cost more than a small
result's encoding. Each verb keeps what it built in a `Configured`, keyed by its options
(objects such as stores and hooks by identity). The cache holds at most 64 entries and
is cleared whole when full: a program uses a few option sets, and a clear is one atomic
step, so threads may share it. What it holds is configuration only.
"""

from __future__ import annotations

import types
from collections.abc import Callable, Hashable
from typing import Any, Generic, TypeVar

__all__ = ["Configured", "hook_key"]

T = TypeVar("T")

#: Entries a `Configured` holds before it is cleared.
CACHE_SIZE = 64


class Configured(Generic[T]):
    """Objects built from options, made once per distinct options (a bounded dict)."""

    __slots__ = ("by_options",)

    def __init__(self) -> None:
        self.by_options: dict[Hashable, T] = {}

    def get(self, key: Hashable, make: Callable[[], T]) -> T:
        """The object for *key*, made by *make* the first time; never cached if unhashable."""
        try:
            found = self.by_options.get(key)
        except TypeError:  # an unhashable option (a default hook): made every time
            return make()
        if found is None:
            found = make()
            cache = self.by_options
            if len(cache) >= CACHE_SIZE:
                cache.clear()
            cache[key] = found
        return found


def hook_key(hook: Any) -> Hashable:
    """*hook* (a ``default``, a ``spill_ref``) as a cache key: by identity, since two
    hooks that compare equal may still act apart (a frozen dataclass with a
    ``compare=False`` field ran in place of another). A bound method, made anew at each
    attribute access, by its object and function, as its own ``==`` compares them. The
    cached object holds the hook, so no id in a live entry is reused."""
    if hook is None:
        return None
    if type(hook) is types.MethodType:
        return (id(hook.__self__), id(hook.__func__))
    return id(hook)

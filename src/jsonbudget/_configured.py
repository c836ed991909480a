"""One shared cache: what the one-call verbs configure, kept by their options.

`bounded_dumps`, `encode` and `paginate` take their options on every call; validating
them and building an `Encoder` or a `Paginator` each time cost more than a small
result's encoding. Each verb keeps what it built in a `Configured`, keyed by its options.
The cache holds at most 64 entries and is cleared whole when full: a program uses a few
option sets. Threads share it: a read is one dict lookup, and writes take its lock.

What it holds is configuration only: it never keeps a caller's object alive. A server
that makes a store (or a hook) per request and drops it would otherwise keep up to 64 of
them, with their connections and files, out of its reach. An object in a key (a store,
a spill store, a hook) is there by identity and held weakly (`get_held`): the entry goes
when the object does. One that cannot be weakly referenced is not cached, nor is an
encoder's ``default`` hook other than one its module holds anyway (`hook_key`): the
`Encoder` holds it.
"""

from __future__ import annotations

import functools
import sys
import threading
import types
import weakref
from collections.abc import Callable, Hashable
from typing import Any, Generic, TypeVar

__all__ = ["Configured", "held_key", "hook_key"]

T = TypeVar("T")

#: Entries a `Configured` holds before it is cleared.
CACHE_SIZE = 64


class Configured(Generic[T]):
    """Objects built from options, made once per distinct options (a bounded dict)."""

    __slots__ = ("by_options", "lock", "watches")

    def __init__(self) -> None:
        self.by_options: dict[Hashable, T] = {}
        # Writes take it: an entry and its watches change together. A clear between
        # another thread's entry and its watches lost the watches, and the entry then
        # outlived its store, served to a new store given the dead one's id. Reentrant:
        # a weak reference may call back in the thread that holds it.
        self.lock = threading.RLock()
        # The weak references that drop an entry of `get_held` when an object of its key
        # goes (a weak reference freed first never calls back): cleared with the entries.
        self.watches: dict[Hashable, tuple[weakref.ref[Any], ...]] = {}

    def get(self, key: Hashable, make: Callable[[], T]) -> T:
        """The object for *key*, made by *make* the first time; never cached if unhashable."""
        try:
            found = self.by_options.get(key)
        except TypeError:  # an unhashable option (a hook, by `hook_key`): made every time
            return make()
        if found is None:
            found = make()
            self._put(key, found, ())
        return found

    def get_held(self, key: Hashable, make: Callable[[], T], held: tuple[Any, ...]) -> T | None:
        """The object for *key*, whose *held* objects (None for none) are in it by
        `held_key`; *make* builds one that holds them weakly. None, and nothing cached,
        if one of them cannot be weakly referenced (the caller builds its own)."""
        found = self.by_options.get(key)
        if found is not None:
            return found  # its objects' ids are theirs: an entry goes before its id is free
        drop = functools.partial(self._drop, key)
        try:
            watches = tuple(_watch(obj, drop) for obj in held if obj is not None)
        except TypeError:  # no weak reference to it: only a strong one could keep it
            return None
        found = make()
        self._put(key, found, watches)
        return found

    def _put(self, key: Hashable, found: T, watches: tuple[weakref.ref[Any], ...]) -> None:
        with self.lock:
            cache = self.by_options
            if len(cache) >= CACHE_SIZE:
                cache.clear()  # before the watches: no entry is ever left without its own
                self.watches.clear()
            # The watches first, the entry last: an interrupt in between (hashing the key
            # again runs `Limits.__hash__`) left an entry no watch removed, which outlived
            # its store and was served to a new store given the dead one's id. Watches
            # without an entry remove nothing that is there.
            if watches:
                self.watches[key] = watches
            cache[key] = found

    def _drop(self, key: Hashable, _gone: object) -> None:
        """An object of *key* went: its entry goes (called back, in any thread)."""
        with self.lock:
            self.by_options.pop(key, None)
            self.watches.pop(key, None)


def _watch(obj: Any, drop: Callable[[Any], None]) -> weakref.ref[Any]:
    """A weak reference to *obj* that calls *drop* when it goes: a bound method (made
    anew at each attribute access) when its object or its function does."""
    if type(obj) is types.MethodType:
        return weakref.WeakMethod(obj, drop)
    return weakref.ref(obj, drop)


def held_key(obj: Any) -> Hashable:
    """*obj* (a store, a hook) as a key of `Configured.get_held`: by identity, since two
    that compare equal may still act apart (a frozen dataclass with a ``compare=False``
    field ran in place of another). A bound method, made anew at each attribute access,
    by its object and function, as its own ``==`` compares them."""
    if obj is None:
        return None
    if type(obj) is types.MethodType:
        return (id(obj.__self__), id(obj.__func__))
    return id(obj)


class _NeverFound:
    """A key part no lookup finds: unhashable, so `Configured.get` makes anew."""

    __slots__ = ()
    __hash__ = None  # type: ignore[assignment]


_NEVER_FOUND = _NeverFound()


def hook_key(hook: Any) -> object:
    """*hook* (an encoder's ``default``) as a cache key. The `Encoder` calls the hook, so
    it holds it: a cached one would keep a per-request hook (and what it closes over)
    alive. So only a hook its module holds anyway (a function or class defined at module
    level, a builtin) is a key, by identity (the entry holds it, so its id is not
    reused); any other (a closure, a bound method) is a part no lookup finds."""
    if hook is None:
        return None
    return id(hook) if _module_holds(hook) else _NEVER_FOUND


def _module_holds(obj: Any) -> bool:
    """Whether *obj* is what its module's attribute of its qualified name holds."""
    module = getattr(obj, "__module__", None)
    name = getattr(obj, "__qualname__", None)
    if type(module) is not str or type(name) is not str or "<" in name:
        return False  # a local function or a lambda: one per call that made it
    found: Any = sys.modules.get(module)
    for part in name.split("."):
        found = getattr(found, part, None)
    return found is obj

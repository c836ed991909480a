"""The whole JSON encoding of a value, streamed as it is made: what a spill file holds.

`JsonWriter` is shared by the page builder (an oversized item spilled) and the guards (a
result spilled): both write the value uncut, with the values their size check already
pulled from iterators replayed first, and stop at the store's size limit as the bytes
are made, never after encoding everything.
"""

from __future__ import annotations

import itertools
from collections.abc import Callable, Iterator
from typing import Any, NoReturn

import orjson

from ..errors import EncodeError, SpillError
from .encoder import BinaryMode, MarkerStyle, dumps_whole
from .render import Stream, pointer
from .strings import SURROGATE

__all__ = ["JsonWriter"]

_FLUSH_BYTES = 1024 * 1024
_BATCH = 512
# Containers nested deeper than this inside a spilled value are encoded whole, not
# streamed member by member (the encoder's own depth limit still applies to them).
_STREAM_DEPTH = 32


def _next_run(size: int, produced: int) -> int:
    # Aim for runs of about 64 KiB: few orjson calls, little held at once.
    if produced > 256 * 1024:
        return max(1, size // 2)
    if produced < 64 * 1024:
        return min(_BATCH, size * 2)
    return size


class JsonWriter:
    """The whole JSON encoding of a Python value, in chunks of about 1 MiB, as it is made.

    Lists, tuples, dicts and iterators are written member by member (runs of small
    members one `dumps_whole` each, as orjson joins them), so an endless generator or a
    10-million-row list never sits in memory whole, and the file's size limit is checked
    as the bytes are made, not after. Items the size check already pulled from an
    iterator (the encoder call's ``streams``) are replayed first.

    With *keep*, every iterator is read through its `Stream` in *streams* (one is made
    for an iterator the size check did not reach), each value kept there as it is
    pulled, under the stream's lock: for streams that outlive the write (a page's, which
    a retried page, an MCP refit or another thread's page reads again), which would
    otherwise find the iterator drained and render the item short. Without it, the rest
    of an iterator is written as it is read and not held (an endless generator stays
    flat in memory), for streams nothing reads after the write.
    """

    __slots__ = (
        "binary",
        "buf",
        "default",
        "descend",
        "keep",
        "left",
        "limit",
        "markers",
        "streams",
    )

    def __init__(
        self,
        default: Callable[[Any], Any] | None,
        streams: dict[int, Stream],
        max_bytes: int,
        *,
        markers: MarkerStyle = "text",
        binary: BinaryMode = "marker",
        keep: bool = False,
    ) -> None:
        self.default = default
        self.markers: MarkerStyle = markers
        self.binary: BinaryMode = binary
        self.streams = streams
        self.keep = keep
        # When the size check pulled from a nested iterator, that iterator may sit in any
        # small container: walk every container, so each one is replayed, not re-read.
        self.descend = bool(streams)
        self.limit = self.left = max_bytes
        self.buf = bytearray()

    @property
    def written(self) -> int:
        """The bytes made so far."""
        return self.limit - self.left

    def chunks(self, obj: Any, path: str = "") -> Iterator[bytes]:
        """*obj*'s JSON, in chunks; an error names its place under *path* (a page's
        item, ``/items/3``)."""
        yield from self._value(obj, 0, path)
        if self.buf:
            yield bytes(self.buf)
            self.buf.clear()

    def _put(self, data: bytes | bytearray) -> None:
        self.left -= len(data)
        if self.left < 0:
            self._refuse()
        self.buf += data

    def _refuse(self) -> NoReturn:
        raise SpillError(
            f"the result is larger than the store's max_file_bytes ({self.limit}); nothing was kept"
        )

    def _flush(self) -> Iterator[bytes]:
        if len(self.buf) >= _FLUSH_BYTES:
            yield bytes(self.buf)
            self.buf.clear()

    def _streamed(self, value: Any, depth: int) -> bool:
        """Whether *value* is written member by member rather than in one call."""
        if depth >= _STREAM_DEPTH:
            return False
        kind = type(value)
        if kind is list or kind is tuple or kind is dict:
            if len(value) > _BATCH:
                return True
            # A flat container holds no iterator: it joins a run even when descending.
            return self.descend and any(map(_nests, value.values() if kind is dict else value))
        return isinstance(value, Iterator) and not isinstance(value, str | bytes)

    def _value(self, obj: Any, depth: int, path: str) -> Iterator[bytes]:
        if type(obj) is dict:
            yield from self._object(obj, depth, path)
        elif self._streamed(obj, depth):
            yield from self._array(obj, depth, path)
        else:
            self._leaf(obj, path)
            yield from self._flush()

    def _leaf(self, obj: Any, path: str) -> None:
        if type(obj) is str and len(obj) > self.left:
            self._refuse()  # at least one byte a char: refused before it is encoded
        self._put(self._dumps(obj, self.left, path, None))

    def _dumps(self, obj: Any, most: int, path: str, first: int | None) -> bytes:
        """*obj* whole, refused once it passes *most* bytes: never made whole first (a
        value of shared subtrees may encode to terabytes). *obj* stands at *path*, or is
        a run of the members there, its first item at index *first* of the list (None:
        of the object)."""
        try:
            data = dumps_whole(
                obj,
                default=self.default,
                markers=self.markers,
                binary=self.binary,
                max_bytes=most,
                streams=self.streams,  # an iterator inside a dataclass or a model, replayed
            )
        except EncodeError as exc:
            raise _rebased(exc, path, first) from exc.__cause__
        if data is None:
            self._refuse()
        return data

    def _replay(self, it: Iterator[Any], path: str) -> Iterator[Any]:
        streams = self.streams
        stream = streams.get(id(it))
        if self.keep:
            if stream is None or stream.source is not it:
                streams[id(it)] = Stream(it)
                # Read back: a page's streams keep the one another page made first.
                stream = streams[id(it)]
            return stream.replay(path)
        if stream is None:
            return it
        if stream.failed is not None:
            return stream.replay(path)  # raises where the iterator raised before
        return iter(stream.items) if stream.done else itertools.chain(stream.items, stream.it)

    def _array(self, obj: Any, depth: int, path: str) -> Iterator[bytes]:
        # A list is read once into a snapshot, as the encoder reads one: a `default` hook
        # (or another thread) that empties it or adds to it mid-spill changes nothing here.
        kind = type(obj)
        source = obj if kind is tuple else list(obj) if kind is list else self._replay(obj, path)
        self._put(b"[")
        first = True
        run: list[Any] = []
        at = 0  # the index of the run's first item
        size = 1  # members per run: grows while runs are small, shrinks when large
        for index, member in enumerate(source):
            if self._streamed(member, depth + 1):
                first = self._run(run, first, path, at)
                if not first:
                    self._put(b",")
                first = False
                yield from self._value(member, depth + 1, pointer(path, index))
                at = index + 1
                continue
            run.append(member)
            if len(run) >= size:
                before = len(self.buf)
                first = self._run(run, first, path, at)
                at = index + 1
                size = _next_run(size, len(self.buf) - before)
                yield from self._flush()
        first = self._run(run, first, path, at)
        self._put(b"]")
        yield from self._flush()

    def _object(self, obj: dict[Any, Any], depth: int, path: str) -> Iterator[bytes]:
        # Read once into a snapshot (see _array): iterating the dict itself, a hook that
        # adds or pops a member raised a bare RuntimeError mid-spill.
        keys, values = list(obj), list(obj.values())
        if (
            depth >= _STREAM_DEPTH
            or not (len(keys) > _BATCH or any(map(_nests, values)))
            # The encoder decides non-str keys, and keys with lone surrogates (rewritten
            # until unique), for the whole object (which to keep, the marker's own key):
            # such an object is encoded in one call. In runs, two rewritten keys could
            # come out the same, and a streamed member's key would meet bare orjson.
            or not all(type(key) is str and _plain_key(key) for key in keys)
        ):
            self._leaf(obj, path)  # the encoder takes its own snapshot
            yield from self._flush()
            return
        self._put(b"{")
        first = True
        run: dict[Any, Any] = {}
        size = 1
        for key, member in zip(keys, values, strict=True):
            if self._streamed(member, depth + 1):
                first = self._run(run, first, path, None)
                if not first:
                    self._put(b",")
                first = False
                self._put(orjson.dumps(key) + b":")
                yield from self._value(member, depth + 1, pointer(path, key))
                continue
            run[key] = member
            if len(run) >= size:
                before = len(self.buf)
                first = self._run(run, first, path, None)
                size = _next_run(size, len(self.buf) - before)
                yield from self._flush()
        first = self._run(run, first, path, None)
        self._put(b"}")
        yield from self._flush()

    def _run(self, run: list[Any] | dict[Any, Any], first: bool, path: str, at: int | None) -> bool:
        """Write *run*'s members (a list or dict) joined as orjson joins them; clear it.
        They are members of the container at *path*, a list's from index *at*."""
        if not run:
            return first
        # "[a,b]"[1:-1] is "a,b": members joined exactly as orjson joins them.
        inner = self._dumps(run, self.left + 2, path, at)[1:-1]
        run.clear()
        if not inner:
            return first  # an object whose only keys the encoder had to drop
        if not first:
            self._put(b",")
        self._put(inner)
        return False


def _rebased(exc: EncodeError, path: str, first: int | None) -> EncodeError:
    """*exc*, raised for a value at *path* (or a run of the members there, a list's from
    index *first*), naming its place in the whole spilled value."""
    if exc.path is None:
        return exc
    rest = exc.path
    if first is not None and rest:
        index, slash, tail = rest[1:].partition("/")
        rest = f"/{int(index) + first}{slash}{tail}"
    message = str(exc).removesuffix(f" (at {exc.path or '/'})")
    return EncodeError(message, path=path + rest)


def _plain_key(key: str) -> bool:
    """Whether orjson writes *key* as it is (no lone surrogate in it)."""
    return key.isascii() or SURROGATE.search(key) is None


def _nests(value: object) -> bool:
    """Whether *value* is a container or an iterator (what a run must not hide)."""
    kind = type(value)
    return kind is list or kind is tuple or kind is dict or isinstance(value, Iterator)

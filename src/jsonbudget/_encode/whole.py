"""The whole JSON encoding of a value, streamed as it is made: what a spill file holds.

`JsonWriter` is shared by the page builder (an oversized item spilled) and the guards (a
result spilled): both write the value uncut, with the values their size check already
pulled from iterators replayed first, and stop at the store's size limit as the bytes
are made, never after encoding everything.

A spill file is the value's own JSON: orjson's bytes wherever orjson writes the value
exactly, so its depth limit is orjson's (`ORJSON_DEPTH`), not the pages' `MAX_DEPTH`.
No one call makes much more than `_WRITE_BYTES` unless one member is that large: a run
or a container past it is written member by member.
"""

from __future__ import annotations

import itertools
from collections import deque
from collections.abc import Callable, Generator, Iterator
from typing import Any, NoReturn

import orjson

from .._limits import MAX_DEPTH, MAX_LIMIT
from ..errors import EncodeError, SpillError
from . import bound as _bound
from .bound import Caps
from .encoder import BinaryMode, Encoder, MarkerStyle
from .render import EncodeCall, Stream, pointer
from .strings import SURROGATE

__all__ = ["ORJSON_DEPTH", "JsonWriter"]

#: The containers orjson writes nested: 254 (it refuses a list, dict or dataclass at
#: the 255th level, "Recursion limit reached"; its test_recursion.py writes 127 levels
#: of a list holding a dict and refuses 128). A spill file shows as many, so a value
#: orjson writes is written byte for byte; the first level it refuses is a depth marker.
ORJSON_DEPTH = 254

_FLUSH_BYTES = 1024 * 1024
_BATCH = 512
# Containers nested deeper than this inside a spilled value are encoded whole, not
# streamed member by member (each streamed level takes two generator frames of stack);
# their depth is still counted from the top of the value.
_STREAM_DEPTH = 32
#: A run of members ends once a lower bound of its bytes reaches this (64 KiB), and a
#: member whose bound reaches it alone is written alone. The bound costs a len() a
#: member: a string's characters, a container's members (each at least one byte).
_RUN_BYTES = 64 * 1024
_SIZED = frozenset((str, list, tuple, dict))
#: Members never written member by member (`_streamed` need not be asked).
_FLAT = frozenset((str, int, float, bool, type(None)))
#: The most one call is let make (1 MiB) before what it makes is dropped and the value
#: written member by member: a member's size hidden in its nested containers (a list of
#: dicts each holding a long string) is found by the size walk at this cost, not after
#: making all of it. One member (a string, a model, a dataclass) is still made whole.
_WRITE_BYTES = 1024 * 1024


def _next_run(size: int, produced: int) -> int:
    # Aim for runs of about 64 KiB: few orjson calls, little held at once.
    if produced > 256 * 1024:
        return max(1, size // 2)
    if produced < 64 * 1024:
        return min(_BATCH, size * 2)
    return size


class JsonWriter:
    """The whole JSON encoding of a Python value, in chunks of about 1 MiB, as it is made.

    A list, tuple or dict that makes more than `_WRITE_BYTES` (1 MiB) and every
    iterator are written member by member (runs of small members one encoder call each,
    as orjson joins them), so an endless generator or a 10-million-row list never sits
    in memory whole, and the file's size limit is checked as the bytes are made, not
    after. Memory is bounded by bytes, not by members: a run ends once a lower bound of
    its bytes reaches `_RUN_BYTES`, a longer member is written alone, and a run that
    would make more than `_WRITE_BYTES` is written a member at a time (512 strings of
    2 MB are made one string at a time). Made whole whatever its size is only a value
    that cannot be split: one member (a string, a model), an object whose keys the
    encoder decides (a non-str key, a lone surrogate) and a container more than
    `_STREAM_DEPTH` levels down. Items the size check already pulled from an iterator
    (the encoder call's ``streams``) are replayed first.

    Nesting is counted from the top of the spilled value: containers up to
    `ORJSON_DEPTH` levels are written as orjson writes them, a deeper one is a depth
    marker.

    With *keep*, every iterator is read through its `Stream` in *streams* (one is made
    for an iterator the size check did not reach), each value kept there as it is
    pulled, under the stream's lock: for streams that outlive the write (a page's, which
    a retried page, an MCP refit or another thread's page reads again), which would
    otherwise find the iterator drained and render the item short. Without it, the rest
    of an iterator is written as it is read and not held (an endless generator stays
    flat in memory), for streams nothing reads after the write.
    """

    __slots__ = (
        "active",
        "buf",
        "caps",
        "descend",
        "enc",
        "keep",
        "left",
        "limit",
        "ready",
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
        # The encoder's options; each call's depth cap is set from where its value
        # stands (`_caps`), since Limits stops at the pages' MAX_DEPTH.
        self.enc = Encoder(
            max_bytes=MAX_LIMIT,
            max_depth=MAX_DEPTH,
            markers=markers,
            default=default,
            binary=binary,
        )
        self.caps: dict[int, Caps] = {}
        self.streams = streams
        self.keep = keep
        # When the size check pulled from a nested iterator, that iterator may sit in any
        # small container: walk every container, so each one is replayed, not re-read.
        self.descend = bool(streams)
        self.limit = self.left = max_bytes
        self.buf = bytearray()
        # The containers being written member by member: one met again inside itself is
        # a cycle, marked as the encoder marks it (each call is told of them).
        self.active: set[int] = set()
        # Pieces of at least _FLUSH_BYTES, handed on as made (ahead of buf's bytes):
        # copied into buf, a long string's encoding was held twice, then three times.
        self.ready: deque[bytes] = deque()

    @property
    def written(self) -> int:
        """The bytes made so far."""
        return self.limit - self.left

    def chunks(self, obj: Any, path: str = "") -> Iterator[bytes]:
        """*obj*'s JSON, in chunks; an error names its place under *path* (a page's
        item, ``/items/3``)."""
        yield from self._value(obj, 0, path)
        yield from self._flush()
        if self.buf:
            yield bytes(self.buf)
            self.buf.clear()

    def _put(self, data: bytes) -> None:
        self.left -= len(data)
        if self.left < 0:
            self._refuse()
        if len(data) < _FLUSH_BYTES:
            self.buf += data
            return
        if self.buf:
            self.ready.append(bytes(self.buf))
            self.buf.clear()
        self.ready.append(data)

    def _refuse(self) -> NoReturn:
        raise SpillError(
            f"the result is larger than the store's max_file_bytes ({self.limit}); nothing was kept"
        )

    def _flush(self) -> Iterator[bytes]:
        ready = self.ready
        while ready:
            yield ready.popleft()
        if len(self.buf) >= _FLUSH_BYTES:
            yield bytes(self.buf)
            self.buf.clear()

    def _streamed(self, value: Any, depth: int) -> bool:
        """Whether *value* is written member by member without first being tried in one
        call: an iterator, and a container that may hold one the size check pulled from
        (`descend`). Any other container is tried in one call (`_at_once`) and written
        member by member only when it makes more than `_WRITE_BYTES`."""
        if depth >= _STREAM_DEPTH:
            return False
        kind = type(value)
        if kind is list or kind is tuple or kind is dict:
            # A flat container holds no iterator: it joins a run even when descending.
            return self.descend and (
                len(value) > _BATCH or any(map(_nests, value.values() if kind is dict else value))
            )
        return isinstance(value, Iterator) and not isinstance(value, str | bytes)

    def _value(self, obj: Any, depth: int, path: str) -> Iterator[bytes]:
        kind = type(obj)
        if id(obj) in self.active:
            self._leaf(obj, depth, path)  # the cycle marker
            yield from self._flush()
        elif kind is dict:
            yield from self._object(obj, depth, path)
        elif kind is list or kind is tuple:
            if self._streamed(obj, depth) or not self._at_once(obj, depth, path):
                yield from self._array(obj, depth, path)
            else:
                yield from self._flush()
        elif self._streamed(obj, depth):  # an iterator
            yield from self._array(obj, depth, path)
        else:
            self._leaf(obj, depth, path)
            yield from self._flush()

    def _at_once(self, obj: Any, depth: int, path: str) -> bool:
        """Write container *obj* in one call if that makes at most `_WRITE_BYTES`, else
        write nothing and say False: it is to be written member by member."""
        if depth >= _STREAM_DEPTH or self.left <= _WRITE_BYTES:
            self._leaf(obj, depth, path)  # at most the file's room, or refused
            return True
        # Trying a clean value costs a walk that stops at the cap. The renderer, for one
        # that is not, works up to the cap before it gives up (0.2 s for a MiB of rows
        # holding NaN): it tries only _RUN_BYTES, a longer value's runs are rendered as
        # they are written.
        data = self._dumps(obj, _WRITE_BYTES, depth, path, None, rendered=_RUN_BYTES)
        if data is None:
            return False
        self._put(data)
        return True

    def _leaf(self, obj: Any, depth: int, path: str) -> None:
        if type(obj) is str and len(obj) > self.left:
            self._refuse()  # at least one byte a char: refused before it is encoded
        data = self._dumps(obj, self.left, depth, path, None)
        if data is None:
            self._refuse()
        self._put(data)

    def _caps(self, depth: int) -> Caps:
        """The encoder's caps for a value *depth* containers deep in the spilled value:
        its markers at orjson's depth, whichever level it is written from."""
        caps = self.caps.get(depth)
        if caps is None:
            _, items, keys, field, scalars = self.enc._caps
            caps = self.caps[depth] = (ORJSON_DEPTH - depth, items, keys, field, scalars)
        return caps

    def _dumps(
        self,
        obj: Any,
        most: int,
        depth: int,
        path: str,
        first: int | None,
        *,
        rendered: int | None = None,
    ) -> bytes | None:
        """*obj* whole, standing *depth* containers deep; None once it passes *most* bytes:
        never made whole first (a value of shared subtrees may encode to terabytes). *obj*
        stands at *path*, or is a run of the members there, its first item at index
        *first* of the list (None: of the object), standing at the container's depth.

        orjson's bytes when it is clean, else the encoder's markers (for NaN, which orjson
        writes as ``null``, as for every value orjson refuses), as `dumps_whole` writes,
        but with the depth cap at orjson's own limit. With *rendered*, None as well for
        a value that is not clean and passes that many bytes."""
        caps = self._caps(depth)
        cap = min(max(most, 0), MAX_LIMIT)
        data = _bound.clean_dumps(obj, cap, 0, caps, None, True)  # as `Encoder.dumps` starts
        if type(data) is bytes:
            return data
        if data == _bound.TOO_BIG:
            return None
        if rendered is not None:
            cap = min(cap, rendered)
        # An iterator inside a dataclass or a model is replayed from the streams. Limits
        # stop max_depth at 128 for the pages' renderer stack; the call itself takes the
        # depth its caps say, so the markers stand where orjson's limit is.
        call = EncodeCall(self.enc, self.streams)
        call.caps, call.max_depth = caps, caps[0]
        call.active.update(self.active)
        try:
            out = call.render_whole(obj, cap, "")
        except EncodeError as exc:
            raise _rebased(exc, path, first) from exc.__cause__
        return None if out is None else out[0]

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
        self.active.add(id(obj))  # see _object
        try:
            self._put(b"[")
            first = True
            run: list[Any] = []
            at = 0  # the index of the run's first item
            size = 1  # members per run: grows while runs are small, shrinks when large
            held = 0  # a lower bound of the run's bytes (see _RUN_BYTES)
            # Asked of every member: bound once, and a container asked only when descending.
            descend, streamed, sized, flat = self.descend, self._streamed, _SIZED, _FLAT
            for index, member in enumerate(source):
                kind = type(member)
                long = len(member) if kind in sized else 0
                if long >= _RUN_BYTES or (
                    kind not in flat
                    and (descend or kind not in sized)
                    and streamed(member, depth + 1)
                ):
                    first = yield from self._run(run, first, depth, path, at)
                    if not first:
                        self._put(b",")
                    first = False
                    yield from self._value(member, depth + 1, pointer(path, index))
                    at = index + 1
                    held = 0
                    continue
                run.append(member)
                held += long
                if len(run) >= size or held >= _RUN_BYTES:
                    before = self.written
                    first = yield from self._run(run, first, depth, path, at)
                    at = index + 1
                    held = 0
                    size = _next_run(size, self.written - before)
                    yield from self._flush()
            first = yield from self._run(run, first, depth, path, at)
            self._put(b"]")
            yield from self._flush()
        finally:
            self.active.discard(id(obj))

    def _object(self, obj: dict[Any, Any], depth: int, path: str) -> Iterator[bytes]:
        # Read once into a snapshot (see _array): iterating the dict itself, a hook that
        # adds or pops a member raised a bare RuntimeError mid-spill.
        keys, values = list(obj), list(obj.values())
        if (
            depth >= _STREAM_DEPTH
            # The encoder decides non-str keys, and keys with lone surrogates (rewritten
            # until unique), for the whole object (which to keep, the marker's own key):
            # such an object is encoded in one call. In runs, two rewritten keys could
            # come out the same, and a streamed member's key would meet bare orjson.
            or not all(type(key) is str and _plain_key(key) for key in keys)
        ):
            self._leaf(obj, depth, path)  # the encoder takes its own snapshot
            yield from self._flush()
            return
        if not (self.descend and (len(keys) > _BATCH or any(map(_nests, values)))) and (
            self._at_once(obj, depth, path)
        ):
            yield from self._flush()
            return
        # Its members are written by calls of their own: one that holds this object
        # again is told so, and marks the repeat as a cycle, as the encoder does.
        self.active.add(id(obj))
        try:
            self._put(b"{")
            first = True
            run: dict[Any, Any] = {}
            size = 1
            held = 0  # a lower bound of the run's bytes (see _RUN_BYTES)
            descend, streamed, sized, flat = self.descend, self._streamed, _SIZED, _FLAT
            for key, member in zip(keys, values, strict=True):
                kind = type(member)
                long = len(member) if kind in sized else 0
                if long >= _RUN_BYTES or (
                    kind not in flat
                    and (descend or kind not in sized)
                    and streamed(member, depth + 1)
                ):
                    first = yield from self._run(run, first, depth, path, None)
                    if not first:
                        self._put(b",")
                    first = False
                    self._put(orjson.dumps(key) + b":")
                    yield from self._value(member, depth + 1, pointer(path, key))
                    held = 0
                    continue
                run[key] = member
                held += long + len(key)
                if len(run) >= size or held >= _RUN_BYTES:
                    before = self.written
                    first = yield from self._run(run, first, depth, path, None)
                    held = 0
                    size = _next_run(size, self.written - before)
                    yield from self._flush()
            first = yield from self._run(run, first, depth, path, None)
            self._put(b"}")
            yield from self._flush()
        finally:
            self.active.discard(id(obj))

    def _run(
        self, run: list[Any] | dict[Any, Any], first: bool, depth: int, path: str, at: int | None
    ) -> Generator[bytes, None, bool]:
        """Write *run*'s members (a list or dict) joined as orjson joins them; clear it.
        They are members of the container at *path*, a list's from index *at*, which
        stands *depth* deep. One call makes them, or, past `_WRITE_BYTES`, one each."""
        if not run:
            return first
        most = self.left + 2
        data = self._dumps(run, min(most, _WRITE_BYTES), depth, path, at)
        if data is None:
            if most <= _WRITE_BYTES:
                self._refuse()
            # Longer than their bounds said (sizes hidden in nested containers, models or
            # escapes): each is written as a value of its own, a long one member by
            # member in turn, and nothing is made whole.
            return (yield from self._one_by_one(run, first, depth, path, at))
        run.clear()
        # "[a,b]"[1:-1] is "a,b": members joined exactly as orjson joins them.
        inner = data[1:-1]
        if not inner:
            return first  # an object whose only keys the encoder had to drop
        if not first:
            self._put(b",")
        self._put(inner)
        return False

    def _one_by_one(
        self, run: list[Any] | dict[Any, Any], first: bool, depth: int, path: str, at: int | None
    ) -> Generator[bytes, None, bool]:
        """Write *run*'s members (see `_run`) each as a value of its own; clear it."""
        if type(run) is dict:
            pairs = list(run.items())
            run.clear()
            for key, member in pairs:
                if not first:
                    self._put(b",")
                first = False
                self._put(orjson.dumps(key) + b":")
                yield from self._value(member, depth + 1, pointer(path, key))
            return first
        assert at is not None  # a list's run knows its first index
        members = run[:]
        run.clear()
        for offset, member in enumerate(members):
            if not first:
                self._put(b",")
            first = False
            yield from self._value(member, depth + 1, pointer(path, at + offset))
        return first


def _rebased(exc: EncodeError, path: str, first: int | None) -> EncodeError:
    """*exc*, raised for a value at *path* (or a run of the members there, a list's from
    index *first*), naming its place in the whole spilled value."""
    if exc.path is None:
        return exc
    rest = exc.path
    if first is not None and rest:
        index, slash, tail = rest[1:].partition("/")
        rest = f"/{int(index) + first}{slash}{tail}"
    # The message as raised, less the place EncodeError appended (spelled as it spells it)
    message = str(exc).removesuffix(str(EncodeError("", path=exc.path)))
    return EncodeError(message, path=path + rest)


def _plain_key(key: str) -> bool:
    """Whether orjson writes *key* as it is (no lone surrogate in it)."""
    return key.isascii() or SURROGATE.search(key) is None


def _nests(value: object) -> bool:
    """Whether *value* is a container or an iterator (what a run must not hide)."""
    kind = type(value)
    return kind is list or kind is tuple or kind is dict or isinstance(value, Iterator)

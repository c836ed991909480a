"""The whole JSON encoding of a value, streamed as it is made: what a spill file holds.

`JsonWriter` is shared by the page builder (an oversized item spilled) and the guards (a
result spilled): both write the value uncut, with the values their size check already
pulled from iterators replayed first, and stop at the store's size limit as the bytes
are made, never after encoding everything.

A spill file is the value's own JSON: orjson's bytes wherever orjson writes the value
exactly, so its depth limit is orjson's (`ORJSON_DEPTH`), not the pages' `MAX_DEPTH`.
No one call makes much more than `_WRITE_BYTES` unless one member is that large: a run
or a container past it is written member by member, a long string a piece at a time,
and a dataclass, model or Struct member by member where the encoder renders it as its
members (`JsonWriter._split`).
"""

from __future__ import annotations

import dataclasses
import enum
import itertools
import sys
from collections import deque
from collections.abc import Callable, Generator, Iterable, Iterator
from typing import Any, NoReturn

import orjson

from .._limits import MAX_DEPTH, MAX_LIMIT
from ..errors import EncodeError, SpillError
from . import bound as _bound
from . import values as _values
from .bound import Caps
from .encoder import BinaryMode, Encoder, MarkerStyle
from .render import (
    _NO_ITEM,
    EncodeCall,
    Stream,
    _library_error,
    _placed,
    _proxy,
    pointer,
    reports_itself,
)
from .strings import SURROGATE, cut_string

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
_VIEWS = _values.VIEWS
#: Members whose len() bounds their bytes from below, and costs no code of the caller's.
_SIZED = frozenset((str, list, tuple, dict, *_values.COUNTED_VIEWS))
#: Members never written member by member (`_streamed` need not be asked).
_FLAT = frozenset((str, int, float, bool, type(None)))
#: The most one call is let make (1 MiB) before what it makes is dropped and the value
#: written member by member: a member's size hidden in its nested containers (a list of
#: dicts each holding a long string) is found by the size walk at this cost, not after
#: making all of it. One member that cannot be split (see `JsonWriter`) is still made
#: whole.
_WRITE_BYTES = 1024 * 1024
#: The most a run's call is let render (256 KiB; runs aim at 64-256 KiB) before its
#: members are written one by one: the encoder's renderer, which writes what orjson
#: cannot, holds 30-70 times what it makes until its call ends.
_RENDER_BYTES = 256 * 1024
#: Characters of a long string (or key) escaped per call (`JsonWriter._text`): at most
#: six bytes each, so a piece is at most 384 KiB whatever the string's length. orjson,
#: given the whole string, reserves 9-16 bytes of address space a character before it
#: writes one (under an address-space limit, a 60 MB string crashed the process).
_PIECE_CHARS = 64 * 1024


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
    2 MB are made one string at a time). A string (or key) longer than `_PIECE_CHARS`
    is escaped a piece at a time (`_text`). A dataclass, a pydantic model, a msgspec
    Struct, an attrs instance or a NumPy array written alone (not in a run) is written
    member by member where the encoder renders it as its members (`_split`), else whole
    by its own library. Made whole whatever its size is only a value that cannot be split: a
    model its library writes (it needs no marker), one that converts to a single value
    (a model serializer's string), an object whose keys the encoder decides (a non-str
    key, a lone surrogate, a key twice) and a container more than `_STREAM_DEPTH`
    levels down. Items the size check already pulled from an iterator (the encoder
    call's ``streams``) are replayed first.

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
        "views",
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
        # The values being written member by member as the encoder converted them (a
        # dataclass's members, a model's view), by id: a call meeting one again inside
        # them gets the same conversion, found in `active` and marked as a cycle, as the
        # encoder's one call marks it.
        self.views: dict[int, tuple[Any, Any]] = {}

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
        elif kind is str and len(obj) > _PIECE_CHARS:
            yield from self._text(obj)
        elif kind is dict:
            yield from self._object(obj, depth, path)
        elif kind is list or kind is tuple:
            if self._streamed(obj, depth) or not self._at_once(obj, depth, path):
                yield from self._array(obj, depth, path)
            else:
                yield from self._flush()
        elif self._streamed(obj, depth):  # an iterator
            yield from self._array(obj, depth, path)
        elif depth < _STREAM_DEPTH and self.left > _WRITE_BYTES and _splits(kind):
            yield from self._split(obj, depth, path)
        elif kind is not str and issubclass(kind, str) and self._long_text(obj):
            # The encoder writes a str subclass's own text (str's methods read it), as
            # orjson does.
            yield from self._text(str.__str__(obj))
        else:
            self._leaf(obj, depth, path)
            yield from self._flush()

    @staticmethod
    def _long_text(obj: str) -> bool:
        """Whether str subclass *obj* is written as a long string (`_text`): not an
        enum (the encoder writes its text, orjson its value) or a proxy."""
        return (
            str.__len__(obj) > _PIECE_CHARS and not isinstance(obj, enum.Enum) and not _proxy(obj)
        )

    def _text(self, s: str) -> Iterator[bytes]:
        """*s* as the encoder writes it whole, escaped a piece of `_PIECE_CHARS` at a time
        by the compiled one-pass escaper (`cut_string`, orjson's escapes): each lone
        surrogate U+FFFD, and a note of how many at the end of the string, as
        `EncodeCall._scrubbed` writes it. Memory is a piece, whatever its length."""
        if len(s) + 2 > self.left:
            self._refuse()  # at least one byte a char: refused before it is encoded
        self._put(b'"')
        replaced = 0
        for start in range(0, len(s), _PIECE_CHARS):
            piece = s[start : start + _PIECE_CHARS]
            data, _, bad = cut_string(piece, 6 * len(piece), _bare, 0, 0)
            replaced += bad
            self._put(data)
            yield from self._flush()
        if replaced:
            self._put(f"…[replaced: {replaced} lone surrogates]".encode())
        self._put(b'"')
        yield from self._flush()

    def _key(self, key: str) -> Iterator[bytes]:
        """*key* and its colon: a key of `_plain_key` (no lone surrogate), a long one
        escaped a piece at a time (`_text`)."""
        if len(key) > _PIECE_CHARS:
            yield from self._text(key)
            self._put(b":")
        else:
            self._put(orjson.dumps(key) + b":")

    def _split(self, obj: Any, depth: int, path: str) -> Iterator[bytes]:
        """*obj*, a value the encoder converts (a dataclass, a model, a Struct, an attrs
        instance, a NumPy array, or the view of one): whole where its library writes it,
        else member by member.

        The encoder renders such a value (`EncodeCall.whole`) as its own library writes
        it where it needs no marker, else as its conversion: a dataclass's members (a
        dict; orjson writes a clean one as the same bytes), a model's view, its
        members converted by pydantic's, msgspec's or attrs' settings. This writer takes
        the same steps, in the same order, on the same conversion, and writes that
        conversion as it writes any dict or list: the bytes are the encoder's, and each
        call makes a bounded part of them (a model's 300,000 rows holding NaN were
        rendered in one call, at 50 times the file's size in memory)."""
        kind = type(obj)
        call = self._call(depth)
        cap = min(self.left, MAX_LIMIT)
        if kind in _VIEWS:
            v = obj
        else:
            if _proxy(obj):
                yield from self._whole(obj, depth, path, call)
                return
            if _values.has_class(kind, _values.NATIVE_KEYS):  # `EncodeCall.whole`: a flat model
                native = _values.native_whole(obj, cap, 0, call.caps, longer=True)
                if native is not None:
                    yield from self._native(native)
                    return
            try:
                v = call.dispatch(obj, "")
            except EncodeError as exc:
                raise _rebased(exc, path, None) from exc.__cause__
        vkind = type(v)
        if vkind in _VIEWS:
            # `EncodeCall._whole_container`: the library writes a view that needs no marker.
            try:
                native = _values.whole(v, cap, 0, call.caps, call.known, longer=True)
            except MemoryError:
                raise  # as the encoder raises it: as itself, not the value's
            except Exception as exc:  # noqa: BLE001 - re-raised as the encoder raises it
                err = _library_error(exc, obj, "")
                cause = err.__cause__
                if isinstance(err, EncodeError):
                    err = _rebased(err, path, None)
                raise err from cause
            if native is not None:
                yield from self._native(native)
                return
        members: tuple[list[Any], list[Any]] | None = None
        if vkind is dict:
            pass
        elif issubclass(vkind, _values.MapView):
            members = _members(v, path)
            if not _plain_keys(members[0]):
                # Keys the encoder rewrites (see `_object`): the whole value, in the call
                # that converted it.
                yield from self._whole(obj, depth, path, call)
                return
        elif not (vkind is list or vkind is tuple or issubclass(vkind, _values.SeqView)):
            yield from self._whole(obj, depth, path, call)  # a marker, a serializer's str
            return
        # A call that meets *obj* again inside its members converts it to *v*, already
        # active (`_object` and `_array` add it): a cycle, marked where the encoder does.
        held = v is not obj and id(obj) not in self.views
        if held:
            self.views[id(obj)] = (obj, v)
            self.active.add(id(obj))
        try:
            if vkind is dict:  # a dataclass's members: one call if that makes 1 MiB
                yield from self._object(v, depth, path)
            elif members is not None:
                yield from self._object(v, depth, path, members=members, tried=True)
            elif vkind is list or vkind is tuple:
                if not self._at_once(v, depth, path):
                    yield from self._array(v, depth, path)
                else:
                    yield from self._flush()
            else:
                yield from self._array(v, depth, path, _items(v, path))
        finally:
            if held:
                del self.views[id(obj)]
                self.active.discard(id(obj))

    def _native(self, data: bytes) -> Iterator[bytes]:
        """A library's bytes for a whole value (a model that needs no marker)."""
        if len(data) > self.left:
            self._refuse()
        self._put(data)
        yield from self._flush()

    def _whole(self, obj: Any, depth: int, path: str, call: EncodeCall) -> Iterator[bytes]:
        """*obj* whole (`_leaf`), rendered by *call*, which converted it already."""
        data = self._dumps(obj, self.left, depth, path, None, call=call)
        if data is None:
            self._refuse()
        self._put(data)
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

    def _call(self, depth: int) -> EncodeCall:
        """An encoder call for a value standing *depth* containers deep: its caps (see
        `_caps`), the containers being written around it, the values converted there."""
        # An iterator inside a dataclass or a model is replayed from the streams. Limits
        # stop max_depth at 128 for the pages' renderer stack; the call itself takes the
        # depth its caps say, so the markers stand where orjson's limit is.
        call = EncodeCall(self.enc, self.streams)
        call.caps = caps = self._caps(depth)
        call.max_depth = caps[0]
        call.active.update(self.active)
        call.converted.update(self.views)
        return call

    def _dumps(
        self,
        obj: Any,
        most: int,
        depth: int,
        path: str,
        first: int | None,
        *,
        rendered: int | None = None,
        call: EncodeCall | None = None,
    ) -> bytes | None:
        """*obj* whole, standing *depth* containers deep; None once it passes *most* bytes:
        never made whole first (a value of shared subtrees may encode to terabytes). *obj*
        stands at *path*, or is a run of the members there, its first item at index
        *first* of the list (None: of the object), standing at the container's depth.

        orjson's bytes when it is clean, else the encoder's markers (for NaN, which orjson
        writes as ``null``, as for every value orjson refuses), as `dumps_whole` writes,
        but with the depth cap at orjson's own limit. With *rendered*, None as well for
        a value that is not clean and passes that many bytes. *call* renders it if given
        (one that converted *obj* already), else a new one (`_call`)."""
        caps = self._caps(depth)
        cap = min(max(most, 0), MAX_LIMIT)
        data = _bound.clean_dumps(obj, cap, 0, caps, None, True)  # as `Encoder.dumps` starts
        if type(data) is bytes:
            return data
        if data == _bound.TOO_BIG:
            return None
        if rendered is not None:
            cap = min(cap, rendered)
        if call is None:
            call = self._call(depth)
        try:
            out = call.render_whole(obj, cap, "")
        except EncodeError as exc:
            raise _rebased(exc, path, first) from exc.__cause__
        if out is None and call.changed is not None:
            # Not too big: changed while read (a hook emptied a deque), so no whole
            # rendering of it exists; refused as such, not as past the store's limit.
            err = _placed(call.changed.changed(), path)
            raise err from None
        return None if out is None else out[0]

    def _replay(self, it: Iterator[Any], path: str) -> Iterator[Any]:
        streams = self.streams
        # An iterator inside a model is met as its items converted (`values.Converted`,
        # made anew each time the model is): its stream is the iterator's, as the
        # encoder keys it, so what a size check pulled through another is found.
        source = it.it if type(it) is _values.Converted else it
        stream = streams.get(id(source))
        if self.keep:
            if stream is None or stream.source is not source:
                streams[id(source)] = Stream(it, source)
                # Read back: a page's streams keep the one another page made first.
                stream = streams[id(source)]
            return stream.replay(path)
        if stream is None:
            return it
        if stream.failed is not None or stream.pending is not _NO_ITEM:
            # raises where the iterator raised before, or gives first the item a read
            # could not keep
            return stream.replay(path)
        return iter(stream.items) if stream.done else itertools.chain(stream.items, stream.it)

    def _array(
        self, obj: Any, depth: int, path: str, items: Iterator[Any] | None = None
    ) -> Iterator[bytes]:
        """*obj*, a list, tuple or iterator, member by member; or the view whose *items*
        are given (`_items`)."""
        # A list is read once into a snapshot, as the encoder reads one: a `default` hook
        # (or another thread) that empties it or adds to it mid-spill changes nothing here.
        source: Iterable[Any]
        if items is not None:
            source = items
        else:
            kind = type(obj)
            source = (
                obj if kind is tuple else list(obj) if kind is list else self._replay(obj, path)
            )
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

    def _object(
        self,
        obj: Any,
        depth: int,
        path: str,
        *,
        members: tuple[list[Any], list[Any]] | None = None,
        tried: bool = False,
    ) -> Iterator[bytes]:
        """Dict *obj* (or a view, its keys and values in *members*, see `_members`),
        in one call if that makes at most `_WRITE_BYTES` and it was not *tried*, else
        member by member."""
        # Read once into a snapshot (see _array): iterating the dict itself, a hook that
        # adds or pops a member raised a bare RuntimeError mid-spill.
        keys, values = (list(obj), list(obj.values())) if members is None else members
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
        if (
            not tried
            and not (self.descend and (len(keys) > _BATCH or any(map(_nests, values))))
            and self._at_once(obj, depth, path)
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
                    yield from self._key(key)
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
        stands *depth* deep. One call makes them, or, past `_WRITE_BYTES` (past
        `_RENDER_BYTES` where the encoder renders them), one each."""
        if not run:
            return first
        most = self.left + 2
        data = self._dumps(run, min(most, _WRITE_BYTES), depth, path, at, rendered=_RENDER_BYTES)
        if data is None:
            if most <= _RENDER_BYTES:
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
                yield from self._key(key)
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


def _bare(kept: int) -> tuple[bytes, bytes]:
    """`cut_string`'s mark for a piece of a string: nothing around it."""
    return b"", b""


#: Classes `_splits` answered for, cleared whole past 1,024 (as `values.NATIVE_KEYS`).
_SPLITS: dict[type, bool] = {}
_MAX_SPLITS = 1024
#: Types the encoder writes before it converts a value (`EncodeCall.dispatch`), or never
#: converts: none of them is split.
_NOT_SPLIT = (str, int, float, bytes, bytearray, memoryview, dict, list, tuple, enum.Enum)


def _splits(kind: type) -> bool:
    """Whether the encoder converts a value of *kind* into members of its own before it
    would ask ``default`` (`values.adapt`): a dataclass (its members, as orjson selects
    them), a pydantic model, a msgspec Struct, an attrs instance, a NumPy array, or the
    view of one. `JsonWriter._split` may then write it member by member."""
    if kind in _VIEWS:
        return True
    known = _SPLITS.get(kind)
    if known is None:
        if len(_SPLITS) >= _MAX_SPLITS:
            _SPLITS.clear()
        known = _SPLITS[kind] = _converted(kind)
    return known


def _converted(kind: type) -> bool:
    if issubclass(kind, _NOT_SPLIT) or issubclass(kind, Iterator):
        return False
    if dataclasses.is_dataclass(kind):
        return True
    mods = sys.modules
    for module, base in (("pydantic", "BaseModel"), ("msgspec", "Struct"), ("numpy", "ndarray")):
        if module in mods and issubclass(kind, getattr(mods[module], base)):
            return True
    return "attr" in mods and getattr(kind, "__attrs_attrs__", None) is not None


def _members(view: _values.MapView, path: str) -> tuple[list[Any], list[Any]]:
    """*view*'s keys and converted values, read once as the encoder reads them
    (`EncodeCall._read`), an error raised as it raises it, at *path*."""
    keys: list[Any] = []
    values: list[Any] = []
    try:
        for key, value in view.items():
            keys.append(key)
            values.append(value)
    except MemoryError:
        raise  # as `EncodeCall._read` raises it
    except Exception as exc:
        if reports_itself(exc):
            err = _placed(exc, path)
            raise err from err.__cause__
        raise _unread(view, exc, path) from exc
    return keys, values


def _items(view: _values.SeqView, path: str) -> Iterator[Any]:
    """*view*'s items, converted a slice at a time as the encoder reads them
    (`EncodeCall._read`), an error raised as it raises it, at *path*."""
    n = len(view)
    for start in range(0, n, _BATCH):
        try:
            part = view[start : start + _BATCH]
        except MemoryError:
            raise  # as `EncodeCall._read` raises it
        except Exception as exc:
            if reports_itself(exc):
                err = _placed(exc, path)
                raise err from err.__cause__
            raise _unread(view, exc, path) from exc
        if len(part) < min(_BATCH, n - start):
            # Its source changed between batches and the view ended there: a whole
            # rendering holds every item counted or is refused, never written short.
            err = _placed(view.changed(), path)
            raise err from None
        yield from part


def _unread(view: Any, exc: Exception, path: str) -> EncodeError:
    return EncodeError(f"{type(view).__name__} raised {type(exc).__name__} while read", path=path)


def _plain_keys(keys: list[Any]) -> bool:
    """Whether the encoder writes each of *keys* as it is: a str with no lone surrogate,
    none twice (a second is rewritten, a `RepeatedKey`)."""
    plain = all(type(key) is str and _plain_key(key) for key in keys)
    return plain and len(set(keys)) == len(keys)


def _plain_key(key: str) -> bool:
    """Whether orjson writes *key* as it is (no lone surrogate in it)."""
    return key.isascii() or SURROGATE.search(key) is None


def _nests(value: object) -> bool:
    """Whether *value* is a container or an iterator (what a run must not hide)."""
    kind = type(value)
    return kind is list or kind is tuple or kind is dict or isinstance(value, Iterator)

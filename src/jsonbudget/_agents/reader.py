"""`ResultReader`: spilled results read back in bounded pages, by JSON Pointer.

A spilled result is handed to a model as an opaque **reference** bound to a principal
(`ResultReader.reference`); `ResultReader.read` (and the one-call `read_result`) returns
one page of the value at a JSON Pointer inside it: a list's items, an object's members
(``{"key": ..., "value": ...}``), a string's next characters, or a scalar, with a
continuation cursor bound to the same principal and the same read. So a cut field or an
oversized item is never lost, only further away. A pointer names what json.loads would
(of the members with a repeated key, the last), and ``~v3`` / ``~k3`` name an object's
member by its place, which reaches a member whose key no page can show whole.
"""

from __future__ import annotations

import codecs
import contextlib
import functools
import hashlib
import json
import os
import re
import sys
import threading
import weakref
from collections import OrderedDict
from collections.abc import Iterator, Mapping
from dataclasses import dataclass
from itertools import chain, islice
from types import TracebackType
from typing import IO, Any, Final, Literal, NamedTuple

import ijson
import orjson

from .._cursors.scope import Scope
from .._cursors.store import CursorStore, MemoryCursorStore
from .._encode.encoder import Truncation, encode
from .._encode.markers import Markers
from .._encode.render import Stream
from .._encode.strings import SURROGATE
from .._limits import MIN_BYTES, Limits
from .._pages.builder import Page, PageBuilder
from .._sources.base import Clipped
from ..errors import InvalidCursor, LimitError, SpillError
from .spill import SpillBackend, SpillRef

__all__ = [
    "LEAST_READ_BYTES",
    "READ_TOOL",
    "LongIntsAsExponents",
    "ReadKind",
    "ReadPage",
    "ResultReader",
    "read_result",
]

#: The scope query every reference and read cursor is bound to (with the principal).
READ_TOOL = "read_result"
_SCOPE_QUERY = {"$tool": READ_TOOL}
# yajl (ijson's C backend) refuses integers beyond 64 bits; the Python backend does not.
_IJSON_PY = ijson.get_backend("python")
#: What ijson's parsers raise for bytes they cannot read: its own `JSONError`, the Python
#: backend's `json.JSONDecodeError` (a raw control character in a string), and yajl's
#: `UnicodeDecodeError` (a lone low surrogate escape such as ``\\udc00``).
PARSE_ERRORS: Final = (ijson.JSONError, json.JSONDecodeError, UnicodeDecodeError)
#: What a read's page holds: `ReadPage.kind`, and the envelope's ``"kind"``.
ReadKind = Literal["array", "object", "string", "text", "value"]
# Room kept in a string page for its envelope; the cut string gets the rest.
_STRING_ENVELOPE = 300
#: Reads kept between pages (one per conversation reading), so the next page goes on
#: where the last stopped instead of parsing from the start: a list's or an object's
#: open parser, or a string value, of at most `KEPT_CHARS` characters in all.
KEPT_READS: Final = 16
KEPT_CHARS: Final = 32 << 20
#: What a page keeps of its items after their cuts, in `max_bytes`: the events read past
#: are kept (each counted `_TAPE_EVENT` bytes, a string or key its characters more) up to
#: this many page sizes in all, so a lazy rest reads them from memory, not the file.
KEPT_TAIL_PAGES: Final = 32
_TAPE_EVENT: Final = 100


@dataclass(frozen=True, slots=True)
class ReadPage:
    """One page of a read: the envelope bytes and what they say.

    The envelope is ``{"items": [...], "complete": ..., "next_cursor": ..., "pointer":
    ..., "kind": ...}`` plus the page's ``truncated`` / ``oversized`` reports when it has
    any; ``kind`` is ``"array"``, ``"object"``, ``"string"``, ``"text"`` (a spilled text
    result) or ``"value"`` (a scalar).
    """

    data: bytes
    kind: ReadKind
    complete: bool
    next_cursor: str | None

    @property
    def text(self) -> str:
        return self.data.decode("utf-8")


class ResultReader:
    """Reads spilled results back for the principal each reference was minted for.

    *spill* is the store the results were spilled to; *cursors* holds references and
    continuation cursors (a `MemoryCursorStore` by default; a shared store such as
    `RedisCursorStore` for several workers). Each page is at most ``max_bytes``, which
    is at least `LEAST_READ_BYTES` (else `LimitError`).

    The reads it keeps open for a next page close with `close`, at the end of a ``with``
    block, or when the reader is dropped (with its last reference).
    """

    __slots__ = (
        "__weakref__",
        "_cursors",
        "_kept",
        "_limits",
        "_lock",
        "_repeats",
        "_spill",
        "_surrogates",
    )

    def __init__(
        self,
        *,
        spill: SpillBackend,
        cursors: CursorStore | None = None,
        max_bytes: int = 16384,
    ) -> None:
        if not isinstance(spill, SpillBackend):
            raise TypeError(f"spill must be a spill store, not {type(spill).__name__}")
        if cursors is not None and not isinstance(cursors, CursorStore):
            raise TypeError(f"cursors must be a cursor store, not {type(cursors).__name__}")
        self._spill = spill
        self._cursors: CursorStore = cursors if cursors is not None else MemoryCursorStore()
        self._limits = Limits(max_bytes)
        if max_bytes < LEAST_READ_BYTES:
            raise LimitError(
                "max_bytes",
                max_bytes,
                f"must be at least {LEAST_READ_BYTES}: a page of any kind, under a pointer "
                f"echoed at its longest",
            )
        self._kept: OrderedDict[tuple[str, str, int], _Kept] = OrderedDict()
        # Per spilled result: whether yajl must not read it (see `_backends`).
        self._surrogates: dict[str, bool] = {}
        # Per spilled result and object (by a digest of its steps, `_Prefixes`):
        # fingerprints of the keys it repeats (see `_Repeats`).
        self._repeats: dict[tuple[str, bytes], frozenset[_Print]] = {}
        self._lock = threading.Lock()
        # A reader dropped unclosed closes its kept files then, not when the cycle
        # collector or the interpreter's exit finds them open (a `ResourceWarning` each).
        # Nothing it keeps refers back to it, so that is with its last reference.
        weakref.finalize(self, _close_kept, self._kept, self._lock)

    def close(self) -> None:
        """Close the reads kept open for a next page (a later page parses from the start)."""
        _close_kept(self._kept, self._lock)

    def __enter__(self) -> ResultReader:
        return self

    def __exit__(
        self, kind: type[BaseException] | None, exc: BaseException | None, tb: TracebackType | None
    ) -> None:
        self.close()

    @property
    def max_bytes(self) -> int:
        return self._limits.max_bytes

    @property
    def cursors(self) -> CursorStore:
        """The store that holds references and continuation cursors."""
        return self._cursors

    @property
    def spill(self) -> SpillBackend:
        """The store the spilled results are read from."""
        return self._spill

    def reference(self, spill: SpillRef | str, *, principal: str, unique_keys: bool = False) -> str:
        """An opaque reference to the spilled result *spill* that only *principal* can read.

        *unique_keys* says that no object in the result repeats a key (the encoder never
        writes one twice: the gate says so of a result it spilled from a Python value), so
        a pointer takes the first member with its key without reading the object on.
        """
        name = spill.ref if isinstance(spill, SpillRef) else spill
        if type(unique_keys) is not bool:
            raise TypeError(f"unique_keys must be a bool, not {type(unique_keys).__name__}")
        info = self._spill.get(name)  # only a result that exists gets a reference
        # The size stored with it (a name's: the file's now), for each read to refuse a
        # file cut or grown since: a text result is read to its end as it is, and a page
        # would call what is left of it complete.
        size = spill.size if isinstance(spill, SpillRef) else info.size
        position: dict[str, Any] = {"ref": name, "size": size}
        if unique_keys:
            position["unique"] = True
        state = self._cursors.start(_scope(principal), max_pages=None)
        return self._cursors.mint(state, position)

    def read(
        self, ref: str, pointer: str = "", cursor: str | None = None, *, principal: str
    ) -> ReadPage:
        """The page of the value at *pointer* in the result *ref* refers to.

        *pointer* is an RFC 6901 pointer, resolved as json.loads reads the result (a
        repeated key names its last member), whose tokens may also name an object's
        member by its place: ``~v3`` its value, ``~k3`` its key (see `_Member`). A
        listed member whose key the page does not show as it is comes with both.

        Raises the cursor errors for a reference or cursor that is not *principal*'s, is
        garbled or expired (a cursor minted for another reference or pointer is
        `InvalidCursor`), `LimitError` for a pointer that is not an RFC 6901 pointer,
        `SpillError` if the result is gone, is not valid JSON up to the page, or nothing
        stands at *pointer*. An integer longer than Python's int() converts is read as
        the exact Decimal of its digits (see `LongIntsAsExponents`), which the page marks.
        """
        scope = _scope(principal)
        tokens = _tokens(pointer)
        # Continuations are minted in the reference's own operation: they share its expiry.
        state = self._cursors.resume(ref, scope)
        named = state.position
        # "size" is absent from the references of older versions (a durable store's)
        if (
            not isinstance(named, dict)
            or "ref" not in named
            or not set(named) <= {"ref", "unique", "size"}
            or named.get("unique", True) is not True
        ):
            raise InvalidCursor("not a reference to a spilled result")
        spilled = named["ref"]
        stored = named.get("size")
        if not isinstance(spilled, str) or not (
            stored is None or (type(stored) is int and stored >= 0)
        ):
            raise InvalidCursor("not a reference to a spilled result")
        at = 0
        if cursor is not None:
            pos = self._cursors.resume(cursor, scope).position
            if not (isinstance(pos, dict) and pos.get("ref") == spilled
                    and pos.get("pointer") == _bound(pointer)
                    and type(pos.get("at")) is int):  # fmt: skip
                raise InvalidCursor("the cursor continues another read")
            at = pos["at"]  # type: ignore[assignment]  # checked to be an int just above
        call = _Read(spilled, pointer, at, state, _echo(pointer, self._limits.max_bytes))
        # A pointer resolves as json.loads reads the result: of an object's members with
        # its key, the last (read to the object's end) unless the result repeats none.
        repeats = None if "unique" in named else _Repeats(self, spilled)
        with _from_store():
            info = self._spill.get(spilled)
        if stored is not None and info.size != stored:
            # Its name holds its hash: the same name is the same bytes, never another size.
            raise SpillError(
                f"the spilled result of reference {ref!r} is {info.size} bytes, not the "
                f"{stored} it was stored with: it was cut or changed since"
            )
        if info.media_type != "application/json":
            if tokens:
                raise SpillError("a text result has no JSON Pointer inside it")
            return self._text(call, info.size)
        # Integers beyond 64 bits: the Python backend reads what yajl refuses.
        error: Exception | None = None
        try:
            for backend in self._backends(spilled):
                try:
                    try:
                        return self._json(call, tokens, backend, repeats)
                    except _Nothing:
                        # A cut reported under a key a page or preview had to change names
                        # that key as it showed it: the member it stands for, by its place.
                        places = self._shown_keys(spilled, tokens, backend, repeats)
                        if places is None:
                            raise
                        return self._json(call, places, backend, repeats)
                except _NotForYajl:
                    self._surrogates[spilled] = True  # the next backend is the Python one
                except PARSE_ERRORS as exc:
                    error = exc
        except _Nothing as nothing:
            # The private class only tells this method to look again by the keys shown:
            # the caller gets the one the docs name (logs, `type(e) is SpillError`).
            raise SpillError(str(nothing)) from None
        raise SpillError(f"the spilled result is not valid JSON: {str(error)[:200]}") from error

    def _shown_keys(
        self, name: str, tokens: list[_Step], backend: Any, repeats: _Repeats | None
    ) -> list[_Step] | None:
        """*tokens* with each key the encoder showed changed (`_SHOWN_KEY`) that names no
        member as it is replaced by the place of the member it stands for; None where
        there is none, or no token is such a key."""
        steps = list(tokens)
        changed = False
        depth = 0
        resolved = 0
        while depth < len(steps):
            step = steps[depth]
            shown = _SHOWN_KEY.fullmatch(step) if isinstance(step, str) else None
            if shown is None:
                depth += 1
                continue
            resolved += 1
            if resolved > MAX_SHOWN_KEYS:
                return None  # each costs a parse to its object: a bound, not depth squared
            with contextlib.ExitStack() as owned:
                file = owned.enter_context(self._open(name))
                events = _parse(file, backend)
                try:
                    event, _, found = _locate(events, steps[:depth], "", repeats)
                except _Again as again:
                    # A container found past its place: parse again, straight to it.
                    file = owned.enter_context(self._open(name))
                    events = _parse(file, backend)
                    event, _, found = _locate(events, again.steps, "", None)
                except _Nothing:
                    return None
                place = _member_shown(events, shown) if event == "start_map" else None
            if place is None:
                return None
            steps = [*found, _Member(place), *steps[depth + 1 :]]
            depth = len(found) + 1
            changed = True
        return steps if changed else None

    def _open(self, name: str) -> IO[bytes]:
        return _open_spilled(self._spill, name)

    def _backends(self, name: str) -> tuple[Any, ...]:
        """The parsers to try on *name*, in order. yajl writes a lone high surrogate
        escape (``\\ud800``) as "?", unmarked, and fails inside its C code (a
        `SystemError`, and a corrupted state after) on an integer longer than Python's
        int() converts: the bytes it reads are watched for both (`_Watched`), and a
        result found to hold one is read by the Python backend, whose str keeps a lone
        surrogate for the encoder to mark."""
        if self._surrogates.get(name):
            return (_IJSON_PY,)
        if len(self._surrogates) >= _SURROGATE_MEMO:
            self._surrogates.clear()
        return (ijson, _IJSON_PY)

    # -- the kinds of value ----------------------------------------------------------------

    def _json(
        self, call: _Read, tokens: list[_Step], backend: Any, repeats: _Repeats | None
    ) -> ReadPage:
        kept = self._take((call.name, call.pointer, call.at))
        kind: ReadKind
        if kept is not None and kept.file is None:
            return self._string(call, kept.pending)  # a string value the page before read
        with contextlib.ExitStack() as owned:  # the file closes unless the read is kept
            if kept is not None:
                # The page before stopped here: go on with its parser and the child it left.
                assert kept.file is not None
                assert kept.rest is not None
                file, kind, rest = owned.enter_context(kept.file), kept.kind, kept.rest
                children: Iterator[Any] = chain((kept.pending,), kept.children)
            else:
                file = owned.enter_context(self._open(call.name))
                events = _parse(file, backend)
                try:
                    event, value, steps = _locate(events, tokens, call.pointer, repeats)
                except _Again as again:
                    # The value is a container that finding it read past: parse again,
                    # straight to it by its members' places.
                    file.close()
                    file = owned.enter_context(self._open(call.name))
                    events = _parse(file, backend)
                    event, value, steps = _locate(events, again.steps, call.pointer, None)
                # Opens by the store, not by a method of this reader: a kept read that
                # referred back to it would keep it (and its open files) for the cycle
                # collector once dropped.
                opener = functools.partial(_open_spilled, self._spill)
                rest = _Rest(opener, call.name, backend, self._limits.max_bytes)
                # The items already read are skipped by their events, never built.
                if event == "start_array":
                    kind = "array"
                    ended = not _skip_items(events, call.at)
                    children = iter(()) if ended else _array_items(events, rest, steps, call.at)
                elif event == "start_map":
                    kind = "object"
                    ended = not _skip_members(events, call.at)
                    children = iter(()) if ended else _members(events, rest, steps, call.at)
                elif event == "string":
                    return self._string(call, value)
                else:
                    return self._scalar(call, value)
            rest.kept = rest.room * KEPT_TAIL_PAGES  # each page keeps its own items' tails
            page, left, added, children = self._children(call, children, kind)
            if left is not _NOTHING:
                owned.pop_all()
                read = _Kept(file, children, left, kind, rest)
                self._keep((call.name, call.pointer, call.at + added), read)
        return page

    def _take(self, key: tuple[str, str, int]) -> _Kept | None:
        with self._lock:
            read = self._kept.pop(key, None)
        if read is not None and read.pid != os.getpid():
            return None  # a file inherited through fork shares its offset: never read it
        return read

    def _keep(self, key: tuple[str, str, int], read: _Kept) -> None:
        if read.chars > KEPT_CHARS:
            read.close()
            return
        with self._lock:
            stale = [self._kept.pop(key)] if key in self._kept else []
            self._kept[key] = read
            chars = sum(kept.chars for kept in self._kept.values())
            while len(self._kept) > KEPT_READS or chars > KEPT_CHARS:
                stale.append(self._kept.popitem(last=False)[1])
                chars -= stale[-1].chars
        for old in stale:
            old.close()

    def _children(
        self, call: _Read, children: Iterator[Any], kind: ReadKind
    ) -> tuple[ReadPage, Any, int, Iterator[Any]]:
        """The page of *children*, the child that did not fit (else `_NOTHING`), how many
        did, and the children after that one.

        An object's member whose key the page does not show as it is (cut, left out, or
        a lone surrogate replaced) could not be named by a pointer: the page is made
        again with the member's places added (`_with_places`), by which it is read.
        """
        limits = self._limits.replace(max_bytes=self._limits.max_bytes - _extra(call.echo, kind))
        page, taken, left, token, children = self._listed(call, limits, children, kind)
        data = page.to_json()
        if kind == "object" and page.oversized and "key_pointer" in taken[0]:
            data, page, taken, left, token, children = self._placed(
                call, limits, page, taken, left=left, children=children
            )
        tail = b',"pointer":' + call.echo + b',"kind":"' + kind.encode() + b'"}'
        data = data[:-1] + tail
        return ReadPage(data, kind, token is None, token), left, len(taken), children

    def _listed(
        self,
        call: _Read,
        limits: Limits,
        children: Iterator[Any],
        kind: ReadKind,
    ) -> tuple[Page, list[Any], Any, str | None, Iterator[Any]]:
        """`_fill`, an object's members whose keys do not show given their places, and the
        children after the one that did not fit."""
        page, taken, left, token = self._fill(call, limits, children)
        # Each round adds places to a member of the page that has none: a few at most.
        while kind == "object" and (hidden := _keys_not_shown(page, taken)):
            redo = [_with_places(m, call.pointer, call.at + i) if i in hidden else m
                    for i, m in enumerate(taken)]  # fmt: skip
            children = chain(redo, () if left is _NOTHING else (left,), children)
            page, taken, left, token = self._fill(call, limits, children)
        return page, taken, left, token, children

    def _placed(
        self,
        call: _Read,
        limits: Limits,
        page: Page,
        taken: list[Any],
        *,
        left: Any,
        children: Iterator[Any],
    ) -> tuple[bytes, Page, list[Any], Any, str | None, Iterator[Any]]:
        """The page of an object whose first member, with places, is cut (`_fill`'s page
        *page* of *taken*), made to show that member's pointers whole wherever a page can:
        its bytes, and what `_fill` and `_listed` return for it."""
        token = page.next_cursor
        placed = _placed_page(page, taken[0], limits.max_bytes)
        if placed is None and len(taken) > 1:
            # The members after the cut one push its pointers out: they start the next
            # page instead, its cursor just past the cut one, made again alone.
            children = chain(taken, () if left is _NOTHING else (left,), children)
            page, taken, left, token = self._fill(call, limits, children, most=1)
            placed = _placed_page(page, taken[0], limits.max_bytes)
        if placed is None and left is not _NOTHING:
            # The cursor to the members after it pushes them out: where those members
            # all fit beside the pointers and their reports, the page ends the object.
            # The builder is given the member as the least it shows, whole (it keeps
            # room for a cursor, which a page that ends the object leaves for reports).
            member = taken[0]
            least = {k: member[k] for k in ("key_pointer", "value_pointer")} | _LEFT_OUT
            rest = chain((least, left), children)
            ended, ends, after, token, children = self._listed(call, limits, rest, "object")
            if token is None:
                placed = _placed_page(ended, member, limits.max_bytes, least=True)
            if placed is not None:
                return placed, ended, [member, *ends[1:]], after, token, children
            # Else the page of the member alone, and its cursor to the next member.
            pending = [*ends[1:], *(() if after is _NOTHING else (after,))]
            left, children = pending[0], chain(pending[1:], children)
            token = page.next_cursor
        return page.to_json() if placed is None else placed, page, taken, left, token, children

    def _fill(
        self, call: _Read, limits: Limits, children: Iterator[Any], most: int | None = None
    ) -> tuple[Page, list[Any], Any, str | None]:
        """A page of as many of *children* as fit (at most *most*), those children, the one
        that did not (else `_NOTHING`), and the cursor to the next page (None: the read
        ends)."""
        builder = PageBuilder(limits)
        taken: list[Any] = []
        left: Any = _NOTHING
        for child in children:
            if len(taken) == most or not builder.add(child):
                left = child
                break
            taken.append(child)
        token = None if left is _NOTHING else self._continue(call, call.at + len(taken))
        return builder.finish(complete=token is None, next_cursor=token), taken, left, token

    def _string(self, call: _Read, value: str) -> ReadPage:
        budget = self._limits.max_bytes - _STRING_ENVELOPE - _extra(call.echo, "string")
        rest = len(value) - call.at
        if rest <= budget:
            shown = encode(value[call.at :], max_bytes=budget)
        else:
            # No more than *budget* characters can show: copy only those, and say how
            # many the whole rest holds.
            shown = encode(
                Clipped(value[call.at : call.at + budget], rest, "chars"), max_bytes=budget
            )
        left = sum(t.omitted or 0 for t in shown.truncations if t.kind == "string")
        token = None
        if left:
            at = len(value) - left
            token = self._continue(call, at)
            self._keep((call.name, call.pointer, at), _Kept(None, iter(()), value, "string"))
        # At most two reports (the cut, lone surrogates replaced): the envelope's room
        # holds them with a 56-character cursor (283 of _STRING_ENVELOPE's 300 bytes).
        reports = [{**t.to_dict(), "path": "/items/0" + t.path} for t in shown.truncations]
        return self._finish(call, [orjson.Fragment(shown.data)], "string", token, reports)

    def _scalar(self, call: _Read, value: Any) -> ReadPage:
        # Through the page builder, as a list's items go: a number as written (ijson reads
        # it as a Decimal or an int), one the encoder cannot write as its marker, which
        # the page reports.
        return self._children(call, iter((value,)), "value")[0]

    def _text(self, call: _Read, size: int) -> ReadPage:
        """A page of the text result *call* reads, of *size* bytes (as checked): a file
        cut after the check ends this page short of *size*, never complete."""
        budget = self._limits.max_bytes - _STRING_ENVELOPE
        with _from_store():
            raw = self._spill.read(call.name, call.at, budget + 1)
        raw = raw[: max(0, size - call.at)]  # bytes a file grew by since are none of it
        shown, used, bad = _text_page(raw, budget, call.at + len(raw) >= size)
        end = call.at + used
        more = end < size
        token = self._continue(call, end) if more else None
        return self._finish(call, [shown], "text", token, [_not_utf8_report(bad)] if bad else [])

    def _continue(self, call: _Read, at: int) -> str:
        bound = _bound(call.pointer)
        return self._cursors.mint(call.state, {"ref": call.name, "pointer": bound, "at": at})

    def _finish(
        self,
        call: _Read,
        items: list[Any],
        kind: ReadKind,
        token: str | None,
        reports: list[dict[str, Any]],
    ) -> ReadPage:
        page: dict[str, Any] = {"items": items, "complete": token is None, "next_cursor": token}
        if reports:
            page["truncated"] = reports
        page["pointer"] = orjson.Fragment(call.echo)
        page["kind"] = kind
        data = orjson.dumps(page)
        if len(data) > self._limits.max_bytes:  # pragma: no cover - sized above
            raise LimitError("max_bytes", self._limits.max_bytes, "a read page did not fit")
        return ReadPage(data, kind, token is None, token)


_NOTHING: Final = object()


@contextlib.contextmanager
def _from_store() -> Iterator[None]:
    """What the spill store raises, said without the spilled file's name, which its own
    message holds and which a reference stands for so that the model never sees it. The
    store's error stays the cause, for the operator's logs."""
    try:
        yield
    except SpillError as exc:
        raise SpillError(
            "the spilled result cannot be read (expired, evicted, never stored, "
            "or the store failed)"
        ) from exc


def _open_spilled(spill: SpillBackend, name: str) -> IO[bytes]:
    with _from_store():
        return spill.open(name)


def _close_kept(kept: OrderedDict[tuple[str, str, int], _Kept], lock: threading.Lock) -> None:
    """Close the reads *kept* (a reader's, under its *lock*)."""
    with lock:
        reads = list(kept.values())
        kept.clear()
    for read in reads:
        read.close()


class _Kept:
    """A read kept for its next page: the open file, its parser and the child left over;
    or, for a string value (no file), the string."""

    __slots__ = ("chars", "children", "file", "kind", "pending", "pid", "rest")

    def __init__(
        self,
        file: IO[bytes] | None,
        children: Iterator[Any],
        pending: Any,
        kind: ReadKind,
        rest: _Rest | None = None,
    ) -> None:
        self.file = file
        self.rest = rest
        self.children = children
        self.pending = pending
        self.kind = kind
        self.chars = len(pending) if file is None else 0
        self.pid = os.getpid()

    def close(self) -> None:
        if self.file is not None:
            self.file.close()


class _Read:
    """One read: the spilled result, the pointer, where it starts, the operation's state,
    and the pointer as the envelope echoes it (JSON)."""

    __slots__ = ("at", "echo", "name", "pointer", "state")

    def __init__(self, name: str, pointer: str, at: int, state: Any, echo: bytes) -> None:
        self.name = name
        self.pointer = pointer
        self.at = at
        self.state = state
        self.echo = echo


def _keys_not_shown(page: Page, members: list[dict[str, Any]]) -> set[int]:
    """Which of *members*, an object's page, show their key not as it is and have no
    places yet. A key shown as it is has no report (a cut, a left-out member, a lone
    surrogate replaced)."""
    reported = {t.path.split("/", 3)[2] for t in page.truncations if t.path.startswith("/items/")}
    suspects = [i for i, m in enumerate(members) if str(i) in reported and "key_pointer" not in m]
    if not suspects:
        return set()
    shown = orjson.loads(page.data)["items"]
    return {i for i in suspects if not _shows_key(shown[i], members[i]["key"])}


def _shows_key(shown: Any, key: str) -> bool:
    return isinstance(shown, dict) and shown.get("key") == key


def _with_places(member: dict[str, Any], pointer: str, at: int) -> dict[str, Any]:
    """*member*, an object's member at place *at* as a page lists it, with the pointers
    that read its key and its value by their place (`_Member`)."""
    # The pointers first: where the page cannot show every member, it shows the first.
    return {
        "key_pointer": f"{pointer}/~k{at}",
        "value_pointer": f"{pointer}/~v{at}",
        "key": member["key"],
        "value": member["value"],
    }


def _shows_pointers(shown: Any, member: dict[str, Any]) -> bool:
    """Whether *shown*, a page's item for *member* (a member with places), holds both
    its pointers whole."""
    return isinstance(shown, dict) and all(
        shown.get(k) == member[k] for k in ("key_pointer", "value_pointer")
    )


#: Fits of a member's key and value beside its whole pointers (see `_placed_page`).
_PLACED_FITS: Final = 8
_MARKERS: Final = Markers("text")
#: How a page of `PageBuilder` opens, and the parser that finds where its items end.
_ITEMS_FRAME: Final = '{"items":'
_ITEMS: Final = json.JSONDecoder()
#: A placed member's key and value left out, marked, and the page's report of that.
_LEFT_OUT: Final[dict[str, str]] = orjson.loads(b"{" + _MARKERS.keys(2, "…") + b"}")
_LEFT_OUT_REPORT: Final = {"path": "/items/0/…", "kind": "keys", "omitted": 2, "unit": "keys"}
_ITEM_CUT: Final = Truncation("/items/0", "item", None, "bytes").to_dict()
_CUT: Final = {"index": 0, "encoded_bytes": None, "outcome": "truncated"}


def _placed_page(
    page: Page, member: dict[str, Any], max_bytes: int, *, least: bool = False
) -> bytes | None:
    """*page*, whose first item is *member* (a member with places) cut (or, *least*, the
    member's pointers and its key and value left out, whole), with both pointers shown
    whole where *max_bytes* holds them beside the items after it; None where it does
    not.

    The page builder cuts the member as any object, sharing the room among its four
    members (the pointers cut as soon as the key is long) and searching the room in a
    few rounds (what the reports add is not monotone in it): a page showed the key
    pointer and not the value pointer, or neither, where both fit. Here the pointers are
    kept whole, and the key and value are cut into what is left, the room taken off by
    what each fit overflows by; at the least, both are left out, marked. The items after
    it keep their bytes (a number as written, which a parse would change) and reports.
    """
    text = page.data.decode()
    shown, end = _ITEMS.raw_decode(text, len(_ITEMS_FRAME) + 1)
    if not least and _shows_pointers(shown, member):
        return page.data
    # "," and the items after the first, as the page wrote them.
    after = text[end : _ITEMS.raw_decode(text, len(_ITEMS_FRAME))[1] - 1].encode()
    pointers = {"key_pointer": member["key_pointer"], "value_pointer": member["value_pointer"]}
    head = b"[" + orjson.dumps(pointers)[:-1] + b","
    rest = {"key": member["key"], "value": member["value"]}
    item = _ITEM_CUT
    others = [
        t.to_dict()
        for t in page.truncations
        if t.path != "/items/0" and not t.path.startswith("/items/0/")
    ]
    envelope: dict[str, Any] = {
        "items": orjson.Fragment(head + b"}" + after + b"]"),
        "complete": page.complete,
        "next_cursor": page.next_cursor,
        "truncated": [item, *others],
        "oversized": [_CUT],
    }
    if page.incomplete_reason is not None:
        envelope["incomplete_reason"] = page.incomplete_reason
    room = max_bytes - len(orjson.dumps(envelope)) + 1
    for _ in range(_PLACED_FITS):
        if room < MIN_BYTES:
            break
        fitted = encode(rest, max_bytes=room)
        envelope["items"] = orjson.Fragment(head + fitted.data[1:] + after + b"]")
        reports = [{**t.to_dict(), "path": "/items/0" + t.path} for t in fitted.truncations]
        envelope["truncated"] = [*reports, item, *others]
        data = orjson.dumps(envelope)
        if len(data) <= max_bytes:
            return data
        room -= len(data) - max_bytes
    # Neither the key nor the value: the pointers read both.
    envelope["items"] = orjson.Fragment(head + _MARKERS.keys(2, "…") + b"}" + after + b"]")
    envelope["truncated"] = [_LEFT_OUT_REPORT, item, *others]
    data = orjson.dumps(envelope)
    # Else the pointers alone pass the page (beside the items after them).
    return data if len(data) <= max_bytes else None


def read_result(
    ref: str,
    pointer: str = "",
    cursor: str | None = None,
    *,
    reader: ResultReader,
    principal: str,
) -> ReadPage:
    """One call: ``reader.read(ref, pointer, cursor, principal=principal)``."""
    if not isinstance(reader, ResultReader):
        raise TypeError(f"reader must be a ResultReader, not {type(reader).__name__}")
    return reader.read(ref, pointer, cursor, principal=principal)


#: Spilled results whose surrogate scan a reader remembers (cleared whole past it).
_SURROGATE_MEMO: Final = 4096
#: A ``\\uD800``-``\\uDFFF`` escape: yajl (ijson's C backend) writes a lone high
#: surrogate as "?" and raises UnicodeDecodeError for a lone low one.
SURROGATE_ESCAPE: Final = re.compile(rb"\\u[dD][89abcdefABCDEF]")


class _NotForYajl(Exception):
    """yajl was about to read what it mishandles: a surrogate escape or a long integer."""


_QUOTE: Final = 0x22  # '"'
_MINUS: Final = 0x2D  # "-"
_ZERO: Final = 0x30  # "0"
_NINE: Final = 0x39  # "9"
_SPACE: Final = 0x20  # " "
#: Digits map to "0", every other byte to " " (a digit run is a run of zeros).
_DIGITS: Final = bytes(_ZERO if _ZERO <= c <= _NINE else _SPACE for c in range(256))


def long_digit_run(data: bytes) -> bool:
    """Whether *data* holds a run of more digits than Python's int() converts
    (``sys.get_int_max_str_digits()``), which yajl must not read. Digits inside strings
    count too: such a result is merely read by the Python backend."""
    limit = sys.get_int_max_str_digits()
    return bool(limit) and b"0" * (limit + 1) in data.translate(_DIGITS)


class LongIntsAsExponents:
    """JSON bytes, fed in pieces, with every integer literal too long for ``int()`` given
    an ``E0`` exponent.

    Both ijson backends convert an integer with ``int()``, which refuses more digits than
    ``sys.get_int_max_str_digits()`` (4,300 by default). A number with an exponent they
    read as a ``Decimal``, which has no such limit and keeps every digit: the integer
    becomes the exact ``Decimal`` that ``load_json`` makes of it, which the encoder then
    marks. Strings pass as they are, digits and escapes included, wherever a piece
    ends. Linear: one regex step per string and per digit run, a copy only where an
    exponent goes in.
    """

    __slots__ = ("_after", "_escaped", "_in_string", "_limit", "_run")

    def __init__(self) -> None:
        self._limit = sys.get_int_max_str_digits()
        self._in_string = False
        self._escaped = False  # the last piece ended on a backslash inside a string
        self._run = -1  # digits of an integer the last piece ended inside, else -1
        self._after = b"  "  # the last two bytes fed: what stands before the next piece

    def feed(self, data: bytes) -> bytes:
        """*data*, the next piece, with the exponents that go in it."""
        if not self._limit:
            return data  # no limit: int() reads any integer
        out: list[bytes] = []
        i, copied, n = 0, 0, len(data)
        while i < n:
            if self._in_string:
                if self._escaped:
                    self._escaped, i = False, i + 1
                    continue
                j = _STRING_REST.match(data, i).end()  # type: ignore[union-attr]  # matches ""
                if j == n:
                    break
                if data[j] == _QUOTE:  # the closing quote
                    self._in_string, i = False, j + 1
                else:  # a backslash, the piece's last byte
                    self._escaped, i = True, n
                continue
            if self._run >= 0:  # inside an integer's digits
                j = _DIGIT_RUN.match(data, i).end()  # type: ignore[union-attr]  # matches ""
                self._run += j - i
                if j == n:
                    break
                if self._run > self._limit and data[j] not in b".eE":
                    out += (data[copied:j], b"E0")
                    copied = j
                self._run, i = -1, j
                continue
            # Everything that needs nothing, in one regex call: whole strings, digit runs
            # the limit allows, the rest. It stops at a string the piece does not close
            # or a run past the limit.
            j = _uneventful(self._limit).match(data, i).end()  # type: ignore[union-attr]
            if j == n:
                # Digits that end the piece may go on in the next one: an integer's are
                # counted on there.
                k = max(i, len(data.rstrip(b"0123456789")))
                if k < n and self._starts_integer(data, k):
                    self._run = n - k
                break
            if data[j] == _QUOTE:  # a string the piece does not close
                self._in_string, i = True, j + 1
            elif self._starts_integer(data, j):
                self._run, i = 0, j
            else:  # a long fraction or exponent: no exponent goes in
                i = _DIGIT_RUN.match(data, j).end()  # type: ignore[union-attr]
        self._after = (self._after + data[-2:])[-2:]
        if not out:
            return data
        out.append(data[copied:])
        return b"".join(out)

    def end(self) -> bytes:
        """What goes after the last piece: the exponent of an integer that ends the text."""
        if self._run > self._limit and not self._in_string:
            self._run = -1
            return b"E0"
        return b""

    def _starts_integer(self, data: bytes, at: int) -> bool:
        # Digits start an integer part unless a digit, ".", "e", "E" or "+" stands before
        # them, or a "-" after an "e" (an exponent's sign).
        before = (self._after + data[max(0, at - 2) : at])[-2:]
        if before[1] == _MINUS:
            return before[0] not in b"eE"
        return before[1] not in b"0123456789.eE+"


#: The rest of a JSON string's text up to its closing quote (or a final backslash).
_STRING_BODY: Final = rb'[^"\\]*+(?:\\.[^"\\]*+)*+'
_STRING_REST: Final = re.compile(_STRING_BODY, re.DOTALL)
_DIGIT_RUN: Final = re.compile(rb"[0-9]*+")
#: JSON text outside strings, whole strings included, up to a string it does not close.
_OUTSIDE_STRINGS: Final = re.compile(rb'(?:[^"]++|"%s")*+' % _STRING_BODY, re.DOTALL)
#: In reversed bytes: a quote no backslash stands before.
_UNESCAPED_QUOTE: Final = re.compile(rb'"(?!\\)')


@functools.lru_cache(maxsize=4)
def _uneventful(limit: int) -> re.Pattern[bytes]:
    # Possessive throughout: each byte is looked at a bounded number of times.
    return re.compile(
        rb'(?:[^"0-9]++|"%s"|[0-9]{1,%d}+(?![0-9]))*+' % (_STRING_BODY, limit),
        re.DOTALL,
    )


class _OpenString:
    """Where the JSON text fed so far stands: inside a string (and how many of its bytes
    were fed) or not. A few C scans a piece count its quotes; a regex reads a piece only
    where a quote follows two backslashes (escaped or not, as the run before decides)."""

    __slots__ = ("_escaped", "_fed", "_start")

    def __init__(self) -> None:
        self._fed = 0
        self._start = -1  # where the open string's text starts (in bytes fed), else -1
        self._escaped = False  # the text fed ends on a backslash inside a string

    @property
    def open(self) -> int:
        """The bytes fed of the string the text ends inside; 0 outside a string."""
        return self._fed - self._start if self._start >= 0 else 0

    def feed(self, data: bytes) -> None:
        n = len(data)
        base = self._fed
        self._fed += n
        i = 0
        if self._escaped and n:
            self._escaped, i = False, 1  # the byte a backslash before it escapes
        if data.find(b'\\\\"', i) >= 0:
            self._scan(data, i, base)  # a quote after two backslashes: the regex decides
            return
        # Without that, a quote after a backslash is escaped, and every other one starts
        # or ends a string: their count says where the piece ends.
        escaped = data.count(b'\\"', i)
        quotes = data.count(b'"', i) - escaped
        if (self._start >= 0) == bool(quotes & 1):
            self._start = -1
            return
        last = i - 1  # the string's text starts after the last quote that is not escaped
        if quotes and not escaped:
            last = data.rfind(b'"', i)
        elif quotes:
            back = _UNESCAPED_QUOTE.search(data[::-1], 0, n - i)
            assert back is not None  # counted above
            last = n - 1 - back.start()
        if quotes:
            self._start = base + last + 1
        backslashes = n - len(data.rstrip(b"\\"))
        self._escaped = bool(min(backslashes, n - last - 1) & 1)

    def _scan(self, data: bytes, i: int, base: int) -> None:
        n = len(data)
        while i < n:
            if self._start < 0:
                i = _OUTSIDE_STRINGS.match(data, i).end()  # type: ignore[union-attr]  # matches ""
                if i == n:
                    return
                i += 1  # a string the piece does not close
                self._start = base + i
            i = _STRING_REST.match(data, i).end()  # type: ignore[union-attr]  # matches ""
            if i == n:
                return
            if data[i] == _QUOTE:
                self._start, i = -1, i + 1
            else:  # a backslash, the piece's last byte
                self._escaped = True
                return


#: While a string is open, a read brings at least this part of its bytes so far.
_GROWTH: Final = 4


class _Feed:
    """A spilled file as an ijson backend reads it, in pieces of the size it asks for,
    except inside a long string.

    Both backends keep a string that one read does not close and scan it again from its
    first byte with each read that follows: fed 64 KiB at a time, a string of L bytes
    costs L * L / 128 KiB steps (12 s for 64 MB). So while a string is open, a read
    brings at least a quarter (`_GROWTH`) of the bytes the string has had so far: the
    string grows by a quarter a read, and costs about 5 * L steps. A larger share would
    save steps but make the last read, which the parser holds while it makes the string,
    larger (up to about a fifth of the string). The longer read ends at most a piece after
    the string's closing quote, so the events after it come in pieces as usual (ijson's
    C backend lists a read's events before it yields them)."""

    __slots__ = ("_file", "_string")

    def __init__(self, file: IO[bytes]) -> None:
        self._file = file
        self._string = _OpenString()

    def read(self, size: int = -1) -> bytes:
        if size == 0:  # ijson reads 0 bytes to learn the file's type
            return b""
        want = self._string.open // _GROWTH
        pieces: list[bytes] = []
        got = 0
        while True:
            piece = self._file.read(size)
            if not piece:
                break
            piece = self._piece(piece)
            self._string.feed(piece)
            pieces.append(piece)
            got += len(piece)
            if size < 0 or got >= want or not self._string.open:
                break
        if not pieces:
            return self._end()
        return pieces[0] if len(pieces) == 1 else b"".join(pieces)

    def _piece(self, data: bytes) -> bytes:
        return data

    def _end(self) -> bytes:
        return b""


class _Exponents(_Feed):
    """A spilled file as the Python backend reads it: long integers given exponents."""

    __slots__ = ("_done", "_fix")

    def __init__(self, file: IO[bytes]) -> None:
        super().__init__(file)
        self._fix = LongIntsAsExponents()
        self._done = False

    def read(self, size: int = -1) -> bytes:
        if self._done:
            return b""
        return super().read(size)

    def _piece(self, data: bytes) -> bytes:
        return self._fix.feed(data)

    def _end(self) -> bytes:
        self._done = True
        return self._fix.end()


class _Watched(_Feed):
    """A spilled file as yajl reads it, stopping it before what it mishandles."""

    __slots__ = ("_run", "_tail")

    def __init__(self, file: IO[bytes]) -> None:
        super().__init__(file)
        self._tail = b""
        self._run = 0  # the digits the bytes read so far end with

    def _piece(self, data: bytes) -> bytes:
        # An escape may straddle two reads: the last 3 bytes are searched again.
        if SURROGATE_ESCAPE.search(self._tail + data[:8]) or SURROGATE_ESCAPE.search(data):
            raise _NotForYajl
        self._tail = data[-3:]
        digits = data.translate(_DIGITS)
        lead = len(digits) - len(digits.lstrip(b"0"))
        limit = sys.get_int_max_str_digits()
        if limit and (self._run + lead > limit or long_digit_run(data)):
            raise _NotForYajl
        self._run = self._run + lead if lead == len(data) else len(data) - len(digits.rstrip(b"0"))
        return data


def _not_utf8_report(count: int) -> dict[str, Any]:
    """The side-band report of a text page's not-UTF-8 markers: *count* bytes in all."""
    return {"path": "/items/0", "kind": "unencodable", "omitted": count, "unit": "bytes"}


def _report_cost(count: int) -> int:
    # What a text page's report of *count* bad bytes adds to its envelope.
    return len(b',"truncated":[]') + len(orjson.dumps(_not_utf8_report(count))) if count else 0


def _text_page(raw: bytes, budget: int, ends: bool) -> tuple[str, int, int]:
    """The text of a page of at most *budget* JSON bytes from *raw*, the bytes it covers,
    and how many of them are not UTF-8.

    Bytes that are not UTF-8 (a text result may be binary) are shown in place as a marker
    with their hex, ``…[not UTF-8: 2 bytes, hex fffe]``, and reading goes on after them:
    a page never stops at a bad byte, so following cursors always ends and reaches every
    byte. The page reports them side-band too, in one report of the bytes in all, which
    *budget* pays for. *ends* says *raw* runs to the end of the result (an incomplete
    character there is bad bytes, not a character cut by the read).
    """
    pieces: list[str] = []
    bad_bytes = 0
    pos = 0
    room = budget
    while pos < len(raw):
        # At most 6 bytes of JSON for one byte of text: decode only what can surely be
        # shown, then charge what it really costs and take more with the room left (a
        # page of plain text charged 6 bytes a byte showed a sixth of its budget); the
        # first piece takes at least one character (4 bytes), whatever the room.
        chunk = raw[pos : pos + max(room // 6, 0 if pieces else 4)]
        if not chunk:
            break
        try:
            text, used = codecs.utf_8_decode(chunk, "strict", ends and pos + len(chunk) == len(raw))
        except UnicodeDecodeError as exc:
            text, used = chunk[: exc.start].decode("utf-8"), exc.start
        cost = len(orjson.dumps(text)) - 2  # its quotes are the envelope's
        if not used:
            bad = _not_utf8(raw[pos:], ends, max(1, (room - 140) // 2))
            if not bad:
                break  # a character the read cut: the next page starts with it
            text = f"…[not UTF-8: {bad} bytes, hex {raw[pos : pos + bad].hex()}]"
            report = _report_cost(bad_bytes + bad) - _report_cost(bad_bytes)
            used, cost = bad, len(text.encode()) + report
            if pieces and cost > room:
                break
            bad_bytes += bad
        pieces.append(text)
        pos += used
        room -= cost
    return "".join(pieces), pos, bad_bytes


#: The longest UTF-8 character, in bytes.
_UTF8_MAX_BYTES: Final = 4


def _not_utf8(raw: bytes, ends: bool, most: int) -> int:
    """How many bytes at the start of *raw* are not UTF-8, at most *most*."""
    bad = 0
    while bad < min(len(raw), most):
        window = raw[bad : bad + _UTF8_MAX_BYTES]
        try:
            codecs.utf_8_decode(window, "strict", ends or len(window) == _UTF8_MAX_BYTES)
        except UnicodeDecodeError as exc:
            if exc.start:
                break  # a character starts here
            bad += exc.end
            continue
        break  # a character starts here (or the read cut it: the next page has it)
    return bad


def _scope(principal: str) -> Scope:
    if not isinstance(principal, str):
        raise TypeError(f"principal must be a str, not {type(principal).__name__}")
    return Scope(principal, _SCOPE_QUERY)


#: The most characters of a caller's input (a pointer) that an error quotes, the rest
#: counted: an error reaches the model as it is, whatever the page's budget.
QUOTED_CHARS: Final = 200


def _quoted(text: str) -> str:
    """*text* as an error quotes it: its repr, cut after `QUOTED_CHARS` characters."""
    if len(text) <= QUOTED_CHARS:
        return repr(text)
    return f"{text[:QUOTED_CHARS]!r}…[{len(text) - QUOTED_CHARS} more chars]"


def _extra(echo: bytes, kind: str) -> int:
    # What the "pointer" and "kind" members add to a page's envelope.
    return len(b',"pointer":,"kind":""') + len(echo) + len(kind)


#: The longest pointer a continuation cursor holds as it is; a longer one, its digest.
BOUND_POINTER_CHARS: Final = 256


def _bound(pointer: str) -> str:
    """*pointer* as a continuation cursor binds it. A cursor's position has a bounded size
    (`MAX_POSITION_BYTES` encoded) and a pointer has none: a pointer longer than
    `BOUND_POINTER_CHARS` is bound by its SHA-256 (no pointer starts with ``#``), so a
    value under a key of any length reads in pages."""
    if len(pointer) <= BOUND_POINTER_CHARS:
        return pointer
    return "#sha256:" + hashlib.sha256(pointer.encode("utf-8", "surrogatepass")).hexdigest()


def _echo(pointer: str, max_bytes: int) -> bytes:
    """*pointer* as a page's envelope echoes it: whole when it takes at most a quarter of
    the page, else cut and marked (``…[truncated: N more chars]``), so a value under a
    long key (a URL, a sentence) still has room for its page. The cursor binds the whole
    pointer (`_bound`); only the echo is cut."""
    return encode(pointer, max_bytes=max(MIN_BYTES, max_bytes // 4)).data


# A string page needs MIN_BYTES for the cut string beside its envelope and the pointer's
# echo, which `_echo` lets take a quarter of the page: max_bytes - max_bytes // 4 >= this.
_STRING_PAGE_NEED: Final = _STRING_ENVELOPE + _extra(b"", "string") + MIN_BYTES
#: The smallest ``max_bytes`` a `ResultReader` takes (521): the least solution of the
#: string page's need above (``ceil(3m / 4) >= 391``). A list's or an object's page needs
#: less (the page builder's least, 342 bytes, beside the same echo).
LEAST_READ_BYTES: Final = 4 * (_STRING_PAGE_NEED - 1) // 3 + 1


class _Member(NamedTuple):
    """A step to an object's member by its place, from 0, counted as written (repeated
    keys included): to its value, or with *key* to its key, read as a string. A pointer
    spells them ``~v3`` and ``~k3``: ``~`` before any character but ``0`` or ``1`` is
    no RFC 6901 escape, so no pointer to a key is read this way."""

    place: int
    key: bool = False


#: A step of a path: an object's key (or an array's index, as RFC 6901 spells it), or a
#: member by its place.
_Step = str | _Member


class _Link(NamedTuple):
    """The path one *step* below the path *up*: made in one step where a list would copy
    every step above it, which, for each level of a value built deep under a deep
    pointer, cost the depth times the pointer's."""

    up: _Path
    step: _Step


#: The steps to a value as a page builds it: the read's own steps, a link per level below.
_Path = list[_Step] | _Link


def _steps(path: _Path) -> list[_Step]:
    """*path*'s steps, in order."""
    below: list[_Step] = []
    while isinstance(path, _Link):
        below.append(path.step)
        path = path.up
    below.reverse()
    return [*path, *below]


def _tokens(pointer: object) -> list[_Step]:
    if not isinstance(pointer, str) or (pointer and not pointer.startswith("/")):
        raise LimitError("pointer", str(pointer)[:80], "must be a JSON Pointer: '' or '/a/0'")
    if not pointer:
        return []
    steps: list[_Step] = []
    for token in pointer[1:].split("/"):
        place = _PLACE.fullmatch(token)
        if place is not None:
            steps.append(_Member(int(place[2]), place[1] == "k"))
        else:
            steps.append(token.replace("~1", "/").replace("~0", "~"))
    return steps


#: RFC 6901's array-index: ASCII digits, no leading zero (str.isdigit takes "²" and "١",
#: which int() refuses or reads as 1); 19 digits are more than any array holds.
_ARRAY_INDEX: Final = re.compile(r"0|[1-9][0-9]{0,18}")
#: A member by its place: ``~v`` (its value) or ``~k`` (its key), then an index.
_PLACE: Final = re.compile(r"~([vk])(0|[1-9][0-9]{0,18})")
#: The most keys an object read to its end has tracked for `_Repeats` (past them, a
#: pointer through that object reads it to its end each time).
REPEATS_TRACKED: Final = 4096
#: Objects whose repeated keys a reader remembers (cleared whole past it).
_REPEATS_MEMO: Final = 4096


class _Again(Exception):
    """The value at a pointer is a container that finding it read past: *steps* lead
    back to it by places, with no key left to look for."""

    def __init__(self, steps: list[_Step]) -> None:
        super().__init__()
        self.steps = steps


#: A key's fingerprint: its hash and length, a few bytes whatever the key's length.
#: Two keys may share one, so a match only says "maybe the same key".
_Print = tuple[int, int]


def _print(key: str) -> _Print:
    return hash(key), len(key)


class _Repeats:
    """What a reader remembers of one spilled result's objects read to their end: the
    fingerprints of the keys each repeats, by a digest of the steps to the object
    (`_Prefixes`). A pointer through an object known not to repeat its key takes the
    first member with it, as a result with unique keys does, without reading the object
    on. Only fingerprints are kept, so that what is remembered is bounded in bytes, not
    only in entries, however long the keys and however deep the object: a key sharing
    its fingerprint with a repeated one is taken as repeated, which costs a read to the
    object's end and never a wrong member."""

    __slots__ = ("name", "reader")

    def __init__(self, reader: ResultReader, name: str) -> None:
        self.reader = reader
        self.name = name

    def get(self, place: bytes) -> frozenset[_Print] | None:
        return self.reader._repeats.get((self.name, place))

    def put(self, place: bytes, repeated: frozenset[_Print]) -> None:
        memo = self.reader._repeats
        with self.reader._lock:
            if len(memo) >= _REPEATS_MEMO:
                memo.clear()
            memo[self.name, place] = repeated


class _Prefixes:
    """Digests of the prefixes of *steps*, each made from the one before and its last
    step: the objects on a pointer's way are told apart in a few bytes each, and all of
    them cost one pass over the pointer. (Keyed by the steps themselves, a pointer N deep
    built and kept N tuples of up to N steps: quadratic in time and memory.)"""

    __slots__ = ("digests", "steps")

    def __init__(self, steps: list[_Step]) -> None:
        self.steps = steps
        self.digests = [b""]

    def __getitem__(self, depth: int) -> bytes:
        digests = self.digests
        while len(digests) <= depth:
            step = self.steps[len(digests) - 1]
            # Each step follows a fixed-size digest and ends its input: unambiguous.
            if isinstance(step, _Member):
                data = b"%c%d" % (107 if step.key else 118, step.place)
            else:
                data = b"/" + step.encode("utf-8", "surrogatepass")
            digests.append(hashlib.blake2b(digests[-1] + data, digest_size=16).digest())
        return digests[depth]


def _locate(
    events: Iterator[Any], steps: list[_Step], pointer: str, repeats: _Repeats | None
) -> tuple[str, Any, list[_Step]]:
    """Advance *events* to the first event of the value at *steps*: its event and value,
    and steps that find it again with no key looked for past its first member.

    With *repeats* (a result that may repeat a key) a key is looked for as json.loads
    keeps it: of the members with that key, the last, so the object is read to its end
    (`_scan`) unless *repeats* knows it holds the key once; a scalar, a string or a key
    found that way was read on the way, and a container raises `_Again`, to be parsed
    again by the steps found. Without, the first member with the key.
    """
    depth = 0  # how many of *steps* the current container matches
    prefixes = None if repeats is None else _Prefixes(steps)
    for event, value in events:
        if depth == len(steps):
            if event in ("end_array", "end_map"):
                break  # the array ended: the index is one past its last item
            return event, value, steps
        step = steps[depth]
        if event == "start_map":
            if isinstance(step, _Member):
                if not _skip_members(events, step.place):
                    break
                met, key = next(events)
                if met == "end_map":
                    break
                if step.key:
                    if depth + 1 < len(steps):
                        break  # a key is a string: nothing stands inside it
                    return "string", key, steps
                depth += 1
                continue
            if repeats is not None:
                assert prefixes is not None
                known = repeats.get(prefixes[depth])
                if known is None or _print(step) in known:
                    found = _scan(events, steps, depth, repeats, prefixes)
                    if found is None:
                        break
                    resolved = [*steps[:depth], *found[0]]
                    if found[1] is None:
                        raise _Again(resolved)
                    return (*found[1], resolved)
            if not _find_key(events, step):
                break
            depth += 1
        elif event == "start_array":
            if not isinstance(step, str) or not _ARRAY_INDEX.fullmatch(step):
                break
            if not _skip_items(events, int(step)):
                break
            depth += 1
        else:
            break  # a scalar where the pointer goes on
    raise _Nothing(f"nothing stands at {_quoted(pointer)} in the spilled result")


#: Keys written as a page shows them changed that one pointer may hold (`_shown_keys`):
#: each is found by a parse of the result to its object.
MAX_SHOWN_KEYS: Final = 16


class _Nothing(SpillError):
    """Nothing stands at a pointer: a token may still be a key as a page shows it."""


#: A key as the encoder shows one it had to change (cut, or with lone surrogates written
#: as U+FFFD), then the number it adds to tell two such keys of an object apart, if any.
_SHOWN_KEY: Final = re.compile(
    r"(.*)…\[key(?: truncated: ([0-9]+) more chars|: ([0-9]+) lone surrogates replaced)\]"
    r"([0-9]*)",
    re.DOTALL,
)


def _shows_as(key: str, shown: re.Match[str]) -> bool:
    """Whether the encoder's changed key *shown* may be how it showed *key*."""
    head = shown[1]
    if shown[2] is not None:  # cut: its head as written, the rest counted
        cut = len(head)
        more = int(shown[2])
        return 0 < more == len(key) - cut and SURROGATE.sub("\ufffd", key[:cut]) == head
    return SURROGATE.subn("\ufffd", key) == (head, int(shown[3]))


def _member_shown(events: Iterator[Any], shown: re.Match[str]) -> int | None:
    """The place of the member of the object just opened whose key the encoder showed as
    *shown* (of several shown alike, the one its number names), else None."""
    nth = int(shown[4] or 0)
    for place, (event, key) in enumerate(events):
        if event == "end_map":
            return None
        if key != shown[0] and _shows_as(key, shown):
            if not nth:
                return place
            nth -= 1
        _skip_value(events)
    return None


def _find_key(events: Iterator[Any], key: str) -> bool:
    """Skip members until the first one named *key*; False if the object ends first."""
    for event, value in events:
        if event == "end_map":
            return False
        if event == "map_key":
            if value == key:
                return True
            _skip_value(events)
    return False


#: What `_scan` finds: the steps from where it began, by places (last first while it
#: hands them up, see `_scan`), and the event and value at their end when it is a
#: scalar, a string or a key (None for a container).
_Found = tuple[list[_Step], "tuple[str, Any] | None"]
_DOWN: Final = object()  # `_scan` went down into an object it reads to its end


def _scan(
    events: Iterator[Any],
    steps: list[_Step],
    depth: int,
    repeats: _Repeats,
    prefixes: _Prefixes,
) -> _Found | None:
    """The rest of *steps* (from *depth*) resolved in the object just opened, as
    json.loads reads it: of its members named ``steps[depth]``, the last stands, so the
    object is read to its end, and each member with that name is followed down in turn
    (the same way at each object below). Nothing is built but a scalar, string or key
    at the end of the steps, the last found kept; a container there is found again by
    the steps returned. None if nothing stands there. *repeats* learns which keys each
    object read to its end repeats (the one the scan began in and each below it on the
    way) when it has at most `REPEATS_TRACKED` different keys, so that one scan serves
    later pointers through any of them. Iterative: a pointer may be as deep as the
    result."""
    # A frame per open container on the way: an object read to its end for a key,
    # ``[depth, members read, the last finding, its _Keys]``, or one the steps take a
    # single child of, ``[depth, None, that step]``, read past once the child is found.
    frames: list[list[Any]] = [[depth, -1, None, _Keys()]]
    found: Any
    while True:
        frame = frames[-1]
        event, value = next(events)  # the next member of the object on top
        if event == "end_map":
            frames.pop()
            found = frame[2]
            keys = frame[3]
            # An object below an earlier member with a repeated key is noted too, then
            # replaced by the one below the last: the one json.loads keeps. A note is
            # looked up only through ancestors known not to repeat the key on the way
            # (`_locate`), so it then names the only object the steps lead to.
            if keys.seen is not None:
                repeats.put(prefixes[frame[0]], frozenset(keys.repeated))
        else:
            frame[1] += 1
            frame[3].add(value)
            if value != steps[frame[0]]:
                _skip_value(events)
                continue
            found = _down(events, steps, frame[0] + 1, next(events), frames)
            if found is _DOWN:
                continue
        # Hand what was found up to the frames it was found for. Its steps are kept last
        # first, each level appending its own (prepending would copy them at each level:
        # quadratic in the depth), and put in order once at the top.
        while frames:
            top = frames[-1]
            if top[1] is not None:  # an object read to its end: its latest member named so
                if found is not None:
                    found[0].append(_Member(top[1]))
                top[2] = found
                break
            frames.pop()
            _skip_started(events, "start_map")  # the rest of that container
            if found is not None:
                found[0].append(top[2])
        else:
            if found is not None:
                found[0].reverse()
            return found  # type: ignore[no-any-return]


class _Keys:
    """Fingerprints of the keys of an object as it is read, and of those it repeats,
    while they are at most `REPEATS_TRACKED` (then `seen` is None: not known). A key's
    text is not kept: the object is read to its end holding none of it."""

    __slots__ = ("repeated", "seen")

    def __init__(self) -> None:
        self.seen: set[_Print] | None = set()
        self.repeated: set[_Print] = set()

    def add(self, key: str) -> None:
        seen = self.seen
        if seen is None:
            return
        mark = _print(key)
        if mark in seen:
            self.repeated.add(mark)
        elif len(seen) >= REPEATS_TRACKED:
            self.seen = None
            self.repeated = set()
        else:
            seen.add(mark)


def _down(
    events: Iterator[Any], steps: list[_Step], depth: int, first: Any, frames: list[list[Any]]
) -> Any:
    """For `_scan`: follow *steps* from *depth* into the value whose first event and
    value are *first*, through the containers that take one child (each pushed on *frames*), up
    to an object read to its end for a key (pushed too: `_DOWN`) or the end of the
    steps, or where nothing stands (None); every container left is read to its end."""
    event, value = first
    while depth < len(steps):
        step = steps[depth]
        if event == "start_map":
            if isinstance(step, str):
                frames.append([depth, -1, None, _Keys()])
                return _DOWN
            if not _skip_members(events, step.place):
                return None
            event, value = next(events)
            if event == "end_map":
                return None
            if step.key:
                _skip_value(events)
                _skip_started(events, "start_map")
                # A key is a string: nothing stands inside it.
                return ([step], ("string", value)) if depth + 1 == len(steps) else None
        elif event == "start_array":
            if not isinstance(step, str) or not _ARRAY_INDEX.fullmatch(step):
                _skip_started(events, event)
                return None
            if not _skip_items(events, int(step)):
                return None
        else:
            return None  # a scalar where the pointer goes on
        frames.append([depth, None, step])
        event, value = next(events)
        if event == "end_array":
            frames.pop()
            return None  # the array ended: the index is one past its last item
        depth += 1
    if event in ("start_map", "start_array"):
        _skip_started(events, event)
        return [], None
    return [], (event, value)


def _skip_items(events: Iterator[Any], count: int) -> bool:
    """Skip *count* items of the array just opened; False if it ends first."""
    for _ in range(count):
        event, _ = next(events)
        if event == "end_array":
            return False
        _skip_started(events, event)
    return True


def _skip_members(events: Iterator[Any], count: int) -> bool:
    """Skip *count* members of the object just opened; False if it ends first."""
    for _ in range(count):
        event, _ = next(events)
        if event == "end_map":
            return False
        _skip_value(events)
    return True


def _skip_value(events: Iterator[Any]) -> None:
    event, _ = next(events)
    _skip_started(events, event)


def _skip_started(events: Iterator[Any], event: str) -> None:
    if event not in ("start_map", "start_array"):
        return
    level = 1
    for ev, _ in events:
        if ev in ("start_map", "start_array"):
            level += 1
        elif ev in ("end_map", "end_array"):
            level -= 1
            if level == 0:
                return


class _Rest:
    """How a child cut at its budget reads the rest of a container it holds.

    The events of an item after its cut are read past once, by the parser that reads the
    page, and kept as a `_Tape` while the page's allowance lasts (`kept`, in estimated
    bytes); each lazy rest replays its part of the tape. Where the tape was cut short
    (an item larger than the allowance), a rest that reads past its end falls back to a
    fresh parse of the spilled file up to that container, its first *skip* children
    skipped. Lazy, and pulled only where the encoder reads past what was built (see
    `_build`)."""

    __slots__ = ("backend", "kept", "name", "open", "room")

    def __init__(self, open_: Any, name: str, backend: Any, room: int) -> None:
        self.open = open_
        self.name = name
        self.backend = backend
        self.room = room
        self.kept = room * KEPT_TAIL_PAGES

    def children(
        self, tokens: _Path, skip: int, kind: str, tape: _Tape | None, at: int
    ) -> Iterator[Any]:
        done = 0
        if tape is not None and at >= 0:
            replay = _Replay(tape, at)
            if kind == "array":
                kids = _array_items(replay, self, tokens, skip, shared=True)
            else:
                kids = _pairs(replay, self, tokens, skip, shared=True)
            try:
                for child in kids:
                    yield child
                    done += 1
            except _TapeEnd:
                pass  # the tape stops short of this child: the file has it
            else:
                return
        # The same children from a fresh parse (the same events, the same shared budget),
        # those already given dropped: what shows does not depend on where they came from.
        yield from islice(self._reparse(tokens, skip, kind), done, None)

    def _reparse(self, tokens: _Path, skip: int, kind: str) -> Iterator[Any]:
        with self.open(self.name) as file:
            events = _parse(file, self.backend)
            # *tokens* take no key past its first member (see `_locate`): no repeats.
            _locate(events, _steps(tokens), "", None)
            if kind == "array":
                if _skip_items(events, skip):
                    yield from _array_items(events, self, tokens, skip, shared=True)
            elif _skip_members(events, skip):
                yield from _pairs(events, self, tokens, skip, shared=True)


class _TapeEnd(Exception):
    """A replay reached the end of a tape cut short."""


class _Tape:
    """The events of an item read past after its cut, in order: the parts each lazy rest
    of it reads. *whole* is False where the page's allowance ran out before the item
    ended; the events before that point are kept."""

    __slots__ = ("events", "whole")

    def __init__(self) -> None:
        self.events: list[tuple[str, Any]] = []
        self.whole = True


class _Recording:
    """The page's parser as `_build` reads past a cut: each event also goes on the tape
    while the page's allowance (`_Rest.kept`) lasts."""

    __slots__ = ("events", "rest", "tape")

    def __init__(self, events: Iterator[Any], tape: _Tape, rest: _Rest) -> None:
        self.events = events
        self.tape = tape
        self.rest = rest

    def __iter__(self) -> _Recording:
        return self

    def __next__(self) -> Any:
        event = next(self.events)
        self.add(event)
        return event

    def add(self, event: tuple[str, Any]) -> None:
        tape = self.tape
        if tape.whole:
            value = event[1]
            self.rest.kept -= _TAPE_EVENT + (len(value) if type(value) is str else 0)
            if self.rest.kept < 0:
                tape.whole = False
            else:
                tape.events.append(event)

    @property
    def pos(self) -> int:
        """Where the next event goes on the tape; -1 past its end."""
        return len(self.tape.events) if self.tape.whole else -1


class _Replay:
    """A tape read again from *pos*: the events a lazy rest reads."""

    __slots__ = ("pos", "tape")

    def __init__(self, tape: _Tape, pos: int) -> None:
        self.tape = tape
        self.pos = pos

    def __iter__(self) -> _Replay:
        return self

    def __next__(self) -> Any:
        events = self.tape.events
        pos = self.pos
        if pos >= len(events):
            # A whole tape holds every rest's container up to its end: only a tape cut
            # short is read to its end.
            raise _TapeEnd
        self.pos = pos + 1
        return events[pos]


class _Budget:
    __slots__ = ("left",)

    def __init__(self, left: int) -> None:
        self.left = left


class _Cut(Mapping[str, Any]):
    """An object cut at its budget: the members built, then the rest as `_Rest` reads
    them, pulled only as far as the encoder reads (it reads a mapping's items lazily
    and says "more keys" unless it reached the end, guarantee 4)."""

    __slots__ = ("_pairs", "_rest")

    def __init__(self, built: dict[str, Any], rest: Iterator[tuple[str, Any]]) -> None:
        self._pairs = list(built.items())
        self._rest = rest

    def items(self) -> Iterator[tuple[str, Any]]:  # type: ignore[override]
        # What was pulled stays, and each reading goes by index: the page builder reads
        # a child more than once, and one reading may pull while another is paused.
        pairs = self._pairs
        i = 0
        while True:
            if i == len(pairs):
                pair = next(self._rest, None)
                if pair is None:
                    return
                pairs.append(pair)
            yield pairs[i]
            i += 1

    def __iter__(self) -> Iterator[str]:
        return (key for key, _ in self.items())

    def __getitem__(self, key: str) -> Any:
        for k, value in reversed(self._pairs):
            if k == key:
                return value
        raise KeyError(key)

    def __len__(self) -> int:
        # Its count is known only once read to the end; the encoder never asks for it.
        raise TypeError("a cut object does not know how many members it has")


def _parse(file: IO[bytes], backend: Any) -> Iterator[Any]:
    # basic_parse: no prefix paths, which ijson builds per nesting level (a result
    # nested 50,000 deep would hold gigabytes of them). Numbers as written: integers
    # as int, others as Decimal (a float would read 19.90 as 19.9 and round
    # 0.1000000000000000055511151231257827).
    source = _Exponents(file) if backend is _IJSON_PY else _Watched(file)
    return backend.basic_parse(source, use_float=False)  # type: ignore[no-any-return]


def _build(
    events: Iterator[Any],
    event: str,
    value: Any,
    *,
    rest: _Rest,
    path: _Path,
    budget: _Budget,
) -> Any:
    """The value whose first event is *event*, built while *budget* lasts.

    The page shows a child at most a page's worth: once what was built surely encodes
    to more than the budget (each scalar and key counted at no more than its encoded
    bytes), the containers still open stop, the rest of their events are skipped, and
    each one that had more becomes a lazy reader of its rest (`_cut`). Iterative: a
    result may nest 50,000 deep.
    """
    if event not in ("start_map", "start_array"):
        budget.left -= _cost(value)
        return value
    budget.left -= 2
    # Each frame: the container, its steps (by places), the members read, the pending key.
    stack: list[list[Any]] = [[[] if event == "start_array" else {}, path, 0, None]]
    while True:
        frame = stack[-1]
        ev, val = next(events)
        if ev in ("end_array", "end_map"):
            done = stack.pop()[0]
            if not stack:
                return done
            _attach(stack[-1], done)
            continue
        if budget.left < 0:
            # The budget is spent: this child (begun with *ev*) and everything after it
            # in every open container is read past, never built, onto the tape the
            # lazy rests replay (a replay is already on one).
            # A member's value: its key, read (and counted) already, starts the tape too,
            # or the lazy rest would replay the value as a key.
            keyed = ev != "map_key" and type(frame[0]) is not list
            past: _Replay | _Recording
            if type(events) is _Replay:
                tape, at, past = events.tape, events.pos - (2 if keyed else 1), events
            else:
                tape = _Tape()
                recording = past = _Recording(events, tape, rest)
                if keyed:
                    recording.add(("map_key", frame[3]))
                recording.add((ev, val))
                at = 0
            if ev == "map_key":
                _skip_value(past)
            else:
                _skip_started(past, ev)
            _skip_started(past, "start_array")
            value = _cut(frame, True, rest, tape, at)
            while stack.pop() is not frame:
                pass
            while stack:
                frame = stack[-1]
                _attach(frame, value)
                at = past.pos
                more = _rest_of(past)
                value = _cut(frame, more, rest, tape, at)
                stack.pop()
            return value
        if ev == "map_key":
            frame[3] = val
            budget.left -= _cost(val) + 1
            continue
        budget.left -= 1  # the comma
        if ev in ("start_map", "start_array"):
            budget.left -= 2
            # By its place: a repeated key takes the last of its members.
            token = str(frame[2]) if type(frame[0]) is list else _Member(frame[2])
            stack.append([[] if ev == "start_array" else {}, _Link(frame[1], token), 0, None])
        else:
            budget.left -= _cost(val)
            _attach(frame, val)


def _attach(frame: list[Any], value: Any) -> None:
    container = frame[0]
    if type(container) is list:
        container.append(value)
    else:
        container[frame[3]] = value
    frame[2] += 1


def _cost(value: Any) -> int:
    """At most the bytes *value* encodes to (a number at least one digit)."""
    return len(value) + 2 if type(value) is str else 1


def _rest_of(events: Iterator[Any]) -> bool:
    """Skip to the end of the container open at this level; whether it held anything."""
    level = 1
    held = False
    for ev, _ in events:
        if ev in ("start_map", "start_array"):
            level += 1
        elif ev in ("end_map", "end_array"):
            level -= 1
            if level == 0:
                return held
        held = True
    raise SpillError("the spilled result ended inside a value")


def _cut(frame: list[Any], more: bool, rest: _Rest, tape: _Tape, at: int) -> Any:
    """The container of *frame* as the page sees it: whole where nothing was left, else
    its built part before a lazy read of the rest (from *tape* at *at*)."""
    container, tokens, count, _ = frame
    if not more:
        return container
    if type(container) is list:
        stream = Stream(rest.children(tokens, count, "array", tape, at))
        stream.items = container
        return stream
    return _Cut(container, rest.children(tokens, count, "object", tape, at))


def _array_items(
    events: Iterator[Any], rest: _Rest, tokens: _Path, at: int, *, shared: bool = False
) -> Iterator[Any]:
    """The items of the array just opened (at index *at*), each built within the
    reader's page (*shared*: all of them within one, for a rest read lazily)."""
    budget = _Budget(rest.room)
    for index, (event, value) in enumerate(events, at):
        if event == "end_array":
            return
        if not shared:
            budget.left = rest.room
        yield _build(events, event, value, rest=rest, path=_Link(tokens, str(index)), budget=budget)


def _pairs(
    events: Iterator[Any], rest: _Rest, tokens: _Path, at: int, *, shared: bool = False
) -> Iterator[tuple[str, Any]]:
    """The members of the object just opened (the first at place *at*), as `_array_items`
    gives an array's items."""
    budget = _Budget(rest.room)
    for index, (event, key) in enumerate(events, at):
        if event == "end_map":
            return
        if not shared:
            budget.left = rest.room
        budget.left -= _cost(key)
        first, val = next(events)
        path = _Link(tokens, _Member(index))
        yield key, _build(events, first, val, rest=rest, path=path, budget=budget)


def _members(
    events: Iterator[Any], rest: _Rest, tokens: _Path, at: int
) -> Iterator[dict[str, Any]]:
    for key, value in _pairs(events, rest, tokens, at):
        yield {"key": key, "value": value}

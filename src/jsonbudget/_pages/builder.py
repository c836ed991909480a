"""Pages: items streamed into an envelope that fits ``max_bytes``, with a cursor to go on.

`PageBuilder` takes items one at a time and encodes each once, counting the envelope's
bytes as it goes; `Paginator` / `paginate` resolve a cursor, open the source at its
position, fill a builder, and mint the next cursor.
"""

from __future__ import annotations

import asyncio
import functools
import hashlib
import hmac
import itertools
import operator
import os
import secrets
import sys
import threading
import types
import weakref
from collections import OrderedDict, deque
from collections.abc import AsyncIterable, Callable, Hashable, Iterable, Mapping
from dataclasses import dataclass, field
from typing import Any, Literal, NamedTuple, Protocol, TypeGuard, cast, get_args

import orjson

from .._configured import Configured, held_key
from .._cursors.scope import Scope
from .._cursors.store import (
    TOKEN_CHARS,
    CursorState,
    CursorStore,
    MemoryCursorStore,
    check_scope,
    has_non_finite,
)
from .._encode import bound as _bound
from .._encode.bound import UNCLEAN
from .._encode.encoder import (
    BinaryMode,
    EncodeCall,
    Encoder,
    MarkerStyle,
    RunSizer,
    Strategy,
    Stream,
    Truncation,
    pointer,
)
from .._encode.markers import Markers
from .._encode.values import Converted
from .._encode.whole import JsonWriter
from .._frozen import fast_constructor
from .._limits import MAX_LIMIT, Limits, check_mode
from .._loops import running_loop
from .._shared import dumps
from .._sources.base import (
    AsyncSource,
    Clipped,
    Position,
    SequenceSource,
    Source,
    SourceLike,
    as_source,
    offset_position,
)
from ..errors import EncodeError, ExpiredCursor, InvalidCursor, LimitError, OversizedItemError

__all__ = [
    "ENVELOPE_KEYS",
    "MCP_KEYS",
    "IncompleteReason",
    "OversizedItem",
    "OversizedPolicy",
    "Page",
    "PageBuilder",
    "Paginator",
    "StoreFront",
    "apaginate",
    "paginate",
    "store_blocks",
]

OversizedPolicy = Literal["truncate", "placeholder", "spill", "error"]
IncompleteReason = Literal["page_full", "max_items", "budget_exhausted"]
_REASONS: frozenset[str] = frozenset(get_args(IncompleteReason))

#: The envelope's key spellings; pass ``keys=`` to rename any of them.
ENVELOPE_KEYS: Mapping[str, str] = {
    "items": "items",
    "complete": "complete",
    "next_cursor": "next_cursor",
    "truncated": "truncated",
    "oversized": "oversized",
    "incomplete_reason": "incomplete_reason",
}
#: MCP spells the cursor ``nextCursor``.
MCP_KEYS: Mapping[str, str] = {
    **ENVELOPE_KEYS,
    "next_cursor": "nextCursor",
    "incomplete_reason": "incompleteReason",
}
_LONGEST_REASON = "budget_exhausted"
_PLACEHOLDER = "item larger than the page"
#: How often a truncated oversized item is re-fitted when its reports overflow the page.
_REFITS = 6
#: A truncated oversized item whose cut and reports fill all but 1/_GOOD_FILL of the free
#: space is taken without looking for a larger cut.
_GOOD_FILL = 8
#: A spill reference: a label of up to 64 characters, a sha256, an extension.
_LONGEST_SPILL_REF = 64 + 1 + 64 + 5
#: The characters of a spill reference an error message shows before "…".
_SHOWN_REF_CHARS = 40
#: From this many items on, `fill_from` tries a run rather than one item.
_RUN_MIN = 8


class _Spilled(Protocol):
    @property
    def ref(self) -> str: ...


class SpillTarget(Protocol):
    """What a page builder needs of a spill store: `SpillStore` and `RedisSpillStore` are
    ones (the agent wing's `SpillBackend` protocol is the whole interface). A store of
    your own is given the item's JSON as one `bytes`, whatever else it has."""

    def put(self, data: bytes, *, label: str) -> _Spilled: ...


#: The modules of jsonbudget's own spill stores, whose `put` takes the chunks as they are
#: made. Known by where their `put` is defined, not by an attribute a store of your own
#: may have too (a `max_file_bytes` of its own handed it a generator it could not size),
#: and not by import: the core does not import the agent wing.
_CHUNKED_PUTS = frozenset({"jsonbudget._agents.spill", "jsonbudget._agents.redis_spill"})


class _ChunkedTarget(Protocol):
    def put(self, data: Iterable[bytes], *, label: str) -> _Spilled: ...


def _takes_chunks(store: SpillTarget) -> TypeGuard[_ChunkedTarget]:
    """Whether *store*'s `put` is one of jsonbudget's own (a subclass that keeps it too)."""
    return getattr(getattr(type(store), "put", None), "__module__", None) in _CHUNKED_PUTS


@dataclass(frozen=True, slots=True)
class OversizedItem:
    """An item that could not fit even an empty page, and what was done with it.

    ``index`` is its place in this page's ``items``; ``encoded_bytes`` its full encoded
    size where measured (spilled items), else None: measuring would mean encoding it
    whole.
    """

    index: int
    encoded_bytes: int | None
    outcome: Literal["truncated", "placeholder", "spilled"]
    ref: str | None = None

    def to_dict(self) -> dict[str, Any]:
        out: dict[str, Any] = {
            "index": self.index,
            "encoded_bytes": self.encoded_bytes,
            "outcome": self.outcome,
        }
        if self.ref is not None:
            out["ref"] = self.ref
        return out


@dataclass(frozen=True, slots=True)
class Page:
    """One page: the source items it holds, whether more exist, and its envelope bytes.

    ``items`` are the items as the source gave them; the envelope (`to_json`) holds their
    bounded encodings. ``position`` is where the page ended in the source.
    """

    items: tuple[Any, ...]
    complete: bool
    next_cursor: str | None
    truncations: tuple[Truncation, ...]
    oversized: tuple[OversizedItem, ...]
    incomplete_reason: IncompleteReason | None
    data: bytes = field(repr=False)
    position: Position = None

    def to_json(self) -> bytes:
        """The envelope, already encoded and within ``max_bytes``."""
        return self.data


#: `Page(...)` without its frozen ``__init__`` (about 1 µs a page), fields in order.
_new_page: Callable[..., Page] = fast_constructor(Page)

#: What a `PageBuilder` keeps from page to page; the rest is set up by `_start`.
_OPTION_SLOTS = (
    "_cap",
    "_encoder",
    "_fixed",
    "_frame",
    "_items_path",
    "_keys",
    "_max_items",
    "_spill_label",
    "_spill_store",
    "limits",
    "oversized",
)


class PageBuilder:
    """Builds one page, item by item. Single use: make one per page.

    `add` encodes the item once and accepts it if it fits the room left after the
    envelope, the longest cursor and the reports made so far; it returns False (and
    keeps nothing) once the page is full, so the item that did not fit is the one-item
    look-ahead. An item that cannot fit even an empty page gets the *oversized* outcome.

    A builder used alone carries nothing over; the pages a `Paginator` builds keep what
    they pulled from iterators inside items for the pages that meet those iterators
    again (see `_Pulled`), so no pulled value is lost.
    """

    __slots__ = (
        "_buf",
        "_call",
        "_cap",
        "_count",
        "_encoder",
        "_fixed",
        "_frame",
        "_full_reason",
        "_has_oversized",
        "_has_truncated",
        "_items",
        "_items_path",
        "_keys",
        "_left_over",
        "_max_items",
        "_oversized",
        "_pulled_ahead",
        "_reader",
        "_reports_bytes",
        "_spill_label",
        "_spill_ref",
        "_spill_store",
        "_streams",
        "_truncations",
        "limits",
        "oversized",
    )

    def __init__(
        self,
        limits: Limits,
        *,
        oversized: OversizedPolicy = "truncate",
        spill_store: SpillTarget | None = None,
        spill_label: str = "item",
        keys: Mapping[str, str] | None = None,
        strategy: Strategy = "balanced",
        markers: MarkerStyle = "text",
        default: Callable[[Any], Any] | None = None,
        binary: BinaryMode = "marker",
        encoder: Encoder | None = None,
    ) -> None:
        if not isinstance(limits, Limits):
            raise TypeError(f"limits must be a Limits, not {type(limits).__name__}")
        check_mode("oversized", oversized, ("truncate", "placeholder", "spill", "error"))
        if oversized == "spill" and spill_store is None:
            raise LimitError("spill_store", spill_store, "oversized='spill' needs a spill store")
        if oversized != "spill" and spill_store is not None:
            # Accepted, it was never written to: the caller's items were not where they
            # thought.
            raise LimitError(
                "spill_store",
                spill_store,
                f"only oversized='spill' writes to a spill store, not oversized={oversized!r}",
            )
        if spill_store is not None and not callable(getattr(spill_store, "put", None)):
            raise TypeError(f"spill_store must be a spill store, not {type(spill_store).__name__}")
        if encoder is not None and not isinstance(encoder, Encoder):
            raise TypeError(f"encoder must be an Encoder, not {type(encoder).__name__}")
        if not isinstance(spill_label, str):
            # as the spill store refuses it, but now: not mid-page at the first spill
            raise TypeError(f"spill_label must be a str, not {type(spill_label).__name__}")
        self.limits = limits
        self.oversized: OversizedPolicy = oversized
        self._spill_store = spill_store
        self._spill_label = spill_label
        if encoder is None:
            encoder = Encoder(
                limits, strategy=strategy, markers=markers, default=default, binary=binary
            )
        else:
            _check_encoder(
                encoder,
                limits,
                {"strategy": strategy, "markers": markers, "default": default, "binary": binary},
            )
        self._encoder = encoder
        shape = _shape(_key_pairs(keys), oversized, self._encoder.markers)
        self._keys = shape.keys
        self._items_path = shape.items_path
        self._frame = shape.frame
        self._fixed = shape.fixed
        self._cap = limits.max_bytes - self._fixed
        self._max_items = limits.max_items if limits.max_items is not None else 2**62
        # The iterators this page met inside items, with what was pulled from them: a
        # `Paginator` keeps them for the pages that meet those iterators again (`_Pulled`).
        self._streams: dict[int, Stream] = {}
        self._start()
        if limits.max_bytes < shape.least:
            raise LimitError(
                "max_bytes", limits.max_bytes, f"a page needs at least {shape.least} bytes"
            )

    def _start(self) -> None:
        """Set up the state of an empty page."""
        self._reader: Hashable | None = None
        self._left_over: tuple[Any, ...] = ()
        # Per-page state, reused for every item.
        self._call = EncodeCall(self._encoder, self._streams)
        self._buf = bytearray()
        self._items: list[Any] = []
        self._count = 0
        self._truncations: list[Truncation] = []
        self._oversized: list[OversizedItem] = []
        self._has_truncated = False  # whether the reports' wrappers are already counted
        self._has_oversized = False
        self._reports_bytes = 0
        self._full_reason: IncompleteReason | None = None
        # Whether the item refused at the end of the page pulled from an iterator.
        self._pulled_ahead = False
        # What a spilled item is called on this page; a `Paginator` sets it per scope.
        self._spill_ref: Callable[[_Spilled], str] | None = None

    def _blank(self, streams: dict[int, Stream] | None = None) -> PageBuilder:
        """An empty builder with this one's options, which were validated already, whose
        iterators' pulled values go to (and are looked up in) *streams*."""
        new = _options_copy(*_options_of(self))
        new._streams = {} if streams is None else streams
        new._start()
        return new

    def __copy__(self) -> PageBuilder:
        """A builder with this one's options and its page so far, as its own.

        The default copy shared the page's buffer and lists while each copy kept its own
        counts: copies of one blank builder wrote into one envelope (invalid JSON holding
        each other's items, reports past ``max_bytes``). The options are shared, read
        only, as between the pages of a `Paginator`.
        """
        cls = type(self)
        new = cls.__new__(cls)
        # Every slot, a subclass's too, and a subclass's ``__dict__`` where it has one.
        own, slots = cast("tuple[dict[str, Any] | None, dict[str, Any]]", self.__getstate__())
        for name, value in slots.items():
            setattr(new, name, value)
        if own:
            new.__dict__.update(own)
        new._buf = bytearray(self._buf)
        new._items = self._items.copy()
        new._truncations = self._truncations.copy()
        new._oversized = self._oversized.copy()
        # A `_PageStreams` stays one: built from a mapping, it publishes nothing again.
        new._streams = type(self._streams)(self._streams)
        new._call = EncodeCall(self._encoder, new._streams)
        return new

    @property
    def count(self) -> int:
        """Items on the page so far."""
        return self._count

    @property
    def reader(self) -> Hashable | None:
        """Who the page is for: the fingerprint of the cursor's scope (its principal and
        query) when a `Paginator` fills it, else None. A database source serves the rows
        it fetched ahead for a page only to a page of the same reader."""
        return self._reader

    @property
    def spill_bytes(self) -> int | None:
        """With ``oversized="spill"``, the largest file the spill store takes (its
        ``max_file_bytes``, where it says), else None: a database source reads a cell up
        to this (not only what one page shows), so a spilled row holds it whole."""
        if self.oversized != "spill":
            return None
        most = getattr(self._spill_store, "max_file_bytes", None)
        return most if type(most) is int else None

    @property
    def full_reason(self) -> IncompleteReason | None:
        """Why the last `add` was refused, or None if none was."""
        return self._full_reason

    def _room(self) -> int:
        """Bytes left for the next item's encoding, its separator included."""
        sep = 1 if self._count else 0
        return self._cap - len(self._buf) - sep - self._reports_bytes

    def add(self, item: Any) -> bool:
        """Put *item* on the page if it fits; False (nothing kept) when the page is full."""
        count = self._count
        if count >= self._max_items:
            self._full_reason = "max_items"
            return False
        buf = self._buf
        room = self._cap - len(buf) - self._reports_bytes - (1 if count else 0)
        ahead = False
        if room > 0:
            # The common case first: a clean item, encoded once by orjson, no reports.
            data = _bound.clean_dumps(item, room, 0, self._call.caps)
            if type(data) is bytes:
                if count:
                    buf += b","
                buf += data
                self._items.append(item)
                self._count = count + 1
                return True
            if data == UNCLEAN:
                met = len(self._streams)
                path = pointer(self._items_path, count)
                out = self._call.render_whole(item, room, path)
                if out is not None:
                    truncations = self._reports(out[1], path)
                    grow = self._report_growth(truncations, None)
                    if len(out[0]) + grow <= room:
                        self._accept(item, out[0], truncations, None, grow)
                        return True
                ahead = len(self._streams) > met
        if count:
            self._full_reason = "page_full"
            self._pulled_ahead = ahead
            return False
        self._add_oversized(item)
        return True

    def _reports(self, trs: Any, path: str) -> list[Truncation]:
        truncations: list[Truncation] = []
        self._call.reports(trs, path, truncations, Truncation)
        return truncations

    def fill_from(self, seq: list[Any] | tuple[Any, ...], start: int = 0) -> tuple[bool, int]:
        """Add ``seq[start:]`` until the page is full: (an item was left over, next offset).

        Runs of clean items go in with one orjson call each, sized by the bytes per item
        so far; the items near the end of the page go one by one.
        """
        if type(start) is not int or start < 0:
            # A negative start would index from the end, and the offset returned would
            # claim the items before it.
            raise ValueError(f"start must be an int of at least 0, not {start!r}")
        i = start
        runs = RunSizer()
        # The length is read again each step: a default hook or another thread may
        # shrink the list while its items are encoded (the page then ends where it ends).
        while i < (n := len(seq)):
            count = self._count
            if count and runs.live and n - i >= _RUN_MIN:
                room = self._cap - len(self._buf) - self._reports_bytes  # comma included
                k = min(runs.size(room, count, len(self._buf)), n - i, self._max_items - count)
                run = seq[i : i + k]  # one slice, encoded and kept
                if len(run) < k:  # another thread shrank it since its length was read
                    k = len(run)
                    if not k:
                        break
                data = self._call.bulk_run(run, room, 0)
                if data is not None:
                    self._buf += b","
                    self._buf += memoryview(data)[1:-1]
                    self._items += run
                    self._count = count + k
                    i += k
                    continue
                runs.missed(self._call.over)
            try:
                item = seq[i]
            except IndexError:  # another thread shrank it since its length was read
                break
            if not self.add(item):
                return True, i
            i += 1
        return False, i

    def fill(self, items: Iterable[Any]) -> bool:
        """Add from *items* until the page is full; True if an item was left over (it is
        `left_over`: taken from *items*, it is the next page's first)."""
        for item in items:
            if not self.add(item):
                self._left_over = (item,)
                return True
        return False

    async def afill(self, items: AsyncIterable[Any]) -> bool:
        """The async twin of `fill`."""
        async for item in items:
            if not self.add(item):
                self._left_over = (item,)
                return True
        return False

    @property
    def left_over(self) -> tuple[Any, ...]:
        """The item the last `fill` or `afill` took from its iterable and did not add, as
        a one-item tuple (empty when none): an iterator does not give it again, so a page
        built by hand next starts with it. Pages a `Paginator` builds keep it themselves."""
        return self._left_over

    def finish(
        self,
        *,
        complete: bool,
        next_cursor: str | None = None,
        incomplete_reason: IncompleteReason | None = None,
        position: Position = None,
    ) -> Page:
        """Close the envelope. ``complete`` only when the source said there is no more."""
        if type(complete) is not bool:
            # Its truthiness would decide the envelope while `Page.complete` kept the value.
            raise LimitError("complete", complete, f"must be a bool, not {type(complete).__name__}")
        if complete and next_cursor is not None:
            raise ValueError("a complete page has no next_cursor")
        if complete and self._full_reason is not None:
            # The refused item is the source's next one: the page cannot say there is none.
            raise ValueError("an item was refused for this page, so it is not complete")
        if next_cursor is not None and incomplete_reason == "budget_exhausted":
            raise ValueError("a page whose budget is spent offers no next_cursor")
        # The page kept room for a cursor JSON writes as it is: a character it escapes
        # or writes in more than one byte would pass that room.
        if next_cursor is not None and (
            type(next_cursor) is not str
            or not next_cursor
            or len(next_cursor) > TOKEN_CHARS
            or len(_dumps(next_cursor)) != len(next_cursor) + 2
        ):
            raise ValueError(
                f"next_cursor must be 1 to {TOKEN_CHARS} ASCII characters that JSON needs "
                "not escape"
            )
        if incomplete_reason is not None and (
            type(incomplete_reason) is not str or incomplete_reason not in _REASONS
        ):
            raise LimitError(
                "incomplete_reason",
                incomplete_reason,
                f"must be one of {', '.join(sorted(_REASONS))}",
            )
        if not complete and incomplete_reason is None:
            # Without a cursor or a refused item, nothing says why: the caller's to tell
            # (a "page_full" here was a claim nothing measured).
            incomplete_reason = self._full_reason
            if incomplete_reason is None and next_cursor is not None:
                incomplete_reason = "page_full"
        if complete:
            incomplete_reason = None
        k = self._keys
        head, complete_at, cursor_at = self._frame
        out = bytearray(complete_at)
        out += b"true" if complete else b"false"
        out += cursor_at
        out += b"null" if next_cursor is None else _dumps(next_cursor)
        if self._truncations:
            out += b"," + _dumps(k["truncated"]) + b":"
            out += _dumps([t.to_dict() for t in self._truncations])
        if self._oversized:
            out += b"," + _dumps(k["oversized"]) + b":"
            out += _dumps([o.to_dict() for o in self._oversized])
        if incomplete_reason is not None:
            out += b"," + _dumps(k["incomplete_reason"]) + b":" + _dumps(incomplete_reason)
        out += b"}"
        data = b"".join((head, self._buf, out))  # the items are copied once
        if len(data) > self.limits.max_bytes:  # pragma: no cover - reserved above
            raise AssertionError(f"page of {len(data)} bytes over {self.limits.max_bytes}")
        return _new_page(
            tuple(self._items),
            complete,
            next_cursor,
            tuple(self._truncations),
            tuple(self._oversized),
            incomplete_reason,
            data,
            position,
        )

    # -- internals -------------------------------------------------------------------

    def _report_growth(
        self, truncations: Iterable[Truncation], oversized: OversizedItem | None
    ) -> int:
        """Bytes the reports grow by if these entries are added."""
        return _report_growth(
            self._keys, truncations, oversized, self._has_truncated, self._has_oversized
        )

    def _accept(
        self,
        item: Any,
        data: bytes,
        truncations: Iterable[Truncation],
        oversized: OversizedItem | None,
        grow: int,
    ) -> None:
        """Put an encoded item on the page; *grow* is what `_report_growth` said."""
        if self._count:
            self._buf += b","
        self._buf += data
        self._items.append(item)
        self._count += 1
        added = list(truncations)
        self._truncations.extend(added)
        if added:
            self._has_truncated = True
        if oversized is not None:
            self._oversized.append(oversized)
            self._has_oversized = True
        self._reports_bytes += grow
        self._full_reason = None

    def _add_oversized(self, item: Any) -> None:
        """Give an item that cannot fit an empty page its outcome; never skip it."""
        index = self._count
        path = pointer(self._items_path, index)
        policy = self.oversized
        if policy == "error":
            raise _oversized_error(path, index, None, self.limits.max_bytes)
        store = self._spill_store
        if policy == "spill" and store is not None:  # __init__ refuses "spill" without one
            enc = self._encoder
            # Streamed as it is made, within the store's file limit (an endless generator
            # stops there), and from this page's streams: what the try above pulled from
            # an iterator is written, not lost.
            most = getattr(store, "max_file_bytes", None)
            writer = JsonWriter(
                enc.default,
                self._streams,
                most if type(most) is int else MAX_LIMIT,
                markers=enc.markers,
                binary=enc.binary,
                # The page's streams outlive it (a `Paginator` keeps them, and another item
                # on this page may hold the same iterator): what the file was written from
                # stays there.
                keep=True,
            )
            chunks = writer.chunks(item, path)
            ref = (
                store.put(chunks, label=self._spill_label)
                if _takes_chunks(store)
                else store.put(b"".join(chunks), label=self._spill_label)
            )
            size = writer.written
            too_long = None
            if self._spill_ref is not None:
                shown = _shown_ref(self._spill_ref(ref))
            else:
                shown, too_long = _store_ref(store, ref, self.limits.max_bytes)
            info = OversizedItem(index, size, "spilled", shown)
            marker = self._spill_marker(shown, size)
            self._place(item, marker, path, info, self._source_cuts(item, path), too_long=too_long)
            return
        if policy == "truncate":
            info = OversizedItem(index, None, "truncated")
            best = self._truncated(item, path, info)
            if best is not None:
                self._accept(item, *best)
                return
        info = OversizedItem(index, None, "placeholder")
        self._place(item, self._placeholder(), path, info)

    def _truncated(
        self, item: Any, path: str, info: OversizedItem
    ) -> tuple[bytes, list[Truncation], OversizedItem, int] | None:
        """*item* cut so that it and its reports fit the free space, in at most `_REFITS`
        encodes: ``(bytes, reports, info, growth)`` for `_accept`, or None.

        The reports' size is known only once the item is cut, and it is not monotone in
        the room the item gets (an object cut to its marker reports less than one cut
        member by member), so the room is searched between the largest room known to
        fit (or to fit no rendering at all) and the smallest known to overflow: guessed
        from the rounds so far (`_refit_room`), else halved. A cut that fills most of
        the free space is taken at once; else the best found when the rounds run out.
        """
        free = self._room()
        room = free - self._report_growth((), info)
        if room <= 0:
            return None
        low, high = 0, room + 1  # rooms tried: the next lies strictly between
        last: tuple[int, int] | None = None  # the last overflow: its room and total
        best: tuple[bytes, list[Truncation], OversizedItem, int] | None = None
        for _ in range(_REFITS):
            fitted = self._call.fit(item, room, path)
            if fitted is None:  # not even a marker fits: look above
                low = room
                guess = (low + high) // 2
            else:
                cut = [*self._reports(fitted[1], path), Truncation(path, "item", None, "bytes")]
                grow = self._report_growth(cut, info)
                shown = len(fitted[0])
                total = shown + grow
                if total <= free:
                    if best is None or total > len(best[0]) + best[3]:
                        best = (fitted[0], cut, info, grow)
                    if total * _GOOD_FILL >= free * (_GOOD_FILL - 1):
                        break
                    low = room
                    guess = (low + high) // 2
                else:
                    # A room above what was written gives the same cut (see _refit_room).
                    high = min(room, shown)
                    guess = _refit_room(room, shown, total, free, last)
                    last = (room, total)
                    if guess <= low:
                        guess = (low + high) // 2
            if not low < guess < high:
                break
            room = guess
        return best

    def _spill_marker(self, ref: str, size: int) -> bytes:
        return self._encoder.marker("oversized", _spilled(ref, size))

    def _placeholder(self) -> bytes:
        return self._encoder.marker("oversized", _PLACEHOLDER)

    def _source_cuts(self, item: Any, path: str) -> list[Truncation]:
        """The cuts a source made in *item* (the item a `Clipped` text, or a row's cell
        one), which a spill file holds as they were read: reported at the item's place,
        as the encoder reports such a cut, so no spilled item passes for whole."""
        values = item.values() if type(item) is dict else (item,)
        cut = [v for v in values if type(v) is Clipped]
        if not cut:
            return []
        # One report for all of them, at the item's place (a row of 30 cut cells made 30
        # reports there, which no page had room for: OversizedItemError, paging stuck).
        # What they left out, summed where they count in one unit; else not counted.
        # Binary cells in the "marker" mode are written as the marker, which says the size.
        marked = self._encoder.binary == "marker" and any(isinstance(v.head, bytes) for v in cut)
        if marked and len(cut) == 1:
            return [Truncation(path, "unencodable", None, "bytes")]
        units = {v.unit for v in cut}
        if not marked and len(units) == 1:
            return [Truncation(path, "string", sum(v.omitted for v in cut), units.pop())]
        return [Truncation(path, "string", None, "bytes")]

    def _place(
        self,
        item: Any,
        marker: bytes,
        path: str,
        info: OversizedItem,
        cuts: Iterable[Truncation] = (),
        *,
        too_long: LimitError | None = None,
    ) -> None:
        """Put *marker* in place of *item*; *too_long*, the error for a spill store's own
        reference longer than every page has room for, is raised where it does not fit."""
        cut = [Truncation(path, "item", None, "bytes"), *cuts]
        grow = self._report_growth(cut, info)
        if len(marker) + grow > self._room():
            # The builder's own minimum (checked in __init__) leaves room for this marker on
            # an empty page; a longer spill reference than the longest one could get here.
            if too_long is not None:
                raise too_long
            raise _oversized_error(path, info.index, info.encoded_bytes, self.limits.max_bytes)
        self._accept(item, marker, cut, info, grow)


#: A blank page's copy of the options (see `PageBuilder._blank`): read in one call, and
#: stored in the new builder's slots without ``setattr`` per name.
_options_of = operator.attrgetter(*_OPTION_SLOTS)
_options_copy: Callable[..., PageBuilder] = fast_constructor(PageBuilder, _OPTION_SLOTS)


#: The caps of `Limits` an encoder applies inside each item.
_ENCODER_CAPS = ("max_bytes", "max_items", "max_keys", "max_field_bytes", "max_depth")


def _check_encoder(encoder: Encoder, limits: Limits, options: Mapping[str, Any]) -> None:
    """Refuse an *encoder* other than the one *limits* and the builder's *options* make.

    The builder encodes every item with it, so each option it disagrees with (a cap
    inside items, a mode, the hook) would be dropped without a word. Given, it only saves
    making one per builder: the same encoder for each page (the tuner's use).
    """
    differ = [
        f"{name}={getattr(limits, name)!r} (the encoder's: {getattr(encoder.limits, name)!r})"
        for name in _ENCODER_CAPS
        if getattr(limits, name) != getattr(encoder.limits, name)
    ]
    for name, value in options.items():
        theirs = getattr(encoder, name)
        if name != "default":
            # Modes are strings: equal ones (read from a config, a StrEnum's member)
            # are the same mode.
            same = str(theirs) == str(value)
        else:
            # A bound method is made anew on each access: the same hook by its object
            # and function.
            same = theirs is value or (type(value) is types.MethodType and value == theirs)
        if not same:
            shown = "another hook" if name == "default" else repr(value)
            differ.append(f"{name}={shown} (the encoder's: {theirs!r})")
    if encoder.unencodable != "marker":
        # A page marks what it cannot encode: a spilled item is written with markers.
        differ.append(f"unencodable='marker' (the encoder's: {encoder.unencodable!r})")
    if differ:
        raise LimitError(
            "encoder",
            encoder,
            "it disagrees with the builder's "
            + "; ".join(differ)
            + ": make it with the builder's limits, strategy, markers, default and binary, "
            "or leave encoder out",
        )


def _dumps(obj: Any) -> bytes:
    return orjson.dumps(obj)


def _shown_ref(made: object) -> str:
    """A ``spill_ref`` callable's result, refused unless it fits the room every page
    reserves for a spill reference (`_LONGEST_SPILL_REF`): the page's byte budget was
    counted with that room, so a longer one would overflow it."""
    if not isinstance(made, str):
        raise TypeError(f"spill_ref must return a str, not {type(made).__name__}")
    try:
        size = len(_dumps(made)) - 2  # as the marker and the report write it
    except orjson.JSONEncodeError:  # a lone surrogate: no JSON text holds it
        raise LimitError(
            "spill_ref", made[:_SHOWN_REF_CHARS], "returned a reference with a lone surrogate"
        ) from None
    if not made or size > _LONGEST_SPILL_REF:
        raise LimitError(
            "spill_ref",
            made[:_SHOWN_REF_CHARS] + ("…" if len(made) > _SHOWN_REF_CHARS else ""),
            f"returned a reference of {size} bytes as JSON; a page has room for 1 to "
            f"{_LONGEST_SPILL_REF}",
        )
    return made


def _store_ref(store: SpillTarget, spilled: object, page: int) -> tuple[str, LimitError | None]:
    """The spill store's own reference in *spilled* (what its ``put`` returned), and the
    error for it if it is longer than the room every page reserves: raised where a page of
    *page* bytes has no room for it (a larger page shows it), rather than the
    `OversizedItemError` that would blame the item, already stored."""
    named = store.__class__.__name__  # through a cached pager's weak proxy too
    ref = getattr(spilled, "ref", None)
    if not isinstance(ref, str):
        raise TypeError(
            f"the spill store {named}.put() must return a SpillRef, whose ref is a str, not "
            f"{type(spilled).__name__}"
            + ("" if ref is None else f" with a ref of type {type(ref).__name__}")
        )
    try:
        size = len(_dumps(ref)) - 2  # as the marker and the report write it
    except orjson.JSONEncodeError:  # a lone surrogate: no JSON text holds it
        raise LimitError(
            "spill_store", ref[:40], f"{named}.put() returned a reference with a lone surrogate"
        ) from None
    if size <= _LONGEST_SPILL_REF:
        return ref, None
    return ref, LimitError(
        "spill_store",
        ref[:40] + "…",
        f"{named}.put() returned a reference of {size} bytes as JSON, which a page of {page} "
        f"bytes has no room for; every page has room for 1 to {_LONGEST_SPILL_REF} (a "
        "spill_ref can name spilled items in fewer)",
    )


def _spilled(ref: str, size: int) -> str:
    """What a spilled item's marker says."""
    return f"spilled as {ref}, {size} bytes"


def _report_growth(
    keys: Mapping[str, str],
    truncations: Iterable[Truncation],
    oversized: OversizedItem | None,
    has_truncated: bool,
    has_oversized: bool,
) -> int:
    """Bytes a page's reports grow by if these entries are added (see `PageBuilder`)."""
    grow = 0
    entries = [_dumps(t.to_dict()) for t in truncations]
    if entries:
        # ',"truncated":[' ... ']' once, then a comma before each later entry.
        wrapper = 0 if has_truncated else len(_dumps(keys["truncated"])) + 4
        grow += wrapper + sum(len(e) + 1 for e in entries) - (0 if has_truncated else 1)
    if oversized is not None:
        entry = len(_dumps(oversized.to_dict()))
        wrapper = 0 if has_oversized else len(_dumps(keys["oversized"])) + 3
        grow += wrapper + entry + 1
    return grow


class _Shape(NamedTuple):
    """What a page's envelope looks like for one set of options, whatever its items."""

    keys: dict[str, str]  # shared by every builder with these options: read only
    items_path: str
    #: The envelope's fixed bytes: before the items, and before the values of
    #: "complete" and "next_cursor".
    frame: tuple[bytes, bytes, bytes]
    #: Everything but the items and the reports, at its longest.
    fixed: int
    #: The smallest page that can always be built: an empty envelope holding one
    #: oversized item's placeholder and its reports.
    least: int


@functools.lru_cache(maxsize=64)
def _shape(
    keys: tuple[tuple[str, str], ...] | None, oversized: OversizedPolicy, markers: MarkerStyle
) -> _Shape:
    """The envelope for these options, worked out once (it was most of a builder's setup);
    *keys* as `_key_pairs` checked them."""
    k = {**ENVELOPE_KEYS, **dict(keys or ())}
    items_path = pointer("", k["items"])
    frame = (
        b"{" + _dumps(k["items"]) + b":[",
        b"]," + _dumps(k["complete"]) + b":",
        b"," + _dumps(k["next_cursor"]) + b":",
    )
    closing = {
        k["complete"]: False,
        k["next_cursor"]: "x" * TOKEN_CHARS,
        k["incomplete_reason"]: _LONGEST_REASON,
    }
    fixed = len(_dumps({k["items"]: [], **closing}))
    mk = Markers(markers)
    if oversized == "spill":  # the longest reference a spill store makes
        ref = "x" * _LONGEST_SPILL_REF
        marker = mk.value("oversized", _spilled(ref, 2**40))
        info = OversizedItem(0, 2**40, "spilled", ref)
    else:
        marker = mk.value("oversized", _PLACEHOLDER)
        info = OversizedItem(0, 2**40, "placeholder")
    cut = [Truncation(pointer(items_path, 0), "item", None, "bytes")]
    least = fixed + len(marker) + _report_growth(k, cut, info, False, False)
    return _Shape(k, items_path, frame, fixed, least)


def _oversized_error(path: str, index: int, size: int | None, limit: int) -> OversizedItemError:
    """`OversizedItemError` whose ``path`` is the item's place in this page's envelope."""
    err = OversizedItemError(index=index, encoded_bytes=size, limit=limit)
    # The error spells the default envelope; a page with renamed keys (MCP's, or a
    # caller's ``keys=``) has the item elsewhere, at the pointer its truncations use.
    err.path = path
    return err


def _key_pairs(keys: Mapping[str, str] | None) -> tuple[tuple[str, str], ...] | None:
    """*keys* as `_shape` caches them, checked: `LimitError` for what is not a mapping of
    envelope keys to distinct str spellings JSON can write (a list value is unhashable, a
    lone surrogate unwritable)."""
    if not keys:
        return None
    if not isinstance(keys, Mapping):
        raise LimitError("keys", keys, "must be a mapping of envelope key names")
    given = tuple(keys.items())
    for name, spelled in given:
        if not isinstance(name, str) or not isinstance(spelled, str):
            raise LimitError("keys", dict(keys), "envelope keys must be strings")
    # A subclass (a StrEnum member) as its text, read by str's own method, as `Scope`
    # reads one: orjson refuses a subclass as a key, and its own encode or __eq__ may lie.
    pairs = tuple((str.__str__(name), str.__str__(spelled)) for name, spelled in given)
    for _, spelled in pairs:
        try:
            spelled.encode("utf-8")
        except UnicodeEncodeError:
            raise LimitError("keys", dict(keys), "envelope keys must be valid UTF-8") from None
    unknown = {name for name, _ in pairs} - set(ENVELOPE_KEYS)
    if unknown:
        raise LimitError("keys", dict(keys), f"unknown key(s): {', '.join(sorted(unknown))}")
    if len(dict(pairs)) != len(pairs):  # two subclass members with one text
        raise LimitError("keys", dict(keys), "names an envelope key twice")
    if len(set({**ENVELOPE_KEYS, **dict(pairs)}.values())) != len(ENVELOPE_KEYS):
        raise LimitError("keys", dict(keys), "envelope keys must be distinct")
    return pairs


#: Pages whose pulls from iterators inside items this process keeps (see `_Pulled`).
_MAX_PULLED_PAGES = 64
#: Iterators with no weak references held (`_Pulled`) up to which every pulling page
#: checks them all for being released; past it, each time their number has doubled.
_CHECK_ALL_HELD = 4096
#: Iterators with no weak references whose pulls were dropped, held to refuse them if met
#: again (`_Pulled`); past it the oldest are let go of. Held for good, one in a reference
#: cycle was never released: its reference count never says only the registry holds it.
_MAX_LOST_HELD = 64
#: The key a stored position is wrapped under (see `_stored_position`); no source
#: position is stored unwrapped with this key, so the wrapper is never mistaken.
_AHEAD_KEY = "…look-ahead"


class _Kept:
    """One iterator's stream as `_Pulled` keeps it."""

    __slots__ = ("conv", "pages", "ref", "stream", "users")

    def __init__(self, stream: Stream | None, ref: Any, conv: Callable[[Any], Any] | None) -> None:
        #: what was pulled; None once dropped while the iterator lives (met again: lost)
        self.stream = stream
        #: a weak reference to the iterator, or (none to it) the iterator; None once
        #: released
        self.ref = ref
        #: the function a `values.Converted` passed its items through, else None
        self.conv = conv
        self.users = 1  # pages reading the stream now: it holds the iterator meanwhile
        self.pages = 0  # kept pages that met it

    def source(self) -> Any:
        """The iterator, or None where it died (its id may be another's now)."""
        ref = self.ref
        return ref() if type(ref) is weakref.ref else ref


def _refs(kept: _Kept) -> int:
    """References to a held iterator: `_ALONE` where *kept* is the only holder."""
    return sys.getrefcount(kept.ref)


#: What `_refs` says of an iterator nothing but its record holds (measured, not assumed:
#: how a call counts its own references differs between Python versions).
_ALONE = _refs(_Kept(None, iter([]), None))


def _alive(kept: _Kept, gone: list[Any]) -> bool:
    """Whether *kept*'s iterator lives; the reference that asking made goes to *gone*
    (another thread may drop the last other one meanwhile, and this one must not be
    dropped under `_Pulled`'s lock)."""
    source = kept.source()
    gone.append(source)
    return source is not None


def _died(dead: deque[int], key: int, _ref: object) -> None:
    # A weak reference's callback runs wherever the iterator dies, under `_Pulled`'s
    # lock too: it only notes the key, for the next page to tidy.
    dead.append(key)


class _Pulled:
    """What pages pulled from iterators inside items, kept by iterator, for this process.

    The values an iterator gave cannot be asked of it again, and the item holding it may
    be met again by another page: the page that resumes after a refused look-ahead item
    (under any page size, through any pager on the store), the same page read again (a
    retried cursor, an MCP refit at a smaller budget), or another paging of the same
    objects. Whichever page meets an iterator renders it from what was pulled plus the
    rest. The pulls of the last `_MAX_PULLED_PAGES` pages that pulled anything are kept;
    a cursor whose look-ahead item pulled names its page, so that resuming it here after
    those pulls were dropped raises `ExpiredCursor` instead of serving the item short.
    A cursor minted in another process met that process's objects, not ours: nothing of
    ours was pulled for it.

    Only a page that reads a stream holds its iterator. Between pages the iterator is
    held weakly, and where it allows no weak reference (a list iterator, ``map``) it is
    held only while something else holds it too (its reference count says so, checked
    by every pulling page): an iterator only this registry held cannot be met again, and
    holding it held everything behind it (a whole list, a database cursor, a
    generator's ``finally``) for the 64 pages. Its pulls go with it. One whose pulls
    were dropped while it lives is remembered, so that meeting it again raises
    `ExpiredCursor` rather than render what is left of it: as long as it lives if held
    weakly, else the last `_MAX_LOST_HELD` of them (a reference count cannot see a
    cycle: one only cyclic garbage holds would be held for good).

    Nothing is let go of under the lock: the last reference to an iterator, or to a
    pulled value, runs user code as it goes (a generator's ``finally``, a ``__del__``)
    that may page, and pages take the lock. What is let go of is gathered in a list
    (``gone``) dropped after the lock is released. Only a garbage collection that an
    allocation under the lock starts can still run user code there; a page that code
    builds raises `RuntimeError` rather than wait for good on its own thread.
    """

    __slots__ = (
        "_checked",
        "_dead",
        "_held",
        "_index",
        "_lock",
        "_lost",
        "_nonce",
        "_owner",
        "_pages",
        "_serial",
    )

    def __init__(self) -> None:
        self._lock = threading.Lock()
        self._nonce = secrets.token_hex(8)
        self._serial = itertools.count()
        # page id -> the records of the streams that page met
        self._pages: OrderedDict[str, dict[int, _Kept]] = OrderedDict()
        # id(iterator) -> its record, while the iterator lives
        self._index: dict[int, _Kept] = {}
        # the records no page reads whose iterator allows no weak reference: checked for
        # being its last holder
        self._held: dict[int, _Kept] = {}
        self._checked = 0  # how many of those the last check kept
        # the records of those whose pulls were dropped, oldest first
        self._lost: OrderedDict[int, _Kept] = OrderedDict()
        # ids of weakly held iterators that died, noted by `_died`
        self._dead: deque[int] = deque()
        self._owner: int | None = None  # the thread holding the lock

    def _acquire(self) -> None:
        me = threading.get_ident()
        if self._owner == me:  # only user code a garbage collection ran under the lock
            raise RuntimeError(
                "a page was built by code that a garbage collection ran while this thread "
                "was inside jsonbudget's registry of pulled values; waiting for it would "
                "wait for good"
            )
        self._lock.acquire()
        self._owner = me

    def _release(self) -> None:
        self._owner = None
        self._lock.release()

    def _origin(self) -> str:
        # The pid too: a forked worker shares the nonce but not the parent's later pulls.
        return f"{self._nonce}.{os.getpid()}."

    def keep(self, streams: dict[int, Stream]) -> str:
        """Keep the *streams* one page met, read no more by it; returns the page's id."""
        page_id = f"{self._origin()}{next(self._serial)}"
        gone: list[Any] = []  # let go of once the lock is released (see the class)
        self._acquire()
        try:
            self._tidy(gone)
            index, pages = self._index, self._pages
            met: dict[int, _Kept] = {}
            for key, stream in streams.items():
                kept = index.get(key)
                if kept is None or kept.stream is not stream:  # pragma: no cover - defensive
                    continue
                met[key] = kept
                kept.pages += 1
                kept.users -= 1
                if not kept.users:
                    gone.append(stream.park())
                    if type(kept.ref) is not weakref.ref:
                        self._held[key] = kept
            while len(pages) >= _MAX_PULLED_PAGES:
                old = pages.popitem(last=False)[1]
                gone.append(old)
                for key, kept in old.items():
                    kept.pages -= 1
                    if not kept.pages and not kept.users and index.get(key) is kept:
                        self._retire(key, kept, gone)
            pages[page_id] = met
            held = self._held
            if len(held) <= _CHECK_ALL_HELD or len(held) >= 2 * self._checked:
                for key, kept in list(held.items()):
                    if _refs(kept) <= _ALONE:
                        self._drop(key, kept, gone)
                self._checked = len(held)
        finally:
            self._release()
        gone.clear()
        return page_id

    def find(self, key: int) -> Stream | None:
        """The stream of the live iterator whose id is *key*, for a page that met it
        (which reads it until the page is kept); None where none is kept.

        `ExpiredCursor` where its pulls were dropped: what it gave is gone, and
        rendering the rest would serve the item short (a retried cursor, another
        paging of the same objects).
        """
        gone: list[Any] = []  # let go of once the lock is released (see the class)
        self._acquire()
        try:
            kept = self._index.get(key)
            if kept is None:
                return None
            source = kept.source()
            if source is None:  # died: the id may be another iterator's now
                self._drop(key, kept, gone)
                return None
            return self._use(key, kept, source)
        finally:
            self._release()

    def publish(self, key: int, stream: Stream) -> Stream:
        """Make *stream* found by every page from now on, before the page that met it is
        kept: a paging that runs beside it (another task at an ``await``, another
        thread) must render the values it pulled, not drain the iterator on its own.
        Returns the stream to read the iterator through: *stream*, or the one another
        page published for the same iterator first (two threads that both missed it
        each made one; two streams would split the iterator's values between them).
        `ExpiredCursor` as `find` says.
        """
        source, it = stream.source, stream.it
        gone: list[Any] = []  # let go of once the lock is released (see the class)
        self._acquire()
        try:
            kept = self._index.get(key)
            if kept is not None:
                if kept.source() is source:  # alive then, held by *stream* too
                    return self._use(key, kept, source)
                self._drop(key, kept, gone)  # a dead iterator's, whose id this one has now
            try:
                ref: Any = weakref.ref(source, functools.partial(_died, self._dead, key))
            except TypeError:  # no weak references to it: held, while others hold it
                ref = source
            # A `values.Converted` is made anew each time its value is converted: what
            # a parked stream keeps of it is its function.
            conv = it.conv if type(it) is Converted else None
            self._index[key] = _Kept(stream, ref, conv)
            return stream
        finally:
            self._release()

    def _use(self, key: int, kept: _Kept, source: Any) -> Stream:
        """*kept*'s stream, read by one more page (under the lock)."""
        stream = kept.stream
        if stream is None:
            raise ExpiredCursor(
                "the values an iterator in this item gave to an earlier page are no "
                f"longer held (this process keeps the last {_MAX_PULLED_PAGES} pages' "
                "pulls); start the paging again with fresh items"
            )
        if not kept.users:
            conv = kept.conv
            stream.unpark(source if conv is None else Converted(source, conv), source)
            if self._held.get(key) is kept:
                del self._held[key]
        kept.users += 1
        return stream

    def _retire(self, key: int, kept: _Kept, gone: list[Any]) -> None:
        """Drop *kept*'s pulls into *gone*, no page keeping them (under the lock): its
        iterator, if it lives on elsewhere, is remembered as one whose values are lost
        (one held, not weakly, only among the last `_MAX_LOST_HELD`)."""
        weak = type(kept.ref) is weakref.ref
        if _alive(kept, gone) if weak else (_refs(kept) > _ALONE):
            gone.append(kept.stream)
            kept.stream = None
            if not weak:
                lost = self._lost
                lost[key] = kept
                while len(lost) > _MAX_LOST_HELD:
                    self._drop(*lost.popitem(last=False), gone)
        else:
            self._drop(key, kept, gone)

    def _drop(self, key: int, kept: _Kept, gone: list[Any]) -> None:
        """Forget *kept*, whose iterator died or is held by it alone or was let go of;
        what it held goes to *gone* (under the lock)."""
        if self._index.get(key) is kept:
            del self._index[key]
        if self._held.get(key) is kept:
            del self._held[key]
        if self._lost.get(key) is kept:
            del self._lost[key]
        gone.append((kept.stream, kept.ref))
        kept.stream = kept.ref = None

    def _tidy(self, gone: list[Any]) -> None:
        """Forget the weakly held iterators that died (under the lock)."""
        dead, index = self._dead, self._index
        while dead:
            key = dead.popleft()
            kept = index.get(key)
            if kept is not None and not _alive(kept, gone):
                self._drop(key, kept, gone)

    def resume(self, stored: object) -> Position:
        """The source position in a wrapped stored position; `ExpiredCursor` where the
        page it names pulled here and its pulls are no longer kept."""
        if not (type(stored) is list and len(stored) == 2):  # noqa: PLR2004 - [page id, position]
            raise InvalidCursor("the cursor's stored position is not one this library wrote")
        page_id, position = stored
        if page_id is None:  # a source position that only needed the wrapper
            return position  # type: ignore[no-any-return]
        self._acquire()
        try:
            if page_id in self._pages:
                self._pages.move_to_end(page_id)  # about to be met: keep it longest
                return position  # type: ignore[no-any-return]
        finally:
            self._release()
        if isinstance(page_id, str) and page_id.startswith(self._origin()):
            raise ExpiredCursor(
                "the values the page before this cursor read ahead from an iterator are no "
                f"longer held (this process keeps the last {_MAX_PULLED_PAGES} pages' pulls); "
                "start the paging again"
            )
        return position  # type: ignore[no-any-return]


_PULLED = _Pulled()


class _PageStreams(dict[int, Stream]):
    """A page's streams; an iterator not met on this page is looked up among the kept."""

    __slots__ = ()

    def get(self, key: int, default: Any = None) -> Any:
        found = dict.get(self, key)
        if found is None:
            found = _PULLED.find(key)
            if found is None:
                return default
            dict.__setitem__(self, key, found)  # this page met it too: kept with its pulls
        return found

    def __setitem__(self, key: int, stream: Stream) -> None:
        # What is kept is the stream every page reads this iterator through, which may
        # be another page's: the caller reads it back.
        dict.__setitem__(self, key, _PULLED.publish(key, stream))


def _refit_room(room: int, shown: int, total: int, free: int, last: tuple[int, int] | None) -> int:
    """The room to fit a truncated item into next: fitted into *room*, it showed *shown*
    bytes and, with its reports, took *total* (more than the *free* bytes); *last* is the
    room and total of the overflowing round before, if any.

    How the reports change with the room depends on the item: a cut object reports about
    one entry per member it shows (often longer than the member), so they shrink with
    it; an object of long strings reports one entry per member whatever it shows, so they
    keep their size. Taking the overflow off the room (their size kept) went to nothing,
    then the placeholder, whenever the reports outweighed the data. So the guess is where
    they keep their size, or where the line through the last two rounds meets the free
    space, held between half and all of where they keep their share of the page: a cut
    that changes shape (an object cut to its marker) breaks any line, and halving at
    most keeps the rounds that reach a small room few. Below what was written, not
    below the room asked: a cut moves in steps (a list item).
    """
    share = shown * free // total  # total > free: below shown
    line = free - (total - shown)
    if last is not None:
        before, then = last
        if then > total and before > room:  # the total fell with the room: a line
            line = room - (total - free) * (before - room) // (then - total)
    return min(max(line, share // 2), share, shown - 1)


def _stored_position(position: Position, page_id: str | None) -> Position:
    """What the store holds for *position*: wrapped when its look-ahead item pulled."""
    if page_id is None and not (type(position) is dict and _AHEAD_KEY in position):
        return position
    return {_AHEAD_KEY: [page_id, position]}


class Paginator:
    """A configured, reusable pager: a store, limits and page options.

    `paginate` resolves the cursor (scope, expiry, budget) before reading anything, opens the
    source at its position, asks it for at most ``max_items + 1`` items, builds the page
    and mints the next cursor. ``complete`` is true only when the source ran out.
    """

    __slots__ = ("_binding", "_spill_ref", "_template", "limits", "store")

    def __init__(
        self,
        limits: Limits,
        *,
        store: CursorStore | None = None,
        oversized: OversizedPolicy = "truncate",
        spill_store: SpillTarget | None = None,
        keys: Mapping[str, str] | None = None,
        strategy: Strategy = "balanced",
        markers: MarkerStyle = "text",
        default: Callable[[Any], Any] | None = None,
        binary: BinaryMode = "marker",
        spill_ref: Callable[[Any, Scope], str] | None = None,
    ) -> None:
        if not isinstance(limits, Limits):
            raise TypeError(f"limits must be a Limits, not {type(limits).__name__}")
        if spill_ref is not None and not callable(spill_ref):
            raise TypeError(f"spill_ref must be callable, not {type(spill_ref).__name__}")
        if store is not None and not isinstance(store, CursorStore):
            raise TypeError(f"store must be a cursor store, not {type(store).__name__}")
        self._spill_ref = spill_ref
        self.limits = limits
        self.store: CursorStore = store if store is not None else MemoryCursorStore()
        # The last scope bound to a source, and what it was made from: a loop over the
        # pages of one source binds the same scope each time.
        self._binding: tuple[str, bytes, Scope] | None = None
        # Validated once, here; every page starts as a blank copy of this builder.
        self._template = PageBuilder(
            limits,
            oversized=oversized,
            spill_store=spill_store,
            keys=keys,
            strategy=strategy,
            markers=markers,
            default=default,
            binary=binary,
        )
        if spill_ref is not None and oversized != "spill":
            raise LimitError(
                "spill_ref",
                spill_ref,
                f"only oversized='spill' names spilled items, not oversized={oversized!r}",
            )

    def _open(
        self, source: Source[Any] | AsyncSource[Any], scope: Scope, cursor: str | None
    ) -> tuple[CursorState, Position, PageBuilder]:
        """The operation's state, the source position to read from, and a blank page."""
        bound = self._bind(scope, source)
        builder = self._template._blank(_PageStreams())
        builder._reader = bound.fingerprint
        spill_ref = self._spill_ref
        if spill_ref is not None:
            # The caller's scope, not the bound one: a reference is minted for its principal.
            builder._spill_ref = lambda ref: spill_ref(ref, scope)
        store = self.store
        if cursor is None:
            state = store.start(bound, max_pages=self.limits.max_pages)
            return _store_state(store, "start", state), None, builder
        state = _store_state(store, "resume", store.resume(cursor, bound))
        # The store checked the scope; checked again here, so that a store of the
        # caller's that skips it does not hand one principal's page to another.
        _check_scope(store, state, bound)
        position = state.position
        if type(position) is dict and _AHEAD_KEY in position:
            position = _PULLED.resume(position[_AHEAD_KEY])
        if position is None:
            # No cursor is minted at None (`_check_progress`): the page would start the
            # operation again from the first item (guarantee 9).
            raise ValueError(
                f"the cursor store {_store_name(store)}.resume() returned position None "
                "for a cursor: the page would start again from the first item"
            )
        return state, position, builder

    def _bind(self, scope: Scope, source: Source[Any] | AsyncSource[Any]) -> Scope:
        """The scope a cursor is bound to: the caller's, plus what the source reads."""
        if not isinstance(scope, Scope):
            raise TypeError(f"scope must be a Scope, not {type(scope).__name__}")
        described = source.describe()
        text = _json_text(described)
        last = self._binding
        if (
            text is not None
            and last is not None
            and hmac.compare_digest(last[0], scope.fingerprint)
            and last[1] == text
        ):
            return last[2]
        binding = {"query": scope.query_fingerprint, "source": described}
        if text is not None:
            # The scope folds what is one question to a tool (a string to NFC, 1.0 to
            # 1); to a source those are other SQL parameters or paths (1.0 binds as
            # '1.0' against a text column): its description goes in as written too.
            binding["exact"] = hashlib.sha256(text).hexdigest()
        bound = Scope(scope.principal, binding)
        self._binding = None if text is None else (scope.fingerprint, text, bound)
        return bound

    def _finish(
        self, builder: PageBuilder, state: CursorState, more: bool, position: Position
    ) -> Page:
        page_id = _PULLED.keep(builder._streams) if builder._streams else None
        if not more:
            return builder.finish(complete=True, position=position)
        if state.max_pages is not None and state.pages_served >= state.max_pages:
            return builder.finish(
                complete=False, incomplete_reason="budget_exhausted", position=position
            )
        ahead = page_id if builder._pulled_ahead else None
        store = self.store
        token = store.mint(state, _stored_position(position, ahead))
        if type(token) is not str:
            # None (a forgotten ``return``) would be taken for "no cursor": a page that
            # says more follows, with no way to reach it.
            raise TypeError(
                f"the cursor store {_store_name(store)}.mint() must return a str token, "
                f"not {type(token).__name__}"
            )
        return builder.finish(complete=False, next_cursor=token, position=position)

    def paginate(self, source: SourceLike, *, scope: Scope, cursor: str | None = None) -> Page:
        """The page of *source* that *cursor* points at (the first page without one)."""
        src = as_source(source)
        if not hasattr(src, "open"):  # cheaper than the structural isinstance
            raise TypeError("an async source needs apaginate, the async twin of paginate")
        state, opened, builder = self._open(src, scope, cursor)
        try:
            # checked above: a sync source (the structural check costs more than hasattr)
            more, position = self._fill(cast("Source[Any]", src), builder, opened)
            if more:
                _check_progress(src, builder, opened, position)
        except BaseException:
            if builder._streams:  # a page that raised may be asked for again
                _PULLED.keep(builder._streams)
            raise
        return self._finish(builder, state, more, position)

    def _fill(
        self, src: Source[Any], builder: PageBuilder, position: Position
    ) -> tuple[bool, Position]:
        """Fill *builder* from *src* at *position*: (an item was left over, where it ended)."""
        seq = src.sequence if isinstance(src, SequenceSource) else None
        if isinstance(seq, list | tuple) and (position is None or type(position) is int):
            # In memory: fill in runs (one orjson call per run of clean items); the
            # position of a sequence is the offset of the next item.
            return builder.fill_from(seq, offset_position(position, "sequence"))
        fill = getattr(src, "fill", None)
        if callable(fill):  # an attribute of another meaning is no batch path
            # Sources that page in batches (files, SQL) hand runs to the bulk path and cut
            # long cells where they read them, to what one page could show.
            filled = fill(builder, position, limit_hint=self.limits.max_items)
            if type(filled) is not tuple or len(filled) != 2:  # noqa: PLR2004 - (more, position)
                raise TypeError(
                    f"{type(src).__name__}.fill() must return a (more, position) tuple, "
                    f"got {_kind_of(filled)}"
                )
            if type(filled[0]) is not bool:  # its truthiness would decide `complete`
                raise TypeError(
                    f"{type(src).__name__}.fill() must return more as a bool, "
                    f"not {type(filled[0]).__name__}"
                )
            return filled
        more = False
        items = src.open(position, limit_hint=self.limits.max_items)
        if not hasattr(items, "__iter__"):
            raise _not_iterator(src, "open", items)
        try:
            for pair in items:
                # A bare item would be unpacked as a pair where it has two members (a
                # two-key dict gave its keys as the items, and said complete). A tuple
                # subclass (a named tuple) unpacks as the tuple it is: accepted.
                if not isinstance(pair, tuple) or len(pair) != 2:  # noqa: PLR2004 - (item, position)
                    raise TypeError(_pair_error(src, "open", pair))
                item, pos = pair
                if not builder.add(item):
                    more = True
                    break
                position = pos
        finally:
            close = getattr(items, "close", None)
            if close is not None:
                close()
        return more, position

    async def apaginate(
        self, source: SourceLike, *, scope: Scope, cursor: str | None = None
    ) -> Page:
        """The async twin of `paginate`, for async sources (sync ones work too).

        Under asyncio, what may wait on I/O of ours runs in a worker thread, so the event
        loop goes on: the store's calls (resume or start, mint) unless `store_blocks`
        says it never waits, and, for an async source with ``oversized="spill"``, the
        first item of each page (the one item that can be spilled). The source itself is
        read where the caller runs it: a sync one on the loop's thread, as `paginate`
        reads it (a connection made there may refuse other threads), so a sync source
        that blocks is the caller's to move (``asyncio.to_thread(pager.paginate, ...)``).
        Under another event loop (trio), everything runs on the loop, as `paginate`.
        Cancelled, a thread goes on to its end (it cannot be stopped): a page resolved or
        minted there is counted or minted and not served, and its pulls are kept, so the
        same cursor asked again gives the same page.
        """
        src = as_source(source)
        threads = running_loop() == "asyncio"
        blocks = threads and store_blocks(self.store)
        if blocks:
            state, opened, builder = await asyncio.to_thread(self._open, src, scope, cursor)
        else:
            state, opened, builder = self._open(src, scope, cursor)
        more = False
        position = opened
        adding: _Adding | None = None
        try:
            if isinstance(src, Source):
                more, position = self._fill(src, builder, position)
            else:
                spills = threads and self._template.oversized == "spill"
                items = src.aopen(position, limit_hint=self.limits.max_items)
                if not hasattr(items, "__aiter__"):
                    raise _not_iterator(src, "aopen", items)
                try:
                    async for pair in items:
                        if not isinstance(pair, tuple) or len(pair) != 2:  # noqa: PLR2004 - as in `_fill`
                            raise TypeError(_pair_error(src, "aopen", pair))
                        item, pos = pair
                        if spills and not builder._count:
                            adding = _Adding(builder)
                            added = await asyncio.to_thread(adding.add, item)
                        else:
                            added = builder.add(item)
                        if not added:
                            more = True
                            break
                        position = pos
                finally:
                    aclose = getattr(items, "aclose", None)
                    if aclose is not None:
                        await aclose()
            if more:
                _check_progress(src, builder, opened, position)
        except BaseException:
            # A page that raised may be asked for again; one whose thread still adds to
            # it is kept by that thread once done (keeping it now would park the streams
            # it reads).
            if builder._streams and (adding is None or not adding.let_go()):
                _PULLED.keep(builder._streams)
            raise
        if more and blocks:  # a cursor to mint: `_finish` keeps the pulls first
            return await asyncio.to_thread(self._finish, builder, state, more, position)
        return self._finish(builder, state, more, position)


class StoreFront:
    """A cursor store that passes its calls on to `store` (`McpPager`'s view of a store
    for one call): it waits where `store` waits (`store_blocks`)."""

    __slots__ = ("store",)

    def __init__(self, store: CursorStore) -> None:
        self.store = store


def _store_name(store: CursorStore | StoreFront) -> str:
    """The class a message names for *store*: the user's store, not a front of ours."""
    while isinstance(store, StoreFront):
        store = store.store
    return type(store).__name__


def store_blocks(store: CursorStore | StoreFront) -> bool:
    """Whether *store*'s calls may wait on I/O (a database file another process locks,
    a network round trip), so that `Paginator.apaginate` makes them in a worker thread.
    The in-process store never does (a dict under a lock held for a lookup) and stays
    on the loop; a subclass of it may do anything."""
    while isinstance(store, StoreFront):
        store = store.store
    return type(store) is not MemoryCursorStore


def _store_state(store: CursorStore, call: str, state: object) -> CursorState:
    """*state* as *store*'s *call* returned it, refused unless it is a `CursorState` whose
    page counts the pager can compare: a forgotten ``return`` gave an AttributeError from
    inside the pager, and from ``start`` only after the source was read."""
    if not isinstance(state, CursorState):
        raise TypeError(
            f"the cursor store {_store_name(store)}.{call}() must return a CursorState, "
            f"not {type(state).__name__}"
        )
    most = state.max_pages
    if type(state.pages_served) is not int or (most is not None and type(most) is not int):
        raise TypeError(
            f"the cursor store {_store_name(store)}.{call}() returned a CursorState whose "
            f"pages_served ({type(state.pages_served).__name__}) or max_pages "
            f"({type(most).__name__}) is not an int"
        )
    return state


def _check_scope(store: CursorStore, state: CursorState, bound: Scope) -> None:
    """`CursorScopeError`, as the stores raise it, where a resumed *state* was minted for
    another scope than *bound*."""
    prints = (state.principal_fingerprint, state.query_fingerprint)
    if not all(type(fp) is str and fp.isascii() for fp in prints):
        # `hmac.compare_digest` takes ASCII text only; a store's fingerprints are hex.
        raise TypeError(
            f"the cursor store {_store_name(store)}.resume() returned a CursorState whose "
            "fingerprints are not the scope's (ASCII strings)"
        )
    check_scope(*prints, bound)


def _check_progress(
    src: Source[Any] | AsyncSource[Any], builder: PageBuilder, opened: Position, ended: Position
) -> None:
    """`ValueError` where a page that says more follows did not move past where it was
    opened: its cursor would serve the same page again (or, at None, the first page), and
    paging would never end (guarantee 8)."""
    if builder._count and ended is not None and not _same_position(ended, opened):
        return
    if not builder._count:
        why = "put no item on the page"
    elif ended is None:
        why = "ended the page at position None (where paging starts)"
    else:
        why = "ended the page at the position it was opened at"
    raise ValueError(
        f"source {type(src).__name__} {why}, and said more items follow: its cursor would "
        "serve that page again for good; the position yielded with an item must be the "
        "one after it"
    )


def _same_position(a: Position, b: Position) -> bool:
    """Whether two positions are one: by their JSON text, as the store keeps them (``1``,
    ``1.0`` and ``True`` are three). One that is not JSON is the store's to refuse."""
    if type(a) is int and type(b) is int:  # offsets: the common case
        return a == b
    text = _json_text(a)
    return text is not None and text == _json_text(b)


def _kind_of(value: object) -> str:
    """What *value* is, for a message: a tuple's length too."""
    if type(value) is tuple:
        return f"a tuple of {len(value)}"
    return type(value).__name__


def _pair_error(src: object, call: str, pair: object) -> str:
    # A tuple subclass is refused by its length only: say so, as for a tuple.
    kind = _kind_of(pair)
    if isinstance(pair, tuple) and type(pair) is not tuple:
        kind = f"{type(pair).__name__}, a tuple of {len(pair)}"
    return f"{type(src).__name__}.{call}() must yield (item, position) tuples, got {kind}"


def _not_iterator(src: object, call: str, items: object) -> TypeError:
    """The error for *src*'s *call* returning *items*, which cannot be iterated as it
    should (a forgotten ``return``, ``async def`` on a sync source or the reverse)."""
    wanted = "an iterator" if call == "open" else "an async iterator"
    hint = ""
    if isinstance(items, types.CoroutineType):
        items.close()  # never awaited, on purpose: closed, Python does not warn about it
        hint = "; an async def method is a coroutine"
    if call == "open" and (hint or hasattr(items, "__aiter__")):
        hint += "; an async source defines aopen() and is paged with apaginate"
    elif call == "aopen" and hasattr(items, "__iter__"):
        hint += "; a sync source defines open()"
    return TypeError(
        f"{type(src).__name__}.{call}() must return {wanted} of (item, position) tuples, "
        f"not {type(items).__name__}{hint}"
    )


class _Adding:
    """The first item of an async page, added in a worker thread: with
    ``oversized="spill"`` it may be spilled (a file or Redis write).

    Until `add` returns, the thread reads the page's streams. A page let go of meanwhile
    (its task cancelled) leaves their keeping to the thread (`let_go`), which does it
    once done with them: a page kept while read would park streams in use.
    """

    __slots__ = ("_builder", "_let_go", "_lock", "_running")

    def __init__(self, builder: PageBuilder) -> None:
        self._builder = builder
        self._lock = threading.Lock()
        # From before the thread is asked for: a cancellation may come before it starts.
        self._running = True
        self._let_go = False

    def add(self, item: Any) -> bool:
        """`PageBuilder.add`, in the worker thread."""
        builder = self._builder
        try:
            return builder.add(item)
        finally:
            with self._lock:
                self._running = False
                let_go = self._let_go
            if let_go and builder._streams:
                _PULLED.keep(builder._streams)

    def let_go(self) -> bool:
        """The page is let go of: True if the thread still adds to it (and keeps it when
        done). A thread cancelled before it started never runs, and left nothing to
        keep: the first item's streams are the page's first."""
        with self._lock:
            self._let_go = self._running
            return self._running


def _json_text(described: object) -> bytes | None:
    """*described* as JSON text that keeps every value's JSON type, or None if it has none.

    ``==`` holds ``True == 1`` and ``1.0 == 1``; their texts differ, as their
    fingerprints do (``True`` vs ``1``). orjson writes NaN as ``null``: a text that may
    hold one is not one text (the scope refuses NaN).
    """
    try:
        text = dumps(described, orjson.OPT_SORT_KEYS)
    except (orjson.JSONEncodeError, EncodeError):
        # not plain JSON, or a tzinfo that raised: the scope canonicalizes (or refuses) it
        return None
    if b"null" in text and has_non_finite(described, 0):
        return None
    return text


def paginate(
    source: SourceLike,
    *,
    scope: Scope,
    cursor: str | None = None,
    store: CursorStore,
    limits: Limits,
    oversized: OversizedPolicy = "truncate",
    spill_store: SpillTarget | None = None,
    keys: Mapping[str, str] | None = None,
    strategy: Strategy = "balanced",
    markers: MarkerStyle = "text",
    default: Callable[[Any], Any] | None = None,
    binary: BinaryMode = "marker",
    spill_ref: Callable[[Any, Scope], str] | None = None,
) -> Page:
    """One call: resolve *cursor*, build the page of *source*, mint the next cursor."""
    pager = _pager(
        limits, store, oversized, spill_store, keys, strategy, markers, default, binary, spill_ref
    )
    return pager.paginate(source, scope=scope, cursor=cursor)


async def apaginate(
    source: SourceLike,
    *,
    scope: Scope,
    cursor: str | None = None,
    store: CursorStore,
    limits: Limits,
    oversized: OversizedPolicy = "truncate",
    spill_store: SpillTarget | None = None,
    keys: Mapping[str, str] | None = None,
    strategy: Strategy = "balanced",
    markers: MarkerStyle = "text",
    default: Callable[[Any], Any] | None = None,
    binary: BinaryMode = "marker",
    spill_ref: Callable[[Any, Scope], str] | None = None,
) -> Page:
    """The async twin of `paginate`."""
    pager = _pager(
        limits, store, oversized, spill_store, keys, strategy, markers, default, binary, spill_ref
    )
    return await pager.apaginate(source, scope=scope, cursor=cursor)


#: The one-call verbs' pagers, by their options; the caller's objects (the store, the spill
#: store, the hooks) by identity, held weakly: an entry goes with any of them, so an id is
#: not reused while its entry lives. What pages pulled from iterators is kept for the
#: process (`_Pulled`), not by a pager, so no option set owns it.
_configured: Configured[Paginator] = Configured()


class _HeldPager(Paginator):
    """A cached one-call pager: its store is held weakly, as the cache holds nothing of the
    caller's (a store dropped by a server that makes one per request closes with its last
    reference, not with the cache's). A call holds its store, so it is there while used."""

    __slots__ = ("_store",)

    @property
    def store(self) -> CursorStore:
        store = self._store()
        if store is None:  # `_configured` drops a pager with its store: no call can get here
            raise ReferenceError("the cursor store of a cached pager is gone")
        return store

    @store.setter
    def store(self, store: CursorStore) -> None:
        self._store = weakref.ref(store)


def _weak_hook(hook: Callable[..., Any] | None) -> Callable[..., Any] | None:
    """*hook*, called through a weak reference (see `_HeldPager`). A bound method is made
    anew at each attribute access: its object and function are referenced instead."""
    if hook is None:
        return None
    if type(hook) is not types.MethodType:
        return weakref.proxy(hook)
    method = weakref.WeakMethod(hook)

    def call(*args: Any) -> Any:
        bound = method()
        if bound is None:  # as for the store: a call holds its hooks
            raise ReferenceError("a hook of a cached pager is gone")
        return bound(*args)

    return call


def _pager(  # noqa: PLR0917 - the one-call verbs' options, in their order
    limits: Limits,
    store: CursorStore,
    oversized: OversizedPolicy,
    spill_store: SpillTarget | None,
    keys: Mapping[str, str] | None,
    strategy: Strategy,
    markers: MarkerStyle,
    default: Callable[[Any], Any] | None,
    binary: BinaryMode,
    spill_ref: Callable[[Any, Scope], str] | None,
) -> Paginator:
    """A pager with these options, configured once per distinct options."""
    # Before the cache: `Paginator` would make None a store of its own, one per cached
    # pager, which another page size (another pager) does not know: its cursors failed.
    if not isinstance(store, CursorStore):
        raise TypeError(f"store must be a cursor store, not {type(store).__name__}")

    def make() -> Paginator:
        return Paginator(
            limits,
            store=store,
            oversized=oversized,
            spill_store=spill_store,
            keys=keys,
            strategy=strategy,
            markers=markers,
            default=default,
            binary=binary,
            spill_ref=spill_ref,
        )

    def make_held() -> Paginator:
        return _HeldPager(
            limits,
            store=store,
            oversized=oversized,
            spill_store=None if spill_store is None else weakref.proxy(spill_store),
            keys=keys,
            strategy=strategy,
            markers=markers,
            default=_weak_hook(default),
            binary=binary,
            spill_ref=_weak_hook(spill_ref),
        )

    if (
        type(limits) is not Limits
        or (default is not None and not callable(default))
        or (spill_ref is not None and not callable(spill_ref))
        or (spill_store is not None and not callable(getattr(spill_store, "put", None)))
        or (oversized != "spill" and (spill_store is not None or spill_ref is not None))
    ):
        # Refused there, naming the caller's object (not a weak proxy to it), or a
        # subclass whose equality is its own.
        return make()
    named = _key_pairs(keys)
    key = (
        limits,
        id(store),
        oversized,
        held_key(spill_store),
        named,
        strategy,
        markers,
        held_key(default),
        binary,
        held_key(spill_ref),
    )
    held = (store, spill_store, default, spill_ref)
    pager = _configured.get_held(key, make_held, held)
    # None: an object that cannot be weakly referenced (a `SpillStore`, a store with
    # ``__slots__`` and no ``__weakref__``), which is then configured per call.
    return make() if pager is None else pager

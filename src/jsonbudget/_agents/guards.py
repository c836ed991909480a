"""Guards for agent loops: per tool (`bounded_tool`), per result (`ResultGate`), per turn
(`TurnBudget`). Each layer catches what the one above missed.

Every guard takes its budget the same way: the keyword ``max_bytes`` (an int), or
``limits`` (a `Limits`) where the encoder's item, field and depth caps apply too
(`bounded_tool`); every other option is keyword-only, and an unknown mode raises
`LimitError` naming the option.
"""

from __future__ import annotations

import asyncio
import codecs
import collections.abc
import concurrent.futures
import contextlib
import contextvars
import copy
import dataclasses
import decimal
import functools
import importlib
import inspect
import io
import itertools
import json
import operator
import re
import sys
import threading
import types as types_
import typing
import weakref
from collections.abc import AsyncIterable, AsyncIterator, Callable, Iterable, Iterator
from dataclasses import dataclass
from typing import (
    Any,
    Final,
    Literal,
    NoReturn,
    SupportsIndex,
    TypeAlias,
    TypeVar,
    cast,
    overload,
)

import ijson
import orjson

from .._encode.bound import BOUNDED_SCALARS, TOO_BIG, Caps, clean_dumps, clean_result, compact
from .._encode.encoder import (
    EncodeCall,
    Encoded,
    Encoder,
    MarkerStyle,
    Strategy,
    Truncation,
    encode,
    encode_replaying,
    pointer,
)
from .._encode.markers import Markers
from .._encode.strings import SURROGATE, replaced_note
from .._encode.whole import JsonWriter
from .._frozen import Record, fast_constructor
from .._limits import DEFAULT_MAX_DEPTH, MAX_LIMIT, MIN_BYTES, Limits, check_int, check_mode
from .._loops import off_loop, running_loop
from .._reader import MAX_EMPTY_CHUNKS, read_bounded_text
from .._sources.jsonread import load_json
from ..errors import DecodeError, EncodeError, LimitError, SpillError
from .reader import (
    PARSE_ERRORS,
    SURROGATE_ESCAPE,
    LongIntsAsExponents,
    ResultReader,
    long_digit_run,
)
from .spill import MAX_LABEL_CHARS, SpillBackend, SpillRef, SpillStore
from .telemetry import safe_spill, safe_tool
from .tool_types import ToolDecorator

__all__ = [
    "DEFAULT_MAX_CALLS",
    "DEFAULT_PREVIEW_BYTES",
    "DEFAULT_READ_HINT",
    "READ_RESULT_HINT",
    "STORE_READ_HINT",
    "Admitted",
    "GateResult",
    "ResultGate",
    "ResultKind",
    "TurnBudget",
    "TurnReport",
    "bounded_tool",
    "gate_result",
]

ResultKind = Literal["auto", "json", "text"]
ToolOutput = Literal["str", "json", "bytes"]
AdmitReason = Literal["fits", "result_limit", "turn_limit"]

#: A spilled result's preview (reference included) is at most this many bytes by default.
DEFAULT_PREVIEW_BYTES = 4096
#: What a preview tells its reader about getting the rest.
DEFAULT_READ_HINT = "read more with SpillStore.read(ref, offset, limit)"
#: The hint when the gate has a `ResultReader`: the reference is one for `read_result`.
READ_RESULT_HINT = "read more with read_result(ref, pointer, cursor)"
#: The hint for a store that is not a `SpillStore`: the built-in one's class is not what
#: reads it back. No longer than the default: the smallest preview stays 425 bytes.
STORE_READ_HINT = "read more from the store: read(ref, offset, limit)"
#: `TurnBudget` keeps room for this many bare references per turn by default (fewer when
#: its limit holds fewer).
DEFAULT_MAX_CALLS = 8
_MAX_HINT_CHARS = 200
_STREAM_CHUNK = 1024 * 1024
# A JSON preview parses at most this much of the spilled file's beginning.
_JSON_PREFIX_MIN = 64 * 1024
_JSON_PREFIX_MAX = 4 * 1024 * 1024
_JSON_WS = b" \t\r\n"
_MEDIA = {"json": "application/json", "text": "text/plain"}
_TEXT_PREVIEW_MIN = 16
#: The characters of a spill reference an error message shows before "…".
_SHOWN_REF_CHARS: Final = 40
# The largest size a spill store's reference may state: what JSON writers take as an int.
_MAX_SPILL_SIZE = 2**63 - 1
# yajl (ijson's C backend) refuses integers beyond 64 bits; the Python backend does not.
_IJSON_PY = ijson.get_backend("python")
# The compiled walk's caps for a gate's pass-through check: its encoder's (a byte budget
# and the default depth; no item, key or field caps).
_GATE_CAPS: Caps = (DEFAULT_MAX_DEPTH, MAX_LIMIT, MAX_LIMIT, MAX_LIMIT, BOUNDED_SCALARS)


def _field(name: str, doc: str) -> Any:
    return property(operator.attrgetter("_" + name), doc=doc)


class GateResult(Record):
    """What `ResultGate` hands on: the result unchanged, or a preview and its spill reference.

    ``text`` is what goes to the model (``data`` is the same, as UTF-8 bytes, for byte
    transports); ``size`` is the whole result's size in bytes (its JSON encoding for
    Python objects); ``spill`` is None when it passed through, and ``shown_ref`` the
    name the model was shown for it (see `ResultGate`'s ``reader``); ``truncations``
    reports every cut marked in ``data`` (empty when nothing was cut).
    """

    __slots__ = ("_data", "_kind", "_shown_ref", "_size", "_spill", "_truncations")
    _fields = ("data", "kind", "size", "spill", "shown_ref", "truncations")
    __match_args__ = ("data", "kind", "size", "spill", "shown_ref", "truncations")

    def __init__(  # noqa: PLR0917 - one positional field each, as the record has
        self,
        data: bytes,
        kind: Literal["json", "text"],
        size: int,
        spill: SpillRef | None,
        shown_ref: str | None = None,
        truncations: tuple[Truncation, ...] = (),
    ) -> None:
        self._data = data
        self._kind: Literal["json", "text"] = kind
        self._size = size
        self._spill = spill
        self._shown_ref = shown_ref if spill is not None else None
        self._truncations = truncations

    data: bytes = _field("data", "The bytes that go on: the result, or its preview.")
    kind: Literal["json", "text"] = _field("kind", "Whether ``data`` is JSON or text.")
    size: int = _field("size", "The whole result's size in bytes.")
    spill: SpillRef | None = _field("spill", "The spilled result's reference, or None.")
    shown_ref: str | None = _field(
        "shown_ref", "The spill's name as the model was shown it (a reader's bound one)."
    )
    truncations: tuple[Truncation, ...] = _field(
        "truncations", "Every cut marked in ``data``, its path a JSON Pointer into ``data``."
    )

    @property
    def spilled(self) -> bool:
        return self._spill is not None

    @property
    def text(self) -> str:
        return self._data.decode("utf-8")

    def summary(self) -> dict[str, Any]:
        """Sizes, kind, the number of cuts and the reference, never the content: safe for logs.

        The reference is shown as `summarize` shows it (its ``ref`` only where its label
        is a short identifier): one rule for both.
        """
        return {
            "kind": self._kind,
            "size": self._size,
            "bytes": len(self._data),
            "truncations": len(self._truncations),
            "spill": None if self._spill is None else safe_spill(self._spill),
        }


class Admitted(Record):
    """One result admitted to a turn and what `TurnBudget` did with it.

    ``reason`` is ``"fits"`` (passed unchanged), ``"result_limit"`` (over the per-result
    limit: spilled) or ``"turn_limit"`` (would have pushed the turn past its limit:
    spilled). ``over_budget`` is true only when the turn had already answered
    ``max_calls`` calls and not even the bare reference fitted what was left; it was
    admitted anyway, since every tool call needs an answer. ``truncations`` reports
    every cut marked in ``data``, as `GateResult`'s.
    """

    __slots__ = ("_admitted_bytes", "_data", "_kind", "_over_budget", "_reason",
                 "_shown_ref", "_size", "_spill", "_tool", "_truncations")  # fmt: skip
    _fields = ("tool", "data", "kind", "size", "admitted_bytes", "spill", "reason",
               "over_budget", "shown_ref", "truncations")  # fmt: skip
    __match_args__ = ("tool", "data", "kind", "size", "admitted_bytes", "spill", "reason",
                      "over_budget", "shown_ref", "truncations")  # fmt: skip

    def __init__(  # noqa: PLR0917 - one positional field each, as the record has
        self,
        tool: str,
        data: bytes,
        kind: Literal["json", "text"],
        size: int,
        admitted_bytes: int,
        spill: SpillRef | None,
        reason: AdmitReason,
        over_budget: bool,
        shown_ref: str | None = None,
        truncations: tuple[Truncation, ...] = (),
    ) -> None:
        self._tool = tool
        self._data = data
        self._kind: Literal["json", "text"] = kind
        self._size = size
        self._admitted_bytes = admitted_bytes
        self._spill = spill
        self._reason: AdmitReason = reason
        self._over_budget = over_budget
        self._shown_ref = shown_ref if spill is not None else None
        self._truncations = truncations

    tool: str = _field("tool", "The tool (the label) the result came from.")
    data: bytes = _field("data", "The bytes admitted: the result, or its preview.")
    kind: Literal["json", "text"] = _field("kind", "Whether ``data`` is JSON or text.")
    size: int = _field("size", "The whole result's size in bytes.")
    admitted_bytes: int = _field("admitted_bytes", "What the turn counted for it.")
    spill: SpillRef | None = _field("spill", "The spilled result's reference, or None.")
    reason: AdmitReason = _field("reason", "Why it was admitted as it was.")
    over_budget: bool = _field("over_budget", "Whether it passed the turn's limit.")
    shown_ref: str | None = _field(
        "shown_ref", "The spill's name as the model was shown it (a reader's bound one)."
    )
    truncations: tuple[Truncation, ...] = _field(
        "truncations", "Every cut marked in ``data``, its path a JSON Pointer into ``data``."
    )

    @property
    def text(self) -> str:
        return self._data.decode("utf-8")

    def summary(self) -> dict[str, Any]:
        """Sizes, reason, the number of cuts and the reference, never the content: safe
        for logs. The tool's name and the reference are shown as `summarize` shows them
        (only a short identifier, and a ref only where the tool's name is one)."""
        return {
            "tool": safe_tool(self._tool),
            "size": self._size,
            "admitted_bytes": self._admitted_bytes,
            "reason": self._reason,
            "over_budget": self._over_budget,
            "truncations": len(self._truncations),
            "spill": None if self._spill is None else safe_spill(self._spill, self._tool),
        }


#: The records the fast paths hand on, built without their ``__init__`` (see `_frozen`),
#: ``truncations`` first. The compiled pass-through (`clean_result`) calls its *make*
#: with the five other fields: a partial gives the empty report of a value that passed
#: whole, and every slot is still filled, so the record stays out of the cycle collector.
_new_gate_result: Callable[..., GateResult] = fast_constructor(
    GateResult, tuple("_" + name for name in ("truncations", *GateResult._fields[:-1]))
)
_passed_whole: Callable[..., GateResult] = functools.partial(_new_gate_result, ())
_new_admitted: Callable[..., Admitted] = fast_constructor(
    Admitted, tuple("_" + name for name in Admitted._fields)
)


@dataclass(frozen=True, slots=True)
class TurnReport:
    """The state of one turn: its limit, what was used, and every admitted result."""

    max_bytes: int
    used_bytes: int
    results: tuple[Admitted, ...]

    @property
    def spilled(self) -> int:
        return sum(1 for r in self.results if r.spill is not None)

    @property
    def over_budget(self) -> bool:
        return self.used_bytes > self.max_bytes

    def summary(self) -> dict[str, Any]:
        """Counts and sizes, never the content: safe for logs."""
        return {
            "max_bytes": self.max_bytes,
            "used_bytes": self.used_bytes,
            "results": len(self.results),
            "spilled": self.spilled,
            "items": [r.summary() for r in self.results],
        }


_NO_OBJECT: Any = object()


class _Measured:
    """A result sized against a limit: either whole in ``data``, or a way to stream it.

    ``call`` is the encoder call that sized a Python value: it holds what the size check
    read from nested iterators, so the preview and the spill replay those items.
    ``truncations`` are the cuts marked in a whole ``data`` (a value's unencodable ones).
    """

    __slots__ = ("call", "chunks", "data", "kind", "obj", "truncations")

    def __init__(
        self,
        kind: Literal["json", "text"],
        *,
        data: bytes | None = None,
        chunks: Iterable[bytes | bytearray | memoryview] | None = None,
        obj: Any = _NO_OBJECT,
        call: EncodeCall | None = None,
        truncations: tuple[Truncation, ...] = (),
    ) -> None:
        self.kind: Literal["json", "text"] = kind
        self.data = data
        self.chunks = chunks
        self.obj = obj
        self.call = call
        self.truncations = truncations


class ResultGate:
    """Pass small results through unchanged; spill large ones whole and show a preview.

    A result is bytes, a str, an iterator of byte chunks, a binary file, or any other
    Python value (encoded as JSON). One at most ``max_bytes`` long passes through
    unchanged. A larger one is written whole to *store* (a private `SpillStore` by
    default, created on first use) and replaced by a preview of at most ``preview_bytes``
    that names its reference, size and sha256.
    """

    __slots__ = (
        "_bare_bytes",
        "_default",
        "_encoder",
        "_kind",
        "_lock",
        "_max_bytes",
        "_preview_bytes",
        "_principal",
        "_read_hint",
        "_reader",
        "_store",
        "_worst_json_overhead",
    )

    def __init__(
        self,
        *,
        max_bytes: int,
        store: SpillBackend | None = None,
        preview_bytes: int | None = None,
        kind: ResultKind = "auto",
        read_hint: str | None = None,
        default: Callable[[Any], Any] | None = None,
        reader: ResultReader | None = None,
        principal: str | Callable[[], str] = "anonymous",
    ) -> None:
        self._max_bytes = check_int("max_bytes", max_bytes, minimum=MIN_BYTES)
        if reader is not None and not isinstance(reader, ResultReader):
            raise TypeError(f"reader must be a ResultReader, not {type(reader).__name__}")
        if not (isinstance(principal, str) or callable(principal)):
            raise TypeError(
                f"principal must be a str or a callable, not {type(principal).__name__}"
            )
        self._reader = reader
        self._principal = principal
        if reader is not None:
            if store is not None and store is not reader.spill:
                raise LimitError("store", store, "must be the reader's spill store")
            store = reader.spill  # the reader reads what this gate spills
        if read_hint is None:
            if reader is not None:
                read_hint = READ_RESULT_HINT
            elif store is None or isinstance(store, SpillStore):
                read_hint = DEFAULT_READ_HINT
            else:
                read_hint = STORE_READ_HINT
        check_mode("kind", kind, ("auto", "json", "text"))
        if not isinstance(read_hint, str) or len(read_hint) > _MAX_HINT_CHARS:
            raise LimitError("read_hint", str(read_hint)[:40], "must be a str of at most 200 chars")
        lone = _lone_surrogate(read_hint)
        if lone is not None:
            # Every answer that names the spill carries the hint as UTF-8.
            raise LimitError(
                "read_hint", read_hint[:40], f"holds a lone surrogate at character {lone}"
            )
        if store is not None and not isinstance(store, SpillBackend):
            raise TypeError(f"store must be a spill store, not {type(store).__name__}")
        if default is not None and not callable(default):
            raise TypeError(f"default must be callable, not {type(default).__name__}")
        self._read_hint = read_hint
        self._kind: ResultKind = kind
        self._default = default
        # Built once: the pass-through check runs for every result.
        self._encoder = Encoder(max_bytes=self._max_bytes, default=default)
        self._store = store
        self._lock = threading.Lock()
        # The largest reference a preview can carry (64-char label, 13-digit size).
        worst = SpillRef("x" * MAX_LABEL_CHARS + "." + "0" * 64 + ".json", MAX_LIMIT, "0" * 64,
                         "application/json", "x", _NO_PATH)  # fmt: skip
        json_overhead = len(_json_preview(b"0", worst, read_hint)) - 1
        self._worst_json_overhead = json_overhead
        text_overhead = len(_text_footer(worst, MAX_LIMIT, read_hint)) + 1
        smallest = max(json_overhead + MIN_BYTES, text_overhead + _TEXT_PREVIEW_MIN)
        self._bare_bytes = max(len(_bare_json(worst)), len(_bare_text(worst)))
        if preview_bytes is None:
            preview_bytes = max(min(DEFAULT_PREVIEW_BYTES, self._max_bytes), smallest)
        check_int("preview_bytes", preview_bytes, minimum=smallest)
        if preview_bytes > self._max_bytes >= smallest:
            # max_bytes holds some preview: the one asked for is what is too large.
            raise LimitError(
                "preview_bytes", preview_bytes, _preview_over("max_bytes", self._max_bytes)
            )
        if preview_bytes > self._max_bytes:
            raise LimitError(
                "max_bytes",
                max_bytes,
                f"must be at least preview_bytes ({preview_bytes}), which holds a preview and "
                f"its reference",
            )
        self._preview_bytes = preview_bytes

    @property
    def max_bytes(self) -> int:
        return self._max_bytes

    @property
    def preview_bytes(self) -> int:
        return self._preview_bytes

    @property
    def default(self) -> Callable[[Any], Any] | None:
        """The ``default`` hook results are encoded with (None: markers only)."""
        return self._default

    @property
    def bare_reference_bytes(self) -> int:
        """The most bytes the shortest answer for a spilled result (its bare reference) takes."""
        return self._bare_bytes

    @property
    def store(self) -> SpillBackend:
        """The spill store, created (a private default one) on first use."""
        with self._lock:
            if self._store is None:
                self._store = SpillStore()
            return self._store

    def gate(self, result: Any, *, label: str = "result") -> GateResult:
        """Pass *result* through if it fits ``max_bytes``, else spill it; see the class."""
        if type(label) is not str:  # checked first: a stream would be read before a spill
            _check_label("label", label)
        # A clean value that fits: one compiled walk and one orjson call, nothing else.
        passed: GateResult | None = clean_result(
            result, self._max_bytes, _GATE_CAPS, _FAST_TYPES, _passed_whole, "json"
        )
        if passed is not None:
            return passed
        measured = self._measure(result)
        if measured.data is not None:
            return GateResult(measured.data, measured.kind, len(measured.data), None, None,
                              measured.truncations)  # fmt: skip
        return self._spill(measured, label=label, budget=self._preview_bytes)

    async def agate(self, result: Any, *, label: str = "result") -> GateResult:
        """`gate` in a worker thread, so spilling to disk does not block the event loop."""
        if type(result) is LoopItems:  # not isinstance: an ABC, which hashes the class
            return await result.drive(functools.partial(self.gate, result, label=label))
        return await off_loop(functools.partial(self.gate, result, label=label))

    # -- internals shared with TurnBudget ------------------------------------------------

    def _measure(self, result: Any) -> _Measured:
        limit = self._max_bytes
        view = _byte_view(result) if isinstance(result, bytes | bytearray | memoryview) else None
        if view is not None:
            kind = self._sniff(view[:4096])
            if len(view) <= limit and _is_utf8(view):
                return _Measured(kind, data=result if isinstance(result, bytes) else bytes(view))
            # Too big, or not UTF-8 (binary data): spilled, and the preview shows the
            # valid text before the first bad byte, as for a big result.
            return _Measured(kind, chunks=(view,))
        if isinstance(result, str):
            # A str holding lone surrogates is text, whatever it starts as: each becomes
            # U+FFFD and a note ends it, and no JSON text ends so (one sniffed as JSON
            # was passed on as JSON that no parser reads, and spilled as such).
            if not result.isascii() and SURROGATE.search(result) is not None:
                kind = "text"
            else:
                kind = self._sniff(result[:4096].encode("utf-8", "replace"))
            if len(result) <= limit:  # a char is at least one byte: only then can it fit
                data, replaced = _text_bytes(result)
                if replaced:
                    data += replaced_note(replaced)
                if len(data) <= limit:
                    note = (_truncation("", "unencodable", replaced, "chars"),) if replaced else ()
                    return _Measured(kind, data=data, truncations=note)
                return _Measured(kind, chunks=(data,))
            return _Measured(kind, chunks=_str_chunks(result))
        if hasattr(result, "read") or _is_iterator(result):
            return self._measure_stream(_stream_chunks(result), limit)
        if _awaited_only(result):
            # Its items can only be awaited: encoded, it would be one unencodable marker
            # and every item lost (as bounded_tool refuses it).
            raise TypeError(
                f"a result cannot be an async iterable ({type(result).__name__}): its items "
                "are awaited, not read; collect them into a list, or return a sync iterator"
            )
        # Any other value is JSON; the compiled walk costs at most the limit.
        fast = clean_dumps(result, limit, 0, _GATE_CAPS, None, True)
        if type(fast) is bytes:
            return _Measured("json", data=fast)
        if fast == TOO_BIG:
            return _Measured("json", obj=result)
        # Not clean: the renderer decides, pulling nested iterators only as far as the
        # limit needs. What it pulled is kept, so the spill replays it.
        call = EncodeCall(self._encoder)
        out = call.render_whole(result, limit, "")
        cuts: list[Truncation] = []
        if out is not None:
            call.reports(out[1], "", cuts, _truncation)
        if out is not None and all(cut.kind == "unencodable" for cut in cuts):
            # Marked unencodable values are the encoder's answer for them at any size.
            data = out[0]
            return _Measured("json", data=compact(data), truncations=tuple(cuts))
        return _Measured("json", obj=result, call=call)

    def _measure_stream(self, chunks: Iterator[memoryview], limit: int) -> _Measured:
        head: list[memoryview] = []
        held = 0
        for chunk in chunks:
            if not chunk:
                continue  # an empty chunk says nothing about the kind (nor the size)
            head.append(chunk)
            held += len(chunk)
            if held > limit:
                kind = self._sniff(bytes(head[0][:4096]))
                return _Measured(kind, chunks=itertools.chain(head, chunks))
        data = b"".join(head)
        kind = self._sniff(data[:4096])
        # Checked joined, not chunk by chunk: a character may be split between chunks,
        # and one cut short at the end is as invalid as any bad byte. Not UTF-8 (binary
        # data), it is spilled whatever its size, as a bytes result is.
        if not _is_utf8(data):
            return _Measured(kind, chunks=(data,))
        return _Measured(kind, data=data)

    def _sniff(self, head: bytes | memoryview) -> Literal["json", "text"]:
        if self._kind != "auto":
            return self._kind
        first = bytes(head).lstrip(_JSON_WS)[:1]
        return "json" if first in (b"{", b"[") else "text"

    def _spill(self, measured: _Measured, *, label: str, budget: int) -> GateResult:
        """Write the whole result to the store and build a preview of at most *budget* bytes.

        When *budget* cannot hold a preview, the reference alone is returned, and when it
        cannot hold that, the bare reference (at most `bare_reference_bytes` for the
        built-in stores' names; it may exceed *budget*, which `TurnBudget` reports). A
        bare reference longer than ``max_bytes`` (a store's own, longer names) raises
        `LimitError`: no answer of a gate passes its limit.
        """
        gated = self._spilled(measured, label=label, budget=budget)
        if len(gated.data) > self._max_bytes:
            shown = gated.shown_ref or ""
            raise LimitError(
                "store",
                self.store,
                f"its reference to the spilled result ({len(shown)} characters as shown: "
                f"{shown[:_SHOWN_REF_CHARS]!r}{'…' if len(shown) > _SHOWN_REF_CHARS else ''}) "
                "makes a bare reference of "
                f"{len(gated.data)} bytes, and a result may take {self._max_bytes}; the "
                "result is stored under it",
            )
        return gated

    def _spilled(self, measured: _Measured, *, label: str, budget: int) -> GateResult:
        store = self.store
        if measured.obj is not _NO_OBJECT:
            # The preview is rendered before the spill and by the same call as the size
            # check, so every item it pulls from a nested iterator is also replayed into
            # the file: nothing read is lost, nothing is read twice.
            call = measured.call if measured.call is not None else EncodeCall(self._encoder)
            value_budget = budget - self._worst_json_overhead
            out = None
            if value_budget >= MIN_BYTES:
                out = call.fit(measured.obj, value_budget, "")
            writer = JsonWriter(self._default, call.streams, _file_limit(store))
            ref = _stored(store, store.put(writer.chunks(measured.obj), label=label,
                                           media_type=_MEDIA["json"]))  # fmt: skip
            # The encoder writes each key of an object once: no pointer into this result
            # needs to read an object to its end for a later member with its key.
            named = self._named(ref, unique_keys=True)
            if out is None:
                return GateResult(self._reference_only(named, budget), "json", ref.size, ref,
                                  named.ref)  # fmt: skip
            data = _json_preview(out[0], named, self._read_hint)
            if len(data) > budget:
                # The preview was fitted beside the longest name the built-in stores make;
                # this store's (or the reader's) is longer. Fitted again from the file,
                # not the value: its iterators were read into the file.
                return self._file_preview(ref, named, budget)
            cuts: list[Truncation] = []
            call.reports(out[1], _PREVIEW, cuts, _truncation)
            return GateResult(data, "json", ref.size, ref, named.ref, tuple(cuts))
        chunks: Iterable[bytes | bytearray | memoryview] = (
            measured.chunks if measured.chunks is not None else (measured.data or b"",)
        )
        kind = measured.kind
        if kind == "json":
            # What starts with { or [ may still be no one JSON value (JSON Lines, a value
            # and more): stored as JSON, the reader would read its first value and call
            # it complete. Its first bytes, parsed, decide.
            head, whole, chunks = _head_of(chunks, _SNIFF_BYTES)
            if _parse_json_prefix(head, whole) is None:
                kind = "text"
        ref = _stored(store, store.put(chunks, label=label, media_type=_MEDIA[kind]))
        named = self._named(ref)
        if kind == "json":
            return self._file_preview(ref, named, budget)
        text = self._text_preview(ref, named, budget)
        return GateResult(text, "text", ref.size, ref, named.ref)

    def _file_preview(self, ref: SpillRef, named: SpillRef, budget: int) -> GateResult:
        """The preview of a file spilled as JSON: a JSON one, or text if it is none."""
        preview = self._json_preview(ref, named, budget)
        if preview is not None:
            return GateResult(preview[0], "json", ref.size, ref, named.ref, preview[1])
        text = self._text_preview(ref, named, budget)
        return GateResult(text, "text", ref.size, ref, named.ref)

    def _named(self, ref: SpillRef, *, unique_keys: bool = False) -> SpillRef:
        """*ref* as the model sees it: with a reader, its name is a bound reference."""
        if self._reader is None:
            return ref
        principal = self._principal() if callable(self._principal) else self._principal
        token = self._reader.reference(ref, principal=principal, unique_keys=unique_keys)
        return dataclasses.replace(ref, ref=token)

    def _reference_only(self, ref: SpillRef, budget: int) -> bytes:
        info = orjson.dumps({"spilled": _spilled_info(ref, self._read_hint)})
        return info if len(info) <= budget else _bare_json(ref)

    def _json_preview(
        self, ref: SpillRef, named: SpillRef, budget: int
    ) -> tuple[bytes, tuple[Truncation, ...]] | None:
        """A preview of a spilled JSON file, parsed from its beginning, and its cuts; None
        if not JSON."""
        value_budget = budget - (len(_json_preview(b"0", named, self._read_hint)) - 1)
        if value_budget < MIN_BYTES:
            return self._reference_only(named, budget), ()
        span = min(_JSON_PREFIX_MAX, max(_JSON_PREFIX_MIN, 8 * value_budget))
        parsed = _parse_json_prefix(_read(self.store, ref.ref, span), ref.size <= span)
        if parsed is None:
            return None  # not JSON after all: a text preview says what it is
        value, open_paths = parsed
        shown = encode(value, max_bytes=value_budget, default=self._default)
        data, cuts = _unknown_counts(shown, open_paths)
        return _json_preview(data, named, self._read_hint), cuts

    def _text_preview(self, ref: SpillRef, named: SpillRef, budget: int) -> bytes:
        text_budget = budget - len(_text_footer(named, ref.size, self._read_hint)) - 1
        if text_budget < _TEXT_PREVIEW_MIN:
            footer = _text_footer(named, 0, self._read_hint)
            return footer if len(footer) <= budget else _bare_text(named)
        raw = _read(self.store, ref.ref, text_budget + 1)
        try:
            text = read_bounded_text(raw, text_budget).text
        except DecodeError as exc:
            # Binary or broken text: show the valid part before the first bad byte.
            text = raw[: exc.offset].decode("utf-8")
        line_end = text.rfind("\n")
        if line_end >= 0:
            text = text[: line_end + 1]
        shown = text.encode("utf-8")
        sep = b"" if not shown or shown.endswith(b"\n") else b"\n"
        return shown + sep + _text_footer(named, len(shown), self._read_hint)


def _preview_over(name: str, limit: int) -> str:
    """Why a ``preview_bytes`` over the limit *name* (*limit*) is refused."""
    return f"must be at most {name} ({limit}): a preview stands in for the result"


def _check_label(name: str, value: object) -> None:
    """Refuse a label that is not a str (a subclass is one), before any of the result is
    read: a stream's chunks taken before the spill refused it would be lost."""
    if not isinstance(value, str):
        raise TypeError(f"{name} must be a str, not {type(value).__name__}")


_FAST_TYPES = frozenset({dict, list, tuple, int, float, bool, type(None)})


def _fast_type(value: object) -> bool:
    """Whether *value*'s type is one of `_FAST_TYPES`: `has_class` inlined (a call less
    on every admit), False, not raising, where a metaclass makes its class unhashable."""
    try:
        return type(value) in _FAST_TYPES
    except MemoryError:
        raise  # the interpreter's, not the class's (see `has_class`)
    except Exception:  # noqa: BLE001 - the metaclass's own error: not one of these
        return False


def gate_result(
    result: Any,
    /,
    *,
    max_bytes: int,
    store: SpillBackend | None = None,
    label: str = "result",
    preview_bytes: int | None = None,
    kind: ResultKind = "auto",
    read_hint: str | None = None,
    default: Callable[[Any], Any] | None = None,
    reader: ResultReader | None = None,
    principal: str | Callable[[], str] = "anonymous",
) -> GateResult:
    """One-call `ResultGate`: pass *result* through or spill it; see `ResultGate`."""
    if (
        _fast_type(result)
        and type(max_bytes) is int
        and max_bytes >= DEFAULT_PREVIEW_BYTES
        and store is None
        and type(label) is str
        and preview_bytes is None
        and kind == "auto"
        and read_hint is None
        and default is None
        and reader is None
        and isinstance(principal, str)
    ):
        # A clean value that fits needs no gate. With these options (the defaults, and a
        # limit that holds the default preview) the gate would accept them all.
        check_int("max_bytes", max_bytes, minimum=MIN_BYTES)
        data = clean_dumps(result, max_bytes, 0, _GATE_CAPS, None, True)
        if type(data) is bytes:
            return _new_gate_result((), data, "json", len(data), None, None)
    gate = ResultGate(
        max_bytes=max_bytes,
        store=store,
        preview_bytes=preview_bytes,
        kind=kind,
        read_hint=read_hint,
        default=default,
        reader=reader,
        principal=principal,
    )
    return gate.gate(result, label=label)


class _Turn:
    """One turn's counts: bytes used, calls answered (or being answered), and the results
    admitted. `TurnBudget.reset` starts another; a call keeps the one it started in."""

    __slots__ = ("calls", "results", "used")

    def __init__(self) -> None:
        self.used = 0
        self.calls = 0
        self.results: list[Admitted] = []


class TurnBudget:
    """Admit the results of one turn within ``max_bytes``, spilling what would overflow.

    Results are admitted first come, first served; parallel calls from threads or asyncio
    tasks are safe (the accounting is under a lock, and a spill reserves its room before
    writing). The limit keeps room for the bare references of up to ``max_calls`` calls,
    so a turn of at most ``max_calls`` calls never passes ``max_bytes``, however many run
    at once. A result over ``max_result_bytes`` (default: ``max_bytes``) is spilled as by
    `ResultGate`; one that fits it but not what is left of the turn is spilled too, its
    preview cut to what is left.
    """

    __slots__ = ("_bare", "_counting", "_gate", "_lock", "_max_bytes", "_max_calls", "_running",
                 "_runs", "_turn")  # fmt: skip

    def __init__(
        self,
        *,
        max_bytes: int,
        store: SpillBackend | None = None,
        max_result_bytes: int | None = None,
        max_calls: int | None = None,
        preview_bytes: int | None = None,
        kind: ResultKind = "auto",
        read_hint: str | None = None,
        default: Callable[[Any], Any] | None = None,
        reader: ResultReader | None = None,
        principal: str | Callable[[], str] = "anonymous",
    ) -> None:
        self._max_bytes = check_int("max_bytes", max_bytes, minimum=MIN_BYTES)
        name = "max_bytes"  # what the gate's limit is, as the caller spelled it
        if max_result_bytes is None:
            max_result_bytes = max_bytes
        elif check_int("max_result_bytes", max_result_bytes, minimum=MIN_BYTES) > max_bytes:
            raise LimitError("max_result_bytes", max_result_bytes, "must be <= max_bytes")
        else:
            name = "max_result_bytes"
        try:
            self._gate = ResultGate(
                max_bytes=max_result_bytes,
                store=store,
                preview_bytes=preview_bytes,
                kind=kind,
                read_hint=read_hint,
                default=default,
                reader=reader,
                principal=principal,
            )
        except LimitError as exc:
            if name == "max_bytes":
                raise
            # The gate's max_bytes is this turn's max_result_bytes: named as it was given.
            if exc.name == "max_bytes":
                raise LimitError(name, max_result_bytes, exc.reason) from None
            if exc.reason == _preview_over("max_bytes", max_result_bytes):
                raise LimitError(
                    "preview_bytes", preview_bytes, _preview_over(name, max_result_bytes)
                ) from None
            raise
        self._bare = self._gate.bare_reference_bytes
        if max_calls is None:
            # As many as the turn holds references for, up to the default.
            max_calls = max(1, min(DEFAULT_MAX_CALLS, max_bytes // self._bare))
        self._max_calls = check_int("max_calls", max_calls, minimum=1, maximum=10_000)
        if self._bare * max_calls > max_bytes:
            raise LimitError(
                "max_calls",
                max_calls,
                f"the turn must hold a bare reference ({self._bare} bytes) for each call: at "
                f"most {max_bytes // self._bare} calls fit max_bytes={max_bytes}",
            )
        self._fresh()

    def _fresh(self) -> None:
        """Give this budget state of its own: a turn with nothing admitted, no runs."""
        self._lock = threading.Lock()
        self._turn = _Turn()
        # id of a run's key object -> that run's turn (see `run_turn`).
        self._runs: dict[int, TurnBudget] = {}
        # The adapters' tool calls on this turn now running (see `running_call`), under a
        # lock of their own, reentrant: a call dropped unfinished ends (its `finally`)
        # wherever a collection finds it, with the turn's lock held in `admit` too.
        self._running = 0
        self._counting = threading.RLock()

    def __copy__(self) -> TurnBudget:
        # A copy shared the turn (and its lock): a template's copies, one per
        # conversation, spilled each other's results as over the turn's limit. A copy is
        # a budget of its own: the same limits, gate and store, nothing admitted yet.
        # Every attribute, a subclass's too (the adapters copy a budget for each run),
        # then state of its own.
        run = object.__new__(type(self))
        own, slots = cast("tuple[dict[str, Any] | None, dict[str, Any]]", object.__getstate__(self))
        for name, value in slots.items():
            object.__setattr__(run, name, value)
        if own:
            run.__dict__.update(own)
        run._fresh()
        return run

    def __deepcopy__(self, memo: dict[int, Any]) -> TurnBudget:
        # The gate and its store are configuration and a place to write to, not state of
        # the turn: shared, as `copy.copy` shares them (a store holds locks and files).
        return self.__copy__()

    def __reduce_ex__(self, protocol: SupportsIndex) -> NoReturn:
        raise TypeError(
            "a TurnBudget cannot be pickled: its turn and its spill store belong to this "
            "process; make one TurnBudget in each process (copy.copy gives one with the "
            "same limits and store and a turn of its own)"
        )

    @property
    def gate(self) -> ResultGate:
        return self._gate

    @property
    def max_bytes(self) -> int:
        return self._max_bytes

    @property
    def max_calls(self) -> int:
        return self._max_calls

    @property
    def remaining(self) -> int:
        """Bytes the next result may take (room kept for the other calls' references)."""
        with self._lock:
            return max(0, self._room(self._turn))

    def _room(self, turn: _Turn) -> int:
        # Bytes the next call may use: what is left, less a bare reference for each call
        # after it that the turn still promises to answer.
        later = max(0, self._max_calls - turn.calls - 1)
        return self._max_bytes - turn.used - later * self._bare

    def admit(self, result: Any, *, tool: str = "result") -> Admitted:
        """Admit one result of this turn; see the class for what happens to it."""
        if type(tool) is not str:  # checked first: a stream would be read before a spill
            _check_label("tool", tool)
        # The turn this call belongs to, taken before any of the result is read: a reset
        # while it is read (a cancelled aadmit's thread goes on) starts another turn,
        # whose counts the call must not change.
        turn = self._turn
        if _fast_type(result):
            # A clean value that fits the result limit: one compiled walk and one orjson call.
            fast = clean_dumps(result, self._gate._max_bytes, 0, _GATE_CAPS, None, True)
            if type(fast) is bytes:
                size = len(fast)
                counted = False  # as in `_admit_to`: what raises once counted gives it back
                try:
                    # `with`, though acquire/release cost 90 ns less: an interrupt as
                    # acquire returned, before the `try` that releases it, left the lock
                    # held and every later call of the budget waiting on it.
                    with self._lock:
                        later = self._max_calls - turn.calls - 1
                        kept = (later if later > 0 else 0) * self._bare
                        if size <= self._max_bytes - turn.used - kept:
                            admitted = _new_admitted(tool, fast, "json", size, size, None,
                                                     "fits", False, None, ())  # fmt: skip
                            calls, used = turn.calls + 1, turn.used + size
                            turn.calls, turn.used, counted = calls, used, True
                            turn.results.append(admitted)
                            return admitted
                except BaseException:
                    if counted:
                        self._give_back(turn, size, admitted)
                    raise
        return self._admit_to(turn, result, tool)

    def _admit_to(self, turn: _Turn, result: Any, tool: str) -> Admitted:
        """`admit` of a result of *turn*, counted there whether or not it is still the
        current turn."""
        measured = self._gate._measure(result)
        preview = self._gate.preview_bytes
        # The call's count in *turn* and its give-back are one unit: whatever raises
        # before the answer is handed back (a failed spill, a MemoryError building the
        # answer, an interrupt as the lock is released) gives back what was counted, the
        # call's slot with it. Each change of the counts is made by stores on one line,
        # with what `_give_back` needs (*charged* bytes, -1 for no slot taken; *listed*,
        # the answer in the results), so that no exception can come between them.
        charged = -1
        listed: Admitted | None = None
        try:
            with self._lock:
                room = self._room(turn)
                data = measured.data
                if data is not None and len(data) <= room:
                    size = len(data)
                    admitted = Admitted(tool, data, measured.kind, size, size, None, "fits",
                                        False, None, measured.truncations)  # fmt: skip
                    calls, used = turn.calls + 1, turn.used + size
                    turn.calls, turn.used, charged, listed = calls, used, size, admitted
                    turn.results.append(admitted)
                    return admitted
                reason: AdmitReason = "result_limit" if data is None else "turn_limit"
                reserved = max(0, min(preview, room))
                calls, used = turn.calls + 1, turn.used + reserved
                turn.calls, turn.used, charged = calls, used, reserved
            gated = self._gate._spill(measured, label=tool, budget=reserved)
            size = len(gated.data)
            admitted = Admitted(tool, gated.data, gated.kind, gated.size, size, gated.spill,
                                reason, size > reserved, gated.shown_ref,
                                gated.truncations)  # fmt: skip
            with self._lock:
                used = turn.used + size - reserved
                turn.used, charged, listed = used, size, admitted
                turn.results.append(admitted)
            return admitted
        except BaseException:
            if charged >= 0:
                self._give_back(turn, charged, listed)
            raise

    async def aadmit(self, result: Any, *, tool: str = "result") -> Admitted:
        """`admit` in a worker thread, so a spill does not block the event loop.

        Cancelled (a framework's timeout), it counts nothing: its thread cannot be
        stopped and goes on, and what it admitted is given back when it ends."""
        if type(tool) is not str:
            _check_label("tool", tool)
        # The call belongs to the turn it is made in, not the one its thread starts in (a
        # busy pool may start it after the next reset).
        turn = self._turn
        # An answer the caller never gets must not count: a timed-out call of an agent
        # framework is answered again (its timeout message), and counted twice it took a
        # call's room and slot from the turn, which then passed its limit.
        handoff = _Handoff(functools.partial(self._give_back_answer, turn))
        admit = functools.partial(
            handoff.run, functools.partial(self._admit_to, turn, result, tool)
        )
        try:
            if type(result) is LoopItems:  # not isinstance: an ABC, which hashes the class
                return await result.drive(admit)
            return await off_loop(admit)
        except BaseException:
            handoff.abandon()
            raise

    def _give_back_answer(self, turn: _Turn, admitted: Admitted) -> None:
        """Undo the count in *turn* of an answer no one received (see `aadmit`)."""
        self._give_back(turn, admitted.admitted_bytes, admitted)

    def _give_back(self, turn: _Turn, charged: int, listed: Admitted | None) -> None:
        """Undo a call's count in *turn*, which raised before its answer was handed back:
        its slot, the *charged* bytes, and *listed* (its answer) if in the results."""
        with self._lock:
            if listed is not None:
                results = turn.results
                for index in range(len(results) - 1, -1, -1):  # last, unless others came
                    if results[index] is listed:
                        del results[index]
                        break
            turn.used -= charged
            turn.calls -= 1

    def report(self) -> TurnReport:
        """What this turn has admitted so far."""
        with self._lock:
            turn = self._turn
            return TurnReport(self._max_bytes, turn.used, tuple(turn.results))

    def reset(self) -> TurnReport:
        """Start a new turn; returns the report of the one that ended.

        A call of the ended turn still going on is counted there, in no report, and
        changes nothing of the new turn."""
        with self._lock:
            turn = self._turn
            self._turn = _Turn()
            return TurnReport(self._max_bytes, turn.used, tuple(turn.results))

    def for_run(self) -> TurnBudget:
        """This budget with a turn of its own: the same limits, gate and store, nothing
        admitted yet. An adapter keeps one for each agent run, so that concurrent runs of
        one agent neither reset nor fill each other's turns."""
        return copy.copy(self)

    def run_turn(self, key: object, *, start: bool = False) -> TurnBudget:
        """The turn of the run *key* stands for: its own once a call with *start* made it
        (`for_run`), kept while *key* lives; until then this budget itself.

        *key* is an object the run holds for its whole life and that takes a weak
        reference (the OpenAI Agents SDK's per-run ``Usage``).
        """
        index = id(key)
        with self._lock:
            found = self._runs.get(index)
            if found is not None or not start:
                return self if found is None else found
            found = self.for_run()
            # An id is reused once its object is gone: the entry goes with the object.
            # Removed without the lock: a collection may run the finalizer in a thread
            # that holds it.
            weakref.finalize(key, self._runs.pop, index, None)
            self._runs[index] = found
        return found

    @contextlib.contextmanager
    def running_call(self) -> Iterator[None]:
        """Counts a tool call on this turn as running while the block runs (see
        `calls_running`)."""
        counted = False
        try:
            # Inside the `try`: an interrupt as the lock is released left the call counted
            # as running for good, and the turn never ended.
            with self._counting:
                running = self._running + 1
                self._running, counted = running, True
            yield
        finally:
            if counted:
                with self._counting:
                    self._running -= 1

    @property
    def calls_running(self) -> int:
        """How many adapter tool calls on this turn are running: a model they call is
        part of this turn, and starts no new one."""
        with self._counting:
            return self._running

    new_turn = reset


_T = TypeVar("_T")


class _Handoff:
    """One admission's answer, from the thread that made it to the task awaiting it.

    Whichever comes second of the answer and the task's end without it (cancelled, or a
    timeout) hands the answer to *undo*: exactly once, whichever thread that is.
    """

    __slots__ = ("_abandoned", "_answer", "_lock", "_undo")

    def __init__(self, undo: Callable[[Any], object]) -> None:
        self._undo = undo
        self._lock = threading.Lock()
        self._abandoned = False
        self._answer: Any = _NO_OBJECT

    def run(self, call: Callable[[], _T]) -> _T:
        """*call*'s answer, in the admission's thread; undone if no one awaits it now."""
        answer = call()
        with self._lock:
            if not self._abandoned:
                self._answer = answer
                return answer
        self._undo(answer)
        return answer  # to no one: the awaiting task has gone

    def abandon(self) -> None:
        """The awaiting task ended without the answer: undo it, now if it was made."""
        with self._lock:
            self._abandoned = True
            answer, self._answer = self._answer, _NO_OBJECT
        if answer is not _NO_OBJECT:
            self._undo(answer)


# -- results an async iterator gives ------------------------------------------------------

_DRAINED: Final = object()


class LoopItems(Iterator[Any]):
    """A result made of the items of *source*, an async iterator, read by `TurnBudget.aadmit`
    (or `ResultGate.agate`) as a sync iterator: *wrap* turns the sync iterator of the items
    into the result (an adapter's JSON array chunks).

    The admission runs in a thread of its own and each item it asks for is awaited by the
    task awaiting the admission, on its loop. A read blocks its thread until the loop has
    the item: run in workers of the loop's default executor, parallel calls held all of
    them, and an iterator that needed one for its items (`asyncio.to_thread`, aiofiles,
    DNS) never got it, a deadlock. The awaiting task cancelled, the
    read stops at the next item, which the thread gets as a `CancelledError` (a spill is
    abandoned and its room returned), and the iterator is closed on its loop.
    """

    __slots__ = ("_asked", "_lock", "_read", "_source", "_stopped", "_wake")

    def __init__(
        self, source: AsyncIterator[Any], wrap: Callable[[Iterator[Any]], Iterator[Any]]
    ) -> None:
        self._source = source
        self._lock = threading.Lock()
        # The thread's request for the next item, answered on the loop.
        self._asked: concurrent.futures.Future[Any] | None = None
        self._wake: Callable[[], object] | None = None
        self._stopped = False
        self._read = wrap(self._items())

    def __next__(self) -> Any:
        return next(self._read)

    def _items(self) -> Iterator[Any]:
        while (item := self._pull()) is not _DRAINED:
            yield item

    def _pull(self) -> Any:
        answer: concurrent.futures.Future[Any] = concurrent.futures.Future()
        with self._lock:
            if self._stopped:
                raise asyncio.CancelledError("the call reading this result was cancelled")
            if self._wake is None:
                # Read anywhere else, no task would await the item: a hang.
                raise RuntimeError(
                    "the items of an async iterator are read by TurnBudget.aadmit or "
                    "ResultGate.agate only"
                )
            self._asked = answer
            wake = self._wake
        wake()
        return answer.result()

    async def drive(self, admit: Callable[[], _T]) -> _T:
        """*admit* (which reads this result) in a thread of its own, each item it asks for
        awaited here; see the class. (Not named ``read``: a result with one is a file.)"""
        if running_loop() != "asyncio":
            # The frameworks whose outputs these are run on asyncio; elsewhere the items
            # could not be awaited on the loop.
            raise RuntimeError("the items of an async iterator are read under asyncio only")
        loop = asyncio.get_running_loop()
        woken = asyncio.Event()
        ended: list[tuple[Any, BaseException | None]] = []

        def wake() -> None:
            loop.call_soon_threadsafe(woken.set)

        with self._lock:
            if self._wake is not None or self._stopped:
                raise RuntimeError("a result an async iterator gives is read once")
            self._wake = wake
        context = contextvars.copy_context()  # as asyncio.to_thread's: a principal may use it

        def run() -> None:
            try:
                done: tuple[Any, BaseException | None] = (context.run(admit), None)
            except BaseException as exc:  # noqa: BLE001 - re-raised by the awaiting task
                done = (None, exc)
            with self._lock:
                if self._stopped:
                    # The awaiting task was cancelled: as a cancelled asyncio.to_thread's,
                    # the outcome goes to no one (`aadmit` gives back what it admitted).
                    return
                ended.append(done)
            wake()

        # A daemon: a thread left waiting for a loop that was stopped without cancelling
        # the task must not keep the interpreter from exiting.
        threading.Thread(target=run, name="jsonbudget-admit", daemon=True).start()
        serving: concurrent.futures.Future[Any] | None = None
        try:
            while True:
                await woken.wait()
                woken.clear()
                with self._lock:
                    serving, self._asked = self._asked, None
                if serving is None:
                    if not ended:
                        continue
                    value, error = ended[0]
                    if error is not None:
                        raise error
                    return cast("_T", value)
                # The iterator's error is raised where the admission reads it, as a sync
                # one's is (its thread ends with it, and this task raises it).
                try:
                    item = await anext(self._source, _DRAINED)
                except Exception as exc:  # noqa: BLE001 - handed on, not swallowed
                    serving.set_exception(exc)
                else:
                    serving.set_result(item)
                serving = None
        finally:
            with self._lock:
                # Stopped unless the admission ended: any read after this raises, and the
                # one waiting (asked, or being served) is answered so.
                self._stopped = not ended
                asked, self._asked = self._asked, None
            for waiting in (serving, asked):
                if waiting is not None and not waiting.done():
                    waiting.set_exception(asyncio.CancelledError())
            # Not drained when the admission stopped early (a spill past max_file_bytes)
            # or was cancelled: closed here, on its loop, not left running to be
            # finalized at shutdown.
            aclose = getattr(self._source, "aclose", None)
            if aclose is not None:
                await aclose()


# -- bounded_tool --------------------------------------------------------------------------

# The decorator's types are in `tool_types`: overloads that tell an async tool from a
# sync one, and an MCP result or a JSON shape from a value, by the declared return.


@overload
def bounded_tool(
    given: Limits | None = None,
    /,
    *,
    max_bytes: int | None = None,
    limits: Limits | None = None,
    output: Literal["str"] = "str",
    max_items: int | None = None,
    max_keys: int | None = None,
    max_field_bytes: int | None = None,
    max_depth: int | None = None,
    strategy: Strategy = "balanced",
    markers: MarkerStyle = "text",
    default: Callable[[Any], Any] | None = None,
    on_truncation: Callable[[str, tuple[Truncation, ...]], object] | None = None,
) -> ToolDecorator[str]: ...
@overload
def bounded_tool(
    given: Limits | None = None,
    /,
    *,
    max_bytes: int | None = None,
    limits: Limits | None = None,
    output: Literal["json"],
    max_items: int | None = None,
    max_keys: int | None = None,
    max_field_bytes: int | None = None,
    max_depth: int | None = None,
    strategy: Strategy = "balanced",
    markers: MarkerStyle = "text",
    default: Callable[[Any], Any] | None = None,
    on_truncation: Callable[[str, tuple[Truncation, ...]], object] | None = None,
) -> ToolDecorator[Any]: ...
@overload
def bounded_tool(
    given: Limits | None = None,
    /,
    *,
    max_bytes: int | None = None,
    limits: Limits | None = None,
    output: Literal["bytes"],
    max_items: int | None = None,
    max_keys: int | None = None,
    max_field_bytes: int | None = None,
    max_depth: int | None = None,
    strategy: Strategy = "balanced",
    markers: MarkerStyle = "text",
    default: Callable[[Any], Any] | None = None,
    on_truncation: Callable[[str, tuple[Truncation, ...]], object] | None = None,
) -> ToolDecorator[bytes]: ...
def bounded_tool(
    given: Limits | None = None,
    /,
    *,
    max_bytes: int | None = None,
    limits: Limits | None = None,
    output: ToolOutput = "str",
    max_items: int | None = None,
    max_keys: int | None = None,
    max_field_bytes: int | None = None,
    max_depth: int | None = None,
    strategy: Strategy = "balanced",
    markers: MarkerStyle = "text",
    default: Callable[[Any], Any] | None = None,
    on_truncation: Callable[[str, tuple[Truncation, ...]], object] | None = None,
) -> ToolDecorator[str] | ToolDecorator[Any] | ToolDecorator[bytes]:
    """Wrap a tool function (sync or async, plain or method) so its result is bounded JSON.

    Give *max_bytes* (with the other `Limits` options) or *limits* (also positionally,
    ``bounded_tool(limits)``); they are validated here, when the decorator is built.
    The result is encoded within them and returned as JSON text (``output="str"``, the
    default: what a model reads), as the bounded value itself (``"json"``: a dict, list
    or scalar that frameworks with structured output validate and send), or as UTF-8
    bytes (``"bytes"``, for byte transports only). The wrapper's signature and
    annotations say so; exceptions pass through unchanged.

    The cuts a result's encoding marks are reported side-band to *on_truncation*, if
    given: ``on_truncation(name, truncations)`` after every call whose result was cut,
    before the result is returned; what it raises propagates.
    """
    if given is not None:
        # SPEC's spelling, bounded_tool(limits): the same as limits=.
        if not isinstance(given, Limits):
            what = "a function: write @bounded_tool(max_bytes=N)" if callable(given) else ""
            raise TypeError(
                f"bounded_tool takes Limits as its one positional argument, not "
                f"{what or type(given).__name__}"
            )
        if limits is not None:
            raise LimitError("limits", limits, "given twice (positionally and as limits=)")
        limits = given
    if limits is None:
        if max_bytes is None:
            raise LimitError("max_bytes", None, "bounded_tool needs max_bytes or limits")
        limits = Limits(
            max_bytes,
            max_items=max_items,
            max_keys=max_keys,
            max_field_bytes=max_field_bytes,
            **({} if max_depth is None else {"max_depth": max_depth}),
        )
    elif not isinstance(limits, Limits):
        raise TypeError(f"limits must be a Limits, not {type(limits).__name__}")
    elif any(v is not None for v in (max_bytes, max_items, max_keys, max_field_bytes, max_depth)):
        raise LimitError("limits", limits, "give limits or max_bytes and its options, not both")
    check_mode("output", output, tuple(_RETURNS))
    check_mode("strategy", strategy, ("balanced", "prefix"))
    check_mode("markers", markers, ("text", "structured"))
    if default is not None and not callable(default):
        raise TypeError(f"default must be callable, not {type(default).__name__}")
    if on_truncation is not None and not callable(on_truncation):
        raise TypeError(f"on_truncation must be callable, not {type(on_truncation).__name__}")
    encoder = Encoder(limits, strategy=strategy, markers=markers, default=default)
    dumps = encoder.dumps
    encode_ = encoder.encode

    def finish(value: Any, name: str, mcp_fit: Callable[[Any, bool], Any] | None) -> Any:
        if mcp_fit is not None:
            # Declared to return MCP results, the wrapper says it returns a
            # CallToolResult: every value is one, the other members of a declared union
            # (a str, a dict, None) too, fitted as `bounded_result` fits a value.
            # A list is content only when it holds an MCP block (`list[dict]` is a value).
            return mcp_fit(value, _is_mcp_result(value))
        if _is_mcp_result(value):
            # Encoded, an error result would read as a success and an image as JSON
            # text: refused, since the wrapper already told the server it returns JSON.
            raise TypeError(
                f"{name} returned {type(value).__name__}, an MCP result, but does not "
                "declare it: annotate the function's return type with it (-> "
                "CallToolResult, ImageContent, Image, list[ContentBlock], ToolResult) "
                "so bounded_tool returns it bounded as a CallToolResult, or return "
                "jsonbudget.mcp.bounded_result(...) from a tool bounded_tool does not wrap"
            )
        if _awaited_only(value):
            # Its items can only be awaited: encoded, it would be one unencodable marker
            # and every item lost.
            raise TypeError(
                f"{name} returned an async iterable ({type(value).__name__}); bounded_tool "
                "encodes values and sync iterables: return a list or a sync generator"
            )
        try:
            if output == "json":
                parsed, cuts = _parsed_within(value, encoder)
                if cuts and on_truncation is not None:
                    on_truncation(name, cuts)
                return parsed
            if on_truncation is None:
                data = dumps(value)
            else:
                encoded = encode_(value)
                data = encoded.data
                if not encoded.complete:
                    on_truncation(name, encoded.truncations)
        except EncodeError as exc:
            # A generator the tool returned (or one inside its value) is the tool's own
            # code running: what it raises is the tool's exception (a framework's
            # ModelRetry or ToolError among them) and passes through unchanged.
            cause = exc.__cause__
            if isinstance(cause, Exception) and str(exc).startswith("iterator raised "):
                raise cause from None
            raise
        return data.decode("utf-8") if output == "str" else data

    def decorate(fn: Any) -> Any:
        if isinstance(fn, staticmethod | classmethod):
            return type(fn)(decorate(fn.__func__))
        if not callable(fn):
            raise TypeError(f"bounded_tool wraps a function, not {type(fn).__name__}")
        name = getattr(fn, "__name__", type(fn).__name__)
        if inspect.isasyncgenfunction(fn):
            raise TypeError(
                f"bounded_tool cannot wrap {name}, an async generator function: its items "
                "can only be awaited; return a list or a sync generator"
            )
        sig = _signature(fn)
        mcp_fit: Callable[[Any, bool], Any] | None = None
        if _declares_mcp_result(sig.return_annotation):
            # Imported only now: the annotation names mcp's (or FastMCP's) classes.
            mcp = importlib.import_module("jsonbudget.mcp")
            mcp_fit = mcp.tool_result_fitting(limits, strategy=strategy, markers=markers,
                                              default=default)  # fmt: skip
        wrapper: Callable[..., Any]
        if is_async_callable(fn):

            async def async_wrapper(*args: Any, **kwargs: Any) -> Any:
                value = await fn(*args, **kwargs)
                if _awaitable(value):
                    _refuse_awaitable(value, name, _ASYNC_AWAITABLE)
                return finish(value, name, mcp_fit)

            wrapper = async_wrapper
        else:

            def sync_wrapper(*args: Any, **kwargs: Any) -> Any:
                value = fn(*args, **kwargs)
                if _awaitable(value):
                    _refuse_awaitable(value, name, _SYNC_AWAITABLE)
                return finish(value, name, mcp_fit)

            wrapper = sync_wrapper
        # A server passes a CallToolResult through when the tool declares one (no
        # output schema to validate it against).
        returns = None if mcp_fit is None else importlib.import_module("mcp.types").CallToolResult
        _retype(wrapper, fn, name, output, sig, mcp_returns=returns)
        return wrapper

    return cast("ToolDecorator[str] | ToolDecorator[Any] | ToolDecorator[bytes]", decorate)


_RETURNS: dict[str, Any] = {"str": str, "json": Any, "bytes": bytes}
_OBJECT_TYPES: tuple[type, ...] = (dict, collections.abc.Mapping)
_ARRAY_TYPES: tuple[type, ...] = (list, tuple, collections.abc.Sequence, collections.abc.Iterable)
#: Iterable, but no array: written as a string, or a marker (orjson writes no set).
_TEXT_TYPES: tuple[type, ...] = (str, bytes, bytearray, memoryview, collections.abc.Set)


def _json_shape(t: type) -> Any:
    """The JSON shape a value of class *t* is written as: ``dict[str, Any]`` for a mapping
    or a record class (a pydantic model or dataclass, a standard dataclass, an attrs
    class, a msgspec Struct that is not ``array_like``), ``list[Any]`` for another
    iterable (a sequence, a generator), else ``Any``. A model is iterable (pydantic
    yields its fields), so records are asked first."""
    config = getattr(t, "__struct_config__", None)  # msgspec
    if config is not None:
        return list[Any] if config.array_like else dict[str, Any]
    if getattr(t, "__pydantic_root_model__", False):
        return Any  # its root's shape, whatever that is
    if issubclass(t, _OBJECT_TYPES) or (
        dataclasses.is_dataclass(t)
        or hasattr(t, "__attrs_attrs__")
        or hasattr(t, "__pydantic_fields__")
    ):
        return dict[str, Any]
    if issubclass(t, _ARRAY_TYPES) and not issubclass(t, _TEXT_TYPES):
        return list[Any]
    return Any


#: A run of 20 digits or more: the least an integer past 64 bits is written with.
_LONG_DIGITS: Final = re.compile(rb"[0-9]{20}")
#: JSON as orjson writes it, for values orjson cannot write (an int past 64 bits).
_COMPACT: Final = json.JSONEncoder(ensure_ascii=False, separators=(",", ":"))


def _parsed_within(value: Any, encoder: Encoder) -> tuple[Any, tuple[Truncation, ...]]:
    """*value* bounded by *encoder*, then parsed back: a value whose JSON, as orjson
    writes it, is within the encoder's budget; and the cuts it marks.

    Parsed, a number is an int or a float, which may be written longer than the text it
    came from: a Decimal's ``1E+15`` is the float 1e15, which orjson writes
    ``1000000000000000.0``; msgspec writes the float 1e20 as ``1e20``, orjson as
    ``1e+20``. Where that passes the budget, *value* is encoded again into a budget
    smaller by the excess, and once the budget is `MIN_BYTES`, with fewer items and keys
    a container and then less depth (`_fewer`): each round cuts the value itself, never
    a cut already made (whose markers would be data to it, counted as items), so every
    marker counts what the value holds, and an iterator in it is read once
    (`encode_replaying`). An integer past 64 bits (which orjson neither reads nor
    writes) comes back exact, as an int.
    """
    limits = cut = encoder.limits
    streams: dict[int, Any] = {}
    while True:
        encoded = encode_replaying(encoder, value, streams)
        parsed, size, cuts = _read_back(encoded, encoder)
        if size <= limits.max_bytes:
            return parsed, cuts
        if cut.max_bytes > MIN_BYTES:
            # Shrunk by the ratio the parse grew it, and by a byte at least.
            budget = cut.max_bytes
            cut = cut.replace(
                max_bytes=max(MIN_BYTES, min(budget - 1, budget * limits.max_bytes // size))
            )
        else:
            fewer = _fewer(cut, parsed)
            if fewer is None:
                return _as_one_marker(value, encoder, streams, limits.max_bytes, parsed)
            cut = fewer
        encoder = Encoder(
            cut,
            strategy=encoder.strategy,
            markers=encoder.markers,
            default=encoder.default,
            unencodable=encoder.unencodable,
            binary=encoder.binary,
        )


def _read_back(encoded: Encoded, encoder: Encoder) -> tuple[Any, int, tuple[Truncation, ...]]:
    """*encoded* parsed, the length of its JSON as a framework writes it again, and the
    cuts it marks.

    The encoder writes no number a double cannot hold; were one written all the same,
    `load_json` reads it as a `Decimal`, which neither a framework's ``json`` nor the
    size's writer takes. The parsed value is then encoded again: the encoder marks and
    reports each such Decimal, as it does any number past the float range."""
    parsed, size = _parsed_and_sized(encoded.data)
    if size >= 0:
        return parsed, size, encoded.truncations
    again = encoder.encode(parsed)
    parsed, size = _parsed_and_sized(again.data)
    if size < 0:  # pragma: no cover - the encoder marks every Decimal load_json makes
        raise EncodeError("a number past the float range was written again", path="")
    return parsed, size, encoded.truncations + again.truncations


def _parsed_and_sized(data: bytes) -> tuple[Any, int]:
    """*data* parsed, and the length of its JSON as a framework writes it again; -1 for
    the length where it holds a number a double cannot hold (see `_read_back`)."""
    if _LONG_DIGITS.search(data) is None:
        parsed = orjson.loads(data)
        return parsed, len(orjson.dumps(parsed))
    # Maybe an integer past 64 bits, which orjson reads as a rounded float (or refuses
    # past the float range): read and sized exact. (Digits in a string only cost the
    # slower parse.)
    parsed = load_json(data)
    try:
        return parsed, len(_COMPACT.encode(parsed).encode())
    except TypeError:
        # A Decimal: the one type load_json returns that JSON writers refuse, for a
        # literal past the float range (or past int()'s digits, which is too).
        return parsed, -1


def _fewer(limits: Limits, parsed: Any) -> Limits | None:
    """*limits* tightened for a cut at `MIN_BYTES` whose numbers, parsed (*parsed*), are
    written past the budget: at most half the members its widest container shows, else
    less depth than it shows; None when neither cuts more (at most one member a
    container, depth 1). Each step tightens a cap, so the rounds end."""
    width, depth = _shape(parsed)
    half = max(1, width // 2)
    fewer = limits.replace(
        max_items=min(limits.max_items or half, half), max_keys=min(limits.max_keys or half, half)
    )
    if fewer != limits:
        return fewer
    # Less than the cut shows and than the limit: a structured marker is an object that
    # no depth limit removes, so the shown depth alone may not go down.
    shallower = min(limits.max_depth, depth) - 1
    return limits.replace(max_depth=shallower) if shallower >= 1 else None


def _shape(value: Any) -> tuple[int, int]:
    """The most members a container in *value* has (0 for a scalar), and its depth (a
    scalar 0, a container 1 more than its deepest member). *value* is a parsed cut of
    at most `MIN_BYTES`: a few dozen nodes."""
    width = depth = 0
    stack: list[tuple[Any, int]] = [(value, 0)]
    while stack:
        node, level = stack.pop()
        members = (
            node.values() if isinstance(node, dict) else node if isinstance(node, list) else None
        )
        if members is None:
            continue
        width = max(width, len(node))
        depth = max(depth, level + 1)
        stack.extend((member, level + 1) for member in members)
    return width, depth


def _as_one_marker(
    value: Any, encoder: Encoder, streams: dict[int, Any], max_bytes: int, shown: Any
) -> tuple[Any, tuple[Truncation, ...]]:
    """*value* as the encoder's one marker for all of it, at the depth limit, the last
    cut `_parsed_within` makes: the value a single member of a list one level deep, so
    its own marker stands where it stood. Only a container gets here (a scalar of at
    most `MIN_BYTES` is written within it), and a marker's text is what it parses to.

    The marker is kept in the container *shown* (the last cut) is: an object stays an
    object, ``{"…": marker}``, and a list ``[marker]``. A tool's return annotation says
    that shape (`_json_shape`), and a framework that validates a result against it (an
    MCP server's output schema) refused a bare marker and lost the whole result.
    """
    one = Encoder(
        Limits(MIN_BYTES, max_depth=1),
        markers=encoder.markers,
        default=encoder.default,
        unencodable=encoder.unencodable,
        binary=encoder.binary,
    )
    encoded = encode_replaying(one, [value], streams)
    parsed, size = _parsed_and_sized(encoded.data)
    cuts = encoded.truncations
    if not 0 <= size - 2 <= max_bytes or [t.path for t in cuts] != ["/0"]:  # pragma: no cover
        raise EncodeError("a value's marker did not fit the least budget", path="")
    mark = cuts[0]
    kept, path = _kept_as(shown, parsed[0])
    if len(orjson.dumps(kept)) > max_bytes:  # pragma: no cover - see _kept_as
        raise EncodeError("a value's marker did not fit the least budget", path="")
    return kept, (_truncation(path, mark.kind, mark.omitted, mark.unit),)


def _kept_as(shown: Any, marker: Any) -> tuple[Any, str]:
    """*marker* in the container *shown* is, and the path it stands at there. A
    structured marker is an object already. At most 52 bytes (text) or 60 (structured)
    for a count below 10**9, within `MIN_BYTES`."""
    if isinstance(shown, list):
        return [marker], "/0"
    if isinstance(shown, dict) and not isinstance(marker, dict):
        return {"…": marker}, "/…"
    return marker, ""


def is_async_callable(fn: Any) -> bool:
    """Whether calling *fn* gives a coroutine to await, as the tool SDKs (MCP, Starlette)
    tell: through `functools.partial`, an async function, or an object (not a class)
    whose class's ``__call__`` is async (inspect says False for the object itself)."""
    while isinstance(fn, functools.partial):
        fn = fn.func
    if inspect.iscoroutinefunction(fn):
        return True
    call = getattr(type(fn), "__call__", None)  # noqa: B004 - the method itself, not callable()
    return not isinstance(fn, type) and inspect.iscoroutinefunction(call)


_SYNC_AWAITABLE: Final = (
    "a sync call; bounded_tool awaits only async functions and objects with an async __call__"
)
_ASYNC_AWAITABLE: Final = (
    "an async call; bounded_tool awaits the call once: await what the tool returns in it"
)


def _refuse_awaitable(value: Any, name: str, where: str) -> typing.NoReturn:
    """Raise for an awaitable a tool returned, closed first if it is a coroutine: never
    awaited, it would otherwise warn later, far from here (and encoded, it would be one
    unencodable marker)."""
    if inspect.iscoroutine(value):
        value.close()
    raise TypeError(f"{name} returned an awaitable from {where}")


def _signature(fn: Any) -> inspect.Signature:
    """*fn*'s signature, string annotations resolved in its module where they can be."""
    try:
        return inspect.signature(fn, eval_str=True)
    except NameError:
        return inspect.signature(fn)  # a name only its defining scope knows: keep the string


#: The MCP result types `bounded_tool` returns as MCP results, by module and name: looked
#: up in the modules already imported, so nothing imports mcp or fastmcp here.
_MCP_RESULT_NAMES: Final = (
    ("mcp_types", ("CallToolResult", "TextContent", "ImageContent", "AudioContent",
                   "ResourceLink", "EmbeddedResource")),
    ("mcp.server.mcpserver.utilities.types", ("Image", "Audio")),
    ("fastmcp.tools.base", ("ToolResult",)),
    ("fastmcp.utilities.types", ("Image", "Audio", "File")),
)  # fmt: skip


#: The classes read from each module, with the module object they were read from (None:
#: not imported) and whether it had all the names: asked on every call of a bounded
#: tool, looking them all up again was half its cost. A module imported again (new
#: classes) is read again; one without all its names (caught half imported, or of a
#: version that lacks one) is read at each call.
_McpFound: TypeAlias = dict[str, tuple[Any, tuple[type, ...], bool]]
#: What was read, and the classes it holds, published together as one tuple: a reader
#: never sees the one of a reading and the other of another.
_MCP_STATE: list[tuple[_McpFound, tuple[type, ...]]] = [({}, ())]
#: Held while the classes are read again: two threads reading a module mid-import
#: could publish the older reading last, which every entry then called complete.
_MCP_LOCK = threading.Lock()


def _mcp_current(found: _McpFound) -> bool:
    modules = sys.modules
    for module, _ in _MCP_RESULT_NAMES:
        held = found.get(module)
        if held is None or held[0] is not modules.get(module) or not held[2]:
            return False
    return True


def _mcp_result_types() -> tuple[type, ...]:
    """The MCP result classes of the modules imported so far (none without mcp)."""
    found, types = _MCP_STATE[0]
    if _mcp_current(found):
        return types
    with _MCP_LOCK:
        found = dict(_MCP_STATE[0][0])
        for module, names in _MCP_RESULT_NAMES:
            mod = sys.modules.get(module)
            held = found.get(module)
            if held is None or held[0] is not mod or not held[2]:
                got = (getattr(mod, name, None) for name in names)
                classes = tuple(t for t in got if isinstance(t, type))
                found[module] = (mod, classes, mod is None or len(classes) == len(names))
        types = tuple(t for _, classes, _ in found.values() for t in classes)
        _MCP_STATE[0] = (found, types)
        return types


#: Types no MCP result is: a value (or list item) of one is answered without isinstance.
_NOT_MCP: Final = frozenset((dict, list, tuple, str, int, float, bool, type(None), bytes))


def _is_mcp_result(value: Any) -> bool:
    """Whether *value* is an MCP result (a ``CallToolResult``, a content block, a media
    helper, FastMCP's ``ToolResult``) or a list or tuple holding one among its first
    `_MCP_SCAN` items."""
    types = _mcp_result_types()
    if not types:
        return False
    if isinstance(value, list | tuple):
        # Content lists are short; a long list of rows is not read to its end here.
        return any(_one_mcp_result(item, types) for item in value[:_MCP_SCAN])
    return _one_mcp_result(value, types)


def _one_mcp_result(value: Any, types: tuple[type, ...]) -> bool:
    try:
        return type(value) not in _NOT_MCP and isinstance(value, types)
    except MemoryError:
        raise  # the interpreter's: taken for no MCP result, a result lost its content
    except Exception:  # noqa: BLE001 - pydantic's classes are ABCs: isinstance() hashes
        return False  # the class, which a metaclass may make unhashable: no MCP result


_MCP_SCAN: Final = 64


def _declares_mcp_result(annotation: Any) -> bool:
    """Whether a return *annotation* names an MCP result type: itself, in a union, or as
    the items of a list, tuple or sequence (``list[ContentBlock]``)."""
    types = _mcp_result_types()
    if not types:
        return False
    stack = [annotation]
    while stack:
        node = stack.pop()
        if isinstance(node, type) and issubclass(node, types):
            return True
        origin = typing.get_origin(node)
        if origin is typing.Annotated:
            stack.append(typing.get_args(node)[0])
        elif origin in _MCP_CONTAINERS or isinstance(node, types_.UnionType):
            stack.extend(typing.get_args(node))
    return False


_MCP_CONTAINERS: Final = (typing.Union, list, tuple, collections.abc.Sequence)


def _retype(
    wrapper: Callable[..., Any],
    fn: Any,
    name: str,
    output: str,
    sig: inspect.Signature,
    *,
    mcp_returns: Any = None,
) -> None:
    """Give *wrapper* *fn*'s name, docs and parameters (*sig*), and the return type it
    really has (*mcp_returns* when the function returns MCP results).

    Frameworks build a tool's schemas from the signature and the annotations: the
    parameters stay *fn*'s (string annotations resolved in *fn*'s module), the return
    annotation becomes what the wrapper returns, so no output schema promises *fn*'s type
    (a cut list holds a marker string, which ``list[dict]`` would refuse). For
    ``output="json"`` it keeps only the shape: ``dict[str, Any]`` for a function declared
    to return a mapping, ``list[Any]`` for a sequence, else ``Any``.
    """
    functools.update_wrapper(wrapper, fn, assigned=("__module__", "__name__", "__qualname__",
                                                    "__doc__"), updated=())  # fmt: skip
    wrapper.__name__ = name
    # No __wrapped__: a framework that unwraps would find fn's return type again.
    del wrapper.__wrapped__  # type: ignore[attr-defined]
    params = sig.parameters.values()
    returns = _RETURNS[output] if mcp_returns is None else mcp_returns
    if output == "json" and mcp_returns is None:
        declared = sig.return_annotation
        origin = typing.get_origin(declared) or declared
        if isinstance(origin, type):
            returns = _json_shape(origin)
    setattr(wrapper, "__signature__", sig.replace(return_annotation=returns))  # noqa: B010 - mypy knows no such attribute
    wrapper.__annotations__ = {
        **{p.name: p.annotation for p in params if p.annotation is not p.empty},
        "return": returns,
    }


# -- helpers -------------------------------------------------------------------------------


class _NoPath:
    """Stands in for a path when only a reference's size on the wire matters."""

    def __fspath__(self) -> str:
        return ""


_NO_PATH: Any = _NoPath()


def _spilled_info(ref: SpillRef, hint: str) -> dict[str, Any]:
    info = ref.to_json()
    info["read_more"] = hint
    return info


def _json_preview(value: bytes, ref: SpillRef, hint: str) -> bytes:
    # orjson.Fragment embeds the encoder's bytes as they are: nothing is re-encoded.
    return orjson.dumps({"preview": orjson.Fragment(value), "spilled": _spilled_info(ref, hint)})


def _stored(store: SpillBackend, ref: object) -> SpillRef:
    """*ref*, what *store*'s ``put`` returned, checked before any of it is written into
    an answer: a user's store may return anything."""
    name = type(store).__name__
    if not isinstance(ref, SpillRef):
        raise TypeError(f"{name}.put must return a SpillRef, not {type(ref).__name__}")
    for field in ("ref", "sha256", "media_type", "label"):
        value = getattr(ref, field)
        if not isinstance(value, str):
            raise TypeError(
                f"{name}.put returned a SpillRef whose {field} is a {type(value).__name__}, "
                "not a str"
            )
        lone = _lone_surrogate(value)
        if lone is not None:
            # Every answer that names the spill is UTF-8, which cannot hold one.
            raise ValueError(
                f"{name}.put returned a SpillRef whose {field} holds a lone surrogate at "
                f"character {lone}"
            )
    if not ref.ref:
        raise ValueError(f"{name}.put returned a SpillRef with an empty ref")
    size = ref.size
    if not isinstance(size, int) or isinstance(size, bool):
        raise TypeError(
            f"{name}.put returned a SpillRef whose size is a {type(size).__name__}, not an int"
        )
    if not 0 <= size <= _MAX_SPILL_SIZE:
        # Not the size itself: an int of more than 4,300 digits has no str.
        wrong = "negative" if size < 0 else f"over {_MAX_SPILL_SIZE}"
        raise ValueError(f"{name}.put returned a SpillRef whose size is {wrong}")
    return ref


def _file_limit(store: SpillBackend) -> int:
    """*store*'s ``max_file_bytes``, checked before the writer compares sizes with it."""
    limit = store.max_file_bytes
    if not isinstance(limit, int) or isinstance(limit, bool):
        raise TypeError(
            f"{type(store).__name__}.max_file_bytes must be an int, not {type(limit).__name__}"
        )
    if limit < 1:
        raise ValueError(f"{type(store).__name__}.max_file_bytes must be at least 1")
    return limit


def _read(store: SpillBackend, ref: str, limit: int) -> bytes:
    """The first *limit* bytes of the spilled result *ref*, as *store* reads them."""
    data = store.read(ref, 0, limit)
    if not isinstance(data, bytes):
        raise TypeError(f"{type(store).__name__}.read must return bytes, not {type(data).__name__}")
    return data


def _bare_json(ref: SpillRef) -> bytes:
    """The shortest JSON answer for a spilled result: its reference and size."""
    return orjson.dumps({"spilled": {"ref": ref.ref, "size": ref.size}})


def _bare_text(ref: SpillRef) -> bytes:
    return f"…[spilled: {ref.size} bytes in {ref.ref}]".encode()


def _text_footer(ref: SpillRef, shown: int, hint: str) -> bytes:
    return (
        f"…[spilled: the first {shown} of {ref.size} bytes are shown; the whole result is "
        f"{ref.ref} (sha256 {ref.sha256}); {hint}, from offset {shown}]"
    ).encode()


def _is_utf8(view: bytes | memoryview) -> bool:
    """Whether *view* is valid UTF-8 (what a model is handed must be text).

    Decoded a slice at a time, the text thrown away: decoded whole, a result as big as
    the limit made a str up to four times its size just to be checked.
    """
    if isinstance(view, bytes) and view.isascii():
        return True
    decoder = codecs.getincrementaldecoder("utf-8")()
    try:
        for at in range(0, len(view), _UTF8_STEP):
            decoder.decode(view[at : at + _UTF8_STEP])
        decoder.decode(b"", final=True)  # a character cut short at the end
    except UnicodeDecodeError:
        return False
    return True


#: The bytes `_is_utf8` decodes at a time.
_UTF8_STEP: Final = 1 << 16


def _awaitable(value: object) -> bool:
    """`inspect.isawaitable`, never raising (an ABC check hashes the class)."""
    try:
        return inspect.isawaitable(value)
    except MemoryError:
        raise  # the interpreter's, not the class's (see `has_class`)
    except Exception:  # noqa: BLE001 - a class its metaclass makes unhashable
        return hasattr(type(value), "__await__")


def _awaited_only(value: object) -> bool:
    """Whether *value* is an async iterable and no sync one: its items can only be awaited."""
    try:
        return isinstance(value, AsyncIterable) and not isinstance(value, Iterable)
    except MemoryError:
        raise  # the interpreter's, not the class's (see `has_class`)
    except Exception:  # noqa: BLE001 - an ABC caches classes: an unhashable one raises
        t = type(value)
        return hasattr(t, "__aiter__") and not hasattr(t, "__iter__")


def _is_iterator(value: object) -> bool:
    try:
        return isinstance(value, Iterator)
    except MemoryError:
        raise  # the interpreter's, not the class's (see `has_class`)
    except Exception:  # noqa: BLE001 - an ABC caches classes: an unhashable one raises
        t = type(value)
        return hasattr(t, "__next__") and hasattr(t, "__iter__")


def _stream_chunks(source: Any) -> Iterator[memoryview]:
    if hasattr(source, "read"):
        while True:
            block = source.read(_STREAM_CHUNK)
            if not block:
                return
            yield _checked_view(block)
    empty = 0
    for chunk in source:
        view = _checked_view(chunk)
        # Bounded as the bounded reader bounds them: an endless run of b"" is stuck, not
        # ended, and spilling it as if whole would claim what was never seen.
        empty = empty + 1 if not view else 0
        if empty >= MAX_EMPTY_CHUNKS:
            raise SpillError(
                f"the streamed result yielded {MAX_EMPTY_CHUNKS} empty chunks in a row: "
                "taken to be stuck, nothing kept"
            )
        yield view


def _checked_view(chunk: object) -> memoryview:
    if isinstance(chunk, bytes | bytearray | memoryview):
        view = _byte_view(chunk)
        if view is not None:
            return view
        raise TypeError("a streamed result yielded a released memoryview, which holds no bytes")
    raise TypeError(f"a streamed result must yield bytes, not {type(chunk).__name__}")


def _byte_view(data: bytes | bytearray | memoryview) -> memoryview | None:
    """*data*'s bytes as one flat view (a strided view's are copied out: only a
    contiguous one can be cast); None for a released view, which holds none (as a
    value, the encoder marks it)."""
    try:
        view = memoryview(data)
    except ValueError:  # "operation forbidden on released memoryview object"
        return None
    return view.cast("B") if view.c_contiguous else memoryview(view.tobytes())


def _lone_surrogate(text: str) -> int | None:
    """Where *text* holds a lone surrogate, which no UTF-8 text can; None if nowhere."""
    try:
        text.encode("utf-8")
    except UnicodeEncodeError as exc:
        return exc.start
    return None


def _text_bytes(text: str) -> tuple[bytes, int]:
    """*text* as UTF-8 and how many lone surrogates it held: no UTF-8 text holds one, so
    each is written as U+FFFD, as the encoder writes a string (file names and output
    decoded with ``surrogateescape`` hold them)."""
    try:
        return text.encode("utf-8"), 0
    except UnicodeEncodeError:
        clean, replaced = SURROGATE.subn("\ufffd", text)
        return clean.encode("utf-8"), replaced


def _str_chunks(text: str) -> Iterator[bytes]:
    # Slicing a str never splits a character, so each slice encodes on its own; the
    # count of replaced surrogates is known at the end, where the note goes.
    step = _STREAM_CHUNK // 4
    replaced = 0
    for start in range(0, len(text), step):
        data, bad = _text_bytes(text[start : start + step])
        replaced += bad
        yield data
    if replaced:
        yield replaced_note(replaced)


def _parse_json_prefix(prefix: bytes, whole: bool) -> tuple[Any, dict[str, str]] | None:
    """The value at the start of *prefix*, and the containers left open: each one's
    pointer and the pointer of the "more" marker it got where the prefix ended.

    Returns None when *prefix* does not start a JSON value ijson can follow. ijson's C
    backend refuses integers beyond 64 bits, which are valid JSON: the Python backend,
    slower but exact, reads the prefix again when the C backend gives up.
    """
    if not whole:
        # A number that reaches the cut may go on past it (123 of 12345): it is not
        # shown, the container it is in is marked "more" instead. (A literal that ends
        # in "e" goes with it; a string the cut reaches is never shown anyway.)
        prefix = prefix.rstrip(b"0123456789+-.eE")
    prefix = _long_ints_as_decimals(prefix)
    parsed = None
    # yajl loses a lone surrogate (see SURROGATE_ESCAPE): the Python backend keeps it for
    # the encoder to mark ("…[replaced: N lone surrogates]").
    if SURROGATE_ESCAPE.search(prefix) is None:
        parsed = _parse_with(ijson, prefix, whole)
    if parsed is None:
        parsed = _parse_with(_IJSON_PY, prefix, whole)
    return parsed


#: What a backend raises for bytes it cannot read as JSON. Beyond the reader's errors:
#: yajl makes a number with an exponent no Decimal holds (``1E99999999999999999999``) a
#: ``decimal.InvalidOperation``, and either backend's ``int()`` may refuse digits.
_PREFIX_ERRORS: Final = (*PARSE_ERRORS, ValueError, ArithmeticError)


def _long_ints_as_decimals(prefix: bytes) -> bytes:
    """*prefix* with every integer literal too long for ``int()`` given an ``E0`` exponent
    (see `LongIntsAsExponents`); a string the prefix cut is left as it is."""
    if not long_digit_run(prefix):
        return prefix  # the usual case: no run of digits that long, not even in a string
    fix = LongIntsAsExponents()
    return fix.feed(prefix) + fix.end()


def _parse_with(backend: Any, prefix: bytes, whole: bool) -> tuple[Any, dict[str, str]] | None:
    root: Any = _NO_OBJECT
    # Each open container and its pointer; None below the encoder's depth, where no cut
    # is ever reported (pointers there would grow with the square of the depth).
    stack: list[tuple[Any, str | None]] = []
    keys: list[str] = []

    def add(value: Any) -> str | None:
        nonlocal root
        if not stack:
            root = value
            return ""
        parent, where = stack[-1]
        if isinstance(parent, list):
            parent.append(value)
            if where is None or len(stack) > DEFAULT_MAX_DEPTH:
                return None
            return f"{where}/{len(parent) - 1}"
        parent[keys[-1]] = value
        if where is None or len(stack) > DEFAULT_MAX_DEPTH:
            return None
        return pointer(where, keys[-1])

    # basic_parse: no prefix paths, which ijson builds per nesting level.
    # Numbers as written (Decimal, not float): a preview never respells 19.90 as 19.9.
    events = backend.basic_parse(io.BytesIO(prefix), use_float=False)
    try:
        for event, value in events:
            if event in ("start_map", "start_array"):
                new: Any = {} if event == "start_map" else []
                stack.append((new, add(new)))
                keys.append("")
            elif event in ("end_map", "end_array"):
                stack.pop()
                keys.pop()
            elif event == "map_key":
                keys[-1] = value
            else:
                add(value)
    except _PREFIX_ERRORS as exc:
        # Past a root that ended (not stack): what follows is no part of one JSON value.
        if whole or root is _NO_OBJECT or not stack:
            return None
        # Only the prefix's end may stop it: `[INFO] ...` or `[{'a': 1}]` is text. yajl
        # calls a literal cut short (`tru`) a lexical error, so any error but its
        # "premature EOF" is left to the Python backend, which tells the two apart.
        cut_short = type(exc) is ijson.IncompleteJSONError and (
            backend is _IJSON_PY or "premature EOF" in str(exc)
        )
        if not cut_short:
            return None
    if root is _NO_OBJECT:
        return None
    # The prefix ended inside these containers: say so where it happened.
    marks: dict[str, str] = {}
    for container, where in stack:
        if isinstance(container, list):
            container.append(_MORE_ITEMS)
            if where is not None:
                marks[where] = f"{where}/{len(container) - 1}"
        else:
            key = _TEXT_MARKERS.key(container)
            container[key] = _MORE_KEYS
            if where is not None:
                marks[where] = pointer(where, key)
    return root, marks


#: How much of a result that looks like JSON is parsed to decide that it is.
_SNIFF_BYTES: Final = 4096


def _head_of(
    chunks: Iterable[bytes | bytearray | memoryview], size: int
) -> tuple[bytes, bool, Iterable[bytes | bytearray | memoryview]]:
    """The first *size* bytes of *chunks*, whether that is all of them, and the chunks
    again (those read to learn it first): at most *size* bytes are copied."""
    it = iter(chunks)
    taken: list[bytes | bytearray | memoryview] = []
    parts: list[bytes] = []
    held = 0
    for chunk in it:
        taken.append(chunk)
        parts.append(bytes(memoryview(chunk)[: size - held]))
        held += len(parts[-1])
        if held >= size:
            break
    else:
        return b"".join(parts), True, taken
    return b"".join(parts), False, itertools.chain(taken, it)


#: The encoder's own rule names the "more keys" member that closes an object the prefix
#: cut: ``"…"``, else ``"…1"``, ``"…2"``, ... (a real ``"…"`` key keeps its value), so a
#: preview spells it as the encoder's cut does. The dict it is asked about is the parse's
#: own, never a user mapping.
_TEXT_MARKERS: Final = Markers("text")


_MORE_ITEMS = "…[omitted: more items]"
_MORE_KEYS = "[omitted: more keys]"
#: Where a JSON preview's value stands in the gate's answer: its cuts are reported there.
_PREVIEW: Final = "/preview"
_truncation: Callable[..., Truncation] = fast_constructor(Truncation)


def _unknown_counts(
    shown: Encoded, open_marks: dict[str, str]
) -> tuple[bytes, tuple[Truncation, ...]]:
    """*shown* with the counts of cuts inside open containers made "more", and every cut
    it marks, under ``/preview``.

    The encoder counted the items of a container that the prefix had already cut, so its
    count is only a lower bound; guarantee 4 says not to state it. The value is at most
    a preview's size, so a round trip is cheap; numbers are read back as the Decimals
    they were written from and written again as they were (through orjson, `1E+15`
    became `1000000000000000.0` and `19.90` became `19.9`: the preview grew past its
    budget). Only the markers change, and they get shorter.

    *open_marks* maps each open container's pointer to its "more" marker's (see
    `_parse_with`): to the encoder that marker was data, so where it kept it, it is
    reported here, with no count.
    """
    cuts = shown.truncations
    fix = {t.path for t in cuts if t.kind in ("items", "keys")
           and t.path.rsplit("/", 1)[0] in open_marks}  # fmt: skip
    if not open_marks:
        return shown.data, tuple(_truncation(_PREVIEW + t.path, t.kind, t.omitted, t.unit)
                                 for t in cuts)  # fmt: skip
    value = json.loads(shown.data, parse_float=decimal.Decimal)
    data = shown.data
    if fix:
        for path in fix:
            parent_path, _, token = path.rpartition("/")
            parent = _resolve(value, parent_path)
            # The marker's own key or index: the encoder picks a key that is not taken.
            key = token.replace("~1", "/").replace("~0", "~")
            if isinstance(parent, list) and key.isdigit() and int(key) < len(parent):
                parent[int(key)] = _MORE_ITEMS
            elif isinstance(parent, dict) and key in parent:
                parent[key] = _MORE_KEYS
        again = encode(value, max_bytes=max(len(shown.data), MIN_BYTES))
        if not again.complete or len(again.data) > len(shown.data):  # pragma: no cover
            raise EncodeError("a preview written again changed more than its markers", path="")
        data = again.data
    # Several cuts may stand at one place (a string cut and its lone surrogates replaced).
    reported: dict[str, list[Truncation]] = {}
    for cut in cuts:
        reported.setdefault(cut.path, []).append(cut)
    return data, _in_document_order(value, reported, fix, set(open_marks.values()))


def _in_document_order(
    value: Any, reported: dict[str, list[Truncation]], unknown: set[str], marks: set[str]
) -> tuple[Truncation, ...]:
    """The cuts in the preview *value*, in document order, under ``/preview``: the
    encoder's *reported* ones (those at *unknown* with no count), and the prefix's "more"
    markers at *marks* that the encoder kept as they were."""
    out: list[Truncation] = []
    stack: list[tuple[str, Any]] = [("", value)]
    while stack:
        path, node = stack.pop()
        here = reported.pop(path, None)
        if here is not None:
            # A marker, or a member whose key alone was replaced: its value is walked on.
            out.extend(_truncation(_PREVIEW + path, cut.kind, None if path in unknown
                                   and cut.kind in ("items", "keys") else cut.omitted,
                                   cut.unit) for cut in here)  # fmt: skip
        elif path in marks and node in (_MORE_ITEMS, _MORE_KEYS):
            kind: Literal["items", "keys"] = "items" if node == _MORE_ITEMS else "keys"
            out.append(_truncation(_PREVIEW + path, kind, None, kind))
            continue
        if isinstance(node, list):
            stack.extend((f"{path}/{i}", item) for i, item in reversed(list(enumerate(node))))
        elif isinstance(node, dict):
            stack.extend((pointer(path, key), item) for key, item in reversed(node.items()))
    # Every reported cut stands at a node of the preview; any other is kept, not lost.
    out.extend(_truncation(_PREVIEW + t.path, t.kind, t.omitted, t.unit)
               for left in reported.values() for t in left)  # fmt: skip
    return tuple(out)


def _resolve(value: Any, path: str) -> Any:
    """The value at RFC 6901 pointer *path* in *value*, or None if it is not there."""
    if not path:
        return value
    for token in path[1:].split("/"):
        key = token.replace("~1", "/").replace("~0", "~")
        if isinstance(value, list) and key.isdigit() and int(key) < len(value):
            value = value[int(key)]
        elif isinstance(value, dict) and key in value:
            value = value[key]
        else:
            return None
    return value

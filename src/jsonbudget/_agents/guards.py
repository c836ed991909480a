"""Guards for agent loops: per tool (`bounded_tool`), per result (`ResultGate`), per turn
(`TurnBudget`). Each layer catches what the one above missed."""

from __future__ import annotations

import asyncio
import contextlib
import functools
import inspect
import io
import itertools
import threading
from collections.abc import Callable, Coroutine, Iterable, Iterator
from dataclasses import dataclass
from typing import Any, Literal, ParamSpec, Protocol, TypeVar, cast, overload

import ijson
import orjson

from .._encode.encoder import Encoded, Encoder, dumps_whole, encode, pointer
from .._limits import MAX_LIMIT, MIN_BYTES, Limits, check_int
from .._reader import read_bounded_text
from ..errors import DecodeError, EncodeError, LimitError
from .spill import MAX_LABEL_CHARS, SpillRef, SpillStore

__all__ = [
    "DEFAULT_PREVIEW_BYTES",
    "DEFAULT_READ_HINT",
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
ToolOutput = Literal["str", "bytes"]
AdmitReason = Literal["fits", "result_limit", "turn_limit"]

#: A spilled result's preview (reference included) is at most this many bytes by default.
DEFAULT_PREVIEW_BYTES = 4096
#: What a preview tells its reader about getting the rest.
DEFAULT_READ_HINT = "read more with SpillStore.read(ref, offset, limit)"
_MAX_HINT_CHARS = 200
_STREAM_CHUNK = 1024 * 1024
_FLUSH_BYTES = 1024 * 1024
_BATCH = 512
# A JSON preview parses at most this much of the spilled file's beginning.
_JSON_PREFIX_MIN = 64 * 1024
_JSON_PREFIX_MAX = 4 * 1024 * 1024
_JSON_WS = b" \t\r\n"
_MEDIA = {"json": "application/json", "text": "text/plain"}
_TEXT_PREVIEW_MIN = 16


@dataclass(frozen=True, slots=True)
class GateResult:
    """What `ResultGate` hands on: the result unchanged, or a preview and its spill reference.

    ``data`` is what goes to the model; ``size`` is the whole result's size in bytes
    (its JSON encoding for Python objects); ``spill`` is None when it passed through.
    """

    data: bytes
    kind: Literal["json", "text"]
    size: int
    spill: SpillRef | None

    @property
    def spilled(self) -> bool:
        return self.spill is not None

    @property
    def text(self) -> str:
        return self.data.decode("utf-8")


@dataclass(frozen=True, slots=True)
class Admitted:
    """One result admitted to a turn and what `TurnBudget` did with it.

    ``reason`` is ``"fits"`` (passed unchanged), ``"result_limit"`` (over the per-result
    limit: spilled) or ``"turn_limit"`` (would have pushed the turn past its limit:
    spilled). ``over_budget`` is true only when not even the bare reference fitted what was
    left of the turn; it was admitted anyway, since every tool call needs an answer.
    """

    tool: str
    data: bytes
    kind: Literal["json", "text"]
    size: int
    admitted_bytes: int
    spill: SpillRef | None
    reason: AdmitReason
    over_budget: bool

    @property
    def text(self) -> str:
        return self.data.decode("utf-8")

    def summary(self) -> dict[str, Any]:
        """Sizes, reason and reference, never the content: safe for logs."""
        return {
            "tool": self.tool,
            "size": self.size,
            "admitted_bytes": self.admitted_bytes,
            "reason": self.reason,
            "over_budget": self.over_budget,
            "spill": None if self.spill is None else self.spill.to_json(),
        }


@dataclass(frozen=True, slots=True)
class TurnReport:
    """The state of one turn: its limit, what was used, and every admitted result."""

    max_turn_bytes: int
    used_bytes: int
    results: tuple[Admitted, ...]

    @property
    def spilled(self) -> int:
        return sum(1 for r in self.results if r.spill is not None)

    @property
    def over_budget(self) -> bool:
        return self.used_bytes > self.max_turn_bytes

    def summary(self) -> dict[str, Any]:
        """Counts and sizes, never the content: safe for logs."""
        return {
            "max_turn_bytes": self.max_turn_bytes,
            "used_bytes": self.used_bytes,
            "results": len(self.results),
            "spilled": self.spilled,
            "items": [r.summary() for r in self.results],
        }


_NO_OBJECT: Any = object()


class _Measured:
    """A result sized against a limit: either whole in ``data``, or a way to stream it."""

    __slots__ = ("chunks", "data", "kind", "obj", "size")

    def __init__(
        self,
        kind: Literal["json", "text"],
        *,
        data: bytes | None = None,
        chunks: Iterable[bytes | bytearray | memoryview] | None = None,
        obj: Any = _NO_OBJECT,
        size: int | None = None,
    ) -> None:
        self.kind: Literal["json", "text"] = kind
        self.data = data
        self.chunks = chunks
        self.obj = obj
        self.size = size


class ResultGate:
    """Pass small results through unchanged; spill large ones whole and show a preview.

    A result is bytes, a str, an iterator of byte chunks, a binary file, or any other
    Python value (encoded as JSON). One at most ``max_result_bytes`` long passes through
    unchanged. A larger one is written whole to *store* (a private `SpillStore` by
    default, created on first use) and replaced by a preview of at most ``preview_bytes``
    that names its reference, size and sha256.
    """

    __slots__ = (
        "_default",
        "_encoder",
        "_kind",
        "_lock",
        "_max_result_bytes",
        "_preview_bytes",
        "_read_hint",
        "_store",
    )

    def __init__(
        self,
        max_result_bytes: int,
        store: SpillStore | None = None,
        *,
        preview_bytes: int | None = None,
        kind: ResultKind = "auto",
        read_hint: str = DEFAULT_READ_HINT,
        default: Callable[[Any], Any] | None = None,
    ) -> None:
        self._max_result_bytes = check_int("max_result_bytes", max_result_bytes, minimum=MIN_BYTES)
        if kind not in ("auto", "json", "text"):
            raise LimitError("kind", kind, "must be 'auto', 'json' or 'text'")
        if not isinstance(read_hint, str) or len(read_hint) > _MAX_HINT_CHARS:
            raise LimitError("read_hint", str(read_hint)[:40], "must be a str of at most 200 chars")
        if store is not None and not isinstance(store, SpillStore):
            raise TypeError(f"store must be a SpillStore, not {type(store).__name__}")
        self._read_hint = read_hint
        self._kind: ResultKind = kind
        self._default = default
        # Built once: the pass-through check runs for every result.
        self._encoder = Encoder(max_bytes=self._max_result_bytes, default=default)
        self._store = store
        self._lock = threading.Lock()
        # The largest reference a preview can carry (64-char label, 13-digit size).
        worst = SpillRef("x" * MAX_LABEL_CHARS + "." + "0" * 64 + ".json", MAX_LIMIT, "0" * 64,
                         "application/json", "x", _NO_PATH)  # fmt: skip
        json_overhead = len(_json_preview(b"0", worst, read_hint)) - 1
        text_overhead = len(_text_footer(worst, MAX_LIMIT, read_hint)) + 1
        smallest = max(json_overhead + MIN_BYTES, text_overhead + _TEXT_PREVIEW_MIN)
        if preview_bytes is None:
            preview_bytes = max(min(DEFAULT_PREVIEW_BYTES, self._max_result_bytes), smallest)
        check_int("preview_bytes", preview_bytes, minimum=smallest)
        if preview_bytes > self._max_result_bytes:
            raise LimitError(
                "max_result_bytes",
                max_result_bytes,
                f"must be at least preview_bytes ({preview_bytes}), which holds a preview and "
                f"its reference",
            )
        self._preview_bytes = preview_bytes

    @property
    def max_result_bytes(self) -> int:
        return self._max_result_bytes

    @property
    def preview_bytes(self) -> int:
        return self._preview_bytes

    @property
    def store(self) -> SpillStore:
        """The spill store, created (a private default one) on first use."""
        with self._lock:
            if self._store is None:
                self._store = SpillStore()
            return self._store

    def apply(self, result: Any, *, label: str = "result") -> GateResult:
        """Pass *result* through if it fits ``max_result_bytes``, else spill it; see the class."""
        measured = self._measure(result)
        if measured.data is not None:
            return GateResult(measured.data, measured.kind, len(measured.data), None)
        return self._spill(measured, label=label, budget=self._preview_bytes)

    async def aapply(self, result: Any, *, label: str = "result") -> GateResult:
        """`apply` in a worker thread, so spilling to disk does not block the event loop."""
        return await asyncio.to_thread(self.apply, result, label=label)

    # -- internals shared with TurnBudget ------------------------------------------------

    def _measure(self, result: Any) -> _Measured:
        limit = self._max_result_bytes
        if isinstance(result, bytes | bytearray | memoryview):
            view = memoryview(result).cast("B")
            kind = self._sniff(view[:4096])
            if len(view) <= limit:
                return _Measured(kind, data=result if isinstance(result, bytes) else bytes(view))
            return _Measured(kind, chunks=(view,), size=len(view))
        if isinstance(result, str):
            kind = self._sniff(result[:4096].encode("utf-8", "replace"))
            if len(result) <= limit:  # a char is at least one byte: only then can it fit
                data = _encode_str(result)
                if len(data) <= limit:
                    return _Measured(kind, data=data)
                return _Measured(kind, chunks=(data,), size=len(data))
            return _Measured(kind, chunks=_str_chunks(result))
        if hasattr(result, "read") or _is_iterator(result):
            return self._measure_stream(_stream_chunks(result), limit)
        # Any other value is JSON. The encoder never does more work than the limit needs.
        encoded = self._encoder.encode(result)
        if encoded.complete or _only_unencodable(encoded):
            return _Measured("json", data=encoded.data)
        return _Measured("json", obj=result)

    def _measure_stream(self, chunks: Iterator[memoryview], limit: int) -> _Measured:
        head: list[memoryview] = []
        held = 0
        for chunk in chunks:
            head.append(chunk)
            held += len(chunk)
            if held > limit:
                kind = self._sniff(bytes(head[0][:4096]))
                return _Measured(kind, chunks=itertools.chain(head, chunks))
        data = b"".join(head)
        return _Measured(self._sniff(data[:4096]), data=data)

    def _sniff(self, head: bytes | memoryview) -> Literal["json", "text"]:
        if self._kind != "auto":
            return self._kind
        first = bytes(head).lstrip(_JSON_WS)[:1]
        return "json" if first in (b"{", b"[") else "text"

    def _spill(self, measured: _Measured, *, label: str, budget: int) -> GateResult:
        """Write the whole result to the store and build a preview of at most *budget* bytes.

        When *budget* cannot hold a preview, the bare reference is returned (it may exceed
        *budget*; `TurnBudget` reports that).
        """
        store = self.store
        if measured.obj is not _NO_OBJECT:
            chunks: Iterable[Any] = _json_chunks(measured.obj, self._default)
        elif measured.chunks is not None:
            chunks = measured.chunks
        else:
            chunks = (measured.data,)
        ref = store.put(chunks, label=label, media_type=_MEDIA[measured.kind])
        if measured.kind == "json":
            data = self._json_preview(measured, ref, budget)
            if data is not None:
                return GateResult(data, "json", ref.size, ref)
        return GateResult(self._text_preview(ref, budget), "text", ref.size, ref)

    def _json_preview(self, measured: _Measured, ref: SpillRef, budget: int) -> bytes | None:
        value_budget = budget - (len(_json_preview(b"0", ref, self._read_hint)) - 1)
        if value_budget < MIN_BYTES:
            return orjson.dumps({"spilled": _spilled_info(ref, self._read_hint)})
        if measured.obj is not _NO_OBJECT:
            value: Any = measured.obj
        else:
            span = min(_JSON_PREFIX_MAX, max(_JSON_PREFIX_MIN, 8 * value_budget))
            parsed = _parse_json_prefix(self.store.read(ref.ref, 0, span), ref.size <= span)
            if parsed is None:
                return None  # not JSON after all: a text preview says what it is
            value, open_paths = parsed
            shown = encode(value, max_bytes=value_budget, default=self._default)
            return _json_preview(_unknown_counts(shown, open_paths), ref, self._read_hint)
        shown = encode(value, max_bytes=value_budget, default=self._default)
        return _json_preview(shown.data, ref, self._read_hint)

    def _text_preview(self, ref: SpillRef, budget: int) -> bytes:
        text_budget = budget - len(_text_footer(ref, ref.size, self._read_hint)) - 1
        if text_budget < _TEXT_PREVIEW_MIN:
            return _text_footer(ref, 0, self._read_hint)
        raw = self.store.read(ref.ref, 0, text_budget + 1)
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
        return shown + sep + _text_footer(ref, len(shown), self._read_hint)


def gate_result(
    result: Any,
    max_result_bytes: int,
    *,
    store: SpillStore | None = None,
    label: str = "result",
    preview_bytes: int | None = None,
    kind: ResultKind = "auto",
    read_hint: str = DEFAULT_READ_HINT,
    default: Callable[[Any], Any] | None = None,
) -> GateResult:
    """One-call `ResultGate`: pass *result* through or spill it; see `ResultGate`."""
    gate = ResultGate(
        max_result_bytes,
        store,
        preview_bytes=preview_bytes,
        kind=kind,
        read_hint=read_hint,
        default=default,
    )
    return gate.apply(result, label=label)


class TurnBudget:
    """Admit the results of one turn within ``max_turn_bytes``, spilling what would overflow.

    Results are admitted first come, first served; parallel calls from threads or asyncio
    tasks are safe (the accounting is under a lock, and a spill reserves its preview's
    space before writing, so concurrent admissions never overspend). A result over
    ``max_result_bytes`` (default: ``max_turn_bytes``) is spilled as by `ResultGate`; one
    that fits it but not what is left of the turn is spilled too, its preview cut to what
    is left.
    """

    __slots__ = ("_gate", "_lock", "_max_turn_bytes", "_results", "_used")

    def __init__(
        self,
        max_turn_bytes: int,
        *,
        store: SpillStore | None = None,
        max_result_bytes: int | None = None,
        preview_bytes: int | None = None,
        kind: ResultKind = "auto",
        read_hint: str = DEFAULT_READ_HINT,
        default: Callable[[Any], Any] | None = None,
    ) -> None:
        self._max_turn_bytes = check_int("max_turn_bytes", max_turn_bytes, minimum=MIN_BYTES)
        if max_result_bytes is None:
            max_result_bytes = max_turn_bytes
        elif check_int("max_result_bytes", max_result_bytes, minimum=MIN_BYTES) > max_turn_bytes:
            raise LimitError("max_result_bytes", max_result_bytes, "must be <= max_turn_bytes")
        self._gate = ResultGate(
            max_result_bytes,
            store,
            preview_bytes=preview_bytes,
            kind=kind,
            read_hint=read_hint,
            default=default,
        )
        self._lock = threading.Lock()
        self._used = 0
        self._results: list[Admitted] = []

    @property
    def gate(self) -> ResultGate:
        return self._gate

    @property
    def remaining(self) -> int:
        with self._lock:
            return max(0, self._max_turn_bytes - self._used)

    def admit(self, result: Any, *, tool: str = "result") -> Admitted:
        """Admit one result of this turn; see the class for what happens to it."""
        measured = self._gate._measure(result)
        with self._lock:
            left = self._max_turn_bytes - self._used
            if measured.data is not None and len(measured.data) <= left:
                size = len(measured.data)
                self._used += size
                admitted = Admitted(tool, measured.data, measured.kind, size, size, None,
                                    "fits", False)  # fmt: skip
                self._results.append(admitted)
                return admitted
            reason: AdmitReason = "result_limit" if measured.data is None else "turn_limit"
            reserved = max(0, min(self._gate.preview_bytes, left))
            self._used += reserved
        with contextlib.ExitStack() as on_error:
            on_error.callback(self._release, reserved)  # a failed spill gives its room back
            gated = self._gate._spill(measured, label=tool, budget=reserved)
            on_error.pop_all()
        used = len(gated.data)
        admitted = Admitted(tool, gated.data, gated.kind, gated.size, used, gated.spill, reason,
                            used > reserved)  # fmt: skip
        with self._lock:
            self._used += used - reserved
            self._results.append(admitted)
        return admitted

    async def aadmit(self, result: Any, *, tool: str = "result") -> Admitted:
        """`admit` in a worker thread, so a spill does not block the event loop."""
        return await asyncio.to_thread(self.admit, result, tool=tool)

    def _release(self, reserved: int) -> None:
        with self._lock:
            self._used -= reserved

    def report(self) -> TurnReport:
        """What this turn has admitted so far."""
        with self._lock:
            return TurnReport(self._max_turn_bytes, self._used, tuple(self._results))

    def reset(self) -> TurnReport:
        """Start a new turn; returns the report of the one that ended."""
        with self._lock:
            ended = TurnReport(self._max_turn_bytes, self._used, tuple(self._results))
            self._used = 0
            self._results = []
            return ended

    new_turn = reset


# -- bounded_tool --------------------------------------------------------------------------

P = ParamSpec("P")
OutT_co = TypeVar("OutT_co", covariant=True)


class ToolDecorator(Protocol[OutT_co]):
    """What `bounded_tool(...)` returns: wraps a sync or async function."""

    @overload
    def __call__(
        self, fn: Callable[P, Coroutine[Any, Any, Any]], /
    ) -> Callable[P, Coroutine[Any, Any, OutT_co]]: ...
    @overload
    def __call__(self, fn: Callable[P, Any], /) -> Callable[P, OutT_co]: ...


@overload
def bounded_tool(
    limits: Limits | None = None,
    *,
    max_bytes: int | None = None,
    output: Literal["str"] = "str",
    max_items: int | None = None,
    max_field_bytes: int | None = None,
    max_depth: int | None = None,
    strategy: Literal["balanced", "prefix"] = "balanced",
    markers: Literal["text", "structured"] = "text",
    default: Callable[[Any], Any] | None = None,
) -> ToolDecorator[str]: ...
@overload
def bounded_tool(
    limits: Limits | None = None,
    *,
    max_bytes: int | None = None,
    output: Literal["bytes"],
    max_items: int | None = None,
    max_field_bytes: int | None = None,
    max_depth: int | None = None,
    strategy: Literal["balanced", "prefix"] = "balanced",
    markers: Literal["text", "structured"] = "text",
    default: Callable[[Any], Any] | None = None,
) -> ToolDecorator[bytes]: ...
def bounded_tool(
    limits: Limits | None = None,
    *,
    max_bytes: int | None = None,
    output: ToolOutput = "str",
    max_items: int | None = None,
    max_field_bytes: int | None = None,
    max_depth: int | None = None,
    strategy: Literal["balanced", "prefix"] = "balanced",
    markers: Literal["text", "structured"] = "text",
    default: Callable[[Any], Any] | None = None,
) -> ToolDecorator[str] | ToolDecorator[bytes]:
    """Wrap a tool function (sync or async, plain or method) so its result is bounded JSON.

    Give *limits* or *max_bytes* (with the other `Limits` options); they are validated
    here, when the decorator is built. The result is encoded by `bounded_dumps` and
    returned as ``str`` (default) or ``bytes``; exceptions pass through unchanged.
    """
    if callable(limits) and not isinstance(limits, Limits):
        raise TypeError("bounded_tool needs its limits: use @bounded_tool(max_bytes=...)")
    if limits is None:
        if max_bytes is None:
            raise LimitError("max_bytes", None, "bounded_tool needs limits or max_bytes")
        limits = Limits(
            max_bytes,
            max_items=max_items,
            max_field_bytes=max_field_bytes,
            **({} if max_depth is None else {"max_depth": max_depth}),
        )
    elif not isinstance(limits, Limits):
        raise TypeError(f"limits must be a Limits, not {type(limits).__name__}")
    elif any(v is not None for v in (max_bytes, max_items, max_field_bytes, max_depth)):
        raise LimitError("max_bytes", max_bytes, "give limits or the separate options, not both")
    if output not in ("str", "bytes"):
        raise LimitError("output", output, "must be 'str' or 'bytes'")
    if strategy not in ("balanced", "prefix"):
        raise LimitError("strategy", strategy, "must be 'balanced' or 'prefix'")
    if markers not in ("text", "structured"):
        raise LimitError("markers", markers, "must be 'text' or 'structured'")
    encoder = Encoder(limits, strategy=strategy, markers=markers, default=default)
    as_text = output == "str"

    def finish(value: Any) -> str | bytes:
        data = encoder.dumps(value)
        return data.decode("utf-8") if as_text else data

    def decorate(fn: Any) -> Any:
        if isinstance(fn, staticmethod | classmethod):
            return type(fn)(decorate(fn.__func__))
        if not callable(fn):
            raise TypeError(f"bounded_tool wraps a function, not {type(fn).__name__}")
        if inspect.iscoroutinefunction(fn):

            @functools.wraps(fn)
            async def async_wrapper(*args: Any, **kwargs: Any) -> str | bytes:
                return finish(await fn(*args, **kwargs))

            return async_wrapper

        @functools.wraps(fn)
        def wrapper(*args: Any, **kwargs: Any) -> str | bytes:
            return finish(fn(*args, **kwargs))

        return wrapper

    return cast("ToolDecorator[str] | ToolDecorator[bytes]", decorate)


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


def _text_footer(ref: SpillRef, shown: int, hint: str) -> bytes:
    return (
        f"…[spilled: the first {shown} of {ref.size} bytes are shown; the whole result is "
        f"{ref.ref} (sha256 {ref.sha256}); {hint}, from offset {shown}]"
    ).encode()


def _only_unencodable(encoded: Encoded) -> bool:
    # Marked unencodable values are the encoder's answer for this value at any size.
    return bool(encoded.truncations) and all(t.kind == "unencodable" for t in encoded.truncations)


def _is_iterator(value: object) -> bool:
    return isinstance(value, Iterator)


def _stream_chunks(source: Any) -> Iterator[memoryview]:
    if hasattr(source, "read"):
        while True:
            block = source.read(_STREAM_CHUNK)
            if not block:
                return
            yield _checked_view(block)
    for chunk in source:
        yield _checked_view(chunk)


def _checked_view(chunk: object) -> memoryview:
    if isinstance(chunk, bytes | bytearray | memoryview):
        return memoryview(chunk).cast("B")
    raise TypeError(f"a streamed result must yield bytes, not {type(chunk).__name__}")


def _encode_str(text: str) -> bytes:
    try:
        return text.encode("utf-8")
    except UnicodeEncodeError as exc:
        raise EncodeError(
            f"a str result holds a lone surrogate at character {exc.start}", path=""
        ) from None


def _str_chunks(text: str) -> Iterator[bytes]:
    # Slicing a str never splits a character, so each slice encodes on its own.
    step = _STREAM_CHUNK // 4
    for start in range(0, len(text), step):
        yield _encode_str(text[start : start + step])


def _json_chunks(obj: Any, default: Callable[[Any], Any] | None) -> Iterator[bytes]:
    """The whole JSON encoding of *obj*; a top-level list or dict goes a batch at a time.

    One orjson call per batch of members, not per member: orjson gives each call at least
    a 4 KB buffer, and a batch holds only references, so memory stays one batch deep.
    """
    if isinstance(obj, list | tuple):
        open_, close = b"[", b"]"
        batches: Iterator[Any] = (obj[i : i + _BATCH] for i in range(0, len(obj), _BATCH))
    elif isinstance(obj, dict):
        open_, close = b"{", b"}"
        members = iter(obj.items())
        batches = iter(lambda: dict(itertools.islice(members, _BATCH)), {})
    else:
        yield dumps_whole(obj, default=default)
        return
    buf = bytearray(open_)
    wrote = False
    for batch in batches:
        # "[a,b]"[1:-1] is "a,b": members joined exactly as orjson joins them.
        inner = dumps_whole(batch, default=default)[1:-1]
        if not inner:
            continue  # an object whose only keys the encoder had to drop
        if wrote:
            buf += b","
        wrote = True
        buf += inner
        if len(buf) >= _FLUSH_BYTES:
            yield bytes(buf)
            buf.clear()
    buf += close
    yield bytes(buf)


def _parse_json_prefix(prefix: bytes, whole: bool) -> tuple[Any, set[str]] | None:
    """The value at the start of *prefix*, and the pointers of the containers left open.

    Open containers get a "more" marker where the prefix ended. Returns None when
    *prefix* does not start a JSON value ijson can follow.
    """
    root: Any = _NO_OBJECT
    stack: list[tuple[Any, str]] = []
    keys: list[str] = []

    def add(value: Any) -> str:
        nonlocal root
        if not stack:
            root = value
            return ""
        parent, where = stack[-1]
        if isinstance(parent, list):
            parent.append(value)
            return f"{where}/{len(parent) - 1}"
        parent[keys[-1]] = value
        return pointer(where, keys[-1])

    events = ijson.parse(io.BytesIO(prefix), use_float=True)
    try:
        for _, event, value in events:
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
    except ijson.JSONError:
        if whole or root is _NO_OBJECT:
            return None
    if root is _NO_OBJECT:
        return None
    # The prefix ended inside these containers: say so where it happened.
    for container, _ in stack:
        if isinstance(container, list):
            container.append(_MORE_ITEMS)
        else:
            container["…"] = _MORE_KEYS
    return root, {where for _, where in stack}


_MORE_ITEMS = "…[omitted: more items]"
_MORE_KEYS = "[omitted: more keys]"


def _unknown_counts(shown: Encoded, open_paths: set[str]) -> bytes:
    """*shown* with the counts of cuts inside open containers made "more".

    The encoder counted the items of a container that the prefix had already cut, so its
    count is only a lower bound; guarantee 4 says not to state it. The value is at most
    a preview's size, so a round trip through orjson is cheap and changes nothing else.
    """
    fix = [t for t in shown.truncations if t.kind in ("items", "keys")
           and t.path.rsplit("/", 1)[0] in open_paths]  # fmt: skip
    if not fix:
        return shown.data
    value = orjson.loads(shown.data)
    for cut in fix:
        parent_path, _, token = cut.path.rpartition("/")
        parent = _resolve(value, parent_path)
        # The marker's own key or index: the encoder picks a key that is not taken.
        key = token.replace("~1", "/").replace("~0", "~")
        if isinstance(parent, list) and key.isdigit() and int(key) < len(parent):
            parent[int(key)] = _MORE_ITEMS
        elif isinstance(parent, dict) and key in parent:
            parent[key] = _MORE_KEYS
    return orjson.dumps(value)


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

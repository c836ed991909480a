"""The bounded text reader: at most ``max_bytes`` of text from a stream, honestly flagged."""

from __future__ import annotations

import codecs
import zlib
from collections.abc import Iterable, Iterator
from dataclasses import dataclass
from typing import Final, Protocol, TypeAlias, runtime_checkable

from ._limits import check_int
from .errors import DecodeError, LimitError

__all__ = [
    "DEFAULT_CHUNK_BYTES",
    "MAX_EMPTY_CHUNKS",
    "BinarySource",
    "BoundedReader",
    "BoundedText",
    "read_bounded_text",
]

#: How much is asked of a stream at once (compressed bytes, for gzip input).
DEFAULT_CHUNK_BYTES = 64 * 1024
#: gzip input only: compressed bytes read beyond this stop the read (complete=False), so a
#: stream of empty gzip members, which inflates to nothing, cannot keep the reader busy
#: forever. Real deflate data never needs more than the decoded size plus a small overhead.
_GZIP_SOURCE_SLACK = 1024 * 1024
# gzip magic bytes; zlib's wbits=31 accepts exactly one gzip member.
_GZIP_WBITS = 16 + zlib.MAX_WBITS
#: UTF-8 lead bytes from these on start a 3-byte and a 4-byte character.
_LEAD3: Final = 0xE0
_LEAD4: Final = 0xF0
#: An iterable that yields this many empty chunks in a row is taken to be stuck: the read
#: stops there with complete=False, so an endless run of b"" cannot hang it.
MAX_EMPTY_CHUNKS = 1024


@runtime_checkable
class BinarySource(Protocol):
    """Anything with a binary ``read(n)``: files, sockets' makefile(), ``io.BytesIO``.

    The reader always passes *n*, so a ``read(self, n: int)`` without a default is one
    (type checkers refused it while the protocol declared ``n: int = -1``)."""

    def read(self, n: int, /) -> bytes | None: ...


# The bytes-like objects the annotations name. Any object with the buffer protocol is read
# (an `array.array`, an `mmap`), but Python 3.11 has no runtime name for them all
# (`collections.abc.Buffer` is 3.12's); `memoryview(obj)` passes one as such.
_BytesLike: TypeAlias = bytes | bytearray | memoryview
# What `read_bounded_text` reads: a binary stream, an iterable of byte chunks, or one
# bytes-like object.
_TextSource: TypeAlias = BinarySource | Iterable[_BytesLike] | _BytesLike


@dataclass(frozen=True, slots=True)
class BoundedText:
    """Text read under a byte limit.

    ``bytes_read`` counts the decoded bytes (after gzip, before text decoding) taken from
    the source: at most ``max_bytes + 1``. ``bytes_returned`` counts those that ``text``
    stands for (at most ``max_bytes``; fewer when a cut backed up to a character
    boundary). ``source_bytes_read`` counts raw bytes pulled from the source (the
    compressed bytes for gzip input).
    """

    text: str
    complete: bool
    bytes_read: int
    bytes_returned: int
    source_bytes_read: int


class BoundedReader:
    """A reusable, configured bounded reader; see `read_bounded_text`."""

    __slots__ = ("_chunk_bytes", "_encoding", "_gzip", "_max_bytes", "_max_source_bytes")

    def __init__(
        self,
        max_bytes: int,
        *,
        encoding: str = "utf-8",
        gzip: bool = False,
        chunk_bytes: int = DEFAULT_CHUNK_BYTES,
        max_source_bytes: int | None = None,
    ) -> None:
        self._max_bytes = check_int("max_bytes", max_bytes, minimum=1)
        self._chunk_bytes = check_int("chunk_bytes", chunk_bytes, minimum=1, maximum=2**30)
        if max_source_bytes is not None:
            check_int("max_source_bytes", max_source_bytes, minimum=1)
        elif gzip:
            max_source_bytes = 4 * (self._max_bytes + 1) + _GZIP_SOURCE_SLACK
        self._max_source_bytes = max_source_bytes
        if type(gzip) is not bool:
            raise LimitError("gzip", gzip, "must be a bool")
        self._gzip = gzip
        self._encoding = _check_encoding(encoding)

    @property
    def max_bytes(self) -> int:
        return self._max_bytes

    def read(self, source: _TextSource) -> BoundedText:
        """Read at most ``max_bytes`` of text from *source*; see `read_bounded_text`."""
        want = self._max_bytes + 1
        if self._gzip:
            raw = _RawChunks(source, self._chunk_bytes, self._max_source_bytes)
            return _decode_bounded(_inflate(raw, want), self._max_bytes, self._encoding, raw)
        # Without gzip a raw byte is a decoded byte: never take more than max_bytes + 1.
        cap = want if self._max_source_bytes is None else min(want, self._max_source_bytes)
        raw = _RawChunks(source, self._chunk_bytes, cap)
        return _decode_bounded(raw, self._max_bytes, self._encoding, raw)


def read_bounded_text(
    source: _TextSource,
    max_bytes: int,
    *,
    encoding: str = "utf-8",
    gzip: bool = False,
    chunk_bytes: int = DEFAULT_CHUNK_BYTES,
    max_source_bytes: int | None = None,
) -> BoundedText:
    """Read text from *source* with a limit of *max_bytes* decoded bytes.

    *source* is a binary stream (anything with ``read(n)``), an iterable of byte chunks,
    or one bytes-like object. At most ``max_bytes + 1`` decoded bytes are taken, the one
    extra to learn whether the input was longer: ``complete`` is true only when the source
    ended within the limit. A cut inside a multi-byte character backs up to the previous
    character boundary. Invalid text raises `DecodeError` with its decoded byte offset.
    With ``gzip=True`` the limit applies to the inflated bytes, so a tiny file that
    inflates to gigabytes costs only the limit. The limits are validated before any read.
    """
    reader = BoundedReader(
        max_bytes,
        encoding=encoding,
        gzip=gzip,
        chunk_bytes=chunk_bytes,
        max_source_bytes=max_source_bytes,
    )
    return reader.read(source)


def _check_encoding(encoding: object) -> str:
    if not isinstance(encoding, str):
        raise LimitError("encoding", encoding, "must be a str naming a text encoding")
    try:
        info = codecs.lookup(encoding)
    except (LookupError, ValueError):  # ValueError: a NUL in the name ("utf-8\0")
        raise LimitError("encoding", encoding, "is not a known encoding") from None
    # bytes-to-bytes codecs such as "zlib" or "base64" are not text encodings.
    if not getattr(info, "_is_text_encoding", True):
        raise LimitError("encoding", encoding, "is not a text encoding")
    unbounded = _UNBOUNDED_DECODERS.get(info.name)
    if unbounded is not None:
        raise LimitError("encoding", encoding, unbounded)
    return info.name


#: Text codecs whose incremental decoder can hold back an unbounded run of valid input: a
#: bounded read, which reads in chunks and cuts, would return the wrong text or nothing
#: (16 MiB of "a" read as idna came back "", bytes_returned=0). The standard library's
#: other text codecs hold back at most one escape or character; a test checks them all.
_UNBOUNDED_DECODERS: Final = {
    # Each chunk is decoded as if it were the whole text: "bücher" read in two chunks
    # came back as "bcherͩ", complete.
    "punycode": "decodes only whole texts: its incremental decoder is not",
    "idna": "holds back a whole label: its incremental decoder returns nothing before a '.'",
    "utf-7": (
        "holds back a whole base64 run: its incremental decoder returns nothing of a run"
        " before the run ends"
    ),
}


class _RawChunks:
    """Raw chunks pulled from a source, counting what was taken (per-call state)."""

    __slots__ = ("_source", "chunk_bytes", "ended", "max_taken", "taken")

    def __init__(self, source: object, chunk_bytes: int, max_taken: int | None) -> None:
        self._source = source
        self.chunk_bytes = chunk_bytes
        self.max_taken = max_taken
        self.taken = 0
        self.ended = False

    def __iter__(self) -> Iterator[memoryview]:
        source = self._source
        if _buffer(source) is not None:  # bytes, an array.array, an mmap: one chunk
            return self._from_iterable((source,))
        if isinstance(source, str):
            raise TypeError("the source must be binary (bytes, a stream or byte chunks), not str")
        if hasattr(source, "read"):
            return self._from_stream(source)
        if isinstance(source, Iterable):
            return self._from_iterable(source)
        raise TypeError(f"cannot read text from a {type(source).__name__}")

    def _left(self) -> int | None:
        return None if self.max_taken is None else self.max_taken - self.taken

    def _from_stream(self, stream: BinarySource) -> Iterator[memoryview]:
        while True:
            left = self._left()
            if left is not None and left <= 0:
                return
            # Ask only for what is still wanted, so an endless stream and a 12-byte limit
            # hand out exactly 13 bytes.
            want = self.chunk_bytes if left is None else min(self.chunk_bytes, left)
            data = stream.read(want)
            if data is None:
                raise TypeError("the stream is non-blocking and has no data ready")
            view = _as_view(data)
            if len(view) > want:
                raise TypeError(f"the stream's read({want}) returned {len(view)} bytes")
            if not view:
                self.ended = True
                return
            self.taken += len(view)
            yield view

    def _from_iterable(self, pieces: Iterable[object]) -> Iterator[memoryview]:
        empty = 0
        for piece in pieces:
            left = self._left()
            # A strided chunk is copied only this far; the byte past what is wanted shows
            # below that the chunk was cut, so the source is not taken to have ended.
            view = _as_view(piece, None if left is None else max(left, 0) + 1)
            if not view:
                empty += 1
                if empty >= MAX_EMPTY_CHUNKS:
                    return  # stuck: not ended, so nothing is claimed about the rest
                continue
            empty = 0
            if left is not None:
                if left <= 0:
                    return
                if len(view) > left:
                    # Cut by the source cap: the rest of this chunk was never taken, so
                    # the source has not ended.
                    yield from self._slices(view[:left])
                    return
            yield from self._slices(view)
        self.ended = True

    def _slices(self, view: memoryview) -> Iterator[memoryview]:
        # A caller's 1 GB chunk is handed on in slices of a view, never copied.
        for start in range(0, len(view), self.chunk_bytes):
            part = view[start : start + self.chunk_bytes]
            self.taken += len(part)
            yield part


def _buffer(obj: object) -> memoryview | None:
    """A view of *obj* if it is bytes-like (has the buffer protocol), else None."""
    if isinstance(obj, bytes | bytearray | memoryview):
        return memoryview(obj)
    if isinstance(obj, str):
        return None
    try:
        return memoryview(obj)  # type: ignore[arg-type]  # checked by the call itself
    except TypeError:
        return None


def _as_view(chunk: object, limit: int | None = None) -> memoryview:
    """*chunk* as a byte view; a strided one copied only to its first *limit* bytes or so."""
    view = _buffer(chunk)
    if view is not None:
        if not view.c_contiguous:
            # Strided views cannot be cast to bytes in place: their bytes are copied, but
            # only as many as can be read, so a 50 MB view read to 64 KiB costs 64 KiB.
            return memoryview(_strided_prefix(view, limit).tobytes())
        if view.format == "B" and view.ndim == 1:
            return view
        # A view with a 0 in its shape holds no bytes, and cast() refuses it.
        return view.cast("B") if view.nbytes else memoryview(b"")
    raise TypeError(f"the source must yield bytes, not {type(chunk).__name__}")


def _strided_prefix(view: memoryview, limit: int | None) -> memoryview:
    """The first rows of *view* that hold at least *limit* bytes (a positive limit)."""
    if limit is None or view.nbytes <= limit:
        return view
    # tobytes() is in C order, so the first rows along the first dimension are a prefix of
    # it. memoryview cannot slice further in, so an N-d view is cut to whole rows.
    row_bytes = view.nbytes // len(view)
    return view[: -(-limit // row_bytes)]


def _inflate(raw: _RawChunks, want: int) -> Iterator[bytes]:
    """Inflate gzip members from *raw*, yielding at most *want* decoded bytes in total."""
    inflater = zlib.decompressobj(_GZIP_WBITS)
    produced = 0
    fresh_member = True
    ended = False  # whether a member has ended
    for chunk in raw:
        data = bytes(chunk)
        while data and produced < want:
            if fresh_member:
                if ended:
                    # gzip(1) and Python's gzip module accept zero padding after a
                    # member, and only there.
                    data = data.lstrip(b"\x00")
                    if not data:
                        break
                fresh_member = False
            # A call that fails returns none of what it inflated (all of a small file,
            # when its CRC is wrong): the state before it counts that again.
            before = inflater.copy()
            try:
                out = inflater.decompress(data, want - produced)
            except zlib.error as exc:
                broke = produced + _inflated_before_error(before, data)
                raise DecodeError(f"invalid gzip data: {exc}", offset=broke) from None
            produced += len(out)
            if out:
                yield out
            if inflater.eof:
                data = inflater.unused_data
                inflater = zlib.decompressobj(_GZIP_WBITS)
                fresh_member = ended = True
            else:
                # Output capped by max_length: the rest of the input waits in the tail.
                data = inflater.unconsumed_tail
        if produced >= want:
            return
    if raw.ended and not fresh_member:
        raise DecodeError("the gzip stream ends inside a member (truncated)", offset=produced)


def _inflated_before_error(inflater: zlib._Decompress, data: bytes) -> int:
    """How many bytes *inflater* gives of *data* before the error it raises there.

    *data* goes in slices, each a sixteenth of the last: a slice that fails is inflated
    again, from a copy of the state before it, in smaller ones, down to single bytes.
    """
    count, step = 0, len(data)
    while True:
        step = max(1, step // 16)
        before = inflater.copy()
        for start in range(0, len(data), step):
            try:
                count += len(inflater.decompress(data[start : start + step]))
            except zlib.error:
                if step == 1:
                    return count
                inflater, data = before, data[start:]
                break
            before = inflater.copy()
        else:  # pragma: no cover - inflating again fails where it failed
            return count


def _decode_bounded(
    chunks: Iterable[bytes | memoryview], max_bytes: int, encoding: str, raw: _RawChunks
) -> BoundedText:
    decoder = codecs.getincrementaldecoder(encoding)(errors="strict")
    parts: list[str] = []
    taken = 0  # decoded bytes taken so far, never more than max_bytes + 1
    for chunk in chunks:
        view = memoryview(chunk)[: max_bytes + 1 - taken]
        if taken + len(view) <= max_bytes:
            parts.append(_decode(decoder, view, taken, final=False))
            taken += len(view)
            continue
        # This chunk holds byte max_bytes + 1: decode what fits, then feed the extra byte
        # only to validate it (a character it completes is not returned).
        head = view[: max_bytes - taken]
        parts.append(_decode(decoder, head, taken, final=False))
        returned = max_bytes - len(decoder.getstate()[0])
        _decode(decoder, view[len(head) :], max_bytes, final=False)
        _check_pending(decoder, encoding, max_bytes + 1)
        return BoundedText("".join(parts), False, max_bytes + 1, returned, raw.taken)
    if not raw.ended:
        # Stopped by max_source_bytes: nothing more was seen, so nothing is claimed.
        returned = taken - len(decoder.getstate()[0])
        _check_pending(decoder, encoding, taken)
        return BoundedText("".join(parts), False, taken, returned, raw.taken)
    parts.append(_decode(decoder, b"", taken, final=True))
    held = decoder.getstate()[0]
    if held:
        # Bytes a final decode still holds: "utf-8-sig" keeps a BOM's first bytes
        # (b"\xef\xbb") and returns "" where "utf-8" raises; both are input that ends
        # inside a character.
        raise DecodeError(
            f"invalid {encoding} text: the input ends inside a character", offset=taken - len(held)
        )
    return BoundedText("".join(parts), True, taken, taken, raw.taken)


def _check_pending(decoder: codecs.IncrementalDecoder, encoding: str, end: int) -> None:
    """Refuse UTF-8 bytes held at the cut that no continuation could make valid.

    CPython's incremental decoder holds ``ED A0`` (a surrogate's first two bytes) or
    ``F4 90`` as if they might complete; with any continuation byte they cannot.
    """
    pending = decoder.getstate()[0]
    if len(pending) < 2 or codecs.lookup(encoding).name not in ("utf-8", "utf-8-sig"):  # noqa: PLR2004 - one byte alone may yet complete
        return
    lead = pending[0]
    length = 4 if lead >= _LEAD4 else 3 if lead >= _LEAD3 else 2
    try:
        (pending + b"\x80" * (length - len(pending))).decode("utf-8")
    except UnicodeDecodeError as exc:
        at = end - len(pending)
        raise DecodeError(f"invalid utf-8 text: {exc.reason}", offset=at) from None


def _decode(
    decoder: codecs.IncrementalDecoder, data: memoryview | bytes, offset: int, *, final: bool
) -> str:
    buffered = len(decoder.getstate()[0])
    try:
        return decoder.decode(data, final)
    except UnicodeDecodeError as exc:
        # The error's start counts from the decoder's buffered bytes plus this input.
        at = max(0, offset - buffered + exc.start)
        raise DecodeError(f"invalid {exc.encoding} text: {exc.reason}", offset=at) from None
    except UnicodeError as exc:
        # Not about a byte: the utf-16 and utf-32 decoders raise this when the text does
        # not start with a byte-order mark (name the order: utf-16-le, utf-16-be).
        raise DecodeError(f"undecodable text: {exc}", offset=max(0, offset - buffered)) from None

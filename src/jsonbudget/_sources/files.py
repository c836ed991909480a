"""Sources over files: a JSON array (under a prefix) and JSON Lines, plain or gzip.

Both resume at an exact byte offset stored in the position, so a page costs about what
its own bytes cost to parse, wherever it lies in the file. Array items are parsed by the
stdlib's C scanner (`json.scanner`) over a sliding decoded window, because it reports
where each value ends, which is what an exact resume offset needs (ijson does not expose
byte offsets); an item nested too deep for it, or holding an integer literal longer than
`int()` accepts, is read again by the iterative parser (`jsonread.scan_json`). A page's
fill parses most of each window in one orjson call instead (`_bulk_run`, three times
faster than the scanner), up to a boundary it finds by search and orjson proves, and
asks the scanner for an item's end only where the page stops. JSON Lines are parsed by
`jsonread.load_json`, orjson on the line's bytes.
"""

from __future__ import annotations

import codecs
import contextlib
import errno
import functools
import gzip as gzip_module
import io
import json
import os
import re
import select
import stat
import sys
import time
import zlib
from collections.abc import Callable, Generator, Iterable, Iterator, Sequence
from json.scanner import make_scanner
from typing import IO, TYPE_CHECKING, Any, Final, Protocol, TypeVar, cast

import orjson

from .._limits import check_int
from ..errors import DecodeError, InvalidCursor, LimitError
from .base import (
    Clipped,
    Filler,
    JSONValue,
    Position,
    Source,
    check_limit_hint,
    described_path,
    page_budget,
    read_bound,
)
from .jsonread import decode_message, exact, float_or_decimal, load_json, scan_json

if TYPE_CHECKING:
    from _typeshed import WriteableBuffer

__all__ = [
    "BOM",
    "DEFAULT_MAX_ITEM_BYTES",
    "DEFAULT_READ_SIZE",
    "GZIP_MAGIC",
    "MAX_READ_SIZE",
    "WRITER_WAIT",
    "Arriving",
    "JsonArrayFileSource",
    "JsonLinesSource",
    "array_items",
    "array_runs",
    "file_errors",
    "gzip_reason",
    "parse_line",
    "passed_over_too_far",
    "read_arrived",
]

#: Bytes read from the file at a time.
DEFAULT_READ_SIZE: Final = 64 * 1024
#: The most bytes a JSON Lines read asks for: a read reserves all it asks for at once,
#: so a budget of a terabyte must not become one read.
_LINES_READ: Final = 1 << 20
#: The largest ``read_size``, for the same reason.
MAX_READ_SIZE: Final = 64 * 1024 * 1024
#: The largest single item (or skipped sibling value) the sources will hold in memory.
DEFAULT_MAX_ITEM_BYTES: Final = 64 * 1024 * 1024
#: The most bytes an item too long to hold is passed over for, in a stream whose end is
#: not known (a pipe, a device, gzip): an endless line or string must not read forever.
#: A plain regular file's own size bounds the pass.
MAX_PASS_OVER: Final = 256 * 1024 * 1024

#: The first two bytes of every gzip member.
GZIP_MAGIC: Final = b"\x1f\x8b"
#: A UTF-8 byte order mark: skipped at the start of a file (RFC 8259 lets parsers do so).
BOM: Final = b"\xef\xbb\xbf"
_WS: Final = re.compile(r"[ \t\n\r]*")
_BLANK_RUN: Final = re.compile(rb"[ \t\n\r]*")
#: The bytes a blank line may start with.
_SPACE: Final = (b" ", b"\t", b"\r", b"\n")
_NEWLINE: Final = 0x0A  # "\n"
_COMMA: Final = 0x2C  # ","
#: Whitespace, the separator after an array item, and the whitespace after it.
_SEP: Final = re.compile(r"[ \t\n\r]*([,\]])[ \t\n\r]*")
#: Within this many characters of the window's end a parse error may just mean "read
#: more": the longest token that can be cut there is a surrogate pair escape.
_EDGE: Final = 16


class _NonFinite(ValueError):
    """NaN or Infinity in the input: not JSON."""


class _TooLong(DecodeError):
    """A value still open after ``max_item_bytes`` of text, or an item whose text is
    longer: an array item is skipped over (`_Window.skip`); anything else (a sibling
    before the prefix's key) is refused."""


def _reject_constant(name: str) -> Any:
    raise _NonFinite(name)


Scan = Callable[[str, int], tuple[Any, int]]


def _new_scanner() -> tuple[Scan, Scan]:
    """The C scanner itself (fast path), and the same with the iterative fallback."""
    decoder = json.JSONDecoder(parse_constant=_reject_constant, parse_float=float_or_decimal)
    # The C scanner, called directly: raw_decode() would only wrap it.
    c_scan: Scan = make_scanner(decoder)  # type: ignore[arg-type]

    def scan(text: str, pos: int) -> tuple[Any, int]:
        try:
            return c_scan(text, pos)
        except RecursionError:
            # Nested past what the recursive C scanner allows: read it iteratively.
            return scan_json(text, pos)
        except (json.JSONDecodeError, _NonFinite):
            raise
        except ValueError:
            # int() refuses integer literals past its digit limit; scan_json keeps them.
            return scan_json(text, pos)

    return c_scan, scan


@contextlib.contextmanager
def file_errors(offset: Callable[[], int]) -> Iterator[None]:
    """Turn a broken gzip stream into a `DecodeError` at ``offset()`` (decoded bytes)."""
    try:
        yield
    except EOFError:
        raise DecodeError(
            "the gzip stream ends inside a member (truncated)", offset=offset()
        ) from None
    except (gzip_module.BadGzipFile, zlib.error) as exc:
        raise DecodeError(f"invalid gzip data: {gzip_reason(exc)}", offset=offset()) from None


def _broken_at(stream: IO[bytes], reached: int) -> int:
    """Where a gzip error met reading *stream* lies, in decoded bytes. A read that fails
    loses all it decoded, so what the reader reached (*reached*) may stand well before
    the bad bytes (at 0 for a file that one read holds); the gzip stream still counts
    what it decoded."""
    return stream.tell() if isinstance(stream, gzip_module.GzipFile) else reached


def gzip_reason(exc: Exception) -> str:
    """What is wrong with a gzip stream, in words: the gzip module's "Not a gzipped file
    (b'ga')" shows a bytes literal. It is met after a member only: a file that does not
    start with one is refused when opened (`_File`; the command line takes a file for
    gzip by its first bytes)."""
    text = str(exc)
    if text.startswith("Not a gzipped file"):
        return "bytes after a member that do not start another member"
    return text


_NOT_REGULAR: Final = (
    "the input is not a regular file (a pipe or a device): its pages after the first "
    "cannot be read; page a file instead"
)

#: How long a first page waits for a writer of a pipe (a FIFO) that none has open
#: (`_written`): a writer started just before it is let in, and a pipe no writer opens
#: is refused rather than waited on forever.
WRITER_WAIT: Final = 1.0

#: How many times a first page (or an iteration from the start) opens a file that
#: changes while it is read, before it gives up (`_read_page`).
_ATTEMPTS: Final = 3

T = TypeVar("T")


class _Changed(Exception):
    """A regular file changed while it was read (`_Watched`): raised in place of the
    read's bytes, which may hold parts of two versions of the file."""


class _Watched(io.FileIO):
    """A file that, once given its identity (size, mtime and ctime as it was opened),
    checks after every read that it still has it.

    A read that returns is then of the file as it was opened: a write, a truncation or
    a rewrite in place that reached any byte read moved the ctime (and mtime) before the
    read ended, where the timestamps are fine enough to tell it from the open (see
    docs/sources.md). One ``fstat`` a read of the buffered stream above it, never one
    an item. A pipe or a device has no identity and is not checked.
    """

    identity: tuple[int, int, int] | None = None
    #: What was read of a pipe to learn that it has a writer (`_written`): given first.
    pending = b""

    # The buffered stream reads through these two (`read1`, `peek` and `readline`
    # included), as does a gzip stream over it.
    def readinto(self, buffer: WriteableBuffer, /) -> int | None:
        if self.pending:
            with memoryview(buffer) as view:
                n = min(len(view), len(self.pending))
                view.cast("B")[:n] = self.pending[:n]
            self.pending = self.pending[n:]
            return n
        n = super().readinto(buffer)
        self._check()
        return n

    def readall(self) -> bytes:
        head, self.pending = self.pending, b""
        data = head + super().readall()
        self._check()
        return data

    def _check(self) -> None:
        if self.identity is not None:
            st = os.fstat(self.fileno())
            if (st.st_size, st.st_mtime_ns, st.st_ctime_ns) != self.identity:
                raise _Changed


class _File:
    """An opened file, its identity and the stream that yields its (decoded) bytes."""

    __slots__ = (
        "ctime_ns",
        "given",
        "inode",
        "mtime_ns",
        "partial",
        "pass_over",
        "raw",
        "regular",
        "size",
        "stream",
    )

    def __init__(
        self, path: str, gzip: bool | None, *, resume: bool = False, buffer: int = 0
    ) -> None:
        # Opened without waiting: open() of a pipe waits for a writer, forever where none
        # comes (a path a client gave). A resumed page refuses all but a regular file; a
        # first page waits a bounded time for a pipe's writer (`_written`). Reads then
        # wait, as the rest of the code expects (`read_arrived`).
        fd = os.open(path, os.O_RDONLY | os.O_NONBLOCK)
        try:
            info = os.fstat(fd)
            if resume and not stat.S_ISREG(info.st_mode):
                raise InvalidCursor(_NOT_REGULAR)
            if stat.S_ISDIR(info.st_mode):  # open() refuses one; os.open() does not
                raise IsADirectoryError(errno.EISDIR, os.strerror(errno.EISDIR), path)
            # A shell's pipe (/dev/stdin after "|") never made open() wait: read as it was.
            named = stat.S_ISFIFO(info.st_mode) and info.st_dev != _pipe_device()
            head = _written(fd) if named else b""
            os.set_blocking(fd, True)
            watched = _Watched(fd, "rb")
        except BaseException:
            os.close(fd)
            raise
        watched.pending = head
        try:
            st = os.fstat(watched.fileno())
            regular = stat.S_ISREG(st.st_mode)
            if regular:
                # Before the first read: every byte read is checked.
                watched.identity = (st.st_size, st.st_mtime_ns, st.st_ctime_ns)
            # The buffer open() gives, or *buffer* where more: a reader of lines reads
            # the file a buffer at a time, each read an fstat more (`_Watched`).
            size = st.st_blksize if st.st_blksize > 1 else io.DEFAULT_BUFFER_SIZE
            raw = io.BufferedReader(watched, max(size, buffer))
            self.size = st.st_size
            self.mtime_ns = st.st_mtime_ns
            # A file rewritten in place at the same size with its mtime put back (cp -p,
            # rsync -a, tar x) keeps both; its ctime moves, and a replacement's inode.
            self.ctime_ns = st.st_ctime_ns
            self.inode = st.st_ino
            if gzip is None or (gzip and not resume):
                # A regular file's first bytes are read where they lie: a peek filled the
                # buffer from byte 0, which a resumed page's seek then dropped. (Not
                # checked: a change after the fstat above fails the first read.)
                if regular:
                    head = os.pread(watched.fileno(), 2, 0)
                else:
                    # A pipe's read may give one byte of the two (a peek did one read, and
                    # a gzip stream was taken for text): read on to two or to its end.
                    while len(watched.pending) < len(GZIP_MAGIC) and (
                        more := os.read(watched.fileno(), len(GZIP_MAGIC) - len(watched.pending))
                    ):
                        watched.pending += more
                    head = watched.pending[: len(GZIP_MAGIC)]
                if gzip is None:
                    gzip = head == GZIP_MAGIC
                elif not GZIP_MAGIC.startswith(head):
                    # The gzip module says "Not a gzipped file" for the first member as
                    # for a later one, where `gzip_reason` reads it as bytes after a
                    # member. (A resumed file that is no longer gzip has changed:
                    # seek_checked says so, from its identity.)
                    raise DecodeError(
                        "invalid gzip data: the file is not gzip (it does not start with "
                        "the bytes 1f 8b)",
                        offset=0,
                    )
            stream = gzip_module.GzipFile(fileobj=raw, mode="rb") if gzip else raw
            self.regular = regular
            # How far an item too long to hold, or a run of whitespace or blank lines, may
            # be passed over (`MAX_PASS_OVER`). A regular file of size 0 that yields bytes
            # (procfs) has no size to bound it.
            bounded = self.regular and not gzip and st.st_size > 0
            self.pass_over: int | None = None if bounded else MAX_PASS_OVER
            # A pipe or a device is read for what has arrived (`read1`): a read of n bytes
            # waits for all n, and a writer that stays open left the page waiting after
            # its items came. (A gzip stream reads its own input whole reads at a time.)
            self.partial = not self.regular and not gzip
        except BaseException:
            watched.close()
            raise
        self.stream = cast(IO[bytes], stream)
        self.raw = raw
        # Whether items read from it were given out (to a page or by an iterator): a
        # file that changes after that is not read again from the start.
        self.given = False

    def seek_checked(self, position: dict[str, JSONValue]) -> int:
        """Move to the position's offset after checking the file is the one it came from."""
        if not self.regular:
            # What a pipe or a device gave is gone: no offset reads it again.
            raise InvalidCursor(_NOT_REGULAR)
        if position["s"] == 0 and position["o"] != 0:
            # A regular file that said it was empty yet gave bytes: procfs, whose files
            # are made as they are read. What it gave is gone, as a pipe's is.
            raise InvalidCursor(_NOT_REGULAR)
        if (position["s"], position["m"], position["t"], position["n"]) != self.identity():
            raise InvalidCursor("the file changed since the cursor was minted")
        offset = position["o"]
        assert isinstance(offset, int)
        # A plain file's offset lies within it; a gzip stream's counts decoded bytes,
        # which may pass the file's size but not what a seek takes.
        plain = self.stream is self.raw
        if offset == 0 or offset > (self.size if plain else sys.maxsize):
            raise InvalidCursor("the position is not a valid file offset")
        # gzip streams seek by decompressing forward: O(offset), documented.
        self.stream.seek(offset - 1)
        if self.stream.read(1).decode("latin-1") != position["c"]:
            raise InvalidCursor("the file changed since the cursor was minted")
        return offset

    def identity(self) -> tuple[int, int, int, int]:
        """What a position records of the file: size, mtime, ctime and inode."""
        return self.size, self.mtime_ns, self.ctime_ns, self.inode

    def position(self, index: int, offset: int, last: str) -> dict[str, JSONValue]:
        """The position after an item: its index and end, the file's identity and the
        item's last character."""
        return {
            "i": index,
            "o": offset,
            "s": self.size,
            "m": self.mtime_ns,
            "t": self.ctime_ns,
            "n": self.inode,
            "c": last,
        }

    def close(self) -> None:
        try:
            if self.stream is not self.raw:
                self.stream.close()
        finally:
            self.raw.close()


def _written(fd: int) -> bytes:
    """What has been written to the named pipe *fd* (opened without waiting) once it has
    had a writer: b"" where a writer has it open and has written nothing yet, or came and
    closed it without writing (the input is empty). `DecodeError` where no writer opens
    it within `WRITER_WAIT` seconds.

    A read of a pipe with no writer gives b"", as at its end: the page would be an empty
    one that says it is complete, for a writer that has not come yet. With a writer and
    nothing written, the read raises `BlockingIOError`; what it gives is kept for the
    stream's first read (`_Watched.pending`).
    """
    deadline = time.monotonic() + WRITER_WAIT
    poller = select.poll()
    poller.register(fd, select.POLLIN)
    hung_up = False
    while True:
        try:
            data = os.read(fd, DEFAULT_READ_SIZE)
        except BlockingIOError:
            return b""
        if data or hung_up:
            return data
        left = deadline - time.monotonic()
        if left <= 0:
            raise DecodeError(
                "the input is a pipe (a FIFO) with no writer and nothing written to it "
                f"within {WRITER_WAIT:g} s: page a regular file, or start its writer first",
                offset=0,
            )
        # A writer that opens it and writes wakes the poll; one that stays silent is
        # seen by the read after it. One that came and went leaves the pipe hung up
        # (Linux reports that only to a reader that was there when a writer came), and
        # the read after it gives what it wrote, if anything: the whole input.
        hung_up = any(event & select.POLLHUP for _, event in poller.poll(left * 1000))


@functools.cache
def _pipe_device() -> int:
    """The device of anonymous pipes (Linux's pipefs), which a named pipe is not on."""
    read, write = os.pipe()
    try:
        return os.fstat(read).st_dev
    finally:
        os.close(read)
        os.close(write)


def _file_position(position: Position | None) -> dict[str, JSONValue] | None:
    if position is None:
        return None
    if (
        isinstance(position, dict)
        and position.keys() == {"i", "o", "s", "m", "t", "n", "c"}
        and all(type(position[k]) is int and position[k] >= 0 for k in "iosmtn")  # type: ignore[operator]
        and isinstance(position["c"], str)
        and len(position["c"]) == 1
    ):
        return position
    raise InvalidCursor("the position is not a valid file position")


def _changed(path: str, resumed: bool, attempt: int, given: bool) -> None:
    """Raise what a file that changed while it was read ends in, unless it is read again.

    A page resumed at a cursor raises `InvalidCursor`, as between pages: the file the
    cursor points into is gone. A first page is read again from a fresh open while none
    of its items were given out (a page cannot take an item back), up to `_ATTEMPTS`
    opens in all; after that an `OSError` (``EAGAIN``: try again) names the file.
    """
    if resumed:
        raise InvalidCursor("the file changed while the page was read") from None
    if given:
        raise OSError(
            errno.EAGAIN, "the file changed while it was read, after some of its items", path
        ) from None
    if attempt >= _ATTEMPTS:
        raise OSError(
            errno.EAGAIN, f"the file changed while it was read, {attempt} times", path
        ) from None


def _read_page(path: str, gzip: bool | None, resumed: bool, read: Callable[[_File], T]) -> T:
    """*read* of the file at *path*, opened afresh should it change while it is read
    (see `_changed`)."""
    attempt = 0
    while True:
        attempt += 1
        file: _File | None = None
        try:
            file = _File(path, gzip, resume=resumed)
            return read(file)
        except _Changed:
            _changed(path, resumed, attempt, file is not None and file.given)
        finally:
            if file is not None:
                file.close()


def _read_items(
    path: str,
    gzip: bool | None,
    resumed: bool,
    items: Callable[[_File], Generator[tuple[Any, Position], None, None]],
    *,
    buffer: int = 0,
) -> Generator[tuple[Any, Position], None, None]:
    """The items *items* yields of the file at *path* (opened with at least *buffer*
    bytes of buffer), as `_read_page` reads a page: an item yielded is the caller's, so
    a change after one is raised, not read again."""
    attempt = 0
    while True:
        attempt += 1
        file: _File | None = None
        it: Generator[tuple[Any, Position], None, None] | None = None
        try:
            file = _File(path, gzip, resume=resumed, buffer=buffer)
            it = items(file)
            for pair in it:
                file.given = True
                yield pair
            return
        except _Changed:
            _changed(path, resumed, attempt, file is not None and file.given)
        finally:
            if it is not None:
                it.close()
            if file is not None:
                file.close()


def _blank(line: bytes) -> bool:
    """Whether a line holds only JSON whitespace (`bytes.isspace` also takes VT and FF,
    which JSON refuses)."""
    return not line.strip(b" \t\r\n")


class _Window:
    """A sliding window of decoded text over a byte stream, tracking byte offsets.

    ``pos`` indexes ``buf``; ``bpos`` is the byte offset in the stream of ``buf[pos]``.
    """

    __slots__ = (
        "_bad",
        "_decoder",
        "_finding",
        "_max",
        "_partial",
        "_pass_over",
        "_read",
        "_read_size",
        "_stream",
        "bpos",
        "buf",
        "eof",
        "pos",
    )

    def __init__(
        self,
        stream: IO[bytes],
        bpos: int,
        read_size: int,
        max_item: int,
        pass_over: int | None,
        *,
        partial: bool = False,
    ) -> None:
        self._stream = stream
        self._pass_over = pass_over
        self._partial = partial
        self._decoder = codecs.getincrementaldecoder("utf-8")("strict")
        self._read_size = read_size
        self._max = max_item
        self.buf = ""
        self.pos = 0
        self.bpos = bpos
        self._read = bpos  # the stream's offset after the bytes read so far
        self.eof = False
        # `_grow`'s search for the end of a value: where the value starts in the stream,
        # the `value_end` state and the characters of its text walked so far.
        self._finding: tuple[int, int, int] | None = None
        # Bytes read that are not UTF-8: their error, raised once parsing needs text past
        # the valid text before them (`refill`), and the bytes read from the bad one on,
        # which `skip` walks when an item too long to hold goes on through them.
        self._bad: tuple[DecodeError, bytes] | None = None

    def refill(self, *, ended: int | None = None) -> None:
        """Drop consumed text and append at least one more chunk (more if a value is big).

        A value still open at the window's end doubles the window (so scanning it again
        from its start stays linear), but never past ``max_item_bytes`` + one read: the
        window then holds at most that, and a refill at twice that much text. *ended* is
        the length of a value that ended in the window, read again only because it ends
        near the edge: then it, not the text after it, is held against the limit.
        """
        rest = self.buf[self.pos :]
        if (len(rest) if ended is None else ended) > self._max:
            raise _TooLong(
                f"a value is larger than max_item_bytes={self._max} or is not valid JSON",
                offset=self.bpos,
            )
        if self._bad is not None:
            # Parsing has reached the bytes that are not UTF-8.
            raise self._bad[0] from None
        self.buf = ""  # only the rest is kept: the old window goes before the read
        data = self._fetch(max(self._read_size, min(len(rest), self._max + 1 - len(rest))))
        text = self._decode(data)
        del data
        self.buf = rest + text
        self.pos = 0

    def _fetch(self, size: int) -> bytes:
        """The next read of up to *size* bytes (b"" at the end of the stream).

        A pipe or a device (*partial*) gives what has arrived, waiting only while nothing
        has: ``read(size)`` waited for all *size* bytes, so a page whose items had all
        come waited on a writer that stays open. It reads on while more is there at
        once, so that a window grown for a long value still doubles from a fast writer
        (a read a pipe's 64 KiB at a time joined the window once a read: quadratic).
        """
        if not self._partial:
            return self._stream.read(size)
        return read_arrived(cast(io.BufferedReader, self._stream), size)

    def _decode(self, data: bytes) -> str:
        """The text of the next *data* read from the stream (end of stream when empty).

        Where the read holds bytes that are not UTF-8, the text stops before them and
        their error waits in ``_bad`` for the parser to reach them: the items before
        them are given first, wherever the read happened to start.
        """
        self.eof = not data
        # The decoder keeps a character cut by the last read: the error's index counts it.
        pending = len(self._decoder.getstate()[0])
        try:
            text = self._decoder.decode(data, self.eof)
        except UnicodeDecodeError as exc:
            error = DecodeError(
                f"the file is not valid UTF-8 ({exc.reason})",
                offset=self._read - pending + exc.start,
            )
            # exc.object is the held bytes of a cut character and *data*.
            held = bytes(exc.object)
            self._bad = error, held[exc.start :]
            self._decoder = codecs.getincrementaldecoder("utf-8")("strict")
            # Not the end yet, even at the end of the stream: the error comes first.
            self.eof = False
            text = held[: exc.start].decode("utf-8")
        self._read += len(data)
        return text

    def skip(self, head: int, too_long: _TooLong) -> tuple[Clipped, str]:
        """Pass over the value at ``pos``, still open after ``max_item_bytes`` of text,
        without parsing it: its first *head* bytes (whole characters) as a `Clipped`
        with its exact size in bytes, and its last character (as `seek_checked` reads it).

        Only strings, escapes and brackets are followed (`value_end`), a read at a time:
        memory stays at the window already held plus one read, and the text inside is
        not validated (nor decoded: only the bytes after the value are).
        """
        buf, pos, start = self.buf, self.pos, self.bpos
        text = buf[pos : pos + head]  # at least *head* bytes: the window holds more
        if not text.isascii():
            # Whole characters only: the decoder made this text, so only the one cut at
            # byte *head* can fail to decode, and it is dropped.
            text = text.encode("utf-8")[:head].decode("utf-8", "ignore")
        state, fed = _value_start(buf[pos])
        if self._finding is not None and self._finding[0] == start:
            _, state, fed = self._finding  # `_grow` has followed it this far: not again
        self._finding = None
        at, state = value_end(buf, pos + fed, state)
        if at >= 0:
            # The value ends in the window (the scanner asked for more only because it
            # ends near the window's edge): clipped all the same, as too long to hold.
            size = self.bytes_to(at)
            if size <= head:  # so short the scanner would have read it: not JSON
                # Under the public class: the private one named no type a user catches.
                raise DecodeError(
                    f"invalid JSON: an item of {size} bytes the scanner could not read",
                    offset=too_long.offset,
                ) from None
            self.advance(at)
            return Clipped(text, size, "bytes"), chr(buf[at - 1].encode("utf-8")[-1])
        # The bytes of the held text, and of a character the decoder holds cut.
        pending = self._decoder.getstate()[0]
        size = _utf8_len(buf, pos, self._read_size) + len(pending)
        last = (buf[-1].encode("utf-8") + pending)[-1]
        self.buf, self.pos = "", 0  # let the held text go before reading on
        del buf
        # Bytes read that are not UTF-8 are inside the value: walked, not decoded.
        data = b"" if self._bad is None else self._bad[1]
        self._bad = None
        while True:
            if not data:
                data = self._fetch(self._read_size)
            if not data:
                raise DecodeError("invalid JSON: the input ends inside an item", offset=start)
            if self._pass_over is not None and size > self._pass_over:
                raise passed_over_too_far(self._pass_over, start)
            at, state = value_end(data, 0, state)
            if at >= 0:
                break
            size += len(data)
            last = data[-1]
            data = b""
        if at:
            last = data[at - 1]
        size += at
        # The rest of the read is text after the value: a fresh decoder starts there.
        self._decoder = codecs.getincrementaldecoder("utf-8")("strict")
        self.bpos = self._read = start + size
        self.buf = self._decode(data[at:])
        self.eof = False  # only a read that returns nothing is the end of the stream
        return Clipped(text, size, "bytes"), chr(last)

    def bytes_to(self, end: int) -> int:
        """The bytes of the text from ``pos`` to *end*."""
        # isascii() is O(1) on str: byte and character offsets agree.
        if self.buf.isascii():
            return end - self.pos
        return len(self.buf[self.pos : end].encode("utf-8"))

    def advance(self, end: int) -> None:
        self.bpos += self.bytes_to(end)
        self.pos = end

    def peek(self) -> str:
        """Skip whitespace and return the next character ('' at the end of the stream).

        Whitespace is passed over as an item too long to hold is: for at most
        ``pass_over`` bytes, where an endless run of it would read forever.
        """
        start = self.bpos
        while True:
            end = _WS.match(self.buf, self.pos).end()  # type: ignore[union-attr]
            self.bpos += end - self.pos
            self.pos = end
            if end < len(self.buf):
                return self.buf[end]
            if self.eof:
                return ""
            if self._pass_over is not None and self.bpos - start > self._pass_over:
                raise passed_over_too_far(self._pass_over, start, "a run of whitespace")
            self.refill()

    def expect(self, char: str, what: str) -> None:
        if self.peek() != char:
            raise self.error(f"expected {char!r} {what}")
        self.pos += 1
        self.bpos += 1

    def value(self, scan: Callable[[str, int], tuple[Any, int]]) -> tuple[Any, int]:
        """Parse the value at ``pos``; return it and the index where it ends.

        A value the window cannot hold grows it and is parsed again; past `_SCAN_AGAIN`
        of its text, its end is found first (`_grow`), so that it is parsed once more
        at most: each parse builds the objects of all the text it reads, about 25
        bytes a byte of ``[{},{},...]``, which a value too long to hold never needs.
        """
        while True:
            try:
                obj, end = scan(self.buf, self.pos)
            except StopIteration as exc:
                # The C scanner lets a nested missing value escape as StopIteration(index).
                at = exc.value if type(exc.value) is int else self.pos
                if self.eof and at >= len(self.buf):
                    # `[{"a":` at the end of the file: the item was cut, not malformed.
                    raise self.error("the input ends inside an item") from None
                if self.eof or at < len(self.buf) - _EDGE:
                    raise self.error("expected a value", at) from None
                self._grow()
                continue
            except json.JSONDecodeError as exc:
                # Past the window's edge (or in a string still open there) more input may
                # complete the value; anywhere else the error is final.
                unclosed = exc.msg.startswith("Unterminated string")
                incomplete = exc.pos >= len(self.buf) - _EDGE or unclosed
                if self.eof and (exc.pos >= len(self.buf) or unclosed):
                    raise self.error("the input ends inside an item") from None
                if self.eof or not incomplete:
                    raise self.error(decode_message(exc), exc.pos) from None
                self._grow()
                continue
            except _NonFinite as exc:
                raise self.error(f"{exc} is not valid JSON") from None
            # A number near the window's edge may continue in the next chunk ("-0." is
            # read as -0 and stops before the "."), so values ending there are re-read.
            # A closing bracket or quote ends a value for good: an item read whole
            # after `_grow` ends near the edge, and reading it again held two of it.
            # Text that stops before bytes that are not UTF-8 goes no further either.
            near = end > len(self.buf) - _EDGE and not self.eof and self._bad is None
            if near and self.buf[end - 1] not in '"]}':
                del obj  # not held while it is read again
                self.refill(ended=end - self.pos)
                continue
            return obj, end

    def _grow(self) -> None:
        """Refill for a value still open at the window's edge; a long one until its end
        is in the window (or the stream ends, or `refill` finds it too long to hold)."""
        if len(self.buf) - self.pos < _SCAN_AGAIN:
            self.refill()
            return
        state, fed = _value_start(self.buf[self.pos])  # fed: the value's text walked
        while True:
            # Kept for `skip` should the refill find the value too long to hold.
            self._finding = (self.bpos, state, fed)
            self.refill()  # the value now starts the window: pos is 0
            at, state = value_end(self.buf, fed, state)
            if at >= 0:
                self._finding = None
                return
            fed = len(self.buf)
            if self.eof:
                self._finding = None
                return  # the parser says how the value is cut short

    def error(self, message: str, at: int | None = None) -> DecodeError:
        """The error at *at*, an index in the window where the text went wrong (default:
        the start of the value being read), its offset counted in the file's bytes."""
        offset = self.bpos + (self.bytes_to(at) if at is not None and at > self.pos else 0)
        return DecodeError(f"invalid JSON: {message}", offset=offset)


#: Text of one value past which the window finds its end before parsing it again (a
#: parse of 256 KiB of "{}," builds about 5 MB of objects).
_SCAN_AGAIN: Final = 1 << 18


def _utf8_len(text: str, start: int, step: int) -> int:
    """The UTF-8 size of ``text[start:]``, encoded a slice at a time (not all at once)."""
    if text.isascii():
        return len(text) - start
    return sum(len(text[i : i + step].encode("utf-8")) for i in range(start, len(text), step))


class _Patterns:
    """What `value_end_py` searches for, in text (`str`) or in bytes."""

    __slots__ = ("outside", "scalar_end", "string")

    def __init__(self, string: str, outside: str, scalar_end: str, kind: type[str | bytes]) -> None:
        def compiled(pattern: str) -> re.Pattern[Any]:
            return re.compile(pattern if kind is str else pattern.encode("ascii"), re.DOTALL)

        self.string = compiled(string)
        self.outside = compiled(outside)
        self.scalar_end = compiled(scalar_end)


# A string's text up to its closing quote (group 1), its escapes matched in C; outside a
# string, a quote or a bracket (groups 1, 2, 3: quote, opening, closing). A scalar ends
# where a separator begins.
_PATTERN_TEXT: Final = (
    r'[^"\\]*(?:\\.[^"\\]*)*(")?',
    r'(")|([\[{])|([\]}])',
    r"[ \t\n\r,\]}]",
)
_STR_PATTERNS: Final = _Patterns(*_PATTERN_TEXT, str)
_BYTE_PATTERNS: Final = _Patterns(*_PATTERN_TEXT, bytes)
#: The group of `_Patterns.outside` an opening bracket matches.
_OPENING_GROUP: Final = 2

#: `value_end`'s state: a backslash ended the text walked so far (the next character is
#: escaped), the walk is inside a string, and one open bracket (the depth's unit). State
#: 0 is a scalar, and what a value that ended leaves.
_VE_ESCAPED: Final = 1
_VE_STRING: Final = 2
_VE_DEPTH: Final = 4
#: The characters `value_end_py` walks at a time: over a whole window (up to
#: max_item_bytes) the string pattern's repeat kept state per escape, 100s of MB.
_VE_PIECE: Final = 1 << 16


def _value_start(first: str) -> tuple[int, int]:
    """The `value_end` state of a value whose text starts with *first*, and how many
    characters that state has walked (the opening quote or bracket; none of a scalar)."""
    if first == '"':
        return _VE_STRING, 1
    if first in ("[", "{"):
        return _VE_DEPTH, 1
    return 0, 0


def value_end_py(data: str | bytes, start: int, state: int) -> tuple[int, int]:
    """The index in *data* just after the JSON value whose text it holds from *start* on
    (-1: the value goes on past *data*), and the state to walk the next piece with.

    *state* is ``_VE_ESCAPED | _VE_STRING | depth * _VE_DEPTH`` (0: a scalar, which ends
    before a separator); `_value_start` gives the first one. Only strings (and their
    escapes) and bracket depth are followed, with regexes: a string, escapes and all, is
    one C match, and a container costs one Python step per string or bracket in it. The
    text is not validated (``[`` closed by ``}`` passes). A str is walked a character
    at a time, bytes (UTF-8) a byte at a time, which agree: every byte of a character
    past ASCII is 0x80 or more.

    The pure-Python twin of the compiled ``_numbers.value_end``, which takes a few
    milliseconds where this takes seconds for 16 MB of ``{},``.
    """
    patterns = _STR_PATTERNS if isinstance(data, str) else _BYTE_PATTERNS
    n = len(data)
    if not state:
        m = patterns.scalar_end.search(data, start)
        return -1 if m is None else m.start(), 0
    depth, string, escaped = state // _VE_DEPTH, bool(state & _VE_STRING), bool(state & _VE_ESCAPED)
    for base in range(start, n, _VE_PIECE):
        piece, i, stop = data[base : base + _VE_PIECE], 0, min(_VE_PIECE, n - base)
        while i < stop:
            if escaped:
                escaped, i = False, i + 1
            elif string:
                m = patterns.string.match(piece, i)
                assert m is not None  # every part of the pattern may match nothing
                i = m.end()
                if m.lastindex is None:
                    # The piece ended in the string, or just after a backslash.
                    escaped = i < stop
                    break
                string = False
                if not depth:
                    return base + i, 0
            else:
                m = patterns.outside.search(piece, i)
                if m is None:
                    break
                i = m.end()
                if m.lastindex == 1:
                    string = True
                elif m.lastindex == _OPENING_GROUP:
                    depth += 1
                else:
                    depth -= 1
                    if not depth:
                        return base + i, 0
    return -1, depth * _VE_DEPTH + string * _VE_STRING + escaped


value_end: Callable[[str | bytes, int, int], tuple[int, int]]
try:
    from ._numbers import value_end
except ImportError:  # pragma: no cover - built without a C compiler
    value_end = value_end_py


def _split_prefix(prefix: object) -> tuple[str, ...]:
    if not isinstance(prefix, str):
        raise LimitError("prefix", prefix, "must be a str such as 'item' or 'results.item'")
    parts = prefix.split(".")
    if parts[-1] != "item" or "item" in parts[:-1] or "" in parts:
        raise LimitError(
            "prefix",
            prefix,
            "must be object keys ending in one array, like 'item' or 'results.item'",
        )
    return tuple(parts[:-1])


def _gzip_option(gzip: object) -> bool | None:
    if gzip is not None and not isinstance(gzip, bool):
        raise TypeError(f"gzip must be True, False or None, not {type(gzip).__name__}")
    return gzip


def _check_file_path(path: object) -> str:
    if not isinstance(path, str | os.PathLike):
        raise TypeError(f"path must be a str or os.PathLike, not {type(path).__name__}")
    return os.path.abspath(os.fspath(path))


#: Where item k of a run ends: the byte offset after it and its last character.
Where = Callable[[int], tuple[int, str]]
#: A run of items: the items, where each ends, and how many items came before the run.
Run = tuple[list[Any], Where, int]
#: The characters an object or array item ends with: where `_bulk_run` looks for the
#: end of a run. A scalar item has no such end; its windows go to the scanner.
_CLOSERS: Final = "}]"
#: How many commas `_bulk_run` looks back over for one after a closing bracket.
_BULK_TRIES: Final = 64
#: The characters of text one bulk run covers at most. A page that stops inside a run
#: scans the run's items up to there for the end of its last one: short runs keep that
#: scan short, and an orjson call costs a microsecond.
_BULK_SPAN: Final = 8192


class _BulkEnds:
    """`Where` for a run parsed in one orjson call: the run's own end is known; the end
    of an item inside it is found by the scanner, once, when a page stops there."""

    __slots__ = ("_boff", "_buf", "_ends", "_last", "_pos", "_scan", "_stop")

    def __init__(self, buf: str, span: tuple[int, int], boff: int, last: tuple[int, str],
                 scan: Scan) -> None:  # fmt: skip
        self._buf, (self._pos, self._stop), self._boff, self._scan = buf, span, boff, scan
        self._last = last
        self._ends: list[tuple[int, str]] | None = None

    def __call__(self, k: int, /) -> tuple[int, str]:
        if k == -1:
            return self._last
        if self._ends is None:
            self._ends = self._scanned()
        return self._ends[k]

    def _scanned(self) -> list[tuple[int, str]]:
        buf, pos, boff, scan = self._buf, self._pos, self._boff, self._scan
        ascii_ = buf.isascii()
        ends: list[tuple[int, str]] = []
        while pos < self._stop:
            _, end = scan(buf, pos)
            off = boff + (end - pos if ascii_ else len(buf[pos:end].encode("utf-8")))
            ends.append((off, buf[end - 1]))
            m = _SEP.match(buf, end)
            if m is None:  # pragma: no cover - orjson read a comma after every item
                break
            pos, boff = m.end(), off + (m.end() - end)
        return ends


def _listed(ends: list[int], lasts: list[str]) -> Where:
    """`Where` for a run whose ends the scanner found as it parsed."""

    def where(k: int, /) -> tuple[int, str]:
        return ends[k], lasts[k]

    return where


def _bulk_run(buf: str, pos: int, stop: int) -> tuple[list[Any], int] | None:
    """The items from *pos* up to a comma after a closing bracket before *stop*, in one
    orjson call, and the index after the last one; None when there is no such comma
    within reach, or orjson does not read the run exactly as the scanner would.

    orjson reads ``[`` + the text + ``]`` only if the comma is between items of the
    array: one inside a string leaves the string open, one inside an item leaves a
    bracket open. A text it refuses (NaN, a lone surrogate escape, a guess inside an
    item) or reads inexactly (an integer beyond 64 bits) is the scanner's.
    """
    k = stop
    for _ in range(_BULK_TRIES):
        k = buf.rfind(",", pos, k)
        if k < 0:
            return None
        end = k
        while end > pos and buf[end - 1] in " \t\n\r":
            end -= 1
        if end > pos and buf[end - 1] in _CLOSERS:
            text = "[" + buf[pos:end] + "]"
            try:
                values = orjson.loads(text)
            except orjson.JSONDecodeError:
                return None
            if not exact(text.encode("utf-8"), values):
                return None
            return values, end
    return None


def array_items(
    stream: IO[bytes],
    *,
    keys: tuple[str, ...] = (),
    prefix: str = "item",
    read_size: int = DEFAULT_READ_SIZE,
    max_item_bytes: int = DEFAULT_MAX_ITEM_BYTES,
    resume: tuple[int, int] | None = None,
    pass_over: int | None = MAX_PASS_OVER,
    partial: bool = False,
) -> Iterator[tuple[Any, int, int, str]]:
    """Yield ``(item, items so far, byte offset after it, its last character)``.

    *stream* is at its start (a UTF-8 byte order mark there is skipped), or, with
    ``resume=(offset, index)``, just after the item that ended at *offset*. *keys* are the
    object keys of the prefix. After a top-level array (no keys) only whitespace may
    follow; for a nested prefix the rest of the document is not read. An item longer
    than *max_item_bytes* is a `Clipped` of its text's first *max_item_bytes* bytes,
    passed over for at most *pass_over* bytes (``None``: to its end, for a stream that
    ends), as is a run of whitespace. With *partial* (a pipe or a device: *stream* a
    `io.BufferedReader`), a read gives what has arrived rather than wait for a whole one.
    """
    runs = array_runs(
        stream,
        keys=keys,
        prefix=prefix,
        read_size=read_size,
        max_item_bytes=max_item_bytes,
        resume=resume,
        pass_over=pass_over,
        partial=partial,
    )
    for objs, where, before in runs:
        for k, obj in enumerate(objs):
            yield (obj, before + k + 1, *where(k))


def array_runs(
    stream: IO[bytes],
    *,
    keys: tuple[str, ...] = (),
    prefix: str = "item",
    read_size: int = DEFAULT_READ_SIZE,
    max_item_bytes: int = DEFAULT_MAX_ITEM_BYTES,
    resume: tuple[int, int] | None = None,
    bulk: bool = False,
    head_bytes: int | None = None,
    pass_over: int | None = MAX_PASS_OVER,
    partial: bool = False,
) -> Generator[Run, None, None]:
    """`array_items` in runs: the items that lie wholly in one window of text at a time.

    With *bulk*, most of each window is one run parsed by orjson (see `_bulk_run`): the
    items are the same, and so is where each ends. An item still open after
    *max_item_bytes* of text is skipped over and given as a `Clipped` of the first
    *head_bytes* bytes of its JSON text (default and at most *max_item_bytes*).
    """
    head = max_item_bytes if head_bytes is None else min(head_bytes, max_item_bytes)
    # A bulk run spans up to _BULK_SPAN characters, 4 bytes each at most: an item there
    # is never longer than max_item_bytes, which the runs do not check.
    bulk = bulk and max_item_bytes >= 4 * _BULK_SPAN
    win: _Window | None = None

    def at() -> int:
        return _broken_at(stream, 0 if win is None else win.bpos)

    with file_errors(at):
        c_scan, scan = _new_scanner()
        if resume is None:
            win = _Window(stream, 0, read_size, max_item_bytes, pass_over, partial=partial)
            while not win.buf and not win.eof:
                win.refill()
            if win.buf.startswith("\ufeff"):
                win.pos, win.bpos = 1, len(BOM)
            _enter_array(win, scan, keys, prefix)
            index = 0
            more = win.peek() != "]"
            if not more:
                win.expect("]", "")
        else:
            win = _Window(stream, resume[0], read_size, max_item_bytes, pass_over, partial=partial)
            index = resume[1]
            more = _after_item(win)
        sep = _SEP.match
        while more:
            # Fast path: the items that lie wholly inside the window, in bulk runs (with
            # *bulk*) and then by the C scanner without method calls; anything unusual
            # falls to the careful path.
            buf, pos, boff = win.buf, win.pos, win.bpos
            ascii_, n = buf.isascii(), len(buf)
            while bulk:
                got = _bulk_run(buf, pos, min(n - _EDGE, pos + _BULK_SPAN))
                if got is None:
                    break
                values, end = got
                off = boff + (end - pos if ascii_ else len(buf[pos:end].encode("utf-8")))
                yield values, _BulkEnds(buf, (pos, end), boff, (off, buf[end - 1]), scan), index
                index += len(values)
                m = sep(buf, end)
                if m is None:  # pragma: no cover - `_bulk_run` ends at a comma
                    raise AssertionError("a bulk run ends before its comma")
                pos, boff = m.end(), off + (m.end() - end)
            objs: list[Any] = []
            ends: list[int] = []
            lasts: list[str] = []
            while True:
                try:
                    obj, end = c_scan(buf, pos)
                except (StopIteration, ValueError, RecursionError):
                    break
                if end > n - _EDGE:
                    break
                m = sep(buf, end)
                if m is None or m.end() >= n:
                    break
                off = boff + (end - pos if ascii_ else len(buf[pos:end].encode("utf-8")))
                if off - boff > max_item_bytes:
                    break  # parsed, but too long to give: the careful path clips it
                objs.append(obj)
                ends.append(off)
                lasts.append(buf[end - 1])
                pos = m.end()
                boff = off + (pos - end)
                if m.group(1) == "]":
                    more = False
                    break
            win.pos, win.bpos = pos, boff
            if objs:
                yield objs, _listed(ends, lasts), index
                index += len(objs)
            if not more:
                break
            obj = None  # an item the fast path parsed and gave up on: not held twice
            # A bulk run's separator may have taken whitespace up to the window's end,
            # where the scanner, which starts at a value, found none: read on to it.
            win.peek()
            try:
                obj, end = win.value(scan)
                if win.bytes_to(end) > max_item_bytes:
                    # Whole in the window, but longer than an item may be: clipped, as
                    # where the window could not hold it.
                    raise _TooLong(
                        f"an item is larger than max_item_bytes={max_item_bytes}",
                        offset=win.bpos,
                    )
            except _TooLong as exc:
                obj, last = win.skip(head, exc)
            else:
                last = win.buf[end - 1]
                win.advance(end)
            yield [obj], _listed([win.bpos], [last]), index
            index += 1
            more = _after_item(win)
        if not keys and win.peek() != "":
            raise win.error("content after the top-level array (is this JSON Lines?)")


def _after_item(win: _Window) -> bool:
    char = win.peek()
    if not char:
        raise win.error("the input ends inside the array")
    if char == ",":
        win.pos += 1
        win.bpos += 1
        if win.peek() == "]":
            raise win.error("trailing comma")
        return True
    if char == "]":
        win.pos += 1
        win.bpos += 1
        return False
    raise win.error("expected ',' or ']' after an array item")


def _passed_over(win: _Window, scan: Scan, what: str) -> tuple[Any, int]:
    """The value at ``pos`` on the way to the prefix's array, and where it ends; one
    longer than ``max_item_bytes`` is refused (`DecodeError`), whether or not the window
    happened to hold it whole: the same file and limits never pass or fail by
    ``read_size``."""
    start = win.bpos
    try:
        obj, end = win.value(scan)
    except _TooLong:  # still open after max_item_bytes: refused under the public class
        obj, end = None, -1
    if end < 0 or win.bytes_to(end) > win._max:
        raise DecodeError(f"{what} is larger than max_item_bytes={win._max}", offset=start)
    return obj, end


def _enter_array(win: _Window, scan: Scan, keys: tuple[str, ...], prefix: str) -> None:
    # Walks the keys of the prefix; sibling values before them are parsed and dropped.
    for key in keys:
        win.expect("{", f"(an object holding {key!r}, for prefix {prefix!r})")
        if win.peek() == "}":
            raise win.error(f"no key {key!r} for prefix {prefix!r}")
        while True:
            win.peek()
            name, end = _passed_over(win, scan, "an object key before the prefix's key")
            if not isinstance(name, str):
                raise win.error("expected an object key")
            win.advance(end)
            win.expect(":", "after an object key")
            win.peek()
            if name == key:
                break
            win.advance(_passed_over(win, scan, "a member before the prefix's key")[1])
            char = win.peek()
            if char == "}":
                raise win.error(f"no key {key!r} for prefix {prefix!r}")
            win.expect(",", "between object members")
    win.expect("[", f"(an array at prefix {prefix!r})")


class JsonArrayFileSource(Source[Any]):
    """The items of a JSON array in a file (plain or gzip), under an ijson-style prefix.

    ``prefix="item"`` pages a top-level array; ``"results.item"`` the array under the key
    ``results`` of a top-level object. The position holds the item count, the exact byte
    offset after the item, and the file's size, mtime and the item's last character; a
    cursor into a changed file raises `InvalidCursor`.
    """

    __slots__ = ("_gzip", "_keys", "_max_item", "_path", "_prefix", "_read_size")

    def __init__(
        self,
        path: str | os.PathLike[str],
        *,
        prefix: str = "item",
        gzip: bool | None = None,
        read_size: int = DEFAULT_READ_SIZE,
        max_item_bytes: int = DEFAULT_MAX_ITEM_BYTES,
    ) -> None:
        self._path = _check_file_path(path)
        self._keys = _split_prefix(prefix)
        self._prefix = prefix
        self._gzip = _gzip_option(gzip)
        self._read_size = check_int("read_size", read_size, minimum=1, maximum=MAX_READ_SIZE)
        self._max_item = check_int("max_item_bytes", max_item_bytes, minimum=1)

    def open(
        self, position: Position | None, *, limit_hint: int | None = None
    ) -> Generator[tuple[Any, Position], None, None]:
        """Yield the array's items after *position* (``None``: from the first)."""
        pos = _file_position(position)
        check_limit_hint(limit_hint)
        return self._iter(pos)

    def _iter(
        self, position: dict[str, JSONValue] | None
    ) -> Generator[tuple[Any, Position], None, None]:
        def items(file: _File) -> Generator[tuple[Any, Position], None, None]:
            if position is None:
                resume = None
            else:
                resume = (file.seek_checked(position), cast(int, position["i"]))
            for obj, index, offset, last in array_items(
                file.stream,
                keys=self._keys,
                prefix=self._prefix,
                read_size=self._read_size,
                max_item_bytes=self._max_item,
                resume=resume,
                pass_over=file.pass_over,
                partial=file.partial,
            ):
                yield obj, file.position(index, offset, last)

        return _read_items(self._path, self._gzip, position is not None, items)

    def fill(
        self, builder: Filler, position: Position | None, *, limit_hint: int | None = None
    ) -> tuple[bool, Position | None]:
        """Fill *builder* with the items after *position*, in runs (see `SQLiteSource.fill`).

        Items are parsed a window of text (``read_size`` bytes) at a time and each run is
        handed to the builder's bulk path; the position is built once, for the page's
        last item. At most one window is parsed past the page (or the next item, where it
        is longer: the look-ahead).
        """
        pos = _file_position(position)
        check_limit_hint(limit_hint)

        def read(file: _File) -> tuple[bool, Position | None]:
            resume = None if pos is None else (file.seek_checked(pos), cast(int, pos["i"]))
            runs = array_runs(
                file.stream,
                keys=self._keys,
                prefix=self._prefix,
                read_size=self._read_size,
                max_item_bytes=self._max_item,
                resume=resume,
                bulk=True,
                # As the SQL sources cut a long cell: nothing longer than the page can
                # be shown whole, and an item spilled is kept up to max_item_bytes.
                head_bytes=read_bound(builder, self._max_item),
                pass_over=file.pass_over,
                partial=file.partial,
            )
            more, last = False, None
            try:
                for objs, where, before in runs:
                    more, n = builder.fill_from(objs)
                    if n:
                        file.given = True
                        last = (before + n, *where(-1 if n == len(objs) else n - 1))
                    if more:
                        break
            finally:
                runs.close()
            if last is None:
                return more, position
            index, offset, char = last
            return more, file.position(index, offset, char)

        return _read_page(self._path, self._gzip, pos is not None, read)

    def describe(self) -> dict[str, JSONValue]:
        """Kind, absolute path, prefix and gzip setting."""
        return {
            "kind": "json_array_file",
            **described_path("path", self._path),
            "prefix": self._prefix,
            "gzip": self._gzip,
        }


class JsonLinesSource(Source[Any]):
    """The values of a JSON Lines file (plain or gzip), one per non-blank line.

    Positions are like `JsonArrayFileSource`'s: the exact byte offset after the line.
    """

    __slots__ = ("_gzip", "_max_item", "_path")

    def __init__(
        self,
        path: str | os.PathLike[str],
        *,
        gzip: bool | None = None,
        max_item_bytes: int = DEFAULT_MAX_ITEM_BYTES,
    ) -> None:
        self._path = _check_file_path(path)
        self._gzip = _gzip_option(gzip)
        self._max_item = check_int("max_item_bytes", max_item_bytes, minimum=1)

    def open(
        self, position: Position | None, *, limit_hint: int | None = None
    ) -> Generator[tuple[Any, Position], None, None]:
        """Yield the values of the lines after *position* (``None``: from the first)."""
        pos = _file_position(position)
        check_limit_hint(limit_hint)
        return self._iter(pos)

    def _iter(
        self, position: dict[str, JSONValue] | None
    ) -> Generator[tuple[Any, Position], None, None]:
        def items(file: _File) -> Generator[tuple[Any, Position], None, None]:
            offset = 0

            def at() -> int:
                return _broken_at(file.stream, offset)

            with file_errors(at):
                if position is None:
                    index = 0
                else:
                    offset = file.seek_checked(position)
                    index = cast(int, position["i"])
                lines = line_items(
                    file.stream.readline, offset, limit=self._max_item, pass_over=file.pass_over
                )
                for obj, offset, last in lines:
                    index += 1
                    yield obj, file.position(index, offset, chr(last))

        # A line at a time: open()'s 4 KiB buffer made the check after each read of the
        # file an eighth of the time of the items.
        return _read_items(
            self._path, self._gzip, position is not None, items, buffer=DEFAULT_READ_SIZE
        )

    def fill(
        self, builder: Filler, position: Position | None, *, limit_hint: int | None = None
    ) -> tuple[bool, Position | None]:
        """Fill *builder* with the values of the lines after *position*, in runs.

        Lines are read about a page's worth of bytes at a time, parsed with orjson on
        their bytes (a line orjson refuses, or a batch with an integer beyond 64 bits,
        goes through `load_json`) and handed to the builder's bulk path; the position is
        built once, for the page's last line.
        """
        pos = _file_position(position)
        check_limit_hint(limit_hint)

        def read(file: _File) -> tuple[bool, Position | None]:
            offset = 0

            def at() -> int:
                return _broken_at(file.stream, offset)

            with file_errors(at):
                index = 0
                if pos is not None:
                    offset = file.seek_checked(pos)
                    index = cast(int, pos["i"])
                first, limit = index, self._max_item
                read = (
                    cast(io.BufferedReader, file.stream).read1 if file.partial else file.stream.read
                )
                readline = file.stream.readline
                # About a page's worth of bytes at a time (a line's bytes are about its
                # encoded size), split in C: few lines are parsed past the page. A read
                # asks for no more than _LINES_READ: a read reserves all it asks for.
                want = min(page_budget(builder, DEFAULT_READ_SIZE), _LINES_READ)
                last: tuple[int, int, int] | None = None
                more = False
                # The last read, at byte held_base, of which held[start:] is still to go:
                # *rest* lines (-1: not counted yet). A pass copies out only the lines it
                # takes, and counts only those: the rest, sliced and counted again at each
                # pass, made a page of few items over many blank lines quadratic.
                held, held_base, start, rest = b"", 0, 0, -1
                blank_from = -1  # where the run of blank lines being dropped started
                while True:
                    if start == len(held):
                        held, start, rest = read(want), 0, -1
                        if not held:
                            break
                        if not held.endswith(b"\n"):
                            # The rest of the last line, with a byte order mark's room
                            # (see `_iter`).
                            held += readline(limit + 1 + len(BOM))
                        held_base = offset
                        offset += len(held)
                        if held_base == 0 and held.startswith(BOM):
                            start = len(BOM)
                    if held.startswith(_SPACE, start):
                        # Blank lines ahead are dropped in one step, and an endless run of
                        # them stops at pass_over, as a line too long does.
                        ws_end = _BLANK_RUN.match(held, start).end()  # type: ignore[union-attr]
                        cut = held.rfind(b"\n", start, ws_end) + 1
                        if cut - start > limit:
                            cut = _before_long_line(held, start, cut, limit)
                        if cut > start:
                            if blank_from < 0:
                                blank_from = held_base + start
                            if file.pass_over is not None and (
                                held_base + cut - blank_from > file.pass_over
                            ):
                                raise passed_over_too_far(
                                    file.pass_over, blank_from, "a run of blank lines"
                                )
                            if rest >= 0:
                                rest -= held.count(b"\n", start, cut)
                            start = cut
                            if start == len(held):
                                continue
                    blank_from = -1
                    base = held_base + start
                    ends_with_newline = held.endswith(b"\n")
                    fresh = rest < 0  # the read's first pass
                    if fresh:
                        newlines = held.count(b"\n", start) if start else _newlines(held)
                        rest = newlines + (0 if ends_with_newline else 1)
                    count = rest
                    if limit_hint is not None and count > limit_hint - (index - first) + 1:
                        # A page of few items parses its lines and the look-ahead only.
                        lines_wanted = max(limit_hint - (index - first), 0) + 1
                        if fresh and not start:
                            cut = _line_end(held, lines_wanted - 1, count)
                        else:  # forward: the lines after the cut are not searched again
                            cut = _after_lines(held, start, lines_wanted)
                        if fresh:
                            # Split once a read, its rest copied: the read then goes
                            # before the lines are parsed. Held on, it made each page
                            # fault its memory in again (a fifth of a 1 MiB page's time).
                            chunk, held = held[start:cut], held[cut:]
                            held_base, start = held_base + cut, 0
                        else:
                            chunk, start = held[start:cut], cut
                        count, rest = lines_wanted, count - lines_wanted
                        ends_with_newline = True
                    else:
                        chunk = held[start:] if start else held
                        start = len(held)
                    extra, last_byte = 0, chunk[-1] if chunk else _NEWLINE
                    if not ends_with_newline and len(chunk) - chunk.rfind(b"\n") - 1 > limit:
                        line_start = base + chunk.rfind(b"\n") + 1
                        extra, last_byte = _skip_line(
                            readline, last_byte, line_start, file.pass_over
                        )
                        offset += extra
                    # Splitting into lines made a bytes object a line (a tenth of the
                    # fill): the common chunk is parsed and its end found without it.
                    pieces: list[bytes] | None = None
                    too_long: dict[int, int] = {}  # line -> its size, for lines to clip
                    if len(chunk) > limit:
                        pieces = _lines(chunk, ends_with_newline)
                        if max(map(len, pieces), default=0) > limit:
                            too_long = {i: len(p) for i, p in enumerate(pieces) if len(p) > limit}
                            if extra:
                                too_long[count - 1] += extra - (last_byte == _NEWLINE)
                    values = None if too_long else _parse_all(chunk, count)
                    keep: Sequence[int]
                    error: DecodeError | None = None
                    if values is None:  # a blank line, a long number or a line refused
                        if pieces is None:
                            pieces = _lines(chunk, ends_with_newline)
                        keep = [i for i, p in enumerate(pieces) if i in too_long or not _blank(p)]
                        lines = pieces if len(keep) == len(pieces) else [pieces[i] for i in keep]
                        if file.pass_over is not None and keep[-1:] != [len(pieces) - 1]:
                            # The blank lines the chunk ends with start the run that the
                            # next pass may go on with.
                            tail = len(chunk.rstrip(b" \t\r\n"))
                            blank_from = base + chunk.find(b"\n", tail) + 1
                        if too_long:
                            head = min(read_bound(builder, limit), limit)
                            values, error = _lines_with_clips(pieces, keep, too_long, base, head)
                        else:
                            values, error = _parse_lines(lines, keep, pieces, base)
                    else:
                        keep = range(count)
                    more, n = builder.fill_from(values)
                    if error is not None and not more:
                        # The page reached the line that failed, as `open()` would; a
                        # page that filled before it leaves it to the next one, which
                        # parses it again.
                        raise error
                    if n:
                        file.given = True
                        j = keep[n - 1]
                        newline = j < count - 1 or ends_with_newline
                        if newline:
                            end, char = base + _line_end(chunk, j, count), _NEWLINE
                        else:  # the last line: its end is the chunk's and any skipped
                            end, char = base + len(chunk) + extra, last_byte
                        last = (index + n, end, char)
                    index += n
                    if more:
                        break
                if last is None:
                    return more, position
                i, end, char = last
                return more, file.position(i, end, chr(char))

        return _read_page(self._path, self._gzip, pos is not None, read)

    def describe(self) -> dict[str, JSONValue]:
        """Kind, absolute path and gzip setting."""
        return {"kind": "json_lines_file", **described_path("path", self._path), "gzip": self._gzip}


def line_items(
    readline: Callable[[int], bytes], offset: int, *, limit: int, pass_over: int | None
) -> Iterator[tuple[Any, int, int]]:
    """``(value, offset after its line, the line's last byte)`` for each non-blank line
    *readline* gives, the first at byte *offset* (a UTF-8 byte order mark skipped at byte
    0). A line longer than *limit* bytes is the `Clipped` of its first *limit* bytes,
    read past a read at a time for at most *pass_over* bytes (None: to its end, for a
    stream that ends): never held whole. A run of blank lines is passed over for at most
    *pass_over* bytes too."""
    # Where the run of blank lines being passed over starts, and where it has reached:
    # set at blank lines only, so a line that holds a value costs nothing more.
    blank_start = blank_end = -1
    while True:
        # A byte order mark's room: what is held has more than *limit* bytes after it is
        # taken off whenever the line goes on past it.
        line = readline(limit + 1 + len(BOM))
        if not line:
            return
        start = offset
        offset += len(line)
        if start == 0 and line.startswith(BOM):
            line = line[len(BOM) :]
            start = len(BOM)
        extra, last = 0, line[-1] if line else _NEWLINE
        if len(line) > limit and last != _NEWLINE:
            extra, last = _skip_line(readline, last, start, pass_over)
            offset += extra
        length = len(line) + extra - (last == _NEWLINE)  # its newline not counted
        if length > limit:
            obj: Any = _clip_line(line, length, limit, start)
        elif _blank(line):
            if start != blank_end:  # a line with a value came between: a new run
                blank_start = start
            blank_end = offset
            if pass_over is not None and blank_end - blank_start > pass_over:
                raise passed_over_too_far(pass_over, blank_start, "a run of blank lines")
            continue
        else:
            obj = parse_line(line, start)
        yield obj, offset, last


def _skip_line(
    readline: Callable[[int], bytes], last: int, start: int, pass_over: int | None
) -> tuple[int, int]:
    """Read past the rest of a line too long to hold, a read at a time: how many bytes
    that was, and the line's last byte (its newline, unless the file ends first).

    *start* is where the line starts, for the error past *pass_over* bytes."""
    skipped = 0
    while True:
        if pass_over is not None and skipped > pass_over:
            raise passed_over_too_far(pass_over, start)
        part = readline(DEFAULT_READ_SIZE)
        if not part:
            return skipped, last
        skipped += len(part)
        last = part[-1]
        if last == _NEWLINE:
            return skipped, last


class Arriving(Protocol):
    """A pipe's or a device's reader: ``read1`` gives what has arrived."""

    def read1(self, size: int = -1, /) -> bytes: ...
    def fileno(self) -> int: ...


def read_arrived(stream: Arriving, size: int) -> bytes:
    """Up to *size* bytes of *stream*, what has arrived: it waits only while nothing has,
    and reads on while more is there at once (here and in the command line's reader)."""
    read1 = stream.read1
    parts = [read1(size)]
    got = len(parts[0])
    fd = stream.fileno()
    while parts[-1] and got < size and select.select([fd], [], [], 0)[0]:
        parts.append(read1(size - got))
        got += len(parts[-1])
    return parts[0] if len(parts) == 1 else b"".join(parts)


def passed_over_too_far(pass_over: int, start: int, what: str = "an item") -> DecodeError:
    """The error for *what*, starting at byte *start*, passed over past *pass_over* bytes
    in a stream whose end is not known (here, and in the command line's own reader)."""
    return DecodeError(
        f"{what} is longer than {pass_over} bytes in a stream whose end is not known"
        " (a pipe, a device or gzip): it is not passed over further",
        offset=start,
    )


def _clip_line(line: bytes, length: int, head: int, offset: int) -> Clipped:
    """A line of *length* bytes (its newline not counted), longer than max_item_bytes, of
    which *line* holds the start: its first *head* bytes (whole characters) as a
    `Clipped`, the same as a database source gives a JSON value too long to fetch. The
    rest is neither read whole nor parsed."""
    decoder = codecs.getincrementaldecoder("utf-8")("strict")
    try:
        # Not final: a character cut at byte *head* is left out (counted in *length*).
        text = decoder.decode(line[:head], False)
    except UnicodeDecodeError as exc:
        raise DecodeError(
            f"line at byte {offset}: the file is not valid UTF-8 ({exc.reason})",
            offset=offset + exc.start,
        ) from None
    return Clipped(text, length, "bytes")


def _lines_with_clips(
    pieces: list[bytes], keep: list[int], sizes: dict[int, int], base: int, head: int
) -> tuple[list[Any], DecodeError | None]:
    """The values of ``pieces[i]`` for i in *keep* (the chunk at byte *base*); the lines
    in *sizes* (their full sizes) are too long to parse and are clipped. Values stop
    before the first line that fails, returned with its error (see `_until_error`)."""
    starts = [base]
    for piece in pieces[:-1]:
        starts.append(starts[-1] + len(piece) + 1)
    return _until_error(
        (_clip_line, pieces[i], sizes[i], head, starts[i])
        if i in sizes
        else (parse_line, pieces[i], starts[i])
        for i in keep
    )


def _until_error(calls: Iterable[tuple[Any, ...]]) -> tuple[list[Any], DecodeError | None]:
    """The results of *calls* (each a function and its arguments) up to the first that
    raises `DecodeError`, and that error (None if none did). A line's error is raised
    only if the page reaches that line, as the item loop of `open()` raises it."""
    values: list[Any] = []
    for fn, *args in calls:
        try:
            values.append(fn(*args))
        except DecodeError as exc:
            return values, exc
    return values, None


def _newlines(chunk: bytes) -> int:
    """How many newlines *chunk* holds. ``bytes.count`` compares byte by byte (19 us for
    64 KB); ``replace`` finds them with memchr and copies the rest (6 us)."""
    return len(chunk) - len(chunk.replace(b"\n", b""))


def _lines(chunk: bytes, ends_with_newline: bool) -> list[bytes]:
    """The lines of *chunk*, without their line breaks."""
    pieces = chunk.split(b"\n")
    if ends_with_newline:
        pieces.pop()
    return pieces


def _before_long_line(chunk: bytes, start: int, end: int, limit: int) -> int:
    """Where the first line of *chunk*[start:end] (whole lines) longer than *limit* bytes
    starts, else *end*: a line of whitespace that long is an item (clipped, as any line
    past max_item_bytes), not a blank line to drop. Walked a line at a time, only where
    the run is longer than *limit*."""
    at = start
    while at < end:
        newline = chunk.index(b"\n", at, end)
        if newline - at > limit:
            return at
        at = newline + 1
    return end


def _after_lines(chunk: bytes, start: int, n: int) -> int:
    """The offset in *chunk* just after the *n*-th newline from *start* on."""
    pos = start - 1
    for _ in range(n):
        pos = chunk.index(b"\n", pos + 1)
    return pos + 1


def _line_end(chunk: bytes, j: int, count: int) -> int:
    """The offset in *chunk* just after the newline that ends line *j* (from 0) of the
    *count* lines it holds: found from whichever end is nearer, one search a line."""
    if j < count - 1 - j:
        pos = -1
        for _ in range(j + 1):
            pos = chunk.index(b"\n", pos + 1)
        return pos + 1
    pos = len(chunk)
    # The newlines after line j's: count - 1 - j of them when the chunk ends with one,
    # one fewer when its last line has none (that line ends at the chunk's end).
    after = count - 1 - j if chunk.endswith(b"\n") else count - 2 - j
    for _ in range(after + 1):
        pos = chunk.rindex(b"\n", 0, pos)
    return pos + 1


def _parse_all(chunk: bytes, count: int) -> list[Any] | None:
    """The values of every line of *chunk* (*count* of them), when orjson reads each
    exactly; else None.

    The common case: no blank line and no integer beyond 64 bits anywhere in the chunk
    (see `exact`). The lines are read by one orjson call, as the items of one array (a
    call per line cost about as much as the parsing). `lines_array` joins them only
    when each line closes what it opens and holds no comma of its own, so that no value
    spans two lines and no line gives two; a blank line makes two commas meet, which
    orjson refuses.
    """
    joined = lines_array(chunk)
    if joined is None:
        return None
    try:
        values = orjson.loads(joined)
    except orjson.JSONDecodeError:
        return None
    if len(values) != count:  # one blank line alone joins to [], which orjson accepts
        return None
    return values if exact(chunk, values) else None


_STRING = re.compile(rb'"(?:[^"\\\n]|\\.)*"')
_NOT_STRUCTURE = bytes(sorted(set(range(256)) - set(b'[]{},\n"')))


def lines_array_py(chunk: bytes) -> bytes | None:
    """``b"[" + the lines of *chunk* joined by commas + b"]"`` (a last line break ends
    the last line), when every line closes the strings and containers it opens and
    holds no comma outside them and no backslash outside a string; else None.

    The pure-Python twin of the compiled ``_numbers.lines_array``: the strings (none
    spans a line break) taken out, then the brackets, commas and line breaks left.
    """
    outside = _STRING.sub(b"", chunk)
    if b"\\" in outside:
        return None  # a backslash outside a string, which orjson refuses too
    skeleton = outside.translate(None, _NOT_STRUCTURE)
    if b'"' in skeleton:
        return None  # a string open at a line's end
    depth = 0
    for c in skeleton:
        if c in b"[{":
            depth += 1
        elif c in b"]}":
            depth -= 1
            if depth < 0:
                return None
        elif (c == _COMMA and not depth) or (c == _NEWLINE and depth):
            return None
    if depth:
        return None
    body = chunk[:-1] if chunk.endswith(b"\n") else chunk
    return b"[" + body.replace(b"\n", b",") + b"]"


lines_array: Callable[[bytes], bytes | None]
try:
    from ._numbers import lines_array
except ImportError:  # pragma: no cover - built without a C compiler
    lines_array = lines_array_py


def _parse_lines(
    lines: list[bytes], keep: list[int], pieces: list[bytes], base: int
) -> tuple[list[Any], DecodeError | None]:
    """The values of *lines* (``pieces[i]`` for i in *keep*, the chunk at byte *base*),
    up to the first line that fails, and its error (see `_until_error`).

    orjson reads the batch when it can read it exactly (no integer beyond 64 bits; it
    keeps nesting up to its own limit of 1,024 levels); otherwise each line goes through
    `parse_line`, which names the line's offset in an error.
    """
    try:
        values = list(map(orjson.loads, lines))
    except orjson.JSONDecodeError:
        pass  # a line orjson refuses: each line says for itself, below
    else:
        if exact(b"\n".join(lines), values):
            return values, None
    starts = [base + sum(map(len, pieces[:i])) + i for i in keep]  # errors only: rare
    return _until_error(
        (parse_line, line, start) for line, start in zip(lines, starts, strict=True)
    )


def parse_line(line: bytes, offset: int) -> Any:
    """The value of one JSON Lines line (its bytes, newline included) at byte *offset*.

    orjson reads it when it can read it exactly (no integer beyond 64 bits; nesting up
    to its own limit of 1,024 levels), else `jsonread.load_json`; a `DecodeError`'s
    offset counts from the file's start.
    """
    try:
        value = orjson.loads(line)
    except orjson.JSONDecodeError:
        pass  # refused: load_json says why, or reads what orjson cannot
    else:
        if exact(line, value):
            return value
    try:
        # Without its line break: a value cut short is reported where the line ends,
        # whether the line came with its newline (open, the CLI) or without (fill).
        return load_json(line.rstrip(b"\r\n"))
    except DecodeError as exc:
        message = f"line at byte {offset}: {_reason(exc)}"
        raise DecodeError(message, offset=offset + (exc.offset or 0)) from None


def _reason(exc: DecodeError) -> str:
    """The message of *exc* without its offset suffix."""
    text = str(exc)
    return text[: text.rfind(" (at decoded byte ")] if " (at decoded byte " in text else text

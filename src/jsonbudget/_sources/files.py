"""Sources over files: a JSON array (under a prefix) and JSON Lines, plain or gzip.

Both resume at an exact byte offset stored in the position, so a page costs about what
its own bytes cost to parse, wherever it lies in the file. Array items are parsed by the
stdlib's C scanner (`json.scanner`) over a sliding decoded window, because it reports
where each value ends, which is what an exact resume offset needs (ijson does not expose
byte offsets); an item nested too deep for it, or holding an integer literal longer than
`int()` accepts, is read again by the iterative parser (`jsonread.scan_json`). JSON Lines
are parsed by `jsonread.load_json`, orjson on the line's bytes.
"""

from __future__ import annotations

import codecs
import contextlib
import gzip as gzip_module
import json
import os
import re
import zlib
from collections.abc import Callable, Iterator
from itertools import islice
from json.scanner import make_scanner
from typing import IO, Any, Final, cast

import orjson

from .._limits import check_int
from ..errors import DecodeError, InvalidCursor, LimitError
from .base import FILL_BATCH, FILL_FIRST, Filler, JSONValue, Position, Source, check_limit_hint
from .jsonread import LONG_INT, load_json, scan_json

__all__ = [
    "BOM",
    "DEFAULT_MAX_ITEM_BYTES",
    "DEFAULT_READ_SIZE",
    "GZIP_MAGIC",
    "JsonArrayFileSource",
    "JsonLinesSource",
    "array_items",
    "file_errors",
    "parse_line",
]

#: Bytes read from the file at a time.
DEFAULT_READ_SIZE: Final = 64 * 1024
#: The largest single item (or skipped sibling value) the sources will hold in memory.
DEFAULT_MAX_ITEM_BYTES: Final = 64 * 1024 * 1024

#: The first two bytes of every gzip member.
GZIP_MAGIC: Final = b"\x1f\x8b"
#: A UTF-8 byte order mark: skipped at the start of a file (RFC 8259 lets parsers do so).
BOM: Final = b"\xef\xbb\xbf"
_WS: Final = re.compile(r"[ \t\n\r]*")
#: Whitespace, the separator after an array item, and the whitespace after it.
_SEP: Final = re.compile(r"[ \t\n\r]*([,\]])[ \t\n\r]*")
#: Within this many characters of the window's end a parse error may just mean "read
#: more": the longest token that can be cut there is a surrogate pair escape.
_EDGE: Final = 16


class _NonFinite(ValueError):
    """NaN or Infinity in the input: not JSON."""


def _reject_constant(name: str) -> Any:
    raise _NonFinite(name)


Scan = Callable[[str, int], tuple[Any, int]]


def _new_scanner() -> Scan:
    decoder = json.JSONDecoder(parse_constant=_reject_constant)
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

    return scan


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
        raise DecodeError(f"invalid gzip data: {exc}", offset=offset()) from None


class _File:
    """An opened file, its identity and the stream that yields its (decoded) bytes."""

    __slots__ = ("mtime_ns", "raw", "size", "stream")

    def __init__(self, path: str, gzip: bool | None) -> None:
        raw = open(path, "rb")  # noqa: SIM115  # closed by close(), also on error below
        with contextlib.ExitStack() as on_error:
            on_error.callback(raw.close)
            st = os.fstat(raw.fileno())
            self.size = st.st_size
            self.mtime_ns = st.st_mtime_ns
            if gzip is None:
                gzip = raw.read(2) == GZIP_MAGIC
                raw.seek(0)
            stream = gzip_module.GzipFile(fileobj=raw, mode="rb") if gzip else raw
            self.stream = cast(IO[bytes], stream)
            on_error.pop_all()
        self.raw = raw

    def seek_checked(self, position: dict[str, JSONValue]) -> int:
        """Move to the position's offset after checking the file is the one it came from."""
        if position["s"] != self.size or position["m"] != self.mtime_ns:
            raise InvalidCursor("the file changed since the cursor was minted")
        offset = position["o"]
        assert isinstance(offset, int)
        if offset == 0:
            raise InvalidCursor("the position is not a valid file offset")
        # gzip streams seek by decompressing forward: O(offset), documented.
        self.stream.seek(offset - 1)
        if self.stream.read(1).decode("latin-1") != position["c"]:
            raise InvalidCursor("the file changed since the cursor was minted")
        return offset

    def close(self) -> None:
        try:
            if self.stream is not self.raw:
                self.stream.close()
        finally:
            self.raw.close()


def _file_position(position: Position | None) -> dict[str, JSONValue] | None:
    if position is None:
        return None
    if (
        isinstance(position, dict)
        and position.keys() == {"i", "o", "s", "m", "c"}
        and all(type(position[k]) is int and position[k] >= 0 for k in "iosm")  # type: ignore[operator]
        and isinstance(position["c"], str)
        and len(position["c"]) == 1
    ):
        return position
    raise InvalidCursor("the position is not a valid file position")


class _Window:
    """A sliding window of decoded text over a byte stream, tracking byte offsets.

    ``pos`` indexes ``buf``; ``bpos`` is the byte offset in the stream of ``buf[pos]``.
    """

    __slots__ = ("_decoder", "_max", "_read_size", "_stream", "bpos", "buf", "eof", "pos")

    def __init__(self, stream: IO[bytes], bpos: int, read_size: int, max_item: int) -> None:
        self._stream = stream
        self._decoder = codecs.getincrementaldecoder("utf-8")("strict")
        self._read_size = read_size
        self._max = max_item
        self.buf = ""
        self.pos = 0
        self.bpos = bpos
        self.eof = False

    def refill(self) -> None:
        """Drop consumed text and append at least one more chunk (more if a value is big)."""
        rest = self.buf[self.pos :]
        if len(rest) > self._max:
            raise DecodeError(
                f"a value is larger than max_item_bytes={self._max} or is not valid JSON",
                offset=self.bpos,
            )
        data = self._stream.read(max(self._read_size, len(rest)))
        self.eof = not data
        try:
            text = self._decoder.decode(data, self.eof)
        except UnicodeDecodeError as exc:
            raise DecodeError(
                f"the file is not valid UTF-8 ({exc.reason})", offset=self.bpos + len(rest)
            ) from None
        self.buf = rest + text
        self.pos = 0

    def advance(self, end: int) -> None:
        buf = self.buf
        # isascii() is O(1) on str: byte and character offsets agree.
        if buf.isascii():
            self.bpos += end - self.pos
        else:
            self.bpos += len(buf[self.pos : end].encode("utf-8"))
        self.pos = end

    def peek(self) -> str:
        """Skip whitespace and return the next character ('' at the end of the stream)."""
        while True:
            end = _WS.match(self.buf, self.pos).end()  # type: ignore[union-attr]
            self.bpos += end - self.pos
            self.pos = end
            if end < len(self.buf):
                return self.buf[end]
            if self.eof:
                return ""
            self.refill()

    def expect(self, char: str, what: str) -> None:
        if self.peek() != char:
            raise self.error(f"expected {char!r} {what}")
        self.pos += 1
        self.bpos += 1

    def value(self, scan: Callable[[str, int], tuple[Any, int]]) -> tuple[Any, int]:
        """Parse the value at ``pos``; return it and the index where it ends."""
        while True:
            try:
                obj, end = scan(self.buf, self.pos)
            except StopIteration as exc:
                # The C scanner lets a nested missing value escape as StopIteration(index).
                at = exc.value if type(exc.value) is int else self.pos
                if self.eof or at < len(self.buf) - _EDGE:
                    raise self.error("expected a value") from None
                self.refill()
                continue
            except json.JSONDecodeError as exc:
                # Past the window's edge (or in a string still open there) more input may
                # complete the value; anywhere else the error is final.
                incomplete = exc.pos >= len(self.buf) - _EDGE or exc.msg.startswith(
                    "Unterminated string"
                )
                if self.eof or not incomplete:
                    raise self.error(exc.msg) from None
                self.refill()
                continue
            except _NonFinite as exc:
                raise self.error(f"{exc} is not valid JSON") from None
            # A number near the window's edge may continue in the next chunk ("-0." is
            # read as -0 and stops before the "."), so values ending there are re-read.
            if end > len(self.buf) - _EDGE and not self.eof:
                self.refill()
                continue
            return obj, end

    def error(self, message: str) -> DecodeError:
        return DecodeError(f"invalid JSON: {message}", offset=self.bpos)


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


def _check_path(path: object) -> str:
    if not isinstance(path, str | os.PathLike):
        raise TypeError(f"path must be a str or os.PathLike, not {type(path).__name__}")
    return os.path.abspath(os.fspath(path))


def array_items(
    stream: IO[bytes],
    *,
    keys: tuple[str, ...] = (),
    prefix: str = "item",
    read_size: int = DEFAULT_READ_SIZE,
    max_item_bytes: int = DEFAULT_MAX_ITEM_BYTES,
    resume: tuple[int, int] | None = None,
) -> Iterator[tuple[Any, int, int, str]]:
    """Yield ``(item, items so far, byte offset after it, its last character)``.

    *stream* is at its start (a UTF-8 byte order mark there is skipped), or, with
    ``resume=(offset, index)``, just after the item that ended at *offset*. *keys* are the
    object keys of the prefix. After a top-level array (no keys) only whitespace may
    follow; for a nested prefix the rest of the document is not read.
    """
    win: _Window | None = None

    def at() -> int:
        return 0 if win is None else win.bpos

    with file_errors(at):
        scan = _new_scanner()
        if resume is None:
            win = _Window(stream, 0, read_size, max_item_bytes)
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
            win = _Window(stream, resume[0], read_size, max_item_bytes)
            index = resume[1]
            more = _after_item(win)
        sep = _SEP.match
        while more:
            # Fast path: items that lie wholly inside the window, parsed without
            # method calls; anything unusual falls through to the careful path.
            buf, pos, boff = win.buf, win.pos, win.bpos
            ascii_, n = buf.isascii(), len(buf)
            while True:
                try:
                    obj, end = scan(buf, pos)
                except (StopIteration, ValueError):
                    break
                if end > n - _EDGE:
                    break
                m = sep(buf, end)
                if m is None or m.end() >= n:
                    break
                off = boff + (end - pos if ascii_ else len(buf[pos:end].encode("utf-8")))
                index += 1
                yield obj, index, off, buf[end - 1]
                pos = m.end()
                boff = off + (pos - end)
                if m.group(1) == "]":
                    win.pos, win.bpos = pos, boff
                    more = False
                    break
            if not more:
                break
            win.pos, win.bpos = pos, boff
            obj, end = win.value(scan)
            last = win.buf[end - 1]
            win.advance(end)
            index += 1
            yield obj, index, win.bpos, last
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


def _enter_array(win: _Window, scan: Scan, keys: tuple[str, ...], prefix: str) -> None:
    # Walks the keys of the prefix; sibling values before them are parsed and dropped.
    for key in keys:
        win.expect("{", f"(an object holding {key!r}, for prefix {prefix!r})")
        if win.peek() == "}":
            raise win.error(f"no key {key!r} for prefix {prefix!r}")
        while True:
            win.peek()
            name, end = win.value(scan)
            if not isinstance(name, str):
                raise win.error("expected an object key")
            win.advance(end)
            win.expect(":", "after an object key")
            win.peek()
            if name == key:
                break
            win.advance(win.value(scan)[1])
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
        self._path = _check_path(path)
        self._keys = _split_prefix(prefix)
        self._prefix = prefix
        if gzip is not None and not isinstance(gzip, bool):
            raise TypeError(f"gzip must be True, False or None, not {type(gzip).__name__}")
        self._gzip = gzip
        self._read_size = check_int("read_size", read_size, minimum=1)
        self._max_item = check_int("max_item_bytes", max_item_bytes, minimum=1)

    def open(
        self, position: Position | None, *, limit_hint: int | None = None
    ) -> Iterator[tuple[Any, Position]]:
        """Yield the array's items after *position* (``None``: from the first)."""
        pos = _file_position(position)
        check_limit_hint(limit_hint)
        return self._iter(pos)

    def _iter(self, position: dict[str, JSONValue] | None) -> Iterator[tuple[Any, Position]]:
        file = _File(self._path, self._gzip)
        try:
            if position is None:
                resume = None
            else:
                resume = (file.seek_checked(position), cast(int, position["i"]))
            size, mtime = file.size, file.mtime_ns
            for obj, index, offset, last in array_items(
                file.stream,
                keys=self._keys,
                prefix=self._prefix,
                read_size=self._read_size,
                max_item_bytes=self._max_item,
                resume=resume,
            ):
                yield obj, {"i": index, "o": offset, "s": size, "m": mtime, "c": last}
        finally:
            file.close()

    def fill(
        self, builder: Filler, position: Position | None, *, limit_hint: int | None = None
    ) -> tuple[bool, Position | None]:
        """Fill *builder* with the items after *position*, in runs (see `SQLiteSource.fill`).

        Items are parsed in batches (16, doubling up to 2,048) and handed to the builder's
        bulk path; the position is built once, for the page's last item.
        """
        pos = _file_position(position)
        check_limit_hint(limit_hint)
        file = _File(self._path, self._gzip)
        try:
            resume = None if pos is None else (file.seek_checked(pos), cast(int, pos["i"]))
            items = array_items(
                file.stream,
                keys=self._keys,
                prefix=self._prefix,
                read_size=self._read_size,
                max_item_bytes=self._max_item,
                resume=resume,
            )
            batch, last = FILL_FIRST, None
            while True:
                got = list(islice(items, batch))
                more, n = builder.fill_from([obj for obj, _, _, _ in got])
                if n:
                    last = got[n - 1]
                if more or len(got) < batch:
                    break
                batch = min(FILL_BATCH, batch * 2)
            if last is None:
                return more, position
            _, index, offset, char = last
            return more, {"i": index, "o": offset, "s": file.size, "m": file.mtime_ns, "c": char}
        finally:
            file.close()

    def describe(self) -> dict[str, JSONValue]:
        """Kind, absolute path, prefix and gzip setting."""
        return {
            "kind": "json_array_file",
            "path": self._path,
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
        self._path = _check_path(path)
        if gzip is not None and not isinstance(gzip, bool):
            raise TypeError(f"gzip must be True, False or None, not {type(gzip).__name__}")
        self._gzip = gzip
        self._max_item = check_int("max_item_bytes", max_item_bytes, minimum=1)

    def open(
        self, position: Position | None, *, limit_hint: int | None = None
    ) -> Iterator[tuple[Any, Position]]:
        """Yield the values of the lines after *position* (``None``: from the first)."""
        pos = _file_position(position)
        check_limit_hint(limit_hint)
        return self._iter(pos)

    def _iter(self, position: dict[str, JSONValue] | None) -> Iterator[tuple[Any, Position]]:
        file = _File(self._path, self._gzip)
        offset = 0

        def at() -> int:
            return offset

        try:
            with file_errors(at):
                if position is None:
                    index = 0
                else:
                    offset = file.seek_checked(position)
                    index = cast(int, position["i"])
                size, mtime, limit = file.size, file.mtime_ns, self._max_item
                readline = file.stream.readline
                while True:
                    line = readline(limit + 1)
                    if not line:
                        return
                    if len(line) > limit:
                        raise DecodeError(
                            f"a line is longer than max_item_bytes={limit}", offset=offset
                        )
                    start = offset
                    offset += len(line)
                    if start == 0 and line.startswith(BOM):
                        line = line[len(BOM) :]
                        start = len(BOM)
                    if line.isspace() or not line:
                        continue
                    obj = parse_line(line, start)
                    index += 1
                    yield obj, {"i": index, "o": offset, "s": size, "m": mtime, "c": chr(line[-1])}
        finally:
            file.close()

    def fill(
        self, builder: Filler, position: Position | None, *, limit_hint: int | None = None
    ) -> tuple[bool, Position | None]:
        """Fill *builder* with the values of the lines after *position*, in runs.

        Lines are parsed with orjson on their bytes (`load_json` for the lines orjson
        cannot read exactly) in batches of 16, doubling up to 2,048, and handed to the
        builder's bulk path; the position is built once, for the page's last line.
        """
        pos = _file_position(position)
        check_limit_hint(limit_hint)
        file = _File(self._path, self._gzip)
        offset = 0

        def at() -> int:
            return offset

        try:
            with file_errors(at):
                index = 0
                if pos is not None:
                    offset = file.seek_checked(pos)
                    index = cast(int, pos["i"])
                limit = self._max_item
                readline = file.stream.readline
                loads, long_int = orjson.loads, LONG_INT.search
                batch, eof = FILL_FIRST, False
                last: tuple[int, int, int] | None = None
                while True:
                    values: list[Any] = []
                    ends: list[tuple[int, int]] = []
                    while len(values) < batch:
                        line = readline(limit + 1)
                        if not line:
                            eof = True
                            break
                        if len(line) > limit:
                            raise DecodeError(
                                f"a line is longer than max_item_bytes={limit}", offset=offset
                            )
                        start = offset
                        offset += len(line)
                        if start == 0 and line.startswith(BOM):
                            line = line[len(BOM) :]
                            start = len(BOM)
                        if not line or line.isspace():
                            continue
                        if long_int(line) is None:
                            try:
                                values.append(loads(line))
                            except orjson.JSONDecodeError:
                                values.append(parse_line(line, start))
                        else:
                            values.append(parse_line(line, start))
                        ends.append((offset, line[-1]))
                    more, n = builder.fill_from(values)
                    if n:
                        end, char = ends[n - 1]
                        last = (index + n, end, char)
                    index += n
                    if more or eof:
                        break
                    batch = min(FILL_BATCH, batch * 2)
                if last is None:
                    return more, position
                i, end, char = last
                return more, {"i": i, "o": end, "s": file.size, "m": file.mtime_ns, "c": chr(char)}
        finally:
            file.close()

    def describe(self) -> dict[str, JSONValue]:
        """Kind, absolute path and gzip setting."""
        return {"kind": "json_lines_file", "path": self._path, "gzip": self._gzip}


def parse_line(line: bytes, offset: int) -> Any:
    """The value of one JSON Lines line (its bytes, newline included) at byte *offset*.

    Parsed by `jsonread.load_json`; a `DecodeError`'s offset counts from the file's start.
    """
    try:
        return load_json(line)
    except DecodeError as exc:
        raise DecodeError(
            f"line at byte {offset}: {_reason(exc)}", offset=offset + exc.offset
        ) from None


def _reason(exc: DecodeError) -> str:
    """The message of *exc* without its offset suffix."""
    text = str(exc)
    return text[: text.rfind(" (at decoded byte ")] if " (at decoded byte " in text else text

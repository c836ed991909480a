"""The ``jsonbudget`` command: a thin layer over the library.

Subcommands: ``dump`` (bound a JSON document or stream), ``page`` (one page of a file or
an SQLite query, with cursors), ``demo`` (the self-contained tour) and ``tune`` (measure
real data, recommend limits). Exit codes: 0 ok, 1 runtime or data error, 2 usage error,
3 cursor refused, 130 interrupted.
"""

from __future__ import annotations

import argparse
import errno
import getpass
import gzip
import io
import os
import re
import select
import shlex
import signal
import sqlite3
import stat
import sys
import tempfile
import threading
from collections.abc import Callable, Iterator, Sequence
from contextlib import ExitStack, contextmanager
from itertools import islice
from typing import IO, Any, Final, Literal, NoReturn, Protocol, TextIO, cast

import orjson
from rich.console import Console
from rich.progress import (
    BarColumn,
    MofNCompleteColumn,
    Progress,
    SpinnerColumn,
    TextColumn,
    TimeElapsedColumn,
)
from rich.table import Table

from .._cursors.scope import Scope
from .._cursors.sqlite_store import SQLiteCursorStore
from .._cursors.store import CursorStore, check_ttl
from .._encode.encoder import Encoder
from .._extras import missing_extra
from .._limits import DEFAULT_MAX_DEPTH, MAX_LIMIT, Limits, check_int
from .._pages.builder import MCP_KEYS, PageBuilder, Paginator
from .._paths import cache_home
from .._sources.base import Source, described_path
from .._sources.files import (
    BOM,
    DEFAULT_MAX_ITEM_BYTES,
    GZIP_MAGIC,
    MAX_PASS_OVER,
    Arriving,
    JsonArrayFileSource,
    JsonLinesSource,
    array_items,
    file_errors,
    gzip_reason,
    line_items,
    passed_over_too_far,
    read_arrived,
)
from .._sources.jsonread import load_json
from .._sources.sql import MIN_CELL_BYTES, SQLiteSource
from ..errors import CursorError, DecodeError, JsonBudgetError, LimitError
from .demo import (
    DEFAULT_HUGE_BYTES,
    DEFAULT_MAX_BYTES,
    DEFAULT_ROWS,
    Demo,
    DemoPage,
    report_lines,
)
from .tune import DEFAULT_BUDGETS, DEFAULT_GOAL, DEFAULT_SAMPLE, Tuner, TuneReport, write_chart

__all__ = [
    "DEFAULT_DUMP_BYTES",
    "DEFAULT_PAGE_BYTES",
    "EXIT_CURSOR",
    "EXIT_ERROR",
    "EXIT_INTERRUPTED",
    "EXIT_OK",
    "EXIT_TERMINATED",
    "EXIT_USAGE",
    "MAX_LOAD_BYTES",
    "default_store_path",
    "main",
    "parse_size",
]

EXIT_OK: Final = 0
EXIT_ERROR: Final = 1
EXIT_USAGE: Final = 2
EXIT_CURSOR: Final = 3
EXIT_INTERRUPTED: Final = 130
EXIT_TERMINATED: Final = 143  # 128 + SIGTERM, as a shell reports a process it ended


class _Terminated(Exception):
    """SIGTERM arrived (``kill``, ``timeout``, a cancelled job): raised where the command
    is, so that what it made (the demo's temporary directory) is cleaned up."""


def _terminate(signum: int, frame: object) -> None:
    raise _Terminated


DEFAULT_DUMP_BYTES: Final = 64 * 1024
DEFAULT_PAGE_BYTES: Final = 64 * 1024
#: A top-level value that is not an array is loaded whole; larger ones are refused.
MAX_LOAD_BYTES: Final = 256 * 1024 * 1024
_PROG: Final = "jsonbudget"
_SQLITE_MAGIC: Final = b"SQLite format 3\x00"
_JSONL_EXT: Final = (".jsonl", ".ndjson")
#: Stands for "no value yet" where None is a value.
_NOTHING: Final = object()
_NON_WS: Final = re.compile(rb"[^ \t\r\n]")
_READ: Final = 64 * 1024
_KIB: Final = 1024
#: After Ctrl-C, how often (seconds) a running SQLite query is interrupted again.
_INTERRUPT_EVERY: Final = 0.05
#: The bytes a value can start with: after a first line, more values make JSON Lines.
_VALUE_START: Final = b'{["-0123456789tfn'
# ASCII digits only: `\d` would take any script's digits ("٦٤" read as 64).
_SIZE = re.compile(r"\s*([0-9]+)\s*(b|k|kib|m|mib|g|gib)?\s*", re.IGNORECASE)
_UNITS: Final = {"": 1, "b": 1, "k": 1 << 10, "kib": 1 << 10, "m": 1 << 20, "mib": 1 << 20}
_UNITS_G: Final = {"g": 1 << 30, "gib": 1 << 30}
_COUNT: Final = re.compile(r"-?[0-9]+")
_DECIMAL: Final = re.compile(r"-?(?:[0-9]+(?:\.[0-9]*)?|\.[0-9]+)(?:[eE][-+]?[0-9]+)?")


def parse_size(text: str) -> int:
    """``"65536"``, ``"64K"``, ``"64KiB"``, ``"1M"``... as bytes (binary multiples)."""
    m = _SIZE.fullmatch(text)
    if m is None:
        raise argparse.ArgumentTypeError(
            f"{text!r} is not a size (an integer in ASCII digits, optionally followed by B, K, "
            "KiB, M, MiB, G or GiB)"
        )
    unit = (m.group(2) or "").lower()
    return int(m.group(1)) * {**_UNITS, **_UNITS_G}[unit]


def _count(text: str) -> int:
    """A whole-number option (``--max-items``, ``--ttl``...): ASCII digits, as sizes; the
    limit itself checks the range. int() took any script's digits ("٢" read as 2), "_",
    "+" and surrounding spaces."""
    if _COUNT.fullmatch(text) is None:
        raise argparse.ArgumentTypeError(f"{text!r} is not an integer (in ASCII digits)")
    return int(text)


def _fraction(text: str) -> float:
    """A number in [0, 1] in ASCII digits, as counts: float() took "٠.٥", "nan" and "inf"."""
    if _DECIMAL.fullmatch(text) is None:
        raise argparse.ArgumentTypeError(f"{text!r} is not a number (in ASCII digits)")
    # Adding 0.0 makes -0.0 plain 0.0, which the report would show as "-0.0%".
    value = float(text) + 0.0
    if not 0 <= value <= 1:
        raise argparse.ArgumentTypeError(f"{text!r} is not in [0, 1]")
    return value


def _text(value: str) -> str:
    """A free-text option (a query, a parameter, a principal) as the UTF-8 its bytes
    spell, whatever the locale. Python decodes argv by the locale: under ``LC_ALL=C``
    "ü" was held as lone surrogates, which the scope refuses, and a cursor bound to it
    did not match the same text given under a UTF-8 locale."""
    try:
        return _utf8(value)
    except UnicodeError:
        raise argparse.ArgumentTypeError(f"{_escaped(value)} is not UTF-8 text") from None


def _utf8(value: str) -> str:
    """*value*'s bytes (as the OS gave them) decoded as UTF-8; `UnicodeError` if they
    are not UTF-8."""
    try:
        raw = os.fsencode(value)
    except UnicodeEncodeError:
        # Text the locale's encoding cannot write ("ü" under an ASCII locale), given by
        # a caller of main() rather than read from the OS: its UTF-8 is its bytes.
        raw = value.encode("utf-8", "surrogateescape")
    return raw.decode("utf-8")


def _chart_name(text: str) -> str:
    """``--chart``'s file: a PNG is all it writes, so a name that says otherwise is
    refused before any measuring (PNG bytes went into "x.svg", a file named "-" was
    made, and an empty name failed only once all was measured)."""
    if text in ("", "-"):
        raise argparse.ArgumentTypeError(
            f"{text!r} is not a file name (the chart is written to a file, not stdout)"
        )
    if not text.lower().endswith(".png"):
        raise argparse.ArgumentTypeError(
            f"{_escaped(text)} does not end in .png (the chart is a PNG)"
        )
    return text


def _size_list(text: str) -> list[int]:
    """``"4K,8K,1M"`` as bytes; an empty entry (``"4K,,8K"``) is refused, not skipped."""
    parts = text.split(",")
    if any(not part.strip() for part in parts):
        raise argparse.ArgumentTypeError(f"{text!r} has an empty entry")
    return [parse_size(part) for part in parts]


def default_store_path() -> str:
    """``jsonbudget/cursors.sqlite3`` in the user's cache directory (`cache_home`), or
    without one, in a directory of this user under the temporary directory
    (`_temp_store_dir`): never one relative to where the command runs, where a cursor
    made elsewhere was refused."""
    base = cache_home()
    if base is None:
        return os.path.join(_temp_store_dir(), "cursors.sqlite3")
    return os.path.join(base, "jsonbudget", "cursors.sqlite3")


def _temp_store_dir() -> str:
    """The default store's directory without a home: ``<tempdir>/jsonbudget-cursors-<uid>``,
    as `SpillStore` falls back to ``<tempdir>/jsonbudget-spill-<uid>``."""
    user = f"-{os.geteuid()}" if hasattr(os, "geteuid") else ""
    return os.path.join(tempfile.gettempdir(), f"jsonbudget-cursors{user}")


def _check_temp_store_dir(directory: str) -> None:
    """Refuse *directory* (`_temp_store_dir`) unless it is a directory of this user that
    no one else can write: in a temporary directory shared by all users, another one
    could have made it first, and would read or plant the store's key."""
    st = os.lstat(directory)
    why = None
    if stat.S_ISLNK(st.st_mode) or not stat.S_ISDIR(st.st_mode):
        why = "is not a directory"
    elif hasattr(os, "geteuid") and st.st_uid != os.geteuid():
        why = "is owned by another user"
    elif st.st_mode & 0o022:
        why = f"is writable by group or others (mode {stat.S_IMODE(st.st_mode):o})"
    if why is not None:
        raise OSError(
            f"the default cursor store's directory {directory} {why} (there is no home "
            "directory to keep it in): give --store"
        )


def _default_principal() -> str:
    try:
        name = getpass.getuser() or "anonymous"
    except (OSError, KeyError):
        # No login name (a container without a passwd entry): one shared principal.
        return "anonymous"
    try:
        # Its bytes, as --principal is taken: the same user under any locale.
        return _utf8(name)
    except UnicodeError:
        raise _Usage(f"the OS user name {_escaped(name)} is not UTF-8: give --principal") from None


# -- argument parsing -------------------------------------------------------------------


def _add_shape(g: argparse.ArgumentParser | argparse._ArgumentGroup) -> None:
    """The options that shape a value, shared by the encoding commands and ``tune``."""
    g.add_argument(
        "--max-items",
        type=_count,
        metavar="N",
        help="items per page and per list, not object members",
    )
    g.add_argument("--max-keys", type=_count, metavar="N", help="members per object")
    g.add_argument(
        "--max-field-bytes", type=parse_size, metavar="SIZE", help="encoded bytes per string"
    )


def _limits(args: argparse.Namespace, **more: int | None) -> Limits:
    """The `Limits` of the options `_add_limits` added, and *more*."""
    return Limits(
        args.max_bytes,
        max_items=args.max_items,
        max_keys=args.max_keys,
        max_field_bytes=args.max_field_bytes,
        max_depth=args.max_depth,
        **more,
    )


def _add_limits(p: argparse.ArgumentParser, *, default_bytes: int) -> None:
    g = p.add_argument_group("limits")
    g.add_argument(
        "--max-bytes",
        type=parse_size,
        default=default_bytes,
        metavar="SIZE",
        help=f"budget for the whole output, in bytes (default {default_bytes})",
    )
    _add_shape(g)
    g.add_argument(
        "--max-depth",
        type=_count,
        default=DEFAULT_MAX_DEPTH,
        metavar="N",
        help=f"nesting depth (default {DEFAULT_MAX_DEPTH})",
    )
    g.add_argument(
        "--strategy",
        choices=("balanced", "prefix"),
        default="balanced",
        help="how a budget is shared among values (default balanced)",
    )
    g.add_argument(
        "--markers",
        choices=("text", "structured"),
        default="text",
        help="marker style for cuts (default text)",
    )
    g.add_argument(
        "--binary",
        choices=("marker", "base64"),
        default="marker",
        help="bytes values (an SQLite BLOB): a marker saying their size, or base64 "
        "(default marker)",
    )


def _add_source(p: argparse.ArgumentParser) -> None:
    p.add_argument(
        "source",
        metavar="SOURCE",
        help="a JSON array file, a JSON Lines file, or an SQLite database",
    )
    g = p.add_argument_group("source")
    g.add_argument(
        "--kind",
        choices=("auto", "json", "jsonl", "sqlite"),
        default="auto",
        help="auto: SQLite by its header; JSON Lines by .jsonl/.ndjson, or when the first "
        "value is not an array, or the first line is a whole array followed by more values; "
        "else a JSON array (a pipe needs --kind json or jsonl)",
    )
    g.add_argument(
        "--prefix",
        type=_text,
        default="item",
        help="ijson prefix of the array in a JSON file (default item: the top-level array)",
    )
    g.add_argument("--table", type=_text, help="SQLite: page this table")
    g.add_argument("--query", type=_text, help="SQLite: page this SELECT")
    g.add_argument(
        "--param",
        type=_text,
        action="append",
        default=[],
        metavar="VALUE",
        help="SQLite: a ? parameter of --query, as text (repeat in order)",
    )
    g.add_argument(
        "--order-by",
        type=_text,
        action="append",
        metavar="COLS",
        help="SQLite: the order, 'col' or '-col', comma-separated or repeated (default: id, "
        "or a --table's primary key or rowid when it has no id column); a table's primary "
        "key is appended when needed",
    )
    g.add_argument(
        "--unique",
        action="store_true",
        help="SQLite: declare that --order-by is unique in the --query result (a query's "
        "order is refused otherwise: rows sharing a key could be skipped)",
    )
    g.add_argument(
        "--mode",
        choices=("keyset", "offset"),
        help="SQLite: keyset (default) or offset pagination",
    )


class _Parser(argparse.ArgumentParser):
    """argparse's parser, whose usage errors are one line like every other error."""

    #: The subcommands' parsers, by name (on the top-level parser).
    commands: dict[str, argparse.ArgumentParser]

    def error(self, message: str) -> NoReturn:
        # argparse prints the whole usage block, prefixed by the subcommand's name:
        # a script matching `jsonbudget: error:` would miss it. --help still shows it.
        _fail(f"error: {message} (see '{self.prog} --help')", EXIT_USAGE)
        raise SystemExit(EXIT_USAGE)


def _parser() -> _Parser:
    from .. import __version__  # noqa: PLC0415 - the package imports this module lazily

    parser = _Parser(
        prog=_PROG,
        description="JSON that provably fits a byte budget: bound, page, demo and tune.",
        epilog="exit codes: 0 ok, 1 runtime or data error, 2 usage error, 3 cursor refused, "
        "130 interrupted, 143 terminated",
    )
    parser.add_argument("--version", action="version", version=f"%(prog)s {__version__}")
    sub = parser.add_subparsers(dest="command", metavar="COMMAND", required=True)

    d = sub.add_parser("dump", help="bound a JSON document or JSON Lines stream to a budget")
    d.add_argument(
        "file", nargs="?", default="-", metavar="FILE", help="input file, or - for stdin"
    )
    d.add_argument("--jsonl", action="store_true", help="the input is JSON Lines (a list of lines)")
    d.add_argument("--report", action="store_true", help="print the cuts to stderr")
    d.add_argument("--json", action="store_true", help="with --report: the report as one JSON line")
    _add_limits(d, default_bytes=DEFAULT_DUMP_BYTES)

    p = sub.add_parser("page", help="print one page envelope of a file or an SQLite query")
    _add_source(p)
    p.add_argument("--cursor", help="continue from this next_cursor")
    p.add_argument(
        "--principal", type=_text, help="who asks; cursors are bound to it (default: OS user)"
    )
    p.add_argument(
        "--store",
        help="cursor store: an SQLite file, or a redis://, rediss:// or unix:// URL "
        f"(default {default_store_path()})",
    )
    p.add_argument(
        "--ttl", type=_count, default=900, help="seconds an operation lives (default 900)"
    )
    p.add_argument("--max-pages", type=_count, metavar="N", help="pages one operation may serve")
    p.add_argument(
        "--oversized",
        choices=("truncate", "placeholder", "error"),
        default="truncate",
        help="an item larger than a page: fitted (default), a marker, or an error",
    )
    p.add_argument("--mcp-keys", action="store_true", help="spell keys as MCP does (nextCursor)")
    _add_limits(p, default_bytes=DEFAULT_PAGE_BYTES)

    m = sub.add_parser("demo", help="page a sample ticket database with a durable cursor store")
    m.add_argument(
        "--rows", type=_count, default=DEFAULT_ROWS, help=f"tickets (default {DEFAULT_ROWS})"
    )
    m.add_argument(
        "--max-bytes",
        type=parse_size,
        default=DEFAULT_MAX_BYTES,
        metavar="SIZE",
        help=f"page budget (default {DEFAULT_MAX_BYTES})",
    )
    m.add_argument(
        "--huge-bytes",
        type=parse_size,
        default=DEFAULT_HUGE_BYTES,
        metavar="SIZE",
        help=f"size of the one huge attachment (default {DEFAULT_HUGE_BYTES})",
    )
    m.add_argument("--dir", help="keep the database and the store in this new or empty directory")
    m.add_argument("--json", action="store_true", help="print the report as JSON")
    m.add_argument("-q", "--quiet", action="store_true", help="no progress bar")

    t = sub.add_parser("tune", help="measure real data and recommend a page budget")
    _add_source(t)
    t.add_argument(
        "--sample",
        type=_count,
        default=DEFAULT_SAMPLE,
        metavar="N",
        help=f"measure the first N items (default {DEFAULT_SAMPLE})",
    )
    t.add_argument(
        "--budgets",
        type=_size_list,
        default=list(DEFAULT_BUDGETS),
        metavar="LIST",
        help="candidate budgets, comma-separated (default 4K,8K,...,1M)",
    )
    t.add_argument(
        "--goal-truncated",
        type=_fraction,
        default=DEFAULT_GOAL,
        metavar="SHARE",
        help=f"most items that may be truncated or oversized (default {DEFAULT_GOAL})",
    )
    _add_shape(t)
    t.add_argument(
        "--oversized",
        choices=("truncate", "placeholder"),
        default="truncate",
        help="outcome for an item larger than a page (default truncate)",
    )
    t.add_argument(
        "--chart",
        type=_chart_name,
        metavar="PNG",
        help="write a histogram with the budgets to this .png file (matplotlib)",
    )
    t.add_argument("--json", action="store_true", help="print the report as JSON")
    t.add_argument("-q", "--quiet", action="store_true", help="no progress bar")
    parser.commands = {"dump": d, "page": p, "demo": m, "tune": t}
    return parser


# -- output helpers ---------------------------------------------------------------------


class _Closed(Exception):
    """stdin or stdout is closed (``<&-``, ``>&-``): exit code 1."""


def _write(data: bytes) -> None:
    """Write all of *data* to stdout, exactly (no re-encoding), followed by nothing."""
    out = sys.stdout
    if out is None:
        raise _Closed("stdout is closed")
    _write_all(out, data)


def _say(text: str | bytes) -> None:
    """Write *text* whole to stderr; nothing when stderr is closed (``2>&-``) or takes
    no bytes (a descriptor open read-only, as a shell script that runs us may leave it):
    a message has nowhere else to go, and the exit code still says how it went.

    Bytes (a JSON report) are written as they are: JSON is UTF-8 whatever stderr's
    encoding, which, under an ASCII locale, turned "é" into ``\\xe9``, no JSON escape.
    """
    err = sys.stderr
    if err is None:
        return
    if isinstance(text, bytes):
        data = text
    else:
        data = _encoded(text, err.encoding or "utf-8", err.errors or "strict")
    try:
        _write_all(err, data)
    except OSError as exc:
        if exc.errno not in (errno.EBADF, errno.EPIPE, errno.EINVAL):
            raise  # a full disk, say: not a stderr that is not there


def _write_all(stream: TextIO, data: bytes) -> None:
    """Write all of *data* to *stream*'s binary layer, or raise `OSError`.

    Unbuffered streams (``PYTHONUNBUFFERED=1``, ``python -u``) pass each write to the OS
    as it is, and a pipe, a non-blocking one above all, may take only part of it; the
    rest is written until all is, waiting while a non-blocking pipe is full.
    """
    stream.flush()
    buffer = getattr(stream, "buffer", None)
    if buffer is None:  # a text-only stream (a StringIO in place of stdout) takes str whole
        stream.write(data.decode("utf-8"))
        stream.flush()
        return
    view = memoryview(data)
    while view:
        try:
            written = buffer.write(view)
        except BlockingIOError as exc:  # a buffered writer on a full non-blocking pipe
            written = exc.characters_written  # what it took before the pipe filled
            _wait_writable(buffer)
        else:
            if written is None:  # a raw (unbuffered) file on a full non-blocking pipe
                _wait_writable(buffer)
                continue
            if written == 0:  # never from a file; a loop forever from a broken writer
                raise OSError(errno.EIO, "the output accepted no bytes")
        view = view[written:]
    while True:
        try:
            buffer.flush()
            return
        except BlockingIOError:
            _wait_writable(buffer)


def _wait_writable(buffer: IO[bytes]) -> None:
    """Block until the non-blocking file under *buffer* can take more bytes."""
    select.select([], [buffer.fileno()], [])


class _Waiting:
    """A non-blocking binary input (a stdin the program that started us left so) read as
    a blocking one is: ``read(n)`` waits for data and returns fewer than *n* bytes only at
    the end. Read as it is, a read with nothing ready yet returns None, which was taken
    for the end: lines sent later were lost under a "complete" report."""

    __slots__ = ("raw",)

    def __init__(self, raw: IO[bytes]) -> None:
        self.raw = raw

    def read(self, size: int = -1) -> bytes:
        chunks: list[bytes] = []
        got = 0
        while size < 0 or got < size:
            data = self.raw.read(_READ if size < 0 else size - got)
            if data is None:  # nothing ready yet
                select.select([self.raw.fileno()], [], [])
                continue
            if not data:
                break
            chunks.append(data)
            got += len(data)
        return b"".join(chunks)

    def read1(self, size: int = -1) -> bytes:
        """What has arrived, up to *size* bytes (b"" at the end), waiting only while
        nothing has: a non-blocking read returns what is there."""
        while (data := self.raw.read(_READ if size < 0 else size)) is None:
            select.select([self.raw.fileno()], [], [])
        return data

    def fileno(self) -> int:
        return self.raw.fileno()


def _one_line(exc: BaseException) -> str:
    """*exc* as one line of plain text: what it echoes of the input (a file's name, a
    table's) cannot break the line or reach the terminal as an escape sequence."""
    if isinstance(exc, OSError) and exc.strerror and exc.filename is not None:
        name = exc.filename
        shown = os.fsdecode(name) if isinstance(name, str | bytes) else str(name)
        return f"{exc.strerror}: {_escaped(shown)}"
    if isinstance(exc, gzip.BadGzipFile):  # met where no source wrapped it (sniffing)
        return f"invalid gzip data: {gzip_reason(exc)}"
    text = " ".join(str(exc).split())
    return _escaped(text) or type(exc).__name__


def _escaped(text: str) -> str:
    """*text* with its control characters (C0, DEL, C1) written ``\\xNN`` and a name's
    undecodable bytes ``\\udcNN``, as Python writes them in a string, except bytes that
    are UTF-8 text (`_restored`): those are left for `_encoded` to write back."""
    return _UNSAFE.sub(_made_safe, text)


def _made_safe(m: re.Match[str]) -> str:
    """A match of `_UNSAFE` as `_escaped` writes it."""
    found = m.group()
    if found < "\ud800":  # a control character
        return f"\\x{ord(found):02x}"
    if _restored(found) is not None:
        return found
    return found.encode("utf-8", "backslashreplace").decode("utf-8")


def _restored(run: str) -> bytes | None:
    """The bytes a run of undecodable bytes (*run*, as ``surrogateescape`` holds them)
    stands for, where they are UTF-8 text without a control character: a file name under
    a locale that is not UTF-8 (``LC_ALL=C`` without Python's UTF-8 mode), which the
    terminal most likely shows as text, and which pastes back as the name. Else None:
    such bytes are written ``\\udcNN``, never as bytes a terminal could act on."""
    if _UNDECODED.fullmatch(run) is None:
        return None
    data = run.encode("utf-8", "surrogateescape")
    try:
        text = data.decode("utf-8")
    except UnicodeDecodeError:
        return None
    return None if _CONTROL.search(text) else data


def _encoded(text: str, encoding: str, errors: str) -> bytes:
    """*text* in *encoding*: what it lacks by *errors* (where that fails, as ``?``), and
    the undecodable bytes `_escaped` left as the bytes they stand for. Encoded by the
    stream's own handler, they came out as ``\\udcc3\\udca9`` on stderr (backslashreplace),
    or as ``?`` where stdout's handler was strict: a name the demo suggests to paste
    named no file."""
    parts: list[bytes] = []
    for i, part in enumerate(_UNDECODED.split(text)):  # odd parts: what the group matched
        data = _restored(part) if i % 2 else None
        if data is None:
            try:
                data = part.encode(encoding, errors)
            except UnicodeEncodeError:
                data = part.encode(encoding, "replace")
        parts.append(data)
    return b"".join(parts)


_CONTROL: Final = re.compile(r"[\x00-\x1f\x7f-\x9f]")
#: Undecodable bytes of a name, as ``surrogateescape`` holds them (U+DC80 to U+DCFF).
_UNDECODED: Final = re.compile("([\udc80-\udcff]+)")
#: What `_escaped` rewrites: a run of undecodable bytes, another lone surrogate, a control.
_UNSAFE: Final = re.compile("[\udc80-\udcff]+|[\ud800-\udfff]|[\x00-\x1f\x7f-\x9f]")


class _StdoutText:
    """stdout for rich: each text written whole through `_write`, as the JSON output is.

    A text stream on an unbuffered binary one drops what a short write left over.
    """

    __slots__ = ("_stream",)

    def __init__(self) -> None:
        out = sys.stdout
        if out is None:
            raise _Closed("stdout is closed")
        self._stream: TextIO = out

    @property
    def encoding(self) -> str:
        return self._stream.encoding or "utf-8"

    def write(self, text: str) -> int:
        # Text for people: a character the terminal's encoding lacks (the tables' "←",
        # rich's "⋯" under a latin-1 or ASCII locale) becomes "?", where "strict" ended
        # the command midway with exit 1.
        # The stream's own handler first, "replace" where it cannot encode a character
        # (Python's true ASCII locale uses surrogateescape, which has no answer for "←");
        # a name's undecodable bytes that `_escaped` left go back as they were.
        errors = getattr(self._stream, "errors", None) or "strict"
        _write_all(self._stream, _encoded(text, self.encoding, errors))
        return len(text)

    def flush(self) -> None:
        self._stream.flush()

    def isatty(self) -> bool:
        return self._stream.isatty()

    def fileno(self) -> int:
        return self._stream.fileno()


class _StdoutConsole(Console):
    """A console for stdout whose broken pipe reaches `main`, as for every command."""

    def __init__(self) -> None:
        # rich wants a text file; this one writes through `_write_all`.
        super().__init__(file=cast(IO[str], _StdoutText()), highlight=False, soft_wrap=True)

    def on_broken_pipe(self) -> None:
        # rich's default exits 1 with nothing said; `main` reports it like `_write` does.
        self.quiet = True  # nothing more to write to a closed pipe
        raise BrokenPipeError


def _progress(enabled: bool) -> Progress:
    return Progress(
        SpinnerColumn(),
        TextColumn("{task.description}"),
        BarColumn(),
        MofNCompleteColumn(),
        TimeElapsedColumn(),
        console=Console(file=sys.stderr, quiet=sys.stderr is None),
        transient=True,
        disable=not enabled,
    )


def _show_progress(args: argparse.Namespace) -> bool:
    err = sys.stderr
    return not getattr(args, "quiet", False) and err is not None and err.isatty()


# -- the input layer (dump, page, tune) -------------------------------------------------


class _Reader(Protocol):
    def read(self, size: int = -1, /) -> bytes: ...


class _Arrived:
    """A pipe or a device read for what has arrived, as the file sources read one: a
    read of n bytes waited for all n (or the writer to close), so a dump whose items and
    look-ahead had come waited on a writer that stays open. It reads on while more is
    there at once, so that a fast writer still fills whole reads."""

    __slots__ = ("stream",)

    def __init__(self, stream: Arriving) -> None:
        self.stream = stream

    def read(self, size: int = -1) -> bytes:
        # A chunk for the whole rest, as `_Prepended.read` gives one.
        return read_arrived(self.stream, _READ if size < 0 else size)


class _Prepended:
    """A binary reader that replays *head* before the rest of *stream*, counting bytes.

    What is held is read by moving ``pos`` through it, never by slicing off the part
    read: each held byte is copied out once, so a 200 MB first line replayed 64 KiB at a
    time, or a chunk of a million short lines, costs linear work.
    """

    __slots__ = ("cap", "ends", "head", "pos", "read_bytes", "stream")

    def __init__(
        self, head: bytes, stream: _Reader, cap: int | None, *, ends: bool = False
    ) -> None:
        self.head = head
        self.pos = 0
        self.stream = stream
        self.cap = cap
        self.read_bytes = 0
        # Whether the input's size bounds it (a regular file, not gzip): an item too long
        # to hold is passed over to its end there, as the file sources do.
        self.ends = ends

    def _refill(self) -> bool:
        """Hold the next chunk of *stream* when all held bytes are read; False at the end."""
        if self.pos < len(self.head):
            return True
        self.head = self.stream.read(_READ)
        self.pos = 0
        return bool(self.head)

    def read(self, size: int = -1) -> bytes:
        head, pos = self.head, self.pos
        if pos < len(head):
            end = len(head) if size < 0 else min(len(head), pos + size)
            chunk = head[pos:end]
            self.pos = end
        else:
            chunk = self.stream.read(size if size >= 0 else _READ)
        self.read_bytes += len(chunk)
        if self.cap is not None and self.read_bytes > self.cap:
            raise DecodeError(
                f"a top-level value that is not an array is loaded whole, and this one is "
                f"larger than {self.cap} bytes (arrays and JSON Lines are streamed)",
                offset=self.cap,
            )
        return chunk

    def readline(self, size: int = -1) -> bytes:
        parts: list[bytes] = []
        taken = 0
        while (size < 0 or taken < size) and self._refill():
            head, pos = self.head, self.pos
            stop = len(head) if size < 0 else min(len(head), pos + size - taken)
            end = head.find(b"\n", pos, stop)
            cut = stop if end < 0 else end + 1
            parts.append(head[pos:cut])
            taken += cut - pos
            self.pos = cut
            if end >= 0:
                break
        line = b"".join(parts)
        self.read_bytes += len(line)
        return line

    def first_byte(self) -> bytes:
        """Skip whitespace; the next byte, left unread (b"" at the end).

        Where the input's end is not known, whitespace is passed over for at most
        `MAX_PASS_OVER` bytes, as the file sources pass it, where an endless run of it
        (``yes ' '``) read forever.
        """
        run = self.read_bytes
        while self._refill():
            found = _NON_WS.search(self.head, self.pos)
            start = len(self.head) if found is None else found.start()
            self.read_bytes += start - self.pos
            self.pos = start
            if found is not None:
                return self.head[start : start + 1]
            if not self.ends and self.read_bytes - run > MAX_PASS_OVER:
                raise passed_over_too_far(MAX_PASS_OVER, run, "a run of whitespace")
        return b""

    def read_all(self) -> bytes:
        """The rest of the stream (refused past *cap*)."""
        # What is held comes out in one piece, then the stream in chunks.
        parts = [self.read()] if self.pos < len(self.head) else []
        while chunk := self.read(_READ):
            parts.append(chunk)
        return b"".join(parts)


def _regular(raw: IO[bytes]) -> bool:
    """Whether *raw* reads a regular file (stdin redirected from one); False where it
    has no file descriptor to tell by (a stream a host program put in its place)."""
    try:
        return stat.S_ISREG(os.fstat(raw.fileno()).st_mode)
    except (OSError, ValueError):  # io.UnsupportedOperation is both: no descriptor
        return False


def _open_input(name: str, stack: ExitStack) -> _Prepended:
    """The decoded bytes of a file (or ``-``, stdin): gzip undone, a UTF-8 BOM skipped."""
    if name == "-":
        if sys.stdin is None:
            raise _Closed("stdin is closed (give a FILE, or feed it with < or |)")
        raw: IO[bytes] = sys.stdin.buffer
        regular = _regular(raw)
        with file_errors(lambda: 0):
            if not os.get_blocking(raw.fileno()):
                raw = cast(IO[bytes], _Waiting(raw))
    else:
        raw = stack.enter_context(open(name, "rb"))  # noqa: SIM115  # the stack closes it
        regular = _regular(raw)
    head = raw.read(len(GZIP_MAGIC))
    stream: _Reader = raw
    if head == GZIP_MAGIC:
        regular = False  # a small file may inflate to gigabytes
        stream = gzip.GzipFile(fileobj=cast(IO[bytes], _Prepended(head, raw, None)), mode="rb")
        head = b""
    elif not regular:
        # Read for what has arrived, as the file sources read a pipe (not gzip: its stream
        # reads its input whole reads at a time, theirs too). The few bytes of the head
        # above are read whole.
        stream = _Arrived(cast(Arriving, raw))
    with file_errors(lambda: 0):
        while len(head) < len(BOM):
            more = stream.read(len(BOM) - len(head))
            if not more:
                break
            head += more
    opened = _Prepended(head.removeprefix(BOM), stream, None, ends=regular)
    # Offsets count the decoded input from its first byte, a byte order mark included,
    # as the file sources count them.
    opened.read_bytes = len(head) - len(opened.head)
    return opened


def _first_char(stream: _Prepended, at: Callable[[], int]) -> bytes:
    """Skip leading whitespace; return the first byte of the value (b"" at the end)."""
    with file_errors(at):
        return stream.first_byte()


def _lines(stream: _Prepended, first: Any = _NOTHING, offset: int = 0) -> Iterator[Any]:
    """One value per non-blank line, parsed only when the encoder asks for it; a line
    longer than the file sources' item bound clipped and passed over as they do."""
    if first is not _NOTHING:
        yield first
    pass_over = None if stream.ends else MAX_PASS_OVER
    lines = line_items(stream.readline, offset, limit=DEFAULT_MAX_ITEM_BYTES, pass_over=pass_over)
    at = offset  # where the last line read ended: a read error's offset
    with file_errors(lambda: at):
        for value, at, _last in lines:  # noqa: B007  # read by the lambda: the error's offset
            yield value


def _array(stream: _Prepended, lead: int, line: int, skipped: int) -> Iterator[Any]:
    """The items of the array *stream* holds, which starts at *lead* in the input; its
    first *line* bytes were read first, and *skipped* bytes of whitespace after them."""
    try:
        # _Prepended has the read() the window needs; it is not a full IO[bytes].
        items = array_items(stream, pass_over=None if stream.ends else MAX_PASS_OVER)  # type: ignore[arg-type]
        for item, _index, _offset, _last in items:
            yield item
    except DecodeError as exc:
        if exc.offset is None:
            raise
        raise _rebased(exc, lead + (skipped if exc.offset >= line else 0)) from None


def _rebased(exc: DecodeError, base: int) -> DecodeError:
    """*exc* with its offset counted from the input's start, not from *base*."""
    assert exc.offset is not None
    message = str(exc).removesuffix(f" (at decoded byte {exc.offset})")
    return DecodeError(message, offset=exc.offset + base)


def _read_value(stream: _Prepended, *, jsonl: bool) -> Any:
    """What `dump` encodes: an array's items lazily, JSON Lines lazily, else one value.

    A value followed on its next line by more values is JSON Lines; anything else after
    a value is refused, never dropped.
    """
    if jsonl:
        return _lines(stream, offset=stream.read_bytes)
    first = _first_char(stream, lambda: stream.read_bytes)
    lead = stream.read_bytes  # the byte order mark and whitespace before the value
    if not first:
        raise DecodeError("the input is empty", offset=stream.read_bytes)
    if first not in _VALUE_START and first != b'"':
        # No JSON value starts so (binary data, /dev/zero): said at once, where reading
        # on for a value to parse took up to MAX_LOAD_BYTES and several times that memory.
        raise DecodeError(
            f"invalid JSON: no value starts with the byte 0x{first[0]:02x}",
            offset=stream.read_bytes,
        )
    if first == b"[":
        with file_errors(lambda: stream.read_bytes):
            line = stream.readline(_READ + 1)
            value = _whole_line(line, _READ)
            rest = _first_char(stream, lambda: stream.read_bytes) if value is not _NOTHING else b""
        if rest and rest in _VALUE_START:  # arrays on lines of their own: JSON Lines
            return _lines(stream, value, stream.read_bytes)
        # One array, streamed from its start: the line replayed, and after it the
        # whitespace the look past it took, which its offsets count again.
        skipped = stream.read_bytes - lead - len(line)
        return _array(_Prepended(line, stream, None, ends=stream.ends), lead, len(line), skipped)
    with file_errors(lambda: stream.read_bytes):
        line = stream.readline(MAX_LOAD_BYTES + 1)
        try:
            value = load_json(line)
        except DecodeError:
            value = _NOTHING  # not one value on one line: read the value whole
        if value is not _NOTHING:
            rest = _first_char(stream, lambda: stream.read_bytes)
            if not rest:
                return value
            if rest in _VALUE_START:
                return _lines(stream, value, stream.read_bytes)
            _bad_line(stream)
            raise DecodeError("invalid JSON: content after the value", offset=stream.read_bytes)
        whole = _Prepended(line, stream, MAX_LOAD_BYTES)
        try:
            return load_json(whole.read_all())
        except DecodeError as exc:
            raise _rebased(exc, lead) from None


def _bad_line(stream: _Prepended) -> None:
    """Raise what `--jsonl` says of the line *stream* is at, which follows a first line
    that held a whole value and starts no JSON value: that is JSON Lines with a bad line
    ("NaN is not valid JSON"), which "content after the value" misnamed. Its head alone
    is parsed (the error is at its first byte): a line of binary data is not read on."""
    at = stream.read_bytes
    with file_errors(lambda: at):
        head = stream.readline(_READ)
    for _value in _lines(_Prepended(head, io.BytesIO(), None), offset=at):
        break  # not expected: a line that starts no value does not parse


def _sniff_kind(path: str) -> str:
    """``"json"`` for a file whose first value is an array that is not a whole first line
    followed by more values (read up to `_READ` to tell), else ``"jsonl"``."""
    with ExitStack() as stack:
        stream = _open_input(path, stack)
        first = _first_char(stream, lambda: stream.read_bytes)
        if not first:
            return "json"
        if first != b"[":
            # No array file (each page reads the file's top-level array): JSON Lines, or
            # nothing this command pages, which its source then says. Parsing the first
            # line to tell cost every page a read of up to 256 MiB (a 120 MB first
            # record: 0.5 GB of memory for a page of five short ones).
            return "jsonl"
        # An array's first line may be all of a huge array file: only a short one is
        # read to learn whether it is a line of JSON Lines (`dump` decides the same way).
        with file_errors(lambda: stream.read_bytes):  # a gzip file cut short, say
            line = stream.readline(_READ + 1)
        if _whole_line(line, _READ) is _NOTHING:
            return "json"
        return "jsonl" if _first_char(stream, lambda: stream.read_bytes) else "json"


def _whole_line(line: bytes, most: int) -> Any:
    """The value *line* holds whole (at most *most* bytes), else _NOTHING."""
    if len(line) > most:
        return _NOTHING
    try:
        return load_json(line)
    except DecodeError:
        return _NOTHING


def _cmd_dump(args: argparse.Namespace) -> int:
    limits = _limits(args)
    encoder = Encoder(limits, strategy=args.strategy, markers=args.markers, binary=args.binary)
    if args.json and not args.report:
        raise _Usage("--json is the form of --report: give both")
    jsonl = args.jsonl or args.file.lower().endswith(_JSONL_EXT)
    with _naming("stdin" if args.file == "-" else args.file), ExitStack() as stack:
        stream = _open_input(args.file, stack)
        value = _read_value(stream, jsonl=jsonl)
        result = encoder.encode(value)
    _write(result.data + b"\n")
    if args.report:
        if args.json:
            report = {
                "bytes": len(result.data),
                "complete": result.complete,
                "truncations": [t.to_dict() for t in result.truncations],
            }
            _say(orjson.dumps(report) + b"\n")
        else:
            cuts = len(result.truncations)
            lines = [
                f"{_PROG}: {len(result.data)} bytes, "
                f"{'complete' if result.complete else f'{cuts} cut' + ('' if cuts == 1 else 's')}\n"
            ]
            for t in result.truncations:
                omitted = "more" if t.omitted is None else str(t.omitted)
                lines.append(f"  {_shown_pointer(t.path)}\t{t.kind}\t{omitted} {t.unit}\n")
            _say("".join(lines))
    return EXIT_OK


def _shown_pointer(path: str) -> str:
    """*path* for the text report, one line a cut: as it is, or as a JSON string where it
    is empty (the root: "/" is the member named "") or holds a control character (a tab
    or a line break would break the line; an escape sequence would reach the terminal)."""
    if path and not _SHOWN_QUOTED.search(path):
        return path
    # orjson escapes C0, the quote and the backslash; DEL and C1 (a terminal reads \x9b
    # as the start of an escape sequence) are escaped here, as JSON allows.
    return _C1.sub(lambda m: f"\\u{ord(m.group()):04x}", orjson.dumps(path).decode())


#: What makes a pointer shown as a JSON string: a control character (C0, DEL, C1), and
#: the quote and backslash, which a JSON string escapes.
_SHOWN_QUOTED: Final = re.compile(r'[\x00-\x1f\x7f-\x9f"\\]')
_C1: Final = re.compile(r"[\x7f-\x9f]")


# -- sources (page, tune) ---------------------------------------------------------------


def _not_sqlite(path: str) -> bool:
    """Whether *path* is a regular file that is not an SQLite database (an empty file is
    an empty one; what is not a regular file SQLite itself refuses)."""
    if not os.path.isfile(path):
        return False
    with open(path, "rb") as f:
        head = f.read(len(_SQLITE_MAGIC))
    return bool(head) and head != _SQLITE_MAGIC


def _kind(args: argparse.Namespace) -> str:
    kind: str = args.kind
    path: str = args.source
    wants_sql = args.table is not None or args.query is not None
    if kind == "sqlite" or (kind == "auto" and wants_sql):
        if _not_sqlite(path):
            what = "--table and --query need" if wants_sql else "--kind sqlite needs"
            raise _Usage(f"{what} an SQLite database; {path} is not one")
        return "sqlite"
    if kind != "auto":
        return kind
    jsonl = path.lower().endswith(_JSONL_EXT)
    if os.path.exists(path) and not os.path.isfile(path) and not os.path.isdir(path):
        if jsonl:
            return "jsonl"
        # A pipe or a device: what sniffing reads is gone before the source opens it (a
        # valid array lost its "[" and was called invalid).
        raise _Usage(
            f"{path} is not a regular file, so its kind cannot be told without consuming "
            "it: give --kind json or --kind jsonl"
        )
    with open(path, "rb") as f:
        if f.read(len(_SQLITE_MAGIC)) == _SQLITE_MAGIC:
            return "sqlite"
    if jsonl:
        return "jsonl"
    return "json" if args.prefix != "item" else _sniff_kind(path)


class _Usage(Exception):
    """A combination of options that cannot work; exit code 2."""


@contextmanager
def _naming(name: str) -> Iterator[None]:
    """Name *name* in an `OSError` that names no file: a read's EIO (``/proc/self/mem``)
    said only "Input/output error". Wrapped around reading the input alone, never the
    output: an error writing stdout would be laid on the input's name."""
    try:
        yield
    except OSError as exc:
        if exc.filename is None and exc.strerror:
            exc.filename = name
        raise


def _order_by(args: argparse.Namespace) -> list[str] | None:
    if not args.order_by:
        return None  # the source's default: id, else the table's own key
    return [c.strip() for spec in args.order_by for c in spec.split(",") if c.strip()]


def _source(args: argparse.Namespace, cell_bytes: int | None) -> tuple[Source[Any], dict[str, Any]]:
    """The source named by the options and the query a cursor is bound to.

    *cell_bytes* bounds what is fetched of one database cell; None leaves it to the page
    (a page fetches no more of a cell than its own budget). It is part of the source's
    description, which a cursor is bound to: a bound that followed ``--max-bytes`` made
    a cursor refused when the page size changed.
    """
    path = os.path.abspath(args.source)
    if not os.path.exists(path):
        if args.source == "-":
            # `dump` reads stdin as "-"; a page's cursor reads its file again from where
            # the page ended, which stdin cannot give.
            why = " (stdin cannot be read again to resume)" if args.command == "page" else ""
            raise _Usage(
                f"{args.command} needs a regular file, not -{why}: give a path, or "
                "/dev/stdin with --kind json or --kind jsonl to read stdin once"
            )
        raise FileNotFoundError(2, "no such file", args.source)
    kind = _kind(args)
    sql_given = args.table is not None or args.query is not None or args.param
    if kind != "sqlite" and (sql_given or args.order_by or args.unique or args.mode):
        raise _Usage(
            "--table, --query, --param, --order-by, --unique and --mode apply to SQLite "
            "sources only"
        )
    query: dict[str, Any] = {"kind": kind, **described_path("path", path)}
    if kind == "sqlite":
        if not os.path.isfile(path):
            # SQLite's open of a pipe waits for a writer, forever.
            raise _Usage(f"an SQLite source must be a database file; {args.source} is not one")
        if (args.table is None) == (args.query is None):
            raise _Usage("an SQLite source needs exactly one of --table or --query")
        if args.table is not None and args.param:
            raise _Usage("--param applies to --query only")
        order = _order_by(args)
        mode: Literal["keyset", "offset"] = args.mode or "keyset"
        source: Source[Any] = SQLiteSource(
            path,
            table=args.table,
            query=args.query,
            params=list(args.param),
            order_by=order,
            mode=mode,
            unique=args.unique,
            max_cell_bytes=None if cell_bytes is None else max(MIN_CELL_BYTES, cell_bytes),
        )
        query |= {
            "table": args.table,
            "query": args.query,
            "params": list(args.param),
            "order_by": order,
            "unique": args.unique,
            "mode": mode,
        }
    elif kind == "jsonl":
        source = JsonLinesSource(path)
    else:
        source = JsonArrayFileSource(path, prefix=args.prefix)
        query["prefix"] = args.prefix
    return source, query


def _store(spec: str | None, ttl: int, stack: ExitStack) -> CursorStore:
    if spec is not None and spec.startswith(("redis://", "rediss://", "unix://")):
        from .._cursors.redis_store import RedisCursorStore  # noqa: PLC0415 - redis is optional

        return RedisCursorStore(spec, ttl=ttl)
    if spec == "":
        # Taken for no option, it put the cursors in the default store, unnamed.
        raise _Usage("--store is empty: name an SQLite file or a Redis URL, or leave it out")
    path = default_store_path() if spec is None else spec
    if _not_sqlite(path):
        raise _Usage(f"--store {path} is not an SQLite database (nor a Redis URL)")
    if spec is None:
        # The default store holds only cursors, but they are still the user's: keep it private.
        directory = os.path.dirname(path)
        os.makedirs(directory, mode=0o700, exist_ok=True)
        if directory == _temp_store_dir():
            _check_temp_store_dir(directory)
    try:
        store = SQLiteCursorStore(path, ttl=ttl)
    except sqlite3.OperationalError as exc:
        if exc.sqlite_errorname.startswith("SQLITE_READONLY"):
            # "attempt to write a readonly database" is also what a WAL data file in a
            # read-only directory gives: say that the store is the file meant.
            raise sqlite3.OperationalError(
                f"cannot write the cursor store {_escaped(path)}: {exc}"
            ) from exc
        if exc.sqlite_errorname != "SQLITE_CANTOPEN":
            raise
        # SQLite's "unable to open database file" names neither the file nor the cause.
        raise sqlite3.OperationalError(
            f"cannot open the cursor store {_escaped(path)}{_why_not_opened(path)}: {exc}"
        ) from exc
    return stack.enter_context(store)


def _why_not_opened(path: str) -> str:
    """What keeps SQLite from opening *path*, where it can be told."""
    if os.path.isdir(path):
        return " (a directory)"
    if not os.path.isdir(os.path.dirname(os.path.abspath(path))):
        return " (its directory does not exist)"
    return ""


@contextmanager
def _interruptible(source: Source[Any]) -> Iterator[None]:
    """Let Ctrl-C stop a long SQLite query of *source*: the interpreter runs its SIGINT
    handler only between bytecodes, so while SQLite ran a query the command went on
    until SQLite finished (forever, for an endless one). A thread reads the signal's
    byte from the wakeup fd, which is written the moment the signal arrives, and
    interrupts the query; the main thread then raises KeyboardInterrupt (exit 130).

    Once the signal came, the query is interrupted again every `_INTERRUPT_EVERY`
    seconds until the command ends: an interrupt is lost on a connection running no
    statement, and a signal that came just before the query started (its handler not yet
    run when SQLite took over) left that query running for good."""
    if (
        not isinstance(source, SQLiteSource)
        or threading.current_thread() is not threading.main_thread()
    ):
        yield
        return
    read, write = os.pipe()
    os.set_blocking(write, False)
    before = signal.set_wakeup_fd(write, warn_on_full_buffer=False)
    ended = threading.Event()

    def watch() -> None:
        while data := os.read(read, 64):  # b"" once the write end is closed below
            if signal.SIGINT in data:
                break
        else:
            return
        source.interrupt()
        while not ended.wait(_INTERRUPT_EVERY):
            source.interrupt()

    watcher = threading.Thread(target=watch, name="jsonbudget-sigint", daemon=True)
    watcher.start()
    try:
        yield
    finally:
        signal.set_wakeup_fd(before)
        ended.set()
        os.close(write)
        watcher.join()
        os.close(read)


def _cmd_page(args: argparse.Namespace) -> int:
    limits = _limits(args, max_pages=args.max_pages)
    options: dict[str, Any] = {
        "oversized": args.oversized,
        "keys": MCP_KEYS if args.mcp_keys else None,
        "strategy": args.strategy,
        "markers": args.markers,
        "binary": args.binary,
    }
    # The smallest page depends on these options, so only the builder knows it: refuse a
    # budget below it before the input is opened (a FIFO would block) or the store made.
    PageBuilder(limits, **options)
    # So are the principal and the TTL: checked here, they are refused before any I/O.
    principal = args.principal if args.principal is not None else _default_principal()
    Scope(principal)
    check_ttl(args.ttl)
    with _naming(args.source):
        source, query = _source(args, None)  # a page cuts cells at its own budget
    with _naming(args.source), ExitStack() as stack:
        if isinstance(source, SQLiteSource):
            # Its connection: left open, it outlived the command in an embedding process.
            stack.enter_context(source)
        scope = Scope(principal, query)
        stack.enter_context(_interruptible(source))
        store = _store(args.store, args.ttl, stack)
        paginator = Paginator(limits, store=store, **options)
        page = paginator.paginate(source, scope=scope, cursor=args.cursor)
    _write(page.to_json() + b"\n")
    return EXIT_OK


# -- demo -------------------------------------------------------------------------------


def _cmd_demo(args: argparse.Namespace) -> int:
    demo = Demo(rows=args.rows, max_bytes=args.max_bytes, huge_bytes=args.huge_bytes)
    with ExitStack() as stack:
        if args.dir is not None:
            if os.path.exists(args.dir) and not os.path.isdir(args.dir):
                raise _Usage(f"--dir {args.dir} is not a directory")
            os.makedirs(args.dir, exist_ok=True)
            if os.listdir(args.dir):
                raise _Usage(f"--dir {args.dir} is not empty")
            directory = args.dir
        else:
            directory = stack.enter_context(tempfile.TemporaryDirectory(prefix="jsonbudget-demo-"))
        progress = stack.enter_context(_progress(_show_progress(args)))
        task = progress.add_task("paging tickets", total=demo.rows)

        def on_page(page: DemoPage) -> None:
            progress.advance(task, len(page.ids))

        report = demo.run(directory, on_page=on_page)
        progress.stop()
    if args.json:
        data = report.to_dict()
        data["kept"] = args.dir is not None
        _write(orjson.dumps(data) + b"\n")
        return EXIT_OK if report.every_row_once_in_order else EXIT_ERROR
    out = _StdoutConsole()
    for line in report_lines(report, args.huge_bytes):
        out.print(line, markup=False)
    if args.dir is not None:
        # Quoted so that it pastes as one argument (a --dir with a space); escaped as
        # error lines are, so that a name's control characters do not reach the terminal.
        database = _escaped(report.database)
        command = _escaped(shlex.quote(report.database))
        out.print(
            f"Kept: {database} — try: jsonbudget page {command} --table tickets", markup=False
        )
    return EXIT_OK if report.every_row_once_in_order else EXIT_ERROR


# -- tune -------------------------------------------------------------------------------


def _human(n: int | float | None) -> str:
    if n is None:
        return "-"
    n = int(n)
    if n >= 1 << 20 and n % (1 << 20) == 0:
        return f"{n >> 20} MiB"
    if n >= _KIB and n % _KIB == 0:
        return f"{n >> 10} KiB"
    return f"{n:,} B"


def _cmd_tune(args: argparse.Namespace) -> int:
    tuner = Tuner(
        budgets=args.budgets,
        goal_truncated=args.goal_truncated,
        sample=check_int("sample", args.sample, minimum=1, maximum=MAX_LIMIT),
        max_items=args.max_items,
        max_keys=args.max_keys,
        max_field_bytes=args.max_field_bytes,
        oversized=args.oversized,
    )
    if args.chart is not None:
        import importlib.util  # noqa: PLC0415 - only a chart needs it

        if importlib.util.find_spec("matplotlib") is None:
            raise missing_extra("cli", "matplotlib", "--chart")
    with _naming(args.source):
        source, _query = _source(args, max(args.budgets))
    with _interruptible(source), _progress(_show_progress(args)) as progress:
        reading = progress.add_task("reading items", total=tuner.sample)
        items: list[Any] = []
        with _naming(args.source):
            it = source.open(None, limit_hint=tuner.sample)
            try:
                for item, _pos in islice(it, tuner.sample + 1):
                    items.append(item)
                    progress.advance(reading)
            finally:
                close = getattr(it, "close", None)
                if close is not None:
                    close()
        progress.remove_task(reading)
        n = min(len(items), tuner.sample)
        task = progress.add_task("measuring", total=tuner.steps(n))
        report = tuner.tune(items, progress=lambda k: progress.advance(task, k))
    if args.chart is not None:
        write_chart(report, args.chart)
    if args.json:
        data = report.to_dict()
        # As the demo's paths: base64 under "chart_bytes" for a name that is not UTF-8.
        data |= {"chart": None} if args.chart is None else described_path("chart", args.chart)
        _write(orjson.dumps(data) + b"\n")
        return EXIT_OK
    _print_tune(report, args.chart)
    return EXIT_OK


def _print_tune(report: TuneReport, chart: str | None) -> None:
    out = _StdoutConsole()
    scope = "all items" if report.sample_complete else "a sample: the first items"
    out.print(f"Measured {report.items:,} items ({scope}).")
    sizes = Table(title="encoded sizes (bytes)")
    for col in ("", "count", "p50", "p90", "p99", "max"):
        sizes.add_column(col, justify="right")
    for name, s in (("items", report.item_bytes), ("string fields", report.field_bytes)):
        sizes.add_row(
            name,
            f"{s.count:,}",
            *(("-" if v is None else f"{v:,}") for v in (s.p50, s.p90, s.p99, s.max)),
        )
    out.print(sizes)
    table = Table(title=f"pages per budget (goal: at most {report.goal_truncated:.1%} cut)")
    for col in ("max_bytes", "items/page", "pages", "truncated", "oversized", "share", "goal"):
        table.add_column(col, justify="right")
    for row in report.budgets:
        mark = "ok" if row.meets_goal else "no"
        if row.max_bytes == report.recommended_max_bytes:
            mark = "ok ←"
        table.add_row(
            _human(row.max_bytes),
            f"{row.items_per_page:.1f}",
            f"{row.pages:,}",
            f"{row.truncated_items:,}",
            f"{row.oversized_items:,}",
            f"{row.truncated_share:.1%}",
            mark,
        )
    out.print(table)
    if not report.items:
        out.print("Nothing to recommend: the source has no items to measure.")
    elif report.recommended_max_bytes is None:
        out.print("No candidate budget meets the goal; try larger --budgets or --max-field-bytes.")
    else:
        out.print(
            f"Recommended: --max-bytes {report.recommended_max_bytes} "
            f"({_human(report.recommended_max_bytes)})"
        )
    if report.suggested_max_field_bytes is not None:
        out.print(
            f"Suggested --max-field-bytes {report.suggested_max_field_bytes} "
            "(the smallest power of two at least the p99 string size)"
        )
    if chart is not None:
        out.print(f"Chart written to {_escaped(chart)}", markup=False)


# -- entry point ------------------------------------------------------------------------

_COMMANDS: Final[dict[str, Callable[[argparse.Namespace], int]]] = {
    "dump": _cmd_dump,
    "page": _cmd_page,
    "demo": _cmd_demo,
    "tune": _cmd_tune,
}


def _data_errors() -> tuple[type[BaseException], ...]:
    """Errors that mean bad data or a failing backend: reported in one line, exit 1."""
    errors: list[type[BaseException]] = [
        JsonBudgetError,
        OSError,
        ValueError,
        ImportError,
        sqlite3.Error,
    ]
    redis_exc = sys.modules.get("redis.exceptions")
    if redis_exc is not None:
        errors.append(redis_exc.RedisError)
    return tuple(errors)


def _fail(message: str, code: int) -> int:
    """Say *message* on stderr (when it is open) and return *code*."""
    out = sys.stdout
    try:
        if out is not None:
            out.flush()  # what was written comes before the message on a terminal
        _say(f"{_PROG}: {message}\n")
    except OSError:
        # stderr (or stdout) cannot be written either: the exit code is all that is left.
        _silence_stdout()
    return code


def main(argv: Sequence[str] | None = None) -> int:
    """Run the command line with *argv* (default ``sys.argv[1:]``); return the exit code."""
    parser = _parser()
    try:
        args, extra = parser.parse_known_args(argv)
        if extra:
            # argparse says so from the top-level parser: the help to read is the
            # subcommand's, whose options these are not.
            parser.commands[args.command].error(f"unrecognized arguments: {' '.join(extra)}")
    except SystemExit as exc:  # --help, --version, or a usage error already printed
        return exc.code if isinstance(exc.code, int) else EXIT_USAGE
    if sys.stdout is None:
        # Every command writes stdout: refuse before reading input or changing a store.
        return _fail("error: stdout is closed", EXIT_ERROR)
    # Only the demo makes something to remove (its temporary directory): it alone turns
    # SIGTERM into an exception that unwinds it. Any other command keeps the signal's
    # default, which ends it at once: a Python handler runs only between bytecodes, so
    # one held `timeout` off for as long as SQLite sorted, or forever on a blocked open.
    # A handler is set only from the main thread (Python's rule), and put back after.
    main_thread = threading.current_thread() is threading.main_thread()
    cleans_up = main_thread and args.command == "demo"
    before = signal.signal(signal.SIGTERM, _terminate) if cleans_up else None
    try:
        return _COMMANDS[args.command](args)
    except _Terminated:
        return _fail("terminated", EXIT_TERMINATED)
    except _Closed as exc:
        return _fail(f"error: {exc}", EXIT_ERROR)
    except CursorError as exc:
        return _fail(f"cursor refused ({exc.reason}): {_one_line(exc)}", EXIT_CURSOR)
    except (LimitError, _Usage) as exc:
        return _fail(f"error: {_one_line(exc)}", EXIT_USAGE)
    except BrokenPipeError:
        # The reader went away (| head): nothing left to say to it.
        _silence_stdout()
        return _fail("error: output closed early (broken pipe)", EXIT_ERROR)
    except KeyboardInterrupt:
        return _fail("interrupted", EXIT_INTERRUPTED)
    except _data_errors() as exc:
        hint = _locked_by(exc, args) + _read_as_lines(exc, args)
        return _fail(f"error: {_one_line(exc)}{hint}", EXIT_ERROR)
    finally:
        if before is not None:
            signal.signal(signal.SIGTERM, before)


def _locked_by(exc: BaseException, args: argparse.Namespace) -> str:
    """What SQLite's "database is locked" is about: sqlite3 does not say which file, and a
    page opens two (the source and the cursor store)."""
    if getattr(exc, "sqlite_errorname", None) not in ("SQLITE_BUSY", "SQLITE_LOCKED"):
        return ""
    names: list[str] = []
    if args.command in ("page", "tune"):
        path = args.source
        sql = args.table is not None or args.query is not None or args.kind == "sqlite"
        if not sql and args.kind == "auto":
            try:
                sql = os.path.isfile(path) and not _not_sqlite(path)
            except OSError:
                sql = False  # unreadable now: the message names the store alone
        if sql:
            names.append(path)
    if args.command == "page":
        store = args.store or default_store_path()
        if not store.startswith(("redis://", "rediss://", "unix://")):
            names.append(store)
    if not names:
        return ""
    return f" (another process holds a write lock on {' or '.join(map(_escaped, names))})"


#: The most of a file read to tell whether one that failed as JSON Lines is one JSON
#: object; past it, the hint says what to give should it be one.
_DOCUMENT_READ: Final = 64 * 1024 * 1024


def _read_as_lines(exc: BaseException, args: argparse.Namespace) -> str:
    """What a page's error on the first line of a file `--kind auto` read as JSON Lines
    is about, where the file is one JSON object (pretty-printed, it has a line "{"):
    the error alone blamed valid JSON, and did not say the file was read a line a value.
    Read only for an error in a file's first line; else nothing."""
    if (
        args.command not in ("page", "tune")
        or not isinstance(exc, DecodeError)
        or exc.offset is None
        or args.kind != "auto"
        or args.prefix != "item"
        or args.table is not None
        or args.query is not None
        or args.source.lower().endswith(_JSONL_EXT)
    ):
        return ""
    try:
        with ExitStack() as stack, file_errors(lambda: 0):
            stream = _open_input(args.source, stack)
            if stream.first_byte() != b"{":
                return ""
            start = stream.read_bytes
            parts = [stream.readline(_READ)]
            # A first line that ends sooner than one read holds the error, or a later
            # line does: the file is JSON Lines, its error the data's.
            if parts[0].endswith(b"\n") and exc.offset >= start + len(parts[0]):
                return ""
            got = len(parts[0])
            while got <= _DOCUMENT_READ and (chunk := stream.read(_READ)):
                parts.append(chunk)
                got += len(chunk)
    except (OSError, DecodeError):
        # The file cannot be read again (gone, a gzip stream that breaks): the page's
        # own error is reported without the hint.
        return ""
    data = b"".join(parts)
    said = (
        " (the file was read as JSON Lines, as --kind auto reads one whose first value is"
        " not an array"
    )
    if len(data) > _DOCUMENT_READ:
        return f"{said}; if it is one JSON object, give --prefix KEY.item to page an array in it)"
    try:
        value = load_json(data)
    except DecodeError:
        return ""  # not one JSON document either: the error is the data's
    # The keys a prefix can name (it splits at dots, and "item" ends it) and a message
    # can show as they are.
    arrays = [
        k
        for k, v in value.items()
        if isinstance(v, list) and k.isprintable() and k and "." not in k and k != "item"
    ]
    how = (
        f"give --prefix {shlex.quote(arrays[0] + '.item')} to page its array {arrays[0]!r}"
        if arrays
        else "it holds no array for --prefix KEY.item to page; jsonbudget dump bounds it whole"
    )
    return f"{said}, but it is one JSON object: {how})"


def _silence_stdout() -> None:
    """Point stdout at /dev/null so the interpreter's final flush does not fail again."""
    try:
        fd = sys.stdout.fileno()
    except (AttributeError, OSError, ValueError):
        return
    devnull = os.open(os.devnull, os.O_WRONLY)
    try:
        os.dup2(devnull, fd)
    finally:
        os.close(devnull)

"""The ``jsonbudget`` command: a thin layer over the library.

Subcommands: ``dump`` (bound a JSON document or stream), ``page`` (one page of a file or
an SQLite query, with cursors), ``demo`` (the self-contained tour) and ``tune`` (measure
real data, recommend limits). Exit codes: 0 ok, 1 runtime or data error, 2 usage error,
3 cursor refused, 130 interrupted.
"""

from __future__ import annotations

import argparse
import getpass
import json
import os
import re
import sqlite3
import sys
import tempfile
from collections.abc import Callable, Iterator, Sequence
from contextlib import ExitStack
from itertools import islice
from typing import IO, Any, Final

import ijson
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
from .._cursors.store import CursorStore
from .._encode.encoder import Encoder
from .._extras import missing_extra
from .._limits import DEFAULT_MAX_DEPTH, MAX_LIMIT, Limits, check_int
from .._pages.builder import MCP_KEYS, Paginator
from .._sources.base import Source
from .._sources.files import JsonArrayFileSource, JsonLinesSource
from .._sources.sql import SQLiteSource
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

DEFAULT_DUMP_BYTES: Final = 64 * 1024
DEFAULT_PAGE_BYTES: Final = 64 * 1024
#: A top-level value that is not an array is loaded whole; larger ones are refused.
MAX_LOAD_BYTES: Final = 256 * 1024 * 1024
_PROG: Final = "jsonbudget"
_SQLITE_MAGIC: Final = b"SQLite format 3\x00"
_JSONL_EXT: Final = (".jsonl", ".ndjson")
_BOM: Final = b"\xef\xbb\xbf"
_WS: Final = b" \t\r\n"
_READ: Final = 64 * 1024
_SIZE = re.compile(r"\s*(\d+)\s*(b|k|kib|m|mib|g|gib)?\s*", re.IGNORECASE)
_UNITS: Final = {"": 1, "b": 1, "k": 1 << 10, "kib": 1 << 10, "m": 1 << 20, "mib": 1 << 20}
_UNITS_G: Final = {"g": 1 << 30, "gib": 1 << 30}


def parse_size(text: str) -> int:
    """``"65536"``, ``"64K"``, ``"64KiB"``, ``"1M"``... as bytes (binary multiples)."""
    m = _SIZE.fullmatch(text)
    if m is None:
        raise argparse.ArgumentTypeError(
            f"{text!r} is not a size (an integer, optionally followed by K, KiB, M, MiB, G or GiB)"
        )
    unit = (m.group(2) or "").lower()
    return int(m.group(1)) * {**_UNITS, **_UNITS_G}[unit]


def _fraction(text: str) -> float:
    try:
        value = float(text)
    except ValueError:
        raise argparse.ArgumentTypeError(f"{text!r} is not a number") from None
    if not 0 <= value <= 1:
        raise argparse.ArgumentTypeError(f"{text!r} is not in [0, 1]")
    return value


def _size_list(text: str) -> list[int]:
    return [parse_size(part) for part in text.split(",") if part.strip()]


def default_store_path() -> str:
    """``$XDG_CACHE_HOME/jsonbudget/cursors.sqlite3``, or ``~/.cache/...`` without it."""
    base = os.environ.get("XDG_CACHE_HOME") or os.path.join(os.path.expanduser("~"), ".cache")
    return os.path.join(base, "jsonbudget", "cursors.sqlite3")


def _default_principal() -> str:
    try:
        return getpass.getuser() or "anonymous"
    except (OSError, KeyError):
        # No login name (a container without a passwd entry): one shared principal.
        return "anonymous"


# -- argument parsing -------------------------------------------------------------------


def _add_limits(p: argparse.ArgumentParser, *, default_bytes: int) -> None:
    g = p.add_argument_group("limits")
    g.add_argument(
        "--max-bytes",
        type=parse_size,
        default=default_bytes,
        metavar="SIZE",
        help=f"budget for the whole output, in bytes (default {default_bytes})",
    )
    g.add_argument("--max-items", type=int, metavar="N", help="items per list (and per page)")
    g.add_argument(
        "--max-field-bytes", type=parse_size, metavar="SIZE", help="encoded bytes per string"
    )
    g.add_argument(
        "--max-depth",
        type=int,
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
        help="auto: SQLite by its header, JSON Lines by .jsonl/.ndjson, else a JSON array",
    )
    g.add_argument(
        "--prefix",
        default="item",
        help="ijson prefix of the array in a JSON file (default item: the top-level array)",
    )
    g.add_argument("--table", help="SQLite: page this table")
    g.add_argument("--query", help="SQLite: page this SELECT")
    g.add_argument(
        "--param",
        action="append",
        default=[],
        metavar="VALUE",
        help="SQLite: a ? parameter of --query, as text (repeat in order)",
    )
    g.add_argument(
        "--order-by",
        action="append",
        metavar="COLS",
        help="SQLite: unique order, 'col' or '-col', comma-separated or repeated (default id)",
    )
    g.add_argument(
        "--mode",
        choices=("keyset", "offset"),
        default="keyset",
        help="SQLite: keyset (default) or offset pagination",
    )


def _parser() -> argparse.ArgumentParser:
    from .. import __version__  # noqa: PLC0415 - the package imports this module lazily

    parser = argparse.ArgumentParser(
        prog=_PROG,
        description="JSON that provably fits a byte budget: bound, page, demo and tune.",
        epilog="exit codes: 0 ok, 1 runtime or data error, 2 usage error, 3 cursor refused, "
        "130 interrupted",
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
    p.add_argument("--principal", help="who asks; cursors are bound to it (default: OS user)")
    p.add_argument(
        "--store",
        help="cursor store: an SQLite file, or a redis:// or rediss:// URL "
        f"(default {default_store_path()})",
    )
    p.add_argument("--ttl", type=int, default=900, help="seconds an operation lives (default 900)")
    p.add_argument("--max-pages", type=int, metavar="N", help="pages one operation may serve")
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
        "--rows", type=int, default=DEFAULT_ROWS, help=f"tickets (default {DEFAULT_ROWS})"
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
        type=int,
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
    t.add_argument("--max-items", type=int, metavar="N", help="items per page (and per list)")
    t.add_argument(
        "--max-field-bytes", type=parse_size, metavar="SIZE", help="encoded bytes per string"
    )
    t.add_argument(
        "--oversized",
        choices=("truncate", "placeholder"),
        default="truncate",
        help="outcome for an item larger than a page (default truncate)",
    )
    t.add_argument("--chart", metavar="PNG", help="write a histogram with the budgets (matplotlib)")
    t.add_argument("--json", action="store_true", help="print the report as JSON")
    t.add_argument("-q", "--quiet", action="store_true", help="no progress bar")
    return parser


# -- output helpers ---------------------------------------------------------------------


def _write(data: bytes) -> None:
    """Write bytes to stdout exactly (no re-encoding), followed by nothing."""
    out = sys.stdout
    out.flush()
    buffer = getattr(out, "buffer", None)
    if buffer is not None:
        buffer.write(data)
        buffer.flush()
    else:
        out.write(data.decode("utf-8"))
        out.flush()


def _one_line(exc: BaseException) -> str:
    if isinstance(exc, OSError) and exc.strerror and exc.filename is not None:
        return f"{exc.strerror}: {exc.filename}"
    if isinstance(exc, ijson.JSONError):
        # yajl's message spans lines and draws an arrow; its first line says what broke.
        first = next((line for line in str(exc).splitlines() if line.strip()), "")
        return f"invalid JSON: {' '.join(first.split())}"
    text = " ".join(str(exc).split())
    return text or type(exc).__name__


def _progress(enabled: bool) -> Progress:
    return Progress(
        SpinnerColumn(),
        TextColumn("{task.description}"),
        BarColumn(),
        MofNCompleteColumn(),
        TimeElapsedColumn(),
        console=Console(file=sys.stderr),
        transient=True,
        disable=not enabled,
    )


def _show_progress(args: argparse.Namespace) -> bool:
    return not getattr(args, "quiet", False) and sys.stderr.isatty()


# -- dump -------------------------------------------------------------------------------


class _Prepended:
    """A binary reader that replays *head* before the rest of *stream*, counting bytes."""

    __slots__ = ("cap", "head", "read_bytes", "stream")

    def __init__(self, head: bytes, stream: IO[bytes], cap: int | None) -> None:
        self.head = head
        self.stream = stream
        self.cap = cap
        self.read_bytes = 0

    def read(self, size: int = -1) -> bytes:
        if self.head:
            chunk = self.head if size < 0 else self.head[:size]
            self.head = self.head[len(chunk) :]
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


def _reject_constant(name: str) -> Any:
    raise ValueError(f"{name} is not valid JSON")


def _jsonl_items(stream: IO[bytes]) -> Iterator[Any]:
    """One value per non-blank line, parsed only when the encoder asks for it."""
    offset = 0
    for lineno, line in enumerate(stream, 1):
        start = offset
        offset += len(line)
        if not line.strip():
            continue
        try:
            # stdlib json keeps integers beyond 64 bits exact (orjson would make floats).
            yield json.loads(line.decode("utf-8"), parse_constant=_reject_constant)
        except UnicodeDecodeError as exc:
            raise DecodeError(
                f"line {lineno} is not valid UTF-8", offset=start + exc.start
            ) from None
        except ValueError as exc:
            raise DecodeError(f"line {lineno} is not valid JSON: {exc}", offset=start) from None


def _json_value(stream: IO[bytes]) -> Any:
    """A top-level array as a lazy iterator of its items; anything else loaded whole."""
    head = stream.read(_READ)
    if head.startswith(_BOM):
        head = head[len(_BOM) :]
    stripped = head.lstrip(_WS)
    while not stripped:
        more = stream.read(_READ)
        if not more:
            raise DecodeError("the input is empty", offset=0)
        stripped = more.lstrip(_WS)
    if stripped[:1] == b"[":
        return ijson.items(_Prepended(stripped, stream, None), "item", use_float=True)
    values = ijson.items(_Prepended(stripped, stream, MAX_LOAD_BYTES), "", use_float=True)
    return next(iter(values))


def _open_input(name: str, stack: ExitStack) -> IO[bytes]:
    if name == "-":
        return sys.stdin.buffer
    return stack.enter_context(open(name, "rb"))


def _cmd_dump(args: argparse.Namespace) -> int:
    limits = Limits(
        args.max_bytes,
        max_items=args.max_items,
        max_field_bytes=args.max_field_bytes,
        max_depth=args.max_depth,
    )
    encoder = Encoder(limits, strategy=args.strategy, markers=args.markers)
    jsonl = args.jsonl or args.file.lower().endswith(_JSONL_EXT)
    with ExitStack() as stack:
        stream = _open_input(args.file, stack)
        value = _jsonl_items(stream) if jsonl else _json_value(stream)
        result = encoder.encode(value)
    _write(result.data + b"\n")
    if args.report:
        if args.json:
            report = {
                "bytes": len(result.data),
                "complete": result.complete,
                "truncations": [t.to_dict() for t in result.truncations],
            }
            sys.stderr.write(orjson.dumps(report).decode() + "\n")
        else:
            cuts = len(result.truncations)
            sys.stderr.write(
                f"{_PROG}: {len(result.data)} bytes, "
                f"{'complete' if result.complete else f'{cuts} cut' + ('' if cuts == 1 else 's')}\n"
            )
            for t in result.truncations:
                omitted = "more" if t.omitted is None else str(t.omitted)
                sys.stderr.write(f"  {t.path or '/'}\t{t.kind}\t{omitted} {t.unit}\n")
    return EXIT_OK


# -- sources (page, tune) ---------------------------------------------------------------


def _kind(args: argparse.Namespace) -> str:
    kind: str = args.kind
    path: str = args.source
    if kind != "auto":
        return kind
    if args.table is not None or args.query is not None:
        return "sqlite"
    with open(path, "rb") as f:
        if f.read(len(_SQLITE_MAGIC)) == _SQLITE_MAGIC:
            return "sqlite"
    return "jsonl" if path.lower().endswith(_JSONL_EXT) else "json"


class _Usage(Exception):
    """A combination of options that cannot work; exit code 2."""


def _order_by(args: argparse.Namespace) -> list[str]:
    if not args.order_by:
        return ["id"]
    return [c.strip() for spec in args.order_by for c in spec.split(",") if c.strip()]


def _source(args: argparse.Namespace) -> tuple[Source[Any], dict[str, Any]]:
    """The source named by the options and the query a cursor is bound to."""
    path = os.path.abspath(args.source)
    if not os.path.exists(path):
        raise FileNotFoundError(2, "no such file", args.source)
    kind = _kind(args)
    sql_given = args.table is not None or args.query is not None or args.param
    if kind != "sqlite" and (sql_given or args.order_by):
        raise _Usage("--table, --query, --param and --order-by apply to SQLite sources only")
    query: dict[str, Any] = {"kind": kind, "path": path}
    if kind == "sqlite":
        if (args.table is None) == (args.query is None):
            raise _Usage("an SQLite source needs exactly one of --table or --query")
        if args.table is not None and args.param:
            raise _Usage("--param applies to --query only")
        order = _order_by(args)
        source: Source[Any] = SQLiteSource(
            path,
            table=args.table,
            query=args.query,
            params=list(args.param),
            order_by=order,
            mode=args.mode,
        )
        query |= {
            "table": args.table,
            "query": args.query,
            "params": list(args.param),
            "order_by": order,
            "mode": args.mode,
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
    path = spec or default_store_path()
    if spec is None:
        # The default store holds only cursors, but they are still the user's: keep it private.
        os.makedirs(os.path.dirname(path), mode=0o700, exist_ok=True)
    return stack.enter_context(SQLiteCursorStore(path, ttl=ttl))


def _cmd_page(args: argparse.Namespace) -> int:
    limits = Limits(
        args.max_bytes,
        max_items=args.max_items,
        max_field_bytes=args.max_field_bytes,
        max_depth=args.max_depth,
        max_pages=args.max_pages,
    )
    source, query = _source(args)
    principal = args.principal if args.principal is not None else _default_principal()
    scope = Scope(principal, query)
    with ExitStack() as stack:
        store = _store(args.store, args.ttl, stack)
        paginator = Paginator(
            limits,
            store=store,
            oversized=args.oversized,
            keys=MCP_KEYS if args.mcp_keys else None,
            strategy=args.strategy,
            markers=args.markers,
        )
        page = paginator.page(source, scope=scope, cursor=args.cursor)
    _write(page.to_json() + b"\n")
    return EXIT_OK


# -- demo -------------------------------------------------------------------------------


def _cmd_demo(args: argparse.Namespace) -> int:
    demo = Demo(rows=args.rows, max_bytes=args.max_bytes, huge_bytes=args.huge_bytes)
    with ExitStack() as stack:
        if args.dir is not None:
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
    out = Console(file=sys.stdout, highlight=False, soft_wrap=True)
    for line in report_lines(report, args.huge_bytes):
        out.print(line, markup=False)
    if args.dir is not None:
        out.print(
            f"Kept: {report.database} — try: jsonbudget page {report.database} --table tickets",
            markup=False,
        )
    return EXIT_OK if report.every_row_once_in_order else EXIT_ERROR


# -- tune -------------------------------------------------------------------------------


def _human(n: int | float | None) -> str:
    if n is None:
        return "-"
    n = int(n)
    if n >= 1 << 20 and n % (1 << 20) == 0:
        return f"{n >> 20} MiB"
    if n >= 1024 and n % 1024 == 0:
        return f"{n >> 10} KiB"
    return f"{n:,} B"


def _cmd_tune(args: argparse.Namespace) -> int:
    tuner = Tuner(
        budgets=args.budgets,
        goal_truncated=args.goal_truncated,
        sample=check_int("sample", args.sample, minimum=1, maximum=MAX_LIMIT),
        max_items=args.max_items,
        max_field_bytes=args.max_field_bytes,
        oversized=args.oversized,
    )
    if args.chart is not None:
        import importlib.util  # noqa: PLC0415

        if importlib.util.find_spec("matplotlib") is None:
            raise missing_extra("cli", "matplotlib", "--chart")
    source, _query = _source(args)
    with _progress(_show_progress(args)) as progress:
        reading = progress.add_task("reading items", total=tuner.sample)
        items: list[Any] = []
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
        report = tuner.measure(items, progress=lambda k: progress.advance(task, k))
    if args.chart is not None:
        write_chart(report, args.chart)
    if args.json:
        data = report.to_dict()
        data["chart"] = args.chart
        _write(orjson.dumps(data) + b"\n")
        return EXIT_OK
    _print_tune(report, args.chart)
    return EXIT_OK


def _print_tune(report: TuneReport, chart: str | None) -> None:
    out = Console(file=sys.stdout, highlight=False, soft_wrap=True)
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
    if report.recommended_max_bytes is None:
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
        out.print(f"Chart written to {chart}", markup=False)


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
        ijson.JSONError,
    ]
    redis_exc = sys.modules.get("redis.exceptions")
    if redis_exc is not None:
        errors.append(redis_exc.RedisError)
    return tuple(errors)


def _fail(message: str, code: int) -> int:
    sys.stdout.flush()
    sys.stderr.write(f"{_PROG}: {message}\n")
    sys.stderr.flush()
    return code


def main(argv: Sequence[str] | None = None) -> int:
    """Run the command line with *argv* (default ``sys.argv[1:]``); return the exit code."""
    parser = _parser()
    try:
        args = parser.parse_args(argv)
    except SystemExit as exc:  # --help, --version, or a usage error already printed
        return exc.code if isinstance(exc.code, int) else EXIT_USAGE
    try:
        return _COMMANDS[args.command](args)
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
        return _fail(f"error: {_one_line(exc)}", EXIT_ERROR)


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

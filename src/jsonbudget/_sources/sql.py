"""Database sources through DB-API: SQLite (stdlib) and PostgreSQL (psycopg 3).

Rows come out as dicts (column name to value). The default mode is keyset pagination:
the position is the last row's values of the order columns, and the next page asks for
rows strictly after them. The order is made total before the first page: a table's
primary key (SQLite's ``rowid`` when it has none) is appended when the given columns are
not known to be unique, and a query whose order cannot be proven unique is refused
unless the caller declares it unique. ``mode="offset"`` is the fallback for results
without a unique order. Long cells (text, binary, and on PostgreSQL any type whose
values are not bounded by the type, through its text) are cut in the query itself
(`Clipped`), so a 1 GB cell costs about a page, and the rows a page fetched but did not
serve are kept for the next one while the database is unchanged (`_Ahead`), so no row
is fetched twice. Identifiers are quoted; values only ever travel as query parameters.
"""

from __future__ import annotations

import base64
import codecs
import contextlib
import decimal
import functools
import hashlib
import math
import os
import re
import secrets
import sqlite3
import stat
import threading
import weakref
from collections import OrderedDict
from collections.abc import Callable, Generator, Hashable, Iterable, Iterator, Mapping, Sequence
from types import TracebackType
from typing import TYPE_CHECKING, Any, Final, Literal, NamedTuple, cast

import orjson

from .._extras import missing_extra
from .._limits import check_int, check_mode
from .._shared import Closing, dumps
from ..errors import DecodeError, EncodeError, InvalidCursor, LimitError
from .base import (
    MAX_OFFSET,
    Clipped,
    Filler,
    JSONValue,
    Position,
    Source,
    check_limit_hint,
    described_path,
    offset_position,
    page_budget,
    page_reader,
    read_bound,
)
from .jsonread import load_json

if TYPE_CHECKING:
    from typing import Self

    import psycopg

__all__ = [
    "DEFAULT_BATCH_SIZE",
    "FIRST_FETCH",
    "MIN_CELL_BYTES",
    "PostgresSource",
    "SQLiteSource",
]

#: The most rows fetched from the database per round trip.
DEFAULT_BATCH_SIZE: Final = 256
#: The smallest ``max_cell_bytes``: every number's text is shorter, so no number is ever
#: cut (SQLite sizes any column's values).
MIN_CELL_BYTES: Final = 64
#: The longest cut a query asks for: no value is longer in either database (SQLite's
#: default limit is 10**9 bytes, PostgreSQL's 1 GB), and PostgreSQL's ``left()`` takes
#: an int4.
_MAX_CUT: Final = 2**31 - 1
#: The first fetch of an unbounded read; each next one doubles, up to ``batch_size``, so
#: the rows fetched but never taken are at most as many as those taken, plus this.
FIRST_FETCH: Final = 16

Row = dict[str, Any]
#: A column to cut: name, SQL of the cut value, of the full length (NULL when whole; None:
#: the cut value carries it, see `_untag`), of the head when it is not the cut value, and
#: the length's unit (None: by the value).
_Cut = tuple[str, str, str | None, str | None, Literal["chars", "bytes"] | None]
#: Where a page's rows fetched ahead are kept: its cut, its reader, the position it ends at.
_AheadKey = tuple[int, Hashable, bytes]
#: Digits of the length a tagged cut value starts with (`_untag`).
_TAG_DIGITS: Final = 20
Params = Sequence[Any] | Mapping[str, Any]
_PARAM_PREFIX: Final = "_jb_"
_ROWID: Final = "_jb_rowid"
# The rowid's name in a query that reads rows one by one (`SQLiteSource._blob_rows`).
_BLOB_ROWID: Final = "_jb_blob_rowid"
#: The order of `order_by=None` where the result has an `id` column.
_DEFAULT_ORDER: Final = ("id",)
#: Runs of fetched, unserved rows a source keeps for the pages after (one per cursor
#: being followed), and the most text and binary data they may hold together.
AHEAD_ROWS: Final = 16
AHEAD_BYTES: Final = 16 << 20


def quote_ident(name: object, what: str = "identifier") -> str:
    """Quote an SQL identifier (doubling embedded quotes); refuse NUL, which no name holds.

    An empty name is quoted too (``""``): SQLite takes it for a column, a table or an
    attached database, and a result's column names are data, which the source pages
    as they are. The names a caller gives are checked where they are given
    (`_SQLSource.__init__`, `_parse_order`), naming their parameter."""
    if not isinstance(name, str) or "\x00" in name:
        raise LimitError(what, name, "must be a str without NUL characters")
    return '"' + name.replace('"', '""') + '"'


def _text(value: object) -> object:
    """*value* as the exact ``str`` it holds if it is a ``str`` (a StrEnum member, a
    ``class Name(str)``), read by str's own method, as `Scope` reads one: the database
    binds and names by that text, and a subclass's own startswith, replace or __str__
    may lie; anything else as it is."""
    return str.__str__(value) if isinstance(value, str) else value


def _parse_order(order_by: object) -> tuple[tuple[str, bool], ...]:
    if isinstance(order_by, str) or not isinstance(order_by, Sequence):
        raise LimitError("order_by", order_by, "must be a sequence of column names")
    keys: list[tuple[str, bool]] = []
    for given in order_by:
        spec = _text(given)
        if not isinstance(spec, str) or spec in ("", "-"):
            raise LimitError("order_by", order_by, "each entry is 'column' or '-column'")
        desc = spec.startswith("-")
        keys.append((spec[1:] if desc else spec, desc))
    if len({name for name, _ in keys}) != len(keys):
        raise LimitError("order_by", order_by, "names a column twice")
    return tuple(keys)


def json_safe(value: object, *, what: str) -> JSONValue:
    """A JSON value standing for a database value (a key or a parameter)."""
    if value is None or type(value) in (bool, int, str):
        return value  # type: ignore[return-value]
    # A subclass (a StrEnum or IntEnum member, NumPy's float64) as its base type's value,
    # read by that type's own method, as both databases bind it and as `Scope` reads it:
    # its own __str__ may lie, and two values it spelled alike were one query.
    if isinstance(value, str):
        return str.__str__(value)
    if isinstance(value, int):  # bool is exact (above): no subclass of it exists
        return int.__int__(value)
    if isinstance(value, float):
        value = float.__float__(value)
        if not math.isfinite(value):
            raise EncodeError(f"{what} is {value!r}, which JSON cannot carry", path=None)
        return value
    if isinstance(value, decimal.Decimal):
        return {"text": decimal.Decimal.__str__(value)}
    if isinstance(value, bytes | bytearray | memoryview):
        return {"bytes": base64.b64encode(value).decode("ascii")}
    if type(value).__module__ == "psycopg.types.json":
        # Json / Jsonb: their str is reprlib's abbreviation, which two long documents of
        # the same length share; the document itself tells them apart.
        return {type(value).__name__.lower(): repr(value.obj)}  # type: ignore[attr-defined]
    # Decimal, datetime, date, UUID...: PostgreSQL casts their text back (psycopg sends
    # str as "unknown"); SQLite stores them as text already.
    return {"text": str(value)}


def _key_value(value: JSONValue) -> object:
    if value is None or type(value) in (bool, int, float, str):
        return value
    if isinstance(value, dict) and len(value) == 1:
        ((tag, text),) = value.items()
        if isinstance(text, str):
            if tag == "text":
                return text
            if tag == "bytes":
                try:
                    return base64.b64decode(text, validate=True)
                except ValueError:
                    pass
    raise InvalidCursor("the position is not a valid keyset position")


#: A keyset position longer than this (a long text key) is not stored: the page ends at
#: an offset from the last short key instead (`_skip_from`).
KEY_POSITION_BYTES: Final = 4096
#: How far from its offset the next page looks for the row a long position ended on,
#: each way (`_SQLSource._resume`): as many rows inserted or deleted between the short
#: key and that row are followed; more are refused.
RESUME_ROWS: Final = 32


def _short(pos: list[JSONValue]) -> bool:
    """Whether *pos* encodes to at most `KEY_POSITION_BYTES` (cheaply, for short keys)."""
    chars = 0
    for v in pos:
        if type(v) is str:
            chars += len(v)
        elif v is not None and type(v) is not int:
            chars = KEY_POSITION_BYTES  # a tagged or float key: measured exactly below
    # A character encodes to at most six bytes (an escape), a short key far fewer.
    return 6 * chars + 32 * len(pos) <= KEY_POSITION_BYTES or (
        len(dumps(pos)) <= KEY_POSITION_BYTES
    )


def _skip_from(start: Position | None, served: int, last: list[JSONValue]) -> Position:
    """``{"after": ..., "skip": n, "last": digest}``: *served* rows past *start*, the last
    keyed *last*, a short position (every position a source writes is short, or this
    form)."""
    if isinstance(start, _Resumed):
        start = start.origin  # counted from the short key the page's own start was
    after, skip = _split(start)
    return {"after": after, "skip": skip + served, "last": _digest(last)}


def _digest(key: list[JSONValue]) -> str:
    """A short digest of a row's whole key: the order is total, so it names one row."""
    return hashlib.blake2b(dumps(key), digest_size=16).hexdigest()


class _Resumed(list[JSONValue]):
    """The whole key of the row a long position ended on, found again (`_SQLSource._resume`):
    pages are read after it, and count their offsets from ``origin``, that position."""

    __slots__ = ("origin",)

    def __init__(self, key: list[JSONValue], origin: Position) -> None:
        super().__init__(key)
        self.origin = origin


def _split(position: Position | None) -> tuple[list[JSONValue] | None, int]:
    """A keyset position as (the key the rows follow, or None; how many to skip)."""
    if position is None or isinstance(position, list):
        return position, 0
    if (
        isinstance(position, dict)
        # Without "last": a query `_SQLSource._resume` runs, never a cursor's position.
        and position.keys() - {"last"} == {"after", "skip"}
        and (position["after"] is None or isinstance(position["after"], list))
        and type(position["skip"]) is int
        and 0 < position["skip"] <= MAX_OFFSET
    ):
        return position["after"], position["skip"]
    raise InvalidCursor("the position is not a valid keyset position")


def _keys_of(plan: _Plan, position: Position) -> list[JSONValue]:
    """The keys of keyset *position* under *plan*: without the digest of the row a
    position after a rowid also holds (`_SQLSource._position_of`), which only
    `SQLiteSource._check_row` reads (the positions a page reads on after are its own).
    A position whose rowid does not decide (`_rowid_decides`) may hold one or not: those
    written before positions held none, and those written while every position after a
    rowid held one, are both its keys."""
    if not isinstance(position, list):
        raise InvalidCursor("the position is not a valid keyset position")
    n = len(plan.keys)
    if plan.hidden and len(position) == n + 1 and type(position[n]) is str:
        return position[:n]
    if len(position) != n:
        # A position minted under other keys: the table, or the keys it is ordered by,
        # changed since (a rebuilt table, a dropped index, a table shadowing it).
        raise InvalidCursor(
            f"the position does not fit the source's keys ({len(position)} where it "
            f"orders by {n}): the table or its keys changed since the cursor was minted, "
            "or the position is not this source's; start the listing again"
        )
    return position


def _rowid_decides(plan: _Plan, keys: list[JSONValue]) -> bool:
    """Whether the rowid *plan* appended decides where rows after the position keyed
    *keys* start: not where a declared key that allows NULL (`_TableKeys.unique_non_null`)
    holds none in *keys*, as `_SQLSource._predicate` reads it: that key alone names the
    row, and a renumbered rowid moves no row before or after it."""
    if not plan.hidden:
        return False
    return not any(all(keys[i] is not None for i in indexes) for _, indexes in plan.distinct_at)


def _row_print(values: Iterable[object], utf8: bool) -> str:
    """A short digest of a row's *values* as a page read them, each cell as the least cut
    (`MIN_CELL_BYTES`) reads it, so that pages cut at any bound, or whole, agree: a cell
    past it as its kind, full size and first bytes. *utf8*: the database's encoding is
    UTF-8 (sizes of text in bytes); else UTF-16 (in characters up to a NUL, as SQLite's
    ``length()`` counts them)."""
    n = MIN_CELL_BYTES
    parts: list[object] = []
    for value in values:
        if value is None or type(value) in (int, float):
            parts.append(value)
            continue
        if isinstance(value, Clipped):
            head, length = value.head, value.length
        elif type(value) is bytes:
            head, length = value, len(value)
        elif type(value) is str:
            head = value
            # SQLite's length() of a UTF-16 text stops at a NUL, so its cut does too.
            length = len(value.encode("utf-8", "surrogatepass")) if utf8 else value.find("\0")
            if length < 0:
                length = len(value)
        else:
            # A value a converter of the connection's made (detect_types): its repr where
            # its type has one (object's holds the address, another at each read).
            own = type(value).__repr__ is not object.__repr__
            parts.append(("o", repr(value) if own else type(value).__qualname__))
            continue
        if not isinstance(value, Clipped) and length <= n:
            parts.append(value)  # whole at every cut
        elif isinstance(head, bytes):
            parts.append(("B", length, head[:n]))
        elif utf8:
            parts.append(("T", length, _utf8_prefix(head.encode("utf-8", "surrogatepass")[:n])))
        else:
            parts.append(("T", length, head[:n]))
    data = repr(parts).encode("utf-8", "surrogatepass")
    return hashlib.blake2b(data, digest_size=8).hexdigest()


class _TableKeys(NamedTuple):
    """What a table's catalog says makes an order total (read once, by `_table_keys`)."""

    unique: list[list[str]]  # column sets the database keeps unique, each NOT NULL
    append: list[str]  # the key to append when none is covered ([hidden]: the rowid)
    notnull: set[str]  # the NOT NULL columns
    # Column sets kept unique among rows with no NULL in them (a UNIQUE on nullable
    # columns, a rowid table's non-INTEGER PRIMARY KEY): they need the tiebreaker only
    # where a position holds a NULL in them.
    unique_non_null: list[list[str]]
    # The name the rowid is selected under when it is appended (`_ROWID`, or a longer
    # name where a column already has that one), else "".
    hidden: str = ""


def rows_to_dicts_py(  # noqa: PLR0917  # positional, as the compiled twin it stands in for
    columns: tuple[str, ...],
    rows: list[Any],
    start: int,
    flags_at: int,
    n_flags: int,
    long_at: tuple[int, ...] = (),
    longest: int = 0,
) -> tuple[list[dict[str, Any]], int]:
    """The rows from *start* as dicts, up to the first that is not a tuple, has one of
    its *n_flags* columns from *flags_at* set (a cut cell's length), or holds bytes
    longer than *longest* at an index of *long_at* (a tagged cut cell, `_untag`); and
    where it stopped.

    The pure-Python twin of the compiled ``_numbers.rows_to_dicts``.
    """
    out: list[dict[str, Any]] = []
    end = flags_at + n_flags
    unset = (None,) * n_flags
    for i in range(start, len(rows)):
        row = rows[i]
        if type(row) is not tuple or len(row) < end or row[flags_at:end] != unset:
            return out, i
        if any(isinstance(v := row[j], bytes) and len(v) > longest for j in long_at):
            return out, i
        out.append(dict(zip(columns, row, strict=False)))
    return out, max(start, len(rows))


def first_over_py(rows: list[Any], start: int, long_at: tuple[int, ...], longest: int) -> int:
    """The first row from *start* that is not a tuple long enough for *long_at*, or holds
    at an index of it bytes, or a str in UTF-8, longer than *longest*; len(rows) if none.

    The pure-Python twin of the compiled ``_numbers.first_over``.
    """
    widest = max(long_at, default=-1)
    for i in range(start, len(rows)):
        row = rows[i]
        if type(row) is not tuple or len(row) <= widest:
            return i
        for j in long_at:
            v = row[j]
            if isinstance(v, bytes) and len(v) > longest:
                return i
            if isinstance(v, str) and len(v.encode("utf-8", "surrogatepass")) > longest:
                return i
    return len(rows)


def text_bytes_py(rows: list[Any], start: int) -> int:
    """The characters of the str cells and the bytes of the bytes cells of the tuples in
    *rows* from *start*.

    The pure-Python twin of the compiled ``_numbers.text_bytes``.
    """
    return sum(
        len(v)
        for row in rows[start:]
        if type(row) is tuple
        for v in row
        if isinstance(v, str | bytes)
    )


def _unslip(plan: _Plan, rows: list[Any]) -> None:
    """Make each cell of *rows*, read bare, that passed SQLite's length limit the
    `Clipped` the cut select gives (`SQLiteSource._unslipped`)."""
    long_at, longest = plan.long_at, plan.longest
    i = first_over(rows, 0, long_at, longest)
    while i < len(rows):
        rows[i] = _slipped(rows[i], long_at, longest)
        i = first_over(rows, i + 1, long_at, longest)


def _slipped(row: Any, long_at: tuple[int, ...], longest: int) -> Any:
    """*row*, read bare, with each text or blob longer than *longest* at an index of
    *long_at* made the `Clipped` the cut select gives for it (`_untag`)."""
    if type(row) is not tuple:
        return row
    cells = list(row)
    for j in long_at:
        v = cells[j]
        data = v.encode("utf-8") if isinstance(v, str) else v
        if isinstance(data, bytes) and len(data) > longest:
            head = _utf8_prefix(data[:longest]) if isinstance(v, str) else data[:longest]
            cells[j] = Clipped(head, len(data), "bytes")
    return tuple(cells)


def _head(select: str) -> str:
    """How a page's query over the select list *select* starts (`_SQLSource._sql`)."""
    return f"SELECT {select} FROM ("


def _untag(value: bytes) -> Clipped:
    """A tagged cut cell: ``T`` (text) or ``B`` (blob), the value's size in bytes in
    `_TAG_DIGITS` digits, then its first bytes, as many as the bound (so a tagged value
    is always longer than the bound, and an uncut one never is).

    A text's bytes end where the bound fell, maybe inside a character: that character
    is left out (counted in the size); bytes that are not UTF-8 read as U+FFFD
    (`_text_head`).
    """
    head = value[1 + _TAG_DIGITS :]
    size = int(value[1 : 1 + _TAG_DIGITS])
    if value[:1] == b"T":
        return Clipped(_text_head(head), size, "bytes")
    return Clipped(head, size, "bytes")


def _utf8_prefix(data: bytes) -> str:
    # The incremental decoder keeps back an incomplete character at the end.
    return codecs.getincrementaldecoder("utf-8")("replace").decode(data, final=False)


def _text_head(data: bytes) -> str:
    """The head of a text cut to its first bytes *data*: `_utf8_prefix`, no longer in
    UTF-8 than *data*. A byte that is not UTF-8 reads as U+FFFD, three bytes: 64 such
    bytes made a 192-byte head, longer than the value's size (an 80-byte text:
    ``Clipped`` refused it, and the page raised) and than the bound the row was read
    under; the characters past *data*'s size are left out, counted in the size."""
    head = _utf8_prefix(data)
    encoded = head.encode("utf-8")  # replace makes no surrogate
    if len(encoded) > len(data):
        head = _utf8_prefix(encoded[: len(data)])
    return head


rows_to_dicts: Callable[..., tuple[list[dict[str, Any]], int]]
first_over: Callable[[list[Any], int, tuple[int, ...], int], int]
text_bytes: Callable[[list[Any], int], int]
try:
    from ._numbers import first_over, rows_to_dicts, text_bytes
except ImportError:  # pragma: no cover - built without a C compiler
    rows_to_dicts, first_over, text_bytes = rows_to_dicts_py, first_over_py, text_bytes_py


class _Plan:
    """What the first open learns about the result: columns, the total order, the cuts.

    ``keys`` is the order made total: (column, descending, known NOT NULL). ``select`` is
    the select list of the wrapped query: the result's columns (long text and binary
    cells cut), then the hidden key column if any, then one length per cut column whose
    cut value does not carry its own (``long_at``: see `_untag`), then the exact text of
    each key the driver may read as inexact text (``key_text``). ``bare`` is the same
    list without the cuts, where its rows have the same shape (every cut value carries
    its length), else "": rows read with it under a length limit of ``longest`` are
    the rows ``select`` reads (see `SQLiteSource._fill`).
    ``distinct_at`` is, per unique column set the order covers, ``(k, indexes)``: a
    position whose keys at *indexes* are not NULL is the only row with its first *k*
    keys, so rows after it need no comparison of the keys after those.
    """

    __slots__ = (
        "bare",
        "columns",
        "cut_index",
        "distinct_at",
        "heads",
        "hidden",
        "key_index",
        "key_text",
        "keys",
        "long_at",
        "longest",
        "row_bound",
        "row_order",
        "select",
        "text_keys",
        "units",
    )

    def __init__(
        self,
        columns: list[str],
        keys: list[tuple[str, bool, bool]],
        *,
        select: str,
        bare: str = "",
        cut_index: list[int],
        heads: list[int | None],
        units: list[Literal["chars", "bytes"] | None],
        hidden: str,
        text_keys: frozenset[str] = frozenset(),
        key_text_at: Mapping[str, int] | None = None,
        distinct_at: list[tuple[int, list[int]]] | None = None,
        long_at: tuple[int, ...] = (),
        longest: int = 0,
        row_order: bool = False,
    ) -> None:
        self.columns = columns
        self.keys = keys
        self.select = select
        self.bare = bare
        self.cut_index = cut_index  # the result column each length belongs to
        self.heads = heads  # per length: where its head is, when not in the column itself
        self.units = units  # per length: its unit (None: chars for text, bytes for blobs)
        self.hidden = hidden  # the appended rowid's result name, or ""
        names = [*columns, hidden] if hidden else columns
        self.key_index = [names.index(name) for name, _, _ in keys]
        # (k, j): the k-th key, where the driver read it as text, is the text at row
        # index j instead (`_SQLSource._row_keys`).
        key_text_at = key_text_at or {}
        self.key_text = [
            (k, key_text_at[name]) for k, (name, _, _) in enumerate(keys) if name in key_text_at
        ]
        # Row indexes of keys kept as their text, which the database casts back exactly.
        self.text_keys = frozenset(names.index(name) for name in text_keys)
        self.distinct_at = distinct_at or []
        # Result columns whose cut values carry their length (`_untag`): bytes there
        # longer than *longest* are one; no uncut text or blob is that long.
        self.long_at = long_at
        self.longest = longest
        # Offset mode, an order not known to be total and no key to append: ties are
        # ordered by the whole row (`_row_order`), so rows only alike in every column tie.
        self.row_order = row_order
        # The most bytes of text and binary data a row can bring at the cut (set with
        # the cut, `_plan_for`; 0: not bounded).
        self.row_bound = 0


class _Ahead:
    """Rows a page fetched but did not serve, kept so that no row is fetched twice.

    A page's last fetch ends with the first row that did not fit (the look-ahead) and
    whatever else that fetch returned; the next page starts with them. Those raw rows
    are kept by the position they follow, with a *token* read before the page's first
    fetch that changes whenever the database does (SQLite: its change counters;
    PostgreSQL: the transaction snapshot). The next page reads its own token first and
    uses the rows only if the two are equal: then nothing was written in between, and
    the rows are what a new fetch would return. The least recently used go first beyond
    `AHEAD_ROWS` runs or `AHEAD_BYTES` of their text and binary values, and a run is cut
    to its first rows that fit in `AHEAD_BYTES`.
    """

    __slots__ = ("_lock", "_runs", "_size")

    def __init__(self) -> None:
        self._runs: OrderedDict[Hashable, tuple[list[tuple[Any, ...]], Hashable, int]] = (
            OrderedDict()
        )
        self._size = 0
        self._lock = threading.Lock()

    def get(self, key: Hashable) -> tuple[list[tuple[Any, ...]], Hashable, int]:
        """The run kept after *key*, its token and the bytes of its text and binary
        values (no rows, None and 0: nothing kept)."""
        with self._lock:
            entry = self._runs.get(key)
            if entry is None:
                return [], None, 0
            self._runs.move_to_end(key)  # kept for another page starting here: a retry
            return entry

    def put(self, key: Hashable, rows: list[tuple[Any, ...]], token: Hashable) -> None:
        size = 0
        for n, row in enumerate(rows):
            size_row = sum(len(v) for v in row if isinstance(v, str | bytes | memoryview))
            if size + size_row > AHEAD_BYTES:
                rows = rows[:n]
                break
            size += size_row
        if not rows:
            return
        with self._lock:
            old = self._runs.pop(key, None)
            if old is not None:
                self._size -= old[2]
            self._runs[key] = (rows, token, size)
            self._size += size
            while len(self._runs) > AHEAD_ROWS or self._size > AHEAD_BYTES:
                self._size -= self._runs.popitem(last=False)[1][2]

    def clear(self) -> None:
        with self._lock:
            self._runs.clear()
            self._size = 0


class _SQLSource(Source[Row]):
    """What SQLite and PostgreSQL share: the order, the query plan and the row loop."""

    __slots__ = (
        "_ahead",
        "_batch",
        "_fill_start",
        "_inner",
        "_keys",
        "_max_cell",
        "_mode",
        "_named",
        "_params",
        "_plans",
        "_query",
        "_rows_hint",
        "_table",
        "_unique",
    )
    # Set by each subclass: the connection it opened itself, and the process that did.
    _own: Any
    _pid: int

    def close(self) -> None:
        """Close the connection this source opened; a passed connection or pool stays open."""
        own, self._own = self._own, None
        self._ahead.clear()
        if own is not None and self._pid == os.getpid():
            own.close()

    def __enter__(self) -> Self:
        return self

    def __exit__(
        self,
        exc_type: type[BaseException] | None,
        exc: BaseException | None,
        tb: TracebackType | None,
    ) -> None:
        self.close()

    _kind: str = "sql"

    def __init__(
        self,
        *,
        table: str | Sequence[str] | None,
        query: str | None,
        params: Params,
        order_by: Sequence[str] | None,
        mode: Literal["keyset", "offset"],
        unique: bool,
        batch_size: int,
        max_cell_bytes: int | None,
    ) -> None:
        if (table is None) == (query is None):
            raise TypeError("give exactly one of table= or query=")
        query = cast("str | None", _text(query))
        if query is not None:
            if not isinstance(query, str) or not query.strip():
                raise LimitError("query", query, "must be a non-empty SQL string")
            self._inner = query.rstrip().rstrip(";")
            self._table: tuple[str, ...] | None = None
        else:
            parts: tuple[Any, ...] = (
                (_text(table),) if isinstance(table, str) else tuple(map(_text, table or ()))
            )
            if not parts or len(parts) > 2:  # noqa: PLR2004 - a name or (schema, name)
                raise LimitError("table", table, "must be a name or (schema, name)")
            for p in parts:
                # Though SQLite takes a table named "", an empty name here is a mistake
                # (an unset setting) far more often than that table.
                if not isinstance(p, str) or not p:
                    raise LimitError("table", table, "each name must be a non-empty str")
                quote_ident(p, "table")  # refused here, named as the table
            self._inner = "SELECT * FROM " + ".".join(self._ident(p) for p in parts)
            self._table = parts
        self._query = query
        mode = cast("Literal['keyset', 'offset']", _text(mode))
        check_mode("mode", mode, ("keyset", "offset"))
        self._mode = mode
        # None: `id` where the result has that column, else the table's own key.
        self._default_order = order_by is None
        self._keys = _parse_order(_DEFAULT_ORDER if order_by is None else order_by)
        if mode == "keyset" and not self._keys:
            raise LimitError("order_by", order_by, "keyset mode needs at least one column")
        for name, _ in self._keys:
            quote_ident(name, "order_by")
        if type(unique) is not bool:
            raise LimitError("unique", unique, "must be a bool")
        self._unique = unique
        if isinstance(params, Mapping):
            given = list(params.items())
            named: dict[Any, Any] = {_text(k): v for k, v in given}
            if any(not isinstance(k, str) or k.startswith(_PARAM_PREFIX) for k in named):
                raise LimitError(
                    "params",
                    sorted(map(str, named)),
                    f"keys must be str not starting {_PARAM_PREFIX!r}",
                )
            if len(named) != len(given):  # two subclass keys (lying hashes) with one text
                raise LimitError("params", sorted(map(str, named)), "names a parameter twice")
            self._named = True
            self._params: Params = named
        elif isinstance(params, Sequence) and not isinstance(params, str | bytes):
            self._named = False
            self._params = tuple(params)
        else:
            raise TypeError(f"params must be a sequence or a mapping, not {type(params).__name__}")
        if self._table is not None and self._params:
            # The table's SQL holds no placeholder of the caller's: a sequence failed the
            # first page with the driver's count of bindings, a mapping was never read.
            raise LimitError(
                "params",
                params,
                "only a query= source takes params: a table= source's SQL has no placeholder",
            )
        self._batch = check_int("batch_size", batch_size, minimum=1, maximum=1_000_000)
        if max_cell_bytes is not None:
            check_int("max_cell_bytes", max_cell_bytes, minimum=MIN_CELL_BYTES)
        self._max_cell = max_cell_bytes
        # One plan per cut bound (None: no cut): the bound of fill() follows the page.
        self._plans: dict[int | None, _Plan] = {}
        # Rows the last filled page held: the next page's first fetch asks for about as
        # many, so a page costs one or two round trips, not a doubling series.
        self._rows_hint = 0
        self._ahead = _Ahead()

    # -- dialect hooks ------------------------------------------------------------------

    def _placeholder(self, name: str) -> str:
        raise NotImplementedError

    def _no_limit(self) -> str:
        return ""

    def _ident(self, name: str) -> str:
        """An identifier as this database's statements spell it (see `quote_ident`)."""
        return quote_ident(name)

    def _col(self, name: str) -> str:
        """A column of the wrapped query (never an output alias of the same name)."""
        return "_jb_q." + self._ident(name)

    def _row_order(self, plan: _Plan) -> str:
        """The ORDER BY terms that order rows tied on the keys by all of their columns."""
        raise NotImplementedError

    def _nulls_first(self, desc: bool) -> bool:
        """Whether the database puts NULLs first for this direction (its default)."""
        raise NotImplementedError

    def _null_safe_eq(self, col: str, mark: str) -> str:
        """SQL for "*col* equals *mark*", NULL equal to NULL, by *col*'s own collation."""
        raise NotImplementedError

    # -- the plan ---------------------------------------------------------------------

    @property
    def _wants_table_keys(self) -> bool:
        """Whether the catalog's keys are read: keyset mode makes its order total with
        them, offset mode too unless the order is declared unique (PostgreSQL's sort
        gives tied rows another order for each LIMIT and OFFSET, so pages skipped rows
        and repeated others), and a default order without an `id` column is the
        table's key."""
        return self._mode == "keyset" or self._default_order or not self._unique

    def _resolve(
        self,
        columns: list[str],
        table_keys: _TableKeys | None,
        cuts: list[_Cut],
        text_keys: frozenset[str] = frozenset(),
        longest: int = 0,
        *,
        key_text: Mapping[str, str] | None = None,
    ) -> _Plan:
        """Make the order total and write the select list.

        *table_keys* is what a table's catalog says (None for a query). *cuts* is, per
        column to bound, the column, the SQL of its cut value, of its full length when
        cut (else NULL; None when the cut value is tagged with it, `_untag`, and then
        longer than *longest*), of its head when that is not the cut value itself, and
        the length's unit.
        *text_keys* are the columns whose float keys a position keeps as text.
        *key_text* is, per column whose value the driver may read as text that is no
        exact key, the SQL of the exact text a position keeps of it then, where it is a
        key, selected after the rest (`_row_keys`).
        """
        if len(set(columns)) != len(columns):
            dupes = sorted({c for c in columns if columns.count(c) > 1})
            raise LimitError("query", dupes, "returns duplicate column names; alias them")
        order = self._keys
        # The default order of a table without an `id` column is the table's own key
        # alone: the primary key, or SQLite's rowid, appended to an empty order below.
        by_table = False
        if self._default_order and table_keys is not None and "id" not in columns:
            if not table_keys.append:
                raise LimitError(
                    "order_by",
                    None,
                    "has no default here: the table has no `id` column and no primary key "
                    f"(columns: {list(columns)}); name a unique order",
                )
            order, by_table = (), True
        for name, _ in order:
            if name not in columns:
                raise LimitError(
                    "order_by", name, f"is not a column of the result (columns: {list(columns)})"
                )
        notnull: set[str] = table_keys.notnull if table_keys is not None else set()
        keys = [(name, desc, name in notnull) for name, desc in order]
        hidden = ""
        row_order = False
        offset_ties = self._mode == "offset" and bool(order) and not self._unique
        if offset_ties and table_keys is None:
            row_order = True  # a query's result: no key known to append
        elif by_table or offset_ties or (self._mode == "keyset" and not self._unique):
            given = {name for name, _ in order}
            if table_keys is None:
                last = order[-1][0]
                raise LimitError(
                    "order_by",
                    [("-" if d else "") + n for n, d in order],
                    "is not known to be unique for a query, so rows sharing a key could be "
                    f"skipped between pages: add a column that is unique in the result "
                    f"(such as the primary key) after {last!r}, or pass unique=True if the "
                    "order already is unique",
                )
            append = table_keys.append
            if not any(set(cols) <= given for cols in table_keys.unique):
                if not append and offset_ties:
                    row_order = True
                elif not append:
                    raise LimitError(
                        "order_by",
                        [("-" if d else "") + n for n, d in order],
                        "is not unique and the table has no primary key or NOT NULL unique "
                        "key to append: add unique columns, or pass unique=True if the "
                        "order already is unique",
                    )
                # The tiebreaker follows the last direction: one direction keeps the
                # comparison a row value, which indexes serve.
                desc = order[-1][1] if order else False
                for name in append:
                    if name not in given:
                        keys.append((name, desc, True))
                hidden = table_keys.hidden if append == [table_keys.hidden] else ""
        by_name = {cut[0]: cut[1:] for cut in cuts}
        key_cols = {name for name, _, _ in keys}
        select: list[str] = []
        lengths: list[str] = []
        head_sql: list[str] = []
        cut_index: list[int] = []
        head_at: list[int | None] = []
        units: list[Literal["chars", "bytes"] | None] = []
        long_at: list[int] = []
        for i, name in enumerate(columns):
            if name in by_name and name not in key_cols:  # a key must stay whole
                value, length, head, unit = by_name[name]
                select.append(f"{value} AS {self._ident(name)}")
                if length is None:
                    long_at.append(i)
                    continue
                cut_index.append(i)
                lengths.append(length)
                units.append(unit)
                head_at.append(None if head is None else len(head_sql))
                if head is not None:
                    head_sql.append(head)
            else:
                select.append(self._col(name))
        bare = [self._col(name) for name in columns]
        if hidden:
            select.append(self._col(hidden))
            bare.append(select[-1])
        first_head = len(columns) + (1 if hidden else 0) + len(lengths)
        heads = [None if h is None else first_head + h for h in head_at]
        exact = [name for name, _, _ in keys if name in (key_text or {})]
        first_exact = first_head + len(head_sql)
        exact_sql = [(key_text or {})[name] for name in exact]
        distinct_at: list[tuple[int, list[int]]] = []
        if table_keys is not None:
            at = {name: i for i, (name, _, _) in enumerate(keys)}
            for cols in (*table_keys.unique, *table_keys.unique_non_null):
                if all(c in at for c in cols):
                    indexes = sorted(at[c] for c in cols)
                    if indexes[-1] + 1 < len(keys):
                        distinct_at.append((indexes[-1] + 1, indexes))
            distinct_at.sort()
        return _Plan(
            columns,
            keys,
            select=", ".join(select + lengths + head_sql + exact_sql),
            # Without a column of lengths the uncut rows are the cut ones' shape.
            bare=", ".join(bare + exact_sql) if long_at and not lengths else "",
            cut_index=cut_index,
            heads=heads,
            units=units,
            hidden=hidden,
            text_keys=text_keys,
            key_text_at={name: first_exact + j for j, name in enumerate(exact)},
            distinct_at=distinct_at,
            long_at=tuple(long_at),
            longest=longest,
            row_order=row_order,
        )

    # -- one page -----------------------------------------------------------------------

    def open(
        self, position: Position | None, *, limit_hint: int | None = None
    ) -> Generator[tuple[Row, Position], None, None]:
        """Yield rows after *position* as ``(dict, position)``.

        The first open learns the result's columns and makes the order total (one query
        with ``LIMIT 0`` and the catalog), so an order that cannot be made total is
        refused here, before any row is served; so is a malformed position.
        """
        limit_hint = check_limit_hint(limit_hint)
        start = 0 if self._mode == "keyset" else offset_position(position, "row")
        plan = self._plan_for(self._max_cell)
        position = self._resume(position)
        sql, params = self._sql(plan, position, limit_hint)
        rows = self._iter(plan, sql, params, limit_hint, start, position=position)
        return _bounded_rows(rows, position) if self._mode == "keyset" else rows

    def _resume(self, position: Position | None) -> Position | None:
        """*position*, where it is an offset from a short key (`_skip_from`), as the whole
        key of the row it ended on (`_Resumed`), found again by its digest.

        Rows inserted or deleted between the short key and that row since the position
        was written moved the offset: the row is looked for `RESUME_ROWS` either side of
        it, and the page reads after its key, as after any stored key. Where it is not
        there (it was deleted, its key changed, or more rows moved) the position is
        refused, rather than a row skipped or served twice. The rows are read with every
        cell but the key's cut to `MIN_CELL_BYTES` (a key stays whole): finding the row
        costs its keys, not the cells beside them. Found, the position is the offset where
        it stood now, so later pages count from there, not from where it was written.
        """
        if self._mode != "keyset" or not isinstance(position, dict):
            return position
        plan = self._plan_for(MIN_CELL_BYTES)
        after, skip = _split(position)
        last = position.get("last")
        if type(last) is not str:
            raise InvalidCursor("the position is not a valid keyset position")
        at = skip - 1  # the offset of the row the position ended on
        low = max(0, at - RESUME_ROWS)
        # Where nothing changed (one row read), then the rows around it.
        for first, count in ((at, 1), (low, at - low + RESUME_ROWS + 1)):
            probe: Position = {"after": after, "skip": first} if first else after
            sql, params = self._sql(plan, probe, count - 1)
            rows = self._iter(plan, sql, params, count - 1, 0, position=probe)
            with contextlib.closing(rows):
                for i, (_, key) in enumerate(rows):
                    assert isinstance(key, list)
                    if _digest(key) == last:
                        return _Resumed(key, {"after": after, "skip": first + i + 1})
        raise InvalidCursor(
            "the rows before the position changed since the cursor was minted "
            f"(more than {RESUME_ROWS} rows inserted or deleted before it, "
            "or the row it ended on deleted or its order key updated)"
        )

    def _plan_for(self, cut: int | None) -> _Plan:
        plan = self._plans.get(cut)
        if plan is None:
            plan = self._plans[cut] = self._make_plan(cut)
            plan.row_bound = (len(plan.cut_index) + len(plan.long_at)) * (cut or 0)
        return plan

    def fill(
        self, builder: Filler, position: Position | None, *, limit_hint: int | None = None
    ) -> tuple[bool, Position | None]:
        """Fill *builder* with the rows after *position*, in batches.

        Returns whether a row was left over (the look-ahead) and the position after the
        last row on the page (*position* itself when none fit). Rows are fetched
        ``min(batch_size, limit_hint + 1)`` at a time (without a hint: about as many as
        the last page held, doubling up to ``batch_size``), turned into dicts per batch
        and handed to the builder's bulk path; the position is computed once, for the
        page's last row. The rows fetched but not served are kept for the page that
        starts where this one ended (`_Ahead`).
        """
        limit_hint = check_limit_hint(limit_hint)
        start = 0 if self._mode == "keyset" else offset_position(position, "row")
        cut = self._max_cell
        if cut is None:
            # No cell longer than the whole page can be shown whole: fetch no more of one;
            # unless an item too big for the page is spilled whole (as far as the spill
            # store takes it).
            cut = max(MIN_CELL_BYTES, read_bound(builder, 1 << 20))
        # Found before `_fill` holds a connection: a pool of one would wait for it.
        resumed = self._resume(position)
        more, after = self._fill(
            builder,
            # The plan is taken by `_fill`: where the source reopens its database (an
            # SQLite file replaced) it must be the plan of the file the page reads.
            min(cut, _MAX_CUT),
            # Rows fetched ahead for one reader are never another's: the snapshot proves
            # nothing was written, not that the next page's session sees the same rows
            # (another role under row-level security, another search_path).
            key=(cut, page_reader(builder), _position_key(position)),
            position=resumed,
            limit_hint=limit_hint,
            start=start,
        )
        return more, position if after is None else after

    def _fill(
        self,
        builder: Filler,
        cut: int,
        *,
        key: _AheadKey,
        position: Position | None,
        limit_hint: int | None,
        start: int,
    ) -> tuple[bool, Position | None]:
        """Fill one page, its cells cut at *cut* (`_plan_for`); *key* finds the row the
        page before kept (see `_Ahead`)."""
        raise NotImplementedError

    def _kept(self, key: _AheadKey, token: Hashable) -> tuple[list[tuple[Any, ...]], int]:
        """The rows the page before left at *key*, if the database still has *token*,
        and the bytes of their text and binary values."""
        rows, kept, size = self._ahead.get(key)
        return (rows, size) if _unchanged(kept, token) else ([], 0)

    def _keep(
        self, key: _AheadKey, after: Position | None, rows: list[Any], token: Hashable
    ) -> None:
        """Keep *rows*, fetched with *token*, for the page that starts at *after*."""
        if rows and token is not None:
            self._ahead.put((*key[:2], _position_key(after)), rows, token)

    def _fill_rows(
        self,
        builder: Filler,
        plan: _Plan,
        chunks: _Chunks,
        *,
        limit_hint: int | None,
        start: int,
        position: Position | None,
    ) -> tuple[bool, Position | None, list[tuple[Any, ...]]]:
        """The batch loop of `fill`, reading `_Chunks`.

        Returns whether a row was left over, the position after the page's last row,
        and the raw rows fetched but not served (the look-ahead first).
        """
        batch = self._first_batch(limit_hint, plan, chunks)
        cap = _fetch_cap(plan)
        served = 0
        last: tuple[list[Any], int] = ([], 0)  # the last batch that served rows, and how many
        fetchmany = chunks.fetchmany
        while rows := fetchmany(batch):
            if type(rows) is not list:
                rows = list(rows)
            more, n = builder.fill_from(self._dicts(plan, rows))
            served += n
            if n:
                last = (rows, n)
            if more:
                if self._unique and self._mode == "keyset":
                    self._check_page_end(plan, chunks, last, rows, n)
                self._rows_hint = served
                return (
                    True,
                    self._position_after(plan, last[0][: last[1]], start + served, position),
                    rows[n:],
                )
            if chunks.ended or chunks.stopped is not None:
                break
            if limit_hint is None:
                batch = min(self._batch, batch * 2, cap)
        after = self._position_after(plan, last[0][: last[1]], start + served, position)
        if chunks.stopped is not None:
            # The next row cannot be read: a page that served rows ends before it, so
            # that they are served at all, and the next page, which starts with it,
            # raises. Nothing is kept: every row fetched was served.
            if not served:
                raise chunks.stopped
            if self._unique and self._mode == "keyset":
                # The next page starts after the last row: a row tied with it would be
                # skipped (the unread one too), as at any page end (`_check_page_end`).
                last_row = last[0][last[1] - 1]
                here = self._row_keys(plan, last_row)
                (ties,) = chunks.run([self._ties_sql(plan, here)])
                if len(ties) > 1:
                    raise self._tie(here)
            return True, after, []
        return False, after, []

    def _check_page_end(
        self, plan: _Plan, chunks: _Chunks, last: tuple[list[Any], int], rows: list[Any], n: int
    ) -> None:
        """Prove that a declared-unique order loses no row where the next page starts.

        It starts after the page's last row, or, where it carries the rows left over,
        after the last row fetched (when `_Chunks.unchecked`): a row tied with either, as
        the database compares, would never be asked for. One query where the row read
        ahead is the last one fetched (the common case), else two in one round trip.
        """
        ahead = self._row_keys(plan, rows[n])
        checks: list[tuple[str, Params]] = []
        here = None
        if last[1]:
            last_row = last[0][last[1] - 1]
            here = self._row_keys(plan, last_row)
            if here == ahead:
                raise self._tie(here)
        tail = None
        if chunks.unchecked:
            tail = self._row_keys(plan, rows[-1])
        # The rows the database holds equal to the one read ahead include the page's last
        # row if the two tie: where the row read ahead is also the last one fetched, the
        # check of its ties covers the page's end too.
        follows = here is not None and (tail is None or n + 1 < len(rows))
        if follows:
            checks.append(self._follows_sql(plan, ahead, here))
        if tail is not None:
            checks.append(self._ties_sql(plan, tail))
        found = chunks.run(checks) if checks else []
        if follows and not found[0]:
            raise self._tie(here)
        if tail is not None and len(found[-1]) > 1:
            raise self._tie(tail)

    def _first_batch(self, limit_hint: int | None, plan: _Plan, chunks: _Chunks) -> int:
        """How many rows `_fill_rows` asks for first (see `fill`): no more than the rows
        carried over where their values alone pass what the page can show (it ends among
        them: after a page of short rows, the next asked for `rows_hint` more, 9.6 MB of
        them for a 64 KiB page, while 96 fetched rows were in hand); a first page's
        first fetch no more than `_fetch_cap`."""
        if chunks.carried_bytes > chunks.budget:
            return max(1, chunks.carried)
        if limit_hint is not None:
            return min(self._batch, limit_hint + 1)
        if self._rows_hint:
            return min(self._batch, self._rows_hint + 2)
        # A first page: 200 text columns cut at 64 KiB are 12.8 MB a row, and 16 such
        # rows were fetched for a page that shows one.
        return min(self._batch, FIRST_FETCH, _fetch_cap(plan))

    def _position_after(
        self, plan: _Plan, rows: list[Any], served: int, start: Position | None
    ) -> Position | None:
        """The position after the page's last row, the last of *rows* (the page's last
        batch), *served* rows after *start* (None in keyset mode when none fit)."""
        if self._mode != "keyset":
            return served
        if not rows:
            return None  # nothing fit: fill() answers the position it started at
        # A long key is not stored: the rows after the batch's last short key are
        # skipped by offset from it (from *start* when the batch has none).
        last: list[JSONValue] = []
        for back, row in enumerate(reversed(rows)):
            pos = self._position_of(plan, row)
            if _short(pos):
                return pos if back == 0 else _skip_from(pos, back, last)
            last = last or pos
        return _skip_from(start, served, last)

    def _position_of(self, plan: _Plan, row: Any, item: Row | None = None) -> list[JSONValue]:
        """The position after the fetched *row* (*item*: its dict, where made): its keys,
        and where the last of them is a rowid that decides (`_rowid_decides`), which
        SQLite may renumber (VACUUM), a digest of the row it names, which the next page
        checks (`SQLiteSource._check_row`)."""
        pos = self._row_keys(plan, row)
        if _rowid_decides(plan, pos):
            pos.append(self._row_print(item if item is not None else self._dicts(plan, [row])[0]))
        return pos

    def _row_print(self, item: Row) -> str:
        """A digest of a served row's values (`_position_of`)."""
        raise NotImplementedError

    def _dicts(self, plan: _Plan, rows: list[Any]) -> list[Row]:
        """A batch of fetched rows as dicts, cut cells as `Clipped` values."""
        columns = tuple(plan.columns)
        first_len = len(columns) + (1 if plan.hidden else 0)
        flags = (first_len, len(plan.cut_index), plan.long_at, plan.longest)
        items, i = rows_to_dicts(columns, rows, 0, *flags)
        while i < len(rows):  # a row with a cut cell, and the rows after it
            items.append(self._cut_row(plan, rows[i]))
            more_items, i = rows_to_dicts(columns, rows, i + 1, *flags)
            items += more_items
        return items

    def _cut_row(self, plan: _Plan, row: Any) -> Row:
        item = dict(zip(plan.columns, row, strict=False))
        for i in plan.long_at:
            value = row[i]
            if isinstance(value, bytes) and len(value) > plan.longest:
                item[plan.columns[i]] = _untag(value)
        first_len = len(plan.columns) + (1 if plan.hidden else 0)
        for j, i in enumerate(plan.cut_index):
            length = row[first_len + j]
            if length is not None:
                at = plan.heads[j]
                head = _plain(row[i] if at is None else row[at])
                unit = plan.units[j] or ("chars" if isinstance(head, str) else "bytes")
                if unit == "chars" and isinstance(head, str) and len(head) > plan.longest > 0:
                    # SQLite's substr() of a UTF-16 text, decoded by a connection's
                    # text_factory that makes more characters of its bytes (latin-1 of
                    # "é"): its first characters, as many as the cut, never more than
                    # the length SQLite counted (a Clipped longer than its length).
                    head = head[: plan.longest]
                clipped = Clipped(head, length, unit)
                # A multibyte text over the byte bound may still be whole.
                if clipped.omitted > 0:
                    item[plan.columns[i]] = clipped
                elif at is None:
                    item[plan.columns[i]] = head
        return item

    def _tie(self, key: Position) -> LimitError:
        return LimitError(
            "unique",
            True,
            f"two consecutive rows share the order key {key!r}: the order is not unique, "
            "and paging it would skip rows; add a unique column to order_by",
        )

    def _make_plan(self, cut: int | None) -> _Plan:
        """Probe the result and the catalog; cut cells longer than *cut* (None: none)."""
        raise NotImplementedError

    def _iter(
        self,
        plan: _Plan,
        sql: str,
        params: Params,
        limit_hint: int | None,
        start: int,
        *,
        position: Position | None,
    ) -> Generator[tuple[Row, Position], None, None]:
        """The rows of `open()`: *sql* is its query of *plan*, from *position*."""
        raise NotImplementedError

    def _sql(
        self, plan: _Plan, position: Position | None, limit_hint: int | None, *, bare: bool = False
    ) -> tuple[str, Params]:
        """The wrapped query and its parameters for one page (*bare*: ``plan.bare``)."""
        names: list[str] = []
        values: list[object] = []
        bind = self._binder(names, values)
        # Newlines keep a trailing `-- comment` in the user's query from eating the ")".
        sql = f"{_head(plan.bare if bare else plan.select)}\n{self._inner_sql(plan)}\n) AS _jb_q"
        offset = 0
        if self._mode == "keyset":
            after, offset = _split(position)
            if after is not None:
                sql += " WHERE " + self._predicate(plan, after, bind)
        else:
            offset = offset_position(position, "row")
        if plan.keys:
            sql += " ORDER BY " + ", ".join(
                self._col(n) + (" DESC" if d else " ASC") for n, d, _ in plan.keys
            )
            if plan.row_order:
                sql += ", " + self._row_order(plan)
        if limit_hint is not None:
            sql += " LIMIT " + bind(limit_hint + 1)
        if offset:
            if limit_hint is None:
                sql += self._no_limit()
            sql += " OFFSET " + bind(offset)
        return sql, self._merged(names, values)

    def _binder(self, names: list[str], values: list[object]) -> Callable[[object], str]:
        """A function that binds a value as the next parameter and returns its mark."""

        def bind(value: object) -> str:
            names.append(f"{_PARAM_PREFIX}{len(names)}")
            values.append(value)
            return self._placeholder(names[-1])

        return bind

    def _merged(self, names: list[str], values: list[object]) -> Params:
        """The user's parameters followed by the bound ones."""
        if self._named:
            merged = dict(self._params)
            merged.update(zip(names, values, strict=True))
            return merged
        return (*self._params, *values)

    def _follows_sql(
        self, plan: _Plan, ahead: list[JSONValue], here: Position
    ) -> tuple[str, Params]:
        """A query that returns a row exactly when the database sorts a row keyed
        *ahead* strictly after one keyed *here*: by the columns' own collations and
        types, which a comparison in Python does not know (NOCASE, RTRIM, numeric 1 and
        1.0, a nondeterministic ICU collation)."""
        names: list[str] = []
        values: list[object] = []
        bind = self._binder(names, values)
        after = self._predicate(plan, here, bind)
        same = self._same(plan, ahead, bind)
        sql = (
            f"SELECT 1 FROM (\n{self._inner_sql(plan)}\n) AS _jb_q WHERE {after} AND {same} LIMIT 1"
        )
        return sql, self._merged(names, values)

    def _ties_sql(self, plan: _Plan, key: Position) -> tuple[str, Params]:
        """A query that returns two rows exactly when the database holds more than one
        row keyed *key*, by the columns' own collations and types."""
        names: list[str] = []
        values: list[object] = []
        same = self._same(plan, key, self._binder(names, values))
        sql = f"SELECT 1 FROM (\n{self._inner_sql(plan)}\n) AS _jb_q WHERE {same} LIMIT 2"
        return sql, self._merged(names, values)

    def _same(self, plan: _Plan, key: Position, bind: Callable[[object], str]) -> str:
        """SQL for "the row is keyed *key*", as the database compares (NULL equal to NULL)."""
        return " AND ".join(
            self._null_safe_eq(self._col(name), bind(_key_value(v)))
            for (name, _, _), v in zip(plan.keys, _keys_of(plan, key), strict=True)
        )

    def _together(
        self, cur: Any, queries: list[tuple[str, Params]], *, first: int | None = None
    ) -> list[list[Any]]:
        """Run *queries* on *cur*'s connection, in order, and return each one's rows (in
        one round trip where the driver can); of the last, on *cur*, only the *first*
        rows where given, the rest left to read."""
        out = []
        last = len(queries) - 1
        for i, (sql, params) in enumerate(queries):
            cur.execute(sql, params)
            out.append(cur.fetchall() if first is None or i < last else cur.fetchmany(first))
        return out

    def _run(
        self,
        chunks: _Chunks,
        cur: Any,
        queries: list[tuple[str, Params]],
        *,
        first: int | None = None,
    ) -> list[list[Any]]:
        """The queries of a page's *chunks*, run on *cur* (`_together`)."""
        return self._together(cur, queries, first=first)

    def _more(self, chunks: _Chunks, cur: Any, n: int) -> list[Any] | None:
        """Up to *n* more rows of the query *chunks* read last on *cur* (`_Chunks`)."""
        return cast(list[Any], cur.fetchmany(n))

    def _inner_sql(self, plan: _Plan) -> str:
        return self._inner

    def _predicate(self, plan: _Plan, position: Position, bind: Callable[[object], str]) -> str:
        """Rows strictly after *position* in the order, NULLs where the database puts them."""
        values = [_key_value(v) for v in _keys_of(plan, position)]
        keys = plan.keys
        for k, indexes in plan.distinct_at:
            if all(values[i] is not None for i in indexes):
                # No other row shares the first k keys: the keys after them never decide.
                keys, values = keys[:k], values[:k]
                break
        cols = [self._col(n) for n, _, _ in keys]
        directions = {d for _, d, _ in keys}
        if len(directions) == 1 and all(nn for _, _, nn in keys) and None not in values:
            # NOT NULL columns in one direction: a row value, which an index serves.
            op = "<" if directions.pop() else ">"
            if len(cols) == 1:
                return f"{cols[0]} {op} {bind(values[0])}"
            marks = ", ".join(bind(v) for v in values)
            return f"({', '.join(cols)}) {op} ({marks})"
        # (a after ?) OR (a = ? AND b after ?) OR ..., with NULLs placed as sorted.
        terms = []
        for i, (_, desc, notnull) in enumerate(keys):
            if values[i] is None and not self._nulls_first(desc):
                continue  # NULLs sort last here: nothing sorts after one in this column
            # Bound in the order the marks appear in the SQL (positional placeholders).
            eq = [
                f"{cols[j]} IS NULL" if values[j] is None else f"{cols[j]} = {bind(values[j])}"
                for j in range(i)
            ]
            eq.append(self._after(cols[i], values[i], desc, notnull, bind))
            terms.append("(" + " AND ".join(eq) + ")")
        return "(" + " OR ".join(terms) + ")" if terms else "(1 = 0)"

    def _after(
        self, col: str, value: object, desc: bool, notnull: bool, bind: Callable[[object], str]
    ) -> str:
        """SQL for "*col* sorts strictly after *value*" (a NULL *value* sorts first)."""
        nulls_first = self._nulls_first(desc)
        if value is None:
            return f"{col} IS NOT NULL"
        cmp = f"{col} {'<' if desc else '>'} {bind(value)}"
        if nulls_first or notnull:
            return cmp
        return f"({cmp} OR {col} IS NULL)"

    def _rows(
        self, plan: _Plan, cursor: Any, limit_hint: int | None
    ) -> Iterator[tuple[Row, Position]]:
        """Turn fetched rows into ``(dict, position)``; *cursor* already executed."""
        keyset = self._mode == "keyset"
        check_ties = keyset and self._unique
        cap = _fetch_cap(plan)
        if limit_hint is not None:
            batch = min(self._batch, limit_hint + 1, cap)
        else:
            batch = min(self._batch, FIRST_FETCH, cap)
        index = 0
        previous: Position = None
        fetchmany = cursor.fetchmany
        while rows := fetchmany(batch):
            if type(rows) is not list:
                rows = list(rows)
            for row, item in zip(rows, self._dicts(plan, rows), strict=True):
                if keyset:
                    keys = self._row_keys(plan, row)
                    if check_ties and keys == previous:
                        raise self._tie(keys)
                    previous = keys
                    pos: Position = (
                        [*keys, self._row_print(item)] if _rowid_decides(plan, keys) else keys
                    )
                else:
                    index += 1
                    pos = index
                yield item, pos
            # A fetch cut short by a row it could not read did not reach the end: the
            # next one raises its error (`_Serial`).
            if len(rows) < batch and (type(cursor) is not _Serial or cursor.stopped is None):
                return
            if limit_hint is None:
                batch = min(self._batch, batch * 2, cap)

    def _row_keys(self, plan: _Plan, row: Any) -> list[JSONValue]:
        """The keys of the fetched *row*, each as a position holds it (`_key`); one the
        driver read as text is the exact text selected for it, where the plan has one
        (`_resolve`)."""
        keys = [self._key(row[i], i, plan) for i in plan.key_index]
        for k, j in plan.key_text:
            if type(keys[k]) is str:
                keys[k] = row[j]
        return keys

    @staticmethod
    def _key(value: object, i: int, plan: _Plan) -> JSONValue:
        if value is None or type(value) in (int, str):
            return value  # type: ignore[return-value]
        if type(value) is float and i in plan.text_keys:
            return {"text": repr(value)}
        names = [*plan.columns, plan.hidden] if plan.hidden else plan.columns
        return json_safe(value, what=f"order_by column {names[i]!r}")

    def _describe(self) -> dict[str, JSONValue]:
        params: JSONValue
        if isinstance(self._params, Mapping):
            params = {k: json_safe(v, what=f"param {k!r}") for k, v in self._params.items()}
        else:
            params = [json_safe(v, what="a param") for v in self._params]
        return {
            "kind": self._kind,
            "table": None if self._table is None else list(self._table),
            "query": self._query,
            "params": params,
            # The default is described as itself: what it orders by depends on the table.
            "order_by": None
            if self._default_order
            else [("-" if d else "") + n for n, d in self._keys],
            "unique": self._unique,
            "mode": self._mode,
            "max_cell_bytes": self._max_cell,
        }

    def describe(self) -> dict[str, JSONValue]:
        """Kind, table or query, parameters, order, mode and cut (never connection details)."""
        return self._describe()


def _fetch_cap(plan: _Plan) -> int:
    """The most rows a first page's fetch, and each fetch that doubles the one before,
    asks for, and a longer query is read at a time (`_Chunks`): as many as bring at most
    `AHEAD_BYTES` of text and binary values at the cut, two at least. The doubling went
    on to `batch_size` rows while the rows were short: where long ones followed, one
    fetch brought batch_size times the columns times the cut (137 MB for a 64 KiB page
    of ten 60 KB columns)."""
    if not plan.row_bound:
        return 1 << 30
    return max(2, AHEAD_BYTES // plan.row_bound)


def _unchanged(kept: Hashable, token: Hashable) -> bool:
    """Whether rows kept with token *kept* still hold under *token*, read now (None: no
    token could be read, so nothing kept is trusted)."""
    return token is not None and kept == token


def _position_key(position: Position | None) -> bytes:
    try:
        return dumps(position)
    except (orjson.JSONEncodeError, EncodeError):
        raise InvalidCursor("the position is not a JSON value") from None


def _plain(head: Any) -> str | bytes:
    if isinstance(head, memoryview | bytearray):
        return bytes(head)
    assert isinstance(head, str | bytes)
    return head


def _bounded_rows(
    rows: Iterator[tuple[Row, Position]], start: Position | None
) -> Generator[tuple[Row, Position], None, None]:
    """*rows* with each long position replaced by an offset from the last short one."""
    since = 0
    for row, pos in rows:
        assert isinstance(pos, list)
        if _short(pos):
            start, since = pos, 0
            yield row, pos
        else:
            since += 1
            yield row, _skip_from(start, since, pos)


def _offset_rows(
    rows: Iterator[tuple[Row, Position]], start: int
) -> Iterator[tuple[Row, Position]]:
    for row, index in rows:
        yield row, start + index  # type: ignore[operator]


class _Chunks:
    """What `_SQLSource._fill_rows` reads rows from, as bounded queries.

    Each ``fetchmany(n)`` runs the page's query with ``LIMIT n`` from the position after
    the rows fetched so far: one round trip, no server-side cursor or transaction held
    across the page, and no row fetched beyond those returned. *carried* are the rows
    the page before fetched but did not serve, known unchanged (see `_Ahead`): they
    come first, and the queries go on after them.

    A source may send the first query before it knows whether the carried rows hold
    (`first_query`, then `issued`), so that it shares a round trip with the check; the
    first ``fetchmany`` then reads that query's result from the cursor. `drop_carried`
    forgets both.

    ``unchecked`` says that the rows fetched so far end at a key whose ties, under a
    declared-unique order, may lie past them: a query strictly after it would never see
    them, so the next one goes with a check of that key (`_SQLSource._ties_sql`). The
    key a page starts after, and that of the carried rows, were checked where the page
    before ended (`_SQLSource._check_page_end`).

    ``bare`` says that the queries select ``plan.bare`` under a length limit, until a
    value passes it (`SQLiteSource._run`).

    A query that asks for more rows than `_fetch_cap` allows (a later page's first, sized
    by the page before) is read that many rows at a time, the next ones only when the
    page asks for them: where short rows filled the page before and wide ones follow,
    the rows past the page are never read (SQLite makes a row when it is stepped to;
    psycopg makes it when fetched, from the result it received whole). ``_left`` is how
    many rows that query may still give; a continuation a source cannot read (SQLite's
    length limit passed, `SQLiteSource._more`) asks again from where it stopped.

    ``stopped`` is the error of a row the source could not read (SQLite: a text value
    that is not UTF-8, `SQLiteSource._readable`), which the query returned the rows
    before: the result goes on there, and no fetch reads past it.

    ``savepoint`` names the page's savepoint where it runs in its caller's transaction
    (PostgreSQL): a failed query is rolled back to it and read again (`_unaborted`).
    """

    __slots__ = (
        "_carried",
        "_check_ties",
        "_cur",
        "_done",
        "_issued",
        "_left",
        "_position",
        "_source",
        "_step",
        "bare",
        "budget",
        "carried",
        "carried_bytes",
        "plan",
        "savepoint",
        "stopped",
        "unchecked",
    )

    def __init__(
        self,
        source: _SQLSource,
        plan: _Plan,
        cur: Any,
        position: Position | None,
        start: int,
        *,
        carried: list[tuple[Any, ...]],
        carried_bytes: int = 0,
        budget: int = 1 << 62,
        bare: bool = False,
    ) -> None:
        self._source = source
        self.plan = plan
        self._cur = cur
        self._position: Position | None = position if source._mode == "keyset" else start
        self._done = False
        self._carried = carried
        # How many rows were carried over, the bytes of their text and binary values, and
        # the page's budget (`_SQLSource._first_batch`).
        self.carried = len(carried)
        self.carried_bytes = carried_bytes
        self.budget = budget
        # The first fetch's size and the carried rows it was sent after, once sent.
        self._issued: tuple[int, list[tuple[Any, ...]]] | None = None
        self._check_ties = source._unique and source._mode == "keyset"
        self.unchecked = False
        self.bare = bare
        self._left = 0
        self._step = _fetch_cap(plan)
        self.stopped: Exception | None = None
        self.savepoint: str | None = None

    @property
    def ended(self) -> bool:
        """Whether a query returned fewer rows than it asked for: the result has ended."""
        return self._done

    def first_query(self, n: int) -> tuple[str, Params] | None:
        """The query the first ``fetchmany(n)`` runs (None: the carried rows suffice)."""
        if len(self._carried) >= n:
            return None
        return self._query(self._carried, n)

    def issued(self, n: int) -> None:
        """`first_query(n)` ran on the cursor: the first ``fetchmany(n)`` reads it."""
        self._issued = (n, self._carried)

    def drop_carried(self) -> None:
        """Forget the carried rows (they may have changed) and any query sent after them."""
        self._carried = []
        self._issued = None
        self.carried = self.carried_bytes = 0

    def _query(self, rows: list[Any], n: int) -> tuple[str, Params]:
        return self._source._sql(self.plan, self._after(rows), n - len(rows) - 1, bare=self.bare)

    def fetchmany(self, n: int) -> list[Any]:
        """The next rows: the carried ones, then up to *n* in all from the database
        (fewer where a query is read in steps, see the class docstring)."""
        if self._done or self.stopped is not None:
            return []
        rows: list[Any]
        rows, self._carried = self._carried, []
        issued, self._issued = self._issued, None
        got: list[Any] | None
        if self._left:
            got = self._continued(n)
            if got is not None:
                if got:
                    self._position = self._after(got)
                return got
        if len(rows) < n:
            want = n - len(rows)
            first = self._step if want > self._step else None
            if issued is not None and issued[0] == n and issued[1] is rows:
                got = self._cur.fetchall() if first is None else self._cur.fetchmany(first)
            elif self.unchecked:
                source = self._source
                ties, got = self.run(
                    [source._ties_sql(self.plan, self._position), self._query(rows, n)]
                )
                if len(ties) > 1:
                    raise source._tie(self._position)
            else:
                (got,) = self.run([self._query(rows, n)], first=first)
            if first is not None and len(got) == first:
                self._left = want - first  # the query may give more
                size = text_bytes(got, 0) + (self.carried_bytes if rows else 0)
                self._read_on(got, size)
            else:
                self._done = len(got) < want and self.stopped is None
                self.unchecked = self._check_ties and not self._done
            rows = rows + got if rows else got
        if rows:
            self._position = self._after(rows)
        return rows

    def _read_on(self, rows: list[Any], size: int) -> None:
        """Add to *rows* (*size* bytes of text and binary values so far, with the carried
        ones) the next steps of the query read in steps, while they leave the page's
        budget unspent (then the page is full, or nearly: the rest is read if it asks)."""
        while self._left and size <= self.budget:
            got = self._continued(self._step)
            if not got:
                return
            rows += got
            size += text_bytes(got, 0)

    def _continued(self, n: int) -> list[Any] | None:
        """Up to *n* more rows of the query read in steps (None: it cannot go on, and
        the next query starts after the rows read)."""
        k = min(n, self._step, self._left)
        got = self._source._more(self, self._cur, k)
        if got is None:
            self._left = 0
            self.unchecked = self._check_ties
            return None
        self._left -= len(got)
        if len(got) < k:
            self._left = 0
            self._done = True
        elif not self._left:
            self.unchecked = self._check_ties
        return got

    def run(
        self, queries: list[tuple[str, Params]], *, first: int | None = None
    ) -> list[list[Any]]:
        """Each query's rows, the queries sent together (`_SQLSource._run`); of the last,
        only the *first* rows where given (the rest read by `fetchmany`)."""
        self._left = 0
        return self._source._run(self, self._cur, queries, first=first)

    def _after(self, rows: list[Any]) -> Position | None:
        """The position after *rows*, which follow the current one."""
        if not rows:
            return self._position
        source, plan = self._source, self.plan
        if source._mode == "keyset":
            return source._row_keys(plan, rows[-1])
        return cast(int, self._position) + len(rows)


class _Serial:
    """A cursor whose statements and fetches hold *lock* (`SQLiteSource._lock`).

    sqlite3 decodes every row a fetch asks for and drops them all for one holding a
    text value that is not UTF-8: a fetch that meets one returns the rows before it
    (`_before`) and keeps the error in ``stopped``, which the next fetch raises.
    """

    __slots__ = ("_changes", "_cur", "_lock", "_query", "_read", "stopped")

    def __init__(self, cur: sqlite3.Cursor, lock: threading.RLock) -> None:
        self._cur = cur
        self._lock = lock
        self._query: tuple[str, Params] = ("", ())
        self._read = 0  # the rows the statement returned
        self._changes = 0  # the connection's writes when the statement ran
        self.stopped: sqlite3.OperationalError | None = None

    def execute(self, sql: str, params: Params) -> None:
        with self._lock:
            self._cur.execute(sql, params)
            self._query, self._read, self.stopped = (sql, params), 0, None
            self._changes = self._cur.connection.total_changes

    def fetchmany(self, n: int) -> list[Any]:
        with self._lock:
            if self.stopped is not None:
                raise self.stopped
            try:
                rows: list[Any] = self._cur.fetchmany(n)
            except sqlite3.OperationalError as exc:
                if _not_utf8(exc) is None:
                    raise
                rows = self._before(n, exc)
            self._read += len(rows)
            return rows

    def _before(self, n: int, exc: sqlite3.OperationalError) -> list[Any]:
        """The rows a fetch of *n* read before the one it could not decode (*exc*).

        The statement runs again on a cursor of its own, which this one reads from
        then on: the stopped statement, never reset, holds the connection's read
        transaction, so the new one returns the same rows. It steps over those
        already returned (once, in batches) and reads on a row at a time. A read
        transaction does not hide the connection's own writes: once it wrote, the count
        stepped over could land anywhere, so the fetch fails as it came (nothing
        skipped unsaid)."""
        if self._cur.connection.total_changes != self._changes:
            raise exc
        cur = self._cur.connection.cursor()
        try:
            cur.row_factory = None  # tuples, whatever the connection's factory
            cur.execute(*self._query)
            skip = self._read
            while skip > 0 and (got := cur.fetchmany(min(skip, DEFAULT_BATCH_SIZE))):
                skip -= len(got)
            rows: list[Any] = []
            while len(rows) < n:
                try:
                    row = cur.fetchone()
                except sqlite3.OperationalError as again:
                    if _not_utf8(again) is None:
                        raise
                    self.stopped = again
                    break
                if row is None:
                    break
                rows.append(row)
        except BaseException:
            cur.close()
            raise
        self._cur.close()
        self._cur = cur
        if not rows and self.stopped is not None:
            raise self.stopped from None  # *exc*'s own row: nothing before it
        return rows

    def close(self) -> None:
        self._cur.close()


def _locate(cur: sqlite3.Cursor, table: tuple[str, ...]) -> tuple[str, str, bool] | None:
    """Where SQLite finds *table* (a name or (schema, name)), as a query names it: its
    schema, its type (table_list's: "table", "view", "virtual", "shadow"…) and whether
    it is WITHOUT ROWID; None where it is not there.

    A name without a schema is looked for as SQLite looks for it: in temp, then main,
    then each attached database in the order attached. The catalog the source reads
    must be the table's the query reads: a TEMP table read as a main one is found
    nowhere (and refused as keyless), a TEMP view over a main table of its name read as
    that table (a rowid appended that the view has not)."""
    *schema, name = table
    if schema:
        rows = cur.execute(f"PRAGMA {quote_ident(schema[0])}.table_list({quote_ident(name)})")
    else:
        rows = cur.execute(
            "SELECT t.schema, t.name, t.type, t.ncol, t.wr FROM pragma_table_list(?) AS t"
            " JOIN pragma_database_list AS d ON d.name = t.schema"
            " ORDER BY d.name = 'temp' DESC, d.seq LIMIT 1",
            (name,),
        )
    # (schema, name, type, ncol, wr, strict)
    found = rows.fetchone()
    return None if found is None else (found[0], found[2], bool(found[4]))


def _named(table: tuple[str, ...]) -> str:
    """The schema prefix of a PRAGMA on *table* as the source was given it: "" for a name
    alone, which SQLite's PRAGMAs look up as its query does (`_locate`)."""
    return quote_ident(table[0]) + "." if len(table) == 2 else ""  # noqa: PLR2004


def _sqlite_collations(cur: sqlite3.Cursor, table: str, columns: list[str]) -> dict[str, str]:
    """The collation each column sorts by, upper case, as SQLite's plan of an ORDER BY
    names it; empty where it cannot be read (then no index is trusted on the column)."""
    if not columns:
        return {}
    # random() first: no scan order (the rowid's, a WITHOUT ROWID key's) spares the sort.
    order = ", ".join(["random()", *(quote_ident(c) for c in columns)])
    try:
        plan = cur.execute(f"EXPLAIN SELECT 1 FROM {table} NOT INDEXED ORDER BY {order}")
        # The sorter's key: "k(N,COLL,-COLL,N.COLL,...)", BINARY written "B".
        found = [row[5] for row in plan.fetchall() if row[1] in _SORTERS]
    except sqlite3.Error:
        return {}
    if not found or not isinstance(found[0], str):
        return {}
    match = re.fullmatch(r"k\((\d+)((?:,[^,()]*)*)\)", found[0])
    if match is None or int(match[1]) != len(columns) + 1:
        return {}
    names = [part.lstrip("-").removeprefix("N.").upper() for part in match[2].split(",")[2:]]
    return {c: "BINARY" if n == "B" else n for c, n in zip(columns, names, strict=True)}


_SORTERS: Final = frozenset({"SorterOpen", "OpenEphemeral"})


def _same_ties(sorts_by: str | None, index: str | None) -> bool:
    """Whether a unique index under collation *index* rules out ties in *sorts_by*.

    Values BINARY calls equal are equal under every collation, so an index under any
    collation proves BINARY ties impossible; otherwise only the same collation does.
    """
    if not sorts_by or index is None:
        return False
    return sorts_by == "BINARY" or sorts_by == index.upper()


def _not_utf8(exc: sqlite3.OperationalError) -> DecodeError | None:
    """sqlite3's error for a text value that is not UTF-8, as the `DecodeError` it is (a
    long one arrives cut, decoded with U+FFFD; a short one whole, which str refuses)."""
    if not str(exc).startswith("Could not decode to UTF-8"):
        return None
    # The CLI prints this message, and has no connection to give: a query is its way.
    return DecodeError(
        f"an SQLite text value is not valid UTF-8 ({exc}); to read such text, pass a "
        "connection whose text_factory decodes it, such as "
        "lambda b: b.decode('utf-8', 'replace'), or page a query that reads the column "
        "as bytes (on the command line: --query 'SELECT id, CAST(col AS BLOB) AS col "
        "FROM tbl' --unique --binary base64)",
        offset=None,
    )


#: The types SQLite values are read as, where no converter is registered.
_SQLITE_TYPES: Final = (int, float, str, bytes)


#: Python's codecs for the text encodings an SQLite database can have.
_SQLITE_ENCODINGS: Final = {"UTF-16le": "utf-16-le", "UTF-16be": "utf-16-be"}


def _file_name(stored: bytes, encoding: str) -> bytes | None:
    """A database file's name as the OS's bytes, from its text cast to a blob, which
    is in the database's *encoding* (None: the name cannot be known exactly).

    SQLite keeps the name as UTF-8 bytes and hands a UTF-16 database its text
    converted: the bytes with NULs between them, which no file name holds. A name
    that is not UTF-8 is converted with U+FFFD in place of its bytes, read back as
    another name (a genuine U+FFFD is taken for one too)."""
    codec = _SQLITE_ENCODINGS.get(encoding)
    if codec is None:
        return stored
    name = stored.decode(codec, "replace")
    return None if "\ufffd" in name else os.fsencode(name)


def _file_id(path: str | bytes) -> tuple[int, int] | None:
    """The device and inode of the file at *path* (None: in memory, or gone)."""
    if not path:
        return None
    try:
        st = os.stat(path)
    except OSError:
        return None
    return st.st_dev, st.st_ino


def _check_regular(path: str) -> None:
    """Refuse a *path* that names a pipe, a device or a directory: SQLite's open() of a
    FIFO waits for a writer, forever where none comes (a path a client gave a tool). A
    missing path is SQLite's to refuse."""
    try:
        mode = os.stat(path).st_mode
    except OSError:
        return
    if not stat.S_ISREG(mode):
        raise sqlite3.OperationalError(
            f"unable to open database file: {path!r} is not a regular file (a pipe, a "
            "device or a directory)"
        )


class SQLiteSource(_SQLSource):
    """Rows of an SQLite table or query.

    *connection_or_path* is an open `sqlite3.Connection` (used as is, never closed) or a
    database file path, opened read-only on the first page and kept until `close()`.
    """

    __slots__ = (
        "_blobs",
        "_closing",
        "_conn",
        "_file",
        "_layout",
        "_length",
        "_lock",
        "_lock_pid",
        "_own",
        "_path",
        "_pid",
        "_readers",
        "_rowid",
        "_utf8",
    )
    _kind = "sqlite"

    def __init__(
        self,
        connection_or_path: sqlite3.Connection | str | os.PathLike[str],
        *,
        table: str | Sequence[str] | None = None,
        query: str | None = None,
        params: Params = (),
        order_by: Sequence[str] | None = None,
        mode: Literal["keyset", "offset"] = "keyset",
        unique: bool = False,
        batch_size: int = DEFAULT_BATCH_SIZE,
        max_cell_bytes: int | None = None,
    ) -> None:
        super().__init__(
            table=table,
            query=query,
            params=params,
            order_by=order_by,
            mode=mode,
            unique=unique,
            batch_size=batch_size,
            max_cell_bytes=max_cell_bytes,
        )
        self._own: sqlite3.Connection | None = None
        self._closing: Closing[sqlite3.Connection] | None = None  # closes `_own` when it is dropped
        # Every connection this source opened that something may still read (an open()
        # iterator keeps its own after close()): what `interrupt` reaches. A tuple,
        # replaced whole, so that another thread's interrupt reads it without a lock.
        self._readers: tuple[weakref.ref[Closing[sqlite3.Connection]], ...] = ()
        self._length = 0  # the own connection's length limit as opened
        # The device and inode of the file the own connection opened (`_connection`).
        self._file: tuple[int, int] | None = None
        # The schema of each database (`_changes_and_layout`) when the plans were last found to
        # hold: None, not yet checked (`_opened`).
        self._layout: Hashable = None
        # Held by a page (its plan and connection included), and by each step of an
        # open(): no statement runs on the connection while a page of another thread
        # holds its length limit low or its read transaction open (`_held`).
        self._lock = threading.RLock()
        self._lock_pid = os.getpid()
        # Where a long cell is read by blob I/O (`_stored`): the schema and the table, the
        # rowid's name there, and a name for it in a query that no column has.
        self._blobs: tuple[str, str, str, str] | None = None
        self._pid = 0
        self._rowid = "rowid"  # the rowid's name where no column takes it (`_table_keys`)
        self._utf8 = True  # the database's text encoding is UTF-8, not UTF-16 (`_make_plan`)
        if isinstance(connection_or_path, sqlite3.Connection):
            self._conn: sqlite3.Connection | None = connection_or_path
            self._path: str | None = None
        elif isinstance(connection_or_path, str | os.PathLike):
            self._conn = None
            self._path = os.path.abspath(os.fspath(connection_or_path))
        else:
            raise TypeError(
                "SQLiteSource needs an sqlite3.Connection or a path, "
                f"not {type(connection_or_path).__name__}"
            )

    def _placeholder(self, name: str) -> str:
        return f":{name}" if self._named else "?"

    def close(self) -> None:
        """Let go of the connection this source opened; a passed connection stays open.

        Waits for a page (or an ``open()`` step) that another thread runs, and closes the
        connection once nothing reads it: an ``open()`` iterator still open finishes on it
        (it holds the connection, `Closing`), as a page of this thread's that called this
        does. A page after this opens the path again."""
        # Under the lock: closed in another thread's step, the connection would be freed
        # under the statement it runs (a crash), or taken from `_own` between the page's
        # `_connection()` and its use. Never closed here directly: whoever still reads it
        # holds its `Closing`, and the last of them closes it.
        with self._held():
            self._own, self._closing = None, None
            self._ahead.clear()

    def interrupt(self) -> None:
        """Abort the query this source is running, if any: the page (or ``open()``) in
        progress raises ``sqlite3.OperationalError("interrupted")``. Callable from another
        thread, which is where it is useful: a Python signal handler runs only between
        bytecodes, so Ctrl-C waits for SQLite to finish a long query unless a thread
        watching for the signal (`signal.set_wakeup_fd`) calls this."""
        if self._conn is not None:
            self._conn.interrupt()
            return
        # Each connection still read, the one an open() iterator kept after close()
        # included, held while it is interrupted (a close() meanwhile leaves it open).
        for ref in self._readers:
            closing = ref()
            if closing is None:
                continue
            try:
                closing.conn.interrupt()
            except sqlite3.ProgrammingError:
                # Closed by its `Closing.__del__`, which runs before the weak reference
                # is cleared: no statement runs on it, nothing to interrupt.
                continue

    def _plan_for(self, cut: int | None) -> _Plan:
        return self._opened(cut)[1]

    def _opened(
        self, cut: int | None, *, check: bool = False
    ) -> tuple[sqlite3.Connection, _Plan, Hashable]:
        """The connection, checked against the path's file (`_connection`), and the plan
        made of what it reads, taken together under the source's lock; with *check*,
        the plans checked against the schema too, and the page's token
        (`_changes_and_layout`).

        A replaced file is opened anew and forgets the plans made of the old one, and
        that happens only under the lock: a plan taken before it was held could be the
        old file's, reopened by another thread's page while this one waited, and its
        select list run on the new file (a column added missing from the rows, one
        dropped an error). So a page takes its plan here, once it holds the lock.

        So does a schema changed in place (a table rebuilt by SQLite's ALTER TABLE
        recipe, a unique index dropped, a column added): the plan's keys could be the
        old table's, no longer unique, and rows tied with a page's last row skipped.
        Each page's entry (`open`, `_resume`, `_fill`) reads every database's
        ``schema_version`` (which `_changes_and_layout` reads for its token anyway) and makes the
        plans again where it moved. A position minted under another key plan is then
        refused (`_keys_of`), as a fresh source refuses it."""
        with self._held():
            self._connection()
            token: Hashable = None
            if check:
                cur = self._live().cursor()
                try:
                    cur.row_factory = None
                    token, layout = self._changes_and_layout(self._live(), cur)
                finally:
                    cur.close()
                if layout != self._layout:
                    self._plans.clear()
                    self._layout = layout
            plan = super()._plan_for(cut)
            # The connection the plan was made on: not checked against the path again,
            # which could open a file replaced since and pair it with this plan.
            return self._live(), plan, token

    def _live(self) -> sqlite3.Connection:
        """The connection the last `_connection()` settled on, under the lock held since
        (`_opened`); opened again where this thread closed the source meanwhile (another
        thread's close() waits for the lock)."""
        conn = self._conn if self._conn is not None else self._own
        return conn if conn is not None else self._connection()

    def open(
        self, position: Position | None, *, limit_hint: int | None = None
    ) -> Generator[tuple[Row, Position], None, None]:
        with self._held():
            # The plan `_SQLSource.open` reads with (made here, or taken from the
            # source's plans): the check adds its lookup, not a plan.
            conn, plan, _ = self._opened(self._max_cell, check=True)
            if self._mode == "keyset" and type(position) is list:
                self._check_row(conn, plan, position)
        return super().open(position, limit_hint=limit_hint)

    def _resume(self, position: Position | None) -> Position | None:
        if self._mode == "keyset" and isinstance(position, dict):
            self._opened(MIN_CELL_BYTES, check=True)  # the rows around it read by a plan that holds
        return super()._resume(position)

    def _check_row(self, conn: sqlite3.Connection, plan: _Plan, position: Position) -> None:
        """Refuse the cursor's *position* where its last key is a rowid that decides
        (`_rowid_decides`) and the row at that rowid is not the row it ended on
        (`_position_of`). Run with the page's own connection and *plan*, under the lock
        it holds.

        Such a rowid is not the row's for good: SQLite's ``VACUUM`` may renumber the rows
        of a table without an ``INTEGER PRIMARY KEY``, and rows read after the old
        number were skipped or served twice, silently. One lookup by rowid, of the cells
        as the page cuts them (the digest reads each as the least cut does); none where
        the rowid does not decide: a table with an ``INTEGER PRIMARY KEY`` (no rowid
        appended), or a position whose declared key holds no NULL (that key names the
        row). A position `_resume` found again (`_Resumed`) is not a cursor's: it was
        just read."""
        if type(position) is not list or not plan.hidden:
            return
        keys = _keys_of(plan, position)
        if not _rowid_decides(plan, keys):
            return
        n = len(plan.keys)
        if len(position) == n:
            raise InvalidCursor(
                "the position does not say which row it ended on (written before "
                "positions after a rowid did): start the listing again"
            )
        rowid = keys[n - 1]
        if type(rowid) is not int:
            raise InvalidCursor("the position is not a valid keyset position")
        names: list[str] = []
        values: list[object] = []
        mark = self._binder(names, values)(rowid)
        sql = (
            f"{_head(plan.select)}\n{self._inner_sql(plan)}\n) AS _jb_q"
            f" WHERE {self._col(plan.hidden)} = {mark}"
        )
        cur = conn.cursor()
        try:
            cur.row_factory = None  # tuples, whatever the connection's factory
            row = cur.execute(sql, self._merged(names, values)).fetchone()
        except sqlite3.OperationalError as exc:
            if _not_utf8(exc) is None:
                raise
            # The page decoded the text of the row it ended on: this is another.
            raise _moved() from exc
        finally:
            cur.close()
        if row is None or self._row_print(self._dicts(plan, [row])[0]) != position[n]:
            raise _moved()

    def _row_print(self, item: Row) -> str:
        return _row_print(item.values(), self._utf8)

    def _inner_sql(self, plan: _Plan) -> str:
        if plan.hidden:
            rowid = f"SELECT *, {self._rowid} AS {quote_ident(plan.hidden)}"
            return self._inner.replace("SELECT *", rowid, 1)
        return self._inner

    def _no_limit(self) -> str:
        return " LIMIT -1"  # SQLite accepts OFFSET only after a LIMIT

    def _row_order(self, plan: _Plan) -> str:
        # Every value compares in SQLite (NULL, numbers, text, blobs, in that order).
        return ", ".join(self._col(name) for name in plan.columns)

    def _null_safe_eq(self, col: str, mark: str) -> str:
        return f"{col} IS {mark}"  # IS compares as = does, by the column's collation

    def _nulls_first(self, desc: bool) -> bool:
        return not desc  # NULL is SQLite's smallest value

    def _held(self) -> threading.RLock:
        """The source's lock; made anew in a forked child, where one that another thread
        held at the fork would never be released."""
        if self._lock_pid != os.getpid():
            self._lock, self._lock_pid = threading.RLock(), os.getpid()
        return self._lock

    def _connection(self) -> sqlite3.Connection:
        if self._conn is not None:
            factory = self._conn.text_factory
            if factory is not str and not isinstance(factory(b"id"), str):
                # Keys, names and positions must be text: as bytes a key would be bound
                # as a BLOB, which sorts after every text.
                raise LimitError(
                    "connection",
                    f"text_factory={factory!r}",
                    "must read text as str (str, the default, or a function that returns "
                    "str): give the source a connection of its own, or the database's path",
                )
            return self._conn
        with self._held():
            assert self._path is not None
            # A file moved over the path (os.replace, the usual atomic refresh) is another
            # database: the connection, which holds the old file open, would serve it for
            # the source's life. Seen by the path's inode, and opened anew (`_reopen`).
            if self._own is None or self._pid != os.getpid() or self._file != _file_id(self._path):
                self._reopen(self._path)
            assert self._own is not None
            return self._own

    def _reopen(self, path: str) -> None:
        """Open the own connection on *path*, dropping one to a file no longer there."""
        # Read-only: paging must never create or change the database. A connection
        # inherited through fork is never used: the child opens its own. An old one is
        # not closed here: an open() iterator may still be reading it (it closes with
        # the last reference, `Closing`).
        before = _file_id(path)
        _check_regular(path)
        uri = "file:" + _uri_path(path) + "?mode=ro"
        own = sqlite3.connect(uri, uri=True, check_same_thread=False)
        # A file replaced while this ran leaves the id unknown: the next page opens anew.
        after = _file_id(path)
        self._length = own.getlimit(sqlite3.SQLITE_LIMIT_LENGTH)
        if self._file != before:
            # What was learned of another file (columns, keys, blob I/O) is not this one's.
            self._plans.clear()
            self._layout = None
        self._own, self._pid = own, os.getpid()
        self._closing = Closing(own)
        self._readers = (*(r for r in self._readers if r() is not None), weakref.ref(self._closing))
        self._file = before if before == after else None
        self._ahead.clear()  # their tokens are another connection's counters

    def _iter(
        self,
        plan: _Plan,
        sql: str,
        params: Params,
        limit_hint: int | None,
        start: int,
        *,
        position: Position | None,
    ) -> Generator[tuple[Row, Position], None, None]:
        with self._held():
            # The file may have been replaced since open() took its plan (and another
            # thread's page may have opened it anew): the query is written again from
            # the plan of the file this connection reads (`_opened`), cut as *plan* is
            # (`_resume` reads with every cell cut short).
            conn, now, _ = self._opened(plan.longest or None)
            if now is not plan:
                plan = now
                sql, params = self._sql(plan, position, limit_hint)
            cur = conn.cursor()
            # Held by the iterator: the connection stays open while it reads, even if
            # the source reopens its path meanwhile, and closes after the last reader.
            closing = self._closing if conn is self._own else None
        serial = _Serial(cur, self._held())
        try:
            cur.row_factory = None  # tuples, whatever the connection's factory
            serial.execute(sql, params)
            rows = self._rows(plan, serial, limit_hint)
            yield from (rows if self._mode == "keyset" else _offset_rows(rows, start))
        except sqlite3.OperationalError as exc:
            bad = _not_utf8(exc)
            if bad is None:
                raise
            raise bad from exc
        finally:
            serial.close()  # its cursor, `cur` or the one it read on with (`_before`)
            del closing

    def _fill(
        self,
        builder: Filler,
        cut: int,
        *,
        key: _AheadKey,
        position: Position | None,
        limit_hint: int | None,
        start: int,
    ) -> tuple[bool, Position | None]:
        with self._held():  # see `_lock`
            # Read before the fetch: equal counters at the next page prove that nothing
            # was written in between, so the row left over is still the next one.
            conn, plan, token = self._opened(cut, check=True)
            if self._mode == "keyset":
                self._check_row(conn, plan, position)
            # Held by the page: a close() of this thread's (from code the page calls)
            # leaves the connection open under its statement until the page ends.
            closing = self._closing if conn is self._own else None
            cur = conn.cursor()
            # On its own connection the source reads cells bare, under a length limit at the
            # cut's bound, which costs SQLite a fifth less than the cut select a row; a
            # longer value stops the query, which runs again cut (`_run`). A caller's
            # connection is left as it is. Without an ORDER BY the rows come in the order
            # of the plan SQLite picks for each form of the query (the blob read's rowids
            # by a covering index, the rows by a scan): offsets count in one form only.
            bare = (
                conn is self._own
                and bool(plan.bare)
                and bool(plan.keys)
                and plan.longest < self._length
            )
            try:
                cur.row_factory = None
                carried, size = self._kept(key, token)
                chunks = _Chunks(
                    self,
                    plan,
                    cur,
                    position,
                    start,
                    carried=carried,
                    carried_bytes=size,
                    budget=page_budget(builder, 1 << 62),
                    bare=bare,
                )
                if bare:
                    conn.setlimit(sqlite3.SQLITE_LIMIT_LENGTH, plan.longest)
                more, after, ahead = self._fill_rows(
                    builder, plan, chunks, limit_hint=limit_hint, start=start, position=position
                )
            except sqlite3.OperationalError as exc:
                bad = _not_utf8(exc)
                if bad is None:
                    raise
                raise bad from exc
            finally:
                cur.close()
                if bare:
                    conn.setlimit(sqlite3.SQLITE_LIMIT_LENGTH, self._length)
                del closing
            self._keep(key, position if after is None else after, ahead, token)
            return more, after

    def _run(
        self,
        chunks: _Chunks,
        cur: Any,
        queries: list[tuple[str, Params]],
        *,
        first: int | None = None,
    ) -> list[list[Any]]:
        """As `_SQLSource._run` (`_read`); where the rows meet a text value that is not
        UTF-8, the rows before it (`_readable`)."""
        try:
            return self._read(chunks, cur, queries, first=first)
        except sqlite3.OperationalError as exc:
            if _not_utf8(exc) is None:
                raise
        return self._readable(chunks, cur, queries, first=first)

    def _readable(
        self,
        chunks: _Chunks,
        cur: Any,
        queries: list[tuple[str, Params]],
        *,
        first: int | None,
    ) -> list[list[Any]]:
        """*queries*, whose last met a text value that is not UTF-8, run again, the last
        read a row at a time up to that row (its error then in `_Chunks.stopped`).

        sqlite3 decodes every row a fetch asks for and drops them all for one it cannot
        decode: one such row failed every page whose fetch reached it, the rows before
        it never served. Read with the cut select, as the rest of the page is: a bare
        read would stop at a long value too."""
        if chunks.bare:
            chunks.bare = False
            cur.connection.setlimit(sqlite3.SQLITE_LIMIT_LENGTH, self._length)
        if chunks.plan.bare:
            # Bare still where the cut select `_read` fell back to met the row: the
            # rewrite of *queries* was its own.
            bare, cut = _head(chunks.plan.bare), _head(chunks.plan.select)
            queries = [
                (cut + sql[len(bare) :] if sql.startswith(bare) else sql, params)
                for sql, params in queries
            ]
        *checks, (sql, params) = queries
        found = self._together(cur, checks) if checks else []
        cur.execute(sql, params)
        rows: list[Any] = []
        while first is None or len(rows) < first:
            try:
                row = cur.fetchone()
            except sqlite3.OperationalError as exc:
                bad = _not_utf8(exc)
                if bad is None:
                    raise
                bad.__cause__ = exc
                chunks.stopped = bad
                break
            if row is None:
                break
            rows.append(row)
        return [*found, rows]

    def _read(
        self,
        chunks: _Chunks,
        cur: Any,
        queries: list[tuple[str, Params]],
        *,
        first: int | None = None,
    ) -> list[list[Any]]:
        """As `_SQLSource._run`; where *chunks* read bare, a value over the length limit
        stops the query: a rowid table's rows are then read one at a time, a long cell
        through blob I/O (`_blob_rows`, which reads all the query asks for); anything
        else (or a key that long) runs the queries again with the cut select and no
        limit, and the rest of the page too."""
        plan = chunks.plan
        blobs = self._blobs is not None
        try:
            got = self._together(cur, queries, first=first)
        except sqlite3.DataError as exc:
            if not chunks.bare or exc.sqlite_errorcode != sqlite3.SQLITE_TOOBIG:
                raise
        except MemoryError:
            # SQLite's SQLITE_NOMEM: a value made past the lowered limit as it was read
            # (a default, see `_stored`), which no blob holds: the cut select reads it.
            if not chunks.bare:
                raise
            blobs = False
        else:
            return self._unslipped(plan, queries, got) if chunks.bare else got
        if blobs:
            try:
                got = [self._blob_rows(plan, cur, sql, params) for sql, params in queries]
                return self._unslipped(plan, queries, got)
            except sqlite3.DataError as exc:
                if exc.sqlite_errorcode != sqlite3.SQLITE_TOOBIG:
                    raise
        chunks.bare = False
        cur.connection.setlimit(sqlite3.SQLITE_LIMIT_LENGTH, self._length)
        bare, cut = _head(plan.bare), _head(plan.select)
        return self._together(
            cur,
            [
                (cut + sql[len(bare) :] if sql.startswith(bare) else sql, params)
                for sql, params in queries
            ],
            first=first,
        )

    def _more(self, chunks: _Chunks, cur: Any, n: int) -> list[Any] | None:
        """As `_SQLSource._more`; None where a bare read meets a value over the length
        limit (the next query, cut or by blob I/O, starts after the rows read), or a
        read meets a text value that is not UTF-8 (the next query reads the rows
        before it again, `_readable`)."""
        try:
            rows: list[Any] = cur.fetchmany(n)
        except sqlite3.DataError as exc:
            if not chunks.bare or exc.sqlite_errorcode != sqlite3.SQLITE_TOOBIG:
                raise
            return None
        except MemoryError:
            if not chunks.bare:
                raise
            return None  # as in `_read`: a value made past the limit; the cut select reads it
        except sqlite3.OperationalError as exc:
            if _not_utf8(exc) is None:
                raise
            return None
        if chunks.bare:
            _unslip(chunks.plan, rows)
        return rows

    @staticmethod
    def _unslipped(
        plan: _Plan, queries: list[tuple[str, Params]], results: list[list[Any]]
    ) -> list[list[Any]]:
        """*results* of *queries* read bare, each cell the length limit let through
        longer than it made the `Clipped` the cut select gives. SQLite checks the limit
        only where it grows a buffer, so a value on the row's own page a little over it
        (into the room a buffer an earlier value left has: 6 bytes past a 64-byte bound,
        measured) can pass; a longer one cannot. The rows of a query that selects no
        cell (a check of the order) are left as they are."""
        for (sql, _), rows in zip(queries, results, strict=True):
            if sql.startswith(_head(plan.bare)):
                _unslip(plan, rows)
        return results

    def _blob_rows(self, plan: _Plan, cur: Any, sql: str, params: Params) -> list[Any]:
        """The rows of bare query *sql* that a value over the length limit stopped, read
        without loading a long cell: their rowids in the query's order, then each row
        by its rowid, and, in a row that stops too, each cell; a cell over the limit is
        the `Clipped` the cut select gives (its size and first bytes, read by blob I/O).
        One read transaction holds them together. A query that selects no cell (a
        check of the order) runs with the limit lifted. A key over the limit stops this
        read too (`sqlite3.DataError`): keys are never cut."""
        assert self._blobs is not None
        _, _, rowid, alias = self._blobs
        conn = cur.connection
        inner = self._inner_sql(plan)
        bare = f"{_head(plan.bare)}\n{inner}\n) AS _jb_q"
        if not sql.startswith(bare):
            conn.setlimit(sqlite3.SQLITE_LIMIT_LENGTH, self._length)
            try:
                return cast(list[Any], cur.execute(sql, params).fetchall())
            finally:
                conn.setlimit(sqlite3.SQLITE_LIMIT_LENGTH, plan.longest)
        at = "_jb_q." + quote_ident(alias)
        with_rowid = inner.replace("SELECT *", f"SELECT *, {rowid} AS {quote_ident(alias)}", 1)
        src = f"FROM (\n{with_rowid}\n) AS _jb_q"
        one = f"SELECT {plan.bare} {src} WHERE {at} = ?"
        cur.execute("BEGIN")
        try:
            ids = cur.execute(f"SELECT {at} {src}{sql[len(bare) :]}", params).fetchall()
            rows = []
            for (row_id,) in ids:
                try:
                    rows.append(cur.execute(one, (row_id,)).fetchone())
                except sqlite3.DataError as exc:
                    if exc.sqlite_errorcode != sqlite3.SQLITE_TOOBIG:
                        raise
                    rows.append(self._blob_cells(plan, cur, f"{src} WHERE {at} = ?", row_id))
        finally:
            cur.execute("COMMIT")
        return rows

    def _key(self, value: object, i: int, plan: _Plan) -> JSONValue:  # type: ignore[override]
        names = [*plan.columns, plan.hidden] if plan.hidden else plan.columns
        if value is not None and type(value) not in _SQLITE_TYPES:
            # A converter of the connection's (detect_types) made it: the position would
            # be the converted value's text, not the text SQLite stores and compares.
            raise LimitError(
                "connection",
                f"order_by column {names[i]!r} read as {type(value).__name__}",
                "must return order_by columns as SQLite stores them: the connection "
                "converts them (detect_types); give the source a connection without "
                "converters, or the database's path",
            )
        if type(value) is str and self._conn is not None and self._conn.text_factory is not str:
            self._check_stored(value, names[i], plan)
        return _SQLSource._key(value, i, plan)

    def _check_stored(self, value: str, name: str, plan: _Plan) -> None:
        """Refuse a text key that the connection's own `text_factory` decoded to text
        other than what SQLite stores (bytes that are not UTF-8, read "replace"d or as
        latin-1): bound back in a position, it compares as other text, and pages skipped
        rows (complete) or served one row forever. One query a position."""
        try:
            value.encode("utf-8")  # lone surrogates (surrogateescape): sqlite3 cannot bind
        except UnicodeEncodeError:
            found = None
        else:
            found = self._row_storing(value, name, plan)
        if found is None:
            raise LimitError(
                "connection",
                f"order_by column {name!r} read as {value[:40]!r}",
                "must read order_by text as SQLite stores it: the connection's "
                "text_factory decoded bytes that are not UTF-8 to other text, which a "
                "cursor position would not find again; order by columns that hold UTF-8 "
                "text or no text (such as the rowid)",
            )

    def _row_storing(self, value: str, name: str, plan: _Plan) -> tuple[Any, ...] | None:
        """A row of the result whose *name* is stored as *value*'s UTF-8 bytes, or None."""
        names: list[str] = []
        values: list[object] = []
        bind = self._binder(names, values)
        col = self._col(name)
        # The first test may use an index on the column; the second makes it bytewise.
        sql = (
            f"SELECT 1 FROM (\n{self._inner_sql(plan)}\n) AS _jb_q WHERE {col} = {bind(value)}"
            f" AND CAST({col} AS BLOB) = CAST({bind(value)} AS BLOB) LIMIT 1"
        )
        cur = self._connection().cursor()
        try:
            cur.row_factory = None  # the caller's factory is for the caller's queries
            row: tuple[Any, ...] | None = cur.execute(sql, self._merged(names, values)).fetchone()
        finally:
            cur.close()
        return row

    def _blob_cells(self, plan: _Plan, cur: Any, where: str, row_id: int) -> tuple[Any, ...]:
        """The row *row_id* (``FROM … WHERE`` its rowid: *where*) a cell at a time, a cell
        over the length limit as a `Clipped` read by blob I/O (see `_blob_rows`)."""
        assert self._blobs is not None
        schema, table, _, _ = self._blobs
        conn = cur.connection
        names = [*plan.columns, plan.hidden] if plan.hidden else plan.columns
        cells: list[Any] = []
        for i, name in enumerate(names):
            try:
                cells.append(
                    cur.execute(f"SELECT {self._col(name)} {where}", (row_id,)).fetchone()[0]
                )
            except sqlite3.DataError as exc:
                if exc.sqlite_errorcode != sqlite3.SQLITE_TOOBIG or i not in plan.long_at:
                    raise
                # typeof() does not read a value kept on overflow pages (a long one), but
                # one on the row's own page is read, and stopped by the limit: lifted.
                conn.setlimit(sqlite3.SQLITE_LIMIT_LENGTH, self._length)
                try:
                    kind = cur.execute(
                        f"SELECT typeof({self._col(name)}) {where}", (row_id,)
                    ).fetchone()
                finally:
                    conn.setlimit(sqlite3.SQLITE_LIMIT_LENGTH, plan.longest)
                # The blob handle reads the size and a prefix, never the rest.
                blob = conn.blobopen(table, name, row_id, readonly=True, name=schema)
                with blob:
                    size, head = len(blob), blob.read(plan.longest)
                text = kind[0] == "text"
                cells.append(Clipped(_text_head(head) if text else head, size, "bytes"))
        return tuple(cells)

    @staticmethod
    def _changes_and_layout(
        conn: sqlite3.Connection, cur: sqlite3.Cursor
    ) -> tuple[Hashable, Hashable]:
        """The token of the rows kept ahead, and the layout: each database's name, file
        and ``schema_version``, which the plans are made of (`_opened`).

        The token is what changes whenever the database does: its commits by any other
        connection (``PRAGMA data_version`` of each attached database), this connection's own
        writes (``total_changes``) and its schema changes (``schema_version``, which
        ``total_changes`` does not count: a table dropped and another renamed to its
        name).

        None (nothing is kept or used, as on PostgreSQL) inside a transaction: a
        rollback takes back its writes but not the counters, so rows read there may
        never have been, and the rows would pass for current after it. (Rows kept before
        a transaction that writes are not used after it, rolled back or not: its writes
        moved ``total_changes``.)

        The attached databases' names and files count too, each file by its inode: a
        database detached and another file attached under its name (a dataset
        refreshed with ``os.replace``) starts counters of its own, which may be equal;
        None where a file's name cannot be read exactly (`_file_name`)."""
        # A file's name as its bytes: a POSIX name that is not UTF-8 read as text fails
        # to decode (whatever the connection's text_factory is, the bytes are the OS's).
        attached = cur.execute(
            "SELECT seq, name, CAST(file AS BLOB), (SELECT encoding FROM pragma_encoding)"
            " FROM pragma_database_list"
        ).fetchall()
        schemas = [row[1] for row in attached]
        layout = tuple(
            (name, stored, cur.execute(f"PRAGMA {quote_ident(name)}.schema_version").fetchone()[0])
            for _, name, stored, _ in attached
        )
        if conn.in_transaction:
            return None, layout
        files = []
        for _, name, stored, encoding in attached:
            path = _file_name(stored, encoding)
            if path is None:
                return None, layout  # a file not known by its name could be replaced unseen
            files.append((name, path, _file_id(path)))
        versions = tuple(
            cur.execute(f"PRAGMA {quote_ident(name)}.data_version").fetchone()[0]
            for name in schemas
            if name != "temp"  # private to this connection: its writes are total_changes
        )
        return (conn.total_changes, versions, layout, tuple(files)), layout

    def _make_plan(self, cut: int | None) -> _Plan:
        # Its statements too must not run under another page's limit (`_lock`); made
        # for the connection `_opened` checked, under the lock held since.
        with self._held():
            conn = self._live()
            cur = conn.cursor()
            try:
                cur.row_factory = None
                probe = f"SELECT * FROM (\n{self._inner}\n) AS _jb_q LIMIT 0"
                cur.execute(probe, self._params)
                columns = [d[0] for d in cur.description]
                converted: frozenset[str] = frozenset()
                if conn is not self._own:
                    self._check_names(cur, columns)
                    converted = self._converted(cur, columns)
                utf8 = cur.execute("PRAGMA encoding").fetchone()[0] == "UTF-8"
                self._utf8 = utf8
            finally:
                cur.close()
            table_keys = None
            if self._table is not None and self._wants_table_keys:
                table_keys = self._table_keys(conn)
            # SQLite's types are per value: any column may hold a long text or blob.
            n = cut
            cuts: list[_Cut] = []
            for name in columns if n is not None else ():
                if name in converted:
                    continue  # read whole, as the connection converts it (`_converted`)
                col = self._col(name)
                if utf8:
                    # A value's size in bytes (a text cast to a blob is the same bytes) is
                    # known without reading it, and counts past a NUL, where length() and
                    # substr() stop. A cut cell arrives as one tagged blob (`_untag`): a
                    # length column per cell besides doubled SQLite's time a row.
                    size = f"length(CAST({col} AS BLOB))"
                    kind = f"CASE WHEN typeof({col}) = 'blob' THEN 'B' ELSE 'T' END"
                    tagged = (
                        f"CAST({kind} || printf('%0{_TAG_DIGITS}d', {size}) "
                        f"|| substr(CAST({col} AS BLOB), 1, {n}) AS BLOB)"
                    )
                    # Only a text or a blob compares >= '' (a number is less, NULL unknown):
                    # a number, always shorter than the bound, is not made text to be sized.
                    when = f"{col} >= '' COLLATE BINARY AND {size} > {n}"
                    value = f"CASE WHEN {when} THEN {tagged} ELSE {col} END"
                    cuts.append((name, value, None, None, "bytes"))
                    continue
                # UTF-16: length() counts characters of text and bytes of a blob, as substr()
                # cuts them, and stops at a NUL inside a text.
                when = f"length({col}) > {n}"
                cuts.append(
                    (
                        name,
                        f"CASE WHEN {when} THEN substr({col}, 1, {n}) ELSE {col} END",
                        f"CASE WHEN {when} THEN length({col}) END",
                        None,
                        None,
                    )
                )
            plan = self._resolve(columns, table_keys, cuts, longest=n or 0)
            if not self._stored(conn, n or 0):
                plan.bare = ""
            return plan

    def _converted(self, cur: sqlite3.Cursor, columns: list[str]) -> frozenset[str]:
        """The result columns a converter of the connection's (``detect_types``) reads.

        sqlite3 picks a column's converter by its declared type, which a column of the
        wrapped query keeps and an expression (the cut's ``CASE``) has not: cut, a column
        came back as stored text on the pages and converted from ``open()``. Such a
        column is therefore never cut, so that every path reads it as the connection
        converts it. Found by a row the converter is handed: a compound select takes
        its declared types from its first select (here without rows), so a marker
        value the second one gives comes back converted (or the converter raises) in
        a column that converts. One query a plan, on a caller's connection only; one
        per column where some converter reads the marker."""
        # Text: a converter is handed bytes, so even one that returns them is seen.
        marker = "\x00jsonbudget"

        def probe(names: list[str]) -> bool:
            bound: list[str] = []
            values: list[object] = []
            bind = self._binder(bound, values)
            sql = (
                f"SELECT {', '.join('_jb_p.' + self._ident(c) for c in names)}"
                f" FROM (\n{self._inner}\n) AS _jb_p"
                f" WHERE 0 UNION ALL SELECT {', '.join(bind(marker) for _ in names)}"
            )
            params = self._merged(bound, values)
            try:
                row = cur.execute(sql, params).fetchone()
            except sqlite3.Error:
                raise  # the query's own error, as the first page gives it
            except Exception:  # noqa: BLE001 - a converter's, whatever it raises
                return True
            return any(type(value) is not str or value != marker for value in row)

        if not columns or not probe(columns):
            return frozenset()
        return frozenset(c for c in columns if probe([c]))

    def _check_names(self, cur: sqlite3.Cursor, columns: list[str]) -> None:
        """Refuse a connection that cut a result column's name: with
        ``detect_types=PARSE_COLNAMES`` sqlite3 reads a name up to its ``[`` (``"created
        [timestamp]"`` as ``created``, choosing a converter by the rest), and the source's
        own query, which names each column, failed with "no such column". One query a
        plan, on such a connection only."""
        cur.execute('SELECT 1 AS "a [b]"')
        if cur.description[0][0] == "a [b]":
            return  # names are read whole
        select = ", ".join(self._col(name) for name in columns)
        try:
            cur.execute(f"SELECT {select} FROM (\n{self._inner}\n) AS _jb_q LIMIT 0", self._params)
        except sqlite3.OperationalError as exc:
            raise LimitError(
                "connection",
                "detect_types=PARSE_COLNAMES",
                "cuts a result column's name at its '[' (sqlite3 reads the rest as a "
                f"converter's name), so the column is not found by that name ({exc}): give "
                "the source a connection without PARSE_COLNAMES, or the database's path, "
                "or alias the column in a query",
            ) from None

    def _stored(self, conn: sqlite3.Connection, longest: int) -> bool:
        """Whether every column of the result is a value SQLite stored: the source reads
        an ordinary table (not a view, not a virtual table) without virtual generated
        columns, and no column's default is longer than *longest*. A value made by the
        query could be cut short or NULL under a length limit (printf() returns NULL
        past it) instead of stopping the query, so only such a result is read bare
        (`_fill`). Where the table has a rowid under a name no column takes, a long cell
        is read by blob I/O (`_blob_rows`).

        A column added by ``ALTER TABLE … ADD COLUMN … DEFAULT`` is not stored in the
        rows that were there before it: SQLite makes the default as it reads them, and
        one longer than the limit fails with ``SQLITE_NOMEM`` (a `MemoryError`), not
        ``SQLITE_TOOBIG``. Such a default is a literal (ADD COLUMN takes no
        expression), whose text is never shorter than its value."""
        self._blobs = None
        if self._table is None:
            return False
        name = self._table[-1]
        cur = conn.cursor()
        try:
            cur.row_factory = None
            found = _locate(cur, self._table)
            if found is None:
                return False
            schema, kind, without_rowid = found
            # (cid, name, type, notnull, default, pk, hidden): 2 is a virtual generated column
            xinfo = f"PRAGMA {_named(self._table)}table_xinfo({quote_ident(name)})"
            columns = cur.execute(xinfo).fetchall()
        finally:
            cur.close()
        stored = (
            kind == "table"
            and all(row[6] in (0, 3) for row in columns)
            and all(row[4] is None or len(row[4]) <= longest for row in columns)
        )
        taken = {row[1].lower() for row in columns}
        free = [alias for alias in ("rowid", "_rowid_", "oid") if alias not in taken]
        if stored and not without_rowid and free:
            alias = _BLOB_ROWID
            while alias.lower() in taken:
                alias += "_"
            self._blobs = (schema, name, free[0], alias)
        return stored

    def _table_keys(self, conn: sqlite3.Connection) -> _TableKeys:
        """What makes an order total here: unique column sets, the key to append.

        A set counts only where SQLite enforces it in the order's own terms: a unique
        index that is not partial, on NOT NULL columns (a rowid table's PRIMARY KEY allows
        NULL unless it is the INTEGER one), compared by the collations the columns sort
        by (unique under BINARY is not unique under NOCASE).
        """
        assert self._table is not None
        name = self._table[-1]
        cur = conn.cursor()
        try:
            cur.row_factory = None
            # Asked, not read from the CREATE text: "WITHOUT ROWID" may stand in a default
            # value or a comment of an ordinary table.
            schema, kind, without_rowid = _locate(cur, self._table) or ("main", "", False)
            # A virtual table (FTS5) has a rowid too; a view has none.
            is_table = kind not in ("", "view")
            prefix = _named(self._table)
            table = prefix + quote_ident(name)
            info = cur.execute(f"PRAGMA {prefix}table_info({quote_ident(name)})").fetchall()
            notnull = {row[1] for row in info if row[3]}
            pk = [row[1] for row in sorted((r for r in info if r[5]), key=lambda r: r[5])]
            indexes = cur.execute(f"PRAGMA {prefix}index_list({quote_ident(name)})").fetchall()
            # A rowid table's PRIMARY KEY is the rowid itself (never NULL) exactly when
            # SQLite made no index for it: `INTEGER PRIMARY KEY DESC` and `INT PRIMARY
            # KEY` are not the rowid and allow NULL, `PRIMARY KEY (k DESC)` on an INTEGER
            # column is.
            rowid_pk = (
                is_table and not without_rowid and bool(pk) and all(i[3] != "pk" for i in indexes)
            )
            if rowid_pk or without_rowid:
                notnull.update(pk)  # the rowid itself; WITHOUT ROWID enforces NOT NULL
            sorts_by = _sqlite_collations(cur, table, [row[1] for row in info])
            sets: list[list[str]] = []
            nullable: list[list[str]] = []
            pk_holds = bool(pk) and all(c in notnull for c in pk)
            for idx in indexes:
                # (seq, name, unique, origin, partial)
                if not idx[2] or idx[4]:
                    continue
                keys = [
                    (r[2], r[4])
                    for r in cur.execute(
                        # The table's schema: a name alone finds the first index of that
                        # name, which may be another schema's, of another table.
                        f"PRAGMA {quote_ident(schema)}.index_xinfo({quote_ident(idx[1])})"
                    ).fetchall()
                    if r[5]  # a key column, not the rowid or a covered one
                ]
                enforced = bool(keys) and all(
                    col is not None and _same_ties(sorts_by.get(col), coll) for col, coll in keys
                )
                cols = [col for col, _ in keys]
                holds = enforced and all(col in notnull for col in cols)
                if idx[3] == "pk":
                    pk_holds = pk_holds and holds
                if holds and idx[3] != "pk":
                    sets.append(cols)
                elif enforced and not holds:
                    nullable.append(cols)
        finally:
            cur.close()
        hidden = ""
        if pk_holds:
            sets.insert(0, pk)
            append = pk
        elif is_table and not without_rowid:
            taken = {row[1].lower() for row in info}
            free = [alias for alias in ("rowid", "_rowid_", "oid") if alias not in taken]
            self._rowid = free[0] if free else ""
            if free:
                # Under a name no column has: the result's own `_jb_rowid` would be read
                # as the tiebreaker instead.
                hidden = _ROWID
                while hidden.lower() in taken:
                    hidden += "_"
            append = [hidden] if free else []
        else:
            append = []
        return _TableKeys(sets, append, notnull, nullable, hidden)

    def describe(self) -> dict[str, JSONValue]:
        """As `_SQLSource.describe`, plus the database path when one was given."""
        out = self._describe()
        if self._path is not None:
            out |= described_path("database", self._path)
        return out


def _moved() -> InvalidCursor:
    """The error for a position whose rowid no longer names its row (`_check_row`). The
    rowid is part of the position, which cursor errors never quote."""
    return InvalidCursor(
        "the row the position ended on is no longer at its rowid: it was "
        "deleted or changed, or the table's rowids were renumbered (VACUUM may renumber "
        "the rows of a table without an INTEGER PRIMARY KEY), and rows after it would be "
        "skipped or served twice; start the listing again, and declare an INTEGER "
        "PRIMARY KEY (or order by a NOT NULL unique key) for cursors that outlive such "
        "changes"
    )


def _uri_path(path: str) -> str:
    """*path* as the part of a ``file:`` URI after the scheme, naming the same file.

    SQLite turns each %HH back into the one byte it names and hands the OS those bytes:
    so the bytes quoted are the OS's own (`os.fsencode`), which a POSIX name that is not
    UTF-8 (held as lone surrogates) has too, where its str would not encode. An empty
    authority goes first where the path has a slash: POSIX keeps a leading ``//`` that
    SQLite would read as a host.
    """
    from urllib.parse import quote  # noqa: PLC0415  # only path-mode sources need it

    quoted = quote(os.fsencode(path), safe="/")
    return "//" + quoted if quoted.startswith("/") else quoted


def _psycopg() -> None:
    """Bind psycopg in this module on first use, or say which extra installs it.

    Every PostgreSQL site calls this where it needs psycopg, so that ``import
    jsonbudget`` never imports it; mypy types the name from the import at the top.
    """
    global psycopg  # noqa: PLW0603 - the module name, bound only once PostgreSQL is used
    try:
        import psycopg  # noqa: PLC0415  # optional dependency, needed only here
    except ImportError as exc:
        raise missing_extra("postgres", "psycopg", "PostgresSource", cause=exc) from exc


#: PostgreSQL types cut as text (category S), as bytes, or through their text (json...).
_PG_BYTEA: Final = 17
_PG_AS_TEXT: Final = frozenset({114, 142, 3802})  # json, xml, jsonb
_PG_FLOAT4: Final = 700
_PG_FLOAT8: Final = 701
#: The most entries PostgreSQL takes in a select list (MaxTupleAttributeNumber).
_PG_MAX_TARGETS: Final = 1664


def _pg_text_unit(conn: psycopg.Connection[Any]) -> Literal["chars", "bytes"]:
    """The unit a cut text's length is counted in: UTF-8 bytes where the size the
    server stores (``octet_length``) is the UTF-8 size of the text the client reads,
    else characters (``length``).

    The stored size is in the *server's* encoding, whatever the client's: in a LATIN1
    or EUC_JP database read through a UTF-8 client it is not the UTF-8 size, and a cut
    counted by it passed for whole or claimed a wrong count. Counting bytes is cheaper
    (the size is in the value's header, where counting a UTF-8 text's characters
    reads all of it, seconds for 1 GB), so it is used where it is exact: a UTF8
    database (any client: the text is the same), and an SQL_ASCII one, which converts
    nothing, read as UTF-8. In a single-byte encoding ``length`` is the stored size too.
    """
    server = conn.info.parameter_status("server_encoding")
    if server == "UTF8" or (server == "SQL_ASCII" and conn.info.encoding == "utf-8"):
        return "bytes"
    return "chars"


#: The end of a UTF-8 text's bytes that holds a character's start without all of it: a
#: lead byte followed by fewer continuation bytes than it announces (at most 3 bytes).
_PG_UTF8_PARTIAL: Final = (
    r"E'(?:[\\xC0-\\xDF]|[\\xE0-\\xEF][\\x80-\\xBF]?|[\\xF0-\\xF7][\\x80-\\xBF]{0,2})$'"
)


def _utf8_left(text: str, n: int) -> str:
    """SQL for the characters whole in the first *n* bytes of *text*, in an SQL_ASCII
    database read as UTF-8: there ``left()`` counts bytes, and its head ended inside a
    multibyte character, which the server refused to send as UTF-8 (every page from that
    row on raised `DecodeError` for valid text). Its partial last character, found in
    the last 3 bytes (a slice, not the whole value), is dropped."""
    tail = f"substring({text} FROM {n - 2} FOR 3)"
    partial = f"coalesce(octet_length(substring({tail} FROM {_PG_UTF8_PARTIAL})), 0)"
    return f"left({text}, {n} - {partial})"


def _float_digits(conn: psycopg.Connection[Any]) -> int:
    """The session's ``extra_float_digits``: below 1, floats are written rounded."""
    _psycopg()

    # Not conn.execute(): its cursor makes rows by the caller's row_factory (dict_row).
    with conn.cursor(row_factory=psycopg.rows.tuple_row) as cur:
        row = cur.execute("SELECT current_setting('extra_float_digits')::int").fetchone()
    return int(row[0]) if row is not None else 1


#: date, timestamp and timestamptz: their text follows the session's DateStyle and
#: TimeZone (time and timetz are written alike in every style, with a numeric offset).
_PG_DATETIME: Final = frozenset({1082, 1114, 1184})
#: psycopg reads an interval as a timedelta, its months as 30 days and its years as 365,
#: while PostgreSQL compares a month as 30 days and a year as 360: a position written
#: from the timedelta does not compare as the row it came from.
_PG_INTERVAL: Final = 1186
#: Type categories whose values are bounded by their type, fetched whole: boolean,
#: date/time, enum, network address, numeric (a ``numeric`` has at most 147,457
#: characters), timespan. Every other type not cut as text or bytes is cut through its
#: text: its values may be as long as a cell (composites, ranges, multiranges, bit
#: strings, ``tsvector``, ``record``, any extension's type).
_PG_BOUNDED_CATEGORIES: Final = frozenset("BDEINT")
#: Bounded types of other categories: the fixed-size geometric types (point, lseg, box,
#: line, circle), uuid, macaddr, macaddr8, pg_lsn, "char", tid, xid, cid, xid8.
_PG_BOUNDED: Final = frozenset(
    {600, 601, 603, 628, 718, 2950, 829, 774, 3220, 18, 27, 28, 29, 5069}
)


class _KeyText(str):
    """A key's text the source binds (a position's ``{"text": …}``, a text key): sent
    with the *unknown* type, which PostgreSQL casts to the column's, whatever dumper the
    application registered for `str` (psycopg's `StrDumper` sends text, and ``numeric >
    text`` has no operator)."""

    __slots__ = ()


@functools.cache
def _default_adapters() -> Any:
    """psycopg's built-in adapters, as a new connection has them before an application
    registers its own (`psycopg.adapters` is changed by a global registration)."""
    _psycopg()

    adapters = psycopg.adapt.AdaptersMap(types=psycopg.postgres.types)
    psycopg.postgres.register_default_adapters(adapters)
    return adapters


def _row_cursor(
    conn: psycopg.Connection[Any], name: str = "", key_oids: frozenset[int] = frozenset()
) -> Any:
    """A cursor of *conn* that makes tuples (whatever the connection's row factory) and
    reads the dates PostgreSQL calls infinite (`_infinite`).

    The order columns' types (*key_oids*) are read with psycopg's built-in loaders,
    whatever the connection registered: a position is built from those values and must
    name the stored value (a ``numeric`` read as float compared as ``float8``, where
    0.1 and 0.10000000000000000001 tie, and skipped rows; an enum read as a Python
    `Enum` wrote ``Mood.ok`` into the position). The other columns are read as the
    connection reads them."""
    _psycopg()
    from psycopg.types.string import StrDumperUnknown  # noqa: PLC0415  # optional dependency

    tuples = psycopg.rows.tuple_row
    cur = conn.cursor(name, row_factory=tuples) if name else conn.cursor(row_factory=tuples)
    adapters = cur.adapters
    adapters.register_dumper(_KeyText, StrDumperUnknown)
    if key_oids:
        text = psycopg.pq.Format.TEXT
        defaults = _default_adapters()
        # A type psycopg has no loader of its own for (an enum) is read as text.
        unknown = defaults.get_loader(0, text)
        for oid in key_oids:
            adapters.register_loader(oid, defaults.get_loader(oid, text) or unknown)
    for type_name in _PG_REFUSED:
        base = adapters.get_loader(adapters.types[type_name].oid, psycopg.pq.Format.TEXT)
        if base is not None:
            adapters.register_loader(type_name, _infinite(base))
    for type_name in ("json", "jsonb"):
        base = adapters.get_loader(adapters.types[type_name].oid, psycopg.pq.Format.TEXT)
        if base is not None and _stock_json(base):
            adapters.register_loader(type_name, _json_text_loader())
    return cur


#: Types whose values psycopg's loaders refuse for some valid value, or for every value
#: under some session setting (`_infinite`).
_PG_REFUSED: Final = ("date", "timestamp", "timestamptz", "time", "timetz", "interval")


def _stock_json(loader: type[Any]) -> bool:
    """Whether *loader* is psycopg's own for json or jsonb with the stdlib's
    ``json.loads``, which recurses: a document nested about a thousand levels deep
    raised RecursionError, which failed every page whose fetch held its row. A loader
    the application registered (``set_json_loads``, its own class) is its choice."""
    import json  # noqa: PLC0415  # only to recognize psycopg's default

    _psycopg()
    from psycopg.types.json import JsonbLoader, JsonLoader  # noqa: PLC0415  # optional

    return loader in (JsonLoader, JsonbLoader) and loader._loads is json.loads


@functools.cache
def _json_text_loader() -> type[Any]:
    _psycopg()
    from psycopg.adapt import Loader  # noqa: PLC0415  # optional dependency

    class JsonText(Loader):
        """A json or jsonb value as `load_json` reads it: orjson where it reads it
        exactly, else without recursion, containers past `MAX_DEPTH` as markers."""

        def load(self, data: Any) -> Any:
            return load_json(data)

    return JsonText


@functools.cache
def _infinite(base: type[Any]) -> type[Any]:
    """A text loader of a date, time or interval type that reads what Python's types
    cannot hold as the text PostgreSQL wrote (its own JSON for them, and a key value it
    casts back exactly) and every other value as *base*, the loader it stands in for:
    ``infinity`` and ``-infinity``, a year past 9999 or before 1, a time of
    ``24:00:00``, an interval past a timedelta's 999,999,999 days. psycopg refuses them
    ("timestamp too large"), which failed every page whose fetch held the row. So is
    every value psycopg cannot parse in the session's style (a ``timestamptz`` under
    ``DateStyle`` SQL, an interval under ``IntervalStyle`` iso_8601), which it refuses
    with NotImplementedError."""
    _psycopg()
    from psycopg.adapt import Loader  # noqa: PLC0415  # optional dependency

    class Infinite(Loader):
        def __init__(self, oid: int, context: Any = None) -> None:
            super().__init__(oid, context)
            self._inner = base(oid, context)

        def load(self, data: Any) -> Any:
            try:
                return self._inner.load(data)
            except (psycopg.DataError, NotImplementedError):
                return bytes(data).decode("utf-8", "replace")

    return Infinite


def _interrupted(exc: BaseException | None) -> bool:
    """Whether *exc*, or one it was raised while handling, is not an `Exception`
    (KeyboardInterrupt, SystemExit, asyncio.CancelledError), except GeneratorExit, which
    only ever lands at a source's own ``yield``. Such an exception can land inside
    psycopg, between sending a command and reading its result or between entering a
    pipeline or a transaction and recording it, which psycopg does not undo: every later
    query on the connection fails ("another command is already in progress"). A rollback
    that fails on such a connection may replace it with its own error, hence the chain."""
    while exc is not None:
        if not isinstance(exc, Exception | GeneratorExit):
            return True
        exc = exc.__context__
    return False


def _check_not_stuck(conn: psycopg.Connection[Any]) -> None:
    """Refuse a caller's connection left with a command whose result nobody reads, or in
    pipeline mode with no pipeline to sync it (an interrupted page, `_interrupted`):
    psycopg would refuse every query on it, each error adding a line to the last (a page
    never runs in a caller's pipeline either). A command another thread is running holds
    the connection's lock: that connection is only busy."""
    _psycopg()

    if conn.closed or not conn.lock.acquire(blocking=False):
        return
    try:
        status, pipeline = conn.info.transaction_status, conn.info.pipeline_status
    finally:
        conn.lock.release()
    if status == psycopg.pq.TransactionStatus.ACTIVE or pipeline != psycopg.pq.PipelineStatus.OFF:
        raise LimitError(
            "connection",
            f"status {status.name}, pipeline {pipeline.name}",
            "is busy with a command whose result was never read, or left in pipeline "
            "mode, as an interrupted page (KeyboardInterrupt) can leave it: no page can "
            "run on it; close it and give the source another connection (a source given "
            "a conninfo or a pool replaces its own)",
        )


#: SQLSTATEs of a row the client encoding cannot hold: bytes not valid in it (an
#: SQL_ASCII database read as UTF-8: character_not_in_repertoire), a character it has not
#: (a UTF8 database read as LATIN1: untranslatable_character).
_PG_UNREADABLE: Final = frozenset({"22021", "22P05"})


def _unreadable(exc: Exception) -> DecodeError | None:
    """The server's error for a row it cannot send in the client encoding, as the
    `DecodeError` it is; None for any other error."""
    if getattr(exc, "sqlstate", None) not in _PG_UNREADABLE:
        return None
    return DecodeError(
        f"a PostgreSQL row holds text the client encoding cannot hold ({exc}); to read "
        "it, set the client encoding the text is in (an SQL_ASCII database read as "
        "LATIN1 reads any byte), or page a query that reads the column as bytes, such "
        "as SELECT id, col::bytea AS col FROM tbl",
        offset=None,
    )


@contextlib.contextmanager
def _unreadable_raised() -> Iterator[None]:
    """Raise the server's error for a row it cannot send in the client encoding as the
    `DecodeError` it is (`_unreadable`), any other error as it is."""
    _psycopg()

    try:
        yield
    except psycopg.DataError as exc:
        bad = _unreadable(exc)
        if bad is None:
            raise
        raise bad from exc


def _unaborted(conn: psycopg.Connection[Any], savepoint: str | None = None) -> bool:
    """Whether *conn* can run a failed statement again: it is outside any transaction
    (autocommit), so that none was aborted, or the statement ran in the page's
    *savepoint* in the caller's transaction, which is rolled back to here: that undoes
    the failure and the page's own reads, nothing of the caller's."""
    _psycopg()

    status = conn.info.transaction_status
    if status == psycopg.pq.TransactionStatus.IDLE:
        return True
    if savepoint is None or status != psycopg.pq.TransactionStatus.INERROR:
        return False
    # ROLLBACK TO keeps the savepoint: the page's transaction block still releases it.
    name = psycopg.sql.Identifier(savepoint)
    conn.execute(psycopg.sql.SQL("ROLLBACK TO SAVEPOINT {}").format(name))
    return True


class _InSavepoints:
    """A server-side cursor in a transaction the caller opened (`open()`), each of whose
    statements runs in a savepoint: one that fails (a row the client encoding cannot
    hold, a timeout) rolls back to it and raises, aborting nothing of the caller's, and
    what they run on the connection between two rows stays theirs.

    One savepoint a statement, not one an iterator: psycopg ends savepoints in the order
    they began, so two iterators read side by side (or one closed after another began)
    ended theirs out of order, and the caller's commit was refused while one was open.
    A cursor a failed FETCH leaves is closed by PostgreSQL's rollback rules to no use;
    the iterator raises there, as it would have anyway."""

    __slots__ = ("_cur",)

    def __init__(self, cur: Any) -> None:
        self._cur = cur

    def execute(self, sql: str, params: Params) -> None:
        with self._cur.connection.transaction():
            self._cur.execute(sql, params)

    def fetchmany(self, size: int) -> list[Any]:
        with self._cur.connection.transaction():
            return cast("list[Any]", self._cur.fetchmany(size))


def _check_client_encoding(conn: psycopg.Connection[Any]) -> None:
    """Refuse a connection whose client encoding is SQL_ASCII (an SQL_ASCII database's
    default): psycopg reads every text there, column names included, as bytes, so a
    table's order column was not found among the names and a query's text all came out
    as byte markers. Which encoding the bytes are in only the application knows."""
    encoding = conn.info.parameter_status("client_encoding")
    if encoding == "SQL_ASCII":
        raise LimitError(
            "connection",
            f"client_encoding={encoding}",
            "has psycopg read text and column names as bytes, which no page can "
            "use: set the client encoding the database's text is in, such as "
            "client_encoding=UTF8 in the conninfo (or LATIN1, which reads any byte), "
            "or SET client_encoding on the connection",
        )


class PostgresSource(_SQLSource):
    """Rows of a PostgreSQL table or query, streamed through a server-side cursor.

    *conninfo_or_connection* is a libpq connection string (one connection is opened on
    the first page and kept until `close()`), an open `psycopg.Connection` (used as is,
    never closed), or a `psycopg_pool.ConnectionPool` (each page borrows a connection).
    psycopg is imported only when this class is used.
    """

    __slots__ = (
        "_closing",
        "_conn",
        "_conninfo",
        "_float_key",
        "_key_oids",
        "_own",
        "_pid",
        "_pool",
    )
    _kind = "postgres"

    def __init__(
        self,
        conninfo_or_connection: str | psycopg.Connection[Any] | Any,
        *,
        table: str | Sequence[str] | None = None,
        query: str | None = None,
        params: Params = (),
        order_by: Sequence[str] | None = None,
        mode: Literal["keyset", "offset"] = "keyset",
        unique: bool = False,
        batch_size: int = DEFAULT_BATCH_SIZE,
        max_cell_bytes: int | None = None,
    ) -> None:
        _psycopg()

        super().__init__(
            table=table,
            query=query,
            params=params,
            order_by=order_by,
            mode=mode,
            unique=unique,
            batch_size=batch_size,
            max_cell_bytes=max_cell_bytes,
        )
        self._conn: psycopg.Connection[Any] | None = None
        self._conninfo: str | None = None
        self._pool: Any = None
        # The types of the order columns, read with psycopg's own loaders (`_row_cursor`).
        self._key_oids: frozenset[int] = frozenset()
        # A keyset order's float column: checked on every page (`_check_float_digits`).
        self._float_key: str | None = None
        self._own: psycopg.Connection[Any] | None = None
        # Closes `_own` when the source is dropped unclosed: psycopg warns of a connection
        # deleted open, and this source opened it, so no caller could have closed it.
        self._closing: Closing[psycopg.Connection[Any]] | None = None
        self._pid = 0
        if isinstance(conninfo_or_connection, psycopg.Connection):
            self._conn = conninfo_or_connection
        elif isinstance(conninfo_or_connection, str):
            self._conninfo = conninfo_or_connection
        elif callable(getattr(conninfo_or_connection, "connection", None)) and hasattr(
            conninfo_or_connection, "getconn"
        ):
            self._pool = conninfo_or_connection
        else:
            raise TypeError(
                "PostgresSource needs a conninfo string, a psycopg.Connection or a "
                f"psycopg_pool.ConnectionPool, not {type(conninfo_or_connection).__name__}"
            )

    def _placeholder(self, name: str) -> str:
        return f"%({name})s" if self._named else "%s"

    def _ident(self, name: str) -> str:
        # psycopg reads "%" as a placeholder wherever parameters are passed, which is
        # every statement here: a "%" in a name (a column "margin %") must be "%%".
        return quote_ident(name).replace("%", "%%")

    def _row_order(self, plan: _Plan) -> str:
        # The whole row as text: JSON, XML and geometric columns have no ordering of
        # their own, and rows with the same text are written alike.
        return "_jb_q::text"

    def _nulls_first(self, desc: bool) -> bool:
        return desc  # NULL is PostgreSQL's largest value

    def _null_safe_eq(self, col: str, mark: str) -> str:
        return f"{col} IS NOT DISTINCT FROM {mark}"

    def _binder(self, names: list[str], values: list[object]) -> Callable[[object], str]:
        bind = super()._binder(names, values)
        # A key's text goes as unknown, whatever the connection dumps str as (`_KeyText`).
        return lambda value: bind(_KeyText(value) if type(value) is str else value)

    def _connection(self) -> psycopg.Connection[Any]:
        _psycopg()

        if self._conn is not None:
            _check_not_stuck(self._conn)
            return self._conn
        own = self._own
        if own is None or own.closed or own.broken or self._pid != os.getpid():
            assert self._conninfo is not None
            # Autocommit: fill()'s bounded queries need no transaction, and open() makes
            # its own for the server-side cursor.
            self._own = own = psycopg.connect(self._conninfo, autocommit=True)
            self._closing = Closing(own)
            # Floats written exactly, whatever the database or role sets (before
            # PostgreSQL 12 the default rounded them): a float key must come back as it is.
            own.execute("SET extra_float_digits = 3")
            self._pid = os.getpid()
        return own

    def _iter(
        self,
        plan: _Plan,
        sql: str,
        params: Params,
        limit_hint: int | None,
        start: int,
        *,
        position: Position | None,
    ) -> Generator[tuple[Row, Position], None, None]:
        if self._pool is not None:
            with self._pool.connection() as conn, self._discarding(conn):
                yield from self._page(conn, plan, sql, params, limit_hint=limit_hint, start=start)
        else:
            conn = self._connection()
            with self._discarding(conn):
                yield from self._page(conn, plan, sql, params, limit_hint=limit_hint, start=start)

    @contextlib.contextmanager
    def _discarding(self, conn: psycopg.Connection[Any]) -> Iterator[None]:
        """Close *conn* where an interrupt may have left it mid-command (`_interrupted`)
        and it is not the caller's: the next page opens another, and a pool, handed it
        back closed, replaces it. A caller's connection is left as it is, and refused by
        the next page if it is stuck (`_check_not_stuck`)."""
        try:
            yield
        except BaseException as exc:
            if conn is not self._conn and _interrupted(exc):
                conn.close()
            raise

    def _page(
        self,
        conn: psycopg.Connection[Any],
        plan: _Plan,
        sql: str,
        params: Params,
        *,
        limit_hint: int | None,
        start: int,
    ) -> Iterator[tuple[Row, Position]]:
        _psycopg()
        # Checked on each page too: a pool's connections, or a SET since the plan.
        _check_client_encoding(conn)
        self._check_float_digits(conn)
        # A server-side cursor lives in a transaction: ours where none is open, else the
        # caller's, each statement there in a savepoint (`_InSavepoints`).
        idle = conn.info.transaction_status == psycopg.pq.TransactionStatus.IDLE
        with _unreadable_raised(), conn.transaction() if idle else contextlib.nullcontext():
            name = "jsonbudget_" + secrets.token_hex(8)
            with _row_cursor(conn, name=name, key_oids=self._key_oids) as cur:
                reader = cur if idle else _InSavepoints(cur)
                reader.execute(sql, params)
                rows = self._rows(plan, reader, limit_hint)
                yield from (rows if self._mode == "keyset" else _offset_rows(rows, start))

    def _fill(
        self,
        builder: Filler,
        cut: int,
        *,
        key: _AheadKey,
        position: Position | None,
        limit_hint: int | None,
        start: int,
    ) -> tuple[bool, Position | None]:
        with _unreadable_raised():
            return self._fill_on(
                builder, cut, key=key, position=position, limit_hint=limit_hint, start=start
            )

    def _fill_on(
        self,
        builder: Filler,
        cut: int,
        *,
        key: _AheadKey,
        position: Position | None,
        limit_hint: int | None,
        start: int,
    ) -> tuple[bool, Position | None]:
        """`_fill`, whose errors for a row the client encoding cannot hold it raises as
        `DecodeError` (`_unreadable`)."""
        _psycopg()

        plan = self._plan_for(cut)
        with contextlib.ExitStack() as stack:
            if self._pool is not None:
                conn = stack.enter_context(self._pool.connection())
            else:
                conn = self._connection()
            # Inside the pool's: the connection is closed before it goes back.
            stack.enter_context(self._discarding(conn))
            _check_client_encoding(conn)  # a pool's connections, or a SET since the plan
            idle = conn.info.transaction_status == psycopg.pq.TransactionStatus.IDLE
            savepoint = None
            if idle and not conn.autocommit:
                stack.enter_context(conn.transaction())  # leave no transaction open
            elif not idle:
                # The caller's transaction: a statement of the page's that fails aborts
                # the savepoint, not the transaction (`_unaborted`).
                savepoint = stack.enter_context(conn.transaction()).savepoint_name
            cur = stack.enter_context(_row_cursor(conn, key_oids=self._key_oids))
            carried, kept, size = self._ahead.get(key)
            chunks = _Chunks(
                self,
                plan,
                cur,
                position,
                start,
                carried=carried,
                carried_bytes=size,
                budget=page_budget(builder, 1 << 62),
            )
            chunks.savepoint = savepoint
            token = None
            if idle:
                first = self._first_batch(limit_hint, plan, chunks)
                token = self._snapshot(conn, cur, chunks, first)
            else:
                self._check_float_digits(conn)
            # Inside the caller's transaction its own writes leave the snapshot as it
            # is: keep nothing there. (Without carried rows the query sent stands.)
            if carried and not _unchanged(kept, token):
                chunks.drop_carried()
            more, after, ahead = self._fill_rows(
                builder, plan, chunks, limit_hint=limit_hint, start=start, position=position
            )
        self._keep(key, position if after is None else after, ahead, token)
        return more, after

    def _together(
        self, cur: Any, queries: list[tuple[str, Params]], *, first: int | None = None
    ) -> list[list[Any]]:
        """As `_SQLSource._together`, pipelined where libpq can (14 or later): the check
        of a declared-unique order costs no round trip of its own. Pipelined queries
        are read whole (only a page's first query is read in steps, and it runs alone
        or is sent with the snapshot, `_snapshot`)."""
        _psycopg()

        if len(queries) < 2 or not psycopg.Pipeline.is_supported():  # noqa: PLR2004 - one runs alone
            return super()._together(cur, queries, first=first)
        assert first is None
        conn = cur.connection
        with contextlib.ExitStack() as stack:
            more = (
                stack.enter_context(_row_cursor(conn, key_oids=self._key_oids)) for _ in queries[1:]
            )
            cursors = [cur, *more]
            with conn.pipeline():
                for each, (sql, params) in zip(cursors, queries, strict=True):
                    each.execute(sql, params)
            return [each.fetchall() for each in cursors]

    def _run(
        self,
        chunks: _Chunks,
        cur: Any,
        queries: list[tuple[str, Params]],
        *,
        first: int | None = None,
    ) -> list[list[Any]]:
        """As `_SQLSource._run`; where the last query meets a row the client encoding
        cannot hold, the rows before it (`_readable`)."""
        _psycopg()

        try:
            return self._together(cur, queries, first=first)
        except psycopg.DataError as exc:
            if _unreadable(exc) is None or not _unaborted(cur.connection, chunks.savepoint):
                raise
        return self._readable(chunks, cur, queries, first=first)

    def _readable(
        self,
        chunks: _Chunks,
        cur: Any,
        queries: list[tuple[str, Params]],
        *,
        first: int | None,
    ) -> list[list[Any]]:
        """*queries*, whose last met a row the client encoding cannot hold, run again,
        the last through a server-side cursor a row at a time up to that row (its error
        then in `_Chunks.stopped`).

        The server fails the whole query at that row, and libpq drops the rows it sent
        before: one such row failed every page whose fetch reached it, the rows before
        it never served. Only where the failure aborted no transaction (an autocommit
        connection outside one, as the source's own) or only the page's savepoint in the
        caller's transaction, rolled back to (`_unaborted`): a failed statement in a
        transaction of the source's own ends what it can run."""
        _psycopg()

        *checks, (sql, params) = queries
        found = self._together(cur, checks) if checks else []
        conn = cur.connection
        rows: list[Any] = []
        name = "jsonbudget_" + secrets.token_hex(8)
        try:
            with (
                conn.transaction(),
                _row_cursor(conn, name=name, key_oids=self._key_oids) as one,
            ):
                one.execute(sql, params)
                while first is None or len(rows) < first:
                    row = one.fetchone()
                    if row is None:
                        break
                    rows.append(row)
        except psycopg.DataError as exc:
            bad = _unreadable(exc)
            if bad is None:
                raise
            bad.__cause__ = exc
            chunks.stopped = bad
        return [*found, rows]

    def _more(self, chunks: _Chunks, cur: Any, n: int) -> list[Any] | None:
        # No result on *cur*: its query failed there and was read by `_readable`.
        if cur.pgresult is None:
            return None
        return super()._more(chunks, cur, n)

    def _check_float_digits(self, conn: psycopg.Connection[Any]) -> None:
        """Refuse a page of a float order on a session that now writes floats rounded (a
        SET since the plan, a pool's connection): its positions would skip rows. A
        query of its own, so only where the page reads no snapshot (`_snapshot` reads
        the setting with it) and the connection is not the source's own (set exact)."""
        if self._float_key is not None and conn is not self._own:
            self._refuse_rounded_floats(_float_digits(conn))

    def _refuse_rounded_floats(self, digits: int) -> None:
        if self._float_key is not None and digits < 1:
            raise LimitError(
                "order_by",
                self._float_key,
                f"is a float column, which this session writes rounded "
                f"(extra_float_digits = {digits}): a position would skip rows "
                "tied with it or never pass it. SET extra_float_digits = 1 on "
                "the connection (the default since PostgreSQL 12), or give the "
                "source a conninfo (its own connection writes floats exactly)",
            )

    def _snapshot(
        self, conn: psycopg.Connection[Any], cur: Any, chunks: _Chunks, batch: int
    ) -> Hashable:
        """The cluster's transaction snapshot: which transactions are done, with the
        session's role and ``search_path``, which change what a query returns without a
        write (row-level security, a schema per tenant): rows kept under other ones are
        not served. ``extra_float_digits`` comes with them, checked for a float order
        (`_check_float_digits`) at no round trip of its own.

        A transaction that writes gets an id, and when it ends (commit or rollback) the
        snapshot changes: the id leaves the list of running ones, or moves the first id
        not yet done. So between two equal snapshots nothing was committed, and a query
        returns what it returned before (PostgreSQL 13 or later).

        Where libpq pipelines (14 or later), the page's first query is sent with it, on
        *cur*, after the carried rows: one round trip for both instead of two. The
        server runs them in order, so the snapshot is still read before the fetch; if
        it shows a change, the caller drops that result with the carried rows.
        """
        _psycopg()

        query = chunks.first_query(batch)
        state = (
            "SELECT pg_current_snapshot()::text, current_user::text,"
            " current_setting('search_path'), current_setting('extra_float_digits')::int"
        )
        with conn.cursor(row_factory=psycopg.rows.tuple_row) as snap:
            if query is not None and psycopg.Pipeline.is_supported():
                try:
                    with conn.pipeline():
                        snap.execute(state)
                        cur.execute(*query)
                except psycopg.DataError as exc:
                    if _unreadable(exc) is None or not _unaborted(conn):
                        raise
                    # The first fetch runs the query again and reads up to that row.
                    snap.execute(state)
                else:
                    chunks.issued(batch)
            else:
                snap.execute(state)
            row = snap.fetchone()
        if row is None:
            return None
        self._refuse_rounded_floats(int(row[3]))
        return tuple(row[:3])

    def _make_plan(self, cut: int | None) -> _Plan:
        if self._pool is not None:
            with self._pool.connection() as conn, self._discarding(conn):
                return self._plan_on(conn, cut)
        conn = self._connection()
        # The probe must not leave a transaction open on an autocommit-less connection;
        # in the caller's transaction this is a savepoint, so that a query that fails (a
        # table not there) aborts nothing of theirs.
        with self._discarding(conn), conn.transaction():
            return self._plan_on(conn, cut)

    def _plan_on(self, conn: psycopg.Connection[Any], cut: int | None) -> _Plan:
        _check_client_encoding(conn)
        with _row_cursor(conn) as cur:
            cur.execute(f"SELECT * FROM (\n{self._inner}\n) AS _jb_q LIMIT 0", self._params)
            assert cur.description is not None
            columns = [d.name for d in cur.description]
            oids = [d.type_code for d in cur.description]
            cur.execute(
                "SELECT oid::int, typcategory::text FROM pg_type WHERE oid = ANY(%s)",
                (sorted(set(oids)),),
            )
            category: dict[int, str] = dict(cur.fetchall())
            table_keys = None
            if self._table is not None and self._wants_table_keys:
                table_keys = self._table_keys(cur)
        n = cut
        text_unit = _pg_text_unit(conn)
        text_length = "octet_length" if text_unit == "bytes" else "length"
        # An SQL_ASCII database counts bytes, read as UTF-8 (`_utf8_left`).
        utf8_bytes = (
            conn.info.parameter_status("server_encoding") == "SQL_ASCII" and text_unit == "bytes"
        )
        cuts: list[_Cut] = []
        for name, oid in zip(columns, oids, strict=True) if n is not None else ():
            assert n is not None  # for mypy
            col = self._col(name)
            if oid == _PG_BYTEA:
                # octet_length reads the stored size; substring detoasts only the slice.
                when = f"octet_length({col}) > {n}"
                value = f"CASE WHEN {when} THEN substring({col} FROM 1 FOR {n}) ELSE {col} END"
                length = f"CASE WHEN {when} THEN octet_length({col}) END"
                cuts.append((name, value, length, None, "bytes"))
            elif category.get(oid) == "S":
                # left() detoasts only the prefix; a text of more bytes than the bound may
                # still have no more characters than it (then it arrives whole).
                when = f"octet_length({col}) > {n}"
                head = _utf8_left(col, n) if utf8_bytes else f"left({col}, {n})"
                value = f"CASE WHEN {when} THEN {head} ELSE {col} END"
                length = f"CASE WHEN {when} THEN {text_length}({col}) END"
                cuts.append((name, value, length, None, text_unit))
            elif oid not in _PG_BOUNDED and category.get(oid) not in _PG_BOUNDED_CATEGORIES:
                # No prefix of a JSON value, an array, a composite or a range is a value:
                # a long one arrives as the start of its text, and the value itself is
                # not fetched.
                text = f"{col}::text"
                when = f"octet_length({text}) > {n} AND length({text}) > {n}"
                head = _utf8_left(text, n) if utf8_bytes else f"left({text}, {n})"
                cuts.append(
                    (
                        name,
                        f"CASE WHEN {when} THEN NULL ELSE {col} END",
                        f"CASE WHEN {when} THEN length({text}) END",
                        f"CASE WHEN {when} THEN {head} END",
                        # There length() counts bytes: UTF-8 bytes, as the client reads.
                        "bytes" if utf8_bytes else "chars",
                    )
                )
        # A real arrives as the float its text reads as, not the float it is: compared
        # as float8, 0.1 would sort after itself. Kept as text, it is cast back exactly.
        float4 = frozenset(
            name for name, oid in zip(columns, oids, strict=True) if oid == _PG_FLOAT4
        )
        # A date or a time stamp psycopg cannot parse arrives as the session's text
        # (`_infinite`), in its DateStyle and TimeZone, no exact form of it: SQL,
        # Postgres and German name the zone by an abbreviation that reads back as
        # another zone (IST as Israel's, CST as US Central) or not at all (LMT), and a
        # day-month order reads another day where a session differs. Its position keeps
        # the JSON text instead (ISO 8601, a numeric offset, whatever the session says),
        # which every session casts back to the same value.
        key_text = {
            name: f"to_json({self._col(name)}) #>> '{{}}'"
            for name, oid in zip(columns, oids, strict=True)
            if oid in _PG_DATETIME and self._mode == "keyset"
        }
        plan = self._resolve(columns, table_keys, cuts, float4, key_text=key_text)
        type_of = dict(zip(columns, oids, strict=True))
        self._key_oids |= {type_of[name] for name, _, _ in plan.keys}
        entries = len(columns) + bool(plan.hidden) + len(plan.cut_index)
        entries += sum(h is not None for h in plan.heads)
        entries += sum(name in key_text for name, _, _ in plan.keys)
        if entries > _PG_MAX_TARGETS:
            what = "table" if self._table is not None else "query"
            raise LimitError(
                what,
                ".".join(self._table) if self._table is not None else self._inner[:80],
                f"has {len(columns)} columns, and the page query that cuts their long cells "
                f"needs {entries} entries in its select list, past PostgreSQL's "
                f"{_PG_MAX_TARGETS}: select fewer columns (a text, bytea or JSON column "
                "takes two or three entries)",
            )
        if self._mode == "keyset":
            for name, _, _ in plan.keys:
                oid = type_of[name]
                if oid in _PG_AS_TEXT or category.get(oid) in ("A", "C", "R"):
                    raise LimitError(
                        "order_by",
                        name,
                        "is a JSON, XML, array, composite or range column, whose values do "
                        "not come back from a cursor position as they were: order by scalar "
                        "columns (in a query, a cast such as tags::text AS tags_key)",
                    )
                if oid == _PG_INTERVAL:
                    raise LimitError(
                        "order_by",
                        name,
                        "is an interval column, which psycopg reads as a timedelta that "
                        "does not compare as PostgreSQL compares the interval ('1 year' is "
                        "365 days to it, 360 to PostgreSQL): order by a number in a query, "
                        "such as extract(epoch FROM iv) AS iv_key",
                    )
                if oid in (_PG_FLOAT4, _PG_FLOAT8):
                    self._float_key = self._float_key or name
                    self._refuse_rounded_floats(_float_digits(conn))
        return plan

    def _table_keys(self, cur: Any) -> _TableKeys:
        assert self._table is not None
        regclass = ".".join(quote_ident(p) for p in self._table)
        cur.execute(
            "SELECT attname FROM pg_attribute WHERE attrelid = %s::regclass AND attnum > 0"
            " AND NOT attisdropped AND attnotnull",
            (regclass,),
        )
        notnull = {row[0] for row in cur.fetchall()}
        # A table's rows include its inheritance children's, which its keys do not cover
        # (a partitioned table's do: PostgreSQL enforces them across the partitions).
        cur.execute(
            "SELECT c.relkind = 'p' OR NOT EXISTS"
            " (SELECT 1 FROM pg_inherits WHERE inhparent = c.oid)"
            " FROM pg_class c WHERE c.oid = %s::regclass",
            (regclass,),
        )
        row = cur.fetchone()
        if row is not None and not row[0]:
            return _TableKeys([], [], notnull, [])
        # An index counts only under the collations its columns sort by: unique under
        # "C" is not unique under a case-insensitive (nondeterministic) collation. An
        # index a failed CREATE INDEX CONCURRENTLY left (not valid) enforces nothing, nor
        # does a deferred constraint within a transaction.
        cur.execute(
            "SELECT i.indisprimary, array_agg(a.attname ORDER BY k.ord),"
            " bool_and(i.indcollation[k.ord - 1] = a.attcollation)"
            " FROM pg_index i CROSS JOIN LATERAL unnest(i.indkey) WITH ORDINALITY AS k(attnum, ord)"
            " JOIN pg_attribute a ON a.attrelid = i.indrelid AND a.attnum = k.attnum"
            " WHERE i.indrelid = %s::regclass AND i.indisunique AND i.indpred IS NULL"
            " AND i.indexprs IS NULL AND i.indisvalid AND i.indisready AND i.indimmediate"
            " GROUP BY i.indexrelid, i.indisprimary"
            " ORDER BY i.indisprimary DESC",
            (regclass,),
        )
        sets: list[list[str]] = []
        nullable: list[list[str]] = []
        append: list[str] = []
        for primary, cols, same_collation in cur.fetchall():
            if primary:
                append = list(cols)
            if same_collation:
                (sets if all(c in notnull for c in cols) else nullable).append(list(cols))
        return _TableKeys(sets, append, notnull, nullable)

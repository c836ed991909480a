"""Database sources through DB-API: SQLite (stdlib) and PostgreSQL (psycopg 3).

Rows come out as dicts (column name to value). The default mode is keyset pagination:
the position is the last row's values of the ``order_by`` columns, and the next page asks
for rows strictly after them, so rows inserted or deleted before the cursor neither
repeat nor make others vanish. ``mode="offset"`` is the fallback for results without a
unique order. Identifiers are quoted; values only ever travel as query parameters.
"""

from __future__ import annotations

import base64
import math
import os
import secrets
import sqlite3
from collections.abc import Iterator, Mapping, Sequence
from typing import TYPE_CHECKING, Any, Final, Literal

from .._limits import check_int
from ..errors import EncodeError, InvalidCursor, LimitError
from .base import JSONValue, Position, Source, check_limit_hint, offset_position

if TYPE_CHECKING:
    import psycopg

__all__ = ["DEFAULT_BATCH_SIZE", "PostgresSource", "SQLiteSource"]

#: Rows fetched from the database per round trip when the page size is unknown.
DEFAULT_BATCH_SIZE: Final = 256

Row = dict[str, Any]
Params = Sequence[Any] | Mapping[str, Any]
_PARAM_PREFIX: Final = "_jb_"


def quote_ident(name: object, what: str = "identifier") -> str:
    """Quote an SQL identifier (doubling embedded quotes); refuse empty names and NUL."""
    if not isinstance(name, str) or not name or "\x00" in name:
        raise LimitError(what, name, "must be a non-empty str without NUL characters")
    return '"' + name.replace('"', '""') + '"'


def _parse_order(order_by: object) -> tuple[tuple[str, bool], ...]:
    if isinstance(order_by, str) or not isinstance(order_by, Sequence):
        raise LimitError("order_by", order_by, "must be a sequence of column names")
    keys: list[tuple[str, bool]] = []
    for spec in order_by:
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
    if isinstance(value, float):
        if not math.isfinite(value):
            raise EncodeError(f"{what} is {value!r}, which JSON cannot carry", path=None)
        return value
    if isinstance(value, bytes | bytearray | memoryview):
        return {"bytes": base64.b64encode(value).decode("ascii")}
    # Decimal, datetime, date, UUID...: PostgreSQL casts their text back (psycopg sends
    # str as "unknown"); SQLite stores them as text already.
    return {"text": str(value)}


def _key_value(value: JSONValue) -> object:
    if type(value) in (bool, int, float, str):
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


class _SQLSource(Source[Row]):
    """What SQLite and PostgreSQL share: the query plan and the row loop."""

    __slots__ = ("_batch", "_inner", "_keys", "_mode", "_named", "_params", "_query", "_table")

    _kind: str = "sql"

    def __init__(
        self,
        *,
        table: str | Sequence[str] | None,
        query: str | None,
        params: Params,
        order_by: Sequence[str],
        mode: Literal["keyset", "offset"],
        batch_size: int,
    ) -> None:
        if (table is None) == (query is None):
            raise TypeError("give exactly one of table= or query=")
        if query is not None:
            if not isinstance(query, str) or not query.strip():
                raise LimitError("query", query, "must be a non-empty SQL string")
            self._inner = query
            self._table: tuple[str, ...] | None = None
        else:
            parts = (table,) if isinstance(table, str) else tuple(table or ())
            if not parts:
                raise LimitError("table", table, "must be a name or (schema, name)")
            self._inner = "SELECT * FROM " + ".".join(quote_ident(p, "table") for p in parts)
            self._table = parts
        self._query = query
        if mode not in ("keyset", "offset"):
            raise LimitError("mode", mode, "must be 'keyset' or 'offset'")
        self._mode = mode
        self._keys = _parse_order(order_by)
        if mode == "keyset" and not self._keys:
            raise LimitError("order_by", order_by, "keyset mode needs at least one column")
        for name, _ in self._keys:
            quote_ident(name, "order_by")
        if isinstance(params, Mapping):
            if any(not isinstance(k, str) or k.startswith(_PARAM_PREFIX) for k in params):
                raise LimitError(
                    "params",
                    sorted(map(str, params)),
                    f"keys must be str not starting {_PARAM_PREFIX!r}",
                )
            self._named = True
            self._params: Params = dict(params)
        elif isinstance(params, Sequence) and not isinstance(params, str | bytes):
            self._named = False
            self._params = tuple(params)
        else:
            raise TypeError(f"params must be a sequence or a mapping, not {type(params).__name__}")
        self._batch = check_int("batch_size", batch_size, minimum=1, maximum=1_000_000)

    # Dialect hooks.
    def _placeholder(self, name: str) -> str:
        raise NotImplementedError

    def _no_limit(self) -> str:
        return ""

    def _sql(self, position: Position | None, limit_hint: int | None) -> tuple[str, Params]:
        """The wrapped query and its parameters for one page."""
        names: list[str] = []
        values: list[object] = []

        def bind(value: object) -> str:
            names.append(f"{_PARAM_PREFIX}{len(names)}")
            values.append(value)
            return self._placeholder(names[-1])

        inner = self._inner.rstrip().rstrip(";")
        # Newlines keep a trailing `-- comment` in the user's query from eating the ")".
        sql = f"SELECT * FROM (\n{inner}\n) AS _jb_q"
        offset = 0
        if self._mode == "keyset":
            if position is not None:
                sql += " WHERE " + self._predicate(position, bind)
        else:
            offset = offset_position(position, "row")
        if self._keys:
            sql += " ORDER BY " + ", ".join(
                quote_ident(n) + (" DESC" if d else " ASC") for n, d in self._keys
            )
        if limit_hint is not None:
            sql += " LIMIT " + bind(limit_hint + 1)
        if offset:
            if limit_hint is None:
                sql += self._no_limit()
            sql += " OFFSET " + bind(offset)
        if self._named:
            merged = dict(self._params)
            merged.update(zip(names, values, strict=True))
            return sql, merged
        return sql, (*self._params, *values)

    def _predicate(self, position: Position, bind: Any) -> str:
        if not isinstance(position, list) or len(position) != len(self._keys):
            raise InvalidCursor("the position is not a valid keyset position")
        values = [_key_value(v) for v in position]
        cols = [quote_ident(n) for n, _ in self._keys]
        directions = {d for _, d in self._keys}
        if len(directions) == 1:
            op = "<" if directions.pop() else ">"
            if len(cols) == 1:
                return f"{cols[0]} {op} {bind(values[0])}"
            marks = ", ".join(bind(v) for v in values)
            return f"({', '.join(cols)}) {op} ({marks})"
        # Mixed directions: (a > ?) OR (a = ? AND b < ?) OR ...
        terms = []
        for i, (_, desc) in enumerate(self._keys):
            eq = [f"{cols[j]} = {bind(values[j])}" for j in range(i)]
            eq.append(f"{cols[i]} {'<' if desc else '>'} {bind(values[i])}")
            terms.append("(" + " AND ".join(eq) + ")")
        return "(" + " OR ".join(terms) + ")"

    def _rows(
        self, cursor: Any, limit_hint: int | None, columns: Sequence[str]
    ) -> Iterator[tuple[Row, Position]]:
        """Turn fetched rows into ``(dict, position)``; *cursor* already executed."""
        if len(set(columns)) != len(columns):
            dupes = sorted({c for c in columns if columns.count(c) > 1})
            raise LimitError("query", dupes, "returns duplicate column names; alias them")
        key_index = []
        for name, _ in self._keys:
            if name not in columns:
                raise LimitError(
                    "order_by", name, f"is not a column of the result (columns: {list(columns)})"
                )
            key_index.append(columns.index(name))
        batch = self._batch if limit_hint is None else min(self._batch, limit_hint + 1)
        keyset = self._mode == "keyset"
        index = 0
        fetchmany = cursor.fetchmany
        while rows := fetchmany(batch):
            for row in rows:
                if keyset:
                    pos: Position = [self._key(row[i], i, columns) for i in key_index]
                else:
                    index += 1
                    pos = index
                yield dict(zip(columns, row, strict=True)), pos

    @staticmethod
    def _key(value: object, i: int, columns: Sequence[str]) -> JSONValue:
        if value is None:
            raise EncodeError(
                f"order_by column {columns[i]!r} is NULL in a row; keyset pagination needs "
                "NOT NULL order columns (or mode='offset')",
                path=None,
            )
        return json_safe(value, what=f"order_by column {columns[i]!r}")

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
            "order_by": [("-" if d else "") + n for n, d in self._keys],
            "mode": self._mode,
        }

    def describe(self) -> dict[str, JSONValue]:
        """Kind, table or query, parameters, order and mode (never connection details)."""
        return self._describe()


def _offset_rows(
    rows: Iterator[tuple[Row, Position]], start: int
) -> Iterator[tuple[Row, Position]]:
    for row, index in rows:
        yield row, start + index  # type: ignore[operator]


class SQLiteSource(_SQLSource):
    """Rows of an SQLite table or query.

    *connection_or_path* is an open `sqlite3.Connection` (used as is, never closed) or a
    database file path (opened read-only for each page and closed after it).
    """

    __slots__ = ("_conn", "_path")
    _kind = "sqlite"

    def __init__(
        self,
        connection_or_path: sqlite3.Connection | str | os.PathLike[str],
        *,
        table: str | Sequence[str] | None = None,
        query: str | None = None,
        params: Params = (),
        order_by: Sequence[str] = ("id",),
        mode: Literal["keyset", "offset"] = "keyset",
        batch_size: int = DEFAULT_BATCH_SIZE,
    ) -> None:
        super().__init__(
            table=table,
            query=query,
            params=params,
            order_by=order_by,
            mode=mode,
            batch_size=batch_size,
        )
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

    def _no_limit(self) -> str:
        return " LIMIT -1"  # SQLite accepts OFFSET only after a LIMIT

    def open(
        self, position: Position | None, *, limit_hint: int | None = None
    ) -> Iterator[tuple[Row, Position]]:
        """Yield rows after *position* as ``(dict, position)``."""
        limit_hint = check_limit_hint(limit_hint)
        sql, params = self._sql(position, limit_hint)
        start = 0 if self._mode == "keyset" else offset_position(position, "row")
        return self._iter(sql, params, limit_hint, start)

    def _iter(
        self, sql: str, params: Params, limit_hint: int | None, start: int
    ) -> Iterator[tuple[Row, Position]]:
        if self._conn is not None:
            conn, own = self._conn, False
        else:
            assert self._path is not None
            # Read-only: paging must never create or change the database.
            uri = "file:" + _uri_path(self._path) + "?mode=ro"
            conn, own = sqlite3.connect(uri, uri=True), True
        try:
            cur = conn.cursor()
            try:
                cur.row_factory = None  # tuples, whatever the connection's factory
                cur.execute(sql, params)
                columns = [d[0] for d in cur.description]
                rows = self._rows(cur, limit_hint, columns)
                yield from (rows if self._mode == "keyset" else _offset_rows(rows, start))
            finally:
                cur.close()
        finally:
            if own:
                conn.close()

    def describe(self) -> dict[str, JSONValue]:
        """As `_SQLSource.describe`, plus the database path when one was given."""
        out = self._describe()
        if self._path is not None:
            out["database"] = self._path
        return out


def _uri_path(path: str) -> str:
    from urllib.parse import quote  # noqa: PLC0415  # only path-mode sources need it

    return quote(path, safe="/")


class PostgresSource(_SQLSource):
    """Rows of a PostgreSQL table or query, streamed through a server-side cursor.

    *conninfo_or_connection* is a libpq connection string (a connection is opened for
    each page and closed after it) or an open `psycopg.Connection` (used as is, never
    closed). psycopg is imported only when this class is used.
    """

    __slots__ = ("_conn", "_conninfo")
    _kind = "postgres"

    def __init__(
        self,
        conninfo_or_connection: str | psycopg.Connection[Any],
        *,
        table: str | Sequence[str] | None = None,
        query: str | None = None,
        params: Params = (),
        order_by: Sequence[str] = ("id",),
        mode: Literal["keyset", "offset"] = "keyset",
        batch_size: int = DEFAULT_BATCH_SIZE,
    ) -> None:
        import psycopg  # noqa: PLC0415  # optional dependency, needed only here

        super().__init__(
            table=table,
            query=query,
            params=params,
            order_by=order_by,
            mode=mode,
            batch_size=batch_size,
        )
        if isinstance(conninfo_or_connection, psycopg.Connection):
            self._conn: psycopg.Connection[Any] | None = conninfo_or_connection
            self._conninfo: str | None = None
        elif isinstance(conninfo_or_connection, str):
            self._conn = None
            self._conninfo = conninfo_or_connection
        else:
            raise TypeError(
                "PostgresSource needs a conninfo string or a psycopg.Connection, "
                f"not {type(conninfo_or_connection).__name__}"
            )

    def _placeholder(self, name: str) -> str:
        return f"%({name})s" if self._named else "%s"

    def open(
        self, position: Position | None, *, limit_hint: int | None = None
    ) -> Iterator[tuple[Row, Position]]:
        """Yield rows after *position* as ``(dict, position)``."""
        limit_hint = check_limit_hint(limit_hint)
        sql, params = self._sql(position, limit_hint)
        start = 0 if self._mode == "keyset" else offset_position(position, "row")
        return self._iter(sql, params, limit_hint, start)

    def _iter(
        self, sql: str, params: Params, limit_hint: int | None, start: int
    ) -> Iterator[tuple[Row, Position]]:
        import psycopg  # noqa: PLC0415  # optional dependency, needed only here

        if self._conn is not None:
            conn, own = self._conn, False
        else:
            assert self._conninfo is not None
            conn, own = psycopg.connect(self._conninfo), True
        try:
            # A server-side cursor lives in a transaction: ours unless the caller has one.
            idle = conn.info.transaction_status == psycopg.pq.TransactionStatus.IDLE
            if idle:
                with conn.transaction():
                    yield from self._stream(conn, sql, params, limit_hint, start)
            else:
                yield from self._stream(conn, sql, params, limit_hint, start)
        finally:
            if own:
                conn.close()

    def _stream(
        self,
        conn: psycopg.Connection[Any],
        sql: str,
        params: Params,
        limit_hint: int | None,
        start: int,
    ) -> Iterator[tuple[Row, Position]]:
        name = "jsonbudget_" + secrets.token_hex(8)
        with conn.cursor(name=name) as cur:
            cur.execute(sql, params)
            assert cur.description is not None
            columns = [d.name for d in cur.description]
            rows = self._rows(cur, limit_hint, columns)
            yield from (rows if self._mode == "keyset" else _offset_rows(rows, start))

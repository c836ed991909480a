"""SQL sources over databases and connections set up their own way (a server encoding,
an application's loaders, detect_types, an added column's default, a file replaced on
disk), and the bytes a page after short rows fetches."""

from __future__ import annotations

import contextlib
import enum
import gc
import os
import sqlite3
import sys
import threading
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

import psycopg
import pytest
from psycopg.types.enum import EnumInfo, register_enum
from psycopg.types.numeric import FloatLoader
from psycopg.types.string import StrDumper

from jsonbudget import (
    Limits,
    MemoryCursorStore,
    PageBuilder,
    PostgresSource,
    Scope,
    SQLiteSource,
    paginate,
)
from jsonbudget._sources.base import Clipped
from jsonbudget._sources.sql import AHEAD_BYTES
from jsonbudget.errors import LimitError
from tests.fixtures_postgres import PostgresServer
from tests.test_sources import pages_by_fill, pages_by_paginate


def _rows(pages: list[list[Any]]) -> list[Any]:
    return [row for page in pages for row in page]


@contextlib.contextmanager
def _database(server: PostgresServer, name: str, encoding: str) -> Iterator[str]:
    """A database of its own in *encoding*, read through a UTF-8 client; its conninfo."""
    with psycopg.connect(server.dsn, autocommit=True) as admin:
        admin.execute(f"DROP DATABASE IF EXISTS {name}")
        admin.execute(
            f"CREATE DATABASE {name} ENCODING '{encoding}' LC_COLLATE 'C' LC_CTYPE 'C'"
            " TEMPLATE template0"
        )
        try:
            yield server.dsn.replace("dbname=postgres", f"dbname={name}") + " client_encoding=UTF8"
        finally:
            admin.execute(f"DROP DATABASE {name} WITH (FORCE)")


@pytest.mark.postgres
@pytest.mark.parametrize("encoding", ["LATIN1", "EUC_JP", "UTF8"])
def test_regression_pg_cut_text_counted_in_the_servers_encoding(
    postgres_server: PostgresServer, encoding: str
) -> None:
    """Found by a tester: the unit of a cut text was chosen by the client's encoding and
    counted with octet_length, the size in the server's: in a LATIN1 database read as
    UTF-8 a cut cell passed for whole with no marker, another claimed 26 bytes left out
    for 36, and a third failed with LimitError("Clipped.length")."""
    letter = "é" if encoding == "LATIN1" else "日"
    values = {1: letter * 36 + "a" * 64, 2: letter * 10 + "b" * 90, 3: letter * 100, 4: "c" * 50}
    with _database(postgres_server, f"enc_{encoding.lower()}", encoding) as dsn:
        with psycopg.connect(dsn, autocommit=True) as conn:
            conn.execute("CREATE TABLE t (id int PRIMARY KEY, note text)")
            with conn.cursor() as cur:
                cur.executemany("INSERT INTO t VALUES (%s, %s)", list(values.items()))
        with PostgresSource(dsn, table="t", max_cell_bytes=64) as source:
            got = {row["id"]: row["note"] for row in _rows(pages_by_fill(source, Limits(4000)))}
    assert got[4] == values[4]
    for key in (1, 2, 3):
        cell, whole = got[key], values[key]
        assert isinstance(cell, Clipped), (key, cell)
        assert isinstance(cell.head, str)
        assert whole.startswith(cell.head)
        assert cell.length == (len(whole.encode()) if cell.unit == "bytes" else len(whole))
        # Bytes only where the server's size is the UTF-8 size.
        assert cell.unit == ("bytes" if encoding == "UTF8" else "chars")


@pytest.mark.postgres
def test_regression_pg_order_keys_are_read_with_psycopgs_own_adapters(
    postgres_server: PostgresServer,
) -> None:
    """Found by a tester: a passed connection's loaders read the order columns, and the
    positions were built from them: numeric loaded as float (psycopg's documented
    FloatLoader) bound 0.1 as float8, where three keys tie, so a row was skipped and
    another served twice under complete: true; an enum under register_enum wrote
    "Mood.ok" into the position and page 2 failed. A str dumper sending text made the
    position's numeric text fail to compare (numeric > text)."""

    class Mood(enum.Enum):
        sad = "sad"
        ok = "ok"
        happy = "happy"

    prices = ["0.10000000000000000002", "0.10000000000000000001", "0.1", "0.2", "0.3"]
    with psycopg.connect(postgres_server.dsn, autocommit=True) as conn:
        conn.execute("DROP TABLE IF EXISTS app_prices")
        conn.execute("DROP TYPE IF EXISTS app_mood")
        conn.execute("CREATE TYPE app_mood AS ENUM ('sad', 'ok', 'happy')")
        conn.execute(
            "CREATE TABLE app_prices (id int PRIMARY KEY, price numeric NOT NULL,"
            " m app_mood NOT NULL)"
        )
        conn.execute(
            "INSERT INTO app_prices SELECT i, v::numeric, (ARRAY['sad','ok','happy'])[1 + i %% 3]"
            "::app_mood FROM unnest(%s::text[]) WITH ORDINALITY AS u(v, i)",
            (prices,),
        )
        try:
            by_price = [r[0] for r in conn.execute("SELECT id FROM app_prices ORDER BY price, id")]
            by_mood = [r[0] for r in conn.execute("SELECT id FROM app_prices ORDER BY m, id")]
            conn.adapters.register_loader("numeric", FloatLoader)
            info = EnumInfo.fetch(conn, "app_mood")
            assert info is not None
            register_enum(info, conn, Mood)
            conn.adapters.register_dumper(str, StrDumper)
            for order, want in ((("price",), by_price), (("m",), by_mood)):
                for pages in (
                    pages_by_paginate(
                        PostgresSource(conn, table="app_prices", order_by=order),
                        Limits(2000, max_items=1),
                    ),
                    pages_by_fill(
                        PostgresSource(conn, table="app_prices", order_by=order),
                        Limits(2000, max_items=2),
                    ),
                ):
                    assert [row["id"] for row in _rows(pages)] == want
            # The connection's own loaders are untouched.
            assert conn.execute("SELECT 0.5::numeric").fetchone() == (0.5,)
        finally:
            conn.execute("DROP TABLE app_prices")
            conn.execute("DROP TYPE app_mood")


def test_regression_sqlite_a_long_added_column_default_is_cut_not_a_memory_error(
    tmp_path: Path,
) -> None:
    """Found by a tester: a column added by ALTER TABLE … ADD COLUMN … DEFAULT '<long>'
    is not stored in the rows before it; SQLite makes the default as it reads them, and
    past the lowered length limit of a path source's bare read that fails with
    SQLITE_NOMEM, a bare MemoryError, on every page."""
    path = tmp_path / "def.db"
    terms = "t" * 2500
    with contextlib.closing(sqlite3.connect(path)) as setup:
        setup.execute("CREATE TABLE orders (id INTEGER PRIMARY KEY, status TEXT)")
        setup.executemany("INSERT INTO orders VALUES (?, 'open')", [(i,) for i in range(1, 6)])
        setup.execute(f"ALTER TABLE orders ADD COLUMN terms TEXT DEFAULT '{terms}'")
        setup.execute("INSERT INTO orders VALUES (6, 'new', 'short')")
        setup.commit()
    with SQLiteSource(path, table="orders") as source:
        rows = _rows(pages_by_paginate(source, Limits(2000)))
    assert [row["id"] for row in rows] == list(range(1, 7))
    assert rows[-1]["terms"] == "short"
    for row in rows[:-1]:
        cell = row["terms"]
        assert isinstance(cell, Clipped)
        assert isinstance(cell.head, str)
        assert cell.length == len(terms)
        assert terms.startswith(cell.head)


class _ByteCountingCursor(sqlite3.Cursor):
    """A real cursor that counts the text and binary bytes of the rows it returns."""

    fetched = 0

    def _count(self, rows: list[Any]) -> list[Any]:
        for row in rows:
            _ByteCountingCursor.fetched += sum(len(v) for v in row if isinstance(v, str | bytes))
        return rows

    def fetchmany(self, size: int | None = 1) -> list[Any]:
        return self._count(super().fetchmany(size))

    def fetchall(self) -> list[Any]:
        return self._count(super().fetchall())


class _ByteCountingConnection(sqlite3.Connection):
    def cursor(self, factory: Any = _ByteCountingCursor) -> Any:
        return super().cursor(factory)


def test_regression_a_page_after_short_rows_fetches_bounded_bytes() -> None:
    """Found by a tester: a page sized its fetches by the rows the page before held (and
    a first page doubled them), never by their bytes: after 200 short rows a 64 KiB
    page fetched 256 rows of ten 60 KB columns (137 MB). Every fetch now brings at
    most AHEAD_BYTES at the cut, and carried rows that fill the page are not added to."""
    conn = sqlite3.connect(":memory:", factory=_ByteCountingConnection)
    cols = [f"c{i}" for i in range(10)]
    conn.execute(f"CREATE TABLE docs (id INTEGER PRIMARY KEY, {', '.join(cols)})")
    conn.execute(
        "WITH RECURSIVE n(i) AS (SELECT 1 UNION ALL SELECT i + 1 FROM n WHERE i < 200)"
        " INSERT INTO docs SELECT i, " + ", ".join(["'short'"] * 10) + " FROM n"
    )
    long = "replace(hex(zeroblob(30000)), '0', 'x')"  # 60,000 bytes
    conn.execute(
        "WITH RECURSIVE n(i) AS (SELECT 201 UNION ALL SELECT i + 1 FROM n WHERE i < 260)"
        f" INSERT INTO docs SELECT i, {', '.join([long] * 10)} FROM n"
    )
    source = SQLiteSource(conn, table="docs")
    position: Any = None
    served: list[int] = []
    limits = Limits(65536)
    for _ in range(100):
        _ByteCountingCursor.fetched = 0
        builder = PageBuilder(limits)
        more, position = source.fill(builder, position)
        page = builder.finish(complete=not more, next_cursor="x" if more else None)
        served += [row["id"] for row in page.items]
        # One fetch past the short rows at most: AHEAD_BYTES, plus the page's own.
        assert _ByteCountingCursor.fetched <= AHEAD_BYTES + limits.max_bytes
        if not more:
            break
    assert served == list(range(1, 261))


def test_regression_a_later_page_reads_wide_rows_past_short_ones_in_steps() -> None:
    """Found in review: a later page's first fetch asks for the rows the page before
    held, plus two (256 here), sized by those short rows: where a few short ones were
    left and wide ones followed, it brought 150 rows of ten 60 KB columns (94 MB) for a
    64 KiB page. That query is now read AHEAD_BYTES at the cut at a time, the next rows
    only when the page asks for them."""
    conn = sqlite3.connect(":memory:", factory=_ByteCountingConnection)
    cols = [f"c{i}" for i in range(10)]
    conn.execute(f"CREATE TABLE docs (id INTEGER PRIMARY KEY, {', '.join(cols)})")
    conn.execute(
        "WITH RECURSIVE n(i) AS (SELECT 1 UNION ALL SELECT i + 1 FROM n WHERE i < 748)"
        " INSERT INTO docs SELECT i, " + ", ".join(["'a'"] * 10) + " FROM n"
    )
    long = "replace(hex(zeroblob(30000)), '0', 'x')"  # 60,000 bytes
    conn.execute(
        "WITH RECURSIVE n(i) AS (SELECT 749 UNION ALL SELECT i + 1 FROM n WHERE i < 1000)"
        f" INSERT INTO docs SELECT i, {', '.join([long] * 10)} FROM n"
    )
    source = SQLiteSource(conn, table="docs")
    position: Any = None
    served: list[int] = []
    sizes: list[int] = []
    limits = Limits(65536)
    for _ in range(400):
        _ByteCountingCursor.fetched = 0
        builder = PageBuilder(limits)
        more, position = source.fill(builder, position)
        page = builder.finish(complete=not more, next_cursor="x" if more else None)
        served += [row["id"] for row in page.items]
        sizes.append(len(page.items))
        assert _ByteCountingCursor.fetched <= AHEAD_BYTES + limits.max_bytes
        if not more:
            break
    assert served == list(range(1, 1001))
    assert sizes[0] > 600  # the first page holds most short rows: the case above


def test_regression_sqlite_parse_colnames_names_are_refused_clearly(tmp_path: Path) -> None:
    """Found by a tester: with detect_types=PARSE_COLNAMES sqlite3 reads a column named
    "size [cm]" as "size", and the source's own query, which names the columns, failed
    with sqlite3.OperationalError: no such column. Such a connection is refused, naming
    it, where a name was cut; other names page as usual."""
    path = tmp_path / "cols.db"
    with contextlib.closing(sqlite3.connect(path)) as setup:
        setup.execute('CREATE TABLE t (id INTEGER PRIMARY KEY, created TEXT, "size [cm]" INT)')
        setup.execute("INSERT INTO t VALUES (1, '2024-01-01 10:00:00', 3)")
        setup.commit()
    with contextlib.closing(sqlite3.connect(path, detect_types=sqlite3.PARSE_COLNAMES)) as conn:
        for source in (
            SQLiteSource(conn, table="t"),
            SQLiteSource(
                conn, query='SELECT id, created AS "created [timestamp]" FROM t', unique=True
            ),
        ):
            with pytest.raises(LimitError, match="PARSE_COLNAMES") as raised:
                pages_by_paginate(source, Limits(2000))
            assert raised.value.name == "connection"
        plain = SQLiteSource(conn, query="SELECT id, created FROM t", unique=True)
        assert _rows(pages_by_paginate(plain, Limits(2000))) == [
            {"id": 1, "created": "2024-01-01 10:00:00"}
        ]
    # By path, the source's own connection reads names whole.
    rows = _rows(pages_by_paginate(SQLiteSource(path, table="t"), Limits(2000)))
    assert rows == [{"id": 1, "created": "2024-01-01 10:00:00", "size [cm]": 3}]


def test_regression_sqlite_a_database_file_replaced_on_disk_is_read_anew(
    tmp_path: Path,
) -> None:
    """Found by a tester: a path source kept its connection to the file it opened, so a
    database rebuilt and moved over the path (os.replace) was never read: later pages,
    and every new paging for the source's life, served the old file."""
    path = tmp_path / "data.db"

    def build(tag: str) -> None:
        new = tmp_path / "data.db.new"
        with contextlib.closing(sqlite3.connect(new)) as db:
            db.execute("CREATE TABLE t (id INTEGER PRIMARY KEY, v TEXT)")
            db.executemany("INSERT INTO t VALUES (?, ?)", [(i, f"{tag}-{i}") for i in range(1, 7)])
            db.commit()
        os.replace(new, path)

    build("old")
    with SQLiteSource(path, table="t") as source:
        limits = Limits(2000, max_items=2)
        builder_pages = pages_by_fill(source, limits)
        assert [row["v"] for row in _rows(builder_pages)][:2] == ["old-1", "old-2"]
        builder = PageBuilder(limits)
        _, after = source.fill(builder, None, limit_hint=2)
        assert [row["v"] for row in builder.finish(complete=False).items] == ["old-1", "old-2"]
        build("new")
        builder = PageBuilder(limits)
        source.fill(builder, after, limit_hint=2)
        assert [row["v"] for row in builder.finish(complete=False).items] == ["new-3", "new-4"]
        assert [row["v"] for row in _rows(pages_by_paginate(source, limits))] == [
            f"new-{i}" for i in range(1, 7)
        ]
        assert [row["v"] for row, _ in source.open(None)] == [f"new-{i}" for i in range(1, 7)]


class _Paused:
    """A page builder that runs *between* once, when a source's fill() first asks whom
    the page is for (``reader``): fill() asks after it has begun, before the page reads
    a row; in the release that took the query plan before the source's lock, after the
    plan was taken."""

    def __init__(self, builder: PageBuilder, between: Callable[[], None]) -> None:
        self._builder = builder
        self._between: Callable[[], None] | None = between
        self.limits = builder.limits

    @property
    def reader(self) -> Any:
        between, self._between = self._between, None
        if between is not None:
            between()
        return self._builder.reader

    def fill_from(self, seq: list[Any], start: int = 0) -> tuple[bool, int]:
        return self._builder.fill_from(seq, start)


def _build_version(path: Path, columns: list[str], tag: str) -> None:
    """A database of table t (id and *columns*, each holding *tag*) moved over *path*."""
    new = path.with_name(path.name + ".new")
    with contextlib.closing(sqlite3.connect(new)) as db:
        db.execute(f"CREATE TABLE t (id INTEGER PRIMARY KEY, {', '.join(columns)})")
        marks = ", ".join("?" * (len(columns) + 1))
        db.executemany(
            f"INSERT INTO t VALUES ({marks})", [(i, *[tag] * len(columns)) for i in range(1, 9)]
        )
        db.commit()
    os.replace(new, path)


@pytest.mark.parametrize(
    ("old", "new"), [(["a"], ["a", "added"]), (["a", "gone"], ["a"])], ids=["added", "dropped"]
)
def test_regression_sqlite_a_page_that_waited_while_the_file_was_replaced_reads_it_whole(
    tmp_path: Path, old: list[str], new: list[str]
) -> None:
    """Found by a tester: a path source paged from several threads while its file was
    replaced (os.replace) by one with other columns. A page took its query plan before
    the source's lock, and waited for it while another thread's page reopened the file
    and learned the new columns; then it ran the old file's select list on the new file:
    a column the new file added was missing from its rows, with no marker, and one it
    dropped raised sqlite3.OperationalError "no such column". The interleaving is made,
    not raced for: the page pauses once it has begun, the file is replaced and another
    thread pages it, then the page goes on."""
    path = tmp_path / "data.db"
    _build_version(path, old, "old")
    limits = Limits(4000, max_items=2)
    with SQLiteSource(path, table="t") as source:
        first = PageBuilder(limits)
        _, after = source.fill(first, None, limit_hint=2)
        assert [set(row) for row in first.finish(complete=False).items] == [{"id", *old}] * 2
        others: list[list[Any]] = []

        def another_threads_page() -> None:
            others.append(_rows(pages_by_fill(source, limits)))

        def replace_and_let_another_page_run() -> None:
            _build_version(path, new, "new")
            other = threading.Thread(target=another_threads_page)
            other.start()
            other.join(60)
            assert not other.is_alive(), "the other thread's page never ran"

        builder = PageBuilder(limits)
        source.fill(_Paused(builder, replace_and_let_another_page_run), after, limit_hint=2)
        want = {"id": 0, **dict.fromkeys(new, "new")}
        assert list(builder.finish(complete=False).items) == [want | {"id": 3}, want | {"id": 4}]
        assert others == [[want | {"id": i} for i in range(1, 9)]]


def test_regression_sqlite_an_iterator_not_yet_stepped_reads_a_replaced_file_whole(
    tmp_path: Path,
) -> None:
    """Found with the race above: open() took its query plan when called, while the
    iterator checks the file at its first step, so one made before the file was replaced
    ran the old file's select list on the new file (a column added missing, one dropped
    an error)."""
    path = tmp_path / "data.db"
    for old, new in ((["a"], ["a", "added"]), (["a", "gone"], ["a"])):
        for mode in ("keyset", "offset"):
            _build_version(path, old, "old")
            with SQLiteSource(path, table="t", mode=mode) as source:
                it = source.open(None)
                _build_version(path, new, "new")
                want = {"id": 0, **dict.fromkeys(new, "new")}
                assert [row for row, _ in it] == [want | {"id": i} for i in range(1, 9)]


def test_regression_sqlite_the_connections_row_factory_never_makes_the_sources_rows() -> None:
    """Found by a tester: over a connection whose row_factory makes dicts (the usual
    recipe) every page failed with a bare KeyError: 0, because the source read
    ``PRAGMA encoding`` through ``conn.execute``, which uses the connection's factory.
    A factory that records its calls proves no query of the source reaches it: table
    and query, keyset and offset, cut cells, unique keys, and the check of text keys a
    text_factory decodes (which ran its own query the same way)."""
    calls: list[object] = []

    def dict_rows(cur: sqlite3.Cursor, row: tuple[Any, ...]) -> dict[str, Any]:
        calls.append(row)
        return {d[0]: v for d, v in zip(cur.description, row, strict=True)}

    conn = sqlite3.connect(":memory:")
    conn.execute("CREATE TABLE t (id INTEGER PRIMARY KEY, name TEXT NOT NULL UNIQUE, note TEXT)")
    conn.executemany(
        "INSERT INTO t VALUES (?, ?, ?)", [(i, f"n{i:02}", "x" * (10 * i)) for i in range(1, 11)]
    )
    conn.row_factory = dict_rows
    want = [{"id": i, "name": f"n{i:02}", "note": "x" * (10 * i)} for i in range(1, 11)]
    sources = [
        SQLiteSource(conn, table="t"),
        SQLiteSource(conn, table="t", mode="offset"),
        SQLiteSource(conn, table="t", order_by=["name"]),
        SQLiteSource(conn, query="SELECT * FROM t", order_by=["id"], unique=True),
        SQLiteSource(conn, query="SELECT * FROM t", order_by=["id"], unique=True, mode="offset"),
    ]
    limits = Limits(2000, max_items=3)
    for source in sources:
        assert _rows(pages_by_paginate(source, limits)) == want
        assert _rows(pages_by_fill(source, limits)) == want
    cut = _rows(pages_by_fill(SQLiteSource(conn, table="t", max_cell_bytes=64), limits))
    assert [row["id"] for row in cut] == list(range(1, 11))
    assert isinstance(cut[-1]["note"], Clipped)
    conn.text_factory = lambda b: b.decode("utf-8", "replace")
    by_name = SQLiteSource(conn, table="t", order_by=["name"])
    assert _rows(pages_by_paginate(by_name, limits)) == want
    assert calls == []
    assert conn.row_factory is dict_rows  # the caller's, untouched
    assert conn.execute("SELECT id FROM t WHERE id = 1").fetchone() == {"id": 1}


@pytest.mark.postgres
def test_regression_pg_the_connections_row_factory_never_makes_the_sources_rows(
    postgres_server: PostgresServer,
) -> None:
    """Found by a tester (by reading): ordering by a float column on a caller's
    connection asked the session's extra_float_digits through ``conn.execute``, whose
    cursor makes rows by the connection's row_factory: with dict_row, KeyError: 0. A
    factory that records its calls proves no query of the source reaches it."""
    calls: list[object] = []

    def dict_rows(cur: Any) -> Any:
        calls.append(cur)
        return psycopg.rows.dict_row(cur)

    with psycopg.connect(postgres_server.dsn, row_factory=dict_rows) as conn:
        conn.execute("CREATE TEMP TABLE fr (id int PRIMARY KEY, score float8 NOT NULL, r real)")
        conn.execute("INSERT INTO fr SELECT g, g / 7.0, g / 3.0 FROM generate_series(1, 9) g")
        conn.commit()
        calls.clear()
        limits = Limits(2000, max_items=4)
        for source in (
            PostgresSource(conn, table="fr", order_by=["score"]),
            PostgresSource(conn, table="fr", order_by=["r", "id"], mode="offset"),
            PostgresSource(conn, query="SELECT * FROM fr", order_by=["score"], unique=True),
            PostgresSource(conn, table="fr", max_cell_bytes=64),
        ):
            for pages in (pages_by_paginate(source, limits), pages_by_fill(source, limits)):
                rows = _rows(pages)
                assert [row["id"] for row in rows] == list(range(1, 10))
                assert rows[0]["score"] == 1 / 7
        assert calls == []
        assert conn.execute("SELECT 1 AS one").fetchone() == {"one": 1}


class _InterruptAt:
    """A tracer that raises KeyboardInterrupt at the *n*-th call into, or return from, a
    function of psycopg (not psycopg_pool, whose own bookkeeping an interrupt can break):
    where CPython runs a signal handler, so where Ctrl-C can land, by count, not timing."""

    def __init__(self, n: int) -> None:
        self.n, self.seen, self.fired = n, 0, False
        self.package = os.path.dirname(psycopg.__file__) + os.sep

    def __call__(self, frame: Any, event: str, arg: Any) -> Any:
        if not frame.f_code.co_filename.startswith(self.package):
            return None
        self._count(event)
        return self._local

    def _local(self, frame: Any, event: str, arg: Any) -> Any:
        self._count(event)
        return self._local

    def _count(self, event: str) -> None:
        if event in ("call", "return") and not self.fired:
            self.seen += 1
            if self.seen == self.n:
                self.fired = True
                raise KeyboardInterrupt


def _interrupted_pages(
    make: Callable[[], PostgresSource], on_retry_error: type[Exception] | None = None
) -> tuple[int, int]:
    """Page 2 of table ``intr``, interrupted at each point psycopg can be (`_InterruptAt`),
    each time followed by a retry that must serve exactly page 2's rows (or raise
    *on_retry_error*, after which *make* gives a new source). Returns how many points
    there were and how many retries raised."""
    store, scope, limits = MemoryCursorStore(), Scope("t", {}), Limits(2000)
    source = make()
    first = paginate(source, scope=scope, store=store, limits=limits)
    want = list(
        paginate(source, scope=scope, cursor=first.next_cursor, store=store, limits=limits).items
    )
    assert want
    assert want[0]["id"] == first.items[-1]["id"] + 1
    refused = 0
    for n in range(1, 10_000):
        tracer, before = _InterruptAt(n), sys.gettrace()
        sys.settrace(tracer)
        try:
            paginate(source, scope=scope, cursor=first.next_cursor, store=store, limits=limits)
        except (KeyboardInterrupt, psycopg.Error):
            # psycopg's cleanup may fail on what the interrupt left, its error replacing it.
            assert tracer.fired
        finally:
            sys.settrace(before)
        if not tracer.fired:
            return n, refused
        try:
            page = paginate(
                source, scope=scope, cursor=first.next_cursor, store=store, limits=limits
            )
        except Exception as exc:
            if on_retry_error is None or not isinstance(exc, on_retry_error):
                raise AssertionError(f"the page after an interrupt at point {n} failed") from exc
            refused += 1
            source.close()
            source = make()
            continue
        assert list(page.items) == want, n
    raise AssertionError("psycopg never finished a page without the interrupt")


@pytest.fixture
def intr_dsn(postgres_server: PostgresServer) -> Iterator[str]:
    with psycopg.connect(postgres_server.dsn, autocommit=True) as conn:
        conn.execute("DROP TABLE IF EXISTS intr")
        conn.execute("CREATE TABLE intr (id int PRIMARY KEY, name text, body text)")
        conn.execute(
            "INSERT INTO intr SELECT g, 'n' || g, repeat('x', g % 40)"
            " FROM generate_series(1, 400) g"
        )
        yield postgres_server.dsn
        conn.execute("DROP TABLE intr")


@pytest.mark.postgres
@pytest.mark.parametrize("given", ["conninfo", "pool"])
def test_regression_pg_page_interrupted_inside_psycopg_leaves_the_source_usable(
    intr_dsn: str, given: str
) -> None:
    """Found by a tester: a KeyboardInterrupt that landed inside psycopg during a page
    (between sending a pipelined query and reading its result) left the source's own
    connection ACTIVE, and every later page failed with "another command is already in
    progress", its message a line longer each time, until close(). The source now closes
    a connection it owns (or borrowed from a pool) after an interrupt, and the next page
    opens another: it serves the same rows, none lost or repeated."""
    import psycopg_pool  # the postgres extra's pool, used only here

    with contextlib.ExitStack() as stack:
        if given == "pool":
            pool = stack.enter_context(
                psycopg_pool.ConnectionPool(intr_dsn, min_size=1, max_size=2)
            )
            points, refused = _interrupted_pages(lambda: PostgresSource(pool, table="intr"))
        else:
            source = stack.enter_context(PostgresSource(intr_dsn, table="intr"))
            points, refused = _interrupted_pages(lambda: source)
    assert points > 100
    assert refused == 0


@pytest.mark.postgres
def test_regression_pg_interrupted_page_on_a_callers_connection_is_refused_clearly(
    intr_dsn: str,
) -> None:
    """Found by a tester: the same interrupt left a connection the caller passed ACTIVE,
    and each later page failed with psycopg's "another command is already in progress"
    (one line more each time). The connection is the caller's, so it is not replaced:
    the next page raises a LimitError naming it instead, and any page whose connection
    the interrupt left usable serves the right rows."""
    conns: list[psycopg.Connection[Any]] = []

    def make() -> PostgresSource:
        conns.append(psycopg.connect(intr_dsn, autocommit=True))
        return PostgresSource(conns[-1], table="intr")

    try:
        points, refused = _interrupted_pages(make, on_retry_error=LimitError)
    finally:
        for conn in conns:
            conn.close()
    assert points > 100
    assert refused > 0  # the path was taken: some interrupt left the connection stuck


def test_regression_unclosed_sqlite_source_releases_its_file_without_gc(tmp_path: Path) -> None:
    """Found by a tester: a `sqlite3.Connection` is in a reference cycle with its own
    statement cache, so a dropped SQLiteSource(path), or an abandoned open() iterator,
    kept the database file open until the cycle collector ran (100 sources, 100 fds
    with gc off). The source now closes its connection when the last reference goes."""
    path = tmp_path / "t.db"
    with contextlib.closing(sqlite3.connect(path)) as setup:
        setup.execute("CREATE TABLE t (id INTEGER PRIMARY KEY, name TEXT)")
        setup.executemany("INSERT INTO t VALUES (?, ?)", [(i, "x" * i) for i in range(200)])
        setup.commit()

    def fds() -> int:
        return len(os.listdir("/proc/self/fd"))

    store, scope = MemoryCursorStore(), Scope("t", {})
    gc.disable()
    try:
        before = fds()
        for _ in range(20):
            source = SQLiteSource(path, table="t")
            paginate(source, scope=scope, store=store, limits=Limits(2000))
            del source
            rows = SQLiteSource(path, table="t").open(None)
            next(rows)
            del rows  # abandoned mid-way
        assert fds() == before
    finally:
        gc.enable()

"""r27: positions whose datetime's tzinfo fails, the clocks cursor stores expire and
evict on, and connections a store or a source opened left open when it is dropped."""

from __future__ import annotations

import datetime as dt
import gc
import os
import sqlite3
import time
import warnings
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import psycopg
import pytest

from jsonbudget import (
    ExpiredCursor,
    Limits,
    MemoryCursorStore,
    PostgresSource,
    Scope,
    SQLiteCursorStore,
    paginate,
)
from tests.fixtures_postgres import PostgresServer
from tests.limited import run_limited

SCOPE = Scope("alice", {"q": 1})

# -- 1: a position holding a datetime whose tzinfo raises ----------------------------------

_RAISING_TZ = """
    import datetime as dt
    import jsonbudget
    from jsonbudget import EncodeError, InvalidCursor, Limits, Scope
    from jsonbudget import MemoryCursorStore, SQLiteCursorStore, paginate
    from jsonbudget._sources.sql import _position_key

    class RaisingTZ(dt.tzinfo):
        def utcoffset(self, d):
            raise RuntimeError("boom")

        def dst(self, d):
            return None

    class PlusTwo(dt.tzinfo):
        def utcoffset(self, d):
            return dt.timedelta(hours=2)

        def dst(self, d):
            return None

    BAD = dt.datetime(2024, 1, 1, tzinfo=RaisingTZ())

    def outcome(call):
        try:
            call()
        except (EncodeError, InvalidCursor) as exc:
            return type(exc).__name__
        return "accepted"

    class TimeSource:
        def __init__(self, tz, described=None):
            self.rows = [dt.datetime(2024, 1, 1 + i, tzinfo=tz) for i in range(20)]
            self.described = {"kind": "times"} if described is None else described

        def open(self, position, *, limit_hint=None):
            for i, r in enumerate(self.rows):
                if position is None or i > int(position[1]):
                    yield {"i": i}, [r, i]

        def describe(self):
            return self.described

    limits = Limits(512, max_items=5)
    for store in (MemoryCursorStore(), SQLiteCursorStore(":memory:")):
        state = store.start(Scope("a"), max_pages=None)
        print("mint", outcome(lambda: store.mint(state, [BAD, 1])))
        print("page", outcome(lambda: paginate(
            TimeSource(RaisingTZ()), scope=Scope("a"), store=store, limits=limits
        )))
        print("describe", outcome(lambda: paginate(
            TimeSource(dt.UTC, {"since": BAD}), scope=Scope("a"), store=store, limits=limits
        )))
        # a tzinfo that works: the position as orjson writes that datetime
        token = store.mint(state, [dt.datetime(2024, 1, 5, tzinfo=PlusTwo()), 4])
        print("position", store.resume(token, Scope("a")).position)
        source = TimeSource(PlusTwo())
        page = paginate(source, scope=Scope("a"), store=store, limits=limits)
        page = paginate(
            source, scope=Scope("a"), cursor=page.next_cursor, store=store, limits=limits
        )
        print("next", [item["i"] for item in page.items])
    print("scope", outcome(lambda: Scope("a", {"since": BAD})))
    print("sql key", outcome(lambda: _position_key([BAD, 1])))
"""


def test_regression_position_with_raising_tzinfo_crashed_the_process() -> None:
    done = run_limited(_RAISING_TZ, timeout=120)
    assert done.returncode == 0, (done.returncode, done.stderr[-2000:])
    assert done.stdout.splitlines() == [
        *[
            "mint EncodeError",
            "page EncodeError",
            "describe EncodeError",
            "position ['2024-01-05T00:00:00+02:00', 4]",
            "next [5, 6, 7, 8, 9]",
        ]
        * 2,
        "scope EncodeError",
        "sql key InvalidCursor",
    ]


# -- 2: MemoryCursorStore's clock and a suspend --------------------------------------------


@pytest.mark.skipif(not hasattr(time, "CLOCK_BOOTTIME"), reason="no CLOCK_BOOTTIME here")
def test_regression_memory_cursor_outlived_its_ttl_after_a_suspend(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    store = MemoryCursorStore(ttl=900)
    state = store.start(SCOPE, max_pages=None)
    token = store.mint(state, 5)
    assert store.resume(token, SCOPE).position == 5
    # An hour suspended: the boot-time clock counts it, the monotonic clock stands still.
    real = time.clock_gettime
    boottime = time.CLOCK_BOOTTIME

    def suspended(clock: int) -> float:
        return real(clock) + (3600 if clock == boottime else 0)

    monkeypatch.setattr(time, "clock_gettime", suspended)
    with pytest.raises(ExpiredCursor):
        store.resume(token, SCOPE)


# -- 3: SQLiteCursorStore evicts in the order operations were started ----------------------


def _live(store: SQLiteCursorStore, tokens: dict[str, str]) -> dict[str, bool]:
    out = {}
    for name, token in tokens.items():
        try:
            store.resume(token, SCOPE)
        except ExpiredCursor:
            out[name] = False
        else:
            out[name] = True
    return out


def test_regression_sqlite_store_evicted_the_newest_after_the_clock_was_set_back(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    wall = [time.time()]
    monkeypatch.setattr(time, "time", lambda: wall[0])
    with SQLiteCursorStore(tmp_path / "c.db", max_per_principal=2) as store:
        tokens = {}
        for name in "AB":
            tokens[name] = store.mint(store.start(SCOPE, max_pages=None), 1)
        wall[0] -= 3600  # NTP steps the wall clock back an hour
        for name in "CD":
            tokens[name] = store.mint(store.start(SCOPE, max_pages=None), 1)
        assert _live(store, tokens) == {"A": False, "B": False, "C": True, "D": True}


def test_sqlite_store_opens_a_file_an_older_version_made(tmp_path: Path) -> None:
    path = tmp_path / "c.db"
    SQLiteCursorStore(path).close()
    # The file as the previous version left it: no order table.
    with sqlite3.connect(path) as conn:
        conn.execute("DROP TABLE jsonbudget_op_order")
    conn.close()
    with SQLiteCursorStore(path, max_per_principal=2) as store:
        first = store.mint(store.start(SCOPE, max_pages=None), 1)
        # An operation a process of the previous version starts meanwhile: no order row.
        now = time.time()
        with sqlite3.connect(path) as conn:
            conn.execute(
                "INSERT INTO jsonbudget_ops VALUES (?, ?, ?, 1, ?, ?, ?)",
                (os.urandom(16), SCOPE.principal_fingerprint, SCOPE.query_fingerprint,
                 now, now + 900, None),
            )  # fmt: skip
        conn.close()
        last = store.mint(store.start(SCOPE, max_pages=None), 1)
        # the unordered one went first; then the oldest started here
        assert _live(store, {"first": first, "last": last}) == {"first": True, "last": True}
        newest = store.mint(store.start(SCOPE, max_pages=None), 1)
        assert _live(store, {"first": first, "last": last, "newest": newest}) == {
            "first": False,
            "last": True,
            "newest": True,
        }


# -- 4: an SQLiteCursorStore dropped unclosed -----------------------------------------------


def _fds() -> int:
    return len(os.listdir("/proc/self/fd"))


@pytest.mark.skipif(not os.path.isdir("/proc/self/fd"), reason="counts fds in /proc")
def test_regression_dropped_sqlite_store_kept_its_files_open(tmp_path: Path) -> None:
    path = tmp_path / "c.db"
    SQLiteCursorStore(path).close()
    rows, limits = list(range(100)), Limits(512, max_items=5)
    gc.collect()
    gc.disable()  # as a server that froze its heap: nothing but the last reference closes it
    try:
        before = _fds()
        for _ in range(50):  # a store made per request and dropped
            store = SQLiteCursorStore(path)
            page = paginate(rows, scope=SCOPE, store=store, limits=limits)
            paginate(rows, scope=SCOPE, cursor=page.next_cursor, store=store, limits=limits)
            del store, page
        after = _fds()
    finally:
        gc.enable()
    assert after == before


# -- 5: a PostgresSource built from a conninfo, dropped unclosed ---------------------------


@pytest.fixture
def pg_table(postgres_server: PostgresServer) -> Iterator[str]:
    with psycopg.connect(postgres_server.dsn, autocommit=True) as conn:
        conn.execute("DROP TABLE IF EXISTS r27")
        conn.execute("CREATE TABLE r27 AS SELECT i AS id FROM generate_series(1, 50) AS i")
        conn.execute("ALTER TABLE r27 ADD PRIMARY KEY (id)")
        yield "r27"
        conn.execute("DROP TABLE r27")


@pytest.mark.postgres
def test_regression_dropped_postgres_source_warned_of_its_connection_left_open(
    postgres_server: PostgresServer, pg_table: str
) -> None:
    dsn, limits = postgres_server.dsn, Limits(1024, max_items=5)

    def page() -> None:
        paginate(
            PostgresSource(dsn, table=pg_table),
            scope=SCOPE,
            store=MemoryCursorStore(),
            limits=limits,
        )

    def raising_page() -> None:
        with pytest.raises(psycopg.Error):
            paginate(
                PostgresSource(dsn, table="no_such_table"),
                scope=SCOPE,
                store=MemoryCursorStore(),
                limits=limits,
            )

    def part_read() -> None:
        rows: Any = PostgresSource(dsn, table=pg_table).open(None)
        next(rows)
        del rows

    for case in (page, raising_page, part_read):
        with warnings.catch_warnings(record=True) as seen:
            warnings.simplefilter("always", ResourceWarning)
            case()
            gc.collect()
        assert [str(w.message) for w in seen if w.category is ResourceWarning] == [], case


# -- a MemoryError reading a query value -----------------------------------------------------


class _OutOfMemory(dict[str, Any]):
    """A mapping whose items() runs out of memory, as reading a huge one may."""

    def items(self) -> Any:
        raise MemoryError


@pytest.mark.parametrize("where", ["top", "nested"])
def test_regression_memoryerror_reading_a_query_was_an_encode_error(where: str) -> None:
    query: Any = _OutOfMemory() if where == "top" else {"q": _OutOfMemory(a=1)}
    with pytest.raises(MemoryError):
        Scope("alice", query)


class _OutOfMemoryTZ(dt.tzinfo):
    def utcoffset(self, d: dt.datetime | None) -> dt.timedelta:
        raise MemoryError

    def dst(self, d: dt.datetime | None) -> None:
        return None

    def tzname(self, d: dt.datetime | None) -> str:
        return "OOM"


def test_regression_memoryerror_in_a_positions_tzinfo_was_an_encode_error() -> None:
    store = MemoryCursorStore()
    state = store.start(SCOPE, max_pages=None)
    position: Any = [dt.datetime(2024, 1, 1, tzinfo=_OutOfMemoryTZ()), 1]  # as a source gives
    with pytest.raises(MemoryError):
        store.mint(state, position)

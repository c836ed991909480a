"""`Paginator.apaginate` (and `McpPager.apaginate`, async paginated tools) makes its
blocking calls in a worker thread, not on the event loop.

It called the cursor store (resume or start, mint) and the spill store on the loop: with
a `SQLiteCursorStore` whose database another connection held locked, the whole loop
froze until the lock went or ``busy_timeout`` ran out. Each test has a task on the loop
do what the blocked call waits for (commit the other connection, set an event): on the
old code the loop never ran it, and the call failed when its wait ran out.
"""

from __future__ import annotations

import asyncio
import sqlite3
import threading
from collections.abc import AsyncIterator
from pathlib import Path
from typing import Any

import orjson
import pytest

from jsonbudget import Limits, MemoryCursorStore, Paginator, Scope, SQLiteCursorStore, SQLiteSource
from jsonbudget._cursors.store import CursorState
from jsonbudget.mcp import McpPager

ALICE = Scope("alice", {"q": "orders"})
#: How long a gated call waits for the loop before it fails: only the old code waits it.
WAIT = 10.0


class Rows:
    """An async source of ``{"id": i}`` rows; *on_open* runs as each page opens it."""

    def __init__(self, n: int = 1000, on_open: Any = None) -> None:
        self.n = n
        self.on_open = on_open

    def describe(self) -> dict[str, Any]:
        return {"t": "rows", "n": self.n}

    async def aopen(
        self, position: Any, *, limit_hint: int | None = None
    ) -> AsyncIterator[tuple[Any, Any]]:
        if self.on_open is not None:
            self.on_open()
        for i in range(position or 0, self.n):
            yield {"id": i}, i + 1


class Locker:
    """Another connection to the store's database, which takes its write lock."""

    def __init__(self, path: Path) -> None:
        self.conn = sqlite3.connect(path, isolation_level=None)
        self.unlocks: list[asyncio.Future[None]] = []

    def lock(self) -> None:
        """Take the lock, and give it back from a task: on the loop's next turn."""
        self.conn.execute("BEGIN IMMEDIATE")

        async def unlock() -> None:
            self.conn.execute("COMMIT")

        self.unlocks.append(asyncio.ensure_future(unlock()))

    def close(self) -> None:
        for task in self.unlocks:
            task.cancel()  # one the loop never ran: the page failed on the lock
        self.conn.close()


@pytest.mark.parametrize("how", ["async source", "list", "McpPager"])
async def test_regression_apaginate_resumes_a_locked_sqlite_store_off_the_loop(
    tmp_path: Path, how: str
) -> None:
    path = tmp_path / "cursors.sqlite3"
    store = SQLiteCursorStore(path, busy_timeout=WAIT)
    source: Any = Rows() if how != "list" else [{"id": i} for i in range(1000)]
    locker = Locker(path)
    try:
        if how == "McpPager":
            mcp = McpPager(max_bytes=4000, store=store)
            first = await mcp.apaginate(source, scope=ALICE)
            cursor = first.structured_content["nextCursor"]
            locker.lock()
            result = await mcp.apaginate(source, scope=ALICE, cursor=cursor)
            ids = [it["id"] for it in result.structured_content["items"]]
        else:
            pager = Paginator(Limits(600), store=store)
            page = await pager.apaginate(source, scope=ALICE)
            cursor = page.next_cursor
            locker.lock()
            page = await pager.apaginate(source, scope=ALICE, cursor=cursor)
            ids = [it["id"] for it in page.items]
        # The loop ran the task that unlocked the store while the page waited for it.
        assert locker.unlocks[0].done()
        assert ids
        assert ids[0] > 0
    finally:
        locker.close()
        store.close()


async def test_regression_apaginate_mints_in_a_locked_sqlite_store_off_the_loop(
    tmp_path: Path,
) -> None:
    path = tmp_path / "cursors.sqlite3"
    store = SQLiteCursorStore(path, busy_timeout=WAIT)
    locker = Locker(path)
    # Locked once the page has started its operation: only the mint waits for it.
    pager = Paginator(Limits(600), store=store)
    try:
        page = await pager.apaginate(Rows(on_open=locker.lock), scope=ALICE)
        assert locker.unlocks[0].done()
        assert page.next_cursor is not None
        after = await pager.apaginate(Rows(), scope=ALICE, cursor=page.next_cursor)
        assert after.items[0] == {"id": len(page.items)}
    finally:
        locker.close()
        store.close()


class Spilled:
    def __init__(self, ref: str) -> None:
        self.ref = ref


class GatedSpill:
    """A spill store whose writes wait for *release*, which a task on the loop sets."""

    max_file_bytes = 1 << 20

    def __init__(self) -> None:
        self.entered = threading.Event()
        self.release = threading.Event()
        self.done = threading.Event()
        self.written: list[bytes] = []

    def put(self, data: Any, *, label: str) -> Spilled:
        self.entered.set()
        if not self.release.wait(WAIT):
            raise AssertionError("the spill write ran on the event loop")
        self.written.append(bytes(data))  # a store of its own: given the item's bytes
        self.done.set()
        return Spilled(f"{label}-{len(self.written)}")


def _big_rows() -> list[dict[str, Any]]:
    # Every third row is larger than a page: the first of its page, spilled.
    return [{"id": i, "vals": (x for x in range(400 if i % 3 == 1 else 5))} for i in range(9)]


class ListRows:
    """An async source over a list of rows, which it yields as they are."""

    def __init__(self, rows: list[dict[str, Any]]) -> None:
        self.rows = rows

    def describe(self) -> dict[str, Any]:
        return {"t": "list rows"}

    async def aopen(
        self, position: Any, *, limit_hint: int | None = None
    ) -> AsyncIterator[tuple[Any, Any]]:
        for i in range(position or 0, len(self.rows)):
            yield self.rows[i], i + 1


async def test_regression_apaginate_spills_off_the_loop() -> None:
    spill = GatedSpill()
    pager = Paginator(Limits(800), oversized="spill", spill_store=spill)

    async def release() -> None:
        spill.release.set()

    released = asyncio.ensure_future(release())
    page = await pager.apaginate(ListRows(_big_rows()), scope=ALICE, cursor=None)
    assert released.done()
    assert [o.outcome for o in page.oversized] == []  # row 0 fits
    page = await pager.apaginate(ListRows(_big_rows()), scope=ALICE, cursor=page.next_cursor)
    assert page.items[0]["id"] == 1
    assert [o.outcome for o in page.oversized] == ["spilled"]
    assert orjson.loads(spill.written[0])["vals"] == list(range(400))


class GatedStore:
    """A cursor store (not known never to wait) whose mints wait, once armed, for
    *release*."""

    def __init__(self) -> None:
        self.inner = MemoryCursorStore()
        self.armed = False
        self.entered = threading.Event()
        self.release = threading.Event()
        self.done = threading.Event()

    def start(self, scope: Scope, *, max_pages: int | None) -> CursorState:
        return self.inner.start(scope, max_pages=max_pages)

    def resume(self, token: str, scope: Scope) -> CursorState:
        return self.inner.resume(token, scope)

    def mint(self, state: CursorState, position: Any) -> str:
        if self.armed:
            self.entered.set()
            if not self.release.wait(WAIT):
                raise AssertionError("the mint ran on the event loop")
        try:
            return self.inner.mint(state, position)
        finally:
            self.done.set()


def _generator_rows() -> list[dict[str, Any]]:
    return [{"id": i, "vals": (x for x in range(40))} for i in range(20)]


def _follow(pages: list[bytes]) -> dict[int, list[int]]:
    # A spilled item is its marker on the page: its values are in the spill store.
    items = (it for data in pages for it in orjson.loads(data)["items"])
    return {it["id"]: it["vals"] for it in items if type(it) is dict}


async def _rest(pager: Paginator, source: Any, cursor: str | None) -> list[bytes]:
    pages: list[bytes] = []
    while cursor is not None:
        page = await pager.apaginate(source, scope=ALICE, cursor=cursor)
        pages.append(page.data)
        cursor = page.next_cursor
    return pages


async def test_regression_apaginate_cancelled_while_minting_serves_and_loses_nothing() -> None:
    store = GatedStore()
    pager = Paginator(Limits(512), store=store)
    source = ListRows(_generator_rows())
    first = await pager.apaginate(source, scope=ALICE)
    store.armed = True
    task = asyncio.ensure_future(pager.apaginate(source, scope=ALICE, cursor=first.next_cursor))
    assert await asyncio.to_thread(store.entered.wait, WAIT)
    task.cancel()
    with pytest.raises(asyncio.CancelledError):
        await task
    store.armed = False
    store.release.set()
    assert await asyncio.to_thread(store.done.wait, WAIT)
    # The same cursor again gives the page the cancelled one would have, and every
    # value its items' generators gave is still there, on it and after it.
    vals = _follow([first.data, *await _rest(pager, source, first.next_cursor)])
    assert list(vals) == list(range(20))
    assert all(v == list(range(40)) for v in vals.values()), vals


async def test_regression_apaginate_cancelled_while_spilling_serves_and_loses_nothing() -> None:
    spill = GatedSpill()
    pager = Paginator(Limits(800), oversized="spill", spill_store=spill)
    source = ListRows(_big_rows())
    spill.release.set()
    first = await pager.apaginate(source, scope=ALICE)
    spill.release.clear()
    spill.entered.clear()
    spill.done.clear()
    task = asyncio.ensure_future(pager.apaginate(source, scope=ALICE, cursor=first.next_cursor))
    assert await asyncio.to_thread(spill.entered.wait, WAIT)
    task.cancel()
    with pytest.raises(asyncio.CancelledError):
        await task
    spill.release.set()
    assert await asyncio.to_thread(spill.done.wait, WAIT)
    # The retried page spills the same item, whole: what the cancelled write pulled from
    # its generator was kept for it.
    vals = _follow([first.data, *await _rest(pager, source, first.next_cursor)])
    spilled = [orjson.loads(w) for w in spill.written]
    assert [row["id"] for row in spilled] == [1, 1, 4, 7]
    assert all(row["vals"] == list(range(400)) for row in spilled)
    assert list(vals) == [0, 2, 3, 5, 6, 8]
    assert all(v == list(range(5)) for v in vals.values()), vals


def _pages_of(tmp_path: Path, run: Any) -> int:
    """How many rows one follow of a SQLite connection's table gave, through a
    SQLiteCursorStore, the connection made on the thread that *run* runs the loop on."""
    store = SQLiteCursorStore(str(tmp_path / "cursors.db"))

    async def follow() -> int:
        conn = sqlite3.connect(":memory:")  # refuses other threads, as is the default
        conn.execute("CREATE TABLE t (id INTEGER PRIMARY KEY, v TEXT)")
        conn.executemany("INSERT INTO t VALUES (?, ?)", [(i, "x" * 50) for i in range(40)])
        source = SQLiteSource(conn, table="t")
        pager = Paginator(Limits(1024), store=store)
        page = await pager.apaginate(source, scope=ALICE)
        seen = len(page.items)
        while page.next_cursor is not None:
            page = await pager.apaginate(source, scope=ALICE, cursor=page.next_cursor)
            seen += len(page.items)
        conn.close()
        return seen

    try:
        return int(run(follow))
    finally:
        store.close()


def test_regression_apaginate_reads_a_sync_source_on_the_loops_thread(tmp_path: Path) -> None:
    # Paged whole in a worker thread, a sqlite3 connection made on the loop's thread
    # raised ProgrammingError ("objects created in a thread can only be used in that
    # same thread"): only the store's calls go to a thread.
    assert _pages_of(tmp_path, lambda follow: asyncio.run(follow())) == 40


def test_regression_apaginate_runs_under_trio(tmp_path: Path) -> None:
    # asyncio.to_thread raised "no running event loop" under trio: there, everything
    # runs on the loop, as it did.
    import trio

    assert _pages_of(tmp_path, trio.run) == 40

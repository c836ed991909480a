"""r21-hygiene defects 1-3: what a long-running server drops must be released when it
drops it (stores and hooks given to the one-call verbs, a `ResultReader`'s kept reads),
and the demo's database is built in memory independent of its row count."""

from __future__ import annotations

import gc
import os
import sqlite3
import warnings
import weakref
from collections.abc import Callable
from pathlib import Path
from typing import Any

import pytest

from jsonbudget import (
    CursorState,
    Limits,
    MemoryCursorStore,
    ResultReader,
    Scope,
    SpillStore,
    SQLiteCursorStore,
    bounded_dumps,
    paginate,
)
from jsonbudget._pages import builder
from tests.limited import run_limited

ROWS = list(range(100))
LIMITS = Limits(512, max_items=3)
ALICE = Scope("alice", {"q": 1})


def _open_fds() -> int:
    return len(os.listdir("/proc/self/fd"))


def _point_hook() -> Callable[[Any], Any]:
    """A per-request ``default`` hook: a closure, as a handler would make one."""
    seen: list[object] = []

    def default(obj: object) -> Any:
        seen.append(obj)
        return repr(obj)

    return default


# -- 1: the one-call verbs' cache keeps no caller object alive ---------------------------


def test_regression_one_call_paginate_keeps_no_dropped_store_open(tmp_path: Path) -> None:
    # A server that opens a store per request and drops it: each store closes with its
    # last reference, not with the cache's (121 fds were left after 60 requests).
    path = tmp_path / "c.sqlite3"
    SQLiteCursorStore(path).close()
    gc.collect()  # what an earlier test left for the collector is not counted below
    base = _open_fds()
    for _ in range(20):
        store = SQLiteCursorStore(path)
        page = paginate(ROWS, scope=ALICE, store=store, limits=LIMITS)
        assert page.next_cursor is not None
        del store
    gc.collect()
    assert _open_fds() - base == 0


@pytest.mark.parametrize("option", ["store", "default", "spill_ref", "spill_store"])
def test_regression_one_call_paginate_keeps_no_caller_object_alive(option: str) -> None:
    class Spilled:
        ref = "r"

    class Target:  # a `SpillTarget` of the caller's own
        def put(self, data: bytes, *, label: str) -> Spilled:
            return Spilled()

    objects: dict[str, Any] = {
        "store": MemoryCursorStore(),
        "default": _point_hook(),
        "spill_ref": lambda ref, scope: "ref",
        "spill_store": Target(),
    }
    kwargs = {"store": MemoryCursorStore(), option: objects.pop(option)}
    gone = weakref.ref(kwargs[option])
    rows = [{"big": "x" * 6000}, {"at": object()}]
    page = paginate(
        rows,
        scope=ALICE,
        limits=Limits(2048),
        oversized="spill",
        **{"spill_store": Target(), **kwargs},
    )
    assert page.complete
    assert [o.outcome for o in page.oversized] == ["spilled"]
    del kwargs
    gc.collect()
    assert gone() is None


def test_regression_one_call_paginate_still_configures_once_per_store() -> None:
    # The cache stays: a store that is reused finds its pager, which holds it weakly,
    # and the pager's entry goes with the store.
    store = MemoryCursorStore()
    hook = _point_hook()
    options = (LIMITS, store, "truncate", None, None, "balanced", "text", hook, "marker", None)
    first = builder._pager(*options)  # type: ignore[arg-type]
    assert builder._pager(*options) is first  # type: ignore[arg-type]
    assert first.store is store
    pages = [paginate(ROWS, scope=ALICE, store=store, limits=LIMITS, default=hook)]
    while pages[-1].next_cursor is not None:
        cursor = pages[-1].next_cursor
        pages.append(
            paginate(ROWS, scope=ALICE, store=store, limits=LIMITS, default=hook, cursor=cursor)
        )
    assert [i for p in pages for i in p.items] == ROWS
    key = next(k for k, v in builder._configured.by_options.items() if v is first)
    del store, options, pages
    gc.collect()
    assert key not in builder._configured.by_options


def test_regression_one_call_paginate_takes_a_store_without_weak_references() -> None:
    # A store of the caller's own with __slots__ and no __weakref__: configured per call
    # (never cached, so never kept), and its cursors work.
    class SlotStore:
        __slots__ = ("inner",)

        def __init__(self) -> None:
            self.inner = MemoryCursorStore()

        def start(self, scope: Scope, *, max_pages: int | None) -> CursorState:
            return self.inner.start(scope, max_pages=max_pages)

        def resume(self, token: str, scope: Scope) -> CursorState:
            return self.inner.resume(token, scope)

        def mint(self, state: CursorState, position: Any) -> str:
            return self.inner.mint(state, position)

    store = SlotStore()
    with pytest.raises(TypeError):
        weakref.ref(store)
    held = len(builder._configured.by_options)
    first = paginate(ROWS, scope=ALICE, store=store, limits=LIMITS)
    second = paginate(
        ROWS,
        scope=ALICE,
        store=store,
        limits=LIMITS,
        cursor=first.next_cursor,
    )
    assert [*first.items, *second.items] == ROWS[:6]
    assert all(v.store is not store for v in builder._configured.by_options.values())
    assert len(builder._configured.by_options) <= held


def test_regression_encoder_cache_keeps_no_per_call_default_hook() -> None:
    # `bounded_dumps`' encoders (and `ResultGate`'s previews) were cached holding their
    # ``default``: a per-request hook and what it closes over stayed alive.
    hook = _point_hook()
    gone = weakref.ref(hook)
    out = bounded_dumps({"rows": [object()] * 50, "text": "y" * 500}, max_bytes=200, default=hook)
    assert len(out) <= 200
    del hook
    gc.collect()
    assert gone() is None


# -- 2: a ResultReader dropped unclosed closes its kept reads ----------------------------


def _reads(reader: ResultReader, spill: SpillStore, count: int) -> None:
    for i in range(count):
        data = b'{"rows": [%s]}' % b",".join(
            b'{"id": %d, "k": %d, "body": "%s"}' % (i, j, b"v" * 100) for j in range(300)
        )
        ref = reader.reference(spill.put(data, label="r"), principal="alice")
        page = reader.read(ref, "/rows", principal="alice")
        assert not page.complete  # a first page: its read is kept open for the next


def test_regression_result_reader_dropped_unclosed_closes_its_files(tmp_path: Path) -> None:
    spill = SpillStore(tmp_path / "spill")
    base = _open_fds()
    gc.disable()  # closed with the last reference, not by the cycle collector
    try:
        with warnings.catch_warnings(record=True) as caught:
            warnings.simplefilter("always", ResourceWarning)
            reader = ResultReader(spill=spill, max_bytes=2048)
            _reads(reader, spill, 5)
            assert _open_fds() - base == 5
            del reader
            assert _open_fds() - base == 0
    finally:
        gc.enable()
    assert not [w for w in caught if issubclass(w.category, ResourceWarning)]


def test_regression_result_reader_is_a_context_manager(tmp_path: Path) -> None:
    spill = SpillStore(tmp_path / "spill")
    base = _open_fds()
    with ResultReader(spill=spill, max_bytes=2048) as reader:
        _reads(reader, spill, 3)
        assert _open_fds() - base == 3
    assert _open_fds() - base == 0
    _reads(reader, spill, 1)  # closed, it still reads (a later page parses anew)
    reader.close()


# -- 3: the demo's database is built in memory independent of its rows -------------------


def test_regression_demo_database_memory_is_independent_of_rows(tmp_path: Path) -> None:
    # 20,000 rows held as a list peaked at 237 MB traced (283 MB of address space); built
    # row by row they take a few MB, so the build fits a limit the list cannot.
    path = tmp_path / "demo.sqlite3"
    code = f"""
        from jsonbudget._cli.demo import make_demo_database
        print(make_demo_database({str(path)!r}, rows=20_000))
    """
    done = run_limited(code, memory=160 << 20, timeout=120)
    assert done.returncode == 0, done.stderr[-2000:]
    assert done.stdout.split() == [str(20_000 // 3)]
    conn = sqlite3.connect(path)
    try:
        assert conn.execute("SELECT count(*), max(id) FROM tickets").fetchone() == (20_000, 20_000)
    finally:
        conn.close()


def test_regression_one_call_paginate_cache_clear_raced_other_threads() -> None:
    # The cache cleared its entries and their watches in two steps: an entry another
    # thread added between them lost its watches, outlived its store, and was served to
    # a new store given the dead one's id ("the cursor store of a cached pager is gone").
    # Threads that make a store per call fill and clear the 64 entries over and over.
    code = """
        import collections, sys, threading
        from jsonbudget import Limits, MemoryCursorStore, Scope, paginate
        sys.setswitchinterval(1e-6)
        items = ["%040d" % i for i in range(50)]
        errors = collections.Counter()
        def work(k):
            keep = collections.deque(maxlen=15)
            for _ in range(3000):
                store = MemoryCursorStore()
                keep.append(store)
                try:
                    page = paginate(items, scope=Scope("p", {"q": k}), store=store,
                                    limits=Limits(600))
                    assert page.items[0] == items[0] and not page.complete
                except Exception as exc:
                    errors[type(exc).__name__] += 1
        threads = [threading.Thread(target=work, args=(k,)) for k in range(6)]
        for t in threads:
            t.start()
        for t in threads:
            t.join()
        print(dict(errors))
    """
    done = run_limited(code, timeout=240)
    assert done.returncode == 0, done.stderr[-2000:]
    assert done.stdout.strip() == "{}"

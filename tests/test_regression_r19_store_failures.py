"""r19-failures defects 1-4: the cursor and spill stores under an interrupt at any point,
and a spilled text file cut on disk.

The interrupts are injected deterministically: a trace function raises KeyboardInterrupt
before the n-th bytecode the module under test runs, for every n a call runs, which is
where CPython delivers a signal's exception (a C call returning counts: the next bytecode
is where it lands).
"""

from __future__ import annotations

import dis
import gc
import os
import sqlite3
import sys
import warnings
from collections.abc import Callable, Iterator
from contextlib import contextmanager, suppress
from pathlib import Path
from types import FrameType
from typing import Any

import pytest

from jsonbudget import (
    MemoryCursorStore,
    ResultGate,
    ResultReader,
    Scope,
    SpillError,
    SpillStore,
    SQLiteCursorStore,
    read_result,
)
from jsonbudget._agents.reader import _scope

SCOPE = Scope("p", {"q": 1})


#: Where CPython checks for a pending signal: as a function starts, as a loop goes back,
#: and as a call returns (the bytecode after it).
_CHECKED_AT = frozenset(("RESUME",))
_CHECKED_AFTER = frozenset(("CALL", "CALL_FUNCTION_EX", "JUMP_BACKWARD"))


@contextmanager
def _interrupt_at(n: int, module: str) -> Iterator[list[int]]:
    """Raise KeyboardInterrupt at the *n*-th point in *module*'s functions where CPython
    would deliver a signal's exception (never, for n < 0); yields a one-item list, the
    count of such points passed."""
    seen = [0]

    def tracer(previous: list[str]) -> Callable[[FrameType, str, Any], Any]:
        def local(frame: FrameType, event: str, arg: Any) -> Any:
            if event == "opcode":
                op = dis.opname[frame.f_code.co_code[frame.f_lasti]]
                if op in _CHECKED_AT or previous[0] in _CHECKED_AFTER:
                    seen[0] += 1
                    if seen[0] == n:
                        raise KeyboardInterrupt
                previous[0] = op
            return local

        return local

    def calls(frame: FrameType, event: str, arg: Any) -> Any:
        if event != "call" or not frame.f_code.co_filename.endswith(module):
            return None
        frame.f_trace_opcodes = True
        return tracer([""])

    before = sys.gettrace()
    sys.settrace(calls)
    try:
        yield seen
    finally:
        sys.settrace(before)


def _every_point(module: str, call: Callable[[], object], check: Callable[[], None]) -> int:
    """Run *call* interrupted at each of its bytecodes in *module* in turn, *check* after
    each; how many points there were."""
    with _interrupt_at(-1, module) as seen:
        call()
    total = seen[0]
    assert total > 10  # the trace did see the module's code
    for n in range(1, total + 1):
        with _interrupt_at(n, module), suppress(KeyboardInterrupt):
            call()
        check()
    return total


# -- 1: SQLiteCursorStore ---------------------------------------------------------------


class _Conn:
    """A store's connection that raises KeyboardInterrupt once, right after running *sql*."""

    def __init__(self, conn: sqlite3.Connection, sql: str) -> None:
        self._conn = conn
        self._sql = sql
        self._armed = True

    def execute(self, sql: str, *args: Any) -> sqlite3.Cursor:
        cursor = self._conn.execute(sql, *args)
        if sql == self._sql and self._armed:
            self._armed = False
            raise KeyboardInterrupt
        return cursor

    def __enter__(self) -> sqlite3.Connection:
        return self._conn.__enter__()

    def __exit__(self, *exc: Any) -> bool | None:
        return self._conn.__exit__(*exc)

    def __getattr__(self, name: str) -> Any:
        return getattr(self._conn, name)


def _locked_out(path: Path) -> bool:
    other = sqlite3.connect(path, timeout=0, isolation_level=None)
    try:
        other.execute("BEGIN IMMEDIATE")
    except sqlite3.OperationalError:
        return True
    finally:
        other.close()
    other.close()
    return False


def test_regression_sqlite_interrupt_leaves_transaction_open(tmp_path: Path) -> None:
    # Ctrl-C while BEGIN waits for another process's lock: raised as the call returns
    path = tmp_path / "c.db"
    with SQLiteCursorStore(path) as store:
        token = store.mint(store.start(SCOPE, max_pages=None), 5)
        real = store._conn
        store._conn = _Conn(real, "BEGIN IMMEDIATE")  # type: ignore[assignment]
        try:
            with pytest.raises(KeyboardInterrupt):
                store.resume(token, SCOPE)
        finally:
            store._conn = real
        assert not real.in_transaction
        assert not _locked_out(path)  # other processes get the lock
        assert store.resume(token, SCOPE).position == 5  # and this store works
        again = store.mint(store.start(SCOPE, max_pages=None), 6)
    with SQLiteCursorStore(path) as other:  # the mint was committed
        assert other.resume(again, SCOPE).position == 6


def test_regression_sqlite_interrupt_at_any_point_leaves_no_transaction(tmp_path: Path) -> None:
    path = tmp_path / "c.db"
    with SQLiteCursorStore(path) as store:
        token = store.mint(store.start(SCOPE, max_pages=None), 5)

        def check() -> None:
            assert not store._conn.in_transaction
            assert store.resume(token, SCOPE).position == 5

        _every_point("sqlite_store.py", lambda: store.resume(token, SCOPE), check)
        assert not _locked_out(path)


# -- 2: MemoryCursorStore ---------------------------------------------------------------


def test_regression_memory_store_interrupt_loses_position() -> None:
    store = MemoryCursorStore()
    state = store.start(SCOPE, max_pages=None)
    token = store.mint(state, 5)

    def check() -> None:
        # still live, the same token for the same position, and no bare KeyError
        assert store.resume(token, SCOPE).position == 5
        assert store.mint(state, 5) == token

    _every_point("_cursors/store.py", lambda: store.resume(token, SCOPE), check)
    _every_point("_cursors/store.py", lambda: store.mint(state, 5), check)


def test_regression_memory_store_interrupted_eviction_no_key_error() -> None:
    # An interrupted mint that pushes the oldest position out leaves the store consistent.
    store = MemoryCursorStore()
    state = store.start(SCOPE, max_pages=None)
    counter = iter(range(10**6))
    for p in range(256):
        store.mint(state, p)

    made: list[int] = []

    def mint_new() -> None:
        made.append(1000 + next(counter))
        store.mint(state, made[-1])

    def check() -> None:
        # the one an interrupted mint pushes out included: the oldest, one of these
        for p in [*made, *range(256)]:
            try:
                token = store.mint(state, p)
            except KeyError:  # pragma: no cover - the failure this test is for
                pytest.fail("mint raised a bare KeyError")
            assert store.resume(token, SCOPE).position == p

    _every_point("_cursors/store.py", mint_new, check)


# -- 3: SpillStore.put ------------------------------------------------------------------


def _fds() -> set[str]:
    gc.collect()
    return set(os.listdir("/proc/self/fd"))


@pytest.mark.skipif(not os.path.isdir("/proc/self/fd"), reason="needs /proc/self/fd")
def test_regression_spill_put_interrupt_leaks_fds_and_temp_files(tmp_path: Path) -> None:
    store = SpillStore(tmp_path, max_age=3600)
    counter = iter(range(10**6))
    store.put(b'{"a": "x"}', label="same")  # a second put of the same bytes replaces it
    before = _fds()

    def put() -> None:
        store.put(b'{"a": "x"}', label="same")
        store.put(b"y" * 1000 + str(next(counter)).encode(), label="r", media_type="text/plain")

    def check() -> None:
        assert _fds() == before
        assert not [p for p in os.listdir(tmp_path) if p.startswith(".tmp-")]
        assert not store._writing  # nothing held from cleanup for good

    with warnings.catch_warnings():
        # a file object dropped by the interrupt closes itself, warning it was left open
        warnings.simplefilter("ignore", ResourceWarning)
        _every_point("_agents/spill.py", put, check)
    assert store.read(store.put(b'{"a": "x"}', label="same").ref) == b'{"a": "x"}'


# -- 4: a spilled text file cut on disk ---------------------------------------------------


def _gated_text(tmp_path: Path) -> tuple[ResultReader, Any]:
    spill = SpillStore(tmp_path)
    reader = ResultReader(spill=spill, max_bytes=2000)
    gate = ResultGate(max_bytes=1000, store=spill, reader=reader, principal="p", kind="text")
    gated = gate.gate(("line\n" * 3000).encode(), label="text")
    assert gated.spill is not None
    return reader, gated


def _read_all(reader: ResultReader, ref: str) -> None:
    cursor = None
    while True:
        page = read_result(ref, "", cursor, reader=reader, principal="p")
        if page.complete:
            return
        cursor = page.next_cursor


@pytest.mark.parametrize("change", ["cut", "grown"])
def test_regression_truncated_text_spill_reads_complete(tmp_path: Path, change: str) -> None:
    reader, gated = _gated_text(tmp_path)
    _read_all(reader, gated.shown_ref)  # whole, it reads to its end
    size = gated.spill.size
    if change == "cut":
        os.truncate(gated.spill.path, size // 2)
    else:
        with open(gated.spill.path, "ab") as file:
            file.write(b"more\n")
    with pytest.raises(SpillError, match=r"reference '[^']+' is \d+ bytes, not the 15000"):
        _read_all(reader, gated.shown_ref)


def test_regression_reference_without_size_still_reads(tmp_path: Path) -> None:
    # A reference minted by an older version (a durable cursor store's) names no size.
    reader, gated = _gated_text(tmp_path)
    state = reader.cursors.start(_scope("p"), max_pages=None)
    _read_all(reader, reader.cursors.mint(state, {"ref": gated.spill.ref}))

"""r23 stores shared by separately started processes, and cursor lifetimes and the clock.

1. A spill store's cleanup (or a put's trim) removed by name a result another process
   had just stored again under that name, judged on the status of the file it replaced.
2. `RedisCursorStore(keys=None)`: after Redis lost its data, a worker whose shared key
   had the same one-byte key id as the new one refused the new key's cursors.
3. Memory cursors expired by the wall clock; the SQLite store's sweep stopped while the
   clock was behind.

The competing put of test 1 is a real put by another process, started at the moment the
race needs it (right after the store's listing, or its last look at the file).
"""

from __future__ import annotations

import hashlib
import os
import secrets
import sqlite3
import subprocess
import sys
import time
import uuid
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

import pytest
import redis

from jsonbudget import (
    ExpiredCursor,
    InvalidCursor,
    MemoryCursorStore,
    RedisCursorStore,
    Scope,
    SpillStore,
    SQLiteCursorStore,
)
from tests.fixtures_redis import RedisServer

CONTENT = b'{"result": "same every time"}'
HOUR_AGO = time.time() - 3600


# -- 1: a result stored again by another process is never removed on the old one's age --


def _put_in_child(directory: Path) -> None:
    """What another process does: store CONTENT again (a store with a long max_age, so
    that its own first scan removes nothing)."""
    code = (
        "import sys\n"
        "from jsonbudget import SpillStore\n"
        "SpillStore(sys.argv[1], max_age=10**6).put(sys.argv[2].encode(), label='x')\n"
    )
    subprocess.run(
        [sys.executable, "-c", code, str(directory), CONTENT.decode()],
        check=True,
        cwd=directory.parent,
        timeout=60,
    )


class _ThenPut:
    """A directory listing that, once listed to its end, lets another process put."""

    def __init__(self, entries: Any, directory: Path) -> None:
        self._entries = entries
        self._directory = directory

    def __enter__(self) -> _ThenPut:
        return self

    def __exit__(self, *exc: object) -> None:
        self._entries.close()

    def __iter__(self) -> Iterator[os.DirEntry[str]]:
        yield from self._entries
        _put_in_child(self._directory)


def _put_after_listing(monkeypatch: pytest.MonkeyPatch, directory: Path) -> list[int]:
    real = os.scandir
    listings: list[int] = []

    def scandir(path: Any = ".") -> Any:
        if os.fspath(path) == os.fspath(directory) and not listings:
            listings.append(1)
            return _ThenPut(real(path), directory)
        return real(path)

    monkeypatch.setattr(os, "scandir", scandir)
    return listings


def _put_after_last_stat(
    monkeypatch: pytest.MonkeyPatch, path: Path, then: Callable[[], None]
) -> list[int]:
    """Run *then* right after the first `os.stat` of *path*: the status the caller gets
    is that of the file it replaced."""
    real = os.stat
    fired: list[int] = []

    def stat(target: Any, *args: Any, **kwargs: Any) -> os.stat_result:
        st = real(target, *args, **kwargs)
        if not fired and os.fspath(target) == os.fspath(path):
            fired.append(1)
            then()
        return st

    monkeypatch.setattr(os, "stat", stat)
    return fired


def _no_temporary_files(directory: Path) -> list[str]:
    return [name for name in os.listdir(directory) if name.startswith(".tmp-")]


def _stored_then_aged(directory: Path, **kwargs: Any) -> tuple[SpillStore, str]:
    store = SpillStore(directory, **kwargs)
    ref = store.put(CONTENT, label="x").ref
    os.utime(directory / ref, (HOUR_AGO, HOUR_AGO))
    return store, ref


def test_regression_cleanup_removed_a_result_stored_again_after_its_listing(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    # The scan judged the file by the status it listed, an hour old, and removed by name
    # the fresh copy another process had renamed into place since.
    directory = tmp_path / "spill"
    store, ref = _stored_then_aged(directory)
    listings = _put_after_listing(monkeypatch, directory)
    report = SpillStore(directory, max_age=60).cleanup()  # holds nothing of this thread
    assert listings == [1]
    assert (report.removed_files, report.kept_files) == (0, 1)
    assert store.read(ref) == CONTENT
    assert time.time() - os.stat(directory / ref).st_mtime < 60


def test_regression_cleanup_evicted_for_size_a_result_stored_again_after_its_listing(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    # The size pass sorted by the listed times and removed by name the oldest listed,
    # which another process had meanwhile stored again: the newest result there.
    directory = tmp_path / "spill"
    store = SpillStore(directory)
    ref = store.put(CONTENT, label="x").ref
    newer = store.put(b"n" * len(CONTENT), label="newer").ref
    os.utime(directory / ref, (time.time() - 20, time.time() - 20))
    os.utime(directory / newer, (time.time() - 10, time.time() - 10))
    listings = _put_after_listing(monkeypatch, directory)
    limit = len(CONTENT) + len(CONTENT) // 2  # room for one of the two
    report = SpillStore(directory, max_total_bytes=limit).cleanup()
    assert listings == [1]
    assert SpillStore(directory).read(ref) == CONTENT
    # The oldest result then is the other one, which goes instead.
    assert not (directory / newer).exists()
    assert (report.removed_files, report.kept_files) == (1, 1)


@pytest.mark.parametrize("by", ["cleanup", "put"])
def test_regression_removal_took_a_result_stored_again_after_its_last_stat(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, by: str
) -> None:
    # However late the status is read, a put can land between it and an unlink by
    # name: the trim checked the status and then unlinked the fresh copy.
    directory = tmp_path / "spill"
    store, ref = _stored_then_aged(directory, max_age=60)
    store.cleanup()  # this process now knows the result as an hour old
    fired = _put_after_last_stat(monkeypatch, directory / ref, lambda: _put_in_child(directory))
    if by == "cleanup":
        SpillStore(directory, max_age=60).cleanup()  # holds nothing of this thread
    else:
        store.put(b"other", label="y")  # lets go of x, and trims it as an hour old
    monkeypatch.undo()
    assert fired == [1]
    assert store.read(ref) == CONTENT
    assert time.time() - os.stat(directory / ref).st_mtime < 60
    assert _no_temporary_files(directory) == []


def test_regression_putting_back_a_fresh_copy_never_replaced_a_newer_one(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    # A fresh copy taken aside by mistake goes back; if yet another put stored the result
    # meanwhile, that newer copy is the one kept, and the one taken aside goes.
    directory = tmp_path / "spill"
    store, ref = _stored_then_aged(directory, max_age=60)
    store.cleanup()
    path = directory / ref
    real_rename = os.rename
    newest: list[os.stat_result] = []

    def rename(src: Any, dst: Any, *args: Any, **kwargs: Any) -> None:
        real_rename(src, dst, *args, **kwargs)
        if os.fspath(src) == os.fspath(path) and not newest:
            _put_in_child(directory)
            newest.append(os.lstat(path))

    fired = _put_after_last_stat(monkeypatch, path, lambda: _put_in_child(directory))
    monkeypatch.setattr(os, "rename", rename)
    store.put(b"other", label="y")
    monkeypatch.undo()
    assert fired == [1]
    assert len(newest) == 1
    now_there = os.lstat(path)
    assert (now_there.st_ino, now_there.st_mtime_ns) == (newest[0].st_ino, newest[0].st_mtime_ns)
    assert store.read(ref) == CONTENT
    assert _no_temporary_files(directory) == []


# -- 2: after Redis lost its data, a bad signature re-reads the shared key ---------------

SCOPE = Scope("alice", {"q": 1})


def _kid(secret: bytes) -> int:
    # the key id a store derives from a shared secret (store.derived_key)
    return hashlib.sha256(b"jsonbudget/kid\x00" + secret).digest()[0]


@pytest.mark.redis
def test_regression_worker_refused_a_new_shared_key_with_its_old_key_id(
    redis_server: RedisServer,
) -> None:
    # A worker re-read the key only for an unknown key id: a new key with the id of the
    # one it held (1 time in 256) failed the MAC check, for good, until its own start.
    client = redis.Redis.from_url(redis_server.url, decode_responses=True)
    prefix = f"r23{uuid.uuid4().hex[:12]}:"
    older = RedisCursorStore(redis_server.url, prefix=prefix)
    stored = client.get(prefix + "mac-key")
    assert isinstance(stored, str)
    held = bytes.fromhex(stored)
    client.delete(*client.scan_iter(prefix + "*"))  # Redis lost its data
    # What a worker started now writes, with the chance of one in 256 taken.
    new = next(k for k in iter(lambda: secrets.token_bytes(32), None) if _kid(k) == _kid(held))
    assert client.set(prefix + "mac-key", new.hex(), nx=True)
    newer = RedisCursorStore(redis_server.url, prefix=prefix)
    token = newer.mint(newer.start(SCOPE, max_pages=None), 42)
    assert older.resume(token, SCOPE).position == 42
    assert older.mint(older.resume(token, SCOPE), 43) == newer.mint(newer.resume(token, SCOPE), 43)


@pytest.mark.redis
def test_bad_signatures_re_read_the_shared_key_at_most_once_a_second(
    redis_server: RedisServer,
) -> None:
    client = redis.Redis.from_url(redis_server.url)
    prefix = f"r23{uuid.uuid4().hex[:12]}:"
    store = RedisCursorStore(redis_server.url, prefix=prefix)
    token = store.mint(store.start(SCOPE, max_pages=None), 1)
    forged = token[:-2] + ("AA" if token[-2:] != "AA" else "BB")

    def reads() -> int:
        stats = client.info("commandstats").get("cmdstat_get", {})
        return int(stats.get("calls", 0))

    before = reads()
    for _ in range(50):
        with pytest.raises(InvalidCursor, match="bad signature"):
            store.resume(forged, SCOPE)
    assert reads() - before <= 1
    assert store.resume(token, SCOPE).position == 1


# -- 3: cursor lifetimes and the clock ----------------------------------------------------


class _Clock:
    """The wall clock and the monotonic clocks as the test moves them."""

    def __init__(self, monkeypatch: pytest.MonkeyPatch) -> None:
        self.wall = time.time()
        self.tick = time.monotonic()
        monkeypatch.setattr(time, "time", lambda: self.wall)
        monkeypatch.setattr(time, "monotonic", lambda: self.tick)
        # the memory store's deadlines are on CLOCK_BOOTTIME where there is one
        monkeypatch.setattr(time, "clock_gettime", lambda clock: self.tick)

    def elapse(self, seconds: float) -> None:
        self.wall += seconds
        self.tick += seconds


YEAR = 365 * 86400


def test_regression_memory_cursor_died_when_the_wall_clock_was_set_forward(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    clock = _Clock(monkeypatch)
    store = MemoryCursorStore(ttl=10)
    state = store.start(SCOPE, max_pages=None)
    assert state.expires_at == state.started_at + 10
    token = store.mint(state, 2)
    clock.wall += YEAR
    clock.elapse(9.999)
    resumed = store.resume(token, SCOPE)
    assert resumed.position == 2
    assert resumed.expires_at == state.expires_at  # what it reports stays the start's
    clock.elapse(0.001)  # at expires_at: expired
    with pytest.raises(ExpiredCursor):
        store.resume(token, SCOPE)


def test_regression_memory_cursor_outlived_its_ttl_when_the_wall_clock_was_set_back(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    clock = _Clock(monkeypatch)
    store = MemoryCursorStore(ttl=10)
    token = store.mint(store.start(SCOPE, max_pages=None), 2)
    clock.wall -= YEAR
    clock.elapse(11)
    with pytest.raises(ExpiredCursor):
        store.resume(token, SCOPE)
    # and the sweep at a start, in start order, takes it
    store.start(Scope("bob"), max_pages=None)
    assert len(store) == 1


def test_regression_sqlite_sweep_stopped_while_the_wall_clock_was_behind(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    clock = _Clock(monkeypatch)
    path = tmp_path / "cursors.db"
    with SQLiteCursorStore(path, ttl=1) as store:
        first = store.start(SCOPE, max_pages=None)  # sweeps: the first start does
        clock.wall -= YEAR
        clock.elapse(11)
        gone = store.start(SCOPE, max_pages=None)
        clock.elapse(11)
        store.start(Scope("bob"), max_pages=None)  # sweeps `gone`, expired 10 s ago
    with sqlite3.connect(path) as conn:
        left = {row[0].hex() for row in conn.execute("SELECT op_id FROM jsonbudget_ops")}
    conn.close()
    # The first expires a year from now by the wall clock, as documented; `gone` went.
    assert first.operation_id in left
    assert gone.operation_id not in left
    assert len(left) == 2

"""Cursor stores made before ``fork()`` and used by the forked workers (r22-fork).

Each case forks in a child interpreter (`bounded_run`), never in the test process: a
worker that hangs is killed there after a deadline and reported, so a hang fails the test.
"""

from __future__ import annotations

from pathlib import Path

from tests.fixtures_redis import RedisServer
from tests.limited import bounded_run

# Run in the child interpreter: fork, run *work* in the worker with a deadline, and
# answer the repr of what it returned or raised, or "hung".
_FORKED = """
import os, select, sys, threading
from jsonbudget import MemoryCursorStore, Scope, SQLiteCursorStore

SCOPE = Scope("alice", {"q": 1})


def in_worker(work, *, then=None, deadline=20.0):
    out_r, out_w = os.pipe()
    go_r, go_w = os.pipe()
    pid = os.fork()
    if pid == 0:
        os.close(out_r)
        os.read(go_r, 1)  # until the parent has done `then`
        try:
            got = repr(work())
        except Exception as exc:  # reported to the parent, whose test then fails
            got = repr(exc)
        os.write(out_w, got.encode())
        os._exit(0)
    os.close(out_w)
    if then is not None:
        then()
    os.write(go_w, b"x")
    ready, _, _ = select.select([out_r], [], [], deadline)
    if not ready:
        os.kill(pid, 9)
        os.waitpid(pid, 0)
        return "hung"
    got = b""
    while chunk := os.read(out_r, 65536):
        got += chunk
    os.waitpid(pid, 0)
    return got.decode()


def with_lock_held_at_fork(lock, work):
    # Held by another thread at the fork, released in the parent just after it.
    held, release = threading.Event(), threading.Event()

    def hold():
        with lock:
            held.set()
            release.wait()

    t = threading.Thread(target=hold)
    t.start()
    held.wait()
    try:
        return in_worker(work, then=release.set)
    finally:
        t.join()
"""


def test_regression_sqlite_store_made_before_fork_loses_child_cursors(tmp_path: Path) -> None:
    # The parent closes its store (or exits) while a forked worker still serves: with the
    # parent's connection used (or merely kept open) in the worker, the worker held no
    # lock of its own, the parent's close deleted the -wal and -shm files, and what the
    # worker wrote went to deleted files: ExpiredCursor everywhere else.
    path = tmp_path / "c.db"
    out = bounded_run(
        _FORKED
        + f"""
path = {str(path)!r}
store = SQLiteCursorStore(path)
store.mint(store.start(SCOPE, max_pages=None), 1)

def work():
    inherited = store.mint(store.start(SCOPE, max_pages=None), 5)
    own = SQLiteCursorStore(path)  # the worker's own store on the same file
    mine = own.mint(own.start(SCOPE, max_pages=None), 6)
    return inherited, mine, sorted(os.listdir(os.path.dirname(path)))

got = in_worker(work, then=store.close)
print(got)
if got.startswith("("):
    inherited, mine, files = eval(got)
    print(files)
    fresh = SQLiteCursorStore(path)
    print(fresh.resume(inherited, SCOPE).position, fresh.resume(mine, SCOPE).position)
"""
    )
    worker, *rest = out.splitlines()
    assert worker.startswith("("), worker  # the worker's store failed
    assert rest == ["['c.db', 'c.db-shm', 'c.db-wal']", "5 6"]


def test_sqlite_store_close_in_child_keeps_parent_working(tmp_path: Path) -> None:
    # close() in a worker closes the worker's own connection, never the parent's.
    path = tmp_path / "c.db"
    out = bounded_run(
        _FORKED
        + f"""
store = SQLiteCursorStore({str(path)!r})
token = store.mint(store.start(SCOPE, max_pages=None), 5)

def work():
    position = store.resume(token, SCOPE).position
    store.close()
    return position

print(in_worker(work), store.resume(token, SCOPE).position)
"""
    )
    assert out.split() == ["5", "5"]


def test_regression_sqlite_store_lock_held_at_fork_hangs_worker(tmp_path: Path) -> None:
    out = bounded_run(
        _FORKED
        + f"""
store = SQLiteCursorStore({str(tmp_path / "c.db")!r})
token = store.mint(store.start(SCOPE, max_pages=None), 5)

def work():
    again = store.mint(store.start(SCOPE, max_pages=None), 7)
    return store.resume(token, SCOPE).position, store.resume(again, SCOPE).position

print(with_lock_held_at_fork(store._lock, work))
print(store.resume(token, SCOPE).position)
"""
    )
    assert out.split() == ["(5,", "7)", "5"]


def test_regression_memory_store_lock_held_at_fork_hangs_worker() -> None:
    out = bounded_run(
        _FORKED
        + """
store = MemoryCursorStore()
token = store.mint(store.start(SCOPE, max_pages=None), 5)
print(with_lock_held_at_fork(store._lock, lambda: store.resume(token, SCOPE).position))
"""
    )
    assert out.split() == ["5"]


def test_regression_redis_store_lock_held_at_fork_hangs_worker(redis_server: RedisServer) -> None:
    out = bounded_run(
        _FORKED
        + f"""
import uuid
from jsonbudget import RedisCursorStore
store = RedisCursorStore({redis_server.url!r}, prefix=f"t{{uuid.uuid4().hex[:12]}}:")
token = store.mint(store.start(SCOPE, max_pages=None), 5)

def work():
    # keys=None: start adopts the key Redis holds, under the lock
    again = store.mint(store.start(SCOPE, max_pages=None), 7)
    return store.resume(token, SCOPE).position, store.resume(again, SCOPE).position

print(with_lock_held_at_fork(store._lock, work))
"""
    )
    assert out.split() == ["(5,", "7)"]


def test_regression_memory_store_forked_workers_mint_same_token() -> None:
    # Two workers forked from one state mint for an operation started before the fork:
    # the same token for different positions would resume, in either, at its own one.
    out = bounded_run(
        _FORKED
        + """
from jsonbudget import CursorError
store = MemoryCursorStore()
state = store.start(SCOPE, max_pages=None)
before = store.mint(state, 1)

def work(position):
    def mint():
        return store.mint(state, position), store.resume(before, SCOPE).position
    return mint

a, from_a = eval(in_worker(work(2)))
b, from_b = eval(in_worker(work(3)))
print(a != b, from_a, from_b)
for token in (a, b):  # minted by another process: not held here
    try:
        store.resume(token, SCOPE)
    except CursorError as exc:
        print(type(exc).__name__)
"""
    )
    assert out.split() == ["True", "1", "1", "ExpiredCursor", "ExpiredCursor"]

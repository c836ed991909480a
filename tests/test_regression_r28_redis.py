"""Regressions found by a tester interrupting calls to Redis (round 28).

redis-py puts a connection back in its pool when an exception arrives after a command was
sent and before its reply was read; the next command on it read that reply as its own.
`RedisCursorStore.resume` then served another operation's position (another principal's),
a resume after an interrupted mint raised `BudgetExhausted` with a token id's bytes as
its numbers, and `RedisSpillStore` returned another result's bytes for a reference.

Each test interrupts a store's call right after its request was sent (as a signal or a
gevent/asyncio timeout landing before redis-py reads the reply does) while ``CLIENT
PAUSE`` holds every reply back, so the reply is still on its way when the next call takes
the connection: the race the tester won with a busy server, made certain. The
``*_reply_out_of_step`` tests also stop the store's hygiene from closing that
connection (as when the interrupted call was other code's, on a shared client): what is
left is the check that every reply answers its own request. Every test runs on the real
redis-server the suite starts.
"""

from __future__ import annotations

import uuid
from collections.abc import Callable, Iterator
from typing import Any

import pytest
import redis

from jsonbudget import RedisCursorStore, RedisSpillStore, Scope
from jsonbudget.errors import SpillError
from tests.fixtures_redis import RedisServer

pytestmark = pytest.mark.redis

ALICE = Scope("alice", {"q": 1})
BOB = Scope("bob", {"q": 1})
#: How long ``CLIENT PAUSE`` holds replies back: far longer than the few calls of a test
#: take to reach the connection, short enough to wait out.
PAUSE_MS = 400


class Cancelled(BaseException):
    """What lands in the middle of a call: a BaseException, as gevent's Timeout is."""


def _client(server: RedisServer) -> Any:
    # a timeout, so a reply that never comes fails the test instead of hanging it
    return redis.Redis.from_url(server.url, socket_timeout=10)


@pytest.fixture
def paused(redis_server: RedisServer) -> Iterator[Callable[[], None]]:
    """Hold every client's replies back for `PAUSE_MS` when called."""
    admin = _client(redis_server)
    yield lambda: admin.execute_command("CLIENT", "PAUSE", PAUSE_MS, "ALL")
    admin.execute_command("CLIENT", "UNPAUSE")
    admin.close()


def _interrupted(monkeypatch: pytest.MonkeyPatch, call: Callable[[], object]) -> None:
    """Run *call*, interrupted once its first request is sent, before a reply is read."""
    original = redis.Connection.send_packed_command

    def interrupt(self: Any, command: Any, check_health: bool = True) -> None:
        monkeypatch.setattr(redis.Connection, "send_packed_command", original)
        # redis-py leaves this method unannotated.
        original(self, command, check_health)  # type: ignore[no-untyped-call]
        raise Cancelled

    monkeypatch.setattr(redis.Connection, "send_packed_command", interrupt)
    with pytest.raises(Cancelled):
        call()
    monkeypatch.setattr(redis.Connection, "send_packed_command", original)


def _no_hygiene(monkeypatch: pytest.MonkeyPatch) -> None:
    """Leave connections open whatever passes: only the replies' checks remain."""
    monkeypatch.setattr(redis.ConnectionPool, "disconnect", lambda self, *a, **k: None)


def _cursors(server: RedisServer) -> tuple[RedisCursorStore, str, str]:
    """A store with Alice's cursor at 10 and Bob's at 30, both on one pooled client."""
    store = RedisCursorStore(_client(server), prefix=f"r28{uuid.uuid4().hex[:12]}:", keys=b"k" * 32)
    alice = store.mint(store.start(ALICE, max_pages=None), 10)
    bob = store.mint(store.start(BOB, max_pages=None), 30)
    # every script loaded: an interrupted first call would leave a NOSCRIPT error behind
    store.resume(store.mint(store.start(ALICE, max_pages=None), 0), ALICE)
    return store, alice, bob


# -- 1. RedisCursorStore -----------------------------------------------------------------------


def test_regression_interrupted_resume_leaves_no_reply_for_the_next(
    redis_server: RedisServer, paused: Callable[[], None], monkeypatch: pytest.MonkeyPatch
) -> None:
    store, alice, bob = _cursors(redis_server)
    paused()
    _interrupted(monkeypatch, lambda: store.resume(alice, ALICE))
    # was Alice's position 10 and her page count, served for Bob's cursor
    state = store.resume(bob, BOB)
    assert (state.position, state.pages_served) == (30, 2)


def test_regression_interrupted_mint_leaves_no_reply_for_the_next(
    redis_server: RedisServer, paused: Callable[[], None], monkeypatch: pytest.MonkeyPatch
) -> None:
    store, alice, bob = _cursors(redis_server)
    state = store.resume(alice, ALICE)
    paused()
    _interrupted(monkeypatch, lambda: store.mint(state, 20))
    # was BudgetExhausted "(56 of 101 pages)", the mint's token id read as page counts
    assert store.resume(bob, BOB).position == 30


def test_regression_resume_refuses_a_reply_out_of_step(
    redis_server: RedisServer, paused: Callable[[], None], monkeypatch: pytest.MonkeyPatch
) -> None:
    store, alice, bob = _cursors(redis_server)
    _no_hygiene(monkeypatch)
    paused()
    _interrupted(monkeypatch, lambda: store.resume(alice, ALICE))
    with pytest.raises(redis.ConnectionError, match="another request"):
        store.resume(bob, BOB)  # was Alice's position 10, no error
    monkeypatch.undo()
    # Bob's resume ran in Redis (its page counts, as a cancelled page does); then in step
    assert store.resume(bob, BOB).position == 30
    assert store.resume(alice, ALICE).position == 10


def test_regression_resume_after_a_mint_out_of_step_is_no_budget_error(
    redis_server: RedisServer, paused: Callable[[], None], monkeypatch: pytest.MonkeyPatch
) -> None:
    store, alice, bob = _cursors(redis_server)
    state = store.resume(alice, ALICE)
    _no_hygiene(monkeypatch)
    paused()
    _interrupted(monkeypatch, lambda: store.mint(state, 20))
    # was BudgetExhausted for an operation that has no max_pages
    with pytest.raises(redis.ConnectionError, match="another request"):
        store.resume(bob, BOB)
    monkeypatch.undo()
    assert store.resume(bob, BOB).position == 30


def test_regression_start_and_mint_refuse_a_reply_out_of_step(
    redis_server: RedisServer, paused: Callable[[], None], monkeypatch: pytest.MonkeyPatch
) -> None:
    store, alice, _ = _cursors(redis_server)
    _no_hygiene(monkeypatch)
    paused()
    _interrupted(monkeypatch, lambda: store.resume(alice, ALICE))
    # a resume's reply is no start's: it was unpacked as one and raised a ValueError
    with pytest.raises(redis.ConnectionError, match="another request"):
        store.start(BOB, max_pages=None)
    state = store.resume(alice, ALICE)
    paused()
    _interrupted(monkeypatch, lambda: store.resume(alice, ALICE))
    # a resume's reply for a mint: InvalidCursor, "a key the store could not have written"
    with pytest.raises(redis.ConnectionError, match="another request"):
        store.mint(state, 20)


# -- 2. RedisSpillStore ------------------------------------------------------------------------


def _spills(server: RedisServer) -> tuple[RedisSpillStore, str, str]:
    store = RedisSpillStore(_client(server), prefix=f"r28{uuid.uuid4().hex[:12]}:")
    a = store.put(b'{"owner":"alice","secret":"A-SECRET"}', label="a").ref
    b = store.put(b'{"owner":"bob","data":"bob data, longer"}', label="b").ref
    return store, a, b


def _stream(store: RedisSpillStore, ref: str) -> Callable[[], object]:
    # opened beforehand, so what is interrupted and checked is a block's read
    stream = store.open(ref)
    return lambda: (stream.seek(0), stream.read())[1]


#: Each way to read a result: given a store and a reference, a call that reads it.
READS: dict[str, Callable[[RedisSpillStore, str], Callable[[], object]]] = {
    "read": lambda store, ref: lambda: store.read(ref),
    "get": lambda store, ref: lambda: store.get(ref).size,
    "open": lambda store, ref: lambda: store.open(ref).read(),
    "stream": _stream,
}


@pytest.mark.parametrize("how", READS)
def test_regression_interrupted_spill_read_leaves_no_reply_for_the_next(
    redis_server: RedisServer,
    paused: Callable[[], None],
    monkeypatch: pytest.MonkeyPatch,
    how: str,
) -> None:
    store, a, b = _spills(redis_server)
    read_a, read_b = READS[how](store, a), READS[how](store, b)
    expected = read_b()
    paused()
    _interrupted(monkeypatch, read_a)
    assert read_b() == expected  # was Alice's bytes (or size) for Bob's ref


@pytest.mark.parametrize("how", READS)
def test_regression_spill_read_refuses_a_reply_out_of_step(
    redis_server: RedisServer,
    paused: Callable[[], None],
    monkeypatch: pytest.MonkeyPatch,
    how: str,
) -> None:
    store, a, b = _spills(redis_server)
    read_a, read_b = READS[how](store, a), READS[how](store, b)
    expected = read_b()
    _no_hygiene(monkeypatch)
    paused()
    _interrupted(monkeypatch, read_a)
    with pytest.raises(SpillError, match="another request") as caught:
        read_b()
    assert isinstance(caught.value.__cause__, redis.ConnectionError)
    monkeypatch.undo()
    assert read_b() == expected


# -- 3. the hygiene on a BlockingConnectionPool --------------------------------------------


def test_regression_blocking_pool_connections_in_use_are_not_closed(
    redis_server: RedisServer, monkeypatch: pytest.MonkeyPatch
) -> None:
    """Found by a sweep of the fix: on a BlockingConnectionPool, closing the idle
    connections closed ones other threads had just taken (redis-py 8 lists them without
    its lock), and redis-py 5's takes no ``inuse_connections`` (a TypeError, as a note)."""
    pool = redis.BlockingConnectionPool.from_url(redis_server.url, socket_timeout=10)
    client = redis.Redis(connection_pool=pool)
    store = RedisCursorStore(client, prefix=f"r28{uuid.uuid4().hex[:12]}:", keys=b"k" * 32)
    state = store.start(ALICE, max_pages=None)
    disconnects: list[object] = []
    real = pool.disconnect

    def disconnect(*args: Any, **kwargs: Any) -> None:
        disconnects.append(kwargs)
        real(*args, **kwargs)

    monkeypatch.setattr(pool, "disconnect", disconnect)
    # another thread's, mid-command (redis-py leaves these two unannotated)
    try:
        taken = pool.get_connection()  # type: ignore[no-untyped-call]
    except TypeError:  # redis-py before 5.3 requires a command's name (deprecated since)
        taken = pool.get_connection("PING")  # type: ignore[no-untyped-call]
    taken.connect()
    try:
        _interrupted(monkeypatch, lambda: store.mint(state, 1))
        assert disconnects == []
        assert taken._sock is not None  # still connected, as its thread left it
    finally:
        pool.release(taken)  # type: ignore[no-untyped-call]
    # the interrupted call's reply, arrived by now, is no answer to the next one
    assert store.resume(store.mint(state, 2), ALICE).position == 2
    client.close()

"""One conformance suite for every cursor store: memory, SQLite and a real Redis.

Every test in the first part runs against all three backends. Tests that need a backend
shared by processes run against SQLite and Redis. Redis is a real redis-server started by
the `redis_server` fixture; nothing is faked.
"""

from __future__ import annotations

import base64
import copy
import dataclasses
import functools
import multiprocessing
import os
import pickle
import re
import sqlite3
import subprocess
import sys
import threading
import time
import uuid
from collections.abc import Callable, Iterator
from contextlib import closing
from pathlib import Path
from typing import Any

import orjson
import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from jsonbudget import (
    CursorKey,
    CursorState,
    CursorStore,
    IterableSource,
    Keyring,
    Limits,
    MemoryCursorStore,
    Paginator,
    RedisCursorStore,
    Scope,
    SQLiteCursorStore,
)
from jsonbudget._cursors.store import (
    TOKEN_CHARS,
    encode_token,
    new_operation_id,
    new_state,
    new_token_id,
)
from jsonbudget.errors import (
    BudgetExhausted,
    CursorError,
    CursorScopeError,
    EncodeError,
    ExpiredCursor,
    InvalidCursor,
    LimitError,
)
from tests import cursor_workers
from tests.fixtures_redis import RedisServer, counting_client

ALICE = "alice.liddell@example.com"
BOB = "bob.builder@example.org"
QUERY = {"table": "orders", "status": "open", "limit": 50}
URLSAFE = re.compile(r"[A-Za-z0-9_-]+")
SECRET = b"s" * 32


class Backend:
    """One store backend; `make` opens another store on the same data."""

    def __init__(self, kind: str, tmp: Path, redis: RedisServer | None) -> None:
        self.kind = kind
        self.tmp = tmp
        self.redis = redis
        self.prefix = f"t{uuid.uuid4().hex[:12]}:"
        self.path = tmp / "cursors.db"
        self.opened: list[Any] = []

    @property
    def target(self) -> str:
        return str(self.path) if self.kind == "sqlite" else self.redis.url  # type: ignore[union-attr]

    @property
    def where(self) -> tuple[str, str, str]:
        return (self.kind, self.target, self.prefix)

    def make(self, **options: Any) -> Any:
        if self.kind == "memory":
            return MemoryCursorStore(**options)
        if self.kind == "sqlite":
            store = SQLiteCursorStore(self.path, **options)
            self.opened.append(store)
            return store
        return RedisCursorStore(self.target, prefix=self.prefix, **options)

    def backend_calls(self, store: Any) -> Callable[[], int] | None:
        """A counter of backend operations, to prove a token was refused before any lookup."""
        if self.kind == "sqlite":
            calls = [0]
            store._conn.set_trace_callback(lambda _sql: calls.__setitem__(0, calls[0] + 1))
            return lambda: calls[0]
        if self.kind == "redis":
            client = store._client

            # An unknown key id may re-read the shared MAC key (GET/SET, at most once a
            # second); what must not happen is an operation lookup, which is a script call.
            def total() -> int:
                stats = client.info("commandstats")
                return sum(
                    v["calls"]
                    for k, v in stats.items()
                    if k not in ("cmdstat_info", "cmdstat_get", "cmdstat_set")
                )

            return total
        return None

    def lose_everything(self, store: Any, **options: Any) -> Any:
        """The store loses every operation: a process restart, a deleted file, a Redis restart."""
        if self.kind == "memory":
            return MemoryCursorStore(**options)
        if self.kind == "sqlite":
            store.close()
            for suffix in ("", "-wal", "-shm"):
                Path(f"{self.path}{suffix}").unlink(missing_ok=True)
            return self.make(**options)
        assert self.redis is not None
        self.redis.restart(flush=True)
        return store

    def close(self) -> None:
        for store in self.opened:
            store.close()


@pytest.fixture(params=["memory", "sqlite", "redis"])
def backend(request: pytest.FixtureRequest, tmp_path: Path) -> Iterator[Backend]:
    redis = request.getfixturevalue("redis_server") if request.param == "redis" else None
    b = Backend(request.param, tmp_path, redis)
    yield b
    b.close()


@pytest.fixture(params=["sqlite", "redis"])
def shared_backend(request: pytest.FixtureRequest, tmp_path: Path) -> Iterator[Backend]:
    redis = request.getfixturevalue("redis_server") if request.param == "redis" else None
    b = Backend(request.param, tmp_path, redis)
    yield b
    b.close()


def scope(principal: str = ALICE, **changes: Any) -> Scope:
    return Scope(principal, {**QUERY, **changes})


def first_token(store: CursorStore, position: Any = 10, *, max_pages: int | None = None) -> str:
    state = store.start(scope(), max_pages=max_pages)
    return store.mint(state, position)


# -- the operation and its positions ---------------------------------------------------------


def test_start_counts_the_first_page_and_anchors_expiry(backend: Backend) -> None:
    store = backend.make(ttl=120)
    state = store.start(scope(), max_pages=7)
    assert isinstance(store, CursorStore)
    assert state.pages_served == 1
    assert state.position is None
    assert state.max_pages == 7
    assert state.expires_at == pytest.approx(state.started_at + 120, abs=0.002)
    assert state.principal_fingerprint == scope().principal_fingerprint
    assert state.query_fingerprint == scope().query_fingerprint
    assert re.fullmatch(r"[0-9a-f]{32}", state.operation_id)


@pytest.mark.parametrize(
    "position",
    [0, 2**53, "k\u00e9y \U0001f600", [17, "2024-01-01", None], {"id": 5, "ts": 1.5}, True],
)
def test_mint_then_resume_returns_the_position(backend: Backend, position: Any) -> None:
    store = backend.make()
    state = store.start(scope(), max_pages=None)
    token = store.mint(state, position)
    resumed = store.resume(token, scope())
    assert resumed.position == position
    assert resumed.pages_served == 2
    assert resumed.operation_id == state.operation_id
    assert resumed.started_at == state.started_at
    assert resumed.expires_at == state.expires_at


def test_position_round_trips_as_json(backend: Backend) -> None:
    store = backend.make()
    state = store.start(scope(), max_pages=None)
    resumed = store.resume(store.mint(state, (1, ("a", 2))), scope())
    assert resumed.position == [1, ["a", 2]]


def test_a_chain_of_pages_counts_every_page(backend: Backend) -> None:
    store = backend.make()
    state = store.start(scope(), max_pages=None)
    for page in range(2, 12):
        state = store.resume(store.mint(state, page * 10), scope())
        assert (state.pages_served, state.position) == (page, page * 10)


def test_minting_one_position_twice_gives_one_token(backend: Backend) -> None:
    store = backend.make()
    state = store.start(scope(), max_pages=None)
    assert store.mint(state, {"b": 1, "a": 2}) == store.mint(state, {"a": 2, "b": 1})
    assert store.mint(state, 1) != store.mint(state, 2)


def test_positions_that_compare_equal_keep_their_json_type(backend: Backend) -> None:
    # regression guard: the memory store keeps int positions unencoded, and 1 == True == 1.0
    store = backend.make()
    state = store.start(scope(), max_pages=None)
    positions: list[Any] = [1, True, 1.0, 0, False, None, "1", [1], 2**64 - 1, -(2**63)]
    tokens = [store.mint(state, p) for p in positions]
    assert len(set(tokens)) == len(positions)
    for position, token in zip(positions, tokens, strict=True):
        got = store.resume(token, scope()).position
        assert (type(got), got) == (type(position), position)


def test_a_minted_position_is_a_copy(backend: Backend) -> None:
    store = backend.make()
    state = store.start(scope(), max_pages=None)
    position: list[Any] = [5, {"k": "v"}]
    token = store.mint(state, position)
    position.append(6)
    position[1]["k"] = "changed"
    assert store.resume(token, scope()).position == [5, {"k": "v"}]


@pytest.mark.parametrize("position", [2**64, -(2**63) - 1, [2**64]])
def test_integers_beyond_64_bits_are_refused_as_positions(backend: Backend, position: Any) -> None:
    store = backend.make()
    state = store.start(scope(), max_pages=None)
    with pytest.raises(EncodeError):
        store.mint(state, position)


def test_bad_positions_are_refused(backend: Backend) -> None:
    store = backend.make()
    state = store.start(scope(), max_pages=None)
    with pytest.raises(EncodeError):
        store.mint(state, {1: "non-string key"})
    with pytest.raises(EncodeError):
        store.mint(state, float("nan"))
    with pytest.raises(LimitError, match="position"):
        store.mint(state, "x" * 70_000)


# -- retries, the last page, the budget -------------------------------------------------------


def test_a_retried_token_serves_the_same_page_again_and_counts_it(backend: Backend) -> None:
    store = backend.make()
    token = first_token(store, position=[3, "k"])
    first = store.resume(token, scope())
    again = store.resume(token, scope())
    assert first.position == again.position == [3, "k"]
    assert (first.pages_served, again.pages_served) == (2, 3)


def test_the_token_of_the_last_page_serves_the_last_page_again(backend: Backend) -> None:
    store = backend.make()
    state = store.start(scope(), max_pages=None)
    token = store.mint(state, 90)
    last = store.resume(token, scope())  # the source says: nothing after this page
    assert last.position == 90
    assert store.resume(token, scope()).position == 90


def test_budget_is_spent_page_by_page_then_refused(backend: Backend) -> None:
    store = backend.make()
    state = store.start(scope(), max_pages=3)
    state = store.resume(store.mint(state, 1), scope())
    state = store.resume(store.mint(state, 2), scope())
    assert state.pages_served == 3
    token = store.mint(state, 3)
    with pytest.raises(BudgetExhausted) as info:
        store.resume(token, scope())
    assert (info.value.limit, info.value.used) == (3, 3)
    assert info.value.http_status == 429
    assert info.value.mcp_code == -32602
    # refusing did not spend anything: it stays refused with the same numbers
    with pytest.raises(BudgetExhausted) as again:
        store.resume(token, scope())
    assert again.value.used == 3


def test_max_pages_one_allows_no_continuation(backend: Backend) -> None:
    store = backend.make()
    with pytest.raises(BudgetExhausted):
        store.resume(first_token(store, max_pages=1), scope())


def test_retries_spend_the_budget(backend: Backend) -> None:
    store = backend.make()
    token = first_token(store, max_pages=2)
    assert store.resume(token, scope()).pages_served == 2
    with pytest.raises(BudgetExhausted):
        store.resume(token, scope())


def test_eight_threads_racing_never_overspend(backend: Backend) -> None:
    store = backend.make()
    token = first_token(store, max_pages=6)
    served: list[int] = []
    refused: list[int] = []
    lock = threading.Lock()
    barrier = threading.Barrier(8)

    def racer() -> None:
        barrier.wait()
        for _ in range(4):
            try:
                pages = store.resume(token, scope()).pages_served
                with lock:
                    served.append(pages)
            except BudgetExhausted:
                with lock:
                    refused.append(1)

    threads = [threading.Thread(target=racer) for _ in range(8)]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    assert sorted(served) == [2, 3, 4, 5, 6]
    assert len(refused) == 32 - 5


@pytest.mark.parametrize("bad", [0, -1, True, 2.0, "3"])
def test_invalid_max_pages_is_refused_before_anything(backend: Backend, bad: Any) -> None:
    store = backend.make()
    with pytest.raises(LimitError, match="max_pages"):
        store.start(scope(), max_pages=bad)


@pytest.mark.parametrize("bad", [0, -5, 1.5, None, 10**9])
def test_invalid_ttl_is_refused(backend: Backend, bad: Any) -> None:
    with pytest.raises(LimitError, match="ttl"):
        backend.make(ttl=bad)


# -- scope -------------------------------------------------------------------------------------


def test_another_principal_is_refused_without_echoing_identifiers(backend: Backend) -> None:
    store = backend.make()
    token = first_token(store)
    with pytest.raises(CursorScopeError) as info:
        store.resume(token, scope(BOB))
    err = info.value
    assert err.mismatch == "principal"
    assert err.http_status == 403
    assert err.mcp_code == -32602
    for secret in (ALICE, BOB, "alice", "bob", "orders"):
        assert secret not in str(err)
        assert secret not in repr(err)


def test_another_query_is_refused_as_a_query_mismatch(backend: Backend) -> None:
    store = backend.make()
    token = first_token(store)
    with pytest.raises(CursorScopeError) as info:
        store.resume(token, scope(status="closed"))
    assert info.value.mismatch == "query"
    assert info.value.http_status == 400
    assert "closed" not in str(info.value)


def test_principal_is_checked_before_query(backend: Backend) -> None:
    store = backend.make()
    token = first_token(store)
    with pytest.raises(CursorScopeError) as info:
        store.resume(token, scope(BOB, status="closed"))
    assert info.value.mismatch == "principal"


def test_page_size_and_spelling_may_change_between_pages(backend: Backend) -> None:
    store = backend.make()
    token = first_token(store)
    same = Scope(ALICE, {"status": "open", "limit": 10, "table": "orders", "page_size": 3})
    assert store.resume(token, same).position == 10


def test_scope_refusals_spend_no_pages(backend: Backend) -> None:
    store = backend.make()
    token = first_token(store, max_pages=2)
    for _ in range(3):
        with pytest.raises(CursorScopeError):
            store.resume(token, scope(BOB))
    assert store.resume(token, scope()).pages_served == 2


# -- tokens ------------------------------------------------------------------------------------


def test_tokens_are_url_safe_fixed_length_and_unique(backend: Backend) -> None:
    store = backend.make()
    tokens = set()
    for _ in range(200):
        token = first_token(store)
        assert len(token) == TOKEN_CHARS
        assert URLSAFE.fullmatch(token)
        tokens.add(token)
    assert len(tokens) == 200


@settings(
    max_examples=25, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture]
)
@given(
    principal=st.text(min_size=8, max_size=40).filter(lambda s: s.strip()),
    word=st.text(st.characters(categories=["L", "N"]), min_size=8, max_size=30),
    offset=st.integers(min_value=10**7, max_value=2**62),
)
def test_tokens_hide_principal_query_and_position(
    backend: Backend, principal: str, word: str, offset: int
) -> None:
    store = backend.make()
    sc = Scope(principal, {"filter": word})
    token = store.mint(store.start(sc, max_pages=None), [offset, word])
    raw = base64.urlsafe_b64decode(token)
    for needle in (principal, word, str(offset)):
        encoded = needle.encode("utf-8", "surrogatepass")
        assert needle not in token
        assert encoded not in raw
        assert base64.urlsafe_b64encode(encoded).decode()[:8] not in token
        assert base64.b64encode(encoded).decode()[:8] not in token
    assert offset.to_bytes(8, "big") not in raw
    assert offset.to_bytes(8, "little") not in raw


def test_every_flipped_character_is_refused_before_any_lookup(backend: Backend) -> None:
    store = backend.make()
    token = first_token(store)
    calls = backend.backend_calls(store)
    before = calls() if calls else 0
    for i, ch in enumerate(token):
        for repl in {"A", "_", "-", "z", "+", "/", "="} - {ch}:
            forged = token[:i] + repl + token[i + 1 :]
            with pytest.raises(InvalidCursor):
                store.resume(forged, scope())
    if calls:
        assert calls() == before
    assert store.resume(token, scope()).position == 10


@pytest.mark.parametrize(
    "garbage",
    [
        "",
        "x",
        "A" * 1_000_000,
        "A" * (TOKEN_CHARS - 1),
        "A" * (TOKEN_CHARS + 1),
        "A" * TOKEN_CHARS,
        "=" * TOKEN_CHARS,
        "é" * TOKEN_CHARS,
        base64.urlsafe_b64encode(b"\x02" + bytes(41)).decode(),  # another version
        "MTIz",  # base64 of an offset, as some servers ship
    ],
    ids=lambda g: f"{len(g)}chars:{g[:6]}",
)
def test_garbage_is_refused_before_any_lookup(backend: Backend, garbage: str) -> None:
    store = backend.make()
    calls = backend.backend_calls(store)
    before = calls() if calls else 0
    with pytest.raises(InvalidCursor) as info:
        store.resume(garbage, scope())
    assert info.value.http_status == 400
    assert info.value.mcp_code == -32602
    if calls:
        assert calls() == before
    if len(garbage) == 1_000_000:
        assert "too long" in str(info.value)


@pytest.mark.parametrize("garbage", [None, 123, b"A" * TOKEN_CHARS, ["token"]])
def test_non_string_tokens_are_invalid(backend: Backend, garbage: Any) -> None:
    store = backend.make()
    with pytest.raises(InvalidCursor):
        store.resume(garbage, scope())


def test_a_token_signed_with_another_key_is_refused(backend: Backend) -> None:
    store = backend.make(keys=SECRET)
    state = store.start(scope(), max_pages=None)
    store.mint(state, 1)
    other = Keyring.from_secret(b"o" * 32)
    forged = encode_token(other.current, bytes.fromhex(state.operation_id), new_token_id())
    with pytest.raises(InvalidCursor, match="signature"):
        store.resume(forged, scope())


def test_a_signed_token_the_store_never_held_is_not_a_restart(backend: Backend) -> None:
    store = backend.make(keys=SECRET)
    token = encode_token(Keyring.from_secret(SECRET).current, new_operation_id(), new_token_id())
    with pytest.raises(ExpiredCursor):
        store.resume(token, scope())


def test_a_signed_token_id_unknown_to_a_live_operation_is_invalid(backend: Backend) -> None:
    store = backend.make(keys=SECRET)
    state = store.start(scope(), max_pages=None)
    store.mint(state, 1)
    token = encode_token(
        Keyring.from_secret(SECRET).current, bytes.fromhex(state.operation_id), new_token_id()
    )
    with pytest.raises(InvalidCursor):
        store.resume(token, scope())


def test_rotation_accepts_the_previous_key_for_its_window(backend: Backend) -> None:
    store = backend.make(keys=Keyring(CursorKey(0, SECRET)))
    old_token = first_token(store)
    store.keyring = store.keyring.rotate(b"n" * 32, window=600)
    assert store.resume(old_token, scope()).position == 10
    state = store.start(scope(), max_pages=None)
    new_token = store.mint(state, 5)
    assert base64.urlsafe_b64decode(new_token)[1] == 1  # signed with the new key id
    # the window closes: the old key is refused, the new one is not
    store.keyring = Keyring(CursorKey(1, b"n" * 32), [CursorKey(0, SECRET, time.time() - 1)])
    with pytest.raises(InvalidCursor, match="unknown key"):
        store.resume(old_token, scope())
    assert store.resume(new_token, scope()).position == 5


@pytest.mark.parametrize("bad", [SECRET, None, "secret", CursorKey(0, SECRET)])
def test_assigning_what_is_not_a_keyring_is_refused(backend: Backend, bad: Any) -> None:
    store = backend.make(keys=SECRET)
    before = store.keyring
    with pytest.raises(TypeError, match="keyring must be a Keyring"):
        store.keyring = bad
    assert store.keyring is before
    assert store.resume(first_token(store), scope()).position == 10


def test_redis_stops_adopting_the_shared_key_once_a_keyring_is_assigned(
    redis_server: RedisServer,
) -> None:
    prefix = f"t{uuid.uuid4().hex[:12]}:"
    store = RedisCursorStore(redis_server.url, prefix=prefix)  # adopts the key Redis holds
    shared_kid = store.keyring.current.kid
    mine = Keyring(CursorKey((shared_kid + 1) % 256, b"m" * 32))
    store.keyring = mine
    # start would re-adopt the shared key if the store still followed Redis
    state = store.start(scope(), max_pages=None)
    token = store.mint(state, 4)
    assert store.keyring is mine
    assert base64.urlsafe_b64decode(token)[1] == mine.current.kid
    assert store.resume(token, scope()).position == 4
    # a second store on the same prefix still follows Redis, and cannot read the token
    other = RedisCursorStore(redis_server.url, prefix=prefix)
    assert other.keyring.current.kid == shared_kid
    with pytest.raises(InvalidCursor, match="unknown key"):
        other.resume(token, scope())


def test_keys_are_validated_and_never_shown() -> None:
    with pytest.raises(LimitError, match="at least 32"):
        CursorKey(0, b"short")
    with pytest.raises(LimitError, match="kid"):
        CursorKey(256, SECRET)
    key = CursorKey(3, SECRET)
    assert "sss" not in repr(key)
    assert "sss" not in repr(Keyring(key))


@pytest.mark.parametrize("previous", [[SECRET], ["secret"], SECRET, 5, CursorKey(1, SECRET)])
def test_regression_keyring_refuses_previous_keys_that_are_not_cursor_keys(
    previous: Any,
) -> None:
    """Found by a tester: Keyring(current, previous=[b"..."]) leaked a bare
    AttributeError ('bytes' object has no attribute 'kid'); cursors.md promises
    LimitError or TypeError for bad keys."""
    with pytest.raises(TypeError, match="previous") as info:
        Keyring(CursorKey(0, SECRET), previous)
    assert "sss" not in str(info.value)
    kept = Keyring(CursorKey(0, SECRET), [CursorKey(1, b"p" * 32)])
    assert kept.key(1, time.time()) == CursorKey(1, b"p" * 32)


@pytest.mark.parametrize("mismatch", ["other", None, "Principal"])
def test_regression_cursor_scope_error_refuses_an_unknown_mismatch(mismatch: Any) -> None:
    """Found by a tester: CursorScopeError(msg, mismatch="other") was built, with a
    `reason` of "scope_other" that no doc lists and API clients cannot match on."""
    with pytest.raises(LimitError, match="mismatch") as info:
        CursorScopeError("refused", mismatch=mismatch)
    assert info.value.name == "mismatch"
    for known, status in (("principal", 403), ("query", 400)):
        err = CursorScopeError("refused", mismatch=known)  # type: ignore[arg-type]
        assert (err.reason, err.http_status) == (f"scope_{known}", status)


# -- expiry and lost stores --------------------------------------------------------------------


def test_expired_operation_is_refused_with_410(backend: Backend) -> None:
    store = backend.make(ttl=1)
    token = first_token(store)
    time.sleep(1.2)
    with pytest.raises(ExpiredCursor) as info:
        store.resume(token, scope())
    assert info.value.http_status == 410
    assert info.value.mcp_code == -32602


def test_expiry_is_anchored_at_the_first_page(backend: Backend) -> None:
    store = backend.make(ttl=2)
    state = store.start(scope(), max_pages=None)
    time.sleep(1.2)
    state = store.resume(store.mint(state, 1), scope())
    fresh = store.mint(state, 2)  # minted well inside its own two seconds
    time.sleep(1.0)
    with pytest.raises(ExpiredCursor):
        store.resume(fresh, scope())


def test_minting_for_a_vanished_operation_gives_an_expired_token(backend: Backend) -> None:
    store = backend.make(ttl=1)
    state = store.start(scope(), max_pages=None)
    time.sleep(1.2)
    store.start(scope(), max_pages=None)  # lets sweeping stores sweep
    with pytest.raises(ExpiredCursor):
        store.resume(store.mint(state, 1), scope())


def test_a_store_that_lost_everything_never_restarts_from_page_one(backend: Backend) -> None:
    store = backend.make(keys=SECRET)
    state = store.start(scope(), max_pages=None)
    state = store.resume(store.mint(state, 100), scope())
    token = store.mint(state, 200)
    store = backend.lose_everything(store, keys=SECRET)
    with pytest.raises(ExpiredCursor):
        store.resume(token, scope())
    # and the store works again for new operations
    assert store.resume(first_token(store, 7), scope()).position == 7


def test_a_lost_store_with_its_own_key_refuses_clearly(backend: Backend) -> None:
    store = backend.make()
    token = first_token(store, 100)
    store = backend.lose_everything(store)
    with pytest.raises((ExpiredCursor, InvalidCursor)) as info:
        store.resume(token, scope())
    assert isinstance(info.value, CursorError)
    assert store.resume(first_token(store, 7), scope()).position == 7


# -- memory store bounds -----------------------------------------------------------------------


def test_memory_evicts_the_oldest_operation_of_a_principal() -> None:
    store = MemoryCursorStore(max_per_principal=2)
    tokens = [first_token(store, i) for i in range(3)]
    bob = store.start(scope(BOB), max_pages=None)
    with pytest.raises(ExpiredCursor):
        store.resume(tokens[0], scope())
    assert store.resume(tokens[1], scope()).position == 1
    assert store.resume(tokens[2], scope()).position == 2
    assert store.resume(store.mint(bob, 9), scope(BOB)).position == 9
    assert len(store) == 3


def test_memory_evicts_the_oldest_operation_overall() -> None:
    store = MemoryCursorStore(max_total=2)
    a = first_token(store, 1)
    b = store.mint(store.start(scope(BOB), max_pages=None), 2)
    c = first_token(store, 3)
    assert len(store) == 2
    with pytest.raises(ExpiredCursor):
        store.resume(a, scope())
    assert store.resume(b, scope(BOB)).position == 2
    assert store.resume(c, scope()).position == 3


def test_memory_sweeps_expired_operations() -> None:
    store = MemoryCursorStore(ttl=1)
    for _ in range(5):
        first_token(store)
    time.sleep(1.1)
    first_token(store)
    assert len(store) == 1


def test_memory_store_does_not_keep_orjson_buffers() -> None:
    # regression: each stored orjson output pinned a 4 KiB buffer (40 MB per 10k pages)
    import tracemalloc

    store = MemoryCursorStore()
    state = store.start(scope(), max_pages=None)
    tracemalloc.start()
    try:
        before = tracemalloc.get_traced_memory()[0]
        for i in range(2000):
            store.mint(state, [i, "k"])
        grown = tracemalloc.get_traced_memory()[0] - before
    finally:
        tracemalloc.stop()
    assert grown < 2000 * 1024


@pytest.mark.parametrize("option", ["max_per_principal", "max_total"])
def test_memory_bounds_are_validated(option: str) -> None:
    options: dict[str, Any] = {option: 0}
    with pytest.raises(LimitError, match=option):
        MemoryCursorStore(**options)


# -- shared between processes (SQLite and Redis) -----------------------------------------------


def _ctx() -> Any:
    return multiprocessing.get_context("spawn")


def _run(target: Callable[..., None], *args: Any) -> Any:
    ctx = _ctx()
    out = ctx.Queue()
    proc = ctx.Process(target=target, args=(*args, out))
    proc.start()
    result = out.get(timeout=120)
    proc.join(timeout=60)
    assert proc.exitcode == 0
    return result


def test_regression_processes_opening_a_new_store_file_at_once_all_succeed(
    tmp_path: Path,
) -> None:
    # Found by a tester: switching a new file to WAL, one of two connections is
    # answered "database is locked" at once, without the busy handler: 3 of 160 opens
    # by 8 processes at once failed after 1 ms with busy_timeout=30.
    ctx = _ctx()
    for trial in range(4):
        path = str(tmp_path / f"cursors{trial}.db")
        gate, out = ctx.Barrier(6), ctx.Queue()
        procs = [
            ctx.Process(target=cursor_workers.open_new_file, args=(path, gate, out))
            for _ in range(6)
        ]
        for proc in procs:
            proc.start()
        errors = [e for e in (out.get(timeout=120) for _ in procs) if e is not None]
        for proc in procs:
            proc.join(timeout=60)
        assert errors == []


@pytest.mark.parametrize("bad", [float("inf"), float("nan"), -1.0, 1e7, True, "1", None])
def test_regression_a_busy_timeout_sqlite_cannot_take_is_refused(tmp_path: Path, bad: Any) -> None:
    # Found by a tester: inf, NaN, negatives and anything over about 25 days became a
    # C int of milliseconds that SQLite reads as "do not wait".
    with pytest.raises(LimitError, match="busy_timeout"):
        SQLiteCursorStore(tmp_path / "c.db", busy_timeout=bad)
    for good in (0, 2.5, 86_400):
        SQLiteCursorStore(tmp_path / "c.db", busy_timeout=good).close()


def test_another_process_continues_what_one_process_started(shared_backend: Backend) -> None:
    b = shared_backend
    token = _run(cursor_workers.start_and_mint, b.where, 40)
    position, pages, next_token = _run(cursor_workers.resume_and_mint, b.where, token)
    assert (position, pages) == (40, 2)
    # and this process continues from there with a store opened afresh
    store = b.make()
    state = store.resume(next_token, Scope(cursor_workers.PRINCIPAL, cursor_workers.QUERY))
    assert (state.position, state.pages_served) == (41, 3)
    with pytest.raises(CursorScopeError):
        store.resume(next_token, scope())


_GENERATOR_PAGE = """
import functools, sys
from jsonbudget import IterableSource, Limits, Paginator, Scope
from tests.cursor_workers import PRINCIPAL, QUERY, open_store
rows = [{"id": i, "vals": (x for x in range(40))} for i in range(20)]
source = IterableSource(functools.partial(iter, rows))
store = open_store((sys.argv[1], sys.argv[2], sys.argv[3]))
page = Paginator(Limits(512), store=store).paginate(source, scope=Scope(PRINCIPAL, QUERY))
print(len(page.items), page.next_cursor)
"""


def test_a_cursor_whose_look_ahead_pulled_in_another_process_resumes_here(
    shared_backend: Backend,
) -> None:
    # The look-ahead pulled from the other process's generators, not ours: this process
    # serves the item whole from its own objects, and does not refuse the cursor as one
    # whose pulled values it dropped (as it does for its own; see tests/test_page.py).
    b = shared_backend
    done = subprocess.run(
        [sys.executable, "-c", _GENERATOR_PAGE, *b.where],
        capture_output=True, text=True, timeout=120, check=True,
        cwd=Path(__file__).resolve().parent.parent,
    )  # fmt: skip
    served, first_cursor = done.stdout.split()
    cursor: str | None = first_cursor
    rows = [{"id": i, "vals": (x for x in range(40))} for i in range(20)]
    source = IterableSource(functools.partial(iter, rows))
    pager = Paginator(Limits(600), store=b.make())
    got: list[Any] = []
    for _ in range(50):
        page = pager.paginate(source, scope=Scope(cursor_workers.PRINCIPAL, cursor_workers.QUERY),
                              cursor=cursor)  # fmt: skip
        got.extend(orjson.loads(page.data)["items"])
        cursor = page.next_cursor
        if cursor is None:
            break
    assert [it["id"] for it in got] == list(range(int(served), 20))
    assert all(it["vals"] == list(range(40)) for it in got)


def test_sqlite_cursors_survive_a_process_restart(tmp_path: Path) -> None:
    path = tmp_path / "durable.db"
    token = _run(cursor_workers.start_and_mint, ("sqlite", str(path), ""), [7, "k"])
    # the minting process has exited; its WAL was not checkpointed by us
    with SQLiteCursorStore(path) as store:
        state = store.resume(token, Scope(cursor_workers.PRINCIPAL, cursor_workers.QUERY))
    assert state.position == [7, "k"]


def test_regression_a_position_changed_in_the_store_by_hand_is_an_invalid_cursor(
    tmp_path: Path,
) -> None:
    # orjson's own JSONDecodeError came out of resume() for a row edited into non-JSON.
    path = tmp_path / "c.db"
    scope = Scope(cursor_workers.PRINCIPAL, cursor_workers.QUERY)
    with SQLiteCursorStore(path) as store:
        token = store.mint(store.start(scope, max_pages=None), [1, "k"])
    with closing(sqlite3.connect(path)) as conn:
        conn.execute("UPDATE jsonbudget_tokens SET position = ?", (b"{not json",))
        conn.commit()
    with SQLiteCursorStore(path) as store, pytest.raises(InvalidCursor, match="not JSON"):
        store.resume(token, scope)


@pytest.mark.parametrize(
    ("column", "value"),
    [
        ("expires_at", "'soon'"),
        ("expires_at", "9e999"),  # infinity: the operation would never expire
        ("started_at", "x'00'"),
        ("pages_served", "'many'"),
        ("pages_served", "0"),
        ("max_pages", "'five'"),
        ("max_pages", "2.5"),
        ("query_fp", "x'00'"),
        ("principal_fp", "'é'"),
        ("principal_fp", "CAST(x'ff' AS TEXT)"),  # not UTF-8
    ],
)
def test_regression_an_operation_changed_in_the_store_by_hand_is_an_invalid_cursor(
    tmp_path: Path, column: str, value: str
) -> None:
    """Found by a tester: only the position was checked; a column of another type gave a
    bare TypeError from resume() (a traceback from the command line), text that is not
    UTF-8 an sqlite3 error about its text, and an infinite expiry or a count of 0 was
    served as if the store had written it."""
    path = tmp_path / "c.db"
    scope = Scope(cursor_workers.PRINCIPAL, cursor_workers.QUERY)
    with SQLiteCursorStore(path) as store:
        token = store.mint(store.start(scope, max_pages=5), [1, "k"])
    with closing(sqlite3.connect(path)) as conn:
        conn.execute(f"UPDATE jsonbudget_ops SET {column} = {value}")
        conn.commit()
    with SQLiteCursorStore(path) as store, pytest.raises(InvalidCursor, match="not have written"):
        store.resume(token, scope)


@pytest.mark.parametrize("value", ["'a token id'", "5", "x'0102'"])
def test_regression_a_token_id_changed_in_the_store_by_hand_is_an_invalid_cursor(
    tmp_path: Path, value: str
) -> None:
    """Found with the one above: mint() read an existing token's id with bytes(), a
    TypeError for text and, for an integer n, n zero bytes signed into a token."""
    path = tmp_path / "c.db"
    scope = Scope(cursor_workers.PRINCIPAL, cursor_workers.QUERY)
    with SQLiteCursorStore(path) as store:
        state = store.start(scope, max_pages=None)
        store.mint(state, [1, "k"])
        with closing(sqlite3.connect(path)) as conn:
            conn.execute(f"UPDATE jsonbudget_tokens SET tid = {value}")
            conn.commit()
        with pytest.raises(InvalidCursor, match="could not have written"):
            store.mint(state, [1, "k"])


@pytest.mark.parametrize("value", ["'a text key of more than thirty-two bytes'", "40", "x'00'"])
def test_regression_a_mac_key_changed_in_the_store_by_hand_is_refused_by_name(
    tmp_path: Path, value: str
) -> None:
    """Found by a tester: a TEXT key gave a bare TypeError, an integer n became n zero
    bytes (refused, or for n >= 32 taken as the key), and a short blob a LimitError
    naming a `secret` the caller never passed. As the Redis store answers for its shared
    key: LimitError naming `mac-key`, the secret never shown."""
    path = tmp_path / "c.db"
    SQLiteCursorStore(path).close()
    with closing(sqlite3.connect(path)) as conn:
        conn.execute(f"UPDATE jsonbudget_meta SET value = {value}")
        conn.commit()
    with pytest.raises(LimitError) as info:
        SQLiteCursorStore(path)
    assert info.value.name == "mac-key"
    assert "thirty" not in str(info.value)
    # A store given its keys never reads the one in the file.
    scope = Scope(cursor_workers.PRINCIPAL, cursor_workers.QUERY)
    with SQLiteCursorStore(path, keys=b"k" * 32) as store:
        token = store.mint(store.start(scope, max_pages=None), 3)
        assert store.resume(token, scope).position == 3


def test_eight_processes_racing_never_overspend(shared_backend: Backend) -> None:
    b = shared_backend
    store = b.make()
    state = store.start(Scope(cursor_workers.PRINCIPAL, cursor_workers.QUERY), max_pages=10)
    token = store.mint(state, 0)
    ctx = _ctx()
    barrier = ctx.Barrier(8)
    out = ctx.Queue()
    procs = [
        ctx.Process(target=cursor_workers.race, args=(b.where, token, 5, barrier, out))
        for _ in range(8)
    ]
    for p in procs:
        p.start()
    results = [out.get(timeout=180) for _ in procs]
    for p in procs:
        p.join(timeout=60)
        assert p.exitcode == 0
    served = sorted(pages for got, _ in results for pages in got)
    assert served == list(range(2, 11))
    assert sum(refused for _, refused in results) == 40 - 9


# -- Redis specifics ---------------------------------------------------------------------------


def _redis(redis_server: RedisServer, **options: Any) -> RedisCursorStore:
    return RedisCursorStore(redis_server.url, prefix=f"t{uuid.uuid4().hex[:12]}:", **options)


def test_redis_keys_are_hash_tagged_by_operation_and_expire(redis_server: RedisServer) -> None:
    store = _redis(redis_server, ttl=300)
    state = store.start(scope(), max_pages=None)
    store.mint(state, 1)
    client = store._client
    keys = sorted(k.decode() for k in client.scan_iter(match=f"{store.prefix}*"))
    assert keys == [f"{store.prefix}mac-key", f"{store.prefix}{{op:{state.operation_id}}}"]
    assert 0 < client.pttl(keys[1]) <= 300_000
    assert client.pttl(keys[0]) == -1  # the shared key does not expire


def test_redis_continuation_is_two_round_trips(redis_server: RedisServer) -> None:
    client, trips = counting_client(redis_server.url)
    store = RedisCursorStore(client, prefix=f"t{uuid.uuid4().hex[:12]}:")
    state = store.start(scope(), max_pages=None)
    token = store.mint(state, 0)

    def evalsha_calls() -> int:
        calls: int = client.info("commandstats")["cmdstat_evalsha"]["calls"]
        return calls

    before_trips, before_calls = trips.count, evalsha_calls()
    for i in range(10):
        token = store.mint(store.resume(token, scope()), i + 1)
    assert trips.count - before_trips == 1 + 20  # the INFO above, then resume + mint each
    assert evalsha_calls() - before_calls == 20


def test_redis_restarted_mid_pagination(redis_server: RedisServer) -> None:
    a = _redis(redis_server)
    state = a.start(scope(), max_pages=None)
    token = a.mint(a.resume(a.mint(state, 1), scope()), 2)
    redis_server.restart(flush=True)
    with pytest.raises((ExpiredCursor, InvalidCursor)):
        a.resume(token, scope())
    # a worker started after the restart and the old one agree on the new shared key
    c = RedisCursorStore(redis_server.url, prefix=a.prefix)
    from_a = a.mint(a.start(scope(), max_pages=None), 5)
    assert c.resume(from_a, scope()).position == 5
    from_c = c.mint(c.start(scope(), max_pages=None), 6)
    assert a.resume(from_c, scope()).position == 6


def test_redis_client_with_decoded_responses(redis_server: RedisServer) -> None:
    import redis

    client = redis.Redis.from_url(redis_server.url, decode_responses=True)
    store = RedisCursorStore(client, prefix=f"t{uuid.uuid4().hex[:12]}:")
    state = store.start(scope(), max_pages=4)
    resumed = store.resume(store.mint(state, {"k": "é"}), scope())
    assert (resumed.position, resumed.pages_served, resumed.max_pages) == ({"k": "é"}, 2, 4)


@pytest.mark.parametrize("prefix", ["a{b}:", "x}", 5])
def test_redis_prefix_is_validated(redis_server: RedisServer, prefix: Any) -> None:
    with pytest.raises((LimitError, TypeError)):
        RedisCursorStore(redis_server.url, prefix=prefix)


def test_redis_refuses_what_is_not_a_client() -> None:
    with pytest.raises(TypeError, match="redis"):
        RedisCursorStore(object())


@pytest.mark.parametrize("url", ["http://localhost:6379", "", "redis://host:port"])
def test_redis_refuses_a_string_that_is_not_a_redis_url_with_value_error(url: str) -> None:
    # A str is the right type with a bad value: ValueError, as RedisSpillStore raises
    # (cursors.md said TypeError for it), and before any connection is tried.
    with pytest.raises(ValueError, match=r"scheme|Port") as info:
        RedisCursorStore(url)
    assert not isinstance(info.value, TypeError)


def test_mint_refuses_what_is_not_a_store_state(backend: Backend) -> None:
    store = backend.make()
    with pytest.raises(TypeError):
        store.mint({"operation_id": "00" * 16}, 1)
    with pytest.raises(TypeError):
        store.mint(CursorState("zz" * 16, "p", "q", None, 1, 0.0, 1.0, None), 1)


@pytest.mark.parametrize("operation_id", ["AB" * 16, "ab" * 15, "ab" * 17, 5, list("ab" * 16)])
def test_mint_refuses_a_state_whose_operation_id_is_not_one(
    backend: Backend, operation_id: Any
) -> None:
    # regression: a non-str operation id raised a bare TypeError from len()
    store = backend.make()
    with pytest.raises(EncodeError, match="operation id"):
        store.mint(CursorState(operation_id, "p", "q", None, 1, 0.0, 1.0, None), 1)


def test_new_state_is_the_same_frozen_cursor_state() -> None:
    args: tuple[Any, ...] = ("00" * 16, "p", "q", [1, "k"], 3, 10.0, 20.0, 9)
    fast = new_state(*args)
    assert type(fast) is CursorState
    assert fast == CursorState(*args)
    assert [getattr(fast, f.name) for f in dataclasses.fields(CursorState)] == list(args)
    with pytest.raises(AttributeError):
        fast.pages_served = 4  # type: ignore[misc]


def test_keys_survive_pickling_and_sign_the_same() -> None:
    key = CursorKey(7, SECRET, accept_until=123.5)
    again = pickle.loads(pickle.dumps(key))
    assert again == key
    assert again.accept_until == 123.5
    assert again.mac(b"body") == key.mac(b"body")
    assert again.mac(b"body") != CursorKey(7, b"t" * 32).mac(b"body")


def test_cursor_state_is_frozen() -> None:
    state = CursorState("00" * 16, "p", "q", None, 1, 0.0, 1.0, None)
    with pytest.raises(AttributeError):
        state.pages_served = 5  # type: ignore[misc]


@pytest.mark.parametrize("window", [float("nan"), float("inf"), 1e300, -1, "soon", True])
def test_regression_a_rotation_window_that_never_ends_is_refused(window: Any) -> None:
    # NaN compares false with every time: the retired key was accepted forever.
    with pytest.raises(LimitError, match="window"):
        Keyring.generate().rotate(b"n" * 32, window=window)


@pytest.mark.parametrize("until", [float("nan"), float("inf"), -1.0, "soon", True])
def test_regression_a_key_retired_at_no_time_is_refused(until: Any) -> None:
    # accept_until="soon" was taken, and resume() later raised a raw TypeError.
    with pytest.raises(LimitError, match="accept_until"):
        CursorKey(1, b"k" * 32, accept_until=until)


_SET_WORKER = """
import json, sys
from jsonbudget import CursorScopeError, Limits, SQLiteCursorStore, Scope, paginate
tags = {f"tag-{i}" for i in range(30)}
store = SQLiteCursorStore(sys.argv[1], keys=b"k" * 32)
cursor = None if sys.argv[2] == "-" else sys.argv[2]
try:
    page = paginate(tags, scope=Scope("alice"), cursor=cursor, store=store,
                    limits=Limits(4000, max_items=10))
except CursorScopeError:
    print(json.dumps("refused"))
else:
    print(json.dumps([list(page.items), page.next_cursor]))
"""


def test_regression_a_set_paged_across_processes_is_refused_where_its_order_differs(
    tmp_path: Path,
) -> None:
    # A set of strings iterates in its hash order, which differs between processes with
    # different hash seeds: workers sharing a store served 22 of 30 items, some twice.
    db = str(tmp_path / "cursors.sqlite3")

    def worker(seed: str, cursor: str) -> Any:
        env = {**os.environ, "PYTHONHASHSEED": seed}
        out = subprocess.run(
            [sys.executable, "-c", _SET_WORKER, db, cursor],
            capture_output=True,
            text=True,
            timeout=60,
            env=env,
            check=True,
        )
        return orjson.loads(out.stdout)

    items, cursor = worker("1", "-")
    assert worker("2", cursor) == "refused"
    while cursor is not None:  # the same seed: the same order, every item once
        more, cursor = worker("1", cursor)
        items += more
    assert sorted(items) == sorted(f"tag-{i}" for i in range(30))
    assert len(items) == 30


def test_regression_a_keyring_pickles_for_a_worker(tmp_path: Path) -> None:
    # Keyring refused setattr, so it could not be pickled for a worker process or copied.
    keys = Keyring.generate().rotate(b"n" * 32)
    db = tmp_path / "cursors.sqlite3"
    mine = SQLiteCursorStore(db, keys=keys)
    token = mine.mint(mine.start(Scope("alice"), max_pages=None), 5)
    worker = SQLiteCursorStore(db, keys=pickle.loads(pickle.dumps(keys)))
    assert worker.resume(token, Scope("alice")).position == 5


def test_regression_a_memory_operation_keeps_a_bounded_number_of_positions() -> None:
    # Found by a tester: each distinct position minted stayed with its operation until
    # the ttl ran out (about 136 bytes a page: 0.5 GB for one client paging for 15
    # minutes), while the store's bounds counted operations only.
    import tracemalloc

    from jsonbudget._cursors.store import MAX_POSITIONS_PER_OPERATION

    store = MemoryCursorStore()
    state = store.start(scope(), max_pages=None)
    first = store.mint(state, 0)
    tokens = [first]
    tracemalloc.start()
    try:
        for i in range(1, 2 * MAX_POSITIONS_PER_OPERATION):
            tokens.append(store.mint(state, i))
        before = tracemalloc.get_traced_memory()[0]
        for i in range(2 * MAX_POSITIONS_PER_OPERATION, 20_000):
            store.mint(state, i)
        grown = tracemalloc.get_traced_memory()[0] - before
    finally:
        tracemalloc.stop()
    assert grown < 16_000, grown  # about 2.4 MB when every position was kept
    # The newest are kept; an older cursor says it expired, not that it was never issued.
    last = store.mint(state, 19_999)
    assert store.resume(last, scope()).position == 19_999
    with pytest.raises(ExpiredCursor):
        store.resume(first, scope())
    with pytest.raises(ExpiredCursor):
        store.resume(tokens[-1], scope())
    # A retried position counts as the newest: it stays while others are minted.
    kept = store.mint(state, 19_990)
    for i in range(MAX_POSITIONS_PER_OPERATION - 1):
        store.mint(state, 30_000 + i)
    assert store.resume(kept, scope()).position == 19_990


def test_regression_rotate_keeps_a_previous_key_accepted_without_end() -> None:
    # Found by a security tester: rotate kept a previous key with a deadline still ahead
    # but dropped one with none (accepted without end, as `key` and `adopt` read it):
    # the live cursors signed with it became InvalidCursor at the next rotation.
    store = MemoryCursorStore(keys=Keyring(CursorKey(0, SECRET)))
    token = first_token(store)
    store.keyring = Keyring(CursorKey(1, b"m" * 32), [CursorKey(0, SECRET)])
    assert store.resume(token, scope()).position == 10
    store.keyring = store.keyring.rotate(b"n" * 32, window=0)
    assert repr(store.keyring) == "Keyring(current_kid=2, kids=[0, 1, 2])"
    assert store.resume(token, scope()).position == 10
    # A key past its deadline is still dropped, and so is one whose kid the new key takes.
    past = Keyring(CursorKey(1, b"m" * 32), [CursorKey(0, SECRET, time.time() - 1)])
    assert repr(past.rotate(b"n" * 32)) == "Keyring(current_kid=2, kids=[1, 2])"
    taken = Keyring(CursorKey(1, b"m" * 32), [CursorKey(2, SECRET)])
    assert repr(taken.rotate(b"n" * 32)) == "Keyring(current_kid=2, kids=[1, 2])"


def test_regression_an_sqlite_store_file_is_private_to_its_owner(tmp_path: Path) -> None:
    # Found by a security tester: the database (and its -wal and -shm files) took the
    # umask's mode, 0644, so every local user could read the MAC key, every token id
    # (and so rebuild every live cursor), the positions and the principals' fingerprints.
    path = tmp_path / "cursors.sqlite3"
    before = os.umask(0o022)
    try:
        store = SQLiteCursorStore(path)
        store.mint(store.start(scope(), max_pages=None), ["bob@example.com", 7])
        files = sorted(p.name for p in tmp_path.iterdir())
        assert files == ["cursors.sqlite3", "cursors.sqlite3-shm", "cursors.sqlite3-wal"]
        for name in files:
            assert (tmp_path / name).stat().st_mode & 0o777 == 0o600, name
        store.close()
        # A file an older version made under the umask is made private as it opens; a
        # group that may write it shares it on purpose and keeps it.
        for mode, private in [(0o644, 0o600), (0o666, 0o660), (0o640, 0o600)]:
            path.chmod(mode)
            with SQLiteCursorStore(path) as again:
                assert again.resume(again.mint(again.start(scope(), max_pages=None), 1), scope())
            assert path.stat().st_mode & 0o777 == private, oct(mode)
    finally:
        os.umask(before)


def test_a_memory_cursor_in_use_is_kept_while_its_operation_mints_others() -> None:
    # A `ResultReader` reference is its operation's first position, resumed by every
    # read, while each read mints continuations in the same operation.
    from jsonbudget._cursors.store import MAX_POSITIONS_PER_OPERATION

    store = MemoryCursorStore()
    state = store.start(scope(), max_pages=None)
    anchor = store.mint(state, {"ref": "r"})
    for i in range(3 * MAX_POSITIONS_PER_OPERATION):
        assert store.resume(anchor, scope()).position == {"ref": "r"}
        store.mint(state, i)


@pytest.mark.parametrize("how", [copy.copy, copy.deepcopy, pickle.dumps])
def test_regression_a_copied_store_is_refused_not_an_alias(backend: Backend, how: Any) -> None:
    # copy.copy gave an alias sharing the lock, the operations and the connection:
    # closing the copy closed the original, whose next call raised sqlite3's own error.
    store = backend.make()
    with pytest.raises(TypeError, match=r"cannot (be copied|pickle)"):
        how(store)
    token = first_token(store)
    assert store.resume(token, scope()).pages_served == 2

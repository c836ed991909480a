"""Regressions found by a tester running the Redis stores as deployments configure them
(round 31): redis-py's default retries, ACL users, commands refused part-way.

A redis-py client resends a command whose reply was lost (a connection reset after Redis
ran it). `RedisCursorStore` counted a resent resume twice (`BudgetExhausted` with a page
of the budget unserved); `RedisSpillStore.put` appended a resent block twice, and a
resent ``MULTI RENAME EXPIRE EXEC`` raised `SpillError` with the result stored. The
commands each store needs were not documented; a command refused inside a script gave
Redis's error naming only the script's hash; a start refused ``PEXPIREAT`` left a hash
that never expires, and a put refused ``MULTI`` raised with its result stored.

A lost reply is a real one: `DroppingProxy` forwards the request to the suite's
redis-server and closes the connection before the reply reaches redis-py, whose own
retry resends the request.
"""

from __future__ import annotations

import hashlib
import re
import uuid
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import orjson
import pytest
import redis
from redis.backoff import NoBackoff
from redis.retry import Retry

from jsonbudget import (
    Keyring,
    Limits,
    RedisCursorStore,
    RedisSpillStore,
    ResultReader,
    Scope,
    SpillRef,
    gate_result,
    paginate,
    read_result,
)
from jsonbudget.errors import BudgetExhausted, SpillError
from tests.dropping_proxy import DroppingProxy
from tests.fixtures_redis import RedisServer

pytestmark = pytest.mark.redis

DOCS = Path(__file__).resolve().parent.parent / "docs"
ALICE = Scope("alice", {"q": 1})
DATA = list(range(300))
#: The commands the cursor store's scripts run, by the script they are in.
SCRIPT_COMMANDS = {
    "start": "TIME PEXPIREAT HSET",
    "resume": "TYPE HMGET TIME HSET",
    "mint": "TYPE HGET HSET",
}


def _documented(doc: str, after: str) -> list[str]:
    """The ACL rules (``+command``) written in *doc* in the first code span after *after*."""
    text = " ".join((DOCS / doc).read_text(encoding="utf-8").split())  # unwrapped
    found = re.search(r"`(\+[^`]+)`", text[text.index(after) :])
    assert found is not None
    return found.group(1).split()


def _sha(script: str) -> bytes:
    return hashlib.sha1(script.encode(), usedforsecurity=False).hexdigest().encode()


@pytest.fixture
def admin(redis_server: RedisServer) -> Iterator[Any]:
    client = redis.Redis.from_url(redis_server.url, socket_timeout=10)
    yield client
    client.close()


@pytest.fixture
def proxy(redis_server: RedisServer) -> Iterator[DroppingProxy]:
    with DroppingProxy(redis_server.port) as running:
        yield running


@pytest.fixture
def prefix(admin: Any) -> Iterator[str]:
    """A prefix of this test's own; its keys are deleted afterwards."""
    mine = f"r31{uuid.uuid4().hex[:12]}:"
    yield mine
    for key in admin.scan_iter(match=f"{mine}*"):
        admin.delete(key)


@pytest.fixture
def acl_user(admin: Any, redis_server: RedisServer, prefix: str) -> Iterator[Any]:
    """Make a Redis user allowed *rules* on the keys ``~<prefix>*``; returns its URL."""
    made: list[str] = []

    def make(rules: list[str]) -> str:
        name = f"r31-{uuid.uuid4().hex[:12]}"
        admin.execute_command("ACL", "SETUSER", name, "reset", "on", ">pw", f"~{prefix}*", *rules)
        made.append(name)
        return f"redis://{name}:pw@127.0.0.1:{redis_server.port}/0"

    yield make
    for name in made:
        admin.execute_command("ACL", "DELUSER", name)


def _retrying(proxy: DroppingProxy) -> Any:
    """A client through *proxy* that retries a lost reply, as redis-py ≥ 6 does by default
    (explicit, and without a backoff, so the test does not depend on the version)."""
    return redis.Redis(host="127.0.0.1", port=proxy.port, retry=Retry(NoBackoff(), 3))


def _no_retries(proxy: DroppingProxy) -> Any:
    return redis.Redis(host="127.0.0.1", port=proxy.port, retry=Retry(NoBackoff(), 0))


def _start_mint_resume(store: RedisCursorStore, *, times: int) -> None:
    for _ in range(times):
        store.resume(store.mint(store.start(ALICE, max_pages=None), 5), ALICE)


def _left(admin: Any, prefix: str) -> dict[bytes, int]:
    """Every key under *prefix*, with its TTL (-1: none)."""
    return {key: admin.ttl(key) for key in admin.scan_iter(match=f"{prefix}*")}


# -- 1. A lost resume reply, resent by redis-py ----------------------------------------------


def test_regression_resume_reply_lost_counts_the_page_once(
    proxy: DroppingProxy, admin: Any, prefix: str
) -> None:
    from jsonbudget._cursors.redis_store import _RESUME

    admin.script_load(_RESUME)  # loaded, as in any worker warmed up: Redis runs it
    store = RedisCursorStore(_retrying(proxy), keys=Keyring.generate(), prefix=prefix)
    limits = Limits(400, max_pages=2)
    first = paginate(DATA, scope=ALICE, store=store, limits=limits)
    assert first.next_cursor is not None
    proxy.arm(_sha(_RESUME))
    # was BudgetExhausted "(2 of 2 pages)": the resent script counted the page again
    second = paginate(DATA, scope=ALICE, cursor=first.next_cursor, store=store, limits=limits)
    assert proxy.dropped == 1
    assert second.items[0] == len(first.items)
    (key,) = _left(admin, prefix)
    assert admin.hget(key, "n") == b"2"
    assert second.incomplete_reason == "budget_exhausted"
    # a caller's retry of the cursor counts: the budget is spent now, and says so
    with pytest.raises(BudgetExhausted) as spent:
        paginate(DATA, scope=ALICE, cursor=first.next_cursor, store=store, limits=limits)
    assert (spent.value.used, spent.value.limit) == (2, 2)


def test_start_and_mint_replies_lost_are_answered_once(
    proxy: DroppingProxy, admin: Any, prefix: str
) -> None:
    from jsonbudget._cursors.redis_store import _MINT, _START

    for script in (_START, _MINT):
        admin.script_load(script)  # loaded, as in any worker warmed up: Redis runs them
    store = RedisCursorStore(_retrying(proxy), keys=Keyring.generate(), prefix=prefix)
    proxy.arm(_sha(_START))
    state = store.start(ALICE, max_pages=3)
    (key,) = _left(admin, prefix)
    held = admin.hmget(key, "n", "t0", "exp")
    assert held == [
        b"1",
        str(round(state.started_at * 1000)).encode(),
        str(round(state.expires_at * 1000)).encode(),
    ]
    assert 0 < admin.ttl(key) <= store.ttl
    proxy.arm(_sha(_MINT))
    token = store.mint(state, 7)
    assert proxy.dropped == 2
    assert store.mint(state, 7) == token
    assert store.resume(token, ALICE).position == 7
    assert admin.hget(key, "n") == b"2"


# -- 2. RedisSpillStore.put with lost replies -------------------------------------------------


def test_regression_spill_block_reply_lost_writes_it_once(
    proxy: DroppingProxy, admin: Any, prefix: str
) -> None:
    store = RedisSpillStore(_retrying(proxy), prefix=prefix)
    # the second block's request (an APPEND before, SETRANGE now) loses its reply
    proxy.arm(b"b" * 100)
    ref = store.put([b"a" * 100, b"b" * 100], label="r")  # was SpillError: "key was lost"
    assert proxy.dropped == 1
    assert store.read(ref) == b"a" * 100 + b"b" * 100
    assert _left(admin, prefix).keys() == {f"{prefix}{ref.ref}".encode()}


def test_regression_spill_rename_reply_lost_returns_the_ref(
    proxy: DroppingProxy, admin: Any, prefix: str
) -> None:
    store = RedisSpillStore(_retrying(proxy), prefix=prefix, max_age=500)
    proxy.arm(b"RENAME")
    # was SpillError "no such key", the result stored all the same
    ref = store.put([b"a" * 100, b"b" * 100], label="r")
    assert proxy.dropped == 1
    assert store.read(ref) == b"a" * 100 + b"b" * 100
    left = _left(admin, prefix)
    assert left.keys() == {f"{prefix}{ref.ref}".encode()}
    assert 0 < left[f"{prefix}{ref.ref}".encode()] <= 500


def test_spill_rename_without_reply_leaves_nothing_but_the_result_expiring(
    proxy: DroppingProxy, admin: Any, prefix: str
) -> None:
    store = RedisSpillStore(_no_retries(proxy), prefix=prefix, max_age=500)
    proxy.arm(b"RENAME")
    with pytest.raises(SpillError) as failed:
        store.put(b"x" * 300, label="r")
    assert isinstance(failed.value.__cause__, redis.ConnectionError)
    # RENAME ran, its reply lost: the result under its name (its content's hash), with
    # the expiry the temporary key had; the temporary key gone
    name = f"{prefix}r.{hashlib.sha256(b'x' * 300).hexdigest()}.json".encode()
    left = _left(admin, prefix)
    assert left.keys() == {name}
    assert 0 < left[name] <= 500
    assert admin.get(name) == b"x" * 300


class _PutBetween(redis.Redis):
    """A client whose pipeline holding a RENAME first lets *other* put the same bytes
    (so that it stores them between this put's last look and its RENAME), then loses
    that RENAME's reply."""

    def __init__(self, proxy: DroppingProxy, other: RedisSpillStore, data: bytes) -> None:
        super().__init__(host="127.0.0.1", port=proxy.port, retry=Retry(NoBackoff(), 0))
        self.between = (proxy, other, data)
        self.returned: list[SpillRef] = []

    def pipeline(self, transaction: bool = True, shard_hint: Any = None) -> Any:
        client = self

        class Between(redis.client.Pipeline):
            def execute(self, raise_on_error: bool = True) -> Any:
                if any(args[0] == "RENAME" for args, _ in self.command_stack):
                    proxy, other, data = client.between
                    client.returned.append(other.put(data, label="r"))
                    proxy.arm(b"RENAME")
                return super().execute(raise_on_error)

        return Between(self.connection_pool, self.response_callbacks, transaction, shard_hint)


def test_regression_spill_put_deleted_what_another_put_had_returned(
    proxy: DroppingProxy, admin: Any, redis_server: RedisServer, prefix: str
) -> None:
    data = b"y" * 300
    other = RedisSpillStore(redis.Redis.from_url(redis_server.url), prefix=prefix)
    client = _PutBetween(proxy, other, data)
    with pytest.raises(SpillError):
        RedisSpillStore(client, prefix=prefix).put(data, label="r")
    (returned,) = client.returned
    # was SpillError "no spilled result": the failed put deleted the final key
    assert other.read(returned) == data


def test_spill_rename_without_reply_keeps_what_another_put_stored(
    proxy: DroppingProxy, admin: Any, prefix: str
) -> None:
    store = RedisSpillStore(_no_retries(proxy), prefix=prefix)
    kept = store.put(b"x" * 300, label="r")
    proxy.arm(b"RENAME")
    with pytest.raises(SpillError):
        store.put(b"x" * 300, label="r")
    assert store.read(kept) == b"x" * 300
    assert _left(admin, prefix).keys() == {f"{prefix}{kept.ref}".encode()}


# -- 3. The commands each store needs, as documented --------------------------------------------


def test_regression_documented_acl_runs_a_pagination_and_a_spill(
    acl_user: Any, prefix: str
) -> None:
    cursor_rules = _documented("cursors.md", "**Commands a Redis user needs**")
    shared_key_rules = _documented("cursors.md", "and with `keys=None` also")
    spill_rules = _documented("guards.md", "A Redis user (ACL) needs, on")
    limits = Limits(400, max_pages=100)
    for rules, keys in (
        (cursor_rules, Keyring.generate()),
        (cursor_rules + shared_key_rules, None),
    ):
        # was NOPERM for HINCRBY (run inside the resume script), documented nowhere
        store = RedisCursorStore(acl_user(rules), keys=keys, prefix=prefix)
        page = paginate(DATA, scope=ALICE, store=store, limits=limits)
        got = list(page.items)
        while page.next_cursor:
            page = paginate(DATA, scope=ALICE, cursor=page.next_cursor, store=store, limits=limits)
            got += page.items
        assert got == DATA
    # was NOPERM for APPEND and MULTI, which the docs did not list
    url = acl_user(spill_rules + cursor_rules)
    spill = RedisSpillStore(url, prefix=prefix)
    ref = spill.put([b"a" * 100, b"b" * 100], label="r")
    assert spill.read(ref, 50, 100) == b"a" * 50 + b"b" * 50
    with spill.open(spill.get(ref.ref)) as stream:
        assert stream.read() == b"a" * 100 + b"b" * 100
    reader = ResultReader(
        spill=spill,
        max_bytes=2000,
        cursors=RedisCursorStore(url, keys=Keyring.generate(), prefix=prefix),
    )
    value = [{"i": i, "s": "x" * 50} for i in range(200)]
    gated = gate_result(value, max_bytes=1000, store=spill, reader=reader, principal="alice")
    assert gated.shown_ref is not None
    items: list[object] = []
    cursor = None
    while True:
        read = read_result(gated.shown_ref, "", cursor, reader=reader, principal="alice")
        items += orjson.loads(read.data)["items"]
        cursor = read.next_cursor
        if not cursor:
            break
    assert items == value


# -- 3 and 4. A command refused inside a script -------------------------------------------------


@pytest.mark.parametrize("refused", ["time", "pexpireat", "hset", "type", "hmget", "hget"])
def test_regression_script_refused_a_command_names_it_and_leaves_no_key_without_expiry(
    acl_user: Any, admin: Any, prefix: str, refused: str
) -> None:
    rules = [
        rule
        for rule in _documented("cursors.md", "**Commands a Redis user needs**")
        if rule != f"+{refused}"
    ]
    store = RedisCursorStore(acl_user(rules), keys=Keyring.generate(), prefix=prefix)
    with pytest.raises(redis.ResponseError) as failed:
        _start_mint_resume(store, times=3)
    # was Redis's text alone: "can't run this command ... script: <sha>, on @user_script:7."
    message = str(failed.value)
    script = re.search(r"RedisCursorStore's (\w+) script", message)
    assert script is not None
    assert refused.upper() in SCRIPT_COMMANDS[script.group(1)].split()
    assert refused.upper() in message
    cause = failed.value.__cause__
    assert type(cause) is type(failed.value)
    assert "@user_script" in str(cause)
    # redis-py's own attributes (its status code, where it sets one) kept too
    assert vars(failed.value) == vars(cause)
    # was a hash with no expiry for each start refused PEXPIREAT
    assert all(ttl > 0 for ttl in _left(admin, prefix).values())


def test_regression_spill_put_without_multi_keeps_nothing_it_did_not_return(
    acl_user: Any, admin: Any, prefix: str
) -> None:
    # every command the store used before and uses now, but MULTI
    rules = ["+set", "+append", "+setrange", "+pttl", "+rename", "+expire", "+del", "+exists"]
    rules += ["+getrange", "+strlen", "+echo", "+exec"]
    store = RedisSpillStore(acl_user(rules), prefix=prefix)
    # was SpillError "EXEC without MULTI", the result stored for max_age all the same
    ref = store.put(b"x" * 5000, label="r")
    assert _left(admin, prefix).keys() == {f"{prefix}{ref.ref}".encode()}


# (EXISTS and STRLEN: put reads them only after a RENAME resent; read and get need them.)
@pytest.mark.parametrize("refused", ["set", "setrange", "pttl", "expire", "rename", "echo"])
def test_spill_put_refused_a_command_leaves_no_key_without_expiry(
    acl_user: Any, admin: Any, prefix: str, refused: str
) -> None:
    rules = [
        rule
        for rule in _documented("guards.md", "A Redis user (ACL) needs, on")
        if rule != f"+{refused}"
    ]
    store = RedisSpillStore(acl_user(rules), prefix=prefix)
    with pytest.raises(SpillError, match=refused) as failed:
        store.put([b"a" * 100, b"b" * 100], label="r")
    assert isinstance(failed.value.__cause__, redis.exceptions.NoPermissionError)
    assert _left(admin, prefix) == {}


def test_spill_put_needs_del_only_to_clean_up(acl_user: Any, admin: Any, prefix: str) -> None:
    rules = [
        rule for rule in _documented("guards.md", "A Redis user (ACL) needs, on") if rule != "+del"
    ]
    store = RedisSpillStore(acl_user(rules), prefix=prefix)
    ref = store.put([b"a" * 100, b"b" * 100], label="r")
    assert store.read(ref) == b"a" * 100 + b"b" * 100

    def failing() -> Iterator[bytes]:
        yield b"a" * 100
        raise ValueError("the caller's data failed")

    with pytest.raises(ValueError, match="the caller's data failed") as failed:
        store.put(failing(), label="r")
    assert "deleting the temporary key failed too" in "".join(failed.value.__notes__)
    left = _left(admin, prefix)
    assert len(left) == 2  # the result, and the temporary key DEL could not delete
    assert all(ttl > 0 for ttl in left.values())

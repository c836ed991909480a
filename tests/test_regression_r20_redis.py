"""Regressions found by a tester against a real Redis (round 20).

A client decoding replies with a codec other than UTF-8 resumed keyset cursors at the
wrong key; an operation's key changed by hand gave raw driver errors (or lifted the page
budget) instead of `InvalidCursor`; one large value spilled past the server's
``proto-max-bulk-len`` failed with a broken pipe. Every test runs on the real
redis-server the suite starts.
"""

from __future__ import annotations

import base64
import sqlite3
import uuid
from collections.abc import Callable
from pathlib import Path
from typing import Any

import pytest
import redis

from jsonbudget import Limits, RedisCursorStore, Scope, SQLiteSource, paginate
from jsonbudget._agents.redis_spill import RedisSpillStore
from jsonbudget._cli.main import main
from jsonbudget.errors import InvalidCursor, SpillError
from tests.fixtures_redis import RedisServer

pytestmark = pytest.mark.redis

SCOPE = Scope("alice", {"q": 1})


def _prefix() -> str:
    return f"r20{uuid.uuid4().hex[:12]}:"


def _op_key(prefix: str, token: str) -> str:
    # the operation id is bytes 2..18 of a token (docs/cursors.md, "Tokens")
    return f"{prefix}{{op:{base64.urlsafe_b64decode(token)[2:18].hex()}}}"


# -- 1. a client decoding with another codec than UTF-8 ---------------------------------------


@pytest.mark.parametrize(
    "make",
    [
        lambda url: redis.Redis.from_url(url, decode_responses=True, encoding="latin-1"),
        lambda url: f"{url}?decode_responses=True&encoding=latin-1",
        lambda url: redis.Redis.from_url(url, decode_responses=True, encoding="cp1252"),
    ],
    ids=["client", "url", "cp1252"],
)
def test_regression_non_utf8_decoding_client_is_refused(
    redis_server: RedisServer, make: Callable[[str], Any]
) -> None:
    # Such a client read orjson's UTF-8 positions back as other text that was still JSON:
    # a keyset source served a row twice or skipped one, without an error.
    with pytest.raises(TypeError, match="UTF-8"):
        RedisCursorStore(make(redis_server.url), prefix=_prefix())


@pytest.mark.parametrize(
    "kwargs",
    [{}, {"encoding": "latin-1"}, {"decode_responses": True, "encoding": "utf8"}],
    ids=["bytes", "bytes-latin1-encoder", "utf8-alias"],
)
def test_bytes_and_utf8_clients_serve_each_keyset_row_once(
    redis_server: RedisServer, tmp_path: Path, kwargs: dict[str, Any]
) -> None:
    db = tmp_path / "names.db"
    names = ["Zoa", "Zob", "Zoz", "Zoß", "Zoé", "Zoë"]
    with sqlite3.connect(db) as con:
        con.execute("create table t (name text primary key)")
        con.executemany("insert into t values (?)", [(n,) for n in names])
    con.close()
    store = RedisCursorStore(redis.Redis.from_url(redis_server.url, **kwargs), prefix=_prefix())
    for order, expected in (("name", sorted(names)), ("-name", sorted(names, reverse=True))):
        got: list[str] = []
        cursor = None
        for _ in range(10):
            page = paginate(
                SQLiteSource(str(db), table="t", order_by=[order]),
                scope=SCOPE,
                cursor=cursor,
                store=store,
                limits=Limits(1024, max_items=2),
            )
            got += [row["name"] for row in page.items]
            if page.complete:
                break
            cursor = page.next_cursor
        assert got == expected


# -- 2. an operation's key changed by hand ----------------------------------------------------


def _set(field: str, value: Any) -> Callable[[Any, str], object]:
    return lambda r, key: r.hset(key, field, value)


_CHANGES: dict[str, tuple[int | None, Callable[[Any, str], object]]] = {
    # name: (max_pages, change)
    "a list": (3, lambda r, key: (r.delete(key), r.rpush(key, "x"))),
    "a string": (3, lambda r, key: r.set(key, "garbage")),
    "n not a number, max set": (3, _set("n", "abc")),
    "n not a number, no max": (None, _set("n", "abc")),
    "n with a leading zero": (None, _set("n", "007")),
    "n at the int64 max": (None, _set("n", 2**63 - 1)),
    "n = -100 under max 3": (3, _set("n", -100)),
    "n = 0": (3, _set("n", 0)),
    "n past max": (3, _set("n", 5)),
    "max not a number": (3, _set("max", "abc")),
    "max = 0": (3, _set("max", 0)),
    "exp not a number": (3, _set("exp", "abc")),
    "exp = 1e300": (3, _set("exp", "1e300")),
    "exp removed": (3, lambda r, key: r.hdel(key, "exp")),
    "t0 not a number": (3, _set("t0", "abc")),
    "t0 = 1.5": (3, _set("t0", "1.5")),
    "t0 after exp": (3, lambda r, key: r.hset(key, "t0", int(r.hget(key, "exp")) + 1)),
    "max removed": (3, lambda r, key: r.hdel(key, "max")),
    "pf removed": (3, lambda r, key: r.hdel(key, "pf")),
}


@pytest.mark.parametrize("name", list(_CHANGES))
def test_regression_hand_changed_operation_is_invalid_cursor_and_counts_nothing(
    redis_server: RedisServer, name: str
) -> None:
    max_pages, change = _CHANGES[name]
    prefix = _prefix()
    store = RedisCursorStore(redis_server.url, prefix=prefix)
    plain = redis.Redis.from_url(redis_server.url)
    state = store.start(SCOPE, max_pages=max_pages)
    token = store.mint(state, ["k", 7])
    key = _op_key(prefix, token)
    change(plain, key)
    before = plain.hget(key, "n") if plain.type(key) == b"hash" else None
    with pytest.raises(InvalidCursor, match="could not have written"):
        store.resume(token, SCOPE)
    # refused before the page was counted
    if before is not None:
        assert plain.hget(key, "n") == before


def test_regression_lowered_page_count_cannot_lift_the_budget(redis_server: RedisServer) -> None:
    # n set to -100 was accepted: an operation with max_pages=3 served 30 pages.
    prefix = _prefix()
    store = RedisCursorStore(redis_server.url, prefix=prefix)
    plain = redis.Redis.from_url(redis_server.url)
    limits = Limits(400, max_items=10, max_pages=3)
    first = paginate(list(range(1000)), scope=SCOPE, store=store, limits=limits)
    assert first.next_cursor is not None
    plain.hset(_op_key(prefix, first.next_cursor), "n", -100)
    with pytest.raises(InvalidCursor):
        paginate(
            list(range(1000)), scope=SCOPE, cursor=first.next_cursor, store=store, limits=limits
        )


def test_regression_undecodable_position_on_decoding_client_is_invalid_cursor(
    redis_server: RedisServer,
) -> None:
    prefix = _prefix()
    client = redis.Redis.from_url(redis_server.url, decode_responses=True)
    store = RedisCursorStore(client, prefix=prefix)
    token = store.mint(store.start(SCOPE, max_pages=None), ["k", 7])
    plain = redis.Redis.from_url(redis_server.url)
    key = _op_key(prefix, token)
    tid_field = f"t:{base64.urlsafe_b64decode(token)[18:26].hex()}"
    assert plain.hexists(key, tid_field)
    plain.hset(key, tid_field, b"\xff\xfe")
    with pytest.raises(InvalidCursor, match="not JSON"):
        store.resume(token, SCOPE)
    # the store and its connection still work afterwards
    other = store.mint(store.start(SCOPE, max_pages=None), {"a": "é"})
    assert store.resume(other, SCOPE).position == {"a": "é"}


@pytest.mark.parametrize("decode", [False, True])
@pytest.mark.parametrize(
    "change",
    [
        lambda r, key: r.set(key, "garbage"),
        lambda r, key: [r.hset(key, f, "zz") for f in r.hkeys(key) if f.startswith(b"p:")],
        lambda r, key: [r.hset(key, f, b"\xff" * 16) for f in r.hkeys(key) if f.startswith(b"p:")],
    ],
    ids=["a string", "token id not hex", "token id not text"],
)
def test_regression_mint_on_hand_changed_operation_is_invalid_cursor(
    redis_server: RedisServer, decode: bool, change: Callable[[Any, str], object]
) -> None:
    prefix = _prefix()
    store = RedisCursorStore(
        redis.Redis.from_url(redis_server.url, decode_responses=decode), prefix=prefix
    )
    state = store.start(SCOPE, max_pages=None)
    key = _op_key(prefix, store.mint(state, 1))
    change(redis.Redis.from_url(redis_server.url), key)
    with pytest.raises(InvalidCursor, match="could not have written"):
        store.mint(state, 1)


def test_regression_cli_hand_changed_operation_exits_cursor_refused(
    redis_server: RedisServer, tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    import orjson

    path = tmp_path / "arr.json"
    path.write_bytes(orjson.dumps(list(range(500))))
    prefix = "jsonbudget:"  # the CLI's store uses the default prefix
    args = ["page", str(path), "--store", redis_server.url, "--max-bytes", "1K"]
    assert main(args) == 0
    cursor = orjson.loads(capsys.readouterr().out)["next_cursor"]
    redis.Redis.from_url(redis_server.url).hset(_op_key(prefix, cursor), "t0", "abc")
    assert main([*args, "--cursor", cursor]) == 3
    assert "cursor refused (invalid)" in capsys.readouterr().err


# -- 4. one spilled value larger than proto-max-bulk-len --------------------------------------


def test_regression_one_value_past_proto_max_bulk_len_is_a_clear_spill_error(
    redis_server: RedisServer,
) -> None:
    # One APPEND of the whole value made the server drop the connection: "Broken pipe".
    plain = redis.Redis.from_url(redis_server.url)
    prefix = f"r20spill{uuid.uuid4().hex[:8]}:"
    store = RedisSpillStore(redis_server.url, prefix=prefix)
    admin = redis.Redis.from_url(redis_server.url, decode_responses=True)
    saved = admin.config_get("proto-max-bulk-len")["proto-max-bulk-len"]
    assert saved is not None
    admin.config_set("proto-max-bulk-len", 1024 * 1024)
    try:
        with pytest.raises(SpillError, match="maximum allowed size"):
            store.put(b"x" * 3_000_000, label="big")
        with pytest.raises(SpillError, match="maximum allowed size"):
            store.put(iter([b"y" * 3_000_000]), label="big")
    finally:
        admin.config_set("proto-max-bulk-len", saved)
    assert plain.keys(f"{prefix}*") == []
    ref = store.put(b"z" * 3_000_000, label="big")
    assert store.get(ref.ref).size == 3_000_000

"""`RedisCursorStore`: cursors shared by many processes and machines through Redis.

``redis`` is imported when a store is built, so ``import jsonbudget`` works without it.
"""

from __future__ import annotations

import codecs
import hashlib
import re
import secrets
import threading
import time
from typing import TYPE_CHECKING, Any, Final

from .._extras import not_a_client, require_extra
from ..errors import BudgetExhausted, CursorScopeError, InvalidCursor, LimitError
from .scope import Scope
from .store import (
    DEFAULT_TTL,
    MIN_SECRET_BYTES,
    CursorKey,
    CursorState,
    JSONValue,
    KeyedStore,
    Keyring,
    as_keyring,
    check_max_pages,
    check_scope_arg,
    check_ttl,
    decode_position,
    derived_key,
    encode_position,
    encode_token,
    expired,
    new_operation_id,
    new_token_id,
    parse_token,
    state_op_id,
    token_accepted,
    unknown,
    verify_token,
)

if TYPE_CHECKING:
    from redis.commands.core import Script

__all__ = ["RedisCursorStore"]

DEFAULT_PREFIX: Final = "jsonbudget:"
#: An unknown key id re-reads the shared key at most this often (seconds), so forged
#: tokens cannot turn into a stream of Redis reads.
_KEY_REFRESH_EVERY: Final = 1.0
#: A token id as `_MINT` stores it: 8 bytes in lowercase hex.
_TID_HEX: Final = re.compile(r"[0-9a-f]{16}")
#: The longest key prefix a store takes.
_MAX_PREFIX_CHARS: Final = 256

# Redis TIME keeps every machine on one clock; ms since the epoch fit a Lua double exactly.
_START: Final = """
local t = redis.call('TIME')
local now = tonumber(t[1]) * 1000 + math.floor(tonumber(t[2]) / 1000)
local exp = now + tonumber(ARGV[4])
redis.call('HSET', KEYS[1], 'pf', ARGV[1], 'qf', ARGV[2], 'n', 1,
           't0', string.format('%.0f', now), 'exp', string.format('%.0f', exp), 'max', ARGV[3])
redis.call('PEXPIREAT', KEYS[1], string.format('%.0f', exp))
return {string.format('%.0f', now), string.format('%.0f', exp)}
"""

# Status codes: 0 gone, 1 unknown token, 2 expired, 3 principal, 4 query, 5 budget, 6 served,
# 7 a key the store could not have written (changed by hand).
# A hand-changed key is refused before anything is counted, with the fields read as _START
# and HINCRBY write them: counts with no leading zero, times as digits, all of at most 15
# digits (exact in a Lua double, and HINCRBY can never overflow). A count below 1 would
# lift the page budget; the position is checked as JSON once the page is counted.
_RESUME: Final = """
local kind = redis.call('TYPE', KEYS[1]).ok
if kind == 'none' then return {0} end
if kind ~= 'hash' then return {7} end
local v = redis.call('HMGET', KEYS[1], 'pf', 'qf', 'n', 't0', 'exp', 'max', ARGV[1])
local function num(s, pattern)
  if s and #s <= 15 and string.find(s, pattern) then return tonumber(s) end
  return false
end
local n, t0, exp = num(v[3], '^[1-9]%d*$'), num(v[4], '^%d+$'), num(v[5], '^%d+$')
local max = false
if v[6] ~= '' then max = num(v[6], '^[1-9]%d*$') end
if not (v[1] and v[2] and n and t0 and exp and t0 <= exp) then return {7} end
if v[6] ~= '' and not (max and n <= max) then return {7} end
if not v[7] then return {1} end
local t = redis.call('TIME')
local now = tonumber(t[1]) * 1000 + math.floor(tonumber(t[2]) / 1000)
if now >= exp then return {2} end
if v[1] ~= ARGV[2] then return {3} end
if v[2] ~= ARGV[3] then return {4} end
if max and n >= max then return {5, n, max} end
n = redis.call('HINCRBY', KEYS[1], 'n', 1)
return {6, n, v[4], v[5], v[6], v[7]}
"""
#: `_RESUME`'s status codes that `resume` acts on by name.
_RESUMED_OTHER_PRINCIPAL: Final = 3
_RESUMED_OTHER_QUERY: Final = 4
_RESUMED_SERVED: Final = 6
_RESUMED_NOT_OURS: Final = 7

# Minting the same position twice returns the first token: retries do not grow the hash.
# An empty reply is a key that is not a hash (changed by hand): no token id is empty.
_MINT: Final = """
local kind = redis.call('TYPE', KEYS[1]).ok
if kind == 'none' then return false end
if kind ~= 'hash' then return '' end
local tid = redis.call('HGET', KEYS[1], ARGV[1])
if tid then return tid end
redis.call('HSET', KEYS[1], ARGV[1], ARGV[2], 't:' .. ARGV[2], ARGV[3])
return ARGV[2]
"""


def _text(value: bytes | str) -> str:
    return value.decode("ascii") if isinstance(value, bytes) else value


def _not_ours() -> InvalidCursor:
    return InvalidCursor("the store holds a key for this cursor that it could not have written")


def _check_decoding(client: Any) -> None:
    """Refuse a client that decodes replies with a codec other than UTF-8.

    Positions are stored as orjson's UTF-8 bytes: decoded with another codec (latin-1,
    say) they come back as other text that is still JSON, and a keyset source would
    resume after a key it never served, with no error to show it.
    """
    encoder = client.get_encoder()
    if encoder.decode_responses and codecs.lookup(encoder.encoding).name != "utf-8":
        raise TypeError(
            "the redis client must return bytes or decode replies as UTF-8, not "
            f"{encoder.encoding!r}"
        )


class RedisCursorStore(KeyedStore):
    """Operations kept in Redis under *prefix*, one hash per operation.

    *url_or_client* is a ``redis://``, ``rediss://`` or ``unix://`` URL (another string
    is redis-py's `ValueError`: the right type, a bad value) or a ``redis.Redis`` /
    ``redis.RedisCluster`` client (anything else is a `TypeError`). Redis keeps the
    expiry (``PEXPIREAT``); a Lua script counts each page atomically, so a continuation
    costs two round trips (resume, mint). Keys are ``{prefix}{op:<id>}``: hash-tagged by
    operation id, so the store runs on Redis Cluster.
    Unless *keys* is given, the MAC key lives at ``{prefix}mac-key`` (created with
    ``SET NX``) and every process adopts it; pass *keys* in production.
    """

    __slots__ = (
        "_client",
        "_key_name",
        "_last_refresh",
        "_mint",
        "_resume",
        "_shared_key",
        "_start",
        "prefix",
        "ttl",
    )

    def __init__(
        self,
        url_or_client: Any,
        *,
        ttl: int = DEFAULT_TTL,
        keys: Keyring | bytes | None = None,
        prefix: str = DEFAULT_PREFIX,
    ) -> None:
        require_extra("redis", "redis", "RedisCursorStore")
        import redis  # noqa: PLC0415 - optional dependency, imported on use

        self.ttl = check_ttl(ttl)
        if not isinstance(prefix, str):
            raise TypeError(f"prefix must be a str, not {type(prefix).__name__}")
        if "{" in prefix or "}" in prefix or len(prefix) > _MAX_PREFIX_CHARS:
            # braces in the prefix would become the hash tag and pin every key to one slot
            raise LimitError(
                "prefix", prefix, f"must be at most {_MAX_PREFIX_CHARS} chars without {{ or }}"
            )
        self.prefix = prefix
        if isinstance(url_or_client, str):
            self._client: Any = redis.Redis.from_url(url_or_client)
        elif isinstance(url_or_client, redis.Redis | redis.RedisCluster):
            self._client = url_or_client
        else:
            raise not_a_client(url_or_client, "redis.Redis or redis.RedisCluster")
        client = self._client
        _check_decoding(client)
        # register_script hashes once; each call is one EVALSHA (plus a reload after a restart)
        self._start: Script = client.register_script(_START)
        self._resume: Script = client.register_script(_RESUME)
        self._mint: Script = client.register_script(_MINT)
        self._key_name = f"{prefix}mac-key"
        # Held across a round trip to Redis (`_adopt_shared_key`), so the likeliest of the
        # stores' locks to be held by another thread at a fork (`KeyedStore._after_fork`).
        self._lock = threading.Lock()
        self._last_refresh = 0.0
        keyring = as_keyring(keys)
        self._shared_key = keyring is None
        self._keyring = keyring or Keyring(self._sync_key(None))
        self._track()

    def _op_key(self, op_id: bytes) -> str:
        return f"{self.prefix}{{op:{op_id.hex()}}}"

    def _sync_key(self, mine: CursorKey | None) -> CursorKey:
        """Write our key if Redis holds none (it was emptied), then adopt what it holds.

        One round trip: ``SET NX`` and ``GET`` in one pipeline.
        """
        secret = mine.secret if mine else secrets.token_bytes(MIN_SECRET_BYTES)
        pipe = self._client.pipeline(transaction=False)
        # hex, so clients built with decode_responses=True read it too
        pipe.set(self._key_name, secret.hex(), nx=True)
        pipe.get(self._key_name)
        _, stored = pipe.execute()
        try:
            return derived_key(bytes.fromhex(_text(stored)))
        except (TypeError, ValueError, UnicodeDecodeError):
            raise LimitError("mac-key", "<stored in redis>", "is not a jsonbudget key") from None

    def _adopt_shared_key(self) -> None:
        with self._lock:
            self._keyring = self._keyring.adopt(self._sync_key(self._keyring.current))

    def _refresh_due(self) -> bool:
        """Whether a token no key held here accepts may re-read the shared key: at most
        once a `_KEY_REFRESH_EVERY`, so forged tokens cannot turn into a stream of reads."""
        if not self._shared_key:
            return False
        now = time.monotonic()
        with self._lock:
            if now - self._last_refresh < _KEY_REFRESH_EVERY:
                return False
            self._last_refresh = now
        return True

    def _set_keyring(self, keyring: Keyring) -> None:
        # an assigned keyring is the caller's: stop adopting the key Redis holds
        self._shared_key = False
        self._keyring = keyring

    def start(self, scope: Scope, *, max_pages: int | None) -> CursorState:
        scope = check_scope_arg(scope)
        max_pages = check_max_pages(max_pages)
        if self._shared_key:
            # a new operation signs with the key Redis holds now (it may have been emptied)
            self._adopt_shared_key()
        op_id = new_operation_id()
        t0, exp = self._start(
            keys=[self._op_key(op_id)],
            args=[
                scope.principal_fingerprint,
                scope.query_fingerprint,
                "" if max_pages is None else str(max_pages),
                str(self.ttl * 1000),
            ],
        )
        return CursorState(
            op_id.hex(),
            scope.principal_fingerprint,
            scope.query_fingerprint,
            None,
            1,
            int(t0) / 1000,
            int(exp) / 1000,
            max_pages,
        )

    def resume(self, token: str, scope: Scope) -> CursorState:
        parsed = parse_token(token)
        key = self._keyring.key(parsed.kid, time.time())
        if not token_accepted(parsed, key):
            # A bad MAC re-reads the key as an unknown key id does: a key id is one byte of
            # the secret's hash, so the key a worker made after Redis lost its data has the
            # id of the key held here once in 256 times.
            if self._refresh_due():
                self._adopt_shared_key()
                key = self._keyring.key(parsed.kid, time.time())
            verify_token(parsed, key)
        scope = check_scope_arg(scope)
        args = [f"t:{parsed.tid.hex()}", scope.principal_fingerprint, scope.query_fingerprint]
        try:
            reply = self._resume(keys=[self._op_key(parsed.op_id)], args=args)
        except UnicodeDecodeError:
            # A client that decodes replies as UTF-8 fails on the position alone (the script
            # checked every other field): bytes that none of our writes makes.
            raise InvalidCursor(
                "the store holds a position for this cursor that is not JSON"
            ) from None
        status = int(reply[0])
        if status == _RESUMED_NOT_OURS:
            raise _not_ours()
        if status == _RESUMED_SERVED:
            _, pages, t0, exp, max_pages, data = reply
            return CursorState(
                parsed.op_id.hex(),
                scope.principal_fingerprint,
                scope.query_fingerprint,
                decode_position(data),
                int(pages),
                int(t0) / 1000,
                int(exp) / 1000,
                int(max_pages) if _text(max_pages) else None,
            )
        if status in (0, 2):
            raise expired()
        if status == 1:
            raise unknown()
        if status == _RESUMED_OTHER_PRINCIPAL:
            raise CursorScopeError(
                "the cursor was issued to another principal", mismatch="principal"
            )
        if status == _RESUMED_OTHER_QUERY:
            raise CursorScopeError(
                "the cursor was issued for other query parameters", mismatch="query"
            )
        raise BudgetExhausted(limit=int(reply[2]), used=int(reply[1]))

    def mint(self, state: CursorState, position: JSONValue) -> str:
        op_id = state_op_id(state)
        data = encode_position(position)
        tid = new_token_id()
        try:
            got = self._mint(
                keys=[self._op_key(op_id)],
                args=[f"p:{hashlib.sha256(data).hexdigest()[:32]}", tid.hex(), data],
            )
        except UnicodeDecodeError:
            # a token id changed by hand into bytes a UTF-8 decoding client cannot read
            raise _not_ours() from None
        # None: the operation is gone, so the token resolves to ExpiredCursor
        if got is not None:
            text = got.decode("latin-1") if isinstance(got, bytes) else got
            if _TID_HEX.fullmatch(text) is None:
                raise _not_ours()
            tid = bytes.fromhex(text)
        return encode_token(self._keyring.current, op_id, tid)

    def __repr__(self) -> str:
        return f"RedisCursorStore(prefix={self.prefix!r}, ttl={self.ttl})"

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
from .._redis import answers, guarded, new_nonce, out_of_step
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
    from collections.abc import Sequence

__all__ = ["RedisCursorStore"]

DEFAULT_PREFIX: Final = "jsonbudget:"
#: An unknown key id re-reads the shared key at most this often (seconds), so forged
#: tokens cannot turn into a stream of Redis reads.
_KEY_REFRESH_EVERY: Final = 1.0
#: A token id as `_MINT` stores it: 8 bytes in lowercase hex.
_TID_HEX: Final = re.compile(r"[0-9a-f]{16}")
#: The longest key prefix a store takes.
_MAX_PREFIX_CHARS: Final = 256

# Every script's last argument is a nonce (`_redis.new_nonce`) that its reply starts with:
# a reply without it answers another request (`_redis`), and is never used.
# redis-py resends a command whose reply was lost (a connection reset after Redis ran it:
# its default retries), with the same arguments, so every script is safe to run twice
# for one request.
# Redis keeps what a script wrote before a command in it failed (refused by an ACL,
# renamed), so no script writes before the last command that could fail.

# Redis TIME keeps every machine on one clock; ms since the epoch fit a Lua double exactly.
# The first PEXPIREAT, on a key not written yet (where it does nothing), is there so that
# a user who may not run it fails before HSET writes a hash that would never expire; the
# same command on the same key cannot fail after it. A resend writes the operation again,
# a moment later: no token names it yet, so nothing was counted in between.
_START: Final = """
local t = redis.call('TIME')
local now = tonumber(t[1]) * 1000 + math.floor(tonumber(t[2]) / 1000)
local exp = string.format('%.0f', now + tonumber(ARGV[4]))
redis.call('PEXPIREAT', KEYS[1], exp)
redis.call('HSET', KEYS[1], 'pf', ARGV[1], 'qf', ARGV[2], 'n', 1,
           't0', string.format('%.0f', now), 'exp', exp, 'max', ARGV[3])
redis.call('PEXPIREAT', KEYS[1], exp)
return {ARGV[5], string.format('%.0f', now), exp}
"""

# Status codes: 0 gone, 1 unknown token, 2 expired, 3 principal, 4 query, 5 budget, 6 served,
# 7 a key the store could not have written (changed by hand).
# A hand-changed key is refused before anything is counted, with the fields read as _START
# and this script write them: counts with no leading zero, times as digits, all of at most
# 15 digits (exact in a Lua double, and so is the count plus one). A count below 1 would
# lift the page budget; the position is checked as JSON once the page is counted.
# Each count writes its request's nonce to 'last' in the same HSET: a resend of the request
# last counted is answered as it was, the count unchanged (the page was served once, its
# reply lost). Only the last count is remembered, so a resend that another continuation of
# the operation overtook counts again, as a caller's retry does.
_RESUME: Final = """
local kind = redis.call('TYPE', KEYS[1]).ok
if kind == 'none' then return {ARGV[4], 0} end
if kind ~= 'hash' then return {ARGV[4], 7} end
local v = redis.call('HMGET', KEYS[1], 'pf', 'qf', 'n', 't0', 'exp', 'max', ARGV[1], 'last')
local function num(s, pattern)
  if s and #s <= 15 and string.find(s, pattern) then return tonumber(s) end
  return false
end
local n, t0, exp = num(v[3], '^[1-9]%d*$'), num(v[4], '^%d+$'), num(v[5], '^%d+$')
local max = false
if v[6] ~= '' then max = num(v[6], '^[1-9]%d*$') end
if not (v[1] and v[2] and n and t0 and exp and t0 <= exp) then return {ARGV[4], 7} end
if v[6] ~= '' and not (max and n <= max) then return {ARGV[4], 7} end
if not v[7] then return {ARGV[4], 1} end
if v[8] == ARGV[4] then return {ARGV[4], 6, n, v[4], v[5], v[6], v[7]} end
local t = redis.call('TIME')
local now = tonumber(t[1]) * 1000 + math.floor(tonumber(t[2]) / 1000)
if now >= exp then return {ARGV[4], 2} end
if v[1] ~= ARGV[2] then return {ARGV[4], 3} end
if v[2] ~= ARGV[3] then return {ARGV[4], 4} end
if max and n >= max then return {ARGV[4], 5, n, max} end
n = n + 1
redis.call('HSET', KEYS[1], 'n', string.format('%.0f', n), 'last', ARGV[4])
return {ARGV[4], 6, n, v[4], v[5], v[6], v[7]}
"""
#: `_RESUME`'s status codes that `resume` acts on by name.
_RESUMED_OTHER_PRINCIPAL: Final = 3
_RESUMED_OTHER_QUERY: Final = 4
_RESUMED_SERVED: Final = 6
_RESUMED_NOT_OURS: Final = 7
#: How many items `_RESUME`'s reply holds for each status, nonce included: any other
#: status or length is not a reply of this script.
_RESUME_REPLY_LENGTHS: Final = {0: 2, 1: 2, 2: 2, 3: 2, 4: 2, 5: 4, 6: 7, 7: 2}

# Minting the same position twice returns the first token: retries (a caller's, or
# redis-py's resend of a request whose reply was lost) do not grow the hash.
# An empty token id is a key that is not a hash (changed by hand): no token id is empty.
# false is Redis's nil, a None in the reply's list.
_MINT: Final = """
local kind = redis.call('TYPE', KEYS[1]).ok
if kind == 'none' then return {ARGV[4], false} end
if kind ~= 'hash' then return {ARGV[4], ''} end
local tid = redis.call('HGET', KEYS[1], ARGV[1])
if tid then return {ARGV[4], tid} end
redis.call('HSET', KEYS[1], ARGV[1], ARGV[2], 't:' .. ARGV[2], ARGV[3])
return {ARGV[4], ARGV[2]}
"""


def _text(value: bytes | str) -> str:
    return value.decode("ascii") if isinstance(value, bytes) else value


def _not_ours() -> InvalidCursor:
    return InvalidCursor("the store holds a key for this cursor that it could not have written")


def _reply(reply: object, nonce: str, length: int | None, doing: str) -> list[Any]:
    """*reply* as the list a script gave this request: its nonce first, *length* items
    (any, for None). Anything else answers another request (`_redis`)."""
    if not isinstance(reply, list) or not reply or not answers(reply[0], nonce):
        raise out_of_step(doing)
    if length is not None and len(reply) != length:
        raise out_of_step(doing)
    return reply


class _Script:
    """A Lua script run by ``EVALSHA`` and loaded on ``NOSCRIPT``, as redis-py's `Script`
    does, except that its hash is never what ``SCRIPT LOAD`` answers: redis-py's takes
    that reply as the hash for every later call, so one out of step (`_redis`) made it
    run another script, or none, from then on.

    A command failing inside the script is Redis's error naming only the script's hash
    and line (``@user_script``): it is raised again, as the same class, naming the
    commands the script runs (*commands*), with Redis's error as its cause.
    """

    __slots__ = ("_client", "_commands", "_failed", "_name", "_no_script", "_sha", "_text")

    def __init__(
        self,
        client: Any,
        text: str,
        *,
        name: str,
        commands: str,
        errors: tuple[type[Exception], type[Exception]],
    ) -> None:
        self._client = client
        self._text = text
        self._name = name
        self._commands = commands
        self._no_script, self._failed = errors
        self._sha = hashlib.sha1(text.encode(), usedforsecurity=False).hexdigest()

    def __call__(self, keys: Sequence[str], args: Sequence[str | bytes]) -> Any:
        try:
            return self._run(keys, args)
        except self._failed as exc:
            if "@user_script" not in str(exc):
                raise
            # Redis's classes take the message alone; the class is what callers catch
            # (OutOfMemoryError, ReadOnlyError...), so it is kept, and so are the
            # attributes redis-py set on it (its status code, read by its telemetry).
            named = type(exc)(
                f"Redis failed a command of RedisCursorStore's {self._name} script, which "
                f"runs {self._commands} (the Redis user needs each of them, and none may "
                f"be renamed): {exc}"
            )
            named.__dict__.update(vars(exc))
            raise named from exc

    def _run(self, keys: Sequence[str], args: Sequence[str | bytes]) -> Any:
        client = self._client
        try:
            return client.evalsha(self._sha, len(keys), *keys, *args)
        except self._no_script:
            # a Redis restarted (or flushed its scripts) since this process last loaded it
            loaded = client.script_load(self._text)
            if not answers(loaded, self._sha):
                raise out_of_step("loading a script") from None
            return client.evalsha(self._sha, len(keys), *keys, *args)


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
        # hashed once; each call is one EVALSHA (plus a reload after a restart)
        errors = (redis.exceptions.NoScriptError, redis.exceptions.ResponseError)
        self._start = _Script(
            client, _START, name="start", commands="TIME, PEXPIREAT and HSET", errors=errors
        )
        self._resume = _Script(
            client, _RESUME, name="resume", commands="TYPE, HMGET, TIME and HSET", errors=errors
        )
        self._mint = _Script(
            client, _MINT, name="mint", commands="TYPE, HGET and HSET", errors=errors
        )
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

        One round trip: ``SET NX`` and ``GET`` in one pipeline. Plain commands carry no
        nonce, so their replies are checked for the shape only they give: ``SET NX``'s
        True (written) or None (kept), then a key's hex; a reply out of step fits that
        only if it is another store's key sync, on the same client.
        """
        secret = mine.secret if mine else secrets.token_bytes(MIN_SECRET_BYTES)
        with guarded(self._client):
            pipe = self._client.pipeline(transaction=False)
            # hex, so clients built with decode_responses=True read it too
            pipe.set(self._key_name, secret.hex(), nx=True)
            pipe.get(self._key_name)
            written, stored = pipe.execute()
            if written is not True and written is not None:
                raise out_of_step("reading the shared key")
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
        nonce = new_nonce()
        with guarded(self._client):
            reply = self._start(
                keys=[self._op_key(op_id)],
                args=[
                    scope.principal_fingerprint,
                    scope.query_fingerprint,
                    "" if max_pages is None else str(max_pages),
                    str(self.ttl * 1000),
                    nonce,
                ],
            )
            _, t0, exp = _reply(reply, nonce, 3, "starting an operation")
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
        nonce = new_nonce()
        args = [
            f"t:{parsed.tid.hex()}",
            scope.principal_fingerprint,
            scope.query_fingerprint,
            nonce,
        ]
        try:
            with guarded(self._client):
                reply = _reply(
                    self._resume(keys=[self._op_key(parsed.op_id)], args=args),
                    nonce,
                    None,
                    "resuming a cursor",
                )
                status = reply[1]
                # an int from a Lua number: a bool or text is no status of this script
                if type(status) is not int or _RESUME_REPLY_LENGTHS.get(status) != len(reply):
                    raise out_of_step("resuming a cursor")
        except UnicodeDecodeError:
            # A client that decodes replies as UTF-8 fails on the position alone (the script
            # checked every other field): bytes that none of our writes makes.
            raise InvalidCursor(
                "the store holds a position for this cursor that is not JSON"
            ) from None
        if status == _RESUMED_NOT_OURS:
            raise _not_ours()
        if status == _RESUMED_SERVED:
            _, _, pages, t0, exp, max_pages, data = reply
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
        # 5, the page budget spent: the one status left (checked above to be the script's)
        raise BudgetExhausted(limit=int(reply[3]), used=int(reply[2]))

    def mint(self, state: CursorState, position: JSONValue) -> str:
        op_id = state_op_id(state)
        data = encode_position(position)
        tid = new_token_id()
        nonce = new_nonce()
        try:
            with guarded(self._client):
                reply = self._mint(
                    keys=[self._op_key(op_id)],
                    args=[f"p:{hashlib.sha256(data).hexdigest()[:32]}", tid.hex(), data, nonce],
                )
                got = _reply(reply, nonce, 2, "minting a cursor")[1]
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

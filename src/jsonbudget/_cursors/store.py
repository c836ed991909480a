"""Cursor tokens, their keyring, the store protocol and the in-memory store.

A token names one stored position of one paginated operation; it carries no data::

    base64url( version:1 | kid:1 | operation id:16 | token id:8 | mac:16 )   # 56 chars

The operation id and token id are random (192 bits together); the MAC is keyed BLAKE2b
(RFC 7693 keyed mode, 16-byte digest, personalized for jsonbudget cursors) over the first
26 bytes under the key named by ``kid``: as strong as HMAC-SHA256 here and three times
faster. 42 bytes are exactly 56 base64 characters, so no padding bits exist and one token
has one spelling.
"""

from __future__ import annotations

import binascii
import hashlib
import hmac
import math
import os
import re
import secrets
import threading
import time
import weakref
from collections import OrderedDict
from collections.abc import Callable, Iterable
from dataclasses import dataclass, field
from typing import Any, Final, NamedTuple, NoReturn, Protocol, cast, runtime_checkable

import orjson

from .._frozen import fast_constructor
from .._limits import check_int
from .._shared import dumps
from .._sources.base import JSONValue
from ..errors import (
    BudgetExhausted,
    CursorScopeError,
    EncodeError,
    ExpiredCursor,
    InvalidCursor,
    LimitError,
)
from .scope import Scope

__all__ = [
    "DEFAULT_MAX_PER_PRINCIPAL",
    "DEFAULT_MAX_TOTAL",
    "DEFAULT_TTL",
    "MAX_POSITION_BYTES",
    "MAX_TTL",
    "TOKEN_CHARS",
    "CursorKey",
    "CursorState",
    "CursorStore",
    "JSONValue",
    "Keyring",
    "MemoryCursorStore",
]


#: Seconds from an operation's first page until every token of it is refused.
DEFAULT_TTL: Final = 900
#: A longer expiry is a mistake: a cursor is for one pagination, not for bookmarks.
MAX_TTL: Final = 7 * 24 * 3600
DEFAULT_MAX_PER_PRINCIPAL: Final = 1000
DEFAULT_MAX_TOTAL: Final = 100_000
#: A position is an offset or a few keyset values, never a page of data.
MAX_POSITION_BYTES: Final = 64 * 1024
#: Distinct positions a `MemoryCursorStore` operation keeps (the last minted or resumed,
#: a position minted again counting as new): an older cursor of it raises `ExpiredCursor`.
MAX_POSITIONS_PER_OPERATION: Final = 256
TOKEN_CHARS: Final = 56
_MAX_POSITION_DEPTH: Final = 256
MIN_SECRET_BYTES: Final = 32

_VERSION: Final = 1
_OP_BYTES: Final = 16
_TID_BYTES: Final = 8
_MAC_BYTES: Final = 16
#: BLAKE2b's longest key (64 bytes): a longer secret is hashed down to one.
_MAX_MAC_KEY_BYTES: Final = hashlib.blake2b.MAX_KEY_SIZE
_BODY_BYTES: Final = 2 + _OP_BYTES + _TID_BYTES
_MAC_TAG: Final = b"jsonbudget/cur1"  # BLAKE2b personalization: at most 16 bytes
_TOKEN_RE: Final = re.compile(r"[A-Za-z0-9_-]{56}")
_OP_ID_RE: Final = re.compile(r"[0-9a-f]{32}")
# the integers orjson encodes (and so a position may hold)
_INT_MIN: Final = -(2**63)
_INT_MAX: Final = 2**64 - 1
_TO_URLSAFE: Final = bytes.maketrans(b"+/", b"-_")
_FROM_URLSAFE: Final = bytes.maketrans(b"-_", b"+/")


# -- keys ----------------------------------------------------------------------------------


@dataclass(frozen=True, slots=True, repr=False)
class CursorKey:
    """One MAC key: *kid* (0-255, written in every token), *secret* (at least 32 bytes),
    and for a retired key *accept_until* (epoch seconds after which its tokens are refused).
    """

    kid: int
    secret: bytes
    accept_until: float | None = None
    #: the BLAKE2b key: the secret itself, or its 64-byte digest when longer
    mac_key: bytes = field(init=False, compare=False)
    # keyed and personalized once; each MAC copies it (half the cost of a fresh one)
    _mac_base: hashlib.blake2b = field(init=False, compare=False)
    # the first two bytes of every token signed with this key: version and kid
    _head: bytes = field(init=False, compare=False)

    def __post_init__(self) -> None:
        check_int("kid", self.kid, minimum=0, maximum=255)
        if self.accept_until is not None:
            _check_seconds("accept_until", self.accept_until)
        if not isinstance(self.secret, bytes):
            raise TypeError(f"secret must be bytes, not {type(self.secret).__name__}")
        if len(self.secret) < MIN_SECRET_BYTES:
            # the value is a secret: report its length only
            raise LimitError(
                "secret", f"<{len(self.secret)} bytes>", f"needs at least {MIN_SECRET_BYTES} bytes"
            )
        mac_key = (
            self.secret
            if len(self.secret) <= _MAX_MAC_KEY_BYTES
            else hashlib.blake2b(self.secret).digest()
        )
        object.__setattr__(self, "mac_key", mac_key)
        base = hashlib.blake2b(key=mac_key, digest_size=_MAC_BYTES, person=_MAC_TAG)
        object.__setattr__(self, "_mac_base", base)
        object.__setattr__(self, "_head", bytes((_VERSION, self.kid)))

    def mac(self, body: bytes) -> bytes:
        """The 16-byte MAC of *body* under this key."""
        h = self._mac_base.copy()
        h.update(body)
        return h.digest()

    def __reduce__(self) -> tuple[type[CursorKey], tuple[int, bytes, float | None]]:
        # a hash object cannot be pickled: rebuild the key from its fields instead
        return (CursorKey, (self.kid, self.secret, self.accept_until))

    def __repr__(self) -> str:
        return f"CursorKey(kid={self.kid}, secret=<redacted>, accept_until={self.accept_until})"


class Keyring:
    """The current MAC key plus retired keys still accepted for a window (rotation).

    Immutable: `rotate` returns a new keyring. Tokens are always signed with `current`.
    """

    __slots__ = ("_keys", "current")

    current: CursorKey
    _keys: dict[int, CursorKey]

    def __init__(self, current: CursorKey, previous: Iterable[CursorKey] = ()) -> None:
        if not isinstance(current, CursorKey):
            raise TypeError(f"current must be a CursorKey, not {type(current).__name__}")
        try:
            given = iter(previous)
        except TypeError:
            raise TypeError(
                f"previous must be an iterable of CursorKey, not {type(previous).__name__}"
            ) from None
        keys: dict[int, CursorKey] = {}
        for k in given:
            if not isinstance(k, CursorKey):
                # A bare secret here (the usual slip) has no kid to be looked up by.
                raise TypeError(
                    f"previous must hold CursorKey values, not {type(k).__name__} "
                    "(wrap a secret as CursorKey(kid, secret))"
                )
            keys[k.kid] = k
        keys[current.kid] = current
        object.__setattr__(self, "current", current)
        object.__setattr__(self, "_keys", keys)

    @classmethod
    def generate(cls, *, kid: int = 0) -> Keyring:
        """A keyring with one fresh random 32-byte key."""
        return cls(CursorKey(kid, secrets.token_bytes(MIN_SECRET_BYTES)))

    @classmethod
    def from_secret(cls, secret: bytes, *, kid: int = 0) -> Keyring:
        """A keyring with the one key *secret* (share it between processes)."""
        return cls(CursorKey(kid, secret))

    def rotate(self, secret: bytes, *, window: float = DEFAULT_TTL) -> Keyring:
        """Sign with *secret* from now on; accept the old key for *window* more seconds.

        With ``window >= ttl`` no live operation loses its cursors. Every other key still
        accepted stays as it was (one without ``accept_until``, without end), as `adopt`
        keeps it; a key past its ``accept_until`` is dropped, and so is one whose kid
        the new key takes.
        """
        _check_seconds("window", window, maximum=MAX_TTL)
        now = time.time()
        old = self.current
        new = CursorKey((old.kid + 1) % 256, secret)
        retired = CursorKey(old.kid, old.secret, now + window)
        # None is no deadline (see `key`), not one already past.
        kept = [
            k
            for k in self._keys.values()
            if k.kid not in (old.kid, new.kid) and (k.accept_until is None or k.accept_until > now)
        ]
        return Keyring(new, [*kept, retired])

    def key(self, kid: int, now: float) -> CursorKey | None:
        """The key *kid* if it is still accepted at *now*."""
        k = self._keys.get(kid)
        if k is None or (k.accept_until is not None and now > k.accept_until):
            return None
        return k

    def adopt(self, key: CursorKey) -> Keyring:
        """A keyring that signs with *key* and keeps accepting every key it knew."""
        return Keyring(key, [k for k in self._keys.values() if k.kid != key.kid])

    def __setattr__(self, name: str, value: object) -> None:
        raise AttributeError("Keyring is immutable; use rotate()")

    def __reduce__(self) -> tuple[type[Keyring], tuple[CursorKey, list[CursorKey]]]:
        # Pickled (to a worker process) or copied as its keys, each as `CursorKey` is.
        return (Keyring, (self.current, [k for k in self._keys.values() if k is not self.current]))

    def __repr__(self) -> str:
        return f"Keyring(current_kid={self.current.kid}, kids={sorted(self._keys)})"


def _check_seconds(name: str, value: object, *, maximum: float | None = None) -> None:
    """Refuse *value* unless it is a finite, non-negative number of seconds (at most
    *maximum*): NaN compares false with every time, so a key would never retire."""
    if type(value) not in (int, float):
        raise LimitError(name, value, f"must be a number of seconds, not {type(value).__name__}")
    seconds = cast(float, value)
    if not math.isfinite(seconds) or seconds < 0:
        raise LimitError(name, value, "must be a finite number of seconds, at least 0")
    if maximum is not None and seconds > maximum:
        raise LimitError(name, value, f"must be at most {maximum} seconds")


def as_keyring(keys: Keyring | bytes | None) -> Keyring | None:
    """Normalize a store's ``keys=`` option."""
    if keys is None or isinstance(keys, Keyring):
        return keys
    if isinstance(keys, bytes):
        return Keyring.from_secret(keys)
    raise TypeError(f"keys must be a Keyring or bytes, not {type(keys).__name__}")


class KeyedStore:
    """What every store shares: its `Keyring`, behind the ``keyring`` property, and its
    lock, made anew in a forked child (`_after_fork`)."""

    # Weakly referenceable: the one-call `paginate` caches its pager per store without
    # keeping the store alive (and `_STORES` tracks it for forks the same way).
    __slots__ = ("__weakref__", "_keyring", "_lock")

    _keyring: Keyring
    _lock: threading.Lock

    def _track(self) -> None:
        """Have `_after_fork` run in every child forked from now on; called once the
        store is set up."""
        _STORES.add(self)

    def __copy__(self) -> NoReturn:
        # A shallow copy was an alias that shared the lock, the operations and the
        # connection (closing the copy closed the original); one that copied them would
        # be a second store on the same file or server, which the constructor makes.
        raise TypeError(
            f"a {type(self).__name__} cannot be copied: share this one (a store object made "
            "on the same SQLite path or Redis URL sees the same cursors; a new memory store "
            "holds none of them)"
        )

    def __deepcopy__(self, memo: dict[int, Any]) -> NoReturn:
        self.__copy__()

    def _after_fork(self) -> None:
        """Run in a forked child, alone in it: another thread of the parent may have held
        the lock at the fork, and would never release it here."""
        self._lock = threading.Lock()

    def _after_fork_in_parent(self) -> None:
        """Run in the parent once a child is forked (`MemoryCursorStore`)."""

    @property
    def keyring(self) -> Keyring:
        """The MAC keys; assign a rotated keyring to rotate keys in a running process."""
        return self._keyring

    @keyring.setter
    def keyring(self, keyring: Keyring) -> None:
        if not isinstance(keyring, Keyring):
            raise TypeError(f"keyring must be a Keyring, not {type(keyring).__name__}")
        self._set_keyring(keyring)

    def _set_keyring(self, keyring: Keyring) -> None:
        """Take an assigned keyring; a store that also changes its own state overrides it."""
        self._keyring = keyring


_STORES: weakref.WeakSet[KeyedStore] = weakref.WeakSet()


def _stores_in_child() -> None:
    for store in list(_STORES):
        store._after_fork()


def _stores_in_parent() -> None:
    for store in list(_STORES):
        store._after_fork_in_parent()


if hasattr(os, "register_at_fork"):
    os.register_at_fork(after_in_child=_stores_in_child, after_in_parent=_stores_in_parent)


def derived_key(secret: bytes) -> CursorKey:
    """A key whose id is derived from the secret (for keys a store keeps itself)."""
    return CursorKey(hashlib.sha256(b"jsonbudget/kid\x00" + secret).digest()[0], secret)


# -- tokens --------------------------------------------------------------------------------


def new_operation_id() -> bytes:
    return os.urandom(_OP_BYTES)


def new_token_id() -> bytes:
    return os.urandom(_TID_BYTES)


def encode_token(key: CursorKey, op_id: bytes, tid: bytes) -> str:
    body = key._head + op_id + tid
    h = key._mac_base.copy()  # key.mac(body), inlined: one token per page
    h.update(body)
    raw = binascii.b2a_base64(body + h.digest(), newline=False)
    return raw.translate(_TO_URLSAFE).decode("ascii")


class ParsedToken(NamedTuple):
    """A token split into its fields; not yet authenticated."""

    kid: int
    op_id: bytes
    tid: bytes
    body: bytes
    mac: bytes


def token_bytes(token: object) -> bytes:
    """The 42 bytes of *token*, not yet authenticated; bounded work: the length is checked
    before anything else.
    """
    if not isinstance(token, str):
        raise InvalidCursor(f"a cursor is a string, not {type(token).__name__}")
    if len(token) != TOKEN_CHARS:
        # a 1 MB string stops here, in O(1)
        what = "empty" if not token else ("too long" if len(token) > TOKEN_CHARS else "too short")
        raise InvalidCursor(f"the cursor is not one this server issued ({what})")
    if _TOKEN_RE.fullmatch(token) is None:
        raise InvalidCursor("the cursor is not one this server issued (bad characters)")
    # the pattern above admits only the URL-safe alphabet, so this cannot fail
    raw = binascii.a2b_base64(token.encode("ascii").translate(_FROM_URLSAFE))
    if raw[0] != _VERSION:
        raise InvalidCursor("the cursor is not one this server issued (unknown version)")
    return raw


def parse_token(token: object) -> ParsedToken:
    """Split *token* into its fields; not yet authenticated."""
    raw = token_bytes(token)
    return ParsedToken(
        raw[1],
        raw[2 : 2 + _OP_BYTES],
        raw[2 + _OP_BYTES : _BODY_BYTES],
        raw[:_BODY_BYTES],
        raw[_BODY_BYTES:],
    )


def _check_mac(key: CursorKey | None, body: bytes, mac: bytes) -> None:
    if key is None:
        raise InvalidCursor("the cursor is not one this server issued (unknown key)")
    if not hmac.compare_digest(key.mac(body), mac):
        raise InvalidCursor("the cursor is not one this server issued (bad signature)")


def token_accepted(parsed: ParsedToken, key: CursorKey | None) -> bool:
    """Whether *parsed* carries a valid MAC under *key*: `verify_token` as a test."""
    return key is not None and hmac.compare_digest(key.mac(parsed.body), parsed.mac)


def verify_token(parsed: ParsedToken, key: CursorKey | None) -> None:
    """Raise `InvalidCursor` unless *parsed* carries a valid MAC under *key*."""
    _check_mac(key, parsed.body, parsed.mac)


def authenticate_bytes(token: object, keyring: Keyring, now: float) -> bytes:
    """The 42 bytes of *token* once its MAC checks out under a key accepted at *now*."""
    raw = token_bytes(token)
    _check_mac(keyring.key(raw[1], now), raw[:_BODY_BYTES], raw[_BODY_BYTES:])
    return raw


def authenticate(token: object, keyring: Keyring) -> ParsedToken:
    """Parse and MAC-check *token*; raises `InvalidCursor` before any store lookup."""
    parsed = parse_token(token)
    verify_token(parsed, keyring.key(parsed.kid, time.time()))
    return parsed


# -- state ---------------------------------------------------------------------------------


@dataclass(frozen=True, slots=True)
class CursorState:
    """One paginated operation as a store sees it at one page."""

    operation_id: str
    principal_fingerprint: str
    query_fingerprint: str
    #: opaque to the store: whatever the source gave (offset, keyset values, dict)
    position: JSONValue
    #: pages counted for this operation so far, including the page being served now
    pages_served: int
    #: epoch seconds of the operation's first page
    started_at: float
    #: ``started_at + ttl``: no token of this operation is accepted after it
    expires_at: float
    max_pages: int | None


#: ``CursorState(...)`` in half the time, for the page hot path (positional, in field order).
new_state: Callable[..., CursorState] = fast_constructor(CursorState)


@runtime_checkable
class CursorStore(Protocol):
    """Where operations live. Every implementation behaves the same (one conformance suite)."""

    def start(self, scope: Scope, *, max_pages: int | None) -> CursorState:
        """Begin an operation: ``pages_served == 1``, ``position is None``."""
        ...

    def resume(self, token: str, scope: Scope) -> CursorState:
        """Authenticate *token*, check expiry and scope, and count one more page atomically."""
        ...

    def mint(self, state: CursorState, position: JSONValue) -> str:
        """A continuation token for *state*'s operation at *position*."""
        ...


def check_ttl(ttl: object) -> int:
    return check_int("ttl", ttl, minimum=1, maximum=MAX_TTL)


def check_max_pages(max_pages: object) -> int | None:
    if max_pages is None:
        return None
    return check_int("max_pages", max_pages, minimum=1)


def encode_position(position: JSONValue) -> bytes:
    """The stored form of a position; also the key that makes minting idempotent."""
    if type(position) is int and _INT_MIN <= position <= _INT_MAX:
        return b"%d" % position  # what orjson writes, without its 4 KiB buffer
    try:
        data = dumps(position, orjson.OPT_SORT_KEYS)
    except orjson.JSONEncodeError as exc:
        raise EncodeError(f"cursor position cannot be encoded: {exc}", path=None) from None
    # orjson writes NaN and Infinity as null; only then is a walk needed to tell them apart
    if b"null" in data and has_non_finite(position, 0):
        raise EncodeError("cursor position holds a non-finite number", path=None)
    if len(data) > MAX_POSITION_BYTES:
        raise LimitError(
            "position", f"<{len(data)} bytes>", f"must encode to at most {MAX_POSITION_BYTES} bytes"
        )
    # orjson's bytes keep a 4 KiB buffer each; a store holding thousands must copy them
    return bytes(memoryview(data))


def has_non_finite(value: object, depth: int) -> bool:
    """Whether *value* holds NaN or an infinity, which orjson writes as ``null``."""
    if isinstance(value, float):
        return not math.isfinite(value)
    if depth > _MAX_POSITION_DEPTH:
        return False  # orjson already refused anything this deep
    if isinstance(value, dict):
        return any(has_non_finite(v, depth + 1) for v in value.values())
    if isinstance(value, list | tuple):
        return any(has_non_finite(v, depth + 1) for v in value)
    return False


def decode_position(data: bytes | str) -> JSONValue:
    """A position as a shared store holds it; `InvalidCursor` where its row was changed
    by hand into text that is not JSON (nothing of ours writes that)."""
    try:
        value: JSONValue = orjson.loads(data)
    except orjson.JSONDecodeError:
        raise InvalidCursor("the store holds a position for this cursor that is not JSON") from None
    return value


def check_scope(principal_fp: str, query_fp: str, scope: Scope) -> None:
    """Principal first: another principal learns nothing about the query."""
    if not hmac.compare_digest(principal_fp, scope.principal_fingerprint):
        raise CursorScopeError("the cursor was issued to another principal", mismatch="principal")
    if not hmac.compare_digest(query_fp, scope.query_fingerprint):
        raise CursorScopeError("the cursor was issued for other query parameters", mismatch="query")


def expired() -> ExpiredCursor:
    return ExpiredCursor("the cursor's operation has expired or is no longer held by the store")


def unknown() -> InvalidCursor:
    return InvalidCursor("the cursor is not known to the store")


def state_op_id(state: object) -> bytes:
    """The operation id of a `CursorState` this library made."""
    if not isinstance(state, CursorState):
        raise TypeError(f"state must be a CursorState, not {type(state).__name__}")
    op_id = state.operation_id
    if not isinstance(op_id, str) or _OP_ID_RE.fullmatch(op_id) is None:
        raise EncodeError("state.operation_id is not an operation id from a store", path=None)
    return bytes.fromhex(op_id)


def check_scope_arg(scope: object) -> Scope:
    if not isinstance(scope, Scope):
        raise TypeError(f"scope must be a Scope, not {type(scope).__name__}")
    return scope


# -- memory --------------------------------------------------------------------------------

# Linux's monotonic clock stands still while the machine is suspended: a cursor on it
# would outlive its ttl by every suspend, and report an `expires_at` already past.
_BOOTTIME: Final = getattr(time, "CLOCK_BOOTTIME", None)


def _uptime() -> float:
    """Seconds on the clock `MemoryCursorStore` deadlines are on: one that counts time
    suspended and ignores the wall clock set back or forward (``CLOCK_BOOTTIME``), the
    monotonic clock where the system has none."""
    if _BOOTTIME is None:
        return time.monotonic()
    return time.clock_gettime(_BOOTTIME)


class _Op:
    __slots__ = (
        "deadline",
        "expires",
        "mask",
        "max_pages",
        "minted",
        "op_id",
        "pages",
        "pfp",
        "positions",
        "qfp",
        "shared",
        "started",
        "tids",
    )

    def __init__(
        self, op_id: bytes, scope: Scope, started: float, ttl: int, max_pages: int | None
    ) -> None:
        self.op_id = op_id
        self.pfp = scope.principal_fingerprint
        self.qfp = scope.query_fingerprint
        self.pages = 1
        # What the state reports, in epoch seconds.
        self.started = started
        self.expires = started + ttl
        # When it expires: on this process's `_uptime` clock, as nothing outside it needs
        # it, so that a wall clock set back (or forward) neither lengthens its life nor
        # shortens it.
        self.deadline = _uptime() + ttl
        self.max_pages = max_pages
        # token id -> position: an int or None as itself (immutable, nothing to decode),
        # anything else encoded (a caller may mutate the list or dict it passed)
        # An OrderedDict: move_to_end keeps the entry present throughout, where a dict's
        # pop and re-insert lose it to an exception (a KeyboardInterrupt) in between.
        self.positions: OrderedDict[bytes, bytes | int | None] = OrderedDict()
        # The reverse, keyed by that same stored form: an int key never equals a bytes key.
        # Written apart from positions, so an interrupt can leave an entry whose token id
        # positions no longer holds: positions is what counts (`MemoryCursorStore.mint`).
        self.tids: dict[bytes | int | None, bytes] = {}
        # A token id is the count of positions minted before it, masked: unique, and an
        # id of a position no longer kept (only the newest are) is told from one never
        # minted, and named as such, without keeping any record of it.
        self.mask = int.from_bytes(os.urandom(_TID_BYTES), "big")
        self.minted = 0
        # Copied by a fork (`MemoryCursorStore._after_fork`): every token it did not issue
        # here may have been issued by the other process, so is answered as expired.
        self.shared = False


class MemoryCursorStore(KeyedStore):
    """Operations held in this process: the default store; thread-safe and bounded.

    At most *max_per_principal* live operations per principal and *max_total* in all;
    starting one more evicts the oldest (its cursors then raise `ExpiredCursor`). Each
    keeps the `MAX_POSITIONS_PER_OPERATION` positions last minted or resumed; an older
    cursor of it raises `ExpiredCursor`. Expired operations are swept as new ones start.
    Not shared between processes: a forked child works on its own copy.
    """

    __slots__ = (
        "_by_principal",
        "_max_per_principal",
        "_max_total",
        "_ops",
        "ttl",
    )

    def __init__(
        self,
        *,
        ttl: int = DEFAULT_TTL,
        keys: Keyring | bytes | None = None,
        max_per_principal: int = DEFAULT_MAX_PER_PRINCIPAL,
        max_total: int = DEFAULT_MAX_TOTAL,
    ) -> None:
        self.ttl = check_ttl(ttl)
        self._max_per_principal = check_int("max_per_principal", max_per_principal, minimum=1)
        self._max_total = check_int("max_total", max_total, minimum=1)
        self._keyring = as_keyring(keys) or Keyring.generate()
        self._lock = threading.Lock()
        # Keyed by the hex operation id a state carries, so that mint finds a state's
        # operation with one lookup. Insertion order is start order is expiry order
        # (one ttl per store, deadlines on one clock, `_uptime`). OrderedDicts, as queues:
        # a dict's first entry, after those before it were deleted, is found by walking
        # past their slots until it is resized, and a full store's start took 100 us at
        # 100,000 operations against 10 us at a few hundred.
        self._ops: OrderedDict[str, _Op] = OrderedDict()
        self._by_principal: dict[str, OrderedDict[str, None]] = {}
        self._track()

    def _after_fork(self) -> None:
        super()._after_fork()
        for op in self._ops.values():
            # The parent and every sibling hold a copy of this operation and mint on from
            # the same count: a mask of this process's own keeps its token ids apart from
            # theirs, where the same token would resume at each process's own position.
            op.mask = int.from_bytes(os.urandom(_TID_BYTES), "big")
            op.shared = True

    def _after_fork_in_parent(self) -> None:
        # Not under the lock: the forking thread would wait there for any other thread
        # that holds it. list() takes the values in one step (C code, under the GIL); an
        # operation started since is not in the child.
        for op in list(self._ops.values()):
            op.shared = True

    def __len__(self) -> int:
        """Live (not yet swept) operations."""
        return len(self._ops)

    def _drop(self, hex_id: str) -> None:
        op = self._ops.pop(hex_id)
        mine = self._by_principal[op.pfp]
        del mine[hex_id]
        if not mine:
            del self._by_principal[op.pfp]

    def start(self, scope: Scope, *, max_pages: int | None) -> CursorState:
        scope = check_scope_arg(scope)
        max_pages = check_max_pages(max_pages)
        now = time.time()
        op_id = new_operation_id()
        hex_id = op_id.hex()
        op = _Op(op_id, scope, now, self.ttl, max_pages)
        with self._lock:
            ops = self._ops
            tick = _uptime()
            while ops:
                oldest = next(iter(ops))
                if ops[oldest].deadline > tick:
                    break
                self._drop(oldest)
            mine = self._by_principal.get(op.pfp)
            while mine is not None and len(mine) >= self._max_per_principal:
                self._drop(next(iter(mine)))
                mine = self._by_principal.get(op.pfp)  # its last one dropped drops it
            while len(ops) >= self._max_total:
                self._drop(next(iter(ops)))
            mine = self._by_principal.get(op.pfp)
            if mine is None:
                mine = self._by_principal[op.pfp] = OrderedDict()
            ops[hex_id] = op
            mine[hex_id] = None
        return CursorState(hex_id, op.pfp, op.qfp, None, 1, now, op.expires, max_pages)

    def resume(self, token: str, scope: Scope) -> CursorState:
        now = time.time()
        # the MAC is checked before anything is looked up
        raw = authenticate_bytes(token, self._keyring, now)
        scope = check_scope_arg(scope)
        hex_id = raw[2 : 2 + _OP_BYTES].hex()
        tid = raw[2 + _OP_BYTES : _BODY_BYTES]
        with self._lock:
            op = self._ops.get(hex_id)
            if op is None:
                # the MAC proves we issued it: it was swept, evicted or lost
                raise expired()
            try:
                data = op.positions[tid]
            except KeyError:
                if op.shared or (int.from_bytes(tid, "big") ^ op.mask) < op.minted:
                    # minted, and pushed out by newer ones (or minted by another process)
                    raise expired() from None
                raise unknown() from None
            if _uptime() >= op.deadline:
                raise expired()
            check_scope(op.pfp, op.qfp, scope)
            if op.max_pages is not None and op.pages >= op.max_pages:
                raise BudgetExhausted(limit=op.max_pages, used=op.pages)
            op.pages += 1
            pages = op.pages
            # In use: kept longest (a `ResultReader` reference is resumed by every read).
            op.positions.move_to_end(tid)
        position: JSONValue = orjson.loads(data) if isinstance(data, bytes) else data
        return new_state(
            hex_id, op.pfp, op.qfp, position, pages, op.started, op.expires, op.max_pages
        )

    def mint(self, state: CursorState, position: JSONValue) -> str:
        hex_id = state.operation_id if isinstance(state, CursorState) else None
        if type(hex_id) is not str:
            state_op_id(state)  # raises EncodeError: this is not a state a store made
        data: bytes | int | None
        if position is None or (type(position) is int and _INT_MIN <= position <= _INT_MAX):
            data = position
        else:
            data = encode_position(position)
        tid: bytes | None = None
        with self._lock:
            op = self._ops.get(hex_id)
            if op is not None:
                positions = op.positions
                tid = op.tids.get(data)
                if tid is not None and tid in positions:
                    positions.move_to_end(tid)  # the newest again: kept longest
                else:
                    tid = (op.minted ^ op.mask).to_bytes(_TID_BYTES, "big")
                    op.minted += 1
                    positions[tid] = data
                    op.tids[data] = tid
                    if len(positions) > MAX_POSITIONS_PER_OPERATION:
                        old_tid, old = positions.popitem(last=False)
                        # Only its own entry: one an interrupt left may name a newer token.
                        if op.tids.get(old) == old_tid:
                            del op.tids[old]
        if op is None or tid is None:
            # not live here: once it is known to be an operation id, its token will
            # resolve to ExpiredCursor
            return encode_token(self._keyring.current, state_op_id(state), new_token_id())
        return encode_token(self._keyring.current, op.op_id, tid)

    def __repr__(self) -> str:
        return f"MemoryCursorStore(ttl={self.ttl}, operations={len(self._ops)})"

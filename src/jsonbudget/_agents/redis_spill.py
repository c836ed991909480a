"""`RedisSpillStore`: spilled results shared by every worker process and machine.

The private directory (`SpillStore`) serves one machine; a server with several workers
behind a load balancer needs a reference minted by one worker to be readable by the
next. This store keeps each result as one Redis string under
``<prefix><label>.<sha256>.<ext>`` (the same names `SpillStore` makes), written chunk by
chunk to a temporary key and renamed into place, so a reader never sees a partial
result; each expires after ``max_age`` seconds.
"""

from __future__ import annotations

import contextlib
import hashlib
import io
import os
from collections.abc import Callable, Iterable, Iterator
from pathlib import Path
from typing import Any, BinaryIO

from .._extras import not_a_client, require_extra
from .._limits import check_int
from .._redis import answers, guarded, new_nonce, out_of_step
from ..errors import LimitError, SpillError
from .spill import (
    DEFAULT_MAX_AGE,
    DEFAULT_READ_BYTES,
    SpillRef,
    extension_of,
    put_chunks,
    ref_parts,
    sanitize_label,
    spill_name,
)

__all__ = ["DEFAULT_REDIS_MAX_FILE_BYTES", "RedisSpillStore"]

#: A result's largest size by default (Redis strings hold at most 512 MiB).
DEFAULT_REDIS_MAX_FILE_BYTES = 256 * 1024**2
_REDIS_STRING_MAX = 512 * 1024**2
_BLOCK = 1024 * 1024
#: The longest key prefix a store takes.
_MAX_PREFIX_CHARS = 256
_WRITING = "writing a spilled result"


def _lost() -> SpillError:
    return SpillError(
        "the temporary key was lost while the result was written (the server restarted, or "
        "the key expired or was evicted); nothing was kept"
    )


class RedisSpillStore:
    """Spilled results in Redis, readable by every process that uses the same server.

    *url_or_client* is a ``redis://`` URL or a ``redis.Redis`` client (binary replies:
    ``decode_responses`` off). The interface is `SpillStore`'s (``put``, ``read``,
    ``get``, ``open``, ``max_file_bytes``), so `ResultGate`, `TurnBudget` and
    `ResultReader` take it as their store.
    """

    __slots__ = ("_client", "_errors", "_max_age", "_max_file_bytes", "_prefix")

    def __init__(
        self,
        url_or_client: Any,
        *,
        prefix: str = "jsonbudget:spill:",
        max_age: int = DEFAULT_MAX_AGE,
        max_file_bytes: int = DEFAULT_REDIS_MAX_FILE_BYTES,
    ) -> None:
        require_extra("redis", "redis", "RedisSpillStore")
        import redis  # noqa: PLC0415 - an optional dependency, imported on use

        # The client's failures (server down, out of memory) are the store's SpillError.
        self._errors: type[Exception] = redis.RedisError
        self._max_age = check_int("max_age", max_age, minimum=1)
        self._max_file_bytes = check_int(
            "max_file_bytes", max_file_bytes, minimum=1, maximum=_REDIS_STRING_MAX
        )
        if (
            not isinstance(prefix, str)
            or len(prefix) > _MAX_PREFIX_CHARS
            or "{" in prefix
            or "}" in prefix
        ):
            raise LimitError(
                "prefix",
                str(prefix)[:80],
                f"must be at most {_MAX_PREFIX_CHARS} chars without {{ or }}",
            )
        self._prefix = prefix
        if isinstance(url_or_client, str):
            self._client: Any = redis.Redis.from_url(url_or_client)
        elif isinstance(url_or_client, redis.Redis):
            self._client = url_or_client
        else:
            raise not_a_client(url_or_client, "redis.Redis")
        if self._client.connection_pool.connection_kwargs.get("decode_responses"):
            raise TypeError("the redis client must return bytes (decode_responses=False)")

    @property
    def max_file_bytes(self) -> int:
        return self._max_file_bytes

    def put(
        self,
        data: bytes | bytearray | memoryview | Iterable[bytes | bytearray | memoryview] | BinaryIO,
        *,
        label: str,
        media_type: str = "application/json",
    ) -> SpillRef:
        """Write *data* whole (chunk by chunk, never joined) and return its reference.

        A result past ``max_file_bytes`` raises `SpillError` as it is written; whatever
        goes wrong, the temporary key is deleted (unless Redis cannot be reached to delete
        it: it expires after ``max_age``), and nothing is kept under the result's name
        unless it may have been renamed there (see docs/guards.md).
        """
        # redis-py resends a command whose reply was lost (a connection reset after Redis
        # ran it: its default retries), so every write here is safe to run twice: SETRANGE
        # at the block's offset writes the same bytes again, where APPEND added them
        # twice; EXPIRE then RENAME (which keeps the key's expiry) instead of a MULTI,
        # whose loss or refusal (ACL, rename-command) left redis-py running RENAME and
        # EXPIRE as plain commands; and a RENAME resent after Redis ran it finds no
        # temporary key and the result in place. A command refused part-way leaves no key
        # without an expiry: the temporary key gets one as SET makes it, and RENAME
        # carries it over.
        clean = sanitize_label(label)
        ext = extension_of(media_type)
        tmp = f"{self._prefix}.tmp-{os.urandom(12).hex()}"
        hasher = hashlib.sha256()
        size = 0
        try:
            self._ask(_WRITING, lambda pipe: pipe.set(tmp, b"", ex=self._max_age))
            for chunk in put_chunks(data, self._max_file_bytes):
                hasher.update(chunk)
                # A value past the server's proto-max-bulk-len in one command makes it
                # drop the connection (a broken pipe); in blocks it answers clearly that
                # the string exceeds the maximum allowed size.
                view = memoryview(chunk).cast("B")
                for at in range(0, len(view), _BLOCK):
                    block = bytes(view[at : at + _BLOCK])
                    self._write_block(tmp, size, block)
                    size += len(block)
            name = f"{clean}.{hasher.hexdigest()}.{ext}"
            key = self._prefix + name
            (expiring,) = self._ask(_WRITING, lambda pipe: pipe.expire(tmp, self._max_age))
            if not expiring:
                raise _lost()
            # Whether RENAME ran is unknown when it raises without a reply (an interrupt,
            # the connection lost for good): the result may then stay under its name, and
            # is never deleted here. Its name is its content's hash, so it holds these
            # very bytes, and another put of them may have returned it since.
            (renamed,) = self._ask(
                _WRITING, lambda pipe: pipe.rename(tmp, key), raise_on_error=False
            )
            if isinstance(renamed, Exception):
                if "no such key" not in str(renamed):
                    raise SpillError(f"Redis failed {_WRITING}: {renamed}") from renamed
                # a RENAME that Redis ran before, its reply lost, or the key lost since
                stored, length = self._ask(
                    _WRITING, lambda pipe: (pipe.exists(key), pipe.strlen(key))
                )
                if not stored or length != size:
                    raise _lost()
        except BaseException as exc:
            try:
                self._client.delete(tmp)
            except Exception as cleanup:  # noqa: BLE001 - any client error: noted, not raised
                # The key expires anyway; the error on its way out must not be replaced.
                exc.add_note(f"deleting the temporary key failed too: {cleanup!r}")
            raise
        return SpillRef(name, size, hasher.hexdigest(), media_type, clean, Path(key))

    def _write_block(self, tmp: str, offset: int, block: bytes) -> None:
        """Write *block* at *offset* of the temporary key *tmp*.

        SETRANGE makes a key that is gone (a restart, its expiry, an eviction) anew,
        zero-filled up to *offset* and with no expiry: its PTTL, in the same round trip,
        tells it from ours, which always has one (-1 for none, -2 for no key).
        """
        _, ttl = self._ask(
            _WRITING, lambda pipe: (pipe.setrange(tmp, offset, block), pipe.pttl(tmp))
        )
        if ttl < 0:
            raise _lost()

    def get(self, ref: SpillRef | str) -> SpillRef:
        """The reference of a stored result (size from Redis, hash from its name); *ref*
        is what `put` returned or its ``ref``."""
        name = spill_name(ref)
        key = self._key(name)
        return SpillRef(name, self._size(key), *ref_parts(name), Path(key))

    def read(self, ref: SpillRef | str, offset: int = 0, limit: int = DEFAULT_READ_BYTES) -> bytes:
        """At most *limit* bytes of *ref* (the `SpillRef` `put` returned, or its ``ref``)
        from byte *offset*; ``b""`` at or past the end."""
        check_int("offset", offset, minimum=0)
        check_int("limit", limit, minimum=1)
        key = self._key(ref)
        exists, data = self._ask(
            "reading a spilled result",
            lambda pipe: (pipe.exists(key), pipe.getrange(key, offset, offset + limit - 1)),
        )
        if not exists:
            name = key[len(self._prefix) :]
            raise SpillError(f"no spilled result {name!r} (expired, evicted or never stored)")
        return bytes(data)

    def open(self, ref: SpillRef | str) -> BinaryIO:
        """A binary stream of *ref* (a `SpillRef` or its ``ref``), read from Redis a block
        at a time."""
        key = self._key(ref)
        raw = _RangeReader(self, key, self._size(key))
        return io.BufferedReader(raw, buffer_size=_BLOCK)

    @contextlib.contextmanager
    def _failures(self, doing: str) -> Iterator[None]:
        """The client's errors while *doing*, raised as `SpillError` (chained); whatever
        escapes closes the connections that may hold a reply in flight (`_redis`)."""
        try:
            with guarded(self._client):
                yield
        except self._errors as exc:
            raise SpillError(f"Redis failed {doing}: {exc}") from exc

    def _ask(
        self, doing: str, queue: Callable[[Any], object], *, raise_on_error: bool = True
    ) -> list[Any]:
        """The replies to the commands *queue* puts in a pipeline, in one round trip
        (Redis's error replies among them, not raised, unless *raise_on_error*).

        An ``ECHO`` of a fresh nonce goes first: replies that do not start with it answer
        another request (`_redis`), so another result's bytes are never taken for these.
        """
        nonce = new_nonce()
        with self._failures(doing):
            pipe = self._client.pipeline(transaction=False)
            pipe.echo(nonce)
            queue(pipe)
            replies: list[Any] = pipe.execute(raise_on_error=raise_on_error)
            if isinstance(replies[0], Exception):
                raise replies[0]  # ECHO refused (an ACL): no reply out of step
            if not answers(replies[0], nonce):
                raise out_of_step(doing)
        return replies[1:]

    def _size(self, key: str) -> int:
        exists, size = self._ask(
            "reading a spilled result's size", lambda pipe: (pipe.exists(key), pipe.strlen(key))
        )
        if not exists:
            name = key[len(self._prefix) :]
            raise SpillError(f"no spilled result {name!r} (expired, evicted or never stored)")
        return int(size)

    def _key(self, ref: object) -> str:
        return self._prefix + spill_name(ref)


class _RangeReader(io.RawIOBase):
    """A readable raw stream over one Redis string, by GETRANGE."""

    def __init__(self, store: RedisSpillStore, key: str, size: int) -> None:
        super().__init__()
        self._store = store
        self._key = key
        self._size = size
        self._at = 0

    def readable(self) -> bool:
        return True

    def seekable(self) -> bool:
        return True

    def seek(self, offset: int, whence: int = io.SEEK_SET) -> int:
        bases = {io.SEEK_SET: 0, io.SEEK_CUR: self._at, io.SEEK_END: self._size}
        if whence not in bases:  # SEEK_DATA, SEEK_HOLE: a string has no holes to find
            raise ValueError(f"whence must be SEEK_SET, SEEK_CUR or SEEK_END, not {whence!r}")
        self._at = max(0, bases[whence] + offset)
        return self._at

    def tell(self) -> int:
        return self._at

    def readinto(self, buffer: Any) -> int:
        want = min(len(buffer), self._size - self._at)
        if want <= 0:
            return 0
        key, at = self._key, self._at
        (data,) = self._store._ask(
            "reading a spilled result", lambda pipe: pipe.getrange(key, at, at + want - 1)
        )
        if not data:
            raise SpillError("the spilled result changed or expired while it was read")
        buffer[: len(data)] = data
        self._at += len(data)
        return len(data)

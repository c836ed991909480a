"""What the Redis stores do so that a reply out of step with its request is never used.

redis-py puts a connection back in its pool when an exception (``KeyboardInterrupt``,
``SystemExit``, ``MemoryError``, a gevent or asyncio timeout...) arrives after a command
was sent and before its reply was read (redis/redis-py#1128, #1134, #2499): its pool's
check for unread data misses a reply that has not arrived yet, so the next command on
that connection reads the interrupted one's reply as its own, and leaves its own behind.
Two layers, both needed, used by `RedisCursorStore` and `RedisSpillStore`:

- every reply a store uses carries a fresh nonce of the request it answers (the scripts
  echo it, a pipeline starts with ``ECHO``), so a reply out of step is noticed however
  the connection got so;
- any exception through a store's call to Redis closes the connections that may have a
  reply in flight (`guarded`; not those of a ``BlockingConnectionPool``, which cannot
  close only its idle ones safely), and a reply that is not the request's is a
  ``redis.ConnectionError`` raised in there, so it closes them too.

``redis`` is imported on use, as the stores do, so ``import jsonbudget`` works without it.
"""

from __future__ import annotations

import contextlib
import os
from collections.abc import Iterator
from typing import Any

__all__ = ["answers", "guarded", "new_nonce", "out_of_step"]


def new_nonce() -> str:
    """A value no other request carries: 8 random bytes in hex."""
    return os.urandom(8).hex()


def answers(echoed: object, nonce: str) -> bool:
    """Whether *echoed*, what a reply holds where the request's nonce goes, is *nonce*
    (bytes, or text for a client that decodes replies)."""
    if isinstance(echoed, bytes):
        # latin-1 decodes any bytes: other bytes are another string, never an error
        echoed = echoed.decode("latin-1")
    return isinstance(echoed, str) and echoed == nonce


def out_of_step(doing: str) -> Exception:
    """The error for a reply that does not answer the request made while *doing*.

    Raised inside `guarded`, which closes the connections: the next call opens new ones.
    """
    import redis  # noqa: PLC0415 - an optional dependency, imported on use

    return redis.ConnectionError(
        f"Redis answered {doing} with the reply to another request (a connection out of "
        "step with its replies, as an interrupted call leaves it); its data was not used"
    )


@contextlib.contextmanager
def guarded(client: Any) -> Iterator[None]:
    """Close *client*'s connections that may hold a reply in flight if anything escapes.

    redis-py released the connection of an interrupted call to its pool before the
    exception reaches here, so it is among the idle ones; connections other threads are
    using are left alone. An error that Redis answered in step costs only a reconnect.
    """
    try:
        yield
    except BaseException as exc:
        try:
            _close_idle(client)
        except Exception as closing:  # noqa: BLE001 - any client error: noted, not raised
            # the error on its way out says what went wrong; closing is only hygiene
            exc.add_note(f"closing the Redis client's idle connections failed too: {closing!r}")
        raise


def _close_idle(client: Any) -> None:
    import redis  # noqa: PLC0415 - an optional dependency, imported on use

    if isinstance(client, redis.RedisCluster):
        # each node has its own client and pool; a node never connected to has none
        # (redis-py leaves get_nodes unannotated)
        nodes = client.get_nodes()  # type: ignore[no-untyped-call]
        clients = [node.redis_connection for node in nodes if node.redis_connection is not None]
    else:
        clients = [client]
    for each in clients:
        # a single_connection_client's own connection is never in its pool's idle list
        # (its pipelines still use the pool)
        if each.connection is not None:
            each.connection.disconnect()
        pool = each.connection_pool
        if isinstance(pool, redis.BlockingConnectionPool):
            # Left alone: its disconnect() takes no inuse_connections in redis-py 5, and
            # in 8 it lists the idle connections without its lock, closing ones other
            # threads had just taken. The nonces still refuse a stale reply, and the pool
            # resets a connection whose reply has arrived when it next hands it out.
            continue
        pool.disconnect(inuse_connections=False)

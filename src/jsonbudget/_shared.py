"""What the cursor stores, the page builder and the SQL sources share: a caller's value
written as JSON without orjson calling the caller's tzinfo (`dumps`), and a connection
closed with the last reference to it (`Closing`)."""

from __future__ import annotations

import datetime as _dt
import os
from collections.abc import Callable
from typing import Any, Generic, Protocol, TypeVar

import orjson

from ._encode.values import datetime_json
from .errors import EncodeError

__all__ = ["Closing", "dumps"]

# The tzinfo types orjson reads without calling Python code: the encoder's rule too.
_PLAIN_TZ = (type(None), _dt.timezone)


def dumps(value: Any, option: int = 0) -> bytes:
    """``orjson.dumps(value, option=option)``, but a datetime whose tzinfo is another
    class is written as the encoder writes it: at the offset its ``utcoffset()`` gives,
    read here. orjson calls that method mid-write itself, and one that raises crashes
    the process (orjson 3.11.9); here it is an `EncodeError` naming it. An offset with
    seconds is written whole (`datetime_json`), where orjson would write another instant.

    Raises ``orjson.JSONEncodeError`` for what orjson refuses, as ``orjson.dumps`` does.
    """
    try:
        return orjson.dumps(
            value, default=_datetime_text, option=option | orjson.OPT_PASSTHROUGH_DATETIME
        )
    except orjson.JSONEncodeError as exc:
        cause = exc.__cause__
        if isinstance(cause, EncodeError):
            # raised by `_datetime_text`, chained to what the tzinfo raised
            raise cause from cause.__cause__
        if isinstance(cause, MemoryError):
            raise cause from None  # as itself (orjson wraps what `default` raises)
        raise


def _datetime_text(obj: Any) -> orjson.Fragment:
    """orjson's ``default`` under ``OPT_PASSTHROUGH_DATETIME``: a datetime, date or time
    as orjson writes it, refused where orjson refuses it (a subclass, a time with a
    tzinfo) or where its tzinfo fails."""
    kind = type(obj)
    if kind is _dt.datetime:
        if type(obj.tzinfo) not in _PLAIN_TZ:
            try:
                offset = obj.utcoffset()
            except MemoryError:
                raise  # the interpreter's, not the tzinfo's: as itself, as the encoder does
            except Exception as exc:
                raise EncodeError(
                    f"datetime.utcoffset() raised {type(exc).__name__}", path=None
                ) from exc
            # orjson writes +00:00 for no offset
            obj = obj.replace(tzinfo=_dt.UTC if offset is None else _dt.timezone(offset))
        return orjson.Fragment(datetime_json(obj) or orjson.dumps(obj))
    if kind is _dt.time and obj.tzinfo is not None:
        raise EncodeError("a time with a tzinfo has no JSON form", path=None)
    if kind is _dt.date or kind is _dt.time:
        return orjson.Fragment(orjson.dumps(obj))
    raise TypeError(f"Type is not JSON serializable: {kind.__name__}")


class _Closable(Protocol):
    def close(self) -> None: ...


_C = TypeVar("_C", bound=_Closable)


class Closing(Generic[_C]):
    """Closes the connection a store or source opened itself when the last reference to
    this goes (the owner's, and each reader's still using the connection): a
    `sqlite3.Connection` is in a reference cycle with its own statement cache, so
    dropping it leaves its files open until the cycle collector runs, and psycopg warns
    of a connection deleted open. (When the owner, this and the connection are garbage
    together, in a reference cycle or at interpreter exit, their finalizers run in no set
    order: psycopg's may run first and warn.)"""

    __slots__ = ("__weakref__", "conn", "pid")

    def __init__(self, conn: _C) -> None:
        self.conn, self.pid = conn, os.getpid()

    # getpid is bound here: at interpreter exit this module's globals (`os` among them)
    # may already be None when the last owner is dropped.
    def __del__(self, _getpid: Callable[[], int] = os.getpid) -> None:
        if self.pid == _getpid():  # a forked child never closes its parent's
            self.conn.close()

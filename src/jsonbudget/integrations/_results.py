"""What the adapters hand `TurnBudget` for a tool's return value."""

from __future__ import annotations

import itertools
from collections.abc import AsyncIterable, Iterable, Iterator
from typing import Any

from .._agents.guards import LoopItems, TurnBudget
from .._encode.whole import JsonWriter
from .._limits import MAX_LIMIT

__all__ = ["atool_result", "tool_result"]


def tool_result(value: Any, turn: TurnBudget) -> Any:
    """*value* as the turn admits it: an iterator of values becomes the byte stream of
    its JSON array.

    `TurnBudget` reads every iterator as a stream of byte chunks, and a tool's generator
    of rows is no such stream: it aborted the whole agent run with a TypeError. An
    iterator is a byte stream only when its first item is bytes; any other (an empty one
    too) is the JSON array of its items, as the encoder writes them (the turn's
    ``default`` hook, markers for what JSON cannot hold), made in chunks of about 1 MiB
    as the turn reads them: an endless generator is read no further than a spill file
    may grow, and a spill holds every item.
    """
    if not isinstance(value, Iterator) or hasattr(value, "read"):
        return value
    for first in value:
        return _items(first, value, turn)
    return []


async def atool_result(value: Any, turn: TurnBudget) -> Any:
    """`tool_result` for an adapter on an event loop, for which an async iterable (an
    async generator) that is not also a sync one is read as a sync iterator is.

    Its items can only be awaited: encoded as it was, it became one unencodable marker,
    every item lost, reported as fitting. Its first item is awaited here; the others are
    awaited by the task awaiting `TurnBudget.aadmit` as its thread reads them (a
    `LoopItems`), so they are read as far as a sync iterator's (an endless one to the
    store's max_file_bytes), and no further once that task is cancelled.
    """
    if not isinstance(value, AsyncIterable) or isinstance(value, Iterable):
        return tool_result(value, turn)
    items = aiter(value)
    first = await anext(items, _END)
    if first is _END:
        return []
    return LoopItems(items, lambda rest: _items(first, rest, turn))


def _items(first: Any, rest: Iterator[Any], turn: TurnBudget) -> Iterator[Any]:
    """The iterator whose first item was *first* as the turn reads it: bytes are a byte
    stream; any other items are the chunks of their JSON array."""
    items = itertools.chain((first,), rest)
    if isinstance(first, bytes | bytearray | memoryview):
        return items
    # The store refuses a file past its own max_file_bytes as the chunks arrive.
    return JsonWriter(turn.gate.default, {}, MAX_LIMIT).chunks(items)


_END = object()

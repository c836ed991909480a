"""What the adapters hand `TurnBudget` for a tool's return value."""

from __future__ import annotations

import itertools
from collections.abc import Iterator
from typing import Any

from .._agents.guards import TurnBudget
from .._encode.whole import JsonWriter
from .._limits import MAX_LIMIT

__all__ = ["tool_result"]


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
        items = itertools.chain((first,), value)
        if isinstance(first, bytes | bytearray | memoryview):
            return items
        break
    else:
        return []
    # The store refuses a file past its own max_file_bytes as the chunks arrive.
    return JsonWriter(turn.gate.default, {}, MAX_LIMIT).chunks(items)

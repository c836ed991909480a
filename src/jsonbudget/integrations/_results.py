"""What the adapters hand `TurnBudget` for a tool's return value, and what they keep of
the turns that ended."""

from __future__ import annotations

import itertools
import threading
from collections.abc import AsyncIterable, Callable, Iterable, Iterator
from typing import Any

from .._agents.guards import LoopItems, TurnBudget, TurnReport
from .._encode.whole import JsonWriter
from .._limits import MAX_LIMIT, check_int

__all__ = [
    "DEFAULT_MAX_REPORTS",
    "OnReport",
    "atool_result",
    "check_reports",
    "check_turn",
    "end_turn",
    "tool_result",
]

#: How many ended turns an adapter keeps in its ``reports`` unless told otherwise.
DEFAULT_MAX_REPORTS = 100

#: Called with each ended turn's report, in the order the turns ended.
OnReport = Callable[[TurnReport], object]


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


def check_reports(max_reports: object, on_report: object) -> int:
    """*max_reports*, checked as an adapter's option (an int in ``[0, 2**40]``, else
    `LimitError`), and *on_report*, which must be callable or None (else `TypeError`)."""
    if on_report is not None and not callable(on_report):
        raise TypeError(f"on_report must be callable or None, not {type(on_report).__name__}")
    return check_int("max_reports", max_reports, minimum=0)


def check_turn(turn: object) -> TurnBudget:
    """*turn*, which an adapter's ``turn`` must be: a `TurnBudget` (else `TypeError`)."""
    if not isinstance(turn, TurnBudget):
        raise TypeError(f"turn must be a TurnBudget, not {type(turn).__name__}")
    return turn


def end_turn(
    turn: TurnBudget, reports: list[TurnReport], max_reports: int, on_report: OnReport | None
) -> None:
    """Ends *turn*: where it had results, its report becomes the last of *reports*, which
    keeps the *max_reports* newest, and is then handed to *on_report*.

    Each report holds its results' admitted bytes: an agent serving runs for as long as
    its worker lives kept every one of them (1,000 runs held 1,050 reports, 6.1 MB), so
    only the newest stay, and *on_report* sees every one to ship elsewhere.
    """
    ended = turn.reset()
    if not ended.results:
        return
    with _reports_lock:
        # Appended and trimmed as one step: two turns ending at once in two threads
        # would each trim by the length read before the other's trim, dropping too many.
        reports.append(ended)
        excess = len(reports) - max_reports
        if excess > 0:
            del reports[:excess]
    if on_report is not None:
        on_report(ended)


def _items(first: Any, rest: Iterator[Any], turn: TurnBudget) -> Iterator[Any]:
    """The iterator whose first item was *first* as the turn reads it: bytes are a byte
    stream; any other items are the chunks of their JSON array."""
    items = itertools.chain((first,), rest)
    if isinstance(first, bytes | bytearray | memoryview):
        return items
    # The store refuses a file past its own max_file_bytes as the chunks arrive.
    return JsonWriter(turn.gate.default, {}, MAX_LIMIT).chunks(items)


_END = object()
# LangChain calls a handler from its threads; the other adapters end turns on a loop.
_reports_lock = threading.Lock()

"""Types for annotating code that uses jsonbudget: the mode names and the protocols.

Every option that takes a mode takes one of these `Literal` strings; any other value is
refused with `LimitError` naming the option. The protocols say what jsonbudget calls on
objects you pass in (a source, a cursor store, a token counter, a binary stream).

>>> from jsonbudget.typing import Strategy
>>> from typing import get_args
>>> get_args(Strategy)
('balanced', 'prefix')
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any, Literal, TypeAlias

from ._agents.guards import AdmitReason, ResultKind, ToolOutput
from ._agents.reader import ReadKind
from ._agents.spill import SpillBackend
from ._agents.tokens import TokenCounter
from ._agents.tool_types import ToolDecorator
from ._cli.tune import TuneOversized
from ._cursors.store import CursorStore
from ._encode.encoder import (
    BinaryMode,
    EncodeOptions,
    MarkerStyle,
    OnUnencodable,
    Strategy,
    TruncationKind,
    TruncationUnit,
)
from ._pages.builder import IncompleteReason, OversizedPolicy, SpillTarget
from ._reader import BinarySource
from ._sources.base import AsyncSource, JSONValue, Position, Source, SourceLike

__all__ = [
    "AdmitReason",
    "AsyncSource",
    "BinaryMode",
    "BinarySource",
    "CursorStore",
    "Default",
    "EncodeOptions",
    "IncompleteReason",
    "JSONValue",
    "MarkerStyle",
    "OnAmbiguous",
    "OnUnencodable",
    "OversizedPolicy",
    "Position",
    "ReadKind",
    "ResultKind",
    "Source",
    "SourceLike",
    "SpillBackend",
    "SpillTarget",
    "Strategy",
    "TokenCounter",
    "ToolDecorator",
    "ToolOutput",
    "TruncationKind",
    "TruncationUnit",
    "TuneOversized",
]

#: A ``default`` hook, as orjson takes it: called with a value jsonbudget cannot encode,
#: it returns a value that it can (or raises ``TypeError``).
Default: TypeAlias = Callable[[Any], Any]

#: What `call_with_output_cap`, `acall_with_output_cap` and `OutputCapRetry` do with an
#: `AmbiguousSizeError` (their ``on_ambiguous``): re-raise it, or take it as a cap too large.
OnAmbiguous: TypeAlias = Literal["raise", "shrink_cap"]

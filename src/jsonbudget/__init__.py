"""jsonbudget: JSON that provably fits a byte budget.

Everything public is importable from here; the implementation lives in private modules.
"""

from __future__ import annotations

import inspect as _inspect  # loaded already: dataclasses imports it
import typing as _typing

from ._agents.classify import (
    AmbiguousSizeError,
    OutputCapRetry,
    OutputCapTooLarge,
    PromptTooLong,
    SizeVerdict,
    acall_with_output_cap,
    call_with_output_cap,
    classify_size_error,
    next_output_cap,
)
from ._agents.guards import (
    Admitted,
    GateResult,
    ResultGate,
    TurnBudget,
    TurnReport,
    bounded_tool,
    gate_result,
)
from ._agents.reader import ReadPage, ResultReader, read_result
from ._agents.redis_spill import RedisSpillStore
from ._agents.spill import SpillBackend, SpillCleanup, SpillRef, SpillStore
from ._agents.telemetry import (
    Summarizer,
    SummaryFilter,
    summarize,
    summary_attributes,
    summary_extra,
    summary_processor,
)
from ._agents.tokens import (
    EstimatedTokenCounter,
    TiktokenCounter,
    TokenCounter,
    TokenFitted,
    TokenFitter,
    fit_tokens,
)
from ._cli.tune import BudgetRow, SizeStats, Tuner, TuneReport, tune, write_chart
from ._cursors.redis_store import RedisCursorStore
from ._cursors.scope import DEFAULT_PAGE_SIZE_KEYS, Scope, canonical_query
from ._cursors.sqlite_store import SQLiteCursorStore
from ._cursors.store import CursorKey, CursorState, CursorStore, Keyring, MemoryCursorStore
from ._encode.encoder import Encoded, Encoder, Truncation, bounded_dumps, encode
from ._limits import Limits
from ._pages.builder import (
    MCP_KEYS,
    OversizedItem,
    Page,
    PageBuilder,
    Paginator,
    apaginate,
    paginate,
)
from ._reader import BoundedReader, BoundedText, read_bounded_text
from ._sources.base import (
    AsyncIterableSource,
    AsyncSource,
    Clipped,
    IterableSource,
    SequenceSource,
    Source,
    as_source,
)
from ._sources.files import JsonArrayFileSource, JsonLinesSource
from ._sources.sql import PostgresSource, SQLiteSource
from .errors import (
    BudgetExhausted,
    CursorError,
    CursorScopeError,
    DecodeError,
    EncodeError,
    ExpiredCursor,
    InvalidCursor,
    JsonBudgetError,
    LimitError,
    OversizedItemError,
    SpillError,
    TokenizerUnavailable,
)

__version__ = "0.1.0"


def _show_as_public(names: list[str]) -> None:
    # Public classes and functions live in private modules; reprs, tracebacks and docs
    # should name the module users import them from. Pickles still resolve: every name
    # is an attribute of this module.
    namespace = globals()
    for name in names:
        value = namespace[name]
        if isinstance(value, type):
            _resolve_annotations(value)
        if isinstance(value, type) or callable(value):
            value.__module__ = __name__


def _resolve_annotations(cls: type) -> None:
    # typing.get_type_hints (and pydantic, FastAPI, cattrs, which use it) reads a class's
    # string annotations in the namespace of its __module__: once that is this module,
    # the private module's names (Literal aliases, JSONValue) were not found. So each
    # class's own annotations are resolved here, where its module is still its own.
    own = _inspect.get_annotations(cls)
    if own:
        hints = _typing.get_type_hints(cls, include_extras=True)
        cls.__annotations__ = {key: hints[key] for key in own}
        # A dataclass's fields keep their own copy of each annotation, read by pydantic.
        for field in getattr(cls, "__dataclass_fields__", {}).values():
            if field.name in own:
                field.type = hints[field.name]


__all__ = [
    "DEFAULT_PAGE_SIZE_KEYS",
    "MCP_KEYS",
    "Admitted",
    "AmbiguousSizeError",
    "AsyncIterableSource",
    "AsyncSource",
    "BoundedReader",
    "BoundedText",
    "BudgetExhausted",
    "BudgetRow",
    "Clipped",
    "CursorError",
    "CursorKey",
    "CursorScopeError",
    "CursorState",
    "CursorStore",
    "DecodeError",
    "EncodeError",
    "Encoded",
    "Encoder",
    "EstimatedTokenCounter",
    "ExpiredCursor",
    "GateResult",
    "InvalidCursor",
    "IterableSource",
    "JsonArrayFileSource",
    "JsonBudgetError",
    "JsonLinesSource",
    "Keyring",
    "LimitError",
    "Limits",
    "MemoryCursorStore",
    "OutputCapRetry",
    "OutputCapTooLarge",
    "OversizedItem",
    "OversizedItemError",
    "Page",
    "PageBuilder",
    "Paginator",
    "PostgresSource",
    "PromptTooLong",
    "ReadPage",
    "RedisCursorStore",
    "RedisSpillStore",
    "ResultGate",
    "ResultReader",
    "SQLiteCursorStore",
    "SQLiteSource",
    "Scope",
    "SequenceSource",
    "SizeStats",
    "SizeVerdict",
    "Source",
    "SpillBackend",
    "SpillCleanup",
    "SpillError",
    "SpillRef",
    "SpillStore",
    "Summarizer",
    "SummaryFilter",
    "TiktokenCounter",
    "TokenCounter",
    "TokenFitted",
    "TokenFitter",
    "TokenizerUnavailable",
    "Truncation",
    "TuneReport",
    "Tuner",
    "TurnBudget",
    "TurnReport",
    "acall_with_output_cap",
    "apaginate",
    "as_source",
    "bounded_dumps",
    "bounded_tool",
    "call_with_output_cap",
    "canonical_query",
    "classify_size_error",
    "encode",
    "fit_tokens",
    "gate_result",
    "next_output_cap",
    "paginate",
    "read_bounded_text",
    "read_result",
    "summarize",
    "summary_attributes",
    "summary_extra",
    "summary_processor",
    "tune",
    "write_chart",
]

_show_as_public(__all__)

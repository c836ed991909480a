"""jsonbudget: JSON that provably fits a byte budget.

Everything public is importable from here; the implementation lives in private modules.
"""

from __future__ import annotations

from ._encoder import Encoded, Encoder, Truncation, bounded_dumps, encode
from ._limits import Limits
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
)

__version__ = "0.1.0"

__all__ = [
    "BudgetExhausted",
    "CursorError",
    "CursorScopeError",
    "DecodeError",
    "EncodeError",
    "Encoded",
    "Encoder",
    "ExpiredCursor",
    "InvalidCursor",
    "JsonBudgetError",
    "LimitError",
    "Limits",
    "OversizedItemError",
    "SpillError",
    "Truncation",
    "bounded_dumps",
    "encode",
]

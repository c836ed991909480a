"""jsonbudget's own exceptions, in one tree: those about the data, the limits, cursors,
spills and tokenizers.

::

    JsonBudgetError                      base of jsonbudget's own errors (not all it raises)
    ├── LimitError (ValueError)          a limit or option is invalid; raised before any work
    ├── EncodeError (TypeError)          a value cannot be encoded and unencodable="error"
    ├── DecodeError (ValueError)         input bytes are not valid text in the declared encoding
    ├── OversizedItemError (ValueError)  an item cannot fit an empty page and oversized="error"
    ├── SpillError (OSError)             a spill file cannot be written, found or read
    ├── TokenizerUnavailable (ImportError)  a tokenizer is not installed or not cached offline
    └── CursorError (ValueError)         a cursor is refused; no data is returned
        ├── InvalidCursor                garbled, forged, tampered or unknown (400)
        ├── ExpiredCursor                past the operation's expiry, or its store lost it (410)
        ├── CursorScopeError             another principal (403) or another query (400)
        └── BudgetExhausted              the operation's page budget is spent (429)

Each leaf also inherits the stdlib class that users already catch, so
``except ValueError`` keeps working. Errors carry data (``path``, ``limit``,
``used``) and messages name the JSON path where one applies.

Not everything raised on purpose is a `JsonBudgetError`: programming errors (an
argument of a type the function does not take, a call that contradicts another, a
custom source or store that breaks its protocol) raise the plain `TypeError`,
`ValueError` or `RuntimeError`, as each function documents; the system's errors pass
through; MCP refusals are the MCP SDK's `MCPError` (docs/errors.md lists them).
"""

from __future__ import annotations

import re
from typing import Any, Final, Literal

__all__ = [
    "BudgetExhausted",
    "CursorError",
    "CursorScopeError",
    "DecodeError",
    "EncodeError",
    "ExpiredCursor",
    "InvalidCursor",
    "JsonBudgetError",
    "LimitError",
    "OversizedItemError",
    "SpillError",
    "TokenizerUnavailable",
]


class JsonBudgetError(Exception):
    """Base class of every error jsonbudget raises on purpose."""

    #: RFC 6901 JSON Pointer of the value concerned, where one applies.
    path: str | None = None

    def __reduce__(self) -> tuple[Any, ...]:
        # Rebuilt from its message and attributes, never through __init__, whose
        # keyword-only data `args` does not hold: a process pool's worker could not send
        # a LimitError or a BudgetExhausted back (BrokenProcessPool instead). A value that
        # does not pickle (a store or a generator a LimitError refused) travels as its
        # repr: else the caller would get a TypeError about a lock, not this error.
        args = tuple(_portable(arg) for arg in self.args)
        state = {name: _portable(value) for name, value in self._state().items()}
        return (_restore, (type(self), args, state))

    def __copy__(self) -> Any:
        # A shallow copy shares the values, so every one is kept as it is.
        return _restore(type(self), self.args, self._state())

    def _state(self) -> dict[str, Any]:
        state = dict(self.__dict__)
        # ImportError and OSError keep these in fields of their own, which `args` does
        # not hold (an OSError's file name) or only __init__ sets (ImportError's).
        # Unset ones stay unset: an OSError with a file name of None is shown as one.
        fields = {}
        if isinstance(self, ImportError):
            fields = {"msg": self.msg, "name": self.name, "path": self.path}
        if isinstance(self, OSError):
            fields = {"filename": self.filename, "filename2": self.filename2}
        state.update((k, v) for k, v in fields.items() if v is not None)
        return state


#: Types whose values always pickle, kept without trying (nearly every value an error
#: carries: messages, names, pointers, counts).
_PLAIN: Final = frozenset({type(None), bool, int, float, str, bytes})
#: The most characters of a value's repr a message shows (`_shown`).
_SHOWN_VALUE_CHARS: Final = 200


def _portable(value: object) -> object:
    """*value* where it pickles, else its repr as a message shows it (`_shown`)."""
    if type(value) in _PLAIN:
        return value
    import pickle  # noqa: PLC0415  # only errors that travel need it, not `import jsonbudget`

    try:
        pickle.dumps(value, pickle.HIGHEST_PROTOCOL)
    except Exception:  # noqa: BLE001 - any failure means the same: the value cannot travel
        return _shown(value)
    return value


def _restore(cls: type[JsonBudgetError], args: tuple[Any, ...], state: dict[str, Any]) -> Any:
    error = cls.__new__(cls, *args)
    error.args = args
    for name, value in state.items():
        setattr(error, name, value)  # through the fields' descriptors (ImportError's)
    return error


class LimitError(JsonBudgetError, ValueError):
    """A limit, mode or option is not a usable value; raised before any allocation or I/O.

    ``name`` is the option as the caller spelled it, ``value`` what was passed and
    ``reason`` why it is refused.
    """

    def __init__(self, name: str, value: object, reason: str) -> None:
        self.name = name
        self.value = value
        self.reason = reason
        super().__init__(f"{name}={_shown(value)} is invalid: {reason}")


def _shown(value: object) -> str:
    """*value*'s repr for a message, at most 200 characters (a store, a counter or an
    exception passed where a limit goes may have a long one, or one that raises)."""
    try:
        text = repr(value)
    except Exception:  # noqa: BLE001 - the error being made is about the value, not its repr
        return f"<{type(value).__name__} object>"
    return text if len(text) <= _SHOWN_VALUE_CHARS else text[: _SHOWN_VALUE_CHARS - 1] + "…"


class EncodeError(JsonBudgetError, TypeError):
    """A value cannot be encoded as JSON and the caller asked for an error, not a marker."""

    def __init__(self, message: str, *, path: str | None) -> None:
        self.path = path
        # A message names the value's type, which may hold a line break or an escape
        # sequence (a class made with type()): escaped, it stays one line.
        message = _UNPRINTABLE.sub(_escape, message)
        # None: the value is an argument, not a place in a document.
        super().__init__(message if path is None else f"{message} (at {_pointer(path)})")


def _pointer(path: str) -> str:
    """*path* for a message: as it is, or as a JSON string where it is empty (the root:
    "/" is the member named "") or holds a control character, a line or paragraph
    separator, a quote or a backslash (a key's line break would break the message's
    line, an escape sequence reach a terminal), as the command line shows a pointer; or
    a lone surrogate, which no stream encodes (``print(error)`` would fail).

    A path longer than `POINTER_CHARS` is cut there, always quoted so that the count
    after it cannot be read as part of a key: a 10 MB key made a 10 MB message.
    """
    shown = path[:POINTER_CHARS]
    cut = len(path) - len(shown)
    if path and not cut and _QUOTED.search(path) is None:
        return path
    quoted = '"' + _QUOTED.sub(_escape, shown) + '"'
    return f"{quoted}…[{cut} more chars]" if cut else quoted


def _escape(match: re.Match[str]) -> str:
    char = match.group()
    return _ESCAPES.get(char) or f"\\u{ord(char):04x}"


#: The most characters of a JSON path a message shows (`_pointer`); ``path`` keeps it whole.
POINTER_CHARS: Final = 200
#: What makes a pointer shown as a JSON string: a control character (C0, DEL, C1), the
#: line and paragraph separators (with C0 and C1, all that ``str.splitlines`` and many
#: editors and log viewers end a line at), a lone surrogate, and the quote and the
#: backslash, which a JSON string escapes.
_QUOTED: Final = re.compile(r'[\x00-\x1f\x7f-\x9f\u2028\u2029"\\\ud800-\udfff]')
#: What a message's own text may not hold as it is: `_QUOTED` but the quote and backslash.
_UNPRINTABLE: Final = re.compile(r"[\x00-\x1f\x7f-\x9f\u2028\u2029\ud800-\udfff]")
_ESCAPES: Final = {
    '"': '\\"',
    "\\": "\\\\",
    "\b": "\\b",
    "\f": "\\f",
    "\n": "\\n",
    "\r": "\\r",
    "\t": "\\t",
}


class DecodeError(JsonBudgetError, ValueError):
    """Input bytes are not valid text in the declared encoding.

    ``offset`` is where in the decoded input, or None where the input is no stream (a
    database cell).
    """

    def __init__(self, message: str, *, offset: int | None) -> None:
        self.offset = offset
        super().__init__(message if offset is None else f"{message} (at decoded byte {offset})")


class OversizedItemError(JsonBudgetError, ValueError):
    """An item cannot fit even an empty page and the caller chose ``oversized="error"``.

    Nothing is lost: the cursor does not move past the item.
    """

    def __init__(self, *, index: int, encoded_bytes: int | None, limit: int) -> None:
        self.index = index
        self.encoded_bytes = encoded_bytes
        self.limit = limit
        self.path = f"/items/{index}"
        size = "more than the budget" if encoded_bytes is None else f"{encoded_bytes} bytes"
        super().__init__(
            f"item {index} encodes to {size}, which cannot fit a page of {limit} bytes"
        )


class SpillError(JsonBudgetError, OSError):
    """A spill file cannot be written, found or read."""


class TokenizerUnavailable(JsonBudgetError, ImportError):
    """A tokenizer cannot be loaded here: not installed, or its data not cached offline.

    ``path`` is ImportError's (a file's path, as ``path=`` gave it), not a JSON Pointer.
    """

    # JsonBudgetError's plain `path = None` comes first in the MRO and hid ImportError's
    # field: `path=` read back None and was lost in a pickle.
    path = ImportError.path


class CursorError(JsonBudgetError, ValueError):
    """A cursor was refused. No data is returned with it.

    Messages name the failure class only; they never echo a principal or a query.
    """

    #: A short machine-readable name of the failure class.
    reason: str = "invalid"
    #: The HTTP status an API should answer with.
    http_status: int = 400
    #: The JSON-RPC error code MCP uses for a bad cursor ("Invalid params").
    mcp_code: int = -32602


class InvalidCursor(CursorError):
    """The cursor is garbled, forged, tampered with, or unknown to the store."""

    reason = "invalid"


class ExpiredCursor(CursorError):
    """The operation the cursor belongs to has expired (or its store no longer holds it)."""

    reason = "expired"
    http_status = 410  # Gone, as Kubernetes answers for an expired continue token


class CursorScopeError(CursorError):
    """The cursor was minted for another principal or another query."""

    def __init__(self, message: str, *, mismatch: Literal["principal", "query"]) -> None:
        if type(mismatch) is not str or mismatch not in ("principal", "query"):
            # Its `reason` and status are a closed set that APIs and MCP clients match on.
            raise LimitError("mismatch", mismatch, "must be 'principal' or 'query'")
        self.mismatch: Literal["principal", "query"] = mismatch
        self.http_status = 403 if mismatch == "principal" else 400
        self.reason = f"scope_{mismatch}"
        super().__init__(message)


class BudgetExhausted(CursorError):
    """The operation has used all the pages its budget allows."""

    reason = "budget"
    http_status = 429

    def __init__(self, *, limit: int, used: int) -> None:
        self.limit = limit
        self.used = used
        super().__init__(f"the operation's page budget is spent ({used} of {limit} pages)")

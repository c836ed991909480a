"""Reading JSON without recursion, with nesting bounded while it is parsed.

`load_json` parses one document: orjson when it nests no deeper than ``max_depth`` and
orjson reads it exactly (no integer beyond 64 bits, see `exact`), else, or when orjson
refuses it (lone surrogate escapes...), an iterative parser. `scan_json`
is that parser on its own, with the calling convention of the stdlib's scanner (a value
at an index of a str, and the index where it ends), for sources that need the end.

Containers nested deeper than ``max_depth`` (the root is depth 0) are not built: each is
replaced by the marker string the encoder would write for it, ``…[depth: list of N
items]`` or ``…[depth: object with N keys]``, so a million-deep document costs a byte of
memory per level. The default ``max_depth`` is the deepest any `Limits` allows
(`MAX_DEPTH`), so an encoder never reaches a replaced value: it cuts at its own depth
first and says what stood there from the container's real length.
"""

from __future__ import annotations

import math
import re
import sys
from collections.abc import Callable
from decimal import MAX_EMAX, Context, Decimal, InvalidOperation
from itertools import chain, compress, repeat
from json import JSONDecodeError
from json.decoder import scanstring  # type: ignore[attr-defined]  # C, not in typeshed
from operator import is_
from typing import Any, Final

import orjson

from .._limits import MAX_DEPTH, check_int
from ..errors import DecodeError

__all__ = ["decode_message", "exact", "float_or_decimal", "load_json", "scan_json"]

_TOKEN: Final = re.compile(
    r"[ \t\n\r]*((\[+)|(\]+)|([{}:,])|(\")|"
    r"(-?(?:0|[1-9][0-9]*)(\.[0-9]+)?([eE][-+]?[0-9]+)?)|(true|false|null))"
)
_WS: Final = re.compile(rb"[ \t\n\r]*")
_WS_STR: Final = re.compile(r"[ \t\n\r]*")
#: Digits map to "0", every other byte to " ": a run of 19 zeros is a run of 19 digits,
#: which `bytes.__contains__` finds at C speed. A number that long is where orjson may
#: turn an integer into a float (see `exact`). Digits inside strings match too.
_DIGITS: Final = bytes(ord("0") if ord("0") <= c <= ord("9") else ord(" ") for c in range(256))
_LONG_RUN: Final = b"0" * 19


def exact(raw: bytes, value: Any) -> bool:
    """Whether *value*, orjson's reading of *raw*, is what the JSON says.

    orjson reads an integer literal outside [-2**63, 2**64 - 1] as the nearest float,
    and every float it makes that way is at least 2**63 in magnitude. Compiled, the check
    looks for such a float among the values (about 1.5 ns a value; a float literal that
    large also sends the text to the exact parser). Without the compiled module it looks
    for a run of 19 digits in *raw*, which digits inside strings match too.
    """
    if _rounded is not None:
        return not _rounded(value)
    return _LONG_RUN not in raw.translate(_DIGITS)


#: What a float literal past a Decimal's range reads as, by its sign (`float_or_decimal`).
_PAST_DECIMAL: Final = (Decimal(f"1E+{MAX_EMAX}"), Decimal(f"-1E+{MAX_EMAX}"))
#: Signals a literal no Decimal holds whatever the thread's context traps: one that
#: does not trap InvalidOperation makes ``Decimal()`` return NaN instead.
_EXACT: Final = Context(traps=[InvalidOperation])

_CONSTANT: Final = re.compile(r"NaN|-?Infinity")
_LITERALS: Final = {"true": True, "false": False, "null": None}
_LIST, _OBJ = ord("["), ord("{")

# What the parser expects next.
_VALUE, _VALUE_OR_END, _KEY_OR_END, _KEY, _COLON, _NEXT = range(6)


def load_json(data: bytes | bytearray | memoryview | str, *, max_depth: int = MAX_DEPTH) -> Any:
    """Parse one JSON document in *data*, iteratively, with nesting bounded while parsing.

    Returns the value as `json.loads` would (integers exact whatever their size; an
    integer literal longer than Python's int conversion limit becomes an exact
    `decimal.Decimal`; lone surrogate escapes kept, for the encoder to mark), except that
    containers deeper than *max_depth* are replaced by depth markers (see the module
    docstring). Raises `DecodeError` (a `ValueError`) for invalid UTF-8, invalid JSON,
    NaN or Infinity, and content after the value; `LimitError` for a *max_depth* that is
    not an int in [0, 2**40].
    """
    check_int("max_depth", max_depth, minimum=0)
    raw: bytes | None
    if isinstance(data, str):
        # A str takes orjson's path too, as its UTF-8: the exact parser runs in Python,
        # tens of times slower (an MCP result's text copy is a str of megabytes). One
        # holding a lone surrogate has no UTF-8: the exact parser reads it.
        text: str | None = data
        try:
            raw = data.encode("utf-8")
        except UnicodeEncodeError:
            raw = None
    else:
        text = None
        raw = bytes(data) if not isinstance(data, bytes) else data
    if raw is not None:
        try:
            value = orjson.loads(raw)
        except orjson.JSONDecodeError:
            pass  # refused: the exact parser below says why, or reads what orjson cannot
        else:
            # Fewer brackets than max_depth: nothing in it can nest deeper. Else its
            # levels are walked: only the exact parser puts markers for what does.
            few = raw.count(b"[") + raw.count(b"{") <= max_depth
            if exact(raw, value) and (few or _nests_within(value, max_depth)):
                return value
    if text is None:
        assert raw is not None  # bytes in, so raw is them
        try:
            text = raw.decode("utf-8")
        except UnicodeDecodeError as exc:
            raise DecodeError(
                f"the input is not valid UTF-8 ({exc.reason})", offset=exc.start
            ) from None
    start = _WS_STR.match(text).end()  # type: ignore[union-attr]
    try:
        value, end = scan_json(text, start, max_depth=max_depth)
    except JSONDecodeError as exc:
        raise DecodeError(
            f"invalid JSON: {decode_message(exc)}", offset=_byte_offset(text, exc.pos)
        ) from None
    end = _WS_STR.match(text, end).end()  # type: ignore[union-attr]
    if end != len(text):
        raise DecodeError(
            "invalid JSON: content after the value",
            offset=_byte_offset(text, end),
        )
    return value


def _nests_within(value: Any, max_depth: int) -> bool:
    """Whether *value*, orjson's reading (plain lists, dicts and scalars), holds no
    container deeper than *max_depth*.

    A level at a time, each listed by C iterators (no Python code runs per value, so a
    document of megabytes costs milliseconds), up to the first level past *max_depth*.
    """
    lists: list[Any] = [value] if type(value) is list else []
    dicts: list[Any] = [value] if type(value) is dict else []
    depth = 0
    while lists or dicts:
        if depth > max_depth:
            return False
        below = [*chain.from_iterable(lists), *chain.from_iterable(map(dict.values, dicts))]
        kinds = list(map(type, below))
        present = set(kinds)  # a level of scalars only (the last) is not filtered
        lists = list(compress(below, map(is_, kinds, repeat(list)))) if list in present else []
        dicts = list(compress(below, map(is_, kinds, repeat(dict)))) if dict in present else []
        depth += 1
    return True


def decode_message(exc: JSONDecodeError) -> str:
    """The stdlib scanner's message for *exc* without its dangling "at" (``Invalid control
    character at``, ``Unterminated string starting at``): the line and column it
    introduces are left out, and a `DecodeError` says where in bytes instead."""
    return exc.msg.removesuffix(" at").removesuffix(" starting")


def _byte_offset(text: str, pos: int) -> int:
    return pos if text.isascii() else len(text[:pos].encode("utf-8", "surrogatepass"))


def float_or_decimal(text: str) -> float | Decimal:
    """A JSON float literal's value: past the double range (1e400), the exact Decimal, as
    ijson reads it and the encoder marks it, not an infinity the JSON never said.

    Past a Decimal's range too (an adjusted exponent beyond ``MAX_EMAX``, 10**18 - 1),
    the Decimal of its sign with the largest exponent one holds, which the encoder marks
    the same way: RFC 8259 bounds no exponent, and ``Decimal()`` refuses the literal.
    (Underflow never gets here: such a literal is 0.0 as a float.)
    """
    value = float(text)
    if not math.isinf(value):
        return value
    try:
        return Decimal(text, _EXACT)
    except InvalidOperation:
        return _PAST_DECIMAL[value < 0]


def _number(tok: str, frac: str | None, exp: str | None) -> int | float | Decimal:
    if frac or exp:
        return float_or_decimal(tok)
    limit = sys.get_int_max_str_digits()
    if limit and len(tok.lstrip("-")) > limit:
        # int() refuses literals this long; Decimal keeps every digit, in linear time.
        return Decimal(tok)
    return int(tok)


def _depth_marker(is_list: bool, count: int) -> str:
    if is_list:
        return f"…[depth: list of {count} items]"
    return f"…[depth: object with {count} keys]"


def scan_json(text: str, start: int, *, max_depth: int = MAX_DEPTH) -> tuple[Any, int]:
    """Parse the JSON value at ``text[start]``; return it and the index just after it.

    The iterative twin of the stdlib's scanner: no recursion, containers deeper than
    *max_depth* replaced by depth markers. Raises `json.JSONDecodeError` (with ``pos``)
    for invalid JSON, including input that ends before the value does.
    """
    frames: list[list[Any] | dict[str, Any]] = []  # the open containers being built
    keys: list[str | None] = []  # the pending key of each open object
    skip = bytearray()  # kinds of the open containers past max_depth (not built)
    skipped = 0  # values completed directly inside the outermost skipped container
    want = _VALUE
    i = start
    match = _TOKEN.match
    while True:
        m = match(text, i)
        if m is None:
            at = _WS_STR.match(text, i).end()  # type: ignore[union-attr]
            constant = _CONSTANT.match(text, at)
            if constant is not None and (want in (_VALUE, _VALUE_OR_END)):
                raise JSONDecodeError(f"{constant.group()} is not valid JSON", text, at)
            raise JSONDecodeError(_expected(want), text, at)
        opens, closes, punct, quote, num, literal = m.group(2, 3, 4, 5, 6, 9)
        pos = m.start(1)
        i = m.end()
        value: Any
        if opens is not None or punct == "{":
            if want not in (_VALUE, _VALUE_OR_END):
                raise JSONDecodeError(_expected(want), text, pos)
            is_list = opens is not None
            count = len(opens) if is_list else 1
            # The new containers get depths depth, depth + 1, ...: build those in bounds.
            depth = len(frames) + len(skip)
            build = max(0, min(count, max_depth + 1 - depth))
            for _ in range(build):
                frames.append([] if is_list else {})
                keys.append(None)
                if len(frames) > 1:
                    _attach(frames, keys)
            if count > build:
                if not skip:
                    skipped = 0
                skip += (b"[" if is_list else b"{") * (count - build)
            want = _VALUE_OR_END if is_list else _KEY_OR_END
            continue
        if closes is not None or punct == "}":
            is_list = closes is not None
            count = len(closes) if is_list else 1
            if want not in (_NEXT, _VALUE_OR_END if is_list else _KEY_OR_END):
                raise JSONDecodeError(_expected(want), text, pos)
            want = _NEXT
            from_skip = min(count, len(skip))
            if from_skip:
                before = len(skip)
                if skip[-from_skip:].count(_LIST if is_list else _OBJ) != from_skip:
                    raise JSONDecodeError("mismatched closing bracket", text, pos)
                del skip[-from_skip:]
                if before >= 2 and len(skip) <= 1:  # noqa: PLR2004 - nested, then outermost
                    skipped += 1  # a child of the outermost skipped container closed
                if skip:
                    continue
                # The outermost skipped container closed: its marker is the value.
                marker = _depth_marker(is_list, skipped)
                count -= from_skip
                if not frames:
                    return marker, i - count
                _put(frames, keys, marker)
            for k in range(count):
                if not frames:
                    raise JSONDecodeError("unmatched closing bracket", text, pos + k)
                top = frames.pop()
                keys.pop()
                if isinstance(top, list) != is_list:
                    raise JSONDecodeError("mismatched closing bracket", text, pos + k)
                if not frames:
                    return top, i - (count - k - 1)
            continue
        if punct == ",":
            if want != _NEXT:
                raise JSONDecodeError(_expected(want), text, pos)
            in_list = skip[-1] == _LIST if skip else isinstance(frames[-1], list)
            want = _VALUE if in_list else _KEY
            continue
        if punct == ":":
            if want != _COLON:
                raise JSONDecodeError(_expected(want), text, pos)
            want = _VALUE
            continue
        # A scalar: a string (or an object key), a number or a literal.
        if quote is not None:
            value, i = scanstring(text, i, True)
            if want in (_KEY, _KEY_OR_END):
                if not skip:
                    keys[-1] = value
                want = _COLON
                continue
        elif num is not None:
            value = _number(num, m.group(7), m.group(8))
        else:
            value = _LITERALS[literal]
        if want not in (_VALUE, _VALUE_OR_END):
            raise JSONDecodeError(_expected(want), text, pos)
        want = _NEXT
        if skip:
            if len(skip) == 1:
                skipped += 1
        elif frames:
            _put(frames, keys, value)
        else:
            return value, i


def _attach(frames: list[list[Any] | dict[str, Any]], keys: list[str | None]) -> None:
    """Put the newest frame into its parent (it is filled in place afterwards)."""
    child = frames[-1]
    parent = frames[-2]
    if isinstance(parent, list):
        parent.append(child)
    else:
        key = keys[-2]
        assert key is not None
        parent[key] = child
        keys[-2] = None


def _put(frames: list[list[Any] | dict[str, Any]], keys: list[str | None], value: Any) -> None:
    top = frames[-1]
    if isinstance(top, list):
        top.append(value)
    else:
        key = keys[-1]
        assert key is not None
        top[key] = value
        keys[-1] = None


def _expected(want: int) -> str:
    return {
        _VALUE: "Expecting value",
        _VALUE_OR_END: "Expecting value or ']'",
        _KEY_OR_END: "Expecting property name enclosed in double quotes or '}'",
        _KEY: "Expecting property name enclosed in double quotes",
        _COLON: "Expecting ':' delimiter",
        _NEXT: "Expecting ',' delimiter or a closing bracket",
    }[want]


_rounded: Callable[[Any], bool] | None
try:
    from ._numbers import rounded as _rounded
except ImportError:  # pragma: no cover - built without a C compiler
    _rounded = None

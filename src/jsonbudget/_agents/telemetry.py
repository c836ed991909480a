"""Safe summaries of encoded documents, pages and spills for logs and traces.

A summary holds counts, sizes, a sha256 and reasons, never content: no item, no string,
no key, no truncation path (a JSON Pointer names the keys of the data), and no cursor
token. Every string copied from the summarized object is copied as a plain `str` and
checked against a strict pattern, so a duck-typed object cannot smuggle content in
through a "reason".
"""

from __future__ import annotations

import gc
import hashlib
import logging
import operator
import re
import types
from collections import deque
from collections.abc import Iterable, Mapping, MutableMapping
from typing import Any, Final, Literal, cast

from ..errors import EncodeError, LimitError
from .spill import REF_RE

__all__ = [
    "SUMMARY_KEY",
    "Summarizer",
    "SummaryFilter",
    "summarize",
    "summary_attributes",
    "summary_extra",
    "summary_processor",
]

#: The ``extra=`` key (and `logging.LogRecord` attribute) summaries travel under.
SUMMARY_KEY: Final = "jsonbudget"

_WORD = re.compile(r"[a-z][a-z0-9_]{0,39}")
_SHA256 = re.compile(r"[0-9a-f]{64}")
_MEDIA_TYPE = re.compile(r"[a-z0-9][a-z0-9.+-]{0,63}/[a-z0-9][a-z0-9.+-]{0,63}")
#: At most this many truncations and oversized entries are tallied; the rest are counted.
_MAX_TALLY: Final = 100_000

Kind = Literal["encoded", "page", "spill", "bytes", "gate", "admitted", "turn"]


def _matched(value: object, pattern: re.Pattern[str]) -> str | None:
    """A plain copy of *value* if it is a string *pattern* matches whole, else None.

    A `str` subclass is copied with ``str.__str__`` first, and the copy is what is checked
    and kept: the object itself would reach a log through its own ``__repr__``/``__str__``,
    which can show anything.
    """
    if not isinstance(value, str):
        return None
    text = str.__str__(value)
    return text if pattern.fullmatch(text) else None


def _word(value: object) -> str | None:
    """A plain copy of *value* if it is a short lowercase identifier (a reason, a kind),
    else None."""
    return _matched(value, _WORD)


def _count(value: object) -> int | None:
    # Exactly an int (so never a subclass whose repr shows something else, nor a bool).
    return value if type(value) is int and value >= 0 else None


def safe_tool(tool: object) -> str | None:
    """*tool* (a tool name, a gate's label) as a summary may show it: only a short
    identifier is; a name could hold anything ("lookup alice@example.com")."""
    return _word(tool)


#: *tool* of `safe_ref` and `safe_spill` when the spill's tool is not known (a gate's).
NO_TOOL: Final = object()


def safe_ref(ref: object, tool: object = NO_TOOL) -> str | None:
    """*ref* (a spill's name) as a summary may show it, else None.

    A store names a spill ``<label>.<sha256>.<ext>``, the label sanitized from the tool's
    name ("lookup Alice.Smith@example.com" makes ``lookup_alice_smith_example_com``): the
    ref is shown only where that label is a short identifier and, where the *tool* it
    came from is known, only where `safe_tool` shows that tool.
    """
    name = _matched(ref, REF_RE)
    if name is None or _word(name.partition(".")[0]) is None:
        return None
    if tool is not NO_TOOL and safe_tool(tool) is None:
        return None
    return name


def safe_spill(spill: object, tool: object = NO_TOOL) -> dict[str, Any]:
    """What a spill reference's ``to_json()`` holds, as a summary may show it: ``ref`` by
    `safe_ref`, ``size`` only if an int, ``sha256`` and ``media_type`` only if they have
    their shapes (else None). The path, which names a home directory, never is."""
    return {
        "ref": safe_ref(getattr(spill, "ref", None), tool),
        "size": _count(getattr(spill, "size", None)),
        "sha256": _matched(getattr(spill, "sha256", None), _SHA256),
        "media_type": _matched(getattr(spill, "media_type", None), _MEDIA_TYPE),
    }


def _tally(entries: object, attribute: str, amount: str) -> tuple[int, dict[str, int], int, int]:
    """Count entries, their kinds, and the known sum and unknown count of *amount*."""
    counts: dict[str, int] = {}
    total = known = unknown = 0
    for entry in entries if isinstance(entries, list | tuple) else ():
        total += 1
        if total > _MAX_TALLY:
            continue
        kind = (
            _word(
                entry.get(attribute)
                if isinstance(entry, Mapping)
                else getattr(entry, attribute, None)
            )
            or "other"
        )
        counts[kind] = counts.get(kind, 0) + 1
        size = _count(
            entry.get(amount) if isinstance(entry, Mapping) else getattr(entry, amount, None)
        )
        if size is None:
            unknown += 1
        else:
            known += size
    return total, dict(sorted(counts.items())), known, unknown


def _digest(data: bytes, enabled: bool) -> dict[str, Any]:
    out: dict[str, Any] = {"bytes": len(data)}
    if enabled:
        out["sha256"] = hashlib.sha256(data).hexdigest()
    return out


def _truncation_fields(truncations: object) -> dict[str, Any]:
    total, kinds, known, unknown = _tally(truncations, "kind", "omitted")
    return {
        "truncations": total,
        "truncation_kinds": kinds,
        "omitted_known": known,
        "omitted_unknown": unknown,
    }


class Summarizer:
    """Builds log- and trace-safe summaries; *sha256* may be turned off to save hashing."""

    __slots__ = ("sha256",)

    def __init__(self, *, sha256: bool = True) -> None:
        if type(sha256) is not bool:
            raise LimitError("sha256", sha256, f"must be a bool, not {type(sha256).__name__}")
        self.sha256 = sha256

    def summarize(self, obj: object) -> dict[str, Any]:
        """A dict of counts, sizes, sha256 and reasons describing *obj*, never its content.

        *obj* is an `Encoded`, a `Page`, a spill reference, a `GateResult`, an `Admitted`
        or a `TurnReport` (all duck-typed), or raw bytes. Anything else raises
        `EncodeError` naming only its type.
        """
        if isinstance(obj, bytes | bytearray | memoryview):
            return {"kind": "bytes", **_digest(bytes(obj), self.sha256)}
        if hasattr(obj, "to_json") and hasattr(obj, "items") and hasattr(obj, "next_cursor"):
            return self._page(obj)
        if hasattr(obj, "used_bytes") and hasattr(obj, "results"):
            return self._turn(obj)
        if hasattr(obj, "admitted_bytes") and hasattr(obj, "reason"):
            return self._admitted(obj)
        if hasattr(obj, "spill") and hasattr(obj, "size") and hasattr(obj, "data"):
            return self._gate(obj)
        data = getattr(obj, "data", None)
        if isinstance(data, bytes) and hasattr(obj, "truncations"):
            return {
                "kind": "encoded",
                **_digest(data, self.sha256),
                "complete": getattr(obj, "complete", None) is True,
                **_truncation_fields(getattr(obj, "truncations", ())),
            }
        if hasattr(obj, "sha256") and hasattr(obj, "size") and hasattr(obj, "ref"):
            return self._spill(obj)
        raise EncodeError(f"cannot summarize a {type(obj).__name__}", path=None)

    def _page(self, page: Any) -> dict[str, Any]:
        data = page.to_json()
        if isinstance(data, str):
            data = data.encode("utf-8")
        items = getattr(page, "items", ())
        # An item's size is known only where it was measured (a spilled one): the others
        # are counted apart, as cuts of an unknown amount are, never summed as 0.
        oversized_total, outcomes, oversized_bytes, unmeasured = _tally(
            getattr(page, "oversized", ()), "outcome", "encoded_bytes"
        )
        out: dict[str, Any] = {
            "kind": "page",
            **_digest(data if isinstance(data, bytes) else b"", self.sha256),
            "items": len(items) if hasattr(items, "__len__") else None,
            "complete": getattr(page, "complete", None) is True,
            # Whether a continuation exists, never the token itself.
            "has_next_cursor": getattr(page, "next_cursor", None) is not None,
            **_truncation_fields(getattr(page, "truncations", ())),
            "oversized": oversized_total,
            "oversized_outcomes": outcomes,
            "oversized_encoded_bytes": oversized_bytes,
            "oversized_unmeasured": unmeasured,
        }
        reason = _word(getattr(page, "incomplete_reason", None))
        if reason is not None:
            out["incomplete_reason"] = reason
        return out

    def _spill(self, spill: Any, tool: object = NO_TOOL) -> dict[str, Any]:
        # The fields the guards' own summary() methods show (`safe_spill`): one rule.
        fields = safe_spill(spill, tool)
        out: dict[str, Any] = {"kind": "spill", "bytes": fields["size"]}
        out["sha256"] = fields["sha256"]
        for name in ("ref", "media_type"):
            if fields[name] is not None:
                out[name] = fields[name]
        return out

    def _gated(self, obj: Any, kind: str, tool: object = NO_TOOL) -> dict[str, Any]:
        data = getattr(obj, "data", b"")
        spill = getattr(obj, "spill", None)
        result_kind = _word(getattr(obj, "kind", None))
        return {
            "kind": kind,
            **_digest(data if isinstance(data, bytes) else b"", self.sha256),
            "result_kind": result_kind if result_kind in ("json", "text") else None,
            "size": _count(getattr(obj, "size", None)),
            "spilled": spill is not None,
            "spill": None if spill is None else self._spill(spill, tool),
            **_truncation_fields(getattr(obj, "truncations", ())),
        }

    def _gate(self, gated: Any) -> dict[str, Any]:
        return self._gated(gated, "gate")

    def _admitted(self, admitted: Any) -> dict[str, Any]:
        tool = getattr(admitted, "tool", None)
        out = self._gated(admitted, "admitted", tool)
        out["tool"] = safe_tool(tool)
        out["admitted_bytes"] = _count(getattr(admitted, "admitted_bytes", None))
        out["reason"] = _word(getattr(admitted, "reason", None))
        out["over_budget"] = getattr(admitted, "over_budget", None) is True
        return out

    def _turn(self, report: Any) -> dict[str, Any]:
        results = getattr(report, "results", ())
        results = results if isinstance(results, tuple | list) else ()
        return {
            "kind": "turn",
            "max_bytes": _count(getattr(report, "max_bytes", None)),
            "used_bytes": _count(getattr(report, "used_bytes", None)),
            "results": len(results),
            "spilled": sum(1 for r in results if getattr(r, "spill", None) is not None),
            "over_budget": getattr(report, "over_budget", None) is True,
        }

    def extra(self, obj: object, *, key: str = SUMMARY_KEY) -> dict[str, dict[str, Any]]:
        """``extra=`` for a `logging` call: ``{key: summary}``."""
        key = _check_name("key", key)  # before the summary, as the docs order the raises
        return {key: self.summarize(obj)}

    def attributes(self, obj: object, *, prefix: str = SUMMARY_KEY + ".") -> dict[str, Any]:
        """Flat, primitive-valued attributes for a trace span (OpenTelemetry style)."""
        prefix = _check_name("prefix", prefix)  # before the summary, as for `extra`
        flat: dict[str, Any] = {}
        _flatten(self.summarize(obj), prefix, flat)
        return flat


def _check_name(option: str, value: object) -> str:
    """*value*, which names what a summary is kept under: a `str` (else `LimitError`).

    Formatted unchecked, a prefix of None or bytes made every attribute's name start with
    ``None`` or ``b'...'``."""
    if not isinstance(value, str):
        raise LimitError(option, value, f"must be a str, not {type(value).__name__}")
    return value


def _flatten(summary: Mapping[str, Any], prefix: str, flat: dict[str, Any]) -> None:
    """Add *summary*'s values to *flat* under dotted names, at every level leaving out
    `None` (OpenTelemetry drops a `None` attribute with a warning): a nested summary
    (a gate's spill) has `None` for a size or sha256 that was not valid."""
    for name, value in summary.items():
        if isinstance(value, dict):
            _flatten(value, f"{prefix}{name}.", flat)
        elif value is not None:
            flat[f"{prefix}{name}"] = value


class SummaryFilter(logging.Filter):
    """Replaces jsonbudget objects in a log record by their summaries.

    It replaces the value passed as ``extra={key: obj}`` (records then carry
    ``record.<key>`` as a safe dict) and any jsonbudget object among the message's
    arguments (``logger.info("page %s", page)``), so no formatter or handler ever sees
    the content. Records without either pass unchanged. A value under *key* that cannot
    be summarized is replaced by ``{"kind": "unknown", "type": ...}``.

    Attach it to the **handler** (``handler.addFilter(SummaryFilter())``, or the
    ``logging.config`` recipe in the docs): a logger's own filters do not run for
    records that its child loggers pass up, a handler's do.
    """

    def __init__(self, *, key: str = SUMMARY_KEY, sha256: bool = True) -> None:
        super().__init__()
        self.key = _check_name("key", key)
        self.summarizer = Summarizer(sha256=sha256)

    def filter(self, record: logging.LogRecord) -> bool:
        value = record.__dict__.get(self.key)
        if value is not None and not _is_summary(value):
            try:
                summary = self.summarizer.summarize(value)
            except EncodeError:
                # Logging must not fail, and an unknown object must not reach the formatter.
                summary = {"kind": "unknown", "type": type(value).__name__}
            # Its own reads raised (a property, a mapping): logging must not.
            except Exception as exc:  # noqa: BLE001 - named in the summary, not re-raised
                summary = {"kind": "unknown", "type": type(value).__name__,
                           "error": type(exc).__name__}  # fmt: skip
            setattr(record, self.key, summary)
        record.msg = _safe(self.summarizer, record.msg)
        args = record.args
        if isinstance(args, tuple):
            safe = tuple(_safe(self.summarizer, a) for a in args)
            if any(map(operator.is_not, safe, args)):
                record.args = safe
        elif args is not None:
            # One mapping argument is the args themselves (logging's "%(name)s" form); a
            # record made by hand or by `logging.makeLogRecord` (a queue's or a socket's
            # receiver) may hold any one object or a list, which `%` formats as one.
            safe_args = _safe(self.summarizer, args)
            if safe_args is not args:
                record.args = cast(Any, safe_args)
        return True


def _is_ours(value: object) -> bool:
    """Whether *value* is a jsonbudget object (the public classes live in ``jsonbudget``)."""
    module = getattr(type(value), "__module__", "")
    return isinstance(module, str) and (module == "jsonbudget" or module.startswith("jsonbudget."))


#: How deep and how far `_safe` looks inside lists, tuples, sets and dicts for jsonbudget
#: objects: nesting levels, and elements of one argument or event value in all (the
#: objects reached inside any other value count against the same total).
_MAX_NEST: Final = 8
_MAX_SCAN: Final = 10_000
#: Values that refer to nothing a formatter would show.
_ATOMS: Final = (str, bytes, bytearray, int, float, complex, type(None))
#: Objects whose repr names them but shows nothing they refer to: a class, a module, a
#: function, a code object, a running frame (locals), a generator or a closure's cell.
_OPAQUE: Final = (
    type,
    types.ModuleType,
    types.FunctionType,
    types.BuiltinFunctionType,
    types.CodeType,
    types.FrameType,
    types.TracebackType,
    types.GeneratorType,
    types.CoroutineType,
    types.AsyncGeneratorType,
    types.CellType,
)
_NOT_WALKED: Final = _ATOMS + _OPAQUE


class _Unchecked(Exception):
    """A value too deep or too large to check whole for jsonbudget objects."""


def _safe(summarizer: Summarizer, value: object) -> object:
    """*value* with every jsonbudget object in it, nested ones too, replaced by its summary.

    A value holding none is returned as is (not copied). One past the bounds, which could
    hide a page anywhere, is replaced whole by ``{"kind": "unchecked", "type": ...}``.
    """
    try:
        return _scrubbed(summarizer, value, 0, [_MAX_SCAN])
    except _Unchecked:
        return {"kind": "unchecked", "type": type(value).__name__}
    # Reading it raised: logging must not, nor show the value unchecked.
    except Exception as exc:  # noqa: BLE001 - named in the summary, not re-raised
        return {"kind": "unchecked", "type": type(value).__name__, "error": type(exc).__name__}


def _scrubbed(summarizer: Summarizer, value: object, depth: int, left: list[int]) -> object:
    if _is_ours(value):
        try:
            return summarizer.summarize(value)
        except EncodeError:
            return {"kind": "unknown", "type": type(value).__name__}
    entries: Iterable[tuple[object, object]]
    is_map = isinstance(value, Mapping)
    if isinstance(value, Mapping):
        entries = value.items()
    elif isinstance(value, list | tuple | set | frozenset):
        entries = ((None, v) for v in value)
    elif isinstance(value, _NOT_WALKED) or _holds_none_of_ours(value, left):
        return value
    else:
        # A deque, a dict view, an object's attributes: their reprs show what they hold,
        # and they cannot be rebuilt with summaries in its place.
        return {"kind": "unchecked", "type": type(value).__name__}
    if depth >= _MAX_NEST:
        raise _Unchecked
    out: list[tuple[object, object]] = []
    changed = False
    for key, item in entries:
        left[0] -= 1
        if left[0] < 0:
            raise _Unchecked
        if is_map and _scrubbed(summarizer, key, depth + 1, left) is not key:
            raise _Unchecked  # a summary is a dict, which cannot stand as a key
        clean = _scrubbed(summarizer, item, depth + 1, left)
        changed = changed or clean is not item
        out.append((key, clean))
    if not changed:
        return value
    if is_map:
        return dict(out)
    # A set becomes a list: the summaries that replace its members are unhashable.
    return tuple(v for _, v in out) if isinstance(value, tuple) else [v for _, v in out]


def _holds_none_of_ours(value: object, left: list[int]) -> bool:
    """Whether no jsonbudget object is reachable from *value* (any container or object:
    what the garbage collector sees it refer to, read without running its code).

    Each object reached counts against *left*; past it, `_Unchecked` (a page could be
    in what was not reached).
    """
    seen = {id(value)}
    pending = deque([value])
    while pending:
        for ref in gc.get_referents(pending.popleft()):
            if id(ref) in seen or isinstance(ref, _NOT_WALKED):
                continue
            if _is_ours(ref):
                return False
            left[0] -= 1
            if left[0] < 0:
                raise _Unchecked
            seen.add(id(ref))
            pending.append(ref)
    return True


def summary_processor(
    _logger: Any, _method: str, event_dict: MutableMapping[str, Any]
) -> dict[str, Any]:
    """A structlog processor: every jsonbudget object in the event becomes its summary.

    Put it before the renderer (``structlog.configure(processors=[summary_processor,
    ..., structlog.processors.JSONRenderer()])``); ``log.info("page", page=page)`` then
    logs the page's counts and sizes, never its items.
    """
    return {k: _safe(_DEFAULT_SUMMARIZER, v) for k, v in event_dict.items()}


_SUMMARY_KINDS: Final = frozenset(
    {"encoded", "page", "spill", "bytes", "gate", "admitted", "turn", "unknown"}
)


def _is_summary(value: object) -> bool:
    """Whether *value* is a summary already: its kind, and nothing but counts and words
    (a dict that only says its kind may hide a page under another key)."""
    return (
        isinstance(value, dict)
        and value.get("kind") in _SUMMARY_KINDS
        and all(
            _plain(v) or (type(v) is dict and all(map(_plain, v.values()))) for v in value.values()
        )
    )


def _plain(value: object) -> bool:
    return value is None or type(value) in (str, int, bool, float)


_DEFAULT_SUMMARIZER: Final = Summarizer()


def summarize(obj: object) -> dict[str, Any]:
    """One-call form of `Summarizer.summarize`."""
    return _DEFAULT_SUMMARIZER.summarize(obj)


def summary_extra(obj: object, *, key: str = SUMMARY_KEY) -> dict[str, dict[str, Any]]:
    """One-call form of `Summarizer.extra`: ``logger.info("...", extra=summary_extra(page))``."""
    return Summarizer().extra(obj, key=key)


def summary_attributes(obj: object, *, prefix: str = SUMMARY_KEY + ".") -> dict[str, Any]:
    """One-call form of `Summarizer.attributes`."""
    return Summarizer().attributes(obj, prefix=prefix)

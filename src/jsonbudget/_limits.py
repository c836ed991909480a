"""`Limits`: the budget, as a validated, frozen value."""

from __future__ import annotations

from dataclasses import dataclass
from typing import TypedDict, Unpack

from .errors import LimitError

__all__ = [
    "DEFAULT_MAX_DEPTH",
    "MAX_LIMIT",
    "MIN_BYTES",
    "MIN_FIELD_BYTES",
    "STRUCTURED_MIN_FIELD_BYTES",
    "Limits",
    "check_int",
    "check_mode",
]

#: Anything above 2**40 (1 TiB, a trillion items) is a mistake, not a budget.
MAX_LIMIT = 2**40
#: The largest marker that can stand in for a whole value (a cut list or object with a
#: 20-digit count, either marker style) fits in 64 bytes, so no budget below it can
#: always hold a valid, honest output.
MIN_BYTES = 64
#: A shortened string keeps at least its marker: ``"…[truncated: N more chars]"``, or
#: ``"…[truncated]"`` (16 bytes) when the count does not fit.
MIN_FIELD_BYTES = 32
#: The structured string marker, ``{"$truncated":{"kind":"string","omitted":null,"prefix":""}}``,
#: is 59 bytes; with a count it is longer. Below this, ``markers="structured"`` is refused.
STRUCTURED_MIN_FIELD_BYTES = 64
DEFAULT_MAX_DEPTH = 64
#: The encoder recurses a few frames per level; deeper limits would meet Python's
#: default recursion limit of 1000 (orjson itself stops at 254).
MAX_DEPTH = 128


def check_mode(name: str, value: object, allowed: tuple[str, ...]) -> None:
    """`LimitError` unless *value* is one of *allowed*, the values of a mode option."""
    if value not in allowed:
        *most, last = (repr(mode) for mode in allowed)
        raise LimitError(name, value, f"must be {', '.join(most)} or {last}" if most else last)


def check_int(name: str, value: object, *, minimum: int, maximum: int = MAX_LIMIT) -> int:
    """Return *value* if it is an int in ``[minimum, maximum]``, else raise `LimitError`."""
    # bool is an int subclass; True as a byte budget is always a mistake.
    if type(value) is not int:
        raise LimitError(name, value, f"must be an int, not {type(value).__name__}")
    if value < minimum:
        raise LimitError(name, value, f"must be at least {minimum}")
    if value > maximum:
        raise LimitError(name, value, f"must be at most {maximum}")
    return value


class LimitChanges(TypedDict, total=False):
    """The keywords of `Limits.replace`: a type checker then refuses a misspelt limit and
    None for the two that always have a value."""

    max_bytes: int
    max_items: int | None
    max_keys: int | None
    max_field_bytes: int | None
    max_depth: int
    max_pages: int | None


@dataclass(frozen=True, slots=True)
class Limits:
    """A budget for one document or one page.

    ``max_bytes`` bounds the final encoded bytes, markers and envelope included.
    ``max_items`` bounds the items of each list and of each page, ``max_keys`` the
    members of each object, ``max_field_bytes`` the encoded size of each string,
    ``max_depth`` the nesting, and ``max_pages`` the pages one paginated operation may
    serve. ``None`` means no limit beyond ``max_bytes``.
    """

    max_bytes: int
    max_items: int | None = None
    max_keys: int | None = None
    max_field_bytes: int | None = None
    max_depth: int = DEFAULT_MAX_DEPTH
    max_pages: int | None = None

    def __init__(
        self,
        max_bytes: int,
        *,
        max_items: int | None = None,
        max_keys: int | None = None,
        max_field_bytes: int | None = None,
        max_depth: int = DEFAULT_MAX_DEPTH,
        max_pages: int | None = None,
    ) -> None:
        set_ = object.__setattr__
        set_(self, "max_bytes", check_int("max_bytes", max_bytes, minimum=MIN_BYTES))
        if max_items is not None:
            check_int("max_items", max_items, minimum=1)
        if max_keys is not None:
            check_int("max_keys", max_keys, minimum=1)
        if max_field_bytes is not None:
            check_int("max_field_bytes", max_field_bytes, minimum=MIN_FIELD_BYTES)
        if max_pages is not None:
            check_int("max_pages", max_pages, minimum=1)
        set_(self, "max_items", max_items)
        set_(self, "max_keys", max_keys)
        set_(self, "max_field_bytes", max_field_bytes)
        set_(self, "max_depth", check_int("max_depth", max_depth, minimum=1, maximum=MAX_DEPTH))
        set_(self, "max_pages", max_pages)

    def replace(self, **changes: Unpack[LimitChanges]) -> Limits:
        """Return a copy with *changes* applied (and validated)."""
        # Limits() checks every value, as when one is made: the keywords' types are for
        # type checkers only.
        fields: dict[str, object] = {
            "max_items": self.max_items,
            "max_keys": self.max_keys,
            "max_field_bytes": self.max_field_bytes,
            "max_depth": self.max_depth,
            "max_pages": self.max_pages,
        }
        max_bytes = changes.pop("max_bytes", self.max_bytes)
        unknown = set(changes) - set(fields)
        if unknown:
            raise TypeError(f"unknown limit(s): {', '.join(sorted(unknown))}")
        fields.update(changes)
        return Limits(max_bytes, **fields)  # type: ignore[arg-type]

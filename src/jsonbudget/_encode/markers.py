"""The in-band markers, in both styles. Every text marker starts with U+2026 then ``[``."""

from __future__ import annotations

from collections.abc import Container
from typing import Literal

import orjson

__all__ = ["MarkerStyle", "Markers"]

MarkerStyle = Literal["text", "structured"]

_dumps = orjson.dumps


class Markers:
    """Marker bytes for one style."""

    __slots__ = ("structured",)

    def __init__(self, style: MarkerStyle) -> None:
        self.structured = style == "structured"

    def string(self, omitted: int | None, unit: str = "chars") -> tuple[bytes, bytes]:
        """Bytes before and after a kept prefix's encoded content.

        With *omitted* None the marker says ``…[truncated]``: used when the count itself
        does not fit the room, never to hide a known count in the side-band report.
        *unit* is ``"chars"``, or ``"bytes"`` for a value counted in bytes.
        """
        if self.structured:
            count = b"null" if omitted is None else b"%d" % omitted
            # No count, no unit: the shortest marker (59 bytes) must fit the 64-byte
            # minimum, which with the unit it would not (74).
            unit_field = b"" if unit == "chars" or omitted is None else b'"unit":"bytes",'
            head = b'{"$truncated":{"kind":"string","omitted":%s,%s"prefix":"'
            return head % (count, unit_field), b'"}}'
        if omitted is None:
            return b'"', '…[truncated]"'.encode()
        return b'"', b'\xe2\x80\xa6[truncated: %d more %s]"' % (omitted, unit.encode())

    def items(self, omitted: int | None) -> bytes:
        if self.structured:
            count = b"null" if omitted is None else b"%d" % omitted
            return b'{"$truncated":{"kind":"items","omitted":%s}}' % count
        if omitted is None:
            return '"…[omitted: more items]"'.encode()
        return '"…[omitted: %d more items]"'.encode() % omitted

    def key(self, taken: Container[str]) -> str:
        """The key of the member that stands for left-out keys, not one in *taken*.

        *taken* is a finite set the caller built (the shown keys), never a user mapping:
        a mapping may claim to hold every key. The search ends after ``len(taken) + 1``
        candidates at most, as each candidate is distinct.
        """
        base = "$truncated" if self.structured else "…"
        key, i = base, 0
        while key in taken:
            i += 1
            key = f"{base}{i}"
        return key

    def keys(self, omitted: int | None, key: str) -> bytes:
        """A whole ``key:value`` member that stands for left-out keys."""
        name = _dumps(key)
        if self.structured:
            count = b"null" if omitted is None else b"%d" % omitted
            return name + b':{"kind":"keys","omitted":%s}' % count
        if omitted is None:
            return name + b':"[omitted: more keys]"'
        return name + b':"[omitted: %d more keys]"' % omitted

    def value(self, kind: str, what: str) -> bytes:
        """A marker that replaces a whole value (depth, unencodable, oversized)."""
        if self.structured:
            body = {"kind": kind, "what": what} if what else {"kind": kind}
            return _dumps({"$truncated": body})
        return _dumps(f"…[{kind}: {what}]" if what else f"…[{kind}]")

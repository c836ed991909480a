"""The budgeted encoder (work in progress: the lead is writing it now)."""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any, Literal

from ._limits import Limits

TruncationKind = Literal["string", "items", "keys", "depth", "item", "unencodable"]
TruncationUnit = Literal["chars", "bytes", "items", "keys"]


@dataclass(frozen=True, slots=True)
class Truncation:
    """One cut: where (an RFC 6901 pointer into the output), what, and how much was left out."""

    path: str
    kind: TruncationKind
    omitted: int | None
    unit: TruncationUnit


@dataclass(frozen=True, slots=True)
class Encoded:
    """The bounded JSON bytes plus the side-band report of every cut."""

    data: bytes
    complete: bool
    truncations: tuple[Truncation, ...]


def encode(obj: Any, limits: Limits | None = None, **options: Any) -> Encoded:
    raise NotImplementedError


def bounded_dumps(obj: Any, **options: Any) -> bytes:
    raise NotImplementedError


class Encoder:
    pass

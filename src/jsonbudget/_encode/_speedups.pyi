from collections.abc import Callable, Sequence
from typing import Any, TypeVar

_F = TypeVar("_F", bound=Callable[..., Any])
_R = TypeVar("_R")
_Caps = tuple[int, int, int, int, tuple[type, ...] | None]

def bound(
    obj: object,
    cap: int,
    depth: int,
    max_depth: int,
    max_items: int,
    max_keys: int,
    max_field: int,
    scalars: tuple[type, ...] | None,
    spine: list[tuple[object, int, int]] | None = None,
    /,
) -> int: ...
def bound_items(
    items: list[object] | tuple[object, ...],
    cap: int,
    depth: int,
    max_depth: int,
    max_items: int,
    max_keys: int,
    max_field: int,
    scalars: tuple[type, ...] | None,
    /,
) -> int: ...
def clean_dumps(
    obj: object,
    cap: int,
    depth: int,
    caps: _Caps,
    spine: list[tuple[object, int, int]] | None = None,
    compact: bool = False,
    /,
) -> bytes | int: ...
def compact(data: bytes, /) -> bytes: ...
def clean_result(
    obj: object,
    cap: int,
    caps: _Caps,
    types: frozenset[type],
    make: Callable[[bytes, str, int, None, None], _R],
    kind: str,
    /,
) -> _R | None: ...
def front(
    fallback: _F,
    caps: _Caps,
    min_bytes: int,
    max_bytes: int,
    finish: Callable[..., Any] | None,
    finish_args: tuple[Any, ...] = (),
    known: Callable[[Any, int, int], Any] | None = None,
    /,
) -> _F: ...
def cut_string(
    s: str,
    room: int,
    mark: Callable[[int], tuple[bytes, bytes]],
    head_room: int,
    tail_room: int,
    /,
) -> tuple[bytes, int, int]: ...
def bound_native(
    obj: object,
    cap: int,
    depth: int,
    caps: _Caps,
    natives: dict[type, object],
    /,
) -> tuple[int, type | None, type | None]: ...
def join_reports(
    trs: Sequence[Any], base: str, into: list[Any], make: Callable[..., Any], /
) -> None: ...
def fill(
    obj: object,
    budget: int,
    caps: _Caps,
    count: list[int] | None,
    least: int,
    /,
) -> tuple[bytes, Sequence[tuple[str, str, int, str]]] | bool | None: ...

from collections.abc import Callable, Sequence
from typing import Any, SupportsIndex, TypeVar, final, overload

_F = TypeVar("_F", bound=Callable[..., Any])
_R = TypeVar("_R")
_Caps = tuple[int, int, int, int, tuple[type, ...] | None]

# fill()'s packed reports, the C type Reports (not a module attribute): each index a
# report (pointer, kind, omitted, unit) made when read. Declared a sequence, as the
# renderer's Trs takes it, though the C type has a length and indexing only (a slice,
# index() and count() raise).
@final
class _Reports(Sequence[tuple[str, str, int, str]]):
    def __len__(self) -> int: ...
    @overload
    def __getitem__(self, i: SupportsIndex, /) -> tuple[str, str, int, str]: ...
    @overload
    def __getitem__(self, i: slice, /) -> Sequence[tuple[str, str, int, str]]: ...

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

# caps must hold the scalars: None there raises TypeError. Not said in the type, which
# bound.py's declaration (Caps) and values.py's callers would then have to narrow too.
def bound_native(
    obj: object,
    cap: int,
    depth: int,
    caps: _Caps,
    natives: dict[type, object],
    /,
) -> tuple[int, type | None, type | None]: ...

# trs is fill()'s packed reports or the renderer's tuples of them (a 2-tuple
# (pointer, nested trs) or a 4-tuple report each); a list is refused (TypeError).
def join_reports(
    trs: tuple[Any, ...] | _Reports, base: str, into: list[Any], make: Callable[..., Any], /
) -> None: ...
def fill(
    obj: object,
    budget: int,
    caps: _Caps,
    count: list[int] | None,
    least: int,
    /,
) -> tuple[bytes, _Reports | tuple[()]] | bool | None: ...

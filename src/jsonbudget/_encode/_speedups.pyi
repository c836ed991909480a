def bound(
    obj: object,
    cap: int,
    depth: int,
    max_depth: int,
    max_items: int,
    max_keys: int,
    max_field: int,
    scalars: tuple[type, ...] | None,
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
    caps: tuple[int, int, int, int, tuple[type, ...] | None],
    /,
) -> bytes | int: ...
def compact(data: bytes, /) -> bytes: ...

def bound(
    obj: object,
    cap: int,
    depth: int,
    max_depth: int,
    max_items: int,
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
    max_field: int,
    scalars: tuple[type, ...] | None,
    /,
) -> int: ...

def first_over(
    rows: list[object], start: int, long_at: tuple[int, ...], longest: int, /
) -> int: ...
def lines_array(chunk: bytes, /) -> bytes | None: ...
def rounded(value: object, /) -> bool: ...
def rows_to_dicts(
    columns: tuple[str, ...],
    rows: list[object],
    start: int,
    flags_at: int,
    n_flags: int,
    long_at: tuple[int, ...],
    longest: int,
    /,
) -> tuple[list[dict[str, object]], int]: ...

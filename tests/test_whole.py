"""JsonWriter, the writer of spill files: orjson's bytes down to orjson's own depth limit,
made a bounded piece at a time."""

from __future__ import annotations

import dataclasses
import json
from collections.abc import Callable
from pathlib import Path
from typing import Any

import orjson
import pytest

from jsonbudget import ResultGate, SpillStore
from jsonbudget._encode.encoder import dumps_whole
from jsonbudget._encode.whole import JsonWriter
from tests.limited import bounded_run

MIB = 1 << 20
#: The deepest nesting orjson writes: a list, dict or dataclass at the 255th level is
#: refused ("Recursion limit reached"), in orjson 3.11.8, 3.12.0 and 3.13.0 alike.
ORJSON_WRITES = 254
DEPTHS = [127, 128, 129, 254, 255, 256]


@dataclasses.dataclass
class Node:
    child: Any


def chain(depth: int, wrap: Callable[[Any], Any], leaf: Any) -> Any:
    value = leaf
    for _ in range(depth):
        value = wrap(value)
    return value


def spilled(tmp_path: Path, value: Any) -> bytes:
    store = SpillStore(tmp_path / "spill")
    out = ResultGate(max_bytes=4096, store=store).gate(value)
    assert out.spill is not None
    return store.read(out.spill.ref, 0, out.spill.size + 1)


# What stands where orjson stops: the encoder's depth marker for the container there.
SHAPES: dict[str, tuple[Callable[[Any], Any], str]] = {
    "list": (lambda v: [v], "list of 1 items"),
    "dict": (lambda v: {"a": v}, "object with 1 keys"),
    "dataclass": (Node, "object with 1 keys"),
    # 5 KB a level: the top levels pass the 1 MiB one call may make and are written
    # member by member, the rest in one call, the depth counted across the two.
    "long list": (lambda v: ["w" * 5000, v], "list of 2 items"),
}


@pytest.mark.parametrize("shape", list(SHAPES))
@pytest.mark.parametrize("depth", DEPTHS)
def test_regression_a_spill_nests_as_deep_as_orjson_and_no_deeper(
    tmp_path: Path, shape: str, depth: int
) -> None:
    """Found by a tester: a spill file was promised byte-identical to orjson.dumps(value)
    where orjson writes the value, but it ended in a depth marker at 129 levels (the
    pages' MAX_DEPTH, 128), while orjson writes 254. The file now agrees with orjson at
    its limit: identical to 254 levels, a depth marker for the 255th."""
    wrap, what = SHAPES[shape]
    value = chain(depth, wrap, "x" * 5000)  # the long leaf makes the result spill
    data = spilled(tmp_path, value)
    if depth <= ORJSON_WRITES:
        assert data == orjson.dumps(value)
    else:
        if shape != "dataclass":  # orjson 3.11 does not check a dataclass's depth
            with pytest.raises(orjson.JSONEncodeError, match="Recursion limit"):
                orjson.dumps(value)
        # The levels orjson writes, then the marker standing for the first it refuses.
        assert data == orjson.dumps(chain(ORJSON_WRITES, wrap, f"…[depth: {what}]"))


@pytest.mark.parametrize(
    ("depth", "inner"),
    [
        (200, ["…[unencodable: nan]"]),
        (253, ["…[unencodable: nan]"]),  # the list holding NaN is the 254th level
        (254, "…[depth: list of 1 items]"),
        (255, "…[depth: object with 2 keys]"),
    ],
)
def test_regression_values_orjson_cannot_write_are_marked_at_orjsons_depth_too(
    tmp_path: Path, depth: int, inner: Any
) -> None:
    """A value the renderer writes (NaN needs a marker) was cut at 128 levels as well:
    its depth marker now stands where orjson's limit is, as for a clean value."""
    wrap = lambda v: {"pad": "p" * 40, "next": v}  # noqa: E731
    data = spilled(tmp_path, chain(depth, wrap, [float("nan")]))
    assert data == orjson.dumps(chain(min(depth, ORJSON_WRITES), wrap, inner))


# Each of these is a list or object small in members but long in bytes; some hide their
# size one level down, some grow their runs on short members first.
LONG = 256 * 1024


def text(i: int, n: int = LONG) -> str:
    return f"{i}".ljust(n, "x")


LONG_VALUES: dict[str, Callable[[], Any]] = {
    "strings": lambda: [text(i) for i in range(40)],
    "object of strings": lambda: {f"k{i}": text(i) for i in range(40)},
    "rows holding strings": lambda: [{"id": i, "text": text(i)} for i in range(40)],
    "strings a level down": lambda: {"rows": [[text(i)] for i in range(40)]},
    "short members, then strings": lambda: [*range(1000), *(text(i) for i in range(40))],
    "short members, then rows": lambda: [*range(1000), *({"t": text(i)} for i in range(40))],
    "object: short members, then rows": lambda: {
        **{f"n{i}": i for i in range(1000)},
        **{f"r{i}": {"t": text(i)} for i in range(40)},
    },
    "strings longer than a chunk": lambda: [text(i, 3 * MIB // 2) for i in range(4)],
}


@pytest.mark.parametrize("name", list(LONG_VALUES))
def test_regression_long_members_are_written_one_at_a_time(name: str) -> None:
    """Found in review: a list of up to 512 members with no nested container was written
    by one orjson call (and a run of up to 512 members by another), so 512 strings of
    2 MB were held whole, twice, before a byte reached the file. The pieces the writer
    hands on are now at most its 1 MiB buffer and one member long."""
    value = LONG_VALUES[name]()
    chunks = list(JsonWriter(None, {}, 1 << 40).chunks(value))
    assert b"".join(chunks) == orjson.dumps(value)
    longest = 3 * MIB // 2 if name == "strings longer than a chunk" else LONG
    assert len(chunks) > 1
    assert max(map(len, chunks)) <= MIB + longest + 64


def test_regression_a_spilled_list_of_long_strings_never_sits_whole_in_memory(
    tmp_path: Path,
) -> None:
    """The peak memory a spill adds, measured as RSS in a fresh interpreter: 48 strings
    of 2 MiB (96 MiB) took 192 MiB more (orjson's bytes of the whole list, then their
    copy in the writer's buffer); now about two strings' worth."""
    out = bounded_run(
        f"""
        import hashlib, json
        from jsonbudget import ResultGate, SpillStore
        def status(key):
            with open("/proc/self/status") as f:
                return next(int(l.split()[1]) for l in f if l.startswith(key))
        value = [str(i).ljust(2 << 20, "x") for i in range(48)]
        store = SpillStore({str(tmp_path / "spill")!r})
        before = status("VmRSS")
        out = ResultGate(max_bytes=4096, store=store).gate(value)
        added = status("VmHWM") - before
        with open(out.spill.path, "rb") as f:
            same = hashlib.sha256(f.read()).hexdigest() == out.spill.sha256
        print(json.dumps({{"kib": added, "size": out.size, "same": same}}))
        """,
        memory=2 << 30,
        timeout=120,
    )
    got = json.loads(out)
    assert got["size"] == 48 * ((2 << 20) + 3) + 1  # each string quoted, with a comma
    assert got["same"]
    assert got["kib"] < 24 << 10, got


def holding_itself(kind: str, read: Any) -> Any:
    """A value holding itself; *read* stands for an iterator in it, as the size check
    leaves it to the writer (an iterator) or as the encoder is shown it (its items)."""
    if kind == "object":
        obj: dict[str, Any] = {"text": "t" * 5000, "rows": [1, 2]}
        obj["self"] = obj
        return obj
    items: list[Any] = ["s" * 5000, "u" * 5000]
    if kind != "list of strings":
        items = list(range(2000 if kind == "long list" else 600))
    items.append(items)
    # With an iterator the size check read from, the writer walks every container of
    # more than 512 members itself: the list holding itself meets itself as a member.
    return {"rows": items, "read": read} if kind == "list walked member by member" else items


@pytest.mark.parametrize(
    "kind", ["object", "long list", "list walked member by member", "list of strings"]
)
def test_regression_a_value_that_holds_itself_is_marked_as_the_encoder_marks_it(
    tmp_path: Path, kind: str
) -> None:
    """A container the writer wrote member by member was unknown to the calls that
    wrote its members: a member holding it again wrote it once more before the cycle
    marker (an object of three members holding itself spilled about twice its size, a
    list of 2,000 ints 33 times). The file is now the encoder's whole rendering."""
    data = spilled(tmp_path, holding_itself(kind, iter(range(3))))
    assert data == dumps_whole(holding_itself(kind, [0, 1, 2]))
    assert data.count(b"[unencodable: cycle]") == 1

"""JsonWriter, the writer of spill files: orjson's bytes down to orjson's own depth limit,
made a bounded piece at a time."""

from __future__ import annotations

import dataclasses
import json
import math
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

import attrs
import msgspec
import numpy as np
import orjson
import pydantic
import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from jsonbudget import ResultGate, SpillStore
from jsonbudget._encode import whole
from jsonbudget._encode.encoder import dumps_whole
from jsonbudget._encode.whole import JsonWriter
from jsonbudget.errors import EncodeError, SpillError
from tests.limited import bounded_run, run_limited
from tests.strategies import Record, Slotted, odd_values, with_extra

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


# -- long strings ----------------------------------------------------------------------

#: Characters in a long string of the address-space tests: orjson, given one whole,
#: reserves 9-16 bytes of address space a character, more than `LIMITED` leaves.
LONG_CHARS = 60_000_000
#: The address space those children get: room for the interpreter, the string, its
#: pieces, not for orjson's reservation (as under `ulimit -v 600000`).
LIMITED = 600 << 20

# What each child spills, around a string of `LONG_CHARS` of one character: the value,
# and the bytes before and after the string in the file.
LIMITED_VALUES: dict[str, tuple[str, str, bytes, bytes]] = {
    "a string in an object": ("x", '{"log": TEXT}', b'{"log":"', b'"}'),
    "a two-byte string in a list": ("é", "[TEXT]", b'["', b'"]'),
    "a long key": ("k", "{TEXT: 1}", b'{"', b'":1}'),
    "a string in a dataclass": ("x", "Log(TEXT)", b'{"log":"', b'"}'),
}


@pytest.mark.parametrize("name", list(LIMITED_VALUES))
def test_regression_a_long_string_is_spilled_in_pieces_not_handed_to_orjson_whole(
    tmp_path: Path, name: str
) -> None:
    """Found by a tester: a bare 60 MB str result was spilled in pieces, but the same
    string inside a container (or as a key, or a dataclass's field) went to orjson in
    one call, which reserves 9-16 bytes of address space a character: under an
    address-space limit of 600 MiB the process died with SIGSEGV (orjson's crash). The
    writer now escapes a long string a 64 Ki-character piece at a time."""
    char, expr, head, tail = LIMITED_VALUES[name]
    done = run_limited(
        f"""
        import dataclasses, hashlib
        from jsonbudget import ResultGate, SpillStore

        @dataclasses.dataclass
        class Log:
            log: str

        N, M = {LONG_CHARS}, 1_000_000
        TEXT = {char!r} * N
        value = {expr}
        out = ResultGate(max_bytes=4096, store=SpillStore({str(tmp_path)!r})).gate(value)
        del value, TEXT
        digest = hashlib.sha256({head!r})
        piece = ({char!r} * M).encode()
        for _ in range(N // M):
            digest.update(piece)
        digest.update({tail!r})
        assert out.spill.size == {len(head) + len(tail)} + N * len(piece) // M, out.spill.size
        assert out.spill.sha256 == digest.hexdigest()
        print("ok")
        """,
        memory=LIMITED,
        timeout=180,
    )
    assert done.returncode == 0, (done.returncode, done.stderr[-2000:])
    assert done.stdout.strip() == "ok"


class Text(str):
    """A str subclass: the encoder writes its text, as orjson does."""


PIECE = 64 * 1024


def awkward(n: int) -> str:
    """*n* characters of escapes, control characters, 2-4 byte UTF-8 and lone
    surrogates, placed to fall on both sides of the writer's piece boundaries."""
    unit = 'a"\\\n\x00\x1f\x7fé€😀\u2028\ud800\udfff'
    return (unit * (n // len(unit) + 1))[:n]


LONG_STRINGS: dict[str, Callable[[], Any]] = {
    "awkward text in an object": lambda: {"a": awkward(3 * PIECE + 7), "b": 1},
    "awkward text in a list": lambda: [1, awkward(2 * PIECE + 1), "end"],
    "a surrogate at a piece's last character": lambda: ["x" * (PIECE - 1) + "\ud800" + "y" * PIECE],
    "a long key of escapes": lambda: {'"\\\n' * PIECE: [1, 2], "b": 2},
    "a str subclass": lambda: {"t": Text("é" * (2 * PIECE + 3))},
    "one character past a piece": lambda: ["q" * (PIECE + 1)],
}


@pytest.mark.parametrize("markers", ["text", "structured"])
@pytest.mark.parametrize("name", list(LONG_STRINGS))
def test_a_string_written_in_pieces_is_the_encoders_whole_string(name: str, markers: Any) -> None:
    """Each piece is escaped by the compiled escaper that cuts strings (orjson's
    escapes); the file is what the encoder writes whole: a lone surrogate becomes
    U+FFFD and the string ends with the count of them, as the encoder's note says.
    Each chunk handed on is at most the writer's 1 MiB buffer and a piece."""
    value = LONG_STRINGS[name]()
    chunks = list(JsonWriter(None, {}, 1 << 40, markers=markers).chunks(value))
    assert b"".join(chunks) == dumps_whole(value, markers=markers)
    assert max(map(len, chunks)) <= MIB + 6 * PIECE


def test_a_string_written_in_pieces_is_refused_at_the_files_limit() -> None:
    value = {"a": "x" * 150_000, "b": "y" * 100_000}
    with pytest.raises(SpillError, match="max_file_bytes"):
        list(JsonWriter(None, {}, 200_000).chunks(value))


# -- values the encoder converts -------------------------------------------------------


class PRow(pydantic.BaseModel):
    model_config = pydantic.ConfigDict(arbitrary_types_allowed=True)
    id: int
    score: float
    tags: set[str]
    extra: Any


class PResult(pydantic.BaseModel):
    model_config = pydantic.ConfigDict(arbitrary_types_allowed=True)
    rows: list[PRow]
    meta: dict[str, Any]
    note: str


class PMap(pydantic.BaseModel):
    """A dict field whose keys pydantic writes as text; a key with a lone surrogate is
    one the encoder rewrites (the model is then written whole)."""

    model_config = pydantic.ConfigDict(arbitrary_types_allowed=True, extra="allow")
    mapping: dict[Any, Any]


class PAlias(pydantic.BaseModel):
    model_config = pydantic.ConfigDict(
        arbitrary_types_allowed=True, populate_by_name=True, ser_json_inf_nan="constants"
    )
    rows: list[Any] = pydantic.Field(alias="Rows")
    hidden: int = pydantic.Field(default=1, exclude=True)

    @pydantic.computed_field  # type: ignore[prop-decorator]
    @property
    def count(self) -> int:
        return len(self.rows)


class PSerialized(pydantic.BaseModel):
    model_config = pydantic.ConfigDict(arbitrary_types_allowed=True)
    rows: list[Any]

    @pydantic.model_serializer
    def _as(self) -> Any:
        return {"r": self.rows, "n": len(self.rows)}


class PText(pydantic.BaseModel):
    rows: list[int]

    @pydantic.model_serializer
    def _as(self) -> str:
        return "x" * len(self.rows)


class PRoot(pydantic.RootModel[list[Any]]):
    model_config = pydantic.ConfigDict(arbitrary_types_allowed=True)


class SRow(msgspec.Struct):
    id: int
    value: Any


class SRenamed(msgspec.Struct, rename="camel", omit_defaults=True):
    some_value: Any
    other_value: int = 0


@attrs.define
class ARow:
    value: Any
    more: Any = None


def converted(children: st.SearchStrategy[Any]) -> st.SearchStrategy[Any]:
    """Values the encoder converts before it writes them: dataclasses (as orjson selects
    their members), pydantic models (aliases, excluded and computed fields, serializers,
    a root), msgspec Structs, attrs instances, NumPy arrays."""
    scores = st.sampled_from([1.5, math.nan, math.inf])
    return st.one_of(
        st.builds(Record, children, children),
        st.builds(Slotted, children),
        children.map(with_extra),
        st.builds(
            PRow,
            id=st.integers(0, 9),
            score=scores,
            tags=st.sets(st.text(max_size=3), max_size=3),
            extra=children,
        ),
        st.builds(
            PMap,
            mapping=st.dictionaries(
                # No digit strings beside int keys: pydantic's JSON repeats a key that
                # both make ("1"), its Python form keeps one, and the encoder renders
                # such a model by whichever wrote it (a difference of its own).
                st.one_of(st.text("abc", max_size=3), st.integers(0, 3), st.just("x\ud800")),
                children,
                max_size=4,
            ),
        ),
        st.builds(PAlias, Rows=st.lists(children, max_size=5)),
        st.builds(PSerialized, rows=st.lists(children, max_size=5)),
        st.builds(PText, rows=st.lists(st.integers(0, 3), max_size=20)),
        st.lists(children, max_size=5).map(PRoot),
        st.builds(SRow, id=st.integers(0, 9), value=children),
        st.builds(SRenamed, some_value=children, other_value=st.integers(0, 2)),
        st.builds(ARow, children, children),
        st.lists(st.sampled_from([1.0, math.nan, -0.0, 1e300]), max_size=8).map(np.array),
    )


#: Leaves that need the encoder's markers (sets, bytes, lone surrogates, NaN, ints past
#: 64 bits, non-str keys in `odd_values`), and strings longer than the shrunk piece.
MARKED_LEAVES = st.one_of(
    odd_values(8),
    st.sampled_from([{1, 2}, frozenset({"a"}), b"\x00\xff", "a\ud800b", "\ud83d\ude00"]),
    st.text(min_size=5, max_size=40),
)
CONVERTED = st.recursive(
    MARKED_LEAVES,
    lambda c: st.one_of(
        converted(c), st.lists(c, max_size=6), st.dictionaries(st.text(max_size=12), c, max_size=5)
    ),
    max_leaves=30,
)
RESULTS = st.one_of(
    converted(CONVERTED),
    st.builds(
        PResult,
        rows=st.lists(
            st.builds(
                PRow,
                id=st.integers(0, 9),
                score=st.sampled_from([1.5, math.nan]),
                tags=st.sets(st.text(max_size=3), max_size=2),
                extra=CONVERTED,
            ),
            max_size=8,
        ),
        meta=st.dictionaries(st.text(max_size=12), CONVERTED, max_size=4),
        note=st.text(max_size=20),
    ),
)

#: The writer's thresholds shrunk, so that small values take every path large ones do:
#: runs that fail, members one at a time, strings in pieces, views split, deep levels whole.
SHRUNK = {
    "_WRITE_BYTES": 48,
    "_RUN_BYTES": 8,
    "_RENDER_BYTES": 24,
    "_PIECE_CHARS": 4,
    "_BATCH": 3,
    "_STREAM_DEPTH": 4,
}


def written_shrunk(value: Any, **options: Any) -> bytes:
    with pytest.MonkeyPatch.context() as mp:
        for name, size in SHRUNK.items():
            mp.setattr(whole, name, size)
        return b"".join(JsonWriter(None, {}, 1 << 40, **options).chunks(value))


def outcome(make: Callable[[], bytes | None]) -> bytes | str | None:
    """The bytes made, or the error raised (the writer names the member that raised,
    the encoder's one call the value around it: only the kind is compared)."""
    try:
        return make()
    except EncodeError:
        return "EncodeError"


@settings(max_examples=300, suppress_health_check=[HealthCheck.too_slow])
@given(RESULTS, st.sampled_from(["text", "structured"]))
def test_property_a_converted_value_written_member_by_member_is_the_encoders_rendering(
    value: Any, markers: Any
) -> None:
    """A dataclass, model, Struct, attrs instance or array was rendered whole by one
    encoder call; it is now written member by member as the encoder converts it. The
    file is byte for byte what that one call renders (`dumps_whole`)."""
    expected = outcome(lambda: dumps_whole(value, markers=markers))
    assert outcome(lambda: written_shrunk(value, markers=markers)) == expected


def holding_itself_converted(kind: str, rows: int) -> Any:
    """A dataclass, model or attrs instance holding itself among *rows* rows."""
    items: list[Any] = [{"s": {i}, "pad": "p" * 20} for i in range(rows)]
    value: Any
    if kind == "dataclass":
        value = Record(items, "v")
    elif kind == "model":
        value = PAlias(Rows=items)
        items = value.rows  # pydantic's own copy
    elif kind == "attrs":
        value = ARow(items)
    else:  # a dataclass holding a model that holds the dataclass
        model = PAlias(Rows=items)
        value, items = Record(model, None), model.rows
    items.insert(1, value)
    return value


@pytest.mark.parametrize("kind", ["dataclass", "model", "attrs", "dataclass in a model"])
@pytest.mark.parametrize("rows", [3, 16_000])
def test_a_converted_value_that_holds_itself_is_marked_as_the_encoder_marks_it(
    kind: str, rows: int
) -> None:
    """Written member by member, a dataclass or model met again inside its members is
    converted by each call as the value being written: the cycle is marked once, where
    the encoder's one call marks it (small: with the writer's thresholds shrunk; large:
    past 1 MiB, as a spilled result is)."""
    value = holding_itself_converted(kind, rows)
    if rows < 10:
        data = written_shrunk(value)
    else:
        data = b"".join(JsonWriter(None, {}, 1 << 40).chunks(value))
    assert data == dumps_whole(value)
    assert data.count(b"[unencodable: cycle]") == 1


def converted_around(kind: str, rows: Any) -> Any:
    """*rows* held by a dataclass, a pydantic model or an attrs instance, as they are."""
    if kind == "dataclass":
        return Record(rows, 1)
    if kind == "model":
        return PRow(id=1, score=1.5, tags=set(), extra=rows)
    return ARow(rows)


def rows_of(n: int, fail_at: int = -1) -> Iterator[dict[str, Any]]:
    for i in range(n):
        if i == fail_at:
            raise LookupError("the rows ran out")
        yield {"i": i, "score": math.nan, "pad": "p" * 20}


@pytest.mark.parametrize("kind", ["dataclass", "model", "attrs"])
def test_iterators_in_a_converted_result_are_replayed_into_its_file(
    tmp_path: Path, kind: str
) -> None:
    """The size check and the preview pull from a generator inside a dataclass or a
    model; written member by member, the file holds what they pulled, then the rest,
    as the encoder renders the value holding the same rows as a list."""
    data = spilled(tmp_path, converted_around(kind, rows_of(20_000)))
    assert len(data) > MIB
    assert data == dumps_whole(converted_around(kind, list(rows_of(20_000))))


@pytest.mark.parametrize("kind", ["dataclass", "model", "attrs"])
def test_regression_a_generator_raising_in_a_spilled_dataclass_or_model_propagates_unchanged(
    tmp_path: Path, kind: str
) -> None:
    """guards.md: "An exception raised by a result's own iterator propagates unchanged
    and leaves no file." In a dict it did; in a dataclass or model, made whole by one
    encoder call, it came as `EncodeError("iterator raised LookupError")`. Written
    member by member, the generator is read as in a dict."""
    store = SpillStore(tmp_path / "spill")
    with pytest.raises(LookupError, match="the rows ran out"):
        ResultGate(max_bytes=4096, store=store).gate(
            converted_around(kind, rows_of(20_000, fail_at=18_000))
        )
    assert list((tmp_path / "spill").iterdir()) == []


def test_regression_a_spilled_model_or_dataclass_holds_memory_about_its_pieces(
    tmp_path: Path,
) -> None:
    """Found by a tester: a dataclass or a pydantic model was "a value that cannot be
    split", made whole by one encoder call, whose renderer holds about 1.4 KB of
    objects for each value with a marker: rows holding a set spilled at 30 times the
    file's size in memory, a model's rows holding NaN at 50 (986 MB for a 21 MB
    file). Both are now written member by member: Python memory traced while the
    result is gated and spilled stays near the file's size (a bounded run at a time
    and the 1 MiB buffer), for 70,000 rows about 1.2 times it."""
    out = bounded_run(
        f"""
        import dataclasses, json, math, tracemalloc
        import pydantic
        from jsonbudget import ResultGate, SpillStore

        @dataclasses.dataclass
        class Result:
            rows: list

        class Row(pydantic.BaseModel):
            id: int
            score: float

        class Model(pydantic.BaseModel):
            rows: list[Row]

        gate = ResultGate(max_bytes=4096, store=SpillStore({str(tmp_path / "spill")!r}))
        values = {{
            "dataclass": Result([{{"id": i, "tags": {{"a"}}}} for i in range(70_000)]),
            "model": Model(rows=[Row(id=i, score=math.nan) for i in range(70_000)]),
        }}
        got = {{}}
        tracemalloc.start()
        for name, value in values.items():
            tracemalloc.reset_peak()
            before = tracemalloc.get_traced_memory()[0]
            size = gate.gate(value).spill.size
            got[name] = [tracemalloc.get_traced_memory()[1] - before, size]
        print(json.dumps(got))
        """,
        memory=2 << 30,
        timeout=600,
    )
    for name, (peak, size) in json.loads(out).items():
        assert size > 2 * MIB, name
        assert peak < 3 * size, (name, peak / size)

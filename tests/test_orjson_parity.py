"""orjson's own dumps cases, run against ``bounded_dumps(obj, max_bytes=2**30, default=...)``.

The cases come from orjson's test suite (https://github.com/ijl/orjson, commit
5cbb3d0398a2f42de51210270286fecd798c5d78; its test files are MPL-2.0, orjson itself
Apache-2.0 OR MIT). Only inputs and orjson's outputs were taken, no code:
``tests/data/orjson/dumps_cases.json`` holds every ``orjson.dumps(obj)`` call made without
``default`` or ``option`` while orjson's tests ran, for inputs built from JSON types,
tuples, datetimes, UUIDs and bytes; the cases below it restate, with their expected
bytes, orjson's tests that need classes (dataclasses, ``default``, enums, subclasses,
Fragment, NumPy). Every case is byte-identical to orjson unless it falls under one of
`DIFFERENCES`, each of which says why and what jsonbudget writes instead.
"""

from __future__ import annotations

import collections
import dataclasses
import datetime as dt
import enum
import json
import math
import uuid
from collections.abc import Callable
from pathlib import Path
from typing import Any, NamedTuple

import numpy as np
import orjson
import pytest

from jsonbudget import bounded_dumps
from jsonbudget.errors import EncodeError

MAX = 2**30
DEFAULT_DEPTH = 64
# The stdlib parser, which keeps integers beyond 64 bits as integers.
CASES = json.loads((Path(__file__).parent / "data" / "orjson" / "dumps_cases.json").read_bytes())


def decode(o: Any) -> Any:
    """The tagged form of the data file back to the Python value orjson was given."""
    if isinstance(o, list):
        return [decode(x) for x in o]
    if not isinstance(o, dict):
        return o
    (tag, value), *rest = o.items()
    if tag == "$f":
        return float(value)
    if tag == "$s":
        return "".join(map(chr, value))
    if tag == "$tuple":
        return tuple(decode(x) for x in value)
    if tag == "$dict":
        return {decode(k): decode(v) for k, v in value}
    if tag == "$uuid":
        return uuid.UUID(value)
    if tag == "$bytes":
        return bytes.fromhex(value)
    if tag == "$date":
        return dt.date.fromisoformat(value)
    off = rest[0][1] if rest else None
    tz = None if off is None else dt.timezone(dt.timedelta(seconds=off))
    if tag == "$datetime":
        return dt.datetime.fromisoformat(value).replace(tzinfo=tz)
    if tag == "$time":
        return dt.time.fromisoformat(value).replace(tzinfo=tz)
    raise AssertionError(tag)


def walk(o: Any, depth: int = 1) -> Any:
    """(value, depth) for every value inside *o*, keys included."""
    yield o, depth
    if isinstance(o, dict):
        for k, v in o.items():
            yield k, depth
            yield from walk(v, depth + 1)
    elif isinstance(o, list | tuple):
        for v in o:
            yield from walk(v, depth + 1)


def _has(pred: Callable[[Any], bool]) -> Callable[[Any], bool]:
    return lambda obj: any(pred(v) for v, _ in walk(obj))


def _deep(obj: Any) -> bool:
    return any(isinstance(v, dict | list | tuple) and d > DEFAULT_DEPTH for v, d in walk(obj))


def _surrogates(v: Any) -> bool:
    return isinstance(v, str) and any(0xD800 <= ord(c) <= 0xDFFF for c in v)


#: Where jsonbudget differs from orjson on purpose: (name, applies to, reason).
DIFFERENCES: list[tuple[str, Callable[[Any], bool], str]] = [
    (
        "nan",
        _has(lambda v: isinstance(v, float) and not math.isfinite(v)),
        "orjson writes NaN and the infinities as null, which says a number was absent; "
        "the encoder writes its unencodable marker (guarantee 7)",
    ),
    (
        "big int",
        _has(lambda v: type(v) is int and not -(2**63) <= v < 2**64),
        "orjson refuses integers beyond 64 bits; the encoder writes a marker",
    ),
    (
        "surrogates",
        _has(_surrogates),
        "orjson refuses lone surrogates; the encoder writes U+FFFD and says how many",
    ),
    (
        "non-str keys",
        _has(lambda v: isinstance(v, dict) and any(type(k) is not str for k in v)),
        "orjson refuses them without OPT_NON_STR_KEYS; the encoder rewrites the key as a marker",
    ),
    (
        "bytes",
        _has(lambda v: isinstance(v, bytes)),
        "orjson refuses bytes; the encoder marks them (base64 with binary='base64')",
    ),
    (
        "depth",
        _deep,
        "orjson nests 255 levels; the encoder's max_depth defaults to 64 (at most 128): "
        "a deeper container becomes a depth marker",
    ),
]


def difference(obj: Any) -> str | None:
    for name, applies, _ in DIFFERENCES:
        if applies(obj):
            return name
    return None


def check(obj: Any, expected: bytes | None, *, default: Callable[[Any], Any] | None = None) -> None:
    """Byte identity, or a documented difference with valid, marked output."""
    reason = difference(obj)
    try:
        got = bounded_dumps(obj, max_bytes=MAX, default=default)
    except EncodeError:
        # orjson raised too: the encoder's own, documented exception for the same input.
        assert expected is None
        return
    if reason is None and expected is not None:
        assert got == expected
        return
    # Either orjson raised (no byte identity to keep) or a listed difference applies.
    orjson.loads(got)
    assert reason is not None or expected is None, "an undocumented difference"
    # In band: a marker, or U+FFFD where a lone surrogate was (a key's is reported aside).
    assert got == expected or "…[".encode() in got or "\ufffd".encode() in got


@pytest.mark.parametrize(
    "case",
    CASES["cases"],
    ids=[f"{c['file']}::{c['test']}[{i}]" for i, c in enumerate(CASES["cases"])],
)
def test_orjson_dumps_case(case: dict[str, Any]) -> None:
    expected = None if case["expected"] is None else case["expected"].encode()
    check(decode(case["obj"]), expected)


def test_the_cases_cover_orjsons_files_and_each_difference() -> None:
    files = {c["file"] for c in CASES["cases"]}
    assert {"test_type.py", "test_escape.py", "test_recursion.py", "test_datetime.py"} <= files
    used = {difference(decode(c["obj"])) for c in CASES["cases"]}
    assert {name for name, *_ in DIFFERENCES} <= used  # no difference is listed in vain


# -- orjson's tests that need classes: restated with orjson's expected bytes ------------


@dataclasses.dataclass
class Dataclass1:
    name: str
    number: int
    sub: Dataclass1 | None


@dataclasses.dataclass
class UnsortedDataclass:
    c: int
    b: int
    a: int
    d: dict[str, Any] | None


@dataclasses.dataclass
class InitDataclass:
    a: str
    b: str
    ab: str = dataclasses.field(init=False)

    def __post_init__(self) -> None:
        self.ab = f"{self.a} {self.b}"


@dataclasses.dataclass
class PrivateDataclass:
    user: str
    _password_hash: str


@dataclasses.dataclass(slots=True)
class SlotsDataclass:
    a: str
    b: int
    _c: str


class Recursive:
    def __init__(self, cur: int) -> None:
        self.cur = cur


def default_recursive(obj: Any) -> Any:
    if obj.cur != 0:
        obj.cur -= 1
        return obj
    return obj.cur


class Custom:
    def __init__(self) -> None:
        self.name = uuid.UUID(int=1)

    def __str__(self) -> str:
        return f"{type(self).__name__}({self.name})"


class StrEnum(enum.Enum):
    AAA = "aaa"


class IntEnum(enum.IntEnum):
    ONE = 1


class FloatEnum(float, enum.Enum):
    ONE = 1.1


class SubStr(str):
    pass


class SubInt(int):
    pass


class SubDict(dict[str, Any]):
    pass


class SubList(list[Any]):
    pass


class SubFloat(float):
    pass


class SubTuple(tuple[Any, ...]):
    pass


class Point(NamedTuple):
    a: int
    b: int


class SubUUID(uuid.UUID):
    pass


def _moved() -> collections.OrderedDict[str, int]:
    moved = collections.OrderedDict(a=1, b=2)
    moved.move_to_end("a")
    return moved


class _Reversed(list[int]):
    def __iter__(self) -> Any:
        return reversed(list(super().__iter__()))


def _circular() -> dict[str, Any]:
    d: dict[str, Any] = {}
    d["obj"] = d
    return d


def _with_attr() -> Any:
    obj = PrivateDataclass("bob", "x")
    obj.later = 1  # type: ignore[attr-defined]
    return obj


CLASS_CASES: list[tuple[str, Any, Callable[[Any], Any] | None, bytes]] = [
    # test_dataclass.py
    ("dataclass", Dataclass1("a", 1, None), None, b'{"name":"a","number":1,"sub":null}'),
    (
        "dataclass_nested",
        Dataclass1("a", 1, Dataclass1("b", 2, None)),
        None,
        b'{"name":"a","number":1,"sub":{"name":"b","number":2,"sub":null}}',
    ),
    ("dataclass_unsorted", UnsortedDataclass(1, 2, 3, None), None, b'{"c":1,"b":2,"a":3,"d":null}'),
    ("dataclass_post_init", InitDataclass("a", "b"), None, b'{"a":"a","b":"b","ab":"a b"}'),
    ("dataclass_private", PrivateDataclass("bob", "hash"), None, b'{"user":"bob"}'),
    ("dataclass_slots", SlotsDataclass("a", 1, "c"), None, b'{"a":"a","b":1}'),
    ("dataclass_attr_set_later", _with_attr(), None, b'{"user":"bob","later":1}'),
    # test_default.py
    ("default_str", Custom(), str, b'"Custom(00000000-0000-0000-0000-000000000001)"'),
    (
        "default_func_nested",
        [Custom()],
        str,
        b'["Custom(00000000-0000-0000-0000-000000000001)"]',
    ),
    ("default_recursion", Recursive(254), default_recursive, b"0"),
    (
        "default_recursion_reset",
        [Recursive(254), {"a": "b"}, Recursive(254), Recursive(254)],
        default_recursive,
        b'[0,{"a":"b"},0,0]',
    ),
    ("default_set", {1, 2}, list, b"[1,2]"),
    # test_enum.py
    ("enum_str", StrEnum.AAA, None, b'"aaa"'),
    ("enum_int", IntEnum.ONE, None, b"1"),
    ("enum_float", FloatEnum.ONE, None, b"1.1"),
    ("enum_in_dict", {"k": StrEnum.AAA}, None, b'{"k":"aaa"}'),
    # test_subclass.py
    ("subclass_str", SubStr("zxc"), None, b'"zxc"'),
    ("subclass_int", SubInt(1), None, b"1"),
    ("subclass_dict", SubDict({"a": "b"}), None, b'{"a":"b"}'),
    ("subclass_list", SubList(["a", "b"]), None, b'["a","b"]'),
    ("subclass_float_default", SubFloat(1.1), float, b"1.1"),
    ("subclass_tuple_default", SubTuple((1, 2)), list, b"[1,2]"),
    ("namedtuple_default", Point(1, 2), lambda o: o._asdict(), b'{"a":1,"b":2}'),
    # test_uuid.py
    ("uuid_subclass_default", SubUUID(int=1), str, b'"00000000-0000-0000-0000-000000000001"'),
    # test_fragment.py
    ("fragment", orjson.Fragment(b'{"a":1}'), None, b'{"a":1}'),
    ("fragment_in_list", [orjson.Fragment(b"[1,2]"), 3], None, b"[[1,2],3]"),
    ("fragment_str", orjson.Fragment('"\u00e9"'), None, '"\u00e9"'.encode()),
    # test_numpy.py (with OPT_SERIALIZE_NUMPY, the only way jsonbudget writes NumPy)
    ("numpy_int64", np.array([1, 2, 3], dtype=np.int64), None, b"[1,2,3]"),
    (
        "numpy_float32",
        np.array([1.0, 3.4028235e38], dtype=np.float32),
        None,
        b"[1.0,3.4028235e+38]",
    ),
    ("numpy_bool", np.array([True, False]), None, b"[true,false]"),
    ("numpy_2d", np.array([[1, 2], [3, 4]], dtype=np.int8), None, b"[[1,2],[3,4]]"),
    ("numpy_scalar_float64", np.float64(1.5), None, b"1.5"),
    ("numpy_scalar_uint64", np.uint64(18446744073709551615), None, b"18446744073709551615"),
    (
        "numpy_datetime64",
        np.array([np.datetime64("2021-01-01T00:00:00")]),
        None,
        b'["2021-01-01T00:00:00"]',
    ),
]


@pytest.mark.parametrize(
    ("obj", "default", "expected"), [c[1:] for c in CLASS_CASES], ids=[c[0] for c in CLASS_CASES]
)
def test_orjson_class_case(obj: Any, default: Callable[[Any], Any] | None, expected: bytes) -> None:
    option = orjson.OPT_SERIALIZE_NUMPY
    assert orjson.dumps(obj, default=default, option=option) == expected  # the case is right
    assert bounded_dumps(obj, max_bytes=MAX, default=default) == expected


#: orjson raises for these; jsonbudget's documented outcome instead (name, obj, default).
CLASS_DIFFERENCES: list[tuple[str, Any, Callable[[Any], Any] | None, bytes, str]] = [
    (
        "namedtuple_no_default",
        Point(1, 2),
        None,
        b"[1,2]",
        "orjson refuses a tuple subclass without default; the encoder writes it as an array",
    ),
    (
        "subclass_float_no_default",
        SubFloat(1.5),
        None,
        b"1.5",
        "orjson refuses a float subclass without default; the encoder writes the float",
    ),
    (
        "fragment_invalid",
        [orjson.Fragment(b"[1,")],
        None,
        '["…[unencodable: Fragment that is not valid JSON]"]'.encode(),
        "orjson inserts any Fragment as is; the encoder checks it parses (guarantee 1)",
    ),
    (
        "set_no_default",
        {1},
        None,
        '"…[unencodable: set of 1 items]"'.encode(),
        "orjson refuses a set; the encoder writes a marker",
    ),
    (
        "circular",
        _circular(),
        None,
        '{"obj":"…[unencodable: cycle]"}'.encode(),
        "orjson raises for a cycle; the encoder marks where it refers back",
    ),
    (
        "time_with_tzinfo",
        dt.time(12, 0, tzinfo=dt.UTC),
        None,
        '"…[unencodable: time]"'.encode(),
        "orjson refuses a time with a tzinfo; the encoder writes a marker",
    ),
    (
        "numpy_nan",
        np.array([np.nan]),
        None,
        '["…[unencodable: nan]"]'.encode(),
        "orjson writes null; the encoder marks it, as for a float NaN",
    ),
    (
        "ordered_dict_moved",
        _moved(),
        None,
        b'{"b":2,"a":1}',
        "orjson writes a dict subclass's storage order; the encoder the order it iterates in",
    ),
    (
        "list_subclass_iterating_its_own_way",
        _Reversed([1, 2, 3]),
        None,
        b"[3,2,1]",
        "orjson writes a list subclass's storage; the encoder what iterating it gives",
    ),
    (
        "numpy_non_contiguous",
        np.arange(4).reshape(2, 2).T,
        None,
        b"[[0,2],[1,3]]",
        "orjson refuses a non-contiguous array; the encoder walks it",
    ),
]


@pytest.mark.parametrize(
    ("obj", "default", "expected", "reason"),
    [c[1:] for c in CLASS_DIFFERENCES],
    ids=[c[0] for c in CLASS_DIFFERENCES],
)
def test_orjson_documented_class_difference(
    obj: Any, default: Callable[[Any], Any] | None, expected: bytes, reason: str
) -> None:
    try:
        theirs: bytes | None = orjson.dumps(obj, default=default, option=orjson.OPT_SERIALIZE_NUMPY)
    except orjson.JSONEncodeError:
        theirs = None
    ours = bounded_dumps(obj, max_bytes=MAX, default=default)
    assert ours == expected
    assert ours != theirs, f"no longer a difference: {reason}"
    orjson.loads(ours)


def test_default_chain_one_past_orjsons_raises_as_orjson_does() -> None:
    with pytest.raises(orjson.JSONEncodeError):
        orjson.dumps(Recursive(255), default=default_recursive)
    with pytest.raises(EncodeError, match="default kept returning"):
        bounded_dumps(Recursive(255), max_bytes=MAX, default=default_recursive)


def test_a_default_that_raises_is_an_encode_error_as_orjson_raises() -> None:
    def default(_: Any) -> Any:
        raise TypeError

    with pytest.raises(orjson.JSONEncodeError):
        orjson.dumps(Custom(), default=default)
    with pytest.raises(EncodeError) as info:
        bounded_dumps(Custom(), max_bytes=MAX, default=default)
    assert isinstance(info.value.__cause__, TypeError)


def test_deque_and_mapping_types_orjson_refuses_are_walked() -> None:
    assert bounded_dumps(collections.deque([1]), max_bytes=MAX) == b"[1]"

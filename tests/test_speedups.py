"""The compiled extensions: the size bound (built, a true lower bound, the same answers as
the Python walk), the one-call verbs' front door, the frozen-value constructor and the
sources' check of what orjson read."""

from __future__ import annotations

import contextlib
import copy
import dataclasses
import datetime as dt
import gc
import inspect
import math
import pickle
import sys
import uuid
import weakref
from collections.abc import Iterator
from contextlib import contextmanager, nullcontext
from pathlib import Path
from typing import Any

import orjson
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

import jsonbudget
from jsonbudget import Encoder, LimitError, _frozen, encode
from jsonbudget._encode import _speedups as speedups
from jsonbudget._encode import bound as _bound
from jsonbudget._encode import strings
from jsonbudget._limits import DEFAULT_MAX_DEPTH, MAX_DEPTH
from jsonbudget._sources import _numbers as numbers
from jsonbudget._sources import files, jsonread, sql
from tests.limited import run_limited
from tests.strategies import Record, Slotted, json_values, odd_values, with_extra

BIG = 1 << 62
SCALARS = (dt.datetime, dt.date, dt.time, uuid.UUID)


def bound(obj: Any, cap: int = BIG, *, max_depth: int = DEFAULT_MAX_DEPTH, **caps: int) -> int:
    return int(
        speedups.bound(
            obj,
            cap,
            0,
            max_depth,
            caps.get("max_items", BIG),
            caps.get("max_keys", BIG),
            caps.get("max_field", BIG),
            SCALARS,
        )
    )


@contextmanager
def python_walk() -> Iterator[None]:
    with pytest.MonkeyPatch.context() as mp:
        mp.setattr(_bound, "bound", _bound.py_bound)
        mp.setattr(_bound, "bound_items", _bound.py_bound_items)
        mp.setattr(_bound, "clean_dumps", _bound.py_clean_dumps)
        mp.setattr(_bound, "compact", _bound.py_compact)
        yield


def test_the_test_install_builds_the_extension() -> None:
    # The extension is optional for users; the suite must still exercise it.
    assert _bound.bound is speedups.bound
    assert _bound.bound_items is speedups.bound_items
    assert _bound.clean_dumps is speedups.clean_dumps
    assert _bound.compact is speedups.compact
    assert _bound.front is speedups.front
    assert jsonread._rounded is numbers.rounded
    assert files.lines_array is numbers.lines_array


def test_the_front_door_reads_its_caps_once_when_made() -> None:
    # The caps are read into the door when it is made (per call they cost a tenth of a
    # small call), so a bad one is refused then, and the door uses the ones it read.
    def fallback(obj: Any, *, max_bytes: int) -> Any:
        return "fallback"

    with pytest.raises(ValueError, match="depth"):
        speedups.front(fallback, (MAX_DEPTH + 10**6, BIG, BIG, BIG, SCALARS), 32, BIG, None)
    with pytest.raises(TypeError, match="scalars"):
        speedups.front(fallback, (8, BIG, BIG, BIG, "dates"), 32, BIG, None)  # type: ignore[arg-type]
    door = speedups.front(fallback, (2, 3, BIG, BIG, SCALARS), 32, BIG, None)
    assert door([[1]], max_bytes=64) == b"[[1]]"
    assert door([[[1]]], max_bytes=64) == "fallback"  # deeper than max_depth 2
    assert door([1, 2, 3, 4], max_bytes=64) == "fallback"  # over max_items 3


def test_clean_dumps_reads_the_caps_each_call_passes() -> None:
    # clean_dumps keeps the caps tuple it last read: alternating owners, and bad caps
    # after good ones, must each get their own caps' answer.
    shallow, deep = (2, BIG, BIG, BIG, SCALARS), (8, BIG, BIG, BIG, SCALARS)
    value = [[[1, 2]]]
    for _ in range(3):
        assert speedups.clean_dumps(value, 64, 0, deep) == b"[[[1,2]]]"
        assert speedups.clean_dumps(value, 64, 0, shallow) == _bound.UNCLEAN
        assert speedups.clean_dumps(value, 64, 0, (8, 1, BIG, BIG, SCALARS)) == _bound.UNCLEAN
    with pytest.raises(ValueError, match="depth"):
        speedups.clean_dumps(value, 64, 0, (MAX_DEPTH + 10**6, BIG, BIG, BIG, SCALARS))
    with pytest.raises(TypeError, match="scalars"):
        speedups.clean_dumps(value, 64, 0, (8, BIG, BIG, BIG, "dates"))  # type: ignore[arg-type]
    assert speedups.clean_dumps(value, 64, 0, deep) == b"[[[1,2]]]"
    assert speedups.clean_dumps(value, 4, 0, deep) == _bound.TOO_BIG


def test_the_front_door_finishes_with_its_extra_arguments() -> None:
    # encode()'s door makes its Encoded by calling the constructor itself, with the
    # arguments after the bytes given once, when the door is made.
    def fallback(obj: Any, *, max_bytes: int) -> Any:
        return "fallback"

    caps = (8, BIG, BIG, BIG, SCALARS)
    door = speedups.front(fallback, caps, 32, BIG, lambda *a: a, (True, ()))
    assert door({"a": 1}, max_bytes=64) == (b'{"a":1}', True, ())
    assert door({"a": 1}, max_bytes=4) == "fallback"  # under min_bytes: the verb decides
    assert speedups.front(fallback, caps, 32, BIG, len)([1], max_bytes=64) == 3
    for extra in ([True], (1, 2, 3, 4)):
        with pytest.raises(TypeError, match="up to 3"):
            speedups.front(fallback, caps, 32, BIG, len, extra)  # type: ignore[arg-type]
    assert encode([1], max_bytes=64) == jsonbudget.Encoded(b"[1]", True, ())


def test_the_front_door_hands_what_its_walk_found_to_known() -> None:
    def fallback(obj: Any, **kwargs: Any) -> Any:
        return "fallback"

    caps = (8, BIG, BIG, BIG, SCALARS)
    door = speedups.front(fallback, caps, 32, BIG, None, (), lambda *a: a)
    assert door([1.5] * 40, max_bytes=64) == ([1.5] * 40, 64, _bound.TOO_BIG)
    assert door([math.nan], max_bytes=64) == ([math.nan], 64, _bound.UNCLEAN)
    assert door([1], max_bytes=64) == b"[1]"
    assert door([1] * 40, max_bytes=64, extra=1) == "fallback"  # not a budget-only call
    with pytest.raises(TypeError, match="known callable"):
        speedups.front(fallback, caps, 32, BIG, None, (), "known")  # type: ignore[arg-type]


def test_regression_a_list_whose_bound_fits_but_bytes_do_not_is_encoded_once() -> None:
    """Found by a tester: a clean list of long numbers passes the size walk (a number is
    at least a byte) and is encoded whole to learn that it does not fit. The front door
    did that, then handed the call to the verb, which walked and encoded it whole
    again before cutting: 24 MB encoded for a 1 MiB result of 12 MB of floats. Counted
    in a child, where orjson.dumps is wrapped before jsonbudget takes it."""
    done = run_limited(
        """
        import orjson
        encoded = []
        dumps = orjson.dumps
        def counting(obj, *args, **kwargs):
            out = dumps(obj, *args, **kwargs)
            encoded.append(len(out))
            return out
        orjson.dumps = counting
        import jsonbudget
        floats = [1.2345678901234567e-300] * 20_000
        for verb in (jsonbudget.bounded_dumps, jsonbudget.encode):
            encoded.clear()
            verb(floats, max_bytes=100_000)
            print(len(dumps(floats)), max(encoded), sum(encoded))
        """
    )
    assert done.returncode == 0, done.stderr
    for line in done.stdout.splitlines():
        whole, largest, total = map(int, line.split())
        assert largest == whole  # the walk let it through: encoded whole
        assert total < whole + 2 * 100_000  # once whole at most, then the cut


@settings(max_examples=300)
@given(json_values(60))
def test_bound_is_a_lower_bound_of_the_encoded_size(value: Any) -> None:
    n = bound(value)
    assert 0 <= n <= len(orjson.dumps(value))


@settings(max_examples=300)
@given(json_values(60), st.integers(0, 400))
def test_bound_past_the_cap_means_the_encoding_is_past_it(value: Any, cap: int) -> None:
    if bound(value, cap) > cap:
        assert len(orjson.dumps(value)) > cap


@pytest.mark.parametrize(
    "value",
    [
        [1.0, math.nan],
        {"a": math.inf},
        (-math.inf,),
        {1: "non-str key"},
        {"sub": {("tuple", "key"): 1}},
        [{1, 2}],
        [b"bytes"],
        [object()],
    ],
    ids=["nan", "inf", "-inf", "int key", "nested tuple key", "set", "bytes", "object"],
)
def test_unclean_values_are_refused(value: Any) -> None:
    assert bound(value) == -1


@pytest.mark.parametrize("walk", [speedups.bound, _bound.py_bound], ids=["compiled", "python"])
@pytest.mark.parametrize("cap", [BIG, 200, 10])
def test_a_cycle_is_refused(walk: Any, cap: int) -> None:
    # The compiled walk first skips the ancestor scan: a cycle then nests until the cap
    # or max_depth stops it. Were that counted as too big, the renderer would leave the
    # value out instead of marking the cycle (found when the scan was first dropped).
    a: list[Any] = [1]
    a.append(a)
    d: dict[str, Any] = {}
    d["self"] = [d]
    for value in (a, d, {"k": ["x" * 10, d]} if cap > 100 else d):
        assert walk(value, cap, 0, MAX_DEPTH, BIG, BIG, BIG, SCALARS) == -1
    assert speedups.bound_items([1, a], cap, 0, MAX_DEPTH, BIG, BIG, BIG, SCALARS) == -1


@dataclasses.dataclass
class _Linked:
    text: str
    next: Any = None


def _cycles_that_pass_the_cap_first() -> list[Any]:
    # Each nests far enough around its cycle to pass a 300-byte cap long before
    # MAX_DEPTH: the compiled walk then stops inside the cycle, and only the path it
    # stopped on tells it that it counted one.
    node = _Linked("x" * 40)
    node.next = node
    ring = _Linked("a" * 40, _Linked("b" * 40))
    ring.next.next = ring
    via_list = _Linked("y" * 40)
    via_list.next = [via_list]
    wide: list[Any] = ["z" * 40]
    wide.append(wide)
    shared = ["s" * 40]  # the same list at two depths, on no cycle
    late: dict[str, Any] = {"first": shared, "then": [shared, wide]}
    return [node, ring, via_list, wide, late]


@pytest.mark.parametrize("value", _cycles_that_pass_the_cap_first())
def test_a_cycle_that_passes_the_cap_is_refused_by_both_walks(value: Any) -> None:
    for walk in (speedups.bound, _bound.py_bound):
        assert walk(value, 300, 0, MAX_DEPTH, BIG, BIG, BIG, SCALARS) == -1


def test_a_value_on_no_cycle_keeps_its_bound_when_it_passes_the_cap() -> None:
    # The same subtree twice, at two depths, is not a cycle: the answer is the bound.
    shared = ["s" * 40]
    value = {"first": shared, "then": [shared, ["t" * 400]]}
    compiled = speedups.bound(value, 300, 0, MAX_DEPTH, BIG, BIG, BIG, SCALARS)
    assert compiled > 300
    assert compiled == _bound.py_bound(value, 300, 0, MAX_DEPTH, BIG, BIG, BIG, SCALARS)


def test_a_cycle_behind_its_own_prefix_is_still_measured_up_to_the_cap() -> None:
    # Too big before the cycle comes: the answer is the bound, as for any value.
    a: list[Any] = ["x" * 100]
    a.append(a)
    assert bound(a, 50) > 50


def test_caps_make_a_value_unclean() -> None:
    nested: Any = 0
    for _ in range(5):
        nested = [nested]
    assert bound(nested, max_depth=5) > 0
    assert bound(nested, max_depth=4) == -1
    assert bound([1, 2, 3], max_items=3) > 0
    assert bound([1, 2, 3], max_items=2) == -1
    assert bound({"a": 1, "b": 2}, max_keys=1) == -1
    assert bound({"a": 1, "b": 2}, max_items=1) > 0  # max_items caps lists only
    assert bound([1, 2], max_keys=1) > 0


@pytest.mark.parametrize(
    "clean_dumps", [speedups.clean_dumps, _bound.py_clean_dumps], ids=["compiled", "python"]
)
def test_regression_a_field_cap_not_reached_keeps_the_fast_path(clean_dumps: Any) -> None:
    # Found measuring: with max_field_bytes=256, 300 rows whose 100-character fields are
    # never cut went to the Python renderer (5 ms against 24 us), because a string over
    # 42 characters "might" pass the cap as 6-byte escapes.
    rows: list[dict[str, Any]] = [
        {"id": i, "note": "é\n" * 40 + "x" * 20, "n": i * 3} for i in range(300)
    ]
    caps = Encoder(max_bytes=1 << 20, max_field_bytes=256)._caps
    assert clean_dumps(rows, 1 << 20, 0, caps) == orjson.dumps(rows)
    rows[150]["note"] += "x" * 80  # 262 bytes: the renderer cuts it
    assert clean_dumps(rows, 1 << 20, 0, caps) == _bound.UNCLEAN


@pytest.mark.parametrize("walk", [speedups.bound, _bound.py_bound], ids=["compiled", "python"])
def test_a_string_is_clean_exactly_when_orjson_writes_it_within_the_field_cap(walk: Any) -> None:
    # Each pair: the longest string of its kind that fits 32 bytes, quotes included,
    # and one character more. The walk measures the string only past 5 characters (6
    # bytes a character always fit); its bound stays a character a byte.
    for char, per in [("x", 1), ("\n", 2), ('"', 2), ("\x00", 6), ("\x7f", 1), ("é", 2),
                      ("€", 3), ("😀", 4)]:  # fmt: skip
        longest = char * (30 // per)
        assert len(orjson.dumps(longest)) <= 32 < len(orjson.dumps(longest + char))
        args = (BIG, 0, DEFAULT_MAX_DEPTH, BIG, BIG, 32, SCALARS)
        assert walk([longest], *args) == len(longest) + 4, repr(char)
        assert walk([longest + char], *args) == -1, repr(char)
    # A lone surrogate orjson refuses: the renderer writes it with its marker.
    assert walk(["x" * 10 + "\ud800"], BIG, 0, DEFAULT_MAX_DEPTH, BIG, BIG, 32, SCALARS) == -1


def test_scalars_count_ten_bytes_and_subclasses_are_refused() -> None:
    assert bound([dt.date(2024, 1, 2)]) == 12
    assert bound(uuid.UUID(int=0)) == 10

    class Str(str):
        pass

    assert bound([Str("x")]) == -1


def test_regression_deleted_and_split_dict_entries() -> None:
    # A deleted entry leaves a hole in the dict's entry array; an instance __dict__
    # keeps its values apart from its keys. Both must be walked like any dict.
    d = {"a": 1, "b": "xy", "c": [1, 2]}
    del d["a"]

    class Obj:
        def __init__(self) -> None:
            self.x = "abc"
            self.y = 2

    split = vars(Obj())
    for value in (d, split):
        assert bound(value) <= len(orjson.dumps(value))
        assert bound(value) >= len(orjson.dumps(value)) - 4 * len(value)


@pytest.mark.parametrize("walk", [speedups.bound, _bound.py_bound], ids=["compiled", "python"])
def test_the_walk_stops_once_the_bound_passes_the_cap(walk: Any) -> None:
    # A regression: the Python walk once summed every row of a list before it looked
    # at the cap, which made 64 KiB of 200,000 rows cost as much as all of them. The
    # unclean value at the end is seen only by a walk that goes too far.
    rows = [{"id": i, "name": "x" * 20} for i in range(1000)] + [object()]
    n = walk(rows, 2000, 0, 64, BIG, BIG, BIG, SCALARS)
    assert 2000 < n < 2100
    assert walk(rows, 10**9, 0, 64, BIG, BIG, BIG, SCALARS) == -1


@pytest.mark.parametrize("walk", [speedups.bound, _bound.py_bound], ids=["compiled", "python"])
def test_regression_the_walk_runs_no_python_code(walk: Any) -> None:
    # isinstance() looks up an object's __class__, which a property can answer with
    # any code, even code that empties the list being walked. The walk holds pointers
    # into that list, so it checks scalars by type alone.
    victim: list[Any] = []

    class Sneaky:
        @property  # type: ignore[misc]
        def __class__(self) -> type:
            victim.clear()
            return dt.date

    victim.extend([Sneaky(), "x" * 10, *range(100)])
    assert walk(victim, BIG, 0, 64, BIG, BIG, BIG, SCALARS) == -1
    assert len(victim) == 102


def test_bound_items_joins_items_with_commas() -> None:
    items: list[object] = [{"a": 1}, "xy", None]
    assert speedups.bound_items(items, BIG, 0, 64, BIG, BIG, BIG, None) == 7 + 4 + 1 + 2
    assert speedups.bound_items(tuple(items), BIG, 0, 64, BIG, BIG, BIG, None) == 14
    assert speedups.bound_items([], BIG, 0, 64, BIG, BIG, BIG, None) == 0
    assert speedups.bound_items([1, math.nan], BIG, 0, 64, BIG, BIG, BIG, None) == -1
    with pytest.raises(TypeError):
        speedups.bound_items({"a": 1}, BIG, 0, 64, BIG, BIG, BIG, None)  # type: ignore[arg-type]


def test_bad_arguments_raise() -> None:
    with pytest.raises(TypeError):
        speedups.bound([1])  # type: ignore[call-arg]
    with pytest.raises(ValueError, match="depth"):
        speedups.bound([1], 10, 0, 10_000, BIG, BIG, BIG, None)
    with pytest.raises(OverflowError):
        speedups.bound([1], 1 << 80, 0, 64, BIG, BIG, BIG, None)


caps = st.tuples(
    st.integers(0, 8),
    st.integers(0, 8) | st.just(BIG),
    st.integers(0, 8) | st.just(BIG),
    st.integers(2, 80) | st.just(BIG),
)


@settings(max_examples=1000)
@given(odd_values(), st.integers(0, 600), st.integers(0, 3), caps)
def test_compiled_and_python_walks_give_the_same_numbers(
    value: Any, cap: int, depth: int, limits: tuple[int, int, int, int]
) -> None:
    max_depth, max_items, max_keys, max_field = limits
    args = (cap, min(depth, max_depth), max_depth, max_items, max_keys, max_field, SCALARS)
    spines: tuple[list[Any], list[Any]] = ([], [])
    assert speedups.bound(value, *args, spines[0]) == _bound.py_bound(value, *args, spines[1])
    assert [(id(o), d, n) for o, d, n in spines[0]] == [(id(o), d, n) for o, d, n in spines[1]]
    if isinstance(value, list | tuple):
        assert speedups.bound_items(value, *args) == _bound.py_bound_items(value, *args)


@settings(max_examples=1000)
@given(odd_values(), st.integers(0, 600), st.integers(0, 3), caps)
def test_compiled_and_python_clean_dumps_agree(
    value: Any, cap: int, depth: int, limits: tuple[int, int, int, int]
) -> None:
    max_depth, max_items, max_keys, max_field = limits
    args = (cap, min(depth, max_depth), (max_depth, max_items, max_keys, max_field, SCALARS))
    got = speedups.clean_dumps(value, *args)
    assert got == _bound.py_clean_dumps(value, *args)
    compacted = speedups.clean_dumps(value, *args, None, True)
    assert compacted == got == _bound.py_clean_dumps(value, *args, None, True)
    if type(compacted) is bytes and len(compacted) < _bound.COMPACT_BELOW:
        assert sys.getsizeof(compacted) < len(compacted) + 64  # not orjson's 4 KiB
    if type(got) is bytes:
        assert got == orjson.dumps(value)
        assert len(got) <= cap
    else:
        assert got in (_bound.TOO_BIG, _bound.UNCLEAN)


_RESULT_TYPES = frozenset({dict, list, int})


def _record(*fields: Any) -> tuple[Any, ...]:
    return fields


@settings(max_examples=300)
@given(odd_values(), st.integers(0, 600))
def test_compiled_and_python_clean_result_agree(value: Any, cap: int) -> None:
    # A guard's pass-through: the record made of the bytes, or None where the guard's
    # own path must decide (a type not in the set, too big, unclean).
    args = (cap, (64, 2**40, 2**40, 2**40, SCALARS), _RESULT_TYPES, _record, "json")
    got = speedups.clean_result(value, *args)
    assert got == _bound.py_clean_result(value, *args)
    data = speedups.clean_dumps(value, cap, 0, args[1], None, True)
    if type(value) in _RESULT_TYPES and type(data) is bytes:
        assert got == (data, "json", len(data), None, None)
    else:
        assert got is None


def test_clean_result_refuses_what_is_not_its_arguments() -> None:
    with pytest.raises(TypeError, match="frozenset of types"):
        speedups.clean_result({}, 100, (64, 1, 1, 1, None), {dict}, _record, "json")  # type: ignore[arg-type]


@settings(max_examples=300)
@given(odd_values(), st.integers(0, 300))
def test_the_spine_holds_lower_bounds_of_each_containers_own_size(value: Any, cap: int) -> None:
    spine: list[Any] = []
    n = speedups.bound(value, cap, 0, 64, BIG, BIG, BIG, SCALARS, spine)
    if n < 0 or n <= cap:
        assert spine == []  # handed out only when the walk stopped at the cap
        return
    if not isinstance(value, list | tuple | dict | Record):
        assert spine == []  # a scalar past the cap: no container to tell of
        return
    assert spine[-1][0] is value  # deepest first, the value last
    assert spine[-1][1] == 0
    for container, depth, size in spine:
        assert size > 0
        assert depth >= 0
        # Past the stop the container may hold what orjson refuses (2**70).
        with contextlib.suppress(orjson.JSONEncodeError):
            assert len(orjson.dumps(container)) >= size


def test_a_dataclass_is_walked_as_orjson_writes_it() -> None:
    for value in (Record("a", [1, 2]), with_extra({"k": "v"}), [Record(1, Record(2, 3))]):
        assert bound(value) <= len(orjson.dumps(value))
        args = (BIG, 0, (64, BIG, BIG, BIG, SCALARS))
        assert speedups.clean_dumps(value, *args) == orjson.dumps(value)
        assert b"hidden" not in orjson.dumps(value)
    assert bound(Record("a", 1), max_keys=1) == -1  # name and value: _secret is not counted
    assert bound(Record("a", 1), max_keys=2) > 0
    assert bound(Record("a", float("nan"))) == -1
    assert bound(Slotted(1)) == -1  # orjson reads slots through descriptors: the renderer's

    class Undecorated(Record):
        pass

    assert bound(Undecorated("a", 1)) == -1  # orjson does not see a dataclass here
    assert speedups.bound(Record("a", 1), BIG, 0, 64, BIG, BIG, BIG, None) == -1


#: Calls of the Python attribute lookups below: a walk must make none.
_LOOKUPS: list[str] = []


class _Looks:
    def __getattribute__(self, name: str) -> Any:
        _LOOKUPS.append(name)
        return object.__getattribute__(self, name)


@dataclasses.dataclass
class _Audited:
    """A dataclass whose ``__getattribute__`` is Python (an audit hook, a lazy loader)."""

    x: int = 1

    def __getattribute__(self, name: str) -> Any:
        _LOOKUPS.append(name)
        return object.__getattribute__(self, name)


@dataclasses.dataclass
class _AuditedBase(_Looks):
    x: int = 1


@dataclasses.dataclass
class _DictProperty:
    x: int = 1

    @property
    def __dict__(self) -> dict[str, Any]:  # type: ignore[override]
        _LOOKUPS.append("__dict__")
        return {"x": float("nan")}


@dataclasses.dataclass
class _ErrorRow(Exception):  # a dataclass that is an exception
    x: int = 1


class _Other:
    pass


@dataclasses.dataclass
class _BorrowedDict:
    x: int = 1
    __dict__ = vars(_Other)["__dict__"]  # another class's descriptor: raises on this one


@dataclasses.dataclass
class _HookedLater:
    x: int = 1


_HookedLater.__getattribute__ = _Looks.__getattribute__  # type: ignore[method-assign,assignment]


@pytest.mark.parametrize("walk", [speedups.bound, _bound.py_bound], ids=["compiled", "python"])
@pytest.mark.parametrize(
    "cls", [_Audited, _AuditedBase, _DictProperty, _ErrorRow, _BorrowedDict, _HookedLater]
)
def test_regression_a_dataclass_read_through_python_code_is_unclean(walk: Any, cls: type) -> None:
    # Found by a tester: orjson reads a dataclass's members by getattr(obj, "__dict__"),
    # which runs a Python __getattribute__ (or a __dict__ property) in the middle of
    # writing the containers around it, and code there that changed them crashed the
    # compiled cut and orjson itself; a __dict__ property hid a NaN as null. The walk
    # admits only a class whose lookup of __dict__ is the generic one, and runs none.
    _LOOKUPS.clear()
    rows = [{"id": 0}, cls(), {"id": 1}]
    assert walk(rows, BIG, 0, 64, BIG, BIG, BIG, SCALARS) == -1
    args = (BIG, 0, (64, BIG, BIG, BIG, SCALARS))
    assert speedups.clean_dumps(rows, *args) == _bound.UNCLEAN
    assert _bound.py_clean_dumps(rows, *args) == _bound.UNCLEAN
    assert _LOOKUPS == []
    assert _bound.plain_dict(cls) is False


class _Meta(type):
    def __getattribute__(cls, name: str) -> Any:  # the class's lookups, not its instances'
        return type.__getattribute__(cls, name)


@dataclasses.dataclass
class _WithGetattr:
    x: int = 1

    def __getattr__(self, name: str) -> Any:  # asked only when a lookup fails
        raise AttributeError(name)


@dataclasses.dataclass
class _WithMeta(metaclass=_Meta):
    x: int = 1


@pytest.mark.parametrize("walk", [speedups.bound, _bound.py_bound], ids=["compiled", "python"])
@pytest.mark.parametrize("cls", [Record, _WithGetattr, _WithMeta])
def test_a_dataclass_whose_dict_lookup_is_generic_stays_clean(walk: Any, cls: Any) -> None:
    value = [cls(1, 2) if cls is Record else cls()]
    assert walk(value, BIG, 0, 64, BIG, BIG, BIG, SCALARS) == bound(
        orjson.loads(orjson.dumps(value))
    )
    assert _bound.plain_dict(cls) is True


@pytest.mark.parametrize("walk", [speedups.bound, _bound.py_bound], ids=["compiled", "python"])
def test_regression_an_empty_member_name_is_unclean(walk: Any) -> None:
    # Found by a tester: orjson aborts the process (a Rust panic) writing a dataclass
    # with an attribute named "" (it reads the name's first byte to skip _private ones).
    row = Record("a", 1)
    setattr(row, "", 2)
    assert walk([row], BIG, 0, 64, BIG, BIG, BIG, SCALARS) == -1


def test_regression_the_native_walk_enters_no_class_read_through_python_code() -> None:
    # pydantic reads a model's members by getattr(model, "__dict__"), inside orjson's
    # default where `values.whole` asks it: the walk enters only a class whose lookup
    # runs no Python code, and a Struct's slots (read directly) whatever its class.
    caps = (64, BIG, BIG, BIG, SCALARS)

    class Looked(Plain, _Looks):
        pass

    class Property(Plain):
        @property
        def __dict__(self) -> dict[str, Any]:  # type: ignore[override]
            return {"x": float("nan")}

    value = [Looked(x=1)]
    _LOOKUPS.clear()
    assert speedups.bound_native(value, BIG, 0, caps, {Looked: 0}) == (-1, None, None)
    assert speedups.bound_native([Property()], BIG, 0, caps, {Property: 0}) == (-1, None, None)
    assert _LOOKUPS == []
    assert speedups.bound_native([Plain(x=1)], BIG, 0, caps, {Plain: 0})[0] > 0


def test_regression_orjson_writes_with_the_collector_paused() -> None:
    # orjson allocates objects the collector tracks (a bound method when it asks a
    # timezone for dst()); a collection there ran finalizers and gc callbacks mid-write
    # (a segfault: tests/test_adversarial.py). The renderer's own orjson calls (a bulk
    # run) go through paused_dumps, as the compiled ones pause it in C. A Python tzinfo
    # shows what runs inside.
    seen: list[bool] = []

    class Zone(_PyZone):
        def utcoffset(self, when: Any) -> dt.timedelta:
            seen.append(gc.isenabled())
            return dt.timedelta(hours=1)

    dumps = _bound.paused_dumps
    assert gc.isenabled()
    assert dumps([dt.datetime(2024, 1, 2, tzinfo=Zone())]) == b'["2024-01-02T00:00:00+01:00"]'
    assert seen == [False]
    assert gc.isenabled()
    gc.disable()
    try:
        dumps([1])
        assert not gc.isenabled()  # a paused collector stays paused
    finally:
        gc.enable()
    with pytest.raises(orjson.JSONEncodeError):
        dumps([2**70])
    assert gc.isenabled()


def test_clean_dumps_takes_orjsons_refusal_for_unclean() -> None:
    # The walk cannot see an int beyond 64 bits; orjson refuses it, and the renderer
    # then gives it a marker.
    args = (BIG, 0, (64, BIG, BIG, BIG, SCALARS))
    assert speedups.clean_dumps([2**70], *args) == _bound.UNCLEAN
    with pytest.raises(TypeError, match="5-tuple"):
        speedups.clean_dumps([1], BIG, 0, (64, BIG, BIG, BIG))  # type: ignore[arg-type]


class _PyZone(dt.tzinfo):
    """A tzinfo written in Python: orjson would run its code in the middle of a walk."""

    def utcoffset(self, when: Any) -> dt.timedelta:
        return dt.timedelta(hours=1)

    def dst(self, when: Any) -> dt.timedelta:
        return dt.timedelta(0)

    def tzname(self, when: Any) -> str:
        return "PY"


@pytest.mark.parametrize("walk", ["compiled", "python"])
def test_only_builtin_timezones_are_clean(walk: str) -> None:
    def check(obj: Any) -> int:
        fn = speedups.bound if walk == "compiled" else _bound.py_bound
        return int(fn(obj, BIG, 0, DEFAULT_MAX_DEPTH, BIG, BIG, BIG, SCALARS))

    assert check([dt.datetime(2024, 1, 2, tzinfo=dt.UTC)]) > 0
    assert check([dt.datetime(2024, 1, 2)]) > 0
    assert check([dt.time(1, tzinfo=dt.timezone(dt.timedelta(hours=2)))]) > 0
    assert check([dt.datetime(2024, 1, 2, tzinfo=_PyZone())]) == -1
    assert check([dt.time(1, tzinfo=_PyZone())]) == -1


def test_compact_copies_only_the_length() -> None:
    data = orjson.dumps({"a": 1})
    small = speedups.compact(data)
    assert small == data
    assert small is not data
    with pytest.raises(TypeError):
        speedups.compact(bytearray(b"x"))  # type: ignore[arg-type]


encoders = st.builds(
    Encoder,
    max_bytes=st.integers(64, 3000),
    max_items=st.none() | st.integers(1, 8),
    max_keys=st.none() | st.integers(1, 8),
    max_field_bytes=st.none() | st.integers(32, 200),
    max_depth=st.integers(1, 8),
    strategy=st.sampled_from(["balanced", "prefix"]),
)


@settings(max_examples=300)
@given(odd_values(), encoders)
def test_compiled_and_python_walks_encode_alike(value: Any, enc: Encoder) -> None:
    compiled = enc.encode(value)
    with python_walk():
        python = enc.encode(value)
    assert compiled == python


@pytest.mark.parametrize("walk", ["compiled", "python"])
def test_regression_tuple_inside_a_flat_row_obeys_the_caps(walk: str) -> None:
    # CPython stops tracking a tuple of atomics, and then the dict holding it, in the
    # garbage collector. The Python walk once took an untracked dict to hold no
    # container, so the tuple escaped max_depth and max_items.
    row = {"t": (False, None)}
    gc.collect()
    assert not gc.is_tracked(row)
    with python_walk() if walk == "python" else nullcontext():
        deep = encode(row, max_bytes=200, max_depth=1)
        wide = encode(row, max_bytes=200, max_items=1)
        keys = encode({"a": row, "b": 1}, max_bytes=200, max_keys=1)
    assert [(t.path, t.kind) for t in keys.truncations] == [("/…", "keys")]
    assert [(t.path, t.kind) for t in deep.truncations] == [("/t", "depth")]
    assert [(t.path, t.kind) for t in wide.truncations] == [("/t/1", "items")]


# -- the front door of the one-call verbs ----------------------------------------------

#: The verbs with a compiled front door (typed loosely: the door's own attributes).
VERBS: tuple[Any, ...] = (jsonbudget.bounded_dumps, jsonbudget.encode)


def test_the_front_door_is_the_python_function_on_the_outside() -> None:
    for verb in VERBS:
        assert type(verb) is not type(test_bad_arguments_raise), "the compiled door is in use"
        inner = verb.__wrapped__
        assert inspect.signature(verb) == inspect.signature(inner)
        assert verb.__doc__ == inner.__doc__
        assert verb.__name__ == inner.__name__
        assert verb.__module__ == "jsonbudget"


@settings(max_examples=500)
@given(odd_values(), st.integers(0, 700))
def test_the_front_door_answers_as_the_function_does(value: Any, budget: int) -> None:
    for verb in VERBS:
        inner = verb.__wrapped__
        assert outcome(verb, value, max_bytes=budget) == outcome(inner, value, max_bytes=budget)


@pytest.mark.parametrize(
    ("args", "kwargs"),
    [
        ((), {"max_bytes": 100}),  # no value
        (({"a": 1},), {"max_bytes": True}),  # a bool is not a budget
        (({"a": 1},), {"max_bytes": 100.0}),
        (({"a": 1},), {"max_bytes": 2**70}),
        (({"a": 1},), {"max_bytes": 10}),  # under the minimum
        (({"a": 1},), {"max_bytes": 100, "strategy": "widest"}),
        (({"a": 1},), {"max_bytes": 100, "colour": "red"}),
        (({"a": 1}, None, None), {}),
    ],
)
def test_every_other_call_gets_the_functions_own_answer(
    args: tuple[Any, ...], kwargs: dict[str, Any]
) -> None:
    for verb in VERBS:
        inner = verb.__wrapped__
        assert outcome(verb, *args, **kwargs) == outcome(inner, *args, **kwargs)


def outcome(fn: Any, *args: Any, **kwargs: Any) -> tuple[Any, ...]:
    """What a call gives: ("returned", value) or ("raised", its type, its message)."""
    try:
        return ("returned", fn(*args, **kwargs))
    except (TypeError, LimitError) as exc:
        return ("raised", type(exc), str(exc))


def test_the_front_door_pickles_by_name_as_a_function_does() -> None:
    # A process pool pickles the function it is handed.
    for verb in VERBS:
        assert pickle.loads(pickle.dumps(verb)) is verb
        assert copy.deepcopy(verb) is verb


def test_the_front_door_copies_short_results_out_of_orjsons_buffer() -> None:
    small = jsonbudget.bounded_dumps({"a": 1}, max_bytes=100)
    assert sys.getsizeof(small) < 100  # not orjson's 4 KiB
    assert jsonbudget.encode({"a": 1}, max_bytes=100) == jsonbudget.Encoded(b'{"a":1}', True, ())


# -- the compiled constructor ------------------------------------------------------------


def test_the_compiled_constructor_makes_equal_frozen_values() -> None:
    assert _frozen._maker is not None, "the compiled constructor is in use"
    make = _frozen.fast_constructor(jsonbudget.Truncation)
    got = make("/a", "string", 3, "chars")
    assert got == jsonbudget.Truncation("/a", "string", 3, "chars")
    assert hash(got) == hash(jsonbudget.Truncation("/a", "string", 3, "chars"))
    with pytest.raises(dataclasses.FrozenInstanceError):
        got.path = "/b"  # type: ignore[misc]
    with pytest.raises(TypeError, match="exactly 4 positional"):
        make("/a")
    with pytest.raises(TypeError, match="exactly 4 positional"):
        make("/a", "string", 3, unit="chars")
    py = _frozen._py_constructor(jsonbudget.Truncation, _slots(jsonbudget.Truncation))
    assert py("/a", "string", 3, "chars") == got


def _slots(cls: type) -> tuple[Any, ...]:
    return tuple(vars(cls)[f.name] for f in dataclasses.fields(cls))


def test_the_compiled_constructor_refuses_what_is_not_an_object_slot() -> None:
    assert _frozen._maker is not None

    @dataclasses.dataclass(frozen=True, slots=True)
    class Other:
        x: Any

    with pytest.raises(TypeError, match="not a writable object slot"):
        _frozen._maker(jsonbudget.Truncation, _slots(Other))  # another class's slot
    with pytest.raises(TypeError, match="not a writable object slot"):
        _frozen._maker(jsonbudget.Truncation, (property(lambda s: 1),))
    with pytest.raises(TypeError):
        _frozen._maker(jsonbudget.Truncation, list(_slots(jsonbudget.Truncation)))


def test_values_held_by_compiled_instances_are_released() -> None:
    make = _frozen.fast_constructor(jsonbudget.Truncation)
    # Built at run time: a literal is folded and, from Python 3.12, immortal (PEP 683),
    # its reference count fixed.
    data = "".join(["x"] * 100)
    before = sys.getrefcount(data)
    made = [make(data, "string", 1, "chars") for _ in range(100)]
    assert sys.getrefcount(data) == before + 100
    del made
    gc.collect()
    assert sys.getrefcount(data) == before


def test_records_of_atomic_values_are_kept_out_of_the_cycle_collector() -> None:
    """Regression: a turn keeping thousands of admitted results had every collection
    walk all of them again; keeping a result cost three times making it."""
    make = _frozen.fast_constructor(jsonbudget.Truncation)
    assert not gc.is_tracked(make("/a", "string", 3, "chars"))
    assert not gc.is_tracked(make("/a", "items", None, "items"))
    held = make("/a", "string", [3], "chars")  # not a record's value, but it may cycle
    assert gc.is_tracked(held)
    turn = jsonbudget.TurnBudget(max_bytes=10**7, max_calls=1000)
    before = len(gc.get_objects())
    admitted = [turn.admit({"i": i}) for i in range(1000)]
    assert len(gc.get_objects()) - before < 50  # the list, not its thousand records
    assert all(a.reason == "fits" for a in admitted)


def test_records_with_slots_the_constructor_does_not_fill_stay_tracked() -> None:
    @dataclasses.dataclass(frozen=True, slots=True)
    class Two:
        x: Any
        y: Any

    class Base:
        __slots__ = ("x",)

    class Open(Base):  # its __dict__ could later hold anything, a cycle included
        pass

    assert _frozen._maker is not None
    assert not gc.is_tracked(_frozen.fast_constructor(Two)(1, 2))
    assert gc.is_tracked(_frozen.fast_constructor(Two, ("x",))(1))  # y is left empty
    assert not gc.is_tracked(_frozen._maker(Base, (vars(Base)["x"],))(1))
    assert gc.is_tracked(_frozen._maker(Open, (vars(Base)["x"],))(1))


# -- the compiled string cut --------------------------------------------------------------

texts = st.text(
    st.sampled_from(["a", "\ud800", "\udfff", "é", "€", "😀", '"', "\\", "\x01", "\n", "\x7f"])
    | st.characters(),
    max_size=120,
)


@settings(max_examples=1500)
@given(texts, st.integers(0, 400), st.booleans())
def test_the_compiled_string_cut_escapes_as_orjson_does(s: str, room: int, wide: bool) -> None:
    if wide:
        s = "\u0100" + s  # a 2-byte string (and 4-byte ones come with emoji)
    mark = lambda kept: (b'"', b'%d more"' % (len(s) - kept))  # noqa: E731
    got = speedups.cut_string(s, room, mark, 1, 20)
    assert got == strings.py_cut_string(s, room, mark, 1, 20)
    data, kept, replaced = got
    assert len(data) - 1 - len(b'%d more"' % (len(s) - kept)) <= room
    clean, lone = strings.SURROGATE.subn("\ufffd", s[:kept])
    assert data.startswith(orjson.dumps(clean)[:-1])  # orjson's own bytes for the prefix
    assert replaced == lone


# Runs of plain ASCII on both sides of the 16-character blocks the cut copies at once,
# stopped by every kind of character that is not plain, in strings of every width.
runs = st.lists(
    st.integers(0, 40).map(lambda n: "x" * n)
    | st.sampled_from(['"', "\\", "\n", "\x1f", "\x7f", "é", "\u201c", "\ud800", "😀", "\uffff"]),
    max_size=30,
).map("".join)


@settings(max_examples=1000)
@given(runs, st.integers(0, 600), st.sampled_from(["", "\u0100", "😀"]))
def test_the_compiled_string_cut_copies_plain_runs_exactly(s: str, room: int, lead: str) -> None:
    s = lead + s
    mark = lambda kept: (b'"', b'"')  # noqa: E731
    got = speedups.cut_string(s, room, mark, 1, 1)
    assert got == strings.py_cut_string(s, room, mark, 1, 1)
    data, kept, replaced = got
    clean, lone = strings.SURROGATE.subn("\ufffd", s[:kept])
    assert data == orjson.dumps(clean)
    assert replaced == lone
    assert len(data) - 2 <= room
    # The longest prefix that fits: one more character would not.
    if kept < len(s):
        longer = orjson.dumps(strings.SURROGATE.sub("\ufffd", s[: kept + 1]))
        assert len(longer) - 2 > room


def test_the_compiled_string_cut_refuses_marks_past_their_room() -> None:
    for cut in (speedups.cut_string, strings.py_cut_string):
        with pytest.raises(ValueError, match="within their rooms"):
            cut("abc", 10, lambda kept: (b'""', b'"'), 1, 1)
        with pytest.raises(ZeroDivisionError):
            cut("abc", 10, lambda kept: (bytes(1 // 0), b""), 1, 1)


def test_the_compiled_string_cut_costs_the_room_not_the_string() -> None:
    # A 50-million-character string cut to 100 bytes: only the prefix is read.
    huge = "x" * 50_000_000
    data, kept, _ = speedups.cut_string(huge, 100, lambda kept: (b'"', b'"'), 1, 1)
    assert kept == 100
    assert data == b'"' + b"x" * 100 + b'"'


# -- the walk of native models ------------------------------------------------------------


class Plain:
    def __init__(self, **fields: Any) -> None:
        self.__dict__.update(fields)


class HashingMeta(type):
    def __hash__(cls) -> int:  # Python code a dict lookup of the class would run
        raise AssertionError("the walk ran Python code")


class Hashed(Plain, metaclass=HashingMeta):
    pass


def test_the_native_walk_enters_only_the_classes_it_is_given() -> None:
    caps = (64, BIG, BIG, BIG, SCALARS)
    value = {"a": Plain(x=1, name="ab"), "b": [Plain(x=2, name="c")]}
    assert speedups.bound_native(value, BIG, 0, caps, {}) == (-1, Plain, None)  # learn, retry
    n, missing, run = speedups.bound_native(value, BIG, 0, caps, {Plain: 5})
    assert missing is None
    assert run is None  # a dict, not a list of one class
    assert n == bound({"a": {"x": 1, "name": "ab"}, "b": [{"x": 2, "name": "c"}]}) + 2 * 5
    nan = Plain(x=float("nan"))
    assert speedups.bound_native(nan, BIG, 0, caps, {Plain: 0}) == (-1, None, None)
    # A class whose metaclass hashes in Python is never looked up, so never entered.
    assert speedups.bound_native(Hashed(x=1), BIG, 0, caps, {}) == (-1, None, None)
    assert _bound.py_bound_native(value, BIG, 0, caps, {Plain: 5}) == (-1, None, None)  # twin


def test_the_native_walk_reads_only_slots_checked_to_be_the_classes_own() -> None:
    import msgspec

    class P(msgspec.Struct):
        x: int
        name: str

    class Q(msgspec.Struct):
        y: int

    caps = (64, BIG, BIG, BIG, SCALARS)
    own = (10, (P.x, P.name))
    assert speedups.bound_native([P(1, "ab")], BIG, 0, caps, {P: own}) == (
        2 + (2 + 10 + 1 + 1 + 4),  # brackets; braces, keys, comma, 1, "ab"
        None,
        P,
    )
    with pytest.raises(TypeError, match="not an object slot"):
        speedups.bound_native(P(1, "a"), BIG, 0, caps, {P: (0, (Q.y,))})
    with pytest.raises(TypeError, match="not an object slot"):
        speedups.bound_native(P(1, "a"), BIG, 0, caps, {P: (0, (property(),))})


# --- the sources' check of what orjson read (_sources/_numbers.c) -----------------------


def _holds_rounded(value: Any) -> bool:
    if type(value) is float:
        return abs(value) >= 2.0**63
    if type(value) is list:
        return any(map(_holds_rounded, value))
    if type(value) is dict:
        return any(map(_holds_rounded, value.values()))
    return False


_edge_floats = st.sampled_from([2.0**63, -(2.0**63), 1.8446744073709552e19, 9.2e18, 1e300])


@settings(max_examples=300, deadline=None)
@given(
    value=st.recursive(st.one_of(json_values(), _edge_floats), lambda c: st.lists(c, max_size=4))
)
def test_rounded_finds_exactly_the_floats_beyond_2_63(value: Any) -> None:
    assert numbers.rounded(value) is _holds_rounded(value)
    assert jsonread.exact(b"", value) is not _holds_rounded(value)


@pytest.mark.parametrize(
    ("literal", "rounded"),
    [
        ("9223372036854775807", False),
        ("-9223372036854775808", False),
        ("18446744073709551615", False),  # orjson's largest exact integer: 2**64 - 1
        ("18446744073709551616", True),
        ("-9223372036854775809", True),
        ("123456789012345678901234567890", True),
        ('"12345678901234567890123"', False),  # digits in a string are no number
        ("1e19", True),  # a float that large goes to the exact parser too: only slower
    ],
)
def test_rounded_at_orjsons_integer_limits(literal: str, rounded: bool) -> None:
    value = orjson.loads(f'[{{"n": {literal}}}]')
    assert numbers.rounded(value) is rounded


def test_rounded_checks_as_deep_as_a_batch_of_orjsons_values() -> None:
    small = orjson.loads("[" * 1024 + "1.5" + "]" * 1024)  # as deep as orjson reads
    big = orjson.loads("[" * 1024 + "1e300" + "]" * 1024)
    assert numbers.rounded([small]) is False  # a batch of lines adds a level
    assert numbers.rounded([big]) is True
    assert numbers.rounded([[small]]) is True  # deeper than orjson nests: not looked into


def test_a_digit_string_in_every_line_is_read_by_orjson(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """Regression: a run of 19 digits anywhere in a line (a nanosecond timestamp in a
    string) sent every such line through the pure-Python parser, about 40x slower."""
    calls: list[bytes] = []

    def counted(data: Any, **kwargs: Any) -> Any:
        calls.append(data)
        return jsonread.load_json(data, **kwargs)

    monkeypatch.setattr(files, "load_json", counted)
    rows = [{"id": i, "ts": str(1_700_000_000_000_000_000 + i)} for i in range(3000)]
    path = tmp_path / "ts.jsonl"
    path.write_bytes(b"\n".join(map(orjson.dumps, rows)) + b"\n")
    source = jsonbudget.JsonLinesSource(path)
    assert [row for row, _ in source.open(None)] == rows  # line by line
    builder = jsonbudget.PageBuilder(jsonbudget.Limits(1 << 20))
    more, _ = source.fill(builder, None)
    assert not more
    assert list(builder.finish(complete=True, next_cursor=None).items) == rows  # in batches
    assert calls == []
    # A number beyond 64 bits still goes to the exact parser, which keeps it an int.
    path.write_bytes(b'{"id": 1, "n": 18446744073709551616}\n')
    assert [row for row, _ in source.open(None)] == [{"id": 1, "n": 2**64}]
    assert len(calls) == 1


# --- the SQL sources' row dicts (_sources/_numbers.c rows_to_dicts) ---------------------

_cells = st.one_of(
    st.none(),
    st.integers(),
    st.text(max_size=5),
    st.binary(max_size=5),
    st.floats(allow_nan=False),
)


@settings(max_examples=300, deadline=None)
@given(
    width=st.integers(1, 4),
    n_flags=st.integers(0, 2),
    data=st.data(),
)
def test_rows_to_dicts_compiled_and_python_agree(width: int, n_flags: int, data: Any) -> None:
    columns = tuple(f"c{i}" for i in range(width))
    flags_at = width + data.draw(st.integers(0, 1))  # a hidden key column may come first
    row = st.tuples(*[_cells] * (flags_at + n_flags))
    rows: list[Any] = data.draw(st.lists(st.one_of(row, row.map(list)), max_size=6))
    start = data.draw(st.integers(0, len(rows) + 1))
    long_at = tuple(data.draw(st.lists(st.integers(0, width - 1), max_size=2, unique=True)))
    longest = data.draw(st.integers(0, 5))
    args = (columns, rows, start, flags_at, n_flags, long_at, longest)
    compiled = numbers.rows_to_dicts(*args)
    assert compiled == sql.rows_to_dicts_py(*args)
    made, stop = compiled
    # Every row before the stop is a dict of the first columns; the stop is the first
    # row that is not a tuple, has a flag set or bytes longer than *longest* at long_at.
    assert made == [dict(zip(columns, r, strict=False)) for r in rows[start:stop]]
    if stop < len(rows):
        r = rows[stop]
        assert (
            type(r) is not tuple
            or any(x is not None for x in r[flags_at:])
            or any(type(r[j]) is bytes and len(r[j]) > longest for j in long_at)
        )


_near_bound = st.one_of(
    st.none(),
    st.integers(),
    st.text(max_size=8),
    st.text(alphabet="aé€😀", max_size=8),
    st.binary(max_size=8),
)


@settings(max_examples=300, deadline=None)
@given(data=st.data())
def test_first_over_compiled_and_python_agree(data: Any) -> None:
    width = data.draw(st.integers(1, 4))
    row = st.tuples(*[_near_bound] * width)
    rows: list[Any] = data.draw(st.lists(st.one_of(row, row.map(list)), max_size=6))
    start = data.draw(st.integers(0, len(rows) + 1))
    long_at = tuple(data.draw(st.lists(st.integers(0, width), max_size=2, unique=True)))
    longest = data.draw(st.integers(0, 12))
    compiled = numbers.first_over(rows, start, long_at, longest)
    assert compiled == sql.first_over_py(rows, start, long_at, longest)
    # Every row before it is a tuple whose cells at long_at take at most *longest* bytes.
    for r in rows[start:compiled]:
        assert type(r) is tuple
        for j in long_at:
            v = r[j]
            size = len(v.encode()) if isinstance(v, str) else len(v) if isinstance(v, bytes) else 0
            assert size <= longest


def test_first_over_refuses_what_is_not_its_arguments() -> None:
    with pytest.raises(TypeError, match="first_over"):
        numbers.first_over((), 0, (), 0)  # type: ignore[arg-type]
    with pytest.raises(ValueError, match="out of range"):
        numbers.first_over([], -1, (), 0)
    with pytest.raises(ValueError, match="long_at out of range"):
        numbers.first_over([], 0, (-1,), 0)


@settings(max_examples=300, deadline=None)
@given(data=st.data())
def test_text_bytes_compiled_and_python_agree(data: Any) -> None:
    width = data.draw(st.integers(0, 4))
    row = st.tuples(*[_near_bound] * width)
    rows: list[Any] = data.draw(st.lists(st.one_of(row, row.map(list)), max_size=6))
    start = data.draw(st.integers(0, len(rows) + 1))
    compiled = numbers.text_bytes(rows, start)
    assert compiled == sql.text_bytes_py(rows, start)
    # The sum of what each tuple's str and bytes cells hold, counted by hand.
    assert compiled == sum(
        len(v) for r in rows[start:] if type(r) is tuple for v in r if type(v) in (str, bytes)
    )


def test_text_bytes_refuses_what_is_not_its_arguments() -> None:
    with pytest.raises(TypeError, match="text_bytes"):
        numbers.text_bytes((), 0)  # type: ignore[arg-type]
    with pytest.raises(ValueError, match="out of range"):
        numbers.text_bytes([], -1)


def test_rows_to_dicts_refuses_what_is_not_its_arguments() -> None:
    with pytest.raises(TypeError, match="rows_to_dicts"):
        numbers.rows_to_dicts(["a"], [], 0, 1, 0, (), 0)  # type: ignore[arg-type]
    with pytest.raises(TypeError, match="rows_to_dicts"):
        numbers.rows_to_dicts(("a",), [], 0, 1, 0)  # type: ignore[call-arg]
    with pytest.raises(ValueError, match="out of range"):
        numbers.rows_to_dicts(("a", "b"), [], 0, 1, 0, (), 0)
    with pytest.raises(ValueError, match="long_at out of range"):
        numbers.rows_to_dicts(("a",), [], 0, 1, 0, (1,), 0)


#: Bytes that make or break a JSON Lines chunk's structure, and a few that do not; long
#: plain runs and backslash runs carry strings and escapes across the compiled check's
#: 64-byte blocks.
_STRUCTURE = (
    st.binary(max_size=0)
    | st.sampled_from(list(b'[]{},\n"\\ a1:')).map(lambda c: bytes([c]))
    | st.integers(1, 130).map(lambda n: b"a" * n)
    | st.integers(1, 9).map(lambda n: b"\\" * n)
)


@settings(max_examples=1500, deadline=None)
@given(
    parts=st.lists(
        _STRUCTURE | st.sampled_from([b'"a\\"b"', b'"\\\\"', b"[1,2]", b'{"k":"v"}\n']),
        max_size=40,
    )
)
def test_lines_array_compiled_and_python_agree(parts: list[bytes]) -> None:
    chunk = b"".join(parts)
    assert numbers.lines_array(chunk) == files.lines_array_py(chunk)


@pytest.mark.parametrize(
    ("chunk", "expected"),
    [
        (b'{"a":1}\n[1,2]\n"x\\"y"\n', b'[{"a":1},[1,2],"x\\"y"]'),
        (b'{"a":"],[\\n"}\n1\n', b'[{"a":"],[\\n"},1]'),  # structure in a string
        (b'{"a":1\n"b":2}\n', None),  # a container open at a line's end
        (b'"abc\ndef"\n', None),  # a string open at a line's end
        (b'"a\\\n"\n', None),  # an escape of the line break
        (b"1,2\n", None),  # two values on a line
        (b"1],[2\n", None),  # closes what it did not open
        (b'1\\"\n', None),  # a backslash outside a string
        (b"[1]\n[2]", b"[[1],[2]]"),
        (b"", b"[]"),
        # A string that runs across the 64-byte blocks, with an escaped quote at the
        # first byte of the second block and a backslash run ending the third.
        (
            b'"' + b"x" * 62 + b'\\"' + b"y" * 60 + b'\\\\"\n7\n',
            b'["' + b"x" * 62 + b'\\"' + b"y" * 60 + b'\\\\",7]',
        ),
        (
            b'"' + b"x" * 61 + b'\\"' + b"y" * 60 + b'\\\\"\n7\n',
            b'["' + b"x" * 61 + b'\\"' + b"y" * 60 + b'\\\\",7]',
        ),
        (b'"' + b"x" * 62 + b'\\"\n7\n', None),  # the escaped quote leaves it open
    ],
)
def test_lines_array_joins_only_one_value_a_line(chunk: bytes, expected: bytes | None) -> None:
    assert numbers.lines_array(chunk) == expected
    assert files.lines_array_py(chunk) == expected


def test_regression_a_record_holding_a_dict_hid_a_later_cycle() -> None:
    """A dict of atomic values is untracked by CPython until a container is stored in it,
    and the record holding it was then untracked for good: a cursor state whose position
    a caller changed to point back at the state leaked, where the pure-Python twin's was
    collected."""
    store = jsonbudget.MemoryCursorStore()
    scope = jsonbudget.Scope("a")
    state = store.resume(store.mint(store.start(scope, max_pages=None), {"offset": 5}), scope)
    assert gc.is_tracked(state)

    class Holder:
        state: Any = None

    holder = Holder()
    gone = weakref.ref(holder)
    position: Any = state.position  # a caller's own use of the dict, not JSON
    position["holder"] = holder
    holder.state = state
    del holder, state, position
    gc.collect()
    assert gone() is None
    # Records holding only atomic values, untracked records among them, stay untracked.
    make = _frozen.fast_constructor(jsonbudget.Truncation)
    inner = make("/a", "string", 3, "chars")
    assert not gc.is_tracked(make("/b", "string", (1, "x"), inner))
    assert gc.is_tracked(make("/b", "string", {}, "chars"))

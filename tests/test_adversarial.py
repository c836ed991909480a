"""Hostile inputs: each case a named test; the dangerous ones in a bounded subprocess.

A case that could hang, exhaust memory or crash runs in a child interpreter with an
address-space limit and a timeout, so a regression fails the test instead of the run.
Complexity is checked by counting work (the renderer's calls plus the values the size
walk visits: `tests.workcount`), never by wall time.
"""

from __future__ import annotations

import collections
import dataclasses
import inspect
import json
import math
import sys
from collections.abc import Callable, Iterator, Mapping
from typing import Any

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from jsonbudget import (
    EncodeError,
    Encoder,
    LimitError,
    Limits,
    Paginator,
    Scope,
    bounded_dumps,
    encode,
)
from jsonbudget.typing import Strategy
from tests import workcount
from tests.jsonptr import resolve
from tests.limited import MEMORY, bounded_run
from tests.strategies import RepeatsKeys, budgets, hostile_values, lying_str

MARK = "…["
#: The child's address space: the interpreter, the package and a few hundred MB of data.


def valid(data: bytes, max_bytes: int) -> Any:
    assert len(data) <= max_bytes
    return json.loads(
        data.decode("utf-8"), parse_constant=_no_constant, object_pairs_hook=_unique_keys
    )


def _no_constant(name: str) -> None:
    raise AssertionError(f"non-standard constant {name}")


def _unique_keys(pairs: list[tuple[str, Any]]) -> dict[str, Any]:
    # A parser keeps one of two equal keys: a report could name the other.
    keys = [k for k, _ in pairs]
    assert len(set(keys)) == len(keys), f"a key written twice: {keys}"
    return dict(pairs)


@dataclasses.dataclass
class Node:
    kids: list[Any]


def tree(depth: int) -> Node:
    return Node([tree(depth - 1), tree(depth - 1)] if depth else [])


def shared(depth: int, leaf: Any) -> Any:
    x = leaf
    for _ in range(depth):
        x = [x, x]
    return x


def work(obj: Any, budget: int, **options: Any) -> tuple[int, int]:
    """(bytes written, work counted) for one encode of *obj* into *budget*."""
    data, count = workcount.work(obj, budget, **options)
    valid(data, budget)
    return len(data), count


# -- cost: linear in the output, never 2**depth ------------------------------------------


@pytest.mark.parametrize("strategy", ["balanced", "prefix"])
@pytest.mark.parametrize("budget", [4096, 65536])
def test_work_per_output_byte_is_flat_in_depth(strategy: str, budget: int) -> None:
    per_byte = []
    for depth in range(4, 17, 2):
        size, calls = work(tree(depth), budget, strategy=strategy)
        assert calls / size < 0.5  # well under one visit per output byte
        if size > budget // 2:
            # Only trees that are cut are compared: one that fits whole is walked once
            # and written by one library call, about half a cut's work a byte.
            per_byte.append(calls / size)
    assert len(per_byte) >= 3, per_byte
    assert max(per_byte) <= 2 * min(per_byte), per_byte


@pytest.mark.parametrize("strategy", ["balanced", "prefix"])
@pytest.mark.parametrize("leaf", [Node([]), float("nan")], ids=["dataclass", "nan"])
def test_shared_subtrees_are_not_rewalked_per_reference(strategy: str, leaf: Any) -> None:
    # 2**20 paths, 21 distinct nodes: the work follows the output, not the paths.
    for depth in range(4, 21, 4):
        size, calls = work(shared(depth, leaf), 4096, strategy=strategy)
        assert calls <= size + 20 * depth, (depth, size, calls)


def test_a_dataclass_tree_that_fits_is_rendered_whole_once() -> None:
    size, calls = work(tree(10), 65536)
    nodes = 2 * (2**11 - 1)  # each Node and its list
    assert size == len(json.dumps(dataclasses.asdict(tree(10)), separators=(",", ":")))
    assert calls <= nodes + 1


def test_an_ordered_dict_tree_is_linear_too() -> None:
    def otree(depth: int) -> Any:
        return collections.OrderedDict(kids=[otree(depth - 1), otree(depth - 1)] if depth else [])

    small = work(otree(8), 4096)
    big = work(otree(14), 4096)
    assert big[1] / big[0] <= 2 * small[1] / small[0]


def test_a_default_hook_that_returns_ever_more_work_ends() -> None:
    class Self:
        pass

    out = bounded_dumps(Self(), max_bytes=4096, default=lambda o: [Self(), Self()])
    doc = valid(out, 4096)
    assert MARK in json.dumps(doc, ensure_ascii=False)


# -- never invalid -----------------------------------------------------------------------


def test_regression_a_default_hook_that_empties_the_list_being_encoded() -> None:
    lst = [object() for _ in range(50)]

    def empty(o: object) -> int:
        lst.clear()
        return 1

    doc = valid(bounded_dumps({"a": lst, "b": lst}, max_bytes=200, default=empty), 200)
    assert doc["a"][-1].startswith(MARK) or doc["a"] == [1] * len(doc["a"])


def test_regression_a_default_hook_that_pops_from_the_list_being_encoded() -> None:
    lst = [object() for _ in range(50)]
    out = bounded_dumps({"a": lst}, max_bytes=400, default=lambda o: (lst.pop(), 1)[1])
    assert valid(out, 400) == {"a": [1] * 50}  # the list as it was read


def test_regression_a_default_hook_that_adds_keys_to_the_dict_being_encoded() -> None:
    d: dict[str, Any] = {"a": object(), "b": 2}
    hook = lambda o: (d.update({f"k{i}": i for i in range(100)}), 1)[1]  # noqa: E731
    assert valid(bounded_dumps(d, max_bytes=200, default=hook), 200) == {"a": 1, "b": 2}


class LongLiar(list[Any]):
    def __len__(self) -> int:
        return 1000


class ShortLiar(list[Any]):
    def __len__(self) -> int:
        return 1


@pytest.mark.parametrize("liar", [LongLiar, ShortLiar])
@pytest.mark.parametrize("tail", [3, float("nan")], ids=["clean", "unclean"])
def test_regression_a_list_whose_len_lies(liar: type[list[Any]], tail: Any) -> None:
    obj = {"x": liar([1, 2, tail]), "y": 1}
    for budget in (64, 100, 200):
        doc = valid(bounded_dumps(obj, max_bytes=budget), budget)
        assert doc["y"] == 1 or "…" in doc


def test_regression_a_list_shrunk_by_another_thread_is_read_once() -> None:
    # The renderer reads a container into a snapshot before it writes a comma; a
    # default hook stands in for the other thread, shrinking the list mid-encode.
    rows = [[object(), i] for i in range(200)]

    def shrink(o: object) -> int:
        if rows:
            rows.pop()
        return 0

    out = encode(rows, max_bytes=2000, default=shrink)
    valid(out.data, 2000)


# -- hostile mappings and reprs ----------------------------------------------------------


class Defaults(Mapping[str, Any]):
    """Claims every key: ``"…" in m`` is always True."""

    def __getitem__(self, key: str) -> int:
        return 1

    def __contains__(self, key: object) -> bool:
        return True

    def __iter__(self) -> Iterator[str]:
        return iter(["…", "a", "…1"])

    def __len__(self) -> int:
        return 3


def test_regression_a_mapping_that_claims_every_key_does_not_hang() -> None:
    code = """
    import collections.abc, json
    from jsonbudget import bounded_dumps

    class Defaults(collections.abc.Mapping):
        def __getitem__(self, key): return 1
        def __contains__(self, key): return True
        def __iter__(self): return iter(["…", "a", "…1"])
        def __len__(self): return 3

    for budget in (64, 100, 400):
        for strategy in ("balanced", "prefix"):
            out = bounded_dumps({"m": Defaults(), "n": [float("nan")] * 30}, max_bytes=budget,
                                strategy=strategy, max_keys=2)
            json.loads(out)
    print("ok")
    """
    assert bounded_run(code, timeout=30) == "ok\n"


def test_a_mapping_that_claims_every_key_gets_a_unique_marker_key() -> None:
    out = encode({"m": Defaults()}, max_bytes=200, max_keys=2)
    doc = valid(out.data, 200)
    assert len(doc["m"]) == 3  # two members and a marker under a key they do not use
    marker = next(t for t in out.truncations if t.kind == "keys")
    # Its len() is not trusted: the count of a user mapping is known only once read.
    assert resolve(doc, marker.path) == "[omitted: more keys]"
    assert marker.omitted is None


class Endless(Mapping[str, int]):
    def __getitem__(self, key: str) -> int:
        return 1

    def __iter__(self) -> Iterator[str]:
        return (str(i) for i in iter(int, 1))

    def __len__(self) -> int:
        return 10


@pytest.mark.parametrize("strategy", ["balanced", "prefix"])
@pytest.mark.parametrize("budget", [64, 100, 1000])
def test_regression_a_mapping_that_repeats_a_key_writes_it_once(
    strategy: Strategy, budget: int
) -> None:
    # Found by a tester: {"a":"xxx…[truncated: 945 more chars]","a":1}, its report at
    # /a, which a parser resolves to the 1. The repeat is written under a marked key.
    class Twice(dict[str, Any]):
        def items(self) -> Any:
            return iter([("a", "x" * 1000), ("a", 1)])

    for obj in (Twice(a=1), RepeatsKeys({"a": [1, 2]})):
        out = encode({"m": obj}, max_bytes=budget, strategy=strategy)
        doc = valid(out.data, budget)
        for t in out.truncations:
            resolve(doc, t.path)
        repeats = [t for t in out.truncations if t.kind == "unencodable" and t.unit == "keys"]
        for t in repeats:
            assert "…[key repeated: str 'a']" in t.path
        if budget == 1000 and isinstance(obj, RepeatsKeys):  # it fits whole
            assert doc["m"] == {"a": [1, 2], "…[key repeated: str 'a']": [1, 2]}
            assert len(repeats) == 1


def test_regression_a_cut_key_reports_the_lone_surrogates_it_replaced() -> None:
    # Found by a tester: a value's replacements were reported, a cut key's were not.
    out = encode({"\ud800" * 1000: "v"}, max_bytes=100)
    doc = valid(out.data, 100)
    (key,) = doc
    kinds = {t.kind: t for t in out.truncations}
    assert kinds["string"].omitted == 1000 - key.count("\ufffd")
    assert kinds["unencodable"].omitted == key.count("\ufffd") > 0
    assert kinds["unencodable"].path == kinds["string"].path == "/" + key


def test_a_mapping_that_iterates_forever_is_read_as_far_as_fits() -> None:
    doc = valid(bounded_dumps({"m": Endless()}, max_bytes=200), 200)
    assert "…" in doc["m"]


class Raising(Mapping[str, int]):
    def __getitem__(self, key: str) -> int:
        raise RuntimeError("boom")

    def __iter__(self) -> Iterator[str]:
        return iter(["a"])

    def __len__(self) -> int:
        return 1


def test_a_mapping_that_raises_gives_an_encode_error_with_the_cause() -> None:
    with pytest.raises(EncodeError) as info:
        encode({"x": Raising()}, max_bytes=200)
    assert info.value.path == "/x"
    assert isinstance(info.value.__cause__, RuntimeError)


class BadRepr:
    def __repr__(self) -> str:
        raise RuntimeError("no repr")

    def __hash__(self) -> int:
        return 1


def test_regression_a_key_whose_repr_raises() -> None:
    doc = valid(bounded_dumps({BadRepr(): 1}, max_bytes=100), 100)
    assert doc == {"…[key: BadRepr]": 1}
    with pytest.raises(EncodeError) as info:
        encode({BadRepr(): 1}, max_bytes=100, unencodable="error")
    assert isinstance(info.value.__cause__, RuntimeError)


def test_regression_a_key_whose_class_raises_or_lies_is_a_non_string_key() -> None:
    # Found by a tester: isinstance(key, str) reads a proxy's __class__; one that raised
    # (a lazy proxy whose factory fails) leaked from every entry point, and one that
    # claimed str met str's own methods, which refuse it (a bare TypeError).
    out = bounded_run(
        """
        import orjson
        from jsonbudget import ResultGate, SpillStore, bounded_dumps, encode

        class Raises:
            @property
            def __class__(self):
                raise RuntimeError("Working outside of application context")
            def __repr__(self):
                return "Raises()"

        class ClaimsStr:
            @property
            def __class__(self):
                return str
            def __repr__(self):
                return "ClaimsStr()"

        for key in (Raises(), ClaimsStr()):
            name = type(key).__name__
            want = {f"…[key: {name} {name}()]": 1, "a": "x"}
            for options in ({}, {"strategy": "prefix"}, {"unencodable": "error"}):
                data = bounded_dumps({key: 1, "a": "x"}, max_bytes=300, **options)
                assert orjson.loads(data) == want, data
            (report,) = encode({key: 1}, max_bytes=300).truncations
            assert (report.kind, report.unit) == ("unencodable", "keys")
        print("ok")
        """
    )
    assert out.split() == ["ok"]


def test_regression_a_huge_int_key_is_described_without_str() -> None:
    doc = valid(bounded_dumps({10**5000: 1}, max_bytes=100), 100)
    assert doc == {"…[key: int of 16610 bits]": 1}


class HostileInt(int):
    """An int whose own methods raise: orjson writes it as an int without calling them."""

    def __repr__(self) -> str:
        raise RuntimeError("HostileInt.__repr__")

    def bit_length(self) -> int:
        raise RuntimeError("HostileInt.bit_length")

    def __index__(self) -> int:
        raise RuntimeError("HostileInt.__index__")

    def __hash__(self) -> int:
        return int.__hash__(self)


STR_CASES = {
    "long value": {"a": "é" * 5000},
    "long key with ~ and /": {"k/~" * 5000: 1},
    "short key, cut value": {"k/~": "v" * 1000, "b": [1] * 100},
    "lone surrogates": {"a": "\ud800" * 100, "\udfff": 1},
    "list of long strings": ["x" * 300] * 10,
    "beside a NaN": {"k": float("nan"), "x": "y" * 500},
    "top-level string": "q" * 1000,
    "two long keys alike": {"a" * 300: 1, "a" * 300 + "b": 2},
}


@pytest.mark.parametrize("case", sorted(STR_CASES))
@pytest.mark.parametrize(
    "options",
    [{}, {"markers": "structured"}, {"strategy": "prefix"}, {"max_field_bytes": 40}],
)
def test_regression_a_str_subclass_is_written_as_its_text_never_through_its_methods(
    case: str, options: dict[str, Any]
) -> None:
    # Its __len__ said 0 and its __str__ raised: cuts raised ValueError or RuntimeError.
    plain = STR_CASES[case]
    hostile = lying_str(plain)
    for budget in (64, 200, 1000):
        expected = bounded_dumps(plain, max_bytes=budget, **options)
        assert bounded_dumps(hostile, max_bytes=budget, **options) == expected


def test_a_long_str_subclass_is_copied_no_further_than_the_budget() -> None:
    code = """
    import tracemalloc
    from jsonbudget import bounded_dumps
    from tests.strategies import LyingStr
    x, k = "x" * 50_000_000, "k" * 50_000_000
    plain = bounded_dumps({"a": x, k: 1}, max_bytes=200)
    obj = {"a": LyingStr(x), LyingStr(k): 1}
    tracemalloc.start()
    out = bounded_dumps(obj, max_bytes=200)
    print(tracemalloc.get_traced_memory()[1], out == plain)
    """
    peak, same = bounded_run(code).split()
    assert int(peak) < 1 << 20
    assert same == "True"


def test_regression_an_int_subclass_key_whose_methods_raise() -> None:
    obj = {HostileInt(3): 1, HostileInt(2**200): "x" * 500}
    doc = valid(bounded_dumps(obj, max_bytes=200), 200)
    assert list(doc)[:2] == ["…[key: HostileInt 3]", "…[key: HostileInt of 201 bits]"]


class PairsLie(dict[str, Any]):
    """A dict whose items() yields what *shape* says instead of (key, value) pairs."""

    shape: Any = None

    def items(self) -> Any:
        return iter(self.shape)


@pytest.mark.parametrize(
    ("shape", "what"),
    [([1, 2], "a int"), ([("a", 1, 2)], "a tuple of 3"), ([("a",)], "a tuple of 1")],
)
def test_regression_items_that_are_not_pairs_give_an_encode_error(shape: Any, what: str) -> None:
    # Unpacking them raised a bare TypeError or ValueError.
    liar = PairsLie(a=1)
    liar.shape = shape
    with pytest.raises(EncodeError, match=f"yielded {what}, not a") as info:
        encode({"x": liar}, max_bytes=200)
    assert info.value.path == "/x"


def test_items_that_are_a_tuple_subclass_are_read_as_tuples() -> None:
    class Pair(tuple[Any, ...]):
        def __iter__(self) -> Iterator[Any]:
            raise RuntimeError("Pair.__iter__")

    liar = PairsLie(a=1)
    liar.shape = [Pair(("a", 1)), Pair(("b", "x" * 400))]
    doc = valid(bounded_dumps(liar, max_bytes=100), 100)
    assert doc["a"] == 1
    assert doc["b"].startswith("xxx")


def test_regression_a_huge_tuple_key_costs_what_its_description_costs() -> None:
    code = """
    import time, resource
    from jsonbudget import bounded_dumps
    key = tuple(range(5_000_000))
    obj = {key: 1}
    calls = []
    import reprlib
    real = reprlib.Repr.repr1
    def counted(self, x, level):
        calls.append(1)
        return real(self, x, level)
    reprlib.Repr.repr1 = counted
    out = bounded_dumps(obj, max_bytes=100)
    assert len(calls) < 20, len(calls)
    print(out.decode())
    """
    assert bounded_run(code).startswith('{"…[key: tuple (0, 1, 2, 3, 4, 5, ...)]":1}')


def test_regression_a_huge_string_key_costs_about_the_output() -> None:
    # 300 million characters would add hundreds of MB if the key were encoded whole;
    # the child has room for the key itself and little more.
    code = """
    import tracemalloc
    from jsonbudget import bounded_dumps
    obj = {"k" * 300_000_000: 1}
    tracemalloc.start()
    out = bounded_dumps(obj, max_bytes=64)
    peak = tracemalloc.get_traced_memory()[1]
    assert peak < 1_000_000, peak
    print(out.decode())
    """
    out = bounded_run(code, memory=1 << 30)
    assert out.startswith('{"kkkk')
    assert "[key truncated: " in out


def test_a_cut_key_is_marked_in_the_key_and_reported() -> None:
    out = encode({"k" * 500: 1, "b": 2}, max_bytes=100)
    doc = valid(out.data, 100)
    cut = next(t for t in out.truncations if t.kind == "string")
    key = next(k for k in doc if k.startswith("k"))
    assert key.endswith(f"…[key truncated: {cut.omitted} more chars]")
    assert cut.path == "/" + key
    assert resolve(doc, cut.path) == 1


@pytest.mark.parametrize("strategy", ["balanced", "prefix"])
@pytest.mark.parametrize("value", ["x", {"a": "b" * 300}, [1, 2, 3]], ids=["str", "dict", "list"])
def test_regression_a_long_key_is_cut_not_dropped_when_its_value_needs_room(
    strategy: Strategy, value: Any
) -> None:
    # A cut key kept one byte for its value: a value whose least rendering is longer
    # dropped the whole member ({"…":"[omitted: 2 more keys]"}) instead of cutting the
    # key further.
    for budget in (200, 1024):
        out = encode({"k" * 1800: value, "z": 2}, max_bytes=budget, strategy=strategy)
        doc = valid(out.data, budget)
        key = next(k for k in doc if k.startswith("k"))
        assert "…[key truncated: " in key
        cut = next(t for t in out.truncations if t.kind == "string" and t.path == "/" + key)
        assert key.endswith(f"…[key truncated: {cut.omitted} more chars]")


def test_a_finalizer_that_mutates_the_value_mid_cut_leaves_valid_bounded_output() -> None:
    # The compiled balanced cut makes reports, which can start a collection; a finalizer
    # run by it may empty or grow any container of the value. Whatever it does, the
    # output is valid JSON within the budget, and the process does not crash.
    code = """
    import gc, json
    from jsonbudget import encode

    doc = {f"k{i}": {"text": "x" * 300, "rows": [{"n": j, "s": "y" * 40} for j in range(30)]}
           for i in range(60)}
    victims = [v["rows"] for v in doc.values()]

    class Mutator:
        def __del__(self):
            for rows in victims:
                if len(rows) % 2:
                    rows.clear()
                else:
                    rows.extend({"grown": "z" * 200} for _ in range(5))

    def plant():
        for _ in range(200):
            a = Mutator()
            a.self = a  # a cycle: only the collector frees it
    gc.set_threshold(1, 1, 1)
    for budget in (2048, 8192, 32768):
        for _ in range(20):
            plant()
            out = encode(doc, max_bytes=budget)
            assert len(out.data) <= budget, (budget, len(out.data))
            json.loads(out.data)
    print("ok")
    """
    assert bounded_run(code).strip() == "ok"


@pytest.mark.parametrize(
    "mutation",
    [
        "{1, 2, 3}",
        "Str('hello')",
        "Int(5)",
        "object()",
        "b",
        "2**70",
        "'z' * 5000",
        "float('nan')",
        "'ab\\ud800cd'",
    ],
)
def test_regression_a_collection_mid_cut_cannot_change_what_was_measured(mutation: str) -> None:
    # Found by a tester: a gc callback (or a finalizer, or a weakref callback) run by an
    # allocation of the compiled cut put a set into a dict already measured; the write
    # read it as a tuple and crashed the process (also: a SystemError for a wide int, an
    # AssertionError for a grown string). Nothing runs Python code inside the cut now.
    code = f"""
    import gc, json, sys
    import jsonbudget

    class Str(str):
        pass

    class Int(int):
        pass

    b = {{"x": 1}}
    pool = []
    fired = []

    def inside(phase, info):
        # Only a collection started inside the compiled cut (called from `fit`).
        if phase == "start" and not fired and sys._getframe(1).f_code.co_name == "fit":
            fired.append(1)
            b["y"] = {mutation}

    def again(phase, info):  # keeps every allocation starting a collection
        if phase == "stop":
            pool.clear()
            pool.extend([[] for _ in range(300)])

    gc.callbacks[:0] = [again, inside]
    gc.set_threshold(1)
    for budget in (200, 400, 1000, 3000):
        fired.clear()
        b.pop("y", None)
        out = jsonbudget.encode({{"a": list(range(2000)), "b": b}}, max_bytes=budget)
        assert len(out.data) <= budget
        json.loads(out.data)
    print("ok")
    """
    assert bounded_run(code).strip() == "ok"


def test_regression_spilling_shared_subtrees_stops_at_the_file_limit() -> None:
    # Found by a tester: a spill rendered a value of shared subtrees whole before it
    # checked max_file_bytes (2**40 paths: MemoryError, not the documented SpillError).
    code = """
    import tempfile
    import jsonbudget as j
    from jsonbudget import SpillError

    x = [1]
    for _ in range(40):
        x = [x, {"a": x, "b": (x,)}]
    with tempfile.TemporaryDirectory() as directory:
        store = j.SpillStore(directory, max_file_bytes=1_000_000, max_total_bytes=2_000_000)
        calls = [
            lambda: j.gate_result(x, max_bytes=1000, store=store),
            lambda: j.TurnBudget(max_bytes=4096, store=store).admit(x),
            lambda: j.paginate([x], scope=j.Scope("u"), store=j.MemoryCursorStore(),
                               limits=j.Limits(4096), oversized="spill", spill_store=store),
        ]
        for call in calls:
            try:
                call()
            except SpillError as exc:
                assert "max_file_bytes (1000000)" in str(exc), exc
            else:
                raise AssertionError("spilled")
    print("ok")
    """
    assert bounded_run(code, memory=MEMORY // 2, timeout=60).strip() == "ok"


# -- reports -----------------------------------------------------------------------------


@pytest.mark.parametrize("strategy", ["balanced", "prefix"])
def test_regression_an_unencodable_error_names_its_path(strategy: Any) -> None:
    for budget in (64, 1000):
        with pytest.raises(EncodeError) as info:
            encode({"y": 2**70}, max_bytes=budget, unencodable="error", strategy=strategy)
        assert info.value.path == "/y"


def test_regression_the_lone_surrogate_count_is_of_the_kept_part() -> None:
    s = "\udc00" * 3 + "x" * 50 + "\udc00" * 5
    out = encode({"s": s}, max_bytes=64)
    doc = valid(out.data, 64)
    replaced = next(t for t in out.truncations if t.kind == "unencodable")
    assert replaced.omitted == doc["s"].count("\ufffd") == 3


def test_regression_a_rewritten_key_is_marked_in_band() -> None:
    out = encode({"\udfaa": 0}, max_bytes=64)
    doc = valid(out.data, 64)
    (key,) = doc
    assert MARK in key
    (report,) = out.truncations
    assert report.path == "/" + key
    assert report.kind == "unencodable"


# -- options that cannot hold their marker --------------------------------------------------


@pytest.mark.parametrize("length", [1, 31, 1000, 10**6])
def test_regression_the_minimum_field_cap_works_on_every_string(length: int) -> None:
    out = encode({"a": "x" * length}, max_bytes=200, max_field_bytes=32)
    doc = valid(out.data, 200)
    assert len(json.dumps(doc["a"], ensure_ascii=False).encode()) <= 32


@pytest.mark.parametrize("field", [32, 40, 59, 63])
def test_regression_structured_markers_refuse_a_field_cap_below_their_size(field: int) -> None:
    with pytest.raises(LimitError, match=r"max_field_bytes.*structured"):
        Encoder(max_bytes=200, max_field_bytes=field, markers="structured")
    out = encode({"a": "x" * 1000}, max_bytes=200, max_field_bytes=64, markers="structured")
    valid(out.data, 200)


@pytest.mark.parametrize(
    ("option", "value"),
    [("strategy", "fast"), ("markers", "loud"), ("unencodable", "skip"), ("default", 3)],
)
def test_every_invalid_mode_raises_a_limit_error_naming_it(option: str, value: Any) -> None:
    with pytest.raises(LimitError, match=option):
        encode({}, max_bytes=64, **{option: value})
    with pytest.raises(LimitError, match=option):
        bounded_dumps({}, max_bytes=64, **{option: value})


def test_a_float_budget_is_refused_even_after_an_int_one_was_cached() -> None:
    bounded_dumps({}, max_bytes=64)
    with pytest.raises(LimitError, match="max_bytes"):
        bounded_dumps({}, max_bytes=64.0)  # type: ignore[arg-type]


# -- look-ahead --------------------------------------------------------------------------


def test_regression_generators_in_page_items_are_served_whole() -> None:
    rows = [{"id": i, "vals": (x for x in range(40))} for i in range(60)]
    pager = Paginator(Limits(512))
    cursor = None
    got: list[Any] = []
    while True:
        page = pager.paginate(rows, scope=Scope("u", {}), cursor=cursor)
        got += json.loads(page.to_json())["items"]
        cursor = page.next_cursor
        if cursor is None:
            break
    assert [row["id"] for row in got] == list(range(60))
    assert all(row["vals"] == list(range(40)) for row in got)


# -- values whose own code runs inside orjson --------------------------------------------


def test_regression_proxies_that_claim_their_wrapped_class_get_a_marker_or_default() -> None:
    # A proxy's __class__ names what it wraps, so isinstance(p, str) holds while str's own
    # methods refuse it: str.__len__, set.__len__ and Enum's .value raised a bare
    # TypeError or AttributeError, and a proxy of 5 was "an int beyond 64 bits".
    code = """
    import enum, json
    from unittest import mock
    from jsonbudget import bounded_dumps, encode, EncodeError

    class Proxy:  # as wrapt's ObjectProxy and werkzeug's LocalProxy are made
        def __init__(self, wrapped): object.__setattr__(self, "_w", wrapped)
        @property
        def __class__(self): return type(self._w)
        def __getattr__(self, name): return getattr(self._w, name)
        def __len__(self): return len(self._w)
        def __iter__(self): return iter(self._w)

    class Color(enum.Enum):
        RED = "red"

    def unwrap(o):
        return o._w if type(o) is Proxy else type(o).__name__

    values = [Proxy("hello"), Proxy({1, 2}), Proxy(5), Proxy(True), Proxy([1, 2]),
              Proxy({"a": 1}), mock.Mock(spec=str), mock.Mock(spec=Color)]
    for v in values:
        for shape in (v, {"field": v}, [v, "x" * 300]):
            out = bounded_dumps(shape, max_bytes=120)
            assert len(out) <= 120
            assert "unencodable: " in json.dumps(json.loads(out), ensure_ascii=False), out
            unwrapped = bounded_dumps(shape, max_bytes=120, default=unwrap)
            assert len(unwrapped) <= 120
    print(bounded_dumps([Proxy("hello"), Proxy(5)], max_bytes=120, default=unwrap))
    try:
        encode(Proxy("x"), max_bytes=100, unencodable="error")
    except EncodeError as exc:
        print("EncodeError:", exc)
    """
    out = bounded_run(code).splitlines()
    assert out == ["b'[\"hello\",5]'", 'EncodeError: cannot encode Proxy (at "")']


def test_regression_a_tzinfo_that_raises_cannot_crash_the_encoder() -> None:
    # orjson.dumps of such a datetime segfaults (orjson 3.13): the encoder asks for the
    # offset itself and hands orjson a built-in timezone.
    code = """
    import datetime as dt, json
    from jsonbudget import bounded_dumps, encode, EncodeError

    class Raises(dt.tzinfo):
        def utcoffset(self, when): raise RuntimeError("no offset")
        def dst(self, when): return None
        def tzname(self, when): return "R"

    class Empties(dt.tzinfo):
        def utcoffset(self, when):
            rows.clear()
            return dt.timedelta(hours=1)
        def dst(self, when): return None
        def tzname(self, when): return "E"

    rows = [dt.datetime(2024, 1, 2, tzinfo=Empties()) for _ in range(20)]
    print(bounded_dumps({"rows": rows}, max_bytes=200).decode())
    print(bounded_dumps({"t": dt.datetime(2024, 1, 2, tzinfo=Raises())}, max_bytes=100).decode())
    for value in (dt.datetime(2024, 1, 2, tzinfo=Raises()), dt.time(1, tzinfo=Raises())):
        try:
            encode({"t": value}, max_bytes=100, unencodable="error")
        except EncodeError as exc:
            print(exc.path, type(exc.__cause__).__name__, exc)
    """
    out = bounded_run(code).splitlines()
    doc = json.loads(out[0])
    assert doc["rows"][0] == "2024-01-02T00:00:00+01:00"
    assert json.loads(out[1]) == {"t": "…[unencodable: datetime]"}
    assert out[2].startswith("/t RuntimeError datetime.utcoffset() raised RuntimeError")
    # A time with any tzinfo is refused as orjson refuses it: its offset is not asked.
    assert out[3] == "/t NoneType cannot encode time (at /t)"


# -- properties over hostile values ------------------------------------------------------


@settings(max_examples=600, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(
    obj=hostile_values(),
    budget=budgets,
    strategy=st.sampled_from(["balanced", "prefix"]),
    markers=st.sampled_from(["text", "structured"]),
    max_items=st.none() | st.integers(1, 4),
    max_keys=st.none() | st.integers(1, 4),
)
def test_hostile_values_give_valid_bounded_marked_output(  # noqa: PLR0917 - drawn
    obj: Any,
    budget: int,
    strategy: Any,
    markers: Any,
    max_items: int | None,
    max_keys: int | None,
) -> None:
    out = encode(
        obj,
        max_bytes=budget,
        strategy=strategy,
        markers=markers,
        max_items=max_items,
        max_keys=max_keys,
    )
    doc = valid(out.data, budget)
    for t in out.truncations:
        resolve(doc, t.path)  # every report names a place in the output


def _nested_call(depth: int, fn: Any) -> Any:
    return _nested_call(depth - 1, fn) if depth else fn()


@pytest.mark.parametrize("strategy", ["balanced", "prefix"])
def test_regression_a_caller_deep_in_the_stack_gets_an_encode_error(strategy: Any) -> None:
    # The renderer recurses in Python; called with little stack left it raised a bare
    # RecursionError. A value that needs the renderer, 64 levels deep (max_depth):
    value: Any = None
    for _ in range(100):
        value = {"a": [value, math.nan], "b": "x" * 10}
    assert valid(_nested_call(100, lambda: bounded_dumps(value, max_bytes=4000)), 4000)
    left = sys.getrecursionlimit() - len(inspect.stack()) - 50
    with pytest.raises(EncodeError, match="stack ran out") as info:
        _nested_call(left, lambda: encode(value, max_bytes=4000, strategy=strategy))
    assert isinstance(info.value.__cause__, RecursionError)
    assert info.value.path == ""


def test_regression_a_chain_of_attrs_instances_is_walked_once_per_budget() -> None:
    """Found by a tester: cut to 2 KiB, a chain of attrs instances had the node at depth
    k read k times (7,140 attribute reads at depth 120, 60 a node): each level's "is it
    whole?" walked the rest of the chain again, since nothing was kept of a native
    value's walk. The walk now records what it found too big for its room."""
    import attrs

    reads = [0]

    @attrs.define
    class Node:
        child: object
        pad: str

        def __getattribute__(self, name: str) -> Any:
            if name == "child":
                reads[0] += 1
            return object.__getattribute__(self, name)

    def chain(depth: int) -> Any:
        node: Any = "end"
        for _ in range(depth):
            node = Node(node, "p" * 40)
        return node

    counted = {}
    for depth in (40, 120):
        reads[0] = 0
        out = encode(chain(depth), Limits(2048, max_depth=128))
        assert len(out.data) <= 2048
        counted[depth] = reads[0]
    # About 40 nodes show: a few reads each, and the deeper chain costs no more.
    assert counted[120] <= 4 * 40
    assert counted[120] <= counted[40] * 1.5


def test_regression_lists_nested_a_hundred_levels_deep_do_not_crash_the_process() -> None:
    """Found by a tester: orjson 3.12 and 3.13 corrupt the heap and abort the process
    ("double free or corruption") writing a list whose first member is a nested list
    followed by some twenty ints, from about 97 levels: any path that hands such a
    value to orjson whole (a budget-only call with max_depth above that, a spill, a
    page item) ended the process. Those releases are excluded (pyproject); each path
    runs here in a child, where an abort fails the test instead of the run."""
    out = bounded_run(
        """
        import orjson, tempfile
        from jsonbudget import Limits, PageBuilder, ResultGate, SpillStore, bounded_dumps
        whole = []
        for depth, ints in ((97, 20), (100, 20), (128, 40), (200, 20)):
            v = 1
            for _ in range(depth):
                v = [v] + [0] * ints
            data = orjson.dumps(v)
            assert bounded_dumps(v, max_bytes=len(data), max_depth=128) == data or depth > 128
            builder = PageBuilder(Limits(1 << 20, max_depth=128))
            builder.add(v)
            with tempfile.TemporaryDirectory() as tmp:
                gated = ResultGate(max_bytes=1024, store=SpillStore(tmp)).gate(v)
                assert gated.spill is not None
                with open(gated.spill.path, "rb") as f:
                    whole.append(f.read() == data)
        print(whole)
        """
    )
    assert out.strip() == "[True, True, True, True]"


# -- values whose reading runs Python code ---------------------------------------------


@pytest.mark.parametrize(
    ("entry", "check"),
    [
        ("uuid.uuid4()", "all(len(x) == 36 for x in log)"),  # a segfault
        ("datetime.datetime(2024, 1, 1)", "all(x.startswith('2024') for x in log)"),
        (
            "datetime.datetime(2024, 1, 1) if not calls else None",
            "log[:1] == ['2024-01-01T00:00:00']",
        ),
    ],
    ids=["uuid", "datetime", "one-datetime"],
)
def test_regression_a_dataclass_getattribute_cannot_change_a_measured_value(
    entry: str, check: str
) -> None:
    """Found by a tester: the size walk admitted a dataclass whose ``__getattribute__``
    is Python code (an audit hook logging each access into a list that is part of the
    output); orjson ran it in the middle of the compiled cut to read the instance's
    ``__dict__``, and the cut then wrote the grown log from pointers it had measured:
    a segfault (a UUID read as a tuple), a bare AssertionError, a datetime written as
    ``[]`` with no marker. Such a class is read by the renderer, outside orjson."""
    code = f"""
    import dataclasses, datetime, json, uuid
    from jsonbudget import Encoder, Limits, PageBuilder, ResultGate, bounded_dumps, encode

    raw = []
    calls = []

    @dataclasses.dataclass
    class Row:
        id: int = 1
        def __getattribute__(self, name):
            item = {entry}
            calls.append(1)
            if item is not None:
                raw.append(item)
            return object.__getattribute__(self, name)

    def doc():
        raw.clear()
        calls.clear()
        rows = [{{"id": 0}}] + [Row() for _ in range(5)] + [{{"id": 1}} for _ in range(2000)]
        return {{"rows": rows, "log": raw}}

    outs = [
        encode(doc(), max_bytes=4000).data,
        bounded_dumps(doc(), max_bytes=4000),
        Encoder(Limits(4000)).dumps(doc()),
    ]
    for out in outs:
        assert len(out) <= 4000
        log = [x for x in json.loads(out)["log"] if not x.startswith("…[")]
        assert all(type(x) is str for x in log), log[:3]
        assert {check}, log[:3]
    gated = ResultGate(max_bytes=4000).gate(doc())
    assert len(gated.data) <= 4000
    json.loads(gated.data)
    PageBuilder(Limits(4000)).add(doc())
    print("ok")
    """
    assert bounded_run(code).strip() == "ok"


def test_regression_a_dataclass_getattribute_cannot_change_the_list_orjson_writes() -> None:
    """Found by a tester: the walk called such a dataclass clean, so the one orjson call
    of the fast path ran its hook mid-write; a hook that empties the list being written
    crashed the process (through encode, bounded_dumps and ResultGate.gate)."""
    code = """
    import dataclasses, json
    from jsonbudget import ResultGate, bounded_dumps, encode

    rows = []

    @dataclasses.dataclass
    class Row:
        id: int = 1
        def __getattribute__(self, name):
            rows.clear()  # a lazy loader resetting a shared cache
            return object.__getattribute__(self, name)

    def fill():
        rows[:] = [Row()] + [[i, i, i] for i in range(100)]
        return rows

    print(len(encode(fill(), max_bytes=100_000).data) <= 100_000)
    print(len(bounded_dumps(fill(), max_bytes=100_000)) <= 100_000)
    print(json.loads(ResultGate(max_bytes=100_000).gate(fill()).data) is not None)
    """
    assert bounded_run(code).split() == ["True", "True", "True"]


@pytest.mark.parametrize("kind", ["field_serializer", "model", "attrs", "dataclass"])
def test_regression_a_library_value_cannot_change_the_list_orjson_writes(kind: str) -> None:
    """Found while fixing the above: a value holding pydantic models, attrs instances
    or dataclasses beside plain JSON was written by one orjson call whose ``default``
    called their serializers (a pydantic ``field_serializer``, a ``__getattribute__``)
    in the middle of writing the list around them; one that changed that list crashed
    the process. That code now runs before orjson, which only joins bytes."""
    code = f"""
    import dataclasses, json
    import attrs, pydantic
    from jsonbudget import bounded_dumps, encode

    rows = []
    calls = [0, 0]

    def hook():
        calls[0] += 1
        if calls[0] == calls[1]:
            rows.clear()
            rows.extend({{1, 2}} for _ in range(3))

    kind = {kind!r}
    if kind == "field_serializer":
        class Row(pydantic.BaseModel):
            id: int = 1
            @pydantic.field_serializer("id")
            def ser(self, v):
                hook()
                return v
    elif kind == "model":
        class Row(pydantic.BaseModel):
            id: int = 1
            def __getattribute__(self, name):
                hook()
                return super().__getattribute__(name)
    elif kind == "attrs":
        @attrs.define
        class Row:
            id: int = 1
            def __getattribute__(self, name):
                hook()
                return object.__getattribute__(self, name)
    else:
        @dataclasses.dataclass
        class Row:
            id: int = 1
            def __getattribute__(self, name):
                hook()
                return object.__getattribute__(self, name)

    class Beside(pydantic.BaseModel):  # makes the walk of a dataclass the Python one
        x: int = 1

    head = [Beside()] if kind == "dataclass" else []

    for fire in range(1, 17):
        for budget in (100_000, 1000):
            for bounded in (False, True):
                calls[:] = [0, fire]
                rows[:] = head + [Row()] + [[i, i, i] for i in range(100)]
                if bounded:
                    out = bounded_dumps(rows, max_bytes=budget)
                else:
                    out = encode(rows, max_bytes=budget).data
                assert len(out) <= budget
                json.loads(out)
    print("ok")
    """
    assert bounded_run(code).strip() == "ok"


def test_regression_a_dataclass_member_named_empty_is_written_by_the_renderer() -> None:
    """Found while fixing the above: orjson aborts the process (a Rust panic) on a
    dataclass attribute named "" (it reads the first byte to skip _private names), and
    the walk let such an instance through to it."""
    code = """
    import dataclasses
    from jsonbudget import bounded_dumps

    @dataclasses.dataclass
    class Row:
        x: int = 1

    row = Row()
    setattr(row, "", 2)
    print(bounded_dumps([row], max_bytes=1000).decode())
    """
    assert bounded_run(code).strip() == '[{"x":1,"":2}]'


def test_regression_a_dict_property_of_a_dataclass_keeps_its_markers() -> None:
    # Found by a tester: the walk read the instance's own dict, orjson the property's,
    # so a NaN there came out as null with complete=True.
    @dataclasses.dataclass
    class Row:
        a: int = 1

        @property
        def __dict__(self) -> dict[str, Any]:  # type: ignore[override]
            return {"v": math.nan, "big": "x" * 50}

    for value in (Row(), [Row()], {"x": Row(), "pad": "y" * 2000}):
        out = encode(value, max_bytes=1000)
        assert b"null" not in out.data
        assert any(t.kind == "unencodable" for t in out.truncations)
        valid(out.data, 1000)


class _Handle:
    pass


_GROWTHS: dict[str, tuple[Callable[[], Any], Callable[[Any], Any], int]] = {
    # (the value, what the hook does to it, on which call of the hook)
    "empty-grows": (list, lambda a: a.extend(["y" * 300] * 3), 1),
    "short-grows": (lambda: [1, 2, 3], lambda a: a.extend(["y" * 300] * 3), 2),
    "inner-grows": (lambda: [[1], 2, 3], lambda a: a[0].extend(["y" * 300] * 3), 2),
    "inner-dict-grows": (lambda: [{"k": 1}], lambda a: a[0].update(n="y" * 500), 2),
    "item-replaced": (lambda: [1, 2, 3], lambda a: a.__setitem__(2, "y" * 500), 2),
    "dict-grows": (lambda: {"k": 1}, lambda a: a.update({f"n{i}": "y" * 100 for i in range(5)}), 1),
}


@pytest.mark.parametrize("growth", sorted(_GROWTHS))
@pytest.mark.parametrize("markers", ["text", "structured"])
def test_regression_a_default_hook_that_grows_a_value_already_measured(
    growth: str, markers: Any
) -> None:
    # Found by a tester: a default hook that adds to a list the renderer had measured
    # (recording what it resolved) leaked a bare AssertionError ("no rendering of 30
    # bytes"): the balanced cut gave the list a share from its size before it grew,
    # then could render it in neither. A value is rendered from what one read of it
    # found; a finalizer or another thread changing it did the same.
    start, grow, on_call = _GROWTHS[growth]
    for budget in range(64, 330, 11):
        value = start()
        calls = [0]

        def default(o: object, value: Any = value, calls: list[int] = calls) -> str:
            calls[0] += 1
            if calls[0] == on_call:
                grow(value)
            return "resolved"

        doc = {"a": value, "b": [_Handle()], "c": "x" * 5000, "d": [_Handle()]}
        out = encode(doc, max_bytes=budget, default=default, markers=markers)
        valid(out.data, budget)


def test_regression_a_collection_inside_orjson_cannot_change_what_it_writes() -> None:
    """Found while fixing the above (the tester's gc-callback fuzzer, under
    ``PYTHONMALLOC=debug``): orjson allocates an object the collector tracks when it
    writes an aware datetime (it asks the built-in timezone whether it has ``dst``); a
    collection started there ran gc callbacks and finalizers, whose code emptied the list
    orjson was writing: a segfault. Every orjson call of a walked value pauses the
    collector now. The child runs under the debug allocator, which makes the read of
    freed memory crash every time."""
    inner = """
    import datetime as dt, gc, json, sys
    from jsonbudget import encode

    rows = []
    armed = []

    def inside(phase, info):
        caller = sys._getframe().f_back
        if phase == "start" and armed and caller is not None and caller.f_code.co_name in armed:
            armed.clear()
            rows.clear()

    gc.callbacks.append(inside)
    when = dt.datetime(2024, 1, 1, tzinfo=dt.timezone.utc)
    gc.set_threshold(1)
    for _ in range(20):
        rows[:] = [[when, str(j) * 20, j] for j in range(300)]
        for frame in ("_clean_dumps", "bulk_run"):  # the renderer's orjson calls
            armed[:] = [frame]
            json.loads(encode({"n": float("nan"), "rows": rows}, max_bytes=100_000).data)
            json.loads(encode([float("nan"), *rows], max_bytes=100_000).data)
    gc.set_threshold(700)
    print("ok")
    """
    code = f"""
    import os, subprocess, sys, textwrap
    env = {{**os.environ, "PYTHONMALLOC": "debug"}}
    cmd = [sys.executable, "-c", textwrap.dedent({inner!r})]
    done = subprocess.run(cmd, env=env, capture_output=True, text=True, check=False)
    sys.stderr.write(done.stderr)
    print(done.stdout.strip() if done.returncode == 0 else f"exit {{done.returncode}}")
    """
    assert bounded_run(code).strip() == "ok"

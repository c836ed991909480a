"""The compiled balanced cut (`bound.fill`) makes the renderer's choices, byte for byte.

For clean values with text markers and no item, key or field caps, `EncodeCall.fit`
hands the cut to C. These tests hold the two to the same output and reports, check that
everything the compiled cut does not take is handed back, and count its work.
"""

from __future__ import annotations

import copy
import dataclasses
import json
import pickle
from typing import Any

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from jsonbudget import Encoded, Encoder
from jsonbudget._encode import bound as _bound

from . import workcount
from .cuts import both, renderer_only
from .strategies import clean_values

pytestmark = pytest.mark.skipif(_bound.fill is None, reason="the extension is not built")


def taken(obj: Any, budget: int, **options: Any) -> bool:
    """Whether the compiled cut did the work itself rather than handing it back."""
    assert _bound.fill is not None
    return _bound.fill(obj, budget, Encoder(max_bytes=budget, **options)._caps, None, 0) is not None


@settings(max_examples=400, deadline=None)
@given(
    obj=clean_values(),
    budget=st.one_of(st.integers(64, 400), st.integers(64, 20_000)),
    max_depth=st.integers(1, 12),
)
def test_the_compiled_cut_writes_what_the_renderer_writes(
    obj: Any, budget: int, max_depth: int
) -> None:
    compiled, rendered = both(obj, budget, max_depth=max_depth)
    assert compiled == rendered
    assert len(compiled.data) <= budget
    json.loads(compiled.data)


@settings(max_examples=200, deadline=None)
@given(obj=clean_values(), budget=st.integers(64, 20_000))
def test_the_compiled_cut_takes_every_clean_value(obj: Any, budget: int) -> None:
    # The property above would pass vacuously if the compiled cut handed everything back.
    assert taken(obj, budget)


def test_a_marker_key_avoids_every_key_the_object_holds() -> None:
    obj = {"…": "x" * 500, "…1": "y" * 500, **{f"k{i}": i for i in range(200)}}
    compiled, rendered = both(obj, 300)
    assert compiled == rendered
    out = json.loads(compiled.data)
    marker_keys = [k for k in out if k.startswith("…") and k not in obj]
    assert marker_keys == ["…2"], out
    assert taken(obj, 300)


@pytest.mark.parametrize("budget", [64, 70, 90, 200])
def test_regression_both_cuts_choose_one_marker_key_after_a_whole_read(budget: int) -> None:
    # The renderer had read the whole inner object to size it (12 keys, "…" the last)
    # and avoided "…"; the compiled cut, reading only the keys that could show, used it:
    # 28 of 4,000 random values came out different. Both now avoid the keys that could
    # show at the room, whatever was read before.
    inner: dict[str, Any] = {f"k{i}": [] for i in range(11)}
    inner["…"] = []
    for obj in ({"": inner, "z": "q"}, {"b": [], "x" * 200: 1, "…": 2, "…1": 3}):
        compiled, rendered = both(obj, budget)
        assert compiled == rendered
        doc = json.loads(compiled.data)
        shown = doc.get("", doc)
        markers = [k for k, v in shown.items() if isinstance(v, str) and "[omitted:" in v]
        assert len(markers) <= 1
        assert len(set(shown)) == len(shown)


def test_a_key_longer_than_the_room_is_cut_with_a_marker() -> None:
    # The shape of a botocore service model: long documentation keys under shapes.
    shapes = {"Doc" * 600 + str(i): {"type": "string", "doc": "é" * 300} for i in range(30)}
    compiled, rendered = both({"shapes": shapes}, 1024)
    assert compiled == rendered
    assert "…[key truncated: " in compiled.data.decode()
    assert taken({"shapes": shapes}, 1024)


def test_shared_subtrees_cut_alike_from_c_and_python() -> None:
    x: Any = {"leaf": "v" * 100, "n": 1.5}
    for _ in range(20):
        x = {"a": x, "b": [x, x]}
    compiled, rendered = both(x, 4096)
    assert compiled == rendered
    assert taken(x, 4096)


@pytest.mark.parametrize(
    "obj",
    [
        {"a": "\udc80"},  # a lone surrogate: the renderer replaces and counts it
        {"a": 2**70},  # beyond 64 bits
        {"a": float("nan")},
        {"a": {1, 2}},
        [{"a": 1}, type("D", (dict,), {})(b=2)],  # a dict subclass is not clean
    ],
    ids=["surrogate", "big-int", "nan", "set", "dict-subclass"],
)
def test_what_is_not_clean_is_handed_back(obj: Any) -> None:
    assert not taken(obj, 64)
    compiled, rendered = both(obj, 64)
    assert compiled == rendered


def test_regression_a_bulk_run_never_runs_a_dataclass_getattribute() -> None:
    # Found by a tester: a bulk run's walk admitted a dataclass whose __getattribute__
    # is Python; orjson ran it mid-cut to read the instance's __dict__, and the hook,
    # appending to a list measured already, crashed the process (tests/
    # test_adversarial.py runs that). Such a row is handed back, its hook never run.
    calls: list[str] = []

    @dataclasses.dataclass
    class Row:
        id: int = 1

        def __getattribute__(self, name: str) -> Any:
            calls.append(name)
            return object.__getattribute__(self, name)

    rows = [{"id": 0}, *(Row() for _ in range(5)), *({"id": 1} for _ in range(2000))]
    fill = _bound.fill
    assert fill is not None
    calls.clear()
    assert fill({"rows": rows, "log": calls}, 4000, Encoder(max_bytes=4000)._caps, None, 0) is None
    assert calls == []


def test_depth_at_the_limit_is_handed_back() -> None:
    deep: Any = "x" * 200
    for _ in range(8):
        deep = [deep, "y" * 50]
    assert not taken(deep, 100, max_depth=5)
    assert taken(deep, 100, max_depth=12)


@pytest.mark.parametrize("budget", [80, 400, 5000])
def test_a_cycle_is_handed_back_once_it_is_reached(budget: int) -> None:
    # A small budget cuts the list before the cycle shows; a larger one reaches it,
    # and the compiled cut hands it back at the depth limit, never looping.
    loop: list[Any] = ["x" * 100]
    loop.append(loop)
    compiled, rendered = both(loop, budget)
    assert compiled == rendered
    assert taken(loop, budget) == (budget == 80)


# -- cost: the compiled cut is linear in the output, never 2**depth ------------------------


def tree(depth: int) -> Any:
    return {"kids": [tree(depth - 1), tree(depth - 1)] if depth else [], "name": "n" * 20}


def shared(depth: int) -> Any:
    x: Any = {"leaf": "z" * 30}
    for _ in range(depth):
        x = {"l": x, "r": [x, 1]}
    return x


@pytest.mark.parametrize("budget", [4096, 65536])
def test_compiled_work_per_output_byte_is_flat_in_depth(budget: int) -> None:
    per_byte = []
    for depth in range(4, 17, 2):
        data, count = workcount.fill_work(tree(depth), budget)
        assert len(data) <= budget
        assert count / len(data) < 0.5, (depth, count, len(data))
        if len(data) > budget // 2:
            per_byte.append(count / len(data))
    assert len(per_byte) >= 3, per_byte
    assert max(per_byte) <= 2 * min(per_byte), per_byte


def test_compiled_cut_does_not_rewalk_shared_subtrees() -> None:
    # 2**20 paths, 21 distinct nodes: the work follows the output, not the paths.
    for depth in range(4, 21, 4):
        data, count = workcount.fill_work(shared(depth), 4096)
        assert count <= len(data) + 20 * depth, (depth, len(data), count)


# -- joining reports: the compiled join and its twin agree -------------------------------


def _reports(draw_leaf: st.SearchStrategy[Any]) -> st.SearchStrategy[tuple[Any, ...]]:
    return st.recursive(
        st.tuples(draw_leaf),
        lambda sub: st.lists(
            st.one_of(draw_leaf, st.tuples(st.sampled_from(["/a", "/0", "/~1", "/…"]), sub)),
            max_size=4,
        ).map(tuple),
        max_leaves=20,
    )


_leaf = st.tuples(
    st.sampled_from(["/x", "/1", "/…", "", "/é"]),
    st.sampled_from(["string", "keys", "items"]),
    st.one_of(st.none(), st.integers(0, 10**6)),
    st.sampled_from(["chars", "keys", "items"]),
)


@given(trs=_reports(_leaf), base=st.sampled_from(["", "/items/3", "/é"]))
def test_the_compiled_join_of_reports_matches_its_twin(trs: tuple[Any, ...], base: str) -> None:
    compiled: list[Any] = []
    twin: list[Any] = []
    _bound.join_reports(trs, base, compiled, lambda *a: a)
    _bound.py_join_reports(trs, base, twin, lambda *a: a)
    assert compiled == twin


def test_the_compiled_join_refuses_what_is_not_a_report() -> None:
    with pytest.raises(TypeError, match="2- or 4-tuple"):
        _bound.join_reports((("/a", "string", 1),), "", [], lambda *a: a)
    with pytest.raises(TypeError, match="tuples of reports"):
        _bound.join_reports([("/a", "string", 1, "chars")], "", [], lambda *a: a)


def test_an_exception_from_make_propagates_from_the_join() -> None:
    def make(*_: Any) -> Any:
        raise ValueError("make")

    with pytest.raises(ValueError, match="make"):
        _bound.join_reports((("/a", "string", 1, "chars"),), "", [], make)


# -- packed reports: read as tuples, joined as the renderer's -----------------------------


def _cut_with_reports() -> tuple[Any, tuple[bytes, Any]]:
    obj = {"a/b": "x" * 300, "~": [1] * 100, "é": {f"k{i}": "v" * 50 for i in range(20)}}
    assert _bound.fill is not None
    out = _bound.fill(obj, 200, Encoder(max_bytes=200)._caps, None, 0)
    assert isinstance(out, tuple)
    return obj, out


def test_packed_reports_read_as_the_renderers_tuples() -> None:
    obj, (_, packed) = _cut_with_reports()
    with renderer_only():
        rendered = Encoder(max_bytes=200).encode(obj)
    assert len(packed) == len(rendered.truncations) >= 3
    assert [(p, k, n, u) for p, k, n, u in packed] == [
        (t.path, t.kind, t.omitted, t.unit) for t in rendered.truncations
    ]
    with pytest.raises(IndexError):
        packed[len(packed)]
    # Under a base, as a page joins them, and as the Python twin joins what it reads.
    compiled: list[Any] = []
    twin: list[Any] = []
    _bound.join_reports(packed, "/items/7", compiled, lambda *a: a)
    _bound.py_join_reports(packed, "/items/7", twin, lambda *a: a)
    assert compiled == twin
    assert all(path.startswith("/items/7/") for path, *_ in compiled)


def test_truncations_are_made_when_read_and_then_kept() -> None:
    obj, _ = _cut_with_reports()
    made = Encoder(max_bytes=200).encode(obj)
    first = made.truncations
    assert first is made.truncations  # joined once
    assert not made.complete
    assert made == Encoded(made.data, False, first)
    assert hash(made) == hash(Encoded(made.data, False, first))
    with pytest.raises(AttributeError):
        made.truncations = ()  # type: ignore[misc]
    # Copied or pickled before its truncations are read, it carries them made.
    unread = Encoder(max_bytes=200).encode(obj)
    assert pickle.loads(pickle.dumps(unread)) == made
    assert copy.copy(Encoder(max_bytes=200).encode(obj)).truncations == first


# -- strings are sized exactly, whatever their bytes ------------------------------------


_one_byte_text = st.text(
    alphabet=st.one_of(
        st.sampled_from('"\\\n\t\x00\x1f\x7f~/ a'), st.characters(max_codepoint=0xFF)
    ),
    max_size=40,
)


@settings(max_examples=300)
@given(text=_one_byte_text, pad=st.integers(0, 9))
def test_a_one_byte_string_is_sized_to_the_byte(text: str, pad: int) -> None:
    # The size is counted eight characters at a time, the last few as the end of a
    # word that may start in the str's header: exact at the budget, one byte short cuts.
    value = {"k" * pad: text}
    size = len(json.dumps(value, ensure_ascii=False, separators=(",", ":")).encode())
    caps = Encoder(max_bytes=64)._caps
    assert _bound.fill is not None
    whole = _bound.fill(value, max(size, 64), caps, None, 0)
    assert isinstance(whole, tuple)
    assert len(whole[0]) == size
    assert not whole[1]
    if size > 64:
        cut = _bound.fill(value, size - 1, caps, None, 0)
        assert isinstance(cut, tuple)
        assert cut[1], "one byte short of its size, the string is cut"


@pytest.mark.parametrize("budget", [-5, 0, 1])
def test_a_budget_with_no_room_fits_nothing(budget: int) -> None:
    # The output is written into a bytes object sized from the budget: one at or below
    # zero still makes a valid (empty) start, and the answer is that nothing fits.
    assert _bound.fill is not None
    caps = Encoder(max_bytes=64)._caps
    assert _bound.fill({"a": "x" * 100}, budget, caps, None, 0) is False

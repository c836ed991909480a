"""The budgeted encoder: guarantees 1-4 as properties, awkward cases as exact fixtures."""

from __future__ import annotations

import collections.abc
import dataclasses
import datetime
import enum
import itertools
import json
import math
import uuid
from collections.abc import Iterator
from typing import Any

import orjson
import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from jsonbudget import (
    Encoded,
    EncodeError,
    Encoder,
    JsonBudgetError,
    LimitError,
    Limits,
    Truncation,
    bounded_dumps,
    encode,
)
from jsonbudget._encode.encoder import MarkerStyle, Strategy
from jsonbudget._limits import MAX_LIMIT, MIN_BYTES
from tests.jsonptr import resolve
from tests.strategies import awkward_text, budgets, json_values, odd_values

STRATEGIES: list[Strategy] = ["balanced", "prefix"]

MARK = "…["
PROPERTY = settings(max_examples=2500, deadline=None, suppress_health_check=[HealthCheck.too_slow])


def strict_loads(data: bytes) -> Any:
    """Parse as RFC 8259 demands: valid UTF-8, no NaN/Infinity, no lone surrogates."""
    text = data.decode("utf-8")  # strict: raises on invalid UTF-8

    def no_constants(name: str) -> None:
        raise AssertionError(f"non-standard constant {name}")

    doc = json.loads(text, parse_constant=no_constants)
    assert orjson.loads(data) == doc or _has_float(doc)
    return doc


def _has_float(doc: Any) -> bool:
    if isinstance(doc, float):
        return True
    if isinstance(doc, list):
        return any(_has_float(x) for x in doc)
    if isinstance(doc, dict):
        return any(_has_float(x) for x in doc.values())
    return False


def cut_key(t: Truncation) -> bool:
    """Whether *t* reports a key cut like a string: its path names the member, whose key
    (the pointer's last token) carries the marker, as text in either marker style."""
    last = t.path.rsplit("/", 1)[-1].replace("~1", "/").replace("~0", "~")
    return t.kind == "string" and f"{MARK}key truncated" in last


def marker_at(doc: Any, t: Truncation) -> bool:
    """Whether the truncation's path resolves to its in-band marker."""
    value = resolve(doc, t.path)
    if t.kind == "keys":
        return isinstance(value, str) and value.startswith("[omitted")
    if t.kind == "string":
        return cut_key(t) or (isinstance(value, str) and f"{MARK}truncated" in value)
    if t.kind == "unencodable" and t.unit == "keys":
        return t.path.rsplit("/", 1)[1].startswith(MARK)
    if t.kind == "unencodable" and t.unit == "chars":
        return isinstance(value, str) and ("\ufffd" in value or MARK in value)
    return isinstance(value, str) and value.startswith(MARK)


def check_guarantees(obj: Any, out: Encoded, max_bytes: int) -> Any:
    assert len(out.data) <= max_bytes  # 2. bounded
    doc = strict_loads(out.data)  # 1. valid
    full = orjson.dumps(obj)
    if out.complete:  # 4. no claim without a measurement
        assert out.truncations == ()
        assert out.data == full
    else:  # 3. nothing lost silently
        assert out.truncations
        for t in out.truncations:
            assert marker_at(doc, t), (t, out.data[:300])
    if len(full) <= max_bytes:
        assert out.data == full  # fits: byte-identical to orjson
    return doc


@PROPERTY
@given(obj=json_values(), max_bytes=budgets)
def test_balanced_keeps_guarantees_1_to_4(obj: Any, max_bytes: int) -> None:
    check_guarantees(obj, encode(obj, max_bytes=max_bytes), max_bytes)


@settings(PROPERTY, max_examples=1000)
@given(
    obj=odd_values(),
    slack=st.integers(0, 40),
    strategy=st.sampled_from(STRATEGIES),
    markers=st.sampled_from(["text", "structured"]),
    max_items=st.none() | st.integers(1, 4),
    max_keys=st.none() | st.integers(1, 4),
    max_field=st.none() | st.integers(64, 120),
    max_depth=st.integers(1, 5),
)
def test_what_fits_whole_is_never_cut(  # noqa: PLR0917 - one drawn value per option
    obj: Any,
    slack: int,
    strategy: Strategy,
    markers: MarkerStyle,
    max_items: int | None,
    max_keys: int | None,
    max_field: int | None,
    max_depth: int,
) -> None:
    # Lists and objects keep room for the marker that says what they left out; that
    # room was once all that stood between a value and its whole rendering, and the
    # value was cut although it fit (found by this property).
    options: dict[str, Any] = {
        "strategy": strategy,
        "markers": markers,
        "max_items": max_items,
        "max_keys": max_keys,
        "max_field_bytes": max_field,
        "max_depth": max_depth,
    }
    full = Encoder(max_bytes=MAX_LIMIT, **options).encode(obj)
    max_bytes = max(len(full.data) + slack, MIN_BYTES)
    out = encode(obj, max_bytes=max_bytes, **options)
    # Markers that stand for a value may drop their detail when room is short.
    assert [(t.path, t.kind, t.omitted) for t in out.truncations] == [
        (t.path, t.kind, t.omitted) for t in full.truncations
    ]


def test_regression_what_fits_is_cut_by_the_list_marker_room() -> None:
    # The example: a 64-byte rendering keeps the sub-list; the old renderer
    # returned 40 bytes without it.
    out = encode({"": [None, [None, [None] * 10]]}, Limits(64, max_items=3))
    assert out.data == '{"":[null,[null,[null,null,null,"…[omitted: 7 more items]"]]]}'.encode()


def as_generators(obj: Any) -> Any:
    """*obj* with every list turned into a generator over its items (tuples stay)."""
    if isinstance(obj, list):
        return (as_generators(v) for v in obj)
    if isinstance(obj, dict):
        return {k: as_generators(v) for k, v in obj.items()}
    return obj


@PROPERTY
@given(obj=json_values(), max_bytes=budgets)
def test_generators_keep_guarantees_1_to_4(obj: Any, max_bytes: int) -> None:
    out = encode(as_generators(obj), max_bytes=max_bytes)
    assert len(out.data) <= max_bytes
    doc = strict_loads(out.data)
    assert out.complete == (not out.truncations)
    for t in out.truncations:
        assert marker_at(doc, t), (t, out.data[:300])
    if out.complete or len(orjson.dumps(obj)) <= max_bytes:
        assert out.data == orjson.dumps(obj)


@settings(max_examples=400, deadline=None)
@given(
    obj=st.one_of(json_values(), odd_values()),
    max_bytes=budgets,
    strategy=st.sampled_from(["balanced", "prefix"]),
    markers=st.sampled_from(["text", "structured"]),
)
def test_the_bytes_only_verbs_write_what_encode_writes(
    obj: Any, max_bytes: int, strategy: Strategy, markers: MarkerStyle
) -> None:
    # They skip joining the reports, so nothing else may differ.
    enc = Encoder(max_bytes=max_bytes, strategy=strategy, markers=markers)
    data = enc.encode(obj).data
    assert enc.dumps(obj) == data
    assert bounded_dumps(obj, max_bytes=max_bytes, strategy=strategy, markers=markers) == data


@PROPERTY
@given(obj=json_values(), max_bytes=budgets)
def test_prefix_keeps_guarantees_1_to_4(obj: Any, max_bytes: int) -> None:
    check_guarantees(obj, encode(obj, max_bytes=max_bytes, strategy="prefix"), max_bytes)


@PROPERTY
@given(
    obj=json_values(),
    max_bytes=budgets,
    max_items=st.none() | st.integers(1, 5),
    max_keys=st.none() | st.integers(1, 5),
    max_field=st.none() | st.integers(32, 80),
    max_depth=st.integers(1, 4),
)
def test_caps_hold_on_top_of_the_budget(
    obj: Any,
    max_bytes: int,
    *,
    max_items: int | None,
    max_keys: int | None,
    max_field: int | None,
    max_depth: int,
) -> None:
    out = encode(
        obj,
        max_bytes=max_bytes,
        max_items=max_items,
        max_keys=max_keys,
        max_field_bytes=max_field,
        max_depth=max_depth,
    )
    assert len(out.data) <= max_bytes
    doc = strict_loads(out.data)
    for t in out.truncations:
        assert marker_at(doc, t), t

    def walk(v: Any, depth: int) -> None:
        if isinstance(v, str) and max_field is not None:
            assert len(orjson.dumps(v)) <= max_field
        if isinstance(v, list | dict):
            assert depth < max_depth
            cap = max_keys if isinstance(v, dict) else max_items
            if cap is not None:
                assert len(v) <= cap + 1  # plus the marker
            for x in v.values() if isinstance(v, dict) else v:
                walk(x, depth + 1)

    walk(doc, 0)


def test_max_items_caps_lists_and_max_keys_caps_objects() -> None:
    obj = {"a": [1, 2, 3], "b": 1, "c": 2}
    by_items = json.loads(encode(obj, max_bytes=200, max_items=1).data)
    assert by_items == {"a": [1, f"{MARK}omitted: 2 more items]"], "b": 1, "c": 2}
    by_keys = json.loads(encode(obj, max_bytes=200, max_keys=1).data)
    assert by_keys == {"a": [1, 2, 3], "…": "[omitted: 2 more keys]"}


@PROPERTY
@given(obj=json_values(), max_bytes=budgets)
def test_structured_markers_keep_guarantees(obj: Any, max_bytes: int) -> None:
    out = encode(obj, max_bytes=max_bytes, markers="structured")
    assert len(out.data) <= max_bytes
    doc = strict_loads(out.data)
    for t in out.truncations:
        value = resolve(doc, t.path)
        if cut_key(t):
            continue  # a key holds its marker as text: a key cannot hold an object
        if t.kind == "keys":
            assert value["kind"] == "keys"
        elif t.kind in ("string", "items", "depth"):
            assert value["$truncated"]["kind"] == t.kind


def test_a_key_cut_in_structured_mode_is_reported_on_its_member() -> None:
    # Found by the property above: at 138 bytes the structured cut rewrites the last
    # key (its marker is two bytes shorter than the key) where the text cut shortens
    # the inner object; the report names the member whose key carries the marker.
    obj = {
        "00": [3.251979620262441e16],
        "\x1f\r\x07\x80\x80\x80\x80\x80": {"\x1f\x07": None, "\x07\u0800\U00010000": None},
        "0\x1f\x1f\x1f\x1f\x07\u0800": [],
    }
    out = encode(obj, max_bytes=138, markers="structured")
    doc = strict_loads(out.data)
    assert len(out.data) <= 138
    key = f"{MARK}key truncated: 7 more chars]"
    assert list(doc)[-1] == key
    assert doc[key] == []
    assert out.truncations == (Truncation(f"/{key}", "string", 7, "chars"),)
    assert cut_key(out.truncations[0])


@settings(max_examples=300, deadline=None)
@given(text=awkward_text, extra=st.integers(0, 3000), max_bytes=st.integers(64, 300))
def test_strings_are_cut_on_character_and_escape_boundaries(
    text: str, extra: int, max_bytes: int
) -> None:
    s = text * 50 + "x" * extra
    out = encode(s, max_bytes=max_bytes)
    doc = strict_loads(out.data)
    assert len(out.data) <= max_bytes
    if not out.complete:
        prefix, _, rest = doc.partition(f"{MARK}truncated: ")
        assert s.startswith(prefix)
        assert rest == f"{len(s) - len(prefix)} more chars]"


@settings(max_examples=300, deadline=None)
@given(
    text=awkward_text | st.just("\ud800x"),
    extra=st.integers(0, 3000),
    max_bytes=st.integers(64, 300),
    field=st.none() | st.integers(32, 700),
    markers=st.sampled_from(["text", "structured"]),
)
def test_a_top_level_string_is_cut_as_the_renderer_cuts_it(
    text: str, extra: int, max_bytes: int, field: int | None, markers: MarkerStyle
) -> None:
    # encode() and dumps() cut a long top-level str without building the renderer;
    # fit() always asks the renderer: all three must agree, reports included.
    if markers == "structured" and field is not None:
        field = max(field, 64)
    s = text * 20 + "x" * extra
    enc = Encoder(max_bytes=max_bytes, max_field_bytes=field, markers=markers)
    assert enc.encode(s) == enc.fit(s, max_bytes)
    assert enc.dumps(s) == enc.encode(s).data


# -- exact fixtures -------------------------------------------------------------------


def test_fits_is_byte_identical_to_orjson() -> None:
    obj = {"a": [1, 2.5, None, True], "b": "é😀\n", "c": {"d": []}}
    assert bounded_dumps(obj, max_bytes=1000) == orjson.dumps(obj)
    assert encode(obj, max_bytes=1000).complete


def test_balanced_shortens_the_long_field_and_keeps_its_siblings() -> None:
    obj = {"summary": "ok", "log": "x" * 1_000_000, "status": "done"}
    out = encode(obj, max_bytes=2000)
    doc = json.loads(out.data)
    assert doc["summary"] == "ok"
    assert doc["status"] == "done"
    assert doc["log"].startswith("xxxx")
    kept = len(doc["log"].split(MARK)[0])
    assert doc["log"].endswith(f"{MARK}truncated: {1_000_000 - kept} more chars]")
    assert out.truncations == (Truncation("/log", "string", 1_000_000 - kept, "chars"),)
    assert len(out.data) > 1900  # the budget is used, not wasted


def test_balanced_shares_fairly_between_two_long_fields() -> None:
    obj = {"a": "a" * 10_000, "b": "b" * 10_000, "c": "short"}
    doc = json.loads(encode(obj, max_bytes=1000).data)
    assert doc["c"] == "short"
    assert abs(len(doc["a"]) - len(doc["b"])) <= 2


def test_prefix_strategy_fills_in_document_order() -> None:
    obj = {"log": "x" * 10_000, "status": "done"}
    out = encode(obj, max_bytes=200, strategy="prefix")
    doc = json.loads(out.data)
    assert "status" not in doc
    assert doc["…"] == "[omitted: 1 more keys]"
    assert len(out.data) <= 200


def test_many_small_rows_keep_whole_rows_and_count_the_rest() -> None:
    rows = [{"id": i, "name": f"row {i}"} for i in range(100_000)]
    out = encode(rows, max_bytes=4096)
    doc = json.loads(out.data)
    shown = doc[:-1]
    assert shown == rows[: len(shown)]
    assert doc[-1] == f"{MARK}omitted: {100_000 - len(shown)} more items]"
    assert out.truncations == (
        Truncation(f"/{len(shown)}", "items", 100_000 - len(shown), "items"),
    )


class _CountedRows(collections.abc.Sequence[Any]):
    """A million rows that count how many of them are read."""

    def __init__(self, row_bytes: int) -> None:
        self.reads = 0
        self.row_bytes = row_bytes

    def __len__(self) -> int:
        return 1_000_000

    def __getitem__(self, i: Any) -> Any:
        if isinstance(i, slice):
            raise TypeError("read one at a time")
        self.reads += 1
        return {"id": i, "text": "x" * self.row_bytes}


@pytest.mark.parametrize("row_bytes", [0, 40, 400])
@pytest.mark.parametrize("strategy", ["balanced", "prefix"])
def test_a_cut_list_reads_about_what_it_shows(row_bytes: int, strategy: Strategy) -> None:
    # It read every item that could show at two bytes each (2,050 of them for 4 KiB),
    # however large the items: a 64 KiB cut of 200,000 rows touched 32,769 to show 249.
    rows = _CountedRows(row_bytes)
    out = encode({"rows": rows}, max_bytes=4096, strategy=strategy)
    shown = json.loads(out.data)["rows"][:-1]
    assert [row["id"] for row in shown] == list(range(len(shown)))  # "prefix" cuts the last
    assert len(shown) > 4096 // (row_bytes + 30) // 2
    assert rows.reads <= 4 * len(shown) + 64


def test_one_oversized_row_is_fitted_not_dropped() -> None:
    rows = [{"id": 1, "body": "é" * 100_000}]
    out = encode(rows, max_bytes=500)
    doc = json.loads(out.data)
    assert doc[0]["id"] == 1
    assert MARK + "truncated" in doc[0]["body"]


def test_long_multibyte_text_is_cut_to_a_valid_prefix() -> None:
    s = "😀€é" * 333_334
    out = encode(s, max_bytes=4096)
    assert len(out.data) <= 4096
    doc = json.loads(out.data)
    prefix = doc.split(MARK)[0]
    assert s.startswith(prefix)
    assert len(out.data) >= 4096 - 4  # at most one 4-byte character is left unused


def test_escape_heavy_string_never_cut_inside_an_escape() -> None:
    s = '\x01"\\' * 10_000
    for max_bytes in range(64, 120):
        out = encode(s, max_bytes=max_bytes)
        doc = json.loads(out.data)
        assert s.startswith(doc.split(MARK)[0])


def test_list_of_ten_million_is_not_walked() -> None:
    class Counting(list[int]):
        touched = 0

        def __getitem__(self, i: Any) -> Any:
            Counting.touched += 1
            return super().__getitem__(i)

    big = Counting(range(10_000_000))
    out = encode(big, max_bytes=100)
    assert len(out.data) <= 100
    assert Counting.touched < 100


def test_endless_generator_is_consumed_only_as_far_as_fits() -> None:
    pulled = itertools.count()
    gen = ({"i": next(pulled)} for _ in itertools.count())
    out = encode({"rows": gen}, max_bytes=200)
    doc = json.loads(out.data)
    assert doc["rows"][-1] == f"{MARK}omitted: more items]"
    assert next(pulled) < 40  # pulled no further than what fits, plus a look-ahead
    assert Truncation(f"/rows/{len(doc['rows']) - 1}", "items", None, "items") in (out.truncations)


@pytest.mark.parametrize("markers", ["text", "structured"])
@pytest.mark.parametrize("strategy", STRATEGIES)
@pytest.mark.parametrize("max_bytes", [100, 1000, 10_000])
@pytest.mark.parametrize(
    "make", [lambda i: i, lambda i: {"i": i, "s": "x" * (i % 7)}], ids=["ints", "rows"]
)
def test_regression_a_generator_is_pulled_no_further_than_it_could_show(
    make: Any, max_bytes: int, strategy: Strategy, markers: MarkerStyle
) -> None:
    # Found by a tester: sized by a lower bound (a byte for 100), a stream of small
    # numbers was pulled about twice as far as it showed (449 pulled, 270 shown in
    # 1,000 bytes), and the caller's generator had lost the rest.
    for nested in (False, True):
        pulled: list[int] = []

        def gen(pulled: list[int]) -> Iterator[Any]:
            for i in itertools.count():
                pulled.append(i)
                yield make(i)

        obj: Any = {"a": 1, "g": gen(pulled)} if nested else gen(pulled)
        out = encode(obj, max_bytes=max_bytes, strategy=strategy, markers=markers)
        doc = json.loads(out.data)
        shown = (doc["g"] if nested else doc)[:-1]  # the last is the "more" marker
        assert shown == [make(i) for i in range(len(shown))]
        # Past what shows: the items that would fit in the marker's place (pulled to
        # learn whether the generator ends there and fits whole; the last of them may
        # straddle the marker's edge), and one look-ahead.
        unshown = [orjson.dumps(make(i)) for i in pulled[len(shown) : -1]]
        marker = len(Encoder(max_bytes=max_bytes, markers=markers)._mk.items(None))
        straddling = max((len(u) + 1 for u in unshown), default=0)
        assert len(b",".join(unshown)) <= marker + 1 + straddling, (nested, len(pulled))


@pytest.mark.parametrize(
    ("strategy", "count"),
    # "balanced" cuts only a list's first item (a later one is left out, and counted).
    [("balanced", 1), ("prefix", 1), ("prefix", 2)],
)
def test_regression_a_stream_whose_last_item_is_cut_claims_no_more(
    strategy: Strategy, count: int
) -> None:
    """A generator whose items all showed, the last cut, got "…[omitted: more items]"
    and an items report though it had ended: the look-ahead that tells was never
    pulled (guarantee 4: no claim without a measurement)."""
    items = ["x" * 30] * (count - 1) + ["y" * 1000]
    for wrap in (lambda g: g, lambda g: {"id": 1, "vals": g}):
        out = encode(wrap(iter(items)), max_bytes=150, strategy=strategy)
        doc = json.loads(out.data)
        shown = doc if isinstance(doc, list) else doc["vals"]
        assert not any(isinstance(x, str) and x.startswith(f"{MARK}omitted") for x in shown)
        assert all(t.kind != "items" for t in out.truncations)
        assert [t.kind for t in out.truncations] == ["string"]
    # With an item past the cut one, "more" is the truth.
    out = encode(iter([*items, "z"]), max_bytes=150, strategy=strategy)
    assert json.loads(out.data)[-1].startswith(f"{MARK}omitted")


def test_finite_generator_that_fits_is_a_list() -> None:
    assert bounded_dumps((i for i in range(3)), max_bytes=64) == b"[0,1,2]"


@given(
    st.lists(json_values(max_leaves=10), max_size=6),
    st.integers(1, 4),
    st.sampled_from(STRATEGIES),
    st.booleans(),
)
def test_a_generator_that_fits_shows_what_a_list_shows(
    items: list[Any], max_items: int, strategy: Strategy, nested: bool
) -> None:
    # A stream was pulled as far as two bytes a member of its count could show: with
    # max_items=3, a generator of three 40-byte rows showed one and "more items" in
    # 4 KiB, and one of a single row said "more items" too (found by the CLI's tests).
    def wrap(x: Any) -> Any:
        return {"g": x} if nested else x

    options: dict[str, Any] = {"max_items": max_items, "strategy": strategy}
    as_list = json.loads(encode(wrap(items), max_bytes=1 << 20, **options).data)
    as_gen = encode(wrap(iter(items)), max_bytes=1 << 20, **options)
    want = as_list["g"] if nested else as_list
    if len(items) > max_items:  # the count of the rest is the list's alone
        want[-1] = f"{MARK}omitted: more items]"
    assert (json.loads(as_gen.data)["g"] if nested else json.loads(as_gen.data)) == want


@pytest.mark.parametrize(
    "make",
    [lambda: iter([]), lambda: iter([1]), lambda: {"rows": (i for i in range(3))}],
    ids=["empty", "one", "nested generator"],
)
def test_regression_a_rendered_output_that_cut_nothing_is_complete(make: Any) -> None:
    # Found by the fuzzer: the fast path's rework marked every rendered output (an
    # iterator is always rendered: the walk cannot size it) incomplete with no cuts.
    out = encode(make(), max_bytes=1000)
    assert out.complete
    assert out.truncations == ()


def test_structured_marker_for_a_cut_string() -> None:
    out = encode({"log": "x" * 1000}, max_bytes=120, markers="structured")
    doc = json.loads(out.data)
    cut = doc["log"]["$truncated"]
    assert cut["kind"] == "string"
    assert cut["omitted"] == 1000 - len(cut["prefix"])


# -- bad input (guarantee 7) ----------------------------------------------------------


@pytest.mark.parametrize(
    ("value", "what"),
    [
        (math.nan, "nan"),
        (math.inf, "inf"),
        (-math.inf, "-inf"),
        (2**64, "int beyond 64 bits"),
        (-(2**63) - 1, "int beyond 64 bits"),
        ({1, 2}, "set of 2 items"),
        (b"abc", "bytes of 3 bytes"),
        (object(), "object"),
    ],
)
def test_unencodable_values_become_markers(value: Any, what: str) -> None:
    out = encode({"v": value}, max_bytes=200)
    assert json.loads(out.data) == {"v": f"{MARK}unencodable: {what}]"}
    assert out.truncations == (Truncation("/v", "unencodable", None, "bytes"),)
    assert not out.complete


@pytest.mark.parametrize("value", [math.nan, {1}, b"x", object(), 2**70])
def test_unencodable_error_mode_names_the_path(value: Any) -> None:
    with pytest.raises(EncodeError) as info:
        encode({"a": [value]}, max_bytes=200, unencodable="error")
    assert info.value.path == "/a/0"
    assert "/a/0" in str(info.value)
    assert isinstance(info.value, TypeError)
    assert isinstance(info.value, JsonBudgetError)


def test_cycle_becomes_a_marker() -> None:
    a: list[Any] = [1]
    a.append(a)
    out = encode(a, max_bytes=200)
    assert json.loads(out.data) == [1, f"{MARK}unencodable: cycle]"]


def test_lone_surrogates_are_replaced_and_said() -> None:
    out = encode({"s": "a\ud800b"}, max_bytes=200)
    assert json.loads(out.data) == {"s": f"a\ufffdb{MARK}replaced: 1 lone surrogates]"}
    assert out.truncations == (Truncation("/s", "unencodable", 1, "chars"),)


@given(
    st.lists(st.sampled_from(["a", "é", "\udc00", "\ud83d"]), min_size=1, max_size=40).map("".join),
    st.integers(MIN_BYTES, 160),
)
def test_a_cut_surrogate_string_says_how_many_chars_it_dropped(s: str, max_bytes: int) -> None:
    # Ten lone surrogates at 64 bytes were all kept but the "replaced" note was not:
    # the output said "…[truncated: 0 more chars]" and reported omitted=0.
    out = encode(s, max_bytes=max_bytes)
    text = json.loads(out.data)
    head, marker, tail = text.partition(MARK)
    cuts = [t for t in out.truncations if t.kind == "string"]
    if tail.startswith("truncated: "):
        assert len(cuts) == 1
        assert cuts[0].omitted == len(s) - len(head) >= 1
        assert tail == f"truncated: {cuts[0].omitted} more chars]"
    elif marker:
        lone = s.count("\udc00") + s.count("\ud83d")
        assert not cuts
        assert tail == f"replaced: {lone} lone surrogates]"
    else:
        assert text == s
        assert not out.truncations
    replaced = [t.omitted for t in out.truncations if t.kind == "unencodable"]
    assert replaced == [head.count("\ufffd")] * bool(head.count("\ufffd"))


def test_non_string_keys_become_marker_keys() -> None:
    out = encode({1: "a", None: "b"}, max_bytes=200)
    doc = json.loads(out.data)
    assert doc == {f"{MARK}key: int 1]": "a", f"{MARK}key: NoneType None]": "b"}
    assert len(out.truncations) == 2


def test_a_million_levels_deep_gives_a_depth_marker() -> None:
    root: list[Any] = []
    node = root
    for _ in range(1_000_000):
        child: list[Any] = []
        node.append(child)
        node = child
    out = encode(root, max_bytes=1000, max_depth=10)
    doc = json.loads(out.data)
    for _ in range(10):
        doc = doc[0]
    assert doc == f"{MARK}depth: list of 1 items]"
    assert out.truncations[0].kind == "depth"


def test_default_hook_as_in_orjson() -> None:
    out = bounded_dumps({"d": {1, 2}}, max_bytes=100, default=sorted)
    assert out == b'{"d":[1,2]}'


def test_default_that_raises_is_chained() -> None:
    def bad(obj: Any) -> Any:
        raise ValueError("nope")

    with pytest.raises(EncodeError) as info:
        encode({"x": object()}, max_bytes=100, default=bad)
    assert isinstance(info.value.__cause__, ValueError)
    assert info.value.path == "/x"


def test_orjson_types_are_encoded_as_orjson_does() -> None:
    @dataclasses.dataclass
    class Point:
        x: int
        y: str

    class Color(enum.Enum):
        RED = "red"

    obj = {
        "p": Point(1, "a"),
        "t": datetime.datetime(2026, 1, 2, 3, 4, 5),
        "d": datetime.date(2026, 1, 2),
        "u": uuid.UUID(int=7),
        "c": Color.RED,
        "tuple": (1, 2),
    }
    assert bounded_dumps(obj, max_bytes=1000) == orjson.dumps(obj)


# -- limits (guarantee 6) -------------------------------------------------------------


@pytest.mark.parametrize("bad", [0, -1, 63, True, 1.5, "100", None, 2**41])
def test_invalid_max_bytes_is_refused_naming_the_limit(bad: Any) -> None:
    with pytest.raises(ValueError, match="max_bytes"):
        Limits(bad)


@pytest.mark.parametrize(
    ("name", "bad"),
    [
        ("max_items", 0),
        ("max_items", True),
        ("max_field_bytes", 10),
        ("max_depth", 0),
        ("max_depth", 10_000),
        ("max_pages", -3),
        ("max_pages", 2.0),
    ],
)
def test_invalid_caps_are_refused_naming_the_limit(name: str, bad: Any) -> None:
    with pytest.raises(ValueError, match=name):
        Limits(1000, **{name: bad})


def test_bounded_dumps_refuses_a_bad_limit_before_touching_the_input() -> None:
    def never() -> Any:
        raise AssertionError("consumed")
        yield

    with pytest.raises(ValueError, match="max_bytes"):
        bounded_dumps(never(), max_bytes=10)


def test_encoder_is_reusable_and_takes_limits() -> None:
    enc = Encoder(Limits(100, max_items=2))
    assert enc.dumps([1, 2, 3]) == '[1,2,"…[omitted: 1 more items]"]'.encode()
    assert enc.dumps([1]) == b"[1]"


def test_bad_modes_are_refused() -> None:
    with pytest.raises(ValueError, match="strategy"):
        Encoder(max_bytes=100, strategy="middle")  # type: ignore[arg-type]
    with pytest.raises(TypeError, match="max_bytes"):
        Encoder()


def test_regression_whole_keeps_cuts_made_by_max_items() -> None:
    enc = Encoder(Limits(65536, max_items=2))
    out = enc.whole([1, 2, 3], 60_000)
    assert out is not None
    assert json.loads(out.data) == [1, 2, "…[omitted: 1 more items]"]
    assert enc.whole([1, 2, 3], 10) is None  # the budget still decides


def test_default_runs_once_per_object() -> None:
    calls: list[Any] = []

    def default(obj: Any) -> Any:
        calls.append(obj)
        return sorted(obj)

    values = [{1, 2}, {3}]
    out = encode(
        {"a": values[0], "b": "x" * 10_000, "c": values[1]}, max_bytes=200, default=default
    )
    assert json.loads(out.data)["a"] == [1, 2]
    assert sorted(map(id, calls)) == sorted(map(id, values))


@pytest.mark.parametrize("bad", [math.nan, math.inf, 2**70, "\ud800"])
def test_regression_bad_value_inside_a_run_of_flat_rows_is_still_marked(bad: Any) -> None:
    # Flat rows are encoded in runs, one orjson call per run: a value orjson refuses or
    # writes as null must still get its marker, and the rows around it stay whole.
    rows: list[dict[str, Any]] = [{"id": i, "v": None, "x": 1.5} for i in range(300)]
    rows[150]["x"] = bad
    out = encode(rows, max_bytes=100_000)
    doc = json.loads(out.data)
    assert doc[:150] == rows[:150]
    assert doc[151:] == rows[151:]
    assert doc[150]["id"] == 150
    assert doc[150]["x"] != 1.5
    assert out.truncations
    assert out.truncations[0].path.startswith("/150/x")


def test_runs_of_scalars_and_rows_fill_the_budget_exactly_as_item_by_item() -> None:
    rows = [{"id": i, "name": "n" * (i % 13)} for i in range(5000)]
    scalars = list(range(100_000))
    for data in (rows, scalars):
        out = encode(data, max_bytes=30_000)
        doc = json.loads(out.data)
        shown = doc[:-1]
        assert shown == data[: len(shown)]
        # whole items up to the budget: the next one would not have fit with the marker
        assert len(out.data) + len(orjson.dumps(data[len(shown)])) + 1 > 30_000 - 40


@pytest.mark.parametrize(
    "make",
    [
        pytest.param(lambda: "é" * 100_000_000, id="a 100 M-character string"),
        pytest.param(
            lambda: {"rows": [{"id": i, "note": "n" * 200} for i in range(200_000)]},
            id="50 MB of rows",
        ),
        pytest.param(lambda: {"log": "x" * 200_000_000, "status": "done"}, id="a 200 MB field"),
    ],
)
def test_cost_follows_the_budget_not_the_input(make: Any) -> None:
    # Guarantee 5: never encode the input whole to cut it afterwards. Encoding any of
    # these whole would allocate at least its encoded size; the budget is 64 KiB.
    import tracemalloc

    obj = make()
    tracemalloc.start()
    try:
        out = encode(obj, max_bytes=65_536)
        _, peak = tracemalloc.get_traced_memory()
    finally:
        tracemalloc.stop()
    assert len(out.data) <= 65_536
    assert peak < 1024 * 1024


@pytest.mark.parametrize(
    "call",
    [
        pytest.param(lambda obj: encode(obj, max_bytes=65_536).data, id="encode"),
        # Encoder.dumps and bounded_dumps take a path of their own when the object fits.
        pytest.param(lambda obj: Encoder(max_bytes=65_536).dumps(obj), id="Encoder.dumps"),
        pytest.param(lambda obj: bounded_dumps(obj, max_bytes=65_536), id="bounded_dumps"),
    ],
)
def test_regression_short_output_holds_no_spare_capacity(call: Any) -> None:
    # orjson's bytes keep at least 4 KiB of capacity, many times the length of a short
    # result; a result that fits whole must not carry that to the caller. (A long one
    # keeps spare capacity it never touches, which costs address space, not memory.)
    import tracemalloc

    obj = {"text": "x" * 1_000}
    # Once first: what the first call in a process caches (a configuration, a class
    # lookup) stays for the process and is no part of the result; which test made the
    # first call depended on the scheduling, and CI once counted it here.
    call(obj)
    tracemalloc.start()
    try:
        data = call(obj)
        held, _ = tracemalloc.get_traced_memory()
    finally:
        tracemalloc.stop()
    assert data == orjson.dumps(obj)
    assert held < 2 * len(data)


def test_regression_rewritten_keys_never_repeat_a_key() -> None:
    # Found by the fuzzer: two keys that differ only in lone surrogates both became
    # "\ufffd\ufffd", so the output held one key twice and a truncation's pointer named
    # the wrong member. A rewritten key now carries its own "…[" marker and takes a
    # number until no key of the object (nor an earlier rewritten one) has its text.
    # Built from pairs: a linter takes keys that differ only in surrogates for repeats.
    pairs: list[tuple[Any, Any]] = [
        ("\udede\udede", [1]),
        ("\udada\udada", 2),
        ("\ufffd\ufffd", 3),
        (1, "a"),
        ("…[key: int 1]", 4),
        ("1", 5),
    ]
    value = dict(pairs)
    for strategy in ("balanced", "prefix"):
        out = encode(value, max_bytes=2000, strategy=strategy)
        doc = json.loads(out.data)
        assert len(doc) == len(value)
        assert sorted(doc.values(), key=str) == sorted([[1], 2, 3, "a", 4, 5], key=str)
        for t in out.truncations:
            assert t.kind == "unencodable"
            resolve(doc, t.path)
        assert doc["\ufffd\ufffd"] == 3  # a key that needed no rewriting keeps its text


@settings(max_examples=300, deadline=None)
@given(
    st.dictionaries(
        st.text(alphabet="\ud800\udfffa\ufffd…", max_size=3) | st.integers(0, 3),
        st.integers(),
        max_size=8,
    ),
    st.sampled_from(["balanced", "prefix"]),
)
def test_property_every_member_keeps_a_key_of_its_own(value: dict[Any, int], strategy: Any) -> None:
    out = encode(value, max_bytes=4000, strategy=strategy)
    doc = json.loads(out.data)
    assert len(doc) == len(value)
    for t in out.truncations:
        resolve(doc, t.path)


@settings(max_examples=2000, deadline=None)
@given(
    pairs=st.lists(
        st.tuples(st.integers(0, 40), st.none() | st.integers(0, 80)), min_size=1, max_size=8
    ),
    extra=st.integers(0, 300),
)
def test_the_water_level_is_the_highest_that_fits(
    pairs: list[tuple[int, int | None]], extra: int
) -> None:
    from jsonbudget._encode.render import _water_level

    mins = [m for m, _ in pairs]
    sizes = [1 << 62 if grow is None else m + grow for m, grow in pairs]
    space = sum(mins) + extra

    def total(level: int) -> int:
        return sum(max(m, min(s, level)) for s, m in zip(sizes, mins, strict=True))

    level = _water_level(sizes, mins, space)
    assert 0 <= level <= space
    assert total(level) <= space
    assert level == space or total(level + 1) > space


@pytest.mark.parametrize("strategy", ["balanced", "prefix"])
def test_a_marker_that_says_more_leaves_the_known_count_in_the_report(strategy: Strategy) -> None:
    """Regression: where an exact count did not fit and the marker fell back to "more",
    the report dropped the count too (``omitted=None``), though it was known."""
    enc = Encoder(max_bytes=100, strategy=strategy)
    listed = enc.fit(list(range(1000)), 30)
    assert listed is not None
    assert listed.data == f'["{MARK}omitted: more items]"]'.encode()
    assert listed.truncations == (Truncation("/0", "items", 1000, "items"),)
    nested: Any = []
    for _ in range(40):
        nested = [nested]
    deep = encode(nested, max_bytes=64, strategy=strategy)
    assert all(t.omitted == 1 for t in deep.truncations if t.kind == "items")
    if strategy == "balanced":  # "prefix" cuts the string instead of leaving the key out
        keyed = enc.fit({"a": "b" * 500}, 30)
        assert keyed is not None
        assert orjson.loads(keyed.data) == {"…": "[omitted: more keys]"}
        assert keyed.truncations == (Truncation("/…", "keys", 1, "keys"),)


def test_a_marker_counts_a_subclass_by_its_real_length() -> None:
    # A depth or set marker asked the subclass's own __len__, which may raise or lie.
    class Lying(list[int]):
        def __len__(self) -> int:
            raise RuntimeError("no")

    class LyingSet(set[int]):
        def __len__(self) -> int:
            return 99

    out = encode({"d": [Lying([1, 2])], "s": LyingSet({1})}, max_bytes=200, max_depth=2)
    assert json.loads(out.data) == {
        "d": [f"{MARK}depth: list of 2 items]"],
        "s": f"{MARK}unencodable: LyingSet of 1 items]",
    }


@pytest.mark.parametrize("strategy", ["balanced", "prefix"])
def test_a_key_of_lone_surrogates_shows_at_every_budget_that_can_hold_it(
    strategy: Strategy,
) -> None:
    """Regression: {"\\ud800" * 300: 1} showed (cut) at 300 bytes and whole at 950, but
    was dropped as "[omitted: 1 more keys]" at every budget between: its replaced text
    (3 bytes a character) did not fit, and the key was not cut instead."""
    key = "\ud800" * 300
    for max_bytes in range(200, 1001, 25):
        out = encode({key: 1, "b": 2}, max_bytes=max_bytes, strategy=strategy)
        parsed = orjson.loads(out.data)
        assert len(out.data) <= max_bytes
        first = next(iter(parsed))
        assert first.startswith("\ufffd"), (max_bytes, out.data[:80])
        assert "…[key" in first
        kinds = {t.kind for t in out.truncations if t.path == "/" + first}
        assert kinds, "a rewritten key is reported"
        assert kinds <= {"string", "unencodable"}


def test_depth_markers_count_an_object_and_name_an_iterator() -> None:
    """Regression: an object at the depth limit read "…[depth: object]" (the docs promise
    its count) and a generator "…[depth: Stream]", the name of an internal class."""

    def rows() -> Any:
        yield 1

    out = encode({"a": {"b": {"c": 1, "d": 2}}, "g": [rows()]}, max_bytes=200, max_depth=2)
    assert orjson.loads(out.data) == {
        "a": {"b": "…[depth: object with 2 keys]"},
        "g": ["…[depth: iterator]"],
    }


@pytest.mark.parametrize("budget", [2**70, 1.5, None, "10", True])
def test_the_building_blocks_refuse_a_budget_that_is_not_an_int(budget: Any) -> None:
    """Regression: Encoder.fit and Encoder.whole raised OverflowError or TypeError."""
    enc = Encoder(max_bytes=100)
    for verb in (enc.fit, enc.whole):
        with pytest.raises(LimitError, match="budget"):
            verb({"a": 1}, budget)
    assert enc.fit({"a": 1}, -1) is None


@pytest.mark.parametrize("path", [None, 3, b"/a", "bad", "a/b"])
def test_regression_fit_refuses_a_path_that_is_not_a_json_pointer(path: Any) -> None:
    # Regression: None raised an internal TypeError, worded differently by the compiled
    # and the Python paths; "bad" was taken and gave pointers like "bad/k".
    enc = Encoder(max_bytes=100)
    with pytest.raises(LimitError, match="path"):
        enc.fit({"k": "v" * 200}, 50, path=path)
    out = enc.fit({"k": "v" * 200}, 50, path="/items/3")
    assert out is not None
    assert [t.path for t in out.truncations] == ["/items/3/k"]


@pytest.mark.parametrize("path", [None, 5, b"/a", "x", "a/b"])
def test_regression_whole_refuses_a_path_that_is_not_a_json_pointer(path: Any) -> None:
    """Found by a tester: `whole` took any path, which `fit` refuses: "x" gave reports
    at "x/a" (no JSON Pointer), and 5 or None was taken and raised an internal TypeError
    from joining the reports only when `truncations` was first read."""
    enc = Encoder(max_bytes=100)
    with pytest.raises(LimitError, match="path") as info:
        enc.whole({"a": math.nan}, 100, path=path)
    assert info.value.name == "path"
    out = enc.whole({"a": math.nan}, 100, path="/items/3")
    assert out is not None
    assert [t.path for t in out.truncations] == ["/items/3/a"]


@pytest.mark.parametrize("markers", ["text", "structured"])
def test_regression_marker_refuses_what_json_cannot_write(markers: MarkerStyle) -> None:
    """Found by a tester: `Encoder.marker` was undocumented and checked nothing: a lone
    surrogate leaked orjson's own error, a non-str became its str() (or, structured, a
    kind that is not a string)."""
    enc = Encoder(max_bytes=100, markers=markers)
    for kind, what in ((5, "x"), ("oversized", None), ("oversized", b"x")):
        with pytest.raises(TypeError, match=r"kind|what"):
            enc.marker(kind, what)  # type: ignore[arg-type]
    with pytest.raises(LimitError, match="lone surrogate") as info:
        enc.marker("oversized", "a\ud800")
    assert info.value.name == "what"
    shown = orjson.loads(enc.marker("oversized", "spilled as r, 9 bytes"))
    bare = orjson.loads(enc.marker("oversized", ""))
    if markers == "text":
        assert (shown, bare) == ("…[oversized: spilled as r, 9 bytes]", "…[oversized]")
    else:
        assert shown == {"$truncated": {"kind": "oversized", "what": "spilled as r, 9 bytes"}}
        assert bare == {"$truncated": {"kind": "oversized"}}


def test_regression_a_rewritten_key_never_claims_a_cut_of_nothing() -> None:
    # A lone-surrogate key whose note did not fit was "…[key truncated: 0 more chars]",
    # reported as a string cut of 0 characters.
    # Two distinct lone surrogates (ruff reads both as U+FFFD).
    keys = {"\ud801": None, "a": None, "\ud800": None}  # noqa: F601
    for max_bytes in range(64, 140):
        out = encode(keys, max_bytes=max_bytes)
        for t in out.truncations:
            if t.kind == "string":
                assert t.omitted
        assert b"truncated: 0 more" not in out.data


@pytest.mark.parametrize("markers", ["text", "structured"])
def test_regression_whole_never_shortens_a_marker(markers: Any) -> None:
    """Found by a tester: Encoder.whole, "uncut if that fits, else None", returned its
    depth and unencodable markers shortened to their kind ("…[depth]") where the budget
    was short of the full rendering: a cut the budget made, reported as none."""
    enc = Encoder(max_bytes=1000, max_depth=1, markers=markers)
    for value in ([[None], {"again": [None]}], [float("nan"), {1, 2, 3}]):
        full = enc.encode(value).data
        assert enc.whole(value, len(full)) == enc.encode(value)
        for budget in range(len(full) - 30, len(full)):
            assert enc.whole(value, budget) is None, budget


def test_regression_the_one_call_verbs_key_a_default_hook_by_identity() -> None:
    """Found by a tester: bounded_dumps and encode reused the encoder of an earlier hook
    that compared equal (a frozen dataclass with a compare=False field), so the earlier
    hook ran: "UPPER:SET" where the hook given says "lower:set"."""

    @dataclasses.dataclass(frozen=True)
    class Hook:
        upper: bool = dataclasses.field(compare=False)

        def __call__(self, value: Any) -> str:
            text = f"{type(value).__name__}:set"
            return text.upper() if self.upper else text.lower()

    assert Hook(upper=True) == Hook(upper=False)
    assert bounded_dumps({1}, max_bytes=100, default=Hook(upper=True)) == b'"SET:SET"'
    assert bounded_dumps({1}, max_bytes=100, default=Hook(upper=False)) == b'"set:set"'
    assert encode({1}, max_bytes=100, default=Hook(upper=False)).data == b'"set:set"'


def test_regression_whole_and_fit_above_max_bytes_copy_str_subclasses_whole() -> None:
    """Found by a tester: with a budget above the encoder's max_bytes, whole() and fit()
    copied a str subclass's key to max_bytes characters and wrote it as if whole: 36
    characters lost under complete=True, no marker."""

    class Text(str):
        pass

    enc = Encoder(max_bytes=64)
    key = Text("k" * 100)
    for out in (enc.whole({key: 1}, 400), enc.fit({key: 1}, 400)):
        assert out is not None
        assert out.complete
        assert out.data == orjson.dumps({"k" * 100: 1})
    shown = enc.whole([Text("v" * 100)], 400)
    assert shown is not None
    assert shown.data == orjson.dumps(["v" * 100])


def _peak_per_output_byte(make: Any, run: Any) -> float:
    """tracemalloc's peak while *run* encodes ``make()``, less the input, per byte of the
    output: allocations counted, never timed."""
    import gc
    import tracemalloc

    gc.collect()
    tracemalloc.start()
    try:
        obj = make()
        base = tracemalloc.get_traced_memory()[0]
        tracemalloc.reset_peak()
        out = run(obj)
        peak = tracemalloc.get_traced_memory()[1] - base
    finally:
        tracemalloc.stop()
    data = out.data if isinstance(out, Encoded) else out
    assert data
    return peak / len(data)


def test_regression_marker_heavy_lists_are_rendered_in_a_few_times_their_output() -> None:
    """Found by measuring: a list of NaN rendered (by `encode` or `dumps_whole`) held
    about 63 times its output (90 times with numbers between the NaN): each marker was
    orjson's bytes with a KiB of capacity, its report three tuples and a pointer, every
    item a part of its own until the join. Now about 8-9 times."""
    from jsonbudget._encode.encoder import dumps_whole

    nans = lambda: [math.nan] * 20_000  # noqa: E731
    mixed = lambda: [float(i) if i % 2 else math.nan for i in range(20_000)]  # noqa: E731
    runs = [
        (nans, dumps_whole),
        (nans, lambda o: encode(o, max_bytes=65536)),
        (mixed, lambda o: encode(o, max_bytes=65536)),
        (mixed, lambda o: encode(o, max_bytes=1 << 20, strategy="prefix")),
    ]
    for make, run in runs:
        assert _peak_per_output_byte(make, run) < 14


class _Text(str):
    """A str subclass, as NumPy's str_ or a StrEnum member: read as a clip of its text."""

    __slots__ = ()


@settings(max_examples=300)
@given(
    # Escapes and multibyte characters: a cut then comes out short of its room.
    st.lists(st.text(alphabet='"\\\n\x01aé€😀', min_size=20, max_size=400), min_size=1, max_size=4),
    st.integers(64, 400),
    st.integers(32, 200),
    st.sampled_from(["balanced", "prefix"]),
)
def test_regression_a_str_subclass_over_the_field_cap_shows_as_its_text(
    texts: list[str], max_bytes: int, max_field_bytes: int, strategy: Strategy
) -> None:
    """Found by a property test on NumPy strings: a str subclass longer than the budget
    is read as a clip of its text, whose full rendering under a field cap (the cap's cut)
    counted as whole only when the room held the whole field cap, where a str's counts
    when its cut fits (a cut comes out a few bytes short of the cap). With the room in
    between, a list of such strings showed one cut and "…[omitted: 1 more items]", the
    same list of str two cut strings."""
    limits = Limits(max_bytes, max_field_bytes=max_field_bytes)
    plain = encode(texts, limits, strategy=strategy)
    assert encode([_Text(t) for t in texts], limits, strategy=strategy) == plain
    assert encode({"k": [_Text(t) for t in texts]}, limits, strategy=strategy) == encode(
        {"k": texts}, limits, strategy=strategy
    )

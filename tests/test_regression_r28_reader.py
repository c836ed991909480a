"""r28: a cut member of an object's page shows its key and value pointers wherever the
page can hold them.

Only a page holding the cut member alone was made again with both pointers whole: where
a later member fitted beside the page builder's cut of it, the builder's cut stayed,
and it could leave both pointers out (`{"…": "[omitted: 4 more keys]"}`), though the
page had room for them. Ending that page after the cut member could not always hold
them either: its cursor can be what pushes them out, where a page that also holds the
members after it ends the object with none.
"""

from __future__ import annotations

import re
import tempfile
from pathlib import Path
from typing import Any

import orjson
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from jsonbudget import ResultGate, ResultReader, SpillStore, read_result
from jsonbudget._agents.reader import LEAST_READ_BYTES

from .strategies import cut_keys, json_scalars

CUT = re.compile(r"…\[truncated: \d+ more chars\]$")
#: The reports of a member shown as its pointers alone (its key and value left out).
LEFT_OUT = [
    {"path": "/items/0/…", "kind": "keys", "omitted": 2, "unit": "keys"},
    {"path": "/items/0", "kind": "item", "omitted": None, "unit": "bytes"},
]


def _escape(token: str) -> str:
    return token.replace("~", "~0").replace("/", "~1")


def _pages(reader: ResultReader, ref: str, pointer: str) -> list[dict[str, Any]]:
    pages, cursor = [], None
    while True:
        page = read_result(ref, pointer, cursor, reader=reader, principal="p")
        assert len(page.data) <= reader.max_bytes
        pages.append(orjson.loads(page.data))
        if page.complete:
            return pages
        cursor = page.next_cursor


def _string(reader: ResultReader, ref: str, pointer: str) -> str:
    return "".join(CUT.sub("", p["items"][0]) for p in _pages(reader, ref, pointer))


def _least(env: dict[str, Any], item: dict[str, Any], after: list[Any]) -> int:
    """The size of the page *env* with its cut member *item* shown as its pointers
    alone, the rest left out, and with *after* (the members after it) beside it, the
    page then ending the object."""
    least = {k: item[k] for k in ("key_pointer", "value_pointer")}
    page = {**env, "items": [{**least, "…": "[omitted: 2 more keys]"}], "truncated": LEFT_OUT}
    if after:
        page.update(items=[page["items"][0], *after], complete=True, next_cursor=None)
        page.pop("incomplete_reason", None)
    return len(orjson.dumps(page))


def _check_object(reader: ResultReader, ref: str, pointer: str, members: dict[str, Any]) -> None:
    """Each member of *members* is listed once, in order; one whose key does not show as
    it is has both pointers whole wherever its page holds them, and they read its key
    and value."""
    keys = list(members)
    pages = _pages(reader, ref, pointer)
    i = 0
    for env in pages:
        for item in env["items"]:
            assert i < len(keys), env
            # A member the page cannot cut at all shows as a placeholder string.
            shown = item if isinstance(item, dict) else {}
            if shown.get("key") == keys[i] and "key_pointer" not in shown:
                i += 1
                continue
            want = {"key_pointer": f"{pointer}/~k{i}", "value_pointer": f"{pointer}/~v{i}"}
            if {k: shown.get(k) for k in want} != want:
                # Only a page too small for the pointers beside their marks cuts them,
                # both as the page ends (with its cursor) and ending the object.
                assert item is env["items"][0], env
                rest = [{"key": k, "value": members[k]} for k in keys[i + 1 :]]
                assert _least(env, want, []) > reader.max_bytes, env
                assert _least(env, want, rest) > reader.max_bytes, env
            else:
                assert _string(reader, ref, want["key_pointer"]) == keys[i]
                first = orjson.loads(
                    read_result(ref, want["value_pointer"], reader=reader, principal="p").data
                )
                value = members[keys[i]]
                if not isinstance(value, (dict, list, str)):
                    assert first["items"] == [value]
            i += 1
    assert i == len(keys)


def test_regression_a_member_cut_beside_later_members_shows_both_pointers(
    tmp_path: Path,
) -> None:
    """The tester's case: the page held `{"…": "[omitted: 4 more keys]"}` and "after"."""
    reader = ResultReader(spill=SpillStore(tmp_path), max_bytes=564)
    gate = ResultGate(max_bytes=425, reader=reader, principal="p")
    inner = {"a" * 400: True, "after": 1}
    out = gate.gate({"x" * 40: inner, "pad": "x" * 1000})
    assert out.shown_ref is not None
    pointer = "/" + "x" * 40
    page = orjson.loads(read_result(out.shown_ref, pointer, reader=reader, principal="p").data)
    first = page["items"][0]
    assert first["key_pointer"] == pointer + "/~k0"
    assert first["value_pointer"] == pointer + "/~v0"
    _check_object(reader, out.shown_ref, pointer, inner)


def test_regression_a_cut_member_shows_both_pointers_whatever_the_pointer_length(
    tmp_path: Path,
) -> None:
    """With the same member, a pointer of 36 characters showed both pointers, 40 to 48
    neither and 52 to 56 the key pointer only; and a member before the cut one, a
    unicode key and values of each kind."""
    key = 'ab\t\x00"\u2028\n\x1f]/b😀\u0301\\/é𝄞…~ 字' * 10
    store = SpillStore(tmp_path)
    for value in (True, "v" * 900, {"q": 1, "r": "s" * 700}, list(range(200))):
        for before in (0, 1, 4):
            inner = {f"k{i}": i for i in range(before)} | {key: value, "after": 1}
            for length in range(0, 64, 4):
                outer = "x" * length
                name = store.put(orjson.dumps({outer: inner, "pad": 1}), label="t")
                for budget in (LEAST_READ_BYTES, 564, 700):
                    reader = ResultReader(spill=store, max_bytes=budget)
                    ref = reader.reference(name, principal="p")
                    _check_object(reader, ref, "/" + outer, inner)


#: Keys a page cuts (long, multibyte, needing escapes and ~0/~1 in a pointer), and others.
long_keys = st.one_of(
    st.builds(
        lambda unit, size: (unit * size)[:size],
        st.text(alphabet=st.sampled_from(list('a~/01é😀\u2028"\\\x00')), min_size=1),
        st.integers(30, 1200),
    ),
    cut_keys,
)


@settings(
    max_examples=150,
    deadline=None,
    suppress_health_check=[HealthCheck.too_slow, HealthCheck.data_too_large],
)
@given(
    outer=st.builds(
        lambda unit, size: (unit * size)[:size],
        st.text(alphabet=st.sampled_from(list("x~/é0")), min_size=1, max_size=4),
        st.integers(0, 80),
    ),
    members=st.dictionaries(
        long_keys,
        st.one_of(
            json_scalars,
            st.text(max_size=800),
            st.lists(st.integers(0, 10**6), max_size=120),
            st.dictionaries(st.text(max_size=5), json_scalars, max_size=8),
        ),
        min_size=1,
        max_size=4,
    ),
    # Members small enough to fit beside a cut one.
    tail=st.dictionaries(
        st.text(max_size=6), st.one_of(st.none(), st.integers(0, 2**63)), max_size=4
    ),
    budget=st.one_of(st.integers(LEAST_READ_BYTES, 700), st.integers(LEAST_READ_BYTES, 1500)),
)
def test_regression_every_cut_member_shows_its_pointers_where_the_page_holds_them(
    outer: str, members: dict[str, Any], tail: dict[str, Any], budget: int
) -> None:
    members = members | {k: v for k, v in tail.items() if k not in members}
    with tempfile.TemporaryDirectory() as tmp:
        store = SpillStore(tmp)
        name = store.put(orjson.dumps({outer: members}), label="t")
        reader = ResultReader(spill=store, max_bytes=budget)
        ref = reader.reference(name, principal="p")
        _check_object(reader, ref, "/" + _escape(outer), members)

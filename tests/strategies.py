"""Hypothesis strategies shared by the tests and the fuzz harness."""

from __future__ import annotations

import dataclasses
import datetime as dt
import math
import uuid
from collections.abc import Iterator, Mapping
from typing import Any

from hypothesis import strategies as st

#: Text that stresses the encoder: escapes, control characters, 2-, 3- and 4-byte UTF-8.
awkward_text = st.text(
    alphabet=st.one_of(
        st.sampled_from(list('"\\/\n\r\t\b\f\x00\x01\x1f\x7f')),
        st.sampled_from(list("aé€😀中\u2028\u2029ß")),
        st.characters(blacklist_categories=["Cs"]),
    ),
    max_size=60,
)

keys = st.one_of(st.text(max_size=8), st.sampled_from(["~", "/", "a/b", "~1", "…", ""]))

json_scalars = st.one_of(
    st.none(),
    st.booleans(),
    st.integers(min_value=-(2**63), max_value=2**64 - 1),
    st.floats(allow_nan=False, allow_infinity=False),
    awkward_text,
)


def json_values(max_leaves: int = 40) -> st.SearchStrategy[Any]:
    """Arbitrary JSON-like values: deep, wide, multibyte, escape-heavy."""
    return st.recursive(
        json_scalars,
        lambda children: st.one_of(
            st.lists(children, max_size=12),
            st.dictionaries(keys, children, max_size=8),
        ),
        max_leaves=max_leaves,
    )


@dataclasses.dataclass
class Record:
    """A dataclass as orjson writes it from ``__dict__``: ``_secret`` is left out."""

    name: Any
    value: Any
    _secret: Any = "hidden"


@dataclasses.dataclass(slots=True)
class Slotted:
    """A dataclass with ``__slots__``, which orjson reads field by field."""

    value: Any


def with_extra(value: Any) -> Record:
    """A `Record` with an attribute set after construction, which orjson writes too."""
    r = Record("extra", None)
    r.later = value  # type: ignore[attr-defined]
    return r


def odd_values(max_leaves: int = 30) -> st.SearchStrategy[Any]:
    """JSON-like values mixed with what needs a marker or orjson treats apart: NaN and
    infinities, ints beyond 64 bits, dates, UUIDs, tuples, int keys, dataclasses."""
    return st.recursive(
        st.one_of(
            json_values(20),
            st.sampled_from([math.nan, math.inf, 2**70, dt.date(2024, 5, 6), uuid.UUID(int=7)]),
        ),
        lambda children: st.one_of(
            st.lists(children, max_size=6),
            st.lists(children, max_size=6).map(tuple),
            st.dictionaries(
                st.one_of(st.text(max_size=4), st.integers(0, 9)), children, max_size=5
            ),
            st.builds(Record, children, children),
            st.builds(Slotted, children),
            children.map(with_extra),
        ),
        max_leaves=max_leaves,
    )


#: Budgets from the smallest valid one upward; larger than most generated inputs too.
budgets = st.one_of(st.integers(min_value=64, max_value=400), st.integers(64, 20_000))


class LyingList(list[Any]):
    """A list whose ``__len__`` says *claim*, whatever it holds."""

    claim = 0

    def __len__(self) -> int:
        return self.claim


class ClaimsAll(Mapping[str, Any]):
    """A mapping that answers every key: ``key in m`` is always True."""

    def __init__(self, items: dict[str, Any]) -> None:
        self._items = items

    def __getitem__(self, key: str) -> Any:
        return self._items.get(key, 0)

    def __contains__(self, key: object) -> bool:
        return True

    def __iter__(self) -> Iterator[str]:
        return iter(self._items)

    def __len__(self) -> int:
        return len(self._items) + 3


class RepeatsKeys(Mapping[str, Any]):
    """A mapping whose iteration yields each of its keys twice (its items() too)."""

    def __init__(self, items: dict[str, Any]) -> None:
        self._items = items

    def __getitem__(self, key: str) -> Any:
        return self._items[key]

    def __iter__(self) -> Iterator[str]:
        for k in self._items:
            yield k
            yield k

    def __len__(self) -> int:
        return 2 * len(self._items)


class LyingStr(str):
    """A str whose own methods lie or raise: orjson writes its text and calls none of
    them, so the encoder must not either."""

    __slots__ = ()

    def __len__(self) -> int:
        return 0

    def __getitem__(self, index: Any) -> str:
        return "Z" * 1000

    def __str__(self) -> str:
        raise RuntimeError("LyingStr.__str__")

    def __repr__(self) -> str:
        raise RuntimeError("LyingStr.__repr__")

    def __eq__(self, other: object) -> bool:
        return True

    def __hash__(self) -> int:
        return str.__hash__(self)

    def encode(self, *args: Any, **kwargs: Any) -> bytes:
        raise RuntimeError("LyingStr.encode")

    def replace(self, *args: Any, **kwargs: Any) -> str:
        raise RuntimeError("LyingStr.replace")

    def isascii(self) -> bool:
        raise RuntimeError("LyingStr.isascii")


def lying_str(value: Any) -> Any:
    """*value* with every str in it (keys included) a `LyingStr`; anything else as is."""
    if isinstance(value, str):
        return LyingStr(str.__str__(value))  # its own __str__ raises
    if isinstance(value, list):
        return [lying_str(x) for x in value]
    if isinstance(value, dict):
        return {lying_str(k): lying_str(v) for k, v in value.items()}
    return value


@dataclasses.dataclass
class Box:
    """A dataclass holding any value: the encoder renders it field by field."""

    value: Any
    label: str = "box"


def _lying(items: list[Any], claim: int) -> LyingList:
    out = LyingList(items)
    out.claim = claim
    return out


#: Keys a marker member could be given: a chosen marker key must avoid them.
marker_like_keys = st.sampled_from(["…", "a", "…1", "$truncated", "$truncated1"])


def hostile_values(max_leaves: int = 30) -> st.SearchStrategy[Any]:
    """`odd_values` mixed with containers that lie: lying lengths, mappings that claim
    every key or repeat their keys, dataclasses, generators, shared subtrees."""
    return st.recursive(
        odd_values(10),
        lambda children: st.one_of(
            st.builds(_lying, st.lists(children, max_size=5), st.integers(0, 1000)),
            st.builds(
                ClaimsAll,
                st.dictionaries(
                    st.sampled_from(["…", "a", "…1", "$truncated"]), children, max_size=4
                ),
            ),
            st.builds(
                RepeatsKeys, st.dictionaries(st.sampled_from(["a", "b", "…"]), children, max_size=3)
            ),
            st.builds(Box, children),
            st.lists(children, max_size=4).map(lambda xs: (x for x in xs)),
            children.map(lambda x: [x, x, {"again": x}]),
            children.map(lying_str),
        ),
        max_leaves=max_leaves,
    )


#: Keys that stress the compiled balanced cut: marker-like keys it must avoid when it
#: names an omission, keys long enough to be cut themselves, escapes and multibyte text.
cut_keys = st.one_of(
    keys,
    st.sampled_from(["…", "…1", "…2", "…3", "…10"]),
    st.text(alphabet=st.sampled_from(list('ab"\\é€😀\n')), min_size=40, max_size=300),
)


def clean_values(max_leaves: int = 60) -> st.SearchStrategy[Any]:
    """Values the compiled cut takes (exact dicts, lists, tuples, str, int64, floats,
    bool, None), with long strings, long keys and shared subtrees."""
    scalars = st.one_of(
        st.none(),
        st.booleans(),
        st.integers(min_value=-(2**63), max_value=2**63 - 1),
        st.floats(allow_nan=False, allow_infinity=False),
        awkward_text,
        st.text(alphabet=st.sampled_from(list('xé€😀"\\\n')), min_size=50, max_size=2000),
    )
    return st.recursive(
        scalars,
        lambda children: st.one_of(
            st.lists(children, max_size=40),
            st.lists(children, max_size=6).map(tuple),
            st.dictionaries(cut_keys, children, max_size=10),
            children.map(lambda x: [x, {"again": x}, x]),
        ),
        max_leaves=max_leaves,
    )

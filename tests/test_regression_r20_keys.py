"""Regression (r20): keys rewritten to one text cost each the same, not more each time.

The renderer made such a key unique by trying the suffixes 1, 2, 3... from the start
every time, and compared each long try with every key of the object: the k-th key of a
text cost k tries, so an object of them cost 4x per doubling of the budget (100,000
tuple keys shortened alike: 19.6 s at 512 KiB). Counted by tries, never timed.
"""

from __future__ import annotations

import json
from collections.abc import Iterator, Mapping
from itertools import pairwise
from typing import Any

import pytest

from jsonbudget import encode
from jsonbudget._encode import render
from jsonbudget._encode.render import EncodeCall
from jsonbudget.typing import Strategy
from tests.jsonptr import resolve

SIZES = (250, 500, 1000, 2000)


class Repeats(Mapping[str, int]):
    """A mapping that yields one key *n* times (encoder.md: a key yielded again)."""

    def __init__(self, n: int) -> None:
        self.n = n

    def __len__(self) -> int:
        return self.n

    def __iter__(self) -> Iterator[str]:
        return ("a" for _ in range(self.n))

    def __getitem__(self, key: str) -> int:
        return 1


def _tuples(n: int) -> dict[Any, int]:
    # reprlib shortens every key to `tuple (0, 1, 2, 3, 4, 5, ...)`
    return {(*range(20), i): 1 for i in range(n)}


def _tries(monkeypatch: pytest.MonkeyPatch) -> list[int]:
    """Counts each text looked up in an object's taken keys: one a suffix tried."""
    tries = [0]
    short_keys = EncodeCall._short_keys

    def counted(pairs: list[Any]) -> Any:
        taken = short_keys(pairs)

        def contains(self: Any, text: object) -> bool:
            tries[0] += 1
            return type(taken).__contains__(self, text)

        return type("Counted", (type(taken),), {"__contains__": contains})(taken)

    monkeypatch.setattr(EncodeCall, "_short_keys", staticmethod(counted))
    return tries


def _linear(counts: list[int]) -> None:
    for a, b in pairwise(counts):
        assert b <= 2.3 * a, counts  # 4x per doubling when each key searched afresh


@pytest.mark.parametrize("strategy", ["balanced", "prefix"])
@pytest.mark.parametrize("per_key", [30, 100])  # cut, and whole
@pytest.mark.parametrize("make", [_tuples, Repeats], ids=["tuples", "repeated"])
def test_regression_keys_rewritten_to_one_text_cost_linear(
    monkeypatch: pytest.MonkeyPatch, make: Any, per_key: int, strategy: Strategy
) -> None:
    tries = _tries(monkeypatch)
    counts = []
    for n in SIZES:
        before = tries[0]
        out = encode(make(n), max_bytes=per_key * n, strategy=strategy)
        counts.append(tries[0] - before)
        keys = [t.path for t in out.truncations if t.kind == "unencodable" and t.unit == "keys"]
        assert len(keys) > n // 4
        # the same keys as a search from suffix 1 gives: the first free ones, in order
        base = keys[0][1:]
        assert [k[1:] for k in keys] == [base] + [f"{base}{i}" for i in range(1, len(keys))]
    _linear(counts)


def test_regression_keys_long_after_rewriting_are_not_compared_with_every_key(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    # A key with a lone surrogate is rewritten (`…[key: 1 lone surrogates replaced]`) and
    # stays long: each was compared with every key of the object, in `_is_str` each.
    calls = [0]
    is_str = render._is_str

    def counted(key: Any) -> bool:
        calls[0] += 1
        return is_str(key)

    monkeypatch.setattr(render, "_is_str", counted)
    counts = []
    for n in SIZES:
        obj = {"\ud800" + "s" * 300 + str(i): 1 for i in range(n)}
        before = calls[0]
        out = encode(obj, max_bytes=400 * n)
        counts.append(calls[0] - before)
        rewritten = [t for t in out.truncations if t.kind == "unencodable"]
        assert len(rewritten) > n // 2
    _linear(counts)


@pytest.mark.parametrize("strategy", ["balanced", "prefix"])
@pytest.mark.parametrize("budget", [64, 90, 150, 400, 1500])
def test_r20_keys_remembered_suffix_is_the_first_free_one(
    monkeypatch: pytest.MonkeyPatch, budget: int, strategy: Strategy
) -> None:
    # The same bytes as a search from the start each time, as the renderer wrote before.
    class Forgets(dict[str, int]):
        def __setitem__(self, text: str, i: int) -> None:
            pass

    short_keys = EncodeCall._short_keys

    def forgetful(pairs: list[Any]) -> Any:
        taken = short_keys(pairs)
        taken.free = Forgets()
        return taken

    objs: list[Any] = [
        _tuples(40),
        Repeats(40),
        # texts that are another's with a suffix, and keys that are a rewritten text
        {**{i: "v" * i for i in range(12)}, **{f"…[key: int 1]{j}": j for j in (1, 3)}},
        {"…[key: int 11]": 0, 1: [1] * 5, 11: "x", **{(0,) * 9 + (i,): i for i in range(20)}},
        {"m": Repeats(30), "n": {(*range(9), i): "w" * 30 for i in range(30)}},
    ]
    for obj in objs:
        for markers in ("text", "structured"):
            out = encode(obj, max_bytes=budget, strategy=strategy, markers=markers)
            with monkeypatch.context() as m:
                m.setattr(EncodeCall, "_short_keys", staticmethod(forgetful))
                fresh = encode(obj, max_bytes=budget, strategy=strategy, markers=markers)
            assert out.data == fresh.data
            assert out.truncations == fresh.truncations
            doc = json.loads(out.data)
            for t in out.truncations:
                resolve(doc, t.path)

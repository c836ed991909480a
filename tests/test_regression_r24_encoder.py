"""r24: keys the budget holds stay; errors under memory pressure are what they are.

- The balanced cut kept room for the omitted-keys member before a key within about 40
  bytes of its room, though every member left fitted at its least with its key whole:
  short keys were cut or dropped from an object whose budget held them all.
- `fill()` returned None or False with a MemoryError set when shrinking its output
  failed (a SystemError for the caller).
- A MemoryError raised while a plain dict was read became an EncodeError blaming it.
"""

from __future__ import annotations

import json
import math
import textwrap
from collections.abc import Iterator, Mapping
from typing import Any

import orjson
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from jsonbudget import Encoded, EncodeError, Encoder, encode

from .cuts import renderer_only
from .limited import bounded_run

#: A class whose name makes its unencodable marker long.
Long = type("X" * 80, (), {})


def both_fit(obj: Any, budget: int) -> tuple[Encoded | None, Encoded | None]:
    """*obj* cut to *budget* by the compiled balanced cut where it takes it, and by the
    renderer."""
    enc = Encoder(max_bytes=1024)
    compiled = enc.fit(obj, budget)
    with renderer_only():
        rendered = enc.fit(obj, budget)
    return compiled, rendered


#: (object, budget, output): every key fits at its least, so every key shows.
_KEPT: list[tuple[Any, int, bytes]] = [
    (
        {"a": Long(), "b": None, "c": None, "aa": None},
        64,
        '{"a":"…[unencodable]","b":null,"c":null,"aa":null}'.encode(),
    ),
    (
        {"a": [1] * 100, "b": None, "aa": None},
        64,
        '{"a":[1,1,1,"…[omitted: 97 more items]"],"b":null,"aa":null}'.encode(),
    ),
]


@pytest.mark.parametrize(("obj", "budget", "want"), _KEPT)
def test_regression_keys_that_fit_at_their_least_are_not_cut_for_the_marker(
    obj: Any, budget: int, want: bytes
) -> None:
    compiled, rendered = both_fit(obj, budget)
    assert compiled == rendered
    assert rendered is not None
    assert rendered.data == want


def test_regression_the_python_twin_keeps_keys_that_fit_at_their_least() -> None:
    code = textwrap.dedent(
        """
        import sys
        sys.modules["jsonbudget._encode._speedups"] = None
        from jsonbudget import Encoder
        from jsonbudget._encode import bound
        assert bound.fill is None and bound.bound is bound.py_bound
        Long = type("X" * 80, (), {})
        enc = Encoder(max_bytes=1024)
        print(enc.fit({"a": Long(), "b": None, "c": None, "aa": None}, 64).data)
        print(enc.fit({"a": [1] * 100, "b": None, "aa": None}, 64).data)
        """
    )
    want = [repr(data) for _, _, data in _KEPT]
    assert bounded_run(code).splitlines() == want


# -- every key shows where the object's smallest rendering fits ---------------------------

_UNENCODABLE_LEAST = len('"…[unencodable]"'.encode())

_SCALARS = st.one_of(
    st.none(),
    st.booleans(),
    st.integers(-(10**12), 10**12),
    st.text('xyz\n"é', max_size=8),
    st.text('xyz\n"é', min_size=10, max_size=300),
)
_NESTED = st.one_of(
    st.lists(_SCALARS, max_size=30),
    st.dictionaries(st.text("abc", min_size=1, max_size=4), _SCALARS, max_size=12),
)
_VALUES = st.one_of(
    _SCALARS,
    _NESTED,
    st.sampled_from([math.nan, -math.inf]),
    st.builds(Long),
)


def _least(v: Any) -> int:
    """The smallest honest rendering of *v*: whole, or its marker (a replaced value's
    kind alone; a cut string's or container's with its count)."""
    if isinstance(v, Long) or (isinstance(v, float) and not math.isfinite(v)):
        return _UNENCODABLE_LEAST
    whole = len(orjson.dumps(v))
    if isinstance(v, str):
        return min(whole, len(f'"…[truncated: {len(v)} more chars]"'.encode()))
    if isinstance(v, list) and v:
        return min(whole, len(f'["…[omitted: {len(v)} more items]"]'.encode()))
    if isinstance(v, dict) and v:
        return min(whole, len(f'{{"…":"[omitted: {len(v)} more keys]"}}'.encode()))
    return whole


@settings(max_examples=500, deadline=None)
@given(
    members=st.lists(
        st.tuples(
            st.one_of(
                st.text("abcdef", min_size=1, max_size=3), st.text("gh", min_size=20, max_size=70)
            ),
            _VALUES,
        ),
        min_size=1,
        max_size=8,
        unique_by=lambda m: m[0],
    ),
    slack=st.integers(-12, 60),
)
def test_regression_every_key_shows_where_every_member_fits_at_its_least(
    members: list[tuple[str, Any]], slack: int
) -> None:
    obj = dict(members)
    least = 1 + sum(len(orjson.dumps(k)) + 2 + _least(v) for k, v in members)
    budget = max(least + slack, 30)
    compiled, rendered = both_fit(obj, budget)
    assert compiled == rendered
    assert rendered is not None
    assert len(rendered.data) <= budget
    if least <= budget:
        doc = json.loads(rendered.data)
        assert list(doc) == list(obj)
        # (a nested object may still leave keys out: it is cut to its share)
        assert not [t for t in rendered.truncations if t.kind == "keys" and t.path.count("/") == 1]


# -- memory pressure ---------------------------------------------------------------------


def test_regression_fill_under_memory_pressure_raises_memory_error_not_system_error() -> None:
    # Only fill() runs under the hook, on a value it takes whole (no float or list, so no
    # orjson call): each allocation it makes fails in turn, its last the output's shrink.
    code = """
        import _testcapi
        from jsonbudget import Encoder
        from jsonbudget._encode import bound
        obj = {"rows": {str(i): {"id": "k%d" % i, "body": "x" * 200} for i in range(40)}}
        caps = Encoder(max_bytes=3000)._caps
        want = bound.fill(obj, 3000, caps, None, 0)
        assert want is not None and not isinstance(want, bool)
        outcomes = []
        for n in range(200):
            _testcapi.set_nomemory(n, n + 1)
            try:
                got = bound.fill(obj, 3000, caps, None, 0)
            except BaseException as exc:
                _testcapi.remove_mem_hooks()
                outcomes.append(type(exc).__name__)
            else:
                _testcapi.remove_mem_hooks()
                ok = (got[0], list(got[1])) == (want[0], list(want[1]))
                outcomes.append("ok" if ok else "wrong")
        print(" ".join(outcomes))
    """
    outcomes = bounded_run(code).split()
    assert set(outcomes) == {"MemoryError", "ok"}, outcomes
    # The sweep reached past the call's last allocation: the output's shrink failed too.
    assert outcomes[-1] == "ok"
    assert outcomes.count("MemoryError") > 2


def test_regression_a_plain_dict_read_under_memory_pressure_raises_memory_error() -> None:
    # Each failure point runs in a forked child: orjson itself may crash on a failed
    # allocation, which is not what this test is about (such children are skipped).
    code = """
        import os, _testcapi
        from jsonbudget import Encoder, EncodeError
        enc = Encoder(max_bytes=3000, strategy="prefix")
        obj = {"rows": [{"id": i, "body": "é\\"\\\\\\n" * 30 + "x" * 200} for i in range(40)]}
        want = enc.encode(obj)
        enc.encode(obj)
        for n in range(0, 160):
            r, w = os.pipe()
            pid = os.fork()
            if pid == 0:
                os.close(r)
                _testcapi.set_nomemory(n, n + 1)
                try:
                    out = enc.encode(obj)
                    what = "ok" if out == want else "wrong"
                except EncodeError as exc:
                    what = "EncodeError:" + type(exc.__cause__).__name__
                except BaseException as exc:
                    what = type(exc).__name__
                _testcapi.remove_mem_hooks()
                os.write(w, what.encode())
                os._exit(0)
            os.close(w)
            with os.fdopen(r, "rb") as f:
                what = f.read().decode() or "crashed"
            os.waitpid(pid, 0)
            print(what)
    """
    outcomes = bounded_run(code, timeout=240).split()
    assert "MemoryError" in outcomes
    assert set(outcomes) <= {"MemoryError", "ok", "crashed"}, sorted(set(outcomes))


class _RaisesRecursion(Mapping[str, int]):
    """A mapping whose own read raises RecursionError (its bug, not the stack's)."""

    def __getitem__(self, key: str) -> int:
        raise RecursionError("its own bug")

    def __iter__(self) -> Iterator[str]:
        return iter(["a"])

    def __len__(self) -> int:
        return 1


def test_regression_a_containers_own_recursion_error_names_its_path() -> None:
    # Let through as the interpreter's, it became "the Python stack ran out" at "".
    with pytest.raises(EncodeError, match="raised RecursionError while read") as info:
        encode({"x": _RaisesRecursion()}, max_bytes=1000)
    assert info.value.path == "/x"
    assert isinstance(info.value.__cause__, RecursionError)

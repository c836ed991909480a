"""r25: the compiled walk and the SQL rows' dicts ran Python code while they held
borrowed pointers.

A class namespace may hold keys that are not str (``type("A", (), {K(): 1})``); looking
a name up in it (``__dataclass_fields__``, ``__slots__``, ``__getattribute__``...) ran a
colliding key's ``__eq__`` in the middle of the size walk or the compiled balanced cut,
which read the containers it cleared after they were freed. ``rows_to_dicts`` read a row
borrowed across an allocation that can start a collection, whose callbacks can free it.
Each crash runs in a bounded child interpreter.
"""

from __future__ import annotations

import dataclasses
import datetime as dt
import json
import uuid
from typing import Any

import pytest

import jsonbudget
from jsonbudget._encode import _speedups as speedups
from jsonbudget._encode import bound as _bound
from jsonbudget._limits import MAX_DEPTH
from tests.limited import bounded_run, run_limited

BIG = 1 << 40
SCALARS = (dt.datetime, dt.date, dt.time, uuid.UUID)

#: A child's start: K, a class-namespace key with the hash of the name NAME, whose
#: __eq__ runs ACTION from its N-th call on (putting a name beside it calls it too).
_KEY = """
import sys

import jsonbudget

calls = [0]

class K:
    def __hash__(self):
        return hash(NAME)

    def __eq__(self, other):
        calls[0] += 1
        if calls[0] >= N:
            ACTION
        return False
"""


def _key(name: str, action: str, n: int = 1) -> str:
    return _KEY.replace("NAME", repr(name)).replace("ACTION", action).replace(" N:", f" {n}:")


def _checked(out: str, budget: int) -> Any:
    """The child's printed output: valid JSON within *budget*."""
    data = out.strip().encode()
    assert len(data) <= budget
    return json.loads(data)


@pytest.mark.parametrize(
    "name", ["__dataclass_fields__", "__slots__", "__pydantic_fields__", "__getattribute__"]
)
def test_regression_a_class_key_whose_eq_clears_the_list_being_walked(name: str) -> None:
    # The audit's reproducer (a segfault with default options): the instance and the
    # list's items are freed under the walk. Now the walk reads nothing of a class whose
    # namespaces hold another key than str, and the renderer reads it with references held.
    code = _key(name, "victim.clear()") + (
        """
victim = []
ns = {K(): 1}
ns["__dataclass_fields__"] = {}
A = type("A", (), ns)
victim.extend([A()] + [[i] * 3 for i in range(200)])
print(jsonbudget.bounded_dumps(victim, max_bytes=100000).decode())
"""
    )
    _checked(bounded_run(code, timeout=60), 100000)


def test_regression_a_class_key_whose_eq_frees_the_item_array_only() -> None:
    # The instance is kept alive elsewhere: only the list's item array is freed (it read
    # freed items: SystemError from dictobject.c, or a segfault).
    code = _key("__dataclass_fields__", "victim.clear()") + (
        """
victim = []
ns = {K(): 1}
ns["__dataclass_fields__"] = {}
A = type("A", (), ns)
keep = [A() for _ in range(3)]
victim.extend(keep + [[i] * 3 for i in range(200)])
print(jsonbudget.bounded_dumps(victim, max_bytes=100000).decode())
"""
    )
    _checked(bounded_run(code, timeout=60), 100000)


def test_regression_a_class_key_whose_eq_clears_a_dict_the_balanced_cut_reads() -> None:
    # Not a dataclass at all, just the colliding key: the walks fill() runs on members
    # (_fill.c) made the call while a parent read the outer dict's entries borrowed. The
    # n-th call of __eq__ clears it, for each n the walks can reach.
    for n in range(1, 7):
        clear = "top.clear(); top.update({f'n{i}': [i] for i in range(100)})"
        code = _key("__dataclass_fields__", clear, n) + (
            """
top = {}
A = type("A", (), {K(): 1})
top["k0"] = {"deep": [A()] + ["y" * 50] * 40}
for i in range(1, 80):
    top[f"key{i}"] = [chr(120 + i % 3) * 60] * 30
out = jsonbudget.encode(top, max_bytes=4000)
print(out.data.decode())
"""
        )
        _checked(bounded_run(code, timeout=60), 4000)


def test_regression_a_model_whose_base_holds_a_colliding_key() -> None:
    # The walk of pydantic models (bound_native) checked plain_dict() by lookups in the
    # model's MRO, which reach a mixin's colliding key before object's __getattribute__
    # (once the type cache misses: cleared here, as any class creation may evict it).
    for name in ("__getattribute__", "__dict__"):
        code = _key(name, "if armed: victim.clear()") + (
            """
import pydantic
victim = []
armed = False
Mixin = type("Mixin", (), {K(): 1})
class N(pydantic.BaseModel, Mixin):
    a: int = 1
    b: str = "x"
jsonbudget.bounded_dumps([N(a=1), N(a=2)], max_bytes=100000)  # the walk learns N
victim.extend([N(a=2) for _ in range(3)] + [[i] * 3 for i in range(200)])
sys._clear_type_cache()
armed = True
print(jsonbudget.bounded_dumps(victim, max_bytes=100000).decode())
"""
        )
        _checked(bounded_run(code, timeout=60), 100000)


class _Counting:
    """A key with the hash of ``__dataclass_fields__`` that counts its comparisons."""

    calls = 0

    def __hash__(self) -> int:
        return hash("__dataclass_fields__")

    def __eq__(self, other: object) -> bool:
        type(self).calls += 1
        return False


def _dataclass_with_a_foreign_key() -> type:
    ns: dict[Any, Any] = {_Counting(): 1, "__annotations__": {"x": int, "y": str}}
    return dataclasses.dataclass(type("D", (), ns))


def test_regression_both_walks_take_a_class_with_a_foreign_key_as_unclean() -> None:
    d = _dataclass_with_a_foreign_key()(1, "a")
    value = {"rows": [d, d], "n": 1}
    args = (BIG, 0, MAX_DEPTH, BIG, BIG, BIG, SCALARS)
    before = _Counting.calls
    assert speedups.bound(value, *args) == -1
    assert speedups.bound_items([d], *args) == -1
    assert _Counting.calls == before  # the compiled walk ran no key's __eq__
    assert _bound.py_bound(value, *args) == -1  # and its twin agrees


def test_the_renderer_writes_a_class_with_a_foreign_key() -> None:
    # The value the walk now hands to the renderer: the dataclass's members, as for the
    # same class without the key, and a cut one stays valid JSON within the budget.
    foreign = _dataclass_with_a_foreign_key()

    @dataclasses.dataclass
    class D:
        x: int
        y: str

    rows = [foreign(i, "v" * 20) for i in range(50)]
    same = [D(i, "v" * 20) for i in range(50)]
    assert jsonbudget.bounded_dumps(rows, max_bytes=100000) == jsonbudget.bounded_dumps(
        same, max_bytes=100000
    )
    for strategy in ("balanced", "prefix"):
        out = jsonbudget.encode({"rows": rows}, max_bytes=300, strategy=strategy)
        doc = json.loads(out.data)
        assert len(out.data) <= 300
        assert doc["rows"][0] == {"x": 0, "y": "v" * 20}
        assert out.truncations


def test_regression_rows_to_dicts_holds_the_row_a_collection_frees(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    # A collection started by a row's dict ran a gc callback that emptied the rows: the
    # row read after it was freed, and its freed cells went into the dicts (under the
    # debug allocator, a segfault).
    monkeypatch.setenv("PYTHONMALLOC", "debug")
    done = run_limited(
        """
        import gc
        from jsonbudget._sources._numbers import rows_to_dicts

        rows = [tuple(f"cell{i}-{j}" * 3 for j in range(4)) for i in range(2000)]
        def cb(phase, info):
            if phase == "start":
                rows.clear()
        gc.callbacks.append(cb)
        gc.set_threshold(1)
        out, stop = rows_to_dicts(("a", "b", "c", "d"), rows, 0, 4, 0, (), 0)
        gc.callbacks.remove(cb)
        last = out[-1]
        assert stop == len(out) and 0 < stop <= 2000, stop
        assert last == {k: f"cell{stop - 1}-{j}" * 3 for j, k in enumerate("abcd")}, last
        print("ok")
        """,
        timeout=60,
    )
    assert done.returncode == 0, done.stderr[-2000:]
    assert done.stdout == "ok\n"

"""r26: the size walk's picture of orjson's type dispatch was incomplete.

orjson takes an Enum decorated with ``@dataclass`` by its Enum branch (``.value``, Python
code mid-write) and a ``@dataclass`` subclass of datetime, date, time or UUID by its
dataclass branch, while the walk took the first as a plain dataclass and the second as a
fixed-size scalar: a segfault (use after free) or a NaN written as null, unreported. A
class whose metaclass makes it unhashable raised a bare TypeError from the encoder's
tables of classes, and a metaclass ``__getattribute__`` ran between the walk of a list
of models and its write. Each crash runs in a bounded child interpreter.
"""

from __future__ import annotations

import asyncio
import dataclasses
import datetime as dt
import enum
import json
import math
import uuid
from pathlib import Path
from typing import Any

import pytest

import jsonbudget
from jsonbudget._encode import _speedups as speedups
from jsonbudget._encode import bound as _bound
from jsonbudget._limits import MAX_DEPTH
from tests.limited import bounded_run

BIG = 1 << 40
SCALARS = (dt.datetime, dt.date, dt.time, uuid.UUID)
WALKS = [speedups.bound, _bound.py_bound]
MARK = "…[unencodable: nan]"

_TWIN = """
import sys
sys.modules["jsonbudget._encode._speedups"] = None
"""


def _checked(out: str, budget: int) -> Any:
    """The child's printed output: valid JSON within *budget*."""
    data = out.strip().encode()
    assert len(data) <= budget
    return json.loads(data)


@pytest.mark.parametrize("twin", [False, True])
def test_regression_a_dataclass_enum_whose_tzinfo_clears_the_list_being_written(
    twin: bool, monkeypatch: pytest.MonkeyPatch
) -> None:
    # The audit's reproducer (a segfault with default options): orjson wrote the member's
    # value, calling a Python tzinfo that freed the list orjson was writing.
    code = (_TWIN if twin else "") + (
        """
import dataclasses, datetime as dt, enum, jsonbudget
victim = []
class TZ(dt.tzinfo):
    def utcoffset(self, d):
        victim.clear()
        return dt.timedelta(0)
    def dst(self, d): return None
    def tzname(self, d): return "X"
@dataclasses.dataclass(frozen=True)
class Stamp(enum.Enum):
    EPOCH = dt.datetime(1970, 1, 1, tzinfo=TZ())
victim.extend([Stamp.EPOCH] + [[i] * 3 for i in range(200)])
print(jsonbudget.bounded_dumps(victim, max_bytes=100000).decode())
"""
    )
    monkeypatch.setenv("PYTHONMALLOC", "debug")
    _checked(bounded_run(code, timeout=60), 100000)


@pytest.mark.parametrize("twin", [False, True])
def test_regression_a_dataclass_datetime_subclass_whose_getattribute_clears_the_list(
    twin: bool, monkeypatch: pytest.MonkeyPatch
) -> None:
    # orjson wrote the subclass as a dataclass, reading __dict__ through the user's
    # __getattribute__, which freed the list (a segfault under the debug allocator).
    code = (_TWIN if twin else "") + (
        """
import dataclasses, datetime as dt, jsonbudget
victim = []
@dataclasses.dataclass(init=False)
class Stamp(dt.datetime):
    def __getattribute__(self, name):
        victim.clear()
        return super().__getattribute__(name)
victim.extend([Stamp(2020, 1, 1)] + [[i] * 3 for i in range(200)])
print(jsonbudget.bounded_dumps(victim, max_bytes=100000).decode())
"""
    )
    monkeypatch.setenv("PYTHONMALLOC", "debug")  # the freed list is then read as garbage
    _checked(bounded_run(code, timeout=60), 100000)


@dataclasses.dataclass(frozen=True)  # noqa: RUF049 - the case under test: 3.11 allows it
class _Level(enum.Enum):
    BAD = [math.nan, math.inf]  # noqa: RUF012 - an Enum member's value


@dataclasses.dataclass(init=False)
class _Stamp(dt.datetime):
    pass


@dataclasses.dataclass(init=False)
class _Day(dt.date):
    pass


@dataclasses.dataclass(init=False)
class _Id(uuid.UUID):
    pass


def _scalar_subclasses() -> list[Any]:
    s, d, u = _Stamp(2020, 1, 1), _Day(2020, 1, 1), _Id(int=5)
    for x in (s, d):
        object.__setattr__(x, "score", math.nan)
    object.__setattr__(u, "score", math.nan)
    return [s, d, u]


@pytest.mark.parametrize("walk", WALKS)
def test_regression_both_walks_take_a_dataclass_enum_and_scalar_subclasses_as_unclean(
    walk: Any,
) -> None:
    for v in [_Level.BAD, *_scalar_subclasses()]:
        assert walk([v], BIG, 0, MAX_DEPTH, BIG, BIG, BIG, SCALARS) == -1
    # The exact types stay clean scalars.
    for v in (dt.datetime(2020, 1, 1), dt.date(2020, 1, 1), dt.time(1), uuid.UUID(int=5)):
        assert walk([v], BIG, 0, MAX_DEPTH, BIG, BIG, BIG, SCALARS) == 12


@pytest.mark.parametrize("twin", [False, True])
def test_regression_a_nan_in_a_dataclass_enum_or_scalar_subclass_gets_its_marker(
    twin: bool, monkeypatch: pytest.MonkeyPatch
) -> None:
    # They came out as null, complete, with no report.
    if twin:
        monkeypatch.setattr(_bound, "clean_dumps", _bound.py_clean_dumps)
        monkeypatch.setattr(_bound, "bound", _bound.py_bound)
    out = jsonbudget.encode({"level": _Level.BAD}, max_bytes=1000)
    assert json.loads(out.data) == {"level": [MARK, "…[unencodable: inf]"]}
    assert not out.complete
    for v in _scalar_subclasses():
        out = jsonbudget.encode([v], max_bytes=1000)
        assert json.loads(out.data) == [{"score": MARK}]
        assert not out.complete


class _Unhashable(type):  # noqa: PLW1641 - the slip under test
    def __eq__(cls, other: object) -> bool:  # no __hash__: its classes are unhashable
        return cls is other


class _HashRaises(type):
    def __hash__(cls) -> int:
        raise RuntimeError("hash")


@pytest.mark.parametrize("meta", [_Unhashable, _HashRaises])
@pytest.mark.parametrize("twin", [False, True])
def test_regression_a_class_whose_metaclass_cannot_hash_it_is_unencodable_not_a_crash(
    meta: type, twin: bool, monkeypatch: pytest.MonkeyPatch
) -> None:
    if twin:
        monkeypatch.setattr(_bound, "clean_dumps", _bound.py_clean_dumps)
        monkeypatch.setattr(_bound, "bound", _bound.py_bound)
        monkeypatch.setattr(_bound, "clean_result", _bound.py_clean_result)
    thing = meta("Thing", (), {})()
    text = meta("Text", (str,), {})("s")
    for budget in (64, 1000):
        for strategy in ("balanced", "prefix"):
            out = jsonbudget.bounded_dumps(
                {"x": thing, "t": text}, max_bytes=budget, strategy=strategy
            )
            assert json.loads(out) == {"x": "…[unencodable: Thing]", "t": "s"}
            out = jsonbudget.bounded_dumps(thing, max_bytes=budget, strategy=strategy)
            assert json.loads(out) == "…[unencodable: Thing]"
            assert (
                jsonbudget.bounded_dumps(
                    [thing], max_bytes=budget, default=lambda o: "d", strategy=strategy
                )
                == b'["d"]'
            )
            with pytest.raises(jsonbudget.EncodeError):
                jsonbudget.encode({"x": thing}, max_bytes=budget, unencodable="error")
    gated = jsonbudget.ResultGate(max_bytes=1000).gate({"x": [thing]})
    assert "unencodable: Thing" in gated.text
    admitted = jsonbudget.TurnBudget(max_bytes=4000).admit({"x": thing})
    assert "unencodable: Thing" in admitted.text
    page = jsonbudget.paginate(
        [thing, {"x": thing}],
        scope=jsonbudget.Scope("u"),
        store=jsonbudget.MemoryCursorStore(),
        limits=jsonbudget.Limits(1000),
    )
    assert page.items  # made, not a bare TypeError


def test_regression_clean_result_asks_no_unhashable_class() -> None:
    thing = _Unhashable("Thing", (), {})()
    caps = (MAX_DEPTH, BIG, BIG, BIG, SCALARS)
    for fn in (speedups.clean_result, _bound.py_clean_result):
        assert fn(thing, 1000, caps, frozenset({dict}), lambda *a: a, "r") is None


def test_regression_a_metaclass_getattribute_cannot_change_a_list_of_models() -> None:
    # The serializer of a list of one model class was read through the metaclass after
    # the walk found the models clean: a hook there put a NaN in them, written as null.
    import pydantic
    from pydantic._internal._model_construction import ModelMetaclass

    models: list[Any] = []

    class Meta(ModelMetaclass):
        def __getattribute__(cls, name: str) -> Any:
            if name == "__pydantic_serializer__":
                for m in models:
                    m.xs.append(math.nan)
            return super().__getattribute__(name)

    class M(pydantic.BaseModel, metaclass=Meta):
        xs: list[float]

    m = M(xs=[1.0])
    models.append(m)
    for walk in (speedups.bound_native, _bound.py_bound_native):
        n, _, _ = walk([m, m], BIG, 0, (MAX_DEPTH, BIG, BIG, BIG, SCALARS), {M: 3})
        assert n == -1
    out = jsonbudget.encode([m, m], max_bytes=1000)
    doc = json.loads(out.data)
    assert all(x in (1.0, MARK) for item in doc for x in item["xs"])
    assert out.complete == all(x == 1.0 for item in doc for x in item["xs"])


@pytest.mark.parametrize("meta", [_Unhashable, _HashRaises])
def test_regression_an_unhashable_class_at_the_top_of_a_guard_is_unencodable(
    meta: type, tmp_path: Path
) -> None:
    # The guards asked isinstance() of ABCs (Iterator, AsyncIterable, Awaitable, their
    # own LoopItems) and looked the result's type up in a set: each hashes the class.
    # Loaded, as a server has them: the guards then ask whether a result is an MCP
    # result, by isinstance() of pydantic's classes, which are ABCs.
    import fastmcp  # noqa: F401
    import mcp.types  # noqa: F401

    thing = meta("Thing", (), {})()
    store = jsonbudget.SpillStore(tmp_path)
    marker = "…[unencodable: Thing]"
    assert json.loads(jsonbudget.ResultGate(max_bytes=1000, store=store).gate(thing).data) == marker
    assert json.loads(jsonbudget.gate_result(thing, max_bytes=5000).data) == marker
    turn = jsonbudget.TurnBudget(max_bytes=4000, store=store)
    assert json.loads(turn.admit(thing, tool="t").text) == marker

    async def both() -> tuple[bytes, str]:
        gated = await jsonbudget.ResultGate(max_bytes=1000, store=store).agate(thing)
        admitted = await turn.aadmit(thing, tool="t")
        return gated.data, admitted.text

    gated, admitted = asyncio.run(both())
    assert json.loads(gated) == json.loads(admitted) == marker

    @jsonbudget.bounded_tool(max_bytes=500)
    def tool() -> object:
        return thing

    assert json.loads(tool()) == marker

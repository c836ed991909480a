"""r23: native values whose runtime shape is not the one declared or first read.

A cut pydantic model applied a field's declared element type to a container of another
type (a tuple in a ``list[float]`` field, assigned without validation): pydantic infers
such a container from its runtime type, so the cut wrote ``1.0`` where pydantic writes
``1``, and dropped a subclass's fields with no marker. A deque (or another sequence read
in runs) changed while it was encoded raised ``EncodeError`` instead of being written
from what was read.
"""

from __future__ import annotations

import array
import collections
import dataclasses
import enum
import json
import re
import types
import typing
from collections.abc import Iterable, Mapping, MutableSequence
from typing import Any

import pydantic
import pytest

from jsonbudget import EncodeError, ResultGate, SpillStore, encode
from jsonbudget._encode.values import fallback
from jsonbudget.typing import Strategy

# pydantic warns of each value its serializer does not take as declared: the point here.
pytestmark = pytest.mark.filterwarnings("ignore::UserWarning")


class Status(enum.Enum):
    OK = "ok"


class Sub(pydantic.BaseModel):
    q: int = 1


class Sub2(Sub):
    secret: str = "leak"


class Other(pydantic.BaseModel):
    q: int = 2
    w: int = 3


@pydantic.dataclasses.dataclass
class PD:
    q: int = 1


@pydantic.dataclasses.dataclass
class PD2:
    q: int = 8
    z: int = 9


@dataclasses.dataclass
class SD1:
    q: int = 1


@dataclasses.dataclass
class SD2:
    q: int = 5
    w: int = 6


class Attrs:
    def __init__(self) -> None:
        self.q = 5
        self.z = 3


# Declared type, and a value pydantic's serializer for it does not take as declared.
_PAIRS: list[tuple[Any, Any]] = [
    (list[float], (1, 2)),
    (list[float], {1, 2}),
    (list[float], frozenset({1})),
    (list[float], {"a": 1}),
    (list[float], (True,)),
    (list[int], (True, False)),
    (tuple[float, ...], [1, 2]),
    (set[float], [1, 2]),
    (set[float], frozenset({1})),
    (frozenset[float], {1}),
    (dict[str, float], [1, 2.5, "x"]),
    (Mapping[str, float], [1]),
    (MutableSequence[float], (1, 2)),
    (Iterable[float], [1, 2]),
    (list[list[float]], [(1, 2)]),
    (dict[str, list[float]], {"a": (1, 2)}),
    (typing.Optional[list[float]], (1, 2)),  # noqa: UP045 - the spelling under test
    (list[float] | str, (1, 2)),
    (list[float] | tuple[int, ...], (True, 2)),
    (list[Sub], (Sub2(),)),
    (tuple[Sub, ...], [Sub2()]),
    (dict[str, Sub], [Sub2()]),
    (list[Sub], {"k": Sub2()}),
    (Sub, Status.OK),
    (Sub, Attrs()),
    (Sub, types.SimpleNamespace(q=7, r=2)),
    (Sub, Other()),
    (Sub, SD2()),
    (Sub, PD2()),
    (typing.Optional[Sub], Status.OK),  # noqa: UP045
    (Sub | int, Status.OK),
    (list[Sub], [Status.OK, Other()]),
    (PD, PD2()),
    (SD1, SD2()),
    (list[SD1], [SD2()]),
]

_CUT = re.compile(r"…\[(truncated|omitted)")


def _shown(cut: Any, whole: Any, path: str) -> None:
    """*cut* shows only what *whole* holds: each value as it is, or a marked cut of it."""
    if isinstance(cut, str) and _CUT.search(cut):
        if isinstance(whole, str):
            assert whole.startswith(cut[: cut.index("…[")]), path
        return
    if isinstance(cut, dict) and isinstance(whole, dict):
        keys = [k for k in cut if k != "…"]
        assert keys == list(whole)[: len(keys)], path
        assert "…" in cut or len(keys) == len(whole), path
        for k in keys:
            _shown(cut[k], whole[k], f"{path}/{k}")
        return
    if isinstance(cut, list) and isinstance(whole, list):
        marked = bool(cut) and isinstance(cut[-1], str) and cut[-1].startswith("…[omitted")
        items = cut[:-1] if marked and len(cut) - 1 < len(whole) + 1 else cut
        if not marked:
            assert len(cut) == len(whole), path
        for i, x in enumerate(items[: len(whole)]):
            _shown(x, whole[i], f"{path}/{i}")
        return
    # As JSON text: 1 and 1.0, or true and 1, are equal as Python values.
    assert json.dumps(cut) == json.dumps(whole), path


@pytest.mark.parametrize(("declared", "value"), _PAIRS, ids=lambda x: repr(x)[:40])
def test_regression_cut_model_writes_an_undeclared_container_as_pydantic_infers_it(
    declared: Any, value: Any
) -> None:
    """Each cut, in both strategies and at many budgets, shows the model's fields as
    model_dump_json() writes them (inferred where the runtime type is not the declared
    one), or a marked cut of them; whole, it is pydantic's bytes."""
    model = pydantic.create_model("M", x=(declared, ...), note=(str, ""))
    m = model.model_construct(x=value, note="n" * 300)
    whole = m.model_dump_json().encode()
    assert encode(m, max_bytes=1 << 20).data == whole
    expected = json.loads(whole)
    for max_bytes in range(64, len(whole), 23):
        for strategy in ("balanced", "prefix"):
            out = encode(m, max_bytes=max_bytes, strategy=strategy)
            assert len(out.data) <= max_bytes
            got = json.loads(out.data)
            _shown(got, expected, "")
            if "x" in got and "…" not in json.dumps(got["x"], ensure_ascii=False):
                # Shown whole: pydantic's own value, as JSON text (1 is not 1.0).
                assert json.dumps(got["x"]) == json.dumps(expected["x"])


def test_regression_cut_model_keeps_an_undeclared_containers_values() -> None:
    """The report's cart: a tuple of a subclass under list[Item], a tuple of ints under
    list[float]; the cut dropped the subclass's field unmarked and wrote 1.0, 2.0."""

    class Item(pydantic.BaseModel):
        sku: str

    class Special(Item):
        discount: int = 30

    class Cart(pydantic.BaseModel):
        items: list[Item]
        weights: list[float]
        note: str = ""

    cart = Cart(items=[], weights=[], note="n" * 3000)
    cart.items = (Special(sku="A"),)  # type: ignore[assignment]
    cart.weights = (1, 2)  # type: ignore[assignment]
    for strategy in ("balanced", "prefix"):
        got = json.loads(encode(cart, max_bytes=150, strategy=strategy).data)
        assert got["items"] == [{"sku": "A", "discount": 30}]
        assert got["weights"] == [1, 2]
        assert all(type(w) is int for w in got["weights"])


def _check_snapshot(data: bytes, truncations: Any, first: list[Any], total: int) -> None:
    """*data* shows a prefix of *first* (the items as they were read) and a marker that
    counts the items the container held when it was read, past those shown."""
    out = json.loads(data)
    marker = out[-1]
    shown = out[:-1]
    for i in range(1, len(shown)):
        _shown(shown[i], first[i], f"/{i}")  # as read, or ("prefix") the last one cut
    counted = re.fullmatch(r"…\[omitted: (\d+) more items\]", marker)
    assert counted is not None, marker
    assert int(counted.group(1)) == total - len(shown)
    report = [t for t in truncations if t.kind == "items"]
    assert [(t.path, t.omitted) for t in report] == [(f"/{len(shown)}", total - len(shown))]


@pytest.mark.parametrize("strategy", ["balanced", "prefix"])
def test_regression_a_deque_emptied_while_encoded_is_written_as_it_was_read(
    strategy: Strategy,
) -> None:
    """The report's deque: its first item's hook empties it after its first run was read;
    it raised "deque said it held 401 items, then changed"."""

    @dataclasses.dataclass
    class Emptier:
        """An item whose fields, read, empty the deque holding it (a hook)."""

        a: int = 1

        def __getattribute__(self, name: str) -> Any:
            if name in ("a", "__dict__"):
                box.clear()
            return object.__getattribute__(self, name)

    items: list[Any] = [Emptier()] + ["x" * 50 for _ in range(400)]
    box = collections.deque(items)
    out = encode(box, max_bytes=2000, strategy=strategy)
    assert len(out.data) <= 2000
    _check_snapshot(out.data, out.truncations, items, 401)


class _Hooked:
    """Handed to ``default``, which empties the container holding it."""


@pytest.mark.parametrize("strategy", ["balanced", "prefix"])
@pytest.mark.parametrize("kind", ["deque", "list"])
def test_regression_a_models_sequence_emptied_by_default_is_written_as_it_was_read(
    strategy: Strategy, kind: str
) -> None:
    """A deque or a list inside a model (read by a view, in runs) that a ``default``
    hook empties while one of its items is written."""

    class Holder(pydantic.BaseModel):
        model_config = pydantic.ConfigDict(arbitrary_types_allowed=True)
        xs: Any

    items: list[Any] = [_Hooked()] + ["x" * 50 for _ in range(400)]
    box: Any = collections.deque(items) if kind == "deque" else list(items)

    def hook(o: Any) -> Any:
        box.clear()
        return "hooked"

    m = Holder.model_construct(xs=box)
    out = encode(m, max_bytes=2000, strategy=strategy, default=hook)
    assert len(out.data) <= 2000
    xs = json.loads(out.data)["xs"]
    assert xs[0] == "hooked"
    counted = re.fullmatch(r"…\[omitted: (\d+) more items\]", xs[-1])
    assert counted is not None, xs[-1]
    for i in range(1, len(xs) - 1):
        _shown(xs[i], items[i], f"/xs/{i}")
    assert int(counted.group(1)) == 401 - (len(xs) - 1)


@pytest.mark.parametrize(
    "make",
    [
        lambda: collections.deque(range(1000)),
        lambda: array.array("i", range(1000)),
        lambda: collections.deque(["x"] * 1000),
    ],
    ids=["deque", "array", "deque-of-str"],
)
def test_regression_a_view_whose_source_shrank_ends_at_its_snapshot(make: Any) -> None:
    """The view a deque or an array is read through (`fallback`): a run read after the
    source shrank is not taken, and the count stays the one measured with what was
    read; it raised EncodeError."""
    src = make()
    view = fallback(src)
    first = list(view[0:64])
    assert first == list(src)[:64]
    while len(src) > 10:
        src.pop()  # a hook, a finalizer or another thread between two runs
    assert list(view[64:256]) == []  # not read: the source is not what was measured
    assert len(view) == 1000
    assert list(view[0:64]) == first  # the snapshot stays as it was read
    with pytest.raises(IndexError):
        view[100]


def test_regression_a_deque_changed_while_spilled_is_refused_as_changed(tmp_path: Any) -> None:
    """Spilled whole, a deque a hook emptied between its reads has no whole rendering:
    it was refused as "larger than the store's max_file_bytes (2 GiB)" for 5 KB."""
    calls = [0]

    @dataclasses.dataclass
    class Emptier:
        a: int = 1

        def __getattribute__(self, name: str) -> Any:
            if name in ("a", "__dict__"):
                calls[0] += 1
                if calls[0] == 2:  # the spill's reading, after the gate's measure
                    box.clear()
            return object.__getattribute__(self, name)

    box = collections.deque([Emptier()] + ["x" * 5 for _ in range(1000)])
    gate = ResultGate(max_bytes=1000, store=SpillStore(tmp_path / "spill"))
    with pytest.raises(EncodeError, match="deque said it held 1001 items, then changed"):
        gate.gate(box)

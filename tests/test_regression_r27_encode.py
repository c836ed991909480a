"""r27: a MemoryError in the encoder is the interpreter's, never the value's.

- `hashable_class` / `has_class` took a MemoryError raised as a class was hashed for an
  unhashable class: a good value became an unencodable marker, and `encode` returned.
- A MemoryError in the library's own conversion of a value (a set, a Decimal) or in a
  `default` hook came out as an EncodeError blaming the value.
- A MemoryError as the library kept an item pulled from a generator marked the
  generator failed: every later page raised "iterator raised MemoryError", and the item
  it had given was dropped.
"""

from __future__ import annotations

import dataclasses
import datetime
import decimal
from collections.abc import Callable, Iterator
from typing import Any

import orjson
import pytest

import jsonbudget._encode.render as _render
import jsonbudget._encode.values as _values
import jsonbudget._encode.whole as _whole
from jsonbudget import EncodeError, Encoder, Limits, MemoryCursorStore, Paginator, Scope

ALICE = Scope("alice", {"q": 1})


class _Flaky:
    """Raises MemoryError on its *at*-th call while armed, else calls *real*."""

    def __init__(self, real: Callable[..., Any], at: int = 1) -> None:
        self.real = real
        self.at = at
        self.calls = 0
        self.fired = False

    def __call__(self, *args: Any, **kwargs: Any) -> Any:
        self.calls += 1
        if self.calls == self.at:
            self.fired = True
            raise MemoryError("injected")
        return self.real(*args, **kwargs)


class _Meta(type):
    """A metaclass whose hash runs out of memory while `short` is set."""

    short = False

    def __hash__(cls) -> int:
        if _Meta.short:
            raise MemoryError("injected")
        return type.__hash__(cls)


class Reading(float, metaclass=_Meta):
    """A float the encoder writes as its base type (`values.fallback`)."""


def test_regression_memoryerror_hashing_a_class_is_not_an_unhashable_class() -> None:
    enc = Encoder(max_bytes=300)
    _Meta.short = True
    try:
        with pytest.raises(MemoryError):
            enc.encode({"v": Reading(1.5)})
        with pytest.raises(MemoryError):
            _values.hashable_class(Reading)
        with pytest.raises(MemoryError):
            _values.has_class(Reading, frozenset({int}))
    finally:
        _Meta.short = False
    # The shortage passed: the same encoder writes the value, no marker.
    out = enc.encode({"v": Reading(1.5)})
    assert (out.data, out.complete) == (b'{"v":1.5}', True)


class _Unhashable(type):
    __hash__ = None  # type: ignore[assignment]  # a metaclass with __eq__ and no __hash__

    def __eq__(cls, other: object) -> bool:
        return cls is other


class _Recursing(type):
    def __hash__(cls) -> int:
        raise RecursionError("maximum recursion depth exceeded")


@pytest.mark.parametrize("meta", [_Unhashable, _Recursing])
def test_a_class_its_metaclass_cannot_hash_is_still_marked(meta: type) -> None:
    # The other side of the rule: the metaclass's own error (a RecursionError too: a
    # class hashes without recursing unless that code recurses) is "unhashable".
    kind = meta("Odd", (), {})
    assert not _values.hashable_class(kind)
    out = Encoder(max_bytes=300).encode({"v": kind()})
    assert out.data == '{"v":"…[unencodable: Odd]"}'.encode()
    assert [t.kind for t in out.truncations] == ["unencodable"]


class _ShortClass(float):
    """A float whose ``__class__`` runs out of memory while `short` is set."""

    short = False

    @property  # type: ignore[misc]
    def __class__(self) -> type:  # what a proxy defines
        if _ShortClass.short:
            raise MemoryError("injected")
        return type(self)


def test_regression_memoryerror_reading_class_is_not_a_proxy() -> None:
    enc = Encoder(max_bytes=300)
    _ShortClass.short = True
    try:
        with pytest.raises(MemoryError):
            enc.encode({"v": _ShortClass(2.5)})
    finally:
        _ShortClass.short = False
    assert enc.encode({"v": _ShortClass(2.5)}).data == b'{"v":2.5}'


@pytest.mark.parametrize("unencodable", ["marker", "error"])
@pytest.mark.parametrize(
    ("value", "patched", "want"),
    [
        ({1, 2}, "adapt", '{"log":"x","v":"…[unencodable: set of 2 items]"}'),
        (decimal.Decimal("1.10"), "_digits", '{"log":"x","v":1.10}'),
    ],
    ids=["set", "Decimal"],
)
def test_regression_memoryerror_converting_a_value_is_not_an_encode_error(
    monkeypatch: pytest.MonkeyPatch, value: Any, patched: str, want: str, unencodable: str
) -> None:
    # `adapt` is first called by the size walk of the plain dict around the value: the
    # renderer took its MemoryError for one of a member's library and went on.
    enc = Encoder(max_bytes=300, unencodable=unencodable)  # type: ignore[arg-type]
    flaky = _Flaky(getattr(_values, patched))
    monkeypatch.setattr(_values, patched, flaky)
    with pytest.raises(MemoryError):
        enc.encode({"log": "x", "v": value})
    assert flaky.fired
    if unencodable == "error" and type(value) is set:
        with pytest.raises(EncodeError, match="cannot encode set of 2 items"):
            enc.encode({"log": "x", "v": value})
    else:  # per-call state left nothing behind: the same encoder writes it as before
        assert enc.encode({"log": "x", "v": value}).data == want.encode()


def test_regression_memoryerror_writing_a_value_whole_is_not_an_encode_error(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    enc = Encoder(max_bytes=300)
    value = {"log": "x", "dec": decimal.Decimal("1.10")}
    want = enc.encode(value).data
    flaky = _Flaky(_values.whole)
    monkeypatch.setattr(_values, "whole", flaky)
    with pytest.raises(MemoryError):
        enc.encode(value)
    assert flaky.fired
    assert enc.encode(value).data == want


def test_regression_memoryerror_in_a_default_hook_is_not_an_encode_error() -> None:
    hook = _Flaky(sorted)
    enc = Encoder(max_bytes=300, default=hook)
    with pytest.raises(MemoryError):
        enc.encode({"s": {3, 1, 2}})
    assert enc.encode({"s": {3, 1, 2}}).data == b'{"s":[1,2,3]}'


@dataclasses.dataclass
class _Row:
    tags: set[int]
    n: int


def test_regression_memoryerror_in_a_spilled_views_conversion_is_not_an_encode_error(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    # The spill writer (`JsonWriter`) follows the encoder's rule.
    value = {"row": _Row({1}, 2)}
    want = b"".join(_whole.JsonWriter(None, {}, 1 << 20).chunks(value))
    monkeypatch.setattr(_values, "whole", _Flaky(_values.whole))
    with pytest.raises(MemoryError):
        b"".join(_whole.JsonWriter(None, {}, 1 << 20).chunks(value))
    assert b"".join(_whole.JsonWriter(None, {}, 1 << 20).chunks(value)) == want


class _ShortView:
    """A view whose read runs out of memory."""

    def __len__(self) -> int:
        return 3

    def items(self) -> Iterator[tuple[str, int]]:
        raise MemoryError("injected")

    def __getitem__(self, index: slice) -> list[int]:
        raise MemoryError("injected")


def test_regression_memoryerror_reading_a_view_in_a_spill_is_not_an_encode_error() -> None:
    with pytest.raises(MemoryError):
        _whole._members(_ShortView(), "/row")  # type: ignore[arg-type]
    with pytest.raises(MemoryError):
        list(_whole._items(_ShortView(), "/row"))  # type: ignore[arg-type]


class _ShortList(list[Any]):
    """A stream's `items` whose append runs out of memory once, at the *at*-th call."""

    at = 0
    calls = 0

    def append(self, item: Any) -> None:
        _ShortList.calls += 1
        if _ShortList.calls == _ShortList.at:
            raise MemoryError("injected")
        super().append(item)


@pytest.mark.parametrize("at", [1, 4, 9, 75])
def test_regression_memoryerror_keeping_a_pulled_item_does_not_fail_the_iterator(
    monkeypatch: pytest.MonkeyPatch, at: int
) -> None:
    real_init = _render.Stream.__init__

    def init(self: _render.Stream, *args: Any) -> None:
        real_init(self, *args)
        self.items = _ShortList()

    monkeypatch.setattr(_render.Stream, "__init__", init)
    monkeypatch.setattr(_ShortList, "at", at)
    monkeypatch.setattr(_ShortList, "calls", 0)
    vals = [f"value-{i:03d}" for i in range(60)]
    # One item a page: each page pulls the next item's generator as its look-ahead.
    items = [{"id": n, "vals": (v for v in vals)} for n in range(3)]
    pager = Paginator(Limits(1000), store=MemoryCursorStore())
    got: list[Any] = []
    cursor = None
    failed = 0
    for _ in range(20):
        try:
            page = pager.paginate(items, scope=ALICE, cursor=cursor)
        except MemoryError:
            # The same page asked again: the generator is not failed, and its values
            # (the one the failed append held included) arrive whole, in order.
            failed += 1
            continue
        got += orjson.loads(page.to_json())["items"]
        cursor = page.next_cursor
        if cursor is None:
            break
    assert failed == 1
    assert got == [{"id": n, "vals": vals} for n in range(3)]


def test_regression_a_generator_that_raised_memoryerror_stays_failed() -> None:
    # A MemoryError from the generator itself passes as itself once; the generator is
    # finished, so later pages say it failed rather than serve it short.
    def rows() -> Iterator[str]:
        for i in range(40):
            if i == 10:
                raise MemoryError("injected")
            yield f"row-{i:02d}"

    items = [{"id": 0, "rows": rows()}]
    pager = Paginator(Limits(2000))
    with pytest.raises(MemoryError):
        pager.paginate(items, scope=ALICE)
    for _ in range(2):
        with pytest.raises(EncodeError, match="iterator raised MemoryError") as info:
            pager.paginate(items, scope=ALICE)
        assert type(info.value.__cause__) is MemoryError


class _ShortZone(datetime.tzinfo):
    """A tzinfo written in Python whose offset runs out of memory while `short` is set."""

    short = False

    def utcoffset(self, dt: datetime.datetime | None) -> datetime.timedelta:
        if _ShortZone.short:
            raise MemoryError("injected")
        return datetime.timedelta(hours=2)

    def dst(self, dt: datetime.datetime | None) -> datetime.timedelta:
        return datetime.timedelta(0)

    def tzname(self, dt: datetime.datetime | None) -> str:
        return "short"


class _Key:
    """A key whose repr runs out of memory while `short` is set."""

    short = False

    def __repr__(self) -> str:
        if _Key.short:
            raise MemoryError("injected")
        return "K"


@pytest.mark.parametrize(
    ("make", "flag", "want"),
    [
        (
            lambda: {"at": datetime.datetime(2024, 1, 2, 3, 4, 5, tzinfo=_ShortZone())},
            _ShortZone,
            '{"at":"2024-01-02T03:04:05+02:00"}',
        ),
        (lambda: {_Key(): 1}, _Key, '{"…[key: _Key K]":1}'),
    ],
    ids=["utcoffset", "key repr"],
)
def test_regression_memoryerror_in_a_values_own_code_is_not_a_marker(
    make: Callable[[], Any], flag: type, want: str
) -> None:
    # A tzinfo's offset and a key's repr that raise are marked (the value's own fault):
    # a MemoryError there was marked alike, and the datetime or key description lost.
    enc = Encoder(max_bytes=300)
    flag.short = True  # type: ignore[attr-defined]
    try:
        with pytest.raises(MemoryError):
            enc.encode(make())
    finally:
        flag.short = False  # type: ignore[attr-defined]
    assert enc.encode(make()).data == want.encode()

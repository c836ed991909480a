"""A pydantic model's own keys (tester report r19-modelcut, defects 1 and 2): a key
pydantic writes twice at the model's own level, passed through as pydantic's bytes when
the model fit; and fields cut in declaration order where pydantic writes them in the
instance ``__dict__``'s order."""

from __future__ import annotations

import json
from typing import Any

import msgspec
import pydantic
import pytest
import typing_extensions
from pydantic import BaseModel, ConfigDict, Field, RootModel, computed_field

from jsonbudget import Limits, MemoryCursorStore, Scope, bounded_dumps, encode, paginate


def _keys_once(data: bytes | str) -> Any:
    """*data* parsed, asserting no object holds a key twice (a parser keeps one)."""

    def unique(pairs: list[tuple[str, Any]]) -> dict[str, Any]:
        keys = [k for k, _ in pairs]
        assert len(set(keys)) == len(keys), f"a key written twice: {keys}"
        return dict(pairs)

    return json.loads(data, object_pairs_hook=unique)


def _repeat(key: str) -> str:
    return f"…[key repeated: str '{key}']"


class _ExtraComputed(BaseModel):
    model_config = ConfigDict(extra="allow")
    name: str

    @computed_field  # type: ignore[prop-decorator]
    @property
    def total(self) -> int:
        return 1


class _ExtraAlias(BaseModel):
    model_config = ConfigDict(extra="allow")
    a: str = Field(alias="b")


class _ExtraSerAlias(BaseModel):
    model_config = ConfigDict(extra="allow", serialize_by_alias=True)
    a: str = Field(serialization_alias="b")


class _TwoAliases(BaseModel):
    model_config = ConfigDict(serialize_by_alias=True)
    a: str = Field(serialization_alias="id")
    b: str = Field(serialization_alias="id")


class _ComputedAlias(BaseModel):
    model_config = ConfigDict(serialize_by_alias=True)
    a: str

    @computed_field(alias="a")  # type: ignore[prop-decorator]
    @property
    def c(self) -> int:
        return 1


def _variants(pad: str) -> list[tuple[BaseModel, str, Any, Any]]:
    """Each way pydantic writes a model's own key twice: the model (its first member
    padded by *pad*), the key, and the values of its two members under it."""
    return [
        (_ExtraComputed.model_validate({"name": "x" + pad, "total": 5}), "total", 5, 1),
        (_ExtraAlias.model_validate({"b": "x" + pad, "a": [1]}), "a", "x" + pad, [1]),
        (_ExtraSerAlias.model_validate({"a": "x" + pad, "b": [1]}), "b", "x" + pad, [1]),
        (_TwoAliases(a="1" + pad, b="2"), "id", "1" + pad, "2"),
        (_ComputedAlias(a="x" + pad), "a", "x" + pad, 1),
    ]


def test_regression_model_key_written_twice_by_pydantic_is_marked_when_it_fits() -> None:
    """pydantic writes ``{"name":"x","total":5,"total":1}`` for an extra named like a
    computed field (and so for two fields of one serialization alias, an extra named
    like a field's key, a computed field aliased as a field): where the model fit,
    those bytes were kept, complete and unreported, and a reader lost the 5. Now the
    repeat is marked and reported, as it was where the model is cut."""
    for m, key, first, second in _variants(""):
        assert m.model_dump_json().count(f'"{key}":') == 2  # pydantic writes both
        out = encode(m, max_bytes=1000)
        got = _keys_once(out.data)
        assert got[key] == first, type(m).__name__
        assert got[_repeat(key)] == second, type(m).__name__
        assert not out.complete
        assert [(t.path, t.kind, t.unit) for t in out.truncations] == [
            (f"/{_repeat(key)}", "unencodable", "keys")
        ]
        assert _keys_once(bounded_dumps(m, max_bytes=1000)) == got
        assert _keys_once(encode(m, max_bytes=1000, max_items=5).data) == got


def test_regression_model_key_written_twice_is_marked_alike_fit_or_cut() -> None:
    """Cut, the same models already had the repeat marked: both paths now agree."""
    for fit, cut in zip(_variants(""), _variants("y" * 400), strict=True):
        m, key, _, second = cut
        out = encode(m, max_bytes=160)
        got = _keys_once(out.data)
        assert got[_repeat(key)] == second
        assert any(t.unit == "keys" for t in out.truncations)
        assert list(_keys_once(encode(fit[0], max_bytes=1000).data)) == list(got)


class _Outer(BaseModel):
    t: _TwoAliases
    n: int = 1


class _Extras(BaseModel):
    model_config = ConfigDict(extra="allow")
    name: str


class _Holder(BaseModel):
    e: _Extras
    es: list[_Extras]
    d: dict[str, _Extras]


class _AnyField(BaseModel):
    x: Any


@pydantic.dataclasses.dataclass(config=ConfigDict(serialize_by_alias=True))
class _TwoAliasesDC:
    a: str = Field(serialization_alias="id")
    b: str = Field(serialization_alias="id")


class _HoldsDC(BaseModel):
    p: _TwoAliasesDC


def test_regression_model_key_written_twice_is_marked_inside_other_values() -> None:
    """A model whose keys repeat inside a model, a list, a dict, under ``Any``, as a
    RootModel's root, and a pydantic dataclass: pydantic's bytes were kept (the list in
    one call of its serializer), a key twice. Each now holds the marked repeat."""
    two = _TwoAliases(a="1", b="2")
    marked = {"id": "1", _repeat("id"): "2"}
    extras = _Extras.model_validate({"name": "x", "other": 1})
    assert extras.__pydantic_extra__ is not None
    extras.__pydantic_extra__["name"] = 5  # an extra set after validation
    marked_extras = {"name": "x", "other": 1, _repeat("name"): 5}
    cases: list[tuple[Any, Any]] = [
        (_Outer(t=two), {"t": marked, "n": 1}),
        ([two, two], [marked, marked]),
        ({"k": two}, {"k": marked}),
        (_AnyField(x=two), {"x": marked}),
        (RootModel[_TwoAliases](two), marked),
        (RootModel[list[_TwoAliases]]([two]), [marked]),
        (_TwoAliasesDC(a="1", b="2"), marked),
        (_HoldsDC(p=_TwoAliasesDC(a="1", b="2")), {"p": marked}),
        (extras, marked_extras),
        (
            _Holder(e=extras, es=[extras], d={"k": extras}),
            {"e": marked_extras, "es": [marked_extras], "d": {"k": marked_extras}},
        ),
    ]
    for value, expected in cases:
        for out in (encode(value, max_bytes=2000).data, bounded_dumps(value, max_bytes=2000)):
            assert _keys_once(out) == expected, value


class _TD(typing_extensions.TypedDict):
    t: _TwoAliases


class _WithTD(BaseModel):
    td: _TD


class _Serialized(BaseModel):
    x: Any

    @pydantic.field_serializer("x")
    def _x(self, v: Any) -> Any:
        return v


class _Whole(BaseModel):
    x: Any

    @pydantic.model_serializer
    def _all(self) -> dict[str, Any]:
        return {"x": self.x}


def test_regression_model_key_written_twice_under_a_serializer_keeps_both_values() -> None:
    """A model whose keys repeat inside a value pydantic writes itself (a TypedDict, a
    field or model serializer): its JSON mode keeps one of the two (the model
    serializer's case lost "1" with no marker), its JSON writes both. Both values are
    now in the output, the repeat marked."""
    two = _TwoAliases(a="1", b="2")
    marked = {"id": "1", _repeat("id"): "2"}
    for value, expected in (
        (_WithTD(td={"t": two}), {"td": {"t": marked}}),
        (_Serialized(x=two), {"x": marked}),
        (_Whole(x=two), {"x": marked}),
    ):
        for max_bytes in (2000, 64):
            out = encode(value, max_bytes=max_bytes)
            got = _keys_once(out.data)
            if max_bytes == 2000:
                assert got == expected, type(value).__name__
            assert any(t.unit == "keys" for t in out.truncations)


def test_regression_model_key_written_twice_is_marked_in_a_page() -> None:
    """``paginate`` wrote the item with pydantic's bytes: a key twice in the page."""
    page = paginate(
        [_ExtraComputed.model_validate({"name": "x", "total": 5})],
        scope=Scope("u", {}),
        store=MemoryCursorStore(),
        limits=Limits(1000),
    )
    got = _keys_once(page.to_json())
    assert got["items"] == [{"name": "x", "total": 5, _repeat("total"): 1}]
    assert [t["path"] for t in got["truncated"]] == [f"/items/0/{_repeat('total')}"]


def test_models_whose_keys_never_repeat_keep_pydantic_bytes() -> None:
    """The check is per class and per extra: a model with extras, aliases and computed
    fields none of which share a key is still written by pydantic, byte for byte."""

    class Plain(BaseModel):
        model_config = ConfigDict(extra="allow", serialize_by_alias=True)
        a: str = Field(serialization_alias="id")
        b: int = 2

        @computed_field  # type: ignore[prop-decorator]
        @property
        def c(self) -> int:
            return 3

    m = Plain.model_validate({"a": "x", "a2": [1], "id2": "q"})
    out = encode(m, max_bytes=1000)
    assert out.complete
    assert out.data == m.model_dump_json().encode()


def test_msgspec_refuses_keys_alike_at_class_definition() -> None:
    """Why a Struct needs no such check: msgspec refuses two fields under one name (a
    rename, ``field(name=...)``) and a tag field named like a field when the class is
    made, so no Struct instance has one key twice."""
    with pytest.raises(ValueError, match="rename to the same name"):

        class Renamed(msgspec.Struct, rename={"a": "b"}):
            a: int
            b: int

    with pytest.raises(ValueError, match="rename to the same name"):

        class Named(msgspec.Struct):
            a: int = msgspec.field(name="b")
            b: int = 0

    with pytest.raises(ValueError, match="conflicts with an existing field"):

        class Tagged(msgspec.Struct, tag_field="a", tag="x"):
            a: int


class _Ordered(BaseModel):
    a: str = ""
    b: list[int] = []
    c: int = 1


def _reset_a(value: str) -> _Ordered:
    m = _Ordered(b=[1, 2])
    del m.a
    m.a = value  # the instance dict's order is now b, c, a
    return m


def test_regression_model_fields_cut_in_the_order_pydantic_writes_them() -> None:
    """After ``del m.a; m.a = ...`` pydantic writes b, c, a (the instance dict's order);
    the cut path wrote a, b, c, so a cut kept other members than a prefix of what
    pydantic writes (``max_keys=2`` kept a and b). Now the cut follows pydantic."""
    m = _reset_a("y" * 300)
    assert list(json.loads(m.model_dump_json())) == ["b", "c", "a"]
    assert list(_keys_once(bounded_dumps(m, max_bytes=100))) == ["b", "c", "a"]
    kept = _keys_once(encode(m, max_bytes=1000, max_keys=2).data)
    assert list(kept)[:2] == ["b", "c"]
    prefix = _keys_once(encode(m, max_bytes=64, strategy="prefix").data)
    assert list(prefix)[:2] == ["b", "c"]
    small = _reset_a("y")
    assert bounded_dumps(small, max_bytes=1000) == small.model_dump_json().encode()
    assert list(_keys_once(encode(small, max_bytes=1000, max_items=1).data)) == ["b", "c", "a"]


def test_regression_model_fields_cut_in_a_reordered_dict_order_inside_a_list() -> None:
    """The same inside a list of models and with an instance dict reordered by hand."""
    m = _Ordered(a="y" * 300, b=[1, 2])
    m.__dict__["a"] = m.__dict__.pop("a")
    out = _keys_once(bounded_dumps([m, m], max_bytes=200))
    assert list(out[0]) == ["b", "c", "a"]
    assert out[0]["a"].startswith("yyy")
    assert "…[truncated:" in out[0]["a"]


def test_regression_a_subclass_written_as_its_base_keeps_no_extras() -> None:
    # pydantic writes a field declared as a base class without the subclass's extras;
    # an extra named like a field was still counted a repeat, written, marked and
    # reported (complete=False for a value that fits).
    class Base(pydantic.BaseModel):
        a: int

    class Sub(Base):
        model_config = pydantic.ConfigDict(extra="allow")

    class Holder(pydantic.BaseModel):
        x: Base
        s: str = ""

    for name in ("a", "q"):
        sub = Sub.model_validate({"a": 1})
        assert sub.__pydantic_extra__ is not None
        sub.__pydantic_extra__[name] = 7
        fits = encode(Holder(x=sub), max_bytes=1000)
        assert fits.data == Holder(x=sub).model_dump_json().encode()
        assert fits.complete
        cut = encode(Holder(x=sub, s="y" * 2000), max_bytes=200)
        assert cut.data.startswith(b'{"x":{"a":1},"s":"yyy')
        assert [t.path for t in cut.truncations] == ["/s"]

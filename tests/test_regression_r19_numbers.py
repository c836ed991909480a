"""Numbers at the edge of the double range (tester report r19-unicode, defects 1, 2, 4):
an int past the float range inside a model or Struct, a Decimal reaching
``bounded_tool(output="json")``'s parse-back, and a NumPy long double."""

from __future__ import annotations

import enum
import json
from typing import Any, Literal

import msgspec
import numpy as np
import orjson
import pydantic
import pytest

from jsonbudget import (
    EncodeError,
    Limits,
    MemoryCursorStore,
    ResultGate,
    Scope,
    bounded_tool,
    encode,
    paginate,
)
from jsonbudget._agents import guards
from jsonbudget._encode.encoder import encode_replaying

PAST = 10**400  # past the float range; written, orjson refuses it
PAST_STR = 10**5000  # past int()'s 4,300 digits too
MARK = "…[unencodable: int beyond the float range]"


class _Model(pydantic.BaseModel):
    n: int
    s: str = ""


class _Listed(pydantic.BaseModel):
    xs: list[int]
    d: dict[str, int]
    a: Any


class _Struct(msgspec.Struct):
    n: int


class _Row(msgspec.Struct, array_like=True):
    n: int
    xs: list[int]


class _Big(enum.IntEnum):
    PAST = PAST


class _Enumed(pydantic.BaseModel):
    e: _Big


def _strict(data: bytes | str) -> Any:
    """*data* as both reference parsers read it (each refuses a number past doubles)."""
    value = orjson.loads(data)
    assert json.loads(data) == value
    return value


@pytest.mark.parametrize(
    "value",
    [
        _Model(n=PAST),
        _Model(n=-PAST),
        _Model(n=PAST_STR),
        _Struct(n=PAST),
        _Struct(n=PAST_STR),
        _Enumed(e=_Big.PAST),
        [_Model(n=PAST), _Model(n=1)],
        {"rows": [_Struct(n=PAST)]},
    ],
    ids=["model", "negative", "model-4300-digits", "struct", "struct-4300-digits", "intenum",
         "list", "dict"],
)  # fmt: skip
def test_regression_model_int_past_float_range_is_marked(value: Any) -> None:
    for max_bytes in (30_000, 200, 80):
        enc = encode(value, max_bytes=max_bytes)
        text = json.dumps(_strict(enc.data), ensure_ascii=False)
        assert MARK in text or "…[unencodable]" in text
        assert not enc.complete
        assert any(t.kind == "unencodable" for t in enc.truncations)
        assert len(enc.data) <= max_bytes
    with pytest.raises(EncodeError, match="int beyond the float range"):
        encode(value, max_bytes=30_000, unencodable="error")


def test_regression_model_int_past_float_range_in_containers() -> None:
    enc = encode(_Listed(xs=[1, PAST, 3], d={"k": PAST}, a=PAST), max_bytes=30_000)
    assert _strict(enc.data) == {"xs": [1, MARK, 3], "d": {"k": MARK}, "a": MARK}
    assert [t.path for t in enc.truncations] == ["/xs/1", "/d/k", "/a"]
    enc = encode(_Row(n=PAST, xs=[PAST]), max_bytes=30_000)
    assert _strict(enc.data) == [MARK, [MARK]]


def test_model_int_within_float_range_is_kept() -> None:
    # Beyond 64 bits, yet a double reads it: written as pydantic writes it (encoder.md).
    for n in (10**300, 2**1024 - 2**970 - 1):
        enc = encode(_Model(n=n), max_bytes=30_000)
        assert enc.complete
        assert enc.data == _Model(n=n).model_dump_json().encode()
        assert orjson.loads(enc.data)["n"] == float(n)
    # Long digit runs in strings are no numbers: written whole by the library.
    m = _Model(n=1, s="9" * 5000)
    assert encode(m, max_bytes=30_000).data == m.model_dump_json().encode()


def test_regression_model_int_past_float_range_every_entry_point() -> None:
    page = paginate(
        [_Model(n=PAST)], scope=Scope("u", {}), store=MemoryCursorStore(), limits=Limits(30_000)
    )
    assert _strict(page.to_json())["items"] == [{"n": MARK, "s": ""}]
    gate = ResultGate(max_bytes=4096)
    assert _strict(gate.gate(_Model(n=PAST)).data) == {"n": MARK, "s": ""}
    preview = _strict(gate.gate([_Model(n=PAST, s="x" * 5000)]).data)
    assert MARK in json.dumps(preview, ensure_ascii=False)

    @bounded_tool(max_bytes=30_000, output="str")
    def as_str() -> _Model:
        return _Model(n=PAST_STR)

    @bounded_tool(max_bytes=30_000, output="bytes")
    def as_bytes() -> _Model:
        return _Model(n=PAST_STR)

    assert _strict(as_str()) == {"n": MARK, "s": ""}
    assert _strict(as_bytes()) == {"n": MARK, "s": ""}


def test_regression_tool_json_model_int_past_int_digits() -> None:
    # The report's crash: the stdlib's TypeError on a Decimal read back from the output.
    @bounded_tool(max_bytes=30_000, output="json")
    def tool() -> _Model:
        return _Model(n=PAST_STR)

    assert tool() == {"n": MARK, "s": ""}


@pytest.mark.parametrize("markers", ["text", "structured"])
@pytest.mark.parametrize("max_bytes", [30_000, 200, 64])
def test_regression_tool_json_decimal_read_back(
    monkeypatch: pytest.MonkeyPatch, markers: Literal["text", "structured"], max_bytes: int
) -> None:
    # An output that holds numbers no double holds, as if the encoder had written them:
    # load_json reads them as Decimals, which the parse-back must mark, not crash on.
    literal = b'{"n":' + b"1" * 5000 + b',"f":[1e400,2]}'

    def written(enc: Any, obj: Any, streams: Any) -> Any:
        out = encode_replaying(enc, obj, streams)
        return type(out)(literal, False, ())

    monkeypatch.setattr(guards, "encode_replaying", written)
    seen: list[Any] = []

    @bounded_tool(
        max_bytes=max_bytes,
        output="json",
        markers=markers,
        on_truncation=lambda name, cuts: seen.extend(cuts),
    )
    def tool() -> int:
        return 1

    value = tool()
    assert len(orjson.dumps(value)) <= max_bytes
    json.dumps(value)  # no Decimal left in it
    assert seen  # each number is marked, or cut with what holds it: reported either way
    if max_bytes == 30_000:
        decimal_mark = "…[unencodable: Decimal beyond the float range]"
        if markers == "text":
            assert value == {"n": decimal_mark, "f": [decimal_mark, 2]}
        assert [(t.path, t.kind) for t in seen] == [("/n", "unencodable"), ("/f/0", "unencodable")]


def test_regression_longdouble_past_double_goes_to_default() -> None:
    big = np.longdouble("1e400")
    assert np.isfinite(big)
    assert encode(big, max_bytes=100).data.decode() == '"…[unencodable: longdouble]"'
    seen: list[Any] = []

    def hook(o: Any) -> str:
        seen.append(o)
        return str(o)

    assert orjson.loads(encode(big, max_bytes=100, default=hook).data) == str(big)
    assert len(seen) == 1
    assert type(seen[0]) is np.longdouble
    assert seen[0] == big
    arr = encode(np.array([big, np.longdouble("nan")]), max_bytes=200).data.decode()
    assert arr == '["…[unencodable: longdouble]","…[unencodable: longdouble]"]'
    # A dtype orjson writes keeps the value's own marker.
    assert encode(np.float32("inf"), max_bytes=100).data.decode() == '"…[unencodable: inf]"'

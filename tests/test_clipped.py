"""A cell a source cut where it read it (`Clipped`): a cut string counted from the whole."""

from __future__ import annotations

import base64
import re
import sqlite3
from typing import Any

import msgspec
import orjson
import pydantic
import pytest
from hypothesis import given
from hypothesis import strategies as st

from jsonbudget import LimitError, Limits, MemoryCursorStore, Scope, SQLiteSource, paginate
from jsonbudget._encode.encoder import Encoder, Truncation, bounded_dumps, encode
from jsonbudget._sources.base import Clipped

_COUNT = re.compile(r"…\[truncated: (\d+) more (chars|bytes)\]$")


def _shown(text: str) -> tuple[str, int]:
    """The kept prefix of a cut string and the count its marker says."""
    m = _COUNT.search(text)
    assert m is not None, text
    return text[: m.start()], int(m.group(1))


def test_a_clipped_text_in_a_roomy_budget_says_exactly_what_the_source_left_out() -> None:
    out = encode({"id": 1, "note": Clipped("abc", 100, "chars")}, max_bytes=1000)
    assert out.data == '{"id":1,"note":"abc…[truncated: 97 more chars]"}'.encode()
    assert out.complete is False
    assert out.truncations == (Truncation("/note", "string", 97, "chars"),)


def test_a_clipped_text_cut_further_still_counts_from_the_whole_value() -> None:
    out = encode({"note": Clipped("x" * 500, 10_000, "chars"), "b": 1}, max_bytes=64)
    assert out.data == '{"note":"xxxxxxxxxxxxxxx…[truncated: 9985 more chars]","b":1}'.encode()
    assert out.truncations == (Truncation("/note", "string", 9985, "chars"),)


def test_a_text_counted_in_bytes_gets_a_byte_count() -> None:
    out = encode({"t": Clipped("é" * 10, 1000, "bytes")}, max_bytes=1000)
    assert out.data == ('{"t":"' + "é" * 10 + '…[truncated: 980 more bytes]"}').encode()
    assert out.truncations == (Truncation("/t", "string", 980, "bytes"),)
    tight = encode({"t": Clipped("é" * 100, 1000, "bytes")}, max_bytes=64)
    kept, count = _shown(orjson.loads(tight.data)["t"])
    assert count == 1000 - len(kept.encode()) == tight.truncations[0].omitted
    assert tight.truncations[0].unit == "bytes"


def test_a_clipped_head_that_fits_whole_is_still_not_complete() -> None:
    enc = Encoder(max_bytes=1000)
    for value in (Clipped("abc", 4, "chars"), [Clipped("abc", 4, "chars")]):
        assert enc.encode(value).complete is False
        whole = enc.whole(value, 1000)
        assert whole is not None
        assert whole.complete is False
    assert bounded_dumps(Clipped("abc", 4, "chars"), max_bytes=100) == (
        '"abc…[truncated: 1 more chars]"'.encode()
    )


def test_the_field_cap_cuts_a_clipped_text_and_the_count_stays_exact() -> None:
    out = encode([Clipped("a" * 200, 5000, "chars")], max_bytes=1000, max_field_bytes=40)
    (text,) = orjson.loads(out.data)
    kept, count = _shown(text)
    assert count == 5000 - len(kept)
    assert out.truncations == (Truncation("/0", "string", 5000 - len(kept), "chars"),)


def test_a_clipped_binary_head_is_a_marker_by_default() -> None:
    out = encode({"blob": Clipped(b"\x00\xff" * 50, 8000, "bytes")}, max_bytes=200)
    assert out.data == '{"blob":"…[unencodable: bytes of 8000 bytes]"}'.encode()
    assert out.truncations == (Truncation("/blob", "unencodable", None, "bytes"),)


def test_a_clipped_binary_head_in_base64_counts_the_bytes_left_out() -> None:
    """Regression: a head of 7 bytes was written whole as ``YWJjZGVmZw==``: padding in
    the middle of the value, not a prefix of the whole value's base64. More follows, so
    the head shows whole groups of 3 bytes only."""
    head = b"abcdefg"
    out = encode({"blob": Clipped(head, 1000, "bytes")}, max_bytes=200, binary="base64")
    assert out.data == '{"blob":"YWJjZGVm…[truncated: 994 more bytes]"}'.encode()
    assert out.truncations == (Truncation("/blob", "string", 994, "bytes"),)
    # Cut further, it keeps whole base64 quanta: every kept character decodes.
    tight = encode({"blob": Clipped(head * 20, 1000, "bytes")}, max_bytes=64, binary="base64")
    kept, count = _shown(orjson.loads(tight.data)["blob"])
    assert len(kept) % 4 == 0
    assert base64.b64decode(kept) == (head * 20)[: len(kept) // 4 * 3]
    assert count == 1000 - len(kept) // 4 * 3 == tight.truncations[0].omitted


@given(whole=st.binary(min_size=1, max_size=400), data=st.data())
def test_a_base64_head_is_always_a_prefix_of_the_whole_values_base64(
    whole: bytes, data: st.DataObject
) -> None:
    head = whole[: data.draw(st.integers(0, len(whole) - 1))]
    budget = data.draw(st.integers(64, 800))
    out = encode(Clipped(head, len(whole), "bytes"), max_bytes=budget, binary="base64")
    kept, count = _shown(orjson.loads(out.data))
    assert "=" not in kept
    assert base64.b64encode(whole).decode().startswith(kept)
    assert count == len(whole) - len(kept) // 4 * 3 == out.truncations[0].omitted


@pytest.mark.parametrize(
    ("args", "name"),
    [
        (("abc", 2, "chars"), "Clipped.length"),  # less than the head: a negative count
        (("é" * 10, 5, "bytes"), "Clipped.length"),  # 20 bytes of head
        (("abc", 5, "words"), "Clipped.unit"),
        ((3, 5, "chars"), "Clipped.head"),
        (("abc", True, "chars"), "Clipped.length"),
        (("abc", -1, "chars"), "Clipped.length"),
    ],
)
def test_a_clipped_value_that_would_report_a_false_count_is_refused(
    args: tuple[Any, ...], name: str
) -> None:
    """Regression: these were accepted and reported ``-1 more chars``, ``omitted=-15``
    and ``unit='words'``."""
    with pytest.raises(LimitError) as caught:
        Clipped(*args)
    assert caught.value.name == name
    assert isinstance(caught.value, ValueError)


def test_structured_markers_carry_the_exact_count_and_the_unit() -> None:
    out = encode(Clipped("abc", 100, "chars"), max_bytes=100, markers="structured")
    assert orjson.loads(out.data) == {
        "$truncated": {"kind": "string", "omitted": 97, "prefix": "abc"}
    }
    out = encode(Clipped("abc", 100, "bytes"), max_bytes=100, markers="structured")
    assert orjson.loads(out.data) == {
        "$truncated": {"kind": "string", "omitted": 97, "unit": "bytes", "prefix": "abc"}
    }


@given(
    head=st.text(max_size=300),
    extra=st.integers(1, 10**12),
    unit=st.sampled_from(["chars", "bytes"]),
    budget=st.integers(64, 600),
)
def test_the_report_always_says_the_whole_value_minus_what_is_shown(
    head: str, extra: int, unit: str, budget: int
) -> None:
    size = len(head) if unit == "chars" else len(head.encode("utf-8", "surrogatepass"))
    clipped = Clipped(head, size + extra, unit)  # type: ignore[arg-type]
    out = encode({"k": clipped}, max_bytes=budget)
    assert len(out.data) <= budget
    assert out.complete is False
    (tr,) = [t for t in out.truncations if t.kind == "string"]
    assert tr.path == "/k"
    assert tr.unit == unit
    text = orjson.loads(out.data)["k"]
    m = _COUNT.search(text)
    if m is None:  # the count did not fit: the in-band marker says only that it was cut
        assert text.endswith("…[truncated]")
        kept = text[: -len("…[truncated]")]
    else:
        kept = text[: m.start()]
        assert int(m.group(1)) == tr.omitted
    shown = len(kept) if unit == "chars" else len(kept.encode("utf-8", "surrogatepass"))
    assert tr.omitted == clipped.length - shown


def test_a_page_of_sqlite_rows_says_exactly_how_much_of_each_long_cell_is_left_out() -> None:
    conn = sqlite3.connect(":memory:")
    conn.execute("CREATE TABLE c (id INTEGER PRIMARY KEY, body TEXT)")
    conn.execute("INSERT INTO c VALUES (1, ?)", ("é" * 5000 + "tail",))
    conn.execute("INSERT INTO c VALUES (2, 'short')")
    source = SQLiteSource(conn, table="c", max_cell_bytes=100)
    page = paginate(
        source, scope=Scope("alice", {}), store=MemoryCursorStore(), limits=Limits(2000)
    )
    doc = orjson.loads(page.to_json())
    # The database counts in bytes (the bound's unit): 100 bytes hold 50 "é"s of 10,004.
    assert doc["items"] == [
        {"id": 1, "body": "é" * 50 + "…[truncated: 9904 more bytes]"},
        {"id": 2, "body": "short"},
    ]
    assert {"path": "/items/0/body", "kind": "string", "omitted": 9904, "unit": "bytes"} in (
        doc["truncated"]
    )
    # A page too small for the head cuts it further; the count is still of the whole cell.
    wide = SQLiteSource(conn, table="c", max_cell_bytes=1000)
    small = paginate(wide, scope=Scope("alice", {}), store=MemoryCursorStore(), limits=Limits(450))
    sdoc = orjson.loads(small.to_json())
    kept, count = _shown(sdoc["items"][0]["body"])
    assert 0 < len(kept.encode()) < 1000
    assert count == 10004 - len(kept.encode())
    assert {"path": "/items/0/body", "kind": "string", "omitted": count, "unit": "bytes"} in (
        sdoc["truncated"]
    )


def test_a_clipped_text_inside_a_model_or_struct_is_cut_the_same_way() -> None:
    class M(pydantic.BaseModel):
        note: object

    class S(msgspec.Struct):
        note: object

    want = '{"note":"abc…[truncated: 97 more chars]"}'.encode()
    for value in (M(note=Clipped("abc", 100, "chars")), S(note=Clipped("abc", 100, "chars"))):
        out = encode(value, max_bytes=1000)
        assert out.data == want
        assert out.truncations == (Truncation("/note", "string", 97, "chars"),)


@pytest.mark.parametrize(
    "clip", [Clipped("abc", 100, "bytes"), Clipped(b"abc", 100, "bytes")], ids=["text", "binary"]
)
@pytest.mark.parametrize("where", ["top", "member", "item"])
def test_regression_a_value_counted_in_bytes_fits_the_smallest_structured_budgets(
    clip: Clipped, where: str
) -> None:
    # The structured marker with "unit":"bytes" is 74 bytes at its shortest: at budgets
    # (or field caps) of 64 to 73 bytes the cut found no rendering, an AssertionError.
    value: Any = {"top": clip, "member": {"k": clip, "j": 1}, "item": [clip, 1]}[where]
    for max_bytes in range(64, 120):
        options: dict[str, Any] = {"markers": "structured", "binary": "base64"}
        if where != "top":
            options["max_field_bytes"] = 64
        got = encode(value, max_bytes=max_bytes if where == "top" else 1000, **options)
        assert len(got.data) <= (max_bytes if where == "top" else 1000)
        doc = orjson.loads(got.data)
        assert not got.complete
        (omitted,) = [t.omitted for t in got.truncations if t.kind == "string"]
        assert omitted is not None
        assert 97 <= omitted <= 100  # what was left of the head, counted
        assert '"$truncated"' in got.data.decode()
        if where == "item":
            assert doc[1] == 1  # the item after it is kept, not cut with it

"""File sources: JSON arrays under a prefix (plain and gzip) and JSON Lines."""

from __future__ import annotations

import base64
import contextlib
import gzip
import itertools
import json
import json.scanner
import os
import re
import sys
import tempfile
import zlib
from decimal import Decimal
from pathlib import Path
from typing import Any

import orjson
import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from jsonbudget import (
    Clipped,
    JsonArrayFileSource,
    JsonLinesSource,
    Limits,
    MemoryCursorStore,
    PageBuilder,
    Scope,
    Source,
    bounded_dumps,
    paginate,
)
from jsonbudget._limits import MAX_DEPTH
from jsonbudget._sources.jsonread import load_json, scan_json
from jsonbudget.errors import DecodeError, InvalidCursor, LimitError
from tests.limited import bounded_run
from tests.strategies import json_values as any_json
from tests.test_sources import pages_by_fill, pages_by_paginate, read_in_pages, roundtrip, take

ROWS: list[Any] = [
    {"id": 1, "name": "plain"},
    {"id": 2, "name": "é✓ multibyte 😀", "tags": ["]", "}", ","]},
    [1, 2.5, None, True, False],
    'a string with "quotes" and \\ and \u2028',
    123456789012345678901234567890,
    -0.5,
    None,
    {},
    [],
    {"nested": {"deep": [[[{"x": "]]]}}}"}]]]}},
]


def write(path: Path, text: str, *, compress: bool = False) -> Path:
    data = text.encode("utf-8")
    path.write_bytes(gzip.compress(data) if compress else data)
    return path


def all_items(source: Source[Any], position: Any = None) -> list[Any]:
    return [item for item, _ in source.open(position)]


def rchar() -> int:
    """Bytes this process has read through read(2) and friends (Linux)."""
    with open("/proc/self/io", encoding="ascii") as f:
        for line in f:
            if line.startswith("rchar:"):
                return int(line.split()[1])
    raise AssertionError("no rchar in /proc/self/io")


def open_fds() -> int:
    return len(os.listdir("/proc/self/fd"))


# --- JSON arrays ------------------------------------------------------------------------


@pytest.mark.parametrize("read_size", [1, 7, 64, 65536])
@pytest.mark.parametrize("compress", [False, True])
def test_array_resume_at_every_position_equals_tail(
    tmp_path: Path, read_size: int, compress: bool
) -> None:
    path = write(
        tmp_path / "a.json", json.dumps(ROWS, ensure_ascii=False, indent=2), compress=compress
    )
    source = JsonArrayFileSource(path, read_size=read_size)
    full = list(source.open(None))
    assert [item for item, _ in full] == ROWS
    for i, (_, pos) in enumerate(full):
        assert all_items(source, roundtrip(pos)) == ROWS[i + 1 :]


def test_array_under_a_nested_prefix_skips_siblings(tmp_path: Path) -> None:
    doc = {
        "meta": {"note": 'brackets ] } [ { and "quotes"', "list": [1, [2, {"results": [0]}]]},
        "count": 3,
        "results": ROWS,
        "after": "never read",
    }
    path = write(tmp_path / "r.json", json.dumps(doc))
    source = JsonArrayFileSource(path, prefix="results.item", read_size=5)
    full = list(source.open(None))
    assert [x for x, _ in full] == ROWS
    assert all_items(source, full[3][1]) == ROWS[4:]
    deep = write(tmp_path / "d.json", json.dumps({"a": {"b": [1, 2, 3]}}))
    assert all_items(JsonArrayFileSource(deep, prefix="a.b.item")) == [1, 2, 3]


def test_array_stops_at_its_closing_bracket(tmp_path: Path) -> None:
    # The rest of the document is never parsed: paging it cannot fail on it or cost for it.
    path = write(tmp_path / "x.json", '{"results": [1, 2], "tail": ' + "x" * 1000)
    assert all_items(JsonArrayFileSource(path, prefix="results.item")) == [1, 2]


def test_empty_arrays(tmp_path: Path) -> None:
    assert all_items(JsonArrayFileSource(write(tmp_path / "e.json", " [ ] "))) == []
    path = write(tmp_path / "e2.json", '{"results": []}')
    assert all_items(JsonArrayFileSource(path, prefix="results.item")) == []


def test_gzip_is_detected_by_magic_bytes(tmp_path: Path) -> None:
    path = write(tmp_path / "no-suffix", json.dumps([1, 2, 3]), compress=True)
    assert all_items(JsonArrayFileSource(path)) == [1, 2, 3]
    assert all_items(JsonArrayFileSource(path, gzip=True)) == [1, 2, 3]
    with pytest.raises(DecodeError):
        all_items(JsonArrayFileSource(path, gzip=False))


def test_numbers_keep_their_exact_values(tmp_path: Path) -> None:
    path = write(tmp_path / "n.json", "[1.5, 10000000000000000000000001, 1e2, -0]")
    got = all_items(JsonArrayFileSource(path))
    assert got == [1.5, 10000000000000000000000001, 100.0, 0]
    assert [type(x) for x in got] == [float, int, float, int]


@pytest.mark.parametrize(
    ("text", "prefix", "message"),
    [
        ("[1, 2,]", "item", "trailing comma"),
        ("[1, 2", "item", "the input ends inside the array"),
        ("[1 2]", "item", "expected ',' or ']'"),
        ("[NaN]", "item", "NaN is not valid JSON"),
        ("[1, -Infinity]", "item", "Infinity is not valid JSON"),
        ('{"a": 1}', "item", "expected '\\['"),
        ('{"a": 1}', "results.item", "no key 'results'"),
        ('{"results": {"x": 1}}', "results.item", "expected '\\['"),
        ("[{]", "item", "invalid JSON"),
        ('[{"a": 1}, {"b": }]', "item", "invalid JSON"),
        # A file cut inside an item said "expected a value" or named a missing key.
        ('[1, 2, {"a":', "item", "the input ends inside an item"),
        ('[{"a": 1, ', "item", "the input ends inside an item"),
        ('[1, 2, {"a": "unclosed', "item", "the input ends inside an item"),
        ("[1, 2, x]", "item", "expected a value"),
    ],
)
def test_invalid_documents_raise_decode_error(
    tmp_path: Path, text: str, prefix: str, message: str
) -> None:
    path = write(tmp_path / "bad.json", text)
    with pytest.raises(DecodeError, match=message):
        all_items(JsonArrayFileSource(path, prefix=prefix, read_size=3))


@pytest.mark.parametrize(
    ("text", "offset"),
    [
        ('[1, {"a": tru}]', 10),
        ('[1, {"é": tru}]', 11),  # counted in bytes: é is two
        # The comma on Python 3.13, which reads a trailing comma as its own error; the
        # brace before (the stdlib scanner stops where it stops).
        ('[1, {"a": 1,}]', 11 if sys.version_info >= (3, 13) else 12),
        ("[1, 2 3]", 6),
        ('[{"a": [1, 2, x]}]', 14),
    ],
)
@pytest.mark.parametrize("read_size", [3, 65536])
def test_regression_an_invalid_item_names_the_byte_where_it_goes_wrong(
    tmp_path: Path, text: str, offset: int, read_size: int
) -> None:
    """The offset was the start of the item that held the error."""
    path = write(tmp_path / "bad.json", text)
    with pytest.raises(DecodeError) as caught:
        all_items(JsonArrayFileSource(path, read_size=read_size))
    assert caught.value.offset == offset


def test_invalid_utf8_is_refused(tmp_path: Path) -> None:
    path = tmp_path / "u.json"
    path.write_bytes(b'["ok", "\xff"]')
    with pytest.raises(DecodeError, match="UTF-8"):
        all_items(JsonArrayFileSource(path))


@pytest.mark.parametrize("at", [8, 1023, 1024, 1025, 5000])
@pytest.mark.parametrize("split", [False, True])
def test_regression_invalid_utf8_names_its_own_byte(tmp_path: Path, at: int, split: bool) -> None:
    """The offset was where the window's read began (0 for a bad byte at 8, 65536 for
    one at 100002). *split*: the bad byte follows a character cut by the last read."""
    body = bytearray(b'["x' + "é".encode() * 3000 + b'"]')  # a first byte at each odd offset
    bad = at - (1 - at % 2)  # a first byte: 1023 ends the first read of 1024 bytes
    if split:
        body[bad + 1] = 0x41  # its second byte broken, in the next read
    else:
        body[bad] = 0xFF
    path = tmp_path / "u.json"
    path.write_bytes(bytes(body))
    with pytest.raises(DecodeError, match="UTF-8") as caught:
        all_items(JsonArrayFileSource(path, read_size=1024))
    assert caught.value.offset == bad


def test_syntax_error_is_reported_without_reading_the_rest_of_the_file(tmp_path: Path) -> None:
    path = tmp_path / "big-bad.json"
    path.write_bytes(b"[1, 2, {oops}, " + b"3, " * 2_000_000 + b"4]")
    before = rchar()
    with pytest.raises(DecodeError):
        all_items(JsonArrayFileSource(path))
    assert rchar() - before < 256 * 1024


@pytest.mark.parametrize("prefix", ["", "results", "item.x.item", "a..item", 3])
def test_unsupported_prefix_is_refused(tmp_path: Path, prefix: Any) -> None:
    with pytest.raises(LimitError, match="prefix"):
        JsonArrayFileSource(tmp_path / "x.json", prefix=prefix)


@pytest.mark.parametrize("option", ["read_size", "max_item_bytes"])
def test_numeric_options_are_checked(tmp_path: Path, option: str) -> None:
    kwargs: dict[str, Any] = {option: 0}
    with pytest.raises(LimitError, match=option):
        JsonArrayFileSource(tmp_path / "x.json", **kwargs)


# --- Resume without re-parsing; changes detected -----------------------------------------


@pytest.fixture(scope="module")
def big_array(tmp_path_factory: pytest.TempPathFactory) -> Path:
    path = tmp_path_factory.mktemp("big") / "big.json"
    with open(path, "wb") as f:
        f.write(b"[")
        for i in range(60_000):
            f.write(b"," if i else b"")
            f.write(orjson.dumps({"id": i, "text": f"row {i} " + "lorem ipsum " * 20}))
        f.write(b"]")
    assert path.stat().st_size > 15_000_000
    return path


def test_first_items_read_only_the_first_chunk(big_array: Path) -> None:
    source = JsonArrayFileSource(big_array)
    before = rchar()
    got = take(source, None, 101)
    assert [x["id"] for x, _ in got] == list(range(101))
    assert rchar() - before < 200 * 1024


def test_resume_near_the_end_does_not_reparse_the_start(big_array: Path) -> None:
    source = JsonArrayFileSource(big_array)
    near_end = next(pos for item, pos in source.open(None) if item["id"] == 59_989)
    before = rchar()
    assert [x["id"] for x in all_items(source, roundtrip(near_end))] == list(range(59_990, 60_000))
    assert rchar() - before < 200 * 1024


def test_closing_the_iterator_closes_the_file(big_array: Path) -> None:
    before = open_fds()
    it = JsonArrayFileSource(big_array).open(None)
    next(it)
    assert open_fds() == before + 1
    it.close()
    assert open_fds() == before


def test_resume_after_append_is_refused(tmp_path: Path) -> None:
    path = write(tmp_path / "a.json", json.dumps(list(range(10))))
    source = JsonArrayFileSource(path)
    (_, pos), *_ = take(source, None, 1)
    path.write_text(json.dumps(list(range(11))), encoding="utf-8")
    with pytest.raises(InvalidCursor, match="changed"):
        all_items(source, pos)


def test_resume_after_same_size_same_mtime_rewrite_is_refused(tmp_path: Path) -> None:
    path = write(tmp_path / "a.json", "[10, 20, 30]")
    source = JsonArrayFileSource(path)
    (_, pos), *_ = take(source, None, 1)
    st = path.stat()
    path.write_text("[1, 220, 30]", encoding="utf-8")  # same size; byte before offset differs
    os.utime(path, ns=(st.st_atime_ns, st.st_mtime_ns))
    with pytest.raises(InvalidCursor, match="changed"):
        all_items(source, pos)


@pytest.mark.parametrize(
    "bad",
    [
        5,
        "x",
        [],
        {"i": 1},
        {"i": 1, "o": 0, "s": 1, "m": 1, "t": 1, "n": 1, "c": "]"},
        {"i": -1, "o": 2, "s": 1, "m": 1, "t": 1, "n": 1, "c": "1"},
        {"i": 1, "o": 2, "s": 1, "m": 1, "c": "1"},  # before ctime and inode were kept
    ],
)
def test_malformed_file_positions_are_invalid_cursors(tmp_path: Path, bad: Any) -> None:
    path = write(tmp_path / "a.json", "[1, 2]")
    with pytest.raises(InvalidCursor):
        all_items(JsonArrayFileSource(path), bad)


@pytest.mark.parametrize("offset", [7, 2**70])
@pytest.mark.parametrize("kind", ["array", "lines"])
def test_regression_an_offset_past_the_file_is_an_invalid_cursor(
    tmp_path: Path, kind: str, offset: int
) -> None:
    # An offset past what seek takes escaped as a bare ValueError from seek().
    path = write(tmp_path / "a.json", "[1, 2]" if kind == "array" else "1\n2\n")
    source: Any = JsonArrayFileSource(path) if kind == "array" else JsonLinesSource(path)
    st = path.stat()
    bad = {
        "i": 1,
        "o": offset,
        "s": st.st_size,
        "m": st.st_mtime_ns,
        "t": st.st_ctime_ns,
        "n": st.st_ino,
        "c": "1",
    }
    with pytest.raises(InvalidCursor):
        all_items(source, bad)
    with pytest.raises(InvalidCursor):
        pages_by_fill_from(source, Limits(4096), bad)


def pages_by_fill_from(source: Any, limits: Limits, position: Any) -> list[Any]:
    builder = PageBuilder(limits)
    source.fill(builder, position, limit_hint=limits.max_items)
    return list(builder.finish(complete=True).items)


def test_describe_binds_path_and_prefix(tmp_path: Path) -> None:
    source = JsonArrayFileSource(tmp_path / "a.json", prefix="results.item")
    assert roundtrip(source.describe()) == {
        "kind": "json_array_file",
        "path": str(tmp_path / "a.json"),
        "prefix": "results.item",
        "gzip": None,
    }


json_values = st.recursive(
    st.none()
    | st.booleans()
    | st.integers()
    | st.floats(allow_nan=False, allow_infinity=False)
    | st.text(),
    lambda inner: (
        st.lists(inner, max_size=3) | st.dictionaries(st.text(max_size=4), inner, max_size=3)
    ),
    max_leaves=8,
)


@settings(
    max_examples=40, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture]
)
@given(
    items=st.lists(json_values, max_size=25),
    sizes=st.lists(st.integers(min_value=1, max_value=7), min_size=1, max_size=3),
    read_size=st.integers(min_value=1, max_value=40),
    indent=st.sampled_from([None, 1]),
    ascii_only=st.booleans(),
    nested=st.booleans(),
    compress=st.booleans(),
)
def test_file_pages_reassemble(
    tmp_path: Path,
    *,
    items: list[Any],
    sizes: list[int],
    read_size: int,
    indent: int | None,
    ascii_only: bool,
    nested: bool,
    compress: bool,
) -> None:
    doc: Any = {"x": items[:2], "results": items} if nested else items
    text = json.dumps(doc, indent=indent, ensure_ascii=ascii_only)
    path = write(tmp_path / "p.json", text, compress=compress)
    prefix = "results.item" if nested else "item"
    source = JsonArrayFileSource(path, prefix=prefix, read_size=read_size)
    assert read_in_pages(source, sizes) == items
    lines = write(
        tmp_path / "p.jsonl",
        "".join(json.dumps(x, ensure_ascii=ascii_only) + "\n" for x in items),
        compress=compress,
    )
    assert read_in_pages(JsonLinesSource(lines), sizes) == items


# --- JSON Lines -------------------------------------------------------------------------


@pytest.mark.parametrize("compress", [False, True])
def test_jsonl_resume_at_every_position_skips_blank_lines(tmp_path: Path, compress: bool) -> None:
    text = "\n".join(json.dumps(r, ensure_ascii=False) for r in ROWS)
    text = text.replace("\n", "\r\n\n  \n", 2) + "\n"  # CRLF and blank lines
    path = write(tmp_path / "a.jsonl", text, compress=compress)
    source = JsonLinesSource(path)
    full = list(source.open(None))
    assert [x for x, _ in full] == ROWS
    for i, (_, pos) in enumerate(full):
        assert all_items(source, roundtrip(pos)) == ROWS[i + 1 :]


def test_jsonl_without_final_newline(tmp_path: Path) -> None:
    path = write(tmp_path / "a.jsonl", '1\n{"a": 2}')
    assert all_items(JsonLinesSource(path)) == [1, {"a": 2}]


@pytest.mark.parametrize(
    ("text", "message"),
    [
        ("1\n2 3\n", "line at byte 2: invalid JSON: content after the value"),
        ("1\n{\n", "line at byte 2: invalid JSON"),
        ("NaN\n", "NaN is not valid JSON"),
        # Regression: bytes.isspace() took these for blank lines and skipped them.
        ("1\n\x0b\n2\n", "line at byte 2: invalid JSON"),
        ("1\n\x0c\n", "line at byte 2: invalid JSON"),
    ],
)
def test_jsonl_invalid_lines(tmp_path: Path, text: str, message: str) -> None:
    path = write(tmp_path / "b.jsonl", text)
    with pytest.raises(DecodeError, match=message):
        all_items(JsonLinesSource(path))
    with pytest.raises(DecodeError, match=message):
        pages_by_fill(JsonLinesSource(path), Limits(4096))


@pytest.mark.parametrize("text", ['{"a":1}\n\n{"b":\n{"c":2}\n', '{"a":1}\r\n{"b":\r\n'])
def test_regression_a_bad_line_has_one_offset_whether_read_or_filled(
    tmp_path: Path, text: str
) -> None:
    """Lines read with their newline (open, the CLI's dump) put the error after it, one
    byte past where a filled page (lines split without it) put it."""
    path = write(tmp_path / "b.jsonl", text)
    offsets = []
    for read in (all_items, lambda source: pages_by_fill(source, Limits(4096))):
        with pytest.raises(DecodeError) as caught:
            read(JsonLinesSource(path))
        offsets.append(caught.value.offset)
    assert offsets == [text.index('{"b":') + 5] * 2  # where the line's text ends


def test_jsonl_change_detected(tmp_path: Path) -> None:
    path = write(tmp_path / "c.jsonl", "1\n2\n3\n")
    source = JsonLinesSource(path)
    (_, pos), *_ = take(source, None, 1)
    with open(path, "a", encoding="utf-8") as f:
        f.write("4\n")
    with pytest.raises(InvalidCursor, match="changed"):
        all_items(source, pos)


def test_jsonl_look_ahead_reads_little(big_array: Path, tmp_path: Path) -> None:
    path = tmp_path / "big.jsonl"
    with open(path, "wb") as f:
        for i in range(100_000):
            f.write(orjson.dumps({"id": i, "pad": "p" * 100}) + b"\n")
    before = rchar()
    got = list(itertools.islice(JsonLinesSource(path).open(None, limit_hint=10), 11))
    assert [x["id"] for x, _ in got] == list(range(11))
    assert rchar() - before < 200 * 1024


# --- hostile files: deep nesting, huge integers, broken gzip, BOM, trailing content -------


# Code for `run_bounded`: every page of `source` (as named there) in 4 KiB pages, each
# checked to fit, its items gathered in `items`.
PAGE_ALL_4K = """
from jsonbudget import Limits, MemoryCursorStore, Scope, paginate
store, scope, cursor, items = MemoryCursorStore(), Scope("t", {}), None, []
while True:
    page = paginate(source, scope=scope, cursor=cursor, store=store, limits=Limits(4096))
    assert len(page.to_json()) <= 4096
    items += page.items
    cursor = page.next_cursor
    if cursor is None:
        break
"""


def test_million_deep_array_item_is_read_iteratively_with_a_depth_marker(tmp_path: Path) -> None:
    """Regression: a deeply nested item raised RecursionError from the stdlib scanner."""
    n = 1_000_000
    path = tmp_path / "deep.json"
    path.write_bytes(b"[" + b"[" * n + b"]" * n + b", 7]")
    out = bounded_run(
        "from jsonbudget import JsonArrayFileSource\n"
        f"items = [x for x, _ in JsonArrayFileSource({str(path)!r}).open(None)]\n"
        "x, d = items[0], 0\n"
        "while isinstance(x, list) and x: x, d = x[0], d + 1\n"
        "print(d, x, items[1])\n",
        memory=300 << 20,
    )
    # Lists at depths 0 to MAX_DEPTH (the deepest any Limits allows) are built; the one
    # below is its marker, counting its one child.
    assert out == f"{MAX_DEPTH + 1} …[depth: list of 1 items] 7\n"


def test_million_deep_jsonl_line_is_read_iteratively(tmp_path: Path) -> None:
    """Regression: a deeply nested line raised RecursionError."""
    n = 1_000_000
    path = tmp_path / "deep.jsonl"
    path.write_bytes(b"1\n" + b"[" * n + b"]" * n + b"\n2\n")
    out = bounded_run(
        "from jsonbudget import JsonLinesSource\n"
        f"items = [x for x, _ in JsonLinesSource({str(path)!r}).open(None)]\n"
        "x, d = items[1], 0\n"
        "while isinstance(x, list) and x: x, d = x[0], d + 1\n"
        "print(items[0], d - 1, x, items[2])\n",
        memory=300 << 20,
    )
    assert out == f"1 {MAX_DEPTH} …[depth: list of 1 items] 2\n"


def test_deep_objects_count_their_keys(tmp_path: Path) -> None:
    # Deeper than the C scanner goes on any Python (about 1,000 levels; 10,000 on 3.13).
    text = '{"a": ' * 20_000 + '{"x": 1, "y": [2]}' + "}" * 20_000
    path = write(tmp_path / "o.json", f"[{text}]")
    (item,) = all_items(JsonArrayFileSource(path))
    for _ in range(MAX_DEPTH):
        item = item["a"]
    assert item == {"a": "…[depth: object with 1 keys]"}


def test_huge_integer_is_exact(tmp_path: Path) -> None:
    """Regression: a 5,000-digit integer raised ValueError (int()'s digit limit)."""
    digits = "9" * 5000
    for source in (
        JsonArrayFileSource(write(tmp_path / "i.json", f"[1, {digits}, -{digits}]")),
        JsonLinesSource(write(tmp_path / "i.jsonl", f"1\n{digits}\n-{digits}\n")),
    ):
        one, big, neg = all_items(source)
        assert one == 1
        assert big == Decimal(digits)
        assert neg == Decimal("-" + digits)


def test_integers_beyond_64_bits_stay_ints_in_json_lines(tmp_path: Path) -> None:
    """orjson would turn these into floats; the line parser keeps them exact."""
    values = [2**64, -(2**63) - 1, 123456789012345678901234567890, 10**18]
    path = write(tmp_path / "b.jsonl", "\n".join(map(str, values)) + "\n")
    got = all_items(JsonLinesSource(path))
    assert got == values
    assert all(type(v) is int for v in got)


@pytest.mark.parametrize("kind", ["array", "lines"])
def test_truncated_gzip_is_a_decode_error(tmp_path: Path, kind: str) -> None:
    """Regression: a truncated gzip file raised EOFError."""
    rows = [{"id": i, "text": "x" * 50} for i in range(2000)]
    text = json.dumps(rows) if kind == "array" else "\n".join(map(json.dumps, rows)) + "\n"
    data = gzip.compress(text.encode())
    path = tmp_path / "t.gz"
    path.write_bytes(data[: len(data) // 2])
    source: Source[Any] = JsonArrayFileSource(path) if kind == "array" else JsonLinesSource(path)
    with pytest.raises(DecodeError, match="truncated"):
        all_items(source)


@pytest.mark.parametrize("kind", ["array", "lines"])
def test_bad_gzip_crc_is_a_decode_error(tmp_path: Path, kind: str) -> None:
    """Regression: a bad CRC raised gzip.BadGzipFile."""
    text = "[1, 2, 3]" if kind == "array" else "1\n2\n3\n"
    data = bytearray(gzip.compress(text.encode()))
    data[-8] ^= 0xFF  # the CRC32 of the member
    path = tmp_path / "c.gz"
    path.write_bytes(bytes(data))
    source: Source[Any] = JsonArrayFileSource(path) if kind == "array" else JsonLinesSource(path)
    with pytest.raises(DecodeError, match="invalid gzip data"):
        all_items(source)


@pytest.mark.parametrize("compress", [False, True])
def test_byte_order_mark_is_skipped(tmp_path: Path, compress: bool) -> None:
    """Regression: a UTF-8 BOM made the array source fail with "expected '['"."""
    array = tmp_path / "bom.json"
    array.write_bytes((gzip.compress if compress else bytes)(b"\xef\xbb\xbf[1, 2]"))
    lines = tmp_path / "bom.jsonl"
    lines.write_bytes((gzip.compress if compress else bytes)(b"\xef\xbb\xbf1\n2\n"))
    for source in (JsonArrayFileSource(array), JsonLinesSource(lines)):
        full = list(source.open(None))
        assert [x for x, _ in full] == [1, 2]
        assert all_items(source, roundtrip(full[0][1])) == [2]


def test_content_after_a_top_level_array_is_refused(tmp_path: Path) -> None:
    path = write(tmp_path / "t.json", "[1, 2]\n[3]\n")
    with pytest.raises(DecodeError, match="content after the top-level array"):
        all_items(JsonArrayFileSource(path))
    # Under a nested prefix the rest of the document is not read.
    nested = write(tmp_path / "n.json", '{"a": [1], "b": oops')
    assert all_items(JsonArrayFileSource(nested, prefix="a.item")) == [1]


def test_lone_surrogate_escapes_reach_the_encoder(tmp_path: Path) -> None:
    """The value keeps the lone surrogate; the encoder marks it (never a silent '?')."""
    for source in (
        JsonArrayFileSource(write(tmp_path / "s.json", '["a\\ud800b"]')),
        JsonLinesSource(write(tmp_path / "s.jsonl", '"a\\ud800b"\n')),
    ):
        assert all_items(source) == ["a\ud800b"]


# --- batch path: fill() builds the same pages as the pager's item loop --------------------


@settings(
    max_examples=30, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture]
)
@given(
    rows=st.lists(
        st.fixed_dictionaries({"id": st.integers(0, 10**6), "s": st.text(max_size=80)}), max_size=60
    ),
    max_bytes=st.integers(min_value=400, max_value=3000),
    max_items=st.none() | st.integers(min_value=1, max_value=9),
    kind=st.sampled_from(["array", "lines"]),
    seps=st.lists(st.sampled_from(["\n", "\r\n", "\n\n", "\n  \n"]), min_size=1),
    bom=st.booleans(),
    final_newline=st.booleans(),
)
def test_property_fill_builds_the_pagers_pages(
    tmp_path: Path,
    *,
    rows: list[Any],
    max_bytes: int,
    max_items: int | None,
    kind: str,
    seps: list[str],
    bom: bool,
    final_newline: bool,
) -> None:
    path = tmp_path / f"rows.{kind}"
    head = b"\xef\xbb\xbf" if bom else b""
    if kind == "array":
        path.write_bytes(head + json.dumps(rows, ensure_ascii=False).encode())
        source: Any = JsonArrayFileSource(path)
    else:
        lines = [json.dumps(r, ensure_ascii=False) for r in rows]
        text = "".join(line + seps[i % len(seps)] for i, line in enumerate(lines))
        if not final_newline:
            text = text.rstrip("\r\n ")
        path.write_bytes(head + text.encode())
        source = JsonLinesSource(path)
    limits = Limits(max_bytes, max_items=max_items)
    by_fill = pages_by_fill(source, limits)
    assert by_fill == pages_by_paginate(source, limits)
    assert [item for page in by_fill for item in page] == rows


#: Items that make a bulk run's guessed end wrong or its orjson reading inexact.
_BULK_TRAPS = st.sampled_from(
    [
        {"a": [{"b": 1}, {"c": [2, {"d": 3}]}]},  # commas after brackets inside an item
        [{"x": "},{"}, [{"y": "],["}]],
        "},{ ], [",  # a boundary's look-alike inside a string
        {"big": 123456789012345678901234567890},  # orjson would make it a float
        [-(2**70), 2**64],
        {"\u00e9\u20ac\U0001f600": "\u2028"},
        1e300,
        -0.0,
    ]
)


@settings(
    max_examples=60, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture]
)
@given(
    items=st.lists(st.one_of(any_json(max_leaves=12), _BULK_TRAPS), max_size=40),
    read_size=st.sampled_from([16, 97, 1000, 65536]),
    indent=st.sampled_from([None, 1]),
    surrogate=st.booleans(),
    max_bytes=st.integers(min_value=400, max_value=5000),
)
def test_property_fill_in_bulk_runs_gives_the_items_and_resumes_exactly(
    tmp_path: Path,
    *,
    items: list[Any],
    read_size: int,
    indent: int | None,
    surrogate: bool,
    max_bytes: int,
) -> None:
    # fill() parses most of each window in one orjson call and finds where an item ends
    # only where a page stops: the pages, and where each resumes, must be the scanner's.
    text = json.dumps(items, ensure_ascii=False, indent=indent)
    if surrogate and items:
        text = text[:-1] + ', {"s": "\\ud800"}]'  # orjson refuses the run; the scanner reads it
    path = tmp_path / "items.json"
    path.write_bytes(text.encode("utf-8", "surrogatepass"))
    source = JsonArrayFileSource(path, read_size=read_size)
    limits = Limits(max_bytes)
    by_fill = pages_by_fill(source, limits)
    assert by_fill == pages_by_paginate(source, limits)
    assert [item for page in by_fill for item in page] == json.loads(text)


@pytest.mark.parametrize("indent", [None, 2])
def test_fill_in_bulk_runs_across_windows_gives_the_scanners_pages(
    tmp_path: Path, indent: int | None
) -> None:
    # Many runs a window and many windows a file: pages stop inside runs, at their ends
    # and at the windows' edges, and each item that traps a run's guess or its orjson
    # reading recurs every few runs.
    traps: list[Any] = [
        {"a": [{"b": 1}, {"c": [2, {"d": 3}]}]},
        "},{ ], [",
        {"big": 123456789012345678901234567890},
        {"s": "é€😀" * 40},
        [{"x": "},{"}],
    ]
    items = [
        traps[i % 5] if i % 37 == 0 else {"id": i, "name": f"row {i}", "tags": ["a", "b"]}
        for i in range(6000)
    ]
    text = json.dumps(items, ensure_ascii=False, indent=indent)
    path = write(tmp_path / "many.json", text)
    for limits in (Limits(65536), Limits(3000)):
        by_fill = pages_by_fill(JsonArrayFileSource(path), limits)
        assert by_fill == pages_by_paginate(JsonArrayFileSource(path), limits)
        assert [item for page in by_fill for item in page] == items


def test_fill_keeps_exact_integers_and_deep_lines(tmp_path: Path) -> None:
    path = tmp_path / "odd.jsonl"
    path.write_bytes(b"1\n123456789012345678901234567890\n" + b"[" * 3000 + b"]" * 3000 + b"\n")
    (page,) = pages_by_fill(JsonLinesSource(path), Limits(65536))
    assert page[:2] == [1, 123456789012345678901234567890]
    assert isinstance(page[2], list)


@pytest.mark.parametrize("line", [b"1,2", b"[1],[2]", b'{"a":1},{"b":2}'])
def test_regression_a_line_of_two_values_is_refused_when_filled(
    tmp_path: Path, line: bytes
) -> None:
    # A page's lines are parsed by one orjson call, as one array's items: a line holding
    # two values must not pass as two lines.
    path = tmp_path / "two.jsonl"
    path.write_bytes(b"0\n" + line + b"\n3\n")
    with pytest.raises(DecodeError, match="line at byte 2"):
        pages_by_fill(JsonLinesSource(path), Limits(65536))


def test_regression_lines_that_join_into_values_are_refused_when_filled(tmp_path: Path) -> None:
    # One value spanning two lines and one line of three values: read as one array's
    # items, the counts agreed and the page served a made-up object and a string with a
    # comma for a line break, complete. Read line by line, the first line is refused.
    path = tmp_path / "joined.jsonl"
    path.write_bytes(b'{"a":1\n"b":2}\n"abc\ndef", 9, 10\n')
    for read in (all_items, lambda source: pages_by_fill(source, Limits(4096))):
        with pytest.raises(DecodeError, match="line at byte 0"):
            read(JsonLinesSource(path))


@settings(
    max_examples=150, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture]
)
@given(
    values=st.lists(any_json(max_leaves=6), min_size=3, max_size=8),
    split=st.tuples(st.integers(0, 7), st.integers(1, 10**6)) | st.none(),
    join=st.integers(0, 7) | st.none(),
)
def test_property_a_filled_page_is_each_lines_own_value(
    tmp_path: Path, values: list[Any], split: tuple[int, int] | None, join: int | None
) -> None:
    # A line broken inside its value (one line more) and two lines joined by a comma
    # (one fewer): a filled page serves what the item loop reads, value for value, or
    # refuses the same line.
    texts = [orjson.dumps(v) for v in values]
    if split is not None and len(texts[split[0] % len(texts)]) > 1:
        k = split[0] % len(texts)
        at = 1 + split[1] % (len(texts[k]) - 1)
        texts[k] = texts[k][:at] + b"\n" + texts[k][at:]
    seps = [b"\n"] * (len(texts) - 1)
    if join is not None:
        seps[join % len(seps)] = b","
    path = tmp_path / "cut.jsonl"
    path.write_bytes(b"".join(t + sep for t, sep in zip(texts, [*seps, b"\n"], strict=True)))
    try:
        expected: Any = all_items(JsonLinesSource(path))
    except DecodeError as exc:
        expected = ("error", exc.offset)
    try:
        pages = pages_by_fill(JsonLinesSource(path), Limits(65536))
        got: Any = [item for page in pages for item in page]
    except DecodeError as exc:
        got = ("error", exc.offset)
    assert got == expected


def test_regression_a_bad_line_after_the_page_does_not_stop_it(tmp_path: Path) -> None:
    # Every line of a chunk (about a page of bytes) was parsed before the page was
    # filled, so a bad line past the page and its look-ahead failed the page: the lines
    # before it could never be served.
    lines = [b'{"id":%d,"pad":"xxxxxxxxxxxxxxxxxxxx"}' % i for i in range(30)]
    lines[24] = b"this line is not JSON"
    path = tmp_path / "late.jsonl"
    path.write_bytes(b"\n".join(lines) + b"\n")
    limits = Limits(1000)
    builder = PageBuilder(limits)
    more, _ = JsonLinesSource(path).fill(builder, None)
    served = list(builder.finish(complete=not more, next_cursor="x" if more else None).items)
    looped = PageBuilder(limits)
    assert looped.fill(item for item, _ in JsonLinesSource(path).open(None))  # full first
    assert more
    assert served == list(looped.finish(complete=False, next_cursor="x").items)
    assert 0 < len(served) < 23
    # The pages go on to the bad line, and the page that reaches it fails as open() does.
    with pytest.raises(DecodeError, match=f"line at byte {sum(len(x) + 1 for x in lines[:24])}"):
        pages_by_fill(JsonLinesSource(path), limits)


@pytest.mark.parametrize("max_items", [1, 3])
def test_jsonl_fill_parses_the_hinted_lines_and_the_look_ahead_only(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, max_items: int
) -> None:
    # With max_items=3 a page of a large budget read and parsed a budget's worth of
    # lines (about 30 MB for three items); it now parses the hint plus one.
    from jsonbudget._sources import files

    path = tmp_path / "many.jsonl"
    path.write_bytes(b"".join(orjson.dumps({"id": i}) + b"\n" for i in range(5000)))
    parsed: list[int] = []
    parse_all = files._parse_all

    def counted(chunk: bytes, count: int) -> Any:
        parsed.append(count)
        return parse_all(chunk, count)

    monkeypatch.setattr(files, "_parse_all", counted)
    limits = Limits(1 << 25, max_items=max_items)
    pages = pages_by_fill(JsonLinesSource(path), limits)
    assert [item["id"] for page in pages for item in page] == list(range(5000))
    assert max(parsed) == max_items + 1
    assert sum(parsed) <= (max_items + 1) * len(pages)


def test_regression_a_terabyte_budget_reads_a_small_file(tmp_path: Path) -> None:
    # The budget went straight into read(n), which reserves n bytes: MemoryError.
    path = write(tmp_path / "small.jsonl", "1\n2\n3\n")
    out = bounded_run(
        f"""
        from jsonbudget import JsonLinesSource, Limits, MemoryCursorStore, Scope, paginate
        page = paginate(JsonLinesSource({str(path)!r}), scope=Scope("u", {{}}),
                        store=MemoryCursorStore(), limits=Limits(2**40))
        print(page.to_json().decode())
        """,
        memory=1 << 30,
    )
    assert json.loads(out) == {"items": [1, 2, 3], "complete": True, "next_cursor": None}
    with pytest.raises(LimitError, match="read_size"):
        JsonArrayFileSource(path, read_size=2**40)


def test_fill_reads_lines_at_orjsons_depth_limit(tmp_path: Path) -> None:
    # Read as one array, a line 1,024 levels deep is one level too deep for orjson: the
    # lines are then read one by one, and the page is the same.
    path = tmp_path / "deep.jsonl"
    deep = b"[" * 1024 + b"]" * 1024
    path.write_bytes(b"1\n" + deep + b"\n2\n")
    (page,) = pages_by_fill(JsonLinesSource(path), Limits(65536))
    assert page[0] == 1
    assert page[2] == 2
    depth, value = 0, page[1]
    while value:
        depth, value = depth + 1, value[0]
    assert depth == 1023  # the innermost list is empty


@pytest.mark.parametrize("newline", [b"\n", b""])
def test_fill_clips_a_line_longer_than_max_item_bytes(tmp_path: Path, newline: bytes) -> None:
    path = tmp_path / "long.jsonl"
    text = json.dumps("x" * 100).encode()
    path.write_bytes(b"1\n" + text + newline)
    ((one, clipped),) = pages_by_fill(JsonLinesSource(path, max_item_bytes=50), Limits(65536))
    assert one == 1
    assert clipped == Clipped(text[:50].decode(), 102, "bytes")
    fits = tmp_path / "fits.jsonl"
    fits.write_bytes(b"1\n" + b"2" * 50 + newline)  # 50 bytes without its newline
    assert pages_by_fill(JsonLinesSource(fits, max_item_bytes=50), Limits(65536)) == [
        [1, int("2" * 50)]
    ]


# --- load_json / scan_json: the one iterative, depth-bounded reader -----------------------

_big_ints = st.integers(min_value=-(10**40), max_value=10**40)


@settings(max_examples=200, deadline=None)
@given(value=any_json(), big=_big_ints, indent=st.booleans())
def test_property_load_json_reads_what_json_loads_reads(value: Any, big: int, indent: bool) -> None:
    doc = {"v": value, "big": big}
    text = json.dumps(doc, ensure_ascii=False, indent=2 if indent else None)
    expected = json.loads(text)
    assert load_json(text.encode()) == expected  # orjson or the exact parser
    assert load_json(text) == expected  # a str: read as its UTF-8 is
    assert scan_json(" " + text + " 7", 1) == (expected, len(text) + 1)


def test_regression_a_number_past_the_double_range_is_its_decimal_not_infinity() -> None:
    """`1e400` was read as float infinity, so `jsonbudget dump` and JSON Lines marked it
    `…[unencodable: inf]`, a value the JSON never held; ijson and the gate read it as the
    Decimal it is. Underflow stays 0.0, as in json.loads."""
    assert load_json(b"[1e400, -2.5E+999, 1e-400, 1.5]") == [
        Decimal("1e400"),
        Decimal("-2.5E+999"),
        0.0,
        1.5,
    ]
    assert bounded_dumps(load_json(b"1e400"), max_bytes=100) == (
        "…[unencodable: Decimal beyond the float range]".join('""').encode()
    )


def test_the_array_file_reads_a_number_past_the_double_range_as_load_json_does(
    tmp_path: Path,
) -> None:
    path = tmp_path / "big_numbers.json"
    doc = b'[1e400, {"a": -2E999, "b": 1.5}, 0.1, [' + b"1" * 40 + b".5]]"
    path.write_bytes(doc)
    source = JsonArrayFileSource(path)
    items = [item for item, _ in source.open(None)]
    assert items == load_json(doc)
    assert items[:2] == [Decimal("1e400"), {"a": Decimal("-2E999"), "b": 1.5}]
    assert read_in_pages(source, [1]) == items  # resumed page by page


def test_load_json_cuts_at_max_depth_and_counts_children() -> None:
    assert load_json(b"[[1, [2, 3]], {}]", max_depth=1) == [
        [1, "…[depth: list of 2 items]"],
        {},
    ]
    assert load_json(b'{"a": {"b": 1, "c": [4]}}', max_depth=0) == {
        "a": "…[depth: object with 2 keys]"
    }


@pytest.mark.parametrize(
    ("doc", "message"),
    [
        (b"[1, 2", "Expecting ',' delimiter or a closing bracket"),
        (b"[1,]", "Expecting value"),
        (b'{"a" 1}', "Expecting ':' delimiter"),
        (b"[1] [2]", "content after the value"),
        (b"[NaN]", "NaN is not valid JSON"),
        (b"-Infinity", "-Infinity is not valid JSON"),
        (b"[}", "Expecting value or ']'"),
        (b"[[1]}", "mismatched closing bracket"),
        (b"\xff", "not valid UTF-8"),
        (b"", "Expecting value"),
    ],
)
def test_load_json_errors_are_decode_errors(doc: bytes, message: str) -> None:
    with pytest.raises(DecodeError, match=re.escape(message)):
        load_json(doc)


def test_load_json_of_a_deep_mixed_document_is_bounded() -> None:
    """Regression (for the result guards): 50,000 levels raised MemoryError through ijson."""
    out = bounded_run(
        "from jsonbudget._sources.jsonread import load_json\n"
        "v = load_json(b'[' * 50_000 + b'{\"k\": 1}' + b']' * 50_000)\n"
        "d = 0\n"
        "while isinstance(v, list): v, d = v[0], d + 1\n"
        "print(d, v)\n",
        memory=250 << 20,
    )
    assert out == f"{MAX_DEPTH + 1} …[depth: list of 1 items]\n"


# --- items longer than max_item_bytes: skipped over, clipped at their place ---------------

_LIMIT = 1000


def _big(k: int, n: int) -> Any:
    # Escaped quotes and backslashes and brackets inside the string: the skip must not
    # end the item at any of them.
    return {"id": k, "body": 'x\\"]},[{' * n}


#: Where the oversized items stand among ten small ones: the indexes of the big ones.
_PLACES = {"first": [0], "middle": [5], "last": [10], "several": [3, 4, 5], "all": [0, 1]}


def _oversized_file(tmp_path: Path, kind: str, places: list[int], *, compress: bool,
                    nested: bool = False) -> tuple[Path, list[Any]]:  # fmt: skip
    small = [{"id": k, "s": "é" * (k % 3)} for k in range(10)]
    items: list[Any] = list(small)
    for at in places:
        items.insert(at, _big(100 + at, 300 + at))
    if kind == "lines":
        text = "".join(json.dumps(x, ensure_ascii=False) + "\n" for x in items)
        return write(tmp_path / "o.jsonl", text, compress=compress), items
    doc: Any = {"x": [1, {"y": "]"}], "results": items} if nested else items
    text = json.dumps(doc, ensure_ascii=False, indent=1)
    return write(tmp_path / "o.json", text, compress=compress), items


def _source(path: Path, kind: str, *, nested: bool = False) -> Any:
    if kind == "lines":
        return JsonLinesSource(path, max_item_bytes=_LIMIT)
    prefix = "results.item" if nested else "item"
    return JsonArrayFileSource(path, prefix=prefix, read_size=97, max_item_bytes=_LIMIT)


def _text(item: Any, kind: str, *, nested: bool = False) -> bytes:
    """The item's JSON text as the file holds it."""
    if kind == "lines":
        return json.dumps(item, ensure_ascii=False).encode()
    indent = "\n  " if nested else "\n "
    return json.dumps(item, ensure_ascii=False, indent=1).replace("\n", indent).encode()


def _check_served(
    served: list[Any], items: list[Any], kind: str, head: int, *, nested: bool = False
) -> None:
    """Small items whole, each big one clipped (its first bytes, its exact size), in order."""
    assert len(served) == len(items)
    for got, item in zip(served, items, strict=True):
        text = _text(item, kind, nested=nested)
        if len(text) <= _LIMIT:
            assert got == item
            continue
        assert isinstance(got, Clipped), got
        assert got.length == len(text)
        assert got.unit == "bytes"
        shown = got.head.encode() if isinstance(got.head, str) else got.head
        assert text.startswith(shown)
        assert len(shown) == min(head, _LIMIT)  # ASCII: the cut falls between characters


def _check_rendered(page: Any, max_bytes: int) -> None:
    """The page's JSON fits, and shows each clipped item as a cut string, its count exact."""
    data = page.to_json()
    assert len(data) <= max_bytes
    for item, rendered in zip(page.items, json.loads(data)["items"], strict=True):
        if isinstance(item, Clipped):
            shown, marker = rendered.split("\u2026[truncated: ")
            assert item.head.startswith(shown)
            assert marker == f"{item.length - len(shown.encode())} more bytes]"


@pytest.mark.parametrize("place", sorted(_PLACES))
@pytest.mark.parametrize("compress", [False, True])
@pytest.mark.parametrize("kind", ["array", "lines"])
def test_regression_an_item_over_max_item_bytes_no_longer_stops_the_file(
    tmp_path: Path, kind: str, compress: bool, place: str
) -> None:
    # It raised DecodeError, and the page before it never came either (the look-ahead
    # reached it): nothing past that point could be paged.
    path, items = _oversized_file(tmp_path, kind, _PLACES[place], compress=compress)
    source = _source(path, kind)
    opened = source.open(None)
    got = [item for item, _ in opened]
    for item, value in zip(items, got, strict=True):
        text = _text(item, kind)
        if len(text) <= _LIMIT:
            assert value == item
        else:
            assert value == Clipped(text[:_LIMIT].decode(), len(text), "bytes")
    limits = Limits(700)
    store, scope = MemoryCursorStore(), Scope("t", {})
    pages, cursor = [], None
    while True:
        page = paginate(source, scope=scope, cursor=cursor, store=store, limits=limits)
        _check_rendered(page, limits.max_bytes)
        pages.append(list(page.items))
        cursor = page.next_cursor
        if cursor is None:
            break
    assert pages_by_fill(source, limits) == pages
    _check_served([x for page in pages for x in page], items, kind, limits.max_bytes)


@pytest.mark.parametrize("compress", [False, True])
def test_an_oversized_item_under_a_nested_prefix_is_clipped(tmp_path: Path, compress: bool) -> None:
    path, items = _oversized_file(tmp_path, "array", [0, 6], compress=compress, nested=True)
    source = _source(path, "array", nested=True)
    _check_served(read_in_pages(source, [1, 2]), items, "array", _LIMIT, nested=True)
    pages = pages_by_fill(source, Limits(65536))
    _check_served([x for page in pages for x in page], items, "array", _LIMIT, nested=True)


@pytest.mark.parametrize("compress", [False, True])
@pytest.mark.parametrize("kind", ["array", "lines"])
def test_resume_just_before_and_just_after_an_oversized_item(
    tmp_path: Path, kind: str, compress: bool
) -> None:
    path, items = _oversized_file(tmp_path, kind, [5], compress=compress)
    source = _source(path, kind)
    positions = [pos for _, pos in source.open(None)]
    everything = all_items(source)
    for at in (4, 5):  # the position before the big item, and the one after it
        assert all_items(source, roundtrip(positions[at - 1])) == everything[at:]
        builder = PageBuilder(Limits(65536))
        more, _ = source.fill(builder, roundtrip(positions[at - 1]))
        assert not more
        _check_served(list(builder.finish(complete=True).items), items[at:], kind, 65536)
    assert positions[5]["c"] in "}\n"


@pytest.mark.parametrize("kind", ["array", "lines"])
def test_a_scalar_and_a_string_item_over_max_item_bytes(tmp_path: Path, kind: str) -> None:
    items: list[Any] = [1, "s" * 3000, int("7" * 3000), [[[["deep"]]]] * 400, 2]
    texts = [json.dumps(x).encode() for x in items]
    if kind == "lines":
        path = tmp_path / "s.jsonl"
        path.write_bytes(b"\r\n".join(texts))  # CR LF, no final newline
        source: Any = JsonLinesSource(path, max_item_bytes=_LIMIT)
        sizes = [len(t) + 1 for t in texts[:-1]] + [len(texts[-1])]  # CR counted
    else:
        path = tmp_path / "s.json"
        path.write_bytes(b"[" + b",".join(texts) + b"]")
        source = JsonArrayFileSource(path, read_size=64, max_item_bytes=_LIMIT)
        sizes = [len(t) for t in texts]
    got = all_items(source)
    assert got[0] == 1
    assert got[-1] == 2
    assert [c.length for c in got[1:-1]] == sizes[1:-1]
    assert [c.head for c in got[1:-1]] == [t[:_LIMIT].decode() for t in texts[1:-1]]


def test_an_array_that_ends_inside_an_oversized_item_is_a_decode_error(tmp_path: Path) -> None:
    path = write(tmp_path / "cut.json", '[1, {"a": "' + "x" * 5000)
    with pytest.raises(DecodeError, match="ends inside an item"):
        all_items(JsonArrayFileSource(path, read_size=100, max_item_bytes=_LIMIT))


@pytest.mark.parametrize("option", [", max_item_bytes=65536", ""], ids=["64KiB", "default"])
@pytest.mark.parametrize("kind", ["array", "lines"])
def test_a_200_mb_item_is_skipped_in_bounded_memory(tmp_path: Path, kind: str, option: str) -> None:
    # Regression (the default 64 MiB): the array window doubled past max_item_bytes and
    # kept the old window through each refill, about 5x max_item_bytes at its peak (a
    # MemoryError under this limit); now about twice, as a line's read.
    path = tmp_path / ("big.json" if kind == "array" else "big.jsonl")
    with open(path, "wb") as f:
        f.write(b'[{"id":0},\n{"id":1,"body":"' if kind == "array" else b'{"id":0}\n{"body":"')
        block = b'ab\\"c' * 10_000
        for _ in range(200_000_000 // len(block)):
            f.write(block)
        f.write(b'"},\n{"id":2}]' if kind == "array" else b'"}\n{"id":2}\n')
    cls = "JsonArrayFileSource" if kind == "array" else "JsonLinesSource"
    out = bounded_run(
        f"""
from jsonbudget import {cls}
source = {cls}({str(path)!r}{option})
{PAGE_ALL_4K}print(items[0], len(items), items[2], items[1].length, len(items[1].head))
""",
        memory=300 << 20,
        timeout=120,
    )
    size = path.stat().st_size - (len(b'[{"id":0},\n') + len(b',\n{"id":2}]') if kind == "array"
                                   else len(b'{"id":0}\n') + len(b'\n{"id":2}\n'))  # fmt: skip
    assert out.split() == ["{'id':", "0}", "3", "{'id':", "2}", str(size), "4096"]


@pytest.mark.parametrize("limit", [1000, 40_000])
@pytest.mark.parametrize(
    "after", ["4", '{"k": "' + "y" * 300 + '"}, 4', '"z", [5]'], ids=["int", "object", "str"]
)
def test_regression_an_item_over_max_item_bytes_is_clipped_wherever_it_lies(
    tmp_path: Path, limit: int, after: str
) -> None:
    # Regression: an item longer than max_item_bytes that lay whole in the window was
    # parsed and served as itself, or clipped, depending on what followed it.
    big = '"' + "x" * (limit + 10) + '"'
    path = write(tmp_path / "a.json", f"[1, {big}, {after}]")
    source = JsonArrayFileSource(path, max_item_bytes=limit)
    rest = orjson.loads(f"[{after}]")
    assert all_items(source) == [1, Clipped(big[:limit], limit + 12, "bytes"), *rest]
    (filled,) = [item for page in pages_by_fill(source, Limits(4096)) for item in page][1:2]
    assert isinstance(filled, Clipped)
    assert filled.length == limit + 12


@settings(max_examples=200, deadline=None)
@given(
    items=st.lists(
        st.one_of(
            st.integers(-(10**12), 10**12),
            st.text(alphabet='ab\\"é€', max_size=30),
            st.dictionaries(st.text(alphabet="kq", max_size=3), st.integers(0, 99), max_size=3),
            st.lists(st.integers(0, 9), max_size=6),
        ),
        max_size=12,
    ),
    max_item=st.integers(1, 40),
    read_size=st.integers(1, 80),
    spaces=st.sampled_from([", ", ",", " ,\n "]),
)
def test_regression_an_item_is_given_or_clipped_by_its_size_alone(
    items: list[Any], max_item: int, read_size: int, spaces: str
) -> None:
    # Regression: an item that fits, ending within 16 characters of the window's edge,
    # was read again with the text after it held against max_item_bytes: a valid file
    # raised "a value is larger than max_item_bytes" ([{}  , -5] with a limit of 7).
    texts = [orjson.dumps(x) for x in items]
    with tempfile.TemporaryDirectory() as tmp:
        path = Path(tmp) / "a.json"
        path.write_bytes(b"[" + spaces.encode().join(texts) + b"]")
        source = JsonArrayFileSource(path, read_size=read_size, max_item_bytes=max_item)
        got = all_items(source)
    assert len(got) == len(items)
    for item, text, value in zip(items, texts, got, strict=True):
        if len(text) <= max_item:
            assert value == item
        else:
            assert value == Clipped(text[:max_item].decode("utf-8", "ignore"), len(text), "bytes")


def test_regression_an_item_too_long_to_hold_is_never_parsed_whole(tmp_path: Path) -> None:
    # Each time the window doubled, the item was parsed again from its start: the C
    # scanner built the objects of all the text held (about 20 bytes of objects a byte of
    # "{},"), up to max_item_bytes of it, before the item was passed over (194 MiB for an
    # 8 MiB limit). Its end is now found without parsing once the window holds 256 KiB.
    path = tmp_path / "dense.json"
    path.write_bytes(b"[1, [" + b"{}," * 2_000_000 + b"0], 2]")
    out = bounded_run(
        f"""
        import json
        from jsonbudget import JsonArrayFileSource
        def hwm():
            with open("/proc/self/status") as f:
                return next(int(l.split()[1]) for l in f if l.startswith("VmHWM"))
        before = hwm()
        source = JsonArrayFileSource({str(path)!r}, max_item_bytes=4 << 20)
        items = [item for item, _ in source.open(None)]
        print(json.dumps({{"kib": hwm() - before, "first": items[0], "last": items[2],
                           "clipped": type(items[1]).__name__, "size": items[1].length}}))
        """,
        timeout=120,
    )
    got = json.loads(out)
    assert got["first"] == 1
    assert got["last"] == 2
    assert got["clipped"] == "Clipped"
    assert got["size"] == 6_000_003  # "[", 2,000,000 times "{},", then "0]"
    assert got["kib"] < 24 << 10  # the window's text as it grows, and 256 KiB parsed


@pytest.mark.parametrize("kind", ["array", "lines"])
def test_regression_a_spilled_item_cut_by_its_source_says_so(tmp_path: Path, kind: str) -> None:
    """An item past max_item_bytes was spilled as a head cut to the page's budget (700 of
    5,010 bytes), and the page said "spilled" with no word of the cut: the item is now
    kept up to max_item_bytes, and what its source left out is reported."""
    from jsonbudget import SpillStore

    item = b'{"k":"' + b"z" * 5000 + b'"}'
    path = tmp_path / ("items.json" if kind == "array" else "items.jsonl")
    path.write_bytes(b"[" + item + b", 1]" if kind == "array" else item + b"\n1\n")
    source: Any = (JsonArrayFileSource if kind == "array" else JsonLinesSource)(
        path, max_item_bytes=2000
    )
    spill = SpillStore(tmp_path / "spill")
    page = paginate(source, scope=Scope("u", {}), store=MemoryCursorStore(),
                    limits=Limits(700), oversized="spill", spill_store=spill)  # fmt: skip
    assert page.items[1] == 1
    (spilled,) = page.oversized
    assert spilled.ref is not None
    held = orjson.loads(spill.read(spilled.ref, 0, 1 << 20))
    # The item's text as far as the source read it (2,000 bytes), marked where it stops.
    assert held == item[:2000].decode() + f"…[truncated: {len(item) - 2000} more bytes]"
    assert [(t.path, t.kind, t.omitted, t.unit) for t in page.truncations] == [
        ("/items/0", "item", None, "bytes"),
        ("/items/0", "string", len(item) - 2000, "bytes"),
    ]
    assert len(page.to_json()) <= 700


@pytest.mark.skipif(sys.platform == "darwin", reason="macOS file names must be UTF-8")
def test_regression_a_file_named_in_bytes_that_are_not_utf8_pages(tmp_path: Path) -> None:
    """The path went into the cursor's scope as Python holds it, with a lone surrogate,
    which the scope refuses: such a file could not be paged at all."""
    named = os.fsdecode(os.fsencode(tmp_path) + b"/caf\xe9.json")
    Path(named).write_bytes(b"[1, 2, 3]")
    source = JsonArrayFileSource(named)
    assert source.describe()["path_bytes"] == base64.b64encode(os.fsencode(named)).decode()
    store, scope, limits = MemoryCursorStore(), Scope("u"), Limits(400, max_items=2)
    first = paginate(source, scope=scope, store=store, limits=limits)
    rest = paginate(source, scope=scope, store=store, limits=limits, cursor=first.next_cursor)
    assert [*first.items, *rest.items] == [1, 2, 3]
    # A name of text that spells those bytes out is another file, described apart.
    spelled = tmp_path / "caf\\xe9.json"
    spelled.write_bytes(b"[1, 2, 3]")
    assert JsonArrayFileSource(spelled).describe() != source.describe()


@pytest.mark.parametrize("way", ["open", "paginate"])
@pytest.mark.parametrize("kind", ["array", "lines"])
def test_regression_an_endless_item_in_a_pipe_ends_with_an_error(
    tmp_path: Path, kind: str, way: str
) -> None:
    """A line (or string item) that never ends, from a pipe or a device, was passed over
    forever. Where the stream's end is not known, passing over stops after
    MAX_PASS_OVER bytes with a DecodeError at the item's start."""
    fifo = tmp_path / "endless"
    os.mkfifo(fifo)
    head = b'[1, "' if kind == "array" else b"1\n"
    out = bounded_run(
        f"""
        import threading
        from jsonbudget import (JsonArrayFileSource, JsonLinesSource, Limits,
                                MemoryCursorStore, Scope, paginate)
        from jsonbudget.errors import DecodeError
        written = 0
        def write():
            global written
            block = b"a" * 65536
            try:
                with open({str(fifo)!r}, "wb") as f:
                    f.write({head!r})
                    while True:
                        f.write(block)
                        written += len(block)
            except BrokenPipeError:
                pass
        writer = threading.Thread(target=write)
        writer.start()
        cls = JsonArrayFileSource if {kind!r} == "array" else JsonLinesSource
        source = cls({str(fifo)!r}, max_item_bytes=1000)
        try:
            if {way!r} == "open":
                for _ in source.open(None):
                    pass
            else:
                paginate(source, scope=Scope("t", {{}}), store=MemoryCursorStore(),
                         limits=Limits(4096))
        except DecodeError as exc:
            error = exc
        writer.join()
        print("offset", error.offset)
        print(error)
        print("written MiB", written >> 20)
        """,
        timeout=120,
    )
    lines = out.splitlines()
    assert lines[0] == f"offset {len(head) - (1 if kind == 'array' else 0)}"
    assert "longer than 268435456 bytes in a stream whose end is not known" in lines[1]
    written = int(lines[2].split()[-1])
    assert 256 <= written < 256 + 8  # the cap and a few reads in flight, not more


def test_regression_a_gzip_item_is_passed_over_only_so_far(tmp_path: Path) -> None:
    """A gzip file that inflates to one endless-looking line was passed over to its end
    (a small file can hold gigabytes): gzip streams stop at MAX_PASS_OVER too."""
    path = tmp_path / "bomb.jsonl.gz"
    with gzip.open(path, "wb", compresslevel=1) as f:
        f.write(b"1\n")
        block = b"a" * (1 << 20)
        for _ in range(300):  # 300 MiB inflated, past the 256 MiB cap
            f.write(block)
        f.write(b"\n2\n")
    assert path.stat().st_size < 2 << 20
    with pytest.raises(DecodeError, match="268435456 bytes") as caught:
        all_items(JsonLinesSource(path, max_item_bytes=1000))
    assert caught.value.offset == 2


@pytest.mark.parametrize("kind", ["array", "lines"])
def test_regression_a_file_rewritten_with_its_size_and_mtime_is_refused(
    tmp_path: Path, kind: str
) -> None:
    """A file rewritten in place at the same size, its mtime put back (cp -p, rsync -a,
    tar x) and the byte before the offset the same, passed the check: the array source
    served [5, 6] from inside a string of the new file, JSON Lines served the new file's
    lines as the old one's continuation. The file's ctime (and inode) now count too."""
    if kind == "array":
        old, new = '[{"a":1}, {"b":2}, {"c":3}, {"d":4}]', '["aaaaaaaaaaaaaa}, 5, 6, 7, 8  "   ]'
        source: Any = JsonArrayFileSource(write(tmp_path / "a.json", old))
    else:
        old, new = (
            "".join(f'{{"id":{i}}}\n' for i in range(1, 5)),
            "".join(f'{{"id":{i}}}\n' for i in (7, 8, 9, 0)),
        )
        source = JsonLinesSource(write(tmp_path / "a.jsonl", old))
    path = tmp_path / ("a.json" if kind == "array" else "a.jsonl")
    assert len(old) == len(new)
    first = take(source, None, 2)
    position = roundtrip(first[-1][1])
    st = path.stat()
    path.write_text(new)
    os.utime(path, ns=(st.st_atime_ns, st.st_mtime_ns))
    assert path.stat().st_mtime_ns == st.st_mtime_ns
    with pytest.raises(InvalidCursor, match="changed"):
        all_items(source, position)
    with pytest.raises(InvalidCursor, match="changed"):
        pages_by_fill_from(source, Limits(4096), position)


@pytest.mark.parametrize("kind", ["array", "lines"])
def test_regression_a_pipes_cursor_says_a_pipe_cannot_be_resumed(tmp_path: Path, kind: str) -> None:
    """The cursor of a page read from a pipe was refused on the next page as "the file
    changed since the cursor was minted", which was untrue: a pipe cannot be read again."""
    import threading

    fifo = tmp_path / "pipe"
    os.mkfifo(fifo)
    body = b"[1, 2, 3, 4]" if kind == "array" else b"1\n2\n3\n4\n"
    cls: Any = JsonArrayFileSource if kind == "array" else JsonLinesSource

    def feed() -> None:
        with contextlib.suppress(BrokenPipeError), open(fifo, "wb") as f:
            f.write(body)  # the reader may close first: nothing more to give it

    writer = threading.Thread(target=feed)
    writer.start()
    try:
        got = take(cls(fifo), None, 2)
        position = roundtrip(got[-1][1])
    finally:
        writer.join(timeout=30)
    assert not writer.is_alive()
    # Regression: with no writer left (the usual case), opening the pipe to check the
    # cursor waited for one forever. It is refused at once, in a child so a hang fails.
    code = (
        f"from jsonbudget import {cls.__name__}\n"
        "from jsonbudget.errors import InvalidCursor\n"
        "try:\n"
        f"    list({cls.__name__}({str(fifo)!r}).open({position!r}))\n"
        "except InvalidCursor as exc:\n"
        "    print('refused:', exc)\n"
    )
    out = bounded_run(code, timeout=30)
    assert out.startswith("refused: the input is not a regular file")


@pytest.mark.parametrize("read_size", [65536, 8192, 4096, 64])
@pytest.mark.parametrize(
    "doc",
    [
        '{"meta": "' + "m" * 5000 + '", "results": [1, 2]}',
        '{"meta": [' + ",".join(["1"] * 3000) + '], "results": [1, 2]}',
        '{"' + "k" * 5000 + '": 1, "results": [1, 2]}',
    ],
    ids=["string", "array", "key"],
)
def test_regression_a_long_member_before_the_prefix_is_refused_whatever_the_read_size(
    tmp_path: Path, doc: str, read_size: int
) -> None:
    # A 5,000-byte sibling under max_item_bytes=100 was dropped when the first read held
    # it whole and refused when it did not, and the refusal's class was the private
    # _TooLong: the same file and limits passed or failed by an I/O setting.
    path = tmp_path / "x.json"
    path.write_text(doc)
    source = JsonArrayFileSource(
        path, prefix="results.item", max_item_bytes=100, read_size=read_size
    )
    with pytest.raises(DecodeError, match="larger than max_item_bytes=100") as caught:
        list(source.open(None))
    assert type(caught.value) is DecodeError
    assert caught.value.offset == (1 if doc.startswith('{"k') else 9)  # where it starts
    short = JsonArrayFileSource(path, prefix="results.item", read_size=read_size)
    assert [item for item, _ in short.open(None)] == [1, 2]


# --- where a long value ends: value_end (compiled) and value_end_py (its twin) ----------

#: Text that makes or breaks a value's structure, and characters of every str width.
_END_TEXT = st.lists(
    st.sampled_from(['"', "\\", "[", "]", "{", "}", ",", " ", "\n", "1", "a", "é", "€", "😀"])
    | st.integers(1, 9).map(lambda n: "\\" * n),
    min_size=1,
    max_size=40,
).map("".join)


def _compiled_value_end() -> Any:
    """The compiled walk; the test is skipped where it is not built (the twin run)."""
    return pytest.importorskip("jsonbudget._sources._numbers").value_end


def test_the_compiled_value_end_is_used_where_it_is_built() -> None:
    from jsonbudget._sources import files

    try:
        from jsonbudget._sources import _numbers
    except ImportError:  # the run on the Python twins
        assert files.value_end is files.value_end_py
    else:
        assert files.value_end is _numbers.value_end


@settings(max_examples=1000, deadline=None)
@given(text=_END_TEXT, data=st.data())
def test_value_end_compiled_and_python_agree(text: str, data: Any) -> None:
    from jsonbudget._sources import files

    compiled = _compiled_value_end()
    state, start = files._value_start(text[0])
    cuts = sorted(data.draw(st.lists(st.integers(start, len(text)), max_size=4)))
    bounds = [start, *cuts, len(text)]
    # The twin walks its regexes a few characters at a time here (64 KiB in use), so
    # its own pieces meet escapes and strings at every place.
    step = data.draw(st.integers(1, 8))
    with pytest.MonkeyPatch.context() as mp:
        mp.setattr(files, "_VE_PIECE", step)
        states = {"str c": state, "str py": state, "bytes c": state, "bytes py": state}
        for a, b in itertools.pairwise(bounds):
            piece = text[a:b]
            raw = piece.encode("utf-8", "surrogatepass")
            got = {
                "str c": compiled(piece, 0, states["str c"]),
                "str py": files.value_end_py(piece, 0, states["str py"]),
                "bytes c": compiled(raw, 0, states["bytes c"]),
                "bytes py": files.value_end_py(raw, 0, states["bytes py"]),
            }
            # The same end and state whichever walk; in bytes, the end of the same
            # character (every byte of a character past ASCII is 0x80 or more).
            at = got["str c"][0]
            byte_at = -1 if at < 0 else len(piece[:at].encode("utf-8"))
            assert got["str py"] == got["str c"], (piece, step)
            assert got["bytes c"] == got["bytes py"] == (byte_at, got["str c"][1]), piece
            if at >= 0:
                break
            states = {k: v[1] for k, v in got.items()}
        # One call over the whole text from *start* gives what the pieces gave.
        whole = compiled(text, start, state)
        assert files.value_end_py(text, start, state) == whole
        assert whole[0] == (a + at if at >= 0 else -1)


@settings(max_examples=300, deadline=None)
@given(value=any_json(), gap=st.sampled_from(["", " ", "\n\t "]))
def test_value_end_finds_where_json_ends(value: Any, gap: str) -> None:
    # Whichever walk is in use (the twin in the run without the extensions).
    from jsonbudget._sources import files

    text = json.dumps(value, ensure_ascii=False)
    doc = "[" + text + gap + ", 1]"
    state, fed = files._value_start(text[0])
    at, _ = files.value_end(doc, 1 + fed, state)
    assert at == 1 + len(text)
    raw = doc.encode("utf-8", "surrogatepass")
    assert files.value_end(raw, 1 + fed, state)[0] == len(
        raw[: 1 + len(text.encode("utf-8", "surrogatepass"))]
    )


def test_value_end_refuses_what_is_not_its_arguments() -> None:
    compiled = _compiled_value_end()
    with pytest.raises(TypeError, match="value_end"):
        compiled(bytearray(b"[]"), 0, 4)
    with pytest.raises(TypeError, match="value_end"):
        compiled("[]", 0)
    for start, state in [(-1, 4), (3, 4), (0, -1), (0, 1)]:  # 1: escaped, not in a string
        with pytest.raises(ValueError, match="out of range"):
            compiled("[]", start, state)
    assert compiled("", 0, 4) == (-1, 4)
    assert compiled('"\\', 1, 2) == (-1, 3)  # a backslash ends the piece: escaped
    assert compiled('"', 0, 3) == (-1, 2)  # the escaped quote does not close it
    assert compiled('"x"', 0, 3) == (3, 0)  # the next one does


def _regex_steps(run: Any) -> int:
    """How many regex searches and matches *run()* makes (a Python step each)."""
    steps = 0

    def profile(frame: Any, event: str, arg: Any) -> None:
        nonlocal steps
        if event == "c_call" and getattr(arg, "__qualname__", "") in (
            "Pattern.search",
            "Pattern.match",
        ):
            steps += 1

    before = sys.getprofile()
    sys.setprofile(profile)
    try:
        run()
    finally:
        sys.setprofile(before)
    return steps


@pytest.mark.parametrize("max_item_bytes", [64 << 20, 300_000], ids=["parsed", "clipped"])
def test_regression_a_long_items_end_is_found_without_a_python_step_a_bracket(
    tmp_path: Path, max_item_bytes: int
) -> None:
    """Regression: the end of an item longer than 256 KiB was found by a regex walk with
    a Python step per bracket or string (`_ValueEnd.feed`), before the item was parsed
    or, past max_item_bytes, instead: 5 s of a 6.8 s page for 16 MB of ``{},``, 22-50 s
    for an item passed over. The compiled walk takes a call a read."""
    from jsonbudget._sources import files

    if getattr(files, "value_end", None) is getattr(files, "value_end_py", False):
        pytest.skip("the Python twin walks a step a bracket: the compiled walk is tested")
    big = "[" + '{},"a\\"b",' * 60_000 + "{}]"  # 600 KB: 240,000 brackets and strings
    path = tmp_path / "big.json"
    path.write_text('[{"id":0},' + big + ',{"id":2}]')
    source = JsonArrayFileSource(path, max_item_bytes=max_item_bytes)
    store, scope, limits = MemoryCursorStore(), Scope("u", {}), Limits(4096)
    pages: list[Any] = []

    def two_pages() -> None:
        pages.append(paginate(source, scope=scope, store=store, limits=limits))
        cursor = pages[0].next_cursor
        pages.append(paginate(source, scope=scope, store=store, limits=limits, cursor=cursor))

    items: list[Any] = []
    assert _regex_steps(lambda: items.extend(source.open(None))) < 100  # was 240,000
    assert _regex_steps(two_pages) < 200
    parsed = max_item_bytes > len(big)
    head = big if parsed else Clipped(big[:max_item_bytes], len(big), "bytes")
    assert [item for item, _ in items] == [
        {"id": 0},
        json.loads(big) if parsed else head,
        {"id": 2},
    ]
    assert items[1][1]["o"] == len('[{"id":0},' + big)  # where the item ends, in bytes
    assert [len(page.items) for page in pages] == [1, 1]  # page 2: the long item, cut


@pytest.mark.parametrize("after", ["]", ',{"id":2}]'])
def test_regression_an_item_ending_near_the_windows_edge_is_parsed_once(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, after: str
) -> None:
    """Regression: an item longer than the window, whose end `_grow` had just read, ends
    near the window's edge, where a value is read again in case a number goes on: it was
    parsed twice, the first parse held the while (a page over 16 MB of ``{},`` peaked at
    770 MB instead of 390 MB). Only a value ending in a digit or a letter is read again."""
    from jsonbudget._sources import files

    parses: list[int] = []
    make = json.scanner.make_scanner  # what files.py calls

    def counting(decoder: Any) -> Any:
        scan = make(decoder)

        def counted(text: str, pos: int) -> Any:
            obj, end = scan(text, pos)
            parses.append(end - pos)
            return obj, end

        return counted

    monkeypatch.setattr(files, "make_scanner", counting)
    big = "[" + "{}," * 200_000 + "{}]"  # 600 KB: past the window's 256 KiB re-reads
    path = tmp_path / "big.json"
    path.write_text('[{"id":0},' + big + after)
    source = JsonArrayFileSource(path)
    items = [item for item, _ in source.open(None)]
    assert items[:2] == [{"id": 0}, [{}] * 200_001]
    assert parses.count(len(big)) == 1, "parsed whole once"
    # A page whose look-ahead is the long item parses it once too.
    parses.clear()
    builder = PageBuilder(Limits(4096))
    assert source.fill(builder, None)[0] is True
    assert parses.count(len(big)) == 1
    # A number ending near the edge is still read again, and read whole.
    path.write_text("[" + "1," * 200_000 + "12345678901234567890123]")
    assert [item for item, _ in JsonArrayFileSource(path, read_size=4096).open(None)][-1] == (
        12345678901234567890123
    )


# Numbers past a Decimal's range: an exponent RFC 8259 allows, which Decimal() refuses.
_PAST_DECIMAL_DOC = (
    b'[1, 1e99999999999999999999, {"a": -1E+99999999999999999999}, 0.1e99999999999999999999, '
    + b"1" * 300
    + b".5e99999999999999999999, 1e-99999999999999999999, 2]"
)
_PAST_DECIMAL_ITEMS = [
    1,
    Decimal("1E+999999999999999999"),
    {"a": Decimal("-1E+999999999999999999")},
    Decimal("1E+999999999999999999"),
    Decimal("1E+999999999999999999"),
    0.0,
    2,
]
# Checked here and again in a child without the compiled modules.
_PAST_DECIMAL_CHECK = """
import decimal, orjson
from decimal import Decimal
from pathlib import Path
from jsonbudget import JsonArrayFileSource, JsonLinesSource, Limits, MemoryCursorStore, Scope
from jsonbudget import paginate
from jsonbudget._sources.jsonread import load_json
from tests.test_file_sources import _PAST_DECIMAL_DOC as doc, _PAST_DECIMAL_ITEMS as want

def check(tmp):
    assert load_json(doc) == want
    assert load_json(doc.decode()) == want
    # A thread context that does not trap InvalidOperation made Decimal() a NaN.
    with decimal.localcontext() as ctx:
        ctx.traps[decimal.InvalidOperation] = False
        assert load_json(b"[-1e99999999999999999999]") == [Decimal("-1E+999999999999999999")]
    array = Path(tmp) / "past.json"
    array.write_bytes(doc)
    lines = Path(tmp) / "past.jsonl"
    lines.write_bytes(doc[1:-1].replace(b", ", b"\\n") + b"\\n")
    marker = "…[unencodable: Decimal beyond the float range]"
    for source in (JsonArrayFileSource(array), JsonArrayFileSource(array, read_size=7),
                   JsonLinesSource(lines)):
        assert [item for item, _ in source.open(None)] == want
        page = paginate(source, scope=Scope("u", {}), store=MemoryCursorStore(),
                        limits=Limits(4096))
        assert list(page.items) == want
        shown = orjson.loads(page.data)["items"]
        assert shown[1] == shown[3] == shown[4] == shown[2]["a"] == marker
        assert [t.path for t in page.truncations] == [
            "/items/1", "/items/2/a", "/items/3", "/items/4"
        ]
"""


def test_regression_a_number_past_a_decimals_range_is_marked_not_a_crash(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    """Regression: a float literal whose exponent no Decimal holds (past 10**18) raised a
    bare `decimal.InvalidOperation` from `load_json`, both file sources and the command
    line (a traceback). It is now the largest power of ten a Decimal holds, with its
    sign, which the encoder marks as it marks `1e400`."""
    from jsonbudget._cli.main import EXIT_OK, main

    namespace: dict[str, Any] = {}
    exec(_PAST_DECIMAL_CHECK, namespace)
    namespace["check"](tmp_path)
    marker = "…[unencodable: Decimal beyond the float range]"
    for name in ("past.json", "past.jsonl"):
        for command in ("dump", "page", "tune"):
            assert main([command, str(tmp_path / name)]) == EXIT_OK, (command, name)
            out = capsys.readouterr().out
            if command != "tune":
                assert marker in out
    # The same without the compiled modules, as where no C compiler was there.
    out = bounded_run(
        "import sys\n"
        "for name in ('_encode._speedups', '_fastnew', '_sources._numbers'):\n"
        "    sys.modules['jsonbudget.' + name] = None\n"
        "from jsonbudget._sources import jsonread\n"
        "assert jsonread._rounded is None\n"
        f"{_PAST_DECIMAL_CHECK}\n"
        f"check({str(tmp_path)!r})\n"
        "print('ok')\n",
        timeout=60,
    )
    assert out == "ok\n"


def test_regression_gzip_forced_on_a_plain_file_says_the_file_is_not_gzip(
    tmp_path: Path,
) -> None:
    """Regression: ``gzip=True`` on a plain file said "bytes after a member that do not
    start another member", though no member came before."""
    plain = write(tmp_path / "plain.json", "[1, 2, 3]")
    lines = write(tmp_path / "plain.jsonl", "1\n2\n")
    for source in (JsonArrayFileSource(plain, gzip=True), JsonLinesSource(lines, gzip=True)):
        for read in (
            lambda s: list(s.open(None)),
            lambda s: s.fill(PageBuilder(Limits(4096)), None),
        ):
            with pytest.raises(DecodeError) as info:
                read(source)
            assert str(info.value) == (
                "invalid gzip data: the file is not gzip (it does not start with the bytes "
                "1f 8b) (at decoded byte 0)"
            )
            assert info.value.offset == 0
    # After a member (an empty one too), bytes that start no member are said to be so.
    after = tmp_path / "after.json.gz"
    after.write_bytes(gzip.compress(b"") + b"[1]")
    with pytest.raises(DecodeError, match="bytes after a member that do not start another"):
        list(JsonArrayFileSource(after, gzip=True).open(None))
    # An empty file is an empty stream, as the gzip module reads it.
    empty = tmp_path / "empty.jsonl"
    empty.write_bytes(b"")
    assert list(JsonLinesSource(empty, gzip=True).open(None)) == []


def test_regression_a_gzip_error_is_at_the_decoded_byte_where_the_stream_broke(
    tmp_path: Path,
) -> None:
    """Regression: a gzip error in an array file (trailing garbage, a truncated member,
    a bad CRC) said ``offset=0`` wherever it lay: the read that failed lost all it had
    decoded. A page of JSON Lines (`fill`) said 0 the same way."""
    rows = [{"id": i} for i in range(2000)]
    array = orjson.dumps(rows)
    lines = b"".join(orjson.dumps(row) + b"\n" for row in rows)
    for data, source_class in ((array, JsonArrayFileSource), (lines, JsonLinesSource)):
        good = gzip.compress(data)
        bad_crc = bytearray(good)
        bad_crc[-8] ^= 0xFF
        truncated = good[:-20]
        cases = {
            good + b"garbage": len(data),
            bytes(bad_crc): len(data),
            # Where the member was cut, in decoded bytes.
            truncated: len(zlib.decompressobj(31).decompress(truncated)),
        }
        path = tmp_path / "broken.gz"
        for blob, where in cases.items():
            assert 0 < where <= len(data)
            path.write_bytes(blob)
            for read_size in (None, 1000):
                if source_class is JsonArrayFileSource and read_size is not None:
                    source: Source[Any] = JsonArrayFileSource(path, read_size=read_size)
                else:
                    source = source_class(path)
                with pytest.raises(DecodeError) as info:
                    list(source.open(None))
                assert info.value.offset == where
                for paged in (
                    lambda s: read_in_pages(s, [300]),
                    lambda s: pages_by_fill(s, Limits(2000)),
                ):
                    with pytest.raises(DecodeError) as info:
                        paged(source)
                    assert info.value.offset == where


def test_regression_a_json_error_message_has_no_dangling_at(tmp_path: Path) -> None:
    """Regression: the stdlib scanner's "Invalid control character at" (and
    "Unterminated string starting at") were passed through, which read "Invalid
    control character at (at decoded byte 5)"."""
    assert not str(_decode_error(lambda: load_json(b'[1,"a\x01b"]'))).count(" at (")
    assert str(_decode_error(lambda: load_json(b'[1,"a\x01b"]'))) == (
        "invalid JSON: Invalid control character (at decoded byte 5)"
    )
    assert str(_decode_error(lambda: load_json('["abc'))) == (
        "invalid JSON: Unterminated string (at decoded byte 1)"
    )
    array = tmp_path / "c.json"
    array.write_bytes(b'[1,"a\x00b",2]')
    lines = tmp_path / "c.jsonl"
    lines.write_bytes(b'1\n"a\x01b"\n2\n')
    for source, message in (
        (JsonArrayFileSource(array), "invalid JSON: Invalid control character (at decoded byte 5)"),
        (
            JsonArrayFileSource(array, read_size=3),
            "invalid JSON: Invalid control character (at decoded byte 5)",
        ),
        (
            JsonLinesSource(lines),
            "line at byte 2: invalid JSON: Invalid control character (at decoded byte 4)",
        ),
    ):
        assert str(_decode_error(lambda s=source: list(s.open(None)))) == message
        assert str(_decode_error(lambda s=source: pages_by_fill(s, Limits(4096)))) == message


def _decode_error(call: Any) -> DecodeError:
    with pytest.raises(DecodeError) as info:
        call()
    return info.value

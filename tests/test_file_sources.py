"""File sources: JSON arrays under a prefix (plain and gzip) and JSON Lines."""

from __future__ import annotations

import gzip
import itertools
import json
import os
from pathlib import Path
from typing import Any

import orjson
import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from jsonbudget import JsonArrayFileSource, JsonLinesSource, Source
from jsonbudget.errors import DecodeError, InvalidCursor, LimitError
from tests.test_sources import read_in_pages, roundtrip, take

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
        ("[1, 2", "item", "expected ',' or ']'"),
        ("[1 2]", "item", "expected ',' or ']'"),
        ("[NaN]", "item", "NaN is not valid JSON"),
        ("[1, -Infinity]", "item", "Infinity is not valid JSON"),
        ('{"a": 1}', "item", "expected '\\['"),
        ('{"a": 1}', "results.item", "no key 'results'"),
        ('{"results": {"x": 1}}', "results.item", "expected '\\['"),
        ("[{]", "item", "invalid JSON"),
        ('[{"a": 1}, {"b": }]', "item", "invalid JSON"),
    ],
)
def test_invalid_documents_raise_decode_error(
    tmp_path: Path, text: str, prefix: str, message: str
) -> None:
    path = write(tmp_path / "bad.json", text)
    with pytest.raises(DecodeError, match=message):
        all_items(JsonArrayFileSource(path, prefix=prefix, read_size=3))


def test_invalid_utf8_is_refused(tmp_path: Path) -> None:
    path = tmp_path / "u.json"
    path.write_bytes(b'["ok", "\xff"]')
    with pytest.raises(DecodeError, match="UTF-8"):
        all_items(JsonArrayFileSource(path))


def test_syntax_error_is_reported_without_reading_the_rest_of_the_file(tmp_path: Path) -> None:
    path = tmp_path / "big-bad.json"
    path.write_bytes(b"[1, 2, {oops}, " + b"3, " * 2_000_000 + b"4]")
    before = rchar()
    with pytest.raises(DecodeError):
        all_items(JsonArrayFileSource(path))
    assert rchar() - before < 256 * 1024


def test_item_larger_than_max_item_bytes_is_refused(tmp_path: Path) -> None:
    path = write(tmp_path / "huge.json", json.dumps(["x" * 5000, 1]))
    with pytest.raises(DecodeError, match="max_item_bytes=1000"):
        all_items(JsonArrayFileSource(path, read_size=100, max_item_bytes=1000))


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
    it.close()  # type: ignore[attr-defined]
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
        {"i": 1, "o": 0, "s": 1, "m": 1, "c": "]"},
        {"i": -1, "o": 2, "s": 1, "m": 1, "c": "1"},
    ],
)
def test_malformed_file_positions_are_invalid_cursors(tmp_path: Path, bad: Any) -> None:
    path = write(tmp_path / "a.json", "[1, 2]")
    with pytest.raises(InvalidCursor):
        all_items(JsonArrayFileSource(path), bad)


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
        ("1\n2 3\n", "extra data"),
        ("1\n{\n", "invalid JSON line"),
        ("NaN\n", "NaN is not valid JSON"),
    ],
)
def test_jsonl_invalid_lines(tmp_path: Path, text: str, message: str) -> None:
    with pytest.raises(DecodeError, match=message):
        all_items(JsonLinesSource(write(tmp_path / "b.jsonl", text)))


def test_jsonl_line_longer_than_max_item_bytes(tmp_path: Path) -> None:
    path = write(tmp_path / "l.jsonl", json.dumps("x" * 100) + "\n1\n")
    with pytest.raises(DecodeError, match="max_item_bytes=50"):
        all_items(JsonLinesSource(path, max_item_bytes=50))


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

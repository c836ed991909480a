"""The bounded reader: limits on decoded bytes, honest completeness, boundaries, gzip."""

from __future__ import annotations

import array
import gzip as gzip_module
import io
import itertools
import re
import sys
import tracemalloc
import zlib
from collections.abc import Iterator
from pathlib import Path
from typing import Any, BinaryIO

import orjson
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from jsonbudget import BoundedReader, BoundedText, SpillRef, SpillStore, read_bounded_text
from jsonbudget._agents.reader import LEAST_READ_BYTES, LongIntsAsExponents, ResultReader
from jsonbudget._reader import MAX_EMPTY_CHUNKS
from jsonbudget._sources.jsonread import load_json
from jsonbudget.errors import DecodeError, InvalidCursor, LimitError, SpillError
from tests.limited import bounded_run


class CountingEndless:
    """An endless binary stream that counts every byte it hands out."""

    def __init__(self, fill: bytes = b"x") -> None:
        self.handed_out = 0
        self.fill = fill

    def read(self, n: int = -1) -> bytes:
        assert n > 0, "an endless stream must never be asked for everything"
        self.handed_out += n
        return (self.fill * n)[:n]


def counting_chunks(chunks: list[bytes], seen: list[int]) -> Iterator[bytes]:
    for chunk in chunks:
        seen.append(len(chunk))
        yield chunk


def test_endless_reader_and_12_byte_limit_observes_exactly_13_bytes() -> None:
    source = CountingEndless()
    out = read_bounded_text(source, 12)
    assert out == BoundedText("x" * 12, False, 13, 12, 13)
    assert source.handed_out == 13


def test_endless_generator_stops_pulling_after_the_limit() -> None:
    pulled = 0

    def endless() -> Iterator[bytes]:
        nonlocal pulled
        while True:
            pulled += 1
            yield b"abc"

    out = read_bounded_text(endless(), 12)
    assert out.text == "abcabcabcabc"
    assert not out.complete
    assert out.bytes_read == 13
    assert pulled == 5  # 15 bytes offered, only the 13th byte of the fifth chunk looked at


def test_exactly_the_limit_is_complete() -> None:
    out = read_bounded_text(io.BytesIO(b"x" * 12), 12)
    assert out == BoundedText("x" * 12, True, 12, 12, 12)


def test_empty_source_is_complete_and_empty() -> None:
    assert read_bounded_text([], 5) == BoundedText("", True, 0, 0, 0)
    assert read_bounded_text(io.BytesIO(b""), 5) == BoundedText("", True, 0, 0, 0)


def test_cut_inside_a_multibyte_character_backs_up_to_the_boundary() -> None:
    data = "ab€".encode()  # € is 3 bytes: e2 82 ac
    for limit in (3, 4):
        out = read_bounded_text(data + b"zz", limit)
        assert out.text == "ab"
        assert out.bytes_returned == 2
        assert not out.complete
    out = read_bounded_text(data + b"zz", 5)
    assert out.text == "ab€"
    assert out.bytes_returned == 5


def test_four_byte_character_split_across_chunks() -> None:
    emoji = "😀".encode()
    out = read_bounded_text([b"a", emoji[:1], emoji[1:3], emoji[3:], b"b"], 5)
    assert out.text == "a😀"
    assert out.complete is False
    out = read_bounded_text([b"a", emoji[:1], emoji[1:3], emoji[3:]], 5)
    assert out.text == "a😀"
    assert out.complete is True


def test_invalid_utf8_refused_with_offset() -> None:
    with pytest.raises(DecodeError) as info:
        read_bounded_text(b"hello\xffworld", 100)
    assert info.value.offset == 5
    assert isinstance(info.value, ValueError)


def test_invalid_continuation_split_across_chunks_reports_its_start() -> None:
    with pytest.raises(DecodeError) as info:
        read_bounded_text([b"abc\xe2", b"\x82", b"Z"], 100)
    assert info.value.offset == 3


def test_incomplete_character_at_end_of_input_is_refused() -> None:
    with pytest.raises(DecodeError) as info:
        read_bounded_text(b"ab\xe2\x82", 100)
    assert info.value.offset == 2


def test_the_extra_byte_is_validated_too() -> None:
    # The 13th byte breaks the character that straddles the limit: the input is invalid.
    with pytest.raises(DecodeError) as info:
        read_bounded_text(b"x" * 11 + b"\xe2A", 12)
    assert info.value.offset == 11


@pytest.mark.parametrize("encoding", ["utf-8", "UTF8", "utf-8-sig"])
@pytest.mark.parametrize(
    "held", [b"\xed\xa0", b"\xed\xbf", b"\xf4\x90", b"\xe0\x80", b"\xf0\x80\x80"]
)
def test_bytes_held_at_the_cut_that_nothing_completes_are_refused(
    held: bytes, encoding: str
) -> None:
    # CPython's incremental decoder holds a surrogate's first two bytes (ED A0) as if a
    # continuation might complete them; the reader returned the text before them.
    # (Regression: "utf-8-sig", the same bytes after an optional BOM, was not checked.)
    with pytest.raises(DecodeError) as info:
        read_bounded_text(b"ab" + held + b"\x80\x80", 1 + len(held), encoding=encoding)
    assert info.value.offset == 2
    with pytest.raises(DecodeError):
        read_bounded_text([b"ab", held], 100, max_source_bytes=2 + len(held), encoding=encoding)


@pytest.mark.parametrize("held", [b"\xe2\x82", b"\xed\x9f", b"\xf0\x9f\x98", b"\xf4\x8f"])
def test_a_character_cut_at_the_limit_that_could_complete_is_not_refused(held: bytes) -> None:
    out = read_bounded_text(b"ab" + held + b"\xbf\xbf", 1 + len(held))
    assert out.text == "ab"
    assert not out.complete


def test_other_encodings_cut_on_their_boundaries() -> None:
    data = "日本語テキスト".encode("shift_jis")  # 2 bytes per character
    out = read_bounded_text(data, 5, encoding="shift_jis")
    assert out.text == "日本"
    assert out.bytes_returned == 4
    utf16 = "a😀b".encode("utf-16-le")  # the emoji is a surrogate pair, 4 bytes
    out = read_bounded_text(utf16, 4, encoding="utf-16-le")
    assert out.text == "a"
    assert out.bytes_returned == 2


def test_unknown_or_non_text_encoding_refused_before_reading() -> None:
    source = CountingEndless()
    with pytest.raises(LimitError, match="encoding"):
        read_bounded_text(source, 10, encoding="no-such-codec")
    with pytest.raises(LimitError, match="not a text encoding"):
        read_bounded_text(source, 10, encoding="zlib")
    # Regression: punycode's incremental decoder decodes each chunk as a whole text, so
    # "bücher" read in two chunks came back as "bcherͩ", complete.
    with pytest.raises(LimitError, match="decodes only whole texts"):
        read_bounded_text(source, 10, encoding="punycode")
    # Regression: a NUL in the name made codecs.lookup raise a bare ValueError.
    with pytest.raises(LimitError, match="encoding"):
        read_bounded_text(source, 10, encoding="utf-8\0")
    assert source.handed_out == 0


@pytest.mark.parametrize("bad", [0, -1, 2**62, 1.5, True, "12", None])
def test_bad_limits_refused_before_any_read(bad: object) -> None:
    source = CountingEndless()
    with pytest.raises(LimitError, match="max_bytes"):
        read_bounded_text(source, bad)  # type: ignore[arg-type]
    assert source.handed_out == 0


def test_str_source_is_a_type_error() -> None:
    with pytest.raises(TypeError, match="not str"):
        read_bounded_text("text", 10)  # type: ignore[arg-type]
    with pytest.raises(TypeError, match="must yield bytes"):
        read_bounded_text(["text"], 10)  # type: ignore[list-item]


def test_text_stream_is_a_type_error() -> None:
    with pytest.raises(TypeError, match="must yield bytes"):
        read_bounded_text(io.StringIO("abc"), 10)  # type: ignore[arg-type]


def test_reusable_reader_gives_the_same_answers() -> None:
    reader = BoundedReader(4)
    assert reader.max_bytes == 4
    assert reader.read(b"abcdef").text == "abcd"
    assert reader.read(b"ab").complete


def test_huge_single_chunk_is_not_copied_whole() -> None:
    big = b"y" * (64 * 1024 * 1024)
    tracemalloc.start()
    try:
        out = read_bounded_text([big], 1000)
        _, peak = tracemalloc.get_traced_memory()
    finally:
        tracemalloc.stop()
    assert out.bytes_read == 1001
    assert peak < 1024 * 1024


# --- gzip -------------------------------------------------------------------------------


def gzip_bomb(decoded_bytes: int) -> bytes:
    """A gzip file of zeros that inflates to *decoded_bytes*, built without holding them."""
    compressor = zlib.compressobj(9, zlib.DEFLATED, 31)
    block = bytes(1024 * 1024)
    parts = []
    for _ in range(decoded_bytes // len(block)):
        parts.append(compressor.compress(block))
    parts.append(compressor.flush())
    return b"".join(parts)


def test_gzip_bomb_of_1_gb_is_stopped_at_the_limit_with_bounded_memory() -> None:
    bomb = gzip_bomb(1024**3)
    assert len(bomb) < 2 * 1024 * 1024  # about 1 MB on disk
    tracemalloc.start()
    try:
        out = read_bounded_text(io.BytesIO(bomb), 1000, gzip=True)
        _, peak = tracemalloc.get_traced_memory()
    finally:
        tracemalloc.stop()
    assert out.text == "\x00" * 1000
    assert out.complete is False
    assert out.bytes_read == 1001
    assert out.source_bytes_read <= 64 * 1024  # one compressed chunk was enough
    assert peak < 1024 * 1024


def test_gzip_small_file_is_complete() -> None:
    data = "héllo wörld\n".encode() * 100
    out = read_bounded_text(io.BytesIO(gzip_module.compress(data)), 10_000, gzip=True)
    assert out.text == data.decode()
    assert out.complete
    assert out.bytes_read == len(data)


def test_gzip_multi_member_and_zero_padding() -> None:
    body = gzip_module.compress(b"one ") + gzip_module.compress(b"two") + b"\x00" * 8
    out = read_bounded_text(body, 100, gzip=True)
    assert out.text == "one two"
    assert out.complete


def test_gzip_truncated_file_is_refused() -> None:
    body = gzip_module.compress(b"abcdef" * 1000)[:-6]
    with pytest.raises(DecodeError, match="truncated"):
        read_bounded_text(body, 100_000, gzip=True)


def test_gzip_garbage_is_refused() -> None:
    with pytest.raises(DecodeError, match="gzip"):
        read_bounded_text(b"not gzip at all", 100, gzip=True)


@pytest.mark.parametrize(
    "data", [b"\x00" * 64, b"\x00" * 8 + gzip_module.compress(b"hi")], ids=["zeros", "zeros-first"]
)
def test_regression_zero_padding_before_any_member_is_not_gzip(data: bytes) -> None:
    # Zeros were skipped wherever a member could start: sixty-four of them read as a
    # complete, empty text. gzip(1) takes them after a member only, as Python's gzip does.
    with pytest.raises(DecodeError, match="invalid gzip data"):
        read_bounded_text(io.BytesIO(data), 100, gzip=True)
    padded = gzip_module.compress(b"hi") + b"\x00" * 8 + gzip_module.compress(b"yo") + b"\x00"
    assert read_bounded_text(io.BytesIO(padded), 100, gzip=True).text == "hiyo"


def test_gzip_endless_empty_members_stop_at_the_source_budget() -> None:
    empty_member = gzip_module.compress(b"")

    def endless() -> Iterator[bytes]:
        while True:
            yield empty_member

    out = read_bounded_text(endless(), 10, gzip=True, max_source_bytes=10_000)
    assert out.text == ""
    assert out.complete is False  # never claimed: the source did not end
    assert out.source_bytes_read == 10_000


def test_gzip_limit_cuts_inside_a_character() -> None:
    data = gzip_module.compress("ab€cd".encode())
    out = read_bounded_text(data, 4, gzip=True)
    assert out.text == "ab"
    assert not out.complete
    assert out.bytes_read == 5


# --- properties ---------------------------------------------------------------------------


@settings(max_examples=150, deadline=None)
@given(
    text=st.text(st.characters(codec="utf-8"), max_size=60),
    limit=st.integers(min_value=1, max_value=80),
    cuts=st.lists(st.integers(min_value=0, max_value=400), max_size=6),
    use_gzip=st.booleans(),
)
def test_property_prefix_within_limit_and_honest(
    text: str, limit: int, cuts: list[int], use_gzip: bool
) -> None:
    encoded = text.encode()
    payload = gzip_module.compress(encoded) if use_gzip else encoded
    bounds = sorted({min(c, len(payload)) for c in cuts} | {0, len(payload)})
    chunks = [payload[a:b] for a, b in itertools.pairwise(bounds)]
    out = read_bounded_text(chunks, limit, gzip=use_gzip)
    got = out.text.encode()
    assert len(got) <= limit
    assert len(got) == out.bytes_returned
    assert encoded.startswith(got)
    assert out.complete == (len(encoded) <= limit)
    assert out.bytes_read == min(len(encoded), limit + 1)
    if not out.complete:
        # Backed up by less than one character.
        assert limit - len(got) < 4
        assert len(encoded[: len(got)].decode()) == len(out.text)


@settings(max_examples=100, deadline=None)
@given(data=st.binary(max_size=40), limit=st.integers(min_value=1, max_value=50))
def test_property_arbitrary_bytes_give_valid_text_or_decode_error(data: bytes, limit: int) -> None:
    error: DecodeError | None = None
    try:
        out = read_bounded_text(data, limit)
    except DecodeError as exc:
        error = exc
    if error is not None:
        assert error.offset is not None
        assert 0 <= error.offset <= min(len(data), limit + 1)
        # The bytes before the offset are a valid prefix.
        data[: error.offset].decode("utf-8", "strict")
        return
    assert len(out.text.encode()) <= limit
    assert data.startswith(out.text.encode())


# --- the last gaps: stuck sources, source caps, strided views ---------------------------


def test_an_endless_run_of_empty_chunks_terminates() -> None:
    """Regression: itertools.repeat(b"") hung read_bounded_text."""
    pulled = 0

    def empties() -> Iterator[bytes]:
        nonlocal pulled
        while True:
            pulled += 1
            yield b""

    out = read_bounded_text(empties(), 10)
    assert (out.text, out.complete, out.bytes_read) == ("", False, 0)
    assert pulled == MAX_EMPTY_CHUNKS


def test_empty_chunks_between_data_are_fine() -> None:
    chunks = [b"", b"ab", *([b""] * (MAX_EMPTY_CHUNKS - 1)), b"cd", b""]
    out = read_bounded_text(chunks, 10)
    assert (out.text, out.complete) == ("abcd", True)


@pytest.mark.parametrize(
    "source", [b"abcdef", [b"abcdef"], [b"ab", b"cdef"], [b"abc", b"def"]], ids=repr
)
def test_a_source_cut_by_max_source_bytes_is_not_complete(source: Any) -> None:
    """Regression: read_bounded_text(b"abcdef", 10, max_source_bytes=3) said complete."""
    out = read_bounded_text(source, 10, max_source_bytes=3)
    assert (out.text, out.complete, out.source_bytes_read) == ("abc", False, 3)


def test_exactly_the_source_cap_of_a_source_that_ends_is_complete() -> None:
    out = read_bounded_text([b"abc"], 10, max_source_bytes=3)
    assert (out.text, out.complete) == ("abc", True)


def test_gzip_of_many_empty_members_is_cut_and_not_complete() -> None:
    """Regression: 100,000 empty gzip members in one bytes object said complete."""
    data = gzip_module.compress(b"") * 100_000
    for source in (data, [data]):
        out = read_bounded_text(source, 10, gzip=True)
        assert (out.text, out.complete) == ("", False)
        assert out.source_bytes_read < len(data)


def test_gzip_cut_by_the_source_cap_inside_a_member_is_partial() -> None:
    """Regression: this raised DecodeError("... truncated") instead of a partial result."""
    text = "".join(f"line {i}\n" for i in range(200_000)).encode()
    data = gzip_module.compress(text)
    out = read_bounded_text(data, 10_000_000, gzip=True, max_source_bytes=len(data) // 2)
    assert out.complete is False
    assert 0 < out.bytes_read < len(text)
    assert out.text.encode() == text[: out.bytes_returned]


def test_a_truly_truncated_gzip_still_raises() -> None:
    data = gzip_module.compress(b"hello world" * 100)
    with pytest.raises(DecodeError, match="truncated"):
        read_bounded_text(data[:-10], 100_000, gzip=True)


def test_a_strided_memoryview_is_read() -> None:
    """Regression: a non-contiguous memoryview raised an internal TypeError."""
    view = memoryview(b"a-b-c-d-")[::2]
    assert not view.c_contiguous
    sources: list[Any] = [view, [view]]
    for source in sources:
        out = read_bounded_text(source, 3)
        assert (out.text, out.complete) == ("abc", False)


@pytest.mark.parametrize("data", [b"h\x00i\x00", b"h\x00i"])
def test_utf16_without_a_byte_order_mark_is_a_decode_error(data: bytes) -> None:
    """Regression: the utf-16 decoder's plain UnicodeError (no BOM) escaped as itself."""
    from jsonbudget import DecodeError

    with pytest.raises(DecodeError, match="does not start with BOM") as info:
        read_bounded_text(data, 100, encoding="utf-16")
    assert info.value.offset == 0
    assert read_bounded_text(b"\xff\xfeh\x00i\x00", 100, encoding="utf-16").text == "hi"


# -- ResultReader: its least budget, and numbers Python or orjson cannot take --------------


def spilled(tmp_path: Path, data: bytes, *, max_bytes: int = 2000) -> tuple[ResultReader, str]:
    store = SpillStore(tmp_path / "spill")
    reader = ResultReader(spill=store, max_bytes=max_bytes)
    return reader, reader.reference(store.put(data, label="r"), principal="p")


def test_regression_reader_budgets_below_a_string_page_are_refused(tmp_path: Path) -> None:
    """ResultReader took max_bytes 342-394 (the page builder's least), then a string read
    raised an internal LimitError: a string page needs its 64 bytes beside the envelope
    and the echo of a pointer a quarter of the page long."""
    assert LEAST_READ_BYTES == 521
    with pytest.raises(LimitError, match=r"max_bytes=520 is invalid: must be at least 521"):
        ResultReader(spill=SpillStore(tmp_path / "s"), max_bytes=LEAST_READ_BYTES - 1)
    key = "k" * 400  # a pointer longer than a quarter of the page: echoed cut
    value = {key: "s" * 5000, "rows": list(range(300)), "obj": {f"m{i}": i for i in range(99)}}
    kinds = {f"/{key}": "string", "/rows": "array", "/obj": "object", "/rows/7": "value"}
    for budget in (LEAST_READ_BYTES, LEAST_READ_BYTES + 1, LEAST_READ_BYTES + 3, 700):
        reader, ref = spilled(tmp_path / str(budget), orjson.dumps(value), max_bytes=budget)
        for pointer, kind in kinds.items():
            page = reader.read(ref, pointer, principal="p")
            assert len(page.data) <= budget
            assert orjson.loads(page.data)["kind"] == kind
            assert page.kind == kind


def test_regression_a_scalar_int_beyond_64_bits_reads_as_the_encoders_marker(
    tmp_path: Path,
) -> None:
    """A pointer to a scalar integer beyond 64 bits raised TypeError (orjson cannot write
    it); a scalar now goes through the encoder, as a list's items do."""
    raw = b'{"big": 123456789012345678901234567890, "dec": 19.90, "e": 1E+15, "list": [1]}'
    reader, ref = spilled(tmp_path, raw)
    assert orjson.loads(reader.read(ref, "/big", principal="p").data)["items"] == [
        "…[unencodable: int beyond 64 bits]"
    ]
    assert b'"items":[19.90]' in reader.read(ref, "/dec", principal="p").data
    assert b'"items":[1E+15]' in reader.read(ref, "/e", principal="p").data
    # A Decimal longer than the page is marked; the page still fits.
    reader, ref = spilled(tmp_path / "long", b'{"d": 1.' + b"2" * 3000 + b"}", max_bytes=600)
    page = reader.read(ref, "/d", principal="p")
    assert len(page.data) <= 600
    (marker,) = orjson.loads(page.data)["items"]
    assert marker.startswith("…[unencodable: Decimal of 30")


def test_regression_an_int_longer_than_python_reads_is_read_as_its_marker(
    tmp_path: Path,
) -> None:
    """A spilled result holding a 20,000-digit integer made read raise a bare ValueError
    from ijson's C backend, which then left an exception set: later reads raised
    SystemError and the process crashed. yajl never sees such a number now. Reads that
    had to pass it then raised SpillError, so everything after it was out of reach: the
    Python backend now reads it as the exact Decimal of its digits, which the encoder
    marks in place and the page reports."""
    out = bounded_run(
        """
        import pathlib
        from jsonbudget import SpillStore
        from jsonbudget._agents.reader import ResultReader

        store = SpillStore(pathlib.Path(TMP))
        reader = ResultReader(spill=store, max_bytes=2000)
        raw = b'{"a": 19.90, "n": null, "g": [1, ' + b"7" * 20000 + b'], "h": "s"}'
        ref = reader.reference(store.put(raw, label="big"), principal="p")
        for pointer in ["/a", "/n", "/g", "/g/1", "/h", "", "/a"]:
            print(pointer, reader.read(ref, pointer, principal="p").data.decode())
        alone = reader.reference(store.put(b"-" + b"8" * 5000, label="n"), principal="p")
        print("alone", reader.read(alone, "", principal="p").data.decode())
        other = reader.reference(store.put(b'[1, 2, 3]', label="ok"), principal="p")
        print("other", reader.read(other, "", principal="p").data.decode())
        """.replace("TMP", repr(str(tmp_path)))
    )
    pages = {p: orjson.loads(d) for p, d in (line.split(" ", 1) for line in out.splitlines())}
    marker = "…[unencodable: Decimal beyond the float range]"
    report = [{"path": "/items/0", "kind": "unencodable", "omitted": None, "unit": "bytes"}]
    assert pages["/a"]["items"] == [19.9]
    assert pages["/n"]["items"] == [None]
    assert pages["/g"]["items"] == [1, marker]
    assert pages["/g"]["truncated"] == [{**report[0], "path": "/items/1"}]
    assert pages["/g/1"]["items"] == [marker]
    assert pages["/g/1"]["truncated"] == report  # a scalar page reports its marker too
    assert pages["/h"]["items"] == ["s"]
    assert [m["key"] for m in pages[""]["items"]] == ["a", "n", "g", "h"]
    assert pages["alone"]["items"] == [marker]  # an integer that ends the text
    assert pages["other"]["items"] == [1, 2, 3]
    assert all(page["complete"] for page in pages.values())


def test_long_integer_exponents_do_not_depend_on_where_pieces_end() -> None:
    """The streaming transform gives, piece by piece, what it gives the whole text."""
    limit = sys.get_int_max_str_digits()
    long_int = b"9" * (limit + 1)
    texts = [
        b"[" + long_int + b", -" + long_int + b", 1." + long_int + b", 1e-" + long_int + b"]",
        b'{"k\\"' + long_int + b'": "' + long_int + b'", "v": ' + long_int + b"}",
        b"[" + b"7" * limit + b", " + long_int + b"e5, " + long_int + b".5, " + long_int + b"]",
        long_int,
    ]
    expected = [2, 1, 1, 1]  # exponents that go in: integers alone, never strings
    for text, count in zip(texts, expected, strict=True):
        whole = LongIntsAsExponents()
        fixed = whole.feed(text) + whole.end()
        assert fixed.count(b"E0") == count
        assert load_json(fixed) == load_json(text)  # the same values, exactly
        for size in (1, 2, 3, 7, 4096):
            split = LongIntsAsExponents()
            pieces = [split.feed(text[i : i + size]) for i in range(0, len(text), size)]
            assert b"".join(pieces) + split.end() == fixed, size


def test_a_digit_run_inside_a_string_is_read_whole(tmp_path: Path) -> None:
    # The C backend is kept off results with a long digit run, strings included: the
    # Python backend reads those exactly.
    reader, ref = spilled(tmp_path, orjson.dumps({"s": "9" * 9000, "n": 5}))
    assert orjson.loads(reader.read(ref, "/n", principal="p").data)["items"] == [5]
    broken, bad = spilled(tmp_path / "bad", b'{"s": "' + b"9" * 9000 + b'", "n": 5,]')
    with pytest.raises(SpillError, match="not valid JSON"):
        broken.read(bad, "/x", principal="p")


def test_regression_any_bytes_like_object_is_a_source() -> None:
    """An array.array was iterated as ints ("the source must yield bytes, not int"),
    though the docs list a single bytes-like object as a source."""
    sources: list[Any] = [array.array("B", b"abcd"), [array.array("B", b"ab"), b"cd"]]
    for source in sources:
        got = read_bounded_text(source, 3)
        assert (got.text, got.complete, got.bytes_read) == ("abc", False, 4)
    with pytest.raises(TypeError, match="not str"):
        read_bounded_text("abcd", 3)  # type: ignore[arg-type]


# --- ResultReader: a child larger than its page is built only as far as the page shows ------


def _spilled_json(tmp_path: Path, chunks: Iterator[bytes]) -> tuple[ResultReader, str]:
    from jsonbudget import ResultGate

    reader = ResultReader(spill=SpillStore(tmp_path), max_bytes=2000)
    gate = ResultGate(max_bytes=4096, reader=reader, principal="a")
    out = gate.gate(chunks, label="big")
    return reader, orjson.loads(out.data)["spilled"]["ref"]


def _numbers(n: int) -> Iterator[bytes]:
    for j in range(0, n, 10_000):
        yield b",".join(b"%d" % i for i in range(j, min(n, j + 10_000)))
        if j + 10_000 < n:
            yield b","


def _peak(read: Any) -> tuple[Any, int]:
    tracemalloc.start()
    try:
        return read(), tracemalloc.get_traced_memory()[1]
    finally:
        tracemalloc.stop()


def test_regression_a_big_array_item_is_not_built_whole_for_a_small_page(tmp_path: Path) -> None:
    # [{"big": [0, 1, ... 2,999,999]}]: a 22 MB item; its page is 2,000 bytes.
    reader, ref = _spilled_json(tmp_path, iter([b'[{"big":[', *_numbers(3_000_000), b"]}]"]))
    assert sum(f.stat().st_size for f in tmp_path.rglob("*") if f.is_file()) > 20 << 20
    page, peak = _peak(lambda: reader.read(ref, "", principal="a"))
    assert peak < 4 << 20  # was about 15 times the file
    env = orjson.loads(page.data)
    assert len(page.data) <= 2000
    (item,) = env["items"]
    shown = item["big"][:-1]
    assert shown == list(range(len(shown)))
    assert len(shown) > 300
    # The rest was never read into memory: how many it holds is not claimed (guarantee 4).
    assert item["big"][-1] == "…[omitted: more items]"
    assert env["truncated"] == [
        {"path": f"/items/0/big/{len(shown)}", "kind": "items", "omitted": None, "unit": "items"},
        {"path": "/items/0", "kind": "item", "omitted": None, "unit": "bytes"},
    ]
    assert env["oversized"] == [{"index": 0, "encoded_bytes": None, "outcome": "truncated"}]
    assert env["complete"] is True
    assert env["next_cursor"] is None
    # Nothing lost: the cut list is read on by its own pointer, within the same bound.
    page, peak = _peak(lambda: reader.read(ref, "/0/big", principal="a"))
    assert peak < 4 << 20
    assert orjson.loads(page.data)["items"][:3] == [0, 1, 2]


def test_regression_a_cut_child_reads_back_whole_by_its_pointer(tmp_path: Path) -> None:
    from tests.test_guards import follow_read

    value = {"big": list(range(20_000)), "after": "end"}
    reader, ref = _spilled_json(tmp_path, iter([orjson.dumps([value, 7])]))
    env = orjson.loads(reader.read(ref, "", principal="a").data)
    first = env["items"][0]
    # The members after the cut one still show: read past the cut, never built with it.
    assert list(first) == ["big", "after"]
    assert first["after"] == "end"
    assert first["big"][-1] == "…[omitted: more items]"
    assert first["big"][:-1] == list(range(len(first["big"]) - 1))
    pages = follow_read(reader, ref, "/0/big", "a")
    assert [x for p in pages for x in p["items"]] == value["big"]
    pages = follow_read(reader, ref, "", "a")
    assert [p["items"] for p in pages][-1][-1] == 7


def test_regression_nested_big_children_are_built_within_the_page(tmp_path: Path) -> None:
    from tests.test_guards import follow_read

    # An object member holding a big array of big objects, then a small member.
    rows = [{"i": i, "arr": list(range(300_000)), "z": i} for i in range(8)]
    value = {"m": rows, "tail": "end"}
    reader, ref = _spilled_json(tmp_path, iter([orjson.dumps([value])]))
    page, peak = _peak(lambda: reader.read(ref, "", principal="a"))
    assert peak < 4 << 20  # the file is 16 MB
    (item,) = orjson.loads(page.data)["items"]
    row = item["m"][0]
    assert row["i"] == 0
    assert row["arr"][-1] == "…[omitted: more items]"
    assert item["tail"] == "end"
    pages = follow_read(reader, ref, "/0", "a")
    assert [m["key"] for p in pages for m in p["items"]] == ["m", "tail"]
    env = pages[0]
    arr = env["items"][0]["value"][0]["arr"]
    assert {"path": f"/items/0/value/0/arr/{len(arr) - 1}", "kind": "items", "omitted": None,
            "unit": "items"} in env["truncated"]  # fmt: skip
    # Every row, read back by its pointer, is whole.
    small: dict[str, Any] = {
        "m": [{"i": i, "arr": list(range(3_000)), "z": i} for i in range(3)],
        "tail": 1,
    }
    reader, ref = _spilled_json(tmp_path / "small", iter([orjson.dumps([small])]))
    for i, want in enumerate(small["m"]):
        members = [m for p in follow_read(reader, ref, f"/0/m/{i}", "a") for m in p["items"]]
        got = {m["key"]: m["value"] for m in members}
        got["arr"] = [x for p in follow_read(reader, ref, f"/0/m/{i}/arr", "a") for x in p["items"]]
        assert got == want


def test_children_that_fit_a_page_are_built_as_before(tmp_path: Path) -> None:
    # A page of small items: plain values, no lazy parts, the bytes of a whole build.
    rows = [{"id": i, "tags": ["a", "b"], "n": None} for i in range(500)]
    reader, ref = _spilled_json(tmp_path, iter([orjson.dumps(rows)]))
    env = orjson.loads(reader.read(ref, "", principal="a").data)
    assert env["items"] == rows[: len(env["items"])]
    assert "truncated" not in env


class _CountingRaw(io.RawIOBase):
    """A spilled file that counts the bytes read from it into its store."""

    def __init__(self, file: BinaryIO, store: _CountingStore) -> None:
        self._file = file
        self._store = store

    def readable(self) -> bool:
        return True

    def readinto(self, buffer: Any) -> int:
        data = self._file.read(len(buffer))
        buffer[: len(data)] = data
        self._store.bytes_read += len(data)
        return len(data)

    def close(self) -> None:
        self._file.close()
        super().close()


class _CountingStore(SpillStore):
    bytes_read = 0

    def open(self, ref: SpillRef | str) -> BinaryIO:
        return io.BufferedReader(_CountingRaw(super().open(ref), self))


_LONG = "x" * 6000
# Rows each too big for a page, cut at their long string, with members after the cut at
# every depth (the member order before the fix read the file from its start for each).
_CUT_ROWS: dict[str, Any] = {
    "member after the long one": lambda i: {"id": i, "bio": _LONG, "score": 0.5},
    "member before the long one": lambda i: {"id": i, "score": 0.5, "bio": _LONG},
    "long member in the middle": lambda i: {"a": i, "b": _LONG, "c": 2, "d": "y" * 3000, "e": 3},
    "several long members": lambda i: {"a": _LONG, "b": _LONG, "c": _LONG, "d": i},
    "nested object cut, members after": lambda i: {
        "id": i,
        "meta": {"bio": _LONG, "tags": list(range(50)), "n": 1},
        "score": 2,
    },
    "nested lists": lambda i: [_LONG, _LONG, i, [_LONG, i]],
    "deep cuts at every level": lambda i: {
        "a": {"b": {"c": _LONG, "d": {"e": _LONG, "f": i}}, "g": 2},
        "h": [_LONG, {"k": _LONG, "z": 1}],
        "t": i,
    },
}


@pytest.mark.parametrize("shape", list(_CUT_ROWS))
def test_regression_following_every_page_reads_the_file_about_once(
    tmp_path: Path, shape: str
) -> None:
    """A row cut at a long member with members after it re-parsed the spilled file from
    its start for each page (the lazy rest of the cut object): following 1,000 pages of a
    6 MB result read 3 GB. The events read past are now kept for the rest to replay."""
    from jsonbudget import ResultGate
    from tests.test_guards import follow_read

    store = _CountingStore(tmp_path)
    reader = ResultReader(spill=store, max_bytes=4000)
    gate = ResultGate(max_bytes=4096, reader=reader, principal="a")
    rows = [_CUT_ROWS[shape](i) for i in range(40)]
    out = gate.gate({"data": rows})
    ref = orjson.loads(out.data)["spilled"]["ref"]
    store.bytes_read = 0
    pages = follow_read(reader, ref, "/data", "a")
    assert len(pages) == len(rows)  # a row a page: each is cut
    assert all(p["truncated"] for p in pages)
    # One pass over the file, plus the buffered reader's read-ahead (was 33 to 160 times).
    assert store.bytes_read <= out.size + (64 << 10)
    # The members after each cut still show, read from what was kept.
    for page, row in zip(pages, rows, strict=True):
        (item,) = page["items"]
        if isinstance(row, dict):
            assert list(item) == list(row)
        else:
            assert item[0].startswith("xxx")


# --- ResultReader: a long string costs parser work linear in its length ---------------------


class _FedPieces:
    """A source as an ijson backend reads it, each piece it is given recorded."""

    def __init__(self, source: Any, pieces: list[int]) -> None:
        self._source = source
        self._pieces = pieces

    def read(self, size: int = -1) -> bytes:
        data: bytes = self._source.read(size)
        if data:
            self._pieces.append(len(data))
        return data


def _lexer_work(pieces: list[int], start: int, end: int) -> int:
    """The bytes the parser scans again: ijson's backends keep a string that a piece
    does not close (text at [start, end)) and scan it from its start with each piece
    that follows."""
    work, fed = 0, 0
    for size in pieces:
        if start < fed <= end:
            work += fed - start
        fed += size
    return work


@pytest.mark.parametrize("python_backend", [False, True])
def test_regression_a_long_string_costs_parser_work_linear_in_its_length(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, python_backend: bool
) -> None:
    """ijson was fed 64 KiB pieces, and both its backends scan a string that a piece does
    not close again from its first byte with each piece: passing one string of L bytes
    cost L * L / 128 KiB steps (a pointer one byte after a 64 MB string: 12 s, and each
    page of a 100 MB string 33-43 s). Reads now grow while a string is open."""
    import ijson

    from jsonbudget._agents import reader as reader_module

    fed: list[list[int]] = []

    def counted(real: Any) -> Any:
        def basic_parse(source: Any, **options: Any) -> Any:
            fed.append([])
            return real(_FedPieces(source, fed[-1]), **options)

        return basic_parse

    monkeypatch.setattr(ijson, "basic_parse", counted(ijson.basic_parse))
    python = reader_module._IJSON_PY
    monkeypatch.setattr(python, "basic_parse", counted(python.basic_parse))
    # A run of digits longer than int() reads (in a string: read as it is) sends the
    # reader to the Python backend, which then parses the long string too.
    after = b'"d":"' + b"7" * (sys.get_int_max_str_digits() + 1) + b'",' if python_backend else b""
    for size in (1 << 20, 2 << 20, 8 << 20):
        head = b'{"log":"'
        reader, ref = spilled(tmp_path / str(size), head + b"a" * size + b'",' + after + b'"x":1}')
        fed.clear()
        assert orjson.loads(reader.read(ref, "/x", principal="p").data)["items"] == [1]
        env = orjson.loads(reader.read(ref, "/log", principal="p").data)
        shown = env["items"][0].split("…[truncated", 1)[0]
        assert shown == "a" * len(shown)
        assert env["truncated"][0]["omitted"] == size - len(shown)
        # With the digits: yajl, stopped at them, then the Python backend, which the
        # reader keeps to for this result.
        assert len(fed) == (3 if python_backend else 2)
        for pieces in fed:
            # Was size * size / 128 KiB (8 times the string at 1 MiB, 64 times at 8 MiB).
            assert _lexer_work(pieces, len(head), len(head) + size) <= 5 * size + (64 << 10)
            # A longer read is inside the string and ends at most a piece after it: what
            # follows comes in pieces as usual.
            at = 0
            for piece in pieces:
                if piece > 64 << 10:
                    assert len(head) < at < at + piece <= len(head) + size + (64 << 10)
                at += piece
            assert max(pieces) > 64 << 10


def _open_bytes(text: bytes) -> list[int]:
    """Byte by byte: after each byte of *text*, the bytes of the string it ends inside."""
    out, start, inside, escaped = [], 0, False, False
    for at, byte in enumerate(text, 1):
        if inside and escaped:
            escaped = False
        elif inside and byte == 0x5C:
            escaped = True
        elif byte == 0x22:
            inside, start = not inside, at
        out.append(at - start if inside else 0)
    return out


@settings(max_examples=300, deadline=None)
@given(
    values=st.recursive(
        st.text(alphabet='a"\\\n\u00e9\U0001f600 ', max_size=12) | st.integers() | st.none(),
        lambda inner: (
            st.lists(inner, max_size=4)
            | st.dictionaries(st.text(alphabet='k"\\', max_size=4), inner, max_size=4)
        ),
        max_leaves=12,
    ),
    ascii_only=st.booleans(),
    cut=st.integers(min_value=0),
    sizes=st.lists(st.integers(min_value=1, max_value=9), min_size=1, max_size=40),
)
def test_the_open_string_a_read_ends_in_is_found_wherever_pieces_end(
    values: Any, ascii_only: bool, cut: int, sizes: list[int]
) -> None:
    """What decides how much the next read brings: the string the text fed so far ends
    inside, escaped quotes and backslashes at every piece boundary included."""
    import json

    from jsonbudget._agents.reader import _OpenString

    text = json.dumps(values, ensure_ascii=ascii_only).encode()
    text = text[: cut % (len(text) + 1)]
    want = _open_bytes(text)
    tracker = _OpenString()
    at = 0
    for size in itertools.cycle(sizes):
        if at >= len(text):
            break
        tracker.feed(text[at : at + size])
        at = min(len(text), at + size)
        assert tracker.open == want[at - 1], (text, at)


@pytest.mark.parametrize("data", [b"\xef", b"\xef\xbb"])
@pytest.mark.parametrize("chunked", [False, True])
def test_regression_input_ending_inside_a_utf8_sig_bom_is_invalid(
    data: bytes, chunked: bool
) -> None:
    # The utf-8-sig decoder holds a BOM's first bytes and returns "" on its final call:
    # the bytes vanished and the read said complete, where utf-8 raises for them.
    source = [data[:1], data[1:]] if chunked else data
    with pytest.raises(DecodeError, match="ends inside a character") as caught:
        read_bounded_text(source, 10, encoding="utf-8-sig")
    assert caught.value.offset == 0
    assert read_bounded_text(b"\xef\xbb\xbfok", 10, encoding="utf-8-sig").text == "ok"


# -- ResultReader: every pointer a page or preview hands out reads what it names ---------


def _read_whole(reader: ResultReader, ref: str, pointer: str) -> Any:
    """The value at *pointer*, read page by page: members as pairs, a string joined."""
    pages, cursor = [], None
    while True:
        page = reader.read(ref, pointer, cursor, principal="p")
        assert len(page.data) <= reader.max_bytes
        pages.append(orjson.loads(page.data))
        cursor = page.next_cursor
        if cursor is None:
            break
    items = [x for env in pages for x in env["items"]]
    kind = pages[0]["kind"]
    if kind == "object":
        return [(m["key"], m["value"]) for m in items]
    if kind == "string":
        return "".join(MARKER.sub("", x) for x in items)
    return items if kind == "array" else items[0]


MARKER = re.compile(r"…\[truncated: \d+ more chars\]$")
SHOWN = re.compile(
    r"(.*)…\[key(?: truncated)?: (\d+) (?:more chars|lone surrogates replaced)\](\d*)"
)


def test_regression_a_listed_member_shows_both_pointers_wherever_they_fit(
    tmp_path: Path,
) -> None:
    """Found by a tester: listing an object of members with 5,000-character keys, a page
    showed a member's key_pointer and not its value_pointer (or neither), where both
    fit: the page builder cut the member as any object, the pointers among the strings
    it shortens, and searched its room in a few rounds. Now, wherever a page can hold
    both pointers whole beside the member's marked cut, it shows them."""
    store = SpillStore(tmp_path / "spill")
    members = {"a" * 5000: "x", "b" * 5000: "v" * 3000, "c" * 5000: {"q": 1},
               "d" * 5000: list(range(100)), "e" * 5000: None}  # fmt: skip
    for outer in ("", "p" * 40, "p" * 60):
        name = store.put(orjson.dumps({outer: members} if outer else members), label="r")
        at = f"/{outer}" if outer else ""
        for budget in (522, 600, *range(LEAST_READ_BYTES, 1100, 13)):
            reader = ResultReader(spill=store, max_bytes=budget)
            ref = reader.reference(name, principal="p")
            cursor, i = None, 0
            while True:
                page = reader.read(ref, at, cursor, principal="p")
                assert len(page.data) <= budget
                env = orjson.loads(page.data)
                for member in env["items"]:
                    want = {"key_pointer": f"{at}/~k{i}", "value_pointer": f"{at}/~v{i}"}
                    if {k: member.get(k) for k in want} != want:
                        # Only where the pointers, the rest left out, pass the page.
                        least = {**env, "items": [{**want, "…": "[omitted: 2 more keys]"}],
                                 "truncated": [{"path": "/items/0/…", "kind": "keys",
                                                "omitted": 2, "unit": "keys"},
                                               env["truncated"][-1]]}  # fmt: skip
                        assert len(orjson.dumps(least)) > budget, (outer, budget, member)
                    i += 1
                cursor = page.next_cursor
                if cursor is None:
                    break
            assert i == len(members)
    # What they name reads back whole.
    reader = ResultReader(spill=store, max_bytes=600)
    ref = reader.reference(name, principal="p")
    for i, (key, value) in enumerate(members.items()):
        assert _read_whole(reader, ref, f"/{'p' * 60}/~k{i}") == key
        got = _read_whole(reader, ref, f"/{'p' * 60}/~v{i}")
        assert got == ([tuple(m) for m in value.items()] if isinstance(value, dict) else value)


@pytest.mark.parametrize(
    "data",
    [
        orjson.dumps({"k" * 3000: {"rows": list(range(2000))}, "b": 1}),
        orjson.dumps({"a": 1, "k" * 3000: "v" * 3000, "k" * 2999 + "j": [{"x": "y" * 900}]}),
        b'{"\\ud800x":{"rows":[' + b",".join(b"%d" % i for i in range(3000)) + b']},"b":1}',
        b'{"in":{"\\udc00' + b"z" * 3000 + b'":"' + b"v" * 3000 + b'"}}',
    ],
    ids=["cut-key-object", "cut-keys-alike", "surrogate-key", "surrogate-and-cut-key"],
)
def test_regression_a_cut_under_a_changed_key_is_read_by_the_path_reported(
    tmp_path: Path, data: bytes
) -> None:
    """Found by a tester: a preview reported a cut under a key it had to change (cut,
    or with a lone surrogate replaced) at a path naming the key as shown, where a read
    found nothing ("nothing stands at ..."). A token that is a key as the encoder shows
    one now names the member it stands for."""
    from jsonbudget import ResultGate

    store = SpillStore(tmp_path / "spill")
    reader = ResultReader(spill=store, max_bytes=2000)
    out = ResultGate(max_bytes=600, reader=reader, principal="p").gate(data)
    ref = orjson.loads(out.data)["spilled"]["ref"]
    whole = load_json(data)
    changed = [t for t in out.truncations if "…[key" in t.path]
    assert changed
    for cut in changed:
        tokens = [t.replace("~1", "/").replace("~0", "~") for t in cut.path.split("/")[2:]]
        want: Any = whole
        for token in tokens:
            if isinstance(want, list):
                want = want[int(token)]
                continue
            if token in want:
                want = want[token]
                continue
            # The key as shown: its head with U+FFFD for each lone surrogate, then how
            # many characters were cut or surrogates replaced, then a number telling
            # keys shown alike apart.
            head, count, nth = SHOWN.fullmatch(token).groups()  # type: ignore[union-attr]
            alike = [k for k in want if k.replace("\ud800", "\ufffd").replace(
                "\udc00", "\ufffd").startswith(head) and len(k) in (len(head),
                len(head) + int(count))]  # fmt: skip
            want = want[alike[int(nth or 0)]]
        got = _read_whole(reader, ref, cut.path[len("/preview") :])
        if isinstance(want, dict):  # its members, each read on by its own pointer
            assert [k for k, _ in got] == list(want)
        else:
            assert got == want


# -- ResultReader: a pointer's length and depth, and what its errors say ------------------


def test_regression_a_deep_pointer_into_json_text_costs_memory_linear_in_its_depth(
    tmp_path: Path,
) -> None:
    """Found by a security tester: a pointer ``/a/a/…/a`` into an object as deep, in a
    result spilled from JSON text (keys may repeat, so each object is read to its end),
    took time and memory quadratic in the depth (a 360 KB file: 55 s, 1.9 GB). Each
    object read to its end was remembered by a tuple of the steps to it, each finding
    copied its steps at each level on the way up, and a value built under a deep pointer
    copied the pointer's steps for each level it built. The peak must grow like the
    depth: four times as deep costs about four times as much, not sixteen."""
    out = bounded_run(
        """
        import pathlib, tracemalloc
        import orjson
        from jsonbudget import SpillStore
        from jsonbudget._agents.reader import ResultReader

        store = SpillStore(pathlib.Path(TMP))
        for n in (2000, 8000):
            data = b'{"a":' * n + b"1" + b"}" * n
            for depth in (n - 1, n // 2):
                reader = ResultReader(spill=store, max_bytes=16384)
                ref = reader.reference(store.put(data, label="deep"), principal="p")
                tracemalloc.start()
                page = reader.read(ref, "/a" * depth, principal="p")
                peak = tracemalloc.get_traced_memory()[1]
                tracemalloc.stop()
                items = orjson.loads(page.data)["items"]
                assert items[0]["key"] == "a", items
                held = max(len(place) for _, place in reader._repeats)
                print(n, depth == n - 1, peak, held)
        """.replace("TMP", repr(str(tmp_path))),
        memory=1 << 30,
        timeout=120,
    )
    rows = [line.split() for line in out.splitlines()]
    peaks = {(int(n), full): int(peak) for n, full, peak, _ in rows}
    for full in ("True", "False"):
        small, large = peaks[2000, full], peaks[8000, full]
        assert large < 6 * small, (full, small, large)
        assert large < 8000 * 2048, (full, large)  # a few hundred bytes a level
    # The reader remembers each object it read to its end by a few bytes, whatever its
    # depth (it kept the steps to it: up to 7,999).
    assert max(int(held) for *_, held in rows) <= 64


def test_regression_a_nothing_stands_error_quotes_a_bounded_part_of_the_pointer(
    tmp_path: Path,
) -> None:
    """The error for a pointer where nothing stands quoted the whole pointer: a tool
    with max_bytes=4096 sent a 1,000,077-byte error. It quotes 200 characters at most,
    and counts the rest."""
    reader, ref = spilled(tmp_path, b'{"a": 1}')
    with pytest.raises(SpillError) as caught:
        reader.read(ref, "/" + "k" * 1_000_000, principal="p")
    message = str(caught.value)
    assert len(message) < 300
    assert "…[999801 more chars]" in message
    with pytest.raises(SpillError, match=r"^nothing stands at '/b' in the spilled result$"):
        reader.read(ref, "/b", principal="p")


def test_regression_a_pointer_longer_than_a_cursor_position_reads_in_pages(
    tmp_path: Path,
) -> None:
    """A value under a key of 70,000 characters could not be read by its pointer: its
    first page's continuation cursor held the whole pointer, past the largest position a
    cursor store takes, and the read raised LimitError naming `position`. A long pointer
    is bound to its cursors by its digest: every page reads, and a cursor of another
    long pointer is refused."""
    key = "k" * 70_000
    reader, ref = spilled(tmp_path, orjson.dumps({key: list(range(5000)), key[1:]: [1] * 500}))
    items: list[Any] = []
    cursor = None
    pages = 0
    while True:
        page = reader.read(ref, "/" + key, cursor, principal="p")
        assert len(page.data) <= 2000
        envelope = orjson.loads(page.data)
        items += envelope["items"]
        pages += 1
        cursor = envelope["next_cursor"]
        if cursor is None:
            break
    assert items == list(range(5000))
    assert pages > 1
    first = reader.read(ref, "/" + key, principal="p").next_cursor
    assert first is not None
    with pytest.raises(InvalidCursor, match="another read"):
        reader.read(ref, "/" + key[1:], first, principal="p")


def test_regression_a_gone_spilled_result_is_not_named_to_the_model(tmp_path: Path) -> None:
    """With a reader the spill file's name never reaches the model, but reading a result
    whose file expired raised the store's error, which names the file (its label and
    sha256). The error says the result is gone; the store's own is its cause."""
    reader, ref = spilled(tmp_path, b'{"a": [1, 2]}')
    (name,) = [p.name for p in (tmp_path / "spill").iterdir()]
    (tmp_path / "spill" / name).unlink()
    for pointer in ("", "/a"):
        with pytest.raises(SpillError) as caught:
            reader.read(ref, pointer, principal="p")
        assert name not in str(caught.value)
        assert name.split(".")[1] not in str(caught.value)
        assert "cannot be read (expired, evicted" in str(caught.value)
        assert name in str(caught.value.__cause__)


def _listed_keys(reader: ResultReader, ref: str, pointer: str) -> list[str]:
    """The members a read of an object lists, followed to its end: each key as shown, or
    the key pointer of a member whose key does not show."""
    shown: list[str] = []
    cursor = None
    while True:
        page = reader.read(ref, pointer, cursor, principal="alice")
        env = orjson.loads(page.data)
        assert len(page.data) <= reader.max_bytes
        shown += [m.get("key", m.get("key_pointer", "?")) for m in env["items"]]
        if page.complete:
            return shown
        cursor = page.next_cursor


@pytest.mark.parametrize(
    ("max_bytes", "doc_pointer"),
    [
        (521, ({"p" * 25: {"k" * 400: 1, "b": 2}}, "/" + "p" * 25)),
        (
            613,
            (
                {"p" * 40: {"a": None, "k" * 1327: 1.5, "b": True, "z" * 2000: False}},
                "/" + "p" * 40,
            ),
        ),
    ],
)
def test_regression_members_beside_a_cut_listed_member_are_not_dropped(
    tmp_path: Any, max_bytes: int, doc_pointer: tuple[Any, str]
) -> None:
    """A page whose first member was cut with its key and value pointers was rebuilt
    from that member alone (to show both pointers whole), though the members after it
    fit beside it: they vanished, unreported, and the cursor went on past them (a
    one-page object said complete without "b")."""
    doc, pointer = doc_pointer
    store = SpillStore(tmp_path)
    reader = ResultReader(spill=store, max_bytes=max_bytes)
    ref = reader.reference(store.put(orjson.dumps(doc), label="t"), principal="alice")
    listed = _listed_keys(reader, ref, pointer)
    inner = next(iter(doc.values()))
    assert len(listed) == len(inner)
    for key, shown in zip(inner, listed, strict=True):
        # Whole, by its key pointer, or cut (and reported) where even that does not fit.
        head, cut, _ = shown.partition("…[truncated")
        assert shown == key or shown.startswith(pointer + "/~k") or (cut and key.startswith(head))


def test_regression_a_pointer_through_many_shown_keys_is_bounded(tmp_path: Any) -> None:
    """Each key written as a page shows it cut was found by a parse of the result to its
    object: a pointer through thousands of them cost depth squared (4,000: 20 s). At most
    `MAX_SHOWN_KEYS` are resolved; one more reads as naming nothing."""
    from jsonbudget._agents.reader import MAX_SHOWN_KEYS

    key = "k" * 300
    doc: Any = "leaf"
    for _ in range(MAX_SHOWN_KEYS + 1):
        doc = {key: doc}
    store = SpillStore(tmp_path)
    reader = ResultReader(spill=store, max_bytes=2000)
    ref = reader.reference(store.put(orjson.dumps(doc), label="t"), principal="alice")
    shown = "/" + "k" * 10 + "…[key truncated: 290 more chars]"
    within = orjson.loads(reader.read(ref, shown * MAX_SHOWN_KEYS, principal="alice").data)
    assert within["kind"] == "object"  # the innermost {key: "leaf"}
    with pytest.raises(SpillError, match="nothing stands"):
        reader.read(ref, shown * (MAX_SHOWN_KEYS + 1), principal="alice")

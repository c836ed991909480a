"""Regressions from the r20 memory probe: codecs that hold back unbounded input, and
strided views copied whole."""

from __future__ import annotations

import array
import codecs
import contextlib
import encodings
import encodings.aliases
import io
import pkgutil
import tracemalloc
from typing import Any

import pytest

from jsonbudget import BoundedReader, read_bounded_text
from jsonbudget.errors import LimitError

#: Valid input fed to each codec: this many bytes of it, a cut falling anywhere.
PROBE_BYTES = 4096
#: The most a codec that is read may hold back at a cut: one character or escape
#: (raw-unicode-escape's "\U0001f600" is 10 bytes; a "\N{...}" name is under 100).
MOST_HELD = 128
#: Texts whose encodings make up the valid input, with ASCII without a "." (an idna
#: label), non-ASCII runs (a utf-7 base64 run) and escapes among them.
PROBE_TEXTS = (
    "a" * PROBE_BYTES,
    "ab.cd " * PROBE_BYTES,
    "€" * PROBE_BYTES,
    "é" * PROBE_BYTES,
    "bücher日本" * PROBE_BYTES,
    "aé€😀\\n\n" * PROBE_BYTES,
)


def _stdlib_text_codecs() -> set[str]:
    names = set(encodings.aliases.aliases.values())
    names |= {module.name for module in pkgutil.iter_modules(encodings.__path__)}
    found = set()
    for name in names:
        try:
            info = codecs.lookup(name)
        except LookupError:  # platform-only codecs (mbcs, oem) and helper modules
            continue
        if getattr(info, "_is_text_encoding", True):
            found.add(info.name)
    return found


def _valid_inputs(encoding: str) -> list[bytes]:
    inputs = []
    for text in PROBE_TEXTS:
        # Not every text is encodable (idna refuses a 64-byte label).
        with contextlib.suppress(UnicodeError):
            # Whole texts: a cut encoding may end inside a utf-7 run, which is invalid.
            inputs.append(text[: PROBE_BYTES * 2].encode(encoding))
    # idna decodes a long ASCII label it will not encode.
    inputs.append(b"a" * PROBE_BYTES * 2)
    valid = []
    for data in inputs:
        try:
            data.decode(encoding)
        except UnicodeError:
            continue
        valid.append(data)
    return valid


def _holds_back(encoding: str) -> bool:
    """Whether the incremental decoder, fed PROBE_BYTES of valid input in 64-byte chunks,
    returns anything other than a prefix of the text those bytes stand for."""
    for data in _valid_inputs(encoding):
        head = data[:PROBE_BYTES]
        decoder = codecs.getincrementaldecoder(encoding)()
        try:
            out = "".join(decoder.decode(head[i : i + 64]) for i in range(0, len(head), 64))
        except UnicodeError:
            continue  # a cut the input's own text cannot be split at (utf-16 surrogates)
        whole = data.decode(encoding)
        if not whole.startswith(out):
            return True  # punycode: each chunk decoded as a whole text
        if len(out.encode(encoding)) < PROBE_BYTES - MOST_HELD:
            return True
    return False


def test_regression_codecs_holding_back_unbounded_input_are_refused() -> None:
    """Regression: idna held 16 MiB of a label and returned "", and utf-7 a base64 run;
    only punycode was refused. Every stdlib text codec is checked: those refused really
    hold back, those read return a prefix of nearly max_bytes."""
    text_codecs = _stdlib_text_codecs()
    assert {"utf-8", "idna", "utf-7", "punycode", "unicode-escape"} <= text_codecs
    refused = set()
    for encoding in sorted(text_codecs):
        try:
            BoundedReader(10, encoding=encoding)
        except LimitError:
            refused.add(encoding)
    holding = {encoding for encoding in text_codecs if _holds_back(encoding)}
    assert refused == holding
    assert {"idna", "utf-7", "punycode"} <= refused
    for encoding in sorted(text_codecs - refused):
        for data in _valid_inputs(encoding):
            if len(data) <= PROBE_BYTES:
                continue
            try:
                out = read_bounded_text(io.BytesIO(data), PROBE_BYTES, encoding=encoding)
            except ValueError:
                continue  # the cut splits something the codec refuses (utf-16 pairs)
            assert not out.complete
            assert out.bytes_returned >= PROBE_BYTES - MOST_HELD, encoding
            assert data.decode(encoding).startswith(out.text), encoding


@pytest.mark.parametrize("encoding", ["idna", "IDNA", "utf-7", "utf7", "punycode"])
def test_regression_idna_and_utf7_refused_before_reading(encoding: str) -> None:
    """Regression: idna returned "" for 1,000 valid bytes (bytes_returned=0)."""
    source = io.BytesIO(b"a" * 1000)
    with pytest.raises(LimitError, match="encoding"):
        read_bounded_text(source, 100, encoding=encoding)
    assert source.tell() == 0


def _traced_read(source: Any, max_bytes: int) -> tuple[str, int]:
    tracemalloc.start()
    try:
        out = read_bounded_text(source, max_bytes, encoding="latin-1")
        peak = tracemalloc.get_traced_memory()[1]
    finally:
        tracemalloc.stop()
    assert not out.complete
    assert out.bytes_read == max_bytes + 1
    return out.text, peak


def _strided_views() -> list[memoryview]:
    big = bytes(range(256)) * (80 * 1024)  # 20 MiB
    return [
        memoryview(big)[::2],  # 1-d, one byte an item
        memoryview(big).cast("B", (len(big) // 1024, 1024))[::2],  # 2-d, 1 KiB rows
        memoryview(big).cast("B", (len(big) // 64, 4, 16))[::3],  # 3-d
        memoryview(array.array("H", big))[::3],  # two bytes an item
        memoryview(array.array("I", big))[1::2],  # four bytes an item, offset
    ]


@pytest.mark.parametrize("index", range(5))
def test_regression_strided_view_copied_only_as_far_as_read(index: int) -> None:
    """Regression: a strided memoryview was copied whole (a 50 MB view cost 100 MB to
    read 65,537 bytes). The copy now stops at max_bytes + 1 bytes' worth of rows, and the
    text is still the prefix of view.tobytes()."""
    view = _strided_views()[index]
    assert not view.c_contiguous
    assert view.nbytes > 5 * 1024 * 1024
    max_bytes = 65536
    expected = view.tobytes()[:max_bytes].decode("latin-1")
    for source in (view, [view]):
        text, peak = _traced_read(source, max_bytes)
        assert text == expected
        assert peak < 8 * max_bytes, (peak, view.nbytes)


@pytest.mark.parametrize("max_bytes", [1, 2, 3, 5, 7, 8, 9, 100])
def test_a_strided_view_cut_mid_row_reads_the_tobytes_prefix(max_bytes: int) -> None:
    base = bytes(range(48))
    views = [
        memoryview(base)[::2],
        memoryview(base).cast("B", (12, 4))[::2],
        memoryview(array.array("H", base))[::3],
    ]
    for view in views:
        whole = view.tobytes()
        for source in (view, [view], [view, view]):
            out = read_bounded_text(source, max_bytes, encoding="latin-1")
            data = whole * (2 if isinstance(source, list) and len(source) == 2 else 1)
            assert out.text == data[:max_bytes].decode("latin-1")
            assert out.complete == (len(data) <= max_bytes)


def test_a_strided_view_cut_by_the_source_cap_is_not_complete() -> None:
    """The copy keeps a byte past the cap, so a view cut there is not taken as ended."""
    view = memoryview(b"a-b-c-d-e-f-")[::2]
    for source in (view, [view]):
        out = read_bounded_text(source, 10, max_source_bytes=3)
        assert (out.text, out.complete, out.source_bytes_read) == ("abc", False, 3)
        out = read_bounded_text(source, 10, max_source_bytes=5)
        assert (out.text, out.complete) == ("abcde", False)
        out = read_bounded_text(source, 10, max_source_bytes=6)
        assert (out.text, out.complete) == ("abcdef", True)


def test_regression_an_empty_view_of_several_dimensions_is_empty_text() -> None:
    """A view with a 0 in its shape (an empty NumPy slice of several dimensions) raised
    memoryview's TypeError ("cannot cast view with zeros in shape"): it holds no bytes."""
    np = pytest.importorskip("numpy")
    for empty in (np.zeros((0, 7))[:, ::2], np.zeros((3, 0)), np.zeros((0, 2, 2))):
        got = read_bounded_text(empty, 100)
        assert (got.text, got.complete, got.bytes_read) == ("", True, 0)

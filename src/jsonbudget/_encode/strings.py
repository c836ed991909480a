"""String prefixes: the longest prefix of a string whose JSON encoding fits a room.

`cut_string` is the cut of a string with its marker. Compiled, it escapes the prefix in
one pass, exactly as orjson escapes (the tests compare the two on random text), straight
into the output: orjson reserves several bytes per character on every call and must be
called on slices, which cost five times one call's work and three times the output in
memory. Its Python twin, and `prefix`, encode every character with orjson: the string
is sliced before it is encoded (a character is at least one byte, so ``room`` characters
always suffice) and encoded a slice at a time into one buffer, so the memory stays in
proportion to the output and orjson never converts the whole string. The slice that
overflows is cut at a byte boundary found in its own encoding, backed up to the start
of a character and out of any escape, so the output is never parsed again.
"""

from __future__ import annotations

import re
from collections.abc import Callable

import orjson

__all__ = ["SURROGATE", "cut_string", "encode_piece", "prefix", "py_cut_string", "replaced_note"]

SURROGATE = re.compile("[\ud800-\udfff]")


def replaced_note(replaced: int) -> bytes:
    """The note that ends a string whose *replaced* lone surrogates were each written as
    U+FFFD: no UTF-8 text holds one."""
    return f"…[replaced: {replaced} lone surrogates]".encode()


_dumps = orjson.dumps
_JSONError = orjson.JSONEncodeError
_CONTINUATION = bytes(range(0x80, 0xC0))  # UTF-8 bytes 10xxxxxx
_CONTINUATION_TAG = 0x80  # a continuation byte's top two bits, 10xxxxxx
_ASCII_END = 0x80  # bytes below it are one-byte (ASCII) characters
_LEAD3 = 0xE0  # lead bytes from 1110xxxx on start a 3-byte character
_LEAD4 = 0xF0  # lead bytes from 11110xxx on start a 4-byte character
_BACKSLASH = 0x5C  # "\\"
_ESCAPE_U = 0x75  # "u", as in \uXXXX
#: Characters encoded per orjson call: orjson reserves several output bytes per input
#: character, and its bytes keep that capacity, so slices keep the peak near the output.
_SLICE_CHARS = 4096


def encode_piece(piece: str) -> tuple[memoryview, int]:
    """*piece* encoded as JSON string content (no quotes), and lone surrogates replaced."""
    try:
        return memoryview(_dumps(piece))[1:-1], 0
    except _JSONError:  # lone surrogates: each becomes U+FFFD, and the caller says how many
        clean, replaced = SURROGATE.subn("\ufffd", piece)
        return memoryview(_dumps(clean))[1:-1], replaced


def prefix(s: str, room: int, head: bytes = b"") -> tuple[bytearray, int, int]:
    """The longest prefix of *s* whose encoded content fits *room* bytes.

    Returns *head* followed by the content (without quotes), the characters kept, and
    how many lone surrogates the kept characters held (each written as U+FFFD). Costs
    about *room* bytes of encoding, whatever the length of *s*.
    """
    buf = bytearray(head)
    room += len(head)
    pos = replaced = 0
    n = len(s)
    ascii_ = s.isascii()  # O(1) on CPython
    while pos < n:
        left = room - len(buf)
        if left <= 0:
            break
        # ASCII mostly encodes to a byte a character; other text to two or more.
        take = min(n - pos, _SLICE_CHARS, left if ascii_ else max(left // 2, 1))
        piece = s[pos : pos + take]
        data, bad = encode_piece(piece)
        if len(data) <= left:
            buf += data
            pos += take
            replaced += bad
            continue
        last = bytes(data)  # once a call: the slice that overflows, at most a few KB
        cut = _boundary(last, left)
        kept = _chars(last, cut)
        buf += memoryview(last)[:cut]
        if bad:
            replaced += len(SURROGATE.findall(piece, 0, kept))
        pos += kept
        break
    return buf, pos, replaced


def py_cut_string(
    s: str, room: int, mark: Callable[[int], tuple[bytes, bytes]], head_room: int, tail_room: int
) -> tuple[bytes, int, int]:
    """``head + content + tail``: the content of the longest prefix of *s* that fits *room*
    bytes, ``(head, tail) = mark(kept)`` (at most *head_room* and *tail_room* bytes); with
    the characters kept and the lone surrogates replaced."""
    content, kept, replaced = prefix(s, room)
    head, tail = mark(kept)
    if len(head) > head_room or len(tail) > tail_room:
        raise ValueError("cut_string(): mark() must return (head, tail) bytes within their rooms")
    return b"".join((head, content, tail)), kept, replaced


def _boundary(data: bytes, end: int) -> int:
    """The largest cut ``<= end`` of encoded content that ends between two characters."""
    # Back up to the lead byte of the last character if that character is incomplete.
    i = end - 1
    while i > 0 and data[i] & 0xC0 == _CONTINUATION_TAG:
        i -= 1
    lead = data[i]
    width = 1 if lead < _ASCII_END else 2 if lead < _LEAD3 else 3 if lead < _LEAD4 else 4
    if i + width > end:
        end = i
    # An escape is at most 6 bytes (\u001f): look for its backslash just before the cut.
    b = data.rfind(b"\\", max(end - 6, 0), end)
    if b < 0:
        return end
    run = 1  # backslashes ending at b; an odd run means b starts an escape
    while b - run >= 0 and data[b - run] == _BACKSLASH:
        run += 1
    if run % 2 == 0:
        return end  # b closes an escaped backslash, which ends before the cut
    width = 6 if b + 1 < len(data) and data[b + 1] == _ESCAPE_U else 2  # \uXXXX or \n
    return b if b + width > end else end


def _chars(data: bytes, end: int) -> int:
    """Characters in ``data[:end]``, encoded content that ends between two characters."""
    head = data[:end]
    count = len(head.translate(None, _CONTINUATION))  # one lead byte per character
    if b"\\" not in head:
        return count
    # Escapes are read left to right, so escaped backslashes pair off from the left.
    pairs = head.count(b"\\\\")
    rest = head.replace(b"\\\\", b"")
    unicode = rest.count(b"\\u")
    others = rest.count(b"\\") - unicode
    return count - pairs - others - 5 * unicode


cut_string: Callable[
    [str, int, Callable[[int], tuple[bytes, bytes]], int, int], tuple[bytes, int, int]
]
try:
    from ._speedups import cut_string
except ImportError:  # pragma: no cover - built without a C compiler
    cut_string = py_cut_string

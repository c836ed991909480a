"""File sources whose file changes while a page is read (r21): the identity taken when
a page opened the file was never checked after its reads, so a file rewritten in place
or truncated mid-page gave items made of two versions (or cut short), served without an
error, the last page even ``complete``.

The changes are made at a chosen point, not by a racing thread: from the page
builder's ``fill_from`` (items given, more to read), from the consumer of ``open()``
between items, or right after the identity is taken when the file is opened (an
``os.fstat`` hook: nothing read yet). Each rewrite sets an mtime of its own, so that it
shows whatever the file system's timestamp granularity."""

from __future__ import annotations

import errno
import gzip
import json
import os
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

import pytest

from jsonbudget import (
    JsonArrayFileSource,
    JsonLinesSource,
    Limits,
    MemoryCursorStore,
    Scope,
    paginate,
)
from jsonbudget.errors import InvalidCursor
from jsonbudget.typing import Position
from tests.limited import bounded_run
from tests.test_sources import roundtrip

#: Items per version: a few hundred KB, many reads of the file.
N = 6000


def items(tag: str) -> list[dict[str, str]]:
    """The items of one version: each names its version in both fields, so an item made
    of two versions (or of a cut line) shows."""
    return [{"id": f"{tag}{i:07d}", "v": tag.lower() * 40} for i in range(N)]


def content(kind: str, tag: str) -> bytes:
    """Version *tag* as JSON Lines or a JSON array, or gzip of JSON Lines. Plain versions
    are the same size: their timestamps, not their sizes, tell them apart."""
    values = items(tag)
    if kind == "array":
        return json.dumps(values).encode()
    text = "".join(json.dumps(v) + "\n" for v in values).encode()
    if kind == "gzip":
        # Not compressible to one read: a hex tail of the same bytes in every version.
        tail = "".join(json.dumps({"pad": os.urandom(64).hex()}) + "\n" for _ in range(4000))
        return gzip.compress(text + tail.encode(), mtime=0)
    return text


def source(kind: str, path: Path) -> JsonLinesSource | JsonArrayFileSource:
    if kind == "array":
        return JsonArrayFileSource(path)
    return JsonLinesSource(path)


_stamp = [1_700_000_000 * 10**9]


def rewrite(path: Path, data: bytes) -> None:
    """Write *data* over the file in place (same inode), with an mtime never used before.
    No call here takes an ``fstat`` (the hooks below watch it)."""
    fd = os.open(path, os.O_WRONLY)
    try:
        os.write(fd, data)
        os.ftruncate(fd, len(data))
    finally:
        os.close(fd)
    _stamp[0] += 10**9
    os.utime(path, ns=(_stamp[0], _stamp[0]))


def valid(got: list[Any]) -> bool:
    """Whether every item is a whole item of one version (ignoring a gzip file's pad)."""
    ok = {json.dumps(v) for tag in "AB" for v in items(tag)}
    return all("pad" in v or json.dumps(v) in ok for v in got)


class Collector:
    """A page builder (``fill_from``) that takes every item and calls *hook* after the
    first run it is given: the source has then items on the page and more to read."""

    def __init__(self, hook: Callable[[], None] | None = None) -> None:
        self.items: list[Any] = []
        self.hook = hook

    def fill_from(self, seq: list[Any], start: int = 0) -> tuple[bool, int]:
        self.items += seq[start:]
        if self.hook is not None:
            hook, self.hook = self.hook, None
            hook()
        return False, len(seq)


class Taking:
    """A page builder that takes *n* items, then is full."""

    def __init__(self, n: int) -> None:
        self.items: list[Any] = []
        self.n = n

    def fill_from(self, seq: list[Any], start: int = 0) -> tuple[bool, int]:
        k = min(self.n - len(self.items), len(seq) - start)
        self.items += seq[start : start + k]
        return start + k < len(seq), start + k


def changes(kind: str, path: Path, how: str) -> Callable[[], None]:
    """What the file undergoes mid-page: a rewrite in place, or a copytruncate."""
    if how == "truncate":
        return lambda: rewrite(path, b"")
    other = content(kind, "B")
    return lambda: rewrite(path, other)


@pytest.mark.parametrize(
    ("kind", "how"),
    [("lines", "rewrite"), ("lines", "truncate"), ("array", "rewrite"), ("gzip", "rewrite")],
)
def test_regression_first_page_changed_after_items_is_refused(
    tmp_path: Path, kind: str, how: str
) -> None:
    """A first page whose file changes once items are on it went on reading the other
    version (or stopped at the truncation) and returned, complete, items of two versions.
    The page cannot take back what it holds: `OSError` (EAGAIN) naming the file."""
    path = tmp_path / f"during.{kind}"
    path.write_bytes(content(kind, "A"))
    builder = Collector(changes(kind, path, how))
    with pytest.raises(OSError, match="changed while it was read") as caught:
        source(kind, path).fill(builder, None)
    assert caught.value.errno == errno.EAGAIN
    assert caught.value.filename == str(path)
    assert valid(builder.items)  # what went on the page before the change is whole


@pytest.mark.parametrize("kind", ["lines", "array", "gzip"])
def test_regression_resumed_page_changed_mid_page_is_invalid_cursor(
    tmp_path: Path, kind: str
) -> None:
    """A page resumed at a cursor whose file changes while it is read: InvalidCursor, as
    for a change between pages (it gave items of two versions)."""
    path = tmp_path / f"during.{kind}"
    path.write_bytes(content(kind, "A"))
    src = source(kind, path)
    first = Taking(10)
    more, after = src.fill(first, None)
    assert more
    assert first.items == items("A")[:10]
    builder = Collector(changes(kind, path, "rewrite"))
    with pytest.raises(InvalidCursor, match="changed while the page was read"):
        src.fill(builder, roundtrip(after))
    assert valid(builder.items)


def read_changing(
    it: Iterator[tuple[Any, Position]], path: Path, kind: str, got: list[Any]
) -> None:
    """Take the items of *it* into *got*, the file rewritten once the first is taken."""
    for item, _ in it:
        if not got:
            rewrite(path, content(kind, "B"))
        got.append(item)


@pytest.mark.parametrize("kind", ["lines", "array"])
def test_regression_open_changed_between_items_raises(tmp_path: Path, kind: str) -> None:
    """`open()` read on into the other version; now it raises at its next read: an
    `OSError` from the start (the items yielded are the caller's), `InvalidCursor` from a
    position."""
    path = tmp_path / f"during.{kind}"
    path.write_bytes(content(kind, "A"))
    src = source(kind, path)
    got: list[Any] = []
    with pytest.raises(OSError, match="changed while it was read") as caught:
        read_changing(src.open(None), path, kind, got)
    assert caught.value.errno == errno.EAGAIN
    assert valid(got)
    assert 0 < len(got) < N

    path.write_bytes(content(kind, "A"))
    (_, position), *_ = src.open(None, limit_hint=0)
    got = []
    with pytest.raises(InvalidCursor, match="changed while the page was read"):
        read_changing(src.open(roundtrip(position)), path, kind, got)
    assert valid(got)
    assert 0 < len(got) < N


def hooked_fstat(path: Path, react: Callable[[int], bool]) -> Callable[..., os.stat_result]:
    """An ``os.fstat`` that, after taking the stat of *path*'s file (its identity, the
    first time a page opens it), rewrites it to the other version when ``react(calls)``
    says so."""
    real = os.fstat
    target = os.stat(path).st_ino
    calls, tags = [0], ["A"]
    kind = path.suffix.lstrip(".")

    def fstat(fd: Any) -> os.stat_result:
        st = real(fd)
        if st.st_ino == target:
            calls[0] += 1
            if react(calls[0]):
                tags[0] = "B" if tags[0] == "A" else "A"
                rewrite(path, content(kind, tags[0]))
        return st

    return fstat


@pytest.mark.parametrize("kind", ["lines", "array", "gzip"])
def test_regression_first_page_changed_before_items_is_read_again(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, kind: str
) -> None:
    """A file rewritten once, right after a first page took its identity: the page read
    the new version under the old identity, so the next page was refused though the file
    no longer changed. Now the first page opens it again: every page, of the new
    version."""
    path = tmp_path / f"during.{kind}"
    path.write_bytes(content(kind, "A"))
    monkeypatch.setattr(os, "fstat", hooked_fstat(path, lambda calls: calls == 1))
    store, scope, cursor = MemoryCursorStore(), Scope("t", {}), None
    got: list[Any] = []
    for _ in range(100):
        page = paginate(
            source(kind, path), scope=scope, cursor=cursor, store=store, limits=Limits(100_000)
        )
        got += page.items
        cursor = page.next_cursor
        if cursor is None:
            break
    assert [v for v in got if "pad" not in v] == items("B")


def test_regression_open_changed_before_items_is_read_again(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """`open()` from the start, its file rewritten before it yielded anything: read again
    from a fresh open, the new version whole, and positions that resume in it."""
    path = tmp_path / "during.lines"
    path.write_bytes(content("lines", "A"))
    monkeypatch.setattr(os, "fstat", hooked_fstat(path, lambda calls: calls == 1))
    pairs = list(JsonLinesSource(path).open(None))
    assert [item for item, _ in pairs] == items("B")
    monkeypatch.undo()
    rest: Iterator[tuple[Any, Position]] = JsonLinesSource(path).open(roundtrip(pairs[9][1]))
    assert next(rest)[0] == items("B")[10]


@pytest.mark.parametrize("kind", ["lines", "array", "gzip"])
def test_regression_first_page_always_changing_gives_up_after_three_opens(
    kind: str, tmp_path: Path
) -> None:
    """A file that changes at every read: the first page is read from 3 fresh opens, then
    an `OSError` (EAGAIN) says so and names the file. In a child, bounded: a retry that
    never gave up would hang."""
    out = bounded_run(
        f"""
        import errno, os
        from pathlib import Path
        from jsonbudget import Limits, MemoryCursorStore, Scope, paginate
        from tests.test_regression_r21_files import content, hooked_fstat, source

        path = Path({str(tmp_path)!r}) / "during.{kind}"
        path.write_bytes(content("{kind}", "A"))
        opens = []
        os.fstat = hooked_fstat(path, lambda calls: opens.append(calls) is None)
        try:
            paginate(source("{kind}", path), scope=Scope("t", {{}}),
                     store=MemoryCursorStore(), limits=Limits(100_000))
        except OSError as exc:
            assert exc.errno == errno.EAGAIN, exc
            assert exc.filename == str(path), exc
            print(exc.strerror)
        else:
            print("served")
        """,
        timeout=120,
    )
    assert out.strip() == "the file changed while it was read, 3 times"

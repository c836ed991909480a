"""File sources on special and hostile inputs: blank-line runs under a small page, endless
whitespace from a pipe, gzip bombs of blank lines, pipes whose writer stays open, and
procfs files (which say they are empty)."""

from __future__ import annotations

import gzip
import json
import os
import threading
import time
import zlib
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
from jsonbudget._sources import files
from jsonbudget.errors import DecodeError, InvalidCursor
from tests.limited import bounded_run
from tests.test_sources import pages_by_fill, roundtrip, take


def counted_newlines(monkeypatch: pytest.MonkeyPatch) -> list[int]:
    """The sizes of the chunks `files._newlines` is handed from now on."""
    seen: list[int] = []
    real = files._newlines

    def counting(chunk: bytes) -> int:
        seen.append(len(chunk))
        return real(chunk)

    monkeypatch.setattr(files, "_newlines", counting)
    return seen


@pytest.mark.parametrize("blank", [2_000, 16_000])
def test_regression_blank_lines_under_a_small_page_are_counted_once(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, blank: int
) -> None:
    """With a small `limit_hint` a chunk was cut after hint + 1 lines counting blank ones,
    and each pass counted the newlines of all the rest again while taking hint + 1 blank
    lines: a 64 KB file of blank lines cost 20-40 s a page. Every byte is now counted
    once a read, whatever the run of blank lines."""
    path = tmp_path / "blank.jsonl"
    path.write_bytes(b"1\n" + b"\n" * blank + b"2\n")
    seen = counted_newlines(monkeypatch)
    pages = pages_by_fill(JsonLinesSource(path), Limits(1 << 20, max_items=1))
    assert pages == [[1], [2]]
    # Two pages, each reads the file (or its rest) once.
    assert sum(seen) <= 2 * path.stat().st_size, (len(seen), sum(seen))


def test_regression_blank_lines_between_items_are_counted_once(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """Blank lines after every item: each pass takes one item and hint + 1 lines, and
    the lines after the cut were counted (and copied) again at every pass."""
    path = tmp_path / "spaced.jsonl"
    path.write_bytes(b"".join(b"%d\n" % i + b" \n" * 300 for i in range(200)))
    seen = counted_newlines(monkeypatch)
    pages = pages_by_fill(JsonLinesSource(path), Limits(1 << 20, max_items=50))
    assert [len(page) for page in pages] == [50, 50, 50, 50]
    assert [item for page in pages for item in page] == list(range(200))
    # Each page reads from its start to the file's end once: 4 pages, at most 4 reads.
    assert sum(seen) <= 4 * path.stat().st_size, (len(seen), sum(seen))


#: (kind, what comes first, a unit of the endless run and how many to a write, where
#: the run starts, what the error names)
ENDLESS = [
    ("array", b"[", b" ", 65536, 1, "a run of whitespace"),
    ("array", b"[1", b"\n\t \r", 16384, 2, "a run of whitespace"),
    ("array", b"[1,", b" ", 65536, 3, "a run of whitespace"),
    ("lines", b"", b"\n", 65536, 0, "a run of blank lines"),
    ("lines", b"1\n", b" \r\n", 21845, 2, "a run of blank lines"),
]


@pytest.mark.parametrize("way", ["open", "paginate"])
@pytest.mark.parametrize(
    "case", ENDLESS, ids=["array-open", "array-item", "array-comma", "lines", "lines-spaces"]
)
def test_regression_endless_whitespace_from_a_pipe_ends_with_an_error(
    tmp_path: Path, way: str, case: tuple[str, bytes, bytes, int, int, str]
) -> None:
    """An endless run of whitespace (arrays) or blank lines (JSON Lines) from a pipe was
    read forever: only an item passed over counted against MAX_PASS_OVER. The run now
    counts against it too (a lower cap here, set in the child), with the same error at
    the run's start."""
    kind, head, unit, times, at, what = case
    fifo = tmp_path / "endless"
    os.mkfifo(fifo)
    out = bounded_run(
        f"""
        import threading
        from jsonbudget import (JsonArrayFileSource, JsonLinesSource, Limits,
                                MemoryCursorStore, Scope, paginate)
        from jsonbudget._sources import files
        from jsonbudget.errors import DecodeError
        files.MAX_PASS_OVER = 1 << 20
        written = 0
        def write():
            global written
            block = {unit!r} * {times}
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
        source = cls({str(fifo)!r})
        error = None
        try:
            if {way!r} == "open":
                for _ in source.open(None):
                    pass
            else:
                paginate(source, scope=Scope("t", {{}}), store=MemoryCursorStore(),
                         limits=Limits(4096, max_items=1))
        except DecodeError as exc:
            error = exc
        writer.join()
        print("offset", error.offset)
        print(error)
        print("written KiB", written >> 10)
        """,
        timeout=30,
    )
    lines = out.splitlines()
    assert lines[0] == f"offset {at}"
    assert f"{what} is longer than 1048576 bytes in a stream whose end is not known" in lines[1]
    written = int(lines[2].split()[-1])
    # The cap and a few reads in flight, not more. Only whole writes are counted: the
    # write the reader stopped inside (one block) may be all that passed the cap.
    block_kib = -(-len(unit) * times // 1024)
    assert 1024 - block_kib <= written < 1024 + 1024


def _member(block: bytes, times: int) -> bytes:
    """One gzip member of *block* repeated *times* times, compressed."""
    c = zlib.compressobj(9, zlib.DEFLATED, 31)
    return b"".join(c.compress(block) for _ in range(times)) + c.flush()


@pytest.mark.parametrize("way", ["open", "paginate"])
@pytest.mark.parametrize("kind", ["array", "lines"])
def test_regression_a_gzip_bomb_of_blank_lines_stops_at_the_cap(
    tmp_path: Path, way: str, kind: str
) -> None:
    """A small gzip file that inflates to gigabytes of blank lines (or whitespace) cost
    minutes a page: blank lines and whitespace were not counted against MAX_PASS_OVER,
    which gzip streams have. Here 64 MiB of them from a file of about 64 KiB, against a
    cap of 4 MiB set in the child: refused at the cap, at the run's start."""
    if kind == "array":
        head, filler, tail, at = b"[1,", b" ", b"2]", 3
    else:
        head, filler, tail, at = b'{"a":1}\n', b"\n", b'{"a":2}\n', 8
    member = _member(filler * (1 << 20), 16)
    path = tmp_path / ("bomb.json.gz" if kind == "array" else "bomb.jsonl.gz")
    path.write_bytes(gzip.compress(head) + member * 4 + gzip.compress(tail))
    assert path.stat().st_size < 1 << 17
    what = "a run of whitespace" if kind == "array" else "a run of blank lines"
    out = bounded_run(
        f"""
        from jsonbudget import (JsonArrayFileSource, JsonLinesSource, Limits,
                                MemoryCursorStore, Scope, paginate)
        from jsonbudget._sources import files
        from jsonbudget.errors import DecodeError
        files.MAX_PASS_OVER = 4 << 20
        cls = JsonArrayFileSource if {kind!r} == "array" else JsonLinesSource
        source = cls({str(path)!r})
        try:
            if {way!r} == "open":
                print(len(list(source.open(None))))
            else:
                store, scope, cursor = MemoryCursorStore(), Scope("t", {{}}), None
                while True:
                    page = paginate(source, scope=scope, store=store, cursor=cursor,
                                    limits=Limits(4096, max_items=1))
                    cursor = page.next_cursor
                    if cursor is None:
                        break
                print("complete")
        except DecodeError as exc:
            print("offset", exc.offset)
            print(exc)
        """,
        timeout=30,
    )
    lines = out.splitlines()
    assert lines[0] == f"offset {at}", out
    assert f"{what} is longer than 4194304 bytes" in lines[1]


def _slow_fifo(path: Path, data: bytes, go: threading.Event, closed: list[bool]) -> None:
    """Write *data* to the FIFO at *path*, then wait for *go* (10 s at most) and close."""
    with open(path, "wb") as f:
        f.write(data)
        f.flush()
        go.wait(10)
    closed.append(True)


# JSON Lines' `open` reads a line at a time (`readline`), which never waited past one.
@pytest.mark.parametrize(
    ("kind", "way"), [("array", "open"), ("array", "paginate"), ("lines", "paginate")]
)
def test_regression_a_page_from_a_pipe_does_not_wait_for_a_whole_read(
    tmp_path: Path, way: str, kind: str
) -> None:
    """A page from a pipe waited for a whole read (`read_size`, or the page's budget)
    or for the writer to close, though its items and the look-ahead had come: `tail -f
    log | jsonbudget page --kind jsonl /dev/stdin` never returned. A pipe is now read for
    what has arrived."""
    fifo = tmp_path / "slow"
    os.mkfifo(fifo)
    if kind == "array":
        data = b"[" + b"".join(b'{"i":%d},\n' % i for i in range(5))
        source: Any = JsonArrayFileSource(fifo)
    else:
        data = b"".join(b'{"i":%d}\n' % i for i in range(5))
        source = JsonLinesSource(fifo)
    go = threading.Event()
    closed: list[bool] = []
    writer = threading.Thread(target=_slow_fifo, args=(fifo, data, go, closed))
    writer.start()
    try:
        started = time.monotonic()
        if way == "open":
            items = [item for item, _ in take(source, None, 3)]
        else:
            page = paginate(
                source,
                scope=Scope("t", {}),
                store=MemoryCursorStore(),
                limits=Limits(1 << 20, max_items=2),
            )
            items = list(page.items)
            assert page.next_cursor is not None
        waited = time.monotonic() - started
        assert not closed, "the page waited for the writer to close"
    finally:
        go.set()
        writer.join(20)
    assert items == [{"i": i} for i in range(3 if way == "open" else 2)]
    assert waited < 5


@pytest.mark.parametrize("kind", ["array", "lines"])
def test_regression_a_procfs_files_cursor_says_it_cannot_be_resumed(kind: str) -> None:
    """A procfs file says its size is 0 and yields bytes: the second page's cursor was
    refused as "the position is not a valid file offset", which blamed the cursor. It
    is refused as a pipe's is: the input cannot be read again."""
    if not os.path.exists("/proc/self/comm"):
        pytest.skip("no procfs")
    out = bounded_run(
        f"""
        import json
        from jsonbudget import JsonArrayFileSource, JsonLinesSource
        from jsonbudget.errors import InvalidCursor
        array = {kind!r} == "array"
        with open("/proc/self/comm", "w") as f:
            f.write("[1,2,3,4,5,6]" if array else "7")
        cls = JsonArrayFileSource if array else JsonLinesSource
        source = cls("/proc/self/comm")
        it = source.open(None, limit_hint=1)
        item, position = next(it)
        it.close()
        print(json.dumps(item), position["s"])
        try:
            list(source.open(json.loads(json.dumps(position))))
        except InvalidCursor as exc:
            print(exc)
        """
    )
    lines = out.splitlines()
    assert lines[0] == ("1 0" if kind == "array" else "7 0")
    assert "the input is not a regular file" in lines[1]


def test_an_emptied_files_cursor_is_still_refused_as_changed(tmp_path: Path) -> None:
    """The procfs refusal takes only positions minted where the file said it was empty:
    a file emptied since its cursor was minted has changed."""
    path = tmp_path / "a.jsonl"
    path.write_bytes(b"1\n2\n3\n")
    source = JsonLinesSource(path)
    position = roundtrip(take(source, None, 2)[0][1])
    path.write_bytes(b"")
    with pytest.raises(InvalidCursor, match="changed"):
        list(source.open(position))


@pytest.mark.parametrize("read_size", [8, 16, 64, 4096])
def test_regression_a_short_invalid_item_raises_the_public_decode_error(
    tmp_path: Path, read_size: int
) -> None:
    """An invalid item the scanner gave up on near the window's edge, shorter than
    max_item_bytes, re-raised the private `_TooLong`: logs named a class no user catches
    by name. It is the public DecodeError, the same whatever the read size."""
    path = tmp_path / "bad.json"
    path.write_text('[{"a":}1.2.3x,tru]')
    source = JsonArrayFileSource(path, max_item_bytes=16, read_size=read_size)
    with pytest.raises(DecodeError) as info:
        paginate(source, scope=Scope("u", {}), store=MemoryCursorStore(), limits=Limits(600))
    assert type(info.value) is DecodeError
    assert info.value.offset == 1


@pytest.mark.parametrize("max_items", [None, 1])
def test_regression_a_long_whitespace_line_is_an_item_when_paged(
    tmp_path: Path, max_items: int | None
) -> None:
    """A line of whitespace longer than max_item_bytes is an item (clipped), as open()
    gives it; dropping a run of blank lines in one step dropped it too, unmarked, when
    paged."""
    path = tmp_path / "ws.jsonl"
    path.write_bytes(b" " * 50 + b"\n1\n" + b"\t" * 50 + b"\n2\n")
    source = JsonLinesSource(path, max_item_bytes=10)
    assert [type(item).__name__ for item, _ in source.open(None)] == [
        "Clipped", "int", "Clipped", "int",
    ]  # fmt: skip
    store, scope, cursor = MemoryCursorStore(), Scope("u", {}), None
    items: list[Any] = []
    while True:
        page = paginate(
            source,
            scope=scope,
            store=store,
            cursor=cursor,
            limits=Limits(1000, max_items=max_items),
        )
        items += json.loads(page.to_json())["items"]
        if page.complete:
            break
        cursor = page.next_cursor
    assert items[1::2] == [1, 2]
    assert [item[:10] for item in items[0::2]] == [" " * 10, "\t" * 10]
    assert all("[truncated: 40 more bytes]" in item for item in items[0::2])


@pytest.mark.parametrize("read_size", [7, 64, None])
def test_regression_whitespace_to_a_windows_end_after_a_bulk_run(
    tmp_path: Path, read_size: int | None
) -> None:
    """A bulk run's separator took the whitespace after it up to the window's end, and
    the careful path then asked the scanner for a value there: a valid array whose run
    of whitespace crossed a window's end was refused ("expected a value"), for pages
    only (open() reads it), at the default read size too."""
    path = tmp_path / "ws.json"
    newlines = 70_000 if read_size is None else 100
    path.write_bytes(b'["' + b"L" * 150 + b'",[7],' + b"\n" * newlines + b"-820129]")
    source = JsonArrayFileSource(path, read_size=read_size or files.DEFAULT_READ_SIZE)
    assert [item for item, _ in source.open(None)][1:] == [[7], -820129]
    page = paginate(source, scope=Scope("u", {}), store=MemoryCursorStore(), limits=Limits(65536))
    assert page.complete
    assert json.loads(page.to_json())["items"] == ["L" * 150, [7], -820129]

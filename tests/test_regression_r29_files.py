"""r29: reading real-world files.

- An array file's invalid UTF-8 was raised when the read holding it was decoded, before
  any item of that read was parsed: the valid items before it could not be paged, how
  many depending on ``read_size``.
- ``read_bounded_text(gzip=True)`` reported a bad CRC at decoded byte 0: the failing
  inflate call's output, all of a small file, was not counted.
- ``jsonbudget page`` on a pretty-printed JSON object (read as JSON Lines by ``--kind
  auto``) said only "invalid JSON", not that the file was read a line a value nor
  that ``--prefix`` pages an array in it.
- The spill stores refused the `SpillRef` that ``put`` returns; they took its ``.ref``.
"""

from __future__ import annotations

import gzip
import json
from pathlib import Path
from typing import Any

import pytest

from jsonbudget import (
    JsonArrayFileSource,
    JsonLinesSource,
    Limits,
    MemoryCursorStore,
    Scope,
    SpillStore,
    paginate,
    read_bounded_text,
)
from jsonbudget._agents.redis_spill import RedisSpillStore
from jsonbudget._cli.main import main
from jsonbudget.errors import DecodeError, SpillError
from tests.fixtures_redis import RedisServer

READ_SIZES = (1, 7, 64, 100, 4096, 65536)


def _pages(source: JsonArrayFileSource, max_items: int) -> tuple[list[Any], int | None]:
    """The items of the pages served, and the offset of the error that ended them."""
    store, scope, cursor = MemoryCursorStore(), Scope("p", {}), None
    got: list[Any] = []
    while True:
        try:
            page = paginate(
                source,
                scope=scope,
                cursor=cursor,
                store=store,
                limits=Limits(4096, max_items=max_items),
            )
        except DecodeError as exc:
            return got, exc.offset
        got += page.items
        if page.complete:
            return got, None
        cursor = page.next_cursor


def _opened(source: JsonArrayFileSource) -> tuple[list[Any], int | None]:
    got: list[Any] = []
    with pytest.raises(DecodeError, match="not valid UTF-8") as info:  # noqa: PT012 - items first
        for item, _ in source.open(None):
            got.append(item)
    return got, info.value.offset


@pytest.mark.parametrize(
    ("items", "bad", "offset"),
    [
        # The reporter's file: 20 objects, then a string holding 0xff.
        ([b'{"id":%d}' % i for i in range(20)], b'"\xff"', 192),
        # Numbers end near the text's end, where one may go on: not read again past it.
        ([b"%d" % i for i in range(20)], b'"\xff"', 52),
        ([b"%d" % i for i in range(20)], b"\x80", 51),
        # A character cut by the end of the file.
        ([b'"s\xc3\xa9"' for _ in range(20)], b'"\xe2\x82', 122),
    ],
)
def test_regression_bad_utf8_blocked_the_array_items_before_it(
    tmp_path: Path, items: list[bytes], bad: bytes, offset: int
) -> None:
    path = tmp_path / "e.json"
    data = b"[" + b",".join([*items, bad]) + (b"" if bad.endswith(b"\x82") else b',{"id":99}]')
    path.write_bytes(data)
    expected = [json.loads(item) for item in items]
    for read_size in READ_SIZES:
        source = JsonArrayFileSource(path, read_size=read_size)
        assert _opened(source) == (expected, offset), read_size
        # A page that reaches the bad bytes (as an item or its look-ahead) raises; the
        # pages before it are served, whatever the read size.
        assert _pages(source, 5) == (expected[:15], offset), read_size
        assert _pages(source, 1) == (expected[:19], offset), read_size


def test_regression_bad_utf8_inside_a_clipped_item_is_passed_over(tmp_path: Path) -> None:
    """An item too long to hold is passed over undecoded: bad bytes past its head, held
    back from the text by the read that met them, are walked like the rest of it."""
    path = tmp_path / "long.json"
    path.write_bytes(b'[1,["' + b"x" * 300 + b"\xff" + b"y" * 300 + b'"],2]')
    for read_size in READ_SIZES:
        source = JsonArrayFileSource(path, read_size=read_size, max_item_bytes=100)
        got = [item for item, _ in source.open(None)]
        assert got[0::2] == [1, 2]
        assert got[1].length == 605, read_size


def test_regression_gzip_bad_crc_was_reported_at_byte_0(tmp_path: Path) -> None:
    data = b"".join(b'{"id":%d}\n' % i for i in range(20000))
    packed = gzip.compress(data)
    bad = packed[:-8] + bytes([packed[-8] ^ 1]) + packed[-7:]
    path = tmp_path / "bad.jsonl.gz"
    path.write_bytes(bad)
    with pytest.raises(DecodeError) as lines:
        list(JsonLinesSource(path).open(None))
    assert lines.value.offset == len(data)
    for chunk_bytes in (1, 1000, 64 * 1024, 1 << 30):
        with pytest.raises(DecodeError, match="invalid gzip data") as info:
            read_bounded_text(bad, 10**7, gzip=True, chunk_bytes=chunk_bytes)
        assert info.value.offset == len(data), chunk_bytes
    # A bad length after a first good member: both members' bytes counted.
    first = gzip.compress(b"abc\n" * 10)
    wrong_length = packed[:-4] + bytes([packed[-4] ^ 1]) + packed[-3:]
    with pytest.raises(DecodeError, match="length check") as info:
        read_bounded_text(first + wrong_length, 10**7, gzip=True)
    assert info.value.offset == 40 + len(data)


def test_regression_pretty_json_object_was_called_invalid_json(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    store = str(tmp_path / "cursors.sqlite3")
    obj = tmp_path / "obj.json"
    obj.write_text(json.dumps({"count": 3, "results": [{"id": i} for i in range(3)]}, indent=2))
    for command in (["page", str(obj), "--store", store], ["tune", str(obj)]):
        assert main(command) == 1
        err = capsys.readouterr().err
        assert "read as JSON Lines, as --kind auto reads" in err, err
        assert "it is one JSON object: give --prefix results.item" in err, err
    assert main(["page", str(obj), "--store", store, "--prefix", "results.item"]) == 0
    assert json.loads(capsys.readouterr().out)["items"] == [{"id": i} for i in range(3)]
    # No array in it: --prefix cannot page it.
    flat = tmp_path / "flat.json"
    flat.write_text(json.dumps({"a": {"b": 1}}, indent=2))
    assert main(["page", str(flat), "--store", store]) == 1
    assert "it holds no array for --prefix KEY.item" in capsys.readouterr().err
    # Invalid JSON, or JSON Lines whose later line fails: the data's error alone.
    for name, text in [("bad.json", '{\n "a": [1,\n'), ("later.txt", '{"a": 1}\n{"a":\n')]:
        path = tmp_path / name
        path.write_text(text)
        assert main(["page", str(path), "--store", store]) == 1
        err = capsys.readouterr().err
        assert "invalid JSON" in err, err
        assert "JSON Lines" not in err, err


def _check_store_takes_put_result(store: Any) -> None:
    ref = store.put(b'{"a": [1, 2]}', label="t")
    assert store.read(ref) == store.read(ref.ref) == b'{"a": [1, 2]}'
    assert store.read(ref, 6, 3) == b"[1,"
    with store.open(ref) as stream:
        assert stream.read() == b'{"a": [1, 2]}'
    assert store.get(ref) == store.get(ref.ref)
    assert store.get(ref).ref == ref.ref
    assert store.get(ref).size == ref.size
    for bad in (42, None, b"x", "../../etc/passwd"):
        with pytest.raises(SpillError, match="not a spill reference"):
            store.read(bad)


def test_regression_spill_store_refused_the_ref_put_returned(tmp_path: Path) -> None:
    store = SpillStore(tmp_path / "spill")
    _check_store_takes_put_result(store)
    kept = store.put(b"[1]", label="kept")
    assert store.cleanup(keep=kept).kept_files == 2


def test_regression_redis_spill_store_refused_the_ref_put_returned(
    redis_server: RedisServer,
) -> None:
    _check_store_takes_put_result(RedisSpillStore(redis_server.url, prefix="test:r29:"))

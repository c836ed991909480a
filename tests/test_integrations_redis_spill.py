"""A spill store shared by many processes: RedisSpillStore on a real Redis server."""

from __future__ import annotations

import itertools
import os
import subprocess
import sys
import textwrap
from collections.abc import Iterator
from pathlib import Path

import orjson
import pytest
import redis

from jsonbudget import ResultGate
from jsonbudget._agents.reader import ResultReader
from jsonbudget._agents.redis_spill import RedisSpillStore
from jsonbudget.errors import SpillError
from tests.fixtures_redis import RedisServer, redis_server_process

ROOT = Path(__file__).resolve().parent.parent
SECRET = b"s" * 32


def run(code: str, url: str) -> str:
    """Run *code* in another process (another worker) and return what it printed."""
    setup = f"""
        from jsonbudget import RedisCursorStore, ResultGate
        from jsonbudget._agents.reader import ResultReader
        from jsonbudget._agents.redis_spill import RedisSpillStore
        spill = RedisSpillStore({url!r}, prefix="test:spill:")
        reader = ResultReader(spill=spill, cursors=RedisCursorStore({url!r}, keys={SECRET!r}),
                              max_bytes=2000)
    """
    proc = subprocess.run(
        [sys.executable, "-c", textwrap.dedent(setup) + textwrap.dedent(code)],
        capture_output=True,
        text=True,
        timeout=120,
        env={**os.environ, "PYTHONPATH": str(ROOT / "src")},
        check=False,
    )
    assert proc.returncode == 0, proc.stderr
    return proc.stdout


def test_workers_read_each_others_spilled_results(redis_server: RedisServer) -> None:
    url = redis_server.url
    ref = run(
        """
        rows = [{"row": i, "text": "t" * 30} for i in range(5000)]
        gate = ResultGate(max_bytes=4096, reader=reader, principal="alice")
        out = gate.gate({"rows": rows}, label="search")
        import orjson
        print(orjson.loads(out.data)["spilled"]["ref"])
        """,
        url,
    ).strip()
    got = run(
        f"""
        page = reader.read({ref!r}, "/rows/1234", principal="alice")
        print(page.text)
        """,
        url,
    )
    members = orjson.loads(got)["items"]
    assert {m["key"]: m["value"] for m in members} == {"row": 1234, "text": "t" * 30}
    refused = run(
        f"""
        from jsonbudget.errors import CursorError
        try:
            reader.read({ref!r}, "/rows/1234", principal="mallory")
        except CursorError as exc:
            print(exc.reason)
        """,
        url,
    )
    assert refused.strip() == "scope_principal"
    # A third worker follows the pages of the whole list; they reassemble exactly.
    pages = run(
        f"""
        import orjson
        rows, cursor = [], None
        while True:
            page = reader.read({ref!r}, "/rows", cursor, principal="alice")
            assert len(page.data) <= 2000
            rows += orjson.loads(page.data)["items"]
            cursor = page.next_cursor
            if cursor is None:
                break
        print(len(rows), rows[-1]["row"])
        """,
        url,
    )
    assert pages.split() == ["5000", "4999"]


@pytest.fixture
def spill(redis_server: RedisServer) -> RedisSpillStore:
    return RedisSpillStore(redis_server.url, prefix="test:own:", max_file_bytes=1_000_000)


def test_put_read_get_open_round_trip(spill: RedisSpillStore, redis_server: RedisServer) -> None:
    data = bytes(range(256)) * 3000
    ref = spill.put((data[i : i + 65536] for i in range(0, len(data), 65536)), label="Blob!",
                    media_type="application/octet-stream")  # fmt: skip
    assert ref.ref.startswith("blob.")
    assert ref.size == len(data)
    assert spill.read(ref.ref, 1000, 10) == data[1000:1010]
    assert spill.read(ref.ref, len(data)) == b""
    assert spill.get(ref.ref).size == len(data)
    with spill.open(ref.ref) as f:
        assert f.read() == data
        # Regression: SEEK_DATA met a bare KeyError from the table of bases.
        with pytest.raises(ValueError, match="whence"):
            f.seek(0, os.SEEK_DATA)
        assert f.seek(-10, os.SEEK_END) == len(data) - 10
    client = redis.Redis.from_url(redis_server.url)
    ttl = client.ttl(f"test:own:{ref.ref}")
    assert 0 < ttl <= 24 * 3600


def test_too_large_is_refused_while_writing_and_leaves_nothing(
    spill: RedisSpillStore, redis_server: RedisServer
) -> None:
    client = redis.Redis.from_url(redis_server.url)
    before = set(client.keys("test:own:*"))
    gate = ResultGate(max_bytes=4096, store=spill)
    with pytest.raises(SpillError, match=r"max_file_bytes \(1000000\)"):
        gate.gate({"rows": ({"i": i} for i in itertools.count())})
    assert set(client.keys("test:own:*")) == before


def test_unknown_and_forged_references_are_spill_errors(spill: RedisSpillStore) -> None:
    with pytest.raises(SpillError, match="no spilled result"):
        spill.read("result." + "0" * 64 + ".json")
    with pytest.raises(SpillError, match="not a spill reference"):
        spill.read("../../etc/passwd")
    with pytest.raises(TypeError, match="decode_responses"):
        RedisSpillStore(redis.Redis(decode_responses=True))


def test_reader_over_redis_in_process(spill: RedisSpillStore) -> None:
    reader = ResultReader(spill=spill, max_bytes=1500)
    out = ResultGate(max_bytes=4096, reader=reader).gate(["x" * 100] * 400)
    ref = orjson.loads(out.data)["spilled"]["ref"]
    assert orjson.loads(reader.read(ref, "/399", principal="anonymous").data)["items"] == [
        "x" * 100
    ]


def test_regression_a_temporary_key_lost_mid_write_is_a_spill_error(
    spill: RedisSpillStore, redis_server: RedisServer
) -> None:
    # Found by a tester: APPEND makes a key that is gone anew, so a restart, an expiry or
    # an eviction mid-write stored the result's end alone under the whole one's hash,
    # and a reader followed it to a "complete" half.
    client = redis.Redis.from_url(redis_server.url)
    before = set(client.keys("test:own:*"))

    def chunks() -> Iterator[bytes]:
        for i in range(6):
            if i == 3:  # what an eviction or a restart does to the temporary key
                for key in client.keys("test:own:.tmp-*"):
                    client.delete(key)
            yield str(i).encode() * 10_000

    with pytest.raises(SpillError, match="temporary key was lost"):
        spill.put(chunks(), label="r", media_type="text/plain")
    assert set(client.keys("test:own:*")) == before


def test_regression_a_restart_mid_write_is_a_spill_error() -> None:
    with redis_server_process() as server:
        store = RedisSpillStore(server.url)

        def chunks() -> Iterator[bytes]:
            for i in range(6):
                if i == 3:
                    server.restart()  # no persistence: emptied
                yield str(i).encode() * 100_000

        with pytest.raises(SpillError, match="temporary key was lost"):
            store.put(chunks(), label="r", media_type="text/plain")
        assert redis.Redis.from_url(server.url).keys("*") == []


def test_regression_redis_failures_are_spill_errors() -> None:
    # Found by a tester: a server down reached the gate's caller as redis's own
    # ConnectionError, not the store's documented SpillError.
    with redis_server_process() as server:
        store = RedisSpillStore(server.url)
        ref = store.put(b"[1,2,3]", label="r")
        gate = ResultGate(max_bytes=4096, store=store)
        server.stop()
        with pytest.raises(SpillError, match="Redis failed") as raised:
            gate.gate("x" * 10_000)
        assert isinstance(raised.value.__cause__, redis.RedisError)
        for call in (lambda: store.read(ref.ref), lambda: store.get(ref.ref)):
            with pytest.raises(SpillError, match="Redis failed"):
                call()

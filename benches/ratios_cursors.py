"""Cursor-store measures against the issue's targets.

``run()`` returns rows ``(measure, value, unit, target)``. It starts its own
redis-server (the same code the tests use) and an SQLite file in a temp dir.

Run: ``python benches/ratios.py --only cursors`` (or, from the repository root,
``PYTHONPATH=src:. python3 benches/ratios_cursors.py``).
"""

from __future__ import annotations

import tempfile
import time
from pathlib import Path

from tests.fixtures_redis import counting_client, redis_server_process

from jsonbudget import CursorStore, MemoryCursorStore, RedisCursorStore, Scope, SQLiteCursorStore

SCOPE = Scope("bench-principal", {"table": "orders", "status": "open"})
ROUNDS = 7


def _continuation_us(store: CursorStore, n: int) -> float:
    """Median over rounds of the mean time of one resume + mint, in microseconds."""
    state = store.start(SCOPE, max_pages=None)
    token = store.mint(state, [0, "k"])
    rounds = []
    for r in range(ROUNDS):
        t0 = time.perf_counter()
        for i in range(n):
            state = store.resume(token, SCOPE)
            token = store.mint(state, [r * n + i + 1, "k"])
        rounds.append((time.perf_counter() - t0) / n * 1e6)
    return sorted(rounds)[len(rounds) // 2]


def _full_start_us(max_total: int) -> float:
    """Median over rounds of the mean time of one `start` into a `MemoryCursorStore`
    holding *max_total* operations, each start evicting the oldest."""
    store = MemoryCursorStore(max_total=max_total, max_per_principal=max_total)
    scopes = [Scope(f"p{i % 1000}", {"q": i}) for i in range(max_total)]
    for scope in scopes:
        store.start(scope, max_pages=None)
    rounds = []
    for _ in range(3):
        t0 = time.perf_counter()
        for scope in scopes:
            store.start(scope, max_pages=None)
        rounds.append((time.perf_counter() - t0) / max_total * 1e6)
    return sorted(rounds)[1]


def run() -> list[tuple[str, float, str, str]]:
    rows: list[tuple[str, float, str, str]] = []
    rows.append(("memory mint+resume", _continuation_us(MemoryCursorStore(), 5000), "us", "<= 10"))
    # A store that is full evicts its oldest operation at every start: that must not cost
    # more as the store holds more (a dict used as a queue made it 10x at 100,000).
    small, large = _full_start_us(1_000), _full_start_us(100_000)
    rows.append(("memory start, full at 1,000 operations", small, "us", "(info)"))
    rows.append(("memory start, full at 100,000 / full at 1,000", large / small, "x", "<= 2"))
    with tempfile.TemporaryDirectory() as tmp, SQLiteCursorStore(Path(tmp) / "bench.db") as store:
        rows.append(("sqlite mint+resume", _continuation_us(store, 1000), "us", "<= 200"))
    with redis_server_process() as server:
        client, trips = counting_client(server.url)
        redis_store = RedisCursorStore(client, prefix="ratios:")
        rows.append(("redis mint+resume", _continuation_us(redis_store, 500), "us", "(no target)"))
        state = redis_store.start(SCOPE, max_pages=None)
        token = redis_store.mint(state, 0)
        n = 200
        before = trips.count
        for i in range(n):
            token = redis_store.mint(redis_store.resume(token, SCOPE), i + 1)
        rows.append(
            ("redis round trips per continuation", (trips.count - before) / n, "trips", "<= 2")
        )
        before = trips.count
        redis_store.start(SCOPE, max_pages=None)
        rows.append(("redis round trips per first page", trips.count - before, "trips", "(info)"))
    return rows


if __name__ == "__main__":
    for name, value, unit, target in run():
        print(f"{name:40s} {value:10.2f} {unit:6s} target {target}")

"""Cursor stores: the latency of one continuation (resume a token, mint the next one).

Run: ``PYTHONPATH=src python3 -m pytest benches/bench_cursors.py --benchmark-only``.
Targets (issue 3): memory <= 10 us, SQLite <= 200 us, Redis <= 2 round trips.
"""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
from tests.fixtures_redis import redis_server_process

from jsonbudget import CursorStore, MemoryCursorStore, RedisCursorStore, Scope, SQLiteCursorStore

SCOPE = Scope("bench-principal", {"table": "orders", "status": "open"})


@pytest.fixture(scope="module")
def redis_url() -> Iterator[str]:
    with redis_server_process() as server:
        yield server.url


def _continuation(store: CursorStore) -> Any:
    state = store.start(SCOPE, max_pages=None)
    token = [store.mint(state, [0, "k"])]

    def step() -> None:
        state = store.resume(token[0], SCOPE)
        # a new position each time, as a real pagination mints
        token[0] = store.mint(state, [state.pages_served, "k"])

    return step


def test_memory_mint_resume(benchmark: Any) -> None:
    benchmark(_continuation(MemoryCursorStore()))


def test_memory_start_into_a_full_store(benchmark: Any) -> None:
    # Each start evicts the oldest of 100,000: the store's queue must not slow with size.
    store = MemoryCursorStore(max_total=100_000, max_per_principal=100_000)
    for i in range(100_000):
        store.start(Scope(f"p{i % 1000}", {"q": i}), max_pages=None)
    assert len(store) == 100_000
    benchmark(store.start, SCOPE, max_pages=None)
    assert len(store) == 100_000


def test_sqlite_mint_resume(benchmark: Any, tmp_path: Path) -> None:
    with SQLiteCursorStore(tmp_path / "bench.db") as store:
        benchmark(_continuation(store))


def test_redis_mint_resume(benchmark: Any, redis_url: str) -> None:
    benchmark(_continuation(RedisCursorStore(redis_url, prefix="bench:")))


def test_scope_fingerprint(benchmark: Any) -> None:
    query = {"table": "orders", "status": "open", "since": "2024-01-01", "limit": 50}
    benchmark(Scope, "bench-principal", query)

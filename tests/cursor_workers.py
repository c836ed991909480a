"""Code run in child processes (spawn) by the cursor-store tests.

Each function opens its own store on the shared backend, as a separate worker would.
"""

from __future__ import annotations

import sqlite3
from typing import Any

from jsonbudget import CursorStore, Scope
from jsonbudget.errors import BudgetExhausted

PRINCIPAL = "worker-principal@example.com"
QUERY = {"table": "orders", "status": "open"}


Where = tuple[str, str, str]  # backend kind, sqlite path or redis url, redis key prefix


def open_store(where: Where) -> CursorStore:
    kind, target, prefix = where
    if kind == "sqlite":
        from jsonbudget._cursors.sqlite_store import SQLiteCursorStore

        return SQLiteCursorStore(target)
    from jsonbudget._cursors.redis_store import RedisCursorStore

    return RedisCursorStore(target, prefix=prefix)


def start_and_mint(where: Where, position: Any, out: Any) -> None:
    """Start an operation, mint one token at *position*, report it, and exit."""
    store = open_store(where)
    state = store.start(Scope(PRINCIPAL, QUERY), max_pages=None)
    out.put(store.mint(state, position))


def resume_and_mint(where: Where, token: str, out: Any) -> None:
    """Resume *token* in this process and mint the next one at position + 1."""
    store = open_store(where)
    state = store.resume(token, Scope(PRINCIPAL, QUERY))
    assert isinstance(state.position, int)
    out.put((state.position, state.pages_served, store.mint(state, state.position + 1)))


def race(where: Where, token: str, tries: int, barrier: Any, out: Any) -> None:
    """Resume *token* *tries* times after every racer is ready; report what was served."""
    store = open_store(where)
    scope = Scope(PRINCIPAL, QUERY)
    served: list[int] = []
    refused = 0
    barrier.wait(timeout=60)
    for _ in range(tries):
        try:
            served.append(store.resume(token, scope).pages_served)
        except BudgetExhausted:
            refused += 1
    out.put((served, refused))


def open_new_file(path: str, gate: Any, out: Any) -> None:
    """Open a store on *path* once every worker is ready; report the error, if any."""
    from jsonbudget._cursors.sqlite_store import SQLiteCursorStore

    gate.wait()
    try:
        SQLiteCursorStore(path, busy_timeout=30).close()
    except sqlite3.Error as exc:  # reported to the test, which fails on it
        out.put(repr(exc))
    else:
        out.put(None)

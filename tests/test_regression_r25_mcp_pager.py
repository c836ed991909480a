"""`McpPager`: one served page is one start or resume and at most one mint on the store.

A page whose message came out over the budget was built again, smaller, by calling the
paginator again, and every round called the cursor store: a first page started an
operation per round (the rejected ones stayed, counted against ``max_per_principal`` and
``max_total``, so live paginations were evicted at about half the caps), and a
continuation resumed and minted per round (an operation kept about 128 usable cursors, not
256). Rows with quotes, backslashes or non-ASCII text are what make a round too big.
"""

from __future__ import annotations

import asyncio
import sqlite3
from collections import Counter
from collections.abc import AsyncIterator, Iterator
from pathlib import Path
from typing import Any

import orjson
import pytest
from mcp.shared.exceptions import MCPError
from mcp.types import CallToolResult, Implementation, TextContent

from jsonbudget import (
    ExpiredCursor,
    Limits,
    MemoryCursorStore,
    Scope,
    SQLiteCursorStore,
)
from jsonbudget._cursors.store import MAX_POSITIONS_PER_OPERATION, CursorState
from jsonbudget.mcp import SUMMARY_TEXT, McpPager, message_bytes

SERVER = Implementation(name="rows", version="1")
# Quotes and backslashes (escaped once more in the text copy) and non-ASCII text (escaped
# as \uXXXX on the 2026 HTTP path): the first guess of a page's budget is too big.
NOTE = 'say "hi" \\ 日本語 — “quoted” ' * 2


def _rows(n: int) -> list[dict[str, Any]]:
    return [{"id": i, "note": NOTE} for i in range(n)]


class _Counting:
    """A real store that counts the calls made on it."""

    calls: Counter[str]

    def start(self, scope: Scope, *, max_pages: int | None) -> CursorState:
        self.calls["start"] += 1
        return super().start(scope, max_pages=max_pages)  # type: ignore[misc, no-any-return]

    def resume(self, token: str, scope: Scope) -> CursorState:
        self.calls["resume"] += 1
        return super().resume(token, scope)  # type: ignore[misc, no-any-return]

    def mint(self, state: CursorState, position: Any) -> str:
        self.calls["mint"] += 1
        return super().mint(state, position)  # type: ignore[misc, no-any-return]


class CountingMemory(_Counting, MemoryCursorStore):
    def __init__(self, **kwargs: Any) -> None:
        super().__init__(**kwargs)
        self.calls = Counter()

    def operations(self) -> int:
        return len(self)


class CountingSQLite(_Counting, SQLiteCursorStore):
    def __init__(self, path: Path, **kwargs: Any) -> None:
        super().__init__(path, **kwargs)
        self.calls = Counter()

    def operations(self) -> int:
        with sqlite3.connect(self.path) as conn:
            (count,) = conn.execute("SELECT COUNT(*) FROM jsonbudget_ops").fetchone()
        return int(count)


class Rows:
    """A sync source that counts how often a page was read from it."""

    def __init__(self, rows: list[dict[str, Any]]) -> None:
        self.rows = rows
        self.reads = 0

    def open(self, position: Any, *, limit_hint: int | None = None) -> Iterator[tuple[Any, int]]:
        self.reads += 1
        for i in range(position or 0, len(self.rows)):
            yield self.rows[i], i + 1

    def describe(self) -> dict[str, Any]:
        return {"rows": len(self.rows)}


class AsyncRows(Rows):
    """The async twin of `Rows`."""

    async def aopen(
        self, position: Any, *, limit_hint: int | None = None
    ) -> AsyncIterator[tuple[Any, int]]:
        self.reads += 1
        for i in range(position or 0, len(self.rows)):
            await asyncio.sleep(0)
            yield self.rows[i], i + 1

    open = None  # type: ignore[assignment]  # async only


def _store(kind: str, tmp_path: Path, **kwargs: Any) -> CountingMemory | CountingSQLite:
    if kind == "memory":
        return CountingMemory(**kwargs)
    return CountingSQLite(tmp_path / "cursors.sqlite3", **kwargs)


def _envelope(result: CallToolResult, budget: int) -> dict[str, Any]:
    """The page a result carries, once its message is checked against *budget* and its
    text copy against its structured one."""
    assert message_bytes(result, server=SERVER) <= budget
    text = result.content[0]
    assert isinstance(text, TextContent)
    envelope: dict[str, Any] | None = result.structured_content
    if envelope is None:
        envelope = orjson.loads(text.text)
    elif text.text != SUMMARY_TEXT:
        assert orjson.loads(text.text) == envelope
    assert envelope is not None
    return envelope


@pytest.mark.parametrize("content", ["both", "structured", "text"])
@pytest.mark.parametrize("kind", ["memory", "sqlite"])
def test_regression_a_refitted_first_page_started_an_operation_per_round(
    kind: str, content: Any, tmp_path: Path
) -> None:
    store = _store(kind, tmp_path)
    pager = McpPager(max_bytes=4096, store=store, content=content, server=SERVER)
    source = Rows(_rows(500))
    for q in range(12):
        _envelope(pager.paginate(source, scope=Scope("alice", {"q": q})), 4096)
    assert source.reads > 12  # the pages were refitted: the case this is about
    assert store.operations() == 12
    assert store.calls == Counter(start=12, mint=12)


@pytest.mark.parametrize("kind", ["memory", "sqlite"])
def test_regression_live_paginations_were_evicted_below_max_per_principal(
    kind: str, tmp_path: Path
) -> None:
    store = _store(kind, tmp_path, max_per_principal=6)
    pager = McpPager(max_bytes=4096, store=store, server=SERVER)
    rows = _rows(120)
    cursors = {}
    got = {}
    for q in range(6):  # as many as the cap allows, all live
        first = _envelope(pager.paginate(rows, scope=Scope("alice", {"q": q})), 4096)
        cursors[q] = first["nextCursor"]
        got[q] = len(first["items"])
    while cursors:
        for q, cursor in list(cursors.items()):
            page = _envelope(
                pager.paginate(rows, scope=Scope("alice", {"q": q}), cursor=cursor), 4096
            )
            got[q] += len(page["items"])
            if page["complete"]:
                del cursors[q]
            else:
                cursors[q] = page["nextCursor"]
    assert got == {q: len(rows) for q in got}
    assert store.operations() == 6


def test_regression_a_refitted_continuation_resumed_and_minted_per_round() -> None:
    store = CountingMemory()
    pager = McpPager(max_bytes=2600, store=store, server=SERVER)
    source = Rows([{"id": i, "t": "日本語" * 3} for i in range(20_000)])
    scope = Scope("a", {})
    cursors = [_envelope(pager.paginate(source, scope=scope), 2600)["nextCursor"]]
    pages = MAX_POSITIONS_PER_OPERATION + 40
    for _ in range(pages - 1):
        page = _envelope(pager.paginate(source, scope=scope, cursor=cursors[-1]), 2600)
        cursors.append(page["nextCursor"])
    assert source.reads > pages  # refitted
    assert store.calls == Counter(start=1, resume=pages - 1, mint=pages)
    # The operation keeps its last 256 cursors (docs/cursors.md): each one can be asked
    # again, oldest first (asking one again makes it, and the cursor it mints, the newest).
    kept = cursors[-MAX_POSITIONS_PER_OPERATION:]
    for cursor in kept:
        pager.paginate(source, scope=scope, cursor=cursor)
    with pytest.raises(MCPError) as raised:
        pager.paginate(source, scope=scope, cursor=cursors[-MAX_POSITIONS_PER_OPERATION - 1])
    assert isinstance(raised.value.__cause__, ExpiredCursor)


@pytest.mark.parametrize("kind", ["memory", "sqlite"])
def test_regression_a_page_budget_made_continuations_take_the_smallest_page(
    kind: str, tmp_path: Path
) -> None:
    """With max_pages a continuation was built at the always-fitting budget at once, since
    a refit resumed its cursor again; resumed once, it is fitted like any page, and the
    budget is spent one page per page served."""
    rows = _rows(2000)
    free = McpPager(max_bytes=4096, server=SERVER)
    store = _store(kind, tmp_path)
    capped = McpPager(limits=Limits(4096, max_pages=6), store=store, server=SERVER)
    scope = Scope("p", {})
    plain = [_envelope(free.paginate(rows, scope=scope), 4096)]
    paged = [_envelope(capped.paginate(rows, scope=scope), 4096)]
    while paged[-1]["nextCursor"] is not None:
        paged.append(
            _envelope(capped.paginate(rows, scope=scope, cursor=paged[-1]["nextCursor"]), 4096)
        )
        plain.append(
            _envelope(free.paginate(rows, scope=scope, cursor=plain[-1]["nextCursor"]), 4096)
        )
    assert len(paged) == 6
    assert paged[-1]["incompleteReason"] == "budget_exhausted"
    assert [len(p["items"]) for p in paged] == [len(p["items"]) for p in plain]
    assert store.calls == Counter(start=1, resume=5, mint=5)


@pytest.mark.parametrize("kind", ["memory", "sqlite"])
async def test_regression_async_pages_started_an_operation_per_round(
    kind: str, tmp_path: Path
) -> None:
    store = _store(kind, tmp_path, max_per_principal=30)
    pager = McpPager(max_bytes=4096, store=store, server=SERVER)
    source = AsyncRows(_rows(150))

    async def client(q: int) -> list[Any]:
        scope = Scope("alice", {"q": q})
        page = _envelope(await pager.apaginate(source, scope=scope), 4096)
        items: list[Any] = page["items"]
        while not page["complete"]:
            cursor = page["nextCursor"]
            page = _envelope(await pager.apaginate(source, scope=scope, cursor=cursor), 4096)
            items += page["items"]
        return items

    got = await asyncio.gather(*(client(q) for q in range(30)))
    assert all(items == source.rows for items in got)
    assert store.operations() == 30
    served = store.calls["start"] + store.calls["resume"]
    assert store.calls["start"] == 30
    assert store.calls["mint"] == served - 30  # every page but the last of each
    assert source.reads > served  # refitted


class ShortTokens(MemoryCursorStore):
    """A store whose cursors are shorter than the built-in ones."""

    def __init__(self) -> None:
        super().__init__()
        self.tokens: dict[str, str] = {}

    def mint(self, state: CursorState, position: Any) -> str:
        short = f"t{len(self.tokens)}"
        self.tokens[short] = super().mint(state, position)
        return short

    def resume(self, token: str, scope: Scope) -> CursorState:
        return super().resume(self.tokens.get(token, token), scope)


@pytest.mark.parametrize("content", ["both", "structured", "text"])
@pytest.mark.parametrize("asynchronous", [False, True])
async def test_the_stores_own_token_is_the_one_served(content: Any, asynchronous: bool) -> None:
    store = ShortTokens()
    pager = McpPager(max_bytes=4096, store=store, content=content, server=SERVER)
    source = AsyncRows(_rows(300)) if asynchronous else Rows(_rows(300))
    scope = Scope("p", {})
    items: list[Any] = []
    cursor = None
    while True:
        if asynchronous:
            result = await pager.apaginate(source, scope=scope, cursor=cursor)
        else:
            result = pager.paginate(source, scope=scope, cursor=cursor)
        page = _envelope(result, 4096)
        items += page["items"]
        cursor = page["nextCursor"]
        if cursor is None:
            break
        assert cursor == f"t{len(store.tokens) - 1}"
    assert items == source.rows
    assert len(store.tokens) > 1


class Failing(MemoryCursorStore):
    def __init__(self, minted: Any) -> None:
        super().__init__()
        self.minted = minted

    def mint(self, state: CursorState, position: Any) -> str:
        if isinstance(self.minted, Exception):
            raise self.minted
        return self.minted  # type: ignore[no-any-return]  # wrong on purpose


@pytest.mark.parametrize(
    ("minted", "error"),
    [
        (ExpiredCursor(), MCPError),
        (None, TypeError),
        ("x" * 57, ValueError),
        ("a b\n", ValueError),
        ("", ValueError),
    ],
)
@pytest.mark.parametrize("asynchronous", [False, True])
async def test_a_store_that_fails_to_mint_fails_the_page(
    minted: Any, error: type[Exception], asynchronous: bool
) -> None:
    pager = McpPager(max_bytes=4096, store=Failing(minted))
    scope = Scope("p", {})
    if asynchronous:
        with pytest.raises(error):
            await pager.apaginate(AsyncRows(_rows(300)), scope=scope)
    else:
        with pytest.raises(error):
            pager.paginate(Rows(_rows(300)), scope=scope)


class _ForgetfulStart(MemoryCursorStore):
    def start(self, scope: Scope, *, max_pages: int | None) -> CursorState:
        super().start(scope, max_pages=max_pages)
        return None  # type: ignore[return-value]  # the user's mistake under test


def test_regression_a_store_breaking_its_protocol_is_named_not_the_pagers_view() -> None:
    # The rounds page on a view of the store: the pager's protocol errors named the view
    # (_OneCall) where they had named the user's store.
    pager = McpPager(max_bytes=4096, store=_ForgetfulStart(), server=SERVER)
    with pytest.raises(TypeError, match=r"_ForgetfulStart\.start\(\) must return a CursorState"):
        pager.paginate(_rows(50), scope=Scope("alice", {"q": 1}))

"""Sync and async twins that parted (tester report r19-parity)."""

from __future__ import annotations

import asyncio
from typing import Any

import pytest
from mcp import Client
from mcp.server.mcpserver import MCPServer

from jsonbudget import MemoryCursorStore
from jsonbudget._agents.classify import PromptTooLong, call_with_output_cap
from jsonbudget.mcp import paginated_tool


class _Rows:
    """A tool object whose ``__call__`` is async (inspect says False for the object)."""

    __name__ = "rows"

    async def __call__(self, n: int) -> list[dict[str, int]]:
        await asyncio.sleep(0)
        return [{"i": i} for i in range(n)]


async def test_regression_paginated_tool_awaits_an_object_with_an_async_call() -> None:
    # The decorator asked inspect.iscoroutinefunction of the object, which says False:
    # the call's coroutine was paged ("cannot page a coroutine") and never awaited.
    server = MCPServer("probe")
    server.tool(name="rows", description="Rows.")(
        paginated_tool(max_bytes=4096, store=MemoryCursorStore(), principal=lambda: "p")(_Rows())
    )
    seen: list[int] = []
    async with Client(server) as client:
        cursor = None
        while True:
            args: dict[str, Any] = {"n": 300} | ({"cursor": cursor} if cursor else {})
            got = await client.call_tool("rows", args)
            assert not got.is_error, got.content
            page = got.structured_content
            assert page is not None
            seen += [item["i"] for item in page["items"]]
            cursor = page["nextCursor"]
            if cursor is None:
                break
    assert seen == list(range(300))


class _TooLong(Exception):
    """A provider's prompt-too-long error, as its text says it."""


def test_regression_sync_retry_refuses_an_async_compressor() -> None:
    # The sync form called an async compress_prompt and dropped its coroutine: the
    # prompt never shrank and every retry sent the same one, a paid call each.
    calls: list[int] = []

    def call(cap: int) -> str:
        calls.append(cap)
        raise _TooLong("prompt is too long: 250000 tokens > 200000 maximum")

    async def compress(verdict: PromptTooLong) -> None:
        raise AssertionError("never run")

    with pytest.raises(TypeError, match="acall_with_output_cap") as info:
        call_with_output_cap(call, max_output_tokens=1000, compress_prompt=compress)
    assert isinstance(info.value.__cause__, _TooLong)
    assert calls == [1000]  # no retry sent the same prompt again

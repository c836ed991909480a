"""A function declared to return MCP results under `bounded_tool`: the tool's own data.

Its structured content, ``_meta`` and the items of a content list that are no blocks were
written whole with pydantic before the budget was checked: an endless iterator ate memory
until the process aborted, 300,000 rows cost seconds and hundreds of MB, and non-UTF-8
bytes raised pydantic's serialization error. They are now written by the bounded encoder.
"""

from __future__ import annotations

import dataclasses
from collections.abc import Iterator
from typing import Any

from mcp.types import CallToolResult, ContentBlock, ImageContent, TextContent

from jsonbudget import bounded_tool
from jsonbudget.mcp import message_bytes
from tests.limited import bounded_run

BUDGET = 4096
IMG = ImageContent(type="image", data="eHh4", mime_type="image/png")


class Counting:
    """An iterator of a million numbers that counts the items pulled from it (endless
    ones run in a child, `test_regression_mcp_endless_iterators_do_not_exhaust_memory`)."""

    def __init__(self) -> None:
        self.pulled = 0

    def __iter__(self) -> Iterator[int]:
        return self

    def __next__(self) -> int:
        if self.pulled == 1_000_000:
            raise StopIteration
        self.pulled += 1
        return self.pulled


def test_regression_mcp_structured_content_is_read_as_far_as_the_budget() -> None:
    rows = Counting()

    @bounded_tool(max_bytes=BUDGET)
    def tool() -> CallToolResult:
        return CallToolResult(content=[TextContent(type="text", text="rows")],
                              structured_content={"rows": rows})  # fmt: skip

    result = tool()
    assert message_bytes(result) <= BUDGET
    assert rows.pulled < BUDGET
    assert result.structured_content is not None
    kept = result.structured_content["rows"]
    # Read once: the refit goes on from what sizing it pulled, the first items first.
    assert kept[:3] == [1, 2, 3]
    assert kept[-1].startswith("…[omitted")


def test_regression_mcp_content_list_item_is_read_as_far_as_the_budget() -> None:
    rows = Counting()

    @bounded_tool(max_bytes=BUDGET)
    def tool() -> list[ContentBlock]:
        # The SDK makes any item a block (its JSON as text); the type names blocks only.
        items: list[Any] = [IMG, {"rows": rows}]
        return items

    result = tool()
    assert message_bytes(result) <= BUDGET
    assert rows.pulled < BUDGET
    texts = [block.text for block in result.content if isinstance(block, TextContent)]
    assert texts[0].startswith('{"rows":[1,2,3,')
    assert texts[-1] == "…[omitted: 1 content blocks]"


def test_regression_mcp_large_rows_are_not_dumped_whole() -> None:
    # Each row is encoded only if it is in the bytes the budget lets through: counted by
    # the rows whose model the encoder asked for.
    asked = [0]

    @dataclasses.dataclass
    class Row:
        id: int

        def __getattribute__(self, name: str) -> object:
            if name == "id":
                asked[0] += 1
            return object.__getattribute__(self, name)

    rows = [Row(i) for i in range(300_000)]

    @bounded_tool(max_bytes=BUDGET)
    def structured() -> CallToolResult:
        return CallToolResult(content=[TextContent(type="text", text="rows")],
                              structured_content={"rows": rows})  # fmt: skip

    @bounded_tool(max_bytes=BUDGET)
    def listed() -> list[ContentBlock]:
        items: list[Any] = [IMG, {"rows": rows}]
        return items

    for tool in (structured, listed):
        asked[0] = 0
        assert message_bytes(tool()) <= BUDGET
        assert asked[0] < BUDGET


def test_regression_mcp_endless_iterators_do_not_exhaust_memory() -> None:
    out = bounded_run(
        """
        import itertools
        from mcp.types import CallToolResult, ContentBlock, ImageContent, TextContent
        from jsonbudget import bounded_tool
        from jsonbudget.mcp import message_bytes

        @bounded_tool(max_bytes=4096)
        def structured() -> CallToolResult:
            return CallToolResult(content=[TextContent(type="text", text="rows")],
                                  structured_content={"rows": itertools.count()},
                                  _meta={"more": itertools.count()})

        @bounded_tool(max_bytes=4096)
        def listed() -> list[ContentBlock]:
            img = ImageContent(type="image", data="eHh4", mime_type="image/png")
            return [img, itertools.count(), itertools.count()]

        for tool in (structured, listed):
            print(message_bytes(tool()))
        """,
        memory=1 << 30,
    )
    sizes = [int(line) for line in out.split()]
    assert len(sizes) == 2
    assert all(size <= 4096 for size in sizes)


def test_regression_mcp_content_list_bytes_get_the_unencodable_marker() -> None:
    @dataclasses.dataclass
    class Holder:
        data: bytes

    @bounded_tool(max_bytes=BUDGET)
    def tool() -> list[ContentBlock]:
        items: list[Any] = [IMG, b"\xff" * 10, Holder(b"\xff")]
        return items

    result = tool()
    assert message_bytes(result) <= BUDGET
    assert result.content[0] == IMG  # it fits: the image stays
    texts = [block.text for block in result.content if isinstance(block, TextContent)]
    assert texts == [
        '"…[unencodable: bytes of 10 bytes]"',
        '{"data":"…[unencodable: bytes of 1 bytes]"}',
    ]

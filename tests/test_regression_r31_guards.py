"""r31: what the agent-loop guards caught."""

from __future__ import annotations

import mcp.types  # noqa: F401 - the MCP result types `gate_result` checks against
import pytest

from jsonbudget import bounded_tool


def _row_class(fail_at: int) -> tuple[type, list[int]]:
    """A class whose *fail_at*-th hash raises MemoryError, as an allocation would (-1:
    never); and the count of its hashes so far."""
    hashes = [0]

    class Meta(type):
        def __hash__(cls) -> int:
            hashes[0] += 1
            if hashes[0] - 1 == fail_at:
                raise MemoryError("injected")
            return id(cls)

    class Row(metaclass=Meta):
        pass

    return Row, hashes


def test_regression_a_memoryerror_hashing_a_class_was_swallowed_by_bounded_tool() -> None:
    # MCP's result types are pydantic models (ABCs): `isinstance` against them hashes
    # the value's class, as do the wrapper's other type checks. A MemoryError at any of
    # those hashes is the interpreter's and must reach the caller.
    row, hashes = _row_class(-1)
    bounded_tool(max_bytes=4096)(row)()
    total = hashes[0]
    assert total > 0
    for k in range(total):
        row, hashes = _row_class(k)
        with pytest.raises(MemoryError):
            bounded_tool(max_bytes=4096)(row)()

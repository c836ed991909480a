"""The types of `bounded_tool`'s decorator: what a checker sees a bounded tool return.

At run time a tool is async when its function is (`is_async_callable`), returns a fitted
``CallToolResult`` when it declares MCP results, and with ``output="json"`` the bounded
value in the shape its declared return is written as (`_json_shape`); these protocols
say the same to a type checker, from the declared return alone. Nothing here runs.
"""

from __future__ import annotations

from collections.abc import Awaitable, Callable, Coroutine, Sequence
from typing import (
    TYPE_CHECKING,
    Any,
    Literal,
    Never,
    ParamSpec,
    Protocol,
    TypeAlias,
    TypeVar,
    overload,
)

if TYPE_CHECKING:
    # Named in the overloads only: mcp stays an optional install.
    from mcp.types import (
        Annotations,
        AudioContent,
        CallToolResult,
        ContentBlock,
        EmbeddedResource,
        ImageContent,
    )

__all__ = ["ToolDecorator"]

P = ParamSpec("P")
# Invariant: mypy cannot check the overloads below against a covariant one.
OutT = TypeVar("OutT")
R = TypeVar("R")
# The overloads tell a sync tool from an async one by its return type. A return of bare
# Any (an unannotated function, `-> Any`) satisfies a bound of Never, which no other type
# does, so the first overload takes it as sync, as it is at run time, rather than the
# coroutine overload. The others take their return as a type variable, never a fixed
# type: where a return merely holds Any (`-> dict[str, Any]`), the overloads that match
# it then agree on what they matched, and mypy picks the first of them instead of giving
# up on the call as ambiguous (which erased the tool's signature). An async tool is one
# whose return is awaitable: a function that wraps an async one is typed `Awaitable`,
# and a sync function that returns an awaitable is refused when called.
AnyReturnT = TypeVar("AnyReturnT", bound=Never)
AnyAwaitT = TypeVar("AnyAwaitT", bound=Awaitable[Never])
AwaitT = TypeVar("AwaitT", bound=Awaitable[Any])
# `list[Any]` also matches a list of MCP content blocks; declared so, it is a value.
AnyItemsT = TypeVar("AnyItemsT", bound=Sequence[Never])
AnyItemsAwaitT = TypeVar("AnyItemsAwaitT", bound=Awaitable[Sequence[Never]])


# The MCP results a tool may declare, told by their shape: naming mcp's classes would
# make them Any where mcp is not installed, and then every tool an MCP tool.
class _McpToolResult(Protocol):
    """A ``CallToolResult``: all three fields, so that a class of the user's that merely
    has a ``content`` and an ``is_error`` stays a value."""

    @property
    def content(self) -> list[ContentBlock]: ...
    @property
    def structured_content(self) -> dict[str, Any] | None: ...
    @property
    def is_error(self) -> bool: ...


class _FastMcpToolResult(Protocol):
    """FastMCP's ``ToolResult``."""

    def to_mcp_result(self) -> Any: ...


class _McpBlock(Protocol):
    """A content block: ``TextContent``, ``ImageContent``, ... ``EmbeddedResource``."""

    @property
    def type(self) -> Literal["text", "image", "audio", "resource_link", "resource"]: ...
    @property
    def annotations(self) -> Annotations | None: ...


class _McpImage(Protocol):
    """The SDK's or FastMCP's ``Image``."""

    def to_image_content(self) -> ImageContent: ...


class _McpAudio(Protocol):
    """The SDK's or FastMCP's ``Audio``."""

    def to_audio_content(self) -> AudioContent: ...


class _McpFile(Protocol):
    """FastMCP's ``File``."""

    def to_resource_content(self) -> EmbeddedResource: ...


_McpPart: TypeAlias = "_McpBlock | _McpImage | _McpAudio | _McpFile"
_McpResult: TypeAlias = "_McpToolResult | _FastMcpToolResult | _McpPart | Sequence[_McpPart]"
McpT = TypeVar("McpT", bound=_McpResult)
McpAwaitT = TypeVar("McpAwaitT", bound=Awaitable[_McpResult])


class ToolDecorator(Protocol[OutT]):
    """What `bounded_tool(...)` returns: wraps a sync or async function. The wrapper
    returns *OutT* (``str`` or ``bytes``), or a ``CallToolResult`` for a function
    declared to return MCP results."""

    @overload
    def __call__(  # type: ignore[overload-overlap]  # bare Any only: see AnyReturnT
        self, fn: Callable[P, AnyReturnT], /
    ) -> Callable[P, OutT]: ...
    @overload
    def __call__(  # type: ignore[overload-overlap]  # see AnyItemsT
        self, fn: Callable[P, AnyItemsT], /
    ) -> Callable[P, OutT]: ...
    @overload
    def __call__(  # type: ignore[overload-overlap]  # see AnyItemsT
        self, fn: Callable[P, AnyItemsAwaitT], /
    ) -> Callable[P, Coroutine[Any, Any, OutT]]: ...
    @overload
    def __call__(self, fn: Callable[P, McpT], /) -> Callable[P, CallToolResult]: ...
    @overload
    def __call__(
        self, fn: Callable[P, McpAwaitT], /
    ) -> Callable[P, Coroutine[Any, Any, CallToolResult]]: ...
    @overload
    def __call__(self, fn: Callable[P, AwaitT], /) -> Callable[P, Coroutine[Any, Any, OutT]]: ...
    @overload
    def __call__(self, fn: Callable[P, R], /) -> Callable[P, OutT]: ...

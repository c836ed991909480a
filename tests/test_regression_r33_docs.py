"""Regressions found by the r33 multi-user probe in the docs: the principal docs/mcp.md
recommends must name the user, not the OAuth client application."""

from __future__ import annotations

import contextlib
import contextvars
import io
import re
from collections.abc import Callable
from pathlib import Path
from typing import Any

import pytest
from mcp.server.auth.middleware.auth_context import auth_context_var
from mcp.server.auth.middleware.bearer_auth import AuthenticatedUser
from mcp.server.auth.provider import AccessToken
from mcp.server.mcpserver.exceptions import ToolError
from mcp.shared.exceptions import MCPError

from jsonbudget import MemoryCursorStore
from jsonbudget.mcp import paginated_tool

MCP_DOC = Path(__file__).resolve().parent.parent / "docs" / "mcp.md"
CLIENT = "https://agent.example/client.json"  # one client app, signed in to by every user


def _principal_example() -> dict[str, Any]:
    """The namespace of the docs' principal example, run as the docs suite runs it."""
    blocks = re.findall(r"^```python\n(.*?)^```", MCP_DOC.read_text("utf-8"), re.M | re.S)
    found = [b for b in blocks if "def principal_of(" in b]
    assert len(found) == 1, "docs/mcp.md shows no principal callable (`principal_of`)"
    namespace: dict[str, Any] = {"__name__": "docs_example"}
    with contextlib.redirect_stdout(io.StringIO()):
        exec(compile(found[0], str(MCP_DOC), "exec"), namespace)
    return namespace


def _token(subject: str | None, issuer: str = "https://idp.example") -> AccessToken:
    return AccessToken(
        token=f"tok-{subject}", client_id=CLIENT, scopes=["read"], subject=subject,
        claims={"iss": issuer},
    )  # fmt: skip


def _as(token: AccessToken | None, call: Callable[[], Any]) -> Any:
    """*call* in a request signed in with *token*, as the SDK's auth middleware sets it."""

    def signed_in() -> Any:
        auth_context_var.set(None if token is None else AuthenticatedUser(token))
        return call()

    return contextvars.copy_context().run(signed_in)


def test_regression_documented_principal_is_per_user_not_client_id() -> None:
    # docs/mcp.md recommended "the authenticated client's id" as the principal: every
    # user of one OAuth client app has that id, so bob resumed alice's cursor (and read
    # her spilled items). The documented callable must tell them apart and refuse a
    # request without a user.
    example = _principal_example()
    principal_of, user = example["principal_of"], example["user"]
    alice, bob = _token("alice"), _token("bob")
    assert principal_of(alice) != principal_of(bob)
    assert principal_of(alice) != principal_of(_token("alice", "https://other-idp.example"))
    for nobody in (None, _token(None)):
        with pytest.raises(ToolError):
            principal_of(nobody)

    @paginated_tool(max_bytes=4096, store=MemoryCursorStore(), principal=user)
    def rows() -> list[dict[str, int]]:
        return [{"id": i} for i in range(2000)]

    cursor = _as(alice, rows).structured_content["nextCursor"]
    assert cursor is not None
    assert _as(alice, lambda: rows(cursor=cursor)).structured_content["items"]
    with pytest.raises(MCPError) as refused:
        _as(bob, lambda: rows(cursor=cursor))
    assert refused.value.error.data == {"reason": "scope_principal"}
    with pytest.raises(ToolError):  # no token: refused, never a shared principal
        _as(None, lambda: rows(cursor=cursor))

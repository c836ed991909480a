"""An MCP server (official `mcp` SDK 2.x) with one paginated tool over an SQLite database.

Run it over stdio (what desktop agents launch):

    python examples/mcp_server.py                 # creates a sample ticket database
    python examples/mcp_server.py --db tickets.sqlite3 --max-bytes 16384

The tool `list_tickets(status=None, cursor=None)` answers one page per call. Each result's
text content and structured content are the same envelope, and the whole JSON-RPC
response is at most --max-bytes bytes; `nextCursor` continues; a garbled cursor, or a
cursor presented with another status, is refused with JSON-RPC error -32602.
"""

from __future__ import annotations

import argparse
import os
import sqlite3
import tempfile

from mcp.server.mcpserver import MCPServer

from jsonbudget import SQLiteCursorStore, SQLiteSource
from jsonbudget.mcp import paginated_tool


def make_sample_database(path: str, rows: int = 200) -> None:
    """A `tickets` table to page: multibyte notes of many lengths, one 3 MB attachment."""
    statuses = ("open", "pending", "closed")
    note = "Der Drucker druckt nicht — 打印机不工作 — l'imprimante ne répond pas. "
    with sqlite3.connect(path) as conn:
        conn.execute(
            "CREATE TABLE tickets (id INTEGER PRIMARY KEY, status TEXT NOT NULL,"
            " subject TEXT NOT NULL, notes TEXT NOT NULL, attachment TEXT)"
        )
        conn.executemany(
            "INSERT INTO tickets VALUES (?, ?, ?, ?, ?)",
            (
                (
                    i,
                    statuses[i % 3],
                    f"Ticket {i}",
                    note * (1 + i % 60),
                    "x" * 3_000_000 if i == rows // 2 else None,
                )
                for i in range(1, rows + 1)
            ),
        )


def build_server(db_path: str, store_path: str, *, max_bytes: int = 16384) -> MCPServer:
    """The server: `list_tickets` pages `tickets` by id through a durable cursor store."""
    server = MCPServer("tickets", instructions="Support tickets, one bounded page per call.")
    store = SQLiteCursorStore(store_path)

    @server.tool()
    @paginated_tool(max_bytes=max_bytes, store=store, principal="example-user")
    def list_tickets(status: str | None = None) -> SQLiteSource:
        """List support tickets in id order, optionally only those with one status.

        Returns {"items": [...], "nextCursor": ...}; pass nextCursor back as `cursor`
        for the next page. Long fields are cut in place and marked with "…[".
        """
        if status is None:
            return SQLiteSource(db_path, table="tickets", order_by=["id"])
        return SQLiteSource(
            db_path,
            query="SELECT * FROM tickets WHERE status = ?",
            params=[status],
            order_by=["id"],
            unique=True,  # id is the primary key: unique in this result
        )

    return server


def main() -> None:
    # Not __doc__, which `python -OO` drops (None).
    parser = argparse.ArgumentParser(
        description="An MCP server (official `mcp` SDK 2.x) with one paginated tool over an "
        "SQLite database."
    )
    parser.add_argument("--db", help="an SQLite database with a tickets table (default: a sample)")
    parser.add_argument("--store", help="cursor store file (default: next to the database)")
    parser.add_argument("--max-bytes", type=int, default=16384)
    args = parser.parse_args()
    db = args.db
    if db is None:
        db = os.path.join(tempfile.mkdtemp(prefix="jsonbudget-mcp-"), "tickets.sqlite3")
        make_sample_database(db)
    store = args.store or os.path.join(os.path.dirname(os.path.abspath(db)), "cursors.sqlite3")
    build_server(db, store, max_bytes=args.max_bytes).run("stdio")


if __name__ == "__main__":
    main()

"""Door 2: page database rows with `paginate` (and `PageBuilder` for a custom loop).

python examples/page_rows.py
"""

from __future__ import annotations

import os
import sqlite3
import tempfile

import orjson

from jsonbudget import Limits, PageBuilder, Scope, SQLiteCursorStore, SQLiteSource, paginate

LIMITS = Limits(4096)


def make_db(path: str) -> None:
    conn = sqlite3.connect(path)
    conn.execute("CREATE TABLE orders (id INTEGER PRIMARY KEY, customer TEXT, note TEXT)")
    rows = [(i, f"customer-{i % 17}", "Lieferung verspätet — " * (i % 40)) for i in range(1, 101)]
    rows[41] = (42, "customer-8", "📦" * 200_000)  # one row far larger than a page
    conn.executemany("INSERT INTO orders VALUES (?, ?, ?)", rows)
    conn.commit()
    conn.close()


def main() -> None:
    # The example's files live only as long as it runs.
    with tempfile.TemporaryDirectory(prefix="jsonbudget-example-") as directory:
        run(directory)


def run(directory: str) -> None:
    db = os.path.join(directory, "orders.sqlite3")
    make_db(db)
    source = SQLiteSource(db, table="orders", order_by=["id"])
    scope = Scope("alice", {"table": "orders"})  # who asks, and what
    seen: list[int] = []
    cursor = None
    pages = 0
    with SQLiteCursorStore(os.path.join(directory, "cursors.sqlite3")) as store:
        while True:
            page = paginate(source, scope=scope, cursor=cursor, store=store, limits=LIMITS)
            pages += 1
            assert len(page.to_json()) <= LIMITS.max_bytes
            seen.extend(row["id"] for row in page.items)
            for big in page.oversized:
                print(f"page {pages}: row {page.items[big.index]['id']} oversized -> {big.outcome}")
            if page.next_cursor is None:  # complete: the source ran out
                break
            cursor = page.next_cursor
    in_order = seen == list(range(1, 101))
    print(f"{len(seen)} rows in {pages} pages; every row once, in order: {in_order}")

    # PageBuilder: fill one page yourself from any iterator of items.
    builder = PageBuilder(Limits(1024))
    left_over = builder.fill({"n": i, "word": "grüß"} for i in range(100))
    envelope = builder.finish(complete=not left_over, next_cursor=None if not left_over else "c1")
    print(f"PageBuilder: {builder.count} items, {len(envelope.to_json())} bytes")
    print(orjson.loads(envelope.to_json())["items"][:2])


if __name__ == "__main__":
    main()

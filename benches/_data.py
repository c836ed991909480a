"""Deterministic data for the benchmarks: database-like rows, documents, long strings.

Everything is built from a seeded `random.Random`, so two runs measure the same bytes.
"""

from __future__ import annotations

import random
from typing import Any

__all__ = [
    "MULTIBYTE_ALPHABET",
    "cold_copy",
    "log_text",
    "multibyte_text",
    "nested_document",
    "rows",
    "tool_result",
]

_STATUSES = ("pending", "paid", "shipped", "delivered", "refunded", "cancelled")
_CURRENCIES = ("EUR", "USD", "GBP", "JPY", "CHF")
_FIRST = ("Ana", "José", "Ming", "Olga", "Priya", "Lars", "Zoë", "Kwame", "Hiro", "Maria")
_LAST = ("Silva", "Müller", "Chen", "Ivanova", "Patel", "Berg", "Dubois", "Mensah", "Sato")
_NOTES = (None, None, None, "leave at the door", "gift wrap, please", "call before delivery")
#: 1-, 2-, 3- and 4-byte UTF-8 characters (an emoji makes the string UCS-4 inside CPython).
MULTIBYTE_ALPHABET = "aé€😀中ßжあ한 "


def _timestamp(rng: random.Random) -> str:
    return (
        f"2024-{rng.randint(1, 12):02d}-{rng.randint(1, 28):02d}T"
        f"{rng.randint(0, 23):02d}:{rng.randint(0, 59):02d}:{rng.randint(0, 59):02d}Z"
    )


def rows(n: int, *, seed: int = 1) -> list[dict[str, Any]]:
    """*n* flat rows like ``SELECT * FROM orders``: about 264 bytes each as JSON.

    ints, floats, short strings (some multibyte), ISO timestamps, None and bools, as a
    DB-API driver hands them over after ``dict(zip(columns, row))``.
    """
    rng = random.Random(seed)
    out = []
    for i in range(n):
        customer = rng.randint(1, 50_000)
        paid = rng.random() < 0.8
        out.append(
            {
                "id": 1_000_000 + i,
                "customer_id": customer,
                "customer": f"{rng.choice(_FIRST)} {rng.choice(_LAST)}",
                "email": f"customer{customer}@example.com",
                "status": rng.choice(_STATUSES),
                "currency": rng.choice(_CURRENCIES),
                "amount": round(rng.uniform(1, 5000), 2),
                "quantity": rng.randint(1, 20),
                "is_paid": paid,
                "created_at": _timestamp(rng),
                "paid_at": _timestamp(rng) if paid else None,
                "note": rng.choice(_NOTES),
            }
        )
    return out


def tool_result(n: int = 200, *, seed: int = 2) -> dict[str, Any]:
    """A realistic tool result: a query echo, counts, and *n* rows."""
    return {
        "query": "SELECT * FROM orders WHERE status = 'paid' ORDER BY id",
        "total": n,
        "took_ms": 12.5,
        "rows": rows(n, seed=seed),
    }


def nested_document(issues: int = 50, *, seed: int = 3) -> dict[str, Any]:
    """A GraphQL-style API answer: objects in lists in objects, five levels deep."""
    rng = random.Random(seed)
    nodes = []
    for i in range(issues):
        nodes.append(
            {
                "number": 1000 + i,
                "title": f'Crash when paging {rng.randint(1, 999)} rows with a "quoted" key',
                "state": rng.choice(("OPEN", "CLOSED")),
                "author": {"login": f"user{rng.randint(1, 500)}", "url": None},
                "labels": {
                    "nodes": [{"name": rng.choice(("bug", "perf", "docs", "ü-tf8"))}] * 2,
                    "totalCount": 2,
                },
                "comments": {"totalCount": rng.randint(0, 40)},
                "reactions": {"+1": rng.randint(0, 9), "heart": rng.randint(0, 3)},
                "body": "Steps:\n1. run `paginate`\n2. see\ttabs and é\n" * rng.randint(1, 6),
                "createdAt": _timestamp(rng),
            }
        )
    return {
        "data": {
            "repository": {
                "name": "jsonbudget",
                "owner": {"login": "example"},
                "issues": {"totalCount": issues, "nodes": nodes},
            }
        }
    }


def log_text(chars: int = 100_000, *, seed: int = 4) -> str:
    """Log lines with quotes, tabs and newlines (JSON escapes) and a little non-ASCII."""
    rng = random.Random(seed)
    lines = []
    total = 0
    while total < chars:
        line = (
            f'{_timestamp(rng)}\tINFO\trequest id={rng.randint(1, 10**9)} path="/api/orders" '
            f"status={rng.choice((200, 200, 200, 404, 500))} user=“{rng.choice(_FIRST)}”\n"
        )
        lines.append(line)
        total += len(line)
    return "".join(lines)[:chars]


def multibyte_text(chars: int = 1_000_000, *, seed: int = 5) -> str:
    """*chars* characters drawn from `MULTIBYTE_ALPHABET` (about 2.6 UTF-8 bytes each)."""
    rng = random.Random(seed)
    block = "".join(rng.choices(MULTIBYTE_ALPHABET, k=4096))
    return (block * (chars // len(block) + 1))[:chars]


def cold_copy(s: str, round_: int) -> str:
    """A fresh ``str`` equal in length to *s*: no cached UTF-8 form attached to it.

    CPython caches a string's UTF-8 bytes once something asks for them (orjson does), so
    timing the same object twice would measure a warm string.
    """
    return MULTIBYTE_ALPHABET[round_ % len(MULTIBYTE_ALPHABET)] + s[1:]

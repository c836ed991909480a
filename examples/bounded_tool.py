"""Door 1: `bounded_dumps` inside a tool implementation.

A tool returns whatever its backend gave it; `bounded_dumps` makes sure the JSON that goes
back to the model fits the budget, stays valid, and marks every cut with "…[".

    python examples/bounded_tool.py
"""

from __future__ import annotations

import orjson

from jsonbudget import bounded_dumps, encode

BUDGET = 2048


def search_logs(query: str) -> bytes:
    """A tool: 500 matching log lines and a 1 MB stack trace. Returns JSON bytes."""
    hits = [
        {"line": i, "level": "error" if i % 7 == 0 else "info", "message": f"{query} #{i} ✓"}
        for i in range(500)
    ]
    trace = "Traceback (most recent call last):\n" + "  frame\n" * 130_000
    result = {"query": query, "count": len(hits), "hits": hits, "trace": trace}
    return bounded_dumps(result, max_bytes=BUDGET)


def main() -> None:
    out = search_logs("timeout")
    doc = orjson.loads(out)  # always valid JSON
    print(f"{len(out)} bytes (budget {BUDGET})")
    print(f"hits kept: {sum(1 for h in doc['hits'] if isinstance(h, dict))} of {doc['count']}")
    print(f"last element: {doc['hits'][-1]}")
    print(f"trace ends: {doc['trace'][-30:]!r}")
    # encode() gives the same bytes plus the side-band report of every cut.
    report = encode({"hits": list(range(1000))}, max_bytes=128)
    for cut in report.truncations:
        print(f"cut at {cut.path}: {cut.kind}, {cut.omitted} {cut.unit} omitted")


if __name__ == "__main__":
    main()

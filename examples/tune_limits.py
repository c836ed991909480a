"""Door 3: measure real items and pick the page budget (what `jsonbudget tune` does).

python examples/tune_limits.py [chart.png]
"""

from __future__ import annotations

import random
import sys

from jsonbudget import Tuner, write_chart


def sample_items(n: int = 2000) -> list[dict[str, object]]:
    rng = random.Random(7)
    items: list[dict[str, object]] = []
    for i in range(n):
        words = rng.choice([5, 20, 80, 300]) if i % 50 else 6000  # 2% very long
        items.append({"id": i, "title": f"ticket {i}", "body": " ".join(["naïve"] * words)})
    return items


def main() -> None:
    tuner = Tuner(goal_truncated=0.01)  # at most 1% of items cut or oversized
    report = tuner.tune(sample_items())
    s = report.item_bytes
    print(f"items: p50={s.p50} p90={s.p90} p99={s.p99} max={s.max} bytes")
    for row in report.budgets:
        print(
            f"{row.max_bytes:>8} B: {row.items_per_page:6.1f} items/page, {row.pages:4} pages, "
            f"{row.truncated_share:6.1%} cut {'ok' if row.meets_goal else ''}"
        )
    print(f"recommended max_bytes: {report.recommended_max_bytes}")
    if len(sys.argv) > 1:
        write_chart(report, sys.argv[1])
        print(f"chart: {sys.argv[1]}")


if __name__ == "__main__":
    main()

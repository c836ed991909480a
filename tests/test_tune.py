"""`tune`: measured size distributions and per-budget paging figures, checked exactly."""

from __future__ import annotations

import json
import sys
from pathlib import Path

import orjson
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from jsonbudget import Limits, MemoryCursorStore, Scope, Tuner, paginate, tune, write_chart
from jsonbudget._cli.main import EXIT_ERROR, EXIT_OK, EXIT_USAGE, main
from jsonbudget._cli.tune import DEFAULT_BUDGETS, percentile
from jsonbudget.errors import LimitError

PNG_SIGNATURE = b"\x89PNG\r\n\x1a\n"


def sized(k: int) -> dict[str, str]:
    """An item whose encoding is exactly ``k + 8`` bytes: ``{"s":"…k chars…"}``."""
    return {"s": "x" * k}


def test_percentile_is_nearest_rank() -> None:
    values = list(range(1, 11))  # 1..10
    assert percentile(values, 50) == 5
    assert percentile(values, 90) == 9
    assert percentile(values, 99) == 10
    assert percentile(values, 100) == 10
    assert percentile([7], 50) == 7
    assert percentile([], 50) is None
    with pytest.raises(ValueError, match="p must be"):
        percentile(values, 0)


def test_known_distribution() -> None:
    # Item sizes 9..108 (k = 1..100); string field sizes 3..102 (k chars plus quotes).
    report = tune([sized(k) for k in range(1, 101)])
    assert report.items == 100
    assert report.sample_complete is True
    ib = report.item_bytes
    assert (ib.count, ib.p50, ib.p90, ib.p99, ib.max) == (100, 58, 98, 107, 108)
    fb = report.field_bytes
    assert (fb.count, fb.p50, fb.p90, fb.p99, fb.max) == (100, 52, 92, 101, 102)
    assert report.item_sizes == tuple(k + 8 for k in range(1, 101))
    # p99 = 101 bytes: the next power of two
    assert report.suggested_max_field_bytes == 128
    assert [row.max_bytes for row in report.budgets] == list(DEFAULT_BUDGETS)
    assert all(row.truncated_share == 0.0 for row in report.budgets)
    assert report.recommended_max_bytes == 4096


def test_goal_picks_the_smallest_budget_that_meets_it() -> None:
    # 3 of 100 items (3%) encode to 10,008 bytes: oversized below 16 KiB, whole from it.
    items = [sized(10_000)] * 3 + [sized(92)] * 97
    report = tune(items)
    rows = {row.max_bytes: row for row in report.budgets}
    for small in (4096, 8192):
        assert rows[small].oversized_items == 3
        assert rows[small].truncated_items == 0
        assert rows[small].truncated_share == 0.03
        assert rows[small].meets_goal is False
    assert rows[16384].oversized_items == 0
    assert rows[16384].truncated_share == 0.0
    assert report.recommended_max_bytes == 16384
    # A looser goal accepts the smallest budget; a goal of 0 still needs 16 KiB.
    assert tune(items, goal_truncated=0.05).recommended_max_bytes == 4096
    assert tune(items, goal_truncated=0.0).recommended_max_bytes == 16384
    # No candidate meets the goal: no recommendation.
    assert tune(items, budgets=[4096, 8192]).recommended_max_bytes is None


def test_field_cap_truncations_count_as_truncated() -> None:
    items = [{"a": "y" * 500}] * 5 + [{"a": "z"}] * 5
    assert Tuner(budgets=[65536]).tune(items).budgets[0].truncated_items == 0
    row = Tuner(budgets=[65536], max_field_bytes=64).tune(items).budgets[0]
    assert (row.truncated_items, row.oversized_items, row.pages) == (5, 0, 1)
    assert row.truncated_share == 0.5


@pytest.mark.parametrize("budget", [4096, 16384, 131072])
def test_pages_match_paginate(budget: int) -> None:
    """The figures come from real paging: `paginate` over the same items agrees."""
    items = [{"id": i, "body": "ö" * ((i * 37) % 3000)} for i in range(400)]
    items[123] = {"id": 123, "body": "big" * 20_000}
    row = Tuner(budgets=[budget]).tune(items).budgets[0]
    store = MemoryCursorStore()
    pages = 0
    oversized = 0
    cursor = None
    while True:
        page = paginate(items, scope=Scope("t"), cursor=cursor, store=store, limits=Limits(budget))
        pages += 1
        oversized += len(page.oversized)
        if page.next_cursor is None:
            break
        cursor = page.next_cursor
    assert row.pages == pages
    assert row.oversized_items == oversized
    assert row.items_per_page == 400 / pages


def test_sample_takes_the_first_items() -> None:
    report = tune([sized(k) for k in range(100)], sample=10)
    assert report.items == 10
    assert report.sample_complete is False
    assert report.item_bytes.max == 17


def test_bad_options_are_refused() -> None:
    with pytest.raises(LimitError, match="max_bytes"):
        Tuner(budgets=[10])
    with pytest.raises(LimitError, match="goal_truncated"):
        Tuner(goal_truncated=1.5)
    with pytest.raises(LimitError, match="budgets"):
        Tuner(budgets=[])
    with pytest.raises(LimitError, match="sample"):
        Tuner(sample=0)
    with pytest.raises(LimitError, match="oversized='error' is invalid"):
        Tuner(oversized="error")


@settings(max_examples=25, deadline=None)
@given(
    st.lists(
        st.fixed_dictionaries({"t": st.text(max_size=3000)}),
        min_size=1,
        max_size=40,
    ),
    st.floats(min_value=0, max_value=1),
)
def test_figures_are_consistent(items: list[dict[str, str]], goal: float) -> None:
    report = tune(items, budgets=[4096, 8192], goal_truncated=goal)
    for row in report.budgets:
        assert 1 <= row.pages <= len(items)
        assert row.truncated_items + row.oversized_items <= len(items)
        assert row.truncated_share == (row.truncated_items + row.oversized_items) / len(items)
        assert row.meets_goal == (row.truncated_share <= goal)
    meeting = [row.max_bytes for row in report.budgets if row.meets_goal]
    assert report.recommended_max_bytes == (min(meeting) if meeting else None)


# -- the command ---------------------------------------------------------------------


@pytest.fixture
def known_jsonl(tmp_path: Path) -> Path:
    path = tmp_path / "items.jsonl"
    lines = [json.dumps(sized(10_000))] * 3 + [json.dumps(sized(92))] * 97
    path.write_text("\n".join(lines) + "\n")
    return path


def test_cli_tune_json(known_jsonl: Path, capsys: pytest.CaptureFixture[str]) -> None:
    assert main(["tune", str(known_jsonl), "--json"]) == EXIT_OK
    report = orjson.loads(capsys.readouterr().out)
    assert report["items"] == 100
    assert report["item_bytes"] == {
        "count": 100,
        "p50": 100,
        "p90": 100,
        "p99": 10008,
        "max": 10008,
    }
    assert report["recommended_max_bytes"] == 16384
    assert report["chart"] is None
    assert report["budgets"][0] == {
        "max_bytes": 4096,
        "pages": report["budgets"][0]["pages"],
        "items_per_page": 100 / report["budgets"][0]["pages"],
        "truncated_items": 0,
        "oversized_items": 3,
        "truncated_share": 0.03,
        "meets_goal": False,
    }


def test_cli_tune_table(known_jsonl: Path, capsys: pytest.CaptureFixture[str]) -> None:
    args = ["tune", str(known_jsonl), "--budgets", "4K,16K", "--goal-truncated", "0.05"]
    assert main(args) == EXIT_OK
    out = capsys.readouterr().out
    assert out.startswith("Measured 100 items (all items).\n")
    assert "Recommended: --max-bytes 4096 (4 KiB)\n" in out
    assert "3.0%" in out


def test_cli_tune_sqlite(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    import sqlite3

    db = tmp_path / "d.sqlite3"
    conn = sqlite3.connect(db)
    conn.execute("CREATE TABLE r (id INTEGER PRIMARY KEY, s TEXT)")
    conn.executemany("INSERT INTO r VALUES (?, ?)", [(i, "x" * i) for i in range(1, 51)])
    conn.commit()
    conn.close()
    assert main(["tune", str(db), "--table", "r", "--sample", "20", "--json"]) == EXIT_OK
    report = orjson.loads(capsys.readouterr().out)
    assert report["items"] == 20
    assert report["sample_complete"] is False
    # {"id":20,"s":"x"*20} is 16 + 2 digits + 20 = 38 bytes
    assert report["item_bytes"]["max"] == len(orjson.dumps({"id": 20, "s": "x" * 20}))


def test_cli_tune_chart(
    known_jsonl: Path, tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    chart = tmp_path / "sizes.png"
    assert main(["tune", str(known_jsonl), "--chart", str(chart), "--json"]) == EXIT_OK
    assert orjson.loads(capsys.readouterr().out)["chart"] == str(chart)
    data = chart.read_bytes()
    assert data.startswith(PNG_SIGNATURE)
    assert len(data) > 10_000


def test_write_chart_api(tmp_path: Path) -> None:
    report = tune([sized(k * 50) for k in range(1, 200)])
    path = tmp_path / "c.png"
    write_chart(report, path)
    assert path.read_bytes()[:8] == PNG_SIGNATURE


def test_cli_tune_chart_without_matplotlib(
    known_jsonl: Path,
    tmp_path: Path,
    capsys: pytest.CaptureFixture[str],
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    for name in list(sys.modules):
        if name == "matplotlib" or name.startswith("matplotlib."):
            monkeypatch.delitem(sys.modules, name)
    monkeypatch.setitem(sys.modules, "matplotlib", None)  # import now fails
    chart = tmp_path / "c.png"
    assert main(["tune", str(known_jsonl), "--chart", str(chart)]) == EXIT_ERROR
    assert capsys.readouterr().err == (
        "jsonbudget: error: --chart needs matplotlib: install the 'cli' extra"
        " (in jsonbudget's source tree: python3 -m pip install '.[cli]')\n"
    )
    assert not chart.exists()
    with pytest.raises(ImportError, match=r"the chart needs matplotlib: install the 'cli' extra"):
        write_chart(tune([sized(1)]), chart)


def test_cli_tune_usage_errors(known_jsonl: Path, capsys: pytest.CaptureFixture[str]) -> None:
    assert main(["tune", str(known_jsonl), "--goal-truncated", "2"]) == EXIT_USAGE
    assert "argument --goal-truncated: '2' is not in [0, 1]" in capsys.readouterr().err
    assert main(["tune", str(known_jsonl), "--budgets", "10"]) == EXIT_USAGE
    assert capsys.readouterr().err == (
        "jsonbudget: error: max_bytes=10 is invalid: must be at least 64\n"
    )


def test_max_keys_caps_members_not_items(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    # Regression: --max-items once capped object members too, so "1 item per page"
    # printed one member of each row.
    data = tmp_path / "rows.json"
    data.write_text('[{"a": 1, "b": 2, "c": 3}, {"a": 4, "b": 5, "c": 6}]', encoding="utf-8")
    assert main(["dump", str(data), "--max-items", "1"]) == EXIT_OK
    out = orjson.loads(capsys.readouterr().out)
    # The file is read as a stream, so the count of what is left is not known.
    assert out == [{"a": 1, "b": 2, "c": 3}, "…[omitted: more items]"]
    assert main(["dump", str(data), "--max-keys", "1"]) == EXIT_OK
    out = orjson.loads(capsys.readouterr().out)
    assert out == [{"a": 1, "…": "[omitted: 2 more keys]"}, {"a": 4, "…": "[omitted: 2 more keys]"}]
    report = Tuner(budgets=[65536], max_keys=2).tune([{"a": 1, "b": 2, "c": 3}])
    assert report.budgets[0].truncated_items == 1

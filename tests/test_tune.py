"""`tune`: measured size distributions and per-budget paging figures, checked exactly."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from collections.abc import Iterator
from fractions import Fraction
from pathlib import Path

import orjson
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from jsonbudget import Limits, MemoryCursorStore, Scope, Tuner, paginate, tune, write_chart
from jsonbudget._cli.main import EXIT_ERROR, EXIT_OK, EXIT_USAGE, main
from jsonbudget._cli.tune import DEFAULT_BUDGETS, percentile
from jsonbudget._encode.encoder import Encoder
from jsonbudget._limits import MAX_DEPTH, MAX_LIMIT
from jsonbudget._sources.base import Clipped
from jsonbudget.errors import LimitError
from tests.limited import bounded_run

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


def test_regression_nothing_measured_recommends_nothing() -> None:
    # An empty sample met every goal (0 of 0 cut) and recommended the smallest budget.
    report = tune([])
    assert report.items == 0
    assert report.recommended_max_bytes is None
    assert all(row.meets_goal for row in report.budgets)  # the rows say what they saw


def test_regression_the_cli_says_an_empty_source_has_nothing_to_measure(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    empty = tmp_path / "empty.json"
    empty.write_text("[]")
    assert main(["tune", str(empty), "-q"]) == 0
    assert capsys.readouterr().out.splitlines()[-1] == (
        "Nothing to recommend: the source has no items to measure."
    )


def test_bad_options_are_refused() -> None:
    with pytest.raises(LimitError, match="budgets"):
        Tuner(budgets=[10])
    with pytest.raises(LimitError, match="goal_truncated"):
        Tuner(goal_truncated=1.5)
    with pytest.raises(LimitError, match="budgets"):
        Tuner(budgets=[])
    with pytest.raises(LimitError, match="sample"):
        Tuner(sample=0)
    with pytest.raises(LimitError, match="oversized='error' is invalid"):
        Tuner(oversized="error")  # type: ignore[arg-type]


@pytest.mark.parametrize(
    ("budgets", "bad", "reason"),
    [
        ([100], 100, "a page needs at least 342 bytes"),
        ([4096, 300], 300, "a page needs at least 342 bytes"),
        ([10], 10, "must be at least 64"),
        ([4096, 1.5], 1.5, "must be an int, not float"),
    ],
)
def test_regression_a_bad_budget_is_named_budgets(
    budgets: list[int], bad: object, reason: str
) -> None:
    # The error named `max_bytes`, an option the caller never passed to Tuner.
    with pytest.raises(LimitError) as info:
        Tuner(budgets=budgets)
    assert info.value.name == "budgets"
    assert info.value.value == bad
    assert str(info.value) == f"budgets={bad!r} is invalid: {reason}"


def test_other_options_keep_their_own_names() -> None:
    with pytest.raises(LimitError) as info:
        Tuner(budgets=[4096], markers="fancy")  # type: ignore[arg-type]
    assert info.value.name == "markers"


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
        " (pip install 'jsonbudget[cli]', or in jsonbudget's source tree:"
        " pip install '.[cli]')\n"
    )
    assert not chart.exists()
    with pytest.raises(ImportError, match=r"the chart needs matplotlib: install the 'cli' extra"):
        write_chart(tune([sized(1)]), chart)


def test_cli_tune_usage_errors(known_jsonl: Path, capsys: pytest.CaptureFixture[str]) -> None:
    assert main(["tune", str(known_jsonl), "--goal-truncated", "2"]) == EXIT_USAGE
    assert "argument --goal-truncated: '2' is not in [0, 1]" in capsys.readouterr().err
    assert main(["tune", str(known_jsonl), "--budgets", "10"]) == EXIT_USAGE
    assert capsys.readouterr().err == (
        "jsonbudget: error: budgets=10 is invalid: must be at least 64\n"
    )
    # Regression: an empty entry was skipped, so a typo ran with one budget fewer.
    for budgets in ("4K,,8K", "4K,", ","):
        assert main(["tune", str(known_jsonl), "--budgets", budgets]) == EXIT_USAGE
        assert f"argument --budgets: {budgets!r} has an empty entry" in capsys.readouterr().err


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


# -- regressions -------------------------------------------------------------------------


def test_regression_cyclic_items_do_not_hang() -> None:
    # The string walk had no seen-set: a self-containing item grew its stack forever.
    out = bounded_run(
        """
        from jsonbudget import tune
        d = {"name": "x"}
        d["self"] = d
        l = ["s"]
        l.append(l)
        r = tune([d, l], budgets=[4096])
        print(r.item_sizes, r.field_bytes.count, r.field_bytes.max)
        """,
        memory=1 << 30,
        timeout=60,
    )
    # As the encoder writes them: the repeat is a cycle marker and adds no string.
    d: dict[str, object] = {"name": "x"}
    d["self"] = d
    cyclic_list: list[object] = ["s"]
    cyclic_list.append(cyclic_list)
    fallback = Encoder(max_bytes=MAX_LIMIT, max_depth=MAX_DEPTH)
    sizes = (len(fallback.dumps(d)), len(fallback.dumps(cyclic_list)))
    assert out == f"{sizes} 2 3\n"


def test_shared_values_that_are_not_cycles_count_each_time() -> None:
    s = {"t": "abc"}
    report = tune([{"a": s, "b": [s, s]}], budgets=[4096])
    assert report.field_bytes.count == 3
    assert report.item_bytes.max == len(orjson.dumps({"a": s, "b": [s, s]}))


def test_nesting_past_max_depth_is_measured_as_the_encoder_writes_it() -> None:
    def nested(depth: int) -> object:
        value: object = "deep"
        for _ in range(depth):
            value = [value]
        return value

    fits = tune([nested(MAX_DEPTH)], budgets=[4096])
    assert fits.item_bytes.max == len(orjson.dumps(nested(MAX_DEPTH)))
    assert fits.field_bytes.count == 1
    # One level more, no page can hold: a depth marker, and its string is not counted.
    deeper = nested(MAX_DEPTH + 1)
    past = tune([deeper], budgets=[4096])
    written = Encoder(max_bytes=MAX_LIMIT, max_depth=MAX_DEPTH).dumps(deeper)
    assert b"deep" not in written
    assert past.item_bytes.max == len(written)
    assert past.field_bytes.count == 0


def test_regression_budget_below_the_page_minimum_is_refused_at_construction() -> None:
    # Accepted, then refused by the page builder only after the items were consumed.
    with pytest.raises(LimitError, match="a page needs at least"):
        Tuner(budgets=[100])
    with pytest.raises(LimitError, match="a page needs at least"):
        Tuner(budgets=[4096, 100])
    consumed: list[int] = []

    def items() -> Iterator[dict[str, int]]:
        for i in range(5):
            consumed.append(i)
            yield {"id": i}

    with pytest.raises(LimitError, match="a page needs at least"):
        tune(items(), budgets=[100])
    assert consumed == []


def test_regression_tune_refuses_a_small_budget_before_reading_a_fifo(tmp_path: Path) -> None:
    fifo = tmp_path / "items.fifo"
    os.mkfifo(fifo)
    proc = subprocess.run(
        [sys.executable, "-m", "jsonbudget", "tune", str(fifo), "--budgets", "100"],
        capture_output=True,
        text=True,
        timeout=60,
        check=False,
    )
    assert proc.returncode == EXIT_USAGE
    assert "a page needs at least" in proc.stderr


def _nearest_rank(n: int, p: Fraction) -> int:
    """The smallest rank r with r / n >= p / 100, by counting (the definition)."""
    return next(r for r in range(1, n + 1) if Fraction(r, n) * 100 >= p)


def test_regression_percentile_is_exact() -> None:
    # ceil(7 / 100 * 100) was 8 in floats: a rank too far.
    assert percentile(list(range(1, 101)), 7) == 7
    assert percentile(list(range(1, 1001)), 99.9) == 999
    for n in range(1, 301):
        values = list(range(1, n + 1))
        for p in range(1, 101):
            assert percentile(values, p) == _nearest_rank(n, Fraction(p))


def test_regression_clipped_texts_count_at_their_full_length() -> None:
    # A source's cut value was left out of the field stats, and the item measured as
    # orjson's {"head","length","unit"} object.
    body = Clipped("x" * 100, 10_000_000, "chars")
    report = tune([{"id": 1, "body": body}], budgets=[4096])
    assert report.field_bytes.max == 2 + 10_000_000
    assert report.item_bytes.max == len(b'{"id":1,"body":""}') + 10_000_000
    assert report.suggested_max_field_bytes == 1 << 24
    # Counted in bytes (a file item too long, a JSON cell): its head as encoded, plus
    # the bytes left out.
    item = Clipped('{"a":"' + "y" * 50, 1000, "bytes")
    whole = tune([item], budgets=[4096])
    head = len(orjson.dumps(item.head))
    assert whole.item_bytes.max == head + item.omitted
    assert whole.field_bytes.max == head + item.omitted


def test_clipped_binary_is_measured_as_the_encoder_writes_the_whole_value() -> None:
    cut = tune([{"b": Clipped(b"abc", 30, "bytes")}], budgets=[4096])
    written = Encoder(max_bytes=MAX_LIMIT).dumps({"b": b"abc" * 10})
    assert cut.item_bytes.max == len(written)
    assert cut.field_bytes.count == 0


def test_regression_tune_takes_strategy_and_markers() -> None:
    items = [sized(5000)] * 3
    report = tune(items, budgets=[4096], strategy="prefix", markers="structured")
    same = Tuner(budgets=[4096], strategy="prefix", markers="structured").tune(items)
    assert report == same
    with pytest.raises(LimitError, match="markers"):
        tune(items, markers="loud")  # type: ignore[arg-type]
    with pytest.raises(LimitError, match="strategy"):
        tune(items, strategy="middle")  # type: ignore[arg-type]


def test_regression_tune_measures_with_the_default_hook_pages_are_served_with() -> None:
    # Tuner took no `default`: a value paginate(default=...) serves as an object was
    # measured as an unencodable marker, every item "cut".
    class Point:
        def __init__(self, i: int) -> None:
            self.x, self.y = i, -i

    items = [{"id": i, "at": Point(i)} for i in range(50)]
    plain = Tuner(budgets=[4096]).tune(items)
    hooked = Tuner(budgets=[4096], default=vars).tune(items)
    assert plain.budgets[0].truncated_items == 50
    assert hooked.budgets[0].truncated_items == 0
    assert hooked.item_bytes.max == len(b'{"id":49,"at":{"x":49,"y":-49}}')
    assert tune(items, budgets=[4096], default=vars) == hooked


def test_regression_too_many_budgets_are_reported_as_passed() -> None:
    """Found by a tester: LimitError.value was the number of candidates, so 33 budgets
    said "budgets=33 is invalid", as if 33 had been passed; errors.md says value is
    what was passed."""
    budgets = [4096 + i for i in range(33)]
    with pytest.raises(LimitError) as info:
        Tuner(budgets=budgets)
    assert info.value.name == "budgets"
    assert info.value.value is budgets
    assert info.value.reason == "at most 32 candidates, not 33"

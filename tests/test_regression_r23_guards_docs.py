"""r23 docs audit of the guards, tokens and telemetry pages: an unmeasured oversized
item summed as 0 bytes, a too-large preview refused under max_bytes's name,
`gate_result` without the gate's reader options, a counter that raised on a lone
surrogate, and a hint that fits only a str."""

from __future__ import annotations

import math
from pathlib import Path
from typing import Any

import orjson
import pytest

from jsonbudget import (
    EstimatedTokenCounter,
    Limits,
    MemoryCursorStore,
    OversizedItem,
    ResultGate,
    ResultReader,
    Scope,
    SpillStore,
    TurnBudget,
    encode,
    fit_tokens,
    gate_result,
    paginate,
    summarize,
)
from jsonbudget.errors import CursorScopeError, LimitError


class _Page:
    """A page as `summarize` duck-types one, with the oversized entries given."""

    def __init__(self, oversized: tuple[OversizedItem, ...]) -> None:
        self.items = [None] * len(oversized)
        self.complete = False
        self.next_cursor = None
        self.truncations = ()
        self.oversized = oversized
        self.incomplete_reason = "page_full"

    def to_json(self) -> bytes:
        return b"{}"


def test_regression_unmeasured_oversized_item_is_not_summed_as_zero_bytes() -> None:
    page = paginate(
        [{"id": i, "b": "x" * 3000} for i in range(10)],
        scope=Scope("a", {"q": 1}),
        store=MemoryCursorStore(),
        limits=Limits(1024),
    )
    assert [o.encoded_bytes for o in page.oversized] == [None]
    summary = summarize(page)
    assert summary["oversized"] == 1
    assert summary["oversized_encoded_bytes"] == 0
    assert summary["oversized_unmeasured"] == 1


def test_regression_oversized_bytes_sum_only_the_measured_and_count_the_rest() -> None:
    page = _Page(
        (
            OversizedItem(0, 5018, "spilled", "item.ref"),
            OversizedItem(1, None, "truncated"),
            OversizedItem(2, 7000, "spilled", "item.ref"),
            OversizedItem(3, None, "placeholder"),
        )
    )
    summary = summarize(page)
    assert summary["oversized"] == 4
    assert summary["oversized_encoded_bytes"] == 12018
    assert summary["oversized_unmeasured"] == 2


@pytest.mark.parametrize(
    ("options", "name"),
    [
        ({"max_bytes": 1000, "preview_bytes": 2000}, "preview_bytes"),
        ({"max_bytes": 300, "preview_bytes": 500}, "max_bytes"),  # below every preview
        ({"max_bytes": 300}, "max_bytes"),
        ({"max_bytes": 1000, "preview_bytes": 100}, "preview_bytes"),
    ],
)
def test_regression_preview_above_max_bytes_is_refused_naming_preview_bytes(
    options: dict[str, Any], name: str
) -> None:
    with pytest.raises(LimitError) as info:
        ResultGate(**options)
    assert info.value.name == name
    assert info.value.value == options[name]


@pytest.mark.parametrize(
    ("options", "name", "said"),
    [
        ({"max_bytes": 5000, "preview_bytes": 6000}, "preview_bytes", "max_bytes (5000)"),
        (
            {"max_bytes": 5000, "max_result_bytes": 1000, "preview_bytes": 2000},
            "preview_bytes",
            "max_result_bytes (1000)",
        ),
        ({"max_bytes": 5000, "max_result_bytes": 300}, "max_result_bytes", "preview_bytes"),
        (
            {"max_bytes": 5000, "max_result_bytes": 300, "preview_bytes": 400},
            "preview_bytes",
            "at least",
        ),
    ],
)
def test_regression_turn_preview_above_its_limit_is_refused_naming_preview_bytes(
    options: dict[str, Any], name: str, said: str
) -> None:
    with pytest.raises(LimitError) as info:
        TurnBudget(**options)
    assert info.value.name == name
    assert info.value.value == options[name]
    assert said in info.value.reason


def test_regression_gate_result_takes_the_gates_reader_and_principal(tmp_path: Path) -> None:
    reader = ResultReader(spill=SpillStore(tmp_path / "spill"))
    out = gate_result(list(range(5000)), max_bytes=1000, reader=reader, principal="alice")
    assert out.spill is not None
    assert len(out.data) <= 1000
    ref = orjson.loads(out.data)["spilled"]["ref"]
    page = reader.read(ref, "/0", principal="alice")
    assert orjson.loads(page.data)["items"] == [0]
    with pytest.raises(CursorScopeError):
        reader.read(ref, principal="bob")


def test_regression_gate_result_checks_reader_and_principal_on_its_fast_path() -> None:
    # A value that fits would skip the gate: its options must be refused all the same.
    bad_reader: Any = 3
    with pytest.raises(TypeError, match="reader must be a ResultReader"):
        gate_result([1], max_bytes=10_000, reader=bad_reader)
    bad_principal: Any = 3
    with pytest.raises(TypeError, match="principal must be a str or a callable"):
        gate_result([1], max_bytes=10_000, principal=bad_principal)


@pytest.mark.parametrize("per_token", [1, 4.0])
def test_regression_estimated_count_of_a_lone_surrogate_is_the_replacement_bytes(
    per_token: float,
) -> None:
    counter = EstimatedTokenCounter(bytes_per_token=per_token)
    text = "a\ud800b\udfff"
    # The encoder writes each lone surrogate as U+FFFD, 3 bytes in UTF-8.
    written = orjson.loads(encode(text, max_bytes=1000).data)
    assert written.startswith("a\ufffdb\ufffd")
    assert counter.count(text) == math.ceil(len("a\ufffdb\ufffd".encode()) / per_token)
    assert counter.count(text) == counter.count("a\ufffdb\ufffd")


@pytest.mark.parametrize("counter", [[1], b"o200k_base", (1,), bytearray(b"x")])
def test_regression_a_non_str_counter_is_not_called_an_encodings_name(counter: Any) -> None:
    with pytest.raises(LimitError) as info:
        fit_tokens([1], max_tokens=10, counter=counter)
    assert info.value.name == "counter"
    assert "encoding's name" not in info.value.reason
    assert type(counter).__name__ in info.value.reason


def test_a_str_counter_still_points_to_tiktoken() -> None:
    with pytest.raises(LimitError) as info:
        fit_tokens([1], max_tokens=10, counter="o200k_base")
    assert "TiktokenCounter('o200k_base')" in info.value.reason


def test_fit_tokens_keyword_max_bytes_overrides_limits_as_encode_does() -> None:
    # Pins the documented rule (not a regression: the behaviour is unchanged; the docs
    # called both caps hard): max_bytes= replaces limits.max_bytes, as in encode.
    rows = list(range(100_000))
    fitted = fit_tokens(
        rows, max_tokens=1000, counter=EstimatedTokenCounter(), limits=Limits(100), max_bytes=200
    )
    assert fitted.max_bytes == 200
    assert fitted.data == encode(rows, Limits(100), max_bytes=200).data


def test_regression_read_result_refuses_a_reader_that_is_not_one() -> None:
    # It raised AttributeError ('int' object has no attribute 'read').
    from jsonbudget import read_result

    with pytest.raises(TypeError, match="reader must be a ResultReader, not int"):
        read_result("x.json", reader=3, principal="a")  # type: ignore[arg-type]

"""r28: a model serializer's JSON is the same bytes wherever the model stands.

Inside a plain container (or a dataclass) that its library wrote whole, a pydantic model
with a `@model_serializer` was written by pydantic (`values._as_fragment`), so an int
past 64 bits in what the serializer returned was a number there; alone, or walked, the
same model is its serializer's JSON written as plain JSON, where that int is marked
(docs/values.md). A spill file written a member at a time (`JsonWriter`) writes such a
model alone where the encoder's one call wrote the container around it whole, so the file
held a marker where `dumps_whole` held a number (CI's hypothesis property in
tests/test_whole.py); and the other way round, a run the writer wrote whole held a number
where `dumps_whole`, walking a list that needs a marker, held the marker.
"""

from __future__ import annotations

import math
from pathlib import Path
from typing import Any

import pydantic

from jsonbudget import ResultGate, SpillStore, bounded_dumps
from jsonbudget._encode import whole
from jsonbudget._encode.encoder import dumps_whole
from jsonbudget._encode.whole import JsonWriter
from tests.strategies import Record, with_extra
from tests.test_whole import PMap, PSerialized, written_shrunk

BIG = 2**70
MARKED = b'{"r":["\xe2\x80\xa6[unencodable: int beyond 64 bits]"],"n":1}'


class Wrapping(pydantic.BaseModel):
    """A wrapping model serializer adding an int past 64 bits to pydantic's fields."""

    a: int = 1

    @pydantic.model_serializer(mode="wrap")
    def _as(self, handler: Any) -> Any:
        return {**handler(self), "x": BIG}


class Rooted(pydantic.RootModel[Any]):
    @pydantic.model_serializer
    def _as(self) -> Any:
        return [self.root, BIG]


def written(value: Any) -> bytes:
    """*value* as the spill writer writes it, with its real thresholds."""
    return b"".join(JsonWriter(None, {}, 1 << 40).chunks(value))


def nested(depth: int, leaf: Any) -> Any:
    value = leaf
    for _ in range(depth):
        value = with_extra(value)
    return value


def test_regression_model_serializer_written_alike_in_and_out_of_a_container() -> None:
    """A model serializer's int past 64 bits is marked alone, in a list, in a dataclass
    alike (as a pydantic dataclass's always was): no longer a number only where a
    container around it was written whole by its library. Pages and spills alike."""
    for model in (PSerialized(rows=[BIG]), Wrapping(), Rooted(1)):
        alone = dumps_whole(model)
        assert alone is not None
        assert b"beyond 64 bits" in alone
        assert dumps_whole([model]) == b"[" + alone + b"]"
        assert dumps_whole(Record(1, model)) == b'{"name":1,"value":' + alone + b"}"
        page = bounded_dumps(model, max_bytes=1000)
        assert bounded_dumps([model], max_bytes=1000) == b"[" + page + b"]"


def test_regression_spill_writer_shrunk_writes_a_model_serializer_as_the_encoder() -> None:
    """CI's example: the writer with its thresholds shrunk wrote the model alone (a
    marker) where the encoder's one call wrote the dataclasses around it whole."""
    value = Record(PMap(mapping={}), nested(3, PSerialized(rows=[BIG])))
    expected = dumps_whole(value)
    assert written_shrunk(value) == expected
    assert written_shrunk(value, markers="structured") == dumps_whole(value, markers="structured")
    assert expected is not None
    assert expected.endswith(b'"later":' + MARKED + b"}}}}")


def test_regression_spill_writer_past_stream_depth_writes_a_model_serializer_as_the_encoder(
    tmp_path: Path,
) -> None:
    """Real thresholds: a model too large for a run (its rows past `_RENDER_BYTES`),
    beside a string past `_WRITE_BYTES`, `_STREAM_DEPTH` levels down, is written alone
    as a level past `_STREAM_DEPTH` (whole, one encoder call of its own): the spill file
    held the marker, the encoder's one call a number."""
    rows: list[Any] = [BIG, *(["y" * 100] * 3000)]
    model = PSerialized(rows=rows)
    value = nested(whole._STREAM_DEPTH - 1, Record("x" * (1 << 20), model))
    expected = dumps_whole(value)
    assert written(value) == expected
    assert expected is not None
    assert b"beyond 64 bits" in expected
    store = SpillStore(tmp_path / "spill")
    out = ResultGate(max_bytes=4096, store=store).gate(value)
    assert out.spill is not None
    assert store.read(out.spill.ref, 0, out.spill.size + 1) == expected


def test_regression_spill_writer_run_writes_a_model_serializer_as_the_encoder() -> None:
    """Real thresholds, the other way: a list past `_WRITE_BYTES` holding a NaN is walked
    by the encoder (the model's int marked), while the writer's run holding the model,
    written whole by one call of its own, had it as a number."""
    for head in (PSerialized(rows=[BIG]), [PSerialized(rows=[BIG])]):
        value = [head, *(["a" * 100] * 20_000), math.nan]
        expected = dumps_whole(value)
        assert expected is not None
        assert MARKED in expected
        assert written(value) == expected

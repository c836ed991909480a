"""Regressions found by the r33 typing probe: user code checked by ``mypy --strict``
against jsonbudget, where the types promised what the code did not do (and the reverse).

The programs are checked in one mypy run (a module fixture). An error a program expects
is written with ``# type: ignore[code]``: strict mode reports an ignore that nothing
needed, so the refusal itself is asserted too."""

from __future__ import annotations

import functools
import inspect
import re
import typing
from decimal import Decimal
from pathlib import Path
from typing import Any

import orjson
import pytest

import jsonbudget.typing
from jsonbudget import (
    AmbiguousSizeError,
    LimitError,
    Limits,
    MemoryCursorStore,
    RedisSpillStore,
    Scope,
    SpillStore,
    Tuner,
    bounded_tool,
    paginate,
    tune,
)
from tests.typecheck import strict_errors

ROOT = Path(__file__).resolve().parent.parent
DOCS = ROOT / "docs"

PROGRAMS: dict[str, str] = {
    # Typed with all four oversized policies, tune refused two of them at run time.
    "tune_oversized": """
        from jsonbudget import Tuner, tune
        from jsonbudget.typing import OversizedPolicy, TuneOversized

        mode: TuneOversized = "placeholder"
        tune([1], budgets=[4096], oversized=mode)
        Tuner(oversized="truncate")
        policy: OversizedPolicy = "spill"
        tune([1], oversized=policy)  # type: ignore[arg-type]
        Tuner(oversized="error")  # type: ignore[arg-type]
    """,
    # describe() was typed dict[str, JSONValue], invariant: a source returning
    # dict[str, str] was "not a Source".
    "describe_mapping": """
        from collections.abc import Iterator

        from jsonbudget import Limits, MemoryCursorStore, Scope, paginate
        from jsonbudget.typing import Position, Source

        class Tickets:
            def open(
                self, position: Position | None, *, limit_hint: int | None = None
            ) -> Iterator[tuple[dict[str, int], Position]]:
                start = position if isinstance(position, int) else 0
                for i in range(start, 3):
                    yield {"id": i}, i + 1

            def describe(self) -> dict[str, str]:
                return {"kind": "tickets"}

        source: Source[dict[str, int]] = Tickets()
        paginate(Tickets(), scope=Scope("a"), store=MemoryCursorStore(), limits=Limits(1024))
    """,
    # replace(**changes: int | None) let a misspelt limit and None for a required one
    # through the checker.
    "limits_replace": """
        from jsonbudget import Limits

        lim = Limits(1024)
        lim.replace(max_items=5, max_keys=None, max_bytes=2048, max_depth=8, max_pages=None)
        lim.replace(max_field_bytes=None)
        lim.replace(max_itmes=5)  # type: ignore[call-arg]
        lim.replace(max_bytes=None)  # type: ignore[arg-type]
        lim.replace(max_depth=None)  # type: ignore[arg-type]
    """,
    # A user spill store written to SpillTarget, with a max_file_bytes attribute.
    "spill_target": """
        from dataclasses import dataclass

        from jsonbudget.typing import SpillTarget

        @dataclass(frozen=True)
        class Ref:
            ref: str

        class DictSpill:
            max_file_bytes = 10_000_000

            def put(self, data: bytes, *, label: str) -> Ref:
                return Ref(f"{label}-{len(data)}")

        store: SpillTarget = DictSpill()
    """,
}


def _doc_blocks(page: Path) -> str:
    """The ```python blocks of *page*, joined in order, as one program."""
    text = page.read_text(encoding="utf-8")
    return "\n".join(re.findall(r"^```python\n(.*?)^```", text, re.S | re.M))


def _program(page: Path) -> str:
    return "docs_" + page.stem.lower().replace("-", "_")


# Every page with examples: a user copies any of them into strictly checked code. (An
# example showing a refused value on purpose carries a `# type: ignore` of its own.)
DOC_PAGES = [p for p in (ROOT / "README.md", *sorted(DOCS.glob("*.md"))) if _doc_blocks(p)]


@pytest.fixture(scope="module")
def errors(tmp_path_factory: pytest.TempPathFactory) -> dict[str, list[str]]:
    programs = dict(PROGRAMS)
    for page in DOC_PAGES:
        programs[_program(page)] = _doc_blocks(page)
    return strict_errors(tmp_path_factory.mktemp("r33_typing"), programs)


# --- A. tune's oversized policies ---------------------------------------------------------


def test_regression_tune_oversized_is_typed_as_the_policies_it_takes(
    errors: dict[str, list[str]],
) -> None:
    assert errors["tune_oversized"] == []
    assert typing.get_args(jsonbudget.typing.TuneOversized) == ("truncate", "placeholder")
    for mode in typing.get_args(jsonbudget.typing.TuneOversized):
        assert tune([{"a": 1}], budgets=[4096], oversized=mode).budgets[0].max_bytes == 4096
    hints = typing.get_type_hints(Tuner.__init__)
    assert hints["oversized"] == jsonbudget.typing.TuneOversized
    assert typing.get_type_hints(tune)["oversized"] == jsonbudget.typing.TuneOversized
    for refused in ("spill", "error"):
        with pytest.raises(LimitError, match=f"oversized='{refused}' is invalid"):
            Tuner(oversized=refused)  # type: ignore[arg-type]


# --- B. a spill store of your own gets bytes ----------------------------------------------


class _Ref:
    def __init__(self, ref: str) -> None:
        self.ref = ref


class _DictSpill:
    """Written to `SpillTarget` (``put(data: bytes, ...)``), with a file limit of its own."""

    max_file_bytes = 10_000_000

    def __init__(self) -> None:
        self.got: list[type] = []

    def put(self, data: bytes, *, label: str) -> _Ref:
        self.got.append(type(data))
        return _Ref(f"{label}-{len(data)}")


def test_regression_spill_store_of_your_own_gets_bytes(errors: dict[str, list[str]]) -> None:
    # A store with a max_file_bytes attribute was handed a generator (behind a type:
    # ignore): "object of type 'generator' has no len()".
    assert errors["spill_target"] == []
    store = _DictSpill()
    page = paginate(
        [{"id": 1, "body": "x" * 5000}],
        scope=Scope("a"),
        store=MemoryCursorStore(),
        limits=Limits(1024),
        oversized="spill",
        spill_store=store,
    )
    assert store.got == [bytes]
    assert page.oversized[0].encoded_bytes == 5000 + len('{"id":1,"body":""}')
    assert page.oversized[0].ref == f"item-{page.oversized[0].encoded_bytes}"


@pytest.mark.redis
@pytest.mark.parametrize("kind", ["file", "redis"])
def test_spill_store_still_streams_into_its_file(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, kind: str, request: pytest.FixtureRequest
) -> None:
    # The chunks, as they are made, still go to jsonbudget's own stores: the page builder
    # knows them by the module of their put, so a rename would join every item whole.
    got: list[bool] = []
    cls: Any = SpillStore if kind == "file" else RedisSpillStore
    put = cls.put

    @functools.wraps(put)
    def recording(self: Any, data: Any, **kwargs: Any) -> Any:
        got.append(isinstance(data, bytes | bytearray | memoryview))
        return put(self, data, **kwargs)

    monkeypatch.setattr(cls, "put", recording)
    if kind == "file":
        store: Any = SpillStore(tmp_path)
    else:
        url = request.getfixturevalue("redis_server").url
        store = RedisSpillStore(url, prefix="test:r33chunks:")
    page = paginate(
        [{"id": 1, "body": "x" * 5000}],
        scope=Scope("a"),
        store=MemoryCursorStore(),
        limits=Limits(1024),
        oversized="spill",
        spill_store=store,
    )
    ref = page.oversized[0].ref
    assert ref is not None
    assert orjson.loads(store.read(ref)) == {"id": 1, "body": "x" * 5000}
    assert got == [False]


# --- C. bounded_tool(output="json") returns the shape it declares -------------------------


@pytest.mark.parametrize("markers", ["text", "structured"])
@pytest.mark.parametrize("budget", range(64, 72))
def test_regression_bounded_tool_json_keeps_the_declared_shape(
    markers: typing.Literal["text", "structured"], budget: int
) -> None:
    # At budgets 64-68 a mapping came back as one depth-marker str (and in the structured
    # style a list as a marker object): an MCP server's output schema check then failed
    # and the client lost the whole value.
    cuts: list[tuple[Any, ...]] = []

    @bounded_tool(
        max_bytes=budget, output="json", markers=markers, on_truncation=lambda n, c: cuts.append(c)
    )
    def keys() -> dict[str, Any]:
        return {f"{'k' * 12}{i}": Decimal("-1E+15") for i in range(500)}

    @bounded_tool(
        max_bytes=budget, output="json", markers=markers, on_truncation=lambda n, c: cuts.append(c)
    )
    def items() -> list[Any]:
        return [Decimal("-1E+15")] * 500

    for tool, shape in ((keys, dict), (items, list)):
        declared = typing.get_origin(inspect.signature(tool).return_annotation)
        assert declared is shape
        value = tool()
        assert type(value) is shape, value
        assert len(orjson.dumps(value)) <= budget
        assert cuts[-1], value  # the cut is reported


def test_one_marker_stands_where_it_is_reported() -> None:
    @bounded_tool(max_bytes=64, output="json", on_truncation=lambda n, c: seen.extend(c))
    def keys() -> dict[str, Any]:
        return {f"{'k' * 12}{i}": Decimal("-1E+15") for i in range(500)}

    seen: list[Any] = []
    assert keys() == {"…": "…[depth: object with 500 keys]"}
    assert [(t.path, t.kind) for t in seen] == [("/…", "depth")]


# --- D, E. Source.describe and Limits.replace ---------------------------------------------


def test_regression_source_describe_takes_a_narrower_mapping(
    errors: dict[str, list[str]],
) -> None:
    assert errors["describe_mapping"] == []


def test_regression_limits_replace_refuses_misspelt_and_none_limits(
    errors: dict[str, list[str]],
) -> None:
    assert errors["limits_replace"] == []
    # At run time, as before.
    lim = Limits(1024)
    assert lim.replace(max_items=5) == Limits(1024, max_items=5)
    with pytest.raises(TypeError, match=r"^unknown limit\(s\): max_itmes$"):
        lim.replace(max_itmes=5)  # type: ignore[call-arg]
    with pytest.raises(LimitError, match="max_bytes=None is invalid: must be an int"):
        lim.replace(max_bytes=None)  # type: ignore[arg-type]


# --- F. AmbiguousSizeError.wording ----------------------------------------------------------


def test_regression_ambiguous_wording_is_what_the_classifier_produces() -> None:
    # "output_cap" was in the Literal but never produced, nor documented.
    hints = typing.get_type_hints(AmbiguousSizeError)
    assert typing.get_args(hints["wording"]) == ("prompt", "either")
    text = (DOCS / "size-errors.md").read_text(encoding="utf-8")
    assert '`wording` is a hint of what the message names (`"prompt"` or `"either"`)' in text


# --- G. the docs' examples, checked strictly ------------------------------------------------


@pytest.mark.parametrize("page", DOC_PAGES, ids=lambda p: str(p.relative_to(ROOT)))
def test_regression_doc_examples_type_check_strictly(
    errors: dict[str, list[str]], page: Path
) -> None:
    # encoder.md used `Encoder.whole(...)` (typed `Encoded | None`) without a None check;
    # size-errors.md's helpers were unannotated; guards.md and mcp.md had bare
    # `list[dict]`, an unannotated model function and `.error` read off a plain Exception.
    assert errors[_program(page)] == []

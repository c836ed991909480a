"""Documented limits, each tested at its boundary: the last value on one side and the
first on the other. Each test checks a promise made in the spec, the docs or a
docstring that no other test held (a mutation run left these mutants alive)."""

from __future__ import annotations

import asyncio
import io
import os
import uuid
from collections.abc import AsyncIterator, Iterator
from pathlib import Path
from typing import Any

import orjson
import pytest
import redis
from hypothesis import given, settings
from hypothesis import strategies as st
from mcp.types import Implementation

from jsonbudget import (
    AmbiguousSizeError,
    Clipped,
    ExpiredCursor,
    JsonLinesSource,
    LimitError,
    Limits,
    MemoryCursorStore,
    OutputCapTooLarge,
    PageBuilder,
    Paginator,
    PromptTooLong,
    RedisCursorStore,
    ResultGate,
    ResultReader,
    Scope,
    SpillStore,
    TurnBudget,
    classify_size_error,
    read_bounded_text,
)
from jsonbudget.mcp import McpPager, message_bytes
from tests.fixtures_redis import RedisServer
from tests.strategies import awkward_text

# -- Limits ----------------------------------------------------------------------------

# (limit, smallest accepted, first refused below, largest accepted) as docs/encoder.md's
# table gives them.
_BOUNDS = [
    ("max_bytes", 64, 63, 2**40),
    ("max_items", 1, 0, 2**40),
    ("max_keys", 1, 0, 2**40),
    ("max_field_bytes", 32, 31, 2**40),
    ("max_depth", 1, 0, 128),
    ("max_pages", 1, 0, 2**40),
]


def _limits(name: str, value: int) -> Limits:
    if name == "max_bytes":
        return Limits(value)
    return Limits(1000, **{name: value})


@pytest.mark.parametrize(("name", "least", "below", "most"), _BOUNDS)
def test_limits_accept_each_documented_bound(name: str, least: int, below: int, most: int) -> None:
    assert getattr(_limits(name, least), name) == least
    assert getattr(_limits(name, most), name) == most


@pytest.mark.parametrize(("name", "least", "below", "most"), _BOUNDS)
def test_limits_refuse_one_below_the_minimum(name: str, least: int, below: int, most: int) -> None:
    with pytest.raises(LimitError) as caught:
        _limits(name, below)
    assert (caught.value.name, caught.value.value) == (name, below)
    assert caught.value.reason == f"must be at least {least}"
    assert isinstance(caught.value, ValueError)


@pytest.mark.parametrize(("name", "least", "below", "most"), _BOUNDS)
def test_limits_refuse_one_above_the_maximum(name: str, least: int, below: int, most: int) -> None:
    with pytest.raises(LimitError) as caught:
        _limits(name, most + 1)
    assert (caught.value.name, caught.value.value) == (name, most + 1)
    assert caught.value.reason == f"must be at most {most}"


def test_limits_refuse_max_pages_zero() -> None:
    with pytest.raises(LimitError, match=r"^max_pages=0 is invalid: must be at least 1$"):
        Limits(1000, max_pages=0)


def test_limits_refuse_max_field_bytes_31() -> None:
    # 32 bytes is the quoted "…[truncated]" marker a cut string keeps at least.
    with pytest.raises(LimitError, match=r"^max_field_bytes=31 is invalid: must be at least 32$"):
        Limits(1000, max_field_bytes=31)


def test_limits_refuse_max_depth_129() -> None:
    # Past 128 the encoder's recursion would meet Python's default recursion limit.
    with pytest.raises(LimitError, match=r"^max_depth=129 is invalid: must be at most 128$"):
        Limits(1000, max_depth=129)


# -- MemoryCursorStore -----------------------------------------------------------------


def test_memory_store_keeps_256_positions_per_operation() -> None:
    store = MemoryCursorStore()
    scope = Scope("alice", {"q": 1})
    state = store.start(scope, max_pages=None)
    tokens = [store.mint(state, i) for i in range(256)]
    # 256 kept: the oldest still resumes at its position.
    assert store.resume(tokens[0], scope).position == 0
    # The 257th distinct position pushes out the least recently used one (tokens[1]: the
    # resume above made tokens[0] the newest).
    tokens.append(store.mint(state, 256))
    with pytest.raises(ExpiredCursor):
        store.resume(tokens[1], scope)
    assert store.resume(tokens[0], scope).position == 0
    assert store.resume(tokens[2], scope).position == 2
    assert store.resume(tokens[256], scope).position == 256


# -- PageBuilder.finish ----------------------------------------------------------------


def test_finish_takes_a_56_character_cursor_and_refuses_57() -> None:
    # 56 characters is the longest token a store mints, and the room every page keeps.
    limits = Limits(400)
    builder = PageBuilder(limits)
    while builder.add("x" * 10):
        pass
    page = builder.finish(complete=False, next_cursor="c" * 56)
    assert page.next_cursor == "c" * 56
    assert len(page.to_json()) <= limits.max_bytes
    assert orjson.loads(page.to_json())["next_cursor"] == "c" * 56
    with pytest.raises(ValueError, match="1 to 56 ASCII characters"):
        PageBuilder(limits).finish(complete=False, next_cursor="c" * 57)


# -- incomplete_reason -----------------------------------------------------------------


def test_complete_page_has_no_incomplete_reason() -> None:
    builder = PageBuilder(Limits(1000))
    builder.add({"id": 1})
    page = builder.finish(complete=True)
    assert page.incomplete_reason is None
    assert "incomplete_reason" not in orjson.loads(page.to_json())
    # A reason says why a page is not complete: a complete page given one drops it.
    page = builder.finish(complete=True, incomplete_reason="page_full")
    assert page.incomplete_reason is None
    assert "incomplete_reason" not in orjson.loads(page.to_json())


def test_incomplete_page_with_a_cursor_defaults_to_page_full() -> None:
    builder = PageBuilder(Limits(1000))
    builder.add({"id": 1})
    page = builder.finish(complete=False, next_cursor="abc")
    assert page.incomplete_reason == "page_full"
    assert orjson.loads(page.to_json())["incomplete_reason"] == "page_full"


def test_page_whose_item_was_refused_says_page_full() -> None:
    builder = PageBuilder(Limits(400))
    while builder.add("x" * 10):
        pass
    assert builder.full_reason == "page_full"
    page = builder.finish(complete=False)
    assert page.incomplete_reason == "page_full"
    assert orjson.loads(page.to_json())["incomplete_reason"] == "page_full"


def test_incomplete_page_without_cursor_or_refusal_has_no_reason() -> None:
    # Nothing measured a reason: the docs say none is written.
    builder = PageBuilder(Limits(1000))
    builder.add({"id": 1})
    page = builder.finish(complete=False)
    assert page.incomplete_reason is None
    assert "incomplete_reason" not in orjson.loads(page.to_json())


# -- an item fitted by the renderer at the page's edge ---------------------------------

# Clean (each string within max_field_bytes): the page holds it as orjson writes it.
_FIRST = {"id": 1, "a": "p" * 60, "b": "q" * 60, "c": "r" * 60}
# Cut by max_field_bytes: orjson cannot write it as it is, so the renderer fits it.
_CUT = {"id": 2, "body": "b" * 500}


def _two_items(max_bytes: int) -> tuple[bool, PageBuilder]:
    builder = PageBuilder(Limits(max_bytes, max_field_bytes=64))
    assert builder.add(_FIRST)
    return builder.add(_CUT), builder


def test_rendered_item_that_exactly_fills_the_page_fits() -> None:
    # The page as the builder reserves it: the longest cursor (56) and the longest
    # incomplete_reason ("budget_exhausted"), every report counted.
    _, roomy = _two_items(4000)
    filled = roomy.finish(complete=False, next_cursor="c" * 56)
    assert filled.truncations, "the second item must have been cut by the renderer"
    envelope = orjson.loads(filled.to_json())
    envelope["incomplete_reason"] = "budget_exhausted"
    exact = len(orjson.dumps(envelope))
    added, builder = _two_items(exact)
    assert added, f"the item fits a page of exactly {exact} bytes"
    page = builder.finish(complete=False, next_cursor="c" * 56)
    assert page.to_json() == filled.to_json()
    assert len(page.to_json()) - len("page_full") + len("budget_exhausted") == exact
    added, builder = _two_items(exact - 1)
    assert not added, f"one byte less ({exact - 1}) cannot hold it"
    assert builder.full_reason == "page_full"


# -- Paginator closes the source's iterator --------------------------------------------


class _KeptGenerators:
    """A source whose generators it keeps, so only an explicit close runs their finally."""

    def __init__(self, n: int) -> None:
        self.n = n
        self.opened: list[Iterator[tuple[Any, Any]]] = []
        self.closed = 0

    def _items(self, start: int) -> Iterator[tuple[Any, Any]]:
        try:
            for i in range(start, self.n):
                yield {"id": i, "pad": "p" * 40}, i + 1
        finally:
            self.closed += 1

    def open(self, position: Any, *, limit_hint: int | None = None) -> Iterator[tuple[Any, Any]]:
        items = self._items(0 if position is None else position)
        self.opened.append(items)
        return items

    def describe(self) -> dict[str, Any]:
        return {"kind": "kept", "n": self.n}


def test_paginator_closes_the_source_iterator_when_the_page_stops_early() -> None:
    source = _KeptGenerators(10_000)
    pager = Paginator(Limits(1000))
    page = pager.paginate(source, scope=Scope("alice", {}))
    assert not page.complete
    assert page.next_cursor is not None
    # The generator is still referenced (by the source): its finally ran by close().
    assert len(source.opened) == 1
    assert source.closed == 1


class _KeptAsyncGenerators:
    def __init__(self, n: int) -> None:
        self.n = n
        self.opened: list[AsyncIterator[tuple[Any, Any]]] = []
        self.closed = 0

    async def _items(self, start: int) -> AsyncIterator[tuple[Any, Any]]:
        try:
            for i in range(start, self.n):
                yield {"id": i, "pad": "p" * 40}, i + 1
        finally:
            self.closed += 1

    def aopen(
        self, position: Any, *, limit_hint: int | None = None
    ) -> AsyncIterator[tuple[Any, Any]]:
        items = self._items(0 if position is None else position)
        self.opened.append(items)
        return items

    def describe(self) -> dict[str, Any]:
        return {"kind": "kept-async", "n": self.n}


def test_paginator_acloses_the_async_source_iterator_when_the_page_stops_early() -> None:
    source = _KeptAsyncGenerators(10_000)
    pager = Paginator(Limits(1000))

    async def page_and_count() -> tuple[bool, int]:
        page = await pager.apaginate(source, scope=Scope("alice", {}))
        # Counted before the loop ends: asyncio.run's shutdown would close it anyway.
        return page.complete, source.closed

    assert asyncio.run(page_and_count()) == (False, 1)
    assert len(source.opened) == 1


# -- TurnBudget ------------------------------------------------------------------------


def test_turn_fast_path_keeps_room_for_later_calls(tmp_path: Path) -> None:
    # Clean values take admit's fast path; each must leave a bare reference's room for
    # every later call of the turn.
    turn = TurnBudget(max_bytes=2000, max_calls=3, store=SpillStore(tmp_path / "spill"))
    first = turn.admit(["x" * 996])  # 1000 bytes: fits, 2 x 177 kept for the others
    assert (first.reason, first.admitted_bytes) == ("fits", 1000)
    # 900 bytes would fit what is left (1000) but not what is left less one bare
    # reference for the third call (823): spilled, its preview cut to that.
    second = turn.admit(["x" * 896])
    assert second.reason == "turn_limit"
    assert second.admitted_bytes <= 2000 - 1000 - 177
    third = turn.admit(["x" * 200])
    assert not third.over_budget
    total = first.admitted_bytes + second.admitted_bytes + third.admitted_bytes
    assert total == turn.report().used_bytes <= 2000


@settings(max_examples=40)
@given(
    sizes=st.lists(st.integers(min_value=0, max_value=700), min_size=1, max_size=3),
    max_bytes=st.integers(min_value=1500, max_value=3000),
)
def test_turn_total_never_passes_its_budget(
    tmp_path_factory: pytest.TempPathFactory, sizes: list[int], max_bytes: int
) -> None:
    store = SpillStore(tmp_path_factory.mktemp("spill"))
    turn = TurnBudget(max_bytes=max_bytes, max_calls=3, store=store)
    results = [turn.admit(list(range(n))) for n in sizes]
    assert sum(r.admitted_bytes for r in results) <= max_bytes
    assert not any(r.over_budget for r in results)


def test_turn_takes_max_result_bytes_equal_to_max_bytes_and_refuses_one_more(
    tmp_path: Path,
) -> None:
    store = SpillStore(tmp_path / "spill")
    assert TurnBudget(max_bytes=5000, max_result_bytes=5000, store=store).max_bytes == 5000
    with pytest.raises(LimitError) as caught:
        TurnBudget(max_bytes=5000, max_result_bytes=5001, store=store)
    assert (caught.value.name, caught.value.value) == ("max_result_bytes", 5001)
    assert caught.value.reason == "must be <= max_bytes"


# -- ResultGate ------------------------------------------------------------------------


# 1000 bytes of UTF-8 each: 1000 ASCII characters, 500 of 2 bytes, a JSON text.
@pytest.mark.parametrize(
    "text", ["a" * 1000, "é" * 500, '["' + "é" * 498 + '"]'], ids=["ascii", "utf8", "json"]
)
def test_gate_passes_a_str_of_exactly_max_bytes_and_spills_one_more(
    tmp_path: Path, text: str
) -> None:
    gate = ResultGate(max_bytes=1000, store=SpillStore(tmp_path / "spill"))
    assert len(text.encode()) == 1000
    passed = gate.gate(text)
    assert (passed.data, passed.spill, passed.size) == (text.encode(), None, 1000)
    spilled = gate.gate(text + " ")
    assert spilled.spill is not None
    assert spilled.spill.size == 1001
    assert len(spilled.data) <= 1000


@pytest.mark.parametrize("chunks", [[1000], [500, 500], [999, 1], [1, 999]])
def test_gate_passes_a_stream_of_exactly_max_bytes_and_spills_one_more(
    tmp_path: Path, chunks: list[int]
) -> None:
    gate = ResultGate(max_bytes=1000, store=SpillStore(tmp_path / "spill"))
    passed = gate.gate(iter([b"y" * n for n in chunks]))
    assert (passed.data, passed.spill, passed.size) == (b"y" * 1000, None, 1000)
    passed = gate.gate(io.BytesIO(b"y" * 1000))
    assert (passed.data, passed.spill) == (b"y" * 1000, None)
    more = [*chunks[:-1], chunks[-1] + 1]
    spilled = gate.gate(iter([b"y" * n for n in more]))
    assert spilled.spill is not None
    assert spilled.spill.size == 1001
    assert len(spilled.data) <= 1000
    spilled = gate.gate(io.BytesIO(b"y" * 1001))
    assert spilled.spill is not None
    assert spilled.spill.size == 1001


# -- SpillStore ------------------------------------------------------------------------


# umask 0 lets mkdir's own mode through; 0o277 and 0o777 take the owner's bits away,
# which only the explicit chmod gives back.
@pytest.mark.parametrize("umask", [0, 0o077, 0o277, 0o777])
def test_regression_spill_file_mode_took_the_umask(tmp_path: Path, umask: int) -> None:
    # The directory's 0700 was set explicitly; the file's 0600 came from open() alone, so
    # a umask of 0o277 left 0400 and 0o700 left no bits at all.
    old = os.umask(umask)
    try:
        store = SpillStore(tmp_path / "a" / "spill")
        ref = store.put(b'{"a":1}', label="t")
    finally:
        os.umask(old)
    assert (store.directory.stat().st_mode & 0o777) == 0o700
    assert (ref.path.stat().st_mode & 0o777) == 0o600
    assert store.read(ref) == b'{"a":1}'


@pytest.mark.parametrize(
    ("media_type", "ext"),
    [
        ("application/json", ".json"),
        ("application/vnd.foo+json", ".json"),
        ("application/problem+json", ".json"),
        ("text/csv", ".txt"),
        ("application/jsonx", ".bin"),
        ("application/json+xml", ".bin"),
    ],
)
def test_spill_extension_follows_the_media_type(tmp_path: Path, media_type: str, ext: str) -> None:
    store = SpillStore(tmp_path / "spill")
    ref = store.put(b"[1]", label="t", media_type=media_type)
    assert ref.ref.endswith(ext)
    assert ref.path.suffix == ext


# 64 KiB is `read`'s default limit and 1 MiB the block a file is put in.
@pytest.mark.parametrize("size", [65535, 65536, 65537, 2**20, 2**20 + 1])
def test_spill_read_back_returns_every_stored_byte(tmp_path: Path, size: int) -> None:
    store = SpillStore(tmp_path / "spill")
    data = bytes(range(97, 123)) * (size // 26) + b"z" * (size % 26)
    data = data[:-1] + b"!"  # the last byte is told apart
    ref = store.put(io.BytesIO(data), label="t", media_type="text/plain")
    assert ref.size == size
    assert store.get(ref.ref).size == size
    parts, offset = [], 0
    while piece := store.read(ref, offset):
        parts.append(piece)
        offset += len(piece)
    assert b"".join(parts) == data
    assert store.read(ref, size - 1) == b"!"
    assert store.read(ref, size - 1, 1) == b"!"
    assert store.read(ref, size) == b""
    with store.open(ref) as f:
        assert f.read() == data


def _read_text_back(reader: ResultReader, ref: str) -> list[str]:
    got: list[str] = []
    cursor = None
    for _ in range(20):
        page = reader.read(ref, "", cursor, principal="anonymous")
        assert len(page.data) <= 1024
        envelope = orjson.loads(page.data)
        assert envelope["kind"] == "text"
        got.append(envelope["items"][0])
        if page.complete:
            return got
        cursor = page.next_cursor
    raise AssertionError("reading did not end")


# The text that ends a page exactly, one byte short of it and one byte past it (the last
# page then holds one byte): the read back is the text, to its last byte.
@pytest.mark.parametrize("extra", [-1, 0, 1])
def test_spilled_text_reads_back_whole_through_the_reader(tmp_path: Path, extra: int) -> None:
    reader = ResultReader(spill=SpillStore(tmp_path / "spill"), max_bytes=1024)
    gate = ResultGate(max_bytes=600, reader=reader, kind="text")
    long = gate.gate("0123456789" * 300)
    assert long.shown_ref is not None
    page_chars = len(_read_text_back(reader, long.shown_ref)[0])  # ASCII: a byte each
    text = ("0123456789" * 300)[: page_chars + extra - 1] + "!"
    gated = gate.gate(text)
    assert gated.shown_ref is not None
    got = _read_text_back(reader, gated.shown_ref)
    assert "".join(got) == text
    assert len(got) == (1 if extra <= 0 else 2)


# -- the bounded reader ----------------------------------------------------------------


class _LyingStream:
    """A stream whose ``read(n)`` returns n + 1 bytes."""

    def __init__(self) -> None:
        self.handed = 0

    def read(self, n: int = -1, /) -> bytes:
        data = b"a" * (n + 1)
        self.handed += len(data)
        return data


@pytest.mark.parametrize("chunk_bytes", [4, 65536])
def test_reader_refuses_a_stream_whose_read_returns_more_than_asked(chunk_bytes: int) -> None:
    # A stream is trusted to hand out at most what was asked: that is how the reader
    # takes at most max_bytes + 1. One that hands out more is refused at once.
    stream = _LyingStream()
    with pytest.raises(TypeError, match=r"^the stream's read\(\d+\) returned \d+ bytes$"):
        read_bounded_text(stream, 12, chunk_bytes=chunk_bytes)
    assert stream.handed == min(chunk_bytes, 13) + 1


def test_reader_takes_an_honest_stream_to_exactly_max_bytes_plus_one() -> None:
    class Endless:
        handed = 0

        def read(self, n: int = -1, /) -> bytes:
            self.handed += n
            return b"a" * n

    stream = Endless()
    out = read_bounded_text(stream, 12, chunk_bytes=5)
    assert (out.text, out.complete, out.bytes_read, stream.handed) == ("a" * 12, False, 13, 13)


# -- JSON Lines ------------------------------------------------------------------------


def _line(n: int) -> bytes:
    """A JSON line of exactly *n* bytes, its newline not counted."""
    return b'"' + b"x" * (n - 2) + b'"'


@pytest.mark.parametrize("via", ["open", "paginate"])
def test_json_line_of_max_item_bytes_is_parsed_and_one_more_is_clipped(
    tmp_path: Path, via: str
) -> None:
    path = tmp_path / "rows.jsonl"
    path.write_bytes(_line(100) + b"\n" + _line(101) + b"\n" + b"1\n")
    source = JsonLinesSource(path, max_item_bytes=100)
    if via == "open":
        items = [item for item, _ in source.open(None)]
    else:
        page = Paginator(Limits(4096)).paginate(source, scope=Scope("alice", {}))
        assert page.complete
        items = list(page.items)
    assert items[0] == "x" * 98
    clipped = items[1]
    assert isinstance(clipped, Clipped)
    assert (clipped.length, clipped.unit) == (101, "bytes")
    assert items[2] == 1


# -- McpPager --------------------------------------------------------------------------

_SERVER = Implementation(name="rows", version="1")


def _mcp_pages(items: list[str], max_bytes: int) -> list[int]:
    """The message sizes of every page `McpPager` serves for *items*."""
    pager = McpPager(max_bytes=max_bytes, server=_SERVER)
    scope = Scope("alice", {})
    sizes: list[int] = []
    cursor: str | None = None
    for _ in range(len(items) + 1):
        result = pager.paginate(items, scope=scope, cursor=cursor)
        sizes.append(message_bytes(result, server=_SERVER))
        assert result.structured_content is not None
        cursor = result.structured_content["nextCursor"]
        if cursor is None:
            return sizes
    raise AssertionError("paging did not end")


@pytest.mark.parametrize("max_bytes", [3444, 3531])
def test_mcp_pager_messages_fit_max_bytes_after_a_refit(max_bytes: int) -> None:
    # Non-ASCII first (6 bytes a character on the wire), then ASCII: the first guess of
    # the page's budget is over and a second round fits it.
    sizes = _mcp_pages(["é" * 40] * 3 + ["a" * 40] * 300, max_bytes)
    assert max(sizes) <= max_bytes, sizes


@settings(max_examples=30)
@given(
    head=st.one_of(st.just("é" * 40), awkward_text),
    wide=st.integers(min_value=0, max_value=6),
    width=st.integers(min_value=20, max_value=60),
    max_bytes=st.integers(min_value=3300, max_value=3700),
)
def test_mcp_pager_messages_fit_max_bytes(head: str, wide: int, width: int, max_bytes: int) -> None:
    # A few items that grow on the wire (escapes, \uXXXX) before many that do not.
    items = [head] * wide + ["a" * width] * 120
    sizes = _mcp_pages(items, max_bytes)
    assert max(sizes) <= max_bytes, sizes


# -- classify_size_error ---------------------------------------------------------------


def test_classify_prompt_at_the_window_is_the_prompt() -> None:
    # Anthropic's sum: the prompt below the window leaves room for a smaller cap; at the
    # window it leaves none.
    below = classify_size_error(
        {
            "type": "error",
            "error": {
                "type": "invalid_request_error",
                "message": "input length and `max_tokens` exceed context limit: "
                "199999 + 21333 > 200000, decrease input length or `max_tokens` and try again",
            },
        }
    )
    assert below == OutputCapTooLarge(
        requested=21333, available=1, window=200000, provider="anthropic", input_tokens=199999
    )
    at = classify_size_error(
        "input length and `max_tokens` exceed context limit: 200000 + 21333 > 200000"
    )
    assert at == PromptTooLong(prompt_tokens=200000, limit=200000, provider="anthropic")


def test_classify_prompt_count_at_its_limit_is_the_prompt() -> None:
    # A count the message calls the prompt is a prompt verdict only at or over its limit.
    at = classify_size_error(
        {
            "type": "error",
            "error": {
                "type": "invalid_request_error",
                "message": "prompt is too long: 4096 tokens > 4096 maximum",
            },
        }
    )
    assert at == PromptTooLong(prompt_tokens=4096, limit=4096, provider="anthropic")
    below = classify_size_error("prompt is too long: 4095 tokens > 4096 maximum")
    assert below == AmbiguousSizeError("anthropic", "prompt", limit=4096, tokens=4095)


def test_classify_total_decided_when_requested_is_at_most_the_total() -> None:
    text = (
        "too many tokens: total number of tokens (prompt and prediction) cannot exceed "
        "4096 - received 5000. Try using a shorter prompt or a smaller max_tokens value."
    )
    # requested == total: a prompt of 0 tokens, so the cap is what does not fit.
    assert classify_size_error(text, requested=5000) == OutputCapTooLarge(
        requested=5000, available=4096, window=4096, provider="cohere", input_tokens=0
    )
    # A cap larger than the total cannot be part of it: the message is not decided.
    assert classify_size_error(text, requested=5001) == AmbiguousSizeError(
        "cohere", "either", limit=4096, tokens=5000
    )


def test_classify_vllm_cap_of_the_whole_window_is_the_cap() -> None:
    # The prompt is counted in characters here: only a cap that fills the window decides.
    def body(cap: int) -> dict[str, Any]:
        return {
            "object": "error",
            "type": "BadRequestError",
            "code": 400,
            "message": "This model's maximum context length is 8192 tokens. However, you "
            f"requested {cap} output tokens and your prompt contains 120 characters (more than 0 "
            "characters, which is the upper bound for 0 input tokens). Please reduce the "
            "length of the input prompt or the number of requested output tokens.",
        }

    assert classify_size_error(body(8192)) == OutputCapTooLarge(
        requested=8192, available=None, window=8192, provider="vllm"
    )
    assert classify_size_error(body(8191)) == AmbiguousSizeError(
        "vllm", "either", limit=8192, tokens=None
    )


_PASSED = (
    "You passed {0} input tokens and requested {1} output tokens. However, the model's "
    "context length is only {2} tokens, resulting in a maximum input length of {3} tokens. "
    "Please reduce the length of the input prompt. (parameter=input_tokens, value={0})"
)


def test_classify_vllm_count_one_past_what_fits_is_a_lower_bound() -> None:
    # vLLM counts a prompt only up to W - C + 1 tokens: a count of exactly that is a
    # lower bound (undecided); one less is exact (the cap is what does not fit).
    def passed(inputs: int, cap: int) -> Any:
        return classify_size_error(
            {
                "error": {
                    "message": _PASSED.format(inputs, cap, 32768, 32768 - cap),
                    "type": "BadRequestError",
                    "param": "input_tokens",
                    "code": 400,
                }
            }
        )

    assert passed(24577, 8192) == AmbiguousSizeError("vllm", "either", limit=32768, tokens=24577)
    assert passed(24576, 8192) == OutputCapTooLarge(
        requested=8192, available=8192, window=32768, provider="vllm", input_tokens=24576
    )
    # Any other count is exact, one past that lower bound's size included.
    assert passed(24578, 8192) == OutputCapTooLarge(
        requested=8192, available=8190, window=32768, provider="vllm", input_tokens=24578
    )
    # At the window, the lower bound alone decides: the prompt.
    assert passed(32768, 1) == PromptTooLong(prompt_tokens=32768, limit=32768, provider="vllm")
    assert passed(32767, 2) == AmbiguousSizeError("vllm", "either", limit=32768, tokens=32767)


# -- RedisCursorStore ------------------------------------------------------------------

# Sets the operation's stored expiry to this millisecond of Redis's clock, the clock the
# resume script reads.
_EXPIRE_NOW = """
local t = redis.call('TIME')
local now = tonumber(t[1]) * 1000 + math.floor(tonumber(t[2]) / 1000)
redis.call('HSET', KEYS[1], 'exp', string.format('%.0f', now))
return string.format('%.0f', now)
"""


def test_redis_resume_script_refuses_an_expired_cursor_itself(redis_server: RedisServer) -> None:
    # The key lives on (its own expiry is later): only the script's check of the stored
    # expiry, against Redis's clock, refuses the cursor.
    prefix = f"t{uuid.uuid4().hex[:12]}:"
    store = RedisCursorStore(redis_server.url, prefix=prefix, ttl=600)
    client = redis.Redis.from_url(redis_server.url)
    try:
        scope = Scope("alice", {"q": 1})
        state = store.start(scope, max_pages=None)
        token = store.mint(state, 5)
        key = f"{prefix}{{op:{state.operation_id}}}"
        expire_now = client.register_script(_EXPIRE_NOW)
        # Expiring at the very millisecond the script runs in is expired ("now >= exp"):
        # a resume within that millisecond (most of these, a round trip apart) shows it.
        for _ in range(10):
            now_ms = int(expire_now(keys=[key]))
            with pytest.raises(ExpiredCursor):
                store.resume(token, scope)
        assert client.exists(key) == 1
        assert client.pttl(key) > 500_000
        assert client.hget(key, "n") == b"1", "a refusal counts nothing"
        client.hset(key, "exp", str(now_ms + 600_000))
        resumed = store.resume(token, scope)
        assert (resumed.position, resumed.pages_served) == (5, 2)
    finally:
        for key in client.scan_iter(f"{prefix}*"):
            client.delete(key)
        client.close()

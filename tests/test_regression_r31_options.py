"""r31 option combinations: a small stream or binary file that is not UTF-8 passed the
gate raw (its ``text`` raised UnicodeDecodeError); ``PageBuilder(encoder=...)`` dropped
the builder's own options and caps; options that do nothing in the combination given
(a spill store or spill reference without ``oversized="spill"``, a reader likewise,
``params`` with ``table=``) were accepted; a connection's closer raised at interpreter
exit."""

from __future__ import annotations

import asyncio
import io
import itertools
import sqlite3
import textwrap
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

from jsonbudget import (
    Encoder,
    Limits,
    MemoryCursorStore,
    PageBuilder,
    Paginator,
    PostgresSource,
    ResultGate,
    ResultReader,
    Scope,
    SpillStore,
    SQLiteSource,
    TurnBudget,
    gate_result,
    paginate,
)
from jsonbudget.errors import LimitError
from jsonbudget.mcp import McpPager, paginated_tool
from tests.limited import run_limited

# -- 1. a stream or binary file that is not UTF-8 -----------------------------------------

#: Small results, each well within the limit: not UTF-8 (a bad byte, bad bytes after
#: text, a character cut short at the very end, a lone continuation byte) and UTF-8 (a
#: two- and a four-byte character, which a chunking may split).
_NOT_UTF8 = (b"\x80", b"ok \xff\xfe", b"ab\xc3", b"x\xf0\x9f\x98", b'{"a": "\xe9"}')
_UTF8 = ("ab\u00e9".encode(), "x\U0001f600y".encode(), b'{"a": 1}')


#: The longest result cut every way (each spill is a file written).
_EVERY_CHUNKING = 6


def _chunkings(data: bytes) -> Iterator[list[bytes]]:
    """Every way of cutting *data* into chunks where it is short, else byte by byte and
    at each place in two; and whole between empty chunks."""
    if len(data) <= _EVERY_CHUNKING:
        for n in range(len(data)):
            for cuts in itertools.combinations(range(1, len(data)), n):
                bounds = (0, *cuts, len(data))
                yield [data[a:b] for a, b in itertools.pairwise(bounds)]
    else:
        yield [data[i : i + 1] for i in range(len(data))]
        for i in range(len(data) + 1):
            yield [data[:i], data[i:]]
    yield [b"", data, b""]


def test_regression_stream_not_utf8_spilled_as_bytes_are(tmp_path: Path) -> None:
    store = SpillStore(tmp_path)
    gate = ResultGate(max_bytes=1000, store=store)
    for data in _NOT_UTF8 + _UTF8:
        expected = gate.gate(data)
        assert expected.spilled == (data in _NOT_UTF8)
        for chunks in _chunkings(data):
            got = gate.gate(iter(chunks))
            assert (got.spilled, got.kind, got.data) == (
                expected.spilled,
                expected.kind,
                expected.data,
            ), (data, chunks)
            got.text  # noqa: B018 - what the model is handed is text: it decodes
        for result in (io.BytesIO(data), io.BufferedReader(io.BytesIO(data))):
            got = gate.gate(result)
            assert (got.spilled, got.data) == (expected.spilled, expected.data), data
            got.text  # noqa: B018
        one = gate_result(iter([data]), max_bytes=1000, store=store)
        assert (one.spilled, one.data) == (expected.spilled, expected.data)
        agated = asyncio.run(gate.agate(iter(_halves(data))))
        assert (agated.spilled, agated.data) == (expected.spilled, expected.data)


def _halves(data: bytes) -> list[bytes]:
    return [data[: len(data) // 2], data[len(data) // 2 :]]


def test_regression_stream_not_utf8_admitted_as_bytes_are(tmp_path: Path) -> None:
    store = SpillStore(tmp_path)
    for data in _NOT_UTF8 + _UTF8:
        expected = TurnBudget(max_bytes=5000, store=store).admit(data)
        for make in (lambda d: iter(_halves(d)), io.BytesIO):
            turn = TurnBudget(max_bytes=5000, store=store)
            got = turn.admit(make(data))
            assert (got.reason, got.data) == (expected.reason, expected.data), data
            assert got.reason == ("result_limit" if data in _NOT_UTF8 else "fits")
            got.text  # noqa: B018
            turn = TurnBudget(max_bytes=5000, store=store)
            awaited = asyncio.run(turn.aadmit(make(data)))
            assert (awaited.reason, awaited.data) == (expected.reason, expected.data), data
            assert turn.report().used_bytes == len(awaited.data)


# -- 2. PageBuilder(encoder=...) ----------------------------------------------------------


def test_regression_page_builder_refuses_an_encoder_that_overrides_its_options() -> None:
    # The report's cases: markers="text" beside a structured encoder was dropped, and
    # the builder's caps gave way to the encoder's (an item written whole, no report).
    with pytest.raises(LimitError, match=r"markers='text' \(the encoder's: 'structured'\)") as exc:
        PageBuilder(Limits(2000), encoder=Encoder(max_bytes=2000, markers="structured"),
                    markers="text")  # fmt: skip
    assert exc.value.name == "encoder"
    limits = Limits(2000, max_items=1, max_field_bytes=40, max_depth=1)
    with pytest.raises(LimitError) as exc:
        PageBuilder(limits, encoder=Encoder(max_bytes=2000))
    for name in ("max_items=1", "max_field_bytes=40", "max_depth=1"):
        assert name in exc.value.reason
    assert "max_bytes" not in exc.value.reason
    cases: list[tuple[dict[str, Any], dict[str, Any], str]] = [
        ({}, {"max_bytes": 5000}, "max_bytes=2000"),
        ({"strategy": "prefix"}, {}, "strategy='prefix'"),
        ({}, {"strategy": "prefix"}, "strategy='balanced'"),
        ({"binary": "base64"}, {}, "binary='base64'"),
        ({"default": str}, {}, "default=another hook"),
        ({}, {"default": str}, "default=another hook"),
        ({}, {"unencodable": "error"}, "unencodable='marker'"),
        ({}, {"max_keys": 3}, "max_keys=None"),
    ]
    for builder_options, encoder_options, named in cases:
        made = {"max_bytes": 2000, **encoder_options}
        with pytest.raises(LimitError, match=r"^encoder=") as exc:
            PageBuilder(Limits(2000), encoder=Encoder(**made), **builder_options)
        assert named in exc.value.reason, (builder_options, encoder_options)


class _Hooks:
    def hook(self, value: object) -> str:
        return repr(value)


def test_page_builder_takes_the_encoder_its_options_make() -> None:
    hooks = _Hooks()
    limits = Limits(2000, max_items=2, max_keys=5, max_field_bytes=80, max_depth=3,
                    max_pages=4)  # fmt: skip
    options: dict[str, Any] = {"strategy": "prefix", "markers": "structured",
                               "binary": "base64", "default": hooks.hook}  # fmt: skip
    # max_pages is the pager's, not the encoder's; a bound method is the same hook.
    encoder = Encoder(limits.replace(max_pages=None), **{**options, "default": hooks.hook})
    item = {"list": [1, 2, 3], "s": "x" * 200, "b": b"\x00", "o": object()}
    shared = PageBuilder(limits, encoder=encoder, **options)
    own = PageBuilder(limits, **options)
    assert shared.add(item)
    assert own.add(item)
    assert shared.finish(complete=True).data == own.finish(complete=True).data


# -- 3. options that do nothing in the combination given ------------------------------


def test_regression_spill_options_refused_without_spill(tmp_path: Path) -> None:
    store = SpillStore(tmp_path)
    limits = Limits(4096)

    def ref(spilled: Any, scope: Scope) -> str:
        return "r"

    for oversized in ("truncate", "placeholder", "error"):
        with pytest.raises(LimitError, match="only oversized='spill'") as exc:
            PageBuilder(limits, oversized=oversized, spill_store=store)
        assert exc.value.name == "spill_store"
        with pytest.raises(LimitError) as exc:
            Paginator(limits, oversized=oversized, spill_store=store)
        assert exc.value.name == "spill_store"
        with pytest.raises(LimitError) as exc:
            Paginator(limits, oversized=oversized, spill_ref=ref)
        assert exc.value.name == "spill_ref"
        with pytest.raises(LimitError) as exc:
            paginate([1], scope=Scope("u"), store=MemoryCursorStore(), limits=limits,
                     oversized=oversized, spill_ref=ref)  # fmt: skip
        assert exc.value.name == "spill_ref"
    # Where it spills, both are taken.
    Paginator(limits, oversized="spill", spill_store=store, spill_ref=ref)
    PageBuilder(limits, oversized="spill", spill_store=store)


def test_regression_mcp_pager_refuses_a_reader_without_spill(tmp_path: Path) -> None:
    reader = ResultReader(spill=SpillStore(tmp_path))
    for oversized in ("truncate", "placeholder", "error"):
        with pytest.raises(LimitError, match="only oversized='spill'") as exc:
            McpPager(max_bytes=8192, oversized=oversized, reader=reader)
        assert exc.value.name == "reader"
        with pytest.raises(LimitError) as exc:
            paginated_tool(max_bytes=8192, oversized=oversized, reader=reader)
        assert exc.value.name == "reader"
    McpPager(max_bytes=8192, oversized="spill", reader=reader)
    with pytest.raises(LimitError) as exc:  # an unknown mode is still named as such
        McpPager(max_bytes=8192, oversized="bogus", reader=reader)  # type: ignore[arg-type]
    assert exc.value.name == "oversized"


def test_regression_table_source_refuses_params(tmp_path: Path) -> None:
    db = tmp_path / "t.sqlite3"
    with sqlite3.connect(db) as conn:
        conn.execute("CREATE TABLE t (id INTEGER PRIMARY KEY)")
    conn.close()
    for params in ((1,), [1], {"a": 1}):
        with pytest.raises(LimitError, match="only a query= source takes params") as exc:
            SQLiteSource(db, table="t", params=params)
        assert exc.value.name == "params"
        # No server is reached: the source connects on its first page.
        with pytest.raises(LimitError) as exc:
            PostgresSource("dbname=none", table="t", params=params)
        assert exc.value.name == "params"
    empties: tuple[Any, ...] = ((), {})
    for empty in empties:
        with SQLiteSource(db, table="t", params=empty) as source:
            page = paginate(source, scope=Scope("u"), store=MemoryCursorStore(),
                            limits=Limits(1024))  # fmt: skip
            assert page.complete
    SQLiteSource(db, query="SELECT id FROM t WHERE id > ?", params=(0,))
    PostgresSource("dbname=none", query="SELECT 1 AS id WHERE %s", params=(True,))


# -- 4. interpreter exit ----------------------------------------------------------------


def test_regression_closing_is_silent_at_interpreter_exit(tmp_path: Path) -> None:
    # Kept by a module imported before jsonbudget (os), they are dropped when its
    # globals are cleared, after jsonbudget's own: Closing.__del__ then found its
    # module's `os` gone ("'NoneType' object has no attribute 'getpid'").
    db = tmp_path / "t.sqlite3"
    with sqlite3.connect(db) as conn:
        conn.execute("CREATE TABLE t (id INTEGER PRIMARY KEY)")
        conn.execute("INSERT INTO t VALUES (1), (2)")
    conn.close()
    code = f"""
        import os
        from jsonbudget import Limits, Scope, SQLiteCursorStore, SQLiteSource, paginate

        os.jb_store = SQLiteCursorStore({str(tmp_path / "c.sqlite3")!r})
        os.jb_source = SQLiteSource({str(db)!r}, table="t")
        page = paginate(os.jb_source, scope=Scope("u"), store=os.jb_store,
                        limits=Limits(1024, max_items=1))
        assert page.next_cursor is not None
        print("paged")
    """
    done = run_limited(textwrap.dedent(code), timeout=60)
    assert done.returncode == 0, done.stderr
    assert done.stdout == "paged\n"
    assert done.stderr == ""


# -- r32: the sweep of the fixes above -------------------------------------------------------


def test_regression_an_equal_mode_made_at_run_time_was_refused_as_another() -> None:
    # Modes compared by identity: a string read from a config, or a StrEnum's member,
    # was refused, the message naming the same value twice.
    import enum
    import json

    class Strategy(enum.StrEnum):
        PREFIX = "prefix"

    options = json.loads('{"strategy": "prefix", "markers": "structured", "binary": "base64"}')
    limits = Limits(2000)
    encoder = Encoder(limits, strategy="prefix", markers="structured", binary="base64")
    item = {"s": "x" * 3000, "b": b"\x00"}
    shared = PageBuilder(limits, encoder=encoder, **options)
    own = PageBuilder(limits, strategy="prefix", markers="structured", binary="base64")
    assert shared.add(item)
    assert own.add(item)
    assert shared.finish(complete=True).data == own.finish(complete=True).data
    mode: Any = Strategy.PREFIX  # typed as its string by the docs, not the Literal
    PageBuilder(limits, encoder=Encoder(limits, strategy="prefix"), strategy=mode)


def test_regression_one_call_paginate_named_a_weak_proxy_for_a_refused_spill_ref() -> None:
    def ref(spilled: Any, scope: Scope) -> str:
        return "r"

    with pytest.raises(LimitError) as exc:
        paginate([1], scope=Scope("u"), store=MemoryCursorStore(), limits=Limits(4096),
                 spill_ref=ref)  # fmt: skip
    assert exc.value.value is ref
    assert "weakproxy" not in str(exc.value)


def test_regression_checking_a_fitting_stream_as_utf8_held_it_as_text_too(
    tmp_path: Path,
) -> None:
    # Decoded whole to be checked: a str of up to four times the result (one emoji in
    # ASCII makes every character four bytes wide), beside the result itself.
    import tracemalloc

    size = 8 << 20
    chunk = b"a" * ((1 << 16) - 4) + "😀".encode()

    def stream() -> Iterator[bytes]:
        for _ in range(size // len(chunk)):
            yield chunk

    gate = ResultGate(max_bytes=2 * size, store=SpillStore(tmp_path))
    tracemalloc.start()
    try:
        passed = gate.gate(stream())
        _, peak = tracemalloc.get_traced_memory()
    finally:
        tracemalloc.stop()
    assert passed.spill is None
    assert len(passed.data) == size // len(chunk) * len(chunk)
    # the joined result and a little more; it was about five times the result
    assert peak < 1.5 * size, peak

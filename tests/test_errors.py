"""Errors as users catch them: what they carry, how they travel, what they say."""

from __future__ import annotations

import copy
import json
import pickle
import sqlite3
import threading
from collections.abc import Callable, Iterator
from concurrent.futures import ProcessPoolExecutor
from pathlib import Path
from typing import Any

import pytest

from jsonbudget import ResultGate, ResultReader, Scope, SpillStore, bounded_dumps
from jsonbudget.errors import (
    BudgetExhausted,
    CursorScopeError,
    DecodeError,
    EncodeError,
    ExpiredCursor,
    InvalidCursor,
    JsonBudgetError,
    LimitError,
    OversizedItemError,
    SpillError,
    TokenizerUnavailable,
)


class _BadRepr:
    def __repr__(self) -> str:
        raise RuntimeError("no repr")


def _generator() -> Iterator[int]:
    yield 1


def _unpicklable() -> list[tuple[str, Callable[[], Any]]]:
    """Values that do not pickle, as a LimitError is given them (made fresh in a test)."""
    return [
        ("lock", threading.Lock),
        ("generator", _generator),
        ("lambda", lambda: lambda: None),
        ("connection", lambda: sqlite3.connect(":memory:")),
        ("list holding a lock", lambda: [1, threading.Lock()]),
        ("repr that raises", lambda: [_BadRepr(), threading.Lock()]),
    ]


def _refuse_another_store(tmp: str) -> None:
    # A ResultGate and a reader over two stores: refused, the store itself the value.
    ResultGate(
        max_bytes=1000,
        store=SpillStore(Path(tmp) / "a"),
        reader=ResultReader(spill=SpillStore(Path(tmp) / "b")),
    )


def test_regression_a_limit_error_refusing_a_store_reaches_a_process_pools_caller(
    tmp_path: Path,
) -> None:
    """Found by a tester: a LimitError keeps the refused value, and a store holds a lock,
    so the error did not pickle: a process pool's caller got `TypeError: cannot pickle
    '_thread.lock' object` instead of the LimitError its `except` was waiting for."""
    with pytest.raises(LimitError) as here:
        _refuse_another_store(str(tmp_path))
    assert isinstance(here.value.value, SpillStore)
    with ProcessPoolExecutor(1) as pool:
        raised = pool.submit(_refuse_another_store, str(tmp_path)).exception()
    assert type(raised) is LimitError
    assert (raised.name, raised.reason) == (here.value.name, here.value.reason)
    # The store stands in as its repr, as the message shows it.
    assert isinstance(raised.value, str)
    assert raised.value.startswith("<jsonbudget.SpillStore object at ")
    assert str(raised) == f"store={raised.value} is invalid: {raised.reason}"


@pytest.mark.parametrize(("kind", "make"), _unpicklable(), ids=[k for k, _ in _unpicklable()])
def test_regression_a_limit_error_whose_value_does_not_pickle_pickles_and_copies(
    kind: str, make: Callable[[], Any]
) -> None:
    """Found by a tester (see above): pickle and deepcopy raised TypeError for it."""
    value = make()
    error = LimitError("option", value, "is refused")
    for back in (pickle.loads(pickle.dumps(error)), copy.deepcopy(error)):
        assert type(back) is LimitError
        assert str(back) == str(error)
        assert (back.name, back.reason) == ("option", "is refused")
        # Its repr as the message shows it: cut to 200 characters, or the type's name.
        shown = str(error).removeprefix("option=").removesuffix(" is invalid: is refused")
        assert back.value == shown
        if kind == "repr that raises":
            assert back.value == "<list object>"
    # A shallow copy shares the values: the refused object itself.
    assert copy.copy(error).value is value
    if isinstance(value, sqlite3.Connection):
        value.close()


def test_regression_every_error_travels_with_values_that_do_not_pickle() -> None:
    """Found with the LimitError above: any error carrying a value that does not pickle
    (an argument, a file name, a module name, an attribute a caller set, a note) failed
    the same way; each such value now travels as its repr, the others as they are."""
    lock = threading.Lock()
    errors: list[JsonBudgetError] = [
        LimitError("n", 5, "r"),
        EncodeError("m", path="/a"),
        DecodeError("m", offset=3),
        OversizedItemError(index=1, encoded_bytes=None, limit=10),
        SpillError(2, "No such file", lock),
        TokenizerUnavailable("no cached file", name=lock),  # type: ignore[arg-type]
        InvalidCursor(lock),
        ExpiredCursor("expired"),
        CursorScopeError("another principal", mismatch="principal"),
        BudgetExhausted(limit=2, used=2),
    ]
    for error in errors:
        error.context = lock  # type: ignore[attr-defined]
        error.plain = [1, "two"]  # type: ignore[attr-defined]
        error.add_note("a note")
        for back in (pickle.loads(pickle.dumps(error)), copy.deepcopy(error)):
            assert type(back) is type(error)
            if not isinstance(error, OSError):  # OSError shows its file name's repr
                assert str(back) == str(error)
            assert back.context == repr(lock)  # type: ignore[attr-defined]
            assert back.plain == [1, "two"]  # type: ignore[attr-defined]
            assert back.__notes__ == ["a note"]
            assert back.path == error.path
            if isinstance(error, SpillError):
                assert isinstance(back, OSError)
                assert (back.errno, back.filename) == (2, repr(lock))
            if isinstance(error, TokenizerUnavailable):
                assert isinstance(back, ImportError)
                assert back.name == repr(lock)
            if isinstance(error, InvalidCursor):
                assert back.args == (repr(lock),)
        assert copy.copy(error).context is lock  # type: ignore[attr-defined]


def test_plain_values_travel_as_they_are() -> None:
    for value in (None, True, 5, 2.5, "s", b"b", [1, 2], {"a": (1,)}, frozenset({1})):
        back = pickle.loads(pickle.dumps(LimitError("n", value, "r")))
        assert back.value == value
        assert type(back.value) is type(value)


def test_regression_tokenizer_unavailable_keeps_importerrors_path() -> None:
    """Found by a tester: JsonBudgetError's class attribute `path = None` came first in
    the MRO and hid ImportError's field: `path=` read back None and was lost in a
    pickle."""
    error = TokenizerUnavailable("no cached file", name="tiktoken", path="/cache/9b5ad7")
    assert error.path == "/cache/9b5ad7"
    assert ImportError.__dict__["path"].__get__(error) == "/cache/9b5ad7"  # ImportError's field
    for back in (pickle.loads(pickle.dumps(error)), copy.copy(error), copy.deepcopy(error)):
        assert (back.msg, back.name, back.path) == ("no cached file", "tiktoken", "/cache/9b5ad7")
    assert TokenizerUnavailable("no tokenizer").path is None
    assert pickle.loads(pickle.dumps(TokenizerUnavailable("no tokenizer"))).path is None


def _where(error: EncodeError) -> str:
    """The pointer as the message shows it."""
    text = str(error)
    assert text.endswith(")")
    return text[text.rindex(" (at ") + len(" (at ") : -1]


def test_regression_the_root_and_the_member_named_empty_are_told_apart() -> None:
    """Found by a tester: the message showed the root as "(at /)", which in RFC 6901 is
    the member named "": an error at the root and one at {"": ...} printed the same."""
    shown = []
    for value in (float("nan"), {"": float("nan")}):
        with pytest.raises(EncodeError) as info:
            bounded_dumps(value, max_bytes=100, unencodable="error")
        shown.append((info.value.path, _where(info.value)))
    assert shown == [("", '""'), ("/", "/")]
    queries: list[tuple[Any, str]] = [({1: 2}, ""), ({"": {1: 2}}, "/")]
    for query, path in queries:
        with pytest.raises(EncodeError) as info:
            Scope("u", query)
        assert info.value.path == path
        assert _where(info.value) == ('""' if path == "" else "/")


@pytest.mark.parametrize(
    "key",
    ["a\nb", "\x1b[2J", "\x9b", "\x7f", 'say "hi"', "back\\slash", "\udcff", "tab\there"],
)
def test_a_pointer_a_line_or_a_terminal_would_not_keep_is_shown_as_a_json_string(
    key: str,
) -> None:
    error = EncodeError("cannot encode nan", path=f"/{key}")
    shown = _where(error)
    assert shown.startswith('"')
    assert json.loads(shown) == f"/{key}"
    assert str(error).isprintable()
    str(error).encode("utf-8")  # strict: no lone surrogate left


@pytest.mark.parametrize("path", ["/a", "/0/b", "/é/😀", "/a~1b", "/~0", "//"])
def test_a_plain_pointer_is_shown_as_it_is(path: str) -> None:
    assert str(EncodeError("m", path=path)) == f"m (at {path})"
    assert str(EncodeError("m", path=None)) == "m"

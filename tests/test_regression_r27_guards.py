"""r27 guards: a `TurnBudget` call that raised after counting itself (a failed answer, an
interrupt as a lock was released) stayed counted, with no result reported, and an interrupt
as the fast path's lock was taken left it held; the one-call pager cache kept an entry no
watch removed when interrupted between the two; a spill on a read-only directory noted a
failed removal of a temporary file that was never made."""

from __future__ import annotations

import asyncio
import errno
import functools
import gc
import os
import sys
from collections.abc import Callable
from pathlib import Path
from types import FrameType
from typing import Any

import pytest

import jsonbudget
from jsonbudget import (
    Limits,
    MemoryCursorStore,
    ResultGate,
    Scope,
    SpillStore,
    TurnBudget,
    paginate,
)
from jsonbudget._agents import guards, spill
from jsonbudget._pages import builder
from jsonbudget.errors import SpillError

_PKG = os.path.dirname(jsonbudget.__file__)
_GUARDS = guards.__file__
_CONFIGURED = os.path.join(_PKG, "_configured.py")

_SMALL = {"rows": [{"id": i, "note": "n" * 20} for i in range(5)]}  # the fast path
_TEXT = "t" * 300  # no fast path: fits through `_admit_to`
_BIG = {"rows": [{"id": i, "note": "n" * 40} for i in range(300)]}  # spilled


class _Injected(KeyboardInterrupt):
    """The interrupt the sweeps deliver (a subclass: nothing of the library's catches it)."""


def _inject_at(n: int, file: str, exc: type[BaseException]) -> tuple[Callable[..., Any], list[str]]:
    """A profile function raising *exc* at the *n*-th point of *file* where a signal is
    delivered: a function's entry (called from *file*, or in it) or a C call made there
    returning. The list gets where it fired."""
    seen = [0]
    fired: list[str] = []

    def profile(frame: FrameType, event: str, arg: Any) -> None:
        if fired:
            return
        if event == "call":
            caller = frame.f_back
            here = frame.f_code.co_filename == file or (
                caller is not None and caller.f_code.co_filename == file
            )
        elif event == "c_return":
            here = frame.f_code.co_filename == file
        else:
            return
        if here:
            seen[0] += 1
            if seen[0] == n:
                sys.setprofile(None)
                fired.append(f"{event} {getattr(arg, '__name__', frame.f_code.co_name)}")
                raise exc(f"injected at {frame.f_code.co_name}:{frame.f_lineno}")

    return profile, fired


def _lock_free(turn: TurnBudget) -> bool:
    if not turn._lock.acquire(blocking=False):
        return False
    turn._lock.release()
    return True


def _state(turn: TurnBudget) -> tuple[int, int, int, tuple[Any, ...]]:
    report = turn.report()
    return report.used_bytes, turn._turn.calls, turn.remaining, report.results


@pytest.mark.parametrize("exc", [_Injected, MemoryError], ids=["interrupt", "memory"])
@pytest.mark.parametrize("result", [_SMALL, _TEXT, _BIG], ids=["fast", "fits", "spilled"])
def test_regression_turn_call_that_raised_gives_back_its_room_and_slot(
    tmp_path: Path, exc: type[BaseException], result: Any
) -> None:
    """Regression: `TurnBudget.admit` counted a call (its slot, then its bytes) before its
    answer was built and registered the give-back only after the lock was released, so a
    MemoryError or an interrupt in between left ``used_bytes`` charged with no result and
    ``remaining`` lower; the fast path took its lock with acquire before the `try`, so an
    interrupt as acquire returned left it held. Every point in guards.py, each exception."""
    store = SpillStore(tmp_path)
    turn = TurnBudget(max_bytes=8000, store=store, max_calls=4)
    turn.admit({"before": 1}, tool="first")
    before = _state(turn)
    n = 0
    while True:
        n += 1
        profile, fired = _inject_at(n, _GUARDS, exc)
        sys.setprofile(profile)
        raised: BaseException | None = None
        try:
            admitted = turn.admit(result, tool="t")
        except BaseException as exc_:  # noqa: BLE001 - the injected one, or what it became
            raised, admitted = exc_, None
        finally:
            sys.setprofile(None)
        assert fired or raised is None, (n, raised)
        assert _lock_free(turn), (n, fired)  # checked first: a held lock hangs the rest
        if admitted is not None:
            # Not interrupted (or the exception was the library's to handle): counted.
            used, calls, _, results = _state(turn)
            assert (used, calls) == (before[0] + admitted.admitted_bytes, before[1] + 1)
            assert results == (*before[3], admitted)
            if not fired:
                break
            turn.reset()
            turn.admit({"before": 1}, tool="first")
            continue
        assert fired, n
        assert _state(turn) == before, (n, fired)
    assert n > 5  # the sweep met the points it is for


def _interrupt_after_append(fired: list[str], frame: FrameType, event: str, arg: Any) -> None:
    """A profile function: an interrupt as `TurnBudget` puts an answer in the results."""
    if (
        not fired
        and event == "c_return"
        and frame.f_code.co_filename == _GUARDS
        and getattr(arg, "__name__", "") == "append"
        and frame.f_code.co_name in ("admit", "_admit_to")
    ):
        fired.append(frame.f_code.co_name)
        raise _Injected


def test_regression_turn_call_that_raised_gives_back_what_it_listed(tmp_path: Path) -> None:
    """Regression: an answer put in the results, the call raising before handing it back
    (an interrupt as the lock is released), stayed counted and reported."""
    turn = TurnBudget(max_bytes=8000, store=SpillStore(tmp_path), max_calls=4)
    before = _state(turn)
    for result in (_SMALL, _TEXT, _BIG):
        fired: list[str] = []
        sys.setprofile(functools.partial(_interrupt_after_append, fired))
        try:
            with pytest.raises(_Injected):
                turn.admit(result, tool="t")
        finally:
            sys.setprofile(None)
        assert fired
        assert _state(turn) == before


def test_regression_turn_failed_answer_leaves_room_for_the_next_result(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """Regression (the tester's case): building the answer of a spilled result failed
    with MemoryError; 4096 bytes stayed used by no result and a later result that fits an
    unused turn was spilled with reason turn_limit. Async too (`aadmit`, which the
    adapters use)."""
    turn = TurnBudget(max_bytes=6000, store=SpillStore(tmp_path), max_calls=4)
    before = _state(turn)
    real = guards.Admitted

    def no_memory(*args: Any, **kwargs: Any) -> Any:
        raise MemoryError

    monkeypatch.setattr(guards, "Admitted", no_memory)
    with pytest.raises(MemoryError):
        turn.admit(_BIG, tool="t")
    assert _state(turn) == before
    with pytest.raises(MemoryError):
        asyncio.run(turn.aadmit(_BIG, tool="t"))
    assert _state(turn) == before
    monkeypatch.setattr(guards, "Admitted", real)
    rows = {"rows": ["y" * 60] * 60}
    assert turn.admit(rows, tool="next").reason == "fits"
    assert asyncio.run(turn.aadmit("z" * 500, tool="async")).reason == "fits"


def test_regression_turn_running_call_interrupted_as_counted_is_not_left_running() -> None:
    """Regression: `running_call` counted the call, then entered the `try` that uncounts
    it: an interrupt as the counting lock was released left it running for good."""
    turn = TurnBudget(max_bytes=8000)
    fired: list[str] = []

    def profile(frame: FrameType, event: str, arg: Any) -> None:
        if (
            not fired
            and event == "c_return"
            and frame.f_code.co_name == "running_call"
            and getattr(arg, "__name__", "") == "__exit__"
        ):
            fired.append("exit")
            raise _Injected

    sys.setprofile(profile)
    try:
        with pytest.raises(_Injected), turn.running_call():
            pass
    finally:
        sys.setprofile(None)
    assert fired
    assert turn.calls_running == 0


def test_regression_paginate_cache_interrupted_keeps_no_entry_without_watches() -> None:
    """Regression: `Configured._put` stored a pager before the watches that drop it with
    its store; an interrupt between (in `Limits.__hash__`) left an entry outliving its
    store, and a new store given the dead one's id got ``ReferenceError`` on every call.
    Every point in _configured.py: once the store is gone, no pager of it is cached."""
    rows, limits, scope = list(range(10)), Limits(600), Scope("alice", {"q": 1})
    n = 0
    while True:
        n += 1
        store = MemoryCursorStore()
        profile, fired = _inject_at(n, _CONFIGURED, _Injected)
        sys.setprofile(profile)
        try:
            page = paginate(rows, scope=scope, store=store, limits=limits)
        except _Injected:
            page = None
        finally:
            sys.setprofile(None)
        del store
        gc.collect()
        for pager in list(builder._configured.by_options.values()):
            if isinstance(pager, builder._HeldPager):
                assert pager._store() is not None, (n, fired)
        if not fired:
            assert page is not None
            assert page.items
            break
    assert n > 3  # the sweep met the points it is for


def test_regression_spill_on_a_read_only_directory_notes_no_temporary_file(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """Regression: creating the temporary file failed (a read-only file system), and the
    cleanup's unlink, refused with EROFS rather than ENOENT, added a note that removing a
    temporary file had failed: there was none."""
    store = SpillStore(tmp_path)
    real_unlink = os.unlink

    def read_only(*args: Any, **kwargs: Any) -> Any:
        raise OSError(errno.EROFS, os.strerror(errno.EROFS))

    def unlink(path: Any, *args: Any, **kwargs: Any) -> None:
        if str(path).startswith(".tmp-"):
            raise OSError(errno.EROFS, os.strerror(errno.EROFS))
        real_unlink(path, *args, **kwargs)

    monkeypatch.setattr(spill, "_CREATE_PRIVATE", read_only)
    monkeypatch.setattr(os, "unlink", unlink)
    with pytest.raises(SpillError, match="Read-only file system") as info:
        store.put(b"abc", label="x")
    assert getattr(info.value, "__notes__", []) == []
    assert [p.name for p in tmp_path.iterdir()] == []


def test_spill_failed_removal_of_a_temporary_file_made_is_still_noted(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    # The note stays where a temporary file was made and could not be removed.
    store = SpillStore(tmp_path)
    real_unlink = os.unlink

    def unlink(path: Any, *args: Any, **kwargs: Any) -> None:
        if str(path).startswith(".tmp-"):
            raise OSError(errno.EROFS, os.strerror(errno.EROFS))
        real_unlink(path, *args, **kwargs)

    def chunks() -> Any:
        yield b"abc"
        raise ValueError("the caller's")

    monkeypatch.setattr(os, "unlink", unlink)
    with pytest.raises(ValueError, match="the caller's") as info:
        store.put(chunks(), label="x")
    monkeypatch.setattr(os, "unlink", real_unlink)
    assert info.value.__notes__ == [
        f"removing the temporary spill file failed too: {os.strerror(errno.EROFS)}"
    ]
    assert [p.name.startswith(".tmp-") for p in tmp_path.iterdir()] == [True]


# -- a MemoryError asking a result's class -------------------------------------------------


class _OutOfMemoryMeta(type):
    """A metaclass whose classes run out of memory when hashed or asked of an ABC."""

    def __hash__(cls) -> int:
        raise MemoryError

    def __eq__(cls, other: object) -> bool:
        return cls is other


class _Result(metaclass=_OutOfMemoryMeta):
    pass


def test_memoryerror_asking_a_results_class_passes_through(
    tmp_path: Path,
) -> None:
    gate = ResultGate(max_bytes=4096, store=SpillStore(tmp_path))
    with pytest.raises(MemoryError):
        gate.gate(_Result())
    turn = TurnBudget(max_bytes=8192, store=SpillStore(tmp_path))
    with pytest.raises(MemoryError):
        turn.admit(_Result())
    assert turn.report().used_bytes == 0

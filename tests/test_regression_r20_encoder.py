"""Containers that change while the encoder reads them (a tester's round 20).

A `default` hook, a finalizer, a gc callback or another thread may change a list or a
dict the renderer has already read and measured. Each case runs on the compiled walk and
on its Python twin (the compiled modules hidden), each in a child under limits: the
failures were bare internal exceptions (an `AssertionError` from the balanced cut, a
`RuntimeError` from the twin's size walk) or an `EncodeError` the docs do not give.
"""

from __future__ import annotations

import collections
import json
from typing import Any

import pytest

from jsonbudget import bounded_dumps
from tests.limited import bounded_run

#: Prepended to a child's code: the Python twin hides the compiled modules.
_TWIN = (
    "import sys\n"
    "sys.modules['jsonbudget._encode._speedups'] = None\n"
    "sys.modules['jsonbudget._fastnew'] = None\n"
)

PATHS = ["compiled", "twin"]


def _child(path: str, code: str) -> list[Any]:
    """What *code* prints, one JSON value a line, run on *path* in a child."""
    out = bounded_run((_TWIN if path == "twin" else "") + code, timeout=120)
    return [json.loads(line) for line in out.splitlines()]


def _check(shown: list[Any], max_bytes: int) -> Any:
    """*shown*, a result's text and whether it is complete, is strict JSON within
    *max_bytes*, marked."""
    data, complete = shown
    assert len(data.encode()) <= max_bytes, data
    value = json.loads(data, parse_constant=_no_constant)
    assert not complete
    assert "$truncated" in data or "…" in data, data
    return value


def _no_constant(name: str) -> None:
    raise AssertionError(f"non-standard constant {name}")


_PRINT = "import json\ndef show(out):\n    print(json.dumps([out.data.decode(), out.complete]))\n"


@pytest.mark.parametrize("path", PATHS)
@pytest.mark.parametrize("markers", ["text", "structured"])
def test_regression_a_hook_growing_a_measured_list_leaves_a_cut_that_fits(
    path: str, markers: str
) -> None:
    """A list's snapshot read on "from where the last read stopped" mixed two states
    of the list, its count from the new one: the balanced cut had given the list a
    share from `least`'s measure of the old state (a 45-byte structured cut) and found
    no rendering in it, a bare ``AssertionError: no rendering of 45 bytes``. A reading
    that does not go on from the snapshot is not taken: the list is cut from what was
    read."""
    code = (
        _PRINT
        + f"""
from jsonbudget import encode

class Handle:
    pass

for size, grow in ((5, 100), (5, 70), (3, 1000), (0, 40), (70, 500)):
    for budget in (64, 100, 124, 200, 400):
        rows = ["w" * 30] * size

        def default(obj, rows=rows, grow=grow):
            rows.extend(["z" * 300] * grow)  # a list already measured
            return "r"

        doc = {{"a": rows, "b": Handle(), "c": "x" * 5000}}
        show(encode(doc, max_bytes=budget, default=default, markers={markers!r}))
        print(budget)
"""
    )
    lines = _child(path, code)
    assert len(lines) == 50
    for data, budget in zip(lines[::2], lines[1::2], strict=True):
        _check(data, budget)


@pytest.mark.parametrize("path", PATHS)
def test_regression_a_list_grown_between_two_reads_of_its_snapshot_is_one_reading(
    path: str,
) -> None:
    """The list's items and its count were two readings (a slice, then ``len``): a
    thread growing the list between them made an empty list's snapshot say 40 items,
    though `least` had measured ``[]``, and the cut found no rendering of 2 bytes. A
    trace function stands in for the thread: it grows the list once, before a line of
    `EncodeCall._read`, every line in turn (those reading ``len(v)`` among them)."""
    code = (
        _PRINT
        + """
import sys
from jsonbudget import encode
from jsonbudget._encode import render

class Handle:
    pass

code = render.EncodeCall._read.__code__
lines = sorted({line for _, _, line in code.co_lines() if line is not None})
source = {line: text for line, text in enumerate(open(code.co_filename), 1)}
# The line that reads the count after the slice (the tester's injection point) is
# among them.
assert any("len(v)" in source[line] for line in lines), lines
fired = []
for at in lines:
    for markers in ("text", "structured"):
        rows = []
        armed = [True]

        def local(frame, event, arg, rows=rows, armed=armed, at=at):
            if event == "line" and frame.f_code is code and frame.f_lineno == at and armed[0]:
                armed[0] = False
                rows.extend(["v" * 50] * 40)  # "another thread"
            return local

        sys.settrace(lambda f, e, a: local if f.f_code is code else None)
        try:
            out = encode(
                {"a": rows, "c": "x" * 5000, "h": Handle()},
                max_bytes=64, default=lambda o: "r", markers=markers,
            )
        finally:
            sys.settrace(None)
        if not armed[0]:
            fired.append(at)
        show(out)
print(len(set(fired)))
"""
    )
    lines = _child(path, code)
    assert lines[-1] >= 2  # the trace grew the list at several lines
    for data in lines[:-1]:
        _check(data, 64)


@pytest.mark.parametrize("path", PATHS)
def test_regression_a_collection_in_the_size_walk_changes_no_dict_it_reads(path: str) -> None:
    """The twin's size walk (`bound.py_bound`, through `py_clean_dumps`) iterated a
    live dict with the collector running: a gc callback (a finalizer alike) that added a
    key mid-walk raised a bare ``RuntimeError: dictionary changed size during
    iteration``, where the compiled walk runs no Python code and gives valid output. The
    twin pauses the collector as the compiled walk needs not: both give the same bytes."""
    code = (
        _PRINT
        + """
import gc, inspect, sys
from jsonbudget import encode
from jsonbudget._encode import bound

class Handle:
    pass

# The twin's loop over a dict's members: a collection there runs mid-iteration.
source, first = inspect.getsourcelines(bound._members)
loop = first + next(i for i, text in enumerate(source) if "in obj.items()" in text)
for budget in (300, 1000):
    inner = {f"k{i}": {"n": i} for i in range(50)}
    armed = [True]

    def on_gc(phase, info, inner=inner, armed=armed):
        f = sys._getframe(1)
        while f is not None:
            if (
                armed[0]
                and f.f_code is bound._members.__code__
                and f.f_locals.get("obj") is inner
                and f.f_lineno > loop
            ):
                armed[0] = False
                inner["added"] = 1
                return
            f = f.f_back

    gc.callbacks.append(on_gc)
    gc.set_threshold(1)
    try:
        out = encode(
            {"inner": inner, "h": Handle(), "t": "x" * 3000},
            max_bytes=budget, default=lambda o: "r",
        )
    finally:
        gc.set_threshold(700)
        gc.callbacks.remove(on_gc)
    show(out)
"""
    )
    lines = _child(path, code)
    for data, budget in zip(lines, (300, 1000), strict=True):
        _check(data, budget)
    if path == "twin":
        assert lines == _child("compiled", code)


@pytest.mark.parametrize("path", PATHS)
@pytest.mark.parametrize("markers", ["text", "structured"])
def test_regression_a_collection_during_a_dict_read_gives_its_snapshot(
    path: str, markers: str
) -> None:
    """The renderer read a dict (``list(islice(v.items(), limit))``) with the collector
    running: a gc callback that added keys while the read went on gave ``EncodeError:
    dict raised RuntimeError while read``, where the docs promise a container changed by
    a finalizer is written as its snapshot. The read pauses the collector; a change
    between two reads is not taken into a snapshot already measured."""
    code = (
        _PRINT
        + f"""
import gc, sys
from jsonbudget import encode

class Handle:
    pass

hold = []
for budget in (80, 300, 1000):
    target = {{f"k{{i}}": [Handle(), i] for i in range(60)}}
    added = [0]

    def on_gc(phase, info, target=target, added=added):
        f = sys._getframe(1)
        while f is not None:
            # The renderer is reading `target` into its snapshot.
            if f.f_code.co_name == "_read" and f.f_locals.get("v") is target:
                if not added[0]:
                    # Pairs held empty the free list of 2-tuples: each item the read
                    # makes is then an allocation that may start a collection.
                    hold.extend(tuple([j, j]) for j in range(5000))
                if added[0] < 40:
                    target[f"g{{added[0]}}"] = "y" * 200
                    added[0] += 1
                return
            f = f.f_back

    gc.callbacks.append(on_gc)
    gc.set_threshold(1)
    try:
        out = encode(
            {{"d": target, "t": "x" * 3000}},
            max_bytes=budget, default=lambda o: "r", markers={markers!r},
        )
    finally:
        gc.set_threshold(700)
        gc.callbacks.remove(on_gc)
    show(out)
"""
    )
    lines = _child(path, code)
    for data, budget in zip(lines, (80, 300, 1000), strict=True):
        _check(data, budget)


class _ItemsDict(dict[str, Any]):
    def items(self) -> Any:
        return [("a", 1)]


class _IterList(list[int]):
    def __iter__(self) -> Any:
        return iter([1])


class _IterTuple(tuple[int, ...]):
    def __iter__(self) -> Any:
        return iter([1])


def test_regression_a_depth_marker_counts_what_a_subclass_is_written_as() -> None:
    """A dict subclass is written as its own ``items()`` gives it (values.md), but at the
    depth limit its marker counted its storage: ``"…[depth: object with 2 keys]"`` for
    an object written with one key. Its count is not known without reading it: the
    marker names the kind alone, as for a list subclass with an iteration of its own.
    One that reads as it stores keeps its count."""
    odd = {"d": _ItemsDict(a=1, b=2), "l": _IterList([1, 2, 3]), "t": _IterTuple((1, 2, 3))}
    assert json.loads(bounded_dumps([odd], max_bytes=300, max_depth=3)) == [
        {"d": {"a": 1}, "l": [1], "t": [1]}
    ]
    assert json.loads(bounded_dumps([odd], max_bytes=300, max_depth=2)) == [
        {"d": "…[depth: object]", "l": "…[depth: list]", "t": "…[depth: list]"}
    ]
    stored = {
        "d": collections.Counter("ab"),
        "o": collections.OrderedDict(a=1, b=2),
        "l": type("Rows", (list,), {})([1, 2]),
    }
    assert json.loads(bounded_dumps([stored], max_bytes=300, max_depth=2)) == [
        {
            "d": "…[depth: object with 2 keys]",
            "o": "…[depth: object with 2 keys]",
            "l": "…[depth: list of 2 items]",
        }
    ]


@pytest.mark.parametrize("path", PATHS)
def test_regression_another_thread_changing_a_dict_between_two_bytecodes_of_its_read(
    path: str,
) -> None:
    """Found while fixing the above (the tester's mutator thread): with the collector
    paused, the read still made the dict's iterator (in `islice`) one bytecode before
    `list` consumed it, and a thread switch between them changed the dict: ``EncodeError:
    dict raised RuntimeError while read``. The iterator is made inside `list`'s loop now,
    where no Python code runs. A trace function stands in for the thread: it adds a key
    before every bytecode of the renderer's read of the dict."""
    code = (
        _PRINT
        + """
import sys
from jsonbudget import encode
from jsonbudget._encode import render

class Handle:
    pass

for markers in ("text", "structured"):
    for budget in (80, 300, 1000):
        target = {f"k{i}": [Handle(), i] for i in range(60)}
        added = [0]

        def local(frame, event, arg, target=target, added=added):
            if event == "opcode" and added[0] < 400 and target in (
                frame.f_locals.get("v"), frame.f_locals.get("d")
            ):
                target[f"g{added[0]}"] = "y" * 200  # "another thread"
                added[0] += 1
            return local

        def tracer(frame, event, arg):
            if frame.f_code.co_filename != render.__file__:
                return None
            if frame.f_code.co_name not in ("_read", "_dict_items"):
                return None
            frame.f_trace_opcodes = True
            return local

        sys.settrace(tracer)
        try:
            out = encode(
                {"d": target, "t": "x" * 3000},
                max_bytes=budget, default=lambda o: "r", markers=markers,
            )
        finally:
            sys.settrace(None)
        show(out)
        print([budget, added[0]])
"""
    )
    lines = _child(path, code)
    assert len(lines) == 12
    assert sum(changed for _, changed in lines[1::2]) >= 400  # the trace changed the dict
    for data, (budget, _) in zip(lines[::2], lines[1::2], strict=True):
        _check(data, budget)


@pytest.mark.parametrize("path", PATHS)
def test_regression_another_thread_changing_a_dict_in_the_twins_size_walk(path: str) -> None:
    """The twin's size walk runs between bytecodes, where another thread may change a
    dict it iterates: a bare ``RuntimeError: dictionary changed size during iteration``
    escaped (pausing the collector does not stop threads). The walk now leaves such a
    value to the renderer, which reads its snapshot. A tracer stands for the thread."""
    code = (
        _PRINT
        + """
import inspect, sys
from jsonbudget import encode
from jsonbudget._encode import bound

# The twin's loop over a dict's members: a change past its first line is mid-iteration.
source, first = inspect.getsourcelines(bound._members)
loop = first + next(i for i, text in enumerate(source) if "in obj.items()" in text)

def run(budget):
    inner = {f"k{i}": {"n": i} for i in range(50)}
    armed = [True]

    def local(frame, event, arg):
        if (
            armed[0]
            and event == "line"
            and frame.f_lineno > loop
            and frame.f_locals.get("obj") is inner
        ):
            armed[0] = False
            inner["added"] = 1  # as another thread would, between two bytecodes
        return local

    def calls(frame, event, arg):
        return local if frame.f_code is bound._members.__code__ else None

    sys.settrace(calls)
    try:
        return encode({"inner": inner, "t": "x" * 3000}, max_bytes=budget, default=str)
    finally:
        sys.settrace(None)

for budget in (200, 600):
    show(run(budget))
"""
    )
    lines = _child(path, code)
    for data, budget in zip(lines, (200, 600), strict=True):
        _check(data, budget)

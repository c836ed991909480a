"""A jsonbudget error the caller's own code raises, and options set after construction
(a tester's round 21).

The caller's generator, Mapping or query mapping may call jsonbudget itself and get one
of its errors (a `LimitError`, an `InvalidCursor`). Passed on bare, that error read as if
the outer call had raised it: a page asked for with a valid cursor raised
`InvalidCursor`. It is the caller's exception like any other: an `EncodeError` at the
value's path, the original chained as ``__cause__``. A `DecodeError` or an `EncodeError`
says itself what failed and passes on as itself (one without a path is placed at the
value's). Each case runs on the compiled walk
and on its Python twin (the compiled modules hidden), in a child under limits.
"""

from __future__ import annotations

import copy
import gzip
import json
import pickle
from pathlib import Path
from typing import Any

import pytest

from jsonbudget import DecodeError, Encoder, JsonLinesSource, Limits, bounded_dumps
from tests.limited import bounded_run

#: Prepended to a child's code: the Python twin hides the compiled modules.
_TWIN = (
    "import sys\n"
    "sys.modules['jsonbudget._encode._speedups'] = None\n"
    "sys.modules['jsonbudget._fastnew'] = None\n"
    "sys.modules['jsonbudget._sources._numbers'] = None\n"
)

#: The child's helpers: `raised(fn)` is what *fn* raised, as JSON.
_PRELUDE = """
import collections.abc as cabc
import functools
import json
import jsonbudget as jb

def raised(fn):
    try:
        fn()
    except jb.JsonBudgetError as exc:
        cause = exc.__cause__
        return [type(exc).__name__, exc.path, None if cause is None else type(cause).__name__]
    return None
"""

PATHS = ["compiled", "twin"]

#: What the caller's code raises, as the child spells it, and its type's name. The
#: calls through `map` and `partial` put no frame of the caller's between them.
USER_ERRORS = [
    ("jb.Limits(10)", "LimitError"),
    ("list(map(jb.Limits, [10]))", "LimitError"),
    (
        "functools.partial(jb.paginate, [1], scope=jb.Scope('s'), cursor='stale', "
        "store=jb.MemoryCursorStore(), limits=jb.Limits(512))()",
        "InvalidCursor",
    ),
    ("(_ for _ in ()).throw(jb.InvalidCursor('inner'))", "InvalidCursor"),
    ("(_ for _ in ()).throw(jb.BudgetExhausted(limit=1, used=1))", "BudgetExhausted"),
]

#: Errors that say what failed themselves: passed on, one without a path placed.
ITS_OWN = [
    ("(_ for _ in ()).throw(jb.EncodeError('inner', path='/user'))", "EncodeError", "/user"),
    ("(_ for _ in ()).throw(jb.EncodeError('inner', path=None))", "EncodeError", "{at}"),
    ("(_ for _ in ()).throw(jb.DecodeError('inner', offset=3))", "DecodeError", None),
]


def _child(path: str, code: str) -> list[Any]:
    """What *code* prints, one JSON value a line, run on *path* in a child."""
    out = bounded_run((_TWIN if path == "twin" else "") + _PRELUDE + code, timeout=120)
    return [json.loads(line) for line in out.splitlines()]


@pytest.mark.parametrize("path", PATHS)
@pytest.mark.parametrize(("fails", "name"), USER_ERRORS)
def test_regression_user_error_from_a_generator_is_the_callers(
    path: str, fails: str, name: str
) -> None:
    code = f"""
def rows():
    yield 1
    {fails}
    yield 2

print(json.dumps(raised(lambda: jb.bounded_dumps({{"rows": rows()}}, max_bytes=100))))
print(json.dumps(raised(lambda: jb.encode([0, {{"rows": rows()}}], max_bytes=100))))
"""
    assert _child(path, code) == [["EncodeError", "/rows", name], ["EncodeError", "/1/rows", name]]


@pytest.mark.parametrize("path", PATHS)
@pytest.mark.parametrize(("fails", "name"), USER_ERRORS)
def test_regression_user_error_from_a_mapping_is_the_callers(
    path: str, fails: str, name: str
) -> None:
    code = f"""
class Lazy(cabc.Mapping):
    def __iter__(self):
        {fails}
        return iter(())
    def __getitem__(self, key):
        raise KeyError(key)
    def __len__(self):
        return 0

print(json.dumps(raised(lambda: jb.bounded_dumps({{"detail": Lazy()}}, max_bytes=100))))
"""
    assert _child(path, code) == [["EncodeError", "/detail", name]]


@pytest.mark.parametrize("path", PATHS)
@pytest.mark.parametrize(("fails", "name", "where"), ITS_OWN)
def test_an_error_that_says_what_failed_passes_on_as_itself(
    path: str, fails: str, name: str, where: str | None
) -> None:
    code = f"""
def rows():
    yield 1
    {fails}

print(json.dumps(raised(lambda: jb.bounded_dumps({{"rows": rows()}}, max_bytes=100))))
"""
    ((kind, at, _),) = _child(path, code)
    assert (kind, at) == (name, "/rows" if where == "{at}" else where)


@pytest.mark.parametrize("path", PATHS)
def test_regression_valid_cursor_not_refused_for_an_items_error(path: str) -> None:
    # The page with a valid cursor raised the InvalidCursor of an inner call the item's
    # mapping made (an MCP client is then told its own cursor is bad); a retry, which
    # replays the failed iterator, raised it bare again.
    code = """
store = jb.MemoryCursorStore()

class Lazy(cabc.Mapping):
    def __iter__(self):
        jb.paginate([1], scope=jb.Scope("svc", {}), cursor="stale-cursor-xyz", store=store,
                    limits=jb.Limits(512))
        return iter(())
    def __getitem__(self, key):
        raise KeyError(key)
    def __len__(self):
        return 0

def rows():
    yield 1
    raise jb.ExpiredCursor("inner expired")

for detail in (Lazy(), rows()):
    items = [{"id": 0}, {"id": 1, "detail": detail}]
    scope, lim = jb.Scope("alice", {"q": "t"}), jb.Limits(400, max_items=1)
    s = jb.MemoryCursorStore()
    first = jb.paginate(items, scope=scope, store=s, limits=lim)
    again = lambda: jb.paginate(items, scope=scope, cursor=first.next_cursor, store=s, limits=lim)
    print(json.dumps([raised(again), raised(again)]))
"""
    wrapped = ["EncodeError", "/items/0/detail"]
    assert _child(path, code) == [
        [[*wrapped, "InvalidCursor"], [*wrapped, "InvalidCursor"]],
        [[*wrapped, "ExpiredCursor"], [*wrapped, "ExpiredCursor"]],
    ]


@pytest.mark.parametrize("path", PATHS)
def test_regression_user_error_from_a_query_mapping_is_the_callers(path: str) -> None:
    code = """
class Q(cabc.Mapping):
    def __iter__(self):
        raise jb.ExpiredCursor("inner expired")
    def __getitem__(self, key):
        raise KeyError(key)
    def __len__(self):
        return 1

print(json.dumps(raised(lambda: jb.Scope("alice", Q()))))
print(json.dumps(raised(lambda: jb.Scope("alice", {"q": [1, Q()]}))))
print(json.dumps(raised(lambda: jb.Scope("alice", {"k": 2**70}))))  # the scope's own
"""
    assert _child(path, code) == [
        ["EncodeError", "", "ExpiredCursor"],
        ["EncodeError", "/q/1", "ExpiredCursor"],
        ["EncodeError", "/k", None],
    ]


@pytest.mark.parametrize(
    ("name", "value"),
    [
        ("limits", Limits(1000, max_items=2)),
        ("limits", None),
        ("strategy", "bogus"),
        ("markers", "structured"),
        ("default", str),
        ("unencodable", "error"),
        ("binary", "base64"),
    ],
)
def test_regression_encoder_options_are_fixed(name: str, value: object) -> None:
    # Set after construction, an option was half applied (the caps and markers are
    # derived once), unchecked, or broke later calls with an internal AttributeError.
    enc = Encoder(max_bytes=1000)
    before = getattr(enc, name)
    with pytest.raises(AttributeError, match="fixed at construction"):
        setattr(enc, name, value)
    with pytest.raises(AttributeError, match="fixed at construction"):
        delattr(enc, name)
    assert getattr(enc, name) == before
    assert enc.dumps(list(range(10))) == b"[0,1,2,3,4,5,6,7,8,9]"


def test_fixed_encoder_options_still_pickle() -> None:
    # Pickle and copy restore slots through setattr, which refuses the options.
    enc = Encoder(max_bytes=100, max_items=3, markers="structured", binary="base64")
    again = pickle.loads(pickle.dumps(enc))
    assert (again.limits, again.markers, again.binary) == (enc.limits, "structured", "base64")
    assert again.dumps(list(range(9))) == enc.dumps(list(range(9)))


class _Tagged(Encoder):
    __slots__ = ("tag",)

    def __init__(self, tag: str, **options: Any) -> None:
        super().__init__(**options)
        self.tag = tag


def test_regression_an_encoder_subclass_keeps_its_type_and_attributes() -> None:
    # Fixing the options first refused a subclass's own attributes, and pickle and copy
    # gave back a plain Encoder.
    enc = _Tagged("t", max_bytes=100, max_items=2)
    for again in (pickle.loads(pickle.dumps(enc)), copy.copy(enc), copy.deepcopy(enc)):
        assert type(again) is _Tagged
        assert again.tag == "t"
        assert again.dumps([1, 2, 3]) == enc.dumps([1, 2, 3])
    enc.tag = "u"
    assert enc.tag == "u"
    with pytest.raises(AttributeError, match="fixed at construction"):
        enc.limits = Limits(100)


@pytest.mark.parametrize("path", PATHS)
def test_regression_an_inner_error_through_map_is_the_callers(path: str) -> None:
    # Told apart by the traceback's frames, the first fix missed a value that is itself
    # a `map` or `starmap` over the library: no frame of the caller's lies between.
    code = """
import itertools
stale = functools.partial(jb.paginate, [1], scope=jb.Scope("s"), cursor="stale",
                          store=jb.MemoryCursorStore(), limits=jb.Limits(512))
print(json.dumps(raised(lambda: jb.bounded_dumps({"rows": map(jb.Limits, [10])},
                                                 max_bytes=100))))
print(json.dumps(raised(lambda: jb.bounded_dumps({"rows": itertools.starmap(stale, [()])},
                                                 max_bytes=100))))
"""
    assert _child(path, code) == [
        ["EncodeError", "/rows", "LimitError"],
        ["EncodeError", "/rows", "InvalidCursor"],
    ]


def test_regression_a_file_sources_decode_error_inside_a_value_is_its_own(
    tmp_path: Path,
) -> None:
    # The frame test took contextlib's frame (the source raises through a context
    # manager) for the caller's, and wrapped the source's DecodeError, its offset lost.
    data = gzip.compress(b"".join(b'{"i": %d}\n' % i for i in range(2000)))
    path = tmp_path / "rows.jsonl.gz"
    path.write_bytes(data[: len(data) // 2])
    source = JsonLinesSource(str(path))
    with pytest.raises(DecodeError, match="truncated") as caught:
        bounded_dumps({"rows": (item for item, _ in source.open(None))}, max_bytes=1 << 20)
    assert caught.value.offset is not None

"""`Scope`: the canonical fingerprint of who asks and what they asked."""

from __future__ import annotations

import collections.abc
import copy
import dataclasses
import datetime as dt
import decimal
import enum
import os
import pickle
import threading
import unicodedata
import uuid
from collections.abc import Iterator
from typing import Any

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from jsonbudget import Scope
from jsonbudget._cursors.scope import DEFAULT_PAGE_SIZE_KEYS, MAX_QUERY_DEPTH, canonical_query
from jsonbudget.errors import EncodeError, LimitError

json_scalars = st.none() | st.booleans() | st.integers(-(2**63), 2**64 - 1) | st.text(max_size=8)
json_values = st.recursive(
    json_scalars | st.floats(allow_nan=False, allow_infinity=False),
    lambda inner: (
        st.lists(inner, max_size=4) | st.dictionaries(st.text(max_size=6), inner, max_size=4)
    ),
    max_leaves=12,
)
queries = st.dictionaries(st.text(min_size=1, max_size=8), json_values, max_size=6)


def fp(query: Any, **kw: Any) -> str:
    return Scope("p", query, **kw).query_fingerprint


@settings(max_examples=60, deadline=None)
@given(queries, st.randoms())
def test_key_order_does_not_change_the_fingerprint(query: dict[str, Any], rnd: Any) -> None:
    items = list(query.items())
    rnd.shuffle(items)
    assert fp(dict(items)) == fp(query)


@settings(max_examples=60, deadline=None)
@given(queries, st.sampled_from(sorted(DEFAULT_PAGE_SIZE_KEYS)), st.integers(1, 10**6))
def test_page_size_is_not_part_of_the_fingerprint(
    query: dict[str, Any], key: str, size: int
) -> None:
    assert fp({**query, key: size}) == fp({k: v for k, v in query.items() if k != key})


@settings(max_examples=60, deadline=None)
@given(queries, queries)
def test_different_queries_have_different_fingerprints(
    a: dict[str, Any], b: dict[str, Any]
) -> None:
    if canonical_query(a) != canonical_query(b):
        assert fp(a) != fp(b)


@pytest.mark.parametrize(
    ("a", "b", "says"),
    [
        (decimal.Decimal(2**64), decimal.Decimal(2**64 + 1), "integer beyond 64 bits"),
        (decimal.Decimal("1e300"), decimal.Decimal("1e300") + 1, "integer beyond 64 bits"),
        (decimal.Decimal("1e-400"), decimal.Decimal("-1e-400"), "beyond the float range"),
    ],
)
def test_regression_decimals_a_float_cannot_hold_are_refused(
    a: decimal.Decimal, b: decimal.Decimal, says: str
) -> None:
    # Each went through float(): 2**64 and 2**64 + 1 were one query (an account number in
    # NUMERIC(38) shared cursors with its neighbour), and 1E-400 was 0, as -1E-400 was.
    for value in (a, b):
        with pytest.raises(EncodeError, match=says):
            fp({"k": value})


def test_regression_a_wide_query_under_a_long_key_is_walked_in_linear_work() -> None:
    # Each value's JSON Pointer was spelled as the walk went: 250,000 items under a key of
    # a million characters copied the key once an item (6 s). Paths are spelled for an
    # error only: the work is the query's size, counted in path characters made.
    import jsonbudget._cursors.scope as scope_module

    made = 0
    real = scope_module._pointer

    def counting(where: Any) -> str:
        nonlocal made
        out = real(where)
        made += len(out)
        return out

    scope_module._pointer = counting
    try:
        fp({"k" * 100_000: list(range(20_000))})
        with pytest.raises(EncodeError, match="lone surrogate") as raised:
            fp({"k" * 1000: [*range(50), "\ud800"]})
    finally:
        scope_module._pointer = real
    assert raised.value.path == "/" + "k" * 1000 + "/50"
    assert made == len(raised.value.path)  # one pointer spelled: the error's


def test_equivalent_spellings_share_a_fingerprint() -> None:
    class Status(enum.Enum):
        OPEN = "open"

    when = dt.datetime(2024, 5, 1, 12, tzinfo=dt.UTC)
    plus2 = when.astimezone(dt.timezone(dt.timedelta(hours=2)))
    ident = uuid.UUID("12345678-1234-5678-1234-567812345678")
    nfc = unicodedata.normalize("NFC", "café")
    nfd = unicodedata.normalize("NFD", "café")
    a = {"n": 10, "x": 0.5, "tags": ["a", "b"], "s": "open", "at": when, "id": ident, "w": nfc}
    b = {
        "w": nfd,
        "id": str(ident),
        "at": plus2,
        "s": Status.OPEN,
        "tags": ("a", "b"),
        "x": decimal.Decimal("0.5"),
        "n": 10.0,
    }
    assert fp(a) == fp(b)
    assert fp({"k": -0.0}) == fp({"k": 0})
    assert fp({"k": 2.0**63}) == fp({"k": 2**63})
    assert fp({"k": 2.5e-300}) == fp({"k": decimal.Decimal("2.5e-300")})
    assert fp({"set": {3, 1, 2}}) == fp({"set": frozenset({2, 3, 1})})
    assert fp({nfd: 1}) == fp({nfc: 1})


def test_meaningful_differences_change_the_fingerprint() -> None:
    assert fp({"a": True}) != fp({"a": 1})
    assert fp({"a": [1, 2]}) != fp({"a": [2, 1]})
    assert fp({"a": "1"}) != fp({"a": 1})
    assert fp({"a": {"b": None}}) != fp({"a": {}})
    assert fp({"offset": 10}) != fp({"offset": 20})


def test_explicit_defaults_and_none_equal_absence() -> None:
    defaults = {"sort": "asc", "deleted": False}
    assert fp({"q": "x", "sort": "asc"}, defaults=defaults) == fp({"q": "x"}, defaults=defaults)
    assert fp({"q": "x", "deleted": False}, defaults=defaults) == fp({"q": "x"}, defaults=defaults)
    assert fp({"q": "x", "sort": "desc"}, defaults=defaults) != fp({"q": "x"}, defaults=defaults)
    assert fp({"q": "x", "filter": None}) == fp({"q": "x"})
    assert fp(None) == fp({})


def test_custom_page_size_keys() -> None:
    assert fp({"q": 1, "n": 5}, page_size_keys={"n"}) == fp({"q": 1}, page_size_keys={"n"})
    assert fp({"q": 1, "limit": 5}, page_size_keys={"n"}) != fp({"q": 1}, page_size_keys={"n"})
    with pytest.raises(TypeError):
        Scope("p", {}, page_size_keys="limit")


def test_principal_separates_scopes_but_not_queries() -> None:
    a, b = Scope("alice", {"q": 1}), Scope("bob", {"q": 1})
    assert a.query_fingerprint == b.query_fingerprint
    assert a.principal_fingerprint != b.principal_fingerprint
    assert a.fingerprint != b.fingerprint
    assert a != b
    assert a == Scope("alice", {"q": 1.0})
    assert hash(a) == hash(Scope("alice", {"q": 1.0}))
    # principals are identifiers: no normalization merges two of them
    assert Scope("Alice").principal_fingerprint != Scope("alice").principal_fingerprint
    assert (
        Scope(unicodedata.normalize("NFD", "josé")).principal_fingerprint
        != Scope(unicodedata.normalize("NFC", "josé")).principal_fingerprint
    )


def test_fingerprints_are_hex_digests_and_repr_hides_the_principal() -> None:
    s = Scope("alice@example.com", {"q": "secret-filter"})
    for value in (s.fingerprint, s.principal_fingerprint, s.query_fingerprint):
        assert len(value) == 64
        int(value, 16)
    assert "alice" not in repr(s)
    assert "secret-filter" not in repr(s)
    assert s.query["q"] == "secret-filter"


def test_scope_is_immutable() -> None:
    s = Scope("alice", {"q": 1})
    with pytest.raises(AttributeError):
        s.principal = "bob"
    with pytest.raises(TypeError):
        s.query["q"] = 2  # type: ignore[index]


@pytest.mark.parametrize(
    ("query", "path"),
    [
        ({"a": float("nan")}, "/a"),
        ({"a": [1, float("inf")]}, "/a/1"),
        ({"a": {1: "x"}}, "/a"),
        ({"a": b"bytes"}, "/a"),
        ({"a": object()}, "/a"),
        ({"a/b": {"c~": decimal.Decimal("NaN")}}, "/a~1b/c~0"),
        ({"x": "\ud800"}, "/x"),
        ({"x": ["ok", {"k\udc80": 1}]}, "/x/1"),  # a key: the object holding it
        ({"big": 2**64}, "/big"),
        ({"big": [-(2**63) - 1]}, "/big/0"),
    ],
)
def test_unencodable_queries_are_refused_with_a_path(query: dict[str, Any], path: str) -> None:
    with pytest.raises(EncodeError) as info:
        Scope("p", query)
    assert info.value.path == path


def test_lone_surrogate_in_query_is_refused_with_its_path() -> None:
    # It once reached orjson, which refused the whole query without saying where (path
    # None). Refused rather than written as U+FFFD (the encoder's outcome): "\udc80" and
    # "\udc81" would then be one query and share cursors.
    for query, path in (
        ({"q": "\udc80"}, "/q"),
        ({"q": ["é", "caf\ud800é"]}, "/q/1"),
        ({"q": {"\udc80"}}, "/q/-"),
    ):
        with pytest.raises(EncodeError, match="lone surrogate") as info:
            Scope("u", query)
        assert info.value.path == path
    with pytest.raises(EncodeError) as info:
        canonical_query({}, defaults={"d": "\udfff"})
    assert info.value.path == "/d"
    assert Scope("\udc80", {"q": "ok"}).principal == "\udc80"  # a principal is not JSON


def test_deep_queries_are_refused_not_crashed() -> None:
    deep: Any = 1
    for _ in range(100_000):
        deep = [deep]
    with pytest.raises(EncodeError, match=str(MAX_QUERY_DEPTH)):
        Scope("p", {"a": deep})


def test_colliding_keys_after_normalization_are_refused() -> None:
    with pytest.raises(EncodeError, match="NFC"):
        Scope("p", {unicodedata.normalize("NFC", "é"): 1, unicodedata.normalize("NFD", "é"): 2})


@pytest.mark.parametrize("principal", ["", None, 5, b"alice"])
def test_bad_principals_are_refused(principal: Any) -> None:
    with pytest.raises((LimitError, TypeError)):
        Scope(principal)


def test_query_must_be_a_mapping() -> None:
    with pytest.raises(TypeError):
        Scope("p", [("a", 1)])  # type: ignore[arg-type]


@pytest.mark.parametrize(("principal", "query"), [(123, {}), ("p", 5), ("p", ["a"])])
def test_argument_types_are_plain_type_errors(principal: Any, query: Any) -> None:
    # Regression: a wrong argument type raised EncodeError, which says a value in the
    # data cannot be encoded; it is the call that is wrong.
    with pytest.raises(TypeError) as info:
        Scope(principal, query)
    assert not isinstance(info.value, EncodeError)


def test_a_model_or_dataclass_in_a_query_is_its_json_form() -> None:
    """An SDK builds models and dataclasses from a tool's JSON arguments: the query is
    what the client sent."""
    import dataclasses

    import pydantic

    class Filter(pydantic.BaseModel):
        status: str
        tags: list[str]

    @dataclasses.dataclass
    class Window:
        start: int
        end: int

    built = Scope("p", {"f": Filter(status="open", tags=["x"]), "w": [Window(1, 2)]})
    sent = Scope("p", {"f": {"status": "open", "tags": ["x"]}, "w": [{"start": 1, "end": 2}]})
    assert built == sent
    assert built != Scope("p", {"f": Filter(status="open", tags=["y"]), "w": [Window(1, 2)]})


@dataclasses.dataclass
class _Link:
    v: Any = None


def _cyclic() -> _Link:
    link = _Link()
    link.v = [link]
    return link


def _deep(n: int) -> _Link:
    link = _Link()
    for _ in range(n):
        link = _Link(link)
    return link


@pytest.mark.parametrize(
    ("value", "message"),
    [
        (_cyclic(), "nests deeper"),
        (_deep(2000), "nests deeper"),
        (_Link(threading.Lock()), "no JSON form"),
        (_Link(iter(range(3))), "no JSON form"),
    ],
    ids=["cycle", "deep", "lock", "iterator"],
)
def test_regression_a_dataclass_in_a_query_is_walked_under_the_depth_limit(
    value: Any, message: str
) -> None:
    # dataclasses.asdict() recursed without a limit (RecursionError) and deep-copied
    # every other value (TypeError: cannot pickle a lock) before the depth check.
    with pytest.raises(EncodeError, match=message) as info:
        canonical_query({"f": value})
    assert info.value.path is not None
    assert info.value.path.startswith("/f")
    assert canonical_query({"f": _Link(_Link(1))}) == b'{"f":{"v":{"v":1}}}'


def test_regression_a_cyclic_pydantic_model_in_a_query_is_an_encode_error() -> None:
    import pydantic

    class Node(pydantic.BaseModel):
        kids: list[Any] = []

    node = Node()
    node.kids.append(node)
    with pytest.raises(EncodeError, match="nests deeper") as info:
        canonical_query({"m": node})  # walked field by field, as a dataclass is
    assert info.value.path is not None
    assert info.value.path.startswith("/m/kids/0")


def test_regression_a_model_in_a_query_is_bound_by_what_was_sent() -> None:
    """Found by a tester (through MCP, then in Scope itself): a model was bound by its
    model_dump(mode="json"), which masks a secret (two tokens were one query), leaves out
    an exclude=True field, and lists a set in the order of the process's string hashes
    (a cursor refused after a restart)."""
    import subprocess
    import sys

    import pydantic

    class Creds(pydantic.BaseModel):
        token: pydantic.SecretStr
        tenant: str = pydantic.Field(exclude=True)
        tags: set[str]

    def query(token: str, tenant: str) -> bytes:
        creds = Creds(token=pydantic.SecretStr(token), tenant=tenant, tags={"a", "b", "c", "d"})
        return canonical_query({"creds": creds, "key": pydantic.SecretStr(token)})

    assert query("t1", "x") != query("t2", "x")
    assert query("t1", "x") != query("t1", "y")
    code = (
        "import pydantic\n"
        "from jsonbudget._cursors.scope import canonical_query\n"
        "class M(pydantic.BaseModel):\n"
        "    tags: set[str]\n"
        "print(canonical_query({'m': M(tags={'alpha', 'beta', 'gamma', 'delta'})}).decode())\n"
    )
    seen = {
        subprocess.run(
            [sys.executable, "-c", code],
            capture_output=True,
            check=True,
            env={**os.environ, "PYTHONHASHSEED": str(seed)},
        ).stdout
        for seed in range(6)
    }
    assert len(seen) == 1, seen


def test_regression_a_float_subclass_in_a_query_is_its_float() -> None:
    # numpy.float64(2.5) was kept as itself, which orjson refused with no path.
    import numpy as np

    class Price(float):
        pass

    assert canonical_query({"p": np.float64(2.5), "q": Price(0.5)}) == b'{"p":2.5,"q":0.5}'
    assert canonical_query({"p": np.float64(2.0)}) == b'{"p":2}'


def test_regression_numpy_scalars_in_a_query_are_their_numbers() -> None:
    # numpy.int64(5) was refused ("no JSON form") while numpy.float64 was folded: a query
    # built from an array's values could not be paged at all.
    import numpy as np

    assert canonical_query(
        {"i": np.int64(5), "u": np.uint64(2**64 - 1), "f": np.float32(0.5), "b": np.bool_(True)}
    ) == canonical_query({"i": 5, "u": 2**64 - 1, "f": 0.5, "b": True})
    assert canonical_query({"f": np.float16(3.0)}) == b'{"f":3}'
    with pytest.raises(EncodeError, match="non-finite") as info:
        canonical_query({"f": [np.float32("nan")]})
    assert info.value.path == "/f/0"
    with pytest.raises(EncodeError, match="no JSON form"):
        canonical_query({"c": np.complex64(1)})


def test_regression_a_datetime_out_of_range_in_utc_is_an_encode_error() -> None:
    early = dt.datetime.min.replace(tzinfo=dt.timezone(dt.timedelta(hours=23)))
    with pytest.raises(EncodeError, match="out of range") as info:
        canonical_query({"since": early})
    assert info.value.path == "/since"


def test_regression_defaults_that_are_not_a_mapping_are_a_type_error() -> None:
    # A list of defaults raised AttributeError from inside the canonical form.
    with pytest.raises(TypeError, match="defaults must be a mapping"):
        canonical_query({"a": 1}, defaults=["a"])  # type: ignore[arg-type]
    with pytest.raises(TypeError, match="defaults must be a mapping"):
        Scope("u", {"a": 1}, defaults=[("a", 1)])  # type: ignore[arg-type]


@pytest.mark.parametrize(
    "copier", [copy.copy, copy.deepcopy, lambda s: pickle.loads(pickle.dumps(s))]
)
def test_regression_a_scope_copies_and_pickles_with_its_fingerprints(copier: Any) -> None:
    # Scope refused setattr, so copy, deepcopy and pickle all failed (a request context
    # holding one could not be copied, nor handed to a worker).
    scope = Scope("alice", {"q": "x", "limit": 5}, defaults={"q": "y"}, page_size_keys={"limit"})
    twin = copier(scope)
    assert twin == scope
    assert (twin.principal, dict(twin.query)) == ("alice", {"q": "x", "limit": 5})
    assert twin.query_fingerprint == scope.query_fingerprint  # the options travel with it
    with pytest.raises(AttributeError):
        twin.principal = "bob"


def test_regression_a_query_value_that_raises_while_read_is_an_encode_error() -> None:
    # A lying mapping, a dataclass field never set and a tzinfo whose offset is out of
    # range raised their own KeyError / AttributeError / ValueError from Scope(...).
    class Liar(collections.abc.Mapping[str, Any]):
        def __getitem__(self, k: str) -> Any:
            raise KeyError(k)

        def __iter__(self) -> Iterator[str]:
            return iter(["a", "b"])

        def __len__(self) -> int:
            return 2

    @dataclasses.dataclass
    class Args:
        a: int
        b: int = dataclasses.field(init=False)

    class Far(dt.tzinfo):
        def utcoffset(self, d: dt.datetime | None) -> dt.timedelta:
            return dt.timedelta(hours=30)

        def dst(self, d: dt.datetime | None) -> None:
            return None

        def tzname(self, d: dt.datetime | None) -> str:
            return "far"

    for value, cause in (
        (Liar(), KeyError),
        (Args(1), AttributeError),
        (dt.datetime(2024, 1, 1, tzinfo=Far()), ValueError),
    ):
        with pytest.raises(EncodeError, match="raised") as info:
            canonical_query({"x": [value]})
        assert info.value.path == "/x/0"
        assert isinstance(info.value.__cause__, cause)


def test_regression_a_model_in_a_query_is_keyed_by_its_fields_aliases() -> None:
    """Found by a tester: a model was keyed by its fields' Python names (user_id), so a
    Scope of the model did not equal one of the dict the client sent ({"userId": 7})."""
    import pydantic

    class Args(pydantic.BaseModel):
        user_id: int = pydantic.Field(alias="userId")
        q: str

    assert Scope("p", {"a": Args(userId=7, q="x")}) == Scope("p", {"a": {"userId": 7, "q": "x"}})


class _Tone(enum.Enum):
    RED = "red"


@pytest.mark.parametrize(
    ("spelled_twice", "once"),
    [
        ({"café", unicodedata.normalize("NFD", "café")}, {"café"}),
        ({_Tone.RED, "red"}, {"red"}),
        ({uuid.UUID(int=7), str(uuid.UUID(int=7))}, {uuid.UUID(int=7)}),
        ({decimal.Decimal("0.1"), 0.1}, {0.1}),
    ],
)
def test_regression_a_set_of_two_spellings_of_one_value_is_that_value_once(
    spelled_twice: set[Any], once: set[Any]
) -> None:
    """Found by a tester: a set's members were canonicalized and sorted but kept twice
    where two spellings of one value are two members to Python, so the query differed
    from the set of that value once (its cursors refused as another query's)."""
    assert len(spelled_twice) == 2
    assert canonical_query({"tags": spelled_twice}) == canonical_query({"tags": once})
    assert Scope("p", {"tags": spelled_twice}) == Scope("p", {"tags": once})


class _Field(enum.StrEnum):
    STATUS = "status"
    LIMIT = "limit"


class _Key(str):
    """A str subclass whose own methods say another text, all equal and one hash: only
    str's own methods read its text."""

    __slots__ = ()

    def __str__(self) -> str:
        return "not-" + str.__str__(self)

    def __eq__(self, other: object) -> bool:
        return True

    def __hash__(self) -> int:
        return 7

    def encode(self, *args: Any, **kwargs: Any) -> bytes:
        return b"lie"

    def isascii(self) -> bool:
        return True

    def replace(self, *args: Any, **kwargs: Any) -> str:
        return "lie"


class _Member(_Key):
    """A `_Key` that hashes as its text: a set of `_Key` is one member to Python itself."""

    __slots__ = ()

    def __hash__(self) -> int:
        return str.__hash__(self)


def _subclassed(value: Any) -> Any:
    """*value* with every str in it (keys, values, set members, at any depth) a `_Key`
    (a `_Member` in a set)."""
    if isinstance(value, str):
        return _Key(value)
    if isinstance(value, list):
        return [_subclassed(v) for v in value]
    if isinstance(value, frozenset):
        return frozenset(_Member(v) if isinstance(v, str) else _subclassed(v) for v in value)
    if isinstance(value, dict):
        # a dict of _Key keys would be one key (one hash, all equal): pairs read as items
        return _Items([(_subclassed(k), _subclassed(v)) for k, v in value.items()])
    return value


class _Items(collections.abc.Mapping[str, Any]):
    """A mapping whose items are the pairs it was given, whatever their keys' ``==``."""

    def __init__(self, pairs: list[tuple[str, Any]]) -> None:
        self._pairs = pairs

    def __getitem__(self, key: str) -> Any:
        raise AssertionError("read by items()")

    def __iter__(self) -> Iterator[str]:
        return iter(k for k, _ in self._pairs)

    def __len__(self) -> int:
        return len(self._pairs)

    def items(self) -> Any:
        return list(self._pairs)


_texts = st.text(max_size=6) | st.sampled_from(["café", unicodedata.normalize("NFD", "café")])
_queries_with_sets = st.dictionaries(
    _texts,
    st.recursive(
        json_scalars | _texts | st.frozensets(_texts, max_size=4),
        lambda inner: st.lists(inner, max_size=4) | st.dictionaries(_texts, inner, max_size=4),
        max_leaves=12,
    ),
    max_size=5,
)


@pytest.mark.parametrize(
    ("subclassed", "plain"),
    [
        ({_Field.STATUS: "open"}, {"status": "open"}),
        ({"filter": {_Key("status"): "open"}}, {"filter": {"status": "open"}}),
        ({"f": [{"a": {_Key("k"): _Key("v")}}]}, {"f": [{"a": {"k": "v"}}]}),
        ({"tags": {_Member("x"), _Member("y")}}, {"tags": ["x", "y"]}),
        ({_Field.LIMIT: 5, "q": 1}, {"q": 1}),  # a page-size key, dropped as "limit" is
        ({"é": {_Key(unicodedata.normalize("NFD", "é")): 1}}, {"é": {"é": 1}}),
    ],
)
def test_regression_a_str_subclass_key_is_its_text(
    subclassed: dict[Any, Any], plain: dict[str, Any]
) -> None:
    """Found by a tester: a StrEnum key (or any str subclass key, at any depth) reached
    orjson as itself, since NFC text comes back from normalize() as the same object, and
    orjson refused it: EncodeError "query cannot be encoded: Dict key must be str" with
    path None, where the docs take an Enum as its value."""
    assert canonical_query(subclassed) == canonical_query(plain)
    assert Scope("alice", subclassed) == Scope("alice", plain)


@settings(max_examples=80, deadline=None)
@given(_queries_with_sets)
def test_regression_str_subclasses_anywhere_in_a_query_are_their_text(
    query: dict[str, Any],
) -> None:
    """Found by a tester (a StrEnum key refused with no path): every str in a query, key,
    value or set member, nested, as a subclass whose own __str__, __eq__, __hash__,
    encode, isascii and replace lie, is the query of its plain text."""

    def outcome(query: Any) -> tuple[bytes | str, str | None]:
        try:
            return canonical_query(query), None
        except EncodeError as err:  # two keys one after NFC
            return str(err), err.path

    assert outcome(_subclassed(query)) == outcome(query)


def test_regression_a_lone_surrogate_in_a_str_subclass_is_refused_with_its_path() -> None:
    # The subclass's own encode() said the text was fine: only str's own methods read it.
    with pytest.raises(EncodeError, match="lone surrogate") as info:
        canonical_query({"a": [_Key("x\udc80")]})
    assert info.value.path == "/a/0"
    with pytest.raises(EncodeError, match="lone surrogate") as info:
        canonical_query({"a/b": {_Key("k\ud800"): 1}})
    assert info.value.path == "/a~1b"  # the key's own replace() is not asked for the path


class _Big(int):
    def __int__(self) -> int:
        return 2**70


class _BigDecimal(decimal.Decimal):
    def __int__(self) -> int:
        return 2**70


class _BytesDate(dt.date):
    def isoformat(self) -> Any:
        return b"2024-01-01"


class _SurrogateUUID(uuid.UUID):
    def __str__(self) -> str:
        return "\udc80"


class _NanoTime(dt.datetime):
    """A datetime that spells more than the base holds, as pandas' Timestamp does."""

    def isoformat(self, sep: str = "T", timespec: str = "auto") -> str:
        return dt.datetime.isoformat(self) + "001"


def test_regression_a_subclass_that_overrides_its_spelling_never_reaches_orjson() -> None:
    """Found with the StrEnum key above: a value whose own __int__, isoformat or __str__
    gave what orjson refuses (an int past 64 bits, bytes, a lone surrogate) passed the
    checks and was refused by orjson with path None. The number is the one it holds; a
    spelling that is not text is refused where it is."""
    assert canonical_query({"a": [_Big(5)]}) == b'{"a":[5]}'
    assert canonical_query({"a": [_BigDecimal(5)]}) == b'{"a":[5]}'
    for value, says in ((_BytesDate(2024, 1, 1), "spells itself as bytes"),
                        (_SurrogateUUID(int=5), "lone surrogate")):  # fmt: skip
        with pytest.raises(EncodeError, match=says) as info:
            canonical_query({"a": {"b": value}})
        assert info.value.path == "/a/b"
    # a subclass's own spelling still tells apart what it holds beyond its base type
    early, later = _NanoTime(2024, 1, 1, tzinfo=dt.UTC), dt.datetime(2024, 1, 1, tzinfo=dt.UTC)
    assert canonical_query({"t": early}) != canonical_query({"t": later})


_hostile_leaves = st.sampled_from(
    [
        _Big(1),
        _BigDecimal(2),
        _BytesDate(2024, 1, 1),
        _SurrogateUUID(int=5),
        _Key("k"),
        _Key("\udc80"),
        _Field.STATUS,
        decimal.Decimal("1e30"),
        float("nan"),
        2**64,
    ]
)


@settings(max_examples=100, deadline=None)
@given(
    st.recursive(
        json_scalars | _hostile_leaves,
        lambda inner: (
            st.lists(inner, max_size=3)
            | st.dictionaries(st.text(max_size=3) | st.just(_Field.STATUS), inner, max_size=3)
        ),
        max_leaves=10,
    )
)
def test_regression_a_query_is_fingerprinted_or_refused_with_a_path(value: Any) -> None:
    """The canonical form holds only what orjson writes: a query is a fingerprint or an
    EncodeError naming where, never orjson's own error with no path."""
    path = "/q"
    try:
        canonical_query({"q": value})
    except EncodeError as err:
        path = err.path or "(none)"
    assert path.startswith("/q")


def test_regression_a_str_subclass_principal_is_its_text() -> None:
    # Its own encode() (b"lie" for every principal) made the fingerprint: two principals
    # were one.
    alice, bob = Scope(_Key("alice")), Scope(_Key("bob"))
    assert alice.principal_fingerprint == Scope("alice").principal_fingerprint
    assert alice.principal_fingerprint != bob.principal_fingerprint
    assert type(alice.principal) is str
    assert alice.principal == "alice"


def test_regression_page_size_keys_are_compared_as_their_text() -> None:
    # A str subclass with its own hash was never found among the query's keys.
    assert canonical_query({"n": 5, "q": 1}, page_size_keys={_Key("n")}) == b'{"q":1}'
    assert canonical_query({"q": 1, "limit": 5}, page_size_keys={_Field.LIMIT}) == b'{"q":1}'
    with pytest.raises(TypeError, match="page_size_keys must hold strings, not int"):
        canonical_query({"q": 1}, page_size_keys={1})  # type: ignore[arg-type]


def test_regression_a_query_mapping_that_raises_while_read_is_an_encode_error() -> None:
    # As a value inside a query it was an EncodeError; as the query itself (or its
    # defaults) its own KeyError escaped.
    class Liar(collections.abc.Mapping[str, Any]):
        def __getitem__(self, k: str) -> Any:
            raise KeyError(k)

        def __iter__(self) -> Iterator[str]:
            return iter(["a"])

        def __len__(self) -> int:
            return 1

    for call in (lambda: canonical_query(Liar()), lambda: Scope("p", {}, defaults=Liar())):
        with pytest.raises(EncodeError, match="raised KeyError while read") as info:
            call()
        assert info.value.path == ""
        assert isinstance(info.value.__cause__, KeyError)


def test_regression_an_sqlite_source_with_a_strenum_parameter_name_pages() -> None:
    """Found by a tester: SQLiteSource(params={StrEnum_member: ...}) could not be paged,
    since its describe() goes into the scope's fingerprint (the same pathless
    EncodeError as a StrEnum query key)."""
    import sqlite3

    from jsonbudget import Limits, MemoryCursorStore, SQLiteSource, paginate

    class Param(enum.StrEnum):
        LO = "lo"

    conn = sqlite3.connect(":memory:")
    try:
        conn.execute("CREATE TABLE t (id INTEGER PRIMARY KEY)")
        conn.executemany("INSERT INTO t VALUES (?)", [(i,) for i in range(10)])
        source = SQLiteSource(
            conn,
            query="SELECT id FROM t WHERE id > :lo",
            params={Param.LO: 3},
            order_by=("id",),
            unique=True,
        )
        store, limits = MemoryCursorStore(), Limits(max_bytes=2000, max_items=4)
        first = paginate(source, scope=Scope("u", {}), store=store, limits=limits)
        assert [row["id"] for row in first.items] == [4, 5, 6, 7]
        assert first.next_cursor is not None
        rest = paginate(
            source, scope=Scope("u", {}), cursor=first.next_cursor, store=store, limits=limits
        )
        assert [row["id"] for row in rest.items] == [8, 9]
    finally:
        conn.close()

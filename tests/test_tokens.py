"""Token budgets: estimates, the optional tiktoken counter, and fit_tokens."""

from __future__ import annotations

import hashlib
import importlib.util
import math
import sys
from pathlib import Path
from typing import Any

import orjson
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from jsonbudget import (
    EstimatedTokenCounter,
    Limits,
    TiktokenCounter,
    TokenCounter,
    TokenFitter,
    fit_tokens,
)
from jsonbudget._agents.tokens import DEFAULT_BYTES_PER_TOKEN, MAX_FIT_ROUNDS
from jsonbudget._limits import MIN_BYTES
from jsonbudget.errors import LimitError, TokenizerUnavailable


class WordCounter:
    """Deterministic: one token per whitespace-separated word."""

    def __init__(self) -> None:
        self.calls = 0

    def count(self, text: str) -> int:
        self.calls += 1
        return len(text.split())


class ByteCounter:
    """Deterministic: one token per started 4 bytes."""

    def count(self, text: str) -> int:
        return math.ceil(len(text.encode()) / 4)


DOCS = {"docs": [{"id": i, "text": " ".join(["word"] * 50)} for i in range(200)]}


def test_counters_satisfy_the_protocol() -> None:
    assert isinstance(EstimatedTokenCounter(), TokenCounter)
    assert isinstance(WordCounter(), TokenCounter)
    assert isinstance(TiktokenCounter(), TokenCounter)


def test_estimate_is_bytes_over_ratio() -> None:
    counter = EstimatedTokenCounter()
    assert counter.bytes_per_token == DEFAULT_BYTES_PER_TOKEN
    assert counter.count("") == 0
    assert counter.count("abcd") == 1
    assert counter.count("abcde") == 2
    assert counter.count("é" * 4) == 2  # 8 UTF-8 bytes
    assert EstimatedTokenCounter(bytes_per_token=2).count("abcde") == 3


@pytest.mark.parametrize("bad", [0, -1, 0.1, 100, float("nan"), float("inf"), "4", True])
def test_estimate_refuses_bad_ratio(bad: object) -> None:
    with pytest.raises(LimitError):
        EstimatedTokenCounter(bytes_per_token=bad)  # type: ignore[arg-type]


@pytest.mark.skipif(
    importlib.util.find_spec("tiktoken") is not None, reason="tiktoken is installed here"
)
def test_tiktoken_unavailable_is_a_clear_error_on_first_count() -> None:
    counter = TiktokenCounter("cl100k_base")  # lazy: constructing does not import
    with pytest.raises(TokenizerUnavailable, match="tiktoken is not installed"):
        counter.count("hello")


def test_tiktoken_counter_uses_a_supplied_encoding_object() -> None:
    class FakeEncoding:
        name = "fake"

        def encode(self, text: str, *, disallowed_special: object = ()) -> list[int]:
            assert disallowed_special == ()
            return list(range(len(text.split())))

    counter = TiktokenCounter(FakeEncoding())
    assert counter.name == "fake"
    assert counter.count("a b c <|endoftext|>") == 4


def test_regression_encoding_whose_encode_takes_only_the_text() -> None:
    # "anything with .encode" (a Hugging Face tokenizer's encode(text)) raised a TypeError:
    # tiktoken's disallowed_special keyword was passed to it.
    class TextOnly:
        def encode(self, text: str) -> list[str]:
            return text.split()

    assert TiktokenCounter(TextOnly()).count("a b <|endoftext|>") == 3


def test_regression_tiktoken_signature_still_gets_disallowed_special() -> None:
    # tiktoken's own default refuses special-token text; in data it is counted as text.
    class TiktokenLike:
        name = "like"

        def encode(
            self, text: str, *, allowed_special: object = (), disallowed_special: object = "all"
        ) -> list[str]:
            if disallowed_special == "all" and "<|endoftext|>" in text:
                raise ValueError("disallowed special token")
            return text.split()

    assert TiktokenCounter(TiktokenLike()).count("a <|endoftext|>") == 2


def _fake_cache(monkeypatch: pytest.MonkeyPatch, directory: Path, name: str, data: bytes) -> Path:
    """A tiktoken cache directory holding *data* where tiktoken looks for *name*."""
    from jsonbudget._agents.tokens import _TIKTOKEN_URLS

    monkeypatch.setenv("TIKTOKEN_CACHE_DIR", str(directory))
    path = directory / hashlib.sha1(_TIKTOKEN_URLS[name].encode()).hexdigest()
    path.write_bytes(data)
    return path


@pytest.mark.parametrize("name", ["o200k_base", "cl100k_base", "p50k_base", "r50k_base"])
@pytest.mark.parametrize("data", [b"", b"aGVsbG8= 0\n"])
def test_regression_corrupt_tiktoken_cache_file_is_unavailable(
    monkeypatch: pytest.MonkeyPatch, tmp_path: Path, name: str, data: bytes
) -> None:
    # Only `is_file()` was checked: tiktoken deletes a cached file whose sha256 is not
    # the one its openai_public plugin expects (an interrupted download, an empty
    # placeholder) and downloads it again, which jsonbudget promises never to do.
    # tiktoken is not installed here, and `count` imports it before looking at the
    # cache, so this tests the check `TiktokenCounter._load` runs before tiktoken does.
    from jsonbudget._agents import tokens

    path = _fake_cache(monkeypatch, tmp_path, name, data)
    assert tokens._tiktoken_cache_file(name) == path
    with pytest.raises(TokenizerUnavailable, match="corrupt or partial") as info:
        tokens._check_tiktoken_file(name, path, tokens._tiktoken_expected_hashes())
    assert str(path) in str(info.value)
    assert path.read_bytes() == data  # reported, not deleted


def test_tiktoken_cache_file_with_the_expected_hash_passes(
    monkeypatch: pytest.MonkeyPatch, tmp_path: Path
) -> None:
    from jsonbudget._agents import tokens

    data = b"aGVsbG8= 0\n"
    path = _fake_cache(monkeypatch, tmp_path, "o200k_base", data)
    url = tokens._TIKTOKEN_URLS["o200k_base"]
    tokens._check_tiktoken_file("o200k_base", path, {url: hashlib.sha256(data).hexdigest()})
    tokens._check_tiktoken_file("o200k_base", path, {})  # no hash known: none checked
    with pytest.raises(TokenizerUnavailable, match="cannot be read"):
        tokens._check_tiktoken_file("o200k_base", tmp_path / "missing", {url: "0" * 64})


_PLUGIN_MODULES = ("tiktoken_ext", "tiktoken_ext.openai_public")


def test_tiktoken_hashes_are_tiktokens_own(monkeypatch: pytest.MonkeyPatch, tmp_path: Path) -> None:
    # The hashes come from the installed plugin's source where there is one (a newer
    # tiktoken may check a new file), else from tiktoken 0.14's.
    from jsonbudget._agents import tokens

    url = tokens._TIKTOKEN_URLS["cl100k_base"]
    if importlib.util.find_spec("tiktoken") is None:
        by_url = {tokens._TIKTOKEN_URLS[n]: h for n, h in tokens._TIKTOKEN_SHA256.items()}
        assert tokens._tiktoken_expected_hashes() == by_url
    plugin = tmp_path / "tiktoken_ext"
    plugin.mkdir()
    (plugin / "openai_public.py").write_text(
        f"def cl100k_base():\n    return load_tiktoken_bpe({url!r}, expected_hash={'a' * 64!r})\n"
    )
    monkeypatch.syspath_prepend(str(tmp_path))
    saved = {m: sys.modules.pop(m) for m in _PLUGIN_MODULES if m in sys.modules}
    try:
        hashes = tokens._tiktoken_expected_hashes()
    finally:
        for module in _PLUGIN_MODULES:
            sys.modules.pop(module, None)
        sys.modules.update(saved)
    assert hashes[url] == "a" * 64
    o200k = tokens._TIKTOKEN_URLS["o200k_base"]
    assert hashes[o200k] == tokens._TIKTOKEN_SHA256["o200k_base"]


def test_tiktoken_counter_refuses_non_encodings() -> None:
    with pytest.raises(LimitError):
        TiktokenCounter(42)


@pytest.mark.parametrize("max_tokens", [1, 10, 50, 500, 5000])
def test_fit_tokens_measures_and_fits(max_tokens: int) -> None:
    counter = WordCounter()
    if max_tokens < 2:
        with pytest.raises(LimitError, match="max_tokens"):
            fit_tokens(DOCS, max_tokens=max_tokens, counter=counter)
        return
    result = fit_tokens(DOCS, max_tokens=max_tokens, counter=counter)
    text = result.data.decode("utf-8")
    orjson.loads(result.data)
    assert result.tokens == len(text.split())  # the reported count is the measured one
    assert result.tokens <= max_tokens
    assert len(result.data) <= result.max_bytes
    assert result.rounds <= MAX_FIT_ROUNDS
    assert counter.calls == result.rounds


def test_fit_tokens_uses_the_budget_well() -> None:
    result = fit_tokens(DOCS, max_tokens=500, counter=WordCounter())
    assert result.tokens >= 450  # within 10% of the budget, not a timid undershoot
    assert not result.complete
    assert result.truncations


def test_fit_tokens_small_object_is_complete_in_one_round() -> None:
    result = fit_tokens({"a": 1}, max_tokens=100, counter=ByteCounter())
    assert result.data == b'{"a":1}'
    assert result.complete
    assert result.rounds == 1
    assert result.tokens == 2


def test_fit_tokens_never_exceeds_the_byte_cap() -> None:
    for cap in (MIN_BYTES, 200, 1000):
        result = fit_tokens(DOCS, max_tokens=100_000, counter=ByteCounter(), max_bytes=cap)
        assert len(result.data) <= cap
        assert result.max_bytes == cap
        limited = fit_tokens(DOCS, max_tokens=100_000, counter=ByteCounter(), limits=Limits(cap))
        assert limited.data == result.data


def test_fit_tokens_keeps_other_limits() -> None:
    result = fit_tokens(DOCS, max_tokens=5000, counter=WordCounter(), max_items=3)
    assert len(orjson.loads(result.data)["docs"]) == 4  # 3 items plus the omitted marker


def test_fit_tokens_validates_first() -> None:
    with pytest.raises(LimitError):
        fit_tokens(DOCS, max_tokens=0, counter=WordCounter())
    with pytest.raises(LimitError):
        fit_tokens(DOCS, max_tokens=10, counter=object())  # type: ignore[arg-type]
    with pytest.raises(LimitError):
        fit_tokens(DOCS, max_tokens=10, counter=WordCounter(), max_bytes=10)


def test_regression_counter_returning_garbage_is_refused() -> None:
    class Liar:
        def count(self, text: str) -> int:
            return -1

    with pytest.raises(LimitError, match="token count"):
        fit_tokens(DOCS, max_tokens=10, counter=Liar())


def test_regression_a_huge_count_is_text_that_does_not_fit() -> None:
    """Found by a tester: a counter returning more than 2**40 for an over-budget text (a
    penalty-weighted counter) made fit_tokens raise LimitError, where any int >= 0 is a
    count and one past max_tokens only says the text does not fit."""

    class Penalty:
        def count(self, text: str) -> int:
            return 10**13 if len(text) > 1000 else len(text) // 4

    result = fit_tokens(DOCS, max_tokens=200, counter=Penalty())
    assert result.tokens <= 200
    assert len(result.data) <= 1000


def test_fitter_is_reusable() -> None:
    fitter = TokenFitter(max_tokens=200, counter=WordCounter())
    first = fitter.fit(DOCS)
    assert fitter.fit(DOCS) == first


@settings(max_examples=25, deadline=None)
@given(
    obj=st.recursive(
        st.none() | st.booleans() | st.integers() | st.text(max_size=200),
        lambda children: (
            st.lists(children, max_size=8)
            | st.dictionaries(st.text(max_size=10), children, max_size=8)
        ),
        max_leaves=60,
    ),
    max_tokens=st.integers(min_value=20, max_value=400),
)
def test_property_reported_tokens_are_measured_and_within_budget(
    obj: object, max_tokens: int
) -> None:
    counter = ByteCounter()
    result = fit_tokens(obj, max_tokens=max_tokens, counter=counter)
    assert result.tokens == counter.count(result.data.decode("utf-8"))
    assert result.tokens <= max_tokens
    orjson.loads(result.data)


def test_regression_whole_object_just_over_the_tokens_still_fits() -> None:
    # The search once scaled the failed *budget* by max_tokens / tokens: with a whole
    # object one token over, each round shrank the budget by 3% and 16 rounds ended
    # above the object's size, with a LimitError claiming a 64-byte output was too big.
    obj = {"rows": [{"id": i, "name": "x" * 20} for i in range(20)]}
    whole = len(orjson.dumps(obj))
    counter = ByteCounter()
    max_tokens = counter.count(orjson.dumps(obj).decode()) - 1
    result = fit_tokens(obj, max_tokens=max_tokens, counter=counter)
    assert result.tokens <= max_tokens
    assert not result.complete
    assert len(result.data) > whole // 2


@pytest.mark.parametrize("counter", ["o200k_base", b"cl100k_base", ["x"], ("x",)])
def test_regression_an_encodings_name_is_no_counter(counter: Any) -> None:
    # A str has a count() method (occurrences of a substring): fit_tokens took
    # counter="o200k_base", counted 0 tokens for every output and enforced nothing.
    with pytest.raises(LimitError, match="counter") as info:
        fit_tokens([1] * 1000, max_tokens=5, counter=counter)
    assert info.value.name == "counter"


@pytest.mark.parametrize(
    ("option", "value"),
    [
        ("strategy", "nope"),
        ("markers", "fancy"),
        ("unencodable", "skip"),
        ("binary", "hex"),
        ("default", 3),
        ("max_items", 0),
        ("max_keys", 0),
        ("max_field_bytes", 5),
        ("max_depth", 0),
    ],
)
def test_regression_fitter_checks_encode_options_when_built(option: str, value: object) -> None:
    # TokenFitter kept **encode_options unchecked: a bad mode or cap was only refused by
    # the first .fit(), unlike every other reusable class (guarantee 6).
    counter = WordCounter()
    options: dict[str, Any] = {option: value}
    with pytest.raises(LimitError) as info:
        TokenFitter(max_tokens=100, counter=counter, **options)
    assert info.value.name == option
    assert counter.calls == 0


def test_regression_fitter_checks_options_against_its_limits() -> None:
    # A structured marker does not fit a 40-byte field cap given in the Limits.
    with pytest.raises(LimitError, match="max_field_bytes"):
        TokenFitter(
            max_tokens=100,
            counter=WordCounter(),
            limits=Limits(4096, max_field_bytes=40),
            markers="structured",
        )


def test_regression_unknown_encode_keyword_names_the_caller() -> None:
    # TokenFitter(..., bogus=1) constructed; .fit() then raised "encode() got an
    # unexpected keyword argument 'bogus'", blaming a call the user never made.
    options: dict[str, Any] = {"max_tokens": 100, "counter": WordCounter(), "bogus": 1}
    message = r"\(\) got an unexpected keyword argument 'bogus'$"
    with pytest.raises(TypeError, match="^TokenFitter" + message):
        TokenFitter(**options)
    with pytest.raises(TypeError, match="^fit_tokens" + message):
        fit_tokens(DOCS, **options)


def test_fitter_options_that_are_valid_still_apply() -> None:
    fitter = TokenFitter(
        max_tokens=1000,
        counter=WordCounter(),
        limits=Limits(4096, max_items=3),
        strategy="prefix",
        markers="structured",
        max_field_bytes=None,
    )
    out = orjson.loads(fitter.fit(list(range(10))).data)
    assert out[:3] == [0, 1, 2]
    assert len(out) == 4  # the structured marker for the 7 left out


@pytest.mark.parametrize("nest", [lambda rows: rows, lambda rows: {"rows": rows}])
def test_regression_an_iterator_is_fitted_as_its_list_is(nest: Any) -> None:
    """Found by a tester: the fitter encodes one value at several budgets, and an
    iterator gave its items to the first round only: the rounds after it began later
    (rows from id 43 on, none of 0-42 marked), or found it empty (``[]``, complete)."""
    rows: list[dict[str, Any]] = [{"id": i, "text": "lorem ipsum " * 5} for i in range(1000)]
    pulled: list[int] = []

    def generate() -> Any:
        for row in rows:
            pulled.append(row["id"])
            yield row

    for max_tokens in (100, 400):
        pulled.clear()
        options: dict[str, Any] = {"max_tokens": max_tokens, "counter": EstimatedTokenCounter()}
        want = fit_tokens(nest(rows), **options)
        got = fit_tokens(nest(generate()), **options)
        assert got.rounds > 1  # one value encoded at several budgets
        # The rows from the first on, cut and marked; the list's marker counts what it
        # left out, an iterator's says "more" (it was not read to its end), which is
        # shorter and may leave room for one more row.
        assert got.complete is want.complete is False
        shown, listed = (_rows_shown(out.data) for out in (got, want))
        assert [row["id"] for row in shown] == list(range(len(shown)))
        assert shown[: len(listed)] == listed
        assert len(got.truncations) == 1
        assert pulled == sorted(set(pulled))  # each item pulled once
        assert len(pulled) < len(rows)  # and no further than the budgets needed


def _rows_shown(data: bytes) -> list[Any]:
    """The rows a fitted output shows, its marker left out."""
    doc = orjson.loads(data)
    rows = doc["rows"] if isinstance(doc, dict) else doc
    return [row for row in rows if not isinstance(row, str)]


@pytest.mark.parametrize("counter", [EstimatedTokenCounter, TiktokenCounter, WordCounter])
def test_regression_a_counter_class_is_refused_when_the_fitter_is_made(counter: Any) -> None:
    # A class has a callable `count` (an unbound function): TokenFitter took
    # counter=EstimatedTokenCounter and failed at the first fit, after an encode, with
    # "count() missing 1 required positional argument".
    with pytest.raises(TypeError, match=r"TokenFitter\(\) counter must be a counter instance"):
        TokenFitter(max_tokens=100, counter=counter)
    with pytest.raises(TypeError, match=rf"pass {counter.__name__}\(\)") as info:
        fit_tokens([1, 2, 3], max_tokens=100, counter=counter)
    assert str(info.value).startswith("fit_tokens()")
    fitter = TokenFitter(max_tokens=100, counter=WordCounter())
    fitter.counter = counter
    with pytest.raises(TypeError, match=r"TokenFitter\.fit\(\) counter must be"):
        fitter.fit(iter([1, 2, 3]))


def test_regression_a_refused_counter_is_the_limit_errors_value() -> None:
    """Found by a tester (in other options, then here by grep): LimitError.value held the
    argument's type name, where the errors page says it is what was passed."""
    counter = object()
    with pytest.raises(LimitError) as info:
        fit_tokens(DOCS, max_tokens=10, counter=counter)  # type: ignore[arg-type]
    assert info.value.value is counter
    huge = ["x" * 1000] * 1000  # a list's count() counts occurrences: refused
    with pytest.raises(LimitError) as info:
        fit_tokens(DOCS, max_tokens=10, counter=huge)
    assert info.value.value is huge
    assert len(str(info.value)) < 400  # the message shows a bounded repr


def test_a_limit_errors_message_survives_a_repr_that_raises() -> None:
    class Hostile:
        def __repr__(self) -> str:
            raise RuntimeError("no repr")

    err = LimitError("counter", Hostile(), "must have a count(text) method")
    assert str(err) == "counter=<Hostile object> is invalid: must have a count(text) method"

"""Size-error classification: the real-error corpus, SDK-shaped exceptions, retry helpers."""

from __future__ import annotations

import ast
import asyncio
import contextlib
import json
import re
import threading
from collections.abc import Callable, Iterator
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from pathlib import Path
from types import SimpleNamespace
from typing import Any, cast

import anthropic
import httpx
import httpx2
import openai
import pytest
from botocore.exceptions import ClientError  # type: ignore[import-untyped]
from hypothesis import given, settings
from hypothesis import strategies as st
from pydantic_ai.exceptions import ModelHTTPError

import jsonbudget
from jsonbudget import (
    AmbiguousSizeError,
    OutputCapRetry,
    OutputCapTooLarge,
    PromptTooLong,
    acall_with_output_cap,
    call_with_output_cap,
    classify_size_error,
    next_output_cap,
)
from jsonbudget._agents import classify as classify_module
from jsonbudget._agents.classify import (
    _RULES,
    _WORDING_RULES,
    DEFAULT_FLOOR,
    MAX_SCAN_CHARS,
    _decide,
)
from jsonbudget.errors import LimitError

CORPUS = Path(__file__).parent / "data" / "size_errors.jsonl"
KINDS = {OutputCapTooLarge: "output_cap", PromptTooLong: "prompt", AmbiguousSizeError: "ambiguous"}


def _load() -> list[dict[str, Any]]:
    return [json.loads(line) for line in CORPUS.read_text("utf-8").splitlines() if line.strip()]


SAMPLES = _load()


def _kind(verdict: object) -> str | None:
    return None if verdict is None else KINDS[type(verdict)]


NEEDED_PROVIDERS = (
    "anthropic",
    "openai",
    "openai-responses",
    "openai-completions",
    "openai-embeddings",
    "azure-openai",
    "gemini",
    "vertex",
    "bedrock",
    "mistral",
    "cohere",
    "groq",
    "xai",
    "deepseek",
    "dashscope",
    "moonshot",
    "zhipu",
    "openrouter",
    "together",
    "fireworks",
    "cerebras",
    "vllm",
    "tgi",
    "llama.cpp",
    "llama-cpp-python",
    "lm-studio",
    "ollama",
    "sglang",
)


def test_corpus_is_large_real_and_sourced() -> None:
    assert len(SAMPLES) >= 150
    constructed = [s for s in SAMPLES if s.get("constructed") is True]
    assert len(constructed) <= 5
    for sample in SAMPLES:
        # A row is constructed exactly when it says so twice; every other row has a source.
        assert (sample["source"] == "constructed") == (sample.get("constructed") is True)
        if sample not in constructed:
            assert re.match(r"https://", sample["source"]), sample["source"]
    providers = {s["provider"].split(" ")[0] for s in SAMPLES if s not in constructed}
    assert set(NEEDED_PROVIDERS) <= providers, set(NEEDED_PROVIDERS) - providers


def test_every_rule_decides_some_corpus_row() -> None:
    decided = {_decide(sample["input"], None, None)[0] for sample in SAMPLES}
    rules = {rule.name for rule in (*_RULES, *_WORDING_RULES)}
    assert rules <= decided, rules - decided
    assert len(rules) == len(_RULES) + len(_WORDING_RULES)  # names are unique


@pytest.mark.parametrize(
    "sample", SAMPLES, ids=[f"{i}-{s['provider']}" for i, s in enumerate(SAMPLES)]
)
def test_corpus_sample(sample: dict[str, Any]) -> None:
    verdict = classify_size_error(sample["input"])
    expected = sample["expected"]
    assert _kind(verdict) == expected["kind"]
    for field, value in expected.items():
        if field != "kind":
            assert getattr(verdict, field) == value, field


def test_every_decisive_output_cap_sample_has_exact_available() -> None:
    decisive = [s for s in SAMPLES if s["expected"]["kind"] == "output_cap"]
    assert len(decisive) >= 15
    for sample in decisive:
        verdict = classify_size_error(sample["input"])
        assert isinstance(verdict, OutputCapTooLarge)
        assert verdict.available == sample["expected"]["available"]
        if verdict.window is not None and verdict.input_tokens is not None:
            assert verdict.available == verdict.window - verdict.input_tokens


def test_codes_and_params_do_not_decide() -> None:
    # NextChat#3195: param "messages" and code context_length_exceeded, yet 64 input
    # tokens of 8192 means the 8192-token cap is what does not fit.
    body = {
        "error": {
            "message": "This model's maximum context length is 8192 tokens. However, you "
            "requested 8256 tokens (64 in the messages, 8192 in the completion).",
            "param": "messages",
            "code": "context_length_exceeded",
        }
    }
    verdict = classify_size_error(body)
    assert verdict == OutputCapTooLarge(
        requested=8192, available=8128, window=8192, provider="openai", input_tokens=64
    )


_SGLANG = (
    "Requested token count exceeds the model's maximum context length of 262144 tokens. "
    "You requested a total of {total} tokens: {inputs} tokens from the input messages and "
    "{cap} tokens for the completion. Please reduce the number of tokens in the input "
    "messages or the completion to fit within the limit."
)


def test_regression_sglang_wording_is_decided_by_its_numbers() -> None:
    """Regression: SGLang's (and vLLM behind some gateways') wording gave None, though
    its numbers decide: "length of" for "length is", ": A tokens from the input messages
    and C tokens for the completion" for OpenAI's parenthesised breakdown."""
    cap_too_large = _SGLANG.format(total=267042, inputs=201506, cap=65536)
    assert classify_size_error(cap_too_large) == OutputCapTooLarge(
        requested=65536, available=60638, window=262144, provider="openai", input_tokens=201506
    )
    prompt = _SGLANG.format(total=270000, inputs=266000, cap=4000)
    assert classify_size_error(prompt) == PromptTooLong(
        prompt_tokens=266000, limit=262144, provider="openai"
    )


# -- SDK-shaped exceptions (duck-typed; these mimic the attributes the SDKs set) ---------

MSG = (
    "input length and `max_tokens` exceed context limit: 197202 + 21333 > 200000, "
    "decrease input length or `max_tokens` and try again"
)


class AnthropicStyleError(Exception):
    def __init__(self) -> None:
        super().__init__("Error code: 400")
        self.status_code = 400
        self.body = {"type": "error", "error": {"type": "invalid_request_error", "message": MSG}}
        self.message = "Error code: 400"


class OpenAIStyleError(Exception):
    """openai's APIStatusError: ``body`` is the inner error object, ``message`` its text."""

    def __init__(self, message: str) -> None:
        super().__init__(f"Error code: 400 - {{'error': {{'message': {message!r}}}}}")
        self.status_code = 400
        self.body = {"message": message, "type": "invalid_request_error", "code": None}
        self.code = None


class FakeResponse:
    def __init__(self, text: str, *, is_json: bool) -> None:
        self.text = text
        self._is_json = is_json

    def json(self) -> Any:
        if not self._is_json:
            raise ValueError("not JSON")
        return json.loads(self.text)


class HttpxStyleError(Exception):
    def __init__(self, response: FakeResponse) -> None:
        super().__init__("Client error '400 Bad Request'")
        self.response = response


class BotocoreStyleError(Exception):
    def __init__(self, message: str) -> None:
        super().__init__(f"An error occurred (ValidationException): {message}")
        self.response = {"Error": {"Code": "ValidationException", "Message": message}}


class GenaiStyleError(Exception):
    def __init__(self) -> None:
        message = (
            "The input token count (1200293) exceeds the maximum number of tokens "
            "allowed (1048576)."
        )
        super().__init__(f"400 INVALID_ARGUMENT. {message}")
        self.code = 400
        self.status = "INVALID_ARGUMENT"
        self.message = message
        self.details = {"error": {"code": 400, "message": message}}


@pytest.mark.parametrize("window", ["1000000000000", "12345678901234567", "1,000,000,0000"])
def test_regression_a_number_too_long_to_read_is_not_read_in_part(window: str) -> None:
    # Found by a tester: 13 digits matched their first 12, a window ten times too small.
    text = f"input length and `max_tokens` exceed context limit: 197202 + 21333 > {window}"
    verdict = classify_size_error(text)
    assert verdict is None or getattr(verdict, "window", None) is None
    # The same message with a number it can read is decided by its arithmetic.
    decided = classify_size_error(text.replace(window, "200000"))
    assert isinstance(decided, OutputCapTooLarge)
    assert (decided.window, decided.available) == (200_000, 2_798)


def test_anthropic_style_exception() -> None:
    verdict = classify_size_error(AnthropicStyleError())
    assert verdict == OutputCapTooLarge(
        requested=21333, available=2798, window=200000, provider="anthropic", input_tokens=197202
    )


def test_openai_style_exception_prompt() -> None:
    error = OpenAIStyleError(
        "This model's maximum context length is 128000 tokens. However, your messages "
        "resulted in 192041 tokens. Please reduce the length of the messages."
    )
    assert classify_size_error(error) == PromptTooLong(
        prompt_tokens=192041, limit=128000, provider="openai"
    )


def test_response_json_and_text_fallback() -> None:
    body = json.dumps({"error": {"message": MSG}})
    verdict = classify_size_error(HttpxStyleError(FakeResponse(body, is_json=True)))
    assert isinstance(verdict, OutputCapTooLarge)
    assert verdict.available == 2798
    verdict = classify_size_error(HttpxStyleError(FakeResponse("oops " + MSG, is_json=False)))
    assert isinstance(verdict, OutputCapTooLarge)
    assert verdict.available == 2798


def test_botocore_style_response_dict() -> None:
    verdict = classify_size_error(BotocoreStyleError("Input is too long for requested model."))
    assert verdict == PromptTooLong(prompt_tokens=None, limit=None, provider="bedrock")
    capped = classify_size_error(
        BotocoreStyleError("The maximum tokens you requested exceeds the model limit of 4096."),
        requested=8192,
    )
    assert capped == OutputCapTooLarge(
        requested=8192, available=4096, window=None, provider="bedrock"
    )


def test_genai_style_details() -> None:
    verdict = classify_size_error(GenaiStyleError())
    assert verdict == PromptTooLong(prompt_tokens=1200293, limit=1048576, provider="gemini")


def test_requested_decides_a_total_only_message() -> None:
    text = (
        "too many tokens: total number of tokens (prompt and prediction) cannot exceed "
        "4096 - received 5000. Try using a shorter prompt or a smaller max_tokens value."
    )
    assert isinstance(classify_size_error(text), AmbiguousSizeError)
    assert classify_size_error(text, requested=2000) == OutputCapTooLarge(
        requested=2000, available=1096, window=4096, provider="cohere", input_tokens=3000
    )
    assert classify_size_error(text, requested=500) == PromptTooLong(
        prompt_tokens=4500, limit=4096, provider="cohere"
    )


def test_provider_override_and_413() -> None:
    verdict = classify_size_error("prompt is too long: 5 tokens > 4 maximum", provider="mine")
    assert isinstance(verdict, PromptTooLong)
    assert verdict.provider == "mine"

    class TooLarge(Exception):
        status_code = 413

    assert classify_size_error(TooLarge("Request Entity Too Large")) == PromptTooLong(None, None)


@pytest.mark.parametrize(
    "text",
    ["", "Rate limit reached", "Internal server error", "invalid api key", "tokens > maximum"],
)
def test_not_size_errors(text: str) -> None:
    assert classify_size_error(text) is None


def test_regression_rate_limit_with_token_words_is_not_a_size_error() -> None:
    text = "Rate limit reached: too many tokens per minute for this model's context length"
    assert classify_size_error(text) is None


def test_size_message_beyond_scan_cap_is_not_read() -> None:
    text = "x" * (MAX_SCAN_CHARS + 10) + " prompt is too long: 5 tokens > 4 maximum"
    assert classify_size_error(text) is None


def test_regression_hostile_input_scans_in_bounded_time() -> None:
    # Long runs that partially match patterns; bounded regexes keep this linear.
    nasty = (
        "This model's maximum context length is 1 tokens. However, you requested (" * 800
        + "9" * 5000
        + " in the messages, " * 500
    )
    assert classify_size_error(nasty) == AmbiguousSizeError(wording="either", limit=1)
    deep: dict[str, Any] = {"message": MSG}
    for _ in range(10_000):
        deep = {"error": deep}
    assert classify_size_error(deep) is None  # deeper than the walk goes: not read


@settings(max_examples=60, deadline=None)
@given(
    window=st.integers(min_value=2, max_value=2_000_000),
    data=st.data(),
)
def test_arithmetic_property_openai_wording(window: int, data: st.DataObject) -> None:
    inputs = data.draw(st.integers(min_value=1, max_value=3 * window))
    cap = data.draw(st.integers(min_value=1, max_value=window))
    text = (
        f"This model's maximum context length is {window} tokens. However, you requested "
        f"{inputs + cap} tokens ({inputs} in the messages, {cap} in the completion)."
    )
    verdict = classify_size_error(text)
    if inputs < window:
        assert verdict == OutputCapTooLarge(
            requested=cap,
            available=window - inputs,
            window=window,
            provider="openai",
            input_tokens=inputs,
        )
    else:
        assert verdict == PromptTooLong(prompt_tokens=inputs, limit=window, provider="openai")


@settings(max_examples=60, deadline=None)
@given(window=st.integers(min_value=2, max_value=2_000_000), data=st.data())
def test_arithmetic_property_anthropic_wording(window: int, data: st.DataObject) -> None:
    inputs = data.draw(st.integers(min_value=1, max_value=2 * window))
    cap = data.draw(st.integers(min_value=1, max_value=window))
    text = f"input length and `max_tokens` exceed context limit: {inputs} + {cap} > {window}"
    verdict = classify_size_error(text)
    if inputs < window:
        assert isinstance(verdict, OutputCapTooLarge)
        assert verdict.available == window - inputs
    else:
        assert isinstance(verdict, PromptTooLong)


@settings(max_examples=100, deadline=None)
@given(st.text(max_size=300) | st.binary(max_size=300).map(lambda b: b.decode("latin-1")))
def test_arbitrary_text_never_crashes(text: str) -> None:
    verdict = classify_size_error(text)
    assert verdict is None or type(verdict) in KINDS


# -- hostile error objects: reading never raises ------------------------------------------

RAISABLE: tuple[type[Exception], ...] = (
    ValueError,
    TypeError,
    KeyError,
    AttributeError,
    RuntimeError,
    RecursionError,
    UnicodeDecodeError,
    NotImplementedError,
)


def _raiser(kind: type[Exception]) -> Any:
    def fail(*_args: object, **_kwargs: object) -> Any:
        if kind is UnicodeDecodeError:
            raise UnicodeDecodeError("utf-8", b"\xff", 0, 1, "hostile")
        raise kind("hostile")

    return fail


class RaisingItems(dict[str, object]):
    """A Mapping whose walk raises."""

    def items(self) -> Any:
        raise TypeError("no items")


class RaisingStr(str):
    __slots__ = ()

    def __getitem__(self, key: object) -> Any:
        raise IndexError("no slicing")

    def lower(self) -> Any:
        raise ValueError("no lower")


def _cyclic() -> dict[str, object]:
    body: dict[str, object] = {"message": "prompt is too long: 5 tokens > 4 maximum"}
    body["error"] = body
    body["list"] = [body, [body]]
    return body


def _hostile_values(kind: type[Exception]) -> st.SearchStrategy[object]:
    fail = _raiser(kind)
    bad_response = type(
        "BadResponse", (), {"json": fail, "text": property(fail), "content": property(fail)}
    )()
    wide = {f"k{i}": {f"j{j}": "x" for j in range(100)} for i in range(100)}
    return st.sampled_from(
        [
            None,
            _cyclic(),
            RaisingItems(message="x"),
            RaisingStr("input length and `max_tokens` exceed context limit: 1 + 2 > 3"),
            "x" * (4 * MAX_SCAN_CHARS),
            b"prompt is too long: 5 tokens > 4 maximum" * 3,
            bytearray(b"\xff\xfe" * 1000),
            bad_response,
            wide,
            [[[[[[[["deep"]]]]]]]],
            12,
            object(),
        ]
    )


@st.composite
def hostile_errors(draw: st.DrawFn) -> object:
    kind = draw(st.sampled_from(RAISABLE))
    fail = _raiser(kind)
    namespace: dict[str, object] = {}
    for attribute in (
        "body",
        "details",
        "response",
        "message",
        "code",
        "status",
        "status_code",
        "http_status",
        "args",
    ):
        choice = draw(st.sampled_from(["absent", "raises", "value"]))
        if choice == "raises":
            namespace[attribute] = property(fail)
        elif choice == "value":
            namespace[attribute] = draw(_hostile_values(kind))
    for dunder in ("__str__", "__repr__", "__getattr__"):
        if draw(st.booleans()):
            namespace[dunder] = fail
    if draw(st.booleans()):
        namespace["__class__"] = property(fail)
    base: type = draw(st.sampled_from([Exception, object, dict]))
    if base is dict and "args" in namespace:
        del namespace["args"]
    cls = type("Hostile", (base,), namespace)
    module = draw(st.sampled_from(["anthropic._exceptions", None, 42, "", "botocore"]))
    cls.__module__ = module  # type: ignore[assignment]
    try:
        error = cls()
    except Exception:  # noqa: BLE001 - a class whose construction fails is not interesting
        error = Exception("Input is too long for requested model.")
    if issubclass(type(error), BaseException) and draw(st.booleans()):
        # A __cause__ loop through a second hostile exception.
        other = Exception("prompt is too long: 9 tokens > 8 maximum")
        hostile = cast(BaseException, error)
        hostile.__cause__ = other
        other.__cause__ = hostile
        hostile.__context__ = other
    return error


@settings(max_examples=300, deadline=None)
@given(error=hostile_errors(), requested=st.none() | st.integers(1, 10**6))
def test_hostile_error_objects_never_raise(error: object, requested: int | None) -> None:
    verdict = classify_size_error(error, requested=requested)
    assert verdict is None or type(verdict) in KINDS
    # The retry helpers read the same way: a hostile error is re-raised, never replaced.
    if issubclass(type(error), BaseException):
        raised = cast(BaseException, error)

        def call(cap: int) -> str:
            raise raised

        with pytest.raises(type(raised)) as info:
            call_with_output_cap(call, max_output_tokens=1000, attempts=2, floor=1)
        assert info.value is error


def test_hostile_values_still_give_a_verdict_when_readable() -> None:
    # Guarding must not blind the reader: a readable message beside raising parts decides.
    class Partly(Exception):
        body = property(_raiser(RuntimeError))

        def __str__(self) -> str:
            return "prompt is too long: 219898 tokens > 200000 maximum"

    assert classify_size_error(Partly()) == PromptTooLong(219898, 200000, "anthropic")

    class NoStr(Exception):
        __str__ = _raiser(ValueError)
        __repr__ = _raiser(ValueError)

    # str() and repr() both raise: the constructor arguments are read instead.
    assert classify_size_error(NoStr("Requested 416735 tokens, max 300000 tokens per request")) == (
        PromptTooLong(416735, 300000, "openai")
    )
    assert classify_size_error(_cyclic()) == PromptTooLong(5, 4, "anthropic")
    assert classify_size_error(b"prompt is too long: 5 tokens > 4 maximum") == PromptTooLong(
        5, 4, "anthropic"
    )


def test_cause_chain_is_read_and_loops_end() -> None:
    inner = AnthropicStyleError()
    outer = RuntimeError("agent step failed")
    outer.__cause__ = inner
    inner.__cause__ = outer  # a loop
    verdict = classify_size_error(outer)
    assert isinstance(verdict, OutputCapTooLarge)
    assert verdict.available == 2798


# -- real SDK and httpx objects ---------------------------------------------------------


def test_httpx_unread_streamed_response_does_not_raise() -> None:
    request = httpx.Request("POST", "https://api.example.invalid/v1/messages")
    body = json.dumps({"error": {"message": MSG}}).encode()

    def streamed(status: int) -> Any:
        response = httpx.Response(status, request=request, stream=httpx.ByteStream(body))
        with pytest.raises(httpx.ResponseNotRead):
            _ = response.text  # the stream was never read: this is what the SDKs hit
        return httpx.HTTPStatusError("error", request=request, response=response)

    # The body cannot be read without consuming the stream, so nothing decides...
    assert classify_size_error(streamed(400)) is None
    # ...except the status, which httpx keeps on the response only.
    assert classify_size_error(streamed(413)) == PromptTooLong(None, None)
    read = httpx.Response(400, request=request, content=body)
    error = httpx.HTTPStatusError("error", request=request, response=read)
    verdict = classify_size_error(error)
    assert isinstance(verdict, OutputCapTooLarge)
    assert verdict.available == 2798


def test_real_anthropic_and_openai_exceptions() -> None:
    # The SDKs build on httpx2 (httpx's successor package), so their errors carry its types.
    request = httpx2.Request("POST", "https://api.example.invalid/v1")
    response = httpx2.Response(400, request=request)
    a_error = anthropic.BadRequestError(
        "Error code: 400",
        response=response,
        body={"type": "error", "error": {"type": "invalid_request_error", "message": MSG}},
    )
    assert classify_size_error(a_error) == OutputCapTooLarge(
        requested=21333, available=2798, window=200000, provider="anthropic", input_tokens=197202
    )
    o_error = openai.BadRequestError(
        "Error code: 400",
        response=response,
        body={
            "message": "Invalid max_tokens value, the valid range of max_tokens is [1, 8192]",
            "type": "invalid_request_error",
            "param": None,
            "code": "invalid_request_error",
        },
    )
    # The SDK names the provider: DeepSeek is reached through openai's client.
    assert classify_size_error(o_error, requested=16000) == OutputCapTooLarge(
        requested=16000, available=8192, window=None, provider="openai"
    )


# -- policy details -----------------------------------------------------------------------


def test_input_wording_is_the_prompt_unless_the_cap_is_named_too() -> None:
    assert classify_size_error("Input is too long for requested model.") == PromptTooLong(
        None, None, "bedrock"
    )
    both = "Input is too long for requested model; lower max_tokens or the input."
    assert classify_size_error(both) == AmbiguousSizeError(provider="bedrock", wording="prompt")


def test_vllm_zero_output_tokens_and_prompt_over_window() -> None:
    text = (
        "This model's maximum context length is 32768 tokens. However, you requested 0 output "
        "tokens and your prompt contains 40000 input tokens, for a total of 40000 tokens."
    )
    assert classify_size_error(text) == PromptTooLong(40000, 32768, "vllm")
    room = text.replace("0 output", "9000 output").replace("40000 input", "30000 input")
    assert classify_size_error(room) == OutputCapTooLarge(9000, 2768, 32768, "vllm", 30000)


def test_totals_with_the_cap_decide_once_requested_is_known() -> None:
    text = "Invalid request: Your request exceeded model token limit: 8192 (requested: 9000)"
    assert classify_size_error(text) == AmbiguousSizeError("moonshot", "either", 8192, 9000)
    assert classify_size_error(text, requested=4000) == OutputCapTooLarge(
        4000, 3192, 8192, "moonshot", 5000
    )


def test_retry_compresses_for_input_only_wording() -> None:
    class Bedrock(Exception):
        pass

    prompts = [1]

    def call(cap: int) -> str:
        if prompts[-1]:
            raise Bedrock(
                "The model returned the following errors: Input is too long for requested model."
            )
        return f"ok:{cap}"

    compressions: list[PromptTooLong] = []

    def compress(verdict: PromptTooLong) -> None:
        compressions.append(verdict)
        prompts.append(0)

    assert call_with_output_cap(call, max_output_tokens=500, compress_prompt=compress) == "ok:500"
    assert compressions == [PromptTooLong(None, None, "bedrock")]


# -- next_output_cap ------------------------------------------------------------------


def test_next_output_cap_uses_available() -> None:
    verdict = OutputCapTooLarge(requested=8192, available=2798, window=200000)
    assert next_output_cap(8192, verdict) == 2798
    assert next_output_cap(8192, MSG) == 2798  # from the raw error text


def test_next_output_cap_halves_when_unknown_and_respects_floor() -> None:
    unknown = OutputCapTooLarge(requested=None, available=None, window=None)
    assert next_output_cap(8192, unknown) == 4096
    assert next_output_cap(400, unknown) == DEFAULT_FLOOR
    with pytest.raises(LimitError):
        next_output_cap(DEFAULT_FLOOR, unknown)
    with pytest.raises(LimitError):
        next_output_cap(8192, OutputCapTooLarge(requested=8192, available=10, window=100))
    assert next_output_cap(8192, OutputCapTooLarge(8192, 10, 100), floor=1) == 10


def test_next_output_cap_refuses_other_verdicts() -> None:
    with pytest.raises(LimitError, match="not an output-cap error"):
        next_output_cap(1000, PromptTooLong(prompt_tokens=10, limit=5))
    with pytest.raises(LimitError):
        next_output_cap(1000, "some unrelated failure")
    with pytest.raises(LimitError):
        next_output_cap(0, OutputCapTooLarge(None, None, None))


# -- retry helpers against a fake provider --------------------------------------------


class FakeProvider:
    """A plain callable standing in for a model API: it raises the size errors a real
    one would, from a context window, a prompt size and its own output maximum."""

    def __init__(self, *, window: int, prompt: int, style: str = "anthropic") -> None:
        self.window = window
        self.prompt = prompt
        self.style = style
        self.caps: list[int] = []
        self.prompts: list[int] = []

    def __call__(self, cap: int) -> str:
        self.caps.append(cap)
        self.prompts.append(self.prompt)
        if self.prompt >= self.window:
            raise OpenAIStyleError(
                f"prompt is too long: {self.prompt} tokens > {self.window} maximum"
            )
        if self.prompt + cap > self.window:
            if self.style == "vague":
                raise OpenAIStyleError("Please reduce the length of the messages or completion.")
            raise OpenAIStyleError(
                f"input length and `max_tokens` exceed context limit: {self.prompt} + {cap} > "
                f"{self.window}, decrease input length or `max_tokens` and try again"
            )
        return f"ok:{cap}"

    async def acall(self, cap: int) -> str:
        return self(cap)


def test_retry_shrinks_cap_and_never_compresses_for_cap_errors() -> None:
    provider = FakeProvider(window=200_000, prompt=197_202)
    compressions: list[PromptTooLong] = []
    result = call_with_output_cap(
        provider, max_output_tokens=21_333, compress_prompt=compressions.append
    )
    assert result == "ok:2798"
    assert provider.caps == [21_333, 2798]
    assert compressions == []


def test_retry_compresses_only_for_prompt_errors() -> None:
    provider = FakeProvider(window=1000, prompt=1500)

    def compress(verdict: PromptTooLong) -> None:
        assert verdict.prompt_tokens == 1500
        assert verdict.limit == 1000
        provider.prompt = 600

    result = call_with_output_cap(provider, max_output_tokens=300, compress_prompt=compress)
    assert result == "ok:300"
    assert provider.caps == [300, 300]  # the cap was not touched for a prompt error


def test_retry_without_compressor_reraises_prompt_error_unchanged() -> None:
    provider = FakeProvider(window=1000, prompt=1500)
    with pytest.raises(OpenAIStyleError) as info:
        call_with_output_cap(provider, max_output_tokens=300)
    message = info.value.body["message"]
    assert message is not None
    assert "prompt is too long" in message
    assert provider.caps == [300]


def test_retry_reraises_unrelated_errors_unchanged() -> None:
    boom = KeyError("not a size error")

    def call(cap: int) -> str:
        raise boom

    with pytest.raises(KeyError) as info:
        call_with_output_cap(call, max_output_tokens=100)
    assert info.value is boom


def test_retry_gives_up_after_attempts() -> None:
    provider = FakeProvider(window=1000, prompt=900, style="vague")
    with pytest.raises(OpenAIStyleError):
        call_with_output_cap(
            provider, max_output_tokens=4096, attempts=3, on_ambiguous="shrink_cap", floor=1
        )
    assert provider.caps == [4096, 2048, 1024]


def test_retry_ambiguous_raises_by_default() -> None:
    provider = FakeProvider(window=1000, prompt=900, style="vague")
    with pytest.raises(OpenAIStyleError):
        call_with_output_cap(provider, max_output_tokens=4096)
    assert provider.caps == [4096]


def test_retry_stops_at_floor() -> None:
    provider = FakeProvider(window=1000, prompt=999)
    with pytest.raises(OpenAIStyleError):
        call_with_output_cap(provider, max_output_tokens=500, attempts=5)  # available 1 < floor
    assert provider.caps == [500]


def test_retry_validates_options() -> None:
    with pytest.raises(LimitError):
        OutputCapRetry(attempts=0)
    with pytest.raises(LimitError):
        OutputCapRetry(floor=0)
    with pytest.raises(LimitError):
        OutputCapRetry(on_ambiguous="guess")  # type: ignore[arg-type]
    with pytest.raises(LimitError):
        call_with_output_cap(lambda cap: cap, max_output_tokens=0)


async def test_async_retry_shrinks_cap_and_awaits_async_compressor() -> None:
    provider = FakeProvider(window=200_000, prompt=197_202)
    assert await acall_with_output_cap(provider.acall, max_output_tokens=21_333) == "ok:2798"

    big = FakeProvider(window=1000, prompt=1500)
    calls: list[int] = []

    async def compress(verdict: PromptTooLong) -> None:
        calls.append(verdict.limit or 0)
        big.prompt = 100

    retry = OutputCapRetry(attempts=2)
    assert await retry.acall(big.acall, max_output_tokens=50, compress_prompt=compress) == "ok:50"
    assert calls == [1000]


# -- the docs' policy table is the code's ------------------------------------------------

DOCS = Path(__file__).parent.parent / "docs" / "size-errors.md"
_ROW = re.compile(r"^\| [^|]+ \| `(?P<example>[^`]+)` \| `(?P<verdict>[^`]+)` \|$")
_VERDICT = re.compile(r"^(?P<name>\w+)(?:\((?P<fields>.*)\))?$")


def _policy_rows() -> list[tuple[str, str]]:
    text = DOCS.read_text("utf-8")
    table = text.split("## Decision policy", 1)[1].split("\n## ", 1)[0]
    rows = []
    for line in table.splitlines():
        m = _ROW.match(line)
        if m is not None:
            rows.append((m.group("example"), m.group("verdict")))
    return rows


def test_docs_policy_table_matches_the_code() -> None:
    rows = _policy_rows()
    assert len(rows) >= 9  # every row of the table but the status-only one
    for example, expected in rows:
        verdict = classify_size_error(example)
        m = _VERDICT.match(expected)
        assert m is not None, expected
        if m.group("name") == "None":
            assert verdict is None, example
            continue
        assert type(verdict).__name__ == m.group("name"), example
        for part in filter(None, (m.group("fields") or "").split(", ")):
            field, _, value = part.partition("=")
            assert getattr(verdict, field) == ast.literal_eval(value), (example, field)


# -- regressions: a quota sent as 413, OpenAI's integer above maximum ----------------------

GROQ_TPM_BODY = {
    "error": {
        "message": "Request too large for model `llama3-70b-8192` in organization "
        "`org_01hw8f0aa0ekmrn70ffm2zkdv1` on tokens per minute (TPM): Limit 6000, Requested "
        "7000, please reduce your message size and try again. Visit "
        "https://console.groq.com/docs/rate-limits for more information.",
        "type": "tokens",
        "code": "rate_limit_exceeded",
    }
}


def _groq_413(body: dict[str, Any]) -> openai.APIStatusError:
    # Groq's API is OpenAI-compatible; its 413 through openai's client, as agents meet it.
    request = httpx2.Request("POST", "https://api.groq.com/openai/v1/chat/completions")
    response = httpx2.Response(413, request=request, json=body)
    return openai.APIStatusError(f"Error code: 413 - {body!r}", response=response, body=body)


def test_groq_tokens_per_minute_413_is_not_prompt_too_long() -> None:
    """Regression: the 413 fallback had no rate-limit check: a quota became PromptTooLong."""
    error = _groq_413(GROQ_TPM_BODY)
    assert error.status_code == 413
    assert classify_size_error(error) is None
    assert classify_size_error(error, requested=4000) is None
    assert _decide(error, None, None) == (None, None)

    # The code alone marks the rate limit too, whatever the message says.
    coded = {"error": {"message": "Request too large", "code": "rate_limit_exceeded"}}
    assert classify_size_error(_groq_413(coded)) is None

    def call(cap: int) -> str:
        raise error

    # Not a size error: re-raised unchanged, the prompt never compressed.
    compressed: list[PromptTooLong] = []
    with pytest.raises(openai.APIStatusError) as info:
        call_with_output_cap(call, max_output_tokens=4000, compress_prompt=compressed.append)
    assert info.value is error
    assert compressed == []


def test_413_without_rate_limit_words_is_still_the_prompt() -> None:
    body = {"error": {"message": "Request Entity Too Large", "type": "invalid_request_error"}}
    assert classify_size_error(_groq_413(body)) == PromptTooLong(None, None, "openai")


@pytest.mark.parametrize("param", ["max_completion_tokens", "max_tokens"])
def test_openai_integer_above_maximum_value_is_an_output_cap(param: str) -> None:
    """Regression: the "." after "maximum value" stopped the rule; this was not matched."""
    message = (
        f"Invalid '{param}': integer above maximum value. Expected a value <= 100000, "
        "but got 200000 instead."
    )
    expected = OutputCapTooLarge(requested=200000, available=100000, window=None)
    assert classify_size_error(message) == expected
    body = {
        "error": {
            "message": message,
            "type": "invalid_request_error",
            "param": param,
            "code": "integer_above_max_value",
        }
    }
    assert _decide(body, None, None) == ("param_above_max", expected)
    request = httpx2.Request("POST", "https://api.openai.com/v1/chat/completions")
    error = openai.BadRequestError(
        "Error code: 400", response=httpx2.Response(400, request=request), body=body["error"]
    )
    assert classify_size_error(error) == OutputCapTooLarge(
        requested=200000, available=100000, window=None, provider="openai"
    )
    assert next_output_cap(200000, error) == 100000


def _anthropic_cap_error() -> anthropic.BadRequestError:
    body = {"type": "error", "error": {"type": "invalid_request_error", "message":
            "input length and `max_tokens` exceed context limit: 197202 + 21333 > 200000, "
            "decrease input length or `max_tokens` and try again"}}  # fmt: skip
    request = httpx2.Request("POST", "https://api.anthropic.com/v1/messages")
    response = httpx2.Response(400, json=body, request=request)
    return anthropic.BadRequestError(f"Error code: 400 - {body}", response=response, body=body)


def _openai_prompt_error() -> openai.BadRequestError:
    error = {"message": "This model's maximum context length is 128000 tokens. However, your "
             "messages resulted in 197202 tokens. Please reduce the length of the messages.",
             "type": "invalid_request_error", "param": "messages",
             "code": "context_length_exceeded"}  # fmt: skip
    request = httpx2.Request("POST", "https://api.openai.com/v1/chat/completions")
    response = httpx2.Response(400, json={"error": error}, request=request)
    return openai.BadRequestError(f"Error code: 400 - {error}", response=response, body=error)


def test_regression_the_raised_error_decides_before_those_it_was_raised_during() -> None:
    """A fallback call's PromptTooLong raised while handling the first provider's
    OutputCapTooLarge was read as the older error (every link's text joined, rules in
    rule order): OutputCapTooLarge, provider anthropic, and a smaller cap was tried."""
    try:
        try:
            raise _anthropic_cap_error()
        except anthropic.BadRequestError:
            raise _openai_prompt_error()  # noqa: B904 - raised during, as a fallback is
    except openai.BadRequestError as raised:
        verdict = classify_size_error(raised)
    assert verdict == PromptTooLong(prompt_tokens=197202, limit=128000, provider="openai")
    # The older error alone is still what it is.
    cap = classify_size_error(_anthropic_cap_error())
    assert isinstance(cap, OutputCapTooLarge)
    assert cap.provider == "anthropic"


@pytest.mark.parametrize(
    ("url", "message"),
    [
        (
            "http://127.0.0.1:11434/v1/chat/completions",
            "the input length exceeds the context length",
        ),
        ("https://gw.example/v1/completions", "Input is too long for requested model."),
    ],
)
def test_regression_a_request_url_is_no_wording(url: str, message: str) -> None:
    # httpx's HTTPStatusError names the URL: "completions" in it was read as the
    # provider's word for the output, and prompt errors came back ambiguous.
    request = httpx.Request("POST", url)
    response = httpx.Response(400, text=message, request=request)
    error = httpx.HTTPStatusError(
        f"Client error '400 Bad Request' for url '{url}'", request=request, response=response
    )
    assert isinstance(classify_size_error(error), PromptTooLong)


def test_regression_a_per_day_token_quota_is_no_size_error() -> None:
    # Groq's 413 "... on tokens per day (TPD)" was taken for a request too large.
    request = httpx.Request("POST", "https://api.groq.com/openai/v1/chat/completions")
    text = ("Request too large for model `llama-3.3-70b-versatile` on tokens per day (TPD): "
            "Limit 100000, Used 99000, Requested 2000.")  # fmt: skip
    response = httpx.Response(413, text=text, request=request)
    error = httpx.HTTPStatusError(text, request=request, response=response)
    assert classify_size_error(error) is None


def test_regression_a_body_given_as_text_or_bytes_is_read_as_its_json() -> None:
    # A Go gateway writes ">" as \u003e: a body given as bytes or text was read raw, so
    # "197202 + 21333 \u003e 200000" decided nothing, where the same body as a dict did.
    body = {"type": "error", "error": {"type": "invalid_request_error", "message": (
        "input length and `max_tokens` exceed context limit: 197202 + 21333 > 200000, "
        "decrease input length or `max_tokens` and try again")}}  # fmt: skip
    escaped = json.dumps(body).replace(">", "\\u003e")
    assert "\\u003e" in escaped
    expected = classify_size_error(body)
    assert isinstance(expected, OutputCapTooLarge)
    assert classify_size_error(escaped) == expected
    assert classify_size_error(escaped.encode()) == expected


def test_regression_a_range_without_a_space_is_read_as_two_numbers() -> None:
    # Found by a tester: "[1,8192]" read no number (none is read right after "digit,",
    # which keeps "8,192" whole), so the message gave no verdict; "[1, 8192]" did.
    spaced = classify_size_error("Range of max_tokens should be [1, 8192]")
    assert isinstance(spaced, OutputCapTooLarge)
    assert spaced.available == 8192
    assert classify_size_error("Range of max_tokens should be [1,8192]") == spaced


# -- regressions: a bare status is the weakest evidence in a chain --------------------------


def _client_error(
    client: anthropic.Anthropic | openai.OpenAI, url: str, status: int, body: dict[str, Any]
) -> anthropic.APIStatusError | openai.APIStatusError:
    # Built as the clients build them from a response, so str(), body and status are real.
    response = httpx2.Response(status, json=body, request=httpx2.Request("POST", url))
    return client._make_status_error_from_response(response)


def _groq_client_413(message: str, **fields: str) -> openai.APIStatusError:
    client = openai.OpenAI(api_key="k", base_url="https://api.groq.com/openai/v1")
    body = {"error": {"message": message, **fields}}
    error = _client_error(client, "https://api.groq.com/openai/v1/chat/completions", 413, body)
    assert isinstance(error, openai.APIStatusError)
    return error


class UpstreamError(Exception):
    """A user's own wrapper that keeps only the status of what it wraps."""

    def __init__(self, status_code: int) -> None:
        super().__init__(f"upstream returned HTTP {status_code}")
        self.status_code = status_code


def _raised_from(
    error: anthropic.APIStatusError | openai.APIStatusError,
    wrap: Callable[[anthropic.APIStatusError | openai.APIStatusError], Exception],
) -> Exception:
    try:
        try:
            raise error
        except (anthropic.APIStatusError, openai.APIStatusError) as inner:
            raise wrap(inner) from inner
    except Exception as outer:  # noqa: BLE001 - whichever wrapper it was
        return outer
    raise AssertionError("unreachable")  # pragma: no cover


def _status_only(error: anthropic.APIStatusError | openai.APIStatusError) -> list[Exception]:
    """*error* raised from, under wrappers that keep only its status."""
    return [
        _raised_from(error, lambda e: ModelHTTPError(e.status_code, "m", body=None)),
        _raised_from(error, lambda e: UpstreamError(e.status_code)),
    ]


def test_regression_a_status_only_413_wrapper_does_not_hide_a_rate_limit() -> None:
    """Found by a tester: Groq's per-minute 413 (None alone) raised from under a wrapper
    that keeps only the status was PromptTooLong: each link was decided alone first, and
    the wrapper's bare 413 counted as a decision before the quota's words were read."""
    quota = _groq_client_413(GROQ_TPM_BODY["error"]["message"], code="rate_limit_exceeded")
    assert classify_size_error(quota) is None
    for outer in _status_only(quota):
        assert classify_size_error(outer) is None, type(outer)
        assert classify_size_error(outer, requested=4000) is None

        def call(cap: int, outer: Exception = outer) -> str:
            raise outer

        # A quota: re-raised unchanged, the prompt never compressed for it.
        compressed: list[PromptTooLong] = []
        with pytest.raises(type(outer)) as info:
            call_with_output_cap(call, max_output_tokens=4000, compress_prompt=compressed.append)
        assert info.value is outer
        assert compressed == []
    # The code alone marks the quota too, under the wrapper as without it.
    coded = _groq_client_413("Request too large", code="rate_limit_exceeded")
    assert classify_size_error(coded) is None
    assert [classify_size_error(outer) for outer in _status_only(coded)] == [None, None]
    # A 413 that is no quota stays the prompt, wrapped or not, named after the client.
    plain = _groq_client_413("Request Entity Too Large", type="invalid_request_error")
    expected = PromptTooLong(None, None, "openai")
    assert classify_size_error(plain) == expected
    assert [classify_size_error(outer) for outer in _status_only(plain)] == [expected] * 2


def test_regression_a_bare_status_does_not_decide_before_another_links_words() -> None:
    # The same cause: a bare 413 on the raised link decided before any other evidence.
    # A link's words decide first, then a code, then the status.
    message = "input length and `max_tokens` exceed context limit: 197202 + 21333 > 200000"
    body = {"type": "error", "error": {"type": "invalid_request_error", "message": message}}
    url = "https://api.anthropic.com/v1/messages"
    cap = _client_error(anthropic.Anthropic(api_key="k"), url, 413, body)
    expected_cap = OutputCapTooLarge(21333, 2798, 200000, "anthropic", 197202)
    assert classify_size_error(cap) == expected_cap
    assert [classify_size_error(outer) for outer in _status_only(cap)] == [expected_cap] * 2
    coded = _groq_client_413("Request rejected", code="context_length_exceeded")
    vague = AmbiguousSizeError(provider="openai")
    assert classify_size_error(coded) == vague
    assert [classify_size_error(outer) for outer in _status_only(coded)] == [vague] * 2


def test_regression_a_413_re_raised_by_pydantic_ai_names_the_sdk_it_came_from() -> None:
    """Found by a tester: an anthropic 413 re-raised as pydantic-ai does it gave
    provider=None: the wrapper's own status decided, named after the wrapper alone."""
    message = "Request exceeds the maximum allowed number of bytes."
    body = {"type": "error", "error": {"type": "request_too_large", "message": message}}
    url = "https://api.anthropic.com/v1/messages"
    error = _client_error(anthropic.Anthropic(api_key="k"), url, 413, body)
    expected = PromptTooLong(None, None, "anthropic")
    assert classify_size_error(error) == expected
    # As pydantic-ai's AnthropicModel re-raises a status error: the body kept.
    reraised = _raised_from(error, lambda e: ModelHTTPError(e.status_code, "claude-x", body=e.body))
    assert classify_size_error(reraised) == expected
    assert classify_size_error(reraised, provider="bedrock") == PromptTooLong(None, None, "bedrock")
    assert [classify_size_error(outer) for outer in _status_only(error)] == [expected] * 2


# -- regressions: Bedrock's field pointer, Cohere's chat forms, str and bytes subclasses ---


def _bedrock_client_error(message: str) -> Exception:
    # botocore's own exception, as boto3's bedrock-runtime client raises it.
    error = ClientError(
        {
            "Error": {"Code": "ValidationException", "Message": message},
            "ResponseMetadata": {"HTTPStatusCode": 400},
        },
        "InvokeModel",
    )
    return cast(Exception, error)


def test_regression_a_bedrock_schema_error_is_decided_by_the_field_it_names() -> None:
    """Found by a tester: `#/top_k: 501 is not less or equal to 500` was a size error
    (shrink_cap halved the cap for it), `#/max_tokens: ...` stayed ambiguous, and a
    maxLength on a non-prompt string was PromptTooLong (the prompt was compressed)."""
    top_k = _bedrock_client_error(
        "Malformed input request: #/top_k: 501 is not less or equal to 500, please reformat "
        "your input and try again."
    )
    assert classify_size_error(top_k) is None
    caps: list[int] = []

    def call(cap: int) -> str:
        caps.append(cap)
        raise top_k

    with pytest.raises(type(top_k)):
        call_with_output_cap(call, max_output_tokens=8192, on_ambiguous="shrink_cap")
    assert caps == [8192]
    temperature = "Malformed input request: #/temperature: 2 is not less or equal to 1"
    assert classify_size_error(temperature) is None
    cap = _bedrock_client_error(
        "Malformed input request: #/max_tokens: 200000 is not less or equal to 64000, please "
        "reformat your input and try again."
    )
    assert classify_size_error(cap) == OutputCapTooLarge(200000, 64000, None, "bedrock")
    titan = "#/textGenerationConfig/maxTokenCount: 9000 is not less or equal to 8192"
    assert classify_size_error(titan) == OutputCapTooLarge(9000, 8192, None, "bedrock")
    # Two violations: the parameter's says nothing of size, the next match decides.
    both = (
        "Malformed input request: 2 schema violations found: #/top_k: 501 is not less or "
        "equal to 500; #/max_tokens: 9000 is not less or equal to 8192"
    )
    assert classify_size_error(both) == OutputCapTooLarge(9000, 8192, None, "bedrock")
    metadata = _bedrock_client_error(
        "Malformed input request: #/metadata/user_id: expected maxLength: 256, actual: 300, "
        "please reformat your input and try again."
    )
    assert classify_size_error(metadata) is None
    compressed: list[PromptTooLong] = []

    def call_metadata(cap: int) -> str:
        raise metadata

    with pytest.raises(type(metadata)):
        call_with_output_cap(
            call_metadata, max_output_tokens=8192, compress_prompt=compressed.append
        )
    assert compressed == []
    stop = "Malformed input request: #/stop_sequences/0: expected maxLength: 10, actual: 12"
    assert classify_size_error(stop) is None
    text = (
        "Malformed input request: #/messages/0/content/0/text: expected maxLength: 42000, "
        "actual: 46735, please reformat your input and try again."
    )
    assert classify_size_error(_bedrock_client_error(text)) == PromptTooLong(None, None, "bedrock")
    # Without a pointer, as before: which field is not said.
    assert classify_size_error("Malformed input request: 8192 is not less or equal to 8191") == (
        AmbiguousSizeError(None, "either", limit=8191, tokens=8192)
    )


@pytest.mark.parametrize(
    ("message", "expected"),
    [
        # Quansight/ragna#351 (the tester's message), and docs.cohere.com/reference/errors.
        (
            "too many tokens: size limit exceeded by 1502 tokens. Try using shorter or fewer "
            "inputs, or setting prompt_truncation='AUTO'.",
            PromptTooLong(None, None, "cohere"),
        ),
        (
            "too many tokens: size limit exceeded by 713295 tokens. Try using shorter or fewer "
            "inputs. The limit for this model is 288000 tokens.",
            PromptTooLong(1001295, 288000, "cohere"),
        ),
        (
            "too many tokens: minimal context could not be added to prompt (size limit exceeded "
            "by 280 tokens)",
            PromptTooLong(None, None, "cohere"),
        ),
        (
            "too many tokens: multi-hop prompt is too long even after truncation",
            PromptTooLong(None, None, "cohere"),
        ),
        (
            "too many tokens: total number of tokens in the prompt cannot exceed 4081 - received "
            "4292. Try using a shorter prompt, or enabling prompt truncating.",
            PromptTooLong(4292, 4081, "cohere"),
        ),
        # portkey.ai's error library quotes this Cohere wording.
        (
            "Too many tokens: the total number of tokens in the prompt exceeds the limit of "
            "4081. Try using a shorter prompt or enable prompt truncating.",
            PromptTooLong(None, 4081, "cohere"),
        ),
        (
            "too many tokens: max tokens must be less than or equal to 4096, the maximum output "
            "for this model - received 8192.",
            OutputCapTooLarge(8192, 4096, None, "cohere"),
        ),
        (
            "too many tokens: max tokens must be less than or equal to 4096, the maximum output "
            "length for this model - received 1000000.",
            OutputCapTooLarge(1000000, 4096, None, "cohere"),
        ),
    ],
)
def test_regression_cohere_chat_size_errors_are_classified(message: str, expected: object) -> None:
    """Found by a tester: Cohere's chat size error ("size limit exceeded by N tokens")
    and its other "too many tokens:" forms were not size errors."""
    assert classify_size_error(message) == expected
    assert classify_size_error({"message": message, "id": "x"}) == expected
    assert classify_size_error(message, requested=1000) == expected
    # Other wording of an excess is not Cohere's.
    assert classify_size_error("Pipeline size limit exceeded by 3 jobs!") is None


def test_regression_a_str_or_bytes_subclass_error_runs_none_of_its_methods() -> None:
    """Found by a tester: a str or bytes subclass whose lstrip or __len__ raises made
    classify_size_error raise (the JSON check called them on the caller's object)."""

    def boom(*args: object) -> Any:
        raise RuntimeError("boom")

    hostile = {"lstrip": boom, "__len__": boom, "__getitem__": boom, "strip": boom}
    text = '{"error": "prompt is too long: 300 tokens > 200 maximum"}'
    expected = PromptTooLong(300, 200, "anthropic")
    for base, value in ((str, text), (bytes, text.encode()), (bytearray, text.encode())):
        cls = type(f"Hostile{base.__name__}", (base,), hostile)
        assert classify_size_error(cls(value)) == expected, base
    # An object whose __class__ says str, without being one, is not read as one.
    liar = type("Liar", (), {"__class__": property(lambda self: str)})()
    assert classify_size_error(liar) is None


@pytest.mark.parametrize(
    ("param", "verdict"),
    [
        ("tools[0].function.name", None),
        ("messages[2].tool_calls[0].id", None),
        ("user", None),
        ("messages[1].content", AmbiguousSizeError),
        ("input[3]", AmbiguousSizeError),
        ("instructions", AmbiguousSizeError),
    ],
)
def test_regression_string_too_long_on_a_field_with_no_prompt_is_no_size_error(
    param: str, verdict: type | None
) -> None:
    """Found by a tester: OpenAI's string_above_max_length for a tool's name over 64
    characters was an AmbiguousSizeError, so call_with_output_cap halved its cap on
    every attempt for an error no cap fixes. As for Bedrock's schema errors, only a
    field that holds prompt text makes it one."""
    body = {
        "error": {
            "message": f"Invalid '{param}': string too long. Expected a string with maximum "
            "length 64, but got a string with length 80 instead.",
            "type": "invalid_request_error",
            "param": param,
            "code": "string_above_max_length",
        }
    }
    found = classify_size_error(body)
    assert found is None if verdict is None else isinstance(found, verdict), found


# -- regressions: an exception group holds the provider's error ----------------------------


async def _raise_in_task_group(
    *errors: anthropic.BadRequestError,
) -> BaseExceptionGroup[anthropic.BadRequestError]:
    """*errors* raised by parallel tasks of an `asyncio.TaskGroup`, as the group that
    ``except*`` binds."""

    async def call_model(error: anthropic.BadRequestError) -> None:
        raise error

    caught: list[BaseExceptionGroup[anthropic.BadRequestError]] = []
    try:
        async with asyncio.TaskGroup() as group:
            for error in errors:
                group.create_task(call_model(error))
    except* anthropic.BadRequestError as eg:  # the idiomatic catch: eg is a group
        caught.append(eg)
    return caught[0]


async def test_regression_a_size_error_in_an_exception_group_is_read() -> None:
    """Found by a tester: an anthropic context error raised in an asyncio.TaskGroup
    reached the caller as an ExceptionGroup (also what ``except*`` binds), whose own text
    is "unhandled errors in a TaskGroup (1 sub-exception)": the verdict was None, and
    call_with_output_cap re-raised instead of shrinking the cap."""
    alone = classify_size_error(_anthropic_cap_error())
    assert isinstance(alone, OutputCapTooLarge)
    group = await _raise_in_task_group(_anthropic_cap_error())
    assert str(group).startswith("unhandled errors in a TaskGroup")
    assert classify_size_error(group) == alone
    # Nested, and under a wrapper raised from the group.
    nested = BaseExceptionGroup("outer", [ExceptionGroup("inner", [_anthropic_cap_error()])])
    assert classify_size_error(nested) == alone
    outer = RuntimeError("the agent run failed")
    outer.__cause__ = group  # as `raise RuntimeError(...) from group` sets it
    assert classify_size_error(outer) == alone
    # The retry helper shrinks the cap for it.
    caps: list[int] = []

    async def call(cap: int) -> str:
        caps.append(cap)
        if len(caps) == 1:
            raise await _raise_in_task_group(_anthropic_cap_error())
        return "ok"

    assert await acall_with_output_cap(call, max_output_tokens=21333) == "ok"
    assert caps == [21333, 2798]


def test_regression_a_groups_verdict_is_its_strongest_members() -> None:
    """Two errors in one group: the first PromptTooLong (no cap fixes it), else the
    OutputCapTooLarge with the fewest tokens available, else an ambiguous one."""
    prompt = classify_size_error(_openai_prompt_error())
    assert isinstance(prompt, PromptTooLong)
    cap = _anthropic_cap_error()
    tight = "input length and `max_tokens` exceed context limit: 199000 + 21333 > 200000"
    either = "Please reduce the length of the messages or completion."
    assert classify_size_error(ExceptionGroup("g", [cap, _openai_prompt_error()])) == prompt
    found = classify_size_error(ExceptionGroup("g", [cap, ValueError(tight)]))
    assert isinstance(found, OutputCapTooLarge)
    assert found.available == 1000
    found = classify_size_error(ExceptionGroup("g", [ValueError(either), cap]))
    assert isinstance(found, OutputCapTooLarge)
    assert found.available == 2798
    assert isinstance(
        classify_size_error(ExceptionGroup("g", [KeyError("x"), ValueError(either)])),
        AmbiguousSizeError,
    )
    assert classify_size_error(ExceptionGroup("g", [KeyError("x"), ValueError("no")])) is None
    # A rate limit and a 413 are two errors: the 413 is a size error on its own.
    rate = _groq_client_413(
        "Request too large for model llama3-70b-8192 in organization org_x on tokens per "
        "minute (TPM): Limit 6000, Requested 7000, please reduce your message size."
    )
    assert classify_size_error(rate) is None
    bare = UpstreamError(413)
    assert isinstance(classify_size_error(ExceptionGroup("g", [rate, bare])), PromptTooLong)


class _SelfHolding(ExceptionGroup[Exception]):
    """A group whose ``exceptions`` holds itself and the size error after it."""

    @property
    def exceptions(self) -> tuple[Exception, ...]:
        return (self, _anthropic_cap_error())


class _RaisingMembers(ExceptionGroup[Exception]):
    @property
    def exceptions(self) -> tuple[Exception, ...]:
        raise RuntimeError("no members for you")


def test_regression_exception_groups_are_read_bounded_and_once() -> None:
    """A group that holds itself is read once, one whose members raise is read as
    having none, and at most 32 exceptions are read out of groups for one verdict."""
    assert isinstance(classify_size_error(_SelfHolding("g", [KeyError("x")])), OutputCapTooLarge)
    assert classify_size_error(_RaisingMembers("g", [_anthropic_cap_error()])) is None
    many: list[Exception] = [KeyError(i) for i in range(31)]
    assert isinstance(
        classify_size_error(ExceptionGroup("g", [*many, _anthropic_cap_error()])),
        OutputCapTooLarge,
    )
    assert (
        classify_size_error(ExceptionGroup("g", [*many, KeyError(31), _anthropic_cap_error()]))
        is None
    )
    # A chain of groups 10,000 deep costs the same bound, and never the recursion limit.
    deep: BaseException = _anthropic_cap_error()
    for _ in range(10_000):
        deep = BaseExceptionGroup("g", [KeyError("x"), deep])
    assert classify_size_error(deep) is None


# -- regressions: the real SDKs against a local server that speaks the providers' APIs ------

_Answer = tuple[int, str, bytes]  # status, content type, body


class _Loopback:
    """A local HTTP server: each request's JSON body is kept and answered by *respond*,
    so the SDKs raise their own exceptions from real responses."""

    def __init__(self, respond: Callable[[dict[str, Any]], _Answer]) -> None:
        self.requests: list[dict[str, Any]] = []
        loopback = self

        class Handler(BaseHTTPRequestHandler):
            protocol_version = "HTTP/1.1"

            def do_POST(self) -> None:
                request = json.loads(self.rfile.read(int(self.headers["Content-Length"])))
                loopback.requests.append(request)
                status, content_type, body = respond(request)
                self.send_response(status)
                self.send_header("Content-Type", content_type)
                self.send_header("Content-Length", str(len(body)))
                self.end_headers()
                self.wfile.write(body)

            def log_message(self, *args: Any) -> None:
                pass  # keep the test output clean

        self.server = ThreadingHTTPServer(("127.0.0.1", 0), Handler)
        self.url = f"http://127.0.0.1:{self.server.server_address[1]}"
        threading.Thread(target=self.server.serve_forever, daemon=True).start()


@contextlib.contextmanager
def _serving(respond: Callable[[dict[str, Any]], _Answer]) -> Iterator[_Loopback]:
    loopback = _Loopback(respond)
    try:
        yield loopback
    finally:
        loopback.server.shutdown()
        loopback.server.server_close()


def _json(status: int, body: object) -> _Answer:
    return status, "application/json", json.dumps(body).encode()


def _sse(*events: dict[str, Any]) -> _Answer:
    """A 200 event stream of *events*, each named by its ``type`` as Anthropic's are."""
    text = "".join(f"event: {e['type']}\ndata: {json.dumps(e)}\n\n" for e in events)
    return 200, "text/event-stream", text.encode()


_OPENAI_OK = {
    "id": "chatcmpl-1", "object": "chat.completion", "created": 1, "model": "m",
    "choices": [{"index": 0, "finish_reason": "stop",
                 "message": {"role": "assistant", "content": "done"}}],
    "usage": {"prompt_tokens": 10, "completion_tokens": 1, "total_tokens": 11},
}  # fmt: skip
_ANTHROPIC_STREAM_OK = (
    {"type": "message_start", "message": {
        "id": "msg_1", "type": "message", "role": "assistant", "model": "m", "content": [],
        "stop_reason": None, "stop_sequence": None,
        "usage": {"input_tokens": 10, "output_tokens": 1}}},
    {"type": "content_block_start", "index": 0, "content_block": {"type": "text", "text": ""}},
    {"type": "content_block_delta", "index": 0, "delta": {"type": "text_delta", "text": "done"}},
    {"type": "content_block_stop", "index": 0},
    {"type": "message_delta", "delta": {"stop_reason": "end_turn", "stop_sequence": None},
     "usage": {"output_tokens": 1}},
    {"type": "message_stop"},
)  # fmt: skip
_MESSAGES: Any = [{"role": "user", "content": "x"}]


class _VLLM:
    """vLLM's check of prompt plus cap against the window, as its renderer makes it: the
    prompt is tokenized only up to ``window - cap + 1`` tokens, and that count is what
    the error gives ("at least" in the older wording, plainly in the newer one)."""

    def __init__(self, *, window: int, prompt: int, wording: str) -> None:
        self.window = window
        self.prompt = prompt
        self.wording = wording

    def __call__(self, request: dict[str, Any]) -> _Answer:
        cap = request.get("max_tokens") or 0
        if self.prompt + cap <= self.window:
            return _json(200, _OPENAI_OK)
        counted = min(self.prompt, self.window - cap + 1)
        if self.wording == "at_least":
            bound = "at least " if counted < self.prompt else ""
            message = (
                f"This model's maximum context length is {self.window} tokens. However, you "
                f"requested {cap} output tokens and your prompt contains {bound}{counted} "
                f"input tokens, for a total of {bound}{counted + cap} tokens. Please reduce "
                "the length of the input prompt or the number of requested output tokens. "
                f"(parameter=input_tokens, value={counted})"
            )
        else:
            message = (
                f"You passed {counted} input tokens and requested {cap} output tokens. "
                f"However, the model's context length is only {self.window} tokens, "
                f"resulting in a maximum input length of {self.window - cap} tokens. Please "
                f"reduce the length of the input prompt. (parameter=input_tokens, value={counted})"
            )
        error = {
            "message": message,
            "type": "BadRequestError",
            "param": "input_tokens",
            "code": 400,
        }
        return _json(400, {"error": error})


def _openai_client(loopback: _Loopback) -> openai.OpenAI:
    return openai.OpenAI(api_key="k", base_url=f"{loopback.url}/v1", max_retries=0)


def _chat(client: openai.OpenAI) -> Callable[[int], Any]:
    def call(cap: int) -> Any:
        return client.chat.completions.create(model="m", messages=_MESSAGES, max_tokens=cap)

    return call


@pytest.mark.parametrize("wording", ["at_least", "passed"])
def test_regression_vllm_truncated_prompt_count_is_a_lower_bound(wording: str) -> None:
    """Found by a tester: vLLM's "at least N input tokens" (N = W - C + 1, where its
    tokenizer stopped) was read as the prompt's size: OutputCapTooLarge(available=C - 1),
    so each retry lowered the cap by one token and a prompt over the whole window was
    never compressed. Its newer wording ("You passed N input tokens ...") gave None."""
    server = _VLLM(window=32768, prompt=60000, wording=wording)
    with _serving(server) as loopback:
        call = _chat(_openai_client(loopback))
        with pytest.raises(openai.BadRequestError) as info:
            call(8192)
        verdict = classify_size_error(info.value, requested=8192)
        assert verdict == AmbiguousSizeError("openai", "either", limit=32768, tokens=24577)
        compressions: list[PromptTooLong] = []

        def compress(verdict: PromptTooLong) -> None:
            compressions.append(verdict)
            server.prompt = 20000

        reply = call_with_output_cap(
            call, max_output_tokens=8192, compress_prompt=compress, attempts=8
        )
        assert reply.choices[0].message.content == "done"
        # Halved to the floor; still too large there, so the prompt is compressed once.
        assert [r["max_tokens"] for r in loopback.requests[1:]] == [
            8192, 4096, 2048, 1024, 512, 256, 256
        ]  # fmt: skip
        assert compressions == [PromptTooLong(None, 32768, "openai")]

        # A prompt that fits beside a smaller cap is never compressed.
        server.prompt = 30000
        del loopback.requests[:]
        assert call_with_output_cap(call, max_output_tokens=8192, compress_prompt=compress)
        assert [r["max_tokens"] for r in loopback.requests] == [8192, 4096, 2048]
        assert len(compressions) == 1

        # Without a compressor: re-raised once the cap is at the floor, not before.
        server.prompt = 60000
        del loopback.requests[:]
        with pytest.raises(openai.BadRequestError):
            call_with_output_cap(call, max_output_tokens=8192, attempts=100)
        assert [r["max_tokens"] for r in loopback.requests] == [8192, 4096, 2048, 1024, 512, 256]


_PASSED = (
    "You passed {0} input tokens and requested {1} output tokens. However, the model's "
    "context length is only {2} tokens, resulting in a maximum input length of {3} tokens. "
    "Please reduce the length of the input prompt. (parameter=input_tokens, value={0})"
)


def _passed(inputs: int, cap: int, window: int) -> str:
    return _PASSED.format(inputs, cap, window, window - cap)


def test_regression_vllm_you_passed_wording_is_decided_by_its_numbers() -> None:
    """Found by a tester: vLLM's current wording (VLLMValidationError) gave None, and
    OutputCapRetry re-raised a real size error."""
    assert classify_size_error(_passed(262145, 0, 262144)) == PromptTooLong(262145, 262144, "vllm")
    assert classify_size_error(_passed(1200064, 1, 1048576)) == PromptTooLong(
        1200064, 1048576, "vllm"
    )
    # A count past where vLLM stops counting is exact: the arithmetic decides.
    assert classify_size_error(_passed(100000, 40000, 131072)) == OutputCapTooLarge(
        40000, 31072, 131072, "vllm", 100000
    )
    # One where it stops (W - C + 1) may have been cut short: a lower bound.
    assert classify_size_error(_passed(98305, 32768, 131072)) == AmbiguousSizeError(
        "vllm", "either", limit=131072, tokens=98305
    )
    server = _VLLM(window=262144, prompt=300000, wording="passed")
    with _serving(server) as loopback, pytest.raises(openai.BadRequestError) as info:
        _chat(_openai_client(loopback))(0)
    assert classify_size_error(info.value) == PromptTooLong(262145, 262144, "openai")


_GPT5 = (
    "Input tokens exceed the configured limit of 272000 tokens. Your messages resulted in "
    "289650 tokens. Please reduce the length of the messages."
)


def test_regression_gpt5_input_limit_is_decided_by_its_numbers() -> None:
    """Found by a tester: OpenAI's GPT-5 input-limit 400 was ambiguous (from its code) and
    None as text, so call_with_output_cap re-raised instead of compressing the prompt."""
    expected = PromptTooLong(289650, 272000, "openai")
    assert classify_size_error(_GPT5) == expected
    prompt = [289650]
    error = {"message": _GPT5, "type": "invalid_request_error", "param": "messages",
             "code": "context_length_exceeded"}  # fmt: skip

    def respond(request: dict[str, Any]) -> _Answer:
        return _json(400, {"error": error}) if prompt[0] > 272000 else _json(200, _OPENAI_OK)

    with _serving(respond) as loopback:
        call = _chat(_openai_client(loopback))
        with pytest.raises(openai.BadRequestError) as info:
            call(4096)
        assert classify_size_error(info.value) == expected
        compressions: list[PromptTooLong] = []

        def compress(verdict: PromptTooLong) -> None:
            compressions.append(verdict)
            prompt[0] = 1000

        call_with_output_cap(call, max_output_tokens=4096, compress_prompt=compress)
        assert [r["max_tokens"] for r in loopback.requests[1:]] == [4096, 4096]
    assert compressions == [expected]


_REQUEST_TOO_LARGE = {
    "type": "error",
    "error": {
        "type": "request_too_large",
        "message": "Request exceeds the maximum allowed number of bytes.",
    },
}


def test_regression_anthropic_request_too_large_body_decides_without_the_status() -> None:
    """Found by a tester: Anthropic's own 413 body was None without the HTTP status: as a
    dict (a logged or proxied body) and as a Messages stream's ``error`` event (HTTP 200)."""
    expected = PromptTooLong(None, None, "anthropic")
    assert classify_size_error(_REQUEST_TOO_LARGE) == expected
    assert classify_size_error(json.dumps(_REQUEST_TOO_LARGE)) == expected
    with _serving(lambda request: _sse(_REQUEST_TOO_LARGE)) as loopback:
        client = anthropic.Anthropic(base_url=loopback.url, api_key="k", max_retries=0)
        stream = client.messages.stream(model="m", max_tokens=100, messages=_MESSAGES)
        with pytest.raises(anthropic.APIStatusError) as info, stream as events:
            events.get_final_message()
    assert info.value.status_code == 200
    assert classify_size_error(info.value) == expected
    # As the 413 with it: unchanged.
    with _serving(lambda request: _json(413, _REQUEST_TOO_LARGE)) as loopback:
        client = anthropic.Anthropic(base_url=loopback.url, api_key="k", max_retries=0)
        with pytest.raises(anthropic.APIStatusError) as info:
            client.messages.create(model="m", max_tokens=100, messages=_MESSAGES)
    assert info.value.status_code == 413
    assert classify_size_error(info.value) == expected


def test_regression_one_call_reads_a_bounded_number_of_characters(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    """Found by a tester: each group member's every link was read and matched on its own
    and again joined, each up to MAX_SCAN_CHARS: a group of 32 errors with 4-link chains
    of 77 KB each took 16-20 s. The characters the rules read are counted, not timed."""
    matched: list[int] = []
    classify_text = classify_module._classify_text

    def counting(text: str, **options: Any) -> Any:
        matched.append(len(text))
        return classify_text(text, **options)

    monkeypatch.setattr(classify_module, "_classify_text", counting)
    noise = "max_tokens " * 7000  # 77 KB, no size error in it
    client = openai.OpenAI(api_key="k", base_url="https://api.example.invalid/v1")

    def chain() -> Exception:
        # A real SDK error holding the noise, raised from under three wrappers.
        url = "https://api.example.invalid/v1/chat/completions"
        error: Exception = _client_error(client, url, 400, {"error": {"message": noise}})
        for _ in range(3):
            error = _raised_from(error, lambda e: RuntimeError(noise))  # type: ignore[arg-type]
        return error

    errors: list[object] = [noise, chain(), ExceptionGroup("g", [chain() for _ in range(32)])]
    for error in errors:
        matched.clear()
        assert classify_size_error(error) is None
        assert 0 < sum(matched) <= 2 * MAX_SCAN_CHARS
    # What is read first still decides: a size error before the noise.
    group = ExceptionGroup("g", [_anthropic_cap_error(), *(chain() for _ in range(31))])
    assert isinstance(classify_size_error(group), OutputCapTooLarge)


def _docs_sketch() -> str:
    after = DOCS.read_text("utf-8").split("A sketch with the Anthropic SDK", 1)[1]
    return after.split("```text\n", 1)[1].split("```", 1)[0]


def test_regression_the_docs_anthropic_sketch_runs_with_the_real_sdk() -> None:
    """Found by a tester: the sketch's non-streaming messages.create with a 32,000-token
    cap made the SDK raise "Streaming is required" before sending anything."""

    def respond(request: dict[str, Any]) -> _Answer:
        cap = request["max_tokens"]
        if 197202 + cap > 200000:
            message = (f"input length and `max_tokens` exceed context limit: 197202 + {cap} > "
                       "200000, decrease input length or `max_tokens` and try again")  # fmt: skip
            error = {"type": "invalid_request_error", "message": message}
            return _json(400, {"type": "error", "error": error})
        return _sse(*_ANTHROPIC_STREAM_OK)

    with _serving(respond) as loopback:

        def client() -> anthropic.Anthropic:
            return anthropic.Anthropic(base_url=loopback.url, api_key="k", max_retries=0)

        namespace: dict[str, Any] = {
            "anthropic": SimpleNamespace(Anthropic=client),
            "call_with_output_cap": call_with_output_cap,
        }
        exec(_docs_sketch(), namespace)
    assert namespace["reply"].content[0].text == "done"
    assert [r["max_tokens"] for r in loopback.requests] == [32000, 2798]
    # The SDK's refusal of the non-streaming form is no size error of the API: streaming
    # is the fix, not a smaller answer, so it is re-raised unchanged.
    with pytest.raises(ValueError, match="Streaming is required") as info:
        client().messages.create(model="m", max_tokens=32000, messages=_MESSAGES)
    assert classify_size_error(info.value) is None


_GEMINI_LIST = [{"error": {"code": 400, "status": "INVALID_ARGUMENT", "message":
                 "The input token count (1200293) exceeds the maximum number of tokens "
                 "allowed (1048576)."}}]  # fmt: skip


def test_regression_a_list_body_is_read_as_its_text_is() -> None:
    """Found by a tester: Gemini's REST errors are a JSON array; ``response.json()`` gave
    None where ``response.text`` gave the verdict."""
    with _serving(lambda request: _json(400, _GEMINI_LIST)) as loopback:
        response = httpx.post(f"{loopback.url}/v1beta/models/m:generateContent", json={})
    expected = PromptTooLong(1200293, 1048576, "gemini")
    assert classify_size_error(response.text) == expected
    assert classify_size_error(response.json()) == expected
    assert classify_size_error(tuple(response.json())) == expected


class _Stop(BaseException):
    """Not an Exception: what a hostile property or __str__ may raise."""


class _RaisingStr(Exception):
    """A size error in its body, and a __str__ that raises *raised*."""

    def __init__(self, raised: type[BaseException]) -> None:
        super().__init__("x")
        self.raised = raised
        self.body = {"type": "error", "error": {"type": "invalid_request_error", "message": MSG}}

    def __str__(self) -> str:
        raise self.raised()


def test_regression_a_base_exception_from_the_error_object_is_treated_as_absent() -> None:
    """Found by a tester: a __str__ raising a BaseException that is no Exception escaped,
    though the docs said the classifier raises nothing. Now only what stops the process
    or the task propagates."""
    for raised in (_Stop, GeneratorExit):
        assert isinstance(classify_size_error(_RaisingStr(raised)), OutputCapTooLarge)
    for stopping in (KeyboardInterrupt, SystemExit, asyncio.CancelledError):
        with pytest.raises(stopping):
            classify_size_error(_RaisingStr(stopping))


def test_regression_constants_the_docs_name_are_importable() -> None:
    """Found by a tester: docs/size-errors.md named MAX_SCAN_CHARS as if it were public;
    jsonbudget exports no such name."""
    names = set(re.findall(r"`([A-Z][A-Z0-9]*(?:_[A-Z0-9]+)+)`", DOCS.read_text("utf-8")))
    assert {name for name in names if not hasattr(jsonbudget, name)} == set()

"""Read a model API's size error and say which size is wrong: the output cap or the prompt.

The fix differs: an output cap that does not fit what is left of the context needs a
smaller cap, never a compressed prompt. Where a message gives the input tokens and the
window, the verdict is decided by arithmetic (input below the window means the cap is the
problem), not by error codes or ``param`` fields, which are known to mislead.
"""

from __future__ import annotations

import asyncio
import inspect
import itertools
import re
from collections.abc import Awaitable, Callable, Iterator, Mapping
from dataclasses import dataclass
from typing import Final, Literal, TypeVar, cast

import orjson

from .._limits import check_int, check_mode
from ..errors import LimitError

__all__ = [
    "DEFAULT_FLOOR",
    "MAX_SCAN_CHARS",
    "AmbiguousSizeError",
    "OutputCapRetry",
    "OutputCapTooLarge",
    "PromptTooLong",
    "SizeVerdict",
    "acall_with_output_cap",
    "call_with_output_cap",
    "classify_size_error",
    "next_output_cap",
]

#: The smallest output cap the helpers will ask for: below it an answer is rarely useful.
DEFAULT_FLOOR: Final = 256
#: At most this many characters are read from one error per call, its chain and groups
#: together; size messages are short.
MAX_SCAN_CHARS: Final = 64 * 1024
#: Nested error bodies are walked this deep and this wide, no further.
_MAX_BODY_DEPTH: Final = 6
_MAX_BODY_STRINGS: Final = 64
_MAX_ATTEMPTS: Final = 100

T = TypeVar("T")


@dataclass(frozen=True, slots=True)
class OutputCapTooLarge:
    """The requested output cap does not fit: shrink the cap, never the prompt.

    ``available`` is the largest cap that fits, when the message gives the numbers
    (``window - input`` for a context error, the model's output maximum otherwise).
    """

    requested: int | None
    available: int | None
    window: int | None
    provider: str | None = None
    input_tokens: int | None = None


@dataclass(frozen=True, slots=True)
class PromptTooLong:
    """The prompt alone does not fit the window: only a shorter prompt helps."""

    prompt_tokens: int | None
    limit: int | None
    provider: str | None = None


@dataclass(frozen=True, slots=True)
class AmbiguousSizeError:
    """A size error whose message does not say which size is wrong: a verdict the
    classifier returns, not an exception (it names the provider's error it describes).

    ``wording`` is what the message names (``"prompt"`` for a prompt count below its
    limit, or input wording beside a named output cap; ``"either"`` for "messages or
    completion"); it is not a verdict. ``limit`` and ``tokens`` are numbers the message
    gives without saying enough to decide.
    """

    provider: str | None = None
    wording: Literal["prompt", "either"] = "either"
    limit: int | None = None
    tokens: int | None = None


SizeVerdict = OutputCapTooLarge | PromptTooLong | AmbiguousSizeError

# -- decision policy -------------------------------------------------------------------
# Numbers decide first: the prompt alone at or over the window is `PromptTooLong`; room
# left for a smaller cap, or a named output ceiling, is `OutputCapTooLarge`. Without
# numbers the wording decides: naming only the input is the prompt. Only when neither
# decides is the verdict `AmbiguousSizeError`. docs/size-errors.md has this as a table.


def _num(text: str) -> int:
    return int(text.replace(",", ""))


def _by_arithmetic(
    input_tokens: int, requested: int | None, window: int, provider: str | None
) -> SizeVerdict:
    """Input below the window: the cap is what does not fit; otherwise the prompt."""
    if input_tokens < window:
        return OutputCapTooLarge(
            requested=requested,
            available=window - input_tokens,
            window=window,
            provider=provider,
            input_tokens=input_tokens,
        )
    return PromptTooLong(prompt_tokens=input_tokens, limit=window, provider=provider)


def _prompt_by_arithmetic(tokens: int, limit: int, provider: str | None) -> SizeVerdict:
    """A count the message calls the prompt; if it is below the limit, say so honestly."""
    if tokens >= limit:
        return PromptTooLong(prompt_tokens=tokens, limit=limit, provider=provider)
    return AmbiguousSizeError(provider=provider, wording="prompt", limit=limit, tokens=tokens)


def _total_with_known_cap(
    total: int | None, window: int, requested: int | None, provider: str | None
) -> SizeVerdict:
    """A total of prompt plus cap: decidable only when the caller says what the cap was."""
    if total is not None and requested is not None and requested <= total:
        return _by_arithmetic(total - requested, requested, window, provider)
    return AmbiguousSizeError(provider=provider, wording="either", limit=window, tokens=total)


def _output_ceiling(available: int, requested: int | None, provider: str | None) -> SizeVerdict:
    return OutputCapTooLarge(
        requested=requested, available=available, window=None, provider=provider
    )


# Words that name the output cap; a message naming the input *and* one of these does not
# say the prompt alone is too long.
_NAMES_OUTPUT = re.compile(
    r"max_(?:completion_|new_|output_)?tokens|maxOutputTokens|max tokens|completion|output",
    re.IGNORECASE,
)


def _input_wording(m: re.Match[str], call: _Call) -> SizeVerdict:
    """Wording that names only the input: the prompt, unless its message names the cap too.

    A wording rule reads the error's messages, one a line (`_Scan.message_text`); the
    message is the shortest line that holds the wording: an SDK's text renders the whole
    body, and an "output" in its other fields said nothing about the cap.
    """
    message = min(
        (line for line in call.text.split("\n") if m.re.search(line)), key=len, default=""
    )
    if _NAMES_OUTPUT.search(message):
        return AmbiguousSizeError(provider=call.provider, wording="prompt")
    return PromptTooLong(prompt_tokens=None, limit=None, provider=call.provider)


# -- rules -----------------------------------------------------------------------------
# Every gap is bounded and no quantifier is nested, so a scan is linear in the text.
# A number is whole or not at all: a longer one (no window has 13 digits) matched its
# first 12 digits and reported a window ten times too small.
_N = r"(?<![\d,])(\d{1,3}(?:,\d{3})+|\d{1,12})(?![\d,]?\d)"
_I = re.IGNORECASE


@dataclass(frozen=True, slots=True)
class _Call:
    """What a rule's verdict builder may use besides its match."""

    text: str
    requested: int | None
    provider: str | None


_Build = Callable[[re.Match[str], _Call], SizeVerdict | None]


@dataclass(frozen=True, slots=True)
class _Rule:
    """One message shape: its pattern, the family that words it so, and its verdict.

    ``build`` returns None when the match turns out not to be this shape; the next match
    of the same pattern, then the next rule, is tried.
    """

    name: str
    pattern: re.Pattern[str]
    provider: str | None
    build: _Build


def _g(m: re.Match[str], index: int) -> int:
    return _num(m.group(index))


def _opt(m: re.Match[str], index: int) -> int | None:
    value = m.group(index)
    return None if value is None else _num(value)


# OpenAI's breakdown "(I in the messages, C in the completion)" and its relatives;
# SGLang's ": I tokens from the input messages and C tokens for the completion".
_BREAKDOWN_PART = re.compile(
    _N + r" (?:tokens )?(in the messages|from the input messages|in your prompt"
    r"|of [a-z]{1,12} input|in the functions|in the completion|for the completion"
    r"|in the output)",
    _I,
)
_AFTER_WINDOW = re.compile(
    r"[.,]? ?(?:However,? )?(?:you requested (?:about |a total of )?|your messages resulted in )"
    + _N
    + r" ?tokens ?(?:\(([^)]{1,200})\)|: ([^.]{1,200}))",
    _I,
)
_PROMPT_ONLY = re.compile(
    r"[.,]? ?(?:However,? )?(?:your (?:messages|request|prompt) (?:resulted in|has|contains)"
    r"|you requested) " + _N + r" ?(?:input )?tokens(?! ?\()",
    _I,
)
# SambaNova's count, and the advice that follows it (its next sentence).
_WILL_TAKE = re.compile(
    r"[.,]? ?(?:However,? )?answering your request will take " + _N + r" ?tokens\.? ?([^.]{0,120})",
    _I,
)


def _window(m: re.Match[str]) -> int:
    """The window of whichever alternative of *m*'s pattern matched."""
    return next(_num(value) for value in m.groupdict().values() if value is not None)


def _context_window(m: re.Match[str], call: _Call) -> SizeVerdict | None:
    """OpenAI-style "maximum context length is W tokens. However, you requested ...";
    SambaNova's "maximum context length of <model> is W. However, answering your request
    will take T tokens", read the same."""
    window = _window(m)
    # The model's name between "of" and "is" is SambaNova's wording; "endpoint's",
    # OpenRouter's wording of OpenAI's message.
    if m.group("model_window") is not None:
        family = call.provider or "sambanova"
    elif "endpoint" in m.group(0).lower():
        family = call.provider or "openrouter"
    else:
        family = call.provider or "openai"
    breakdown = _AFTER_WINDOW.match(call.text, m.end())
    if breakdown is not None:
        total = _g(breakdown, 1)
        inputs = 0
        output: int | None = None
        seen_input = False
        parts = breakdown.group(2) if breakdown.group(2) is not None else breakdown.group(3)
        for part in _BREAKDOWN_PART.finditer(parts):
            value = _g(part, 1)
            where = part.group(2).lower()
            if "completion" in where or "output" in where:
                output = value
            else:
                inputs += value
                seen_input = True
        if seen_input and output is not None and output > 0:
            return _by_arithmetic(inputs, output, window, family)
        if seen_input:
            return _prompt_by_arithmetic(inputs, window, family)
        return AmbiguousSizeError(provider=family, limit=window, tokens=total)
    will_take = _WILL_TAKE.match(call.text, m.end())
    if will_take is not None:
        if _NAMES_OUTPUT.search(will_take.group(2)):
            # "... or the specified max_completion_tokens value": the count holds the cap.
            return _total_with_known_cap(_g(will_take, 1), window, call.requested, family)
        return _prompt_by_arithmetic(_g(will_take, 1), window, family)
    prompt_only = _PROMPT_ONLY.match(call.text, m.end())
    if prompt_only is not None:
        return _prompt_by_arithmetic(_g(prompt_only, 1), window, family)
    return None


def _vllm_output_and_chars(m: re.Match[str], call: _Call) -> SizeVerdict:
    # The prompt is counted in characters, not tokens; only a cap that fills the whole
    # window decides (no prompt fits beside it).
    window, cap = _g(m, 1), _g(m, 2)
    if cap >= window:
        return OutputCapTooLarge(
            requested=cap, available=None, window=window, provider=call.provider
        )
    return AmbiguousSizeError(provider=call.provider, wording="either", limit=window)


def _vllm_output_and_prompt(m: re.Match[str], call: _Call) -> SizeVerdict:
    """vLLM's prompt count beside its output cap C and window W, in either wording.

    vLLM tokenizes a prompt only up to W - C + 1 tokens, one past the most that fits
    beside the cap, so a longer prompt is reported at that length: "at least N" in the
    older wording, a plain N = W - C + 1 in the newer one (where an exact count of that
    size reads the same). Such an N is a lower bound: the cap does not fit, and whether
    any cap would is not said, unless N alone reaches the window.
    """
    if m.group("window") is not None:
        window, cap, inputs = _num(m.group("window")), _num(m.group("cap")), _num(m.group("inputs"))
        lower_bound = m.group("at_least") is not None
    else:
        window, cap = _num(m.group("passed_window")), _num(m.group("passed_cap"))
        inputs = _num(m.group("passed"))
        lower_bound = inputs + cap == window + 1
    if lower_bound and inputs < window:
        # Not OutputCapTooLarge(available=C - 1): retried, the next error says the same
        # one token lower, and a prompt over the window is never compressed.
        return AmbiguousSizeError(call.provider, "either", limit=window, tokens=inputs)
    return _by_arithmetic(inputs, cap, window, call.provider)


def _lm_studio_keep(m: re.Match[str], call: _Call) -> SizeVerdict:
    """LM Studio's tokens to keep, in its older wording or its newer one (``n_keep`` and
    ``n_ctx``): the prompt's, which must fit the window."""
    found = {k: _num(v) for k, v in m.groupdict().items() if v is not None}
    tokens = found.get("keep", found.get("n_keep"))
    window = found.get("keep_window", found.get("n_ctx"))
    if tokens is None or window is None:
        # The prompt, with what is said: a message may give neither number.
        return PromptTooLong(prompt_tokens=tokens, limit=window, provider=call.provider)
    return _prompt_by_arithmetic(tokens, window, call.provider)


def _prompt_too_long(m: re.Match[str], call: _Call) -> SizeVerdict:
    # "P tokens > W maximum" is Anthropic's; "P, model maximum context length: W" is
    # Ollama's, Fireworks' and Kimi's hosts' alike, so it names no family.
    family = call.provider or ("anthropic" if ">" in m.group(0) else None)
    return _prompt_by_arithmetic(_g(m, 1), _g(m, 2), family)


def _named(name: str) -> str:
    """`_N` with its number as the named group *name*: for rules with alternatives."""
    return _N.replace(r")(\d", rf")(?P<{name}>\d", 1)


def _cohere(m: re.Match[str], call: _Call) -> SizeVerdict:
    """Cohere's "too many tokens: ..." forms (docs.cohere.com/reference/errors)."""
    found = {k: _num(v) for k, v in m.groupdict().items() if v is not None}
    if "total" in found:
        # The generate endpoint's prompt plus max_tokens.
        return _total_with_known_cap(
            found["total"], found["total_window"], call.requested, call.provider
        )
    if "prompt" in found:
        return _prompt_by_arithmetic(found["prompt"], found["prompt_window"], call.provider)
    if "output" in found:
        return _output_ceiling(found["output_max"], found["output"], call.provider)
    if "excess_limit" in found:
        # Chat with prompt_truncation OFF: the inputs' sum is over the model's limit by
        # "excess", so the prompt is limit + excess tokens.
        limit = found["excess_limit"]
        return PromptTooLong(
            prompt_tokens=limit + found["excess"], limit=limit, provider=call.provider
        )
    # The prompt's excess without the limit, "the prompt ... exceeds the limit of W", or
    # a multi-hop prompt still too long after truncation: the prompt, with what is said.
    return PromptTooLong(
        prompt_tokens=None, limit=found.get("prompt_limit"), provider=call.provider
    )


def _rule(name: str, pattern: str, provider: str | None, build: _Build) -> _Rule:
    return _Rule(name, re.compile(pattern, _I), provider, build)


# A model's context window as OpenAI words it, and as SambaNova does, with the model's
# name between: "The maximum context length of Meta-Llama-3.1-405B-Instruct is 8192.
# However, answering your request will take T tokens." A number in another unit, or
# written "128k", is no window in tokens: only "tokens" or SambaNova's count may follow.
_WINDOW: Final = (
    r"(?:(?:model's|endpoint's|model) )?maximum context length (?:is|of) "
    + _named("window")
    + r" tokens|maximum context length of \S{1,100} is "
    + _named("model_window")
    + r"(?: tokens\b|(?=\.? ?However,? answering your request will take ))"
)


# Bedrock validates a request body with everit-json-schema, whose messages start with the
# JSON pointer of the field they are about: "#/top_k: 501 is not less or equal to 500".
_POINTER: Final = r"(?:#/([^\s:#]{1,200}): ?)?"
# The output cap's field in Bedrock's model bodies (the pointer's last segment, lowered):
# Anthropic, Mistral, AI21 Jamba, Cohere; Llama; Titan; Nova; AI21 Jurassic.
_BEDROCK_CAP_FIELDS: Final = frozenset(
    {
        "max_tokens",
        "max_tokens_to_sample",
        "max_completion_tokens",
        "max_gen_len",
        "maxtokencount",
        "max_new_tokens",
        "maxtokens",
    }
)
# Fields that hold the prompt (the pointer's first segment, lowered).
_BEDROCK_PROMPT_FIELDS: Final = frozenset(
    {
        "prompt",
        "messages",
        "system",
        "inputtext",
        "message",
        "chat_history",
        "documents",
        "preamble",
        "texts",
    }
)


def _not_less_or_equal(m: re.Match[str], call: _Call) -> SizeVerdict | None:
    pointer = m.group(1)
    if pointer is None:
        # Which field is over its maximum is not said.
        return AmbiguousSizeError(call.provider, "either", limit=_g(m, 3), tokens=_g(m, 2))
    if pointer.rpartition("/")[2].lower() in _BEDROCK_CAP_FIELDS:
        return _output_ceiling(_g(m, 3), _g(m, 2), call.provider or "bedrock")
    return None  # top_k, temperature, ...: a parameter out of range, no size


def _bedrock_max_length(m: re.Match[str], call: _Call) -> SizeVerdict | None:
    pointer = m.group(1)
    if pointer is None or pointer.partition("/")[0].lower() in _BEDROCK_PROMPT_FIELDS:
        return PromptTooLong(prompt_tokens=None, limit=None, provider=call.provider)
    return None  # a stop sequence, a metadata string, ...: not the prompt


# Numeric rules, most specific first: a message that embeds another is read by the
# outer shape's rule.
_RULES: Final[tuple[_Rule, ...]] = (
    _rule(
        "anthropic_sum",
        r"input length and .{0,2}max_tokens.{0,2} exceed context limit: ?"
        + _N
        + r" ?\+ ?"
        + _N
        + r" ?> ?"
        + _N,
        "anthropic",
        lambda m, c: _by_arithmetic(_g(m, 1), _g(m, 2), _g(m, 3), c.provider),
    ),
    _rule(
        "vllm_cap",
        r"is too large: ?"
        + _N
        + r"\.? ?This model's maximum context length is "
        + _N
        + r" tokens and your request has "
        + _N
        + r" input tokens",
        "vllm",
        lambda m, c: _by_arithmetic(_g(m, 3), _g(m, 1), _g(m, 2), c.provider),
    ),
    _rule(
        "vllm_output_and_prompt",
        # Its older wording, then its newer one (VLLMValidationError).
        r"maximum context length is "
        + _named("window")
        + r" tokens\. ?However, you requested "
        + _named("cap")
        + r" output tokens and your prompt contains (?P<at_least>at least )?"
        + _named("inputs")
        + r" input tokens|You passed "
        + _named("passed")
        + r" input tokens and requested "
        + _named("passed_cap")
        + r" output tokens\. ?However, the model's context length is only "
        + _named("passed_window")
        + r" tokens",
        "vllm",
        _vllm_output_and_prompt,
    ),
    _rule(
        "vllm_output_and_chars",
        r"maximum context length is "
        + _N
        + r" tokens\. ?However, you requested "
        + _N
        + r" output tokens and your prompt contains "
        + _N
        + r" characters",
        "vllm",
        _vllm_output_and_chars,
    ),
    _rule(
        "openai_context_window",
        _WINDOW
        # OpenAI's GPT-5 input limit: "... Your messages resulted in P tokens." follows.
        + r"|Input tokens exceed the configured limit of "
        + _named("limit")
        + r" tokens",
        None,
        _context_window,
    ),
    _rule(
        "tgi_sum",
        r"inputs.{0,2} tokens \+ .{0,2}max_new_tokens.{0,2} +must be <= "
        + _N
        + r"\. ?Given: "
        + _N
        + r" .{0,2}inputs.{0,2} tokens and "
        + _N
        + r" .{0,2}max_new_tokens",
        "tgi",
        lambda m, c: _by_arithmetic(_g(m, 2), _g(m, 3), _g(m, 1), c.provider),
    ),
    _rule(
        "prompt_too_long",
        r"prompt is too long: ?"
        + _N
        + r"(?: tokens ?> ?|, ?(?:model )?maximum context length: ?)"
        + _N,
        None,
        _prompt_too_long,
    ),
    _rule(
        "anthropic_output_max",
        r"max_tokens: ?" + _N + r" ?> ?" + _N + r", which is the maximum allowed number of output",
        "anthropic",
        lambda m, c: _output_ceiling(_g(m, 2), _g(m, 1), c.provider),
    ),
    _rule(
        "gemini_input",
        r"input token count \(" + _N + r"\) exceeds the maximum number of tokens allowed \(" + _N,
        "gemini",
        lambda m, c: _prompt_by_arithmetic(_g(m, 1), _g(m, 2), c.provider),
    ),
    _rule(
        "vertex_input",
        r"input token count is " + _N + r" but (?:the )?model only supports up to " + _N,
        "vertex",
        lambda m, c: _prompt_by_arithmetic(_g(m, 1), _g(m, 2), c.provider),
    ),
    _rule(
        "gemini_input_no_count",
        # Gemini counts the input against its own input limit, apart from the output.
        r"input token count exceeds the maximum number of tokens allowed \(?" + _N,
        "gemini",
        lambda m, c: PromptTooLong(prompt_tokens=None, limit=_g(m, 1), provider=c.provider),
    ),
    _rule(
        "gemini_output",
        r"maxOutputTokens value of "
        + _N
        + r" but the supported range is from "
        + _N
        + r" \(inclusive\) to "
        + _N
        + r" \(exclusive\)",
        "gemini",
        lambda m, c: _output_ceiling(_g(m, 3) - 1, _g(m, 1), c.provider),
    ),
    _rule(
        "openai_output_max",
        r"max_(?:completion_)?tokens is too large: ?"
        + _N
        + r"\. ?This model supports at most "
        + _N
        + r" completion tokens",
        "openai",
        lambda m, c: _output_ceiling(_g(m, 2), _g(m, 1), c.provider),
    ),
    _rule(
        "output_valid_range",
        # DeepSeek: "the valid range of max_tokens is [1, M]".
        r"valid range of max_(?:completion_)?tokens is \[ ?1, ?" + _N + r" ?\]",
        "deepseek",
        lambda m, c: _output_ceiling(_g(m, 1), c.requested, c.provider),
    ),
    _rule(
        "output_range_should_be",
        # Alibaba DashScope (Qwen): "Range of max_tokens should be [1, M]".
        r"Range of max_(?:completion_)?tokens should be \[ ?1, ?" + _N + r" ?\]",
        "dashscope",
        lambda m, c: _output_ceiling(_g(m, 1), c.requested, c.provider),
    ),
    _rule(
        "output_between",
        # An OpenAI-compatible gateway: "max_tokens (current value: C) must be between 0 and M".
        r"max_(?:completion_)?tokens \(current value: ?"
        + _N
        + r"\) must be between "
        + _N
        + r" and "
        + _N,
        None,
        lambda m, c: _output_ceiling(_g(m, 3), _g(m, 1), c.provider),
    ),
    _rule(
        "output_less_or_equal",
        # Groq, also when it goes on to mention the context window.
        r"max_(?:completion_)?tokens`?(?: for `[^`]{1,100}`)? must be less than or equal to `?"
        + _N,
        "groq",
        lambda m, c: _output_ceiling(_g(m, 1), c.requested, c.provider),
    ),
    _rule(
        "bedrock_output_max",
        r"maximum tokens you requested exceeds? the model limit of " + _N,
        "bedrock",
        lambda m, c: _output_ceiling(_g(m, 1), c.requested, c.provider),
    ),
    _rule(
        "tgi_input",
        r"inputs.{0,2} must have less than " + _N + r" tokens\. ?Given: " + _N,
        "tgi",
        lambda m, c: _prompt_by_arithmetic(_g(m, 2), _g(m, 1), c.provider),
    ),
    _rule(
        # TGI's MaxNewTokens check, beside the two above (not the sum's tail: no inputs).
        "tgi_output",
        r"max_new_tokens.{0,2} must be <= " + _N + r"\. ?Given: " + _N + r"(?! .{0,2}inputs)",
        "tgi",
        lambda m, c: _output_ceiling(_g(m, 1), _g(m, 2), c.provider),
    ),
    _rule(
        # Bedrock's Titan embeddings: an embedding model has no output cap.
        "titan_embed_input",
        r"Too many input tokens\. ?Max input tokens: " + _N + r", request input token count: " + _N,
        "bedrock",
        lambda m, c: _prompt_by_arithmetic(_g(m, 2), _g(m, 1), c.provider),
    ),
    _rule(
        # OpenAI embeddings, per input: "Invalid 'input[0]': maximum input length is 8192
        # tokens." The input's own count is not given.
        "openai_embed_input",
        r"maximum input length is " + _N + r" tokens",
        "openai",
        lambda m, c: PromptTooLong(prompt_tokens=None, limit=_g(m, 1), provider=c.provider),
    ),
    _rule(
        # Gemini's request body past its byte limit, sent as a 400: the body is the prompt.
        "gemini_payload",
        r"Request payload size exceeds the limit: " + _N + r" bytes",
        "gemini",
        lambda m, c: PromptTooLong(prompt_tokens=None, limit=None, provider=c.provider),
    ),
    _rule(
        "llama_cpp_python",
        r"Requested tokens \(" + _N + r"\) exceed context window of " + _N,
        "llama-cpp-python",
        lambda m, c: _prompt_by_arithmetic(_g(m, 1), _g(m, 2), c.provider),
    ),
    _rule(
        "llama_cpp_python_old",
        # This older check compared prompt plus max_tokens with the window.
        r"Requested tokens exceed context window of " + _N,
        "llama-cpp-python",
        lambda m, c: _total_with_known_cap(None, _g(m, 1), c.requested, c.provider),
    ),
    _rule(
        "cohere_too_many_tokens",
        # Cohere words every size error "too many tokens: ..."; each form names a different
        # size, so each is one alternative with its own named groups.
        r"total number of tokens \(prompt and prediction\) cannot exceed "
        + _named("total_window")
        + r" ?- ?received "
        + _named("total")
        + r"|total number of tokens in the prompt (?:cannot exceed "
        + _named("prompt_window")
        + r" ?- ?received "
        + _named("prompt")
        + r"|exceeds the limit of "
        + _named("prompt_limit")
        + r")|max tokens must be less than or equal to "
        + _named("output_max")
        + r", the maximum output (?:length )?for this model ?- ?received "
        + _named("output")
        + r"|too many tokens: ?(?:minimal context could not be added to prompt \()?size limit "
        r"exceeded by "
        + _named("excess")
        + r" tokens(?:.{0,160}?The limit for this model is "
        + _named("excess_limit")
        + r" tokens)?|too many tokens: ?multi-hop prompt is too long",
        "cohere",
        _cohere,
    ),
    _rule(
        "mistral_prompt",
        r"Prompt contains " + _N + r" tokens(?: and " + _N + r" draft tokens)?, too large for "
        r"model with " + _N + r" maximum context length",
        "mistral",
        lambda m, c: _prompt_by_arithmetic(_g(m, 1), _g(m, 3), c.provider),
    ),
    _rule(
        "mistral_batch",
        # Embeddings have no output, so every token is input.
        r"Too many tokens in batch\. Max is " + _N + r",? got " + _N,
        "mistral",
        lambda m, c: _prompt_by_arithmetic(_g(m, 2), _g(m, 1), c.provider),
    ),
    _rule(
        "embeddings_per_request",
        r"Requested " + _N + r" tokens, max " + _N + r" tokens per request",
        "openai",
        lambda m, c: _prompt_by_arithmetic(_g(m, 1), _g(m, 2), c.provider),
    ),
    _rule(
        "prompt_length_request_contains",
        # xAI: "maximum prompt length is W but the request contains T tokens".
        r"maximum prompt length is " + _N + r",? but the request contains " + _N + r" tokens",
        "xai",
        lambda m, c: _prompt_by_arithmetic(_g(m, 2), _g(m, 1), c.provider),
    ),
    _rule(
        "param_above_max",
        # Volcengine; OpenAI: "Invalid 'max_completion_tokens': integer above maximum value.
        # Expected a value <= M, but got C instead." (the same for 'max_tokens').
        r"max_(?:completion_|new_|output_)?tokens[^.]{0,80}?(?:above maximum value\. ?)?"
        r"expected a value <= " + _N + r", but got " + _N,
        None,
        lambda m, c: _output_ceiling(_g(m, 1), _g(m, 2), c.provider),
    ),
    _rule(
        "openrouter_afford",
        # A credit limit, not a context one, but the fix is the same: a smaller cap.
        r"You requested up to " + _N + r" tokens, but can only afford " + _N,
        "openrouter",
        lambda m, c: _output_ceiling(_g(m, 2), _g(m, 1), c.provider),
    ),
    _rule(
        "content_contains",
        r"Content contains "
        + _N
        + r" tokens, which exceeds the maximum allowed context size of "
        + _N,
        None,
        lambda m, c: _by_arithmetic(_g(m, 1), c.requested, _g(m, 2), c.provider),
    ),
    _rule(
        "lm_studio_keep",
        r"Trying to keep the first "
        + _named("keep")
        + r" tokens when context (?:the )?overflows(?:\. ?However, the model is loaded with "
        r"(?:a )?context length of only " + _named("keep_window") + r" tokens)?"
        # Its newer wording, with llama.cpp's names for the two counts or without them.
        r"|number of tokens to keep from the initial prompt is greater than the context "
        r"length(?:\.? ?\(?n_keep: ?"
        + _named("n_keep")
        + r" ?>= ?n_ctx: ?"
        + _named("n_ctx")
        + r")?",
        "lm-studio",
        _lm_studio_keep,
    ),
    _rule(
        "lm_studio_reached",
        # Mid-generation: prompt plus what was generated so far filled the window.
        r"Reached context length of " + _N + r" tokens",
        "lm-studio",
        lambda m, c: AmbiguousSizeError(provider=c.provider, wording="either", limit=_g(m, 1)),
    ),
    _rule(
        "input_length_exceeds",
        # LM Studio's older server, and Volcengine Ark.
        r"Input length " + _N + r" exceeds (?:the )?(?:maximum length|context length) " + _N,
        None,
        lambda m, c: _prompt_by_arithmetic(_g(m, 1), _g(m, 2), c.provider),
    ),
    _rule(
        "ollama_log",
        r"input exceeds context length\"? prompt=" + _N + r" limit=" + _N,
        "ollama",
        lambda m, c: _prompt_by_arithmetic(_g(m, 1), _g(m, 2), c.provider),
    ),
    _rule(
        "sglang_input_longer",
        r"The input \(" + _N + r" tokens\) is longer than the model's context length \(" + _N,
        "sglang",
        lambda m, c: _prompt_by_arithmetic(_g(m, 1), _g(m, 2), c.provider),
    ),
    _rule(
        "sglang_input_allowed",
        r"Input length \(" + _N + r" tokens\) exceeds the maximum allowed length \(" + _N,
        "sglang",
        lambda m, c: _prompt_by_arithmetic(_g(m, 1), _g(m, 2), c.provider),
    ),
    _rule(
        "vllm_scheduler",
        r"Input prompt \(" + _N + r" tokens\) is too long and exceeds limit of " + _N,
        "vllm",
        lambda m, c: _prompt_by_arithmetic(_g(m, 1), _g(m, 2), c.provider),
    ),
    _rule(
        "vllm_decoder_prompt",
        r"decoder prompt \(length " + _N + r"\) is longer than the maximum model length of " + _N,
        "vllm",
        lambda m, c: _prompt_by_arithmetic(_g(m, 1), _g(m, 2), c.provider),
    ),
    _rule(
        "vllm_prompt_total_length",
        r"prompt \(total length "
        + _N
        + r"\) is too long to fit into the model \(context length "
        + _N,
        "vllm",
        lambda m, c: _prompt_by_arithmetic(_g(m, 1), _g(m, 2), c.provider),
    ),
    _rule(
        "fireworks_stream_cap",
        # Above this cap Fireworks wants a stream; a cap at or below it fits either way.
        r"max_tokens > " + _N + r" must have stream=true",
        "fireworks",
        lambda m, c: _output_ceiling(_g(m, 1), c.requested, c.provider),
    ),
    _rule(
        "moonshot_token_limit",
        # Moonshot counts prompt plus max_tokens; "re quested" is how one report wraps it.
        r"exceeded model token limit: ?" + _N + r"(?: ?\(re ?quested: ?" + _N + r"\))?",
        "moonshot",
        lambda m, c: _total_with_known_cap(_opt(m, 2), _g(m, 1), c.requested, c.provider),
    ),
    _rule(
        "moonshot_max_length",
        r"model max length exceeded, max length: ?" + _N,
        "moonshot",
        lambda m, c: _total_with_known_cap(None, _g(m, 1), c.requested, c.provider),
    ),
    _rule(
        "bedrock_max_length",
        # A schema check of a string's length in characters: the prompt, unless the
        # pointer before it names another field.
        _POINTER + r"expected maxLength: ?" + _N + r", actual: ?" + _N,
        "bedrock",
        _bedrock_max_length,
    ),
    _rule(
        "json_string_length",
        # Jackson's limit on one JSON string of the request body (Qwen's API says it so).
        # It counts characters of a string in the request, so the string is prompt text.
        r"String value length \(" + _N + r"\) exceeds the maximum allowed \(" + _N,
        None,
        lambda m, c: PromptTooLong(prompt_tokens=None, limit=None, provider=c.provider),
    ),
    _rule(
        "bedrock_body_length",
        # The request body in bytes; the cap is one number, so the bytes are the prompt.
        r"Value at 'body' failed to satisfy constraint: Member must have length less than "
        r"or equal to " + _N,
        "bedrock",
        lambda m, c: PromptTooLong(prompt_tokens=None, limit=None, provider=c.provider),
    ),
    _rule(
        "current_length",
        # Cerebras: does "length" include the completion? Not said.
        r"Current length is " + _N + r" while limit is " + _N,
        None,
        lambda m, c: AmbiguousSizeError(c.provider, "either", limit=_g(m, 2), tokens=_g(m, 1)),
    ),
    _rule(
        "not_less_or_equal",
        # Bedrock's schema check of a number: the pointer before it, when there is one,
        # names the field over its maximum.
        _POINTER + _N + r" is not less or equal to " + _N,
        None,
        _not_less_or_equal,
    ),
)

# Where a provider's message, or one of its clauses, begins: the start of a message, or
# after a clause separator (":", " - ", "]", ">", "=", an opening parenthesis before a
# quote), then a status ("400 ", "HTTP 413 ") and an opening quote allowed. Any prefix
# before the separator is allowed ("Bad Request: ", "[400] ", "APICallError
# [AI_APICallError]: ", "The model returned the following errors: "): wrappers name
# errors as they like. Wording inside a sentence is about a prompt, not the provider's
# verdict on it ("system prompt too long to display", "is your prompt too long?");
# wording that goes on after the phrase ("prompt too long to cache") is refused by
# `_CLAUSE_END`.
_LEAD: Final = r"(?:^|(?:[:=>\]]|\s-|\((?=['\"`]))\s?)(?:(?:HTTP ?)?\d{3}:? )?['\"`\\]{0,3}"
# Where such a message's clause ends: the end, punctuation, or its counts.
_CLAUSE_END: Final = r"(?=$|[.;:,!'\"`)\]}\\]| \(?\d)"

# Rules read when no numeric rule decided, on the provider's messages only (a body's
# message fields and an exception's text, one a line: `_Scan.message_text`), never on
# the caller's fields a body echoes (instructions, input, a user's message).
_WORDING_RULES: Final[tuple[_Rule, ...]] = (
    _rule(
        "context_window_bare",
        # The window with nothing after it to compare.
        _WINDOW,
        None,
        lambda m, c: AmbiguousSizeError(provider=c.provider, wording="either", limit=_window(m)),
    ),
    _rule(
        "bedrock_input_too_long",
        r"Input is too long for requested model",
        "bedrock",
        _input_wording,
    ),
    _rule(
        "openai_input_exceeds_window",
        r"input exceeds the context window",
        "openai",
        _input_wording,
    ),
    _rule(
        "zhipu_prompt_exceeds",
        r"Prompt exceeds max length",
        "zhipu",
        _input_wording,
    ),
    _rule(
        "ollama_input_exceeds",
        r"input length exceeds (?:the )?(?:maximum )?context length",
        "ollama",
        _input_wording,
    ),
    _rule(
        "prompt_too_long_bare",
        # `prompt_too_long` without its counts (a proxy or a log that dropped them), which
        # Anthropic, Ollama and Fireworks word alike: no family. Ollama also says "prompt
        # too long; exceeded max context length by N tokens" (N over an unsaid window).
        # Only as the message or its first clause, and never a length in another unit
        # than tokens ("prompt too long, max 500 characters" is a tool's own check).
        "(?m)"
        + _LEAD
        + r"(?:the )?prompt (?:is )?too long"
        + _CLAUSE_END
        + r"(?![^.\n]{0,80}\b(?:characters?|chars|words)\b)",
        None,
        _input_wording,
    ),
    _rule(
        "llama_cpp_context_size",
        r"request exceeds the available context size",
        "llama.cpp",
        lambda m, c: AmbiguousSizeError(provider=c.provider, wording="either"),
    ),
    _rule(
        "messages_or_completion",
        r"reduce the length of the messages or completion",
        None,
        lambda m, c: AmbiguousSizeError(provider=c.provider, wording="either"),
    ),
    _rule(
        "context_length_exceeded",
        # OpenAI's error code as text, or its words, or MiniMax's (code 2013): some window
        # was passed, not which. The words only as the message ("invalid params, context
        # window exceeds limit (ref: ...)"), not "... exceeds limit of the free plan".
        r"(?m)context_length_exceeded|(?:"
        + _LEAD
        + r"|invalid params,? )context (?:length exceeded|window exceeds limit)(?:"
        + _CLAUSE_END
        + r"| ?\((?:ref\b|\d))",
        None,
        lambda m, c: AmbiguousSizeError(provider=c.provider, wording="either"),
    ),
)

_RATE_LIMIT = re.compile(
    r"rate[_ ]limit|(?:tokens|requests) per (?:min|day)|per-minute|per-day"
    r"|\((?:TPM|TPD|RPM|RPD)\)",
    _I,
)
_RATE_LIMIT_CODE: Final = "rate_limit_exceeded"
# llama.cpp's server gives the counts as fields; in a logged body they are text.
_LLAMA_CPP_FIELDS = re.compile(
    r"\"?n_prompt_tokens\"? ?: ?(\d{1,12}).{0,40}?\"?n_ctx\"? ?: ?(\d{1,12})", _I
)

_CODE_HINTS: Final = frozenset(
    {"context_length_exceeded", "exceed_context_size_error", "string_above_max_length"}
)
#: Anthropic's error type for a request over its byte limit, which its HTTP 413 carries.
_REQUEST_TOO_LARGE: Final = "request_too_large"
#: HTTP status codes run from 100 to 599: an int attribute outside them is something else.
_HTTP_STATUS_MIN: Final = 100
_HTTP_STATUS_MAX: Final = 599
#: HTTP 413 Content Too Large: a request body over the server's byte limit.
_HTTP_CONTENT_TOO_LARGE: Final = 413
#: Rules whose `AmbiguousSizeError` is a lower bound on the prompt beside a cap that does
#: not fit (vLLM's truncated count): the retry helpers shrink the cap, then the prompt.
_LOWER_BOUND_RULES: Final = frozenset({"vllm_output_and_prompt"})

_MAX_MATCHES_PER_RULE: Final = 16


def _apply(
    rules: tuple[_Rule, ...], call: _Call, provider: str | None
) -> tuple[str, SizeVerdict] | None:
    for rule in rules:
        rule_call = _Call(call.text, call.requested, provider or rule.provider)
        for count, match in enumerate(rule.pattern.finditer(call.text)):
            if count >= _MAX_MATCHES_PER_RULE:
                break
            verdict = rule.build(match, rule_call)
            if verdict is not None:
                return rule.name, verdict
    return None


def _classify_text(
    text: str, *, requested: int | None, provider: str | None, messages: str | None = None
) -> tuple[str, SizeVerdict] | None:
    """The first rule that decides *text*, by name, with its verdict; None if none does.

    *messages* are the provider's messages among *text*, one a line, which the wording
    rules read (*text* itself when not given)."""
    found = _apply(_RULES, _Call(text, requested, provider), provider)
    if found is not None:
        return found
    wording = _Call(text if messages is None else messages, requested, provider)
    return _apply(_WORDING_RULES, wording, provider)


# -- reading an error ------------------------------------------------------------------
# An error object comes from code we do not control: any attribute read, str(), .json()
# or mapping walk may raise anything. Each is guarded so that reading never raises, but
# for these, which stop the process or the task rather than describe the error object.
_PROPAGATE: Final = (KeyboardInterrupt, SystemExit, asyncio.CancelledError)

_MAX_NODES: Final = 256
_MAX_CHAIN: Final = 4
#: At most this many exceptions are read out of exception groups for one verdict (a
#: nested group is one of them), so a wide, deep or self-holding group costs a bound.
_MAX_GROUP_MEMBERS: Final = 32


def _attr(obj: object, name: str) -> object:
    try:
        return getattr(obj, name, None)
    except _PROPAGATE:
        raise
    except BaseException:  # noqa: BLE001 - a foreign property may raise anything; treat as absent
        return None


def _is(value: object, kind: type | tuple[type, ...]) -> bool:
    try:
        return isinstance(value, kind)
    except _PROPAGATE:
        raise
    except BaseException:  # noqa: BLE001 - isinstance reads __class__, which may raise
        return False


def _plain(text: str, limit: int) -> str:
    # str's own slice: a str subclass may override __getitem__ to raise.
    return str.__getitem__(text, slice(0, limit))


class _Budget:
    """The characters one call may still read, shared by every scan it makes: a chain's
    links and a group's members together cost one bound, not one each."""

    __slots__ = ("left",)

    def __init__(self) -> None:
        self.left = MAX_SCAN_CHARS


class _Scan:
    """Collector of text fragments and structured numbers, bounded in size."""

    __slots__ = (
        "budget",
        "codes",
        "joined",
        "messages",
        "messages_joined",
        "nodes",
        "numbers",
        "parts",
        "seen",
        "strings",
    )

    def __init__(self, budget: _Budget | None = None) -> None:
        self.parts: list[str] = []
        #: The parts that are the provider's messages (`_MESSAGE_FIELDS`).
        self.messages: list[str] = []
        self.messages_joined: str | None = None
        self.budget = _Budget() if budget is None else budget
        self.strings = 0
        self.nodes = 0
        self.numbers: dict[str, int] = {}
        self.codes: set[str] = set()
        self.seen: set[int] = set()
        self.joined: str | None = None

    def add(self, text: str, *, message: bool = True) -> None:
        """Read *text*; *message* when it is the provider's message, not another field."""
        if self.budget.left <= 0 or not str.__len__(text):
            return
        piece = _plain(text, self.budget.left)
        # One more for the line that joins it to the next: `text` is what rules read.
        self.budget.left -= len(piece) + 1
        self.parts.append(piece)
        self.joined = None
        if message:
            self.messages.append(piece)
            self.messages_joined = None

    def add_bytes(self, data: bytes | bytearray, *, message: bool = True) -> None:
        if self.budget.left > 0:
            text = bytes(data[: self.budget.left * 4]).decode("utf-8", "replace")
            self.add(text, message=message)

    def walk(self, value: object, depth: int = 0, *, message: bool = True) -> None:
        """Collect strings and numeric size fields from a JSON-like body, boundedly.

        A string is a message (*message*) unless a field names it otherwise: in a mapping,
        only the strings of `_MESSAGE_FIELDS` are."""
        if (
            depth > _MAX_BODY_DEPTH
            or self.strings >= _MAX_BODY_STRINGS
            or self.nodes >= _MAX_NODES
            or self.budget.left <= 0
        ):
            return
        self.nodes += 1
        try:
            self._walk_node(value, depth, message)
        except _PROPAGATE:
            raise
        except BaseException:  # noqa: BLE001 - a hostile container may raise anything; skip it
            return

    def _walk_node(self, value: object, depth: int, message: bool) -> None:
        if isinstance(value, str):
            self.strings += 1
            self.add(value, message=message)
            return
        if isinstance(value, bytes | bytearray):
            self.strings += 1
            self.add_bytes(value, message=message)
            return
        if id(value) in self.seen:
            return  # a cycle, or a shared node already read
        self.seen.add(id(value))
        if isinstance(value, Mapping):
            for key, item in itertools.islice(value.items(), _MAX_BODY_STRINGS):
                self._note_field(key, item)
                named = type(key) is str and key.lower() in _MESSAGE_FIELDS
                self.walk(item, depth + 1, message=named)
        elif isinstance(value, list | tuple):
            for item in itertools.islice(value, _MAX_BODY_STRINGS):
                self.walk(item, depth + 1, message=message)

    def _note_field(self, key: object, item: object) -> None:
        if type(key) is not str:
            return
        lowered = key.lower()
        if type(item) is int and lowered in _NUMERIC_FIELDS:
            self.numbers[lowered] = item
        elif type(item) is str and lowered in {"code", "type", "reason"}:
            self.codes.add(item[:64].lower())

    def text(self) -> str:
        if self.joined is None:
            self.joined = _normalized("\n".join(self.parts)[:MAX_SCAN_CHARS])
        return self.joined

    def message_text(self) -> str:
        """The messages as the wording rules read them: each normalized, one a line."""
        if self.messages_joined is None:
            self.messages_joined = "\n".join(_normalized(part) for part in self.messages)
        return self.messages_joined

    def extend(self, other: _Scan) -> None:
        """Add what *other* read, as if this scan had read it (nothing is read again)."""
        self.parts.extend(other.parts)
        self.messages.extend(other.messages)
        self.messages_joined = None
        self.numbers.update(other.numbers)
        self.codes |= other.codes
        self.joined = None


_NUMERIC_FIELDS: Final = frozenset({"n_prompt_tokens", "n_ctx"})
#: The fields of a body (compared lowered) that hold the provider's own message, as
#: providers name them: OpenAI's and Anthropic's ``message``, Ollama's and TGI's
#: ``error``, FastAPI's ``detail`` and ``msg``, AWS Lambda's ``errorMessage``, Baidu's
#: ``error_msg``, MiniMax's ``status_msg``, OpenRouter's ``raw`` (the upstream
#: provider's body, as text), and the ``errors``, ``details``, ``reason``,
#: ``description``, ``errorMsg``, ``err_msg``, ``title`` and ``statusMessage`` of
#: gateways and problem-details bodies (a list under any of them holds messages). A
#: body's other strings (the caller's ``instructions`` or ``input`` echoed back, a
#: ``user_message``, a ``modelId``) are not the provider's words.
_MESSAGE_FIELDS: Final = frozenset(
    {
        "message",
        "error",
        "detail",
        "msg",
        "errormessage",
        "error_message",
        "error_msg",
        "status_msg",
        "raw",
        "errors",
        "details",
        "reason",
        "description",
        "errormsg",
        "err_msg",
        "title",
        "statusmessage",
    }
)
_URL: Final = re.compile(r"\b(?:https?|wss?)://[^\s'\"<>]+", _I)
_RANGE: Final = re.compile(r"([\[(]\d{1,12}),(?=\d{1,12}[\])])")


def _normalized(text: str) -> str:
    """*text* as the rules read it."""
    # Logs and SDK reprs escape quotes and fold lines; undo that before matching.
    # A URL is left out: httpx's message names the request's, and
    # ".../chat/completions" read as the provider's own word for the output.
    text = _URL.sub(" ", text)
    text = text.replace("\\'", "'").replace('\\"', '"').replace("\\n", " ")
    # A range written without a space, "[1,8192]", is two numbers: a number is not
    # read right after "digit," (that is how "8,192" is kept whole).
    text = _RANGE.sub(r"\1, ", text)
    return " ".join(text.split())


def _read_response(response: object, scan: _Scan) -> None:
    """The parsed JSON of an HTTP response, else its text; an unread stream gives nothing."""
    if scan.budget.left <= 0:
        return  # nothing of it could be read: do not parse it
    json_method = _attr(response, "json")
    if callable(json_method):
        try:
            body = json_method()
        except _PROPAGATE:
            raise
        except BaseException:  # noqa: BLE001 - not JSON, a stream not read (httpx), or worse
            body = None
        if body is not None:
            scan.walk(body)
            return
    # httpx raises ResponseNotRead from .text and .content of a stream never read.
    text = _attr(response, "text")
    if _is(text, str):
        scan.walk(text)
        return
    content = _attr(response, "content")
    if _is(content, (bytes, bytearray)):
        scan.walk(content)


def _exception_text(error: BaseException, scan: _Scan) -> None:
    if scan.budget.left <= 0:
        return  # nothing of it could be read: do not render it
    for render in (str, repr):
        try:
            text = render(error)
        except _PROPAGATE:
            raise
        except BaseException:  # noqa: BLE001 - a foreign __str__/__repr__ may raise anything
            continue
        if type(text) is str:
            scan.add(text)
            return
    # Neither renders: the constructor arguments usually hold the message.
    scan.walk(_attr(error, "args"))


def _scan_object(error: object, scan: _Scan) -> None:
    # Structured bodies first: they hold the provider's own message without SDK noise.
    for attribute in ("body", "details", "response"):
        value = _attr(error, attribute)
        if value is None:
            continue
        if _is(value, (Mapping, list, tuple, str, bytes, bytearray)):
            # botocore puts a dict in ``response``; openai and anthropic a dict in ``body``.
            scan.walk(value)
        else:
            _read_response(value, scan)
    for attribute in ("message", "code", "status"):
        value = _attr(error, attribute)
        if type(value) is str:
            scan.add(value, message=attribute == "message")
            if attribute == "code":
                scan.codes.add(value[:64].lower())
    if _is(error, BaseException):
        _exception_text(cast(BaseException, error), scan)


def _chain(error: object) -> Iterator[object]:
    """*error*, then what it was raised from or during, a few links deep, loops cut."""
    seen: set[int] = set()
    current: object = error
    for _ in range(_MAX_CHAIN):
        if current is None or id(current) in seen:
            return
        seen.add(id(current))
        yield current
        cause = _attr(current, "__cause__")
        current = cause if cause is not None else _attr(current, "__context__")
        if not _is(current, BaseException):
            return


def _plain_body(error: object) -> str | bytes | bytearray | None:
    """*error* as a plain str, bytes or bytearray if it is one (or a subclass), else None.

    Only the base type's own slice runs, on its real type (``isinstance`` may be told
    otherwise by ``__class__``): a subclass's ``__len__``, ``lstrip`` or ``__getitem__``
    may raise anything. One more than the scanned length is kept, so a text too long to
    read as JSON is still known to be.
    """
    kind = type(error)
    if issubclass(kind, str):
        return str.__getitem__(cast(str, error), slice(0, MAX_SCAN_CHARS + 1))
    if issubclass(kind, bytes):
        return bytes.__getitem__(cast(bytes, error), slice(0, 4 * MAX_SCAN_CHARS + 1))
    if issubclass(kind, bytearray):
        return bytearray.__getitem__(cast(bytearray, error), slice(0, 4 * MAX_SCAN_CHARS + 1))
    return None


#: What `classify_size_error` reads as a body rather than an exception: a list is how
#: Gemini's REST errors arrive.
_BODIES: Final = (str, bytes, bytearray, Mapping, list, tuple)


def _scan_body(error: object, budget: _Budget) -> _Scan:
    """*error*, one of `_BODIES`, read as a body."""
    scan = _Scan(budget)
    body = _plain_body(error)
    if body is not None:
        parsed = _json_body(body)
        # A JSON text whole is no message: it holds the caller's fields too. Its strings
        # are read as a dict's are, each a message or not by its field.
        scan.walk(body, message=parsed is None)
        if parsed is not None:
            scan.walk(parsed)
    else:
        # A Mapping or a list, or an object whose __class__ claims a body type: walked,
        # guarded.
        scan.walk(error)
    return scan


def _json_body(text: str | bytes | bytearray) -> object:
    """A body given as text or bytes, as the JSON object or array it may be (None if it
    is none), to be read as a dict body is: its strings unescaped (a Go server writes ">"
    as \\u003e) and its numeric fields. *text* is a plain str, bytes or bytearray
    (`_plain_body`)."""
    if len(text) > MAX_SCAN_CHARS or text.lstrip()[:1] not in ("{", "[", b"{", b"["):
        return None
    try:
        return orjson.loads(text)
    except orjson.JSONDecodeError:
        return None  # not JSON: its text alone is read


# The SDK an exception comes from names the provider better than the message wording:
# Bedrock relays Anthropic's messages, and many servers speak OpenAI's.
_SDK_PROVIDERS: Final = {
    "anthropic": "anthropic",
    "openai": "openai",
    "google": "gemini",
    "vertexai": "vertex",
    "botocore": "bedrock",
    "boto3": "bedrock",
    "mistralai": "mistral",
    "cohere": "cohere",
    "groq": "groq",
    "huggingface_hub": "tgi",
    "llama_cpp": "llama-cpp-python",
    "ollama": "ollama",
}


def _sdk_provider(error: object) -> str | None:
    """The provider whose SDK raised *error* or an exception in its chain, first found."""
    if _is(error, _BODIES):
        return None
    for link in _chain(error):
        module = _attr(type(link), "__module__")
        if type(module) is str:
            found = _SDK_PROVIDERS.get(module.partition(".")[0])
            if found is not None:
                return found
    return None


def _status_of(error: object) -> int | None:
    # httpx's HTTPStatusError keeps the status on its response only.
    response = _attr(error, "response")
    for holder in (error, response):
        for attribute in ("status_code", "status", "code", "http_status"):
            value = _attr(holder, attribute)
            if type(value) is int and _HTTP_STATUS_MIN <= value <= _HTTP_STATUS_MAX:
                return value
    # botocore's ClientError keeps it in its response dict, as the service's metadata.
    value = _item(_item(response, "ResponseMetadata"), "HTTPStatusCode")
    if type(value) is int and _HTTP_STATUS_MIN <= value <= _HTTP_STATUS_MAX:
        return value
    return None


def _item(mapping: object, key: str) -> object:
    """*mapping*[*key*] if *mapping* is a mapping that holds it, else None."""
    if not _is(mapping, Mapping):
        return None
    try:
        return cast(Mapping[str, object], mapping).get(key)
    except _PROPAGATE:
        raise
    except BaseException:  # noqa: BLE001 - a foreign mapping's lookup may raise anything
        return None


_Decision = tuple[str | None, SizeVerdict | None]


class _Groups:
    """The exception groups one verdict has read, how many members it may read yet, and
    the characters it may still read (`_Budget`)."""

    __slots__ = ("budget", "left", "seen")

    def __init__(self) -> None:
        self.left = _MAX_GROUP_MEMBERS
        self.seen: set[int] = set()
        self.budget = _Budget()

    def members(self, link: object) -> Iterator[object]:
        """*link*'s exceptions if it is a group not read before, in order, while the
        budget lasts (taken one at a time, so a nested group's are read before the next
        member's: depth-first)."""
        if not _is(link, BaseExceptionGroup) or id(link) in self.seen:
            return
        self.seen.add(id(link))
        exceptions = _attr(link, "exceptions")
        if type(exceptions) is not tuple:  # a subclass's property may give anything
            return
        for member in exceptions:
            if self.left <= 0:
                return
            self.left -= 1
            if _is(member, BaseException):
                yield member


def _decide(
    error: object, requested: int | None, provider: str | None, groups: _Groups | None = None
) -> _Decision:
    """The rule and the verdict for *error*. *provider* is the caller's override.

    Evidence is ranked, strongest first: one exception's own words (its numbers, then its
    wording), the raised one before those it was raised from or during; then every
    link's text together; then error codes; last a bare HTTP 413, which only decides
    when no link's text or code says more (a rate limit anywhere in the chain says more).

    An exception group in the chain (`asyncio.TaskGroup`, ``except*``) holds the errors
    themselves: each of its exceptions is decided as one error, and `_strongest` of
    their verdicts and the chain's own is the group's.
    """
    groups = _Groups() if groups is None else groups
    if _is(error, _BODIES):
        whole = _scan_body(error, groups.budget)
        return _by_weak_evidence(whole, [whole], [], requested, provider)
    links = list(_chain(error))
    found = _decide_chain(links, requested, provider, groups.budget)
    if isinstance(found[1], PromptTooLong):
        return found  # the strongest there is: no group member can change it
    verdicts = [found]
    for link in links:
        verdicts.extend(_decide(member, requested, provider, groups)
                        for member in groups.members(link))  # fmt: skip
    return _strongest(verdicts)


def _strongest(verdicts: list[_Decision]) -> _Decision:
    """The verdict for several errors at once (an exception group's), as *verdicts*
    lists them: the first `PromptTooLong`, since no output cap fixes that one; else the
    `OutputCapTooLarge` with the fewest tokens ``available`` (a cap that fits them all;
    the first when none says); else the first `AmbiguousSizeError`; else none."""
    prompt = next((v for v in verdicts if isinstance(v[1], PromptTooLong)), None)
    if prompt is not None:
        return prompt
    caps = [v for v in verdicts if isinstance(v[1], OutputCapTooLarge)]
    known = [v for v in caps if cast(OutputCapTooLarge, v[1]).available is not None]
    if known:
        return min(known, key=lambda v: cast(int, cast(OutputCapTooLarge, v[1]).available))
    if caps:
        return caps[0]
    return next((v for v in verdicts if v[1] is not None), (None, None))


def _decide_chain(
    links: list[object], requested: int | None, provider: str | None, budget: _Budget
) -> _Decision:
    """`_decide` for an exception and its chain (*links*), groups not opened.

    Each link is read once, within *budget*; the chain's text joined is made of what
    was read, not read again."""
    scans: list[_Scan] = []
    for link in links:
        scan = _Scan(budget)
        _scan_object(link, scan)
        scans.append(scan)
        if len(links) > 1:
            # A fallback call's PromptTooLong, raised while handling another provider's
            # OutputCapTooLarge, is a PromptTooLong (the chain's text joined read as the
            # earlier error, named after the wrong provider).
            found = _by_words(scan, requested, provider or _sdk_provider(link))
            if isinstance(found[1], OutputCapTooLarge | PromptTooLong):
                return found
    if len(scans) == 1:
        return _by_weak_evidence(scans[0], scans, links, requested, provider)
    whole = _Scan(budget)
    for scan in scans:
        # A rate limit is a verdict on its own exception only: a size error raised while
        # handling a 429 (a retry made in its except block) is still a size error, so
        # the 429's words are not read with the other links'.
        if not _is_rate_limit(scan):
            whole.extend(scan)
    return _by_weak_evidence(whole, [whole, *scans], links, requested, provider)


def _is_rate_limit(scan: _Scan) -> bool:
    """Whether *scan*'s error is a rate limit: by its code, or its provider's messages
    (not the caller's fields a body echoes)."""
    return _RATE_LIMIT_CODE in scan.codes or _RATE_LIMIT.search(scan.message_text()) is not None


def _by_words(scan: _Scan, requested: int | None, provider: str | None) -> _Decision:
    """The numeric and wording rules on one scan's text, then llama.cpp's count fields."""
    text = scan.text()
    # "tokens per minute" limits are about rate, not size: waiting is the fix. First, so
    # a quota that names the window as well is still no size error.
    found = (
        None
        if _is_rate_limit(scan)
        else _classify_text(
            text, requested=requested, provider=provider, messages=scan.message_text()
        )
    )
    rule, verdict = found if found is not None else (None, None)
    if isinstance(verdict, OutputCapTooLarge | PromptTooLong):
        return rule, verdict
    # llama.cpp's server gives the counts as fields beside a vague message.
    prompt = scan.numbers.get("n_prompt_tokens")
    window = scan.numbers.get("n_ctx")
    if prompt is None or window is None:
        fields = _LLAMA_CPP_FIELDS.search(text)
        if fields is not None:
            prompt, window = int(fields.group(1)), int(fields.group(2))
    if prompt is not None and window is not None:
        return "llama_cpp_fields", _by_arithmetic(
            prompt, requested, window, provider or "llama.cpp"
        )
    return rule, verdict


def _by_weak_evidence(
    whole: _Scan,
    scans: list[_Scan],
    links: list[object],
    requested: int | None,
    provider: str | None,
) -> _Decision:
    """*whole* (every link's text together) by its words, then by codes and statuses.

    *scans* are *whole* and each link's own scan, whose codes and rate-limit wording
    count. *links* are the exceptions, raised one first; none for a body or a text.
    """
    named = provider or (_sdk_provider(links[0]) if links else None)
    found = _by_words(whole, requested, named)
    if found[1] is not None:
        return found
    codes: set[str] = set().union(*(scan.codes for scan in scans))
    if codes & _CODE_HINTS:
        if not codes & (_CODE_HINTS - {"string_above_max_length"}) and _names_other_field(
            whole.text()
        ):
            # OpenAI's "string too long" for a field that holds no prompt text (a tool's
            # name over 64 characters, a tool call's id, `user`): no cap or shorter
            # prompt fixes it, as Bedrock's schema errors on other fields.
            return None, None
        return "error_code", AmbiguousSizeError(provider=named)
    status_link = next(
        (link for link in links if _status_of(link) == _HTTP_CONTENT_TOO_LARGE), None
    )
    if status_link is None and _REQUEST_TOO_LARGE not in codes:
        return None, None
    if any(_is_rate_limit(scan) for scan in scans):
        # Groq sends its tokens-per-minute quota as a 413 ("Request too large ... on tokens
        # per minute (TPM)"): a quota, not a body or window size, as without it. A wrapper
        # that keeps only the status (raised from it) does not make it one.
        return None, None
    # 413 is a request body too large in bytes; the cap is one number, so it is the prompt.
    if status_link is not None:
        return "http_413", PromptTooLong(
            prompt_tokens=None, limit=None, provider=provider or _sdk_provider(status_link)
        )
    # Anthropic's body of that 413 without the status: a stream's error event (sent with
    # HTTP 200), a logged or proxied body.
    return _REQUEST_TOO_LARGE, PromptTooLong(
        prompt_tokens=None, limit=None, provider=named or "anthropic"
    )


#: The parameter OpenAI names in "Invalid 'messages[2].content': string too long...".
_INVALID_PARAM: Final = re.compile(r"Invalid '([^'\s]{1,200})'")
#: Parameters that hold prompt text: a message's content, an input, the instructions.
_PROMPT_PARAM: Final = re.compile(
    r"(?:messages\[\d+\]\.content|input|instructions|prompt|system)(?:[.\[]|$)"
)


def _names_other_field(text: str) -> bool:
    """Whether *text* names (OpenAI's ``Invalid '<param>'``) a parameter that holds no
    prompt text; False where it names none."""
    found = _INVALID_PARAM.search(text)
    return found is not None and _PROMPT_PARAM.match(found.group(1)) is None


def classify_size_error(
    error: object, *, requested: int | None = None, provider: str | None = None
) -> SizeVerdict | None:
    """Say whether *error* is a size error, and which size: the output cap or the prompt.

    *error* is an exception from a provider SDK (read duck-typed: ``body``, ``response``
    with ``.json()`` or ``.text``, ``message``, ``code``, ``status_code``, the exception it
    was raised from; an exception group's members, each as an error of its own), a body
    (a dict, or a list as Gemini sends), bytes, or the raw text. *requested* is the output
    cap the failed call asked for; it decides messages that give only a total (Cohere,
    Moonshot). *provider* overrides the message family reported in the verdict. Returns
    ``None`` for anything that is not a size error. Raises `LimitError` for a bad
    *requested*; what the error object's own code raises is treated as absent, but for
    `KeyboardInterrupt`, `SystemExit` and `asyncio.CancelledError`, which propagate.
    """
    if requested is not None:
        check_int("requested", requested, minimum=1)
    return _decide(error, requested, provider)[1]


# -- acting on a verdict ---------------------------------------------------------------


def _shrink(current: int, verdict: OutputCapTooLarge, floor: int) -> int | None:
    """The next cap to try, or None when no cap at or above *floor* below *current* fits."""
    available = verdict.available
    if available is not None and available < current:
        return available if available >= floor else None
    # Unknown (or inconsistent) room: halve, but never below the floor.
    proposal = max(current // 2, floor)
    return proposal if proposal < current else None


def _as_cap_verdict(current: int, verdict_or_error: object) -> OutputCapTooLarge:
    if _is(verdict_or_error, OutputCapTooLarge):
        return cast(OutputCapTooLarge, verdict_or_error)
    if _is(verdict_or_error, (PromptTooLong, AmbiguousSizeError)):
        verdict: object = verdict_or_error
    else:
        verdict = classify_size_error(verdict_or_error, requested=current)
    if isinstance(verdict, OutputCapTooLarge):
        return verdict
    raise LimitError(
        "verdict_or_error",
        verdict_or_error,
        f"is not an output-cap error (classified as {type(verdict).__name__})",
    )


def next_output_cap(current: int, verdict_or_error: object, *, floor: int = DEFAULT_FLOOR) -> int:
    """The output cap to retry with after an `OutputCapTooLarge`.

    The tokens ``available`` when the message gave them, else half of *current*, never
    below *floor*. Raises `LimitError` when *verdict_or_error* is not an output-cap
    error or when no cap at or above *floor* and below *current* would fit.
    """
    check_int("current", current, minimum=1)
    check_int("floor", floor, minimum=1)
    verdict = _as_cap_verdict(current, verdict_or_error)
    result = _shrink(current, verdict, floor)
    if result is None:
        raise LimitError(
            "current", current, f"no smaller output cap at or above floor={floor} fits"
        )
    return result


class OutputCapRetry:
    """Retries a model call, shrinking its output cap when that is what did not fit.

    For `OutputCapTooLarge` it shrinks the cap and never touches the prompt; for
    `PromptTooLong` it calls the caller's compressor (if any) and retries with the same
    cap; anything else, including `AmbiguousSizeError` unless *on_ambiguous* says
    otherwise, is re-raised unchanged. vLLM's lower bound on the prompt (ambiguous: the
    cap does not fit, the prompt may not either) shrinks the cap, and once the cap is at
    the floor calls the compressor. After *attempts* calls the last error is re-raised.
    """

    __slots__ = ("attempts", "floor", "on_ambiguous")

    def __init__(
        self,
        *,
        attempts: int = 3,
        floor: int = DEFAULT_FLOOR,
        on_ambiguous: Literal["raise", "shrink_cap"] = "raise",
    ) -> None:
        self.attempts = check_int("attempts", attempts, minimum=1, maximum=_MAX_ATTEMPTS)
        self.floor = check_int("floor", floor, minimum=1)
        check_mode("on_ambiguous", on_ambiguous, ("raise", "shrink_cap"))
        self.on_ambiguous: Literal["raise", "shrink_cap"] = on_ambiguous

    def _step(
        self, error: BaseException, cap: int, can_compress: bool
    ) -> tuple[Literal["cap", "compress"], int, PromptTooLong | None] | None:
        rule, verdict = _decide(error, cap, None)
        if isinstance(verdict, AmbiguousSizeError) and rule in _LOWER_BOUND_RULES:
            # The prompt is at least W - cap + 1 tokens: this cap does not fit, and a
            # smaller one may. One still too large at the floor leaves less than the
            # floor for any answer beside the prompt: the prompt must shrink.
            unknown = OutputCapTooLarge(cap, None, verdict.limit, verdict.provider)
            smaller = _shrink(cap, unknown, self.floor)
            if smaller is not None:
                return ("cap", smaller, None)
            if not can_compress:
                return None
            return ("compress", cap, PromptTooLong(None, verdict.limit, verdict.provider))
        if isinstance(verdict, AmbiguousSizeError) and self.on_ambiguous == "shrink_cap":
            verdict = OutputCapTooLarge(
                requested=cap, available=None, window=None, provider=verdict.provider
            )
        if isinstance(verdict, OutputCapTooLarge):
            smaller = _shrink(cap, verdict, self.floor)
            return None if smaller is None else ("cap", smaller, None)
        if isinstance(verdict, PromptTooLong) and can_compress:
            return ("compress", cap, verdict)
        return None

    def call(
        self,
        call: Callable[[int], T],
        *,
        max_output_tokens: int,
        compress_prompt: Callable[[PromptTooLong], object] | None = None,
    ) -> T:
        """Call ``call(cap)`` until it succeeds, adjusting as the size errors say."""
        cap = check_int("max_output_tokens", max_output_tokens, minimum=1)
        for attempt in range(1, self.attempts + 1):
            try:
                return call(cap)
            except Exception as error:  # re-raised below unless it is a size error we fix
                step = self._step(error, cap, compress_prompt is not None)
                if step is None or attempt == self.attempts:
                    raise
                action, cap, prompt_verdict = step
                if action == "compress" and compress_prompt is not None:
                    assert prompt_verdict is not None
                    result = compress_prompt(prompt_verdict)
                    if inspect.isawaitable(result):
                        # Never awaited, the prompt would not shrink and each retry send
                        # the same one (a paid call each): refused, the coroutine closed.
                        close = getattr(result, "close", None)
                        if callable(close):
                            close()
                        raise TypeError(
                            "compress_prompt returned an awaitable: call_with_output_cap "
                            "does not await; use acall_with_output_cap (or "
                            "OutputCapRetry.acall) for an async compress_prompt"
                        ) from error
        raise AssertionError("unreachable: the loop returns or raises")  # pragma: no cover

    async def acall(
        self,
        call: Callable[[int], Awaitable[T]],
        *,
        max_output_tokens: int,
        compress_prompt: Callable[[PromptTooLong], object] | None = None,
    ) -> T:
        """The async form of `call`; *compress_prompt* may be sync or async."""
        cap = check_int("max_output_tokens", max_output_tokens, minimum=1)
        for attempt in range(1, self.attempts + 1):
            try:
                return await call(cap)
            except asyncio.CancelledError:
                raise
            except Exception as error:  # re-raised below unless it is a size error we fix
                step = self._step(error, cap, compress_prompt is not None)
                if step is None or attempt == self.attempts:
                    raise
                action, cap, prompt_verdict = step
                if action == "compress" and compress_prompt is not None:
                    assert prompt_verdict is not None
                    result = compress_prompt(prompt_verdict)
                    if inspect.isawaitable(result):
                        await result
        raise AssertionError("unreachable: the loop returns or raises")  # pragma: no cover


def call_with_output_cap(
    call: Callable[[int], T],
    *,
    max_output_tokens: int,
    compress_prompt: Callable[[PromptTooLong], object] | None = None,
    attempts: int = 3,
    floor: int = DEFAULT_FLOOR,
    on_ambiguous: Literal["raise", "shrink_cap"] = "raise",
) -> T:
    """One-call form of `OutputCapRetry.call`."""
    retry = OutputCapRetry(attempts=attempts, floor=floor, on_ambiguous=on_ambiguous)
    return retry.call(call, max_output_tokens=max_output_tokens, compress_prompt=compress_prompt)


async def acall_with_output_cap(
    call: Callable[[int], Awaitable[T]],
    *,
    max_output_tokens: int,
    compress_prompt: Callable[[PromptTooLong], object] | None = None,
    attempts: int = 3,
    floor: int = DEFAULT_FLOOR,
    on_ambiguous: Literal["raise", "shrink_cap"] = "raise",
) -> T:
    """One-call form of `OutputCapRetry.acall`."""
    retry = OutputCapRetry(attempts=attempts, floor=floor, on_ambiguous=on_ambiguous)
    return await retry.acall(
        call, max_output_tokens=max_output_tokens, compress_prompt=compress_prompt
    )

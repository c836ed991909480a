"""Read a model API's size error and say which size is wrong: the output cap or the prompt.

The fix differs: an output cap that does not fit what is left of the context needs a
smaller cap, never a compressed prompt. Where a message gives the input tokens and the
window, the verdict is decided by arithmetic (input below the window means the cap is the
problem), not by error codes or ``param`` fields, which are known to mislead.
"""

from __future__ import annotations

import asyncio
import inspect
import re
from collections.abc import Awaitable, Callable, Iterator, Mapping
from dataclasses import dataclass
from typing import Final, Literal, TypeVar

from .._limits import check_int
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
#: At most this many characters of an error's text are scanned; size messages are short.
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
    """A size error whose message does not say which size is wrong.

    ``wording`` is what the message names (``"prompt"`` for "input is too long",
    ``"either"`` for "messages or completion"); it is not a verdict. ``limit`` and
    ``tokens`` are numbers the message gives without saying enough to decide.
    """

    provider: str | None = None
    wording: Literal["prompt", "output_cap", "either"] = "either"
    limit: int | None = None
    tokens: int | None = None


SizeVerdict = OutputCapTooLarge | PromptTooLong | AmbiguousSizeError

# -- patterns --------------------------------------------------------------------------
# Every gap is bounded and no quantifier is nested, so a scan is linear in the text.
_N = r"(\d{1,3}(?:,\d{3})+|\d{1,12})"
_I = re.IGNORECASE

_ANTHROPIC_SUM = re.compile(
    r"input length and .{0,2}max_tokens.{0,2} exceed context limit: ?"
    + _N
    + r" ?\+ ?"
    + _N
    + r" ?> ?"
    + _N,
    _I,
)
_VLLM_CAP = re.compile(
    r"is too large: ?"
    + _N
    + r"\.? ?This model's maximum context length is "
    + _N
    + r" tokens and your request has "
    + _N
    + r" input tokens",
    _I,
)
_CONTEXT_WINDOW = re.compile(
    r"(?:model's|endpoint's|model) maximum context length is " + _N + r" tokens",
    _I,
)
_REQUESTED_BREAKDOWN = re.compile(
    r"[.,]? ?(?:However,? )?you requested (?:about )?" + _N + r" tokens ?\(([^)]{1,200})\)",
    _I,
)
_BREAKDOWN_PART = re.compile(
    _N + r" (in the messages|in your prompt|of [a-z]{1,12} input|in the functions"
    r"|in the completion|for the completion|in the output)",
    _I,
)
_PROMPT_ONLY = re.compile(
    r"[.,]? ?(?:However,? )?(?:your (?:messages|request|prompt) (?:resulted in|has|contains)"
    r"|you requested) " + _N + r" (?:input )?tokens(?! ?\()",
    _I,
)
_ANTHROPIC_PROMPT = re.compile(r"prompt is too long: ?" + _N + r" tokens ?> ?" + _N, _I)
_ANTHROPIC_OUTPUT_MAX = re.compile(
    r"max_tokens: ?" + _N + r" ?> ?" + _N + r", which is the maximum allowed number of output",
    _I,
)
_GEMINI_INPUT = re.compile(
    r"input token count \(" + _N + r"\) exceeds the maximum number of tokens allowed \(" + _N,
    _I,
)
_GEMINI_INPUT_NO_COUNT = re.compile(
    r"input token count exceeds the maximum number of tokens allowed \(?" + _N, _I
)
_VERTEX_INPUT = re.compile(
    r"input token count is " + _N + r" but (?:the )?model only supports up to " + _N, _I
)
_GEMINI_OUTPUT = re.compile(
    r"maxOutputTokens value of "
    + _N
    + r" but the supported range is from "
    + _N
    + r" \(inclusive\) to "
    + _N
    + r" \(exclusive\)",
    _I,
)
_OPENAI_OUTPUT_MAX = re.compile(
    r"max_(?:completion_)?tokens is too large: ?"
    + _N
    + r"\. ?This model supports at most "
    + _N
    + r" completion tokens",
    _I,
)
_BEDROCK_OUTPUT_MAX = re.compile(
    r"maximum tokens you requested exceeds? the model limit of " + _N, _I
)
_TGI_SUM = re.compile(
    r"inputs.{0,2} tokens \+ .{0,2}max_new_tokens.{0,2} +must be <= "
    + _N
    + r"\. ?Given: "
    + _N
    + r" .{0,2}inputs.{0,2} tokens and "
    + _N
    + r" .{0,2}max_new_tokens",
    _I,
)
_TGI_INPUT = re.compile(r"inputs.{0,2} must have less than " + _N + r" tokens\. ?Given: " + _N, _I)
_TGI_OUTPUT = re.compile(r"max_new_tokens.{0,2} must be <= " + _N + r"\. ?Given: " + _N, _I)
_LLAMA_CPP_PY = re.compile(r"Requested tokens \(" + _N + r"\) exceed context window of " + _N, _I)
_LLAMA_CPP_PY_OLD = re.compile(r"Requested tokens exceed context window of " + _N, _I)
_COHERE_TOTAL = re.compile(
    r"total number of tokens \(prompt and prediction\) cannot exceed "
    + _N
    + r" ?- ?received "
    + _N,
    _I,
)
_MISTRAL_PROMPT = re.compile(
    r"Prompt contains " + _N + r" tokens(?: and " + _N + r" draft tokens)?, too large for "
    r"model with " + _N + r" maximum context length",
    _I,
)
_OPENROUTER_AFFORD = re.compile(
    r"You requested up to " + _N + r" tokens, but can only afford " + _N, _I
)
_CONTENT_CONTAINS = re.compile(
    r"Content contains " + _N + r" tokens, which exceeds the maximum allowed context size of " + _N,
    _I,
)
_CURRENT_LENGTH = re.compile(r"Current length is " + _N + r" while limit is " + _N, _I)
_PARAM_ABOVE_MAX = re.compile(
    r"max_(?:completion_|new_|output_)?tokens[^.]{0,80}?expected a value <= "
    + _N
    + r", but got "
    + _N,
    _I,
)
_NOT_LESS_OR_EQUAL = re.compile(_N + r" is not less or equal to " + _N, _I)

# Messages that name a size problem but give no numbers to decide by.
_VAGUE: Final[tuple[tuple[re.Pattern[str], str | None, Literal["prompt", "either"]], ...]] = (
    (re.compile(r"Input is too long for requested model", _I), "bedrock", "prompt"),
    (re.compile(r"input exceeds the context window", _I), "openai", "prompt"),
    (re.compile(r"prompt is too long", _I), None, "prompt"),
    (re.compile(r"request exceeds the available context size", _I), "llama.cpp", "either"),
    (re.compile(r"reduce the length of the messages or completion", _I), None, "either"),
    (re.compile(r"context[_ ]length[_ ]exceeded", _I), None, "either"),
    (
        re.compile(r"exceed(?:s|ed)? (?:the )?(?:model's )?context (?:window|length|limit)", _I),
        None,
        "either",
    ),
    (re.compile(r"maximum context length", _I), None, "either"),
    (re.compile(r"too many tokens", _I), None, "either"),
)

_RATE_LIMIT = re.compile(r"rate[_ ]limit|tokens per min|per-minute", _I)

_CODE_HINTS: Final = frozenset(
    {"context_length_exceeded", "exceed_context_size_error", "string_above_max_length"}
)


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


def _context_window_message(text: str, provider: str | None) -> SizeVerdict | None:
    """OpenAI-style "maximum context length is W tokens. However, you requested ..."."""
    for window_match in _CONTEXT_WINDOW.finditer(text):
        window = _num(window_match.group(1))
        # "about" marks OpenRouter's wording; "endpoint's" is OpenRouter's too.
        family = provider or (
            "openrouter" if "endpoint" in window_match.group(0).lower() else "openai"
        )
        pos = window_match.end()
        breakdown = _REQUESTED_BREAKDOWN.match(text, pos)
        if breakdown is not None:
            total = _num(breakdown.group(1))
            inputs = 0
            output: int | None = None
            seen_input = False
            for part in _BREAKDOWN_PART.finditer(breakdown.group(2)):
                value = _num(part.group(1))
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
        prompt_only = _PROMPT_ONLY.match(text, pos)
        if prompt_only is not None:
            return _prompt_by_arithmetic(_num(prompt_only.group(1)), window, family)
    return None


def _classify_text(text: str, *, requested: int | None, provider: str | None) -> SizeVerdict | None:
    m = _ANTHROPIC_SUM.search(text)
    if m:
        return _by_arithmetic(
            _num(m.group(1)), _num(m.group(2)), _num(m.group(3)), provider or "anthropic"
        )
    m = _VLLM_CAP.search(text)
    if m:
        return _by_arithmetic(
            _num(m.group(3)), _num(m.group(1)), _num(m.group(2)), provider or "vllm"
        )
    verdict = _context_window_message(text, provider)
    if verdict is not None:
        return verdict
    m = _TGI_SUM.search(text)
    if m:
        return _by_arithmetic(
            _num(m.group(2)), _num(m.group(3)), _num(m.group(1)), provider or "tgi"
        )
    m = _ANTHROPIC_PROMPT.search(text)
    if m:
        return _prompt_by_arithmetic(_num(m.group(1)), _num(m.group(2)), provider or "anthropic")
    m = _ANTHROPIC_OUTPUT_MAX.search(text)
    if m:
        return OutputCapTooLarge(
            requested=_num(m.group(1)),
            available=_num(m.group(2)),
            window=None,
            provider=provider or "anthropic",
        )
    m = _GEMINI_INPUT.search(text)
    if m:
        return _prompt_by_arithmetic(_num(m.group(1)), _num(m.group(2)), provider or "gemini")
    m = _VERTEX_INPUT.search(text)
    if m:
        return _prompt_by_arithmetic(_num(m.group(1)), _num(m.group(2)), provider or "vertex")
    m = _GEMINI_INPUT_NO_COUNT.search(text)
    if m:
        # Gemini counts the input against its own input limit, apart from the output.
        return PromptTooLong(
            prompt_tokens=None, limit=_num(m.group(1)), provider=provider or "gemini"
        )
    m = _GEMINI_OUTPUT.search(text)
    if m:
        return OutputCapTooLarge(
            requested=_num(m.group(1)),
            available=_num(m.group(3)) - 1,
            window=None,
            provider=provider or "gemini",
        )
    m = _OPENAI_OUTPUT_MAX.search(text)
    if m:
        return OutputCapTooLarge(
            requested=_num(m.group(1)),
            available=_num(m.group(2)),
            window=None,
            provider=provider or "openai",
        )
    m = _BEDROCK_OUTPUT_MAX.search(text)
    if m:
        return OutputCapTooLarge(
            requested=requested,
            available=_num(m.group(1)),
            window=None,
            provider=provider or "bedrock",
        )
    m = _TGI_INPUT.search(text)
    if m:
        return _prompt_by_arithmetic(_num(m.group(2)), _num(m.group(1)), provider or "tgi")
    m = _TGI_OUTPUT.search(text)
    if m:
        return OutputCapTooLarge(
            requested=_num(m.group(2)),
            available=_num(m.group(1)),
            window=None,
            provider=provider or "tgi",
        )
    m = _LLAMA_CPP_PY.search(text)
    if m:
        return _prompt_by_arithmetic(
            _num(m.group(1)), _num(m.group(2)), provider or "llama-cpp-python"
        )
    m = _LLAMA_CPP_PY_OLD.search(text)
    if m:
        # This older check compared prompt plus max_tokens with the window.
        return _total_with_known_cap(
            None, _num(m.group(1)), requested, provider or "llama-cpp-python"
        )
    m = _COHERE_TOTAL.search(text)
    if m:
        return _total_with_known_cap(
            _num(m.group(2)), _num(m.group(1)), requested, provider or "cohere"
        )
    m = _MISTRAL_PROMPT.search(text)
    if m:
        return _prompt_by_arithmetic(_num(m.group(1)), _num(m.group(3)), provider or "mistral")
    m = _PARAM_ABOVE_MAX.search(text)
    if m:
        return OutputCapTooLarge(
            requested=_num(m.group(2)), available=_num(m.group(1)), window=None, provider=provider
        )
    m = _OPENROUTER_AFFORD.search(text)
    if m:
        # A credit limit, not a context one, but the fix is the same: a smaller cap.
        return OutputCapTooLarge(
            requested=_num(m.group(1)),
            available=_num(m.group(2)),
            window=None,
            provider=provider or "openrouter",
        )
    m = _CONTENT_CONTAINS.search(text)
    if m:
        return _by_arithmetic(_num(m.group(1)), requested, _num(m.group(2)), provider)
    m = _CURRENT_LENGTH.search(text) or _NOT_LESS_OR_EQUAL.search(text)
    if m:
        # A number over a limit, but not which one (Cerebras: does "length" include the
        # completion? Bedrock's schema check: which field?).
        return AmbiguousSizeError(
            provider=provider, wording="either", limit=_num(m.group(2)), tokens=_num(m.group(1))
        )
    if _RATE_LIMIT.search(text):
        # "tokens per minute" limits are about rate, not size: waiting is the fix.
        return None
    for pattern, family, wording in _VAGUE:
        if pattern.search(text):
            return AmbiguousSizeError(provider=provider or family, wording=wording)
    return None


def _total_with_known_cap(
    total: int | None, window: int, requested: int | None, provider: str
) -> SizeVerdict:
    """A total of prompt plus cap: decidable only when the caller says what the cap was."""
    if total is not None and requested is not None and requested <= total:
        return _by_arithmetic(total - requested, requested, window, provider)
    return AmbiguousSizeError(provider=provider, wording="either", limit=window, tokens=total)


# -- reading an error ------------------------------------------------------------------


class _Scan:
    """Per-call collector of text fragments and structured numbers, bounded in size."""

    __slots__ = ("budget", "codes", "numbers", "parts", "strings")

    def __init__(self) -> None:
        self.parts: list[str] = []
        self.budget = MAX_SCAN_CHARS
        self.strings = 0
        self.numbers: dict[str, int] = {}
        self.codes: set[str] = set()

    def add(self, text: str) -> None:
        if self.budget <= 0 or not text:
            return
        piece = text[: self.budget]
        self.budget -= len(piece)
        self.parts.append(piece)

    def walk(self, value: object, depth: int = 0) -> None:
        """Collect strings and numeric size fields from a JSON-like body, boundedly."""
        if depth > _MAX_BODY_DEPTH or self.strings >= _MAX_BODY_STRINGS or self.budget <= 0:
            return
        if isinstance(value, str):
            self.strings += 1
            self.add(value)
        elif isinstance(value, Mapping):
            for key, item in list(value.items())[:_MAX_BODY_STRINGS]:
                if isinstance(key, str):
                    lowered = key.lower()
                    if type(item) is int and lowered in _NUMERIC_FIELDS:
                        self.numbers[lowered] = item
                    elif isinstance(item, str) and lowered in {"code", "type", "reason"}:
                        self.codes.add(item[:64].lower())
                self.walk(item, depth + 1)
        elif isinstance(value, list | tuple):
            for item in value[:_MAX_BODY_STRINGS]:
                self.walk(item, depth + 1)

    def text(self) -> str:
        # Logs and SDK reprs escape quotes and fold lines; undo that before matching.
        joined = "\n".join(self.parts)[:MAX_SCAN_CHARS]
        joined = joined.replace("\\'", "'").replace('\\"', '"').replace("\\n", " ")
        return " ".join(joined.split())


_NUMERIC_FIELDS: Final = frozenset({"n_prompt_tokens", "n_ctx"})


def _body_of(response: object) -> Iterator[object]:
    """The parsed JSON of an HTTP response, or its text; never raises on a bad body."""
    json_method = getattr(response, "json", None)
    if callable(json_method):
        try:
            yield json_method()
            return
        except (ValueError, RuntimeError):
            # Not JSON, or a streamed body not read yet: fall back to the text below.
            pass
    text = getattr(response, "text", None)
    if isinstance(text, str):
        yield text


def _scan(error: object) -> _Scan:
    scan = _Scan()
    if isinstance(error, str):
        scan.add(error)
        return scan
    if isinstance(error, Mapping):
        scan.walk(error)
        return scan
    # Structured bodies first: they hold the provider's own message without SDK noise.
    for attribute in ("body", "details", "response"):
        value = getattr(error, attribute, None)
        if value is None:
            continue
        if isinstance(value, Mapping | list | str):
            # botocore puts a dict in ``response``; openai and anthropic a dict in ``body``.
            scan.walk(value)
        else:
            for body in _body_of(value):
                scan.walk(body)
    for attribute in ("message", "code", "status"):
        value = getattr(error, attribute, None)
        if isinstance(value, str):
            scan.add(value)
            if attribute == "code":
                scan.codes.add(value[:64].lower())
    if isinstance(error, BaseException):
        scan.add(str(error))
    return scan


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
    if isinstance(error, str | Mapping):
        return None
    module = type(error).__module__.partition(".")[0]
    return _SDK_PROVIDERS.get(module)


def _status_of(error: object) -> int | None:
    for attribute in ("status_code", "status", "code", "http_status"):
        value = getattr(error, attribute, None)
        if type(value) is int and 100 <= value <= 599:
            return value
    return None


def classify_size_error(
    error: object, *, requested: int | None = None, provider: str | None = None
) -> SizeVerdict | None:
    """Say whether *error* is a size error, and which size: the output cap or the prompt.

    *error* is an exception from a provider SDK (read duck-typed: ``body``, ``response``
    with ``.json()`` or ``.text``, ``message``, ``code``, ``status_code``), a dict body,
    or the raw text. *requested* is the output cap the failed call asked for; it decides
    messages that give only a total (Cohere). *provider* overrides the message family
    reported in the verdict. Returns ``None`` for anything that is not a size error.
    """
    if requested is not None:
        check_int("requested", requested, minimum=1)
    provider = provider or _sdk_provider(error)
    scan = _scan(error)
    text = scan.text()
    verdict = _classify_text(text, requested=requested, provider=provider)
    if isinstance(verdict, OutputCapTooLarge | PromptTooLong):
        return verdict
    # llama.cpp's server gives the counts as fields beside a vague message.
    prompt = scan.numbers.get("n_prompt_tokens")
    window = scan.numbers.get("n_ctx")
    if prompt is not None and window is not None:
        return _by_arithmetic(prompt, requested, window, provider or "llama.cpp")
    if verdict is not None:
        return verdict
    if scan.codes & _CODE_HINTS:
        return AmbiguousSizeError(provider=provider)
    if not isinstance(error, str | Mapping) and _status_of(error) == 413:
        # 413 is a request body too large in bytes; the cap is one number, so it is the prompt.
        return PromptTooLong(prompt_tokens=None, limit=None, provider=provider)
    return None


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
    if isinstance(verdict_or_error, OutputCapTooLarge):
        return verdict_or_error
    if isinstance(verdict_or_error, PromptTooLong | AmbiguousSizeError):
        verdict: object = verdict_or_error
    else:
        verdict = classify_size_error(verdict_or_error, requested=current)
    if isinstance(verdict, OutputCapTooLarge):
        return verdict
    raise LimitError(
        "verdict_or_error",
        type(verdict_or_error).__name__,
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
    otherwise, is re-raised unchanged. After *attempts* calls the last error is re-raised.
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
        if on_ambiguous not in ("raise", "shrink_cap"):
            raise LimitError("on_ambiguous", on_ambiguous, "must be 'raise' or 'shrink_cap'")
        self.on_ambiguous: Literal["raise", "shrink_cap"] = on_ambiguous

    def _decide(
        self, error: BaseException, cap: int, can_compress: bool
    ) -> tuple[Literal["cap", "compress"], int, PromptTooLong | None] | None:
        verdict = classify_size_error(error, requested=cap)
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
                step = self._decide(error, cap, compress_prompt is not None)
                if step is None or attempt == self.attempts:
                    raise
                action, cap, prompt_verdict = step
                if action == "compress" and compress_prompt is not None:
                    assert prompt_verdict is not None
                    compress_prompt(prompt_verdict)
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
                step = self._decide(error, cap, compress_prompt is not None)
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

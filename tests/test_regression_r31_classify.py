"""r31: real provider size errors the classifier misread (a tester's corpus of 61 error
responses sent through the real SDKs, with Bedrock, stream and report texts beside it).

"The prompt is too long: N, model maximum context length: M" (Ollama, Fireworks, Kimi) lost
its numbers and was named Anthropic's; LM Studio's ``n_keep >= n_ctx`` wording and
SambaNova's "maximum context length of <model> is W" were not size errors at all; and an
input-only wording became ambiguous when any other string of the body (the caller's
instructions, a model's id) held "output" or "completion".
"""

from __future__ import annotations

import dataclasses
import json
from typing import Any

import anthropic
import httpx
import httpx2
import openai
import pytest
from botocore.exceptions import ClientError  # type: ignore[import-untyped]

from jsonbudget import (
    AmbiguousSizeError,
    OutputCapRetry,
    OutputCapTooLarge,
    PromptTooLong,
    SizeVerdict,
    call_with_output_cap,
    classify_size_error,
)

#: The output cap every failed call of the corpus asked for.
CAP = 4096


def _oa(message: str, type_: str = "invalid_request_error", **fields: Any) -> dict[str, Any]:
    return {"error": {"message": message, "type": type_, "param": None, "code": None, **fields}}


def _an(type_: str, message: str) -> dict[str, Any]:
    return {"type": "error", "error": {"type": type_, "message": message}, "request_id": "req_1"}


def _prompt(tokens: int | None, limit: int | None) -> PromptTooLong:
    return PromptTooLong(prompt_tokens=tokens, limit=limit)


def _cap(requested: int | None, available: int, window: int | None = None,
         inputs: int | None = None) -> OutputCapTooLarge:  # fmt: skip
    return OutputCapTooLarge(requested, available, window, None, inputs)


EITHER = AmbiguousSizeError(wording="either")

# -- the corpus: (name, how it arrives, HTTP status, body, verdict without its provider) --
# How it arrives: "openai" / "anthropic" (the SDK builds its error from the response),
# "http" (httpx's raise_for_status), "bedrock" (botocore's ClientError; the body is the
# service's {"message": ...}), "stream" (an error event's body, as the SDK's error holds it),
# "text" (as logged). Texts marked (M) the tester wrote from memory; the others are real
# responses quoted in public code and issues (find_string ids in the tester's report).
_TRUE: list[tuple[str, str, int, Any, SizeVerdict]] = [
    # OpenAI, Azure
    ("oa_ctx_breakdown", "openai", 400, _oa(
        "This model's maximum context length is 128000 tokens. However, you requested 130500 "
        "tokens (126404 in the messages, 4096 in the completion). Please reduce the length of "
        "the messages or completion.", param="messages", code="context_length_exceeded"),
     _cap(4096, 1596, 128000, 126404)),
    ("oa_gpt5_input", "openai", 400, _oa(
        "Input tokens exceed the configured limit of 272000 tokens. Your messages resulted in "
        "301234 tokens. Please reduce the length of the messages.", param="messages",
        code="context_length_exceeded"), _prompt(301234, 272000)),
    ("oa_resp_ctx", "openai", 400, _oa(
        "Your input exceeds the context window of this model. Please adjust your input and try "
        "again.", param="input", code="context_length_exceeded"), _prompt(None, None)),
    # (M)
    ("oa_resp_maxout", "openai", 400, _oa(
        "Invalid 'max_output_tokens': integer above maximum value. Expected a value <= 128000, "
        "but got 200000 instead.", param="max_output_tokens", code="integer_above_max_value"),
     _cap(200000, 128000)),
    ("oa_maxtok_large", "openai", 400, _oa(
        "max_tokens is too large: 100000. This model supports at most 16384 completion tokens, "
        "whereas you provided 100000.", param="max_tokens"), _cap(100000, 16384)),
    ("azure_ctx", "openai", 400, {"error": {
        "message": "This model's maximum context length is 128000 tokens. However, your "
        "messages resulted in 130000 tokens. Please reduce the length of the messages.",
        "type": "invalid_request_error", "param": "messages", "code": "context_length_exceeded",
        "status": 400}}, _prompt(130000, 128000)),
    # Anthropic
    ("an_prompt", "anthropic", 400, _an(
        "invalid_request_error", "prompt is too long: 219898 tokens > 200000 maximum"),
     _prompt(219898, 200000)),
    ("an_sum", "anthropic", 400, _an(
        "invalid_request_error", "input length and `max_tokens` exceed context limit: 197202 + "
        "21333 > 200000, decrease input length or `max_tokens` and try again"),
     _cap(21333, 2798, 200000, 197202)),
    ("an_outmax", "anthropic", 400, _an(
        "invalid_request_error", "max_tokens: 128000 > 64000, which is the maximum allowed "
        "number of output tokens for claude-sonnet-4-5-20250929"), _cap(128000, 64000)),
    # (M) the message text
    ("an_413", "anthropic", 413, _an(
        "request_too_large", "Request exceeds the maximum allowed number of bytes."),
     _prompt(None, None)),
    ("an_1m", "anthropic", 400, _an(
        "invalid_request_error", "prompt is too long: 1048577 tokens > 1000000 maximum"),
     _prompt(1048577, 1000000)),
    # OpenAI-compatible providers
    ("gemini_compat_list", "openai", 400, [{"error": {
        "code": 400, "message": "The input token count (1200293) exceeds the maximum number of "
        "tokens allowed (1048576).", "status": "INVALID_ARGUMENT"}}], _prompt(1200293, 1048576)),
    ("gemini_maxout", "openai", 400, [{"error": {
        "code": 400, "message": "Unable to submit request because it has a maxOutputTokens "
        "value of 100000 but the supported range is from 1 (inclusive) to 65537 (exclusive). "
        "Update the value and try again.", "status": "INVALID_ARGUMENT"}}], _cap(100000, 65536)),
    ("mistral", "openai", 400, {
        "object": "error", "message": "Prompt contains 40960 tokens and 0 draft tokens, too "
        "large for model with 32768 maximum context length", "type": "invalid_request_error",
        "param": None, "code": None}, _prompt(40960, 32768)),
    ("groq_ctx", "openai", 400, _oa(
        "Please reduce the length of the messages or completion.", param="messages",
        code="context_length_exceeded"), EITHER),
    ("groq_maxcomp", "openai", 400, _oa(
        "`max_completion_tokens` must be less than or equal to `32768`, the maximum value for "
        "`max_completion_tokens` is less than the `context_window` for this model",
        param="max_completion_tokens"), _cap(CAP, 32768)),
    ("together_tgi", "openai", 400, _oa(
        "Input validation error: `inputs` tokens + `max_new_tokens` must be <= 8193. Given: "
        "8000 `inputs` tokens and 1000 `max_new_tokens`", param="max_tokens"),
     _cap(1000, 193, 8193, 8000)),
    ("fireworks_prompt", "openai", 400, {"error": {
        "object": "error", "type": "invalid_request_error",
        "message": "The prompt is too long: 262377, model maximum context length: 262143"}},
     _prompt(262377, 262143)),
    ("ollama_prompt", "openai", 400, _oa(
        "The prompt is too long: 450028, model maximum context length: 262144", "api_error"),
     _prompt(450028, 262144)),
    ("ollama_native", "http", 400,
     b'{"error":"The prompt is too long: 208863, model maximum context length: 202752"}',
     _prompt(208863, 202752)),
    ("deepseek", "openai", 400, _oa(
        "This model's maximum context length is 131072 tokens. However, you requested 154963 "
        "tokens (150867 in the messages, 4096 in the completion). Please reduce the length of "
        "the messages or completion."), _prompt(150867, 131072)),
    # (M) the shape of OpenRouter's metadata
    ("openrouter_raw", "openai", 400, {"error": {
        "message": "Provider returned error", "code": 400, "metadata": {
            "raw": json.dumps(_an("invalid_request_error",
                                  "prompt is too long: 210000 tokens > 200000 maximum")),
            "provider_name": "Anthropic"}}, "user_id": "user_x"}, _prompt(210000, 200000)),
    # (M) the "of tool input" part
    ("openrouter_tool_input", "openai", 400, {"error": {
        "message": "This endpoint's maximum context length is 131072 tokens. However, you "
        "requested about 140000 tokens (120000 of text input, 4000 of tool input, 16000 in the "
        "output). Please reduce the length of either one, or use the \"middle-out\" transform "
        "to compress your prompt automatically.", "code": 400}},
     _cap(16000, 7072, 131072, 124000)),
    ("xai", "openai", 400, {
        "code": "Client specified an invalid argument", "error": "This model's maximum prompt "
        "length is 131072 but the request contains 136973 tokens."}, _prompt(136973, 131072)),
    ("cohere_compat", "openai", 400, {
        "message": "too many tokens: total number of tokens in the prompt cannot exceed 4081 - "
        "received 6162. Try using a shorter prompt, or enabling prompt truncating. See "
        "https://docs.cohere.com/reference/chat for more details."}, _prompt(6162, 4081)),
    ("vllm_atleast_c1", "openai", 400, {"error": {
        "message": "This model's maximum context length is 4096 tokens. However, you requested "
        "1 output tokens and your prompt contains at least 4096 input tokens, for a total of at "
        "least 4097 tokens. Please reduce the length of the input prompt or the number of "
        "requested output tokens. (parameter=input_tokens, value=4096)",
        "type": "BadRequestError", "param": "input_tokens", "code": 400}},
     _prompt(4096, 4096)),
    ("vllm_atleast", "openai", 400, {"error": {
        "message": "This model's maximum context length is 32768 tokens. However, you requested "
        "8192 output tokens and your prompt contains at least 24577 input tokens, for a total "
        "of at least 32769 tokens. Please reduce the length of the input prompt or the number "
        "of requested output tokens. (parameter=input_tokens, value=24577)",
        "type": "BadRequestError", "param": "input_tokens", "code": 400}},
     AmbiguousSizeError(None, "either", 32768, 24577)),
    ("vllm_cap", "openai", 400, {"error": {
        "message": "'max_tokens' or 'max_completion_tokens' is too large: 64000. This model's "
        "maximum context length is 64001 tokens and your request has 24235 input tokens (64000 "
        "> 64001 - 24235). (parameter=max_tokens, value=64000)", "type": "BadRequestError",
        "param": "max_tokens", "code": 400}}, _cap(64000, 39766, 64001, 24235)),
    # (M)
    ("vllm_embed", "openai", 400, {
        "object": "error", "message": "This model's maximum context length is 512 tokens. "
        "However, you requested 600 tokens in the input for embedding generation. Please "
        "reduce the length of the input.", "type": "BadRequestError", "param": None,
        "code": 400}, _prompt(600, 512)),
    ("sglang", "openai", 400, {
        "object": "error", "message": "Requested token count exceeds the model's maximum "
        "context length of 32768 tokens. You requested a total of 40000 tokens: 39000 tokens "
        "from the input messages and 1000 tokens for the completion. Please reduce the number "
        "of tokens in the input messages or the completion to fit within the limit.",
        "type": "BadRequestError", "param": None, "code": 400}, _prompt(39000, 32768)),
    ("llamacpp", "openai", 400, {"error": {
        "code": 400, "message": "the request exceeds the available context size, try "
        "increasing it", "type": "exceed_context_size_error", "n_prompt_tokens": 14429,
        "n_ctx": 8192}}, _prompt(14429, 8192)),
    ("litellm_proxy", "openai", 400, {"error": {
        "message": "litellm.ContextWindowExceededError: litellm.BadRequestError: "
        "AnthropicException - {\"type\":\"error\",\"error\":{\"type\":\"invalid_request_error\","
        "\"message\":\"prompt is too long: 209353 tokens > 199999 maximum\"}}\nReceived Model "
        "Group=claude\nAvailable Model Group Fallbacks=None", "type": None, "param": None,
        "code": "400"}}, _prompt(209353, 199999)),
    ("sambanova", "openai", 400, {"error": {
        "message": "The maximum context length of Meta-Llama-3.1-405B-Instruct is 8192. "
        "However, answering your request will take 31902 tokens. Please reduce the length of "
        "the messages.", "type": "invalid_request_error"}}, _prompt(31902, 8192)),
    # Its count holds the cap it names: CAP of it, so the prompt is the rest.
    ("sambanova_cap", "openai", 400, {"error": {
        "message": "The maximum context length of Meta-Llama-3.1-405B-Instruct is 8192. "
        "However, answering your request will take 32929 tokens. Please reduce the length of "
        "the messages or the specified max_completion_tokens value.\n.",
        "type": "invalid_request_error"}}, _prompt(32929 - CAP, 8192)),
    ("nginx_413", "openai", 413,
     b"<html>\r\n<head><title>413 Request Entity Too Large</title></head>\r\n<body>\r\n<center>"
     b"<h1>413 Request Entity Too Large</h1></center>\r\n<hr><center>nginx</center>\r\n</body>"
     b"\r\n</html>\r\n", _prompt(None, None)),
    # (M)
    ("cf_413", "anthropic", 413,
     b"<html><head><title>413 Payload Too Large</title></head><body>error code: 413</body>"
     b"</html>", _prompt(None, None)),
    # Bedrock, through botocore
    ("br_input_too_long", "bedrock", 400, "The model returned the following errors: Input is "
     "too long for requested model.", _prompt(None, None)),
    ("br_anthropic_sum", "bedrock", 400, "The model returned the following errors: input "
     "length and `max_tokens` exceed context limit: 195000 + 8192 > 200000, decrease input "
     "length or `max_tokens` and try again", _cap(8192, 5000, 200000, 195000)),
    ("br_prompt_long", "bedrock", 400, "The model returned the following errors: prompt is too "
     "long: 201000 tokens > 200000 maximum", _prompt(201000, 200000)),
    ("br_llama_maxtok", "bedrock", 400, "The maximum tokens you requested exceeds the model "
     "limit of 2048. Try again with a maximum tokens value that is lower than 2048.",
     _cap(CAP, 2048)),
    ("br_mistral", "bedrock", 400, "Prompt contains 40000 tokens, too large for model with "
     "32768 maximum context length", _prompt(40000, 32768)),
    ("br_too_long_plain", "bedrock", 400, "Input is too long for requested model.",
     _prompt(None, None)),
    ("br_payload_413", "bedrock", 413, "Input is too long", _prompt(None, None)),
    # Errors in a stream
    ("st_oa_ctx", "stream", 200, {
        "message": "This model's maximum context length is 8192 tokens. However, you requested "
        "9000 tokens (5000 in the messages, 4000 in the completion). Please reduce the length "
        "of the messages or completion.", "type": "invalid_request_error",
        "code": "context_length_exceeded"}, _cap(4000, 3192, 8192, 5000)),
    ("st_vllm", "stream", 200, {
        "object": "error", "message": "The decoder prompt (length 10127) is longer than the "
        "maximum model length of 8192.", "type": "BadRequestError", "param": None, "code": 400},
     _prompt(10127, 8192)),
    ("st_an_request_too_large", "stream", 200, _an(
        "request_too_large", "Request exceeds the maximum allowed number of bytes."),
     _prompt(None, None)),
    ("st_resp_error", "stream", 200, {
        "type": "error", "code": "context_length_exceeded", "message": "Your input exceeds the "
        "context window of this model. Please adjust your input and try again.",
        "param": "input", "sequence_number": 1}, _prompt(None, None)),
    ("st_resp_error_nested", "stream", 200, {
        "type": "error", "sequence_number": 2, "error": {
            "type": "invalid_request_error", "code": "context_length_exceeded", "message":
            "Your input exceeds the context window of this model. Please adjust your input and "
            "try again.", "param": "input"}}, _prompt(None, None)),
    # The report's own texts
    ("ollama_cloud", "text", 400,
     "The prompt is too long: 1204597, model maximum context length: 1048576",
     _prompt(1204597, 1048576)),
    ("ollama_logged", "text", 400, 'Ollama HTTP 400: {"error":"The prompt is too long: 208863, '
     'model maximum context length: 202752"}', _prompt(208863, 202752)),
    ("kimi_litellm", "text", 400, "litellm.BadRequestError: OpenAIException - The prompt is too "
     "long: 365407, model maximum context length: 262143", _prompt(365407, 262143)),
    ("lm_studio_n_keep", "openai", 400, {
        "error": "The number of tokens to keep from the initial prompt is greater than the "
        "context length (n_keep: 5228 >= n_ctx: 4096). Try to load the model with a larger "
        "context length, or provide a shorter input."}, _prompt(5228, 4096)),
    ("lm_studio_no_counts", "openai", 400, {"error": {
        "message": "The number of tokens to keep from the initial prompt is greater than the "
        "context length."}}, _prompt(None, None)),
    ("bedrock_model_id", "text", 400, {
        "message": "Input is too long for requested model.", "modelId": "my-output-tuned-model"},
     _prompt(None, None)),
    # MiniMax (code 2013), as a regression test quotes the HTTP 400 it met (find_string id
    # 66488721030); the tester had it from one test file only.
    ("minimax", "text", 400, "HTTP 400: Error code: 400 - {'error': 'invalid params, context "
     "window exceeds limit (ref: ...)'}", EITHER),
]  # fmt: skip


def _responses_event(kind: str, **response: Any) -> dict[str, Any]:
    """A Responses API stream event as ``model_dump()`` gives it."""
    base = {"id": "resp_1", "object": "response", "created_at": 1, "model": "gpt-5",
            "status": "in_progress", "output": [], "parallel_tool_calls": True,
            "tool_choice": "auto", "tools": [], "instructions": "Keep the output short.",
            "max_output_tokens": 4000, "error": None, "incomplete_details": None}  # fmt: skip
    return {"type": kind, "response": {**base, **response}, "sequence_number": 1}


_CONTEXT_ERROR = {"code": "context_length_exceeded", "message": "Your input exceeds the context "
                  "window of this model. Please adjust your input and try again."}  # fmt: skip

_TRUE += [
    (f"st_resp_failed_{name}", "stream", 200,
     _responses_event("response.failed", status="failed", error=_CONTEXT_ERROR,
                      instructions=instructions), _prompt(None, None))
    for name, instructions in (("ctx", "Keep the output short."),
                               ("no_instructions", None),
                               ("completions", "You write code completions."))
]  # fmt: skip

_LOOK_ALIKES: list[tuple[str, str, int, Any]] = [
    ("oa_tpm_429", "openai", 429, _oa(
        "Request too large for gpt-4o in organization org-abc on tokens per min (TPM): Limit "
        "30000, Requested 45000. The input or output tokens must be reduced in order to run "
        "successfully. Visit https://platform.openai.com/account/rate-limits to learn more.",
        "tokens", code="rate_limit_exceeded")),
    ("oa_quota", "openai", 429, _oa(
        "You exceeded your current quota, please check your plan and billing details. For more "
        "information on this error, read the docs: https://platform.openai.com/docs/guides/"
        "error-codes/api-errors.", "insufficient_quota", code="insufficient_quota")),
    # (M)
    ("oa_min", "openai", 400, _oa(
        "Invalid 'max_tokens': integer below minimum value. Expected a value >= 1, but got 0 "
        "instead.", param="max_tokens", code="integer_below_min_value")),
    ("oa_model", "openai", 404, _oa(
        "The model `gpt-9` does not exist or you do not have access to it.",
        code="model_not_found")),
    ("oa_unsupported", "openai", 400, _oa(
        "Unsupported parameter: 'max_tokens' is not supported with this model. Use "
        "'max_completion_tokens' instead.", param="max_tokens", code="unsupported_parameter")),
    ("azure_filter", "openai", 400, {"error": {
        "message": "The response was filtered due to the prompt triggering Azure OpenAI's "
        "content management policy. Please modify your prompt and retry. To learn more about "
        "our content filtering policies please read our documentation: "
        "https://go.microsoft.com/fwlink/?linkid=2198766", "type": None, "param": "prompt",
        "code": "content_filter", "status": 400, "innererror": {
            "code": "ResponsibleAIPolicyViolation",
            "content_filter_result": {"hate": {"filtered": True, "severity": "high"}}}}}),
    ("azure_429", "openai", 429, {"error": {
        "code": "429", "message": "Requests to the ChatCompletions_Create Operation under Azure "
        "OpenAI API version 2024-10-21 have exceeded token rate limit of your current AIServices "
        "S0 pricing tier. Please retry after 60 seconds. Please contact Azure support service "
        "if you would like to further increase the default rate limit."}}),
    ("an_429", "anthropic", 429, _an(
        "rate_limit_error", "This request would exceed the rate limit for your organization "
        "(7a1b) of 40,000 input tokens per minute. For details, refer to: "
        "https://docs.claude.com/en/api/rate-limits. You can see the response headers for "
        "current usage. Please reduce the prompt length or the maximum tokens requested, or try "
        "again later. You may also contact sales at https://www.anthropic.com/contact-sales to "
        "discuss your options for a rate limit increase.")),
    # (M)
    ("an_429_out", "anthropic", 429, _an(
        "rate_limit_error", "This request would exceed the rate limit for your organization "
        "(7a1b) of 8,000 output tokens per minute. For details, refer to: "
        "https://docs.claude.com/en/api/rate-limits.")),
    ("an_529", "anthropic", 529, _an("overloaded_error", "Overloaded")),
    ("an_thinking", "anthropic", 400, _an(
        "invalid_request_error", "`max_tokens` must be greater than `thinking.budget_tokens`. "
        "Please consult our documentation at https://docs.claude.com/en/docs/build-with-claude/"
        "extended-thinking#max-tokens-and-context-window-size")),
    ("an_credit", "anthropic", 400, _an(
        "invalid_request_error", "Your credit balance is too low to access the Anthropic API. "
        "Please go to Plans & Billing to upgrade or purchase credits.")),
    ("gemini_429", "openai", 429, [{"error": {
        "code": 429, "message": "You exceeded your current quota, please check your plan and "
        "billing details. For more information on this error, head to: "
        "https://ai.google.dev/gemini-api/docs/rate-limits.\n* Quota exceeded for metric: "
        "generativelanguage.googleapis.com/generate_content_free_tier_input_token_count, "
        "limit: 250000, model: gemini-2.5-flash\nPlease retry in 31.5s.",
        "status": "RESOURCE_EXHAUSTED"}}]),
    ("groq_413_tpm", "openai", 413, _oa(
        "Request too large for model `llama-3.3-70b-versatile` in organization `org_01` service "
        "tier `on_demand` on tokens per minute (TPM): Limit 12000, Requested 15088, please "
        "reduce your message size and try again. Need more tokens? Upgrade to Dev Tier today "
        "at https://console.groq.com/settings/billing", "tokens", code="rate_limit_exceeded")),
    ("groq_429_tpd", "openai", 429, _oa(
        "Rate limit reached for model `llama-3.3-70b-versatile` in organization `org_01` "
        "service tier `on_demand` on tokens per day (TPD): Limit 100000, Used 99000, Requested "
        "2000. Please try again in 14m24s.", "tokens", code="rate_limit_exceeded")),
    # (M)
    ("together_429", "openai", 429, _oa(
        "You have reached the rate limit specific to this model "
        "meta-llama/Llama-3.3-70B-Instruct-Turbo. The maximum rate limit for this model is 60.0 "
        "queries and 180000 tokens per minute.", "model_rate_limit")),
    ("deepseek_402", "openai", 402, _oa("Insufficient Balance", "unknown_error")),
    ("openrouter_402", "openai", 402, {"error": {
        "message": "Insufficient credits. Add more using https://openrouter.ai/settings/credits",
        "code": 402}}),
    ("vllm_min", "openai", 400, {
        "object": "error", "message": "max_tokens must be at least 1, got -186.",
        "type": "BadRequestError", "param": None, "code": 400}),
    # (M)
    ("ollama_mem", "openai", 500, {"error": {
        "message": "model requires more system memory (12.0 GiB) than is available (8.0 GiB)",
        "type": "api_error"}}),
    # (M)
    ("litellm_budget", "openai", 400, {"error": {
        "message": "Budget has been exceeded! Current cost: 10.52, Max budget: 10.0",
        "type": "budget_exceeded", "param": None, "code": "400"}}),
    # (M)
    ("litellm_rl", "openai", 429, {"error": {
        "message": "LiteLLM Rate Limit Handler for rate limit type = key. Crossed TPM / RPM / "
        "Max Parallel Request Limit. current rpm: 5, rpm limit: 5, current tpm: 1200, tpm "
        "limit: 1000", "type": "None", "param": "None", "code": "429"}}),
    # (M)
    ("mistral_429", "openai", 429, {
        "object": "error", "message": "Requests rate limit exceeded", "type": "rate_limited",
        "param": None, "code": "1300"}),
    ("cohere_429", "openai", 429, {
        "message": "You are using a Trial key, which is limited to 10 API calls / minute. You "
        "can continue to use the Trial key for free or upgrade to a Production key with higher "
        "rate limits at 'https://dashboard.cohere.com/api-keys'."}),
    ("gemini_overloaded", "openai", 503, [{"error": {
        "code": 503, "message": "The model is overloaded. Please try again later.",
        "status": "UNAVAILABLE"}}]),
    # Bedrock, through botocore
    ("br_throttle_tokens", "bedrock", 429, "Too many tokens, please wait before trying again."),
    ("br_throttle_requests", "bedrock", 429,
     "Too many requests, please wait before trying again."),
    ("br_quota_tokens_day", "bedrock", 429,
     "Too many tokens per day, please wait before trying again."),
    ("br_service_unavailable", "bedrock", 503, "Bedrock is unable to process your request."),
    ("br_model_not_ready", "bedrock", 429,
     "Model is not ready for inference. Wait and try your request again."),
    ("br_access_denied", "bedrock", 403,
     "You don't have access to the model with the specified model ID."),
    ("br_top_k", "bedrock", 400, "Malformed input request: #/top_k: 501 is not less or equal "
     "to 500, please reformat your input and try again."),
    ("br_thinking", "bedrock", 400, "The model returned the following errors: `max_tokens` "
     "must be greater than `thinking.budget_tokens`. Please consult our documentation at "
     "https://docs.claude.com/en/docs/build-with-claude/extended-thinking#max-tokens-and-"
     "context-window-size"),
    # Errors in a stream
    ("st_openrouter_server", "stream", 200, {
        "code": "server_error", "message": "Provider disconnected unexpectedly"}),
    ("st_oa_rate_limit", "stream", 200, {
        "message": "Rate limit reached for gpt-4o on tokens per min (TPM): Limit 30000, Used "
        "29000, Requested 4000.", "type": "tokens", "code": "rate_limit_exceeded"}),
    ("st_an_overloaded", "stream", 200, _an("overloaded_error", "Overloaded")),
    ("st_an_api_error", "stream", 200, _an("api_error", "Internal server error")),
    ("st_an_rate_limit", "stream", 200, _an(
        "rate_limit_error", "This request would exceed the rate limit for your organization of "
        "8,000 output tokens per minute.")),
    ("st_resp_failed_server", "stream", 200, _responses_event(
        "response.failed", status="failed",
        error={"code": "server_error", "message": "The model produced invalid content."})),
    ("st_resp_incomplete", "stream", 200, _responses_event(
        "response.incomplete", status="incomplete",
        incomplete_details={"reason": "max_output_tokens"})),
]  # fmt: skip


def _raw(body: Any) -> bytes:
    return body if isinstance(body, bytes) else json.dumps(body).encode()


def _arrivals(via: str, status: int, body: Any) -> list[object]:
    """*body* as a caller meets it: the SDK's error built from the response, and the body
    itself where the status is not what decides."""
    url = "https://api.example.invalid/v1/chat/completions"
    if via in {"openai", "anthropic"}:
        kind = "application/json" if not isinstance(body, bytes) else "text/html"
        response = httpx2.Response(status, content=_raw(body), headers={"content-type": kind},
                                   request=httpx2.Request("POST", url))  # fmt: skip
        client: openai.OpenAI | anthropic.Anthropic = (
            openai.OpenAI(api_key="k", base_url="https://api.example.invalid/v1")
            if via == "openai"
            else anthropic.Anthropic(api_key="k", base_url="https://api.example.invalid")
        )
        error: object = client._make_status_error_from_response(response)
    elif via == "http":
        plain = httpx.Response(status, content=_raw(body), request=httpx.Request("POST", url))
        try:
            plain.raise_for_status()
        except httpx.HTTPStatusError as raised:
            error = raised
    elif via == "bedrock":
        error = ClientError(
            {"Error": {"Code": "ValidationException", "Message": body},
             "ResponseMetadata": {"HTTPStatusCode": status}},
            "Converse",
        )  # fmt: skip
        body = {"message": body}
    else:
        return [body]
    return [error] if status == 413 else [error, body]


def _without_provider(verdict: SizeVerdict | None) -> SizeVerdict | None:
    return None if verdict is None else dataclasses.replace(verdict, provider=None)


@pytest.mark.parametrize(
    ("via", "status", "body", "expected"),
    [case[1:] for case in _TRUE],
    ids=[case[0] for case in _TRUE],
)
def test_corpus_size_error(via: str, status: int, body: Any, expected: SizeVerdict) -> None:
    for arrival in _arrivals(via, status, body):
        verdict = classify_size_error(arrival, requested=CAP)
        assert _without_provider(verdict) == expected, type(arrival)


@pytest.mark.parametrize(
    ("via", "status", "body"),
    [case[1:] for case in _LOOK_ALIKES],
    ids=[case[0] for case in _LOOK_ALIKES],
)
def test_corpus_look_alike_is_no_size_error(via: str, status: int, body: Any) -> None:
    for arrival in _arrivals(via, status, body):
        assert classify_size_error(arrival, requested=CAP) is None, type(arrival)


# -- 1. "The prompt is too long: N, model maximum context length: M" ----------------------

COLON_FORMS = [
    # Ollama's daemon (find_string id 56719806100), Ollama Cloud (71389270564), Fireworks'
    # client (61202347324), Kimi K2.6 relayed by LiteLLM (51893700472).
    ('{"error":"The prompt is too long: 208863, model maximum context length: 202752"}',
     208863, 202752),
    ("The prompt is too long: 1204597, model maximum context length: 1048576", 1204597, 1048576),
    ('{"error": {"message": "The prompt is too long: 262377, model maximum context length: '
     '262143"}}', 262377, 262143),
    ("litellm.BadRequestError: OpenAIException - The prompt is too long: 365407, model maximum "
     "context length: 262143", 365407, 262143),
]  # fmt: skip


@pytest.mark.parametrize(("text", "tokens", "window"), COLON_FORMS)
def test_regression_prompt_too_long_with_a_colon_keeps_its_numbers_and_no_family(
    text: str, tokens: int, window: int
) -> None:
    """Found by a tester: only Anthropic's "P tokens > W maximum" was read for numbers; this
    form, shared by Ollama, Fireworks and Kimi's hosts, fell to the bare wording rule:
    PromptTooLong(None, None, "anthropic")."""
    assert classify_size_error(text) == PromptTooLong(tokens, window, None)
    # A prompt below the window cannot be literally too long: said so, as for Anthropic's.
    below = text.replace(str(tokens), "10", 1)
    assert classify_size_error(below) == AmbiguousSizeError(None, "prompt", window, 10)


def test_regression_prompt_too_long_names_anthropic_only_for_anthropics_form() -> None:
    """Found by a tester: the wording without counts, which Anthropic, Ollama and Fireworks
    share, named Anthropic; the docs say the family is the one whose wording matched."""
    assert classify_size_error("Internal error: Prompt is too long") == PromptTooLong(
        None, None, None
    )
    anthropics = "prompt is too long: 219898 tokens > 200000 maximum"
    assert classify_size_error(anthropics) == PromptTooLong(219898, 200000, "anthropic")
    # The SDK still names the provider it reached, with the numbers now.
    error = _arrivals("openai", 400, _oa(COLON_FORMS[1][0]))[0]
    assert classify_size_error(error) == PromptTooLong(1204597, 1048576, "openai")


def test_regression_ollamas_prompt_too_long_by_n_tokens_is_the_prompt() -> None:
    """The same gap in the bare rule: Ollama's other wording drops the "is"."""
    text = "400 `prompt too long; exceeded max context length by 100918 tokens`"
    assert classify_size_error(text) == PromptTooLong(None, None, None)


# -- 2. LM Studio's "tokens to keep ... (n_keep: N >= n_ctx: W)" ---------------------------

LM_STUDIO = {"error": "The number of tokens to keep from the initial prompt is greater than "
             "the context length (n_keep: 5228 >= n_ctx: 4096). Try to load the model with a "
             "larger context length, or provide a shorter input."}  # fmt: skip


def test_regression_lm_studios_n_keep_wording_is_the_prompt() -> None:
    """Found by a tester: only LM Studio's older "Trying to keep the first N tokens" was
    known; its current wording was no size error, so the retry never compressed."""
    assert classify_size_error(LM_STUDIO) == PromptTooLong(5228, 4096, "lm-studio")
    counted = LM_STUDIO["error"]
    assert classify_size_error(counted.replace(" (", ".(")) == PromptTooLong(
        5228, 4096, "lm-studio"
    )
    bare = {"error": {"message": counted.split(" (", 1)[0] + "."}}
    assert classify_size_error(bare) == PromptTooLong(None, None, "lm-studio")

    class LMStudioError(Exception):
        def __init__(self, body: dict[str, Any]) -> None:
            super().__init__(str(body))
            self.body = body

    prompt = ["a long history", "the question"]
    compressed: list[PromptTooLong] = []

    def call(cap: int) -> str:
        if len(prompt) > 1:
            raise LMStudioError(LM_STUDIO)
        return f"ok:{cap}"

    def compress(verdict: PromptTooLong) -> None:
        compressed.append(verdict)
        del prompt[:-1]

    assert call_with_output_cap(call, max_output_tokens=1000, compress_prompt=compress) == (
        "ok:1000"
    )
    assert compressed == [PromptTooLong(5228, 4096, "lm-studio")]


# -- 3. SambaNova's "maximum context length of <model> is W" -------------------------------

SAMBANOVA = (
    "The maximum context length of Meta-Llama-3.1-405B-Instruct is 8192. However, answering "
    "your request will take {} tokens. Please reduce the length of the messages{}."
)


def test_regression_sambanovas_window_with_a_model_name_is_read_with_its_numbers() -> None:
    """Found by a tester: the window was read only right after "maximum context length
    is/of", so SambaNova's message, with the model's name between, was no size error."""
    # litellm's SambanovaException (find_string id 10945969356): the count is the prompt's.
    text = "litellm.BadRequestError: SambanovaException - " + SAMBANOVA.format(31902, "")
    assert classify_size_error(text) == PromptTooLong(31902, 8192, "sambanova")
    # Sambanova's /complete (id 11579696839): its advice names the cap, which the count
    # holds too: a total, decided once the cap is known.
    total = SAMBANOVA.format(32929, " or the specified max_completion_tokens value")
    assert classify_size_error(total) == AmbiguousSizeError("sambanova", "either", 8192, 32929)
    assert classify_size_error(total, requested=1024) == PromptTooLong(31905, 8192, "sambanova")
    assert classify_size_error(total, requested=30000) == OutputCapTooLarge(
        30000, 5263, 8192, "sambanova", 2929
    )
    # Any advice that names the cap says so, not only that one.
    either = SAMBANOVA.format(32929, " or completion")
    assert classify_size_error(either) == AmbiguousSizeError("sambanova", "either", 8192, 32929)
    # The window alone, nothing after it to compare, in tokens (r32: "is 8192." alone, in
    # no unit and without SambaNova's count after it, is no window: see below).
    alone = "The maximum context length of Meta-Llama-3.1-405B-Instruct is 8192 tokens."
    assert classify_size_error(alone) == AmbiguousSizeError(None, "either", 8192)
    # The retry knows the cap it asked for: a 6000-token prompt leaves 2192 for the answer.
    caps: list[int] = []

    def call(cap: int) -> str:
        caps.append(cap)
        if 6000 + cap > 8192:
            raise ValueError(SAMBANOVA.format(6000 + cap, " or the specified "
                                              "max_completion_tokens value"))  # fmt: skip
        return "ok"

    assert OutputCapRetry().call(call, max_output_tokens=4000) == "ok"
    assert caps == [4000, 2192]


# -- 4. input-only wording read from the provider's message ---------------------------------


@pytest.mark.parametrize(
    "instructions", ["Keep the output short.", "You write code completions.", None]
)
def test_regression_input_wording_reads_the_providers_message_not_other_fields(
    instructions: str | None,
) -> None:
    """Found by a tester: "output" or "completion" anywhere in the body (here the caller's
    own instructions in a Responses ``response.failed`` event) made "Your input exceeds the
    context window" AmbiguousSizeError(wording="prompt"), and the retry re-raised it."""
    event = _responses_event("response.failed", status="failed", error=_CONTEXT_ERROR,
                             instructions=instructions)  # fmt: skip
    assert classify_size_error(event) == PromptTooLong(None, None, "openai")
    bedrock = {"message": "Input is too long for requested model.",
               "modelId": "my-output-tuned-model"}  # fmt: skip
    assert classify_size_error(bedrock) == PromptTooLong(None, None, "bedrock")
    # The SDK's error holds the whole body in its text too: its message field still decides.
    body = {"error": {**_CONTEXT_ERROR, "param": "input"}, "instructions": instructions}
    error = _arrivals("openai", 400, body)[0]
    assert classify_size_error(error) == PromptTooLong(None, None, "openai")


def test_input_wording_that_names_the_cap_itself_stays_ambiguous() -> None:
    """The fix reads the message, not less: one that names the cap is still ambiguous."""
    message = "Input is too long for requested model; lower max_tokens or the input."
    expected = AmbiguousSizeError("bedrock", "prompt")
    assert classify_size_error({"message": message, "modelId": "m"}) == expected
    assert classify_size_error(message) == expected
    error = _arrivals("bedrock", 400, message)[0]
    assert classify_size_error(error) == expected


# -- the same gaps elsewhere, and what must stay unclassified -------------------------------


def test_regression_minimax_context_window_wording_is_a_size_error() -> None:
    """MiniMax's "invalid params, context window exceeds limit" (code 2013) says a window
    was passed, not by what: ambiguous, as OpenAI's context_length_exceeded text."""
    text = "Provider error: 400 invalid params, context window exceeds limit"
    assert classify_size_error(text) == AmbiguousSizeError(None, "either")


@pytest.mark.parametrize(
    "text",
    [
        "The maximum context length of this model is 8192 tokens per minute for your tier.",
        "Rate limit reached: the prompt is too long for tokens per minute (TPM) of your tier.",
        "The number of tokens to keep must be at least 1.",
        "max_tokens must be at least 1, got -186.",
        "answering your request will take 31902 tokens of your quota",
        "Your prompt was flagged by the content filter: output policy.",
    ],
)
def test_the_widened_rules_leave_look_alikes_alone(text: str) -> None:
    assert classify_size_error(text) is None


# -- r32: the widened rules' false positives ------------------------------------------------
# A sweep tester found that the rules above, widened to read the real wordings, also read
# texts that are no size error: each below was a size verdict on the widened code (and
# `None` before it), and a PromptTooLong makes the retry helpers compress the caller's
# prompt. A false verdict is worse than a miss here.

_SERVER_ERROR = {
    "code": "server_error",
    "message": "The model produced invalid content. Consider modifying your prompt if you are "
    "seeing this error persistently.",
}

BARE_LOOK_ALIKES: list[Any] = [
    # The caller's instructions in a response.failed event for a server error.
    _responses_event("response.failed", status="failed", error=_SERVER_ERROR,
                     instructions="If the user's prompt too long, ask them to split it."),
    _responses_event("response.failed", status="failed", error=_SERVER_ERROR,
                     instructions="Prompt is too long"),
    # A content filter's body echoing the user's message, as a dict and as its JSON text.
    {"error": {"message": "Content blocked by safety filter", "code": "content_filter",
               "user_message": "is this prompt too long for you?"}},
    {"error": {"message": "Content blocked", "code": "content_filter",
               "user_message": "prompt is too long"}},
    '{"error": {"message": "Content blocked", "code": "content_filter"}, '
    '"user_message": "Prompt is too long"}',
    # Texts about a prompt that are not a provider's verdict on it.
    "Warning: system prompt too long to display in the UI; showing 200 characters",
    "ValueError: system prompt too long to display",
    "Error: system prompt too long to display",
    "Warning: prompt is too long to display",
    "error: the prompt is too long for the preview pane",
    "Error: prompt too long to fit in the log line; truncated",
    "Cache miss: prompt too long to cache (min 1024 tokens)",
    "Error: prompt too long to cache",
    "Request timed out. Hint: is your prompt too long, or the network slow?",
    "Request failed: the user asked: 'why is my prompt too long?'",
    # A tool's own check of a prompt in characters.
    "1 validation error for ImageToolInput\nprompt\n  Value error, prompt too long (max 500 "
    "characters for the image tool) [type=value_error]",
    "image generation failed: your prompt too long, max 1000 characters",
    "prompt too long (max 500 characters)",
    "ValueError: prompt too long (max 1000 characters)",
    "Error: prompt too long, max 1000 characters",
    {"detail": [{"loc": ["body", "prompt"], "msg": "prompt too long, at most 4000 characters",
                 "type": "value_error"}]},
]  # fmt: skip


@pytest.mark.parametrize("error", BARE_LOOK_ALIKES)
def test_regression_bare_prompt_wording_is_only_the_providers_message(error: Any) -> None:
    """Found by a tester: "prompt (is) too long" was read anywhere, in any string of a
    body: a caller's instructions, a user's message a filter echoed, a UI warning, a tool's
    validation. Now only a message field's (or an exception's text) leading clause, ended
    by punctuation, the end or the counts, and never a length in characters."""
    assert classify_size_error(error) is None
    if isinstance(error, dict):
        # As the SDK's error, whose text renders the whole body.
        assert classify_size_error(_arrivals("openai", 400, error)[0]) is None


BARE_TRUE_FORMS = [
    "Prompt is too long",
    "Internal error: Prompt is too long",
    "API Error: 400 prompt is too long",
    {"type": "error", "error": {"type": "invalid_request_error", "message": "prompt is too long"}},
    "Error code: 400 - {'type': 'error', 'error': {'type': 'invalid_request_error', 'message': "
    "'prompt is too long'}}",
    # OpenRouter relaying Anthropic's body as text.
    {"error": {"message": "Provider returned error", "metadata": {"raw": json.dumps(
        _an("invalid_request_error", "prompt is too long"))}}},
    # Ollama's: its server's body, and as a client and a proxy logged it (find_string ids
    # 52130954894, 55625242783); then (constructed) a traceback's last line for the Python
    # client's ResponseError, and LiteLLM's prefix.
    {"error": "prompt too long; exceeded max context length by 4021 tokens"},
    'Ollama API error 400: {"StatusCode":400,"Status":"400 Bad Request","error":"prompt too '
    'long; exceeded max context length by 4 tokens"}',
    '400 "prompt too long; exceeded max context length by 65590 tokens (ref: ...)"',
    "ollama._types.ResponseError: prompt too long; exceeded max context length by 4021 tokens "
    "(status code: 400)",
    "litellm.BadRequestError: OllamaException - prompt too long; exceeded context length",
]  # fmt: skip


@pytest.mark.parametrize("error", BARE_TRUE_FORMS)
def test_bare_prompt_wording_still_reads_the_providers_forms(error: Any) -> None:
    assert classify_size_error(error) == PromptTooLong(None, None, None)


def test_regression_a_tool_error_under_a_rate_limit_is_not_compressed_for() -> None:
    """Found by a tester: a 429 raised while handling a tool's "image tool: prompt too long
    (max 1000 characters)" was PromptTooLong (the tool's link decided), so the retry helper
    compressed the caller's prompt for a rate limit."""
    rate_limit = _arrivals("openai", 429, _oa(
        "Rate limit reached for gpt-4o in organization org-x on tokens per min (TPM): Limit "
        "30000, Used 29000, Requested 2000.", "tokens", code="rate_limit_exceeded"))[0]  # fmt: skip
    assert isinstance(rate_limit, openai.RateLimitError)
    compressed: list[PromptTooLong] = []

    def call(cap: int) -> str:
        try:
            raise ValueError("image tool: prompt too long (max 1000 characters)")
        except ValueError:
            raise rate_limit  # noqa: B904 - raised while handling it, as a retry loop does

    with pytest.raises(openai.RateLimitError) as info:
        call_with_output_cap(call, max_output_tokens=1000, compress_prompt=compressed.append)
    assert isinstance(info.value.__context__, ValueError)
    assert compressed == []
    assert classify_size_error(info.value) is None
    system = openai.APIError("system prompt too long to display; the model produced invalid "
                             "content", httpx2.Request("POST", "https://x/v1/responses"),
                             body=None)  # fmt: skip
    assert classify_size_error(system) is None


def test_regression_input_wording_is_read_in_the_providers_message_not_an_echo() -> None:
    """The message was the shortest string holding the wording, whatever field it was in:
    a request the body echoed (the user's own text) hid the provider's "lower max_tokens"."""
    echoed = {"role": "user", "content": "Input is too long for requested model"}
    body = {"error": {"message": "Input is too long for requested model; lower max_tokens."},
            "request": {"messages": [echoed]}}  # fmt: skip
    assert classify_size_error(body) == AmbiguousSizeError("bedrock", "prompt")


WINDOW_LOOK_ALIKES = [
    "Tool 'summarize' failed: maximum context length of summaries is 2000 characters",
    "maximum context length of summaries is 2000 characters.",
    "The maximum context length of gpt-4o is 128k",
    "The maximum context length of gpt-4o is 128k tokens",
    "The maximum context length of gpt-4o is 1M",
    "The maximum context length of gpt-4o is 128K. However, answering your request will take "
    "9000 tokens.",
    "The maximum context length of 2 is 5 minutes",
    "The maximum context length of gpt-4o is 8192.",
    # The caller's instructions, not the provider's words (the window rule reads messages).
    _responses_event("response.failed", status="failed", error=_SERVER_ERROR,
                     instructions="Summaries: the maximum context length of gpt-5 is 400000 "
                     "tokens."),
]  # fmt: skip


@pytest.mark.parametrize("error", WINDOW_LOOK_ALIKES)
def test_regression_a_window_with_a_models_name_is_in_tokens(error: Any) -> None:
    """Found by a tester: "maximum context length of <name> is W", "tokens" optional, read
    2000 characters, 5 minutes and 128k (as 128) as windows. SambaNova's real messages
    have "tokens" after W, or its count: ". However, answering your request will take N
    tokens"."""
    assert classify_size_error(error) is None


def test_sambanovas_window_is_still_read_in_its_two_forms() -> None:
    counted = SAMBANOVA.format(9000, "")
    assert classify_size_error(counted) == PromptTooLong(9000, 8192, "sambanova")
    tokens = "The maximum context length of Meta-Llama-3.1-405B-Instruct is 8192 tokens."
    assert classify_size_error(tokens) == AmbiguousSizeError(None, "either", 8192)
    breakdown = ("The maximum context length of Meta-Llama-3.1-405B-Instruct is 8192 tokens. "
                 "However, you requested 9000 tokens (8000 in the messages, 1000 in the "
                 "completion).")  # fmt: skip
    assert classify_size_error(breakdown) == OutputCapTooLarge(1000, 192, 8192, "sambanova", 8000)


RATE_LIMITS_NAMING_SIZES = [
    "Rate limit reached for gpt-4 in organization org-x on tokens per min (TPM): Limit 10000, "
    "Used 9000. The maximum context length of gpt-4 is 8192 tokens.",
    "Rate limit reached for gpt-4 on tokens per min (TPM): Limit 10000, Used 9000. This "
    "model's maximum context length is 8192 tokens.",
    "Rate limit reached for gpt-4: the maximum context length of gpt-4 is 8192 tokens; Limit "
    "10000 tokens per minute, used 9000",
    # Numbers that would decide, in a rate limit's text: the rate limit still wins.
    "Rate limit reached (TPM). This model's maximum context length is 8192 tokens. However, "
    "you requested 9000 tokens (8000 in the messages, 1000 in the completion).",
    "Too many requests: 5 requests per minute. This model's maximum context length is 8192 "
    "tokens.",
]  # fmt: skip


@pytest.mark.parametrize("text", RATE_LIMITS_NAMING_SIZES)
def test_regression_a_rate_limit_that_names_the_window_is_no_size_error(text: str) -> None:
    """Found by a tester: the rate-limit check ran after the numeric rules, so a TPM quota
    that also named the model's window was AmbiguousSizeError; the docs say a rate limit
    worded with sizes is None. The check now comes first."""
    assert classify_size_error(text) is None
    error = _arrivals("openai", 429, _oa(text, "tokens"))[0]
    assert classify_size_error(error, requested=1000) is None


MINIMAX_LOOK_ALIKES = [
    "context window exceeds limit of the free plan: 5 requests per minute",
    "context window exceeds limit of 3 sessions",
    "your context window exceeds limit settings in the UI",
    {"error": {"message": "Content blocked"}, "note": "invalid params, context window exceeds "
     "limit"},
    # The same words of OpenAI's code, as prose.
    "Warning: context length exceeded for the summary cache",
    _responses_event("response.failed", status="failed", error=_SERVER_ERROR,
                     instructions="If the context length exceeded the limit, summarize."),
]  # fmt: skip


@pytest.mark.parametrize("error", MINIMAX_LOOK_ALIKES)
def test_regression_minimax_wording_is_only_its_message(error: Any) -> None:
    """Found by a tester: "context window exceeds limit" was read anywhere, so a plan's
    "... exceeds limit of the free plan: 5 requests per minute" was a size error. The
    words "context length exceeded" were read anywhere alike."""
    assert classify_size_error(error) is None


@pytest.mark.parametrize(
    "error",
    [
        "invalid params, context window exceeds limit",
        "context window exceeds limit",
        "Provider error: 400 invalid params, context window exceeds limit",
        "HTTP 400: Error code: 400 - {'error': 'invalid params, context window exceeds limit "
        "(ref: ...)'}",
        # MiniMax's own body (base_resp, code 2013).
        {"base_resp": {"status_code": 2013, "status_msg": "invalid params, context window "
                       "exceeds limit"}},
        # OpenAI's code as the message, and in a wrapper's text.
        {"error": {"message": "context length exceeded"}},
        "Error: context length exceeded.",
        "(context_length_exceeded) upstream rejected the request",
    ],
)  # fmt: skip
def test_context_wordings_are_still_read_as_the_message(error: Any) -> None:
    assert classify_size_error(error) == AmbiguousSizeError(None, "either")


# -- r32 sweep3: what the anchored rules of 610526a missed ---------------------------------
# A sweep tester found real size errors that the rules read before 610526a and it returned
# `None` for: a size error raised while handling a rate limit, a rate limit's words in the
# caller's fields, the wording after a wrapper's prefix, and a message in a field not named.


def _rate_limited() -> Exception:
    """A fresh OpenAI 429 for tokens per minute, as the SDK raises it."""
    error = _arrivals("openai", 429, _oa(
        "Rate limit reached for gpt-4o in organization org-x on tokens per min (TPM): Limit "
        "30000, Used 29000, Requested 2000.", "tokens", code="rate_limit_exceeded"))[0]  # fmt: skip
    assert isinstance(error, openai.RateLimitError)
    return error


_VLLM_AT_LEAST = {"object": "error", "type": "BadRequestError", "code": 400, "param": None,
                  "message": "This model's maximum context length is 32768 tokens. However, "
                  "you requested 8192 output tokens and your prompt contains at least 24577 "
                  "input tokens, for a total of at least 32769 tokens. Please reduce the "
                  "length of the input prompt or the number of requested output "
                  "tokens."}  # fmt: skip

SIZE_ERRORS_UNDER_A_RATE_LIMIT = [
    (_VLLM_AT_LEAST, AmbiguousSizeError(None, "either", 32768, 24577)),
    (_oa("Invalid request: Your request exceeded model token limit: 8192 (requested: 9000)"),
     AmbiguousSizeError(None, "either", 8192, 9000)),
    (_oa("Please reduce the length of the messages or completion. Current length is 9000 "
         "while limit is 8192", code="context_length_exceeded"),
     AmbiguousSizeError(None, "either", 8192, 9000)),
    (_oa("This model's maximum context length is 8192 tokens.", code="context_length_exceeded"),
     AmbiguousSizeError(None, "either", 8192)),
]  # fmt: skip


@pytest.mark.parametrize(("body", "expected"), SIZE_ERRORS_UNDER_A_RATE_LIMIT)
def test_regression_a_size_error_raised_while_handling_a_rate_limit_keeps_its_verdict(
    body: Any, expected: SizeVerdict
) -> None:
    """Found by a tester: the rate-limit check read the chain's text joined, so a 429 in
    the chain (a retry made inside its except block) cancelled the size error raised
    after it: each exception's rate limit is its own."""
    error = _arrivals("openai", 400, body)[0]
    assert isinstance(error, Exception)
    error.__context__ = _rate_limited()
    assert _without_provider(classify_size_error(error)) == expected


def test_regression_vllms_lower_bound_under_a_rate_limit_shrinks_the_cap() -> None:
    """The same in the retry helper: it re-raised vLLM's "at least N input tokens" error
    instead of halving the cap."""

    def call(cap: int) -> str:
        try:
            raise _rate_limited()
        except openai.RateLimitError:
            if cap > 4096:
                raise _arrivals("openai", 400, _VLLM_AT_LEAST)[0]  # type: ignore[misc]  # noqa: B904
            return f"ok with cap {cap}"

    assert call_with_output_cap(call, max_output_tokens=8192) == "ok with cap 4096"


def test_regression_the_rate_limit_check_reads_the_providers_message_only() -> None:
    """Found by a tester: the rate-limit check read every string of a body, so a caller's
    instructions that mention rate limits turned a size error into None."""
    body = {"type": "error", "error": {"type": "invalid_request_error",
            "message": "prompt is too long: 219898 tokens > 200000 maximum"},
            "response": {"instructions": "If you hit a rate limit, wait and retry."}}  # fmt: skip
    assert classify_size_error(body) == PromptTooLong(219898, 200000, "anthropic")
    event = _responses_event("response.failed", status="failed", error={
        "code": "context_length_exceeded",
        "message": "Your input exceeds the context window of this model. Please adjust your "
        "input and try again."},
        instructions="Respect the API rate limits; use at most 100 requests per "
        "minute.")  # fmt: skip
    assert classify_size_error(event) == PromptTooLong(None, None, "openai")


_CLAUSE_PREFIXES = [
    "Bad Request: ", "[400] ", "400: ", "HTTP 400: ", "HTTP 413 ", "Error [400]: ",
    "Error(400): ", "APIError(400): ", "Error code: 400 - ", "status 400: ",
    "Request failed: ", "Details: ", "400 Client Error: Bad Request: ", "[ERROR] ",
    "The model returned the following errors: ",
    "An error occurred (ValidationException) when calling the Converse operation: ",
    "APICallError [AI_APICallError]: ",
]  # fmt: skip


@pytest.mark.parametrize("prefix", _CLAUSE_PREFIXES)
def test_regression_size_wording_after_a_clause_separator_is_read(prefix: str) -> None:
    """Found by a tester: the wording was read only at a message's start or after an
    error's name, so an HTTP client's, a proxy's or an SDK's prefix hid it. Any clause's
    start is read now (after ":", " - ", "]", ">"), a status and quotes allowed."""
    prompt = PromptTooLong(None, None, None)
    assert classify_size_error(prefix + "prompt is too long") == prompt
    ollama = prefix + "prompt too long; exceeded max context length by 100918 tokens"
    assert classify_size_error(ollama) == prompt
    either = AmbiguousSizeError(None, "either")
    assert classify_size_error(prefix + "context length exceeded") == either
    # Inside a sentence, or followed by more of it, the words are no provider's verdict.
    for look_alike in ("system prompt too long to display", "is your prompt too long?",
                       "prompt too long to cache", "prompt too long, max 500 characters",
                       "context length exceeded for the summary cache"):  # fmt: skip
        assert classify_size_error(prefix + look_alike) is None


def test_regression_size_wording_in_an_sdks_or_loggers_text_is_read() -> None:
    """The same prefixes as real objects and logs render them."""
    botocore = ClientError({"Error": {"Code": "ValidationException",
                                      "Message": "prompt is too long"},
                            "ResponseMetadata": {"HTTPStatusCode": 400}}, "Converse")  # fmt: skip
    assert classify_size_error(str(botocore)) == PromptTooLong(None, None, None)
    assert classify_size_error("RuntimeError('prompt is too long')") == PromptTooLong(
        None, None, None
    )
    request = httpx.Request("POST", "https://x.invalid/v1/messages")
    response = httpx.Response(400, text="Bad Request: prompt is too long", request=request)
    with pytest.raises(httpx.HTTPStatusError) as info:
        response.raise_for_status()
    assert classify_size_error(info.value) == PromptTooLong(None, None, None)


@pytest.mark.parametrize(
    "field", ["errors", "details", "reason", "description", "errorMsg", "err_msg", "title",
              "statusMessage"],
)  # fmt: skip
def test_regression_a_message_in_more_fields_is_the_providers(field: str) -> None:
    """Found by a tester: only a few field names were read as the provider's message, so a
    gateway's ``errors`` list, a ``details`` or a problem's ``title`` said nothing."""
    prompt = PromptTooLong(None, None, None)
    assert classify_size_error({field: "prompt is too long"}) == prompt
    assert classify_size_error({field: ["prompt is too long"]}) == prompt
    assert classify_size_error({"error": {"code": 400, field: "prompt is too long"}}) == prompt
    window = "This model's maximum context length is 8192 tokens."
    assert classify_size_error({field: [window]}) == AmbiguousSizeError(None, "either", 8192)

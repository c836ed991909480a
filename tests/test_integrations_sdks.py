"""The Anthropic and OpenAI SDKs against a local HTTP server that speaks their APIs.

Two things the model SDKs must get right with jsonbudget's outputs: a bounded tool result
reaches the request as the JSON text (bytes handed to these SDKs once raised `TypeError`
or went out as ``[91,123,34,…]``), and `call_with_output_cap` shrinks the output cap
after the provider's real "too large" error and succeeds on the next request.
"""

from __future__ import annotations

import json
from typing import Any

import anthropic
import openai
import orjson

from jsonbudget import bounded_tool, call_with_output_cap
from tests.fixtures_provider import Provider

ANTHROPIC_TOO_LARGE = {
    "type": "error",
    "error": {
        "type": "invalid_request_error",
        "message": "input length and `max_tokens` exceed context limit: 197000 + 32000 > "
        "200000, decrease input length or `max_tokens` and try again",
    },
}
ANTHROPIC_OK = {
    "id": "msg_1", "type": "message", "role": "assistant", "model": "claude-test",
    "content": [{"type": "text", "text": "done"}], "stop_reason": "end_turn",
    "stop_sequence": None, "usage": {"input_tokens": 10, "output_tokens": 1},
}  # fmt: skip
OPENAI_TOO_LARGE = {
    "error": {
        "message": "This model's maximum context length is 128000 tokens. However, you "
        "requested 130000 tokens (98000 in the messages, 32000 in the completion). Please "
        "reduce the length of the messages or completion.",
        "type": "invalid_request_error", "param": "messages", "code": "context_length_exceeded",
    }
}  # fmt: skip
OPENAI_OK = {
    "id": "chatcmpl-1", "object": "chat.completion", "created": 1, "model": "gpt-test",
    "choices": [{"index": 0, "finish_reason": "stop",
                 "message": {"role": "assistant", "content": "done"}}],
    "usage": {"prompt_tokens": 10, "completion_tokens": 1, "total_tokens": 11},
}  # fmt: skip


@bounded_tool(max_bytes=2000)
def search(query: str) -> list[dict[str, Any]]:
    return [{"id": i, "title": f"{query} #{i}"} for i in range(10_000)]


def test_anthropic_gets_the_tool_result_as_text_and_a_smaller_cap(provider: Provider) -> None:
    client = anthropic.Anthropic(base_url=provider.url, api_key="test", max_retries=0)
    provider.answers = [(400, ANTHROPIC_TOO_LARGE), (200, ANTHROPIC_OK)]
    result = search("cats")
    messages: Any = [
        {"role": "user", "content": "find cats"},
        {"role": "assistant", "content": [{"type": "tool_use", "id": "t1", "name": "search",
                                           "input": {"query": "cats"}}]},
        {"role": "user", "content": [{"type": "tool_result", "tool_use_id": "t1",
                                      "content": result}]},
    ]  # fmt: skip

    def call(cap: int) -> Any:
        # A cap this large needs timeout=: without it the SDK refuses before any request.
        return client.messages.create(model="claude-test", max_tokens=cap, messages=messages,
                                      timeout=60)  # fmt: skip

    reply = call_with_output_cap(call, max_output_tokens=32_000)
    assert reply.content[0].text == "done"
    first, second = provider.requests
    assert first["max_tokens"] == 32_000
    assert second["max_tokens"] == 3000  # 200000 - 197000: what the error says still fits
    sent = first["messages"][2]["content"][0]["content"]
    assert sent == result
    assert orjson.loads(sent)[-1].startswith("…[omitted: ")


def test_openai_gets_the_tool_result_as_text_and_a_smaller_cap(provider: Provider) -> None:
    client = openai.OpenAI(base_url=provider.url, api_key="test", max_retries=0)
    provider.answers = [(400, OPENAI_TOO_LARGE), (200, OPENAI_OK)]
    result = search("cats")
    messages: Any = [
        {"role": "user", "content": "find cats"},
        {"role": "assistant", "tool_calls": [{"id": "t1", "type": "function", "function": {
            "name": "search", "arguments": '{"query": "cats"}'}}]},
        {"role": "tool", "tool_call_id": "t1", "content": result},
    ]  # fmt: skip

    def call(cap: int) -> Any:
        return client.chat.completions.create(model="gpt-test", messages=messages,
                                              max_completion_tokens=cap)  # fmt: skip

    reply = call_with_output_cap(call, max_output_tokens=32_000)
    assert reply.choices[0].message.content == "done"
    first, second = provider.requests
    assert first["max_completion_tokens"] == 32_000
    assert second["max_completion_tokens"] == 30_000  # 128000 - 98000
    assert first["messages"][2]["content"] == result  # the text, not a list of byte values


def test_regression_pydantic_ai_files_over_openai_chat_stay_within_the_turn(
    provider: Provider, tmp_path: Any
) -> None:
    """A tool result holding files reaches OpenAI's chat API (and Groq, Mistral...) as one
    JSON array, ``[text, "See file <id>."]``, the text escaped once more: 1,454 bytes went
    to the model in a 1,000-byte turn that counted 927. The array is what is counted."""
    from pydantic_ai import Agent, BinaryContent
    from pydantic_ai.models.openai import OpenAIChatModel
    from pydantic_ai.providers.openai import OpenAIProvider

    from jsonbudget import SpillStore, TurnBudget
    from jsonbudget.integrations.pydantic_ai import TurnBudgetCapability

    call = {
        "id": "chatcmpl-0", "object": "chat.completion", "created": 1, "model": "gpt-test",
        "choices": [{"index": 0, "finish_reason": "tool_calls", "message": {
            "role": "assistant", "content": None, "tool_calls": [{
                "id": "c1", "type": "function",
                "function": {"name": "chart", "arguments": "{}"}}]}}],
        "usage": {"prompt_tokens": 10, "completion_tokens": 1, "total_tokens": 11},
    }  # fmt: skip
    png = BinaryContent(b"\x89PNG\r\n\x1a\n" + bytes(range(256)), media_type="image/png")
    rows = [{"id": i, "label": f"point {i}"} for i in range(30)]
    for rows_shown, turn_bytes in ((rows[:5], 1000), (rows, 1000)):
        provider.requests.clear()
        provider.answers = [(200, call), (200, OPENAI_OK)]
        model = OpenAIChatModel(
            "gpt-test", provider=OpenAIProvider(base_url=provider.url + "/v1", api_key="test")
        )
        turn = TurnBudget(max_bytes=turn_bytes, store=SpillStore(tmp_path / "spill"))
        agent = Agent(model, capabilities=[TurnBudgetCapability(turn)])

        @agent.tool_plain
        def chart() -> list[Any]:
            return [rows_shown, png]  # noqa: B023 - called within this iteration

        assert agent.run_sync("draw").output == "done"
        (message,) = [m for m in provider.requests[1]["messages"] if m["role"] == "tool"]
        sent = message["content"]
        assert isinstance(sent, str)
        assert len(sent.encode()) <= turn_bytes
        first = json.loads(sent)[0]
        if rows_shown is rows:  # 1,900 bytes once escaped: spilled, the note names it
            assert first.startswith("…[spilled: ")
        else:
            assert json.loads(first) == rows_shown

"""r19: tool results the agent adapters sent otherwise than the framework would.

A text file pydantic-ai inlines as text, a list of content blocks LangChain ran without
a tool call, an async generator, and ``None``: each reached the model other than as the
turn counted it, or as the framework itself sends it.
"""

from __future__ import annotations

import base64
import json
from collections.abc import AsyncIterator
from pathlib import Path
from typing import Any

import orjson
import pytest
from agents import Agent, RunConfig, Runner, function_tool
from agents.testing import ModelStep, ScriptedModel, assistant_message, function_call
from langchain_core.tools import tool
from openai import AsyncOpenAI
from pydantic_ai import Agent as PydanticAgent
from pydantic_ai import BinaryContent, ToolReturn
from pydantic_ai.messages import (
    ModelMessage,
    ModelResponse,
    TextPart,
    ToolCallPart,
    ToolReturnPart,
)
from pydantic_ai.models.function import AgentInfo, FunctionModel
from pydantic_ai.models.openai import OpenAIChatModel
from pydantic_ai.providers.openai import OpenAIProvider

from jsonbudget import SpillStore, TurnBudget
from jsonbudget.integrations.langchain import budget_tool
from jsonbudget.integrations.openai_agents import budget_tools
from jsonbudget.integrations.pydantic_ai import TurnBudgetCapability
from tests.fixtures_provider import Provider
from tests.limited import bounded_run

TURN = 10_000


@pytest.fixture
def turn(tmp_path: Path) -> TurnBudget:
    return TurnBudget(max_bytes=TURN, store=SpillStore(tmp_path / "spill"))


def rows(n: int) -> list[dict[str, Any]]:
    return [{"row": i, "text": "lorem ipsum"} for i in range(n)]


def chat_answer(message: dict[str, Any], finish: str) -> dict[str, Any]:
    return {
        "id": "chatcmpl-1", "object": "chat.completion", "created": 1, "model": "gpt-test",
        "choices": [{"index": 0, "finish_reason": finish, "message": message}],
        "usage": {"prompt_tokens": 1, "completion_tokens": 1, "total_tokens": 2},
    }  # fmt: skip


def run_chat_model(provider: Provider, capability: TurnBudgetCapability, result: Any) -> Any:
    """One call of a tool returning *result*, run by pydantic-ai's OpenAI chat model
    against the local server; the request that carries the tool's answer."""
    call = {"id": "c1", "type": "function", "function": {"name": "dump", "arguments": "{}"}}
    provider.answers = [
        (200, chat_answer({"role": "assistant", "content": None, "tool_calls": [call]},
                          "tool_calls")),
        (200, chat_answer({"role": "assistant", "content": "done"}, "stop")),
    ]  # fmt: skip
    client = AsyncOpenAI(base_url=provider.url + "/v1", api_key="test", max_retries=0)
    model = OpenAIChatModel("gpt-test", provider=OpenAIProvider(openai_client=client))
    agent = PydanticAgent(model, capabilities=[capability])

    @agent.tool_plain
    def dump() -> Any:
        """Export the table."""
        return result

    assert agent.run_sync("go").output == "done"
    return provider.requests[1]


def tool_answer_texts(request: dict[str, Any]) -> list[str]:
    """Every text the model gets after its tool call: the tool message and the user
    message pydantic-ai adds for the tool's files."""
    messages = request["messages"]
    called = next(i for i, m in enumerate(messages) if m.get("tool_calls"))
    texts: list[str] = []
    for message in messages[called + 1 :]:
        content = message["content"]
        if isinstance(content, str):
            texts.append(content)
        else:
            texts.extend(part["text"] for part in content if part["type"] == "text")
    return texts


TEXT_TYPES = ["application/json", "text/csv", "application/vnd.api+json", "application/x-yaml",
              "application/toml", "application/xml"]  # fmt: skip


@pytest.mark.parametrize("media_type", TEXT_TYPES)
def test_regression_pydantic_ai_text_file_counts_against_the_turn(
    provider: Provider, turn: TurnBudget, media_type: str
) -> None:
    """A 769 KB JSON in a BinaryContent went whole into the model's context, inlined as
    text by the chat model's adapter, while the turn counted nothing: a "file"."""
    data = json.dumps(rows(20_000)).encode()
    capability = TurnBudgetCapability(turn)
    request = run_chat_model(provider, capability, BinaryContent(data, media_type=media_type))
    texts = tool_answer_texts(request)
    assert sum(len(text.encode()) for text in texts) <= TURN
    (report,) = capability.reports
    (admitted,) = report.results
    assert admitted.spill is not None
    assert admitted.spill.ref in "".join(texts)  # the cut is marked and named
    assert turn.gate.store.read(admitted.spill.ref, 0, 10**7) == data  # nothing lost


def test_regression_pydantic_ai_small_text_file_is_still_a_file(
    provider: Provider, turn: TurnBudget
) -> None:
    # Where it fits, the model gets the file as pydantic-ai sends it, and the turn
    # counted the text the adapter inlines.
    file = BinaryContent(b'{"a": 1}', media_type="application/json")
    capability = TurnBudgetCapability(turn)
    texts = tool_answer_texts(run_chat_model(provider, capability, file))
    inlined = [text for text in texts if "-----BEGIN FILE" in text]
    assert inlined == [
        f'-----BEGIN FILE id="{file.identifier}" type="application/json"-----\n'
        f'{{"a": 1}}\n-----END FILE id="{file.identifier}"-----'
    ]
    (report,) = capability.reports
    assert report.used_bytes == len(inlined[0].encode())


def test_regression_pydantic_ai_text_file_beside_an_image_is_counted(turn: TurnBudget) -> None:
    png = BinaryContent(b"\x89PNG\r\n\x1a\n" + bytes(range(256)) * 40, media_type="image/png")
    text = BinaryContent(b"x" * 30_000, media_type="text/plain")
    sent: list[tuple[str, list[Any]]] = []

    def model(messages: list[ModelMessage], info: AgentInfo) -> ModelResponse:
        if len(messages) == 1:
            return ModelResponse(parts=[ToolCallPart("both", {}, tool_call_id="b")])
        for part in messages[-1].parts:
            if isinstance(part, ToolReturnPart):
                sent.append(part.model_response_str_and_user_content())
        return ModelResponse(parts=[TextPart("done")])

    capability = TurnBudgetCapability(turn)
    agent = PydanticAgent(FunctionModel(model), capabilities=[capability])

    @agent.tool_plain
    def both() -> list[Any]:
        return [text, png]

    agent.run_sync("go")
    ((answer, files),) = sent
    assert png in files  # the image still an image
    assert text not in files
    (report,) = capability.reports
    assert len(answer.encode()) <= report.used_bytes <= TURN
    (admitted,) = report.results
    assert admitted.spill is not None  # 30 KB of text did not fit
    assert admitted.spill.size > 30_000


def test_regression_langchain_blocks_without_a_tool_call_stay_blocks(turn: TurnBudget) -> None:
    """Run without a ToolCall, a tool's list of content blocks became one JSON string:
    the image's base64 counted and spilled as text. With one, the image passed."""
    image = {"type": "image", "base64": base64.b64encode(bytes(300_000)).decode(),
             "mime_type": "image/png"}  # fmt: skip

    @tool
    def shot() -> list[Any]:
        """A screenshot and its caption."""
        return [{"type": "text", "text": "c" * 20_000}, image]

    plain = budget_tool(shot, turn).invoke({})
    (admitted,) = turn.reset().results
    call: Any = {"name": "shot", "args": {}, "id": "c1", "type": "tool_call"}
    with_call = budget_tool(shot, turn).invoke(call).content
    assert isinstance(plain, list)
    text, block = plain
    assert block is image  # the image passes, uncounted
    assert text["type"] == "text"
    assert "spilled" in text["text"]
    assert admitted.size == 20_000  # only the caption was counted
    assert [b["type"] for b in with_call] == [b["type"] for b in plain]
    # Blocks that fit are kept as the tool returned them.
    small = [{"type": "text", "text": "hi"}, image]

    @tool
    def small_shot() -> list[Any]:
        """A small one."""
        return small

    assert budget_tool(small_shot, turn).invoke({}) is small


async def agen_rows(n: int) -> AsyncIterator[dict[str, Any]]:
    for row in rows(n):
        yield row


def test_regression_pydantic_ai_an_async_generator_is_read(turn: TurnBudget) -> None:
    """A tool's async generator reached the model as "…[unencodable: async_generator]",
    reported as fitting, its items never read."""
    sent: list[str] = []

    def model(messages: list[ModelMessage], info: AgentInfo) -> ModelResponse:
        if len(messages) == 1:
            calls = [ToolCallPart("agen", {"n": n}, tool_call_id=f"c{n}") for n in (3, 2000)]
            return ModelResponse(parts=calls)
        sent.extend(
            p.model_response_str() for p in messages[-1].parts if isinstance(p, ToolReturnPart)
        )
        return ModelResponse(parts=[TextPart("done")])

    agent = PydanticAgent(FunctionModel(model), capabilities=[TurnBudgetCapability(turn)])

    @agent.tool_plain
    async def agen(n: int) -> Any:
        return agen_rows(n)

    assert agent.run_sync("go").output == "done"
    small, big = sent
    assert orjson.loads(small) == rows(3)
    ref = orjson.loads(big)["spilled"]["ref"]  # spilled whole, previewed as JSON
    assert orjson.loads(turn.gate.store.read(ref, 0, 10**7)) == rows(2000)


async def test_regression_openai_agents_an_async_generator_is_read(turn: TurnBudget) -> None:
    @function_tool
    async def agen(n: int) -> Any:
        """Rows."""
        return agen_rows(n)

    model = ScriptedModel([
        ModelStep(output=[function_call("agen", {"n": 3}, call_id="c1"),
                          function_call("agen", {"n": 2000}, call_id="c2")]),
        ModelStep(output=[assistant_message("done")]),
    ])  # fmt: skip
    agent = Agent(name="a", model=model, tools=budget_tools([agen], turn))
    result = await Runner.run(agent, "go", run_config=RunConfig(tracing_disabled=True))
    assert result.final_output == "done"
    small, big = [
        i["output"] for i in model.calls[1].input if i.get("type") == "function_call_output"
    ]
    assert orjson.loads(small) == rows(3)
    ref = orjson.loads(big)["spilled"]["ref"]
    assert orjson.loads(turn.gate.store.read(ref, 0, 10**7)) == rows(2000)


def test_regression_an_endless_async_generator_stops_at_the_spill_limit() -> None:
    # Read as a sync generator is: to the store's max_file_bytes, in flat memory.
    code = """
        import tempfile
        from pydantic_ai import Agent
        from pydantic_ai.messages import ModelResponse, TextPart, ToolCallPart
        from pydantic_ai.models.function import FunctionModel
        from jsonbudget import SpillStore, TurnBudget
        from jsonbudget.errors import SpillError
        from jsonbudget.integrations.pydantic_ai import TurnBudgetCapability

        def model(messages, info):
            if len(messages) == 1:
                return ModelResponse(parts=[ToolCallPart("endless", {})])
            return ModelResponse(parts=[TextPart("done")])

        store = SpillStore(tempfile.mkdtemp(), max_file_bytes=8 << 20)
        turn = TurnBudget(max_bytes=10_000, store=store)
        agent = Agent(FunctionModel(model), capabilities=[TurnBudgetCapability(turn)])

        @agent.tool_plain
        async def endless():
            async def rows():
                i = 0
                while True:
                    yield {"row": i, "text": "lorem ipsum " * 10}
                    i += 1
            return rows()

        try:
            agent.run_sync("go")
        except SpillError:
            print("spill limit")
        print(len(list(store.directory.iterdir())))
        import shutil
        shutil.rmtree(store.directory)  # the suite checks nothing is left in its TMPDIR
    """
    assert bounded_run(code, memory=1 << 30, timeout=120).split() == ["spill", "limit", "0"]


def test_regression_pydantic_ai_none_is_sent_as_pydantic_ai_sends_it(turn: TurnBudget) -> None:
    """A None result reached the model as 'null', where pydantic-ai sends ''."""
    sent: dict[str, str] = {}

    def model(messages: list[ModelMessage], info: AgentInfo) -> ModelResponse:
        if len(messages) == 1:
            return ModelResponse(parts=[ToolCallPart("nothing", {}, tool_call_id="n"),
                                        ToolCallPart("ret", {}, tool_call_id="r")])  # fmt: skip
        for part in messages[-1].parts:
            if isinstance(part, ToolReturnPart):
                sent[part.tool_name] = part.model_response_str()
        return ModelResponse(parts=[TextPart("done")])

    capability = TurnBudgetCapability(turn)
    agent = PydanticAgent(FunctionModel(model), capabilities=[capability])

    @agent.tool_plain
    def nothing() -> None:
        return None

    @agent.tool_plain
    def ret() -> ToolReturn:
        return ToolReturn(return_value=None, content=["hello"])

    agent.run_sync("go")
    assert sent == {"nothing": "", "ret": ""}
    (report,) = capability.reports
    assert len(report.results) == 2  # still counted, as the empty text sent
    assert report.used_bytes == 0


async def test_regression_openai_agents_none_is_sent_as_the_sdk_sends_it(
    turn: TurnBudget,
) -> None:
    @function_tool
    def nothing() -> None:
        """Nothing."""

    model = ScriptedModel([
        ModelStep(output=[function_call("nothing", {}, call_id="c1")]),
        ModelStep(output=[assistant_message("done")]),
    ])  # fmt: skip
    agent = Agent(name="a", model=model, tools=budget_tools([nothing], turn))
    await Runner.run(agent, "go", run_config=RunConfig(tracing_disabled=True))
    outputs = [i["output"] for i in model.calls[1].input if i.get("type") == "function_call_output"]
    assert outputs == ["None"]
    assert turn.report().used_bytes == len(b"None")

"""TurnBudget in the agent frameworks, each driven by its own test model.

Six parallel tool calls in one turn once used 10,524 of a 10,000-byte turn; with the
adapters, what the model receives as tool results never passes the turn's limit, and
every spilled result is whole on disk.
"""

from __future__ import annotations

import asyncio
import base64
import math
import os
import re
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Annotated, Any

import orjson
import pydantic
import pytest
from agents import (
    Agent,
    FunctionTool,
    RunConfig,
    Runner,
    ToolOutputImage,
    ToolOutputText,
    function_tool,
)
from agents.testing import ModelStep, ScriptedModel, assistant_message, function_call
from langchain_core.callbacks import BaseCallbackHandler
from langchain_core.language_models.fake_chat_models import (
    FakeMessagesListChatModel,
    GenericFakeChatModel,
)
from langchain_core.messages import AIMessage, BaseMessage, HumanMessage, ToolMessage
from langchain_core.runnables import RunnableConfig, RunnableLambda
from langchain_core.tools import InjectedToolCallId, Tool, tool
from langchain_core.utils.function_calling import convert_to_openai_tool
from pydantic_ai import Agent as PydanticAgent
from pydantic_ai import BinaryContent, ModelRetry, PromptedOutput, ToolFailed, ToolReturn
from pydantic_ai.exceptions import UnexpectedModelBehavior
from pydantic_ai.messages import (
    ModelMessage,
    ModelResponse,
    TextPart,
    ToolCallPart,
    ToolReturnPart,
    UserPromptPart,
)
from pydantic_ai.models.function import AgentInfo, DeltaToolCall, FunctionModel

from jsonbudget import ResultReader, SpillStore, TurnBudget, TurnReport, read_result
from jsonbudget.integrations.langchain import TurnBudgetCallback, budget_tool
from jsonbudget.integrations.openai_agents import TurnBudgetHooks, budget_tools
from jsonbudget.integrations.pydantic_ai import TurnBudgetCapability
from tests.limited import bounded_run

TURN = 10_000
CALLS = 6


def search_rows(q: str) -> list[dict[str, Any]]:
    return [{"q": q, "row": i, "text": "lorem ipsum " * 4} for i in range(45)]


@pytest.fixture
def turn(tmp_path: Path) -> TurnBudget:
    return TurnBudget(max_bytes=TURN, store=SpillStore(tmp_path / "spill"))


def check_turn(outputs: list[str], turn: TurnBudget, reports: list[Any]) -> None:
    """What reached the model fits the turn, every answer is JSON, nothing is lost."""
    assert len(outputs) == CALLS
    assert sum(len(o.encode()) for o in outputs) <= TURN
    spilled = 0
    for out in outputs:
        doc = orjson.loads(out)
        if isinstance(doc, dict) and "spilled" in doc:
            spilled += 1
            ref = doc["spilled"]["ref"]
            whole = orjson.loads(turn.gate.store.read(ref, 0, 10**7))
            assert whole == search_rows(whole[0]["q"])
        else:
            assert doc == search_rows(doc[0]["q"])
    assert spilled >= 1  # six ~3.9 KB results cannot all fit 10,000 bytes
    (report,) = reports
    assert len(report.results) == CALLS
    assert report.used_bytes <= TURN
    assert not report.over_budget


# --- OpenAI Agents SDK --------------------------------------------------------------------


async def test_openai_agents_parallel_calls_stay_within_the_turn(turn: TurnBudget) -> None:
    @function_tool
    async def search(q: str) -> str:
        """Search."""
        await asyncio.sleep(0)
        return orjson.dumps(search_rows(q)).decode()

    model = ScriptedModel([
        ModelStep(output=[function_call("search", {"q": f"q{i}"}, call_id=f"c{i}")
                          for i in range(CALLS)]),
        ModelStep(output=[assistant_message("done")]),
    ])  # fmt: skip
    hooks = TurnBudgetHooks(turn)
    agent = Agent(name="searcher", model=model, tools=budget_tools([search], turn))
    # No tracing: it would try to export the spans to the provider.
    config = RunConfig(tracing_disabled=True)
    result = await Runner.run(agent, "find everything", hooks=hooks, run_config=config)
    assert result.final_output == "done"
    second = model.calls[1].input
    outputs = [item["output"] for item in second if item.get("type") == "function_call_output"]
    hooks.reports.append(turn.reset())  # the run ended after the last model call
    check_turn(outputs, turn, [r for r in hooks.reports if r.results])


class Row(pydantic.BaseModel):
    id: int
    text: str


class Report(pydantic.BaseModel):
    rows: list[Row]


async def test_regression_openai_agents_a_typed_tool_output_may_be_spilled(
    turn: TurnBudget,
) -> None:
    """A tool with a declared output_type has every output validated against it by the
    SDK: once its result was spilled, the preview failed that check and Runner.run raised
    UserError. The budgeted tool declares no output type: the model gets the preview."""

    @function_tool(output_type=Report)
    def report(q: str) -> Report:
        """A report."""
        return Report(rows=[Row(id=i, text="x" * 50) for i in range(300)])

    model = ScriptedModel([
        ModelStep(output=[function_call("report", {"q": "a"}, call_id="c1")]),
        ModelStep(output=[assistant_message("done")]),
    ])  # fmt: skip
    hooks = TurnBudgetHooks(turn)
    agent = Agent(name="reporter", model=model, tools=budget_tools([report], turn))
    result = await Runner.run(agent, "go", hooks=hooks, run_config=RunConfig(tracing_disabled=True))
    assert result.final_output == "done"
    (output,) = [
        i["output"] for i in model.calls[1].input if i.get("type") == "function_call_output"
    ]
    assert len(output.encode()) <= TURN
    doc = orjson.loads(output)
    whole = orjson.loads(turn.gate.store.read(doc["spilled"]["ref"], 0, 10**7))
    assert whole == report_rows_json()


def report_rows_json() -> Any:
    return {"rows": [{"id": i, "text": "x" * 50} for i in range(300)]}


# --- pydantic-ai --------------------------------------------------------------------------


def test_pydantic_ai_parallel_calls_stay_within_the_turn(turn: TurnBudget) -> None:
    seen: list[list[ModelMessage]] = []

    def model(messages: list[ModelMessage], info: AgentInfo) -> ModelResponse:
        seen.append(list(messages))
        if len(seen) == 1:
            return ModelResponse(parts=[ToolCallPart("search", {"q": f"q{i}"}, tool_call_id=f"c{i}")
                                        for i in range(CALLS)])  # fmt: skip
        return ModelResponse(parts=[TextPart("done")])

    capability = TurnBudgetCapability(turn)
    agent = PydanticAgent(FunctionModel(model), capabilities=[capability])

    @agent.tool_plain
    async def search(q: str) -> list[dict[str, Any]]:
        """Search."""
        return search_rows(q)

    assert agent.run_sync("find everything").output == "done"
    returns = [p for p in seen[1][-1].parts if isinstance(p, ToolReturnPart)]
    outputs = [p.model_response_str() for p in returns]
    check_turn(outputs, turn, capability.reports)


# --- LangChain ----------------------------------------------------------------------------


async def test_langchain_parallel_calls_stay_within_the_turn(turn: TurnBudget) -> None:
    @tool
    async def search(q: str) -> list[dict[str, Any]]:
        """Search."""
        return search_rows(q)

    class Recorder(BaseCallbackHandler):
        def __init__(self) -> None:
            self.seen: list[list[BaseMessage]] = []

        def on_chat_model_start(self, serialized: Any, messages: Any, **kwargs: Any) -> None:
            self.seen.append(list(messages[0]))

    calls = [{"name": "search", "args": {"q": f"q{i}"}, "id": f"c{i}"} for i in range(CALLS)]
    model = GenericFakeChatModel(
        messages=iter([AIMessage("", tool_calls=calls), AIMessage("done")])
    )
    recorder = Recorder()
    budget = TurnBudgetCallback(turn)
    config: Any = {"callbacks": [budget, recorder]}
    bounded = budget_tool(search, turn)
    messages: list[BaseMessage] = [HumanMessage("find everything")]
    first = await model.ainvoke(messages, config=config)
    messages.append(first)
    assert isinstance(first, AIMessage)
    results = await asyncio.gather(*(bounded.ainvoke(call) for call in first.tool_calls))
    messages.extend(results)
    assert (await model.ainvoke(messages, config=config)).content == "done"
    received = [m for m in recorder.seen[1] if isinstance(m, ToolMessage)]
    check_turn([str(m.content) for m in received], turn, budget.reports)
    assert bounded.name == "search"
    assert set(bounded.args) == {"q"}


def test_langchain_model_inside_a_tool_does_not_start_a_turn(turn: TurnBudget) -> None:
    """A tool that asks a model is still in the turn that called it; a top model starts one."""
    inner = GenericFakeChatModel(messages=iter([AIMessage("summary")] * CALLS))

    @tool
    def summarize(q: str) -> str:
        """Summarize with a model."""
        inner.invoke([HumanMessage(q)])  # inherits the tool run's callbacks
        return "r" * 4000

    budget = TurnBudgetCallback(turn)
    config: Any = {"callbacks": [budget]}
    outer = GenericFakeChatModel(messages=iter([AIMessage("go"), AIMessage("done")]))
    outer.invoke([HumanMessage("start")], config=config)
    bounded = budget_tool(summarize, turn)
    outputs = [bounded.invoke({"q": f"q{i}"}, config=config) for i in range(CALLS)]
    assert sum(len(o.encode()) for o in outputs) <= TURN
    assert budget.reports == []  # the six inner models started no turn
    assert len(turn.report().results) == CALLS
    outer.invoke([HumanMessage("next")], config=config)  # the next turn
    (report,) = budget.reports
    assert len(report.results) == CALLS
    assert turn.report().results == ()


async def test_langchain_budget_tool_is_the_tool(turn: TurnBudget) -> None:
    """Injected arguments, return_direct and artifacts survive; only the content is admitted."""

    @tool(return_direct=True)
    def with_id(q: str, tool_call_id: Annotated[str, InjectedToolCallId]) -> str:
        """Needs the call id."""
        return f"{q} from {tool_call_id}"

    bounded = budget_tool(with_id, turn)
    call: Any = {"name": "with_id", "args": {"q": "x"}, "id": "call-7", "type": "tool_call"}
    message = bounded.invoke(call)
    assert isinstance(message, ToolMessage)
    assert (message.content, message.tool_call_id) == ("x from call-7", "call-7")
    assert (await bounded.ainvoke(call)).content == "x from call-7"
    assert bounded.return_direct is True
    assert set(bounded.args) == {"q"}  # the injected argument stays hidden from the model
    assert convert_to_openai_tool(bounded) == convert_to_openai_tool(with_id)  # what models see

    @tool(response_format="content_and_artifact")
    def rows(q: str) -> tuple[str, dict[str, Any]]:
        """Rows and their ids."""
        return "x" * 20_000, {"ids": [1, 2, 3]}

    call = {"name": "rows", "args": {"q": "x"}, "id": "c2", "type": "tool_call"}
    message = budget_tool(rows, turn).invoke(call)
    assert message.artifact == {"ids": [1, 2, 3]}
    assert len(message.content.encode()) < 10_000  # the content was spilled: a preview
    (admitted,) = [r for r in turn.report().results if r.tool == "rows"]
    assert admitted.spill is not None
    assert admitted.spill.size == 20_000


def test_langchain_image_blocks_pass_and_text_blocks_are_admitted(turn: TurnBudget) -> None:
    image = {"type": "image", "base64": "iVBORw0KGgo=", "mime_type": "image/png"}

    @tool
    def shot(q: str) -> list[dict[str, Any]]:
        """A screenshot and its caption."""
        return [{"type": "text", "text": "c" * 20_000}, image]

    call: Any = {"name": "shot", "args": {"q": "x"}, "id": "c3", "type": "tool_call"}
    text, block = budget_tool(shot, turn).invoke(call).content
    assert block == image
    assert text["type"] == "text"
    assert "spilled" in text["text"]
    assert len(text["text"].encode()) < TURN
    assert turn.report().used_bytes == len(text["text"].encode())


def test_pydantic_ai_tool_return_keeps_content_metadata_and_files(turn: TurnBudget) -> None:
    png = BinaryContent(b"\x89PNG\r\n\x1a\n" + bytes(range(256)) * 40, media_type="image/png")
    seen: list[ModelMessage] = []

    def model(messages: list[ModelMessage], info: AgentInfo) -> ModelResponse:
        if len(messages) == 1:
            return ModelResponse(parts=[ToolCallPart("ret", {}, tool_call_id="r"),
                                        ToolCallPart("img", {}, tool_call_id="i")])  # fmt: skip
        seen.extend(messages)
        return ModelResponse(parts=[TextPart("done")])

    capability = TurnBudgetCapability(turn)
    agent = PydanticAgent(FunctionModel(model), capabilities=[capability])

    @agent.tool_plain
    def ret() -> ToolReturn:
        return ToolReturn(return_value="ok", content=["look at this"], metadata={"ids": [1, 2]})

    @agent.tool_plain
    def img() -> list[Any]:
        return ["a chart", png]

    agent.run_sync("go")
    parts = [p for m in seen for p in getattr(m, "parts", [])]
    returns = {p.tool_name: p for p in parts if isinstance(p, ToolReturnPart)}
    assert returns["ret"].content == "ok"
    assert returns["ret"].metadata == {"ids": [1, 2]}
    prompts = [p.content for p in parts if isinstance(p, UserPromptPart)]
    assert ["look at this"] in prompts
    assert returns["img"].content == ["a chart", png]  # the image is still an image
    assert returns["img"].files == [png]
    # Only text counted: "ok", and the caption as a provider whose tool results take
    # text only sends it, with a reference to the file.
    assert turn.report().used_bytes == 0  # the turn was reset before the last request
    (report,) = capability.reports
    sent = orjson.dumps(["a chart", f"See file {png.identifier}."])
    assert report.used_bytes == len(b"ok") + len(sent)


async def test_regression_openai_agents_one_call_of_many_parts_is_one_result(
    turn: TurnBudget,
) -> None:
    """300 text parts of one call were admitted part by part: 300 calls of the turn's
    8, 38,492 bytes of function_call_output in a 10,000-byte turn."""

    @function_tool
    def lines() -> list[ToolOutputText]:
        """Many lines."""
        return [ToolOutputText(text=f"part {i} " + "x" * 80) for i in range(300)]

    model = ScriptedModel([
        ModelStep(output=[function_call("lines", {}, call_id="c1")]),
        ModelStep(output=[assistant_message("done")]),
    ])  # fmt: skip
    agent = Agent(name="a", model=model, tools=budget_tools([lines], turn))
    await Runner.run(agent, "go", run_config=RunConfig(tracing_disabled=True))
    (output,) = [
        i["output"] for i in model.calls[1].input if i.get("type") == "function_call_output"
    ]
    (text,) = output
    assert "spilled" in text["text"]
    report = turn.report()
    assert (len(report.results), report.over_budget) == (1, False)
    assert report.used_bytes == len(text["text"].encode()) <= TURN


async def test_openai_agents_images_reach_the_model_as_images(turn: TurnBudget) -> None:
    image = ToolOutputImage(image_url="data:image/png;base64,iVBORw0KGgo=")

    @function_tool
    def shot() -> list[ToolOutputText | ToolOutputImage]:
        """A screenshot and its caption."""
        return [ToolOutputText(text="c" * 20_000), image]

    model = ScriptedModel([
        ModelStep(output=[function_call("shot", {}, call_id="c1")]),
        ModelStep(output=[assistant_message("done")]),
    ])  # fmt: skip
    agent = Agent(name="a", model=model, tools=budget_tools([shot], turn))
    await Runner.run(agent, "go", run_config=RunConfig(tracing_disabled=True))
    (output,) = [
        i["output"] for i in model.calls[1].input if i.get("type") == "function_call_output"
    ]
    text, picture = output
    assert picture == {"type": "input_image", "image_url": image.image_url}
    assert text["type"] == "input_text"
    assert "spilled" in text["text"]
    assert len(text["text"].encode()) < TURN
    (admitted,) = turn.report().results
    assert admitted.spill is not None
    assert admitted.spill.size == 20_000


def test_regression_langchain_json_blocks_count_against_the_turn(turn: TurnBudget) -> None:
    """Only "text" blocks were admitted: a json (or search_result) block of 50 KB
    reached the model whole and uncounted, past the 10,000-byte turn."""
    rows = [{"row": i, "text": "lorem ipsum " * 4} for i in range(800)]
    small = {"type": "json", "json": {"ok": True}}
    image = {"type": "image", "base64": "iVBORw0KGgo=", "mime_type": "image/png"}

    @tool
    def export(q: str) -> list[dict[str, Any]]:
        """Rows as a JSON block."""
        return [{"type": "json", "json": rows}, small, image]

    call: Any = {"name": "export", "args": {"q": "x"}, "id": "c4", "type": "tool_call"}
    # The blocks are one call's result (one call's room, not one a block): their text,
    # each block as its JSON, joined by newlines, does not fit, so one text block with the
    # preview takes their place, before the media, which pass unchanged and uncounted.
    text, media = budget_tool(export, turn).invoke(call).content
    assert media == image
    assert text["type"] == "text"
    whole = orjson.dumps({"type": "json", "json": rows}) + b"\n" + orjson.dumps(small)
    # Two JSON values, one a line: spilled and previewed as text.
    assert f" of {len(whole)} bytes are shown" in text["text"]
    report = turn.report()
    assert len(report.results) == 1
    assert report.used_bytes == len(text["text"].encode()) <= TURN


@pytest.mark.parametrize(
    ("block", "counted"),
    [
        ({"type": "json", "json": {"id": 2**70}}, f'{{"type":"json","json":{{"id":{2**70}}}}}'),
        ({"type": "json", "json": {1: "one"}}, '{"type":"json","json":{"1":"one"}}'),
        ({"type": "json", "json": {(1, 2): "pair"}}, "{'type': 'json', 'json': {(1, 2): 'pair'}}"),
    ],
    ids=["big-int", "int-key", "tuple-key"],
)
def test_regression_langchain_blocks_orjson_refuses_are_still_counted(
    turn: TurnBudget, block: dict[str, Any], counted: str
) -> None:
    # orjson's TypeError escaped from budget_tool for a block the tool alone returned.
    @tool
    def lookup(q: str) -> list[dict[str, Any]]:
        """Look up."""
        return [block]

    call: Any = {"name": "lookup", "args": {"q": "x"}, "id": "c9", "type": "tool_call"}
    assert budget_tool(lookup, turn).invoke(call).content == [block]
    assert turn.report().used_bytes == len(counted.encode())


def test_regression_langchain_block_str_that_mutates_the_block_cannot_crash(
    tmp_path: Path,
) -> None:
    # A block's JSON was orjson's with default=str: orjson called the value's __str__ in
    # the middle of writing the list that held it, the __str__ emptied that list, and
    # orjson read on through the freed items (a segfault). Counted now, and kept whole.
    code = """
    import tempfile
    from langchain_core.tools import tool
    from jsonbudget import SpillStore, TurnBudget
    from jsonbudget.integrations.langchain import budget_tool

    rows = []

    class Evil:
        def __str__(self):
            rows.clear()
            junk = [[f"{i}" * 30] for i in range(5000)]  # takes the freed memory
            return "evil"

    rows.append(Evil())
    rows.extend({"n": i, "s": "y" * 40} for i in range(2000))
    block = {"type": "json", "rows": rows}

    @tool
    def export(q: str) -> list:
        \"\"\"Rows as a JSON block.\"\"\"
        return [block]

    turn = TurnBudget(max_bytes=10_000, store=SpillStore(tempfile.mkdtemp()))
    call = {"name": "export", "args": {"q": "x"}, "id": "c1", "type": "tool_call"}
    out = budget_tool(export, turn).invoke(call).content
    assert out == [block], out
    assert turn.report().used_bytes == len('{"type":"json","rows":["evil"]}')
    print("ok")
    """
    # The spill store in the test's own directory: the child leaves nothing behind.
    code = code.replace("tempfile.mkdtemp()", repr(str(tmp_path)))
    assert bounded_run(code, timeout=60).strip() == "ok"


def test_regression_langchain_block_nan_is_not_counted_as_null(tmp_path: Path) -> None:
    # orjson wrote a block's NaN as null: a preview showed the model a null the tool never
    # returned, unmarked. The standard library writes it as it is (NaN), as LangChain does.
    rows = [{"n": i, "score": math.nan if i == 0 else i / 2} for i in range(400)]
    turn = TurnBudget(max_bytes=2_000, store=SpillStore(tmp_path / "spill"))

    @tool
    def scores(q: str) -> list[dict[str, Any]]:
        """Scores as a JSON block."""
        return [{"type": "json", "json": rows}]

    call: Any = {"name": "scores", "args": {"q": "x"}, "id": "c1", "type": "tool_call"}
    (text,) = budget_tool(scores, turn).invoke(call).content
    assert text["type"] == "text"
    assert text["text"].startswith('{"type":"json","json":[{"n":0,"score":NaN},')
    assert '"score":null' not in text["text"]


def test_regression_one_call_of_many_parts_is_one_result(turn: TurnBudget) -> None:
    """A call returning 300 text blocks was admitted block by block: 300 calls of the
    turn's 8, the overflow each a bare reference, 28,891 bytes in a 10,000-byte turn."""

    @tool
    def lines(q: str) -> list[str]:
        """Lines."""
        return [f"{q} line {i} " + "x" * 80 for i in range(300)]

    call: Any = {"name": "lines", "args": {"q": "a"}, "id": "c5", "type": "tool_call"}
    (block,) = budget_tool(lines, turn).invoke(call).content
    report = turn.report()
    assert (len(report.results), report.over_budget) == (1, False)
    assert report.used_bytes == len(block["text"].encode()) <= TURN
    # Where the joined text fits, the blocks are kept as they are.
    small: Any = {"name": "lines", "args": {"q": "b"}, "id": "c6", "type": "tool_call"}
    roomy = TurnBudget(max_bytes=100_000)
    assert budget_tool(lines, roomy).invoke(small).content == lines.invoke({"q": "b"})
    assert len(roomy.report().results) == 1


@pytest.mark.parametrize("raised", [ModelRetry, ToolFailed])
def test_regression_pydantic_ai_retry_messages_count_as_sent(
    turn: TurnBudget, raised: type[Exception]
) -> None:
    """A retry's message was counted as raw text, while pydantic-ai sends it inside
    {"error": ...}, escaped: eight parallel retries of quotes and backslashes counted
    9,600 bytes and sent 19,296 in a 10,000-byte turn."""
    sent: list[int] = []

    def model(messages: list[ModelMessage], info: AgentInfo) -> ModelResponse:
        if len(messages) == 1:
            calls = [ToolCallPart("search", {"q": str(i)}, tool_call_id=f"c{i}") for i in range(8)]
            return ModelResponse(parts=calls)
        returned = [p for p in messages[-1].parts if isinstance(p, ToolReturnPart)]
        sent.extend(len(p.model_response_str().encode()) for p in returned)
        return ModelResponse(parts=[TextPart("done")])

    capability = TurnBudgetCapability(turn)
    agent = PydanticAgent(FunctionModel(model), capabilities=[capability], retries=3)

    @agent.tool_plain
    def search(q: str) -> str:
        raise raised('"\\\n' * 400 if q != "0" else "short")

    agent.run_sync("go")
    (report,) = capability.reports
    assert len(sent) == 8
    assert sum(sent) <= report.used_bytes <= TURN
    assert not report.over_budget


@pytest.mark.parametrize("size", [20_000, 10])
def test_regression_pydantic_ai_argument_validation_errors_count_against_the_turn(
    turn: TurnBudget, size: int
) -> None:
    """Only the execute hooks were wired: a 20 KB argument that did not validate came
    back to the model inside its validation error, 20,135 bytes, never counted."""
    sent: list[str] = []

    def model(messages: list[ModelMessage], info: AgentInfo) -> ModelResponse:
        if len(messages) == 1:
            call = ToolCallPart("lookup", {"n": "x" * size}, tool_call_id="v1")
            return ModelResponse(parts=[call])
        sent.extend(
            p.model_response_str() for p in messages[-1].parts if isinstance(p, ToolReturnPart)
        )
        return ModelResponse(parts=[TextPart("done")])

    capability = TurnBudgetCapability(turn)
    agent = PydanticAgent(FunctionModel(model), capabilities=[capability], retries=3)

    @agent.tool_plain
    def lookup(n: int) -> str:
        return "ok"

    assert agent.run_sync("go").output == "done"
    ((admitted,),) = [r.results for r in capability.reports]
    (text,) = sent
    assert admitted.tool == "lookup"
    assert len(text.encode()) <= admitted.admitted_bytes < TURN
    assert ("spilled" in text) is (size > TURN)
    if admitted.spill is None:
        assert "int_parsing" in text
    else:  # the note names the spill, which holds the errors as pydantic-ai sends them
        assert admitted.spill.ref in text
        errors = orjson.loads(admitted.spill.path.read_bytes())["error"]
        assert errors[0]["type"] == "int_parsing"
        assert errors[0]["input"] == "x" * size


def answers_to(
    calls: list[ToolCallPart], tool: Any, turn: TurnBudget
) -> tuple[list[str], TurnReport]:
    """What pydantic-ai sends the model for *calls* of *tool* (its retry answers
    included), one request later, and the report of the turn that admitted them."""
    sent: list[str] = []

    def model(messages: list[ModelMessage], info: AgentInfo) -> ModelResponse:
        if len(messages) == 1:
            return ModelResponse(parts=list(calls))
        sent.extend(
            p.model_response_str() for p in messages[-1].parts if isinstance(p, ToolReturnPart)
        )
        return ModelResponse(parts=[TextPart("done")])

    capability = TurnBudgetCapability(turn)
    agent = PydanticAgent(FunctionModel(model), capabilities=[capability], retries=5)
    agent.tool_plain(tool)
    agent.run_sync("go")
    (report,) = capability.reports
    return sent, report


@pytest.mark.parametrize(("calls", "quotes"), [(3, 100), (5, 2000)], ids=["fit", "spilled"])
def test_regression_pydantic_ai_validation_errors_count_their_wrapper(
    calls: int, quotes: int
) -> None:
    """Validation errors were counted bare, and a spilled one's note as raw text, while
    pydantic-ai sends each inside {"error": ...} (the note escaped): parallel calls sent
    1,005 bytes in a 980-byte turn that reported itself within budget."""

    def lookup(n: int) -> str:
        return "ok"

    parts = [
        ToolCallPart("lookup", {"n": '"' * quotes}, tool_call_id=f"c{i}") for i in range(calls)
    ]
    sent, report = answers_to(parts, lookup, TurnBudget(max_bytes=1000, max_calls=calls))
    assert len(sent) == calls
    assert all(t.startswith('{"error":') for t in sent)
    # Each answer is no longer than what the turn counted for it, so the turn holds.
    for text, admitted in zip(sent, report.results, strict=True):
        assert len(text.encode()) <= admitted.admitted_bytes
    assert sum(len(t.encode()) for t in sent) <= report.used_bytes <= 1000
    assert not report.over_budget


def test_regression_pydantic_ai_validation_errors_count_wide_ints_in_full() -> None:
    """The turn counted a 1,268-digit integer in the errors as the encoder's short marker
    (132 bytes) while pydantic-ai sends every digit: 1,362 bytes in a 1,000-byte turn."""

    def lookup(q: str) -> str:
        return "ok"

    parts = [ToolCallPart("lookup", {"q": 7**1500}, tool_call_id="c")]
    sent, report = answers_to(parts, lookup, TurnBudget(max_bytes=1000))
    (text,) = sent
    (admitted,) = report.results
    assert len(text.encode()) <= admitted.admitted_bytes <= report.used_bytes <= 1000
    assert admitted.spill is not None  # the digits do not fit: the note names the spill
    assert str(7**1500) in admitted.spill.path.read_text()


def test_regression_pydantic_ai_model_retry_messages_count_against_the_turn(
    turn: TurnBudget,
) -> None:
    """A tool's ModelRetry message went to the model whole (50 KB in a 10,000-byte
    turn): only returned values were admitted."""
    retried: list[str] = []

    def model(messages: list[ModelMessage], info: AgentInfo) -> ModelResponse:
        last = [p for p in messages[-1].parts if isinstance(p, ToolReturnPart)]
        if last:
            retried.append(last[0].model_response_str())
        if len(messages) < 4:
            call = ToolCallPart("lookup", {"q": "x"}, tool_call_id=f"r{len(messages)}")
            return ModelResponse(parts=[call])
        return ModelResponse(parts=[TextPart("done")])

    capability = TurnBudgetCapability(turn)
    agent = PydanticAgent(FunctionModel(model), capabilities=[capability])
    calls = {"n": 0}

    @agent.tool_plain(retries=3)
    def lookup(q: str) -> str:
        calls["n"] += 1
        if calls["n"] == 1:
            raise ModelRetry("no such id; the ids are: " + ", ".join(map(str, range(10_000))))
        raise ToolFailed("gone for good: " + "x" * 50_000)

    assert agent.run_sync("go").output == "done"
    assert len(retried) == 2
    for text in retried:
        assert len(text.encode()) < TURN
        assert "spilled" in text
    assert [r.used_bytes <= TURN for r in capability.reports] == [True, True]


def files_turn(
    calls: int, files: int, turn: TurnBudget
) -> tuple[list[tuple[str, list[Any]]], TurnReport]:
    """*calls* parallel calls, each returning a long text and *files* images: what a
    provider whose tool results take text only sends for each (pydantic-ai's own
    rendering: the tool message and the files that follow it), and the turn's report."""
    images = [
        BinaryContent(b"\x89PNG" + bytes([i]) * 100, media_type="image/png") for i in range(files)
    ]
    sent: list[tuple[str, list[Any]]] = []

    def model(messages: list[ModelMessage], info: AgentInfo) -> ModelResponse:
        if len(messages) == 1:
            parts = [ToolCallPart("shots", {"page": i}, tool_call_id=f"c{i}") for i in range(calls)]
            return ModelResponse(parts=parts)
        for part in messages[-1].parts:
            if isinstance(part, ToolReturnPart):
                sent.append(part.model_response_str_and_user_content())
        return ModelResponse(parts=[TextPart("done")])

    capability = TurnBudgetCapability(turn)
    agent = PydanticAgent(FunctionModel(model), capabilities=[capability])

    @agent.tool_plain
    def shots(page: int) -> list[Any]:
        """A page's screenshots, with its text."""
        return [f"page {page} text " * 500, *images]

    assert agent.run_sync("go").output == "done"
    (report,) = capability.reports
    return sent, report


def test_regression_pydantic_ai_spilled_text_with_files_stays_within_the_turn(
    tmp_path: Path,
) -> None:
    """A spilled text beside twelve files became the bare store file name, with no
    spill marker, and the message ([name, "See file …", ...]) was never checked against
    what the turn counted: four calls sent 1,228 bytes in a 1,000-byte turn."""
    turn = TurnBudget(max_bytes=1000, store=SpillStore(tmp_path))
    sent, report = files_turn(4, 12, turn)
    assert len(sent) == 4
    assert sum(len(text.encode()) for text, _ in sent) <= report.used_bytes <= 1000
    assert not report.over_budget
    by_size = sorted(len(text.encode()) for text, _ in sent)
    counted = sorted(r.admitted_bytes for r in report.results)
    assert all(s <= c for s, c in zip(by_size, counted, strict=True))
    for text, files in sent:
        doc = orjson.loads(text) if text.startswith("[") else [text]
        note = doc[0]
        assert note.startswith("…[spilled: ")  # the cut is marked in-band
        kept = len(doc) - 1
        assert len(files) == 3 * kept  # each file framed by pydantic-ai's two tags
        assert doc[1:] == [f"See file {f.identifier}." for f in files[1::3]]
        if kept < 12:
            assert f"; {12 - kept} " in note  # the files left out are counted in the note
        # The note names the spill, which holds the text and every file's reference.
        (spilled,) = [r.spill for r in report.results if r.spill and r.spill.ref in note]
        assert spilled is not None
        whole = orjson.loads(spilled.path.read_bytes())
        assert whole[0].startswith("page ")
        assert len(whole) == 13


def test_pydantic_ai_spilled_text_keeps_its_files_where_they_fit(tmp_path: Path) -> None:
    # With room, the whole note and every file go: only the text is replaced.
    turn = TurnBudget(max_bytes=5000, store=SpillStore(tmp_path))
    sent, report = files_turn(1, 12, turn)
    ((text, files),) = sent
    (admitted,) = report.results
    note, *refs = orjson.loads(text)
    assert admitted.spill is not None
    assert note == (
        f"…[spilled: {admitted.spill.size} bytes as {admitted.spill.ref}; read it with read_result]"
    )
    assert len(refs) == 12
    assert len(files) == 36
    assert len(text.encode()) <= admitted.admitted_bytes


def test_regression_pydantic_ai_spilled_error_keeps_its_marker() -> None:
    """Where the turn had room only for a bare reference, a spilled retry message
    became the bare store file name: nothing in-band said it was cut."""

    def lookup(q: str) -> str:
        raise ModelRetry('"' * 2000)

    parts = [ToolCallPart("lookup", {"q": str(i)}, tool_call_id=f"c{i}") for i in range(5)]
    sent, report = answers_to(parts, lookup, TurnBudget(max_bytes=1000, max_calls=5))
    assert len(sent) == 5
    for text in sent:
        assert orjson.loads(text)["error"].startswith("…[spilled: ")
    assert sum(len(t.encode()) for t in sent) <= report.used_bytes <= 1000


#: The reference a note names: ``…[spilled: N bytes as REF; …]``, ``… in REF``, ``…[spilled: REF]``.
NOTE_REF = re.compile(r"…\[spilled: (?:\d+ bytes (?:as|in) )?([^\s;\]]+)")


@pytest.mark.parametrize("max_bytes", [6000, 800], ids=["roomy", "tight"])
def test_regression_pydantic_ai_notes_name_the_readers_reference(
    tmp_path: Path, max_bytes: int
) -> None:
    """With a reader and kind="text" (a text preview, not JSON), the note for a spilled
    text beside files and for a spilled ModelRetry / ToolFailed message named the store's
    file name: read_result refused it (InvalidCursor), so the spill could never be read
    back, and the file name reached the model."""
    reader = ResultReader(spill=SpillStore(tmp_path))
    turn = TurnBudget(max_bytes=max_bytes, max_calls=3, reader=reader, principal="alice",
                      kind="text")  # fmt: skip
    png = BinaryContent(b"\x89PNG" + b"0" * 100, media_type="image/png")
    sent: list[str] = []

    def model(messages: list[ModelMessage], info: AgentInfo) -> ModelResponse:
        if len(messages) == 1:
            names = ["fetch", "retry", "fail"]
            return ModelResponse(parts=[ToolCallPart(n, {"q": n}, tool_call_id=n) for n in names])
        for part in messages[-1].parts:
            if isinstance(part, ToolReturnPart):
                sent.append(part.model_response_str_and_user_content()[0])
        return ModelResponse(parts=[TextPart("done")])

    capability = TurnBudgetCapability(turn)
    agent = PydanticAgent(FunctionModel(model), capabilities=[capability], retries=3)

    @agent.tool_plain
    def fetch(q: str) -> list[Any]:
        return ["page text line\n" * 400, png]

    @agent.tool_plain
    def retry(q: str) -> str:
        raise ModelRetry("bad query: " + "x" * 5000)

    @agent.tool_plain
    def fail(q: str) -> str:
        raise ToolFailed("gone: " + "x" * 5000)

    assert agent.run_sync("go").output == "done"
    (report,) = capability.reports
    assert len(sent) == 3
    assert sum(len(t.encode()) for t in sent) <= report.used_bytes <= max_bytes
    assert [r.kind for r in report.results] == ["text"] * 3
    # Both text forms: a footer naming the reference, and the bare …[spilled: N bytes in REF].
    footers = [b"; the whole result is " in r.data for r in report.results]
    assert any(footers)
    assert not all(footers)
    stored = {r.spill.ref: r.spill for r in report.results if r.spill is not None}
    assert len(stored) == 3
    read: set[str] = set()
    for text in sent:
        assert not any(name in text for name in stored)  # the file's name never appears
        match = NOTE_REF.search(text)
        assert match is not None
        # The reference reads the whole spill back (its text, from the start).
        page = read_result(match.group(1), reader=reader, principal="alice")
        first = orjson.loads(page.data)["items"][0]
        (spill,) = [r for r in stored.values() if r.path.read_text().startswith(first)]
        read.add(spill.label)
    assert read == {"fetch", "retry", "fail"}


class Table(pydantic.BaseModel):
    title: str
    rows: list[dict[str, Any]]


def output_answers(
    turn: TurnBudget,
    first: list[ToolCallPart],
    setup: Callable[[PydanticAgent[None, Table]], None] | None = None,
) -> tuple[list[ToolReturnPart], TurnBudgetCapability]:
    """The answers pydantic-ai sends for the calls of *first* (output tool calls among
    them), one request later; then the model returns a valid table."""
    sent: list[ToolReturnPart] = []

    def model(messages: list[ModelMessage], info: AgentInfo) -> ModelResponse:
        out = info.output_tools[0].name
        if len(messages) == 1:
            return ModelResponse(parts=[replace_name(p, out) for p in first])
        if not sent:
            sent.extend(p for p in messages[-1].parts if isinstance(p, ToolReturnPart))
        return ModelResponse(parts=[ToolCallPart(out, {"title": "ok", "rows": []})])

    capability = TurnBudgetCapability(turn)
    agent = PydanticAgent(FunctionModel(model), output_type=Table, capabilities=[capability])

    @agent.tool_plain
    def lookup(q: int) -> str:
        return "r"

    if setup is not None:
        setup(agent)
    assert agent.run_sync("go").output == Table(title="ok", rows=[])
    return sent, capability


def replace_name(part: ToolCallPart, out: str) -> ToolCallPart:
    if part.tool_name != "OUT":
        return part
    return ToolCallPart(out, part.args, tool_call_id=part.tool_call_id)


@pytest.mark.parametrize("size", [2000, 3], ids=["spilled", "fits"])
def test_regression_pydantic_ai_output_tool_validation_errors_count_against_the_turn(
    tmp_path: Path, size: int
) -> None:
    """Only the function-tool hooks were wired: an output tool's (final_result) arguments
    that did not validate came back whole, the input echoed, past the turn: 18,238 bytes
    of answers in a 2,000-byte turn, final_result not in the report."""
    turn = TurnBudget(max_bytes=2000, store=SpillStore(tmp_path))
    long = "row data " * size
    sent, capability = output_answers(turn, [
        ToolCallPart("OUT", {"title": "t", "rows": long}, tool_call_id="o"),
        ToolCallPart("lookup", {"q": long}, tool_call_id="l"),
    ])  # fmt: skip
    report = capability.reports[0]
    assert sorted(p.tool_name for p in sent) == ["final_result", "lookup"]
    assert sorted(r.tool for r in report.results) == ["final_result", "lookup"]
    texts = [p.model_response_str() for p in sent]
    assert sum(len(t.encode()) for t in texts) <= report.used_bytes <= 2000
    (out,) = [t for p, t in zip(sent, texts, strict=True) if p.tool_name == "final_result"]
    (admitted,) = [r for r in report.results if r.tool == "final_result"]
    assert len(out.encode()) <= admitted.admitted_bytes
    if admitted.spill is None:
        assert orjson.loads(out)["error"][0]["type"] == "list_type"
    else:  # the note names the spill, which holds the errors, the input whole
        assert orjson.loads(out)["error"].startswith(f"…[spilled: {admitted.spill.size} bytes")
        assert admitted.spill.ref in out
        errors = orjson.loads(admitted.spill.path.read_bytes())["error"]
        assert errors[0]["type"] == "list_type"
        assert errors[0]["input"] == long


def validator(agent: PydanticAgent[None, Table]) -> None:
    @agent.output_validator
    def check(table: Table) -> Table:
        if table.title != "ok":
            raise ModelRetry("not ok; the known titles are: " + ", ".join(map(str, range(3000))))
        return table


def test_regression_pydantic_ai_output_validator_retry_counts_against_the_turn(
    tmp_path: Path,
) -> None:
    """An @agent.output_validator's ModelRetry answers the output tool's call with its
    message: it reached the model whole (17 KB in a 2,000-byte turn), never admitted."""
    turn = TurnBudget(max_bytes=2000, store=SpillStore(tmp_path))
    call = ToolCallPart("OUT", {"title": "t", "rows": []}, tool_call_id="o")
    sent, capability = output_answers(turn, [call], validator)
    ((part,),) = [sent]
    (admitted,) = capability.reports[0].results
    text = part.model_response_str()
    assert part.tool_name == admitted.tool == "final_result"
    assert len(text.encode()) <= admitted.admitted_bytes <= 2000
    assert admitted.spill is not None
    assert admitted.spill.ref in text
    assert "known titles are: 0, 1, 2" in orjson.loads(admitted.spill.path.read_bytes())["error"]


async def test_pydantic_ai_streamed_partial_output_is_not_admitted(tmp_path: Path) -> None:
    # pydantic-ai validates a streamed output tool's arguments at every chunk and sends
    # none of those errors; only the final output's failure is admitted (run_stream()
    # then ends the run rather than retry, as the docs say).
    async def stream(messages: list[ModelMessage], info: AgentInfo) -> Any:
        out = info.output_tools[0].name
        args = '{"title": "t", "rows": "' + "x" * 5000 + '"}'
        yield {0: DeltaToolCall(name=out, json_args=args[:500], tool_call_id="o")}
        for i in range(500, len(args), 500):
            yield {0: DeltaToolCall(json_args=args[i : i + 500])}

    turn = TurnBudget(max_bytes=2000, store=SpillStore(tmp_path))
    capability = TurnBudgetCapability(turn)
    agent = PydanticAgent(FunctionModel(stream_function=stream), output_type=Table,
                          capabilities=[capability])  # fmt: skip

    async def drain() -> None:
        async with agent.run_stream("go") as result:
            async for _ in result.stream_output(debounce_by=None):
                pass  # each chunk's partial output is validated

    with pytest.raises(UnexpectedModelBehavior):
        await drain()
    ((admitted,),) = [r.results for r in capability.reports]  # the run's last turn
    assert admitted.tool == "final_result"
    assert admitted.spill is not None


def test_pydantic_ai_output_that_is_no_tool_call_is_not_admitted(turn: TurnBudget) -> None:
    # The documented limit: output that is no tool call is answered with retry feedback
    # (a user message quoting the output), not a tool's answer; it is not admitted.
    feedback: list[str] = []

    def model(messages: list[ModelMessage], info: AgentInfo) -> ModelResponse:
        if len(messages) == 1:
            return ModelResponse(parts=[TextPart('{"title": "t", "rows": "' + "x" * 20_000 + '"}')])
        # The feedback reaches the model as a user prompt (pydantic-ai's own rendering).
        parts = messages[-1].parts
        feedback.extend(str(p.content) for p in parts if isinstance(p, UserPromptPart))
        return ModelResponse(parts=[TextPart('{"title": "ok", "rows": []}')])

    capability = TurnBudgetCapability(turn)
    agent = PydanticAgent(FunctionModel(model), output_type=PromptedOutput(Table),
                          capabilities=[capability])  # fmt: skip
    assert agent.run_sync("go").output == Table(title="ok", rows=[])
    (text,) = feedback
    assert "x" * 20_000 in text  # sent as it is
    assert capability.reports == []


def test_regression_langchain_document_blocks_of_files_are_media(turn: TurnBudget) -> None:
    """A PDF as a `document` block (a LangChain tool message block, a file as
    langchain-core reads it) was counted as text and, too big for the turn, replaced by
    a preview of its base64: the PDF never reached the model."""
    pdf = base64.b64encode(b"%PDF-1.7\n" + bytes(12_000)).decode()
    sources: list[dict[str, Any]] = [
        {"type": "base64", "media_type": "application/pdf", "data": pdf},
        {"type": "url", "url": "https://example.com/q3.pdf"},
        {"type": "file", "file_id": "file_123"},
    ]
    for source in sources:
        document = {"type": "document", "source": source}

        @tool
        def fetch(q: str) -> list[dict[str, Any]]:
            """Fetch the report."""
            return [{"type": "text", "text": "Here is the report."}, document]  # noqa: B023

        call: Any = {"name": "fetch", "args": {"q": "q3"}, "id": "d1", "type": "tool_call"}
        before = turn.report().used_bytes
        blocks = budget_tool(fetch, turn).invoke(call).content
        assert blocks == [{"type": "text", "text": "Here is the report."}, document]
        assert turn.report().used_bytes - before == len(b"Here is the report.")
    # A document of text is text in the model's context: counted as its JSON.
    text_doc = {"type": "document", "source": {"type": "text", "data": "x" * 20_000}}

    @tool
    def notes(q: str) -> list[dict[str, Any]]:
        """Notes."""
        return [text_doc]

    call = {"name": "notes", "args": {"q": "a"}, "id": "d2", "type": "tool_call"}
    (block,) = budget_tool(notes, TurnBudget(max_bytes=TURN)).invoke(call).content
    assert block["type"] == "text"
    assert "spilled" in block["text"]


def rows_of(n: int) -> Iterator[dict[str, Any]]:
    return ({"row": i, "text": "lorem ipsum"} for i in range(n))


def rows_json(n: int) -> Any:
    return [{"row": i, "text": "lorem ipsum"} for i in range(n)]


async def test_regression_openai_agents_a_generator_of_values_is_a_value(
    turn: TurnBudget,
) -> None:
    """A tool returning a generator of rows aborted Runner.run ("a streamed result must
    yield bytes"): the turn read every iterator as a byte stream."""

    @function_tool
    def rows(n: int) -> Any:
        """Rows."""
        return rows_of(n)

    model = ScriptedModel([
        ModelStep(output=[function_call("rows", {"n": 3}, call_id="c1"),
                          function_call("rows", {"n": 2000}, call_id="c2")]),
        ModelStep(output=[assistant_message("done")]),
    ])  # fmt: skip
    agent = Agent(name="a", model=model, tools=budget_tools([rows], turn))
    result = await Runner.run(agent, "go", run_config=RunConfig(tracing_disabled=True))
    assert result.final_output == "done"
    small, big = [
        i["output"] for i in model.calls[1].input if i.get("type") == "function_call_output"
    ]
    assert orjson.loads(small) == rows_json(3)
    ref = orjson.loads(big)["spilled"]["ref"]  # spilled whole, previewed as JSON
    assert orjson.loads(turn.gate.store.read(ref, 0, 10**7)) == rows_json(2000)
    assert turn.report().used_bytes <= TURN


def test_regression_pydantic_ai_a_generator_of_values_is_a_value(turn: TurnBudget) -> None:
    # The same TypeError failed agent.run_sync (pydantic-ai alone sends "[]").
    sent: list[str] = []

    def model(messages: list[ModelMessage], info: AgentInfo) -> ModelResponse:
        if len(messages) == 1:
            return ModelResponse(parts=[ToolCallPart("rows", {"n": 3}, tool_call_id="g")])
        sent.extend(
            p.model_response_str() for p in messages[-1].parts if isinstance(p, ToolReturnPart)
        )
        return ModelResponse(parts=[TextPart("done")])

    agent = PydanticAgent(FunctionModel(model), capabilities=[TurnBudgetCapability(turn)])

    @agent.tool_plain
    def rows(n: int) -> Any:
        return rows_of(n)

    assert agent.run_sync("go").output == "done"
    assert [orjson.loads(s) for s in sent] == [rows_json(3)]


def test_regression_langchain_a_generator_of_values_is_a_value(turn: TurnBudget) -> None:
    # Invoked without a tool call, budget_tool raised the same TypeError; with one,
    # LangChain itself has made the generator its repr, which is admitted as text.
    @tool
    def rows(n: int) -> Any:
        """Rows."""
        return rows_of(n)

    assert orjson.loads(budget_tool(rows, turn).invoke({"n": 3})) == rows_json(3)
    assert budget_tool(rows, turn).invoke({"n": 0}) == "[]"

    @tool
    def chunks(n: int) -> Any:
        """Bytes, streamed."""
        return iter([b"line one\n", b"line two\n"])

    assert budget_tool(chunks, turn).invoke({"n": 1}) == "line one\nline two\n"


# --- r12: the adapters keep what the frameworks rely on -------------------------------------


async def require_approval(ctx: Any, params: dict[str, Any], call_id: str) -> bool:
    return str(params["path"]).startswith("/etc")


async def test_regression_openai_agents_budgeted_tool_keeps_the_approval_check(
    turn: TurnBudget,
) -> None:
    """The budgeted copy replaced the SDK's invoker, which the SDK then no longer knew:
    a callable needs_approval was evaluated on the raw arguments, which the tool's
    validator then changed, and "/tmp/../etc/passwd" was deleted as "/etc/passwd"
    without the approval the plain tool asks for. Its __wrapped__ was gone too."""
    deleted: list[str] = []

    def delete(path: Annotated[str, pydantic.AfterValidator(os.path.normpath)]) -> str:
        """Delete a file."""
        deleted.append(path)
        return "deleted " + path * 2000  # past the turn: admitted, spilled

    model = ScriptedModel([
        ModelStep(output=[function_call("delete", {"path": "/tmp/../etc/passwd"}, call_id="c1")]),
        ModelStep(output=[assistant_message("done")]),
    ])  # fmt: skip
    tool = function_tool(delete, needs_approval=require_approval)
    (budgeted,) = budget_tools([tool], turn)
    agent = Agent(name="a", model=model, tools=[budgeted])
    hooks = TurnBudgetHooks(turn)
    config = RunConfig(tracing_disabled=True)
    result = await Runner.run(agent, "go", hooks=hooks, run_config=config)
    assert [item.raw_item.name for item in result.interruptions] == ["delete"]  # type: ignore[union-attr]
    assert deleted == []
    state = result.to_state()
    state.approve(result.interruptions[0])
    resumed = await Runner.run(agent, state, hooks=hooks, run_config=config)
    assert resumed.final_output == "done"
    assert deleted == ["/etc/passwd"]
    (output,) = [
        i["output"] for i in model.calls[-1].input if i.get("type") == "function_call_output"
    ]
    assert len(output.encode()) <= TURN
    assert "spilled" in output
    assert isinstance(budgeted, FunctionTool)
    assert budgeted.__wrapped__ is delete


class QueryTool(FunctionTool):
    """A FunctionTool subclass with a constructor of its own, as the SDK allows."""

    def __init__(self, db: dict[str, str]) -> None:
        self.db = db
        super().__init__(
            name="query",
            description="Look a key up.",
            params_json_schema={
                "type": "object",
                "properties": {"key": {"type": "string"}},
                "required": ["key"],
                "additionalProperties": False,
            },
            on_invoke_tool=self.lookup,
        )

    async def lookup(self, ctx: Any, arguments: str) -> str:
        return self.db[orjson.loads(arguments)["key"]]


async def test_regression_openai_agents_a_function_tool_subclass_is_budgeted(
    turn: TurnBudget,
) -> None:
    """budget_tools copied a tool with dataclasses.replace, which calls the class's
    constructor: a subclass with its own raised TypeError before the agent was built."""
    tool = QueryTool({"k": "v" * 20_000})
    (budgeted,) = budget_tools([tool], turn)
    assert isinstance(budgeted, QueryTool)
    assert tool.on_invoke_tool == tool.lookup  # the tool given is left as it was
    budgeted.db = {"k": "w" * 20_000}  # the copy runs against its own state, as the SDK's
    model = ScriptedModel([
        ModelStep(output=[function_call("query", {"key": "k"}, call_id="c1")]),
        ModelStep(output=[assistant_message("done")]),
    ])  # fmt: skip
    agent = Agent(name="a", model=model, tools=[budgeted])
    hooks = TurnBudgetHooks(turn)
    config = RunConfig(tracing_disabled=True)
    result = await Runner.run(agent, "go", hooks=hooks, run_config=config)
    assert result.final_output == "done"
    (output,) = [
        i["output"] for i in model.calls[1].input if i.get("type") == "function_call_output"
    ]
    assert len(output.encode()) <= TURN
    ((admitted,),) = [report.results for report in hooks.reports]
    assert admitted.spill is not None
    assert turn.gate.store.read(admitted.spill.ref, 0, 10**6) == b"w" * 20_000


async def test_regression_langchain_single_input_tool_keeps_its_schema(turn: TurnBudget) -> None:
    """A budgeted single-input Tool was no Tool: models were shown the signature of
    Tool._run ({args, config, kwargs}) for {"__arg1": string}, and a call that followed
    it failed with "Too many arguments to single-input tool"."""
    search = Tool(name="search", func=lambda q: "r" * 20_000, description="Search the web.")
    bounded = budget_tool(search, turn)
    assert convert_to_openai_tool(bounded) == convert_to_openai_tool(search)
    assert convert_to_openai_tool(bounded)["function"]["parameters"]["required"] == ["__arg1"]
    call: Any = {"name": "search", "args": {"__arg1": "cats"}, "id": "c1", "type": "tool_call"}
    assert "spilled" in bounded.invoke(call).content
    assert "spilled" in (await bounded.ainvoke(call)).content
    grammar = Tool(
        name="sql",
        func=lambda q: q,
        description="Run SQL.",
        metadata={"type": "custom_tool", "format": {"type": "grammar"}},
    )
    custom = convert_to_openai_tool(grammar)
    assert custom["type"] == "custom"
    assert convert_to_openai_tool(budget_tool(grammar, turn)) == custom


def test_regression_langchain_callback_on_the_model_keeps_the_turn_in_a_tool(
    tmp_path: Path,
) -> None:
    """TurnBudgetCallback given to the model's constructor sees the model's runs only, not
    the tools': a tool that asked that model started a new turn mid-turn, and the model
    was then sent 6,401 bytes of tool results in a 4,000-byte turn, unreported."""
    turn = TurnBudget(max_bytes=4000, store=SpillStore(tmp_path / "spill"))
    budget = TurnBudgetCallback(turn)
    calls: list[Any] = [
        {"name": "search", "args": {"q": f"q{i}"}, "id": f"s{i}", "type": "tool_call"}
        for i in range(6)
    ]
    calls.insert(3, {"name": "summarize", "args": {"text": "t"}, "id": "m", "type": "tool_call"})
    model = FakeMessagesListChatModel(
        callbacks=[budget],
        responses=[AIMessage("", tool_calls=calls), AIMessage("summary " * 10), AIMessage("")],
    )

    @tool
    def search(q: str) -> str:
        """Search."""
        return f"result for {q} " * 100

    @tool
    def summarize(text: str) -> str:
        """Summarize with the model."""
        return str(model.invoke([HumanMessage(text)]).content)

    tools = {t.name: budget_tool(t, turn) for t in (search, summarize)}
    first = model.invoke([HumanMessage("go")])
    assert isinstance(first, AIMessage)
    outputs = [tools[call["name"]].invoke(call) for call in first.tool_calls]
    assert sum(len(o.content.encode()) for o in outputs) <= 4000
    assert budget.reports == []  # the model the tool asked started no turn
    assert len(turn.report().results) == 7
    model.invoke([HumanMessage("next")])  # the next turn
    (report,) = budget.reports
    assert len(report.results) == 7
    assert not report.over_budget


def nested(depth: int) -> Any:
    value: Any = "leaf"
    for _ in range(depth):
        value = {"child": value}
    return value


def test_regression_langchain_a_deep_json_block_gets_a_depth_marker(turn: TurnBudget) -> None:
    """A json block nested 1,500 deep: json.dumps and then repr raised RecursionError out
    of budget_tool. It is counted as the encoder writes it, its depth marked, and that
    counted text is what the model gets."""

    @tool
    def fetch(q: str) -> list[Any]:
        """The API's JSON as a json block."""
        return [{"type": "json", "json": nested(1500)}, {"type": "image", "url": "u"}]

    call: Any = {"name": "fetch", "args": {"q": "x"}, "id": "c1", "type": "tool_call"}
    text, image = budget_tool(fetch, turn).invoke(call).content
    assert image == {"type": "image", "url": "u"}
    assert text["type"] == "text"
    assert "[depth: object with 1 keys]" in text["text"]
    assert text["text"].startswith('{"type":"json","json":{"child":{"child":')
    assert turn.report().used_bytes == len(text["text"].encode())


def test_regression_langchain_a_list_of_tool_messages_is_admitted(turn: TurnBudget) -> None:
    """A tool returning [ToolMessage(...)] (LangChain passes such a list on as it is)
    sent 50,000 bytes to the model through budget_tool, counted nowhere."""

    @tool
    def many(q: str) -> list[ToolMessage]:
        """ToolMessages of its own."""
        return [
            ToolMessage(content="M" * 50_000, tool_call_id="c2", name="many"),
            ToolMessage(content="short", tool_call_id="c3", name="many"),
        ]

    call: Any = {"name": "many", "args": {"q": "x"}, "id": "c2", "type": "tool_call"}
    big, small = budget_tool(many, turn).invoke(call)
    assert (big.tool_call_id, small.tool_call_id) == ("c2", "c3")
    assert small.content == "short"
    assert "spilled" in big.content
    report = turn.report()
    assert [a.reason for a in report.results] == ["result_limit", "fits"]
    assert report.used_bytes == len(big.content.encode()) + len("short") <= TURN


# --- concurrent runs: a turn is one run's --------------------------------------------------


async def test_regression_pydantic_ai_concurrent_runs_keep_their_own_turns(
    turn: TurnBudget,
) -> None:
    """One agent (one TurnBudgetCapability) served two requests at once: run B's first
    model request reset the shared turn while three of run A's six calls still ran, and
    A's model got 18,222 bytes of a 10,000-byte turn, split across two reports, neither
    over budget."""
    received: dict[str, list[str]] = {}
    half_done, b_asked = asyncio.Event(), asyncio.Event()
    finished: list[str] = []

    async def model(messages: list[ModelMessage], info: AgentInfo) -> ModelResponse:
        run = str(next(p.content for p in messages[0].parts if isinstance(p, UserPromptPart)))
        if run == "B":
            b_asked.set()
            return ModelResponse(parts=[TextPart("done")])
        if len(messages) == 1:
            return ModelResponse(parts=[ToolCallPart("search", {"q": f"A{i}"}, tool_call_id=f"c{i}")
                                        for i in range(CALLS)])  # fmt: skip
        returned = [p for p in messages[-1].parts if isinstance(p, ToolReturnPart)]
        received[run] = [p.model_response_str() for p in returned]
        return ModelResponse(parts=[TextPart("done")])

    capability = TurnBudgetCapability(turn)
    agent = PydanticAgent(FunctionModel(model), capabilities=[capability])

    @agent.tool_plain
    async def search(q: str) -> list[dict[str, Any]]:
        """Search."""
        if int(q[1:]) >= CALLS // 2:
            await b_asked.wait()  # the other run's model request comes first
        finished.append(q)
        if len(finished) == CALLS // 2:
            half_done.set()
        return search_rows(q)

    async def run_b() -> None:
        await half_done.wait()
        assert (await agent.run("B")).output == "done"

    await asyncio.wait_for(asyncio.gather(agent.run("A"), run_b()), 30)
    check_turn(received["A"], turn, capability.reports)
    assert turn.report().results == ()  # each run had a turn of its own


async def test_regression_openai_agents_concurrent_runs_keep_their_own_turns(
    turn: TurnBudget,
) -> None:
    """Two runs sharing one list of budgeted tools, each with its own TurnBudgetHooks:
    run B's first model call reset the turn while three of run A's six calls still ran,
    and A's model got 18,222 bytes of a 10,000-byte turn, no report over budget."""
    half_done, b_asked = asyncio.Event(), asyncio.Event()
    finished: list[str] = []

    @function_tool
    async def search(q: str) -> str:
        """Search."""
        if q.startswith("A") and int(q[1:]) >= CALLS // 2:
            await b_asked.wait()  # the other run's model call comes first
        finished.append(q)
        if len(finished) == CALLS // 2:
            half_done.set()
        return orjson.dumps(search_rows(q)).decode()

    tools = budget_tools([search], turn)  # one agent definition serving every request

    def agent_for(run: str, calls: int) -> tuple[ScriptedModel, Agent[Any]]:
        model = ScriptedModel([
            ModelStep(output=[function_call("search", {"q": f"{run}{i}"}, call_id=f"c{i}")
                              for i in range(calls)]),
            ModelStep(output=[assistant_message("done")]),
        ])  # fmt: skip
        return model, Agent(name=run, model=model, tools=tools)

    class SignalHooks(TurnBudgetHooks):
        async def on_llm_start(self, context: Any, agent: Any, prompt: Any, items: Any) -> None:
            await super().on_llm_start(context, agent, prompt, items)
            b_asked.set()

    (model_a, agent_a), (_, agent_b) = agent_for("A", CALLS), agent_for("B", 1)
    hooks_a, hooks_b = TurnBudgetHooks(turn), SignalHooks(turn)
    config = RunConfig(tracing_disabled=True)

    async def run_b() -> None:
        await half_done.wait()
        await Runner.run(agent_b, "go", hooks=hooks_b, run_config=config)

    await asyncio.wait_for(
        asyncio.gather(Runner.run(agent_a, "go", hooks=hooks_a, run_config=config), run_b()), 30
    )
    outputs = [
        i["output"] for i in model_a.calls[1].input if i.get("type") == "function_call_output"
    ]
    check_turn(outputs, turn, hooks_a.reports)
    assert turn.report().results == ()  # each run had a turn of its own


def _timeout_log(ctx: Any, error: Exception) -> str:
    return "partial log:\n" + "log line\n" * 500  # 4.5 KB


@pytest.mark.parametrize(
    ("answer", "max_calls"), [(_timeout_log, None), (None, 3)], ids=["custom", "past-max-calls"]
)
async def test_regression_openai_agents_a_timeout_answer_is_admitted(
    tmp_path: Path, answer: Any, max_calls: int | None
) -> None:
    """The SDK answers a call that timed out outside the tool's invoker, where the budget
    wrapped it: a timeout_error_function's 4.5 KB reached the model uncounted (13,588
    bytes of a 10,000-byte turn, the report saying 9,075), and so did the default
    message of a call past max_calls."""
    slow = asyncio.Event()

    @function_tool(timeout=0.05, timeout_error_function=answer)
    async def search(q: str) -> str:
        """Search."""
        if q == "slow":
            await slow.wait()  # never set: it times out
        return orjson.dumps(search_rows(q)).decode()

    turn = TurnBudget(max_bytes=TURN, store=SpillStore(tmp_path), max_calls=max_calls)
    queries = ["a", "b", "c", "slow"]
    model = ScriptedModel([
        ModelStep(output=[function_call("search", {"q": q}, call_id=f"c{i}")
                          for i, q in enumerate(queries)]),
        ModelStep(output=[assistant_message("done")]),
    ])  # fmt: skip
    hooks = TurnBudgetHooks(turn)
    agent = Agent(name="a", model=model, tools=budget_tools([search], turn))
    await Runner.run(agent, "go", hooks=hooks, run_config=RunConfig(tracing_disabled=True))
    outputs = [i["output"] for i in model.calls[1].input if i.get("type") == "function_call_output"]
    sent = sum(len(o.encode()) for o in outputs)
    (report,) = hooks.reports
    assert len(report.results) == len(queries)  # the timed-out call is one of the turn's
    assert report.used_bytes == sent
    assert sent <= TURN or report.over_budget
    if max_calls is None:
        assert sent <= TURN
        timed_out = report.results[-1]
        assert timed_out.spill is not None  # the whole answer is kept
        assert timed_out.spill.size == len(_timeout_log(None, TimeoutError()))
        assert timed_out.shown_ref is not None
        assert timed_out.shown_ref in outputs[-1]


async def test_regression_langchain_concurrent_runs_keep_their_own_turns(
    turn: TurnBudget,
) -> None:
    """Two agent runs (chains with the handler in their callbacks) sharing one budgeted
    tool and one TurnBudgetCallback shared one turn: run B's call was admitted to run A's
    turn, taking its room, and the reports mixed the two runs' calls."""
    half_done, b_asked = asyncio.Event(), asyncio.Event()
    finished: list[str] = []

    @tool
    async def search(q: str) -> list[dict[str, Any]]:
        """Search."""
        if q.startswith("A") and int(q[1:]) >= CALLS // 2:
            await b_asked.wait()  # the other run's model call comes first
        finished.append(q)
        if len(finished) == CALLS // 2:
            half_done.set()
        return search_rows(q)

    bounded = budget_tool(search, turn)
    budget = TurnBudgetCallback(turn)
    received: dict[str, list[str]] = {}

    def agent(run: str, calls: int) -> RunnableLambda[Any, Any]:
        tool_calls = [{"name": "search", "args": {"q": f"{run}{i}"}, "id": f"c{i}"}
                      for i in range(calls)]  # fmt: skip
        model = GenericFakeChatModel(
            messages=iter([AIMessage("", tool_calls=tool_calls), AIMessage("done")])
        )

        async def loop(question: str, config: RunnableConfig) -> str:
            messages: list[BaseMessage] = [HumanMessage(question)]
            first = await model.ainvoke(messages, config=config)
            if run == "B":
                b_asked.set()
            assert isinstance(first, AIMessage)
            results = await asyncio.gather(
                *(bounded.ainvoke({**call, "type": "tool_call"}, config=config)
                  for call in first.tool_calls)
            )  # fmt: skip
            received[run] = [str(m.content) for m in results]
            last = await model.ainvoke([*messages, first, *results], config=config)
            return str(last.content)

        return RunnableLambda(loop)

    async def run_b() -> None:
        await half_done.wait()
        await agent("B", 1).ainvoke("go", config={"callbacks": [budget]})

    config: Any = {"callbacks": [budget]}
    await asyncio.wait_for(asyncio.gather(agent("A", CALLS).ainvoke("go", config), run_b()), 30)
    # Each run's results in its own turn's report (B's call took room of A's turn).
    assert sorted(len(r.results) for r in budget.reports) == [1, CALLS]
    check_turn(received["A"], turn, [r for r in budget.reports if len(r.results) == CALLS])
    assert turn.report().results == ()  # each run had a turn of its own

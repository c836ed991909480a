"""The whole path into the model request, end to end.

A tool returns 100,000 rows. On an MCP server (the official SDK, over stdio) the tool's
result goes through a `ResultGate` (spilled whole, previewed) and `bounded_tool` (the
outer bound); an agent (pydantic-ai, with its FunctionModel as the model) calls it
through pydantic-ai's MCP toolset, with a `TurnBudget` capability. The test reads the
message list the model receives and the logs of both sides.
"""

from __future__ import annotations

import io
import logging
import os
import sys
from pathlib import Path

import orjson
from fastmcp.client.transports import PythonStdioTransport
from pydantic_ai import Agent
from pydantic_ai.mcp import MCPToolset
from pydantic_ai.messages import (
    ModelMessage,
    ModelMessagesTypeAdapter,
    ModelResponse,
    TextPart,
    ToolCallPart,
    ToolReturnPart,
)
from pydantic_ai.models.function import AgentInfo, FunctionModel

from jsonbudget import SpillStore, SummaryFilter, TurnBudget, summary_extra
from jsonbudget.integrations.pydantic_ai import TurnBudgetCapability

ROOT = Path(__file__).resolve().parent.parent
ROWS = 100_000
TURN = 12_000

SERVER = r'''
import logging, sys
import orjson
from mcp.server.mcpserver import MCPServer
from jsonbudget import ResultGate, SpillStore, SummaryFilter, bounded_tool, summary_extra
from jsonbudget._agents.reader import ResultReader
from jsonbudget.mcp import read_result_tool

spill_dir, log_path = sys.argv[1], sys.argv[2]
handler = logging.FileHandler(log_path)
handler.addFilter(SummaryFilter())
handler.setFormatter(logging.Formatter("%(name)s %(message)s %(jsonbudget)s",
                                       defaults={"jsonbudget": "-"}))
logging.getLogger("tools").addHandler(handler)
logging.getLogger("tools").setLevel(logging.INFO)
log = logging.getLogger("tools.search")  # a child: the handler's filter covers it

reader = ResultReader(spill=SpillStore(spill_dir), max_bytes=6000)
gate = ResultGate(max_bytes=16384, reader=reader, principal="agent-1")
server = MCPServer("warehouse")

def all_rows(q):
    return [{"id": i, "q": q, "needle": f"needle-{i}", "note": "é" * 20} for i in range(100_000)]

@server.tool()
@bounded_tool(max_bytes=8000, output="json")
def search(q: str) -> dict:
    """Every row matching q; a large answer is a preview plus a reference."""
    rows = all_rows(q)
    gated = gate.gate({"rows": rows}, label="search")
    log.info("search done", extra={"jsonbudget": gated})  # the filter logs its summary
    log.info("page %s", gated)                            # an argument too
    return orjson.loads(gated.data)

server.tool()(read_result_tool(reader=reader, max_bytes=8192, principal="agent-1"))
server.run("stdio")
'''


def test_the_whole_path_into_the_model_request(tmp_path: Path) -> None:
    server = tmp_path / "server.py"
    server.write_text(SERVER)
    server_log = tmp_path / "server.log"
    transport = PythonStdioTransport(
        server,
        args=[str(tmp_path / "spill"), str(server_log)],
        env={**os.environ, "PYTHONPATH": str(ROOT / "src")},
        python_cmd=sys.executable,
    )
    seen: list[list[ModelMessage]] = []

    def model(messages: list[ModelMessage], info: AgentInfo) -> ModelResponse:
        seen.append(list(messages))
        returns = [p for p in messages[-1].parts if isinstance(p, ToolReturnPart)]
        if len(seen) == 1:
            return ModelResponse(parts=[ToolCallPart("search", {"q": "blue"}, tool_call_id="s1")])
        if len(seen) == 2:
            preview = orjson.loads(str(returns[0].content))  # the admitted text
            ref = preview["spilled"]["ref"]
            call = ToolCallPart("read_result", {"ref": ref, "pointer": "/rows/50000"},
                                tool_call_id="r1")  # fmt: skip
            return ModelResponse(parts=[call])
        return ModelResponse(parts=[TextPart("done")])

    turn = TurnBudget(max_bytes=TURN, store=SpillStore(tmp_path / "client-spill"))
    capability = TurnBudgetCapability(turn)
    agent = Agent(FunctionModel(model), toolsets=[MCPToolset(transport)],
                  capabilities=[capability])  # fmt: skip
    client_log = io.StringIO()
    handler = logging.StreamHandler(client_log)
    handler.addFilter(SummaryFilter())
    handler.setFormatter(logging.Formatter("%(message)s %(jsonbudget)s",
                                           defaults={"jsonbudget": "-"}))  # fmt: skip
    agent_log = logging.getLogger("agent")
    agent_log.addHandler(handler)
    agent_log.setLevel(logging.INFO)
    try:
        result = agent.run_sync("find the blue rows")
        for report in capability.reports:
            logging.getLogger("agent.turns").info("turn", extra=summary_extra(report))
    finally:
        agent_log.removeHandler(handler)
    assert result.output == "done"
    assert len(seen) == 3

    # The message after the search holds the bounded page and its markers.
    (search_return,) = [p for p in seen[1][-1].parts if isinstance(p, ToolReturnPart)]
    assert isinstance(search_return.content, str)
    assert len(search_return.content.encode()) <= 8000
    preview = orjson.loads(search_return.content)
    assert preview["preview"]["rows"][0]["needle"] == "needle-0"
    assert preview["preview"]["rows"][-1].startswith("…[omitted: ")
    assert preview["spilled"]["size"] > 9_000_000
    assert "needle-" not in preview["spilled"]["ref"]

    # No raw copy of the result anywhere in what the model received.
    everything = ModelMessagesTypeAdapter.dump_json(seen[-1])
    assert b"needle-99999" not in everything
    assert b"needle-50001" not in everything
    assert len(everything) < 3 * TURN

    # The agent read item 50,000 back through read_result.
    (read_return,) = [p for p in seen[2][-1].parts if isinstance(p, ToolReturnPart)]
    assert isinstance(read_return.content, str)
    members = orjson.loads(read_return.content)["items"]
    assert {m["key"]: m["value"] for m in members} == {
        "id": 50_000, "q": "blue", "needle": "needle-50000", "note": "é" * 20
    }  # fmt: skip

    # Each turn stayed within its budget, and the logs hold summaries, not rows.
    assert all(r.used_bytes <= TURN for r in capability.reports)
    client_text = client_log.getvalue()
    assert "'kind': 'turn'" in client_text
    assert "needle-" not in client_text
    server_text = server_log.read_text()
    assert server_text.count("'kind': 'gate'") == 2
    assert "needle-" not in server_text

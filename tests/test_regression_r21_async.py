"""r21: a tool's async generator under the agent adapters, read by `TurnBudget.aadmit`.

Each admission that read one ran in a worker of the loop's default executor, blocked
there until the loop had the next item: parallel calls as many as the pool's workers
deadlocked when the generator itself needed one, and a cancelled run went on reading
(and spilling) it in the background, never closing it.
"""

from __future__ import annotations

import os

from tests.limited import bounded_run

# The calls of one turn: more than the default executor's workers (min(32, cpus + 4)).
CALLS = min(32, (os.cpu_count() or 1) + 4) + 2


def test_regression_pydantic_ai_parallel_async_generators_using_the_executor_finish() -> None:
    code = f"""
        import asyncio, os, shutil, tempfile, time
        from pydantic_ai import Agent
        from pydantic_ai.messages import ModelResponse, TextPart, ToolCallPart, ToolReturnPart
        from pydantic_ai.models.function import FunctionModel
        from jsonbudget import SpillStore, TurnBudget
        from jsonbudget.integrations.pydantic_ai import TurnBudgetCapability

        sent = []
        def model(messages, info):
            if len(messages) == 1:
                return ModelResponse(parts=[ToolCallPart("rows", {{"q": f"q{{i}}"}})
                                            for i in range({CALLS})])
            sent.extend(p.model_response_str() for p in messages[-1].parts
                        if isinstance(p, ToolReturnPart))
            return ModelResponse(parts=[TextPart("done")])

        directory = tempfile.mkdtemp()
        turn = TurnBudget(max_bytes=20_000, max_calls=40, store=SpillStore(directory))
        agent = Agent(FunctionModel(model), capabilities=[TurnBudgetCapability(turn)])

        def fetch(q, i):  # a blocking driver call, as async wrappers of sync drivers make
            time.sleep(0.001)
            return {{"q": q, "i": i}}

        @agent.tool_plain
        async def rows(q: str):
            async def gen():
                for i in range(5):
                    yield await asyncio.to_thread(fetch, q, i)
            return gen()

        async def main():
            try:
                print((await asyncio.wait_for(agent.run("go"), 20)).output, len(sent))
            except asyncio.TimeoutError:
                print("hang")
        asyncio.run(main())
        shutil.rmtree(directory)
    """
    assert bounded_run(code, timeout=60).split() == ["done", str(CALLS)]


def test_regression_openai_agents_parallel_async_generators_using_the_executor_finish() -> None:
    code = f"""
        import asyncio, shutil, tempfile, time
        from agents import Agent, RunConfig, Runner, function_tool
        from agents.testing import ModelStep, ScriptedModel, assistant_message, function_call
        from jsonbudget import SpillStore, TurnBudget
        from jsonbudget.integrations.openai_agents import TurnBudgetHooks, budget_tools

        def fetch(q, i):
            time.sleep(0.001)
            return {{"q": q, "i": i}}

        @function_tool
        async def rows(q: str):
            \"\"\"Rows.\"\"\"
            async def gen():
                for i in range(5):
                    yield await asyncio.to_thread(fetch, q, i)
            return gen()

        directory = tempfile.mkdtemp()
        turn = TurnBudget(max_bytes=20_000, max_calls=40, store=SpillStore(directory))
        model = ScriptedModel([
            ModelStep(output=[function_call("rows", {{"q": f"q{{i}}"}}, call_id=f"c{{i}}")
                              for i in range({CALLS})]),
            ModelStep(output=[assistant_message("done")]),
        ])
        agent = Agent(name="a", model=model, tools=budget_tools([rows], turn))

        async def main():
            run = Runner.run(agent, "go", hooks=TurnBudgetHooks(turn),
                             run_config=RunConfig(tracing_disabled=True))
            try:
                print((await asyncio.wait_for(run, 20)).final_output)
            except asyncio.TimeoutError:
                print("hang")
        asyncio.run(main())
        shutil.rmtree(directory)
    """
    assert bounded_run(code, timeout=60).split() == ["done"]


def test_regression_a_cancelled_pydantic_ai_run_stops_reading_its_async_generator() -> None:
    # The run is stopped while the turn reads the generator: it was read on (and spilled)
    # in the background to the store's max_file_bytes, and never closed.
    code = """
        import asyncio, os, shutil, tempfile
        from pydantic_ai import Agent
        from pydantic_ai.messages import ModelResponse, TextPart, ToolCallPart
        from pydantic_ai.models.function import FunctionModel
        from jsonbudget import SpillStore, TurnBudget
        from jsonbudget.integrations.pydantic_ai import TurnBudgetCapability

        def model(messages, info):
            if len(messages) == 1:
                return ModelResponse(parts=[ToolCallPart("feed", {})])
            return ModelResponse(parts=[TextPart("done")])

        directory = tempfile.mkdtemp()
        turn = TurnBudget(max_bytes=10_000, store=SpillStore(directory))
        agent = Agent(FunctionModel(model), capabilities=[TurnBudgetCapability(turn)])
        pulled = [0]
        closed = []
        reading = None

        @agent.tool_plain
        async def feed():
            async def gen():
                try:
                    while True:
                        await asyncio.sleep(0)
                        pulled[0] += 1
                        if pulled[0] == 200:
                            reading.set()
                        yield {"i": pulled[0], "t": "x" * 100}
                finally:
                    closed.append(pulled[0])
            return gen()

        async def main():
            global reading
            reading = asyncio.Event()
            run = asyncio.create_task(agent.run("go"))
            await asyncio.wait_for(reading.wait(), 20)
            run.cancel()
            try:
                await run
            except asyncio.CancelledError:
                pass
            stopped = pulled[0]
            was_closed = bool(closed)
            await asyncio.sleep(0.5)
            print(pulled[0] - stopped, was_closed, len(os.listdir(directory)))
        asyncio.run(main())
        shutil.rmtree(directory)
    """
    grew, was_closed, files = bounded_run(code, timeout=60).split()
    assert int(grew) <= 1  # not read on after the stop
    assert was_closed == "True"  # closed by the time the cancelled run ends
    assert files == "0"  # the spill abandoned


def test_regression_openai_agents_a_tool_timeout_stops_reading_its_async_generator() -> None:
    # The SDK's own tool timeout: the generator was read on after the run ended, and at
    # shutdown "aclose(): asynchronous generator is already running".
    code = """
        import asyncio, shutil, tempfile
        from agents import Agent, RunConfig, Runner, function_tool
        from agents.testing import ModelStep, ScriptedModel, assistant_message, function_call
        from jsonbudget import SpillStore, TurnBudget
        from jsonbudget.integrations.openai_agents import TurnBudgetHooks, budget_tools

        pulled = [0]
        closed = []

        @function_tool(timeout=0.3)
        async def rows():
            \"\"\"Rows.\"\"\"
            async def gen():
                try:
                    for i in range(100_000):
                        await asyncio.sleep(0.001)
                        pulled[0] += 1
                        yield {"i": i, "t": "x" * 100}
                finally:
                    closed.append(1)
            return gen()

        directory = tempfile.mkdtemp()
        turn = TurnBudget(max_bytes=10_000, store=SpillStore(directory))
        model = ScriptedModel([
            ModelStep(output=[function_call("rows", {}, call_id="c1")]),
            ModelStep(output=[assistant_message("done")]),
        ])
        agent = Agent(name="a", model=model, tools=budget_tools([rows], turn))

        async def main():
            result = await Runner.run(agent, "go", hooks=TurnBudgetHooks(turn),
                                      run_config=RunConfig(tracing_disabled=True))
            ended = pulled[0]
            await asyncio.sleep(0.5)
            print(result.final_output, pulled[0] - ended, len(closed))
        asyncio.run(main())
        shutil.rmtree(directory)
    """
    done = bounded_run(code, timeout=60)
    answer, grew, closed = done.split()
    assert answer == "done"
    assert int(grew) <= 1
    assert closed == "1"


def test_regression_a_cancelled_aadmit_counts_nothing_and_holds_no_worker() -> None:
    """Cancelled admissions of live feeds held a default-executor worker each, for as long
    as the feed went on: with as many as the pool's workers, nothing else of the process
    that uses it (every later aadmit, DNS lookups) ran."""
    code = f"""
        import asyncio, os, shutil, tempfile
        from jsonbudget import SpillStore, TurnBudget
        from jsonbudget.integrations._results import atool_result

        async def endless(pulled, closed):
            try:
                while True:
                    await asyncio.sleep(0.001)  # a live feed
                    pulled[0] += 1
                    yield {{"i": pulled[0], "t": "x" * 100}}
            finally:
                closed.append(pulled[0])

        directory = tempfile.mkdtemp()
        turn = TurnBudget(max_bytes=10_000, max_calls={CALLS + 1},
                          store=SpillStore(directory))

        async def main():
            loop = asyncio.get_running_loop()
            feeds = []
            for _ in range({CALLS - 2}):
                pulled, closed = [0], []
                admitting = asyncio.create_task(
                    turn.aadmit(await atool_result(endless(pulled, closed), turn), tool="feed")
                )
                while pulled[0] < 5:
                    await asyncio.sleep(0.001)
                admitting.cancel()
                try:
                    await admitting
                except asyncio.CancelledError:
                    pass
                # closed on the loop, before the cancellation ended
                print("closed", closed == [pulled[0]])
                feeds.append(pulled)
            stopped = [pulled[0] for pulled in feeds]
            try:  # the pool runs work again
                print("pool", await asyncio.wait_for(loop.run_in_executor(None, sum, (1, 2)), 5))
                small = await asyncio.wait_for(turn.aadmit({{"ok": True}}, tool="small"), 5)
            except asyncio.TimeoutError:
                print("stalled", flush=True)
                os._exit(0)  # not the interpreter's exit, which the held workers hang
            report = turn.report()
            # the cancelled calls count nothing, and none is read on
            print("counted", [r.tool for r in report.results], report.used_bytes == len(small.data))
            print("read-on", [pulled[0] for pulled in feeds] != stopped)
            print("files", len(os.listdir(directory)))
        asyncio.run(main())
        shutil.rmtree(directory)
    """
    lines = bounded_run(code, timeout=60).splitlines()
    assert lines == [
        *["closed True"] * (CALLS - 2),
        "pool 3",
        "counted ['small'] True",
        "read-on False",
        "files 0",
    ]

"""r25 guards: a spill store's own (longer) references pushed a gate's answer past
max_bytes; what a user's store hands back reached the answer unchecked; copies of a
TurnBudget shared its turn; the adapters kept budget state at module level; a token
counter's int subclass was refused."""

from __future__ import annotations

import asyncio
import copy
import gc
import hashlib
import io
import pickle
import threading
from pathlib import Path
from typing import Any

import numpy as np
import orjson
import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from jsonbudget import ResultGate, SpillRef, SpillStore, TurnBudget, fit_tokens, gate_result
from jsonbudget.errors import LimitError

_ROWS = [{"id": i, "body": "x" * 200} for i in range(300)]


class _LongRefStore:
    """A `SpillBackend` of the user's whose references are *length* characters long."""

    max_file_bytes: Any = 1 << 30

    def __init__(self, length: int = 180, char: str = "r") -> None:
        self.length = length
        self.char = char
        self.files: dict[str, bytes] = {}

    def _ref(self, data: bytes, label: str, media_type: str) -> SpillRef:
        digest = hashlib.sha256(data).hexdigest()
        ref = (self.char * self.length)[: self.length]
        self.files[ref] = data
        return SpillRef(ref, len(data), digest, media_type, label, Path("/dev/null"))

    def put(self, data: Any, *, label: str, media_type: str = "application/json") -> Any:
        if isinstance(data, bytes | bytearray | memoryview):
            whole = bytes(data)
        else:
            whole = b"".join(bytes(chunk) for chunk in data)
        return self._ref(whole, label, media_type)

    def get(self, ref: str) -> SpillRef:
        raise NotImplementedError

    def read(self, ref: str, offset: int = 0, limit: int = 65536) -> Any:
        return self.files[ref][offset : offset + limit]

    def open(self, ref: str) -> io.BytesIO:
        return io.BytesIO(self.files[ref])


def _bare(ref: str, size: int) -> bytes:
    return orjson.dumps({"spilled": {"ref": ref, "size": size}})


@settings(max_examples=150, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(
    length=st.integers(min_value=1, max_value=2000),
    max_bytes=st.integers(min_value=425, max_value=5000),
    char=st.sampled_from(["r", "é", '"', "\U0001f600"]),
    form=st.sampled_from(["value", "json", "text"]),
)
def test_regression_gate_within_max_bytes_for_any_reference_length(
    length: int, max_bytes: int, char: str, form: str
) -> None:
    """A store's reference of 1 to 2,000 characters: every answer within max_bytes, or
    a LimitError naming the store when not even the bare reference fits."""
    store = _LongRefStore(length, char)
    ref = char * length
    result: Any = _ROWS
    whole = orjson.dumps(_ROWS)
    bare = _bare(ref, len(whole))
    if form == "json":
        result = whole
    elif form == "text":
        result = "line of text\n" * 3000
        bare = f"…[spilled: {len(result)} bytes in {ref}]".encode()
    gate = ResultGate(max_bytes=max_bytes, store=store)
    if len(bare) > max_bytes:
        # Refused only when the shortest answer is too long.
        with pytest.raises(LimitError, match=f"{length} characters") as caught:
            gate.gate(result)
        assert caught.value.name == "store"
        return
    out = gate.gate(result)
    assert len(out.data) <= max_bytes
    assert out.spill is not None
    if out.kind == "json":
        assert orjson.loads(out.data)["spilled"]["ref"] == out.spill.ref
    else:
        assert out.spill.ref in out.text


def test_regression_gate_result_within_max_bytes_with_a_long_reference() -> None:
    """The report's case: a 180-character reference took 464 bytes of 425, 638 of 600."""
    for max_bytes in (425, 500, 600, 4000):
        out = gate_result(_ROWS, max_bytes=max_bytes, store=_LongRefStore(180))
        assert len(out.data) <= max_bytes
        assert orjson.loads(out.data)["spilled"]["ref"] == "r" * 180


def test_regression_turn_answer_within_result_limit_with_a_long_reference() -> None:
    turn = TurnBudget(max_bytes=2000, store=_LongRefStore(300))
    for _ in range(6):
        admitted = turn.admit(_ROWS, tool="rows")
        assert len(admitted.data) <= 2000
        orjson.loads(admitted.data)
    with pytest.raises(LimitError, match="a result may take 2000"):
        TurnBudget(max_bytes=2000, store=_LongRefStore(3000)).admit(_ROWS)


class _BadPut(_LongRefStore):
    def __init__(self, answer: Any) -> None:
        super().__init__()
        self.answer = answer

    def put(self, data: Any, *, label: str, media_type: str = "application/json") -> Any:
        super().put(data, label=label, media_type=media_type)
        return self.answer


def _spill_ref(**changes: Any) -> SpillRef:
    fields: dict[str, Any] = {
        "ref": "r" * 20,
        "size": 10,
        "sha256": "0" * 64,
        "media_type": "application/json",
        "label": "result",
        "path": Path("/dev/null"),
    }
    return SpillRef(**{**fields, **changes})


@pytest.mark.parametrize(
    ("answer", "error", "words"),
    [
        (None, TypeError, "_BadPut.put must return a SpillRef, not NoneType"),
        ("r" * 20, TypeError, "_BadPut.put must return a SpillRef, not str"),
        (_spill_ref(size=-(10**30)), ValueError, "_BadPut.put returned a SpillRef whose size"),
        (_spill_ref(size=10**5000), ValueError, "_BadPut.put returned a SpillRef whose size"),
        (_spill_ref(size="10"), TypeError, "whose size is a str, not an int"),
        (_spill_ref(size=True), TypeError, "whose size is a bool, not an int"),
        (_spill_ref(ref="a\ud800b"), ValueError, "whose ref holds a lone surrogate"),
        (_spill_ref(sha256="\udc80"), ValueError, "whose sha256 holds a lone surrogate"),
        (_spill_ref(ref=b"ref"), TypeError, "whose ref is a bytes, not a str"),
        (_spill_ref(ref=""), ValueError, "_BadPut.put returned a SpillRef with an empty ref"),
    ],
)
@pytest.mark.parametrize(
    "result",
    [_ROWS, b"[" + b"1," * 5000 + b"1]", "text\n" * 5000],
    ids=["value", "json-bytes", "text"],
)
def test_regression_store_put_answer_checked_naming_the_store(
    answer: Any, error: type[Exception], words: str, result: Any
) -> None:
    with pytest.raises(error) as caught:
        ResultGate(max_bytes=600, store=_BadPut(answer)).gate(result)
    assert type(caught.value) is error  # not a raw UnicodeEncodeError / AttributeError
    assert words in str(caught.value)


@pytest.mark.parametrize(
    ("limit", "error", "words"),
    [
        ("big", TypeError, "_LongRefStore.max_file_bytes must be an int, not str"),
        (0, ValueError, "_LongRefStore.max_file_bytes must be at least 1"),
    ],
)
def test_regression_store_max_file_bytes_checked_naming_the_store(
    limit: Any, error: type[Exception], words: str
) -> None:
    store = _LongRefStore()
    store.max_file_bytes = limit
    with pytest.raises(error, match=words):
        ResultGate(max_bytes=600, store=store).gate(_ROWS)


def test_regression_store_read_answer_checked_naming_the_store() -> None:
    class TextRead(_LongRefStore):
        def read(self, ref: str, offset: int = 0, limit: int = 65536) -> Any:
            return super().read(ref, offset, limit).decode()

    with pytest.raises(TypeError, match=r"TextRead\.read must return bytes, not str"):
        ResultGate(max_bytes=600, store=TextRead()).gate(orjson.dumps(_ROWS))


def test_regression_custom_store_hint_names_no_builtin_class(tmp_path: Path) -> None:
    out = ResultGate(max_bytes=600, store=_LongRefStore(20)).gate(_ROWS)
    hint = orjson.loads(out.data)["spilled"]["read_more"]
    assert "SpillStore" not in hint
    assert "read(ref, offset, limit)" in hint
    built_in = ResultGate(max_bytes=600, store=SpillStore(tmp_path)).gate(_ROWS)
    assert "SpillStore.read" in orjson.loads(built_in.data)["spilled"]["read_more"]
    # The same smallest preview as the built-in store's: 425 bytes still holds one.
    assert ResultGate(max_bytes=425, store=_LongRefStore(20)).preview_bytes == 425


def test_regression_turn_budget_copies_are_independent(tmp_path: Path) -> None:
    template = TurnBudget(max_bytes=4000, store=SpillStore(tmp_path))
    conv_a = copy.copy(template)
    conv_b = copy.deepcopy(template)
    conv_a.admit({"a": "x" * 3000}, tool="search")
    admitted = conv_b.admit({"b": "y" * 1500}, tool="fetch")
    assert admitted.reason == "fits"
    assert len(conv_a.report().results) == 1
    assert len(conv_b.report().results) == 1
    assert template.report().results == ()
    # The same configuration and store.
    for twin in (conv_a, conv_b):
        assert (twin.max_bytes, twin.max_calls) == (template.max_bytes, template.max_calls)
        assert twin.gate is template.gate
    conv_a.reset()
    assert len(conv_b.report().results) == 1


def test_regression_turn_budget_pickle_refused_clearly(tmp_path: Path) -> None:
    turn = TurnBudget(max_bytes=4000, store=SpillStore(tmp_path))
    with pytest.raises(TypeError, match="a TurnBudget cannot be pickled") as caught:
        pickle.dumps(turn)
    assert "_thread.lock" not in str(caught.value)


def test_regression_run_turns_kept_on_the_budget_not_shared_by_copies() -> None:
    from agents import RunContextWrapper

    from jsonbudget.integrations import openai_agents
    from jsonbudget.integrations.openai_agents import TurnBudgetHooks

    assert not hasattr(openai_agents, "_run_turns")
    turn = TurnBudget(max_bytes=4000)
    hooks = TurnBudgetHooks(turn)
    context = RunContextWrapper(context=None)
    asyncio.run(hooks.on_llm_start(context, None, None, []))
    run = turn.run_turn(context.usage)
    assert run is not turn
    assert turn.run_turn(context.usage, start=True) is run
    # A copy (and a run's own turn) knows no run of its parent's.
    assert copy.copy(turn).run_turn(context.usage) is not run
    assert run.run_turn(context.usage) is run
    run.admit({"a": 1})
    asyncio.run(hooks.on_agent_end(context, None, None))
    assert len(hooks.reports) == 1
    assert turn.report().results == ()
    # The run's turn goes with the run.
    del context
    gc.collect()
    other = RunContextWrapper(context=None)
    assert turn.run_turn(other.usage) is turn


def test_regression_running_calls_counted_on_the_turn() -> None:
    from langchain_core.tools import tool

    from jsonbudget.integrations import langchain
    from jsonbudget.integrations.langchain import budget_tool

    assert not hasattr(langchain, "_calls_running")
    turn = TurnBudget(max_bytes=4000)
    seen: list[int] = []

    @tool
    def lookup(query: str) -> str:
        """Look something up."""
        seen.append(turn.calls_running)
        return query

    budgeted = budget_tool(lookup, turn)
    assert budgeted.invoke({"query": "q"}) == "q"
    assert asyncio.run(budgeted.ainvoke({"query": "q"})) == "q"
    assert seen == [1, 1]
    assert turn.calls_running == 0
    with turn.running_call():
        assert turn.calls_running == 1
        assert copy.copy(turn).calls_running == 0
        assert turn.for_run().calls_running == 0
    assert turn.calls_running == 0


@pytest.mark.parametrize("bad", [None, "turn", object()])
def test_turn_checked_alike_by_every_adapter(bad: Any) -> None:
    from langchain_core.tools import tool

    from jsonbudget.integrations.langchain import TurnBudgetCallback, budget_tool
    from jsonbudget.integrations.openai_agents import TurnBudgetHooks, budget_tools
    from jsonbudget.integrations.pydantic_ai import TurnBudgetCapability

    @tool
    def lookup(query: str) -> str:
        """Look something up."""
        return query

    message = f"turn must be a TurnBudget, not {type(bad).__name__}"
    for make in (
        lambda: TurnBudgetCallback(bad),
        lambda: budget_tool(lookup, bad),
        lambda: TurnBudgetHooks(bad),
        lambda: budget_tools([], bad),
        lambda: TurnBudgetCapability(bad),
    ):
        with pytest.raises(TypeError, match=message):
            make()


class _CountAs:
    """A counter whose count is *kind* of the text's length in bytes / 4."""

    def __init__(self, kind: Any) -> None:
        self.kind = kind

    def count(self, text: str) -> Any:
        return self.kind(len(text.encode()) // 4)


class _MyInt(int):
    pass


@pytest.mark.parametrize("kind", [_MyInt, np.int64, np.uint32])
def test_regression_token_counter_any_integer_accepted(kind: Any) -> None:
    fitted = fit_tokens(_ROWS, max_tokens=200, counter=_CountAs(kind))
    assert fitted.tokens <= 200
    assert type(fitted.tokens) is int


@pytest.mark.parametrize(
    ("kind", "name"), [(bool, "bool"), (float, "float"), (np.float64, "float64")]
)
def test_token_counter_non_integers_still_refused(kind: Any, name: str) -> None:
    with pytest.raises(LimitError, match=f"token count=.* must be an integer, not {name}"):
        fit_tokens(_ROWS, max_tokens=200, counter=_CountAs(kind))


def _ends_within(seconds: float, fn: Any) -> bool:
    """Whether *fn* returns within *seconds* in a thread (a deadlock leaves it blocked)."""
    done = threading.Event()

    def run() -> None:
        fn()
        done.set()

    threading.Thread(target=run, daemon=True).start()
    return done.wait(seconds)


def test_regression_a_call_ending_while_the_turn_is_locked_does_not_deadlock(
    tmp_path: Path,
) -> None:
    # An adapter's call dropped unfinished ends (its `finally`) wherever a collection
    # finds it: inside `admit`, with the turn's lock held on the same thread. The count
    # was kept under that lock, so that thread waited on itself for good.
    turn = TurnBudget(max_bytes=4000, store=SpillStore(tmp_path))
    outer, inner = turn.running_call(), turn.running_call()
    outer.__enter__()
    inner.__enter__()
    assert turn.calls_running == 2

    def ends_under_the_turns_lock() -> None:
        with turn._lock:
            outer.__exit__(None, None, None)
        with turn._counting:  # and under the count's own, as a collection mid-count
            inner.__exit__(None, None, None)

    assert _ends_within(10, ends_under_the_turns_lock)
    assert turn.calls_running == 0


class _AuditedTurn(TurnBudget):
    def __init__(self, **options: Any) -> None:
        super().__init__(**options)
        self.audit: list[str] = ["made"]


def test_regression_a_subclass_keeps_its_attributes_in_copies_and_runs(tmp_path: Path) -> None:
    # `__copy__` set the base class's fields only: a subclass's own attributes were
    # gone from every copy, and so from each adapter run's turn (AttributeError).
    turn = _AuditedTurn(max_bytes=4000, store=SpillStore(tmp_path))
    turn.admit({"a": 1}, tool="t")
    for made in (copy.copy(turn), copy.deepcopy(turn), turn.for_run()):
        assert type(made) is _AuditedTurn
        assert made.audit == ["made"]
        assert made.report().results == ()  # a turn of its own
        assert made.gate is turn.gate
    assert len(turn.report().results) == 1

"""Fuzz `encode` and check guarantees 1-3 on every input.

Run with atheris (coverage-guided) where it is installed, else on hypothesis with the
same checks and the shared strategies::

    python fuzz/fuzz_encode.py --seconds 10        # a smoke run (the test command does this)
    python fuzz/fuzz_encode.py -atheris_runs=100000 # longer, atheris flags pass through
"""

from __future__ import annotations

import argparse
import json
import sys
import time
from pathlib import Path
from typing import Any

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))  # the shared strategies

try:
    import atheris
except ImportError:  # the harness then runs on hypothesis
    atheris = None

if atheris is not None:
    with atheris.instrument_imports(include=["jsonbudget"]):
        from jsonbudget import encode
else:
    from jsonbudget import encode
import contextlib

from tests.jsonptr import resolve

from jsonbudget._limits import MAX_DEPTH, MIN_BYTES

STRATEGIES = ("balanced", "prefix")
STYLES = ("text", "structured")


def check(
    obj: Any,
    max_bytes: int,
    strategy: str,
    markers: str,
    max_depth: int,
    *,
    max_items: int | None = None,
    max_keys: int | None = None,
) -> None:
    """Guarantees 1-3 for one input: valid, bounded, every cut marked where reported."""
    out = encode(
        obj,
        max_bytes=max_bytes,
        strategy=strategy,  # type: ignore[arg-type]
        markers=markers,  # type: ignore[arg-type]
        max_depth=max_depth,
        max_items=max_items,
        max_keys=max_keys,
    )
    assert len(out.data) <= max_bytes, (len(out.data), max_bytes)
    doc = json.loads(out.data.decode("utf-8"), parse_constant=_refuse)
    assert out.complete == (not out.truncations)
    for t in out.truncations:
        resolve(doc, t.path)  # the pointer resolves in the output


def _refuse(name: str) -> None:
    raise AssertionError(f"non-standard constant {name}")


def _value(fdp: Any, depth: int = 0) -> Any:
    """A JSON-like value (and some awkward ones) from atheris' data provider."""
    kind = fdp.ConsumeIntInRange(0, 11 if depth < 6 else 7)
    if kind == 0:
        return None
    if kind == 1:
        return fdp.ConsumeBool()
    if kind == 2:
        return fdp.ConsumeInt(9)  # up to 72 bits: beyond orjson's 64
    if kind == 3:
        return fdp.ConsumeFloat()  # includes NaN and infinities
    if kind in (4, 5):
        return fdp.ConsumeUnicode(fdp.ConsumeIntInRange(0, 64))  # lone surrogates too
    if kind == 6:
        return fdp.ConsumeUnicode(1) * fdp.ConsumeIntInRange(0, 5000)
    if kind == 7:
        return fdp.ConsumeBytes(4)
    if kind in (8, 9):
        return [_value(fdp, depth + 1) for _ in range(fdp.ConsumeIntInRange(0, 6))]
    if kind == 10:
        return {
            fdp.ConsumeUnicode(4): _value(fdp, depth + 1)
            for _ in range(fdp.ConsumeIntInRange(0, 6))
        }
    return iter([_value(fdp, depth + 1) for _ in range(fdp.ConsumeIntInRange(0, 4))])


def atheris_target(data: bytes) -> None:
    assert atheris is not None
    fdp = atheris.FuzzedDataProvider(data)
    max_bytes = fdp.ConsumeIntInRange(MIN_BYTES, 4096)
    strategy = STRATEGIES[fdp.ConsumeIntInRange(0, 1)]
    markers = STYLES[fdp.ConsumeIntInRange(0, 1)]
    max_depth = fdp.ConsumeIntInRange(1, MAX_DEPTH)
    check(_value(fdp), max_bytes, strategy, markers, max_depth)


def run_hypothesis(seconds: float) -> int:
    from hypothesis import HealthCheck, given, settings
    from hypothesis import strategies as st
    from tests.strategies import clean_values, hostile_values, json_values

    deadline = time.monotonic() + seconds
    runs = 0

    @settings(max_examples=10**9, deadline=None, suppress_health_check=list(HealthCheck))
    @given(
        obj=st.one_of(json_values(), hostile_values(), clean_values()),
        max_bytes=st.integers(MIN_BYTES, 4096),
        strategy=st.sampled_from(STRATEGIES),
        markers=st.sampled_from(STYLES),
        max_depth=st.integers(1, 8),
        caps=st.tuples(st.none() | st.integers(1, 6), st.none() | st.integers(1, 6)),
    )
    def prop(  # noqa: PLR0917 - one drawn value per option
        obj: Any,
        max_bytes: int,
        strategy: str,
        markers: str,
        max_depth: int,
        caps: tuple[int | None, int | None],
    ) -> None:
        nonlocal runs
        if time.monotonic() > deadline:
            raise _Done
        runs += 1
        check(obj, max_bytes, strategy, markers, max_depth, max_items=caps[0], max_keys=caps[1])

    with contextlib.suppress(_Done):
        prop()
    return runs


class _Done(Exception):
    """The time box ran out (hypothesis has no time limit of its own)."""


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--seconds", type=float, default=None, help="stop after this long")
    parser.add_argument("--hypothesis", action="store_true", help="skip atheris")
    args, rest = parser.parse_known_args()
    if atheris is None or args.hypothesis:
        runs = run_hypothesis(args.seconds or 60.0)
        print(f"fuzz (hypothesis): {runs} inputs, guarantees 1-3 held")
        return 0
    argv = [sys.argv[0], *rest]
    if args.seconds is not None:
        argv.append(f"-max_total_time={int(args.seconds)}")
    atheris.Setup(argv, atheris_target)
    atheris.Fuzz()
    return 0


if __name__ == "__main__":
    sys.exit(main())

"""Encoder measures against issue 2's targets, each in the same run as its reference.

``run(quick)`` returns rows ``(measure, value, unit, target)``:

* an object that fits: ``Encoder(max_bytes=big).dumps(obj)`` time / ``orjson.dumps(obj)``
  time, for five shapes (target <= 1.10), with ``Encoder.encode`` beside it;
* 64 KiB out of N database-like rows (200,000 = 52 MB encoded; 50,000 with ``quick``),
  median ms (target <= 0.2 ms) and peak extra memory (target <= 1 MiB), next to
  ``orjson.dumps(rows)[:65536]``, which is also shown to be invalid JSON;
* 4 KiB out of a cold 1 M-character multibyte string, median us (target <= 10 us);
* the fitting (the renderer): dataclass trees, shared subtrees, work per output byte,
  balanced against prefix on botocore service models, big balanced cuts against
  ``orjson.dumps`` of their output;
* the one-call path (``bounded_dumps``, ``encode``) and big documents that fit, as ratios
  to ``orjson.dumps``; a 64 KiB cut of a long escaped string against ``orjson.dumps`` of
  the slice, with its peak memory against the output;
* peers where installed (headson, shrinkfit): time, output size, validity.

Run: ``python benches/ratios_encoder.py [--quick]`` (or through ``benches/ratios.py``).
"""

from __future__ import annotations

import dataclasses
import gc
import gzip
import math
import sys
from collections.abc import Callable
from functools import partial
from pathlib import Path
from typing import Any

if __name__ == "__main__":  # run as a script: make `benches` importable
    sys.path.insert(0, str(Path(__file__).resolve().parent.parent))

import orjson
from benches import _data
from benches._timing import Row, calibrate, interleaved, peak_bytes
from tests import workcount

from jsonbudget import Encoder, bounded_dumps, encode

KIB = 1024
BIG = 1 << 30


def _valid_json(data: bytes | str) -> bool:
    try:
        orjson.loads(data)
    except orjson.JSONDecodeError:
        return False
    return True


def fits(quick: bool) -> list[Row]:
    """Objects that fit: the encoder must cost about what orjson costs.

    The target row is ``Encoder.dumps``, which returns bytes as ``orjson.dumps`` does;
    ``Encoder.encode`` also builds the `Encoded` report and is shown as info.
    """
    shapes: dict[str, Any] = {
        "tool result, 200 rows": _data.tool_result(200),
        "flat rows, list of 200": _data.rows(200, seed=6),
        "nested document": _data.nested_document(50),
        "one 100 KB log string": _data.log_text(100_000),
        "small result, 5 rows": _data.tool_result(5),
    }
    enc = Encoder(max_bytes=BIG)
    out: list[Row] = []
    for name, obj in shapes.items():
        ref = orjson.dumps(obj)
        got = enc.encode(obj)
        if got.data != ref or not got.complete or enc.dumps(obj) != ref:
            raise AssertionError(f"{name}: a fitting object must encode as orjson does")

        def dumps(obj: Any = obj) -> bytes:
            return enc.dumps(obj)

        def encode(obj: Any = obj) -> bytes:
            return enc.encode(obj).data

        def theirs(obj: Any = obj) -> bytes:
            return orjson.dumps(obj)

        n = calibrate(theirs, target_s=0.01 if quick else 0.02)
        t = interleaved(
            {"orjson": theirs, "dumps": dumps, "encode": encode},
            rounds=7 if quick else 11,
            inner=n,
            warmup=3,
        )
        kb = len(ref) / 1000
        out += [
            (
                f"fits, {name} ({kb:.1f} KB): Encoder.dumps / orjson.dumps",
                t.ratio("dumps", "orjson"),
                "x",
                "<= 1.10",
            ),
            ("  Encoder.encode / orjson.dumps", t.ratio("encode", "orjson"), "x", "(info)"),
            ("  orjson.dumps of it (ref)", t.median("orjson") * 1e6, "us", "(ref)"),
        ]
    return out


@dataclasses.dataclass
class _Node:
    kids: list[Any]


def _tree(depth: int) -> _Node:
    """A binary tree of distinct dataclass nodes (2**(depth + 1) - 1 of them)."""
    paused = gc.isenabled()
    gc.disable()  # millions of new objects: the collector's passes would dominate
    try:
        return _grow(depth)
    finally:
        if paused:
            gc.enable()


def _grow(depth: int) -> _Node:
    return _Node([_grow(depth - 1), _grow(depth - 1)] if depth else [])


def _shared(depth: int, leaf: Any) -> Any:
    x = leaf
    for _ in range(depth):
        x = [x, x]
    return x


def _best_ms(fn: Callable[[], Any], quick: bool) -> float:
    t = interleaved({"f": fn}, rounds=3 if quick else 7, inner=calibrate(fn, target_s=0.02))
    return t.median("f") * 1e3


def _botocore_models() -> dict[str, Any]:
    try:
        import botocore  # type: ignore[import-untyped,unused-ignore]
    except ImportError:
        return {}
    data = Path(botocore.__file__).parent / "data"
    out = {}
    for name in ("s3", "dynamodb", "lambda", "ec2"):
        path = sorted((data / name).glob("*/service-2.json*"))[-1]
        raw = path.read_bytes()
        out[name] = orjson.loads(gzip.decompress(raw) if path.suffix == ".gz" else raw)
    return out


def _truncations(enc: Encoder, obj: Any) -> tuple[Any, ...]:
    return enc.encode(obj).truncations


def fitting(quick: bool) -> list[Row]:
    """The renderer against the fitting issue's targets."""
    out: list[Row] = []
    tree8 = _tree(8)
    _check_bounded(bounded_dumps(tree8, max_bytes=4 * KIB), 4 * KIB, "a dataclass tree")
    out.append(
        (
            "dataclass tree depth 8 into 4 KiB",
            _best_ms(lambda: bounded_dumps(tree8, max_bytes=4 * KIB), quick),
            "ms",
            "<= 5",
        )
    )
    tree10 = _tree(10)
    enc64 = Encoder(max_bytes=64 * KIB)
    if not enc64.encode(tree10).complete:
        raise AssertionError("a depth-10 dataclass tree fits 64 KiB whole")
    t = interleaved(
        {"ours": lambda: enc64.dumps(tree10), "orjson": lambda: orjson.dumps(tree10)},
        rounds=5 if quick else 9,
        inner={"ours": 3, "orjson": calibrate(lambda: orjson.dumps(tree10), target_s=0.01)},
    )
    out.append(
        (
            "dataclass tree depth 10 that fits 64 KiB: Encoder.dumps / orjson.dumps",
            t.ratio("ours", "orjson"),
            "x",
            "<= 3",
        )
    )
    nan20 = _shared(20, [math.nan])
    out.append(
        (
            "NaN-leaf tree of shared subtrees, 20 deep, into 4 KiB",
            _best_ms(lambda: bounded_dumps(nan20, max_bytes=4 * KIB), quick),
            "ms",
            "<= 20",
        )
    )
    # Work counted, not timed: renderer calls plus the values the size walk visits.
    cut: list[float] = []
    whole: list[float] = []
    deepest = 18 if quick else 20  # depth 20: 2 million nodes, built in about a second
    for depth in range(4, deepest + 1, 2):
        data, count = workcount.work(_tree(depth), 4 * KIB)
        (cut if len(data) > 2 * KIB else whole).append(count / len(data))
    out.append(
        (
            f"work per output byte, dataclass trees cut to 4 KiB, depth 8 -> {deepest}: max / min",
            max(cut) / min(cut),
            "x",
            "<= 2",
        )
    )
    out.append(
        (
            "  work per output byte, cut / the trees that fit whole (depth 4, 6)",
            max(cut) / min(whole),
            "x",
            "(info)",
        )
    )
    calls = []
    for depth in (4, 20):
        calls.append(workcount.work(_shared(depth, _Node([])), 4 * KIB)[1])
    out.append(
        (
            f"  shared subtrees 4 -> 20 deep (2**20 paths): {calls[0]} -> {calls[1]} counted",
            float(calls[1]),
            "work",
            "(info)",
        )
    )
    for name, doc in _botocore_models().items():
        for budget in (4 * KIB, 64 * KIB):
            bal = Encoder(max_bytes=budget)
            pre = Encoder(max_bytes=budget, strategy="prefix")
            _check_bounded(bal.encode(doc).data, budget, f"botocore {name}")
            fns: dict[str, Callable[[], Any]] = {
                "balanced": partial(bal.encode, doc),
                "prefix": partial(pre.encode, doc),
                # Truncations are made when first read: the cut with them read too.
                "reports": partial(_truncations, bal, doc),
            }
            t = interleaved(
                fns,
                rounds=3 if quick else 7,
                inner={name: calibrate(fn, target_s=0.01) for name, fn in fns.items()},
            )
            out.append(
                (
                    f"botocore {name} to {budget // KIB} KiB: balanced / prefix",
                    t.ratio("balanced", "prefix"),
                    "x",
                    "<= 3",
                )
            )
            out.append(("  balanced (ref)", t.median("balanced") * 1e3, "ms", "(ref)"))
            out.append(
                ("  balanced, truncations read (ref)", t.median("reports") * 1e3, "ms", "(ref)")
            )
    sizes = (1 << 20,) if quick else (1 << 20, 16 << 20)
    big = _data.nested_document(8000 if quick else 60_000)
    for budget in sizes:
        enc = Encoder(max_bytes=budget)
        data = enc.encode(big).data
        _check_bounded(data, budget, "a big balanced cut")
        doc = orjson.loads(data)
        t = interleaved(
            {
                "ours": partial(enc.encode, big),
                "orjson": partial(orjson.dumps, doc),
            },
            rounds=3 if quick else 5,
        )
        out.append(
            (
                f"balanced cut of nested data to {budget >> 20} MiB / orjson.dumps of the output",
                t.ratio("ours", "orjson"),
                "x",
                "<= 5",
            )
        )
    return out


def one_call(quick: bool) -> list[Row]:
    """``bounded_dumps`` and ``encode`` with only a budget, against ``orjson.dumps``."""
    cases: dict[str, Any] = {
        "rows, 300 B": _data.rows(1),
        "rows, 1 KiB": _data.rows(4),
        "a 300 B string": _data.log_text(300),
    }
    out: list[Row] = []
    for name, obj in cases.items():
        size = len(orjson.dumps(obj))

        def ours(obj: Any = obj) -> bytes:
            return bounded_dumps(obj, max_bytes=64 * KIB)

        def full(obj: Any = obj) -> bytes:
            return encode(obj, max_bytes=64 * KIB).data

        def theirs(obj: Any = obj) -> bytes:
            return orjson.dumps(obj)

        n = calibrate(theirs, target_s=0.01)
        t = interleaved(
            {"orjson": theirs, "bounded_dumps": ours, "encode": full},
            rounds=7 if quick else 11,
            inner=n,
            warmup=3,
        )
        out.append(
            (
                f"bounded_dumps / orjson.dumps, {name} ({size} B)",
                t.ratio("bounded_dumps", "orjson"),
                "x",
                "<= 1.3" if "1 KiB" in name else "<= 1.5",
            )
        )
        out.append(
            (
                f"  encode / orjson.dumps, {name}",
                t.ratio("encode", "orjson"),
                "x",
                "<= 1.5" if "1 KiB" in name else "(info)",
            )
        )
    for label, n_rows in (("64 KiB", 240), ("16 MiB", 6_000 if quick else 60_000)):
        rows = _data.rows(n_rows)
        enc = Encoder(max_bytes=BIG)
        pair = {
            "ours": partial(enc.dumps, rows),
            "orjson": partial(orjson.dumps, rows),
        }
        t = interleaved(
            pair, rounds=5 if quick else 9, inner=calibrate(pair["orjson"], target_s=0.02)
        )
        mb = len(orjson.dumps(rows)) / 1e6
        out.append(
            (
                f"Encoder.dumps / orjson.dumps, {label} of rows ({mb:.2f} MB)",
                t.ratio("ours", "orjson"),
                "x",
                "<= 1.10" if label == "64 KiB" else "<= 1.15",
            )
        )
    text = _data.log_text(2_000_000)
    enc = Encoder(max_bytes=64 * KIB)
    cut = enc.encode(text).data
    _check_bounded(cut, 64 * KIB, "a long escaped string")
    kept = len(orjson.loads(cut)) - len("…[truncated: 1934464 more chars]")
    piece = text[:kept]
    t = interleaved(
        {"ours": lambda: enc.encode(text), "orjson": lambda: orjson.dumps(piece)},
        rounds=5 if quick else 9,
        inner=calibrate(lambda: enc.encode(text), target_s=0.01),
    )
    # orjson encodes a str that is not ASCII through CPython's cached UTF-8 copy, made by
    # its first call: timed again, the same slice is cheaper. The cut cannot use that copy
    # (making it encodes the whole 2 M-character string), so the reference is also timed
    # on fresh copies of the slice, each encoded once.
    rounds, inner = (5, 3) if quick else (9, 5)
    copies = [(piece + "x")[:-1] for _ in range(2 * (1 + rounds * inner))]
    holder = [piece]

    def take(n: int) -> None:
        holder[0] = copies[n]

    fresh = interleaved(
        {"ours": lambda: enc.encode(text), "orjson": lambda: orjson.dumps(holder[0])},
        rounds=rounds,
        inner=inner,
        setup=take,
    )
    copies.clear()
    peak, _ = peak_bytes(lambda: enc.encode(text))
    out += [
        (
            "64 KiB cut of a long escaped string / orjson.dumps of the slice",
            t.ratio("ours", "orjson"),
            "x",
            "<= 2",
        ),
        (
            "  the same / orjson.dumps of a fresh copy of the slice (no cached UTF-8)",
            fresh.ratio("ours", "orjson"),
            "x",
            "(info)",
        ),
        ("  its peak memory / the output", peak / len(cut), "x", "<= 2"),
    ]
    return out


def _check_bounded(data: bytes, budget: int, what: str) -> None:
    if len(data) > budget or not _valid_json(data):
        raise AssertionError(f"{what}: {len(data)} bytes for {budget}, or invalid JSON")


def rows_64k(quick: bool) -> list[Row]:
    """64 KiB out of many rows: cost proportional to the budget, not the input."""
    n_rows = 50_000 if quick else 200_000
    rows = _data.rows(n_rows)
    enc = Encoder(max_bytes=64 * KIB)
    first = enc.encode(rows)
    _check_bounded(first.data, 64 * KIB, "64 KiB of rows")
    prefix = orjson.dumps(rows)[: 64 * KIB]
    mb = len(orjson.dumps(rows)) / 1e6

    def ours() -> bytes:
        return enc.encode(rows).data

    def theirs() -> bytes:
        return orjson.dumps(rows)[: 64 * KIB]

    t = interleaved(
        {"orjson": theirs, "encoder": ours},
        rounds=5 if quick else 9,
        inner={"orjson": 1, "encoder": calibrate(ours, target_s=0.02)},
    )
    peak, _ = peak_bytes(ours)
    label = f"64 KiB of {n_rows:,} rows ({mb:.0f} MB)"
    validity = "valid" if _valid_json(prefix) else "INVALID JSON"
    return [
        (f"{label}: Encoder.encode", t.median("encoder") * 1e3, "ms", "<= 0.2"),
        (
            f"  orjson.dumps(rows)[:65536] (ref, {validity})",
            t.median("orjson") * 1e3,
            "ms",
            "(ref)",
        ),
        (f"{label}: peak extra memory (output included)", peak / KIB, "KiB", "<= 1024"),
        (
            f"  rows kept whole in the 64 KiB ({first.data.count(b'{')} of {n_rows:,})",
            float(first.data.count(b"{")),
            "rows",
            "(info)",
        ),
    ]


def multibyte_4k(quick: bool) -> list[Row]:
    """4 KiB out of a 1 M-character multibyte string, cold (no cached UTF-8 copy).

    Each call gets its own fresh string. The target figure takes them from a pool made
    before the timing, so the string's memory is cold but the interpreter is not; the
    figure after it makes each string right before its call, which also flushes the CPU
    caches (4 MB written), as the first call after reading a big file would see.
    """
    base = _data.multibyte_text(1_000_000)
    enc = Encoder(max_bytes=4 * KIB)
    rounds, inner = (5, 7) if quick else (9, 11)
    pool = [_data.cold_copy(base, r) for r in range((rounds + 1) * inner + 1)]
    holder = [base]

    def from_pool(r: int) -> None:
        holder[0] = pool[r]

    def fresh(r: int) -> None:
        holder[0] = _data.cold_copy(base, r)

    def ours() -> bytes:
        return enc.encode(holder[0]).data

    def theirs() -> bytes:
        return orjson.dumps(holder[0])[: 4 * KIB]

    fresh(0)
    _check_bounded(ours(), 4 * KIB, "4 KiB of a multibyte string")
    fresh(1)
    cut = theirs()
    validity = "valid" if _valid_json(cut) else "INVALID JSON"
    # The reference writes megabytes per call, which would flush the caches before each
    # of our turns: it is timed in a run of its own.
    pooled = interleaved({"encoder": ours}, rounds=rounds, inner=inner, setup=from_pool)
    ref = interleaved({"orjson": theirs}, rounds=3, inner=3, setup=fresh)
    pool.clear()  # 4 MB a string: free them before the next measure
    flushed = interleaved({"encoder": ours}, rounds=rounds, inner=inner, setup=fresh)
    fresh(2)
    warm = interleaved({"encoder": ours}, rounds=7, inner=calibrate(ours, target_s=0.01))
    return [
        (
            "4 KiB of a cold 1 M-char multibyte string: encode",
            pooled.median("encoder") * 1e6,
            "us",
            "<= 10",
        ),
        (
            f"  orjson.dumps(s)[:4096], cold (ref, {validity})",
            ref.median("orjson") * 1e6,
            "us",
            "(ref)",
        ),
        (
            "  the same, each string made right before its call (CPU caches flushed)",
            flushed.median("encoder") * 1e6,
            "us",
            "(info)",
        ),
        ("  the same string again (warm)", warm.median("encoder") * 1e6, "us", "(info)"),
    ]


def _peer(
    name: str,
    fn: Callable[[], bytes],
    budget: int,
    rounds: int,
    note: str,
) -> list[Row]:
    data = fn()
    t = interleaved({name: fn}, rounds=rounds, warmup=0)
    fits_budget = "fits" if len(data) <= budget else f"OVER by {len(data) - budget:,} B"
    validity = "valid JSON" if _valid_json(data) else "INVALID JSON"
    return [
        (
            f"  peer {name}: {validity}, {len(data):,} B ({fits_budget}); {note}",
            t.median(name) * 1e3,
            "ms",
            "(peer)",
        ),
    ]


def peers(quick: bool) -> list[Row]:
    """headson and shrinkfit, when installed, on the same rows and a multibyte document."""
    n_rows = 20_000 if quick else 200_000
    rows = _data.rows(n_rows)
    text = orjson.dumps(rows).decode()
    budget = 64 * KIB
    rounds = 1 if quick else 3
    out: list[Row] = []
    enc = Encoder(max_bytes=budget)
    ours = interleaved({"e": lambda: enc.encode(rows)}, rounds=rounds, inner=20)
    out.append(
        (
            f"64 KiB of {n_rows:,} rows: jsonbudget (same rows as the peers)",
            ours.median("e") * 1e3,
            "ms",
            "(peer)",
        )
    )
    multi = {"notes": [_data.multibyte_text(200) for _ in range(1000)]}
    multi_text = orjson.dumps(multi).decode()
    data = enc.encode(multi).data
    out.append(
        (
            f"  jsonbudget on 1000 multibyte strings: {len(data):,} B, "
            f"{'valid' if _valid_json(data) else 'INVALID'} JSON",
            float(len(data)),
            "B",
            "(peer)",
        )
    )
    try:
        import headson  # type: ignore[import-untyped,import-not-found,unused-ignore]
    except ImportError:
        out.append(("  peer headson: not installed", float("nan"), "", "(peer)"))
    else:
        out += _peer(
            "headson",
            lambda: headson.summarize(
                text, format="json", style="strict", byte_budget=budget
            ).encode(),
            budget,
            rounds,
            "input given as parsed-ready text; cuts unmarked",
        )
    try:
        import shrinkfit  # type: ignore[import-not-found,unused-ignore]
    except ImportError:
        out.append(("  peer shrinkfit: not installed", float("nan"), "", "(peer)"))
    else:
        out += _peer(
            "shrinkfit",
            lambda: shrinkfit.shrink(text, budget, indent=0).encode(),
            budget,
            rounds,
            "budget in characters",
        )
        out += _peer(
            "shrinkfit multibyte",
            lambda: shrinkfit.shrink(multi_text, budget, indent=0).encode(),
            budget,
            rounds,
            "1000 multibyte strings, budget in characters",
        )
    return out


def run(quick: bool = False) -> list[Row]:
    return (
        fits(quick)
        + fitting(quick)
        + one_call(quick)
        + rows_64k(quick)
        + multibyte_4k(quick)
        + peers(quick)
    )


if __name__ == "__main__":
    for name, value, unit, target in run(quick="--quick" in sys.argv):
        print(f"{name:72s} {value:12.3f} {unit:5s} target {target}")

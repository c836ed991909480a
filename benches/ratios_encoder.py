"""Encoder measures against issue 2's targets, each in the same run as its reference.

``run(quick)`` returns rows ``(measure, value, unit, target)``:

* an object that fits: ``Encoder(max_bytes=big).dumps(obj)`` time / ``orjson.dumps(obj)``
  time, for five shapes (target <= 1.10), with ``Encoder.encode`` beside it;
* 64 KiB out of N database-like rows (200,000 = 52 MB encoded; 50,000 with ``quick``),
  median ms (target <= 0.2 ms) and peak extra memory (target <= 1 MiB), next to
  ``orjson.dumps(rows)[:65536]``, which is also shown to be invalid JSON;
* 4 KiB out of a cold 1 M-character multibyte string, median us (target <= 10 us);
* peers where installed (headson, shrinkfit): time, output size, validity.

Run: ``python benches/ratios_encoder.py [--quick]`` (or through ``benches/ratios.py``).
"""

from __future__ import annotations

import sys
from collections.abc import Callable
from pathlib import Path
from typing import Any

if __name__ == "__main__":  # run as a script: make `benches` importable
    sys.path.insert(0, str(Path(__file__).resolve().parent.parent))

import orjson
from benches import _data
from benches._timing import Row, calibrate, interleaved, peak_bytes

from jsonbudget import Encoder

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
    return fits(quick) + rows_64k(quick) + multibyte_4k(quick) + peers(quick)


if __name__ == "__main__":
    for name, value, unit, target in run(quick="--quick" in sys.argv):
        print(f"{name:72s} {value:12.3f} {unit:5s} target {target}")

"""THE benchmark script: one table of every measure next to its reference and target.

Run from anywhere (it finds the repository itself)::

    python benches/ratios.py                 # default mode: a few minutes
    python benches/ratios.py --quick         # under about a minute: smaller data, fewer rounds
    python benches/ratios.py --full          # 200 MB array file, 1 GiB through ResultGate
    python benches/ratios.py --only encoder,page --json out.json --markdown

Each area module measures its figures and their references (orjson, ijson, psycopg) in
the same run, in interleaved rounds, and reports medians. This script adds the pass/miss
column: a target ``<= x`` or ``>= x`` is checked against the value; a few targets that
are not numbers are checked as stated in `DERIVED`; ``(ref)``, ``(info)`` and ``(peer)``
rows carry no target. Exits 1 if an area failed to run (its error is in the table).
"""

from __future__ import annotations

import argparse
import datetime as _dt
import json
import math
import os
import platform
import re
import subprocess
import sys
import tempfile
import time
import traceback
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from pathlib import Path
from typing import Any, Literal

ROOT = Path(__file__).resolve().parent.parent
if str(ROOT) not in sys.path:  # `benches` and `tests` import from the repository root
    sys.path.insert(0, str(ROOT))

from benches._timing import Row  # noqa: E402

Mode = Literal["quick", "default", "full"]
AREAS = ("encoder", "page", "cursors", "sources", "guards")
#: Bytes pushed through `ResultGate` by the guards area, per mode.
GATE_BYTES = {"quick": 32 * 2**20, "default": 256 * 2**20, "full": 2**30}
#: Rows of the PostgreSQL rows/s measure in quick mode (the module's default otherwise).
QUICK_PG_ROWS = 20_000


@contextmanager
def _env(name: str, value: str) -> Iterator[None]:
    old = os.environ.get(name)
    os.environ[name] = value
    try:
        yield
    finally:
        if old is None:
            del os.environ[name]
        else:
            os.environ[name] = old


def run_area(area: str, mode: Mode) -> list[Row]:
    """One area's rows, with its module's run() called the way it expects."""
    quick = mode == "quick"
    if area == "encoder":
        from benches import ratios_encoder

        return ratios_encoder.run(quick)
    if area == "page":
        from benches import ratios_page

        return ratios_page.run(quick)
    if area == "cursors":
        from benches import ratios_cursors

        return ratios_cursors.run()
    if area == "sources":
        from benches import ratios_sources

        if quick:
            return ratios_sources.file_rows(False) + ratios_sources.postgres_rows(QUICK_PG_ROWS)
        return ratios_sources.run(full=mode == "full")
    if area == "guards":
        from benches import ratios_guards

        with _env("JSONBUDGET_BENCH_GATE_BYTES", str(GATE_BYTES[mode])):
            return ratios_guards.run()
    raise ValueError(f"unknown area {area!r}; choose from {', '.join(AREAS)}")


_NUMERIC = re.compile(r"^\s*(<=|>=|≤|≥)\s*([0-9][0-9_,.]*)")


def _within_10pct_of_previous(value: float, previous: Row | None) -> bool | None:
    if previous is None or previous[2] == "":
        return None
    # Equal peaks for files 10x apart are a real result: each probe reads its own
    # process's VmHWM, and the import-only row shows that a first page adds to it.
    return value <= previous[1] * 1.10


#: Targets stated in words, checked as said here: (substring of the target, how it is
#: checked, check(value, previous row)).
DERIVED: list[tuple[str, str, Callable[[float, Row | None], bool | None]]] = [
    (
        "~ the small file's",
        "<= 1.10 x the small file's (row above)",
        _within_10pct_of_previous,
    ),
    # preview (4 KiB) + the gate's limit (64 KiB) + two of the bench's 1 MiB input
    # chunks stay under 3 MiB; anything growing with the result would pass 4 MiB.
    (
        "bounded by preview",
        "<= 4096 KiB at any result size",
        lambda value, _prev: value <= 4096,
    ),
]


def judge(row: Row, previous: Row | None) -> tuple[str, str]:
    """(target as shown, status): PASS, MISS, or '' for rows without a target."""
    _, value, _, target = row
    if math.isnan(value):
        return target, ""
    m = _NUMERIC.match(target)
    if m:
        bound = float(m.group(2).replace(",", "").replace("_", ""))
        ok = value <= bound if m.group(1) in ("<=", "≤") else value >= bound
        return target, "PASS" if ok else "MISS"
    for needle, shown, check in DERIVED:
        if needle in target:
            verdict = check(value, previous)
            if verdict is None:
                return shown, ""
            return shown, "PASS" if verdict else "MISS"
    return target, ""


def _fmt(value: float) -> str:
    if math.isnan(value):
        return "n/a"
    a = abs(value)
    if a >= 1000:
        return f"{value:,.0f}"
    if a >= 100:
        return f"{value:.1f}"
    if a >= 1:
        return f"{value:.2f}"
    return f"{value:.3f}"


def _table(records: list[dict[str, Any]], markdown: bool) -> str:
    head = ("area", "measure", "value", "unit", "target", "status")
    body = [
        (r["area"], r["measure"], _fmt(r["value"]), r["unit"], r["target"], r["status"])
        for r in records
    ]
    if markdown:
        lines = ["| " + " | ".join(head) + " |", "|" + "---|" * len(head)]
        for cells in body:
            escaped = [c.replace("|", "\\|") for c in cells]
            escaped[1] = escaped[1].strip()
            lines.append("| " + " | ".join(escaped) + " |")
        return "\n".join(lines)
    widths = [
        max(len(h), *(len(c[i]) for c in body)) if body else len(h) for i, h in enumerate(head)
    ]
    lines = []
    for cells in [head, *body]:
        parts = [
            cells[0].ljust(widths[0]),
            cells[1].ljust(widths[1]),
            cells[2].rjust(widths[2]),
            cells[3].ljust(widths[3]),
            cells[4].ljust(widths[4]),
            cells[5],
        ]
        lines.append("  ".join(parts).rstrip())
    return "\n".join(lines)


def _versions() -> str:
    from importlib.metadata import PackageNotFoundError, version

    out = [f"Python {platform.python_version()}", f"{os.cpu_count()} CPUs"]
    for dist in ("orjson", "ijson", "msgspec", "psycopg", "redis", "headson", "shrinkfit"):
        try:
            out.append(f"{dist} {version(dist)}")
        except PackageNotFoundError:
            out.append(f"{dist} not installed")
    return ", ".join(out)


def _run_isolated(area: str, mode: Mode) -> list[Row]:
    """Run one area in a fresh interpreter and return its rows.

    Each area gets a clean heap: one area's garbage, freed arenas and page faults do not
    land on the next one's clock, and a child process that an area starts to measure
    peak RSS does not inherit a large parent (Linux carries the parent's high-water RSS
    into ``ru_maxrss`` across fork and exec).
    """
    with tempfile.TemporaryDirectory() as tmp:
        out = Path(tmp) / "rows.json"
        cmd = [sys.executable, str(Path(__file__).resolve()), "--child", area, "--rows-to"]
        cmd += [str(out), f"--mode={mode}"]
        done = subprocess.run(cmd, cwd=ROOT, check=False)
        if done.returncode != 0:
            raise RuntimeError(f"area {area!r} exited with status {done.returncode}")
        return [(str(m), float(v), str(u), str(t)) for m, v, u, t in json.loads(out.read_text())]


DOCS = ROOT / "docs" / "benchmarks.md"
DOCS_MARKER = "<!-- Everything below is written by benches/ratios.py"


def write_docs(report: str, command: str, path: Path = DOCS) -> None:
    """Replace the figures in docs/benchmarks.md (everything below its marker line)."""
    text = path.read_text(encoding="utf-8")
    head, sep, _ = text.partition(DOCS_MARKER)
    if not sep:
        raise RuntimeError(f"{path} has lost its marker line {DOCS_MARKER!r}")
    marker_line = sep + text[len(head) + len(sep) :].partition("\n")[0]
    body = f"Command: `{command}`.\n\n```text\n{report}\n```\n"
    path.write_text(f"{head}{marker_line}\n\n{body}", encoding="utf-8")
    print(f"wrote {path}", file=sys.stderr)


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description="jsonbudget benchmark ratios")
    size = parser.add_mutually_exclusive_group()
    size.add_argument("--quick", action="store_true", help="under about a minute")
    size.add_argument("--full", action="store_true", help="200 MB file, 1 GiB gate input")
    parser.add_argument("--only", default=",".join(AREAS), help="comma-separated areas")
    parser.add_argument("--json", type=Path, help="also write the rows to this file")
    parser.add_argument("--markdown", action="store_true", help="print a Markdown table")
    parser.add_argument(
        "--no-docs",
        action="store_true",
        help="do not write docs/benchmarks.md (a non-quick run of every area writes it)",
    )
    parser.add_argument("--in-process", action="store_true", help="run every area in this process")
    # Internal: one area in a child process, its rows written as JSON.
    parser.add_argument("--child", help=argparse.SUPPRESS)
    parser.add_argument("--rows-to", type=Path, help=argparse.SUPPRESS)
    parser.add_argument("--mode", choices=("quick", "default", "full"), help=argparse.SUPPRESS)
    args = parser.parse_args(argv)
    mode: Mode = "quick" if args.quick else "full" if args.full else "default"
    # Areas open their data files relative to the repository.
    os.chdir(ROOT)
    if args.child:
        child_mode: Mode = args.mode or mode
        args.rows_to.write_text(json.dumps(run_area(args.child, child_mode)))
        return 0
    areas = [a.strip() for a in args.only.split(",") if a.strip()]
    unknown = sorted(set(areas) - set(AREAS))
    if unknown:
        parser.error(f"unknown area(s) {', '.join(unknown)}; choose from {', '.join(AREAS)}")

    started = _dt.datetime.now(_dt.UTC)
    records: list[dict[str, Any]] = []
    failed = []
    durations = {}
    for area in areas:
        t0 = time.perf_counter()
        try:
            rows = run_area(area, mode) if args.in_process else _run_isolated(area, mode)
        # One area's failure must not hide the others' figures: it is printed with its
        # traceback, shown in the table, and makes the exit status 1.
        except Exception as exc:  # noqa: BLE001
            failed.append(area)
            traceback.print_exc()
            rows = [(f"ERROR {type(exc).__name__}: {exc}"[:120], math.nan, "", "")]
        durations[area] = time.perf_counter() - t0
        previous: Row | None = None
        for row in rows:
            target, status = judge(row, previous)
            records.append(
                {
                    "area": area,
                    "measure": row[0],
                    "value": row[1],
                    "unit": row[2],
                    "target": target,
                    "status": "ERROR" if row[0].startswith("ERROR") else status,
                }
            )
            previous = row
        print(f"# {area}: {durations[area]:.1f} s", file=sys.stderr, flush=True)

    passed = sum(r["status"] == "PASS" for r in records)
    missed = [r for r in records if r["status"] == "MISS"]
    took = sum(durations.values())
    report = "\n".join(
        [
            f"jsonbudget benchmarks, mode {mode}, {started:%Y-%m-%d %H:%M} UTC, {took:.0f} s",
            _versions(),
            "",
            _table(records, args.markdown),
            "",
            f"{passed} targets met, {len(missed)} missed"
            + (f", failed: {failed}" if failed else ""),
        ]
    )
    print(report)
    if not args.no_docs and mode != "quick" and areas == list(AREAS) and not failed:
        write_docs(report, " ".join(["python3 benches/ratios.py", *(argv or sys.argv[1:])]))
    if args.json is not None:
        doc = {
            "mode": mode,
            "started": started.isoformat(),
            "seconds": durations,
            "versions": _versions(),
            "rows": [
                {**r, "value": None if math.isnan(r["value"]) else r["value"]} for r in records
            ],
        }
        args.json.write_text(json.dumps(doc, indent=2, ensure_ascii=False) + "\n")
    return 1 if failed else 0


if __name__ == "__main__":
    sys.exit(main())

"""Page-source measures against the issue's targets.

``run(full=False)`` returns rows ``(measure, value, unit, target)``. It writes its JSON
files into a temp dir (default 4 MB and 40 MB; ``--full``: 20 MB and 200 MB), and starts
its own PostgreSQL (the same code the tests use).

Run: ``PYTHONPATH=src:. python3 benches/ratios_sources.py [--full]``.
"""

from __future__ import annotations

import itertools
import sqlite3
import statistics
import subprocess
import sys
import tempfile
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

import ijson
import orjson
import psycopg
from tests.fixtures_postgres import running_postgres

from jsonbudget import (
    JsonArrayFileSource,
    JsonLinesSource,
    Limits,
    MemoryCursorStore,
    PageBuilder,
    PostgresSource,
    Scope,
    SQLiteSource,
    paginate,
)

ROUNDS = 5
PAGE = 250
Row = tuple[str, float, str, str]


def write_array(path: Path, megabytes: int) -> int:
    """A JSON array of database-like rows (~264 B each); returns the row count."""
    target = megabytes * 1_000_000
    written, n = 1, 0
    with open(path, "wb", buffering=1 << 20) as f:
        f.write(b"[")
        while written < target:
            row = orjson.dumps(
                {
                    "id": n,
                    "user": f"user{n}",
                    "email": f"user{n}@example.com",
                    "score": n * 0.25,
                    "active": n % 2 == 0,
                    "tags": ["alpha", "beta"],
                    "bio": f"Lorem ipsum dolor sit amet, consectetur adipiscing elit {n}",
                    "created": "2024-01-01T00:00:00Z",
                }
            )
            if n:
                f.write(b",")
            f.write(row)
            written += len(row) + 1
            n += 1
        f.write(b"]")
    return n


def median_s(fn: Callable[[], Any], rounds: int = ROUNDS) -> float:
    times = []
    for _ in range(rounds):
        t0 = time.perf_counter()
        fn()
        times.append(time.perf_counter() - t0)
    return statistics.median(times)


def first_page(path: Path) -> list[Any]:
    it = JsonArrayFileSource(path).open(None, limit_hint=100)
    try:
        return list(itertools.islice(it, 101))
    finally:
        it.close()


def ijson_first(path: Path) -> list[Any]:
    with open(path, "rb") as f:
        return list(itertools.islice(ijson.items(f, "item", use_float=True), 100))


def page_whole_file(path: Path) -> int:
    """Every item, PAGE at a time, each page a fresh open at the previous page's position."""
    source = JsonArrayFileSource(path)
    position, total = None, 0
    while True:
        it = source.open(position, limit_hint=PAGE)
        try:
            got = list(itertools.islice(it, PAGE + 1))
        finally:
            it.close()
        total += min(len(got), PAGE)
        if len(got) <= PAGE:
            return total
        position = got[PAGE - 1][1]


def ijson_whole_file(path: Path) -> int:
    with open(path, "rb") as f:
        return sum(1 for _ in ijson.items(f, "item", use_float=True))


SRC = Path(__file__).resolve().parent.parent / "src"

# The child reports its own peak: VmHWM is the high-water RSS of its address space, which
# exec replaces. ru_maxrss is no good here: Linux carries the parent's peak into it across
# fork and exec, so every file showed the bench process's own RSS.
_RSS_PROBE = """
import sys, itertools
from jsonbudget._sources.files import JsonArrayFileSource
if sys.argv[1:]:
    it = JsonArrayFileSource(sys.argv[1]).open(None, limit_hint=100)
    items = list(itertools.islice(it, 101))
    it.close()
with open("/proc/self/status") as f:
    print(next(line.split()[1] for line in f if line.startswith("VmHWM:")))
"""


def first_page_rss_kib(path: Path | None) -> float:
    """Peak RSS (KiB) of a fresh process that imports the source and reads a first page of
    *path* (with None: that only imports it).
    """
    out = subprocess.run(
        [sys.executable, "-c", _RSS_PROBE, *([str(path)] if path else [])],
        check=True,
        capture_output=True,
        text=True,
        env={"PYTHONPATH": str(SRC)},
    )
    return float(out.stdout.strip())


def file_rows(full: bool) -> list[Row]:
    small_mb, big_mb = (20, 200) if full else (4, 40)
    rows: list[Row] = []
    with tempfile.TemporaryDirectory() as tmp:
        small, big = Path(tmp) / "small.json", Path(tmp) / "big.json"
        write_array(small, small_mb)
        n_big = write_array(big, big_mb)
        first_page(big)  # warm the page cache, as the references get it
        t_src = median_s(lambda: first_page(big), 21)
        t_ijson = median_s(lambda: ijson_first(big), 21)
        rows.append((f"first page (101 items) of a {big_mb} MB array", t_src * 1e3, "ms", "<= 2"))
        rows.append(
            (f"ijson first 100 items of the {big_mb} MB array", t_ijson * 1e3, "ms", "(ref)")
        )
        rss_import = statistics.median(first_page_rss_kib(None) for _ in range(3))
        rss_small = statistics.median(first_page_rss_kib(small) for _ in range(3))
        rss_big = statistics.median(first_page_rss_kib(big) for _ in range(3))
        rows.append(("process peak RSS, import only (no page)", rss_import, "KiB", "(ref)"))
        rows.append(
            (f"first page: process peak RSS, {small_mb} MB file", rss_small, "KiB", "(ref)")
        )
        rows.append(
            (
                f"first page: process peak RSS, {big_mb} MB file",
                rss_big,
                "KiB",
                "~ the small file's",
            )
        )
        # Interleaved rounds: the machine is shared, so compare within each round.
        # Paging is `paginate` following `next_cursor` (it fills each page in bulk runs);
        # `open`, item by item with each item's exact position, is shown beside it.
        limits = Limits(1 << 24, max_items=PAGE)
        ratios, src_s, raw_s, item_ratios = [], [], [], []
        for _ in range(3):
            t0 = time.perf_counter()
            assert ijson_whole_file(big) == n_big
            t_raw = time.perf_counter() - t0
            t0 = time.perf_counter()
            assert paginate_all(JsonArrayFileSource(big), limits) == n_big
            t_paged = time.perf_counter() - t0
            t0 = time.perf_counter()
            assert page_whole_file(big) == n_big
            t_items = time.perf_counter() - t0
            ratios.append(t_raw / t_paged)
            item_ratios.append(t_raw / t_items)
            src_s.append(t_paged)
            raw_s.append(t_raw)
        mb = big.stat().st_size / 1e6
        rows.append(
            (
                f"paging the {big_mb} MB file with paginate ({PAGE}/page)",
                mb / statistics.median(src_s),
                "MB/s",
                "",
            )
        )
        rows.append(("raw ijson.items over it", mb / statistics.median(raw_s), "MB/s", "(ref)"))
        rows.append(("paging throughput / raw ijson", statistics.median(ratios), "x", ">= 0.70"))
        rows.append(
            (
                "  item by item through open() / raw ijson",
                statistics.median(item_ratios),
                "x",
                "(info)",
            )
        )
        pages = n_big // PAGE
        rows.append(("pages opened while paging it", float(pages), "pages", "(info)"))
    return rows


def postgres_rows(n: int = 200_000) -> list[Row]:
    rows: list[Row] = []
    with running_postgres() as server, psycopg.connect(server.dsn, autocommit=True) as conn:
        conn.execute(
            "CREATE TABLE bench AS SELECT g AS id, 'user' || g AS name, g * 0.25 AS score,"
            " now() AS created, repeat('x', 120) AS body FROM generate_series(1, %s) g",
            (n,),
        )
        conn.execute("ALTER TABLE bench ADD PRIMARY KEY (id)")
        conn.execute("VACUUM ANALYZE bench")
        stream = PostgresSource(conn, table="bench", batch_size=2000)

        def streamed() -> None:
            assert sum(1 for _ in stream.open(None)) == n

        def paged(page: int = 1000) -> None:
            position, total = None, 0
            while True:
                it = stream.open(position, limit_hint=page)
                got = list(itertools.islice(it, page + 1))
                it.close()
                total += min(len(got), page)
                if len(got) <= page:
                    break
                position = got[page - 1][1]
            assert total == n

        def raw() -> None:
            with conn.transaction(), conn.cursor(name="raw") as cur:
                cur.execute("SELECT * FROM bench ORDER BY id")
                count = 0
                while batch := cur.fetchmany(2000):
                    count += len(batch)
            assert count == n

        t_stream, t_paged, t_raw = median_s(streamed, 3), median_s(paged, 3), median_s(raw, 3)
        rows.append(("PostgreSQL rows/s, one streamed open", n / t_stream, "rows/s", "(info)"))
        rows.append(("PostgreSQL rows/s, keyset pages of 1000", n / t_paged, "rows/s", "(info)"))
        rows.append(("psycopg server cursor, tuples (ref)", n / t_raw, "rows/s", "(ref)"))
    return rows


# A fresh process pages a table whose first row holds one huge cell, and reports its own
# peak RSS (VmHWM), the time of the first page and the page's size.
_CELL_PROBE = """
import json, sys, time
from jsonbudget import Limits, MemoryCursorStore, PostgresSource, Scope, paginate
dsn, table, budget = sys.argv[1], sys.argv[2], int(sys.argv[3])
store, scope, limits = MemoryCursorStore(), Scope("bench", {}), Limits(budget)
t0 = time.perf_counter()
with PostgresSource(dsn, table=table, max_cell_bytes=budget) as source:
    page = paginate(source, scope=scope, store=store, limits=limits)
    first = time.perf_counter() - t0
    data = page.to_json()
    rows = len(page.items)
    while page.next_cursor is not None:
        page = paginate(source, scope=scope, store=store, limits=limits, cursor=page.next_cursor)
        rows += len(page.items)
with open("/proc/self/status") as f:
    hwm = next(int(line.split()[1]) for line in f if line.startswith("VmHWM:"))
print(json.dumps({"first_s": first, "hwm_kib": hwm, "bytes": len(data), "rows": rows}))
"""

_DEEP_PROBE = """
import json, sys, time, io, contextlib
from jsonbudget._cli.main import main
out = io.StringIO()
t0 = time.perf_counter()
with contextlib.redirect_stdout(out):
    code = main(["dump", "--max-bytes", "200", sys.argv[1]])
took = time.perf_counter() - t0
with open("/proc/self/status") as f:
    hwm = next(int(line.split()[1]) for line in f if line.startswith("VmHWM:"))
print(json.dumps({"s": took, "hwm_kib": hwm, "code": code, "bytes": len(out.getvalue()) - 1}))
"""


def _probe(code: str, *args: str) -> dict[str, Any]:
    out = subprocess.run(
        [sys.executable, "-c", code, *args],
        check=True,
        capture_output=True,
        text=True,
        env={"PYTHONPATH": str(SRC)},
    )
    result: dict[str, Any] = orjson.loads(out.stdout)
    return result


def deep_dump_rows(levels: int = 1_000_000) -> list[Row]:
    """`jsonbudget dump` of a nested array *levels* deep to 200 bytes."""
    with tempfile.TemporaryDirectory() as tmp:
        path = Path(tmp) / "deep.json"
        path.write_bytes(b"[" * levels + b"]" * levels)
        runs = [_probe(_DEEP_PROBE, str(path)) for _ in range(3)]
    assert all(r["code"] == 0 and r["bytes"] <= 200 for r in runs)
    took = statistics.median(r["s"] for r in runs)
    hwm = statistics.median(r["hwm_kib"] for r in runs) / 1024
    return [
        (f"dump of a {levels:,}-deep array to 200 bytes", took, "s", "<= 1"),
        (f"dump of a {levels:,}-deep array: process peak RSS", hwm, "MiB", "<= 100"),
    ]


def big_cell_rows(text_mb: int = 1000, bytea_mb: int = 600, budget: int = 65536) -> list[Row]:
    """A page of a table whose first row holds one huge text (or bytea) cell."""
    rows: list[Row] = []
    with running_postgres() as server, psycopg.connect(server.dsn, autocommit=True) as conn:
        for kind, mb in (("text", text_mb), ("bytea", bytea_mb)):
            table = f"cell_{kind}"
            conn.execute(f"CREATE TABLE {table} (id int PRIMARY KEY, body {kind})")
            # Stored uncompressed, as incompressible data would be.
            conn.execute(f"ALTER TABLE {table} ALTER COLUMN body SET STORAGE EXTERNAL")
            n = mb * 1_000_000
            if kind == "text":
                conn.execute(f"INSERT INTO {table} VALUES (1, repeat('x', %s))", (n,))
            else:
                # In 100 MB steps: the hex text of 600 MB would pass the 1 GB value limit.
                conn.execute(f"INSERT INTO {table} VALUES (1, ''::bytea)")
                step = 100_000_000
                for done in range(0, n, step):
                    conn.execute(
                        f"UPDATE {table} SET body = body || decode(repeat('ab', %s), 'hex')",
                        (min(step, n - done),),
                    )
            conn.execute(f"INSERT INTO {table} VALUES (2, 'small')")
            result = _probe(_CELL_PROBE, server.dsn, table, str(budget))
            assert result["rows"] == 2, result
            assert result["bytes"] <= budget, result
            label = f"page of a {mb:,} MB PostgreSQL {kind} cell"
            rows.append((f"{label}: first page", result["first_s"], "s", "<= 1"))
            rows.append((f"{label}: process peak RSS", result["hwm_kib"] / 1024, "MiB", "<= 64"))
            conn.execute(f"DROP TABLE {table}")
    return rows


def _row(n: int) -> dict[str, Any]:
    return {
        "id": n,
        "user": f"user{n}",
        "email": f"user{n}@example.com",
        "score": n * 0.25,
        "active": n % 2 == 0,
        "tags": "alpha,beta",
        "bio": f"Lorem ipsum dolor sit amet, consectetur adipiscing elit {n}",
        "created": "2024-01-01T00:00:00Z",
    }


def fill_all(source: Any, limits: Any) -> int:
    """Every page of *source* through its batch path, each page's envelope built."""
    position, total = None, 0
    while True:
        builder = PageBuilder(limits)
        more, position = source.fill(builder, position, limit_hint=limits.max_items)
        page = builder.finish(complete=not more, next_cursor="x" * 20 if more else None)
        page.to_json()
        total += len(page.items)
        if not more:
            return total


def paginate_all(source: Any, limits: Any) -> int:
    """Every page through the pager (one `add` per item), for comparison."""
    store, scope, cursor, total = MemoryCursorStore(), Scope("b", {}), None, 0
    while True:
        page = paginate(source, scope=scope, cursor=cursor, store=store, limits=limits)
        page.to_json()
        total += len(page.items)
        cursor = page.next_cursor
        if cursor is None:
            return total


def _ratio_rows(
    label: str,
    floor_label: str,
    *,
    floor: Callable[[], Any],
    fill: Callable[[], Any],
    pager: Callable[[], Any],
    target: str,
    rounds: int = 3,
) -> list[Row]:
    """Throughput ratios to *floor*, from interleaved rounds (medians)."""
    t_floor: list[float] = []
    t_fill: list[float] = []
    t_pager: list[float] = []
    for _ in range(rounds):
        for times, fn in ((t_floor, floor), (t_fill, fill), (t_pager, pager)):
            t0 = time.perf_counter()
            fn()
            times.append(time.perf_counter() - t0)
    f = statistics.median(t_floor)
    return [
        (f"{label}: fill() / {floor_label}", f / statistics.median(t_fill), "x", target),
        (f"{label}: paginate() / {floor_label}", f / statistics.median(t_pager), "x", "(info)"),
    ]


def paging_rows(n: int = 200_000, page_bytes: int = 65536) -> list[Row]:
    """Paging *n* rows in 64 KiB pages, each source against its floor (issue 16's table)."""
    limits = Limits(page_bytes)
    rows = [_row(i) for i in range(n)]
    out: list[Row] = []
    with tempfile.TemporaryDirectory() as tmp:
        array, lines, db = Path(tmp) / "rows.json", Path(tmp) / "rows.jsonl", Path(tmp) / "r.db"
        array.write_bytes(orjson.dumps(rows))
        lines.write_bytes(b"\n".join(orjson.dumps(r) for r in rows) + b"\n")
        conn = sqlite3.connect(db)
        cols = list(rows[0])
        conn.execute(f"CREATE TABLE r ({', '.join(cols)}, PRIMARY KEY (id))")
        conn.executemany(
            f"INSERT INTO r VALUES ({', '.join('?' * len(cols))})",
            [tuple(r.values()) for r in rows],
        )
        conn.commit()

        def sqlite_floor() -> None:
            c = sqlite3.connect(db)
            orjson.dumps(c.execute("SELECT * FROM r ORDER BY id").fetchall())
            c.close()

        with SQLiteSource(db, table="r", batch_size=2048) as src:
            out += _ratio_rows(
                "SQLiteSource",
                "fetchall tuples + orjson",
                floor=sqlite_floor,
                fill=lambda: fill_all(src, limits),
                pager=lambda: paginate_all(src, limits),
                target=">= 0.80",
            )

        def ijson_floor() -> None:
            with open(array, "rb") as f:
                for _ in ijson.items(f, "item", use_float=True):
                    pass

        arr = JsonArrayFileSource(array)
        out += _ratio_rows(
            "JsonArrayFileSource",
            "ijson.items",
            floor=ijson_floor,
            fill=lambda: fill_all(arr, limits),
            pager=lambda: paginate_all(arr, limits),
            target=">= 0.85",
        )

        def lines_floor() -> None:
            with open(lines, "rb") as f:
                for line in f:
                    orjson.loads(line)

        jl = JsonLinesSource(lines)
        out += _ratio_rows(
            "JsonLinesSource",
            "orjson per line",
            floor=lines_floor,
            fill=lambda: fill_all(jl, limits),
            pager=lambda: paginate_all(jl, limits),
            target=">= 0.70",
        )
    with running_postgres() as server, psycopg.connect(server.dsn, autocommit=True) as pg:
        pg.execute(
            'CREATE TABLE r (id int PRIMARY KEY, "user" text, email text, score float8,'
            " active bool, tags text, bio text, created text)"
        )
        with pg.cursor() as cur, cur.copy("COPY r FROM STDIN") as copy:
            for r in rows:
                copy.write_row(tuple(r.values()))

        def pg_floor() -> None:
            with pg.transaction(), pg.cursor(name="floor") as cur:
                cur.itersize = 2000
                cur.execute("SELECT * FROM r ORDER BY id")
                while batch := cur.fetchmany(2000):
                    orjson.dumps(batch)

        with PostgresSource(server.dsn, table="r", batch_size=2048) as pgs:
            out += _ratio_rows(
                "PostgresSource",
                "server cursor tuples + orjson",
                floor=pg_floor,
                fill=lambda: fill_all(pgs, limits),
                pager=lambda: paginate_all(pgs, limits),
                target=">= 0.70",
            )
    return out


def run(full: bool = False) -> list[Row]:
    cells = big_cell_rows() if full else big_cell_rows(100, 60)
    return file_rows(full) + deep_dump_rows() + cells + postgres_rows() + paging_rows()


if __name__ == "__main__":
    for name, value, unit, target in run(full="--full" in sys.argv):
        print(f"{name:48s} {value:12.2f} {unit:6s} target {target}")

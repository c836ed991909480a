"""Page sources under pytest-benchmark: one page from a file, SQLite and PostgreSQL.

Run: ``PYTHONPATH=src python3 -m pytest benches/bench_sources.py --benchmark-only``.
The issue's targets (first page of a 200 MB file <= 2 ms, whole-file paging >= 0.70 of
raw ijson) are checked by ``benches/ratios_sources.py`` against references in one run.
"""

from __future__ import annotations

import itertools
import sqlite3
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import psycopg
import pytest
from benches.ratios_sources import write_array
from tests.fixtures_postgres import running_postgres

from jsonbudget import (
    JsonArrayFileSource,
    JsonLinesSource,
    Limits,
    PageBuilder,
    PostgresSource,
    Source,
    SQLiteSource,
)

PAGE = 250


def one_page(source: Source[Any], position: Any) -> list[Any]:
    it = source.open(position, limit_hint=PAGE)
    try:
        return list(itertools.islice(it, PAGE + 1))
    finally:
        it.close()  # type: ignore[attr-defined]


@pytest.fixture(scope="module")
def array_file(tmp_path_factory: pytest.TempPathFactory) -> Path:
    path = tmp_path_factory.mktemp("bench") / "rows.json"
    write_array(path, 20)
    return path


def test_file_first_page(benchmark: Any, array_file: Path) -> None:
    source = JsonArrayFileSource(array_file)
    assert len(benchmark(one_page, source, None)) == PAGE + 1


def test_file_page_in_the_middle(benchmark: Any, array_file: Path) -> None:
    source = JsonArrayFileSource(array_file)
    middle = next(pos for item, pos in source.open(None) if item["id"] == 40_000)
    assert benchmark(one_page, source, middle)[0][0]["id"] == 40_001


def test_sqlite_keyset_page(benchmark: Any, tmp_path: Path) -> None:
    conn = sqlite3.connect(tmp_path / "b.sqlite")
    conn.execute("CREATE TABLE t (id INTEGER PRIMARY KEY, name TEXT, body TEXT)")
    conn.executemany(
        "INSERT INTO t VALUES (?, ?, ?)", ((i, f"user{i}", "x" * 120) for i in range(100_000))
    )
    conn.commit()
    source = SQLiteSource(conn, table="t")
    assert benchmark(one_page, source, [50_000])[0][0]["id"] == 50_001


@pytest.fixture(scope="module")
def pg_conn() -> Iterator[psycopg.Connection[Any]]:
    with running_postgres() as server, psycopg.connect(server.dsn, autocommit=True) as conn:
        conn.execute(
            "CREATE TABLE t AS SELECT g AS id, 'user' || g AS name, repeat('x', 120) AS body"
            " FROM generate_series(1, 100000) g"
        )
        conn.execute("ALTER TABLE t ADD PRIMARY KEY (id)")
        yield conn


def test_postgres_keyset_page(benchmark: Any, pg_conn: psycopg.Connection[Any]) -> None:
    source = PostgresSource(pg_conn, table="t")
    assert benchmark(one_page, source, [50_000])[0][0]["id"] == 50_001


def fill_page(source: Any, position: Any) -> Any:
    """One 64 KiB page through the source's batch path."""
    builder = PageBuilder(Limits(65536))
    more, after = source.fill(builder, position)
    return builder.finish(complete=not more, next_cursor="x" if more else None), after


def test_file_fill_page_in_the_middle(benchmark: Any, array_file: Path) -> None:
    source = JsonArrayFileSource(array_file)
    middle = next(pos for item, pos in source.open(None) if item["id"] == 40_000)
    page, _ = benchmark(fill_page, source, middle)
    assert page.items[0]["id"] == 40_001


def test_jsonl_fill_page(benchmark: Any, tmp_path: Path) -> None:
    path = tmp_path / "rows.jsonl"
    path.write_bytes(
        b"".join(b'{"id": %d, "body": "%s"}\n' % (i, b"x" * 120) for i in range(20_000))
    )
    page, _ = benchmark(fill_page, JsonLinesSource(path), None)
    assert page.items[0]["id"] == 0


def test_sqlite_fill_page(benchmark: Any, tmp_path: Path) -> None:
    conn = sqlite3.connect(tmp_path / "f.sqlite")
    conn.execute("CREATE TABLE t (id INTEGER PRIMARY KEY, name TEXT, body TEXT)")
    conn.executemany(
        "INSERT INTO t VALUES (?, ?, ?)", ((i, f"user{i}", "x" * 120) for i in range(100_000))
    )
    conn.commit()
    page, _ = benchmark(fill_page, SQLiteSource(conn, table="t"), [50_000])
    assert page.items[0]["id"] == 50_001

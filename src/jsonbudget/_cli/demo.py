"""The demo: a realistic SQLite ticket database paged with a durable cursor store.

Everything happens on local files (no server, no network): the database and the cursor
store are SQLite files in one directory. Each page is served by a cursor store opened
afresh on the same file, as a new process serving the next request would.
"""

from __future__ import annotations

import os
import random
import sqlite3
from collections.abc import Callable, Iterator
from dataclasses import dataclass
from typing import Any

import orjson

from .._cursors.scope import Scope
from .._cursors.sqlite_store import SQLiteCursorStore
from .._limits import MIN_BYTES, Limits, check_int
from .._pages.builder import OversizedItem, Page, Paginator
from .._sources.base import described_path
from .._sources.sql import SQLiteSource
from ..errors import CursorScopeError

__all__ = [
    "DEFAULT_HUGE_BYTES",
    "DEFAULT_MAX_BYTES",
    "DEFAULT_ROWS",
    "Demo",
    "DemoPage",
    "DemoReport",
    "make_demo_database",
    "run_demo",
]

DEFAULT_ROWS = 200
DEFAULT_MAX_BYTES = 16 * 1024
#: The attachment of the one huge row: 3 MiB of base64-like text.
DEFAULT_HUGE_BYTES = 3 * 1024 * 1024
#: The largest attachment: SQLite refuses a row past SQLITE_MAX_LENGTH (10**9 bytes by
#: default), and the huge ticket's other cells take up to a few tens of KB.
MAX_HUGE_BYTES = 999_000_000
DATABASE_NAME = "tickets.sqlite3"
STORE_NAME = "cursors.sqlite3"
_SEED = 20240611
#: The operation budget of the demo's second run, which shows the budget running out.
BUDGET_PAGES = 2
#: Who asks in the demo, and who tries to reuse their cursor.
PRINCIPAL = "alice"
OTHER_PRINCIPAL = "mallory"

_PHRASES = (
    "Customer reports the parcel arrived damaged; photos attached to the previous mail.",
    "Kunde meldet: Lieferung verspätet — Größe M statt L geliefert, bittet um Umtausch.",
    "顧客から連絡：配送が三日遅れています。追跡番号を確認してください。",
    "Клиент сообщает о двойном списании с карты, просит вернуть средства.",
    "Le client a reçu un colis abîmé… il souhaite un remboursement intégral.",
    "El cliente pregunta por la factura rectificativa del pedido anterior.",
    "고객이 환불 절차에 대해 문의했습니다. 영수증 사본을 요청했습니다.",
    "Escalated to tier 2 🚚📦 — carrier claims the address was incomplete.",
    "Ο πελάτης ζητά αλλαγή διεύθυνσης αποστολής πριν την αποστολή.",
    "العميل يطلب تحديث عنوان الفاتورة قبل إصدارها.",
)
_SUBJECTS = (
    "Damaged parcel",
    "Late delivery",
    "Double charge",
    "Refund request",
    "Address change",
    "Invoice correction",
    "Wrong size",
)
_STATUSES = ("open", "pending", "solved", "closed")
_PRIORITIES = ("low", "normal", "high", "urgent")
_B64 = "ABCDEFGHIJKLMNOPQRSTUVWXYZabcdefghijklmnopqrstuvwxyz0123456789+/"


def make_demo_database(
    path: str | os.PathLike[str],
    *,
    rows: int = DEFAULT_ROWS,
    huge_bytes: int = DEFAULT_HUGE_BYTES,
) -> int:
    """Create the ``tickets`` table at *path* and return the id of the huge row.

    Rows are deterministic (a fixed seed): long multibyte ``notes`` (200 to 4,000
    characters, in ten scripts, emoji included) and, on one row, an ``attachment`` of
    *huge_bytes* ASCII characters. Refuses to overwrite an existing file.
    """
    check_int("rows", rows, minimum=1, maximum=1_000_000)
    check_int("huge_bytes", huge_bytes, minimum=1, maximum=MAX_HUGE_BYTES)
    if os.path.exists(path):
        raise FileExistsError(f"{os.fspath(path)} already exists")
    rng = random.Random(_SEED)
    huge_id = max(1, rows // 3)
    conn = sqlite3.connect(path)
    try:
        conn.execute(
            "CREATE TABLE tickets (id INTEGER PRIMARY KEY, customer TEXT NOT NULL,"
            " subject TEXT NOT NULL, status TEXT NOT NULL, priority TEXT NOT NULL,"
            " created_at TEXT NOT NULL, notes TEXT NOT NULL, attachment TEXT)"
        )
        # From a generator, which executemany steps row by row: the table is written
        # in memory independent of *rows* (a list of every row took about 11 KB a row,
        # some 11 GB at the most the demo takes).
        conn.executemany(
            "INSERT INTO tickets VALUES (?, ?, ?, ?, ?, ?, ?, ?)",
            _demo_rows(rng, rows, huge_id, huge_bytes),
        )
        conn.commit()
    finally:
        conn.close()
    return huge_id


def _demo_rows(
    rng: random.Random, rows: int, huge_id: int, huge_bytes: int
) -> Iterator[tuple[Any, ...]]:
    """The rows of `make_demo_database`, one at a time, in order (*rng* draws them)."""
    for i in range(1, rows + 1):
        target = rng.randint(200, 4000)
        parts: list[str] = []
        length = 0
        while length < target:
            phrase = rng.choice(_PHRASES)
            parts.append(phrase)
            length += len(phrase) + 1
        notes = " ".join(parts)[:target]
        attachment = None
        if i == huge_id:
            chunk = "".join(rng.choice(_B64) for _ in range(4096))
            attachment = (chunk * (huge_bytes // len(chunk) + 1))[:huge_bytes]
        yield (
            i,
            f"customer-{rng.randint(1000, 9999)}",
            rng.choice(_SUBJECTS),
            rng.choice(_STATUSES),
            rng.choice(_PRIORITIES),
            f"2024-{rng.randint(1, 12):02d}-{rng.randint(1, 28):02d}T"
            f"{rng.randint(0, 23):02d}:{rng.randint(0, 59):02d}:00Z",
            notes,
            attachment,
        )


@dataclass(frozen=True, slots=True)
class DemoPage:
    """One served page, summarized."""

    number: int
    ids: tuple[int, ...]
    bytes: int
    truncations: int
    oversized: tuple[OversizedItem, ...]
    complete: bool
    incomplete_reason: str | None

    def to_dict(self) -> dict[str, Any]:
        return {
            "page": self.number,
            "items": len(self.ids),
            "first_id": self.ids[0] if self.ids else None,
            "last_id": self.ids[-1] if self.ids else None,
            "bytes": self.bytes,
            "truncations": self.truncations,
            "oversized": [{"id": self.ids[o.index], **o.to_dict()} for o in self.oversized],
            "complete": self.complete,
        }


@dataclass(frozen=True, slots=True)
class DemoReport:
    """The whole run: where the files are, every page's summary, and the checks."""

    database: str
    store: str
    max_bytes: int
    rows: int
    huge_id: int
    pages: tuple[DemoPage, ...]
    first_page: bytes
    every_row_once_in_order: bool
    #: the page that holds the huge row, as a client receives it
    huge_page: bytes
    #: the error raised when the first page's cursor is presented by another principal
    refused: str
    #: the last page of a second run whose operation budget is `BUDGET_PAGES` pages
    budget_page: bytes

    @property
    def huge_outcome(self) -> str | None:
        """What happened to the huge row: the oversized outcome, or None if it fit."""
        for page in self.pages:
            for o in page.oversized:
                if page.ids[o.index] == self.huge_id:
                    return o.outcome
        return None

    def to_dict(self) -> dict[str, Any]:
        # The paths as a cursor's scope holds them: a name that is not UTF-8 (which
        # orjson cannot write) goes as base64 bytes under "database_bytes"/"store_bytes".
        return {
            **described_path("database", self.database),
            **described_path("store", self.store),
            "max_bytes": self.max_bytes,
            "rows": self.rows,
            "huge_id": self.huge_id,
            "huge_outcome": self.huge_outcome,
            "pages": [p.to_dict() for p in self.pages],
            "every_row_once_in_order": self.every_row_once_in_order,
            "first_page": orjson.loads(self.first_page),
            "huge_page": orjson.loads(self.huge_page),
            "refused": self.refused,
            "budget_page": orjson.loads(self.budget_page),
        }


class Demo:
    """A configured demo run: how many rows, the page budget and the huge row's size."""

    __slots__ = ("huge_bytes", "limits", "rows")

    def __init__(
        self,
        *,
        rows: int = DEFAULT_ROWS,
        max_bytes: int = DEFAULT_MAX_BYTES,
        huge_bytes: int = DEFAULT_HUGE_BYTES,
    ) -> None:
        self.rows = check_int("rows", rows, minimum=1, maximum=1_000_000)
        self.huge_bytes = check_int("huge_bytes", huge_bytes, minimum=1, maximum=MAX_HUGE_BYTES)
        self.limits = Limits(check_int("max_bytes", max_bytes, minimum=MIN_BYTES))

    def run(
        self,
        directory: str | os.PathLike[str],
        *,
        on_page: Callable[[DemoPage], None] | None = None,
    ) -> DemoReport:
        """Create the database in *directory*, page through all of it, and report.

        *on_page* is called after each page (for progress). Each page opens the cursor
        store afresh from its file and closes it again, so the cursor really travels
        through the durable store.
        """
        directory = os.fspath(directory)
        database = os.path.join(directory, DATABASE_NAME)
        store_path = os.path.join(directory, STORE_NAME)
        huge_id = make_demo_database(database, rows=self.rows, huge_bytes=self.huge_bytes)
        source = SQLiteSource(database, table="tickets", order_by=("id",))
        query = {"table": "tickets", "order_by": ["id"]}
        scope = Scope(PRINCIPAL, query)
        pages: list[DemoPage] = []
        first: Page | None = None
        huge: Page | None = None
        cursor: str | None = None
        seen: list[int] = []
        while True:
            with SQLiteCursorStore(store_path) as store:
                page = Paginator(self.limits, store=store).paginate(
                    source, scope=scope, cursor=cursor
                )
            if first is None:
                first = page
            ids = tuple(int(row["id"]) for row in page.items)
            if huge_id in ids:
                huge = page
            seen.extend(ids)
            summary = DemoPage(
                number=len(pages) + 1,
                ids=ids,
                bytes=len(page.to_json()),
                truncations=len(page.truncations),
                oversized=page.oversized,
                complete=page.complete,
                incomplete_reason=page.incomplete_reason,
            )
            pages.append(summary)
            if on_page is not None:
                on_page(summary)
            if page.next_cursor is None:
                break
            cursor = page.next_cursor
        if first is None or huge is None:  # pragma: no cover - every row is served
            raise AssertionError("no page served")
        with SQLiteCursorStore(store_path) as store:
            refused = _refusal(source, store, self.limits, first, query)
            budget_page = _budget_run(source, store, self.limits, scope)
        return DemoReport(
            database=database,
            store=store_path,
            max_bytes=self.limits.max_bytes,
            rows=self.rows,
            huge_id=huge_id,
            pages=tuple(pages),
            first_page=first.to_json(),
            every_row_once_in_order=seen == list(range(1, self.rows + 1)),
            huge_page=huge.to_json(),
            refused=refused,
            budget_page=budget_page.to_json(),
        )


def _refusal(
    source: SQLiteSource,
    store: SQLiteCursorStore,
    limits: Limits,
    first: Page,
    query: dict[str, Any],
) -> str:
    """What another principal gets for the first page's cursor (a single page has none)."""
    if first.next_cursor is None:
        return "(one page only: no cursor to refuse)"
    try:
        Paginator(limits, store=store).paginate(
            source, scope=Scope(OTHER_PRINCIPAL, query), cursor=first.next_cursor
        )
    except CursorScopeError as exc:
        return f"{type(exc).__name__}: {exc}"
    raise AssertionError("a cursor was accepted for another principal")


def _budget_run(
    source: SQLiteSource, store: SQLiteCursorStore, limits: Limits, scope: Scope
) -> Page:
    """Page again with an operation budget of `BUDGET_PAGES`; return the last page served."""
    paginator = Paginator(limits.replace(max_pages=BUDGET_PAGES), store=store)
    page = paginator.paginate(source, scope=scope)
    while page.next_cursor is not None:
        page = paginator.paginate(source, scope=scope, cursor=page.next_cursor)
    return page


def run_demo(
    directory: str | os.PathLike[str],
    *,
    rows: int = DEFAULT_ROWS,
    max_bytes: int = DEFAULT_MAX_BYTES,
    huge_bytes: int = DEFAULT_HUGE_BYTES,
    on_page: Callable[[DemoPage], None] | None = None,
) -> DemoReport:
    """One call: run a `Demo` with these options in *directory*."""
    return Demo(rows=rows, max_bytes=max_bytes, huge_bytes=huge_bytes).run(
        directory, on_page=on_page
    )


def _abridge(value: Any, keep: int) -> Any:
    """*value* with long strings shortened for a person to read (never sent anywhere)."""
    if isinstance(value, str) and len(value) > 2 * keep + 5:
        return f"{value[:keep]} ⋯ {value[-keep:]}"
    if isinstance(value, dict):
        return {k: _abridge(v, keep) for k, v in value.items()}
    if isinstance(value, list):
        return [_abridge(v, keep) for v in value]
    return value


def _abridge_cut(value: Any) -> str:
    """A cut string as JSON, its kept prefix abridged and its marker whole."""
    if not isinstance(value, str):
        return orjson.dumps(value).decode()
    kept, sep, marker = value.rpartition("…[")
    if not sep:
        return orjson.dumps(_abridge(value, 24)).decode()
    return orjson.dumps(f"{_abridge(kept, 12)}{sep}{marker}").decode()


def _plural(n: int, word: str) -> str:
    return f"{n:,} {word}" if n == 1 else f"{n:,} {word}s"


def report_lines(report: DemoReport, huge_bytes: int) -> list[str]:
    """The demo's screen: the five things a newcomer should see, each from the real run.

    Long strings and item lists are abridged here, for reading (``⋯`` is not a marker:
    the markers are the ``…[`` strings, exactly as the client received them).
    """
    first = orjson.loads(report.first_page)
    huge = orjson.loads(report.huge_page)
    budget = orjson.loads(report.budget_page)
    # At a small budget the ticket may be cut to a marker, or lose the field itself.
    row = next(
        (r for r in huge["items"] if isinstance(r, dict) and r.get("id") == report.huge_id), None
    )
    if row is not None and "attachment" in row:
        attachment = _abridge_cut(row["attachment"])
    else:
        attachment = "(not on the page at this budget: its outcome is below)"
    served = sum(len(p.ids) for p in report.pages)
    largest = max(p.bytes for p in report.pages)
    envelope = {k: v for k, v in first.items() if k != "items"}
    items = first["items"]
    return [
        f"Demo: {_plural(report.rows, 'support ticket')} in SQLite (ticket {report.huge_id} "
        f"has a {huge_bytes:,}-byte attachment), paged with a {report.max_bytes:,}-byte "
        "budget through a durable SQLite cursor store.",
        "",
        "1. A cut field keeps a valid prefix and says what it left out:",
        f"   attachment: {attachment}",
        "2. The oversized ticket's outcome, and every cut, reported beside the items:",
        f"   oversized: {orjson.dumps(huge.get('oversized', [])).decode()}",
        f"   truncated: {orjson.dumps(huge.get('truncated', [])).decode()}",
        f"3. A page's envelope ({len(report.first_page):,} bytes; "
        f"{_plural(len(items), 'item')} left out here):",
        f"   {orjson.dumps({'items': ['⋯'], **_abridge(envelope, 12)}).decode()}",
        f"4. The first page's cursor, presented by {OTHER_PRINCIPAL!r} instead of {PRINCIPAL!r}:",
        f"   {report.refused}",
        f"5. With an operation budget of {BUDGET_PAGES} pages, "
        + (
            "the last page says why it stops:"
            if budget.get("incomplete_reason") == "budget_exhausted"
            else "the query ends first:"
        ),
        f"   {orjson.dumps({k: v for k, v in budget.items() if k != 'items'}).decode()}",
        "",
        f"{_plural(served, 'row')} served in {_plural(len(report.pages), 'page')}, largest "
        f"page {largest:,} bytes (budget {report.max_bytes:,}); every row once, in order: "
        f"{'yes' if report.every_row_once_in_order else 'NO'}.",
    ]

"""Tuning: measure real items and find the smallest page budget that meets a goal.

Nothing here is estimated. Item sizes are the items' full encodings; the figures for each
candidate budget come from running `PageBuilder` over the measured items, exactly as
`paginate` would page them.
"""

from __future__ import annotations

import math
import os
from collections.abc import Callable, Iterable, Mapping, Sequence
from dataclasses import dataclass
from fractions import Fraction
from itertools import islice
from typing import Any, Literal, get_args

import orjson

from .._encode.encoder import BinaryMode, Encoder, MarkerStyle, Strategy
from .._extras import missing_extra
from .._limits import (
    MAX_DEPTH,
    MAX_LIMIT,
    MIN_BYTES,
    MIN_FIELD_BYTES,
    Limits,
    check_int,
    check_mode,
)
from .._pages.builder import PageBuilder
from .._shared import dumps
from .._sources.base import Clipped
from ..errors import EncodeError, LimitError

__all__ = [
    "DEFAULT_BUDGETS",
    "DEFAULT_GOAL",
    "DEFAULT_SAMPLE",
    "BudgetRow",
    "SizeStats",
    "TuneOversized",
    "TuneReport",
    "Tuner",
    "percentile",
    "tune",
    "write_chart",
]

#: The outcomes a tuning run measures for an item larger than a page: of the page
#: builder's policies, the two that put the item on the page ("spill" and "error" do not).
TuneOversized = Literal["truncate", "placeholder"]

#: Candidate page budgets: 4 KiB to 1 MiB, doubling.
DEFAULT_BUDGETS: tuple[int, ...] = tuple(4096 << i for i in range(9))
#: At most 2% of items truncated or oversized.
DEFAULT_GOAL = 0.02
#: Items measured by default: the first 10,000 of the source.
DEFAULT_SAMPLE = 10_000
#: The most candidate budgets one run may try (each one pages the whole sample).
MAX_BUDGETS = 32
_ITEMS_PREFIX = "/items/"
# A page's cursor is at most this long; finishing with one keeps page sizes realistic.
_CURSOR = "x" * 56


def percentile(sorted_values: Sequence[int], p: float) -> int | None:
    """The nearest-rank *p*-th percentile of ascending *sorted_values* (None if empty).

    Nearest rank: the smallest value such that at least *p* percent of the values are
    less than or equal to it; always one of the values, never interpolated.
    """
    if not 0 < p <= 100:  # noqa: PLR2004 - a percentile is in (0, 100]
        raise ValueError(f"p must be in (0, 100], not {p!r}")
    if not sorted_values:
        return None
    # Exact: in floats, 7 / 100 * 100 is 7.000000000000001 and its ceiling a rank too far.
    # A float is taken as the decimal it prints as (99.9, not its binary neighbour).
    exact = Fraction(repr(p)) if isinstance(p, float) else Fraction(p)
    scaled = exact * len(sorted_values)
    rank = max(1, -(-scaled.numerator // (scaled.denominator * 100)))
    return sorted_values[rank - 1]


@dataclass(frozen=True, slots=True)
class SizeStats:
    """A size distribution in encoded bytes: count and nearest-rank percentiles."""

    count: int
    p50: int | None
    p90: int | None
    p99: int | None
    max: int | None

    @classmethod
    def of(cls, values: Iterable[int]) -> SizeStats:
        ordered = sorted(values)
        return cls(
            count=len(ordered),
            p50=percentile(ordered, 50),
            p90=percentile(ordered, 90),
            p99=percentile(ordered, 99),
            max=ordered[-1] if ordered else None,
        )

    def to_dict(self) -> dict[str, int | None]:
        return {
            "count": self.count,
            "p50": self.p50,
            "p90": self.p90,
            "p99": self.p99,
            "max": self.max,
        }


@dataclass(frozen=True, slots=True)
class BudgetRow:
    """What paging the sample with one ``max_bytes`` budget did, measured."""

    max_bytes: int
    pages: int
    items_per_page: float
    truncated_items: int
    oversized_items: int
    truncated_share: float
    meets_goal: bool

    def to_dict(self) -> dict[str, Any]:
        return {
            "max_bytes": self.max_bytes,
            "pages": self.pages,
            "items_per_page": self.items_per_page,
            "truncated_items": self.truncated_items,
            "oversized_items": self.oversized_items,
            "truncated_share": self.truncated_share,
            "meets_goal": self.meets_goal,
        }


@dataclass(frozen=True, slots=True)
class TuneReport:
    """Sizes measured on a sample, one `BudgetRow` per candidate, and the recommendation.

    ``item_sizes`` keeps each measured item's encoded size in source order (for charts).
    ``sample_complete`` is True when the source had no more items than the sample took.
    ``recommended_max_bytes`` is the smallest candidate meeting the goal, or None (none
    does, or there were no items to measure).
    ``suggested_max_field_bytes`` is the smallest power of two at least the p99 of string
    field sizes (and at least ``MIN_FIELD_BYTES``), or None when there are no strings.
    """

    items: int
    sample_complete: bool
    goal_truncated: float
    item_bytes: SizeStats
    field_bytes: SizeStats
    budgets: tuple[BudgetRow, ...]
    recommended_max_bytes: int | None
    suggested_max_field_bytes: int | None
    item_sizes: tuple[int, ...]

    def to_dict(self) -> dict[str, Any]:
        """The report as plain JSON values (``item_sizes`` left out)."""
        return {
            "items": self.items,
            "sample_complete": self.sample_complete,
            "goal_truncated": self.goal_truncated,
            "item_bytes": self.item_bytes.to_dict(),
            "field_bytes": self.field_bytes.to_dict(),
            "budgets": [row.to_dict() for row in self.budgets],
            "recommended_max_bytes": self.recommended_max_bytes,
            "suggested_max_field_bytes": self.suggested_max_field_bytes,
        }


def _string_size(text: str, fallback: Encoder) -> int:
    try:
        return len(orjson.dumps(text))
    except orjson.JSONEncodeError:
        # A lone surrogate or a str subclass: measured as the encoder writes it.
        return len(fallback.dumps(text))


def _measure(item: Any, fallback: Encoder, strings: list[int]) -> int:
    """The full encoded size of *item*; appends the encoded size of each string value in it.

    Both count the same values. A container met again inside itself (a cycle) is written
    by the encoder as a cycle marker and contributes nothing more; so does nesting deeper
    than `MAX_DEPTH`, which no page can hold (a depth marker). An item holding either is
    measured as *fallback* writes it. A text a source cut (`Clipped`) counts as the string
    it stands for: its head as encoded plus one byte per character or byte left out.
    """
    whole = True  # orjson can write the item as it is
    unseen = 0  # bytes of cut texts that the encoder's rendering of them leaves out
    path: set[int] = set()  # the containers the walk is inside: a repeat is a cycle
    # (_LEAVE, id) entries close a container once all its children have been walked.
    stack: list[tuple[Any, int]] = [(item, 0)]
    while stack:
        value, depth = stack.pop()
        if value is _LEAVE:
            path.discard(depth)
        elif isinstance(value, str):
            strings.append(_string_size(value, fallback))
        elif type(value) is Clipped:
            # orjson would write it as a {head, length, unit} object, not as the text.
            whole = False
            if isinstance(value.head, str):
                full = _string_size(value.head, fallback) + value.omitted
                strings.append(full)
                unseen += full - len(fallback.dumps(value))
        elif isinstance(value, Mapping | list | tuple):
            ident = id(value)
            if ident in path or depth >= MAX_DEPTH:
                whole = False
                continue
            path.add(ident)
            stack.append((_LEAVE, ident))
            children = value.values() if isinstance(value, Mapping) else value
            stack.extend((child, depth + 1) for child in children)
    if whole:
        try:
            return len(dumps(item))
        except (orjson.JSONEncodeError, EncodeError):
            # Values orjson refuses (huge ints, lone surrogates, other types, a datetime
            # whose tzinfo fails) are measured as the encoder would write them, markers
            # included.
            return len(fallback.dumps(item))
    return len(fallback.dumps(item)) + unseen


_LEAVE = object()


def _item_index(path: str) -> int | None:
    if not path.startswith(_ITEMS_PREFIX):
        return None
    head = path[len(_ITEMS_PREFIX) :].split("/", 1)[0]
    return int(head) if head.isdigit() else None


class Tuner:
    """A configured, reusable measurement: candidate budgets, goal, sample size, options."""

    __slots__ = (
        "binary",
        "budgets",
        "default",
        "goal_truncated",
        "markers",
        "max_field_bytes",
        "max_items",
        "max_keys",
        "oversized",
        "sample",
        "strategy",
    )

    def __init__(
        self,
        *,
        budgets: Sequence[int] = DEFAULT_BUDGETS,
        goal_truncated: float = DEFAULT_GOAL,
        sample: int = DEFAULT_SAMPLE,
        max_items: int | None = None,
        max_keys: int | None = None,
        max_field_bytes: int | None = None,
        oversized: TuneOversized = "truncate",
        strategy: Strategy = "balanced",
        markers: MarkerStyle = "text",
        default: Callable[[Any], Any] | None = None,
        binary: BinaryMode = "marker",
    ) -> None:
        if isinstance(budgets, str | bytes) or not isinstance(budgets, Sequence) or not budgets:
            raise LimitError("budgets", budgets, "must be a non-empty sequence of ints")
        if len(budgets) > MAX_BUDGETS:
            raise LimitError(
                "budgets", budgets, f"at most {MAX_BUDGETS} candidates, not {len(budgets)}"
            )
        checked = sorted({check_int("budgets", b, minimum=MIN_BYTES) for b in budgets})
        if (
            isinstance(goal_truncated, bool)
            or not isinstance(goal_truncated, int | float)
            or not 0 <= goal_truncated <= 1
        ):
            raise LimitError("goal_truncated", goal_truncated, "must be a number in [0, 1]")
        check_mode("oversized", oversized, get_args(TuneOversized))
        self.budgets: tuple[int, ...] = tuple(checked)
        # Adding 0.0 makes -0.0 plain 0.0: the report showed "at most -0.0% cut".
        self.goal_truncated = float(goal_truncated) + 0.0
        self.sample = check_int("sample", sample, minimum=1, maximum=MAX_LIMIT)
        if max_items is not None:
            check_int("max_items", max_items, minimum=1)
        self.max_items = max_items
        if max_keys is not None:
            check_int("max_keys", max_keys, minimum=1)
        self.max_keys = max_keys
        if max_field_bytes is not None:
            check_int("max_field_bytes", max_field_bytes, minimum=MIN_FIELD_BYTES)
        self.max_field_bytes = max_field_bytes
        self.oversized: TuneOversized = oversized
        self.strategy: Strategy = strategy
        self.markers: MarkerStyle = markers
        # As `paginate` is given them: the pages measured are the pages served.
        self.default = default
        self.binary: BinaryMode = binary
        # Before reading anything, each candidate is checked by the builder that would page
        # with it: it refuses a bad strategy or marker style, caps that do not fit the
        # budget, and a budget below its smallest page (which depends on these options).
        for budget in self.budgets:
            try:
                self._builder(self._limits(budget))
            except LimitError as exc:
                if exc.name != "max_bytes":
                    raise
                # The builder names its own option; the caller passed the budget in
                # `budgets`.
                raise LimitError("budgets", budget, exc.reason) from exc

    def steps(self, items: int) -> int:
        """Units of work `tune` reports to *progress* for *items* items."""
        return items * (1 + len(self.budgets))

    def tune(
        self, items: Iterable[Any], *, progress: Callable[[int], object] | None = None
    ) -> TuneReport:
        """Measure the first ``sample`` items of *items* and page them with each budget.

        *progress*, if given, is called with the number of work units just done (see
        `steps`): one per item measured and one per item paged per budget.
        """
        it = iter(items)
        taken = list(islice(it, self.sample))
        sample_complete = next(it, _END) is _END
        fallback = self._encoder(Limits(MAX_LIMIT, max_depth=MAX_DEPTH))
        sizes: list[int] = []
        fields: list[int] = []
        for item in taken:
            sizes.append(_measure(item, fallback, fields))
            if progress is not None:
                progress(1)
        rows = tuple(self._page_all(taken, budget, progress) for budget in self.budgets)
        # Nothing measured, nothing recommended: a budget met by no items is no finding.
        recommended = next((row.max_bytes for row in rows if row.meets_goal and taken), None)
        field_stats = SizeStats.of(fields)
        suggested = None
        if field_stats.p99 is not None:
            suggested = max(MIN_FIELD_BYTES, 1 << max(0, field_stats.p99 - 1).bit_length())
        return TuneReport(
            items=len(taken),
            sample_complete=sample_complete,
            goal_truncated=self.goal_truncated,
            item_bytes=SizeStats.of(sizes),
            field_bytes=field_stats,
            budgets=rows,
            recommended_max_bytes=recommended,
            suggested_max_field_bytes=suggested,
            item_sizes=tuple(sizes),
        )

    def _builder(self, limits: Limits, encoder: Encoder | None = None) -> PageBuilder:
        return PageBuilder(
            limits,
            oversized=self.oversized,
            strategy=self.strategy,
            markers=self.markers,
            default=self.default,
            binary=self.binary,
            encoder=encoder,
        )

    def _encoder(self, limits: Limits) -> Encoder:
        """An encoder with this tuner's options, as the pages it measures use them."""
        return Encoder(
            limits,
            strategy=self.strategy,
            markers=self.markers,
            default=self.default,
            binary=self.binary,
        )

    def _limits(self, budget: int) -> Limits:
        return Limits(
            budget,
            max_items=self.max_items,
            max_keys=self.max_keys,
            max_field_bytes=self.max_field_bytes,
        )

    def _page_all(
        self, items: Sequence[Any], budget: int, progress: Callable[[int], object] | None
    ) -> BudgetRow:
        limits = self._limits(budget)
        encoder = self._encoder(limits)
        pages = 0
        truncated = 0
        oversized = 0

        def close(builder: PageBuilder, last: bool) -> None:
            nonlocal pages, truncated, oversized
            page = (
                builder.finish(complete=True)
                if last
                else builder.finish(complete=False, next_cursor=_CURSOR)
            )
            pages += 1
            big = {o.index for o in page.oversized}
            cut = {_item_index(t.path) for t in page.truncations} - {None} - big
            oversized += len(big)
            truncated += len(cut)

        builder = self._builder(limits, encoder)
        for item in items:
            if not builder.add(item):
                close(builder, last=False)
                builder = self._builder(limits, encoder)
                # An empty page always takes the item (as itself or as an oversized outcome).
                builder.add(item)
            if progress is not None:
                progress(1)
        if builder.count or not pages:
            close(builder, last=True)
        n = len(items)
        share = (truncated + oversized) / n if n else 0.0
        return BudgetRow(
            max_bytes=budget,
            pages=pages,
            items_per_page=n / pages if pages else 0.0,
            truncated_items=truncated,
            oversized_items=oversized,
            truncated_share=share,
            meets_goal=share <= self.goal_truncated,
        )


_END = object()


def tune(
    items: Iterable[Any],
    *,
    budgets: Sequence[int] = DEFAULT_BUDGETS,
    goal_truncated: float = DEFAULT_GOAL,
    sample: int = DEFAULT_SAMPLE,
    max_items: int | None = None,
    max_keys: int | None = None,
    max_field_bytes: int | None = None,
    oversized: TuneOversized = "truncate",
    strategy: Strategy = "balanced",
    markers: MarkerStyle = "text",
    default: Callable[[Any], Any] | None = None,
    binary: BinaryMode = "marker",
    progress: Callable[[int], object] | None = None,
) -> TuneReport:
    """One call: measure *items* with a `Tuner` configured by the options."""
    return Tuner(
        budgets=budgets,
        goal_truncated=goal_truncated,
        sample=sample,
        max_items=max_items,
        max_keys=max_keys,
        max_field_bytes=max_field_bytes,
        oversized=oversized,
        strategy=strategy,
        markers=markers,
        default=default,
        binary=binary,
    ).tune(items, progress=progress)


def write_chart(report: TuneReport, path: str | os.PathLike[str]) -> None:
    """Write a PNG: the item-size histogram with one line per candidate budget.

    Needs matplotlib (the ``cli`` extra); raises `ImportError` naming the extra when it
    is missing. Uses matplotlib's object API (no pyplot global state).
    """
    try:
        from matplotlib.backends.backend_agg import FigureCanvasAgg  # noqa: PLC0415 - optional extra
        from matplotlib.figure import Figure  # noqa: PLC0415 - optional extra
    except ImportError as exc:
        raise missing_extra("cli", "matplotlib", "the chart", cause=exc) from exc
    fig = Figure(figsize=(9, 5), dpi=100)
    FigureCanvasAgg(fig)
    ax = fig.add_subplot()
    sizes = [max(1, s) for s in report.item_sizes]
    budgets = [row.max_bytes for row in report.budgets]
    top = max([*sizes, *budgets])
    low = min([*sizes, *budgets])
    edges = _log_bins(low, top)
    ax.hist(sizes, bins=edges, color="#4C72B0", edgecolor="white", label="items")
    ax.set_xscale("log", base=2)
    for row in report.budgets:
        chosen = row.max_bytes == report.recommended_max_bytes
        ax.axvline(
            row.max_bytes,
            color="#C44E52" if chosen else ("#55A868" if row.meets_goal else "#999999"),
            linestyle="-" if chosen else "--",
            linewidth=2.0 if chosen else 1.0,
            label=f"recommended {_human(row.max_bytes)}" if chosen else None,
        )
        ax.annotate(
            f"{_human(row.max_bytes)}\n{row.truncated_share:.0%}",
            xy=(row.max_bytes, 1.0),
            xycoords=("data", "axes fraction"),
            ha="center",
            va="bottom",
            fontsize=7,
        )
    ax.set_xlabel("encoded item size (bytes, log scale)")
    ax.set_ylabel("items")
    goal = f"goal: at most {report.goal_truncated:.1%} of items truncated or oversized"
    ax.set_title(f"{report.items} items measured; {goal}", pad=28, fontsize=10)
    ax.legend(loc="upper right", fontsize=8)
    fig.tight_layout()
    fig.savefig(os.fspath(path), format="png")


def _log_bins(low: int, high: int) -> list[float]:
    lo = math.floor(math.log2(low))
    hi = math.ceil(math.log2(max(high, 2))) + 1
    steps = 4  # four bins per doubling
    return [2 ** (lo + i / steps) for i in range((hi - lo) * steps + 1)]


def _human(n: int) -> str:
    if n % (1 << 20) == 0:
        return f"{n >> 20} MiB"
    if n % 1024 == 0:
        return f"{n >> 10} KiB"
    return f"{n} B"

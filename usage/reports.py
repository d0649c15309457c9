"""What a tenant used, read from the rollups (:class:`usage.models.Rollup`) only: the ledger
itself is never summed when someone asks.

A report is filtered (a time range, an agent, user, thread, model or kind) and grouped by
any of the dimensions :data:`DIMENSIONS` and by a period: ``hour`` reads the UTC-hour
rollups, ``day`` the rollups of the tenant's local days, ``none`` sums the hour rollups.
The time range ``[start_us, end_us)`` keeps each bucket that overlaps it: a bucket counts
when it begins before ``end_us`` and at or after the start of the bucket holding
``start_us``.

Each group's figures, whatever the kinds it holds:

* ``calls``: model, tool and sandbox calls (``model_calls``, ``tool_calls``,
  ``sandbox_calls`` each); ``turns``: finished turns (the ``turn`` rows);
* ``input_tokens``, ``output_tokens``, ``cached_tokens``: of the model calls;
* ``cost_micros``: the known cost of the calls, in millionths of :data:`CURRENCY`;
  ``unknown_cost_calls``: the calls without a price. When there are any the cost is
  unknown and ``cost_micros`` only a lower bound (:attr:`UsageFigures.cost_known`);
* ``cpu_ms``: CPU time of the sandbox calls.

A turn row repeats its calls' sums; it only counts turns, so nothing is counted twice.
"""

from __future__ import annotations

from collections.abc import Iterator, Sequence
from dataclasses import dataclass, field, replace
from typing import Any

from django.db.models import F, Q, QuerySet, Sum
from django.db.models.functions import Coalesce

from tenancy.models import Tenant
from usage.models import LedgerKind, Rollup, RollupPeriod
from usage.prices import micros_text
from usage.windows import day_start, hour_start

CURRENCY = "USD"

# The dimensions a report groups and filters by, and their rollup columns.
DIMENSIONS = ("agent", "user", "thread", "model", "kind")
_COLUMNS = {"agent": "agent", "user": "user", "thread": "thread_id", "model": "model",
            "kind": "kind"}  # fmt: skip
PERIODS = ("hour", "day", "none")

_CALLS = ~Q(kind=LedgerKind.TURN)
_SUMS: dict[str, tuple[str, Q]] = {
    "calls": ("calls", _CALLS),
    "model_calls": ("calls", Q(kind=LedgerKind.MODEL)),
    "tool_calls": ("calls", Q(kind=LedgerKind.TOOL)),
    "sandbox_calls": ("calls", Q(kind=LedgerKind.SANDBOX)),
    "turns": ("calls", Q(kind=LedgerKind.TURN)),
    "input_tokens": ("input_tokens", Q(kind=LedgerKind.MODEL)),
    "output_tokens": ("output_tokens", Q(kind=LedgerKind.MODEL)),
    "cached_tokens": ("cached_tokens", Q(kind=LedgerKind.MODEL)),
    "cost_micros": ("cost_micros", _CALLS),
    "unknown_cost_calls": ("unknown_cost_calls", _CALLS),
    "cpu_ms": ("cpu_ms", Q(kind=LedgerKind.SANDBOX)),
}
FIGURES = tuple(_SUMS)


@dataclass(frozen=True)
class UsageQuery:
    """What to sum: a range (µs, ``end_us`` excluded), filters (None: any; ``""``: rows
    without one) and the grouping."""

    start_us: int | None = None
    end_us: int | None = None
    agent: str | None = None
    user: str | None = None
    thread: str | None = None
    model: str | None = None
    kind: str | None = None
    group_by: tuple[str, ...] = ()
    period: str = "none"

    def __post_init__(self) -> None:
        unknown = [name for name in self.group_by if name not in DIMENSIONS]
        if unknown or len(set(self.group_by)) != len(self.group_by):
            raise ValueError(f"group_by must be distinct names of {DIMENSIONS}")
        if self.period not in PERIODS:
            raise ValueError(f"period must be one of {PERIODS}")


@dataclass(frozen=True)
class UsageFigures:
    """One group's sums (see the module docstring)."""

    calls: int = 0
    model_calls: int = 0
    tool_calls: int = 0
    sandbox_calls: int = 0
    turns: int = 0
    input_tokens: int = 0
    output_tokens: int = 0
    cached_tokens: int = 0
    cost_micros: int = 0
    unknown_cost_calls: int = 0
    cpu_ms: int = 0

    @property
    def tokens(self) -> int:
        return self.input_tokens + self.output_tokens

    @property
    def cost_known(self) -> bool:
        """False when a call had no price: ``cost_micros`` is then a lower bound."""
        return self.unknown_cost_calls == 0

    @property
    def cost(self) -> str:
        """The known cost as a decimal string in :data:`CURRENCY` (a lower bound when
        :attr:`cost_known` is false)."""
        return str(micros_text(self.cost_micros))


@dataclass(frozen=True)
class UsageGroup:
    """One row of a report: its dimensions' values (``""``: none), its period's first
    moment (µs; None without a period) and its figures."""

    keys: dict[str, str] = field(default_factory=dict)
    start: int | None = None
    figures: UsageFigures = field(default_factory=UsageFigures)


def usage_rows(*, tenant: Tenant, query: UsageQuery) -> QuerySet[Rollup]:
    """The tenant's rollup rows the query reads, before grouping."""
    period = RollupPeriod.DAY if query.period == "day" else RollupPeriod.HOUR
    rows = Rollup.objects.for_tenant(tenant).filter(period=period)
    if query.start_us is not None:
        first = (
            day_start(query.start_us, tenant.time_zone)
            if period == RollupPeriod.DAY
            else hour_start(query.start_us)
        )
        rows = rows.filter(start__gte=first)
    if query.end_us is not None:
        rows = rows.filter(start__lt=query.end_us)
    for name in DIMENSIONS:
        value = getattr(query, name)
        if value is not None:
            rows = rows.filter(**{_COLUMNS[name]: value})
    return rows


def _sums() -> dict[str, Any]:
    """The figures' aggregates, named apart from the columns they sum."""
    return {
        f"sum_{name}": Coalesce(Sum(column, filter=condition), 0)
        for name, (column, condition) in _SUMS.items()
    }


def _group(row: dict[str, Any], group_by: Sequence[str], dated: bool) -> UsageGroup:
    figures = UsageFigures(**{name: int(row[f"sum_{name}"]) for name in FIGURES})
    keys = {name: str(row[_COLUMNS[name]]) for name in group_by}
    return UsageGroup(keys=keys, start=int(row["start"]) if dated else None, figures=figures)


Key = tuple[int | str, ...]
EXPORT_CHUNK = 1000


class UsageReport:
    """The groups of a report in a stable order: by period (oldest first), then by the
    dimensions' values in ``group_by``'s order. Pages are read by position (keyset: a
    :data:`Key` names a group), so groups written while a client pages neither repeat nor
    go missing. Without any grouping the report is one group, the totals (zero when nothing
    was used)."""

    def __init__(self, *, tenant: Tenant, query: UsageQuery) -> None:
        self.query = query
        self._rows = usage_rows(tenant=tenant, query=query)
        self._dated = query.period != "none"
        self.columns = [
            *(["start"] if self._dated else []),
            *(_COLUMNS[name] for name in query.group_by),
        ]

    @property
    def grouped(self) -> bool:
        return bool(self.columns)

    def totals(self) -> UsageGroup:
        return _group(self._rows.aggregate(**_sums()), (), dated=False)

    def key(self, group: UsageGroup) -> Key:
        """Where ``group`` stands in the report's order."""
        values = [group.keys[name] for name in self.query.group_by]
        return (group.start, *values) if group.start is not None else tuple(values)

    def key_valid(self, key: Sequence[object]) -> bool:
        """Whether ``key`` could be one of this report's keys (a client sends it back)."""
        if len(key) != len(self.columns):
            return False
        for column, value in zip(self.columns, key, strict=True):
            wanted: type = int if column == "start" else str
            if type(value) is not wanted:
                return False
        return True

    def page(
        self, *, limit: int, after: Key | None = None, before: Key | None = None
    ) -> list[UsageGroup]:
        """At most ``limit`` groups: the first ones, those after ``after`` or the last ones
        before ``before``, in the report's order."""
        if not self.grouped:
            return [] if after is not None or before is not None else [self.totals()][:limit]
        rows = self._rows
        if after is not None:
            rows = rows.filter(_beyond(self.columns, after, "gt"))
        elif before is not None:
            rows = rows.filter(_beyond(self.columns, before, "lt"))
        order = [F(c).desc() if before is not None else F(c).asc() for c in self.columns]
        found = list(self._grouped(rows).order_by(*order)[:limit])
        if before is not None:
            found.reverse()
        return [_group(row, self.query.group_by, self._dated) for row in found]

    def top(self, *, limit: int) -> list[UsageGroup]:
        """The ``limit`` groups with the most tokens (then the highest known cost)."""
        most = self._grouped(self._rows).order_by(
            (F("sum_input_tokens") + F("sum_output_tokens")).desc(), "-sum_cost_micros",
            *self.columns,
        )  # fmt: skip
        return [_group(row, self.query.group_by, self._dated) for row in most[:limit]]

    def chunks(self, size: int = EXPORT_CHUNK) -> Iterator[list[UsageGroup]]:
        """Every group, ``size`` at a time (each chunk its own query, by position)."""
        after: Key | None = None
        while True:
            page = self.page(limit=size, after=after)
            if page:
                yield page
            if len(page) < size or not self.grouped:
                return
            after = self.key(page[-1])

    def _grouped(self, rows: QuerySet[Rollup]) -> QuerySet[Rollup, dict[str, Any]]:
        grouped: QuerySet[Rollup, dict[str, Any]] = rows.values(*self.columns).annotate(**_sums())
        return grouped


def _beyond(columns: Sequence[str], key: Key, lookup: str) -> Q:
    """Rows whose ``columns`` come after (``gt``) or before (``lt``) ``key`` in order."""
    condition = Q()
    for index, column in enumerate(columns):
        same = dict(zip(columns[:index], key[:index], strict=True))
        condition |= Q(**same, **{f"{column}__{lookup}": key[index]})
    return condition


def usage_report(*, tenant: Tenant, query: UsageQuery) -> UsageReport:
    """The tenant's usage as ``query`` asks (see the module docstring)."""
    return UsageReport(tenant=tenant, query=query)


def usage_totals(*, tenant: Tenant, query: UsageQuery) -> UsageFigures:
    """The figures of everything ``query`` selects, ungrouped."""
    ungrouped = replace(query, group_by=(), period="none")
    return usage_report(tenant=tenant, query=ungrouped).totals().figures

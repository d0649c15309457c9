"""The tenant's usage page: tokens and cost of its model calls per agent over time, as
stacked bar charts drawn as inline SVG, and per agent and per thread as tables, read from the
usage rollups (:mod:`usage.reports`); and its budgets with where each stands now
(:mod:`usage.budget_settings`).

Hours are UTC hours and days the tenant's local days, both shown in the tenant's time zone.
A cost is honest: when some calls had no price it is shown as a lower bound ("≥ …"), or as
"unknown" when none had one, never as a plain 0.
"""

from __future__ import annotations

import datetime as dt
import math
from collections.abc import Sequence
from dataclasses import dataclass, replace
from datetime import datetime

from django import forms
from django.http import HttpRequest, HttpResponse
from django.urls import path, reverse
from django.utils import timezone
from django.views.decorators.http import require_GET

from common.time import from_us, now_us, to_us
from console.scope import console_of, console_view
from console.views.common import page, tenant_thread
from tenancy.models import Tenant
from threads.models import Thread
from usage.budget_settings import budget_json, budget_standings
from usage.models import Budget
from usage.reports import UsageFigures, UsageGroup, UsageQuery, usage_report, usage_totals
from usage.windows import HOUR_US, hour_start, zone

RANGES = [(1, "Last 24 hours"), (7, "Last 7 days"), (30, "Last 30 days")]
TOP_THREADS = 10
MAX_AGENTS = 500
# Okabe-Ito: told apart with the common colour blindnesses; cycled past eight agents.
COLOURS = ["#0072b2", "#e69f00", "#009e73", "#cc79a7", "#56b4e9", "#d55e00", "#f0e442", "#000"]


class UsageRangeForm(forms.Form):
    days = forms.TypedChoiceField(
        label="Range", choices=RANGES, coerce=int, initial=7, required=False, empty_value=None
    )
    thread = forms.UUIDField(required=False, widget=forms.HiddenInput)


# The chart ------------------------------------------------------------------------------------

WIDTH, HEIGHT = 720, 260
LEFT, RIGHT, TOP, BOTTOM = 72, 12, 12, 48


@dataclass(frozen=True)
class Bar:
    x: float
    y: float
    width: float
    height: float
    colour: str
    agent: str
    moment: datetime
    value: str


@dataclass(frozen=True)
class Tick:
    position: float
    text: str


@dataclass(frozen=True)
class XTick:
    position: float
    moment: datetime


@dataclass(frozen=True)
class Chart:
    """A stacked bar chart of one figure per agent and bucket, laid out for inline SVG."""

    key: str
    title: str
    measure: str
    date_format: str
    x_label: str
    bars: list[Bar]
    y_ticks: list[Tick]
    x_ticks: list[XTick]
    legend: list[tuple[str, str]]
    empty: bool
    width: int = WIDTH
    height: int = HEIGHT
    left: int = LEFT
    top: int = TOP
    right: int = WIDTH - RIGHT
    bottom: int = HEIGHT - BOTTOM

    @property
    def middle_x(self) -> float:
        return (self.left + self.right) / 2

    @property
    def middle_y(self) -> float:
        return (self.top + self.bottom) / 2


def _nice_step(largest: float, steps: int = 4) -> float:
    """A round tick step (1, 2 or 5 times a power of ten) with which ``steps`` steps reach
    ``largest``."""
    if largest <= 0:
        return 1.0
    raw = largest / steps
    power = 10.0 ** math.floor(math.log10(raw))
    return next(m * power for m in (1, 2, 5, 10) if m * power >= raw)


def _count(value: float) -> str:
    return f"{round(value):,}"


def _usd(value: float) -> str:
    return f"${value:,.6g}"


def usage_chart(
    *, key: str, measure: str, rows: Sequence[UsageGroup], window: Window,
    agents: Sequence[str], cost: bool,
) -> Chart:  # fmt: skip
    """The chart of tokens (or with ``cost`` the known cost) per agent and bucket, stacked
    in the order of ``agents``."""
    colour = {agent: COLOURS[n % len(COLOURS)] for n, agent in enumerate(agents)}
    values: dict[tuple[int, str], float] = {}
    for row in rows:
        bucket = window.bucket_of(row.start)
        figure = row.figures.cost_micros / 1_000_000 if cost else row.figures.tokens
        if figure and bucket is not None:
            values[(bucket, row.keys["agent"])] = figure
    totals = [sum(v for (b, _), v in values.items() if b == n) for n in range(window.buckets)]
    step = _nice_step(max(totals, default=0.0))
    top_value = step * max(1, math.ceil(max(totals, default=0.0) / step))
    plot_h, plot_w = HEIGHT - BOTTOM - TOP, WIDTH - RIGHT - LEFT
    slot = plot_w / window.buckets

    def y_of(value: float) -> float:
        return TOP + plot_h - value / top_value * plot_h

    shown = _usd if cost else _count
    bars = []
    for bucket in range(window.buckets):
        base = 0.0
        for agent in agents:
            value = values.get((bucket, agent))
            if not value:
                continue
            bars.append(Bar(
                x=round(LEFT + bucket * slot + slot * 0.15, 2), y=round(y_of(base + value), 2),
                width=round(slot * 0.7, 2), height=round(value / top_value * plot_h, 2),
                colour=colour[agent], agent=agent, moment=window.moment(bucket),
                value=shown(value),
            ))  # fmt: skip
            base += value
    ticks = [
        Tick(position=round(y_of(step * n), 2), text=shown(step * n))
        for n in range(round(top_value / step) + 1)
    ]
    every = math.ceil(window.buckets / 8)
    x_ticks = [
        XTick(position=round(LEFT + (bucket + 0.5) * slot, 2), moment=window.moment(bucket))
        for bucket in range(0, window.buckets, every)
    ]
    unit = "hour" if window.hourly else "day"
    return Chart(
        key=key, title=f"{measure} per {unit} and agent, {dict(RANGES)[window.days].lower()}",
        measure=measure, date_format="H:i" if window.hourly else "M j",
        x_label=f"{unit.capitalize()} ({window.time_zone})", bars=bars, y_ticks=ticks,
        x_ticks=x_ticks,
        legend=[(agent, colour[agent]) for agent in agents], empty=not values,
    )  # fmt: skip


# The page -------------------------------------------------------------------------------------


@dataclass(frozen=True)
class Window:
    """The range shown: the last 24 UTC hours, or the last ``days`` local days of the
    tenant, each bucket by its first moment (µs)."""

    days: int
    time_zone: str
    starts: tuple[int, ...]

    @property
    def hourly(self) -> bool:
        return self.days == 1

    @property
    def buckets(self) -> int:
        return len(self.starts)

    @property
    def start_us(self) -> int:
        return self.starts[0]

    def moment(self, bucket: int) -> datetime:
        return from_us(self.starts[bucket])

    def bucket_of(self, start: int | None) -> int | None:
        return self.starts.index(start) if start in self.starts else None


def usage_window(*, days: int, now: int, time_zone: str) -> Window:
    """The last 24 hours by hour for one day, else the last ``days`` days of the tenant's
    time zone by day."""
    if days == 1:
        current = hour_start(now)
        return Window(days=1, time_zone=time_zone,
                      starts=tuple(current - n * HOUR_US for n in range(23, -1, -1)))  # fmt: skip
    local = zone(time_zone)
    today = from_us(now).astimezone(local).date()
    starts = tuple(
        to_us(dt.datetime.combine(today - dt.timedelta(days=n), dt.time(), tzinfo=local))
        for n in range(days - 1, -1, -1)
    )
    return Window(days=days, time_zone=time_zone, starts=starts)


@dataclass(frozen=True)
class Cells:
    """One table row's figures: model calls, tokens and the cost as it may be told."""

    calls: int
    input_tokens: int
    output_tokens: int
    tokens: int
    cost: str
    cost_note: str

    @classmethod
    def of(cls, figures: UsageFigures) -> Cells:
        unknown = figures.unknown_cost_calls
        if unknown and not figures.cost_micros:
            cost = "unknown"
        elif unknown:
            cost = f"≥ {figures.cost}"
        else:
            cost = figures.cost
        note = "" if not unknown else (
            f"{unknown} call{'s' if unknown != 1 else ''} without a price: the cost is at "
            "least this"
        )  # fmt: skip
        return cls(
            calls=figures.model_calls, input_tokens=figures.input_tokens,
            output_tokens=figures.output_tokens, tokens=figures.tokens, cost=cost,
            cost_note=note,
        )  # fmt: skip


@dataclass(frozen=True)
class AgentRow:
    agent: str
    usage: Cells


@dataclass(frozen=True)
class ThreadRow:
    thread_id: str
    agent: str
    usage: Cells


def _top_threads(tenant: Tenant, query: UsageQuery, limit: int) -> list[ThreadRow]:
    """The ``limit`` threads with the most tokens, each with its current agent."""
    report = usage_report(tenant=tenant, query=replace(query, group_by=("thread",)))
    groups = [g for g in report.top(limit=limit + 1) if g.keys["thread"]][:limit]
    rows = Thread.objects.for_tenant(tenant).filter(pk__in=[g.keys["thread"] for g in groups])
    agents = {str(pk): name for pk, name in rows.values_list("id", "agent_name")}
    return [
        ThreadRow(thread_id=g.keys["thread"], agent=agents.get(g.keys["thread"], "—"),
                  usage=Cells.of(g.figures))
        for g in groups
    ]  # fmt: skip


def _budgets(tenant: Tenant) -> list[dict[str, object]]:
    rows = list(Budget.objects.for_tenant(tenant).order_by("name"))
    standings = budget_standings(tenant=tenant, budgets=rows)
    return [budget_json(row, standings[row.pk]) for row in rows]


@require_GET
@console_view()
def usage_page(request: HttpRequest) -> HttpResponse:
    """Tokens and cost over time as charts (of the tenant, or of one thread: ``?thread=``),
    with tables per agent and of the tenant's top threads, and the tenant's budgets."""
    tenant = console_of(request).principal.tenant
    form = UsageRangeForm(request.GET or None)
    valid = form.is_valid()
    days = (form.cleaned_data["days"] if valid else None) or 7
    chosen = form.cleaned_data["thread"] if valid else None
    thread = tenant_thread(tenant, chosen) if chosen else None
    window = usage_window(days=days, now=now_us(), time_zone=tenant.time_zone)
    query = UsageQuery(start_us=window.start_us, kind="model",
                       thread=None if thread is None else str(thread.pk))  # fmt: skip
    by_agent = usage_report(tenant=tenant, query=replace(query, group_by=("agent",)))
    agents = [
        AgentRow(agent=g.keys["agent"], usage=Cells.of(g.figures))
        for g in by_agent.top(limit=MAX_AGENTS)
    ]
    names = [row.agent for row in agents]
    period = "hour" if window.hourly else "day"
    buckets = usage_report(
        tenant=tenant, query=replace(query, group_by=("agent",), period=period)
    ).page(limit=window.buckets * max(1, len(names)))
    charts = [
        usage_chart(key="tokens", measure="Tokens", rows=buckets, window=window, agents=names,
                    cost=False),
        usage_chart(key="cost", measure="Cost (USD)", rows=buckets, window=window, agents=names,
                    cost=True),
    ]  # fmt: skip
    top = [
        {"row": row, "url": reverse("console:thread", args=[row.thread_id]),
         "chart": f"{reverse('console:usage')}?days={days}&thread={row.thread_id}"}
        for row in _top_threads(tenant, query, TOP_THREADS)
    ]  # fmt: skip
    totals = usage_totals(tenant=tenant, query=query)
    with timezone.override(zone(tenant.time_zone)):
        return page(
            request, "console/playground/usage.html",
            {"nav": "usage", "form": form, "days": days, "window": window, "thread": thread,
             "since": from_us(window.start_us), "charts": charts, "agents": agents,
             "total": Cells.of(totals), "cost_partial": not totals.cost_known, "top": top,
             "budgets": _budgets(tenant)},
        )  # fmt: skip


urlpatterns = [path("usage/", usage_page, name="usage")]

"""The tenant's usage: tokens and cost of its model calls (the ``llm`` log rows the engine
writes, :mod:`threads.services.logs`) per agent over time, per agent and per thread,
summed in the database by hour (the last 24 hours) or by day (UTC).

A thread's agent is its current one (``Thread.agent_name``). A figure a provider did not
report (null in the row) is left out of the sums, never counted as 0.
"""

from __future__ import annotations

import math
import uuid
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from datetime import datetime
from typing import Any

from django import forms
from django.db.models import BigIntegerField, Count, F, FloatField, QuerySet, Sum, Value
from django.db.models.fields.json import KT
from django.db.models.functions import Cast
from django.http import HttpRequest, HttpResponse
from django.urls import path, reverse
from django.views.decorators.http import require_GET

from common.time import from_us, now_us
from console.scope import console_of, console_view
from console.views.common import page
from tenancy.models import Tenant
from threads.models import Log

HOUR_US = 3_600_000_000
DAY_US = 24 * HOUR_US
RANGES = [(1, "Last 24 hours"), (7, "Last 7 days"), (30, "Last 30 days")]
TOP_THREADS = 10
# Okabe-Ito: told apart with the common colour blindnesses; cycled past eight agents.
COLOURS = ["#0072b2", "#e69f00", "#009e73", "#cc79a7", "#56b4e9", "#d55e00", "#f0e442", "#000"]


class UsageRangeForm(forms.Form):
    days = forms.TypedChoiceField(label="Range", choices=RANGES, coerce=int, initial=7)


@dataclass(frozen=True)
class Window:
    """The range shown: ``buckets`` hours or days ending with the current one."""

    days: int
    step_us: int
    start_us: int
    buckets: int

    @property
    def hourly(self) -> bool:
        return self.step_us == HOUR_US

    def moment(self, bucket: int) -> datetime:
        return from_us(self.start_us + bucket * self.step_us)


def usage_window(*, days: int, now: int) -> Window:
    """The last 24 hours by hour for one day, else the last ``days`` days by UTC day."""
    step = HOUR_US if days == 1 else DAY_US
    buckets = 24 if days == 1 else days
    return Window(days=days, step_us=step, start_us=(now // step - buckets + 1) * step,
                  buckets=buckets)  # fmt: skip


def _figure(name: str) -> Cast:
    return Cast(KT(f"data__{name}"), FloatField())


def _model_calls(tenant: Tenant, window: Window) -> QuerySet[Log]:
    return Log.objects.for_tenant(tenant).filter(kind="llm", created_at__gte=window.start_us)


def _summed(rows: QuerySet[Log], *group: str) -> QuerySet[Log, dict[str, Any]]:
    summed: QuerySet[Log, dict[str, Any]] = (
        rows.values(*group)
        .annotate(calls=Count("id"), input_tokens=Sum(_figure("input_tokens")),
                  output_tokens=Sum(_figure("output_tokens")),
                  tokens=Sum(_figure("total_tokens")), cost=Sum(_figure("cost_usd")))
        .order_by(F("tokens").desc(nulls_last=True), *group)
    )  # fmt: skip
    return summed


@dataclass(frozen=True)
class Usage:
    """Model calls, tokens and cost of one agent, thread or bucket (None: none reported)."""

    calls: int
    input_tokens: float | None
    output_tokens: float | None
    tokens: float | None
    cost: float | None

    @classmethod
    def of(cls, row: Mapping[str, Any]) -> Usage:
        return cls(
            calls=int(row["calls"]),
            input_tokens=_number(row["input_tokens"]), output_tokens=_number(row["output_tokens"]),
            tokens=_number(row["tokens"]), cost=_number(row["cost"]),
        )  # fmt: skip


def _number(value: Any) -> float | None:
    return None if value is None else float(value)


@dataclass(frozen=True)
class AgentUsage:
    agent: str
    usage: Usage


@dataclass(frozen=True)
class ThreadUsage:
    thread_id: uuid.UUID
    agent: str
    usage: Usage


@dataclass(frozen=True)
class BucketUsage:
    bucket: int
    agent: str
    usage: Usage


def usage_by_agent(*, tenant: Tenant, window: Window) -> list[AgentUsage]:
    """Each agent's usage in the window, most tokens first."""
    rows = _summed(_model_calls(tenant, window), "thread__agent_name")
    return [AgentUsage(agent=str(row["thread__agent_name"]), usage=Usage.of(row)) for row in rows]


def usage_top_threads(*, tenant: Tenant, window: Window, limit: int) -> list[ThreadUsage]:
    """The ``limit`` threads with the most tokens in the window."""
    rows = _summed(_model_calls(tenant, window), "thread_id", "thread__agent_name")[:limit]
    return [
        ThreadUsage(thread_id=row["thread_id"], agent=str(row["thread__agent_name"]),
                    usage=Usage.of(row))
        for row in rows
    ]  # fmt: skip


def usage_by_bucket(*, tenant: Tenant, window: Window) -> list[BucketUsage]:
    """Each agent's usage per hour or day of the window (only buckets it used)."""
    start = Value(window.start_us, output_field=BigIntegerField())
    step = Value(window.step_us, output_field=BigIntegerField())
    rows = _model_calls(tenant, window).annotate(bucket=(F("created_at") - start) / step)
    return [
        BucketUsage(bucket=int(row["bucket"]), agent=str(row["thread__agent_name"]),
                    usage=Usage.of(row))
        for row in _summed(rows, "bucket", "thread__agent_name")
    ]  # fmt: skip


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
    *, key: str, measure: str, rows: Sequence[BucketUsage], window: Window,
    agents: Sequence[str], cost: bool,
) -> Chart:  # fmt: skip
    """The chart of tokens (or with ``cost`` the cost) per agent and bucket, stacked in the
    order of ``agents``."""
    colour = {agent: COLOURS[n % len(COLOURS)] for n, agent in enumerate(agents)}
    values: dict[tuple[int, str], float] = {}
    for row in rows:
        figure = row.usage.cost if cost else row.usage.tokens
        if figure:
            values[(row.bucket, row.agent)] = figure
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
        x_label=f"{unit.capitalize()} (UTC)", bars=bars, y_ticks=ticks, x_ticks=x_ticks,
        legend=[(agent, colour[agent]) for agent in agents], empty=not values,
    )  # fmt: skip


# The page -------------------------------------------------------------------------------------


def _total(rows: Sequence[AgentUsage]) -> Usage:
    def summed(figures: list[float | None]) -> float | None:
        known = [figure for figure in figures if figure is not None]
        return sum(known) if known else None

    return Usage(
        calls=sum(row.usage.calls for row in rows),
        input_tokens=summed([row.usage.input_tokens for row in rows]),
        output_tokens=summed([row.usage.output_tokens for row in rows]),
        tokens=summed([row.usage.tokens for row in rows]),
        cost=summed([row.usage.cost for row in rows]),
    )  # fmt: skip


@require_GET
@console_view()
def usage_page(request: HttpRequest) -> HttpResponse:
    """Tokens and cost over time as charts, with tables per agent and of the top threads."""
    tenant = console_of(request).principal.tenant
    form = UsageRangeForm(request.GET or None)
    days = form.cleaned_data["days"] if form.is_valid() else 7
    window = usage_window(days=days, now=now_us())
    agents = usage_by_agent(tenant=tenant, window=window)
    names = [row.agent for row in agents]
    buckets = usage_by_bucket(tenant=tenant, window=window)
    threads = usage_top_threads(tenant=tenant, window=window, limit=TOP_THREADS)
    charts = [
        usage_chart(key="tokens", measure="Tokens", rows=buckets, window=window, agents=names,
                    cost=False),
        usage_chart(key="cost", measure="Cost (USD)", rows=buckets, window=window, agents=names,
                    cost=True),
    ]  # fmt: skip
    top = [{"row": row, "url": reverse("console:thread", args=[row.thread_id])} for row in threads]
    return page(
        request, "console/playground/usage.html",
        {"nav": "usage", "form": form, "days": days, "window": window,
         "since": from_us(window.start_us), "charts": charts, "agents": agents,
         "total": _total(agents), "top": top},
    )  # fmt: skip


urlpatterns = [path("usage/", usage_page, name="usage")]

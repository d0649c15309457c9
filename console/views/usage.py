"""The tenant's usage page: tokens and cost of its model calls per agent over time, as
stacked bar charts drawn as inline SVG, and per agent and per thread as tables (the sums
are :mod:`threads.services.usage`'s)."""

from __future__ import annotations

import math
from collections.abc import Sequence
from dataclasses import dataclass
from datetime import datetime

from django import forms
from django.http import HttpRequest, HttpResponse
from django.urls import path, reverse
from django.views.decorators.http import require_GET

from common.time import from_us, now_us
from console.scope import console_of, console_view
from console.views.common import page, tenant_thread
from threads.services.usage import (
    AgentUsage,
    BucketUsage,
    Usage,
    Window,
    usage_by_agent,
    usage_by_bucket,
    usage_top_threads,
    usage_window,
)

RANGES = [(1, "Last 24 hours"), (7, "Last 7 days"), (30, "Last 30 days")]
TOP_THREADS = 10
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
    """Tokens and cost over time as charts (of the tenant, or of one thread: ``?thread=``),
    with tables per agent and of the tenant's top threads."""
    tenant = console_of(request).principal.tenant
    form = UsageRangeForm(request.GET or None)
    valid = form.is_valid()
    days = (form.cleaned_data["days"] if valid else None) or 7
    chosen = form.cleaned_data["thread"] if valid else None
    thread = tenant_thread(tenant, chosen) if chosen else None
    window = usage_window(days=days, now=now_us())
    agents = usage_by_agent(tenant=tenant, window=window, thread=thread)
    names = [row.agent for row in agents]
    buckets = usage_by_bucket(tenant=tenant, window=window, thread=thread)
    threads = usage_top_threads(tenant=tenant, window=window, limit=TOP_THREADS)
    charts = [
        usage_chart(key="tokens", measure="Tokens", rows=buckets, window=window, agents=names,
                    cost=False),
        usage_chart(key="cost", measure="Cost (USD)", rows=buckets, window=window, agents=names,
                    cost=True),
    ]  # fmt: skip
    top = [
        {"row": row, "url": reverse("console:thread", args=[row.thread_id]),
         "chart": f"{reverse('console:usage')}?days={days}&thread={row.thread_id}"}
        for row in threads
    ]  # fmt: skip
    return page(
        request, "console/playground/usage.html",
        {"nav": "usage", "form": form, "days": days, "window": window, "thread": thread,
         "since": from_us(window.start_us), "charts": charts, "agents": agents,
         "total": _total(agents), "top": top},
    )  # fmt: skip


urlpatterns = [path("usage/", usage_page, name="usage")]

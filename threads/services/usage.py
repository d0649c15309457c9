"""The tenant's usage: tokens and cost of its model calls (the ``llm`` log rows the engine
writes, :mod:`threads.services.logs`) per agent over time, per agent and per thread,
summed in the database by hour (the last 24 hours) or by day (UTC).

A thread's agent is its current one (``Thread.agent_name``). A figure a provider did not
report (null in the row) is left out of the sums, never counted as 0.
"""

from __future__ import annotations

import uuid
from collections.abc import Mapping
from dataclasses import dataclass
from datetime import datetime
from typing import Any

from django.db.models import BigIntegerField, Count, F, FloatField, QuerySet, Sum, Value
from django.db.models.fields.json import KT
from django.db.models.functions import Cast

from common.time import from_us
from tenancy.models import Tenant
from threads.models import Log, Thread

HOUR_US = 3_600_000_000
DAY_US = 24 * HOUR_US


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


def _model_calls(tenant: Tenant, window: Window, thread: Thread | None) -> QuerySet[Log]:
    rows = Log.objects.for_tenant(tenant).filter(kind="llm", created_at__gte=window.start_us)
    return rows if thread is None else rows.filter(thread_id=thread.pk)


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


def usage_by_agent(
    *, tenant: Tenant, window: Window, thread: Thread | None = None
) -> list[AgentUsage]:
    """Each agent's usage in the window (of one ``thread``'s calls, if given), most tokens
    first."""
    rows = _summed(_model_calls(tenant, window, thread), "thread__agent_name")
    return [AgentUsage(agent=str(row["thread__agent_name"]), usage=Usage.of(row)) for row in rows]


def usage_top_threads(*, tenant: Tenant, window: Window, limit: int) -> list[ThreadUsage]:
    """The ``limit`` threads with the most tokens in the window."""
    rows = _summed(_model_calls(tenant, window, None), "thread_id", "thread__agent_name")[:limit]
    return [
        ThreadUsage(thread_id=row["thread_id"], agent=str(row["thread__agent_name"]),
                    usage=Usage.of(row))
        for row in rows
    ]  # fmt: skip


def usage_by_bucket(
    *, tenant: Tenant, window: Window, thread: Thread | None = None
) -> list[BucketUsage]:
    """Each agent's usage per hour or day of the window (only buckets it used), of one
    ``thread``'s calls if given."""
    start = Value(window.start_us, output_field=BigIntegerField())
    step = Value(window.step_us, output_field=BigIntegerField())
    rows = _model_calls(tenant, window, thread).annotate(bucket=(F("created_at") - start) / step)
    return [
        BucketUsage(bucket=int(row["bucket"]), agent=str(row["thread__agent_name"]),
                    usage=Usage.of(row))
        for row in _summed(rows, "bucket", "thread__agent_name")
    ]  # fmt: skip

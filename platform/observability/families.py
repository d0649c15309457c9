"""The Prometheus metric families (each name prefixed ``agents_``), made once per process on
first use; :mod:`observability.metrics` says how they are collected and served."""

from __future__ import annotations

import functools
from dataclasses import dataclass
from typing import Final

from django.conf import settings
from prometheus_client import Counter, Gauge, Histogram

PREFIX: Final = "agents_"

# Seconds: an HTTP answer, a model call, a turn's wait and run, an event's fan-out.
HTTP_BUCKETS: Final = (0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1, 2.5, 5, 10, 30, 60)
MODEL_BUCKETS: Final = (0.1, 0.25, 0.5, 1, 2, 5, 10, 20, 30, 60, 120, 300)
TURN_BUCKETS: Final = (0.01, 0.05, 0.1, 0.25, 0.5, 1, 2.5, 5, 10, 30, 60, 120, 300, 900, 3600)
FANOUT_BUCKETS: Final = (0.001, 0.0025, 0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1, 5)


@dataclass(frozen=True)
class Families:
    """Every family (each name prefixed ``agents_``); ``tenant`` says whether the engine's
    families carry a ``tenant`` label."""

    tenant: bool
    http_requests: Counter
    http_duration: Histogram
    turns_started: Counter
    turns_finished: Counter
    turn_queue_wait: Histogram
    turn_duration: Histogram
    model_calls: Counter
    model_duration: Histogram
    model_tokens: Counter
    model_cost: Counter
    tool_calls: Counter
    sandbox_calls: Counter
    sandbox_runners: Gauge
    takeovers: Counter
    sweeper_recoveries: Counter
    webhook_deliveries: Counter
    fanout_lag: Histogram


@functools.cache
def families() -> Families:
    """The families of this process, made on first use (after settings are read)."""
    tenant = bool(settings.METRICS["tenant_label"])

    def engine(*names: str) -> tuple[str, ...]:
        return (*names, "tenant") if tenant else names

    return Families(
        tenant=tenant,
        http_requests=Counter(
            f"{PREFIX}http_requests", "HTTP requests answered, by route template, method and "
            "status", ("route", "method", "status"),
        ),
        http_duration=Histogram(
            f"{PREFIX}http_request_duration_seconds", "Time to answer an HTTP request",
            ("route", "method"), buckets=HTTP_BUCKETS,
        ),
        turns_started=Counter(
            f"{PREFIX}turns_started", "Turns a flow started (resumed: after a pause or a "
            "takeover)", engine("resumed"),
        ),
        turns_finished=Counter(
            f"{PREFIX}turns_finished", "Turns that ended, by terminal status (outcome) and "
            "stop reason", engine("outcome", "reason"),
        ),
        turn_queue_wait=Histogram(
            f"{PREFIX}turn_queue_wait_seconds", "From a turn's submission to its start",
            engine(), buckets=TURN_BUCKETS,
        ),
        turn_duration=Histogram(
            f"{PREFIX}turn_duration_seconds", "From a turn's start to its end",
            engine("outcome"), buckets=TURN_BUCKETS,
        ),
        model_calls=Counter(
            f"{PREFIX}model_calls", "Model calls, by provider, provider model id and outcome "
            "(completed, failed, aborted)", engine("provider", "model", "outcome"),
        ),
        model_duration=Histogram(
            f"{PREFIX}model_call_duration_seconds", "A model call's latency, fallbacks "
            "included", engine("provider", "model"), buckets=MODEL_BUCKETS,
        ),
        model_tokens=Counter(
            f"{PREFIX}model_tokens", "Tokens counted in the usage ledger, by kind (input, "
            "output, cached: the part of input read from the provider's cache)",
            engine("provider", "model", "kind"),
        ),
        model_cost=Counter(
            f"{PREFIX}model_cost_usd", "Model spend in USD (calls of models with prices)",
            engine("provider", "model"),
        ),
        tool_calls=Counter(
            f"{PREFIX}tool_calls", "Tool calls that ended, by outcome (the result's status)",
            engine("outcome"),
        ),
        sandbox_calls=Counter(
            f"{PREFIX}sandbox_calls", "Sandbox (run_code) executions, by result status",
            ("status",),
        ),
        sandbox_runners=Gauge(
            f"{PREFIX}sandbox_runners", "Warm sandbox runner processes, busy or idle, summed "
            "over the live processes", ("state",), multiprocess_mode="livesum",
        ),
        takeovers=Counter(
            f"{PREFIX}turn_takeovers", "Running turns a worker took over (kind: takeover, "
            "after a worker died; outage, after PostgreSQL or Redis cut a drive short)",
            engine("kind"),
        ),
        sweeper_recoveries=Counter(
            f"{PREFIX}sweeper_recoveries", "Threads the sweeper woke because their work had "
            "no live worker",
        ),
        webhook_deliveries=Counter(
            f"{PREFIX}webhook_deliveries", "Webhook delivery attempts, by the delivery's "
            "status after it", ("outcome",),
        ),
        fanout_lag=Histogram(
            f"{PREFIX}event_fanout_lag_seconds", "From an event's commit to its hand-off to "
            "the channel layer (the oldest of each batch sent)", buckets=FANOUT_BUCKETS,
        ),
    )  # fmt: skip


def tenant_labels(tenant_id: object) -> dict[str, str]:
    """The tenant label of an engine family's sample (nothing unless it is enabled)."""
    return {"tenant": str(tenant_id or "")} if families().tenant else {}

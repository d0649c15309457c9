"""Prometheus metrics: their installation, and ``/metrics`` (the families: :mod:`.families`).

One registry across processes: prometheus-client's multiprocess mode. Every process of a
host (each uvicorn worker, each Celery worker, beat) writes its samples to files in
``PROMETHEUS_MULTIPROC_DIR`` (``make run`` sets ``var/metrics`` and empties it at start), and
a scrape of any web process reads them all, so one scrape sees the worker's turns, model
calls and sandbox runners beside the web's requests. Counters and histograms of a process
that exited stay counted; its gauges (sandbox runners) are dropped when it exits
(``mark_process_dead`` at exit). Without the directory each process counts alone. A host is
one scrape target: a deployment on several hosts scrapes each.

Facts come from three doors, none of them a hook inside the engine: every committed event
(:func:`threads.broadcast.observe`, read by :mod:`observability.metrics_events`), Celery's
``task_postrun`` (the sweeper's recoveries, webhook deliveries) and the sandbox's
:func:`sandbox.executions_watch`; HTTP requests come from :mod:`observability.metrics_http`,
the Celery queue's depth is read at scrape time.

Label values are bounded: route templates, statuses, provider model ids, outcomes; never a
thread or turn id. ``METRICS_TENANT_LABEL`` adds the tenant's id to the engine's families.
"""

from __future__ import annotations

import atexit
import functools
import hmac
import logging
import os
from collections.abc import Iterator
from typing import Any, Final

from celery.signals import task_postrun
from django.conf import settings
from django.http import HttpRequest, HttpResponse, JsonResponse
from prometheus_client import (
    CONTENT_TYPE_LATEST,
    REGISTRY,
    CollectorRegistry,
    generate_latest,
    multiprocess,
)
from prometheus_client.core import GaugeMetricFamily
from prometheus_client.registry import Collector

from common.api import error_body, json_not_found
from common.redis_client import redis_client
from observability.families import PREFIX, families
from observability.metrics_events import TAKEOVER_CODES, events_observed
from sandbox import CodeExecution, CodeExecutionResult, RunnerPool, executions_watch
from threads.broadcast import observe
from threads.events.webhooks import DELIVER_TASK

logger = logging.getLogger(__name__)

SWEEP_TASK: Final = "threads.sweep_threads"
# kombu's Redis transport keeps a queue's messages of priority 3, 6 and 9 in lists of their
# own (the name, this separator, the priority); priority 0 is the plain name.
_PRIORITY_SEPARATOR: Final = "\x06\x16"
_PRIORITIES: Final = (3, 6, 9)


# Installation -------------------------------------------------------------------------------


def install() -> None:
    """Make the families and connect the doors (``ObservabilityConfig.ready``). Idempotent."""
    _install()


@functools.cache
def _install() -> None:
    found = families()
    if not found.tenant:  # known label values start at 0: rate() and alerts see them at once
        for kind in sorted(TAKEOVER_CODES):
            found.takeovers.labels(kind=kind)
    observe(events_observed)
    task_postrun.connect(_task_ran, weak=False, dispatch_uid="observability.metrics")
    executions_watch(_execution_started)
    if settings.METRICS["multiproc_dir"]:
        atexit.register(_process_exited)
    else:
        REGISTRY.register(QueueDepth())


def _process_exited() -> None:
    """Drop this process's live gauges from the shared directory."""
    multiprocess.mark_process_dead(os.getpid())  # type: ignore[no-untyped-call]


def _task_ran(*, sender: Any = None, retval: Any = None, state: str = "", **_: Any) -> None:
    """Celery ``task_postrun``: the sweeper's recoveries and webhook deliveries' outcomes."""
    name = getattr(sender, "name", "")
    if state != "SUCCESS":
        return
    if name == SWEEP_TASK and isinstance(retval, int) and retval > 0:
        families().sweeper_recoveries.inc(retval)
    elif name == DELIVER_TASK and isinstance(retval, str):
        families().webhook_deliveries.labels(outcome=retval).inc()


def _execution_started(execution: CodeExecution, pool: RunnerPool) -> None:
    """A sandbox execution started: the pool's occupancy now and when it settles."""
    _occupancy(pool)

    def settled(result: CodeExecutionResult) -> None:
        families().sandbox_calls.labels(status=result.status).inc()
        _occupancy(pool)

    execution.add_done_callback(settled)


def _occupancy(pool: RunnerPool) -> None:
    busy, idle = pool.occupancy()
    runners = families().sandbox_runners
    runners.labels(state="busy").set(busy)
    runners.labels(state="idle").set(idle)


# Scraping ----------------------------------------------------------------------------------


class QueueDepth(Collector):
    """``agents_celery_queue_depth``: messages waiting in the broker queue web processes send
    work to, read at scrape time (LLEN over its priority lists); nothing when Redis fails."""

    def collect(self) -> Iterator[GaugeMetricFamily]:
        queue = settings.CELERY_TASK_DEFAULT_QUEUE
        names = [queue, *(f"{queue}{_PRIORITY_SEPARATOR}{p}" for p in _PRIORITIES)]
        try:
            pipe = redis_client().pipeline(transaction=False)
            for name in names:
                pipe.llen(name)
            depth = sum(int(found) for found in pipe.execute())
        except Exception:
            logger.warning("metrics: reading the Celery queue's depth failed", exc_info=True)
            return
        family = GaugeMetricFamily(
            f"{PREFIX}celery_queue_depth", "Tasks waiting in the broker queue", labels=["queue"]
        )
        family.add_metric([queue], depth)
        yield family


def scrape() -> bytes:
    """The exposition text: every process of the host (multiprocess mode) or this one."""
    if not settings.METRICS["multiproc_dir"]:
        return generate_latest(REGISTRY)
    registry = CollectorRegistry()
    multiprocess.MultiProcessCollector(registry)  # type: ignore[no-untyped-call]
    registry.register(QueueDepth())
    return generate_latest(registry)


def metrics_view(request: HttpRequest) -> HttpResponse:
    """``GET /metrics``: 404 unless ``METRICS_TOKEN`` is set, then 401 without
    ``Authorization: Bearer <token>``."""
    token: str = settings.METRICS["token"]
    if not token:
        return json_not_found(request)
    if not _authorized(request.headers.get("Authorization", ""), token):
        response = JsonResponse(
            error_body(
                "not_authenticated", "/metrics needs Authorization: Bearer <METRICS_TOKEN>."
            ),
            status=401,
        )
        response["WWW-Authenticate"] = 'Bearer realm="metrics"'
        return response
    return HttpResponse(scrape(), content_type=CONTENT_TYPE_LATEST)


def _authorized(header: str, token: str) -> bool:
    scheme, _, given = header.partition(" ")
    return scheme.lower() == "bearer" and hmac.compare_digest(
        given.strip().encode(), token.encode()
    )

"""Probes: ``/healthz`` (liveness: the process answers) and ``/readyz`` (readiness: it can
reach PostgreSQL and Redis; it also reports whether beat runs).

Liveness needs nothing but the event loop, so a busy database pool or a slow dependency
never makes an orchestrator restart a process that is merely waiting; readiness is what a
load balancer should route on.

A stale beat (no heartbeat for ``beat_watch.STALE_AFTER_S``) is ``"status": "degraded"``
with the beat check failing, still a 200: this web process serves requests as well as
before, and a 503 would take every web process out of the load balancer at once, turning a
late sweep into an outage. Beat's own supervisor restarts it (``python -m
config.beat_watch`` is its liveness probe); monitoring alerts on the body.
"""

from __future__ import annotations

import functools
import time
from collections.abc import Callable
from concurrent.futures import ThreadPoolExecutor
from concurrent.futures import TimeoutError as FutureTimeout

import redis
from django.conf import settings
from django.db import connection
from django.db.utils import Error as DatabaseError
from django.http import HttpRequest, JsonResponse

from config.beat_watch import heartbeat_problem, heartbeat_read

CHECK_TIMEOUT_S = 2.0


# Checks run here so a hung dependency cannot hold the response past the deadline.
_checker = ThreadPoolExecutor(max_workers=4, thread_name_prefix="healthz")


def _check_postgres() -> str | None:
    try:
        with connection.cursor() as cursor:
            cursor.execute("SELECT 1")
    except DatabaseError as error:
        return f"{type(error).__name__}: {error}".strip()
    finally:
        connection.close()  # this worker thread's connection goes back to the pool
    return None


@functools.cache
def _redis_client(url: str) -> redis.Redis:
    """One client (and connection pool) per URL for the life of the process."""
    return redis.Redis.from_url(
        url, socket_timeout=CHECK_TIMEOUT_S, socket_connect_timeout=CHECK_TIMEOUT_S
    )


def _check_redis() -> str | None:
    try:
        _redis_client(settings.REDIS_URL).ping()
    except redis.RedisError as error:
        return f"{type(error).__name__}: {error}"
    return None


def _check_beat() -> str | None:
    try:
        beat = heartbeat_read(
            _redis_client(settings.REDIS_URL), queue=settings.CELERY_TASK_DEFAULT_QUEUE
        )
    except redis.RedisError as error:
        return f"heartbeat unreadable: {type(error).__name__}: {error}"
    return heartbeat_problem(beat)


# What readiness needs; a failing one makes /readyz a 503. The others only degrade it.
REQUIRED = ("postgres", "redis")
CHECKS: dict[str, Callable[[], str | None]] = {
    "postgres": _check_postgres, "redis": _check_redis, "beat": _check_beat,
}  # fmt: skip


def _timed(check: Callable[[], str | None]) -> tuple[str | None, float]:
    started = time.perf_counter()
    problem = check()
    return problem, round((time.perf_counter() - started) * 1000, 1)


async def healthz(request: HttpRequest) -> JsonResponse:
    """200 while the process runs its event loop: no database, no Redis, no worker thread."""
    return JsonResponse({"status": "ok"})


def readyz(request: HttpRequest) -> JsonResponse:
    """200 when PostgreSQL and Redis answer; 503 naming each one that does not. A beat
    without a fresh heartbeat makes it ``degraded``, naming beat, but not a 503.

    The checks run concurrently and the answer comes within ``CHECK_TIMEOUT_S``
    even when a dependency hangs (a load balancer must not wait on us).
    """
    checks: dict[str, dict[str, object]] = {}
    failed = []
    started = time.perf_counter()
    futures = {name: _checker.submit(_timed, check) for name, check in CHECKS.items()}
    for name, future in futures.items():
        remaining = CHECK_TIMEOUT_S - (time.perf_counter() - started)
        try:
            problem, elapsed_ms = future.result(timeout=max(remaining, 0))
        except FutureTimeout:
            problem, elapsed_ms = f"no answer within {CHECK_TIMEOUT_S:g}s", CHECK_TIMEOUT_S * 1000
        checks[name] = {"ok": problem is None, "latency_ms": elapsed_ms}
        if problem is not None:
            checks[name]["error"] = problem
            failed.append(name)
    down = [name for name in failed if name in REQUIRED]
    degraded = [name for name in failed if name not in REQUIRED]
    status = "unavailable" if down else "degraded" if degraded else "ok"
    body: dict[str, object] = {"status": status, "checks": checks}
    if failed:
        body["message"] = "; ".join(
            f"{word}: {', '.join(names)}"
            for word, names in (("unavailable", down), ("degraded", degraded))
            if names
        )
    return JsonResponse(body, status=503 if down else 200)

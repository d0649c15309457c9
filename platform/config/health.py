"""Probes: ``/healthz`` (liveness: the process answers) and ``/readyz`` (readiness: it can
reach PostgreSQL and Redis).

Liveness needs nothing but the event loop, so a busy database pool or a slow dependency
never makes an orchestrator restart a process that is merely waiting; readiness is what a
load balancer should route on.
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


def _timed(check: Callable[[], str | None]) -> tuple[str | None, float]:
    started = time.perf_counter()
    problem = check()
    return problem, round((time.perf_counter() - started) * 1000, 1)


async def healthz(request: HttpRequest) -> JsonResponse:
    """200 while the process runs its event loop: no database, no Redis, no worker thread."""
    return JsonResponse({"status": "ok"})


def readyz(request: HttpRequest) -> JsonResponse:
    """200 when every dependency answers; 503 naming each one that does not.

    Both checks run concurrently and the answer comes within ``CHECK_TIMEOUT_S``
    even when a dependency hangs (a load balancer must not wait on us).
    """
    checks: dict[str, dict[str, object]] = {}
    down = []
    started = time.perf_counter()
    futures = {
        name: _checker.submit(_timed, check)
        for name, check in (("postgres", _check_postgres), ("redis", _check_redis))
    }
    for name, future in futures.items():
        remaining = CHECK_TIMEOUT_S - (time.perf_counter() - started)
        try:
            problem, elapsed_ms = future.result(timeout=max(remaining, 0))
        except FutureTimeout:
            problem, elapsed_ms = f"no answer within {CHECK_TIMEOUT_S:g}s", CHECK_TIMEOUT_S * 1000
        checks[name] = {"ok": problem is None, "latency_ms": elapsed_ms}
        if problem is not None:
            checks[name]["error"] = problem
            down.append(name)
    body: dict[str, object] = {"status": "ok" if not down else "unavailable", "checks": checks}
    if down:
        body["message"] = f"unavailable: {', '.join(down)}"
    return JsonResponse(body, status=503 if down else 200)

"""Probes: ``/healthz`` (liveness: the process answers) and ``/readyz`` (readiness: it can
reach PostgreSQL and Redis; it also reports each role of the platform: this web process,
the workers alive, beat, and the broker queue's depth).

Liveness needs nothing but the event loop, so a busy database pool or a slow dependency
never makes an orchestrator restart a process that is merely waiting; readiness is what a
load balancer should route on.

Only PostgreSQL and Redis decide readiness (``"status": "unavailable"``, a 503). A role that
fails makes it ``"status": "degraded"``, still a 200: a stale beat (no heartbeat for
``beat_watch.STALE_AFTER_S``), or **zero live workers** (no worker record younger than
``WORKER_HEARTBEAT_TTL_S``: observability.workers). This web process serves requests as well
as before in either case: a turn posted while no worker runs is accepted (202) and waits in
the queue until one starts, and a late sweep is late, not lost. A 503 would take every web
process out of the load balancer at once, turning a missing worker into an outage. Beat's
and the workers' own supervisors restart them (``python -m config.beat_watch`` is beat's
liveness probe); monitoring alerts on the body (docs/operations.md, "Alerts").

The body (docs/operations.md, "/readyz"): ``status``, ``message`` when not ok, and
``checks``: per check ``ok``, ``status`` (``ok``, ``unavailable`` for a failing dependency,
``degraded`` for a failing role), ``latency_ms``, ``error`` when failing, and what it found:
``web`` its pid and host, ``workers`` how many are alive and which, ``beat`` the leader's pid,
host and heartbeat age and how many standbys, ``queue`` its name and depth.
"""

from __future__ import annotations

import functools
import os
import socket
import time
from collections.abc import Callable
from concurrent.futures import ThreadPoolExecutor
from concurrent.futures import TimeoutError as FutureTimeout
from typing import Any

import redis
from django.conf import settings
from django.contrib import admin
from django.core.exceptions import PermissionDenied
from django.db import connection
from django.db.utils import Error as DatabaseError
from django.http import HttpRequest, HttpResponse, JsonResponse
from django.shortcuts import render
from django.views.decorators.http import require_GET

from config.beat_watch import heartbeat_problem, heartbeat_read, standbys_read
from console.scope import console_of, console_view
from console.views.common import page
from observability.workers import workers_alive
from tenancy.models import Role

CHECK_TIMEOUT_S = 2.0

# What a check found: its problem (None: ok) and the facts it reports either way.
Finding = tuple[str | None, dict[str, Any]]

# Checks run here so a hung dependency cannot hold the response past the deadline.
_checker = ThreadPoolExecutor(max_workers=6, thread_name_prefix="healthz")


def _check_postgres() -> Finding:
    try:
        with connection.cursor() as cursor:
            cursor.execute("SELECT 1")
    except DatabaseError as error:
        return f"{type(error).__name__}: {error}".strip(), {}
    finally:
        connection.close()  # this worker thread's connection goes back to the pool
    return None, {}


@functools.cache
def _redis_client(url: str) -> redis.Redis:
    """One client (and connection pool) per URL for the life of the process."""
    return redis.Redis.from_url(
        url, socket_timeout=CHECK_TIMEOUT_S, socket_connect_timeout=CHECK_TIMEOUT_S
    )


def _redis() -> redis.Redis:
    return _redis_client(settings.REDIS_URL)


def _check_redis() -> Finding:
    try:
        _redis().ping()
    except redis.RedisError as error:
        return f"{type(error).__name__}: {error}", {}
    return None, {}


def _check_web() -> Finding:
    """This process: it answers (or the probe would not)."""
    return None, {"pid": os.getpid(), "host": socket.gethostname()}


def _check_workers() -> Finding:
    queue = settings.CELERY_TASK_DEFAULT_QUEUE
    try:
        alive = workers_alive(_redis(), queue=queue)
    except redis.RedisError as error:
        return f"heartbeats unreadable: {type(error).__name__}: {error}", {"alive": None}
    found = {"alive": len(alive), "names": [worker.name for worker in alive]}
    if not alive:
        return "no live worker: turns wait in the queue until one starts", found
    return None, found


def _check_beat() -> Finding:
    queue = settings.CELERY_TASK_DEFAULT_QUEUE
    try:
        beat = heartbeat_read(_redis(), queue=queue)
        standbys = standbys_read(_redis(), queue=queue)
    except redis.RedisError as error:
        return f"heartbeat unreadable: {type(error).__name__}: {error}", {}
    found: dict[str, Any] = {"leader": None, "standbys": standbys}
    if beat is not None:
        found["leader"] = {"pid": beat.pid, "host": beat.host,
                           "heartbeat_age_s": round(beat.age_s(), 1)}  # fmt: skip
    return heartbeat_problem(beat), found


def _check_queue() -> Finding:
    """The broker queue's depth: messages no worker has taken yet (informational; alert on
    its growth, docs/operations.md)."""
    queue = settings.CELERY_TASK_DEFAULT_QUEUE
    try:
        depth = int(_redis().llen(queue))  # type: ignore[arg-type]
    except redis.RedisError as error:
        return f"unreadable: {type(error).__name__}: {error}", {"name": queue, "depth": None}
    return None, {"name": queue, "depth": depth}


# What readiness needs; a failing one makes /readyz a 503. The others only degrade it.
REQUIRED = ("postgres", "redis")
CHECKS: dict[str, Callable[[], Finding]] = {
    "postgres": _check_postgres, "redis": _check_redis, "web": _check_web,
    "workers": _check_workers, "beat": _check_beat, "queue": _check_queue,
}  # fmt: skip


def _timed(check: Callable[[], Finding]) -> tuple[Finding, float]:
    started = time.perf_counter()
    finding = check()
    return finding, round((time.perf_counter() - started) * 1000, 1)


async def healthz(request: HttpRequest) -> JsonResponse:
    """200 while the process runs its event loop: no database, no Redis, no worker thread."""
    return JsonResponse({"status": "ok"})


def readiness() -> tuple[int, dict[str, Any]]:
    """The report of ``/readyz`` and its HTTP status (also shown in the console and the
    admin). The checks run concurrently and the answer comes within ``CHECK_TIMEOUT_S``
    even when a dependency hangs (a load balancer must not wait on us)."""
    checks: dict[str, dict[str, Any]] = {}
    failed = []
    started = time.perf_counter()
    futures = {name: _checker.submit(_timed, check) for name, check in CHECKS.items()}
    for name, future in futures.items():
        remaining = CHECK_TIMEOUT_S - (time.perf_counter() - started)
        try:
            (problem, found), elapsed_ms = future.result(timeout=max(remaining, 0))
        except FutureTimeout:
            problem, found = f"no answer within {CHECK_TIMEOUT_S:g}s", {}
            elapsed_ms = CHECK_TIMEOUT_S * 1000
        failing = "unavailable" if name in REQUIRED else "degraded"
        checks[name] = {"ok": problem is None, "status": "ok" if problem is None else failing,
                        "latency_ms": elapsed_ms}  # fmt: skip
        if problem is not None:
            checks[name]["error"] = problem
            failed.append(name)
        checks[name].update(found)
    down = [name for name in failed if name in REQUIRED]
    degraded = [name for name in failed if name not in REQUIRED]
    status = "unavailable" if down else "degraded" if degraded else "ok"
    body: dict[str, Any] = {"status": status, "checks": checks}
    if failed:
        body["message"] = "; ".join(
            f"{word}: {', '.join(names)}"
            for word, names in (("unavailable", down), ("degraded", degraded))
            if names
        )
    return (503 if down else 200), body


def readyz(request: HttpRequest) -> JsonResponse:
    """200 when PostgreSQL and Redis answer; 503 naming each one that does not. A role that
    fails (no live worker, a beat without a fresh heartbeat) makes it ``degraded``, naming
    the role, but not a 503. Every check reports what it found (the module's docstring)."""
    code, body = readiness()
    return JsonResponse(body, status=code)


def _report_context() -> dict[str, Any]:
    code, body = readiness()
    return {"report": body, "code": code, "checks": list(body["checks"].items())}


@console_view()
@require_GET
def console_health(request: HttpRequest) -> HttpResponse:
    """The console's Platform health page: the report of ``/readyz``, for a tenant's
    admins (it names the platform's hosts and processes)."""
    principal = console_of(request).principal
    if not principal.role.allows(Role.ADMIN):
        raise PermissionDenied(
            f"role {principal.role.value} may not see the platform's health; admin is required"
        )
    return page(request, "console/health.html", {"nav": "health", **_report_context()})


@require_GET
def _admin_health(request: HttpRequest) -> HttpResponse:
    context = {**admin.site.each_context(request), "title": "Platform health",
               **_report_context()}  # fmt: skip
    return render(request, "admin/health.html", context)


# The admin's Platform health page (staff only, as every admin page).
admin_health = admin.site.admin_view(_admin_health)

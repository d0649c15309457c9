"""``/healthz``: is this process able to reach PostgreSQL and Redis?"""

from __future__ import annotations

import time

import redis
from django.conf import settings
from django.db import connection
from django.db.utils import Error as DatabaseError
from django.http import HttpRequest, JsonResponse

CHECK_TIMEOUT_S = 2.0


def _check_postgres() -> str | None:
    try:
        with connection.cursor() as cursor:
            cursor.execute("SELECT 1")
    except DatabaseError as error:
        return f"{type(error).__name__}: {error}".strip()
    return None


def _check_redis() -> str | None:
    try:
        client = redis.Redis.from_url(
            settings.REDIS_URL,
            socket_timeout=CHECK_TIMEOUT_S,
            socket_connect_timeout=CHECK_TIMEOUT_S,
        )
        try:
            client.ping()
        finally:
            client.close()
    except redis.RedisError as error:
        return f"{type(error).__name__}: {error}"
    return None


def healthz(request: HttpRequest) -> JsonResponse:
    """200 when every dependency answers; 503 naming each one that does not."""
    checks: dict[str, dict[str, object]] = {}
    down = []
    for name, check in (("postgres", _check_postgres), ("redis", _check_redis)):
        started = time.perf_counter()
        problem = check()
        elapsed_ms = round((time.perf_counter() - started) * 1000, 1)
        checks[name] = {"ok": problem is None, "latency_ms": elapsed_ms}
        if problem is not None:
            checks[name]["error"] = problem
            down.append(name)
    body: dict[str, object] = {"status": "ok" if not down else "unavailable", "checks": checks}
    if down:
        body["message"] = f"unavailable: {', '.join(down)}"
    return JsonResponse(body, status=503 if down else 200)

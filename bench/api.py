"""HTTP round trips through a real uvicorn server, PostgreSQL and Redis.

Measures the fixed cost every API call pays: routing, API-key authentication
(one indexed lookup) and JSON rendering, against ``/healthz`` (one query to each
service) as a reference.
"""

from __future__ import annotations

import http.client
import socket
import subprocess
import sys
import time
from collections.abc import Iterator, Sequence
from concurrent.futures import ThreadPoolExecutor
from contextlib import contextmanager

from bench.harness import Row, benchmark, summarize
from config import env

WARMUP = 50
REQUESTS = 1000
THREADS = 4


def _free_port() -> int:
    with socket.socket() as probe:
        probe.bind(("127.0.0.1", 0))
        port: int = probe.getsockname()[1]
        return port


@contextmanager
def _server() -> Iterator[int]:
    port = _free_port()
    process = subprocess.Popen(
        [sys.executable, "-m", "uvicorn", "config.asgi:application", "--host", "127.0.0.1",
         "--port", str(port), "--lifespan", "off", "--no-access-log", "--log-level", "warning"],
        env=env.child_environment({"DJANGO_SETTINGS_MODULE": "config.settings"}),
    )  # fmt: skip
    try:
        deadline = time.monotonic() + 30
        while True:
            try:
                socket.create_connection(("127.0.0.1", port), timeout=0.2).close()
                break
            except OSError:
                if time.monotonic() > deadline or process.poll() is not None:
                    raise RuntimeError("uvicorn did not start") from None
                time.sleep(0.1)
        yield port
    finally:
        process.terminate()
        process.wait(timeout=10)


def _timed_requests(port: int, path: str, headers: dict[str, str], count: int) -> list[float]:
    connection = http.client.HTTPConnection("127.0.0.1", port, timeout=10)
    latencies = []
    try:
        for _ in range(count):
            started = time.perf_counter()
            connection.request("GET", path, headers=headers)
            response = connection.getresponse()
            response.read()
            latencies.append(time.perf_counter() - started)
            if response.status != 200:
                raise RuntimeError(f"GET {path} answered {response.status}")
    finally:
        connection.close()
    return latencies


def _case(port: int, name: str, path: str, headers: dict[str, str], threads: int) -> Row:
    _timed_requests(port, path, headers, WARMUP)
    per_thread = REQUESTS // threads
    started = time.perf_counter()
    with ThreadPoolExecutor(threads) as pool:
        chunks = list(pool.map(lambda _: _timed_requests(port, path, headers, per_thread),
                               range(threads)))  # fmt: skip
    elapsed = time.perf_counter() - started
    latencies = [value for chunk in chunks for value in chunk]
    return summarize("api", f"{name} x{threads} client(s)", latencies, elapsed)


@benchmark("api")
def api_round_trips() -> Sequence[Row]:
    import django

    django.setup()
    from django.core.management import call_command

    from tenancy.models import Role, Tenant
    from tenancy.services import api_key_create, tenant_create

    call_command("migrate", verbosity=0)
    tenant = tenant_create(slug=f"bench-{int(time.time())}")
    try:
        secret = api_key_create(tenant=tenant, name="bench", role=Role.ADMIN).secret
        auth = {"Authorization": f"Bearer {secret}"}
        with _server() as port:
            return [
                _case(port, "GET /healthz", "/healthz", {}, 1),
                _case(port, "GET /api/v1/me", "/api/v1/me", auth, 1),
                _case(port, "GET /api/v1/me", "/api/v1/me", auth, THREADS),
            ]
    finally:
        Tenant.objects.filter(id=tenant.id).delete()

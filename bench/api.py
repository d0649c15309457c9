"""HTTP round trips through a real uvicorn server, PostgreSQL and Redis.

Measures the fixed cost every API call pays: routing, API-key authentication
(one indexed lookup) and JSON rendering, against ``/healthz`` (one query to each
service) as a reference; each row also gives the server's CPU time per request (all its
processes, from ``/proc``): the floor under any route's cost.
"""

from __future__ import annotations

import http.client
import os
import time
from collections.abc import Sequence
from concurrent.futures import ThreadPoolExecutor
from dataclasses import replace

from bench.harness import Row, bench_tenant, benchmark, summarize
from bench.peers.cpu import tree_ticks
from config.launcher import background_server

WARMUP = 50
REQUESTS = 1000
THREADS = 4


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


def _case(
    server: tuple[int, int], name: str, path: str, headers: dict[str, str], threads: int
) -> Row:
    port, pid = server
    _timed_requests(port, path, headers, WARMUP)
    per_thread = REQUESTS // threads
    ticks = tree_ticks(pid)
    started = time.perf_counter()
    with ThreadPoolExecutor(threads) as pool:
        chunks = list(pool.map(lambda _: _timed_requests(port, path, headers, per_thread),
                               range(threads)))  # fmt: skip
    elapsed = time.perf_counter() - started
    latencies = [value for chunk in chunks for value in chunk]
    cpu_ms = 1000 * (tree_ticks(pid) - ticks) / os.sysconf("SC_CLK_TCK") / len(latencies)
    row = summarize("api", f"{name} x{threads} client(s)", latencies, elapsed,
                    server_cpu_ms_per_request=round(cpu_ms, 2))  # fmt: skip
    return replace(row, measured=f"server CPU {cpu_ms:.2f} ms/request")


@benchmark("api")
def api_round_trips() -> Sequence[Row]:
    with bench_tenant("bench") as tenant:
        from tenancy.models import Role
        from tenancy.services import api_key_create

        secret = api_key_create(tenant=tenant, name="bench", role=Role.ADMIN).secret
        auth = {"Authorization": f"Bearer {secret}"}
        with background_server() as server:
            return [
                _case(server, "GET /healthz", "/healthz", {}, 1),
                _case(server, "GET /api/v1/me", "/api/v1/me", auth, 1),
                _case(server, "GET /api/v1/me", "/api/v1/me", auth, THREADS),
            ]

"""No tenant can starve another through run-code, on a real uvicorn server.

Tenant A keeps 30 infinite loops at ``POST …/run-code`` in flight, firing again as soon as
one is refused. Meanwhile tenant B's ordinary calls (read a thread, list its messages, run
a small piece of code) and ``/healthz`` stay fast: p99 under 1 s, every answer a 200. A runs
``RUN_CODE_TENANT_CONCURRENCY`` calls at once; each other call is a 429 with
``Retry-After``. And a call waiting for its code holds no database connection: with more
loops running than the web process has connections, B still gets its answers.
"""

from __future__ import annotations

import http.client
import json
import math
import threading
import time
from collections.abc import Iterator, Mapping
from dataclasses import dataclass
from typing import Any

import pytest

from config.launcher import background_server
from tenancy.models import Role
from tests.factories import make_api_key, make_tenant, make_thread
from tests.support import ContextThread, current_database_url, server_warm_up
from threads.models import MessageRole
from threads.services.messages import message_inject

pytestmark = [pytest.mark.reliability, pytest.mark.django_db(transaction=True)]

A_CALLS = 30
WINDOW_S = 4.0
P99_LIMIT_S = 1.0
# Tenant A fires a refused call again after this long, ignoring Retry-After.
RETRY_S = 0.5
INFINITE_LOOP = {"source": "for (;;) {}"}
SMALL_CODE = {"source": "export default 6 * 7"}


@dataclass(frozen=True)
class Answer:
    what: str
    status: int
    elapsed_s: float
    body: Any
    retry_after: str | None


@dataclass(frozen=True)
class Tenant:
    key: str
    thread_id: str


def _call(
    port: int, what: str, method: str, path: str, key: str | None = None,
    body: Mapping[str, Any] | None = None,
) -> Answer:  # fmt: skip
    headers = {"Content-Type": "application/json"}
    if key is not None:
        headers["Authorization"] = f"Bearer {key}"
    server = http.client.HTTPConnection("127.0.0.1", port, timeout=30)
    started = time.perf_counter()
    try:
        server.request(method, path, body=None if body is None else json.dumps(body),
                       headers=headers)  # fmt: skip
        response = server.getresponse()
        content = response.read()
    finally:
        server.close()
    elapsed = time.perf_counter() - started
    return Answer(what, response.status, elapsed, json.loads(content) if content else None,
                  response.getheader("Retry-After"))  # fmt: skip


def _run_code(port: int, tenant: Tenant, body: Mapping[str, Any]) -> Answer:
    path = f"/api/v1/threads/{tenant.thread_id}/run-code"
    return _call(port, "run-code", "POST", path, tenant.key, body)


def _tenant(name: str, messages: int = 0) -> Tenant:
    tenant = make_tenant(name)
    thread = make_thread(tenant)
    for index in range(messages):
        message_inject(thread=thread, role=MessageRole.USER, content=f"message {index}")
    return Tenant(key=make_api_key(tenant, role=Role.MEMBER).secret, thread_id=str(thread.id))


def _p99(answers: list[Answer]) -> float:
    times = sorted(answer.elapsed_s for answer in answers)
    return times[max(0, math.ceil(len(times) * 0.99) - 1)]


@pytest.fixture
def server(transactional_db: None, request: pytest.FixtureRequest) -> Iterator[int]:
    overrides = getattr(request, "param", {})
    with background_server({"DATABASE_URL": current_database_url(), **overrides}) as (port, _):
        server_warm_up(port, timeout=30)
        yield port


class Flood:
    """``calls`` threads of one tenant, each posting an infinite loop to run-code and, when
    refused, again after ``pause_s`` (ignoring ``Retry-After``), until :meth:`stop`."""

    def __init__(self, port: int, tenant: Tenant, *, calls: int, pause_s: float) -> None:
        self.answers: list[Answer] = []
        self._stopping = threading.Event()
        self._start = threading.Barrier(calls)
        self._threads = [
            ContextThread(target=self._fire, args=(port, tenant, pause_s), daemon=True)
            for _ in range(calls)
        ]

    def __enter__(self) -> Flood:
        for thread in self._threads:
            thread.start()
        return self

    def __exit__(self, *_exc: object) -> None:
        self.stop()

    def stop(self) -> None:
        self._stopping.set()
        for thread in self._threads:
            thread.join(timeout=30)

    def admitted(self) -> int:
        return sum(answer.status == 200 for answer in list(self.answers))

    def _fire(self, port: int, tenant: Tenant, pause_s: float) -> None:
        self._start.wait()
        while not self._stopping.is_set():
            answer = _run_code(port, tenant, INFINITE_LOOP)
            self.answers.append(answer)
            if answer.status != 200:
                self._stopping.wait(pause_s)


def _neighbour_calls(
    port: int, tenant: Tenant, until: float, *, run_code: bool = True
) -> list[Answer]:
    """Tenant B's ordinary traffic, one call after another, until ``until``."""
    thread = f"/api/v1/threads/{tenant.thread_id}"
    answers = []
    while time.monotonic() < until:
        answers += [
            _call(port, "thread", "GET", thread, tenant.key),
            _call(port, "messages", "GET", f"{thread}/messages?limit=20", tenant.key),
            _call(port, "healthz", "GET", "/healthz"),
        ]
        if run_code:
            answers.append(_run_code(port, tenant, SMALL_CODE))
    return answers


def test_thirty_infinite_loops_from_one_tenant_leave_the_others_fast(server: int) -> None:
    noisy, neighbour = _tenant("noisy"), _tenant("neighbour", messages=5)
    warm = _run_code(server, neighbour, SMALL_CODE)  # starts the server's runner pool
    assert (warm.status, warm.body["result"]) == (200, 42)

    with Flood(server, noisy, calls=A_CALLS, pause_s=RETRY_S) as flood:
        started = time.monotonic()
        neighbour_answers: list[Answer] = []
        # Two clients of B: both read, one runs code too (B's own limit is one call at once).
        workers = [
            ContextThread(
                target=lambda runs=runs: neighbour_answers.extend(
                    _neighbour_calls(server, neighbour, until=started + WINDOW_S, run_code=runs)
                )
            )
            for runs in (True, False)
        ]
        for worker in workers:
            worker.start()
        for worker in workers:
            worker.join()
        flood.stop()

    api = [answer for answer in neighbour_answers if answer.what != "healthz"]
    health = [answer for answer in neighbour_answers if answer.what == "healthz"]
    print(
        f"\nneighbour: {len(api)} API calls, p99 {_p99(api) * 1000:.0f} ms, max "
        f"{max(a.elapsed_s for a in api) * 1000:.0f} ms; /healthz p99 {_p99(health) * 1000:.0f}"
        f" ms; noisy tenant: {len(flood.answers)} calls, {flood.admitted()} admitted"
    )
    assert {(answer.what, answer.status) for answer in neighbour_answers} == {
        ("thread", 200), ("messages", 200), ("run-code", 200), ("healthz", 200),
    }  # fmt: skip
    assert all(a.body["result"] == 42 for a in api if a.what == "run-code")
    assert _p99(api) < P99_LIMIT_S
    assert _p99(health) < P99_LIMIT_S
    assert len(api) >= 40  # the window saw real traffic

    refused = [answer for answer in flood.answers if answer.status != 200]
    assert len(flood.answers) >= A_CALLS
    assert flood.admitted() == 1  # RUN_CODE_TENANT_CONCURRENCY, and its loop outlives WINDOW_S
    assert {answer.status for answer in refused} == {429}
    assert {answer.body["error"]["code"] for answer in refused} == {"rate_limited"}
    assert all("RUN_CODE_TENANT_CONCURRENCY" in a.body["error"]["message"] for a in refused)
    assert all(a.retry_after is not None and 1 <= int(a.retry_after) <= 14 for a in refused)
    (admitted,) = [answer for answer in flood.answers if answer.status == 200]
    assert admitted.body["status"] == "terminated"
    assert 10 <= admitted.elapsed_s < 12  # the endpoint budget ended it


@pytest.mark.parametrize("server", [{"DB_POOL_SIZE": "1"}], indirect=True)
def test_code_that_runs_holds_none_of_the_web_processs_database_connections(
    server: int,
) -> None:
    """A loop runs on a web process that pools a single PostgreSQL connection: a wait that
    held it would leave every other call queueing for it (then a 500)."""
    noisy, neighbour = _tenant("noisy"), _tenant("neighbour", messages=5)

    with Flood(server, noisy, calls=1, pause_s=0.2) as flood:
        time.sleep(1.0)  # the loop is running
        answers = _neighbour_calls(server, neighbour, until=time.monotonic() + 2.0)
        flood.stop()

    assert {(answer.what, answer.status) for answer in answers} == {
        ("thread", 200), ("messages", 200), ("run-code", 200), ("healthz", 200),
    }  # fmt: skip
    assert _p99(answers) < P99_LIMIT_S
    assert [(answer.status, answer.body["status"]) for answer in flood.answers] == [
        (200, "terminated")
    ]

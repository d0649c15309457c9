"""What one run of the peers workload costs in round trips: every SQL statement, transaction
and Redis command, split between the web request and the worker's drive.

The run is ``make bench peers``' (:mod:`bench.peers.ours`: the ``count_words`` agent, a
tool call then an answer, 4 messages), made in process so each statement can be counted
where it is sent: ``POST /api/v1/threads`` with a first ``input`` through Django's test
client (the request's middleware, authentication, quotas and the thread, turn and message
writes), the turn driven by calling ``thread_drive`` here (the worker's part), then ``GET
/api/v1/turns/{id}/wait``, which finds the turn ended (the answer the one-request
``POST /threads/wait`` sends once it ends). Wake-ups the request sends to the broker go to
this bench's own queue, which no worker consumes and which is deleted afterwards.

A transaction is a ``COMMIT`` or ``ROLLBACK``, or a statement sent outside an atomic block
(PostgreSQL runs it as its own); ``BEGIN``, ``COMMIT`` and ``ROLLBACK`` are not counted as
statements. ``measured`` gives statements and transactions per run;
the notes list each side's statements by shape, most repeated first.
"""

from __future__ import annotations

import contextlib
import time
import uuid
from collections import Counter
from collections.abc import Callable, Iterator, Sequence
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any

from bench.engine import BenchError, _counting_redis, _drive_in_process, _shape
from bench.harness import Row, bench_tenant, benchmark, cpu_calibration_ms
from bench.peers.ours import BUNDLE
from bench.peers.workload import FINAL_ANSWER, INSTANT, TEXT

if TYPE_CHECKING:
    from django.test import Client

    from tenancy.models import Tenant

RUNS = 20
WARM_UP_RUNS = 5


@dataclass
class Side:
    """The round trips one side (the request, or the drive) sent, over every run."""

    statements: int = 0
    transactions: int = 0
    redis_commands: int = 0
    cpu_s: float = 0.0
    shapes: Counter[str] = field(default_factory=Counter)

    def per_run(self, runs: int) -> dict[str, object]:
        return {
            "db_statements": self.statements / runs,
            "db_transactions": self.transactions / runs,
            "redis_commands": self.redis_commands / runs,
            "cpu_ms": round(self.cpu_s * 1000 / runs, 2),
            "statements_by_shape": {
                sql: round(n / runs, 2) for sql, n in self.shapes.most_common(25)
            },
        }


@contextlib.contextmanager
def _counted(side: Side) -> Iterator[None]:
    """Counts what this thread's database connection and this process's Redis clients send
    while inside into ``side``."""
    from django.db import connection
    from django.test.utils import CaptureQueriesContext

    autocommitted = [0]

    def wrapper(execute: Callable[..., Any], sql: str, *args: Any) -> Any:
        if not connection.in_atomic_block:
            autocommitted[0] += 1
        return execute(sql, *args)

    started = time.process_time()
    with (
        _counting_redis() as redis_calls,
        CaptureQueriesContext(connection) as captured,
        connection.execute_wrapper(wrapper),
    ):
        yield
    side.cpu_s += time.process_time() - started
    side.redis_commands += redis_calls[0]
    shapes = [_shape(query["sql"]) for query in captured.captured_queries]
    side.shapes.update(shapes)
    ended = sum(shape in ("COMMIT", "ROLLBACK") for shape in shapes)
    side.statements += len(shapes) - ended - shapes.count("BEGIN")
    side.transactions += ended + autocommitted[0]


def _run(client: Client, tenant: Tenant, web: Side, worker: Side) -> None:
    """One run: the request that starts it, the drive, the wait that finds it ended."""
    from threads.models import Thread

    body = {"agent": INSTANT, "input": {"content": TEXT}}
    with _counted(web):
        created = client.post("/api/v1/threads", body, content_type="application/json")
    if created.status_code != 201:
        raise BenchError(
            f"POST /api/v1/threads answered {created.status_code}: {created.content!r}"
        )
    thread = Thread.objects.for_tenant(tenant).get(pk=created.json()["id"])
    with _counted(worker):
        _drive_in_process(thread)
    with _counted(web):
        waited = client.get(f"/api/v1/turns/{created.json()['turn']['id']}/wait?timeout=0")
    answer = waited.json()
    if not answer.get("done") or answer["messages"][-1]["content"] != FINAL_ANSWER:
        raise BenchError(f"the run did not end with the final answer: {answer}")


@contextlib.contextmanager
def _own_queue() -> Iterator[None]:
    """Wake-ups go to a queue of this bench's, deleted afterwards."""
    from kombu import Queue

    from config.celery import app

    queue, before = f"bench-run-cost-{uuid.uuid4().hex[:8]}", app.conf.task_default_queue
    app.conf.task_default_queue = queue
    try:
        yield
    finally:
        app.conf.task_default_queue = before
        with app.connection_for_write() as connection:
            Queue(queue).bind(connection.default_channel).delete()


def _client(tenant: Tenant) -> Client:
    from django.test import Client

    from tenancy.models import Role
    from tenancy.services import api_key_create

    issued = api_key_create(tenant=tenant, name="bench", role=Role.MEMBER)
    return Client(HTTP_AUTHORIZATION=f"Bearer {issued.secret}")


def measure(tenant: Tenant, runs: int) -> tuple[Side, Side]:
    from agents.bundles import bundle_import

    bundle_import(tenant=tenant, document=BUNDLE)
    client = _client(tenant)
    for _ in range(WARM_UP_RUNS):
        _run(client, tenant, Side(), Side())
    web, worker = Side(), Side()
    for _ in range(runs):
        _run(client, tenant, web, worker)
    return web, worker


def rows(web: Side, worker: Side, runs: int) -> Sequence[Row]:
    total = {
        "db_statements": (web.statements + worker.statements) / runs,
        "db_transactions": (web.transactions + worker.transactions) / runs,
        "redis_commands": (web.redis_commands + worker.redis_commands) / runs,
    }
    cpu_ms = (web.cpu_s + worker.cpu_s) * 1000 / runs
    measured = (f"{total['db_statements']:.1f} statements, {total['db_transactions']:.1f} "
                f"transactions, {total['redis_commands']:.1f} Redis commands per run "
                f"(web {web.statements / runs:.1f}/{web.transactions / runs:.1f}, worker "
                f"{worker.statements / runs:.1f}/{worker.transactions / runs:.1f})")  # fmt: skip
    return [
        Row(
            benchmark="run_cost",
            case="one peers run in process (request, drive, wait)",
            samples=runs,
            p50_ms=round(cpu_ms, 3),
            p95_ms=round(cpu_ms, 3),
            p99_ms=round(cpu_ms, 3),
            per_second=round(1000 / cpu_ms, 2) if cpu_ms else 0.0,
            notes={
                "per_run": total,
                "web": web.per_run(runs),
                "worker": worker.per_run(runs),
                "cpu_calibration_ms": cpu_calibration_ms(),
                "latency_columns": "this process's CPU ms per run (median = mean here)",
            },
            measured=measured,
        )
    ]


@benchmark("run_cost")
def run_cost() -> Sequence[Row]:
    with bench_tenant("bench-run-cost") as tenant, _own_queue():
        web, worker = measure(tenant, RUNS)
    return rows(web, worker, RUNS)

"""The execution engine under load: real PostgreSQL, Redis and Celery workers, scripted models.

Three questions, with the targets of the engine issue:

* **Overhead per step** (p50 <= 15 ms): from a user message being accepted (``message_queue``
  returned, which is when the API answers 202) to its answer being stored (the assistant row
  completed), minus the model's own time, with a zero-latency scripted model. Messages are
  sent one at a time, each once the previous flow ended, so nothing queues. Measured
  in-process (``thread_drive`` called directly: the engine alone) and through one Celery
  worker (adds the broker pickup).
* **Throughput** (>= 100 steps/s): steps one worker (threads pool) completes per second of
  wall time while many threads wait, zero-latency model; then, for comparison, two worker
  processes.
* **Fan-out** (<= 1.3x): 200 threads given one message each at once, 1 s scripted model;
  wall time until all are answered against the latency-bound ideal of 1 s.

Times come from the rows the engine writes (``Message.updated_at``, the ``llm`` and ``flow``
logs), not from polling, so how often the bench polls does not change them. The model's own
time is the log's ``time_to_first_token_ms``: a scripted model answers all at once, so its
first token is its whole answer. The log's ``latency_ms`` also spans storing the answer; the
overhead computed with it is noted as ``overhead_minus_latency_ms_p50``. Each row notes the
median of every phase: ``pickup`` (accepted -> flow started), ``before_model`` (inbox drained,
context built, pending row stored) and ``after_model`` (answer stored).

The machine's own speed drifts on shared hosts: every row notes the CPU calibration
(:func:`bench.harness.cpu_calibration_ms`) at the start and end of the run, and the engine
process's CPU per step. Compare runs at similar calibrations, or compare ratios within one
run.
"""

from __future__ import annotations

import contextlib
import itertools
import os
import statistics
import subprocess
import sys
import tempfile
import time
import uuid
from collections import Counter
from collections.abc import Callable, Iterator, Sequence
from dataclasses import dataclass, replace
from pathlib import Path
from typing import TYPE_CHECKING, Any

from bench.harness import Row, bench_tenant, benchmark, cpu_calibration_ms, summarize

if TYPE_CHECKING:
    from tenancy.models import Tenant
    from threads.models import Log, Thread

SEQUENTIAL_THREADS = 30
MESSAGES_PER_THREAD = 10  # 300 samples; each history grows to 20 messages
WARMUP_MESSAGES = 10
QUERY_SAMPLE_STEPS = 10
THROUGHPUT_THREADS = 300
THROUGHPUT_CONCURRENCY = 8
FANOUT_THREADS = 200
FANOUT_DELAY_MS = 1000
FANOUT_PROCESSES = 2  # one per core
FANOUT_CONCURRENCY = 100  # threads per process: all 200 flows in flight at once

STEP_TIMEOUT_S = 10.0
BATCH_TIMEOUT_S = 90.0
WORKER_READY_TIMEOUT_S = 60.0
WORKER_STOP_TIMEOUT_S = 15.0
DB_POOL_MAX = 30  # per worker process; the model call gives its connection back
DB_SPARE_CONNECTIONS = 15  # the bench process's pool, superusers, other sessions
LOG_TAIL_CHARS = 3000

BUNDLE: dict[str, Any] = {
    "version": 1,
    "models": [
        {"name": "instant", "provider": "scripted", "model_id": "scripted",
         "config": {"rules": [{"respond": {"text": "ok"}}]}},
        {"name": "slow", "provider": "scripted", "model_id": "scripted",
         "config": {"rules": [{"respond": {"text": "ok", "delay_ms": FANOUT_DELAY_MS}}]}},
    ],
    "prompts": [
        {"name": name, "tool_description": f"Answers ({name})", "prompt": "You answer briefly.",
         "model": name, "include_chat": True}
        for name in ("instant", "slow")
    ],
    "agents": [
        {"name": name, "type": "ai_human", "side_a": {"prompt": name}}
        for name in ("instant", "slow")
    ],
}  # fmt: skip


class BenchError(RuntimeError):
    pass


@dataclass(frozen=True)
class WorkerConfig:
    processes: int
    concurrency: int
    db_pool_size: int

    def describe(self) -> str:
        return (
            f"{self.processes} process(es) x {self.concurrency} threads (threads pool), "
            f"DB_POOL_SIZE={self.db_pool_size}"
        )


@dataclass(frozen=True)
class Step:
    """One message and its answer, as the engine recorded them (µs since the epoch)."""

    accepted_us: int
    flow_started_us: int
    model_started_us: int
    model_ms: float
    latency_ms: float  # the llm log's latency_ms: the model call and storing the answer
    answered_us: int  # the assistant row's updated_at

    @property
    def total_ms(self) -> float:
        return (self.answered_us - self.accepted_us) / 1000

    @property
    def overhead_ms(self) -> float:
        return self.total_ms - self.model_ms

    def phases_ms(self) -> dict[str, float]:
        return {
            "pickup": (self.flow_started_us - self.accepted_us) / 1000,
            "before_model": (self.model_started_us - self.flow_started_us) / 1000,
            "after_model": (self.answered_us - self.model_started_us) / 1000 - self.model_ms,
        }


# Reading what the engine wrote -----------------------------------------------------------------


def _steps(*, tenant: Tenant, accepted: dict[uuid.UUID, list[int]]) -> list[Step]:
    """The steps answering ``accepted`` (thread -> acceptance times, in order); one flow and
    one model call each. BenchError when an answer is missing or failed."""
    from threads.models import Log, MessageStatus

    logs = (
        Log.objects.for_tenant(tenant)
        .filter(thread_id__in=list(accepted), kind__in=("llm", "flow"))
        .select_related("message")
        .order_by("created_at", "id")
    )
    calls: dict[uuid.UUID, list[Log]] = {thread_id: [] for thread_id in accepted}
    flows: dict[uuid.UUID, list[Log]] = {thread_id: [] for thread_id in accepted}
    for log in logs:
        (calls if log.kind == "llm" else flows)[log.thread_id].append(log)
    steps: list[Step] = []
    for thread_id, times in accepted.items():
        if not len(times) == len(calls[thread_id]) == len(flows[thread_id]):
            raise BenchError(
                f"thread {thread_id}: {len(times)} messages, {len(flows[thread_id])} flows, "
                f"{len(calls[thread_id])} model calls; expected one of each per message"
            )
        for accepted_us, call, flow in zip(times, calls[thread_id], flows[thread_id], strict=True):
            message = call.message
            if message is None or message.status != MessageStatus.COMPLETED or call.data["error"]:
                raise BenchError(f"thread {thread_id}: a model call failed: {call.data}")
            latency = float(call.data["latency_ms"])
            first_token = call.data["time_to_first_token_ms"]
            steps.append(
                Step(
                    accepted_us=accepted_us,
                    flow_started_us=int(flow.data["started_at"]),
                    model_started_us=int(call.data["started_at"]),
                    model_ms=latency if first_token is None else float(first_token),
                    latency_ms=latency,
                    answered_us=message.updated_at,
                )
            )
    return steps


def _phase_notes(steps: Sequence[Step]) -> dict[str, float]:
    phases = [step.phases_ms() for step in steps]
    return {
        f"{name}_ms_p50": round(statistics.median(phase[name] for phase in phases), 2)
        for name in phases[0]
    } | {"model_ms_p50": round(statistics.median(step.model_ms for step in steps), 2)}


def _statuses(threads: Sequence[Thread]) -> dict[str, int]:
    from django.db.models import Count

    from threads.models import Thread

    counts = (
        Thread.objects.filter(pk__in=[thread.pk for thread in threads])
        .values("status")
        .annotate(n=Count("id"))
        .values_list("status", "n")
    )
    return dict(counts)


def _failure_detail(threads: Sequence[Thread]) -> str:
    from threads.models import Message, MessageRole

    errors = list(
        Message.objects.filter(
            thread_id__in=[thread.pk for thread in threads], role=MessageRole.SYSTEM, silent=True
        )
        .values_list("content", flat=True)
        .distinct()[:3]
    )
    return f"thread statuses {_statuses(threads)}; step errors {errors or 'none'}"


def _wait(
    done: Callable[[], bool],
    *,
    timeout_s: float,
    what: str,
    poll_s: float,
    detail: Callable[[], str],
) -> None:
    deadline = time.monotonic() + timeout_s
    while not done():
        if time.monotonic() > deadline:
            raise BenchError(f"timed out after {timeout_s:.0f} s waiting for {what}; {detail()}")
        time.sleep(poll_s)


# Sending and answering -------------------------------------------------------------------------


def _send(thread: Thread) -> int:
    """Queue a user message; returns when it was accepted (µs since the epoch)."""
    from common.time import now_us
    from threads.services.inbox import message_queue

    message_queue(thread=thread, role="user", content="hello")
    return now_us()


def _send_all(threads: Sequence[Thread]) -> int:
    """One message to each thread, committed together; returns the commit time (µs). The
    wake-ups go to the broker after the commit, one by one, as the API sends them."""
    from django.db import transaction

    from common.time import now_us
    from threads.services.inbox import message_queue

    committed: list[int] = []
    with transaction.atomic():
        transaction.on_commit(lambda: committed.append(now_us()))  # the first callback to run
        for thread in threads:
            message_queue(thread=thread, role="user", content="hello")
    return committed[0]


def _drive_in_process(thread: Thread) -> None:
    from threads.runtime.driver import thread_drive

    if not thread_drive(thread_id=thread.pk, tenant_id=thread.tenant_id).acquired:
        raise BenchError(f"thread {thread.pk}: someone else holds its lock")


class InProcess:
    """Answers by calling ``thread_drive`` here, counting the CPU time the calls take."""

    def __init__(self) -> None:
        self.cpu_s = 0.0
        self.calls = 0

    def __call__(self, thread: Thread) -> None:
        started = time.process_time()
        _drive_in_process(thread)
        self.cpu_s += time.process_time() - started
        self.calls += 1


def _await_worker(thread: Thread) -> None:
    """Until the thread's flow ended and its lock is free, so the next message starts a new
    flow instead of meeting a lock holder on its way out."""
    from threads.models import RunStatus, Thread
    from threads.services.lock import lock_is_held

    def idle() -> bool:
        status = Thread.objects.filter(pk=thread.pk).values_list("status", flat=True).get()
        if status == RunStatus.FAILED:
            raise BenchError(f"thread {thread.pk} failed: {_failure_detail([thread])}")
        return status == RunStatus.WAITING_INPUT and not lock_is_held(
            tenant_id=thread.tenant_id, thread_id=thread.pk
        )

    _wait(idle, timeout_s=STEP_TIMEOUT_S, what=f"thread {thread.pk} to be answered",
          poll_s=0.005, detail=lambda: _failure_detail([thread]))  # fmt: skip


def _warm_up(thread: Thread, answer: Callable[[Thread], None]) -> None:
    for _ in range(WARMUP_MESSAGES):
        _send(thread)
        answer(thread)


def _sequential(
    *, tenant: Tenant, threads: Sequence[Thread], answer: Callable[[Thread], None]
) -> tuple[list[Step], float]:
    """MESSAGES_PER_THREAD messages to each thread, one at a time, each answered (``answer``
    returns once it was) before the next is sent; returns the steps and the wall time."""
    accepted: dict[uuid.UUID, list[int]] = {thread.pk: [] for thread in threads}
    started = time.perf_counter()
    for _, thread in itertools.product(range(MESSAGES_PER_THREAD), threads):
        accepted[thread.pk].append(_send(thread))
        answer(thread)
    elapsed = time.perf_counter() - started
    return _steps(tenant=tenant, accepted=accepted), elapsed


def _batch(tenant: Tenant, threads: Sequence[Thread]) -> tuple[list[Step], float]:
    """One message to every thread at once; returns the steps once all are answered, and
    how long sending the wake-ups took after the commit (ms). Precondition: no other flow
    of ``tenant`` ends meanwhile (the wait counts the tenant's flow logs)."""
    from common.time import now_us
    from threads.models import Log, RunStatus, Thread

    committed_us = _send_all(threads)
    sent_ms = (now_us() - committed_us) / 1000
    flows = Log.objects.for_tenant(tenant).filter(kind="flow", created_at__gte=committed_us)
    failed = Thread.objects.for_tenant(tenant).filter(status=RunStatus.FAILED)

    def answered() -> bool:
        if failed.exists():
            raise BenchError(f"a flow failed: {_failure_detail(threads)}")
        return flows.count() >= len(threads)

    _wait(answered, timeout_s=BATCH_TIMEOUT_S, what=f"{len(threads)} threads to be answered",
          poll_s=0.1, detail=lambda: _failure_detail(threads))  # fmt: skip
    steps = _steps(tenant=tenant, accepted={thread.pk: [committed_us] for thread in threads})
    return steps, sent_ms


# Query counts ----------------------------------------------------------------------------------


def _queries_per_step(thread: Thread) -> dict[str, object]:
    """Database statements and Redis commands of one in-process ``thread_drive`` (one flow,
    one step), and the statements it repeats most."""
    from django.db import connection, reset_queries
    from django.test.utils import CaptureQueriesContext

    shapes = Counter[str]()
    statements = redis_commands = 0
    with _counting_redis() as redis_calls:
        for _ in range(QUERY_SAMPLE_STEPS):
            _send(thread)
            reset_queries()  # a full log (DEBUG) would hide new entries from the capture
            redis_before = redis_calls[0]
            with CaptureQueriesContext(connection) as captured:
                _drive_in_process(thread)
            redis_commands += redis_calls[0] - redis_before
            statements += len(captured.captured_queries)
            shapes.update(_shape(query["sql"]) for query in captured.captured_queries)
    return {
        "db_statements_per_step": statements / QUERY_SAMPLE_STEPS,
        "db_transactions_per_step": shapes["COMMIT"] / QUERY_SAMPLE_STEPS,
        "redis_commands_per_step": redis_commands / QUERY_SAMPLE_STEPS,
        "most_repeated_sql_per_step": {
            sql: n / QUERY_SAMPLE_STEPS for sql, n in shapes.most_common(6)
        },
    }


@contextlib.contextmanager
def _counting_redis() -> Iterator[list[int]]:
    """Counts the Redis commands this process sends (from any thread) while inside."""
    import redis

    original: Callable[..., Any] = redis.Redis.execute_command
    calls = [0]

    def counting(self: redis.Redis, *args: Any, **options: Any) -> Any:
        calls[0] += 1
        return original(self, *args, **options)

    redis.Redis.execute_command = counting  # type: ignore[method-assign]
    try:
        yield calls
    finally:
        redis.Redis.execute_command = original  # type: ignore[method-assign]


def _shape(sql: str) -> str:
    """A statement without its values: the part before WHERE / VALUES / SET."""
    for cut in (" WHERE ", " VALUES ", " SET "):
        sql = sql.split(cut)[0]
    if sql.startswith("SELECT"):
        sql = f"SELECT ... FROM {sql.rsplit(' FROM ', 1)[-1]}"  # noqa: S608 - a label, never run
    return sql[:100]


# CPU -------------------------------------------------------------------------------------------


class Cpu:
    """CPU time of the processes running the engine, and how busy the machine was (Linux
    ``/proc``; elsewhere the readings are None and the notes say so)."""

    def __init__(self, pids: Sequence[int]) -> None:
        self.pids = pids
        self._start = (_process_cpu_s(pids), _machine_ticks())

    def notes(self, steps: int) -> dict[str, object]:
        cpu_before, ticks_before = self._start
        cpu_after, ticks_after = _process_cpu_s(self.pids), _machine_ticks()
        notes: dict[str, object] = {"engine_cpu_ms_per_step": None, "machine_cpu_busy_pct": None}
        if cpu_before is not None and cpu_after is not None:
            notes["engine_cpu_ms_per_step"] = round((cpu_after - cpu_before) * 1000 / steps, 2)
        if ticks_before is not None and ticks_after is not None:
            busy = ticks_after[0] - ticks_before[0]
            total = ticks_after[1] - ticks_before[1]
            notes["machine_cpu_busy_pct"] = round(100 * busy / max(total, 1), 1)
        return notes


def _process_cpu_s(pids: Sequence[int]) -> float | None:
    ticks = 0
    for pid in pids:
        try:
            fields = Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()
        except (OSError, IndexError):
            return None
        ticks += int(fields[11]) + int(fields[12])  # utime + stime, all threads
    return ticks / os.sysconf("SC_CLK_TCK")


def _machine_ticks() -> tuple[int, int] | None:
    """(busy, total) clock ticks of all CPUs since boot."""
    try:
        counters = [int(value) for value in Path("/proc/stat").read_text().split()[1:9]]
    except (OSError, ValueError):
        return None
    idle = counters[3] + counters[4]  # idle + iowait
    return sum(counters) - idle, sum(counters)


# Celery workers --------------------------------------------------------------------------------


def _db_pool_size(processes: int) -> int:
    """A per-process pool that fits PostgreSQL's max_connections beside what is open now."""
    from django.db import connection

    with connection.cursor() as cursor:
        cursor.execute(
            "SELECT current_setting('max_connections')::int, count(*) FROM pg_stat_activity"
        )
        row = cursor.fetchone()
    limit, open_now = (int(row[0]), int(row[1])) if row else (100, 0)
    size = min(DB_POOL_MAX, (limit - open_now - DB_SPARE_CONNECTIONS) // processes)
    if size < 5:
        raise BenchError(
            f"PostgreSQL allows {limit} connections and {open_now} are open: too few left for "
            f"{processes} worker process(es); close other sessions or raise max_connections"
        )
    return size


def _consumers(queue: str) -> set[str]:
    """The workers (node names) consuming ``queue`` on this broker."""
    from config.celery import app

    active = app.control.inspect(timeout=1.0).active_queues() or {}
    return {node for node, queues in active.items() if any(q["name"] == queue for q in queues)}


@contextlib.contextmanager
def celery_workers(config: WorkerConfig, *, log_dir: Path) -> Iterator[list[int]]:
    """Start ``config.processes`` workers on the default queue, emptied first; yields their
    pids and stops them on exit. Refuses when other workers consume that queue: they would
    take the bench's tasks."""
    from config import env
    from config.celery import app

    queue = app.conf.task_default_queue
    others = _consumers(queue)
    if others:
        raise BenchError(
            f"other Celery workers consume the queue {queue!r} ({sorted(others)}) and would "
            "take the bench's tasks; stop them or point REDIS_URL at another Redis database"
        )
    app.control.purge()
    prefix = f"bench-{uuid.uuid4().hex[:6]}-"
    environment = env.child_environment(
        {"DJANGO_SETTINGS_MODULE": "config.settings", "PYTHONUNBUFFERED": "1",
         "DB_POOL_SIZE": str(config.db_pool_size)}
    )  # fmt: skip
    workers: list[tuple[subprocess.Popen[bytes], Path]] = []
    try:
        for index in range(config.processes):
            log = log_dir / f"{prefix}{index}.log"
            with log.open("wb") as output:
                process = subprocess.Popen(
                    [sys.executable, "-m", "celery", "-A", "config", "worker",
                     "--pool", "threads", "--concurrency", str(config.concurrency),
                     "--loglevel", "WARNING", "-n", f"{prefix}{index}@%h",
                     "--without-heartbeat", "--without-gossip", "--without-mingle"],
                    cwd=env.REPO_DIR, env=environment, stdout=output, stderr=subprocess.STDOUT,
                )  # fmt: skip
            workers.append((process, log))

        def ready() -> bool:
            _check_alive(workers, "while starting")
            replies = app.control.ping(timeout=0.5) or []
            return sum(name.startswith(prefix) for reply in replies for name in reply) == len(
                workers
            )

        _wait(ready, timeout_s=WORKER_READY_TIMEOUT_S, what="the Celery workers to answer a ping",
              poll_s=0.2, detail=lambda: "\n".join(_tail(log) for _, log in workers))  # fmt: skip
        yield [process.pid for process, _ in workers]
        _check_alive(workers, "during the run")
    finally:
        _stop(workers)


def _check_alive(workers: Sequence[tuple[subprocess.Popen[bytes], Path]], when: str) -> None:
    for process, log in workers:
        if process.poll() is not None:
            raise BenchError(
                f"a Celery worker exited with code {process.returncode} {when}:\n{_tail(log)}"
            )


def _stop(workers: Sequence[tuple[subprocess.Popen[bytes], Path]]) -> None:
    for process, _ in workers:
        if process.poll() is None:
            process.terminate()
    deadline = time.monotonic() + WORKER_STOP_TIMEOUT_S
    for process, _ in workers:
        try:
            process.wait(timeout=max(0.1, deadline - time.monotonic()))
        except subprocess.TimeoutExpired:
            process.kill()
            process.wait()


def _tail(log: Path) -> str:
    return log.read_text(errors="replace")[-LOG_TAIL_CHARS:] if log.exists() else ""


def _worker_problems(log_dir: Path) -> int:
    """How many ERROR / CRITICAL records and tracebacks the workers logged."""
    markers = ("ERROR/", "CRITICAL/", "Traceback")
    return sum(
        line.count(marker)
        for log in log_dir.glob("*.log")
        for line in log.read_text(errors="replace").splitlines()
        for marker in markers
    )


# The rows --------------------------------------------------------------------------------------


def _verdict(row: Row, text: str, *, met: bool) -> Row:
    return replace(row, measured=f"{text} ({'met' if met else 'MISSED'})")


def _overhead_row(case: str, steps: Sequence[Step], elapsed: float, **notes: object) -> Row:
    by_latency = statistics.median(step.total_ms - step.latency_ms for step in steps)
    row = summarize("engine", case, [step.overhead_ms / 1000 for step in steps], elapsed,
                    target="p50 <= 15 ms", overhead_minus_latency_ms_p50=round(by_latency, 2),
                    **_phase_notes(steps), **notes)  # fmt: skip
    return _verdict(row, f"p50 {row.p50_ms:.1f} ms", met=row.p50_ms <= 15)


def _batch_row(case: str, steps: Sequence[Step], target: str, **notes: object) -> Row:
    """Latencies: from the common commit to each answer; ops/s: answers per second of the
    wall time until the last one."""
    waits = [step.total_ms / 1000 for step in steps]
    return summarize("engine", case, waits, max(waits), target, **_phase_notes(steps), **notes)


def _run(tenant: Tenant, log_dir: Path) -> list[Row]:
    from django.conf import settings

    from threads.services.threads import thread_create

    def threads(agent: str, count: int) -> list[Thread]:
        return [thread_create(tenant=tenant, agent_name=agent) for _ in range(count)]

    load = os.getloadavg()[0]
    calibration = cpu_calibration_ms()
    rows: list[Row] = []
    local = threads("instant", SEQUENTIAL_THREADS + 2)
    _warm_up(local[0], InProcess())
    drive = InProcess()
    steps, elapsed = _sequential(tenant=tenant, threads=local[2:], answer=drive)
    rows.append(
        _overhead_row(
            f"step overhead, in-process, {SEQUENTIAL_THREADS} threads x {MESSAGES_PER_THREAD}",
            steps, elapsed, engine_cpu_ms_per_step=round(drive.cpu_s * 1000 / drive.calls, 2),
            debug=settings.DEBUG, **_queries_per_step(local[1]),
        )
    )  # fmt: skip

    one = WorkerConfig(1, THROUGHPUT_CONCURRENCY, _db_pool_size(1))
    remote = threads("instant", SEQUENTIAL_THREADS + 1)
    waiting = threads("instant", THROUGHPUT_THREADS)
    with celery_workers(one, log_dir=log_dir) as pids:
        _warm_up(remote[0], _await_worker)
        cpu = Cpu(pids)
        steps, elapsed = _sequential(tenant=tenant, threads=remote[1:], answer=_await_worker)
        rows.append(
            _overhead_row(
                f"step overhead, Celery, {SEQUENTIAL_THREADS} threads x {MESSAGES_PER_THREAD}",
                steps, elapsed, workers=one.describe(), **cpu.notes(len(steps)),
            )
        )  # fmt: skip
        cpu = Cpu(pids)
        steps, sent_ms = _batch(tenant, waiting)
        row = _batch_row(f"steps/s, {THROUGHPUT_THREADS} threads waiting", steps,
                         ">= 100 steps/s", workers=one.describe(), wakeups_sent_ms=sent_ms,
                         **cpu.notes(len(steps)))  # fmt: skip
        rows.append(_verdict(row, f"{row.per_second:.0f} steps/s", met=row.per_second >= 100))

    # For comparison (no target): a worker process runs Python under one lock, so steps per
    # second grow with processes, one per core.
    two = WorkerConfig(2, THROUGHPUT_CONCURRENCY, _db_pool_size(2))
    waiting = threads("instant", THROUGHPUT_THREADS)
    with celery_workers(two, log_dir=log_dir) as pids:
        cpu = Cpu(pids)
        steps, sent_ms = _batch(tenant, waiting)
        rows.append(
            _batch_row(f"steps/s, {THROUGHPUT_THREADS} threads waiting, 2 worker processes",
                       steps, "(comparison)", workers=two.describe(), wakeups_sent_ms=sent_ms,
                       **cpu.notes(len(steps)))
        )  # fmt: skip

    fanout = WorkerConfig(FANOUT_PROCESSES, FANOUT_CONCURRENCY, _db_pool_size(FANOUT_PROCESSES))
    slow = threads("slow", FANOUT_THREADS)
    with celery_workers(fanout, log_dir=log_dir) as pids:
        cpu = Cpu(pids)
        steps, sent_ms = _batch(tenant, slow)
        usage = cpu.notes(len(steps))
    wall = max(step.total_ms for step in steps) / 1000
    ratio = wall / (FANOUT_DELAY_MS / 1000)
    row = _batch_row(f"{FANOUT_THREADS} threads at once, {FANOUT_DELAY_MS} ms model", steps,
                     "<= 1.3x ideal (1 s)", ratio=round(ratio, 3), wall_s=round(wall, 3),
                     workers=fanout.describe(), wakeups_sent_ms=sent_ms, **usage)  # fmt: skip
    rows.append(_verdict(row, f"{ratio:.2f}x ideal", met=ratio <= 1.3))

    shared = {"worker_log_errors": _worker_problems(log_dir), "load_avg_1m_at_start": load,
              "cpu_calibration_ms_at_start": calibration,
              "cpu_calibration_ms_at_end": cpu_calibration_ms()}  # fmt: skip
    return [replace(row, notes={**row.notes, **shared}) for row in rows]


@benchmark("engine")
def engine_steps() -> Sequence[Row]:
    with bench_tenant("bench-engine") as tenant:
        from agents.bundles import bundle_import

        bundle_import(tenant=tenant, document=BUNDLE)
        with tempfile.TemporaryDirectory(prefix="bench-engine-") as log_dir:
            return _run(tenant, Path(log_dir))

"""Budgets: what the reservation costs a model call, and zero overshoot under concurrency.

* **Reservation cost**: in-process flows of one zero-latency model call each
  (``thread_drive`` called here, as the engine bench's in-process case), on a tenant without
  budgets and on a tenant with three that apply to every call (the tenant's, each agent's,
  each thread's; limits far away, so every call is reserved and committed and none halts).
  The two alternate in batches of :data:`BATCH` calls so that a drift of the machine's speed
  falls on both. Each row gives the engine process's CPU per call (``p50``: the median call),
  the PostgreSQL backends' CPU per call (``/proc``: the backends serving the bench's
  database, as ``make bench peers`` reads them; None when the server is not local) and the
  statements per call; the budgets row's ``measured`` is the difference. Without budgets a
  call still reads the tenant's budgets and writes its ledger row; the difference is the
  reservation (ensure, lock and hold the counters before the call; settle them with the
  answer).
* **Zero overshoot**: :data:`RACE_THREADS` threads given a message at once, driven on
  :data:`RACE_WORKERS` OS threads, their model taking :data:`RACE_DELAY_MS`, against a
  tenant cost cap of :data:`FITTING_CALLS` times one call's cost (policy pause). Once all
  have settled: the committed spend over the cap (at most 1; under 1 by about the last
  call's reservation, whose input is bounded by one token per byte while it costs about one
  per four characters), the reservations left (0), and whether the ledger and the counter
  agree.
"""

from __future__ import annotations

import os
import statistics
import time
from collections.abc import Iterator, Sequence
from concurrent.futures import ThreadPoolExecutor
from contextlib import ExitStack, contextmanager
from dataclasses import dataclass, field, replace
from typing import TYPE_CHECKING, Any

from bench.harness import Row, bench_tenant, benchmark, cpu_calibration_ms, summarize
from bench.peers.cpu import process_ticks, program_is

if TYPE_CHECKING:
    from tenancy.models import Tenant
    from threads.models import Thread

CALLS = 300  # per variant
BATCH = 25  # calls of one variant in a row; the variants alternate
MESSAGES_PER_THREAD = 10
WARMUP_CALLS = 20
STATEMENT_SAMPLE_CALLS = 10
FAR_AWAY = 10**9  # a limit (USD, tokens) no call reaches

RACE_THREADS = 200
RACE_WORKERS = 16
RACE_DELAY_MS = 50
FITTING_CALLS = 100
RACE_TIMEOUT_S = 120.0

PRICES = {"input_price": "1", "output_price": "4"}  # micro-units per token
BUNDLE: dict[str, Any] = {
    "version": 1,
    "models": [
        {"name": "instant", "provider": "scripted", "model_id": "scripted", **PRICES,
         "config": {"rules": [{"respond": {"text": "ok"}}]}},
        {"name": "slow", "provider": "scripted", "model_id": "scripted", **PRICES,
         "config": {"rules": [{"respond": {"text": "ok", "delay_ms": RACE_DELAY_MS}}]}},
    ],
    "prompts": [
        {"name": name, "tool_description": f"Answers ({name})", "prompt": "You answer briefly.",
         "model": name, "include_chat": True}
        for name in ("instant", "slow")
    ],
    "agents": [{"name": name, "side_a": {"prompt": name}} for name in ("instant", "slow")],
}  # fmt: skip


class BenchError(RuntimeError):
    pass


# PostgreSQL's CPU ------------------------------------------------------------------------------


class Backends:
    """CPU ticks of the PostgreSQL backends serving this process's database, asked about
    through the server's ``postgres`` database (so the asking is not counted). None when the
    backends cannot be read (another host or pid namespace)."""

    def __init__(self) -> None:
        import psycopg
        from django.db import connection

        settings_dict = connection.settings_dict
        self.database = str(settings_dict["NAME"])
        self._connection = psycopg.connect(
            host=settings_dict["HOST"] or None, port=settings_dict["PORT"] or None,
            user=settings_dict["USER"] or None, password=settings_dict["PASSWORD"] or None,
            dbname="postgres", autocommit=True,
        )  # fmt: skip

    def close(self) -> None:
        self._connection.close()

    def ticks(self) -> dict[int, int] | None:
        rows = self._connection.execute(
            "SELECT pid FROM pg_stat_activity WHERE datname = %s", (self.database,)
        ).fetchall()
        found = {}
        for (pid,) in rows:
            ticks = process_ticks(pid) if program_is(pid, ("postgres",)) else None
            if ticks is not None:
                found[pid] = ticks
        return found or None


def _spent_ticks(before: dict[int, int] | None, after: dict[int, int] | None) -> int | None:
    """Ticks spent between two readings; a backend that appeared in between counts whole."""
    if before is None or after is None:
        return None
    return sum(ticks - before.get(pid, 0) for pid, ticks in after.items())


# Calls -----------------------------------------------------------------------------------------


@dataclass
class Variant:
    """One tenant's calls: each call's engine CPU and wall time, the backends' ticks."""

    name: str
    tenant: Tenant
    threads: list[Thread]
    cpu_s: list[float] = field(default_factory=list)
    wall_s: list[float] = field(default_factory=list)
    backend_ticks: int | None = 0
    statements: float = 0.0
    made: int = 0

    def next_thread(self) -> Thread:
        thread = self.threads[self.made // MESSAGES_PER_THREAD]
        self.made += 1
        return thread


def _call(thread: Thread) -> tuple[float, float]:
    """One message and its flow (one model call), driven here: (CPU s, wall s) of the drive."""
    from threads.runtime.driver import thread_drive
    from threads.services.inbox import message_queue

    message_queue(thread=thread, role="user", content="hello", wake=False)
    cpu, wall = time.process_time(), time.perf_counter()
    if not thread_drive(thread_id=thread.pk, tenant_id=thread.tenant_id).acquired:
        raise BenchError(f"thread {thread.pk}: someone else holds its lock")
    return time.process_time() - cpu, time.perf_counter() - wall


def _batch(variant: Variant, backends: Backends, count: int) -> None:
    before = backends.ticks()
    for _ in range(count):
        cpu, wall = _call(variant.next_thread())
        variant.cpu_s.append(cpu)
        variant.wall_s.append(wall)
    spent = _spent_ticks(before, backends.ticks())
    variant.backend_ticks = (
        None if spent is None or variant.backend_ticks is None else variant.backend_ticks + spent
    )


def _statements_per_call(variant: Variant) -> float:
    from django.db import connection, reset_queries
    from django.test.utils import CaptureQueriesContext

    total = 0
    for _ in range(STATEMENT_SAMPLE_CALLS):
        reset_queries()
        with CaptureQueriesContext(connection) as captured:
            _call(variant.next_thread())
        total += len(captured.captured_queries)
    return total / STATEMENT_SAMPLE_CALLS


def _checked(variant: Variant) -> None:
    """Every call answered and, with budgets, nothing left reserved."""
    from threads.models import Turn
    from usage.models import BudgetCounter, Reservation

    turns = Turn.objects.for_tenant(variant.tenant)
    statuses = set(turns.values_list("status", flat=True))
    if statuses != {"completed"}:
        raise BenchError(f"{variant.name}: turns ended {sorted(statuses)}, not all completed")
    left = Reservation.objects.for_tenant(variant.tenant).count()
    held = BudgetCounter.objects.for_tenant(variant.tenant).exclude(reserved_micros=0).count()
    if left or held:
        raise BenchError(f"{variant.name}: {left} reservations and {held} counters left held")


def _variant_row(variant: Variant) -> Row:
    ticks_per_s = os.sysconf("SC_CLK_TCK")
    calls = len(variant.cpu_s)
    backend_ms = (
        None
        if variant.backend_ticks is None
        else round(variant.backend_ticks / ticks_per_s * 1000 / calls, 3)
    )
    return summarize(
        "budgets", f"engine CPU per model call, {variant.name}", variant.cpu_s,
        sum(variant.wall_s), engine_cpu_ms_mean=round(statistics.fmean(variant.cpu_s) * 1000, 3),
        wall_ms_p50=round(statistics.median(variant.wall_s) * 1000, 3),
        postgres_cpu_ms_per_call=backend_ms, db_statements_per_call=variant.statements,
    )  # fmt: skip


def _reservation_cost(plain: Variant, budgeted: Variant) -> list[Row]:
    backends = Backends()
    try:
        for variant in (plain, budgeted):
            for _ in range(WARMUP_CALLS):
                _call(variant.next_thread())
        for _ in range(CALLS // BATCH):
            for variant in (plain, budgeted):
                _batch(variant, backends, BATCH)
    finally:
        backends.close()
    for variant in (plain, budgeted):
        variant.statements = _statements_per_call(variant)
        _checked(variant)
    engine = (statistics.median(budgeted.cpu_s) - statistics.median(plain.cpu_s)) * 1000
    text = f"{engine:+.2f} ms engine CPU/call"
    plain_row, budgeted_row = _variant_row(plain), _variant_row(budgeted)
    plain_pg = plain_row.notes["postgres_cpu_ms_per_call"]
    budgeted_pg = budgeted_row.notes["postgres_cpu_ms_per_call"]
    if isinstance(plain_pg, float) and isinstance(budgeted_pg, float):
        text += f", {budgeted_pg - plain_pg:+.2f} ms PostgreSQL CPU/call"
    statements = budgeted.statements - plain.statements
    return [
        plain_row,
        replace(
            budgeted_row, measured=f"{text}, {statements:+.1f} statements/call",
            notes={**budgeted_row.notes, "engine_cpu_ms_p50_added": round(engine, 3)},
        ),
    ]  # fmt: skip


# Zero overshoot --------------------------------------------------------------------------------


def _race(tenant: Tenant) -> Row:
    """RACE_THREADS threads at once against a cap of about FITTING_CALLS calls."""
    from django.db import connections
    from django.db.models import Sum

    from threads.models import RunStatus, Turn
    from threads.runtime.driver import thread_drive
    from threads.services.inbox import message_queue
    from threads.services.threads import thread_create
    from usage.budget_settings import budget_create
    from usage.models import BudgetCounter, LedgerEntry, Reservation
    from usage.prices import micros_text

    probe = thread_create(tenant=tenant, agent_name="slow")
    _call(probe)
    one_call = LedgerEntry.objects.for_tenant(tenant).get(kind="model").cost_micros
    if not one_call:
        raise BenchError("the priced model's call has no cost")
    cap = budget_create(
        tenant=tenant,
        data={"name": "race", "scope": "tenant", "window": "lifetime", "policy": "pause",
              "limit_cost": micros_text(FITTING_CALLS * one_call)},
    )  # fmt: skip
    threads = [thread_create(tenant=tenant, agent_name="slow") for _ in range(RACE_THREADS)]
    for thread in threads:
        message_queue(thread=thread, role="user", content="hello", wake=False)

    def drive(thread: Thread) -> float:
        try:
            started = time.perf_counter()
            thread_drive(thread_id=thread.pk, tenant_id=tenant.pk)
            return time.perf_counter() - started
        finally:
            connections.close_all()

    started = time.perf_counter()
    with ThreadPoolExecutor(RACE_WORKERS) as pool:
        waits = list(pool.map(drive, threads, timeout=RACE_TIMEOUT_S))
    elapsed = time.perf_counter() - started

    turns = Turn.objects.for_tenant(tenant).filter(thread__in=threads)
    completed = turns.filter(status=RunStatus.COMPLETED).count()
    paused = turns.filter(status=RunStatus.WAITING_RESOURCE).count()
    if completed + paused != RACE_THREADS:
        raise BenchError(f"{RACE_THREADS - completed - paused} turns neither completed nor paused")
    entries = LedgerEntry.objects.for_tenant(tenant).filter(
        kind="model", thread_id__in=[thread.pk for thread in threads]
    )
    ledger = entries.aggregate(total=Sum("cost_micros"))["total"] or 0
    counter = BudgetCounter.objects.get(budget=cap)
    left = Reservation.objects.for_tenant(tenant).count()
    limit = cap.limit_micros or 1
    ratio = counter.spent_micros / limit
    met = counter.spent_micros <= limit and not left and counter.reserved_micros == 0
    row = summarize(
        "budgets", f"{RACE_THREADS} threads at once, cap of ~{FITTING_CALLS} calls", waits,
        elapsed, target="spend <= cap, 0 reserved", spend_cap_ratio=round(ratio, 4),
        spent_micros=counter.spent_micros, cap_micros=limit, ledger_micros=ledger,
        ledger_equals_counter=ledger == counter.spent_micros, completed=completed,
        paused=paused, reservations_left=left, reserved_micros_left=counter.reserved_micros,
        os_threads=RACE_WORKERS, model_delay_ms=RACE_DELAY_MS,
    )  # fmt: skip
    verdict = f"spend/cap {ratio:.3f}, {left} reservations left ({'met' if met else 'MISSED'})"
    return replace(row, measured=verdict)


# The benchmark ---------------------------------------------------------------------------------


@contextmanager
def _tenants(*prefixes: str) -> Iterator[list[Tenant]]:
    with ExitStack() as stack:
        yield [stack.enter_context(bench_tenant(prefix)) for prefix in prefixes]


def _threads(tenant: Tenant, count: int) -> list[Thread]:
    from threads.services.threads import thread_create

    return [thread_create(tenant=tenant, agent_name="instant") for _ in range(count)]


def _budgets_for(tenant: Tenant) -> None:
    """Three budgets that apply to every call of ``tenant``: its own, each agent's, each
    thread's."""
    from usage.budget_settings import budget_create

    for scope in ("tenant", "agent", "thread"):
        budget_create(
            tenant=tenant,
            data={"name": f"far-{scope}", "scope": scope, "window": "lifetime",
                  "limit_cost": str(FAR_AWAY), "limit_tokens": FAR_AWAY, "policy": "pause"},
        )  # fmt: skip


def _run(plain_tenant: Tenant, budgeted_tenant: Tenant, race_tenant: Tenant) -> list[Row]:
    from agents.bundles import bundle_import

    for tenant in (plain_tenant, budgeted_tenant, race_tenant):
        bundle_import(tenant=tenant, document=BUNDLE)
    _budgets_for(budgeted_tenant)
    calls = WARMUP_CALLS + CALLS + STATEMENT_SAMPLE_CALLS
    count = -(-calls // MESSAGES_PER_THREAD)
    plain = Variant("no budget", plain_tenant, _threads(plain_tenant, count))
    budgeted = Variant("3 budgets (tenant, agent, thread)", budgeted_tenant,
                       _threads(budgeted_tenant, count))  # fmt: skip
    calibration = cpu_calibration_ms()
    rows = [*_reservation_cost(plain, budgeted), _race(race_tenant)]
    shared = {"cpu_calibration_ms_at_start": calibration,
              "cpu_calibration_ms_at_end": cpu_calibration_ms(),
              "load_avg_1m": os.getloadavg()[0]}  # fmt: skip
    return [replace(row, notes={**row.notes, **shared}) for row in rows]


@benchmark("budgets")
def budgets_cost() -> Sequence[Row]:
    with _tenants("bench-budgets-none", "bench-budgets-three", "bench-budgets-race") as tenants:
        return _run(*tenants)

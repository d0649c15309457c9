"""Behind the tenant wall, the sweeper and beat's other duties still serve every tenant.

A duty spans tenants, so it runs in its own named system context (``beat:<duty>``), and
the per-row work it starts enters the row's tenant (a drive, a schedule's run, an effect,
a webhook delivery). Here every duty runs with rows of two tenants, called from a request's
empty context (``request_scope``): the test's own system context ``tests`` is not what lets
it see the rows, its own context must. The thread sweep runs as beat sends it, through a
real Celery worker that takes over two tenants' turns whose worker died.

Which context a write ran in is read back from the database connection itself, right
after the write (:class:`WriteObserver`, a Django execute wrapper): a write that passed
the wall in tenant T's context wrote a row of T (the policy's ``WITH CHECK``).
"""

from __future__ import annotations

import re
from collections.abc import Callable, Iterator, Mapping
from dataclasses import dataclass, field
from functools import partial
from pathlib import Path
from typing import Any

import pytest
from django.db import connection, transaction
from django.db.backends.signals import connection_created
from kombu import Exchange, Queue
from pytest_django.fixtures import Settings

from agents.bundles import bundle_import
from agents.registry import effect, tool, use_registry
from audit import tasks as audit_tasks
from audit.models import AuditEntry
from audit.services import DAY_US, audit_entry_create, audit_prune
from common.audit import SYSTEM
from common.duties import idle_key
from common.redis_client import redis_client
from common.tenant_wall import NoTenantContext, request_scope
from common.time import now_us
from config.celery import app
from retention import tasks as retention_tasks
from retention.models import RetentionPolicy
from retention.prune import retention_prune
from tenancy.models import Tenant
from tests.factories import make_thread
from tests.fakes.webhook_receiver import Receiver, webhook_receiver
from tests.reliability.platform import chat_bundle
from tests.retention.support import OLD, RECENT, emit, log_at, old_thread
from tests.support import current_database_url
from tests.threads.runtime.conftest import Engine, prompt
from tests.worker import (
    Worker,
    log_on_failure,
    private_queue,
    queue_delete,
    tasks_routed_to,
    wait_until,
    worker_start,
)
from threads import tasks
from threads.events.webhooks import DELIVER_TASK
from threads.models import (
    TURN_TERMINAL,
    Action,
    Event,
    Log,
    Message,
    Schedule,
    ScheduledEffect,
    Thread,
    Turn,
    WebhookDelivery,
)
from threads.runtime.driver import threads_sweep
from threads.runtime.schedules import schedule_save, schedules_fire
from threads.services.actions import actions_expire
from threads.services.effects import FIRE_TASK, effect_schedule, effects_prune, effects_sweep
from threads.services.inbox import message_queue
from threads.services.lock import lock_is_held
from threads.services.threads import thread_create
from threads.services.wakeups import SWEEP_TASK as SWEEP_THREADS
from threads.services.webhooks import endpoint_save, webhooks_sweep

CRASH_TTL_MS = 2000  # the lock TTL of the worker that dies
SLOW_MS = 4000  # a model call the worker is surely still inside when it is killed
TIMEOUT_S = 30.0
MINUTE_US = 60 * 1_000_000

# Observed writes --------------------------------------------------------------------------

OBSERVED = frozenset({
    "threads_thread", "threads_turn", "threads_message", "threads_event", "threads_log",
    "threads_schedule",
})  # fmt: skip
# Anywhere in a statement: the platform writes several tables in one, with CTEs.
_WRITE = re.compile(r'\b(INSERT\s+INTO|UPDATE|DELETE\s+FROM)\s+"?(\w+)"?', re.IGNORECASE)
_SETTINGS = "SELECT current_setting('app.tenant_id', true), current_setting('app.system', true)"
WALL_MARK = "wall-write"
_REPORTED = re.compile(rf"{WALL_MARK} (\w+) (\w+) tenant=\[(.*?)\] system=\[(.*?)\]")


@dataclass(frozen=True)
class Write:
    """A write statement on ``table`` and the context its connection had: ``tenant`` (the
    ``app.tenant_id`` setting) and ``system`` (``app.system``), ``""`` when unset."""

    verb: str
    table: str
    tenant: str
    system: str


@dataclass(eq=False)
class WriteObserver:
    """A Django execute wrapper: after each successful statement that writes a table of
    ``tables``, reads from the same database connection which context it ran with; keeps
    one :class:`Write` per table written in ``seen`` and hands each to ``report``."""

    tables: frozenset[str] = OBSERVED
    seen: list[Write] = field(default_factory=list)
    report: Callable[[Write], None] | None = None

    def __call__(
        self, execute: Callable[..., Any], sql: Any, params: Any, many: bool,
        context: Mapping[str, Any],
    ) -> Any:  # fmt: skip
        result = execute(sql, params, many, context)
        written = {
            (verb.split()[0].upper(), table)
            for verb, table in (_WRITE.findall(sql) if isinstance(sql, str) else [])
            if table in self.tables
        }
        if written:
            raw = context["connection"].connection
            tenant, system = raw.execute(_SETTINGS, prepare=False).fetchone()
            for verb, table in sorted(written):
                write = Write(verb, table, tenant or "", system or "")
                self.seen.append(write)
                if self.report is not None:
                    self.report(write)
        return result


def observe_writes() -> None:
    """Worker setup (``tests.worker --setup``): every database connection of the worker
    prints on its log the context of each write to a thread table (:func:`reported`)."""

    def report(write: Write) -> None:
        print(  # the worker's log is where the test reads it
            f"{WALL_MARK} {write.verb} {write.table} tenant=[{write.tenant}] "
            f"system=[{write.system}]",
            flush=True,
        )

    observer = WriteObserver(report=report)

    def attach(sender: Any, connection: Any, **kwargs: Any) -> None:
        if observer not in connection.execute_wrappers:
            connection.execute_wrappers.append(observer)

    connection_created.connect(attach, weak=False)


def reported(log: str) -> list[Write]:
    """The writes a worker set up with :func:`observe_writes` printed on ``log``."""
    return [Write(*found) for found in _REPORTED.findall(log)]


@pytest.fixture
def observed() -> Iterator[WriteObserver]:
    """The writes of this test's process to thread tables, with their connection's context."""
    observer = WriteObserver()
    with connection.execute_wrapper(observer):
        yield observer


# A private broker queue -------------------------------------------------------------------


@pytest.fixture
def broker_queue(settings: Settings) -> Iterator[str]:
    """A queue of this test's own for every task it sends (read back with :func:`_taken`),
    the duties' idle hints kept under its name; both removed afterwards."""
    name = private_queue()
    settings.CELERY_TASK_DEFAULT_QUEUE = name
    with tasks_routed_to(name):
        yield name
    queue_delete(name)
    redis_client().delete(idle_key(name))


def _taken(queue: str) -> list[tuple[str, list[Any]]]:
    """The tasks sent to ``queue`` (name, positional arguments), taken off it."""
    taken: list[tuple[str, list[Any]]] = []
    with app.connection_for_write() as broker:
        bound = Queue(queue, Exchange(queue), routing_key=queue)(broker.default_channel)
        while (message := bound.get(no_ack=True)) is not None:
            args, _kwargs, _embed = message.decode()
            taken.append((message.headers["task"], list(args)))
    return taken


# The thread sweep through a real worker ---------------------------------------------------


@pytest.fixture
def workers(
    django_db_setup: None, tmp_path: Path, request: pytest.FixtureRequest
) -> Iterator[tuple[Worker, Worker]]:
    """``dying``: a worker with lock TTL CRASH_TTL_MS, for the test to kill mid-turn;
    ``taker``: the worker the sweep hands the turns to, reporting its writes' contexts."""
    dying = worker_start(
        queue=private_queue(), database_url=current_database_url(),
        log_path=tmp_path / "dying.log", lock_ttl_ms=CRASH_TTL_MS,
    )  # fmt: skip
    taker = worker_start(
        queue=private_queue(), database_url=current_database_url(),
        log_path=tmp_path / "taker.log", setup=f"{__name__}:observe_writes",
    )  # fmt: skip
    try:
        for started in (dying, taker):
            started.wait_ready()
        with log_on_failure(request, dying), log_on_failure(request, taker):
            yield dying, taker
    finally:
        for started in (dying, taker):
            started.stop()


def _define(tenant: Tenant, answer: str, delay_ms: int = 0) -> None:
    """Agent ``chat`` of ``tenant``, whose scripted model answers ``answer``."""
    bundle_import(
        tenant=tenant, document=chat_bundle([{"respond": {"text": answer, "delay_ms": delay_ms}}])
    )


def _history(thread: Thread) -> list[tuple[str, str | None, str]]:
    rows = Message.objects.filter(thread=thread).order_by("seq")
    return [(row.role, row.content, row.status) for row in rows]


def _until(probe: Callable[[], Any], *, what: str, worker: Worker) -> Any:
    return wait_until(probe, what=what, worker=worker, timeout=TIMEOUT_S)


def _in_model_call(thread: Thread) -> bool:
    return Message.objects.filter(thread=thread, role="assistant", status="pending").exists()


def _lock_lapsed(thread: Thread) -> bool:
    return not lock_is_held(tenant_id=thread.tenant_id, thread_id=thread.pk)


def _ended(turn: Turn) -> Turn | None:
    row = Turn.objects.get(pk=turn.pk)
    return row if row.status in TURN_TERMINAL else None


@pytest.mark.django_db(transaction=True)
def test_the_sweep_hands_two_tenants_turns_of_a_dead_worker_to_a_live_one_acting_for_each(
    tenant: Tenant, other_tenant: Tenant, workers: tuple[Worker, Worker]
) -> None:
    """Two tenants' turns are left running by a worker killed inside their model calls.
    Once its locks lapse, ``threads.sweep_threads``, sent as beat sends it, runs on the
    other worker in its system context and finds both; that worker takes each turn over
    and finishes it, every write to the threads' tables made in the thread's own tenant
    context, none in a system context."""
    dying, taker = workers
    tenants = (tenant, other_tenant)
    threads = []
    for owner in tenants:
        _define(owner, "too late", delay_ms=SLOW_MS)
        threads.append(thread_create(tenant=owner, agent_name="chat"))
    with tasks_routed_to(dying.queue):
        for thread in threads:
            message_queue(thread=thread, role="user", content="hello")
    for thread in threads:
        _until(partial(_in_model_call, thread), what=f"{thread.pk} in its call", worker=dying)
    for owner in tenants:
        _define(owner, f"answer for {owner.slug}")
    dying.kill()
    for thread in threads:
        _until(partial(_lock_lapsed, thread), what=f"{thread.pk}'s lock to lapse", worker=taker)
    left = [Turn.objects.get(thread=thread) for thread in threads]

    app.send_task(SWEEP_THREADS, queue=taker.queue)
    ended = [_until(partial(_ended, turn), what=f"{turn.pk} to end", worker=taker) for turn in left]

    assert [turn.status for turn in left] == ["running", "running"]
    assert [(turn.status, turn.outcome) for turn in ended] == [
        ("completed", "stop_on_response")
    ] * 2
    assert [_history(thread) for thread in threads] == [
        [("user", "hello", "completed"), ("assistant", f"answer for {owner.slug}", "completed")]
        for owner in tenants
    ]
    for thread in threads:
        incidents = Log.objects.filter(thread=thread, kind="incident")
        assert [log.data["incident"] for log in incidents] == ["takeover"]
        assert f"thread {thread.pk}: taking over a turn whose worker stopped" in taker.log()
    assert "sweep-threads: woke 2 threads whose work had no live worker" in taker.log()
    writes = reported(taker.log())
    by_table = {(write.table, write.tenant) for write in writes if write.system == ""}
    assert {("threads_message", str(owner.pk)) for owner in tenants} <= by_table
    assert {("threads_turn", str(owner.pk)) for owner in tenants} <= by_table
    assert [write for write in writes if write.system or not write.tenant] == []


# Beat's other duties, in process ----------------------------------------------------------


@pytest.fixture
def engines(tenant: Tenant, other_tenant: Tenant) -> Iterator[tuple[Engine, Engine]]:
    """In-process engines of two tenants sharing a registry with a ``refund`` tool."""
    with use_registry() as scoped:

        @tool(
            description="Refund an amount.",
            args={"type": "object", "properties": {"amount": {"type": "number"}},
                  "required": ["amount"]},
        )  # fmt: skip
        def refund(state: Any, args: dict[str, Any]) -> str:
            return f"refunded {args['amount']}"

        yield Engine(tenant=tenant, registry=scoped), Engine(tenant=other_tenant, registry=scoped)


def _paused(engine: Engine) -> tuple[Thread, Action]:
    """A thread of the engine's tenant whose turn waits for the approval of a refund."""
    engine.define(
        prompts=[prompt("helper", include_past_tools=False,
                        tools=[{"name": "refund", "approval": "ask"}])],
        agents=[{"name": "helper", "side_a": {"prompt": "helper"}}],
    )  # fmt: skip
    thread = engine.thread("helper")
    engine.script.tool_calls([{"name": "refund", "arguments": {"amount": 500}, "id": "r"}])
    engine.script.text("Done.")
    engine.send(thread, "refund 500")
    engine.drive(thread)
    return thread, Action.objects.get(thread=thread)


@pytest.mark.django_db
def test_expire_actions_resolves_the_overdue_actions_of_both_tenants(
    engines: tuple[Engine, Engine], broker_queue: str
) -> None:
    """Both tenants' turns wait on an action past its deadline: ``expire_actions`` resolves
    both (denied, by expiry), and each turn then ends ``timed_out`` in its own drive."""
    paused = [_paused(engine) for engine in engines]
    Action.objects.filter(pk__in=[action.pk for _, action in paused]).update(expires_at=0)

    with request_scope():
        expired = tasks.expire_actions()
    for engine, (thread, _) in zip(engines, paused, strict=True):
        engine.drive(thread)

    assert expired == 2
    assert {action.tenant_id for _, action in paused} == {engine.tenant.pk for engine in engines}
    for thread, action in paused:
        action.refresh_from_db()
        turn = Turn.objects.get(thread=thread)
        assert (action.status, turn.status, turn.outcome) == (
            "expired", "timed_out", "action_expired",
        )  # fmt: skip
        resolved = Event.objects.get(thread=thread, type="permission.resolved").payload
        assert (resolved["decision"], resolved["by"]) == ("deny", "expiry")


def _chat_thread(tenant: Tenant) -> Thread:
    bundle_import(tenant=tenant, document=chat_bundle([{"respond": {"text": "ok"}}]))
    return thread_create(tenant=tenant, agent_name="chat")


def _thread_schedule(thread: Thread, content: str) -> Schedule:
    """An hourly schedule of the thread's tenant that queues ``content`` on ``thread``."""
    data = {"name": f"tick-{thread.pk}", "thread_id": str(thread.pk), "cron": "0 * * * *",
            "input": {"content": content}}  # fmt: skip
    return schedule_save(tenant=thread.tenant, data=data)


def _due(*schedules: Schedule) -> None:
    Schedule.objects.filter(pk__in=[row.pk for row in schedules]).update(
        next_run_at=now_us() - MINUTE_US
    )


@pytest.mark.django_db
def test_fire_schedules_runs_the_due_schedules_of_both_tenants_each_in_its_tenant(
    tenant: Tenant, other_tenant: Tenant, broker_queue: str
) -> None:
    """Each tenant's due schedule runs once: a turn of ``schedule`` source on its own
    thread, in its own tenant, and the schedule moves to its next slot."""
    threads = [_chat_thread(owner) for owner in (tenant, other_tenant)]
    schedules = [_thread_schedule(thread, f"tick for {thread.tenant.slug}") for thread in threads]
    _due(*schedules)

    with request_scope():
        fired = tasks.fire_schedules()

    assert fired == 2
    for schedule, thread in zip(schedules, threads, strict=True):
        schedule.refresh_from_db()
        turn = Turn.objects.get(thread=thread)
        assert (turn.tenant_id, turn.source) == (thread.tenant_id, "schedule")
        assert turn.payload["content"] == f"tick for {thread.tenant.slug}"
        assert turn.payload["metadata"]["schedule_id"] == str(schedule.pk)
        assert (schedule.runs, schedule.last_run) == (
            1, {"thread_id": str(thread.pk), "turn_id": str(turn.pk)},
        )  # fmt: skip
        assert schedule.next_run_at > now_us()


@pytest.fixture
def pinged() -> Iterator[list[str]]:
    """A registry effect ``ping`` that writes a system message; the thread ids it ran on."""
    ran: list[str] = []
    with use_registry():

        @effect(description="Pings.")
        def ping(state: Any) -> None:
            ran.append(state.thread_id)
            state.inject_message(role="system", content="ping")

        yield ran


@pytest.mark.django_db
def test_sweep_effects_sends_both_tenants_lost_effects_and_each_fires_in_its_tenant(
    tenant: Tenant, other_tenant: Tenant, pinged: list[str], broker_queue: str,
    settings: Settings,
) -> None:  # fmt: skip
    """Their deliveries were lost: the sweep sends both, and each ``fire_effect`` runs in
    the effect's tenant, writing its message there."""
    threads = [make_thread(owner) for owner in (tenant, other_tenant)]
    effects = [effect_schedule(thread=thread, name="ping", delay_ms=100) for thread in threads]
    lost_at = now_us() - int((settings.EFFECT_SWEEP_GRACE_S + 60) * 1_000_000)
    ScheduledEffect.objects.filter(pk__in=[row.pk for row in effects]).update(scheduled_at=lost_at)

    with request_scope():
        sent = tasks.sweep_effects()
    deliveries = _taken(broker_queue)
    with request_scope():
        outcomes = [tasks.fire_effect(*args) for _, args in deliveries]

    assert sent == 2
    assert sorted(deliveries) == sorted((FIRE_TASK, [str(row.pk)]) for row in effects)
    assert outcomes == ["completed", "completed"]
    assert sorted(pinged) == sorted(str(thread.pk) for thread in threads)
    for thread in threads:
        message = Message.objects.get(thread=thread, content="ping")
        assert message.tenant_id == thread.tenant_id
    statuses = ScheduledEffect.objects.filter(pk__in=[row.pk for row in effects])
    assert list(statuses.values_list("status", flat=True)) == ["completed", "completed"]


@pytest.fixture
def receiver(settings: Settings) -> Iterator[Receiver]:
    settings.WEBHOOK_ALLOW_HTTP = True
    settings.WEBHOOK_CACHE_S = 0.0
    with webhook_receiver() as state:
        yield state


@pytest.mark.django_db
def test_sweep_webhooks_resends_both_tenants_lost_deliveries_each_delivered_in_its_tenant(
    tenant: Tenant, other_tenant: Tenant, receiver: Receiver, broker_queue: str,
    settings: Settings,
) -> None:  # fmt: skip
    """Of each tenant, a delivery whose message was lost and one whose worker died mid
    attempt (its lease ran out): the sweep re-sends all four, and each ``deliver_webhook``
    acts for its delivery's tenant and delivers it."""
    now = now_us()
    lost_at = now - int((settings.EFFECT_SWEEP_GRACE_S + 60) * 1_000_000)
    deliveries = []
    for owner in (tenant, other_tenant):
        endpoint, _secret = endpoint_save(
            tenant=owner, data={"url": receiver.url, "event_types": ["thread.status"]}
        )
        for status, fields in (
            ("pending", {"next_attempt_at": lost_at}),
            ("sending", {"next_attempt_at": lost_at, "lease_until": now - 1_000_000,
                         "attempts": 1}),
        ):  # fmt: skip
            deliveries.append(WebhookDelivery.objects.create(
                tenant=owner, endpoint=endpoint, event_type="thread.status",
                payload={"tenant": owner.slug}, status=status, **fields,
            ))  # fmt: skip

    with request_scope():
        resent = tasks.sweep_webhooks()
    sent = _taken(broker_queue)
    with request_scope():
        outcomes = [tasks.deliver_webhook(*args) for _, args in sent]

    ids = sorted(str(row.pk) for row in deliveries)
    assert resent == 4
    assert sorted(sent) == [(DELIVER_TASK, [delivery_id]) for delivery_id in ids]
    assert outcomes == ["delivered"] * 4
    assert sorted(receiver.ids) == ids
    stored = WebhookDelivery.objects.filter(pk__in=ids)
    assert sorted(stored.values_list("status", flat=True)) == ["delivered"] * 4


@pytest.mark.django_db
def test_retention_prune_deletes_both_tenants_history_past_their_policies(
    tenant: Tenant, other_tenant: Tenant
) -> None:
    """Each tenant's one-day policy: its old events and logs go, its recent ones stay."""
    threads = []
    for owner in (tenant, other_tenant):
        RetentionPolicy.objects.create(tenant=owner, events_days=1, logs_days=1)
        thread = old_thread(owner)
        old_events, recent_events = emit(thread, 2, at=OLD), emit(thread, 1, at=RECENT)
        logged = old_thread(owner)
        old_log, recent_log = log_at(logged, OLD), log_at(logged, RECENT)
        threads.append((thread, recent_events, logged, old_log, recent_log))
        assert old_events == [1, 2]

    with request_scope():
        deleted = retention_tasks.prune()

    assert deleted >= 4  # each tenant's two old events and its old log (and its event)
    for thread, recent_events, logged, old_log, recent_log in threads:
        kept = list(Event.objects.filter(thread=thread).values_list("sequence", flat=True))
        assert kept == recent_events == [3]
        assert list(Log.objects.filter(thread=logged)) == [recent_log]
        assert not Log.objects.filter(pk=old_log.pk).exists()


@pytest.mark.django_db
def test_audit_prune_deletes_both_tenants_entries_past_retention(
    tenant: Tenant, other_tenant: Tenant, settings: Settings
) -> None:
    """Each tenant's audit entry older than the retention goes, its recent one stays."""
    settings.RETENTION_AUDIT_DAYS = 30
    for owner in (tenant, other_tenant):
        for target in ("old", "recent"):
            with transaction.atomic():
                audit_entry_create(
                    tenant=owner, actor=SYSTEM, action="thread.deleted", target_type="thread",
                    target_id=f"{owner.slug}-{target}", details={},
                )  # fmt: skip
    AuditEntry.objects.filter(target_id__endswith="-old").update(created_at=now_us() - 31 * DAY_US)

    with request_scope():
        deleted = audit_tasks.prune()

    assert deleted == 2
    assert sorted(AuditEntry.objects.values_list("tenant_id", "target_id")) == sorted(
        (owner.pk, f"{owner.slug}-recent") for owner in (tenant, other_tenant)
    )


@pytest.mark.django_db
def test_prune_effects_drops_both_tenants_effect_history_past_retention(
    tenant: Tenant, other_tenant: Tenant
) -> None:
    """Each tenant's effect finished 31 days ago goes, the one finished yesterday stays."""
    now = now_us()
    kept: list[Any] = []
    gone: list[Any] = []
    for owner in (tenant, other_tenant):
        thread = make_thread(owner)
        for age_days, into in ((31, gone), (1, kept)):
            at = now - age_days * 24 * 3600 * 1_000_000
            into.append(ScheduledEffect.objects.create(
                tenant=owner, thread=thread, name="ping", scheduled_at=at, status="completed",
                completed_at=at,
            ).pk)  # fmt: skip

    with request_scope():
        pruned = tasks.prune_effects()

    assert pruned == len(gone) == 2
    assert sorted(ScheduledEffect.objects.values_list("pk", flat=True)) == sorted(kept)


_BARE: dict[str, Callable[[], Any]] = {
    "threads_sweep": threads_sweep,
    "actions_expire": actions_expire,
    "effects_sweep": effects_sweep,
    "effects_prune": effects_prune,
    "schedules_fire": schedules_fire,
    "webhooks_sweep": webhooks_sweep,
    "retention_prune": retention_prune,
    "audit_prune": audit_prune,
}


@pytest.mark.django_db
@pytest.mark.parametrize("name", sorted(_BARE))
def test_without_its_system_context_a_duty_cannot_read_a_row(
    name: str, tenant: Tenant, broker_queue: str, settings: Settings
) -> None:
    """What makes the duties above work is the system context each enters: the work they
    wrap, called in a request's empty context, is stopped by the wall before its first
    statement on a tenant's table (the test run's strict mode)."""
    settings.RETENTION_AUDIT_DAYS = 30
    with request_scope(), pytest.raises(NoTenantContext):
        _BARE[name]()


# The per-row work of a duty runs in the row's tenant --------------------------------------


@pytest.mark.django_db
def test_a_schedules_run_writes_in_its_tenants_context_and_only_the_bookkeeping_in_beats(
    tenant: Tenant, other_tenant: Tenant, broker_queue: str, observed: WriteObserver
) -> None:
    """Tenant A's schedule opens a new thread of its agent, tenant B's queues a turn on an
    existing thread. While each run writes (its thread, turn, events), the connection acts
    for that schedule's tenant alone; the schedules' own rows are updated in beat's system
    context ``beat:fire_schedules``."""
    bundle_import(tenant=tenant, document=chat_bundle([{"respond": {"text": "ok"}}]))
    opening = schedule_save(tenant=tenant, data={
        "name": "report", "agent": "chat", "cron": "0 * * * *", "input": {"content": "report"},
    })  # fmt: skip
    existing = _chat_thread(other_tenant)
    queueing = _thread_schedule(existing, "tick")
    _due(opening, queueing)
    observed.seen.clear()

    with request_scope():
        fired = tasks.fire_schedules()

    assert fired == 2
    opened = Thread.objects.get(tenant=tenant, agent_name="chat")
    turns = {turn.tenant_id: turn for turn in Turn.objects.filter(source="schedule")}
    assert set(turns) == {tenant.pk, other_tenant.pk}
    assert (turns[tenant.pk].thread_id, turns[other_tenant.pk].thread_id) == (
        opened.pk, existing.pk,
    )  # fmt: skip
    run_writes = [write for write in observed.seen if write.table != "threads_schedule"]
    assert {(write.verb, write.table, write.tenant) for write in run_writes} >= {
        ("INSERT", "threads_thread", str(tenant.pk)),
        ("INSERT", "threads_turn", str(tenant.pk)),
        ("INSERT", "threads_turn", str(other_tenant.pk)),
    }
    assert {(write.tenant, write.system) for write in run_writes} == {
        (str(tenant.pk), ""), (str(other_tenant.pk), ""),
    }  # fmt: skip
    bookkeeping = [write for write in observed.seen if write.table == "threads_schedule"]
    assert [(write.verb, write.tenant, write.system) for write in bookkeeping] == [
        ("UPDATE", "", "beat:fire_schedules")
    ] * 2
    # Runs and updates alternate: a run's writes in its tenant, then its schedule's update
    # back in beat's context, then the other run's.
    order = [write.tenant or write.system for write in observed.seen]
    collapsed = [who for index, who in enumerate(order) if index == 0 or order[index - 1] != who]
    assert len(collapsed) == 4
    assert set(collapsed[0::2]) == {str(tenant.pk), str(other_tenant.pk)}
    assert collapsed[1::2] == ["beat:fire_schedules"] * 2
    assert Schedule.objects.get(pk=opening.pk).last_run == {
        "thread_id": str(opened.pk), "turn_id": str(turns[tenant.pk].pk),
    }  # fmt: skip

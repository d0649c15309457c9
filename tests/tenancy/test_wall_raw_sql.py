"""Hand-written SQL behind the tenant wall.

The platform's hand-written statements (``cursor.execute``, ``.raw()``, ``RawSQL``,
``.extra()``) bypass the ORM's ``for_tenant`` scoping. Every product function that runs one
on a tenant-owned table is called here while acting for tenant A (``tenant_scope``), with
rows of A and of tenant B in place: it reads and changes A's rows only, B's rows stay as
they were (checked afterwards from the test's system context), and given B's rows it finds
nothing, the wall hiding them, and answers as it does for a row that does not exist. A
function that takes a tenant keeps its own tenant filter too: in the system context, which
sees every row, it still answers only for the tenant it is given.

:data:`COVERED` maps every function with hand-written SQL to the test here that proves it
safe, :data:`EXEMPT` the ones that touch no tenant-owned table to the reason;
:func:`test_every_function_with_raw_sql_is_covered_or_exempt` finds the functions by reading
the source, so a new hand-written statement without a test fails the suite.
"""

from __future__ import annotations

import ast
from collections.abc import Callable, Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import pytest
from django.db import ProgrammingError, transaction
from django.db.models import Model

from common.errors import DomainError, NotFound
from common.rows import columns_of
from common.tenant_wall import tenant_scope
from common.time import now_us
from retention.policies import Scope as RetentionScope
from retention.prune import _Budget, _prune_events
from retention.storage import ThreadStorage, Usage, thread_storage
from tenancy.models import Tenant
from tests.factories import make_thread
from tests.retention.support import NOW, OLD, emit, old_thread
from threads.events import publish
from threads.models import (
    TURN_PAUSED,
    Action,
    DeliveryStatus,
    EffectStatus,
    Event,
    EventCounter,
    IdempotencyKey,
    Log,
    Message,
    MessageStatus,
    RunStatus,
    ScheduledEffect,
    Thread,
    Turn,
    WebhookDelivery,
)
from threads.services import effects
from threads.services.effects import effects_prune, processing_ids
from threads.services.fence import (
    LockedThread,
    StaleFence,
    fence_acquire,
    fence_check,
    fence_read,
    fence_take,
    thread_fenced_update,
    thread_refresh,
)
from threads.services.idempotency import Answer, idempotent_call
from threads.services.inbox import message_queue
from threads.services.logs import log_create
from threads.services.message_shapes import history_json
from threads.services.messages import message_finish, message_inject
from threads.services.sessions import _event_cursors, _recent_turns, session_snapshot
from threads.services.spending import spend_scope
from threads.services.status import (
    thread_rest,
    thread_settle,
    turn_enqueue,
    turn_finish,
    turn_inputs_take,
    turn_pause,
    turn_release,
    turn_resume,
    turn_retrying,
)
from threads.services.threads import NO_COUNTS, thread_counts, thread_get
from threads.services.turns import turn_get, turn_message_ids, turn_reread, turn_status
from threads.services.waits import waits_release_due
from threads.services.webhooks import endpoint_save, webhook_deliver
from usage.budgets import (
    Scope,
    budgets_of,
    dry_run,
    release,
    release_thread,
    reservations_sweep,
    reserve,
    standing,
)
from usage.budgets import commit as budget_commit
from usage.ledger import Entry, record
from usage.models import Budget, BudgetCounter, LedgerEntry, Reservation, Rollup
from usage.prices import TokenPrices

pytestmark = pytest.mark.django_db

S = RunStatus
FENCE = 7
RLS_REFUSED = "row-level security"

# The test here that proves each function with hand-written SQL (module:function, as the
# source names it) reads and writes the acting tenant's rows only -> the functions.
_COVERING: dict[str, list[str]] = {
    "test_a_hand_written_insert_writes_the_acting_tenants_rows_only": [
        "common.rows:ModelColumns.insert",
    ],
    "test_publish_writes_events_of_the_acting_tenants_threads_only": [
        "threads.events.outbox:_insert",
    ],
    "test_thread_get_finds_the_given_tenants_thread_behind_the_wall": [
        "threads.services.threads:thread_get",
    ],
    "test_turn_get_finds_the_given_tenants_turn_behind_the_wall": [
        "threads.services.turns:turn_get",
    ],
    "test_a_session_snapshot_reads_the_given_tenants_rows_behind_the_wall": [
        "threads.services.sessions:_tree",
        "threads.services.sessions:_recent_turns",
        "threads.services.sessions:_event_cursors",
    ],
    "test_a_read_by_id_answers_for_the_acting_tenants_rows_only": [
        "threads.services.turns:turn_reread",
        "threads.services.turns:turn_status",
        "threads.services.turns:turn_message_ids",
        "threads.services.threads:thread_counts",
        "threads.services.fence:fence_read",
        "threads.services.message_shapes:stored_json",
        "retention.storage:thread_storage",
        "threads.services.effects:processing_ids",
    ],
    "test_fence_take_takes_the_given_tenants_thread_behind_the_wall": [
        "threads.services.fence:fence_take",
    ],
    "test_fence_acquire_moves_the_acting_tenants_fence_only": [
        "threads.services.fence:fence_acquire",
    ],
    "test_fence_check_locks_the_acting_tenants_thread_only": [
        "threads.services.fence:fence_check",
    ],
    "test_thread_refresh_reads_the_acting_tenants_thread_only": [
        "threads.services.fence:thread_refresh",
    ],
    "test_thread_fenced_update_changes_the_acting_tenants_thread_only": [
        "threads.services.fence:thread_fenced_update",
    ],
    "test_message_inject_writes_to_the_acting_tenants_thread_only": [
        "threads.services.messages:message_inject",
    ],
    "test_message_finish_fills_the_acting_tenants_message_only": [
        "threads.services.messages:message_finish",
    ],
    "test_a_fenced_log_is_written_to_the_acting_tenants_thread_only": [
        "threads.services.logs:_log_insert",
    ],
    "test_an_idempotency_key_is_claimed_for_the_given_tenant_behind_the_wall": [
        "threads.services.idempotency:idempotent_call",
    ],
    "test_spend_scope_climbs_the_acting_tenants_ancestors_only": [
        "threads.services.spending:spend_scope",
    ],
    "test_turn_enqueue_queues_on_the_acting_tenants_thread_only": [
        "threads.services.status.queueing:turn_enqueue",
    ],
    "test_thread_settle_rests_the_acting_tenants_thread_only": [
        "threads.services.status.queueing:thread_settle",
    ],
    "test_turn_inputs_take_takes_the_acting_tenants_turn_only": [
        "threads.services.status.running:turn_inputs_take",
    ],
    "test_turn_retrying_flips_the_acting_tenants_turn_only": [
        "threads.services.status.running:turn_retrying",
    ],
    "test_turn_pause_pauses_the_acting_tenants_turn_only": [
        "threads.services.status.running:turn_pause",
    ],
    "test_turn_release_releases_the_acting_tenants_turn_only": [
        "threads.services.status.running:turn_release",
    ],
    "test_turn_resume_resumes_the_acting_tenants_turn_only": [
        "threads.services.status.running:turn_resume",
    ],
    "test_turn_finish_ends_the_acting_tenants_turn_only": [
        "threads.services.status.ending:turn_finish",
    ],
    "test_thread_rest_rests_the_acting_tenants_thread_only": [
        "threads.services.status.ending:thread_rest",
    ],
    "test_waits_release_due_releases_the_acting_tenants_turns_only": [
        "threads.services.waits:waits_release_due",
    ],
    "test_webhook_deliver_takes_the_acting_tenants_delivery_only": [
        "threads.services.webhooks:webhook_deliver",
    ],
    "test_effects_prune_drops_the_acting_tenants_history_only": [
        "threads.services.effects:effects_prune",
    ],
    "test_the_ledger_records_for_the_given_tenant_behind_the_wall": [
        "usage.ledger:record",
    ],
    "test_budgets_reserve_settle_and_stand_on_the_acting_tenants_counters_only": [
        "usage.budgets:_reserve",
        "usage.budgets:commit",
        "usage.budgets:_settle",
        "usage.budgets:_figures",
        "usage.budgets:dry_run",
    ],
    "test_reservations_are_released_for_the_acting_tenant_only": [
        "usage.budgets:release_thread",
        "usage.budgets:reservations_sweep",
        "usage.budgets:_release_ids",
    ],
    "test_pruning_events_deletes_the_acting_tenants_events_only": [
        "retention.prune:_prune_events",
    ],
}
# Every function with hand-written SQL on a tenant-owned table -> the test that covers it.
COVERED: dict[str, str] = {
    function: test for test, functions in _COVERING.items() for function in functions
}

# Functions with hand-written SQL that touch no tenant-owned table -> why.
EXEMPT: dict[str, str] = {
    "agents.services:lock_definitions": "pg_advisory_xact_lock keyed by the tenant's id; "
    "reads and writes no table",
    "config.health:_check_postgres": "SELECT 1, the health check",
    "tenancy.wall:grant_application_role": "GRANTs to the application's role after migrate, "
    "as the tables' owner; reads no row",
    "config.dbroles:ensure_application_role": "role DDL and advisory locks on the server's "
    "maintenance database (pg_roles), before the application connects",
    "config.devservices:EmbeddedPostgres.create_database": "CREATE DATABASE for the "
    "development server (pg_database)",
    "common.tenant_wall:connection_sync": "the wall's own set_config of app.tenant_id and "
    "app.system before a statement",
    "replay.validate:_snapshot": "SET TRANSACTION ISOLATION LEVEL for the validation's "
    "snapshot; reads no table",
    "tenancy.wall:check_application_role": "the system check reading the connection's own "
    "role in pg_roles",
}


# Two tenants, a thread each ----------------------------------------------------------------


@dataclass(frozen=True)
class Two:
    """Tenants A (the one acted for) and B, and a thread of each under fence FENCE."""

    a: Tenant
    b: Tenant
    ta: Thread
    tb: Thread


@pytest.fixture
def two(tenant: Tenant, other_tenant: Tenant) -> Two:
    ta, tb = make_thread(tenant), make_thread(other_tenant)
    Thread.objects.filter(pk__in=[ta.pk, tb.pk]).update(fence=FENCE)
    ta.refresh_from_db()
    tb.refresh_from_db()
    return Two(a=tenant, b=other_tenant, ta=ta, tb=tb)


def _values(model: type[Model], **filters: Any) -> list[dict[str, Any]]:
    return list(model._default_manager.filter(**filters).order_by("pk").values())


def _rows_of(thread: Thread) -> dict[str, list[dict[str, Any]]]:
    """Every row of ``thread`` a function here may touch, as stored now."""
    return {
        "thread": _values(Thread, pk=thread.pk),
        "turns": _values(Turn, thread_id=thread.pk),
        "messages": _values(Message, thread_id=thread.pk),
        "logs": _values(Log, thread_id=thread.pk),
        "events": _values(Event, thread_id=thread.pk),
        "counter": _values(EventCounter, thread_id=thread.pk),
        "effects": _values(ScheduledEffect, thread_id=thread.pk),
        "actions": _values(Action, thread_id=thread.pk),
    }


@dataclass
class Outcome:
    """What a function answered for A's rows, and for B's (its answer or what it raised)."""

    a: Any
    b: Any


def _for_a(
    two: Two, act: Callable[[Thread, Any], Any], prepare: Callable[[Thread], Any] | None = None
) -> Outcome:
    """Prepare the same rows in A's thread and B's, then, acting for A, call ``act`` on A's
    and then on B's; B's rows must be as they were."""
    own = prepare(two.ta) if prepare is not None else None
    other = prepare(two.tb) if prepare is not None else None
    before = _rows_of(two.tb)
    with tenant_scope(two.a.pk):
        result_a = act(two.ta, own)
        try:
            with transaction.atomic():
                result_b = act(two.tb, other)
        except Exception as error:  # the test asserts what it was
            result_b = error
    assert _rows_of(two.tb) == before, "a call acting for A changed B's rows"
    return Outcome(result_a, result_b)


def _turn(thread: Thread, status: str) -> Turn:
    """A turn of ``thread`` in ``status`` under FENCE, the thread showing it (a paused turn
    held as the thread's paused turn)."""
    turn = message_queue(thread=thread, role="user", content="hi", wake=False)
    Turn.objects.filter(pk=turn.pk).update(status=status, fence=FENCE)
    paused = turn if status in TURN_PAUSED else None
    Thread.objects.filter(pk=thread.pk).update(status=status, paused_turn=paused)
    turn.refresh_from_db()
    thread.refresh_from_db()
    return turn


def _stored_status(turn: Turn) -> str:
    return str(Turn.objects.get(pk=turn.pk).status)


def _thread_row(thread: Thread) -> Thread:
    return Thread.objects.get(pk=thread.pk)


# Inserts -------------------------------------------------------------------------------------


def test_a_hand_written_insert_writes_the_acting_tenants_rows_only(two: Two) -> None:
    """``ModelColumns.insert`` (the hand-written INSERT behind ``thread_create``) stores a row
    of the tenant acted for; a row naming another tenant is refused by the wall."""
    threads = columns_of(Thread)
    before = _values(Thread, tenant_id=two.b.pk)
    with tenant_scope(two.a.pk):
        own = threads.insert(Thread(tenant=two.a, agent_name="x", origin_agent_name="x"))
        with pytest.raises(ProgrammingError, match=RLS_REFUSED), transaction.atomic():
            threads.insert(Thread(tenant=two.b, agent_name="x", origin_agent_name="x"))
    assert _thread_row(own).tenant_id == two.a.pk
    assert _values(Thread, tenant_id=two.b.pk) == before


def test_publish_writes_events_of_the_acting_tenants_threads_only(two: Two) -> None:
    """The event insert (``outbox._insert``, one statement with the thread's counter) writes
    an event of A's thread; for B's thread it finds no thread and writes nothing."""

    def act(thread: Thread, _: Any) -> int | None:
        return publish(thread, "thread.updated", {"id": str(thread.pk), "fields": ["tags"]})

    outcome = _for_a(two, act)
    assert outcome.a is not None
    assert Event.objects.filter(thread=two.ta, sequence=outcome.a).exists()
    assert outcome.b is None
    assert not Event.objects.filter(thread=two.tb).exists()


# Reads given a tenant ------------------------------------------------------------------------


def test_thread_get_finds_the_given_tenants_thread_behind_the_wall(two: Two) -> None:
    """Acting for A, A's thread is found and B's is not, by either filter; the function's own
    tenant filter holds in the system context, which sees every row."""
    with tenant_scope(two.a.pk):
        assert thread_get(tenant=two.a, thread_id=two.ta.pk).pk == two.ta.pk
        with pytest.raises(NotFound):
            thread_get(tenant=two.a, thread_id=two.tb.pk)
        with pytest.raises(NotFound):  # the filter matches B's row; the wall hides it
            thread_get(tenant=two.b, thread_id=two.tb.pk)
    with pytest.raises(NotFound):  # the system context sees B's row; the filter refuses it
        thread_get(tenant=two.a, thread_id=two.tb.pk)
    assert thread_get(tenant=two.b, thread_id=two.tb.pk).pk == two.tb.pk


def test_turn_get_finds_the_given_tenants_turn_behind_the_wall(two: Two) -> None:
    """As for threads: acting for A, A's turn is found with its thread; B's is not."""
    own, other = _turn(two.ta, S.QUEUED), _turn(two.tb, S.QUEUED)
    with tenant_scope(two.a.pk):
        found = turn_get(tenant=two.a, turn_id=own.pk)
        assert (found.pk, found.thread.pk) == (own.pk, two.ta.pk)
        with pytest.raises(NotFound):
            turn_get(tenant=two.a, turn_id=other.pk)
        with pytest.raises(NotFound):
            turn_get(tenant=two.b, turn_id=other.pk)
    with pytest.raises(NotFound):
        turn_get(tenant=two.a, turn_id=other.pk)
    assert turn_get(tenant=two.b, turn_id=other.pk).pk == other.pk


def test_a_session_snapshot_reads_the_given_tenants_rows_behind_the_wall(two: Two) -> None:
    """The session's tree, its recent turns and its event cursors (three hand-written
    statements) answer for A's session acting for A; B's session is not found acting for A,
    and each statement keeps its tenant filter in the system context."""
    children = {
        thread.pk: make_thread(thread.tenant, parent=thread, root_id=thread.pk)
        for thread in (two.ta, two.tb)
    }
    turns = {thread.pk: _turn(thread, S.QUEUED) for thread in (two.ta, two.tb)}
    both = [two.ta.pk, two.tb.pk]
    with tenant_scope(two.a.pk):
        snapshot = session_snapshot(tenant=two.a, session_id=two.ta.pk)
        assert [entry.thread.pk for entry in snapshot.threads] == [
            two.ta.pk,
            children[two.ta.pk].pk,
        ]
        assert [turn.pk for turn in snapshot.threads[0].recent_turns] == [turns[two.ta.pk].pk]
        assert snapshot.threads[0].events_cursor > 0
        for tenant in (two.a, two.b):
            with pytest.raises(NotFound):
                session_snapshot(tenant=tenant, session_id=two.tb.pk)
        assert _recent_turns(tenant=two.b, thread_ids=both) == {}
        assert _event_cursors(tenant=two.b, thread_ids=both) == {}
    # The system context sees both tenants' rows: the statements' own filters pick A's.
    with pytest.raises(NotFound):
        session_snapshot(tenant=two.a, session_id=two.tb.pk)
    assert list(_recent_turns(tenant=two.a, thread_ids=both)) == [two.ta.pk]
    assert list(_event_cursors(tenant=two.a, thread_ids=both)) == [two.ta.pk]
    assert session_snapshot(tenant=two.b, session_id=two.tb.pk).root.pk == two.tb.pk


def test_fence_take_takes_the_given_tenants_thread_behind_the_wall(two: Two) -> None:
    """``fence_take`` (a worker's first statement, given the thread's tenant) takes the next
    fence of A's thread acting for A; B's thread is neither found nor moved on, acting for A
    (the wall) or in the system context for tenant A (its filter)."""
    waiting = _turn(two.ta, S.QUEUED)
    with tenant_scope(two.a.pk):
        taken = fence_take(thread_id=two.ta.pk, tenant_id=two.a.pk)
        assert taken is not None
        thread, fence, next_turn = taken
        assert (thread.pk, thread.tenant.pk, fence, next_turn) == (
            two.ta.pk, two.a.pk, FENCE + 1, waiting.pk,
        )  # fmt: skip
        assert fence_take(thread_id=two.tb.pk, tenant_id=two.b.pk) is None
    assert fence_take(thread_id=two.tb.pk, tenant_id=two.a.pk) is None
    assert _thread_row(two.ta).fence == FENCE + 1
    assert _thread_row(two.tb).fence == FENCE


def test_an_idempotency_key_is_claimed_for_the_given_tenant_behind_the_wall(two: Two) -> None:
    """B used the key first; A's request with the same key runs as new work and replays its
    own answer, never B's. Acting for A, a claim in B's name is refused by the wall."""
    with tenant_scope(two.b.pk):
        idempotent_call(tenant=two.b, key="k", digest="b", produce=lambda: (201, {"who": "b"}))
    before = _values(IdempotencyKey, tenant_id=two.b.pk)
    with tenant_scope(two.a.pk):
        first = idempotent_call(
            tenant=two.a, key="k", digest="a", produce=lambda: (201, {"who": "a"})
        )
        again = idempotent_call(
            tenant=two.a, key="k", digest="a", produce=lambda: (500, {"who": "twice"})
        )
        with pytest.raises(ProgrammingError, match=RLS_REFUSED), transaction.atomic():
            idempotent_call(tenant=two.b, key="k2", digest="b", produce=lambda: (201, {}))
    assert first == Answer(201, {"who": "a"})
    assert again == Answer(201, {"who": "a"}, replayed=True)
    assert _values(IdempotencyKey, tenant_id=two.b.pk) == before
    assert IdempotencyKey.objects.get(tenant=two.a, key="k").response == {"who": "a"}


def test_the_ledger_records_for_the_given_tenant_behind_the_wall(two: Two) -> None:
    """A ledger key B counted before is new to A (the keys are per tenant): acting for A, A's
    entry and rollups are written and B's are untouched; an entry in B's name is refused."""
    record(Entry(tenant_id=two.b.pk, key="call", kind="model", input_tokens=7))
    before = (_values(LedgerEntry, tenant_id=two.b.pk), _values(Rollup, tenant_id=two.b.pk))
    with tenant_scope(two.a.pk):
        assert record(Entry(tenant_id=two.a.pk, key="call", kind="model", input_tokens=3))
        assert not record(Entry(tenant_id=two.a.pk, key="call", kind="model", input_tokens=3))
        with pytest.raises(ProgrammingError, match=RLS_REFUSED), transaction.atomic():
            record(Entry(tenant_id=two.b.pk, key="other", kind="model", input_tokens=1))
    assert (_values(LedgerEntry, tenant_id=two.b.pk), _values(Rollup, tenant_id=two.b.pk)) == before
    assert list(Rollup.objects.filter(tenant=two.a).values_list("input_tokens", flat=True)) == [
        3,
        3,
    ]


# Reads by id ---------------------------------------------------------------------------------


@dataclass(frozen=True)
class Filled:
    """A thread's rows for the reads: a queued turn with a message it wrote, a log, events
    and a pending effect."""

    turn: Turn
    effects: list[ScheduledEffect]


def _filled(thread: Thread) -> Filled:
    turn = message_queue(thread=thread, role="user", content="hi", wake=False)
    message = message_inject(thread=thread, role="user", content="hello")
    Message.objects.filter(pk=message.pk).update(turn_id=turn.pk)
    log_create(thread=thread, kind="incident", data={"note": "x"})
    ScheduledEffect.objects.create(
        tenant_id=thread.tenant_id, thread=thread, name="remind", args={},
        scheduled_at=now_us() + 3_600_000_000,
    )  # fmt: skip
    return Filled(turn=turn, effects=list(ScheduledEffect.objects.filter(thread=thread)))


NONE = Usage(count=0, bytes=0)
NOTHING_STORED = ThreadStorage(
    messages=NONE, files=NONE, events=NONE, logs=NONE, kv=NONE, events_pruned_through=0
)

# name -> (the read, given a thread and its rows; what it answers when it finds none of them)
READS: dict[str, tuple[Callable[[Thread, Filled], Any], Callable[[Thread, Filled], Any]]] = {
    "turn_reread": (
        lambda thread, rows: getattr(turn_reread(turn=rows.turn), "pk", None),
        lambda thread, rows: None,
    ),
    "turn_status": (lambda thread, rows: turn_status(turn=rows.turn), lambda thread, rows: None),
    "turn_message_ids": (
        lambda thread, rows: turn_message_ids(turns=[rows.turn]),
        lambda thread, rows: {rows.turn.pk: []},
    ),
    "thread_counts": (
        lambda thread, rows: thread_counts(thread=thread),
        lambda thread, rows: dict(NO_COUNTS),
    ),
    "fence_read": (lambda thread, rows: fence_read(thread=thread), lambda thread, rows: None),
    "stored_json": (lambda thread, rows: history_json(thread=thread), lambda thread, rows: []),
    "thread_storage": (
        lambda thread, rows: thread_storage(thread=thread),
        lambda thread, rows: NOTHING_STORED,
    ),
    # An effect the statement cannot see counts as one whose handler holds its row: the
    # statement skips locked rows, and a hidden row is skipped the same way.
    "processing_ids": (
        lambda thread, rows: processing_ids(rows.effects),
        lambda thread, rows: {row.pk for row in rows.effects},
    ),
}


@pytest.mark.parametrize("name", sorted(READS))
def test_a_read_by_id_answers_for_the_acting_tenants_rows_only(two: Two, name: str) -> None:
    """A read given ids (a turn, a thread, effects) answers for A's rows acting for A as the
    system context does; given B's rows, acting for A, it answers as for rows that do not
    exist, though in the system context it finds them."""
    read, nothing = READS[name]
    own, other = _filled(two.ta), _filled(two.tb)
    truth_a, truth_b = read(two.ta, own), read(two.tb, other)
    assert truth_b != nothing(two.tb, other), "B's rows are there to be found"
    before = _rows_of(two.tb)
    with tenant_scope(two.a.pk):
        assert read(two.ta, own) == truth_a
        assert read(two.tb, other) == nothing(two.tb, other)
    assert _rows_of(two.tb) == before


def test_spend_scope_climbs_the_acting_tenants_ancestors_only(two: Two) -> None:
    """A child thread's spend scope climbs its parent chain (one recursive statement):
    acting for A, A's child reaches A's parent and its running turn; B's child, acting for
    A, reaches no ancestor, though in the system context it reaches B's parent."""
    running = {thread.pk: _turn(thread, S.RUNNING) for thread in (two.ta, two.tb)}
    children = {
        thread.pk: make_thread(thread.tenant, parent=thread, root_id=thread.pk)
        for thread in (two.ta, two.tb)
    }
    child_a, child_b = children[two.ta.pk], children[two.tb.pk]
    with tenant_scope(two.a.pk):
        own = spend_scope(thread=child_a, turn_id=None, user="ann")
        other = spend_scope(thread=child_b, turn_id=None, user="ann")
    assert (own.tenant_id, own.threads, own.turns) == (
        two.a.pk, (child_a.pk, two.ta.pk), (running[two.ta.pk].pk,),
    )  # fmt: skip
    assert (other.threads, other.turns) == ((child_b.pk,), ())
    seen = spend_scope(thread=child_b, turn_id=None, user="ann")
    assert (seen.threads, seen.turns) == ((child_b.pk, two.tb.pk), (running[two.tb.pk].pk,))


# The fence ------------------------------------------------------------------------------------

# A lock holder's statements that read the thread row they were given: acting for A on B's
# thread they find no row and, as for a thread deleted under them, raise NotFound. B's row is
# never changed.


def test_fence_acquire_moves_the_acting_tenants_fence_only(two: Two) -> None:
    """A's fence moves on; B's thread, acting for A, is not found and keeps its fence."""
    outcome = _for_a(two, lambda thread, _: fence_acquire(thread=thread))
    assert outcome.a == (FENCE + 1, False)
    assert _thread_row(two.ta).fence == FENCE + 1
    assert isinstance(outcome.b, NotFound)


def test_fence_check_locks_the_acting_tenants_thread_only(two: Two) -> None:
    """A's thread row is locked and its fence compared; B's, acting for A, is not found."""

    def act(thread: Thread, _: Any) -> LockedThread:
        with transaction.atomic():
            return fence_check(thread=thread, fence=FENCE)

    outcome = _for_a(two, act)
    assert outcome.a == LockedThread(FENCE, None, S.COMPLETED, False, None)
    assert isinstance(outcome.b, NotFound)


def test_thread_refresh_reads_the_acting_tenants_thread_only(two: Two) -> None:
    """A's thread is reloaded (a waiting turn seen); B's, acting for A, is not found."""
    outcome = _for_a(two, lambda thread, _: thread_refresh(thread=thread), prepare=_queued)
    assert outcome.a is True
    assert isinstance(outcome.b, NotFound)


@pytest.mark.parametrize("name", ["fence_acquire", "fence_check", "thread_refresh"])
def test_a_lock_holders_read_of_a_hidden_thread_raises_a_domain_error(two: Two, name: str) -> None:
    """What the three should do with a thread the wall hides (or one deleted): raise a
    domain error (NotFound or StaleFence), as ``message_inject`` and ``turn_finish`` do."""
    calls: dict[str, Callable[[], Any]] = {
        "fence_acquire": lambda: fence_acquire(thread=two.tb),
        "fence_check": lambda: fence_check(thread=two.tb, fence=FENCE),
        "thread_refresh": lambda: thread_refresh(thread=two.tb),
    }
    with tenant_scope(two.a.pk), pytest.raises(DomainError), transaction.atomic():
        calls[name]()


def test_thread_fenced_update_changes_the_acting_tenants_thread_only(two: Two) -> None:
    """A's thread is renamed under its fence; B's, acting for A, is a stale fence."""
    outcome = _for_a(
        two, lambda thread, _: thread_fenced_update(thread=thread, fence=FENCE, agent_name="new")
    )
    assert _thread_row(two.ta).agent_name == "new"
    assert isinstance(outcome.b, StaleFence)


# Messages and logs ---------------------------------------------------------------------------


def test_message_inject_writes_to_the_acting_tenants_thread_only(two: Two) -> None:
    """A flow's message lands in A's thread; B's thread, acting for A, no longer exists."""
    outcome = _for_a(
        two,
        lambda thread, _: message_inject(thread=thread, role="user", content="x", fence=FENCE),
    )
    assert Message.objects.get(pk=outcome.a.pk).thread_id == two.ta.pk
    assert isinstance(outcome.b, NotFound)


def test_message_finish_fills_the_acting_tenants_message_only(two: Two) -> None:
    """A's pending message is filled; B's, acting for A, no longer exists."""

    def pending(thread: Thread) -> Message:
        return message_inject(
            thread=thread, role="assistant", content=None, status=MessageStatus.PENDING,
            fence=FENCE,
        )  # fmt: skip

    outcome = _for_a(
        two,
        lambda thread, message: message_finish(message=message, fence=FENCE, content="answer"),
        prepare=pending,
    )
    stored = Message.objects.get(pk=outcome.a.pk)
    assert (stored.content, stored.status) == ("answer", MessageStatus.COMPLETED)
    assert isinstance(outcome.b, NotFound)


def test_a_fenced_log_is_written_to_the_acting_tenants_thread_only(two: Two) -> None:
    """A flow's log row (written only while its fence is current) lands in A's thread; B's
    thread, acting for A, shows no current fence, so nothing is written."""
    outcome = _for_a(
        two,
        lambda thread, _: log_create(thread=thread, kind="llm", data={"model": "m"}, fence=FENCE),
    )
    assert Log.objects.get(pk=outcome.a.pk).thread_id == two.ta.pk
    assert isinstance(outcome.b, StaleFence)


# The status machine --------------------------------------------------------------------------


def _queued(thread: Thread) -> Turn:
    return _turn(thread, S.QUEUED)


def _running(thread: Thread) -> Turn:
    return _turn(thread, S.RUNNING)


def test_turn_enqueue_queues_on_the_acting_tenants_thread_only(two: Two) -> None:
    """A new turn is queued on A's thread; on B's, acting for A, nothing is written."""

    def act(thread: Thread, _: Any) -> bool:
        turn = Turn(
            tenant_id=thread.tenant_id, thread=thread, kind="message", source="message",
            payload={"content": "x"},
        )  # fmt: skip
        return turn_enqueue(turn=turn, thread=thread)

    outcome = _for_a(two, act)
    assert (outcome.a, outcome.b) == (True, False)
    assert Turn.objects.filter(thread=two.ta, status=S.QUEUED).count() == 1


def test_thread_settle_rests_the_acting_tenants_thread_only(two: Two) -> None:
    """A thread shown queued with an empty queue rests again: A's does; B's, acting for A,
    is not touched."""

    def shown_queued(thread: Thread) -> None:
        Thread.objects.filter(pk=thread.pk).update(status=S.QUEUED, rest_status=S.FAILED)
        thread.refresh_from_db()

    outcome = _for_a(two, lambda thread, _: thread_settle(thread=thread), prepare=shown_queued)
    assert (outcome.a, outcome.b) == (None, None)
    assert _thread_row(two.ta).status == S.FAILED


def test_turn_inputs_take_takes_the_acting_tenants_turn_only(two: Two) -> None:
    """A's queued turn is taken to run; B's, acting for A, is not found: nothing taken."""
    outcome = _for_a(
        two,
        lambda thread, turn: turn_inputs_take(thread=thread, fence=FENCE, turn=turn),
        prepare=_queued,
    )
    assert [turn.status for turn in outcome.a] == [S.RUNNING]
    assert _stored_status(outcome.a[0]) == S.RUNNING
    assert outcome.b == []


def test_turn_retrying_flips_the_acting_tenants_turn_only(two: Two) -> None:
    """A's running turn shows retrying; B's, acting for A, stays as it was."""
    turns: list[Turn] = []

    def act(thread: Thread, turn: Turn) -> None:
        turns.append(turn)
        turn_retrying(thread=thread, fence=FENCE, turn=turn, retrying=True)

    outcome = _for_a(two, act, prepare=_running)
    assert (outcome.a, outcome.b) == (None, None)
    assert _stored_status(turns[0]) == S.RETRYING
    assert _thread_row(two.ta).status == S.RETRYING


def test_turn_pause_pauses_the_acting_tenants_turn_only(two: Two) -> None:
    """A's running turn rests waiting for input; B's, acting for A, is a stale fence."""
    turns: list[Turn] = []

    def act(thread: Thread, turn: Turn) -> None:
        turns.append(turn)
        turn_pause(thread=thread, fence=FENCE, turn=turn, status=S.WAITING_INPUT)

    outcome = _for_a(two, act, prepare=_running)
    assert _stored_status(turns[0]) == S.WAITING_INPUT
    assert _thread_row(two.ta).paused_turn_id == turns[0].pk
    assert isinstance(outcome.b, StaleFence)


def test_turn_release_releases_the_acting_tenants_turn_only(two: Two) -> None:
    """A person answered: A's paused turn waits to resume; B's, acting for A, is not found."""

    def act(thread: Thread, turn: Turn) -> bool:
        with transaction.atomic():
            Thread.objects.select_for_update().filter(pk=thread.pk).first()
            return turn_release(thread=thread, turn=turn)

    outcome = _for_a(two, act, prepare=lambda thread: _turn(thread, S.WAITING_INPUT))
    assert (outcome.a, outcome.b) == (True, False)
    assert _thread_row(two.ta).status == S.QUEUED


def test_turn_resume_resumes_the_acting_tenants_turn_only(two: Two) -> None:
    """A's answered paused turn runs again; B's, acting for A, is not found."""

    def answered(thread: Thread) -> Turn:
        turn = _turn(thread, S.QUEUED)
        Thread.objects.filter(pk=thread.pk).update(paused_turn=turn)
        thread.refresh_from_db()
        return turn

    turns: list[Turn] = []

    def act(thread: Thread, turn: Turn) -> bool:
        turns.append(turn)
        return turn_resume(thread=thread, fence=FENCE, turn=turn)

    outcome = _for_a(two, act, prepare=answered)
    assert (outcome.a, outcome.b) == (True, False)
    assert _stored_status(turns[0]) == S.RUNNING


def test_turn_finish_ends_the_acting_tenants_turn_only(two: Two) -> None:
    """A's running turn ends completed; B's, acting for A, is a stale fence."""
    turns: list[Turn] = []

    def act(thread: Thread, turn: Turn) -> bool:
        turns.append(turn)
        return turn_finish(
            thread=thread, fence=FENCE, turn=turn, status=S.COMPLETED, rest=S.COMPLETED,
            outcome="done",
        )  # fmt: skip

    outcome = _for_a(two, act, prepare=_running)
    assert outcome.a is False
    assert _stored_status(turns[0]) == S.COMPLETED
    assert _thread_row(two.ta).status == S.COMPLETED
    assert isinstance(outcome.b, StaleFence)


def test_thread_rest_rests_the_acting_tenants_thread_only(two: Two) -> None:
    """A's idle thread rests failed; B's, acting for A, is a stale fence."""
    outcome = _for_a(two, lambda thread, _: thread_rest(thread=thread, fence=FENCE, rest=S.FAILED))
    assert outcome.a is None
    assert _thread_row(two.ta).status == S.FAILED
    assert isinstance(outcome.b, StaleFence)


def test_waits_release_due_releases_the_acting_tenants_turns_only(two: Two) -> None:
    """The beat's release of turns whose wait is over (a raw ``WHERE`` on their resume
    point), acting for A, releases A's turn and not B's."""
    waiting = {thread.pk: _turn(thread, S.WAITING_RESOURCE) for thread in (two.ta, two.tb)}
    Turn.objects.filter(pk__in=[turn.pk for turn in waiting.values()]).update(
        resume={"waiting": {"reason": "budget", "retry_at": now_us() - 1}}
    )
    before = _rows_of(two.tb)
    with tenant_scope(two.a.pk):
        assert waits_release_due() == 1
    assert _stored_status(waiting[two.ta.pk]) == S.QUEUED
    assert _rows_of(two.tb) == before
    assert waits_release_due() == 1  # B's was due all along: the system context releases it


# Deliveries and effects -----------------------------------------------------------------------


def test_webhook_deliver_takes_the_acting_tenants_delivery_only(two: Two) -> None:
    """A's due delivery is taken and attempted (its endpoint disabled: it fails at once, no
    request sent); B's, acting for A, is not found and stays pending."""
    deliveries = {}
    for tenant in (two.a, two.b):
        endpoint, _secret = endpoint_save(
            tenant=tenant,
            data={"url": "https://example.com/hook", "event_types": ["turn.completed"]},
        )
        endpoint.enabled = False
        endpoint.save(update_fields=["enabled"])
        deliveries[tenant.pk] = WebhookDelivery.objects.create(
            tenant=tenant, endpoint=endpoint, event_type="turn.completed", payload={}
        )
    other = deliveries[two.b.pk]
    before = _values(WebhookDelivery, pk=other.pk)
    with tenant_scope(two.a.pk):
        assert webhook_deliver(deliveries[two.a.pk].pk) == DeliveryStatus.FAILED
        assert webhook_deliver(other.pk) is None
    assert _values(WebhookDelivery, pk=other.pk) == before


def test_effects_prune_drops_the_acting_tenants_history_only(
    two: Two, monkeypatch: pytest.MonkeyPatch
) -> None:
    """Past the per-thread history kept (one row here), acting for A, A's finished effects
    beyond the newest go (with a failed one past its day); B's all stay."""
    monkeypatch.setattr(effects, "KEEP_PER_THREAD", 1)
    now = now_us()
    for thread in (two.ta, two.tb):
        for n in range(3):
            ScheduledEffect.objects.create(
                tenant_id=thread.tenant_id, thread=thread, name="remind", args={},
                scheduled_at=now, created_at=now - n, status=EffectStatus.COMPLETED,
                completed_at=now,
            )  # fmt: skip
        ScheduledEffect.objects.create(
            tenant_id=thread.tenant_id, thread=thread, name="remind", args={},
            scheduled_at=OLD, created_at=OLD, status=EffectStatus.FAILED, completed_at=OLD,
        )  # fmt: skip
    before = _values(ScheduledEffect, thread_id=two.tb.pk)
    with tenant_scope(two.a.pk):
        assert effects_prune(now) == 3
    assert ScheduledEffect.objects.filter(thread=two.ta).count() == 1
    assert _values(ScheduledEffect, thread_id=two.tb.pk) == before


# Usage ------------------------------------------------------------------------------------------

FREE = TokenPrices(input=None, cached=None, output=None)


def _budget(tenant: Tenant) -> Budget:
    return Budget.objects.create(
        tenant=tenant, name="cap", scope="tenant", window="lifetime", limit_tokens=1000,
        thresholds=[1],
    )  # fmt: skip


def _scope(tenant: Tenant, thread: Thread) -> Scope:
    return Scope(tenant_id=tenant.pk, threads=(thread.pk,), lock_token="token")


def _reserve(scope: Scope, thread: Thread) -> Any:
    return reserve(
        scope, prices=FREE, input_tokens=10, output_tokens=100, min_output_tokens=1,
        thread_id=thread.pk, turn_id=None,
    )  # fmt: skip


def _usage_of(tenant: Tenant) -> tuple[list[dict[str, Any]], ...]:
    return (
        _values(BudgetCounter, tenant_id=tenant.pk),
        _values(Reservation, tenant_id=tenant.pk),
        _values(LedgerEntry, tenant_id=tenant.pk),
    )


def test_budgets_reserve_settle_and_stand_on_the_acting_tenants_counters_only(two: Two) -> None:
    """Acting for A: a reservation, its commit (ledger, settlement, the crossed threshold)
    and the standing read A's counters; B's held reservation cannot be released and its
    counter reads as empty, though the system context sees it."""
    _budget(two.a)
    _budget(two.b)
    b_rows = budgets_of(two.b.pk)  # B's budgets, read in the system context
    scope_a, scope_b = _scope(two.a, two.ta), _scope(two.b, two.tb)
    hold_b = _reserve(scope_b, two.tb)
    before = _usage_of(two.b)
    with tenant_scope(two.a.pk):
        hold = _reserve(scope_a, two.ta)
        assert hold.max_output_tokens == 100
        (stands,) = standing(scope_a)
        assert (stands["reserved_tokens"], stands["spent_tokens"]) == (110, 0)
        (estimate,) = dry_run(scope_a, prices=FREE, input_tokens=10, output_tokens=100)
        assert (estimate["allowed_output_tokens"], estimate["fits"]) == (100, True)
        counted, crossings = budget_commit(
            hold, Entry(tenant_id=two.a.pk, key="call", kind="model", input_tokens=10,
                        output_tokens=5),
        )  # fmt: skip
        assert counted
        assert [crossing.threshold for crossing in crossings] == [1]
        release(hold_b)
        (hidden,) = standing(scope_b, budgets=b_rows)
        assert (hidden["reserved_tokens"], hidden["spent_tokens"]) == (0, 0)
    counter = BudgetCounter.objects.get(tenant=two.a)
    assert (counter.spent_tokens, counter.reserved_tokens, counter.announced) == (15, 0, 1)
    assert _usage_of(two.b) == before
    (seen,) = standing(scope_b, budgets=b_rows)
    assert seen["reserved_tokens"] == 110


def test_reservations_are_released_for_the_acting_tenant_only(two: Two) -> None:
    """Acting for A, the sweep of dead reservations and a takeover's release of a thread's
    reservations release A's only: B's thread has none to release acting for A, and a sweep
    for B finds none. In the system context the sweep's tenant filter holds."""
    for tenant in (two.a, two.b):
        _budget(tenant)
    for tenant, thread in ((two.a, two.ta), (two.b, two.tb)):
        for _ in range(2):
            _reserve(_scope(tenant, thread), thread)
    Reservation.objects.update(created_at=NOW - 60_000_000)  # old enough to be checked
    before = _usage_of(two.b)
    with tenant_scope(two.a.pk):
        assert release_thread(thread_id=two.tb.pk) == 0
        assert reservations_sweep(tenant_id=two.b.pk) == 0
        assert release_thread(thread_id=two.ta.pk, keep_token="token") == 0  # its own flow's
        assert reservations_sweep() == 2
    assert not Reservation.objects.filter(tenant=two.a).exists()
    assert BudgetCounter.objects.get(tenant=two.a).reserved_tokens == 0
    assert _usage_of(two.b) == before
    assert reservations_sweep(tenant_id=two.a.pk) == 0  # B's are dead too, but not A's
    assert release_thread(thread_id=two.tb.pk) == 2


# Retention ---------------------------------------------------------------------------------------


def test_pruning_events_deletes_the_acting_tenants_events_only(
    tenant: Tenant, other_tenant: Tenant
) -> None:
    """The events prefix delete (by thread id), given every tenant's old threads, deletes
    A's old events acting for A and leaves B's."""
    ta, tb = old_thread(tenant), old_thread(other_tenant)
    emit(ta, 3, at=OLD)
    emit(tb, 3, at=OLD)
    before = _values(Event, thread_id=tb.pk)
    everyone = RetentionScope(days=1, tenants=(), rest=True, overridden=())
    with tenant_scope(tenant.pk):
        deleted, more = _prune_events(everyone, NOW, _Budget())
    assert (deleted, more) == (3, False)
    assert not Event.objects.filter(thread=ta).exists()
    assert _values(Event, thread_id=tb.pk) == before


# The registry ----------------------------------------------------------------------------------

ROOT = Path(__file__).resolve().parents[2]
PRODUCT = ("agents", "platform", "threads", "usage", "retention", "replay", "audit",
           "compaction", "console", "connectors", "interop")  # fmt: skip
# Receivers whose ``execute``/``executemany`` runs SQL: a cursor, a psycopg connection.
SQL_RECEIVERS = ("conn", "connection", "raw")


def _module(path: Path) -> str:
    """The module's import name (the platform's packages import from platform/)."""
    parts = list(path.relative_to(ROOT).with_suffix("").parts)
    if parts[0] == "platform":
        parts = parts[1:]
    if parts[-1] == "__init__":
        parts = parts[:-1]
    return ".".join(parts)


def _receiver(node: ast.expr) -> str:
    if isinstance(node, ast.Call):  # connection.cursor().execute(...)
        node = node.func
    if isinstance(node, ast.Name):
        return node.id
    if isinstance(node, ast.Attribute):
        return node.attr
    return ""


def _runs_raw_sql(call: ast.Call) -> bool:
    func = call.func
    if isinstance(func, ast.Name):
        return func.id == "RawSQL"
    if not isinstance(func, ast.Attribute):
        return False
    if func.attr in ("raw", "extra", "RawSQL"):
        return True
    if func.attr in ("execute", "executemany"):
        receiver = _receiver(func.value)
        return "cursor" in receiver.lower() or receiver in SQL_RECEIVERS
    return False


def _own_nodes(function: ast.AST) -> Iterator[ast.AST]:
    """The nodes of ``function``'s body, not those of functions or classes defined in it."""
    for child in ast.iter_child_nodes(function):
        if isinstance(child, (ast.FunctionDef, ast.AsyncFunctionDef, ast.ClassDef, ast.Lambda)):
            continue
        yield child
        yield from _own_nodes(child)


def _functions(tree: ast.AST, prefix: str = "") -> Iterator[tuple[str, ast.AST]]:
    for node in ast.iter_child_nodes(tree):
        if isinstance(node, (ast.FunctionDef, ast.AsyncFunctionDef)):
            yield prefix + node.name, node
            yield from _functions(node, f"{prefix}{node.name}.")
        elif isinstance(node, ast.ClassDef):
            yield from _functions(node, f"{prefix}{node.name}.")


def raw_sql_functions() -> set[str]:
    """``module:function`` of every product function (not tests, not migrations) that runs
    hand-written SQL itself."""
    found = set()
    for top in PRODUCT:
        for path in sorted((ROOT / top).rglob("*.py")):
            if {"migrations", "tests"} & set(path.relative_to(ROOT).parts):
                continue
            tree = ast.parse(path.read_text(), filename=str(path))
            for name, function in _functions(tree):
                if any(isinstance(node, ast.Call) and _runs_raw_sql(node)
                       for node in _own_nodes(function)):  # fmt: skip
                    found.add(f"{_module(path)}:{name}")
    return found


def test_every_function_with_raw_sql_is_covered_or_exempt() -> None:
    """Every product function with hand-written SQL has a test here (or a reason it needs
    none), and every entry of the registry names a function that still runs such SQL and a
    test that exists."""
    found = raw_sql_functions()
    assert len(found) >= 40, "the source walk found too few functions: is it reading the tree?"
    registered = set(COVERED) | set(EXEMPT)
    assert not set(COVERED) & set(EXEMPT)
    assert sorted(found - registered) == [], "hand-written SQL with no tenant-wall test"
    assert sorted(registered - found) == [], "registry entries for functions with no raw SQL"
    tests = {name for name, value in globals().items() if name.startswith("test_")
             and callable(value)}  # fmt: skip
    assert sorted(set(COVERED.values()) - tests) == []
    reads = {key.split(":")[1] for key, test in COVERED.items()
             if test == "test_a_read_by_id_answers_for_the_acting_tenants_rows_only"}  # fmt: skip
    assert reads == set(READS)


def test_the_source_walk_finds_each_kind_of_raw_sql() -> None:
    """The walk recognises a cursor's statement, a psycopg connection's, ``.raw()``,
    ``RawSQL`` and ``.extra()``, in functions and methods, and skips what runs no SQL."""
    source = (
        "def a():\n    with connection.cursor() as cursor:\n        cursor.execute('x')\n"
        "def b(conn):\n    conn.execute('x')\n"
        "def c():\n    return Thread.objects.raw('x')\n"
        "def d():\n    return RawSQL('x', [])\n"
        "def e():\n    return Turn.objects.extra(where=['x'])\n"
        "class F:\n    def g(self):\n        connection.cursor().executemany('x', [])\n"
        "def h(pipe):\n    pipe.execute()\n"
        "def i():\n    def inner(cur_sor):\n        pass\n    return 1\n"
    )
    tree = ast.parse(source)
    found = {name for name, function in _functions(tree)
             if any(isinstance(node, ast.Call) and _runs_raw_sql(node)
                    for node in _own_nodes(function))}  # fmt: skip
    assert found == {"a", "b", "c", "d", "e", "F.g"}

"""Scheduled effects in process (real PostgreSQL and Redis; deliveries are recorded instead of
sent, and the test fires them): scheduling and its checks, exactly-once firing, failures,
cancel, run now and replay, the sweep with an advanced clock, retention, and the API.
Through real workers (a kill -9 among 1,000 effects): test_effects_e2e.py."""

from __future__ import annotations

import threading
from collections.abc import Callable, Iterator
from typing import Any

import pytest
from django.db import connection
from rest_framework.test import APIClient

from agents.registry import effect, use_registry
from common.errors import Conflict, ValidationFailed
from common.time import now_us
from tenancy.models import Role, Tenant
from tests.factories import make_thread
from tests.support import ContextThread
from threads.models import Event, Message, ScheduledEffect, Thread, Turn
from threads.runtime import effects as firing_module
from threads.runtime.effects import effect_fire
from threads.services import effects as effects_module
from threads.services.effects import (
    KEEP_PER_THREAD,
    effect_cancel,
    effect_schedule,
    effects_prune,
    effects_sweep,
)
from threads.services.values import value_get
from threads.state import ThreadState

pytestmark = pytest.mark.django_db
HOUR_US = 3600 * 1_000_000
TEXT_ARGS = {"type": "object", "properties": {"text": {"type": "string"}}, "required": ["text"]}


@pytest.fixture
def fired(tenant: Tenant) -> Iterator[list[tuple[str, Any]]]:
    """Registry effects ``remind`` (queues a message, notes its args), ``explode`` (writes
    then raises) and ``ping`` (no args); what ran is recorded."""
    ran: list[tuple[str, Any]] = []
    with use_registry():

        @effect(description="Remind the user.", args=TEXT_ARGS)
        def remind(state: ThreadState, args: dict[str, Any]) -> None:
            ran.append(("remind", args))
            state.queue_message(role="user", content=f"Reminder: {args['text']}")

        @effect(description="Fails.")
        def explode(state: ThreadState) -> None:
            ran.append(("explode", None))
            state.set_value("half_written", True)
            raise RuntimeError("the mail server is down")

        @effect(description="Pings.")
        def ping(state: ThreadState) -> None:
            ran.append(("ping", None))
            state.inject_message(role="system", content="ping")

        yield ran


@pytest.fixture
def sent(monkeypatch: pytest.MonkeyPatch) -> list[tuple[str, float]]:
    """Deliveries (effect id, countdown) instead of broker messages."""
    deliveries: list[tuple[str, float]] = []

    def send(effect_id: str, countdown_s: float = 0.0) -> bool:
        deliveries.append((effect_id, countdown_s))
        return True

    monkeypatch.setattr(effects_module, "effect_send", send)
    return deliveries


@pytest.fixture
def clock(monkeypatch: pytest.MonkeyPatch) -> Callable[[int], None]:
    """Advance the effects' clock by some microseconds (nothing sleeps)."""
    offset = [0]
    for module in (effects_module, firing_module):
        monkeypatch.setattr(module, "now_us", lambda: now_us() + offset[0])

    def advance(us: int) -> None:
        offset[0] += us

    return advance


def _due(row: ScheduledEffect) -> None:
    ScheduledEffect.objects.filter(pk=row.pk).update(scheduled_at=now_us() - 1)


def test_an_effect_is_scheduled_pending_with_its_event(
    tenant: Tenant, fired: list[tuple[str, Any]]
) -> None:
    thread = make_thread(tenant)

    effect_id = ThreadState(thread).schedule_effect("remind", {"text": "tea"}, 30_000)

    row = ScheduledEffect.objects.get(pk=effect_id)
    assert (row.status, row.name, row.args, row.attempts) == (
        "pending",
        "remind",
        {"text": "tea"},
        0,
    )
    assert row.scheduled_at - row.created_at == 30_000_000
    scheduled = Event.objects.get(thread=thread, type="effect.scheduled").payload
    assert (scheduled["id"], scheduled["name"]) == (effect_id, "remind")
    assert ThreadState(thread).get_scheduled_effects() == [{
        "id": effect_id, "name": "remind", "args": {"text": "tea"},
        "scheduledAt": row.scheduled_at, "createdAt": row.created_at,
    }]  # fmt: skip
    assert ThreadState(thread).get_scheduled_effects("ping") == []
    assert fired == []


@pytest.mark.parametrize(
    ("name", "args", "delay", "field"),
    [
        ("nope", None, 0, "name"),
        ("remind", {"text": 5}, 0, "args"),
        ("remind", None, 0, "args"),
        ("remind", {"text": "x"}, -1, "delay_ms"),
        ("remind", {"text": "x"}, "soon", "delay_ms"),
    ],
)
def test_a_bad_schedule_is_refused_naming_the_field(
    tenant: Tenant, fired: list[tuple[str, Any]], name: str, args: Any, delay: Any, field: str
) -> None:
    thread = make_thread(tenant)

    with pytest.raises(ValidationFailed) as refused:
        ThreadState(thread).schedule_effect(name, args, delay)

    assert refused.value.field == field
    assert not ScheduledEffect.objects.exists()


def test_a_due_effect_fires_once_with_an_at_rest_state_and_its_message_starts_a_turn(
    tenant: Tenant, fired: list[tuple[str, Any]], sent: list[tuple[str, float]]
) -> None:
    thread = make_thread(tenant)
    row = effect_schedule(thread=thread, name="remind", args={"text": "tea"}, delay_ms=60_000)

    early = effect_fire(row.pk)
    _due(row)
    first, again = effect_fire(row.pk), effect_fire(row.pk)

    assert (early, first, again) == (None, "completed", None)
    assert fired == [("remind", {"text": "tea"})]
    row.refresh_from_db()
    assert (row.status, row.attempts, row.error) == ("completed", 1, "")
    turn = Turn.objects.get(thread=thread)
    assert (turn.source, turn.payload["content"]) == ("effect", "Reminder: tea")
    assert turn.payload["metadata"]["scheduled_effect"] == {"id": str(row.pk), "name": "remind"}
    assert Event.objects.filter(thread=thread, type="effect.completed").count() == 1


@pytest.mark.django_db(transaction=True)
def test_concurrent_deliveries_run_the_handler_once(
    tenant: Tenant, fired: list[tuple[str, Any]]
) -> None:
    thread = make_thread(tenant)
    row = effect_schedule(thread=thread, name="ping", delay_ms=0)
    start = threading.Barrier(4)
    outcomes: list[str | None] = []

    def deliver() -> None:
        try:
            start.wait()
            outcomes.append(effect_fire(row.pk))
        finally:
            connection.close()

    # Each thread sees the test's registry (a context variable) through a copy of its context.
    workers = [ContextThread(target=deliver) for _ in range(4)]
    for worker in workers:
        worker.start()
    for worker in workers:
        worker.join()

    assert sorted(map(str, outcomes)) == ["None", "None", "None", "completed"]
    assert fired == [("ping", None)]
    assert Message.objects.filter(thread=thread).count() == 1


def test_a_handler_error_fails_the_effect_and_leaves_nothing_half_written(
    tenant: Tenant, fired: list[tuple[str, Any]]
) -> None:
    thread = make_thread(tenant)
    row = effect_schedule(thread=thread, name="explode", delay_ms=0)

    outcome = effect_fire(row.pk)

    row.refresh_from_db()
    assert (outcome, row.status) == ("failed", "failed")
    assert row.error == "RuntimeError: the mail server is down"
    assert value_get(thread=thread, key="half_written") is None
    failed = Event.objects.get(thread=thread, type="effect.failed").payload
    assert failed["error"] == "RuntimeError: the mail server is down"
    assert effect_fire(row.pk) is None  # no automatic retry


def test_arguments_are_checked_again_when_the_effect_runs(
    tenant: Tenant, fired: list[tuple[str, Any]]
) -> None:
    thread = make_thread(tenant)
    row = effect_schedule(thread=thread, name="remind", args={"text": "tea"}, delay_ms=0)
    ScheduledEffect.objects.filter(pk=row.pk).update(args={"text": 7})

    effect_fire(row.pk)

    row.refresh_from_db()
    assert row.status == "failed"
    assert "text" in row.error
    assert fired == []


def test_removal_before_the_deadline_prevents_firing(
    tenant: Tenant, fired: list[tuple[str, Any]]
) -> None:
    thread = make_thread(tenant)
    state = ThreadState(thread)
    effect_id = state.schedule_effect("ping", None, 1000)

    removed, again = (
        state.remove_scheduled_effect(effect_id),
        state.remove_scheduled_effect(effect_id),
    )
    ScheduledEffect.objects.filter(pk=effect_id).update(scheduled_at=now_us() - 1)

    assert (removed, again) == (True, False)
    assert effect_fire(effect_id) is None
    assert ScheduledEffect.objects.get(pk=effect_id).status == "agent_canceled"
    assert state.remove_scheduled_effect("not-an-id") is False
    assert Event.objects.filter(thread=thread, type="effect.removed").count() == 1
    assert fired == []


def test_a_two_hour_effect_whose_delivery_was_never_sent_is_fired_by_the_sweep(
    tenant: Tenant, fired: list[tuple[str, Any]], sent: list[tuple[str, float]],
    clock: Callable[[int], None],
) -> None:  # fmt: skip
    thread = make_thread(tenant)
    row = effect_schedule(thread=thread, name="ping", delay_ms=2 * 3600 * 1000)
    near = effect_schedule(thread=thread, name="ping", delay_ms=1000)

    before = effects_sweep()
    _due(near)
    effect_fire(near.pk)  # the near one ran on its own delivery
    clock(2 * HOUR_US - 500_000)  # half a second before it is due: the sweep sends it now
    swept = effects_sweep()
    clock(600_000)
    outcome = effect_fire(row.pk)

    assert before == 0  # the far one is not due, the near one has its own delivery
    assert swept == 1
    assert sent[-1][0] == str(row.pk)
    assert 0 < sent[-1][1] <= 0.5
    assert outcome == "completed"


def test_the_sweep_resends_an_effect_whose_delivery_was_lost(
    tenant: Tenant, fired: list[tuple[str, Any]], sent: list[tuple[str, float]],
    clock: Callable[[int], None],
) -> None:  # fmt: skip
    thread = make_thread(tenant)
    row = effect_schedule(thread=thread, name="ping", delay_ms=100)

    clock(1_000_000)  # due, but within the grace its own delivery has
    within_grace = effects_sweep()
    clock(5_000_000)
    past_grace = effects_sweep()

    assert (within_grace, past_grace) == (0, 1)
    assert sent[-1][0] == str(row.pk)


def test_history_is_kept_as_the_digest_says(tenant: Tenant, fired: list[tuple[str, Any]]) -> None:
    thread = make_thread(tenant)
    now = now_us()
    day = 24 * HOUR_US

    def row(status: str, age_us: int, **fields: Any) -> ScheduledEffect:
        return ScheduledEffect.objects.create(
            tenant=tenant, thread=thread, name="ping", scheduled_at=now - age_us,
            status=status, completed_at=now - age_us, **fields,
        )  # fmt: skip

    kept = [
        row("completed", 29 * day),
        row("failed", 23 * 3600 * 1_000_000),
        row("pending", 90 * day),
    ]
    gone = [row("completed", 31 * day), row("failed", 25 * 3600 * 1_000_000)]

    deleted = effects_prune(now)

    assert deleted == len(gone)
    assert set(ScheduledEffect.objects.values_list("pk", flat=True)) == {r.pk for r in kept}
    assert KEEP_PER_THREAD == 1000


def test_the_newest_thousand_finished_effects_of_a_thread_are_kept(
    tenant: Tenant, fired: list[tuple[str, Any]]
) -> None:
    thread = make_thread(tenant)
    now = now_us()
    ScheduledEffect.objects.bulk_create(
        ScheduledEffect(tenant=tenant, thread=thread, name="ping", scheduled_at=now,
                        created_at=now - index, status="completed", completed_at=now)
        for index in range(KEEP_PER_THREAD + 5)
    )  # fmt: skip

    deleted = effects_prune(now)

    assert deleted == 5
    assert ScheduledEffect.objects.count() == KEEP_PER_THREAD


# The API ------------------------------------------------------------------------------------


@pytest.fixture
def api(tenant: Tenant, client_for: Callable[..., APIClient]) -> APIClient:
    return client_for(tenant, Role.MEMBER)


def _url(thread: Thread, row: ScheduledEffect | None = None, action: str = "") -> str:
    base = f"/api/v1/threads/{thread.id}/effects"
    if row is not None:
        base += f"/{row.pk}"
    return base + (f"/{action}" if action else "")


def test_the_api_lists_filters_cancels_runs_and_replays(
    tenant: Tenant, api: APIClient, fired: list[tuple[str, Any]], sent: list[tuple[str, float]]
) -> None:
    thread = make_thread(tenant)
    later = effect_schedule(thread=thread, name="ping", delay_ms=3_600_000)
    soon = effect_schedule(thread=thread, name="remind", args={"text": "tea"}, delay_ms=1000)

    listed = api.get(_url(thread)).json()
    only = api.get(_url(thread), {"name": "remind"}).json()
    ran = api.post(_url(thread, soon, "run")).json()
    effect_fire(soon.pk)
    replayed = api.post(_url(thread, soon, "replay"))
    cancelled = api.delete(_url(thread, later))
    twice = api.delete(_url(thread, later))
    replay_pending = api.post(
        _url(thread, ScheduledEffect.objects.get(replayed_from=soon), "replay")
    )

    assert [item["name"] for item in listed["results"]] == ["remind", "ping"]
    assert (listed["next"], listed["previous"]) == (None, None)
    assert [item["id"] for item in only["results"]] == [str(soon.pk)]
    assert (ran["action"], ran["effect"]["manual_run"]) == ("ran", True)
    assert ran["effect"]["scheduled_at"] <= now_us()  # due now
    assert replayed.status_code == 201
    assert replayed.json()["replayed_from"] == str(soon.pk)
    assert cancelled.json()["status"] == "user_canceled"
    assert twice.status_code == 409
    assert replay_pending.status_code == 409
    assert fired == [("remind", {"text": "tea"})]


@pytest.fixture
def finished(
    tenant: Tenant, fired: list[tuple[str, Any]], sent: list[tuple[str, float]]
) -> ScheduledEffect:
    """An effect that ran: ``run`` and ``replay`` make a new one from it."""
    row = effect_schedule(thread=make_thread(tenant), name="ping", delay_ms=0)
    effect_fire(row.pk)
    return row


def test_a_finished_effect_is_replayed_by_run(api: APIClient, finished: ScheduledEffect) -> None:
    row, thread = finished, finished.thread

    ran = api.post(_url(thread, row, "run")).json()

    assert ran["action"] == "replayed"
    replay = ScheduledEffect.objects.get(pk=ran["replayed_id"])
    assert (replay.replayed_from_id, replay.manual_run, replay.status) == (row.pk, True, "pending")


def test_a_repeated_replay_or_run_with_one_idempotency_key_makes_one_new_effect(
    api: APIClient, finished: ScheduledEffect
) -> None:
    row, thread = finished, finished.thread

    replays = [api.post(_url(thread, row, "replay"), HTTP_IDEMPOTENCY_KEY="r-1") for _ in "ab"]
    runs = [api.post(_url(thread, row, "run"), HTTP_IDEMPOTENCY_KEY="r-2") for _ in "ab"]

    assert [r.status_code for r in replays] == [201, 201]
    assert replays[1].json() == replays[0].json()
    assert [r.status_code for r in runs] == [200, 200]
    assert runs[1].json() == runs[0].json()
    assert runs[0].json()["action"] == "replayed"
    made = ScheduledEffect.objects.filter(replayed_from=row).values_list("pk", flat=True)
    assert sorted(str(pk) for pk in made) == sorted(
        [replays[0].json()["id"], runs[0].json()["replayed_id"]]
    )


def test_unknown_effects_and_bad_filters_are_answered_plainly(
    tenant: Tenant, api: APIClient, fired: list[tuple[str, Any]]
) -> None:
    thread = make_thread(tenant)
    missing = "01a20000-0000-7000-8000-000000000000"

    assert api.get(f"{_url(thread)}/{missing}").status_code == 404
    assert api.delete(f"{_url(thread)}/{missing}").status_code == 404
    assert api.post(f"{_url(thread)}/{missing}/run").status_code == 404
    assert api.get(_url(thread), {"status": "sleeping"}).status_code == 400


def test_an_effect_cannot_be_scheduled_on_a_terminated_thread(
    tenant: Tenant, fired: list[tuple[str, Any]]
) -> None:
    thread = make_thread(tenant, terminated_at=now_us())

    with pytest.raises(Conflict):
        effect_schedule(thread=thread, name="ping")


def test_a_handler_writes_messages_tagged_with_its_effect(
    tenant: Tenant, fired: list[tuple[str, Any]]
) -> None:
    thread = make_thread(tenant)
    row = effect_schedule(thread=thread, name="ping", delay_ms=0)

    effect_fire(row.pk)

    message = Message.objects.get(thread=thread)
    assert message.metadata["scheduled_effect"] == {"id": str(row.pk), "name": "ping"}
    assert effect_cancel(thread=thread, effect_id=row.pk, by_agent=False) is None

"""``retention.prune``: what each tenant's policy says is past retention goes, in bounded
batches; what is durable (messages, KV, files of live threads, usage rows) stays."""

from __future__ import annotations

import pytest
from pytest_django.fixtures import Settings

from common.time import now_us
from retention.models import RetentionPolicy
from retention.prune import retention_prune
from retention.tasks import prune
from tenancy.models import Tenant
from tests.factories import make_thread
from tests.retention.support import (
    DAY_US,
    NOW,
    OLD,
    RECENT,
    emit,
    finished_turn,
    log_at,
    old_thread,
)
from threads.models import (
    Action,
    Event,
    IdempotencyKey,
    Log,
    Message,
    Thread,
    ThreadFile,
    ThreadValue,
    Turn,
    WebhookDelivery,
)
from threads.services.events import event_pruned_through
from threads.services.files import file_write
from threads.services.idempotency import KEY_TTL_US
from threads.services.messages import message_inject
from threads.services.values import value_set
from threads.services.webhooks import endpoint_save
from usage.ledger import Entry, record
from usage.models import LedgerEntry

pytestmark = pytest.mark.django_db


def _one_day(tenant: Tenant, **fields: int) -> RetentionPolicy:
    days = {"events_days": 1, "logs_days": 1, "webhook_deliveries_days": 1,
            "finished_turns_days": 1, **fields}  # fmt: skip
    return RetentionPolicy.objects.create(tenant=tenant, **days)


def _delivery(tenant: Tenant, *, status: str, at: int) -> WebhookDelivery:
    endpoint, _secret = endpoint_save(
        tenant=tenant, data={"url": "https://example.com/hook", "event_types": ["turn.completed"]}
    )
    return WebhookDelivery.objects.create(
        tenant=tenant, endpoint=endpoint, event_type="turn.completed", payload={}, status=status,
        created_at=at,
    )  # fmt: skip


def test_a_one_day_policy_prunes_old_history_and_keeps_recent_history(tenant: Tenant) -> None:
    _one_day(tenant)
    thread = old_thread(tenant)
    old_events = emit(thread, 3, at=OLD)
    recent_events = emit(thread, 2, at=RECENT)
    logged = old_thread(tenant)  # a log row writes an event too: another thread's
    old_log, recent_log = log_at(logged, OLD), log_at(logged, RECENT)
    delivered = _delivery(tenant, status="delivered", at=OLD)
    failed = _delivery(tenant, status="failed", at=OLD)
    fresh = _delivery(tenant, status="delivered", at=RECENT)

    report = retention_prune()

    kept = list(Event.objects.filter(thread=thread).values_list("sequence", flat=True))
    assert old_events == [1, 2, 3]
    assert kept == recent_events == [4, 5]
    assert event_pruned_through(thread=thread) == 3
    assert list(Log.objects.filter(thread=logged)) == [recent_log]
    assert not Log.objects.filter(pk=old_log.pk).exists()
    assert set(WebhookDelivery.objects.for_tenant(tenant)) == {fresh}
    assert not WebhookDelivery.objects.filter(pk__in=[delivered.pk, failed.pk]).exists()
    assert report.deleted["events"] == 3
    assert report.deleted["logs"] == 1
    assert report.deleted["webhook_deliveries"] == 2
    assert report.unfinished == set()


def test_pending_and_sending_deliveries_are_never_pruned(tenant: Tenant) -> None:
    _one_day(tenant)
    waiting = {_delivery(tenant, status=status, at=OLD) for status in ("pending", "sending")}

    retention_prune()

    assert set(WebhookDelivery.objects.for_tenant(tenant)) == waiting


def test_messages_kv_and_files_of_live_threads_are_kept(tenant: Tenant) -> None:
    _one_day(tenant, terminated_threads_days=1)
    thread = old_thread(tenant)
    message = message_inject(thread=thread, role="user", content="keep me")
    Message.objects.filter(pk=message.pk).update(created_at=OLD)
    value_set(thread=thread, key="plan", value={"keep": True})
    ThreadValue.objects.filter(thread=thread).update(updated_at=OLD)
    file_write(thread=thread, path="/notes.txt", data=b"keep", mime_type="text/plain")
    ThreadFile.objects.filter(thread=thread).update(created_at=OLD, updated_at=OLD)

    retention_prune()

    assert list(Message.objects.filter(thread=thread)) == [message]
    assert ThreadValue.objects.filter(thread=thread, key="plan").exists()
    assert ThreadFile.objects.filter(thread=thread, path="/notes.txt").exists()


def test_another_tenant_on_the_defaults_is_untouched(tenant: Tenant, other_tenant: Tenant) -> None:
    _one_day(tenant)
    mine, theirs = old_thread(tenant), old_thread(other_tenant)
    emit(mine, 2, at=OLD)
    emit(theirs, 2, at=OLD)
    log_at(theirs, OLD)
    _delivery(other_tenant, status="delivered", at=OLD)
    finished_turn(theirs, ended_at=OLD, position=1)
    finished_turn(theirs, ended_at=RECENT, position=2)
    before = _rows_of(other_tenant)

    retention_prune()

    assert Event.objects.filter(thread=mine).count() == 0
    assert _rows_of(other_tenant) == before
    assert [len(rows) for rows in before] == [3, 1, 1, 2]  # a log row writes an event too


def _rows_of(tenant: Tenant) -> list[list[object]]:
    return [
        list(model.objects.for_tenant(tenant).order_by("pk").values_list("pk", flat=True))
        for model in (Event, Log, WebhookDelivery, Turn)
    ]


def test_the_defaults_apply_to_tenants_without_a_policy(tenant: Tenant, settings: Settings) -> None:
    settings.RETENTION_LOGS_DAYS = 1
    thread = old_thread(tenant)
    log_at(thread, OLD)
    recent = log_at(thread, RECENT)

    retention_prune()

    assert list(Log.objects.filter(thread=thread)) == [recent]


def test_zero_days_in_a_policy_keeps_forever_over_the_default(
    tenant: Tenant, settings: Settings
) -> None:
    settings.RETENTION_LOGS_DAYS = 1
    RetentionPolicy.objects.create(tenant=tenant, logs_days=0)
    thread = old_thread(tenant)
    log_at(thread, NOW - 400 * DAY_US)

    retention_prune()

    assert Log.objects.filter(thread=thread).count() == 1


def test_events_go_only_as_a_prefix_of_the_log(tenant: Tenant) -> None:
    """An old event behind a younger one (clocks of two writers) waits for it: the kept log
    stays gap-free from its first sequence."""
    _one_day(tenant)
    thread = old_thread(tenant)
    emit(thread, 2, at=OLD)
    emit(thread, 1, at=RECENT)
    emit(thread, 2, at=OLD)

    retention_prune()

    kept = list(Event.objects.filter(thread=thread).values_list("sequence", flat=True))
    assert kept == [3, 4, 5]
    assert event_pruned_through(thread=thread) == 2


def test_finished_turns_go_but_each_threads_last_one_stays(tenant: Tenant) -> None:
    _one_day(tenant)
    thread = old_thread(tenant)
    oldest = finished_turn(thread, ended_at=OLD - 10, position=1)
    Action.objects.create(
        tenant=tenant, thread=thread, turn=oldest, kind="approval", tool_call_id="c",
        tool_name="refund", status="approved", expires_at=OLD,
    )  # fmt: skip
    older = finished_turn(thread, ended_at=OLD - 5, position=2)
    last = finished_turn(thread, ended_at=OLD, position=3)
    running = Turn.objects.create(
        tenant=tenant, thread=thread, position=4, kind="message", source="message",
        status="running", started_at=OLD,
    )  # fmt: skip
    message = message_inject(thread=thread, role="user", content="written by a turn")
    Message.objects.filter(pk=message.pk).update(turn_id=oldest.pk)

    report = retention_prune()

    assert set(Turn.objects.filter(thread=thread)) == {last, running}
    assert not Turn.objects.filter(pk__in=[oldest.pk, older.pk]).exists()
    assert not Action.objects.filter(thread=thread).exists()
    assert Message.objects.filter(pk=message.pk, turn_id=oldest.pk).exists()
    assert report.deleted["turns"] == 2


def test_expired_idempotency_keys_are_pruned_for_every_tenant(
    tenant: Tenant, other_tenant: Tenant
) -> None:
    now = now_us()
    expired = IdempotencyKey.objects.create(
        tenant=other_tenant, key="old", request_hash="h", created_at=now - KEY_TTL_US - 1
    )
    live = IdempotencyKey.objects.create(
        tenant=tenant, key="live", request_hash="h", created_at=now - KEY_TTL_US + 60_000_000
    )

    report = retention_prune(now=now)

    assert list(IdempotencyKey.objects.all()) == [live]
    assert not IdempotencyKey.objects.filter(pk=expired.pk).exists()
    assert report.deleted["idempotency_keys"] == 1


def test_threads_terminated_past_the_policy_are_deleted_whole(tenant: Tenant) -> None:
    _one_day(tenant, terminated_threads_days=1)
    gone = old_thread(tenant)
    message_inject(thread=gone, role="user", content="goes with its thread")
    Thread.objects.filter(pk=gone.pk).update(terminated_at=OLD)
    child = make_thread(tenant, parent=gone, root_id=gone.pk, terminated_at=OLD)
    lately = old_thread(tenant, terminated_at=RECENT)
    live = old_thread(tenant)

    report = retention_prune()

    assert set(Thread.objects.for_tenant(tenant)) == {lately, live}
    assert not Thread.objects.filter(pk=child.pk).exists()
    assert not Message.objects.filter(thread_id=gone.pk).exists()
    assert report.deleted["threads"] == 2


def test_terminated_threads_are_kept_by_default(tenant: Tenant) -> None:
    thread = old_thread(tenant, terminated_at=NOW - 1000 * DAY_US)

    retention_prune()

    assert Thread.objects.filter(pk=thread.pk).exists()


def test_usage_rows_are_untouched(tenant: Tenant) -> None:
    _one_day(tenant, terminated_threads_days=1)
    thread = old_thread(tenant, terminated_at=OLD)
    record(Entry(tenant_id=tenant.pk, key="call-1", kind="model", agent="helper",
                 thread_id=thread.pk, input_tokens=7, cost_micros=1))  # fmt: skip
    before = list(LedgerEntry.objects.for_tenant(tenant).values())

    retention_prune()

    assert not Thread.objects.filter(pk=thread.pk).exists()
    assert list(LedgerEntry.objects.for_tenant(tenant).values()) == before != []


def test_a_backlog_drains_in_bounded_batches_over_several_runs(
    tenant: Tenant, settings: Settings
) -> None:
    settings.RETENTION_BATCH_ROWS = 10
    settings.RETENTION_MAX_BATCHES = 3
    settings.RETENTION_EVENTS_DAYS = settings.RETENTION_LOGS_DAYS = 1
    thread, logged = old_thread(tenant), old_thread(tenant)
    emit(thread, 25, at=OLD)
    for _ in range(15):
        log_at(logged, OLD)

    first = retention_prune()
    left_after_first = Event.objects.filter(thread=thread).count()
    second = retention_prune()

    # Run 1: events take one statement to find the thread and two deletes of 10 (the budget:
    # the run stops there); logs two deletes (10, then the last 5).
    assert (first.deleted["events"], first.deleted["logs"]) == (20, 15)
    assert first.unfinished == {"events"}
    assert left_after_first == 5
    assert (second.deleted["events"], second.deleted["logs"]) == (5, 0)
    assert second.unfinished == set()
    assert Event.objects.filter(thread=thread).count() == 0
    assert event_pruned_through(thread=thread) == 25


def test_the_beat_task_is_scheduled_and_returns_what_it_deleted(
    tenant: Tenant, settings: Settings
) -> None:
    _one_day(tenant)
    thread = old_thread(tenant)
    emit(thread, 2, at=OLD)

    deleted = prune()

    assert deleted == 2
    assert settings.CELERY_BEAT_SCHEDULE["retention-prune"] == {
        "task": "retention.prune", "schedule": float(settings.RETENTION_PRUNE_INTERVAL_S),
    }  # fmt: skip

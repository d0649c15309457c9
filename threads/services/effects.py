"""Scheduled effects (spec Threads §5, DIGEST §9): rows are the truth, the broker is a hint.

``effect_schedule`` stores a ``pending`` row in the caller's transaction and, on commit,
sends ``threads.fire_effect`` with an ETA when the deadline is near (within
``EFFECT_ETA_HORIZON_S``); beat's ``sweep_effects`` sends it for every row past its deadline
that no delivery fired (a lost message, a worker crash, a deadline beyond the horizon).

``threads.runtime.effects.effect_fire`` runs one effect exactly once. While a handler runs,
its row is locked, and reads show it ``processing``.
"""

from __future__ import annotations

import json
import logging
from collections.abc import Sequence
from typing import Any, Final

from celery import current_app
from django.conf import settings
from django.db import connection, transaction
from django.db.models import F, Q, QuerySet

from agents.registry import EffectEntry, current_registry
from agents.schemas import ArgumentsInvalid
from common.duties import duty_wake
from common.errors import Conflict, NotFound, ValidationFailed
from common.outages import OUTAGE_ERRORS
from common.payloads import payload_check
from common.time import now_us
from threads.events import Outbox, publish
from threads.models import EffectStatus, ScheduledEffect, Thread

logger = logging.getLogger(__name__)

FIRE_TASK: Final = "threads.fire_effect"
# Beat's sweep of effects: every delivery sent opens it again (common.duties).
SWEEP_TASK: Final = "threads.sweep_effects"
MAX_DELAY_MS: Final = 366 * 86_400 * 1000  # a year and a day
MAX_ARGS_BYTES: Final = 64 * 1024
SWEEP_BATCH: Final = 1000
# History kept (DIGEST §9): finished rows 30 days, failed ones 24 h, the newest 1000 per thread.
KEEP_FINISHED_US: Final = 30 * 86_400 * 1_000_000
KEEP_FAILED_US: Final = 86_400 * 1_000_000
KEEP_PER_THREAD: Final = 1000
FINISHED: Final = (
    EffectStatus.COMPLETED, EffectStatus.FAILED, EffectStatus.AGENT_CANCELED,
    EffectStatus.USER_CANCELED,
)  # fmt: skip


class EffectUnknown(ValidationFailed):
    code = "unknown_effect"


def effect_entry(*, thread: Thread, name: str) -> EffectEntry:
    """The registry effect ``name`` as the thread's tenant sees it; EffectUnknown otherwise."""
    view = current_registry().visible_to(thread.tenant.slug)
    found = view.effect(name) if isinstance(name, str) else None
    if found is None:
        known = ", ".join(view.effect_names()) or "none"
        raise EffectUnknown(f"unknown effect {name!r} (this tenant's effects: {known})",
                            field="name")  # fmt: skip
    return found


def effect_json(row: ScheduledEffect, *, processing: bool = False) -> dict[str, Any]:
    """An effect as the API shows it (``processing``: its handler runs now)."""
    return {
        "id": str(row.pk),
        "thread_id": str(row.thread_id),
        "name": row.name,
        "args": row.args,
        "status": EffectStatus.PROCESSING if processing else row.status,
        "scheduled_at": row.scheduled_at,
        "created_at": row.created_at,
        "attempts": row.attempts,
        "error": row.error or None,
        "completed_at": row.completed_at,
        "manual_run": row.manual_run,
        "replayed_from": str(row.replayed_from_id) if row.replayed_from_id else None,
    }


def effect_event(row: ScheduledEffect, **extra: Any) -> dict[str, Any]:
    """The payload of the ``effect.*`` events."""
    return {"id": str(row.pk), "name": row.name, "status": row.status, **extra}


# Scheduling -----------------------------------------------------------------------------------


def effect_schedule(
    *, thread: Thread, name: str, args: Any = None, delay_ms: Any = 0,
    outbox: Outbox | None = None,
) -> ScheduledEffect:  # fmt: skip
    """state.scheduleEffect: a pending row due in ``delay_ms`` (its arguments checked against
    the effect's schema now, and again when it runs), with ``effect.scheduled``; joins the
    caller's transaction and sends the delivery on commit. ValidationFailed names the field."""
    entry = effect_entry(thread=thread, name=name)
    if (
        isinstance(delay_ms, bool)
        or not isinstance(delay_ms, int | float)
        or not (0 <= delay_ms <= MAX_DELAY_MS)
    ):
        raise ValidationFailed(
            f"delay_ms must be a number of milliseconds from 0 to {MAX_DELAY_MS}", field="delay_ms"
        )
    _args_check(entry, args)
    if thread.terminated_at is not None:
        raise Conflict("the thread is terminated; it schedules no more effects")
    now = now_us()
    with transaction.atomic(savepoint=False):
        row = ScheduledEffect.objects.create(
            tenant_id=thread.tenant_id, thread=thread, name=name, args=args,
            scheduled_at=now + int(delay_ms * 1000), created_at=now,
        )  # fmt: skip
        publish(thread, "effect.scheduled", effect_event(row, scheduled_at=row.scheduled_at),
                outbox=outbox)  # fmt: skip
        _deliver_on_commit(row)
    return row


def _args_check(entry: EffectEntry, args: Any) -> None:
    payload_check(args, path="args")
    if len(json.dumps(args, default=str)) > MAX_ARGS_BYTES:
        raise ValidationFailed(f"args above {MAX_ARGS_BYTES} bytes of JSON", field="args")
    try:
        entry.parse_args(args)
    except ArgumentsInvalid as error:
        raise ValidationFailed(
            f"args do not match effect {entry.name!r}: {error.message}", field="args"
        ) from None


def _deliver_on_commit(row: ScheduledEffect) -> None:
    """Send the row's delivery after commit when its deadline is within the horizon; the
    sweep covers the rest (and anything the broker loses)."""
    countdown_s = max(0.0, (row.scheduled_at - now_us()) / 1_000_000)
    if countdown_s > settings.EFFECT_ETA_HORIZON_S:
        return
    effect_id = str(row.pk)
    transaction.on_commit(lambda: effect_send(effect_id, countdown_s), robust=True)


def effect_send(effect_id: str, countdown_s: float = 0.0) -> bool:
    """Enqueue ``fire_effect``; False when the broker is unreachable (the sweep sends it)."""
    duty_wake(SWEEP_TASK)
    try:
        current_app.send_task(FIRE_TASK, args=[effect_id], countdown=countdown_s or None)
    except OUTAGE_ERRORS as error:
        logger.warning("effect %s: delivery not sent (%s); the sweep will", effect_id, error)
        return False
    return True


# Reading and cancelling ---------------------------------------------------------------------


def effects_of(
    *, thread: Thread, name: str | None = None, status: str | None = None
) -> QuerySet[ScheduledEffect]:
    """The thread's effects, soonest first; ``name``/``status`` filter."""
    rows = ScheduledEffect.objects.filter(thread_id=thread.pk)
    if name is not None:
        rows = rows.filter(name=name)
    if status is not None:
        if status not in EffectStatus.values:
            raise ValidationFailed(
                f"status must be one of {', '.join(EffectStatus.values)}", field="status"
            )
        rows = rows.filter(status=EffectStatus.PENDING if status == "processing" else status)
    return rows.order_by("scheduled_at", "id")


def processing_ids(rows: Sequence[ScheduledEffect]) -> set[Any]:
    """Which pending ``rows`` a handler runs now: their row is locked by its transaction
    (one statement that skips, never waits on, locked rows)."""
    pending = [row.pk for row in rows if row.status == EffectStatus.PENDING]
    if not pending:
        return set()
    with transaction.atomic(), connection.cursor() as cursor:
        cursor.execute(
            "SELECT id FROM threads_scheduledeffect WHERE id = ANY(%s) FOR KEY SHARE SKIP LOCKED",
            [pending],
        )
        free = {row[0] for row in cursor.fetchall()}
    return set(pending) - free


def effects_json(rows: Sequence[ScheduledEffect]) -> list[dict[str, Any]]:
    busy = processing_ids(rows)
    return [effect_json(row, processing=row.pk in busy) for row in rows]


def effect_get(*, thread: Thread, effect_id: Any) -> ScheduledEffect:
    found = ScheduledEffect.objects.filter(thread_id=thread.pk, pk=effect_id).first()
    if found is None:
        raise NotFound("no such effect on this thread")
    return found


def effect_cancel(*, thread: Thread, effect_id: Any, by_agent: bool) -> ScheduledEffect | None:
    """Cancel a pending effect (``agent_canceled`` from state.removeScheduledEffect,
    ``user_canceled`` from the API), with ``effect.removed``. None when it is not pending
    (ran, runs now, or was cancelled already); NotFound when there is none."""
    status = EffectStatus.AGENT_CANCELED if by_agent else EffectStatus.USER_CANCELED
    with transaction.atomic():
        row = _locked(thread, effect_id)
        if row is None or row.status != EffectStatus.PENDING:  # None: its handler runs now
            return None
        row.status, row.completed_at = status, now_us()
        row.save(update_fields=["status", "completed_at"])
        publish(thread, "effect.removed", effect_event(row))
    return row


def _locked(thread: Thread, effect_id: Any) -> ScheduledEffect | None:
    """The thread's effect ``effect_id``, locked for the caller's transaction; None while its
    handler runs (it holds the lock). NotFound when there is none."""
    row = (
        ScheduledEffect.objects.select_for_update(skip_locked=True)
        .filter(thread_id=thread.pk, pk=effect_id)
        .first()
    )
    if row is None:
        effect_get(thread=thread, effect_id=effect_id)  # NotFound, or it is locked
    return row


def effect_run_now(*, thread: Thread, effect_id: Any) -> tuple[str, ScheduledEffect]:
    """``POST …/effects/{id}/run``: a pending effect is due now (``ran``, ``manual_run``); a
    finished one is replayed (:func:`effect_replay`, ``replayed``). Conflict while it runs."""
    with transaction.atomic():
        row = _locked(thread, effect_id)
        if row is None:
            raise Conflict(f"effect {effect_id} is processing now")
        if row.status != EffectStatus.PENDING:
            return "replayed", effect_replay(thread=thread, effect_id=effect_id)
        row.scheduled_at, row.manual_run = now_us(), True
        row.save(update_fields=["scheduled_at", "manual_run"])
        _deliver_on_commit(row)
    return "ran", row


def effect_replay(*, thread: Thread, effect_id: Any) -> ScheduledEffect:
    """``POST …/effects/{id}/replay``: a new row with the same name and args, due now,
    linked to the original (``replayed_from``, ``manual_run``). Conflict for a pending one
    (run it instead)."""
    original = effect_get(thread=thread, effect_id=effect_id)
    if original.status == EffectStatus.PENDING:
        raise Conflict(f"effect {original.pk} is pending; run it instead of replaying it")
    entry = effect_entry(thread=thread, name=original.name)
    _args_check(entry, original.args)
    now = now_us()
    with transaction.atomic():
        row = ScheduledEffect.objects.create(
            tenant_id=thread.tenant_id, thread=thread, name=original.name, args=original.args,
            scheduled_at=now, created_at=now, manual_run=True, replayed_from=original,
        )  # fmt: skip
        publish(
            thread,
            "effect.scheduled",
            effect_event(row, scheduled_at=row.scheduled_at, replayed_from=str(original.pk)),
        )
        _deliver_on_commit(row)
    return row


# The sweep and retention ---------------------------------------------------------------


def effects_sweep() -> int:
    """Beat: send a delivery for every pending effect past its deadline by more than
    ``EFFECT_SWEEP_GRACE_S`` (its own delivery was lost), and for those scheduled beyond
    the horizon (none was sent) that fall due before the next sweep. Returns how many."""
    now = now_us()
    due_before = now + int(settings.EFFECT_SWEEP_INTERVAL_S * 1_000_000)
    grace = now - int(settings.EFFECT_SWEEP_GRACE_S * 1_000_000)
    horizon_us = int(settings.EFFECT_ETA_HORIZON_S * 1_000_000)
    rows = (
        ScheduledEffect.objects.filter(status=EffectStatus.PENDING, scheduled_at__lte=due_before)
        .filter(Q(scheduled_at__lte=grace) | Q(scheduled_at__gt=F("created_at") + horizon_us))
        .order_by("scheduled_at")
        .values_list("id", "scheduled_at")[:SWEEP_BATCH]
    )
    sent = 0
    for effect_id, scheduled_at in rows:
        sent += effect_send(str(effect_id), max(0.0, (scheduled_at - now) / 1_000_000))
    return sent


def effects_prune(now: int | None = None) -> int:
    """Beat: drop history past its retention (DIGEST §9). Returns how many rows went."""
    now = now_us() if now is None else now
    old = ScheduledEffect.objects.filter(
        Q(status=EffectStatus.FAILED, completed_at__lt=now - KEEP_FAILED_US)
        | Q(status__in=FINISHED, completed_at__lt=now - KEEP_FINISHED_US)
    )
    deleted, _ = old.delete()
    with connection.cursor() as cursor:
        cursor.execute(
            "DELETE FROM threads_scheduledeffect WHERE id IN (SELECT id FROM (SELECT id, "
            "row_number() OVER (PARTITION BY thread_id ORDER BY created_at DESC) AS n FROM "
            "threads_scheduledeffect WHERE status <> 'pending') ranked WHERE n > %s)",
            [KEEP_PER_THREAD],
        )
        deleted += int(cursor.rowcount)
    return int(deleted)


def pending_json(rows: Sequence[ScheduledEffect]) -> list[dict[str, Any]]:
    """state.getScheduledEffects: ``{id, name, args, scheduledAt, createdAt}`` (µs)."""
    return [
        {"id": str(row.pk), "name": row.name, "args": row.args, "scheduledAt": row.scheduled_at,
         "createdAt": row.created_at}
        for row in rows
    ]  # fmt: skip

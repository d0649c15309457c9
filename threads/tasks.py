"""Celery tasks of threads: thin wrappers that take ids and call the runtime.

Each acts for one tenant, its row's (common.tenant_wall), or, for beat's duties, which span
tenants, in the named system context ``beat:<duty>``."""

from __future__ import annotations

import logging
import math

from celery import shared_task
from django.conf import settings
from django.db.models import Min

from common.duties import duty_idle_until
from common.tenant_wall import system_scope, tenant_scope_of
from threads.events.webhooks import DELIVER_TASK
from threads.events.webhooks import SWEEP_TASK as SWEEP_WEBHOOKS
from threads.models import (
    Action,
    ActionStatus,
    DeliveryStatus,
    EffectStatus,
    RunStatus,
    Schedule,
    ScheduledEffect,
    Turn,
    WebhookDelivery,
)  # fmt: skip
from threads.runtime.driver import thread_drive, threads_sweep
from threads.runtime.effects import effect_fire
from threads.runtime.schedules import FIRE_SCHEDULES_TASK, schedules_fire
from threads.services.actions import EXPIRE_TASK, actions_expire
from threads.services.effects import FIRE_TASK, effects_prune, effects_sweep
from threads.services.effects import SWEEP_TASK as SWEEP_EFFECTS
from threads.services.waits import waits_release_due
from threads.services.wakeups import DRIVE_TASK
from threads.services.wakeups import SWEEP_TASK as SWEEP_THREADS
from threads.services.webhooks import webhook_deliver, webhooks_sweep
from usage import budgets

# Beat's duties say at INFO what they did, when they did something: a tick with nothing to
# do (nearly all of them, every second or two) stays silent.
logger = logging.getLogger(__name__)

# After each run a duty tells beat until when it has nothing to do (common.duties), from its
# rows' earliest deadline: beat does not send it before then (nor later than its idle_max).
# The turns the thread sweep acts on: waiting for a worker, running, waiting for a budget.
_SWEPT_TURNS = (RunStatus.QUEUED, RunStatus.RUNNING, RunStatus.RETRYING, RunStatus.WAITING_RESOURCE)


def _idle_until(task: str, earliest_us: int | None, *, ahead_s: float = 0.0) -> None:
    """Hint that ``task`` has nothing to do before ``earliest_us`` (µs; None: no rows, so
    nothing until new work opens it), ``ahead_s`` earlier."""
    duty_idle_until(task, math.inf if earliest_us is None else earliest_us / 1e6 - ahead_s)


@shared_task(name=DRIVE_TASK, ignore_result=True)
def drive_thread(thread_id: str, tenant_id: str | None = None, attempt: int = 0) -> None:
    """Run the thread's pending work (idempotent: the lock makes duplicates no-ops).
    ``tenant_id`` is the thread's (optional: read from the thread when absent); ``attempt``
    counts the drives in a row an outage cut short."""
    thread_drive(thread_id=thread_id, tenant_id=tenant_id, attempt=attempt)  # in its tenant


@shared_task(name="threads.sweep_threads", ignore_result=True)
@system_scope("beat:sweep_threads")
def sweep_threads() -> int:
    """Beat: wake threads whose work has no live worker; release the spend reservations of
    flows whose lock is gone and the turns whose budget or quota wait is over."""
    budgets.reservations_sweep()
    waits_release_due()
    woken = threads_sweep()
    if woken:
        logger.info("sweep-threads: woke %d threads whose work had no live worker", woken)
    unfinished = Turn.objects.filter(status__in=_SWEPT_TURNS).exists()
    duty_idle_until(SWEEP_THREADS, None if unfinished else math.inf)
    return woken


@shared_task(name=EXPIRE_TASK, ignore_result=True)
@system_scope("beat:expire_actions")
def expire_actions() -> int:
    """Beat: resolve the actions nobody answered in time (their turns resume)."""
    expired = actions_expire()
    if expired:
        logger.info("expire-actions: resolved %d actions nobody answered in time", expired)
    pending = Action.objects.filter(status=ActionStatus.PENDING)
    _idle_until(EXPIRE_TASK, pending.aggregate(at=Min("expires_at"))["at"])
    return expired


@shared_task(name=FIRE_TASK, ignore_result=True)
def fire_effect(effect_id: str) -> str | None:
    """Run a scheduled effect once it is due (a duplicate delivery is a no-op)."""
    with tenant_scope_of(ScheduledEffect, effect_id):
        return effect_fire(effect_id)


@shared_task(name=SWEEP_EFFECTS, ignore_result=True)
@system_scope("beat:sweep_effects")
def sweep_effects() -> int:
    """Beat: deliver effects falling due that have no delivery, and those whose was lost."""
    sent = effects_sweep()
    if sent:
        logger.info("sweep-effects: sent %d effects falling due or whose delivery was lost", sent)
    pending = ScheduledEffect.objects.filter(status=EffectStatus.PENDING)
    earliest = pending.aggregate(at=Min("scheduled_at"))["at"]
    _idle_until(SWEEP_EFFECTS, earliest, ahead_s=settings.EFFECT_SWEEP_INTERVAL_S)
    return sent


@shared_task(name="threads.prune_effects", ignore_result=True)
@system_scope("beat:prune_effects")
def prune_effects() -> int:
    """Beat: drop effect history past its retention."""
    pruned = effects_prune()
    if pruned:
        logger.info("prune-effects: dropped %d rows of effect history past retention", pruned)
    return pruned


@shared_task(name=FIRE_SCHEDULES_TASK, ignore_result=True)
@system_scope("beat:fire_schedules")
def fire_schedules() -> int:
    """Beat: run the recurring schedules that are due, once each."""
    fired = schedules_fire()
    if fired:
        logger.info("fire-schedules: ran %d recurring schedules", fired)
    waiting = Schedule.objects.filter(paused=False)
    _idle_until(FIRE_SCHEDULES_TASK, waiting.aggregate(at=Min("next_run_at"))["at"])
    return fired


@shared_task(name=DELIVER_TASK, ignore_result=True)
def deliver_webhook(delivery_id: str) -> str | None:
    """One attempt of a webhook delivery (a duplicate finds it taken)."""
    with tenant_scope_of(WebhookDelivery, delivery_id):
        return webhook_deliver(delivery_id)


@shared_task(name=SWEEP_WEBHOOKS, ignore_result=True)
@system_scope("beat:sweep_webhooks")
def sweep_webhooks() -> int:
    """Beat: re-send webhook deliveries whose message or worker was lost."""
    resent = webhooks_sweep()
    if resent:
        logger.info("sweep-webhooks: re-sent %d webhook deliveries that were lost", resent)
    open_ = WebhookDelivery.objects.filter(status=DeliveryStatus.PENDING)
    due = open_.aggregate(at=Min("next_attempt_at"))["at"]
    leased = WebhookDelivery.objects.filter(status=DeliveryStatus.SENDING)
    lapses = leased.aggregate(at=Min("lease_until"))["at"]
    grace_us = int(settings.EFFECT_SWEEP_GRACE_S * 1_000_000)
    moments = [at for at in (None if due is None else due + grace_us, lapses) if at]
    _idle_until(SWEEP_WEBHOOKS, min(moments) if moments else None)
    return resent

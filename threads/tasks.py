"""Celery tasks of threads: thin wrappers that take ids and call the runtime."""

from __future__ import annotations

import logging

from celery import shared_task

from threads.events.webhooks import DELIVER_TASK
from threads.runtime.driver import thread_drive, threads_sweep
from threads.runtime.effects import effect_fire
from threads.runtime.schedules import schedules_fire
from threads.services.actions import actions_expire
from threads.services.effects import FIRE_TASK, effects_prune, effects_sweep
from threads.services.waits import waits_release_due
from threads.services.wakeups import DRIVE_TASK
from threads.services.webhooks import webhook_deliver, webhooks_sweep
from usage import budgets

# Beat's duties say at INFO what they did, when they did something: a tick with nothing to
# do (nearly all of them, every second or two) stays silent.
logger = logging.getLogger(__name__)


@shared_task(name=DRIVE_TASK, ignore_result=True)
def drive_thread(thread_id: str, tenant_id: str | None = None, attempt: int = 0) -> None:
    """Run the thread's pending work (idempotent: the lock makes duplicates no-ops).
    ``tenant_id`` is the thread's (optional: read from the thread when absent); ``attempt``
    counts the drives in a row an outage cut short."""
    thread_drive(thread_id=thread_id, tenant_id=tenant_id, attempt=attempt)


@shared_task(name="threads.sweep_threads", ignore_result=True)
def sweep_threads() -> int:
    """Beat: wake threads whose work has no live worker; release the spend reservations of
    flows whose lock is gone and the turns whose budget or quota wait is over."""
    budgets.reservations_sweep()
    waits_release_due()
    woken = threads_sweep()
    if woken:
        logger.info("sweep-threads: woke %d threads whose work had no live worker", woken)
    return woken


@shared_task(name="threads.expire_actions", ignore_result=True)
def expire_actions() -> int:
    """Beat: resolve the actions nobody answered in time (their turns resume)."""
    expired = actions_expire()
    if expired:
        logger.info("expire-actions: resolved %d actions nobody answered in time", expired)
    return expired


@shared_task(name=FIRE_TASK, ignore_result=True)
def fire_effect(effect_id: str) -> str | None:
    """Run a scheduled effect once it is due (a duplicate delivery is a no-op)."""
    return effect_fire(effect_id)


@shared_task(name="threads.sweep_effects", ignore_result=True)
def sweep_effects() -> int:
    """Beat: deliver effects falling due that have no delivery, and those whose was lost."""
    sent = effects_sweep()
    if sent:
        logger.info("sweep-effects: sent %d effects falling due or whose delivery was lost", sent)
    return sent


@shared_task(name="threads.prune_effects", ignore_result=True)
def prune_effects() -> int:
    """Beat: drop effect history past its retention."""
    pruned = effects_prune()
    if pruned:
        logger.info("prune-effects: dropped %d rows of effect history past retention", pruned)
    return pruned


@shared_task(name="threads.fire_schedules", ignore_result=True)
def fire_schedules() -> int:
    """Beat: run the recurring schedules that are due, once each."""
    fired = schedules_fire()
    if fired:
        logger.info("fire-schedules: ran %d recurring schedules", fired)
    return fired


@shared_task(name=DELIVER_TASK, ignore_result=True)
def deliver_webhook(delivery_id: str) -> str | None:
    """One attempt of a webhook delivery (a duplicate finds it taken)."""
    return webhook_deliver(delivery_id)


@shared_task(name="threads.sweep_webhooks", ignore_result=True)
def sweep_webhooks() -> int:
    """Beat: re-send webhook deliveries whose message or worker was lost."""
    resent = webhooks_sweep()
    if resent:
        logger.info("sweep-webhooks: re-sent %d webhook deliveries that were lost", resent)
    return resent

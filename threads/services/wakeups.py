"""Waking a thread: ``threads.drive_thread`` is sent by name, so the services and the runtime
that wake threads never import the task module that calls them (imports point one way).

A wake-up is a hint, never the record: the work it announces is already committed in
PostgreSQL, and beat's sweeper wakes every thread with work and no live worker. So a
wake-up that cannot be sent (the broker is restarting) is logged and dropped, never raised
into a request whose write has committed.
"""

from __future__ import annotations

import logging
from typing import Any

from celery import current_app
from django.db import transaction

from common.outages import OUTAGE_ERRORS
from threads.models import Thread

logger = logging.getLogger(__name__)

DRIVE_TASK = "threads.drive_thread"


def wake_thread(
    thread_id: Any, tenant_id: Any, *, countdown: float | None = None, attempt: int = 0
) -> bool:
    """Enqueue ``drive_thread`` for a thread (after ``countdown`` seconds; ``attempt``: how
    many drives in a row an outage cut short): the one place that builds its arguments.
    False when the broker is unreachable; the sweeper wakes the thread later."""
    try:
        current_app.send_task(
            DRIVE_TASK, args=[str(thread_id), str(tenant_id)],
            kwargs={"attempt": attempt} if attempt else None, countdown=countdown,
        )  # fmt: skip
    except OUTAGE_ERRORS as error:
        logger.warning(
            "thread %s: wake-up not sent (%s); the sweeper will wake it", thread_id, error
        )
        return False
    return True


def wake_on_commit(thread: Thread) -> None:
    """Enqueue ``drive_thread`` for ``thread`` once the current transaction commits."""
    thread_id, tenant_id = thread.pk, thread.tenant_id
    transaction.on_commit(lambda: wake_thread(thread_id, tenant_id), robust=True)

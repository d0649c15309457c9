"""Waking a thread: ``threads.drive_thread`` is sent by name, so the services and the runtime
that wake threads never import the task module that calls them (imports point one way)."""

from __future__ import annotations

from typing import Any

from celery import current_app
from django.db import transaction

from threads.models import Thread

DRIVE_TASK = "threads.drive_thread"


def wake_thread(thread_id: Any, tenant_id: Any) -> None:
    """Enqueue ``drive_thread`` for a thread now: the one place that builds its arguments."""
    current_app.send_task(DRIVE_TASK, args=[str(thread_id), str(tenant_id)])


def wake_on_commit(thread: Thread) -> None:
    """Enqueue ``drive_thread`` for ``thread`` once the current transaction commits."""
    thread_id, tenant_id = thread.pk, thread.tenant_id
    transaction.on_commit(lambda: wake_thread(thread_id, tenant_id))

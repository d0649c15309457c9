"""Waking a thread: ``threads.drive_thread`` is sent by name, so the services and the runtime
that wake threads never import the task module that calls them (imports point one way).

A wake-up is a hint, never the record: the work it announces is already committed in
PostgreSQL, and beat's sweeper wakes every thread with work and no live worker. So a
wake-up that cannot be sent (the broker is restarting) is logged and dropped, never raised
into a request whose write has committed.

A plain wake-up (no countdown) is one ``LPUSH`` of the task message Celery would send (its
message protocol 2, for the Redis transport) through the process's Redis client: Celery's
``send_task`` builds a Redis client per call and reads the queue's binding table first,
about 0.65 ms of CPU against 0.2 ms. ``tests/threads/test_wakeups.py`` holds it to what
``send_task`` writes.
"""

from __future__ import annotations

import base64
import json
import logging
import uuid
from typing import Any

from celery import current_app
from celery.utils.nodenames import anon_nodename
from django.db import transaction
from opentelemetry import propagate

from common.duties import duty_wake
from common.outages import OUTAGE_ERRORS
from common.redis_client import redis_client
from threads.models import Thread

logger = logging.getLogger(__name__)

DRIVE_TASK = "threads.drive_thread"
# Beat's thread sweep: every wake-up opens it again (common.duties), so a thread that has
# work is swept every THREAD_SWEEP_INTERVAL_S until no turn is left unfinished.
SWEEP_TASK = "threads.sweep_threads"
# What a task message without links carries after its arguments (protocol 2's "embed").
_EMBED = {"callbacks": None, "errbacks": None, "chain": None, "chord": None}


def wake_thread(
    thread_id: Any, tenant_id: Any, *, countdown: float | None = None, attempt: int = 0
) -> bool:
    """Enqueue ``drive_thread`` for a thread (after ``countdown`` seconds; ``attempt``: how
    many drives in a row an outage cut short): the one place that builds its arguments.
    False when the broker is unreachable; the sweeper wakes the thread later."""
    args = [str(thread_id), str(tenant_id)]
    try:
        if countdown is None and not attempt:
            queue = current_app.conf.task_default_queue
            redis_client().lpush(queue, drive_message(args, queue=queue))
        else:
            current_app.send_task(
                DRIVE_TASK, args=args, kwargs={"attempt": attempt} if attempt else None,
                countdown=countdown,
            )  # fmt: skip
    except OUTAGE_ERRORS as error:
        logger.warning(
            "thread %s: wake-up not sent (%s); the sweeper will wake it", thread_id, error
        )
        return False
    duty_wake(SWEEP_TASK)
    return True


def drive_message(args: list[str], *, queue: str) -> bytes:
    """The broker message of ``drive_thread(*args)`` for ``queue``, as Celery's
    ``send_task`` writes it (no countdown, no result, no links), with the current span's
    trace context (``traceparent``) when one is active, as observability adds it to what
    ``send_task`` sends."""
    task_id = str(uuid.uuid4())
    body = json.dumps([args, {}, _EMBED]).encode()
    traced: dict[str, str] = {}
    propagate.inject(traced)  # nothing outside a trace
    return json.dumps({
        "body": base64.b64encode(body).decode(),
        "content-encoding": "utf-8",
        "content-type": "application/json",
        "headers": {
            "lang": "py", "task": DRIVE_TASK, "id": task_id, "shadow": None, "eta": None,
            "expires": None, "group": None, "group_index": None, "retries": 0,
            "timelimit": [None, None], "root_id": task_id, "parent_id": None,
            "argsrepr": repr(args), "kwargsrepr": "{}", "origin": anon_nodename(),
            "ignore_result": None, "replaced_task_nesting": 0, "stamped_headers": None,
            "stamps": {}, **traced,
        },
        "properties": {
            "correlation_id": task_id, "reply_to": current_app.thread_oid, "delivery_mode": 2,
            "delivery_info": {"exchange": "", "routing_key": queue}, "priority": 0,
            "body_encoding": "base64", "delivery_tag": str(uuid.uuid4()),
        },
    }).encode()  # fmt: skip


def wake_on_commit(thread: Thread) -> None:
    """Enqueue ``drive_thread`` for ``thread`` once the current transaction commits."""
    thread_id, tenant_id = thread.pk, thread.tenant_id
    transaction.on_commit(lambda: wake_thread(thread_id, tenant_id), robust=True)

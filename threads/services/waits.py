"""Turns waiting for a budget or a quota (``waiting_resource``): released when there may be
room again, to run on from the step that could not call its model.

A budget's change (the usage app's ``budget_changed`` signal: a raised limit, a removed
budget) releases every waiting turn of its tenant; the beat releases those whose window has
rolled over or whose quota's wait is over (:func:`waits_release_due`). A released turn that
still finds no room waits again, so a release never has to know which budget held it.
"""

from __future__ import annotations

import uuid
from typing import Any

from django.db import transaction

from common.tenant_wall import tenant_scope
from common.time import now_us
from threads.models import RunStatus, Thread, Turn
from threads.services.fence import fence_check
from threads.services.status import turn_release
from threads.services.wakeups import wake_on_commit

# At most this many waiting turns are released per call (the rest at the next one).
RELEASE_BATCH = 500


def waits_release(*, tenant_id: uuid.UUID) -> int:
    """Release every turn of the tenant that waits for a budget or quota. Answers how many."""
    turns = Turn.objects.filter(tenant_id=tenant_id, status=RunStatus.WAITING_RESOURCE)
    return _release(turns.values_list("id", "thread_id", "tenant_id")[:RELEASE_BATCH])


def waits_release_due(*, now: int | None = None) -> int:
    """Beat: release the waiting turns whose wait is over (a window rolled, a quota's retry
    time passed). Answers how many."""
    moment = now_us() if now is None else now
    turns = Turn.objects.filter(status=RunStatus.WAITING_RESOURCE).extra(
        where=["(resume->'waiting'->>'retry_at')::bigint <= %s"], params=[moment]
    )
    return _release(turns.values_list("id", "thread_id", "tenant_id")[:RELEASE_BATCH])


def _release(rows: Any) -> int:
    released = 0
    for turn_id, thread_id, tenant_id in list(rows):
        with transaction.atomic(), tenant_scope(tenant_id):  # each in its tenant
            thread = Thread.objects.select_related("tenant").filter(pk=thread_id).first()
            if thread is None:
                continue
            fence_check(thread=thread, fence=None)  # the thread row, locked
            turn = Turn.objects.filter(pk=turn_id, status=RunStatus.WAITING_RESOURCE).first()
            if turn is not None and turn_release(
                thread=thread, turn=turn, reason="resource_available"
            ):
                wake_on_commit(thread)
                released += 1
    return released

"""What people do with a thread's compactions: list them, read one, revert the active one.

The engine writes compactions (:mod:`compaction.compact`); these functions only read them
and change a status. The history of a step reads the active overlay each step
(:mod:`compaction.history`), so a revert takes effect at the thread's next step.
"""

from __future__ import annotations

import uuid
from dataclasses import dataclass

from django.core.exceptions import ValidationError
from django.db import transaction
from django.db.models import QuerySet

from common.errors import Conflict, NotFound
from common.time import now_us
from compaction.models import Compaction, CompactionStatus
from threads.events import publish
from threads.models import Thread


@dataclass(frozen=True)
class Revert:
    """A revert's outcome: the compaction reverted, and the one it extended, active again
    (None when it extended none, or one that was not superseded)."""

    reverted: Compaction
    active: Compaction | None


def compactions_of(
    *, thread: Thread, side: str | None = None, status: str | None = None
) -> QuerySet[Compaction]:
    """The thread's compactions, newest first; only ``side``'s and only those in ``status``
    when given."""
    rows = Compaction.objects.for_tenant(thread.tenant).filter(thread=thread)
    if side:
        rows = rows.filter(side=side)
    if status:
        rows = rows.filter(status=status)
    return rows.order_by("-created_at", "-id")


def compaction_get(*, thread: Thread, compaction_id: uuid.UUID | str) -> Compaction:
    """The thread's compaction ``compaction_id``; NotFound when the thread has none of that
    id (another thread's or tenant's is none)."""
    found = _find(thread, compaction_id, lock=False)
    if found is None:
        raise NotFound(f"no compaction {compaction_id} in this thread")
    return found


@transaction.atomic
def compaction_revert(*, thread: Thread, compaction_id: uuid.UUID | str) -> Revert:
    """Revert the thread's active compaction ``compaction_id``: its side's context sees the
    originals of its range again, or the compaction it extended when that one was
    superseded (it becomes active again). One transaction: the row is locked, its status
    and ``reverted_at`` written, the previous one reactivated after (one active per side),
    and one ``thread.updated`` event (``fields: ["compactions"]``) published.

    NotFound for a compaction the thread does not have; Conflict for one that is not active
    (the message names the side's active one, if any)."""
    compaction = _find(thread, compaction_id, lock=True)
    if compaction is None:
        raise NotFound(f"no compaction {compaction_id} in this thread")
    if compaction.status != CompactionStatus.ACTIVE:
        raise _not_active(thread, compaction)
    compaction.status = CompactionStatus.REVERTED
    compaction.reverted_at = now_us()
    compaction.save(update_fields=["status", "reverted_at"])
    reactivated = None
    if compaction.extends_id is not None:
        reactivated = (
            _scoped(thread)
            .select_for_update()
            .filter(
                pk=compaction.extends_id, side=compaction.side, status=CompactionStatus.SUPERSEDED
            )
            .first()
        )
    if reactivated is not None:
        reactivated.status = CompactionStatus.ACTIVE
        reactivated.save(update_fields=["status"])
    publish(thread, "thread.updated", {"id": str(thread.pk), "fields": ["compactions"]})
    return Revert(reverted=compaction, active=reactivated)


def _scoped(thread: Thread) -> QuerySet[Compaction]:
    return Compaction.objects.for_tenant(thread.tenant).filter(thread=thread)


def _find(thread: Thread, compaction_id: uuid.UUID | str, *, lock: bool) -> Compaction | None:
    rows = _scoped(thread)
    if lock:
        rows = rows.select_for_update()
    try:
        return rows.filter(pk=compaction_id).first()
    except (ValueError, ValidationError):
        return None


def _not_active(thread: Thread, compaction: Compaction) -> Conflict:
    active = (
        _scoped(thread)
        .filter(side=compaction.side, status=CompactionStatus.ACTIVE)
        .values_list("id", flat=True)
        .first()
    )
    now = (
        f"side {compaction.side}'s active compaction is {active}"
        if active is not None
        else f"side {compaction.side} has no active compaction"
    )
    return Conflict(
        f"compaction {compaction.id} is {compaction.status}; only the active one can be "
        f"reverted ({now})"
    )

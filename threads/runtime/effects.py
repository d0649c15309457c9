"""Firing a scheduled effect **exactly once** (spec Threads §5, DIGEST §9): one transaction
claims the row (``FOR UPDATE SKIP LOCKED``: a duplicate delivery skips it), runs the handler
with an at-rest ``ThreadState`` and records the outcome. A worker that dies mid-handler rolls
everything back and the row is pending again for the sweep (threads.services.effects); a
handler that raises leaves nothing of what it wrote and a ``failed`` row with the error (no
automatic retry)."""

from __future__ import annotations

import logging
from typing import Any

from django.db import transaction

from agents.schemas import ArgumentsInvalid
from common.errors import ValidationFailed
from common.time import now_us
from threads.events import publish
from threads.models import EffectStatus, ScheduledEffect, Thread, TurnSource
from threads.services.effects import effect_entry, effect_event
from threads.state import ThreadState

logger = logging.getLogger(__name__)


def effect_fire(effect_id: Any) -> str | None:
    """Run effect ``effect_id`` if it is pending and due: claim, handler and outcome commit
    as one transaction. Returns its new status, or None when there was nothing to do (not
    due yet, not pending, or another delivery runs it now)."""
    with transaction.atomic():
        row = (
            ScheduledEffect.objects.select_for_update(skip_locked=True, of=("self",))
            .select_related("thread__tenant")
            .filter(pk=effect_id, status=EffectStatus.PENDING, scheduled_at__lte=now_us())
            .first()
        )
        if row is None:
            return None
        row.attempts += 1
        thread = row.thread
        error = _handler_run(row, thread)
        row.status = EffectStatus.FAILED if error else EffectStatus.COMPLETED
        row.error, row.completed_at = error[:10_000], now_us()
        row.save(update_fields=["status", "error", "completed_at", "attempts"])
        if error:
            publish(thread, "effect.failed", effect_event(row, error=row.error))
        else:
            publish(thread, "effect.completed", effect_event(row))
    return str(row.status)


def _handler_run(row: ScheduledEffect, thread: Thread) -> str:
    """Run the row's handler in a savepoint; "" when it succeeded, else the error (and what
    it wrote is rolled back)."""
    try:
        entry = effect_entry(thread=thread, name=row.name)
        parsed = entry.parse_args(row.args)
    except (ValidationFailed, ArgumentsInvalid) as error:
        return f"{type(error).__name__}: {error.message}"
    state = ThreadState(thread)
    state.message_metadata = {"scheduled_effect": {"id": str(row.pk), "name": row.name}}
    state.queue_source = TurnSource.EFFECT
    try:
        with transaction.atomic():
            if entry.args_schema is None and entry.pydantic_model is None:
                entry.function(state)
            else:
                entry.function(state, parsed)
    except Exception as error:  # the handler's bug is the effect's failure, never the worker's
        logger.info("effect %s (%s) failed: %s", row.pk, row.name, error)
        return f"{type(error).__name__}: {error}"
    return ""

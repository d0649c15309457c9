"""Writing and pruning audit entries."""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

from django.conf import settings
from django.db import connection
from django.db.models import Model

from audit.models import AuditEntry
from common.audit import Actor
from common.time import now_us

DAY_US = 86_400 * 1_000_000


def audit_entry_create(
    *, tenant: Model, actor: Actor, action: str, target_type: str, target_id: str,
    details: Mapping[str, Any],
) -> None:  # fmt: skip
    """The recorder :mod:`common.audit` calls: one row, in the caller's transaction (it
    must be in one: an entry outside the change's transaction could outlive a rollback)."""
    assert connection.in_atomic_block, f"audit {action}: record inside the change's transaction"
    AuditEntry.objects.create(
        tenant_id=tenant.pk, actor_kind=actor.kind, actor_id=actor.id,
        actor_name=actor.name[:150], action=action, target_type=target_type,
        target_id=target_id[:200], details=dict(details),
    )  # fmt: skip


def audit_prune(*, now: int | None = None) -> int:
    """Delete entries older than ``RETENTION_AUDIT_DAYS`` (0: keep forever), at most
    ``RETENTION_BATCH_ROWS`` per statement and ``RETENTION_MAX_BATCHES`` statements per run;
    returns how many went. Each statement is its own transaction; safe to run concurrently."""
    days = int(settings.RETENTION_AUDIT_DAYS)
    if days <= 0:
        return 0
    cutoff = (now_us() if now is None else now) - days * DAY_US
    old = AuditEntry.objects.filter(created_at__lt=cutoff).order_by("created_at")
    deleted = 0
    for _ in range(int(settings.RETENTION_MAX_BATCHES)):
        batch = list(old.values_list("pk", flat=True)[: int(settings.RETENTION_BATCH_ROWS)])
        if not batch:
            break
        count, _ = AuditEntry.objects.filter(pk__in=batch).delete()
        deleted += count
    return deleted

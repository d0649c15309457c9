"""Celery tasks of the audit trail: the beat task that deletes entries past retention."""

from __future__ import annotations

import logging

from celery import shared_task

from audit.services import audit_prune
from common.tenant_wall import system_scope

logger = logging.getLogger(__name__)

PRUNE_TASK = "audit.prune"


@shared_task(name=PRUNE_TASK, ignore_result=True)
@system_scope("beat:audit_prune")  # every tenant's history
def prune() -> int:
    """Beat: delete audit entries older than ``RETENTION_AUDIT_DAYS`` (idempotent: a
    duplicate run finds less to delete)."""
    deleted = audit_prune()
    if deleted:
        logger.info("audit-prune: deleted %d entries", deleted)
    return deleted

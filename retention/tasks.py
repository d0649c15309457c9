"""Celery tasks of retention: the beat task that prunes history past its retention."""

from __future__ import annotations

import logging

from celery import shared_task

from common.tenant_wall import system_scope
from retention.prune import retention_prune

logger = logging.getLogger(__name__)

PRUNE_TASK = "retention.prune"


@shared_task(name=PRUNE_TASK, ignore_result=True)
@system_scope("beat:retention_prune")  # every tenant's history
def prune() -> int:
    """Beat: delete what the tenants' retention policies say is past retention, a bounded
    number of rows per run (idempotent: a duplicate run finds less to delete)."""
    report = retention_prune()
    if report.total:
        counts = ", ".join(f"{kind} {count}" for kind, count in sorted(report.deleted.items())
                           if count)  # fmt: skip
        more = (
            f"; more remains of {', '.join(sorted(report.unfinished))}" if report.unfinished else ""
        )
        logger.info("retention-prune: deleted %s%s", counts, more)
    return report.total

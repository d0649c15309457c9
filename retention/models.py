"""A tenant's retention policy: how long each kind of history is kept (retention.prune)."""

from __future__ import annotations

from django.db import models

from common.time import now_us
from tenancy.models import TenantOwned

# The policy's fields, each with the setting that is its default (retention.policies).
POLICY_FIELDS = {
    "events_days": "RETENTION_EVENTS_DAYS",
    "logs_days": "RETENTION_LOGS_DAYS",
    "webhook_deliveries_days": "RETENTION_WEBHOOK_DELIVERIES_DAYS",
    "finished_turns_days": "RETENTION_FINISHED_TURNS_DAYS",
    "terminated_threads_days": "RETENTION_TERMINATED_THREADS_DAYS",
}


def _days(help_text: str) -> models.PositiveIntegerField[int | None, int | None]:
    return models.PositiveIntegerField(null=True, blank=True, help_text=help_text)


class RetentionPolicy(TenantOwned):
    """How many days a tenant keeps each kind of history; empty means the operator's
    default (the ``RETENTION_*_DAYS`` settings) and 0 means forever. At most one per tenant;
    a tenant without one has the defaults. Only the operator (a superuser) writes them."""

    events_days = _days("events of the thread logs, oldest first")
    logs_days = _days("log rows (model and tool calls)")
    webhook_deliveries_days = _days("finished webhook deliveries (delivered or failed)")
    finished_turns_days = _days("turns that ended (completed, failed, cancelled, ...)")
    terminated_threads_days = _days(
        "whole threads (with their messages, files and KV) after they were terminated"
    )
    updated_at = models.BigIntegerField(default=now_us)

    class Meta:
        verbose_name_plural = "retention policies"
        constraints = [
            models.UniqueConstraint(fields=["tenant"], name="retention_policy_unique_tenant"),
        ]

    def __str__(self) -> str:
        return f"retention policy of {self.tenant_id}"

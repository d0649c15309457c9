"""Audit entries: one row per security-relevant action, written once and never changed."""

from __future__ import annotations

from typing import Any

from django.db import models

from common.audit import AuditAction
from common.ids import new_id
from common.time import now_us
from tenancy.models import TenantOwnedBulk


class ActorKind(models.TextChoices):
    API_KEY = "api_key"
    USER = "user"
    SYSTEM = "system"


class AuditEntry(TenantOwnedBulk):
    """``actor`` did ``action`` to the ``target_type`` named ``target_id``. ``details`` hold
    names and changed fields (a definition's diff), never a secret's value. The actor's
    name is kept as it was: a renamed key or a deleted user still reads as it did."""

    id = models.UUIDField(primary_key=True, default=new_id, editable=False)
    created_at = models.BigIntegerField(default=now_us)
    action = models.CharField(max_length=40, choices=[(a.value, a.value) for a in AuditAction])
    actor_kind = models.CharField(max_length=16, choices=ActorKind.choices)
    actor_id = models.CharField(max_length=64, blank=True, default="")
    actor_name = models.CharField(max_length=150, blank=True, default="")
    target_type = models.CharField(max_length=40)
    target_id = models.CharField(max_length=200, blank=True, default="")
    details = models.JSONField(default=dict, blank=True)

    class Meta:
        ordering = ["-created_at", "-id"]
        verbose_name_plural = "audit entries"
        indexes = [
            models.Index(fields=["tenant", "-created_at"], name="audit_tenant_time"),
            models.Index(fields=["created_at"], name="audit_time"),
        ]

    def __str__(self) -> str:
        return f"{self.action} by {self.actor_kind}:{self.actor_name} on {self.target_type}"

    def save(self, *args: Any, **kwargs: Any) -> None:
        # Append-only: an entry is written once (retention deletes old ones in bulk).
        if not self._state.adding:
            raise ValueError("audit entries are append-only")
        super().save(*args, **kwargs)

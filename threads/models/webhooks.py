"""Webhooks: a tenant's HTTPS endpoints for chosen event types, and the durable deliveries to
them, signed as the Standard Webhooks specification says (threads.services.webhooks)."""

from __future__ import annotations

from typing import ClassVar, Self

from django.contrib.postgres.indexes import BrinIndex
from django.db import models

from common.ids import new_id
from common.time import now_us
from tenancy.models import TenantOwned, TenantOwnedBulk, TenantQuerySet
from threads.models.turns import Turn

_Endpoints = models.Manager.from_queryset(TenantQuerySet)


class _TenantEndpoints(_Endpoints["WebhookEndpoint"]):
    """The tenant's own endpoints: those no turn limits (the REST API's, counted against
    its cap). Endpoints limited to a turn belong to whoever made them for it."""

    def get_queryset(self) -> TenantQuerySet[WebhookEndpoint]:
        return TenantQuerySet(self.model, using=self._db).filter(turn__isnull=True)


class WebhookEndpoint(TenantOwned):
    """Where a tenant's events of ``event_types`` are POSTed. ``secrets_encrypted`` holds
    its signing secrets (encrypted with the tenant's key): the current one, and after a
    rotation the previous one until it expires, so receivers can switch without a gap. An
    endpoint that fails ``WEBHOOK_DISABLE_AFTER`` deliveries in a row is disabled.

    An endpoint may be limited to one ``turn``: it receives only that turn's events, in the
    body ``body_format`` names (a format another app registered with
    ``threads.services.webhooks.webhook_format_register``; empty: the signed envelope), and
    its ``secrets_encrypted`` holds what that format needs (not signing secrets). Its ``key``
    is the name its maker gave it, unique within the turn. ``objects`` are the tenant's own
    endpoints only (no turn); ``every`` is all of them."""

    id = models.UUIDField(primary_key=True, default=new_id, editable=False)
    turn = models.ForeignKey(
        Turn, on_delete=models.CASCADE, null=True, blank=True, related_name="+"
    )
    key = models.CharField(max_length=200, blank=True)
    body_format = models.CharField(max_length=32, blank=True)
    url = models.URLField(max_length=2000)
    event_types = models.JSONField(default=list)
    description = models.CharField(max_length=500, blank=True)
    enabled = models.BooleanField(default=True)
    secrets_encrypted = models.BinaryField()
    consecutive_failures = models.PositiveIntegerField(default=0)
    disabled_at = models.BigIntegerField(null=True, blank=True)
    disabled_reason = models.TextField(blank=True)
    created_at = models.BigIntegerField(default=now_us, editable=False)
    updated_at = models.BigIntegerField(default=now_us)

    objects: ClassVar[_TenantEndpoints] = _TenantEndpoints()
    every: ClassVar[models.Manager[Self]] = TenantQuerySet.as_manager()

    class Meta:
        ordering = ["created_at", "id"]
        base_manager_name = "every"
        constraints = [
            models.UniqueConstraint(
                fields=["turn", "key"], name="webhook_endpoint_turn_key",
                condition=models.Q(turn__isnull=False),
            ),
        ]  # fmt: skip

    def __str__(self) -> str:
        return f"webhook {self.id} ({self.url})"


class DeliveryStatus(models.TextChoices):
    PENDING = "pending"  # waiting for its (next) attempt
    SENDING = "sending"  # an attempt is under way (its lease says until when)
    DELIVERED = "delivered"
    FAILED = "failed"  # every attempt failed, or the endpoint was disabled or removed


class WebhookDelivery(TenantOwnedBulk):
    """One event for one endpoint. ``id`` is the ``webhook-id`` receivers deduplicate on (a
    redelivery keeps it); ``payload`` is the event's envelope, as sockets carry it; ``log``
    has one ``{at, status_code, error, duration_ms}`` per attempt."""

    id = models.UUIDField(primary_key=True, default=new_id, editable=False)
    endpoint = models.ForeignKey(WebhookEndpoint, on_delete=models.CASCADE, related_name="+")
    thread_id = models.UUIDField(null=True, blank=True)
    event_type = models.CharField(max_length=64)
    payload = models.JSONField()
    status = models.CharField(
        max_length=16, choices=DeliveryStatus.choices, default=DeliveryStatus.PENDING
    )
    attempts = models.PositiveIntegerField(default=0)
    next_attempt_at = models.BigIntegerField(default=now_us)
    lease_until = models.BigIntegerField(null=True, blank=True)
    last_status_code = models.PositiveSmallIntegerField(null=True, blank=True)
    last_error = models.TextField(blank=True)
    log = models.JSONField(default=list, blank=True)
    created_at = models.BigIntegerField(default=now_us, editable=False)
    delivered_at = models.BigIntegerField(null=True, blank=True)

    class Meta:
        ordering = ["-created_at", "id"]
        indexes = [
            models.Index(
                fields=["next_attempt_at"],
                name="webhook_delivery_due",
                condition=models.Q(status__in=["pending", "sending"]),
            ),
            models.Index(fields=["endpoint", "-created_at"], name="webhook_delivery_endpoint"),
            # Retention finds old deliveries by age (a block range index: cheap to keep).
            BrinIndex(fields=["created_at"], name="webhook_delivery_created_brin"),
        ]

    def __str__(self) -> str:
        return f"delivery {self.id} ({self.event_type}, {self.status})"

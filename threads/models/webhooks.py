"""Webhooks: a tenant's HTTPS endpoints for chosen event types, and the durable deliveries to
them, signed as the Standard Webhooks specification says (threads.services.webhooks)."""

from __future__ import annotations

from django.contrib.postgres.indexes import BrinIndex
from django.db import models

from common.ids import new_id
from common.time import now_us
from tenancy.models import TenantOwned


class WebhookEndpoint(TenantOwned):
    """Where a tenant's events of ``event_types`` are POSTed. ``secrets_encrypted`` holds
    its signing secrets (encrypted with the tenant's key): the current one, and after a
    rotation the previous one until it expires, so receivers can switch without a gap. An
    endpoint that fails ``WEBHOOK_DISABLE_AFTER`` deliveries in a row is disabled."""

    id = models.UUIDField(primary_key=True, default=new_id, editable=False)
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

    class Meta:
        ordering = ["created_at", "id"]

    def __str__(self) -> str:
        return f"webhook {self.id} ({self.url})"


class DeliveryStatus(models.TextChoices):
    PENDING = "pending"  # waiting for its (next) attempt
    SENDING = "sending"  # an attempt is under way (its lease says until when)
    DELIVERED = "delivered"
    FAILED = "failed"  # every attempt failed, or the endpoint was disabled or removed


class WebhookDelivery(TenantOwned):
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

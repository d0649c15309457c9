"""A tenant's own webhook endpoints: saved (their URL judged by the egress guard, their event
types some of ``WEBHOOK_EVENTS``), deleted, and their REST shapes."""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any, Final
from urllib.parse import urlsplit

from django.conf import settings
from django.db import transaction

from common.egress import destination_problem
from common.errors import ValidationFailed
from common.payloads import flag_field, object_body, text_field
from common.time import now_us
from tenancy.models import Tenant
from threads.events.webhooks import WEBHOOK_EVENTS, subscriptions_changed
from threads.models import WebhookDelivery, WebhookEndpoint
from threads.services.webhooks.signing import new_signing_secret, secrets_seal

FIELDS: Final = ("url", "event_types", "description", "enabled")
MAX_ENDPOINTS: Final = 50  # per tenant


def endpoint_json(row: WebhookEndpoint) -> dict[str, Any]:
    return {
        "id": str(row.pk), "url": row.url, "event_types": list(row.event_types),
        "description": row.description, "enabled": row.enabled,
        "consecutive_failures": row.consecutive_failures, "disabled_at": row.disabled_at,
        "disabled_reason": row.disabled_reason or None, "created_at": row.created_at,
        "updated_at": row.updated_at,
    }  # fmt: skip


def delivery_json(row: WebhookDelivery) -> dict[str, Any]:
    return {
        "id": str(row.pk), "endpoint_id": str(row.endpoint_id),
        "thread_id": str(row.thread_id) if row.thread_id else None,
        "event_type": row.event_type, "status": row.status, "attempts": row.attempts,
        "next_attempt_at": row.next_attempt_at if row.status == "pending" else None,
        "last_status_code": row.last_status_code, "last_error": row.last_error or None,
        "log": row.log, "created_at": row.created_at, "delivered_at": row.delivered_at,
        "payload": row.payload,
    }  # fmt: skip


def endpoint_save(
    *, tenant: Tenant, data: Mapping[str, Any], current: WebhookEndpoint | None = None
) -> tuple[WebhookEndpoint, str | None]:
    """Create an endpoint (with a new secret, returned once) or change ``current`` by
    ``data`` (merged). ValidationFailed names the field."""
    object_body(data, FIELDS)
    url = data.get("url", current.url if current is not None else None)
    event_types = data.get("event_types", current.event_types if current is not None else None)
    fields = {
        "url": webhook_url_check(url), "event_types": _event_types(event_types),
        "description": text_field(
            data.get("description", current.description if current else ""), "description",
            max_chars=500,
        ),
        "enabled": flag_field(
            data.get("enabled", current.enabled if current is not None else True), "enabled"
        ),
    }  # fmt: skip
    secret = None
    with transaction.atomic():
        if current is None:
            if WebhookEndpoint.objects.for_tenant(tenant).count() >= MAX_ENDPOINTS:
                raise ValidationFailed(f"a tenant has at most {MAX_ENDPOINTS} webhook endpoints")
            row = WebhookEndpoint(tenant=tenant, secrets_encrypted=b"", **fields)
            secret = new_signing_secret()
            secrets_seal(row, [{"secret": secret, "created_at": now_us(), "expires_at": None}])
            row.save()
        else:
            row = current
            if fields["enabled"] and not row.enabled:  # re-enabled: a fresh start
                row.consecutive_failures, row.disabled_at, row.disabled_reason = 0, None, ""
            for name, value in fields.items():
                setattr(row, name, value)
            row.updated_at = now_us()
            row.save()
        transaction.on_commit(lambda: subscriptions_changed(tenant.pk))
    return row, secret


def webhook_url_check(value: Any) -> str:
    """``value`` if an endpoint may be saved with it as its URL: ValidationFailed naming
    ``url``."""
    if not isinstance(value, str) or len(value) > 2000:
        raise ValidationFailed("url must be an https URL", field="url")
    parts = urlsplit(value)
    allowed = ("https", "http") if settings.WEBHOOK_ALLOW_HTTP else ("https",)
    if parts.scheme not in allowed or not parts.hostname:
        raise ValidationFailed(
            "url must be an https URL"
            + ("" if settings.WEBHOOK_ALLOW_HTTP else " (http only with WEBHOOK_ALLOW_HTTP)"),
            field="url",
        )
    problem = destination_problem(value)
    if problem is not None:
        raise ValidationFailed(f"url may not be used: {problem}", field="url")
    return value


def _event_types(value: Any) -> list[str]:
    known = sorted(WEBHOOK_EVENTS)
    if (
        not isinstance(value, list) or not value
        or any(not isinstance(kind, str) or kind not in WEBHOOK_EVENTS for kind in value)
    ):  # fmt: skip
        raise ValidationFailed(
            f"event_types must be a non-empty list of: {', '.join(known)}", field="event_types"
        )
    return sorted(set(value))


def endpoint_delete(*, row: WebhookEndpoint) -> None:
    tenant_id = row.tenant_id
    row.delete()
    subscriptions_changed(tenant_id)

"""Webhooks: a tenant's endpoints (saved, secrets rotated) and the delivery of their events,
signed as the Standard Webhooks specification says (``webhook-id``, ``webhook-timestamp``,
``webhook-signature``; the ``standardwebhooks`` package signs, so any Standard Webhooks
library verifies).

Deliveries are rows, entered with their events (threads.events.webhooks). ``webhook_deliver``
takes one under a lease (a duplicate finds it taken), POSTs it, and records the attempt: a
2xx delivers it; anything else is retried after an exponential backoff with jitter, up to
``WEBHOOK_MAX_ATTEMPTS``; beat's ``sweep_webhooks`` re-sends deliveries whose message was lost
and attempts whose worker died. ``WEBHOOK_DISABLE_AFTER`` failed attempts in a row disable the
endpoint, with ``webhook.disabled`` on the thread of the last one.

A URL must be ``https`` (``WEBHOOK_ALLOW_HTTP`` lifts that for development) and is a
tenant-chosen destination: it is judged when saved (``common.egress.destination_problem``) and
delivered through the egress guard, which refuses non-public addresses unless the operator
allow-listed them (``EGRESS_ALLOWED_NETWORKS``, ``EGRESS_ALLOWED_HOSTS``).
"""

from __future__ import annotations

import base64
import json
import random
import secrets
import time
from collections.abc import Mapping
from datetime import UTC, datetime
from typing import Any, Final
from urllib.parse import urlsplit

import httpx2
from django.conf import settings
from django.db import connection, transaction
from standardwebhooks.webhooks import Webhook

from common.egress import destination_problem, egress_client, egress_refusal
from common.errors import NotFound, ValidationFailed
from common.payloads import flag_field, object_body, text_field
from common.time import now_us
from tenancy.encryption import secret_decrypt, secret_encrypt
from tenancy.models import Tenant
from threads.events import publish
from threads.events.webhooks import WEBHOOK_EVENTS, delivery_send, subscriptions_changed
from threads.models import DeliveryStatus, Thread, WebhookDelivery, WebhookEndpoint

FIELDS: Final = ("url", "event_types", "description", "enabled")
MAX_ENDPOINTS: Final = 50  # per tenant
LEASE_US: Final = 60 * 1_000_000  # an attempt's lease (longer than its timeout)
USER_AGENT: Final = "standard-agents-platform-webhooks/1"


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


# Endpoints ----------------------------------------------------------------------------------


def endpoint_save(
    *, tenant: Tenant, data: Mapping[str, Any], current: WebhookEndpoint | None = None
) -> tuple[WebhookEndpoint, str | None]:
    """Create an endpoint (with a new secret, returned once) or change ``current`` by
    ``data`` (merged). ValidationFailed names the field."""
    object_body(data, FIELDS)
    url = data.get("url", current.url if current is not None else None)
    event_types = data.get("event_types", current.event_types if current is not None else None)
    fields = {
        "url": _url(url), "event_types": _event_types(event_types),
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
            secret = _new_secret()
            _secrets_store(row, [{"secret": secret, "created_at": now_us(), "expires_at": None}])
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


def _url(value: Any) -> str:
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


# Secrets ------------------------------------------------------------------------------------


def _new_secret() -> str:
    return "whsec_" + base64.b64encode(secrets.token_bytes(32)).decode()


def _context(row: WebhookEndpoint) -> str:
    return f"threads.WebhookEndpoint:{row.pk}"


def _secrets_store(row: WebhookEndpoint, items: list[dict[str, Any]]) -> None:
    row.secrets_encrypted = secret_encrypt(
        tenant=row.tenant, plaintext=json.dumps(items).encode(), context=_context(row)
    )


def _secrets_of(row: WebhookEndpoint) -> list[dict[str, Any]]:
    plain = secret_decrypt(
        tenant=row.tenant, ciphertext=bytes(row.secrets_encrypted), context=_context(row)
    )
    items: list[dict[str, Any]] = json.loads(plain)
    return items


def signing_secrets(row: WebhookEndpoint, now: int | None = None) -> list[str]:
    """The secrets deliveries are signed with now: the current one and any previous one
    still within its overlap."""
    now = now_us() if now is None else now
    return [
        item["secret"] for item in _secrets_of(row)
        if item["expires_at"] is None or item["expires_at"] > now
    ]  # fmt: skip


def secret_rotate(*, row: WebhookEndpoint) -> str:
    """A new signing secret (returned once); the previous one keeps signing for
    ``WEBHOOK_SECRET_OVERLAP_S`` so receivers can switch without missing a delivery."""
    now = now_us()
    overlap_until = now + settings.WEBHOOK_SECRET_OVERLAP_S * 1_000_000
    kept = [
        {**item, "expires_at": min(item["expires_at"] or overlap_until, overlap_until)}
        for item in _secrets_of(row)
        if item["expires_at"] is None or item["expires_at"] > now
    ]
    secret = _new_secret()
    _secrets_store(row, [{"secret": secret, "created_at": now, "expires_at": None}, *kept])
    row.updated_at = now
    row.save(update_fields=["secrets_encrypted", "updated_at"])
    return secret


def signature_headers(row: WebhookEndpoint, delivery_id: str, body: str) -> dict[str, str]:
    """The Standard Webhooks headers of one attempt: one ``v1`` signature per secret."""
    moment = datetime.now(tz=UTC).replace(microsecond=0)
    signatures = [
        Webhook(secret).sign(msg_id=delivery_id, timestamp=moment, data=body)
        for secret in signing_secrets(row)
    ]
    return {
        "webhook-id": delivery_id,
        "webhook-timestamp": str(int(moment.timestamp())),
        "webhook-signature": " ".join(signatures),
    }


# Delivering ---------------------------------------------------------------------------------

_TAKE = (
    "UPDATE threads_webhookdelivery SET status = 'sending', lease_until = %(lease)s, "
    "attempts = attempts + 1 WHERE id = %(id)s AND ((status = 'pending' AND "
    "next_attempt_at <= %(now)s) OR (status = 'sending' AND lease_until < %(now)s)) "
    "RETURNING id"
)


def backoff_s(attempt: int) -> float:
    """How long after failed attempt ``attempt`` (1-based) the next one waits: exponential
    from ``WEBHOOK_RETRY_BASE_S``, capped at ``WEBHOOK_RETRY_MAX_S``, with full jitter in
    its upper half (so failing receivers are not hit in lockstep)."""
    ceiling = min(settings.WEBHOOK_RETRY_MAX_S, settings.WEBHOOK_RETRY_BASE_S * 2 ** (attempt - 1))
    return float(ceiling * (0.5 + random.random() / 2))  # noqa: S311 - jitter, not a secret


def webhook_deliver(delivery_id: Any) -> str | None:
    """One attempt of delivery ``delivery_id`` if it is due and not taken; its new status,
    or None when there was nothing to do."""
    now = now_us()
    with connection.cursor() as cursor:
        cursor.execute(_TAKE, {"lease": now + LEASE_US, "id": delivery_id, "now": now})
        if cursor.fetchone() is None:
            return None
    delivery = WebhookDelivery.objects.select_related("endpoint__tenant").get(pk=delivery_id)
    endpoint = delivery.endpoint
    if not endpoint.enabled:
        return _record(delivery, None, "the endpoint is disabled", 0.0, final=True)
    body = json.dumps(delivery.payload, separators=(",", ":"), default=str)
    started = time.perf_counter()
    status_code, error = _post(endpoint, str(delivery.pk), body)
    duration_ms = round((time.perf_counter() - started) * 1000, 3)
    return _record(delivery, status_code, error, duration_ms)


def _post(endpoint: WebhookEndpoint, delivery_id: str, body: str) -> tuple[int | None, str]:
    """POST ``body`` through the egress guard; (status code, error text) — no status when it
    never got an answer (a refused address among them)."""
    headers = {"content-type": "application/json", "user-agent": USER_AGENT,
               **signature_headers(endpoint, delivery_id, body)}  # fmt: skip
    try:
        with (
            egress_client(timeout=settings.WEBHOOK_TIMEOUT_S) as client,
            client.stream("POST", endpoint.url, content=body.encode(), headers=headers) as answer,
        ):
            status_code = answer.status_code  # redirects are not followed; the body is not read
    except (httpx2.HTTPError, httpx2.InvalidURL) as failure:
        refusal = egress_refusal(failure)
        if refusal is not None:
            return None, refusal.message[:500]
        return None, f"{type(failure).__name__}: {failure}"[:500]
    if 200 <= status_code < 300:
        return status_code, ""
    return status_code, f"the receiver answered {status_code}"


def _record(
    delivery: WebhookDelivery, status_code: int | None, error: str, duration_ms: float,
    *, final: bool = False,
) -> str:  # fmt: skip
    """Store one attempt's outcome, schedule the next when it failed, and disable an
    endpoint that keeps failing."""
    now = now_us()
    delivery.log = [
        *delivery.log,
        {"at": now, "status_code": status_code, "error": error or None, "duration_ms": duration_ms},
    ][-50:]
    delivery.last_status_code, delivery.last_error, delivery.lease_until = status_code, error, None
    endpoint = delivery.endpoint
    with transaction.atomic():
        locked = WebhookEndpoint.objects.select_for_update().get(pk=endpoint.pk)
        if not error:
            delivery.status, delivery.delivered_at = DeliveryStatus.DELIVERED, now
            locked.consecutive_failures = 0
        else:
            locked.consecutive_failures += 1
            if final or delivery.attempts >= settings.WEBHOOK_MAX_ATTEMPTS:
                delivery.status = DeliveryStatus.FAILED
            else:
                delay = backoff_s(delivery.attempts)
                delivery.status = DeliveryStatus.PENDING
                delivery.next_attempt_at = now + int(delay * 1_000_000)
                transaction.on_commit(lambda: delivery_send(str(delivery.pk), delay), robust=True)
            if locked.enabled and locked.consecutive_failures >= settings.WEBHOOK_DISABLE_AFTER:
                _disable(locked, delivery, error)
        locked.save(update_fields=["consecutive_failures", "enabled", "disabled_at",
                                   "disabled_reason"])  # fmt: skip
        delivery.save(update_fields=["log", "last_status_code", "last_error", "lease_until",
                                     "status", "delivered_at", "next_attempt_at"])  # fmt: skip
    return str(delivery.status)


def _disable(endpoint: WebhookEndpoint, delivery: WebhookDelivery, error: str) -> None:
    endpoint.enabled, endpoint.disabled_at = False, now_us()
    endpoint.disabled_reason = (
        f"{endpoint.consecutive_failures} failed deliveries in a row; the last: {error}"
    )[:2000]
    tenant_id = endpoint.tenant_id
    transaction.on_commit(lambda: subscriptions_changed(tenant_id))
    thread = Thread.objects.filter(pk=delivery.thread_id).first() if delivery.thread_id else None
    if thread is not None:
        payload = {
            "endpoint_id": str(endpoint.pk),
            "url": endpoint.url,
            "failures": endpoint.consecutive_failures,
            "reason": endpoint.disabled_reason,
        }
        publish(thread, "webhook.disabled", payload)


def delivery_redeliver(*, endpoint: WebhookEndpoint, delivery_id: Any) -> WebhookDelivery:
    """Send a delivery again (same ``webhook-id``, so receivers can deduplicate), whatever
    its status; its attempts start over."""
    delivery = WebhookDelivery.objects.filter(endpoint_id=endpoint.pk, pk=delivery_id).first()
    if delivery is None:
        raise NotFound("no such delivery for this endpoint")
    delivery.status, delivery.attempts = DeliveryStatus.PENDING, 0
    delivery.next_attempt_at, delivery.lease_until = now_us(), None
    delivery.save(update_fields=["status", "attempts", "next_attempt_at", "lease_until"])
    delivery_send(str(delivery.pk))
    return delivery


def webhooks_sweep() -> int:
    """Beat: re-send deliveries due for more than a sweep interval (their message was lost)
    and attempts whose lease ran out (their worker died). Returns how many."""
    now = now_us()
    late = now - int(settings.EFFECT_SWEEP_GRACE_S * 1_000_000)
    due = WebhookDelivery.objects.filter(
        status=DeliveryStatus.PENDING, next_attempt_at__lte=late
    ).values_list("id", flat=True)[:1000]
    stuck = WebhookDelivery.objects.filter(
        status=DeliveryStatus.SENDING, lease_until__lt=now
    ).values_list("id", flat=True)[:1000]
    sent = 0
    for delivery_id in [*due, *stuck]:
        sent += delivery_send(str(delivery_id))
    return sent

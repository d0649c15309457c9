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

The tenant's endpoints are saved in ``endpoints``, their secrets kept and their requests
signed in ``signing``; endpoints limited to one turn, whose bodies another app's format makes
(A2A push notifications), are ``turns``.
"""

from __future__ import annotations

import json
import logging
import random
import time
from typing import Any, Final

import httpx2
from django.conf import settings
from django.db import connection, transaction

from common.egress import egress_client, egress_refusal
from common.errors import NotFound
from common.time import now_us
from threads.events import publish
from threads.events.webhooks import delivery_send, subscriptions_changed
from threads.models import DeliveryStatus, Thread, WebhookDelivery, WebhookEndpoint
from threads.services.webhooks.endpoints import (
    FIELDS,
    MAX_ENDPOINTS,
    delivery_json,
    endpoint_delete,
    endpoint_json,
    endpoint_save,
    webhook_url_check,
)
from threads.services.webhooks.signing import secret_rotate, signature_headers, signing_secrets
from threads.services.webhooks.turns import (
    MAX_TENANT_TURN_ENDPOINTS,
    MAX_TURN_ENDPOINTS,
    WebhookFormat,
    WebhookRequest,
    endpoint_secrets,
    format_request,
    turn_endpoint_delete,
    turn_endpoint_save,
    turn_endpoints,
    turn_endpoints_remove,
    webhook_format_register,
)

__all__ = [
    "FIELDS",
    "MAX_ENDPOINTS",
    "MAX_TENANT_TURN_ENDPOINTS",
    "MAX_TURN_ENDPOINTS",
    "WebhookFormat",
    "WebhookRequest",
    "backoff_s",
    "delivery_json",
    "delivery_redeliver",
    "endpoint_delete",
    "endpoint_json",
    "endpoint_save",
    "endpoint_secrets",
    "secret_rotate",
    "signing_secrets",
    "turn_endpoint_delete",
    "turn_endpoint_save",
    "turn_endpoints",
    "webhook_deliver",
    "webhook_format_register",
    "webhook_url_check",
    "webhooks_sweep",
]

LEASE_US: Final = 60 * 1_000_000  # an attempt's lease (longer than its timeout)
USER_AGENT: Final = "standard-agents-platform-webhooks/1"

logger = logging.getLogger(__name__)


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
    try:
        request = _request(endpoint, delivery)
    except Exception as failure:  # a format's failure is an attempt's, retried like one
        logger.exception("webhook format %r failed on delivery %s", endpoint.body_format,
                         delivery.pk)  # fmt: skip
        return _record(delivery, None, f"the body could not be made: {failure}"[:500], 0.0)
    if request is None:
        return _record(delivery, None, "", 0.0, sent=False)
    started = time.perf_counter()
    status_code, error = _post(endpoint, request)
    duration_ms = round((time.perf_counter() - started) * 1000, 3)
    return _record(delivery, status_code, error, duration_ms)


def _request(endpoint: WebhookEndpoint, delivery: WebhookDelivery) -> WebhookRequest | None:
    """What the attempt POSTs: the envelope signed the Standard Webhooks way, or what the
    endpoint's format makes of it."""
    if endpoint.body_format:
        return format_request(endpoint, delivery)
    body = json.dumps(delivery.payload, separators=(",", ":"), default=str)
    headers = {"content-type": "application/json",
               **signature_headers(endpoint, str(delivery.pk), body)}  # fmt: skip
    return WebhookRequest(body, headers)


def _post(endpoint: WebhookEndpoint, request: WebhookRequest) -> tuple[int | None, str]:
    """POST ``request`` through the egress guard; (status code, error text) — no status when
    it never got an answer (a refused address among them)."""
    headers = {"user-agent": USER_AGENT, **request.headers}
    body = request.body
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
    *, final: bool = False, sent: bool = True,
) -> str:  # fmt: skip
    """Store one attempt's outcome (``sent`` False: there was nothing to send), schedule
    the next when it failed, disable an endpoint that keeps failing, and remove an
    endpoint limited to a turn that is over once nothing is left to deliver."""
    now = now_us()
    if sent:
        delivery.log = [
            *delivery.log,
            {"at": now, "status_code": status_code, "error": error or None,
             "duration_ms": duration_ms},
        ][-50:]  # fmt: skip
    delivery.last_status_code, delivery.last_error, delivery.lease_until = status_code, error, None
    endpoint = delivery.endpoint
    with transaction.atomic():
        locked = WebhookEndpoint.every.select_for_update().get(pk=endpoint.pk)
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
        if locked.turn_id is not None and delivery.status != DeliveryStatus.PENDING:
            turn_endpoints_remove(WebhookEndpoint.every.filter(pk=locked.pk), now)
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
    and attempts whose lease ran out (their worker died), and remove the endpoints limited
    to a turn that are done. Returns how many deliveries it re-sent."""
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
    turn_endpoints_remove(WebhookEndpoint.every.all(), now)
    return sent

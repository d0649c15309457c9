"""Endpoints limited to one turn: another app's door to the webhook deliveries (A2A push
notifications are ``interop``'s). Their deliveries are the same rows as a tenant's endpoint's,
written with the turn's events, retried, guarded and logged the same way; their body and
headers come from the format the endpoint names (:func:`webhook_format_register`), not from
the Standard Webhooks signing. They are not the tenant's endpoints (not listed, not counted
against ``MAX_ENDPOINTS``); they are bounded per turn and per tenant, and removed once their
turn is over and nothing is left to deliver (or with the turn, by retention)."""

from __future__ import annotations

from collections.abc import Callable, Mapping
from dataclasses import dataclass, field
from typing import Any, Final

from django.db import transaction
from django.db.models import Exists, OuterRef, Q

from common.errors import ValidationFailed
from common.time import now_us
from threads.events.webhooks import TURN_EVENTS, turn_subscriptions_changed
from threads.models import TURN_TERMINAL, DeliveryStatus, Turn, WebhookDelivery, WebhookEndpoint
from threads.services.webhooks.endpoints import webhook_url_check
from threads.services.webhooks.signing import secrets_open, secrets_seal

MAX_TURN_ENDPOINTS: Final = 10  # per turn
MAX_TENANT_TURN_ENDPOINTS: Final = 1000  # per tenant, all its turns together
# How long after it was switched off a turn's endpoint with nothing left to deliver is removed
# (by the sweep): longer than a worker writing the turn's events holds what it read.
TURN_ENDPOINT_GRACE_US: Final = 60 * 1_000_000


@dataclass(frozen=True)
class WebhookRequest:
    """What one attempt POSTs: its body and the headers a format adds (``content-type``
    included)."""

    body: str
    headers: Mapping[str, str] = field(default_factory=dict)


# A format: what a delivery of an endpoint of that format POSTs, or None when the event
# says nothing in that format (the delivery is then done without a request). It runs on the
# worker, in the delivery's tenant scope, and may read the database.
WebhookFormat = Callable[[WebhookEndpoint, WebhookDelivery], WebhookRequest | None]
_formats: dict[str, WebhookFormat] = {}


def webhook_format_register(name: str, render: WebhookFormat) -> None:
    """Make ``name`` a body format endpoints limited to a turn may name (an app's
    ``AppConfig.ready``)."""
    _formats[name] = render


def format_request(endpoint: WebhookEndpoint, delivery: WebhookDelivery) -> WebhookRequest | None:
    """What the endpoint's format POSTs for ``delivery``; LookupError for a format no app
    registered."""
    render = _formats.get(endpoint.body_format)
    if render is None:
        raise LookupError(f"no webhook format {endpoint.body_format!r} is registered")
    return render(endpoint, delivery)


# Endpoints ----------------------------------------------------------------------------------


def turn_endpoint_save(
    *, turn: Turn, key: str, url: str, body_format: str, secrets: Mapping[str, Any],
    event_types: frozenset[str] = TURN_EVENTS,
) -> WebhookEndpoint:  # fmt: skip
    """Create, or replace, the endpoint named ``key`` limited to ``turn``: its events of
    ``event_types`` (some of ``TURN_EVENTS``) are POSTed to ``url`` in ``body_format``,
    which keeps ``secrets`` (sealed with the tenant's key) for its headers. Call it in the
    transaction that submits the turn to miss none of its events.

    ValidationFailed naming ``url`` for a URL the endpoints may not use, ``turn`` when the
    turn has ``MAX_TURN_ENDPOINTS`` already, ``tenant`` when the tenant's turns have
    ``MAX_TENANT_TURN_ENDPOINTS``; ValueError for a format no app registered or event types
    outside ``TURN_EVENTS``."""
    if body_format not in _formats:
        raise ValueError(f"no webhook format {body_format!r} is registered")
    if not event_types or not event_types <= TURN_EVENTS:
        raise ValueError(f"event types of a turn's endpoint are some of {sorted(TURN_EVENTS)}")
    url = webhook_url_check(url)
    tenant = turn.tenant
    with transaction.atomic():
        Turn.objects.select_for_update().filter(pk=turn.pk).first()  # one save per turn at a time
        mine = WebhookEndpoint.every.filter(turn=turn)
        row = mine.filter(key=key).first()
        if row is None:
            if mine.filter(enabled=True).count() >= MAX_TURN_ENDPOINTS:
                raise ValidationFailed(
                    f"a turn has at most {MAX_TURN_ENDPOINTS} endpoints", field="turn"
                )
            limited = WebhookEndpoint.every.for_tenant(tenant).filter(turn__isnull=False)
            if limited.count() >= MAX_TENANT_TURN_ENDPOINTS:
                raise ValidationFailed(
                    f"a tenant's turns have at most {MAX_TENANT_TURN_ENDPOINTS} endpoints",
                    field="tenant",
                )
            row = WebhookEndpoint(tenant=tenant, turn=turn, key=key, secrets_encrypted=b"")
        row.url, row.body_format, row.event_types = url, body_format, sorted(event_types)
        row.enabled, row.consecutive_failures, row.disabled_at, row.disabled_reason = (
            True, 0, None, "",
        )  # fmt: skip
        row.updated_at = now_us()
        secrets_seal(row, dict(secrets))
        row.save()
        turn_subscriptions_changed(tenant.pk)
    return row


def turn_endpoints(*, turn: Turn) -> list[WebhookEndpoint]:
    """The enabled endpoints limited to ``turn``, oldest first."""
    return list(WebhookEndpoint.every.filter(turn=turn, enabled=True).order_by("created_at", "id"))


def turn_endpoint_delete(*, row: WebhookEndpoint) -> None:
    """Stop ``row`` (an endpoint limited to a turn) at once: it takes no further delivery
    and its row goes with the sweep (a worker writing the turn's events may still hold it in
    hand for an instant, and a delivery row may not point at nothing)."""
    row.enabled, row.disabled_at, row.disabled_reason = False, now_us(), "deleted"
    row.updated_at = row.disabled_at
    with transaction.atomic():
        row.save(update_fields=["enabled", "disabled_at", "disabled_reason", "updated_at"])
        turn_subscriptions_changed(row.tenant_id)


def endpoint_secrets(row: WebhookEndpoint) -> dict[str, Any]:
    """What the format of an endpoint limited to a turn keeps sealed (its ``secrets``)."""
    kept: dict[str, Any] = secrets_open(row)
    return kept


def turn_endpoints_remove(rows: Any, now: int) -> int:
    """Delete those of ``rows`` (endpoints limited to a turn) whose turn is over (no event
    of it comes after its end), or that were switched off ``TURN_ENDPOINT_GRACE_US`` ago or
    more (a worker that still held them in hand has written by then), and that have no
    delivery left to attempt; their deliveries go with them. Returns how many."""
    cutoff = now - TURN_ENDPOINT_GRACE_US
    open_ = WebhookDelivery.objects.filter(
        endpoint_id=OuterRef("pk"), status__in=[DeliveryStatus.PENDING, DeliveryStatus.SENDING]
    )
    done = (
        rows.filter(turn__isnull=False)
        .filter(Q(turn__status__in=TURN_TERMINAL) | Q(enabled=False, updated_at__lt=cutoff))
        .exclude(Exists(open_))
    )
    removed = 0
    for row in done[:1000]:
        turn_subscriptions_changed(row.tenant_id)
        row.delete()
        removed += 1
    return removed

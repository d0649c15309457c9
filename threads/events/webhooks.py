"""Webhook deliveries enter with their events: when the outbox writes an event of a type a
tenant's endpoints subscribe to, it inserts one delivery per endpoint in the same transaction
and sends each after commit (threads.services.webhooks delivers them).

Which endpoints subscribe to what is read once per ``WEBHOOK_CACHE_S`` per tenant and process
(a tenant without webhooks costs one small read that often, not one per event); a change made
in this process is seen at once, elsewhere within that time."""

from __future__ import annotations

import threading
import time
from collections.abc import Mapping, Sequence
from typing import Any, Final

from celery import current_app
from django.conf import settings
from django.db import transaction

from common.duties import duty_wake
from common.outages import OUTAGE_ERRORS
from threads.events.vocabulary import EventType
from threads.models import Thread, WebhookDelivery, WebhookEndpoint

DELIVER_TASK: Final = "threads.deliver_webhook"
# Beat's sweep of deliveries: every delivery sent opens it again (common.duties).
SWEEP_TASK: Final = "threads.sweep_webhooks"
# What an endpoint may subscribe to.
WEBHOOK_EVENTS: Final = frozenset(
    {
        EventType.TURN_COMPLETED,
        EventType.TURN_FAILED,
        EventType.SUBAGENT_COMPLETED,
        EventType.ACTION_REQUIRED,
        EventType.THREAD_STATUS,
        EventType.EFFECT_FAILED,
        EventType.WEBHOOK_DISABLED,
        EventType.LIMIT_CHANGED,
        EventType.CONTEXT_COMPACTION_FAILED,
        EventType.RUNTIME_WARNING,
        EventType.RUNTIME_ERROR,
    }
)

_cache: dict[str, tuple[float, dict[str, list[Any]]]] = {}
_guard = threading.Lock()


def subscriptions(tenant_id: Any) -> Mapping[str, list[Any]]:
    """The tenant's enabled endpoint ids by event type (cached, see the module docstring)."""
    key = str(tenant_id)
    now = time.monotonic()
    with _guard:
        cached = _cache.get(key)
    if cached is not None and cached[0] > now:
        return cached[1]
    found: dict[str, list[Any]] = {}
    rows = WebhookEndpoint.objects.filter(tenant_id=tenant_id, enabled=True).values_list(
        "id", "event_types"
    )
    for endpoint_id, event_types in rows:
        for kind in event_types or ():
            found.setdefault(kind, []).append(endpoint_id)
    with _guard:
        _cache[key] = (now + settings.WEBHOOK_CACHE_S, found)
    return found


def subscriptions_changed(tenant_id: Any) -> None:
    """Forget this process's cached subscriptions of the tenant (after a change)."""
    with _guard:
        _cache.pop(str(tenant_id), None)


def deliveries_enqueue(thread: Thread, events: Sequence[tuple[str, dict[str, Any]]]) -> None:
    """One pending delivery per subscribed endpoint for each ``(type, envelope)``, in the
    caller's transaction; each is sent after commit."""
    subscribed = subscriptions(thread.tenant_id)
    if not subscribed:
        return
    deliveries = [
        WebhookDelivery(
            tenant_id=thread.tenant_id,
            endpoint_id=endpoint_id,
            thread_id=thread.pk,
            event_type=kind,
            payload=envelope,
        )
        for kind, envelope in events
        for endpoint_id in subscribed.get(kind, ())
    ]
    if not deliveries:
        return
    WebhookDelivery.objects.bulk_create(deliveries)
    ids = [str(delivery.pk) for delivery in deliveries]
    transaction.on_commit(lambda: [delivery_send(one) for one in ids], robust=True)


def delivery_send(delivery_id: str, countdown_s: float = 0.0) -> bool:
    """Enqueue ``deliver_webhook``; False when the broker is unreachable (the sweep sends
    it)."""
    duty_wake(SWEEP_TASK)
    try:
        current_app.send_task(DELIVER_TASK, args=[delivery_id], countdown=countdown_s or None)
    except OUTAGE_ERRORS:
        return False
    return True

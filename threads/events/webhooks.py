"""Webhook deliveries enter with their events: when the outbox writes an event of a type a
tenant's endpoints subscribe to, it inserts one delivery per endpoint in the same transaction
and sends each after commit (threads.services.webhooks delivers them).

Which endpoints subscribe to what is read once per ``WEBHOOK_CACHE_S`` per tenant and process
(a tenant without webhooks costs one small read that often, not one per event); a change made
in this process is seen at once, elsewhere within that time.

An endpoint limited to one turn (an A2A push config, made as the turn is submitted or while
it runs) receives only that turn's events of ``TURN_EVENTS``: an event naming the turn
(``turn_id``), or a queue change that lists it. Those endpoints come and go with their turns,
and the first events of a turn follow its endpoint's creation within milliseconds, so a
cache good for seconds would miss them: they are cached against a change token
(:mod:`common.tokens`, one Redis read per write of such an event, no SQL while nothing
changed) that their saves and deletions move."""

from __future__ import annotations

import threading
import time
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from typing import Any, Final

from celery import current_app
from django.conf import settings
from django.db import transaction

from common.duties import duty_wake
from common.outages import OUTAGE_ERRORS
from common.tokens import token_bump_now_and_after_commit, token_get
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
# What an endpoint limited to one turn may receive: the turn's start, its pause for a
# person's decision, its end (a queue change that removed or cancelled it while queued
# among them).
TURN_EVENTS: Final = frozenset(
    {
        EventType.TURN_STARTED,
        EventType.ACTION_REQUIRED,
        EventType.TURN_COMPLETED,
        EventType.TURN_FAILED,
        EventType.TURN_CANCELLED,
        EventType.QUEUE_CHANGED,
    }
)
# What the outbox hands to deliveries_enqueue.
DELIVERED_EVENTS: Final = WEBHOOK_EVENTS | TURN_EVENTS


@dataclass(frozen=True)
class _Subscriptions:
    """A tenant's enabled endpoints as one read found them: the tenant's own by event type
    (good until ``expires``), and those limited to a turn by turn id, with their event
    types (good while the change token is still ``token``)."""

    expires: float
    token: str | None
    by_type: dict[str, list[Any]]
    by_turn: dict[str, list[tuple[Any, frozenset[str]]]]


_cache: dict[str, _Subscriptions] = {}
_guard = threading.Lock()


def _token_name(tenant_id: Any) -> str:
    return f"webhooks:turns:{tenant_id}"


def _load(tenant_id: Any, token: str | None) -> _Subscriptions:
    by_type: dict[str, list[Any]] = {}
    by_turn: dict[str, list[tuple[Any, frozenset[str]]]] = {}
    rows = WebhookEndpoint.every.filter(tenant_id=tenant_id, enabled=True).values(
        "id", "event_types", "turn_id"
    )
    for row in rows:
        turn_id: Any = row["turn_id"]
        if turn_id is not None:
            limited = (row["id"], frozenset(row["event_types"]))
            by_turn.setdefault(str(turn_id), []).append(limited)
            continue
        for kind in row["event_types"] or ():
            by_type.setdefault(kind, []).append(row["id"])
    found = _Subscriptions(time.monotonic() + settings.WEBHOOK_CACHE_S, token, by_type, by_turn)
    with _guard:
        _cache[str(tenant_id)] = found
    return found


def _subscriptions(tenant_id: Any, *, turns: bool) -> _Subscriptions:
    """The tenant's subscriptions, read again when the cache expired or, with ``turns``,
    when the turn-limited endpoints changed (or Redis cannot say whether they did)."""
    with _guard:
        cached = _cache.get(str(tenant_id))
    if cached is not None and cached.expires > time.monotonic():
        if not turns:
            return cached
        token = token_get(_token_name(tenant_id))
        if token is not None and cached.token == token:
            return cached
    else:
        token = token_get(_token_name(tenant_id))
    # The token is read before the rows: a change after this read moves it again.
    return _load(tenant_id, token)


def subscriptions(tenant_id: Any) -> Mapping[str, list[Any]]:
    """The tenant's own enabled endpoint ids by event type (cached, see the module
    docstring)."""
    return _subscriptions(tenant_id, turns=False).by_type


def subscriptions_changed(tenant_id: Any) -> None:
    """Forget this process's cached subscriptions of the tenant (after a change)."""
    with _guard:
        _cache.pop(str(tenant_id), None)


def turn_subscriptions_changed(tenant_id: Any) -> None:
    """After a change to the tenant's turn-limited endpoints, in the changing transaction:
    every process reads them again (the token moves now and after commit)."""
    subscriptions_changed(tenant_id)
    token_bump_now_and_after_commit(_token_name(tenant_id))


def _turn_ids(kind: str, envelope: Mapping[str, Any]) -> list[str]:
    """The turns an event is about: its ``turn_id``, or the turns a queue change lists."""
    if kind != EventType.QUEUE_CHANGED:
        return [str(envelope["turn_id"])] if envelope.get("turn_id") else []
    payload = envelope.get("payload") or {}
    items = payload.get("items") or [payload.get("item") or {}]
    return [str(item["id"]) for item in items if item.get("id")]


def _subscribers(found: _Subscriptions, kind: str, envelope: Mapping[str, Any]) -> list[Any]:
    """The endpoints an event goes to: the tenant's that subscribe to its type, and those
    limited to a turn it is about that subscribe to it."""
    endpoints = list(found.by_type.get(kind, ())) if kind in WEBHOOK_EVENTS else []
    if kind in TURN_EVENTS and found.by_turn:
        for turn_id in _turn_ids(kind, envelope):
            endpoints += [endpoint_id for endpoint_id, kinds in found.by_turn.get(turn_id, ())
                          if kind in kinds]  # fmt: skip
    return endpoints


def deliveries_enqueue(thread: Thread, events: Sequence[tuple[str, dict[str, Any]]]) -> None:
    """One pending delivery per subscribed endpoint for each ``(type, envelope)``, in the
    caller's transaction; each is sent after commit."""
    found = _subscriptions(thread.tenant_id, turns=any(kind in TURN_EVENTS for kind, _ in events))
    if not found.by_type and not found.by_turn:
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
        for endpoint_id in _subscribers(found, kind, envelope)
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

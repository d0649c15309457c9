"""Webhooks with a loopback receiver that verifies every request with the standardwebhooks
package (any Standard Webhooks library would do): deliveries enter with their events, are
signed, retried with backoff, disabled when they keep failing, redelivered on demand, and a
tenant's endpoint never receives another tenant's event. The attempts are run here (the
Celery task's body); in production a worker runs them."""

from __future__ import annotations

import json
import time
from collections.abc import Callable, Iterator
from typing import Any

import pytest
from rest_framework.test import APIClient
from standardwebhooks.webhooks import Webhook

from tenancy.models import Role, Tenant
from tests.answers import assert_answers, pages
from tests.factories import make_thread
from tests.fakes.webhook_receiver import Receiver, webhook_receiver
from threads.events import publish
from threads.events import webhooks as enqueue_module
from threads.models import Event, Thread, WebhookDelivery, WebhookEndpoint
from threads.services import webhooks as webhooks_module
from threads.services.webhooks import webhook_deliver

pytestmark = pytest.mark.django_db


@pytest.fixture
def receiver() -> Iterator[Receiver]:
    with webhook_receiver() as state:
        yield state


@pytest.fixture(autouse=True)
def _loopback(settings: Any, monkeypatch: pytest.MonkeyPatch) -> list[str]:
    """Loopback http allowed (loopback addresses are, for the whole run:
    tests/environment.py), fast retries, no subscription cache; sends recorded."""
    settings.WEBHOOK_ALLOW_HTTP = True
    settings.WEBHOOK_RETRY_BASE_S = 0.05
    settings.WEBHOOK_CACHE_S = 0.0
    sent: list[str] = []

    def send(delivery_id: str, countdown_s: float = 0.0) -> bool:
        sent.append(delivery_id)
        return True

    monkeypatch.setattr(enqueue_module, "delivery_send", send)
    monkeypatch.setattr(webhooks_module, "delivery_send", send)
    return sent


@pytest.fixture
def admin(tenant: Tenant, client_for: Callable[..., APIClient]) -> APIClient:
    return client_for(tenant, Role.ADMIN)


def _register(api: APIClient, url: str, *types: str) -> dict[str, Any]:
    response = api.post(
        "/api/v1/webhooks", {"url": url, "event_types": list(types or ["thread.status"])},
        format="json",
    )  # fmt: skip
    assert response.status_code == 201, response.json()
    created: dict[str, Any] = response.json()
    return created


def _status_event(thread: Thread) -> WebhookDelivery:
    publish(thread, "thread.status", {"status": "completed"})
    return WebhookDelivery.objects.filter(thread_id=thread.pk).latest("created_at")


def _verified(secret: str, headers: dict[str, str], body: str) -> Any:
    return Webhook(secret).verify(body, headers)


def test_an_event_is_delivered_signed_and_the_receiver_verifies_it(
    tenant: Tenant, admin: APIClient, receiver: Receiver
) -> None:
    created = _register(admin, receiver.url)
    thread = make_thread(tenant)

    delivery = _status_event(thread)
    outcome = webhook_deliver(delivery.pk)

    assert created["secret"].startswith("whsec_")
    assert outcome == "delivered"
    [(headers, body, _)] = receiver.received
    assert headers["webhook-id"] == str(delivery.pk)
    event = _verified(created["secret"], headers, body)
    stored = Event.objects.get(thread=thread, type="thread.status")
    assert (event["type"], event["thread_id"], event["payload"]) == (
        "thread.status", str(thread.pk), {"status": "completed"},
    )  # fmt: skip
    assert (event["event_id"], event["sequence"]) == (str(stored.id), stored.sequence)
    assert webhook_deliver(delivery.pk) is None  # delivered: a duplicate does nothing


def test_three_failures_then_success_are_retried_with_backoff(
    tenant: Tenant, admin: APIClient, receiver: Receiver
) -> None:
    created = _register(admin, receiver.url)
    receiver.script = [503, 503, 503]
    delivery = _status_event(make_thread(tenant))
    gaps: list[float] = []

    outcomes = [webhook_deliver(delivery.pk)]
    while outcomes[-1] == "pending":
        delivery.refresh_from_db()
        wait_s = (delivery.next_attempt_at - time.time() * 1_000_000) / 1_000_000
        gaps.append(wait_s)
        time.sleep(max(0.0, wait_s) + 0.01)
        outcomes.append(webhook_deliver(delivery.pk))

    delivery.refresh_from_db()
    assert outcomes == ["pending", "pending", "pending", "delivered"]
    assert (delivery.attempts, [entry["status_code"] for entry in delivery.log]) == (
        4, [503, 503, 503, 200],
    )  # fmt: skip
    # Exponential: each wait is within [0.5, 1] of base * 2^(n-1) (base 0.05 s).
    for n, gap in enumerate(gaps, start=1):
        assert 0.025 * 2 ** (n - 1) - 0.02 <= gap <= 0.05 * 2 ** (n - 1) + 0.02, gaps
    assert {headers["webhook-id"] for headers, _, _ in receiver.received} == {str(delivery.pk)}
    for headers, body, _ in receiver.received:
        _verified(created["secret"], headers, body)


def test_a_tenants_webhook_never_receives_another_tenants_event(
    tenant: Tenant, other_tenant: Tenant, admin: APIClient, receiver: Receiver,
    client_for: Callable[..., APIClient],
) -> None:  # fmt: skip
    mine = _register(admin, receiver.url)
    theirs = _register(client_for(other_tenant, Role.ADMIN), receiver.url)

    publish(make_thread(other_tenant), "thread.status", {"status": "failed"})

    deliveries = WebhookDelivery.objects.all()
    assert [str(row.endpoint_id) for row in deliveries] == [theirs["id"]]
    assert mine["id"] != theirs["id"]


def test_only_subscribed_event_types_are_delivered(
    tenant: Tenant, admin: APIClient, receiver: Receiver
) -> None:
    _register(admin, receiver.url, "turn.completed")
    thread = make_thread(tenant)

    publish(thread, "thread.status", {"status": "completed"})
    publish(thread, "custom", {"name": "x", "data": 1})

    assert not WebhookDelivery.objects.exists()


def test_after_a_rotation_both_secrets_sign_until_the_overlap_ends(
    tenant: Tenant, admin: APIClient, receiver: Receiver
) -> None:
    created = _register(admin, receiver.url)
    rotated = admin.post(f"/api/v1/webhooks/{created['id']}/rotate-secret").json()

    webhook_deliver(_status_event(make_thread(tenant)).pk)

    [(headers, body, _)] = receiver.received
    assert len(headers["webhook-signature"].split(" ")) == 2
    assert _verified(created["secret"], headers, body)["type"] == "thread.status"
    assert _verified(rotated["secret"], headers, body)["type"] == "thread.status"


def test_an_endpoint_that_keeps_failing_is_disabled_with_an_event(
    tenant: Tenant, admin: APIClient, receiver: Receiver, settings: Any
) -> None:
    settings.WEBHOOK_DISABLE_AFTER = 2
    created = _register(admin, receiver.url)
    receiver.script = [500, 500, 500]
    thread = make_thread(tenant)

    webhook_deliver(_status_event(thread).pk)
    webhook_deliver(_status_event(thread).pk)

    endpoint = WebhookEndpoint.objects.get(pk=created["id"])
    assert (endpoint.enabled, endpoint.consecutive_failures) == (False, 2)
    assert "2 failed deliveries in a row" in endpoint.disabled_reason
    disabled = Event.objects.get(thread=thread, type="webhook.disabled").payload
    assert disabled["endpoint_id"] == created["id"]
    before = WebhookDelivery.objects.count()
    publish(thread, "thread.status", {"status": "completed"})
    assert WebhookDelivery.objects.count() == before  # a disabled endpoint gets nothing new
    enabled = admin.patch(f"/api/v1/webhooks/{created['id']}", {"enabled": True}, format="json")
    assert (enabled.json()["enabled"], enabled.json()["consecutive_failures"]) == (True, 0)


def test_a_delivery_is_redelivered_with_the_same_id(
    tenant: Tenant, admin: APIClient, receiver: Receiver
) -> None:
    created = _register(admin, receiver.url)
    delivery = _status_event(make_thread(tenant))
    webhook_deliver(delivery.pk)

    again = admin.post(
        f"/api/v1/webhooks/{created['id']}/deliveries/{delivery.pk}/redeliver"
    ).json()
    webhook_deliver(delivery.pk)
    log = admin.get(f"/api/v1/webhooks/{created['id']}/deliveries").json()

    assert (again["status"], again["attempts"]) == ("pending", 0)
    assert [headers["webhook-id"] for headers, _, _ in receiver.received] == [str(delivery.pk)] * 2
    assert log["results"][0]["status"] == "delivered"
    assert log["results"][0]["log"][0]["status_code"] == 200


def test_a_private_address_is_refused_unless_allowed(
    tenant: Tenant, admin: APIClient, receiver: Receiver, settings: Any
) -> None:
    _register(admin, receiver.url)
    settings.EGRESS_ALLOWED_NETWORKS = []

    delivery = _status_event(make_thread(tenant))
    webhook_deliver(delivery.pk)

    delivery.refresh_from_db()
    assert receiver.received == []
    assert delivery.last_error == (
        "127.0.0.1 is a loopback address: outbound calls to tenant-chosen URLs may not reach "
        "loopback addresses (allow it with EGRESS_ALLOWED_NETWORKS)"
    )


@pytest.mark.parametrize(
    ("body", "field"),
    [
        ({"url": "ftp://example.com", "event_types": ["thread.status"]}, "url"),
        ({"url": "https://example.com", "event_types": []}, "event_types"),
        ({"url": "https://example.com", "event_types": ["message.created"]}, "event_types"),
        ({"url": "https://example.com", "event_types": ["thread.status"], "x": 1}, "x"),
    ],
)
def test_a_bad_endpoint_is_a_400_naming_the_field(
    admin: APIClient, body: dict[str, Any], field: str
) -> None:
    response = admin.post("/api/v1/webhooks", body, format="json")

    assert response.status_code == 400, response.json()
    assert response.json()["error"]["field"] == field


def test_plain_http_needs_the_setting(admin: APIClient, settings: Any) -> None:
    settings.WEBHOOK_ALLOW_HTTP = False

    response = admin.post(
        "/api/v1/webhooks", {"url": "http://example.com", "event_types": ["thread.status"]},
        format="json",
    )  # fmt: skip

    assert response.status_code == 400
    assert "WEBHOOK_ALLOW_HTTP" in response.json()["error"]["message"]


def test_members_cannot_see_or_manage_webhooks(
    tenant: Tenant, member: APIClient, admin: APIClient
) -> None:
    created = _register(admin, "https://example.com/hooks")

    assert member.get("/api/v1/webhooks").status_code == 403
    assert member.get(f"/api/v1/webhooks/{created['id']}").status_code == 403
    assert "secret" not in admin.get(f"/api/v1/webhooks/{created['id']}").json()
    assert json.dumps(admin.get("/api/v1/webhooks").json()).count("whsec_") == 0


def test_answers_are_what_their_components_document(
    tenant: Tenant, admin: APIClient, receiver: Receiver
) -> None:
    created = _register(admin, receiver.url)
    url = f"/api/v1/webhooks/{created['id']}"
    receiver.script = [500]
    delivery = _status_event(make_thread(tenant))
    webhook_deliver(delivery.pk)

    rotated = admin.post(f"{url}/rotate-secret").json()
    redelivered = admin.post(f"{url}/deliveries/{delivery.pk}/redeliver").json()

    assert_answers("WebhookCreated", created)
    assert_answers("Webhook", admin.get(url).json())
    assert_answers("WebhookSecret", rotated)
    assert_answers("WebhookDelivery", redelivered)
    assert_answers("PaginatedWebhookList", admin.get("/api/v1/webhooks").json())
    delivered = admin.get(f"{url}/deliveries").json()
    assert_answers("PaginatedWebhookDeliveryList", delivered)
    assert delivered["results"][0]["log"][0]["status_code"] == 500
    assert created["created_at"] <= created["updated_at"] <= admin.get(url).json()["updated_at"]


def test_endpoints_page_oldest_first_and_deliveries_newest_first(
    tenant: Tenant, admin: APIClient, receiver: Receiver
) -> None:
    made = [
        _register(admin, f"{receiver.url}/{n}", "turn.completed" if n else "thread.status")["id"]
        for n in range(3)
    ]
    thread = make_thread(tenant)
    deliveries = [str(_status_event(thread).pk) for _ in range(3)]
    WebhookDelivery.objects.filter(pk=deliveries[0]).update(status="failed")
    deliveries_url = f"/api/v1/webhooks/{made[0]}/deliveries"

    endpoints = pages(admin, "/api/v1/webhooks?limit=2")
    newest = pages(admin, f"{deliveries_url}?limit=2")
    pending = pages(admin, f"{deliveries_url}?limit=1&status=pending")

    assert [[e["id"] for e in page["results"]] for page in endpoints] == [made[:2], made[2:]]
    assert [[d["id"] for d in page["results"]] for page in newest] == [
        deliveries[:0:-1], deliveries[:1],
    ]  # fmt: skip
    assert [[d["id"] for d in page["results"]] for page in pending] == [
        [deliveries[2]], [deliveries[1]],
    ]  # fmt: skip
    assert "status=pending" in pending[0]["next"]
    assert admin.get(f"{deliveries_url}?limit=0").json()["error"]["field"] == "limit"
    assert admin.get("/api/v1/webhooks?cursor=x").json()["error"]["field"] == "cursor"

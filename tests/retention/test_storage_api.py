"""``GET /api/v1/threads/{id}/storage``: counts and bytes of a thread's rows, summed by
PostgreSQL; no query parameters; another tenant's thread is a 404."""

from __future__ import annotations

import json
from collections.abc import Callable

import pytest
from rest_framework.test import APIClient

from retention.models import RetentionPolicy
from retention.prune import retention_prune
from tenancy.models import Role, Tenant
from tests.factories import make_thread
from tests.retention.support import OLD, emit, old_thread
from threads.models import Event, Thread
from threads.services.files import file_write
from threads.services.logs import log_create
from threads.services.messages import message_inject
from threads.services.values import value_serialize, value_set

pytestmark = pytest.mark.django_db


def _json_bytes(value: object) -> int:
    """Bytes of ``value`` as PostgreSQL prints jsonb (``", "`` and ``": "`` separators)."""
    return len(json.dumps(value, ensure_ascii=False).encode())


def test_the_report_counts_and_sums_each_kind(
    tenant: Tenant, client_for: Callable[..., APIClient], thread: Thread
) -> None:
    message_inject(thread=thread, role="user", content="héllo")  # 6 bytes in UTF-8
    file_write(thread=thread, path="/a.txt", data=b"12345", mime_type="text/plain")
    file_write(thread=thread, path="/docs/b.txt", data=b"123", mime_type="text/plain")
    log_create(thread=thread, kind="tool", data={"k": "v"})
    value_set(thread=thread, key="plan", value={"a": 1})
    events = list(Event.objects.filter(thread=thread))
    reader = client_for(tenant, Role.READ_ONLY)

    response = reader.get(f"/api/v1/threads/{thread.id}/storage")

    assert response.status_code == 200, response.content
    report = response.json()
    assert report["thread_id"] == str(thread.id)
    assert report["messages"] == {"count": 1, "bytes": 6 + len(b"[]")}
    assert report["files"] == {"count": 2, "bytes": 8}
    assert report["logs"] == {"count": 1, "bytes": _json_bytes({"k": "v"})}
    assert report["kv"] == {"count": 1, "bytes": len(value_serialize({"a": 1}))}
    assert report["events"] == {
        "count": len(events), "bytes": sum(_json_bytes(e.payload) for e in events),
    }  # fmt: skip
    parts = ("messages", "files", "events", "logs", "kv")
    assert report["total_bytes"] == sum(report[part]["bytes"] for part in parts)
    assert report["events_pruned_through"] == 0


def test_a_pruned_log_is_reported(tenant: Tenant, member: APIClient) -> None:
    RetentionPolicy.objects.create(tenant=tenant, events_days=1)
    thread = old_thread(tenant)
    emit(thread, 4, at=OLD)
    retention_prune()

    report = member.get(f"/api/v1/threads/{thread.id}/storage").json()

    assert report["events"] == {"count": 0, "bytes": 0}
    assert report["events_pruned_through"] == 4


def test_an_empty_thread_reports_zeros(member: APIClient, tenant: Tenant) -> None:
    thread = make_thread(tenant)

    report = member.get(f"/api/v1/threads/{thread.id}/storage").json()

    zero = {"count": 0, "bytes": 0}
    assert report == {"thread_id": str(thread.id), "messages": zero, "files": zero,
                      "events": zero, "logs": zero, "kv": zero, "total_bytes": 0,
                      "events_pruned_through": 0}  # fmt: skip


def test_a_query_parameter_is_a_400_naming_it(member: APIClient, thread: Thread) -> None:
    response = member.get(f"/api/v1/threads/{thread.id}/storage", {"verbose": "1"})

    assert response.status_code == 400
    assert response.json()["error"]["field"] == "verbose"
    assert response.json()["error"]["code"] == "invalid"


def test_another_tenants_thread_is_a_404(
    other_tenant: Tenant, client_for: Callable[..., APIClient], thread: Thread
) -> None:
    response = client_for(other_tenant, Role.ADMIN).get(f"/api/v1/threads/{thread.id}/storage")

    assert response.status_code == 404
    assert response.json()["error"]["code"] == "not_found"

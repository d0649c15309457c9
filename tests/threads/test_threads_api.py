"""Threads, messages and logs over REST; thread endpoints from the registry."""

from __future__ import annotations

import hashlib
import json
from collections.abc import Callable, Iterator
from typing import Any

import pytest
from django.db import connection
from django.test.utils import CaptureQueriesContext
from rest_framework.test import APIClient

from agents.registry import Registry, thread_endpoint, use_registry
from tenancy.models import Role, Tenant
from tests.agents.samples import seed_rich
from tests.factories import make_thread
from threads.models import IdempotencyKey, Message, Thread
from threads.services.files import file_write
from threads.services.logs import log_create
from threads.services.messages import message_inject
from threads.services.threads import thread_counts

pytestmark = pytest.mark.django_db


@pytest.fixture
def member(tenant: Tenant, client_for: Callable[..., APIClient]) -> APIClient:
    """The shared member client, with the sample definitions (threads need an agent)."""
    seed_rich(tenant)
    return client_for(tenant, Role.MEMBER)


def test_create_then_read_a_thread(member: APIClient) -> None:
    created = member.post(
        "/api/v1/threads",
        {"agent": "helper", "user_id": "u1", "tags": ["vip", "vip", "eu"], "metadata": {"k": 1}},
        format="json",
    )
    detail = member.get(f"/api/v1/threads/{created.json()['id']}")

    assert created.status_code == 201
    body = detail.json()
    assert (body["agent"], body["origin_agent"], body["user_id"]) == ("helper", "helper", "u1")
    assert body["tags"] == ["vip", "eu"]
    assert body["metadata"] == {"k": 1}
    assert body["status"] == "completed"
    assert body["counts"] == {"messages": 0, "logs": 0, "files": 0, "children": 0}
    assert isinstance(body["created_at"], int)


def test_a_repeated_create_with_one_idempotency_key_answers_the_first_thread(
    member: APIClient, tenant: Tenant
) -> None:
    body = {"agent": "helper", "env": {"TOKEN": {"value": "s3cret", "type": "secret"}}}

    first = member.post("/api/v1/threads", body, format="json", HTTP_IDEMPOTENCY_KEY="t-1")
    again = member.post("/api/v1/threads", body, format="json", HTTP_IDEMPOTENCY_KEY="t-1")
    other = member.post(
        "/api/v1/threads", {"agent": "helper"}, format="json", HTTP_IDEMPOTENCY_KEY="t-1"
    )

    assert (first.status_code, again.status_code) == (201, 201)
    assert again.json() == first.json()
    assert again["Idempotent-Replayed"] == "true"
    assert (other.status_code, other.json()["error"]["field"]) == (409, "Idempotency-Key")
    assert Thread.objects.filter(tenant=tenant).count() == 1
    stored = IdempotencyKey.objects.get(key="t-1")
    assert "s3cret" not in json.dumps(stored.response)
    # The stored hash is keyed by the server's secret: not the plain digest of the request.
    canonical = json.dumps(body, sort_keys=True)
    plain = hashlib.sha256(f"POST\n/api/v1/threads\n{canonical}".encode()).hexdigest()
    assert stored.request_hash != plain


@pytest.mark.parametrize(
    ("payload", "field"),
    [
        ({}, "agent"),
        ({"agent": "ghost"}, "agent"),
        ({"agent": "helper", "tags": "vip"}, "tags"),
        ({"agent": "helper", "metadata": [1]}, "metadata"),
    ],
)
def test_bad_thread_input_is_400_naming_the_field(
    member: APIClient, payload: dict[str, Any], field: str
) -> None:
    response = member.post("/api/v1/threads", payload, format="json")

    assert response.status_code == 400
    assert response.json()["error"]["field"] == field


def test_list_filters_and_paginates(tenant: Tenant, member: APIClient) -> None:
    make_thread(tenant, agent_name="helper", user_id="a", tags=["x"])
    make_thread(tenant, agent_name="debate", user_id="b", tags=["y"])
    make_thread(tenant, agent_name="helper", user_id="b", status="failed")

    def ids(query: str) -> int:
        return len(member.get(f"/api/v1/threads?{query}").json()["results"])

    assert ids("") == 3
    assert ids("agent=helper") == 2
    assert ids("user_id=b") == 2
    assert ids("tag=x") == 1
    assert ids("status=failed") == 1
    assert ids("status=lost") == 0
    assert ids("created_after=2000-01-01T00:00:00Z") == 3
    assert ids("created_before=2000-01-01T00:00:00Z") == 0
    assert len(member.get("/api/v1/threads?limit=2").json()["results"]) == 2
    assert member.get("/api/v1/threads?status=nap").json()["error"]["field"] == "status"


def _pages(client: APIClient, url: str) -> list[dict[str, Any]]:
    """Every page of a list, following ``next`` from ``url``."""
    pages = []
    next_url: str | None = url
    while next_url is not None:
        response = client.get(next_url)
        assert response.status_code == 200, response.content
        pages.append(response.json())
        next_url = pages[-1]["next"]
    return pages


def test_threads_page_newest_first_by_cursor(tenant: Tenant, member: APIClient) -> None:
    made = [make_thread(tenant, agent_name="helper") for _ in range(5)]
    newest_first = [str(t.id) for t in sorted(made, key=lambda t: (-t.created_at, str(t.id)))]

    pages = _pages(member, "/api/v1/threads?limit=2&agent=helper")
    back = member.get(pages[1]["previous"]).json()

    assert [[t["id"] for t in page["results"]] for page in pages] == [
        newest_first[:2],
        newest_first[2:4],
        newest_first[4:],
    ]
    assert (pages[0]["previous"], pages[-1]["next"]) == (None, None)
    assert all("agent=helper" in page["next"] for page in pages[:-1])
    assert [t["id"] for t in back["results"]] == newest_first[:2]
    assert set(pages[0]) == {"results", "next", "previous"}


def test_a_derived_status_filter_pages_each_matching_thread_once(
    tenant: Tenant, member: APIClient
) -> None:
    """``lost`` is read, not stored: running threads no worker holds."""
    lost = {str(make_thread(tenant, status="running").id) for _ in range(3)}
    make_thread(tenant, status="completed")

    pages = _pages(member, "/api/v1/threads?status=lost&limit=2")

    listed = [t["id"] for page in pages for t in page["results"]]
    assert (len(pages), len(listed), set(listed)) == (2, 3, lost)
    assert all(t["status"] == "lost" for page in pages for t in page["results"])


def test_update_tags_and_metadata(thread: Thread, member: APIClient) -> None:
    response = member.patch(
        f"/api/v1/threads/{thread.id}", {"tags": ["a"], "metadata": {"m": 2}}, format="json"
    )

    assert response.status_code == 200
    assert (response.json()["tags"], response.json()["metadata"]) == (["a"], {"m": 2})


def test_delete_removes_the_thread_and_its_children(
    tenant: Tenant, thread: Thread, member: APIClient
) -> None:
    child = make_thread(tenant, parent=thread)
    make_thread(tenant, parent=child)
    message_inject(thread=child, role="user", content="bye")

    response = member.delete(f"/api/v1/threads/{thread.id}")

    assert response.status_code == 200
    assert response.json() == {"deleted_threads": 3}
    assert not Thread.objects.filter(tenant=tenant).exists()
    assert not Message.objects.filter(tenant=tenant).exists()


def test_messages_list_get_patch_inject_delete(thread: Thread, member: APIClient) -> None:
    base = f"/api/v1/threads/{thread.id}/messages"
    for index in range(4):
        message_inject(thread=thread, role="user", content=f"m{index}")
    message_inject(thread=thread, role="system", content="quiet", silent=True)

    first_two = member.get(f"{base}?limit=2").json()
    newest_two = member.get(f"{base}?limit=2&order=desc").json()
    with_silent = member.get(f"{base}?include_silent=true").json()
    injected = member.post(
        f"{base}/inject", {"role": "assistant", "content": "note"}, format="json"
    )
    message_id = injected.json()["id"]
    patched = member.patch(f"{base}/{message_id}", {"metadata": {"x": 1}}, format="json")
    fetched = member.get(f"{base}/{message_id}")
    deleted = member.delete(f"{base}/{message_id}")

    assert [m["content"] for m in first_two["results"]] == ["m0", "m1"]
    assert [m["content"] for m in newest_two["results"]] == ["m3", "m2"]
    assert (first_two["previous"], first_two["next"] is not None) == (None, True)
    assert [m["content"] for m in with_silent["results"]] == ["m0", "m1", "m2", "m3", "quiet"]
    assert injected.status_code == 201
    assert patched.json()["metadata"] == {"x": 1}
    assert fetched.json()["content"] == "note"
    assert deleted.status_code == 204
    assert member.get(f"{base}/{message_id}").status_code == 404


def test_paging_messages_forward_meets_each_once_oldest_to_newest(
    thread: Thread, member: APIClient
) -> None:
    base = f"/api/v1/threads/{thread.id}/messages"
    for index in range(5):
        message_inject(thread=thread, role="user", content=f"m{index}")

    pages = _pages(member, f"{base}?limit=2&order=asc")
    message_inject(thread=thread, role="user", content="m5")  # written while paging
    after = member.get(pages[-1]["previous"]).json()
    backwards = _pages(member, f"{base}?limit=2&order=desc")

    assert [[m["content"] for m in page["results"]] for page in pages] == [
        ["m0", "m1"],
        ["m2", "m3"],
        ["m4"],
    ]
    assert [m["content"] for m in after["results"]] == ["m2", "m3"]
    assert [m["content"] for page in backwards for m in page["results"]] == [
        "m5",
        "m4",
        "m3",
        "m2",
        "m1",
        "m0",
    ]
    assert all("order=desc" in page["next"] for page in backwards[:-1])


def test_messages_list_filters_by_depth_and_silence(thread: Thread, member: APIClient) -> None:
    base = f"/api/v1/threads/{thread.id}/messages"
    top = message_inject(thread=thread, role="assistant", content="top")
    message_inject(thread=thread, role="user", content="nested", parent=top)
    message_inject(thread=thread, role="system", content="quiet", silent=True)

    def said(query: str) -> list[str]:
        return [m["content"] for m in member.get(f"{base}?{query}").json()["results"]]

    assert said("") == ["top"]
    assert said("depth=1") == ["top", "nested"]
    assert said("depth=1&include_silent=true") == ["top", "nested", "quiet"]
    assert member.get(f"{base}?order=up").json()["error"]["field"] == "order"


def test_inject_refuses_bad_roles(thread: Thread, member: APIClient) -> None:
    response = member.post(
        f"/api/v1/threads/{thread.id}/messages/inject", {"role": "bot", "content": "x"},
        format="json",
    )  # fmt: skip

    assert response.status_code == 400
    assert response.json()["error"]["field"] == "role"


def test_logs(thread: Thread, member: APIClient) -> None:
    logs = [log_create(thread=thread, kind="llm", data={"n": n}) for n in range(3)]

    listed = member.get(f"/api/v1/threads/{thread.id}/logs?limit=2").json()
    one = member.get(f"/api/v1/threads/{thread.id}/logs/{logs[0].id}")

    assert [log["data"]["n"] for log in listed["results"]] == [2, 1]
    assert (listed["next"] is not None, listed["previous"]) == (True, None)
    assert one.json()["kind"] == "llm"


def test_read_only_reads_but_cannot_write(
    tenant: Tenant, thread: Thread, client_for: Callable[..., APIClient]
) -> None:
    reader = client_for(tenant, Role.READ_ONLY)

    assert reader.get(f"/api/v1/threads/{thread.id}/messages").status_code == 200
    response = reader.post(
        f"/api/v1/threads/{thread.id}/messages/inject", {"role": "user", "content": "x"},
        format="json",
    )  # fmt: skip
    assert response.status_code == 403
    assert reader.delete(f"/api/v1/threads/{thread.id}").status_code == 403


@pytest.fixture
def endpoints() -> Iterator[Registry]:
    with use_registry() as scoped:

        @thread_endpoint("summary", methods=["GET"])
        def summary(request: Any, state: Any, params: dict[str, str]) -> dict[str, Any]:
            return {"thread": state.thread_id, "messages": state.get_messages().total,
                    "at_rest": state.execution is None}  # fmt: skip

        @thread_endpoint("reports/[id]", methods=["GET", "POST"])
        def report(request: Any, state: Any, params: dict[str, str]) -> dict[str, str]:
            return {"id": params["id"], "method": request.method}

        @thread_endpoint("files/[*]", methods=["GET"])
        def files(request: Any, state: Any, params: dict[str, str]) -> dict[str, str]:
            return {"rest": params["*"]}

        @thread_endpoint("status", methods=["GET"], public=True)
        def public_status(request: Any, state: Any, params: dict[str, str]) -> dict[str, bool]:
            return {"anonymous": request.auth is None}

        yield scoped


def test_thread_endpoints_route_and_receive_an_at_rest_state(
    endpoints: Registry, thread: Thread, member: APIClient
) -> None:
    base = f"/api/v1/threads/{thread.id}/endpoints"
    message_inject(thread=thread, role="user", content="hi")

    assert member.get(f"{base}/summary").json() == {
        "thread": str(thread.id), "messages": 1, "at_rest": True,
    }  # fmt: skip
    assert member.post(f"{base}/reports/42").json() == {"id": "42", "method": "POST"}
    assert member.get(f"{base}/files/a/b.txt").json() == {"rest": "a/b.txt"}


def test_thread_endpoint_errors(endpoints: Registry, thread: Thread, member: APIClient) -> None:
    base = f"/api/v1/threads/{thread.id}/endpoints"

    missing = member.get(f"{base}/nope")
    wrong_method = member.delete(f"{base}/summary")

    assert missing.status_code == 404
    assert missing.json()["error"]["code"] == "not_found"
    assert wrong_method.status_code == 405
    assert wrong_method["Allow"] == "GET"


def test_public_endpoints_answer_anonymous_callers_only(
    endpoints: Registry, thread: Thread
) -> None:
    anonymous = APIClient()
    base = f"/api/v1/threads/{thread.id}/endpoints"

    assert anonymous.get(f"{base}/status").json() == {"anonymous": True}
    assert anonymous.get(f"{base}/summary").status_code == 401


def test_thread_endpoints_of_another_tenant_are_404(
    endpoints: Registry, thread: Thread, other_tenant: Tenant,
    client_for: Callable[..., APIClient],
) -> None:  # fmt: skip
    response = client_for(other_tenant).get(f"/api/v1/threads/{thread.id}/endpoints/summary")

    assert response.status_code == 404


def test_delete_removes_stored_bytes_of_the_thread_and_its_children(
    tenant: Tenant, thread: Thread, member: APIClient, settings: Any,
    django_capture_on_commit_callbacks: Any,
) -> None:  # fmt: skip
    from pathlib import Path

    from threads.services.files import file_write

    child = make_thread(tenant, parent=thread)
    for owner in (thread, child):
        file_write(thread=owner, path="/a.txt", data=b"bytes", mime_type="text/plain")
    stored = Path(settings.MEDIA_ROOT) / str(tenant.id)
    assert sum(1 for p in stored.rglob("*") if p.is_file()) == 2

    with django_capture_on_commit_callbacks(execute=True):
        response = member.delete(f"/api/v1/threads/{thread.id}")

    assert response.json() == {"deleted_threads": 2}
    assert [p for p in stored.rglob("*") if p.is_file()] == []


def test_a_thread_counts_its_messages_logs_files_and_children_without_joining_them(
    tenant: Tenant, member: APIClient
) -> None:
    thread = make_thread(tenant)
    for text in ("one", "two", "three"):
        message_inject(thread=thread, role="user", content=text)
    for _ in range(2):
        log_create(thread=thread, kind="model", data={})
    file_write(thread=thread, path="/a.txt", data=b"x", mime_type="text/plain")
    make_thread(tenant, parent=thread)

    with CaptureQueriesContext(connection) as queries:
        counts = thread_counts(thread=thread)
    statements = [query["sql"] for query in queries.captured_queries]
    body = member.get(f"/api/v1/threads/{thread.pk}").json()

    assert counts == {"messages": 3, "logs": 2, "files": 1, "children": 1}
    assert body["counts"] == counts
    # Joining four tables multiplies their rows (400 messages x 400 logs took 160 ms).
    assert len(statements) == 1
    assert "JOIN" not in statements[0].upper()

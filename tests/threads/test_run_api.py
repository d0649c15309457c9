"""Running a thread over REST: send (202), continue, stop, terminate."""

from __future__ import annotations

import base64
from collections.abc import Callable
from typing import Any

import pytest
from rest_framework.test import APIClient

from tenancy.models import Role, Tenant
from tests.factories import make_thread
from threads.models import Event, Message, Thread, ThreadFile, Turn
from threads.services.messages import message_inject

pytestmark = pytest.mark.django_db


@pytest.fixture
def member(tenant: Tenant, client_for: Callable[..., APIClient]) -> APIClient:
    return client_for(tenant, Role.MEMBER)


def test_sending_a_message_answers_202_with_the_queued_item_before_any_model_work(
    thread: Thread, member: APIClient
) -> None:
    response = member.post(
        f"/api/v1/threads/{thread.id}/messages", {"content": "hello"}, format="json"
    )

    assert response.status_code == 202
    body = response.json()
    work = Turn.objects.get(thread=thread)
    assert (body["status"], body["queue_id"], body["kind"]) == ("queued", str(work.id), "message")
    assert body["message"]["id"] == body["message_id"] == work.payload["message_id"]
    assert (body["message"]["role"], body["message"]["content"]) == ("user", "hello")
    assert work.status == "queued"
    assert not Message.objects.filter(thread=thread).exists()  # persisted when drained
    thread.refresh_from_db()
    assert thread.status == "queued"


@pytest.mark.parametrize(
    ("payload", "field"),
    [
        ({}, "content"),
        ({"content": ""}, "content"),
        ({"content": "x", "role": "tool"}, "role"),
        ({"content": "x", "metadata": [1]}, "metadata"),
        ({"attachments": [{"name": "a.png", "mimeType": "image/png", "data": "%%"}]},
         "attachments[0].data"),
        ({"attachments": [{"mimeType": "image/png", "data": "AA=="}]}, "attachments[0].name"),
    ],
)  # fmt: skip
def test_bad_messages_are_400_naming_the_field(
    thread: Thread, member: APIClient, payload: dict[str, Any], field: str
) -> None:
    response = member.post(f"/api/v1/threads/{thread.id}/messages", payload, format="json")

    assert response.status_code == 400
    assert response.json()["error"]["field"] == field
    assert not Turn.objects.filter(thread=thread).exists()


def test_attachments_are_stored_under_attachments_and_named_by_reference(
    thread: Thread, member: APIClient
) -> None:
    data = base64.b64encode(b"report body").decode()
    response = member.post(
        f"/api/v1/threads/{thread.id}/messages",
        {"content": "see file", "attachments": [
            {"name": "report.txt", "mimeType": "text/plain", "data": data}]},
        format="json",
    )  # fmt: skip

    assert response.status_code == 202
    (ref,) = response.json()["message"]["attachments"]
    assert ref["path"].startswith("/attachments/report-")
    assert ref["path"].endswith(".txt")
    assert (ref["name"], ref["mimeType"], ref["size"]) == ("report.txt", "text/plain", 11)
    assert ThreadFile.objects.filter(thread=thread, path=ref["path"]).exists()


def test_continue_queues_a_turn_for_the_given_side(thread: Thread, member: APIClient) -> None:
    ok = member.post(f"/api/v1/threads/{thread.id}/continue", {"side": "b"}, format="json")
    bad = member.post(f"/api/v1/threads/{thread.id}/continue", {"side": "c"}, format="json")

    assert ok.status_code == 202
    assert Turn.objects.get(thread=thread).payload == {"side": "b"}
    assert (bad.status_code, bad.json()["error"]["field"]) == (400, "side")


def test_stop_on_an_idle_thread_is_a_no_op(thread: Thread, member: APIClient) -> None:
    events_before = Event.objects.filter(thread=thread).count()

    response = member.post(f"/api/v1/threads/{thread.id}/stop")

    assert response.json() == {
        "stopped": False, "stopped_turn_id": None, "parked_turns": 0, "message": None,
    }  # fmt: skip
    thread.refresh_from_db()
    assert (thread.status, thread.stop_requested) == ("completed", False)
    assert not Message.objects.filter(thread=thread).exists()
    assert Event.objects.filter(thread=thread).count() == events_before


def test_stop_parks_queued_turns_until_the_next_user_message(
    thread: Thread, member: APIClient
) -> None:
    queued = member.post(f"/api/v1/threads/{thread.id}/messages", {"content": "one"}, format="json")

    response = member.post(f"/api/v1/threads/{thread.id}/stop")

    assert response.json()["parked_turns"] == 1
    thread.refresh_from_db()
    assert (thread.status, thread.stop_requested) == ("queued", True)
    assert Turn.objects.get(pk=queued.json()["turn_id"]).status == "queued"
    member.post(f"/api/v1/threads/{thread.id}/messages", {"content": "again"}, format="json")
    thread.refresh_from_db()
    assert (thread.status, thread.stop_requested) == ("queued", False)


def test_stop_closes_the_unanswered_tool_calls_of_a_turn_whose_worker_died(
    thread: Thread, member: APIClient
) -> None:
    turn = member.post(f"/api/v1/threads/{thread.id}/messages", {"content": "go"}, format="json")
    Turn.objects.filter(pk=turn.json()["turn_id"]).update(status="running", fence=1)
    Thread.objects.filter(pk=thread.pk).update(status="running", fence=1)
    message_inject(
        thread=thread, role="assistant", content=None, side="a",
        tool_calls=[{"id": "c1", "type": "function",
                     "function": {"name": "echo", "arguments": "{}"}}],
    )  # fmt: skip
    message_inject(thread=thread, role="assistant", content=None, side="a", status="pending")

    member.post(f"/api/v1/threads/{thread.id}/stop")

    rows = Message.objects.filter(thread=thread).order_by("seq")
    assert [(m.role, m.content, m.tool_call_id, m.tool_status) for m in rows] == [
        ("assistant", None, "", ""),
        ("tool", "Execution stopped by user", "c1", "error"),
        ("system", "Execution stopped by user", "", ""),
    ]


def test_terminate_refuses_later_sends_with_409(thread: Thread, member: APIClient) -> None:
    base = f"/api/v1/threads/{thread.id}"
    member.post(f"{base}/messages", {"content": "queued before"}, format="json")

    first = member.post(f"{base}/terminate")
    again = member.post(f"{base}/terminate")
    send = member.post(f"{base}/messages", {"content": "late"}, format="json")
    resume = member.post(f"{base}/continue", {}, format="json")

    assert (first.json()["status"], first.json()["changed"], again.json()["changed"]) == (
        "terminated", True, False,
    )  # fmt: skip
    assert (send.status_code, send.json()["error"]["code"]) == (409, "terminated")
    assert (resume.status_code, resume.json()["error"]["code"]) == (409, "terminated")
    assert Turn.objects.get(thread=thread).status == "cancelled"  # dropped
    thread.refresh_from_db()
    assert (thread.status, thread.terminated_at is not None) == ("cancelled", True)


def test_read_only_keys_cannot_run_threads(
    tenant: Tenant, client_for: Callable[..., APIClient]
) -> None:
    thread = make_thread(tenant)
    reader = client_for(tenant, Role.READ_ONLY)

    for route in ("messages", "continue", "stop", "terminate"):
        assert (
            reader.post(f"/api/v1/threads/{thread.id}/{route}", {}, format="json").status_code
            == 403
        )

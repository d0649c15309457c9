"""Resuming into a pruned part of a thread's log gets a clear answer: the REST list a 410
``events_pruned`` naming ``pruned_through``; a stream and a socket an error frame, then the
events from the oldest kept one; a resume at or after it works as before."""

from __future__ import annotations

import json

import pytest
from channels.db import database_sync_to_async
from channels.routing import URLRouter
from channels.testing import WebsocketCommunicator
from rest_framework.test import APIClient

from config.routing import websocket_urlpatterns
from retention.models import RetentionPolicy
from retention.prune import retention_prune
from tenancy.authentication import TenantAuthMiddlewareStack
from tenancy.models import Role, Tenant
from tests.factories import make_api_key
from tests.retention.support import OLD, RECENT, emit, old_thread
from threads.models import Thread

MESSAGE = (
    "events up to sequence 5 were pruned by the retention policy; resume from 6 (after=5) or "
    "read the thread's current state"
)


def _pruned_thread(tenant: Tenant) -> Thread:
    """Events 1-5 pruned, 6-7 kept."""
    RetentionPolicy.objects.create(tenant=tenant, events_days=1)
    thread = old_thread(tenant)
    emit(thread, 5, at=OLD)
    emit(thread, 2, at=RECENT)
    retention_prune()
    return thread


def _sse_frames(body: bytes) -> list[dict[str, str]]:
    frames = []
    for block in body.decode().split("\n\n"):
        fields = dict(line.split(": ", 1) for line in block.splitlines() if ": " in line)
        if "data" in fields:
            frames.append(fields)
    return frames


@pytest.mark.django_db
@pytest.mark.parametrize("after", [0, 2, 4])
def test_the_list_answers_410_with_pruned_through_below_the_kept_log(
    after: int, member: APIClient, tenant: Tenant
) -> None:
    thread = _pruned_thread(tenant)

    response = member.get(f"/api/v1/threads/{thread.id}/events", {"after": after})

    assert response.status_code == 410
    assert response.json() == {"error": {
        "code": "events_pruned", "message": MESSAGE, "details": {"pruned_through": 5},
    }}  # fmt: skip


@pytest.mark.django_db
@pytest.mark.parametrize(("after", "expected"), [(5, [6, 7]), (6, [7]), (7, [])])
def test_a_resume_at_or_after_the_oldest_kept_event_works_as_before(
    after: int, expected: list[int], member: APIClient, tenant: Tenant
) -> None:
    thread = _pruned_thread(tenant)

    page = member.get(f"/api/v1/threads/{thread.id}/events", {"after": after}).json()

    assert [event["sequence"] for event in page["results"]] == expected
    assert page["next"] is None


@pytest.mark.django_db
def test_a_reader_without_after_starts_at_the_oldest_kept_event(
    member: APIClient, tenant: Tenant
) -> None:
    thread = _pruned_thread(tenant)

    page = member.get(f"/api/v1/threads/{thread.id}/events").json()

    assert [event["sequence"] for event in page["results"]] == [6, 7]
    assert page["previous"] is None


@pytest.mark.django_db
def test_a_log_pruned_whole_answers_410_up_to_its_last_sequence(
    member: APIClient, tenant: Tenant
) -> None:
    RetentionPolicy.objects.create(tenant=tenant, events_days=1)
    thread = old_thread(tenant)
    emit(thread, 3, at=OLD)
    retention_prune()
    url = f"/api/v1/threads/{thread.id}/events"

    behind = member.get(url, {"after": 1})
    caught_up = member.get(url, {"after": 3})

    assert behind.status_code == 410
    assert behind.json()["error"]["details"] == {"pruned_through": 3}
    assert (caught_up.status_code, caught_up.json()["results"]) == (200, [])


@pytest.mark.django_db
def test_a_stream_resuming_below_the_kept_log_gets_a_pruned_frame_then_the_kept_events(
    member: APIClient, tenant: Tenant
) -> None:
    thread = _pruned_thread(tenant)
    url = f"/api/v1/threads/{thread.id}/events"

    response = member.get(url, HTTP_ACCEPT="text/event-stream", HTTP_LAST_EVENT_ID="2")

    assert response.status_code == 200
    frames = _sse_frames(b"".join(response.streaming_content))  # type: ignore[attr-defined]
    assert frames[0]["event"] == "pruned"
    assert frames[0]["id"] == "5"
    assert json.loads(frames[0]["data"]) == {"error": {
        "code": "events_pruned", "message": MESSAGE, "details": {"pruned_through": 5},
    }}  # fmt: skip
    assert [frame["id"] for frame in frames[1:]] == ["6", "7"]


@pytest.mark.django_db
def test_a_stream_resuming_in_the_kept_log_gets_no_pruned_frame(
    member: APIClient, tenant: Tenant
) -> None:
    thread = _pruned_thread(tenant)
    url = f"/api/v1/threads/{thread.id}/events"

    response = member.get(url, HTTP_ACCEPT="text/event-stream", HTTP_LAST_EVENT_ID="5")

    frames = _sse_frames(b"".join(response.streaming_content))  # type: ignore[attr-defined]
    assert [(frame["event"], frame["id"]) for frame in frames] == [("custom", "6"),
                                                                   ("custom", "7")]  # fmt: skip


# The thread socket ----------------------------------------------------------------------------


async def _socket(thread: Thread, tenant: Tenant, query: str) -> WebsocketCommunicator:
    secret = (await database_sync_to_async(make_api_key)(tenant, role=Role.READ_ONLY)).secret
    socket = WebsocketCommunicator(
        TenantAuthMiddlewareStack(URLRouter(websocket_urlpatterns)),
        f"/ws/threads/{thread.id}/{query}",
        headers=[(b"authorization", f"Bearer {secret}".encode())],
    )
    connected, _ = await socket.connect()
    assert connected
    return socket


async def _frames(socket: WebsocketCommunicator, count: int) -> list[dict[str, object]]:
    return [json.loads(await socket.receive_from(timeout=5)) for _ in range(count)]


@pytest.mark.asyncio
@pytest.mark.django_db(transaction=True)
async def test_a_socket_resuming_below_the_kept_log_gets_an_error_frame_then_the_kept_events(
    tenant: Tenant,
) -> None:
    thread = await database_sync_to_async(_pruned_thread)(tenant)
    socket = await _socket(thread, tenant, "?after=2")

    error, *events = await _frames(socket, 3)

    assert error == {"type": "error", "error": {
        "code": "events_pruned", "message": MESSAGE, "details": {"pruned_through": 5},
    }}  # fmt: skip
    assert [event["sequence"] for event in events] == [6, 7]
    assert await socket.receive_nothing(timeout=0.2)
    await socket.disconnect()


@pytest.mark.asyncio
@pytest.mark.django_db(transaction=True)
@pytest.mark.parametrize("query", ["?after=5", ""])
async def test_a_socket_at_the_oldest_kept_event_or_without_after_replays_as_before(
    query: str, tenant: Tenant
) -> None:
    thread = await database_sync_to_async(_pruned_thread)(tenant)
    socket = await _socket(thread, tenant, query)

    events = await _frames(socket, 2)

    assert [(event["type"], event["sequence"]) for event in events] == [("custom", 6),
                                                                        ("custom", 7)]  # fmt: skip
    assert await socket.receive_nothing(timeout=0.2)
    await socket.disconnect()

"""``GET /api/v1/threads/{id}/events``: JSON paging and Server-Sent Events replay (WSGI)."""

from __future__ import annotations

import json

import pytest
from rest_framework.test import APIClient

from threads.models import Thread
from threads.services.control import thread_terminate
from threads.state import ThreadState

pytestmark = pytest.mark.django_db


def _emit(thread: Thread, count: int) -> None:
    for index in range(count):
        ThreadState(thread).emit("tick", index)


def _frames(body: bytes) -> list[dict[str, str]]:
    frames = []
    for block in body.decode().split("\n\n"):
        fields = dict(line.split(": ", 1) for line in block.splitlines() if ": " in line)
        if "data" in fields:
            frames.append(fields)
    return frames


def test_the_log_pages_by_sequence(member: APIClient, thread: Thread) -> None:
    _emit(thread, 5)

    first = member.get(f"/api/v1/threads/{thread.id}/events?limit=2").json()
    rest = member.get(f"/api/v1/threads/{thread.id}/events?after=2&limit=10").json()

    assert [e["sequence"] for e in first["events"]] == [1, 2]
    assert (first["next_after"], first["has_more"]) == (2, True)
    assert [e["sequence"] for e in rest["events"]] == [3, 4, 5]
    assert (rest["next_after"], rest["has_more"]) == (5, False)
    assert rest["events"][0]["payload"] == {"name": "tick", "data": 2}


def test_a_bad_after_is_a_400(member: APIClient, thread: Thread) -> None:
    response = member.get(f"/api/v1/threads/{thread.id}/events?after=-3")

    assert response.status_code == 400
    assert response.json()["error"]["field"] == "after"


def test_event_stream_replays_with_ids_and_honours_last_event_id(
    member: APIClient, thread: Thread
) -> None:
    _emit(thread, 4)
    url = f"/api/v1/threads/{thread.id}/events?after=1"

    response = member.get(url, HTTP_ACCEPT="text/event-stream", HTTP_LAST_EVENT_ID="2")

    assert response.status_code == 200
    assert response["Content-Type"] == "text/event-stream"
    frames = _frames(b"".join(response.streaming_content))  # type: ignore[attr-defined]
    assert [(f["id"], f["event"]) for f in frames] == [("3", "custom"), ("4", "custom")]
    assert json.loads(frames[0]["data"])["sequence"] == 3


def test_event_stream_of_a_terminated_thread_with_nothing_newer_is_204(
    member: APIClient, thread: Thread
) -> None:
    thread_terminate(thread=thread)
    url = f"/api/v1/threads/{thread.id}/events"

    replay = member.get(url, HTTP_ACCEPT="text/event-stream")
    caught_up = member.get(url, HTTP_ACCEPT="text/event-stream", HTTP_LAST_EVENT_ID="2")

    assert replay.status_code == 200
    assert [f["event"] for f in _frames(b"".join(replay.streaming_content))] == [  # type: ignore[attr-defined]
        "thread.status",
        "thread.terminated",
    ]
    assert caught_up.status_code == 204

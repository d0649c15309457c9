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


def test_the_log_pages_by_sequence_in_the_list_shape(member: APIClient, thread: Thread) -> None:
    _emit(thread, 5)
    url = f"http://testserver/api/v1/threads/{thread.id}/events"

    first = member.get(f"{url}?limit=2").json()
    second = member.get(first["next"]).json()
    last = member.get(second["next"]).json()
    back = member.get(last["previous"]).json()

    assert set(first) == {"results", "next", "previous"}
    assert [e["sequence"] for e in first["results"]] == [1, 2]
    assert (first["next"], first["previous"]) == (f"{url}?after=2&limit=2", None)
    assert [e["sequence"] for e in second["results"]] == [3, 4]
    assert (second["next"], second["previous"]) == (f"{url}?after=4&limit=2", f"{url}?limit=2")
    assert [e["sequence"] for e in last["results"]] == [5]
    assert (last["next"], last["previous"]) == (None, f"{url}?after=2&limit=2")
    assert [e["sequence"] for e in back["results"]] == [3, 4]
    assert last["results"][0]["payload"] == {"name": "tick", "data": 4}


def test_a_follower_resumes_after_the_last_sequence_it_received(
    member: APIClient, thread: Thread
) -> None:
    _emit(thread, 2)
    url = f"/api/v1/threads/{thread.id}/events"

    caught_up = member.get(url).json()
    nothing_yet = member.get(f"{url}?after=2").json()
    _emit(thread, 1)
    resumed = member.get(f"{url}?after={caught_up['results'][-1]['sequence']}").json()

    assert ([e["sequence"] for e in caught_up["results"]], caught_up["next"]) == ([1, 2], None)
    assert (nothing_yet["results"], nothing_yet["next"]) == ([], None)
    assert [e["sequence"] for e in resumed["results"]] == [3]


def test_the_default_page_is_50_events(member: APIClient, thread: Thread) -> None:
    _emit(thread, 51)

    page = member.get(f"/api/v1/threads/{thread.id}/events").json()

    assert [e["sequence"] for e in page["results"]] == list(range(1, 51))
    assert page["next"].endswith("after=50")


@pytest.mark.parametrize(
    ("query", "headers", "field"),
    [
        ("after=-3", {}, "after"),
        ("after=x", {}, "after"),
        ("after=9223372036854775808", {}, "after"),
        ("limit=0", {}, "limit"),
        ("limit=501", {}, "limit"),
        ("limit=ten", {}, "limit"),
        ("", {"Last-Event-ID": "last"}, "Last-Event-ID"),
    ],
)
def test_a_bad_after_limit_or_last_event_id_is_a_400_naming_it(
    member: APIClient, thread: Thread, query: str, headers: dict[str, str], field: str
) -> None:
    response = member.get(f"/api/v1/threads/{thread.id}/events?{query}", headers=headers)

    assert response.status_code == 400
    assert response.json()["error"]["field"] == field


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

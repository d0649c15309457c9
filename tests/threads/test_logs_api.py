"""threads/api/logs.py: ``/api/v1/threads/{id}/logs`` and ``logs/{log_id}``."""

from __future__ import annotations

import pytest
from rest_framework.test import APIClient

from threads.models import Log, Thread
from threads.services.logs import log_create

pytestmark = pytest.mark.django_db


def _logs(thread: Thread) -> str:
    return f"/api/v1/threads/{thread.id}/logs"


def _make(thread: Thread, kinds: list[str]) -> list[Log]:
    """One log per kind, each created a microsecond after the one before."""
    made = [log_create(thread=thread, kind=kind, data={"n": n}) for n, kind in enumerate(kinds)]
    for n, log in enumerate(made):
        Log.objects.filter(pk=log.pk).update(created_at=1_700_000_000_000_000 + n)
    return made


def test_the_list_pages_newest_first_in_the_list_shape(member: APIClient, thread: Thread) -> None:
    _make(thread, ["llm"] * 5)

    first = member.get(_logs(thread), {"limit": "2"}).json()
    second = member.get(first["next"]).json()
    last = member.get(second["next"]).json()
    back = member.get(last["previous"]).json()

    assert set(first) == {"results", "next", "previous"}
    assert ([log["data"]["n"] for log in first["results"]], first["previous"]) == ([4, 3], None)
    assert [log["data"]["n"] for log in second["results"]] == [2, 1]
    assert ([log["data"]["n"] for log in last["results"]], last["next"]) == ([0], None)
    assert back == second


def test_order_asc_and_kind_ride_along_the_pages(member: APIClient, thread: Thread) -> None:
    _make(thread, ["llm", "tool", "llm", "tool", "llm"])

    first = member.get(_logs(thread), {"order": "asc", "kind": "llm", "limit": "2"}).json()
    last = member.get(first["next"]).json()

    assert [log["data"]["n"] for log in first["results"]] == [0, 2]
    assert ([log["data"]["n"] for log in last["results"]], last["next"]) == ([4], None)
    assert {log["kind"] for log in first["results"] + last["results"]} == {"llm"}


def test_a_log_answers_its_record(member: APIClient, thread: Thread) -> None:
    parent, child = _make(thread, ["flow", "tool"])
    Log.objects.filter(pk=child.pk).update(parent=parent)

    listed = member.get(_logs(thread), {"kind": "tool"}).json()["results"]
    one = member.get(f"{_logs(thread)}/{child.id}").json()

    assert one == listed[0] == {
        "id": str(child.id), "kind": "tool", "message_id": None, "parent_id": str(parent.id),
        "data": {"n": 1}, "created_at": 1_700_000_000_000_001,
    }  # fmt: skip


@pytest.mark.parametrize(
    ("query", "field"),
    [
        ({"limit": "0"}, "limit"),
        ({"limit": "501"}, "limit"),
        ({"cursor": "bogus"}, "cursor"),
        ({"order": "sideways"}, "order"),
    ],
)
def test_a_bad_query_is_400_naming_it(
    member: APIClient, thread: Thread, query: dict[str, str], field: str
) -> None:
    response = member.get(_logs(thread), query)

    assert (response.status_code, response.json()["error"]["field"]) == (400, field)

"""threads/api/sessions.py: ``GET /api/v1/sessions/{session_id}``, a session's tree of
threads with each thread's last turns and event cursor (agent-runtime-events get_session)."""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

import pytest
from django.db import connection
from django.test.utils import CaptureQueriesContext
from rest_framework.test import APIClient

from tenancy.models import Role, Tenant
from tests.factories import make_thread
from threads.events import publish
from threads.models import Message, Thread, Turn
from threads.services import sessions

pytestmark = pytest.mark.django_db

BASE = 1_700_000_000_000_000


def _session(session_id: object) -> str:
    return f"/api/v1/sessions/{session_id}"


def _child(parent: Thread, *, at: int, name: str = "", agent: str = "helper") -> Thread:
    """A child as a spawn makes one: parent link, relationship, the session root, a label."""
    return make_thread(
        parent.tenant, agent_name=agent, parent=parent, root_id=parent.root_id or parent.pk,
        parent_relationship=agent, tags=[f"name:{name}"] if name else [], created_at=at,
        updated_at=at, last_activity_at=at,
    )  # fmt: skip


def _turn(thread: Thread, at: int) -> Turn:
    return Turn.objects.create(
        tenant_id=thread.tenant_id, thread=thread, position=at, kind="message",
        source="message", status="completed", created_at=at, started_at=at, ended_at=at,
        outcome="completed",
    )  # fmt: skip


def _turns(thread: Thread, count: int, *, first_at: int) -> list[Turn]:
    """``count`` finished turns of ``thread``, a microsecond apart, oldest first."""
    return [_turn(thread, first_at + n) for n in range(count)]


def _events(thread: Thread, count: int) -> None:
    for _ in range(count):
        publish(thread, "thread.updated", {"id": str(thread.pk), "fields": ["tags"]})


@pytest.fixture
def tree(tenant: Tenant) -> dict[str, Thread]:
    """A root with two children; the second child has a child of its own."""
    root = make_thread(tenant, agent_name="boss", created_at=BASE, updated_at=BASE,
                       last_activity_at=BASE)  # fmt: skip
    scout = _child(root, at=BASE + 10, name="scout")
    writer = _child(root, at=BASE + 20, agent="writer")
    editor = _child(writer, at=BASE + 30, name="editor", agent="editor")
    return {"root": root, "scout": scout, "writer": writer, "editor": editor}


def test_the_snapshot_lists_the_tree_root_first_then_by_creation(
    member: APIClient, tree: dict[str, Thread]
) -> None:
    root, scout, writer, editor = tree["root"], tree["scout"], tree["writer"], tree["editor"]
    Thread.objects.filter(pk=editor.pk).update(last_activity_at=BASE + 500)

    body = member.get(_session(root.pk)).json()

    assert {key: body[key] for key in ("session_id", "root_thread_id", "created_at")} == {
        "session_id": str(root.pk), "root_thread_id": str(root.pk), "created_at": BASE,
    }  # fmt: skip
    assert (body["updated_at"], body["thread_count"], body["truncated"]) == (BASE + 500, 4, False)
    assert [
        (t["id"], t["parent_id"], t["agent"], t["name"], t["depth"], t["relationship"])
        for t in body["threads"]
    ] == [
        (str(root.pk), None, "boss", None, 0, None),
        (str(scout.pk), str(root.pk), "helper", "scout", 1, "helper"),
        (str(writer.pk), str(root.pk), "writer", None, 1, "writer"),
        (str(editor.pk), str(writer.pk), "editor", "editor", 2, "editor"),
    ]
    assert [t["status"] for t in body["threads"]] == ["completed"] * 4
    assert [t["terminated_at"] for t in body["threads"]] == [None] * 4


def test_each_thread_shows_its_last_five_turns_newest_first_as_the_turns_api(
    member: APIClient, tree: dict[str, Thread]
) -> None:
    root, writer = tree["root"], tree["writer"]
    made = _turns(root, 7, first_at=BASE + 100)
    only = _turns(writer, 1, first_at=BASE + 200)[0]
    answer = Message.objects.create(
        tenant_id=root.tenant_id, thread=root, seq=1, role="assistant", content="done",
        turn_id=made[-1].pk,
    )  # fmt: skip
    _turns(root, 1, first_at=BASE + 300)[0].delete()  # a removed row leaves no trace
    Turn.objects.create(  # an input that joined the newest turn is listed with it, not alone
        tenant_id=root.tenant_id, thread=root, position=BASE + 400, kind="message",
        source="queue_message", status="completed", created_at=BASE + 400, host=made[-1],
    )  # fmt: skip

    body = member.get(_session(root.pk)).json()
    by_id = {t["id"]: t for t in body["threads"]}
    listed = member.get(f"/api/v1/threads/{root.pk}/turns").json()["results"]

    assert [turn["id"] for turn in by_id[str(root.pk)]["recent_turns"]] == [
        str(turn.pk) for turn in reversed(made[2:])
    ]
    assert by_id[str(root.pk)]["recent_turns"] == listed[:5]
    assert by_id[str(root.pk)]["recent_turns"][0]["message_ids"] == [str(answer.pk)]
    assert [turn["id"] for turn in by_id[str(writer.pk)]["recent_turns"]] == [str(only.pk)]
    assert by_id[str(tree["scout"].pk)]["recent_turns"] == []


def test_event_cursors_are_each_threads_last_sequence(
    member: APIClient, tree: dict[str, Thread]
) -> None:
    root, scout, writer, editor = tree["root"], tree["scout"], tree["writer"], tree["editor"]
    _events(root, 3)
    _events(editor, 2)

    body = member.get(_session(root.pk)).json()

    expected = {str(root.pk): 3, str(scout.pk): 0, str(writer.pk): 0, str(editor.pk): 2}
    assert body["events_cursor"] == expected
    assert {t["id"]: t["events_cursor"] for t in body["threads"]} == expected
    after = member.get(f"/api/v1/threads/{root.pk}/events", {"after": "2"}).json()
    assert [event["sequence"] for event in after["results"]] == [3]


def test_a_root_alone_is_a_session_of_one(member: APIClient, thread: Thread) -> None:
    body = member.get(_session(thread.pk)).json()

    assert [(t["id"], t["depth"], t["events_cursor"]) for t in body["threads"]] == [
        (str(thread.pk), 0, 0)
    ]
    assert body["events_cursor"] == {str(thread.pk): 0}


def test_a_child_id_is_404_naming_its_session(member: APIClient, tree: dict[str, Thread]) -> None:
    editor, root = tree["editor"], tree["root"]

    response = member.get(_session(editor.pk))

    assert response.status_code == 404
    assert response.json()["error"] == {
        "code": "not_found",
        "message": f"thread {editor.pk} is not a session root; its session is {root.pk}",
        "details": {"session_id": str(root.pk)},
    }


def test_another_tenants_session_or_an_unknown_id_is_404(
    client_for: Callable[..., APIClient], other_tenant: Tenant, tree: dict[str, Thread]
) -> None:
    outsider = client_for(other_tenant, Role.ADMIN)
    unknown = "00000000-0000-4000-8000-000000000000"

    theirs = outsider.get(_session(tree["root"].pk))
    nobody = outsider.get(_session(unknown))

    assert (theirs.status_code, theirs.json()["error"]["code"]) == (404, "not_found")
    assert theirs.json()["error"]["message"] == f"no session {tree['root'].pk}"
    assert (nobody.status_code, nobody.json()["error"]["message"]) == (
        404, f"no session {unknown}",
    )  # fmt: skip


def test_any_role_reads_a_session(
    client_for: Callable[..., APIClient], tenant: Tenant, thread: Thread
) -> None:
    reader = client_for(tenant, Role.READ_ONLY)

    assert reader.get(_session(thread.pk)).status_code == 200


def test_an_unknown_query_parameter_is_400_naming_it(member: APIClient, thread: Thread) -> None:
    response = member.get(_session(thread.pk), {"window": "10"})

    assert (response.status_code, response.json()["error"]["field"]) == (400, "window")


def test_a_session_past_the_bound_is_truncated_root_first(
    member: APIClient, tree: dict[str, Thread], monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setattr(sessions, "MAX_SESSION_THREADS", 2)
    root = tree["root"]

    body = member.get(_session(root.pk)).json()

    assert [t["id"] for t in body["threads"]] == [str(root.pk), str(tree["scout"].pk)]
    assert (body["thread_count"], body["truncated"]) == (4, True)
    assert set(body["events_cursor"]) == {str(root.pk), str(tree["scout"].pk)}


def _statements(client: APIClient, session_id: object) -> tuple[int, dict[str, Any]]:
    with CaptureQueriesContext(connection) as queries:
        response = client.get(_session(session_id))
    assert response.status_code == 200
    return len(queries.captured_queries), response.json()


def test_the_statement_count_does_not_grow_with_the_threads(
    member: APIClient, tenant: Tenant
) -> None:
    small = make_thread(tenant)
    _child(small, at=BASE + 1)
    large = make_thread(tenant)
    parent = large
    for n in range(9):
        parent = _child(parent if n % 3 else large, at=BASE + 10 + n)
    for thread in Thread.objects.filter(tenant=tenant):
        _turns(thread, 2, first_at=BASE + 100)
        _events(thread, 1)
    member.get(_session(small.pk))  # the key's first use writes its last_used_at

    few, small_body = _statements(member, small.pk)
    many, large_body = _statements(member, large.pk)

    assert (len(small_body["threads"]), len(large_body["threads"])) == (2, 10)
    assert few == many

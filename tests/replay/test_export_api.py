"""replay/api.py: ``GET /api/v1/threads/{id}/export`` and ``GET /api/v1/sessions/{id}/export``,
a thread's or session's portable export as streamed JSON lines."""

from __future__ import annotations

import hashlib
import json
from typing import Any

import pytest
from asgiref.sync import async_to_sync
from django.test import AsyncClient
from rest_framework.test import APIClient

from replay import export
from tenancy.models import Tenant
from tests.factories import make_api_key, make_thread
from tests.threads.runtime.conftest import Engine, prompt
from threads.models import Event, Log, Message, Thread
from threads.services.files import file_write

pytestmark = pytest.mark.django_db

HELPER = [{"name": "helper", "side_a": {"prompt": "helper"}}]


def _records(response: Any) -> list[dict[str, Any]]:
    assert response.streaming
    body = b"".join(response.streaming_content).decode()
    assert body.endswith("\n")
    return [json.loads(line) for line in body.splitlines()]


def _ran(engine: Engine) -> Thread:
    """A thread that ran one turn with one tool call, and holds one file."""
    engine.define(prompts=[prompt("helper", tools=["echo"])], agents=HELPER)
    thread = engine.thread("helper")
    engine.script.tool_calls([{"name": "echo", "arguments": {"text": "hi"}}]).text("Done.")
    engine.send(thread, "say hi")
    engine.drive(thread)
    file_write(thread=thread, path="/notes/plan.txt", data=b"the plan\n", mime_type="text/plain")
    return thread


def test_a_thread_export_streams_header_thread_definitions_events_rows_files_and_end(
    engine: Engine, member: APIClient
) -> None:
    thread = _ran(engine)

    response = member.get(f"/api/v1/threads/{thread.pk}/export")

    assert response.status_code == 200
    assert response["Content-Type"] == "application/x-ndjson"
    assert response.streaming
    records = _records(response)
    kinds = [record["kind"] for record in records]
    first_event, first_message = kinds.index("event"), kinds.index("message")
    assert kinds[:2] == ["header", "thread"]
    assert set(kinds[2:first_event]) == {"definition"}
    assert set(kinds[first_event:first_message]) == {"event"}
    assert kinds[-2:] == ["file", "end"]
    header = records[0]
    assert {k: header[k] for k in ("format", "thread_id", "tenant_id", "schema_version")} == {
        "format": "standard-agents-replay/1", "thread_id": str(thread.pk),
        "tenant_id": str(thread.tenant_id), "schema_version": 1,
    }  # fmt: skip
    assert isinstance(header["exported_at"], int)
    row = records[1]
    assert (row["id"], row["agent"], row["status"], row["events_pruned_through"]) == (
        str(thread.pk), "helper", "waiting_input", 0,
    )  # fmt: skip
    assert {(r["type"], r["name"], r["missing"]) for r in records if r["kind"] == "definition"} == {
        ("agent", "helper", False), ("prompt", "helper", False), ("model", "m", False),
        ("tool", "echo", False),
    }  # fmt: skip
    events = [r for r in records if r["kind"] == "event"]
    stored = Event.objects.filter(thread=thread).order_by("sequence")
    assert [e["sequence"] for e in events] == list(range(1, stored.count() + 1))
    assert [e["event_id"] for e in events] == [str(e.pk) for e in stored]
    listed = member.get(f"/api/v1/threads/{thread.pk}/events?limit=500").json()["results"]
    assert [{k: v for k, v in e.items() if k != "kind"} for e in events] == listed
    messages = [r for r in records if r["kind"] == "message"]
    stored_messages = Message.objects.filter(thread=thread).order_by("seq")
    assert [m["id"] for m in messages] == [
        str(pk) for pk in stored_messages.values_list("pk", flat=True)
    ]
    assert {m["thread_id"] for m in messages} == {str(thread.pk)}
    answered = member.get(
        f"/api/v1/threads/{thread.pk}/messages?include_silent=true&depth=100&limit=100"
    ).json()["results"]
    assert [
        {k: v for k, v in m.items() if k not in ("kind", "thread_id")} for m in messages
    ] == answered  # the message as the messages API shows it
    (calls,) = [m["tool_calls"] for m in messages if m["tool_calls"]]
    assert [(c["name"], c["arguments"]) for c in calls] == [("echo", {"text": "hi"})]
    assert (
        len([r for r in records if r["kind"] == "log"]) == Log.objects.filter(thread=thread).count()
    )
    [manifest] = [r for r in records if r["kind"] == "file"]
    assert manifest == {
        "kind": "file", "thread_id": str(thread.pk), "path": "/notes/plan.txt", "size": 9,
        "sha256": hashlib.sha256(b"the plan\n").hexdigest(), "mime_type": "text/plain",
    }  # fmt: skip
    counts = {
        kind: kinds.count(kind)
        for kind in ("thread", "definition", "event", "message", "log", "file")
    }
    assert records[-1] == {"kind": "end", "counts": counts}


def test_the_export_reads_each_table_in_pages_never_whole(
    engine: Engine, member: APIClient, monkeypatch: pytest.MonkeyPatch
) -> None:
    thread = _ran(engine)
    monkeypatch.setattr(export, "PAGE", 2)
    monkeypatch.setattr(export, "LINES_PER_CHUNK", 3)

    response: Any = member.get(f"/api/v1/threads/{thread.pk}/export")

    assert response.streaming
    chunks: list[bytes] = list(response.streaming_content)
    assert len(chunks) > 3
    assert all(chunk.count(b"\n") <= 3 for chunk in chunks)
    records = [json.loads(line) for line in b"".join(chunks).splitlines()]
    messages = [r["seq"] for r in records if r["kind"] == "message"]
    assert (
        messages
        == sorted(messages)
        == list(range(1, Message.objects.filter(thread=thread).count() + 1))
    )
    assert (
        len([r for r in records if r["kind"] == "log"]) == Log.objects.filter(thread=thread).count()
    )


def test_a_session_export_holds_every_thread_of_the_tree_root_first(
    tenant: Tenant, member: APIClient
) -> None:
    root = make_thread(tenant, agent_name="boss", created_at=100)
    child = make_thread(tenant, parent=root, root_id=root.pk, created_at=300)
    grandchild = make_thread(tenant, parent=child, root_id=root.pk, created_at=200)
    make_thread(tenant)  # another session

    records = _records(member.get(f"/api/v1/sessions/{root.pk}/export"))

    assert records[0]["session_id"] == str(root.pk)
    assert "thread_id" not in records[0]
    assert [r["id"] for r in records if r["kind"] == "thread"] == [
        str(root.pk), str(grandchild.pk), str(child.pk),
    ]  # fmt: skip
    assert {(r["type"], r["name"], r["missing"]) for r in records if r["kind"] == "definition"} == {
        ("agent", "boss", True), ("agent", "helper", True),
    }  # fmt: skip
    assert records[-1]["counts"]["thread"] == 3


def test_a_child_threads_id_is_not_a_session_and_names_its_session(
    tenant: Tenant, member: APIClient
) -> None:
    root = make_thread(tenant)
    child = make_thread(tenant, parent=root, root_id=root.pk)

    response = member.get(f"/api/v1/sessions/{child.pk}/export")

    assert response.status_code == 404
    assert response.json()["error"]["details"] == {"session_id": str(root.pk)}


@pytest.mark.parametrize("route", ["threads", "sessions"])
def test_another_tenants_thread_or_session_is_a_json_404(
    route: str, other_thread: Thread, member: APIClient
) -> None:
    response = member.get(
        f"/api/v1/{route}/{other_thread.pk}/export", HTTP_ACCEPT="application/x-ndjson"
    )

    assert response.status_code == 404
    assert response["Content-Type"].startswith("application/json")
    assert response.json()["error"]["code"] == "not_found"


def test_a_query_parameter_is_a_400_naming_it(thread: Thread, member: APIClient) -> None:
    response = member.get(f"/api/v1/threads/{thread.pk}/export?after=3")

    assert response.status_code == 400
    assert response.json()["error"]["field"] == "after"


def test_the_export_needs_credentials(thread: Thread, api_client: APIClient) -> None:
    assert api_client.get(f"/api/v1/threads/{thread.pk}/export").status_code == 401


async def _gathered(response: Any) -> list[bytes]:
    return [chunk async for chunk in response.streaming_content]


@pytest.mark.django_db(transaction=True)
def test_under_asgi_the_export_is_an_async_stream_read_chunk_by_chunk(
    engine: Engine, monkeypatch: pytest.MonkeyPatch
) -> None:
    thread = _ran(engine)
    monkeypatch.setattr(export, "LINES_PER_CHUNK", 5)
    key = make_api_key(thread.tenant).secret
    url = f"/api/v1/threads/{thread.pk}/export"

    response = async_to_sync(AsyncClient().get)(url, headers={"Authorization": f"Bearer {key}"})

    assert response.status_code == 200
    streamed: Any = response
    assert streamed.is_async
    chunks = async_to_sync(_gathered)(response)
    assert len(chunks) > 2
    records = [json.loads(line) for line in b"".join(chunks).splitlines()]
    assert (records[0]["kind"], records[-1]["kind"]) == ("header", "end")
    assert records[-1]["counts"]["event"] == Event.objects.filter(thread=thread).count()

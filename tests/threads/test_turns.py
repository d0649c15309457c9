"""Turns in process (real PostgreSQL and Redis, the scripted model, no worker): the turn
resource, the queue's order and changes, idempotency, usage, and what events carry.
End-to-end behaviour through a worker and the ASGI server is in test_turns_e2e.py."""

from __future__ import annotations

import itertools
import json
from collections.abc import Callable
from concurrent.futures import ThreadPoolExecutor
from typing import Any

import pytest
import redis
from django.db import connection
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st
from rest_framework.test import APIClient

from agents.providers.base import Usage
from agents.registry import tool
from tenancy.models import Role, Tenant
from tests.factories import make_api_key
from tests.threads.runtime.conftest import Engine, prompt, rows
from threads.events import INLINE_LIMIT
from threads.models import Event, IdempotencyKey, Log, Message, RunStatus, Thread, Turn
from threads.runtime.driver import thread_drive
from threads.runtime.engine import Runtime
from threads.runtime.stops import StopReason
from threads.services import turns as turns_module
from threads.services.inbox import message_queue
from threads.services.lock import lock_acquire

Json = dict[str, Any]


def helper(engine: Engine, **side: Any) -> Thread:
    engine.define(
        prompts=[prompt("helper", tools=["echo"])],
        agents=[{"name": "helper", "side_a": {"prompt": "helper", **side}}],
    )
    return engine.thread("helper")


@pytest.fixture
def api(engine: Engine, client_for: Callable[..., APIClient]) -> APIClient:
    return client_for(engine.tenant, Role.MEMBER)


def submit(api: APIClient, thread: Thread, content: str, **extra: Any) -> Json:
    body = {"input": {"content": content}, **extra}
    response = api.post(f"/api/v1/threads/{thread.id}/turns", body, format="json")
    assert response.status_code == 202, response.json()
    answer: Json = response.json()
    return answer


# The resource -------------------------------------------------------------------------------


def test_a_submitted_turn_is_queued_then_completed_with_the_messages_it_wrote(
    engine: Engine, api: APIClient
) -> None:
    thread = helper(engine)
    engine.script.tool_calls([{"name": "echo", "arguments": {"text": "hi"}}]).text("Done.")

    queued = submit(api, thread, "say hi", metadata={"origin": "test"})
    engine.drive(thread)
    turn = api.get(f"/api/v1/turns/{queued['id']}").json()

    assert (queued["status"], queued["source"], queued["strategy"]) == (
        "queued", "submit", "enqueue",
    )  # fmt: skip
    assert queued["message"]["content"] == "say hi"
    assert (turn["status"], turn["outcome"], turn["metadata"]) == (
        "completed", "stop_on_response", {"origin": "test"},
    )  # fmt: skip
    written = Message.objects.filter(thread=thread).order_by("seq")
    assert turn["message_ids"] == [str(row.id) for row in written]
    assert [row.role for row in written] == ["user", "assistant", "tool", "assistant"]
    assert turn["started_at"] <= turn["ended_at"]
    assert turn["usage"]["model_calls"] == 2
    assert turn["usage"]["total_tokens"] == sum(
        log.data["total_tokens"] for log in Log.objects.filter(thread=thread, kind="llm")
    )


def test_the_wait_route_answers_a_finished_turn_with_its_messages(
    engine: Engine, api: APIClient
) -> None:
    thread = helper(engine)
    engine.script.text("Hello.")
    queued = submit(api, thread, "hi")
    engine.drive(thread)

    response = api.get(f"/api/v1/turns/{queued['id']}/wait?timeout=1")
    body = json.loads(response.content)  # a finished turn is answered at once, not streamed

    assert not response.streaming
    assert body["done"] is True
    assert body["turn"]["status"] == "completed"
    assert [(m["role"], m["content"]) for m in body["messages"]] == [
        ("user", "hi"), ("assistant", "Hello."),
    ]  # fmt: skip


def test_waiting_for_a_turn_that_does_not_end_answers_when_the_timeout_passes(
    engine: Engine, api: APIClient
) -> None:
    thread = helper(engine)
    queued = submit(api, thread, "hi")

    response = api.get(f"/api/v1/turns/{queued['id']}/wait?timeout=0.1")
    body = json.loads(b"".join(response.streaming_content))  # type: ignore[attr-defined]

    assert (body["done"], body["turn"]["status"], body["messages"]) == (False, "queued", [])


def test_a_bad_wait_timeout_is_a_400_naming_it(engine: Engine, api: APIClient) -> None:
    thread = helper(engine)
    queued = submit(api, thread, "hi")

    response = api.get(f"/api/v1/turns/{queued['id']}/wait?timeout=9999")

    assert (response.status_code, response.json()["error"]["field"]) == (400, "timeout")


def test_submit_and_wait_answers_the_turn_with_the_messages_it_wrote(
    engine: Engine, api: APIClient
) -> None:
    """In process (no worker) the turn does not end: the wait answers when its timeout
    passes, with the turn it queued; the ASGI path is in test_turns_e2e.py."""
    thread = helper(engine)

    response = api.post(
        f"/api/v1/threads/{thread.id}/turns/wait?timeout=0.1",
        {"input": {"content": "hi"}, "metadata": {"origin": "test"}}, format="json",
    )  # fmt: skip
    body = json.loads(b"".join(response.streaming_content))  # type: ignore[attr-defined]

    (turn,) = Turn.objects.filter(thread=thread)
    assert response.status_code == 200
    assert (body["done"], body["turn"]["id"], body["turn"]["status"]) == (
        False, str(turn.pk), "queued",
    )  # fmt: skip
    assert (body["turn"]["metadata"], body["messages"]) == ({"origin": "test"}, [])


@pytest.mark.parametrize(
    ("query", "body", "field"),
    [
        ("?timeout=9999", {"input": {"content": "hi"}}, "timeout"),
        ("?timeout=soon", {"input": {"content": "hi"}}, "timeout"),
        ("", {"input": {"content": "hi"}, "multitask_strategy": "later"}, "multitask_strategy"),
        ("", {}, "input"),
        ("", {"content": "hi"}, "content"),  # unknown keys first: content goes in input
    ],
)
def test_submit_and_wait_with_bad_input_is_a_400_naming_the_field_and_queues_nothing(
    engine: Engine, api: APIClient, query: str, body: Json, field: str
) -> None:
    thread = helper(engine)

    response = api.post(f"/api/v1/threads/{thread.id}/turns/wait{query}", body, format="json")

    assert (response.status_code, response.json()["error"]["field"]) == (400, field)
    assert not Turn.objects.filter(thread=thread).exists()


def test_submit_and_wait_with_reject_on_a_busy_thread_is_a_409_naming_the_turn(
    engine: Engine, api: APIClient
) -> None:
    thread = helper(engine)
    first = submit(api, thread, "first")

    refused = api.post(
        f"/api/v1/threads/{thread.id}/turns/wait",
        {"input": {"content": "second"}, "multitask_strategy": "reject"}, format="json",
    )  # fmt: skip

    assert (refused.status_code, refused.json()["error"]["code"]) == (409, "thread_busy")
    assert first["id"] in refused.json()["error"]["message"]
    assert Turn.objects.filter(thread=thread).count() == 1


def test_turns_are_listed_newest_first_and_filter_by_status(engine: Engine, api: APIClient) -> None:
    thread = helper(engine)
    engine.script.text("one")
    first = submit(api, thread, "a")
    engine.drive(thread)
    second = submit(api, thread, "b")

    listed = api.get(f"/api/v1/threads/{thread.id}/turns").json()
    queued = api.get(f"/api/v1/threads/{thread.id}/turns?status=queued").json()
    bad = api.get(f"/api/v1/threads/{thread.id}/turns?status=idle")

    assert [t["id"] for t in listed["results"]] == [second["id"], first["id"]]
    assert [t["id"] for t in queued["results"]] == [second["id"]]
    assert (bad.status_code, bad.json()["error"]["field"]) == (400, "status")


def test_turns_page_newest_first_with_the_messages_each_wrote(
    engine: Engine, api: APIClient
) -> None:
    thread = helper(engine)
    engine.script.text("one")
    first = submit(api, thread, "a")
    engine.drive(thread)
    second, third = submit(api, thread, "b"), submit(api, thread, "c")
    url = f"/api/v1/threads/{thread.id}/turns"

    page = api.get(url, {"limit": 2}).json()
    rest = api.get(page["next"]).json()
    back = api.get(rest["previous"]).json()

    assert [t["id"] for t in page["results"]] == [third["id"], second["id"]]
    assert ([t["id"] for t in rest["results"]], rest["next"]) == ([first["id"]], None)
    assert back == page
    assert len(rest["results"][0]["message_ids"]) == 2  # the question and the answer
    assert [t["message_ids"] for t in page["results"]] == [[], []]


def test_a_turn_id_that_is_not_a_uuid_or_not_the_tenants_is_a_404(
    engine: Engine, api: APIClient, other_tenant: Tenant, client_for: Callable[..., APIClient]
) -> None:
    thread = helper(engine)
    queued = submit(api, thread, "hi")

    intruder = client_for(other_tenant, Role.ADMIN)

    assert api.get("/api/v1/turns/not-a-uuid").status_code == 404
    assert intruder.get(f"/api/v1/turns/{queued['id']}").status_code == 404


# Order and queue changes ---------------------------------------------------------------------


def test_queued_turns_run_one_at_a_time_in_order_each_with_its_own_answer(
    engine: Engine, api: APIClient
) -> None:
    thread = helper(engine)
    engine.script.text("A1").text("A2").text("A3")
    ids = [submit(api, thread, text)["id"] for text in ("one", "two", "three")]

    result = engine.drive(thread)

    assert result.reasons == [StopReason.STOP_ON_RESPONSE] * 3
    assert rows(thread) == [
        ("user", "b", "one", ""), ("assistant", "a", "A1", ""),
        ("user", "b", "two", ""), ("assistant", "a", "A2", ""),
        ("user", "b", "three", ""), ("assistant", "a", "A3", ""),
    ]  # fmt: skip
    turns = [Turn.objects.get(pk=turn_id) for turn_id in ids]
    assert [turn.status for turn in turns] == ["completed"] * 3
    for earlier, later in itertools.pairwise(turns):
        assert earlier.ended_at is not None
        assert later.started_at is not None
        assert earlier.ended_at <= later.started_at


def test_a_promoted_turn_runs_first_and_a_removed_one_never_runs(
    engine: Engine, api: APIClient
) -> None:
    thread = helper(engine)
    engine.script.text("for D").text("for B")
    _, c, d = (submit(api, thread, text)["id"] for text in ("B", "C", "D"))

    removed = api.delete(f"/api/v1/turns/{c}")
    promoted = api.post(f"/api/v1/turns/{d}/promote")
    engine.drive(thread)

    assert (removed.json()["status"], removed.json()["outcome"]) == ("cancelled", "removed")
    assert promoted.status_code == 200
    assert [content for _, _, content, _ in rows(thread)] == ["D", "for D", "B", "for B"]
    changes = [
        event.payload["change"]
        for event in Event.objects.filter(thread=thread, type="queue.changed").order_by("sequence")
    ]
    assert changes == ["added", "added", "added", "removed", "promoted", "taken", "taken"]
    again = api.delete(f"/api/v1/turns/{c}")
    assert (again.status_code, again.json()["error"]["code"]) == (409, "conflict")


def test_reject_refuses_a_turn_while_another_waits_naming_it(
    engine: Engine, api: APIClient
) -> None:
    thread = helper(engine)
    first = submit(api, thread, "first")

    refused = api.post(
        f"/api/v1/threads/{thread.id}/turns",
        {"input": {"content": "second"}, "multitask_strategy": "reject"},
        format="json",
    )

    assert refused.status_code == 409
    error = refused.json()["error"]
    assert (error["code"], error["field"]) == ("thread_busy", "multitask_strategy")
    assert first["id"] in error["message"]
    assert Turn.objects.filter(thread=thread).count() == 1


def test_cancelling_a_queued_turn_ends_it_at_once_and_again_is_a_no_op(
    engine: Engine, api: APIClient
) -> None:
    thread = helper(engine)
    queued = submit(api, thread, "never")

    cancelled = api.post(f"/api/v1/turns/{queued['id']}/cancel").json()
    again = api.post(f"/api/v1/turns/{queued['id']}/cancel").json()
    engine.drive(thread)

    assert (cancelled["status"], cancelled["outcome"]) == ("cancelled", "cancelled")
    assert again == cancelled
    assert rows(thread) == []
    thread.refresh_from_db()
    assert thread.status == "completed"  # its queue emptied: back to how it rested


def test_a_message_posted_to_the_spec_route_returns_the_turn_it_created(
    engine: Engine, api: APIClient
) -> None:
    thread = helper(engine)

    body = api.post(
        f"/api/v1/threads/{thread.id}/messages", {"content": "hi"}, format="json"
    ).json()

    turn = Turn.objects.get(pk=body["turn_id"])
    assert body["queue_id"] == body["turn"]["id"] == str(turn.pk)
    assert (turn.source, turn.payload["message_id"]) == ("message", body["message_id"])


# Idempotency --------------------------------------------------------------------------------


def test_the_same_idempotency_key_and_body_return_the_first_answer(
    engine: Engine, api: APIClient
) -> None:
    thread = helper(engine)
    body = {"input": {"content": "once"}}
    url = f"/api/v1/threads/{thread.id}/turns"

    first = api.post(url, body, format="json", HTTP_IDEMPOTENCY_KEY="k-1")
    second = api.post(url, body, format="json", HTTP_IDEMPOTENCY_KEY="k-1")
    other = api.post(
        url, {"input": {"content": "twice"}}, format="json", HTTP_IDEMPOTENCY_KEY="k-1"
    )

    assert (first.status_code, second.status_code) == (202, 202)
    assert second.json() == first.json()
    assert second["Idempotent-Replayed"] == "true"
    assert (other.status_code, other.json()["error"]["code"]) == (409, "idempotency_key_reused")
    assert other.json()["error"]["field"] == "Idempotency-Key"
    assert Turn.objects.filter(thread=thread).count() == 1


def test_a_request_refused_after_claiming_a_key_leaves_no_key_behind(
    engine: Engine, api: APIClient
) -> None:
    thread = helper(engine)
    url = f"/api/v1/threads/{thread.id}/turns"
    submit(api, thread, "busy")

    refused = api.post(
        url, {"input": {"content": "x"}, "multitask_strategy": "reject"}, format="json",
        HTTP_IDEMPOTENCY_KEY="k-2",
    )  # fmt: skip

    assert refused.status_code == 409
    assert not IdempotencyKey.objects.filter(key="k-2").exists()


@pytest.mark.django_db(transaction=True)
def test_twenty_racing_requests_with_one_key_create_one_turn(
    engine: Engine, wakes: list[str]
) -> None:
    thread = helper(engine)
    secret = make_api_key(engine.tenant, role=Role.MEMBER).secret
    url = f"/api/v1/threads/{thread.id}/turns"

    def post(_: int) -> tuple[int, Json]:
        client = APIClient()
        client.credentials(HTTP_AUTHORIZATION=f"Bearer {secret}")
        try:
            response = client.post(
                url, {"input": {"content": "race"}}, format="json", HTTP_IDEMPOTENCY_KEY="race"
            )
            return response.status_code, response.json()
        finally:
            connection.close()

    with ThreadPoolExecutor(max_workers=20) as pool:
        answers = list(pool.map(post, range(20)))

    assert {status for status, _ in answers} == {202}
    assert len({body["id"] for _, body in answers}) == 1
    assert Turn.objects.filter(thread=thread).count() == 1


def test_an_unprintable_idempotency_key_is_a_400_naming_the_header(
    engine: Engine, api: APIClient
) -> None:
    thread = helper(engine)

    response = api.post(
        f"/api/v1/threads/{thread.id}/turns", {"input": {"content": "x"}}, format="json",
        HTTP_IDEMPOTENCY_KEY="a\tb",
    )  # fmt: skip

    assert (response.status_code, response.json()["error"]["field"]) == (400, "Idempotency-Key")


# What events carry -----------------------------------------------------------------------------


def test_every_event_of_a_turn_carries_its_turn_id_and_step_events_their_step_id(
    engine: Engine, api: APIClient
) -> None:
    thread = helper(engine)
    engine.script.tool_calls([{"name": "echo", "arguments": {"text": "hi"}}]).text("Done.")
    turn_id = submit(api, thread, "say hi")["id"]
    engine.drive(thread)

    events = list(Event.objects.filter(thread=thread).order_by("sequence"))
    started = next(i for i, e in enumerate(events) if e.type == "turn.started")
    inside = events[started:]
    assert inside[-1].type == "turn.completed"
    assert {event.turn_id for event in inside} == {turn_id}
    in_steps = [e for e in inside if e.type.split(".")[0] in ("model", "tool", "step")]
    assert in_steps
    assert all(e.step_id.startswith(f"{turn_id}:") for e in in_steps)
    step_messages = [e for e in inside if e.type.startswith("message.") and e.step_id]
    assert {e.payload["role"] for e in step_messages} == {"assistant", "tool"}
    tool_started = next(e for e in inside if e.type == "tool.started")
    assert tool_started.payload["arguments"] == {"text": "hi"}


def test_large_tool_arguments_ride_tool_started_as_a_ref_to_the_log_that_holds_them(
    engine: Engine, api: APIClient
) -> None:
    thread = helper(engine)
    text = "x" * (INLINE_LIMIT + 1)
    engine.script.tool_calls([{"name": "echo", "arguments": {"text": text}}]).text("Done.")
    submit(api, thread, "say a lot")
    engine.drive(thread)

    started = Event.objects.get(thread=thread, type="tool.started").payload
    assert "arguments" not in started
    log = api.get(started["arguments_ref"])
    assert log.status_code == 200, log.json()
    body = log.json()
    assert (body["kind"], body["data"]["tool_call_id"]) == ("tool", started["tool_call_id"])
    assert body["data"]["arguments"] == {"text": text}


def test_unknown_token_counts_are_null_in_the_log_event_and_turn(
    engine: Engine, api: APIClient
) -> None:
    thread = helper(engine)
    engine.script.text("no usage reported", usage=Usage(0, 0, 0))
    turn_id = submit(api, thread, "hi")["id"]

    engine.drive(thread)

    log = Log.objects.get(thread=thread, kind="llm")
    event = Event.objects.get(thread=thread, type="model.completed")
    turn = Turn.objects.get(pk=turn_id)
    assert (log.data["input_tokens"], log.data["total_tokens"]) == (None, None)
    assert event.payload["total_tokens"] is None
    assert turn.usage is not None
    assert (turn.usage["total_tokens"], turn.usage["model_calls"]) == (None, 1)


def test_a_retried_model_call_shows_retrying_then_running(engine: Engine, api: APIClient) -> None:
    thread = helper(engine)
    engine.script.error("overloaded", status=503).text("Recovered.")
    submit(api, thread, "hi")

    engine.drive(thread)

    statuses = [
        e.payload["status"]
        for e in Event.objects.filter(thread=thread, type="thread.status").order_by("sequence")
    ]
    assert statuses == ["queued", "running", "retrying", "running", "waiting_input"]


def test_a_model_without_an_api_key_blocks_the_turn(engine: Engine, api: APIClient) -> None:
    engine.define(
        models=[{"name": "m", "provider": "openai", "model_id": "gpt-x",
                 "base_url": "http://127.0.0.1:9/v1", "api_key_env": "NO_SUCH_KEY"}],
        prompts=[prompt("helper")],
        agents=[{"name": "helper", "side_a": {"prompt": "helper"}}],
    )  # fmt: skip
    thread = engine.thread("helper")
    turn_id = submit(api, thread, "hi")["id"]

    thread_drive_default(thread)

    turn = Turn.objects.get(pk=turn_id)
    thread.refresh_from_db()
    assert (turn.status, turn.outcome) == ("blocked", "step_error")
    assert "has no API key" in turn.error
    assert thread.status == "blocked"
    assert Event.objects.filter(thread=thread, type="turn.failed").exists()


def thread_drive_default(thread: Thread) -> None:
    """Drive with the stored model definitions (no script)."""
    thread_drive(thread_id=thread.pk, runtime=Runtime(retry_base_delay_s=0))


# The read model --------------------------------------------------------------------------------


def _read(api: APIClient, thread: Thread) -> Json:
    body: Json = api.get(f"/api/v1/threads/{thread.id}").json()
    return body


def test_the_read_model_shows_the_queue_and_the_last_outcome(
    engine: Engine, api: APIClient
) -> None:
    thread = helper(engine)
    engine.script.text("one")
    first = submit(api, thread, "a")
    engine.drive(thread)
    second = submit(api, thread, "b")
    third = submit(api, thread, "c")

    read = _read(api, thread)

    assert read["status"] == "queued"
    assert read["active_turn"] is None
    assert [turn["id"] for turn in read["queued_turns"]] == [second["id"], third["id"]]
    assert read["last_outcome"]["turn_id"] == first["id"]
    assert (read["last_outcome"]["status"], read["last_outcome"]["outcome"]) == (
        "completed", "stop_on_response",
    )  # fmt: skip
    assert (read["pending_requests"], read["incidents"]) == ([], [])


def _running(thread: Thread) -> Turn:
    """A turn marked running (as a worker leaves it mid-call)."""
    turn = message_queue(thread=thread, role="user", content="work")
    Turn.objects.filter(pk=turn.pk).update(status="running", fence=1)
    Thread.objects.filter(pk=thread.pk).update(status="running", fence=1)
    return turn


def test_a_running_turn_with_no_lock_holder_reads_lost(engine: Engine, api: APIClient) -> None:
    thread = helper(engine)
    _running(thread)

    assert _read(api, thread)["status"] == "lost"
    assert api.get("/api/v1/threads?status=lost").json()["results"][0]["id"] == str(thread.id)
    assert api.get("/api/v1/threads?status=running").json()["results"] == []


def test_a_running_turn_whose_worker_holds_the_lock_reads_running_or_streaming(
    engine: Engine, api: APIClient
) -> None:
    thread = helper(engine)
    _running(thread)
    lock = lock_acquire(tenant_id=thread.tenant_id, thread_id=thread.pk)
    assert lock is not None
    try:
        running = _read(api, thread)["status"]
        Message.objects.create(
            tenant=thread.tenant, thread=thread, seq=99, role="assistant", status="pending"
        )
        streaming = _read(api, thread)["status"]
    finally:
        lock.release()

    assert (running, streaming) == ("running", "streaming")


def test_a_running_turn_reads_stale_when_the_lock_store_cannot_be_asked(
    engine: Engine, api: APIClient, monkeypatch: pytest.MonkeyPatch
) -> None:
    thread = helper(engine)
    _running(thread)

    def unreachable(**_: Any) -> bool:
        raise redis.ConnectionError("down")

    monkeypatch.setattr(turns_module, "lock_is_held", unreachable)

    assert _read(api, thread)["status"] == "stale"


def test_turns_waiting_long_with_no_worker_read_waiting_resource(
    engine: Engine, api: APIClient
) -> None:
    thread = helper(engine)
    queued = submit(api, thread, "hi")
    Turn.objects.filter(pk=queued["id"]).update(created_at=1)

    assert _read(api, thread)["status"] == RunStatus.WAITING_RESOURCE


# Bad input ---------------------------------------------------------------------------------

_json = st.recursive(
    st.none()
    | st.booleans()
    | st.integers()
    | st.floats(allow_nan=False, allow_infinity=False)
    | st.text(max_size=20),
    lambda inner: (
        st.lists(inner, max_size=3) | st.dictionaries(st.text(max_size=8), inner, max_size=3)
    ),
    max_leaves=8,
)


@settings(
    max_examples=60, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture]
)
@given(
    body=st.dictionaries(
        st.sampled_from(["input", "multitask_strategy", "metadata", "other"]), _json, max_size=4
    )
    | _json,
    query=st.dictionaries(
        st.sampled_from(["timeout", "status", "limit", "offset"]), st.text(max_size=12), max_size=3
    ),
)
def test_any_body_or_query_on_the_turn_routes_is_answered_without_a_500(
    engine: Engine, api: APIClient, body: Any, query: dict[str, str]
) -> None:
    thread = helper(engine)
    url = f"/api/v1/threads/{thread.id}/turns"

    posted = api.post(url, body, format="json")
    listed = api.get(url, query)
    turn = Turn.objects.filter(thread=thread).first()
    waited = api.get(f"/api/v1/turns/{turn.pk}/wait", {**query, "timeout": "0"}) if turn else None

    assert posted.status_code in (202, 400, 409, 413), posted.content
    if posted.status_code != 202:
        assert set(posted.json()["error"]) >= {"code", "message"}
    assert listed.status_code in (200, 400), listed.content
    if waited is not None:
        assert waited.status_code in (200, 400), waited


def test_what_a_tool_writes_during_a_turn_carries_the_turns_and_steps_ids(
    engine: Engine, api: APIClient
) -> None:
    @tool(description="Writes a note and remembers it.")
    def note(state: Any) -> str:
        state.write_file("/notes/a.txt", "hello", "text/plain")
        state.set_value("last_note", "/notes/a.txt")
        state.emit("noted", {"path": "/notes/a.txt"})
        return "noted"

    engine.define(
        prompts=[prompt("helper", tools=["note"])],
        agents=[{"name": "helper", "side_a": {"prompt": "helper"}}],
    )
    thread = engine.thread("helper")
    engine.script.tool_calls([{"name": "note"}]).text("Done.")
    turn_id = submit(api, thread, "take a note")["id"]

    engine.drive(thread)

    written = {
        event.type: event
        for event in Event.objects.filter(
            thread=thread, type__in=["file.changed", "kv.changed", "custom"]
        )
    }
    assert set(written) == {"file.changed", "kv.changed", "custom"}
    assert {event.turn_id for event in written.values()} == {turn_id}
    assert {event.step_id for event in written.values()} == {f"{turn_id}:1"}

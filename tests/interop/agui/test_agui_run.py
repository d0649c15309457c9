"""``POST /api/v1/agui/{agent}`` through a live uvicorn server and a real Celery worker,
read as an AG-UI client reads it: every ``data:`` parsed into ``ag_ui.core``'s event union,
in order, with AG-UI's lifecycle rules checked (interop.agui)."""

from __future__ import annotations

import json
import uuid
from typing import Any

import pytest

from tests.interop.agui.conftest import AGENT, FRONTEND_TOOL, AguiLive, Run, run_input
from threads.models import Action, ActionStatus, Message, Thread, Turn

pytestmark = pytest.mark.django_db(transaction=True)

COLOUR_TOOL = {
    "name": FRONTEND_TOOL,
    "description": "Ask the user to pick a colour in the page.",
    "parameters": {"type": "object", "properties": {"hint": {"type": "string"}},
                   "required": ["hint"]},
}  # fmt: skip


def _lifecycle(run: Run) -> None:
    """AG-UI's ordering rules: one run, opened first and closed last; text content and
    tool-call arguments only inside their start and end; steps finished as started."""
    types = run.types()
    assert types[0] == "RUN_STARTED", types
    assert types[-1] in ("RUN_FINISHED", "RUN_ERROR"), types
    assert types.count("RUN_STARTED") == 1, types
    assert types.count(types[-1]) == 1, types
    open_text: str | None = None
    open_calls: set[str] = set()
    steps: list[str] = []
    for event in run.events:
        kind = event.type.value
        if kind == "TEXT_MESSAGE_START":
            assert open_text is None, types
            open_text = event.message_id
        elif kind == "TEXT_MESSAGE_CONTENT":
            assert event.message_id == open_text, types
            assert event.delta, types
        elif kind == "TEXT_MESSAGE_END":
            assert event.message_id == open_text, types
            open_text = None
        elif kind == "TOOL_CALL_START":
            open_calls.add(event.tool_call_id)
        elif kind == "TOOL_CALL_ARGS":
            assert event.tool_call_id in open_calls, types
        elif kind == "TOOL_CALL_END":
            open_calls.remove(event.tool_call_id)
        elif kind == "STEP_STARTED":
            steps.append(event.step_name)
        elif kind == "STEP_FINISHED":
            steps.remove(event.step_name)
    assert open_text is None, types
    assert not open_calls, types
    assert not steps, types


def _answer_of(turn_id: str) -> str:
    """The content of the last assistant message the turn stored."""
    turn = Turn.objects.get(pk=turn_id)
    message = (
        Message.objects.filter(thread_id=turn.thread_id, role="assistant", depth=0)
        .order_by("-seq")
        .first()
    )
    assert message is not None
    return message.content or ""


def test_a_turn_with_a_tool_call_streams_valid_agui_events_in_order(agui: AguiLive) -> None:
    body = run_input("conversation-1", "What time is it?")

    run = agui.run(body)

    assert run.status == 200
    _lifecycle(run)
    started = run.events[0]
    assert (started.thread_id, started.run_id) == ("conversation-1", body["runId"])
    assert started.protocol_version == "1.0"
    assert run.wire[0]["threadId"] == "conversation-1"  # camelCase on the wire
    finished = run.events[-1]
    assert finished.type.value == "RUN_FINISHED"
    assert (finished.thread_id, finished.run_id) == ("conversation-1", body["runId"])
    assert run.types()[1] == "STATE_SNAPSHOT"
    # Step 1: the model says a word and calls current_time; step 2: it answers.
    (call,) = run.of("TOOL_CALL_START")
    assert call.tool_call_name == "current_time"
    (arguments,) = run.of("TOOL_CALL_ARGS")
    assert json.loads(arguments.delta) == {"timezone": "UTC"}
    (result,) = run.of("TOOL_CALL_RESULT")
    assert result.tool_call_id == call.tool_call_id
    assert result.content
    assert [e.step_name for e in run.of("STEP_STARTED")] == ["step 1", "step 2"]
    types = run.types()
    assert types.index("TOOL_CALL_END") < types.index("TOOL_CALL_RESULT")
    assert types.index("TOOL_CALL_RESULT") < types.index("STEP_FINISHED")
    answer = f"It is {result.content}."
    assert run.text() == f"Let me look.{answer}"
    messages = {e.message_id for e in run.of("TEXT_MESSAGE_START")}
    assert len(messages) == 2
    assert call.parent_message_id in messages
    assert _answer_of(started.metadata["turn_id"]) == answer
    # Step 2's answer began after the stream joined: it streamed as the model wrote it.
    last = run.of("TEXT_MESSAGE_START")[-1].message_id
    chunks = [e.delta for e in run.of("TEXT_MESSAGE_CONTENT") if e.message_id == last]
    assert len(chunks) > 1
    assert "".join(chunks) == answer
    thread = Thread.objects.get(pk=started.metadata["thread_id"])
    assert thread.tenant_id == agui.first.tenant.pk
    assert thread.metadata == {"agui_thread_id": "conversation-1"}


def test_the_frontends_thread_id_finds_its_thread_again(agui: AguiLive) -> None:
    first = agui.run(run_input("conversation-2", "hello"))
    second = agui.run(run_input("conversation-2", "again"))

    assert first.text() == "You said: hello"
    assert second.text() == "You said: again"
    ours = {run.events[0].metadata["thread_id"] for run in (first, second)}
    assert len(ours) == 1
    (thread_id,) = ours
    # The thread's own id names it too.
    third = agui.run(run_input(thread_id, "by id"))
    assert third.events[0].metadata["thread_id"] == thread_id
    assert third.events[0].thread_id == thread_id
    assert Turn.objects.filter(thread_id=thread_id).count() == 3


def test_a_frontend_tool_call_ends_the_run_and_its_result_resumes_the_turn(
    agui: AguiLive,
) -> None:
    first = agui.run(run_input("conversation-3", "Pick a colour", tools=[COLOUR_TOOL]))

    _lifecycle(first)
    (call,) = first.of("TOOL_CALL_START")
    assert call.tool_call_name == FRONTEND_TOOL
    assert json.loads(first.of("TOOL_CALL_ARGS")[0].delta) == {"hint": "warm"}
    assert first.of("TOOL_CALL_RESULT") == []
    finished = first.events[-1]
    assert finished.type.value == "RUN_FINISHED"
    assert finished.outcome.type == "success"
    assert finished.outcome.pending_tool_call_ids == [call.tool_call_id]
    turn_id = first.events[0].metadata["turn_id"]
    assert Turn.objects.get(pk=turn_id).status == "waiting_input"

    # The frontend ran the tool: its next run carries the conversation and the result.
    resumed_body = run_input("conversation-3", "unused", tools=[COLOUR_TOOL])
    resumed_body["messages"] = [
        first_message := resumed_body["messages"][0] | {"content": "Pick a colour"},
        {"id": "a-1", "role": "assistant",
         "toolCalls": [{"id": call.tool_call_id, "type": "function",
                        "function": {"name": FRONTEND_TOOL, "arguments": '{"hint": "warm"}'}}]},
        {"id": "t-1", "role": "tool", "toolCallId": call.tool_call_id, "content": "teal"},
    ]  # fmt: skip
    assert first_message["role"] == "user"
    second = agui.run(resumed_body)

    _lifecycle(second)
    assert second.events[0].metadata["turn_id"] == turn_id  # the same turn carried on
    assert second.events[-1].type.value == "RUN_FINISHED"
    assert second.events[-1].outcome is None
    assert second.of("TOOL_CALL_RESULT") == []  # the result was the frontend's own
    assert second.text() == "You picked teal."
    assert Turn.objects.get(pk=turn_id).status == "completed"
    stored = Message.objects.get(tool_call_id=call.tool_call_id, role="tool")
    assert stored.content == "teal"
    action = Action.objects.get(tool_call_id=call.tool_call_id)
    assert action.status == ActionStatus.ANSWERED
    assert action.tool_name == FRONTEND_TOOL


def test_a_frontend_tools_error_is_the_calls_failure(agui: AguiLive) -> None:
    first = agui.run(run_input("conversation-4", "Pick a colour", tools=[COLOUR_TOOL]))
    call_id = first.events[-1].outcome.pending_tool_call_ids[0]
    body = run_input("conversation-4", "unused", tools=[COLOUR_TOOL])
    body["messages"] = [
        {"id": "t-1", "role": "tool", "toolCallId": call_id, "content": "",
         "error": "the user closed the picker"},
    ]  # fmt: skip

    second = agui.run(body)

    assert second.events[-1].type.value == "RUN_FINISHED"
    assert "the user closed the picker" in second.text()


def test_an_approval_ends_the_run_with_an_interrupt_that_resume_answers(agui: AguiLive) -> None:
    first = agui.run(run_input("conversation-5", "count my words"))

    _lifecycle(first)
    outcome = first.events[-1].outcome
    assert outcome.type == "interrupt"
    (interrupt,) = outcome.interrupts
    (call,) = first.of("TOOL_CALL_START")
    assert call.tool_call_name == "count_words"
    assert interrupt.reason == "tool_approval"
    assert interrupt.tool_call_id == call.tool_call_id
    action = Action.objects.get(pk=interrupt.id)
    assert action.status == ActionStatus.PENDING

    body = run_input("conversation-5", "unused")
    body["resume"] = [{"interruptId": interrupt.id, "status": "resolved"}]
    second = agui.run(body)

    _lifecycle(second)
    (result,) = second.of("TOOL_CALL_RESULT")
    assert (result.tool_call_id, result.content) == (call.tool_call_id, "2")
    assert second.text() == "Counted: 2."
    assert Action.objects.get(pk=interrupt.id).status == ActionStatus.APPROVED


@pytest.mark.parametrize(
    ("change", "field"),
    [
        ({"runId": None}, "runId"),
        ({"messages": [{"id": "m", "role": "user", "content": 5}]}, "messages[0].content"),
        ({"messages": [{"id": "m", "role": "wizard", "content": "hi"}]}, "messages[0]"),
        ({"messages": []}, "messages"),
        ({"messages": [{"id": "m", "role": "assistant", "content": "hi"}]}, "messages[0].role"),
        ({"tools": [{"name": "bad name!", "description": "x"}]}, "tools[0].name"),
        ({"tools": [{"name": "t", "description": "x", "parameters": {"type": "string"}}]},
         "tools[0].parameters"),
        ({"surprise": 1}, "surprise"),
        ({"messages": [{"id": "m", "role": "user", "content": "hi", "mood": "sunny"}]},
         "messages[0].mood"),
    ],
)  # fmt: skip
def test_a_bad_body_is_a_400_naming_the_field(
    agui: AguiLive, change: dict[str, Any], field: str
) -> None:
    body = run_input("conversation-6", "hello") | change
    body = {key: value for key, value in body.items() if value is not None}

    run = agui.run(body)

    assert run.status == 400, run
    assert run.body is not None
    assert run.body["error"]["code"] == "invalid"
    assert run.body["error"]["field"] == field
    assert not Thread.objects.filter(tenant=agui.first.tenant).exists()


def test_a_body_that_is_not_json_is_a_400(agui: AguiLive) -> None:
    run = agui.run("{not json")

    assert run.status == 400
    assert run.body is not None
    assert run.body["error"]["code"] in ("malformed_body", "invalid")


def test_a_tool_result_no_call_waits_for_is_a_409(agui: AguiLive) -> None:
    agui.run(run_input("conversation-7", "hello"))
    body = run_input("conversation-7", "unused")
    body["messages"] = [{"id": "t", "role": "tool", "toolCallId": "call_none", "content": "x"}]

    run = agui.run(body)

    assert run.status == 409
    assert run.body is not None
    assert run.body["error"]["field"] == "messages[0].toolCallId"


def test_without_a_key_it_is_a_401(agui: AguiLive) -> None:
    run = agui.run(run_input("conversation-8", "hello"), key="")

    assert run.status == 401
    assert run.body is not None
    assert run.body["error"]["code"] == "unauthenticated"
    assert not Thread.objects.filter(tenant=agui.first.tenant).exists()


def test_another_tenant_cannot_run_or_read_the_first_tenants_agent_or_thread(
    agui: AguiLive,
) -> None:
    mine = agui.run(run_input("conversation-9", "secret plans"))
    thread_id = mine.events[0].metadata["thread_id"]
    before = list(Message.objects.filter(thread_id=thread_id).values_list("id", flat=True))

    # Its own agent of the same name answers it on a thread of its own, whichever id it
    # gives: the first tenant's thread id, or the first tenant's conversation id.
    for named in (thread_id, "conversation-9"):
        theirs = agui.run(run_input(named, "show me"), key=agui.other.key)
        assert theirs.status == 200
        assert theirs.text() == "You said: show me"
        assert "secret" not in json.dumps(theirs.wire)
        other_thread = Thread.objects.get(pk=theirs.events[0].metadata["thread_id"])
        assert other_thread.tenant_id == agui.other.tenant.pk
        assert str(other_thread.pk) != thread_id
    # The first tenant's pending frontend tool cannot be answered by another tenant.
    paused = agui.run(run_input("conversation-10", "Pick a colour", tools=[COLOUR_TOOL]))
    call_id = paused.events[-1].outcome.pending_tool_call_ids[0]
    forged = run_input(paused.events[0].metadata["thread_id"], "unused")
    forged["messages"] = [{"id": "t", "role": "tool", "toolCallId": call_id, "content": "x"}]
    refused = agui.run(forged, key=agui.other.key)
    assert refused.status == 400
    assert refused.body is not None
    assert refused.body["error"]["field"] == "threadId"
    assert Action.objects.get(tool_call_id=call_id).status == ActionStatus.PENDING
    assert list(Message.objects.filter(thread_id=thread_id).values_list("id", flat=True)) == (
        before
    )
    # An agent the caller's tenant does not have is a 404 (the isolation matrix tries
    # another tenant's agent: tests/tenancy/test_isolation.py).
    unknown = agui.run(run_input("x", "hi"), key=agui.other.key, agent="nobody")
    assert unknown.status == 404
    assert unknown.body is not None
    assert unknown.body["error"]["code"] == "not_found"


def test_a_repeated_idempotency_key_streams_the_same_turn(agui: AguiLive) -> None:
    body = run_input("conversation-11", "hello")
    key = {"Idempotency-Key": uuid.uuid4().hex}

    first = agui.run(body, headers=key)
    second = agui.run(body, headers=key)

    assert first.events[0].metadata == second.events[0].metadata
    assert second.text() == "You said: hello"
    assert Turn.objects.filter(tenant=agui.first.tenant).count() == 1


def test_a_thread_of_another_agent_is_a_400_naming_thread_id(agui: AguiLive) -> None:
    thread_id = agui.run(run_input("conversation-12", "hi")).events[0].metadata["thread_id"]
    Thread.objects.filter(pk=thread_id).update(agent_name="other", origin_agent_name="other")

    run = agui.run(run_input(thread_id, "hi"))

    assert run.status == 400
    assert run.body is not None
    assert run.body["error"]["field"] == "threadId"
    assert AGENT in run.body["error"]["message"]

"""interop.agui.stream.RunScope on its own: the turn's deliveries, in the order a stream
hands them over, and the AG-UI events they become (parsed back with the protocol's
models). The live tests cannot choose when a stream joins; these choose it."""

from __future__ import annotations

import json
from typing import Any

from ag_ui.core import (
    Event,
    RunFinishedEvent,
    RunFinishedInterruptOutcome,
    RunFinishedSuccessOutcome,
)
from pydantic import TypeAdapter

from interop.agui.stream import RunScope
from threads.runtime.client_tools import RESULT_SCHEMA
from threads.streams import Delivery

TURN = "00000000-0000-0000-0000-00000000abcd"
EVENT = TypeAdapter(Event)
_sequence = iter(range(1, 10_000))


def _delivery(kind: str, payload: dict[str, Any], *, stored: bool = True) -> Delivery:
    envelope = {"type": kind, "turn_id": TURN, "payload": payload}
    return Delivery(kind, next(_sequence) if stored else None, json.dumps(envelope))


def _answer(message_id: str, status: str, content: str = "", calls: Any = None) -> Delivery:
    message = {"id": message_id, "role": "assistant", "status": status, "content": content,
               "parent_id": None, "depth": 0,
               "tool_calls": calls}  # fmt: skip
    kind = "message.created" if status == "pending" else "message.updated"
    return _delivery(kind, message)


def _delta(message_id: str, text: str) -> Delivery:
    return _delivery(
        "model.delta", {"message_id": message_id, "depth": 0, "delta": text}, stored=False
    )


def _events(scope: RunScope, deliveries: list[Delivery]) -> list[Any]:
    """What ``scope`` sends for ``deliveries`` (each kept one framed), parsed."""
    events = []
    for delivery in deliveries:
        assert scope.keep(delivery), delivery
        for line in scope.frame(delivery).decode().splitlines():
            if line.startswith("data: "):
                events.append(EVENT.validate_json(line.removeprefix("data: ")))
    return events


def _scope(**kwargs: Any) -> RunScope:
    return RunScope(turn_id=TURN, thread_id="conversation", run_id="run-1", **kwargs)


def _contents(events: list[Any]) -> list[str]:
    return [event.delta for event in events if event.type.value == "TEXT_MESSAGE_CONTENT"]


def test_an_answer_begun_after_the_replay_streams_its_deltas() -> None:
    scope = _scope()
    scope.replayed()

    events = _events(scope, [
        _answer("m1", "pending"), _delta("m1", "Hel"), _delta("m1", "lo"),
        _answer("m1", "completed", "Hello"),
    ])  # fmt: skip

    assert [e.type.value for e in events] == [
        "TEXT_MESSAGE_START", "TEXT_MESSAGE_CONTENT", "TEXT_MESSAGE_CONTENT",
        "TEXT_MESSAGE_END",
    ]  # fmt: skip
    assert _contents(events) == ["Hel", "lo"]


def test_deltas_that_overtake_their_answers_start_wait_for_it() -> None:
    scope = _scope()
    scope.replayed()

    events = _events(scope, [
        _delta("m1", "Hel"), _answer("m1", "pending"), _delta("m1", "lo"),
        _answer("m1", "completed", "Hello"),
    ])  # fmt: skip

    assert _contents(events) == ["Hel", "lo"]


def test_an_answer_begun_before_the_stream_joined_arrives_whole() -> None:
    scope = _scope()
    replayed = _events(scope, [_answer("m1", "pending")])
    scope.replayed()

    # Its first deltas went out before the stream subscribed: the rest are not sent.
    events = replayed + _events(scope, [
        _delta("m1", "lo"), _delta("m1", " there"), _answer("m1", "completed", "Hello there"),
    ])  # fmt: skip

    assert _contents(events) == ["Hello there"]
    assert [e.type.value for e in events][-1] == "TEXT_MESSAGE_END"


def test_an_answers_tool_calls_follow_its_text_and_its_results_come_from_tool_messages() -> None:
    scope = _scope()
    scope.replayed()
    calls = [{"id": "call_1", "name": "current_time", "arguments": {"timezone": "UTC"}}]
    result = {"id": "m2", "role": "tool", "tool_call_id": "call_1", "content": "noon",
              "parent_id": None, "depth": 0, "status": "completed"}  # fmt: skip

    events = _events(scope, [
        _delivery("step.started", {"step": 1, "side": "a"}),
        _answer("m1", "pending"), _answer("m1", "completed", "Looking.", calls),
        _delivery("message.created", result),
        _delivery("step.completed", {"step": 1, "side": "a"}),
    ])  # fmt: skip

    assert [e.type.value for e in events] == [
        "STEP_STARTED", "TEXT_MESSAGE_START", "TEXT_MESSAGE_CONTENT", "TEXT_MESSAGE_END",
        "TOOL_CALL_START", "TOOL_CALL_ARGS", "TOOL_CALL_END", "TOOL_CALL_RESULT",
        "STEP_FINISHED",
    ]  # fmt: skip
    assert (events[4].parent_message_id, events[4].tool_call_name) == ("m1", "current_time")
    assert json.loads(events[5].delta) == {"timezone": "UTC"}
    assert (events[7].tool_call_id, events[7].content) == ("call_1", "noon")


def test_an_event_stored_with_the_calls_as_a_json_string_maps_alike() -> None:
    """Message events stored before the answers carried objects hold the JSON string of
    OpenAI's shape; a replay of them still shows the calls."""
    scope = _scope()
    scope.replayed()
    function = {"name": "current_time", "arguments": '{"timezone": "UTC"}'}
    legacy = json.dumps([{"id": "call_1", "type": "function", "function": function}])

    events = _events(scope, [_answer("m1", "completed", "Looking.", legacy)])

    calls = [e for e in events if e.type.value.startswith("TOOL_CALL_")]
    assert [e.type.value for e in calls] == ["TOOL_CALL_START", "TOOL_CALL_ARGS", "TOOL_CALL_END"]
    assert (calls[0].tool_call_id, calls[0].tool_call_name) == ("call_1", "current_time")
    assert json.loads(calls[1].delta) == {"timezone": "UTC"}


def test_a_frontend_tools_pause_leaves_its_call_pending_and_an_approval_is_an_interrupt() -> None:
    frontend = _scope(frontend_tools=frozenset({"pick_color"}))
    action = {"schema": RESULT_SCHEMA, "decisions": ["answer", "deny"], "arguments": {}}
    paused = {"action_id": "a1", "turn_id": TURN, "kind": "input", "tool_call_id": "call_9",
              "name": "pick_color", "status": "pending", "action": action}  # fmt: skip
    _events(frontend, [_delivery("action.required", paused)])
    ending = frontend.ending
    assert isinstance(ending, RunFinishedEvent)
    assert isinstance(ending.outcome, RunFinishedSuccessOutcome)
    assert ending.outcome.pending_tool_call_ids == ["call_9"]

    approval = _scope()
    asked_action = {
        "schema": {"type": "object"}, "decisions": ["approve", "deny", "edit"],
        "arguments": {"amount": 5}, "expires_at": 1_800_000_000_000_000,
    }  # fmt: skip
    asked = {**paused, "kind": "approval", "name": "refund", "action": asked_action}
    _events(approval, [_delivery("action.required", asked)])
    assert isinstance(approval.ending, RunFinishedEvent)
    assert isinstance(approval.ending.outcome, RunFinishedInterruptOutcome)
    (interrupt,) = approval.ending.outcome.interrupts
    assert (interrupt.id, interrupt.reason, interrupt.tool_call_id) == (
        "a1", "tool_approval", "call_9",
    )  # fmt: skip
    assert interrupt.expires_at == "2027-01-15T08:00:00+00:00"
    assert interrupt.metadata == {
        "decisions": ["approve", "deny", "edit"], "arguments": {"amount": 5},
    }  # fmt: skip


def test_another_turns_events_are_not_kept() -> None:
    scope = _scope()
    other = Delivery("custom", 7, json.dumps({"type": "custom", "turn_id": "another",
                                               "payload": {"name": "x", "data": 1}}))  # fmt: skip

    assert not scope.keep(other)

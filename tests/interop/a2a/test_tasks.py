"""Turns as A2A tasks (interop.a2a.tasks): every stored status has its state, and a task
shows the turn's text messages, its answers as artifacts and what its status says."""

from __future__ import annotations

import uuid
from typing import Any

import pytest
from a2a.types import Role, TaskState

from interop.a2a.tasks import A2A_MESSAGE_ID, STATES, task_build
from threads.models import RunStatus, Turn
from threads.services.status import NOT_STORED

# Each stored status and the state it is, so a status added later fails here until mapped.
EXPECTED = {
    "queued": TaskState.TASK_STATE_SUBMITTED,
    "running": TaskState.TASK_STATE_WORKING,
    "retrying": TaskState.TASK_STATE_WORKING,
    "waiting_resource": TaskState.TASK_STATE_WORKING,
    "waiting_input": TaskState.TASK_STATE_INPUT_REQUIRED,
    "waiting_permission": TaskState.TASK_STATE_INPUT_REQUIRED,
    "completed": TaskState.TASK_STATE_COMPLETED,
    "failed": TaskState.TASK_STATE_FAILED,
    "timed_out": TaskState.TASK_STATE_FAILED,
    "blocked": TaskState.TASK_STATE_FAILED,
    "cancelled": TaskState.TASK_STATE_CANCELED,
}


def test_every_stored_turn_status_is_a_task_state() -> None:
    stored = {status.value for status in RunStatus} - set(NOT_STORED)

    assert dict(STATES) == EXPECTED
    assert set(STATES) == stored


def _turn(status: str, **fields: Any) -> Turn:
    payload = {"message_id": str(uuid.uuid4()), "role": "user", "content": "hi",
               "metadata": {A2A_MESSAGE_ID: "m-1"}}  # fmt: skip
    return Turn(thread_id=uuid.uuid4(), status=status, payload=payload, created_at=1, **fields)


def _message(role: str, content: str | None, **fields: Any) -> dict[str, Any]:
    return {"id": str(uuid.uuid4()), "role": role, "content": content, "depth": 0,
            "status": "completed", "metadata": {}, **fields}  # fmt: skip


def test_a_queued_task_shows_the_message_it_will_store() -> None:
    turn = _turn("queued")

    task = task_build(turn, [])

    assert (task.id, task.context_id) == (str(turn.pk), str(turn.thread_id))
    assert task.status.state == TaskState.TASK_STATE_SUBMITTED
    assert [(m.role, m.message_id, m.parts[0].text) for m in task.history] == [
        (Role.ROLE_USER, "m-1", "hi")
    ]
    assert not task.artifacts
    assert not task.status.HasField("message")


def test_a_completed_task_shows_its_text_messages_and_answers() -> None:
    turn = _turn("completed", ended_at=5_000_000)
    user = _message("user", "hi", metadata={A2A_MESSAGE_ID: "m-1"})
    call = _message("assistant", None, tool_calls=[{"id": "c1", "name": "t", "arguments": {}}])
    tool = _message("tool", "42")
    inner = _message("assistant", "a subagent's", depth=1)
    answer = _message("assistant", "It is 42.")

    task = task_build(turn, [user, call, tool, inner, answer])
    trimmed = task_build(turn, [user, call, tool, inner, answer], history_length=1)

    assert [(m.role, m.parts[0].text) for m in task.history] == [
        (Role.ROLE_USER, "hi"), (Role.ROLE_AGENT, "It is 42.")
    ]  # fmt: skip
    assert task.history[0].message_id == "m-1"
    assert [(a.artifact_id, a.parts[0].text) for a in task.artifacts] == [
        (answer["id"], "It is 42.")
    ]
    assert task.status.message.parts[0].text == "It is 42."
    assert task.status.timestamp.ToMicroseconds() == 5_000_000
    assert [m.parts[0].text for m in trimmed.history] == ["It is 42."]
    assert task.metadata["status"] == "completed"


@pytest.mark.parametrize("status", ["failed", "timed_out", "blocked"])
def test_a_failed_task_says_why(status: str) -> None:
    task = task_build(_turn(status, error="the model refused"), [])

    assert task.status.state == TaskState.TASK_STATE_FAILED
    assert task.status.message.parts[0].text == "the model refused"


def test_an_input_required_task_lists_the_pending_actions() -> None:
    turn = _turn("waiting_permission")
    action = {"id": str(uuid.uuid4()), "kind": "approval", "name": "delete_file"}

    task = task_build(turn, [], [action])

    assert task.status.state == TaskState.TASK_STATE_INPUT_REQUIRED
    text, data = task.status.message.parts
    assert "approval delete_file" in text.text
    assert data.data.list_value.values[0].struct_value["name"] == "delete_file"

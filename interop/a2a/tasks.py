"""Our turns as A2A tasks: a task is a turn (``id`` = the turn's id), its context the turn's
thread (``context_id`` = the thread's id).

States: ``queued`` is *submitted*; ``running``, ``retrying`` and ``waiting_resource`` (a
budget or quota has no room yet) are *working*; ``waiting_input`` and ``waiting_permission``
(a pending action) are *input-required*; ``completed`` is *completed*; ``failed``,
``timed_out`` and ``blocked`` are *failed*; ``cancelled`` is *canceled*.

History holds the turn's top-level text messages (the user's input, the agent's answers);
tool calls and results stay ours. Each answer with text is also an artifact (its id the
message's), which is what a stream sends as the answer arrives.
"""

from __future__ import annotations

import json
from collections.abc import Mapping, Sequence
from typing import Any

from a2a.helpers import new_data_part
from a2a.types import Artifact, Message, Part, Role, Task, TaskState, TaskStatus
from django.core.serializers.json import DjangoJSONEncoder

from threads.models import TURN_PAUSED, RunStatus, Turn
from threads.services.actions import turn_pending_actions
from threads.services.turns import turn_messages

# Where the A2A ``messageId`` of a message we stored is kept (the message's metadata).
A2A_MESSAGE_ID = "a2a_message_id"
ANSWER = "answer"
JSON = "application/json"

S = RunStatus
STATES: Mapping[str, TaskState] = {
    S.QUEUED: TaskState.TASK_STATE_SUBMITTED,
    S.RUNNING: TaskState.TASK_STATE_WORKING,
    S.RETRYING: TaskState.TASK_STATE_WORKING,
    S.WAITING_RESOURCE: TaskState.TASK_STATE_WORKING,
    S.WAITING_INPUT: TaskState.TASK_STATE_INPUT_REQUIRED,
    S.WAITING_PERMISSION: TaskState.TASK_STATE_INPUT_REQUIRED,
    S.COMPLETED: TaskState.TASK_STATE_COMPLETED,
    S.FAILED: TaskState.TASK_STATE_FAILED,
    S.TIMED_OUT: TaskState.TASK_STATE_FAILED,
    S.BLOCKED: TaskState.TASK_STATE_FAILED,
    S.CANCELLED: TaskState.TASK_STATE_CANCELED,
}
# The states after which nothing more happens to a task (its turn is over).
FINAL_STATES = frozenset(
    {TaskState.TASK_STATE_COMPLETED, TaskState.TASK_STATE_FAILED, TaskState.TASK_STATE_CANCELED}
)


def task_state(status: str) -> TaskState:
    return STATES.get(status, TaskState.TASK_STATE_WORKING)


def task_status(state: TaskState, us: int | None, message: Message | None = None) -> TaskStatus:
    """A status in ``state`` since ``us`` (µs since the epoch), saying ``message``."""
    status = TaskStatus(state=state, message=message)
    if us is not None:
        status.timestamp.FromMicroseconds(int(us))
    return status


def data_part(data: Any) -> Part:
    """``data`` (anything our JSON encoder takes) as a JSON data part."""
    return new_data_part(json.loads(json.dumps(data, cls=DjangoJSONEncoder)), JSON)


def agent_message(text: str, *, turn: Turn, message_id: str) -> Message:
    return Message(
        message_id=message_id, context_id=str(turn.thread_id), task_id=str(turn.pk),
        role=Role.ROLE_AGENT, parts=[Part(text=text)],
    )  # fmt: skip


def history_message(message: Mapping[str, Any], *, turn: Turn) -> Message | None:
    """One of our messages (``message_answer``'s shape) as an A2A message: a top-level user
    or assistant message with text; None for the rest (tool calls and results, system
    notes, a subagent's)."""
    role = {"user": Role.ROLE_USER, "assistant": Role.ROLE_AGENT}.get(message["role"])
    if role is None or message.get("depth") or not message.get("content"):
        return None
    metadata = message.get("metadata") or {}
    message_id = metadata.get(A2A_MESSAGE_ID) if role == Role.ROLE_USER else None
    return Message(
        message_id=str(message_id or message["id"]), context_id=str(turn.thread_id),
        task_id=str(turn.pk), role=role, parts=[Part(text=str(message["content"]))],
    )  # fmt: skip


def answer_artifact(message: Mapping[str, Any]) -> Artifact:
    """An answer of the agent (an assistant message with text) as an artifact."""
    return Artifact(artifact_id=str(message["id"]), name=ANSWER,
                    parts=[Part(text=str(message["content"]))])  # fmt: skip


def is_answer(message: Mapping[str, Any]) -> bool:
    """A finished top-level assistant message with text."""
    return (
        message.get("role") == "assistant" and not message.get("depth")
        and message.get("status") == "completed" and bool(message.get("content"))
    )  # fmt: skip


def _queued_input(turn: Turn) -> Message | None:
    """The message a turn that has not run yet will store (its payload)."""
    payload = turn.payload
    if not payload.get("content") or payload.get("role") != "user":
        return None
    metadata = payload.get("metadata") or {}
    return Message(
        message_id=str(metadata.get(A2A_MESSAGE_ID) or payload.get("message_id", "")),
        context_id=str(turn.thread_id), task_id=str(turn.pk), role=Role.ROLE_USER,
        parts=[Part(text=str(payload["content"]))],
    )  # fmt: skip


def status_message(
    turn: Turn, answers: Sequence[Mapping[str, Any]], actions: Sequence[Mapping[str, Any]]
) -> Message | None:
    """What the task's status says: the last answer of a completed turn, what a paused one
    asks (the pending actions as data, answered through the REST API), why one failed."""
    state = task_state(turn.status)
    if state == TaskState.TASK_STATE_COMPLETED and answers:
        last = answers[-1]
        return agent_message(str(last["content"]), turn=turn, message_id=str(last["id"]))
    if state == TaskState.TASK_STATE_INPUT_REQUIRED and actions:
        names = ", ".join(f"{action.get('kind')} {action.get('name')}" for action in actions)
        message = agent_message(
            f"The task waits for a person's decision ({names}); answer it with POST "
            "/api/v1/threads/{context_id}/actions/{action_id}.",
            turn=turn, message_id=f"{turn.pk}:actions",
        )  # fmt: skip
        message.parts.append(data_part(list(actions)))
        return message
    if state == TaskState.TASK_STATE_FAILED:
        text = turn.error or f"the turn ended {turn.status}"
        return agent_message(text, turn=turn, message_id=f"{turn.pk}:error")
    return None


def task_build(
    turn: Turn,
    messages: Sequence[Mapping[str, Any]],
    actions: Sequence[Mapping[str, Any]] = (),
    *,
    history_length: int | None = None,
) -> Task:
    """The task of ``turn``, given the messages it wrote (``turn_messages``) and, while it
    rests on a person's decision, its pending actions. ``history_length`` keeps the most
    recent messages only (0: none)."""
    history = [m for m in (history_message(item, turn=turn) for item in messages) if m]
    if not any(message.role == Role.ROLE_USER for message in history):
        queued = _queued_input(turn)
        history = [queued, *history] if queued is not None else history
    if history_length is not None:
        history = history[len(history) - history_length :] if history_length else []
    answers = [message for message in messages if is_answer(message)]
    moment = turn.ended_at or turn.started_at or turn.created_at
    return Task(
        id=str(turn.pk),
        context_id=str(turn.thread_id),
        status=task_status(task_state(turn.status), moment, status_message(turn, answers, actions)),
        artifacts=[answer_artifact(message) for message in answers],
        history=history,
        metadata={"status": turn.status, "outcome": turn.outcome or ""},
    )


def task_read(*, turn: Turn, history_length: int | None = None) -> Task:
    """The task of ``turn`` as stored now (its messages and pending actions read)."""
    actions = turn_pending_actions(turn=turn) if turn.status in TURN_PAUSED else []
    return task_build(turn, turn_messages(turn=turn), actions, history_length=history_length)

"""The thread read model, two ways: folded from a thread's events (a pure projection of
event envelopes, as an export carries them), and read from the stored tables.

What it holds is what the events truly carry, each fact with its stable id:

* ``agent``: the current agent (``thread.created``, a handoff's ``thread.updated``);
* ``status``: the stored thread status (``thread.status``; a new thread rests ``completed``);
* ``terminated`` (``thread.terminated``);
* ``turns``: each turn's status (``queue.changed`` items, ``turn.started``, a turn's end;
  the thread's running turn follows ``thread.status`` into ``retrying`` and a pause; inputs
  that joined a turn end with it, or are left over as turns of their own);
* ``messages``: the ids created and not deleted (``message.created`` / ``message.deleted``);
* ``model_calls`` / ``tool_calls``: the log rows of model and tool calls (each
  ``model.completed``/``model.failed`` and ``tool.result``/``tool.failed`` names its log);
* ``pending_actions``: ``action.required`` without its ``action.resolved``;
* ``subagents``: each child's status in this thread's registry (``subagent.*``; closed
  stays ``terminated``);
* ``files``: the paths of the files written and not deleted (``file.changed``).

KV changes are not folded: their events are published after commit, not with the row.
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping
from dataclasses import dataclass, field
from typing import Any

from threads.models import (
    Action,
    ActionStatus,
    Log,
    Message,
    RunStatus,
    SubagentLink,
    Thread,
    ThreadFile,
    Turn,
)

S = RunStatus
# Thread statuses that a running turn shares with its thread (a pause, a retry).
_TURN_SHARED = frozenset({S.RUNNING, S.RETRYING, S.WAITING_PERMISSION, S.WAITING_RESOURCE})
_TURN_ENDS = frozenset({"turn.completed", "turn.failed", "turn.cancelled"})
_ACTIVE = frozenset({S.RUNNING, S.RETRYING})


@dataclass
class ThreadReadModel:
    """One thread's read model (see the module docstring for each field)."""

    thread_id: str
    agent: str | None = None
    status: str = S.COMPLETED
    terminated: bool = False
    turns: dict[str, str] = field(default_factory=dict)
    messages: set[str] = field(default_factory=set)
    model_calls: set[str] = field(default_factory=set)
    tool_calls: set[str] = field(default_factory=set)
    pending_actions: set[str] = field(default_factory=set)
    subagents: dict[str, str] = field(default_factory=dict)
    files: set[str] = field(default_factory=set)

    def counts(self) -> dict[str, int]:
        """How many of each: messages are those created minus those deleted."""
        return {
            "turns": len(self.turns), "messages": len(self.messages),
            "model_calls": len(self.model_calls), "tool_calls": len(self.tool_calls),
            "pending_actions": len(self.pending_actions), "subagents": len(self.subagents),
            "files": len(self.files),
        }  # fmt: skip


@dataclass
class _Fold:
    """A thread's read model as its events build it, and what the fold needs besides."""

    model: ThreadReadModel
    hosts: dict[str, str | None] = field(default_factory=dict)  # joined input -> its turn
    sources: dict[str, str] = field(default_factory=dict)
    active: str | None = None  # the turn a flow runs (or rests on a person)
    closed: set[str] = field(default_factory=set)
    last_sequence: int = 0

    def apply(self, event: Mapping[str, Any]) -> None:
        kind = str(event["type"])
        payload: Mapping[str, Any] = event.get("payload") or {}
        self.last_sequence = max(self.last_sequence, int(event.get("sequence") or 0))
        handler = _HANDLERS.get(kind)
        if handler is not None:
            handler(self, event, payload)
        elif kind in _TURN_ENDS:
            self.turn_end(str(payload["turn_id"]), str(payload["status"]))
        elif kind.startswith("subagent."):
            self.subagent(kind, payload)

    def thread_status(self, event: Mapping[str, Any], payload: Mapping[str, Any]) -> None:
        status = str(payload["status"])
        self.model.status = status
        paused_for_input = status == S.WAITING_INPUT and payload.get("reason") == "action_required"
        target = event.get("turn_id") or self.active
        if target and (status in _TURN_SHARED or paused_for_input):
            self.model.turns[str(target)] = status

    def queue_changed(self, payload: Mapping[str, Any]) -> None:
        items = [payload["item"]] if payload.get("item") else list(payload.get("items") or [])
        for item in items:
            turn_id = str(item["id"])
            self.model.turns[turn_id] = str(item["status"])
            self.hosts[turn_id] = item.get("joined_turn_id")
            self.sources[turn_id] = str(item.get("source") or "")
            if payload.get("change") == "taken" and not item.get("joined_turn_id"):
                self.active = turn_id

    def turn_end(self, turn_id: str, status: str) -> None:
        """A turn ended: what it drained ends with it; what it never drained is left over
        as a turn of its own, or, when it was cancelled, cancelled if it queued it itself
        (``threads.services.status.ending``)."""
        turns = self.model.turns
        turns[turn_id] = status
        for joined, host in self.hosts.items():
            if host != turn_id:
                continue
            if turns.get(joined) in _ACTIVE:
                turns[joined] = status
            elif turns.get(joined) == S.QUEUED:
                if status == S.CANCELLED and self.sources.get(joined) == "queue_message":
                    turns[joined] = S.CANCELLED
                else:
                    self.hosts[joined] = None
        if self.active == turn_id:
            self.active = None

    def subagent(self, kind: str, payload: Mapping[str, Any]) -> None:
        child = str(payload["subagent_id"])
        if kind == "subagent.closed":
            self.closed.add(child)
            self.model.subagents[child] = "terminated"
        elif child not in self.closed and payload.get("status"):
            self.model.subagents[child] = str(payload["status"])


def _created(fold: _Fold, event: Mapping[str, Any], payload: Mapping[str, Any]) -> None:
    fold.model.agent = str(payload["agent"])


def _updated(fold: _Fold, event: Mapping[str, Any], payload: Mapping[str, Any]) -> None:
    if payload.get("agent"):
        fold.model.agent = str(payload["agent"])


def _terminated(fold: _Fold, event: Mapping[str, Any], payload: Mapping[str, Any]) -> None:
    fold.model.terminated = True


def _status(fold: _Fold, event: Mapping[str, Any], payload: Mapping[str, Any]) -> None:
    fold.thread_status(event, payload)


def _queue(fold: _Fold, event: Mapping[str, Any], payload: Mapping[str, Any]) -> None:
    fold.queue_changed(payload)


def _started(fold: _Fold, event: Mapping[str, Any], payload: Mapping[str, Any]) -> None:
    turn_id = str(payload["turn_id"])
    fold.model.turns[turn_id] = S.RUNNING
    fold.active = turn_id


def _message(fold: _Fold, event: Mapping[str, Any], payload: Mapping[str, Any]) -> None:
    if event["type"] == "message.deleted":
        fold.model.messages.discard(str(payload["id"]))
    else:
        fold.model.messages.add(str(payload["id"]))


def _model_call(fold: _Fold, event: Mapping[str, Any], payload: Mapping[str, Any]) -> None:
    fold.model.model_calls.add(str(payload["log_id"]))


def _tool_call(fold: _Fold, event: Mapping[str, Any], payload: Mapping[str, Any]) -> None:
    fold.model.tool_calls.add(str(payload["log_id"]))


def _action(fold: _Fold, event: Mapping[str, Any], payload: Mapping[str, Any]) -> None:
    if event["type"] == "action.required":
        fold.model.pending_actions.add(str(payload["action_id"]))
    else:
        fold.model.pending_actions.discard(str(payload["action_id"]))


def _file(fold: _Fold, event: Mapping[str, Any], payload: Mapping[str, Any]) -> None:
    if payload.get("change") == "written":
        fold.model.files.add(str(payload["path"]))
    elif payload.get("change") == "deleted":
        fold.model.files.discard(str(payload["path"]))


_HANDLERS = {
    "thread.created": _created,
    "thread.updated": _updated,
    "thread.terminated": _terminated,
    "thread.status": _status,
    "queue.changed": _queue,
    "turn.started": _started,
    "message.created": _message,
    "message.deleted": _message,
    "model.completed": _model_call,
    "model.failed": _model_call,
    "tool.result": _tool_call,
    "tool.failed": _tool_call,
    "action.required": _action,
    "action.resolved": _action,
    "file.changed": _file,
}


class Projection:
    """Folds event envelopes (any threads', each thread's in sequence order) into one read
    model per thread. Pure: it reads nothing but the envelopes it is given."""

    def __init__(self) -> None:
        self._folds: dict[str, _Fold] = {}

    def apply(self, event: Mapping[str, Any]) -> None:
        thread_id = str(event["thread_id"])
        fold = self._folds.get(thread_id)
        if fold is None:
            fold = self._folds[thread_id] = _Fold(ThreadReadModel(thread_id))
        fold.apply(event)

    def model(self, thread_id: str) -> ThreadReadModel:
        """The thread's read model (an empty one when none of its events was folded)."""
        fold = self._folds.get(thread_id)
        return fold.model if fold is not None else ThreadReadModel(thread_id)

    def last_sequence(self, thread_id: str) -> int:
        fold = self._folds.get(thread_id)
        return fold.last_sequence if fold is not None else 0


def read_model_of_events(events: Iterable[Mapping[str, Any]]) -> dict[str, ThreadReadModel]:
    """Every thread's read model folded from ``events``, by thread id."""
    projection = Projection()
    thread_ids: dict[str, None] = {}
    for event in events:
        projection.apply(event)
        thread_ids[str(event["thread_id"])] = None
    return {thread_id: projection.model(thread_id) for thread_id in thread_ids}


def read_model_stored(*, thread: Thread) -> ThreadReadModel:
    """The thread's read model from its stored rows (ids only are read)."""

    def ids(rows: Any) -> set[str]:
        return {str(pk) for pk in rows.values_list("id", flat=True)}

    tenant, pk = thread.tenant, thread.pk
    logs = Log.objects.for_tenant(tenant).filter(thread_id=pk)
    turns = Turn.objects.for_tenant(tenant).filter(thread_id=pk).values_list("id", "status")
    links = SubagentLink.objects.for_tenant(tenant).filter(thread_id=pk)
    files = ThreadFile.objects.for_tenant(tenant).filter(thread_id=pk, is_directory=False)
    pending = Action.objects.for_tenant(tenant).filter(thread_id=pk, status=ActionStatus.PENDING)
    return ThreadReadModel(
        thread_id=str(pk),
        agent=thread.agent_name,
        status=thread.status,
        terminated=thread.terminated_at is not None,
        turns={str(turn_id): status for turn_id, status in turns},
        messages=ids(Message.objects.for_tenant(tenant).filter(thread_id=pk)),
        model_calls=ids(logs.filter(kind="llm")),
        tool_calls=ids(logs.filter(kind="tool")),
        pending_actions=ids(pending),
        subagents={str(child): status for child, status in links.values_list("child_id", "status")},
        files=set(files.values_list("path", flat=True)),
    )

"""Subagents' registry entries and the ends of their sessions (spec DIGEST §6.3-§6.4,
runtime §7-§8 and §10).

A parent keeps one :class:`SubagentLink` per child thread. When a child's turn (its session)
ends, :func:`session_end` computes the session's outcome and records it on the entry; a
blocking call of the parent that awaits that turn takes it (:func:`outcome_take`), otherwise
it is queued to the parent as a silent message (unless ``parent_communication`` is
``explicit``), with the child's attachments copied into the parent. A non-resumable child is
closed once its outcome is delivered (``threads.services.control.child_close``).
"""

from __future__ import annotations

import logging
import uuid
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any

from django.db import transaction

from agents.documents import binding_name
from agents.selectors import agent_load
from common.errors import Conflict, DomainError, NotFound
from common.time import now_us
from threads.events import publish
from threads.models import (
    TURN_TERMINAL,
    Message,
    SubagentLink,
    Thread,
    Turn,
    TurnKind,
    TurnSource,
)
from threads.services import logs
from threads.services.attachments import attachments_copy
from threads.services.inbox import message_queue

logger = logging.getLogger(__name__)

# The stop reasons that end a session because someone interrupted it.
INTERRUPTED = frozenset(
    {"aborted_by_user", "terminated", "cancelled", "interrupted", "rolled_back"}
)


@dataclass(frozen=True)
class SessionOutcome:
    """What a child's session came to (DIGEST §6.3 "Child outcome"): ``ok`` with ``text`` as
    its result, or not with ``text`` as its error; ``attachments`` are the child's."""

    turn_id: str
    ok: bool
    text: str
    attachments: list[dict[str, Any]] = field(default_factory=list)
    notify: bool = True  # False: stop_session(notify_parent=False)
    status: str | None = None  # a registry status the session set (stop_session(status=))

    def as_json(self) -> dict[str, Any]:
        return {
            "turn_id": self.turn_id, "ok": self.ok, "text": self.text,
            "attachments": self.attachments, "notify": self.notify, "status": self.status,
        }  # fmt: skip

    @classmethod
    def from_json(cls, data: Mapping[str, Any]) -> SessionOutcome:
        return cls(
            turn_id=str(data["turn_id"]), ok=bool(data["ok"]), text=str(data["text"]),
            attachments=list(data.get("attachments") or []), notify=data.get("notify", True),
            status=data.get("status"),
        )  # fmt: skip


@dataclass(frozen=True)
class StopSession:
    """What ``state.stop_session(result=, notify_parent=, status=)`` asked for."""

    result: str
    notify_parent: bool = True
    status: str | None = None


# Registry entries ------------------------------------------------------------------------


def link_json(link: SubagentLink) -> dict[str, Any]:
    """A registry entry as ``ThreadState.children`` and ``GET .../children`` show it."""
    return {
        "reference": str(link.child_id),
        "relationship": link.relationship,
        "owner": link.owner,
        "name": link.agent_name,
        "title": link.title,
        "thread_name": link.title,
        "description": link.description,
        "blocking": link.blocking,
        "resumable": link.resumable,
        "receives_messages": link.receives_messages,
        "parent_communication": link.parent_communication,
        "status": link.status,
        "initial_arguments": link.initial_arguments,
        "spawn_group_id": link.spawn_group_id or None,
        "created_at": link.created_at,
        "updated_at": link.updated_at,
        "terminated_at": link.terminated_at,
    }


def children_of(*, thread: Thread) -> list[SubagentLink]:
    """``thread``'s registry entries, oldest first."""
    return list(SubagentLink.objects.filter(thread_id=thread.pk).order_by("created_at", "id"))


def child_get(*, parent: Thread, reference: object) -> Thread | None:
    """The child thread ``reference`` of ``parent`` (only true children), or None."""
    try:
        reference = uuid.UUID(str(reference))
    except ValueError:
        return None
    return (
        Thread.objects.filter(pk=reference, parent_id=parent.pk, tenant_id=parent.tenant_id)
        .select_related("tenant")
        .first()
    )


def link_status_set(*, child: Thread, status: str) -> bool:
    """Set the status text of ``child``'s entry in its parent's registry (``set_status``, the
    ``session_status`` binding) with ``subagent.status``; False without a parent."""
    link = SubagentLink.objects.filter(child_id=child.pk).select_related("thread").first()
    if link is None:
        return False
    _status(link, status[:200])
    return True


def _status(link: SubagentLink, status: str) -> None:
    if link.status == status:
        return
    link.status, link.updated_at = status, now_us()
    SubagentLink.objects.filter(pk=link.pk).update(status=status, updated_at=link.updated_at)
    publish(link.thread, "subagent.status", {"subagent_id": str(link.child_id), "status": status})


def link_close(*, child: Thread, at: int) -> None:
    """``child`` was terminated: its parent's entry says so, with ``subagent.closed``
    (runtime §10: termination propagates to the parent's registry)."""
    live = SubagentLink.objects.filter(child_id=child.pk, terminated_at__isnull=True)
    link = live.select_related("thread").first()
    if link is None:
        return
    SubagentLink.objects.filter(pk=link.pk).update(
        status="terminated", terminated_at=at, updated_at=at
    )
    publish(link.thread, "subagent.closed", {"subagent_id": str(child.pk), "status": "terminated"})


# Outcomes --------------------------------------------------------------------------------


def session_outcome(
    *, child: Thread, turn: Turn, reason: str, stop: StopSession | None = None
) -> SessionOutcome:
    """The outcome of ``child``'s session ``turn`` (DIGEST §6.3), over the messages it
    wrote: ``stop_session`` -> its result; else the newest successful session_stop or
    session_fail tool message; else (when the agent declares session tools) an error naming
    the stop reason; else the newest top-level message (a failed tool row is an error)."""
    turn_id = str(turn.pk)
    if stop is not None:
        return SessionOutcome(turn_id, True, stop.result, notify=stop.notify_parent,
                              status=stop.status)  # fmt: skip
    if reason in INTERRUPTED:
        return SessionOutcome(turn_id, False, f"The subagent's session was stopped ({reason}).")
    written = Message.objects.filter(thread_id=child.pk, turn_id=turn.pk, depth=0)
    stop_name, fail_name = _session_tools(child)
    if stop_name or fail_name:
        bound = (
            written.filter(role="tool", tool_status="success", name__in=[stop_name, fail_name])
            .order_by("-seq")
            .first()
        )
        if bound is not None:
            ok = bound.name != fail_name
            return SessionOutcome(turn_id, ok, bound.content or "", list(bound.attachments))
        if turn.status not in ("failed", "blocked"):
            tools = " or ".join(name for name in (stop_name, fail_name) if name)
            return SessionOutcome(
                turn_id, False,
                f"The subagent's session ended without calling {tools} (stop reason: {reason}).",
            )  # fmt: skip
    if turn.status in ("failed", "blocked"):
        detail = f": {turn.error}" if turn.error else ""
        return SessionOutcome(turn_id, False, f"The subagent's session failed ({reason}){detail}")
    newest = written.exclude(silent=True).exclude(content__isnull=True).order_by("-seq").first()
    if newest is None:
        return SessionOutcome(turn_id, True, "The subagent finished without a message.")
    ok = not (newest.role == "tool" and newest.tool_status == "error")
    return SessionOutcome(turn_id, ok, newest.content or "", list(newest.attachments))


def _session_tools(child: Thread) -> tuple[str | None, str | None]:
    """The session_stop and session_fail tools of ``child``'s agent (either side)."""
    try:
        agent = agent_load(tenant=child.tenant, name=child.agent_name)
    except NotFound:
        return None, None
    sides = [side for side in (agent.side_a, agent.side_b) if side is not None]
    stop = next((binding_name(s.session_stop) for s in sides if s.session_stop), None)
    fail = next((binding_name(s.session_fail) for s in sides if s.session_fail), None)
    return stop, fail


def session_end(*, child: Thread, turn: Turn, reason: str, stop: StopSession | None = None) -> bool:
    """``child``'s session ``turn`` ended: record its outcome on the parent's entry with
    ``subagent.completed``/``subagent.failed``, and deliver it to the parent unless a blocking
    call awaits it. Run it in the transaction that ends the turn (the flow's), so a waiter
    never sees the turn ended without its outcome. Returns whether the caller should close
    the child (:func:`child_close`) after commit: a non-resumable child whose outcome went out.

    A spawn turn is no session: it only starts the child's own immediate subagents (DIGEST
    §6.5) and the parent's message waits behind it, so its end records and delivers nothing.
    """
    kind = turn.kind or Turn.objects.filter(pk=turn.pk).values_list("kind", flat=True).first()
    if kind == TurnKind.SPAWN:
        return False
    link = SubagentLink.objects.filter(child_id=child.pk).first()
    if link is None:
        return False
    outcome = session_outcome(child=child, turn=turn, reason=reason, stop=stop)
    with transaction.atomic():
        link = SubagentLink.objects.select_for_update().select_related("thread").get(pk=link.pk)
        if link.outcome is not None and link.outcome["turn_id"] == outcome.turn_id:
            return False  # a waiter that found the turn ended recorded it already
        _record(link, outcome)
        if link.awaited_turn == turn.pk:
            return False  # the blocking call takes it (and logs it on the parent)
        logs.log_create(
            thread=link.thread, kind="subagent",
            data={"event": "return" if outcome.ok else "failure", "reference": str(child.pk),
                  "turn_id": outcome.turn_id},
        )  # fmt: skip
        outcome_deliver(link=link, outcome=outcome, child=child)
    return not link.resumable


def _record(link: SubagentLink, outcome: SessionOutcome) -> None:
    link.outcome = outcome.as_json()
    link.updated_at = now_us()
    SubagentLink.objects.filter(pk=link.pk).update(outcome=link.outcome, updated_at=link.updated_at)
    kind = "subagent.completed" if outcome.ok else "subagent.failed"
    status = outcome.status or ("idle" if outcome.ok else "failed")
    publish(link.thread, kind, {"subagent_id": str(link.child_id), "status": status,
                                "turn_id": outcome.turn_id})  # fmt: skip
    if link.terminated_at is None:
        _status(link, status)


def delivery_text(link: SubagentLink, outcome: SessionOutcome, paths: Sequence[str]) -> str:
    """The silent message a parent gets for a child's session (DIGEST §6.3)."""
    verb = "has returned the following result" if outcome.ok else "has reported a failure"
    text = f"Subagent (reference: {link.child_id}) {verb}:\n\n{outcome.text}"
    return text + "".join(f"\nAttachment path: {path}" for path in paths)


def outcome_deliver(*, link: SubagentLink, outcome: SessionOutcome, child: Thread) -> None:
    """Queue ``outcome`` to the parent as a silent message (a turn), its attachments copied
    in; nothing when the relationship is ``explicit`` or the session said not to notify."""
    if link.parent_communication == "explicit" or not outcome.notify:
        return
    parent = link.thread
    try:
        with transaction.atomic():
            copied = attachments_copy(source=child, target=parent, refs=outcome.attachments)
            message_queue(
                thread=parent, role=owner_role(link.owner),
                content=delivery_text(link, outcome, [ref["path"] for ref in copied]),
                attachments=copied, silent=True, source=TurnSource.SUBAGENT,
                metadata={"subagent_id": str(child.pk), "status_kind": "subagent_event",
                          "subagent_event": "parent_handoff",
                          "handoff_kind": "result" if outcome.ok else "failure",
                          "parent_thread_id": str(parent.pk)},
            )  # fmt: skip
    except (Conflict, NotFound) as error:  # the parent was terminated or deleted meanwhile
        logger.info("subagent %s: the outcome was not delivered: %s", child.pk, error)
    except DomainError as error:  # e.g. an attachment over a cap: the text still arrives
        logger.warning("subagent %s: delivering without attachments: %s", child.pk, error)
        outcome_deliver(
            link=link, child=child,
            outcome=SessionOutcome(outcome.turn_id, outcome.ok, outcome.text,
                                   notify=outcome.notify),
        )  # fmt: skip


def receiver_role(receives_messages: str) -> str:
    """Parent-to-child messages enter as ``user`` (side A acts) unless the relationship says
    ``receives_messages: side_b`` (``assistant``: side B acts)."""
    return "assistant" if receives_messages == "side_b" else "user"


def owner_role(owner: str) -> str:
    """Child-to-parent traffic lands on the owning side's perspective: side A acts on a
    ``user`` message, side B on an ``assistant`` one."""
    return "assistant" if owner == "b" else "user"


# Blocking calls ----------------------------------------------------------------------------


def outcome_take(
    *, link_id: uuid.UUID, turn_id: uuid.UUID, release: bool = False
) -> SessionOutcome | None:
    """For a blocking call awaiting ``turn_id``: the session's outcome once it ended (the
    wait is then over), else None. A turn that ended without a flow (cancelled while
    queued) gets its outcome computed here. ``release``: when it has not ended, stop
    waiting; its end is then delivered to the parent as a message. One row lock decides
    between the waiter and the session's end, so the outcome goes out exactly once."""
    with transaction.atomic():
        link = SubagentLink.objects.select_for_update().select_related("thread").get(pk=link_id)
        if link.outcome is not None and link.outcome["turn_id"] == str(turn_id):
            found = SessionOutcome.from_json(link.outcome)
        else:
            turn = Turn.objects.filter(pk=turn_id).first()
            if turn is not None and turn.status not in TURN_TERMINAL:
                if release and link.awaited_turn == turn_id:
                    SubagentLink.objects.filter(pk=link.pk).update(awaited_turn=None)
                return None
            if turn is None:
                found = SessionOutcome(str(turn_id), False, "The subagent's session was removed.")
            else:
                child = Thread.objects.select_related("tenant").get(pk=link.child_id)
                found = session_outcome(child=child, turn=turn, reason=turn.outcome or "cancelled")
            _record(link, found)
        if link.awaited_turn == turn_id:
            SubagentLink.objects.filter(pk=link.pk).update(awaited_turn=None)
    return found


def awaits_release(*, parent: Thread) -> list[Thread]:
    """After ``parent``'s worker died mid-call: every session its blocking calls awaited is
    delivered as a message (now when it already ended, else when it ends). Returns the
    non-resumable children whose outcome went out now, for the caller to close."""
    waits = SubagentLink.objects.filter(thread_id=parent.pk, awaited_turn__isnull=False)
    closing: list[Thread] = []
    for link_id, turn_id in waits.values_list("id", "awaited_turn"):
        assert turn_id is not None
        found = outcome_take(link_id=link_id, turn_id=turn_id, release=True)
        if found is None:
            continue
        link = SubagentLink.objects.select_related("thread", "child__tenant").get(pk=link_id)
        outcome_deliver(link=link, outcome=found, child=link.child)
        if not link.resumable:
            closing.append(link.child)
    return closing

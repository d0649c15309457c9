"""What the MCP tools do, as short synchronous steps over the thread services (the same
the REST routes use): submit a message to an agent (``POST …/turns``, with a new thread
as ``POST /threads`` opens one), read how its turn stands (``GET /turns/{id}/wait``), read a
thread's messages and answer an action (respond_action).

Every step acts for the caller's tenant: the caller enters :func:`tenant_scope` of the
principal's tenant around it. Another tenant's thread, turn or action is a NotFound, as
one that does not exist.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any

from django.db import transaction

from agents.models import Agent
from common.audit import AuditAction
from common.errors import NotFound
from interop.mcp_server.tools import AgentCall, AgentRow, AnswerAction, ReadThreadMessages
from interop.turns import agent_thread, agent_thread_open, protocol_turn_submit
from tenancy.auditing import audit_by
from tenancy.models import Tenant
from tenancy.principals import Principal
from threads.models import (
    TURN_PAUSED,
    TURN_TERMINAL,
    Action,
    RunStatus,
    Thread,
    Turn,
)
from threads.services.actions import (
    ActionResolved,
    action_json,
    action_respond,
    turn_pending_actions,
)
from threads.services.idempotency import idempotent_call, request_hash
from threads.services.message_shapes import message_answer
from threads.services.messages import message_list
from threads.services.threads import thread_get
from threads.services.turns import (
    turn_events_start,
    turn_get,
    turn_messages,
    turn_reread,
    turn_status,
)

# A turn in one of these is what an agent call answers with: over, or resting on a
# person's decision (as ``GET /turns/{id}/wait`` answers).
ANSWERED = TURN_TERMINAL | TURN_PAUSED
# Over, but not as the agent defines success: the tool's result is an error.
UNSUCCESSFUL = TURN_TERMINAL - {RunStatus.COMPLETED}


def agent_rows(*, tenant: Tenant) -> list[AgentRow]:
    """The tenant's agents, by name."""
    rows = Agent.objects.for_tenant(tenant).order_by("name")
    return [
        AgentRow(name=name, description=description, tool_description=tool_description)
        for name, description, tool_description in rows.values_list(
            "name", "description", "tool_description"
        )
    ]


@dataclass(frozen=True)
class Submitted:
    """A submitted agent call: its turn (its thread attached), and the event sequence after
    which the turn's events come."""

    turn: Turn
    after: int


def agent_call_submit(*, principal: Principal, agent: str, call: AgentCall) -> Submitted:
    """submit_turn for an agent's tool: ``call.message`` as a user turn (``enqueue``) on the
    given thread of ``agent``, or on a new one. Budgets and the turns-per-minute quota admit
    it first (:func:`work_admit`, as ``POST …/turns`` does); with ``call.idempotency_key``,
    a repeat submits nothing and names the first call's turn (IdempotencyKeyReused when the
    key was used for other arguments).

    Raises NotFound for a thread that is not one of ``agent``'s threads in the tenant."""
    tenant = principal.tenant
    given = None
    if call.thread_id is not None:
        given = agent_thread(tenant=tenant, agent=agent, thread_id=str(call.thread_id))

    def produce() -> tuple[int, dict[str, Any]]:
        with transaction.atomic():
            thread = given or agent_thread_open(tenant=tenant, agent=agent)
            turn = protocol_turn_submit(
                principal=principal, thread=thread, text=call.message, protocol="mcp"
            )
        return 202, {"thread_id": str(thread.pk), "turn_id": str(turn.pk)}

    if call.idempotency_key is None:
        answer = produce()[1]
    else:
        body = {"message": call.message, "thread_id": str(call.thread_id or "")}
        digest = request_hash(method="MCP", path=f"/mcp/tools/{agent}", body=body)
        answer = dict(
            idempotent_call(
                tenant=tenant, key=call.idempotency_key, digest=digest, produce=produce
            ).body
        )
    turn = turn_get(tenant=tenant, turn_id=answer["turn_id"])
    return Submitted(turn=turn, after=turn_events_start(turn))


def turn_answered(*, turn: Turn) -> bool:
    """Whether the turn is over or rests on a person's decision (or is gone): the cheapest
    look."""
    status = turn_status(turn=turn)
    return status is None or status in ANSWERED


@dataclass
class Outcome:
    """How an agent call's turn stands: what the tool answers."""

    turn: Turn
    answer: str | None
    actions: list[dict[str, Any]] = field(default_factory=list)

    @property
    def done(self) -> bool:
        return self.turn.status in TURN_TERMINAL

    @property
    def failed(self) -> bool:
        return self.turn.status in UNSUCCESSFUL

    def structured(self) -> dict[str, Any]:
        """The result's structured content."""
        body: dict[str, Any] = {
            "thread_id": str(self.turn.thread_id),
            "turn_id": str(self.turn.pk),
            "status": self.turn.status,
            "done": self.done,
            "answer": self.answer,
        }
        if self.turn.outcome:
            body["outcome"] = self.turn.outcome
        if self.turn.error:
            body["error"] = self.turn.error
        if self.actions:
            body["actions"] = self.actions
        return body


def turn_outcome(*, turn: Turn) -> Outcome:
    """The turn as stored now: its status, the text of the last answer it wrote, and while
    it rests on a person's decision, what they are asked."""
    current = turn_reread(turn=turn) or turn
    written = turn_messages(turn=current)
    answers = [m["content"] for m in written if m["role"] == "assistant" and m["content"]]
    actions = turn_pending_actions(turn=current) if current.status in TURN_PAUSED else []
    return Outcome(turn=current, answer=answers[-1] if answers else None, actions=actions)


def thread_messages_read(*, tenant: Tenant, read: ReadThreadMessages) -> dict[str, Any]:
    """The thread's newest ``read.limit`` messages, oldest first (as ``GET …/messages``
    shows each), and whether older ones exist."""
    thread = thread_get(tenant=tenant, thread_id=read.thread_id)
    page = message_list(thread=thread, limit=read.limit, order="desc")
    messages = [message_answer(message) for message in reversed(page.messages)]
    return {"thread_id": str(thread.pk), "messages": messages, "has_more": page.has_more}


def action_answer(*, principal: Principal, answer: AnswerAction) -> dict[str, Any]:
    """respond_action, as ``POST …/actions/{action_id}`` answers it: the action once
    resolved, audited as answered. Raises NotFound (no such action, or not on the given
    thread), ValidationFailed naming the field of a bad answer, ActionResolved when it was
    answered, expired or cancelled already."""
    tenant = principal.tenant
    thread = _action_thread(tenant=tenant, answer=answer)
    late: ActionResolved | None = None
    body = answer.body()
    with transaction.atomic():
        try:
            answered = action_respond(
                thread=thread, action_id=answer.action_id, body=body,
                responder=_responder(principal),
            )  # fmt: skip
        except ActionResolved as refused:  # an expiry it committed must stay committed
            late = refused
        else:
            details = {"thread_id": str(answered.thread_id), "decision": body["decision"]}
            audit_by(principal, AuditAction.ACTION_ANSWERED, "action", answered.pk, details)
    if late is not None:
        raise late
    return action_json(answered)


def _action_thread(*, tenant: Tenant, answer: AnswerAction) -> Thread:
    thread_id = answer.thread_id
    if thread_id is None:
        rows = Action.objects.for_tenant(tenant).filter(pk=answer.action_id)
        thread_id = rows.values_list("thread_id", flat=True).first()
        if thread_id is None:
            raise NotFound("no such action")
    return thread_get(tenant=tenant, thread_id=thread_id)


def _responder(principal: Principal) -> str:
    if principal.api_key is not None:
        return f"api_key:{principal.api_key.prefix}"
    return f"user:{principal.user.get_username()}" if principal.user is not None else ""

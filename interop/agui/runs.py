"""What an AG-UI run does to our threads, through the same services as the REST API: find
or open the thread the run's ``threadId`` names, then submit a turn (a new user input) or
answer what a paused turn waits for (a frontend tool's result, an interrupt's answer).

Which thread: ``threadId`` is either one of the tenant's threads of this agent (its id), or
the frontend's own conversation id, which we keep on the thread we open for it
(``metadata.agui_thread_id``) and find again on its next run. An id naming no thread of the
tenant (another tenant's included) opens a new thread of the caller's tenant: nothing of
another tenant is read, touched or revealed.
"""

from __future__ import annotations

import uuid
from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any

from django.db import transaction
from django.db.models import Max

from common.audit import AuditAction
from common.errors import Conflict, NotFound, ValidationFailed
from interop.agui.inputs import ResumeAnswer, RunRequest, ToolAnswer
from interop.turns import agent_thread_open, protocol_turn_submit
from tenancy.auditing import audit_by
from tenancy.models import Tenant
from tenancy.principals import Principal
from threads.models import Action, ActionKind, ActionStatus, Event, Thread, Turn
from threads.runtime.client_tools import (
    RESULT_SCHEMA,
    client_tool_answer,
    client_tools_json,
)
from threads.services.actions import action_respond

THREAD_KEY = "agui_thread_id"  # the frontend's conversation id, on the thread opened for it
RUN_KEY = "agui"  # the turn's metadata: the run it serves


@dataclass(frozen=True)
class RunTarget:
    """What a run's stream follows: ``turn``'s events on ``thread`` after sequence
    ``after``; ``answered`` are the tool calls whose results the frontend sent (their
    results are its own: the stream does not send them back)."""

    thread: Thread
    turn: Turn
    after: int
    answered: frozenset[str] = frozenset()


def agui_thread_find(*, tenant: Tenant, agent: str, thread_id: str) -> Thread | None:
    """The tenant's thread of ``agent`` that ``thread_id`` names: its own id, or the
    frontend's id kept on it; None when there is none. Another tenant's thread is never
    found (each read is scoped to ``tenant``)."""
    rows = Thread.objects.for_tenant(tenant).filter(parent__isnull=True)
    try:
        own = uuid.UUID(thread_id)
    except ValueError:
        own = None
    if own is not None:
        found = rows.filter(pk=own).first()
        if found is not None:
            if agent not in (found.agent_name, found.origin_agent_name):
                raise ValidationFailed(
                    f"threadId: thread {thread_id} runs agent {found.agent_name!r}, not {agent!r}",
                    field="threadId",
                )
            return found
    return (
        rows.filter(origin_agent_name=agent, metadata__agui_thread_id=thread_id)
        .order_by("created_at")
        .first()
    )


def agui_thread_for(*, tenant: Tenant, agent: str, thread_id: str) -> Thread:
    """:func:`agui_thread_find`, or a new thread of ``agent`` that keeps ``thread_id``, as
    ``POST /threads`` opens one with no ``env`` (:func:`interop.turns.agent_thread_open`)."""
    found = agui_thread_find(tenant=tenant, agent=agent, thread_id=thread_id)
    if found is not None:
        return found
    return agent_thread_open(tenant=tenant, agent=agent, metadata={THREAD_KEY: thread_id})


def newest_sequence(*, thread: Thread) -> int:
    """The sequence of the thread's newest event (0: none): a run's stream starts after it."""
    newest = Event.objects.filter(thread_id=thread.pk).aggregate(newest=Max("sequence"))
    return int(newest["newest"] or 0)


def agui_turn_submit(*, principal: Principal, thread: Thread, run: RunRequest) -> Turn:
    """submit_turn for the run's user input, as ``POST …/turns`` submits one (budgets and
    quotas admit it first; it waits behind a running turn). The turn's metadata names the
    run; its input carries the frontend's tools (:mod:`threads.runtime.client_tools`)."""
    assert run.text is not None
    tools = client_tools_json(
        [tool.model_dump(include={"name", "description", "parameters"}) for tool in run.tools]
    )
    return protocol_turn_submit(
        principal=principal, thread=thread, text=run.text, protocol="agui",
        turn_metadata={RUN_KEY: {"run_id": run.run_id, "thread_id": run.thread_id}},
        client_tools=tools,
    )  # fmt: skip


def agui_turn_resume(*, principal: Principal, thread: Thread, run: RunRequest) -> RunTarget:
    """Answer what the thread's paused turn waits for: each frontend tool result answers
    the pending action of its call, each ``resume`` entry the action it names (an
    interrupt's id is the action's). The turn resumes on a worker; its stream starts before
    the first answer. Raises ValidationFailed naming the entry no pending action matches,
    and what ``action_respond`` raises (its field names prefixed with the entry's)."""
    after = newest_sequence(thread=thread)
    pending = list(Action.objects.filter(thread_id=thread.pk, status=ActionStatus.PENDING))
    # A frontend tool's call waits on an input action asking for its result.
    by_call = {
        a.tool_call_id: a
        for a in pending
        if a.kind == ActionKind.INPUT and a.schema == RESULT_SCHEMA
    }
    by_id = {str(a.pk): a for a in pending}
    answers: list[tuple[Action, dict[str, Any], str]] = []
    frontend: list[str] = []  # the frontend tool calls answered
    for answer in run.tool_answers:
        action = by_call.get(answer.tool_call_id)
        if action is None:
            continue  # a result the frontend sent before (its history)
        answers.append((action, _tool_body(answer), answer.field))
        frontend.append(answer.tool_call_id)
    for entry in run.resume:
        action = by_id.get(entry.interrupt_id)
        if action is None:
            raise ValidationFailed(
                f"{entry.field}.interruptId: no pending interrupt {entry.interrupt_id!r} on "
                "this thread",
                field=f"{entry.field}.interruptId",
            )
        answers.append((action, _resume_body(action, entry), f"{entry.field}.payload"))
    if not answers:
        field = run.tool_answers[-1].field if run.tool_answers else "resume"
        raise Conflict(
            f"{field}: no frontend tool call of this thread waits for this result",
            field=f"{field}.toolCallId" if run.tool_answers else field,
        )
    with transaction.atomic():
        for action, body, field in answers:
            try:
                answered = action_respond(
                    thread=thread, action_id=action.pk, body=body,
                    responder=_responder(principal),
                )  # fmt: skip
            except ValidationFailed as error:
                inner = f"{field}.{error.field}" if error.field else field
                raise ValidationFailed(f"{inner}: {error.message}", field=inner) from None
            audit_by(
                principal, AuditAction.ACTION_ANSWERED, "action", answered.pk,
                {"thread_id": str(thread.pk), "decision": body["decision"]},
            )  # fmt: skip
    turn = Turn.objects.get(pk=answers[0][0].turn_id, thread=thread)
    return RunTarget(thread, turn, after, frozenset(frontend))


def _tool_body(answer: ToolAnswer) -> dict[str, Any]:
    return {"decision": "answer", "data": client_tool_answer(answer.content, answer.error)}


def _resume_body(action: Action, entry: ResumeAnswer) -> dict[str, Any]:
    """respond_action's body for an interrupt's answer: ``cancelled`` denies; a payload
    that is respond_action's body (it has ``decision``) is taken as it is; otherwise an
    approval is approved and an input request answered with the payload as its data."""
    payload = entry.payload
    if entry.status == "cancelled":
        return {"decision": "deny"}
    if isinstance(payload, Mapping) and "decision" in payload:
        return dict(payload)
    if action.kind == ActionKind.APPROVAL:
        return {"decision": "approve"}
    return {"decision": "answer", "data": payload if payload is not None else {}}


def _responder(principal: Principal) -> str:
    if principal.api_key is not None:
        return f"api_key:{principal.api_key.prefix}"
    return f"user:{principal.user.get_username()}" if principal.user is not None else ""


def turn_of_thread(*, thread: Thread, turn_id: str) -> Turn:
    """A turn of ``thread`` (an idempotent repeat names the one it submitted)."""
    turn = Turn.objects.filter(thread_id=thread.pk, pk=turn_id).first()
    if turn is None:
        raise NotFound(f"no turn {turn_id}")
    return turn

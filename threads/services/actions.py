"""Actions: a person's decisions a turn rests on (agent-runtime-events: "Human actions pause
execution and resume only through ``respond_action``").

An ``ask`` permission rule before a tool call, or ``state.request_input`` in a tool, opens an
action; the flow's turn then rests in ``waiting_permission`` or ``waiting_input`` and no
worker holds it (the turn's other work waits behind it). ``respond_action`` answers it:
``approve``, ``deny`` (with a reason the model reads) or ``edit`` (new arguments, checked
against the tool's parameters) for an approval; ``answer`` (data checked against the
requested schema) or ``deny`` for an input. The answer puts the turn back in the queue and
any worker resumes it where it paused. An action nobody answers by ``expires_at`` resolves
as its rule says (``deny`` by default: the turn then ends ``timed_out``); a stop, cancel or
terminate of its turn cancels it. Each change is an event (``action.required``,
``action.resolved``, and for approvals ``permission.requested``/``permission.resolved``).
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

from django.conf import settings
from django.db import transaction
from django.db.models import QuerySet

from agents.registry import ToolResult
from agents.schemas import ArgumentsInvalid, validate_args
from common.duties import duty_wake_on_commit
from common.errors import Conflict, DomainError, NotFound, ValidationFailed
from common.payloads import object_body
from common.tenant_wall import tenant_scope
from common.time import now_us
from threads.events import Outbox, publish
from threads.models import Action, ActionKind, ActionStatus, Message, Thread, Turn
from threads.services.fence import fence_check
from threads.services.status import turn_release
from threads.services.wakeups import wake_on_commit

# What respond_action may answer, by kind.
DECISIONS = {
    ActionKind.APPROVAL: ("approve", "deny", "edit"),
    ActionKind.INPUT: ("answer", "deny"),
}
# The status each decision leaves the action in.
_RESOLVED = {
    "approve": ActionStatus.APPROVED,
    "deny": ActionStatus.DENIED,
    "edit": ActionStatus.EDITED,
    "answer": ActionStatus.ANSWERED,
}
# Every decision respond_action knows.
ANSWERS = tuple(_RESOLVED)
MAX_REASON = 2000
EXPIRE_BATCH = 500

# Beat's expiry of actions: every new action opens it again (common.duties).
EXPIRE_TASK = "threads.expire_actions"


class ActionResolved(Conflict):
    """respond_action on an action that is no longer pending."""

    code = "action_resolved"


def action_json(action: Action) -> dict[str, Any]:
    """An action as ``GET /threads/{id}/actions/{action_id}`` shows it."""
    return {
        "id": str(action.pk),
        "thread_id": str(action.thread_id),
        "turn_id": str(action.turn_id),
        "kind": action.kind,
        "status": action.status,
        "tool_call_id": action.tool_call_id,
        "name": action.tool_name,
        "arguments": action.arguments,
        "decisions": list(action.decisions),
        "rule": action.rule,
        "prompt": action.prompt or None,
        "schema": action.schema,
        "on_expiry": action.on_expiry,
        "response": action.response,
        "responder": action.responder or None,
        "created_at": action.created_at,
        "expires_at": action.expires_at,
        "resolved_at": action.resolved_at,
        "endpoint": f"/api/v1/threads/{action.thread_id}/actions/{action.pk}",
    }


def _event(action: Action) -> dict[str, Any]:
    """The payload of ``action.required`` and ``action.resolved``."""
    return {
        "action_id": str(action.pk), "turn_id": str(action.turn_id), "kind": action.kind,
        "tool_call_id": action.tool_call_id, "name": action.tool_name, "status": action.status,
        "action": action_json(action),
    }  # fmt: skip


def action_open(
    *,
    thread: Thread,
    turn: Turn,
    kind: str,
    issuer: Message,
    tool_call_id: str,
    tool_name: str,
    arguments: Mapping[str, Any],
    schema: Mapping[str, Any] | None,
    rule: Mapping[str, Any] | None = None,
    prompt: str = "",
    expires_in: int | None = None,
    on_expiry: str = "deny",
    resume: Mapping[str, Any] | None = None,
    outbox: Outbox | None = None,
) -> Action:
    """Store a pending action with its ``action.required`` (and, for an approval,
    ``permission.requested``) event; joins the caller's transaction, in which the flow
    pauses its turn (``threads.services.status.turn_pause``)."""
    ttl_s = expires_in if expires_in is not None else settings.ACTION_TTL_S
    action = Action.objects.create(
        tenant_id=thread.tenant_id, thread=thread, turn=turn, kind=kind, issuer=issuer,
        tool_call_id=tool_call_id, tool_name=tool_name, arguments=dict(arguments),
        decisions=list(DECISIONS[ActionKind(kind)]), rule=dict(rule) if rule else None,
        prompt=prompt, schema=dict(schema) if schema is not None else None,
        on_expiry=on_expiry, resume=dict(resume or {}),
        expires_at=now_us() + ttl_s * 1_000_000,
    )  # fmt: skip
    duty_wake_on_commit(EXPIRE_TASK)
    if kind == ActionKind.APPROVAL:
        publish(
            thread, "permission.requested",
            {"action_id": str(action.pk), "turn_id": str(turn.pk), "tool_call_id": tool_call_id,
             "name": tool_name, "rule": action.rule},
            outbox=outbox,
        )  # fmt: skip
    publish(thread, "action.required", _event(action), outbox=outbox)
    return action


def action_allows(action: Action) -> bool:
    """Whether a resolved approval lets its call run: approved, edited, or expired under a
    rule that allows on expiry."""
    return action.status in (ActionStatus.APPROVED, ActionStatus.EDITED) or (
        action.status == ActionStatus.EXPIRED and action.on_expiry == "allow"
    )


def denial_result(action: Action) -> ToolResult:
    """The result a call a person denied gets: what the model reads, with their reason."""
    reason = (action.response or {}).get("reason")
    return ToolResult.failure(
        "Permission denied by a person" + (f": {reason}" if reason else ""),
        code="permission_denied",
    )


class InputDeclined(DomainError):
    """``state.request_input``: the person declined to give the input."""

    code = "input_declined"


def input_answers(*, turn: Turn, tool_call_id: str) -> list[Action]:
    """The resolved input requests of a tool call of ``turn``, in the order it asked."""
    return list(
        Action.objects.filter(turn_id=turn.pk, tool_call_id=tool_call_id, kind=ActionKind.INPUT)
        .exclude(status=ActionStatus.PENDING)
        .order_by("created_at", "id")
    )


def answer_data(action: Action) -> dict[str, Any]:
    """What a resolved input request gives the tool: the person's data; InputDeclined when
    they declined."""
    response = action.response or {}
    if action.status == ActionStatus.ANSWERED:
        return dict(response.get("data") or {})
    reason = response.get("reason")
    raise InputDeclined("the person declined to give the input" + (f": {reason}" if reason else ""))


def actions_of(*, thread: Thread, status: str | None = None) -> QuerySet[Action]:
    """The thread's actions, newest first (``status``: only those in it)."""
    rows = Action.objects.filter(thread_id=thread.pk)
    if status is not None:
        if status not in ActionStatus.values:
            raise ValidationFailed(
                f"status must be one of {', '.join(ActionStatus.values)}", field="status"
            )
        rows = rows.filter(status=status)
    return rows.order_by("-created_at", "-id")


def action_get(*, thread: Thread, action_id: Any) -> Action:
    found = Action.objects.filter(thread_id=thread.pk, pk=action_id).first()
    if found is None:
        raise NotFound("no such action on this thread")
    return found


def pending_actions(*, thread: Thread) -> list[dict[str, Any]]:
    """The thread's open actions, oldest first (its read model's pending requests)."""
    rows = Action.objects.filter(thread_id=thread.pk, status=ActionStatus.PENDING)
    return [action_json(row) for row in rows.order_by("created_at")]


def turn_pending_actions(*, turn: Turn) -> list[dict[str, Any]]:
    """What a paused turn waits for (a wait's answer lists it)."""
    rows = Action.objects.filter(turn_id=turn.pk, status=ActionStatus.PENDING)
    return [action_json(row) for row in rows.order_by("created_at")]


def action_respond(
    *, thread: Thread, action_id: Any, body: Mapping[str, Any], responder: str = ""
) -> Action:
    """respond_action: answer a pending action with ``body`` (``decision`` and, as it needs,
    ``reason``, ``arguments`` or ``data``), then let its turn resume on any worker.

    ValidationFailed (400) names the field of a bad answer; ActionResolved (409) when the
    action was answered, expired or cancelled already; NotFound when there is no such
    action on the thread."""
    decision, response = _answer_of(body)
    answered = False
    with transaction.atomic():
        fence_check(thread=thread, fence=None)  # the thread's row first, as a flow locks it
        action = Action.objects.select_for_update().filter(thread_id=thread.pk, pk=action_id)
        found = action.first()
        if found is None:
            raise NotFound("no such action on this thread")
        if found.status == ActionStatus.PENDING and found.expires_at <= now_us():
            _resolve_expired(thread, found)  # committed: the answer came too late
        elif found.status == ActionStatus.PENDING:
            response = _checked(found, decision, response)
            _resolve(thread, found, _RESOLVED[decision], response, responder, by="person")
            answered = True
    if not answered:
        raise ActionResolved(
            f"action {found.pk} is {found.status}"
            + (f" since {found.resolved_at}" if found.resolved_at else "")
            + "; an action is answered once",
        )
    return found


def _answer_of(body: Mapping[str, Any]) -> tuple[str, dict[str, Any]]:
    object_body(body, ("decision", "reason", "arguments", "data"))
    decision = body.get("decision")
    if not isinstance(decision, str) or decision not in _RESOLVED:
        raise ValidationFailed(f"decision must be one of {', '.join(_RESOLVED)}", field="decision")
    response: dict[str, Any] = {"decision": decision}
    reason = body.get("reason")
    if reason is not None:
        if not isinstance(reason, str) or len(reason) > MAX_REASON:
            raise ValidationFailed(
                f"reason must be a string of at most {MAX_REASON} characters", field="reason"
            )
        response["reason"] = reason
    for name in ("arguments", "data"):
        if name in body:
            response[name] = body[name]
    return str(decision), response


def _checked(action: Action, decision: str, response: dict[str, Any]) -> dict[str, Any]:
    """``response`` once ``decision`` is one the action takes and what it carries is valid."""
    if decision not in action.decisions:
        raise ValidationFailed(
            f"a {action.kind} action takes decision {', '.join(action.decisions)}, not {decision}",
            field="decision",
        )
    needs = {"edit": "arguments", "answer": "data"}.get(decision)
    for name in ("arguments", "data"):
        if name in response and name != needs:
            raise ValidationFailed(f"{name} belongs to decision {_needing(name)}", field=name)
    if needs is None:
        return response
    if needs not in response:
        raise ValidationFailed(f"decision {decision} needs {needs}", field=needs)
    try:
        response[needs] = validate_args(action.schema, response[needs])
    except ArgumentsInvalid as error:
        raise ValidationFailed(
            f"{needs} do not match the {'tool' if needs == 'arguments' else 'requested'} "
            f"schema: {error.message}",
            field=needs,
        ) from None
    return response


def _needing(name: str) -> str:
    return "edit" if name == "arguments" else "answer"


def _resolve(
    thread: Thread, action: Action, status: str, response: dict[str, Any], responder: str,
    *, by: str,
) -> None:  # fmt: skip
    """Record the answer, its events, and put the turn back in the queue (woken on
    commit). Precondition: the thread row and the action row are locked."""
    action.status, action.response = status, response
    action.responder, action.resolved_at = responder[:200], now_us()
    action.save(update_fields=["status", "response", "responder", "resolved_at"])
    if action.kind == ActionKind.APPROVAL:
        allowed = action_allows(action)
        publish(
            thread, "permission.resolved",
            {"action_id": str(action.pk), "turn_id": str(action.turn_id),
             "tool_call_id": action.tool_call_id, "name": action.tool_name,
             "decision": "allow" if allowed else "deny", "by": by},
        )  # fmt: skip
    publish(thread, "action.resolved", _event(action))
    turn = Turn.objects.get(pk=action.turn_id)
    if turn_release(thread=thread, turn=turn):
        wake_on_commit(thread)


def _resolve_expired(thread: Thread, action: Action) -> None:
    _resolve(thread, action, ActionStatus.EXPIRED, {"decision": action.on_expiry}, "", by="expiry")


def actions_expire() -> int:
    """Beat: resolve the pending actions whose time ran out, as their rule says (their turn
    resumes: denied, it ends ``timed_out``). Returns how many."""
    due = list(
        Action.objects.filter(status=ActionStatus.PENDING, expires_at__lte=now_us())
        .select_related("thread__tenant")
        .order_by("expires_at")[:EXPIRE_BATCH]
    )
    expired = 0
    for candidate in due:
        thread = candidate.thread
        with transaction.atomic(), tenant_scope(thread.tenant_id):  # each in its tenant
            fence_check(thread=thread, fence=None)
            action = Action.objects.select_for_update().filter(pk=candidate.pk).first()
            if action is not None and action.status == ActionStatus.PENDING:
                _resolve_expired(thread, action)
                expired += 1
    return expired

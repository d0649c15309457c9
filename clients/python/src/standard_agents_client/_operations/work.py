"""What a thread's turns wait on or leave for later: actions a person answers, scheduled
effects, and subagents with their variable requests."""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

from standard_agents_client._call import (
    Call,
    body,
    idempotency,
    query,
    read_json,
    read_page,
    segment,
)
from standard_agents_client.pagination import Page
from standard_agents_client.types import (
    Action,
    Child,
    Decision,
    Effect,
    EffectRun,
    VariableRequest,
    VariablesProvided,
)

# Actions --------------------------------------------------------------------------------------


def action_list(
    thread_id: str,
    *,
    status: str | None = None,
    limit: int | None = None,
    cursor: str | None = None,
) -> Call[Page[Action]]:
    """The thread's actions, newest first; ``status="pending"`` for what waits for a
    person."""
    params = query(status=status, limit=limit, cursor=cursor)
    return Call("GET", f"/threads/{segment(thread_id)}/actions", read_page, params)


def action_get(thread_id: str, action_id: str) -> Call[Action]:
    """One action of the thread."""
    return Call("GET", f"/threads/{segment(thread_id)}/actions/{segment(action_id)}", read_json)


def action_respond(
    thread_id: str,
    action_id: str,
    decision: Decision,
    *,
    reason: str | None = None,
    arguments: Mapping[str, Any] | None = None,
    data: Mapping[str, Any] | None = None,
) -> Call[Action]:
    """Answer an action: ``approve``, ``deny`` (with a ``reason`` the model reads) or
    ``edit`` (the call runs with ``arguments``) an approval; ``answer`` (with ``data``) or
    ``deny`` an input request. ``Conflict`` when it was resolved already."""
    payload = body(decision=decision, reason=reason, arguments=arguments, data=data)
    path = f"/threads/{segment(thread_id)}/actions/{segment(action_id)}"
    return Call("POST", path, read_json, json=payload)


# Effects --------------------------------------------------------------------------------------


def effect_list(
    thread_id: str,
    *,
    status: str | None = None,
    name: str | None = None,
    limit: int | None = None,
    cursor: str | None = None,
) -> Call[Page[Effect]]:
    """The thread's scheduled effects, soonest first; ``status`` and ``name`` filter."""
    params = query(status=status, name=name, limit=limit, cursor=cursor)
    return Call("GET", f"/threads/{segment(thread_id)}/effects", read_page, params)


def _effect(thread_id: str, effect_id: str) -> str:
    return f"/threads/{segment(thread_id)}/effects/{segment(effect_id)}"


def effect_get(thread_id: str, effect_id: str) -> Call[Effect]:
    """One effect of the thread."""
    return Call("GET", _effect(thread_id, effect_id), read_json)


def effect_cancel(thread_id: str, effect_id: str) -> Call[Effect]:
    """Cancel a pending effect (``Conflict`` when it is not pending)."""
    return Call("DELETE", _effect(thread_id, effect_id), read_json)


def effect_run(
    thread_id: str, effect_id: str, *, idempotency_key: str | None = None
) -> Call[EffectRun]:
    """Run an effect now: a pending one is due at once, a finished one is replayed (once
    per ``idempotency_key``)."""
    path = _effect(thread_id, effect_id) + "/run"
    return Call("POST", path, read_json, headers=idempotency(idempotency_key))


def effect_replay(
    thread_id: str, effect_id: str, *, idempotency_key: str | None = None
) -> Call[Effect]:
    """Replay a finished effect: a new effect, due now, linked to it (once per
    ``idempotency_key``)."""
    path = _effect(thread_id, effect_id) + "/replay"
    return Call("POST", path, read_json, headers=idempotency(idempotency_key))


# Subagents ------------------------------------------------------------------------------------


def child_list(
    thread_id: str, *, limit: int | None = None, cursor: str | None = None
) -> Call[Page[Child]]:
    """The thread's subagents, oldest first, each with its child thread's status."""
    params = query(limit=limit, cursor=cursor)
    return Call("GET", f"/threads/{segment(thread_id)}/children", read_page, params)


def variable_request_get(thread_id: str, request_id: str) -> Call[VariableRequest]:
    """A variable-bootstrap request: what a deferred subagent requires, what is missing."""
    path = f"/threads/{segment(thread_id)}/variables/{segment(request_id)}"
    return Call("GET", path, read_json)


def variable_request_complete(
    thread_id: str, request_id: str, env: Mapping[str, str]
) -> Call[VariablesProvided]:
    """Provide the missing variables: the child starts at once (``Conflict`` when the
    request was completed already, ``Gone`` once it expired)."""
    path = f"/threads/{segment(thread_id)}/variables/{segment(request_id)}"
    return Call("POST", path, read_json, json={"env": dict(env)})

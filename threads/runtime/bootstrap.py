"""The variable-bootstrap flow (spec runtime §7.5, DIGEST §11): a spawn deferred because the
child's required scoped variables were missing is completed by a person who provides them;
the child is then created with those values (encrypted in its env) and starts at once."""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

from django.db import transaction

from agents.documents import ToolConfig
from agents.registry import ToolResult
from common.errors import Conflict, DomainError, NotFound, ValidationFailed
from threads.models import Thread, VariableRequest
from threads.runtime.spawn import (
    SpawnRequest,
    relationship_load,
    spawn_child,
)
from threads.services.env import EnvInput
from threads.services.variable_requests import request_expired, request_values_open


class RequestExpired(DomainError):
    code = "expired"
    status = 410


def variable_request_get(*, thread: Thread, request_id: object) -> VariableRequest:
    """``thread``'s request ``request_id``; NotFound for another thread's or a malformed id."""
    try:
        return VariableRequest.objects.get(pk=str(request_id), thread_id=thread.pk)
    except (VariableRequest.DoesNotExist, ValueError, DomainError) as error:
        raise NotFound(f"no variable request {request_id} on this thread") from error


def variable_request_complete(*, thread: Thread, request_id: object, env: object) -> dict[str, Any]:
    """``POST .../variables/{id}`` with ``{env: {NAME: value}}``: every missing variable must
    be given (ValidationFailed naming ``env.<NAME>`` of each still missing), names outside
    the request are refused; then the deferred child is created and started. Conflict when
    the request was completed already (naming its child), RequestExpired (410) past its
    expiry, Conflict when the spawn is refused now (the parent's limits)."""
    if not isinstance(env, Mapping):
        raise ValidationFailed("env must be an object of variable names to values", field="env")
    with transaction.atomic():
        request = variable_request_get(thread=thread, request_id=request_id)
        request = (
            VariableRequest.objects.select_for_update(of=("self",))
            .select_related("thread__tenant")
            .get(pk=request.pk)
        )
        if request.status == VariableRequest.Status.COMPLETED:
            raise Conflict(
                f"variable request {request.pk} was completed already: its subagent is "
                f"thread {request.child_id}"
            )
        if request_expired(request):
            raise RequestExpired(
                f"variable request {request.pk} expired; the subagent must be created again"
            )
        values = _values(request, env)
        result = _spawn(thread, request, values)
        request.status, request.child = VariableRequest.Status.COMPLETED, result
        request.missing = []
        request.save(update_fields=["status", "child", "missing"])
    return {"request_id": str(request.pk), "child_thread_id": str(result.pk), "status": "success"}


def _values(request: VariableRequest, env: Mapping[object, object]) -> dict[str, EnvInput]:
    allowed = set(request.required)
    values: dict[str, EnvInput] = {}
    for name, value in env.items():
        shown = str(name)[:100]
        if name not in allowed:
            raise ValidationFailed(
                f"{shown} is not a variable this request asks for ({', '.join(request.required)})",
                field=f"env.{shown}",
            )
        if not isinstance(value, str) or not value.strip():
            raise ValidationFailed(f"{name} must be a non-empty string", field=f"env.{name}")
        values[str(name)] = EnvInput(value)
    still = [name for name in request.missing if name not in values]
    if still:
        raise ValidationFailed(
            f"still missing: {', '.join(still)}",
            field=f"env.{still[0]}",
        )
    return values


def _spawn(thread: Thread, request: VariableRequest, values: dict[str, EnvInput]) -> Thread:
    spawn = request.spawn
    config = ToolConfig.model_validate(spawn["config"]) if spawn.get("config") else None
    relationship = relationship_load(
        tenant=thread.tenant, agent_name=request.agent_name, config=config,
        owner=spawn.get("owner", "a"),
    )  # fmt: skip
    if relationship is None:
        raise Conflict(f"agent {request.agent_name!r} no longer exists as a dual_ai agent")
    request_spawn = SpawnRequest(
        message=spawn["message"], attachments=list(spawn.get("attachments") or []),
        label=spawn.get("label") or "", arguments=spawn.get("arguments"),
        scoped_env={**request_values_open(request), **values},
        description=spawn.get("description") or "",
        spawn_group_id=spawn.get("spawn_group_id") or "",
    )  # fmt: skip
    try:
        spawned = spawn_child(parent=thread, relationship=relationship, request=request_spawn)
    except NotFound as error:  # a file the spawn was to copy is gone: not an unknown request
        raise Conflict(f"the subagent could not be started: {error.message}") from error
    if isinstance(spawned, ToolResult):
        raise Conflict(f"the subagent could not be started: {spawned.error}")
    return spawned.child

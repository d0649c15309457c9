"""The variable-bootstrap requests of deferred spawns (spec runtime §7.5, DIGEST §11): what a
child requires and what is missing, names only; the scoped values a spawn did bring are
kept encrypted until the request is completed (``threads.runtime.bootstrap``)."""

from __future__ import annotations

import json
from collections.abc import Mapping
from typing import Any

from django.conf import settings

from common.time import now_us
from tenancy.encryption import secret_decrypt, secret_encrypt
from threads.models import Thread, VariableRequest
from threads.services.env import EnvInput


def variable_request_create(
    *,
    parent: Thread,
    relationship: str,
    agent_name: str,
    required: list[str],
    missing: list[str],
    spawn: Mapping[str, Any],
    values: Mapping[str, EnvInput],
) -> VariableRequest:
    """A pending request on ``parent``, open for ``VARIABLE_REQUEST_TTL_S``; ``spawn`` is
    what to create once completed, ``values`` the scoped values it brought (encrypted)."""
    pending = VariableRequest.objects.create(
        tenant_id=parent.tenant_id, thread=parent, relationship=relationship,
        agent_name=agent_name, required=required, missing=missing, spawn=dict(spawn),
        expires_at=now_us() + settings.VARIABLE_REQUEST_TTL_S * 1_000_000,
    )  # fmt: skip
    if values:
        plain = json.dumps({name: [item.value, item.type] for name, item in values.items()})
        pending.values_encrypted = secret_encrypt(
            tenant=parent.tenant, plaintext=plain.encode(), context=_context(pending)
        )
        pending.save(update_fields=["values_encrypted"])
    return pending


def request_values_open(pending: VariableRequest) -> dict[str, EnvInput]:
    """The scoped values a deferred spawn brought (decrypted), by name."""
    if not pending.values_encrypted:
        return {}
    plain = secret_decrypt(
        tenant=pending.thread.tenant, ciphertext=bytes(pending.values_encrypted),
        context=_context(pending),
    )  # fmt: skip
    return {name: EnvInput(value, kind) for name, (value, kind) in json.loads(plain).items()}


def _context(pending: VariableRequest) -> str:
    return f"threads.VariableRequest:{pending.pk}"


def variable_request_json(request: VariableRequest) -> dict[str, Any]:
    """A variable-bootstrap request as ``GET .../variables/{id}`` and the read model show it:
    what the deferred subagent requires and what is missing (names only, never values)."""
    return {
        "request_id": str(request.pk),
        "kind": "variables",
        "parent_thread_id": str(request.thread_id),
        "agent_name": request.agent_name,
        "registry_agent_name": request.relationship,
        "required": list(request.required),
        "missing": list(request.missing),
        "status": "expired" if request_expired(request) else request.status,
        "child_thread_id": str(request.child_id) if request.child_id else None,
        "endpoint": f"/api/v1/threads/{request.thread_id}/variables/{request.pk}",
        "created_at": request.created_at,
        "expires_at": request.expires_at,
    }


def request_expired(request: VariableRequest) -> bool:
    return request.status == VariableRequest.Status.PENDING and request.expires_at <= now_us()


def pending_variable_requests(*, thread: Thread) -> list[dict[str, Any]]:
    """The thread's open variable-bootstrap requests (for its read model)."""
    rows = VariableRequest.objects.filter(
        thread_id=thread.pk, status=VariableRequest.Status.PENDING, expires_at__gt=now_us()
    ).order_by("created_at")
    return [variable_request_json(row) for row in rows]

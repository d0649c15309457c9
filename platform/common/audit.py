"""The one door to the audit trail (the log lives above every API app, in :mod:`audit`, which
installs its recorder here when its app is ready).

A view or service that changes something security-relevant calls :func:`audit_record` inside
the transaction of the change, so a rolled-back change leaves no entry and a committed one
always has its entry. ``details`` hold names and changed fields, never a secret's value.

Without an installed recorder (the ``audit`` app not loaded) nothing is recorded.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass
from enum import StrEnum
from typing import Any, Literal, Protocol

from django.db.models import Model

ActorKind = Literal["api_key", "user", "system"]


class AuditAction(StrEnum):
    """Every action the audit trail records (docs/audit.md says where each is recorded)."""

    API_KEY_CREATED = "api_key.created"
    API_KEY_REVOKED = "api_key.revoked"
    MEMBERSHIP_CREATED = "membership.created"
    MEMBERSHIP_CHANGED = "membership.changed"
    MEMBERSHIP_DELETED = "membership.deleted"
    DEFINITION_CREATED = "definition.created"
    DEFINITION_UPDATED = "definition.updated"
    DEFINITION_DELETED = "definition.deleted"
    BUNDLE_IMPORTED = "bundle.imported"
    CREDENTIAL_CREATED = "credential.created"
    CREDENTIAL_UPDATED = "credential.updated"
    CREDENTIAL_DELETED = "credential.deleted"
    CONNECTION_CREATED = "connection.created"
    CONNECTION_UPDATED = "connection.updated"
    CONNECTION_DELETED = "connection.deleted"
    ENV_SET = "env.set"
    ENV_DELETED = "env.deleted"
    THREAD_DELETED = "thread.deleted"
    THREAD_TERMINATED = "thread.terminated"
    TURN_SUBMITTED = "turn.submitted"
    ACTION_ANSWERED = "action.answered"
    SCHEDULE_CREATED = "schedule.created"
    SCHEDULE_UPDATED = "schedule.updated"
    SCHEDULE_DELETED = "schedule.deleted"
    SCHEDULE_PAUSED = "schedule.paused"
    SCHEDULE_RESUMED = "schedule.resumed"
    WEBHOOK_CREATED = "webhook.created"
    WEBHOOK_UPDATED = "webhook.updated"
    WEBHOOK_DELETED = "webhook.deleted"
    WEBHOOK_SECRET_ROTATED = "webhook.secret_rotated"  # noqa: S105 - an action's name
    LOGIN_SUCCEEDED = "login.succeeded"
    LOGIN_FAILED = "login.failed"


@dataclass(frozen=True)
class Actor:
    """Who did it: an API key (its id and name), a user (id and username), or the platform."""

    kind: ActorKind
    id: str
    name: str


SYSTEM = Actor(kind="system", id="", name="")


class Recorder(Protocol):
    def __call__(
        self, *, tenant: Model, actor: Actor, action: str, target_type: str, target_id: str,
        details: Mapping[str, Any],
    ) -> None: ...  # fmt: skip


def _nothing(
    *, tenant: Model, actor: Actor, action: str, target_type: str, target_id: str,
    details: Mapping[str, Any],
) -> None:  # fmt: skip
    return None


_recorder: list[Recorder] = [_nothing]


def audit_record(
    *, tenant: Model, actor: Actor, action: str, target_type: str, target_id: object,
    details: Mapping[str, Any] | None = None,
) -> None:  # fmt: skip
    """Record that ``actor`` did ``action`` to ``target_type`` ``target_id`` in ``tenant``.
    Call it inside the change's transaction (the entry commits or rolls back with it)."""
    _recorder[0](
        tenant=tenant, actor=actor, action=action, target_type=target_type,
        target_id=str(target_id), details=dict(details or {}),
    )  # fmt: skip


def audit_recorder_set(recorder: Recorder) -> Recorder:
    """Install ``recorder``; returns the one it replaces (tests put it back)."""
    previous, _recorder[0] = _recorder[0], recorder
    return previous


def changed_fields(
    before: Mapping[str, Any], after: Mapping[str, Any], *, hidden: frozenset[str] = frozenset()
) -> dict[str, dict[str, Any]]:
    """``{field: {"before": ..., "after": ...}}`` for each field whose value differs; a field
    in ``hidden`` shows only that it changed (``"***"``), never its values."""
    diff: dict[str, dict[str, Any]] = {}
    for name in sorted(before.keys() | after.keys()):
        old, new = before.get(name), after.get(name)
        if old == new:
            continue
        if name in hidden:
            diff[name] = {"before": "***", "after": "***"}
        else:
            diff[name] = {"before": old, "after": new}
    return diff

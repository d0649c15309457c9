"""A tenant's own permission rules (:class:`agents.models.PermissionRule`): saved, deleted,
and read by flows from the per-process definitions cache (a change gives the tenant's
definitions a new version, so every process reads the new rules at its next flow)."""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any

from django.db import transaction

from agents.documents import is_snake_case
from agents.models import PermissionRule
from agents.permissions import ConditionInvalid, Rule, decision_of, rule_from
from agents.selectors import definitions_changed
from common.errors import ValidationFailed
from common.payloads import object_body, text_field
from common.time import now, to_us
from tenancy.models import Tenant

FIELDS = ("agent", "tool", "decision", "when", "expires_in", "on_expiry", "description")
MAX_DESCRIPTION = 500
MAX_RULES = 1000  # per tenant: every tool call weighs the ones that cover it


@dataclass(frozen=True)
class TenantRule:
    """A tenant rule as flows weigh it: whom it covers, and the rule."""

    agent: str
    tool: str
    rule: Rule

    def covers(self, *, agent: str, tool: str) -> bool:
        return self.agent in ("", agent) and self.tool in ("", tool)


def permission_rule_json(row: PermissionRule) -> dict[str, Any]:
    return {
        "id": str(row.id), "agent": row.agent, "tool": row.tool, "decision": row.decision,
        "when": row.when, "expires_in": row.expires_in,
        "on_expiry": row.on_expiry or ("deny" if row.decision == "ask" else None),
        "description": row.description,
        "created_at": to_us(row.created_at), "updated_at": to_us(row.updated_at),
    }  # fmt: skip


def permission_rule_save(
    *, tenant: Tenant, data: Mapping[str, Any], current: PermissionRule | None = None
) -> PermissionRule:
    """Create a rule (``current`` None) or replace ``current``'s fields with ``data``.
    ValidationFailed names the field of any problem."""
    fields = _checked(object_body(data, FIELDS))
    with transaction.atomic():
        if current is None:
            if PermissionRule.objects.for_tenant(tenant).count() >= MAX_RULES:
                raise ValidationFailed(f"a tenant has at most {MAX_RULES} permission rules")
            row = PermissionRule.objects.create(tenant=tenant, **fields)
        else:
            for name, value in fields.items():
                setattr(current, name, value)
            current.updated_at = now()
            current.save()
            row = current
        definitions_changed(tenant=tenant)
    return row


def permission_rule_delete(*, tenant: Tenant, row: PermissionRule) -> None:
    with transaction.atomic():
        row.delete()
        definitions_changed(tenant=tenant)


def tenant_rules_load(*, tenant: Tenant) -> tuple[TenantRule, ...]:
    """``tenant``'s rules as read now (flows keep them in the definitions cache)."""
    rows = PermissionRule.objects.for_tenant(tenant)
    return tuple(
        TenantRule(
            row.agent,
            row.tool,
            Rule(
                decision_of(row.decision),
                row.when,
                "tenant",
                str(row.id),
                expires_in=row.expires_in,
                on_expiry=row.on_expiry or "deny",
            ),
        )
        for row in rows
    )


def _checked(data: Mapping[str, Any]) -> dict[str, Any]:
    """The rule's fields from ``data``, each checked."""
    fields: dict[str, Any] = {}
    for name in ("agent", "tool"):
        value = data.get(name, "")
        if value is None:
            value = ""
        if not isinstance(value, str) or (value and not is_snake_case(value)):
            raise ValidationFailed(
                f"{name} must be a snake_case name, or empty for every {name}", field=name
            )
        fields[name] = value
    declared = {key: data.get(key) for key in ("decision", "when", "expires_in", "on_expiry")}
    declared["on_expiry"] = declared["on_expiry"] or None  # stored blank when not ask
    try:
        rule = rule_from(declared, source="tenant")
    except ConditionInvalid as error:
        raise ValidationFailed(error.message, field=error.path or "decision") from None
    description = text_field(data.get("description", ""), "description",
                             max_chars=MAX_DESCRIPTION)  # fmt: skip
    return {
        **fields, "decision": rule.decision, "when": rule.when,
        "expires_in": rule.expires_in if rule.decision == "ask" else None,
        "on_expiry": rule.on_expiry if rule.decision == "ask" else "",
        "description": description,
    }  # fmt: skip

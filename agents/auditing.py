"""The audit entries of definition, bundle and credential writes (docs/audit.md), recorded
alike by the API and the console: call each inside the transaction of its change."""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from typing import Any

from agents.bundles import ImportReport
from agents.models import Definition
from agents.services import document_json, row_document
from agents.validation import KINDS, SINGULAR, DefinitionSet, Kind
from common.audit import AuditAction, changed_fields
from tenancy.auditing import audit_by
from tenancy.principals import Principal


def definition_saved_audit(
    principal: Principal, *, kind: Kind, current: str | None, before: Mapping[str, Any],
    row: Definition, api_key_changed: bool,
) -> None:  # fmt: skip
    """``definition.created`` (``current`` None) or ``definition.updated``: the changed
    fields from ``before`` (the document as it was; empty for a new one), a model's key
    only as changed, and ``renamed_from`` on a rename."""
    changes = changed_fields(before, document_json(row_document(row)))
    if api_key_changed:  # that it changed, never the key
        changes["api_key"] = {"before": "***", "after": "***"}
    details: dict[str, Any] = {"changes": changes}
    if current is not None and current != row.name:
        details["renamed_from"] = current
    action = AuditAction.DEFINITION_UPDATED if current else AuditAction.DEFINITION_CREATED
    audit_by(principal, action, SINGULAR[kind], row.name, details)


def bundle_imported_audit(
    principal: Principal, *, before: DefinitionSet, after: DefinitionSet, report: ImportReport,
    replace: bool,
) -> None:  # fmt: skip
    """``bundle.imported`` when the import changed something (``before`` and ``after`` are
    the tenant's definitions around it): what it created, updated and deleted, and each
    updated definition's changed fields."""
    if not (report.created or report.updated or report.deleted):
        return
    details = {
        "created": report.created, "updated": report.updated, "deleted": report.deleted,
        "replace": replace, "changes": _bundle_changes(before, after, report.updated),
    }  # fmt: skip
    audit_by(principal, AuditAction.BUNDLE_IMPORTED, "bundle", "", details)


def _bundle_changes(
    before: DefinitionSet, after: DefinitionSet, updated: Sequence[str]
) -> dict[str, dict[str, Any]]:
    """Each updated definition's changed fields, by its report label (``model gpt``)."""
    changes: dict[str, dict[str, Any]] = {}
    for kind in KINDS:
        old, new = before.of(kind), after.of(kind)
        for name in new:
            label = f"{SINGULAR[kind]} {name}"
            if label in updated and name in old:
                changes[label] = changed_fields(document_json(old[name]), document_json(new[name]))
    return changes


def credential_audit(principal: Principal, action: AuditAction, name: str, sent: object) -> None:
    """A credential write: its name and the names of the fields sent, never their values."""
    fields = sorted(str(key) for key in sent) if isinstance(sent, Mapping) else []
    audit_by(principal, action, "credential", name, {"fields": fields})

"""Writes for definitions. Every write validates the tenant's whole definition graph.

Writes of one tenant's definitions are serialised by a transaction-scoped
PostgreSQL advisory lock, so two concurrent changes cannot each pass
validation and together leave a broken reference.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from decimal import Decimal
from typing import Any

from django.db import connection, models, transaction
from pydantic import ValidationError

from agents.credentials import credential_choices
from agents.documents import Strict, error_paths
from agents.models import DEFINITION_MODELS, Definition, Model
from agents.remote_refs import RemoteRefs
from agents.validation import (
    KINDS,
    SINGULAR,
    Checkers,
    DefinitionSet,
    Kind,
    Problem,
    RegistryLookup,
    validate_definitions,
)
from common.egress import destination_problem
from common.errors import Conflict, NotFound, ValidationFailed
from common.time import now
from tenancy.encryption import secret_encrypt
from tenancy.models import Tenant

# Marks "leave the stored API key as it is" in definition_save.
KEEP = object()


class DefinitionInvalid(ValidationFailed):
    """A definition (or bundle) breaks the rules; ``details`` lists every problem."""

    code = "invalid_definition"


def parse_document(kind: Kind, data: object, *, prefix: str = "") -> Strict:
    """Validate raw input as a ``kind`` document; errors name each field path."""
    try:
        return DEFINITION_MODELS[kind].DOCUMENT.model_validate(data)
    except ValidationError as error:
        problems = [
            {"path": path, "message": message} for path, message in error_paths(error, prefix)
        ]
        first = problems[0]
        raise DefinitionInvalid(
            f"{first['path']}: {first['message']}" + _more(problems),
            field=first["path"] or None,
            details=problems,
        ) from error


def _more(items: Sequence[object]) -> str:
    return f" (and {len(items) - 1} more)" if len(items) > 1 else ""


# Rows and documents ---------------------------------------------------------


def _column_value(field: models.Field[Any, Any], value: Any) -> Any:
    if isinstance(field, models.JSONField) or value is not None:
        return value
    return "" if isinstance(field, models.CharField | models.TextField) else None


def document_values(doc: Strict) -> dict[str, Any]:
    """Column values for a document (JSON columns get JSON-ready values)."""
    model = next(m for m in DEFINITION_MODELS.values() if isinstance(doc, m.DOCUMENT))
    json_ready = document_json(doc)
    plain = doc.model_dump()
    values = {}
    for name in type(doc).model_fields:
        field = model._meta.get_field(name)
        raw = json_ready[name] if isinstance(field, models.JSONField) else plain[name]
        values[name] = _column_value(field, raw)  # type: ignore[arg-type]
    return values


def row_document(row: Definition) -> Strict:
    """The document a stored row holds."""
    document = row.DOCUMENT
    data: dict[str, Any] = {}
    for name in document.model_fields:
        value = getattr(row, name)
        if value == "" and document.model_fields[name].default is None:
            value = None
        if isinstance(value, Decimal):
            value = Decimal(f"{value.normalize():f}")
        data[name] = value
    return document.model_validate(data)


def document_json(doc: Strict, *, omit_none: bool = False) -> dict[str, Any]:
    """A document as JSON: tool configs keep only set keys; ``omit_none`` drops unset
    optional fields (free-form values such as JSON Schemas keep their nulls)."""
    data = doc.model_dump(mode="json", exclude_none=omit_none)
    tools = getattr(doc, "tools", None)
    if tools is not None:
        data["tools"] = [
            ref if isinstance(ref, str) else ref.model_dump(mode="json", exclude_unset=True)
            for ref in tools
        ]
    return data


# Validation inputs ------------------------------------------------------------


def definitions_snapshot(*, tenant: Tenant) -> DefinitionSet:
    """Every definition of ``tenant`` as documents."""
    snapshot = DefinitionSet()
    for kind in KINDS:
        target = snapshot.of(kind)
        for row in DEFINITION_MODELS[kind].objects.for_tenant(tenant):
            target[row.name] = row_document(row)  # type: ignore[index]
    snapshot.keyed_models = set(
        Model.objects.for_tenant(tenant)
        .filter(api_key_encrypted__isnull=False)
        .values_list("name", flat=True)
    )
    snapshot.credentials = credential_choices(tenant=tenant)
    snapshot.remote_tools = RemoteRefs(tenant)
    return snapshot


def validation_inputs(*, tenant: Tenant) -> tuple[RegistryLookup, Checkers]:
    """The registry as ``tenant`` sees it, and the schema checkers."""
    from agents.providers.scripted import check_scripted_config
    from agents.registry import current_registry
    from agents.schemas import check_schema

    view = current_registry().visible_to(tenant.slug)

    class Lookup:
        def has_tool(self, name: str) -> bool:
            return view.tool(name) is not None

        def has_hook(self, hook_id: str) -> bool:
            return view.hook(hook_id) is not None

    def json_schema(schema: object) -> list[tuple[str, str]]:
        return [(problem.path, problem.message) for problem in check_schema(schema)]

    return Lookup(), Checkers(
        json_schema=json_schema,
        scripted_config=check_scripted_config,
        destination=destination_problem,
    )


def definitions_check(*, tenant: Tenant, definitions: DefinitionSet) -> list[Problem]:
    registry, checkers = validation_inputs(tenant=tenant)
    return validate_definitions(definitions, registry=registry, checkers=checkers)


def lock_definitions(*, tenant: Tenant) -> None:
    """Serialise definition writes of one tenant until the transaction ends, and retire
    what processes cached of them (every definition write starts here)."""
    from agents.selectors import definitions_changed

    with connection.cursor() as cursor:
        cursor.execute(
            "SELECT pg_advisory_xact_lock(hashtextextended(%s, 0))",
            [f"agents.definitions:{tenant.id}"],
        )
    definitions_changed(tenant=tenant)


def problem_json(problem: Problem) -> dict[str, str]:
    return {
        "kind": SINGULAR[problem.kind],
        "name": problem.name,
        "path": problem.field,
        "message": problem.message,
        "severity": problem.severity,
    }


def _raise_errors(problems: Sequence[Problem], *, kind: Kind, name: str) -> None:
    errors = [p for p in problems if p.severity == "error"]
    if not errors:
        return
    own = [p for p in errors if p.kind == kind and p.name == name]
    first = (own or errors)[0]
    field = first.field if first in own else None
    raise DefinitionInvalid(
        first.describe() + _more(errors),
        field=field or None,
        details=[problem_json(p) for p in errors],
    )


# Save and delete ----------------------------------------------------------------


@dataclass(frozen=True)
class Saved:
    row: Definition
    warnings: list[Problem]


@transaction.atomic
def definition_save(
    *,
    tenant: Tenant,
    kind: Kind,
    doc: Strict,
    current_name: str | None = None,
    api_key: object = KEEP,
) -> Saved:
    """Create (``current_name`` None) or replace a definition, after validating the graph.

    ``api_key`` (models only): a string stores it encrypted, None removes it,
    KEEP leaves it. Raises DefinitionInvalid, NotFound, Conflict.
    """
    lock_definitions(tenant=tenant)
    model = DEFINITION_MODELS[kind]
    rows = model.objects.for_tenant(tenant)
    row = None
    if current_name is not None:
        row = rows.filter(name=current_name).first()
        if row is None:
            raise NotFound(f"no {SINGULAR[kind]} named {current_name!r}")
    name = getattr(doc, "name")  # noqa: B009 - every document has one
    if name != current_name and rows.filter(name=name).exists():
        raise Conflict(f"a {SINGULAR[kind]} named {name!r} already exists", field="name")
    snapshot = definitions_snapshot(tenant=tenant)
    mapping = snapshot.of(kind)
    if current_name is not None:
        mapping.pop(current_name)  # type: ignore[attr-defined]
    mapping[name] = doc  # type: ignore[index]
    if kind == "models":
        snapshot.keyed_models.discard(current_name or name)
        kept = api_key is KEEP and isinstance(row, Model) and row.has_api_key
        if kept or isinstance(api_key, str):
            snapshot.keyed_models.add(name)
    problems = definitions_check(tenant=tenant, definitions=snapshot)
    _raise_errors(problems, kind=kind, name=name)
    values = document_values(doc)
    if row is None:
        row = model(tenant=tenant, **values)
    else:
        for field, value in values.items():
            setattr(row, field, value)
        row.updated_at = now()
    row.save()
    if isinstance(row, Model) and api_key is not KEEP:
        model_api_key_set(row=row, api_key=api_key if isinstance(api_key, str) else None)
    return Saved(row=row, warnings=[p for p in problems if p.severity == "warning"])


def model_api_key_set(*, row: Model, api_key: str | None) -> None:
    if api_key is not None and not api_key.strip():
        raise ValidationFailed(
            "api_key must not be blank (send null to remove it)", field="api_key"
        )
    row.api_key_encrypted = (
        None
        if api_key is None
        else secret_encrypt(
            tenant=row.tenant, plaintext=api_key.encode(), context=model_key_context(row)
        )
    )
    row.save(update_fields=["api_key_encrypted"])


def model_key_context(row: Model) -> str:
    return f"agents.Model:{row.id}:api_key"


@transaction.atomic
def definition_delete(*, tenant: Tenant, kind: Kind, name: str) -> None:
    """Delete a definition nothing else refers to; otherwise Conflict naming the referrers."""
    lock_definitions(tenant=tenant)
    row = DEFINITION_MODELS[kind].objects.for_tenant(tenant).filter(name=name).first()
    if row is None:
        raise NotFound(f"no {SINGULAR[kind]} named {name!r}")
    snapshot = definitions_snapshot(tenant=tenant)
    before = set(definitions_check(tenant=tenant, definitions=snapshot))
    snapshot.of(kind).pop(name)  # type: ignore[attr-defined]
    broken = [
        p
        for p in definitions_check(tenant=tenant, definitions=snapshot)
        if p.severity == "error" and p not in before
    ]
    if broken:
        raise Conflict(
            f"{SINGULAR[kind]} {name!r} is still referenced: {broken[0].describe()}"
            + _more(broken),
            details=[problem_json(p) for p in broken],
        )
    row.delete()


def definition_documents(*, tenant: Tenant, kind: Kind) -> Mapping[str, Strict]:
    return {
        row.name: row_document(row) for row in DEFINITION_MODELS[kind].objects.for_tenant(tenant)
    }

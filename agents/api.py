"""REST for definitions (CRUD by name), bundles, permission rules, and the tenant's view of
the registry. The shapes the OpenAPI schema shows for them are in :mod:`agents.api_schema`."""

from __future__ import annotations

import functools
from collections.abc import Callable, Mapping, Sequence
from typing import Any, ClassVar

from django.db import transaction
from django.http import HttpResponse
from drf_spectacular.utils import OpenApiParameter, extend_schema
from rest_framework import status
from rest_framework.request import Request
from rest_framework.response import Response
from rest_framework.views import APIView

from agents.api_schema import (
    DEFINITION_SCHEMAS,
    Bundle,
    BundleReportSerializer,
    DefinitionSchemas,
    PermissionRuleInput,
    PermissionRuleSerializer,
    RegistryEffectSerializer,
    RegistryEndpointSerializer,
    RegistryHookSerializer,
    RegistryToolSerializer,
)
from agents.auditing import bundle_imported_audit, definition_saved_audit
from agents.bundles import bundle_dump, bundle_export, bundle_import, bundle_parse
from agents.models import Agent, CodeTool, Definition, Model, PermissionRule, Prompt
from agents.permission_rules import FIELDS as PERMISSION_RULE_FIELDS
from agents.permission_rules import (
    permission_rule_delete,
    permission_rule_json,
    permission_rule_save,
)
from agents.registry import RegistryView, current_registry
from agents.services import (
    KEEP,
    definition_delete,
    definition_save,
    definitions_snapshot,
    document_json,
    parse_document,
    problem_json,
    row_document,
)
from agents.validation import SINGULAR, Kind
from common.audit import AuditAction, changed_fields
from common.errors import ValidationFailed
from common.pagination import PAGE_PARAMETERS, paginate
from common.schema import error_response, error_responses, page_of
from common.time import to_us
from tenancy.auditing import audit_by
from tenancy.models import Role
from tenancy.viewsets import TenantScopedViewSet, request_principal


def definition_json(row: Definition) -> dict[str, Any]:
    body: dict[str, Any] = {"id": str(row.id), **document_json(row_document(row))}
    if isinstance(row, Model):
        body["has_api_key"] = row.has_api_key
    body["created_at"] = to_us(row.created_at)
    body["updated_at"] = to_us(row.updated_at)
    return body


def _input(data: object) -> tuple[dict[str, Any], object]:
    """The request body as a mapping, and the write-only ``api_key`` (KEEP when absent)."""
    if not isinstance(data, Mapping):
        raise ValidationFailed("the body must be a JSON object")
    body = dict(data)
    for read_only in ("id", "created_at", "updated_at", "has_api_key"):
        body.pop(read_only, None)
    return body, body.pop("api_key", KEEP)


class DefinitionViewSet(TenantScopedViewSet):
    """CRUD for one kind of definition, addressed by name. Writes validate the whole graph."""

    kind: ClassVar[Kind]
    lookup_field = "name"
    lookup_value_converter = "str"
    ordering = ("name",)  # unique in a tenant: a stable keyset for the list's pages

    def _saved(self, row: Definition, warnings: Sequence[Any], code: int) -> Response:
        body = definition_json(row) | {"warnings": [problem_json(w) for w in warnings]}
        return Response(body, status=code)

    def _write(
        self, data: dict[str, Any], api_key: object, current: str | None, code: int
    ) -> Response:
        if api_key is not KEEP and self.kind != "models":
            raise ValidationFailed("api_key applies only to models", field="api_key")
        if api_key is not KEEP and api_key is not None and not isinstance(api_key, str):
            raise ValidationFailed(
                "api_key must be a string, or null to remove it", field="api_key"
            )
        doc = parse_document(self.kind, data)
        before = {} if current is None else document_json(row_document(self.get_object()))
        with transaction.atomic():
            saved = definition_save(
                tenant=self.principal.tenant, kind=self.kind, doc=doc, current_name=current,
                api_key=api_key,
            )  # fmt: skip
            definition_saved_audit(
                self.principal, kind=self.kind, current=current, before=before, row=saved.row,
                api_key_changed=api_key is not KEEP,
            )  # fmt: skip
        return self._saved(saved.row, saved.warnings, code)

    def list(self, request: Request) -> Response:
        page = self.paginate_queryset(self.get_queryset())
        assert page is not None
        return self.get_paginated_response([definition_json(row) for row in page])

    def retrieve(self, request: Request, name: str) -> Response:
        return Response(definition_json(self.get_object()))

    def create(self, request: Request) -> Response:
        data, api_key = _input(request.data)
        return self._write(data, api_key, None, status.HTTP_201_CREATED)

    def update(self, request: Request, name: str) -> Response:
        self.get_object()
        data, api_key = _input(request.data)
        return self._write(data, api_key, name, status.HTTP_200_OK)

    def partial_update(self, request: Request, name: str) -> Response:
        current = document_json(row_document(self.get_object()))
        data, api_key = _input(request.data)
        return self._write(current | data, api_key, name, status.HTTP_200_OK)

    def destroy(self, request: Request, name: str) -> Response:
        self.get_object()
        with transaction.atomic():
            definition_delete(tenant=self.principal.tenant, kind=self.kind, name=name)
            audit_by(self.principal, AuditAction.DEFINITION_DELETED, SINGULAR[self.kind], name)
        return Response(status=status.HTTP_204_NO_CONTENT)


def _own(method: Callable[..., Any]) -> Callable[..., Any]:
    """A copy of an inherited action: extend_schema annotates the function object itself,
    so each kind's viewset needs its own to carry its own schema."""

    @functools.wraps(method)
    def action(self: Any, *args: Any, **kwargs: Any) -> Any:
        return method(self, *args, **kwargs)

    return action


_WRITE_DESCRIPTION = (
    "Writes check the tenant's definitions as a whole (references, cycles); the answer's "
    "`warnings` list what is legal but suspicious."
)
_PATCH_DESCRIPTION = (
    "The fields sent replace the stored ones; the others are kept. " + _WRITE_DESCRIPTION
)


def _definition_viewset(kind: Kind, model: type[Definition], schemas: DefinitionSchemas) -> type:
    """A documented viewset class for one kind (the OpenAPI schema shows its document)."""
    one, many, ids = schemas.singular, schemas.plural, kind
    # 409: the new name is another definition's.
    write = {200: schemas.saved, **error_responses(409)}
    referenced = error_response(409, "Other definitions still refer to it (`details` names them)")
    base = DefinitionViewSet

    def documented(method: Callable[..., Any], **schema: Any) -> Callable[..., Any]:
        return extend_schema(**schema)(_own(method))

    attrs = {
        "__doc__": model.__doc__,
        "kind": kind,
        "queryset": model.objects.all(),
        "list": documented(
            base.list, operation_id=f"{ids}_list", summary=f"List the tenant's {many}",
            responses=schemas.answer,
            description=f"The tenant's {many}, by name.",
        ),
        "create": documented(
            base.create, operation_id=f"{ids}_create", summary=f"Create {one}",
            request=schemas.document, responses={201: schemas.saved, **error_responses(409)},
            description=_WRITE_DESCRIPTION,
        ),
        "retrieve": documented(
            base.retrieve, operation_id=f"{ids}_retrieve", summary=f"Get {one} by name",
            responses=schemas.answer,
        ),
        "update": documented(
            base.update, operation_id=f"{ids}_update", summary=f"Replace {one}",
            request=schemas.document, responses=write, description=_WRITE_DESCRIPTION,
        ),
        "partial_update": documented(
            base.partial_update, operation_id=f"{ids}_partial_update",
            summary=f"Change some fields of {one}", request=schemas.document, responses=write,
            description=_PATCH_DESCRIPTION,
        ),
        "destroy": documented(
            base.destroy, operation_id=f"{ids}_destroy", summary=f"Delete {one}",
            responses={204: None, 409: referenced},
            description="Refused (409) while other definitions refer to it.",
        ),
    }  # fmt: skip
    return type(f"{model.__name__}ViewSet", (DefinitionViewSet,), attrs)


ModelViewSet = _definition_viewset("models", Model, DEFINITION_SCHEMAS["models"])
PromptViewSet = _definition_viewset("prompts", Prompt, DEFINITION_SCHEMAS["prompts"])
AgentViewSet = _definition_viewset("agents", Agent, DEFINITION_SCHEMAS["agents"])
CodeToolViewSet = _definition_viewset("code_tools", CodeTool, DEFINITION_SCHEMAS["code_tools"])


# Bundles ------------------------------------------------------------------------------------


class BundleView(APIView):
    """Export the tenant's definitions (GET) or import a bundle (POST, YAML or JSON)."""

    @extend_schema(
        operation_id="bundles_export",
        summary="Export the tenant's definitions as a bundle",
        description="JSON by default; `?format=yaml` answers the same document in YAML. "
        "A bundle never holds API keys.",
        parameters=[
            OpenApiParameter(
                "format", str, enum=["json", "yaml"], default="json",
                description="the bundle's format",
            )
        ],
        responses={(200, "application/json"): Bundle, (200, "application/yaml"): Bundle},
    )  # fmt: skip
    def get(self, request: Request) -> HttpResponse:
        document = bundle_export(tenant=request_principal(request).tenant)
        if request.query_params.get("format") == "yaml":
            return HttpResponse(bundle_dump(document, "yaml"), content_type="application/yaml")
        return Response(document)

    @extend_schema(
        operation_id="bundles_import",
        summary="Import a bundle of definitions",
        description="Creates or replaces the bundle's definitions by name, all or nothing: a "
        "bundle with any error changes nothing and is refused (400) with every error and its "
        "path in `details`. The body is YAML or JSON.",
        request={"application/yaml": Bundle, "application/json": Bundle},
        parameters=[
            OpenApiParameter("dry_run", bool, description="check and report, change nothing"),
            OpenApiParameter(
                "replace", bool, description="also delete the definitions the bundle does not hold"
            ),
        ],
        responses={200: BundleReportSerializer},
    )
    def post(self, request: Request) -> Response:
        principal = request_principal(request)
        document, dry_run = bundle_parse(request.body), _flag(request, "dry_run")
        replace = _flag(request, "replace")
        with transaction.atomic():
            before = None if dry_run else definitions_snapshot(tenant=principal.tenant)
            report = bundle_import(
                tenant=principal.tenant, document=document, dry_run=dry_run, replace=replace
            )
            if before is not None:
                after = definitions_snapshot(tenant=principal.tenant)
                bundle_imported_audit(
                    principal, before=before, after=after, report=report, replace=replace
                )
        return Response(report.as_json())


def _flag(request: Request, name: str) -> bool:
    raw = request.query_params.get(name, "0").lower()
    if raw not in {"0", "1", "true", "false", ""}:
        raise ValidationFailed(f"{name} must be 1/0 or true/false", field=name)
    return raw in {"1", "true"}


# The registry -------------------------------------------------------------------------------


def _variables(entry: Any) -> list[dict[str, Any]]:
    return [
        {"name": v.name, "type": v.type, "required": v.required, "scoped": v.scoped,
         "description": v.description}
        for v in entry.variables
    ]  # fmt: skip


def _source(view: RegistryView, entry: Any) -> dict[str, Any]:
    source = view.source_of(entry)
    return {"kind": str(source.kind), "name": source.name, "version": source.version}


class RegistryListView(APIView):
    """One kind of what the operator's Python registry offers this tenant (read-only), in
    the registry's order."""

    def entries(self, view: RegistryView) -> Sequence[dict[str, Any]]:
        raise NotImplementedError

    def get(self, request: Request) -> Response:
        view = current_registry().visible_to(request_principal(request).tenant.slug)
        return paginate(request, self.entries(view), lambda entry: entry, view=self)


def registry_tools_json(view: RegistryView) -> list[dict[str, Any]]:
    """The registry's tools visible in ``view``, as ``GET /registry/tools`` lists them."""
    return [
        {"name": e.name, "description": e.description, "args_schema": e.args_schema,
         "variables": _variables(e), "progress_argument": e.progress_argument,
         "source": _source(view, e)}
        for e in view.tools.values()
    ]  # fmt: skip


def registry_hooks_json(view: RegistryView) -> list[dict[str, Any]]:
    """The registry's hook implementations visible in ``view``."""
    return [
        {"id": e.id, "hook": str(e.hook), "source": _source(view, e)} for e in view.hooks.values()
    ]


def registry_effects_json(view: RegistryView) -> list[dict[str, Any]]:
    """The registry's effects visible in ``view``."""
    return [
        {
            "name": e.name,
            "description": e.description,
            "args_schema": e.args_schema,
            "source": _source(view, e),
        }
        for e in view.effects.values()
    ]


def _registry_schema(kind: str, serializer: Any, summary: str) -> Callable[[Any], Any]:
    return extend_schema(
        operation_id=f"registry_{kind}_list", summary=summary,
        parameters=[*PAGE_PARAMETERS], responses=page_of(serializer),
    )  # fmt: skip


class RegistryToolsView(RegistryListView):
    def entries(self, view: RegistryView) -> Sequence[dict[str, Any]]:
        return registry_tools_json(view)

    @_registry_schema("tools", RegistryToolSerializer, "List the registry's tools")
    def get(self, request: Request) -> Response:
        return super().get(request)


class RegistryHooksView(RegistryListView):
    def entries(self, view: RegistryView) -> Sequence[dict[str, Any]]:
        return registry_hooks_json(view)

    @_registry_schema("hooks", RegistryHookSerializer, "List the registry's hooks")
    def get(self, request: Request) -> Response:
        return super().get(request)


class RegistryEffectsView(RegistryListView):
    def entries(self, view: RegistryView) -> Sequence[dict[str, Any]]:
        return registry_effects_json(view)

    @_registry_schema("effects", RegistryEffectSerializer, "List the registry's effects")
    def get(self, request: Request) -> Response:
        return super().get(request)


class RegistryEndpointsView(RegistryListView):
    def entries(self, view: RegistryView) -> Sequence[dict[str, Any]]:
        return [
            {"route": e.route, "methods": sorted(e.methods), "public": e.public,
             "source": _source(view, e)}
            for e in view.endpoints
        ]  # fmt: skip

    @_registry_schema(
        "endpoints", RegistryEndpointSerializer, "List the registry's thread endpoints"
    )
    def get(self, request: Request) -> Response:
        return super().get(request)


# Permission rules -----------------------------------------------------------------------------


class PermissionRuleViewSet(TenantScopedViewSet):
    """A tenant's permission rules for tool calls, weighed with the registry's and the
    prompts' before every call (the most restrictive wins). Admins write them."""

    queryset = PermissionRule.objects.all()
    write_role = Role.ADMIN
    ordering = ("created_at", "id")

    @extend_schema(
        operation_id="permission_rules_list", summary="List the tenant's permission rules",
        description="Oldest first.", responses=PermissionRuleSerializer,
    )  # fmt: skip
    def list(self, request: Request) -> Response:
        page = self.paginate_queryset(self.get_queryset())
        assert page is not None
        return self.get_paginated_response([permission_rule_json(row) for row in page])

    @extend_schema(
        operation_id="permission_rules_create", summary="Create a permission rule",
        request=PermissionRuleInput, responses={201: PermissionRuleSerializer},
    )  # fmt: skip
    def create(self, request: Request) -> Response:
        with transaction.atomic():
            row = permission_rule_save(tenant=self.principal.tenant, data=request.data)
            self._audit(AuditAction.DEFINITION_CREATED, row, {})
        return Response(permission_rule_json(row), status=status.HTTP_201_CREATED)

    def _audit(self, action: AuditAction, row: PermissionRule, before: Mapping[str, Any]) -> None:
        after = {} if action == AuditAction.DEFINITION_DELETED else permission_rule_json(row)
        changes = changed_fields(before, after)
        audit_by(self.principal, action, "permission rule", row.pk, {"changes": changes})

    def _replace(self, current: PermissionRule, data: Mapping[str, Any]) -> PermissionRule:
        before = permission_rule_json(current)
        with transaction.atomic():
            row = permission_rule_save(tenant=self.principal.tenant, data=data, current=current)
            self._audit(AuditAction.DEFINITION_UPDATED, row, before)
        return row

    @extend_schema(
        operation_id="permission_rules_retrieve", summary="Get a permission rule",
        responses=PermissionRuleSerializer,
    )  # fmt: skip
    def retrieve(self, request: Request, pk: str) -> Response:
        return Response(permission_rule_json(self.get_object()))

    @extend_schema(
        operation_id="permission_rules_update", summary="Replace a permission rule",
        description="The fields left out take their defaults.",
        request=PermissionRuleInput, responses=PermissionRuleSerializer,
    )  # fmt: skip
    def update(self, request: Request, pk: str) -> Response:
        return Response(permission_rule_json(self._replace(self.get_object(), request.data)))

    @extend_schema(
        operation_id="permission_rules_partial_update",
        summary="Change some fields of a permission rule",
        description="The fields sent replace the stored ones; the others are kept, except "
        "that a rule whose `decision` is no longer `ask` drops `expires_in` and `on_expiry`.",
        request=PermissionRuleInput, responses=PermissionRuleSerializer,
    )  # fmt: skip
    def partial_update(self, request: Request, pk: str) -> Response:
        current = self.get_object()
        merged = {name: getattr(current, name) for name in PERMISSION_RULE_FIELDS}
        if not isinstance(request.data, Mapping):
            raise ValidationFailed("the body must be a JSON object")
        if request.data.get("decision", current.decision) != "ask":  # ask's own settings go
            merged.update(expires_in=None, on_expiry=None)
        row = self._replace(current, merged | dict(request.data))
        return Response(permission_rule_json(row))

    @extend_schema(
        operation_id="permission_rules_destroy", summary="Delete a permission rule",
        responses={204: None},
    )  # fmt: skip
    def destroy(self, request: Request, pk: str) -> Response:
        row = self.get_object()
        with transaction.atomic():
            self._audit(AuditAction.DEFINITION_DELETED, row, permission_rule_json(row))
            permission_rule_delete(tenant=self.principal.tenant, row=row)
        return Response(status=status.HTTP_204_NO_CONTENT)

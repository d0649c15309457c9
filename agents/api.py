"""REST for definitions (CRUD by name), bundles, and the tenant's view of the registry."""

from __future__ import annotations

import functools
from collections.abc import Callable, Mapping
from typing import Any, ClassVar, Literal

from django.http import HttpResponse
from drf_spectacular.types import OpenApiTypes
from drf_spectacular.utils import OpenApiParameter, extend_schema
from pydantic import BaseModel, Field, create_model
from rest_framework import status
from rest_framework.request import Request
from rest_framework.response import Response
from rest_framework.views import APIView

from agents.bundles import bundle_dump, bundle_export, bundle_import, bundle_parse
from agents.documents import AgentDoc, CodeToolDoc, ModelDoc, PromptDoc
from agents.models import Agent, CodeTool, Definition, Model, PermissionRule, Prompt
from agents.permission_rules import FIELDS as PERMISSION_RULE_FIELDS
from agents.permission_rules import (
    permission_rule_delete,
    permission_rule_json,
    permission_rule_save,
)
from agents.services import (
    KEEP,
    definition_delete,
    definition_save,
    document_json,
    parse_document,
    problem_json,
    row_document,
)
from agents.validation import Kind
from common.errors import NotFound, ValidationFailed
from common.schema import error_response, error_responses
from tenancy.models import Role
from tenancy.viewsets import TenantScopedViewSet, request_principal


def definition_json(row: Definition) -> dict[str, Any]:
    body: dict[str, Any] = {"id": str(row.id), **document_json(row_document(row))}
    if isinstance(row, Model):
        body["has_api_key"] = row.has_api_key
    body["created_at"] = row.created_at.isoformat()
    body["updated_at"] = row.updated_at.isoformat()
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
    lookup_value_regex = "[^/]+"

    def _saved(self, row: Definition, warnings: list[Any], code: int) -> Response:
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
        saved = definition_save(
            tenant=self.principal.tenant, kind=self.kind, doc=doc, current_name=current,
            api_key=api_key,
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
        definition_delete(tenant=self.principal.tenant, kind=self.kind, name=name)
        return Response(status=status.HTTP_204_NO_CONTENT)


def _own(method: Callable[..., Any]) -> Callable[..., Any]:
    """A copy of an inherited action: extend_schema annotates the function object itself,
    so each kind's viewset needs its own to carry its own schema."""

    @functools.wraps(method)
    def action(self: Any, *args: Any, **kwargs: Any) -> Any:
        return method(self, *args, **kwargs)

    return action


class ProblemOutput(BaseModel):
    """A problem a write found in the tenant's definitions (``problem_json``)."""

    kind: str
    name: str
    path: str
    message: str
    severity: Literal["error", "warning"]


def _output(kind: Kind, doc: type[Any]) -> type[BaseModel]:
    """What the API answers for a definition (``definition_json``): its document, its row's
    id and times, ``has_api_key`` for a model, and a write's ``warnings``."""
    fields: dict[str, Any] = {
        "id": (str, ...),
        "created_at": (str, ...),
        "updated_at": (str, ...),
        "warnings": (
            list[ProblemOutput] | None,
            Field(None, description="writes only: what is legal but suspicious"),
        ),
    }
    if kind == "models":
        fields["has_api_key"] = (bool, ...)
    name = doc.__name__.removesuffix("Doc") + "Output"
    output: type[BaseModel] = create_model(name, __base__=doc, **fields)
    return output


def _definition_viewset(kind: Kind, model: type[Definition], doc: type[Any]) -> type:
    """A documented viewset class for one kind (the OpenAPI schema shows its document)."""
    output = _output(kind, doc)
    # 409: the new name is another definition's.
    create = extend_schema(request=doc, responses={201: output, **error_responses(409)})
    write = extend_schema(request=doc, responses={200: output, **error_responses(409)})
    referenced = error_response(409, "Other definitions still refer to it (`details` names them)")
    base = DefinitionViewSet
    attrs = {
        "__doc__": f"{model.__doc__}\n\nAddressed by name; writes validate the tenant's "
        "definitions as a whole.",
        "kind": kind,
        "queryset": model.objects.all(),
        "create": create(_own(base.create)),
        "update": write(_own(base.update)),
        "partial_update": write(_own(base.partial_update)),
        "retrieve": extend_schema(responses=output)(_own(base.retrieve)),
        "list": extend_schema(
            operation_id=f"{kind}_list", responses=OpenApiTypes.OBJECT,
            description="Paginated: `{count, next, previous, results}`",
        )(_own(base.list)),
        "destroy": extend_schema(responses={204: None, 409: referenced})(_own(base.destroy)),
    }  # fmt: skip
    return type(f"{model.__name__}ViewSet", (DefinitionViewSet,), attrs)


ModelViewSet = _definition_viewset("models", Model, ModelDoc)
PromptViewSet = _definition_viewset("prompts", Prompt, PromptDoc)
AgentViewSet = _definition_viewset("agents", Agent, AgentDoc)
CodeToolViewSet = _definition_viewset("code_tools", CodeTool, CodeToolDoc)


class BundleView(APIView):
    """Export the tenant's definitions (GET) or import a bundle (POST, YAML or JSON)."""

    @extend_schema(
        parameters=[OpenApiParameter("format", str, enum=["json", "yaml"], default="json")],
        responses={
            (200, "application/json"): OpenApiTypes.OBJECT,
            (200, "application/yaml"): OpenApiTypes.OBJECT,
        },
    )
    def get(self, request: Request) -> HttpResponse:
        document = bundle_export(tenant=request_principal(request).tenant)
        if request.query_params.get("format") == "yaml":
            return HttpResponse(bundle_dump(document, "yaml"), content_type="application/yaml")
        return Response(document)

    @extend_schema(
        request={"application/yaml": OpenApiTypes.STR, "application/json": OpenApiTypes.OBJECT},
        parameters=[
            OpenApiParameter("dry_run", bool, description="validate and report, change nothing"),
            OpenApiParameter(
                "replace", bool, description="also delete definitions not in the bundle"
            ),
        ],
        responses={200: OpenApiTypes.OBJECT},
    )
    def post(self, request: Request) -> Response:
        report = bundle_import(
            tenant=request_principal(request).tenant,
            document=bundle_parse(request.body),
            dry_run=_flag(request, "dry_run"),
            replace=_flag(request, "replace"),
        )
        return Response(report.as_json())


def _flag(request: Request, name: str) -> bool:
    raw = request.query_params.get(name, "0").lower()
    if raw not in {"0", "1", "true", "false", ""}:
        raise ValidationFailed(f"{name} must be 1/0 or true/false", field=name)
    return raw in {"1", "true"}


def _variables(entry: Any) -> list[dict[str, Any]]:
    return [
        {"name": v.name, "type": v.type, "required": v.required, "scoped": v.scoped,
         "description": v.description}
        for v in entry.variables
    ]  # fmt: skip


_REGISTRY_LISTINGS: dict[str, Callable[[Any], list[dict[str, Any]]]] = {
    "tools": lambda view: [
        {"name": e.name, "description": e.description, "args_schema": e.args_schema,
         "variables": _variables(e), "progress_argument": e.progress_argument}
        for e in view.tools.values()
    ],
    "hooks": lambda view: [{"id": e.id, "hook": str(e.hook)} for e in view.hooks.values()],
    "effects": lambda view: [
        {"name": e.name, "description": e.description, "args_schema": e.args_schema}
        for e in view.effects.values()
    ],
    "endpoints": lambda view: [
        {"route": e.route, "methods": sorted(e.methods), "public": e.public}
        for e in view.endpoints
    ],
}  # fmt: skip


class RegistryListingView(APIView):
    """What the operator's Python registry offers this tenant (read-only)."""

    @extend_schema(
        parameters=[
            OpenApiParameter("kind", str, OpenApiParameter.PATH, enum=sorted(_REGISTRY_LISTINGS))
        ],
        responses={200: OpenApiTypes.OBJECT},
    )
    def get(self, request: Request, kind: str) -> Response:
        from agents.registry import current_registry

        if kind not in _REGISTRY_LISTINGS:
            raise NotFound(f"no registry listing {kind!r}; try {', '.join(_REGISTRY_LISTINGS)}")
        view = current_registry().visible_to(request_principal(request).tenant.slug)
        return Response({"results": _REGISTRY_LISTINGS[kind](view)})


# Permission rules -----------------------------------------------------------------------------


class PermissionRuleInput(BaseModel):
    """A tenant permission rule: ``decision`` for calls of ``tool`` by agent ``agent``
    (empty: every tool, every agent), limited by the condition ``when`` (docs/definitions.md)."""

    agent: str = Field("", description="an agent's name; empty: every agent")
    tool: str = Field("", description="a tool's name; empty: every tool")
    decision: Literal["allow", "ask", "deny"]
    when: Any = Field(None, description="a JSON-logic condition on the call's arguments")
    expires_in: int | None = Field(
        None, description="ask: seconds a person has to decide (default ACTION_TTL_S)"
    )
    on_expiry: Literal["deny", "allow"] | None = Field(
        None, description="ask: what an unanswered request resolves to (default deny)"
    )
    description: str = Field("", max_length=500)


class PermissionRuleOutput(PermissionRuleInput):
    id: str
    created_at: str
    updated_at: str


class PermissionRuleViewSet(TenantScopedViewSet):
    """A tenant's permission rules for tool calls, weighed with the registry's and the
    prompts' before every call (the most restrictive wins). Admins write them."""

    queryset = PermissionRule.objects.all()
    write_role = Role.ADMIN
    lookup_value_regex = "[0-9a-fA-F-]{36}"

    @extend_schema(
        operation_id="permission_rules_list", responses=OpenApiTypes.OBJECT,
        description="Paginated: `{count, next, previous, results}`, oldest first",
    )  # fmt: skip
    def list(self, request: Request) -> Response:
        page = self.paginate_queryset(self.get_queryset())
        assert page is not None
        return self.get_paginated_response([permission_rule_json(row) for row in page])

    @extend_schema(request=PermissionRuleInput, responses={201: PermissionRuleOutput})
    def create(self, request: Request) -> Response:
        row = permission_rule_save(tenant=self.principal.tenant, data=request.data)
        return Response(permission_rule_json(row), status=status.HTTP_201_CREATED)

    @extend_schema(responses=PermissionRuleOutput)
    def retrieve(self, request: Request, pk: str) -> Response:
        return Response(permission_rule_json(self.get_object()))

    @extend_schema(request=PermissionRuleInput, responses=PermissionRuleOutput)
    def update(self, request: Request, pk: str) -> Response:
        row = permission_rule_save(
            tenant=self.principal.tenant, data=request.data, current=self.get_object()
        )
        return Response(permission_rule_json(row))

    @extend_schema(request=PermissionRuleInput, responses=PermissionRuleOutput)
    def partial_update(self, request: Request, pk: str) -> Response:
        current = self.get_object()
        merged = {name: getattr(current, name) for name in PERMISSION_RULE_FIELDS}
        if not isinstance(request.data, Mapping):
            raise ValidationFailed("the body must be a JSON object")
        if request.data.get("decision", current.decision) != "ask":  # ask's own settings go
            merged.update(expires_in=None, on_expiry=None)
        row = permission_rule_save(
            tenant=self.principal.tenant, data=merged | dict(request.data), current=current
        )
        return Response(permission_rule_json(row))

    @extend_schema(responses={204: None})
    def destroy(self, request: Request, pk: str) -> Response:
        permission_rule_delete(tenant=self.principal.tenant, row=self.get_object())
        return Response(status=status.HTTP_204_NO_CONTENT)

"""REST for a tenant's remote connections.

- MCP servers: ``/api/v1/mcp-servers`` (list, create), ``/api/v1/mcp-servers/{name}`` (read,
  change, delete), ``/{name}/tools`` (the cached tool list, fetched again when stale) and
  ``/{name}/refresh`` (fetched now).
- A2A agents: ``/api/v1/a2a-agents`` and ``/{name}`` likewise, ``/{name}/card`` (the cached
  card, fetched again when stale) and ``/{name}/refresh``.

Secrets are write-only: no answer holds one. Admins write and refresh; any role reads."""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

from django.db import transaction
from django.db.models import QuerySet
from drf_spectacular.utils import extend_schema, extend_schema_view
from rest_framework import serializers, status
from rest_framework.decorators import action
from rest_framework.request import Request
from rest_framework.response import Response

from common.audit import AuditAction
from common.inputs import StrictInput
from common.pagination import paginate
from common.schema import US_SINCE_EPOCH, error_responses
from connectors.a2a import (
    a2a_agent_delete,
    a2a_agent_get,
    a2a_agent_json,
    a2a_agent_list,
    a2a_agent_save,
    card_current,
    card_listing_json,
)
from connectors.auditing import connection_audit
from connectors.models import A2aAgent, McpServer, McpTransport, RemoteAuth
from connectors.remote import MAX_CALL_TIMEOUT_S, MAX_TTL_S
from connectors.servers import (
    mcp_server_delete,
    mcp_server_get,
    mcp_server_json,
    mcp_server_list,
    mcp_server_save,
    tool_listing_json,
    tools_current,
)
from connectors.tools import server_tool_names
from tenancy.models import Role
from tenancy.viewsets import TenantScopedViewSet

WRITE_ONLY = "write-only: stored encrypted, never shown again"


class AuthInput(StrictInput):
    """How calls authenticate. `bearer` takes `token`; `header` takes `header_name` and
    `header_value`; `oauth_client_credentials` takes `client_id`, `client_secret`, `token_url`
    and optional `scopes` (space-separated). A change that keeps the type may leave the secret
    out to keep the stored one."""

    type = serializers.ChoiceField(choices=RemoteAuth.choices)
    token = serializers.CharField(
        required=False, write_only=True, max_length=4096,
        help_text=f"`bearer`: the token, {WRITE_ONLY}",
    )  # fmt: skip
    header_name = serializers.CharField(required=False, max_length=100)
    header_value = serializers.CharField(
        required=False, write_only=True, max_length=4096,
        help_text=f"`header`: its value, {WRITE_ONLY}",
    )  # fmt: skip
    client_id = serializers.CharField(required=False, max_length=200)
    client_secret = serializers.CharField(
        required=False, write_only=True, max_length=4096,
        help_text=f"`oauth_client_credentials`: {WRITE_ONLY}",
    )  # fmt: skip
    token_url = serializers.CharField(required=False, max_length=500)
    scopes = serializers.CharField(required=False, allow_blank=True, max_length=500)


class McpServerInput(StrictInput):
    """An MCP server. Creating one needs `name` and `url`; a change sends only what changes
    (a new `url` or `auth` forgets the cached tools and the health)."""

    name = serializers.RegexField(
        r"^[a-z][a-z0-9]*(?:_[a-z0-9]+)*$", max_length=32, required=False,
        help_text="how prompts name it (`mcp:<name>`, `mcp:<name>/<tool>`); the model sees "
        "its tools as `<name>__<tool>`",
    )  # fmt: skip
    url = serializers.CharField(
        required=False, max_length=500,
        help_text="the streamable HTTP endpoint; private addresses are refused unless the "
        "operator allows them",
    )  # fmt: skip
    description = serializers.CharField(required=False, allow_blank=True, max_length=500)
    transport = serializers.ChoiceField(choices=McpTransport.choices, required=False)
    auth = AuthInput(required=False)
    tools_ttl_s = serializers.IntegerField(
        required=False, min_value=0, max_value=MAX_TTL_S,
        help_text="how long the tool list is used before it is fetched again",
    )  # fmt: skip
    call_timeout_s = serializers.IntegerField(
        required=False, min_value=1, max_value=MAX_CALL_TIMEOUT_S,
        help_text="how long one call (or listing) may take",
    )  # fmt: skip


class AuthOutput(serializers.Serializer[Any]):
    type = serializers.CharField()
    secret_set = serializers.BooleanField(help_text="whether a secret is stored (never shown)")
    header_name = serializers.CharField(required=False)
    client_id = serializers.CharField(required=False)
    token_url = serializers.CharField(required=False)
    scopes = serializers.CharField(required=False)


class HealthOutput(serializers.Serializer[Any]):
    """The last contact (a listing, a card or a call)."""

    ok = serializers.BooleanField(allow_null=True, help_text="null: never contacted")
    checked_at = serializers.IntegerField(allow_null=True, help_text=US_SINCE_EPOCH)
    last_ok_at = serializers.IntegerField(allow_null=True, help_text=US_SINCE_EPOCH)
    last_error = serializers.CharField(allow_null=True)
    last_error_at = serializers.IntegerField(allow_null=True, help_text=US_SINCE_EPOCH)


class McpServerOutput(serializers.Serializer[Any]):
    """An MCP server as answers show it: never its secret."""

    id = serializers.UUIDField()
    name = serializers.CharField()
    url = serializers.CharField()
    description = serializers.CharField(allow_blank=True)
    transport = serializers.CharField()
    auth = AuthOutput()
    tools_ttl_s = serializers.IntegerField()
    call_timeout_s = serializers.IntegerField()
    tool_count = serializers.IntegerField(help_text="tools in the cached list")
    tools_fetched_at = serializers.IntegerField(allow_null=True, help_text=US_SINCE_EPOCH)
    health = HealthOutput()
    created_at = serializers.IntegerField(help_text=US_SINCE_EPOCH)
    updated_at = serializers.IntegerField(help_text=US_SINCE_EPOCH)


class McpToolOutput(serializers.Serializer[Any]):
    name = serializers.CharField(help_text="the name the model calls it by: `<server>__<tool>`")
    remote_name = serializers.CharField(help_text="its name on the server")
    description = serializers.CharField(allow_blank=True)
    input_schema = serializers.JSONField(help_text="the JSON Schema of its arguments")


class McpToolListOutput(serializers.Serializer[Any]):
    server = serializers.CharField()
    fetched_at = serializers.IntegerField(allow_null=True, help_text=US_SINCE_EPOCH)
    stale = serializers.BooleanField(help_text="older than the server's tools_ttl_s")
    error = serializers.CharField(
        allow_null=True, help_text="why the list could not be fetched (then it is the cached one)"
    )
    tools = McpToolOutput(many=True)
    health = HealthOutput()


@dataclass(frozen=True)
class Services:
    """One kind's services: read one by name, list, save, delete, and its answer's JSON."""

    get: Callable[..., Any]
    rows: Callable[..., list[Any]]
    save: Callable[..., Any]
    delete: Callable[..., None]
    shown: Callable[[Any], dict[str, Any]]


class RemoteConnectionViewSet(TenantScopedViewSet):
    """A tenant's remote connections of one kind, addressed by name; each kind names its
    input and its services, and its operations' schemas (``extend_schema_view``). Writes are
    audited in their transaction."""

    write_role = Role.ADMIN
    lookup_field = "name"
    lookup_value_converter = "str"
    input_class: type[StrictInput]

    def scope_queryset(self, queryset: QuerySet[Any]) -> QuerySet[Any]:
        return queryset.order_by("name")

    def services(self) -> Services:
        raise NotImplementedError

    def _row(self) -> Any:
        return self.services().get(tenant=self.principal.tenant, name=self.kwargs["name"])

    def list(self, request: Request) -> Response:
        rows = self.services().rows(tenant=self.principal.tenant)
        return paginate(request, rows, self.services().shown, view=self)

    def create(self, request: Request) -> Response:
        self.input_class(data=request.data).is_valid(raise_exception=True)
        with transaction.atomic():
            row = self.services().save(tenant=self.principal.tenant, data=request.data)
            connection_audit(self.principal, AuditAction.CONNECTION_CREATED, row, request.data)
        return Response(self.services().shown(row), status=status.HTTP_201_CREATED)

    def retrieve(self, request: Request, name: str) -> Response:
        return Response(self.services().shown(self._row()))

    def partial_update(self, request: Request, name: str) -> Response:
        self.input_class(data=request.data, partial=True).is_valid(raise_exception=True)
        current = self._row()
        with transaction.atomic():
            row = self.services().save(
                tenant=self.principal.tenant, data=request.data, current=current
            )
            connection_audit(self.principal, AuditAction.CONNECTION_UPDATED, row, request.data)
        return Response(self.services().shown(row))

    def destroy(self, request: Request, name: str) -> Response:
        row = self._row()
        with transaction.atomic():
            self.services().delete(tenant=self.principal.tenant, row=row)
            connection_audit(self.principal, AuditAction.CONNECTION_DELETED, row, {})
        return Response(status=status.HTTP_204_NO_CONTENT)


def _crud_schemas(
    prefix: str, *, singular: str, plural: str, input_class: type[StrictInput],
    output: type[serializers.Serializer[Any]], created: str, deleted: str,
) -> dict[str, Any]:  # fmt: skip
    """The five operations' schemas of a kind (``prefix``: its operation ids')."""
    return {
        "list": extend_schema(operation_id=f"{prefix}_list", summary=f"List the {plural}",
                              responses=output),
        "create": extend_schema(
            operation_id=f"{prefix}_create", summary=f"Register {singular}",
            description=f"Its secret is stored encrypted and never shown again. {created}",
            request=input_class, responses={201: output, **error_responses(409, 413)},
        ),
        "retrieve": extend_schema(operation_id=f"{prefix}_retrieve",
                                  summary=f"Get {singular}", responses=output),
        "partial_update": extend_schema(
            operation_id=f"{prefix}_partial_update", summary=f"Change {singular}",
            request=input_class, responses={200: output, **error_responses(409)},
        ),
        "destroy": extend_schema(operation_id=f"{prefix}_destroy", summary=f"Delete {singular}",
                                 description=deleted, responses={204: None}),
    }  # fmt: skip


@extend_schema_view(**_crud_schemas(
    "mcp_servers", singular="an MCP server", plural="MCP servers", input_class=McpServerInput,
    output=McpServerOutput, created="Nothing is contacted yet: list its tools with `/tools`.",
    deleted="Prompts naming it offer none of its tools from then on.",
))  # fmt: skip
class McpServerViewSet(RemoteConnectionViewSet):
    """The tenant's MCP servers, addressed by name."""

    queryset = McpServer.objects.all()
    input_class = McpServerInput

    def services(self) -> Services:
        return MCP_SERVERS

    @extend_schema(
        operation_id="mcp_servers_tools", summary="The tools of an MCP server",
        description="The cached list, fetched again first when older than `tools_ttl_s`. "
        "When the server cannot be reached, the cached list is answered with `error`.",
        responses=McpToolListOutput,
    )  # fmt: skip
    @action(detail=True, methods=["get"], url_path="tools")
    def tools(self, request: Request, name: str) -> Response:
        return self._listing(refresh=False)

    @extend_schema(
        operation_id="mcp_servers_refresh", summary="Fetch an MCP server's tools now",
        description="Asks the server for its tools now and caches them; its health records "
        "the outcome. When it cannot be reached, the cached list is answered with `error`.",
        request=None, responses=McpToolListOutput,
    )  # fmt: skip
    @action(detail=True, methods=["post"], url_path="refresh")
    def refresh(self, request: Request, name: str) -> Response:
        return self._listing(refresh=True)

    def _listing(self, *, refresh: bool) -> Response:
        listing = tools_current(self._row(), refresh=refresh)
        names = server_tool_names(listing.server.name, listing.tools)
        return Response(tool_listing_json(listing, names=names))


# A2A agents ------------------------------------------------------------------------------------


class A2aAgentInput(StrictInput):
    """A remote A2A agent. Creating one needs `name` and `url`; a change sends only what
    changes (a new `url` or `auth` forgets the cached card and the health)."""

    name = serializers.RegexField(
        r"^[a-z][a-z0-9]*(?:_[a-z0-9]+)*$", max_length=32, required=False,
        help_text="how prompts name it (`a2a:<name>`); the model calls it as "
        "`<name>__send_message`",
    )  # fmt: skip
    url = serializers.CharField(
        required=False, max_length=500,
        help_text="where its card is (`<url>/.well-known/agent-card.json`); private addresses "
        "are refused unless the operator allows them",
    )  # fmt: skip
    description = serializers.CharField(required=False, allow_blank=True, max_length=500)
    auth = AuthInput(required=False)
    card_ttl_s = serializers.IntegerField(
        required=False, min_value=0, max_value=MAX_TTL_S,
        help_text="how long the card is used before it is fetched again",
    )  # fmt: skip
    call_timeout_s = serializers.IntegerField(
        required=False, min_value=1, max_value=MAX_CALL_TIMEOUT_S,
        help_text="how long one message may take to be answered (a task still running then "
        "is cancelled)",
    )  # fmt: skip


class A2aSkillOutput(serializers.Serializer[Any]):
    id = serializers.CharField()
    name = serializers.CharField()
    description = serializers.CharField(allow_blank=True)


class A2aCardSummaryOutput(serializers.Serializer[Any]):
    name = serializers.CharField()
    description = serializers.CharField(allow_blank=True)
    version = serializers.CharField(allow_blank=True)
    interface = serializers.CharField(allow_null=True, help_text="its JSON-RPC endpoint")
    streaming = serializers.BooleanField()
    skills = A2aSkillOutput(many=True)


class A2aAgentOutput(serializers.Serializer[Any]):
    """An A2A agent as answers show it: never its secret."""

    id = serializers.UUIDField()
    name = serializers.CharField()
    tool = serializers.CharField(help_text="the name the model calls it by")
    url = serializers.CharField()
    description = serializers.CharField(allow_blank=True)
    auth = AuthOutput()
    card_ttl_s = serializers.IntegerField()
    call_timeout_s = serializers.IntegerField()
    card = A2aCardSummaryOutput(allow_null=True, help_text="null: never fetched")
    card_fetched_at = serializers.IntegerField(allow_null=True, help_text=US_SINCE_EPOCH)
    health = HealthOutput()
    created_at = serializers.IntegerField(help_text=US_SINCE_EPOCH)
    updated_at = serializers.IntegerField(help_text=US_SINCE_EPOCH)


class A2aCardOutput(serializers.Serializer[Any]):
    agent = serializers.CharField()
    fetched_at = serializers.IntegerField(allow_null=True, help_text=US_SINCE_EPOCH)
    stale = serializers.BooleanField(help_text="older than the agent's card_ttl_s")
    error = serializers.CharField(
        allow_null=True, help_text="why the card could not be fetched (then it is the cached one)"
    )
    card = serializers.DictField(allow_null=True, help_text="the agent's card (A2A 1.0 JSON)")
    health = HealthOutput()


@extend_schema_view(**_crud_schemas(
    "a2a_agents", singular="a remote A2A agent", plural="remote A2A agents",
    input_class=A2aAgentInput, output=A2aAgentOutput,
    created="Nothing is contacted yet: fetch its card with `/card`.",
    deleted="Prompts naming it offer its tool no more.",
))  # fmt: skip
class A2aAgentViewSet(RemoteConnectionViewSet):
    """The tenant's remote A2A agents, addressed by name."""

    queryset = A2aAgent.objects.all()
    input_class = A2aAgentInput

    def services(self) -> Services:
        return A2A_AGENTS

    @extend_schema(
        operation_id="a2a_agents_card", summary="The card of a remote A2A agent",
        description="The cached card, fetched again first when older than `card_ttl_s`. "
        "When the agent cannot be reached, the cached card is answered with `error`.",
        responses=A2aCardOutput,
    )  # fmt: skip
    @action(detail=True, methods=["get"], url_path="card")
    def card(self, request: Request, name: str) -> Response:
        return Response(card_listing_json(card_current(self._row())))

    @extend_schema(
        operation_id="a2a_agents_refresh", summary="Fetch a remote A2A agent's card now",
        description="Fetches the card now and caches it; the health records the outcome.",
        request=None, responses=A2aCardOutput,
    )  # fmt: skip
    @action(detail=True, methods=["post"], url_path="refresh")
    def refresh(self, request: Request, name: str) -> Response:
        return Response(card_listing_json(card_current(self._row(), refresh=True)))


MCP_SERVERS = Services(
    get=mcp_server_get,
    rows=mcp_server_list,
    save=mcp_server_save,
    delete=mcp_server_delete,
    shown=mcp_server_json,
)
A2A_AGENTS = Services(
    get=a2a_agent_get,
    rows=a2a_agent_list,
    save=a2a_agent_save,
    delete=a2a_agent_delete,
    shown=a2a_agent_json,
)

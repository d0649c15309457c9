"""A tenant's MCP servers: where they are, how to authenticate, what tools they offered last
and how the last contact went. Secrets are sealed (:mod:`connectors.servers`), never stored
or shown in clear."""

from __future__ import annotations

from django.db import models

from common.ids import new_id
from common.time import now
from tenancy.models import TenantOwned

DEFAULT_TOOLS_TTL_S = 300
DEFAULT_CALL_TIMEOUT_S = 60


class McpTransport(models.TextChoices):
    STREAMABLE_HTTP = "streamable_http"


class McpAuth(models.TextChoices):
    """How calls to the server authenticate: nothing, ``Authorization: Bearer <token>``, a
    header of the tenant's naming, or an OAuth 2.1 client-credentials grant whose access
    token is sent as a bearer."""

    NONE = "none"
    BEARER = "bearer"
    HEADER = "header"
    OAUTH_CLIENT_CREDENTIALS = "oauth_client_credentials"


class McpServer(TenantOwned):
    """One remote MCP server of a tenant, addressed by ``name`` in prompts' ``tools[]``
    (``mcp:<name>`` or ``mcp:<name>/<tool>``).

    ``secret_encrypted`` seals the auth's secret part (the bearer token, the header's value or
    the OAuth client secret), context ``connectors.McpServer:<id>:secret``. ``tools`` caches
    the server's ``tools/list`` (``name``, ``description``, ``input_schema``) as of
    ``tools_fetched_at``; it is stale ``tools_ttl_s`` seconds later. The health columns record
    the last contact of any kind (a listing or a call)."""

    id = models.UUIDField(primary_key=True, default=new_id, editable=False)
    name = models.CharField(max_length=32)
    url = models.CharField(max_length=500)
    description = models.CharField(max_length=500, blank=True)
    transport = models.CharField(
        max_length=24, choices=McpTransport.choices, default=McpTransport.STREAMABLE_HTTP
    )
    auth_type = models.CharField(max_length=32, choices=McpAuth.choices, default=McpAuth.NONE)
    auth_header_name = models.CharField(max_length=100, blank=True)
    oauth_client_id = models.CharField(max_length=200, blank=True)
    oauth_token_url = models.CharField(max_length=500, blank=True)
    oauth_scopes = models.CharField(max_length=500, blank=True)
    secret_encrypted = models.BinaryField(null=True, editable=False)
    tools_ttl_s = models.PositiveIntegerField(default=DEFAULT_TOOLS_TTL_S)
    call_timeout_s = models.PositiveIntegerField(default=DEFAULT_CALL_TIMEOUT_S)
    tools = models.JSONField(default=list, editable=False)
    tools_fetched_at = models.DateTimeField(null=True, blank=True, editable=False)
    last_ok_at = models.DateTimeField(null=True, blank=True, editable=False)
    last_error = models.CharField(max_length=1000, blank=True, editable=False)
    last_error_at = models.DateTimeField(null=True, blank=True, editable=False)
    checked_at = models.DateTimeField(null=True, blank=True, editable=False)
    created_at = models.DateTimeField(default=now, editable=False)
    updated_at = models.DateTimeField(default=now)

    class Meta:
        ordering = ["name"]
        constraints = [
            models.UniqueConstraint(fields=["tenant", "name"], name="mcp_server_unique_name")
        ]

    def __str__(self) -> str:
        return f"MCP server {self.name}"

    @property
    def has_secret(self) -> bool:
        return self.secret_encrypted is not None

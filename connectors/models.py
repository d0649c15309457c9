"""A tenant's remote connections: MCP servers whose tools its agents call, and A2A agents they
delegate to. Each has where it is, how to authenticate and how the last contact went, and
what it offered last (a server's tools, an agent's card). Secrets are sealed
(:mod:`connectors.remote`), never stored or shown in clear."""

from __future__ import annotations

from django.db import models

from common.ids import new_id
from common.time import now
from tenancy.models import TenantOwned

DEFAULT_TOOLS_TTL_S = 300
DEFAULT_CALL_TIMEOUT_S = 60


class RemoteAuth(models.TextChoices):
    """How calls authenticate: nothing, ``Authorization: Bearer <token>``, a header of the
    tenant's naming, or an OAuth 2.1 client-credentials grant whose access token is sent as a
    bearer."""

    NONE = "none"
    BEARER = "bearer"
    HEADER = "header"
    OAUTH_CLIENT_CREDENTIALS = "oauth_client_credentials"


class RemoteConnection(TenantOwned):
    """What every remote connection has: a ``name`` prompts use in ``tools[]``, a URL, an auth
    whose secret part (the bearer token, the header's value or the OAuth client secret)
    ``secret_encrypted`` seals (context ``connectors.<Model>:<id>:secret``), how long a call
    may take, and health columns recording the last contact of any kind."""

    id = models.UUIDField(primary_key=True, default=new_id, editable=False)
    name = models.CharField(max_length=32)
    url = models.CharField(max_length=500)
    description = models.CharField(max_length=500, blank=True)
    auth_type = models.CharField(max_length=32, choices=RemoteAuth.choices, default=RemoteAuth.NONE)
    auth_header_name = models.CharField(max_length=100, blank=True)
    oauth_client_id = models.CharField(max_length=200, blank=True)
    oauth_token_url = models.CharField(max_length=500, blank=True)
    oauth_scopes = models.CharField(max_length=500, blank=True)
    secret_encrypted = models.BinaryField(null=True, editable=False)
    call_timeout_s = models.PositiveIntegerField(default=DEFAULT_CALL_TIMEOUT_S)
    last_ok_at = models.DateTimeField(null=True, blank=True, editable=False)
    last_error = models.CharField(max_length=1000, blank=True, editable=False)
    last_error_at = models.DateTimeField(null=True, blank=True, editable=False)
    checked_at = models.DateTimeField(null=True, blank=True, editable=False)
    created_at = models.DateTimeField(default=now, editable=False)
    updated_at = models.DateTimeField(default=now)

    class Meta:
        abstract = True

    @property
    def has_secret(self) -> bool:
        return self.secret_encrypted is not None


class McpTransport(models.TextChoices):
    STREAMABLE_HTTP = "streamable_http"


class McpServer(RemoteConnection):
    """One remote MCP server of a tenant, addressed by ``name`` in prompts' ``tools[]``
    (``mcp:<name>`` or ``mcp:<name>/<tool>``). ``tools`` caches the server's ``tools/list``
    (``name``, ``description``, ``input_schema``) as of ``tools_fetched_at``; it is stale
    ``tools_ttl_s`` seconds later."""

    transport = models.CharField(
        max_length=24, choices=McpTransport.choices, default=McpTransport.STREAMABLE_HTTP
    )
    tools_ttl_s = models.PositiveIntegerField(default=DEFAULT_TOOLS_TTL_S)
    tools = models.JSONField(default=list, editable=False)
    tools_fetched_at = models.DateTimeField(null=True, blank=True, editable=False)

    class Meta:
        ordering = ["name"]
        constraints = [
            models.UniqueConstraint(fields=["tenant", "name"], name="mcp_server_unique_name")
        ]

    def __str__(self) -> str:
        return f"MCP server {self.name}"


class A2aAgent(RemoteConnection):
    """One remote A2A agent of a tenant, addressed by ``name`` in prompts' ``tools[]``
    (``a2a:<name>``), which offers the model one tool, ``<name>__send_message``. ``url`` is
    where its card is (under ``/.well-known/agent-card.json``); ``card`` caches the card (A2A
    1.0 JSON) as of ``card_fetched_at``; it is stale ``card_ttl_s`` seconds later."""

    card = models.JSONField(default=dict, editable=False)
    card_ttl_s = models.PositiveIntegerField(default=DEFAULT_TOOLS_TTL_S)
    card_fetched_at = models.DateTimeField(null=True, blank=True, editable=False)

    class Meta:
        ordering = ["name"]
        constraints = [
            models.UniqueConstraint(fields=["tenant", "name"], name="a2a_agent_unique_name")
        ]

    def __str__(self) -> str:
        return f"A2A agent {self.name}"

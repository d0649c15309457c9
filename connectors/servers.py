"""A tenant's MCP servers: saving them (the URL through the egress rules, the secret sealed),
reading them, their cached tool lists and their health.

The secret part of a server's auth (a bearer token, a header's value, an OAuth client secret)
is write-only: sealed with the tenant's data key (:mod:`tenancy.encryption`, context
``connectors.McpServer:<id>:secret``), opened only to build the headers of a call
(:func:`server_endpoint`), never in an answer, a log line or an event.
"""

from __future__ import annotations

import re
from collections.abc import Mapping
from dataclasses import dataclass
from datetime import timedelta
from typing import Any, Final

from django.db import connection, transaction

from common.egress import destination_problem
from common.errors import Conflict, LimitExceeded, NotFound, ValidationFailed
from common.payloads import known_keys_check, object_body, text_field
from common.time import now, to_us
from connectors import client
from connectors.client import Endpoint, ListedTool, McpUnavailable
from connectors.models import McpAuth, McpServer, McpTransport
from tenancy.encryption import secret_decrypt, secret_encrypt
from tenancy.models import Tenant

MAX_SERVERS: Final = 50
NAME_PATTERN: Final = re.compile(r"^[a-z][a-z0-9]*(?:_[a-z0-9]+)*$")
MAX_NAME_CHARS: Final = 32
MAX_SECRET_CHARS: Final = 4096
LIST_TIMEOUT_S: Final = 20.0
MAX_TTL_S: Final = 86_400
MAX_CALL_TIMEOUT_S: Final = 600
FIELDS: Final = ("name", "url", "description", "transport", "auth", "tools_ttl_s",
                 "call_timeout_s")  # fmt: skip
AUTH_FIELDS: Final = ("type", "token", "header_name", "header_value", "client_id",
                      "client_secret", "token_url", "scopes")  # fmt: skip
# The auth keys each type takes (the secret one last), and which of them is its secret.
AUTH_KEYS: Final[dict[str, tuple[str, ...]]] = {
    McpAuth.NONE: (),
    McpAuth.BEARER: ("token",),
    McpAuth.HEADER: ("header_name", "header_value"),
    McpAuth.OAUTH_CLIENT_CREDENTIALS: ("client_id", "token_url", "scopes", "client_secret"),
}
SECRET_KEY: Final[dict[str, str]] = {
    McpAuth.BEARER: "token",
    McpAuth.HEADER: "header_value",
    McpAuth.OAUTH_CLIENT_CREDENTIALS: "client_secret",
}
HEADER_NAME: Final = re.compile(r"^[A-Za-z0-9!#$%&'*+.^_`|~-]{1,100}$")
# Headers the transport sets itself: an auth header may not replace them.
RESERVED_HEADERS: Final = frozenset({
    "accept", "content-type", "content-length", "host", "mcp-session-id",
    "mcp-protocol-version", "last-event-id", "transfer-encoding", "connection",
})  # fmt: skip


def _context(row: McpServer) -> str:
    return f"connectors.McpServer:{row.id}:secret"


# Reading -----------------------------------------------------------------------------------


def mcp_server_get(*, tenant: Tenant, name: str) -> McpServer:
    """The tenant's server ``name``; NotFound otherwise (another tenant's too)."""
    row = McpServer.objects.for_tenant(tenant).filter(name=name).first()
    if row is None:
        raise NotFound(f"no MCP server named {name!r}")
    return row


def mcp_server_list(*, tenant: Tenant) -> list[McpServer]:
    return list(McpServer.objects.for_tenant(tenant).order_by("name"))


def tools_stale(row: McpServer) -> bool:
    """Whether the cached tool list is missing or older than the server's TTL."""
    fetched = row.tools_fetched_at
    return fetched is None or now() - fetched >= timedelta(seconds=row.tools_ttl_s)


def _us(moment: Any) -> int | None:
    return to_us(moment) if moment is not None else None


def mcp_server_json(row: McpServer) -> dict[str, Any]:
    """A server as answers show it: its auth's type and public parts, whether a secret is
    stored, never the secret."""
    auth: dict[str, Any] = {"type": row.auth_type, "secret_set": row.has_secret}
    if row.auth_type == McpAuth.HEADER:
        auth["header_name"] = row.auth_header_name
    if row.auth_type == McpAuth.OAUTH_CLIENT_CREDENTIALS:
        auth.update(client_id=row.oauth_client_id, token_url=row.oauth_token_url,
                    scopes=row.oauth_scopes)  # fmt: skip
    return {
        "id": str(row.id),
        "name": row.name,
        "url": row.url,
        "description": row.description,
        "transport": row.transport,
        "auth": auth,
        "tools_ttl_s": row.tools_ttl_s,
        "call_timeout_s": row.call_timeout_s,
        "tool_count": len(row.tools),
        "tools_fetched_at": _us(row.tools_fetched_at),
        "health": health_json(row),
        "created_at": to_us(row.created_at),
        "updated_at": to_us(row.updated_at),
    }


def health_json(row: McpServer) -> dict[str, Any]:
    """The last contact: ``ok`` is None before any, else whether the last one succeeded."""
    ok: bool | None = None
    if row.checked_at is not None:
        ok = row.last_ok_at is not None and (
            row.last_error_at is None or row.last_ok_at >= row.last_error_at
        )
    return {
        "ok": ok,
        "checked_at": _us(row.checked_at),
        "last_ok_at": _us(row.last_ok_at),
        "last_error": row.last_error or None,
        "last_error_at": _us(row.last_error_at),
    }


# Saving ------------------------------------------------------------------------------------


@dataclass(frozen=True)
class _Auth:
    type: str
    public: dict[str, str]
    secret: str | None  # None: keep the stored one


def _name(value: Any) -> str:
    name = text_field(value, "name", max_chars=MAX_NAME_CHARS)
    if not NAME_PATTERN.match(name):
        raise ValidationFailed(
            "name must be lower-case letters and digits, words joined by single underscores, "
            f"starting with a letter (<= {MAX_NAME_CHARS}): it becomes the prefix of the "
            "tool names the model sees (<name>__<tool>)",
            field="name",
        )
    return name


def _url(value: Any, field: str) -> str:
    url = text_field(value, field, max_chars=500).strip()
    if not url:
        raise ValidationFailed(f"{field} is required", field=field)
    if any(c.isspace() for c in url):
        raise ValidationFailed(f"{field} must be an http(s) URL", field=field)
    problem = destination_problem(url)  # the scheme, the host, a refused address
    if problem is not None:
        raise ValidationFailed(problem, field=field)
    return url


def _int(value: Any, field: str, *, low: int, high: int) -> int:
    if isinstance(value, bool) or not isinstance(value, int) or not low <= value <= high:
        raise ValidationFailed(f"{field} must be an integer from {low} to {high}", field=field)
    return int(value)


def _auth(value: Any, current: McpServer | None) -> _Auth:
    if not isinstance(value, Mapping):
        raise ValidationFailed("auth must be an object with a type", field="auth")
    known_keys_check(value, AUTH_FIELDS, path="auth")
    kind = value.get("type")
    if kind not in McpAuth.values:
        raise ValidationFailed(
            f"auth.type must be one of {', '.join(McpAuth.values)}", field="auth.type"
        )
    keys = AUTH_KEYS[kind]
    for key in value:
        if key != "type" and key not in keys:
            raise ValidationFailed(f"{key} does not apply to auth of type {kind}",
                                   field=f"auth.{key}")  # fmt: skip
    secret_key = SECRET_KEY.get(kind)
    public: dict[str, str] = {}
    for key in keys:
        if key == secret_key:
            continue
        text = text_field(value.get(key), f"auth.{key}", max_chars=500).strip()
        if not text and key != "scopes":
            raise ValidationFailed(f"auth.{key} is required for auth of type {kind}",
                                   field=f"auth.{key}")  # fmt: skip
        public[key] = text
    if "header_name" in public:
        header = public["header_name"]
        if not HEADER_NAME.match(header) or header.lower() in RESERVED_HEADERS:
            raise ValidationFailed(
                f"auth.header_name {header!r} is not a header name calls may set",
                field="auth.header_name",
            )
    if "token_url" in public:
        public["token_url"] = _url(public["token_url"], "auth.token_url")
    secret: str | None = None
    if secret_key is not None:
        raw = value.get(secret_key)
        keep = current is not None and current.auth_type == kind and current.has_secret
        if raw is None and keep:
            return _Auth(kind, public, None)
        if not isinstance(raw, str) or not raw.strip() or len(raw) > MAX_SECRET_CHARS:
            raise ValidationFailed(
                f"auth.{secret_key} must be a non-empty string of at most {MAX_SECRET_CHARS} "
                f"characters (write-only: stored encrypted, never shown)",
                field=f"auth.{secret_key}",
            )
        if any(c in raw for c in "\r\n\0"):
            raise ValidationFailed(f"auth.{secret_key} may not hold line breaks",
                                   field=f"auth.{secret_key}")  # fmt: skip
        secret = raw.strip()
    return _Auth(kind, public, secret)


@transaction.atomic
def mcp_server_save(
    *, tenant: Tenant, data: Mapping[str, Any], current: McpServer | None = None
) -> McpServer:
    """Create a server (``current`` None: ``name`` and ``url`` required; ``auth`` defaults to
    none) or change ``current`` with the fields sent. A new URL or auth drops the cached
    tool list and the health, which were another destination's. Raises ValidationFailed
    naming the field, Conflict for a taken name, LimitExceeded past ``MAX_SERVERS``."""
    body = object_body(data, FIELDS)
    rows = McpServer.objects.for_tenant(tenant)
    row = current if current is not None else McpServer(tenant=tenant)
    if current is None and "name" not in body:
        raise ValidationFailed("name is required", field="name")
    if current is None and "url" not in body:
        raise ValidationFailed("url is required", field="url")
    name = _name(body["name"]) if "name" in body else row.name
    url = _url(body["url"], "url") if "url" in body else row.url
    if "transport" in body and body["transport"] not in McpTransport.values:
        raise ValidationFailed(
            f"transport must be one of {', '.join(McpTransport.values)}", field="transport"
        )
    auth = _auth(body["auth"], current) if "auth" in body else None
    if name != (current.name if current else None) and rows.filter(name=name).exists():
        raise Conflict(f"an MCP server named {name!r} already exists", field="name")
    if current is None and rows.count() >= MAX_SERVERS:
        raise LimitExceeded(f"a tenant has at most {MAX_SERVERS} MCP servers")
    moved = current is not None and (url != current.url or auth is not None)
    row.name, row.url = name, url
    if "description" in body:
        row.description = text_field(body["description"], "description", max_chars=500)
    if "tools_ttl_s" in body:
        row.tools_ttl_s = _int(body["tools_ttl_s"], "tools_ttl_s", low=0, high=MAX_TTL_S)
    if "call_timeout_s" in body:
        row.call_timeout_s = _int(
            body["call_timeout_s"], "call_timeout_s", low=1, high=MAX_CALL_TIMEOUT_S
        )
    if moved:
        _forget_contact(row)
    if auth is not None:
        _auth_apply(row, auth)  # the id (a default) is set already: the secret's context
    row.updated_at = now()
    row.save()
    return row


def _auth_apply(row: McpServer, auth: _Auth) -> None:
    row.auth_type = auth.type
    row.auth_header_name = auth.public.get("header_name", "")
    row.oauth_client_id = auth.public.get("client_id", "")
    row.oauth_token_url = auth.public.get("token_url", "")
    row.oauth_scopes = auth.public.get("scopes", "")
    if auth.type == McpAuth.NONE:
        row.secret_encrypted = None
    elif auth.secret is not None:
        row.secret_encrypted = secret_encrypt(
            tenant=row.tenant, plaintext=auth.secret.encode(), context=_context(row)
        )


def _forget_contact(row: McpServer) -> None:
    row.tools, row.tools_fetched_at = [], None
    row.last_ok_at = row.last_error_at = row.checked_at = None
    row.last_error = ""


def mcp_server_delete(*, tenant: Tenant, row: McpServer) -> None:
    """Delete a server. Prompts that name it keep their entries: a flow offers no tool for
    them, and the next definition write must drop them (validation names the server)."""
    McpServer.objects.for_tenant(tenant).filter(pk=row.pk).delete()


# Contacting ----------------------------------------------------------------------------------


def server_endpoint(row: McpServer) -> Endpoint:
    """The URL and the headers that authenticate a call (the secret opened here, for the
    call only). Raises McpUnavailable when an OAuth token cannot be obtained."""
    headers: dict[str, str] = {}
    if row.auth_type == McpAuth.NONE or row.secret_encrypted is None:
        return Endpoint(row.url, headers)
    secret = secret_decrypt(
        tenant=row.tenant, ciphertext=bytes(row.secret_encrypted), context=_context(row)
    ).decode()
    if row.auth_type == McpAuth.BEARER:
        headers["Authorization"] = f"Bearer {secret}"
    elif row.auth_type == McpAuth.HEADER:
        headers[row.auth_header_name] = secret
    else:
        token = client.oauth_token(
            cache_key=_token_key(row), token_url=row.oauth_token_url,
            client_id=row.oauth_client_id, client_secret=secret, scopes=row.oauth_scopes,
            timeout=float(min(row.call_timeout_s, LIST_TIMEOUT_S)),
        )  # fmt: skip
        headers["Authorization"] = f"Bearer {token}"
    return Endpoint(row.url, headers)


def _token_key(row: McpServer) -> str:
    return f"{row.tenant_id}:{row.pk}:{to_us(row.updated_at)}"


def token_forget(row: McpServer) -> None:
    """Drop the OAuth access token this process keeps for ``row`` (after a failed contact:
    the server may have refused it), so the next contact asks for a new one."""
    if row.auth_type == McpAuth.OAUTH_CLIENT_CREDENTIALS:
        client.oauth_forget(_token_key(row))


def contact_recorded(row: McpServer, *, error: str | None) -> None:
    """Record how a contact went on the row's health columns (one UPDATE, no transaction)."""
    moment = now()
    row.checked_at = moment
    if error is None:
        row.last_ok_at = moment
        McpServer.objects.filter(pk=row.pk).update(checked_at=moment, last_ok_at=moment)
    else:
        row.last_error, row.last_error_at = error[:1000], moment
        McpServer.objects.filter(pk=row.pk).update(
            checked_at=moment, last_error=row.last_error, last_error_at=moment
        )


def server_failure(row: McpServer, error: McpUnavailable) -> str:
    """The message of a failed contact, naming the server (never its secret)."""
    if error.code == "egress_refused":
        return f"MCP server {row.name!r} may not be reached: {error.message}"
    return f"MCP server {row.name!r} could not be reached: {error.message}"


def tools_fetch(row: McpServer) -> list[ListedTool]:
    """Ask the server for its tools now, store them as the cache and record the contact.
    Raises McpUnavailable (recorded as the health's error). Must not run inside a
    transaction: the server may take its time."""
    if connection.in_atomic_block:
        raise RuntimeError("tools_fetch would hold a transaction open across a remote call")
    try:
        listed = client.tools_list(
            server_endpoint(row), timeout=float(min(row.call_timeout_s, LIST_TIMEOUT_S))
        )
    except McpUnavailable as error:
        token_forget(row)
        contact_recorded(row, error=server_failure(row, error))
        raise
    moment = now()
    row.tools = [
        {"name": t.name, "description": t.description, "input_schema": t.input_schema}
        for t in listed
    ]
    row.tools_fetched_at = moment
    McpServer.objects.filter(pk=row.pk).update(tools=row.tools, tools_fetched_at=moment)
    contact_recorded(row, error=None)
    return listed


@dataclass(frozen=True)
class ToolListing:
    """A server's tools as the cache holds them after :func:`tools_current`: ``error`` says
    why they could not be refreshed (then they are the stale ones, or none)."""

    server: McpServer
    tools: list[dict[str, Any]]
    error: str | None = None

    @property
    def stale(self) -> bool:
        return tools_stale(self.server)


def tools_current(row: McpServer, *, refresh: bool = False) -> ToolListing:
    """The server's tools: the cache while fresh (unless ``refresh``), else fetched again; when
    fetching fails, the stale cache with the reason. Inside a transaction nothing is fetched
    (a remote call may not hold one open): the cache is answered as it is."""
    if not (refresh or tools_stale(row)) or connection.in_atomic_block:
        return ToolListing(row, list(row.tools))
    try:
        tools_fetch(row)
    except McpUnavailable as error:
        return ToolListing(row, list(row.tools), server_failure(row, error))
    return ToolListing(row, list(row.tools))


def tool_listing_json(listing: ToolListing, *, names: Mapping[str, str]) -> dict[str, Any]:
    """``GET /mcp-servers/{name}/tools``: the tools with the names the model sees them by."""
    row = listing.server
    return {
        "server": row.name,
        "fetched_at": _us(row.tools_fetched_at),
        "stale": listing.stale,
        "error": listing.error,
        "tools": [
            {
                "name": names.get(tool["name"]),
                "remote_name": tool["name"],
                "description": tool["description"],
                "input_schema": tool["input_schema"],
            }
            for tool in listing.tools
        ],
        "health": health_json(row),
    }

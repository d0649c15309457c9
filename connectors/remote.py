"""What every remote connection of a tenant shares (an MCP server, an A2A agent): its name, URL
and auth as a write reads them, its secret sealed, the headers a call sends, and its health.

The secret part of an auth (a bearer token, a header's value, an OAuth client secret) is
write-only: sealed with the tenant's data key (:mod:`tenancy.encryption`, context
``connectors.<Model>:<id>:secret``), opened only to build the headers of a call
(:func:`endpoint_of`), never in an answer, a log line or an event.
"""

from __future__ import annotations

import datetime as dt
import re
from collections.abc import Callable, Mapping
from dataclasses import dataclass
from typing import Any, Final, Generic, TypeVar, cast

from common.egress import destination_problem
from common.errors import Conflict, LimitExceeded, NotFound, ValidationFailed
from common.payloads import known_keys_check, object_body, text_field
from common.time import now, to_us
from connectors.models import RemoteAuth, RemoteConnection
from connectors.transport import Endpoint, RemoteUnavailable, oauth_forget, oauth_token
from tenancy.encryption import secret_decrypt, secret_encrypt
from tenancy.models import Tenant

NAME_PATTERN: Final = re.compile(r"^[a-z][a-z0-9]*(?:_[a-z0-9]+)*$")
MAX_NAME_CHARS: Final = 32
MAX_SECRET_CHARS: Final = 4096
TOKEN_TIMEOUT_S: Final = 20.0
MAX_TTL_S: Final = 86_400
MAX_CALL_TIMEOUT_S: Final = 600
AUTH_FIELDS: Final = ("type", "token", "header_name", "header_value", "client_id",
                      "client_secret", "token_url", "scopes")  # fmt: skip
# The auth keys each type takes (the secret one last), and which of them is its secret.
AUTH_KEYS: Final[dict[str, tuple[str, ...]]] = {
    RemoteAuth.NONE: (),
    RemoteAuth.BEARER: ("token",),
    RemoteAuth.HEADER: ("header_name", "header_value"),
    RemoteAuth.OAUTH_CLIENT_CREDENTIALS: ("client_id", "token_url", "scopes", "client_secret"),
}
SECRET_KEY: Final[dict[str, str]] = {
    RemoteAuth.BEARER: "token",
    RemoteAuth.HEADER: "header_value",
    RemoteAuth.OAUTH_CLIENT_CREDENTIALS: "client_secret",
}
HEADER_NAME: Final = re.compile(r"^[A-Za-z0-9!#$%&'*+.^_`|~-]{1,100}$")
# Headers the transports set themselves: an auth header may not replace them.
RESERVED_HEADERS: Final = frozenset({
    "accept", "content-type", "content-length", "host", "mcp-session-id",
    "mcp-protocol-version", "last-event-id", "transfer-encoding", "connection", "a2a-version",
    "a2a-extensions",
})  # fmt: skip


C = TypeVar("C", bound=RemoteConnection)


def _context(row: RemoteConnection) -> str:
    return f"connectors.{type(row).__name__}:{row.id}:secret"


# Reading ------------------------------------------------------------------------------------


def us(moment: Any) -> int | None:
    return to_us(moment) if moment is not None else None


def auth_json(row: RemoteConnection) -> dict[str, Any]:
    """The auth as answers show it: its type and public parts, whether a secret is stored,
    never the secret."""
    auth: dict[str, Any] = {"type": row.auth_type, "secret_set": row.has_secret}
    if row.auth_type == RemoteAuth.HEADER:
        auth["header_name"] = row.auth_header_name
    if row.auth_type == RemoteAuth.OAUTH_CLIENT_CREDENTIALS:
        auth.update(client_id=row.oauth_client_id, token_url=row.oauth_token_url,
                    scopes=row.oauth_scopes)  # fmt: skip
    return auth


def health_json(row: RemoteConnection) -> dict[str, Any]:
    """The last contact: ``ok`` is None before any, else whether the last one succeeded."""
    ok: bool | None = None
    if row.checked_at is not None:
        ok = row.last_ok_at is not None and (
            row.last_error_at is None or row.last_ok_at >= row.last_error_at
        )
    return {
        "ok": ok,
        "checked_at": us(row.checked_at),
        "last_ok_at": us(row.last_ok_at),
        "last_error": row.last_error or None,
        "last_error_at": us(row.last_error_at),
    }


# Writing ------------------------------------------------------------------------------------


@dataclass(frozen=True)
class Auth:
    type: str
    public: dict[str, str]
    secret: str | None  # None: keep the stored one


def name_field(value: Any, *, usage: str) -> str:
    """A connection's name; ``usage`` says what it becomes (for the error)."""
    name = text_field(value, "name", max_chars=MAX_NAME_CHARS)
    if not NAME_PATTERN.match(name):
        raise ValidationFailed(
            "name must be lower-case letters and digits, words joined by single underscores, "
            f"starting with a letter (<= {MAX_NAME_CHARS}): {usage}",
            field="name",
        )
    return name


def url_field(value: Any, field: str) -> str:
    """An http(s) URL the egress rules allow (judged again at every connection)."""
    url = text_field(value, field, max_chars=500).strip()
    if not url:
        raise ValidationFailed(f"{field} is required", field=field)
    if any(c.isspace() for c in url):
        raise ValidationFailed(f"{field} must be an http(s) URL", field=field)
    problem = destination_problem(url)  # the scheme, the host, a refused address
    if problem is not None:
        raise ValidationFailed(problem, field=field)
    return url


def int_field(value: Any, field: str, *, low: int, high: int) -> int:
    if isinstance(value, bool) or not isinstance(value, int) or not low <= value <= high:
        raise ValidationFailed(f"{field} must be an integer from {low} to {high}", field=field)
    return int(value)


def auth_field(value: Any, current: RemoteConnection | None) -> Auth:
    """The ``auth`` object of a write: its type, public parts and secret (None when a change
    keeping the type leaves the secret out, to keep the stored one)."""
    if not isinstance(value, Mapping):
        raise ValidationFailed("auth must be an object with a type", field="auth")
    known_keys_check(value, AUTH_FIELDS, path="auth")
    kind = value.get("type")
    if kind not in RemoteAuth.values:
        raise ValidationFailed(
            f"auth.type must be one of {', '.join(RemoteAuth.values)}", field="auth.type"
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
        public["token_url"] = url_field(public["token_url"], "auth.token_url")
    secret: str | None = None
    if secret_key is not None:
        raw = value.get(secret_key)
        keep = current is not None and current.auth_type == kind and current.has_secret
        if raw is None and keep:
            return Auth(kind, public, None)
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
    return Auth(kind, public, secret)


def auth_apply(row: RemoteConnection, auth: Auth) -> None:
    """Set ``auth`` on ``row``, sealing its secret (``row.id`` must be set: the context)."""
    row.auth_type = auth.type
    row.auth_header_name = auth.public.get("header_name", "")
    row.oauth_client_id = auth.public.get("client_id", "")
    row.oauth_token_url = auth.public.get("token_url", "")
    row.oauth_scopes = auth.public.get("scopes", "")
    if auth.type == RemoteAuth.NONE:
        row.secret_encrypted = None
    elif auth.secret is not None:
        row.secret_encrypted = secret_encrypt(
            tenant=row.tenant, plaintext=auth.secret.encode(), context=_context(row)
        )


@dataclass(frozen=True)
class Kind(Generic[C]):
    """What saving differs in between kinds of connection: the model, the fields a write
    may send, what the name becomes (for the error), how messages name one, how many a
    tenant may have, how its own fields are set from a write (validated there) and what it
    forgets when its URL or auth changes (what it offered, cached)."""

    model: type[C]
    fields: tuple[str, ...]
    usage: str
    noun: str
    limit: int
    apply: Callable[[C, Mapping[str, Any]], None]
    forget: Callable[[C], None]


def connection_get(kind: Kind[C], *, tenant: Tenant, name: str) -> C:
    """The tenant's connection ``name`` of ``kind``; NotFound otherwise (another tenant's
    too)."""
    row = cast("C | None", kind.model.objects.for_tenant(tenant).filter(name=name).first())
    if row is None:
        raise NotFound(f"no {kind.noun} named {name!r}")
    return row


def connection_list(kind: Kind[C], *, tenant: Tenant) -> list[C]:
    return cast("list[C]", list(kind.model.objects.for_tenant(tenant).order_by("name")))


def cache_stale(fetched: dt.datetime | None, ttl_s: int) -> bool:
    """Whether what a connection offered, fetched at ``fetched``, is missing or older than
    ``ttl_s`` seconds."""
    return fetched is None or now() - fetched >= dt.timedelta(seconds=ttl_s)


def connection_save(
    kind: Kind[C], *, tenant: Tenant, data: Mapping[str, Any], current: C | None
) -> C:
    """Create a connection of ``kind`` (``current`` None: ``name`` and ``url`` required;
    ``auth`` defaults to none) or change ``current`` with the fields sent. A new URL or auth
    forgets the health and what the connection offered, which were another destination's.
    Raises ValidationFailed naming the field, Conflict for a taken name, LimitExceeded past
    the kind's limit. Call it in a transaction (its callers are atomic)."""
    body = object_body(data, kind.fields)
    rows = kind.model.objects.for_tenant(tenant)
    row = current if current is not None else kind.model(tenant=tenant)
    for required in ("name", "url"):
        if current is None and required not in body:
            raise ValidationFailed(f"{required} is required", field=required)
    name = name_field(body["name"], usage=kind.usage) if "name" in body else row.name
    url = url_field(body["url"], "url") if "url" in body else row.url
    auth = auth_field(body["auth"], current) if "auth" in body else None
    if name != (current.name if current else None) and rows.filter(name=name).exists():
        raise Conflict(f"an {kind.noun} named {name!r} already exists", field="name")
    if current is None and rows.count() >= kind.limit:
        raise LimitExceeded(f"a tenant has at most {kind.limit} {kind.noun}s")
    moved = current is not None and (url != current.url or auth is not None)
    row.name, row.url = name, url
    if "description" in body:
        row.description = text_field(body["description"], "description", max_chars=500)
    if "call_timeout_s" in body:
        row.call_timeout_s = int_field(
            body["call_timeout_s"], "call_timeout_s", low=1, high=MAX_CALL_TIMEOUT_S
        )
    kind.apply(row, body)
    if moved:
        contact_forget(row)
        kind.forget(row)
    if auth is not None:
        auth_apply(row, auth)  # the id (a default) is set already: the secret's context
    row.updated_at = now()
    row.save()
    return row


def contact_forget(row: RemoteConnection) -> None:
    """Forget the health (after the URL or the auth changed: it was another destination's)."""
    row.last_ok_at = row.last_error_at = row.checked_at = None
    row.last_error = ""


# Contacting ----------------------------------------------------------------------------------


def endpoint_of(row: RemoteConnection, url: str | None = None) -> Endpoint:
    """``url`` (default: the row's) and the headers that authenticate a call to it (the
    secret opened here, for the call only). Raises RemoteUnavailable when an OAuth token
    cannot be obtained."""
    headers: dict[str, str] = {}
    target = url or row.url
    if row.auth_type == RemoteAuth.NONE or row.secret_encrypted is None:
        return Endpoint(target, headers)
    secret = secret_decrypt(
        tenant=row.tenant, ciphertext=bytes(row.secret_encrypted), context=_context(row)
    ).decode()
    if row.auth_type == RemoteAuth.BEARER:
        headers["Authorization"] = f"Bearer {secret}"
    elif row.auth_type == RemoteAuth.HEADER:
        headers[row.auth_header_name] = secret
    else:
        token = oauth_token(
            cache_key=_token_key(row), token_url=row.oauth_token_url,
            client_id=row.oauth_client_id, client_secret=secret, scopes=row.oauth_scopes,
            timeout=float(min(row.call_timeout_s, TOKEN_TIMEOUT_S)),
        )  # fmt: skip
        headers["Authorization"] = f"Bearer {token}"
    return Endpoint(target, headers)


def _token_key(row: RemoteConnection) -> str:
    return f"{row.tenant_id}:{type(row).__name__}:{row.pk}:{to_us(row.updated_at)}"


def token_forget(row: RemoteConnection) -> None:
    """Drop the OAuth access token this process keeps for ``row`` (after a failed contact:
    the other side may have refused it), so the next contact asks for a new one."""
    if row.auth_type == RemoteAuth.OAUTH_CLIENT_CREDENTIALS:
        oauth_forget(_token_key(row))


def contact_recorded(row: RemoteConnection, *, error: str | None) -> None:
    """Record how a contact went on the row's health columns (one UPDATE, no transaction)."""
    moment = now()
    row.checked_at = moment
    rows = type(row).objects.filter(pk=row.pk)
    if error is None:
        row.last_ok_at = moment
        rows.update(checked_at=moment, last_ok_at=moment)
    else:
        row.last_error, row.last_error_at = error[:1000], moment
        rows.update(checked_at=moment, last_error=row.last_error, last_error_at=moment)


def contact_failed(row: RemoteConnection, error: RemoteUnavailable, *, what: str) -> str:
    """Record a failed contact with ``row`` (``what``: how messages name it, e.g. ``MCP
    server 'x'``) and return its message, which never holds a secret."""
    token_forget(row)
    if error.code == "egress_refused":
        message = f"{what} may not be reached: {error.message}"
    else:
        message = f"{what} could not be reached: {error.message}"
    contact_recorded(row, error=message)
    return message

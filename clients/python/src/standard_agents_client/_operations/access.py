"""The caller, WebSocket tickets and API keys."""

from __future__ import annotations

import datetime as dt

from standard_agents_client._call import (
    Call,
    body,
    query,
    read_json,
    read_page,
    segment,
)
from standard_agents_client.pagination import Page
from standard_agents_client.times import us_from_datetime
from standard_agents_client.types import (
    ApiKey,
    ApiKeyCreated,
    Me,
    Role,
    WsTicket,
)


def me() -> Call[Me]:
    """The caller: its tenant, its role and how it authenticated."""
    return Call("GET", "/me", read_json)


def ws_ticket() -> Call[WsTicket]:
    """A one-time WebSocket ticket for the caller (valid 30 s, one use)."""
    return Call("POST", "/ws-tickets", read_json)


def api_key_list(*, limit: int | None = None, cursor: str | None = None) -> Call[Page[ApiKey]]:
    """The tenant's API keys (admins; never their secrets)."""
    return Call("GET", "/api-keys", read_page, query(limit=limit, cursor=cursor))


def api_key_create(
    name: str, *, role: Role | None = None, expires_at: dt.datetime | None = None
) -> Call[ApiKeyCreated]:
    """A new API key (admins): the answer's ``key`` is the full secret, shown this once.
    ``role`` defaults to ``member``."""
    expires = us_from_datetime(expires_at) if expires_at is not None else None
    return Call("POST", "/api-keys", read_json, json=body(name=name, role=role, expires_at=expires))


def api_key_get(api_key_id: str) -> Call[ApiKey]:
    """One API key (admins)."""
    return Call("GET", f"/api-keys/{segment(api_key_id)}", read_json)


def api_key_revoke(api_key_id: str) -> Call[ApiKey]:
    """Revoke an API key (admins): it stops working at once."""
    return Call("POST", f"/api-keys/{segment(api_key_id)}/revoke", read_json)

"""Audit entries of remote connections' writes (MCP servers, A2A agents): the connection's
kind and name, and the names of the fields sent, never a secret's value."""

from __future__ import annotations

from collections.abc import Mapping

from common.audit import AuditAction
from connectors.models import A2aAgent, McpServer, RemoteConnection
from tenancy.auditing import audit_by
from tenancy.principals import Principal

TARGETS: dict[type[RemoteConnection], str] = {McpServer: "mcp_server", A2aAgent: "a2a_agent"}


def connection_audit(
    principal: Principal, action: AuditAction, row: RemoteConnection, sent: object
) -> None:
    """Record ``action`` on ``row``; call it inside the write's transaction. ``fields`` names
    the top-level fields sent and, for an ``auth``, its keys (the secret's among them when one
    was sent, never its value)."""
    fields = sorted(str(key) for key in sent) if isinstance(sent, Mapping) else []
    details: dict[str, object] = {"fields": fields}
    auth = sent.get("auth") if isinstance(sent, Mapping) else None
    if isinstance(auth, Mapping):
        details["auth_fields"] = sorted(str(key) for key in auth)
    audit_by(principal, action, TARGETS[type(row)], row.name, details)

"""The admin's page of MCP servers (connectors.admin): a server's tools and health, never its
secret; deleting goes through the service."""

from __future__ import annotations

import pytest
from django.test import Client

from common.time import now
from connectors.models import McpServer
from connectors.remote import contact_recorded
from connectors.servers import mcp_server_save
from tenancy.models import Tenant

pytestmark = pytest.mark.django_db

SECRET = "sentinel-admin-page-token-0a9b8c"


@pytest.fixture
def server(tenant: Tenant) -> McpServer:
    row = mcp_server_save(
        tenant=tenant,
        data={"name": "weather", "url": "https://mcp.example.com/mcp",
              "auth": {"type": "bearer", "token": SECRET}},
    )  # fmt: skip
    row.tools = [{"name": "forecast", "description": "The forecast.", "input_schema": {}}]
    row.tools_fetched_at = now()
    row.save()
    contact_recorded(row, error="MCP server 'weather' could not be reached: timed out")
    return row


def test_the_admin_shows_the_tools_and_health_never_the_secret(
    admin_client: Client, server: McpServer
) -> None:
    listing = admin_client.get("/admin/connectors/mcpserver/")
    page = admin_client.get(f"/admin/connectors/mcpserver/{server.pk}/change/")

    assert listing.status_code == 200
    assert "weather" in listing.content.decode()
    assert page.status_code == 200
    text = page.content.decode()
    assert "forecast" in text
    assert "could not be reached: timed out" in text
    assert "stored (write-only)" in text
    assert SECRET not in text
    assert SECRET not in listing.content.decode()


def test_the_admin_deletes_through_the_service(admin_client: Client, server: McpServer) -> None:
    response = admin_client.post(
        f"/admin/connectors/mcpserver/{server.pk}/delete/", {"post": "yes"}
    )

    assert response.status_code == 302
    assert not McpServer.objects.filter(pk=server.pk).exists()

"""The MCP endpoint: ``/mcp/`` (and ``/mcp``, which clients configured without the slash
use; a redirect would not carry a POST's body)."""

from django.urls import URLPattern, re_path

from interop.mcp_server.views import mcp_endpoint

urlpatterns: list[URLPattern] = [re_path(r"^mcp/?$", mcp_endpoint, name="mcp")]

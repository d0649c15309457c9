"""The ecosystem's protocols, each under its own path (included by config.urls at the root)."""

from django.urls import URLPattern, URLResolver, include, path

urlpatterns: list[URLPattern | URLResolver] = [
    path("", include("interop.mcp_server.urls")),  # /mcp/: our agents as MCP tools
    path("", include("interop.a2a.urls")),  # /a2a/{tenant}/{agent}/: our agents as A2A agents
    path("api/v1/", include("interop.agui.urls")),  # /api/v1/agui/{agent}: AG-UI runs
]

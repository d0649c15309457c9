from django.apps import AppConfig


class ConnectorsConfig(AppConfig):
    """A tenant's remote tool servers (MCP servers, A2A agents) and calls of their tools."""

    name = "connectors"
    default_auto_field = "django.db.models.BigAutoField"

    def ready(self) -> None:
        from agents.remote_refs import remote_source_register
        from connectors.tools import MCP_PREFIX, mcp_ref_lookup

        # Definition validation (in agents, below this app) judges mcp: references here.
        remote_source_register(MCP_PREFIX, mcp_ref_lookup)

from django.apps import AppConfig


class ConnectorsConfig(AppConfig):
    """A tenant's remote tool servers (MCP servers, A2A agents) and calls of their tools."""

    name = "connectors"
    default_auto_field = "django.db.models.BigAutoField"

    def ready(self) -> None:
        from agents.remote_refs import remote_source_register
        from connectors.tools import A2A_PREFIX, MCP_PREFIX, a2a_ref_lookup, mcp_ref_lookup

        # Definition validation (in agents, below this app) judges these references here.
        remote_source_register(MCP_PREFIX, mcp_ref_lookup)
        remote_source_register(A2A_PREFIX, a2a_ref_lookup)

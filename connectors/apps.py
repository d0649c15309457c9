from django.apps import AppConfig


class ConnectorsConfig(AppConfig):
    """A tenant's remote tool servers (MCP servers, A2A agents) and calls of their tools."""

    name = "connectors"
    default_auto_field = "django.db.models.BigAutoField"

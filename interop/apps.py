from django.apps import AppConfig


class InteropConfig(AppConfig):
    """The ecosystem's protocols over the thread services: an MCP server, AG-UI and A2A."""

    name = "interop"
    default_auto_field = "django.db.models.BigAutoField"

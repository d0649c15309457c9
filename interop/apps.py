from django.apps import AppConfig


class InteropConfig(AppConfig):
    """The ecosystem's protocols over the thread services: an MCP server, AG-UI and A2A."""

    name = "interop"
    default_auto_field = "django.db.models.BigAutoField"

    def ready(self) -> None:
        from interop.a2a.push import push_register

        # Webhook deliveries (in threads, below this app) make A2A push bodies here.
        push_register()

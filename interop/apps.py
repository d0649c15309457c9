from __future__ import annotations

from typing import TYPE_CHECKING

from django.apps import AppConfig

if TYPE_CHECKING:
    from threads.models import WebhookDelivery, WebhookEndpoint
    from threads.services.webhooks import WebhookRequest


class InteropConfig(AppConfig):
    """The ecosystem's protocols over the thread services: an MCP server, AG-UI and A2A."""

    name = "interop"
    default_auto_field = "django.db.models.BigAutoField"

    def ready(self) -> None:
        from threads.services.webhooks import webhook_format_register

        # Webhook deliveries (in threads, below this app) make A2A push bodies here; the A2A
        # SDK loads with the first one (not at every process's start).
        webhook_format_register("a2a", _a2a_push_render)


def _a2a_push_render(endpoint: WebhookEndpoint, delivery: WebhookDelivery) -> WebhookRequest | None:
    from interop.a2a.push import push_render

    return push_render(endpoint, delivery)

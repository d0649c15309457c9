"""WebSocket routes of the threads app (mounted by ``config.routing``)."""

from __future__ import annotations

from typing import Any

from django.urls import re_path

from threads.consumers import TenantEventsConsumer, ThreadEventsConsumer

websocket_urlpatterns: list[Any] = [
    re_path(
        r"^ws/threads/(?P<thread_id>[0-9a-fA-F-]{32,36})/?$",
        ThreadEventsConsumer.as_asgi(),
        name="ws-thread-events",
    ),
    re_path(r"^ws/events/?$", TenantEventsConsumer.as_asgi(), name="ws-tenant-events"),
]

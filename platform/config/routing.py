"""WebSocket routes. Apps add theirs here as they gain consumers."""

from typing import Any

websocket_urlpatterns: list[Any] = []

"""WebSocket routes. Apps add theirs here as they gain consumers."""

from typing import Any

from threads.routing import websocket_urlpatterns as thread_sockets

websocket_urlpatterns: list[Any] = [*thread_sockets]

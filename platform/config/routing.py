"""WebSocket routes. Apps add theirs here as they gain consumers; any other path is
accepted and closed with ``4404`` and a reason naming the routes (never an HTTP 500)."""

from typing import Any

from channels.generic.websocket import AsyncWebsocketConsumer
from django.urls import re_path

from threads.routing import websocket_urlpatterns as thread_sockets

CLOSE_NOT_FOUND = 4404
ROUTES = "/ws/threads/{id}/, /ws/events/"


class NoSuchSocket(AsyncWebsocketConsumer):
    """A path no route takes: accepted, so that browsers see the code, then closed."""

    async def connect(self) -> None:
        await self.accept()
        reason = f"not found: no such socket (routes: {ROUTES})"
        await self.close(code=CLOSE_NOT_FOUND, reason=reason)


websocket_urlpatterns: list[Any] = [
    *thread_sockets,
    re_path(r"", NoSuchSocket.as_asgi(), name="ws-not-found"),
]

"""A read timeout for request bodies, as ASGI middleware around the HTTP application.

uvicorn waits for a body as long as the client keeps the connection open: a request whose
``Content-Length`` overstates its body would hold the connection, and a task, forever.
:class:`BodyTimeout` bounds the wait for each piece of the body (an idle timeout, so a slow
but steady upload is never cut): when ``REQUEST_BODY_TIMEOUT_S`` pass without one, it
answers ``408`` itself, with ``Connection: close`` so the server drops the connection, and
tells the application the client went away, which Django takes as an aborted request.

Only the body is timed: once it is complete, ``receive`` is passed through untouched (Django
then listens on it for the client's disconnect while it streams a response).
"""

from __future__ import annotations

import asyncio
import json
import logging
from collections.abc import Awaitable, Callable, Mapping
from typing import Any

from django.conf import settings

from common.api import error_body

logger = logging.getLogger(__name__)

Scope = dict[str, Any]
Message = Mapping[str, Any]
Receive = Callable[[], Awaitable[Message]]
Send = Callable[[Message], Awaitable[None]]
ASGIApp = Callable[[Scope, Receive, Send], Awaitable[None]]


class BodyTimeout:
    """Wraps an ASGI application: an HTTP request body that goes ``timeout_s`` seconds
    (default: the setting ``REQUEST_BODY_TIMEOUT_S``, read per request) without a new piece
    is answered 408, JSON with the error shape under ``/api/``, and the connection closed."""

    def __init__(self, app: ASGIApp, *, timeout_s: float | None = None) -> None:
        self.app = app
        self.timeout_s = timeout_s

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        if scope["type"] != "http":
            await self.app(scope, receive, send)
            return
        timeout_s = self.timeout_s or float(settings.REQUEST_BODY_TIMEOUT_S)
        await self.app(scope, _TimedBody(scope, receive, send, timeout_s).receive, send)


class _TimedBody:
    """One request's ``receive``, timed until its body is complete."""

    def __init__(self, scope: Scope, receive: Receive, send: Send, timeout_s: float) -> None:
        self.scope, self._receive, self._send, self.timeout_s = scope, receive, send, timeout_s
        self.complete = False

    async def receive(self) -> Message:
        if self.complete:
            return await self._receive()
        try:
            async with asyncio.timeout(self.timeout_s):
                message = await self._receive()
        except TimeoutError:
            self.complete = True
            await self._refuse()
            return {"type": "http.disconnect"}
        if message["type"] != "http.request" or not message.get("more_body", False):
            self.complete = True
        return message

    async def _refuse(self) -> None:
        path = str(self.scope.get("path", ""))
        logger.warning("408: the body of %s %s stalled", self.scope.get("method"), path[:200])
        message = (
            f"the request body stopped arriving: nothing came for {self.timeout_s:g} s "
            "(REQUEST_BODY_TIMEOUT_S); is its Content-Length right?"
        )
        if path.startswith("/api/"):
            body = json.dumps(error_body("request_timeout", message)).encode()
            content_type = b"application/json"
        else:
            body, content_type = message.encode(), b"text/plain; charset=utf-8"
        await self._send(
            {
                "type": "http.response.start",
                "status": 408,
                "headers": [
                    (b"content-type", content_type),
                    (b"content-length", str(len(body)).encode()),
                    (b"connection", b"close"),
                ],
            }
        )
        await self._send({"type": "http.response.body", "body": body})

"""One HTTP request served by an ASGI application (the MCP SDK's transport) from inside a
Django view, so the request keeps Django's middleware (metrics, request ids, the tenant
scope, JSON errors) and the SDK still owns its protocol.

The application runs as a task of the request: it receives the body Django already read,
then ``http.disconnect`` once the response is closed (the client left, or the body was
sent); what it sends becomes a Django response: its status and headers at once, its body
as it comes (a stream while it says ``more_body``; under WSGI, which iterates a body after
the view's event loop is gone, read whole first). Closing the response cancels the task.
"""

from __future__ import annotations

import asyncio
import contextlib
from collections.abc import AsyncIterator, Awaitable, Callable, MutableMapping
from typing import Any

from django.core.handlers.asgi import ASGIRequest
from django.http import HttpRequest, HttpResponse, HttpResponseBase, StreamingHttpResponse

Message = MutableMapping[str, Any]
Receive = Callable[[], Awaitable[Message]]
Send = Callable[[Message], Awaitable[None]]
AsgiApp = Callable[[MutableMapping[str, Any], Receive, Send], Awaitable[None]]

# Hop-by-hop headers are the server's to write, not an application behind a view's.
_HOP_BY_HOP = frozenset({"connection", "keep-alive", "transfer-encoding", "content-length"})


class ApplicationFailed(RuntimeError):
    """The application ended without answering the request."""


def asgi_scope(request: HttpRequest) -> dict[str, Any]:
    """The HTTP scope of ``request``, as an ASGI application reads it."""
    headers = [
        (name.lower().encode("latin-1"), value.encode("latin-1"))
        for name, value in request.headers.items()
    ]
    query = request.META.get("QUERY_STRING", "")
    return {
        "type": "http", "asgi": {"version": "3.0"}, "http_version": "1.1",
        "method": request.method or "GET", "scheme": request.scheme or "http",
        "path": request.path, "raw_path": request.path.encode(), "root_path": "",
        "query_string": query.encode("latin-1"), "headers": headers,
        "client": (request.META.get("REMOTE_ADDR") or "", 0), "server": None,
    }  # fmt: skip


async def asgi_response(app: AsgiApp, request: HttpRequest) -> HttpResponseBase:
    """``app``'s answer to ``request`` as a Django response (see the module's docstring).
    Raises :class:`ApplicationFailed` when it ends without starting one (or what it
    raised)."""
    sent: asyncio.Queue[Message] = asyncio.Queue()
    closed = asyncio.Event()
    body = request.body
    delivered = False

    async def receive() -> Message:
        nonlocal delivered
        if not delivered:
            delivered = True
            return {"type": "http.request", "body": body, "more_body": False}
        await closed.wait()
        return {"type": "http.disconnect"}

    async def send(message: Message) -> None:
        await sent.put(message)

    task = asyncio.ensure_future(app(asgi_scope(request), receive, send))
    try:
        start = await _next(sent, task)
        if start is None or start.get("type") != "http.response.start":
            raise ApplicationFailed("the application answered no response")
        first = await _next(sent, task)
    except BaseException:
        closed.set()
        await _ended(task)
        raise
    status = int(start["status"])
    headers = [
        (name.decode("latin-1"), value.decode("latin-1"))
        for name, value in start.get("headers", [])
        if name.decode("latin-1").lower() not in _HOP_BY_HOP
    ]
    if first is not None and first.get("more_body", False) and not isinstance(request, ASGIRequest):
        # Under WSGI the body is iterated after this event loop is gone: read it all now.
        parts = [first.get("body", b"")]
        parts.extend([chunk async for chunk in _streamed(b"", sent, task, closed)])
        first = {"body": b"".join(parts), "more_body": False}
    if first is None or not first.get("more_body", False):
        closed.set()
        await _ended(task)
        response: HttpResponseBase = HttpResponse((first or {}).get("body", b""), status=status)
    else:
        response = StreamingHttpResponse(
            _streamed(first.get("body", b""), sent, task, closed), status=status
        )
    if "Content-Type" in response:
        del response["Content-Type"]
    for name, value in headers:
        response[name] = value
    return response


async def _next(sent: asyncio.Queue[Message], task: asyncio.Future[None]) -> Message | None:
    """The application's next message; None when it ended without one (what it raised is
    raised)."""
    getting = asyncio.ensure_future(sent.get())
    either: set[asyncio.Future[Any]] = {getting, task}
    await asyncio.wait(either, return_when=asyncio.FIRST_COMPLETED)
    if getting.done():
        return getting.result()
    getting.cancel()
    if not sent.empty():
        return sent.get_nowait()
    task.result()  # what it raised, if anything
    return None


async def _streamed(
    first: bytes, sent: asyncio.Queue[Message], task: asyncio.Future[None], closed: asyncio.Event
) -> AsyncIterator[bytes]:
    try:
        if first:
            yield first
        while True:
            message = await _next(sent, task)
            if message is None:
                return
            if message.get("body"):
                yield bytes(message["body"])
            if not message.get("more_body", False):
                return
    finally:
        closed.set()
        await _ended(task)


async def _ended(task: asyncio.Future[None]) -> None:
    """Let the application finish (it was told the response is closed), cancelling it
    when it does not at once."""
    if not task.done():
        with contextlib.suppress(TimeoutError, asyncio.TimeoutError):
            await asyncio.wait_for(asyncio.shield(task), 1.0)
    if not task.done():
        task.cancel()
    with contextlib.suppress(asyncio.CancelledError, Exception):
        await task

"""ASGI entry point: HTTP through Django (its request bodies under a read timeout),
WebSockets through Channels.

Serve with ``uvicorn config.asgi:application``.
"""

import os
import threading
from concurrent.futures import Future, ThreadPoolExecutor
from typing import Any

import django
from asgiref.sync import ThreadSensitiveContext
from django.core.handlers.asgi import ASGIHandler
from django.urls import get_resolver

from observability.logs import process_role_set

os.environ.setdefault("DJANGO_SETTINGS_MODULE", "config.settings")  # noqa: TID251
django.setup(set_prefix=False)

# Threads kept for the sync code of requests; more requests at once get threads of their
# own, which end with them.
KEPT_THREADS = 64


class _RequestThread(ThreadPoolExecutor):
    """One thread for one request at a time, which knows whether work is still running on
    it (a cancelled request's sync code runs to its end)."""

    def __init__(self) -> None:
        super().__init__(max_workers=1, thread_name_prefix="request")
        self.running = 0
        self._count = threading.Lock()  # submit runs on the event loop, _done on the thread

    def submit(self, fn: Any, /, *args: Any, **kwargs: Any) -> Future[Any]:
        with self._count:
            self.running += 1
        future = super().submit(fn, *args, **kwargs)
        future.add_done_callback(self._done)
        return future

    def _done(self, _future: Future[Any]) -> None:
        with self._count:
            self.running -= 1


class PooledASGIHandler(ASGIHandler):
    """Django's ASGI handler, running each request's sync code (its view, DRF's rendering,
    the request signals) on a thread borrowed from a pool: one thread per request at a
    time, as Django's handler does, without starting a thread and a second one to join it
    for every request."""

    def __init__(self) -> None:
        super().__init__()
        self._idle: list[_RequestThread] = []

    async def __call__(self, scope: Any, receive: Any, send: Any) -> None:
        if scope["type"] != "http":
            raise ValueError(f"Django can only handle ASGI/HTTP connections, not {scope['type']}.")
        executor = self._idle.pop() if self._idle else _RequestThread()
        try:
            async with ThreadSensitiveContext(executor=executor):
                await self.handle(scope, receive, send)
        finally:
            if executor.running == 0 and len(self._idle) < KEPT_THREADS:
                self._idle.append(executor)
            else:  # busy still (a cancelled request), or enough kept: it ends when done
                executor.shutdown(wait=False)


process_role_set("web")
django_asgi_app = PooledASGIHandler()
# Every route's views are imported now, as the process starts, not by its first request
# (which would wait seconds for them: the console's pages import the model providers' SDKs).
get_resolver().url_patterns  # noqa: B018

from channels.routing import ProtocolTypeRouter, URLRouter  # noqa: E402

from common.body_timeout import BodyTimeout  # noqa: E402
from config.routing import websocket_urlpatterns  # noqa: E402
from tenancy.authentication import BrowserOriginValidator, TenantAuthMiddlewareStack  # noqa: E402

application = ProtocolTypeRouter(
    {
        "http": BodyTimeout(django_asgi_app),
        "websocket": BrowserOriginValidator(
            TenantAuthMiddlewareStack(URLRouter(websocket_urlpatterns))
        ),
    }
)

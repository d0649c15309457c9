"""Django's and WhiteNoise's middleware, without thread hops under ASGI.

Under ASGI, Django runs each ``MiddlewareMixin`` hook (``process_request``,
``process_view``, ``process_response``) through ``sync_to_async``, and a sync-only
middleware (WhiteNoise) puts the rest of the chain behind ``async_to_sync``: about fifteen
thread hand-offs per request, which cost the web process more CPU than the API views
themselves. The hooks of the middleware below do no blocking I/O (they read headers and
cookies and set lazy attributes), so they run on the event loop; the few steps that can
touch the database or the disk (saving a session that a request used, storing messages,
serving a static file) still go through a thread. Under WSGI they behave exactly as
Django's.

Beside them, :func:`database_reads_fail_fast` marks the requests that only read, whose
wait for a database connection is short while PostgreSQL is unreachable.
"""

from __future__ import annotations

from typing import Any

from asgiref.sync import iscoroutinefunction, markcoroutinefunction, sync_to_async
from django.conf import settings
from django.contrib.auth.middleware import AuthenticationMiddleware
from django.contrib.messages.middleware import MessageMiddleware
from django.contrib.sessions.middleware import SessionMiddleware
from django.http import HttpRequest, HttpResponseBase, StreamingHttpResponse
from django.middleware.clickjacking import XFrameOptionsMiddleware
from django.middleware.common import CommonMiddleware
from django.middleware.csrf import CsrfViewMiddleware
from django.middleware.security import SecurityMiddleware
from django.utils.decorators import sync_and_async_middleware
from whitenoise.middleware import WhiteNoiseMiddleware

from common.db_backend.pool import reads_fail_fast
from common.tenant_wall import bound, request_scope

SAFE_METHODS = frozenset({"GET", "HEAD", "OPTIONS", "TRACE"})
# Requests that only read: they may fail fast during a database outage.
READS = frozenset({"GET", "HEAD", "OPTIONS"})


class _OnLoop:
    """For a ``MiddlewareMixin`` subclass whose hooks do no blocking I/O, except where
    :meth:`view_blocks` or :meth:`response_blocks` say so."""

    get_response: Any
    async_mode: bool

    def __init__(self, get_response: Any) -> None:
        super().__init__(get_response)  # type: ignore[call-arg]
        view_hook = getattr(self, "process_view", None)
        if self.async_mode and view_hook is not None:
            # The handler awaits a coroutine function as is, and hops a thread for any other.
            async def process_view(request: HttpRequest, view: Any, *args: Any) -> Any:
                if self.view_blocks(request, view):
                    hop = sync_to_async(view_hook, thread_sensitive=True)
                    return await hop(request, view, *args)
                return view_hook(request, view, *args)

            setattr(self, "process_view", process_view)  # noqa: B010 - shadows the class's

    def view_blocks(self, request: HttpRequest, view: Any) -> bool:
        return False

    def response_blocks(self, request: HttpRequest) -> bool:
        return False

    async def __acall__(self, request: HttpRequest) -> HttpResponseBase:
        response = None
        if hasattr(self, "process_request"):
            response = self.process_request(request)
        if response is None:
            response = await self.get_response(request)
        if hasattr(self, "process_response"):
            if self.response_blocks(request):
                hop = sync_to_async(self.process_response, thread_sensitive=True)
                return await hop(request, response)  # type: ignore[no-any-return]
            response = self.process_response(request, response)
        return response  # type: ignore[no-any-return]


class Security(_OnLoop, SecurityMiddleware):
    pass


class Sessions(_OnLoop, SessionMiddleware):
    """Saving happens only for a request that read or wrote its session."""

    def response_blocks(self, request: HttpRequest) -> bool:
        session = getattr(request, "session", None)
        return session is not None and (
            session.accessed or session.modified or settings.SESSION_SAVE_EVERY_REQUEST
        )


class Common(_OnLoop, CommonMiddleware):
    pass


class Csrf(_OnLoop, CsrfViewMiddleware):
    """Checking an unsafe request to a protected view may parse its body (a form's token),
    which can spool an upload to disk: that check runs on a thread. The token is read from
    its cookie (with ``CSRF_USE_SESSIONS`` it would be a session read in every hook)."""

    def __init__(self, get_response: Any) -> None:
        super().__init__(get_response)
        if settings.CSRF_USE_SESSIONS:
            raise ValueError("common.middleware.Csrf reads the token from its cookie only")

    def view_blocks(self, request: HttpRequest, view: Any) -> bool:
        return request.method not in SAFE_METHODS and not getattr(view, "csrf_exempt", False)


class Authentication(_OnLoop, AuthenticationMiddleware):
    """``request.user`` stays lazy: a view that reads it loads it on its own thread."""


class Messages(_OnLoop, MessageMiddleware):
    """Storing happens only for a request that read or added messages (the fallback
    storage may write them to the session)."""

    def response_blocks(self, request: HttpRequest) -> bool:
        storage = getattr(request, "_messages", None)
        return storage is not None and (storage.used or storage.added_new)


class FrameOptions(_OnLoop, XFrameOptionsMiddleware):
    pass


class StaticFiles(WhiteNoiseMiddleware):
    """WhiteNoise with an async path: a request for anything but a static file passes
    straight through; a static file is looked up and opened on a thread."""

    sync_capable = True
    async_capable = True

    def __init__(self, get_response: Any = None, settings: Any = settings) -> None:
        super().__init__(get_response, settings)
        self.async_mode = iscoroutinefunction(get_response)
        if self.async_mode:
            markcoroutinefunction(self)

    def __call__(self, request: HttpRequest) -> Any:
        if self.async_mode:
            return self._acall(request)
        return super().__call__(request)

    async def _acall(self, request: HttpRequest) -> HttpResponseBase:
        if self._may_serve(request.path_info):
            response = await sync_to_async(self._static, thread_sensitive=True)(request)
            if response is not None:
                return response
        return await self.get_response(request)  # type: ignore[no-any-return]

    def _may_serve(self, path: str) -> bool:
        if not self.autorefresh:
            return path in self.files
        prefixes = [self.static_prefix, *(prefix for _root, prefix in self.directories)]
        return any(path.startswith(prefix) for prefix in prefixes)

    def _static(self, request: HttpRequest) -> HttpResponseBase | None:
        path = request.path_info
        found = self.find_file(path) if self.autorefresh else self.files.get(path)
        return None if found is None else self.serve(found, request)


@sync_and_async_middleware
def database_reads_fail_fast(get_response: Any) -> Any:
    """Middleware: a ``GET``, ``HEAD`` or ``OPTIONS`` request waits for a database
    connection at most the pool's ``read_timeout`` while PostgreSQL is unreachable, and
    the API answers it ``503`` with ``Retry-After`` (:mod:`common.db_backend.pool`); other
    requests wait the pool's full ``timeout``. And every request starts outside any tenant:
    it sees no tenant's rows until it authenticates (:func:`common.tenant_wall.request_scope`).
    It sets context variables, on the event loop under ASGI."""

    if iscoroutinefunction(get_response):

        async def async_middleware(request: HttpRequest) -> HttpResponseBase:
            with reads_fail_fast(request.method in READS), request_scope():
                return _body_bound(await get_response(request))

        return async_middleware

    def middleware(request: HttpRequest) -> HttpResponseBase:
        with reads_fail_fast(request.method in READS), request_scope():
            return _body_bound(get_response(request))

    return middleware


def _body_bound(response: HttpResponseBase) -> HttpResponseBase:
    """A streamed body reads in its request's tenant context, after the request's end."""
    if isinstance(response, StreamingHttpResponse):
        response.streaming_content = bound(response.streaming_content)
    return response


# The Django middleware each of ours stands for (common.checks runs Django's checks of it).
EQUIVALENTS: dict[type, type] = {
    Security: SecurityMiddleware,
    StaticFiles: WhiteNoiseMiddleware,
    Sessions: SessionMiddleware,
    Common: CommonMiddleware,
    Csrf: CsrfViewMiddleware,
    Authentication: AuthenticationMiddleware,
    Messages: MessageMiddleware,
    FrameOptions: XFrameOptionsMiddleware,
}

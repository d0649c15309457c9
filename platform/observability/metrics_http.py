"""HTTP metrics: each answer counted by route template, method and status, and timed.

The route is the URL pattern that matched (``request.resolver_match.route``, e.g.
``api/v1/threads/<uuid:thread_id>/turns``), never the path: a path carries ids. A regular
expression's named groups read as ``<name>`` and its anchors go (a router's
``api/v1/threads/(?P<pk>[0-9a-f]{8}-…)/?$`` is ``api/v1/threads/<pk>``). A request no pattern
matched counts as ``unmatched``; a method outside the standard ones as ``other``.
"""

from __future__ import annotations

import functools
import re
import time
from typing import Any, Final

from asgiref.sync import iscoroutinefunction
from django.http import HttpRequest, HttpResponseBase
from django.utils.decorators import sync_and_async_middleware

from observability.families import families

METHODS: Final = frozenset({"GET", "HEAD", "POST", "PUT", "PATCH", "DELETE", "OPTIONS"})
UNMATCHED: Final = "unmatched"
# A named group (one level of nested parentheses inside), and a regular expression's anchors.
_GROUP: Final = re.compile(r"\(\?P<(\w+)>(?:[^()]|\([^()]*\))*\)")
_ANCHORS: Final = re.compile(r"\^|/\?\$$|\$$")


@sync_and_async_middleware
def http_metrics(get_response: Any) -> Any:
    """Middleware: count and time every answer, on the event loop under ASGI."""

    if iscoroutinefunction(get_response):

        async def async_middleware(request: HttpRequest) -> HttpResponseBase:
            started = time.perf_counter()
            response: HttpResponseBase = await get_response(request)
            _record(request, response, time.perf_counter() - started)
            return response

        return async_middleware

    def middleware(request: HttpRequest) -> HttpResponseBase:
        started = time.perf_counter()
        response: HttpResponseBase = get_response(request)
        _record(request, response, time.perf_counter() - started)
        return response

    return middleware


def _record(request: HttpRequest, response: HttpResponseBase, elapsed_s: float) -> None:
    match = getattr(request, "resolver_match", None)
    route = template(str(match.route)) if match is not None and match.route else UNMATCHED
    method = request.method if request.method in METHODS else "other"
    found = families()
    found.http_requests.labels(route=route, method=method, status=str(response.status_code)).inc()
    found.http_duration.labels(route=route, method=method).observe(elapsed_s)


@functools.lru_cache(maxsize=1024)
def template(route: str) -> str:
    """``route`` as a template: named groups as ``<name>``, without anchors."""
    return _ANCHORS.sub("", _GROUP.sub(r"<\1>", route)) or "/"

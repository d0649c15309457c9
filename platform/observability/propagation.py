"""How a trace crosses processes: from an HTTP request, through the Celery task it sends,
into the flow the task runs.

1. :func:`traced_requests` (first in ``MIDDLEWARE``) continues the caller's trace (a W3C
   ``traceparent`` header) or starts one, with a server span for the request.
2. A task sent while a span is current carries its context in the message headers: the
   ``threads.drive_thread`` wake-up writes them itself (it bypasses ``send_task``:
   :func:`threads.services.wakeups.drive_message`), every other task gets them here, on
   ``before_task_publish``.
3. On ``task_prerun`` a task that carries a context runs under a consumer span, a child of
   it, so the engine's spans (the turn, its calls) join the request's trace; a task sent
   by no traced work (beat's sweeps) opens none.

A subagent's child thread is traced with its parent: a blocking call drives the child inside
the parent's tool call, and a non-blocking one wakes it with a task sent from that call.
"""

from __future__ import annotations

import threading
from collections.abc import Callable
from contextlib import AbstractContextManager
from typing import Any, Final

from asgiref.sync import iscoroutinefunction
from celery import Task
from celery.signals import before_task_publish, task_postrun, task_prerun
from django.core.exceptions import MiddlewareNotUsed
from django.http import HttpRequest, HttpResponseBase
from django.utils.decorators import sync_and_async_middleware
from opentelemetry import propagate, trace
from opentelemetry.propagators.textmap import Getter
from opentelemetry.trace import Span, SpanKind

from observability.spans import failed, span, tracing

# The headers a task message carries its trace context in (W3C Trace Context).
CONTEXT_HEADERS: Final = ("traceparent", "tracestate")


# HTTP ------------------------------------------------------------------------------------------


@sync_and_async_middleware
def traced_requests(get_response: Callable[..., Any]) -> Callable[..., Any]:
    """Middleware: a server span per request (``{method} {route}``) when tracing is on; not
    in the chain when it is off."""
    if tracing() is None:
        raise MiddlewareNotUsed

    if iscoroutinefunction(get_response):

        async def async_middleware(request: HttpRequest) -> HttpResponseBase:
            with _server_span(request) as opened:
                response: HttpResponseBase = await get_response(request)
                _answered(opened, request, response)
                return response

        return async_middleware

    def middleware(request: HttpRequest) -> HttpResponseBase:
        with _server_span(request) as opened:
            response: HttpResponseBase = get_response(request)
            _answered(opened, request, response)
            return response

    return middleware


def _server_span(request: HttpRequest) -> Any:
    attributes = {
        "http.request.method": request.method or "",
        "url.path": request.path,
        "url.scheme": request.scheme or "http",
    }
    parent = propagate.extract(request.headers)
    return span(request.method or "HTTP", attributes=attributes, kind=SpanKind.SERVER,
                parent=parent)  # fmt: skip


def _answered(opened: Span | None, request: HttpRequest, response: HttpResponseBase) -> None:
    if opened is None:
        return
    opened.set_attribute("http.response.status_code", response.status_code)
    match = getattr(request, "resolver_match", None)
    route = getattr(match, "route", None)
    if route:
        opened.set_attribute("http.route", f"/{route}")
        opened.update_name(f"{request.method} /{route}")
    if response.status_code >= 500:
        failed(opened, str(response.status_code), response.reason_phrase)


# Celery ----------------------------------------------------------------------------------------


class _RequestGetter(Getter[Any]):
    """Reads a context header from a task's request (Celery makes each header an attribute)."""

    def get(self, carrier: Any, key: str) -> list[str] | None:
        value = getattr(carrier, key, None)
        return [value] if isinstance(value, str) else None

    def keys(self, carrier: Any) -> list[str]:
        return [key for key in CONTEXT_HEADERS if isinstance(getattr(carrier, key, None), str)]


_GETTER: Final = _RequestGetter()
# The consumer span block of each running task, by task id (open from prerun to postrun, in
# the task's thread).
_running: dict[str, AbstractContextManager[Span | None]] = {}
_running_lock = threading.Lock()


def _publishing(headers: dict[str, Any] | None = None, **_: Any) -> None:
    """``before_task_publish``: the current span's context into the message's headers."""
    if headers is not None and trace.get_current_span().get_span_context().is_valid:
        propagate.inject(headers)


def _starting(task_id: str = "", task: Task[Any, Any] | None = None, **_: Any) -> None:
    """``task_prerun``: a task that carries a context runs under a consumer span."""
    carried = getattr(task.request, "traceparent", None) if task is not None else None
    if tracing() is None or task is None or not isinstance(carried, str):
        return
    parent = propagate.extract(task.request, getter=_GETTER)
    block = span(task.name, attributes={"messaging.system": "celery",
                                        "messaging.operation.name": "process",
                                        "messaging.message.id": task_id},
                 kind=SpanKind.CONSUMER, parent=parent)  # fmt: skip
    block.__enter__()
    with _running_lock:
        _running[task_id] = block


def _ended(task_id: str = "", state: str | None = None, **_: Any) -> None:
    """``task_postrun``: the task's span ends (failed when the task raised)."""
    with _running_lock:
        block = _running.pop(task_id, None)
    if block is None:
        return
    if state == "FAILURE":
        failed(trace.get_current_span(), "task_failure", "the task raised")
    block.__exit__(None, None, None)


def signals_connect() -> None:
    """Connect the Celery signal handlers (idempotent: Celery keys them by function)."""
    before_task_publish.connect(_publishing, weak=False)
    task_prerun.connect(_starting, weak=False)
    task_postrun.connect(_ended, weak=False)

"""Structured logs: each record carries the ids of the work it belongs to, and with
``LOG_FORMAT=json`` it is one JSON line.

* :class:`LogIds` (a filter on every handler) sets the ids on the record: those bound in
  :mod:`observability.logcontext` (a request, a Celery task, a turn), the tenant of the
  request being served once its credentials are known, and the trace and span of the active
  OpenTelemetry span.
* :class:`JsonFormatter` writes a fixed set of fields (:data:`FIELDS`). A record's other
  attributes (``extra=``, which may hold a request or a payload) are never written.
* :class:`RequestIds` (a middleware) gives each HTTP request its id: the caller's
  ``X-Request-ID`` when it is printable and at most :data:`REQUEST_ID_MAX` characters, a new
  one otherwise, returned in the response's ``X-Request-ID``.
* :func:`task_ids_bind` and :func:`task_ids_release` (Celery's task_prerun and task_postrun)
  bind the ``tenant_id`` and ``thread_id`` arguments of the task being run.
"""

from __future__ import annotations

import contextlib
import inspect
import logging
import uuid
from collections.abc import Awaitable, Callable, Mapping, Sequence
from contextvars import ContextVar
from datetime import UTC, datetime
from typing import Any, Final

from asgiref.sync import iscoroutinefunction, markcoroutinefunction
from celery import signals
from django.http import HttpRequest, HttpResponseBase
from opentelemetry import trace
from pythonjsonlogger.json import JsonFormatter as _JsonFormatter

from observability import logcontext

# The fields of a JSON line, in order; the ids appear only when known.
FIELDS: Final = (
    "timestamp", "level", "logger", "message", "role", *logcontext.FIELDS, "trace_id",
    "span_id", "exc_info", "stack_info",
)  # fmt: skip
REQUEST_ID_HEADER: Final = "X-Request-ID"
REQUEST_ID_MAX: Final = 128
_REQUEST_ID_META: Final = "observability.request_id"
_IDS: Final = (*logcontext.FIELDS, "trace_id", "span_id")

_role: str | None = None
_request: ContextVar[HttpRequest | None] = ContextVar("log_request", default=None)


def process_role_set(role: str | None) -> None:
    """Name this process's role (``web``, ``worker``, ``beat``; None: unnamed) on its lines."""
    global _role
    _role = role


def record_ids(record: logging.LogRecord) -> dict[str, str]:
    """The ids of the work ``record`` belongs to (see the module docstring)."""
    ids = logcontext.current()
    # Django logs a request's 4xx/5xx answer after the middleware returned, naming it.
    named = getattr(record, "request", None)
    request = named if isinstance(named, HttpRequest) else _request.get()
    if request is not None:
        for name, value in _request_ids(request).items():
            ids.setdefault(name, value)
    context = trace.get_current_span().get_span_context()
    if context.is_valid:
        ids["trace_id"] = trace.format_trace_id(context.trace_id)
        ids["span_id"] = trace.format_span_id(context.span_id)
    return ids


def _request_ids(request: HttpRequest) -> dict[str, str]:
    """The request's id, and its tenant once DRF has authenticated it (the principal is
    ``request.auth``: an API key's or a member's, holding the loaded tenant)."""
    ids: dict[str, str] = {}
    request_id = request.META.get(_REQUEST_ID_META)
    if request_id:
        ids["request_id"] = str(request_id)
    tenant = getattr(getattr(request, "auth", None), "tenant", None)
    tenant_id = getattr(tenant, "pk", None)
    if tenant_id is not None:
        ids["tenant_id"] = str(tenant_id)
    return ids


class LogIds(logging.Filter):
    """Sets each id field of :data:`FIELDS` on the record (None when unknown) and its
    process ``role``; passes every record."""

    def filter(self, record: logging.LogRecord) -> bool:
        ids = record_ids(record)
        for name in _IDS:
            setattr(record, name, ids.get(name))
        record.role = _role
        return True


class JsonFormatter(_JsonFormatter):
    """One JSON object per record with the fields of :data:`FIELDS` that have a value:
    ``timestamp`` (ISO 8601, UTC, milliseconds), ``level``, ``logger``, ``message`` (the
    formatted message), ``role``, the ids, ``exc_info`` and ``stack_info`` (text)."""

    def add_fields(
        self, log_data: dict[str, Any], record: logging.LogRecord, message_dict: dict[str, Any]
    ) -> None:
        if not hasattr(record, "trace_id"):  # a handler without the LogIds filter
            LogIds().filter(record)
        moment = datetime.fromtimestamp(record.created, tz=UTC)
        values: dict[str, Any] = {
            "timestamp": moment.isoformat(timespec="milliseconds").replace("+00:00", "Z"),
            "level": record.levelname,
            "logger": record.name,
            "message": record.getMessage() if isinstance(record.msg, dict) else record.message,
            "role": getattr(record, "role", None),
        }
        values.update((name, getattr(record, name)) for name in _IDS)
        values["exc_info"] = message_dict.get("exc_info")
        values["stack_info"] = message_dict.get("stack_info")
        log_data.update((name, values[name]) for name in FIELDS if values.get(name))


def request_id_valid(value: str) -> bool:
    """A caller's request id is kept when it is 1 to :data:`REQUEST_ID_MAX` printable ASCII
    characters (no spaces or controls, so it cannot break a log line or a header)."""
    return 0 < len(value) <= REQUEST_ID_MAX and all("!" <= c <= "~" for c in value)


def _request_id_for(request: HttpRequest) -> str:
    given = request.headers.get(REQUEST_ID_HEADER, "")
    return given if request_id_valid(given) else uuid.uuid4().hex


Handler = Callable[[HttpRequest], Any]


class RequestIds:
    """Middleware (sync and async): the request's id (see the module docstring) is on the
    log lines written while it is served, and on its response."""

    sync_capable = True
    async_capable = True

    def __init__(self, get_response: Handler) -> None:
        self.get_response = get_response
        self.is_async = iscoroutinefunction(get_response)
        if self.is_async:
            markcoroutinefunction(self)

    def __call__(self, request: HttpRequest) -> Any:
        if self.is_async:
            return self._acall(request)
        with self._serving(request) as request_id:
            response: HttpResponseBase = self.get_response(request)
        response[REQUEST_ID_HEADER] = request_id
        return response

    async def _acall(self, request: HttpRequest) -> HttpResponseBase:
        get_response: Callable[[HttpRequest], Awaitable[HttpResponseBase]] = self.get_response
        with self._serving(request) as request_id:
            response = await get_response(request)
        response[REQUEST_ID_HEADER] = request_id
        return response

    @staticmethod
    @contextlib.contextmanager
    def _serving(request: HttpRequest) -> Any:
        request_id = _request_id_for(request)
        request.META[_REQUEST_ID_META] = request_id
        token = _request.set(request)
        try:
            with logcontext.bind(request_id=request_id):
                yield request_id
        finally:
            _request.reset(token)


# Celery tasks ---------------------------------------------------------------------------

_TASK_IDS: Final = ("tenant_id", "thread_id")
_task_scopes: dict[str, contextlib.ExitStack] = {}


def task_ids(
    task: Callable[..., Any], args: Sequence[Any], kwargs: Mapping[str, Any]
) -> dict[str, str]:
    """The ``tenant_id`` and ``thread_id`` arguments of a call of ``task`` (those it takes)."""
    try:
        bound = inspect.signature(task).bind_partial(*args, **kwargs).arguments
    except (TypeError, ValueError):
        return {}
    return {name: str(bound[name]) for name in _TASK_IDS if bound.get(name) is not None}


def task_ids_bind(
    task_id: str | None = None,
    task: Any = None,
    args: Sequence[Any] | None = None,
    kwargs: Mapping[str, Any] | None = None,
    **_: Any,
) -> None:
    """task_prerun: the task's lines carry its tenant and thread until task_postrun. Prerun
    and postrun of a task run on the same thread (one task at a time per pool thread)."""
    if task_id is None or task is None:
        return
    ids = task_ids(getattr(task, "run", task), args or (), kwargs or {})
    scope = contextlib.ExitStack()
    scope.enter_context(logcontext.bind(**ids))
    _task_scopes[task_id] = scope


def task_ids_release(task_id: str | None = None, **_: Any) -> None:
    """task_postrun: ends what :func:`task_ids_bind` bound for the task."""
    scope = _task_scopes.pop(task_id, None) if task_id is not None else None
    if scope is not None:
        scope.close()


def tasks_watch() -> None:
    """Bind each Celery task's ids while it runs (called once, from the app's ready())."""
    signals.task_prerun.connect(task_ids_bind, weak=False, dispatch_uid="observability.logs")
    signals.task_postrun.connect(task_ids_release, weak=False, dispatch_uid="observability.logs")

"""API plumbing shared by every app: the one exception handler and JSON error pages.

Every error the API returns has the shape ``{"error": {"code", "message", "field"?}}``.
"""

from __future__ import annotations

import logging
from collections.abc import Callable, Mapping, Sequence
from typing import Any

from asgiref.sync import iscoroutinefunction
from django.conf import settings
from django.core.exceptions import (
    DisallowedHost,
    ImproperlyConfigured,
    RequestDataTooBig,
    SuspiciousOperation,
)
from django.core.exceptions import PermissionDenied as DjangoPermissionDenied
from django.http import Http404, HttpRequest, HttpResponse, HttpResponseBadRequest, JsonResponse
from django.utils.decorators import sync_and_async_middleware
from django.views import csrf, defaults
from django.views.decorators.csrf import csrf_exempt
from drf_spectacular.views import SpectacularAPIView, SpectacularSwaggerView
from rest_framework import exceptions, status
from rest_framework.renderers import JSONRenderer
from rest_framework.request import Request
from rest_framework.response import Response
from rest_framework.routers import SimpleRouter
from rest_framework.views import APIView

from common.converters import group
from common.errors import DomainError, RetryLater
from common.outages import RETRY_AFTER_S, database_pool_recheck, outage_service

logger = logging.getLogger(__name__)

# DRF's default codes, renamed to the platform's vocabulary; others pass through.
_RENAMED_CODES = {
    "not_authenticated": "unauthenticated",
    "authentication_failed": "unauthenticated",
    "permission_denied": "forbidden",
    "parse_error": "malformed_body",
}


def error_body(code: str, message: str, field: str | None = None) -> dict[str, Any]:
    error: dict[str, str] = {"code": code, "message": message}
    if field is not None:
        error["field"] = field
    return {"error": error}


def _first_validation_error(detail: Any, path: str = "") -> tuple[str | None, str]:
    """The first (field path, message) of a DRF validation tree, e.g. ``("tools[2].name", ...)``."""
    if isinstance(detail, Mapping):
        for key, value in detail.items():
            if key == "non_field_errors":
                name = path
            elif isinstance(key, int):  # DRF keys list-item errors by index
                name = f"{path}[{key}]"
            else:
                name = f"{path}.{key}" if path else str(key)
            return _first_validation_error(value, name)
    if isinstance(detail, Sequence) and not isinstance(detail, str):
        for index, value in enumerate(detail):
            nested = isinstance(value, Mapping | list)
            if nested and not value:
                continue  # DRF's list error format marks valid items with {}
            return _first_validation_error(value, f"{path}[{index}]" if nested else path)
    return (path or None), str(detail)


def exception_handler(exc: Exception, context: Mapping[str, Any]) -> Response:
    """Map domain and DRF errors to the platform's error body; never leak a stack trace."""
    if isinstance(exc, DomainError):
        return Response({"error": exc.as_dict()}, status=exc.status, headers=_headers(exc))
    if isinstance(exc, RequestDataTooBig):
        limit = settings.DATA_UPLOAD_MAX_MEMORY_SIZE
        return Response(
            error_body("limit_exceeded", f"request body exceeds {limit} bytes"),
            status=status.HTTP_413_REQUEST_ENTITY_TOO_LARGE,
        )
    if isinstance(exc, SuspiciousOperation):  # e.g. more query parameters than allowed
        return Response(error_body("bad_request", str(exc)), status=status.HTTP_400_BAD_REQUEST)
    service = outage_service(exc)
    if service is not None:
        logger.warning("%s is unreachable: %s", service, exc)
        if service == "PostgreSQL":
            database_pool_recheck()
        return Response(
            error_body(
                "unavailable",
                f"{service} is unreachable; retry in {RETRY_AFTER_S} s (a retry with the "
                "same Idempotency-Key is answered once)",
            ),
            status=status.HTTP_503_SERVICE_UNAVAILABLE,
            headers={"Retry-After": str(RETRY_AFTER_S)},
        )
    if isinstance(exc, Http404):
        exc = exceptions.NotFound()
    elif isinstance(exc, DjangoPermissionDenied):
        exc = exceptions.PermissionDenied()
    if isinstance(exc, exceptions.ValidationError):
        field, message = _first_validation_error(exc.detail)
        body = error_body("invalid", f"{field}: {message}" if field else message, field)
        body["error"]["details"] = exc.detail
        return Response(body, status=status.HTTP_400_BAD_REQUEST)
    if isinstance(exc, exceptions.APIException):
        code = str(getattr(exc.detail, "code", None) or exc.default_code)
        code = _RENAMED_CODES.get(code, code)
        response_headers = {}
        if isinstance(exc, exceptions.NotAuthenticated | exceptions.AuthenticationFailed):
            response_headers["WWW-Authenticate"] = 'Bearer realm="api"'
        if getattr(exc, "wait", None):
            response_headers["Retry-After"] = str(int(exc.wait))  # type: ignore[attr-defined]
        return Response(
            error_body(code, str(exc.detail)), status=exc.status_code, headers=response_headers
        )
    logger.exception("Unhandled error in %s", context.get("view"))
    return Response(
        error_body("internal_error", "The server failed to handle this request."),
        status=status.HTTP_500_INTERNAL_SERVER_ERROR,
    )


def _headers(error: DomainError) -> dict[str, str]:
    headers: dict[str, str] = {}
    if error.status == status.HTTP_401_UNAUTHORIZED:
        headers["WWW-Authenticate"] = 'Bearer realm="api"'
    if isinstance(error, RetryLater):
        headers["Retry-After"] = str(error.retry_after_s)
    return headers


def domain_error_response(error: DomainError) -> JsonResponse:
    """A domain error answered outside DRF (an async view's later stages), with the same
    body, status and headers as :func:`exception_handler` gives it."""
    return JsonResponse({"error": error.as_dict()}, status=error.status, headers=_headers(error))


@sync_and_async_middleware
def api_url_check(get_response: Callable[[HttpRequest], Any]) -> Callable[..., Any]:
    """Middleware: an ``/api/`` or ``/console/`` request whose Host is not allowed, or whose
    URL path or query holds a NUL character or more query parameters than
    ``DATA_UPLOAD_MAX_NUMBER_FIELDS``, is a 400 (JSON for the API) before any view reads
    it. It reads only the request line and headers, so under ASGI it runs on the event
    loop."""

    if iscoroutinefunction(get_response):

        async def async_middleware(request: HttpRequest) -> HttpResponse:
            refused = _url_refusal(request)
            return refused if refused is not None else await get_response(request)

        return async_middleware

    def middleware(request: HttpRequest) -> HttpResponse:
        refused = _url_refusal(request)
        return refused if refused is not None else get_response(request)

    return middleware


def _url_refusal(request: HttpRequest) -> HttpResponse | None:
    """The API's refusal as JSON; the console's as a plain-text page (a form's fields are
    checked by its form, which refuses a NUL character too)."""
    if request.path.startswith("/api/"):
        problem = _url_problem(request)
        return None if problem is None else JsonResponse(error_body(*problem), status=400)
    if request.path.startswith("/console/"):
        problem = _url_problem(request)
        return None if problem is None else HttpResponseBadRequest(problem[1], "text/plain")
    return None


def _url_problem(request: HttpRequest) -> tuple[str, str, str | None] | None:
    """What is wrong with the request line: ``(code, message, field)``."""
    try:
        request.get_host()
    except DisallowedHost:
        message = "the Host header is not one this server answers for (ALLOWED_HOSTS)"
        return "bad_request", message, "Host"
    if "\x00" in request.path:
        return "invalid", "the URL path contains a NUL character (%00)", "path"
    try:
        query = request.GET
    except SuspiciousOperation as error:
        return "bad_request", str(error), None
    for key, values in query.lists():
        if "\x00" in key or any("\x00" in value for value in values):
            message = f"query parameter {key[:100]!r} contains a NUL character (%00)"
            return "invalid", message, key[:100]
    return None


@csrf_exempt  # it changes nothing: a write to an unknown path is a 404, not a CSRF page
def json_not_found(request: HttpRequest, exception: Exception | None = None) -> JsonResponse:
    """handler404 for unknown API URLs (HTML pages keep Django's default)."""
    return JsonResponse(error_body("not_found", f"No route for {request.path}"), status=404)


def csrf_failure(request: HttpRequest, reason: str = "") -> HttpResponse:
    """CSRF_FAILURE_VIEW: a JSON 403 under ``/api/`` (a session request without its token),
    Django's page elsewhere."""
    if not request.path.startswith("/api/"):
        return csrf.csrf_failure(request, reason)
    return JsonResponse(
        error_body(
            "csrf_failed",
            f"CSRF verification failed ({reason}): send the csrftoken cookie's value in the "
            "X-CSRFToken header, or authenticate with an API key (Authorization: Bearer)",
        ),
        status=403,
    )


def json_bad_request(request: HttpRequest, exception: Exception | None = None) -> HttpResponse:
    """handler400 (``DEBUG`` off): the error shape under ``/api/``, Django's page elsewhere."""
    if not request.path.startswith("/api/"):
        return defaults.bad_request(request, exception or Exception())
    return JsonResponse(error_body("bad_request", "The request was malformed."), status=400)


def json_server_error(request: HttpRequest) -> JsonResponse:
    return JsonResponse(
        error_body("internal_error", "The server failed to handle this request."), status=500
    )


class Router(SimpleRouter):
    """A DRF router whose routes match with or without a trailing slash, and whose lookup
    matches what a registered path converter matches (:mod:`common.converters`): the
    viewset's ``lookup_value_converter``, by default ``uuid``, so a malformed id matches
    no route. A viewset may not set ``lookup_value_regex``: its own pattern could let a
    malformed id through to the database (a 500)."""

    def __init__(self) -> None:
        super().__init__()
        self.trailing_slash = "/?"

    def get_lookup_regex(self, viewset: Any, lookup_prefix: str = "") -> str:
        if getattr(viewset, "lookup_value_regex", None) is not None:
            raise ImproperlyConfigured(
                f"{viewset.__name__}: set lookup_value_converter (a registered path "
                "converter: uuid, str), not lookup_value_regex"
            )
        lookup_field = getattr(viewset, "lookup_field", "pk")
        kwarg = getattr(viewset, "lookup_url_kwarg", None) or lookup_field
        return group(f"{lookup_prefix}{kwarg}", getattr(viewset, "lookup_value_converter", "uuid"))


class _JsonBesidesItsPage(APIView):
    """For a view whose ``GET`` answers a page in a format of its own (the OpenAPI document
    in YAML, Swagger UI's HTML): every other answer, an error (a 405, a 406) or
    ``OPTIONS``, is JSON, as everywhere under ``/api/``."""

    def finalize_response(
        self, request: Request, response: Response, *args: Any, **kwargs: Any
    ) -> Response:
        page = request.method in ("GET", "HEAD") and not getattr(response, "exception", False)
        if not page:
            request.accepted_renderer = JSONRenderer()
            request.accepted_media_type = JSONRenderer.media_type
        return super().finalize_response(request, response, *args, **kwargs)


class SchemaView(_JsonBesidesItsPage, SpectacularAPIView):
    """``/api/schema/``: the OpenAPI document (YAML, or JSON as ``Accept`` asks)."""


class DocsView(_JsonBesidesItsPage, SpectacularSwaggerView):
    """``/api/docs/``: Swagger UI over the OpenAPI document."""

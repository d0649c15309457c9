"""The OpenAPI schema's error responses: one ``Error`` component, and the statuses every
operation can answer whatever its view does, added to each operation's own.

Which statuses follow from what an operation has, not from its view:

* 400 for every operation: a URL holding a NUL character or too many query parameters is
  refused before any view runs (:func:`common.api.api_url_check`), and a query or body
  that breaks a rule is refused by the view.
* 503 for every operation: PostgreSQL or Redis is unreachable (``Retry-After`` says when
  to try again).
* 401, 403 and 429 when the operation needs credentials (an unidentified caller; a role
  too low, or a session write without its CSRF token; too many failed API-key
  authentications from the caller's address, ``Retry-After`` says when to try again).
* 404 when the path has parameters (no such object for this tenant).
* 408, 413 and 415 when the operation takes a body (it did not arrive in time, it is too
  large, or it is in a media type the operation does not parse).

A view declares the others it can answer (409, 410, ...) with :func:`error_responses`. Every
status from 400 up is documented with the error body, whatever a view declared for it: the
one exception handler answers nothing else.
"""

from __future__ import annotations

from functools import cache
from typing import Any

from drf_spectacular.openapi import AutoSchema as SpectacularAutoSchema
from drf_spectacular.plumbing import force_instance
from drf_spectacular.utils import OpenApiResponse
from rest_framework import serializers
from rest_framework.permissions import AllowAny

from common.inputs import StrictInput
from common.pagination import NEXT_HELP, PREVIOUS_HELP

API_PREFIX = "/api/v1/"

# Every `…_at` field of an answer is an integer of microseconds (docs/api.md#lists).
US_SINCE_EPOCH = "µs since the Unix epoch"

# The tag of an operation is the resource it acts on: the first segment of its path, or
# for a thread's parts the segment after the thread, renamed here where several segments
# are one resource.
_TAG_OF_SEGMENT = {
    "fs": "files",
    "fs-search": "files",
    "fs-stats": "files",
    "children": "subagents",
    "variables": "subagents",
    "continue": "turns",
    "stop": "threads",
    "terminate": "threads",
    "run-code": "code",
    "me": "access",
    "api-keys": "access",
    "ws-tickets": "access",
}

ERROR_DESCRIPTIONS = {
    400: "The input breaks a rule or cannot be parsed; `field` names where",
    401: "The caller could not be identified",
    403: "The caller's role is too low, or a session write lacks its CSRF token",
    404: "No such object for this tenant",
    408: "The request body did not arrive in time",
    409: "The object's state forbids the operation",
    410: "The object expired",
    413: "The body, or a size or count it holds, exceeds a cap (the message names it)",
    415: "The body's media type is not one this operation parses",
    429: "Too many at once; retry after `Retry-After` seconds",
    503: "A service the operation needs is unavailable; retry later",
}


class ErrorDetailOutput(serializers.Serializer[Any]):
    code = serializers.CharField(help_text="stable, machine-readable (`invalid`, `not_found`, …)")
    message = serializers.CharField(help_text="for people; names the field or the cap")
    field = serializers.CharField(
        required=False, help_text="where the problem is: `metadata.note`, `tools[2].name`"
    )
    details = serializers.JSONField(
        required=False, help_text="more about the problem (a validation tree, every problem)"
    )


class ErrorOutput(serializers.Serializer[Any]):
    """Every error the API answers: `{"error": {"code", "message", "field"?, "details"?}}`."""

    error = ErrorDetailOutput()


def error_response(status: int, description: str | None = None) -> OpenApiResponse:
    """An ``extend_schema(responses=...)`` entry: ``status`` with the error body, described
    by ``description`` or the status's usual meaning."""
    return OpenApiResponse(
        ErrorOutput, description=description or ERROR_DESCRIPTIONS.get(status, "An error")
    )


def error_responses(*statuses: int) -> dict[int, OpenApiResponse]:
    """``extend_schema(responses=...)`` entries for error statuses a view answers besides
    those every operation of its kind can (see the module docstring)."""
    return {status: error_response(status) for status in statuses}


# Writes under a thread can all be refused once the thread is terminated (409 terminated).
THREAD_SCOPED = "/api/v1/threads/{thread_id}/"


def microseconds(help_text: str, **kwargs: Any) -> serializers.IntegerField:
    """A timestamp field: an integer, microseconds since the Unix epoch."""
    return serializers.IntegerField(
        help_text=f"{help_text} (microseconds since the Unix epoch)", **kwargs
    )


class PageSerializer(serializers.Serializer[Any]):
    next = serializers.URLField(allow_null=True, help_text=NEXT_HELP)
    previous = serializers.URLField(allow_null=True, help_text=PREVIOUS_HELP)


@cache
def page_of(item: type[serializers.Serializer[Any]]) -> type[serializers.Serializer[Any]]:
    """The serializer of one page of ``item``s (see :mod:`common.pagination`), named
    ``Paginated<Item>List`` as drf-spectacular names a list view's page."""
    name = item.__name__.removesuffix("Serializer")
    return type(f"Paginated{name}ListSerializer", (PageSerializer,), {"results": item(many=True)})


def resource_tag(path: str) -> str:
    """The tag of the operation at ``path``: ``/api/v1/threads/{thread_id}/kv/{key}`` is
    ``kv``, ``/api/v1/turns/{turn_id}/wait`` is ``turns``."""
    segments = [s for s in path.removeprefix(API_PREFIX).split("/") if s]
    segment = segments[0] if segments else "api"
    if segment == "threads" and len(segments) > 2:
        segment = segments[2]
    return _TAG_OF_SEGMENT.get(segment, segment)


class AutoSchema(SpectacularAutoSchema):
    """drf-spectacular's AutoSchema plus the error statuses each operation can answer, a
    tag per resource, and descriptions only where a view wrote one for users (docstrings
    are for the code's readers)."""

    _mapping_body = False  # a request body is being mapped (not query parameters)

    def get_tags(self) -> list[str]:
        return [resource_tag(self.path)]

    def get_description(self) -> str:  # type: ignore[override]  # drf-spectacular's own
        return ""

    def _get_response_bodies(self, direction: Any = "response") -> dict[str, Any]:
        responses: dict[str, Any] = super()._get_response_bodies(direction)
        if direction != "response":
            return responses
        for code, declared in responses.items():
            if code.isdigit() and int(code) >= 400:
                error = error_response(int(code), declared.get("description"))
                responses[code] = self._rendered(error, code, direction)
        for status, response in error_responses(*self._error_statuses()).items():
            if str(status) not in responses:
                responses[str(status)] = self._rendered(response, str(status), direction)
        return dict(sorted(responses.items()))

    def _rendered(self, response: OpenApiResponse, code: str, direction: Any) -> Any:
        return self._get_response_for_code(  # type: ignore[no-untyped-call]
            response, code, None, direction
        )

    def _error_statuses(self) -> list[int]:
        statuses = [400, 503]
        if not all(isinstance(p, AllowAny) for p in self.view.get_permissions()):
            statuses += [401, 403, 429]
        if "{" in self.path:
            statuses.append(404)
        if self.method in ("POST", "PUT", "PATCH") and self._takes_body():
            statuses += [408, 413, 415]
        if self.method != "GET" and self.path.startswith(THREAD_SCOPED):
            statuses.append(409)  # the thread is terminated: it accepts no more writes
        return statuses

    def _takes_body(self) -> bool:
        return self._get_request_body() is not None  # type: ignore[no-untyped-call]

    def _get_request_for_media_type(self, serializer: Any, direction: Any = "request") -> Any:
        self._mapping_body = True
        try:
            return super()._get_request_for_media_type(  # type: ignore[no-untyped-call]
                serializer, direction
            )
        finally:
            self._mapping_body = False

    def _map_basic_serializer(self, serializer: Any, direction: Any) -> dict[str, Any]:
        """A request body's serializer, and each one nested in it, must be a StrictInput
        (:mod:`common.inputs`); its object is then closed (``additionalProperties: false``).
        Query parameters declared by a serializer are not a body."""
        schema: dict[str, Any] = super()._map_basic_serializer(  # type: ignore[no-untyped-call]
            serializer, direction
        )
        if direction != "request" or not self._mapping_body:
            return schema
        instance = force_instance(serializer)  # type: ignore[no-untyped-call]
        if not isinstance(instance, StrictInput):
            name = type(instance).__name__
            raise TypeError(
                f"{name} is in the request body of {self.method} {self.path} but is not a "
                "common.inputs.StrictInput, so it would drop an unknown key; derive it from "
                "StrictInput"
            )
        schema["additionalProperties"] = False
        return schema

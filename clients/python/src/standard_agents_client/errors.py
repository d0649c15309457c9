"""What the client raises.

Every error the API answers has one shape, ``{"error": {"code", "message", "field"?,
"details"?}}``; the client raises it as an :class:`ApiError` of the class its status
names (:class:`NotFound` for a 404, :class:`Conflict` for a 409, ...), so callers catch
what they mean and read ``code`` for the exact reason. A request that got no answer (the
server could not be reached, the connection dropped, the answer did not come in time) is
an :class:`ApiConnectionError`. Both derive from :class:`AgentsError`.
"""

from __future__ import annotations

import email.utils
import json
import time
from collections.abc import Mapping
from typing import Any

import httpx


class AgentsError(Exception):
    """Everything this client raises derives from it."""


class ApiConnectionError(AgentsError):
    """The request got no answer: the server was unreachable, the connection dropped or
    the answer did not arrive within the timeout (``__cause__`` is the httpx error)."""


class ApiTimeout(ApiConnectionError):
    """The answer did not arrive within the timeout."""


class UnexpectedAnswer(AgentsError):
    """The API answered something this client does not understand (a success without the
    JSON it should hold)."""


class ApiError(AgentsError):
    """An error the API answered.

    ``status`` is the HTTP status; ``code`` the stable, machine-readable reason
    (``not_found``, ``thread_busy``, ``idempotency_key_reused``, ...); ``message`` says it
    for people; ``field`` names where the problem is (``metadata.note``, ``limit``) when
    the API said; ``details`` holds more (a validation tree, every problem) when it did.
    """

    def __init__(
        self,
        status: int,
        code: str,
        message: str,
        *,
        field: str | None = None,
        details: Any = None,
        headers: Mapping[str, str] | None = None,
    ) -> None:
        super().__init__(status, code, message)
        self.status = status
        self.code = code
        self.message = message
        self.field = field
        self.details = details
        self.headers: Mapping[str, str] = dict(headers or {})

    @property
    def retry_after(self) -> float | None:
        """Seconds to wait before retrying, from ``Retry-After`` (a 429 or a 503), or
        None when the answer did not say."""
        return retry_after_seconds(self.headers)

    def __str__(self) -> str:
        where = f" (field {self.field})" if self.field else ""
        return f"{self.status} {self.code}: {self.message}{where}"

    def __repr__(self) -> str:
        return (
            f"{type(self).__name__}(status={self.status}, code={self.code!r}, "
            f"message={self.message!r}, field={self.field!r})"
        )


class ValidationError(ApiError):
    """400: the input breaks a rule or cannot be parsed; ``field`` names where."""


class AuthenticationError(ApiError):
    """401: the caller could not be identified (a missing, wrong, revoked or expired key)."""


class StreamRevoked(AuthenticationError):
    """An event stream ended because its credentials were revoked or expired."""


class PermissionDenied(ApiError):
    """403: the caller's role is too low."""


class NotFound(ApiError):
    """404: no such object for this tenant (another tenant's objects are the same)."""


class MethodNotAllowed(ApiError):
    """405."""


class Conflict(ApiError):
    """409: the object's state forbids the operation (``terminated``, ``thread_busy``,
    ``idempotency_key_reused``, ``action_resolved``, ...)."""


class Gone(ApiError):
    """410: the object expired."""


class PayloadTooLarge(ApiError):
    """413: a size or count cap was hit (the message names it)."""


class UnsupportedMediaType(ApiError):
    """415: the body's media type is not one the operation parses."""


class RangeNotSatisfiable(ApiError):
    """416: a download's range lies outside the file."""


class RateLimited(ApiError):
    """429: the caller is over one of its limits; retry after :attr:`retry_after` seconds."""


class ServerError(ApiError):
    """500 and other 5xx statuses without a class of their own: a fault of the server."""


class ServiceUnavailable(ServerError):
    """503: a service the platform needs is unreachable now; retry after
    :attr:`retry_after` seconds."""


ERRORS_BY_STATUS: Mapping[int, type[ApiError]] = {
    400: ValidationError,
    401: AuthenticationError,
    403: PermissionDenied,
    404: NotFound,
    405: MethodNotAllowed,
    409: Conflict,
    410: Gone,
    413: PayloadTooLarge,
    415: UnsupportedMediaType,
    416: RangeNotSatisfiable,
    429: RateLimited,
    503: ServiceUnavailable,
}


def error_class(status: int) -> type[ApiError]:
    """The class an error answer of ``status`` raises as."""
    if status in ERRORS_BY_STATUS:
        return ERRORS_BY_STATUS[status]
    return ServerError if status >= 500 else ApiError


def api_error(response: httpx.Response) -> ApiError:
    """The error ``response`` (read, status 400 or more) stands for. An answer without the
    error shape (a proxy's HTML page, say) keeps its text as the message and
    ``http_<status>`` as the code."""
    status = response.status_code
    code, message, field, details = f"http_{status}", response.reason_phrase, None, None
    try:
        body = json.loads(response.content) if response.content else None
    except ValueError:
        body = None
    error = body.get("error") if isinstance(body, dict) else None
    if isinstance(error, dict) and isinstance(error.get("code"), str):
        code = error["code"]
        message = str(error.get("message") or code)
        field = error.get("field") if isinstance(error.get("field"), str) else None
        details = error.get("details")
    elif response.content:
        message = response.text[:500]
    return error_class(status)(
        status, code, message, field=field, details=details, headers=response.headers
    )


def retry_after_seconds(headers: Mapping[str, str]) -> float | None:
    """``Retry-After`` in seconds (it is a number of seconds or an HTTP date), or None."""
    raw = next((value for name, value in headers.items() if name.lower() == "retry-after"), None)
    if raw is None:
        return None
    raw = raw.strip()
    try:
        return max(0.0, float(raw))
    except ValueError:
        pass
    try:
        when = email.utils.parsedate_to_datetime(raw)
    except (TypeError, ValueError):
        return None
    return max(0.0, when.timestamp() - time.time())

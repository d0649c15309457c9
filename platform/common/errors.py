"""The domain error hierarchy. Every error the platform raises on purpose is one of these.

Each class carries a stable ``code`` and the HTTP status the API answers with;
:func:`common.api.exception_handler` renders them as
``{"error": {"code", "message", "field"?}}``.
"""

from __future__ import annotations

from typing import Any, ClassVar


class DomainError(Exception):
    """Base of every deliberate platform error."""

    code: ClassVar[str] = "error"
    status: ClassVar[int] = 400

    def __init__(
        self,
        message: str,
        *,
        field: str | None = None,
        code: str | None = None,
        details: Any = None,
    ):
        super().__init__(message)
        self.message = message
        self.field = field
        self.details = details
        if code is not None:
            self.code = code  # type: ignore[misc]

    def as_dict(self) -> dict[str, Any]:
        """The API's ``error`` object; ``details`` (JSON-ready) only when there are some."""
        body: dict[str, Any] = {"code": self.code, "message": self.message}
        if self.field is not None:
            body["field"] = self.field
        if self.details is not None:
            body["details"] = self.details
        return body


class ValidationFailed(DomainError):
    """Input is malformed or breaks a rule; ``field`` names the culprit."""

    code = "invalid"
    status = 400


class AuthenticationFailed(DomainError):
    """The caller could not be identified (missing, malformed, wrong, revoked or expired key)."""

    code = "unauthenticated"
    status = 401


class PermissionDenied(DomainError):
    """The caller is known but its role does not allow this."""

    code = "forbidden"
    status = 403


class NotFound(DomainError):
    """No such object for this tenant (another tenant's object is also "not found")."""

    code = "not_found"
    status = 404


class Conflict(DomainError):
    """The object's state forbids the operation (e.g. a terminated thread)."""

    code = "conflict"
    status = 409


class LimitExceeded(DomainError):
    """A size or count cap was hit; the message names the cap."""

    code = "limit_exceeded"
    status = 413


class RetryLater(DomainError):
    """Base of the refusals a caller may send again unchanged: ``retry_after_s`` says when
    (the API answers it as the ``Retry-After`` header)."""

    def __init__(
        self,
        message: str,
        *,
        retry_after_s: int,
        field: str | None = None,
        code: str | None = None,
        details: Any = None,
    ):
        super().__init__(message, field=field, code=code, details=details)
        self.retry_after_s = max(1, retry_after_s)


class RateLimited(RetryLater):
    """The caller is over one of its limits; the message names the limit and its setting."""

    code = "rate_limited"
    status = 429


class AuthThrottled(RetryLater):
    """Too many failed authentications from the caller's address (or with one key prefix
    from it): credentials from there are refused unchecked until ``retry_after_s`` passes."""

    code = "auth_throttled"
    status = 429


class TemporarilyUnavailable(RetryLater):
    """The platform cannot serve this now through no fault of the caller (every sandbox
    runner busy, a dependency unreachable)."""

    code = "unavailable"
    status = 503


class NotAvailable(DomainError):
    """The capability exists in the spec but is not available in this deployment."""

    code = "not_available"
    status = 501


class DecryptionFailed(DomainError):
    """A ciphertext was tampered with, bound to other data, or its key is unknown."""

    code = "decryption_failed"
    status = 500

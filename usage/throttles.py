"""The API's request quotas as a DRF throttle (``DEFAULT_THROTTLE_CLASSES``)."""

from __future__ import annotations

from typing import Any

from rest_framework.request import Request
from rest_framework.throttling import BaseThrottle

from tenancy.principals import Principal
from usage.quotas import request_admit


class QuotaThrottle(BaseThrottle):
    """Counts every authenticated API request against its tenant's ``requests_per_minute``
    and its API key's ``key_requests_per_minute`` (:func:`usage.quotas.request_admit`).

    DRF runs it after authentication and permissions. A refusal raises
    :class:`~usage.quotas.QuotaExceeded` instead of answering False, so the one exception
    handler answers it in the platform's error shape (429, ``Retry-After``, the limit's
    name) rather than DRF's ``Throttled``. Unauthenticated requests (the schema, the docs)
    are not counted."""

    def allow_request(self, request: Request, view: Any) -> bool:
        principal = request.auth
        if isinstance(principal, Principal):
            key = principal.api_key
            request_admit(
                tenant_id=principal.tenant.pk, key_id=None if key is None else str(key.pk)
            )
        return True

"""Infrastructure that is briefly unreachable: what counts as an outage, and which service.

A Redis or PostgreSQL restart surfaces as one of :data:`OUTAGE_ERRORS`. Such an error is
nobody's fault and passes: the API answers ``503`` with ``Retry-After`` (never a ``500``),
and a flow that meets one leaves its turn to be resumed instead of failing it.
"""

from __future__ import annotations

from typing import Final

import redis
from django.db import InterfaceError, OperationalError
from kombu.exceptions import OperationalError as BrokerError

# Redis as cache, lock store and channel layer; the broker (Redis through kombu); PostgreSQL.
OUTAGE_ERRORS: Final = (
    redis.ConnectionError,
    redis.TimeoutError,
    BrokerError,
    OperationalError,
    InterfaceError,
)
# What a client is told to wait before retrying, in seconds.
RETRY_AFTER_S: Final = 5


def outage_service(error: BaseException) -> str | None:
    """Which service ``error`` says is unreachable ("Redis" or "PostgreSQL"), or None when
    it is not an outage."""
    if isinstance(error, redis.ConnectionError | redis.TimeoutError | BrokerError):
        return "Redis"
    if isinstance(error, OperationalError | InterfaceError):
        return "PostgreSQL"
    return None

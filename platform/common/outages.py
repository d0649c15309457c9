"""Infrastructure that is briefly unreachable: what counts as an outage, and which service.

A Redis or PostgreSQL restart surfaces as one of :data:`OUTAGE_ERRORS`. Such an error is
nobody's fault and passes: the API answers ``503`` with ``Retry-After`` (never a ``500``),
and a flow that meets one leaves its turn to be resumed instead of failing it.
"""

from __future__ import annotations

import logging
import threading
import time
from typing import Any, Final

import redis
from django.db import InterfaceError, OperationalError, connection
from kombu.exceptions import OperationalError as BrokerError

logger = logging.getLogger(__name__)

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


# A pool is re-checked at most this often (seconds).
_RECHECK_EVERY_S: Final = 1.0
_rechecked_at = 0.0
_recheck_guard = threading.Lock()


def database_pool_recheck() -> None:
    """After PostgreSQL failed a caller: test this process's idle pooled connections, on a
    thread of their own, and replace the broken ones, so that once PostgreSQL is back the
    next callers do not each meet a connection its restart broke (at most once a second)."""
    global _rechecked_at
    with _recheck_guard:
        now = time.monotonic()
        if now - _rechecked_at < _RECHECK_EVERY_S:
            return
        _rechecked_at = now
    pool = getattr(connection, "pool", None)
    if pool is not None:
        threading.Thread(target=_recheck, args=(pool,), name="db-pool-check", daemon=True).start()


def _recheck(pool: Any) -> None:
    try:
        pool.check()
    except Exception:  # the pool replaces what it can; the next failure checks again
        logger.warning("checking the database pool failed", exc_info=True)

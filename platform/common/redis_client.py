"""The process-wide plain Redis client for short calls on hot paths: locks, control
signals, leases, change tokens (Django's cache and the channel layer keep their own)."""

from __future__ import annotations

import threading

import redis
from django.conf import settings
from redis.backoff import NoBackoff
from redis.retry import Retry

# A stalled call fails well inside a thread lock's TTL, so a heartbeat can retry and still
# notice in time that its lock is lost.
SOCKET_TIMEOUT_S = 1.5
CONNECT_TIMEOUT_S = 1.0

_client: redis.Redis | None = None
_client_guard = threading.Lock()


def redis_client() -> redis.Redis:
    """One thread-safe connection pool per process, built on first use from
    ``settings.REDIS_URL``. A call fails within a few seconds instead of hanging, and only a
    broken connection is retried (once): a lock call that waits out the TTL is worse than
    one that fails. Replies are bytes."""
    global _client
    client = _client
    if client is None:
        with _client_guard:
            if _client is None:
                _client = redis.Redis.from_url(
                    settings.REDIS_URL,
                    socket_timeout=SOCKET_TIMEOUT_S,
                    socket_connect_timeout=CONNECT_TIMEOUT_S,
                    health_check_interval=30,
                    retry=Retry(NoBackoff(), 1, supported_errors=(redis.ConnectionError,)),
                )
            client = _client
    return client

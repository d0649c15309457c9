"""Counted leases: at most ``limit`` holders of one of a tenant's names at once, across every
process (the per-tenant caps on ``POST …/run-code``, ``threads.services.code_endpoint``, and
on flows' sandbox calls, ``threads.services.code``).

Contracts:

* The leases of a name live in one Redis sorted set, ``<tenant>:leases:<name>``: a member per
  lease (a random token), scored with the time the lease expires, read from Redis's clock so
  that processes with skewed clocks agree.
* :func:`lease_acquire` is one Lua script: drop the expired leases, count the rest, add one if
  fewer than ``limit`` are held. It never waits; over the limit it raises
  :class:`LeaseLimitReached`, which says when the oldest lease ends at the latest.
* A holder releases its lease (:meth:`Lease.release`) once its work is over, also when that
  work failed or was cancelled. A lease that is never released (a crashed or stuck process)
  expires ``ttl_ms`` after it was taken, so a slot cannot leak for longer; the holder's work
  must be bounded by that time (run-code's is: the endpoint budget terminates it).
* The set itself expires with its last lease, so an idle tenant leaves nothing in Redis.
* :func:`lease_wait` waits for a lease in the order of asking (flows' sandbox calls,
  ``threads.services.code.sandbox_turn``): a queue beside the set (``…:queue``, scored by a
  ticket) grants a waiter once the held leases plus the waiters ahead of it are under the
  limit, in its own ask; a waiter re-asks while it waits (the first often, the last rarely),
  and one that stops asking (its process died) loses its place within seconds.

Thread-safe; a call fails within the client's socket timeout when Redis does not answer
(``threads.services.lock.redis_client``), as a :class:`redis.RedisError`.
"""

from __future__ import annotations

import contextlib
import logging
import math
import secrets
import threading
import time
from collections.abc import Iterator
from dataclasses import dataclass
from typing import Final, Protocol, cast
from uuid import UUID

import redis

from common.redis_client import redis_client

logger = logging.getLogger(__name__)

# Returns {1, held} when a lease was added, {0, held, ms until the oldest lease expires} when
# ``limit`` are held already.
_ACQUIRE_LUA: Final = """
local clock = redis.call("TIME")
local now = tonumber(clock[1]) * 1000 + math.floor(tonumber(clock[2]) / 1000)
redis.call("ZREMRANGEBYSCORE", KEYS[1], "-inf", now)
local held = redis.call("ZCARD", KEYS[1])
if held >= tonumber(ARGV[2]) then
    local oldest = redis.call("ZRANGE", KEYS[1], 0, 0, "WITHSCORES")
    return {0, held, tonumber(oldest[2]) - now}
end
redis.call("ZADD", KEYS[1], now + tonumber(ARGV[3]), ARGV[1])
local last = redis.call("ZRANGE", KEYS[1], -1, -1, "WITHSCORES")
redis.call("PEXPIREAT", KEYS[1], last[2])
return {1, held + 1}
"""

# Returns how many live leases the name has (expired ones are dropped first).
_COUNT_LUA: Final = """
local clock = redis.call("TIME")
local now = tonumber(clock[1]) * 1000 + math.floor(tonumber(clock[2]) / 1000)
redis.call("ZREMRANGEBYSCORE", KEYS[1], "-inf", now)
return redis.call("ZCARD", KEYS[1])
"""


# Take a lease in the order of asking: the caller (ARGV[1], its token) joins the name's queue
# of waiters (KEYS[2], scored by a ticket from KEYS[4]) if it is not in it yet, and is granted
# the lease once the live leases plus the waiters ahead of it are fewer than the limit. A
# waiter that stops asking is dropped from the queue (KEYS[3] holds each waiter's expiry,
# renewed by each ask). Returns {1} when granted, {0, waiters ahead} otherwise.
_QUEUED_ACQUIRE_LUA: Final = """
local clock = redis.call("TIME")
local now = tonumber(clock[1]) * 1000 + math.floor(tonumber(clock[2]) / 1000)
redis.call("ZREMRANGEBYSCORE", KEYS[1], "-inf", now)
local gone = redis.call("ZRANGEBYSCORE", KEYS[3], "-inf", now)
for _, member in ipairs(gone) do
    redis.call("ZREM", KEYS[2], member)
end
redis.call("ZREMRANGEBYSCORE", KEYS[3], "-inf", now)
if not redis.call("ZSCORE", KEYS[2], ARGV[1]) then
    redis.call("ZADD", KEYS[2], redis.call("INCR", KEYS[4]), ARGV[1])
end
local ahead = redis.call("ZRANK", KEYS[2], ARGV[1])
local held = redis.call("ZCARD", KEYS[1])
local queue_ttl = tonumber(ARGV[4]) * 2
if held + ahead < tonumber(ARGV[2]) then
    redis.call("ZREM", KEYS[2], ARGV[1])
    redis.call("ZREM", KEYS[3], ARGV[1])
    redis.call("ZADD", KEYS[1], now + tonumber(ARGV[3]), ARGV[1])
    local last = redis.call("ZRANGE", KEYS[1], -1, -1, "WITHSCORES")
    redis.call("PEXPIREAT", KEYS[1], last[2])
    if redis.call("ZCARD", KEYS[2]) == 0 then
        redis.call("DEL", KEYS[2], KEYS[3], KEYS[4])
    end
    return {1, 0}
end
redis.call("ZADD", KEYS[3], now + tonumber(ARGV[4]), ARGV[1])
redis.call("PEXPIRE", KEYS[2], queue_ttl)
redis.call("PEXPIRE", KEYS[3], queue_ttl)
redis.call("PEXPIRE", KEYS[4], queue_ttl)
return {0, ahead}
"""

# Extend a held lease (ARGV[1]) to ARGV[2] ms from now; 0 when it is no longer held.
_RENEW_LUA: Final = """
local clock = redis.call("TIME")
local now = tonumber(clock[1]) * 1000 + math.floor(tonumber(clock[2]) / 1000)
if not redis.call("ZSCORE", KEYS[1], ARGV[1]) then
    return 0
end
redis.call("ZADD", KEYS[1], "XX", now + tonumber(ARGV[2]), ARGV[1])
local last = redis.call("ZRANGE", KEYS[1], -1, -1, "WITHSCORES")
redis.call("PEXPIREAT", KEYS[1], last[2])
return 1
"""
# A waiter asks again after this long times one plus the number of waiters ahead of it (the
# first asks often, the last rarely), at most _MAX_ASK_EVERY_S; a waiter that has not asked for
# _QUEUE_TTL_MS is taken for gone.
_ASK_EVERY_S: Final = 0.05
_MAX_ASK_EVERY_S: Final = 1.0
_QUEUE_TTL_MS: Final = 5_000


class Waiting(Protocol):
    """What a waiter waits on: ``wait(seconds)`` returns True once it should stop waiting
    (a flow's abort signal)."""

    def wait(self, timeout: float | None = None) -> bool: ...


class LeaseLimitReached(Exception):
    """``limit`` leases of the name are held; the oldest ends within ``retry_after_s``."""

    def __init__(self, *, limit: int, retry_after_s: int) -> None:
        super().__init__(f"{limit} lease(s) held; retry after {retry_after_s} s")
        self.limit = limit
        self.retry_after_s = retry_after_s


@dataclass(eq=False)
class Lease:
    """One held slot, returned by :func:`lease_acquire`; only its holder releases it."""

    key: str
    token: str

    @contextlib.contextmanager
    def kept(self, *, ttl_ms: int) -> Iterator[Lease]:
        """Renew the lease to ``ttl_ms`` from now every third of it while the block runs (on
        a thread of its own), so that its holder may work for as long as it needs while a
        lease whose process died lapses within ``ttl_ms``. A renewal Redis cannot answer is
        logged and tried again at the next tick."""
        stop = threading.Event()

        def renew() -> None:
            while not stop.wait(ttl_ms / 3000):
                try:
                    redis_client().eval(_RENEW_LUA, 1, self.key, self.token, str(ttl_ms))
                except redis.RedisError:
                    logger.warning("could not renew lease %s", self.key, exc_info=True)

        renewer = threading.Thread(target=renew, name=f"lease:{self.key}", daemon=True)
        renewer.start()
        try:
            yield self
        finally:
            stop.set()

    def release(self) -> bool:
        """Give the slot back; True when it was still held (False: it had expired, or was
        released before). Never raises: when Redis cannot answer, the failure is logged and
        the lease ends at its expiry instead."""
        try:
            return bool(redis_client().zrem(self.key, self.token))
        except redis.RedisError:
            logger.warning("could not release lease %s; it will expire", self.key, exc_info=True)
            return False


def lease_key(*, tenant_id: UUID | str, name: str) -> str:
    return f"{tenant_id}:leases:{name}"


def lease_acquire(*, tenant_id: UUID | str, name: str, limit: int, ttl_ms: int) -> Lease:
    """Take one of the tenant's ``limit`` slots of ``name`` for at most ``ttl_ms``; never
    waits. Raises :class:`LeaseLimitReached` when all are held, ``ValueError`` for a limit
    or ttl below 1, ``redis.RedisError`` when Redis cannot answer."""
    if limit < 1 or ttl_ms < 1:
        raise ValueError(f"limit and ttl_ms must be at least 1, got {limit} and {ttl_ms}")
    key = lease_key(tenant_id=tenant_id, name=name)
    token = secrets.token_hex(16)
    answer = cast(
        list[int], redis_client().eval(_ACQUIRE_LUA, 1, key, token, str(limit), str(ttl_ms))
    )
    if answer[0] == 1:
        return Lease(key=key, token=token)
    retry_after_s = max(1, math.ceil(answer[2] / 1000))
    raise LeaseLimitReached(limit=limit, retry_after_s=retry_after_s)


def lease_count(*, tenant_id: UUID | str, name: str) -> int:
    """How many leases of the tenant's ``name`` are held now (a snapshot)."""
    return live_count(lease_key(tenant_id=tenant_id, name=name))


def live_count(key: str) -> int:
    """How many members of the sorted set ``key``, each scored with its expiry (Redis's clock,
    in ms), have not expired; drops the expired ones (a snapshot)."""
    return int(cast(int, redis_client().eval(_COUNT_LUA, 1, key)))


def lease_wait(
    *,
    tenant_id: UUID | str,
    name: str,
    limit: int,
    ttl_ms: int,
    timeout_s: float,
    until: Waiting,
) -> Lease | None:
    """Take one of the tenant's ``limit`` slots of ``name`` for at most ``ttl_ms``, waiting for
    it up to ``timeout_s`` behind the tenant's earlier waiters, in the order they asked, across
    every process. Returns None when ``timeout_s`` passed, or ``until`` fired, first (the
    caller then holds no slot and no place in the queue). The waiter holds nothing while it
    waits but its place, which lapses within seconds if its process dies. Raises
    ``redis.RedisError`` when Redis cannot answer."""
    if limit < 1 or ttl_ms < 1:
        raise ValueError(f"limit and ttl_ms must be at least 1, got {limit} and {ttl_ms}")
    key = lease_key(tenant_id=tenant_id, name=name)
    keys = [key, f"{key}:queue", f"{key}:queue:expiry", f"{key}:queue:tickets"]
    token = secrets.token_hex(16)
    deadline = time.monotonic() + timeout_s
    client = redis_client()
    while True:
        asked = client.eval(
            _QUEUED_ACQUIRE_LUA, 4, *keys, token, str(limit), str(ttl_ms), str(_QUEUE_TTL_MS)
        )
        answer = cast(list[int], asked)
        if answer[0] == 1:
            return Lease(key=key, token=token)
        left = deadline - time.monotonic()
        pause = min(_MAX_ASK_EVERY_S, _ASK_EVERY_S * (1 + answer[1]), left)
        if left <= 0 or until.wait(max(0.0, pause)):
            # A slot is granted only in the waiter's own ask: leaving the queue is enough.
            with client.pipeline(transaction=True) as pipe:
                pipe.zrem(keys[1], token)
                pipe.zrem(keys[2], token)
                pipe.execute()
            return None

"""The per-thread lock: one worker at a time runs a thread's flow (ARCHITECTURE §5).

Contracts:

* :func:`lock_acquire` is ``SET <tenant>:thread:<id>:lock <token> NX PX <ttl>`` and never waits;
  taking the lock also drops control signals left for a previous holder.
  ``None`` means another worker holds the lock and will drain the inbox; the caller returns.
* A lock expires ``ttl_ms`` after its last acquire or renewal, so a crashed holder blocks its
  thread for at most :data:`LOCK_TTL_MS`. A live holder keeps the lock by running a
  :class:`~threads.services.heartbeat.Heartbeat` and releases it in a ``finally`` once the
  heartbeat has stopped.
* Renewal and release compare the random token, so a holder whose lock expired and was taken
  by another worker can neither extend nor delete the new holder's lock.
* Expiry is made unlikely, not impossible (a paused process, an unreachable Redis). The lock
  keeps two workers from running one thread in the common case; correctness rests on the
  Postgres fence (``Thread.fence``) that every write of a flow checks. :attr:`ThreadLock.lost`
  tells a holder that it lost the lock, so it can stop early.
* A wake-up that finds the lock taken leaves the holder a wake note
  (``<tenant>:thread:<id>:wake``, in the same script as the failed ``SET``); the holder's
  release takes it and reports it, and the holder wakes the thread again. The note lives
  as long as the lock (renewals extend both).
* Control signals (:data:`CONTROL_SIGNALS`) reach the current holder through the Redis list
  ``<tenant>:thread:<id>:control``, which its heartbeat pops. Signals that nobody pops expire
  :data:`CONTROL_TTL_MS` after the last one was sent. The sender also rings a doorbell (a
  PUBLISH of the list's key on :data:`DOORBELL_CHANNEL`) so that the holder pops it at once;
  the list is the truth, and a lost doorbell only delays a signal until the next renewal.

Everything here is thread-safe: workers run Celery's threads pool.
"""

from __future__ import annotations

import secrets
import threading
import time
from dataclasses import dataclass, field
from typing import Any, Final, TypeAlias, cast
from uuid import UUID

import redis
from django.conf import settings

from common.redis_client import redis_client

Id: TypeAlias = UUID | str

LOCK_TTL_MS: Final = 4_000
RENEW_EVERY_MS: Final = LOCK_TTL_MS // 3
CONTROL_TTL_MS: Final = 60_000
CONTROL_SIGNALS: Final = frozenset({"stop", "terminate", "cancel"})

# Pub/sub channels are shared by every database number of a Redis server: a doorbell from a
# process on another database names a key nobody here holds, and wakes nothing.
DOORBELL_CHANNEL: Final = "platform:thread-control"

# Renewal also keeps the holder's wake note (see lock_acquire) alive as long as the lock.
_RENEW_LUA: Final = """
if redis.call("GET", KEYS[1]) == ARGV[1] then
    if KEYS[2] then
        redis.call("PEXPIRE", KEYS[2], ARGV[2])
    end
    return redis.call("PEXPIRE", KEYS[1], ARGV[2])
end
return 0
"""

# Take the lock if free and drop the control signals nobody popped (a previous holder's);
# else, when asked, leave the holder a wake note. One script, so a note is never left just
# after the holder released (it would then go unread).
_ACQUIRE_LUA: Final = """
if redis.call("SET", KEYS[1], ARGV[1], "NX", "PX", ARGV[2]) then
    redis.call("DEL", KEYS[2])
    return 1
end
if ARGV[3] == "1" then
    redis.call("SET", KEYS[3], "1", "PX", ARGV[2])
end
return 0
"""

# Returns 2 when a wake note was waiting (and takes it), 1 when released, 0 when not ours.
_RELEASE_LUA: Final = """
if redis.call("GET", KEYS[1]) == ARGV[1] then
    redis.call("DEL", KEYS[1])
    if KEYS[2] and redis.call("DEL", KEYS[2]) == 1 then
        return 2
    end
    return 1
end
return 0
"""


def lock_key(*, tenant_id: Id, thread_id: Id) -> str:
    return f"{tenant_id}:thread:{thread_id}:lock"


def control_key(*, tenant_id: Id, thread_id: Id) -> str:
    return f"{tenant_id}:thread:{thread_id}:control"


def wake_key(*, tenant_id: Id, thread_id: Id) -> str:
    return f"{tenant_id}:thread:{thread_id}:wake"


@dataclass(eq=False)
class ThreadLock:
    """A lock returned by :func:`lock_acquire`; only its holder calls :meth:`renew`/:meth:`release`.

    ``renewed_at`` is the :func:`time.monotonic` time at which the last successful acquire or
    renewal was sent: the lock is ours at least until ``renewed_at + ttl_ms / 1000``.
    ``lost`` is set once the holder learns that the lock is no longer its own; it is never
    cleared. ``wake_key`` names the holder's wake note (see :func:`lock_acquire`);
    ``woken`` tells, after :meth:`release`, whether a note was waiting.
    """

    key: str
    token: str
    ttl_ms: int
    renewed_at: float
    lost: threading.Event = field(default_factory=threading.Event)
    wake_key: str | None = None
    woken: bool = False

    def renew(self) -> bool:
        """Extend the lock to ``ttl_ms`` from now if it is still ours.

        Returns ``False`` and sets :attr:`lost` when the key has expired or carries another
        token. Raises :class:`redis.RedisError` when Redis cannot answer; the lock may then
        still be ours until ``renewed_at + ttl_ms / 1000``.
        """
        sent_at = time.monotonic()
        if redis_client().eval(_RENEW_LUA, *self._keys(), self.token, str(self.ttl_ms)):
            self.renewed_at = sent_at
            return True
        self.lost.set()
        return False

    def release(self) -> bool:
        """Delete the lock if it is still ours; ``True`` when it was. Sets :attr:`woken` when
        a wake note was waiting (and takes it): someone wanted the thread run meanwhile.

        Call it after the heartbeat has stopped. ``False`` means it had expired (and perhaps
        been taken by another worker, whose lock is left alone). Raises
        :class:`redis.RedisError` when Redis cannot answer; the lock then expires on its own.
        """
        released = cast(int, redis_client().eval(_RELEASE_LUA, *self._keys(), self.token))
        self.woken = released == 2
        return released > 0

    def _keys(self) -> list[Any]:
        keys = [self.key] if self.wake_key is None else [self.key, self.wake_key]
        return [len(keys), *keys]


def lock_acquire(
    *, tenant_id: Id, thread_id: Id, ttl_ms: int | None = None, note_if_held: bool = False
) -> ThreadLock | None:
    """Take the thread's lock if nobody holds it; never waits. ``ttl_ms`` defaults to the
    setting ``THREAD_LOCK_TTL_MS``. Taking it drops the control signals that no heartbeat
    popped (they were for a previous holder), in the same round trip.

    Returns ``None`` while another worker holds it; with ``note_if_held`` it then leaves the
    holder a wake note, which the holder's :meth:`ThreadLock.release` reports, so a wake-up
    that came while it held the lock is not lost. The caller runs a
    :class:`~threads.services.heartbeat.Heartbeat` for as long as it works and releases the
    lock in a ``finally``.
    """
    ttl_ms = settings.THREAD_LOCK_TTL_MS if ttl_ms is None else ttl_ms
    key = lock_key(tenant_id=tenant_id, thread_id=thread_id)
    control = control_key(tenant_id=tenant_id, thread_id=thread_id)
    note = wake_key(tenant_id=tenant_id, thread_id=thread_id)
    token = secrets.token_hex(16)
    sent_at = time.monotonic()
    asked = "1" if note_if_held else "0"
    if not redis_client().eval(_ACQUIRE_LUA, 3, key, control, note, token, str(ttl_ms), asked):
        return None
    return ThreadLock(key=key, token=token, ttl_ms=ttl_ms, renewed_at=sent_at, wake_key=note)


def lock_is_held(*, tenant_id: Id, thread_id: Id) -> bool:
    """Whether any worker holds the thread's lock (the sweeper's question); a snapshot only."""
    return bool(redis_client().exists(lock_key(tenant_id=tenant_id, thread_id=thread_id)))


def control_send(*, tenant_id: Id, thread_id: Id, signal: str) -> None:
    """Queue ``signal`` for the thread's current lock holder and ring its doorbell.

    The holder's :class:`~threads.services.heartbeat.Heartbeat` hands it to ``on_signal``
    within a few Redis round trips (within its renewal interval if the doorbell goes unheard).
    With no holder, the next :func:`lock_acquire` drops it, and it expires after
    :data:`CONTROL_TTL_MS` anyway: what must outlive a holder is written to the thread row.
    Sending takes one round trip.
    Raises :class:`ValueError` for a signal outside :data:`CONTROL_SIGNALS`.
    """
    if signal not in CONTROL_SIGNALS:
        raise ValueError(f"unknown control signal {signal!r}; expected one of {CONTROL_SIGNALS}")
    key = control_key(tenant_id=tenant_id, thread_id=thread_id)
    with redis_client().pipeline(transaction=True) as pipe:
        pipe.rpush(key, signal)
        pipe.pexpire(key, CONTROL_TTL_MS)
        _ring_doorbell(pipe, key)
        pipe.execute()


def _ring_doorbell(pipe: redis.client.Pipeline, key: str) -> None:
    """Queue on ``pipe``, after the push, the PUBLISH that makes the holder of the control list
    ``key`` pop it now; a holder that hears it finds the signal already there."""
    pipe.publish(DOORBELL_CHANNEL, key)

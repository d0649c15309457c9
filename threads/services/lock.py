"""The per-thread lock: one worker at a time runs a thread's flow (ARCHITECTURE §5).

Contracts:

* :func:`lock_acquire` is ``SET <tenant>:thread:<id>:lock <token> NX PX <ttl>`` and never waits;
  taking the lock also drops control signals left for a previous holder.
  ``None`` means another worker holds the lock and will drain the inbox; the caller returns.
* A lock expires ``ttl_ms`` after its last acquire or renewal, so a crashed holder blocks its
  thread for at most :data:`LOCK_TTL_MS`. A live holder keeps the lock by running a
  :class:`Heartbeat` and releases it in a ``finally`` once the heartbeat has stopped.
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
  :data:`CONTROL_TTL_MS` after the last one was sent.

Everything here is thread-safe: workers run Celery's threads pool.
"""

from __future__ import annotations

import logging
import secrets
import threading
import time
from collections.abc import Callable
from dataclasses import dataclass, field
from types import TracebackType
from typing import Any, Final, TypeAlias, cast
from uuid import UUID

import redis
from django.conf import settings
from redis.backoff import NoBackoff
from redis.retry import Retry

logger = logging.getLogger(__name__)

Id: TypeAlias = UUID | str

LOCK_TTL_MS: Final = 4_000
RENEW_EVERY_MS: Final = LOCK_TTL_MS // 3
CONTROL_TTL_MS: Final = 60_000
CONTROL_SIGNALS: Final = frozenset({"stop", "terminate", "cancel"})

# A stalled call fails well inside LOCK_TTL_MS, so the heartbeat can retry and still notice
# in time that the lock is lost.
_SOCKET_TIMEOUT_S: Final = 1.5
_CONNECT_TIMEOUT_S: Final = 1.0
# One BLPOP blocks at most this long, so it never runs into the socket timeout.
_MAX_BLOCK_S: Final = 1.0
# The key that wakes a blocked heartbeat on exit outlives it only if the heartbeat had
# already stopped; it then vanishes on its own.
_WAKE_TTL_MS: Final = 10_000

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

_client: redis.Redis | None = None
_client_guard = threading.Lock()


def redis_client() -> redis.Redis:
    """The process-wide client for locks and control signals: one thread-safe connection pool.

    Built on first use from ``settings.REDIS_URL``. A call fails within a few seconds instead of
    hanging, and only a broken connection is retried (once): a lock call that waits out the TTL
    is worse than one that fails.
    """
    global _client
    client = _client
    if client is None:
        with _client_guard:
            if _client is None:
                _client = redis.Redis.from_url(
                    settings.REDIS_URL,
                    socket_timeout=_SOCKET_TIMEOUT_S,
                    socket_connect_timeout=_CONNECT_TIMEOUT_S,
                    health_check_interval=30,
                    retry=Retry(NoBackoff(), 1, supported_errors=(redis.ConnectionError,)),
                )
            client = _client
    return client


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
    that came while it held the lock is not lost. The caller runs a :class:`Heartbeat` for as
    long as it works and releases the lock in a ``finally``.
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
    """Queue ``signal`` for the thread's current lock holder.

    The holder's :class:`Heartbeat` hands it to ``on_signal`` within a Redis round trip. With no
    holder, the next :func:`lock_acquire` drops it, and it expires after
    :data:`CONTROL_TTL_MS` anyway: what must outlive a holder is written to the thread row.
    Raises :class:`ValueError` for a signal outside :data:`CONTROL_SIGNALS`.
    """
    if signal not in CONTROL_SIGNALS:
        raise ValueError(f"unknown control signal {signal!r}; expected one of {CONTROL_SIGNALS}")
    key = control_key(tenant_id=tenant_id, thread_id=thread_id)
    with redis_client().pipeline(transaction=True) as pipe:
        pipe.rpush(key, signal)
        pipe.pexpire(key, CONTROL_TTL_MS)
        pipe.execute()


class Heartbeat:
    """Keeps a held lock alive and delivers control signals while its holder runs a flow.

    Used as a context manager by the lock holder, once. Inside, a daemon thread blocks on the
    control list, hands each popped signal to ``on_signal`` and renews the lock every
    ``renew_every_ms`` (default ``lock.ttl_ms // 3``, which is :data:`RENEW_EVERY_MS` for the
    default TTL).

    ``on_signal`` and ``on_lost`` run on the heartbeat thread, so they must be quick and
    thread-safe (set an event, say): a slow one delays renewals. Their exceptions are logged
    and the heartbeat carries on.

    The heartbeat stops, sets ``lock.lost`` and calls ``on_lost`` once when a renewal finds the
    lock no longer ours, or when Redis has failed for longer than the TTL (the lock may have
    expired and been taken). Once ``__exit__`` has begun, ``on_lost`` is no longer called, and
    no callback runs after it has returned unless it gave up waiting (below).

    ``__exit__`` stops the thread within a Redis round trip: it pushes to a private wake-up list
    that the blocked ``BLPOP`` also watches. It waits at most ``renew_every_ms``; a thread still
    running then (a stuck callback or a stalled Redis call) is logged and left to finish alone.
    It does not release the lock.
    """

    def __init__(
        self,
        lock: ThreadLock,
        *,
        tenant_id: Id,
        thread_id: Id,
        on_signal: Callable[[str], None],
        on_lost: Callable[[], None] = lambda: None,
        renew_every_ms: int | None = None,
    ) -> None:
        every_ms = lock.ttl_ms // 3 if renew_every_ms is None else renew_every_ms
        if not 0 < every_ms < lock.ttl_ms:
            raise ValueError(f"renew_every_ms must be in (0, {lock.ttl_ms}), got {every_ms}")
        self._lock = lock
        self._control_key = control_key(tenant_id=tenant_id, thread_id=thread_id)
        self._wake_key = f"{self._control_key}:wake:{secrets.token_hex(8)}"
        self._every_s = every_ms / 1000
        self._on_signal = on_signal
        self._on_lost = on_lost
        self._stopping = threading.Event()
        self._thread = threading.Thread(
            target=self._run, name=f"heartbeat:{thread_id}", daemon=True
        )

    def __enter__(self) -> Heartbeat:
        self._thread.start()
        return self

    def __exit__(
        self,
        exc_type: type[BaseException] | None,
        exc: BaseException | None,
        traceback: TracebackType | None,
    ) -> None:
        self._stopping.set()
        if self._thread.is_alive():
            self._wake()
        self._thread.join(timeout=self._every_s)
        if self._thread.is_alive():
            logger.warning("heartbeat for %s did not stop in time", self._lock.key)

    def _wake(self) -> None:
        try:
            with redis_client().pipeline(transaction=True) as pipe:
                pipe.rpush(self._wake_key, b"1")
                pipe.pexpire(self._wake_key, _WAKE_TTL_MS)
                pipe.execute()
        except redis.RedisError:
            logger.debug("could not wake the heartbeat for %s", self._lock.key, exc_info=True)

    def _run(self) -> None:
        try:
            self._beat()
        except Exception:
            logger.exception("heartbeat for %s crashed; the lock counts as lost", self._lock.key)
            self._lose()

    def _beat(self) -> None:
        lock = self._lock
        watched = [self._control_key, self._wake_key]
        control = self._control_key.encode()
        while not self._stopping.is_set():
            try:
                due_in = lock.renewed_at + self._every_s - time.monotonic()
                if due_in <= 0:
                    if not lock.renew():
                        logger.warning("lock %s was lost: another worker holds it", lock.key)
                        self._lose()
                        return
                    continue
                timeout = max(0.01, min(due_in, _MAX_BLOCK_S))
                popped = cast(
                    "tuple[bytes, bytes] | None", redis_client().blpop(watched, timeout=timeout)
                )
            except redis.RedisError:
                if time.monotonic() >= lock.renewed_at + lock.ttl_ms / 1000:
                    logger.warning("lock %s was lost: Redis failed past its TTL", lock.key)
                    self._lose()
                    return
                logger.warning("heartbeat for %s: Redis failed; retrying", lock.key, exc_info=True)
                self._stopping.wait(self._every_s / 4)
                continue
            if popped is not None and popped[0] == control:
                self._deliver(popped[1].decode())

    def _deliver(self, signal: str) -> None:
        try:
            self._on_signal(signal)
        except Exception:
            logger.exception("on_signal(%r) failed for %s", signal, self._lock.key)

    def _lose(self) -> None:
        self._lock.lost.set()
        if self._stopping.is_set():
            return
        try:
            self._on_lost()
        except Exception:
            logger.exception("on_lost failed for %s", self._lock.key)

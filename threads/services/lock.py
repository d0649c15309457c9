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
  :data:`CONTROL_TTL_MS` after the last one was sent. The sender also rings a doorbell (a
  PUBLISH of the list's key on :data:`DOORBELL_CHANNEL`) so that the holder pops it at once;
  the list is the truth, and a lost doorbell only delays a signal until the next renewal.
* One heartbeat thread per process renews all the locks it holds, in one round trip per
  tick, and one more listens for doorbells (:class:`Heartbeat`).

Everything here is thread-safe: workers run Celery's threads pool.
"""

from __future__ import annotations

import hashlib
import logging
import os
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

from common.redis_client import redis_client

logger = logging.getLogger(__name__)

Id: TypeAlias = UUID | str

LOCK_TTL_MS: Final = 4_000
RENEW_EVERY_MS: Final = LOCK_TTL_MS // 3
CONTROL_TTL_MS: Final = 60_000
CONTROL_SIGNALS: Final = frozenset({"stop", "terminate", "cancel"})

# Pub/sub channels are shared by every database number of a Redis server: a doorbell from a
# process on another database names a key nobody here holds, and wakes nothing.
DOORBELL_CHANNEL: Final = "platform:thread-control"

# The heartbeat thread re-checks its schedule at least this often, and pauses this long after
# an unexpected error.
_MAX_SLEEP_S: Final = 0.25
# One wait for a doorbell blocks at most this long, so it never runs into the socket timeout.
_LISTEN_S: Final = 1.0
# Pause before subscribing to doorbells again after a failure.
_RESUBSCRIBE_S: Final = 1.0

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

# One beat of a heartbeat: renew as _RENEW_LUA does, then take the control signals waiting
# for the holder (KEYS[2]), oldest first. Returns nil, leaving the signals alone, when the lock
# is not ours.
_BEAT_LUA: Final = """
if redis.call("GET", KEYS[1]) ~= ARGV[1] then
    return false
end
if KEYS[3] then
    redis.call("PEXPIRE", KEYS[3], ARGV[2])
end
redis.call("PEXPIRE", KEYS[1], ARGV[2])
local signals = redis.call("LRANGE", KEYS[2], 0, -1)
if #signals > 0 then
    redis.call("DEL", KEYS[2])
end
return signals
"""
_BEAT_SHA: Final = hashlib.sha1(_BEAT_LUA.encode(), usedforsecurity=False).hexdigest()

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
    """Queue ``signal`` for the thread's current lock holder and ring its doorbell.

    The holder's :class:`Heartbeat` hands it to ``on_signal`` within a few Redis round trips
    (within its renewal interval if the doorbell goes unheard). With no holder, the next
    :func:`lock_acquire` drops it, and it expires after :data:`CONTROL_TTL_MS` anyway: what
    must outlive a holder is written to the thread row. Sending takes one round trip.
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


class Heartbeat:
    """Keeps a held lock alive and delivers control signals while its holder runs a flow.

    Used as a context manager by the lock holder, once. Entering registers the lock with the
    process's heartbeat thread (started with the first heartbeat, and again in a forked child),
    which beats for every registered lock: it renews the lock every ``renew_every_ms`` (default
    ``lock.ttl_ms // 3``, which is :data:`RENEW_EVERY_MS` for the default TTL; a renewal may
    come up to a quarter of that early, to share a round trip with others) and, in the same
    Redis script, pops the thread's control list and hands each signal, in order, to
    ``on_signal``. The locks due at one tick share one round trip. The heartbeat beats at once
    on entering (signals sent before it started), and when a doorbell for its thread rings
    (:func:`control_send`); a second thread holds the process's one doorbell subscription.

    ``on_signal`` and ``on_lost`` run on the heartbeat thread, so they must be quick and
    thread-safe (set an event, say): a slow one delays the renewals of every lock the process
    holds. Their exceptions are logged and the heartbeat carries on.

    The heartbeat stops, sets ``lock.lost`` and calls ``on_lost`` once when a renewal finds the
    lock no longer ours, or when Redis has failed for longer than the TTL (the lock may have
    expired and been taken); while Redis fails, it retries every quarter interval.

    ``__exit__`` unregisters the lock without a Redis round trip and returns at once, unless a
    callback of this heartbeat is running, which it waits for: once ``__exit__`` has begun, no
    callback of this heartbeat starts, and none runs after it has returned. Signals popped just
    then are dropped (the holder is leaving; a next holder would drop them too). It does not
    release the lock.
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
        self._every_s = every_ms / 1000
        # When the next renewal is due (monotonic); only the heartbeat thread moves it.
        self._due_at = lock.renewed_at + self._every_s
        self._on_signal = on_signal
        self._on_lost = on_lost
        self._loop: _HeartbeatLoop | None = None
        # Held while a beat's outcome is handled (and its callbacks run) and when __exit__
        # closes the heartbeat, so that no callback runs after __exit__.
        self._dispatching = threading.Lock()
        self._closed = False

    def __enter__(self) -> Heartbeat:
        self._loop = _heartbeat_loop()
        self._loop.register(self)
        return self

    def __exit__(
        self,
        exc_type: type[BaseException] | None,
        exc: BaseException | None,
        traceback: TracebackType | None,
    ) -> None:
        with self._dispatching:
            self._closed = True
        if self._loop is not None:
            self._loop.unregister(self)

    def _script_args(self) -> list[Any]:
        """The key count, keys and arguments of :data:`_BEAT_LUA` for this lock."""
        lock = self._lock
        keys = [lock.key, self._control_key]
        if lock.wake_key is not None:
            keys.append(lock.wake_key)
        return [len(keys), *keys, lock.token, str(lock.ttl_ms)]

    def _settle(self, answer: object, sent_at: float) -> None:
        """Act on one beat's answer, on the heartbeat thread: the popped signals, ``None`` when
        the lock is no longer ours, or the exception that kept Redis from answering. A beat
        sent at ``sent_at`` that returned signals renewed the lock then."""
        with self._dispatching:
            if self._closed:
                return
            lock = self._lock
            if isinstance(answer, list):
                lock.renewed_at = sent_at
                self._due_at = sent_at + self._every_s
                for signal in answer:
                    self._deliver(signal.decode())
            elif answer is None:
                logger.warning("lock %s was lost: another worker holds it", lock.key)
                self._lose()
            elif time.monotonic() >= lock.renewed_at + lock.ttl_ms / 1000:
                logger.warning("lock %s was lost: Redis failed past its TTL", lock.key)
                self._lose()
            else:
                self._due_at = time.monotonic() + self._every_s / 4

    def _deliver(self, signal: str) -> None:
        try:
            self._on_signal(signal)
        except Exception:
            logger.exception("on_signal(%r) failed for %s", signal, self._lock.key)

    def _lose(self) -> None:
        self._lock.lost.set()
        if self._loop is not None:
            self._loop.unregister(self)
        try:
            self._on_lost()
        except Exception:
            logger.exception("on_lost failed for %s", self._lock.key)


class _HeartbeatLoop:
    """The process's heartbeats: the registered ones, the thread that beats for them and the
    thread that listens for doorbells (both daemons, started with the first registration)."""

    def __init__(self) -> None:
        self.pid = os.getpid()
        self._changed = threading.Condition()
        # The registered heartbeats by control key: one per thread, or two for a moment when
        # a holder here has not yet noticed that its expired lock went to another one here.
        self._holders: dict[str, set[Heartbeat]] = {}
        # Heartbeats to beat at the next tick whatever their schedule: new ones, rung ones.
        self._rung: set[Heartbeat] = set()
        self._started = False

    def register(self, heartbeat: Heartbeat) -> None:
        """Beat for ``heartbeat`` from now on, first at once."""
        with self._changed:
            self._holders.setdefault(heartbeat._control_key, set()).add(heartbeat)
            self._rung.add(heartbeat)
            if not self._started:
                beating = threading.Thread(target=self._beat_forever, name="heartbeat")
                listening = threading.Thread(target=self._listen_forever, name="heartbeat-doorbell")
                for thread in (beating, listening):
                    thread.daemon = True
                    thread.start()
                self._started = True
            self._changed.notify()

    def unregister(self, heartbeat: Heartbeat) -> None:
        """Stop beating for ``heartbeat`` (a beat already sent still reaches its ``settle``)."""
        with self._changed:
            holders = self._holders.get(heartbeat._control_key)
            if holders is not None:
                holders.discard(heartbeat)
                if not holders:
                    del self._holders[heartbeat._control_key]
            self._rung.discard(heartbeat)

    def ring(self, key: str) -> None:
        """A doorbell for the control list ``key``: beat for its holder here, if any, now."""
        with self._changed:
            holders = self._holders.get(key)
            if holders:
                self._rung.update(holders)
                self._changed.notify()

    def ring_all(self) -> None:
        """Beat for every registered heartbeat now (doorbells may have gone unheard)."""
        with self._changed:
            for holders in self._holders.values():
                self._rung.update(holders)
            self._changed.notify()

    def _beat_forever(self) -> None:
        while True:
            try:
                self._beat(self._next_batch())
            except Exception:
                logger.exception("heartbeat failed; retrying")
                time.sleep(_MAX_SLEEP_S)

    def _next_batch(self) -> list[Heartbeat]:
        """Wait until a renewal is due or a heartbeat was rung; then the heartbeats to beat:
        the rung ones and those within a quarter interval of their renewal."""
        with self._changed:
            while True:
                now = time.monotonic()
                held = [heartbeat for holders in self._holders.values() for heartbeat in holders]
                first_due = min((heartbeat._due_at for heartbeat in held), default=None)
                if self._rung or (first_due is not None and first_due <= now):
                    batch = [
                        heartbeat
                        for heartbeat in held
                        if heartbeat in self._rung
                        or heartbeat._due_at - heartbeat._every_s / 4 <= now
                    ]
                    self._rung.clear()
                    return batch
                self._changed.wait(
                    None if first_due is None else min(first_due - now, _MAX_SLEEP_S)
                )

    def _beat(self, batch: list[Heartbeat]) -> None:
        """Run :data:`_BEAT_LUA` for every heartbeat of ``batch`` in one round trip and let
        each settle its answer."""
        sent_at = time.monotonic()
        answers: list[object]
        try:
            with redis_client().pipeline(transaction=False) as pipe:
                # Loading first (in the same round trip) spares the EVALSHAs a NOSCRIPT after
                # a Redis restart or a SCRIPT FLUSH.
                pipe.script_load(_BEAT_LUA)
                for heartbeat in batch:
                    pipe.evalsha(_BEAT_SHA, *heartbeat._script_args())
                answers = pipe.execute(raise_on_error=False)[1:]
        except redis.RedisError as error:
            logger.warning("heartbeat: Redis failed (%s); retrying", error)
            answers = [error] * len(batch)
        for heartbeat, answer in zip(batch, answers, strict=True):
            heartbeat._settle(answer, sent_at)

    def _listen_forever(self) -> None:
        """Hold the process's subscription to :data:`DOORBELL_CHANNEL` and pass each doorbell
        on. Beat for everyone on each (re)subscription: doorbells rung while unsubscribed went
        unheard."""
        while True:
            try:
                pubsub = redis_client().pubsub(ignore_subscribe_messages=True)  # type: ignore[no-untyped-call]
                with pubsub:
                    pubsub.subscribe(DOORBELL_CHANNEL)
                    self.ring_all()
                    while True:
                        message = pubsub.get_message(timeout=_LISTEN_S)
                        if message is not None:
                            self.ring(bytes(message["data"]).decode(errors="replace"))
            except Exception as error:
                logger.warning("heartbeat: doorbell subscription lost (%s); resubscribing", error)
                time.sleep(_RESUBSCRIBE_S)


_loop: _HeartbeatLoop | None = None
_loop_guard = threading.Lock()


def _heartbeat_loop() -> _HeartbeatLoop:
    """This process's :class:`_HeartbeatLoop`; a forked child, where the parent's threads do
    not run, builds its own."""
    global _loop
    loop = _loop
    if loop is None or loop.pid != os.getpid():
        with _loop_guard:
            if _loop is None or _loop.pid != os.getpid():
                _loop = _HeartbeatLoop()
            loop = _loop
    return loop

"""The heartbeat of a held thread lock (ARCHITECTURE §5): it keeps the lock alive and
delivers the thread's control signals while its holder runs a flow.

Contracts:

* A holder of a :class:`~threads.services.lock.ThreadLock` runs a :class:`Heartbeat` for as
  long as it works; the heartbeat renews the lock and, in the same Redis script, pops the
  control signals that :func:`~threads.services.lock.control_send` queued for the holder.
* One heartbeat thread per process renews all the locks it holds, in one round trip per
  tick, and one more listens for doorbells on
  :data:`~threads.services.lock.DOORBELL_CHANNEL` (:class:`Heartbeat`).

Everything here is thread-safe: workers run Celery's threads pool.
"""

from __future__ import annotations

import hashlib
import logging
import os
import threading
import time
from collections.abc import Callable
from types import TracebackType
from typing import Any, Final

import redis

from common.redis_client import redis_client
from threads.services.lock import (
    DOORBELL_CHANNEL,
    RENEW_FLOW_LUA,
    Id,
    ThreadLock,
    control_key,
)

logger = logging.getLogger(__name__)

# The heartbeat thread re-checks its schedule at least this often, and pauses this long after
# an unexpected error.
_MAX_SLEEP_S: Final = 0.25
# One wait for a doorbell blocks at most this long, so it never runs into the socket timeout.
_LISTEN_S: Final = 1.0
# Pause before subscribing to doorbells again after a failure.
_RESUBSCRIBE_S: Final = 1.0

# One beat of a heartbeat: renew as the lock's _RENEW_LUA does (the wake note, KEYS[3], and the
# tenant's flow entry of a counted lock, KEYS[4]), then take the control signals waiting for
# the holder (KEYS[2]), oldest first. Returns nil, leaving the signals alone, when
# the lock is not ours.
_BEAT_LUA: Final = (
    RENEW_FLOW_LUA
    + """
if redis.call("GET", KEYS[1]) ~= ARGV[1] then
    return false
end
if KEYS[3] then
    redis.call("PEXPIRE", KEYS[3], ARGV[2])
end
if KEYS[4] then
    renew_flow(KEYS[4], ARGV[1], ARGV[2])
end
redis.call("PEXPIRE", KEYS[1], ARGV[2])
local signals = redis.call("LRANGE", KEYS[2], 0, -1)
if #signals > 0 then
    redis.call("DEL", KEYS[2])
end
return signals
"""
)
_BEAT_SHA: Final = hashlib.sha1(_BEAT_LUA.encode(), usedforsecurity=False).hexdigest()


class Heartbeat:
    """Keeps a held lock alive and delivers control signals while its holder runs a flow.

    Used as a context manager by the lock holder, once. Entering registers the lock with the
    process's heartbeat thread (started with the first heartbeat, and again in a forked child),
    which beats for every registered lock: it renews the lock every ``renew_every_ms`` (default
    ``lock.ttl_ms // 3``, which is :data:`~threads.services.lock.RENEW_EVERY_MS` for the
    default TTL; a renewal may come up to a quarter of that early, to share a round trip with
    others) and, in the same Redis script, pops the thread's control list and hands each
    signal, in order, to ``on_signal``. The locks due at one tick share one round trip. The
    heartbeat beats at once on entering (signals sent before it started), and when a doorbell
    for its thread rings (:func:`~threads.services.lock.control_send`); a second thread holds
    the process's one doorbell subscription.

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
        if lock.flows_key is not None:
            assert lock.wake_key is not None  # a counted lock always has a wake note
            keys.append(lock.flows_key)
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

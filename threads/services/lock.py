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
from threads.services.leases import live_count

Id: TypeAlias = UUID | str

LOCK_TTL_MS: Final = 4_000
RENEW_EVERY_MS: Final = LOCK_TTL_MS // 3
CONTROL_TTL_MS: Final = 60_000
# ``inputs``: an input joined the running turn (threads.services.inbox); the others abort.
CONTROL_SIGNALS: Final = frozenset({"stop", "terminate", "cancel", "inputs"})

# Pub/sub channels are shared by every database number of a Redis server: a doorbell from a
# process on another database names a key nobody here holds, and wakes nothing.
DOORBELL_CHANNEL: Final = "platform:thread-control"

# A counted lock's entry in its tenant's flows (KEYS[n], a sorted set of lock tokens scored
# with their expiry, read from Redis's clock) lives as long as the lock: renewals extend both.
RENEW_FLOW_LUA: Final = """
local function renew_flow(key, token, ttl)
    local clock = redis.call("TIME")
    local now = tonumber(clock[1]) * 1000 + math.floor(tonumber(clock[2]) / 1000)
    redis.call("ZADD", key, "XX", now + tonumber(ttl), token)
    redis.call("PEXPIRE", key, ttl)
end
"""

# Renewal also keeps the holder's wake note (see lock_acquire) and its tenant's flow entry
# alive as long as the lock.
_RENEW_LUA: Final = (
    RENEW_FLOW_LUA
    + """
if redis.call("GET", KEYS[1]) == ARGV[1] then
    if KEYS[2] then
        redis.call("PEXPIRE", KEYS[2], ARGV[2])
    end
    if KEYS[3] then
        renew_flow(KEYS[3], ARGV[1], ARGV[2])
    end
    return redis.call("PEXPIRE", KEYS[1], ARGV[2])
end
return 0
"""
)

# Take the lock if free and drop the control signals nobody popped (a previous holder's);
# else, when asked, leave the holder a wake note. One script, so a note is never left just
# after the holder released (it would then go unread). A counted lock (KEYS[4], the tenant's
# flows) is refused with -1 while the tenant holds ARGV[4] counted locks: the thread (ARGV[5])
# then joins the tenant's waiting threads (KEYS[5], scored by a ticket from KEYS[6] when it
# was first refused).
_ACQUIRE_LUA: Final = """
if redis.call("EXISTS", KEYS[1]) == 1 then
    if ARGV[3] == "1" then
        redis.call("SET", KEYS[3], "1", "PX", ARGV[2])
    end
    return 0
end
if KEYS[4] then
    local clock = redis.call("TIME")
    local now = tonumber(clock[1]) * 1000 + math.floor(tonumber(clock[2]) / 1000)
    redis.call("ZREMRANGEBYSCORE", KEYS[4], "-inf", now)
    if redis.call("ZCARD", KEYS[4]) >= tonumber(ARGV[4]) then
        if not redis.call("ZSCORE", KEYS[5], ARGV[5]) then
            redis.call("ZADD", KEYS[5], redis.call("INCR", KEYS[6]), ARGV[5])
        end
        redis.call("PEXPIRE", KEYS[5], ARGV[6])
        redis.call("PEXPIRE", KEYS[6], ARGV[6])
        return -1
    end
    redis.call("ZADD", KEYS[4], now + tonumber(ARGV[2]), ARGV[1])
    redis.call("PEXPIRE", KEYS[4], ARGV[2])
    redis.call("ZREM", KEYS[5], ARGV[5])
end
redis.call("SET", KEYS[1], ARGV[1], "PX", ARGV[2])
redis.call("DEL", KEYS[2])
return 1
"""

# Returns {2} when a wake note was waiting (and takes it), {1} when released, {0} when not
# ours; for a counted lock, its flow entry goes in any case, and the second item is the
# tenant's longest-waiting thread (taken from the queue), to be woken now that a slot is free.
_RELEASE_LUA: Final = """
local released = 0
if redis.call("GET", KEYS[1]) == ARGV[1] then
    redis.call("DEL", KEYS[1])
    released = 1
    if KEYS[2] and redis.call("DEL", KEYS[2]) == 1 then
        released = 2
    end
end
if KEYS[3] then
    redis.call("ZREM", KEYS[3], ARGV[1])
    local head = redis.call("ZPOPMIN", KEYS[4])
    if head[1] then
        return {released, head[1]}
    end
end
return {released}
"""
# A thread refused a flow slot stays queued this long at most (the sweeper wakes it anyway).
WAITING_TTL_MS: Final = 600_000


class FlowsLimitReached(Exception):
    """The tenant's threads hold ``limit`` counted locks (their flows); the refused thread
    waits in the tenant's queue, to be woken when one of them is released."""

    def __init__(self, limit: int) -> None:
        super().__init__(f"the tenant runs {limit} flows already")
        self.limit = limit


def lock_key(*, tenant_id: Id, thread_id: Id) -> str:
    return f"{tenant_id}:thread:{thread_id}:lock"


def control_key(*, tenant_id: Id, thread_id: Id) -> str:
    return f"{tenant_id}:thread:{thread_id}:control"


def wake_key(*, tenant_id: Id, thread_id: Id) -> str:
    return f"{tenant_id}:thread:{thread_id}:wake"


def outage_key(*, tenant_id: Id, thread_id: Id) -> str:
    return f"{tenant_id}:thread:{thread_id}:outage"


# How long a note that an outage cut a thread's drive short waits for the next drive.
OUTAGE_NOTE_TTL_MS: Final = 600_000


def outage_note(*, tenant_id: Id, thread_id: Id) -> None:
    """Note that an outage cut the thread's drive short (its turn still says running), for
    the next drive to tell that from a crash (:func:`outage_noted`). Raises
    :class:`redis.RedisError` when Redis cannot answer (the next drive then sees a crash)."""
    redis_client().set(outage_key(tenant_id=tenant_id, thread_id=thread_id), "1",
                       px=OUTAGE_NOTE_TTL_MS)  # fmt: skip


def outage_noted(*, tenant_id: Id, thread_id: Id, turn_id: Id) -> bool:
    """Whether an outage cut short the drive of turn ``turn_id`` (:func:`outage_note`).

    The first recovery of the turn after the note claims it for that turn, and the note stays
    (until its TTL) rather than being taken: a recovery can itself be cut short or
    superseded while the outage settles (its lock expired while PostgreSQL was away), and the
    recovery after it is still of the same outage. A later turn's recovery is a crash's."""
    client = redis_client()
    key = outage_key(tenant_id=tenant_id, thread_id=thread_id)
    noted = client.get(key)
    if noted is None:
        return False
    claimed = noted.decode() if isinstance(noted, bytes) else str(noted)
    if claimed not in ("1", str(turn_id)):
        return False
    client.set(key, str(turn_id), keepttl=True)
    return True


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
    # A counted lock: its tenant's flows and waiting threads (flows_key), and after release
    # the waiting thread its release took from the queue (next_waiting).
    flows_key: str | None = None
    next_waiting: str | None = None

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
        keys = self._keys()
        if self.flows_key is not None:
            keys = [keys[0] + 1, *keys[1:], f"{self.flows_key}:waiting"]
        answer = cast(list[Any], redis_client().eval(_RELEASE_LUA, *keys, self.token))
        self.woken = answer[0] == 2
        if len(answer) > 1:
            self.next_waiting = answer[1].decode()
        return bool(answer[0] > 0)

    def _keys(self) -> list[Any]:
        """The key count and keys of the renewal and release scripts: the lock, its wake note,
        its tenant's flows (a counted lock always has a wake note)."""
        keys = [self.key] if self.wake_key is None else [self.key, self.wake_key]
        if self.flows_key is not None:
            assert self.wake_key is not None
            keys.append(self.flows_key)
        return [len(keys), *keys]


def lock_acquire(
    *,
    tenant_id: Id,
    thread_id: Id,
    ttl_ms: int | None = None,
    note_if_held: bool = False,
    tenant_flows: int | None = None,
) -> ThreadLock | None:
    """Take the thread's lock if nobody holds it; never waits. ``ttl_ms`` defaults to the
    setting ``THREAD_LOCK_TTL_MS``. Taking it drops the control signals that no heartbeat
    popped (they were for a previous holder), in the same round trip.

    Returns ``None`` while another worker holds it; with ``note_if_held`` it then leaves the
    holder a wake note, which the holder's :meth:`ThreadLock.release` reports, so a wake-up
    that came while it held the lock is not lost. The caller runs a
    :class:`~threads.services.heartbeat.Heartbeat` for as long as it works and releases the
    lock in a ``finally``.

    With ``tenant_flows``, the lock counts as one of the tenant's flows, of which it may hold
    that many at once across every process: past it, :class:`FlowsLimitReached` is raised and
    the thread joins the tenant's waiting threads; a release of a counted lock takes the one
    waiting longest (:attr:`ThreadLock.next_waiting`), for its holder to wake.
    """
    ttl_ms = settings.THREAD_LOCK_TTL_MS if ttl_ms is None else ttl_ms
    key = lock_key(tenant_id=tenant_id, thread_id=thread_id)
    control = control_key(tenant_id=tenant_id, thread_id=thread_id)
    note = wake_key(tenant_id=tenant_id, thread_id=thread_id)
    token = secrets.token_hex(16)
    sent_at = time.monotonic()
    asked = "1" if note_if_held else "0"
    keys, args = [key, control, note], [token, str(ttl_ms), asked]
    flows = None
    if tenant_flows is not None:
        flows = flows_key(tenant_id=tenant_id)
        keys += [flows, f"{flows}:waiting", f"{flows}:tickets"]
        args += [str(tenant_flows), str(thread_id), str(WAITING_TTL_MS)]
    taken = cast(int, redis_client().eval(_ACQUIRE_LUA, len(keys), *keys, *args))
    if taken == -1:
        raise FlowsLimitReached(cast(int, tenant_flows))
    if not taken:
        return None
    return ThreadLock(
        key=key, token=token, ttl_ms=ttl_ms, renewed_at=sent_at, wake_key=note, flows_key=flows
    )


def flows_key(*, tenant_id: Id) -> str:
    """The tenant's counted locks: a sorted set of tokens scored with their expiry."""
    return f"{tenant_id}:flows"


def flows_running(*, tenant_id: Id) -> int:
    """How many counted locks (flows) the tenant holds now, across every process (a
    snapshot)."""
    return live_count(flows_key(tenant_id=tenant_id))


def lock_ttl_ms(*, tenant_id: Id, thread_id: Id) -> int | None:
    """Milliseconds until the thread's lock expires unless renewed, None when nobody holds
    it (a snapshot: the sweeper's question)."""
    left = cast(int, redis_client().pttl(lock_key(tenant_id=tenant_id, thread_id=thread_id)))
    return None if left < 0 else left


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

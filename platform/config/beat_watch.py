"""Beat's heartbeat, and who watches it.

Beat writes the heartbeat itself, from its scheduling loop (:class:`HeartbeatScheduler`, the
scheduler of every ``celery -A config beat``): every :data:`HEARTBEAT_EVERY_S` a Redis key
says when the loop last turned. A thread of its own would keep beating for a loop that hangs
(a deadlock, a broker call that never returns, ``SIGSTOP``); the loop cannot.

Three readers, each calling beat stale once the heartbeat is :data:`STALE_AFTER_S` old:
``/readyz`` names it (:mod:`config.health`), ``make run``'s supervisor kills a stale beat
and starts it again (:class:`BeatWatchdog`), and ``python -m config.beat_watch`` is the
liveness probe for any other supervisor (exit 0 while fresh, 1 when stale or missing).

The key is per broker queue (``platform:beat:<CELERY_QUEUE>:heartbeat``), so deployments that
share one Redis under their own queue names watch their own beat. Ages compare wall clocks
of the writing and the reading host, which NTP keeps far closer than :data:`STALE_AFTER_S`.

**Two beats.** Any number of beat processes may run; one leads. The leader holds a lease in
Redis (``platform:beat:<queue>:leader``: ``SET NX`` with ``BEAT_LEADER_LEASE_S``), renewed by
its scheduling loop every third of the lease (a compare-and-extend, so only the holder
extends it); only the leader sends the duties and writes the heartbeat above. A standby's loop
tries to take the lease every third of it and sends nothing while another holds it; it
records itself in ``platform:beat:<queue>:standbys`` (a sorted set by time) so ``/readyz``
counts it. A leader that stops cleanly deletes its lease, and a standby leads within a third
of the lease; one killed or hung loses it when the lease lapses. A hung leader that wakes up
finds its lease taken at its next turn, before it sends anything, and stands by.

**Idle duties.** Each duty says after its run until when it has nothing to do
(:mod:`common.duties`); the leader skips sending it until then, or until ``BEAT_IDLE_MAX_S``
since it last sent it (``THREAD_SWEEP_GRACE_S`` for the thread sweep), whichever is first.
"""

from __future__ import annotations

import argparse
import collections
import json
import logging
import math
import os
import socket
import sys
import time
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from typing import Any, cast

import redis
from celery.beat import PersistentScheduler
from celery.schedules import schedstate
from celery.schedules import schedule as every
from django.conf import settings

from common.duties import duties_idle
from config import env

logger = logging.getLogger(__name__)

HEARTBEAT_EVERY_S = 2.0
STALE_AFTER_S = 10.0
# A beat that has not written its first heartbeat this long after it started is hung too
# (a cold start on a busy host takes seconds, not a minute).
START_GRACE_S = 60.0
# Beat says at INFO, this often, how many times it sent each duty: its absence in the log
# is visible, without a line per sweep.
SUMMARY_EVERY_S = 60.0
# Beyond this a key whose deployment is gone is dropped; far beyond any staleness.
KEY_TTL_S = 86_400
REDIS_TIMEOUT_S = 1.0
# The thread sweep: a hint closes it at most THREAD_SWEEP_GRACE_S (crash recovery must not
# wait on it), and beat asks again every sweep interval whether a wake-up opened it.
SWEEP_THREADS_TASK = "threads.sweep_threads"
# How often beat looks again at an idle duty's hint (its interval, when longer), by task.
IDLE_POLL_S = {SWEEP_THREADS_TASK: 2.0, "": 5.0}

# Renews the lease only for its holder: 1 when extended, 0 when another holds it (or none).
_RENEW_LUA = """
if redis.call("GET", KEYS[1]) == ARGV[1] then
    return redis.call("PEXPIRE", KEYS[1], ARGV[2])
end
return 0
"""
_RELEASE_LUA = """
if redis.call("GET", KEYS[1]) == ARGV[1] then
    return redis.call("DEL", KEYS[1])
end
return 0
"""


@dataclass(frozen=True)
class Heartbeat:
    """One heartbeat: when beat's loop turned (``time.time()``), and which process it is."""

    at: float
    pid: int
    host: str

    def age_s(self, now: float | None = None) -> float:
        return max(0.0, (time.time() if now is None else now) - self.at)


def heartbeat_key(queue: str) -> str:
    return f"platform:beat:{queue}:heartbeat"


def leader_key(queue: str) -> str:
    return f"platform:beat:{queue}:leader"


def standbys_key(queue: str) -> str:
    return f"platform:beat:{queue}:standbys"


def leader_read(client: redis.Redis, *, queue: str) -> dict[str, Any] | None:
    """Who holds the lease (``{"pid", "host", "token"}``), or None. Raises
    ``redis.RedisError``."""
    raw = cast(bytes | None, client.get(leader_key(queue)))
    try:
        value = json.loads(raw) if raw is not None else None
    except ValueError:
        return None
    return value if isinstance(value, dict) else None


def standbys_read(client: redis.Redis, *, queue: str, stale_after_s: float = STALE_AFTER_S) -> int:
    """How many standby beats turned their loop within ``stale_after_s``. Raises
    ``redis.RedisError``."""
    found = client.zcount(standbys_key(queue), time.time() - stale_after_s, "+inf")
    return int(cast(int, found))


def redis_client(url: str) -> redis.Redis:
    """A client that gives up within :data:`REDIS_TIMEOUT_S`: a heartbeat never waits long."""
    return redis.Redis.from_url(
        url, socket_timeout=REDIS_TIMEOUT_S, socket_connect_timeout=REDIS_TIMEOUT_S
    )


def heartbeat_write(client: redis.Redis, *, queue: str) -> Heartbeat:
    """Record that this process's beat loop turned now. Raises ``redis.RedisError``."""
    beat = Heartbeat(at=time.time(), pid=os.getpid(), host=socket.gethostname())
    client.set(heartbeat_key(queue), json.dumps(beat.__dict__), ex=KEY_TTL_S)
    return beat


def heartbeat_read(client: redis.Redis, *, queue: str) -> Heartbeat | None:
    """The last heartbeat of the queue's beat; None when there is none. Raises
    ``redis.RedisError``; a value that is not a heartbeat counts as none."""
    raw = cast(bytes | None, client.get(heartbeat_key(queue)))
    if raw is None:
        return None
    try:
        value = json.loads(raw)
        return Heartbeat(at=float(value["at"]), pid=int(value["pid"]), host=str(value["host"]))
    except (ValueError, TypeError, KeyError):
        return None


def heartbeat_problem(
    beat: Heartbeat | None, *, stale_after_s: float = STALE_AFTER_S
) -> str | None:
    """Why ``beat`` shows no live beat (missing, or older than ``stale_after_s``); None
    when it is fresh."""
    if beat is None:
        return "no heartbeat: beat is not running"
    age = beat.age_s()
    if age > stale_after_s:
        return f"no heartbeat for {age:.0f} s (stale after {stale_after_s:g} s)"
    return None


class HeartbeatScheduler(PersistentScheduler):
    """Celery's persistent scheduler that leads or stands by (the module's "Two beats"),
    skips the duties that said they have nothing to do ("Idle duties"), writes beat's
    heartbeat from its loop while it leads, and logs its lifecycle at INFO: the duties it
    runs when it starts, when it leads or stands by, a summary of what it sent (and skipped)
    every :data:`SUMMARY_EVERY_S`, and its stop. A heartbeat Redis refuses is logged once and
    retried at the next interval; it never stops the schedule."""

    summary_every_s = SUMMARY_EVERY_S

    def __init__(self, *args: Any, **kwargs: Any) -> None:
        self._client: redis.Redis | None = None
        self._queue = ""
        self._beating = True
        self._sent: collections.Counter[str] = collections.Counter()
        self._skipped: collections.Counter[str] = collections.Counter()
        self._summary_due = time.monotonic() + self.summary_every_s
        self._closed = False
        # The lease's value: who holds it, and a nonce so a restarted pid is not taken for it.
        self._token = json.dumps({"pid": os.getpid(), "host": socket.gethostname(),
                                  "nonce": os.urandom(4).hex()})  # fmt: skip
        self._lease_s = float(settings.BEAT_LEADER_LEASE_S)
        self._leading = False
        self._led_at = 0.0  # monotonic: the last time the lease was known ours
        self._next_lease = 0.0
        self._idle: Mapping[str, float] = {}
        self._idle_read_at = -1.0
        self._last_sent: dict[str, float] = {}  # monotonic, by task name
        self._said_standby = False
        self._reached = False  # whether Redis ever answered the lease
        super().__init__(*args, **kwargs)

    def setup_schedule(self) -> None:
        super().setup_schedule()
        self._client = redis_client(settings.REDIS_URL)
        self._queue = settings.CELERY_TASK_DEFAULT_QUEUE
        duties = ", ".join(
            f"{name} {_interval(entry.schedule)}" for name, entry in sorted(self.schedule.items())
        )
        logger.info(
            "beat: started (pid %s); duties: %s; heartbeat every %g s at %s",
            os.getpid(), duties, HEARTBEAT_EVERY_S, heartbeat_key(self._queue),
        )  # fmt: skip

    def is_due(self, entry: Any) -> Any:
        """Celery's answer, unless the duty said it has nothing to do yet and was sent within
        its idle maximum: then not due, asked again when its hint runs out, or after
        :data:`IDLE_POLL_S` (its interval, if longer; a writer may have opened it since),
        whichever is first. Between those, beat's loop sleeps."""
        idle_s = self._idle_for(entry)
        if idle_s <= 0:
            return super().is_due(entry)
        self._skipped[entry.name] += 1
        poll_s = max(_seconds(entry.schedule), IDLE_POLL_S.get(entry.task, IDLE_POLL_S[""]))
        # Whole seconds, at least one: Celery places a retry from the current second
        # (time.mktime), so a fraction would come due again at once.
        return schedstate(False, max(1.0, math.ceil(min(idle_s, poll_s))))

    def apply_entry(self, entry: Any, producer: Any = None) -> None:
        super().apply_entry(entry, producer=producer)
        self._last_sent[entry.task] = time.monotonic()
        self._sent[entry.name] += 1

    def _idle_for(self, entry: Any) -> float:
        """How much longer ``entry``'s duty has nothing to do (0: send it when due)."""
        sent_at = self._last_sent.get(entry.task)
        if sent_at is None:
            return 0.0  # each duty runs once after beat starts leading
        moment = time.monotonic()
        if moment - self._idle_read_at >= 1.0:  # one read serves the duties due together
            self._idle_read_at = moment
            try:
                assert self._client is not None
                self._idle = duties_idle(self._client, queue=self._queue)
            except redis.RedisError:
                self._idle = {}  # unreadable: send
        idle_max = float(settings.BEAT_IDLE_MAX_S)
        if entry.task == SWEEP_THREADS_TASK:
            idle_max = min(idle_max, float(settings.THREAD_SWEEP_GRACE_S))
        hinted = self._idle.get(entry.task, 0.0) - time.time()
        return max(0.0, min(hinted, sent_at + idle_max - moment))

    def tick(self, *args: Any, **kwargs: Any) -> float:
        """One turn of beat's loop: the lease and the heartbeat when due (one round trip);
        Celery's turn (sending what is due) only while leading; the summary when due. The
        loop sleeps no longer than until the next lease renewal."""
        moment = time.monotonic()
        if moment >= self._next_lease:
            self._next_lease = moment + min(HEARTBEAT_EVERY_S, self._lease_s / 3)
            self._lease()
        wait = float(super().tick(*args, **kwargs)) if self._leading else self._lease_s / 3
        if moment >= self._summary_due:
            self._summary_due = moment + self.summary_every_s
            self._summary()
        return max(0.0, min(wait, self._next_lease - time.monotonic()))

    def _lease(self) -> None:
        """Take or renew the leader's lease; say when leadership changes hands."""
        assert self._client is not None  # setup_schedule ran
        moment = time.monotonic()
        lease_ms = int(self._lease_s * 1000)
        key = leader_key(self._queue)
        try:
            ours = not self._leading and bool(
                self._client.set(key, self._token, nx=True, px=lease_ms)
            )
            # Renewing: the holder (this loop), or this process after a Redis error.
            ours = ours or bool(self._client.eval(_RENEW_LUA, 1, key, self._token, str(lease_ms)))
            self._reached = True
        except redis.RedisError:
            # Unknown: a leader leads on while its lease may still hold, and a beat that never
            # reached Redis leads (nothing tells it another does; the broker is that same
            # Redis, so neither sends anything until it is back, when they settle it).
            ours = (self._leading and moment - self._led_at < self._lease_s) or not self._reached
        if ours:
            self._led_at = moment
            if not self._leading:
                self._last_sent.clear()  # each duty runs once now
                logger.info("beat: leading the duties (pid %s; lease %g s at %s)",
                            os.getpid(), self._lease_s, leader_key(self._queue))  # fmt: skip
        elif self._leading or not self._said_standby:
            holder = self._holder()
            logger.info("beat: standing by (pid %s): %s leads; taking over when its lease "
                        "lapses", os.getpid(), holder)  # fmt: skip
            self._said_standby = True
        self._leading = ours
        self._heartbeat()

    def _holder(self) -> str:
        assert self._client is not None
        try:
            holder = leader_read(self._client, queue=self._queue)
        except redis.RedisError:
            holder = None
        return (
            "another beat" if holder is None else f"pid {holder.get('pid')} on {holder.get('host')}"
        )

    def _heartbeat(self) -> None:
        assert self._client is not None  # setup_schedule ran
        try:
            if not self._leading:
                self._client.zadd(standbys_key(self._queue), {self._token: time.time()})
                self._client.zremrangebyscore(standbys_key(self._queue), 0, time.time() - KEY_TTL_S)
                return
            self._client.zrem(standbys_key(self._queue), self._token)
            heartbeat_write(self._client, queue=self._queue)
        except redis.RedisError as error:
            if self._beating:
                logger.warning(
                    "beat: cannot write its heartbeat (%s: %s); retrying every %g s",
                    type(error).__name__, error, HEARTBEAT_EVERY_S,
                )  # fmt: skip
            self._beating = False
            return
        if not self._beating:
            logger.info("beat: heartbeat written again")
        self._beating = True

    def _summary(self) -> None:
        if not self._leading:
            logger.info("beat: alive, standing by (%s leads)", self._holder())
            return
        sent = ", ".join(
            f"{name} {self._sent[name]}" + (f" (idle, looked {self._skipped[name]} times)"
                                            if self._skipped[name] else "")
            for name in sorted(self.schedule)
        )  # fmt: skip
        logger.info("beat: alive; sent in the last %g s: %s", self.summary_every_s, sent)
        self._sent.clear()
        self._skipped.clear()

    def close(self) -> None:
        super().close()
        if not self._closed:  # Celery may close twice on the way out
            self._closed = True
            self._step_down()
            logger.info("beat: stopped (pid %s)", os.getpid())

    def _step_down(self) -> None:
        """Hand the lease over at once (a standby leads at its next try), and leave the
        standbys."""
        if self._client is None:
            return
        try:
            if self._leading:
                self._client.eval(_RELEASE_LUA, 1, leader_key(self._queue), self._token)
            self._client.zrem(standbys_key(self._queue), self._token)
        except redis.RedisError:
            pass  # the lease lapses by itself


def _seconds(schedule: Any) -> float:
    return float(schedule.seconds) if isinstance(schedule, every) else 0.0


def _interval(schedule: Any) -> str:
    if isinstance(schedule, every):
        return f"every {schedule.seconds:g} s"
    return str(schedule)


class BeatWatchdog:
    """For a supervisor: whether the beat process it started has gone quiet.

    A process is judged by its own heartbeats (its pid): one that wrote none within
    ``start_grace_s`` of starting, or whose heartbeat has not moved for ``stale_after_s`` by
    the supervisor's own clock, is hung. While Redis cannot be read nothing is judged, and
    the clock starts again once it can: beat cannot write through the same outage.
    """

    def __init__(
        self,
        client: redis.Redis,
        *,
        queue: str,
        stale_after_s: float = STALE_AFTER_S,
        start_grace_s: float = START_GRACE_S,
        read_every_s: float = 1.0,
    ) -> None:
        self.client = client
        self.queue = queue
        self.stale_after_s = stale_after_s
        self.start_grace_s = start_grace_s
        self.read_every_s = read_every_s
        self._pid = 0
        self._seen_at: float | None = None  # the last heartbeat of _pid we saw
        self._moved_at = 0.0  # monotonic: when it last moved (or judging restarted)
        self._read_at = 0.0

    def problem(self, *, pid: int, started_at: float) -> str | None:
        """Why process ``pid`` (started at ``started_at``, :func:`time.monotonic`) should be
        killed, or None. Reads Redis at most every ``read_every_s``."""
        moment = time.monotonic()
        if pid != self._pid:
            self._pid, self._seen_at, self._moved_at = pid, None, started_at
        if moment - self._read_at < self.read_every_s:
            return None
        self._read_at = moment
        try:
            beat = heartbeat_read(self.client, queue=self.queue)
        except redis.RedisError:
            self._moved_at = moment
            return None
        mine = beat is not None and (beat.pid, beat.host) == (pid, socket.gethostname())
        if mine and beat is not None and beat.at != self._seen_at:
            self._seen_at, self._moved_at = beat.at, moment
        quiet = moment - self._moved_at
        if self._seen_at is None:
            if quiet > self.start_grace_s:
                return f"no heartbeat within {self.start_grace_s:g} s of starting"
            return None
        if quiet > self.stale_after_s:
            return f"heartbeat stopped {quiet:.0f} s ago"
        return None


def main(argv: Sequence[str]) -> int:
    """``python -m config.beat_watch [--stale-after S]``: the liveness probe of beat."""
    parser = argparse.ArgumentParser(
        prog="python -m config.beat_watch",
        description="Exit 1 when beat's heartbeat is stale or missing, else 0 (also when "
        "Redis cannot be read: restarting beat cannot help it then).",
    )
    parser.add_argument("--stale-after", type=float, default=STALE_AFTER_S, metavar="S")
    options = parser.parse_args(argv)
    queue = env.celery_queue()
    try:
        beat = heartbeat_read(redis_client(env.redis_url()), queue=queue)
    except redis.RedisError as error:
        print(f"beat: cannot read its heartbeat ({type(error).__name__}: {error}); not judged")
        return 0
    problem = heartbeat_problem(beat, stale_after_s=options.stale_after)
    if problem is not None:
        print(f"beat: {problem}")
        return 1
    assert beat is not None
    print(f"beat: ok (pid {beat.pid} on {beat.host}, heartbeat {beat.age_s():.1f} s ago)")
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))

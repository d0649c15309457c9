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
"""

from __future__ import annotations

import argparse
import collections
import json
import logging
import os
import socket
import sys
import time
from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any, cast

import redis
from celery.beat import PersistentScheduler
from celery.schedules import schedule as every
from django.conf import settings

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
    """Celery's persistent scheduler that writes beat's heartbeat from its loop and logs its
    lifecycle at INFO: the duties it runs when it starts, a summary of what it sent every
    :data:`SUMMARY_EVERY_S`, and its stop. A heartbeat Redis refuses is logged once and
    retried at the next interval; it never stops the schedule."""

    summary_every_s = SUMMARY_EVERY_S

    def __init__(self, *args: Any, **kwargs: Any) -> None:
        self._client: redis.Redis | None = None
        self._queue = ""
        self._next_beat = 0.0
        self._beating = True
        self._sent: collections.Counter[str] = collections.Counter()
        self._summary_due = time.monotonic() + self.summary_every_s
        self._closed = False
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

    def apply_entry(self, entry: Any, producer: Any = None) -> None:
        super().apply_entry(entry, producer=producer)
        self._sent[entry.name] += 1

    def tick(self, *args: Any, **kwargs: Any) -> float:
        """One turn of beat's loop (Celery's), then the heartbeat and summary when due; the
        loop sleeps no longer than until the next heartbeat."""
        wait = float(super().tick(*args, **kwargs))
        moment = time.monotonic()
        if moment >= self._next_beat:
            self._next_beat = moment + HEARTBEAT_EVERY_S
            self._heartbeat()
        if moment >= self._summary_due:
            self._summary_due = moment + self.summary_every_s
            self._summary()
        return max(0.0, min(wait, self._next_beat - time.monotonic()))

    def _heartbeat(self) -> None:
        assert self._client is not None  # setup_schedule ran
        try:
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
        sent = ", ".join(f"{name} {self._sent[name]}" for name in sorted(self.schedule))
        logger.info("beat: alive; sent in the last %g s: %s", self.summary_every_s, sent)
        self._sent.clear()

    def close(self) -> None:
        super().close()
        if not self._closed:  # Celery may close twice on the way out
            self._closed = True
            logger.info("beat: stopped (pid %s)", os.getpid())


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

"""Beat's idle hints: until when a periodic duty has nothing to do, so beat need not send it.

Beat sends each of its duties (the thread sweep, action expiry, the effect and webhook
sweeps, the schedules) every second or few, and on an idle install nearly every one of those
messages finds nothing: a message built and sent by beat, received, run and acknowledged by a
worker, a few queries, for nothing. So after each run a duty says when it next may have
work (:func:`duty_idle_until`: the earliest deadline among its rows, or never), in one Redis
hash per queue (``platform:beat:<queue>:idle``, field: the task's name, value: epoch
seconds), and beat skips sending it until then (``config.beat_watch``).

A hint only ever delays a duty, so every writer of new work opens its duty again
(:func:`duty_wake`: the field is deleted, after the commit), and beat still sends each
duty at least every ``idle_max_s`` it is given, whatever the hint says: a writer that could
not reach Redis, or a race between a duty's run and a new row, costs at most that. A missing
or unreadable hint means "send": the gate only saves work, it never holds any back for long.
"""

from __future__ import annotations

import logging
import math
import time
from collections.abc import Mapping

import redis
from django.conf import settings
from django.db import transaction

from common.redis_client import redis_client

logger = logging.getLogger(__name__)


def idle_key(queue: str) -> str:
    return f"platform:beat:{queue}:idle"


def duty_idle_until(task: str, until_s: float | None) -> None:
    """Say that duty ``task`` has nothing to do before ``until_s`` (epoch seconds; None: it
    may have work now, ``math.inf``: none until a writer opens it). Best effort."""
    key = idle_key(settings.CELERY_TASK_DEFAULT_QUEUE)
    try:
        if until_s is None or until_s <= time.time():
            redis_client().hdel(key, task)
        else:
            redis_client().hset(key, task, "inf" if math.isinf(until_s) else f"{until_s:.3f}")
    except redis.RedisError as error:
        logger.debug("duty %s: idle hint not written (%s)", task, error)


def duty_wake(task: str) -> None:
    """New work for duty ``task`` (committed): beat sends it at its next interval again.
    Best effort: a writer that cannot reach Redis leaves the duty to beat's ``idle_max_s``."""
    try:
        redis_client().hdel(idle_key(settings.CELERY_TASK_DEFAULT_QUEUE), task)
    except redis.RedisError as error:
        logger.debug("duty %s: idle hint not cleared (%s)", task, error)


def duty_wake_on_commit(task: str) -> None:
    """:func:`duty_wake` once the current transaction commits (at once outside one)."""
    transaction.on_commit(lambda: duty_wake(task), robust=True)


def duties_idle(client: redis.Redis, *, queue: str) -> Mapping[str, float]:
    """Every duty's hint: ``{task: idle until (epoch seconds)}``. Raises ``redis.RedisError``;
    a value that is not a number is left out (as if absent)."""
    found: dict[str, float] = {}
    raw: Mapping[bytes, bytes] = client.hgetall(idle_key(queue))  # type: ignore[assignment]
    for name, value in raw.items():
        try:
            found[name.decode()] = float(value)
        except ValueError:
            continue
    return found

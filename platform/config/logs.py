"""Logging filters.

* Beat's periodic sweeps run every second or two and have nothing new to say each time, so
  Celery's lines about them (sent, received, succeeded) are demoted to DEBUG.
* A Redis outage is expected to happen (a restart, a failover) and every process that uses
  Redis says so many times over: each task whose acknowledgement could not be sent, each
  reconnection attempt, each event that could not be broadcast. One WARNING per kind of line
  says it; the repeats go to DEBUG.
"""

from __future__ import annotations

import logging
import math
import threading
import time
from typing import Final

import redis
from django.conf import settings


class PeriodicTasksAtDebug(logging.Filter):
    """On Celery's beat, strategy and trace loggers: a line naming one of beat's periodic
    tasks is a DEBUG line (kept only when the logger shows DEBUG)."""

    def filter(self, record: logging.LogRecord) -> bool:
        if record.levelno <= logging.DEBUG:
            return True
        text = record.getMessage()
        if not any(task in text for task in _periodic_tasks()):
            return True
        return _demote_to_debug(record)


def _periodic_tasks() -> set[str]:
    return {entry["task"] for entry in settings.CELERY_BEAT_SCHEDULE.values()}


# Redis being unreachable, as the Redis client, kombu and the socket layer say it.
_UNREACHABLE: Final = (redis.ConnectionError, redis.TimeoutError, ConnectionError, TimeoutError)
# Subclasses of those that an outage does not explain: a refused password or permission, a
# connection pool that ran out. They keep their level.
_NOT_AN_OUTAGE: Final = (
    redis.exceptions.AuthenticationError,
    redis.exceptions.AuthorizationError,
    redis.exceptions.MaxConnectionsError,
)
_REPEATS_NOTE: Final = " (a Redis outage: repeats of this line are logged at DEBUG)"


class RedisOutageOnce(logging.Filter):
    """On the loggers that report a lost Redis connection (``LOGGING`` names them): a WARNING
    or worse caused by Redis being unreachable (its exception, logged or given as an
    argument, or one it was raised from) is an outage line. The first line of each kind
    (logger and message template) in an outage is logged at WARNING, without its traceback;
    the repeats are DEBUG lines. An outage ends once no outage line has come for
    :attr:`quiet_s`: the worker's reconnection attempts (every 2 s at most) keep one open
    while it lasts. Lines of any other cause keep their level and traceback.

    One instance serves every logger it is attached to (``dictConfig`` builds one per
    ``filters`` entry), so an outage is one per process; thread-safe."""

    quiet_s: float = 10.0

    def __init__(self, name: str = "") -> None:
        super().__init__(name)
        self._guard = threading.Lock()
        self._last_at = -math.inf
        self._said: set[tuple[str, str]] = set()

    def filter(self, record: logging.LogRecord) -> bool:
        if record.levelno < logging.WARNING or not _caused_by_outage(record):
            return True
        kind = (record.name, str(record.msg))
        now = time.monotonic()
        with self._guard:
            if now - self._last_at > self.quiet_s:
                self._said.clear()
            self._last_at = now
            first = kind not in self._said
            self._said.add(kind)
        if not first:
            return _demote_to_debug(record)
        record.levelno, record.levelname = logging.WARNING, "WARNING"
        record.msg = f"{record.msg}{_REPEATS_NOTE}"
        record.exc_info, record.exc_text, record.stack_info = None, None, None
        return True


def _caused_by_outage(record: logging.LogRecord) -> bool:
    errors = [record.exc_info[1]] if record.exc_info and record.exc_info[1] else []
    if isinstance(record.args, tuple):
        errors += [arg for arg in record.args if isinstance(arg, BaseException)]
    return any(_is_outage(error) for error in errors)


def _is_outage(error: BaseException) -> bool:
    """``error``, or an error it was raised from or while handling, says Redis is
    unreachable, and none of them is a refusal an outage does not explain."""
    chain: list[BaseException] = []
    current: BaseException | None = error
    while current is not None and current not in chain and len(chain) < 8:
        chain.append(current)
        current = current.__cause__ or current.__context__
    if any(isinstance(link, _NOT_AN_OUTAGE) for link in chain):
        return False
    return any(isinstance(link, _UNREACHABLE) for link in chain)


def _demote_to_debug(record: logging.LogRecord) -> bool:
    """Make ``record`` a DEBUG line: kept only when its logger shows DEBUG."""
    record.levelno, record.levelname = logging.DEBUG, "DEBUG"
    return logging.getLogger(record.name).isEnabledFor(logging.DEBUG)

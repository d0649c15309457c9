"""The PostgreSQL connection pool, told apart from PostgreSQL itself: a read during an
outage fails within about ``read_timeout`` seconds, while a caller that merely waits for a
busy pool waits the pool's full ``timeout``.

How the two are told apart. The pool records the outcome of its own connection attempts
(those it makes to grow, or to replace a connection an outage broke). A read, that is a
request inside :func:`reads_fail_fast` (the ``GET``, ``HEAD`` and ``OPTIONS`` requests:
:func:`common.middleware.database_reads_fail_fast`), first waits ``read_timeout`` for a
connection. If none came:

- when the pool's latest attempt failed, or one has gone unanswered for longer than
  ``read_timeout`` (a reachable PostgreSQL accepts a connection in milliseconds),
  PostgreSQL is unreachable: the read raises :class:`DatabaseUnreachable`, which the API
  answers as a ``503`` with ``Retry-After`` (:mod:`common.outages`). A failure older than
  ``read_timeout`` is first checked with one fresh attempt (one at a time per process),
  so reads stop failing as soon as PostgreSQL is back, not when the pool's backed-off
  retry comes round;
- otherwise every connection is in use, which is load, not an outage: the read waits the
  rest of ``timeout`` in the queue, like every other caller.

Writes, and everything outside a request (workers, beat, commands), always wait the full
``timeout``: a write that waits may still land when PostgreSQL is back within seconds.

A worker's flows wait out a busy pool (:func:`busy_pool_waited_out`): when ``timeout``
passes with every connection of the process in use while PostgreSQL answers, that is not an
outage, and the flow waits on for one (saying so in the log) instead of giving up its turn
as if PostgreSQL were down; when PostgreSQL is unreachable it raises
:class:`DatabaseUnreachable`, the outage its driver handles.
"""

from __future__ import annotations

import contextlib
import logging
import threading
from collections.abc import Iterator
from contextvars import ContextVar
from dataclasses import dataclass
from time import monotonic
from typing import Any

import psycopg
from psycopg.pq import TransactionStatus
from psycopg_pool import ConnectionPool, PoolTimeout

from common import tenant_wall

# Set for the length of a read request. A context variable, not an argument: Django asks
# its backend for a connection deep inside the first query, wherever that happens.
_reading: ContextVar[bool] = ContextVar("database_reads_fail_fast", default=False)
_patient: ContextVar[bool] = ContextVar("database_busy_pool_waited_out", default=False)
logger = logging.getLogger(__name__)


@contextlib.contextmanager
def reads_fail_fast(enabled: bool = True) -> Iterator[None]:
    """Within this block (when ``enabled``), waiting for a pooled connection gives up
    after ``read_timeout`` if PostgreSQL is unreachable. Context-local: it follows the
    request into the thread a sync view runs on."""
    token = _reading.set(enabled)
    try:
        yield
    finally:
        _reading.reset(token)


@contextlib.contextmanager
def busy_pool_waited_out() -> Iterator[None]:
    """Within this block (a worker's flows), a wait for a pooled connection goes on past the
    pool's ``timeout`` while PostgreSQL answers: the process is only out of connections."""
    token = _patient.set(True)
    try:
        yield
    finally:
        _patient.reset(token)


class DatabaseUnreachable(psycopg.OperationalError):
    """No pooled connection came within ``read_timeout``, and the pool's attempts to
    connect to PostgreSQL fail or go unanswered. Not a :class:`~psycopg_pool.PoolTimeout`,
    which says the process ran out of connections."""


@dataclass(frozen=True)
class _Failure:
    at: float  # monotonic
    error: str


class OutagePool(ConnectionPool[Any]):
    """psycopg_pool's ``ConnectionPool`` that knows whether PostgreSQL answers (the module
    docstring says how); ``read_timeout`` is the longest a read waits during an outage."""

    def __init__(self, *args: Any, read_timeout: float = 1.0, **kwargs: Any) -> None:
        self.read_timeout = read_timeout
        self._failure: _Failure | None = None
        self._attempts: dict[int, float] = {}  # thread ident -> when its attempt began
        self._attempts_guard = threading.Lock()
        self._probing = threading.Lock()
        super().__init__(*args, **kwargs)

    def putconn(self, conn: Any) -> None:
        # The pool rolls back a connection returned inside a transaction, which may undo
        # the tenant wall's settings made in it (common.tenant_wall).
        if conn.info.transaction_status != TransactionStatus.IDLE:
            tenant_wall.connection_forget(conn)
        super().putconn(conn)

    def getconn(self, timeout: float | None = None) -> Any:
        if timeout is None and _patient.get():
            return self._getconn_patiently()
        if timeout is not None or not _reading.get() or self.read_timeout >= self.timeout:
            return super().getconn(timeout)
        started = monotonic()
        got = self._getconn_unless_unreachable(self.read_timeout)
        if got is not None:
            return got
        return super().getconn(max(self.timeout - (monotonic() - started), 0.001))

    def _getconn_patiently(self) -> Any:
        """A connection, however long every one stays in use while PostgreSQL answers;
        :class:`DatabaseUnreachable` once it does not."""
        waited = 0.0
        while (got := self._getconn_unless_unreachable(self.timeout)) is None:
            waited += self.timeout
            logger.warning(
                "all %d database connections of this process are in use (DB_POOL_SIZE); a "
                "flow has waited %g s for one and waits on",
                self.max_size, waited,
            )  # fmt: skip
        return got

    def _getconn_unless_unreachable(self, timeout: float) -> Any | None:
        """A connection within ``timeout``; None when none came because every one is in
        use; :class:`DatabaseUnreachable` when none came because PostgreSQL does not
        answer."""
        try:
            return super().getconn(timeout)
        except PoolTimeout:
            problem = self._unreachable()
            if problem is not None:
                raise DatabaseUnreachable(
                    f"no connection within {timeout:g} s, and {problem}"
                ) from None
        return None

    def _connect(self, timeout: float | None = None) -> Any:
        """Every attempt to connect, the pool's own and :meth:`_unreachable`'s, recorded."""
        ident = threading.get_ident()
        with self._attempts_guard:
            self._attempts[ident] = monotonic()
        try:
            connection = super()._connect(timeout)
        except Exception as error:
            self._failure = _Failure(monotonic(), str(error).strip() or type(error).__name__)
            raise
        finally:
            with self._attempts_guard:
                self._attempts.pop(ident, None)
        self._failure = None
        return connection

    def _unreachable(self) -> str | None:
        """Why PostgreSQL is unreachable, or None when it answered the latest attempt."""
        now = monotonic()
        with self._attempts_guard:
            oldest = min(self._attempts.values(), default=now)
        if now - oldest > self.read_timeout:
            return f"a connection attempt has gone unanswered for {now - oldest:.1f} s"
        failure = self._failure
        if failure is None:
            return None
        if now - failure.at > self.read_timeout and self._probing.acquire(blocking=False):
            try:  # still down? (the pool's next attempt may be seconds away)
                with contextlib.suppress(Exception):  # _connect records the outcome
                    self._connect(self.read_timeout).close()
            finally:
                self._probing.release()
            failure = self._failure
            if failure is None:
                return None
        ago = max(monotonic() - failure.at, 0.0)
        return f"the latest attempt failed {ago:.1f} s ago: {failure.error}"

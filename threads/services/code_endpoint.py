"""The run-code endpoint's calls (``POST …/run-code`` and the console's playground, DIGEST
§17): who may start code (a tenant's share of calls across web processes, this process's
runners) and one admitted call from its start to its ``code`` log row.

The sandbox is reached through :mod:`threads.services.code`, its only door.
"""

from __future__ import annotations

import asyncio
import collections
import dataclasses
import logging
import threading
import weakref
from collections.abc import Mapping
from typing import TYPE_CHECKING, Any, Final
from uuid import UUID

from asgiref.sync import sync_to_async
from django.conf import settings

from agents.providers.base import AbortSignal as FlowAbortSignal
from common.connections import connection_release, connection_returned
from common.errors import RateLimited, TemporarilyUnavailable
from common.tenant_wall import tenant_scope
from threads.models import Thread
from threads.services.code import code_pool, code_result_json, code_run, code_settle_async
from threads.services.code_usage import sandbox_charge, sandbox_payer
from threads.services.leases import Lease, LeaseLimitReached, lease_acquire
from threads.services.logs import log_create

if TYPE_CHECKING:
    from sandbox import CodeExecution, RunnerPool

logger = logging.getLogger(__name__)

# The spec's fixed budget for code run from an endpoint (DIGEST §17).
ENDPOINT_BUDGET_S: Final = 10.0
# The name of the tenant leases that count run-code calls (threads.services.leases).
RUN_CODE_LEASE: Final = "run-code"
# A lease outlives its call's longest possible life (waiting for a runner, the budget) by this
# much, for starting and settling; only a crashed process's lease ever reaches its expiry.
LEASE_MARGIN_S: Final = 3.0
# How long the ledger row of a call whose client left waits for its terminated execution.
CANCELLED_SETTLE_WAIT_S: Final = 5.0


# Admission of run-code endpoint calls ---------------------------------------------------------


def code_lease_acquire(*, tenant_id: UUID | str, budget_s: float = ENDPOINT_BUDGET_S) -> Lease:
    """One of the tenant's ``RUN_CODE_TENANT_CONCURRENCY`` run-code slots, shared by every
    web process; never waits. The caller releases it once its execution has settled (or
    failed to start); it expires by itself once the call cannot be running any more.

    Raises :class:`RateLimited` (429) naming the limit and its setting, with the time the
    oldest running call ends at the latest; ``redis.RedisError`` when Redis cannot answer.
    """
    limit = settings.RUN_CODE_TENANT_CONCURRENCY
    longest_s = settings.RUN_CODE_RUNNER_WAIT_S + budget_s + LEASE_MARGIN_S
    try:
        return lease_acquire(
            tenant_id=tenant_id, name=RUN_CODE_LEASE, limit=limit, ttl_ms=int(longest_s * 1000)
        )
    except LeaseLimitReached as refused:
        calls = "call" if limit == 1 else "calls"
        raise RateLimited(
            f"this tenant already has {limit} run-code {calls} running, the most "
            f"RUN_CODE_TENANT_CONCURRENCY allows at once; retry after {refused.retry_after_s} s",
            retry_after_s=refused.retry_after_s,
            details={"setting": "RUN_CODE_TENANT_CONCURRENCY", "limit": limit},
        ) from None


class RunnerSlots:
    """How many run-code endpoint calls of this process may hold a sandbox runner at once
    (the pool's size: in a web process they are its only users), so that a call starts on an
    idle runner instead of queueing inside the sandbox for its whole budget.

    :meth:`take` waits for a slot on the caller's event loop, first come first served, for a
    bounded time; the holder gives it back with :meth:`release` once its execution has
    settled. Thread-safe, and waiters may sit on different event loops (a WSGI request runs
    each async view on a loop of its own): a slot is handed over under the lock, then the
    waiter is woken on its own loop.
    """

    def __init__(self, size: int) -> None:
        if size < 1:
            raise ValueError(f"size must be at least 1, got {size}")
        self.size = size
        self._guard = threading.Lock()
        self._free = size
        self._waiters: collections.deque[_Waiter] = collections.deque()

    @property
    def free(self) -> int:
        """Slots no call holds (a snapshot)."""
        with self._guard:
            return self._free

    async def take(self, *, timeout: float) -> bool:
        """Take a slot, waiting up to ``timeout`` seconds behind earlier waiters; False when
        none came in time. A waiter cancelled while it waits takes none."""
        loop = asyncio.get_running_loop()
        with self._guard:
            if self._free and not self._waiters:
                self._free -= 1
                return True
            waiter = _Waiter(loop, loop.create_future())
            self._waiters.append(waiter)
        try:
            async with asyncio.timeout(timeout):
                await waiter.granted
        except TimeoutError:
            return not self._leave(waiter)  # handed a slot just as time ran out: keep it
        except asyncio.CancelledError:
            if not self._leave(waiter):
                self.release()
            raise
        return True

    def release(self) -> None:
        """Give a slot back: to the first waiter, else to the free count."""
        while True:
            with self._guard:
                if not self._waiters:
                    self._free += 1
                    return
                waiter = self._waiters.popleft()
            try:
                waiter.loop.call_soon_threadsafe(_grant, waiter.granted)
                return
            except RuntimeError:  # its loop has closed: the slot goes to the next
                continue

    def _leave(self, waiter: _Waiter) -> bool:
        """Take ``waiter`` out of the queue; False when a slot was handed to it already."""
        with self._guard:
            try:
                self._waiters.remove(waiter)
            except ValueError:
                return False
            return True


@dataclasses.dataclass(frozen=True, eq=False)
class _Waiter:
    loop: asyncio.AbstractEventLoop
    granted: asyncio.Future[None]


def _grant(granted: asyncio.Future[None]) -> None:
    if not granted.done():
        granted.set_result(None)


_slots: weakref.WeakKeyDictionary[RunnerPool, RunnerSlots] = weakref.WeakKeyDictionary()
_slots_guard = threading.Lock()


def code_slots() -> RunnerSlots:
    """The run-code slots of this process's pool (:func:`code_pool`), one per runner."""
    pool = code_pool()
    with _slots_guard:
        slots = _slots.get(pool)
        if slots is None:
            slots = _slots[pool] = RunnerSlots(pool.size)
        return slots


async def code_runner_take(slots: RunnerSlots) -> None:
    """Wait up to ``RUN_CODE_RUNNER_WAIT_S`` for one of ``slots``; the caller releases it.

    Raises :class:`TemporarilyUnavailable` (503) when every runner stayed busy, naming the
    pool's size and the wait, with a ``Retry-After`` of that wait.
    """
    wait_s = settings.RUN_CODE_RUNNER_WAIT_S
    if not await slots.take(timeout=wait_s):
        raise TemporarilyUnavailable(
            f"all {slots.size} sandbox runners of this web process (SANDBOX_POOL_SIZE) stayed "
            f"busy for {wait_s} s (RUN_CODE_RUNNER_WAIT_S); retry after {wait_s} s",
            retry_after_s=wait_s,
            details={"setting": "SANDBOX_POOL_SIZE", "limit": slots.size},
        )


# One run-code endpoint call (the API route and the console's playground) ----------------------


async def code_endpoint_run(
    *, thread: Thread, source: str, options: Mapping[str, Any], lease: Lease,
    budget_s: float = ENDPOINT_BUDGET_S,
) -> dict[str, Any]:  # fmt: skip
    """Run an admitted call (holding ``lease``, one of its tenant's run-code slots) on a free
    runner of this process within ``budget_s``, and answer its result in the spec's JSON
    shape. Preparing the code and encoding its result (CPU work that grows with their size)
    run on a worker thread, off the event loop. The call leaves a ``runCode`` ledger row for
    ``thread`` (:func:`~threads.services.code_usage.sandbox_charge`; no turn).

    The runner slot and the lease are given back however it ends; a cancelled call (the
    client left) terminates its execution, also one whose start was under way, and its row
    is recorded on a worker thread. Raises :class:`TemporarilyUnavailable` when no runner
    came free in time."""
    abort = FlowAbortSignal()
    execution: CodeExecution | None = None
    try:
        # The first call of a process starts its runner pool, which takes a while: off the loop.
        slots = await sync_to_async(code_slots, thread_sensitive=False)()
        await code_runner_take(slots)
        try:
            start = sync_to_async(code_run, thread_sensitive=False)
            execution = await start(source, options, abort=abort)
            result = await code_settle_async(execution, budget_s=budget_s)
        finally:
            slots.release()
        await connection_returned(_endpoint_charge)(execution, thread=thread)
        return await sync_to_async(code_result_json, thread_sensitive=False)(result)
    except asyncio.CancelledError:
        abort.set()
        if execution is not None:
            loop = asyncio.get_running_loop()
            loop.run_in_executor(None, _endpoint_charge_abandoned, execution, thread)
        raise
    finally:
        await sync_to_async(lease.release, thread_sensitive=False)()


def _endpoint_charge(execution: CodeExecution, *, thread: Thread) -> None:
    with tenant_scope(thread.tenant_id):  # also on an executor's thread
        sandbox_charge(execution, payer=sandbox_payer(thread=thread), name="runCode")


def _endpoint_charge_abandoned(execution: CodeExecution, thread: Thread) -> None:
    """The ledger row of a call whose client left, once its terminated execution settled,
    on a worker thread that gives its connection back after; a failure is logged (nobody
    awaits it)."""
    try:
        execution.result(timeout=CANCELLED_SETTLE_WAIT_S)
        _endpoint_charge(execution, thread=thread)
    except Exception:
        logger.exception("could not record the ledger row of an abandoned run-code call")
    finally:
        connection_release()


def code_lease_release_abandoned(checked: asyncio.Future[Any]) -> None:
    """A done-callback for a call's checks that finished after its client left: the lease
    they took (the answer's ``lease``) is given back, as the call never runs."""
    if checked.cancelled() or checked.exception() is not None:
        return
    lease = getattr(checked.result(), "lease", None)
    if isinstance(lease, Lease):
        asyncio.get_running_loop().run_in_executor(None, lease.release)


def code_endpoint_log(*, thread: Thread, body: Mapping[str, Any]) -> None:
    """The call's ``code`` log row, from what the caller was answered."""
    error = body["error"]
    log_create(
        thread=thread,
        kind="code",
        data={"status": body["status"], "duration_ms": body["durationMs"],
              "error": f"{error['name']}: {error['message']}" if error else None,
              "logs": len(body["logs"]), "reports": len(body["reports"])},
    )  # fmt: skip

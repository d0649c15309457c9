"""Code execution for threads (ARCHITECTURE §8): ``run_code`` on this process's warm runner
pool, tied to a flow's abort signal; code tools; results in the spec's JSON shape; who may
start code from the run-code endpoint (a tenant's share, this process's runners).

The sandbox itself (``sandbox``) knows nothing of threads: this module is the only door to
it, so the pool's size, the budgets and the limits have one home.
"""

from __future__ import annotations

import asyncio
import base64
import collections
import dataclasses
import datetime
import json
import math
import threading
import weakref
from collections.abc import Mapping
from typing import Any, Final
from uuid import UUID

from asgiref.sync import sync_to_async
from django.conf import settings

from agents.documents import CodeToolDoc
from agents.providers.base import AbortSignal as FlowAbortSignal
from agents.registry import ToolResult
from common.errors import RateLimited, TemporarilyUnavailable, ValidationFailed
from common.payloads import payload_check
from sandbox import (
    UNDEFINED,
    AbortSignal,
    CodeExecution,
    CodeExecutionResult,
    ExecutionError,
    JSMap,
    RunnerPool,
    TypedArray,
    default_pool,
    run_code,
)
from threads.models import Thread
from threads.services.leases import Lease, LeaseLimitReached, lease_acquire
from threads.services.logs import log_create

# The spec's fixed budget for code run from an endpoint (DIGEST §17).
ENDPOINT_BUDGET_S: Final = 10.0
# The name of the tenant leases that count run-code calls (threads.services.leases).
RUN_CODE_LEASE: Final = "run-code"
# A lease outlives its call's longest possible life (waiting for a runner, the budget) by this
# much, for starting and settling; only a crashed process's lease ever reaches its expiry.
LEASE_MARGIN_S: Final = 3.0


def code_pool() -> RunnerPool:
    """This process's warm pool of runner processes (``SANDBOX_POOL_SIZE``, each confined to
    ``SANDBOX_CPU_LIMIT_S`` per call and ``SANDBOX_ADDRESS_SPACE_MB``), started on first use.
    Thread-safe."""
    return default_pool(
        settings.SANDBOX_POOL_SIZE,
        cpu_limit_seconds=settings.SANDBOX_CPU_LIMIT_S,
        address_space_limit_mb=settings.SANDBOX_ADDRESS_SPACE_MB,
    )


def code_run(
    source: str,
    options: Mapping[str, Any] | None = None,
    *,
    abort: FlowAbortSignal | None = None,
) -> CodeExecution:
    """Start ``source`` in a fresh sandbox and return its handle at once (DIGEST §17).

    ``abort`` (a flow's signal: stop, terminate, a lost lock) terminates the execution when
    it fires, or at once if it already has. Invalid options settle as ``link_error``.
    """
    signal = AbortSignal()
    execution = run_code(source, options, pool=code_pool(), abort_signal=signal)
    if abort is not None:
        unregister = abort.add_callback(lambda: signal.abort("the flow was stopped"))
        execution.add_done_callback(lambda _result: unregister())
    return execution


def code_settle(execution: CodeExecution, *, budget_s: float) -> CodeExecutionResult:
    """Wait up to ``budget_s`` for ``execution``; past it, terminate it with a message naming
    the budget and return that ``terminated`` result."""
    try:
        return execution.result(timeout=budget_s)
    except TimeoutError:
        execution.terminate(f"the code ran past its budget of {budget_s:g} s")
        return execution.result()


async def code_settle_async(execution: CodeExecution, *, budget_s: float) -> CodeExecutionResult:
    """:func:`code_settle` on the event loop: wait up to ``budget_s`` without holding a
    thread, then terminate the execution naming the budget. A waiter that is cancelled
    (the client went away) terminates the execution before it lets the cancellation go on."""
    try:
        async with asyncio.timeout(budget_s):
            return await execution
    except TimeoutError:
        execution.terminate(f"the code ran past its budget of {budget_s:g} s")
        return execution.result(timeout=0)  # terminate() has settled it
    except asyncio.CancelledError:
        execution.terminate("the request was cancelled")
        raise


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
    *, source: str, options: Mapping[str, Any], lease: Lease, budget_s: float = ENDPOINT_BUDGET_S
) -> dict[str, Any]:
    """Run an admitted call (holding ``lease``, one of its tenant's run-code slots) on a free
    runner of this process within ``budget_s``, and answer its result in the spec's JSON
    shape. Preparing the code and encoding its result (CPU work that grows with their size)
    run on a worker thread, off the event loop.

    The runner slot and the lease are given back however it ends; a cancelled call (the
    client left) terminates its execution, also one whose start was under way. Raises
    :class:`TemporarilyUnavailable` when no runner came free in time."""
    abort = FlowAbortSignal()
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
        return await sync_to_async(code_result_json, thread_sensitive=False)(result)
    except asyncio.CancelledError:
        abort.set()
        raise
    finally:
        await sync_to_async(lease.release, thread_sensitive=False)()


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


def code_tool_run(
    tool: CodeToolDoc,
    arguments: Mapping[str, Any],
    *,
    abort: FlowAbortSignal | None = None,
    budget_s: float | None = None,
    entry_env: Mapping[str, str] | None = None,
    entry_options: Mapping[str, Any] | None = None,
) -> ToolResult:
    """Run a tenant's code tool: its module's default export is called with the validated
    arguments and ``{env, options}`` (the ``env`` and ``options`` of the prompt's ``tools[]``
    entry, ``{}`` when it sets none), and what it returns (or resolves to) is the tool's
    result: a string as it is, anything else as JSON. An error, a failed link, an overrun of
    memory or of the budget (``CODE_TOOL_TIMEOUT_S``) is a failed call whose message says
    which."""
    extension = "ts" if tool.language == "typescript" else "js"
    context = {"env": dict(entry_env or {}), "options": dict(entry_options or {})}
    options = {
        "language": tool.language,
        "filename": f"{tool.name}.{extension}",
        "execute": {"fn": "default", "args": [dict(arguments), context]},
    }
    budget = settings.CODE_TOOL_TIMEOUT_S if budget_s is None else budget_s
    result = code_settle(code_run(tool.source, options, abort=abort), budget_s=budget)
    if result.status == "success":
        value = plain(result.result)
        problem = unstorable(value)
        if problem is not None:
            return ToolResult.failure(problem, code="code_unstorable_result")
        if value is None:
            return ToolResult.success("")
        return ToolResult.success(value if isinstance(value, str) else json.dumps(value))
    return ToolResult.failure(_failure_text(result), code=f"code_{result.status}")


def _failure_text(result: CodeExecutionResult) -> str:
    error = result.error
    if error is None:
        return f"the code tool ended with status {result.status}"
    where = ""
    if error.line is not None:
        column = f":{error.column}" if error.column is not None else ""
        where = f" ({error.filename or 'code'}:{error.line}{column})"
    prefix = {"link_error": "the code could not be loaded: ", "terminated": "terminated: "}
    return f"{prefix.get(result.status, '')}{error.name}: {error.message}{where}"


def unstorable(value: Any) -> str | None:
    """Why a result cannot be stored or sent as JSON text (a NUL, a lone surrogate, deep
    nesting: :func:`common.payloads.payload_check`), or None."""
    try:
        payload_check(value, path="result")
    except ValidationFailed as problem:
        return f"the code's {problem.field or 'result'} {problem.message}; encode it first"
    return None


def code_result_json(result: CodeExecutionResult) -> dict[str, Any]:
    """A result in the spec's shape (DIGEST §17: camelCase ``durationMs``), JSON-safe: a
    result JSON cannot carry (a lone surrogate, say) settles as an ``error``."""
    value = plain(result.result) if result.status == "success" else None
    problem = unstorable(value)
    if problem is not None:
        failure = ExecutionError(name="EncodingError", message=problem)
        result = dataclasses.replace(result, status="error", error=failure)
        value = None
    error = result.error
    return {
        "status": result.status,
        "result": value,
        "error": None
        if error is None
        else {
            "name": error.name,
            "message": _printable(error.message),
            "stack": _printable(error.stack),
            "line": error.line,
            "column": error.column,
            "filename": error.filename,
            "specifier": error.specifier,
        },
        "logs": [
            {"level": log.level, "args": _printable(plain(log.args)), "timestamp": log.timestamp}
            for log in result.logs
        ],
        "reports": _printable(plain(result.reports)),
        "durationMs": result.duration_ms,
    }


def _printable(value: Any) -> Any:
    """Diagnostics (logs, reports, messages) with each lone surrogate replaced by U+FFFD, so
    they can always be sent as JSON."""
    if isinstance(value, str):
        return value.encode("utf-16", "surrogatepass").decode("utf-16", "replace")
    if isinstance(value, Mapping):
        return {_printable(key): _printable(item) for key, item in value.items()}
    if isinstance(value, list):
        return [_printable(item) for item in value]
    return value


def plain(value: Any) -> Any:
    """A value that crossed back from the sandbox, as JSON: ``undefined`` and non-finite
    numbers become null, a Map a list of ``[key, value]`` pairs, a Set a list, a Date an
    ISO 8601 string, bytes and typed arrays ``{"type", "base64"}``."""
    if value is UNDEFINED or value is None:
        return None
    if isinstance(value, float) and not math.isfinite(value):
        return None
    if isinstance(value, str | int | float | bool):
        return value
    if isinstance(value, JSMap):
        return [[plain(key), plain(item)] for key, item in value.items()]
    if isinstance(value, Mapping):
        return {str(key): plain(item) for key, item in value.items()}
    if isinstance(value, set | frozenset | list | tuple):
        return [plain(item) for item in value]
    if isinstance(value, datetime.datetime):
        return value.isoformat()
    if isinstance(value, bytes | bytearray):
        return {"type": "Uint8Array", "base64": base64.b64encode(value).decode()}
    if isinstance(value, TypedArray):
        return {"type": value.kind, "base64": base64.b64encode(value.data).decode()}
    return str(value)

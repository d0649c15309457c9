"""``run_code`` and the ``CodeExecution`` handle: the host-side dispatcher of one call."""

from __future__ import annotations

import asyncio
import atexit
import contextvars
import inspect
import logging
import math
import threading
import time
import uuid
from collections.abc import Callable, Generator, Mapping
from dataclasses import dataclass, field
from typing import Any

from sandbox import marshal
from sandbox.confine import DEFAULT_ADDRESS_SPACE_LIMIT_MB, DEFAULT_CPU_LIMIT_SECONDS
from sandbox.options import InvalidCodeExecutionOptions, PreparedCall, prepare
from sandbox.pool import PoolClosed, Runner, RunnerPool, call_soon
from sandbox.protocol import REPORT_TARGET, Status


@dataclass(frozen=True)
class ExecutionError:
    name: str
    message: str
    stack: str | None = None
    line: int | None = None
    column: int | None = None
    filename: str | None = None
    specifier: str | None = None


@dataclass(frozen=True)
class CodeExecutionLog:
    level: str  # log | info | warn | error | debug
    args: list[Any]
    timestamp: float  # epoch milliseconds


@dataclass(frozen=True)
class CodeExecutionResult:
    status: Status
    result: Any = None  # set when status is "success"
    error: ExecutionError | None = None
    logs: list[CodeExecutionLog] = field(default_factory=list)
    reports: list[Any] = field(default_factory=list)
    duration_ms: float = 0.0
    # The runner process's CPU time for the call (its ``done``'s ``cpuMs``); 0 when the call
    # settled without a ``done`` (terminated, a lost or killed runner, invalid options).
    cpu_ms: float = 0.0


class AbortSignal:
    """A thread-safe abort signal: ``abort(reason)`` terminates every execution it was
    passed to (``run_code(..., abort_signal=signal)``), also one started after it fired."""

    def __init__(self) -> None:
        self._lock = threading.Lock()
        self._listeners: list[Callable[[str], object]] = []
        self.reason: str | None = None

    @property
    def aborted(self) -> bool:
        return self.reason is not None

    def abort(self, reason: str = "aborted") -> None:
        with self._lock:
            if self.reason is not None:
                return
            self.reason = reason
            listeners, self._listeners = self._listeners, []
        for listener in listeners:
            listener(reason)

    def add_listener(self, listener: Callable[[str], object]) -> None:
        with self._lock:
            if self.reason is None:
                self._listeners.append(listener)
                return
            reason = self.reason
        listener(reason)


logger = logging.getLogger(__name__)


class CodeExecution:
    """The handle of one run_code call.

    ``result(timeout=None)`` blocks until it settles; ``await execution`` does the same
    without blocking the event loop. ``terminate(reason)`` settles it at once as
    ``terminated`` (``reason`` in ``error.message``), cancels the runner and, if the runner
    has not stopped after the pool's grace, kills and replaces it; later calls are no-ops.
    ``running`` is True until it settles; ``reports`` holds the values the guest passed to
    ``report()`` so far. ``id`` is unique across processes and restarts (a uuid), so it can
    name the call in records that outlive the process. ``cpu_ms()`` is the runner's CPU time
    for the call, also for one that was terminated.
    """

    def __init__(self, pool: RunnerPool, prepared: PreparedCall) -> None:
        self.id = f"x{uuid.uuid4().hex}"
        self.reports: list[Any] = []
        self._pool = pool
        self._prepared = prepared
        # The host's calls run in the context of the code that started the execution (its
        # context variables: whom it acts for), each on a thread of its own.
        self._context = contextvars.copy_context()
        self._lock = threading.Lock()
        self._settled = threading.Event()
        self._started = threading.Event()  # a runner took it, or it settled without one
        self._outcome: CodeExecutionResult | None = None
        self._runner: Runner | None = None
        self._kill_timer: threading.Timer | None = None
        self._callbacks: list[Callable[[CodeExecutionResult], None]] = []
        self._started_at = time.perf_counter()
        # Set once settled and no runner serves the call any more: its CPU time is final.
        self._released = threading.Event()
        self._cpu_ms = 0.0

    # -- public -----------------------------------------------------------------------

    @property
    def running(self) -> bool:
        return not self._settled.is_set()

    @property
    def runner_pid(self) -> int | None:
        """The pid of the runner process serving this execution, None when there is none."""
        with self._lock:
            return self._runner.pid if self._runner is not None else None

    def wait_started(self, timeout: float | None = None) -> bool:
        """Wait until a runner has taken the call (or it settled without one: invalid
        options, a terminate while it waited); False when ``timeout`` passed first, the call
        still waiting for a free runner of its pool."""
        return self._started.wait(timeout)

    def result(self, timeout: float | None = None) -> CodeExecutionResult:
        """The settled result. Raises ``TimeoutError`` when ``timeout`` passes first (the
        execution goes on: only ``terminate`` stops it)."""
        if not self._settled.wait(timeout):
            raise TimeoutError("the execution has not settled yet")
        assert self._outcome is not None
        return self._outcome

    def cpu_ms(self, timeout: float | None = None) -> float:
        """The CPU time in milliseconds its runner reported for the call (``done``'s
        ``cpuMs``). Final once the call settled and its runner let go of it: at once after a
        ``done``; after a ``terminate``, when the runner's late ``done`` arrives or the pool
        kills it past its cancel grace (then 0, as for a lost runner). Waits up to
        ``timeout`` for that and answers what is known when it passes."""
        self._released.wait(timeout)
        with self._lock:
            return self._cpu_ms

    def __await__(self) -> Generator[Any, None, CodeExecutionResult]:
        loop = asyncio.get_running_loop()
        future: asyncio.Future[CodeExecutionResult] = loop.create_future()

        def resolve(outcome: CodeExecutionResult) -> None:
            if not future.done():
                future.set_result(outcome)

        def deliver(outcome: CodeExecutionResult) -> None:
            loop.call_soon_threadsafe(resolve, outcome)

        self.add_done_callback(deliver)
        return future.__await__()

    def add_done_callback(self, callback: Callable[[CodeExecutionResult], None]) -> None:
        """Call ``callback(result)`` once settled (at once if it already is), on any thread."""
        with self._lock:
            if self._outcome is None:
                self._callbacks.append(callback)
                return
            outcome = self._outcome
        _call_safely(callback, outcome)

    def terminate(self, reason: str | None = None) -> None:
        message = reason or "terminated by the caller"
        if not self._settle("terminated", error=ExecutionError("TerminatedError", message)):
            return
        with self._lock:
            runner = self._runner
        if runner is not None:
            runner.send({"type": "cancel", "id": self.id, "reason": message})
            self._kill_timer = call_soon(lambda: self._kill_if_stuck(runner),
                                         self._pool.cancel_grace_seconds)  # fmt: skip

    # -- dispatch ---------------------------------------------------------------------

    def _start(self) -> None:
        runner = self._pool.try_acquire()
        if runner is not None:
            self._attach(runner)
        else:
            threading.Thread(target=self._wait_for_runner, daemon=True).start()

    def _wait_for_runner(self) -> None:
        try:
            runner = self._pool.acquire()
        except PoolClosed as error:
            self._settle("error", error=ExecutionError("SandboxUnavailable", str(error)))
            return
        self._attach(runner)

    def _attach(self, runner: Runner) -> None:
        with self._lock:
            if self._outcome is not None:  # terminated while waiting for a runner
                attach = False
            else:
                attach = True
                self._runner = runner
                runner.listener = self
                self._started.set()
        if not attach:
            self._pool.release(runner)
            return
        if not runner.send({"type": "execute", "id": self.id, "payload": self._prepared.payload}):
            self._detach(runner, reusable=False)
            self._settle("error", error=ExecutionError("RunnerLost", "the runner process is gone"))

    def on_message(self, runner: Runner, message: dict[str, Any]) -> None:
        if message.get("id") != self.id:
            return
        kind = message["type"]
        if kind == "tool_call":
            serve = self._context.copy().run
            threading.Thread(target=serve, args=(self._serve_call, runner, message),
                             daemon=True).start()  # fmt: skip
        elif kind == "done":
            cpu_ms = _cpu_ms(message)
            with self._lock:
                self._cpu_ms = cpu_ms
            self._detach(runner, reusable=True)
            try:
                self._settle_done(message)
            except Exception as problem:  # whatever it was, the call must settle
                failure = ExecutionError("SandboxError", f"bad done: {problem!r}")
                self._settle("error", error=failure)

    def on_runner_lost(self, runner: Runner, returncode: int | None) -> None:
        self._detach(runner, reusable=False)
        if runner.killed_for_cpu(returncode):
            # The spec's safety-cap channel: `terminated` with a diagnosable message.
            self._settle(
                "terminated",
                error=ExecutionError(
                    "TerminatedError",
                    f"the call used more than its CPU time limit of "
                    f"{self._pool.cpu_limit_seconds:g} s in code that cannot be interrupted; "
                    "the kernel stopped its runner (a safety cap of the sandbox)",
                ),
            )
            return
        if runner.fault is not None:
            message = f"the sandbox runner was killed: {runner.fault}"
        else:
            message = f"the sandbox runner process exited (exit code {returncode})"
        self._settle("error", error=ExecutionError("RunnerLost", message))

    def _serve_call(self, runner: Runner, message: dict[str, Any]) -> None:
        reply: dict[str, Any] = {"type": "tool_result", "id": self.id, "callId": message["callId"]}
        try:
            value = self._invoke(str(message["target"]), message.get("input") or [])
            reply.update(ok=True, result=marshal.encode(value, "host result"))
        except Exception as error:  # a host exception is a guest rejection
            reply.update(ok=False, error={"name": type(error).__name__, "message": str(error)})
        with self._lock:
            attached = self._runner is runner
        if attached:
            runner.send(reply)

    def _invoke(self, target: str, encoded_args: list[Any]) -> Any:
        args = [marshal.decode(arg, f"argument {i}") for i, arg in enumerate(encoded_args)]
        if target == REPORT_TARGET:
            value = args[0] if args else marshal.UNDEFINED
            self.reports.append(value)
            if self._prepared.report is not None:
                self._prepared.report(value)
            return marshal.UNDEFINED
        function = self._prepared.functions.by_id.get(target)
        if function is None:
            raise LookupError(f"no host function {target!r}")
        value = function(*args)
        if inspect.isawaitable(value):
            value = asyncio.run(_awaited(value))
        return value

    def _settle_done(self, message: dict[str, Any]) -> None:
        status: Status = message["status"]
        error = message.get("error")
        try:
            result = marshal.decode(message["result"], "result") if status == "success" else None
        except marshal.SerializationError as problem:
            status, result = "error", None
            error = {"name": "SerializationError", "message": str(problem)}
        logs = [
            CodeExecutionLog(
                level=entry["level"],
                args=[_decode_log_arg(arg) for arg in entry["args"]],
                timestamp=entry["timestamp"],
            )
            for entry in message.get("logs", [])
        ]
        self._settle(
            status,
            result=result,
            error=ExecutionError(**error) if error else None,
            logs=logs,
            duration_ms=float(message.get("durationMs", 0.0)),
            cpu_ms=_cpu_ms(message),
        )

    def _detach(self, runner: Runner, *, reusable: bool) -> None:
        with self._lock:
            if self._runner is not runner:
                return
            self._runner = None
            timer, self._kill_timer = self._kill_timer, None
            if self._outcome is not None:
                self._released.set()
        if timer is not None:
            timer.cancel()
        if reusable:
            self._pool.release(runner)
        else:
            runner.listener = None

    def _kill_if_stuck(self, runner: Runner) -> None:
        with self._lock:
            stuck = self._runner is runner
        if stuck:
            self._detach(runner, reusable=False)
            self._pool.discard(runner)

    def _settle(
        self,
        status: Status,
        *,
        result: Any = None,
        error: ExecutionError | None = None,
        logs: list[CodeExecutionLog] | None = None,
        duration_ms: float | None = None,
        cpu_ms: float = 0.0,
    ) -> bool:
        """Settle once; False when already settled."""
        with self._lock:
            if self._outcome is not None:
                return False
            elapsed = (time.perf_counter() - self._started_at) * 1000
            self._outcome = CodeExecutionResult(
                status=status,
                result=result,
                error=error,
                logs=logs or [],
                reports=list(self.reports),
                duration_ms=round(duration_ms if duration_ms is not None else elapsed, 3),
                cpu_ms=cpu_ms,
            )
            callbacks, self._callbacks = self._callbacks, []
            if self._runner is None:
                self._released.set()
            self._settled.set()
            self._started.set()
        for callback in callbacks:
            _call_safely(callback, self._outcome)
        return True


def _call_safely(
    callback: Callable[[CodeExecutionResult], None], outcome: CodeExecutionResult
) -> None:
    # Callbacks run on a runner's reader thread: one that raises (an event loop closed
    # before the result arrived, say) must not stop that thread.
    try:
        callback(outcome)
    except Exception:
        logger.exception("a run_code done-callback raised")


def _cpu_ms(done: Mapping[str, Any]) -> float:
    """A ``done``'s ``cpuMs`` (optional: 0 when absent or not a finite, non-negative
    number)."""
    value = done.get("cpuMs", 0.0)
    if isinstance(value, bool) or not isinstance(value, int | float):
        return 0.0
    return float(value) if math.isfinite(value) and value >= 0 else 0.0


async def _awaited(value: Any) -> Any:
    return await value


def _decode_log_arg(node: Any) -> Any:
    try:
        return marshal.decode(node, "log argument")
    except (marshal.SerializationError, KeyError, TypeError, ValueError):
        return repr(node)


def run_code(
    source: str,
    options: Mapping[str, Any] | None = None,
    *,
    pool: RunnerPool | None = None,
    abort_signal: AbortSignal | None = None,
) -> CodeExecution:
    """Start running ``source`` in a fresh sandbox; returns at once with the handle.

    ``options`` follow the run_code contract (``language``, ``filename``, ``execute``,
    ``imports``, ``globals``, ``modules``, ``memoryLimitBytes``, ``report``); callables
    inside ``imports`` and ``globals`` become async functions in the guest, called on a
    host thread (coroutines are run to completion), and an exception they raise rejects
    the guest's promise. Invalid options settle the handle as ``link_error`` without
    reaching a runner. ``pool`` defaults to ``default_pool()``. ``abort_signal``, when
    given, terminates the execution as soon as it fires (``AbortSignal.abort(reason)``),
    with the reason as the error message.
    """
    target_pool = pool or default_pool()
    execution = _run(source, options, target_pool, abort_signal)
    for watcher in tuple(_watchers):
        try:
            watcher(execution, target_pool)
        except Exception:  # watching must never fail a call
            logger.exception("a sandbox execution watcher failed")
    return execution


def _run(
    source: str, options: Mapping[str, Any] | None, target_pool: RunnerPool,
    abort_signal: AbortSignal | None,
) -> CodeExecution:  # fmt: skip
    try:
        prepared = prepare(source, options)
    except InvalidCodeExecutionOptions as error:
        execution = CodeExecution(target_pool, _unused_call())
        execution._settle(
            "link_error",
            error=ExecutionError("InvalidCodeExecutionOptions", str(error),
                                 specifier=error.specifier),
        )  # fmt: skip
        return execution
    execution = CodeExecution(target_pool, prepared)
    if abort_signal is not None:
        abort_signal.add_listener(execution.terminate)
    execution._start()
    return execution


def _unused_call() -> PreparedCall:
    return prepare("", None)


# Called with each execution ``run_code`` starts and its pool (metrics, from above the
# sandbox): they may add a done callback; they must be quick (one that raises is logged).
Watcher = Callable[[CodeExecution, RunnerPool], None]
_watchers: list[Watcher] = []


def executions_watch(watcher: Watcher) -> Callable[[], None]:
    """Call ``watcher`` with every execution :func:`run_code` starts; returns its removal."""
    _watchers.append(watcher)
    return lambda: _watchers.remove(watcher)


_default_pool: RunnerPool | None = None
_default_lock = threading.Lock()
DEFAULT_POOL_SIZE = 2


def configure_default_pool(
    size: int,
    *,
    cancel_grace_seconds: float = 0.02,
    cpu_limit_seconds: float = DEFAULT_CPU_LIMIT_SECONDS,
    address_space_limit_mb: int | None = DEFAULT_ADDRESS_SPACE_LIMIT_MB,
) -> RunnerPool:
    """Replace the process-wide pool ``run_code`` uses when given none (closing the old);
    the keyword arguments are ``RunnerPool``'s."""
    global _default_pool
    pool = RunnerPool(
        size,
        cancel_grace_seconds=cancel_grace_seconds,
        cpu_limit_seconds=cpu_limit_seconds,
        address_space_limit_mb=address_space_limit_mb,
    )
    with _default_lock:
        old, _default_pool = _default_pool, pool
    if old is not None:
        old.close()
    return pool


def default_pool(
    size: int | None = None,
    *,
    cpu_limit_seconds: float = DEFAULT_CPU_LIMIT_SECONDS,
    address_space_limit_mb: int | None = DEFAULT_ADDRESS_SPACE_LIMIT_MB,
) -> RunnerPool:
    """The process-wide pool, started on first use with ``size`` runners (default
    ``DEFAULT_POOL_SIZE``) and the given limits (``RunnerPool``'s); once started, the
    arguments are ignored (``configure_default_pool`` replaces it)."""
    global _default_pool
    with _default_lock:
        if _default_pool is None:
            _default_pool = RunnerPool(
                DEFAULT_POOL_SIZE if size is None else size,
                cpu_limit_seconds=cpu_limit_seconds,
                address_space_limit_mb=address_space_limit_mb,
            )
        return _default_pool


@atexit.register
def _close_default_pool() -> None:
    with _default_lock:
        pool = _default_pool
    if pool is not None:
        pool.close()

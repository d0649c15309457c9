"""A warm pool of runner processes that replaces any runner that dies or is killed.

Runners are started with ``subprocess`` (fork + exec of a fresh interpreter, never a
bare fork of this possibly threaded process) running ``python -m sandbox.runner``. A
runner joins the idle set once it has said ``ready``; each one serves one execution at a
time. ``kill`` is the SIGKILL backstop for guest code that ignores the interrupt handler
(a native sort, for example); the pool then starts a replacement in the background, so a
killed or crashed runner never shrinks the pool.

Runners confine themselves (``sandbox.confine``) with the limits the pool passes in
argv: a CPU budget per execution, an address-space limit, and the pid they must die
with. That last one is ``PR_SET_PDEATHSIG``, which the kernel fires when the *thread*
that forked the runner ends, not the process; so every runner of a pool is started by the
pool's one spawner thread, which lives as long as the pool (see ``_Spawner``).
"""

from __future__ import annotations

import contextlib
import heapq
import itertools
import logging
import os
import signal
import subprocess
import sys
import threading
import time
from collections import deque
from collections.abc import Callable, Mapping
from concurrent.futures import Future
from pathlib import Path
from typing import TYPE_CHECKING, Any, Protocol, TypeVar, cast

from sandbox import protocol
from sandbox.confine import (
    DEFAULT_ADDRESS_SPACE_LIMIT_MB,
    DEFAULT_CPU_LIMIT_SECONDS,
    MIN_ADDRESS_SPACE_LIMIT_MB,
)

if TYPE_CHECKING:
    from sandbox.execution import CodeExecution

logger = logging.getLogger(__name__)
_PROJECT_ROOT = Path(__file__).resolve().parent.parent
DEFAULT_START_TIMEOUT_SECONDS = 30.0
MAX_RESPAWN_DELAY_SECONDS = 5.0
T = TypeVar("T")


class Listener(Protocol):
    """The execution currently attached to a runner."""

    def on_message(self, runner: Runner, message: dict[str, Any]) -> None: ...

    def on_runner_lost(self, runner: Runner, returncode: int | None) -> None: ...


class PoolClosed(RuntimeError):
    pass


class Runner:
    """One runner process and the thread that reads its stdout.

    Constructed only on the pool's spawner thread (see the module docstring).
    """

    def __init__(self, pool: RunnerPool) -> None:
        self.pool = pool
        self.listener: Listener | None = None
        self.killed = False
        self.fault: str | None = None  # why the host killed it for breaking the protocol
        self.confinement: protocol.ConfinementReport | None = None
        self._write_lock = threading.Lock()
        self.process = subprocess.Popen(
            [sys.executable, "-m", "sandbox.runner", *pool.runner_arguments()],
            stdin=subprocess.PIPE,
            stdout=subprocess.PIPE,
            cwd=_PROJECT_ROOT,
            close_fds=True,
            # Nothing of the host's environment (credentials, service URLs) reaches the
            # process that runs guest code.
            env={},
        )
        self.was_ready = False
        self.pid = self.process.pid
        threading.Thread(target=self._read, name=f"sandbox-runner-{self.pid}", daemon=True).start()

    def send(self, message: Any) -> bool:
        """Write one protocol line; False when the runner is gone."""
        stdin = self.process.stdin
        assert stdin is not None
        try:
            with self._write_lock:
                stdin.write(protocol.dumps(message))
                stdin.flush()
            return True
        except (BrokenPipeError, OSError, ValueError):
            return False

    def kill(self) -> None:
        """SIGKILL; the reader thread then reports the loss and the pool replaces it."""
        self.killed = True
        if self.process.poll() is None:
            self.process.kill()

    def killed_for_cpu(self, returncode: int | None) -> bool:
        """The kernel ended it at its RLIMIT_CPU (guest code the interrupt handler could
        not stop in time)."""
        return returncode == -signal.SIGXCPU

    def _read(self) -> None:
        stdout = self.process.stdout
        assert stdout is not None
        for line in stdout:
            try:
                message = protocol.loads(line)
            except ValueError as error:
                # A line the host cannot read may be the `done` of the call in flight:
                # skipping it would leave that call waiting forever.
                self._break(f"it sent a line the host cannot read ({error})")
                continue
            if message["type"] == "ready":
                self.was_ready = True
                confinement = message.get("confinement")
                if isinstance(confinement, dict):
                    self.confinement = cast(protocol.ConfinementReport, confinement)
                self.pool._on_ready(self)
                continue
            listener = self.listener
            if listener is not None:
                try:
                    listener.on_message(self, message)
                except Exception:  # this thread must keep reading, whatever one message did
                    logger.exception("sandbox runner %s: a message could not be handled", self.pid)
        returncode = self.process.wait()
        listener = self.listener
        self.listener = None
        if listener is not None:
            listener.on_runner_lost(self, returncode)
        self.pool._on_exit(self)

    def _break(self, fault: str) -> None:
        logger.error("sandbox runner %s broke the protocol: %s; killing it", self.pid, fault)
        self.fault = fault
        self.kill()


class _Spawner:
    """The one thread that starts a pool's runner processes, now or after a delay.

    A runner dies with the thread that forked it (``PR_SET_PDEATHSIG``), so no runner may
    be forked by a thread that ends before the pool does: the caller that built the pool,
    a timer, the reader thread of the runner being replaced. This thread forks them all
    and ends only in ``stop``, after the pool's runners are gone.
    """

    def __init__(self, name: str) -> None:
        self._condition = threading.Condition()
        self._due: list[tuple[float, int, Callable[[], None]]] = []
        self._order = itertools.count()
        self._stopped = False
        self._thread = threading.Thread(target=self._serve, name=name, daemon=True)
        self._thread.start()

    def call_later(self, function: Callable[[], None], delay: float = 0.0) -> None:
        with self._condition:
            when = time.monotonic() + delay
            heapq.heappush(self._due, (when, next(self._order), function))
            self._condition.notify()

    def call(self, function: Callable[[], T]) -> T:
        """Run ``function`` on the spawner thread and return (or raise) what it did."""
        future: Future[T] = Future()

        def run() -> None:
            try:
                future.set_result(function())
            except BaseException as error:
                future.set_exception(error)

        self.call_later(run)
        return future.result()

    def stop(self) -> None:
        with self._condition:
            self._stopped = True
            self._due.clear()
            self._condition.notify()
        if threading.current_thread() is not self._thread:
            self._thread.join(timeout=5)

    def _serve(self) -> None:
        while True:
            with self._condition:
                while not self._stopped and (not self._due or self._due[0][0] > time.monotonic()):
                    timeout = self._due[0][0] - time.monotonic() if self._due else None
                    self._condition.wait(timeout)
                if self._stopped:
                    return
                _, _, function = heapq.heappop(self._due)
            try:
                function()
            except Exception:  # the pool's spawner must outlive any one failed start
                logger.exception("sandbox runner pool: a scheduled start failed")


class RunnerPool:
    """``size`` warm runners; ``acquire`` blocks until one is idle.

    ``cancel_grace_seconds`` is how long a cancelled runner may take to stop by itself
    before it is killed and replaced (``terminate()`` on an execution).
    ``cpu_limit_seconds`` is the CPU time one execution may use: past it the interrupt
    handler stops guest code (status ``terminated``), and a second later the kernel kills
    a runner whose guest could not be interrupted (a native sort), which is replaced.
    ``address_space_limit_mb`` is each runner's RLIMIT_AS (None: none); it must leave
    room for the interpreter (about 250 MiB) plus the largest guest heap
    (``MEMORY_LIMIT_CEILING_BYTES``, 256 MiB) and the messages in flight.
    """

    def __init__(
        self,
        size: int,
        *,
        cancel_grace_seconds: float = 0.02,
        cpu_limit_seconds: float = DEFAULT_CPU_LIMIT_SECONDS,
        address_space_limit_mb: int | None = DEFAULT_ADDRESS_SPACE_LIMIT_MB,
    ) -> None:
        if size < 1:
            raise ValueError("a runner pool needs at least one runner")
        if not 0 < cpu_limit_seconds < float("inf"):
            raise ValueError("cpu_limit_seconds must be a positive number of seconds")
        if address_space_limit_mb is not None and (
            address_space_limit_mb < MIN_ADDRESS_SPACE_LIMIT_MB
        ):
            raise ValueError(
                f"address_space_limit_mb must be at least {MIN_ADDRESS_SPACE_LIMIT_MB} "
                "(a runner needs that much to start)"
            )
        self.size = size
        self.cancel_grace_seconds = cancel_grace_seconds
        self.cpu_limit_seconds = cpu_limit_seconds
        self.address_space_limit_mb = address_space_limit_mb
        self.confinement: protocol.ConfinementReport | None = None  # the latest runner's report
        self._condition = threading.Condition()
        self._idle: deque[Runner] = deque()
        self._all: set[Runner] = set()
        self._closed = False
        self._failed_starts = 0
        self._logged_refusals: dict[str, str] | None = None
        self._spawner = _Spawner(name=f"sandbox-spawner-{id(self):x}")
        try:
            self._spawner.call(self._start_all)
        except BaseException:
            self.close()
            raise

    def runner_arguments(self) -> list[str]:
        """``python -m sandbox.runner`` arguments: the limits, and this process's pid."""
        return [
            "--parent", str(os.getpid()),
            "--cpu-seconds", repr(self.cpu_limit_seconds),
            "--address-space-mb", str(self.address_space_limit_mb or 0),
        ]  # fmt: skip

    # -- public -----------------------------------------------------------------------

    def acquire(self, timeout: float | None = None) -> Runner:
        """An idle runner, now or once one is free. Raises ``PoolClosed`` or ``TimeoutError``."""
        with self._condition:
            if not self._condition.wait_for(lambda: self._idle or self._closed, timeout):
                raise TimeoutError("no sandbox runner became free in time")
            if self._closed:
                raise PoolClosed("the sandbox runner pool is closed")
            return self._idle.popleft()

    def try_acquire(self) -> Runner | None:
        with self._condition:
            if self._closed or not self._idle:
                return None
            return self._idle.popleft()

    def release(self, runner: Runner) -> None:
        """Give back a runner whose execution is over (``done`` received)."""
        runner.listener = None
        with self._condition:
            if runner in self._all and not runner.killed and not self._closed:
                self._idle.append(runner)
                self._condition.notify()

    def discard(self, runner: Runner) -> None:
        """Kill a runner that will not stop; a replacement starts when its exit is seen."""
        runner.kill()

    def wait_ready(self, timeout: float = DEFAULT_START_TIMEOUT_SECONDS) -> None:
        """Block until every runner is idle (start-up, tests, benchmarks)."""
        with self._condition:
            if not self._condition.wait_for(lambda: len(self._idle) >= self.size, timeout):
                raise TimeoutError(f"{self.size - len(self._idle)} runner(s) not ready in time")

    def occupancy(self) -> tuple[int, int]:
        """(busy, idle): runners serving an execution or starting, and idle ones, now."""
        with self._condition:
            idle = len(self._idle)
            return len(self._all) - idle, idle

    def pids(self) -> list[int]:
        with self._condition:
            return sorted(runner.pid for runner in self._all)

    def close(self) -> None:
        """Stop every runner (closing stdin ends them; stragglers are killed) and wait."""
        with self._condition:
            self._closed = True
            runners = list(self._all)
            self._idle.clear()
            self._condition.notify_all()
        for runner in runners:
            stdin = runner.process.stdin
            if stdin is not None:
                with contextlib.suppress(OSError):
                    stdin.close()
        for runner in runners:
            try:
                runner.process.wait(timeout=2)
            except subprocess.TimeoutExpired:
                runner.kill()
                runner.process.wait()
        self._spawner.stop()  # last: its end would SIGKILL any runner still alive

    def __enter__(self) -> RunnerPool:
        return self

    def __exit__(self, *_exc: object) -> None:
        self.close()

    def run_code(
        self, source: str, options: Mapping[str, Any] | None = None, **kwargs: Any
    ) -> CodeExecution:
        """``sandbox.run_code`` on this pool (same arguments but ``pool``)."""
        from sandbox.execution import run_code

        return run_code(source, options, pool=self, **kwargs)

    # -- runner callbacks ---------------------------------------------------------------

    def _on_ready(self, runner: Runner) -> None:
        report = runner.confinement
        refused = dict(report["refused"]) if report is not None else None
        with self._condition:
            self.confinement = report
            first = refused != self._logged_refusals
            self._logged_refusals = refused
        if first and refused:
            logger.warning(
                "sandbox runners run without some of their limits (the platform refused): %s",
                "; ".join(f"{name}: {reason}" for name, reason in sorted(refused.items())),
            )
        self.release(runner)

    def _on_exit(self, runner: Runner) -> None:
        with self._condition:
            self._all.discard(runner)
            if runner in self._idle:
                self._idle.remove(runner)
            if self._closed:
                return
            # A runner that died before it was ever ready points at a broken install:
            # back off instead of spinning, up to MAX_RESPAWN_DELAY_SECONDS.
            self._failed_starts = 0 if runner.was_ready else self._failed_starts + 1
            delay = self._respawn_delay()
        self._spawner.call_later(self._respawn, delay)

    def _respawn_delay(self) -> float:
        if not self._failed_starts:
            return 0.0
        return min(MAX_RESPAWN_DELAY_SECONDS, 0.05 * 2.0**self._failed_starts)

    def _respawn(self) -> None:
        """On the spawner thread: start a replacement (Popen is quick; the newcomer joins
        the idle set once it says ready). A failed start is retried with back-off."""
        try:
            self._start_runner()
        except OSError:
            logger.exception("sandbox runner pool: could not start a runner")
            with self._condition:
                if self._closed:
                    return
                self._failed_starts += 1
                delay = self._respawn_delay()
            self._spawner.call_later(self._respawn, delay)

    def _start_all(self) -> None:
        for _ in range(self.size):
            self._start_runner()

    def _start_runner(self) -> None:
        with self._condition:
            if not self._closed:
                self._all.add(Runner(self))


def call_soon(function: Callable[[], None], delay: float) -> threading.Timer:
    """Run ``function`` after ``delay`` on a timer thread (never to start a runner: see
    ``_Spawner``)."""
    timer = threading.Timer(delay, function)
    timer.daemon = True
    timer.start()
    return timer

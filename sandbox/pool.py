"""A warm pool of runner processes that replaces any runner that dies or is killed.

Runners are started with ``subprocess`` (fork + exec of a fresh interpreter, never a
bare fork of this possibly threaded process) running ``python -m sandbox.runner``. A
runner joins the idle set once it has said ``ready``; each one serves one execution at a
time. ``kill`` is the SIGKILL backstop for guest code that ignores the interrupt handler
(a native sort, for example); the pool then starts a replacement in the background, so a
killed or crashed runner never shrinks the pool.
"""

from __future__ import annotations

import contextlib
import logging
import subprocess
import sys
import threading
from collections import deque
from collections.abc import Callable, Mapping
from pathlib import Path
from typing import TYPE_CHECKING, Any, Protocol

from sandbox import protocol

if TYPE_CHECKING:
    from sandbox.execution import CodeExecution

logger = logging.getLogger(__name__)
_PROJECT_ROOT = Path(__file__).resolve().parent.parent
DEFAULT_START_TIMEOUT_SECONDS = 30.0
MAX_RESPAWN_DELAY_SECONDS = 5.0


class Listener(Protocol):
    """The execution currently attached to a runner."""

    def on_message(self, runner: Runner, message: dict[str, Any]) -> None: ...

    def on_runner_lost(self, runner: Runner, returncode: int | None) -> None: ...


class PoolClosed(RuntimeError):
    pass


class Runner:
    """One runner process and the thread that reads its stdout."""

    def __init__(self, pool: RunnerPool) -> None:
        self.pool = pool
        self.listener: Listener | None = None
        self.killed = False
        self._write_lock = threading.Lock()
        self.process = subprocess.Popen(
            [sys.executable, "-m", "sandbox.runner"],
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

    def _read(self) -> None:
        stdout = self.process.stdout
        assert stdout is not None
        for line in stdout:
            try:
                message = protocol.loads(line)
            except ValueError:
                continue
            if message["type"] == "ready":
                self.was_ready = True
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


class RunnerPool:
    """``size`` warm runners; ``acquire`` blocks until one is idle.

    ``cancel_grace_seconds`` is how long a cancelled runner may take to stop by itself
    before it is killed and replaced (``terminate()`` on an execution).
    """

    def __init__(self, size: int, *, cancel_grace_seconds: float = 0.02) -> None:
        if size < 1:
            raise ValueError("a runner pool needs at least one runner")
        self.size = size
        self.cancel_grace_seconds = cancel_grace_seconds
        self._condition = threading.Condition()
        self._idle: deque[Runner] = deque()
        self._all: set[Runner] = set()
        self._closed = False
        self._failed_starts = 0
        with self._condition:
            for _ in range(size):
                self._all.add(Runner(self))

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
            failed = self._failed_starts
        if failed:
            delay = min(MAX_RESPAWN_DELAY_SECONDS, 0.05 * 2**failed)
            call_soon(self._respawn, delay)
        else:
            self._respawn()

    def _respawn(self) -> None:
        with self._condition:
            if not self._closed:
                # Popen is quick; the newcomer joins the idle set once it says ready.
                self._all.add(Runner(self))


def call_soon(function: Callable[[], None], delay: float) -> threading.Timer:
    timer = threading.Timer(delay, function)
    timer.daemon = True
    timer.start()
    return timer

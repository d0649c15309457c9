"""Helpers shared by the sandbox tests: a real runner pool and a bounded wait."""

from __future__ import annotations

import time
from collections.abc import Callable, Iterator, Mapping
from typing import Any

from sandbox import CodeExecution, CodeExecutionResult, RunnerPool

SETTLE_TIMEOUT = 30.0  # a bound for a hung test, not a latency assertion


def pool_of(size: int) -> Iterator[RunnerPool]:
    """A warm pool that is closed, with every runner process ended, afterwards."""
    pool = RunnerPool(size)
    seen: set[int] = set()
    try:
        pool.wait_ready()
        yield pool
    finally:
        seen.update(pool.pids())
        pool.close()
        for pid in seen:
            assert not _alive(pid), f"runner {pid} outlived its pool"


def run(
    pool: RunnerPool, source: str, options: Mapping[str, Any] | None = None, **kwargs: Any
) -> CodeExecutionResult:
    return pool.run_code(source, options, **kwargs).result(timeout=SETTLE_TIMEOUT)


def wait_for(condition: Callable[[], object], timeout: float = SETTLE_TIMEOUT) -> None:
    deadline = time.monotonic() + timeout
    while not condition():
        if time.monotonic() > deadline:
            raise TimeoutError("condition not met in time")
        time.sleep(0.002)


def started(execution: CodeExecution) -> bool:
    return execution.runner_pid is not None


def _alive(pid: int) -> bool:
    import os

    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    # A zombie still answers kill(0); its parent has reaped it when waitpid says so.
    try:
        finished, _ = os.waitpid(pid, os.WNOHANG)
    except ChildProcessError:
        return False
    return finished == 0

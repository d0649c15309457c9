"""The runner pool: warm runners, healing after crashes and kills, terminate backstop."""

from __future__ import annotations

import os
import signal
import threading
import time
from collections.abc import Iterator
from pathlib import Path

import pytest

from sandbox import RunnerPool
from sandbox.pool import PoolClosed
from tests.sandbox.support import SETTLE_TIMEOUT, pool_of, run, wait_for

MiB = 1024 * 1024
# A native typed-array sort: QuickJS does not poll the interrupt handler inside it.
NATIVE_SORT = """
const a = new Float64Array(5e6);
for (let i = 0; i < a.length; i++) a[i] = (i * 7919) % 1000003;
report('sorting');
a.sort();
export default 'sorted';
"""


@pytest.fixture
def pool() -> Iterator[RunnerPool]:
    yield from pool_of(2)


def _healed(pool: RunnerPool, gone: int) -> bool:
    pids = pool.pids()
    return gone not in pids and len(pids) == pool.size


def test_a_runner_killed_mid_call_settles_the_call_and_the_pool_heals(pool: RunnerPool) -> None:
    execution = pool.run_code("while (true) {}")
    wait_for(lambda: execution.runner_pid is not None)
    pid = execution.runner_pid
    assert pid is not None

    os.kill(pid, signal.SIGKILL)
    outcome = execution.result(timeout=SETTLE_TIMEOUT)

    assert outcome.status == "error"
    assert outcome.error is not None
    assert outcome.error.name == "RunnerLost"
    wait_for(lambda: _healed(pool, pid))
    pool.wait_ready()
    assert [run(pool, f"export default {i}").result for i in range(4)] == [0, 1, 2, 3]


def test_a_runner_killed_while_its_guest_awaits_the_host_settles_the_call(pool: RunnerPool) -> None:
    entered, release = threading.Event(), threading.Event()

    def slow() -> str:
        entered.set()
        release.wait(SETTLE_TIMEOUT)
        return "late"

    execution = pool.run_code("export default await slow();", {"globals": {"slow": slow}})
    assert entered.wait(SETTLE_TIMEOUT)
    pid = execution.runner_pid
    assert pid is not None
    os.kill(pid, signal.SIGKILL)

    outcome = execution.result(timeout=SETTLE_TIMEOUT)
    release.set()

    assert outcome.status == "error"
    wait_for(lambda: _healed(pool, pid))


def test_terminate_stops_a_tight_loop_through_the_interrupt_and_keeps_the_runner(
    pool: RunnerPool,
) -> None:
    before = pool.pids()
    execution = pool.run_code("while (true) {}")
    wait_for(lambda: execution.runner_pid is not None)
    time.sleep(0.02)

    started = time.perf_counter()
    execution.terminate()
    outcome = execution.result(timeout=SETTLE_TIMEOUT)

    assert outcome.status == "terminated"
    assert time.perf_counter() - started < 1.0  # precise latency: `make bench`
    pool.wait_ready()
    assert pool.pids() == before  # cancelled in time, so not killed


def test_terminate_kills_and_replaces_a_runner_stuck_in_a_native_sort(pool: RunnerPool) -> None:
    sorting = threading.Event()
    execution = pool.run_code(
        NATIVE_SORT, {"memoryLimitBytes": 128 * MiB, "report": lambda _value: sorting.set()}
    )
    assert sorting.wait(SETTLE_TIMEOUT)
    pid = execution.runner_pid
    assert pid is not None
    time.sleep(0.02)

    started = time.perf_counter()
    execution.terminate("sort took too long")
    outcome = execution.result(timeout=SETTLE_TIMEOUT)

    assert outcome.status == "terminated"
    assert time.perf_counter() - started < 1.0
    wait_for(lambda: _healed(pool, pid))  # the SIGKILL backstop fired and was replaced
    pool.wait_ready()
    assert run(pool, "export default 'fresh'").result == "fresh"


def test_runners_inherit_no_host_environment(pool: RunnerPool) -> None:
    for pid in pool.pids():
        assert Path(f"/proc/{pid}/environ").read_bytes() == b""


def test_more_calls_than_runners_wait_their_turn(pool: RunnerPool) -> None:
    executions = [pool.run_code(f"export default {i} * 2") for i in range(8)]

    assert [e.result(timeout=SETTLE_TIMEOUT).result for e in executions] == [
        i * 2 for i in range(8)
    ]


def test_terminating_a_queued_call_never_reaches_a_runner(pool: RunnerPool) -> None:
    busy = [pool.run_code("while (true) {}") for _ in range(pool.size)]
    queued = pool.run_code("export default 'ran'")
    queued.terminate("not needed")

    assert queued.result(timeout=SETTLE_TIMEOUT).status == "terminated"
    assert queued.runner_pid is None
    for execution in busy:
        execution.terminate()
    pool.wait_ready()


def test_close_ends_every_runner_and_refuses_waiting_calls() -> None:
    pool = RunnerPool(1)
    pool.wait_ready()
    pids = pool.pids()
    blocker = pool.run_code("while (true) {}")
    waiting = pool.run_code("export default 1")

    pool.close()

    assert waiting.result(timeout=SETTLE_TIMEOUT).status == "error"
    assert blocker.result(timeout=SETTLE_TIMEOUT).status == "error"
    for pid in pids:
        with pytest.raises(ChildProcessError):
            os.waitpid(pid, os.WNOHANG)
    with pytest.raises(PoolClosed):
        pool.acquire(timeout=0)

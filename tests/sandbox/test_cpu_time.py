"""Each execution reports the CPU time its runner spent on it: ``cpuMs`` in the ``done``
message, ``cpu_ms`` on the result and ``CodeExecution.cpu_ms()``, also after a terminate."""

from __future__ import annotations

import subprocess
import sys
import time
from collections.abc import Iterator
from typing import Any

import pytest

from sandbox import RunnerPool
from sandbox.options import prepare
from sandbox.protocol import dumps, loads
from tests.sandbox.support import SETTLE_TIMEOUT, pool_of, run, started, wait_for

# About 50 ms of CPU (a fixed amount of work: a busy machine stretches its wall time only).
BUSY = "let n = 0; for (let i = 0; i < 1e6; i++) { n = (n + i) % 1000003; } export default n;"


@pytest.fixture
def pool() -> Iterator[RunnerPool]:
    yield from pool_of(1)


def test_a_busy_call_reports_its_cpu_time_and_an_empty_one_little(pool: RunnerPool) -> None:
    busy = run(pool, BUSY)
    empty = run(pool, "export default 1")

    assert busy.status == "success"
    assert 10 < busy.cpu_ms < 5_000
    assert 0 <= empty.cpu_ms < busy.cpu_ms


def test_the_handle_knows_the_cpu_time_of_a_terminated_call_once_its_runner_stopped(
    pool: RunnerPool,
) -> None:
    execution = pool.run_code("while (true) {}")
    wait_for(lambda: started(execution))
    time.sleep(0.05)  # the guest spins on the runner
    execution.terminate("enough")

    result = execution.result(timeout=SETTLE_TIMEOUT)

    assert (result.status, result.cpu_ms) == ("terminated", 0.0)  # settled before the runner
    assert execution.cpu_ms(timeout=SETTLE_TIMEOUT) > 0


def test_a_call_that_never_reached_a_runner_costs_nothing(pool: RunnerPool) -> None:
    execution = pool.run_code("export default 1", {"language": "cobol"})

    assert execution.result(timeout=SETTLE_TIMEOUT).status == "link_error"
    assert execution.cpu_ms(timeout=0) == 0.0


def test_the_ids_of_executions_are_unique_beyond_one_process(pool: RunnerPool) -> None:
    first, second = pool.run_code("export default 1"), pool.run_code("export default 2")

    assert first.id != second.id
    assert len(first.id) == 33  # "x" and a uuid's 32 hex digits
    first.result(timeout=SETTLE_TIMEOUT), second.result(timeout=SETTLE_TIMEOUT)


def test_the_done_message_carries_the_runners_cpu_ms() -> None:
    """The runner's wire: ``done`` carries ``cpuMs`` (an optional field) beside
    ``durationMs``."""
    runner = subprocess.Popen(
        [sys.executable, "-m", "sandbox.runner"], stdin=subprocess.PIPE, stdout=subprocess.PIPE
    )
    assert runner.stdin is not None
    assert runner.stdout is not None
    try:
        runner.stdin.write(dumps({"type": "execute", "id": "e1",
                                  "payload": prepare(BUSY, None).payload}))  # fmt: skip
        runner.stdin.flush()
        messages: list[dict[str, Any]] = []
        while not messages or messages[-1]["type"] != "done":
            messages.append(loads(runner.stdout.readline()))
    finally:
        runner.kill()
        runner.wait()
    done = messages[-1]
    assert [message["type"] for message in messages] == ["ready", "started", "done"]
    assert (done["id"], done["status"]) == ("e1", "success")
    assert 10 < done["cpuMs"] < 5_000

"""Runners cannot outlive or outgrow their host: parent death, OS limits, CPU budget."""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
import threading
import time
from collections.abc import Iterator
from pathlib import Path

import pytest

from sandbox import RunnerPool
from sandbox.confine import watch_parent
from tests.sandbox.support import SETTLE_TIMEOUT, pool_of, run, wait_for

MiB = 1024 * 1024
_PROJECT_ROOT = Path(__file__).resolve().parents[2]
# A naive substring search QuickJS runs in C without polling its interrupt handler: over
# half a minute of CPU on an 8 MiB string, so only a kill ends it within SETTLE_TIMEOUT.
UNINTERRUPTIBLE = "export default 'a'.repeat(2 ** 23).indexOf('a'.repeat(2 ** 11) + 'b');"


def _gone(pid: int) -> bool:
    """No such process, or a zombie waiting for whoever adopted it to reap it."""
    try:
        return Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()[0] == "Z"
    except (FileNotFoundError, ProcessLookupError):
        return True


def _status(pid: int, field: str) -> str:
    for line in Path(f"/proc/{pid}/status").read_text().splitlines():
        name, _, value = line.partition(":")
        if name == field:
            return value.strip()
    raise LookupError(field)


def _limit(pid: int, name: str) -> str:
    """The soft value of one row of /proc/<pid>/limits ("Max address space", ...)."""
    for line in Path(f"/proc/{pid}/limits").read_text().splitlines():
        if line.startswith(name):
            return line[len(name) :].split()[0]
    raise LookupError(name)


@pytest.fixture
def orphan_host() -> Iterator[list[subprocess.Popen[bytes]]]:
    hosts: list[subprocess.Popen[bytes]] = []
    yield hosts
    for host in hosts:
        if host.poll() is None:
            host.kill()
        host.wait()


def _kill_host_and_time_the_orphan(
    mode: str, hosts: list[subprocess.Popen[bytes]]
) -> tuple[float, str]:
    host = subprocess.Popen(
        [sys.executable, "-m", "tests.sandbox.orphan_host", mode],
        stdout=subprocess.PIPE,
        cwd=_PROJECT_ROOT,
    )
    hosts.append(host)
    assert host.stdout is not None
    announced = json.loads(host.stdout.readline())
    runner, holder = announced["runner"], announced["holder"]
    try:
        time.sleep(0.1)  # spinning in the guest now
        assert not _gone(runner)
        os.kill(host.pid, signal.SIGKILL)
        host.wait()
        killed_at = time.monotonic()
        wait_for(lambda: _gone(runner), timeout=5)
        return time.monotonic() - killed_at, announced["parent_death"]
    finally:
        os.kill(holder, signal.SIGKILL)
        if not _gone(runner):
            os.kill(runner, signal.SIGKILL)


def test_a_runner_spinning_in_guest_code_dies_with_its_killed_host(
    orphan_host: list[subprocess.Popen[bytes]],
) -> None:
    """kill -9 of the host while its runner spins in for(;;){}: the kernel ends the runner
    (PR_SET_PDEATHSIG), though its stdin is still held open elsewhere."""
    seconds, parent_death = _kill_host_and_time_the_orphan("pool", orphan_host)

    assert parent_death == "prctl(PR_SET_PDEATHSIG, SIGKILL)"
    assert seconds < 2


def test_without_prctl_a_watchdog_thread_ends_the_spinning_orphan(
    orphan_host: list[subprocess.Popen[bytes]],
) -> None:
    """The fallback works while QuickJS spins because the binding releases the GIL."""
    seconds, parent_death = _kill_host_and_time_the_orphan("watchdog", orphan_host)

    assert parent_death == "watchdog thread"
    assert seconds < 2


def test_the_watchdog_acts_when_the_parent_is_not_the_expected_one() -> None:
    orphaned = threading.Event()

    watch_parent(os.getppid() + 1, interval=0.01, on_orphaned=orphaned.set)

    assert orphaned.wait(SETTLE_TIMEOUT)


def test_runners_outlive_the_short_lived_thread_that_built_their_pool() -> None:
    """PR_SET_PDEATHSIG fires when the forking *thread* ends: the pool forks from its own."""
    built: list[RunnerPool] = []

    def build() -> None:
        pool = RunnerPool(2)
        pool.wait_ready()  # every runner has armed its parent-death signal
        built.append(pool)

    thread = threading.Thread(target=build)
    thread.start()
    thread.join()
    (pool,) = built
    try:
        pids = pool.pids()
        time.sleep(0.3)

        assert [_gone(pid) for pid in pids] == [False, False]
        assert run(pool, "export default 'alive'").result == "alive"
        assert pool.pids() == pids
    finally:
        pool.close()


def test_a_replacement_runner_outlives_the_reader_thread_of_the_runner_it_replaces() -> None:
    with RunnerPool(1) as pool:
        pool.wait_ready()
        (dead,) = pool.pids()
        os.kill(dead, signal.SIGKILL)
        wait_for(lambda: pool.pids() not in ([], [dead]))
        pool.wait_ready()
        (replacement,) = pool.pids()
        time.sleep(0.3)  # the dead runner's reader thread has long ended

        assert not _gone(replacement)
        assert run(pool, "export default 2").result == 2
        assert pool.pids() == [replacement]


def test_a_runner_whose_stdin_closes_mid_execution_exits() -> None:
    with RunnerPool(1) as pool:
        pool.wait_ready()
        execution = pool.run_code("for (;;) {}")
        wait_for(lambda: execution.runner_pid is not None)
        (runner,) = pool._all
        assert runner.process.stdin is not None

        runner.process.stdin.close()

        assert runner.process.wait(timeout=SETTLE_TIMEOUT) == 0
        assert execution.result(timeout=SETTLE_TIMEOUT).status == "error"


def test_runners_report_the_limits_they_applied_and_the_kernel_holds_them() -> None:
    with RunnerPool(1, cpu_limit_seconds=7, address_space_limit_mb=700) as pool:
        pool.wait_ready()
        (pid,) = pool.pids()
        report = pool.confinement
        assert report is not None
        applied, refused = report["applied"], report["refused"]

        assert applied["cpu_seconds"] == 7.0
        # Soft RLIMIT_CPU: CPU used so far + the budget + a one-second margin, rounded up.
        used = sum(int(t) for t in Path(f"/proc/{pid}/stat").read_text().split()[13:15])
        used_seconds = used / os.sysconf("SC_CLK_TCK")
        assert 7 + 1 < int(_limit(pid, "Max cpu time")) <= 7 + 1 + used_seconds + 1
        assert applied["address_space_bytes"] == 700 * MiB
        assert _limit(pid, "Max address space") == str(700 * MiB)
        assert applied["core_bytes"] == 0
        assert _limit(pid, "Max core file size") == "0"
        assert applied["parent_death"] == "prctl(PR_SET_PDEATHSIG, SIGKILL)"
        assert applied["no_new_privs"] is True
        assert _status(pid, "NoNewPrivs") == "1"
        # Platform-dependent: each is either applied or refused with a reason.
        for name in ("network", "file_size_bytes"):
            assert (name in applied) != (name in refused)
        if "file_size_bytes" in applied:
            assert _limit(pid, "Max file size") == "0"


def test_a_runner_has_no_network_when_the_platform_allows_it() -> None:
    with RunnerPool(1) as pool:
        pool.wait_ready()
        (pid,) = pool.pids()
        assert pool.confinement is not None
        if "network" not in pool.confinement["applied"]:
            pytest.skip(f"network isolation refused: {pool.confinement['refused']['network']}")

        assert os.readlink(f"/proc/{pid}/ns/net") != os.readlink("/proc/self/ns/net")
        # Only a loopback (and it is down), no route: nothing to reach anything with.
        interfaces = Path(f"/proc/{pid}/net/dev").read_text().splitlines()[2:]
        assert [line.split(":")[0].strip() for line in interfaces] == ["lo"]
        assert Path(f"/proc/{pid}/net/route").read_text().count("\n") <= 1


def test_a_guest_past_its_cpu_limit_is_interrupted_and_its_runner_kept() -> None:
    with RunnerPool(1, cpu_limit_seconds=0.3) as pool:
        pool.wait_ready()
        before = pool.pids()

        outcome = run(pool, "for (;;) {}")

        assert outcome.status == "terminated"
        assert outcome.error is not None
        assert outcome.error.message == (
            "the call used more than its CPU time limit of 0.3 s (a safety cap of the sandbox)"
        )
        assert run(pool, "export default 'next'").result == "next"
        assert pool.pids() == before


def test_a_guest_past_its_cpu_limit_in_uninterruptible_code_is_killed_and_replaced() -> None:
    """RLIMIT_CPU: the kernel ends the runner a margin past the budget; the pool heals."""
    with RunnerPool(1, cpu_limit_seconds=0.5) as pool:
        pool.wait_ready()
        (pid,) = pool.pids()

        outcome = run(pool, UNINTERRUPTIBLE, {"language": "javascript"})

        assert outcome.status == "terminated"
        assert outcome.error is not None
        assert outcome.error.message.startswith(
            "the call used more than its CPU time limit of 0.5 s in code that cannot be "
            "interrupted; the kernel stopped its runner"
        )
        wait_for(lambda: pool.pids() not in ([], [pid]))
        pool.wait_ready()
        assert run(pool, "export default 'healed'").result == "healed"


@pytest.fixture
def small_pool() -> Iterator[RunnerPool]:
    pool = RunnerPool(1, address_space_limit_mb=384)
    try:
        pool.wait_ready()
        yield pool
    finally:
        pool.close()


def test_the_address_space_limit_bounds_a_runner_below_the_guest_heap_limit(
    small_pool: RunnerPool,
) -> None:
    """A 250 MiB buffer fits the 256 MiB heap limit but not a 384 MiB runner: `memory`,
    and the runner goes on serving."""
    source = "export default new ArrayBuffer(250 * 1024 * 1024).byteLength;"
    before = small_pool.pids()

    outcome = run(small_pool, source, {"memoryLimitBytes": 256 * MiB})

    assert outcome.status == "memory"
    assert run(small_pool, "export default 1").result == 1
    assert small_pool.pids() == before
    for pool in pool_of(1):  # the default address space holds the same buffer
        assert run(pool, source, {"memoryLimitBytes": 256 * MiB}).result == 250 * MiB


@pytest.mark.parametrize(
    ("arguments", "words"),
    [
        ({"cpu_limit_seconds": 0}, "cpu_limit_seconds"),
        ({"address_space_limit_mb": 64}, "address_space_limit_mb must be at least 320"),
    ],
)
def test_limits_a_runner_could_not_start_under_are_refused(
    arguments: dict[str, float], words: str
) -> None:
    with pytest.raises(ValueError, match=words):
        RunnerPool(1, **arguments)  # type: ignore[arg-type]

"""``make run``'s supervisor: a process that exits is started again after its backoff."""

from __future__ import annotations

import os
import signal
import sys
import time

from config import env
from config.launcher import Supervisor

SLEEPER = [sys.executable, "-c", "import time; time.sleep(60)"]
CRASHER = [sys.executable, "-c", "raise SystemExit(3)"]


def _restarted(supervisor: Supervisor, name: str, times: int, timeout: float = 10.0) -> None:
    """Run the supervisor's checks until ``name`` has been restarted ``times`` times."""
    deadline = time.monotonic() + timeout
    while supervisor.restarts[name] < times:
        assert time.monotonic() < deadline, f"{name} not restarted {times} times"
        supervisor.check()
        time.sleep(0.05)


def test_a_killed_process_is_started_again_after_its_backoff() -> None:
    supervisor = Supervisor({"worker": SLEEPER, "beat": SLEEPER}, env.child_environment({}),
                            backoff_s=[0.3], stable_after_s=60)  # fmt: skip
    supervisor.start_all()
    try:
        killed = supervisor.processes["worker"]
        beat = supervisor.processes["beat"]
        os.kill(killed.pid, signal.SIGKILL)
        killed.wait()
        supervisor.check()  # sees the exit, schedules the restart
        assert supervisor.processes["worker"] is killed
        _restarted(supervisor, "worker", 1)
        assert supervisor.processes["worker"].pid != killed.pid
        assert supervisor.processes["worker"].poll() is None
        assert supervisor.processes["beat"] is beat, "a healthy process is left alone"
    finally:
        supervisor.stop()
    assert all(process.poll() is not None for process in supervisor.processes.values())


def test_a_crash_loop_backs_off_longer_each_time() -> None:
    supervisor = Supervisor({"worker": CRASHER}, env.child_environment({}),
                            backoff_s=[0.1, 0.6], stable_after_s=60)  # fmt: skip
    supervisor.start_all()
    try:
        _restarted(supervisor, "worker", 1)
        first = time.monotonic()
        _restarted(supervisor, "worker", 2)
        assert time.monotonic() - first >= 0.6, "the second restart waits the longer backoff"
    finally:
        supervisor.stop()

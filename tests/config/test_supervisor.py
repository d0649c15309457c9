"""``make run``'s supervisor: a process that exits is started again after its backoff, the
shortest when it had been up; a hung one is killed by its watchdog (beat's heartbeat) and
restarted; a worker's exit sends the takeover sweeps."""

from __future__ import annotations

import datetime as dt
import json
import os
import signal
import socket
import sys
import time
from collections.abc import Iterator
from pathlib import Path
from typing import cast

import pytest
import redis
from django.conf import settings

from config import env
from config.beat_watch import BeatWatchdog, heartbeat_key, redis_client
from config.launcher import Supervisor, TakeoverSweeps
from tests.worker import private_queue, queue_delete

SLEEPER = [sys.executable, "-c", "import time; time.sleep(60)"]
CRASHER = [sys.executable, "-c", "raise SystemExit(3)"]
# Says it takes work (a worker's ready mark), then crashes.
UP_THEN_CRASHES = [sys.executable, "-c", "import time; print(' ready.', flush=True); "
                   "time.sleep(0.2); raise SystemExit(3)"]  # fmt: skip


def _beater(queue: str) -> list[str]:
    """A process that writes beat's heartbeat every 0.1 s, as beat's loop does."""
    code = (
        "import time; from config.beat_watch import heartbeat_write, redis_client\n"
        f"client = redis_client({settings.REDIS_URL!r})\n"
        f"while True:\n    heartbeat_write(client, queue={queue!r}); time.sleep(0.1)\n"
    )
    return [sys.executable, "-c", code]


def _restarted(supervisor: Supervisor, name: str, times: int, timeout: float = 10.0) -> None:
    """Run the supervisor's checks until ``name`` has been restarted ``times`` times."""
    deadline = time.monotonic() + timeout
    while supervisor.restarts[name] < times:
        assert time.monotonic() < deadline, f"{name} not restarted {times} times"
        supervisor.check()
        time.sleep(0.05)


@pytest.fixture
def queue() -> Iterator[str]:
    name = private_queue()
    yield name
    client = redis_client(settings.REDIS_URL)
    client.delete(heartbeat_key(name))


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


def test_a_crash_after_the_process_was_up_is_restarted_after_the_first_backoff_each_time(
    tmp_path: Path,
) -> None:
    """Crashes seconds apart are not a crash loop when the process said it takes work."""
    exits: list[str] = []
    supervisor = Supervisor({"worker-1": UP_THEN_CRASHES}, env.child_environment({}),
                            backoff_s=[0.1, 30], stable_after_s=60, log_dir=tmp_path,
                            on_exit=exits.append)  # fmt: skip
    supervisor.start_all()
    try:
        _restarted(supervisor, "worker-1", 3, timeout=20)
    finally:
        supervisor.stop()
    assert exits == ["worker-1"] * 3


def test_a_process_whose_heartbeat_stops_is_killed_and_restarted(queue: str) -> None:
    watchdog = BeatWatchdog(redis_client(settings.REDIS_URL), queue=queue, stale_after_s=1.0,
                            start_grace_s=20, read_every_s=0.1)  # fmt: skip
    supervisor = Supervisor({"beat": _beater(queue)}, env.child_environment({}), backoff_s=[0.1],
                            stable_after_s=0, watchdogs={"beat": watchdog})  # fmt: skip
    supervisor.start_all()
    try:
        hung = supervisor.processes["beat"]
        for _ in range(30):  # beating: left alone
            supervisor.check()
            time.sleep(0.1)
        assert supervisor.kills["beat"] == 0
        assert supervisor.processes["beat"] is hung
        os.kill(hung.pid, signal.SIGSTOP)
        stopped = time.monotonic()
        _restarted(supervisor, "beat", 1)
        assert time.monotonic() - stopped < 1.0 + 1.0
        assert hung.returncode == -signal.SIGKILL
        assert supervisor.kills["beat"] == 1
    finally:
        supervisor.stop()


def test_a_process_that_never_beats_is_killed_after_its_start_grace(queue: str) -> None:
    watchdog = BeatWatchdog(redis_client(settings.REDIS_URL), queue=queue, stale_after_s=0.5,
                            start_grace_s=1.5, read_every_s=0.1)  # fmt: skip
    supervisor = Supervisor({"beat": SLEEPER}, env.child_environment({}), backoff_s=[0.1],
                            watchdogs={"beat": watchdog})  # fmt: skip
    supervisor.start_all()
    started = time.monotonic()
    try:
        _restarted(supervisor, "beat", 1)
    finally:
        supervisor.stop()
    assert 1.5 <= time.monotonic() - started < 3


def test_a_watchdog_judges_nothing_while_redis_is_unreachable() -> None:
    with socket.socket() as probe:
        probe.bind(("127.0.0.1", 0))
        closed = probe.getsockname()[1]
    watchdog = BeatWatchdog(redis_client(f"redis://127.0.0.1:{closed}/0"), queue="q",
                            stale_after_s=0.1, start_grace_s=0.1, read_every_s=0)  # fmt: skip
    started = time.monotonic()
    time.sleep(0.3)
    assert watchdog.problem(pid=os.getpid(), started_at=started) is None


def test_a_workers_exit_sends_sweeps_across_the_moments_its_locks_expire() -> None:
    queue = private_queue()
    sweeps = TakeoverSweeps(settings.REDIS_URL, queue=queue, lock_ttl_s=4.0)
    client = redis.Redis.from_url(settings.REDIS_URL)
    try:
        sweeps("beat")
        sweeps("web")
        assert client.llen(queue) == 0, "only a worker's exit sends sweeps"
        sent_at = time.time()
        sweeps("worker-2")
        messages = [json.loads(raw) for raw in cast(list[bytes], client.lrange(queue, 0, -1))]
    finally:
        queue_delete(queue)
    assert sweeps.countdowns_s == [2.67, 3.17, 3.67, 4.1]
    assert [message["headers"]["task"] for message in messages] == ["threads.sweep_threads"] * 4
    etas = sorted(dt.datetime.fromisoformat(m["headers"]["eta"]).timestamp() for m in messages)
    for eta, countdown in zip(etas, sweeps.countdowns_s, strict=True):
        assert countdown <= eta - sent_at < countdown + 0.5

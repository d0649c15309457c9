"""Idle cost: the CPU a worker and beat use with nothing to do.

A worker (threads pool, the project's worker options) and beat start as ``make run`` starts
them, on a queue of their own (``CELERY_QUEUE``) against the configured PostgreSQL and Redis;
once both run and have settled, each one's CPU (user plus system time of the process and its
children, from ``/proc/<pid>/stat``) is read over :data:`WINDOW_S` of wall time. The target
is beat plus worker at most :data:`TARGET_PERCENT` % of one core.
"""

from __future__ import annotations

import contextlib
import os
import subprocess
import sys
import tempfile
import time
import uuid
from collections.abc import Iterator, Sequence
from pathlib import Path

from bench.harness import Row, benchmark

WINDOW_S = 60.0
SETTLE_S = 10.0
START_TIMEOUT_S = 90.0
TARGET_PERCENT = 0.5
_TICKS_PER_S = os.sysconf("SC_CLK_TCK")


@benchmark("idle")
def idle() -> Sequence[Row]:
    with _processes() as pids:
        time.sleep(SETTLE_S)
        before = {name: _cpu_s(pid) for name, pid in pids.items()}
        started = time.monotonic()
        time.sleep(WINDOW_S)
        elapsed = time.monotonic() - started
        after = {name: _cpu_s(pid) for name, pid in pids.items()}
    percent = {name: 100 * (after[name] - before[name]) / elapsed for name in pids}
    percent["beat + worker"] = percent["beat"] + percent["worker"]
    rows = []
    for name, value in percent.items():
        met = "met" if value <= TARGET_PERCENT else "MISSED"
        total = "+" in name
        row = Row(
            benchmark="idle", case=f"{name}, idle {elapsed:.0f} s", samples=1,
            p50_ms=0.0, p95_ms=0.0, p99_ms=0.0, per_second=0.0,
            target=f"beat + worker <= {TARGET_PERCENT:g} % of a core" if total else "",
            measured=f"{value:.2f} % of a core" + (f" ({met})" if total else ""),
            notes={"cpu_percent": round(value, 3), "window_s": round(elapsed, 1)},
        )  # fmt: skip
        rows.append(row)
    return rows


def _cpu_s(pid: int) -> float:
    """User plus system CPU seconds of ``pid`` and of every process below it."""
    total = 0.0
    for stat in Path("/proc").glob("[0-9]*/stat"):
        with contextlib.suppress(OSError):
            fields = stat.read_text().rsplit(")", 1)[1].split()
            process, parent = int(stat.parent.name), int(fields[1])
            if process == pid or _descends(parent, pid):
                total += (int(fields[11]) + int(fields[12])) / _TICKS_PER_S
    return total


def _descends(process: int, ancestor: int) -> bool:
    while process > 1:
        if process == ancestor:
            return True
        try:
            process = int(Path(f"/proc/{process}/stat").read_text().rsplit(")", 1)[1].split()[1])
        except OSError:
            return False
    return False


@contextlib.contextmanager
def _processes() -> Iterator[dict[str, int]]:
    """A worker and beat on a queue of their own, until the block ends: ``{name: pid}``."""
    from config import env
    from config.celery import WORKER_OPTIONS

    queue = f"bench-idle-{uuid.uuid4().hex[:8]}"
    directory = Path(tempfile.mkdtemp(prefix="bench-idle-"))
    environment = env.child_environment({"CELERY_QUEUE": queue, "PYTHONUNBUFFERED": "1"})
    commands = {
        "worker": [sys.executable, "-m", "celery", "-A", "config", "worker", "--pool", "threads",
                   "--hostname", f"{queue}@%h", "--loglevel", "INFO", *WORKER_OPTIONS],
        "beat": [sys.executable, "-m", "celery", "-A", "config", "beat", "--loglevel", "INFO",
                 "--schedule", str(directory / "celerybeat-schedule")],
    }  # fmt: skip
    marks = {"worker": " ready.", "beat": "beat: started"}
    started: dict[str, subprocess.Popen[bytes]] = {}
    try:
        for name, command in commands.items():
            with (directory / f"{name}.log").open("wb") as log:
                started[name] = subprocess.Popen(
                    command, cwd=env.REPO_DIR, env=environment, stdout=log,
                    stderr=subprocess.STDOUT,
                )  # fmt: skip
        deadline = time.monotonic() + START_TIMEOUT_S
        for name, process in started.items():
            log_path = directory / f"{name}.log"
            while marks[name] not in log_path.read_text(errors="replace"):
                if process.poll() is not None or time.monotonic() > deadline:
                    raise RuntimeError(f"{name} did not start:\n{log_path.read_text()[-3000:]}")
                time.sleep(0.2)
        yield {name: process.pid for name, process in started.items()}
    finally:
        for process in started.values():
            process.terminate()
        for process in started.values():
            try:
                process.wait(timeout=30)
            except subprocess.TimeoutExpired:
                process.kill()

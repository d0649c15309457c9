"""``make run`` itself (``python -m config.launcher``), against the test database and Redis:
its banner is the last thing it prints and comes once everything takes work (the first
message right after it is answered), the processes (two workers) write to ``var/log/``
without beat's sweeps at INFO but with beat's lifecycle, and a second run keeps what the
tenant changed in the demo."""

from __future__ import annotations

import json
import signal
import socket
import subprocess
import sys
import threading
import time
import urllib.request
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

from config import env
from config.launcher import _check_port_free
from tests.support import current_database_url
from tests.worker import private_queue

pytestmark = pytest.mark.django_db(transaction=True)

BANNER_END = "Press Ctrl-C to stop."
START_TIMEOUT_S = 120.0
FIRST_ANSWER_S = 10.0


class Run:
    """One ``python -m config.launcher``: its stdout lines as they come."""

    def __init__(self, environment: dict[str, str]) -> None:
        self.lines: list[str] = []
        self.process = subprocess.Popen(
            [sys.executable, "-m", "config.launcher"], cwd=env.REPO_DIR, env=environment,
            stdout=subprocess.PIPE, stderr=subprocess.DEVNULL, text=True,
        )  # fmt: skip
        threading.Thread(target=self._read, daemon=True).start()

    def _read(self) -> None:
        assert self.process.stdout is not None
        for line in self.process.stdout:
            self.lines.append(line.rstrip("\n"))

    def wait_banner(self) -> str:
        deadline = time.monotonic() + START_TIMEOUT_S
        while BANNER_END not in self.lines:
            if self.process.poll() is not None or time.monotonic() > deadline:
                raise AssertionError("no banner:\n" + "\n".join(self.lines))
            time.sleep(0.1)
        key_line = next(line for line in self.lines if "API key:" in line)
        return key_line.split("API key:")[1].strip()

    def stop(self) -> None:
        if self.process.poll() is None:
            self.process.send_signal(signal.SIGINT)
            try:
                self.process.wait(timeout=60)
            except subprocess.TimeoutExpired:
                self.process.kill()
                self.process.wait()


@pytest.fixture
def environment(tmp_path: Path) -> dict[str, str]:
    port = _free_port()
    return env.child_environment({
        "DATABASE_URL": current_database_url(), "PORT": str(port), "HOST": "127.0.0.1",
        "PLATFORM_VAR_DIR": str(tmp_path / "var"), "CELERY_QUEUE": private_queue(),
        "WEB_PROCESSES": "1", "CELERY_CONCURRENCY": "2", "OPENAI_API_KEY": "",
        "OPENAI_BASE_URL": "", "ANTHROPIC_API_KEY": "",
    })  # fmt: skip


def _free_port() -> int:
    with socket.socket() as probe:
        probe.bind(("127.0.0.1", 0))
        port: int = probe.getsockname()[1]
    _check_port_free("127.0.0.1", port)
    return port


@pytest.fixture
def runs(environment: dict[str, str]) -> Iterator[list[Run]]:
    started: list[Run] = []
    yield started
    for run in started:
        run.stop()


def _call(base: str, key: str, method: str, path: str, body: Any = None) -> Any:
    request = urllib.request.Request(  # noqa: S310 - the run's own http://127.0.0.1 URL
        f"{base}{path}", method=method, data=None if body is None else json.dumps(body).encode(),
        headers={"Authorization": f"Bearer {key}", "Content-Type": "application/json"},
    )  # fmt: skip
    with urllib.request.urlopen(request, timeout=FIRST_ANSWER_S + 5) as answer:  # noqa: S310
        return json.loads(answer.read() or b"null")


def test_the_banner_comes_last_once_everything_takes_work_and_a_rerun_keeps_edits(
    environment: dict[str, str], runs: list[Run]
) -> None:
    base = f"http://127.0.0.1:{environment['PORT']}"
    first = Run(environment)
    runs.append(first)
    key = first.wait_banner()

    asked = time.monotonic()
    thread = _call(base, key, "POST", "/api/v1/threads", {"agent": "assistant"})
    answer = _call(base, key, "POST", f"/api/v1/threads/{thread['id']}/turns/wait?timeout=10",
                   {"input": {"content": "Hello"}})  # fmt: skip
    answered_s = time.monotonic() - asked
    _call(base, key, "PATCH", "/api/v1/prompts/assistant", {"prompt": "You are terse."})
    time.sleep(2)  # anything printed after the banner would show by now
    printed = [line for line in first.lines if line.strip()]
    first.stop()

    assert answer["done"] is True, answer
    assert answered_s < FIRST_ANSWER_S  # no worker still starting
    assert printed[-1] == BANNER_END
    logs = Path(environment["PLATFORM_VAR_DIR"]) / "log"
    assert {path.name for path in logs.glob("*.log")} == {
        "web.log", "worker-1.log", "worker-2.log", "beat.log"
    }  # fmt: skip
    for worker in ("worker-1", "worker-2"):
        worker_log = (logs / f"{worker}.log").read_text()
        assert f"{worker}@" in worker_log
        assert " ready." in worker_log
        # Beat's sweeps (every second or two) log at DEBUG; the task list names them once.
        assert "Task threads.sweep_threads[" not in worker_log
    beat_log = (logs / "beat.log").read_text()
    assert "beat: Starting..." in beat_log
    assert "beat: started (pid " in beat_log  # and the duties it runs, at INFO
    assert "sweep-threads every 2 s" in beat_log
    assert "beat: stopped (pid " in beat_log
    assert "Sending due task" not in beat_log

    second = Run(environment)
    runs.append(second)
    again = second.wait_banner()
    prompt = _call(base, again, "GET", "/api/v1/prompts/assistant")

    assert again == key  # the same demo credentials
    assert prompt["prompt"] == [{"type": "text", "content": "You are terse."}]

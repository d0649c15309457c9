"""Real Celery workers in subprocesses, against the test database, for end-to-end tests.

A worker runs ``python -m tests.worker <queue> <worker options>``: the project's Celery app
with ``<queue>`` as its default queue, so the tasks the worker enqueues itself (its wake-ups)
reach it too; :func:`tasks_routed_to` sends this process's tasks to the same queue. A queue of
its own keeps a test away from tasks that earlier runs left in the broker and from any other
worker consuming the shared one (``make run``, another checkout).

Data a worker must see has to be committed: use ``@pytest.mark.django_db(transaction=True)``.
"""

from __future__ import annotations

import contextlib
import importlib
import json
import signal
import subprocess
import sys
import time
import uuid
from collections.abc import Callable, Iterator, Mapping, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any, TypeVar

import django
import pytest
from kombu import Exchange, Queue

from config import env
from config.celery import WORKER_OPTIONS, app

T = TypeVar("T")

READY_TIMEOUT_S = 60.0
STOP_GRACE_S = 5.0
READY_MARK = " ready."


def private_queue() -> str:
    return f"e2e-{uuid.uuid4().hex[:12]}"


@contextlib.contextmanager
def tasks_routed_to(queue: str) -> Iterator[str]:
    """Tasks this process sends go to ``queue`` inside the block."""
    previous = app.conf.task_default_queue
    app.conf.task_default_queue = queue
    try:
        yield queue
    finally:
        app.conf.task_default_queue = previous


def queue_delete(name: str) -> None:
    """Drop the queue with its messages and bindings (the Redis transport keeps bindings
    forever), and the messages a killed consumer of it left unacknowledged, which the
    transport would push back into it after its visibility timeout (an hour). Precondition:
    no worker consumes the queue any more."""
    with app.connection_for_write() as broker:
        channel: Any = broker.default_channel
        queue = Queue(name, Exchange(name), routing_key=name).bind(channel)
        queue.declare()  # as Celery declares a queue it was not configured with
        queue.delete()
        client = channel.client
        for tag, stored in client.hgetall(channel.unacked_key).items():
            _message, _exchange, routing_key = json.loads(stored)
            if routing_key == name:
                client.hdel(channel.unacked_key, tag)
                client.zrem(channel.unacked_index_key, tag)


@dataclass(eq=False)
class Worker:
    """A started worker: its process, its queue and the file holding its log (stdout and
    stderr). :meth:`log` and :meth:`wait_for_log` see what was logged since :meth:`mark`."""

    process: subprocess.Popen[bytes]
    queue: str
    log_path: Path
    since: int = 0
    queue_deleted: bool = False

    @property
    def pid(self) -> int:
        return self.process.pid

    @property
    def alive(self) -> bool:
        return self.process.poll() is None

    def mark(self) -> None:
        """Start a new section of the log (one per test when a worker serves several)."""
        self.since = len(self.log_path.read_text(errors="replace"))

    def log(self) -> str:
        return self.log_path.read_text(errors="replace")[self.since :]

    def wait_for_log(self, text: str, *, timeout: float) -> None:
        """Block until ``text`` appears in the log; AssertionError on timeout or exit."""
        deadline = time.monotonic() + timeout
        while text not in self.log():
            if not self.alive:
                problem = f"exited ({self.process.returncode})"
            elif time.monotonic() > deadline:
                problem = f"did not log {text!r} in {timeout} s"
            else:
                time.sleep(0.05)
                continue
            raise AssertionError(f"worker {self.pid} {problem}; its log:\n{self.log()[-5000:]}")

    def wait_ready(self, *, timeout: float = READY_TIMEOUT_S) -> None:
        self.wait_for_log(READY_MARK, timeout=timeout)

    def kill(self) -> None:
        """``kill -9``: no shutdown code runs, the lock and the broker message stay behind."""
        self.process.send_signal(signal.SIGKILL)
        self.process.wait()

    def pause(self) -> None:
        self.process.send_signal(signal.SIGSTOP)

    def resume(self) -> None:
        self.process.send_signal(signal.SIGCONT)

    def stop(self) -> None:
        """SIGTERM (Celery's warm shutdown), SIGKILL after :data:`STOP_GRACE_S`; then the
        worker's queue is deleted. Idempotent."""
        if self.alive:
            self.resume()  # a paused process would hold SIGTERM until continued
            self.process.terminate()
            try:
                self.process.wait(timeout=STOP_GRACE_S)
            except subprocess.TimeoutExpired:
                self.process.kill()
                self.process.wait()
        if not self.queue_deleted:
            queue_delete(self.queue)
            self.queue_deleted = True


def worker_start(
    *,
    queue: str,
    database_url: str,
    log_path: Path,
    concurrency: int = 4,
    lock_ttl_ms: int | None = None,
    setup: str | None = None,
    environment: Mapping[str, str] | None = None,
) -> Worker:
    """Start a worker (threads pool) consuming ``queue`` against ``database_url``; it is
    ready once :meth:`Worker.wait_ready` returns. The caller stops it. ``setup``
    (``module:function``) runs in the worker before it starts, e.g. to register a test's
    tools; ``environment`` adds settings (``MEDIA_ROOT`` shared with the test, say)."""
    overrides = {"DJANGO_SETTINGS_MODULE": "config.settings", "DATABASE_URL": database_url,
                 **(environment or {})}  # fmt: skip
    if lock_ttl_ms is not None:
        overrides["THREAD_LOCK_TTL_MS"] = str(lock_ttl_ms)
    command = [
        sys.executable, "-m", "tests.worker", queue, *(["--setup", setup] if setup else []),
        "--concurrency", str(concurrency),
        "--loglevel", "INFO", "--hostname", f"{queue}-{uuid.uuid4().hex[:6]}@%h",
        *WORKER_OPTIONS,
    ]  # fmt: skip
    with log_path.open("wb") as log:
        process = subprocess.Popen(
            command,
            cwd=env.REPO_DIR,
            env=env.child_environment(overrides),
            stdout=log,
            stderr=subprocess.STDOUT,
        )
    return Worker(process=process, queue=queue, log_path=log_path)


@contextlib.contextmanager
def celery_worker(
    *,
    queue: str,
    database_url: str,
    log_path: Path,
    concurrency: int = 4,
    lock_ttl_ms: int | None = None,
) -> Iterator[Worker]:
    """A ready worker for the block (see :func:`worker_start`), stopped after it. When the
    block raises, the worker's log is printed first, so a failing test shows what it did."""
    worker = worker_start(
        queue=queue, database_url=database_url, log_path=log_path,
        concurrency=concurrency, lock_ttl_ms=lock_ttl_ms,
    )  # fmt: skip
    try:
        worker.wait_ready()
        yield worker
    except BaseException:
        print_log(worker)
        raise
    finally:
        worker.stop()


def wait_until(probe: Callable[[], T | None], *, what: str, worker: Worker, timeout: float) -> T:
    """Poll ``probe`` until it returns a truthy value; on timeout, fail with the worker's log."""
    deadline = time.monotonic() + timeout
    while True:
        found = probe()
        if found:
            return found
        if time.monotonic() > deadline:
            raise AssertionError(
                f"timed out waiting for {what}\n--- worker log ---\n{worker.log()}"
            )
        time.sleep(0.05)


def print_log(worker: Worker) -> None:
    sys.stdout.write(f"\n----- worker {worker.pid} ({worker.log_path}) -----\n{worker.log()}")


@contextlib.contextmanager
def log_on_failure(request: pytest.FixtureRequest, worker: Worker) -> Iterator[Worker]:
    """For a fixture serving a shared worker to one test: marks the log at the start and
    prints what the worker logged during the test if the test failed (pytest shows it under
    "Captured stdout teardown")."""
    failed_before = request.session.testsfailed
    worker.mark()
    yield worker
    if request.session.testsfailed > failed_before:
        print_log(worker)


def main(argv: Sequence[str]) -> None:
    """``python -m tests.worker <queue> [--setup module:function] <celery worker options>``."""
    queue, *options = argv
    if options[:1] == ["--setup"]:
        module, function = options[1].split(":")
        django.setup()
        getattr(importlib.import_module(module), function)()
        options = options[2:]
    app.conf.task_default_queue = queue
    app.worker_main(["worker", "--pool", "threads", "--queues", queue, *options])


if __name__ == "__main__":
    main(sys.argv[1:])

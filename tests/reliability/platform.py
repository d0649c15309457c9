"""The platform's processes on a Redis of their own, for fault tests that restart it.

A :class:`PrivateRedis` is an embedded Valkey (the server ``make test`` starts when
``REDIS_URL`` is unset) in a temporary directory, with append-only persistence as a
production Redis would have; :meth:`PrivateRedis.restart` stops it and starts it again on
the same port after an outage. :func:`platform_processes` runs a web server, a worker and
beat against it and the test database, with the options ``make run`` gives them, so a test
sees what an operator would.
"""

from __future__ import annotations

import contextlib
import http.client
import json
import socket
import subprocess
import sys
import time
from collections.abc import Iterator, Mapping
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import redis

from config import env
from config.celery import WORKER_OPTIONS
from config.devservices import EmbeddedValkey
from config.launcher import background_server
from tests.support import current_database_url, server_warm_up
from tests.worker import Worker

Json = dict[str, Any]

START_TIMEOUT_S = 60.0


@dataclass
class PrivateRedis:
    server: EmbeddedValkey
    port: int = 0

    def start(self) -> str:
        url = self.server.start(self.port or _free_port())
        self.port = int(url.rsplit(":", 1)[1].split("/")[0])
        return url

    @property
    def url(self) -> str:
        return self.server.url(self.port)

    def stop(self) -> None:
        self.server.stop()

    def restart(self, *, down_s: float) -> None:
        """Stop the server, wait ``down_s``, start it on the same port."""
        self.stop()
        time.sleep(down_s)
        url = self.server.start(self.port)
        assert url == self.url, f"Valkey came back on {url}, not {self.url}"

    def client(self) -> redis.Redis:
        return redis.Redis.from_url(self.url, socket_timeout=5)


def _free_port() -> int:
    with socket.socket() as probe:
        probe.bind(("127.0.0.1", 0))
        port: int = probe.getsockname()[1]
        return port


@contextlib.contextmanager
def private_redis(directory: Path) -> Iterator[PrivateRedis]:
    server = PrivateRedis(EmbeddedValkey(directory))
    server.start()
    try:
        yield server
    finally:
        server.stop()


@dataclass
class Platform:
    """A web server (``port``), workers and beat, all on ``redis``."""

    redis: PrivateRedis
    port: int
    workers: list[Worker]
    beat: subprocess.Popen[bytes]

    @property
    def worker(self) -> Worker:
        return self.workers[0]

    def request(
        self,
        method: str,
        path: str,
        *,
        key: str,
        body: Json | None = None,
        headers: Mapping[str, str] | None = None,
        timeout: float = 30.0,
    ) -> tuple[int, Mapping[str, str], Json]:
        """One HTTP request: ``(status, headers, JSON body)``."""
        connection = http.client.HTTPConnection("127.0.0.1", self.port, timeout=timeout)
        try:
            sent = {"Authorization": f"Bearer {key}", "Content-Type": "application/json",
                    **(headers or {})}  # fmt: skip
            payload = None if body is None else json.dumps(body)
            connection.request(method, path, body=payload, headers=sent)
            response = connection.getresponse()
            raw = response.read()
            answer_headers = {name.lower(): value for name, value in response.getheaders()}
            content_type = answer_headers.get("content-type", "")
            assert content_type.startswith("application/json"), (
                f"{method} {path} answered {response.status} {content_type}: {raw[:300]!r}"
            )
            return response.status, answer_headers, json.loads(raw) if raw else {}
        finally:
            connection.close()


@contextlib.contextmanager
def platform_processes(
    directory: Path,
    redis_server: PrivateRedis,
    *,
    concurrency: int = 4,
    workers: int = 1,
    environment: Mapping[str, str] | None = None,
) -> Iterator[Platform]:
    """Web, ``workers`` workers and beat on ``redis_server`` and the test database; workers
    and beat log to ``directory``. ``environment`` adds settings to all of them."""
    overrides = {
        "DJANGO_SETTINGS_MODULE": "config.settings",
        "DATABASE_URL": current_database_url(),
        "REDIS_URL": redis_server.url,
        "PYTHONUNBUFFERED": "1",
        **(environment or {}),
    }
    started = [
        _worker_start(directory / f"worker-{n}.log", overrides, concurrency) for n in range(workers)
    ]
    beat_log = (directory / "beat.log").open("wb")
    beat = subprocess.Popen(
        [sys.executable, "-m", "celery", "-A", "config", "beat", "--loglevel", "INFO",
         "--schedule", str(directory / "celerybeat-schedule")],
        cwd=env.REPO_DIR, env=env.child_environment(overrides), stdout=beat_log,
        stderr=subprocess.STDOUT,
    )  # fmt: skip
    try:
        with background_server(overrides) as (port, _pid):
            server_warm_up(port, timeout=START_TIMEOUT_S)
            for worker in started:
                worker.wait_ready(timeout=START_TIMEOUT_S)
            yield Platform(redis=redis_server, port=port, workers=started, beat=beat)
    finally:
        beat.terminate()
        beat.wait(timeout=10)
        beat_log.close()
        for worker in started:
            if worker.alive:
                worker.process.terminate()
                try:
                    worker.process.wait(timeout=10)
                except subprocess.TimeoutExpired:
                    worker.kill()


def _worker_start(log_path: Path, overrides: Mapping[str, str], concurrency: int) -> Worker:
    """A worker started as ``make run`` starts it (the project's worker options)."""
    command = [
        sys.executable, "-m", "celery", "-A", "config", "worker", "--pool", "threads",
        "--concurrency", str(concurrency), "--loglevel", "INFO", "--hostname", "worker@%h",
        *WORKER_OPTIONS,
    ]  # fmt: skip
    with log_path.open("wb") as log:
        process = subprocess.Popen(
            command, cwd=env.REPO_DIR, env=env.child_environment(overrides), stdout=log,
            stderr=subprocess.STDOUT,
        )  # fmt: skip
    return Worker(process=process, queue="celery", log_path=log_path, queue_deleted=True)

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
import itertools
import json
import os
import signal
import socket
import subprocess
import sys
import threading
import time
import uuid
from collections.abc import Callable, Iterator, Mapping, Sequence
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import redis

from config import env
from config.celery import WORKER_OPTIONS
from config.devservices import EmbeddedValkey
from config.launcher import (
    WORKERS,
    Supervisor,
    background_server,
    process_commands,
    ready_mark,
    run_environment,
    supervisor_for,
)
from tests.support import ContextThread, current_database_url, server_warm_up
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


# A client through outages ------------------------------------------------------------------


def chat_bundle(rules: list[Json], **prompt: Any) -> Json:
    """A bundle with agent ``chat``: side A is prompt ``p`` on the scripted model ``m``
    answering by ``rules``; ``prompt`` adds fields to ``p`` (its tools, say)."""
    return {
        "version": 1,
        "models": [{"name": "m", "provider": "scripted", "model_id": "scripted",
                    "config": {"rules": rules}}],
        "prompts": [{"name": "p", "tool_description": "The chat prompt", "prompt": "You help.",
                     "model": "m", "include_chat": True, **prompt}],
        "agents": [{"name": "chat", "side_a": {"prompt": "p"}}],
    }  # fmt: skip


@dataclass
class Post:
    """One message a client means to post once, retried with its key until accepted."""

    thread_id: str
    text: str
    key: str = field(default_factory=lambda: uuid.uuid4().hex)
    statuses: list[int] = field(default_factory=list)

    @property
    def accepted(self) -> bool:
        return 202 in self.statuses


def post_once(platform: Platform, api_key: str, post: Post) -> None:
    """One attempt: a 202, or a 503 with ``Retry-After`` and the error shape; nothing else."""
    status, headers, body = platform.request(
        "POST", f"/api/v1/threads/{post.thread_id}/messages", key=api_key,
        body={"content": post.text}, headers={"Idempotency-Key": post.key},
    )  # fmt: skip
    post.statuses.append(status)
    assert status in (202, 503), f"POST answered {status}: {body}"
    if status == 503:
        assert int(headers["retry-after"]) >= 1, headers
        assert body["error"]["code"] == "unavailable", body


def outage_rounds(
    platform: Platform,
    api_key: str,
    threads: list[str],
    *,
    rounds: int,
    outage: Callable[[], None],
    down_after_s: float,
) -> list[Post]:
    """``rounds`` times: a message to every thread, then ``outage()`` (a restart) while
    flows run, two more messages ``down_after_s`` into it, then a client's retries with the
    same key until each is accepted (plus one retry of an accepted post, which must not
    make a second message). Workers and beat must stay up. Returns every post."""
    posts: list[Post] = []
    counter = itertools.count()
    with ThreadPoolExecutor(max_workers=len(threads) + 1) as pool:
        for _round in range(rounds):
            batch = [Post(thread_id, f"m{next(counter)}") for thread_id in threads]
            sent = [pool.submit(post_once, platform, api_key, post) for post in batch]
            time.sleep(0.2)  # flows are in flight
            restart = pool.submit(outage)
            time.sleep(down_after_s)
            during = [Post(thread_id, f"m{next(counter)}") for thread_id in threads[:2]]
            sent += [pool.submit(post_once, platform, api_key, post) for post in during]
            restart.result()
            for future in sent:
                future.result()
            posts += batch + during
            for post in [p for p in posts if not p.accepted] + posts[-1:]:
                deadline = time.monotonic() + 30
                while True:
                    post_once(platform, api_key, post)
                    if post.accepted or time.monotonic() > deadline:
                        break
                    time.sleep(0.5)
                assert post.accepted, f"{post.text} still refused: {post.statuses}"
            for worker in platform.workers:
                assert worker.alive, f"a worker exited:\n{worker.log()[-4000:]}"
            assert platform.beat.poll() is None, "beat exited"
    return posts


# make run's processes ----------------------------------------------------------------------


@dataclass
class MakeRun:
    """``make run``'s processes (:mod:`config.launcher`: its commands, environment and
    supervisor, with beat's watchdog and the takeover sweeps) on a private Redis and the test
    database, the supervisor checking them on a thread of its own; each process logs to
    ``log_dir/<name>.log``."""

    supervisor: Supervisor
    port: int
    log_dir: Path

    def worker_names(self) -> list[str]:
        return [name for name in self.supervisor.commands if name.startswith("worker-")]

    def log(self, name: str) -> str:
        return (self.log_dir / f"{name}.log").read_text(errors="replace")

    def process(self, name: str) -> subprocess.Popen[bytes]:
        return self.supervisor.processes[name]

    def request(
        self, method: str, path: str, *, key: str | None = None, body: Json | None = None
    ) -> tuple[int, Json]:
        """One HTTP request: ``(status, JSON body)``."""
        connection = http.client.HTTPConnection("127.0.0.1", self.port, timeout=30)
        try:
            headers = {"Content-Type": "application/json"}
            if key is not None:
                headers["Authorization"] = f"Bearer {key}"
            connection.request(method, path, body=None if body is None else json.dumps(body),
                               headers=headers)  # fmt: skip
            response = connection.getresponse()
            return response.status, json.loads(response.read() or b"{}")
        finally:
            connection.close()

    def wait_ready(self, *, since: Mapping[str, int] | None = None) -> None:
        """Until ``/readyz`` is ``ok`` (beat's heartbeat included) and every worker and beat
        logged that it runs; with ``since``, only the processes it names, after those
        offsets of their logs (a restarted one)."""
        deadline = time.monotonic() + START_TIMEOUT_S
        offsets = since or {name: 0 for name in self.supervisor.commands if name != "web"}
        waiting = set(offsets)
        while waiting or not self._ready():
            for name in list(waiting):
                if str(ready_mark(name)) in self.log(name)[offsets[name] :]:
                    waiting.discard(name)
            assert time.monotonic() < deadline, f"not ready: {sorted(waiting)}"
            time.sleep(0.1)

    def _ready(self) -> bool:
        try:
            status, body = self.request("GET", "/readyz")
        except OSError:
            return False
        return status == 200 and body["status"] == "ok"

    def log_sizes(self) -> dict[str, int]:
        return {name: len(self.log(name)) for name in self.supervisor.commands}


@contextlib.contextmanager
def make_run(
    directory: Path, var_dir: Path, redis_server: PrivateRedis, *, workers: int = WORKERS
) -> Iterator[MakeRun]:
    """The processes ``make run`` starts, with its defaults (``workers`` workers), logging to
    ``directory``; ``var_dir`` holds beat's schedule and, when bytecode is not written beside
    the sources, the processes' bytecode cache (a directory shared across tests saves each
    a cold start)."""
    port = _free_port()
    environment = run_environment(
        {"DATABASE_URL": current_database_url(), "REDIS_URL": redis_server.url,
         "PLATFORM_VAR_DIR": str(var_dir)},
        var_dir=var_dir,
    )  # fmt: skip
    supervisor = supervisor_for(
        process_commands("127.0.0.1", port, workers=workers, var_dir=var_dir), environment,
        log_dir=directory, redis_url=redis_server.url,
    )  # fmt: skip
    stop = threading.Event()
    checks = ContextThread(target=supervisor.run, args=(stop,), daemon=True)
    supervisor.start_all()
    checks.start()
    try:
        started = MakeRun(supervisor=supervisor, port=port, log_dir=directory)
        started.wait_ready()
        server_warm_up(port, timeout=START_TIMEOUT_S)
        yield started
    finally:
        stop.set()
        checks.join(timeout=10)
        for process in supervisor.processes.values():
            with contextlib.suppress(ProcessLookupError):
                os.kill(process.pid, signal.SIGCONT)  # a stopped process holds SIGTERM
        supervisor.stop()


def unanswered(roles_in_order: Sequence[tuple[str, str]]) -> list[str]:
    """The user messages of a thread (``(role, content)`` in seq order) that no answer
    follows. A message that joined a running turn (runtime §9) is answered together with
    the others of that turn: by the next assistant message, not one of its own."""
    waiting: list[str] = []
    for role, content in roles_in_order:
        if role == "user":
            waiting.append(content)
        elif role == "assistant":
            waiting.clear()
    return waiting

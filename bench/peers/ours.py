"""This platform as it runs in production, driven over its REST API.

Processes as ``make run`` starts them (:mod:`config.launcher`): uvicorn serving
``config.asgi`` (:func:`config.launcher.background_server`), one Celery worker (threads pool,
``CELERY_CONCURRENCY``, :data:`config.celery.WORKER_OPTIONS`) and beat, all with default
settings on a fresh, migrated database. Four things differ from ``make run``, none a
tuning: the tenant's request and turn quotas are raised above the bench's rates
(:data:`QUOTAS`; they still count); Django's ``DEBUG`` is off, as in production (``make
run`` is a development setup, and ``DEBUG`` keeps every SQL statement's text, which costs
a fifth of the worker's CPU); every process logs at WARNING without access logs (as the
peer does); and the broker queue has a name of its own (``CELERY_QUEUE``), so no other
worker on the same Redis takes the bench's tasks.

A tenant, a member API key and :data:`BUNDLE` are made by the management commands. The
agents use the ``scripted`` provider and the demo app's ``count_words`` function tool
(``agents.demo``, installed outside production), with the same two rules as the peer's
graph (:mod:`bench.peers.graph`).
"""

from __future__ import annotations

import json
import subprocess
import sys
import time
import uuid
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path
from typing import Any
from urllib.parse import urlsplit

import redis

from bench.peers import processes
from bench.peers.cpu import Sources, redis_server_pid
from bench.peers.databases import MAINTENANCE_DATABASE, database_name, with_database
from bench.peers.workload import (
    INSTANT,
    SLOW,
    SLOW_MODEL_S,
    BenchError,
    JsonConnection,
    Message,
    Running,
    check_final,
)
from config import env
from config.celery import WORKER_OPTIONS, app
from config.launcher import background_server

TENANT = "bench-peers"
LOG_LEVEL = "WARNING"
WAIT_TIMEOUT_S = 600  # the API's maximum
WORKER_READY_TIMEOUT_S = 60.0
# The request and turn quotas stay on (their counting is part of a run's cost) but high
# enough that the bench's rates (up to ~100 runs/s) never meet them: the defaults (600 turns
# and 3,000 requests a minute per key) are a tenant's fair share, not a server's ceiling.
QUOTAS = dict.fromkeys(
    ("USAGE_REQUESTS_PER_MINUTE", "USAGE_KEY_REQUESTS_PER_MINUTE", "USAGE_TURNS_PER_MINUTE"),
    "1000000",
)


def _model(name: str, delay_ms: int) -> dict[str, Any]:
    timing = {"delay_ms": delay_ms} if delay_ms else {}
    rules = [
        {"when": {"last_tool": "count_words"},
         "respond": {"text": "That is {last_tool_result} words.", **timing}},
        {"respond": {"tool_calls": [{"name": "count_words",
                                     "arguments": {"text": "{last_user_message}"}}],
                     **timing}},
    ]  # fmt: skip
    return {"name": name, "provider": "scripted", "model_id": "scripted",
            "config": {"rules": rules}}  # fmt: skip


BUNDLE: dict[str, Any] = {
    "version": 1,
    "models": [_model(INSTANT, 0), _model(SLOW, int(SLOW_MODEL_S * 1000))],
    "prompts": [
        {"name": name, "tool_description": f"Counts words ({name} model)",
         "prompt": "You count words with your tool.", "model": name, "include_chat": True,
         "include_past_tools": True, "tools": ["count_words"]}
        for name in (INSTANT, SLOW)
    ],
    "agents": [{"name": name, "type": "ai_human", "side_a": {"prompt": name}}
               for name in (INSTANT, SLOW)],
}  # fmt: skip


class OursClient:
    """:class:`bench.peers.workload.Client` over ``/api/v1`` with an API key."""

    def __init__(self, port: int, api_key: str) -> None:
        self.http = JsonConnection(port, {"Authorization": f"Bearer {api_key}"})

    def start_thread(self, agent: str) -> str:
        return str(self.http.expect(201, "POST", "/api/v1/threads", {"agent": agent})["id"])

    def run(self, agent: str, text: str) -> None:
        """``POST /api/v1/threads/wait``: the thread, its first turn and the wait in one
        request."""
        path = f"/api/v1/threads/wait?timeout={WAIT_TIMEOUT_S}"
        body = {"agent": agent, "input": {"content": text}}
        _check_answer(self.http.expect(200, "POST", path, body))

    def submit(self, thread_id: str, agent: str, text: str) -> str:
        path = f"/api/v1/threads/{thread_id}/turns"
        return str(self.http.expect(202, "POST", path, {"input": {"content": text}})["id"])

    def wait(self, thread_id: str, run_id: str) -> None:
        path = f"/api/v1/turns/{run_id}/wait?timeout={WAIT_TIMEOUT_S}"
        _check_answer(self.http.expect(200, "GET", path))

    def messages(self, thread_id: str) -> list[Message]:
        """The thread's messages, oldest first: every page of the list."""
        found: list[Message] = []
        path: str | None = f"/api/v1/threads/{thread_id}/messages?limit=500"
        while path is not None:
            body = self.http.expect(200, "GET", path)
            found += [_message(one) for one in body["results"]]
            path = _path_of(body["next"]) if body["next"] is not None else None
        return found

    def close(self) -> None:
        self.http.close()


def _check_answer(body: dict[str, Any]) -> None:
    """BenchError unless a wait's answer is a completed turn ending with the final answer."""
    turn = body["turn"]
    if not body["done"] or turn["status"] != "completed":
        raise BenchError(f"turn {turn['id']} is {turn['status']}: {turn.get('error')}")
    check_final([_message(one) for one in body["messages"]], f"turn {turn['id']}")


def _path_of(url: str) -> str:
    """The path and query of a list's ``next`` URL (the connection knows the host)."""
    parts = urlsplit(url)
    return f"{parts.path}?{parts.query}"


def _message(stored: dict[str, Any]) -> Message:
    return Message(role=stored["role"], content=stored["content"] or "")


def _manage(args: list[str], environment: dict[str, str]) -> str:
    completed = subprocess.run(
        [sys.executable, str(env.REPO_DIR / "manage.py"), *args],
        env=environment, capture_output=True, text=True, check=False,
    )  # fmt: skip
    if completed.returncode != 0:
        raise BenchError(f"manage.py {args[0]} failed: {completed.stderr[-2000:]}")
    return completed.stdout


def _provision(environment: dict[str, str], directory: Path) -> str:
    """Migrate, create the tenant, its key and agents; returns the API key."""
    _manage(["migrate", "--noinput"], environment)
    _manage(["create_tenant", TENANT], environment)
    key = _manage(["create_api_key", "--tenant", TENANT, "--name", "bench", "--role", "member"],
                  environment).strip()  # fmt: skip
    bundle = directory / "bundle.json"
    bundle.write_text(json.dumps(BUNDLE))
    _manage(["import_bundle", str(bundle), "--tenant", TENANT], environment)
    return key


def _wait_worker(hostname: str, worker: subprocess.Popen[bytes], log: Path) -> None:
    """Until the worker answers a ping (it then consumes its queue)."""
    deadline = time.monotonic() + WORKER_READY_TIMEOUT_S
    while time.monotonic() < deadline:
        processes.check_alive(worker, "the Celery worker", log)
        replies = app.control.ping(destination=[hostname], timeout=0.5) or []
        if any(hostname in reply for reply in replies):
            return
    raise BenchError(f"the Celery worker did not answer a ping:\n{processes.tail(log)}")


def _celery(args: list[str], environment: dict[str, str], log: Path) -> subprocess.Popen[bytes]:
    with log.open("wb") as output:
        return subprocess.Popen(
            [sys.executable, "-m", "celery", "-A", "config", *args, "--loglevel", LOG_LEVEL],
            cwd=env.REPO_DIR, env=environment, stdout=output, stderr=subprocess.STDOUT,
        )  # fmt: skip


@contextmanager
def running(*, database_url: str, redis_url: str, log_dir: Path) -> Iterator[Running]:
    """Web, worker and beat on ``database_url`` (empty; migrated here as its owner) and
    ``redis_url``. They connect as the application's role of the configured
    ``DATABASE_URL``, as in production, when the two roles are set apart."""
    queue = f"bench-peers-{uuid.uuid4().hex[:8]}"
    application = database_url
    if env.database_migrate_url():
        application = with_database(env.database_url(), database_name(database_url))
    overrides = {
        "DJANGO_SETTINGS_MODULE": "config.settings",
        "DATABASE_URL": application,
        "DATABASE_MIGRATE_URL": database_url,
        "REDIS_URL": redis_url,
        "CELERY_QUEUE": queue,
        "LOG_LEVEL": LOG_LEVEL,
        "DEBUG": "false",
        "PYTHONUNBUFFERED": "1",
        **QUOTAS,
    }
    environment = env.child_environment(overrides)
    api_key = _provision(environment, log_dir)
    hostname = f"bench-peers-{uuid.uuid4().hex[:6]}@localhost"
    worker_log = log_dir / "worker.log"
    worker = _celery(["worker", "--pool", "threads", "--concurrency",
                      str(env.celery_concurrency()), "--hostname", hostname, *WORKER_OPTIONS],
                     environment, worker_log)  # fmt: skip
    beat = _celery(["beat", "--schedule", str(log_dir / "celerybeat-schedule")], environment,
                   log_dir / "beat.log")  # fmt: skip
    try:
        _wait_worker(hostname, worker, worker_log)
        with background_server(overrides) as (port, web_pid):
            sources = Sources(
                processes={"web": web_pid, "worker": worker.pid, "beat": beat.pid},
                conninfo=with_database(database_url, MAINTENANCE_DATABASE),
                database=database_name(database_url),
                redis_pid=redis_server_pid(redis_url),
            )
            yield Running("ours", lambda: OursClient(port, api_key), sources)
            processes.check_alive(worker, "the Celery worker", worker_log)
    finally:
        processes.stop([worker, beat])
        _forget_queue(redis_url, queue)


def _forget_queue(redis_url: str, queue: str) -> None:
    """Delete what kombu keeps in Redis for the bench's queue, so runs leave nothing behind."""
    with redis.Redis.from_url(redis_url, socket_timeout=5) as client:
        client.delete(queue, f"_kombu.binding.{queue}", f"_kombu.binding_permanent.{queue}")

"""Workers' liveness: each Celery worker says in Redis that it is alive, ``/readyz`` counts them.

A worker, once ready (Celery's ``worker_ready``), starts a daemon thread that every third of
``WORKER_HEARTBEAT_TTL_S`` records the worker in ``platform:workers:<queue>``, a sorted set
whose score is when the record lapses (now plus the TTL), and its details (pid, host,
concurrency, start) in the hash ``platform:workers:<queue>:info``. A worker that stops cleanly
(``worker_shutdown``) removes itself at once; one that is killed, or whose process hangs, is
gone once its record lapses. One sorted set rather than a key per worker with a TTL: a reader
counts the live ones with one ``ZRANGEBYSCORE``, never a ``SCAN`` of the keyspace.

A thread, not the consumer's loop, writes it: the worker runs ``--pool threads`` and its
flows are threads of the same process, so the process is the unit that lives or dies (a
hung flow is the thread lock's business, ``threads.services.heartbeat``). A Redis the thread
cannot reach is retried at the next interval and said once.
"""

from __future__ import annotations

import contextlib
import json
import logging
import os
import socket
import threading
import time
from dataclasses import dataclass
from typing import Any, cast

import redis
from celery import current_app, signals
from django.conf import settings

from common.redis_client import redis_client

logger = logging.getLogger(__name__)


def workers_key(queue: str) -> str:
    return f"platform:workers:{queue}"


def info_key(queue: str) -> str:
    return f"platform:workers:{queue}:info"


@dataclass(frozen=True)
class LiveWorker:
    """A worker whose record has not lapsed: its Celery hostname, pid, host and when its
    record lapses (epoch seconds)."""

    name: str
    pid: int
    host: str
    concurrency: int
    lapses_at: float


def worker_beat(client: redis.Redis, *, queue: str, name: str, details: dict[str, Any]) -> None:
    """Record worker ``name`` alive for ``WORKER_HEARTBEAT_TTL_S``. Raises ``redis.RedisError``."""
    lapses_at = time.time() + float(settings.WORKER_HEARTBEAT_TTL_S)
    pipe = client.pipeline(transaction=False)
    pipe.zadd(workers_key(queue), {name: lapses_at})
    pipe.hset(info_key(queue), name, json.dumps(details))
    pipe.execute()


def worker_leave(client: redis.Redis, *, queue: str, name: str) -> None:
    """Remove worker ``name`` (it stops). Raises ``redis.RedisError``."""
    pipe = client.pipeline(transaction=False)
    pipe.zrem(workers_key(queue), name)
    pipe.hdel(info_key(queue), name)
    pipe.execute()


def workers_alive(client: redis.Redis, *, queue: str) -> list[LiveWorker]:
    """The workers of ``queue`` whose record has not lapsed, by name; forgets the lapsed
    ones. Raises ``redis.RedisError``."""
    now = time.time()
    lapsed = cast(list[bytes], client.zrangebyscore(workers_key(queue), "-inf", now))
    if lapsed:
        pipe = client.pipeline(transaction=False)
        pipe.zremrangebyscore(workers_key(queue), "-inf", now)
        pipe.hdel(info_key(queue), *[name.decode() for name in lapsed])
        pipe.execute()
    live = cast(
        list[tuple[bytes, float]],
        client.zrangebyscore(workers_key(queue), now, "+inf", withscores=True),
    )
    if not live:
        return []
    raw = cast(list[bytes | None], client.hmget(info_key(queue), [name for name, _ in live]))
    found = []
    for (name, lapses_at), details in zip(live, raw, strict=True):
        try:
            info = json.loads(details) if details is not None else {}
        except ValueError:
            info = {}
        found.append(
            LiveWorker(
                name=name.decode(),
                pid=int(info.get("pid", 0)),
                host=str(info.get("host", "")),
                concurrency=int(info.get("concurrency", 0)),
                lapses_at=lapses_at,
            )
        )
    return sorted(found, key=lambda worker: worker.name)


class WorkerHeartbeat:
    """The worker process's heartbeat thread (one per process)."""

    def __init__(self, *, name: str, queue: str, concurrency: int) -> None:
        self.name = name
        self.queue = queue
        self.details = {"pid": os.getpid(), "host": socket.gethostname(),
                        "concurrency": concurrency, "started_at": time.time()}  # fmt: skip
        self._stop = threading.Event()
        self._thread = threading.Thread(target=self._run, name="worker-heartbeat", daemon=True)
        self._failing = False

    def start(self) -> None:
        self._thread.start()

    def _run(self) -> None:
        every_s = float(settings.WORKER_HEARTBEAT_TTL_S) / 3
        while True:
            self._beat()
            if self._stop.wait(every_s):
                return

    def _beat(self) -> None:
        try:
            worker_beat(redis_client(), queue=self.queue, name=self.name, details=self.details)
        except redis.RedisError as error:
            if not self._failing:
                logger.warning("worker %s: cannot write its heartbeat (%s: %s); retrying",
                               self.name, type(error).__name__, error)  # fmt: skip
            self._failing = True
            return
        if self._failing:
            logger.info("worker %s: heartbeat written again", self.name)
        self._failing = False

    def stop(self) -> None:
        self._stop.set()
        self._thread.join(timeout=2)
        with contextlib.suppress(redis.RedisError):  # else its record lapses by itself
            worker_leave(redis_client(), queue=self.queue, name=self.name)


_running: WorkerHeartbeat | None = None


def _on_worker_ready(sender: Any = None, **_: Any) -> None:
    global _running
    if _running is not None:
        return
    app = getattr(sender, "app", None) or current_app
    name = str(getattr(sender, "hostname", None) or socket.gethostname())
    concurrency = int(getattr(getattr(sender, "pool", None), "limit", 0) or 0)
    _running = WorkerHeartbeat(
        name=name, queue=str(app.conf.task_default_queue), concurrency=concurrency
    )
    _running.start()
    every_s = float(settings.WORKER_HEARTBEAT_TTL_S) / 3
    logger.info("worker %s: heartbeat every %g s at %s", name, every_s, workers_key(_running.queue))


def _on_worker_shutdown(**_: Any) -> None:
    global _running
    if _running is not None:
        _running.stop()
        _running = None


def install() -> None:
    """Connect the heartbeat to the worker's lifecycle (from ``ObservabilityConfig.ready``;
    only a worker sends these signals)."""
    signals.worker_ready.connect(_on_worker_ready, weak=False, dispatch_uid="worker-heartbeat")
    signals.worker_shutdown.connect(
        _on_worker_shutdown, weak=False, dispatch_uid="worker-heartbeat-stop"
    )

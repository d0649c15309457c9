"""Background work through a real Celery worker (threads pool, default concurrency) on a queue
of its own:

* **Effect lateness**: 1,000 effects (the demo's ``remind``) due over 5 s on 50 threads; each
  one's lateness is when its handler committed minus when it was due.
* **Webhook delivery latency**: ``thread.status`` events published every 10 ms, delivered to a
  loopback receiver; each one's latency is the receiver's clock minus the event's
  ``timestamp`` (taken before its transaction commits), on the same clock.
"""

from __future__ import annotations

import contextlib
import json
import socket
import subprocess
import sys
import tempfile
import threading
import time
import uuid
from collections.abc import Iterator, Sequence
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from pathlib import Path
from typing import Any

from bench.harness import Row, bench_tenant, benchmark, summarize

EFFECTS = 1000
EFFECT_THREADS = 50
SPREAD_MS = 5000
HOOKED_EVENTS = 200
HOOK_PACE_S = 0.01
TIMEOUT_S = 120.0
# The worker and this process may deliver to the loopback receiver.
LOOPBACK_NETWORKS = ["127.0.0.0/8", "::1/128"]
WEBHOOK_ENVIRONMENT = {
    "WEBHOOK_ALLOW_HTTP": "true", "EGRESS_ALLOWED_NETWORKS": ",".join(LOOPBACK_NETWORKS),
}  # fmt: skip


@benchmark("background")
def background() -> Sequence[Row]:
    with bench_tenant("background") as tenant, _worker() as queue:
        from django.conf import settings

        from config.celery import app

        settings.WEBHOOK_ALLOW_HTTP = True
        settings.EGRESS_ALLOWED_NETWORKS = LOOPBACK_NETWORKS

        previous = app.conf.task_default_queue
        app.conf.task_default_queue = queue
        try:
            return [_effect_lateness(tenant), _webhook_latency(tenant)]
        finally:
            app.conf.task_default_queue = previous


@contextlib.contextmanager
def _worker() -> Iterator[str]:
    """A Celery worker consuming a queue of its own, until the block ends."""
    from config import env
    from config.celery import WORKER_OPTIONS, app

    queue = f"bench-{uuid.uuid4().hex[:8]}"
    hostname = f"{queue}@%h"
    log = Path(tempfile.mkdtemp(prefix="bench-background-")) / "worker.log"
    environment = env.child_environment({**WEBHOOK_ENVIRONMENT, "CELERY_QUEUE": queue})
    with log.open("wb") as output:
        worker = subprocess.Popen(
            [sys.executable, "-m", "celery", "-A", "config", "worker", "--pool", "threads",
             "--queues", queue, "--hostname", hostname, "--loglevel", "WARNING",
             *WORKER_OPTIONS],
            cwd=env.REPO_DIR, env=environment, stdout=output, stderr=subprocess.STDOUT,
        )  # fmt: skip
    try:
        deadline = time.monotonic() + 60
        while not app.control.ping(destination=[hostname.replace("%h", _host())], timeout=1):
            if worker.poll() is not None or time.monotonic() > deadline:
                raise RuntimeError(f"the worker did not start:\n{log.read_text()[-3000:]}")
        yield queue
    finally:
        worker.terminate()
        worker.wait(timeout=30)


def _host() -> str:
    return socket.gethostname()


def _effect_lateness(tenant: Any) -> Row:
    from threads.models import EffectStatus, ScheduledEffect, Thread
    from threads.services.effects import effect_schedule

    threads = [
        Thread.objects.create(tenant=tenant, agent_name="bench", origin_agent_name="bench")
        for _ in range(EFFECT_THREADS)
    ]
    started = time.monotonic()
    for n in range(EFFECTS):
        effect_schedule(thread=threads[n % EFFECT_THREADS], name="remind",
                        args={"text": f"bench {n}"}, delay_ms=SPREAD_MS * n // EFFECTS)  # fmt: skip
    rows = ScheduledEffect.objects.filter(thread__tenant=tenant)
    deadline = time.monotonic() + TIMEOUT_S
    while rows.filter(status=EffectStatus.PENDING).exists():
        if time.monotonic() > deadline:
            raise RuntimeError("effects did not all fire in time")
        time.sleep(0.2)
    elapsed = time.monotonic() - started
    fired = list(rows.values_list("scheduled_at", "completed_at", "status"))
    lateness = [(completed - due) / 1_000_000 for due, completed, _ in fired if completed]
    failed = sum(1 for *_, status in fired if status != EffectStatus.COMPLETED)
    return summarize(
        "background", f"effect lateness ({EFFECTS:,} due over {SPREAD_MS / 1000:g} s)",
        lateness, elapsed, target="fire on time", failed=failed,
    )  # fmt: skip


def _webhook_latency(tenant: Any) -> Row:
    from threads.events import publish
    from threads.models import Thread
    from threads.services.webhooks import endpoint_save

    received: list[tuple[int, bytes]] = []

    class Handler(BaseHTTPRequestHandler):
        def do_POST(self) -> None:
            body = self.rfile.read(int(self.headers["content-length"]))
            received.append((time.time_ns() // 1000, body))
            self.send_response(204)
            self.end_headers()

        def log_message(self, *args: Any) -> None:
            return

    server = ThreadingHTTPServer(("127.0.0.1", 0), Handler)
    threading.Thread(target=server.serve_forever, daemon=True).start()
    try:
        endpoint_save(tenant=tenant, data={
            "url": f"http://127.0.0.1:{server.server_address[1]}/hooks",
            "event_types": ["thread.status"],
        })  # fmt: skip
        thread = Thread.objects.create(tenant=tenant, agent_name="bench", origin_agent_name="bench")
        started = time.monotonic()
        for n in range(HOOKED_EVENTS):
            publish(thread, "thread.status", {"status": "completed", "reason": f"bench {n}"})
            time.sleep(HOOK_PACE_S)
        deadline = time.monotonic() + TIMEOUT_S
        while len(received) < HOOKED_EVENTS and time.monotonic() < deadline:
            time.sleep(0.05)
        elapsed = time.monotonic() - started
    finally:
        server.shutdown()
    latencies = [(at - json.loads(body)["timestamp"]) / 1_000_000 for at, body in received]
    return summarize(
        "background", f"webhook delivery latency ({HOOKED_EVENTS} events, loopback receiver)",
        latencies, elapsed, target="", delivered=len(received),
    )  # fmt: skip

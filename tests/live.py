"""A live platform for tests that use it as a client would (the Python client, the console
in a browser): a uvicorn server and a Celery worker on a queue of their own, and the wait
for a tenant's turns to rest before the test database is emptied."""

from __future__ import annotations

import contextlib
import time
from collections.abc import Iterator, Mapping
from dataclasses import dataclass
from pathlib import Path

from config.launcher import background_server
from tenancy.models import Tenant
from tests.support import current_database_url, server_warm_up
from tests.worker import Worker, private_queue, tasks_routed_to, worker_start
from threads.models import RunStatus, Turn
from threads.models.webhooks import DeliveryStatus, WebhookDelivery

START_TIMEOUT_S = 60.0
QUIESCE_TIMEOUT_S = 10.0
NEVER_US = 2**62  # a delivery's next attempt that never comes
_WORKING = (RunStatus.QUEUED, RunStatus.RUNNING, RunStatus.RETRYING)


@dataclass
class Live:
    port: int
    worker: Worker

    @property
    def base_url(self) -> str:
        return f"http://127.0.0.1:{self.port}"


@contextlib.contextmanager
def live_platform(directory: Path, environment: Mapping[str, str]) -> Iterator[Live]:
    """A server and a worker sharing a private queue, both with ``environment``, for the
    block; the worker logs to ``directory``."""
    worker = worker_start(
        queue=private_queue(), database_url=current_database_url(),
        log_path=directory / "worker.log", environment=environment,
    )  # fmt: skip
    try:
        overrides = {"DATABASE_URL": current_database_url(), "CELERY_QUEUE": worker.queue,
                     **environment}  # fmt: skip
        with background_server(overrides) as (port, _pid):
            server_warm_up(port, timeout=START_TIMEOUT_S)
            worker.wait_ready(timeout=START_TIMEOUT_S)
            yield Live(port, worker)
    finally:
        worker.stop()


@contextlib.contextmanager
def working_for(live: Live, tenant: Tenant) -> Iterator[None]:
    """One test's span on a live platform that outlives it: its own tasks go to the live
    worker (and only during the test: later tests route theirs their own way), and at its
    end the tenant's turns are left to rest (ended, paused, or parked on a terminated or
    stopped thread) and its webhook deliveries to wait (no attempt starts, the one under way
    ends), since emptying the database while the worker writes can deadlock."""
    with tasks_routed_to(live.worker.queue):
        yield
    deadline = time.monotonic() + QUIESCE_TIMEOUT_S
    working = Turn.objects.filter(
        tenant=tenant, status__in=_WORKING, thread__terminated_at__isnull=True,
        thread__stop_requested=False,
    )  # fmt: skip
    while working.exists() and time.monotonic() < deadline:
        time.sleep(0.05)
    deliveries = WebhookDelivery.objects.filter(tenant=tenant)
    waiting = deliveries.filter(status=DeliveryStatus.PENDING)
    waiting.update(next_attempt_at=NEVER_US)
    while deliveries.filter(status=DeliveryStatus.SENDING).exists() and time.monotonic() < deadline:
        time.sleep(0.05)
    waiting.update(next_attempt_at=NEVER_US)  # the attempt that was under way set its next

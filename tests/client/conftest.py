"""A live platform for the clients' tests: a uvicorn server and a Celery worker on a queue
of their own, started once for the whole run, and per test a fresh tenant with an admin
key; the client under test (sync and async) pointed at it, and an agent answering by
scripted rules."""

from __future__ import annotations

import time
import uuid
from collections.abc import AsyncIterator, Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import pytest
import pytest_asyncio
from pytest_django.fixtures import Settings
from standard_agents_client import AsyncClient, Client

from config.launcher import background_server
from tenancy.models import Tenant
from tests.factories import make_api_key, make_tenant
from tests.reliability.platform import chat_bundle
from tests.support import current_database_url, server_warm_up
from tests.worker import Worker, private_queue, tasks_routed_to, worker_start
from threads.models import RunStatus, Turn

START_TIMEOUT_S = 60.0


@dataclass
class Served:
    port: int
    worker: Worker
    media_root: Path


@dataclass
class LiveApi:
    """Where the API answers (``base_url`` holds no path) and an admin key of a tenant
    made for the test."""

    base_url: str
    api_key: str
    tenant_slug: str


@pytest.fixture(scope="session")
def _served(django_db_setup: None, tmp_path_factory: pytest.TempPathFactory) -> Iterator[Served]:
    directory = tmp_path_factory.mktemp("live")
    media_root = directory / "media"
    environment = {"MEDIA_ROOT": str(media_root)}
    worker = worker_start(
        queue=private_queue(), database_url=current_database_url(),
        log_path=directory / "worker.log", environment=environment,
    )  # fmt: skip
    try:
        served = {"DATABASE_URL": current_database_url(), "CELERY_QUEUE": worker.queue,
                  **environment}  # fmt: skip
        with background_server(served) as (port, _pid):
            server_warm_up(port, timeout=START_TIMEOUT_S)
            worker.wait_ready(timeout=START_TIMEOUT_S)
            yield Served(port, worker, media_root)
    finally:
        worker.stop()


@pytest.fixture
def live_api(_served: Served, transactional_db: None, settings: Settings) -> Iterator[LiveApi]:
    settings.MEDIA_ROOT = str(_served.media_root)
    tenant = make_tenant(f"live-{uuid.uuid4().hex[:8]}")
    key = make_api_key(tenant, name="client tests").secret
    # The test's own tasks go to the live worker while it runs, and only then: the server
    # and worker live for the session, and later tests route their tasks their own way.
    with tasks_routed_to(_served.worker.queue):
        yield LiveApi(f"http://127.0.0.1:{_served.port}", key, tenant.slug)
        _quiesce(tenant)


# Turns the worker may still be running: the database is emptied after each test, and
# emptying it while the worker writes can deadlock.
_WORKING = (RunStatus.QUEUED, RunStatus.RUNNING, RunStatus.RETRYING)
QUIESCE_TIMEOUT_S = 10.0


def _quiesce(tenant: Tenant) -> None:
    """Wait until the tenant's turns rest (ended, paused, or parked on a terminated or
    stopped thread)."""
    deadline = time.monotonic() + QUIESCE_TIMEOUT_S
    working = Turn.objects.filter(
        tenant=tenant, status__in=_WORKING, thread__terminated_at__isnull=True,
        thread__stop_requested=False,
    )  # fmt: skip
    while working.exists() and time.monotonic() < deadline:
        time.sleep(0.05)


@pytest.fixture
def client(live_api: LiveApi) -> Iterator[Client]:
    with Client(live_api.base_url, live_api.api_key) as client:
        yield client


@pytest_asyncio.fixture
async def aclient(live_api: LiveApi) -> AsyncIterator[AsyncClient]:
    async with AsyncClient(live_api.base_url, live_api.api_key) as client:
        yield client


# The scripted model's answers (docs/providers.md): the weather asks for the time tool,
# "slow" answers after a while (a turn that is still running when the test looks), and
# anything else is echoed.
RULES: list[dict[str, Any]] = [
    {"when": {"last_tool": "current_time"}, "respond": {"text": "It is {last_tool_result}."}},
    {"when": {"last_role": "user", "last_user_contains": "time"},
     "respond": {"tool_calls": [{"name": "current_time", "arguments": {"timezone": "UTC"}}]}},
    {"when": {"last_user_contains": "slow"}, "respond": {"text": "done slowly", "delay_ms": 3000}},
    {"respond": {"text": "You said: {last_user_message}"}},
]  # fmt: skip
CHAT = "chat"


def scripted_bundle() -> dict[str, Any]:
    """Agent ``chat`` on a scripted model answering by :data:`RULES`, with the registry's
    ``current_time`` tool."""
    return chat_bundle(RULES, tools=["current_time"])


@pytest.fixture
def chat(client: Client) -> str:
    """The scripted agent, imported into the test's tenant; its name."""
    report = client.bundles.import_(scripted_bundle())
    assert report["errors"] == [], report
    return CHAT

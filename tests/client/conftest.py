"""A live platform for the clients' tests: a uvicorn server and a Celery worker on a queue
of their own, started once for the whole run, and per test a fresh tenant with an admin
key; the client under test (sync and async) pointed at it, and an agent answering by
scripted rules."""

from __future__ import annotations

import uuid
from collections.abc import AsyncIterator, Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import pytest
import pytest_asyncio
from pytest_django.fixtures import Settings
from standard_agents_client import AsyncClient, Client

from tests.factories import make_api_key, make_tenant
from tests.live import Live, live_platform, working_for
from tests.reliability.platform import chat_bundle


@dataclass
class Served:
    live: Live
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
    with live_platform(directory, {"MEDIA_ROOT": str(media_root)}) as live:
        yield Served(live, media_root)


@pytest.fixture
def live_api(_served: Served, transactional_db: None, settings: Settings) -> Iterator[LiveApi]:
    settings.MEDIA_ROOT = str(_served.media_root)
    tenant = make_tenant(f"live-{uuid.uuid4().hex[:8]}")
    key = make_api_key(tenant, name="client tests").secret
    with working_for(_served.live, tenant):
        yield LiveApi(_served.live.base_url, key, tenant.slug)


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

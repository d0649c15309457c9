"""A live platform for the MCP endpoint's tests: a uvicorn server and a Celery worker on a
queue of their own, started once for the run; per test a tenant with a scripted agent and
a member's API key, and another tenant with its own key. The peer is the ``mcp`` SDK's own
client (streamable HTTP), never a fake of the protocol."""

from __future__ import annotations

import contextlib
import uuid
from collections.abc import AsyncIterator, Iterator
from dataclasses import dataclass
from typing import Any

import httpx2
import pytest
from mcp import Client
from mcp.client.client import ConnectMode
from mcp.client.streamable_http import streamable_http_client

from agents.bundles import bundle_import
from tenancy.models import Role, Tenant
from tests.factories import make_api_key, make_tenant
from tests.live import Live, live_platform, working_for
from tests.reliability.platform import chat_bundle

# The scripted model's answers (docs/providers.md): the time asks for the current_time
# tool, "slow" answers after a while (a turn that takes a moment), anything else is echoed.
RULES: list[dict[str, Any]] = [
    {"when": {"last_tool": "current_time"}, "respond": {"text": "It is {last_tool_result}."}},
    {"when": {"last_role": "user", "last_user_contains": "time"},
     "respond": {"tool_calls": [{"name": "current_time", "arguments": {"timezone": "UTC"}}]}},
    {"when": {"last_user_contains": "slow"}, "respond": {"text": "done slowly", "delay_ms": 2500}},
    {"respond": {"text": "You said: {last_user_message}"}},
]  # fmt: skip
AGENT = "chat"
DESCRIPTION = "Chats with you about anything."


@dataclass
class McpTenant:
    """A tenant made for the test: its API key, and the endpoint's URL."""

    tenant: Tenant
    key: str
    url: str


@dataclass
class McpLive:
    live: Live
    first: McpTenant
    other: McpTenant

    def key_of(self, tenant: Tenant, role: Role) -> str:
        return make_api_key(tenant, role=role, name=f"mcp {role.value}").secret


@pytest.fixture(scope="session")
def _served(django_db_setup: None, tmp_path_factory: pytest.TempPathFactory) -> Iterator[Live]:
    with live_platform(tmp_path_factory.mktemp("mcp-live"), {}) as live:
        yield live


def _tenant(live: Live, *, with_agent: bool) -> McpTenant:
    tenant = make_tenant(f"mcp-{uuid.uuid4().hex[:8]}")
    if with_agent:
        bundle = chat_bundle(RULES, tools=["current_time"])
        bundle["agents"][0]["description"] = DESCRIPTION
        bundle_import(tenant=tenant, document=bundle)
    key = make_api_key(tenant, role=Role.MEMBER, name="mcp tests").secret
    return McpTenant(tenant, key, f"{live.base_url}/mcp/")


@pytest.fixture
def mcp_live(_served: Live, transactional_db: None) -> Iterator[McpLive]:
    """The first tenant has agent ``chat``; the other tenant has none."""
    first = _tenant(_served, with_agent=True)
    other = _tenant(_served, with_agent=False)
    with working_for(_served, first.tenant):
        yield McpLive(_served, first, other)


@contextlib.asynccontextmanager
async def mcp_client(url: str, key: str, *, mode: ConnectMode = "auto") -> AsyncIterator[Client]:
    """The SDK's client on ``url`` with ``key`` as its bearer."""
    http = httpx2.AsyncClient(
        headers={"Authorization": f"Bearer {key}"}, timeout=httpx2.Timeout(30.0, read=120.0)
    )
    async with http, Client(streamable_http_client(url, http_client=http), mode=mode) as client:
        yield client

"""A live platform for the A2A tests: a uvicorn server and a Celery worker on a queue of
their own, started once for the run; per test two tenants, each with an admin key and the
agent ``chat`` on a scripted model."""

from __future__ import annotations

import uuid
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import pytest

from agents.bundles import bundle_import
from tenancy.models import Tenant
from tests.factories import make_api_key, make_tenant
from tests.live import Live, live_platform, working_for
from tests.reliability.platform import chat_bundle

# The scripted model's answers (docs/providers.md): "slow" answers after a while (a task
# still running when the test cancels it); anything else is echoed.
RULES: list[dict[str, Any]] = [
    {"when": {"last_user_contains": "slow"}, "respond": {"text": "done slowly", "delay_ms": 5000}},
    {"respond": {"text": "You said: {last_user_message}"}},
]
AGENT = "chat"


@dataclass
class Caller:
    """A tenant on the live platform, an admin key of it, and its agent's A2A URL."""

    base_url: str
    tenant: Tenant
    api_key: str

    @property
    def agent_url(self) -> str:
        return f"{self.base_url}/a2a/{self.tenant.slug}/{AGENT}/"


@pytest.fixture(scope="session")
def _live(django_db_setup: None, tmp_path_factory: pytest.TempPathFactory) -> Iterator[Live]:
    directory: Path = tmp_path_factory.mktemp("a2a-live")
    # Push notifications go to a loopback receiver over plain http (loopback addresses are
    # allowed through the egress guard for the whole run: tests/environment.py).
    environment = {"MEDIA_ROOT": str(directory / "media"), "WEBHOOK_ALLOW_HTTP": "true"}
    with live_platform(directory, environment) as live:
        yield live


def _caller(live: Live) -> Caller:
    tenant = make_tenant(f"a2a-{uuid.uuid4().hex[:8]}")
    bundle_import(tenant=tenant, document=chat_bundle(RULES))
    return Caller(live.base_url, tenant, make_api_key(tenant, name="a2a tests").secret)


@pytest.fixture
def owner(_live: Live, transactional_db: None) -> Iterator[Caller]:
    """The tenant whose agent the test calls."""
    caller = _caller(_live)
    with working_for(_live, caller.tenant):
        yield caller


@pytest.fixture
def intruder(_live: Live, owner: Caller) -> Caller:
    """Another tenant, with an agent of the same name."""
    return _caller(_live)

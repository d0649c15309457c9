from __future__ import annotations

from collections.abc import Callable

import pytest
from pytest_django.fixtures import Settings
from rest_framework.test import APIClient

from tenancy.models import Role, Tenant
from tenancy.throttling import api_key_failures_reset
from tests.factories import make_api_key, make_tenant, make_thread
from threads.models import Thread
from usage.budgets import budgets_forget

pytest_plugins = ["tests.vocabulary_plugin"]


@pytest.fixture(autouse=True)
def _fast_passwords(settings: Settings) -> None:
    settings.PASSWORD_HASHERS = ["django.contrib.auth.hashers.MD5PasswordHasher"]


@pytest.fixture(autouse=True)
def _no_api_key_failures() -> None:
    """Every test starts with no failed API-key authentications counted (they live in Redis,
    which tests share; many tests present bad keys on purpose). Login failures are rows,
    rolled back with the database."""
    api_key_failures_reset()


@pytest.fixture(autouse=True)
def _no_cached_budgets() -> None:
    """Budgets are cached per process for a moment (usage.budgets.budgets_of); a test that
    writes them with the ORM starts from none cached."""
    budgets_forget()


@pytest.fixture(autouse=True)
def _isolated_media(settings: Settings, tmp_path_factory: pytest.TempPathFactory) -> None:
    """Stored files go to a fresh directory per test, never to the project's var/."""
    settings.MEDIA_ROOT = str(tmp_path_factory.mktemp("media"))


@pytest.fixture
def tenant(db: None) -> Tenant:
    return make_tenant("acme")


@pytest.fixture
def other_tenant(db: None) -> Tenant:
    return make_tenant("globex")


@pytest.fixture
def api_client() -> APIClient:
    return APIClient()


@pytest.fixture
def client_for(db: None) -> Callable[..., APIClient]:
    """An API client authenticated with a fresh key of ``tenant`` and ``role``."""

    def build(tenant: Tenant, role: Role = Role.ADMIN) -> APIClient:
        client = APIClient()
        client.credentials(HTTP_AUTHORIZATION=f"Bearer {make_api_key(tenant, role=role).secret}")
        return client

    return build


@pytest.fixture
def member(tenant: Tenant, client_for: Callable[..., APIClient]) -> APIClient:
    """An API client with a member key of ``tenant``."""
    return client_for(tenant, Role.MEMBER)


@pytest.fixture
def thread(tenant: Tenant) -> Thread:
    return make_thread(tenant)


@pytest.fixture
def other_thread(other_tenant: Tenant) -> Thread:
    return make_thread(other_tenant)

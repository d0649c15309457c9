from __future__ import annotations

from collections.abc import Callable, Iterator
from typing import Any

import pytest
from django.conf import settings as django_settings
from django.db import connection
from django.test.utils import setup_databases, teardown_databases
from psycopg import sql
from pytest_django.fixtures import Settings, _get_databases_for_setup
from rest_framework.test import APIClient

from common.tenant_wall import as_owner, system_scope
from tenancy.models import Role, Tenant
from tenancy.throttling import api_key_failures_reset
from tests.factories import make_api_key, make_tenant, make_thread
from threads.models import Thread
from usage.budgets import budgets_forget

pytest_plugins = ["tests.vocabulary_plugin"]


@pytest.fixture(scope="session")
def django_db_setup(
    request: pytest.FixtureRequest,
    django_test_environment: None,
    django_db_blocker: Any,
    django_db_keepdb: bool,
) -> Iterator[None]:
    """pytest-django's, as the tables' owner (common.tenant_wall.as_owner): the test database
    is created and migrated by the owner, and the tests connect as the application's role,
    to which the run grants TRUNCATE in the test database alone (tests flush tables between
    transactional tests; the platform's role may not, since TRUNCATE ignores row security)."""
    verbosity = request.config.option.verbose
    aliases, serialized = _get_databases_for_setup(request.session.items)
    with django_db_blocker.unblock(), as_owner(), system_scope("tests"):
        config = setup_databases(
            verbosity=verbosity, interactive=False, keepdb=django_db_keepdb,
            aliases=aliases,  # type: ignore[arg-type]  # a set of aliases, as pytest-django's
            serialized_aliases=serialized,
        )  # fmt: skip
        with connection.cursor() as cursor:
            cursor.execute(
                sql.SQL("GRANT TRUNCATE ON ALL TABLES IN SCHEMA public TO {}").format(
                    sql.Identifier(django_settings.DATABASE_APPLICATION_ROLE)
                )
            )
    yield
    if not django_db_keepdb:
        with django_db_blocker.unblock(), as_owner(), system_scope("tests"):
            _disconnect_others()  # connections a test's threads left checked out
            teardown_databases(config, verbosity=verbosity)


def _disconnect_others() -> None:
    with connection.cursor() as cursor:
        cursor.execute(
            "SELECT pg_terminate_backend(pid) FROM pg_stat_activity "
            "WHERE datname = current_database() AND pid <> pg_backend_pid()"
        )


@pytest.fixture(scope="session", autouse=True)
def _tests_act_as_the_system() -> Iterator[None]:
    """A test's own code (its fixtures, its checks) reads and writes every tenant's rows, as
    the named system context ``tests``. What it calls acts as it would in production: a
    request from the tenant it authenticates, a task from its thread's tenant."""
    with system_scope("tests"):
        yield


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

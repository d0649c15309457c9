"""The tenant wall in PostgreSQL: row-level security on every tenant-owned table
(common.tenant_wall), seen from a connection of the application's role and from a request
that forgets to filter by tenant."""

from __future__ import annotations

import datetime as dt
import uuid
from collections.abc import Iterator
from decimal import Decimal
from typing import Any

import psycopg
import pytest
from django.apps import apps
from django.conf import settings
from django.contrib.auth.models import User
from django.db import connection, models
from django.urls import path
from psycopg import sql
from rest_framework.request import Request
from rest_framework.response import Response
from rest_framework.views import APIView

from common.tenant_wall import (
    SYSTEM_POLICY,
    TENANT_POLICY,
    NoTenantContext,
    as_owner,
    tenant_owned_tables,
    tenant_scope,
)
from tenancy.models import Tenant
from tenancy.wall import check_application_role
from tests.factories import make_api_key, make_tenant, make_thread
from tests.support import current_database_url
from threads.models import Thread

# Rows ------------------------------------------------------------------------------------


def _owned(model: type[models.Model]) -> bool:
    return any(field.column == "tenant_id" for field in model._meta.concrete_fields)


def _value(field: models.Field[Any, Any]) -> Any:
    """A value a column of ``field``'s kind accepts (unique where it may need to be)."""
    if field.choices:
        return field.choices[0][0]
    unique = uuid.uuid4().hex
    match field:
        case models.JSONField():
            return {}
        case models.UUIDField():
            return uuid.uuid4()
        case models.BooleanField():
            return False
        case models.DecimalField():
            return Decimal(1)
        case models.FloatField():
            return 1.0
        case models.IntegerField():  # and every integer kind
            return 1
        case models.DateTimeField():
            return dt.datetime.now(dt.UTC)
        case models.DateField():
            return dt.date.today()
        case models.BinaryField():
            return b"x"
        case models.CharField() | models.TextField() | models.SlugField():
            return unique[: field.max_length or 32]
    raise AssertionError(f"no test value for {field!r}; teach _value this kind")


def row_of(model: type[models.Model], tenant: Tenant, made: dict[Any, Any]) -> models.Model:
    """A row of ``model`` in ``tenant``, its required relations made in the same tenant (a
    model without a tenant column gets a row of its own). Every required column gets a
    value; the rest keep their defaults."""
    key = (model, tenant.pk if _owned(model) else None)
    if key in made:
        return made[key]  # type: ignore[no-any-return]
    values: dict[str, Any] = {}
    for field in model._meta.concrete_fields:
        if field.column == "tenant_id":
            values[field.name] = tenant
        elif field.is_relation:
            if not field.null:
                values[field.name] = row_of(field.related_model, tenant, made)  # type: ignore[arg-type]
        elif not (field.primary_key or field.null or field.has_default() or (field.blank
                  and isinstance(field, (models.CharField, models.TextField)))):  # fmt: skip
            values[field.attname] = _value(field)
    if model is User:
        values["username"] = uuid.uuid4().hex
    made[key] = model._default_manager.create(**values)
    return made[key]  # type: ignore[no-any-return]


def tenant_models() -> list[type[models.Model]]:
    return sorted((m for m in apps.get_models() if _owned(m)), key=lambda m: m._meta.db_table)


# The application's role, on a connection of its own ----------------------------------


@pytest.fixture
def as_application() -> Iterator[psycopg.Connection[Any]]:
    """A connection of the application's role (as the platform's processes connect), in
    autocommit: it sees the test's committed rows."""
    with psycopg.connect(current_database_url(), autocommit=True) as raw:
        yield raw


def _set(raw: psycopg.Connection[Any], *, tenant: str = "", system: str = "") -> None:
    raw.execute(
        "SELECT set_config('app.tenant_id', %s, false), set_config('app.system', %s, false)",
        (tenant, system),
    )


def _tenants_seen(raw: psycopg.Connection[Any], table: str) -> list[str]:
    query = sql.SQL("SELECT DISTINCT tenant_id::text FROM {} ORDER BY 1").format(
        sql.Identifier(table)
    )
    return [row[0] for row in raw.execute(query).fetchall()]


@pytest.mark.django_db(transaction=True)
def test_the_application_role_sees_only_its_tenants_rows_of_every_tenant_owned_table(
    as_application: psycopg.Connection[Any],
) -> None:
    a, b = make_tenant(), make_tenant()
    made: dict[Any, Any] = {}
    for model in tenant_models():
        for tenant in (a, b):
            row_of(model, tenant, made)
    tables = tenant_owned_tables()
    assert len(tables) >= 35

    _set(as_application, tenant=str(a.pk))
    seen = {table: _tenants_seen(as_application, table) for table in tables}
    assert seen == {table: [str(a.pk)] for table in tables}

    _set(as_application)  # neither a tenant nor a system context: nothing at all
    assert {table: _tenants_seen(as_application, table) for table in tables} == {
        table: [] for table in tables
    }

    _set(as_application, system="tests")  # a named system context sees both
    both = sorted([str(a.pk), str(b.pk)])
    assert {table: _tenants_seen(as_application, table) for table in tables} == dict.fromkeys(
        tables, both
    )


@pytest.mark.django_db(transaction=True)
def test_a_row_of_another_tenant_can_be_neither_inserted_nor_moved_there(
    as_application: psycopg.Connection[Any],
) -> None:
    a, b = make_tenant(), make_tenant()
    made: dict[Any, Any] = {}
    for model in tenant_models():
        row_of(model, a, made)
    _set(as_application, tenant=str(a.pk))
    refused: dict[str, str] = {}
    for model in tenant_models():
        table = sql.Identifier(model._meta.db_table)
        columns = [f.column for f in model._meta.concrete_fields if not f.primary_key]
        copied = [
            sql.Literal(str(b.pk)) if column == "tenant_id" else sql.Identifier(column)
            for column in columns
        ]
        copy = sql.SQL("INSERT INTO {} ({}) SELECT {} FROM {} LIMIT 1").format(
            table, sql.SQL(", ").join(map(sql.Identifier, columns)), sql.SQL(", ").join(copied),
            table,
        )  # fmt: skip
        move = sql.SQL("UPDATE {} SET tenant_id = {}").format(table, sql.Literal(str(b.pk)))
        for name, statement in (("insert", copy), ("update", move)):
            with pytest.raises(psycopg.errors.InsufficientPrivilege) as error:
                as_application.execute(statement)
            refused[f"{name} {model._meta.db_table}"] = str(error.value).split("\n")[0]
    assert set(refused.values()) == {
        f'new row violates row-level security policy for table "{model._meta.db_table}"'
        for model in tenant_models()
    }
    assert len(refused) == 2 * len(tenant_models())


@pytest.mark.django_db
def test_every_tenant_owned_table_has_both_policies_enabled_and_forced() -> None:
    """A new tenant-owned model whose migration forgets ``TenantRowSecurity`` fails here."""
    with connection.cursor() as cursor:
        cursor.execute(
            "SELECT table_name FROM information_schema.columns "
            "WHERE column_name = 'tenant_id' AND table_schema = current_schema()"
        )
        in_database = sorted(row[0] for row in cursor.fetchall())
        cursor.execute(
            "SELECT c.relname, c.relrowsecurity, c.relforcerowsecurity, "
            "array_agg(p.polname::text ORDER BY p.polname) "
            "FROM pg_class c LEFT JOIN pg_policy p ON p.polrelid = c.oid "
            "WHERE c.relname = ANY(%s) GROUP BY 1, 2, 3",
            [in_database],
        )
        walls = {row[0]: row[1:] for row in cursor.fetchall()}
    assert in_database == tenant_owned_tables()
    policies = sorted([SYSTEM_POLICY, TENANT_POLICY])
    assert walls == dict.fromkeys(in_database, (True, True, policies))


@pytest.mark.django_db
def test_the_application_role_is_no_superuser_bypasses_nothing_and_owns_no_table() -> None:
    with connection.cursor() as cursor:
        cursor.execute(
            "SELECT current_user, rolsuper, rolbypassrls FROM pg_roles WHERE rolname = current_user"
        )
        assert cursor.fetchone() == (settings.DATABASE_APPLICATION_ROLE, False, False)
        cursor.execute(
            "SELECT count(*) FROM pg_tables "
            "WHERE tableowner = current_user AND schemaname = current_schema()"
        )
        assert cursor.fetchone() == (0,)


@pytest.mark.django_db
def test_a_statement_on_a_tenant_table_with_no_context_fails_loudly_in_the_test_run() -> None:
    """The run's strict mode: code that forgot its context is found, not silently empty."""
    from common.tenant_wall import request_scope

    with request_scope(), pytest.raises(NoTenantContext, match="tenant_scope"):
        Thread.objects.count()


# A request that forgets to filter ------------------------------------------------------


class _EveryThread(APIView):
    """Deliberately unscoped: every thread the database shows it."""

    def get(self, request: Request) -> Response:
        return Response(sorted(str(pk) for pk in Thread.objects.values_list("pk", flat=True)))


urlpatterns = [path("every-thread", _EveryThread.as_view())]


@pytest.mark.urls(__name__)
@pytest.mark.django_db
def test_an_unscoped_query_inside_a_request_of_tenant_a_returns_only_a_rows(
    client: Any,
) -> None:
    a, b = make_tenant(), make_tenant()
    mine = [make_thread(a), make_thread(a)]
    make_thread(b)
    assert Thread.objects.count() == 3  # the test itself, as the system, sees all three

    answer = client.get("/every-thread", HTTP_AUTHORIZATION=f"Bearer {make_api_key(a).secret}")

    assert answer.status_code == 200
    assert answer.json() == sorted(str(thread.pk) for thread in mine)
    with tenant_scope(b.pk):
        assert Thread.objects.count() == 1


@pytest.mark.django_db(transaction=True)
def test_the_database_check_warns_when_the_application_role_bypasses_the_wall() -> None:
    assert check_application_role(databases=["default"]) == []
    with as_owner():  # the tests' owner is a superuser, as on a development machine
        warnings = check_application_role(databases=["default"])
    assert [warning.id for warning in warnings] == ["tenancy.W001"]
    assert "the tenant wall is down" in warnings[0].msg

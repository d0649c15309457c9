"""No hot tenant row: a run's writes (its thread, turn, messages, events, logs, ledger rows)
take no lock on their tenant's row, so the runs of one tenant do not all meet on it. The
rows a run writes have no database constraint to the tenant
(``tenancy.models.TenantOwnedBulk``); rows written once per tenant keep theirs."""

from __future__ import annotations

from collections.abc import Iterator
from contextlib import contextmanager

import psycopg
import pytest
from django.apps import apps
from django.db import OperationalError, connection

from common.tenant_wall import tenant_scope
from tenancy.models import ApiKey, Role, Tenant, TenantOwnedBulk
from tenancy.services import api_key_create
from tests.support import current_database_url
from tests.threads.runtime.conftest import Engine, prompt
from threads.models import Message, RunStatus, Thread

pytestmark = pytest.mark.django_db(transaction=True)


@contextmanager
def _tenant_row_locked(tenant: Tenant) -> Iterator[None]:
    """Another session holds ``FOR UPDATE`` on the tenant's row while inside: a foreign-key
    check on it (``FOR KEY SHARE``) would wait for it."""
    with psycopg.connect(current_database_url()) as other:
        other.execute(
            f"SELECT 1 FROM {Tenant._meta.db_table} WHERE id = %s FOR UPDATE",  # noqa: S608
            (tenant.pk,),
        )
        yield
        other.rollback()


def test_a_run_writes_everything_while_another_session_holds_its_tenants_row(
    engine: Engine,
) -> None:
    """A thread opened, a message sent, a tool call, its result and the answer: nothing of
    it waits for the tenant's row. (A thread's row updated twice in one transaction would
    check a constraint to the tenant again: PostgreSQL checks an unchanged key when the old
    row is the transaction's own.)"""
    engine.define(
        prompts=[prompt("p", tools=["echo"])], agents=[{"name": "chat", "side_a": {"prompt": "p"}}]
    )
    engine.script.tool_calls([{"name": "echo", "arguments": {"text": "x"}}]).text("done")
    with connection.cursor() as cursor:  # a wait on the tenant row fails instead of hanging
        cursor.execute("SET lock_timeout = '3s'")
    try:
        with _tenant_row_locked(engine.tenant), tenant_scope(engine.tenant.pk):
            thread = engine.thread("chat")
            engine.send(thread, "hi")
            result = engine.drive(thread)
    finally:
        with connection.cursor() as cursor:
            cursor.execute("RESET lock_timeout")

    assert not result.outage
    stored = Message.objects.filter(thread=thread).order_by("seq").values_list("role", "content")
    assert [role for role, _ in stored] == ["user", "assistant", "tool", "assistant"]
    assert list(stored)[-1] == ("assistant", "done")
    assert Thread.objects.get(pk=thread.pk).status == RunStatus.WAITING_INPUT


def test_the_rows_a_run_writes_many_of_carry_no_constraint_to_the_tenant() -> None:
    bulk = {model.__name__ for model in apps.get_models() if issubclass(model, TenantOwnedBulk)}
    assert {"Thread", "Turn", "Message", "Log", "Event", "EventCounter", "LedgerEntry",
            "Rollup", "AuditEntry"} <= bulk  # fmt: skip
    with connection.cursor() as cursor:
        cursor.execute(
            """
            SELECT conrelid::regclass::text FROM pg_constraint
            WHERE contype = 'f' AND confrelid = %s::regclass
            """,
            [Tenant._meta.db_table],
        )
        constrained = {row[0] for row in cursor.fetchall()}
    bulk_tables = {model._meta.db_table for model in apps.get_models()
                   if issubclass(model, TenantOwnedBulk)}  # fmt: skip
    assert constrained.isdisjoint(bulk_tables)
    assert ApiKey._meta.db_table in constrained  # rows written once per tenant keep theirs


def test_a_tenants_delete_still_takes_its_runs_rows(engine: Engine) -> None:
    engine.define(prompts=[prompt("p")], agents=[{"name": "chat", "side_a": {"prompt": "p"}}])
    thread = engine.thread("chat")
    engine.script.text("done")
    engine.send(thread, "hi")
    engine.drive(thread)
    assert Message.objects.filter(tenant=engine.tenant).exists()

    Tenant.objects.filter(pk=engine.tenant.pk).delete()

    left = {model.__name__: model.objects.filter(tenant_id=engine.tenant.pk).count()
            for model in apps.get_models() if issubclass(model, TenantOwnedBulk)}  # fmt: skip
    assert set(left.values()) == {0}, left


def test_the_lock_test_would_see_a_check_on_the_tenant_row(engine: Engine) -> None:
    """The control: a row written once per tenant (an API key), which keeps its constraint,
    waits for the locked row."""
    with connection.cursor() as cursor:
        cursor.execute("SET lock_timeout = '1s'")
    try:
        with _tenant_row_locked(engine.tenant), pytest.raises(OperationalError, match="lock"):
            api_key_create(tenant=engine.tenant, name="k", role=Role.MEMBER)
    finally:
        with connection.cursor() as cursor:
            cursor.execute("RESET lock_timeout")

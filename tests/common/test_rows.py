"""Model instances from hand-written SQL (common.rows) are the ORM's, field for field, and
the hot reads built on them keep the tenant's scope."""

from __future__ import annotations

import uuid

import pytest
from django.db import connection
from django.db.models import Model
from django.db.models.signals import post_save, pre_save
from django.test.utils import CaptureQueriesContext

from common.errors import NotFound
from common.rows import columns_of
from tests.factories import make_tenant, make_thread
from threads.models import Thread, Turn
from threads.services.inbox import message_queue
from threads.services.threads import thread_get
from threads.services.turns import turn_get, turn_reread, turn_status

pytestmark = pytest.mark.django_db


def _fields(instance: Model) -> dict[str, object]:
    return {
        field.attname: getattr(instance, field.attname) for field in instance._meta.concrete_fields
    }


def _built(model: type[Model], pk: uuid.UUID) -> Model:
    columns = columns_of(model)
    table = model._meta.db_table
    with connection.cursor() as cursor:
        cursor.execute(f"SELECT {columns.sql} FROM {table} WHERE id = %s", [pk])  # noqa: S608
        return columns.build(cursor.fetchone())


def test_a_row_builds_the_instance_the_orm_loads_with_every_field_converted() -> None:
    tenant = make_tenant()
    thread = make_thread(tenant, arguments={"plan": ["a", 1]}, tags=["x"])
    turn = message_queue(thread=thread, role="user", content="hi", metadata={"k": [1]}, wake=False)

    for model, pk in ((Thread, thread.pk), (Turn, turn.pk)):
        built, loaded = _built(model, pk), model.objects.get(pk=pk)
        assert _fields(built) == _fields(loaded)
        assert not built._state.adding
        assert built._state.db == "default"


def test_thread_and_turn_reads_keep_to_the_tenant_and_attach_what_they_read() -> None:
    tenant, other = make_tenant(), make_tenant()
    thread = make_thread(tenant)
    turn = message_queue(thread=thread, role="user", content="hi", wake=False)

    read = thread_get(tenant=tenant, thread_id=str(thread.pk))
    got = turn_get(tenant=tenant, turn_id=turn.pk)

    assert (read.pk, read.tenant) == (thread.pk, tenant)
    assert (got.pk, got.thread.pk, got.thread.tenant) == (turn.pk, thread.pk, tenant)
    with CaptureQueriesContext(connection) as counted:
        assert (got.thread.tenant.slug, read.tenant.slug) == (tenant.slug, tenant.slug)
    assert counted.captured_queries == []  # attached: nothing more to read
    for missing in (str(uuid.uuid4()), "not-a-uuid", thread.pk):
        with pytest.raises(NotFound):
            thread_get(tenant=other, thread_id=missing)
        with pytest.raises(NotFound):
            turn_get(tenant=other, turn_id=turn.pk if missing == thread.pk else missing)
    assert turn_status(turn=turn) == "queued"
    reread = turn_reread(turn=got)
    assert reread is not None
    assert reread.thread is got.thread
    Turn.objects.filter(pk=turn.pk).delete()
    assert (turn_status(turn=turn), turn_reread(turn=turn)) == (None, None)


def test_an_inserted_instance_is_the_row_the_orm_reads_back() -> None:
    tenant = make_tenant()
    columns = columns_of(Thread)

    inserted = columns.insert(
        Thread(tenant=tenant, agent_name="helper", arguments={"n": [1, "two"]}, tags=["t"])
    )

    assert _fields(inserted) == _fields(Thread.objects.get(pk=inserted.pk))
    assert (inserted._state.adding, inserted._state.db) == (False, "default")


def test_models_inserted_by_hand_have_no_save_signal_receivers() -> None:
    """An insert by hand sends no pre_save/post_save: a receiver added for these models
    would silently miss their rows."""
    for signal in (pre_save, post_save):
        assert not signal.has_listeners(Thread)

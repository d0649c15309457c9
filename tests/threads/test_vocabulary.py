"""The bookkeeping of the vocabulary check (tests/vocabulary_plugin.py): it checks every event
type and every status vocabulary a model stores, less the values documented as never stored;
the database recorder counts what any process writes, rolled back or not; the ephemeral
recorder counts what the outbox broadcasts; only the whole suite is checked."""

from __future__ import annotations

import contextlib
from collections.abc import Iterator
from pathlib import Path

import pytest
from django.apps import apps
from django.db import models, transaction

from tests.support import owner_database
from tests.vocabulary_plugin import (
    NEVER_STORED,
    VOCABULARIES,
    EphemeralRecorder,
    declared_names,
    missing,
    recorder_install,
    recorder_paused,
    recorder_read,
    selects_whole_suite,
)
from threads.events import publish
from threads.events.payloads import PAYLOADS
from threads.events.vocabulary import MESSAGE_TYPES, EventType
from threads.models import Thread
from threads.models.subagents import VariableRequest
from threads.services.inbox import message_queue

SCRATCH = "vocabulary_seen_scratch"
BY_NAME = {vocabulary.name: vocabulary for vocabulary in VOCABULARIES}


class _Rollback(Exception):
    pass


def _stored_status_vocabularies() -> dict[str, frozenset[str]]:
    """Every model's ``status`` field with choices: its table and its values."""
    return {
        model._meta.db_table: frozenset(str(value) for value, _label in status.flatchoices)
        for model in apps.get_models()
        for status in model._meta.get_fields()
        if isinstance(status, models.Field) and status.name == "status" and status.choices
    }


def test_every_event_type_is_checked() -> None:
    assert BY_NAME["event type"].checked == {str(kind) for kind in EventType}


def test_every_status_vocabulary_a_model_stores_is_checked() -> None:
    stored = _stored_status_vocabularies()
    declared = {vocabulary.values for vocabulary in VOCABULARIES}

    assert stored  # threads, turns, actions, effects, messages, compactions, deliveries...
    assert {table: values for table, values in stored.items() if values not in declared} == {}


def test_a_status_seen_in_its_table_is_the_tables_own_vocabulary() -> None:
    stored = _stored_status_vocabularies()
    tables = {
        vocabulary.table: vocabulary.values for vocabulary in VOCABULARIES if vocabulary.table
    }

    assert tables == {table: stored[table] for table in tables}


def test_a_status_seen_in_events_is_carried_by_those_events_payloads() -> None:
    for vocabulary in VOCABULARIES:
        for kind in vocabulary.events - MESSAGE_TYPES:  # the message as the API shows it
            keys = PAYLOADS[EventType(kind)].__annotations__
            assert {"status", "item", "items"} & keys.keys(), (vocabulary.name, kind)


def test_only_values_documented_as_never_stored_go_unchecked() -> None:
    for vocabulary in VOCABULARIES:
        never = NEVER_STORED.get(vocabulary.name, {})
        assert set(never) <= vocabulary.values, vocabulary.name
        assert all(reason.strip() for reason in never.values())
        assert vocabulary.checked == vocabulary.values - set(never)
    assert set(NEVER_STORED) <= set(BY_NAME)


def test_a_value_is_missing_until_one_of_its_names_is_seen() -> None:
    everything = declared_names()
    run_status = BY_NAME["RunStatus"]

    assert missing(everything) == {}
    assert missing(everything - {"event=custom"}) == {"event type": ["custom"]}
    assert missing(everything - set(run_status.names("blocked"))) == {"RunStatus": ["blocked"]}
    assert missing(everything - {"thread.status=blocked"}) == {}  # turn.failed carried it
    assert missing(set())["VariableRequest.Status"] == ["completed", "pending"]


@pytest.fixture
def scratch() -> Iterator[None]:
    """A recorder of the schema SCRATCH, installed by the tables' owner (and gone after)."""
    with owner_database() as owner:
        recorder_install(owner, schema=SCRATCH)
        try:
            yield
        finally:
            with owner.cursor() as cursor:
                cursor.execute(f"DROP SCHEMA {SCRATCH} CASCADE")  # its triggers with it


@pytest.mark.django_db(transaction=True)
@pytest.mark.usefixtures("scratch")
def test_the_database_records_what_is_written_even_when_rolled_back(thread: Thread) -> None:
    with recorder_paused():  # the suite's recorder: these writes prove no vocabulary
        message_queue(thread=thread, role="user", content="hi")
        with contextlib.suppress(_Rollback), transaction.atomic():
            publish(thread, "kv.changed", {"key": "k", "deleted": False, "updated_at": 1})
            raise _Rollback
        VariableRequest.objects.create(
            tenant=thread.tenant, thread=thread, relationship="r", agent_name="a", expires_at=1
        )
        publish(thread, "custom", {"name": "x", "data": {"status": "not a declared name"}})

        assert recorder_read(schema=SCRATCH) == {
            "event=queue.changed", "event=thread.status", "event=kv.changed", "event=custom",
            "queue.changed=queued", "thread.status=queued",
            f"{VariableRequest._meta.db_table}=pending",
        }  # fmt: skip


@pytest.mark.django_db(transaction=True)
@pytest.mark.usefixtures("scratch")
def test_a_paused_recorder_sees_nothing_until_the_pause_ends(thread: Thread) -> None:
    with recorder_paused():
        with recorder_paused(schema=SCRATCH):
            publish(thread, "kv.changed", {"key": "k", "deleted": True, "updated_at": 1})
        paused = recorder_read(schema=SCRATCH)
        publish(thread, "custom", {"name": "x", "data": None})

        assert (paused, recorder_read(schema=SCRATCH)) == (set(), {"event=custom"})


@pytest.mark.django_db
def test_ephemeral_events_are_recorded_as_the_outbox_broadcasts_them(thread: Thread) -> None:
    recorder = EphemeralRecorder()

    with recorder_paused(), recorder.watching():  # inside it, the suite's recorder sees nothing
        publish(thread, "model.delta", {"message_id": "m", "depth": 0, "delta": "Hel"})
        publish(thread, "kv.changed", {"key": "k", "deleted": True, "updated_at": 1})

    assert recorder.seen == {"event=model.delta"}


@pytest.mark.parametrize(
    ("args", "narrowed", "whole"),
    [
        (["tests"], False, True),
        (["tests/"], False, True),
        (["./tests/../tests"], False, True),
        (["tests"], True, False),  # -k, -m, --deselect, --ignore, --lf...
        (["tests/threads"], False, False),
        (["tests/threads/test_status.py"], False, False),
        (["tests/threads/test_status.py::test_x"], False, False),
        (["tests", "tests/threads"], False, False),
        ([], False, False),
    ],
)
def test_only_the_whole_suite_is_checked(args: list[str], narrowed: bool, whole: bool) -> None:
    root = Path(__file__).resolve().parents[2]
    assert selects_whole_suite(args, base=root, suite=root / "tests", narrowed=narrowed) is whole

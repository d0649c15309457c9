"""Round trips to PostgreSQL on the hot path (issue 15): opening a thread and submitting a
turn each take one transaction of two statements, events included."""

from __future__ import annotations

import pytest
from django.db import connection
from django.test.utils import CaptureQueriesContext

from tests.threads.runtime.conftest import Engine, prompt
from threads.models import Event
from threads.services.inbox import message_queue

pytestmark = pytest.mark.django_db(transaction=True)


def _statements(queries: CaptureQueriesContext) -> list[str]:
    return [query["sql"].split()[0].upper() for query in queries.captured_queries]


def test_opening_a_thread_and_submitting_a_turn_take_one_short_transaction_each(
    engine: Engine,
) -> None:
    engine.define(prompts=[prompt("p")], agents=[{"name": "chat", "side_a": {"prompt": "p"}}])
    engine.thread("chat")  # the definitions are cached from here on

    with CaptureQueriesContext(connection) as opened:
        thread = engine.thread("chat")
    with CaptureQueriesContext(connection) as submitted:
        message_queue(thread=thread, role="user", content="hi", wake=False)

    # The thread row, then its events; the turn with the thread's status, then both events.
    assert _statements(opened) == ["BEGIN", "INSERT", "WITH", "COMMIT"]
    assert _statements(submitted) == ["BEGIN", "WITH", "WITH", "COMMIT"]
    events = Event.objects.filter(thread=thread).order_by("sequence")
    assert list(events.values_list("type", flat=True)) == [
        "thread.created", "thread.status", "queue.changed",
    ]  # fmt: skip

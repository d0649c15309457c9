"""A stop that aborts a model call mid-stream keeps the text already streamed (spec Threads
§8.8: an abort stops the stream, what was already yielded remains valid): the answer's row
stays, ``failed`` and marked ``interrupted``, and the turn ends ``cancelled`` as before. A
call aborted before any text was streamed still leaves no row."""

from __future__ import annotations

import time

import pytest

from tests.threads.runtime.conftest import Engine
from tests.threads.runtime.test_stops import helper, in_background, wait_for
from threads.models import Event, Message, Turn
from threads.runtime.stops import StopReason
from threads.services.control import thread_stop

pytestmark = pytest.mark.django_db(transaction=True)

ANSWER = "Once upon a time there was a very long answer that nobody waited for."


def test_stop_keeps_the_streamed_part_of_the_answer_marked_interrupted(
    transactional_db: None, engine: Engine, wakes: list[str]
) -> None:
    thread = helper(engine)
    engine.script.streaming(chunk_size=5, chunk_delay_ms=150).text(ANSWER)
    engine.send(thread, "tell me a story")
    worker, results = in_background(engine, thread)
    wait_for(lambda: Message.objects.filter(thread=thread, status="pending").exists())
    pending = Message.objects.get(thread=thread, role="assistant")
    # A chunk of 5 characters every 150 ms (deltas are not stored): a few are out by now,
    # and most of the answer is still to come.
    time.sleep(0.5)

    thread_stop(thread=thread)
    worker.join(timeout=5)

    assert results[0].reasons == [StopReason.ABORTED_BY_USER]
    row = Message.objects.get(pk=pending.pk)
    assert row.status == "failed"
    assert row.content is not None
    assert ANSWER.startswith(row.content)
    assert 10 <= len(row.content) <= len(ANSWER) - 20
    assert row.metadata["interrupted"] is True
    assert row.metadata["error_code"] == "aborted"
    stored = list(Message.objects.filter(thread=thread).order_by("seq"))
    assert [(m.role, m.status) for m in stored] == [
        ("user", "completed"),
        ("assistant", "failed"),
        ("system", "completed"),
    ]
    assert stored[2].content == "Execution stopped by user"
    assert not Event.objects.filter(thread=thread, type="message.deleted").exists()
    updated = Event.objects.filter(thread=thread, type="message.updated").last()
    assert updated is not None
    assert (updated.payload["id"], updated.payload["status"]) == (str(pending.pk), "failed")
    assert updated.payload["metadata"]["interrupted"] is True
    turn = Turn.objects.get(thread=thread)
    assert (turn.status, turn.outcome) == ("cancelled", "aborted_by_user")


def test_stop_before_any_text_streamed_still_leaves_no_answer_row(
    transactional_db: None, engine: Engine, wakes: list[str]
) -> None:
    thread = helper(engine)
    engine.script.text("too late", delay_ms=5000)
    engine.send(thread, "hello")
    worker, results = in_background(engine, thread)
    wait_for(lambda: Message.objects.filter(thread=thread, status="pending").exists())

    thread_stop(thread=thread)
    worker.join(timeout=5)

    assert results[0].reasons == [StopReason.ABORTED_BY_USER]
    assert not Message.objects.filter(thread=thread, role="assistant").exists()
    assert Event.objects.filter(thread=thread, type="message.deleted").count() == 1

"""Queued work drains into the running flow (runtime §2, §3, §9): a message posted while a
turn runs joins it and is stored before its next model call, in order; one that arrives
after the last model call runs as a turn of its own; an interrupted turn's undrained joined
messages are not cancelled with it. The flow runs on another thread with its own
connection (``transaction=True``), the messages are posted from the test's, as clients
would, and the running flow hears of them through its lock holder's control list."""

from __future__ import annotations

import threading
from typing import Any

import pytest

from agents.registry import tool
from tests.support import ContextThread
from tests.threads.runtime.conftest import Engine, prompt
from tests.threads.runtime.test_stops import in_background, wait_for
from threads.models import Log, Message, Thread, Turn, TurnStrategy
from threads.services.inbox import message_queue


def slow_agent(engine: Engine, **side: Any) -> tuple[Thread, threading.Event, threading.Event]:
    """An agent whose ``slow`` tool waits until the test says so."""
    started, release = threading.Event(), threading.Event()

    @tool(description="Takes a while.")
    def slow(state: Any) -> str:
        started.set()
        assert release.wait(10)
        return "slow done"

    engine.define(
        prompts=[prompt("helper", tools=["slow"])],
        agents=[{"name": "helper", "side_a": {"prompt": "helper", **side}}],
    )
    return engine.thread("helper"), started, release


def post(thread: Thread, content: str, **fields: Any) -> Turn:
    """``POST .../messages`` as the view does it."""
    fresh = Thread.objects.get(pk=thread.pk)
    return message_queue(
        thread=fresh, role="user", content=content, strategy=TurnStrategy.JOIN, **fields
    )


def joined_drained(thread: Thread, count: int) -> bool:
    return Turn.objects.filter(thread=thread, host__isnull=False, status="completed").count() == (
        count
    )


@pytest.mark.django_db(transaction=True)
def test_messages_posted_during_a_tool_join_the_running_turn_in_order(
    transactional_db: None, engine: Engine, wakes: list[str]
) -> None:
    thread, started, release = slow_agent(engine)
    engine.script.tool_calls([{"name": "slow", "arguments": {}}]).text("Both noted.")
    engine.send(thread, "start")
    worker, results = in_background(engine, thread)
    assert started.wait(5)

    first = post(thread, "and one more thing")
    second = post(thread, "and a last one")
    running = Turn.objects.get(thread=thread, host__isnull=True)
    assert (first.host_id, second.host_id) == (running.pk, running.pk)
    release.set()
    worker.join(timeout=10)

    assert not worker.is_alive()
    assert len(results[0].reasons) == 1  # one flow
    assert len(engine.script.requests) == 2  # two model calls
    second_call = [m.text for m in engine.script.requests[1].messages]
    assert second_call[-2:] == ["and one more thing", "and a last one"]
    stored = [(m.role, m.content) for m in Message.objects.filter(thread=thread).order_by("seq")]
    assert stored == [
        ("user", "start"), ("assistant", None), ("tool", "slow done"),
        ("user", "and one more thing"), ("user", "and a last one"), ("assistant", "Both noted."),
    ]  # fmt: skip
    # The joined inputs ended with the turn they joined, and ran no turn of their own.
    turns = Turn.objects.filter(thread=thread)
    assert {t.status for t in turns} == {"completed"}
    assert Log.objects.filter(thread=thread, kind="flow").count() == 1
    assert Thread.objects.get(pk=thread.pk).status != "queued"


@pytest.mark.django_db(transaction=True)
def test_a_message_posted_after_the_last_model_call_runs_as_its_own_turn(
    transactional_db: None, engine: Engine, wakes: list[str]
) -> None:
    # ``slow`` is the side's stop tool: once it returns the turn ends, with no model call.
    thread, started, release = slow_agent(engine, stop_tool="slow")
    engine.script.tool_calls([{"name": "slow", "arguments": {}}]).text("Second answer.")
    engine.send(thread, "hello")
    worker, _results = in_background(engine, thread)
    assert started.wait(5)

    late = post(thread, "are you there?")
    release.set()
    worker.join(timeout=10)
    wait_for(lambda: Turn.objects.get(pk=late.pk).status == "completed")

    assert late.host_id is not None  # it joined the running turn ...
    assert Turn.objects.get(pk=late.pk).host_id is None  # ... which left it to run alone
    contents = [m.content for m in Message.objects.filter(thread=thread).order_by("seq")]
    assert contents == ["hello", None, "slow done", "are you there?", "Second answer."]
    assert len(engine.script.requests) == 2


@pytest.mark.django_db(transaction=True)
def test_an_interrupted_turn_leaves_its_undrained_joined_messages_queued(
    transactional_db: None, engine: Engine, wakes: list[str]
) -> None:
    thread, started, release = slow_agent(engine)
    engine.script.tool_calls([{"name": "slow", "arguments": {}}]).text("Later.").text("Now.")
    engine.send(thread, "start")
    worker, _results = in_background(engine, thread)
    assert started.wait(5)

    joined = post(thread, "please also check this")
    fresh = Thread.objects.get(pk=thread.pk)
    message_queue(thread=fresh, role="user", content="stop that", strategy="interrupt")
    release.set()
    worker.join(timeout=10)

    first = Turn.objects.get(thread=thread, payload__content="start")
    assert first.status == "cancelled"
    kept = Turn.objects.get(pk=joined.pk)
    assert kept.status != "cancelled"  # a person's message is not cancelled with the turn
    assert kept.host_id is None


def test_join_with_no_turn_running_waits_like_enqueue(engine: Engine) -> None:
    engine.define(
        prompts=[prompt("helper")], agents=[{"name": "helper", "side_a": {"prompt": "helper"}}]
    )
    thread = engine.thread("helper")
    turn = post(thread, "hello")
    assert turn.host_id is None
    assert turn.status == "queued"
    engine.script.text("Hi.")
    engine.drive(thread)
    assert Turn.objects.get(pk=turn.pk).status == "completed"


@pytest.mark.django_db(transaction=True)
def test_a_message_joining_while_the_turn_ends_is_never_orphaned(
    transactional_db: None, engine: Engine, wakes: list[str]
) -> None:
    """The join holds the thread row while the turn's end waits for it: the end, which
    locks that row before it reads the turn's inputs, still finds the joined message left
    over, and it becomes a turn of its own (a single statement's snapshot would predate the
    wait and leave it joined to a turn that ended)."""
    from django.db import connection, transaction

    from threads.services.fence import fence_check, fence_take
    from threads.services.status import turn_finish, turn_inputs_take

    engine.define(
        prompts=[prompt("helper")], agents=[{"name": "helper", "side_a": {"prompt": "helper"}}]
    )
    thread = engine.thread("helper")
    first = message_queue(thread=thread, role="user", content="hello")
    taken = fence_take(thread_id=thread.pk, tenant_id=thread.tenant_id)
    assert taken is not None
    running, fence, _next = taken
    turn_inputs_take(thread=running, fence=fence, turn=first)
    ended: list[bool] = []

    def end() -> None:
        try:
            waiting = turn_finish(
                thread=running, fence=fence, turn=first, status="completed",
                rest="waiting_input", outcome="stop_on_response",
            )  # fmt: skip
            ended.append(waiting)
        finally:
            connection.close()

    with transaction.atomic():
        joining = Thread.objects.get(pk=thread.pk)
        fence_check(thread=joining, fence=None)
        late = message_queue(
            thread=joining, role="user", content="one more", strategy=TurnStrategy.JOIN
        )
        ender = ContextThread(target=end, daemon=True)
        ender.start()
        ender.join(timeout=0.5)
        assert ender.is_alive()  # the end waits for the thread row
    ender.join(timeout=5)

    assert late.host_id == first.pk
    assert ended == [True]  # the end saw a turn waiting
    adopted = Turn.objects.get(pk=late.pk)
    assert (adopted.host_id, adopted.status) == (None, "queued")

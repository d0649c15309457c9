"""The event log: vocabulary, gap-free sequences, commit and rollback, concurrent writers."""

from __future__ import annotations

import asyncio
import contextlib
import functools
import threading
import time
import uuid
from collections.abc import Callable, Iterator
from typing import Any

import pytest
from asgiref.sync import async_to_sync
from channels.layers import get_channel_layer
from django.db import connection, transaction
from django.test.utils import CaptureQueriesContext
from hypothesis import HealthCheck, Phase, given, settings
from hypothesis import strategies as st

from common.ids import new_id
from tenancy.models import Tenant
from tests.factories import make_thread
from tests.support import ContextThread
from tests.threads.runtime.conftest import Engine, engine, prompt  # noqa: F401 - the fixture
from threads.broadcast import broadcast_flush
from threads.events import (
    EPHEMERAL,
    PAYLOADS,
    EventType,
    Outbox,
    UnknownEvent,
    publish,
    thread_group,
)
from threads.models import Event, EventCounter, Thread, Turn
from threads.services.logs import log_create
from threads.services.messages import message_inject
from threads.services.values import value_set
from threads.state import ThreadState


def _log(thread: Thread) -> list[tuple[int, str]]:
    rows = Event.objects.for_tenant(thread.tenant).filter(thread=thread).order_by("sequence")
    return list(rows.values_list("sequence", "type"))


def test_every_event_type_declares_its_payload() -> None:
    assert set(PAYLOADS) == set(EventType)
    assert {"model.delta", "reasoning.delta", "thread.deleted"} == EPHEMERAL


def test_a_type_outside_the_vocabulary_is_refused(thread: Thread) -> None:
    with pytest.raises(UnknownEvent, match=r"'flow\.started' is not an event type"):
        publish(thread, "flow.started", {})


def test_a_payload_missing_a_required_key_is_refused(thread: Thread) -> None:
    with pytest.raises(UnknownEvent, match=r"kv.changed payload lacks \['deleted', 'updated_at'\]"):
        publish(thread, "kv.changed", {"key": "k"})


def test_events_of_a_thread_are_numbered_from_one_without_gaps(thread: Thread) -> None:
    state = ThreadState(thread)
    state.emit("a", 1)
    state.set_value("k", 1)
    state.emit("b", 2)

    assert _log(thread) == [(1, "custom"), (2, "kv.changed"), (3, "custom")]
    assert EventCounter.objects.get(thread=thread).last_sequence == 3


@pytest.mark.django_db(transaction=True)
def test_a_progress_marker_waits_in_its_outbox_for_the_threads_next_event(
    tenant: Tenant,
) -> None:
    thread = make_thread(tenant)
    outbox = Outbox(thread, turn_id="t1", flow_id="f1")

    with outbox.step(1):
        assert outbox.publish("step.started", {"step": 1, "side": "a"}) is None
    assert _log(thread) == []
    outbox.publish("custom", {"name": "next", "data": None})

    assert _log(thread) == [(1, "step.started"), (2, "custom")]
    assert Event.objects.get(thread=thread, sequence=1).step_id == "t1:1"


@pytest.mark.django_db(transaction=True)
def test_a_progress_marker_published_without_an_outbox_is_written_at_once(
    tenant: Tenant,
) -> None:
    thread = make_thread(tenant)

    assert publish(thread, "step.started", {"step": 1, "side": "a", "flow_id": "f1"}) == 1


def test_model_deltas_are_not_stored(thread: Thread) -> None:
    assert publish(thread, "model.delta", {"message_id": "m", "depth": 0, "delta": "hi"}) is None
    assert _log(thread) == []


def test_large_message_payloads_are_referenced_not_copied(thread: Thread) -> None:
    message = message_inject(thread=thread, role="user", content="x" * 20_000)

    event = Event.objects.get(thread=thread, type="message.created")
    assert "content" not in event.payload
    assert event.payload["id"] == str(message.id)
    assert event.refs == {"message": f"/api/v1/threads/{thread.id}/messages/{message.id}"}


@pytest.fixture
def listener(transactional_db: None) -> Iterator[Callable[[Thread], list[dict[str, Any]]]]:
    """Subscribes a fresh channel to a thread's group; calling it again returns what arrived."""
    layer = get_channel_layer()
    assert layer is not None
    joined: list[tuple[str, str]] = []

    def received(thread: Thread) -> list[dict[str, Any]]:
        group = thread_group(tenant_id=thread.tenant_id, thread_id=thread.pk)
        if not any(g == group for g, _ in joined):
            # A plain channel name (no "!"): received directly, from any event loop.
            channel = f"listener{uuid.uuid4().hex}"
            async_to_sync(layer.group_add)(group, channel)
            joined.append((group, channel))
            return []
        assert broadcast_flush()
        channel = next(c for g, c in joined if g == group)
        found: list[dict[str, Any]] = []

        async def drain() -> None:
            while True:
                try:
                    found.append(await asyncio.wait_for(layer.receive(channel), 0.3))
                except TimeoutError:
                    return

        async_to_sync(drain)()
        return found

    yield received
    for group, channel in joined:
        async_to_sync(layer.group_discard)(group, channel)


def _rolled_back(write: Callable[[], object]) -> None:
    """Run ``write`` in a transaction that then rolls back (RuntimeError)."""
    with transaction.atomic():
        write()
        raise RuntimeError("roll back")


def test_a_committed_write_is_broadcast_after_commit_and_a_rolled_back_one_never(
    tenant: Tenant, listener: Callable[[Thread], list[dict[str, Any]]]
) -> None:
    thread = make_thread(tenant)
    listener(thread)

    with pytest.raises(RuntimeError, match="roll back"):
        _rolled_back(lambda: value_set(thread=thread, key="lost", value=1))
    assert listener(thread) == []
    assert _log(thread) == []

    value_set(thread=thread, key="kept", value=1)

    arrived = listener(thread)
    assert [(m["sequence"], m["event_type"]) for m in arrived] == [(1, "kv.changed")]
    assert _log(thread) == [(1, "kv.changed")]


def _event_statements(captured: CaptureQueriesContext) -> int:
    return sum("INSERT INTO threads_event" in query["sql"] for query in captured.captured_queries)


def test_a_batch_writes_its_events_in_one_statement_in_publish_order(thread: Thread) -> None:
    outbox = Outbox(thread)

    with CaptureQueriesContext(connection) as captured, outbox.batch():
        assert publish(thread, "custom", {"name": "first", "data": 1}, outbox=outbox) is None
        message_inject(thread=thread, role="user", content="hello", outbox=outbox)
        outbox.publish("custom", {"name": "third", "data": 3})
        assert _log(thread) == []  # held until the block ends

    assert _event_statements(captured) == 1
    assert _log(thread) == [(1, "custom"), (2, "message.created"), (3, "custom")]


def test_an_outbox_names_its_turn_flow_and_step_on_every_event(thread: Thread) -> None:
    turn_id = str(new_id())
    outbox = Outbox(thread, turn_id=turn_id, flow_id="f-1")

    outbox.publish("custom", {"name": "outside", "data": 1})
    with outbox.step(3):
        message = message_inject(thread=thread, role="user", content="hello", outbox=outbox)
    publish(thread, "custom", {"name": "no outbox", "data": 2})

    rows = Event.objects.filter(thread=thread).order_by("sequence")
    assert [(e.turn_id, e.flow_id, e.step_id) for e in rows] == [
        (turn_id, "f-1", ""), (turn_id, "f-1", f"{turn_id}:3"), ("", "", ""),
    ]  # fmt: skip
    assert str(message.turn_id) == turn_id


def test_an_event_from_a_savepoint_in_a_batch_is_written_at_once_ahead_of_the_held_ones(
    thread: Thread,
) -> None:
    """The documented trade: a savepoint's event must be able to roll back with it."""
    outbox = Outbox(thread)

    with outbox.batch():
        outbox.publish("custom", {"name": "held", "data": 1})
        value_set(thread=thread, key="k", value=1, outbox=outbox)  # its own savepoint

    assert _log(thread) == [(1, "kv.changed"), (2, "custom")]


def test_a_batch_that_raises_writes_neither_its_facts_nor_their_events(thread: Thread) -> None:
    outbox = Outbox(thread)

    def write_then_fail() -> None:
        with outbox.batch():
            value_set(thread=thread, key="lost", value=1, outbox=outbox)
            raise RuntimeError("roll back")

    with pytest.raises(RuntimeError, match="roll back"):
        write_then_fail()

    assert _log(thread) == []
    assert ThreadState(thread).get_value("lost") is None


def test_a_savepoint_inside_a_batch_takes_its_own_events_when_it_rolls_back(
    thread: Thread,
) -> None:
    outbox = Outbox(thread)

    with outbox.batch():
        outbox.publish("custom", {"name": "kept", "data": 1})
        with contextlib.suppress(RuntimeError), transaction.atomic():
            value_set(thread=thread, key="lost", value=1, outbox=outbox)
            raise RuntimeError("roll back the savepoint")
        outbox.publish("custom", {"name": "also kept", "data": 2})

    assert _log(thread) == [(1, "custom"), (2, "custom")]
    names = Event.objects.filter(thread=thread).order_by("sequence")
    assert [event.payload["name"] for event in names] == ["kept", "also kept"]


def test_unbatched_code_inside_a_batch_publishes_at_once_after_what_the_batch_held(
    thread: Thread,
) -> None:
    outbox = Outbox(thread)

    with outbox.batch():
        outbox.publish("custom", {"name": "held", "data": 1})
        with outbox.unbatched():
            outbox.publish("custom", {"name": "user code", "data": 2})
            assert _log(thread) == [(1, "custom"), (2, "custom")]
        outbox.publish("custom", {"name": "held again", "data": 3})
        assert _log(thread) == [(1, "custom"), (2, "custom")]

    assert _log(thread) == [(1, "custom"), (2, "custom"), (3, "custom")]


def test_only_groups_with_members_are_sent_to(
    tenant: Tenant,
    listener: Callable[[Thread], list[dict[str, Any]]],
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    watched, unwatched = make_thread(tenant), make_thread(tenant)
    listener(watched)
    layer = get_channel_layer()
    sent_to: list[str] = []
    original = layer.group_send

    async def counting(group: str, message: dict[str, Any]) -> None:
        sent_to.append(group)
        await original(group, message)

    monkeypatch.setattr(layer, "group_send", counting)

    ThreadState(unwatched).emit("unseen", 1)
    ThreadState(watched).emit("seen", 2)

    arrived = listener(watched)
    assert [m["event_type"] for m in arrived] == ["custom"]
    assert sent_to == [thread_group(tenant_id=tenant.pk, thread_id=watched.pk)]
    assert _log(unwatched) == [(1, "custom")]


def test_an_engine_flow_records_each_fact_once_in_order(engine: Engine) -> None:  # noqa: F811
    engine.define(
        prompts=[prompt("helper", tools=["echo"])],
        agents=[{"name": "helper", "side_a": {"prompt": "helper"}}],
    )
    thread = engine.thread("helper")
    engine.script.tool_calls([{"name": "echo", "arguments": {"text": "hi"}}]).text("Done.")
    engine.send(thread, "say hi")

    engine.drive(thread)

    assert [kind for _, kind in _log(thread)] == [
        "thread.created", "thread.status", "queue.changed",
        "turn.started", "thread.status", "queue.changed", "message.created",
        "step.started", "tool.catalog.resolved", "message.created", "model.requested",
        "message.updated", "model.completed", "cost.recorded", "permission.evaluated",
        "tool.started",
        "message.created", "tool.result", "step.completed",
        "step.started", "message.created", "model.requested", "message.updated",
        "model.completed", "cost.recorded", "step.completed", "side.completed",
        "thread.status", "turn.completed",
    ]  # fmt: skip
    sequences = [sequence for sequence, _ in _log(thread)]
    assert sequences == list(range(1, len(sequences) + 1))
    ended = Event.objects.get(thread=thread, type="turn.completed")
    assert ended.payload["reason"] == "stop_on_response"
    assert ended.flow_id == ended.payload["flow_id"]
    turn = Turn.objects.get(thread=thread)
    assert ended.turn_id == ended.payload["turn_id"] == str(turn.pk)
    assert (turn.status, turn.outcome) == ("completed", "stop_on_response")
    # The second call offered the same tools: one catalog for the turn.
    (catalog,) = Event.objects.filter(thread=thread, type="tool.catalog.resolved")
    assert catalog.turn_id == str(turn.pk)
    assert (catalog.payload["side"], catalog.payload["prompt"]) == ("a", "helper")
    assert [(tool["name"], tool["kind"]) for tool in catalog.payload["tools"]] == [
        ("echo", "function")
    ]
    assert catalog.payload["tools"][0]["parameters"]["properties"]["text"]["type"] == "string"


# Concurrent writers --------------------------------------------------------------------------


def _write(thread: Thread, op: str, index: int) -> None:
    if op == "emit":
        ThreadState(thread).emit("tick", index)
    elif op == "kv":
        value_set(thread=thread, key=f"k{index % 3}", value=index)
    elif op == "message":
        message_inject(thread=thread, role="user", content=f"m{index}")
    else:
        with contextlib.suppress(RuntimeError):
            _rolled_back(lambda: ThreadState(thread).emit("lost", index))


def _race(thread: Thread, plan: list[list[str]]) -> None:
    """One thread per writer, all released at once; each runs its ops in order."""
    barrier = threading.Barrier(len(plan))
    errors: list[BaseException] = []

    def run(ops: list[str], writer: int) -> None:
        try:
            barrier.wait()
            for step, op in enumerate(ops):
                _write(thread, op, writer * 100 + step)
        except BaseException as error:
            errors.append(error)
        finally:
            connection.close()

    workers = [ContextThread(target=run, args=(ops, n)) for n, ops in enumerate(plan)]
    for worker in workers:
        worker.start()
    for worker in workers:
        worker.join()
    assert errors == []


OPS = st.sampled_from(["emit", "kv", "message", "rollback"])


@pytest.mark.django_db(transaction=True)
@settings(
    max_examples=6,
    deadline=None,
    phases=[Phase.explicit, Phase.generate],  # shrinking races is slow and rarely clearer
    suppress_health_check=[HealthCheck.function_scoped_fixture, HealthCheck.too_slow],
)
@given(plan=st.lists(st.lists(OPS, min_size=1, max_size=4), min_size=20, max_size=20))
def test_twenty_concurrent_writers_leave_a_gap_free_unique_sequence(
    tenant: Tenant, plan: list[list[str]]
) -> None:
    thread = make_thread(tenant)

    _race(thread, plan)

    committed = sum(op != "rollback" for ops in plan for op in ops)
    sequences = [sequence for sequence, _ in _log(thread)]
    assert sequences == list(range(1, committed + 1))
    assert not Event.objects.filter(thread=thread, type="custom", payload__name="lost").exists()
    # The sender thread (channels-redis names use ``random``) rests before the next example.
    assert broadcast_flush()


@pytest.mark.django_db(transaction=True)
def test_twenty_concurrent_flows_and_a_writer_keep_every_threads_log_gap_free(
    engine: Engine,  # noqa: F811
    settings: Any,
) -> None:
    settings.FLOWS_PER_TENANT = 20  # all twenty flows run at once in this process
    engine.define(
        prompts=[prompt("helper", tools=["echo"])],
        agents=[{"name": "helper", "side_a": {"prompt": "helper"}}],
    )
    threads = [engine.thread("helper") for _ in range(20)]
    for _ in threads:
        engine.script.tool_calls([{"name": "echo", "arguments": {"text": "hi"}}]).text("done")
    for thread in threads:
        engine.send(thread, "go")
    barrier = threading.Barrier(len(threads) + 1)
    errors: list[BaseException] = []

    def in_thread(work: Callable[[], object]) -> threading.Thread:
        def run() -> None:
            try:
                barrier.wait()
                work()
            except BaseException as error:
                errors.append(error)
            finally:
                connection.close()

        return ContextThread(target=run)

    def write_everywhere() -> None:
        for round_ in range(3):
            for thread in threads:
                value_set(thread=thread, key="round", value=round_)

    workers = [in_thread(functools.partial(engine.drive, thread)) for thread in threads]
    workers.append(in_thread(write_everywhere))
    for worker in workers:
        worker.start()
    for worker in workers:
        worker.join(timeout=120)

    assert errors == []
    for thread in threads:
        log = _log(thread)
        assert [sequence for sequence, _ in log] == list(range(1, len(log) + 1))
        kinds = [kind for _, kind in log]
        assert kinds.count("kv.changed") == 3
        assert kinds[-1] in {"turn.completed", "turn.failed", "kv.changed"}
        assert kinds.count("turn.started") == 1


def test_an_event_for_a_deleted_thread_is_dropped(thread: Thread) -> None:
    stale = Thread.objects.get(pk=thread.pk)
    Thread.objects.filter(pk=thread.pk).delete()

    assert publish(stale, "custom", {"name": "late", "data": None}) is None
    assert not Event.objects.filter(thread_id=thread.pk).exists()
    assert not EventCounter.objects.filter(thread_id=thread.pk).exists()


@pytest.mark.django_db(transaction=True)
def test_a_new_kv_key_waiting_on_the_event_counter_lets_the_holder_commit(tenant: Tenant) -> None:
    """Lock order: a transaction that holds the thread's event counter and commits rows that
    reference the thread (their foreign keys are checked at commit, with KEY SHARE on the
    thread row) must not be blocked by a KV writer that locked the thread row to create a key
    and now waits for that counter: the two would deadlock."""
    thread = make_thread(tenant)
    holding = threading.Event()
    errors: list[BaseException] = []

    def holder() -> None:
        try:
            with transaction.atomic():
                log_create(thread=thread, kind="note", data={"n": 1})  # a row referencing it
                publish(thread, "custom", {"name": "held", "data": None})  # the counter
                holding.set()
                time.sleep(0.5)  # the writer locks the thread row and waits for the counter
        except BaseException as error:
            errors.append(error)
        finally:
            connection.close()

    def writer() -> None:
        try:
            holding.wait(5)
            value_set(thread=thread, key="fresh", value=1)  # a new key: locks the thread row
        except BaseException as error:
            errors.append(error)
        finally:
            connection.close()

    runs = [ContextThread(target=holder), ContextThread(target=writer)]
    for run in runs:
        run.start()
    for run in runs:
        run.join(30)

    assert errors == []
    assert [type for _, type in _log(thread)][-2:] == ["custom", "kv.changed"]

"""The execution model end to end (ARCHITECTURE §5): real Celery worker processes, the real
broker, PostgreSQL and Redis, and a stored scripted model (the only thing a worker process
can answer from).

Two workers serve the module: ``main`` (concurrency 8) runs what this process sends, and a
spare with a short lock TTL on a queue of its own is the first worker of the crash tests,
which pause or kill it mid-flow for ``main`` to take over. Data is committed
(``transaction=True``) so the workers see it.
"""

from __future__ import annotations

import json
import time
from collections.abc import Callable, Iterator, Sequence
from concurrent.futures import ThreadPoolExecutor
from itertools import chain, pairwise
from pathlib import Path
from typing import Any, TypeVar

import pytest
from django.db import connection, transaction
from rest_framework.test import APIClient

from agents.bundles import bundle_import
from common.tenant_wall import tenant_scope
from tenancy.models import Tenant
from tests.factories import make_tenant
from tests.support import current_database_url
from tests.worker import (
    Worker,
    log_on_failure,
    private_queue,
    tasks_routed_to,
    wait_until,
    worker_start,
)
from threads.models import Log, Message, Thread, Turn
from threads.runtime.driver import threads_sweep
from threads.services.fence import StaleFence, fence_acquire, fence_retire, fence_take
from threads.services.inbox import message_queue
from threads.services.lock import lock_is_held
from threads.services.messages import message_inject
from threads.services.threads import thread_create

T = TypeVar("T")

SETTLE_TIMEOUT_S = 30.0
CRASH_TTL_MS = 2000  # the lock TTL of the workers that crash or stall
SLOW_MS = 4000  # a model call long enough to crash a worker in the middle of it
ROUND_S = 0.9  # between the bursts of the FIFO test: long enough for a drive to end


@pytest.fixture(scope="module")
def _workers(
    django_db_setup: None, tmp_path_factory: pytest.TempPathFactory
) -> Iterator[dict[str, Worker]]:
    """The module's workers, started together (starting is mostly imports): ``main``
    (concurrency 8), which this process sends its tasks to, and ``spare``."""
    directory = tmp_path_factory.mktemp("workers")
    workers = {
        "main": worker_start(
            queue=private_queue(), database_url=current_database_url(),
            log_path=directory / "main.log", concurrency=8,
        ),
        "spare": _spare_start(directory / "spare-0.log"),
    }  # fmt: skip
    try:
        for started in workers.values():
            started.wait_ready()
        with tasks_routed_to(workers["main"].queue):
            yield workers
    finally:
        for started in workers.values():
            started.stop()


def _spare_start(log_path: Path) -> Worker:
    return worker_start(
        queue=private_queue(), database_url=current_database_url(), log_path=log_path,
        lock_ttl_ms=CRASH_TTL_MS,
    )  # fmt: skip


@pytest.fixture
def worker(_workers: dict[str, Worker], request: pytest.FixtureRequest) -> Iterator[Worker]:
    """The worker that runs this process's tasks."""
    with log_on_failure(request, _workers["main"]) as main:
        yield main


@pytest.fixture
def first(
    _workers: dict[str, Worker], request: pytest.FixtureRequest, tmp_path: Path
) -> Iterator[Worker]:
    """A worker with lock TTL CRASH_TTL_MS on a queue of its own, for a test to pause or
    kill; one that a test killed is replaced for the next."""
    if not _workers["spare"].alive:
        _workers["spare"].stop()
        _workers["spare"] = _spare_start(tmp_path / "spare.log")
        _workers["spare"].wait_ready()
    with log_on_failure(request, _workers["spare"]) as spare:
        yield spare
    spare.resume()


def _define(
    tenant: Tenant,
    rules: Sequence[dict[str, Any]],
    tools: Sequence[str] = (),
    code_tools: Sequence[dict[str, Any]] = (),
) -> None:
    """Agent ``chat``: side A is prompt ``p`` on the scripted model ``m`` answering by
    ``rules``; side B is the human. Importing again replaces the definitions."""
    bundle_import(
        tenant=tenant,
        document={
            "version": 1,
            "code_tools": list(code_tools),
            "models": [
                {"name": "m", "provider": "scripted", "model_id": "scripted",
                 "config": {"rules": list(rules)}},
            ],
            "prompts": [
                {"name": "p", "tool_description": "The chat prompt", "prompt": "You help.",
                 "model": "m", "include_chat": True, "include_past_tools": True,
                 "tools": list(tools)},
            ],
            "agents": [{"name": "chat", "side_a": {"prompt": "p"}}],
        },
    )  # fmt: skip


def _wait_until(
    probe: Callable[[], T | None], *, what: str, worker: Worker, timeout: float = SETTLE_TIMEOUT_S
) -> T:
    """:func:`tests.worker.wait_until` with this module's timeout."""
    return wait_until(probe, what=what, worker=worker, timeout=timeout)


def _settled(thread: Thread) -> bool:
    """The thread waits for its human, its inbox is empty and every flow that called a
    model has logged its end.

    The reads share one snapshot: read one by one, a flow could take the last queued items
    between the status read and the inbox read, and the thread would look settled while
    that flow is still writing their messages.
    """
    with transaction.atomic():
        with connection.cursor() as cursor:
            cursor.execute("SET TRANSACTION ISOLATION LEVEL REPEATABLE READ")
        thread.refresh_from_db()
        if thread.status == "failed":
            raise AssertionError(f"thread {thread.pk} failed: {_history(thread)}")
        if thread.status != "waiting_input":
            return False
        if Turn.objects.filter(thread=thread, status="queued").exists():
            return False
        logs = Log.objects.filter(thread=thread)
        ended = set(logs.filter(kind="flow").values_list("data__flow_id", flat=True))
        called = set(logs.filter(kind="llm").values_list("data__flow_id", flat=True))
        return bool(ended) and called <= ended


def _wait_settled(thread: Thread, worker: Worker) -> None:
    _wait_until(lambda: _settled(thread), what=f"thread {thread.pk} to settle", worker=worker)


def _history(thread: Thread) -> list[tuple[str, str, str, str | None]]:
    rows = Message.objects.filter(thread=thread).order_by("seq")
    return [(row.role, row.side, row.status, row.content) for row in rows]


def _flows(thread: Thread | None = None) -> list[dict[str, Any]]:
    """The ``flow`` logs' data, oldest start first."""
    logs = Log.objects.filter(kind="flow")
    if thread is not None:
        logs = logs.filter(thread=thread)
    return sorted((log.data for log in logs), key=lambda data: data["started_at"])


def _most_at_once(flows: Sequence[dict[str, Any]]) -> int:
    """The largest number of flows running at one instant."""
    edges = sorted(
        [(flow["started_at"], 1) for flow in flows] + [(flow["ended_at"], -1) for flow in flows]
    )
    running = most = 0
    for _, step in edges:
        running += step
        most = max(most, running)
    return most


@pytest.mark.django_db(transaction=True)
def test_message_posted_over_http_is_answered_by_a_worker_through_a_tool_call(
    tenant: Tenant, worker: Worker, client_for: Callable[..., APIClient]
) -> None:
    _define(
        tenant,
        rules=[
            {"when": {"last_tool": "count_words"},
             "respond": {"text": "That is {last_tool_result} words."}},
            {"when": {"last_role": "user"},
             "respond": {"tool_calls": [{"name": "count_words",
                                         "arguments": {"text": "{last_user_message}"}}],
                         "delay_ms": 300}},
        ],
        tools=["count_words"],
    )  # fmt: skip
    thread = thread_create(tenant=tenant, agent_name="chat")
    client = client_for(tenant)

    response = client.post(
        f"/api/v1/threads/{thread.id}/messages",
        {"content": "please count these six words now"},
        format="json",
    )
    answered = Message.objects.filter(thread=thread, role="assistant", status="completed")
    answered_before_202 = answered.count()

    assert response.status_code == 202
    body = response.json()
    work = Turn.objects.get(thread=thread)
    assert (body["status"], body["kind"], body["queue_id"]) == ("queued", "message", str(work.id))
    assert body["message_id"] == work.payload["message_id"]
    assert answered_before_202 == 0
    _wait_settled(thread, worker)
    rows = list(Message.objects.filter(thread=thread).order_by("seq"))
    assert _history(thread) == [
        ("user", "b", "completed", "please count these six words now"),
        ("assistant", "a", "completed", None),
        ("tool", "a", "completed", "6"),
        ("assistant", "a", "completed", "That is 6 words."),
    ]
    assert str(rows[0].id) == body["message_id"]
    calls = rows[1].tool_calls or []
    assert [(c["function"]["name"], json.loads(c["function"]["arguments"])) for c in calls] == [
        ("count_words", {"text": "please count these six words now"})
    ]
    assert (rows[2].name, rows[2].tool_call_id, rows[2].tool_status) == (
        "count_words", calls[0]["id"], "success",
    )  # fmt: skip
    assert thread.status == "waiting_input"
    work.refresh_from_db()
    logs = Log.objects.filter(thread=thread).order_by("created_at")
    assert [(log.kind, log.data["fence"]) for log in logs] == [
        ("llm", work.fence), ("tool", work.fence),
        ("llm", work.fence), ("flow", work.fence),
    ]  # fmt: skip


@pytest.mark.django_db(transaction=True)
def test_a_worker_runs_a_typescript_code_tool_in_the_sandbox(
    tenant: Tenant, worker: Worker
) -> None:
    _define(
        tenant,
        rules=[
            {"when": {"last_tool": "shout"}, "respond": {"text": "{last_tool_result}"}},
            {"when": {"last_role": "user"},
             "respond": {"tool_calls": [{"name": "shout",
                                         "arguments": {"text": "{last_user_message}"}}]}},
        ],
        tools=["shout"],
        code_tools=[{"name": "shout", "description": "Shouts the text",
                     "args_schema": {"type": "object", "properties": {"text": {"type": "string"}}},
                     "source": "export default ({ text }: { text: string }): string =>\n"
                               "  text.toUpperCase() + '!';"}],
    )  # fmt: skip
    thread = thread_create(tenant=tenant, agent_name="chat")

    message_queue(thread=thread, role="user", content="hello there")
    _wait_settled(thread, worker)

    assert _history(thread) == [
        ("user", "b", "completed", "hello there"),
        ("assistant", "a", "completed", None),
        ("tool", "a", "completed", "HELLO THERE!"),
        ("assistant", "a", "completed", "HELLO THERE!"),
    ]


@pytest.mark.django_db(transaction=True)
def test_fifty_concurrent_messages_are_persisted_once_in_fifo_order_one_flow_at_a_time(
    tenant: Tenant, worker: Worker
) -> None:
    _define(tenant, rules=[{"respond": {"text": "ok: {last_user_message}", "delay_ms": 250}}])
    thread = thread_create(tenant=tenant, agent_name="chat")

    start = time.monotonic() + 0.1

    def send(sender: int) -> list[Turn]:
        """One message in each of five bursts, ROUND_S apart: the ten senders race one
        another and the flow of the previous burst."""
        try:
            sent = []
            for burst in range(5):
                time.sleep(max(0.0, start + burst * ROUND_S + sender * 0.025 - time.monotonic()))
                content = f"message {burst}.{sender}"
                with tenant_scope(tenant.pk):  # as the API posts it, for the thread's tenant
                    sent.append(message_queue(thread=thread, role="user", content=content))
            return sent
        finally:
            connection.close()

    with ThreadPoolExecutor(max_workers=10) as pool:
        works = sorted(chain.from_iterable(pool.map(send, range(10))), key=lambda work: work.id)
    _wait_settled(thread, worker)

    rows = list(Message.objects.filter(thread=thread).order_by("seq"))
    users = [row for row in rows if row.role == "user"]
    assert [str(row.id) for row in users] == [work.payload["message_id"] for work in works]
    assert [row.content for row in users] == [work.payload["content"] for work in works]
    flows = _flows(thread)
    assert len(flows) > 1
    fences = [flow["fence"] for flow in flows]
    consumed = Turn.objects.filter(thread=thread).values_list("fence", flat=True)
    assert len(consumed) == 50
    assert set(consumed) <= set(fences)
    assert all(earlier["ended_at"] <= later["started_at"] for earlier, later in pairwise(flows))
    assert fences == sorted(fences)
    assert {flow["reason"] for flow in flows} == {"stop_on_response"}
    fence_of = {flow["flow_id"]: flow["fence"] for flow in flows}
    llm = [log.data for log in Log.objects.filter(thread=thread, kind="llm")]
    assert len(llm) == len(flows)
    assert all(data["fence"] == fence_of[data["flow_id"]] for data in llm)
    answers = [(index, row) for index, row in enumerate(rows) if row.role == "assistant"]
    assert len(answers) == len(flows)
    assert all(
        (row.status, row.content) == ("completed", f"ok: {rows[index - 1].content}")
        for index, row in answers
    )
    assert rows[-1].role == "assistant"


@pytest.mark.django_db(transaction=True)
def test_twenty_threads_run_their_flows_in_parallel(tenant: Tenant, worker: Worker) -> None:
    _define(tenant, rules=[{"respond": {"text": "done", "delay_ms": 500}}])
    threads = [thread_create(tenant=tenant, agent_name="chat") for _ in range(20)]

    started = time.monotonic()
    for thread in threads:
        message_queue(thread=thread, role="user", content="go")
    for thread in threads:
        _wait_settled(thread, worker)
    elapsed = time.monotonic() - started

    assert [_history(thread) for thread in threads] == [
        [("user", "b", "completed", "go"), ("assistant", "a", "completed", "done")]
    ] * 20
    flows = _flows()
    assert len(flows) == 20
    assert 2 <= _most_at_once(flows) <= 8
    assert elapsed < 20 * 0.5 / 2, f"20 flows of 0.5 s took {elapsed:.1f} s"


def _start_slow_flow(tenant: Tenant, worker: Worker) -> tuple[Thread, Turn]:
    """A thread whose flow ``worker`` runs and is now inside a model call of SLOW_MS; the
    model then answers fast "answer from B" to whoever asks next."""
    _define(tenant, rules=[{"respond": {"text": "answer from A", "delay_ms": SLOW_MS}}])
    thread = thread_create(tenant=tenant, agent_name="chat")
    with tasks_routed_to(worker.queue):
        work = message_queue(thread=thread, role="user", content="hello")
    _wait_until(
        lambda: Message.objects.filter(thread=thread, role="assistant", status="pending").exists(),
        what="the first worker's pending answer",
        worker=worker,
        timeout=10,
    )
    _define(tenant, rules=[{"respond": {"text": "answer from B"}}])
    return thread, work


def _sweep_after_lock_expired(thread: Thread, worker: Worker) -> None:
    """Once the crashed holder's lock expired, the sweep hands the thread to ``worker``."""
    _wait_until(
        lambda: not lock_is_held(tenant_id=thread.tenant_id, thread_id=thread.pk),
        what="the first worker's lock to expire",
        worker=worker,
        timeout=CRASH_TTL_MS / 1000 + 5,
    )
    assert threads_sweep() == 1


def _assert_finished_once_by_b(thread: Thread, work: Turn, *, fence: int = 2) -> None:
    """One user message, one answer (B's), nothing pending; A's fence (1) took the turn,
    B's flow resumed it with ``fence`` and recorded the takeover as an incident."""
    thread.refresh_from_db()
    work.refresh_from_db()
    assert _history(thread) == [
        ("user", "b", "completed", "hello"),
        ("assistant", "a", "completed", "answer from B"),
    ]
    assert (thread.status, thread.fence, work.fence) == ("waiting_input", fence, 1)
    logs = Log.objects.filter(thread=thread).order_by("created_at")
    assert [(log.kind, log.data["fence"]) for log in logs] == [
        ("incident", fence), ("llm", fence), ("flow", fence),
    ]  # fmt: skip
    assert (work.status, work.outcome) == ("completed", "stop_on_response")


@pytest.mark.django_db(transaction=True)
def test_paused_worker_that_lost_its_thread_cannot_write_once_it_resumes(
    tenant: Tenant, worker: Worker, first: Worker
) -> None:
    thread, work = _start_slow_flow(tenant, first)
    first.pause()
    _sweep_after_lock_expired(thread, worker)
    _wait_settled(thread, worker)
    first.resume()
    first.wait_for_log("this worker stops writing", timeout=SLOW_MS / 1000 + 5)

    _assert_finished_once_by_b(thread, work)
    assert f"thread {thread.pk}: fence 1 of thread {thread.pk} is stale" in first.log()


@pytest.mark.django_db(transaction=True)
def test_worker_whose_lock_expired_unclaimed_stops_writing_and_the_sweep_finishes_its_flow(
    tenant: Tenant, worker: Worker, first: Worker
) -> None:
    thread, work = _start_slow_flow(tenant, first)
    first.pause()
    _wait_until(
        lambda: not lock_is_held(tenant_id=thread.tenant_id, thread_id=thread.pk),
        what="the paused worker's lock to expire",
        worker=first,
        timeout=CRASH_TTL_MS / 1000 + 5,
    )
    first.resume()
    first.wait_for_log("this worker stops writing", timeout=SLOW_MS / 1000 + 5)
    thread.refresh_from_db()
    assert (thread.status, thread.fence) == ("running", 2)
    assert _history(thread) == [
        ("user", "b", "completed", "hello"),
        ("assistant", "a", "pending", None),
    ]

    assert threads_sweep() == 1
    _wait_settled(thread, worker)

    _assert_finished_once_by_b(thread, work, fence=3)
    assert f"thread {thread.pk}: fence 1 of thread {thread.pk} is stale" in first.log()


@pytest.mark.django_db(transaction=True)
def test_flow_of_a_killed_worker_is_finished_exactly_once_by_another_worker(
    tenant: Tenant, worker: Worker, first: Worker
) -> None:
    thread, work = _start_slow_flow(tenant, first)
    first.kill()

    _sweep_after_lock_expired(thread, worker)
    _wait_settled(thread, worker)

    _assert_finished_once_by_b(thread, work)
    assert f"thread {thread.pk}: taking over a turn whose worker stopped" in worker.log()


@pytest.mark.django_db
def test_write_with_a_fence_that_a_new_holder_superseded_is_refused(thread: Thread) -> None:
    old, _ = fence_acquire(thread=thread)
    new, _ = fence_acquire(thread=thread)

    with pytest.raises(StaleFence):
        message_inject(thread=thread, role="assistant", content="late", fence=old)

    assert new == old + 1
    assert not Message.objects.filter(thread=thread).exists()
    message_inject(thread=thread, role="assistant", content="current", fence=new)
    assert _history(thread) == [("assistant", "", "completed", "current")]


@pytest.mark.django_db
def test_taking_the_fence_loads_the_thread_and_its_tenant_as_the_orm_would(
    thread: Thread, tenant: Tenant, django_assert_num_queries: Any
) -> None:
    Thread.objects.filter(pk=thread.pk).update(arguments={"topic": "tea"}, tags=["x"])
    message_queue(thread=thread, role="user", content="hello")

    taken = fence_take(thread_id=thread.pk, tenant_id=tenant.pk)

    assert taken is not None
    loaded, fence, next_turn_id = taken
    expected = Thread.objects.select_related("tenant").get(pk=thread.pk)
    assert (fence, next_turn_id) == (expected.fence, Turn.objects.get(thread=thread).pk)
    fields = [field.attname for field in Thread._meta.concrete_fields]
    assert [getattr(loaded, name) for name in fields] == [getattr(expected, n) for n in fields]
    assert loaded.arguments == {"topic": "tea"}
    tenant_fields = [field.attname for field in Tenant._meta.concrete_fields]
    with django_assert_num_queries(0):
        attached = loaded.tenant
    assert [bytes(v) if isinstance(v, memoryview) else v
            for v in (getattr(attached, n) for n in tenant_fields)] == [
        bytes(v) if isinstance(v, memoryview) else v
        for v in (getattr(expected.tenant, n) for n in tenant_fields)
    ]  # fmt: skip


@pytest.mark.django_db
def test_taking_the_fence_of_another_tenants_thread_finds_nothing(thread: Thread) -> None:
    other = make_tenant()

    assert fence_take(thread_id=thread.pk, tenant_id=other.pk) is None
    assert Thread.objects.get(pk=thread.pk).fence == thread.fence


@pytest.mark.django_db
def test_retired_fence_refuses_its_holders_writes_and_spares_a_newer_holder(
    thread: Thread,
) -> None:
    lost, _ = fence_acquire(thread=thread)

    assert fence_retire(thread=thread, fence=lost) is True
    with pytest.raises(StaleFence):
        message_inject(thread=thread, role="assistant", content="late", fence=lost)
    newer, _ = fence_acquire(thread=thread)
    assert fence_retire(thread=thread, fence=lost) is False
    thread.refresh_from_db()
    assert (thread.fence, newer) == (lost + 2, lost + 2)
    assert not Message.objects.filter(thread=thread).exists()

"""Turns end to end (submit_turn and its strategies, wait, stream, cancel, remove, promote,
Idempotency-Key, a lost turn resumed): real Celery worker processes run the turns, a real
uvicorn server answers ``wait`` and ``stream`` (the ASGI path, fed by the workers' events
through Redis), PostgreSQL and Redis are real, and a stored scripted model answers.

Turns are submitted in this process (the DRF test client), whose Celery tasks go to the
module's ``main`` worker: the server's tasks would go to the shared default queue. The
spare worker, with a short lock TTL, is the one the kill test kills. Data is committed
(``transaction=True``) so the workers and the server see it.
"""

from __future__ import annotations

import contextlib
import http.client
import json
import threading
import time
from collections.abc import Callable, Iterator, Sequence
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass
from itertools import pairwise
from pathlib import Path
from typing import Any, TypeVar

import pytest
from django.db import connection
from rest_framework.test import APIClient

from agents.bundles import bundle_import
from config.launcher import background_server
from tenancy.models import Tenant
from tests.factories import make_api_key
from tests.replay.replays import assert_replays
from tests.support import current_database_url, server_warm_up
from tests.worker import (
    Worker,
    log_on_failure,
    private_queue,
    tasks_routed_to,
    wait_until,
    worker_start,
)
from threads.events import envelope_of
from threads.models import TURN_TERMINAL, Event, Log, Message, Thread, Turn
from threads.runtime.driver import threads_sweep
from threads.services.threads import thread_create

pytestmark = pytest.mark.django_db(transaction=True)

T = TypeVar("T")
Json = dict[str, Any]

TIMEOUT_S = 30.0
CRASH_TTL_MS = 2000  # the lock TTL of the worker the kill test kills
SLOW_MS = 1500  # a model call that is surely still running when the test acts on it
LONG_MS = 4000  # a model call a cancel must cut short (the test fails if it runs out)
ANSWER = "ok: {last_user_message}"
DONE = "stop_on_response"  # the outcome of a turn whose model answered the human


# Fixtures ------------------------------------------------------------------------------------


@dataclass
class Services:
    workers: dict[str, Worker]
    port: int


@pytest.fixture(scope="module")
def _services(
    django_db_setup: None, tmp_path_factory: pytest.TempPathFactory
) -> Iterator[Services]:
    """The module's processes, started together: worker ``main`` (concurrency 8), which
    this process and the server send their tasks to, the ``spare`` worker and a uvicorn
    server."""
    directory = tmp_path_factory.mktemp("workers")
    workers = {
        "main": worker_start(
            queue=private_queue(), database_url=current_database_url(),
            log_path=directory / "main.log", concurrency=8,
        ),
        "spare": _spare_start(directory / "spare-0.log"),
    }  # fmt: skip
    try:
        served = {"DATABASE_URL": current_database_url(), "CELERY_QUEUE": workers["main"].queue}
        with background_server(served) as (port, _pid):
            server_warm_up(port, timeout=TIMEOUT_S)
            for started in workers.values():
                started.wait_ready()
            with tasks_routed_to(workers["main"].queue):
                yield Services(workers, port)
    finally:
        for started in workers.values():
            started.stop()


def _spare_start(log_path: Path) -> Worker:
    return worker_start(
        queue=private_queue(), database_url=current_database_url(), log_path=log_path,
        lock_ttl_ms=CRASH_TTL_MS,
    )  # fmt: skip


@pytest.fixture
def worker(_services: Services, request: pytest.FixtureRequest) -> Iterator[Worker]:
    """The worker that runs this process's tasks."""
    with log_on_failure(request, _services.workers["main"]) as main:
        yield main


@pytest.fixture
def first(_services: Services, request: pytest.FixtureRequest, tmp_path: Path) -> Iterator[Worker]:
    """A worker with lock TTL CRASH_TTL_MS on a queue of its own, for a test to kill; one
    that a test killed is replaced for the next."""
    workers = _services.workers
    if not workers["spare"].alive:
        workers["spare"].stop()
        workers["spare"] = _spare_start(tmp_path / "spare.log")
        workers["spare"].wait_ready()
    with log_on_failure(request, workers["spare"]) as spare:
        yield spare
    spare.resume()


@dataclass
class Api:
    """The tenant's API: ``client`` in this process (its tasks reach ``main``), and the
    uvicorn server on ``port`` for the calls that wait (wait, stream)."""

    client: APIClient
    key: str
    port: int

    def submit(
        self, thread: Thread, content: str, strategy: str = "enqueue", **headers: str
    ) -> Any:
        body = {"input": {"content": content, "role": "user"}, "multitask_strategy": strategy,
                "metadata": {}}  # fmt: skip
        return self.client.post(
            f"/api/v1/threads/{thread.id}/turns", body, format="json", headers=headers
        )

    def accepted(self, thread: Thread, content: str, strategy: str = "enqueue") -> Json:
        response = self.submit(thread, content, strategy)
        assert response.status_code == 202, response.content
        body: Json = response.json()
        return body

    def turn(self, turn_id: str) -> Json:
        response = self.client.get(f"/api/v1/turns/{turn_id}")
        assert response.status_code == 200, response.content
        body: Json = response.json()
        return body

    def read_model(self, thread: Thread) -> Json:
        response = self.client.get(f"/api/v1/threads/{thread.id}")
        assert response.status_code == 200, response.content
        body: Json = response.json()
        return body

    def served(self, path: str, *, timeout: float = TIMEOUT_S + 10) -> tuple[int, bytes]:
        """GET ``path`` from the uvicorn server: (status, body)."""
        with self._server(timeout) as server:
            server.request("GET", path, headers=self._headers("application/json"))
            response = server.getresponse()
            return response.status, response.read()

    def submit_served(
        self, thread: Thread, content: str, *, timeout: float, **headers: str
    ) -> tuple[int, Json, str | None]:
        """``POST …/turns/wait`` on the uvicorn server: (status, body, Idempotent-Replayed)."""
        body = json.dumps({"input": {"content": content}})
        with self._server(timeout + 10) as server:
            server.request(
                "POST", f"/api/v1/threads/{thread.id}/turns/wait?timeout={timeout}", body=body,
                headers={**self._headers("application/json"),
                         "Content-Type": "application/json", **headers},
            )  # fmt: skip
            response = server.getresponse()
            return (
                response.status,
                json.loads(response.read()),
                response.getheader("Idempotent-Replayed"),
            )

    def wait(self, turn_id: str, timeout: float = TIMEOUT_S) -> Json:
        status, body = self.served(f"/api/v1/turns/{turn_id}/wait?timeout={timeout}")
        assert status == 200, body
        answer: Json = json.loads(body)
        return answer

    @contextlib.contextmanager
    def stream(self, turn_id: str) -> Iterator[Iterator[Frame]]:
        """The turn's Server-Sent Events from the server, as they arrive; the iterator ends
        when the server ends the stream."""
        with self._server(TIMEOUT_S) as server:
            server.request(
                "GET", f"/api/v1/turns/{turn_id}/stream",
                headers=self._headers("text/event-stream"),
            )  # fmt: skip
            response = server.getresponse()
            assert response.status == 200, response.read()
            assert response.getheader("Content-Type") == "text/event-stream"
            yield _frames(response)

    def _headers(self, accept: str) -> dict[str, str]:
        return {"Authorization": f"Bearer {self.key}", "Accept": accept}

    @contextlib.contextmanager
    def _server(self, timeout: float) -> Iterator[http.client.HTTPConnection]:
        server = http.client.HTTPConnection("127.0.0.1", self.port, timeout=timeout)
        try:
            yield server
        finally:
            server.close()


@pytest.fixture
def api(tenant: Tenant, _services: Services) -> Api:
    key = make_api_key(tenant).secret
    client = APIClient()
    client.credentials(HTTP_AUTHORIZATION=f"Bearer {key}")
    return Api(client=client, key=key, port=_services.port)


# Helpers -------------------------------------------------------------------------------------


@dataclass(frozen=True)
class Frame:
    """One Server-Sent Event: its ``id`` (None for an ephemeral event), ``event`` and the
    envelope in ``data``."""

    id: int | None
    event: str
    data: Json


def _frames(response: http.client.HTTPResponse) -> Iterator[Frame]:
    """The frames of an event stream (``retry`` and comments skipped) until it ends."""
    fields: dict[str, str] = {}
    for raw in iter(response.readline, b""):
        line = raw.decode().rstrip("\n")
        if not line:
            if "data" in fields:
                number = fields.get("id")
                data = json.loads(fields["data"])
                yield Frame(int(number) if number else None, fields["event"], data)
            fields = {}
        elif not line.startswith(":"):
            name, _, value = line.partition(": ")
            fields[name] = value


def _define(tenant: Tenant, rules: Sequence[Json], streaming: Json | None = None) -> None:
    """Agent ``chat``: side A is prompt ``p`` on the scripted model ``m`` answering by
    ``rules``; side B is the human. Importing again replaces the definitions."""
    config: Json = {"rules": list(rules)}
    if streaming is not None:
        config["streaming"] = streaming
    bundle_import(
        tenant=tenant,
        document={
            "version": 1,
            "models": [{"name": "m", "provider": "scripted", "model_id": "scripted",
                        "config": config}],
            "prompts": [{"name": "p", "tool_description": "The chat prompt",
                         "prompt": "You help.", "model": "m", "include_chat": True}],
            "agents": [{"name": "chat", "side_a": {"prompt": "p"}}],
        },
    )  # fmt: skip


def _slow_then_fast(tenant: Tenant, slow_ms: int = SLOW_MS, fast_ms: int = 50) -> None:
    """A message containing "slow" is answered after ``slow_ms``, any other after
    ``fast_ms``; both echo it."""
    _define(
        tenant,
        rules=[
            {"when": {"last_user_contains": "slow"},
             "respond": {"text": ANSWER, "delay_ms": slow_ms}},
            {"respond": {"text": ANSWER, "delay_ms": fast_ms}},
        ],
    )  # fmt: skip


def _until(
    probe: Callable[[], T | None], *, what: str, worker: Worker, timeout: float = TIMEOUT_S
) -> T:
    """:func:`tests.worker.wait_until` with this module's timeout."""
    return wait_until(probe, what=what, worker=worker, timeout=timeout)


def _ended(turn_ids: Sequence[str], worker: Worker) -> list[Turn]:
    """Wait until every turn is terminal; the turns, in the order given."""

    def probe() -> list[Turn] | None:
        rows = {str(row.pk): row for row in Turn.objects.filter(pk__in=turn_ids)}
        done = all(row.status in TURN_TERMINAL for row in rows.values())
        return (
            [rows[turn_id] for turn_id in turn_ids] if done and len(rows) == len(turn_ids) else None
        )

    return _until(probe, what=f"turns {list(turn_ids)} to end", worker=worker)


def _in_model_call(thread: Thread, worker: Worker) -> None:
    """Wait until the thread's running turn is inside its model call (its answer pending)."""
    _until(
        lambda: Message.objects.filter(thread=thread, role="assistant", status="pending").exists(),
        what="a pending answer",
        worker=worker,
        timeout=10,
    )


def _history(thread: Thread) -> list[tuple[str, str | None, str]]:
    """The thread's messages: (role, content, id of the turn that wrote it)."""
    rows = Message.objects.filter(thread=thread).order_by("seq")
    return [(row.role, row.content, str(row.turn_id)) for row in rows]


def _said(messages: Sequence[Json]) -> list[tuple[str, str | None, str]]:
    return [(message["role"], message["content"], message["status"]) for message in messages]


# Strategies ----------------------------------------------------------------------------------


def test_three_enqueued_turns_run_one_at_a_time_in_submission_order_each_with_its_answer(
    tenant: Tenant, worker: Worker, api: Api
) -> None:
    _define(tenant, rules=[{"respond": {"text": ANSWER, "delay_ms": 200}}])
    thread = thread_create(tenant=tenant, agent_name="chat")

    submitted = [api.accepted(thread, word) for word in ("one", "two", "three")]
    ids = [body["id"] for body in submitted]
    _ended(ids, worker)

    assert [(b["status"], b["strategy"], b["source"], b["kind"]) for b in submitted] == [
        ("queued", "enqueue", "submit", "message")
    ] * 3
    turns = [api.turn(turn_id) for turn_id in ids]
    assert [(turn["status"], turn["outcome"], turn["error"]) for turn in turns] == [
        ("completed", DONE, None)
    ] * 3
    waited = [api.wait(turn_id) for turn_id in ids]
    assert [_said(body["messages"]) for body in waited] == [
        [("user", word, "completed"), ("assistant", f"ok: {word}", "completed")]
        for word in ("one", "two", "three")
    ]
    assert [body["turn"]["message_ids"] for body in waited] == [
        [message["id"] for message in body["messages"]] for body in waited
    ]
    assert [body["messages"][0]["id"] for body in waited] == [b["message_id"] for b in submitted]
    assert all(turn["started_at"] < turn["ended_at"] for turn in turns)
    assert all(earlier["ended_at"] <= later["started_at"] for earlier, later in pairwise(turns)), [
        (turn["started_at"], turn["ended_at"]) for turn in turns
    ]
    listed = api.client.get(f"/api/v1/threads/{thread.id}/turns?status=completed").json()
    assert ([turn["id"] for turn in listed["results"]], listed["next"]) == (ids[::-1], None)
    assert (
        api.client.get(f"/api/v1/threads/{thread.id}/turns?status=queued").json()["results"] == []
    )
    model = api.read_model(thread)
    assert (model["status"], model["active_turn"], model["queued_turns"]) == (
        "waiting_input", None, [],
    )  # fmt: skip
    assert model["last_outcome"]["turn_id"] == ids[2]


def test_reject_while_a_turn_runs_answers_409_naming_it_and_queues_nothing(
    tenant: Tenant, worker: Worker, api: Api
) -> None:
    _slow_then_fast(tenant)
    thread = thread_create(tenant=tenant, agent_name="chat")
    running = api.accepted(thread, "slow one")["id"]
    _in_model_call(thread, worker)

    response = api.submit(thread, "second", "reject")

    assert response.status_code == 409
    error = response.json()["error"]
    assert (error["code"], error["field"]) == ("thread_busy", "multitask_strategy")
    assert error["message"] == (
        f"turn {running} is running on this thread; multitask_strategy reject refuses "
        "another until it ends"
    )
    assert [str(pk) for pk in Turn.objects.filter(thread=thread).values_list("pk", flat=True)] == [
        running
    ]
    (ended,) = _ended([running], worker)
    assert (ended.status, ended.outcome) == ("completed", DONE)
    assert Turn.objects.filter(thread=thread).count() == 1
    assert [(role, content) for role, content, _ in _history(thread)] == [
        ("user", "slow one"), ("assistant", "ok: slow one"),
    ]  # fmt: skip


def test_interrupt_cancels_the_running_turn_keeping_what_it_wrote_and_runs_the_new_one(
    tenant: Tenant, worker: Worker, api: Api
) -> None:
    _slow_then_fast(tenant, slow_ms=LONG_MS)
    thread = thread_create(tenant=tenant, agent_name="chat")
    old = api.accepted(thread, "slow one")["id"]
    _in_model_call(thread, worker)
    interrupted_at = time.monotonic()

    new = api.accepted(thread, "fast two", "interrupt")
    first, second = _ended([old, new["id"]], worker)

    assert (new["status"], new["strategy"]) == ("queued", "interrupt")
    assert time.monotonic() - interrupted_at < LONG_MS / 1000
    assert (first.status, first.outcome, first.cancel_requested) == ("cancelled", "interrupted", "")
    assert (second.status, second.outcome) == ("completed", DONE)
    assert first.ended_at is not None
    assert second.started_at is not None
    assert first.ended_at <= second.started_at
    assert _history(thread) == [
        ("user", "slow one", old),
        ("system", "Turn interrupted by a newer turn", old),
        ("user", "fast two", new["id"]),
        ("assistant", "ok: fast two", new["id"]),
    ]
    assert _said(api.wait(old)["messages"]) == [
        ("user", "slow one", "completed"),
        ("system", "Turn interrupted by a newer turn", "completed"),
    ]
    model = api.read_model(thread)
    assert (model["status"], model["last_outcome"]["turn_id"]) == ("waiting_input", new["id"])
    assert_replays(thread)


def test_rollback_cancels_the_running_turn_deleting_every_message_it_wrote(
    tenant: Tenant, worker: Worker, api: Api
) -> None:
    _slow_then_fast(tenant, slow_ms=LONG_MS)
    thread = thread_create(tenant=tenant, agent_name="chat")
    submitted = api.accepted(thread, "slow one")
    old = submitted["id"]
    _in_model_call(thread, worker)
    wrote = Message.objects.filter(thread=thread, turn_id=old).order_by("seq")
    written = [(row.role, str(row.id)) for row in wrote]
    assert [role for role, _ in written] == ["user", "assistant"]
    assert written[0][1] == submitted["message_id"]

    new = api.accepted(thread, "fast two", "rollback")
    first, second = _ended([old, new["id"]], worker)

    assert (new["status"], new["strategy"]) == ("queued", "rollback")
    assert (first.status, first.outcome) == ("cancelled", "rolled_back")
    assert (second.status, second.outcome) == ("completed", DONE)
    assert not Message.objects.filter(thread=thread, turn_id=old).exists()
    assert _history(thread) == [
        ("user", "fast two", new["id"]),
        ("assistant", "ok: fast two", new["id"]),
    ]
    waited = api.wait(old)
    assert (waited["done"], waited["messages"], waited["turn"]["message_ids"]) == (True, [], [])
    deleted = Event.objects.filter(thread=thread, type="message.deleted", turn_id=old)
    assert sorted(event.payload["id"] for event in deleted) == sorted(id for _, id in written)
    assert_replays(thread)


def test_messages_posted_while_a_turn_runs_join_it_before_its_next_model_call(
    tenant: Tenant, worker: Worker, api: Api
) -> None:
    # The first call is slow and calls a tool; two messages are posted meanwhile: the turn
    # stores them after the tool's result and answers them in its second (last) call.
    bundle_import(
        tenant=tenant,
        document={
            "version": 1,
            "models": [{"name": "m", "provider": "scripted", "model_id": "scripted",
                        "config": {"rules": [
                            {"when": {"last_user_contains": "count"},
                             "respond": {"tool_calls": [{"name": "count_words",
                                                         "arguments": {"text": "a b c"}}],
                                         "delay_ms": SLOW_MS}},
                            {"respond": {"text": ANSWER}}]}}],
            "prompts": [{"name": "p", "tool_description": "The chat prompt", "prompt": "Help.",
                         "model": "m", "include_chat": True, "include_past_tools": True,
                         "tools": ["count_words"]}],
            "agents": [{"name": "chat", "side_a": {"prompt": "p"}}],
        },
    )  # fmt: skip
    thread = thread_create(tenant=tenant, agent_name="chat")
    first = api.accepted(thread, "count these")["id"]
    _in_model_call(thread, worker)

    posted = [
        api.client.post(f"/api/v1/threads/{thread.id}/messages", {"content": text},
                        format="json").json()
        for text in ("and then this", "and finally that")
    ]  # fmt: skip
    (ended,) = _ended([first], worker)

    assert [body["turn"]["joined_turn_id"] for body in posted] == [first, first]
    assert (ended.status, ended.outcome) == ("completed", DONE)
    assert [(role, content) for role, content, _ in _history(thread)] == [
        ("user", "count these"), ("assistant", None), ("tool", "3"),
        ("user", "and then this"), ("user", "and finally that"),
        ("assistant", "ok: and finally that"),
    ]  # fmt: skip
    assert {turn_id for _, _, turn_id in _history(thread)} == {first}  # one flow wrote all
    joined = Turn.objects.filter(pk__in=[body["turn_id"] for body in posted])
    assert {(turn.status, str(turn.host_id)) for turn in joined} == {("completed", first)}
    flows = Log.objects.filter(thread=thread, kind="flow")
    calls = Log.objects.filter(thread=thread, kind="llm")
    assert (flows.count(), calls.count()) == (1, 2)
    assert_replays(thread)


# Wait and stream -----------------------------------------------------------------------------


def test_wait_on_the_server_blocks_until_the_turn_ends_and_returns_its_answer(
    tenant: Tenant, worker: Worker, api: Api
) -> None:
    _define(tenant, rules=[{"respond": {"text": ANSWER, "delay_ms": 800}}])
    thread = thread_create(tenant=tenant, agent_name="chat")
    turn_id = api.accepted(thread, "hello")["id"]
    assert Turn.objects.get(pk=turn_id).status not in TURN_TERMINAL

    started = time.monotonic()
    body = api.wait(turn_id, timeout=30)
    elapsed = time.monotonic() - started

    assert body["done"] is True
    assert (body["turn"]["id"], body["turn"]["status"], body["turn"]["outcome"]) == (
        turn_id, "completed", DONE,
    )  # fmt: skip
    assert _said(body["messages"]) == [
        ("user", "hello", "completed"), ("assistant", "ok: hello", "completed"),
    ]  # fmt: skip
    assert body["turn"]["message_ids"] == [message["id"] for message in body["messages"]]
    assert elapsed < 10


def test_wait_with_a_short_timeout_on_a_turn_queued_behind_a_slow_one_returns_not_done(
    tenant: Tenant, worker: Worker, api: Api
) -> None:
    _slow_then_fast(tenant)
    thread = thread_create(tenant=tenant, agent_name="chat")
    slow = api.accepted(thread, "slow one")["id"]
    behind = api.accepted(thread, "fast two")["id"]
    _in_model_call(thread, worker)

    started = time.monotonic()
    short = api.wait(behind, timeout=0.2)
    elapsed = time.monotonic() - started

    assert (short["done"], short["turn"]["id"], short["turn"]["status"]) == (
        False,
        behind,
        "queued",
    )
    assert (short["messages"], short["turn"]["message_ids"]) == ([], [])
    assert 0.2 <= elapsed < 1.0
    full = api.wait(behind, timeout=30)
    assert (full["done"], full["turn"]["status"]) == (True, "completed")
    assert _said(full["messages"]) == [
        ("user", "fast two", "completed"), ("assistant", "ok: fast two", "completed"),
    ]  # fmt: skip
    assert Turn.objects.get(pk=slow).status == "completed"


def test_submit_and_wait_in_one_request_answers_the_turn_it_queued_once_it_ended(
    tenant: Tenant, worker: Worker, api: Api
) -> None:
    _define(tenant, rules=[{"respond": {"text": ANSWER, "delay_ms": 300}}])
    thread = thread_create(tenant=tenant, agent_name="chat")

    status, body, replayed = api.submit_served(thread, "hello", timeout=30)

    assert (status, replayed, body["done"]) == (200, None, True)
    (turn,) = Turn.objects.filter(thread=thread)
    assert (body["turn"]["id"], body["turn"]["status"], body["turn"]["outcome"]) == (
        str(turn.pk), "completed", DONE,
    )  # fmt: skip
    assert _said(body["messages"]) == [
        ("user", "hello", "completed"), ("assistant", "ok: hello", "completed"),
    ]  # fmt: skip
    assert body["turn"]["message_ids"] == [message["id"] for message in body["messages"]]


def test_submit_and_wait_answers_not_done_when_its_timeout_passes_and_a_repeat_waits_on(
    tenant: Tenant, worker: Worker, api: Api
) -> None:
    """A repeat with the same Idempotency-Key queues nothing: it waits for the first
    request's turn."""
    _define(tenant, rules=[{"respond": {"text": ANSWER, "delay_ms": SLOW_MS}}])
    thread = thread_create(tenant=tenant, agent_name="chat")
    key = {"Idempotency-Key": "wait-1"}

    started = time.monotonic()
    status, short, replayed = api.submit_served(thread, "slowly", timeout=0.3, **key)
    elapsed = time.monotonic() - started
    again, full, replayed_again = api.submit_served(thread, "slowly", timeout=30, **key)

    assert (status, replayed, short["done"]) == (200, None, False)
    assert short["turn"]["status"] in ("queued", "running")
    assert 0.3 <= elapsed < SLOW_MS / 1000
    assert (again, replayed_again, full["done"]) == (200, "true", True)
    assert full["turn"]["id"] == short["turn"]["id"]
    assert [str(pk) for pk in Turn.objects.filter(thread=thread).values_list("pk", flat=True)] == [
        short["turn"]["id"]
    ]
    assert _said(full["messages"]) == [
        ("user", "slowly", "completed"), ("assistant", "ok: slowly", "completed"),
    ]  # fmt: skip


def _turn_events(thread: Thread, turn_id: str) -> list[Json]:
    """The stored events of the turn, as the turn's stream sends them: its own, and the
    queue changes that name it, through the event that ends it."""
    kept = []
    for event in Event.objects.filter(thread=thread).order_by("sequence"):
        payload = event.payload
        items = payload.get("items") or [payload.get("item") or {}]
        if event.turn_id == turn_id or (
            event.type == "queue.changed" and any(item.get("id") == turn_id for item in items)
        ):
            kept.append(envelope_of(event))
    return kept


def test_stream_of_a_turn_from_its_id_sends_its_events_in_order_and_ends_with_its_end(
    tenant: Tenant, worker: Worker, api: Api
) -> None:
    answer = "a streamed answer in chunks"
    _define(
        tenant,
        rules=[
            {"when": {"last_user_contains": "block"},
             "respond": {"text": "never", "delay_ms": LONG_MS}},
            {"respond": {"text": answer, "delay_ms": 100}},
        ],
        streaming={"chunk_size": 5, "chunk_delay_ms": 10},
    )  # fmt: skip
    thread = thread_create(tenant=tenant, agent_name="chat")
    blocker = api.accepted(thread, "block the thread")["id"]
    turn_id = api.accepted(thread, "hello")["id"]
    _in_model_call(thread, worker)

    with api.stream(turn_id) as frames:
        # Its first frame (replayed) shows the server follows the thread: the turn may start.
        live = [next(frames)]
        assert api.client.post(f"/api/v1/turns/{blocker}/cancel").status_code == 200
        live.extend(frames)
    with api.stream(turn_id) as frames:  # once the turn ended: its stored events, then the end
        replayed = list(frames)

    persisted = [frame for frame in live if frame.id is not None]
    assert [frame.event for frame in live] == [
        "queue.changed", "turn.started", "thread.status", "queue.changed", "message.created",
        "step.started", "message.created", "model.requested",
        *["model.delta"] * 6,
        "message.updated", "model.completed", "cost.recorded", "step.completed", "side.completed",
        "thread.status", "turn.completed",
    ]  # fmt: skip
    sequences = [frame.data["sequence"] for frame in persisted]
    assert [frame.id for frame in persisted] == sequences == sorted(set(sequences))
    assert [frame.event for frame in live] == [frame.data["type"] for frame in live]
    changes = [frame.data["payload"]["change"] for frame in live if frame.event == "queue.changed"]
    assert changes == ["added", "taken"]
    assert live[0].data["payload"]["item"]["id"] == turn_id
    assert [item["id"] for item in live[3].data["payload"]["items"]] == [turn_id]
    others = [frame.data["turn_id"] for frame in live if frame.event != "queue.changed"]
    assert others == [turn_id] * (len(live) - 2)
    ended = live[-1].data["payload"]
    assert (ended["turn_id"], ended["status"], ended["reason"]) == (turn_id, "completed", DONE)
    written = api.turn(turn_id)["message_ids"]
    created = [frame.data["payload"]["id"] for frame in live if frame.event == "message.created"]
    assert created == written
    deltas = [frame.data["payload"] for frame in live if frame.event == "model.delta"]
    assert "".join(delta["delta"] for delta in deltas) == answer
    assert {delta["message_id"] for delta in deltas} == {written[1]}
    assert [frame.data for frame in persisted] == _turn_events(thread, turn_id)
    assert [frame.data for frame in replayed] == [frame.data for frame in persisted]
    assert Turn.objects.get(pk=blocker).outcome == "cancelled"


# Cancel, remove, promote ---------------------------------------------------------------------


def test_cancel_aborts_a_running_turn_is_idempotent_and_leaves_a_finished_turn_alone(
    tenant: Tenant, worker: Worker, api: Api
) -> None:
    _slow_then_fast(tenant, slow_ms=LONG_MS)
    thread = thread_create(tenant=tenant, agent_name="chat")
    running = api.accepted(thread, "slow one")["id"]
    _in_model_call(thread, worker)
    cancelled_at = time.monotonic()

    response = api.client.post(f"/api/v1/turns/{running}/cancel")
    (ended,) = _ended([running], worker)

    assert response.status_code == 200
    assert response.json()["id"] == running
    assert time.monotonic() - cancelled_at < LONG_MS / 1000
    assert (ended.status, ended.outcome) == ("cancelled", "cancelled")
    assert _history(thread) == [
        ("user", "slow one", running),
        ("system", "Turn cancelled by user", running),
    ]
    again = api.client.post(f"/api/v1/turns/{running}/cancel")
    assert again.status_code == 200
    assert {k: again.json()[k] for k in ("status", "outcome", "ended_at")} == {
        "status": "cancelled", "outcome": "cancelled", "ended_at": ended.ended_at,
    }  # fmt: skip
    assert _history(thread)[-1] == ("system", "Turn cancelled by user", running)

    finished = api.accepted(thread, "fast two")["id"]
    _ended([finished], worker)
    before = api.turn(finished)
    after = api.client.post(f"/api/v1/turns/{finished}/cancel")
    assert after.status_code == 200
    # The turn as it was (a read by itself adds where its budgets stand).
    assert after.json() == {k: v for k, v in before.items() if k != "routing_limit_summary"}
    assert (before["status"], before["outcome"]) == ("completed", DONE)
    assert api.turn(finished) == before
    assert len(_history(thread)) == 4


def test_removed_turn_never_runs_and_a_promoted_one_runs_before_those_queued_earlier(
    tenant: Tenant, worker: Worker, api: Api
) -> None:
    _slow_then_fast(tenant)
    thread = thread_create(tenant=tenant, agent_name="chat")
    first = api.accepted(thread, "slow first")["id"]
    _in_model_call(thread, worker)
    b, c, d = (api.accepted(thread, name)["id"] for name in ("B", "C", "D"))

    removed = api.client.delete(f"/api/v1/turns/{c}")
    promoted = api.client.post(f"/api/v1/turns/{d}/promote")
    model = api.read_model(thread)
    refused = {
        "remove again": api.client.delete(f"/api/v1/turns/{c}").status_code,
        "promote removed": api.client.post(f"/api/v1/turns/{c}/promote").status_code,
        "remove running": api.client.delete(f"/api/v1/turns/{first}").status_code,
        "promote running": api.client.post(f"/api/v1/turns/{first}/promote").status_code,
    }
    turns = _ended([first, b, c, d], worker)

    assert removed.status_code == 200
    assert {k: removed.json()[k] for k in ("id", "status", "outcome", "started_at")} == {
        "id": c, "status": "cancelled", "outcome": "removed", "started_at": None,
    }  # fmt: skip
    assert promoted.status_code == 200
    assert (promoted.json()["id"], promoted.json()["status"]) == (d, "queued")
    assert refused == dict.fromkeys(refused, 409)
    assert model["active_turn"]["id"] == first
    assert [turn["id"] for turn in model["queued_turns"]] == [d, b]
    ran = sorted((turn for turn in turns if turn.started_at), key=lambda t: t.started_at or 0)
    assert [str(turn.pk) for turn in ran] == [first, d, b]
    assert [(turn.status, turn.outcome) for turn in ran] == [("completed", DONE)] * 3
    assert all(
        earlier.ended_at is not None and later.started_at is not None
        and earlier.ended_at <= later.started_at
        for earlier, later in pairwise(ran)
    )  # fmt: skip
    assert [(role, content) for role, content, _ in _history(thread)] == [
        ("user", "slow first"), ("assistant", "ok: slow first"),
        ("user", "D"), ("assistant", "ok: D"),
        ("user", "B"), ("assistant", "ok: B"),
    ]  # fmt: skip
    assert (turns[2].status, turns[2].outcome, turns[2].started_at) == (
        "cancelled",
        "removed",
        None,
    )


# Idempotency ---------------------------------------------------------------------------------


def test_twenty_concurrent_submits_with_one_idempotency_key_make_one_turn_and_one_answer(
    tenant: Tenant, worker: Worker, api: Api
) -> None:
    _define(tenant, rules=[{"respond": {"text": ANSWER, "delay_ms": 100}}])
    thread = thread_create(tenant=tenant, agent_name="chat")
    lined_up = threading.Barrier(20)

    def submit(_: int) -> tuple[int, Json, str | None]:
        try:
            client = APIClient()
            client.credentials(HTTP_AUTHORIZATION=f"Bearer {api.key}")
            body = {"input": {"content": "only once", "role": "user"},
                    "multitask_strategy": "enqueue", "metadata": {}}  # fmt: skip
            lined_up.wait(timeout=10)
            response = client.post(
                f"/api/v1/threads/{thread.id}/turns", body, format="json",
                headers={"Idempotency-Key": "k-1"},
            )  # fmt: skip
            return (
                response.status_code,
                response.json(),
                response.headers.get("Idempotent-Replayed"),
            )
        finally:
            connection.close()

    with ThreadPoolExecutor(max_workers=20) as pool:
        answers = list(pool.map(submit, range(20)))
    other = api.submit(thread, "another body", **{"Idempotency-Key": "k-1"})

    assert [status for status, _, _ in answers] == [202] * 20
    bodies = [body for _, body, _ in answers]
    assert all(body == bodies[0] for body in bodies)
    assert sorted(str(replayed) for _, _, replayed in answers) == ["None"] + ["true"] * 19
    turn_ids = [str(pk) for pk in Turn.objects.filter(thread=thread).values_list("pk", flat=True)]
    assert turn_ids == [bodies[0]["id"]]
    assert (bodies[0]["status"], bodies[0]["input"]["content"]) == ("queued", "only once")
    assert other.status_code == 409
    assert other.json()["error"]["code"] == "idempotency_key_reused"
    (ended,) = _ended(turn_ids, worker)
    assert (ended.status, ended.outcome) == ("completed", DONE)
    assert [(role, content) for role, content, _ in _history(thread)] == [
        ("user", "only once"), ("assistant", "ok: only once"),
    ]  # fmt: skip
    replay = api.submit(thread, "only once", **{"Idempotency-Key": "k-1"})
    assert (replay.status_code, replay.json(), replay.headers["Idempotent-Replayed"]) == (
        202, bodies[0], "true",
    )  # fmt: skip


# A lost turn ---------------------------------------------------------------------------------


def test_turn_of_a_killed_worker_reads_lost_and_the_sweep_completes_it_once(
    tenant: Tenant, worker: Worker, first: Worker, api: Api
) -> None:
    _define(tenant, rules=[{"respond": {"text": "too late", "delay_ms": LONG_MS}}])
    thread = thread_create(tenant=tenant, agent_name="chat")
    with tasks_routed_to(first.queue):
        turn_id = api.accepted(thread, "hello")["id"]
    _in_model_call(thread, first)
    assert api.read_model(thread)["status"] == "streaming"
    _define(tenant, rules=[{"respond": {"text": ANSWER}}])

    first.kill()
    killed = time.monotonic()
    lost = _until(
        lambda: model if (model := api.read_model(thread))["status"] == "lost" else None,
        what="the thread to read lost",
        worker=worker,
        timeout=CRASH_TTL_MS / 1000 + 5,
    )
    lost_after = time.monotonic() - killed
    assert threads_sweep() == 1
    body = api.wait(turn_id, timeout=30)

    assert lost_after <= CRASH_TTL_MS / 1000 + 3
    assert (lost["stored_status"], lost["active_turn"]["id"], lost["active_turn"]["status"]) == (
        "running", turn_id, "running",
    )  # fmt: skip
    assert lost["incidents"] == []
    assert (body["done"], body["turn"]["status"], body["turn"]["outcome"]) == (
        True,
        "completed",
        DONE,
    )
    assert _said(body["messages"]) == [
        ("user", "hello", "completed"), ("assistant", "ok: hello", "completed"),
    ]  # fmt: skip
    assert _history(thread) == [("user", "hello", turn_id), ("assistant", "ok: hello", turn_id)]
    assert Turn.objects.filter(thread=thread).count() == 1
    model = api.read_model(thread)
    assert model["status"] == "waiting_input"
    assert_replays(thread)
    assert [(i["incident"], i["turn_id"]) for i in model["incidents"]] == [("takeover", turn_id)]
    assert "taking over a turn whose worker stopped" in worker.log()
    warnings = Event.objects.filter(thread=thread, type="runtime.warning")
    assert [event.payload["code"] for event in warnings] == ["takeover"]

"""Subagents end to end (spec runtime §7-§8, DIGEST §6, §13): a real Celery worker process
runs a coordinator, its two resumable subagents and a grandchild; a real uvicorn server
relays the coordinator's events over a WebSocket; PostgreSQL, Redis and the file store are
real, and one stored scripted model answers every prompt by ``system_contains``.

The worker is ``tests.worker`` with ``--setup``, which first registers this module's two
function tools (:func:`tools_register`): a worker answers only from what its
own process has registered. This process and both subprocesses share one MEDIA_ROOT, so
files uploaded here are the files the worker copies. Data is committed
(``transaction=True``) so the worker and the server see it.
"""

from __future__ import annotations

import json
import time
from collections.abc import Callable, Iterator
from dataclasses import dataclass
from typing import Any, TypeVar

import pytest
from pytest_django.fixtures import Settings
from rest_framework.test import APIClient
from websockets.sync.client import ClientConnection, connect

from agents.bundles import bundle_import
from agents.registry import tool, use_registry
from config.launcher import background_server
from tenancy.models import Role, Tenant
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
from threads.models import TURN_TERMINAL, Event, Message, SubagentLink, Thread, ThreadFile, Turn
from threads.services.lock import lock_is_held
from threads.state import ThreadState

pytestmark = pytest.mark.django_db(transaction=True)

Json = dict[str, Any]
T = TypeVar("T")

TIMEOUT_S = 30.0
BRIEF = b"Brief: tea prices rose 4% in 2024. Check the figure before writing.\n"
BRIEF_PATH = "/attachments/brief.txt"
START = "Start the project."
RETURNED = "has returned the following result"


# Tools and definitions -----------------------------------------------------------------------


def tools_register() -> None:
    """The function tools of the scenario, into the current registry (the worker's global
    one, or a test's scoped one)."""

    @tool(description="The path of this thread's first attachment.")
    def attachment_path(state: Any) -> str:
        files = [row for row in state.readdir_file("/attachments") if not row.is_directory]
        return str(min(files, key=lambda row: (row.created_at, row.path)).path)

    @tool(
        description="Deliver the result and the files that go with it.",
        args={"type": "object", "properties": {
            "summary": {"type": "string"}, "files": {"type": "array", "items": {"type": "string"}},
        }, "required": ["summary", "files"]},
    )  # fmt: skip
    def deliver(state: Any, args: dict[str, Any]) -> str:
        return "delivered"


def _call(tool_name: str, /, **arguments: Any) -> Json:
    return {"name": tool_name, "arguments": arguments}


def _create(agent: str, message: str, label: str) -> Json:
    return _call("subagent_create", agent=agent, message=message, attachments=[BRIEF_PATH],
                 name=label)  # fmt: skip


def _rules() -> list[Json]:
    """The one model's answers, chosen by the asking prompt's system text."""
    path = "{last_tool_result}"
    coordinator, researcher = "You are the coordinator.", "You are the researcher."
    checker, writer = "You are the fact checker.", "You are the writer."
    return [
        # The coordinator: both subagents in one answer (writer first: it does not block).
        {"when": {"system_contains": coordinator, "last_role": "tool"},
         "respond": {"text": "The research is back."}},
        {"when": {"system_contains": coordinator, "last_user_contains": RETURNED},
         "respond": {"text": "Noted the writer's draft."}},
        {"when": {"system_contains": coordinator, "last_user_contains": START},
         "respond": {"tool_calls": [
             _create("writer", "Write a draft from the brief.", "draft"),
             _create("researcher", "Research the brief.", "research"),
         ]}},
        # The researcher finds its copy of the brief, has it checked (a blocking,
        # non-resumable grandchild that gets the file through init_attachments_property),
        # then delivers its copy (session_stop with attachments_property).
        {"when": {"system_contains": researcher, "last_tool": "attachment_path"},
         "respond": {"tool_calls": [
             _call("fact_checker", message="Check the figure in the brief.", files=[path]),
             _call("deliver", summary="Research done; the figure checks out.", files=[path]),
         ]}},
        {"when": {"system_contains": researcher, "last_role": "user"},
         "respond": {"tool_calls": [_call("attachment_path")]}},
        # The fact checker and the writer return the copy they were given.
        {"when": {"system_contains": checker, "last_tool": "attachment_path"},
         "respond": {"tool_calls": [_call("deliver", summary="Facts checked.", files=[path])]}},
        {"when": {"system_contains": writer, "last_tool": "attachment_path"},
         "respond": {"tool_calls": [_call("deliver", summary="Draft written.", files=[path])]}},
        {"when": {"last_role": "user"}, "respond": {"tool_calls": [_call("attachment_path")]}},
        {"respond": {"text": "Looks right."}},
    ]  # fmt: skip


def _prompt(name: str, text: str, **fields: Any) -> Json:
    return {"name": name, "tool_description": f"The {name} prompt", "prompt": text, "model": "m",
            "include_chat": True, "include_past_tools": True, **fields}  # fmt: skip


def _subagent(name: str, side_a: str) -> Json:
    """A dual_ai agent exposed as a tool whose side A ends its session by ``deliver``."""
    stop = {"name": "deliver", "message_property": "summary", "attachments_property": "files"}
    return {
        "name": name, "type": "dual_ai", "expose_as_tool": True, "max_session_turns": 2,
        "tool_description": f"The {name}", "side_a": {"prompt": side_a, "session_stop": stop},
        "side_b": {"prompt": "reviewer"},
    }  # fmt: skip


def _define(tenant: Tenant) -> None:
    resumable = {"receives_messages": "side_a", "max_instances": 2}
    check_args = {"type": "object", "properties": {
        "message": {"type": "string"}, "files": {"type": "array", "items": {"type": "string"}},
    }, "required": ["message", "files"]}  # fmt: skip
    with use_registry():
        tools_register()
        bundle_import(
            tenant=tenant,
            document={
                "version": 1,
                "models": [{"name": "m", "provider": "scripted", "model_id": "scripted",
                            "config": {"rules": _rules()}}],
                "prompts": [
                    _prompt("coordinator", "You are the coordinator.", tools=[
                        {"name": "researcher", "blocking": True, "resumable": resumable},
                        {"name": "writer", "blocking": False, "resumable": resumable},
                    ]),
                    _prompt("research", "You are the researcher.", tools=[
                        "attachment_path", "deliver",
                        {"name": "fact_checker", "init_user_message_property": "message",
                         "init_attachments_property": "files"},
                    ]),
                    _prompt("check", "You are the fact checker.", required_schema=check_args,
                            tools=["attachment_path", "deliver"]),
                    _prompt("write", "You are the writer.", tools=["attachment_path", "deliver"]),
                    _prompt("reviewer", "You review the work."),
                ],
                "agents": [
                    {"name": "coordinator", "side_a": {"prompt": "coordinator"}},
                    _subagent("researcher", "research"),
                    _subagent("fact_checker", "check"),
                    _subagent("writer", "write"),
                ],
            },
        )  # fmt: skip


# Processes -----------------------------------------------------------------------------------


@dataclass
class Services:
    worker: Worker
    port: int
    media: str


@pytest.fixture(scope="module")
def _services(
    django_db_setup: None, tmp_path_factory: pytest.TempPathFactory
) -> Iterator[Services]:
    """The worker (which this process sends its tasks to) and a uvicorn server, started
    together, sharing one MEDIA_ROOT with the tests."""
    directory = tmp_path_factory.mktemp("subagents")
    media = str(directory / "media")
    overrides = {"DATABASE_URL": current_database_url(), "MEDIA_ROOT": media}
    worker = worker_start(
        queue=private_queue(), database_url=overrides["DATABASE_URL"],
        log_path=directory / "worker.log", environment={"MEDIA_ROOT": media},
        setup="tests.threads.test_subagents_e2e:tools_register",
    )  # fmt: skip
    try:
        with background_server(overrides) as (port, _pid):
            server_warm_up(port, timeout=TIMEOUT_S)
            worker.wait_ready()
            with tasks_routed_to(worker.queue):
                yield Services(worker, port, media)
    finally:
        worker.stop()


@pytest.fixture
def services(
    _services: Services, request: pytest.FixtureRequest, settings: Settings
) -> Iterator[Services]:
    """The module's processes; this test's files go where they read them."""
    settings.MEDIA_ROOT = _services.media
    with log_on_failure(request, _services.worker):
        yield _services


# Helpers -------------------------------------------------------------------------------------


def _until(probe: Callable[[], T | None], *, what: str, services: Services) -> T:
    return wait_until(probe, what=what, worker=services.worker, timeout=TIMEOUT_S)


def _socket(port: int, thread: Thread, key: str) -> ClientConnection:
    """A real WebSocket on the thread's events, from the first one on."""
    return connect(
        f"ws://127.0.0.1:{port}/ws/threads/{thread.id}/?after=0",
        additional_headers={"Authorization": f"Bearer {key}"}, open_timeout=10,
    )  # fmt: skip


def _receive(socket: ClientConnection, expected: set[tuple[str, str]]) -> list[Json]:
    """Events from ``socket`` until every ``(type, subagent_id)`` of ``expected`` arrived."""
    received: list[Json] = []
    deadline = time.monotonic() + TIMEOUT_S
    while not expected <= {(e["type"], e.get("subagent_id")) for e in received}:
        remaining = deadline - time.monotonic()
        assert remaining > 0, f"missing {expected}: got {[e['type'] for e in received]}"
        received.append(json.loads(socket.recv(timeout=remaining)))
    return received


def _subagent_events(thread: Thread) -> list[tuple[str, str]]:
    rows = Event.objects.filter(thread=thread, type__startswith="subagent.").order_by("sequence")
    return [(row.type, row.payload["subagent_id"]) for row in rows]


def _rest_events(api: APIClient, thread: Thread) -> list[tuple[str, str]]:
    response = api.get(f"/api/v1/threads/{thread.id}/events?limit=500")
    assert response.status_code == 200, response.content
    assert response.json()["next"] is None
    return [(e["type"], e["subagent_id"]) for e in response.json()["results"]
            if e["type"].startswith("subagent.")]  # fmt: skip


def _at_rest(threads: list[Thread]) -> bool:
    """Every turn of ``threads`` ended and none of them runs or waits for work."""
    turns = Turn.objects.filter(thread__in=threads)
    if not turns.exists() or turns.exclude(status__in=TURN_TERMINAL).exists():
        return False
    return not Thread.objects.filter(pk__in=[t.pk for t in threads],
                                     status__in=["running", "queued"]).exists()  # fmt: skip


def _files(thread: Thread) -> dict[str, bytes]:
    """The thread's attachments: path -> bytes."""
    state = ThreadState(thread)
    rows = ThreadFile.objects.filter(thread=thread, parent_path="/attachments", is_directory=False)
    return {row.path: state.read_file(row.path) or b"" for row in rows}


# The scenario --------------------------------------------------------------------------------


def test_a_coordinator_with_two_resumable_subagents_and_a_grandchild_runs_to_completion(
    tenant: Tenant, services: Services
) -> None:
    """RT-7.1, RT-7.2, RT-8.1, RT-8.2, RT-10; DG-6.3, DG-13: the blocking subagent's outcome
    is the tool result, the non-blocking one's a silent queued message; the grandchild is
    closed after delivering; the brief's bytes travel coordinator -> researcher ->
    fact checker and back, and to the writer and back, under a fresh path in each thread."""
    _define(tenant)
    key = make_api_key(tenant, role=Role.ADMIN).secret
    api = APIClient()
    api.credentials(HTTP_AUTHORIZATION=f"Bearer {key}")
    created = api.post("/api/v1/threads", {"agent": "coordinator"}, format="json")
    assert created.status_code == 201, created.content
    coordinator = Thread.objects.get(pk=created.json()["id"])
    upload = f"/api/v1/threads/{coordinator.id}/fs{BRIEF_PATH}"
    uploaded = api.generic("PUT", upload, BRIEF.decode(), content_type="text/plain")
    assert uploaded.status_code == 201, uploaded.content

    with _socket(services.port, coordinator, key) as socket:
        body = {"input": {"content": START, "role": "user"}}
        submitted = api.post(f"/api/v1/threads/{coordinator.id}/turns", body, format="json")
        assert submitted.status_code == 202, submitted.content
        researcher = _until(lambda: Thread.objects.filter(parent=coordinator,
                            agent_name="researcher").first(), what="the researcher",
                            services=services)  # fmt: skip
        writer = Thread.objects.get(parent=coordinator, agent_name="writer")
        checker = _until(lambda: Thread.objects.filter(parent=researcher).first(),
                         what="the fact checker", services=services)  # fmt: skip
        rid, wid, cid = str(researcher.pk), str(writer.pk), str(checker.pk)
        live = _receive(socket, {
            ("subagent.spawned", wid), ("subagent.spawned", rid),
            ("subagent.completed", rid), ("subagent.completed", wid),
        })  # fmt: skip
    family = [coordinator, researcher, writer, checker]
    # At rest, and no worker holds a thread (a worker releases its lock just after it commits
    # the thread's status).
    _until(
        lambda: _at_rest(family)
        and not [t for t in family if lock_is_held(tenant_id=tenant.pk, thread_id=t.pk)],
        what="every thread to come to rest and its lock to be released", services=services,
    )  # fmt: skip

    # Every turn ended well; the tree is as built.
    turns = Turn.objects.filter(thread__in=family)
    assert {(str(t.thread_id), t.status) for t in turns} == {
        (str(coordinator.pk), "completed"), (rid, "completed"), (wid, "completed"),
        (cid, "completed"),
    }  # fmt: skip
    assert Turn.objects.filter(thread=coordinator).count() == 2  # the request, the delivery
    statuses = dict(Thread.objects.filter(pk__in=[t.pk for t in family]).values_list(
        "agent_name", "status"))  # fmt: skip
    assert statuses == {"coordinator": "waiting_input", "researcher": "completed",
                        "writer": "completed", "fact_checker": "completed"}  # fmt: skip
    assert (researcher.root_id, writer.root_id, checker.root_id) == (coordinator.pk,) * 3
    assert (researcher.tags, writer.tags) == (["name:research"], ["name:draft"])
    links = {str(link.child_id): link for link in SubagentLink.objects.filter(
        thread__in=[coordinator, researcher])}  # fmt: skip
    assert {ref: (link.blocking, link.resumable, link.status) for ref, link in links.items()} == {
        rid: (True, True, "idle"), wid: (False, True, "idle"), cid: (True, False, "terminated"),
    }  # fmt: skip
    checker.refresh_from_db()
    researcher.refresh_from_db()
    assert checker.terminated_at is not None
    assert (researcher.terminated_at, writer.terminated_at) == (None, None)

    # Blocking: the researcher's outcome is the coordinator's tool result.
    create_rows = list(Message.objects.filter(thread=coordinator, role="tool").order_by("seq"))
    assert [(row.name, row.tool_status) for row in create_rows] == [
        ("subagent_create", "success"), ("subagent_create", "success"),
    ]  # fmt: skip
    initiated, blocking = create_rows
    assert initiated.content == f"The subagent was initiated successfully. Reference: {wid}"
    assert (blocking.content or "").startswith(
        f"Research done; the figure checks out.\n\nReference: {rid}\nAttachment path for"
    )
    assert (initiated.metadata["subagent_id"], blocking.metadata["subagent_id"]) == (wid, rid)
    [research_back] = blocking.attachments
    assert research_back["path"] in (blocking.content or "")
    [checked] = Message.objects.filter(thread=researcher, role="tool", name="fact_checker")
    assert checked.tool_status == "success"
    assert (checked.content or "").startswith(f"Facts checked.\n\nReference: {cid}")

    # Non-blocking: the writer's outcome arrives as a silent queued message.
    delivered = Message.objects.get(thread=coordinator, role="user", metadata__subagent_id=wid)
    [writer_back] = delivered.attachments
    assert (delivered.role, delivered.silent) == ("user", True)
    assert delivered.content == (
        f"Subagent (reference: {wid}) {RETURNED}:\n\nDraft written.\n"
        f"Attachment path: {writer_back['path']}"
    )
    assert delivered.metadata["handoff_kind"] == "result"
    answers = Message.objects.filter(thread=coordinator, role="assistant", content__isnull=False)
    assert set(answers.values_list("content", flat=True)) == {
        "The research is back.", "Noted the writer's draft.",
    }  # fmt: skip

    # Events: live over the WebSocket, in the log, and through the REST route.
    coordinator_events = _subagent_events(coordinator)
    relayed = [(e["type"], e["subagent_id"]) for e in live if e["type"].startswith("subagent.")]
    assert relayed == coordinator_events[: len(relayed)]
    sequences = [e["sequence"] for e in live if e["sequence"] is not None]
    assert sequences == list(range(1, len(sequences) + 1))
    assert {("subagent.spawned", wid), ("subagent.spawned", rid), ("subagent.completed", rid),
            ("subagent.completed", wid)} <= set(coordinator_events)  # fmt: skip
    assert not {kind for kind, _ in coordinator_events} & {"subagent.failed", "subagent.closed"}
    assert _rest_events(api, coordinator) == coordinator_events
    checker_events = [kind for kind, ref in _subagent_events(researcher) if ref == cid]
    assert [kind for kind in checker_events if kind != "subagent.status"] == [
        "subagent.spawned", "subagent.completed", "subagent.closed",
    ]  # fmt: skip
    assert _rest_events(api, researcher) == _subagent_events(researcher)
    with _socket(services.port, researcher, key) as socket:
        replayed = _receive(socket, {("subagent.closed", cid)})
    assert [(e["type"], e["subagent_id"]) for e in replayed if e["type"].startswith("subagent.")
            ] == _subagent_events(researcher)  # fmt: skip

    # The brief: the same bytes in every thread, under a path of each thread's own.
    files = {thread.agent_name: _files(thread) for thread in family}
    assert {name: len(found) for name, found in files.items()} == {
        "coordinator": 3, "researcher": 2, "writer": 1, "fact_checker": 1,
    }  # fmt: skip
    every = [(name, path, data) for name, found in files.items() for path, data in found.items()]
    assert {data for _, _, data in every} == {BRIEF}
    assert len({path for _, path, _ in every}) == len(every) == 7
    assert files["coordinator"][BRIEF_PATH] == BRIEF
    assert {research_back["path"], writer_back["path"]} <= set(files["coordinator"])
    assert all(path.startswith("/attachments/brief-") for _, path, _ in every if path != BRIEF_PATH)
    assert_replays(coordinator, session=True)

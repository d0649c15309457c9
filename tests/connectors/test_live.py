"""MCP tools end to end: a tenant registers a real MCP server (the ``mcp`` SDK's ``MCPServer``
on loopback, streamable HTTP, requiring a bearer) through the API, its prompts name the
server's tools, and a real Celery worker runs turns in which the scripted model calls them:
results are persisted as tool messages and recorded as ``tool.started`` / ``tool.result``
events; an ``ask`` rule on one MCP tool pauses the turn and answering resumes it; a code-mode
program calls one; and the bearer appears in clear in no row, event or log line. An agent
calls a remote A2A agent (the ``a2a-sdk``'s, on loopback) as a tool the same way.

Data is committed (``transaction=True``) so the worker sees it; the server runs in a thread
of this process, so what it ran is read here."""

from __future__ import annotations

from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any, TypeVar

import pytest
from rest_framework.test import APIClient

from agents.bundles import bundle_import
from tenancy.models import Role, Tenant
from tests.connectors import a2a_peer as remote_agent
from tests.connectors.mcp_peer import TOKEN, Peer, mcp_peer
from tests.support import current_database_url, database_text
from tests.worker import (
    Worker,
    log_on_failure,
    private_queue,
    tasks_routed_to,
    wait_until,
    worker_start,
)
from threads.models import Action, Event, Message, Thread, Turn
from threads.services.threads import thread_create

pytestmark = pytest.mark.django_db(transaction=True)

T = TypeVar("T")
TIMEOUT_S = 40.0
PROGRAM = """
export default async function () {
  const sky = await tools.weather__forecast({ city: "Paris" });
  return "program says: " + sky;
}
"""


@pytest.fixture(scope="module")
def peer() -> Iterator[Peer]:
    with mcp_peer() as running:
        yield running


@pytest.fixture(scope="module")
def _worker(django_db_setup: None, tmp_path_factory: pytest.TempPathFactory) -> Iterator[Worker]:
    directory = tmp_path_factory.mktemp("mcp")
    worker = worker_start(
        queue=private_queue(), database_url=current_database_url(),
        log_path=directory / "worker.log", concurrency=2,
    )  # fmt: skip
    try:
        worker.wait_ready()
        with tasks_routed_to(worker.queue):
            yield worker
    finally:
        worker.stop()


@pytest.fixture
def worker(_worker: Worker, request: pytest.FixtureRequest) -> Iterator[Worker]:
    with log_on_failure(request, _worker) as running:
        yield running


def _agent(name: str, tools: list[Any], respond: dict[str, Any], **prompt: Any) -> dict[str, Any]:
    return {
        "models": [{"name": f"{name}_model", "provider": "scripted", "model_id": "scripted",
                    "config": {"rules": [
                        {"when": {"last_role": "tool"},
                         "respond": {"text": "Done: {last_tool_result}"}},
                        {"respond": respond},
                    ]}}],
        "prompts": [{"name": name, "tool_description": name, "prompt": "You help.",
                     "model": f"{name}_model", "include_chat": True, "tools": tools, **prompt}],
        "agents": [{"name": name, "side_a": {"prompt": name}}],
    }  # fmt: skip


@pytest.fixture
def api(tenant: Tenant, client_for: Callable[..., APIClient], peer: Peer) -> APIClient:
    """The tenant's admin key, after registering the server through the API and defining
    three agents over its tools."""
    admin = client_for(tenant, Role.ADMIN)
    registered = admin.post(
        "/api/v1/mcp-servers",
        {"name": "weather", "url": peer.url, "auth": {"type": "bearer", "token": TOKEN}},
        format="json",
    )
    assert registered.status_code == 201, registered.json()
    assert admin.post("/api/v1/mcp-servers/weather/refresh").json()["error"] is None
    agents = [
        _agent("forecaster", ["mcp:weather"], {"tool_calls": [
            {"name": "weather__forecast", "arguments": {"city": "Oslo"}},
            {"name": "weather__add", "arguments": {"a": 2, "b": 3}},
        ]}),
        _agent("banker", [{"name": "mcp:weather/wire_money", "approval": "ask"}],
               {"tool_calls": [{"name": "weather__wire_money", "arguments": {"amount": 500}}]}),
        _agent("coder", ["mcp:weather/forecast"],
               {"tool_calls": [{"name": "code", "arguments": {"source": PROGRAM}}]},
               code_mode=True),
    ]  # fmt: skip
    for document in agents:
        bundle_import(tenant=tenant, document={"version": 1, **document})
    return admin


def _until(probe: Callable[[], T | None], what: str, worker: Worker) -> T:
    return wait_until(probe, what=what, worker=worker, timeout=TIMEOUT_S)


def _submit(api: APIClient, thread: Thread) -> str:
    response = api.post(
        f"/api/v1/threads/{thread.id}/turns", {"input": {"content": "go"}}, format="json"
    )
    assert response.status_code == 202, response.json()
    return str(response.json()["id"])


def _status(turn_id: str) -> str:
    return str(Turn.objects.values_list("status", flat=True).get(pk=turn_id))


def _ended(turn_id: str, worker: Worker) -> str:
    def ended() -> str | None:
        status = _status(turn_id)
        return None if status in ("queued", "running", "waiting_permission") else status

    return _until(ended, "the turn to end", worker)


def _tool_messages(thread: Thread) -> list[tuple[str | None, str | None, str | None]]:
    rows = Message.objects.filter(thread=thread, role="tool").order_by("seq")
    return [(row.name, row.tool_status, row.content) for row in rows]


def _answer(thread: Thread) -> str | None:
    last = Message.objects.filter(thread=thread, role="assistant").order_by("-seq").first()
    return None if last is None else last.content


def _events(thread: Thread, *types: str) -> list[tuple[str, dict[str, Any]]]:
    rows = Event.objects.filter(thread=thread, type__in=types).order_by("sequence")
    return [(row.type, row.payload) for row in rows]


def test_the_model_calls_two_mcp_tools_and_their_results_are_persisted_and_streamed(
    worker: Worker, tenant: Tenant, api: APIClient, peer: Peer
) -> None:
    thread = thread_create(tenant=tenant, agent_name="forecaster")

    turn_id = _submit(api, thread)

    assert _ended(turn_id, worker) == "completed"
    assert _tool_messages(thread) == [
        ("weather__forecast", "success", "Sunny in Oslo, 21 C"),
        ("weather__add", "success", '{\n  "sum": 5\n}'),
    ]
    assert _answer(thread) == 'Done: {\n  "sum": 5\n}'
    events = _events(thread, "tool.started", "tool.result", "tool.failed")
    assert [(kind, payload["name"]) for kind, payload in events] == [
        ("tool.started", "weather__forecast"), ("tool.result", "weather__forecast"),
        ("tool.started", "weather__add"), ("tool.result", "weather__add"),
    ]  # fmt: skip
    assert events[0][1]["arguments"] == {"city": "Oslo"}
    assert ("forecast", {"city": "Oslo"}) in peer.calls
    assert ("add", {"a": 2, "b": 3}) in peer.calls


def test_an_ask_rule_on_an_mcp_tool_pauses_the_turn_and_approving_resumes_it(
    worker: Worker, tenant: Tenant, api: APIClient, peer: Peer
) -> None:
    thread = thread_create(tenant=tenant, agent_name="banker")
    before = peer.ran("wire_money")

    turn_id = _submit(api, thread)
    _until(lambda: _status(turn_id) == "waiting_permission", "the turn to pause", worker)
    action = Action.objects.get(turn_id=turn_id)
    waited = peer.ran("wire_money")
    approved = api.post(
        f"/api/v1/threads/{thread.id}/actions/{action.pk}", {"decision": "approve"}, format="json"
    )

    assert waited == before  # nothing ran while it waited
    assert approved.status_code == 200, approved.json()
    assert _ended(turn_id, worker) == "completed"
    assert peer.ran("wire_money") == before + 1
    assert _tool_messages(thread) == [("weather__wire_money", "success", "wired 500")]
    assert _answer(thread) == "Done: wired 500"


def test_a_code_mode_program_calls_an_mcp_tool(
    worker: Worker, tenant: Tenant, api: APIClient, peer: Peer
) -> None:
    thread = thread_create(tenant=tenant, agent_name="coder")

    turn_id = _submit(api, thread)

    assert _ended(turn_id, worker) == "completed"
    assert _tool_messages(thread) == [("code", "success", "program says: Sunny in Paris, 21 C")]
    assert ("forecast", {"city": "Paris"}) in peer.calls


def test_the_bearer_appears_in_no_row_event_or_log_line(
    worker: Worker, tenant: Tenant, api: APIClient, tmp_path: Path
) -> None:
    threads = [thread_create(tenant=tenant, agent_name=name) for name in ("forecaster", "banker")]
    turns = [_submit(api, thread) for thread in threads]
    _ended(turns[0], worker)
    _until(lambda: _status(turns[1]) == "waiting_permission", "the turn to pause", worker)
    action = Action.objects.get(turn_id=turns[1])
    api.post(f"/api/v1/threads/{threads[1].id}/actions/{action.pk}", {"decision": "deny"},
             format="json")  # fmt: skip
    _ended(turns[1], worker)

    text = database_text()
    events = [str(row.payload) for row in Event.objects.filter(thread__in=threads)]

    assert "weather__forecast" in text  # the rows are there...
    assert TOKEN not in text  # ...the bearer is not, nor its hex
    assert TOKEN.encode().hex() not in text
    assert events
    assert not any(TOKEN in payload for payload in events)
    assert TOKEN not in worker.log()


@pytest.fixture(scope="module")
def translator() -> Iterator[remote_agent.Peer]:
    with remote_agent.a2a_peer() as running:
        yield running


def test_an_agent_calls_a_remote_a2a_agent_as_a_tool(
    worker: Worker, tenant: Tenant, client_for: Callable[..., APIClient],
    translator: remote_agent.Peer,
) -> None:  # fmt: skip
    admin = client_for(tenant, Role.ADMIN)
    registered = admin.post("/api/v1/a2a-agents", {
        "name": "translator", "url": translator.url,
        "auth": {"type": "bearer", "token": remote_agent.TOKEN},
    }, format="json")  # fmt: skip
    assert registered.status_code == 201, registered.json()
    call = {"name": "translator__send_message", "arguments": {"message": "good night"}}
    document = _agent("delegator", ["a2a:translator"], {"tool_calls": [call]})
    bundle_import(tenant=tenant, document={"version": 1, **document})
    thread = thread_create(tenant=tenant, agent_name="delegator")

    turn_id = _submit(admin, thread)

    assert _ended(turn_id, worker) == "completed"
    ((name, status, content),) = _tool_messages(thread)
    assert (name, status) == ("translator__send_message", "success")
    assert str(content).startswith("Bonjour! (good night)\n[task completed; context_id: ")
    assert str(_answer(thread)).startswith("Done: Bonjour! (good night)")
    events = _events(thread, "tool.started", "tool.result")
    assert [kind for kind, _ in events] == ["tool.started", "tool.result"]
    assert events[0][1]["arguments"] == {"message": "good night"}
    assert "good night" in translator.calls
    assert remote_agent.TOKEN not in database_text()
    assert remote_agent.TOKEN not in worker.log()

"""Every answer of the routes of threads and their work is the body the OpenAPI schema
documents for it (threads.api.run_outputs and the output serializers of each route module),
checked strictly on real answers: a thread and its read model, messages, turns and their
waits, actions, effects, subagents, variable requests and run-code."""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

import pytest
from django.http import HttpResponseBase
from rest_framework.test import APIClient

from agents.registry import effect, tool
from tenancy.models import Role
from tests.answers import documented, schema_document
from tests.factories import make_thread
from tests.threads.runtime.conftest import Engine, prompt
from threads.models import SubagentLink, Thread
from threads.runtime.effects import effect_fire
from threads.services import effects as effects_module
from threads.services.effects import effect_schedule
from threads.services.messages import message_inject
from threads.services.variable_requests import variable_request_create

Json = dict[str, Any]

THREADS = "/api/v1/threads/"
THREAD = "/api/v1/threads/{id}/"
PART = "/api/v1/threads/{thread_id}/"
TURN = "/api/v1/turns/{turn_id}"


class Checked:
    """An API client whose answers are checked against the schema, noting which
    operations answered."""

    def __init__(self, client: APIClient) -> None:
        self.client = client
        self.seen: set[tuple[str, str]] = set()

    def call(self, method: str, template: str, url: str, body: Json | None = None) -> Any:
        send = getattr(self.client, method)
        response: HttpResponseBase = (
            send(url) if body is None and method in ("get", "delete") else
            send(url, body or {}, format="json")
        )  # fmt: skip
        assert response.status_code < 300, (method, url, response.getvalue()[:500])
        self.seen.add((method, template))
        return documented(method, template, response)


@pytest.fixture
def api(engine: Engine, client_for: Callable[..., APIClient]) -> Checked:
    return Checked(client_for(engine.tenant, Role.MEMBER))


@pytest.fixture
def tools(engine: Engine, monkeypatch: pytest.MonkeyPatch) -> None:
    """A `refund` tool that asks for approval and a `ping` effect; effects are not sent to
    a broker."""

    @tool(
        description="Refund an amount.",
        args={"type": "object", "properties": {"amount": {"type": "number"}},
              "required": ["amount"]},
        approval="ask",
    )  # fmt: skip
    def refund(state: Any, args: Json) -> str:
        return f"refunded {args['amount']}"

    @effect(description="Pings.")
    def ping(state: Any) -> None:
        state.inject_message(role="system", content="ping")

    monkeypatch.setattr(effects_module, "effect_send", lambda *args, **kwargs: True)
    engine.define(
        prompts=[prompt("helper", tools=["echo", "refund"])],
        agents=[{"name": "helper", "side_a": {"prompt": "helper"}}],
    )


def _threads(api: Checked) -> Thread:
    created = api.call("post", THREADS, "/api/v1/threads", {"agent": "helper", "tags": ["t"]})
    url = f"/api/v1/threads/{created['id']}"
    api.call("get", THREADS, "/api/v1/threads?tag=t")
    api.call("patch", THREAD, url, {"metadata": {"k": 1}})
    return Thread.objects.get(pk=created["id"])


def _a_turn_with_a_tool_call(engine: Engine, api: Checked, thread: Thread) -> None:
    base = f"/api/v1/threads/{thread.id}"
    engine.script.tool_calls([{"name": "echo", "arguments": {"text": "hi"}, "id": "c1"}])
    engine.script.text("done")
    turn = api.call("post", f"{PART}turns", f"{base}/turns", {"input": {"content": "echo hi"}})
    engine.drive(thread)
    waited = api.call("get", f"{TURN}/wait", f"/api/v1/turns/{turn['id']}/wait?timeout=1")
    api.call("get", TURN, f"/api/v1/turns/{turn['id']}")
    catalogs = api.call("get", f"{TURN}/tools", f"/api/v1/turns/{turn['id']}/tools")
    assert [tool["name"] for tool in catalogs["catalogs"][0]["tools"]] == ["echo", "refund"]
    api.call("get", f"{PART}turns", f"{base}/turns")
    listed = api.call("get", f"{PART}messages", f"{base}/messages?limit=10")
    assert waited["done"] is True
    assert [m["role"] for m in listed["results"]] == ["user", "assistant", "tool", "assistant"]


def _messages(api: Checked, thread: Thread) -> None:
    base = f"/api/v1/threads/{thread.id}/messages"
    top = message_inject(thread=thread, role="assistant", content="top", side="a")
    message_inject(thread=thread, role="user", content="nested", parent=top, silent=True)
    api.call("get", f"{PART}messages", f"{base}?depth=1&include_silent=true&order=desc")
    injected = api.call("post", f"{PART}messages/inject", f"{base}/inject",
                        {"role": "system", "content": "note"})  # fmt: skip
    one = f"{base}/{injected['id']}"
    api.call("get", f"{PART}messages/{{message_id}}", one)
    api.call("patch", f"{PART}messages/{{message_id}}", one, {"metadata": {"x": 1}})
    api.call("delete", f"{PART}messages/{{message_id}}", one)


def _an_action(engine: Engine, api: Checked, thread: Thread) -> None:
    base = f"/api/v1/threads/{thread.id}"
    engine.script.tool_calls([{"name": "refund", "arguments": {"amount": 5}, "id": "r"}])
    engine.script.text("Refunded.")
    turn = api.call("post", f"{PART}turns", f"{base}/turns", {"input": {"content": "refund"}})
    engine.drive(thread)
    variable_request_create(
        parent=thread, relationship="pair", agent_name="helper", required=["TOKEN"],
        missing=["TOKEN"], spawn={}, values={},
    )  # fmt: skip
    waited = api.call("get", f"{TURN}/wait", f"/api/v1/turns/{turn['id']}/wait?timeout=0")
    read = api.call("get", THREAD, f"/api/v1/threads/{thread.id}")
    listed = api.call("get", f"{PART}actions", f"{base}/actions?status=pending")
    action = f"{base}/actions/{listed['results'][0]['id']}"
    api.call("get", f"{PART}actions/{{action_id}}", action)
    request_id = read["pending_requests"][1]["request_id"]
    api.call("get", f"{PART}variables/{{request_id}}", f"{base}/variables/{request_id}")
    api.call("post", f"{PART}actions/{{action_id}}", action, {"decision": "approve"})
    engine.drive(thread)
    assert (waited["done"], [a["kind"] for a in waited["actions"]]) == (False, ["approval"])
    assert [r["kind"] for r in read["pending_requests"]] == ["approval", "variables"]
    assert read["active_turn"]["status"] == "waiting_permission"


def _the_queue(api: Checked, thread: Thread) -> None:
    base = f"/api/v1/threads/{thread.id}"
    sent = api.call("post", f"{PART}messages", f"{base}/messages", {"content": "one"})
    api.call("post", f"{PART}continue", f"{base}/continue", {"side": "a"})
    third = api.call("post", f"{PART}turns", f"{base}/turns", {"input": {"content": "three"}})
    waited = api.call("post", f"{PART}turns/wait", f"{base}/turns/wait?timeout=0",
                      {"input": {"content": "four"}})  # fmt: skip
    estimated = api.call("post", f"{PART}turns/estimate", f"{base}/turns/estimate",
                         {"content": "five"})  # fmt: skip
    api.call("post", f"{TURN}/promote", f"/api/v1/turns/{third['id']}/promote")
    api.call("delete", TURN, f"/api/v1/turns/{third['id']}")
    api.call("post", f"{TURN}/cancel", f"/api/v1/turns/{sent['turn_id']}/cancel")
    read = api.call("get", THREAD, f"/api/v1/threads/{thread.id}")
    api.call("post", f"{PART}stop", f"{base}/stop")
    assert waited["done"] is False
    assert len(read["queued_turns"]) == 2
    assert estimated["would"] == "run"


def _effects(api: Checked, thread: Thread) -> None:
    base = f"/api/v1/threads/{thread.id}/effects"
    later = effect_schedule(thread=thread, name="ping", delay_ms=3_600_000)
    soon = effect_schedule(thread=thread, name="ping", delay_ms=1000)
    api.call("get", f"{PART}effects", f"{base}?name=ping")
    api.call("get", f"{PART}effects/{{effect_id}}", f"{base}/{soon.pk}")
    ran = api.call("post", f"{PART}effects/{{effect_id}}/run", f"{base}/{soon.pk}/run")
    effect_fire(soon.pk)
    replayed = api.call("post", f"{PART}effects/{{effect_id}}/run", f"{base}/{soon.pk}/run")
    api.call("post", f"{PART}effects/{{effect_id}}/replay", f"{base}/{soon.pk}/replay")
    api.call("delete", f"{PART}effects/{{effect_id}}", f"{base}/{later.pk}")
    assert (ran["action"], replayed["action"]) == ("ran", "replayed")


def _subagents(api: Checked, thread: Thread) -> None:
    child = make_thread(thread.tenant, parent=thread, agent_name="helper")
    SubagentLink.objects.create(
        tenant=thread.tenant, thread=thread, child=child, relationship="pair", owner="a",
        agent_name="helper", initial_arguments={"n": 1},
    )  # fmt: skip
    listed = api.call("get", f"{PART}children", f"/api/v1/threads/{thread.id}/children")
    assert [c["reference"] for c in listed["results"]] == [str(child.pk)]


def test_every_answer_of_the_run_routes_is_the_documented_body(
    engine: Engine, api: Checked, tools: None
) -> None:
    thread = _threads(api)
    _a_turn_with_a_tool_call(engine, api, thread)
    _messages(api, thread)
    _an_action(engine, api, thread)
    _the_queue(api, thread)
    _effects(api, thread)
    _subagents(api, thread)
    api.call("post", f"{PART}run-code", f"/api/v1/threads/{thread.id}/run-code",
             {"source": "console.log(1); export default 2;"})  # fmt: skip
    api.call("post", f"{PART}terminate", f"/api/v1/threads/{thread.id}/terminate")
    api.call("delete", THREAD, f"/api/v1/threads/{thread.id}")

    # Completing a variable request is checked where one completes (test_subagents_api);
    # the stream is Server-Sent Events, not JSON.
    elsewhere = {("post", f"{PART}variables/{{request_id}}"), ("get", f"{TURN}/stream")}
    assert api.seen == _operations() - elsewhere


def _operations() -> set[tuple[str, str]]:
    """The operations of threads and their work, as the schema lists them."""
    mine = ("/messages", "/continue", "/stop", "/terminate", "/turns", "/actions", "/effects",
            "/children", "/variables", "/run-code")  # fmt: skip
    return {
        (method, path)
        for path, item in schema_document()["paths"].items()
        if path in (THREADS, THREAD)
        or path.startswith("/api/v1/turns/")
        or (path.startswith(PART) and any(part in path for part in mine))
        for method in item
        if method in ("get", "post", "patch", "put", "delete")
    }

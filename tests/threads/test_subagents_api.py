"""The subagent routes over REST (spec runtime §7.5, DIGEST §6.4, §11): a thread's children,
the variable-bootstrap flow end to end with a planted secret that must never surface,
``maxInstances`` under concurrent spawns, and a table of bad inputs that must be 4xx JSON.

Flows run in this process (the ``engine`` fixture: scripted model, no worker)."""

from __future__ import annotations

import json
import threading
import uuid
from collections.abc import Callable
from typing import Any

import pytest
from django.db import connection
from rest_framework.test import APIClient

from agents.documents import ResumableConfig, ToolConfig
from agents.registry import ToolResult, tool
from common.time import now_us
from tenancy.models import Role, Tenant
from tests.answers import documented
from tests.support import ContextThread, database_text
from tests.threads.runtime.conftest import Engine, prompt
from threads.models import Event, Log, Message, SubagentLink, Thread, Turn, VariableRequest
from threads.runtime.spawn import Spawned, SpawnRequest, relationship_load, spawn_child
from threads.state import ThreadState

Json = dict[str, Any]

SECRET = "sentinel-child-token-5d0c7be2"
CREATE_ARGS = {"agent": "pair", "message": "go", "attachments": [], "name": "n"}
TOKEN_VARIABLE = {"name": "CHILD_TOKEN", "type": "secret", "required": True, "scoped": True,
                  "description": "The vault's token"}  # fmt: skip


def _pair(name: str, side_a: str, side_b: str) -> Json:
    return {
        "name": name, "type": "dual_ai", "side_a": {"prompt": side_a},
        "side_b": {"prompt": side_b}, "max_session_turns": 1, "expose_as_tool": True,
        "tool_description": f"The {name} subagent",
    }  # fmt: skip


def _define(engine: Engine, boss_tools: list[Any]) -> None:
    """Agent ``boss`` (ai_human) lists ``boss_tools``; ``pair`` is a plain dual_ai subagent;
    ``vault``'s side A prompt declares the required scoped secret CHILD_TOKEN."""
    engine.define(
        prompts=[
            prompt("boss", tools=boss_tools),
            prompt("worker"),
            prompt("checker"),
            prompt("vault_a", tools=["use_token"], variables=[TOKEN_VARIABLE]),
            prompt("vault_b"),
        ],
        agents=[
            {"name": "boss", "side_a": {"prompt": "boss"}},
            _pair("pair", "worker", "checker"),
            _pair("vault", "vault_a", "vault_b"),
        ],
    )


@pytest.fixture
def token_reads(engine: Engine) -> list[str]:
    """Registers ``use_token`` (a tool that reads CHILD_TOKEN and never returns it); the
    values it read."""
    seen: list[str] = []

    @tool(description="Use the vault token.")
    def use_token(state: Any) -> str:
        seen.append(state.env("CHILD_TOKEN"))
        return "the token works"

    return seen


def _client(tenant: Tenant, client_for: Callable[..., APIClient], role: Role) -> APIClient:
    client: APIClient = client_for(tenant, role)
    return client


def _tool_rows(thread: Thread) -> list[Message]:
    return list(Message.objects.filter(thread=thread, role="tool").order_by("seq"))


# Children ------------------------------------------------------------------------------------


@pytest.mark.usefixtures("token_reads")
def test_children_lists_the_registry_entries_with_each_child_threads_status(
    engine: Engine,
    client_for: Callable[..., APIClient],
    other_tenant: Tenant,
) -> None:
    """DG-6.4: the registry entries, oldest first, with thread_status; a read-only key may
    read them; another tenant's key gets 404."""
    resumable = {"name": "pair", "blocking": False,
                 "resumable": {"receives_messages": "side_a", "max_instances": 3}}  # fmt: skip
    _define(engine, [resumable])
    parent = engine.thread("boss")
    engine.script.tool_calls([
        {"name": "subagent_create", "arguments": {**CREATE_ARGS, "name": "first"}},
        {"name": "subagent_create", "arguments": {**CREATE_ARGS, "name": "second"}},
    ]).text("Two started.")  # fmt: skip
    engine.send(parent, "start two")
    engine.drive(parent)
    first, second = Thread.objects.filter(parent=parent).order_by("created_at", "id")
    ThreadState(second).terminate()
    url = f"/api/v1/threads/{parent.id}/children"

    reader = _client(engine.tenant, client_for, Role.READ_ONLY)
    response = reader.get(url)
    one = reader.get(url, {"limit": 1}).json()
    rest = reader.get(one["next"]).json()

    assert response.status_code == 200, response.content
    body = response.json()
    assert (body["next"], body["previous"]) == (None, None)
    assert [c["reference"] for c in [*one["results"], *rest["results"]]] == [
        str(first.pk),
        str(second.pk),
    ]
    assert (rest["next"], reader.get(rest["previous"]).json()) == (None, one)
    assert [
        (c["reference"], c["title"], c["relationship"], c["name"], c["status"], c["thread_status"])
        for c in body["results"]
    ] == [
        (str(first.pk), "first", "pair", "pair", "running", "queued"),
        (str(second.pk), "second", "pair", "pair", "terminated", "cancelled"),
    ]
    entry = body["results"][0]
    assert (entry["blocking"], entry["resumable"], entry["parent_communication"]) == (
        False, True, "implicit",
    )  # fmt: skip
    assert (entry["owner"], entry["receives_messages"], entry["terminated_at"]) == (
        "a", "side_a", None,
    )  # fmt: skip
    assert body["results"][1]["terminated_at"] is not None
    assert reader.post(url, {}, format="json").status_code == 403
    assert _client(engine.tenant, client_for, Role.MEMBER).post(url, {}).status_code == 405
    intruder = _client(other_tenant, client_for, Role.ADMIN)
    hidden = intruder.get(url)
    assert hidden.status_code == 404
    assert hidden.json()["error"]["code"] == "not_found"
    assert str(first.pk) not in hidden.content.decode()


def test_children_of_a_thread_without_subagents_is_an_empty_list(
    thread: Thread, client_for: Callable[..., APIClient], tenant: Tenant
) -> None:
    response = _client(tenant, client_for, Role.READ_ONLY).get(
        f"/api/v1/threads/{thread.id}/children"
    )

    assert (response.status_code, response.json()) == (
        200, {"results": [], "next": None, "previous": None},
    )  # fmt: skip


# The variable-bootstrap flow -----------------------------------------------------------------


def _bootstrap_error(engine: Engine, parent: Thread) -> Json:
    """The parent's model calls ``vault``; returns the refusal's tool row metadata."""
    engine.script.tool_calls([{"name": "vault", "arguments": {"message": "open the vault"}}])
    engine.script.text("The vault needs its token first.")
    engine.send(parent, "open the vault please")
    engine.drive(parent)
    [row] = _tool_rows(parent)
    assert row.tool_status == "error"
    assert "CHILD_TOKEN" in (row.content or "")
    metadata: Json = row.metadata
    return metadata


def _secret_free(where: str, text: str) -> None:
    assert SECRET not in text, f"the secret appears in {where}"
    assert SECRET.encode().hex() not in text.lower(), f"the secret appears (hex) in {where}"


def test_the_variable_bootstrap_flow_end_to_end_never_shows_the_secret(
    engine: Engine,
    token_reads: list[str],
    client_for: Callable[..., APIClient],
    other_tenant: Tenant,
) -> None:
    """RT-7.5, DG-6.3, DG-11: a missing required scoped variable defers the spawn into a
    request (error_code subagent_env_required); GET shows what is missing, POST with the
    value creates and boots the child with it in its env; the value never surfaces."""
    _define(engine, ["vault"])
    parent = engine.thread("boss")
    member = _client(engine.tenant, client_for, Role.MEMBER)
    answers: list[bytes] = []

    metadata = _bootstrap_error(engine, parent)

    assert metadata["error_code"] == "subagent_env_required"
    data = metadata["error_data"]
    request_id = data["request_id"]
    endpoint = f"/api/v1/threads/{parent.id}/variables/{request_id}"
    assert data == {
        "request_id": request_id, "endpoint": endpoint, "required": ["CHILD_TOKEN"],
        "missing": ["CHILD_TOKEN"], "agent": "vault",
    }  # fmt: skip
    assert not Thread.objects.filter(parent=parent).exists()

    shown = member.get(endpoint)
    assert shown.status_code == 200, shown.content
    pending = shown.json()
    assert (pending["request_id"], pending["parent_thread_id"], pending["agent_name"]) == (
        request_id, str(parent.id), "vault",
    )  # fmt: skip
    assert (pending["required"], pending["missing"], pending["status"]) == (
        ["CHILD_TOKEN"], ["CHILD_TOKEN"], "pending",
    )  # fmt: skip
    assert pending["child_thread_id"] is None
    read = member.get(f"/api/v1/threads/{parent.id}")
    assert read.status_code == 200
    assert [item["request_id"] for item in read.json()["pending_requests"]] == [request_id]

    still_missing = member.post(endpoint, {"env": {}}, format="json")
    unknown = member.post(endpoint, {"env": {"CHILD_TOKEN": SECRET, "OTHER": "x"}}, format="json")
    assert (still_missing.status_code, unknown.status_code) == (400, 400)
    assert still_missing.json()["error"]["field"] == "env.CHILD_TOKEN"
    assert "CHILD_TOKEN" in still_missing.json()["error"]["message"]
    assert unknown.json()["error"]["field"] == "env.OTHER"
    assert not Thread.objects.filter(parent=parent).exists()

    done = member.post(endpoint, {"env": {"CHILD_TOKEN": SECRET}}, format="json")

    assert done.status_code == 200, done.content
    child = Thread.objects.get(parent=parent)
    assert documented("post", "/api/v1/threads/{thread_id}/variables/{request_id}", done) == {
        "request_id": request_id, "child_thread_id": str(child.pk), "status": "success",
    }  # fmt: skip
    assert ThreadState(child).env("CHILD_TOKEN") == SECRET
    listed = member.get(f"/api/v1/threads/{child.id}/env")
    assert "CHILD_TOKEN" in listed.content.decode()  # the name is shown, never the value
    assert member.get(f"/api/v1/threads/{parent.id}").json()["pending_requests"] == []
    completed = member.get(endpoint).json()
    assert (completed["status"], completed["missing"], completed["child_thread_id"]) == (
        "completed", [], str(child.pk),
    )  # fmt: skip
    again = member.post(endpoint, {"env": {"CHILD_TOKEN": SECRET}}, format="json")
    assert again.status_code == 409
    assert str(child.pk) in again.json()["error"]["message"]
    answers += [shown.content, read.content, still_missing.content, unknown.content]
    answers += [done.content, again.content, listed.content]

    # The child runs with its token; its result reaches the parent as a silent message.
    engine.script.tool_calls([{"name": "use_token", "arguments": {}}])
    engine.script.text("The vault is open.").text("Confirmed open.").text("Thanks.")
    engine.drive(child)
    engine.drive(parent)

    assert token_reads == [SECRET]
    assert Turn.objects.get(thread=child).status == "completed"
    delivered = Message.objects.get(thread=parent, metadata__subagent_id=str(child.pk))
    assert delivered.silent
    assert delivered.content == (
        f"Subagent (reference: {child.pk}) has returned the following result:\n\nConfirmed open."
    )
    link = SubagentLink.objects.get(child=child)
    assert (link.thread_id, link.relationship, link.status) == (parent.pk, "vault", "terminated")

    # Nothing shows the secret: answers, rows, events, logs, turns, requests, model input.
    for thread in (parent, child):
        base = f"/api/v1/threads/{thread.id}"
        for path in ("", "/children", "/messages?include_silent=true", "/events", "/logs",
                     "/turns", "/env"):  # fmt: skip
            response = member.get(base + path)
            assert response.status_code == 200, (path, response.content)
            answers.append(response.content)
    answers.append(member.get(endpoint).content)
    for index, body in enumerate(answers):
        _secret_free(f"API answer {index}", body.decode())
    for message in Message.objects.filter(thread__in=[parent, child]):
        _secret_free(f"message {message.pk}", json.dumps([
            message.content, message.metadata, message.attachments, message.tool_calls,
        ], default=str))  # fmt: skip
    for event in Event.objects.filter(thread__in=[parent, child]):
        _secret_free(f"event {event.type}", json.dumps(event.payload, default=str))
    for log in Log.objects.filter(thread__in=[parent, child]):
        _secret_free(f"log {log.kind}", json.dumps(log.data, default=str))
    for turn in Turn.objects.filter(thread__in=[parent, child]):
        _secret_free(f"turn {turn.pk}", json.dumps(turn.payload, default=str))
    stored = VariableRequest.objects.get(pk=request_id)
    _secret_free("the variable request", json.dumps([stored.spawn, stored.required,
                                                      stored.missing]))  # fmt: skip
    assert len(engine.script.requests) == 6
    for index, model_request in enumerate(engine.script.requests):
        _secret_free(f"model request {index}", repr(model_request))
    _secret_free("the database", database_text())

    # Another tenant sees none of it.
    intruder = _client(other_tenant, client_for, Role.ADMIN)
    assert intruder.get(endpoint).status_code == 404
    assert intruder.post(endpoint, {"env": {"CHILD_TOKEN": "x"}}, format="json").status_code == 404


@pytest.mark.usefixtures("token_reads")
def test_an_expired_request_is_410_and_an_unknown_one_404(
    engine: Engine, client_for: Callable[..., APIClient]
) -> None:
    _define(engine, ["vault"])
    parent = engine.thread("boss")
    request_id = _bootstrap_error(engine, parent)["error_data"]["request_id"]
    VariableRequest.objects.filter(pk=request_id).update(expires_at=now_us() - 1)
    member = _client(engine.tenant, client_for, Role.MEMBER)
    endpoint = f"/api/v1/threads/{parent.id}/variables/{request_id}"

    shown = member.get(endpoint)
    expired = member.post(endpoint, {"env": {"CHILD_TOKEN": SECRET}}, format="json")
    unknown = f"/api/v1/threads/{parent.id}/variables/{uuid.uuid4()}"
    missing = (member.get(unknown), member.post(unknown, {"env": {"CHILD_TOKEN": "x"}},
                                                format="json"))  # fmt: skip

    assert (shown.status_code, shown.json()["status"]) == (200, "expired")
    assert member.get(f"/api/v1/threads/{parent.id}").json()["pending_requests"] == []
    assert expired.status_code == 410
    assert expired.json()["error"]["code"] == "expired"
    assert [r.status_code for r in missing] == [404, 404]
    assert {r.json()["error"]["code"] for r in missing} == {"not_found"}
    assert not Thread.objects.filter(parent=parent).exists()


@pytest.mark.usefixtures("token_reads")
def test_a_request_of_another_thread_of_the_same_tenant_is_404(
    engine: Engine, client_for: Callable[..., APIClient]
) -> None:
    _define(engine, ["vault"])
    parent = engine.thread("boss")
    request_id = _bootstrap_error(engine, parent)["error_data"]["request_id"]
    elsewhere = engine.thread("boss")
    member = _client(engine.tenant, client_for, Role.MEMBER)

    response = member.get(f"/api/v1/threads/{elsewhere.id}/variables/{request_id}")

    assert response.status_code == 404


@pytest.mark.usefixtures("token_reads")
def test_a_read_only_key_may_read_a_request_but_not_complete_it(
    engine: Engine, client_for: Callable[..., APIClient]
) -> None:
    _define(engine, ["vault"])
    parent = engine.thread("boss")
    request_id = _bootstrap_error(engine, parent)["error_data"]["request_id"]
    reader = _client(engine.tenant, client_for, Role.READ_ONLY)
    endpoint = f"/api/v1/threads/{parent.id}/variables/{request_id}"

    shown = reader.get(endpoint)
    refused = reader.post(endpoint, {"env": {"CHILD_TOKEN": SECRET}}, format="json")

    assert shown.status_code == 200
    assert refused.status_code == 403
    assert not Thread.objects.filter(parent=parent).exists()


# maxInstances under concurrency ---------------------------------------------------------------

LIMITED = {"name": "pair", "blocking": False,
           "resumable": {"receives_messages": "side_a", "max_instances": 5}}  # fmt: skip


@pytest.mark.django_db(transaction=True)
@pytest.mark.usefixtures("token_reads")
def test_twenty_concurrent_spawns_under_max_instances_five_create_exactly_five(
    engine: Engine, wakes: list[str]
) -> None:
    """RT-7.2: maxInstances holds under concurrent spawns (the parent's row lock): 5
    children, 15 refusals with error_code subagent_max_instances, no duplicate entries."""
    _define(engine, [LIMITED])
    parent = engine.thread("boss")
    config = ToolConfig(
        name="pair", blocking=False,
        resumable=ResumableConfig(receives_messages="side_a", max_instances=5),
    )  # fmt: skip
    relationship = relationship_load(
        tenant=engine.tenant, agent_name="pair", config=config, owner="a"
    )
    assert relationship is not None
    start = threading.Barrier(20)
    results: dict[int, Spawned | ToolResult | BaseException] = {}

    def spawn(index: int) -> None:
        try:
            start.wait(timeout=10)
            results[index] = spawn_child(
                parent=Thread.objects.select_related("tenant").get(pk=parent.pk),
                relationship=relationship,
                request=SpawnRequest(message=f"task {index}", label=f"n{index}"),
            )
        except BaseException as error:  # reported below, with the others
            results[index] = error
        finally:
            connection.close()

    workers = [ContextThread(target=spawn, args=(index,)) for index in range(20)]
    for worker in workers:
        worker.start()
    for worker in workers:
        worker.join(timeout=60)

    assert not [error for error in results.values() if isinstance(error, BaseException)]
    spawned = [r for r in results.values() if isinstance(r, Spawned)]
    refused = [r for r in results.values() if isinstance(r, ToolResult)]
    assert (len(results), len(spawned), len(refused)) == (20, 5, 15)
    assert {r.error_code for r in refused} == {"subagent_max_instances"}
    assert all(r.status == "error" and "at most 5 live instances" in (r.error or "")
               for r in refused)  # fmt: skip
    links = list(SubagentLink.objects.filter(thread=parent).values_list("child_id", flat=True))
    children = set(Thread.objects.filter(parent=parent).values_list("pk", flat=True))
    assert (len(links), len(set(links)), len(children)) == (5, 5, 5)
    assert set(links) == children == {s.child.pk for s in spawned}
    assert sorted(wakes) == sorted(str(s.child.pk) for s in spawned)
    assert Event.objects.filter(thread=parent, type="subagent.spawned").count() == 5


@pytest.mark.usefixtures("token_reads")
def test_twenty_parallel_creates_in_one_model_answer_make_five_children_and_fifteen_errors(
    engine: Engine,
) -> None:
    _define(engine, [LIMITED])
    parent = engine.thread("boss")
    calls = [
        {"name": "subagent_create", "arguments": {**CREATE_ARGS, "name": f"n{index}"}}
        for index in range(20)
    ]
    engine.script.tool_calls(calls).text("Started what I could.")
    engine.send(parent, "start twenty")

    engine.drive(parent)

    results = _tool_rows(parent)
    assert len(results) == 20
    assert [row.tool_status for row in results].count("success") == 5
    errors = [row for row in results if row.tool_status == "error"]
    assert len(errors) == 15
    assert {row.metadata["error_code"] for row in errors} == {"subagent_max_instances"}
    live = set(SubagentLink.objects.filter(thread=parent).values_list("child_id", flat=True))
    assert len(live) == 5
    assert {row.metadata["subagent_id"] for row in results if row.tool_status == "success"} == {
        str(pk) for pk in live
    }
    assert all(sorted(row.metadata["error_data"]["live"]) == sorted(map(str, live))
               for row in errors)  # fmt: skip


# Bad input is 4xx JSON, never a 500 ----------------------------------------------------------

NUL = "\x00"


def _bad_posts() -> list[tuple[str, str, str]]:
    """(what, body, content type): bodies the variables POST must refuse."""
    as_json = "application/json"
    return [
        ("non-JSON body", "{not json", as_json),
        ("empty body", "", as_json),
        ("a JSON array", json.dumps([1, 2]), as_json),
        ("a JSON string", json.dumps("env"), as_json),
        ("no env", json.dumps({}), as_json),
        ("env null", json.dumps({"env": None}), as_json),
        ("env a string", json.dumps({"env": "CHILD_TOKEN=x"}), as_json),
        ("env a list", json.dumps({"env": ["CHILD_TOKEN"]}), as_json),
        ("env value a number", json.dumps({"env": {"CHILD_TOKEN": 7}}), as_json),
        ("env value null", json.dumps({"env": {"CHILD_TOKEN": None}}), as_json),
        ("env value an object", json.dumps({"env": {"CHILD_TOKEN": {"value": "x"}}}), as_json),
        ("env value a list", json.dumps({"env": {"CHILD_TOKEN": ["x"]}}), as_json),
        ("env value blank", json.dumps({"env": {"CHILD_TOKEN": "  "}}), as_json),
        ("NUL in the value", json.dumps({"env": {"CHILD_TOKEN": f"a{NUL}b"}}), as_json),
        ("NUL in the name", json.dumps({"env": {f"CHILD{NUL}TOKEN": "x"}}), as_json),
        ("a 10k-character name", json.dumps({"env": {"A" * 10_000: "x"}}), as_json),
        ("a 10k-character odd name", json.dumps({"env": {"é" * 10_000: "x"}}), as_json),
        ("an empty name", json.dumps({"env": {"": "x"}}), as_json),
        ("a name with spaces", json.dumps({"env": {"CHILD TOKEN": "x"}}), as_json),
        ("a lone surrogate", '{"env": {"CHILD_TOKEN": "\\ud800"}}', as_json),
        ("form-encoded", "env=CHILD_TOKEN", "application/x-www-form-urlencoded"),
        ("plain text", "CHILD_TOKEN=x", "text/plain"),
        (
            "a 1 MB value",
            json.dumps({"env": {"CHILD_TOKEN": "x" * 1_000_000, "OTHER": "y"}}),
            as_json,
        ),
    ]


def _json_error(response: Any, what: str) -> None:
    assert 400 <= response.status_code < 500, (what, response.status_code, response.content)
    assert response["Content-Type"].startswith("application/json"), (what, response.content)
    error = response.json()["error"]
    assert isinstance(error["code"], str), what
    assert isinstance(error["message"], str), what
    assert error["code"], what
    assert error["message"], what


@pytest.fixture
def pending(engine: Engine, token_reads: list[str]) -> tuple[Thread, str]:
    """A thread of ``boss`` with one pending variable request (its id)."""
    _define(engine, ["vault"])
    parent = engine.thread("boss")
    return parent, _bootstrap_error(engine, parent)["error_data"]["request_id"]


def test_bad_variable_posts_are_4xx_json_errors_and_change_nothing(
    pending: tuple[Thread, str], engine: Engine, client_for: Callable[..., APIClient]
) -> None:
    parent, request_id = pending
    member = _client(engine.tenant, client_for, Role.MEMBER)
    endpoint = f"/api/v1/threads/{parent.id}/variables/{request_id}"

    for what, body, content_type in _bad_posts():
        response = member.generic("POST", endpoint, body, content_type=content_type)
        _json_error(response, what)
        assert response.status_code != 404, what

    request = VariableRequest.objects.get(pk=request_id)
    assert (request.status, request.missing) == ("pending", ["CHILD_TOKEN"])
    assert not Thread.objects.filter(parent=parent).exists()


@pytest.mark.parametrize(
    "suffix",
    [
        "variables/not-a-uuid",
        "variables/123",
        "variables/" + "f" * 10_000,
        "variables/%00",
        "variables/00000000-0000-0000-0000-00000000000g",
        "variables/",
        "children/extra",
    ],
)
@pytest.mark.parametrize("method", ["get", "post", "put", "delete"])
def test_malformed_request_ids_are_json_404s(
    suffix: str, method: str, thread: Thread, tenant: Tenant, client_for: Callable[..., APIClient]
) -> None:
    member = _client(tenant, client_for, Role.MEMBER)

    response = getattr(member, method)(f"/api/v1/threads/{thread.id}/{suffix}", {}, format="json")

    _json_error(response, suffix)
    # A NUL in the URL is refused before routing (400 naming the path); the rest match nothing.
    assert response.status_code == (400 if "%00" in suffix else 404)


@pytest.mark.parametrize("path", ["children", "variables/{request_id}"])
@pytest.mark.parametrize("method", ["put", "patch", "delete"])
def test_unsupported_methods_are_json_405s(
    path: str, method: str, pending: tuple[Thread, str], engine: Engine,
    client_for: Callable[..., APIClient],
) -> None:  # fmt: skip
    parent, request_id = pending
    member = _client(engine.tenant, client_for, Role.MEMBER)

    response = getattr(member, method)(
        f"/api/v1/threads/{parent.id}/{path.format(request_id=request_id)}", {}, format="json"
    )

    _json_error(response, path)
    assert response.status_code == 405


def test_routes_of_an_unknown_or_malformed_thread_are_json_404s(
    tenant: Tenant, client_for: Callable[..., APIClient]
) -> None:
    member = _client(tenant, client_for, Role.MEMBER)
    paths = [
        f"/api/v1/threads/{uuid.uuid4()}/children",
        f"/api/v1/threads/{uuid.uuid4()}/variables/{uuid.uuid4()}",
        "/api/v1/threads/not-a-uuid/children",
        f"/api/v1/threads/not-a-uuid/variables/{uuid.uuid4()}",
    ]

    for path in paths:
        for response in (member.get(path), member.post(path, {"env": {}}, format="json")):
            _json_error(response, path)
            assert response.status_code == 404


def test_no_key_is_a_json_401(thread: Thread, api_client: APIClient) -> None:
    for path in (f"/api/v1/threads/{thread.id}/children",
                 f"/api/v1/threads/{thread.id}/variables/{uuid.uuid4()}"):  # fmt: skip
        response = api_client.get(path)
        _json_error(response, path)
        assert response.status_code == 401

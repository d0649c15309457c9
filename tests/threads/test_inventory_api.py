"""threads/api/inventory.py: ``GET /api/v1/threads/{id}/tools``, the tools a side's prompt
offers the model, each with the permission rules' decision for it."""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

import pytest
from rest_framework.test import APIClient

from agents.models import PermissionRule
from agents.registry import tool
from tenancy.models import Role, Tenant
from tests.factories import make_thread
from tests.threads.runtime.conftest import Engine, prompt
from threads.models import Thread, Turn
from threads.services.env import thread_env_set

pytestmark = pytest.mark.django_db

ABOVE_100 = {">": [{"var": "amount"}, 100]}
RESUMABLE = {"name": "pair", "resumable": {"receives_messages": "side_a", "max_instances": 2}}


def _tools(thread: Thread) -> str:
    return f"/api/v1/threads/{thread.id}/tools"


def _refund_tool(**approval: Any) -> None:
    @tool(
        description="Refund an amount.",
        args={"type": "object", "properties": {"amount": {"type": "number"}}},
        **approval,
    )
    def refund(state: Any, args: dict[str, Any]) -> str:
        return f"refunded {args['amount']}"


def _define(engine: Engine, boss_tools: list[Any]) -> Thread:
    """A ``boss`` (ai_human) whose prompt lists ``boss_tools``; a ``writer`` subprompt, a
    ``desk`` agent to hand off to and a ``pair`` (dual_ai) to delegate to."""
    engine.define(
        prompts=[
            prompt("boss", tools=boss_tools),
            prompt("writer", tools=["echo"]),
            prompt("front"),
            prompt("worker", tools=["finish"]),
            prompt("checker", tools=["give_up"]),
        ],
        agents=[
            {"name": "boss", "side_a": {"prompt": "boss"}},
            {"name": "desk", "side_a": {"prompt": "front"}, "expose_as_tool": True,
             "tool_description": "The front desk"},
            {"name": "pair", "type": "dual_ai", "side_a": {"prompt": "worker"},
             "side_b": {"prompt": "checker"}, "max_session_turns": 1, "expose_as_tool": True,
             "tool_description": "A worker and a checker"},
        ],
    )  # fmt: skip
    return engine.thread("boss")


def _by_name(answer: dict[str, Any]) -> dict[str, dict[str, Any]]:
    return {item["name"]: item for item in answer["tools"]}


def test_the_inventory_is_what_a_turn_offers_the_model(engine: Engine, member: APIClient) -> None:
    _refund_tool()
    thread = _define(
        engine,
        ["refund", {"name": "echo", "optional": "ECHO_ON"}, "writer", "desk", RESUMABLE, "chain"],
    )
    answer = member.get(_tools(thread))
    engine.script.text("Hello.")
    engine.send(thread, "hi")
    engine.drive(thread)

    assert answer.status_code == 200, answer.json()
    body = answer.json()
    assert (body["thread_id"], body["agent"], body["side"], body["prompt"]) == (
        str(thread.id), "boss", "a", "boss",
    )  # fmt: skip
    offered = engine.script.requests[0].tools
    assert [(t["name"], t["description"], t["parameters"]) for t in body["tools"]] == [
        (spec.name, spec.description, spec.parameters) for spec in offered
    ]
    assert [(t["name"], t["kind"]) for t in body["tools"]] == [
        ("refund", "function"), ("writer", "prompt"), ("desk", "handoff"), ("chain", "function"),
        ("subagent_create", "lifecycle"), ("subagents", "lifecycle"),
    ]  # fmt: skip


def test_an_optional_entry_is_listed_when_the_threads_env_turns_it_on(
    engine: Engine, member: APIClient
) -> None:
    thread = _define(engine, [{"name": "echo", "optional": "ECHO_ON"}])
    before = member.get(_tools(thread)).json()["tools"]
    thread_env_set(thread=thread, name="ECHO_ON", value="yes")

    after = member.get(_tools(thread)).json()["tools"]

    assert before == []
    assert [(item["name"], item["kind"]) for item in after] == [("echo", "function")]


def test_each_tool_carries_the_decision_the_rule_behind_it_and_the_rules_weighed(
    engine: Engine, member: APIClient, tenant: Tenant
) -> None:
    _refund_tool(approval="ask")
    thread = _define(engine, ["refund", {"name": "echo", "approval": "deny"}, "writer", "chain"])
    conditional = PermissionRule.objects.create(
        tenant=tenant, agent="boss", tool="refund", decision="deny", when=ABOVE_100
    )
    PermissionRule.objects.create(tenant=tenant, agent="desk", tool="writer", decision="deny")
    everyone = PermissionRule.objects.create(tenant=tenant, tool="chain", decision="allow")

    tools = _by_name(member.get(_tools(thread)).json())

    assert tools["refund"]["permission"] == {
        "decision": "ask",
        "rule": {"decision": "ask", "source": "registry", "on_expiry": "deny"},
        "source": "registry",
        "depends_on_arguments": True,
        "rules": [
            {"decision": "ask", "source": "registry", "on_expiry": "deny"},
            {"decision": "deny", "source": "tenant", "when": ABOVE_100,
             "id": str(conditional.id)},
        ],
    }  # fmt: skip
    assert tools["echo"]["permission"] == {
        "decision": "deny",
        "rule": {"decision": "deny", "source": "prompt"},
        "source": "prompt",
        "depends_on_arguments": False,
        "rules": [{"decision": "deny", "source": "prompt"}],
    }
    assert tools["writer"]["permission"] == {
        "decision": "allow", "rule": None, "source": None, "depends_on_arguments": False,
        "rules": [],
    }  # fmt: skip
    allow = {"decision": "allow", "source": "tenant", "id": str(everyone.id)}
    assert tools["chain"]["permission"] == {
        "decision": "allow", "rule": allow, "source": "tenant", "depends_on_arguments": False,
        "rules": [allow],
    }  # fmt: skip


def test_side_b_and_a_subprompt_are_listed_by_query(engine: Engine, member: APIClient) -> None:
    _define(engine, ["writer"])
    pair = engine.thread("pair")
    boss = Thread.objects.get(agent_name="boss")

    side_b = member.get(_tools(pair), {"side": "b"}).json()
    subprompt = member.get(_tools(boss), {"prompt": "writer"}).json()

    assert (side_b["side"], side_b["prompt"]) == ("b", "checker")
    assert [item["name"] for item in side_b["tools"]] == ["give_up"]
    assert (subprompt["side"], subprompt["prompt"]) == ("a", "writer")
    assert [(item["name"], item["kind"]) for item in subprompt["tools"]] == [("echo", "function")]


def test_a_code_tool_and_code_mode_have_their_kinds(engine: Engine, member: APIClient) -> None:
    engine.define(
        prompts=[prompt("coder", tools=["echo"], code_mode=True)],
        agents=[{"name": "coder", "side_a": {"prompt": "coder"}}],
    )
    thread = engine.thread("coder")

    tools = member.get(_tools(thread)).json()["tools"]

    assert [(item["name"], item["kind"]) for item in tools] == [
        ("echo", "function"), ("code", "code_mode"),
    ]  # fmt: skip
    assert tools[1]["parameters"]["required"] == ["source"]


@pytest.mark.parametrize(
    ("query", "field", "message"),
    [
        ({"side": "b"}, "side", "side b of agent 'boss' is a person: it is offered no tools"),
        ({"side": "c"}, "side", None),
        ({"prompt": "front"}, "prompt", "'front' is none of agent 'boss''s prompts (boss, writer)"),
        ({"sid": "a"}, "sid", "unknown query parameter 'sid' (known: side, prompt)"),
    ],
)
def test_a_bad_query_is_a_400_naming_it(
    engine: Engine, member: APIClient, query: dict[str, str], field: str, message: str | None
) -> None:
    thread = _define(engine, ["writer"])

    response = member.get(_tools(thread), query)

    assert response.status_code == 400
    error = response.json()["error"]
    assert error["field"] == field
    if message is not None:
        assert error["message"] == message


def test_a_thread_whose_agent_is_gone_is_a_400(tenant: Tenant, member: APIClient) -> None:
    thread = make_thread(tenant, agent_name="gone")

    response = member.get(_tools(thread))

    assert response.status_code == 400
    assert response.json()["error"]["message"] == "the thread's agent 'gone' no longer exists"


def test_a_read_only_key_reads_it_and_another_tenant_gets_a_404(
    engine: Engine,
    other_tenant: Tenant,
    client_for: Callable[..., APIClient],
) -> None:
    thread = _define(engine, ["writer"])

    reader = client_for(engine.tenant, Role.READ_ONLY).get(_tools(thread))
    intruder = client_for(other_tenant, Role.ADMIN).get(_tools(thread))

    assert reader.status_code == 200
    assert intruder.status_code == 404
    assert intruder.json()["error"]["code"] == "not_found"


def test_each_turn_lists_the_catalogs_its_model_calls_were_offered(
    engine: Engine, member: APIClient
) -> None:
    # A boss whose subprompt has other tools: the turn's calls saw two catalogs; the
    # boss's second call offered the same tools and published none.
    engine.define(
        prompts=[prompt("boss", tools=["echo", "writer"]), prompt("writer", tools=["finish"])],
        agents=[{"name": "boss", "side_a": {"prompt": "boss"}}],
    )
    thread = engine.thread("boss")
    engine.script.tool_calls([{"name": "writer", "arguments": {}}]).text("Drafted.").text("Sent.")
    engine.send(thread, "write it")
    engine.drive(thread)
    engine.script.text("Again.")
    engine.send(thread, "once more")
    engine.drive(thread)

    first, second = Turn.objects.filter(thread=thread).order_by("position")
    answer = member.get(f"/api/v1/turns/{first.id}/tools")
    assert answer.status_code == 200, answer.content
    catalogs = answer.json()["catalogs"]
    assert [(c["prompt"], [t["name"] for t in c["tools"]]) for c in catalogs] == [
        ("boss", ["echo", "writer"]),
        ("writer", ["finish"]),
    ]
    assert [t["kind"] for t in catalogs[0]["tools"]] == ["function", "prompt"]
    assert catalogs[0]["sequence"] < catalogs[1]["sequence"]
    # Each turn's first call publishes its catalog anew, with the same digest.
    (again,) = member.get(f"/api/v1/turns/{second.id}/tools").json()["catalogs"]
    assert (again["prompt"], again["digest"]) == ("boss", catalogs[0]["digest"])


def test_a_turn_whose_calls_offered_no_tools_lists_no_catalog(
    engine: Engine, member: APIClient
) -> None:
    engine.define(
        prompts=[prompt("plain")], agents=[{"name": "plain", "side_a": {"prompt": "plain"}}]
    )
    thread = engine.thread("plain")
    engine.script.text("Hi.")
    engine.send(thread, "hello")
    engine.drive(thread)

    (turn,) = Turn.objects.filter(thread=thread)
    assert member.get(f"/api/v1/turns/{turn.id}/tools").json() == {
        "turn_id": str(turn.id),
        "catalogs": [],
    }

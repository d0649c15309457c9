"""threads/api/permissions.py: ``POST /api/v1/permissions/evaluate``, the dry run of a tool
call's permission, decided by the function the engine decides with."""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

import pytest
from rest_framework.test import APIClient

from agents.models import PermissionRule
from agents.registry import tool
from tenancy.models import Role, Tenant
from tests.factories import make_thread
from tests.threads.runtime.conftest import Engine, engine, prompt
from threads.models import Event, Thread

__all__ = ["engine"]

pytestmark = pytest.mark.django_db

EVALUATE = "/api/v1/permissions/evaluate"
ABOVE_100 = {">": [{"var": "amount"}, 100]}


def _refund_tool(**approval: Any) -> list[float]:
    refunded: list[float] = []

    @tool(
        description="Refund an amount.",
        args={"type": "object", "properties": {"amount": {"type": "number"}}},
        **approval,
    )
    def refund(state: Any, args: dict[str, Any]) -> str:
        refunded.append(args["amount"])
        return f"refunded {args['amount']}"

    return refunded


def _helper(engine: Engine, entry: Any = "refund") -> Thread:
    engine.define(
        prompts=[prompt("helper", tools=[entry]), prompt("other", tools=["echo"])],
        agents=[
            {"name": "helper", "side_a": {"prompt": "helper"}},
            {"name": "other", "side_a": {"prompt": "other"}},
        ],
    )
    return engine.thread("helper")


def _evaluate(client: APIClient, body: dict[str, Any]) -> Any:
    return client.post(EVALUATE, body, format="json")


def test_the_dry_run_answers_what_the_engine_decided_for_the_same_calls(
    engine: Engine, member: APIClient, tenant: Tenant
) -> None:
    refunded = _refund_tool()
    thread = _helper(engine, {"name": "refund", "approval": {"decision": "deny",
                                                            "when": ABOVE_100}})  # fmt: skip
    PermissionRule.objects.create(tenant=tenant, agent="helper", tool="refund", decision="allow")
    calls = [{"amount": 50}, {"amount": 500}]
    engine.script.tool_calls([
        {"name": "refund", "arguments": arguments, "id": f"call-{n}"}
        for n, arguments in enumerate(calls)
    ]).text("One of two.")  # fmt: skip
    engine.send(thread, "refund both")

    engine.drive(thread)
    decided = [
        (event.payload["decision"], event.payload["rule"])
        for event in Event.objects.filter(thread=thread, type="permission.evaluated").order_by(
            "sequence"
        )
    ]
    answers = [
        _evaluate(member, {"thread_id": str(thread.id), "tool": "refund", "arguments": arguments})
        for arguments in calls
    ]

    assert refunded == [50]
    assert [answer.status_code for answer in answers] == [200, 200]
    assert [(a.json()["decision"], a.json()["rule"]) for a in answers] == decided
    assert [decision for decision, _ in decided] == ["allow", "deny"]
    assert decided[1][1] == {"decision": "deny", "source": "prompt", "when": ABOVE_100}


def test_the_answer_names_the_call_the_rule_and_every_rule_weighed(
    engine: Engine, member: APIClient, tenant: Tenant
) -> None:
    _refund_tool(approval="ask")
    thread = _helper(engine)
    deny = PermissionRule.objects.create(
        tenant=tenant, agent="helper", tool="refund", decision="deny", when=ABOVE_100
    )
    PermissionRule.objects.create(tenant=tenant, agent="other", tool="refund", decision="deny")

    body = {"thread_id": str(thread.id), "tool": "refund", "arguments": {"amount": 500}}
    answer = _evaluate(member, body).json()

    denying = {"decision": "deny", "source": "tenant", "when": ABOVE_100, "id": str(deny.id)}
    assert answer == {
        "decision": "deny",
        "rule": denying,
        "source": "tenant",
        "depends_on_arguments": True,
        "rules": [{"decision": "ask", "source": "registry", "on_expiry": "deny"}, denying],
        "agent": "helper",
        "prompt": "helper",
        "tool": "refund",
        "kind": "function",
        "offered": True,
    }


def test_an_agent_without_a_thread_is_evaluated_as_a_new_thread_of_it(
    engine: Engine, member: APIClient
) -> None:
    _refund_tool()
    _helper(engine, {"name": "refund", "approval": "ask"})

    answer = _evaluate(member, {"agent": "helper", "tool": "refund"}).json()
    other = _evaluate(member, {"agent": "other", "tool": "refund"}).json()

    assert (answer["decision"], answer["source"], answer["prompt"]) == ("ask", "prompt", "helper")
    assert (answer["kind"], answer["offered"]) == ("function", True)
    # other's prompt does not offer refund: its entry's rule is not weighed there
    assert (other["decision"], other["rule"], other["offered"], other["kind"]) == (
        "allow", None, False, None,
    )  # fmt: skip


def test_without_an_agent_only_the_registry_default_and_every_agents_rules_apply(
    engine: Engine, member: APIClient, tenant: Tenant
) -> None:
    _refund_tool(approval="ask")
    _helper(engine, {"name": "refund", "approval": "deny"})
    everyone = PermissionRule.objects.create(tenant=tenant, tool="echo", decision="deny")
    PermissionRule.objects.create(tenant=tenant, agent="helper", tool="echo", decision="allow")

    refund = _evaluate(member, {"tool": "refund", "arguments": {"amount": 1}}).json()
    echo = _evaluate(member, {"tool": "echo"}).json()

    assert (refund["decision"], refund["source"], refund["agent"], refund["prompt"]) == (
        "ask", "registry", None, None,
    )  # fmt: skip
    assert (echo["decision"], echo["rule"]) == (
        "deny", {"decision": "deny", "source": "tenant", "id": str(everyone.id)},
    )  # fmt: skip


@pytest.mark.parametrize(
    ("body", "field"),
    [
        ({"tool": "refund", "argument": {}}, "argument"),
        ({"arguments": {}}, "tool"),
        ({"tool": "refund", "arguments": [1]}, "arguments"),
        ({"tool": "refund", "agent": "nobody"}, "agent"),
        ({"tool": "refund", "agent": "helper", "prompt": "other"}, "prompt"),
        ({"tool": "refund", "prompt": "helper"}, "prompt"),
        ({"tool": "refund", "thread_id": "not-a-uuid"}, "thread_id"),
    ],
)
def test_a_bad_body_is_a_400_naming_the_field(
    engine: Engine, member: APIClient, body: dict[str, Any], field: str
) -> None:
    _refund_tool()
    _helper(engine)

    response = _evaluate(member, body)

    assert response.status_code == 400, response.json()
    assert response.json()["error"]["field"] == field


def test_an_agent_other_than_the_threads_is_a_400(engine: Engine, member: APIClient) -> None:
    _refund_tool()
    thread = _helper(engine)

    response = _evaluate(member, {"thread_id": str(thread.id), "agent": "other", "tool": "x"})

    assert response.status_code == 400
    assert response.json()["error"] == {
        "code": "invalid", "field": "agent",
        "message": "the thread's agent is 'helper', not 'other' (leave agent out)",
    }  # fmt: skip


def test_any_role_may_evaluate_and_another_tenants_thread_is_a_404(
    tenant: Tenant, other_tenant: Tenant, client_for: Callable[..., APIClient]
) -> None:
    theirs = make_thread(other_tenant)
    reader = client_for(tenant, Role.READ_ONLY)

    allowed = _evaluate(reader, {"tool": "refund"})
    intruding = _evaluate(reader, {"thread_id": str(theirs.id), "tool": "refund"})

    assert allowed.status_code == 200
    assert (allowed.json()["decision"], allowed.json()["offered"]) == ("allow", False)
    assert intruding.status_code == 404
    assert intruding.json()["error"]["code"] == "not_found"

"""Permission rules (agents.permissions): the condition language, precedence, and where rules
are declared (a registry tool's default, a prompt's ``tools[]`` entry)."""

from __future__ import annotations

from typing import Any

import pytest
from rest_framework.test import APIClient

from agents.permissions import DECISIONS, ConditionInvalid, Rule, decide, evaluate, rule_from
from agents.registry import Registry, RegistryError, tool
from tenancy.models import Tenant
from tests.agents.samples import seed_rich

ABOVE_100 = {">": [{"var": "amount"}, 100]}


@pytest.mark.parametrize(
    ("condition", "arguments", "expected"),
    [
        (ABOVE_100, {"amount": 150}, True),
        (ABOVE_100, {"amount": 100}, False),
        (ABOVE_100, {"amount": "150"}, False),  # a string is not ordered against a number
        (ABOVE_100, {}, False),  # missing: null
        ({"==": [{"var": "to.domain"}, "example.com"]}, {"to": {"domain": "example.com"}}, True),
        ({"==": [{"var": "n"}, 1]}, {"n": 1.0}, True),
        ({"==": [{"var": "flag"}, 1]}, {"flag": True}, False),
        ({"!=": [{"var": "n"}, 1]}, {"n": 2}, True),
        ({"<=": [{"var": "n"}, 3]}, {"n": 3}, True),
        ({"in": [{"var": "c"}, ["eur", "usd"]]}, {"c": "usd"}, True),
        ({"in": ["@", {"var": "to"}]}, {"to": "a@b.c"}, True),
        ({"in": [{"var": "c"}, ["eur"]]}, {"c": "gbp"}, False),
        ({"and": [ABOVE_100, {"==": [{"var": "c"}, "usd"]}]}, {"amount": 200, "c": "usd"}, True),
        ({"and": [ABOVE_100, {"==": [{"var": "c"}, "usd"]}]}, {"amount": 200, "c": "eur"}, False),
        ({"or": [ABOVE_100, {"var": "urgent"}]}, {"amount": 5, "urgent": True}, True),
        ({"!": {"var": "urgent"}}, {}, True),
        ({"var": "items.1.qty"}, {"items": [{"qty": 0}, {"qty": 2}]}, 2),
    ],
)
def test_conditions_evaluate_on_the_call_arguments(
    condition: Any, arguments: dict[str, Any], expected: Any
) -> None:
    assert evaluate(condition, arguments) == expected


@pytest.mark.parametrize(
    ("value", "path", "message"),
    [
        ("maybe", "", "'maybe' is not a decision"),
        ({"decision": "deny", "if": {}}, "if", "unknown key 'if'"),
        ({"decision": "deny", "when": {"gt": [1, 2]}}, "when.gt", "unknown operator 'gt'"),
        ({"decision": "deny", "when": {">": [1]}}, "when.>", "exactly two operands"),
        ({"decision": "deny", "when": {"var": 3}}, "when.var", "dotted argument path"),
        ({"decision": "deny", "when": {"and": []}}, "when.and", "at least one operand"),
        ({"decision": "deny", "when": {"a": 1, "b": 2}}, "when", "one operator"),
        ({"decision": "deny", "when": {"!": {"x": 1}}}, "when.!.x", "unknown operator 'x'"),
    ],
)
def test_a_rule_that_does_not_parse_is_refused_naming_where(
    value: Any, path: str, message: str
) -> None:
    with pytest.raises(ConditionInvalid) as caught:
        rule_from(value, source="prompt")

    assert caught.value.path == path
    assert message in caught.value.message


def test_deny_beats_ask_beats_allow_and_no_rule_allows() -> None:
    allow, ask, deny = (Rule(d, source="prompt") for d in DECISIONS)
    above = Rule("deny", ABOVE_100, source="registry")

    assert decide([], {}).decision == "allow"
    assert decide([allow, deny], {}).rule is deny
    assert decide([deny, allow], {}).rule is deny
    assert decide([allow, ask], {}).decision == "ask"
    assert decide([allow, above], {"amount": 50}).rule is allow
    assert decide([allow, above], {"amount": 500}).rule is above


def test_a_registry_tool_declares_its_default_rule(reg: Registry) -> None:
    @tool(description="Refunds.", approval={"decision": "deny", "when": ABOVE_100})
    def refund(state: Any) -> str:
        return "ok"

    entry = reg.tools["refund"]
    assert entry.approval == Rule("deny", ABOVE_100, source="registry")


@pytest.mark.parametrize(
    ("approval", "message"),
    [
        ({"decision": "deny", "when": {"gt": [1, 2]}}, "at when.gt: unknown operator 'gt'"),
        ({"decision": "deny", "expires_in": 60}, "at expires_in: expires_in applies to ask"),
        ({"decision": "ask", "on_expiry": "maybe"}, "on_expiry must be one of deny, allow"),
    ],
)
def test_a_registry_tool_with_a_bad_rule_fails_at_start_up(
    reg: Registry, approval: Any, message: str
) -> None:
    def refund(state: Any) -> str:
        return "ok"

    with pytest.raises(RegistryError) as caught:
        tool(description="Refunds.", approval=approval)(refund)

    assert "approval of tool 'refund'" in caught.value.message
    assert message in caught.value.message
    assert reg.tools == {}


@pytest.mark.django_db
@pytest.mark.parametrize(
    ("approval", "field", "message"),
    [
        ({"decision": "ask", "expires_in": 0}, "tools[0].approval.expires_in", "from 1 to"),
        ({"decision": "deny", "when": {">": [1]}}, "tools[0].approval.when.>", "two operands"),
        ("never", "tools[0].approval", "not a decision"),
    ],
)
def test_a_prompt_tool_rule_is_checked_when_saved_naming_the_field(
    tenant: Tenant, member: APIClient, approval: Any, field: str, message: str
) -> None:
    seed_rich(tenant)

    response = member.patch(
        "/api/v1/prompts/assistant", {"tools": [{"name": "summarize", "approval": approval}]},
        format="json",
    )  # fmt: skip

    assert response.status_code == 400
    error = response.json()["error"]
    assert error["field"] == field
    assert message in error["message"]


@pytest.mark.django_db
def test_a_prompt_tool_rule_that_denies_is_saved_and_exported(
    tenant: Tenant, member: APIClient
) -> None:
    seed_rich(tenant)
    approval = {"decision": "deny", "when": ABOVE_100}

    saved = member.patch(
        "/api/v1/prompts/assistant", {"tools": [{"name": "summarize", "approval": approval}]},
        format="json",
    )  # fmt: skip

    assert saved.status_code == 200, saved.json()
    assert saved.json()["tools"] == [{"name": "summarize", "approval": approval}]

"""The MCP tools' names, schemas and arguments (interop.mcp_server.tools): pure functions,
no server needed."""

from __future__ import annotations

import uuid

import pytest

from interop.mcp_server.tools import (
    AgentCall,
    AgentRow,
    AnswerAction,
    BadArguments,
    agent_tools,
    arguments_of,
    input_schema,
    offered,
    tool_name,
)
from tenancy.models import Role


def _row(name: str, description: str = "", tool_description: str = "") -> AgentRow:
    return AgentRow(name=name, description=description, tool_description=tool_description)


@pytest.mark.parametrize(
    ("name", "expected"),
    [
        ("support_bot", "support_bot"),
        ("a b.c/d", "a_b_c_d"),
        ("x" * 80, "x" * 64),
        ("", "agent"),
    ],
)
def test_a_tool_name_keeps_only_what_the_tool_name_rules_allow(name: str, expected: str) -> None:
    assert tool_name(name) == expected


def test_names_taken_by_a_fixed_tool_or_an_earlier_agent_get_a_suffix() -> None:
    tools = agent_tools([_row("answer_action"), _row("a.b"), _row("a_b"), _row("y" * 64),
                         _row("y" * 65)])  # fmt: skip

    assert [(tool.name, tool.agent) for tool in tools] == [
        ("answer_action_2", "answer_action"), ("a_b", "a.b"), ("a_b_2", "a_b"),
        ("y" * 64, "y" * 64), ("y" * 62 + "_2", "y" * 65),
    ]  # fmt: skip


def test_a_tool_says_what_its_agent_does_then_how_to_call_it() -> None:
    described, tool_only, bare = agent_tools(
        [_row("a", "Answers."), _row("b", "", "As a tool."), _row("c")]
    )

    assert described.description.startswith("Answers.\n\nSends a message to the agent 'a'")
    assert tool_only.description.startswith("As a tool.\n\n")
    assert bare.description.startswith("Sends a message to the agent 'c'")


def test_the_agent_tools_schema_names_its_arguments_and_requires_the_message() -> None:
    schema = input_schema(AgentCall)

    assert schema["type"] == "object"
    assert schema["required"] == ["message"]
    assert schema["additionalProperties"] is False
    assert schema["properties"]["thread_id"]["type"] == "string"
    assert schema["properties"]["timeout_s"]["maximum"] == 600
    assert "anyOf" not in str(schema)


@pytest.mark.parametrize(
    ("arguments", "field", "message"),
    [
        ({}, "message", "message: Field required"),
        ({"message": ""}, "message", "message: String should have at least 1 character"),
        ({"message": 1}, "message", "message: Input should be a valid string"),
        ({"message": "x", "thread_id": "nope"}, "thread_id", "thread_id: must be an id (a UUID)"),
        ({"message": "x", "timeout_s": -1}, "timeout_s",
         "timeout_s: Input should be greater than or equal to 0"),
        ({"message": "x", "thred_id": "a"}, "thred_id", "thred_id: unknown argument 'thred_id'"),
    ],
)  # fmt: skip
def test_bad_arguments_name_the_first_wrong_one(
    arguments: dict[str, object], field: str, message: str
) -> None:
    with pytest.raises(BadArguments) as refused:
        arguments_of(AgentCall, arguments)

    assert (refused.value.field, refused.value.message) == (field, message)


def test_good_arguments_take_their_defaults() -> None:
    thread_id = uuid.uuid4()

    call = arguments_of(AgentCall, {"message": "hi", "thread_id": str(thread_id), "timeout_s": 5})

    assert (call.message, call.thread_id, call.timeout_s) == ("hi", thread_id, 5.0)
    assert call.idempotency_key is None


def test_an_answer_carries_only_what_was_given() -> None:
    answer = arguments_of(
        AnswerAction, {"action_id": str(uuid.uuid4()), "decision": "deny", "reason": "no"}
    )

    assert answer.body() == {"decision": "deny", "reason": "no"}


def test_each_role_is_offered_the_tools_it_may_call() -> None:
    agents = agent_tools([_row("chat")])

    names = {role: [name for name, _, _ in offered(role, agents)] for role in Role}

    assert names[Role.READ_ONLY] == ["read_thread_messages"]
    assert names[Role.MEMBER] == ["chat", "read_thread_messages", "answer_action"]
    assert names[Role.ADMIN] == names[Role.MEMBER]

"""Permission rules weighed before each tool call (agents.permissions), in process: a denied
call does not run and the model reads why; every decision is an event."""

from __future__ import annotations

from typing import Any

from agents.models import PermissionRule
from agents.registry import tool
from agents.selectors import definitions_changed
from tests.threads.runtime.conftest import Engine, prompt, rows
from threads.models import Event, Log, Message, Thread

ABOVE_100 = {">": [{"var": "amount"}, 100]}


def _refund_tool(engine: Engine, **approval: Any) -> list[float]:
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
        prompts=[prompt("helper", tools=[entry])],
        agents=[{"name": "helper", "side_a": {"prompt": "helper"}}],
    )
    return engine.thread("helper")


def _small_and_large(engine: Engine, thread: Thread) -> None:
    """The model asks for a refund of 50, then one of 500, in one answer."""
    engine.script.tool_calls([
        {"name": "refund", "arguments": {"amount": 50}, "id": "small"},
        {"name": "refund", "arguments": {"amount": 500}, "id": "large"},
    ]).text("One of two.")  # fmt: skip
    engine.send(thread, "refund both")


def _decisions(thread: Thread) -> list[tuple[str, str, Any]]:
    return [
        (e.payload["name"], e.payload["decision"], e.payload["rule"])
        for e in Event.objects.filter(thread=thread, type="permission.evaluated").order_by(
            "sequence"
        )
    ]


def test_a_call_no_rule_covers_runs_and_its_allow_is_recorded(engine: Engine) -> None:
    refunded = _refund_tool(engine)
    thread = _helper(engine)
    engine.script.tool_calls([{"name": "refund", "arguments": {"amount": 5}}]).text("Done.")
    engine.send(thread, "refund 5")

    engine.drive(thread)

    assert refunded == [5]
    assert _decisions(thread) == [("refund", "allow", None)]


def test_a_prompt_deny_stops_the_call_and_the_model_reads_why(engine: Engine) -> None:
    refunded = _refund_tool(engine)
    thread = _helper(engine, {"name": "refund", "approval": "deny"})
    engine.script.tool_calls([{"name": "refund", "arguments": {"amount": 5}}]).text("Sorry.")
    engine.send(thread, "refund 5")

    engine.drive(thread)

    assert refunded == []
    denial = "Failed to execute tool: Permission denied: a prompt rule denies calls of 'refund'"
    assert rows(thread)[2] == ("tool", "a", denial, "error")
    assert engine.script.requests[1].messages[-1].text == denial
    assert _decisions(thread) == [
        ("refund", "deny", {"decision": "deny", "source": "prompt"}),
    ]
    events = Event.objects.filter(thread=thread).order_by("sequence")
    types = list(events.values_list("type", flat=True))
    assert "tool.started" not in types  # a denied call never starts
    assert types[types.index("permission.evaluated") + 2] == "tool.failed"
    assert Log.objects.get(thread=thread, kind="tool").data["status"] == "error"
    denied = Message.objects.get(thread=thread, role="tool")
    assert denied.metadata["error_code"] == "permission_denied"


def test_a_registry_deny_beats_a_prompt_allow(engine: Engine) -> None:
    refunded = _refund_tool(engine, approval="deny")
    thread = _helper(engine, {"name": "refund", "approval": "allow"})
    engine.script.tool_calls([{"name": "refund", "arguments": {"amount": 5}}]).text("Sorry.")
    engine.send(thread, "refund 5")

    engine.drive(thread)

    assert refunded == []
    assert _decisions(thread) == [
        ("refund", "deny", {"decision": "deny", "source": "registry"}),
    ]


def test_an_argument_condition_denies_only_above_its_threshold(engine: Engine) -> None:
    refunded = _refund_tool(engine)
    rule = {"decision": "deny", "when": ABOVE_100}
    thread = _helper(engine, {"name": "refund", "approval": rule})
    _small_and_large(engine, thread)

    engine.drive(thread)

    assert refunded == [50]
    assert [(row[0], row[3]) for row in rows(thread)[2:4]] == [
        ("tool", "success"), ("tool", "error"),
    ]  # fmt: skip
    assert "with these arguments" in (rows(thread)[3][2] or "")
    assert _decisions(thread) == [
        ("refund", "allow", None),
        ("refund", "deny", {"decision": "deny", "source": "prompt", "when": ABOVE_100}),
    ]


def test_a_tenant_rule_covers_its_agent_and_tool_and_beats_a_prompt_allow(
    engine: Engine,
) -> None:
    refunded = _refund_tool(engine)
    thread = _helper(engine, {"name": "refund", "approval": "allow"})
    others = PermissionRule.objects.create(
        tenant=engine.tenant, agent="someone_else", tool="refund", decision="deny"
    )
    mine = PermissionRule.objects.create(
        tenant=engine.tenant, agent="helper", tool="", decision="deny", when=ABOVE_100
    )
    definitions_changed(tenant=engine.tenant)
    _small_and_large(engine, thread)

    engine.drive(thread)

    assert refunded == [50]
    assert _decisions(thread) == [
        ("refund", "allow", {"decision": "allow", "source": "prompt"}),
        ("refund", "deny",
         {"decision": "deny", "source": "tenant", "when": ABOVE_100, "id": str(mine.id)}),
    ]  # fmt: skip
    assert "a tenant rule denies" in (rows(thread)[3][2] or "")
    assert others.agent != thread.agent_name


def test_a_denied_subprompt_never_runs_and_a_subprompts_own_rules_hold_inside_it(
    engine: Engine,
) -> None:
    refunded = _refund_tool(engine)
    engine.define(
        prompts=[
            prompt("helper", tools=[
                {"name": "summarize", "init_user_message_property": "text"},
                {"name": "audit", "init_user_message_property": "text", "approval": "deny"},
            ]),
            prompt("summarize", include_chat=False, tools=[{"name": "refund", "approval": "deny"}],
                   required_schema={"type": "object", "properties": {"text": {"type": "string"}}}),
            prompt("audit", include_chat=False,
                   required_schema={"type": "object", "properties": {"text": {"type": "string"}}}),
        ],
        agents=[{"name": "helper", "side_a": {"prompt": "helper"}}],
    )  # fmt: skip
    thread = engine.thread("helper")
    engine.script.tool_calls([
        {"name": "audit", "arguments": {"text": "x"}, "id": "a"},
        {"name": "summarize", "arguments": {"text": "y"}, "id": "s"},
    ])  # fmt: skip
    engine.script.tool_calls([{"name": "refund", "arguments": {"amount": 1}}], "Refunding.")
    engine.script.text("Done.")
    engine.send(thread, "go")

    engine.drive(thread)

    assert refunded == []
    nested = Message.objects.filter(thread=thread, depth=1).order_by("seq")
    assert [(m.role, m.tool_status) for m in nested] == [
        ("user", ""), ("assistant", ""), ("tool", "error"),
    ]  # fmt: skip
    assert nested[2].content == (
        "Failed to execute tool: Permission denied: a prompt rule denies calls of 'refund'"
    )
    assert _decisions(thread) == [
        ("audit", "deny", {"decision": "deny", "source": "prompt"}),
        ("summarize", "allow", None),
        ("refund", "deny", {"decision": "deny", "source": "prompt"}),
    ]
    assert rows(thread)[2][2] == (
        "Failed to execute tool: Permission denied: a prompt rule denies calls of 'audit'"
    )


def test_an_ask_beats_a_prompt_allow(engine: Engine) -> None:
    refunded = _refund_tool(engine, approval="ask")
    thread = _helper(engine, {"name": "refund", "approval": "allow"})
    engine.script.tool_calls([{"name": "refund", "arguments": {"amount": 5}}]).text("Done.")
    engine.send(thread, "refund 5")

    engine.drive(thread)

    assert refunded == []
    assert thread.status == "waiting_permission"
    assert _decisions(thread) == [("refund", "ask", {"decision": "ask", "source": "registry",
                                                      "on_expiry": "deny"})]  # fmt: skip

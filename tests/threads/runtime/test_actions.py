"""Human actions, in process (agent-runtime-events: "Human actions pause execution and resume
only through respond_action"): an ``ask`` rule pauses the turn on an action, and the answer
(approve, deny, edit), its expiry, or a stop decides how the paused step carries on."""

from __future__ import annotations

from typing import Any

import pytest

from agents.registry import HookName, ToolResult, hook, tool
from common.errors import DomainError, ValidationFailed
from tests.threads.runtime.conftest import Engine, prompt, rows
from threads.models import Action, Event, Message, RunStatus, Thread, Turn
from threads.runtime.driver import threads_sweep
from threads.services.actions import ActionResolved, action_respond, actions_expire
from threads.services.control import thread_stop, thread_terminate, turn_cancel
from threads.services.inbox import message_queue
from threads.services.threads import thread_delete
from threads.state import ThreadState

ABOVE_100 = {">": [{"var": "amount"}, 100]}
ASK_ABOVE_100 = {"decision": "ask", "when": ABOVE_100}


@pytest.fixture
def refunds(engine: Engine) -> list[float]:
    """A ``refund`` tool that records every amount it refunds."""
    refunded: list[float] = []

    @tool(
        description="Refund an amount.",
        args={"type": "object", "properties": {"amount": {"type": "number"}},
              "required": ["amount"]},
    )  # fmt: skip
    def refund(state: Any, args: dict[str, Any]) -> str:
        refunded.append(args["amount"])
        return f"refunded {args['amount']}"

    return refunded


def _helper(engine: Engine, approval: Any = "ask") -> Thread:
    engine.define(
        # Past flows' tool calls are left out: the paused step's must not be.
        prompts=[
            prompt(
                "helper",
                include_past_tools=False,
                tools=[{"name": "refund", "approval": approval}, "echo"],
            )
        ],
        agents=[{"name": "helper", "side_a": {"prompt": "helper"}}],
    )
    return engine.thread("helper")


def _paused(engine: Engine, amount: float = 500, approval: Any = "ask") -> tuple[Thread, Action]:
    """A thread whose turn waits for the approval of a refund of ``amount``."""
    thread = _helper(engine, approval)
    engine.script.tool_calls([{"name": "refund", "arguments": {"amount": amount}, "id": "r"}])
    engine.script.text("Done.")
    engine.send(thread, f"refund {amount}")
    engine.drive(thread)
    return thread, Action.objects.get(thread=thread)


def _types(thread: Thread) -> list[str]:
    return list(
        Event.objects.filter(thread=thread).order_by("sequence").values_list("type", flat=True)
    )


def _turn(thread: Thread) -> Turn:
    return Turn.objects.filter(thread=thread).order_by("position").first()  # type: ignore[return-value]


def test_an_ask_pauses_the_turn_on_an_action_and_nothing_runs_until_it_is_answered(
    engine: Engine, refunds: list[float]
) -> None:
    thread, action = _paused(engine)

    again = engine.drive(thread)  # a wake-up while nobody answered changes nothing

    assert refunds == []
    assert (thread.status, _turn(thread).status) == ("waiting_permission",) * 2
    assert thread.paused_turn_id == _turn(thread).pk
    assert (action.status, action.tool_name, action.arguments) == (
        "pending",
        "refund",
        {"amount": 500},
    )
    assert action.decisions == ["approve", "deny", "edit"]
    assert (action.schema or {})["required"] == ["amount"]
    assert action.turn_id == _turn(thread).pk
    assert action.tool_call_id == "r"
    types = _types(thread)
    ask = types.index("permission.evaluated")
    assert types[ask : ask + 3] == [
        "permission.evaluated",
        "permission.requested",
        "action.required",
    ]
    assert "tool.started" not in types
    assert (
        Event.objects.get(thread=thread, type="permission.evaluated").payload["decision"] == "ask"
    )
    assert len(engine.script.requests) == 1  # the model was not called again
    assert again.reasons == []


def test_an_approved_call_runs_though_an_earlier_turn_used_its_call_id(
    engine: Engine, refunds: list[float]
) -> None:
    """A model numbering its calls per request (the scripted one, without past tools) may
    give a new call an id an earlier turn's call had: the earlier result is not this one's."""
    thread = _helper(engine, approval=ASK_ABOVE_100)
    engine.script.tool_calls([{"name": "refund", "arguments": {"amount": 5}, "id": "r"}])
    engine.script.text("Refunded 5.")
    engine.send(thread, "refund 5")
    engine.drive(thread)
    engine.script.tool_calls([{"name": "refund", "arguments": {"amount": 500}, "id": "r"}])
    engine.script.text("Refunded 500.")
    engine.send(thread, "refund 500")
    engine.drive(thread)
    action = Action.objects.get(thread=thread)

    action_respond(thread=thread, action_id=action.pk, body={"decision": "approve"})
    engine.drive(thread)

    assert refunds == [5, 500]
    tools = [row[2] for row in rows(thread) if row[0] == "tool"]
    assert tools == ["refunded 5", "refunded 500"]


def test_approve_runs_the_call_once_and_the_turn_carries_on(
    engine: Engine, refunds: list[float], wakes: list[str]
) -> None:
    thread, action = _paused(engine)

    answered = action_respond(thread=thread, action_id=action.pk, body={"decision": "approve"},
                              responder="ops@example.com")  # fmt: skip
    turn = _turn(thread)
    turn.refresh_from_db()
    thread.refresh_from_db()
    queued = (turn.status, thread.status)
    engine.drive(thread)

    assert queued == ("queued", "queued")
    assert answered.status == "approved"
    assert answered.responder == "ops@example.com"
    assert refunds == [500]
    assert [row[0] for row in rows(thread)] == ["user", "assistant", "tool", "assistant"]
    assert rows(thread)[2][2] == "refunded 500"
    assert engine.script.requests[1].messages[-1].text == "refunded 500"
    turn.refresh_from_db()
    assert (turn.status, thread.status, thread.paused_turn_id) == (
        "completed",
        "waiting_input",
        None,
    )
    resolved = Event.objects.get(thread=thread, type="permission.resolved").payload
    assert (resolved["decision"], resolved["by"]) == ("allow", "person")
    started = Event.objects.filter(thread=thread, type="turn.started").order_by("sequence")
    assert started.last().payload["action_id"] == str(action.pk)  # type: ignore[union-attr]


def test_deny_gives_the_model_the_persons_reason_and_the_tool_never_runs(
    engine: Engine, refunds: list[float]
) -> None:
    thread, action = _paused(engine)

    action_respond(thread=thread, action_id=action.pk,
                   body={"decision": "deny", "reason": "over the limit"})  # fmt: skip
    engine.drive(thread)

    assert refunds == []
    denial = "Failed to execute tool: Permission denied by a person: over the limit"
    assert rows(thread)[2] == ("tool", "a", denial, "error")
    assert engine.script.requests[1].messages[-1].text == denial
    assert _turn(thread).status == "completed"


def test_edit_runs_the_call_with_the_persons_arguments_checked_against_the_tool(
    engine: Engine, refunds: list[float]
) -> None:
    thread, action = _paused(engine)

    with pytest.raises(ValidationFailed) as bad:
        action_respond(thread=thread, action_id=action.pk,
                       body={"decision": "edit", "arguments": {"amount": "lots"}})  # fmt: skip
    action_respond(thread=thread, action_id=action.pk,
                   body={"decision": "edit", "arguments": {"amount": 90}})  # fmt: skip
    engine.drive(thread)

    assert bad.value.field == "arguments"
    assert "amount" in bad.value.message
    assert refunds == [90]
    assert rows(thread)[2][2] == "refunded 90"


def test_answering_twice_is_refused(engine: Engine, refunds: list[float]) -> None:
    thread, action = _paused(engine)
    action_respond(thread=thread, action_id=action.pk, body={"decision": "approve"})

    with pytest.raises(ActionResolved) as twice:
        action_respond(thread=thread, action_id=action.pk, body={"decision": "deny"})

    assert "is approved" in twice.value.message
    action.refresh_from_db()
    assert action.status == "approved"


@pytest.mark.parametrize(
    ("body", "field"),
    [
        ({"decision": "maybe"}, "decision"),
        ({"decision": "answer", "data": {}}, "decision"),
        ({"decision": "edit"}, "arguments"),
        ({"decision": "approve", "arguments": {"amount": 1}}, "arguments"),
        ({"decision": "deny", "reason": 5}, "reason"),
        ({"decision": "approve", "note": "x"}, "note"),
    ],
)
def test_a_bad_answer_names_its_field_and_leaves_the_action_pending(
    engine: Engine, refunds: list[float], body: dict[str, Any], field: str
) -> None:
    thread, action = _paused(engine)

    with pytest.raises(ValidationFailed) as bad:
        action_respond(thread=thread, action_id=action.pk, body=body)

    assert bad.value.field == field
    action.refresh_from_db()
    assert action.status == "pending"


def test_an_expired_action_denies_and_the_turn_records_timed_out(
    engine: Engine, refunds: list[float]
) -> None:
    thread, action = _paused(engine)
    Action.objects.filter(pk=action.pk).update(expires_at=0)

    assert actions_expire() == 1
    engine.drive(thread)

    assert refunds == []
    action.refresh_from_db()
    assert action.status == "expired"
    assert (_turn(thread).status, thread.status) == ("timed_out", "timed_out")
    assert _turn(thread).outcome == "action_expired"
    closed = rows(thread)[2]
    assert closed[0] == "tool"
    assert "expired" in (closed[2] or "")
    assert len(engine.script.requests) == 1  # nobody is there: the model is not called again
    resolved = Event.objects.get(thread=thread, type="permission.resolved").payload
    assert (resolved["decision"], resolved["by"]) == ("deny", "expiry")
    with pytest.raises(ActionResolved):
        action_respond(thread=thread, action_id=action.pk, body={"decision": "approve"})


def test_a_rule_may_allow_on_expiry(engine: Engine, refunds: list[float]) -> None:
    thread, action = _paused(engine, approval={"decision": "ask", "on_expiry": "allow",
                                               "expires_in": 60})  # fmt: skip
    assert action.expires_at - action.created_at == pytest.approx(60_000_000, abs=1_000_000)
    Action.objects.filter(pk=action.pk).update(expires_at=0)

    with pytest.raises(ActionResolved):  # too late for a person: the expiry decides
        action_respond(thread=thread, action_id=action.pk, body={"decision": "deny"})
    engine.drive(thread)

    assert refunds == [500]
    assert _turn(thread).status == "completed"


def test_a_stop_while_waiting_cancels_the_action_and_the_turn(
    engine: Engine, refunds: list[float]
) -> None:
    thread, action = _paused(engine)

    thread_stop(thread=thread)

    action.refresh_from_db()
    thread.refresh_from_db()
    assert action.status == "cancelled"
    assert (_turn(thread).status, thread.status, thread.paused_turn_id) == (
        "cancelled", "cancelled", None,
    )  # fmt: skip
    assert rows(thread)[2][2] == "Execution stopped by user"
    resolved = Event.objects.get(thread=thread, type="action.resolved").payload
    assert resolved["status"] == "cancelled"
    with pytest.raises(ActionResolved):
        action_respond(thread=thread, action_id=action.pk, body={"decision": "approve"})
    assert refunds == []


def test_cancelling_the_waiting_turn_cancels_its_action(
    engine: Engine, refunds: list[float]
) -> None:
    thread, action = _paused(engine)

    cancelled = turn_cancel(thread=thread, turn=_turn(thread))

    action.refresh_from_db()
    assert (cancelled.status, action.status) == ("cancelled", "cancelled")


def test_later_turns_wait_behind_the_paused_one_and_run_after_it(
    engine: Engine, refunds: list[float], wakes: list[str]
) -> None:
    thread, action = _paused(engine)
    message_queue(thread=thread, role="user", content="and then?")
    thread.refresh_from_db()
    status_while_waiting = thread.status

    engine.drive(thread)  # the queued turn may not overtake the paused one
    blocked = [m.content for m in thread.message_set.filter(role="user")]
    engine.script.text("Then nothing.")
    action_respond(thread=thread, action_id=action.pk, body={"decision": "approve"})
    engine.drive(thread)

    assert status_while_waiting == "waiting_permission"
    assert blocked == ["refund 500"]
    assert [row[2] for row in rows(thread)] == [
        "refund 500",
        None,
        "refunded 500",
        "Done.",
        "and then?",
        "Then nothing.",
    ]
    assert list(Turn.objects.filter(thread=thread).values_list("status", flat=True)) == [
        "completed",
        "completed",
    ]


def test_an_interrupting_turn_cancels_the_paused_one(engine: Engine, refunds: list[float]) -> None:
    thread, action = _paused(engine)
    engine.script.text("Fine.")

    message_queue(thread=thread, role="user", content="forget it", strategy="interrupt")
    engine.drive(thread)

    action.refresh_from_db()
    first, second = Turn.objects.filter(thread=thread).order_by("created_at")
    assert (first.status, first.outcome, action.status) == ("cancelled", "interrupted", "cancelled")
    assert second.status == "completed"
    assert refunds == []


def test_calls_before_the_paused_one_never_run_twice_and_those_after_it_run_once(
    engine: Engine, refunds: list[float]
) -> None:
    thread = _helper(engine, ASK_ABOVE_100)
    engine.script.tool_calls([
        {"name": "refund", "arguments": {"amount": 50}, "id": "small"},
        {"name": "refund", "arguments": {"amount": 500}, "id": "large"},
        {"name": "echo", "arguments": {"text": "after"}, "id": "after"},
    ]).text("All three.")  # fmt: skip
    engine.send(thread, "refund both")
    engine.drive(thread)
    ran_before = list(refunds)
    action = Action.objects.get(thread=thread)

    action_respond(thread=thread, action_id=action.pk, body={"decision": "approve"})
    engine.drive(thread)

    assert ran_before == [50]
    assert refunds == [50, 500]
    assert engine.tool_calls == [("echo", "after")]
    assert [(row[0], row[3]) for row in rows(thread)[1:]] == [
        ("assistant", ""), ("tool", "success"), ("tool", "success"), ("tool", "success"),
        ("assistant", ""),
    ]  # fmt: skip
    assert _turn(thread).status == "completed"


def test_an_ask_inside_a_subprompt_is_refused_as_nobody_can_be_waited_for_there(
    engine: Engine, refunds: list[float]
) -> None:
    engine.define(
        prompts=[
            prompt("helper", tools=[{"name": "summarize", "init_user_message_property": "text"}]),
            prompt("summarize", include_chat=False, tools=[{"name": "refund", "approval": "ask"}],
                   required_schema={"type": "object", "properties": {"text": {"type": "string"}}}),
        ],
        agents=[{"name": "helper", "side_a": {"prompt": "helper"}}],
    )  # fmt: skip
    thread = engine.thread("helper")
    engine.script.tool_calls([{"name": "summarize", "arguments": {"text": "y"}}])
    engine.script.tool_calls([{"name": "refund", "arguments": {"amount": 1}}], "Refunding.")
    engine.script.text("Done.")
    engine.send(thread, "go")

    engine.drive(thread)

    assert refunds == []
    assert not Action.objects.exists()
    nested = thread.message_set.filter(depth=1, role="tool").get()
    assert nested.metadata["error_code"] == "approval_unavailable"
    assert "cannot wait for one" in (nested.content or "")
    assert thread.status == RunStatus.WAITING_INPUT


# state.request_input ------------------------------------------------------------------------

SHIPPING = {
    "type": "object",
    "properties": {"address": {"type": "string"}, "express": {"type": "boolean"}},
    "required": ["address"],
}


@pytest.fixture
def shipments(engine: Engine) -> list[tuple[str, Any]]:
    """A ``ship`` tool that asks a person for the address (and, for express, a second
    question), recording each start and each shipment."""
    log: list[tuple[str, Any]] = []

    @tool(description="Ship the order.")
    def ship(state: Any) -> str:
        log.append(("started", None))
        answer = state.request_input(SHIPPING, "Where to?")
        if answer.get("express"):
            extra = state.request_input(
                {"type": "object", "properties": {"phone": {"type": "string"}}}, "Phone?"
            )
            answer = {**answer, **extra}
        log.append(("shipped", answer))
        return f"shipped to {answer['address']}"

    engine.define(
        prompts=[prompt("clerk", include_past_tools=False, tools=["ship"])],
        agents=[{"name": "clerk", "side_a": {"prompt": "clerk"}}],
    )
    return log


def _asked(engine: Engine) -> Thread:
    thread = engine.thread("clerk")
    engine.script.tool_calls([{"name": "ship", "arguments": {}, "id": "s"}]).text("Shipped.")
    engine.send(thread, "ship it")
    engine.drive(thread)
    return thread


def _pending(thread: Thread) -> Action:
    return Action.objects.get(thread=thread, status="pending")


def test_request_input_pauses_the_turn_and_the_tool_gets_the_answer(
    engine: Engine, shipments: list[tuple[str, Any]]
) -> None:
    thread = _asked(engine)
    asked = _pending(thread)
    status = (thread.status, _turn(thread).status)

    with pytest.raises(ValidationFailed) as bad:
        action_respond(thread=thread, action_id=asked.pk,
                       body={"decision": "answer", "data": {"express": True}})  # fmt: skip
    action_respond(thread=thread, action_id=asked.pk,
                   body={"decision": "answer", "data": {"address": "1 Main St"}})  # fmt: skip
    engine.drive(thread)

    assert status == ("waiting_input", "waiting_input")
    assert (asked.kind, asked.prompt, asked.schema) == ("input", "Where to?", SHIPPING)
    assert asked.decisions == ["answer", "deny"]
    assert bad.value.field == "data"
    assert shipments == [("started", None), ("started", None),
                         ("shipped", {"address": "1 Main St"})]  # fmt: skip
    assert rows(thread)[2][2] == "shipped to 1 Main St"
    assert engine.script.requests[1].messages[-1].text == "shipped to 1 Main St"
    assert _turn(thread).status == "completed"


def test_a_second_request_pauses_again_and_the_first_answer_is_replayed(
    engine: Engine, shipments: list[tuple[str, Any]]
) -> None:
    thread = _asked(engine)
    action_respond(
        thread=thread,
        action_id=_pending(thread).pk,
        body={"decision": "answer", "data": {"address": "2 Side St", "express": True}},
    )
    engine.drive(thread)
    phone = _pending(thread)

    action_respond(thread=thread, action_id=phone.pk,
                   body={"decision": "answer", "data": {"phone": "555"}})  # fmt: skip
    engine.drive(thread)

    assert phone.prompt == "Phone?"
    assert shipments[-1] == ("shipped", {"address": "2 Side St", "express": True, "phone": "555"})
    assert [kind for kind, _ in shipments].count("started") == 3
    assert _turn(thread).status == "completed"


def test_a_declined_input_fails_the_call_with_the_persons_reason(
    engine: Engine, shipments: list[tuple[str, Any]]
) -> None:
    thread = _asked(engine)

    action_respond(thread=thread, action_id=_pending(thread).pk,
                   body={"decision": "deny", "reason": "no address on file"})  # fmt: skip
    engine.drive(thread)

    assert ("shipped", {"address": "1 Main St"}) not in shipments
    assert rows(thread)[2] == (
        "tool", "a",
        "Failed to execute tool: the person declined to give the input: no address on file",
        "error",
    )  # fmt: skip
    assert Message.objects.get(thread=thread, role="tool").metadata["error_code"] == (
        "input_declined"
    )


def test_request_input_outside_a_model_steps_call_is_refused(
    engine: Engine, shipments: list[tuple[str, Any]]
) -> None:
    state = ThreadState(engine.thread("clerk"))

    with pytest.raises(DomainError) as refused:
        state.request_input(SHIPPING, "Where to?")

    assert "needs a tool call of a running turn" in refused.value.message


# Code mode -----------------------------------------------------------------------------------

PROGRAM = """
export default async function () {
  const a = await tools.first({});
  const b = await tools.second({ amount: 500 });
  const c = await tools.third({ after: b });
  return `${a} | ${b} | ${c}`;
}
"""


@pytest.fixture
def program_tools(engine: Engine) -> dict[str, int]:
    """``first``, ``second`` (asks a person) and ``third``, counting their runs; a prompt in
    code mode that offers them."""
    runs = {"first": 0, "second": 0, "third": 0}

    @tool(description="The first step.")
    def first(state: Any) -> str:
        runs["first"] += 1
        return f"first ran {runs['first']}x"

    @tool(
        description="Spend money.",
        args={"type": "object", "properties": {"amount": {"type": "number"}}},
        approval="ask",
    )
    def second(state: Any, args: dict[str, Any]) -> str:
        runs["second"] += 1
        return f"spent {args['amount']}"

    @tool(description="The last step.", args={"type": "object", "properties": {
        "after": {"type": "string"}}})  # fmt: skip
    def third(state: Any, args: dict[str, Any]) -> str:
        runs["third"] += 1
        return f"after {args['after']}"

    engine.define(
        prompts=[prompt("coder", code_mode=True, tools=["first", "second", "third"])],
        agents=[{"name": "coder", "side_a": {"prompt": "coder"}}],
    )
    return runs


def _program_paused(engine: Engine, source: str = PROGRAM) -> tuple[Thread, Action]:
    thread = engine.thread("coder")
    engine.script.tool_calls([{"name": "code", "arguments": {"source": source}, "id": "p"}])
    engine.script.text("All done.")
    engine.send(thread, "run the steps")
    engine.drive(thread)
    return thread, Action.objects.get(thread=thread)


def test_a_program_pauses_at_the_gated_call_and_replays_without_running_a_call_twice(
    engine: Engine, program_tools: dict[str, int]
) -> None:
    thread, action = _program_paused(engine)
    while_paused = dict(program_tools)

    action_respond(thread=thread, action_id=action.pk, body={"decision": "approve"})
    engine.drive(thread)

    assert while_paused == {"first": 1, "second": 0, "third": 0}
    assert (action.tool_call_id, action.tool_name, action.arguments) == (
        "p", "second", {"amount": 500},
    )  # fmt: skip
    assert thread.status == "waiting_input"  # the model answered; the human is next
    assert program_tools == {"first": 1, "second": 1, "third": 1}
    result = Message.objects.get(thread=thread, role="tool")
    assert result.content == "first ran 1x | spent 500 | after spent 500"
    assert result.tool_status == "success"
    assert _turn(thread).status == "completed"


def test_a_denied_call_rejects_in_the_program_which_may_catch_it(
    engine: Engine, program_tools: dict[str, int]
) -> None:
    source = """
    export default async function () {
      const a = await tools.first({});
      try { await tools.second({ amount: 500 }); } catch (e) { return `${a}; ${e.message}`; }
      return "approved";
    }
    """
    thread, action = _program_paused(engine, source)

    action_respond(thread=thread, action_id=action.pk,
                   body={"decision": "deny", "reason": "too much"})  # fmt: skip
    engine.drive(thread)

    assert program_tools == {"first": 1, "second": 0, "third": 0}
    result = Message.objects.get(thread=thread, role="tool").content or ""
    assert result.startswith("first ran 1x; ")
    assert "Permission denied by a person: too much" in result


def test_an_edit_runs_the_gated_call_with_the_persons_arguments(
    engine: Engine, program_tools: dict[str, int]
) -> None:
    thread, action = _program_paused(engine)

    action_respond(thread=thread, action_id=action.pk,
                   body={"decision": "edit", "arguments": {"amount": 20}})  # fmt: skip
    engine.drive(thread)

    assert Message.objects.get(thread=thread, role="tool").content == (
        "first ran 1x | spent 20 | after spent 20"
    )


def test_a_program_that_calls_differently_on_replay_fails_naming_the_difference(
    engine: Engine, program_tools: dict[str, int]
) -> None:
    source = """
    export default async function () {
      const first = await helpers.random() < 2 ? await tools.first({}) : "";
      await tools.second({ amount: Date.now() });
      return first;
    }
    """
    thread, action = _program_paused(engine, source)

    action_respond(thread=thread, action_id=action.pk, body={"decision": "approve"})
    engine.drive(thread)

    result = Message.objects.get(thread=thread, role="tool")
    assert result.tool_status == "error"
    assert "on replay" in (result.content or "")
    assert result.metadata["error_code"] == "replay_diverged"
    assert program_tools["second"] == 0


def test_the_journaled_helpers_give_a_replay_the_same_values(
    engine: Engine, program_tools: dict[str, int]
) -> None:
    source = """
    export default async function () {
      const t = await helpers.now();
      const r = await helpers.random();
      await tools.second({ amount: Math.floor(r * 1000) });
      return JSON.stringify([t, r]);
    }
    """
    thread, action = _program_paused(engine, source)
    asked_amount = action.arguments["amount"]

    action_respond(thread=thread, action_id=action.pk, body={"decision": "approve"})
    engine.drive(thread)

    result = Message.objects.get(thread=thread, role="tool")
    assert result.tool_status == "success", result.content
    assert program_tools["second"] == 1
    assert action.resume["code"]["journal"][1]["value"] * 1000 // 1 == asked_amount


def test_a_blocking_subagent_whose_session_waits_for_a_person_frees_its_parent(
    engine: Engine, refunds: list[float]
) -> None:
    engine.define(
        prompts=[
            prompt("boss", tools=[{"name": "clerk", "blocking": True}]),
            prompt("clerk_prompt", tools=[{"name": "refund", "approval": "ask"}]),
        ],
        agents=[
            {"name": "boss", "side_a": {"prompt": "boss"}},
            {"name": "clerk", "type": "dual_ai", "expose_as_tool": True,
             "tool_description": "Refunds.", "side_a": {"prompt": "clerk_prompt"},
             "side_b": {"prompt": "clerk_prompt"}, "max_session_turns": 1},
        ],
    )  # fmt: skip
    parent = engine.thread("boss")
    engine.script.tool_calls([{"name": "clerk", "arguments": {"message": "refund 500"}}])
    engine.script.tool_calls([{"name": "refund", "arguments": {"amount": 500}}])
    engine.script.text("I will hear back.")
    engine.send(parent, "get a refund")

    engine.drive(parent)

    child = Thread.objects.get(parent=parent)
    assert child.status == "waiting_permission"
    result = Message.objects.get(thread=parent, role="tool").content or ""
    assert "waits for a person's decision (its turn is waiting_permission)" in result
    assert _turn(parent).status == "completed"  # the parent's turn did not wait
    assert refunds == []


def test_the_sweeper_leaves_a_waiting_turn_alone_and_wakes_an_answered_one(
    engine: Engine, refunds: list[float], wakes: list[str], settings: Any
) -> None:
    settings.THREAD_SWEEP_GRACE_S = 0
    thread, action = _paused(engine)
    message_queue(thread=thread, role="user", content="and then?")

    swept_while_waiting = threads_sweep()
    woken_while_waiting = list(wakes)
    action_respond(thread=thread, action_id=action.pk, body={"decision": "approve"})
    wakes.clear()  # the answer's own wake-up is lost: the sweeper must find the thread
    swept_after = threads_sweep()

    assert (swept_while_waiting, woken_while_waiting) == (0, [])
    assert (swept_after, wakes) == (1, [str(thread.pk)])


def test_a_hook_around_a_tool_call_may_ask_for_input_and_the_call_runs_again(
    engine: Engine,
) -> None:
    @hook(HookName.AFTER_TOOL_CALL_SUCCESS, id="confirm")
    def confirm(state: ThreadState, call: dict[str, Any], result: ToolResult, context: Any) -> Any:
        answer = state.request_input(
            {"type": "object", "properties": {"keep": {"type": "boolean"}}}, "Keep the result?"
        )
        return result if answer.get("keep") else ToolResult.failure("the person threw it away")

    engine.define(
        prompts=[prompt("helper", hooks=["confirm"], tools=["echo"])],
        agents=[{"name": "helper", "side_a": {"prompt": "helper"}}],
    )
    thread = engine.thread("helper")
    engine.script.tool_calls([{"name": "echo", "arguments": {"text": "hi"}}]).text("Done.")
    engine.send(thread, "go")
    engine.drive(thread)
    asked = _pending(thread)

    action_respond(thread=thread, action_id=asked.pk,
                   body={"decision": "answer", "data": {"keep": False}})  # fmt: skip
    engine.drive(thread)

    assert asked.prompt == "Keep the result?"
    assert engine.tool_calls == [("echo", "hi"), ("echo", "hi")]  # the call ran again
    assert rows(thread)[2][2] == "Failed to execute tool: the person threw it away"


def test_a_tool_that_catches_every_exception_still_pauses(engine: Engine) -> None:
    swallowed: list[str] = []

    @tool(description="Careless.")
    def careless(state: Any) -> str:
        try:
            answer = state.request_input({"type": "object"}, "Anything?")
        except Exception as error:  # a pause is not an error: it is not caught here
            swallowed.append(str(error))
            return "swallowed"
        return f"got {answer}"

    engine.define(
        prompts=[prompt("helper", tools=["careless"])],
        agents=[{"name": "helper", "side_a": {"prompt": "helper"}}],
    )
    thread = engine.thread("helper")
    engine.script.tool_calls([{"name": "careless", "arguments": {}}]).text("Done.")
    engine.send(thread, "go")
    engine.drive(thread)

    assert swallowed == []
    assert thread.status == "waiting_input"


def test_terminating_a_waiting_thread_cancels_its_action_and_turn(
    engine: Engine, refunds: list[float]
) -> None:
    thread, action = _paused(engine)

    thread_terminate(thread=thread)

    action.refresh_from_db()
    thread.refresh_from_db()
    assert action.status == "cancelled"
    assert (_turn(thread).status, _turn(thread).outcome) == ("cancelled", "terminated")
    assert thread.terminated_at is not None
    assert thread.paused_turn_id is None
    assert rows(thread)[2][2] == "Thread terminated"


def test_a_thread_whose_turn_waits_can_be_deleted(engine: Engine, refunds: list[float]) -> None:
    thread, action = _paused(engine)

    thread_delete(thread=thread)

    assert not Thread.objects.filter(pk=thread.pk).exists()
    assert not Action.objects.filter(pk=action.pk).exists()


def test_a_stop_between_the_answer_and_the_resume_cancels_the_turn(
    engine: Engine, refunds: list[float]
) -> None:
    thread, action = _paused(engine)
    action_respond(thread=thread, action_id=action.pk, body={"decision": "approve"})

    thread_stop(thread=thread)
    engine.drive(thread)

    assert refunds == []
    assert (_turn(thread).status, thread.paused_turn_id) == ("cancelled", None)
    assert rows(thread)[2][2] == "Execution stopped by user"

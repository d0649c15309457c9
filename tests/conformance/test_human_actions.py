"""Human-in-the-loop conformance: the clauses of agent-runtime-events.md on permissions, human
actions and their statuses ("ARE pressure 3" is item 3 of its "Pressure From Real Runtimes").
Every clause is proved by a test here or by one named in ``PROVED_ELSEWHERE``, which a test
below keeps honest."""

from __future__ import annotations

import importlib
from typing import Any

import pytest

from agents.registry import tool
from tests.threads.runtime.conftest import Engine, engine, prompt
from threads.models import Action, Event, Turn
from threads.services.actions import action_respond

__all__ = ["engine"]

RUNTIME, API, E2E, RULES = (
    "tests.threads.runtime.test_actions",
    "tests.threads.test_actions_api",
    "tests.threads.test_actions_e2e",
    "tests.threads.runtime.test_permissions",
)
PROVED_ELSEWHERE: dict[str, list[tuple[str, str]]] = {
    "ARE pressure 3: deny/ask rules must be able to override automatic allow": [
        (RULES, "test_a_registry_deny_beats_a_prompt_allow"),
        (RULES, "test_an_ask_beats_a_prompt_allow"),
        (RULES, "test_a_tenant_rule_covers_its_agent_and_tool_and_beats_a_prompt_allow"),
    ],
    "ARE validation: human actions pause execution and resume only through respond_action": [
        (RUNTIME, "test_an_ask_pauses_the_turn_on_an_action_and_nothing_runs_until_it_is_answered"),
        (RUNTIME, "test_approve_runs_the_call_once_and_the_turn_carries_on"),
        (E2E, "test_approve_runs_the_tool_once_and_answering_twice_is_a_409"),
        (E2E, "test_turns_waiting_for_a_person_hold_no_worker"),
    ],
    "ARE control plane: respond_action(action_id, decision, payload) -> action resolved": [
        (RUNTIME, "test_deny_gives_the_model_the_persons_reason_and_the_tool_never_runs"),
        (RUNTIME, "test_edit_runs_the_call_with_the_persons_arguments_checked_against_the_tool"),
        (API, "test_respond_approves_and_the_turn_runs_on"),
    ],
    "ARE statuses: timed_out, a time budget stopped the work": [
        (RUNTIME, "test_an_expired_action_denies_and_the_turn_records_timed_out"),
        (E2E, "test_an_expired_action_ends_the_turn_timed_out"),
    ],
    "ARE statuses: cancelled, user, policy or runtime interrupted the work": [
        (RUNTIME, "test_a_stop_while_waiting_cancels_the_action_and_the_turn"),
        (RUNTIME, "test_an_interrupting_turn_cancels_the_paused_one"),
    ],
    "ARE statuses: waiting_permission also for a program's call (no runner held)": [
        (
            RUNTIME,
            "test_a_program_pauses_at_the_gated_call_and_replays_without_running_a_call_twice",
        ),
        (
            E2E,
            "test_a_paused_program_survives_its_workers_kill_and_resumes_without_rerunning_a_call",
        ),
    ],
    "ARE statuses: waiting_input, user or external structured input is required": [
        (RUNTIME, "test_request_input_pauses_the_turn_and_the_tool_gets_the_answer"),
    ],
    "ARE read models: thread_read_model pending requests, pending approvals": [
        (API, "test_pending_actions_are_listed_read_and_shown_in_the_read_model"),
    ],
    "ARE validation: tool calls preserve policy decisions": [
        (RULES, "test_an_argument_condition_denies_only_above_its_threshold"),
    ],
}


@pytest.mark.parametrize("clause", sorted(PROVED_ELSEWHERE))
def test_every_clause_proved_elsewhere_names_a_test_that_exists(clause: str) -> None:
    for module_name, test_name in PROVED_ELSEWHERE[clause]:
        module = importlib.import_module(module_name)
        assert callable(getattr(module, test_name, None)), f"{module_name}.{test_name}"


# ARE statuses waiting_permission; ARE event classes action.* and the permission family -------


def test_are_waiting_permission_and_the_action_and_permission_events_of_one_cycle(
    engine: Engine,
) -> None:
    ran: list[dict[str, Any]] = []

    @tool(description="Send an email.", approval="ask")
    def send_email(state: Any) -> str:
        ran.append({})
        return "sent"

    engine.define(
        prompts=[prompt("mailer", tools=["send_email"])],
        agents=[{"name": "mailer", "side_a": {"prompt": "mailer"}}],
    )
    thread = engine.thread("mailer")
    engine.script.tool_calls([{"name": "send_email", "arguments": {}}]).text("Sent.")
    engine.send(thread, "mail them")
    engine.drive(thread)
    paused = Turn.objects.get(thread=thread).status
    action = Action.objects.get(thread=thread)

    action_respond(thread=thread, action_id=action.pk, body={"decision": "approve"})
    engine.drive(thread)

    assert paused == "waiting_permission"  # "human, policy, or host approval is required"
    assert len(ran) == 1
    family = ("permission.", "action.")
    events = Event.objects.filter(thread=thread).order_by("sequence")
    cycle = [(e.type, e.payload.get("action_id")) for e in events if e.type.startswith(family)]
    assert cycle == [
        ("permission.evaluated", None),
        ("permission.requested", str(action.pk)),
        ("action.required", str(action.pk)),
        ("permission.resolved", str(action.pk)),
        ("action.resolved", str(action.pk)),
    ]  # the approved call is not weighed again
    # Every event of the turn names it (envelope ``turn_id``), the pause and resume included.
    assert {e.turn_id for e in events if e.type.startswith(family)} == {str(action.turn_id)}

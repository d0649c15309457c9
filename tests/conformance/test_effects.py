"""Effect conformance: spec Threads §5 ("TH-5.1" is standard-agents-threads.md §5.1) and
DIGEST §9 ("DG-9"). Every clause is proved by a test here or by one named in
``PROVED_ELSEWHERE``, which a test below keeps honest."""

from __future__ import annotations

import importlib
from collections.abc import Iterator
from typing import Any

import pytest

from agents.registry import effect, use_registry
from tenancy.models import Tenant
from tests.factories import make_thread
from threads.runtime.effects import effect_fire
from threads.services.effects import effect_schedule
from threads.state import ThreadState

EFFECTS, E2E, SCHEDULES = (
    "tests.threads.test_effects",
    "tests.threads.test_effects_e2e",
    "tests.threads.test_schedules",
)
PROVED_ELSEWHERE: dict[str, list[tuple[str, str]]] = {
    "TH-5.1 scheduleEffect(name, args, delay) returns a unique id": [
        (EFFECTS, "test_an_effect_is_scheduled_pending_with_its_event"),
    ],
    "TH-5.2 the record: id, name, args, scheduledAt, createdAt (µs)": [
        (EFFECTS, "test_an_effect_is_scheduled_pending_with_its_event"),
    ],
    "TH-5.3 getScheduledEffects(name?) and removeScheduledEffect(id) -> boolean": [
        (EFFECTS, "test_an_effect_is_scheduled_pending_with_its_event"),
        (EFFECTS, "test_removal_before_the_deadline_prevents_firing"),
    ],
    "DG-9 MUST enqueue asynchronously; runs independently of the conversation": [
        (E2E, "test_a_thousand_effects_fire_exactly_once_through_a_worker_kill"),
    ],
    "DG-9 MUST preserve args until execution; args re-validated at run time": [
        (
            EFFECTS,
            "test_a_due_effect_fires_once_with_an_at_rest_state_and_its_message_starts_a_turn",
        ),
        (EFFECTS, "test_arguments_are_checked_again_when_the_effect_runs"),
    ],
    "DG-9 unknown effect name throws at schedule time": [
        (EFFECTS, "test_a_bad_schedule_is_refused_naming_the_field"),
    ],
    "DG-9 SHOULD expose inspection and cancel": [
        (EFFECTS, "test_the_api_lists_filters_cancels_runs_and_replays"),
    ],
    "DG-9 messages carry metadata.scheduledEffect = {id, name}": [
        (EFFECTS, "test_a_handler_writes_messages_tagged_with_its_effect"),
    ],
    "DG-9 statuses pending/processing/completed/failed/agent_canceled/user_canceled": [
        (EFFECTS, "test_a_handler_error_fails_the_effect_and_leaves_nothing_half_written"),
        (EFFECTS, "test_removal_before_the_deadline_prevents_firing"),
        (EFFECTS, "test_the_api_lists_filters_cancels_runs_and_replays"),
    ],
    "DG-9 history 30 days, failed rows 24 h, newest 1000 rows": [
        (EFFECTS, "test_history_is_kept_as_the_digest_says"),
        (EFFECTS, "test_the_newest_thousand_finished_effects_of_a_thread_are_kept"),
    ],
    "DG-9 no automatic retry of a failed effect": [
        (EFFECTS, "test_a_handler_error_fails_the_effect_and_leaves_nothing_half_written"),
    ],
    "DG-9 manual run now and replay create linked rows (manualRun, replayedFrom)": [
        (EFFECTS, "test_the_api_lists_filters_cancels_runs_and_replays"),
        (EFFECTS, "test_a_finished_effect_is_replayed_by_run"),
    ],
    "(extension) recurring schedules fire once after an outage": [
        (SCHEDULES, "test_after_an_outage_of_several_slots_it_fires_once"),
    ],
}


@pytest.mark.parametrize("clause", sorted(PROVED_ELSEWHERE))
def test_every_clause_proved_elsewhere_names_a_test_that_exists(clause: str) -> None:
    for module_name, test_name in PROVED_ELSEWHERE[clause]:
        module = importlib.import_module(module_name)
        assert callable(getattr(module, test_name, None)), f"{module_name}.{test_name}"


@pytest.fixture
def seen() -> Iterator[list[Any]]:
    states: list[Any] = []
    with use_registry():

        @effect(description="Looks at its state.")
        def look(state: ThreadState) -> None:
            states.append((state.execution, state.thread_id))

        yield states


# DG-9: the handler gets an at-rest ThreadState (execution === null) -----------------------------


@pytest.mark.django_db
def test_dg_9_the_handler_gets_an_at_rest_thread_state(tenant: Tenant, seen: list[Any]) -> None:
    thread = make_thread(tenant)
    row = effect_schedule(thread=thread, name="look", delay_ms=0)

    effect_fire(row.pk)

    assert seen == [(None, str(thread.pk))]

"""Agent Runtime control plane conformance (shared spec ``agent-runtime-events.md``, "ARE")
and the DIGEST's reasoning replay (§4, §18.3 rule 6). Every clause is proved by a test named
in ``PROVED_ELSEWHERE``, which the test below keeps honest."""

from __future__ import annotations

import importlib

import pytest

INVENTORY = "tests.threads.test_inventory_api"
EVALUATE = "tests.agents.test_permission_evaluate_api"
SESSIONS = "tests.threads.test_sessions_api"
STOPS = "tests.threads.runtime.test_stops"
ACTIONS = "tests.threads.runtime.test_actions"
VALIDATE = "tests.replay.test_validate"
EXPORT = "tests.replay.test_export_api"
TURNS_E2E = "tests.threads.test_turns_e2e"
REASONING = "tests.threads.runtime.test_reasoning"

PROVED_ELSEWHERE: dict[str, list[tuple[str, str]]] = {
    "ARE get_tool_inventory: the tools a caller's model sees, with permission decisions": [
        (INVENTORY, "test_the_inventory_is_what_a_turn_offers_the_model"),
        (INVENTORY, "test_each_tool_carries_the_decision_the_rule_behind_it_and_the_rules_weighed"),
    ],
    "ARE tool.catalog.resolved: the catalog a turn resolved": [
        (INVENTORY, "test_each_turn_lists_the_catalogs_its_model_calls_were_offered"),
    ],
    "ARE evaluate_permission: a dry run of the rules, without running the tool": [
        (EVALUATE, "test_the_dry_run_answers_what_the_engine_decided_for_the_same_calls"),
    ],
    "ARE session snapshot: the thread tree, statuses, recent turns and an event cursor": [
        (SESSIONS, "test_the_snapshot_lists_the_tree_root_first_then_by_creation"),
        (SESSIONS, "test_each_thread_shows_its_last_five_turns_newest_first_as_the_turns_api"),
        (SESSIONS, "test_event_cursors_are_each_threads_last_sequence"),
    ],
    "ARE runtime.warning for non-fatal conditions (a fallback used, a takeover)": [
        (STOPS, "test_a_fallback_that_answers_is_a_runtime_warning"),
        (TURNS_E2E, "test_turn_of_a_killed_worker_reads_lost_and_the_sweep_completes_it_once"),
    ],
    "ARE runtime.error for fatal conditions": [
        (STOPS, "test_step_error_removes_the_empty_pending_row_and_fails_the_thread"),
    ],
    "ARE action_id in the envelope of an action's events": [
        (ACTIONS, "test_approve_runs_the_call_once_and_the_turn_carries_on"),
    ],
    "ARE export_replay / export_evidence: a portable document of a thread or session": [
        (
            EXPORT,
            "test_a_thread_export_streams_header_thread_definitions_events_rows_files_and_end",
        ),
        (EXPORT, "test_a_session_export_holds_every_thread_of_the_tree_root_first"),
    ],
    "ARE events contain stable ids and can be replayed into a read model": [
        (VALIDATE, "test_a_thread_that_ran_replays_into_its_stored_read_model"),
        (VALIDATE, "test_a_turn_status_changed_behind_the_events_back_is_a_difference"),
    ],
    "DIGEST 18.3 (6) reasoning is replayed only with reasoning.include, same prompt only": [
        (REASONING, "test_reasoning_is_replayed_only_when_the_prompt_includes_it"),
        (REASONING, "test_reasoning_is_replayed_only_with_the_messages_its_prompt_answered"),
    ],
    "DIGEST 4 reasoning.exclude: the reasoning is not returned": [
        (REASONING, "test_excluded_reasoning_is_neither_stored_nor_replayed"),
        (REASONING, "test_excluded_reasoning_is_not_streamed"),
    ],
}


@pytest.mark.parametrize("clause", sorted(PROVED_ELSEWHERE))
def test_every_clause_proved_elsewhere_names_a_test_that_exists(clause: str) -> None:
    for module_name, test_name in PROVED_ELSEWHERE[clause]:
        module = importlib.import_module(module_name)
        assert callable(getattr(module, test_name, None)), f"{module_name}.{test_name}"

"""Queue and delivery conformance: spec Runtime §2 ("RT-2" is standard-agents-runtime.md §2),
§3 and §9. Every clause is proved by a test named in ``PROVED_ELSEWHERE``, which a test
below keeps honest."""

from __future__ import annotations

import importlib

import pytest

JOIN = "tests.threads.runtime.test_join"
PROVED_ELSEWHERE: dict[str, list[tuple[str, str]]] = {
    "RT-2 if a thread is already executing, new work is queued": [
        (JOIN, "test_messages_posted_during_a_tool_join_the_running_turn_in_order"),
    ],
    "RT-2 if idle, the runtime starts a new execution": [
        (JOIN, "test_join_with_no_turn_running_waits_like_enqueue"),
    ],
    "RT-3 step 1: drain queued messages/tools for this step": [
        (JOIN, "test_messages_posted_during_a_tool_join_the_running_turn_in_order"),
    ],
    "RT-9 if active: inject before next model call": [
        (JOIN, "test_messages_posted_during_a_tool_join_the_running_turn_in_order"),
    ],
    "RT-9 if multiple: process in FIFO order": [
        (JOIN, "test_messages_posted_during_a_tool_join_the_running_turn_in_order"),
    ],
    "RT-9 queued messages are durable: one posted after the last model call is answered": [
        (JOIN, "test_a_message_posted_after_the_last_model_call_runs_as_its_own_turn"),
        (JOIN, "test_an_interrupted_turn_leaves_its_undrained_joined_messages_queued"),
    ],
}


@pytest.mark.parametrize("clause", sorted(PROVED_ELSEWHERE))
def test_every_clause_proved_elsewhere_names_a_test_that_exists(clause: str) -> None:
    for module_name, test_name in PROVED_ELSEWHERE[clause]:
        module = importlib.import_module(module_name)
        assert callable(getattr(module, test_name, None)), f"{module_name}.{test_name}"

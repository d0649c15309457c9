"""Subagent conformance: spec runtime §7-§8 and §10 ("RT-7.1" is standard-agents-runtime.md
§7.1), DIGEST §6 and §11 ("DG-6.3" is DIGEST.md §6.3). Every MUST of those sections is proved
by a test here or by one named in ``PROVED_ELSEWHERE``, which a test below keeps honest."""

from __future__ import annotations

import importlib
from typing import Any

import pytest

from agents.registry import HookName, hook
from common.time import now_us
from tests.threads.runtime.conftest import Engine, engine, prompt
from threads.models import Event, Message, SubagentLink, Thread, Turn
from threads.runtime.lifecycle import thread_open
from threads.runtime.spawn import IMMEDIATE_MESSAGE
from threads.services.env import EnvInput
from threads.services.lock import lock_acquire
from threads.services.subagents import awaits_release
from threads.state import ThreadState

__all__ = ["engine"]

# Clause -> tests in other modules that prove it (module path, test name).
SUBAGENTS, SPAWNING = (
    "tests.threads.runtime.test_subagents",
    "tests.threads.runtime.test_subagents_spawning",
)
PROVED_ELSEWHERE: dict[str, list[tuple[str, str]]] = {
    "RT-7.1 child threads with parent linkage": [
        (SUBAGENTS,
         "test_a_blocking_call_runs_the_child_session_and_returns_its_outcome"),
    ],
    "RT-7.2 maxInstances: tool errors with actionable guidance": [
        (SUBAGENTS, "test_max_instances_refuses_with_the_live_references"),
    ],
    "RT-7.2 lifecycle tools for resumable subagents": [
        (SUBAGENTS,
         "test_resumable_subagents_are_offered_through_the_lifecycle_tools"),
    ],
    "RT-7.3 optional flags": [
        (SPAWNING,
         "test_an_optional_subagent_is_offered_only_when_its_flag_is_set"),
    ],
    "RT-7.3 immediate, recursive across children": [
        (SPAWNING,
         "test_an_immediate_subagent_starts_when_the_thread_is_created"),
        (SPAWNING,
         "test_immediate_spawning_is_recursive_across_children"),
    ],
    "RT-7.4 scopedEnv never model-visible; DG-6.5 indexed groups": [
        (SPAWNING,
         "test_the_object_form_fans_out_by_indexed_env_keys_and_keeps_scoped_values_from_models"),
    ],
    "RT-7.5 / DG-11 scoped variable bootstrap": [
        (SPAWNING,
         "test_a_missing_required_scoped_variable_defers_the_spawn_into_a_request"),
    ],
    "RT-8.2 child -> parent payload and attachments": [
        (SUBAGENTS,
         "test_a_session_stop_binding_maps_the_outcome_and_copies_its_attachments_back"),
        (SUBAGENTS,
         "test_a_non_blocking_call_answers_at_once_and_the_result_arrives_as_a_silent_message"),
    ],
    "RT-8.2 notifyParent / setStatus": [
        (SUBAGENTS, "test_notify_parent_and_set_status_reach_the_parent"),
    ],
    "RT-8.3 sessionStatus updates the registry": [
        (SUBAGENTS,
         "test_the_session_status_binding_updates_the_registry_without_ending_the_session"),
    ],
    "RT-10 termination propagates to the parent registry": [
        (SUBAGENTS,
         "test_terminating_a_child_updates_the_parent_and_terminating_a_parent_cascades"),
    ],
    "DG-6.3 child outcome": [
        (SUBAGENTS, "test_stop_session_in_the_child_is_its_outcome"),
        (SUBAGENTS,
         "test_declared_session_tools_that_never_fired_make_the_outcome_an_error"),
        (SUBAGENTS, "test_a_failed_child_session_is_an_error_result"),
    ],
    "DG-6.3 blocking + maxInstances 1 special case": [
        (SUBAGENTS,
         "test_the_one_instance_of_a_blocking_relationship_is_messaged_and_awaited"),
    ],
    "DG-11 child env minus scoped names": [
        (SPAWNING,
         "test_a_child_inherits_the_parent_env_minus_its_scoped_names"),
    ],
    "DG-11 required variables enforced at creation": [
        ("tests.threads.test_required_variables",
         "test_missing_required_variables_are_a_400_naming_each_and_where_declared"),
    ],
}  # fmt: skip


@pytest.mark.parametrize("clause", sorted(PROVED_ELSEWHERE))
def test_every_clause_proved_elsewhere_names_a_test_that_exists(clause: str) -> None:
    for module_name, test_name in PROVED_ELSEWHERE[clause]:
        module = importlib.import_module(module_name)
        assert callable(getattr(module, test_name, None)), f"{clause}: {test_name} is gone"


def define(engine: Engine, entry: Any, *, hooks: tuple[str, ...] = (), **agent: Any) -> None:
    """A ``boss`` whose prompt lists ``entry`` (and uses ``hooks``), and the ``pair``."""
    engine.define(
        prompts=[
            prompt("boss", tools=[entry], hooks=list(hooks)),
            prompt("worker", variables=[{"name": "TOPIC", "type": "text"}],
                   required_schema=agent.pop("schema", None),
                   prompt=[{"type": "text", "content": "Topic: "},
                           {"type": "variable", "value": "topic"}]),
            prompt("checker"),
        ],
        agents=[
            {"name": "boss", "side_a": {"prompt": "boss"}},
            {"name": "pair", "type": "dual_ai", "side_a": {"prompt": "worker"},
             "side_b": {"prompt": "checker"}, "max_session_turns": 1, "expose_as_tool": True,
             "tool_description": "A worker and a checker", **agent},
        ],
    )  # fmt: skip


def create_call(**arguments: Any) -> dict[str, Any]:
    base = {"agent": "pair", "message": "go", "attachments": [], "name": "n"}
    return {"name": "subagent_create", "arguments": {**base, **arguments}}


RESUMABLE = {"name": "pair", "blocking": False, "resumable": {"receives_messages": "side_a"}}


def started(engine: Engine, entry: Any, *calls: dict[str, Any], **agent: Any) -> Thread:
    """A boss thread whose model made ``calls`` (one step), then said ``ok``."""
    define(engine, entry, **agent)
    parent = engine.thread("boss")
    engine.script.tool_calls(list(calls)).text("ok")
    engine.send(parent, "go")
    engine.drive(parent)
    return parent


def tool_results(thread: Thread) -> list[Message]:
    return list(Message.objects.filter(thread=thread, role="tool").order_by("seq"))


# RT-7.1, DG-12: parent/child lookup through ThreadState ----------------------------------------


def test_rt_7_1_parent_and_child_lookup_through_thread_state(engine: Engine) -> None:
    parent = started(engine, RESUMABLE, create_call())
    child = Thread.objects.get(parent=parent)
    stranger = engine.thread("boss")

    found = ThreadState(parent).get_child_thread(str(child.pk))
    assert found is not None
    assert found.thread_id == str(child.pk)
    back = ThreadState(child).get_parent_thread()
    assert back is not None
    assert back.thread_id == str(parent.pk)
    assert ThreadState(stranger).get_child_thread(str(child.pk)) is None  # only true children
    assert ThreadState(parent).get_child_thread("nonsense") is None
    assert ThreadState(parent).get_parent_thread() is None
    [entry] = ThreadState(parent).children
    assert {key: entry[key] for key in ("reference", "relationship", "owner", "name", "title",
                                        "blocking", "parent_communication", "status")} == {
        "reference": str(child.pk), "relationship": "pair", "owner": "a", "name": "pair",
        "title": "n", "blocking": False, "parent_communication": "implicit", "status": "running",
    }  # fmt: skip


# DG-6.3: subagent_create arguments -------------------------------------------------------------

SCHEMA = {"type": "object", "properties": {"topic": {"type": "string"}}, "required": ["topic"]}


def test_dg_6_3_arguments_are_validated_persisted_and_shown_to_the_child(engine: Engine) -> None:
    """Validated against the child's side A requiredSchema; exposed as ThreadState.arguments
    and prompt variables, and shown to the child in a silent system message."""
    parent = started(
        engine, RESUMABLE, create_call(arguments={"topic": "tea"}),
        create_call(arguments={"topic": 7}), schema=SCHEMA,
    )  # fmt: skip

    ok, refused = tool_results(parent)
    assert ok.tool_status == "success"
    assert refused.tool_status == "error"
    assert "[arguments.topic]" in (refused.content or "")
    child = Thread.objects.get(parent=parent)
    assert ThreadState(child).arguments == {"topic": "tea"}
    marker = Message.objects.get(thread=child, role="system")
    assert marker.silent
    assert marker.metadata["subagentInitialArguments"] == {"topic": "tea"}
    assert marker.metadata["status_kind"] == "subagent_event"
    engine.script.text("draft").text("ok")
    engine.drive(child)
    assert engine.script.requests[-2].messages[0].text == "Topic: tea"


# RT-8.1: parent -> child attachments -----------------------------------------------------------


def test_rt_8_1_attachments_are_copied_to_the_child_under_child_local_paths(
    engine: Engine,
) -> None:
    define(engine, RESUMABLE)
    parent = engine.thread("boss")
    ThreadState(parent).write_file("/attachments/brief.txt", b"the brief", "text/plain")
    engine.script.tool_calls([create_call(attachments=["/attachments/brief.txt"])]).text("ok")
    engine.send(parent, "go")
    engine.drive(parent)

    child = Thread.objects.get(parent=parent)
    [ref] = Turn.objects.get(thread=child).payload["attachments"]
    assert ref["path"] != "/attachments/brief.txt"
    assert ref["path"].startswith("/attachments/brief-")
    assert ThreadState(child).read_file(ref["path"]) == b"the brief"
    assert ThreadState(child).read_file("/attachments/brief.txt") is None


def test_rt_8_1_a_missing_attachment_is_a_tool_error_and_creates_nothing(engine: Engine) -> None:
    parent = started(engine, RESUMABLE, create_call(attachments=["/attachments/none.txt"]))

    [result] = tool_results(parent)
    assert result.tool_status == "error"
    assert "no file at /attachments/none.txt" in (result.content or "")
    assert not Thread.objects.filter(parent=parent).exists()


# RT-7.2, DG-6.1: parentCommunication and receives_messages -------------------------------------


def test_rt_7_2_explicit_parent_communication_queues_nothing_to_the_parent(
    engine: Engine,
) -> None:
    entry = {**RESUMABLE, "resumable": {"receives_messages": "side_a",
                                        "parent_communication": "explicit"}}  # fmt: skip
    parent = started(engine, entry, create_call())
    child = Thread.objects.get(parent=parent)
    engine.script.text("a").text("b")
    engine.drive(child)

    assert not Turn.objects.filter(thread=parent, source="subagent").exists()
    assert ThreadState(parent).children[0]["status"] == "idle"  # the registry still knows


def test_dg_6_1_messages_to_a_side_b_receiver_are_queued_as_assistant(engine: Engine) -> None:
    entry = {**RESUMABLE, "resumable": {"receives_messages": "side_b"}}
    parent = started(engine, entry, create_call(message="review this"))
    child = Thread.objects.get(parent=parent)

    assert Turn.objects.get(thread=child).payload["role"] == "assistant"


# DIGEST §8: after_subagent_created -------------------------------------------------------------


def test_after_subagent_created_runs_on_the_parent_with_the_child_state(engine: Engine) -> None:
    seen: list[tuple[str, str]] = []

    @hook(HookName.AFTER_SUBAGENT_CREATED, id="watch_children")
    def watch(state: ThreadState, child: ThreadState, context: Any) -> None:
        seen.append((state.thread_id, child.thread_id))

    define(engine, RESUMABLE, hooks=("watch_children",))
    parent = engine.thread("boss")
    engine.script.tool_calls([create_call()]).text("ok")
    engine.send(parent, "go")
    engine.drive(parent)

    child = Thread.objects.get(parent=parent)
    assert seen == [(str(parent.pk), str(child.pk))]


# RT-10: a terminated child refuses work ------------------------------------------------------


def test_rt_10_a_terminated_child_refuses_messages(engine: Engine) -> None:
    """subagent_message is offered while an entry is live; to a terminated one it errs."""
    parent = started(engine, RESUMABLE, create_call(), create_call())
    child, _live = Thread.objects.filter(parent=parent).order_by("created_at")
    ThreadState(child).terminate()
    message = {"referenceId": str(child.pk), "message": "more", "attachments": []}
    engine.script.tool_calls([{"name": "subagent_message", "arguments": message}]).text("ok")
    engine.send(parent, "again")
    engine.drive(parent)

    refused = tool_results(parent)[-1]
    assert refused.tool_status == "error"
    assert "is terminated" in (refused.content or "")


def test_subagents_lists_the_registry(engine: Engine) -> None:
    parent = started(engine, RESUMABLE, create_call(name="alpha"),
                     {"name": "subagents", "arguments": {}})  # fmt: skip
    child = Thread.objects.get(parent=parent)

    listing = tool_results(parent)[-1].content
    assert listing == f"- {child.pk}: alpha — running (A worker and a checker)"


# Blocking waits: time limit, a dead parent worker ---------------------------------------------


def test_a_blocking_call_past_its_wait_answers_and_the_result_arrives_as_a_message(
    engine: Engine, settings: Any
) -> None:
    """A child another worker holds is waited for up to SUBAGENT_WAIT_S; then the call
    answers, and the child's end is delivered to the parent as a message instead."""
    settings.SUBAGENT_WAIT_S = 0
    held: list[Any] = []

    @hook(HookName.AFTER_SUBAGENT_CREATED, id="another_worker_takes_it")
    def take(state: ThreadState, child: ThreadState, context: Any) -> None:
        held.append(lock_acquire(tenant_id=child.thread.tenant_id, thread_id=child.thread.pk))

    define(engine, "pair", hooks=("another_worker_takes_it",))
    parent = engine.thread("boss")
    engine.script.tool_calls([{"name": "pair", "arguments": {"message": "slow work"}}])
    engine.script.text("waiting")
    engine.send(parent, "go")
    engine.drive(parent)

    child = Thread.objects.get(parent=parent)
    [result] = tool_results(parent)
    assert "is still working after 0 s (SUBAGENT_WAIT_S)" in (result.content or "")
    held[0].release()
    engine.script.text("done").text("checked").text("thanks")
    engine.drive(child)
    delivered = Turn.objects.get(thread=parent, source="subagent")
    assert "has returned the following result:\n\nchecked" in delivered.payload["content"]


def test_a_dead_parent_workers_waits_are_delivered_as_messages(engine: Engine) -> None:
    """The worker running a blocking call died: a takeover releases its waits, and a session
    that ended meanwhile reaches the parent as a message (nothing is lost)."""
    parent = started(engine, RESUMABLE, create_call())
    child = Thread.objects.get(parent=parent)
    turn = Turn.objects.get(thread=child)
    SubagentLink.objects.filter(child=child).update(awaited_turn=turn.pk)
    engine.script.text("a").text("b")
    engine.drive(child)  # the session ends while its waiter is gone
    assert not Turn.objects.filter(thread=parent, source="subagent").exists()

    awaits_release(parent=parent)

    delivered = Turn.objects.get(thread=parent, source="subagent")
    assert "has returned the following result:\n\nb" in delivered.payload["content"]
    assert SubagentLink.objects.get(child=child).awaited_turn is None


# DG-11: a top-level thread's own required scoped variable is its creation's -------------------


def test_dg_11_a_top_level_thread_must_bring_its_own_required_scoped_variables(
    engine: Engine,
) -> None:
    token = {"name": "OWN_TOKEN", "type": "secret", "required": True, "scoped": True}
    engine.define(
        prompts=[prompt("solo", variables=[token])],
        agents=[{"name": "solo", "side_a": {"prompt": "solo"}}],
    )
    with pytest.raises(Exception, match="OWN_TOKEN"):
        thread_open(tenant=engine.tenant, agent_name="solo")
    thread = thread_open(tenant=engine.tenant, agent_name="solo",
                         env={"OWN_TOKEN": EnvInput("t")})  # fmt: skip
    assert ThreadState(thread).env("OWN_TOKEN") == "t"
    assert thread.created_at <= now_us()


# RT-7.3: immediate spawning, recursive across blocking children ------------------------------


def test_a_three_level_immediate_chain_runs_every_task_and_delivers_every_outcome(
    engine: Engine,
) -> None:
    """RT-7.3 "immediate execution should be recursive across activated child prompts", with
    DG-6.3 "Blocking: the tool result is the child's session outcome": a child's own immediate
    spawn is not its session, so each level runs its task and its outcome reaches its parent."""
    engine.define(
        prompts=[
            prompt("boss", tools=[{"name": "mid", "immediate": True}]),
            prompt("mid_worker", tools=[{"name": "leaf", "immediate": True}]),
            prompt("mid_checker"), prompt("leaf_worker"), prompt("leaf_checker"),
        ],
        agents=[
            {"name": "boss", "side_a": {"prompt": "boss"}},
            {"name": "mid", "type": "dual_ai", "side_a": {"prompt": "mid_worker"},
             "side_b": {"prompt": "mid_checker"}, "max_session_turns": 1,
             "expose_as_tool": True, "tool_description": "mid"},
            {"name": "leaf", "type": "dual_ai", "side_a": {"prompt": "leaf_worker"},
             "side_b": {"prompt": "leaf_checker"}, "max_session_turns": 1,
             "expose_as_tool": True, "tool_description": "leaf"},
        ],
    )  # fmt: skip
    parent = engine.thread("boss")
    engine.send(parent, "go")
    engine.script.text("leaf draft").text("leaf result").text("mid draft").text("mid result")
    engine.script.text("all done")

    engine.drive(parent)

    [child] = Thread.objects.filter(parent=parent)
    [grandchild] = Thread.objects.filter(parent=child)
    asked = [(request.messages[0].text, request.messages) for request in engine.script.requests]
    assert [system for system, _ in asked] == [
        "You are leaf_worker.", "You are leaf_checker.", "You are mid_worker.",
        "You are mid_checker.", "You are boss.",
    ]  # fmt: skip
    texts = [[message.text for message in messages] for _, messages in asked]
    assert IMMEDIATE_MESSAGE in texts[0]  # the grandchild ran its task
    assert IMMEDIATE_MESSAGE in texts[2]  # so did the child, after the grandchild's outcome
    assert f"leaf result\n\nReference: {grandchild.pk}" in texts[2]
    assert "go" in texts[4]  # the parent's own turn, with the child's outcome before it
    assert f"mid result\n\nReference: {child.pk}" in texts[4]
    for thread, result, reference in ((parent, "mid result", child),
                                      (child, "leaf result", grandchild)):  # fmt: skip
        [delivered] = tool_results(thread)
        assert (delivered.tool_status, delivered.content) == (
            "success",
            f"{result}\n\nReference: {reference.pk}",
        )
        link = SubagentLink.objects.get(child=reference)
        assert link.outcome is not None
        assert (link.outcome["ok"], link.outcome["text"]) == (True, result)
        assert link.awaited_turn is None
        # delivered once, as the blocking call's result: no message follows it
        handoffs = Turn.objects.filter(
            thread=thread, payload__metadata__subagent_event="parent_handoff"
        )
        assert not handoffs.exists()
        tasks = Turn.objects.filter(
            thread=reference, payload__metadata__subagent_event="parent_message"
        )
        assert tasks.get().payload["content"] == IMMEDIATE_MESSAGE
        # The registry: running until the task's session ended (idle), then closed, since a
        # non-resumable child is terminated once its outcome is delivered (RT-10).
        registry = Event.objects.filter(thread=thread, type__startswith="subagent.")
        assert list(registry.order_by("sequence").values_list("type", "payload__status")) == [
            ("subagent.spawned", "running"), ("subagent.completed", "idle"),
            ("subagent.status", "idle"), ("subagent.closed", "terminated"),
        ]  # fmt: skip
        assert (link.status, link.terminated_at is not None) == ("terminated", True)
    assert engine.history(parent)[-1] == ("assistant", "all done")
    for thread, kinds in ((parent, ["spawn", "message"]), (child, ["spawn", "message"]),
                          (grandchild, ["message"])):  # fmt: skip
        turns = Turn.objects.filter(thread=thread).order_by("position")
        assert list(turns.values_list("kind", "status")) == [(k, "completed") for k in kinds]

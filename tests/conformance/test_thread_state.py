"""ThreadState conformance: identity, messages, logs, resources, context, events.

Each test names the clause it proves: "Threads §x" is spec/standard-agents-threads.md,
"DIGEST §x" is spec/DIGEST.md. KV, env and files have their own modules here.
"""

from __future__ import annotations

import time
from typing import Any

import pytest

from agents.bundles import bundle_import
from common.errors import Conflict, ValidationFailed
from tenancy.models import Tenant
from tests.agents.samples import rich_bundle
from tests.factories import make_thread
from threads.models import Event, Thread, Turn
from threads.services.logs import log_create
from threads.state import ExecutionState, ThreadState

pytestmark = pytest.mark.django_db


@pytest.fixture
def state(thread: Thread) -> ThreadState:
    return ThreadState(thread)


def _contents(result: Any) -> list[str]:
    return [message["content"] for message in result.messages]


def _seed(state: ThreadState, count: int) -> None:
    for index in range(count):
        state.inject_message(role="user" if index % 2 == 0 else "assistant", content=f"m{index}")


def test_identity_properties(tenant: Tenant) -> None:
    """Threads §1.2.1: threadId, agentId, userId, createdAt (µs), context, execution."""
    before = time.time_ns() // 1000
    thread = make_thread(tenant, agent_name="support", user_id="u-7")
    state = ThreadState(thread)

    assert state.thread_id == str(thread.id)
    assert state.agent_id == "support"
    assert state.user_id == "u-7"
    assert before <= state.created_at <= time.time_ns() // 1000
    assert state.terminated is None
    assert state.context == {}
    assert state.execution is None


def test_user_id_is_none_when_absent(state: ThreadState) -> None:
    """Threads §1.2.1: userId is string | null."""
    assert state.user_id is None


def test_get_messages_defaults_to_newest_first_without_silent(state: ThreadState) -> None:
    """Threads §2.3: order defaults to desc; includeSilent defaults to false."""
    _seed(state, 3)
    state.inject_message(role="system", content="hidden", silent=True)

    result = state.get_messages()

    assert _contents(result) == ["m2", "m1", "m0"]
    assert result.total == 3
    assert result.has_more is False


def test_get_messages_limit_offset_order_and_has_more(state: ThreadState) -> None:
    """Threads §2.2-2.3: limit, offset, order; result carries total and hasMore."""
    _seed(state, 5)

    newest = state.get_messages(limit=2)
    next_page = state.get_messages(limit=2, offset=2)
    oldest = state.get_messages(limit=2, order="asc")
    tail = state.get_messages(limit=2, offset=4)

    assert (_contents(newest), newest.total, newest.has_more) == (["m4", "m3"], 5, True)
    assert _contents(next_page) == ["m2", "m1"]
    assert _contents(oldest) == ["m0", "m1"]
    assert (_contents(tail), tail.has_more) == (["m0"], False)


def test_get_messages_include_silent_and_max_depth(thread: Thread, state: ThreadState) -> None:
    """Threads §2.3: includeSilent and maxDepth filter what is returned."""
    from threads.services.messages import message_inject

    top = message_inject(thread=thread, role="assistant", content="top")
    message_inject(thread=thread, role="tool", content="nested", parent=top)
    state.inject_message(role="system", content="quiet", silent=True)

    everything = state.get_messages(order="asc", include_silent=True)
    top_level = state.get_messages(order="asc", include_silent=True, max_depth=0)

    assert _contents(everything) == ["top", "nested", "quiet"]
    assert _contents(top_level) == ["top", "quiet"]
    assert everything.messages[1]["depth"] == 1
    assert everything.messages[1]["parent_id"] == str(top.id)


def test_message_fields_follow_the_spec(state: ThreadState) -> None:
    """Threads §2.1: id, role, content, name, tool_calls, tool_call_id, created_at,
    parent_id, depth, silent, metadata."""
    message = state.inject_message(role="user", content="hi", metadata={"source": "test"})

    assert set(message) >= {
        "id", "role", "content", "name", "tool_calls", "tool_call_id", "created_at",
        "parent_id", "depth", "silent", "metadata",
    }  # fmt: skip
    assert (message["role"], message["content"], message["metadata"]) == (
        "user", "hi", {"source": "test"},
    )  # fmt: skip
    assert message["depth"] == 0
    assert message["silent"] is False
    assert isinstance(message["created_at"], int)


def test_get_message_returns_none_when_absent(state: ThreadState) -> None:
    """Threads §1.2.2: getMessage(messageId) -> Message | null."""
    assert state.get_message("0190a1b2-0000-7000-8000-000000000000") is None
    assert state.get_message("not-a-uuid") is None


def test_inject_message_persists_without_starting_execution(
    thread: Thread, state: ThreadState
) -> None:
    """Threads §2.4 / DIGEST §12: injectMessage persists immediately, starts no execution."""
    message = state.inject_message(role="user", content="context", silent=True)

    assert state.get_message(message["id"]) == message
    assert not Turn.objects.filter(thread=thread).exists()


def test_update_message_changes_content_and_merges_metadata(state: ThreadState) -> None:
    """Threads §2.5: updateMessage(id, {content, metadata}) (metadata merged, DIGEST §12)."""
    message = state.inject_message(role="assistant", content="draft", metadata={"a": 1})

    updated = state.update_message(message["id"], content="final", metadata={"edited": True})

    assert updated["content"] == "final"
    assert updated["metadata"] == {"a": 1, "edited": True}
    assert state.get_message(message["id"]) == updated


def test_delete_message(state: ThreadState) -> None:
    """DIGEST §12: deleteMessage(id) -> boolean."""
    message = state.inject_message(role="user", content="oops")

    assert state.delete_message(message["id"]) is True
    assert state.delete_message(message["id"]) is False
    assert state.get_message(message["id"]) is None


def test_terminated_thread_refuses_new_messages(thread: Thread) -> None:
    """DIGEST §12: injectMessage throws on terminated threads."""
    Thread.objects.filter(pk=thread.pk).update(terminated_at=time.time_ns() // 1000)
    state = ThreadState(Thread.objects.get(pk=thread.pk))

    with pytest.raises(Conflict, match="terminated"):
        state.inject_message(role="user", content="hello?")


def test_get_logs_newest_first(thread: Thread, state: ThreadState) -> None:
    """Threads §1.2.2 getLogs / DIGEST §15: logs with limit, offset, order."""
    for index in range(3):
        log_create(thread=thread, kind="llm", data={"n": index})

    newest = state.get_logs(limit=2)
    oldest = state.get_logs(order="asc")

    assert [log["data"]["n"] for log in newest] == [2, 1]
    assert [log["data"]["n"] for log in oldest] == [0, 1, 2]


def test_resource_loading(tenant: Tenant) -> None:
    """Threads §3: loadModel/loadPrompt/loadAgent and the name lists."""
    bundle_import(tenant=tenant, document=rich_bundle())
    state = ThreadState(make_thread(tenant))

    assert state.load_prompt("assistant").model == "smart"
    assert state.load_agent("debate").type == "dual_ai"
    assert state.load_model("fast").kind == "scripted"
    assert state.get_model_names() == ["fast", "smart"]
    assert state.get_agent_names() == ["debate", "helper"]
    assert "house_rules" in state.get_prompt_names()


def test_context_is_per_execution(thread: Thread) -> None:
    """Threads §7: context is per-execution storage, not shared between ThreadStates."""
    first, second = ThreadState(thread), ThreadState(thread)
    first.context["scratch"] = 1

    assert second.context == {}


def _logged(thread: Thread) -> list[tuple[int, str, dict[str, Any]]]:
    return [
        (event.sequence, event.type, event.payload)
        for event in Event.objects.for_tenant(thread.tenant).filter(thread=thread)
    ]


def test_emit_records_a_custom_event(state: ThreadState, thread: Thread) -> None:
    """Threads §6: emit(event, data) produces a custom event in the thread's log."""
    state.emit("progress", {"done": 3})

    assert _logged(thread) == [(1, "custom", {"name": "progress", "data": {"done": 3}})]


@pytest.mark.django_db(transaction=True)
def test_message_writes_record_events_in_order(tenant: Tenant) -> None:
    """ARCHITECTURE §6: facts become events with a gap-free per-thread sequence."""
    thread = make_thread(tenant)
    state = ThreadState(thread)

    message = state.inject_message(role="user", content="hi")
    state.update_message(message["id"], content="hello")
    state.delete_message(message["id"])

    assert [(sequence, type) for sequence, type, _ in _logged(thread)] == [
        (1, "message.created"), (2, "message.updated"), (3, "message.deleted"),
    ]  # fmt: skip


def test_scheduling_an_unknown_effect_throws_at_schedule_time(state: ThreadState) -> None:
    """DIGEST §9: an unknown effect name throws when it is scheduled, not when it is due."""
    with pytest.raises(ValidationFailed, match="unknown effect 'e'"):
        state.schedule_effect("e")


def test_execution_state_controls() -> None:
    """Threads §9.3: forceTurn(side) and stop() (which trips the abort signal)."""
    execution = ExecutionState(flow_id="f1")

    execution.force_turn("b")
    execution.stop()

    assert execution.forced_side == "b"
    assert execution.stopped is True
    assert execution.abort_signal.is_set


@pytest.mark.django_db(transaction=True)
def test_kv_writes_publish_kv_changed_without_the_value(tenant: Tenant) -> None:
    """DIGEST §16: every write/delete broadcasts kv_changed {key, deleted, updated_at}."""
    thread = make_thread(tenant)
    state = ThreadState(thread)

    state.set_value("plan", {"secret": "s3cr3t"})
    state.set_value("plan", None)

    seen = _logged(thread)
    kinds = [(type, payload["key"], payload["deleted"]) for _, type, payload in seen]
    assert kinds == [("kv.changed", "plan", False), ("kv.changed", "plan", True)]
    assert "s3cr3t" not in repr(seen)


@pytest.mark.django_db(transaction=True)
def test_file_writes_publish_file_changed(tenant: Tenant) -> None:
    """ARCHITECTURE §6: file changes become events, whoever makes them."""
    thread = make_thread(tenant)
    state = ThreadState(thread)

    state.write_file("/docs/a.txt", "hello", "text/plain")
    state.unlink_file("/docs/a.txt")
    state.rmdir_file("/docs")

    changes = [(p["path"], p["change"]) for _, t, p in _logged(thread) if t == "file.changed"]
    assert changes == [("/docs/a.txt", "written"), ("/docs/a.txt", "deleted"), ("/docs", "deleted")]


def test_run_code_runs_in_the_sandbox_and_a_flow_abort_terminates_it(state: ThreadState) -> None:
    """Runtime §13 / DIGEST §17: ``state.runCode(source, options)`` returns a handle; inside an
    execution, the flow's abort signal terminates what is still running."""
    done = state.run_code("export default (a: number, b: number) => a + b",
                          {"execute": {"args": [2, 3]}}).result(timeout=10)  # fmt: skip
    assert (done.status, done.result) == ("success", 5)

    flow = ThreadState(state.thread, execution=ExecutionState(flow_id="f"))
    running = flow.run_code("while (true) {}")
    assert running.running
    assert flow.execution is not None
    flow.execution.abort_signal.set()

    stopped = running.result(timeout=10)
    assert stopped.status == "terminated"
    assert stopped.error is not None
    assert stopped.error.message == "the flow was stopped"

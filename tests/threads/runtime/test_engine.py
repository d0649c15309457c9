"""The step cycle in process: context, model call, tools, results, in spec order."""

from __future__ import annotations

import uuid
from typing import Any

from agents.providers.base import AbortSignal
from agents.registry import HookName, hook
from tenancy.models import Tenant
from tests.threads.runtime.conftest import Engine, prompt
from threads.models import Log, Message, Thread, Turn
from threads.runtime.driver import thread_drive
from threads.runtime.engine import Flow
from threads.runtime.stops import StopReason
from threads.services.fence import fence_acquire
from threads.services.lock import flows_running, lock_acquire
from threads.state import ThreadState


def test_user_message_tool_call_result_and_answer_are_persisted_in_order(engine: Engine) -> None:
    engine.define(
        prompts=[prompt("helper", tools=["echo"])],
        agents=[{"name": "helper", "side_a": {"prompt": "helper"}}],
    )
    thread = engine.thread("helper")
    engine.script.tool_calls([{"name": "echo", "arguments": {"text": "hi"}}]).text("It said hi.")
    message_id = engine.send(thread, "say hi")

    result = engine.drive(thread)

    assert result.reasons == [StopReason.STOP_ON_RESPONSE]
    rows = list(Message.objects.filter(thread=thread).order_by("seq"))
    assert [(m.role, m.side, m.content, m.tool_status) for m in rows] == [
        ("user", "b", "say hi", ""),
        ("assistant", "a", None, ""),
        ("tool", "a", "echo: hi", "success"),
        ("assistant", "a", "It said hi.", ""),
    ]
    assert str(rows[0].id) == message_id
    calls = rows[1].tool_calls or []
    assert [call["function"]["name"] for call in calls] == ["echo"]
    assert rows[2].tool_call_id == calls[0]["id"]
    assert thread.status == "waiting_input"
    assert engine.tool_calls == [("echo", "hi")]
    assert Turn.objects.get(thread=thread).fence == result.fence
    kinds = list(
        Log.objects.filter(thread=thread).order_by("created_at").values_list("kind", flat=True)
    )
    assert kinds == ["llm", "tool", "llm", "flow"]


def test_a_changed_prompt_applies_from_the_next_flow_despite_the_definitions_cache(
    engine: Engine,
) -> None:
    engine.define(
        prompts=[prompt("helper")], agents=[{"name": "helper", "side_a": {"prompt": "helper"}}]
    )
    thread = engine.thread("helper")
    engine.script.text("first").text("second")
    engine.send(thread, "one")
    engine.drive(thread)

    engine.define(
        prompts=[{**prompt("helper"), "prompt": "You are renamed."}],
        agents=[{"name": "helper", "side_a": {"prompt": "helper"}}],
    )
    engine.send(thread, "two")
    engine.drive(thread)

    systems = [request.messages[0].text for request in engine.script.requests]
    assert systems == ["You are helper.", "You are renamed."]


def test_a_flow_ending_with_work_in_the_inbox_leaves_the_thread_queued_not_waiting(
    engine: Engine, wakes: list[str]
) -> None:
    """The status read model never shows a resting status while work waits: a message that
    arrives after the flow's last drain leaves the thread ``queued`` for the next flow."""
    late: list[str] = []

    @hook(HookName.AFTER_CREATE_MESSAGE, id="late_sender")
    def late_sender(state: ThreadState, message: dict[str, Any], context: Any) -> None:
        if message["role"] == "assistant" and message["content"] == "first" and not late:
            thread = Thread.objects.get(pk=state.thread_id)
            late.append(engine.send(thread, "arrived while answering"))

    engine.define(
        prompts=[prompt("helper", hooks=["late_sender"])],
        agents=[{"name": "helper", "side_a": {"prompt": "helper"}}],
    )
    thread = engine.thread("helper")
    engine.script.text("first").text("second")
    engine.send(thread, "hello")

    fence, _pending = fence_acquire(thread=thread)
    turn = Turn.objects.get(thread=thread)
    flow = Flow(thread, fence=fence, runtime=engine.runtime(), abort=AbortSignal(),
                turn=turn)  # fmt: skip
    assert flow.run() == StopReason.STOP_ON_RESPONSE
    thread.refresh_from_db()
    assert thread.status == "queued"
    assert late
    assert Turn.objects.filter(thread=thread, status="queued").exists()

    engine.drive(thread)

    assert thread.status == "waiting_input"
    assert engine.history(thread) == [
        ("user", "hello"), ("assistant", "first"),
        ("user", "arrived while answering"), ("assistant", "second"),
    ]  # fmt: skip


def test_a_wake_up_that_finds_the_lock_taken_is_run_after_the_holder_releases(
    engine: Engine, wakes: list[str]
) -> None:
    refused: list[bool] = []

    @hook(HookName.AFTER_CREATE_MESSAGE, id="concurrent_delivery")
    def concurrent_delivery(state: ThreadState, message: dict[str, Any], context: Any) -> None:
        if message["role"] == "assistant" and not refused:  # another worker's delivery
            thread = state.thread
            result = thread_drive(thread_id=thread.pk, tenant_id=thread.tenant_id)
            refused.append(not result.acquired)

    engine.define(
        prompts=[prompt("helper", hooks=["concurrent_delivery"])],
        agents=[{"name": "helper", "side_a": {"prompt": "helper"}}],
    )
    thread = engine.thread("helper")
    engine.script.text("first")
    engine.send(thread, "hello")

    engine.drive(thread)

    assert refused == [True]
    assert wakes == [str(thread.pk)]


def test_a_drive_nobody_else_asked_for_wakes_nothing(engine: Engine, wakes: list[str]) -> None:
    engine.define(
        prompts=[prompt("helper")], agents=[{"name": "helper", "side_a": {"prompt": "helper"}}]
    )
    thread = engine.thread("helper")
    engine.script.text("first")
    engine.send(thread, "hello")

    engine.drive(thread)

    assert wakes == []
    assert engine.history(thread) == [("user", "hello"), ("assistant", "first")]


# Per-tenant flow slots -------------------------------------------------------------------


def test_a_tenant_with_every_flow_slot_in_use_waits_while_another_tenant_runs(
    engine: Engine, other_tenant: Tenant, settings: Any, wakes: list[str]
) -> None:
    settings.FLOWS_PER_TENANT = 1
    engine.define(prompts=[prompt("p")], agents=[{"name": "a", "side_a": {"prompt": "p"}}])
    thread = engine.thread("a")
    engine.send(thread, "hello")
    other = Engine(tenant=other_tenant, registry=engine.registry)
    other.define(prompts=[prompt("p")], agents=[{"name": "a", "side_a": {"prompt": "p"}}])
    other_thread = other.thread("a")
    other.script.text("answered")
    other.send(other_thread, "hello")

    # The tenant's one flow runs elsewhere (another worker holds a counted lock).
    elsewhere = lock_acquire(tenant_id=engine.tenant.id, thread_id=uuid.uuid4(), tenant_flows=1)
    assert elsewhere is not None
    waiting = engine.drive(thread)
    running = other.drive(other_thread)
    assert flows_running(tenant_id=engine.tenant.id) == 1
    assert flows_running(tenant_id=other_tenant.id) == 0  # its flow ended: its slot is free
    elsewhere.release()

    assert elsewhere.next_waiting == str(thread.pk), "the refused thread's turn comes next"
    assert (waiting.acquired, waiting.deferred) == (False, True)
    assert Turn.objects.get(thread=thread).status == "queued"
    assert running.acquired
    assert Turn.objects.get(thread=other_thread).status == "completed"
    engine.script.text("answered too")
    assert engine.drive(thread).acquired, "a freed slot lets the next drive run"
    assert Turn.objects.get(thread=thread).status == "completed"

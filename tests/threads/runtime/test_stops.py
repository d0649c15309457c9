"""Every stop rule of spec DIGEST §5.3 (and §18.5 stop/terminate), one test per reason.

In-process tests drive the thread in the test's transaction. The user stop and terminate
tests interrupt a slow model call from another thread, so they commit
(``transaction=True``): the driving thread has its own database connection.
"""

from __future__ import annotations

import contextvars
import threading
import time
from collections.abc import Callable
from typing import Any

import pytest
from django.db import connection

from agents.registry import HookName, hook, tool
from common.errors import Conflict
from tests.support import ContextThread
from tests.threads.runtime.conftest import Engine, Row, drive_with, prompt, rows
from threads.models import Event, Log, Message, Thread, Turn
from threads.runtime import stops as stops_module
from threads.runtime.driver import DriveResult
from threads.runtime.engine import Runtime
from threads.runtime.stops import StopReason
from threads.services.control import thread_stop, thread_terminate
from threads.services.inbox import continue_queue, message_queue
from threads.services.messages import message_inject
from threads.state import ThreadState


def helper(engine: Engine, *, tools: list[Any] | None = None, **side: Any) -> Thread:
    """An ai_human agent ``helper`` whose side A has ``side`` settings; its thread."""
    engine.define(
        prompts=[prompt("helper", tools=tools or [])],
        agents=[{"name": "helper", "side_a": {"prompt": "helper", **side}}],
    )
    return engine.thread("helper")


# Session bindings ------------------------------------------------------------------------------


def test_session_fail_tool_that_succeeds_ends_the_session(engine: Engine) -> None:
    thread = helper(engine, tools=["give_up"], session_fail="give_up")
    engine.script.tool_calls([{"name": "give_up", "arguments": {"reason": "cannot"}}])
    engine.send(thread, "try")

    result = engine.drive(thread)

    assert result.reasons == [StopReason.SESSION_FAIL]
    assert rows(thread) == [
        ("user", "b", "try", ""),
        ("assistant", "a", None, ""),
        ("tool", "a", "gave up", "success"),
    ]
    assert engine.tool_calls == [("give_up", {"reason": "cannot"})]
    assert len(engine.script.requests) == 1
    assert thread.status == "failed"  # session_fail ends the turn failed


def test_failing_session_fail_binding_does_nothing(engine: Engine) -> None:
    thread = helper(engine, tools=["broken"], session_fail="broken")
    engine.script.tool_calls([{"name": "broken"}]).text("It failed; I will go on.")
    engine.send(thread, "try")

    result = engine.drive(thread)

    assert result.reasons == [StopReason.STOP_ON_RESPONSE]
    assert rows(thread) == [
        ("user", "b", "try", ""),
        ("assistant", "a", None, ""),
        ("tool", "a", "Failed to execute tool: it is broken", "error"),
        ("assistant", "a", "It failed; I will go on.", ""),
    ]


def test_session_stop_stores_the_message_property_as_the_tool_content(engine: Engine) -> None:
    thread = helper(
        engine, tools=["finish"], session_stop={"name": "finish", "message_property": "summary"}
    )
    engine.script.tool_calls([{"name": "finish", "arguments": {"summary": "All done."}}])
    engine.send(thread, "work")

    result = engine.drive(thread)

    assert result.reasons == [StopReason.SESSION_STOP]
    assert rows(thread) == [
        ("user", "b", "work", ""),
        ("assistant", "a", None, ""),
        ("tool", "a", "All done.", "success"),
    ]
    assert engine.tool_calls == [("finish", {"summary": "All done."})]


def test_session_stop_without_message_property_stores_the_tool_result(engine: Engine) -> None:
    thread = helper(engine, tools=["finish"], session_stop="finish")
    engine.script.tool_calls([{"name": "finish", "arguments": {"summary": "All done."}}])
    engine.send(thread, "work")

    assert engine.drive(thread).reasons == [StopReason.SESSION_STOP]
    assert rows(thread)[-1] == ("tool", "a", "finished", "success")


def deliver_tool() -> None:
    @tool(
        description="Delivers the report.",
        args={
            "type": "object",
            "properties": {
                "note": {"type": "string"},
                "files": {"type": "array", "items": {"type": "string"}},
            },
        },
    )
    def deliver(state: ThreadState, args: dict[str, Any]) -> str:
        return "delivered"


def test_session_stop_attaches_the_files_named_by_attachments_property(engine: Engine) -> None:
    deliver_tool()
    thread = helper(
        engine,
        tools=["deliver"],
        session_stop={
            "name": "deliver", "message_property": "note", "attachments_property": "files",
        },
    )  # fmt: skip
    ThreadState(thread).write_file("/attachments/report.txt", "the report", "text/plain")
    engine.script.tool_calls(
        [{"name": "deliver", "arguments": {"note": "Here.", "files": ["/attachments/report.txt"]}}]
    )
    engine.send(thread, "report")

    result = engine.drive(thread)

    assert result.reasons == [StopReason.SESSION_STOP]
    stored = Message.objects.get(thread=thread, role="tool")
    assert (stored.content, stored.tool_status) == ("Here.", "success")
    assert [(ref["path"], ref["size"]) for ref in stored.attachments] == [
        ("/attachments/report.txt", 10)
    ]


def test_session_stop_naming_a_missing_attachment_is_an_error_and_does_not_stop(
    engine: Engine,
) -> None:
    deliver_tool()
    thread = helper(
        engine,
        tools=["deliver"],
        session_stop={"name": "deliver", "attachments_property": "files"},
    )
    engine.script.tool_calls(
        [{"name": "deliver", "arguments": {"files": ["/attachments/missing.txt"]}}]
    ).text("The file is missing.")
    engine.send(thread, "report")

    result = engine.drive(thread)

    assert result.reasons == [StopReason.STOP_ON_RESPONSE]
    assert rows(thread)[2:] == [
        (
            "tool",
            "a",
            "Failed to execute tool: files: no file at /attachments/missing.txt",
            "error",
        ),
        ("assistant", "a", "The file is missing.", ""),
    ]


# Turn completion ---------------------------------------------------------------------------------


def test_stop_tool_completes_the_turn_and_parks_for_the_human(engine: Engine) -> None:
    thread = helper(engine, tools=["echo"], stop_tool="echo", stop_on_response=False)
    engine.script.tool_calls([{"name": "echo", "arguments": {"text": "bye"}}], "Signing off.")
    engine.send(thread, "done?")

    result = engine.drive(thread)

    assert result.reasons == [StopReason.STOP_TOOL]
    assert rows(thread) == [
        ("user", "b", "done?", ""),
        ("assistant", "a", "Signing off.", ""),
        ("tool", "a", "echo: bye", "success"),
    ]
    assert len(engine.script.requests) == 1
    assert thread.status == "waiting_input"
    # ExecutionState.stopped_by: the side whose step met the stop condition, in the flow's log.
    assert Log.objects.get(thread=thread, kind="flow").data["stopped_by"] == "a"


def test_stop_tool_response_property_replaces_the_assistant_content(engine: Engine) -> None:
    thread = helper(
        engine,
        tools=["echo"],
        stop_tool="echo",
        stop_tool_response_property="text",
        stop_on_response=False,
    )
    engine.script.tool_calls(
        [{"name": "echo", "arguments": {"text": "The answer is 42."}}], "(thinking)"
    )
    engine.send(thread, "question")

    result = engine.drive(thread)

    assert result.reasons == [StopReason.STOP_TOOL]
    assert rows(thread) == [
        ("user", "b", "question", ""),
        ("assistant", "a", "The answer is 42.", ""),
        ("tool", "a", "echo: The answer is 42.", "success"),
    ]


def test_stop_on_response_needs_text_and_no_tool_calls(engine: Engine) -> None:
    thread = helper(engine, tools=["echo"])
    engine.script.tool_calls([{"name": "echo", "arguments": {"text": "x"}}], "Checking.")
    engine.script.text("Done.")
    engine.send(thread, "go")

    result = engine.drive(thread)

    assert result.reasons == [StopReason.STOP_ON_RESPONSE]
    assert rows(thread) == [
        ("user", "b", "go", ""),
        ("assistant", "a", "Checking.", ""),
        ("tool", "a", "echo: x", "success"),
        ("assistant", "a", "Done.", ""),
    ]
    assert thread.status == "waiting_input"


# Step limits -----------------------------------------------------------------------------------


def test_max_side_steps_stops_before_another_step_of_that_side(engine: Engine) -> None:
    thread = helper(engine, tools=["echo"], max_steps=2)
    for text in ("one", "two", "never"):
        engine.script.tool_calls([{"name": "echo", "arguments": {"text": text}}])
    engine.send(thread, "loop")

    result = engine.drive(thread)

    assert result.reasons == [StopReason.MAX_SIDE_STEPS]
    assert rows(thread) == [
        ("user", "b", "loop", ""),
        ("assistant", "a", None, ""),
        ("tool", "a", "echo: one", "success"),
        ("assistant", "a", None, ""),
        ("tool", "a", "echo: two", "success"),
    ]
    assert len(engine.script.requests) == 2
    assert engine.script.remaining == 1


def test_max_total_steps_caps_a_flow(engine: Engine, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(stops_module, "GLOBAL_STEP_CAP", 3)
    thread = helper(engine, tools=["finish"], stop_on_response=False, stop_tool="finish")
    for text in ("one", "two", "three", "never"):
        engine.script.text(text)
    engine.send(thread, "talk")

    result = engine.drive(thread)

    assert result.reasons == [StopReason.MAX_TOTAL_STEPS]
    assert rows(thread) == [
        ("user", "b", "talk", ""),
        ("assistant", "a", "one", ""),
        ("assistant", "a", "two", ""),
        ("assistant", "a", "three", ""),
    ]
    assert engine.script.remaining == 1


def test_a_side_max_steps_above_the_global_cap_raises_the_cap(
    engine: Engine, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setattr(stops_module, "GLOBAL_STEP_CAP", 2)
    thread = helper(
        engine, tools=["finish"], stop_on_response=False, stop_tool="finish", max_steps=3
    )
    for text in ("one", "two", "three", "never"):
        engine.script.text(text)
    engine.send(thread, "talk")

    result = engine.drive(thread)

    assert result.reasons == [StopReason.MAX_SIDE_STEPS]
    assert len(engine.script.requests) == 3


def test_max_session_turns_counts_exchanges_of_a_dual_ai_agent(engine: Engine) -> None:
    engine.define(
        prompts=[prompt("asker"), prompt("answerer")],
        agents=[
            {
                "name": "duo",
                "type": "dual_ai",
                "side_a": {"prompt": "asker"},
                "side_b": {"prompt": "answerer"},
                "max_session_turns": 2,
            }
        ],
    )
    thread = engine.thread("duo")
    for text in ("A1", "B1", "A2", "B2", "never"):
        engine.script.text(text)
    engine.send(thread, "Start")

    result = engine.drive(thread)

    assert result.reasons == [StopReason.MAX_SESSION_TURNS]
    assert rows(thread) == [
        ("user", "b", "Start", ""),
        ("assistant", "a", "A1", ""),
        ("user", "b", "B1", ""),
        ("assistant", "a", "A2", ""),
        ("user", "b", "B2", ""),
    ]
    seen = [[(m.role, m.text) for m in request.messages] for request in engine.script.requests]
    assert seen == [
        [("system", "You are asker."), ("user", "Start")],
        [("system", "You are answerer."), ("assistant", "Start"), ("user", "A1")],
        [
            ("system", "You are asker."),
            ("user", "Start"),
            ("assistant", "A1"),
            ("user", "B1"),
        ],
        [
            ("system", "You are answerer."),
            ("assistant", "Start"),
            ("user", "A1"),
            ("assistant", "B1"),
            ("user", "A2"),
        ],
    ]
    assert thread.status == "completed"


def test_repeated_identical_tool_errors_stop_the_flow(engine: Engine) -> None:
    thread = helper(engine, tools=["broken"])
    for _ in range(8):
        engine.script.tool_calls([{"name": "broken"}])
    engine.script.text("never")
    engine.send(thread, "fix it")

    result = engine.drive(thread)

    assert result.reasons == [StopReason.REPEATED_TOOL_ERROR]
    stored = rows(thread)
    assert stored[0] == ("user", "b", "fix it", "")
    step: list[Row] = [
        ("assistant", "a", None, ""),
        ("tool", "a", "Failed to execute tool: it is broken", "error"),
    ]
    assert stored[1:] == step * 8
    assert engine.script.remaining == 1


def test_a_success_between_tool_errors_resets_the_repeated_error_count(engine: Engine) -> None:
    thread = helper(engine, tools=["broken", "echo"])
    engine.script.tool_calls(
        [{"name": "broken"}] * 7 + [{"name": "echo", "arguments": {"text": "ok"}}]
    )
    engine.script.tool_calls([{"name": "broken"}] * 7)
    engine.script.text("Giving up on it.")
    engine.send(thread, "fix it")

    result = engine.drive(thread)

    assert result.reasons == [StopReason.STOP_ON_RESPONSE]
    statuses = [status for role, _, _, status in rows(thread) if role == "tool"]
    assert statuses == ["error"] * 7 + ["success"] + ["error"] * 7


# Errors, state and hooks ---------------------------------------------------------------------


def test_step_error_removes_the_empty_pending_row_and_fails_the_thread(engine: Engine) -> None:
    thread = helper(engine)
    engine.script.error("model overloaded", code="overloaded", status=400, retryable=False)
    engine.send(thread, "hello")

    result = engine.drive(thread)

    assert result.reasons == [StopReason.STEP_ERROR]
    stored = list(Message.objects.filter(thread=thread).order_by("seq"))
    failure = (
        "model 'm' and its fallbacks failed (1 model(s), 1 attempt(s)): "
        "m attempt 1: model overloaded"
    )
    assert [(m.role, m.side, m.content, m.status, m.silent) for m in stored] == [
        ("user", "b", "hello", "completed", False),
        ("system", "", f"The step failed: {failure}", "completed", True),
    ]
    assert stored[1].metadata["error_code"] == "provider_chain_failed"
    (call,) = Log.objects.filter(thread=thread, kind="llm")
    assert call.data["error"] == failure
    assert len(engine.script.requests) == 1
    assert thread.status == "failed"
    (error,) = Event.objects.filter(thread=thread, type="runtime.error")
    assert error.payload["code"] == "overloaded"
    assert error.payload["message"] == failure


def test_a_fallback_that_answers_is_a_runtime_warning(engine: Engine) -> None:
    thread = helper(engine)
    engine.script.error("model overloaded", status=400, retryable=False).text("From the spare.")
    engine.send(thread, "hello")
    primary = engine.script.spec("m", fallbacks=[engine.script.spec("spare")])

    drive_with(engine, thread, Runtime(load_model=lambda name: primary, retry_base_delay_s=0))

    (warning,) = Event.objects.filter(thread=thread, type="runtime.warning")
    assert warning.payload["code"] == "model_fallback"
    assert "'spare' answered" in warning.payload["message"]
    assert rows(thread)[-1][2] == "From the spare."


def test_state_stop_session_in_a_tool_ends_the_session(engine: Engine) -> None:
    thread = helper(engine, tools=["end_session"])
    engine.script.tool_calls([{"name": "end_session"}]).text("never")
    engine.send(thread, "stop")

    result = engine.drive(thread)

    assert result.reasons == [StopReason.STATE_STOP_SESSION]
    assert rows(thread) == [
        ("user", "b", "stop", ""),
        ("assistant", "a", None, ""),
        ("tool", "a", "ending", "success"),
    ]
    assert engine.script.remaining == 1


class Blocked(Exception):
    block = True


def test_prefilter_hook_raising_a_blocking_error_stops_before_the_model_call(
    engine: Engine,
) -> None:
    @hook(HookName.PREFILTER_LLM_HISTORY, id="guard")
    def guard(state: Any, messages: Any, context: Any) -> Any:
        raise Blocked("not allowed")

    engine.define(
        prompts=[prompt("helper", hooks=["guard"])],
        agents=[{"name": "helper", "side_a": {"prompt": "helper"}}],
    )
    thread = engine.thread("helper")
    engine.script.text("never")
    engine.send(thread, "hello")

    result = engine.drive(thread)

    assert result.reasons == [StopReason.HOOK_BLOCKED]
    assert rows(thread) == [("user", "b", "hello", "")]
    assert engine.script.requests == []


# The human side ---------------------------------------------------------------------------------


def test_work_for_the_human_side_parks_awaiting_human(engine: Engine) -> None:
    thread = helper(engine)
    engine.send(thread, "How can I help?", role="assistant")

    result = engine.drive(thread)

    assert result.reasons == [StopReason.AWAITING_HUMAN]
    assert rows(thread) == [("assistant", "a", "How can I help?", "")]
    assert engine.script.requests == []
    assert thread.status == "waiting_input"


def test_continue_for_the_human_side_parks_awaiting_human(engine: Engine) -> None:
    thread = helper(engine)
    continue_queue(thread=thread, side="b")

    result = engine.drive(thread)

    assert result.reasons == [StopReason.AWAITING_HUMAN]
    assert engine.script.requests == []


def test_a_tool_forcing_the_human_side_parks_with_forced_human_turn(engine: Engine) -> None:
    @tool(description="Hands the turn to the human.")
    def hand_over(state: ThreadState) -> str:
        assert state.execution is not None
        state.execution.force_turn("b")
        return "over to you"

    thread = helper(engine, tools=["hand_over"])
    engine.script.tool_calls([{"name": "hand_over"}]).text("never")
    engine.send(thread, "hi")

    result = engine.drive(thread)

    assert result.reasons == [StopReason.FORCED_HUMAN_TURN]
    assert rows(thread) == [
        ("user", "b", "hi", ""),
        ("assistant", "a", None, ""),
        ("tool", "a", "over to you", "success"),
    ]
    assert engine.script.remaining == 1
    assert thread.status == "waiting_input"


def test_force_turn_after_a_completed_turn_decides_who_acts_next(engine: Engine) -> None:
    @tool(description="Ends the turn but keeps the floor.")
    def keep_floor(state: ThreadState) -> str:
        assert state.execution is not None
        state.execution.force_turn("a")
        return "keeping the floor"

    thread = helper(engine, tools=["keep_floor"], stop_tool="keep_floor")
    engine.script.tool_calls([{"name": "keep_floor"}]).text("One more thing.")
    engine.send(thread, "hi")

    result = engine.drive(thread)

    assert result.reasons == [StopReason.STOP_ON_RESPONSE]
    assert rows(thread) == [
        ("user", "b", "hi", ""),
        ("assistant", "a", None, ""),
        ("tool", "a", "keeping the floor", "success"),
        ("assistant", "a", "One more thing.", ""),
    ]


def test_without_stop_rules_every_dual_ai_step_is_a_turn(engine: Engine) -> None:
    engine.define(
        prompts=[prompt("asker", tools=["echo"]), prompt("answerer")],
        agents=[
            {
                "name": "duo",
                "type": "dual_ai",
                "side_a": {"prompt": "asker", "stop_on_response": False},
                "side_b": {"prompt": "answerer", "stop_on_response": False},
                "max_session_turns": 1,
            }
        ],
    )
    thread = engine.thread("duo")
    engine.script.tool_calls([{"name": "echo", "arguments": {"text": "A1"}}])
    engine.script.text("B1").text("never")
    engine.send(thread, "Start")

    result = engine.drive(thread)

    assert result.reasons == [StopReason.MAX_SESSION_TURNS]
    assert rows(thread) == [
        ("user", "b", "Start", ""),
        ("assistant", "a", None, ""),
        ("tool", "a", "echo: A1", "success"),
        ("user", "b", "B1", ""),
    ]
    assert [(m.role, m.text) for m in engine.script.requests[1].messages] == [
        ("system", "You are answerer."),
        ("assistant", "Start"),
    ]


# User stop ------------------------------------------------------------------------------------


def in_background(engine: Engine, thread: Thread) -> tuple[threading.Thread, list[DriveResult]]:
    """``engine.drive(thread)`` on another thread (its own connection, this registry)."""
    results: list[DriveResult] = []
    context = contextvars.copy_context()

    def drive() -> None:
        try:
            results.append(engine.drive(Thread.objects.get(pk=thread.pk)))
        finally:
            connection.close()

    worker = ContextThread(target=context.run, args=(drive,), daemon=True)
    worker.start()
    return worker, results


def wait_for(condition: Callable[[], bool], timeout: float = 5.0) -> None:
    deadline = time.monotonic() + timeout
    while not condition():
        if time.monotonic() > deadline:
            raise AssertionError("timed out waiting for the flow")
        time.sleep(0.02)


def pending(thread: Thread) -> bool:
    return Message.objects.filter(thread=thread, status="pending").exists()


@pytest.mark.django_db(transaction=True)
def test_stop_aborts_a_slow_model_call_at_once(
    transactional_db: None, engine: Engine, wakes: list[str]
) -> None:
    thread = helper(engine)
    engine.script.text("too late", delay_ms=5000)
    engine.send(thread, "hello")
    worker, results = in_background(engine, thread)
    wait_for(lambda: pending(thread))

    stopped_at = time.monotonic()
    thread_stop(thread=thread)
    worker.join(timeout=5)

    assert not worker.is_alive()
    assert time.monotonic() - stopped_at < 2
    assert results[0].reasons == [StopReason.ABORTED_BY_USER]
    stored = list(Message.objects.filter(thread=thread).order_by("seq"))
    assert [(m.role, m.content, m.status) for m in stored] == [
        ("user", "hello", "completed"),
        ("system", "Execution stopped by user", "completed"),
    ]
    assert Log.objects.get(thread=thread, kind="flow").data["stopped_by"] is None  # no side
    assert stored[1].metadata["status_kind"] == "stopped_by_user"
    thread.refresh_from_db()
    assert (thread.status, thread.stop_requested) == ("cancelled", True)
    aborted = Log.objects.get(thread=thread, kind="llm")
    assert (aborted.data["aborted"], aborted.data["total_tokens"]) == (True, None)
    failed = Event.objects.get(thread=thread, type="model.failed")
    assert (failed.payload["aborted"], failed.payload["log_id"]) == (True, str(aborted.id))
    assert Event.objects.filter(thread=thread, type="message.deleted").count() == 1
    turn = Turn.objects.get(thread=thread)
    assert (turn.status, turn.outcome) == ("cancelled", "aborted_by_user")


@pytest.mark.django_db(transaction=True)
def test_stop_while_tool_calls_are_unanswered_writes_stopped_results(
    transactional_db: None, engine: Engine, wakes: list[str]
) -> None:
    started = threading.Event()

    @tool(description="Works until the user stops it.")
    def long_task(state: ThreadState) -> str:
        assert state.execution is not None
        started.set()
        state.execution.abort_signal.wait(5)
        return "interrupted"

    thread = helper(engine, tools=["long_task", "echo"])
    engine.script.tool_calls(
        [
            {"name": "long_task"},
            {"name": "echo", "arguments": {"text": "a"}},
            {"name": "echo", "arguments": {"text": "b"}},
        ]
    ).text("never")
    engine.send(thread, "work")
    worker, results = in_background(engine, thread)
    assert started.wait(5)

    thread_stop(thread=thread)
    worker.join(timeout=5)

    assert results[0].reasons == [StopReason.ABORTED_BY_USER]
    assert rows(thread) == [
        ("user", "b", "work", ""),
        ("assistant", "a", None, ""),
        ("tool", "a", "interrupted", "success"),
        ("tool", "a", "Execution stopped by user", "error"),
        ("tool", "a", "Execution stopped by user", "error"),
        ("system", "", "Execution stopped by user", ""),
    ]
    assert engine.tool_calls == []
    assert engine.script.remaining == 1
    thread.refresh_from_db()
    assert thread.status == "cancelled"


def test_stopping_a_thread_with_nothing_running_or_queued_changes_nothing(
    engine: Engine,
) -> None:
    thread = helper(engine)
    message_inject(thread=thread, role="user", content="hello", side="b")
    events_before = Event.objects.filter(thread=thread).count()

    result = thread_stop(thread=thread)

    thread.refresh_from_db()
    assert (result.stopped_turn, result.parked) == (None, 0)
    assert rows(thread) == [("user", "b", "hello", "")]
    assert (thread.status, thread.stop_requested) == ("completed", False)
    assert Event.objects.filter(thread=thread).count() == events_before


def test_stop_ends_a_turn_whose_worker_died_and_closes_its_calls(engine: Engine) -> None:
    """A turn left running by a dead worker (no lock holder) is ended by the stop itself."""
    thread = helper(engine)
    turn = message_queue(thread=thread, role="user", content="work")
    Turn.objects.filter(pk=turn.pk).update(status="running", fence=1)
    Thread.objects.filter(pk=thread.pk).update(status="running", fence=1)
    message_inject(
        thread=thread, role="assistant", content=None, side="a",
        tool_calls=[{"id": "c1", "type": "function",
                     "function": {"name": "echo", "arguments": "{}"}}],
    )  # fmt: skip

    result = thread_stop(thread=thread)

    thread.refresh_from_db()
    turn.refresh_from_db()
    assert result.stopped_turn is not None
    assert rows(thread) == [
        ("assistant", "a", None, ""),
        ("tool", "a", "Execution stopped by user", "error"),
        ("system", "", "Execution stopped by user", ""),
    ]
    assert (turn.status, turn.outcome) == ("cancelled", "aborted_by_user")
    assert (thread.status, thread.stop_requested) == ("cancelled", True)


def test_new_user_message_lifts_a_stop_and_parked_turns_run_first(engine: Engine) -> None:
    thread = helper(engine)
    message_queue(thread=thread, role="system", content="Be brief.")
    assert thread_stop(thread=thread).parked == 1

    parked = engine.drive(thread)

    assert parked.reasons == []
    assert (thread.status, thread.stop_requested) == ("queued", True)
    assert rows(thread) == []

    engine.script.text("Noted.").text("Hi.")
    engine.send(thread, "hello")
    resumed = engine.drive(thread)

    assert resumed.reasons == [StopReason.STOP_ON_RESPONSE, StopReason.STOP_ON_RESPONSE]
    assert rows(thread) == [
        ("system", "", "Be brief.", ""),
        ("assistant", "a", "Noted.", ""),
        ("user", "b", "hello", ""),
        ("assistant", "a", "Hi.", ""),
    ]
    assert (thread.status, thread.stop_requested) == ("waiting_input", False)


# Terminate -----------------------------------------------------------------------------------


@pytest.mark.django_db(transaction=True)
def test_terminate_aborts_a_slow_call_and_refuses_new_work(
    transactional_db: None, engine: Engine, wakes: list[str]
) -> None:
    thread = helper(engine)
    engine.script.text("too late", delay_ms=5000)
    engine.send(thread, "hello")
    worker, results = in_background(engine, thread)
    wait_for(lambda: pending(thread))

    terminated_at = time.monotonic()
    assert thread_terminate(thread=thread) is True
    worker.join(timeout=5)

    assert time.monotonic() - terminated_at < 2
    assert results[0].reasons == [StopReason.TERMINATED]
    assert rows(thread) == [("user", "b", "hello", "")]
    thread.refresh_from_db()
    assert (thread.status, thread.terminated_at is not None) == ("cancelled", True)
    assert thread.terminated_at is not None
    with pytest.raises(Conflict) as refused:
        message_queue(thread=thread, role="user", content="still there?")
    assert refused.value.code == "terminated"


def test_state_terminate_in_a_tool_ends_the_flow_terminated(engine: Engine) -> None:
    @tool(description="Terminates the thread.")
    def quit_thread(state: ThreadState) -> str:
        state.terminate()
        return "bye"

    thread = helper(engine, tools=["quit_thread", "echo"])
    engine.script.tool_calls(
        [{"name": "quit_thread"}, {"name": "echo", "arguments": {"text": "x"}}]
    ).text("never")
    engine.send(thread, "go")

    result = engine.drive(thread)

    assert result.reasons == [StopReason.TERMINATED]
    assert rows(thread) == [
        ("user", "b", "go", ""),
        ("assistant", "a", None, ""),
        ("tool", "a", "Thread terminated", "error"),
        ("tool", "a", "Thread terminated", "error"),
    ]
    assert engine.tool_calls == []
    assert (thread.status, thread.terminated_at is not None) == ("cancelled", True)


@pytest.mark.django_db(transaction=True)
def test_terminate_while_a_tool_runs_closes_its_calls(
    transactional_db: None, engine: Engine, wakes: list[str]
) -> None:
    started = threading.Event()

    @tool(description="Works until the thread is terminated.")
    def long_task(state: ThreadState) -> str:
        assert state.execution is not None
        started.set()
        state.execution.abort_signal.wait(5)
        return "interrupted"

    thread = helper(engine, tools=["long_task"])
    engine.script.tool_calls([{"name": "long_task"}]).text("never")
    engine.send(thread, "work")
    worker, results = in_background(engine, thread)
    assert started.wait(5)

    thread_terminate(thread=thread)
    worker.join(timeout=5)

    assert results[0].reasons == [StopReason.TERMINATED]
    assert rows(thread) == [
        ("user", "b", "work", ""),
        ("assistant", "a", None, ""),
        ("tool", "a", "Thread terminated", "error"),
    ]
    thread.refresh_from_db()
    assert (thread.status, thread.terminated_at is not None) == ("cancelled", True)


def test_thread_state_terminate_is_idempotent(engine: Engine) -> None:
    thread = helper(engine)
    state = ThreadState(thread)

    state.terminate()
    thread.refresh_from_db()
    first = thread.terminated_at
    state.terminate()
    thread.refresh_from_db()

    assert first is not None
    assert thread.terminated_at == first
    assert (thread.status, thread.terminated_at is not None) == ("cancelled", True)
    assert thread_terminate(thread=thread) is False


def test_a_failed_turn_does_not_strand_the_turns_queued_behind_it(engine: Engine) -> None:
    thread = helper(engine)
    engine.script.error("model overloaded", code="overloaded", status=400, retryable=False)
    engine.script.text("second answered")
    engine.send(thread, "first")
    engine.send(thread, "second")

    result = engine.drive(thread)

    assert result.reasons == [StopReason.STEP_ERROR, StopReason.STOP_ON_RESPONSE]
    outcomes = list(Turn.objects.filter(thread=thread).order_by("position").values_list("status"))
    assert outcomes == [("failed",), ("completed",)]
    assert rows(thread)[-1] == ("assistant", "a", "second answered", "")
    assert thread.status != "failed"

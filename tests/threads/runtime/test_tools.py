"""Tool calls in the step cycle (spec DIGEST §7, §4.3 subprompts, §5.4 handoffs, §12 queue
and invoke, §15 logs): every outcome is a persisted tool result, never a crash."""

from __future__ import annotations

from typing import Any

from agents.providers.base import ProviderRequest, Usage
from agents.registry import ToolResult, tool
from tests.threads.runtime.conftest import (
    Engine,
    drive_with,
    model,
    priced_runtime,
    prompt,
    rows,
)
from threads.models import Log, Message, Thread, Turn
from threads.runtime.stops import StopReason
from threads.services.inbox import continue_queue
from threads.state import ThreadState


def seen(request: ProviderRequest) -> list[tuple[str, str]]:
    """(role, text) of what a model was sent."""
    return [(message.role, message.text) for message in request.messages]


def helper(engine: Engine, tools: list[Any]) -> Thread:
    engine.define(
        prompts=[prompt("helper", tools=tools)],
        agents=[{"name": "helper", "side_a": {"prompt": "helper"}}],
    )
    return engine.thread("helper")


# Failures become results ------------------------------------------------------------------------


def test_unknown_tool_is_persisted_as_a_failed_result(engine: Engine) -> None:
    thread = helper(engine, ["echo"])
    engine.script.tool_calls([{"name": "nope"}]).text("Sorry.")
    engine.send(thread, "go")

    result = engine.drive(thread)

    assert result.reasons == [StopReason.STOP_ON_RESPONSE]
    assert rows(thread)[2] == (
        "tool",
        "a",
        "Failed to execute tool: Tool 'nope' is not available to prompt 'helper' (its tools: echo)",
        "error",
    )
    assert rows(thread)[3] == ("assistant", "a", "Sorry.", "")


def test_invalid_arguments_are_persisted_as_a_validation_failure(engine: Engine) -> None:
    thread = helper(engine, ["echo"])
    engine.script.tool_calls([{"name": "echo", "arguments": {"text": 5}}]).text("Oops.")
    engine.send(thread, "go")

    engine.drive(thread)

    assert rows(thread)[2] == (
        "tool",
        "a",
        "Failed to execute tool: Tool argument validation failed: [text] 5 is not of type 'string'",
        "error",
    )
    assert engine.tool_calls == []


def test_a_tool_raising_is_persisted_as_a_failed_result(engine: Engine) -> None:
    @tool(description="Raises.")
    def explode(state: ThreadState) -> str:
        raise RuntimeError("kaboom")

    thread = helper(engine, ["explode"])
    engine.script.tool_calls([{"name": "explode"}]).text("It exploded.")
    engine.send(thread, "go")

    result = engine.drive(thread)

    assert result.reasons == [StopReason.STOP_ON_RESPONSE]
    assert rows(thread) == [
        ("user", "b", "go", ""),
        ("assistant", "a", None, ""),
        ("tool", "a", "Failed to execute tool: RuntimeError: kaboom", "error"),
        ("assistant", "a", "It exploded.", ""),
    ]
    failed = Message.objects.get(thread=thread, role="tool")
    assert failed.name == "explode"


def test_tool_calls_run_sequentially_in_returned_order(engine: Engine) -> None:
    thread = helper(engine, ["echo", "broken"])
    engine.script.tool_calls(
        [
            {"name": "echo", "arguments": {"text": "first"}},
            {"name": "broken"},
            {"name": "echo", "arguments": {"text": "third"}},
        ]
    ).text("Done.")
    engine.send(thread, "go")

    engine.drive(thread)

    assert engine.tool_calls == [("echo", "first"), ("broken", None), ("echo", "third")]
    issuer = Message.objects.get(thread=thread, role="assistant", content=None)
    results = Message.objects.filter(thread=thread, role="tool").order_by("seq")
    assert [r.tool_call_id for r in results] == [c["id"] for c in issuer.tool_calls or []]
    assert [(r.content, r.tool_status) for r in results] == [
        ("echo: first", "success"),
        ("Failed to execute tool: it is broken", "error"),
        ("echo: third", "success"),
    ]


# Subprompts -----------------------------------------------------------------------------------


def subprompt_agent(engine: Engine, sub_tools: list[str] | None = None) -> Thread:
    engine.define(
        prompts=[
            prompt("helper", tools=[{"name": "summarize", "init_user_message_property": "text"}]),
            prompt(
                "summarize",
                include_chat=False,
                include_past_tools=False,
                tools=sub_tools or [],
                required_schema={
                    "type": "object",
                    "properties": {"text": {"type": "string"}},
                    "required": ["text"],
                },
            ),
        ],
        agents=[{"name": "helper", "side_a": {"prompt": "helper"}}],
    )
    return engine.thread("helper")


def test_subprompt_runs_one_nested_step_under_the_issuing_message(engine: Engine) -> None:
    thread = subprompt_agent(engine)
    engine.script.tool_calls([{"name": "summarize", "arguments": {"text": "A long story."}}])
    engine.script.text("Short.")
    engine.script.text("Summary: Short.")
    engine.send(thread, "summarize this")

    result = engine.drive(thread)

    assert result.reasons == [StopReason.STOP_ON_RESPONSE]
    stored = list(Message.objects.filter(thread=thread).order_by("seq"))
    issuer = stored[1]
    assert [(m.role, m.content, m.depth, m.parent_id, m.tool_status) for m in stored] == [
        ("user", "summarize this", 0, None, ""),
        ("assistant", None, 0, None, ""),
        ("user", "A long story.", 1, issuer.id, ""),
        ("assistant", "Short.", 1, issuer.id, ""),
        ("tool", "Short.", 0, None, "success"),
        ("assistant", "Summary: Short.", 0, None, ""),
    ]
    parent, sub, after = engine.script.requests
    assert seen(sub) == [("system", "You are summarize."), ("user", "A long story.")]
    assert seen(after) == [
        ("system", "You are helper."),
        ("user", "summarize this"),
        ("assistant", ""),
        ("tool", "Short."),
    ]
    assert seen(parent) == [("system", "You are helper."), ("user", "summarize this")]


def test_subprompt_is_an_error_when_one_of_its_tools_failed(engine: Engine) -> None:
    thread = subprompt_agent(engine, sub_tools=["broken"])
    engine.script.tool_calls([{"name": "summarize", "arguments": {"text": "x"}}])
    engine.script.tool_calls([{"name": "broken"}], "Trying.")
    engine.script.text("It failed.")
    engine.send(thread, "go")

    engine.drive(thread)

    stored = list(Message.objects.filter(thread=thread).order_by("seq"))
    issuer = stored[1]
    assert [(m.role, m.content, m.depth, m.tool_status) for m in stored if m.depth == 1] == [
        ("user", "x", 1, ""),
        ("assistant", "Trying.", 1, ""),
        ("tool", "Failed to execute tool: it is broken", 1, "error"),
    ]
    assert all(m.parent_id == issuer.id for m in stored if m.depth == 1)
    assert rows(thread)[2] == (
        "tool",
        "a",
        "Failed to execute tool: Trying.\n\nError: broken: it is broken",
        "error",
    )


def test_subprompt_without_init_property_receives_its_arguments_as_json(engine: Engine) -> None:
    engine.define(
        prompts=[
            prompt("helper", tools=["summarize"]),
            prompt(
                "summarize",
                include_chat=False,
                required_schema={
                    "type": "object",
                    "properties": {"text": {"type": "string"}, "words": {"type": "integer"}},
                },
            ),
        ],
        agents=[{"name": "helper", "side_a": {"prompt": "helper"}}],
    )
    thread = engine.thread("helper")
    arguments = {"text": "A long story.", "words": 3}
    engine.script.tool_calls([{"name": "summarize", "arguments": arguments}])
    engine.script.text("Short story here.").text("Done.")
    engine.send(thread, "go")

    engine.drive(thread)

    assert seen(engine.script.requests[1]) == [
        ("system", "You are summarize."),
        ("user", '{\n  "text": "A long story.",\n  "words": 3\n}'),
    ]
    assert rows(thread)[2] == ("tool", "a", "Short story here.", "success")


# Handoffs -------------------------------------------------------------------------------------


def test_handoff_swaps_the_agent_of_the_same_thread(engine: Engine) -> None:
    engine.define(
        prompts=[
            prompt("helper", tools=[{"name": "expert", "init_user_message_property": "question"}]),
            prompt(
                "expert_prompt",
                required_schema={
                    "type": "object",
                    "properties": {"question": {"type": "string"}},
                    "required": ["question"],
                },
            ),
        ],
        agents=[
            {"name": "helper", "side_a": {"prompt": "helper"}},
            {
                "name": "expert",
                "side_a": {"prompt": "expert_prompt"},
                "expose_as_tool": True,
                "tool_description": "An expert.",
            },
        ],
    )
    thread = engine.thread("helper")
    engine.script.tool_calls([{"name": "expert", "arguments": {"question": "Why is it red?"}}])
    engine.script.text("Because of iron oxide.")
    engine.send(thread, "Why is Mars red?")

    result = engine.drive(thread)

    assert result.reasons == [StopReason.STOP_ON_RESPONSE]
    assert (thread.agent_name, thread.origin_agent_name) == ("expert", "helper")
    assert rows(thread) == [
        ("user", "b", "Why is Mars red?", ""),
        ("assistant", "a", None, ""),
        ("tool", "a", "Handoff complete", "success"),
        ("user", "b", "Why is it red?", ""),
        ("assistant", "a", "Because of iron oxide.", ""),
    ]
    first, second = engine.script.requests
    assert seen(first)[0] == ("system", "You are helper.")
    assert seen(second) == [
        ("system", "You are expert_prompt."),
        ("user", "Why is Mars red?"),
        ("assistant", ""),
        ("tool", "Handoff complete"),
        ("user", "Why is it red?"),
    ]


# Queued and invoked tools -----------------------------------------------------------------------


def test_tool_queued_during_a_step_runs_after_its_calls(engine: Engine) -> None:
    thread = helper(engine, ["chain"])
    engine.script.tool_calls([{"name": "chain"}]).text("Done.")
    engine.send(thread, "go")

    result = engine.drive(thread)

    assert result.reasons == [StopReason.STOP_ON_RESPONSE]
    assert rows(thread) == [
        ("user", "b", "go", ""),
        ("assistant", "a", None, ""),
        ("tool", "a", "chained", "success"),
        ("assistant", "a", None, ""),
        ("tool", "a", "echo: queued", "success"),
        ("assistant", "a", "Done.", ""),
    ]
    synthetic = Message.objects.filter(thread=thread, role="assistant").order_by("seq")[1]
    assert synthetic.metadata["queued_tools"] is True
    assert [c["function"]["name"] for c in synthetic.tool_calls or []] == ["echo"]
    assert engine.tool_calls == [("echo", "queued")]
    assert seen(engine.script.requests[1]) == [
        ("system", "You are helper."),
        ("user", "go"),
        ("assistant", ""),
        ("tool", "chained"),
        ("assistant", ""),
        ("tool", "echo: queued"),
    ]


def test_a_message_a_tool_queues_during_the_turn_joins_it_and_is_drained_before_the_next_step(
    engine: Engine,
) -> None:
    @tool(description="Queues a follow-up message.")
    def follow_up(state: ThreadState) -> str:
        state.queue_message(role="user", content="and one more thing")
        return "queued"

    thread = helper(engine, ["follow_up"])
    engine.script.tool_calls([{"name": "follow_up"}]).text("Both done.")
    engine.send(thread, "go")

    result = engine.drive(thread)

    assert result.reasons == [StopReason.STOP_ON_RESPONSE]
    assert rows(thread) == [
        ("user", "b", "go", ""),
        ("assistant", "a", None, ""),
        ("tool", "a", "queued", "success"),
        ("user", "b", "and one more thing", ""),
        ("assistant", "a", "Both done.", ""),
    ]
    assert seen(engine.script.requests[1])[-1] == ("user", "and one more thing")
    host, joined = Turn.objects.filter(thread=thread).order_by("position")
    assert (joined.host_id, joined.status) == (host.pk, "completed")


def test_queue_tool_at_rest_runs_it_then_side_a_answers(engine: Engine) -> None:
    thread = helper(engine, [])
    ThreadState(thread).queue_tool("echo", {"text": "at rest"})
    work = Turn.objects.get(thread=thread)
    engine.script.text("Noted.")

    result = engine.drive(thread)

    assert result.reasons == [StopReason.STOP_ON_RESPONSE]
    assert rows(thread) == [
        ("assistant", "a", None, ""),
        ("tool", "a", "echo: at rest", "success"),
        ("assistant", "a", "Noted.", ""),
    ]
    call = Message.objects.filter(thread=thread).order_by("seq")[0]
    assert call.tool_calls == [
        {
            "id": f"queued_{work.id}",
            "type": "function",
            "function": {"name": "echo", "arguments": '{"text": "at rest"}'},
        }
    ]
    assert seen(engine.script.requests[0]) == [
        ("system", "You are helper."),
        ("assistant", ""),
        ("tool", "echo: at rest"),
    ]


def test_invoke_tool_at_rest_returns_the_result_and_anchors_it_silently(engine: Engine) -> None:
    thread = helper(engine, [])

    result = ThreadState(thread).invoke_tool("echo", {"text": "now"})

    assert result == ToolResult.success("echo: now")
    anchor = Message.objects.get(thread=thread)
    assert (anchor.role, anchor.content, anchor.silent) == ("system", "Invoked tool echo", True)
    assert anchor.metadata == {
        "status_kind": "runtime_tool_invocation",
        "tool": "echo",
        "arguments": {"text": "now"},
        "status": "success",
    }
    assert not Turn.objects.filter(thread=thread).exists()


def test_invoke_tool_inside_a_flow_writes_no_anchor(engine: Engine) -> None:
    @tool(description="Invokes echo.")
    def relay(state: ThreadState) -> str:
        inner = state.invoke_tool("echo", {"text": "inner"})
        return f"relayed {inner.result}"

    thread = helper(engine, ["relay"])
    engine.script.tool_calls([{"name": "relay"}]).text("Done.")
    engine.send(thread, "go")

    engine.drive(thread)

    assert rows(thread) == [
        ("user", "b", "go", ""),
        ("assistant", "a", None, ""),
        ("tool", "a", "relayed echo: inner", "success"),
        ("assistant", "a", "Done.", ""),
    ]


def test_continue_makes_side_a_take_a_turn_without_a_message(engine: Engine) -> None:
    thread = helper(engine, [])
    engine.script.text("Hello.").text("Anything else?")
    engine.send(thread, "hi")
    engine.drive(thread)

    continue_queue(thread=thread)
    result = engine.drive(thread)

    assert result.reasons == [StopReason.STOP_ON_RESPONSE]
    assert rows(thread) == [
        ("user", "b", "hi", ""),
        ("assistant", "a", "Hello.", ""),
        ("assistant", "a", "Anything else?", ""),
    ]
    assert seen(engine.script.requests[1]) == [
        ("system", "You are helper."),
        ("user", "hi"),
        ("assistant", "Hello."),
    ]


# Logs -------------------------------------------------------------------------------------------


def test_each_model_call_and_tool_call_is_logged(engine: Engine) -> None:
    engine.define(
        models=[{**model(), "input_price": "2", "output_price": "10"}],
        prompts=[prompt("helper", tools=["echo"])],
        agents=[{"name": "helper", "side_a": {"prompt": "helper"}}],
    )
    thread = engine.thread("helper")
    engine.script.tool_calls(
        [{"name": "echo", "arguments": {"text": "hi"}}],
        usage=Usage(prompt_tokens=1000, completion_tokens=500, total_tokens=1500),
    )
    engine.script.text(
        "It said hi.",
        usage=Usage(prompt_tokens=3000, completion_tokens=100, total_tokens=3100),
    )
    engine.send(thread, "say hi")

    result = drive_with(engine, thread, priced_runtime(engine))

    assert result.reasons == [StopReason.STOP_ON_RESPONSE]
    logs = list(Log.objects.filter(thread=thread).order_by("created_at", "id"))
    assert [log.kind for log in logs] == ["llm", "tool", "llm", "flow"]
    call, used, answer = logs[0].data, logs[1].data, logs[2].data
    stored = list(Message.objects.filter(thread=thread).order_by("seq"))
    assert (logs[0].message_id, logs[1].message_id, logs[2].message_id) == (
        stored[1].id,
        stored[2].id,
        stored[3].id,
    )
    expected = {
        "provider": "scripted", "model": "m", "prompt": "helper", "side": "a",
        "input_tokens": 1000, "output_tokens": 500, "total_tokens": 1500,
        "cost_usd": 0.007, "finish_reason": "tool_calls", "error": None, "step": 1,
    }  # fmt: skip
    assert {key: call[key] for key in expected} == expected
    assert (answer["input_tokens"], answer["output_tokens"]) == (3000, 100)
    assert answer["cost_usd"] == 0.007
    assert (answer["finish_reason"], answer["step"]) == ("stop", 2)
    assert answer["latency_ms"] >= answer["time_to_first_token_ms"] >= 0
    assert call["latency_ms"] >= 0
    assert {key: used[key] for key in ("tool", "tool_kind", "arguments", "status", "error")} == {
        "tool": "echo",
        "tool_kind": "function",
        "arguments": {"text": "hi"},
        "status": "success",
        "error": None,
    }
    assert used["tool_call_id"] == stored[2].tool_call_id
    assert used["duration_ms"] >= 0


def test_a_failed_tool_call_is_logged_with_its_error(engine: Engine) -> None:
    thread = helper(engine, ["broken"])
    engine.script.tool_calls([{"name": "broken"}]).text("Sorry.")
    engine.send(thread, "go")

    engine.drive(thread)

    log = Log.objects.get(thread=thread, kind="tool")
    assert (log.data["tool"], log.data["status"], log.data["error"]) == (
        "broken",
        "error",
        "it is broken",
    )

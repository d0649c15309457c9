"""Hooks in the step cycle (spec DIGEST §8): each fires at its point, transforms chain, and a
hook that raises is logged and its input kept.

Hooks register into the engine fixture's scoped registry, before ``engine.define`` (a prompt
may only reference hooks that exist).
"""

from __future__ import annotations

import json
import logging
from typing import Any

import pytest

from agents.providers.base import LLMMessage
from agents.registry import HookName, ToolResult, hook, tool
from tests.threads.runtime.conftest import Engine, prompt, rows
from threads.models import Log, Thread
from threads.runtime.stops import StopReason
from threads.state import ThreadState

PROMPT_SOURCE = {"source": {"kind": "prompt", "promptName": "helper"}}


def helper(engine: Engine, hooks: list[str], tools: list[str] | None = None) -> Thread:
    engine.define(
        prompts=[prompt("helper", tools=tools or [], hooks=hooks)],
        agents=[{"name": "helper", "side_a": {"prompt": "helper"}}],
    )
    return engine.thread("helper")


def system_prompt(engine: Engine, index: int = 0) -> str:
    first = engine.script.requests[index].messages[0]
    assert first.role == "system"
    return first.text


# Lifecycle ------------------------------------------------------------------------------------


def test_after_thread_created_runs_once_when_a_thread_is_opened_through_the_api(
    engine: Engine, client_for: Any
) -> None:
    opened: list[tuple[str, Any]] = []

    @hook(HookName.AFTER_THREAD_CREATED, id="audit")
    def audit(state: ThreadState, context: Any) -> None:
        opened.append((state.thread_id, context))

    engine.define(
        prompts=[prompt("helper", hooks=["audit"])],
        agents=[{"name": "helper", "side_a": {"prompt": "helper"}}],
    )
    created = client_for(engine.tenant).post("/api/v1/threads", {"agent": "helper"}, format="json")

    assert created.status_code == 201
    assert opened == [(created.json()["id"], PROMPT_SOURCE)]


def test_a_thread_opened_through_the_api_counts_what_its_creation_hooks_wrote(
    engine: Engine, client_for: Any
) -> None:
    @hook(HookName.AFTER_THREAD_CREATED, id="greet")
    def greet(state: ThreadState, context: Any) -> None:
        state.inject_message(role="assistant", content="Welcome.")

    engine.define(
        prompts=[prompt("greeter", hooks=["greet"]), prompt("plain")],
        agents=[{"name": "greeter", "side_a": {"prompt": "greeter"}},
                {"name": "plain", "side_a": {"prompt": "plain"}}],
    )  # fmt: skip
    client = client_for(engine.tenant)
    greeted = client.post("/api/v1/threads", {"agent": "greeter"}, format="json")
    plain = client.post("/api/v1/threads", {"agent": "plain"}, format="json")

    assert greeted.status_code == plain.status_code == 201
    assert greeted.json()["counts"]["messages"] == 1
    assert plain.json()["counts"] == {"messages": 0, "logs": 0, "files": 0, "children": 0}


# Context assembly -------------------------------------------------------------------------------


def test_after_system_message_changes_the_system_text(engine: Engine) -> None:
    contexts: list[Any] = []

    @hook(HookName.AFTER_SYSTEM_MESSAGE, id="brief")
    def brief(state: ThreadState, text: str, context: Any) -> str:
        contexts.append(context)
        return text + " Be brief."

    thread = helper(engine, ["brief"])
    engine.script.text("Hi.")
    engine.send(thread, "hello")

    engine.drive(thread)

    assert system_prompt(engine) == "You are helper. Be brief."
    assert contexts == [PROMPT_SOURCE]


def test_filter_messages_edits_the_history_a_model_sees_not_the_stored_one(
    engine: Engine,
) -> None:
    @hook(HookName.FILTER_MESSAGES, id="no_secrets")
    def no_secrets(state: ThreadState, messages: list[dict[str, Any]], context: Any) -> Any:
        return [m for m in messages if "secret" not in (m["content"] or "")]

    thread = helper(engine, ["no_secrets"])
    engine.script.text("Hi.").text("Sure.")
    engine.send(thread, "my secret is 42")
    engine.drive(thread)
    engine.send(thread, "what now?")

    engine.drive(thread)

    assert [(m.role, m.text) for m in engine.script.requests[1].messages] == [
        ("system", "You are helper."),
        ("assistant", "Hi."),
        ("user", "what now?"),
    ]
    assert rows(thread)[0] == ("user", "b", "my secret is 42", "")


def test_prefilter_llm_history_changes_what_the_provider_receives(engine: Engine) -> None:
    @hook(HookName.PREFILTER_LLM_HISTORY, id="remind")
    def remind(state: ThreadState, messages: list[LLMMessage], context: Any) -> Any:
        return [*messages, LLMMessage.system("Answer in French.")]

    thread = helper(engine, ["remind"])
    engine.script.text("Bonjour.")
    engine.send(thread, "hello")

    engine.drive(thread)

    assert [(m.role, m.text) for m in engine.script.requests[0].messages] == [
        ("system", "You are helper."),
        ("user", "hello"),
        ("system", "Answer in French."),
    ]
    assert rows(thread) == [("user", "b", "hello", ""), ("assistant", "a", "Bonjour.", "")]


# Message creation -------------------------------------------------------------------------------


def test_before_and_after_create_message_see_every_insert(engine: Engine) -> None:
    created: list[tuple[str, str | None]] = []
    proposed: list[tuple[str, str | None, list[str]]] = []

    @hook(HookName.BEFORE_CREATE_MESSAGE, id="tag")
    def tag(state: ThreadState, message: dict[str, Any], context: Any) -> dict[str, Any]:
        content = message.get("content")
        calls = message.get("tool_calls")
        names = [c["function"]["name"] for c in json.loads(calls)] if calls else []
        proposed.append((message["role"], content, names))
        if message["role"] in ("user", "assistant") and isinstance(content, str):
            return {**message, "content": f"[{message['role']}] {content}"}
        return message

    @hook(HookName.AFTER_CREATE_MESSAGE, id="record")
    def record(state: ThreadState, message: dict[str, Any], context: Any) -> None:
        created.append((message["role"], message["content"]))

    thread = helper(engine, ["tag", "record"], tools=["echo"])
    engine.script.tool_calls([{"name": "echo", "arguments": {"text": "x"}}]).text("Done.")
    engine.send(thread, "hello")

    engine.drive(thread)

    assert rows(thread) == [
        ("user", "b", "[user] hello", ""),
        ("assistant", "a", None, ""),
        ("tool", "a", "echo: x", "success"),
        ("assistant", "a", "[assistant] Done.", ""),
    ]
    assert proposed == [
        ("user", "hello", []),
        ("assistant", None, ["echo"]),
        ("tool", "echo: x", []),
        ("assistant", "Done.", []),
    ]
    assert created == [
        ("user", "[user] hello"),
        ("assistant", None),
        ("tool", "echo: x"),
        ("assistant", "[assistant] Done."),
    ]


# Tool calls -----------------------------------------------------------------------------------


def test_before_store_tool_result_changes_the_stored_result(engine: Engine) -> None:
    @hook(HookName.BEFORE_STORE_TOOL_RESULT, id="shout")
    def shout(state: ThreadState, call: dict[str, Any], result: ToolResult, context: Any) -> Any:
        assert call["name"] == "echo"
        return ToolResult.success((result.result or "").upper())

    thread = helper(engine, ["shout"], tools=["echo"])
    engine.script.tool_calls([{"name": "echo", "arguments": {"text": "hi"}}]).text("Done.")
    engine.send(thread, "go")

    engine.drive(thread)

    assert rows(thread)[2] == ("tool", "a", "ECHO: HI", "success")


def test_after_tool_call_success_returning_none_stores_nothing_and_ends_the_chain(
    engine: Engine,
) -> None:
    later: list[str] = []

    @hook(HookName.AFTER_TOOL_CALL_SUCCESS, id="swallow")
    def swallow(state: ThreadState, call: dict[str, Any], result: ToolResult, context: Any) -> None:
        return None

    @hook(HookName.AFTER_TOOL_CALL_SUCCESS, id="never_reached")
    def never_reached(state: ThreadState, call: Any, result: ToolResult, context: Any) -> Any:
        later.append(call["name"])
        return result

    thread = helper(engine, ["swallow", "never_reached"], tools=["echo"])
    engine.script.tool_calls([{"name": "echo", "arguments": {"text": "hi"}}]).text("Done.")
    engine.send(thread, "go")

    result = engine.drive(thread)

    assert result.reasons == [StopReason.STOP_ON_RESPONSE]
    assert engine.tool_calls == [("echo", "hi")]
    assert rows(thread) == [
        ("user", "b", "go", ""),
        ("assistant", "a", None, ""),
        ("assistant", "a", "Done.", ""),
    ]
    assert later == []
    assert Log.objects.get(thread=thread, kind="tool").message_id is None


def test_after_tool_call_failure_can_turn_a_failure_into_a_result(engine: Engine) -> None:
    seen: list[tuple[str, str | None]] = []

    @hook(HookName.AFTER_TOOL_CALL_FAILURE, id="recover")
    def recover(state: ThreadState, call: dict[str, Any], result: ToolResult, context: Any) -> Any:
        seen.append((call["name"], result.error))
        return ToolResult.success("recovered")

    @hook(HookName.AFTER_TOOL_CALL_SUCCESS, id="not_for_failures")
    def not_for_failures(state: ThreadState, call: Any, result: ToolResult, context: Any) -> Any:
        seen.append(("success hook", call["name"]))
        return result

    thread = helper(engine, ["recover", "not_for_failures"], tools=["broken"])
    engine.script.tool_calls([{"name": "broken"}]).text("Done.")
    engine.send(thread, "go")

    engine.drive(thread)

    assert seen == [("broken", "it is broken")]
    assert rows(thread)[2] == ("tool", "a", "recovered", "success")


def test_tool_call_started_and_done_bracket_the_call(engine: Engine) -> None:
    events: list[tuple[str, ...]] = []

    @tool(description="Does work.")
    def work(state: ThreadState) -> str:
        events.append(("run",))
        return "worked"

    @hook(HookName.TOOL_CALL_STARTED, id="started")
    def started(state: ThreadState, call: dict[str, Any], progress: Any, context: Any) -> None:
        events.append(("started", call["name"], call["id"], repr(progress)))

    @hook(HookName.TOOL_CALL_DONE, id="done")
    def done(state: ThreadState, call: dict[str, Any], result: ToolResult, context: Any) -> None:
        events.append(("done", call["name"], call["id"], result.status))

    thread = helper(engine, ["started", "done"], tools=["work", "broken"])
    engine.script.tool_calls([{"name": "work"}, {"name": "broken"}]).text("Done.")
    engine.send(thread, "go")

    engine.drive(thread)

    assert events == [
        ("started", "work", "call_1", "None"),
        ("run",),
        ("done", "work", "call_1", "success"),
        ("started", "broken", "call_2", "None"),
        ("done", "broken", "call_2", "error"),
    ]


# Resolution and errors ---------------------------------------------------------------------------


def test_agent_hooks_apply_when_the_prompt_has_none(engine: Engine) -> None:
    contexts: list[Any] = []

    @hook(HookName.AFTER_SYSTEM_MESSAGE, id="agent_note")
    def agent_note(state: ThreadState, text: str, context: Any) -> str:
        contexts.append(context)
        return text + " (agent)"

    engine.define(
        prompts=[prompt("helper")],
        agents=[{"name": "helper", "side_a": {"prompt": "helper"}, "hooks": ["agent_note"]}],
    )
    thread = engine.thread("helper")
    engine.script.text("Hi.")
    engine.send(thread, "hello")

    engine.drive(thread)

    assert system_prompt(engine) == "You are helper. (agent)"
    assert contexts == [{"source": {"kind": "agent", "agentName": "helper"}}]


def test_prompt_hooks_replace_the_agent_hooks(engine: Engine) -> None:
    @hook(HookName.AFTER_SYSTEM_MESSAGE, id="agent_note")
    def agent_note(state: ThreadState, text: str, context: Any) -> str:
        return text + " (agent)"

    @hook(HookName.AFTER_SYSTEM_MESSAGE, id="prompt_note")
    def prompt_note(state: ThreadState, text: str, context: Any) -> str:
        return text + " (prompt)"

    engine.define(
        prompts=[prompt("helper", hooks=["prompt_note"])],
        agents=[{"name": "helper", "side_a": {"prompt": "helper"}, "hooks": ["agent_note"]}],
    )
    thread = engine.thread("helper")
    engine.script.text("Hi.")
    engine.send(thread, "hello")

    engine.drive(thread)

    assert system_prompt(engine) == "You are helper. (prompt)"


def test_a_hook_that_raises_is_logged_and_its_input_kept(
    engine: Engine, caplog: pytest.LogCaptureFixture
) -> None:
    @hook(HookName.AFTER_SYSTEM_MESSAGE, id="boom")
    def boom(state: ThreadState, text: str, context: Any) -> str:
        raise RuntimeError("hook bug")

    @hook(HookName.AFTER_SYSTEM_MESSAGE, id="then_note")
    def then_note(state: ThreadState, text: str, context: Any) -> str:
        return text + " (noted)"

    @hook(HookName.BEFORE_STORE_TOOL_RESULT, id="store_boom")
    def store_boom(state: ThreadState, call: Any, result: ToolResult, context: Any) -> Any:
        raise ValueError("store bug")

    thread = helper(engine, ["boom", "then_note", "store_boom"], tools=["echo"])
    engine.script.tool_calls([{"name": "echo", "arguments": {"text": "hi"}}]).text("Done.")
    engine.send(thread, "go")

    with caplog.at_level(logging.ERROR, logger="threads.runtime.hooks"):
        result = engine.drive(thread)

    assert result.reasons == [StopReason.STOP_ON_RESPONSE]
    assert system_prompt(engine) == "You are helper. (noted)"
    assert rows(thread)[2] == ("tool", "a", "echo: hi", "success")
    failures = [
        (record.getMessage(), record.exc_info[1])
        for record in caplog.records
        if record.exc_info is not None
    ]
    messages = [message for message, _ in failures]
    assert "hook boom (after_system_message) failed; its input is kept" in messages
    assert "hook store_boom (before_store_tool_result) failed; its input is kept" in messages
    assert all(isinstance(error, RuntimeError | ValueError) for _, error in failures)

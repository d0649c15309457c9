"""Code tools in the step cycle (ARCHITECTURE §5 tool classes): a tenant's JS/TS tool runs in
the sandbox with the call's arguments; every outcome is a persisted tool result."""

from __future__ import annotations

from typing import Any

from pytest_django.fixtures import Settings

from agents.bundles import bundle_import
from agents.registry import tool
from tenancy.models import Tenant
from tests.threads.runtime.conftest import Engine, prompt, rows
from threads.models import Log, Thread
from threads.runtime.stops import StopReason

WORDS = "export default ({ text }: { text: string }): number => text.split(/\\s+/).length"


def _code_tool(tenant: Tenant, name: str, source: str, language: str = "typescript") -> None:
    bundle_import(
        tenant=tenant,
        document={"version": 1, "code_tools": [{
            "name": name, "description": f"The {name} tool", "language": language,
            "args_schema": {"type": "object", "properties": {"text": {"type": "string"}}},
            "source": source,
        }]},
    )  # fmt: skip


def _helper(engine: Engine, tool: str) -> Thread:
    engine.define(
        prompts=[prompt("helper", tools=[tool])],
        agents=[{"name": "helper", "side_a": {"prompt": "helper"}}],
    )
    return engine.thread("helper")


def test_code_tool_runs_its_default_export_with_the_arguments(engine: Engine) -> None:
    _code_tool(engine.tenant, "count_words", WORDS)
    thread = _helper(engine, "count_words")
    engine.script.tool_calls([{"name": "count_words", "arguments": {"text": "one two three"}}])
    engine.script.text("Three words.")
    engine.send(thread, "count them")

    result = engine.drive(thread)

    assert result.reasons == [StopReason.STOP_ON_RESPONSE]
    assert rows(thread)[2] == ("tool", "a", "3", "success")
    tool_log = Log.objects.get(thread=thread, kind="tool")
    assert (tool_log.data["tool"], tool_log.data["tool_kind"]) == ("count_words", "code")


def test_code_tool_that_throws_fails_the_call_with_the_error_and_its_position(
    engine: Engine,
) -> None:
    source = "export default () => {\n  throw new TypeError('no words here');\n};"
    _code_tool(engine.tenant, "broken_words", source)
    thread = _helper(engine, "broken_words")
    engine.script.tool_calls([{"name": "broken_words", "arguments": {"text": "x"}}]).text("Oh.")
    engine.send(thread, "go")

    engine.drive(thread)

    role, side, content, status = rows(thread)[2]
    assert (role, side, status) == ("tool", "a", "error")
    assert content == ("Failed to execute tool: TypeError: no words here (broken_words.ts:2:13)")


def test_code_tool_past_its_budget_is_terminated_and_fails_naming_the_budget(
    engine: Engine, settings: Settings
) -> None:
    settings.CODE_TOOL_TIMEOUT_S = 1
    _code_tool(engine.tenant, "spin", "export default () => { while (true) {} }", "javascript")
    thread = _helper(engine, "spin")
    engine.script.tool_calls([{"name": "spin", "arguments": {}}]).text("Gave up.")
    engine.send(thread, "go")

    engine.drive(thread)

    assert rows(thread)[2] == (
        "tool", "a",
        "Failed to execute tool: terminated: TerminatedError: the code ran past its budget "
        "of 1 s",
        "error",
    )  # fmt: skip


def test_the_entrys_env_and_options_reach_a_code_tool_and_a_function_tool(
    engine: Engine,
) -> None:
    """A ``tools[]`` entry's ``env`` and ``options`` drive the tool (DIGEST §4.2): a code
    tool's default export gets them as its second argument, a function tool reads
    ``state.tool_options`` and ``state.env``."""
    source = "export default (_args: object, ctx: any) => `${ctx.env.MODE}/${ctx.options.size}`"
    _code_tool(engine.tenant, "configured", source)
    seen: list[object] = []

    @tool(description="Reports its options.")
    def reporter(state: Any) -> str:
        seen.append((state.tool_options, state.env("MODE")))
        return "reported"

    thread = _helper_with(engine, [
        {"name": "configured", "env": {"MODE": "strict"}, "options": {"size": 3}},
        {"name": "reporter", "env": {"MODE": "loose"}, "options": {"depth": 2}},
    ])  # fmt: skip
    engine.script.tool_calls([{"name": "configured", "arguments": {"text": "x"}},
                              {"name": "reporter", "arguments": {}}]).text("ok")  # fmt: skip
    engine.send(thread, "go")
    engine.drive(thread)

    assert rows(thread)[2] == ("tool", "a", "strict/3", "success")
    assert seen == [({"depth": 2}, "loose")]


def _helper_with(engine: Engine, tools: list[Any]) -> Thread:
    engine.define(
        prompts=[prompt("helper", tools=tools)],
        agents=[{"name": "helper", "side_a": {"prompt": "helper"}}],
    )
    return engine.thread("helper")

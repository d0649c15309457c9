"""The platform level of the env (``AGENT_PLATFORM_ENV``) is the operator's registry code's
alone: a Python tool's ``state.env`` reads it, while everything a tenant writes resolves
without it: code tools, run-code programs, prompt text, ``optional`` tool flags."""

from __future__ import annotations

import json
from typing import Any

import pytest
from pytest_django.fixtures import Settings
from rest_framework.test import APIClient

from agents.bundles import bundle_import
from agents.registry import tool
from tests.threads.runtime.conftest import Engine, prompt, rows
from threads.models import Thread

PLATFORM_VALUE = "operator-only-value-7731"


@pytest.fixture(autouse=True)
def platform_env(settings: Settings) -> None:
    settings.AGENT_PLATFORM_ENV_SECRETS = {"COMPANY": PLATFORM_VALUE, "FEATURE_ON": "true"}


def _agent(engine: Engine, **fields: Any) -> Thread:
    engine.define(
        prompts=[prompt("helper", **fields)],
        agents=[{"name": "helper", "side_a": {"prompt": "helper"}}],
    )
    return engine.thread("helper")


def test_registry_code_reads_the_platform_level_and_a_code_tool_does_not(engine: Engine) -> None:
    @tool(description="What the operator passed.")
    def company(state: Any) -> str:
        return str(state.env("COMPANY"))

    bundle_import(
        tenant=engine.tenant,
        document={"version": 1, "code_tools": [{
            "name": "peek", "description": "Shows what it was given.", "language": "javascript",
            "source": "export default (args, context) => JSON.stringify(context)",
        }]},
    )  # fmt: skip
    thread = _agent(engine, tools=["company", "peek"])
    engine.script.tool_calls([{"name": "company"}, {"name": "peek"}]).text("done")
    engine.send(thread, "go")

    engine.drive(thread)

    results = [content for role, _, content, _ in rows(thread) if role == "tool"]
    assert results[0] == PLATFORM_VALUE
    assert json.loads(results[1] or "") == {"env": {}, "options": {}}


def test_prompt_text_and_optional_flags_resolve_without_the_platform_level(
    engine: Engine,
) -> None:
    """``{type: env}`` parts render nothing for a platform name, and an ``optional`` entry
    gated on a platform flag stays off: a tenant cannot probe the operator's values."""

    @tool(description="Only when FEATURE_ON.")
    def gated(state: Any) -> str:
        return "on"

    thread = _agent(
        engine,
        prompt=[
            {"type": "text", "content": "Company: "},
            {"type": "env", "property": "COMPANY"},
        ],
        tools=[{"name": "gated", "optional": "FEATURE_ON"}],
    )
    engine.script.text("hi")
    engine.send(thread, "hello")

    engine.drive(thread)

    (request,) = engine.script.requests
    system = request.messages[0].text
    assert system == "Company: "
    assert PLATFORM_VALUE not in json.dumps([m.text for m in request.messages])
    assert [spec.name for spec in request.tools] == []


def test_a_run_code_program_has_no_ambient_env(thread: Thread, member: APIClient) -> None:
    """runCode sees only the imports its caller passes (DIGEST §17): there is no ``env``
    module to ask for a platform value."""
    answer = member.post(
        f"/api/v1/threads/{thread.pk}/run-code",
        {"source": 'import { env } from "env";\nexport default () => env.COMPANY'},
        format="json",
    )

    assert answer.status_code == 200, answer.json()
    assert answer.json()["status"] == "link_error"
    assert PLATFORM_VALUE not in answer.content.decode()

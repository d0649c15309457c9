"""``tool.progress``: a registry tool's ``progress_argument`` is reported as its call starts,
and a running tool reports its own progress through ``state.report_progress``; both are
events of that call (``tool_call_id`` in the envelope), in order, before its result."""

from __future__ import annotations

from typing import Any

import pytest
from pydantic import BaseModel, Field

from agents.registry import tool
from common.errors import DomainError
from tests.threads.runtime.conftest import Engine, prompt
from threads.models import Event
from threads.state import ThreadState


class SearchArgs(BaseModel):
    status: str = Field(description="What the search is doing, for the user")
    query: str


def test_the_progress_argument_and_reported_progress_are_tool_progress_events(
    engine: Engine,
) -> None:
    @tool(description="Searches.", args=SearchArgs, progress_argument="status")
    def search(state: ThreadState, args: SearchArgs) -> str:
        state.report_progress({"done": 1, "of": 2})
        state.report_progress("almost there")
        return f"found {args.query}"

    engine.define(
        prompts=[prompt("helper", tools=["search"])],
        agents=[{"name": "helper", "side_a": {"prompt": "helper"}}],
    )
    thread = engine.thread("helper")
    engine.script.tool_calls(
        [{"name": "search", "arguments": {"status": "Searching the catalogue", "query": "tea"}}]
    ).text("Found it.")
    engine.send(thread, "find tea")
    engine.drive(thread)

    events = list(Event.objects.filter(thread=thread).order_by("sequence"))
    call = [e for e in events if e.type.startswith("tool.") and e.type != "tool.catalog.resolved"]
    assert [(e.type, e.payload.get("progress")) for e in call] == [
        ("tool.started", None),
        ("tool.progress", "Searching the catalogue"),
        ("tool.progress", {"done": 1, "of": 2}),
        ("tool.progress", "almost there"),
        ("tool.result", None),
    ]
    assert len({e.tool_call_id for e in call}) == 1


def test_report_progress_outside_a_tool_call_is_refused(engine: Engine) -> None:
    engine.define(
        prompts=[prompt("helper")], agents=[{"name": "helper", "side_a": {"prompt": "helper"}}]
    )
    state = ThreadState(engine.thread("helper"))
    with pytest.raises(DomainError, match="running tool call"):
        state.report_progress("nothing runs")


def test_progress_that_is_not_small_json_fails_the_tool_not_the_turn(engine: Engine) -> None:
    @tool(description="Reports too much.")
    def chatty(state: ThreadState) -> Any:
        state.report_progress("x" * 10_000)
        return "never"

    engine.define(
        prompts=[prompt("helper", tools=["chatty"])],
        agents=[{"name": "helper", "side_a": {"prompt": "helper"}}],
    )
    thread = engine.thread("helper")
    engine.script.tool_calls([{"name": "chatty", "arguments": {}}]).text("Oh well.")
    engine.send(thread, "go")
    engine.drive(thread)

    failed = Event.objects.get(thread=thread, type="tool.failed")
    assert "the limit is 4096" in failed.payload["error"]
    assert not Event.objects.filter(thread=thread, type="tool.progress").exists()

"""Spawning subagents in process: immediate and optional relationships, scoped env, the
variable-bootstrap request, the depth cap (spec runtime §7.3-§7.5, DIGEST §6.5, §11)."""

from __future__ import annotations

from typing import Any

import pytest

from common.errors import Conflict
from tests.threads.runtime.conftest import Engine, prompt
from threads.models import Message, SubagentLink, Thread, Turn, VariableRequest
from threads.runtime.bootstrap import variable_request_complete
from threads.runtime.lifecycle import thread_open
from threads.services.env import EnvInput, thread_env_names
from threads.state import ThreadState

TOKEN = {"name": "REPO_TOKEN", "type": "secret", "required": True, "scoped": True}


def define(engine: Engine, entry: Any, *, worker: dict[str, Any] | None = None) -> None:
    engine.define(
        prompts=[
            prompt("boss", tools=[entry]),
            worker or prompt("worker"),
            prompt("checker"),
        ],
        agents=[
            {"name": "boss", "side_a": {"prompt": "boss"}},
            {"name": "pair", "type": "dual_ai", "side_a": {"prompt": "worker"},
             "side_b": {"prompt": "checker"}, "max_session_turns": 1, "expose_as_tool": True,
             "tool_description": "A worker and a checker"},
        ],
    )  # fmt: skip


def children(parent: Thread) -> list[Thread]:
    return list(Thread.objects.filter(parent=parent).order_by("created_at"))


def env_of(thread: Thread) -> dict[str, str]:
    state = ThreadState(thread)
    return {entry.name: state.env(entry.name) for entry in thread_env_names(thread=thread)}


def model_texts(engine: Engine) -> str:
    return "\n".join(
        message.text for request in engine.script.requests for message in request.messages
    ) + "\n".join(str(tool.parameters) for r in engine.script.requests for tool in r.tools)


# Immediate (RT-7.3, DG-6.5) ------------------------------------------------------------------


def test_an_immediate_subagent_starts_when_the_thread_is_created(engine: Engine) -> None:
    define(engine, {"name": "pair", "immediate": True, "blocking": False})
    parent = engine.thread("boss")

    spawn = Turn.objects.get(thread=parent)
    assert (spawn.kind, spawn.source) == ("spawn", "immediate")
    engine.drive(parent)

    [child] = children(parent)
    first = Turn.objects.get(thread=child)
    assert first.payload["content"] == (
        "You were started automatically when this thread was created. Begin your task."
    )
    call, result = Message.objects.filter(thread=parent).order_by("seq")
    assert (call.tool_calls or [{}])[0]["function"]["name"] == "pair"
    assert call.metadata["immediate"] is True
    assert result.content == f"The subagent was initiated successfully. Reference: {child.pk}"
    assert engine.script.requests == []  # no model step: the turn only spawned
    assert Turn.objects.get(thread=parent).status == "completed"


def test_the_object_form_fans_out_by_indexed_env_keys_and_keeps_scoped_values_from_models(
    engine: Engine,
) -> None:
    """DG-6.5: KEY, KEY__2 ... one instance each (bounded by maxInstances), consumed keys
    removed from the parent env; scoped values reach only the child's env, never a model."""
    entry = {"name": "pair", "blocking": False,
             "resumable": {"receives_messages": "side_a", "max_instances": 2},
             "immediate": {"name_env": "REPO_NAME", "scoped_env": ["REPO_TOKEN"]}}  # fmt: skip
    define(engine, entry, worker=prompt("worker", variables=[TOKEN]))
    values = {"REPO_NAME": "alpha", "REPO_TOKEN": "secret-one", "REPO_NAME__2": "beta",
              "REPO_TOKEN__2": "secret-two", "REPO_NAME__3": "gamma", "KEEP": "shared"}  # fmt: skip
    parent = thread_open(
        tenant=engine.tenant, agent_name="boss",
        env={name: EnvInput(value) for name, value in values.items()},
    )  # fmt: skip
    engine.drive(parent)

    first, second = children(parent)  # max_instances 2: gamma is not spawned
    assert (first.tags, second.tags) == (["name:alpha"], ["name:beta"])
    assert env_of(first) == {"REPO_TOKEN": "secret-one", "KEEP": "shared"}
    assert env_of(second) == {"REPO_TOKEN": "secret-two", "KEEP": "shared"}
    assert env_of(parent) == {"REPO_NAME__3": "gamma", "KEEP": "shared"}
    calls = [
        (m.tool_calls or [])[0] for m in Message.objects.filter(thread=parent, role="assistant")
    ]
    assert [call["function"]["name"] for call in calls] == ["subagent_create"] * 2
    engine.script.text("hello").text("fine").text("hello").text("fine")
    engine.drive(first)
    engine.drive(second)
    engine.script.text("noted").text("noted").text("noted")  # two results, one question
    engine.send(parent, "status?")
    engine.drive(parent)
    assert len(engine.script.requests) == 7
    seen = model_texts(engine)
    assert "secret-one" not in seen
    assert "secret-two" not in seen


def test_immediate_spawning_is_recursive_across_children(engine: Engine) -> None:
    """RT-7.3: immediate execution is recursive across activated child prompts."""
    engine.define(
        prompts=[
            prompt("boss", tools=[{"name": "pair", "immediate": True, "blocking": False}]),
            prompt("worker", tools=[{"name": "leaf", "immediate": True, "blocking": False}]),
            prompt("checker"), prompt("leaf_worker"), prompt("leaf_checker"),
        ],
        agents=[
            {"name": "boss", "side_a": {"prompt": "boss"}},
            {"name": "pair", "type": "dual_ai", "side_a": {"prompt": "worker"},
             "side_b": {"prompt": "checker"}, "max_session_turns": 1, "expose_as_tool": True,
             "tool_description": "pair"},
            {"name": "leaf", "type": "dual_ai", "side_a": {"prompt": "leaf_worker"},
             "side_b": {"prompt": "leaf_checker"}, "max_session_turns": 1,
             "expose_as_tool": True, "tool_description": "leaf"},
        ],
    )  # fmt: skip
    parent = engine.thread("boss")
    engine.drive(parent)
    [child] = children(parent)
    kinds = list(Turn.objects.filter(thread=child).order_by("position").values_list("kind"))
    assert kinds == [("spawn",), ("message",)]
    engine.script.text("a").text("b")
    engine.drive(child)

    [grandchild] = children(child)
    assert grandchild.agent_name == "leaf"
    assert grandchild.root_id == parent.pk


# Optional (RT-7.3) ---------------------------------------------------------------------------


@pytest.mark.parametrize(("flag", "offered"), [("yes", True), ("TRUE", True), ("no", False)])
def test_an_optional_subagent_is_offered_only_when_its_flag_is_set(
    engine: Engine, flag: str, offered: bool
) -> None:
    define(engine, {"name": "pair", "optional": "USE_PAIR"})
    parent = thread_open(tenant=engine.tenant, agent_name="boss",
                         env={"USE_PAIR": EnvInput(flag, "text")})  # fmt: skip
    engine.script.text("hi")
    engine.send(parent, "hello")
    engine.drive(parent)

    names = [tool.name for tool in engine.script.requests[0].tools]
    assert ("pair" in names) is offered


# Scoped env and the variable-bootstrap request (RT-7.5, DG-11) ------------------------------


def test_a_child_inherits_the_parent_env_minus_its_scoped_names(engine: Engine) -> None:
    scoped = {"name": "PRIVATE", "type": "secret", "required": False, "scoped": True}
    define(engine, "pair", worker=prompt("worker", variables=[scoped]))
    parent = thread_open(
        tenant=engine.tenant, agent_name="boss",
        env={"PRIVATE": EnvInput("parent-only"), "SHARED": EnvInput("both", "text")},
    )  # fmt: skip
    engine.script.tool_calls([{"name": "pair", "arguments": {"message": "go"}}])
    engine.script.text("a").text("b").text("done")
    engine.send(parent, "start")
    engine.drive(parent)

    [child] = children(parent)
    assert env_of(child) == {"SHARED": "both"}
    assert ThreadState(child).env_type("SHARED") == "text"


def test_a_missing_required_scoped_variable_defers_the_spawn_into_a_request(
    engine: Engine,
) -> None:
    define(engine, "pair", worker=prompt("worker", variables=[TOKEN]))
    parent = engine.thread("boss")
    engine.script.tool_calls([{"name": "pair", "arguments": {"message": "clone it"}}])
    engine.script.text("I asked for the token.")
    engine.send(parent, "start")
    engine.drive(parent)

    assert children(parent) == []
    request = VariableRequest.objects.get(thread=parent)
    result = Message.objects.get(thread=parent, role="tool")
    assert result.tool_status == "error"
    assert result.metadata["error_code"] == "subagent_env_required"
    assert result.metadata["error_data"] == {
        "request_id": str(request.pk),
        "endpoint": f"/api/v1/threads/{parent.pk}/variables/{request.pk}",
        "required": ["REPO_TOKEN"], "missing": ["REPO_TOKEN"], "agent": "pair",
    }  # fmt: skip

    answer = variable_request_complete(
        thread=parent, request_id=request.pk, env={"REPO_TOKEN": "tok-123"}
    )

    [child] = children(parent)
    assert answer == {"request_id": str(request.pk), "child_thread_id": str(child.pk),
                      "status": "success"}  # fmt: skip
    assert env_of(child) == {"REPO_TOKEN": "tok-123"}
    engine.script.text("cloned").text("ok").text("Thanks.")
    engine.drive(child)
    delivered = Turn.objects.get(thread=parent, source="subagent")
    assert "has returned the following result:\n\nok" in delivered.payload["content"]
    assert "tok-123" not in model_texts(engine)


def test_subagents_nest_no_deeper_than_the_cap(engine: Engine, settings: Any) -> None:
    settings.SUBAGENT_MAX_DEPTH = 1
    engine.define(
        prompts=[prompt("boss", tools=["pair"]), prompt("worker", tools=["pair"]),
                 prompt("checker")],
        agents=[
            {"name": "boss", "side_a": {"prompt": "boss"}},
            {"name": "pair", "type": "dual_ai", "side_a": {"prompt": "worker"},
             "side_b": {"prompt": "checker"}, "max_session_turns": 1, "expose_as_tool": True,
             "tool_description": "pair"},
        ],
    )  # fmt: skip
    parent = engine.thread("boss")
    engine.script.tool_calls([{"name": "pair", "arguments": {"message": "go"}}])
    engine.script.tool_calls([{"name": "pair", "arguments": {"message": "deeper"}}])
    engine.script.text("could not").text("ok").text("done")
    engine.send(parent, "start")
    engine.drive(parent)

    [child] = children(parent)
    refused = Message.objects.get(thread=child, role="tool")
    assert "nest 1 deep (SUBAGENT_MAX_DEPTH)" in (refused.content or "")
    assert SubagentLink.objects.filter(thread=child).count() == 0


def test_a_request_whose_attachment_is_gone_is_a_conflict_not_an_unknown_request(
    engine: Engine,
) -> None:
    files = {"type": "array", "items": {"type": "string"}}
    schema = {"type": "object", "properties": {"task": {"type": "string"}, "files": files}}
    worker = prompt("worker", variables=[TOKEN], required_schema=schema)
    define(engine, {"name": "pair", "init_attachments_property": "files"}, worker=worker)
    parent = engine.thread("boss")
    ThreadState(parent).write_file("/attachments/brief.txt", b"brief", "text/plain")
    call = {"name": "pair", "arguments": {"task": "go", "files": ["/attachments/brief.txt"]}}
    engine.script.tool_calls([call]).text("asked")
    engine.send(parent, "start")
    engine.drive(parent)
    request = VariableRequest.objects.get(thread=parent)
    ThreadState(parent).unlink_file("/attachments/brief.txt")

    with pytest.raises(Conflict, match=r"no file at /attachments/brief\.txt"):
        variable_request_complete(thread=parent, request_id=request.pk, env={"REPO_TOKEN": "t"})

    assert children(parent) == []
    assert VariableRequest.objects.get(pk=request.pk).status == "pending"

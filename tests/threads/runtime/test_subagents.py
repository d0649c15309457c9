"""Subagents in process (spec runtime §7-§8, DIGEST §6): child threads, the registry,
blocking and non-blocking calls, the lifecycle tools, session outcomes."""

from __future__ import annotations

from typing import Any

import pytest

from agents.registry import tool
from tests.threads.runtime.conftest import Engine, prompt
from threads.events import session_id_of
from threads.models import Event, Log, Message, SubagentLink, Thread, Turn
from threads.services.control import thread_stop
from threads.state import ThreadState

pytestmark = pytest.mark.django_db


@pytest.fixture
def engine(engine: Engine) -> Engine:
    """The engine's tools, and two that work with files."""

    @tool(description="Write a note file.")
    def write_note(state: Any) -> str:
        state.write_file("/attachments/note.txt", b"a note", "text/plain")
        return "written"

    @tool(
        description="Deliver the result.",
        args={"type": "object", "properties": {
            "summary": {"type": "string"}, "files": {"type": "array", "items": {"type": "string"}},
        }},
    )  # fmt: skip
    def deliver(state: Any, args: dict[str, Any]) -> str:
        return "delivered"

    return engine


def pair(name: str = "pair", **fields: Any) -> dict[str, Any]:
    """A dual_ai agent exposed as a tool: a worker (side A) and a checker (side B)."""
    return {
        "name": name, "type": "dual_ai", "side_a": {"prompt": "worker"},
        "side_b": {"prompt": "checker"}, "max_session_turns": 1, "expose_as_tool": True,
        "tool_description": "A worker and a checker", **fields,
    }  # fmt: skip


def define(engine: Engine, entry: Any = "pair", *, agent: dict[str, Any] | None = None) -> None:
    """A ``boss`` (ai_human) whose prompt lists ``entry``, and the ``pair`` agent."""
    engine.define(
        prompts=[
            prompt("boss", tools=[entry]),
            prompt(
                "worker",
                tools=["finish", "give_up", "end_session", "echo", "write_note", "deliver"],
            ),
            prompt("checker"),
        ],
        agents=[{"name": "boss", "side_a": {"prompt": "boss"}}, agent or pair()],
    )


def create_call(message: str, name: str, agent: str = "pair") -> dict[str, Any]:
    arguments = {"agent": agent, "message": message, "attachments": [], "name": name}
    return {"name": "subagent_create", "arguments": arguments}


def message_call(reference: str, message: str) -> dict[str, Any]:
    arguments = {"referenceId": reference, "message": message, "attachments": []}
    return {"name": "subagent_message", "arguments": arguments}


def child_of(parent: Thread) -> Thread:
    return Thread.objects.get(parent=parent)


def events(thread: Thread, prefix: str = "subagent.") -> list[tuple[str, dict[str, Any]]]:
    rows = Event.objects.filter(thread=thread, type__startswith=prefix).order_by("sequence")
    return [(row.type, row.payload) for row in rows]


def tool_rows(thread: Thread) -> list[Message]:
    return list(Message.objects.filter(thread=thread, role="tool").order_by("seq"))


# Blocking, non-resumable -------------------------------------------------------------------


def test_a_blocking_call_runs_the_child_session_and_returns_its_outcome(engine: Engine) -> None:
    """RT-7.1, DG-6.3: a child thread with parent linkage; the tool result is the child's
    session outcome with the reference; a non-resumable child is closed after delivering."""
    define(engine)
    parent = engine.thread("boss")
    engine.script.tool_calls([{"name": "pair", "arguments": {"message": "write a haiku"}}])
    engine.script.text("haiku draft").text("looks good").text("Done.")
    engine.send(parent, "get me a haiku")

    engine.drive(parent)

    child = child_of(parent)
    assert child.agent_name == "pair"
    assert child.parent_relationship == "pair"
    assert child.root_id == parent.pk
    assert [(m.role, m.side, m.content) for m in Message.objects.filter(thread=child)] == [
        ("user", "b", "write a haiku"),
        ("assistant", "a", "haiku draft"),
        ("user", "b", "looks good"),
    ]
    [result] = tool_rows(parent)
    assert result.tool_status == "success"
    assert result.content == f"looks good\n\nReference: {child.pk}"
    assert result.metadata["subagent_id"] == str(child.pk)
    assert engine.history(parent)[-1] == ("assistant", "Done.")
    child.refresh_from_db()
    assert child.terminated_at is not None
    assert child.status == "completed"
    link = SubagentLink.objects.get(child=child)
    assert (link.thread_id, link.status, link.blocking, link.resumable) == (
        parent.pk, "terminated", True, False,
    )  # fmt: skip
    assert [kind for kind, _ in events(parent)] == [
        "subagent.spawned", "subagent.completed", "subagent.status", "subagent.closed",
    ]  # fmt: skip
    assert session_id_of(child) == str(parent.pk)


def test_a_failed_child_session_is_an_error_result(engine: Engine) -> None:
    define(engine, agent=pair(side_a={"prompt": "worker", "session_fail": "give_up"}))
    parent = engine.thread("boss")
    engine.script.tool_calls([{"name": "pair", "arguments": {"message": "try"}}])
    engine.script.tool_calls([{"name": "give_up", "arguments": {"reason": "too hard"}}])
    engine.script.text("I could not.")
    engine.send(parent, "go")

    engine.drive(parent)

    [result] = tool_rows(parent)
    assert result.tool_status == "error"
    assert (result.content or "").startswith("Failed to execute tool: gave up")
    assert [kind for kind, _ in events(parent)][:2] == ["subagent.spawned", "subagent.failed"]


# Non-blocking --------------------------------------------------------------------------------


def test_a_non_blocking_call_answers_at_once_and_the_result_arrives_as_a_silent_message(
    engine: Engine,
) -> None:
    """DG-6.3: ``The subagent was initiated successfully. Reference: <id>``; when the child's
    session ends the parent gets a silent queued message with metadata.subagent_id."""
    define(engine, {"name": "pair", "blocking": False})
    parent = engine.thread("boss")
    engine.script.tool_calls([{"name": "pair", "arguments": {"message": "write"}}])
    engine.script.text("Started it.")
    engine.send(parent, "go")
    engine.drive(parent)

    child = child_of(parent)
    [result] = tool_rows(parent)
    assert result.content == f"The subagent was initiated successfully. Reference: {child.pk}"
    engine.script.text("draft").text("fine").text("Got the result.")
    engine.drive(child)
    delivered = Turn.objects.filter(thread=parent, source="subagent").get()
    assert delivered.status == "queued"
    engine.drive(parent)

    message = Message.objects.filter(
        thread=parent, role="user", metadata__subagent_id=str(child.pk)
    ).get()
    assert message.silent
    assert message.role == "user"
    assert message.content == (
        f"Subagent (reference: {child.pk}) has returned the following result:\n\nfine"
    )
    assert message.metadata["handoff_kind"] == "result"
    assert engine.history(parent)[-1] == ("assistant", "Got the result.")
    # The parent's log has the create and the return (spec §12, docs/subagents.md), and
    # its registry said running while the child's session ran.
    logged = Log.objects.filter(thread=parent, kind="subagent").order_by("created_at")
    assert [(row.data["event"], row.data["reference"]) for row in logged] == [
        ("create", str(child.pk)), ("return", str(child.pk)),
    ]  # fmt: skip
    statuses = [data["status"] for kind, data in events(parent) if kind == "subagent.status"]
    assert statuses == ["idle"]  # it was created running


# Resumable and the lifecycle tools -----------------------------------------------------------


RESUMABLE = {"name": "pair", "resumable": {"receives_messages": "side_a", "max_instances": 2}}


def offered(engine: Engine, index: int = -1) -> list[str]:
    return [tool.name for tool in engine.script.requests[index].tools]


def test_resumable_subagents_are_offered_through_the_lifecycle_tools(engine: Engine) -> None:
    """DG-6.3: subagent_create (agent enum, message, attachments, name, arguments;
    additionalProperties false), subagent_message once a live entry exists, subagents."""
    define(engine, {**RESUMABLE, "blocking": False})
    parent = engine.thread("boss")
    engine.script.tool_calls([create_call("research tea", "tea")])
    engine.script.text("Created.")
    engine.send(parent, "go")
    engine.drive(parent)

    assert offered(engine, 0) == ["subagent_create", "subagents"]
    create = engine.script.requests[0].tools[0]
    assert create.parameters is not None
    assert create.parameters["additionalProperties"] is False
    assert create.parameters["required"] == ["agent", "message", "attachments", "name"]
    assert create.parameters["properties"]["agent"]["enum"] == ["pair"]
    assert offered(engine, 1) == ["subagent_create", "subagent_message", "subagents"]
    child = child_of(parent)
    assert child.tags == ["name:tea"]
    assert ThreadState(parent).children[0]["reference"] == str(child.pk)
    assert ThreadState(parent).children[0]["title"] == "tea"


def test_calling_a_resumable_relationship_by_name_is_refused_with_guidance(engine: Engine) -> None:
    define(engine, RESUMABLE)
    parent = engine.thread("boss")
    engine.script.tool_calls([{"name": "pair", "arguments": {"message": "x"}}]).text("ok")
    engine.send(parent, "go")
    engine.drive(parent)

    [result] = tool_rows(parent)
    assert result.tool_status == "error"
    assert "use" not in (result.content or "") or "subagent_create" in (result.content or "")
    assert "'pair' is a resumable subagent" in (result.content or "")
    assert not Thread.objects.filter(parent=parent).exists()


def test_max_instances_refuses_with_the_live_references(engine: Engine) -> None:
    """RT-7.2: creation beyond maxInstances is a tool error with actionable guidance."""
    define(engine, {**RESUMABLE, "blocking": False})
    parent = engine.thread("boss")
    create = create_call("go", "n")
    engine.script.tool_calls([create, create, create]).text("ok")
    engine.send(parent, "three please")
    engine.drive(parent)

    results = tool_rows(parent)
    assert [row.tool_status for row in results] == ["success", "success", "error"]
    assert "at most 2 live instances (maxInstances) and has 2" in (results[2].content or "")
    assert "subagent_message" in (results[2].content or "")
    assert results[2].metadata["error_code"] == "subagent_max_instances"
    assert SubagentLink.objects.filter(thread=parent).count() == 2


def test_subagent_message_queues_to_the_child_and_its_reply_comes_back(engine: Engine) -> None:
    """RT-8.1, DG-6.3: ``Message sent to subagent <id>.``; queued as ``user`` to the child."""
    define(engine, {**RESUMABLE, "blocking": False})
    parent = engine.thread("boss")
    engine.script.tool_calls([create_call("one", "n")]).text("ok")
    engine.send(parent, "go")
    engine.drive(parent)
    child = child_of(parent)
    engine.script.tool_calls([message_call(str(child.pk), "two")]).text("sent")
    engine.send(parent, "more")
    engine.drive(parent)

    assert tool_rows(parent)[-1].content == f"Message sent to subagent {child.pk}."
    waiting = Turn.objects.filter(thread=child, status="queued").order_by("position")
    assert [turn.payload["content"] for turn in waiting] == ["one", "two"]
    # Each session of the child shows in the parent's registry: running, then its outcome.
    engine.script.text("draft one").text("fine one").text("draft two").text("fine two")
    engine.drive(child)
    statuses = [data["status"] for kind, data in events(parent) if kind == "subagent.status"]
    assert statuses == ["idle", "running", "idle"]
    returns = Log.objects.filter(thread=parent, kind="subagent", data__event="return")
    assert returns.count() == 2


@pytest.mark.parametrize("reference", ["not-a-uuid", "00000000-0000-0000-0000-000000000000"])
def test_subagent_message_to_an_unknown_reference_is_an_error(
    engine: Engine, reference: str
) -> None:
    define(engine, {**RESUMABLE, "blocking": False})
    parent = engine.thread("boss")
    engine.script.tool_calls([create_call("one", "n")])
    engine.script.tool_calls([message_call(reference, "two")]).text("ok")
    engine.send(parent, "go")
    engine.drive(parent)

    result = tool_rows(parent)[-1]
    assert result.tool_status == "error"
    assert "is not one of yours" in (result.content or "")


def test_the_one_instance_of_a_blocking_relationship_is_messaged_and_awaited(
    engine: Engine,
) -> None:
    """DG-6.3 special case: blocking + maxInstances 1 + one live instance => message that
    instance and await its session, instead of refusing."""
    define(engine, {"name": "pair", "resumable": {"receives_messages": "side_a",
                                                  "max_instances": 1}})  # fmt: skip
    parent = engine.thread("boss")
    engine.script.tool_calls([create_call("first", "solo")]).text("one").text("ok one")
    engine.script.tool_calls([create_call("again", "solo")])
    engine.script.text("two").text("ok two").text("Both done.")
    engine.send(parent, "go")
    engine.drive(parent)

    child = child_of(parent)
    one, two = tool_rows(parent)
    assert one.content == f"ok one\n\nReference: {child.pk}"
    assert two.content == f"ok two\n\nReference: {child.pk}"
    assert SubagentLink.objects.filter(thread=parent).count() == 1
    assert [m.content for m in Message.objects.filter(thread=child, side="b")] == [
        "first", "ok one", "again", "ok two",
    ]  # fmt: skip


# Outcomes (DIGEST §6.3 "Child outcome") ------------------------------------------------------


def test_a_session_stop_binding_maps_the_outcome_and_copies_its_attachments_back(
    engine: Engine,
) -> None:
    """RT-8.2: the mapped sessionStop payload is the result; its attachments are copied
    child -> parent under fresh paths (the bytes are equal, the paths are not)."""
    binding = {"name": "deliver", "message_property": "summary",
               "attachments_property": "files"}  # fmt: skip
    define(engine, agent=pair(side_a={"prompt": "worker", "session_stop": binding}))
    parent = engine.thread("boss")
    engine.script.tool_calls([{"name": "pair", "arguments": {"message": "make a file"}}])
    engine.script.tool_calls([{"name": "write_note", "arguments": {}}])
    engine.script.tool_calls([{"name": "deliver", "arguments": {
        "summary": "All done", "files": ["/attachments/note.txt"]}}])  # fmt: skip
    engine.script.text("Thanks.")
    engine.send(parent, "go")

    engine.drive(parent)

    child = child_of(parent)
    result = tool_rows(parent)[0]
    assert result.tool_status == "success"
    expected = f"All done\n\nReference: {child.pk}\nAttachment path for"
    assert (result.content or "").startswith(expected)
    [ref] = result.attachments
    assert ref["path"] != "/attachments/note.txt"
    assert ref["path"].startswith("/attachments/note-")
    assert ThreadState(parent).read_file(ref["path"]) == b"a note"
    assert ThreadState(child).read_file("/attachments/note.txt") == b"a note"


def test_declared_session_tools_that_never_fired_make_the_outcome_an_error(
    engine: Engine,
) -> None:
    define(engine, agent=pair(side_a={"prompt": "worker", "session_stop": "finish"}))
    parent = engine.thread("boss")
    engine.script.tool_calls([{"name": "pair", "arguments": {"message": "x"}}])
    engine.script.text("a").text("b").text("noted")
    engine.send(parent, "go")
    engine.drive(parent)

    [result] = tool_rows(parent)
    assert result.tool_status == "error"
    assert "ended without calling finish (stop reason: max_session_turns)" in (result.content or "")


def test_stop_session_in_the_child_is_its_outcome(engine: Engine) -> None:
    define(engine)
    parent = engine.thread("boss")
    engine.script.tool_calls([{"name": "pair", "arguments": {"message": "x"}}])
    engine.script.tool_calls([{"name": "end_session", "arguments": {}}])
    engine.script.text("after")
    engine.send(parent, "go")
    engine.drive(parent)

    [result] = tool_rows(parent)
    assert (result.content or "").startswith("done by tool\n\nReference: ")


# Parent communication (runtime §8.2-§8.3) ----------------------------------------------------


def test_notify_parent_and_set_status_reach_the_parent(engine: Engine) -> None:
    define(engine, {**RESUMABLE, "blocking": False})
    parent = engine.thread("boss")
    engine.script.tool_calls([create_call("one", "n")]).text("ok")
    engine.send(parent, "go")
    engine.drive(parent)
    child = ThreadState(child_of(parent))

    message_id = child.notify_parent("I need a decision on the budget; please answer.")
    child.set_status("halfway")

    queued = Turn.objects.get(thread=parent, payload__message_id=message_id)
    assert queued.payload["silent"] is True
    assert queued.payload["role"] == "user"
    assert queued.payload["metadata"]["subagent_id"] == child.thread_id
    assert ThreadState(parent).children[0]["status"] == "halfway"
    assert events(parent)[-1] == (
        "subagent.status",
        {"subagent_id": child.thread_id, "status": "halfway"},
    )
    assert ThreadState(parent).notify_parent("nobody") is None  # a top-level thread


def test_the_session_status_binding_updates_the_registry_without_ending_the_session(
    engine: Engine,
) -> None:
    """RT-8.3: sessionStatus updates child status in the parent registry."""
    binding = {"name": "echo", "message_property": "text"}
    define(engine, agent=pair(side_a={"prompt": "worker", "session_status": binding}))
    parent = engine.thread("boss")
    engine.script.tool_calls([{"name": "pair", "arguments": {"message": "x"}}])
    engine.script.tool_calls([{"name": "echo", "arguments": {"text": "researching"}}])
    engine.script.text("draft").text("ok").text("fine")
    engine.send(parent, "go")
    engine.drive(parent)

    statuses = [payload["status"] for kind, payload in events(parent) if kind == "subagent.status"]
    assert statuses[0] == "researching"


def test_terminating_a_child_updates_the_parent_and_terminating_a_parent_cascades(
    engine: Engine,
) -> None:
    """RT-10: terminate propagates child termination status to the parent registry."""
    define(engine, {**RESUMABLE, "blocking": False})
    parent = engine.thread("boss")
    create = create_call("one", "n")
    engine.script.tool_calls([create, create]).text("ok")
    engine.send(parent, "go")
    engine.drive(parent)
    first, second = Thread.objects.filter(parent=parent).order_by("created_at")

    ThreadState(first).terminate()

    entries = {entry["reference"]: entry for entry in ThreadState(parent).children}
    assert entries[str(first.pk)]["status"] == "terminated"
    assert entries[str(first.pk)]["terminated_at"] is not None
    assert ("subagent.closed", {"subagent_id": str(first.pk), "status": "terminated"}) in events(
        parent
    )
    ThreadState(parent).terminate()
    second.refresh_from_db()
    assert second.terminated_at is not None
    assert ThreadState(parent).children[1]["status"] == "terminated"


def test_stopping_the_parent_stops_the_blocking_child_it_waits_for(
    engine: Engine, django_capture_on_commit_callbacks: Any
) -> None:
    """A stop of the parent's turn reaches the child session it runs inline: the child's
    turn ends cancelled, the call gets that failure, the parent's turn ends cancelled."""
    stopped: list[bool] = []

    @tool(description="Stops the parent thread, then waits for this flow's abort.")
    def stop_parent(state: Any) -> str:
        parent = state.get_parent_thread()
        with django_capture_on_commit_callbacks(execute=True):  # the stop's signal is sent
            thread_stop(thread=parent.thread)
        stopped.append(state.execution.abort_signal.wait(10))
        return "stopped"

    engine.define(
        prompts=[prompt("boss", tools=["pair"]), prompt("worker", tools=["stop_parent"]),
                 prompt("checker")],
        agents=[{"name": "boss", "side_a": {"prompt": "boss"}}, pair()],
    )  # fmt: skip
    parent = engine.thread("boss")
    engine.script.tool_calls([{"name": "pair", "arguments": {"message": "work"}}])
    engine.script.tool_calls([{"name": "stop_parent", "arguments": {}}])
    engine.send(parent, "go")

    engine.drive(parent)

    assert stopped == [True]
    child = child_of(parent)
    assert Turn.objects.get(thread=child).outcome == "aborted_by_user"
    result = tool_rows(parent)[0]
    assert result.tool_status == "error"
    assert "The subagent's session was stopped (aborted_by_user)" in (result.content or "")
    assert Turn.objects.get(thread=parent).status == "cancelled"


def test_the_registry_says_awaiting_human_while_a_child_waits_on_a_person(engine: Engine) -> None:
    from agents.models import PermissionRule

    PermissionRule.objects.create(tenant=engine.tenant, tool="echo", decision="ask")
    define(engine, {"name": "pair", "blocking": False})
    parent = engine.thread("boss")
    engine.script.tool_calls([{"name": "pair", "arguments": {"message": "write"}}])
    engine.script.text("Started it.")
    engine.send(parent, "go")
    engine.drive(parent)
    child = child_of(parent)
    engine.script.tool_calls([{"name": "echo", "arguments": {"text": "hi"}}])
    engine.drive(child)

    assert child.status == "waiting_permission"
    link = SubagentLink.objects.get(child=child)
    assert link.status == "awaiting_human"
    statuses = [data["status"] for kind, data in events(parent) if kind == "subagent.status"]
    assert statuses == ["awaiting_human"]

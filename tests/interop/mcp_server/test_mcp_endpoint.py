"""The MCP endpoint (``/mcp/``) through a live server and worker, with the ``mcp`` SDK's
client: the tenant's agents listed and called as tools (and a follow-up on the same
thread), progress while a turn runs, reading a thread and answering an approval, tenant
isolation, API-key authentication and argument errors."""

from __future__ import annotations

import asyncio
import uuid

import httpx2
import mcp_types as types
import pytest
from asgiref.sync import sync_to_async
from mcp.shared.exceptions import MCPError

from agents.permission_rules import permission_rule_save
from tenancy.models import Role
from tests.interop.mcp_server.conftest import AGENT, DESCRIPTION, McpLive, mcp_client
from threads.models import Turn

FIXED = ["read_thread_messages", "answer_action"]
INITIALIZE = {
    "jsonrpc": "2.0", "id": 1, "method": "initialize",
    "params": {"protocolVersion": "2025-11-25", "capabilities": {},
               "clientInfo": {"name": "probe", "version": "1"}},
}  # fmt: skip


async def _status_once_ended(turn_id: str, timeout: float = 30.0) -> str:
    """The turn's status once it is over (or as it stands after ``timeout`` seconds)."""
    read = sync_to_async(lambda: Turn.objects.values_list("status", flat=True).get(pk=turn_id))
    deadline = asyncio.get_running_loop().time() + timeout
    status = await read()
    while status not in ("completed", "failed", "cancelled", "timed_out", "blocked"):
        if asyncio.get_running_loop().time() > deadline:
            break
        await asyncio.sleep(0.05)
        status = await read()
    return str(status)


def _text(result: types.CallToolResult) -> str:
    (block,) = result.content
    assert isinstance(block, types.TextContent)
    return block.text


@pytest.mark.asyncio
async def test_the_tenants_agents_are_tools_and_a_call_answers_with_its_thread(
    mcp_live: McpLive,
) -> None:
    first = mcp_live.first
    async with mcp_client(first.url, first.key) as client:
        listed = await client.list_tools()
        answered = await client.call_tool(AGENT, {"message": "hello"})
        again = await client.call_tool(
            AGENT, {"message": "again", "thread_id": answered.structured_content["thread_id"]}
        )

    assert [tool.name for tool in listed.tools] == [AGENT, *FIXED]
    chat = listed.tools[0]
    assert (chat.description or "").startswith(DESCRIPTION)
    assert chat.input_schema["required"] == ["message"]
    assert set(chat.input_schema["properties"]) == {
        "message", "thread_id", "timeout_s", "idempotency_key"
    }  # fmt: skip
    assert (answered.is_error, _text(answered)) == (False, "You said: hello")
    body = answered.structured_content
    assert (body["status"], body["done"], body["answer"]) == ("completed", True, "You said: hello")
    turn = await sync_to_async(Turn.objects.select_related("thread").get)(pk=body["turn_id"])
    assert (str(turn.thread_id), turn.thread.origin_agent_name) == (body["thread_id"], AGENT)
    follow_up = again.structured_content
    assert _text(again) == "You said: again"
    assert follow_up["thread_id"] == body["thread_id"]
    assert follow_up["turn_id"] != body["turn_id"]


@pytest.mark.asyncio
async def test_read_thread_messages_reads_the_conversation(mcp_live: McpLive) -> None:
    first = mcp_live.first
    async with mcp_client(first.url, first.key) as client:
        answered = await client.call_tool(AGENT, {"message": "one"})
        thread_id = answered.structured_content["thread_id"]
        await client.call_tool(AGENT, {"message": "two", "thread_id": thread_id})
        read = await client.call_tool("read_thread_messages", {"thread_id": thread_id})
        newest = await client.call_tool(
            "read_thread_messages", {"thread_id": thread_id, "limit": 1}
        )

    messages = read.structured_content["messages"]
    assert [(m["role"], m["content"]) for m in messages] == [
        ("user", "one"), ("assistant", "You said: one"),
        ("user", "two"), ("assistant", "You said: two"),
    ]  # fmt: skip
    assert read.structured_content["has_more"] is False
    assert _text(read).splitlines()[0] == "user: one"
    assert [m["content"] for m in newest.structured_content["messages"]] == ["You said: two"]
    assert newest.structured_content["has_more"] is True


@pytest.mark.asyncio
async def test_a_turn_that_takes_a_moment_sends_progress_before_its_answer(
    mcp_live: McpLive,
) -> None:
    first = mcp_live.first
    heard: list[tuple[float, str | None]] = []

    async def told(progress: float, total: float | None, message: str | None) -> None:
        heard.append((progress, message))

    async with mcp_client(first.url, first.key) as client:
        answered = await client.call_tool(AGENT, {"message": "slow please"}, progress_callback=told)

    assert _text(answered) == "done slowly"
    assert len(heard) >= 2, heard
    assert [value for value, _ in heard] == [float(n) for n in range(1, len(heard) + 1)]
    lines = [message or "" for _, message in heard]
    assert "turn.started" in lines, lines
    assert any(line.startswith("model.requested") for line in lines), lines


@pytest.mark.asyncio
async def test_a_turn_past_its_timeout_answers_how_it_stands_and_runs_on(
    mcp_live: McpLive,
) -> None:
    first = mcp_live.first
    async with mcp_client(first.url, first.key) as client:
        waiting = await client.call_tool(AGENT, {"message": "slow again", "timeout_s": 0.2})
        body = waiting.structured_content
        status = await _status_once_ended(body["turn_id"])
        read = await client.call_tool("read_thread_messages", {"thread_id": body["thread_id"]})

    assert waiting.is_error is False
    assert (body["done"], body["answer"]) == (False, None)
    assert body["status"] in ("queued", "running")
    assert "read_thread_messages" in _text(waiting)
    assert status == "completed"
    last = read.structured_content["messages"][-1]
    assert (last["role"], last["content"]) == ("assistant", "done slowly")


@pytest.mark.asyncio
async def test_an_approval_pauses_the_call_and_answer_action_lets_the_turn_end(
    mcp_live: McpLive,
) -> None:
    first = mcp_live.first
    await sync_to_async(permission_rule_save)(
        tenant=first.tenant, data={"decision": "ask", "agent": AGENT, "tool": "current_time"}
    )
    async with mcp_client(first.url, first.key) as client:
        paused = await client.call_tool(AGENT, {"message": "What time is it?"})
        body = paused.structured_content
        (action,) = body["actions"]
        async with mcp_client(mcp_live.other.url, mcp_live.other.key) as intruder:
            intruded = [
                await intruder.call_tool("answer_action", {**where, "decision": "approve"})
                for where in ({"action_id": action["id"]},
                              {"action_id": action["id"], "thread_id": body["thread_id"]})
            ]  # fmt: skip
        approved = await client.call_tool(
            "answer_action",
            {"thread_id": body["thread_id"], "action_id": action["id"], "decision": "approve"},
        )
        status = await _status_once_ended(body["turn_id"])
        read = await client.call_tool("read_thread_messages", {"thread_id": body["thread_id"]})
        again = await client.call_tool(
            "answer_action", {"action_id": action["id"], "decision": "deny"}
        )

    assert paused.is_error is False
    assert (body["status"], body["done"]) == ("waiting_permission", False)
    assert (action["kind"], action["status"], action["name"]) == (
        "approval", "pending", "current_time",
    )  # fmt: skip
    assert action["id"] in _text(paused)
    assert [(r.is_error, _text(r)) for r in intruded] == [
        (True, "no such action"), (True, f"no thread {body['thread_id']}"),
    ]  # fmt: skip
    assert approved.is_error is False
    assert approved.structured_content["action"]["status"] == "approved"
    assert approved.structured_content["action"]["responder"].startswith("api_key:")
    assert status == "completed"
    last = read.structured_content["messages"][-1]
    assert (last["role"], last["content"][:6]) == ("assistant", "It is ")
    (calls,) = [m["tool_calls"] for m in read.structured_content["messages"] if m["tool_calls"]]
    assert [(c["name"], c["arguments"]) for c in calls] == [("current_time", {"timezone": "UTC"})]
    assert again.is_error is True
    assert again.structured_content["error"]["code"] == "action_resolved"


@pytest.mark.asyncio
async def test_another_tenants_key_sees_and_reaches_none_of_its_agents(mcp_live: McpLive) -> None:
    first, other = mcp_live.first, mcp_live.other
    async with mcp_client(first.url, first.key) as client:
        answered = await client.call_tool(AGENT, {"message": "mine"})
    thread_id = answered.structured_content["thread_id"]
    unknown = str(uuid.uuid4())

    async with mcp_client(other.url, other.key) as client:
        listed = await client.list_tools()
        called = await client.call_tool(AGENT, {"message": "yours?"})
        read = await client.call_tool("read_thread_messages", {"thread_id": thread_id})
        read_unknown = await client.call_tool("read_thread_messages", {"thread_id": unknown})
        answered_other = await client.call_tool(
            "answer_action", {"action_id": unknown, "decision": "approve"}
        )

    assert [tool.name for tool in listed.tools] == FIXED
    assert (called.is_error, _text(called)) == (True, f"no tool named {AGENT!r}")
    assert read.is_error is True
    assert _text(read) == f"no thread {thread_id}"
    assert _text(read_unknown) == f"no thread {unknown}"
    assert "You said" not in str(read.structured_content)
    assert answered_other.is_error is True
    count = await sync_to_async(Turn.objects.filter(tenant=other.tenant).count)()
    assert count == 0


@pytest.mark.asyncio
async def test_a_read_only_key_lists_and_may_call_only_the_reading_tool(
    mcp_live: McpLive,
) -> None:
    first = mcp_live.first
    key = await sync_to_async(mcp_live.key_of)(first.tenant, Role.READ_ONLY)
    async with mcp_client(first.url, key) as client:
        listed = await client.list_tools()
        called = await client.call_tool(AGENT, {"message": "hello"})

    assert [tool.name for tool in listed.tools] == ["read_thread_messages"]
    assert called.is_error is True
    assert called.structured_content["error"]["code"] == "forbidden"
    count = await sync_to_async(Turn.objects.filter(tenant=first.tenant).count)()
    assert count == 0


@pytest.mark.asyncio
@pytest.mark.parametrize(
    ("arguments", "field"),
    [
        ({}, "message"),
        ({"message": 5}, "message"),
        ({"message": "hi", "thread_id": "not-an-id"}, "thread_id"),
        ({"message": "hi", "timeout_s": 601}, "timeout_s"),
        ({"message": "hi", "sileent": True}, "sileent"),
    ],
)
async def test_bad_arguments_are_invalid_params_naming_the_field(
    mcp_live: McpLive, arguments: dict[str, object], field: str
) -> None:
    first = mcp_live.first
    async with mcp_client(first.url, first.key) as client:
        with pytest.raises(MCPError) as refused:
            await client.call_tool(AGENT, arguments)

    assert refused.value.code == types.INVALID_PARAMS
    assert refused.value.message.startswith(f"{field}: ")
    assert refused.value.data == {"field": field}
    count = await sync_to_async(Turn.objects.filter(tenant=first.tenant).count)()
    assert count == 0


@pytest.mark.asyncio
async def test_a_repeated_idempotency_key_answers_the_first_calls_turn(
    mcp_live: McpLive,
) -> None:
    first = mcp_live.first
    key = uuid.uuid4().hex
    async with mcp_client(first.url, first.key) as client:
        once = await client.call_tool(AGENT, {"message": "once", "idempotency_key": key})
        again = await client.call_tool(AGENT, {"message": "once", "idempotency_key": key})
        reused = await client.call_tool(AGENT, {"message": "other", "idempotency_key": key})

    assert again.structured_content["turn_id"] == once.structured_content["turn_id"]
    assert _text(again) == "You said: once"
    assert reused.is_error is True
    assert reused.structured_content["error"]["code"] == "idempotency_key_reused"
    count = await sync_to_async(Turn.objects.filter(tenant=first.tenant).count)()
    assert count == 1


@pytest.mark.asyncio
async def test_an_older_client_connects_with_the_initialize_handshake(mcp_live: McpLive) -> None:
    first = mcp_live.first
    async with mcp_client(first.url, first.key, mode="legacy") as client:
        version = client.protocol_version
        listed = await client.list_tools()
        answered = await client.call_tool(AGENT, {"message": "legacy"})

    assert version == "2025-11-25"
    assert [tool.name for tool in listed.tools] == [AGENT, *FIXED]
    assert _text(answered) == "You said: legacy"


@pytest.mark.asyncio
@pytest.mark.parametrize("authorization", [None, "Bearer sap_wrongprefix_" + "x" * 40, "Basic x"])
async def test_no_key_or_a_bad_key_is_a_401_with_the_error_shape(
    mcp_live: McpLive, authorization: str | None
) -> None:
    headers = {"Accept": "application/json, text/event-stream"}
    if authorization is not None:
        headers["Authorization"] = authorization
    async with httpx2.AsyncClient() as http:
        answer = await http.post(mcp_live.first.url, json=INITIALIZE, headers=headers)

    assert answer.status_code == 401
    assert answer.headers["www-authenticate"].startswith("Bearer")
    assert answer.headers["content-type"] == "application/json"
    assert set(answer.json()["error"]) >= {"code", "message"}


@pytest.mark.asyncio
async def test_the_sdk_client_with_a_wrong_key_cannot_connect(mcp_live: McpLive) -> None:
    with pytest.raises(ExceptionGroup) as refused:
        async with mcp_client(mcp_live.first.url, "sap_wrongprefix_" + "y" * 40) as client:
            await client.list_tools()

    # Its discover probe and then its initialize were refused (401): it gives up.
    assert refused.group_contains(MCPError, match="Server returned an error response")

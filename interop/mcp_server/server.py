"""The MCP server the SDK serves at ``/mcp/``: ``tools/list`` and ``tools/call`` over
:mod:`interop.mcp_server.calls`, for the principal the view authenticated.

One :class:`mcp.server.Server` serves every tenant: its handlers read who calls from
:data:`caller` (set by the view for the request) and act in that tenant's scope, so a
tenant's tools, threads and actions are all a call can reach. Tool errors (an unknown
tool, another tenant's thread, a refused budget, a turn that failed: any DomainError a
service raises) are results with ``isError``, which the model reads; arguments that break
the tool's schema are a JSON-RPC invalid-params error naming the field.
"""

from __future__ import annotations

import contextvars
import json
from functools import cache
from typing import Any

import mcp_types as types
from mcp.server import Server
from mcp.server.context import ServerRequestContext
from mcp.shared.exceptions import MCPError

from common.connections import connection_returned
from common.errors import DomainError
from common.tenant_wall import tenant_scope
from interop.mcp_server import calls, tools
from interop.mcp_server.following import turn_follow
from tenancy.models import Role
from tenancy.principals import Principal

SERVER_NAME = "standard-agents-platform"
INSTRUCTIONS = (
    "Each agent of this workspace is a tool: send it a message and get its answer, with "
    "the thread_id to continue the conversation. read_thread_messages reads a thread; "
    "answer_action answers an approval or input request a paused turn waits for."
)

# Who calls: set by the view for its request, before the SDK serves it.
caller: contextvars.ContextVar[Principal | None] = contextvars.ContextVar(
    "mcp_caller", default=None
)


def _principal() -> Principal:
    principal = caller.get()
    if principal is None:  # the view authenticates every request first
        raise MCPError(code=types.INTERNAL_ERROR, message="the request is not authenticated")
    return principal


def _catalogue(principal: Principal) -> list[tools.AgentTool]:
    return tools.agent_tools(calls.agent_rows(tenant=principal.tenant))


async def list_tools(
    ctx: ServerRequestContext[Any], params: types.PaginatedRequestParams | None
) -> types.ListToolsResult:
    """The tools the caller's role may call: the tenant's agents, then the fixed tools."""
    principal = _principal()
    with tenant_scope(principal.tenant.pk):
        agents = await connection_returned(_catalogue)(principal)
    offered = tools.offered(principal.role, agents)
    return types.ListToolsResult(
        tools=[
            types.Tool(name=name, description=description, input_schema=schema)
            for name, description, schema in offered
        ]
    )


async def call_tool(
    ctx: ServerRequestContext[Any], params: types.CallToolRequestParams
) -> types.CallToolResult:
    """Run the named tool for the caller, in its tenant's scope."""
    principal = _principal()
    with tenant_scope(principal.tenant.pk):
        try:
            return await _called(ctx, principal, params.name, params.arguments)
        except tools.BadArguments as error:
            raise MCPError(
                code=types.INVALID_PARAMS, message=error.message,
                data={"field": error.field} if error.field else None,
            ) from None  # fmt: skip
        except DomainError as error:
            return _refused(error)


async def _called(
    ctx: ServerRequestContext[Any], principal: Principal, name: str,
    arguments: dict[str, Any] | None,
) -> types.CallToolResult:  # fmt: skip
    if name in tools.FIXED_TOOLS:
        if not principal.role.allows(tools.FIXED_ROLES[name]):
            return _role_refused(principal, name, tools.FIXED_ROLES[name])
        if name == tools.READ_THREAD_MESSAGES:
            read = tools.arguments_of(tools.ReadThreadMessages, arguments)
            found = await connection_returned(calls.thread_messages_read)(
                tenant=principal.tenant, read=read
            )
            return _result(_messages_text(found["messages"]), found)
        answer = tools.arguments_of(tools.AnswerAction, arguments)
        action = await connection_returned(calls.action_answer)(principal=principal, answer=answer)
        text = f"The action is {action['status']}; its turn resumes."
        return _result(text, {"action": action})
    agent = await connection_returned(_agent_named)(principal, name)
    if agent is None:
        return _error(f"no tool named {name!r}")
    if not principal.role.allows(tools.AGENT_ROLE):
        return _role_refused(principal, name, tools.AGENT_ROLE)
    call = tools.arguments_of(tools.AgentCall, arguments)
    return await _agent_called(ctx, principal, agent, call)


def _agent_named(principal: Principal, name: str) -> str | None:
    """The agent whose tool is ``name`` in the caller's tenant, if any."""
    return next((tool.agent for tool in _catalogue(principal) if tool.name == name), None)


async def _agent_called(
    ctx: ServerRequestContext[Any], principal: Principal, agent: str, call: tools.AgentCall
) -> types.CallToolResult:
    """Submit the message, follow the turn (progress notifications as it goes) until it
    answers or ``timeout_s`` passes, and answer how it stands."""
    submitted = await connection_returned(calls.agent_call_submit)(
        principal=principal, agent=agent, call=call
    )

    async def progress(count: int, line: str) -> None:
        await ctx.session.report_progress(float(count), None, line)

    await turn_follow(
        turn=submitted.turn, after=submitted.after, timeout=call.timeout_s, progress=progress
    )
    outcome = await connection_returned(calls.turn_outcome)(turn=submitted.turn)
    return _result(_outcome_text(outcome, call.timeout_s), outcome.structured(),
                   error=outcome.failed)  # fmt: skip


def _outcome_text(outcome: calls.Outcome, timeout: float) -> str:
    turn = outcome.turn
    if outcome.actions:
        lines = [f"The turn waits for a person's decision (thread_id {turn.thread_id}):"]
        for action in outcome.actions:
            what = f"call {action['name']}({json.dumps(action['arguments'])})"
            if action["kind"] == "input":
                what = f"input: {action['prompt'] or action['name']}"
            decisions = ", ".join(action["decisions"])
            lines.append(f"- action_id {action['id']}: {what}; decisions: {decisions}")
        lines.append("Answer it with answer_action (thread_id, action_id, decision).")
        return "\n".join(lines)
    if outcome.failed:
        why = turn.error or turn.outcome or turn.status
        return f"The turn ended {turn.status}: {why}"
    if not outcome.done:
        return (
            f"The turn is still {turn.status} after {timeout:g} s (thread_id "
            f"{turn.thread_id}, turn_id {turn.pk}); read_thread_messages shows its answer "
            "once it ends."
        )
    return outcome.answer or "(the agent wrote no answer)"


def _messages_text(messages: list[dict[str, Any]]) -> str:
    if not messages:
        return "(no messages)"
    return "\n".join(f"{m['role']}: {m['content'] or ''}" for m in messages)


def _result(text: str, structured: dict[str, Any], *, error: bool = False) -> types.CallToolResult:
    return types.CallToolResult(
        content=[types.TextContent(text=text)],
        structured_content=json.loads(json.dumps(structured, default=str)),
        is_error=error,
    )


def _error(message: str, **structured: Any) -> types.CallToolResult:
    return _result(message, {"error": {"message": message, **structured}}, error=True)


def _refused(error: DomainError) -> types.CallToolResult:
    """A domain error as the tool's result: its message and code, as the API has them."""
    return _result(error.message, {"error": error.as_dict()}, error=True)


def _role_refused(principal: Principal, name: str, needed: Role) -> types.CallToolResult:
    role = principal.role.value
    message = f"role {role} may not call {name}; {needed.value} or above is required"
    return _error(message, code="forbidden")


@cache
def mcp_server() -> Server[Any]:
    """The one SDK server (its handlers read the caller per request)."""
    return Server(
        SERVER_NAME,
        version="1",
        instructions=INSTRUCTIONS,
        get_tool_input_schema=tools.schema_for,
        on_list_tools=list_tools,
        on_call_tool=call_tool,
    )

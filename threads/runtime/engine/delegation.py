"""Subprompts and handoffs, which the tool runner starts: a subprompt is one nested step
whose messages hang under the calling message; a handoff switches the thread to another
agent after the step."""

from __future__ import annotations

import json
from collections.abc import Mapping
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any

from agents.registry import ToolResult
from threads.models import Message
from threads.runtime.definitions import ResolvedTool
from threads.runtime.engine.agent import prompt_hooks, prompt_load, prompt_tools, tool_runner
from threads.runtime.engine.base import Side
from threads.runtime.engine.model_call import context_build, model_call
from threads.runtime.engine.writes import event_publish, message_create
from threads.runtime.tool_calls import as_text, subprompt_result
from threads.services.attachments import attachment_at
from threads.services.fence import thread_fenced_update

if TYPE_CHECKING:
    from threads.runtime.engine.flow import Flow


@dataclass
class Handoff:
    agent: str
    message: str | None
    attachments: list[dict[str, Any]] = field(default_factory=list)


def subprompt_run(
    flow: Flow, resolved: ResolvedTool, arguments: dict[str, Any], *, issuer: Message, side: str
) -> ToolResult:
    """One nested step of the subprompt; its messages hang under ``issuer`` (depth + 1)."""
    sub = prompt_load(flow, resolved.name)
    config = resolved.config
    prop = config.init_user_message_property if config else None
    if prop:
        text = as_text(arguments.get(prop, ""))
    else:
        text = json.dumps(arguments, indent=2) if arguments else ""
    attachments = _init_attachments(
        flow, config.init_attachments_property if config else None, arguments
    )
    hooks = prompt_hooks(flow, sub)
    acting: Side = "a" if side == "a" else "b"
    user = message_create(
        flow, role="user", content=text, parent=issuer, side="", attachments=attachments,
        metadata={"flow_id": flow.flow_id, "subprompt": sub.name}, hooks=hooks,
    )  # fmt: skip
    messages = context_build(
        flow, sub, acting, hooks, history=sub.include_chat, extra=[user], relabel=acting == "b"
    )
    tools = prompt_tools(flow, sub)
    answer, response = model_call(flow, sub, acting, messages, tools, hooks, parent=issuer)
    runner = tool_runner(flow, sub, acting, parent=issuer, tools=tools, hooks=hooks)
    outcomes = runner.run(response.tool_calls, issuer=answer) if response.tool_calls else []
    return subprompt_result(config, response.content, outcomes)


def handoff_request(flow: Flow, resolved: ResolvedTool, arguments: dict[str, Any]) -> ToolResult:
    """An ai_human agent in the tools: the same thread switches to it after this step."""
    config = resolved.config
    prop = config.init_user_message_property if config else None
    message = None
    if prop and arguments.get(prop) is not None:
        message = as_text(arguments[prop])
    attachments = _init_attachments(
        flow, config.init_attachments_property if config else None, arguments
    )
    flow.handoff = Handoff(resolved.name, message, attachments)
    return ToolResult.success("Handoff complete")


def handoff_apply(flow: Flow) -> None:
    handoff, flow.handoff = flow.handoff, None
    assert handoff is not None
    agent = flow.defs.agent(handoff.agent)
    assert agent is not None
    thread_fenced_update(thread=flow.thread, fence=flow.fence, agent_name=agent.name)
    flow.agent = agent
    flow.spend_scope = None  # its calls now spend for the new agent
    event_publish(
        flow,
        "thread.updated",
        {"id": str(flow.thread.pk), "fields": ["agent_name"], "agent": agent.name},
    )
    if handoff.message is not None or handoff.attachments:
        message_create(
            flow, role="user", content=handoff.message, side="b",
            attachments=handoff.attachments,
            metadata={"flow_id": flow.flow_id, "handoff": agent.name},
        )  # fmt: skip


def _init_attachments(
    flow: Flow, prop: str | None, arguments: Mapping[str, Any]
) -> list[dict[str, Any]]:
    if not prop or arguments.get(prop) is None:
        return []
    paths = arguments[prop]
    paths = [paths] if isinstance(paths, str) else list(paths)
    return [attachment_at(thread=flow.thread, path=path, field=prop) for path in paths]

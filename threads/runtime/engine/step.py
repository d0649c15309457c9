"""One step of the acting side: assemble its context, call the model, run the answer's
tool calls one by one, then the tools queued during the step (runtime §3)."""

from __future__ import annotations

from typing import TYPE_CHECKING

from agents.documents import SideConfig
from agents.providers.base import ToolCall
from common.ids import new_id
from threads.runtime.engine.agent import prompt_hooks, prompt_load, prompt_tools, tool_runner
from threads.runtime.engine.base import Side, StepOutcome
from threads.runtime.engine.model_call import context_build, model_call
from threads.runtime.engine.writes import event_publish, message_create, stored_role
from threads.runtime.tools import ToolOutcome, ToolRunner, stored_calls

if TYPE_CHECKING:
    from threads.runtime.engine.flow import Flow


def step_run(flow: Flow, acting: Side, side: SideConfig) -> StepOutcome:
    execution = flow.execution
    execution.current_side = acting
    execution.step_count += 1
    if acting == "a":
        execution.side_a_step_count += 1
    else:
        execution.side_b_step_count += 1
    prompt = prompt_load(flow, side.prompt)
    hooks = prompt_hooks(flow, prompt)
    tools = prompt_tools(flow, prompt)
    with flow.outbox.step(execution.step_count):
        event_publish(flow, "step.started", {"step": execution.step_count, "side": acting})
        messages = context_build(flow, prompt, acting, hooks)
        issuer, response = model_call(
            flow, prompt, acting, messages, tools, hooks, parent=None, stop_side=side
        )
        runner = tool_runner(flow, prompt, acting, parent=None, tools=tools, hooks=hooks, side=side)
        outcomes = runner.run(response.tool_calls, issuer=issuer) if response.tool_calls else []
        outcomes += _tool_queue_run(flow, runner)
        event_publish(flow, "step.completed", {"step": execution.step_count, "side": acting})
    return StepOutcome(content=response.content, calls=response.tool_calls, outcomes=outcomes)


def _tool_queue_run(flow: Flow, runner: ToolRunner) -> list[ToolOutcome]:
    """Tools queued by ``state.queue_tool`` during this step run after its own calls."""
    outcomes: list[ToolOutcome] = []
    while flow.execution.tool_queue:
        name, args = flow.execution.tool_queue.pop(0)
        call = ToolCall(id=f"queued_{new_id().hex[:12]}", name=name, arguments=args)
        synthetic = message_create(
            flow, role=stored_role(runner.side), content=None,
            tool_calls=stored_calls([call]), side=runner.side,
            metadata={"flow_id": flow.flow_id, "queued_tools": True},
        )  # fmt: skip
        outcomes.append(runner.run_one(call, issuer=synthetic, forced=flow.defs.resolve_any(name)))
    return outcomes

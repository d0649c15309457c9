"""The step engine: one flow of a thread, step by step, in the spec's order (runtime §3).

A flow starts when the thread's lock holder finds work in the inbox and ends when a stop
condition holds (DIGEST §5.3) or the acting side is human. Each step: drain the inbox ->
assemble context -> call the model (streaming) -> persist the answer -> run its tool calls
one by one -> persist their results -> evaluate stop conditions. Every write carries the
flow's fence (a stale worker cannot write) and the abort signal is checked before and after
the model call and before each tool.

Stop reasons (``StopReason``) are the spec's codes; the thread status read model follows
from them (``status_after``).

Modules, over ``Flow`` as the explicit context object; imports only go down this list:
``flow`` (the context object, the turn's end or pause), ``loop`` (the loop, stop
conditions, abort), ``step`` (one step), ``drain`` (the turn's inputs), ``delegation``
(subprompts, handoffs), ``model_call`` (context, the call, its answer), ``agent``
(prompts, sides, env, hooks, tool runners), ``writes`` (messages, events, log rows),
``base`` (Side, Runtime, StepFailed).
"""

from threads.runtime.engine.base import Runtime, Side, StepFailed, StepOutcome
from threads.runtime.engine.flow import Flow

__all__ = ["Flow", "Runtime", "Side", "StepFailed", "StepOutcome"]

"""The flow's agent and what it resolves to: prompts, sides, env values, hooks, tool runners
and the ThreadState tools and hooks see."""

from __future__ import annotations

from collections.abc import Callable, Mapping
from functools import partial
from typing import TYPE_CHECKING, Any, Literal

from agents.documents import AgentDoc, PromptDoc, SessionBinding, SideConfig, binding_name
from agents.providers.base import ProviderError
from threads.models import Message
from threads.runtime.definitions import ResolvedTool
from threads.runtime.engine.base import Side, StepFailed
from threads.runtime.engine.context_door import context_manager
from threads.runtime.hooks import Hooks
from threads.runtime.subagent_tools import lifecycle_tools
from threads.runtime.tools import ToolRunner
from threads.services.env import EnvResolver
from threads.state import ThreadState

if TYPE_CHECKING:
    from threads.runtime.engine.flow import Flow


def agent_load(flow: Flow) -> AgentDoc:
    agent = flow.defs.agent(flow.thread.agent_name)
    if agent is None:
        raise StepFailed(
            ProviderError(f"the thread's agent {flow.thread.agent_name!r} no longer exists")
        )
    return agent


def prompt_load(flow: Flow, name: str) -> PromptDoc:
    prompt = flow.defs.prompt(name)
    if prompt is None:
        raise StepFailed(ProviderError(f"prompt {name!r} no longer exists"))
    return prompt


def side_config(flow: Flow, acting: Side) -> SideConfig:
    side = flow.agent.side_a if acting == "a" else flow.agent.side_b
    assert side is not None  # side_is_human() said this side is an AI side
    return side


def side_prompt(flow: Flow, acting: Side) -> PromptDoc:
    return prompt_load(flow, side_config(flow, acting).prompt)


def side_is_human(flow: Flow, acting: Side) -> bool:
    """Side B of an ai_human agent is the human (0.1.0: it needs no configuration)."""
    return acting == "b" and (flow.agent.type == "ai_human" or flow.agent.side_b is None)


def env_value(flow: Flow, name: str) -> str | None:
    found = _resolver(flow, flow.agent.side_a.prompt).resolve(name)
    return None if found is None else found.value


def system_env(
    flow: Flow, prompt: PromptDoc
) -> Callable[[str], tuple[str, Literal["text", "secret"]] | None]:
    resolver = _resolver(flow, prompt.name)

    def lookup(name: str) -> tuple[str, Literal["text", "secret"]] | None:
        found = resolver.resolve(name)
        return None if found is None else (found.value, found.type)

    return lookup


def _resolver(flow: Flow, prompt_name: str | None = None) -> EnvResolver:
    prompt = flow.defs.prompt(prompt_name) if prompt_name else None
    return EnvResolver(
        thread=flow.thread, agent_env=flow.agent.env, prompt_env=prompt.env if prompt else {}
    )


def prompt_tools(flow: Flow, prompt: PromptDoc) -> dict[str, ResolvedTool]:
    """The tools ``prompt`` offers, resumable subagents replaced by the lifecycle tools,
    and the context manager's (``recall`` on a compacted thread)."""
    offered = lifecycle_tools(
        flow.thread, flow.defs.tools_for(prompt, env_flag=partial(env_value, flow))
    )
    return {**context_manager().tools(flow, prompt), **offered}


def tool_state(flow: Flow, config: Any, prompt_name: str) -> ThreadState:
    env = dict(config.env or {}) if config is not None and config.env else {}
    options = dict(config.options or {}) if config is not None and config.options else {}
    state = ThreadState(
        flow.thread, execution=flow.execution, tool_env=env, prompt_name=prompt_name,
        tool_options=options,
    )  # fmt: skip
    state._flow = flow
    return state


def prompt_hooks(flow: Flow, prompt: PromptDoc) -> Hooks:
    return Hooks(
        registry=flow.defs.registry,
        state=tool_state(flow, None, prompt.name),
        prompt_name=prompt.name,
        prompt_hooks=prompt.hooks,
        agent_name=flow.agent.name,
        agent_hooks=flow.agent.hooks,
    )


def tool_runner(
    flow: Flow,
    prompt: PromptDoc,
    acting: str,
    *,
    parent: Message | None,
    tools: Mapping[str, ResolvedTool] | None = None,
    hooks: Hooks | None = None,
    side: SideConfig | None = None,
    pausable: bool = False,
) -> ToolRunner:
    bindings: dict[str, SessionBinding] = {}
    if side is not None:
        for binding in (side.session_stop, side.session_fail, side.session_status):
            if binding is not None:
                parsed = SessionBinding(name=binding) if isinstance(binding, str) else binding
                bindings[parsed.name] = parsed
    hooks = hooks or prompt_hooks(flow, prompt)
    return ToolRunner(
        flow,
        prompt_name=prompt.name,
        side=acting,
        tools=tools if tools is not None else prompt_tools(flow, prompt),
        hooks=hooks,
        parent=parent,
        session_bindings=bindings,
        status_tool=binding_name(side.session_status) if side is not None else None,
        pausable=pausable,
    )

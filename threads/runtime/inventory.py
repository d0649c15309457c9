"""What a prompt offers the model and what the permission rules decide, read without a
flow: the tool inventory of a thread's side (``GET /api/v1/threads/{id}/tools``) and the
dry run of a call's permission (``POST /api/v1/permissions/evaluate``).

Both resolve tools as a flow does (:meth:`FlowDefinitions.tools_for`, then the lifecycle
tools that stand for resumable subagents) and decide with the engine's own
:func:`threads.runtime.tools.call_verdict`, so an answer here is what the engine would
decide for the same call. Tools a context manager adds at run time (``recall`` on a
compacted side) come from the engine's context door, as a step would be offered them.
"""

from __future__ import annotations

from collections.abc import Callable, Mapping
from dataclasses import dataclass
from typing import Any, Literal

from agents.documents import AgentDoc, PromptDoc, tool_ref_name
from agents.permissions import Decision, Rule
from common.errors import DomainError, ValidationFailed
from tenancy.models import Tenant
from threads.models import Thread
from threads.runtime.definitions import FlowDefinitions, ResolvedTool, ToolKind
from threads.runtime.engine.context_door import context_manager
from threads.runtime.subagent_tools import lifecycle_tools
from threads.runtime.tools import call_rules, call_verdict
from threads.services.env import EnvResolver, tenant_env_get

Side = Literal["a", "b"]


@dataclass(frozen=True)
class ToolPermission:
    """What the rules decide for a call of one tool: ``decision`` and the ``rule`` that
    decided it (None: no rule applied, so the call is allowed), among all the ``rules``
    weighed for the tool."""

    decision: Decision
    rule: Rule | None
    rules: tuple[Rule, ...]

    @property
    def depends_on_arguments(self) -> bool:
        """A weighed rule has a condition: a call's arguments may change the decision."""
        return any(rule.when is not None for rule in self.rules)


@dataclass(frozen=True)
class InventoryTool:
    name: str
    kind: ToolKind
    description: str
    parameters: Mapping[str, Any] | None
    permission: ToolPermission  # for a call with no arguments


@dataclass(frozen=True)
class ToolInventory:
    agent: str
    side: Side
    prompt: str
    tools: tuple[InventoryTool, ...]


@dataclass(frozen=True)
class PermissionEvaluation:
    """The dry run of one call. ``offered``: the prompt offers the tool (a call of a tool
    it does not offer fails whatever the decision). ``prompt`` None: neither a thread nor
    an agent was named, so the tool resolves as a call the runtime queues itself does (no
    prompt entry) and ``offered`` says whether the tenant has a tool of that name."""

    agent: str | None
    prompt: str | None
    tool: str
    kind: ToolKind | None
    offered: bool
    permission: ToolPermission


def tool_inventory(*, thread: Thread, side: Side = "a", prompt: str | None = None) -> ToolInventory:
    """The tools ``prompt`` (default: ``side``'s prompt) offers the model on ``thread``, in
    the order the model sees them, each with the permission decision for a call of it with
    no arguments. ValidationFailed (``side``, ``prompt``) when the side is a person or the
    prompt is none of the agent's; DomainError when the thread's agent no longer exists."""
    defs = _definitions(thread.tenant)
    agent = _thread_agent(defs, thread)
    if prompt is None:
        config = agent.side_a if side == "a" else agent.side_b
        if config is None or (side == "b" and agent.type == "ai_human"):
            raise ValidationFailed(
                f"side b of agent {agent.name!r} is a person: it is offered no tools",
                field="side",
            )
        prompt = config.prompt
    doc = _agent_prompt(defs, agent, prompt)
    offered = {
        **context_manager().offered(thread, side),
        **_offered(defs, thread, doc, _env_flag(defs, agent, thread)),
    }
    tools = tuple(
        InventoryTool(
            name=name,
            kind=tool.kind,
            description=tool.spec.description,
            parameters=tool.spec.parameters,
            permission=_permission(defs, agent.name, name, tool, {}),
        )
        for name, tool in offered.items()
    )
    return ToolInventory(agent=agent.name, side=side, prompt=doc.name, tools=tools)


def permission_evaluate(
    *,
    tenant: Tenant,
    tool: str,
    arguments: Mapping[str, Any],
    thread: Thread | None = None,
    agent: str | None = None,
    prompt: str | None = None,
) -> PermissionEvaluation:
    """What ``tenant``'s rules decide for a call of ``tool`` with ``arguments``, without
    running it. The call is one of ``thread``'s (its agent), or of a new thread of
    ``agent``; ``prompt`` (one of the agent's, default its side A prompt) is the prompt
    that makes it. Without a thread or an agent, only the registry's default and the
    tenant's rules for every agent apply. ValidationFailed names the field of an agent or
    prompt that does not exist or does not fit the thread."""
    defs = _definitions(tenant)
    if thread is not None:
        if agent is not None and agent != thread.agent_name:
            raise ValidationFailed(
                f"the thread's agent is {thread.agent_name!r}, not {agent!r} (leave agent out)",
                field="agent",
            )
        found = _thread_agent(defs, thread)
    elif agent is not None:
        named = defs.agent(agent)
        if named is None:
            raise ValidationFailed(f"no agent {agent!r}", field="agent")
        found = named
    else:
        return _without_agent(defs, tool, arguments, prompt)
    doc = _agent_prompt(defs, found, prompt or found.side_a.prompt)
    # Without a thread, a new thread of the agent: no env of its own, no live subagents.
    on = thread if thread is not None else Thread(tenant=tenant, agent_name=found.name)
    resolved = _offered(defs, on, doc, _env_flag(defs, found, thread)).get(tool)
    return PermissionEvaluation(
        agent=found.name, prompt=doc.name, tool=tool,
        kind=resolved.kind if resolved is not None else None, offered=resolved is not None,
        permission=_permission(defs, found.name, tool, resolved, arguments),
    )  # fmt: skip


def agent_prompt_names(defs: FlowDefinitions, agent: AgentDoc) -> list[str]:
    """The prompts a thread of ``agent`` acts with: its AI sides' prompts and the subprompts
    their ``tools[]`` reach (a name resolves as the runtime resolves it: registry tool, code
    tool, prompt, agent), in walk order."""
    names = [agent.side_a.prompt]
    if agent.type == "dual_ai" and agent.side_b is not None:
        names.append(agent.side_b.prompt)
    walked: list[str] = []
    while names:
        name = names.pop(0)
        if name in walked:
            continue
        walked.append(name)
        doc = defs.prompt(name)
        for ref in doc.tools if doc is not None else ():
            ref_name = tool_ref_name(ref)
            if (
                defs.registry.tool(ref_name) is None
                and ref_name not in defs.code_tool_names
                and ref_name in defs.prompt_names
            ):
                names.append(ref_name)
    return walked


def _definitions(tenant: Tenant) -> FlowDefinitions:
    return FlowDefinitions(tenant=tenant, model_env=lambda _name: None)


def _thread_agent(defs: FlowDefinitions, thread: Thread) -> AgentDoc:
    agent = defs.agent(thread.agent_name)
    if agent is None:
        raise DomainError(f"the thread's agent {thread.agent_name!r} no longer exists")
    return agent


def _agent_prompt(defs: FlowDefinitions, agent: AgentDoc, name: str) -> PromptDoc:
    known = agent_prompt_names(defs, agent)
    doc = defs.prompt(name) if name in known else None
    if doc is None:
        listed = ", ".join(known)
        raise ValidationFailed(
            f"{name!r} is none of agent {agent.name!r}'s prompts ({listed})", field="prompt"
        )
    return doc


def _offered(
    defs: FlowDefinitions, thread: Thread, prompt: PromptDoc, flag: Callable[[str], str | None]
) -> dict[str, ResolvedTool]:
    """The tools ``prompt`` offers on ``thread`` as the engine's ``prompt_tools`` builds
    them, ``optional`` entries gated by ``flag``."""
    return lifecycle_tools(thread, defs.tools_for(prompt, env_flag=flag))


def _env_flag(
    defs: FlowDefinitions, agent: AgentDoc, thread: Thread | None
) -> Callable[[str], str | None]:
    """A flow's lookup of an ``optional`` flag: the thread's env, the agent's, its side A
    prompt's, then the tenant's (``thread`` None: a thread not created yet, with no env of
    its own)."""
    side_a = defs.prompt(agent.side_a.prompt)
    prompt_env = side_a.env if side_a else {}
    if thread is not None:
        resolver = EnvResolver(thread=thread, agent_env=agent.env, prompt_env=prompt_env)

        def resolved(name: str) -> str | None:
            found = resolver.resolve(name)
            return None if found is None else found.value

        return resolved

    def declared(name: str) -> str | None:
        for level in (agent.env, prompt_env):
            if name in level:
                return level[name]
        found = tenant_env_get(tenant=defs.tenant, name=name)
        return None if found is None else found.value

    return declared


def _permission(
    defs: FlowDefinitions,
    agent: str,
    tool: str,
    resolved: ResolvedTool | None,
    arguments: Mapping[str, Any],
) -> ToolPermission:
    rules = defs.permission_rules
    verdict = call_verdict(
        resolved, name=tool, agent=agent, tenant_rules=rules, arguments=arguments
    )
    weighed = call_rules(resolved, name=tool, agent=agent, tenant_rules=rules)
    return ToolPermission(verdict.decision, verdict.rule, tuple(weighed))


def _without_agent(
    defs: FlowDefinitions, tool: str, arguments: Mapping[str, Any], prompt: str | None
) -> PermissionEvaluation:
    if prompt is not None:
        raise ValidationFailed("prompt needs an agent or a thread_id", field="prompt")
    resolved = defs.resolve_any(tool)
    return PermissionEvaluation(
        agent=None, prompt=None, tool=tool,
        kind=resolved.kind if resolved is not None else None, offered=resolved is not None,
        permission=_permission(defs, "", tool, resolved, arguments),
    )  # fmt: skip

"""The graph of an agent: the definitions a thread of it can reach, and the variables they
declare (spec DIGEST §11).

The graph of an agent is its side prompts (side B only for ``dual_ai``: the side B of an
``ai_human`` agent is the human), every prompt those reach through ``include`` parts and
through ``tools[]`` entries naming prompts (subprompts), the registry tools ``tools[]``
names, and, through ``tools[]`` entries naming agents (handoff and subagent targets), those
agents' graphs. A ``tools[]`` name resolves as the runtime resolves it: registry tool, code
tool, prompt, then agent.

Two rules of §11 read it: every required variable must be provided when a thread is
created, and a child thread does not inherit the names declared ``scoped`` anywhere in its
graph. Variables reached through a subagent (a ``dual_ai`` target, which runs on a child
thread) are marked ``beyond``: their required non-scoped ones still count as required for
the thread being created, because a child inherits that thread's env, but their scoped ones
belong to that child's own spawn, not to this thread's.
"""

from __future__ import annotations

from collections.abc import Callable, Iterable
from dataclasses import dataclass, field
from typing import Literal, TypeVar

from agents import selectors
from agents.documents import IncludePart, ToolConfig, VariableDefinition, tool_ref_name
from agents.registry import RegistryView, current_registry
from common.errors import NotFound
from tenancy.models import Tenant

T = TypeVar("T")


@dataclass(frozen=True)
class GraphVariable:
    """One declaration of a variable in an agent's graph; ``declared_in`` says where
    (``prompt writer``, ``tool send_mail``)."""

    name: str
    type: Literal["text", "secret"]
    required: bool
    scoped: bool
    declared_in: str
    beyond: bool = False  # declared in the graph of a subagent (another thread)


@dataclass(frozen=True)
class AgentGraph:
    """What a walk of an agent's graph found.

    ``variables`` are the declarations in walk order, each once. ``defaults`` are the names
    that definitions in the graph give a value: the ``env`` of its agents, of its prompts and
    of its ``tools[]`` entries (the agent, prompt and tool-config levels of env lookups).
    """

    variables: tuple[GraphVariable, ...]
    defaults: frozenset[str]


def agent_graph(
    *, tenant: Tenant, agent_name: str, registry: RegistryView | None = None
) -> AgentGraph:
    """Walk ``agent_name``'s graph. ``registry`` defaults to the current registry as
    ``tenant`` sees it.

    Missing definitions are skipped (an unknown agent has an empty graph); cycles through
    subprompts and agents are walked once. Each definition is loaded at most once, through
    the definitions cache the engine reads.
    """
    if registry is None:
        registry = current_registry().visible_to(tenant.slug)
    walk = _Walk(tenant, registry)
    walk.agent(agent_name)
    return AgentGraph(tuple(walk.variables), frozenset(walk.defaults))


def agent_graph_variables(
    *, tenant: Tenant, agent_name: str, registry: RegistryView | None = None
) -> list[GraphVariable]:
    """The variables declared in ``agent_name``'s graph, in walk order (see
    :func:`agent_graph`)."""
    return list(agent_graph(tenant=tenant, agent_name=agent_name, registry=registry).variables)


def scoped_variable_names(*, tenant: Tenant, agent_name: str) -> set[str]:
    """Names declared ``scoped: true`` in the part of ``agent_name``'s graph that runs on its
    own thread: a child thread of this agent takes them only from its spawn, never from its
    parent (its own subagents' scoped names come with their spawns)."""
    variables = agent_graph_variables(tenant=tenant, agent_name=agent_name)
    return {v.name for v in variables if v.scoped and not v.beyond}


@dataclass
class _Walk:
    tenant: Tenant
    registry: RegistryView
    variables: dict[GraphVariable, None] = field(default_factory=dict)  # an ordered set
    defaults: set[str] = field(default_factory=set)
    _seen: set[tuple[str, str]] = field(default_factory=set)
    _version: str | None = None
    _beyond: bool = False  # walking a subagent's graph

    def agent(self, name: str, *, target: bool = False) -> None:
        doc = self._first(
            ("agent", name),
            lambda: selectors.agent_load(tenant=self.tenant, name=name, version=self.version),
        )
        if doc is None:
            return
        outer = self._beyond
        self._beyond = outer or (target and doc.type == "dual_ai")
        self.defaults.update(doc.env)
        self.prompt(doc.side_a.prompt)
        if doc.type == "dual_ai" and doc.side_b is not None:
            self.prompt(doc.side_b.prompt)
        self._beyond = outer

    def prompt(self, name: str) -> None:
        doc = self._first(
            ("prompt", name),
            lambda: selectors.prompt_load(tenant=self.tenant, name=name, version=self.version),
        )
        if doc is None:
            return
        self._declare(doc.variables, f"prompt {name}")
        self.defaults.update(doc.env)
        for part in doc.prompt:
            if isinstance(part, IncludePart):
                self.prompt(part.prompt)
        for ref in doc.tools:
            if isinstance(ref, ToolConfig) and ref.env:
                self.defaults.update(ref.env)
            self._tool(tool_ref_name(ref))

    def _tool(self, name: str) -> None:
        entry = self.registry.tool(name)
        if entry is not None:
            if ("tool", name) not in self._seen:
                self._seen.add(("tool", name))
                self._declare(entry.variables, f"tool {name}")
        elif name in self._names("code_tools", selectors.code_tool_names):
            return  # code tools declare no variables
        elif name in self._names("prompts", selectors.prompt_names):
            self.prompt(name)
        elif name in self._names("agents", selectors.agent_names):
            self.agent(name, target=True)

    def _declare(self, variables: Iterable[VariableDefinition], where: str) -> None:
        for variable in variables:
            found = GraphVariable(
                variable.name, variable.type, variable.required, variable.scoped, where,
                self._beyond,
            )  # fmt: skip
            self.variables[found] = None

    def _first(self, key: tuple[str, str], load: Callable[[], T]) -> T | None:
        """The definition ``key`` the first time the walk reaches it; None when it was
        reached before or does not exist."""
        if key in self._seen:
            return None
        self._seen.add(key)
        return _or_none(load)

    def _names(self, kind: str, load: Callable[..., list[str]]) -> frozenset[str]:
        # The keys and values are those of threads.runtime.definitions.FlowDefinitions, so a
        # walk and a flow share what either loaded.
        return selectors.definitions_cached(
            tenant=self.tenant, version=self.version, key=("names", kind),
            load=lambda: frozenset(load(tenant=self.tenant)),
        )  # fmt: skip

    @property
    def version(self) -> str:
        if self._version is None:
            self._version = selectors.definitions_version(tenant=self.tenant)
        return self._version


def _or_none(load: Callable[[], T]) -> T | None:
    try:
        return load()
    except NotFound:
        return None

"""What a flow reads of a tenant's definitions, loaded once per flow, and tool resolution.

Definitions do not change under a running flow: an edit applies from the next flow on.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass, field
from functools import cached_property
from typing import Literal, TypeVar

from agents import selectors
from agents.documents import AgentDoc, CodeToolDoc, PromptDoc, ToolConfig, tool_ref_name
from agents.permission_rules import TenantRule, tenant_rules_load
from agents.providers.base import ModelSpec, ToolSpec
from agents.providers.schemas import empty_object_schema
from agents.registry import RegistryView, ToolEntry, current_registry
from common.errors import NotFound
from tenancy.models import Tenant

ToolKind = Literal["function", "code", "prompt", "handoff", "subagent", "lifecycle"]
T = TypeVar("T")
ENABLED_FLAGS = frozenset({"true", "1", "yes"})


def message_schema() -> dict[str, object]:
    """The arguments of a subagent whose side A prompt declares no ``required_schema``."""
    return {
        "type": "object",
        "properties": {"message": {"type": "string", "description": "What it should do"}},
        "required": ["message"],
        "additionalProperties": False,
    }


@dataclass(frozen=True)
class ResolvedTool:
    """One entry of a prompt's ``tools[]``, with what it refers to."""

    name: str
    kind: ToolKind
    spec: ToolSpec
    config: ToolConfig | None = None
    entry: ToolEntry | None = None  # function tools
    parameters: dict[str, object] | None = None  # the schema arguments are validated against
    # subagent_create: the resumable relationships it creates (see engine.subagents)
    relationships: tuple[ResolvedTool, ...] = ()


@dataclass
class FlowDefinitions:
    """A tenant's definitions as one flow sees them (memoised by name).

    ``load_model`` is replaceable so that in-process tests answer with a scripted model.
    """

    tenant: Tenant
    model_env: Callable[[str], str | None]
    load_model_override: Callable[[str], ModelSpec] | None = None
    _prompts: dict[str, PromptDoc | None] = field(default_factory=dict)
    _agents: dict[str, AgentDoc | None] = field(default_factory=dict)
    _models: dict[str, ModelSpec] = field(default_factory=dict)

    @cached_property
    def registry(self) -> RegistryView:
        return current_registry().visible_to(self.tenant.slug)

    @cached_property
    def version(self) -> str:
        return selectors.definitions_version(tenant=self.tenant)

    def _cached(self, key: tuple[str, str], load: Callable[[], T]) -> T:
        return selectors.definitions_cached(
            tenant=self.tenant, version=self.version, key=key, load=load
        )

    @cached_property
    def permission_rules(self) -> tuple[TenantRule, ...]:
        """The tenant's own permission rules (agents.permission_rules)."""
        return self._cached(("permission_rules", ""), lambda: tenant_rules_load(tenant=self.tenant))

    @cached_property
    def prompt_names(self) -> frozenset[str]:
        return self._cached(
            ("names", "prompts"), lambda: frozenset(selectors.prompt_names(tenant=self.tenant))
        )

    @cached_property
    def agent_names(self) -> frozenset[str]:
        return self._cached(
            ("names", "agents"), lambda: frozenset(selectors.agent_names(tenant=self.tenant))
        )

    @cached_property
    def code_tool_names(self) -> frozenset[str]:
        return self._cached(
            ("names", "code_tools"),
            lambda: frozenset(selectors.code_tool_names(tenant=self.tenant)),
        )

    def prompt(self, name: str) -> PromptDoc | None:
        if name not in self._prompts:
            self._prompts[name] = _or_none(
                lambda: selectors.prompt_load(tenant=self.tenant, name=name, version=self.version)
            )
        return self._prompts[name]

    def agent(self, name: str) -> AgentDoc | None:
        if name not in self._agents:
            self._agents[name] = _or_none(
                lambda: selectors.agent_load(tenant=self.tenant, name=name, version=self.version)
            )
        return self._agents[name]

    def code_tool(self, name: str) -> CodeToolDoc:
        return selectors.code_tool_load(tenant=self.tenant, name=name, version=self.version)

    def model(self, name: str) -> ModelSpec:
        """The model ``name`` with its key resolved. Raises NotFound."""
        if name not in self._models:
            if self.load_model_override is not None:
                self._models[name] = self.load_model_override(name)
            else:
                rows = self._cached(
                    ("model", name), lambda: selectors.model_rows(tenant=self.tenant, name=name)
                )
                self._models[name] = selectors.model_spec(rows, env=self.model_env)
        return self._models[name]

    def tools_for(
        self, prompt: PromptDoc, *, env_flag: Callable[[str], str | None]
    ) -> dict[str, ResolvedTool]:
        """The tools ``prompt`` offers, by name, in declaration order. Entries gated by
        ``optional`` are left out unless that env resolves to true, 1 or yes."""
        tools: dict[str, ResolvedTool] = {}
        for ref in prompt.tools:
            config = ref if isinstance(ref, ToolConfig) else None
            if config is not None and config.optional is not None:
                flag = env_flag(config.optional)
                if (flag or "").strip().lower() not in ENABLED_FLAGS:
                    continue
            resolved = self._resolve(tool_ref_name(ref), config)
            if resolved is not None:
                tools[resolved.name] = resolved
        return tools

    def resolve_any(self, name: str) -> ResolvedTool | None:
        """Any tool of the tenant by name (runtime-forced calls: queued and invoked tools)."""
        return self._resolve(name, None)

    def _resolve(self, name: str, config: ToolConfig | None) -> ResolvedTool | None:
        entry = self.registry.tool(name)
        if entry is not None:
            spec = ToolSpec(name, entry.description, entry.args_schema)
            return ResolvedTool(name, "function", spec, config, entry, entry.args_schema)
        if name in self.code_tool_names:
            doc = self.code_tool(name)
            schema = doc.args_schema or empty_object_schema()
            return ResolvedTool(
                name, "code", ToolSpec(name, doc.description, schema), config, None, schema
            )
        if name in self.prompt_names:
            sub = self.prompt(name)
            if sub is None:
                return None
            schema = sub.required_schema or empty_object_schema()
            spec = ToolSpec(name, sub.tool_description, schema)
            return ResolvedTool(name, "prompt", spec, config, None, schema)
        if name in self.agent_names:
            agent = self.agent(name)
            if agent is None:
                return None
            side_a = self.prompt(agent.side_a.prompt)
            kind: ToolKind = "subagent" if agent.type == "dual_ai" else "handoff"
            default = message_schema() if kind == "subagent" else empty_object_schema()
            schema = (side_a.required_schema if side_a else None) or default
            spec = ToolSpec(name, agent.tool_description or agent.description or name, schema)
            return ResolvedTool(name, kind, spec, config, None, schema)
        return None


def _or_none(load: Callable[[], T]) -> T | None:
    try:
        return load()
    except NotFound:
        return None

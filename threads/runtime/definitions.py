"""What a flow reads of a tenant's definitions, loaded once per flow, and tool resolution.

Definitions do not change under a running flow: an edit applies from the next flow on.
"""

from __future__ import annotations

import json
from collections.abc import Callable, Mapping
from dataclasses import dataclass, field
from functools import cached_property
from typing import Any, Final, Literal, TypeVar

from agents import selectors
from agents.documents import (
    CODE_MODE_TOOL,
    AgentDoc,
    CodeToolDoc,
    PromptDoc,
    ToolConfig,
    tool_ref_name,
)
from agents.permission_rules import TenantRule, tenant_rules_load
from agents.providers.base import ModelSpec, ToolSpec
from agents.providers.schemas import empty_object_schema
from agents.registry import RegistryView, ToolEntry, current_registry
from common.errors import NotFound
from connectors.tools import RemoteTool, is_remote_ref, remote_tools
from tenancy.models import Tenant

ToolKind = Literal[
    "function", "code", "prompt", "handoff", "subagent", "lifecycle", "code_mode", "client",
    "mcp", "a2a",
]  # fmt: skip
# What a code-mode program may call (remote tools are called as function tools are).
PROGRAM_KINDS: Final = frozenset({"function", "mcp", "a2a"})
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
    remote: RemoteTool | None = None  # a remote source's tool (connectors.tools)


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
    _remote: dict[str, tuple[RemoteTool, ...]] = field(default_factory=dict)

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
            name = tool_ref_name(ref)
            if is_remote_ref(name):
                for remote in self._remote_tools(name, config):
                    tools.setdefault(remote.name, remote)  # validation refuses a collision
                continue
            resolved = self._resolve(name, config)
            if resolved is not None:
                tools[resolved.name] = resolved
        if prompt.code_mode:
            tools[CODE_TOOL] = code_mode_tool(tools)
        return tools

    def _remote_tools(self, ref: str, config: ToolConfig | None) -> list[ResolvedTool]:
        """The tools remote reference ``ref`` offers, listed once per flow."""
        if ref not in self._remote:
            self._remote[ref] = remote_tools(tenant=self.tenant, ref=ref).tools
        return [_remote_resolved(tool, config) for tool in self._remote[ref]]

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


def _remote_resolved(tool: RemoteTool, config: ToolConfig | None) -> ResolvedTool:
    spec = ToolSpec(tool.name, tool.description, tool.parameters)
    return ResolvedTool(tool.name, tool.source, spec, config, None, tool.parameters, remote=tool)


def _or_none(load: Callable[[], T]) -> T | None:
    try:
        return load()
    except NotFound:
        return None


# Code mode (threads.runtime.code_mode) ---------------------------------------------------

CODE_TOOL: Final = CODE_MODE_TOOL
SOURCE_SCHEMA: Final[dict[str, Any]] = {
    "type": "object",
    "properties": {
        "source": {
            "type": "string",
            "description": "a JavaScript or TypeScript module whose default export is an "
            "async function; its return value is the result",
        },
        "language": {"type": "string", "enum": ["typescript", "javascript"]},
    },
    "required": ["source"],
}


def code_mode_tool(tools: Mapping[str, ResolvedTool]) -> ResolvedTool:
    """The ``code`` tool of a prompt whose other tools are ``tools``: its description lists
    the function tools a program may call, with their parameters."""
    callable_tools = {name: tool for name, tool in tools.items() if tool.kind in PROGRAM_KINDS}
    lines = [
        "Run a program that calls tools. Write a module whose default export is an async "
        "function, e.g. `export default async function () { const r = await tools.name({...}); "
        "return r; }`. Each tool takes one object argument and resolves to its text result "
        "(it rejects with an Error when the call fails). `helpers.now()` and "
        "`helpers.random()` give the time (ms) and a random number; do not use Date or "
        "Math.random. The tools:",
    ]
    for name, tool in callable_tools.items():
        schema = json.dumps(tool.parameters or {"type": "object"}, separators=(",", ":"))
        lines.append(f"- tools.{name}(args): {tool.spec.description} Arguments: {schema}")
    if not callable_tools:
        lines.append("- (none: this prompt has no function tools)")
    spec = ToolSpec(CODE_TOOL, "\n".join(lines), dict(SOURCE_SCHEMA))
    return ResolvedTool(CODE_TOOL, "code_mode", spec, None, None, dict(SOURCE_SCHEMA))

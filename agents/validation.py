"""Rules that span definitions: references, cycles, and what each tools[] entry may say.

Prompts, agents, code tools and registry tools may share a name (an agent and its
prompt often do); a ``tools[]`` entry naming more than one of them is an error.

:func:`validate_definitions` checks a whole :class:`DefinitionSet` (a tenant's
definitions with a change applied) and returns every :class:`Problem`, each
naming its definition and field. Errors refuse the change; warnings are
reported alongside a successful one.
"""

from __future__ import annotations

from collections.abc import Callable, Iterator, Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any, Literal, Protocol

from agents.documents import (
    CODE_MODE_TOOL,
    INIT_KEYS,
    LIFECYCLE_TOOLS,
    SUBAGENT_KEYS,
    SUBPROMPT_KEYS,
    TOOL_CONFIG_KEYS,
    AgentDoc,
    CodeToolDoc,
    IncludePart,
    ModelDoc,
    PromptDoc,
    SideConfig,
    ToolConfig,
    binding_name,
    tool_ref_name,
)
from agents.permissions import ConditionInvalid, rule_from
from agents.providers.config_keys import check_anthropic_config, check_openai_config
from agents.remote_refs import NoRemoteTools, RemoteToolLookup

Kind = Literal["models", "prompts", "agents", "code_tools"]
KINDS: tuple[Kind, ...] = ("models", "prompts", "agents", "code_tools")
SINGULAR: dict[str, str] = {
    "models": "model",
    "prompts": "prompt",
    "agents": "agent",
    "code_tools": "code tool",
}


@dataclass(frozen=True)
class Problem:
    kind: Kind
    name: str
    field: str
    message: str
    severity: Literal["error", "warning"] = "error"

    def describe(self) -> str:
        where = f"{SINGULAR[self.kind]} {self.name!r}"
        return (
            f"{where}: {self.field}: {self.message}" if self.field else f"{where}: {self.message}"
        )


class RegistryLookup(Protocol):
    """What validation needs from the Python registry, as seen by one tenant."""

    def has_tool(self, name: str) -> bool: ...

    def has_hook(self, hook_id: str) -> bool: ...


SchemaChecker = Callable[[object], Sequence[tuple[str, str]]]


class CredentialLookup(Protocol):
    """The provider credentials a tenant's models may name (agents.credentials)."""

    def check(self, name: str, *, provider: str, base_url: str | None) -> tuple[str, str] | None:
        """(field, message) when a model of ``provider`` at ``base_url`` may not use the
        credential ``name``; None when it may."""


class NoCredentials:
    """A tenant with no credentials and no platform grant."""

    def check(self, name: str, *, provider: str, base_url: str | None) -> tuple[str, str] | None:
        return "credential", f"unknown credential {name!r}"


@dataclass
class DefinitionSet:
    """A tenant's definitions by kind and name; ``keyed_models`` have a stored API key."""

    models: dict[str, ModelDoc] = field(default_factory=dict)
    prompts: dict[str, PromptDoc] = field(default_factory=dict)
    agents: dict[str, AgentDoc] = field(default_factory=dict)
    code_tools: dict[str, CodeToolDoc] = field(default_factory=dict)
    keyed_models: set[str] = field(default_factory=set)
    credentials: CredentialLookup = field(default_factory=NoCredentials)
    # References to remote tools (``mcp:<server>/<tool>``): agents.remote_refs.
    remote_tools: RemoteToolLookup = field(default_factory=NoRemoteTools)

    def of(self, kind: Kind) -> Mapping[str, Any]:
        mapping: Mapping[str, Any] = getattr(self, kind)
        return mapping


# The ``config`` keys each SDK-backed adapter reads, and what their values must be.
_SDK_CONFIG_CHECKS: dict[str, SchemaChecker] = {
    "openai": check_openai_config,
    "anthropic": check_anthropic_config,
}


@dataclass(frozen=True)
class Checkers:
    """Schema checks supplied by the registry and provider modules."""

    json_schema: SchemaChecker
    scripted_config: SchemaChecker
    # Why a tenant-chosen base URL may not be called, judged without DNS (common.egress).
    destination: Callable[[str], str | None]


def validate_definitions(
    definitions: DefinitionSet, *, registry: RegistryLookup, checkers: Checkers
) -> list[Problem]:
    context = _Context(definitions, registry, checkers)
    problems = [
        *(p for doc in definitions.models.values() for p in context.model(doc)),
        *(p for doc in definitions.prompts.values() for p in context.prompt(doc)),
        *(p for doc in definitions.agents.values() for p in context.agent(doc)),
        *(p for doc in definitions.code_tools.values() for p in context.code_tool(doc)),
        *context.include_cycles(),
    ]
    return sorted(set(problems), key=lambda p: (p.severity, p.kind, p.name, p.field, p.message))


@dataclass
class _Context:
    defs: DefinitionSet
    registry: RegistryLookup
    checkers: Checkers

    def model(self, doc: ModelDoc) -> Iterator[Problem]:
        seen: set[str] = set()
        for index, fallback in enumerate(doc.fallbacks):
            path = f"fallbacks[{index}]"
            if fallback == doc.name:
                yield Problem("models", doc.name, path, "a model cannot fall back to itself")
            elif fallback not in self.defs.models:
                yield Problem("models", doc.name, path, f"unknown model {fallback!r}")
            elif fallback in seen:
                yield Problem("models", doc.name, path, f"{fallback!r} is listed twice")
            seen.add(fallback)
        check = (
            self.checkers.scripted_config
            if doc.provider == "scripted"
            else _SDK_CONFIG_CHECKS[doc.provider]
        )
        for path, message in check(doc.config):
            yield Problem("models", doc.name, _join("config", path), message)
        yield from self._model_key(doc)

    def _model_key(self, doc: ModelDoc) -> Iterator[Problem]:
        """Where the key comes from, and where it may go."""
        name, keyed = doc.name, doc.name in self.defs.keyed_models
        if doc.credential is not None:
            if doc.provider == "scripted":
                yield Problem("models", name, "credential", "a scripted model takes no key")
            elif doc.api_key_env is not None or keyed:
                yield Problem(
                    "models", name, "credential",
                    "give one key source: credential, api_key or api_key_env (send "
                    "api_key: null to remove a stored key)",
                )  # fmt: skip
            else:
                found = self.defs.credentials.check(
                    doc.credential, provider=doc.provider, base_url=doc.base_url
                )
                if found is not None:
                    yield Problem("models", name, found[0], found[1])
            return
        if doc.base_url is not None:
            problem = self.checkers.destination(doc.base_url)
            if problem is not None:
                yield Problem("models", name, "base_url", problem)
        if doc.provider != "scripted" and not doc.api_key_env and not keyed:
            yield Problem(
                "models", name, "api_key",
                "no API key: name a credential, or set api_key (stored encrypted) or "
                "api_key_env (the thread's or the tenant's env)", "warning",
            )  # fmt: skip

    def prompt(self, doc: PromptDoc) -> Iterator[Problem]:
        name = doc.name
        if doc.model not in self.defs.models:
            yield Problem("prompts", name, "model", f"unknown model {doc.model!r}")
        summarizer = doc.compaction.summarizer_model
        if summarizer is not None and summarizer not in self.defs.models:
            yield Problem(
                "prompts", name, "compaction.summarizer_model", f"unknown model {summarizer!r}"
            )
        for index, part in enumerate(doc.prompt):
            if isinstance(part, IncludePart) and part.prompt not in self.defs.prompts:
                yield Problem(
                    "prompts", name, f"prompt[{index}].prompt", f"unknown prompt {part.prompt!r}"
                )
        if doc.required_schema is not None:
            for path, message in self.checkers.json_schema(doc.required_schema):
                yield Problem("prompts", name, _join("required_schema", path), message)
        if doc.tool_choice == "required" and not (doc.tools or doc.code_mode):
            yield Problem("prompts", name, "tool_choice", "'required' needs at least one tool")
        seen: set[str] = set()
        offered: dict[str, str] = {}  # the names the model sees -> the entry offering it
        for index, ref in enumerate(doc.tools):
            target = tool_ref_name(ref)
            path = f"tools[{index}]" if isinstance(ref, str) else f"tools[{index}].name"
            if target in seen:
                yield Problem("prompts", name, path, f"{target!r} is listed twice")
            yield from self._collisions(doc, path, target, offered)
            if doc.code_mode and target == CODE_MODE_TOOL:
                yield Problem(
                    "prompts", name, path,
                    f"{target!r} is the tool code_mode adds; give this tool another name or "
                    "turn code_mode off",
                )  # fmt: skip
            seen.add(target)
            yield from self._tool_entry(doc, index, path, ref)
        yield from self._hooks("prompts", name, doc.hooks)

    def _collisions(
        self, doc: PromptDoc, path: str, target: str, offered: dict[str, str]
    ) -> Iterator[Problem]:
        """A name the model would see twice (a remote tool's ``<server>__<tool>`` beside
        another entry's tool of that name)."""
        remote = self.defs.remote_tools.resolve(target)
        for shown in remote.names if remote is not None else (target,):
            other = offered.get(shown)
            if other is not None and other != target:
                yield Problem(
                    "prompts", doc.name, path,
                    f"{target!r} offers the tool {shown!r}, which {other!r} offers too: "
                    "the model cannot tell them apart",
                )  # fmt: skip
            offered.setdefault(shown, target)

    def _tool_entry(
        self, doc: PromptDoc, index: int, path: str, ref: str | ToolConfig
    ) -> Iterator[Problem]:
        target = tool_ref_name(ref)
        remote = self.defs.remote_tools.resolve(target)
        if remote is not None:
            yield from self._remote_entry(doc, index, path, ref, remote.problem)
            return
        if target.startswith(("provider:", "mcp:", "a2a:")):
            yield Problem(
                "prompts", doc.name, path,
                f"{target!r}: provider-executed and remote tools are not supported here",
            )  # fmt: skip
            return
        if target == doc.name:
            yield Problem("prompts", doc.name, path, "a prompt cannot list itself as a tool")
            return
        owners = [
            what
            for what, present in (
                ("a prompt", target in self.defs.prompts),
                ("an agent", target in self.defs.agents),
                ("a code tool", target in self.defs.code_tools),
                ("a registry tool", self.registry.has_tool(target)),
            )
            if present
        ]
        if len(owners) > 1:
            yield Problem(
                "prompts", doc.name, path,
                f"{target!r} is ambiguous: it names {' and '.join(owners)}; rename one",
            )  # fmt: skip
            return
        allowed: frozenset[str]
        schema: dict[str, Any] | None = None
        if target in self.defs.prompts:
            what, allowed = "a prompt (subprompt)", SUBPROMPT_KEYS | INIT_KEYS
            schema = self.defs.prompts[target].required_schema
        elif target in self.defs.agents:
            agent = self.defs.agents[target]
            if not agent.expose_as_tool:
                yield Problem(
                    "prompts", doc.name, path, f"agent {target!r} is not exposed as a tool"
                )
            side_a = self.defs.prompts.get(agent.side_a.prompt)
            schema = side_a.required_schema if side_a is not None else None
            if agent.type == "dual_ai":
                what, allowed = "a dual_ai agent (subagent)", SUBAGENT_KEYS | INIT_KEYS
                if schema is None:
                    schema = {"properties": {"message": {}}}  # its default call schema
                if isinstance(ref, ToolConfig):
                    yield from self._subagent_entry(doc, index, ref, agent, side_a)
            else:
                what, allowed = "an ai_human agent (handoff)", INIT_KEYS
        elif target in self.defs.code_tools or self.registry.has_tool(target):
            what, allowed = "a tool", TOOL_CONFIG_KEYS
        else:
            yield Problem(
                "prompts", doc.name, path,
                f"unknown tool {target!r} (not a code tool, prompt, agent or registry tool)",
            )  # fmt: skip
            return
        if isinstance(ref, ToolConfig):
            for key in sorted(ref.keys_set() - allowed):
                yield Problem(
                    "prompts", doc.name, f"tools[{index}].{key}",
                    f"{key} does not apply: {target!r} is {what}",
                )  # fmt: skip
            yield from self._init_properties(doc, index, ref, schema)
            if ref.approval is not None:
                yield from _approval_problems(doc, index, ref.approval)

    def _remote_entry(
        self, doc: PromptDoc, index: int, path: str, ref: str | ToolConfig, problem: str | None
    ) -> Iterator[Problem]:
        """A remote tool reference (``mcp:<server>/<tool>``): its source's verdict; an object
        entry takes only ``optional`` and ``approval``."""
        if problem is not None:
            yield Problem("prompts", doc.name, path, problem)
            return
        if isinstance(ref, ToolConfig):
            for key in sorted(ref.keys_set()):
                yield Problem(
                    "prompts", doc.name, f"tools[{index}].{key}",
                    f"{key} does not apply: {ref.name!r} is a remote tool",
                )  # fmt: skip
            if ref.approval is not None:
                yield from _approval_problems(doc, index, ref.approval)

    def _init_properties(
        self, doc: PromptDoc, index: int, ref: ToolConfig, schema: dict[str, Any] | None
    ) -> Iterator[Problem]:
        """``init_*_property`` must name an argument of the call, or it never has a value."""
        properties = (schema or {}).get("properties") or {}
        for key in ("init_user_message_property", "init_attachments_property",
                    "init_agent_name_property"):  # fmt: skip
            prop = getattr(ref, key)
            if prop is not None and prop not in properties:
                known = ", ".join(sorted(properties)) or "none"
                yield Problem(
                    "prompts", doc.name, f"tools[{index}].{key}",
                    f"{prop!r} is not an argument of {ref.name!r} (its arguments: {known})",
                )  # fmt: skip

    def _subagent_entry(
        self, doc: PromptDoc, index: int, ref: ToolConfig, agent: AgentDoc,
        side_a: PromptDoc | None,
    ) -> Iterator[Problem]:  # fmt: skip
        """What a subagent entry's keys can drive (DIGEST §6.1)."""
        at = f"tools[{index}]"
        if ref.resumable:
            for key in sorted(ref.keys_set() & (INIT_KEYS | {"init_agent_name_property"})):
                yield Problem(
                    "prompts", doc.name, f"{at}.{key}",
                    f"{key} does not apply to a resumable subagent: it is created with "
                    "subagent_create, whose message, attachments and name say the same",
                )  # fmt: skip
        if ref.immediate:
            required = ((side_a.required_schema or {}).get("required") if side_a else None) or []
            if required:
                yield Problem(
                    "prompts", doc.name, f"{at}.immediate",
                    f"an immediate subagent starts without arguments, but {agent.name!r} "
                    f"requires {', '.join(map(str, required))} (its side A prompt's "
                    "required_schema)",
                )  # fmt: skip
            if not any(
                side is not None and side.prompt == doc.name
                for other in self.defs.agents.values()
                for side in (other.side_a, other.side_b)
            ):
                yield Problem(
                    "prompts", doc.name, f"{at}.immediate",
                    "immediate subagents start when a thread of an agent whose side uses "
                    "this prompt is created; no agent uses it as a side prompt yet",
                    "warning",
                )  # fmt: skip
        names = {tool_ref_name(other) for other in doc.tools}
        if ref.resumable:
            for reserved in sorted(names & LIFECYCLE_TOOLS):
                yield Problem(
                    "prompts", doc.name, at,
                    f"{reserved!r} is the lifecycle tool of resumable subagents; a tool of "
                    "that name cannot be listed beside one",
                )  # fmt: skip

    def agent(self, doc: AgentDoc) -> Iterator[Problem]:
        name = doc.name
        yield from self._side(doc, "side_a", doc.side_a)
        if doc.type == "dual_ai":
            if doc.side_b is None:
                yield Problem("agents", name, "side_b", "a dual_ai agent needs side_b")
            else:
                yield from self._side(doc, "side_b", doc.side_b)
            if doc.max_session_turns is None:
                yield Problem(
                    "agents", name, "max_session_turns",
                    "not set: a dual_ai session then runs until a stop tool or the step cap",
                    "warning",
                )  # fmt: skip
        elif doc.side_b is not None:
            yield Problem(
                "agents", name, "side_b", "ignored: side B of an ai_human agent is the human",
                "warning",
            )  # fmt: skip
        if doc.expose_as_tool and not doc.tool_description.strip():
            yield Problem(
                "agents", name, "tool_description", "required when expose_as_tool is true"
            )
        yield from self._hooks("agents", name, doc.hooks)

    def _side(self, agent: AgentDoc, key: str, side: SideConfig) -> Iterator[Problem]:
        prompt = self.defs.prompts.get(side.prompt)
        if prompt is None:
            yield Problem("agents", agent.name, f"{key}.prompt", f"unknown prompt {side.prompt!r}")
            return
        if not prompt.include_chat:
            yield Problem(
                "agents", agent.name, f"{key}.prompt",
                f"prompt {side.prompt!r} has include_chat false: this side will not see the "
                "conversation",
                "warning",
            )  # fmt: skip
        tools = {tool_ref_name(ref) for ref in prompt.tools}
        bindings = {
            "stop_tool": side.stop_tool,
            "session_stop": binding_name(side.session_stop),
            "session_fail": binding_name(side.session_fail),
            "session_status": binding_name(side.session_status),
        }
        for binding, tool in bindings.items():
            if tool is not None and tool not in tools:
                yield Problem(
                    "agents", agent.name, f"{key}.{binding}",
                    f"{tool!r} is not among the tools of prompt {side.prompt!r}",
                )  # fmt: skip

    def code_tool(self, doc: CodeToolDoc) -> Iterator[Problem]:
        if doc.args_schema is not None:
            for path, message in self.checkers.json_schema(doc.args_schema):
                yield Problem("code_tools", doc.name, _join("args_schema", path), message)

    def _hooks(self, kind: Kind, name: str, hooks: Sequence[str]) -> Iterator[Problem]:
        for index, hook_id in enumerate(hooks):
            if not self.registry.has_hook(hook_id):
                yield Problem(kind, name, f"hooks[{index}]", f"unknown hook {hook_id!r}")

    def include_cycles(self) -> Iterator[Problem]:
        """Each include cycle once, reported at its alphabetically first prompt."""
        graph = {
            name: [p.prompt for p in doc.prompt if isinstance(p, IncludePart)]
            for name, doc in self.defs.prompts.items()
        }
        reported: set[frozenset[str]] = set()
        for start in sorted(graph):
            for cycle in _cycles_from(start, graph):
                members = frozenset(cycle)
                if members in reported or min(members) != start:
                    continue
                reported.add(members)
                index = next(
                    i for i, part in enumerate(self.defs.prompts[start].prompt)
                    if isinstance(part, IncludePart) and part.prompt == cycle[1]
                )  # fmt: skip
                yield Problem(
                    "prompts", start, f"prompt[{index}].prompt",
                    "include cycle: " + " -> ".join(cycle),
                )  # fmt: skip


def _cycles_from(start: str, graph: Mapping[str, list[str]]) -> Iterator[list[str]]:
    stack: list[tuple[str, list[str]]] = [(start, [start])]
    while stack:
        node, path = stack.pop()
        for nxt in graph.get(node, []):
            if nxt == start:
                yield [*path, start]
            elif nxt not in path:
                stack.append((nxt, [*path, nxt]))


def _join(prefix: str, path: str) -> str:
    if not path or path == "$":
        return prefix
    return f"{prefix}{path}" if path.startswith("[") else f"{prefix}.{path}"


def _approval_problems(doc: PromptDoc, index: int, approval: Any) -> Iterator[Problem]:
    """A ``tools[]`` entry's ``approval`` must be a rule (:func:`rule_from`)."""
    at = f"tools[{index}].approval"
    try:
        rule_from(approval, source="prompt")
    except ConditionInvalid as error:
        path = f"{at}.{error.path}" if error.path else at
        yield Problem("prompts", doc.name, path, error.message)

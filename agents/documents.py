"""The shapes of definitions: one pydantic document per kind.

The same documents validate REST input, bundle entries and what export writes,
so a field has one name and one path everywhere (``tools[2].name``). Field names
are the spec's, in snake_case (docs/definitions.md maps them to camelCase).
Structural rules live here; rules that span definitions (references, cycles)
live in :mod:`agents.validation`.
"""

from __future__ import annotations

import re
from decimal import Decimal
from typing import Annotated, Any, Literal

from pydantic import (
    BaseModel,
    ConfigDict,
    Field,
    StringConstraints,
    ValidationError,
    field_validator,
    model_validator,
)

NAME_PATTERN = r"^[a-z][a-z0-9_]{0,63}$"
ENV_NAME_PATTERN = r"^[A-Za-z_][A-Za-z0-9_]{0,127}$"
MAX_TEXT = 200_000
MAX_COLUMN_INT = 2**31 - 1  # PostgreSQL's integer: a larger count is a database error

Name = Annotated[str, StringConstraints(pattern=NAME_PATTERN)]
PLATFORM_CREDENTIAL_PREFIX = "platform:"
CredentialName = Annotated[
    str, StringConstraints(pattern=r"^(platform:[a-z][a-z0-9_]{0,15}|[a-z][a-z0-9_]{0,63})$")
]
EnvName = Annotated[str, StringConstraints(pattern=ENV_NAME_PATTERN)]
Text = Annotated[str, StringConstraints(max_length=MAX_TEXT)]


class Strict(BaseModel):
    """Unknown keys are errors: a typo must not silently do nothing. The docstring under a
    field documents it for users (:mod:`agents.field_docs`: the API schema, the console)."""

    model_config = ConfigDict(extra="forbid", frozen=True)


# Shared pieces -------------------------------------------------------------


class VariableDefinition(Strict):
    name: EnvName
    """The variable's name, as tools and prompts read it."""
    type: Literal["text", "secret"] = "secret"
    """`secret` values are write-only and never shown; `text` values may be read back."""
    required: bool = False
    """A turn is refused until the variable has a value."""
    scoped: bool = False
    """Each thread sets its own value (else the tenant's value applies)."""
    description: str = ""
    """What the variable is for, shown to whoever sets it."""


class TextPart(Strict):
    type: Literal["text"]
    content: Text


class IncludePart(Strict):
    type: Literal["include"]
    prompt: Name


class EnvPart(Strict):
    type: Literal["env"]
    property: EnvName


class VariablePart(Strict):
    type: Literal["variable"]
    value: Annotated[str, StringConstraints(min_length=1, max_length=200)]


PromptPart = Annotated[TextPart | IncludePart | EnvPart | VariablePart, Field(discriminator="type")]


class Reasoning(Strict):
    effort: Literal["low", "medium", "high"] | None = None
    """How hard the model thinks before answering, where the provider supports it."""
    max_tokens: Annotated[int, Field(ge=1)] | None = None
    """At most this many reasoning tokens per step."""
    exclude: bool | None = None
    """Reason, but leave the reasoning out of the answer."""
    include: bool | None = None
    """Ask the provider to return its reasoning."""


class ResumableConfig(Strict):
    receives_messages: Literal["side_a", "side_b"]
    max_instances: Annotated[int, Field(ge=1)] | None = None
    parent_communication: Literal["implicit", "explicit"] | None = None


class ImmediateConfig(Strict):
    name_env: EnvName | None = None
    description_env: EnvName | None = None
    scoped_env: list[EnvName] | None = None


SUBPROMPT_KEYS = frozenset({"include_text_response", "include_tool_calls", "include_errors"})
SUBAGENT_KEYS = frozenset({"blocking", "resumable", "immediate", "init_agent_name_property"})
INIT_KEYS = frozenset({"init_user_message_property", "init_attachments_property"})
TOOL_CONFIG_KEYS = frozenset({"env", "options"})
# The tools the runtime offers in place of resumable subagents (DIGEST §6.3).
LIFECYCLE_TOOLS = frozenset({"subagent_create", "subagent_message", "subagents"})


class ToolConfig(Strict):
    """An object entry of ``tools[]``: PromptToolConfig, SubpromptConfig or SubagentToolConfig.

    Which one it is follows from what ``name`` refers to (a tool, a prompt, an
    agent); :mod:`agents.validation` checks the keys fit that target.
    """

    name: str
    """What the entry offers: a registry or code tool, a prompt (a subprompt), an agent (a
    subagent or a handoff), `mcp:<server>` or `a2a:<agent>`."""
    optional: EnvName | None = None
    """Offer the entry only when this environment value is true, 1 or yes."""
    # Every kind: the permission rule for calls of this tool (agents.permissions), a
    # decision ("deny") or {"decision", "when"}.
    approval: str | dict[str, Any] | None = None
    """The permission rule for calls of this entry: `allow`, `ask` or `deny`, or `{decision,
    when}` limited by a condition on the arguments."""
    # PromptToolConfig
    env: dict[EnvName, str] | None = None
    """Environment values for this tool only."""
    options: dict[str, Any] | None = None
    """Static options passed to the tool."""
    # SubpromptConfig
    include_text_response: bool | None = None
    """A subprompt's result includes its text answer."""
    include_tool_calls: bool | None = None
    """A subprompt's result includes the tool calls it made."""
    include_errors: bool | None = None
    """A subprompt's result includes its errors."""
    # SubpromptConfig and SubagentToolConfig
    init_user_message_property: str | None = None
    """The call argument that becomes the first user message of the subprompt or subagent."""
    init_attachments_property: str | None = None
    """The call argument naming files (`/attachments/...`) that ride along."""
    # SubagentToolConfig (0.1.0)
    blocking: bool | None = None
    """The caller waits for the subagent's answer (false: it runs on and reports back)."""
    resumable: Literal[False] | ResumableConfig | None = None
    """The subagent stays addressable after its first answer (`subagent_message`)."""
    immediate: bool | ImmediateConfig | None = None
    """Start the subagent as soon as the thread starts, without a call."""
    init_agent_name_property: str | None = None
    """The call argument that names the subagent instance."""

    def keys_set(self) -> frozenset[str]:
        return frozenset(self.model_fields_set) - {"name", "optional", "approval"}


ToolRef = str | ToolConfig


def tool_ref_name(ref: ToolRef) -> str:
    return ref if isinstance(ref, str) else ref.name


class SessionBinding(Strict):
    name: str
    message_property: str | None = None
    attachments_property: str | None = None


def binding_name(binding: str | SessionBinding | None) -> str | None:
    if binding is None or isinstance(binding, str):
        return binding
    return binding.name


class SideConfig(Strict):
    prompt: Name
    """The prompt that plays this side."""
    label: str | None = None
    """The side's name in the console and transcripts (e.g. Writer)."""
    stop_on_response: bool = True
    """The side's turn ends when the model answers with text and no tool calls."""
    stop_tool: str | None = None
    """The side's turn ends when this tool is called."""
    stop_tool_response_property: str | None = None
    """The stop tool's argument that becomes the turn's answer."""
    max_steps: Annotated[int, Field(ge=1)] | None = None
    """At most this many model steps per turn for this side."""
    session_stop: str | SessionBinding | None = None
    """A tool whose successful call ends the session (`session_stop`)."""
    session_fail: str | SessionBinding | None = None
    """A tool whose successful call ends the session as failed (`session_fail`)."""
    session_status: str | SessionBinding | None = None
    """A tool whose call reports the session's status."""

    @model_validator(mode="after")
    def _response_property_needs_stop_tool(self) -> SideConfig:
        if self.stop_tool_response_property and not self.stop_tool:
            raise ValueError("stop_tool_response_property needs stop_tool")
        return self


# Definitions ---------------------------------------------------------------


class Capabilities(Strict):
    max_context_tokens: Annotated[int, Field(ge=1)] | None = None
    """The model's context window in tokens (compaction's default window)."""
    max_output_tokens: Annotated[int, Field(ge=1)] | None = None
    """At most this many tokens per answer."""
    vision: bool = False
    """The model reads images."""
    tool_calls: bool = True
    """The model calls tools."""
    streaming: bool = True
    """The model streams its answer."""


Price = Annotated[Decimal, Field(ge=0, max_digits=12, decimal_places=6)]


class ModelDoc(Strict):
    """``defineModel``: a named use of one provider model, with fallbacks and prices."""

    name: Name
    """The name prompts use for this model (snake_case)."""
    provider: Literal["openai", "anthropic", "scripted"]
    """Who serves it: `openai` (and servers speaking its API), `anthropic`, or `scripted` for
    tests."""
    model_id: Annotated[str, StringConstraints(min_length=1, max_length=200)]
    """The provider's model id, e.g. `gpt-4o-mini`."""
    base_url: Annotated[str, StringConstraints(pattern=r"^https?://\S+$")] | None = None
    """The provider's API address, for a compatible or local server."""
    api_key_env: EnvName | None = None
    """The environment variable holding the API key."""
    # A provider credential (agents.credentials): the tenant's own by name, or the
    # operator's as ``platform:openai`` / ``platform:anthropic`` when granted.
    credential: CredentialName | None = None
    """A stored provider credential: the tenant's own by name, or `platform:openai` /
    `platform:anthropic` when the operator grants it."""
    config: dict[str, Any] = Field(default_factory=dict)
    """Provider options sent with every call (e.g. temperature); a prompt's override them."""
    fallbacks: list[Name] = Field(default_factory=list)
    """Other model names tried in order when this one fails."""
    input_price: Price | None = None
    """USD per million input tokens."""
    output_price: Price | None = None
    """USD per million output tokens."""
    cached_price: Price | None = None
    """USD per million cached input tokens."""
    capabilities: Capabilities = Field(default_factory=Capabilities)
    """What the model can do."""


# The tool ``code_mode: true`` adds to a prompt (threads.runtime.code_mode).
CODE_MODE_TOOL = "code"


class CompactionDoc(Strict):
    """How a prompt's context is compacted when it nears the model's window
    (:mod:`compaction`); every field has a default, ``enabled: false`` turns it off."""

    enabled: bool = True
    """Compact the context when it nears the model's window."""
    context_window: Annotated[int, Field(ge=1_024, le=10_000_000)] | None = None
    """The window in tokens; default: the model's `max_context_tokens`, else the known size of the
    model."""
    trigger: Annotated[float, Field(ge=0.1, le=0.95)] = 0.8
    """Compact before a step when the context would pass this fraction of the window."""
    idle_trigger: Annotated[float, Field(ge=0.1, le=1.0)] = 0.6
    """After a turn, on a quiet thread, compact past this fraction (at or above
    `trigger`: never)."""
    keep_tail_tokens: Annotated[int, Field(ge=0, le=1_000_000)] | None = None
    """The newest messages kept verbatim, in tokens (default: a quarter of the window)."""
    tool_result_max_chars: Annotated[int, Field(ge=200, le=1_000_000)] = 2_000
    """Tool results longer than this (characters) are cleared first, keeping a stub."""
    summarizer_model: Name | None = None
    """The model that writes summaries (default: the prompt's own)."""


class PromptDoc(Strict):
    """``definePrompt``: instructions, a model, tools; every prompt is callable as a tool."""

    name: Name
    """The prompt's name (snake_case); also its name as a tool."""
    tool_description: Annotated[str, StringConstraints(min_length=1, max_length=4000)]
    """What the prompt does, shown to models that may call it as a tool."""
    prompt: list[PromptPart]
    """The instructions (the system message)."""
    model: Name
    """The model that runs this prompt."""
    include_chat: bool = False
    """The model sees the conversation. A side that converses needs it; subprompts usually not."""
    include_past_tools: bool = False
    """The model sees tool calls and results of earlier turns."""
    parallel_tool_calls: bool = False
    """The model may ask for several tool calls in one step."""
    tool_choice: Literal["auto", "none", "required"] = "auto"
    """`auto`: the model decides; `required`: it must call a tool; `none`: it may not."""
    required_schema: dict[str, Any] | None = None
    """JSON Schema of the arguments when this prompt is called as a tool."""
    variables: list[VariableDefinition] = Field(default_factory=list)
    """Variables the prompt's tools need, set per tenant or per thread."""
    tools: list[ToolRef] = Field(default_factory=list)
    """What the model may call: registry and code tools, prompts, agents, MCP and A2A tools."""
    env: dict[EnvName, str] = Field(default_factory=dict)
    """Environment values for this prompt's tools (lowest precedence)."""
    reasoning: Reasoning | None = None
    """How the model reasons, where the provider supports it."""
    hooks: list[Name] = Field(default_factory=list)
    """Hooks that run for this prompt (they replace the agent's)."""
    code_mode: bool = False
    """Offer a `code` tool whose programs call this prompt's function tools."""
    compaction: CompactionDoc = Field(default_factory=CompactionDoc)
    """How the context is compacted when it nears the model's window."""

    @field_validator("prompt", mode="before")
    @classmethod
    def _string_is_one_text_part(cls, value: object) -> object:
        return [{"type": "text", "content": value}] if isinstance(value, str) else value


class AgentDoc(Strict):
    """``defineAgent`` (spec 0.1.0): one or two sides and the session rules."""

    name: Name
    """The agent's name (snake_case)."""
    type: Literal["ai_human", "dual_ai"] = "ai_human"
    """`ai_human`: a model talks with a person; `dual_ai`: two models talk with each other."""
    side_a: SideConfig
    """The side that acts first: a prompt and its stop rules."""
    side_b: SideConfig | None = None
    """The second model of a `dual_ai` agent."""
    max_session_turns: Annotated[int, Field(ge=1, le=MAX_COLUMN_INT)] | None = None
    """A session ends after this many exchanges (set it for `dual_ai`)."""
    expose_as_tool: bool = False
    """Prompts may call this agent as a tool (a subagent or a handoff)."""
    tool_description: Annotated[str, StringConstraints(max_length=4000)] = ""
    """What the agent does, shown to models that may call it (required when exposed)."""
    description: Annotated[str, StringConstraints(max_length=4000)] = ""
    """What the agent is for, shown in lists."""
    env: dict[EnvName, str] = Field(default_factory=dict)
    """Environment values for the agent's tools."""
    hooks: list[Name] = Field(default_factory=list)
    """Hooks that run for the agent's prompts that name none."""


class CodeToolDoc(Strict):
    """A tenant-written JavaScript or TypeScript tool, run in the sandbox."""

    name: Name
    """The tool's name (snake_case)."""
    description: Annotated[str, StringConstraints(min_length=1, max_length=4000)]
    """What the tool does, shown to the model."""
    args_schema: dict[str, Any] | None = None
    """JSON Schema of the tool's arguments."""
    language: Literal["typescript", "javascript"] = "typescript"
    """The source's language."""
    source: Annotated[str, StringConstraints(min_length=1, max_length=MAX_TEXT)]
    """The tool's program, run in the sandbox."""


DOCUMENTS: dict[str, type[Strict]] = {
    "models": ModelDoc,
    "prompts": PromptDoc,
    "agents": AgentDoc,
    "code_tools": CodeToolDoc,
}


def is_snake_case(name: str) -> bool:
    return re.match(NAME_PATTERN, name) is not None


def _is_type_tag(part: object) -> bool:
    """pydantic puts union members and validators in error locations; they are not fields."""
    if not isinstance(part, str):
        return False
    return part[:1].isupper() or any(c in part for c in "[(-") or part in _PLAIN_TYPES


_PLAIN_TYPES = frozenset({"str", "int", "bool", "float", "dict", "list", "none"})
_FRIENDLY = {
    ("string_pattern_mismatch", NAME_PATTERN): (
        "must be snake_case: a lowercase letter, then lowercase letters, digits or "
        "underscores, at most 64 characters"
    ),
    ("string_pattern_mismatch", ENV_NAME_PATTERN): (
        "must be an environment variable name: letters, digits and underscores, "
        "not starting with a digit"
    ),
}


def error_paths(error: ValidationError, prefix: str = "") -> list[tuple[str, str]]:
    """(path, message) for each error, with paths like ``tools[2].name``.

    When a union member failed at ``tools[2]`` and another member failed more
    specifically below it, only the specific errors are kept.
    """
    found: list[tuple[str, str]] = []
    for item in error.errors(include_url=False):
        path = prefix
        for part in item["loc"]:
            if _is_type_tag(part):
                continue
            if isinstance(part, int):
                path = f"{path}[{part}]"
            else:
                path = f"{path}.{part}" if path else str(part)
        pattern = str((item.get("ctx") or {}).get("pattern", ""))
        message = _FRIENDLY.get(
            (item["type"], pattern),
            item["msg"].removeprefix("Value error, "),
        )
        if (path, message) not in found:
            found.append((path, message))
    return [
        (path, message)
        for path, message in found
        if not any(
            other != path and other.startswith((f"{path}.", f"{path}[")) for other, _ in found
        )
    ]

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
    """Unknown keys are errors: a typo must not silently do nothing."""

    model_config = ConfigDict(extra="forbid", frozen=True)


# Shared pieces -------------------------------------------------------------


class VariableDefinition(Strict):
    name: EnvName
    type: Literal["text", "secret"] = "secret"
    required: bool = False
    scoped: bool = False
    description: str = ""


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
    max_tokens: Annotated[int, Field(ge=1)] | None = None
    exclude: bool | None = None
    include: bool | None = None


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
    optional: EnvName | None = None
    # Every kind: the permission rule for calls of this tool (agents.permissions), a
    # decision ("deny") or {"decision", "when"}.
    approval: str | dict[str, Any] | None = None
    # PromptToolConfig
    env: dict[EnvName, str] | None = None
    options: dict[str, Any] | None = None
    # SubpromptConfig
    include_text_response: bool | None = None
    include_tool_calls: bool | None = None
    include_errors: bool | None = None
    # SubpromptConfig and SubagentToolConfig
    init_user_message_property: str | None = None
    init_attachments_property: str | None = None
    # SubagentToolConfig (0.1.0)
    blocking: bool | None = None
    resumable: Literal[False] | ResumableConfig | None = None
    immediate: bool | ImmediateConfig | None = None
    init_agent_name_property: str | None = None

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
    label: str | None = None
    stop_on_response: bool = True
    stop_tool: str | None = None
    stop_tool_response_property: str | None = None
    max_steps: Annotated[int, Field(ge=1)] | None = None
    session_stop: str | SessionBinding | None = None
    session_fail: str | SessionBinding | None = None
    session_status: str | SessionBinding | None = None

    @model_validator(mode="after")
    def _response_property_needs_stop_tool(self) -> SideConfig:
        if self.stop_tool_response_property and not self.stop_tool:
            raise ValueError("stop_tool_response_property needs stop_tool")
        return self


# Definitions ---------------------------------------------------------------


class Capabilities(Strict):
    max_context_tokens: Annotated[int, Field(ge=1)] | None = None
    max_output_tokens: Annotated[int, Field(ge=1)] | None = None
    vision: bool = False
    tool_calls: bool = True
    streaming: bool = True


Price = Annotated[Decimal, Field(ge=0, max_digits=12, decimal_places=6)]


class ModelDoc(Strict):
    """``defineModel``: a named use of one provider model, with fallbacks and prices."""

    name: Name
    provider: Literal["openai", "anthropic", "scripted"]
    model_id: Annotated[str, StringConstraints(min_length=1, max_length=200)]
    base_url: Annotated[str, StringConstraints(pattern=r"^https?://\S+$")] | None = None
    api_key_env: EnvName | None = None
    # A provider credential (agents.credentials): the tenant's own by name, or the
    # operator's as ``platform:openai`` / ``platform:anthropic`` when granted.
    credential: CredentialName | None = None
    config: dict[str, Any] = Field(default_factory=dict)
    fallbacks: list[Name] = Field(default_factory=list)
    input_price: Price | None = None
    output_price: Price | None = None
    cached_price: Price | None = None
    capabilities: Capabilities = Field(default_factory=Capabilities)


# The tool ``code_mode: true`` adds to a prompt (threads.runtime.code_mode).
CODE_MODE_TOOL = "code"


class CompactionDoc(Strict):
    """How a prompt's context is compacted when it nears the model's window
    (:mod:`compaction`); every field has a default, ``enabled: false`` turns it off."""

    enabled: bool = True
    # The window in tokens; default: the model's capabilities.max_context_tokens, else the
    # built-in table of known models (none known: only the reactive trigger applies).
    context_window: Annotated[int, Field(ge=1_024, le=10_000_000)] | None = None
    # Compact before a step when the context would pass this fraction of the window.
    trigger: Annotated[float, Field(ge=0.1, le=0.95)] = 0.8
    # After a turn, on a quiet thread, compact past this fraction (>= trigger: never).
    idle_trigger: Annotated[float, Field(ge=0.1, le=1.0)] = 0.6
    # The newest messages kept verbatim, in tokens (default: a quarter of the window).
    keep_tail_tokens: Annotated[int, Field(ge=0, le=1_000_000)] | None = None
    # Tool results longer than this (characters) are cleared first, keeping a stub.
    tool_result_max_chars: Annotated[int, Field(ge=200, le=1_000_000)] = 2_000
    # The model that writes summaries (default: the prompt's own).
    summarizer_model: Name | None = None


class PromptDoc(Strict):
    """``definePrompt``: instructions, a model, tools; every prompt is callable as a tool."""

    name: Name
    tool_description: Annotated[str, StringConstraints(min_length=1, max_length=4000)]
    prompt: list[PromptPart]
    model: Name
    include_chat: bool = False
    include_past_tools: bool = False
    parallel_tool_calls: bool = False
    tool_choice: Literal["auto", "none", "required"] = "auto"
    required_schema: dict[str, Any] | None = None
    variables: list[VariableDefinition] = Field(default_factory=list)
    tools: list[ToolRef] = Field(default_factory=list)
    env: dict[EnvName, str] = Field(default_factory=dict)
    reasoning: Reasoning | None = None
    hooks: list[Name] = Field(default_factory=list)
    # Offer a ``code`` tool whose programs call this prompt's function tools
    # (threads.runtime.code_mode).
    code_mode: bool = False
    compaction: CompactionDoc = Field(default_factory=CompactionDoc)

    @field_validator("prompt", mode="before")
    @classmethod
    def _string_is_one_text_part(cls, value: object) -> object:
        return [{"type": "text", "content": value}] if isinstance(value, str) else value


class AgentDoc(Strict):
    """``defineAgent`` (spec 0.1.0): one or two sides and the session rules."""

    name: Name
    type: Literal["ai_human", "dual_ai"] = "ai_human"
    side_a: SideConfig
    side_b: SideConfig | None = None
    max_session_turns: Annotated[int, Field(ge=1, le=MAX_COLUMN_INT)] | None = None
    expose_as_tool: bool = False
    tool_description: Annotated[str, StringConstraints(max_length=4000)] = ""
    description: Annotated[str, StringConstraints(max_length=4000)] = ""
    env: dict[EnvName, str] = Field(default_factory=dict)
    hooks: list[Name] = Field(default_factory=list)


class CodeToolDoc(Strict):
    """A tenant-written JavaScript or TypeScript tool, run in the sandbox."""

    name: Name
    description: Annotated[str, StringConstraints(min_length=1, max_length=4000)]
    args_schema: dict[str, Any] | None = None
    language: Literal["typescript", "javascript"] = "typescript"
    source: Annotated[str, StringConstraints(min_length=1, max_length=MAX_TEXT)]


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

"""Registry entries: what a tool, hook or effect registration records, and the hook vocabulary."""

from __future__ import annotations

from collections.abc import Callable, Mapping
from dataclasses import dataclass
from enum import StrEnum
from types import MappingProxyType
from typing import Any

from pydantic import BaseModel
from pydantic import ValidationError as PydanticValidationError

from agents.documents import VariableDefinition as VariableDefinition  # as in definitions
from agents.permissions import Rule
from agents.schemas import ArgumentsInvalid, problems_from_pydantic, validate_args
from common.errors import DomainError

NO_ARGS_SCHEMA: Mapping[str, Any] = MappingProxyType(
    {"type": "object", "properties": {}, "additionalProperties": False}
)


class RegistryError(DomainError):
    """A registration is malformed or clashes with another; raised when the module is imported."""

    code = "registry_error"
    status = 500


class HookName(StrEnum):
    """The hooks of spec §8. Each runs with ``(state, *arguments, context)``.

    ``context`` is the HookExecutionContext (which prompt, agent or child referenced the hook).
    """

    AFTER_THREAD_CREATED = "after_thread_created"
    """After the thread is registered, before any execution. ``()`` -> ignored."""
    AFTER_SUBAGENT_CREATED = "after_subagent_created"
    """On the parent, after a child thread is created. ``(child_state)`` -> ignored."""
    AFTER_SYSTEM_MESSAGE = "after_system_message"
    """After the system prompt is rendered. ``(system_text)`` -> new text, or None to keep it."""
    FILTER_MESSAGES = "filter_messages"
    """Before context assembly. ``(messages)`` -> messages (may drop, edit or add synthetic)."""
    PREFILTER_LLM_HISTORY = "prefilter_llm_history"
    """After assembly, before the provider call. ``(llm_messages)`` -> messages; an error with
    ``block=True`` blocks the step."""
    BEFORE_CREATE_MESSAGE = "before_create_message"
    """Before every message insert. ``(message)`` -> message (merged)."""
    AFTER_CREATE_MESSAGE = "after_create_message"
    """After a message insert. ``(message)`` -> ignored."""
    BEFORE_UPDATE_MESSAGE = "before_update_message"
    """Before a message update. ``(message_id, updates)`` -> updates."""
    AFTER_UPDATE_MESSAGE = "after_update_message"
    """After a message update. ``(message)`` -> ignored."""
    BEFORE_STORE_TOOL_RESULT = "before_store_tool_result"
    """Before the tool message is stored. ``(tool_call, tool_result)`` -> tool result."""
    AFTER_TOOL_CALL_SUCCESS = "after_tool_call_success"
    """After a successful tool call. ``(tool_call, tool_result)`` -> tool result, or None to
    store nothing (stops the chain)."""
    AFTER_TOOL_CALL_FAILURE = "after_tool_call_failure"
    """After a failed tool call. ``(tool_call, tool_result)`` -> tool result, or None to store
    nothing (stops the chain)."""
    TOOL_CALL_STARTED = "tool_call_started"
    """When a call starts (its progress argument completed). ``(tool_call, progress)`` ->
    ignored."""
    TOOL_CALL_DONE = "tool_call_done"
    """When a call ends. ``(tool_call, tool_result)`` -> ignored."""
    BEFORE_COMPACTION = "before_compaction"
    """Before the context is compacted (docs/compaction.md). ``(info)`` -> info; ``{"skip":
    true}`` leaves the context as it is this time."""
    AFTER_COMPACTION = "after_compaction"
    """After a compaction overlay was written. ``(compaction)`` -> ignored."""


class SourceKind(StrEnum):
    """Where a registry entry came from."""

    APP = "app"
    """An app of the platform's own settings; ``name`` is the app."""
    PACKAGE = "package"
    """An entry point of an installed distribution; ``name`` and ``version`` are its."""
    SETTING = "setting"
    """A module or app named in ``PLATFORM_APPS``; ``name`` is that module."""
    MODULE = "module"
    """A module that is neither an app nor an extension (code that registers directly)."""


@dataclass(frozen=True)
class Source:
    """Where entries came from, as ``GET /registry/{kind}`` shows it."""

    kind: SourceKind
    name: str
    version: str | None = None


def origin_of(function: Callable[..., Any]) -> str:
    return f"{function.__module__}.{function.__qualname__}"


@dataclass(frozen=True)
class ToolEntry:
    """A function tool. ``args_schema`` is what providers receive (an empty object schema for a
    tool without arguments, then ``takes_args`` is False and the function takes only ``state``).
    """

    name: str
    description: str
    args_schema: dict[str, Any]
    pydantic_model: type[BaseModel] | None
    function: Callable[..., Any]
    module: str
    variables: tuple[VariableDefinition, ...] = ()
    progress_argument: str | None = None
    takes_args: bool = True
    approval: Rule | None = None  # the tool's default permission rule

    @property
    def origin(self) -> str:
        return origin_of(self.function)

    def parse_args(self, raw: object) -> Any:
        """Validated arguments for ``function``: a ``pydantic_model`` instance, else a dict.

        Raises :class:`ArgumentsInvalid` listing every problem.
        """
        return _parse_args(self.args_schema if self.takes_args else None, self.pydantic_model, raw)


@dataclass(frozen=True)
class HookEntry:
    """A hook implementation; prompts and agents reference it by ``id``."""

    id: str
    hook: HookName
    function: Callable[..., Any]
    module: str

    @property
    def origin(self) -> str:
        return origin_of(self.function)


@dataclass(frozen=True)
class EffectEntry:
    """An effect: scheduled with arguments, run later, returns nothing to the model."""

    name: str
    description: str
    args_schema: dict[str, Any] | None
    function: Callable[..., Any]
    module: str
    pydantic_model: type[BaseModel] | None = None

    @property
    def origin(self) -> str:
        return origin_of(self.function)

    def parse_args(self, raw: object) -> Any:
        """Validated arguments (model instance or dict). Raises :class:`ArgumentsInvalid`."""
        return _parse_args(self.args_schema, self.pydantic_model, raw)


def _parse_args(
    schema: Mapping[str, Any] | None, model: type[BaseModel] | None, raw: object
) -> Any:
    arguments = validate_args(schema, raw)
    if model is None:
        return arguments
    try:
        return model.model_validate(arguments)
    except PydanticValidationError as error:
        raise ArgumentsInvalid(problems_from_pydantic(error)) from error

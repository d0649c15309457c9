"""What ``/mcp/`` offers a tenant: one tool per agent, ``read_thread_messages`` and
``answer_action``; their names, descriptions and input schemas, and the arguments each
takes (checked here, so a bad one is an invalid-params error naming the field).

Tool names follow the rules of MCP and of the model APIs that will call them
(``^[A-Za-z0-9_-]{1,64}$``): an agent's name is kept where it fits them (agents are
snake_case already), otherwise its other characters become ``_`` and it is cut to 64; a
name taken by a fixed tool or an earlier agent (in name order) gets ``_2``, ``_3`` …
"""

from __future__ import annotations

import re
import uuid
from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass
from typing import Any, Literal

from pydantic import BaseModel, ConfigDict, Field, ValidationError, field_validator

from common.errors import ValidationFailed
from tenancy.models import Role

READ_THREAD_MESSAGES = "read_thread_messages"
ANSWER_ACTION = "answer_action"
FIXED_TOOLS = (READ_THREAD_MESSAGES, ANSWER_ACTION)

MAX_NAME_CHARS = 64
DEFAULT_TIMEOUT_S = 60.0
MAX_TIMEOUT_S = 600.0
MAX_MESSAGE_CHARS = 100_000
DEFAULT_MESSAGES = 50
MAX_MESSAGES = 500

_NOT_NAME = re.compile(r"[^A-Za-z0-9_-]")


class AgentCall(BaseModel):
    """The arguments of an agent's tool."""

    model_config = ConfigDict(extra="forbid", strict=True)

    message: str = Field(
        min_length=1, max_length=MAX_MESSAGE_CHARS, description="what to tell the agent"
    )
    thread_id: uuid.UUID | None = Field(
        default=None,
        description="continue this thread of the agent (from an earlier call's thread_id); "
        "without it, a new thread",
    )
    timeout_s: float = Field(
        default=DEFAULT_TIMEOUT_S, ge=0, le=MAX_TIMEOUT_S,
        description=f"seconds to wait for the answer (default {DEFAULT_TIMEOUT_S:.0f}, at most "
        f"{MAX_TIMEOUT_S:.0f}); the turn runs on past it, and read_thread_messages shows "
        "its answer later",
    )  # fmt: skip
    idempotency_key: str | None = Field(
        default=None, min_length=1, max_length=255,
        description="a repeat with the same key and arguments within 24 hours submits "
        "nothing and waits for the first call's turn",
    )  # fmt: skip

    @field_validator("thread_id", mode="before")
    @classmethod
    def _thread_id(cls, value: object) -> object:
        return _uuid(value)


class ReadThreadMessages(BaseModel):
    """The arguments of ``read_thread_messages``."""

    model_config = ConfigDict(extra="forbid", strict=True)

    thread_id: uuid.UUID = Field(description="the thread (an agent call's thread_id)")
    limit: int = Field(
        default=DEFAULT_MESSAGES, ge=1, le=MAX_MESSAGES,
        description=f"the newest this many messages, oldest first (default {DEFAULT_MESSAGES})",
    )  # fmt: skip

    @field_validator("thread_id", mode="before")
    @classmethod
    def _thread_id(cls, value: object) -> object:
        return _uuid(value)


class AnswerAction(BaseModel):
    """The arguments of ``answer_action``: respond_action's body, and where the action is."""

    model_config = ConfigDict(extra="forbid", strict=True)

    action_id: uuid.UUID = Field(description="the pending action (an agent call's actions)")
    thread_id: uuid.UUID | None = Field(default=None, description="the action's thread")
    decision: Literal["approve", "deny", "edit", "answer"] = Field(
        description="approve, deny or edit an approval; answer or deny an input request"
    )
    reason: str | None = Field(default=None, description="deny: what the model reads")
    arguments: dict[str, Any] | None = Field(
        default=None, description="edit: the call's new arguments"
    )
    data: dict[str, Any] | None = Field(default=None, description="answer: the input asked for")

    @field_validator("action_id", "thread_id", mode="before")
    @classmethod
    def _ids(cls, value: object) -> object:
        return _uuid(value)

    def body(self) -> dict[str, Any]:
        """respond_action's body: the decision and what it carries."""
        fields = ("decision", "reason", "arguments", "data")
        return {name: getattr(self, name) for name in fields if getattr(self, name) is not None}


def _uuid(value: object) -> object:
    """A string id as a UUID (strict mode takes no strings for UUIDs); ``value`` as it is
    otherwise, for the field's own check to refuse."""
    if isinstance(value, str):
        try:
            return uuid.UUID(value)
        except ValueError:
            raise ValueError("must be an id (a UUID)") from None
    return value


Arguments = AgentCall | ReadThreadMessages | AnswerAction


class BadArguments(ValidationFailed):
    """A tool's arguments break its input schema (``field`` names the first that does)."""


def arguments_of(model: type[Arguments], raw: Mapping[str, Any] | None) -> Any:
    """``raw`` checked as ``model``'s arguments. Raises BadArguments naming the first
    argument that is wrong."""
    try:
        return model.model_validate(dict(raw or {}))
    except ValidationError as error:
        first = error.errors()[0]
        where = ".".join(str(part) for part in first["loc"])
        message = str(first["msg"]).removeprefix("Value error, ")
        if first["type"] == "extra_forbidden":
            message = f"unknown argument {where!r}"
        raise BadArguments(f"{where or 'arguments'}: {message}", field=where or None) from None


def input_schema(model: type[Arguments]) -> dict[str, Any]:
    """``model``'s JSON Schema, as the tool's ``inputSchema``."""
    schema = model.model_json_schema()
    schema.pop("title", None)
    schema.pop("description", None)
    for name, prop in schema.get("properties", {}).items():
        prop.pop("title", None)
        options = prop.get("anyOf")
        if options and {"type": "null"} in options and prop.get("default", 0) is None:
            # An optional argument: its type alone (null is no value a caller need send).
            (kept,) = [option for option in options if option != {"type": "null"}]
            schema["properties"][name] = {**kept, "description": prop.get("description", "")}
    return schema


@dataclass(frozen=True)
class AgentTool:
    """One agent as a tool: the tool's name, the agent's, and what the tool says it does."""

    name: str
    agent: str
    description: str


@dataclass(frozen=True)
class AgentRow:
    """What the catalogue needs of an agent definition."""

    name: str
    description: str
    tool_description: str


def tool_name(name: str) -> str:
    """``name`` under the tool-name rules (before de-duplication)."""
    cleaned = _NOT_NAME.sub("_", name)[:MAX_NAME_CHARS]
    return cleaned or "agent"


def agent_tools(agents: Iterable[AgentRow]) -> list[AgentTool]:
    """The agents' tools, in the agents' order, each name unique and none a fixed tool's."""
    taken: set[str] = set(FIXED_TOOLS)
    tools: list[AgentTool] = []
    for agent in agents:
        base = tool_name(agent.name)
        name, n = base, 1
        while name in taken:
            n += 1
            suffix = f"_{n}"
            name = base[: MAX_NAME_CHARS - len(suffix)] + suffix
        taken.add(name)
        tools.append(AgentTool(name=name, agent=agent.name, description=_described(agent)))
    return tools


def _described(agent: AgentRow) -> str:
    said = agent.description.strip() or agent.tool_description.strip()
    how = (
        f"Sends a message to the agent {agent.name!r} and waits for its answer. The result "
        "names the thread_id: pass it again to continue the same conversation."
    )
    return f"{said}\n\n{how}" if said else how


FIXED_DESCRIPTIONS = {
    READ_THREAD_MESSAGES: "Reads a thread's messages (the newest `limit`, oldest first): "
    "what an agent answered after a call timed out, or the whole conversation.",
    ANSWER_ACTION: "Answers an action a paused turn waits for (an agent call lists them "
    "under `actions`): `approve`, `deny` (with a `reason`) or `edit` (with `arguments`) a "
    "tool call's approval; `answer` (with `data`) or `deny` an input request. The turn "
    "then resumes; call the agent's tool with the thread_id, or read_thread_messages, for "
    "its answer.",
}
FIXED_MODELS: dict[str, type[Arguments]] = {
    READ_THREAD_MESSAGES: ReadThreadMessages,
    ANSWER_ACTION: AnswerAction,
}
# The role each kind of tool needs: reading a thread, or acting on one.
FIXED_ROLES = {READ_THREAD_MESSAGES: Role.READ_ONLY, ANSWER_ACTION: Role.MEMBER}
AGENT_ROLE = Role.MEMBER


def schema_for(name: str) -> dict[str, Any]:
    """The input schema of the tool named ``name`` (an agent's, unless a fixed tool's)."""
    return input_schema(FIXED_MODELS.get(name, AgentCall))


def offered(role: Role, agents: Sequence[AgentTool]) -> list[tuple[str, str, dict[str, Any]]]:
    """``(name, description, input schema)`` of every tool ``role`` may call: the agents'
    (member and above), then the fixed tools it may use."""
    found: list[tuple[str, str, dict[str, Any]]] = []
    if role.allows(AGENT_ROLE):
        found.extend((tool.name, tool.description, input_schema(AgentCall)) for tool in agents)
    for name in FIXED_TOOLS:
        if role.allows(FIXED_ROLES[name]):
            found.append((name, FIXED_DESCRIPTIONS[name], input_schema(FIXED_MODELS[name])))
    return found

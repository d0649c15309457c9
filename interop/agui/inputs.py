"""An AG-UI ``RunAgentInput`` at the edge: validated with the protocol's own pydantic models
(``ag_ui.core``), then held to the API's rules (unknown keys refused, frontend tools with
usable names and schemas), and read as what the run asks of the thread: a new input (its
last message is the user's), or the answers to what a paused run waits for (a frontend
tool's ``tool`` messages, or ``resume`` entries answering interrupts).

Every refusal is a ``ValidationFailed`` naming the field as the body spells it (camelCase:
``messages[2].content``, ``tools[0].parameters``).
"""

from __future__ import annotations

import json
import re
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from typing import Any, Final

from ag_ui.core import (
    ResumeEntry,
    RunAgentInput,
    TextPart,
    Tool,
    ToolMessage,
    UserMessage,
)
from ag_ui.core.types import GeneratedBaseModel
from pydantic import BaseModel, ValidationError

from agents.schemas import check_schema
from common.errors import LimitExceeded, ValidationFailed

# What a provider accepts as a function name (OpenAI's rule, the strictest of ours).
TOOL_NAME = re.compile(r"^[A-Za-z0-9_-]{1,64}$")
MAX_TOOLS = 64
# The turn keeps the tools in its input; a cap like the metadata's (64 KiB).
MAX_TOOLS_BYTES = 48 * 1024
MAX_RESUME = 16
# The tags of the message union, which pydantic puts in an error's location.
_MESSAGE_ROLES = frozenset(
    {"developer", "system", "assistant", "user", "tool", "activity", "reasoning"}
)


@dataclass(frozen=True)
class ToolAnswer:
    """A frontend tool's result: the ``tool`` message answering call ``tool_call_id``."""

    tool_call_id: str
    content: str
    error: str | None
    field: str  # where it is in the body, for errors


@dataclass(frozen=True)
class ResumeAnswer:
    """A ``resume`` entry: the answer to interrupt (our action) ``interrupt_id``."""

    interrupt_id: str
    status: str
    payload: Any
    field: str


@dataclass(frozen=True)
class RunRequest:
    """What one AG-UI request asks: ``text`` (a new user input), or ``tool_answers`` and
    ``resume`` (the answers a paused run waits for); ``tools`` are the frontend's."""

    input: RunAgentInput
    text: str | None
    tool_answers: tuple[ToolAnswer, ...]
    resume: tuple[ResumeAnswer, ...]
    tools: tuple[Tool, ...]

    @property
    def thread_id(self) -> str:
        return self.input.thread_id

    @property
    def run_id(self) -> str:
        return self.input.run_id


_TOP_LEVEL_KEYS: Final = frozenset(
    key for name, info in RunAgentInput.model_fields.items() for key in (name, info.alias or name)
)


def run_request_parse(body: object) -> RunRequest:
    """The request ``body`` as a :class:`RunRequest`. Raises ValidationFailed naming the
    first field that is wrong."""
    if not isinstance(body, Mapping):
        raise ValidationFailed("the body must be a JSON object (an AG-UI RunAgentInput)")
    # An unknown key is named before what is missing: a body of the wrong shape altogether
    # is told so by its first foreign key.
    unknown = sorted(set(body) - _TOP_LEVEL_KEYS)
    if unknown:
        raise ValidationFailed(f"{unknown[0]}: unknown field", field=unknown[0])
    try:
        parsed = RunAgentInput.model_validate(dict(body))
    except ValidationError as error:
        field, message = _first_error(error)
        raise ValidationFailed(f"{field}: {message}" if field else message, field=field) from None
    _unknown_keys(parsed, "")
    if not parsed.thread_id.strip():
        raise ValidationFailed("threadId: must not be empty", field="threadId")
    if not parsed.run_id.strip():
        raise ValidationFailed("runId: must not be empty", field="runId")
    tools = _tools(parsed.tools or [])
    resume = _resume(parsed.resume or [])
    if resume:
        return RunRequest(parsed, None, (), resume, tools)
    answers = _tool_answers(parsed)
    if answers:
        return RunRequest(parsed, None, answers, (), tools)
    return RunRequest(parsed, _user_text(parsed), (), (), tools)


def _first_error(error: ValidationError) -> tuple[str, str]:
    """The first problem's field path (camelCase, as in the body) and message."""
    item = error.errors(include_url=False)[0]
    path = ""
    previous: object = None
    for part in item["loc"]:
        if isinstance(part, int):
            path = f"{path}[{part}]"
        elif _is_tag(part, previous):
            pass
        else:
            path = f"{path}.{part}" if path else str(part)
        previous = part
    return path, str(item["msg"]).removeprefix("Value error, ")


def _is_tag(part: str, previous: object) -> bool:
    """Whether a location part names a union member rather than a field: a message's role
    after its index, or a type (``str``, ``list[...]``, a class name)."""
    if isinstance(previous, int) and part in _MESSAGE_ROLES:
        return True
    return part[:1].isupper() or "[" in part or part in ("str", "int", "float", "bool", "dict")


def _unknown_keys(model: BaseModel, path: str) -> None:
    """Refuse a key the protocol's models do not declare (they keep unknown keys; the API
    refuses them, as every JSON body's unknown key), anywhere in the body's models."""
    extra = model.model_extra or {}
    if extra:
        name = sorted(extra)[0]
        field = f"{path}.{name}" if path else name
        raise ValidationFailed(f"{field}: unknown field", field=field)
    for name, info in type(model).model_fields.items():
        key = info.alias or name
        _unknown_in(getattr(model, name), f"{path}.{key}" if path else key)


def _unknown_in(value: object, path: str) -> None:
    if isinstance(value, GeneratedBaseModel):
        _unknown_keys(value, path)
    elif isinstance(value, list):
        for index, item in enumerate(value):
            _unknown_in(item, f"{path}[{index}]")


def _tools(tools: Sequence[Tool]) -> tuple[Tool, ...]:
    """The frontend's tools, each with a name a provider accepts (unique) and parameters
    that describe an object (JSON Schema)."""
    if len(tools) > MAX_TOOLS:
        raise ValidationFailed(f"tools: at most {MAX_TOOLS}", field="tools")
    seen: set[str] = set()
    for index, tool in enumerate(tools):
        field = f"tools[{index}]"
        if not TOOL_NAME.match(tool.name):
            raise ValidationFailed(
                f"{field}.name: must be 1-64 letters, digits, underscores or hyphens",
                field=f"{field}.name",
            )
        if tool.name in seen:
            raise ValidationFailed(
                f"{field}.name: {tool.name!r} is named twice", field=f"{field}.name"
            )
        seen.add(tool.name)
        if tool.parameters is not None:
            problems = check_schema(tool.parameters)
            if problems:
                problem = problems[0]
                raise ValidationFailed(
                    f"{field}.parameters: {problem.message}", field=f"{field}.parameters"
                )
    size = len(json.dumps([tool.model_dump(mode="json") for tool in tools]))
    if size > MAX_TOOLS_BYTES:
        raise LimitExceeded(
            f"tools: {size} bytes of JSON; the limit is {MAX_TOOLS_BYTES}", field="tools"
        )
    return tuple(tools)


def _resume(entries: Sequence[ResumeEntry]) -> tuple[ResumeAnswer, ...]:
    if len(entries) > MAX_RESUME:
        raise ValidationFailed(f"resume: at most {MAX_RESUME} entries", field="resume")
    return tuple(
        ResumeAnswer(entry.interrupt_id, entry.status, entry.payload, f"resume[{index}]")
        for index, entry in enumerate(entries)
    )


def _tool_answers(parsed: RunAgentInput) -> tuple[ToolAnswer, ...]:
    """The ``tool`` messages that end ``messages`` (the results of frontend tool calls),
    oldest first; none when the last message is not one."""
    answers: list[ToolAnswer] = []
    index = len(parsed.messages) - 1
    while index >= 0 and isinstance(parsed.messages[index], ToolMessage):
        message = parsed.messages[index]
        assert isinstance(message, ToolMessage)
        field = f"messages[{index}]"
        content = _text(message.content, f"{field}.content")
        answers.insert(0, ToolAnswer(message.tool_call_id, content, message.error, field))
        index -= 1
    return tuple(answers)


def _user_text(parsed: RunAgentInput) -> str:
    """The text of the last message, which must be the user's (the turn's input)."""
    if not parsed.messages:
        raise ValidationFailed(
            "messages: the run needs a user message to answer (or resume, or a tool "
            "message answering a frontend tool call)",
            field="messages",
        )
    index = len(parsed.messages) - 1
    last = parsed.messages[index]
    if not isinstance(last, UserMessage):
        raise ValidationFailed(
            f"messages[{index}].role: the last message must be the user's (a new input) or "
            "a tool message (a frontend tool's result)",
            field=f"messages[{index}].role",
        )
    text = _text(last.content, f"messages[{index}].content")
    if not text.strip():
        raise ValidationFailed(
            f"messages[{index}].content: must not be empty", field=f"messages[{index}].content"
        )
    return text


def _text(content: str | Sequence[Any], field: str) -> str:
    """A message's content as text: a string, or text parts joined by blank lines (only
    text parts are taken)."""
    if isinstance(content, str):
        return content
    texts: list[str] = []
    for index, part in enumerate(content):
        if not isinstance(part, TextPart):
            raise ValidationFailed(
                f"{field}[{index}]: only text parts are taken", field=f"{field}[{index}]"
            )
        texts.append(part.text)
    return "\n\n".join(texts)

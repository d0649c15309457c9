"""Context assembly (spec Runtime §4, DIGEST 4.1, 13, 18.3, 18.4): the system prompt and history.

Pure functions: the caller loads prompts, resolves env and reads files, and passes them in as
callables, so nothing here touches the database or the file store.
"""

from __future__ import annotations

import base64
import json
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass, replace
from typing import Any, Literal

from agents.documents import EnvPart, IncludePart, PromptDoc, TextPart, VariablePart
from agents.providers.base import ContentPart, ImagePart, LLMMessage, Role, ToolCall
from agents.providers.base import TextPart as ContentText
from threads.services.message_shapes import tool_calls_json

EnvType = Literal["text", "secret"]
SystemEnv = Callable[[str], tuple[str, EnvType] | None]
"""``state.env`` for prompt rendering: the value and its type, or None when the name is unset."""

MAX_INCLUDE_DEPTH = 16

# The system prompt -----------------------------------------------------------------------------


def render_system_prompt(
    prompt: PromptDoc,
    *,
    load_prompt: Callable[[str], PromptDoc | None],
    env: SystemEnv,
    variables: Mapping[str, Any],
) -> str:
    """The prompt's parts concatenated with no separator (DIGEST 4.1).

    * ``text``: its content.
    * ``include``: the named prompt rendered the same way; ``[Prompt not found: name]`` when
      ``load_prompt`` returns None; ``[Prompt include cycle: a -> b -> a]`` instead of recursing
      when the name is already being rendered or the include would nest deeper than
      :data:`MAX_INCLUDE_DEPTH` (validation rejects cycles, but definitions change under a
      running thread).
    * ``env``: the value when its type is ``text``; empty when unset **or secret**. Secrets are
      for tools only (spec §11): the model must never see one, so a ``secret`` value is never
      rendered, not even by a prompt that names it explicitly.
    * ``variable``: ``variables[key]``, strings as they are and other values as compact JSON
      (like ``JSON.stringify``); the literal ``{{key}}`` when the key is absent.
    """
    return _render(prompt, (prompt.name,), load_prompt=load_prompt, env=env, variables=variables)


def _render(
    prompt: PromptDoc,
    chain: tuple[str, ...],
    *,
    load_prompt: Callable[[str], PromptDoc | None],
    env: SystemEnv,
    variables: Mapping[str, Any],
) -> str:
    pieces: list[str] = []
    for part in prompt.prompt:
        if isinstance(part, TextPart):
            pieces.append(part.content)
        elif isinstance(part, IncludePart):
            pieces.append(
                _render_include(
                    part.prompt, chain, load_prompt=load_prompt, env=env, variables=variables
                )
            )
        elif isinstance(part, EnvPart):
            pieces.append(_render_env(part.property, env))
        elif isinstance(part, VariablePart):
            pieces.append(_render_variable(part.value, variables))
    return "".join(pieces)


def _render_include(
    name: str,
    chain: tuple[str, ...],
    *,
    load_prompt: Callable[[str], PromptDoc | None],
    env: SystemEnv,
    variables: Mapping[str, Any],
) -> str:
    if name in chain:
        cycle = (*chain[chain.index(name) :], name)
        return f"[Prompt include cycle: {' -> '.join(cycle)}]"
    if len(chain) > MAX_INCLUDE_DEPTH:
        return f"[Prompt include cycle: {' -> '.join((*chain, name))}]"
    included = load_prompt(name)
    if included is None:
        return f"[Prompt not found: {name}]"
    return _render(included, (*chain, name), load_prompt=load_prompt, env=env, variables=variables)


def _render_env(name: str, env: SystemEnv) -> str:
    found = env(name)
    if found is None:
        return ""
    value, kind = found
    return value if kind == "text" else ""


def _render_variable(key: str, variables: Mapping[str, Any]) -> str:
    if key not in variables:
        return "{{" + key + "}}"
    value = variables[key]
    if isinstance(value, str):
        return value
    return json.dumps(value, ensure_ascii=False, separators=(",", ":"), default=str)


# Tool calls as stored --------------------------------------------------------------------------


def stored_tool_calls(raw: str | Sequence[Any] | None) -> list[ToolCall]:
    """The calls of a stored message's ``tool_calls`` (the JSON string or the parsed list),
    read by :func:`tool_calls_json`'s rules."""
    return [
        ToolCall(id=call["id"], name=call["name"], arguments=call["arguments"])
        for call in tool_calls_json(raw)
    ]


# History ---------------------------------------------------------------------------------------


@dataclass(frozen=True)
class HistoryOptions:
    """How :func:`history_to_llm` shapes a history for the side about to take a step.

    ``relabel`` applies the perspective transform; it is False only for side A acting with a
    human side B (``ai_human``). ``vision`` says the model accepts images. Messages with
    ``seq > flow_start_seq`` were added during the current flow. Images are sent as images
    only on the last ``recent_image_threshold`` messages of the output. ``reasoning`` maps
    message ids to the reasoning replayed with them (a prompt's ``reasoning.include``).
    """

    include_past_tools: bool
    acting_side: Literal["a", "b"]
    relabel: bool
    vision: bool
    flow_start_seq: int
    recent_image_threshold: int = 10
    reasoning: Mapping[str, str] | None = None


@dataclass(frozen=True)
class _Row:
    role: Role
    side: str | None
    seq: int
    content: str | None
    calls: tuple[ToolCall, ...]
    tool_call_id: str | None
    name: str | None
    attachments: tuple[Mapping[str, Any], ...]
    reasoning: str | None = None

    @property
    def is_empty(self) -> bool:
        """Nothing left to send; tool results always count, their call needs them."""
        return (
            self.role != "tool"
            and not _has_text(self.content)
            and not self.calls
            and not self.attachments
        )


_SWAPPED: dict[Role, Role] = {"assistant": "user", "user": "assistant"}


def history_to_llm(
    messages: Sequence[Mapping[str, Any]],
    options: HistoryOptions,
    *,
    read_file: Callable[[str], bytes | None],
) -> list[LLMMessage]:
    """The conversation history as the acting side's model sees it (DIGEST 18.3, 18.4).

    ``messages`` are hook-visible messages (``message_json`` plus ``seq``) already selected
    (top level, ``include_chat``) and filtered by ``filter_messages``, in ``seq`` order,
    without the system prompt. In order:

    1. Pending messages are skipped.
    2. Without ``include_past_tools``, messages up to ``flow_start_seq`` lose their tool calls
       and tool results; the current flow keeps them, or a step could not see the result of
       the tool it just called.
    3. With ``relabel``, the acting side sees itself as ``assistant`` and the other side as
       ``user`` (for side B stored ``assistant`` and ``user`` swap); the other side's tool
       calls and results are hidden. ``system`` and ``tool`` roles are unchanged.
    4. Calls and results are paired: a result answering no earlier kept call is dropped, and
       an unanswered call is stripped unless it is on the last message, because providers
       reject a call not followed by its result. Only ``assistant`` messages keep calls.
    5. Messages left with no text, no calls and no attachments are dropped.
    6. Attachments of ``user`` messages become parts: images as :class:`ImagePart` when
       ``vision`` and the message is among the last ``recent_image_threshold`` of the output
       and ``read_file`` has the bytes, otherwise ``[Image: name (WxH)] description``; other
       files one ``[Attached files: name (/path), ...]`` part. Other roles get the same notes
       appended to their text, as they take no parts.

    Consecutive messages of the same role are kept apart, not merged.
    """
    said = options.reasoning or {}
    rows = [_row(m, said.get(str(m.get("id")))) for m in messages if m.get("status") != "pending"]
    if not options.include_past_tools:
        rows = _without_past_tools(rows, options.flow_start_seq)
    if options.relabel:
        rows = _from_side(rows, options.acting_side)
    rows = [row for row in _paired(rows) if not row.is_empty]
    return [
        _to_llm(
            row,
            recent=len(rows) - index <= options.recent_image_threshold,
            vision=options.vision,
            read_file=read_file,
        )
        for index, row in enumerate(rows)
    ]


def _row(message: Mapping[str, Any], reasoning: str | None) -> _Row:
    return _Row(
        role=message["role"],
        side=message.get("side") or None,
        seq=int(message["seq"]),
        content=message.get("content"),
        calls=tuple(stored_tool_calls(message.get("tool_calls"))),
        tool_call_id=message.get("tool_call_id") or None,
        name=message.get("name") or None,
        attachments=tuple(message.get("attachments") or ()),
        reasoning=reasoning,
    )


def _without_past_tools(rows: Sequence[_Row], flow_start_seq: int) -> list[_Row]:
    kept: list[_Row] = []
    for row in rows:
        if row.seq > flow_start_seq:
            kept.append(row)
        elif row.role != "tool":
            kept.append(replace(row, calls=()))
    return kept


def _from_side(rows: Sequence[_Row], acting_side: Literal["a", "b"]) -> list[_Row]:
    kept: list[_Row] = []
    for row in rows:
        if row.side != acting_side:
            if row.role == "tool":
                continue
            row = replace(row, calls=())
        if acting_side == "b":
            row = replace(row, role=_SWAPPED.get(row.role, row.role))
        kept.append(row)
    return kept


def _paired(rows: Sequence[_Row]) -> list[_Row]:
    # Keyed by (row index, call id): an id need only be unique within one response (scripted
    # models reuse them across steps), so a result answers the latest open call with its id.
    open_calls: dict[str, tuple[int, ToolCall]] = {}
    answered: set[tuple[int, str]] = set()
    names: dict[int, str] = {}
    for index, row in enumerate(rows):
        if row.role == "assistant":
            open_calls.update((call.id, (index, call)) for call in row.calls)
        elif row.role == "tool" and row.tool_call_id in open_calls:
            owner, call = open_calls.pop(row.tool_call_id)
            answered.add((owner, call.id))
            names[index] = call.name
    last = len(rows) - 1
    kept: list[_Row] = []
    for index, row in enumerate(rows):
        if row.role == "tool":
            if index in names:
                kept.append(replace(row, name=row.name or names[index]))
        elif row.role != "assistant":
            kept.append(replace(row, calls=()))
        elif index == last:
            kept.append(row)
        else:
            calls = tuple(call for call in row.calls if (index, call.id) in answered)
            kept.append(replace(row, calls=calls))
    return kept


def _to_llm(
    row: _Row, *, recent: bool, vision: bool, read_file: Callable[[str], bytes | None]
) -> LLMMessage:
    content = row.content if _has_text(row.content) else None
    if row.role == "tool":
        assert row.tool_call_id is not None  # _paired keeps only results that answer a call
        return LLMMessage.tool(
            tool_call_id=row.tool_call_id, name=row.name or "", content=row.content or ""
        )
    if row.role == "user":
        parts = _attachment_parts(row.attachments, images=vision and recent, read_file=read_file)
        return LLMMessage.user(content, *parts)
    notes = _attachment_notes(row.attachments)
    text = "\n".join([content, *notes] if content else notes) or None
    if row.role == "assistant":
        return LLMMessage.assistant(text, row.calls, row.reasoning)
    return LLMMessage.system(text or "")


def _attachment_parts(
    attachments: Sequence[Mapping[str, Any]],
    *,
    images: bool,
    read_file: Callable[[str], bytes | None],
) -> list[ContentPart]:
    parts: list[ContentPart] = []
    for attachment in filter(_is_image, attachments):
        data = read_file(_path(attachment)) if images else None
        if data is None:
            parts.append(ContentText(_image_note(attachment)))
        else:
            encoded = base64.b64encode(data).decode("ascii")
            parts.append(ImagePart(mime_type=str(attachment["mimeType"]), data=encoded))
    files = _files_note(attachments)
    if files:
        parts.append(ContentText(files))
    return parts


def _attachment_notes(attachments: Sequence[Mapping[str, Any]]) -> list[str]:
    notes = [_image_note(attachment) for attachment in filter(_is_image, attachments)]
    files = _files_note(attachments)
    return [*notes, files] if files else notes


def _is_image(attachment: Mapping[str, Any]) -> bool:
    return str(attachment.get("mimeType") or "").startswith("image/")


def _path(attachment: Mapping[str, Any]) -> str:
    return str(attachment.get("path") or "")


def _name(attachment: Mapping[str, Any]) -> str:
    return str(attachment.get("name") or _path(attachment))


def _image_note(attachment: Mapping[str, Any]) -> str:
    width, height = attachment.get("width"), attachment.get("height")
    name = _name(attachment)
    note = f"[Image: {name} ({width}x{height})]" if width and height else f"[Image: {name}]"
    description = attachment.get("description")
    return f"{note} {description}" if description else note


def _files_note(attachments: Sequence[Mapping[str, Any]]) -> str | None:
    files = [
        f"{_name(attachment)} ({_path(attachment)})"
        for attachment in attachments
        if not _is_image(attachment)
    ]
    return f"[Attached files: {', '.join(files)}]" if files else None


def _has_text(content: str | None) -> bool:
    return bool(content and content.strip())

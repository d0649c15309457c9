"""Anthropic Messages over the official ``anthropic`` SDK.

Conversation shaping: the leading system messages become the ``system`` parameter; a system
message later in the conversation (for example "Execution stopped by user") is relayed as a
user text ``[system] ...`` so its position is kept. Tool results travel as ``tool_result``
blocks of a user message, assistant tool calls as ``tool_use`` blocks, and consecutive messages
of one role are merged (tool results first), as the API requires alternating roles.

``max_tokens`` is mandatory here: the request's ``max_output_tokens``, else the model's
``capabilities.max_output_tokens``, else 4096. Extended thinking is enabled by a
``ReasoningConfig``: ``max_tokens`` is the thinking budget, or ``effort`` picks one
(low 1024, medium 4096, high 16384); ``max_tokens`` is raised above the budget when needed.
``ModelSpec.config`` extras: ``timeout_s`` and ``provider_options`` (merged into the body).
"""

from __future__ import annotations

from collections.abc import Iterator, Sequence
from dataclasses import dataclass, field
from types import ModuleType
from typing import Any, ClassVar, Final

import anthropic
from anthropic.types import Message, RawMessageStreamEvent

from agents.providers._sdk import (
    DeltaRuns,
    SDKProvider,
    parse_arguments,
    provider_options,
)
from agents.providers.base import (
    OFFICIAL_BASE_URLS,
    Finish,
    FinishReason,
    ImagePart,
    LLMMessage,
    ModelSpec,
    ProviderError,
    ProviderRequest,
    ProviderResponse,
    ReasoningConfig,
    StreamChunk,
    TextPart,
    ToolCall,
    ToolCallDone,
    ToolCallStart,
    Usage,
)
from agents.providers.schemas import provider_tool_schema

PROVIDER: Final = "anthropic"
DEFAULT_BASE_URL: Final = OFFICIAL_BASE_URLS["anthropic"]
DEFAULT_MAX_TOKENS: Final = 4096
MIN_THINKING_BUDGET: Final = 1024
_BUDGET_FOR_EFFORT: Final = {"low": 1024, "medium": 4096, "high": 16384}
_FINISH: Final[dict[str, FinishReason]] = {
    "end_turn": "stop",
    "stop_sequence": "stop",
    "pause_turn": "stop",
    "tool_use": "tool_calls",
    "max_tokens": "length",
    "model_context_window_exceeded": "length",
    "refusal": "content_filter",
}


class AnthropicProvider(SDKProvider):
    """The :class:`~agents.providers.base.Provider` for ``kind == "anthropic"``."""

    sdk: ClassVar[ModuleType] = anthropic
    client_class: ClassVar[type] = anthropic.Anthropic
    default_base_url: ClassVar[str] = DEFAULT_BASE_URL

    def _create(self, client: Any, params: dict[str, Any]) -> Any:
        return client.messages.create(**params)

    def _open_stream(self, client: Any, params: dict[str, Any]) -> Any:
        return client.messages.create(**params, stream=True)

    def _chunks(self, events: Any) -> Iterator[StreamChunk]:
        return _StreamAssembler(self.spec).run(events)

    # Request -----------------------------------------------------------------------------------

    def _params(self, request: ProviderRequest) -> dict[str, Any]:
        system, messages = conversation(request.messages)
        max_tokens = (
            request.max_output_tokens
            or self.spec.capabilities.max_output_tokens
            or DEFAULT_MAX_TOKENS
        )
        params: dict[str, Any] = {"model": self.spec.model_id, "messages": messages}
        if system:
            params["system"] = system
        if request.tools:
            params["tools"] = [
                {
                    "name": tool.name,
                    "description": tool.description,
                    "input_schema": provider_tool_schema(tool.parameters),
                }
                for tool in request.tools
            ]
            params["tool_choice"] = _tool_choice(request.tool_choice, request.parallel_tool_calls)
        budget = _thinking_budget(request.reasoning)
        if budget is not None:
            params["thinking"] = {"type": "enabled", "budget_tokens": budget}
            max_tokens = max(max_tokens, budget + MIN_THINKING_BUDGET)
        params["max_tokens"] = max_tokens
        options = provider_options(self.spec, request)
        if options:
            params["extra_body"] = options
        return params

    # Response ----------------------------------------------------------------------------------

    def _response(self, message: Message) -> ProviderResponse:
        content: list[str] = []
        reasoning: list[str] = []
        tool_calls: list[ToolCall] = []
        for block in message.content:
            if block.type == "text":
                content.append(block.text)
            elif block.type == "thinking":
                reasoning.append(block.thinking)
            elif block.type == "tool_use":
                if not isinstance(block.input, dict):
                    raise ProviderError(
                        f"anthropic model '{self.spec.name}' sent non-object input for tool "
                        f"'{block.name}'",
                        provider=PROVIDER,
                        model=self.spec.name,
                        code="provider_bad_tool_arguments",
                    )
                tool_calls.append(ToolCall(id=block.id, name=block.name, arguments=block.input))
        usage = message.usage
        details = usage.output_tokens_details
        return ProviderResponse(
            content="".join(content),
            reasoning="".join(reasoning),
            tool_calls=tuple(tool_calls),
            finish_reason=_FINISH.get(message.stop_reason or "end_turn", "stop"),
            usage=_usage(
                input_tokens=usage.input_tokens,
                output_tokens=usage.output_tokens,
                cache_read=usage.cache_read_input_tokens or 0,
                cache_creation=usage.cache_creation_input_tokens or 0,
                thinking=details.thinking_tokens if details else 0,
            ),
            model_id=message.model or self.spec.model_id,
            provider=PROVIDER,
        )


# Conversation shaping --------------------------------------------------------------------------


def conversation(messages: Sequence[LLMMessage]) -> tuple[str, list[dict[str, Any]]]:
    """The ``system`` text and the alternating ``messages`` of a Messages API request."""
    system: list[str] = []
    turns: list[tuple[str, list[dict[str, Any]]]] = []
    leading = True
    for message in messages:
        if message.role == "system" and leading:
            system.append(message.text)
            continue
        leading = False
        role, blocks = _blocks(message)
        if not blocks:
            continue
        if turns and turns[-1][0] == role:
            turns[-1][1].extend(blocks)
        else:
            turns.append((role, blocks))
    return "\n\n".join(text for text in system if text), [
        {"role": role, "content": _tool_results_first(blocks)} for role, blocks in turns
    ]


def _blocks(message: LLMMessage) -> tuple[str, list[dict[str, Any]]]:
    if message.role == "system":
        return "user", [{"type": "text", "text": f"[system] {message.text}"}]
    if message.role == "tool":
        result = {
            "type": "tool_result",
            "tool_use_id": message.tool_call_id,
            "content": message.text,
        }
        return "user", [result]
    if message.role == "assistant":
        blocks: list[dict[str, Any]] = []
        if message.content and message.content.strip():
            blocks.append({"type": "text", "text": message.content})
        blocks.extend(
            {"type": "tool_use", "id": call.id, "name": call.name, "input": call.arguments}
            for call in message.tool_calls
        )
        return "assistant", blocks
    return "user", [_part(part) for part in message.content_parts() if _has_content(part)]


def _has_content(part: TextPart | ImagePart) -> bool:
    return not isinstance(part, TextPart) or bool(part.text)


def _part(part: TextPart | ImagePart) -> dict[str, Any]:
    if isinstance(part, TextPart):
        return {"type": "text", "text": part.text}
    if part.url is not None:
        return {"type": "image", "source": {"type": "url", "url": part.url}}
    return {
        "type": "image",
        "source": {"type": "base64", "media_type": part.mime_type, "data": part.data},
    }


def _tool_results_first(blocks: list[dict[str, Any]]) -> list[dict[str, Any]]:
    """The API wants a user turn's ``tool_result`` blocks before its other content."""
    results = [block for block in blocks if block["type"] == "tool_result"]
    return results + [block for block in blocks if block["type"] != "tool_result"]


def _tool_choice(choice: str, parallel: bool | None) -> dict[str, Any]:
    if choice == "none":
        return {"type": "none"}
    shaped: dict[str, Any]
    if choice == "auto":
        shaped = {"type": "auto"}
    elif choice == "required":
        shaped = {"type": "any"}
    else:
        shaped = {"type": "tool", "name": choice}
    if parallel is False:
        shaped["disable_parallel_tool_use"] = True
    return shaped


def _thinking_budget(reasoning: ReasoningConfig | None) -> int | None:
    if reasoning is None:
        return None
    if reasoning.max_tokens is not None:
        return max(reasoning.max_tokens, MIN_THINKING_BUDGET)
    if reasoning.effort is not None:
        return _BUDGET_FOR_EFFORT[reasoning.effort]
    return None


def _usage(
    *, input_tokens: int, output_tokens: int, cache_read: int, cache_creation: int, thinking: int
) -> Usage:
    prompt = input_tokens + cache_read + cache_creation
    return Usage(
        prompt_tokens=prompt,
        completion_tokens=output_tokens,
        total_tokens=prompt + output_tokens,
        reasoning_tokens=thinking,
        cached_tokens=cache_read,
    )


# Streaming -------------------------------------------------------------------------------------


@dataclass
class _ToolBlock:
    id: str
    name: str
    json: list[str] = field(default_factory=list)


class _StreamAssembler:
    """Messages stream events -> stream chunks."""

    def __init__(self, spec: ModelSpec) -> None:
        self.spec = spec
        self.runs = DeltaRuns()
        self.tools: dict[int, _ToolBlock] = {}
        self.stop_reason: str | None = None
        self.model_id = spec.model_id
        self.input_tokens = 0
        self.output_tokens = 0
        self.cache_read = 0
        self.cache_creation = 0
        self.thinking_tokens = 0

    def run(self, events: Iterator[RawMessageStreamEvent]) -> Iterator[StreamChunk]:
        for event in events:
            yield from self._event(event)
        if self.stop_reason is None:
            raise ProviderError(
                f"anthropic model '{self.spec.name}' ended its stream without a stop reason",
                retryable=True,
                provider=PROVIDER,
                model=self.spec.name,
            )
        yield from self.runs.close()
        yield Finish(
            finish_reason=_FINISH.get(self.stop_reason, "stop"),
            usage=_usage(
                input_tokens=self.input_tokens,
                output_tokens=self.output_tokens,
                cache_read=self.cache_read,
                cache_creation=self.cache_creation,
                thinking=self.thinking_tokens,
            ),
            model_id=self.model_id,
            provider=PROVIDER,
        )

    def _event(self, event: RawMessageStreamEvent) -> Iterator[StreamChunk]:
        if event.type == "message_start":
            message = event.message
            self.model_id = message.model or self.model_id
            self.input_tokens = message.usage.input_tokens
            self.output_tokens = message.usage.output_tokens
            self.cache_read = message.usage.cache_read_input_tokens or 0
            self.cache_creation = message.usage.cache_creation_input_tokens or 0
        elif event.type == "content_block_start":
            block = event.content_block
            if block.type == "text":
                yield from self.runs.content(block.text)
            elif block.type == "thinking":
                yield from self.runs.reasoning(block.thinking)
            elif block.type == "tool_use":
                yield from self.runs.close()
                self.tools[event.index] = _ToolBlock(id=block.id, name=block.name)
                yield ToolCallStart(id=block.id, name=block.name)
        elif event.type == "content_block_delta":
            delta = event.delta
            if delta.type == "text_delta":
                yield from self.runs.content(delta.text)
            elif delta.type == "thinking_delta":
                yield from self.runs.reasoning(delta.thinking)
            elif delta.type == "input_json_delta" and event.index in self.tools:
                self.tools[event.index].json.append(delta.partial_json)
        elif event.type == "content_block_stop" and event.index in self.tools:
            tool = self.tools.pop(event.index)
            arguments = parse_arguments("".join(tool.json), tool=tool.name, spec=self.spec)
            yield ToolCallDone(id=tool.id, name=tool.name, arguments=arguments)
        elif event.type == "message_delta":
            self.stop_reason = event.delta.stop_reason or self.stop_reason
            usage = event.usage
            self.output_tokens = usage.output_tokens
            if usage.input_tokens is not None:
                self.input_tokens = usage.input_tokens
            if usage.cache_read_input_tokens is not None:
                self.cache_read = usage.cache_read_input_tokens
            if usage.cache_creation_input_tokens is not None:
                self.cache_creation = usage.cache_creation_input_tokens
            if usage.output_tokens_details is not None:
                self.thinking_tokens = usage.output_tokens_details.thinking_tokens

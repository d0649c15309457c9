"""OpenAI-compatible Chat Completions over the official ``openai`` SDK.

Covers OpenAI, vLLM, Ollama, llama.cpp and OpenRouter through ``ModelSpec.base_url``.
``ModelSpec.config`` extras: ``timeout_s``, ``provider_options`` (merged into the body) and
``max_tokens_param`` (``"max_completion_tokens"``, the default, or ``"max_tokens"`` for servers
that only know the older name). Reasoning text is read from the ``reasoning_content`` or
``reasoning`` field that OpenAI-compatible servers add; ``ReasoningConfig.max_tokens`` has no
Chat Completions equivalent and is ignored (``effort`` becomes ``reasoning_effort``). Replayed
reasoning (a prompt's ``reasoning.include``) goes back in the assistant message's
``reasoning_content``, the field such servers read it from.
"""

from __future__ import annotations

import json
from collections.abc import Iterator
from dataclasses import dataclass
from types import ModuleType
from typing import Any, ClassVar, Final

import openai
from openai.types import CompletionUsage
from openai.types.chat import ChatCompletion, ChatCompletionChunk
from openai.types.chat.chat_completion_chunk import Choice as ChunkChoice

from agents.providers._sdk import (
    DeltaRuns,
    SDKProvider,
    parse_arguments,
    provider_options,
)
from agents.providers.base import (
    NO_USAGE,
    OFFICIAL_BASE_URLS,
    TOOL_CHOICE_MODES,
    Finish,
    FinishReason,
    ImagePart,
    LLMMessage,
    ModelSpec,
    ProviderError,
    ProviderRequest,
    ProviderResponse,
    StreamChunk,
    TextPart,
    ToolCall,
    ToolCallDone,
    ToolCallStart,
    Usage,
)
from agents.providers.config_keys import MAX_TOKENS_PARAMS
from agents.providers.schemas import provider_tool_schema

PROVIDER: Final = "openai"
DEFAULT_BASE_URL: Final = OFFICIAL_BASE_URLS["openai"]
_FINISH: Final[dict[str, FinishReason]] = {
    "stop": "stop",
    "tool_calls": "tool_calls",
    "function_call": "tool_calls",
    "length": "length",
    "content_filter": "content_filter",
}


class OpenAIProvider(SDKProvider):
    """The :class:`~agents.providers.base.Provider` for ``kind == "openai"``."""

    sdk: ClassVar[ModuleType] = openai
    client_class: ClassVar[type] = openai.OpenAI
    default_base_url: ClassVar[str] = DEFAULT_BASE_URL

    def _create(self, client: Any, params: dict[str, Any]) -> Any:
        return client.chat.completions.create(**params)

    def _open_stream(self, client: Any, params: dict[str, Any]) -> Any:
        return client.chat.completions.create(
            **params, stream=True, stream_options={"include_usage": True}
        )

    def _chunks(self, events: Any) -> Iterator[StreamChunk]:
        return _StreamAssembler(self.spec).run(events)

    # Request -----------------------------------------------------------------------------------

    def _params(self, request: ProviderRequest) -> dict[str, Any]:
        params: dict[str, Any] = {
            "model": self.spec.model_id,
            "messages": [_message(message) for message in request.messages],
        }
        if request.tools:
            params["tools"] = [
                {
                    "type": "function",
                    "function": {
                        "name": tool.name,
                        "description": tool.description,
                        "parameters": provider_tool_schema(tool.parameters),
                    },
                }
                for tool in request.tools
            ]
            params["tool_choice"] = _tool_choice(request.tool_choice)
            if request.parallel_tool_calls is not None:
                params["parallel_tool_calls"] = request.parallel_tool_calls
        if request.max_output_tokens is not None:
            name = self.spec.config.get("max_tokens_param", MAX_TOKENS_PARAMS[0])
            params[str(name)] = request.max_output_tokens
        if request.reasoning is not None and request.reasoning.effort is not None:
            params["reasoning_effort"] = request.reasoning.effort
        options = provider_options(self.spec, request)
        if options:
            params["extra_body"] = options
        return params

    # Response ----------------------------------------------------------------------------------

    def _response(self, completion: ChatCompletion) -> ProviderResponse:
        if not completion.choices:
            raise ProviderError(
                f"openai model '{self.spec.name}' answered without a choice",
                retryable=True,
                provider=PROVIDER,
                model=self.spec.name,
            )
        choice = completion.choices[0]
        message = choice.message
        tool_calls = tuple(
            ToolCall(
                id=call.id,
                name=call.function.name,
                arguments=parse_arguments(
                    call.function.arguments, tool=call.function.name, spec=self.spec
                ),
            )
            for call in message.tool_calls or ()
            if call.type == "function"
        )
        return ProviderResponse(
            content=message.content or "",
            reasoning=_extra_text(message),
            tool_calls=tool_calls,
            finish_reason=_finish_reason(choice.finish_reason, has_tool_calls=bool(tool_calls)),
            usage=_usage(completion.usage),
            model_id=completion.model or self.spec.model_id,
            provider=PROVIDER,
        )


@dataclass
class _PartialCall:
    id: str = ""
    name: str = ""
    arguments: str = ""
    started: bool = False


class _StreamAssembler:
    """Chat Completions chunks -> stream chunks; tool call fragments are joined per index."""

    def __init__(self, spec: ModelSpec) -> None:
        self.spec = spec
        self.runs = DeltaRuns()
        self.calls: dict[int, _PartialCall] = {}
        self.finish: str | None = None
        self.usage: Usage = NO_USAGE
        self.model_id = spec.model_id

    def run(self, events: Iterator[ChatCompletionChunk]) -> Iterator[StreamChunk]:
        for event in events:
            if event.model:
                self.model_id = event.model
            if event.usage is not None:
                self.usage = _usage(event.usage)
            for choice in event.choices[:1]:
                yield from self._choice(choice)
        if self.finish is None:
            raise ProviderError(
                f"openai model '{self.spec.name}' ended its stream without a finish reason",
                retryable=True,
                provider=PROVIDER,
                model=self.spec.name,
            )
        yield from self.runs.close()
        for index in sorted(self.calls):
            yield from self._finish_call(index, self.calls[index])
        yield Finish(
            finish_reason=_finish_reason(self.finish, has_tool_calls=bool(self.calls)),
            usage=self.usage,
            model_id=self.model_id,
            provider=PROVIDER,
        )

    def _choice(self, choice: ChunkChoice) -> Iterator[StreamChunk]:
        delta = choice.delta
        yield from self.runs.reasoning(_extra_text(delta))
        yield from self.runs.content(delta.content or "")
        for fragment in delta.tool_calls or ():
            yield from self.runs.close()
            call = self.calls.setdefault(fragment.index, _PartialCall())
            if fragment.id:
                call.id = fragment.id
            if fragment.function is not None:
                if fragment.function.name and not call.name:
                    call.name = fragment.function.name
                call.arguments += fragment.function.arguments or ""
            if call.id and call.name and not call.started:
                call.started = True
                yield ToolCallStart(id=call.id, name=call.name)
        if choice.finish_reason:
            self.finish = choice.finish_reason

    def _finish_call(self, index: int, call: _PartialCall) -> Iterator[StreamChunk]:
        if not call.name:
            raise ProviderError(
                f"openai model '{self.spec.name}' streamed tool call #{index} without a name",
                retryable=False,
                provider=PROVIDER,
                model=self.spec.name,
            )
        call.id = call.id or f"call_{index}"
        if not call.started:
            yield ToolCallStart(id=call.id, name=call.name)
        arguments = parse_arguments(call.arguments, tool=call.name, spec=self.spec)
        yield ToolCallDone(id=call.id, name=call.name, arguments=arguments)


def _message(message: LLMMessage) -> dict[str, Any]:
    if message.role == "user" and message.parts:
        return {"role": "user", "content": [_part(part) for part in message.content_parts()]}
    if message.role == "assistant":
        body: dict[str, Any] = {"role": "assistant", "content": message.content or None}
        if message.tool_calls:
            body["tool_calls"] = [
                {
                    "id": call.id,
                    "type": "function",
                    "function": {"name": call.name, "arguments": json.dumps(call.arguments)},
                }
                for call in message.tool_calls
            ]
        if message.reasoning:
            body["reasoning_content"] = message.reasoning
        return body
    if message.role == "tool":
        return {"role": "tool", "tool_call_id": message.tool_call_id, "content": message.text}
    return {"role": message.role, "content": message.text}


def _part(part: TextPart | ImagePart) -> dict[str, Any]:
    if isinstance(part, TextPart):
        return {"type": "text", "text": part.text}
    return {"type": "image_url", "image_url": {"url": part.data_url}}


def _tool_choice(choice: str) -> Any:
    if choice in TOOL_CHOICE_MODES:
        return choice
    return {"type": "function", "function": {"name": choice}}


def _finish_reason(reason: str | None, *, has_tool_calls: bool) -> FinishReason:
    mapped = _FINISH.get(reason or "stop", "stop")
    # Some compatible servers report "stop" for a turn that ends in tool calls.
    return "tool_calls" if has_tool_calls and mapped == "stop" else mapped


def _extra_text(model: Any) -> str:
    """Reasoning text from the non-standard fields compatible servers add to a message/delta."""
    extra = getattr(model, "model_extra", None) or {}
    for key in ("reasoning_content", "reasoning"):
        value = extra.get(key)
        if isinstance(value, str) and value:
            return value
    return ""


def _usage(usage: CompletionUsage | None) -> Usage:
    if usage is None:
        return NO_USAGE
    details = usage.completion_tokens_details
    prompt_details = usage.prompt_tokens_details
    return Usage(
        prompt_tokens=usage.prompt_tokens,
        completion_tokens=usage.completion_tokens,
        total_tokens=usage.total_tokens,
        reasoning_tokens=(details.reasoning_tokens or 0) if details else 0,
        cached_tokens=(prompt_details.cached_tokens or 0) if prompt_details else 0,
    )

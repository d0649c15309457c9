"""OpenTelemetry traces of the engine's work, with the GenAI semantic conventions.

The conventions are pinned: GenAI semantic conventions 1.44.0
(:data:`observability.spans.SEMCONV_VERSION`, as ``opentelemetry-semantic-conventions``
0.66b2 ships them; the tracer carries their schema URL). A turn
is an ``invoke_agent {agent}`` span, each model call a ``chat {model}`` span under it (with
``gen_ai.usage.*``, the requested and answering model, the provider and the finish reasons),
each tool call an ``execute_tool {tool}`` span, each sandbox call a ``sandbox {tool}`` span.
Prompts, completions, tool arguments and results go on the spans only when
``OTEL_INSTRUMENTATION_GENAI_CAPTURE_MESSAGE_CONTENT`` says so (off by default).

:func:`tracing_install` (the app's ``ready()``) registers :class:`SpanTelemetry` at the
engine's door (:mod:`threads.runtime.telemetry_door`) in every process: it binds the
log ids of a drive (tenant, thread) and of a turn (turn) whether or not anything is traced.
A tracer provider exists only when ``settings.TRACING`` names an exporter (the standard
``OTEL_*`` variables, :func:`config.env.tracing`); without one every span block is a no-op.
How a trace crosses from a request to the worker: :mod:`observability.propagation`.
"""

from __future__ import annotations

import contextlib
import json
import uuid
from collections.abc import Iterator, Mapping, Sequence
from contextlib import AbstractContextManager
from typing import TYPE_CHECKING, Any, Final

from django.conf import settings
from opentelemetry import trace
from opentelemetry.sdk.resources import Resource
from opentelemetry.sdk.trace import TracerProvider
from opentelemetry.sdk.trace.export import BatchSpanProcessor, ConsoleSpanExporter, SpanExporter
from opentelemetry.trace import Span, SpanKind

from agents.documents import PromptDoc
from agents.providers.base import (
    LLMMessage,
    ModelSpec,
    ProviderRequest,
    ProviderResponse,
    ToolCall,
)
from agents.registry import ToolResult
from observability import propagation
from observability.logcontext import bind
from observability.spans import Tracing, failed, span, tracing, tracing_use
from threads.runtime.telemetry_door import (
    UNRECORDED,
    ModelCallRecord,
    ToolCallRecord,
    telemetry_set,
)

if TYPE_CHECKING:
    from threads.runtime.engine import Flow

# Our finish reasons as the conventions name them.
FINISH_REASONS: Final = {"tool_calls": "tool_call"}


def tracing_install() -> None:
    """Register the engine's telemetry and the trace propagation; start tracing when
    ``settings.TRACING`` names an exporter (a batch processor exports from a thread of its
    own, so a span's end never waits on the collector)."""
    telemetry_set(SpanTelemetry())
    propagation.signals_connect()
    config: Mapping[str, Any] = settings.TRACING
    if config["exporter"] is None:
        return
    provider = TracerProvider(resource=Resource.create({"service.name": config["service_name"]}))
    provider.add_span_processor(BatchSpanProcessor(_exporter(config["exporter"])))
    trace.set_tracer_provider(provider)
    tracing_use(provider, capture_content=bool(config["capture_content"]))


def _exporter(kind: str) -> SpanExporter:
    if kind == "console":
        return ConsoleSpanExporter()
    # Imported only when used: it loads protobuf and requests.
    from opentelemetry.exporter.otlp.proto.http.trace_exporter import (
        OTLPSpanExporter,
    )

    return OTLPSpanExporter()  # the OTEL_EXPORTER_OTLP_* variables configure it


class _ModelCall:
    def __init__(self, opened: Span, capture_content: bool) -> None:
        self.span = opened
        self.capture_content = capture_content

    def responded(self, spec: ModelSpec, response: ProviderResponse) -> None:
        usage = response.usage
        attributes: dict[str, Any] = {
            "gen_ai.response.model": response.model_id or spec.model_id,
            "gen_ai.response.finish_reasons": [
                FINISH_REASONS.get(response.finish_reason, response.finish_reason)
            ],
            "gen_ai.usage.input_tokens": usage.prompt_tokens,
            "gen_ai.usage.output_tokens": usage.completion_tokens,
            "gen_ai.usage.cache_read.input_tokens": usage.cached_tokens,
            "gen_ai.usage.reasoning.output_tokens": usage.reasoning_tokens,
            "platform.model.name": spec.name,  # a fallback's, when it answered
        }
        if self.capture_content:
            said = {"role": "assistant", "parts": _parts(response.content, response.tool_calls),
                    "finish_reason": attributes["gen_ai.response.finish_reasons"][0]}  # fmt: skip
            attributes["gen_ai.output.messages"] = json.dumps([said], default=str)
        self.span.set_attributes(attributes)


class _ToolCall:
    def __init__(self, opened: Span, capture_content: bool) -> None:
        self.span = opened
        self.capture_content = capture_content

    def ended(self, result: ToolResult) -> None:
        if result.status != "success":
            failed(self.span, result.error_code or "tool_error", result.error or "")
        if self.capture_content:
            answer = result.result if result.status == "success" else result.error
            self.span.set_attribute("gen_ai.tool.call.result", answer or "")


def _parts(content: str | None, calls: Sequence[ToolCall] = ()) -> list[dict[str, Any]]:
    parts: list[dict[str, Any]] = [{"type": "text", "content": content}] if content else []
    parts += [
        {"type": "tool_call", "id": call.id, "name": call.name, "arguments": call.arguments}
        for call in calls
    ]
    return parts


def _message(message: LLMMessage) -> dict[str, Any]:
    """A message as ``gen_ai.input.messages`` holds it (text parts and tool calls)."""
    if message.role == "tool":
        parts = [{"type": "tool_call_response", "id": message.tool_call_id,
                  "response": message.content}]  # fmt: skip
        return {"role": "tool", "parts": parts}
    return {"role": message.role, "parts": _parts(message.content, message.tool_calls)}


def _ids(flow: Flow) -> dict[str, str]:
    """What every span of a flow carries beside the conventions' attributes."""
    return {
        "gen_ai.conversation.id": str(flow.thread.pk),
        "platform.tenant.id": str(flow.thread.tenant_id),
        "platform.turn.id": str(flow.turn.pk),
        "platform.flow.id": flow.flow_id,
    }


class SpanTelemetry:
    """The engine's telemetry: log ids always, spans when tracing is on."""

    def drive(
        self, *, tenant_id: uuid.UUID | str, thread_id: uuid.UUID | str
    ) -> AbstractContextManager[None]:
        return bind(tenant_id=tenant_id, thread_id=thread_id)

    @contextlib.contextmanager
    def turn(self, flow: Flow) -> Iterator[None]:
        agent = flow.agent.name
        attributes = {
            "gen_ai.operation.name": "invoke_agent",
            "gen_ai.agent.name": agent,
            **_ids(flow),
        }
        with bind(turn_id=flow.turn.pk), span(f"invoke_agent {agent}", attributes=attributes):
            yield

    def model_call(
        self, flow: Flow, spec: ModelSpec, prompt: PromptDoc, request: ProviderRequest
    ) -> AbstractContextManager[ModelCallRecord]:
        current = tracing()
        if current is None:
            return contextlib.nullcontext(UNRECORDED)
        return self._model_call(current, flow, spec, prompt, request)

    @contextlib.contextmanager
    def _model_call(
        self, current: Tracing, flow: Flow, spec: ModelSpec, prompt: PromptDoc,
        request: ProviderRequest,
    ) -> Iterator[ModelCallRecord]:  # fmt: skip
        attributes: dict[str, Any] = {
            "gen_ai.operation.name": "chat",
            "gen_ai.provider.name": spec.kind,
            "gen_ai.system": spec.kind,  # the provider's attribute before semconv 1.37
            "gen_ai.request.model": spec.model_id,
            "gen_ai.prompt.name": prompt.name,
            "platform.model.requested": spec.name,
            **_ids(flow),
        }
        if request.max_output_tokens is not None:
            attributes["gen_ai.request.max_tokens"] = request.max_output_tokens
        if current.capture_content:
            attributes["gen_ai.input.messages"] = json.dumps(
                [_message(message) for message in request.messages], default=str
            )
        with span(f"chat {spec.model_id}", attributes=attributes, kind=SpanKind.CLIENT) as opened:
            yield _ModelCall(opened, current.capture_content) if opened else UNRECORDED

    def tool_call(self, flow: Flow, call: ToolCall) -> AbstractContextManager[ToolCallRecord]:
        current = tracing()
        if current is None:
            return contextlib.nullcontext(UNRECORDED)
        return self._tool_call(current, flow, call)

    @contextlib.contextmanager
    def _tool_call(self, current: Tracing, flow: Flow, call: ToolCall) -> Iterator[ToolCallRecord]:
        attributes: dict[str, Any] = {
            "gen_ai.operation.name": "execute_tool",
            "gen_ai.tool.name": call.name,
            "gen_ai.tool.call.id": call.id,
            **_ids(flow),
        }
        if current.capture_content:
            attributes["gen_ai.tool.call.arguments"] = json.dumps(call.arguments, default=str)
        with span(f"execute_tool {call.name}", attributes=attributes) as opened:
            yield _ToolCall(opened, current.capture_content) if opened else UNRECORDED

    def sandbox_call(self, flow: Flow, name: str) -> AbstractContextManager[None]:
        if tracing() is None:
            return contextlib.nullcontext()
        attributes = {"platform.sandbox.tool": name, **_ids(flow)}
        return _unit(span(f"sandbox {name}", attributes=attributes))


@contextlib.contextmanager
def _unit(block: AbstractContextManager[Any]) -> Iterator[None]:
    with block:
        yield

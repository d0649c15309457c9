"""What the engine records of a model call and a tool call (log rows, spec DIGEST §15)."""

from __future__ import annotations

import time
from collections.abc import Callable, Mapping, Sequence
from typing import Any

from agents.providers.base import (
    NO_USAGE,
    ContentDelta,
    ModelSpec,
    ProviderError,
    ProviderResponse,
    ReasoningDelta,
    ToolCall,
)
from agents.providers.chain import ChainChunk, FailedAttempt, RetryStarted
from agents.registry import ToolResult
from common.time import now_us
from threads.models import Message


class CallTimer:
    """Latency and time to first token of one model call; relays deltas as events (not
    persisted) through ``publish``."""

    def __init__(
        self,
        message: Message,
        publish: Callable[[str, Mapping[str, Any]], None],
        *,
        on_retry: Callable[[], None] | None = None,
        reasoning: bool = True,
    ) -> None:
        self.message = message
        self.publish = publish
        self.on_retry = on_retry
        self.reasoning = reasoning  # False: reasoning deltas are not published
        self.started_at = now_us()
        self._start = time.perf_counter()
        self.first_token_ms: float | None = None
        prompt = message.metadata.get("prompt", "") if isinstance(message.metadata, dict) else ""
        self.publish("model.requested", {"message_id": str(message.id), "prompt": prompt})

    def elapsed_ms(self) -> float:
        return round((time.perf_counter() - self._start) * 1000, 3)

    def on_chunk(self, chunk: ChainChunk) -> None:
        if isinstance(chunk, RetryStarted) and self.on_retry is not None:
            self.on_retry()
        if isinstance(chunk, ContentDelta | ReasoningDelta):
            if self.first_token_ms is None:
                self.first_token_ms = self.elapsed_ms()
            kind = "model.delta" if isinstance(chunk, ContentDelta) else "reasoning.delta"
            if kind == "reasoning.delta" and not self.reasoning:
                return
            self.publish(
                kind,
                {"message_id": str(self.message.id), "depth": self.message.depth,
                 "delta": chunk.delta},
            )  # fmt: skip


def model_log_data(
    spec: ModelSpec,
    timer: CallTimer,
    response: ProviderResponse | None,
    *,
    error: ProviderError | None = None,
    attempts: Sequence[FailedAttempt] = (),
) -> dict[str, Any]:
    """A model call's log: who answered, tokens, latency, time to first token, cost from the
    answering model's prices (None without them), finish reason, error, failed attempts.
    Token counts the provider did not report are None, never 0."""
    usage = response.usage if response is not None else None
    if usage == NO_USAGE:
        usage = None  # providers report usage with at least the prompt's tokens
    cost = spec.prices.cost(usage) if usage is not None else None
    return {
        "model": spec.name, "model_id": spec.model_id,
        "provider": response.provider if response is not None else spec.kind,
        "input_tokens": usage.prompt_tokens if usage else None,
        "cached_tokens": usage.cached_tokens if usage else None,
        "output_tokens": usage.completion_tokens if usage else None,
        "reasoning_tokens": usage.reasoning_tokens if usage else None,
        "total_tokens": usage.total_tokens if usage else None,
        "latency_ms": timer.elapsed_ms(),
        "time_to_first_token_ms": timer.first_token_ms,
        "cost_usd": float(cost) if cost is not None else None,
        "finish_reason": response.finish_reason if response is not None else None,
        "error": error.message if error is not None else None,
        "failed_attempts": [
            {"model": a.model, "attempt": a.attempt, "error": a.error} for a in attempts
        ],
        "started_at": timer.started_at, "ended_at": now_us(),
    }  # fmt: skip


def tool_log_data(
    call: ToolCall, result: ToolResult, duration_ms: float, *, kind: str | None
) -> dict[str, Any]:
    return {
        "tool": call.name, "tool_kind": kind, "tool_call_id": call.id,
        "arguments": call.arguments, "status": result.status, "error": result.error,
        "duration_ms": duration_ms,
    }  # fmt: skip


_SUMMED = ("input_tokens", "output_tokens", "total_tokens", "cost_usd")


class TurnUsage:
    """A turn's usage: tokens and cost summed over its model calls' log data. A figure any
    call did not report is None (unknown), never a partial sum."""

    def __init__(self) -> None:
        self.calls = 0
        self.totals: dict[str, float | None] = dict.fromkeys(_SUMMED, 0)

    def add(self, data: Mapping[str, Any]) -> None:
        self.calls += 1
        for name in _SUMMED:
            value, total = data.get(name), self.totals[name]
            self.totals[name] = None if value is None or total is None else total + value

    def summary(self) -> dict[str, Any] | None:
        """``{model_calls, input_tokens, output_tokens, total_tokens, cost_usd}``; None when
        the turn called no model."""
        if not self.calls:
            return None
        summary: dict[str, Any] = {"model_calls": self.calls, **self.totals}
        if summary["cost_usd"] is not None:
            summary["cost_usd"] = round(summary["cost_usd"], 10)
        return summary

"""A model call of the flow that stores no message: a compaction's summary. It is a model
call like any other: reserved and committed through the spend door (the ledger row keyed
by ``key``), retried, with the model's fallbacks, logged (an ``llm`` log row whose
``purpose`` names it, with ``model.completed`` / ``model.failed``) and counted in the
turn's usage."""

from __future__ import annotations

import dataclasses
import time
from typing import TYPE_CHECKING

from agents.providers.base import ModelSpec, ProviderAborted, ProviderError, ProviderRequest
from agents.providers.chain import ChainResult, generate_with_fallbacks
from common.time import now_us
from threads.runtime.engine.spend import spend_commit, spend_reserve
from threads.runtime.tool_calls import FlowAborted
from threads.services import logs
from usage import budgets

if TYPE_CHECKING:
    from threads.runtime.engine.flow import Flow


@dataclasses.dataclass(frozen=True)
class AsideResult:
    text: str
    model: str
    input_tokens: int
    output_tokens: int
    cost_micros: int | None


def aside_call(
    flow: Flow, spec: ModelSpec, request: ProviderRequest, *, key: str, purpose: str
) -> AsideResult:
    """Call ``spec`` (and its fallbacks) with ``request``. Raises SpendHalt when a budget
    has no room, ProviderError when every attempt failed, FlowAborted on an abort."""
    hold = spend_reserve(flow, spec, request)
    if hold.max_output_tokens is not None:
        request = dataclasses.replace(request, max_output_tokens=hold.max_output_tokens)
    started_at, started = now_us(), time.perf_counter()
    try:
        flow.idle()
        result = generate_with_fallbacks(
            spec, request, stream=False, abort=flow.execution.abort_signal,
            base_delay_s=flow.runtime.retry_base_delay_s,
            provider_factory=flow.runtime.provider_factory,
        )  # fmt: skip
    except ProviderAborted:
        budgets.release(hold)
        raise FlowAborted from None
    except ProviderError as error:
        budgets.release(hold)
        _log(flow, spec, None, purpose, started_at, started, error=error)
        raise
    with flow.outbox.batch():
        _log(flow, spec, result, purpose, started_at, started)
        cost = spend_commit(flow, hold, result, None, key=f"{purpose}:{key}")
    usage = result.response.usage
    return AsideResult(
        text=result.response.content, model=result.spec.name, input_tokens=usage.prompt_tokens,
        output_tokens=usage.completion_tokens, cost_micros=cost,
    )  # fmt: skip


def _log(
    flow: Flow,
    spec: ModelSpec,
    result: ChainResult | None,
    purpose: str,
    started_at: int,
    started: float,
    *,
    error: ProviderError | None = None,
) -> None:
    usage = result.response.usage if result is not None else None
    answered = result.spec if result is not None else spec
    data = {
        "flow_id": flow.flow_id, "turn_id": str(flow.turn.pk), "fence": flow.fence,
        "step": flow.execution.step_count, "side": flow.execution.current_side,
        "purpose": purpose, "model": answered.name, "model_id": answered.model_id,
        "provider": result.response.provider if result is not None else spec.kind,
        "input_tokens": usage.prompt_tokens if usage else None,
        "cached_tokens": usage.cached_tokens if usage else None,
        "output_tokens": usage.completion_tokens if usage else None,
        "reasoning_tokens": usage.reasoning_tokens if usage else None,
        "total_tokens": usage.total_tokens if usage else None,
        "latency_ms": round((time.perf_counter() - started) * 1000, 3),
        "time_to_first_token_ms": None,
        "cost_usd": (float(cost) if (cost := answered.prices.cost(usage)) is not None else None)
        if usage else None,
        "finish_reason": result.response.finish_reason if result is not None else None,
        "error": error.message if error is not None else None,
        "failed_attempts": [
            {"model": a.model, "attempt": a.attempt, "error": a.error}
            for a in (result.failed_attempts if result is not None else ())
        ],
        "started_at": started_at, "ended_at": now_us(),
    }  # fmt: skip
    flow.usage.add(data)
    logs.log_create(thread=flow.thread, kind="llm", data=data, fence=flow.fence, outbox=flow.outbox)

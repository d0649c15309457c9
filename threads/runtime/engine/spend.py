"""The engine's one door to spend (:mod:`usage.budgets`): every model call reserves its worst
case before it is sent and commits what it spent with its answer.

The scope of a flow's calls is its tenant, agent, end user, thread and the thread's
ancestors (a subagent's spend counts against its parent chain) and its turn and the
ancestors' running turns. The worst case is an upper bound of the input's tokens (one per
byte of text, which no tokenizer exceeds, plus a fixed overhead per message and per image)
and the output the request allows; the output is clamped to what the tightest budget leaves.
"""

from __future__ import annotations

import json
import time
from typing import TYPE_CHECKING, Any

from django.conf import settings

from agents.providers.base import ImagePart, LLMMessage, ModelSpec, ProviderRequest
from agents.providers.chain import ChainResult
from common.time import now_us
from threads.models import Message
from threads.services import spending
from usage import budgets, quotas
from usage.budgets import BudgetExceeded, Hold, Scope
from usage.ledger import Entry, record
from usage.models import LedgerKind
from usage.prices import chain_prices, price_version, token_prices

if TYPE_CHECKING:
    from threads.runtime.engine.flow import Flow

# Tokens a message's framing may take beyond its text, and an image at most.
MESSAGE_OVERHEAD_TOKENS = 16
IMAGE_TOKENS = 2_000
# The first and the longest pause between tries while a call waits for other calls' reservations
# to settle.
CONTENDED_PAUSE_S = (0.02, 0.25)


class SpendHalt(Exception):
    """The flow's next model call may not spend: a budget has no room (``reason``
    ``budget``) or the tenant's token quota is used up (``quota``). The turn pauses
    (``policy`` ``pause``) until ``retry_at`` or until the budget changes, or ends
    (``stop``, ``reject``) with outcome ``budget_exceeded``
    (:meth:`threads.runtime.engine.flow.Flow.run`)."""

    def __init__(
        self, reason: str, message: str, *, policy: str, retry_at: int | None,
        detail: dict[str, Any],
    ) -> None:  # fmt: skip
        super().__init__(message)
        self.reason = reason
        self.message = message
        self.policy = policy
        self.retry_at = retry_at
        self.detail = detail

    @classmethod
    def of_budget(cls, exceeded: BudgetExceeded) -> SpendHalt:
        budget = exceeded.budget
        return cls(
            "budget", exceeded.message, policy=budget.policy, retry_at=exceeded.retry_at,
            detail={"budget_id": str(budget.id), "budget": budget.name, "scope": budget.scope,
                    "subject": exceeded.subject, "window": budget.window},
        )  # fmt: skip

    @classmethod
    def of_quota(cls, exceeded: quotas.QuotaExceeded) -> SpendHalt:
        return cls(
            "quota", exceeded.message, policy="pause",
            retry_at=now_us() + int(exceeded.retry_after_s * 1_000_000),
            detail=dict(exceeded.details or {}),
        )  # fmt: skip


def input_bound(request: ProviderRequest) -> int:
    """An upper bound of the request's input tokens."""
    total = 0
    for message in request.messages:
        total += MESSAGE_OVERHEAD_TOKENS + _message_bytes(message)
    for tool in request.tools:
        total += MESSAGE_OVERHEAD_TOKENS + len(tool.name) + len(tool.description.encode())
        total += len(json.dumps(tool.parameters or {}).encode())
    return total


def _message_bytes(message: LLMMessage) -> int:
    size = len((message.content or "").encode())
    for part in message.parts:
        size += IMAGE_TOKENS if isinstance(part, ImagePart) else len(part.text.encode())
    for call in message.tool_calls:
        size += len(call.name) + len(json.dumps(call.arguments).encode())
    return size


def spend_reserve(flow: Flow, spec: ModelSpec, request: ProviderRequest) -> Hold:
    """Reserve the worst case of ``request`` on every budget of the flow; its clamped output
    is ``Hold.max_output_tokens``. Waits while only other calls' reservations leave no room
    (they settle in a call's time), at most ``USAGE_RESERVE_WAIT_S``; raises
    :class:`SpendHalt` when a budget has no room or the tenant's token quota is used up."""
    try:
        quotas.tokens_admit(tenant_id=flow.thread.tenant_id)
    except quotas.QuotaExceeded as exceeded:
        raise SpendHalt.of_quota(exceeded) from None
    output = (
        request.max_output_tokens
        or spec.capabilities.max_output_tokens
        or settings.USAGE_DEFAULT_MAX_OUTPUT_TOKENS
    )
    deadline = time.monotonic() + settings.USAGE_RESERVE_WAIT_S
    pause = CONTENDED_PAUSE_S[0]
    while True:
        try:
            return budgets.reserve(
                spend_scope(flow), prices=chain_prices(spec), input_tokens=input_bound(request),
                output_tokens=output, min_output_tokens=settings.USAGE_MIN_OUTPUT_TOKENS,
                thread_id=flow.thread.pk, turn_id=flow.turn.pk,
            )  # fmt: skip
        except BudgetExceeded as exceeded:
            if not exceeded.contended or time.monotonic() >= deadline or flow.aborted:
                raise SpendHalt.of_budget(exceeded) from None
        flow.idle()
        time.sleep(pause)
        pause = min(pause * 2, CONTENDED_PAUSE_S[1])


def spend_commit(
    flow: Flow, hold: Hold, result: ChainResult, message: Message | None, *, key: str = ""
) -> int | None:
    """The call's ledger row and its budgets' spend, in the caller's transaction (the one
    storing the answer), with ``cost.recorded`` and a ``limit.changed`` per threshold
    crossed; returns the cost in micro-units (None: the model has no prices). A call that
    stored no message (a summary: :mod:`threads.runtime.engine.aside`) gives its ``key``."""
    spec, usage = result.spec, result.response.usage
    prices = token_prices(spec.prices)
    cost = prices.cost(usage)
    entry = _entry(
        flow, key=f"model:{message.pk}" if message is not None else key,
        kind=LedgerKind.MODEL, model=spec.name,
        input_tokens=usage.prompt_tokens, output_tokens=usage.completion_tokens,
        cached_tokens=usage.cached_tokens, cost_micros=cost,
        price_version=price_version(spec.prices),
    )  # fmt: skip
    counted, crossings = budgets.commit(hold, entry)
    if not counted:
        return cost
    quotas.tokens_spent(tenant_id=flow.thread.tenant_id, tokens=usage.total_tokens)
    message_id = str(message.pk) if message is not None else None
    flow.publish(
        "cost.recorded",
        {"model": spec.name, "provider": str(result.response.provider or spec.kind),
         "model_id": spec.model_id, "message_id": message_id, "input_tokens": usage.prompt_tokens,
         "output_tokens": usage.completion_tokens, "cached_tokens": usage.cached_tokens,
         "cost_micros": cost, "currency": "USD", "cost_known": cost is not None,
         "reserved_max_output_tokens": hold.max_output_tokens},
    )  # fmt: skip
    for crossing in crossings:
        budget = crossing.budget
        flow.publish(
            "limit.changed",
            {"limit": "budget", "budget_id": str(budget.id), "budget": budget.name,
             "scope": budget.scope, "subject": crossing.subject, "window": budget.window,
             "window_start": crossing.window_start, "threshold_percent": crossing.threshold,
             "spent_micros": crossing.spent_micros, "spent_tokens": crossing.spent_tokens,
             "limit_micros": budget.limit_micros, "limit_tokens": budget.limit_tokens},
        )  # fmt: skip
    return cost


def spend_tool(flow: Flow, call_id: str, name: str) -> None:
    """The ledger row of one tool call (counted, never priced), in the caller's
    transaction."""
    record(_entry(flow, key=f"tool:{flow.turn.pk}:{call_id}", kind=LedgerKind.TOOL, name=name))


def spend_turn(flow: Flow) -> None:
    """The ledger row of a finished turn (it counts the turn; its calls' tokens and cost are
    on their own rows), in the transaction that ends it."""
    record(_entry(flow, key=f"turn:{flow.turn.pk}", kind=LedgerKind.TURN))


def _entry(flow: Flow, **fields: Any) -> Entry:
    thread = flow.thread
    return Entry(
        tenant_id=thread.tenant_id, time_zone=thread.tenant.time_zone, agent=thread.agent_name,
        thread_id=thread.pk, turn_id=flow.turn.pk, user=spend_user(flow), **fields,
    )  # fmt: skip


def spend_user(flow: Flow) -> str:
    """The end user a turn spends for: the turn's ``user``, else its thread's."""
    return flow.turn.user or flow.thread.user_id


def spend_scope(flow: Flow) -> Scope:
    """Who the flow's calls spend for (computed once per flow, again after a handoff)."""
    if flow.spend_scope is None:
        flow.spend_scope = spending.spend_scope(
            thread=flow.thread, turn_id=flow.turn.pk, user=spend_user(flow), lease=flow.lease
        )
    return flow.spend_scope

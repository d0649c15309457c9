"""One compaction of one side's context, inside a flow: choose the range (never splitting a
tool call from its result, the tail kept verbatim), try the cheap tier (clear old large
tool results), else summarize (charged like any model call), else, when summarizing
fails, leave the range out (truncation) with a ``runtime.warning``. The overlay, the
superseded one and the events commit as one.
"""

from __future__ import annotations

import json
import logging
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any

from agents.providers.base import ProviderError
from agents.registry import HookName
from common.errors import DomainError
from common.ids import new_id
from common.time import now_us
from compaction import summary as summaries
from compaction.history import is_marker
from compaction.models import Compaction, CompactionStatus, Tier
from compaction.policy import Policy, text_tokens
from threads.models import SubagentLink
from threads.runtime.engine.agent import prompt_hooks
from threads.runtime.engine.aside import aside_call
from threads.runtime.engine.spend import SpendHalt
from threads.services.files.writing import file_write

if TYPE_CHECKING:
    from agents.documents import PromptDoc
    from threads.runtime.engine.flow import Flow

logger = logging.getLogger(__name__)

# After this many truncations in a row within BREAKER_S, summarizing is not tried again
# until the window passes (the circuit breaker).
BREAKER_FAILURES = 3
BREAKER_S = 600
STUB_TOKENS = 80
# The cheap tier spills at most this many results (more: the range is summarized instead).
MAX_SPILLS = 100
SPILL_DIRECTORY = "/.context/tool-results"


@dataclass(frozen=True)
class Plan:
    """The messages a compaction covers, and those it keeps."""

    covered: list[dict[str, Any]]  # in seq order
    first_user_seq: int
    tail_tokens: int


def plan(stored: Sequence[Mapping[str, Any]], keep_tail_tokens: int) -> Plan | None:
    """The range to compact out of ``stored`` (the side's visible history, marker
    included): everything older than the tail of ``keep_tail_tokens``, except the first
    user message; None when nothing is older than the tail."""
    messages = [dict(message) for message in stored if not is_marker(message)]
    users = [message for message in messages if message.get("role") == "user"]
    first_user_seq = int(users[0]["seq"]) if users else 0
    start, kept = len(messages), 0
    while start > 0 and kept < keep_tail_tokens:
        start -= 1
        kept += text_tokens(messages[start].get("content")) + 4
    start = _unsplit(messages, start)
    covered = [m for m in messages[:start] if int(m["seq"]) != first_user_seq]
    if not covered:
        return None
    return Plan(covered=covered, first_user_seq=first_user_seq, tail_tokens=kept)


def _unsplit(messages: Sequence[Mapping[str, Any]], start: int) -> int:
    """The latest tail start at or before ``start`` that is not a tool result and after
    which no result answers a call made before it (one pass: ``need[i]`` is the earliest
    call any result from ``i`` on answers)."""
    owner: dict[str, int] = {}
    need = [len(messages)] * (len(messages) + 1)
    answers = [len(messages)] * len(messages)
    unanswered: dict[str, int] = {}
    for index, message in enumerate(messages):
        if message.get("role") == "tool":
            call_id = str(message.get("tool_call_id"))
            answers[index] = owner.get(call_id, index)
            unanswered.pop(call_id, None)
        for call in _calls(message):
            owner[str(call.get("id"))] = unanswered[str(call.get("id"))] = index
    for index in range(len(messages) - 1, -1, -1):
        need[index] = min(need[index + 1], answers[index])
    # A call still waiting for its result (a pending approval, a paused step) stays too.
    start = min([start, *unanswered.values()])
    while 0 < start < len(messages) and (
        messages[start].get("role") == "tool" or need[start] < start
    ):
        start = min(start - 1, need[start])
    return start


def _calls(message: Mapping[str, Any]) -> list[Mapping[str, Any]]:
    raw = message.get("tool_calls")
    if isinstance(raw, str):
        try:
            raw = json.loads(raw)
        except ValueError:
            return []
    return [call for call in raw or () if isinstance(call, Mapping)]


@dataclass
class Outcome:
    tier: str
    summary: dict[str, Any]
    summary_text: str
    from_seq: int
    to_seq: int
    cleared_through: int
    cleared_over: int
    tokens_after: int
    model: str = ""
    input_tokens: int = 0
    output_tokens: int = 0
    cost_micros: int | None = 0
    error: str = ""


def compact(
    flow: Flow,
    prompt: PromptDoc,
    side: str,
    policy: Policy,
    stored: Sequence[Mapping[str, Any]],
    *,
    trigger: str,
    tokens_before: int,
    target: int,
) -> Compaction | None:
    """Compact ``side``'s context; the overlay written, or None when there was nothing to
    compact or a ``before_compaction`` hook skipped it. SpendHalt and FlowAborted propagate
    (a summary spends like any call)."""
    hooks = prompt_hooks(flow, prompt)
    info = {"side": side, "trigger": trigger, "tokens_before": tokens_before,
            "target_tokens": target, "window": policy.window}  # fmt: skip
    decided = hooks.transform(HookName.BEFORE_COMPACTION, info)
    if isinstance(decided, Mapping) and decided.get("skip"):
        return None
    # The tail kept verbatim fits in half the target, whatever the policy says.
    chosen = plan(stored, min(policy.keep_tail_tokens, target // 2))
    if chosen is None:
        return None
    active = Compaction.objects.filter(
        thread_id=flow.thread.pk, side=side, status=CompactionStatus.ACTIVE
    ).first()
    flow.publish(
        "context.compaction.started",
        {"side": side, "trigger": trigger, "tokens_before": tokens_before},
    )
    outcome = _cleared(flow, chosen, active, policy, tokens_before, target)
    if outcome is None:
        try:
            outcome = _summarized(flow, side, chosen, active, policy, trigger, tokens_before)
        except SpendHalt as halt:  # no budget for the summary: the turn pauses or ends
            flow.publish(
                "context.compaction.failed",
                {"side": side, "trigger": trigger, "error": halt.message, "fallback": None},
            )
            raise
    written = _write(flow, side, trigger, policy, chosen, active, outcome, tokens_before)
    hooks.notify(HookName.AFTER_COMPACTION, compaction_json(written))
    return written


def _cleared(
    flow: Flow, chosen: Plan, active: Compaction | None, policy: Policy, before: int, target: int
) -> Outcome | None:
    """The cheap tier: clearing the covered range's large tool results, when that alone
    brings the context under ``target``. Each is spilled to the thread's files first
    (``/.context/tool-results/<seq>.txt``, an ``output.spilled`` event), where a tool that
    reads files finds it; ``recall`` returns it too."""
    over = policy.tool_result_max_chars
    large = [
        message for message in chosen.covered
        if message.get("role") == "tool" and len(message.get("content") or "") > over
    ]  # fmt: skip
    saved = sum(text_tokens(message.get("content")) - STUB_TOKENS for message in large)
    if saved <= 0 or before - saved > target or len(large) > MAX_SPILLS:
        return None
    try:
        for message in large:
            _spill(flow, message)
    except DomainError as error:  # the files refuse (a limit): summarize instead
        logger.info("flow %s: spilling tool results failed: %s", flow.flow_id, error)
        return None
    return Outcome(
        tier=Tier.TOOL_RESULTS, summary=dict(active.summary) if active else {},
        summary_text=active.summary_text if active else "",
        from_seq=active.from_seq if active else 0, to_seq=active.to_seq if active else 0,
        cleared_through=int(chosen.covered[-1]["seq"]), cleared_over=over,
        tokens_after=before - saved,
    )  # fmt: skip


def spill_path(seq: int) -> str:
    return f"{SPILL_DIRECTORY}/{seq}.txt"


def _spill(flow: Flow, message: Mapping[str, Any]) -> None:
    content = str(message.get("content") or "").encode()
    path = spill_path(int(message["seq"]))
    file_write(
        thread=flow.thread, path=path, data=content, mime_type="text/plain",
        metadata={"seq": message["seq"], "tool_call_id": message.get("tool_call_id")},
        outbox=flow.outbox,
    )  # fmt: skip
    flow.publish(
        "output.spilled",
        {"path": path, "seq": int(message["seq"]), "bytes": len(content),
         "tool_call_id": str(message.get("tool_call_id") or "")},
    )  # fmt: skip


def _summarized(
    flow: Flow,
    side: str,
    chosen: Plan,
    active: Compaction | None,
    policy: Policy,
    trigger: str,
    before: int,
) -> Outcome:
    covered = chosen.covered
    from_seq = int(covered[0]["seq"])
    if active is not None and active.to_seq:
        from_seq = min(from_seq, active.from_seq)
    to_seq = int(covered[-1]["seq"])
    previous = dict(active.summary) if active and active.summary else summaries.empty()
    notes = _open_subagents(flow)
    kept = before - sum(text_tokens(m.get("content")) + 4 for m in covered)
    if _breaker_open(flow, side):
        error = "summarizing failed repeatedly; the circuit breaker leaves ranges out for now"
        return _truncated(flow, side, trigger, active, from_seq, to_seq, kept, error, notes)
    spec = flow.defs.model(policy.summarizer_model)
    lines = [summaries.transcript_line(message) for message in covered]
    current, spent = previous, Outcome(
        tier=Tier.SUMMARY, summary={}, summary_text="", from_seq=from_seq, to_seq=to_seq,
        cleared_through=0, cleared_over=0, tokens_after=0, model=spec.name,
    )  # fmt: skip
    key = new_id().hex
    window = spec.capabilities.max_context_tokens or policy.window
    try:
        for index, chunk in enumerate(summaries.chunks(lines, summaries.chunk_budget(window))):
            answer = aside_call(
                flow, spec, summaries.request(current, chunk), key=f"{key}:{index}",
                purpose="compaction",
            )  # fmt: skip
            current = summaries.parsed(answer.text, current)
            spent.model = answer.model
            spent.input_tokens += answer.input_tokens
            spent.output_tokens += answer.output_tokens
            if answer.cost_micros is None or spent.cost_micros is None:
                spent.cost_micros = None
            else:
                spent.cost_micros += answer.cost_micros
    except ProviderError as error:
        return _truncated(flow, side, trigger, active, from_seq, to_seq, kept, error.message,
                          notes)  # fmt: skip
    spent.summary = current
    spent.summary_text = summaries.rendered(current, from_seq=from_seq, to_seq=to_seq,
                                            notes=notes)  # fmt: skip
    spent.cleared_through = active.cleared_through if active else 0
    spent.cleared_over = active.cleared_over if active else 0
    spent.tokens_after = kept + text_tokens(spent.summary_text) + 4
    return spent


def _truncated(
    flow: Flow,
    side: str,
    trigger: str,
    active: Compaction | None,
    from_seq: int,
    to_seq: int,
    kept: int,
    error: str,
    notes: Sequence[str],
) -> Outcome:
    """Summarizing failed: the range is left out of the context (recall still returns it)."""
    flow.publish(
        "context.compaction.failed",
        {"side": side, "trigger": trigger, "error": error, "fallback": "truncation"},
    )
    flow.publish(
        "runtime.warning",
        {"code": "compaction_truncated",
         "message": f"messages {from_seq} to {to_seq} were left out of the model's context "
                    f"without a summary: {error}"},
    )  # fmt: skip
    summary = dict(active.summary) if active and active.summary else summaries.empty()
    text = summaries.rendered(summary, from_seq=from_seq, to_seq=to_seq, notes=[
        *notes, f"(Messages {from_seq} to {to_seq} are not summarized: summarizing them "
                "failed. Call recall to read them when you need them.)"
    ])  # fmt: skip
    return Outcome(
        tier=Tier.TRUNCATION, summary=summary, summary_text=text, from_seq=from_seq,
        to_seq=to_seq, cleared_through=active.cleared_through if active else 0,
        cleared_over=active.cleared_over if active else 0,
        tokens_after=kept + text_tokens(text) + 4, error=error,
    )  # fmt: skip


def _breaker_open(flow: Flow, side: str) -> bool:
    recent = list(
        Compaction.objects.filter(thread_id=flow.thread.pk, side=side)
        .order_by("-created_at")
        .values_list("tier", "created_at")[:BREAKER_FAILURES]
    )
    since = now_us() - BREAKER_S * 1_000_000
    return len(recent) == BREAKER_FAILURES and all(
        tier == Tier.TRUNCATION and at >= since for tier, at in recent
    )


def _open_subagents(flow: Flow) -> list[str]:
    """The thread's live subagents, so their references survive the summary."""
    links = SubagentLink.objects.filter(
        thread_id=flow.thread.pk, terminated_at__isnull=True
    ).values_list("child_id", "agent_name", "title", "status")[:50]
    return [
        f"Open subagent: reference {child} ({agent}{f' {title!r}' if title else ''}, {status})"
        for child, agent, title, status in links
    ]


def _write(
    flow: Flow,
    side: str,
    trigger: str,
    policy: Policy,
    chosen: Plan,
    active: Compaction | None,
    outcome: Outcome,
    before: int,
) -> Compaction:
    compaction = Compaction(
        tenant_id=flow.thread.tenant_id, thread_id=flow.thread.pk, side=side,
        tier=outcome.tier, trigger=trigger, from_seq=outcome.from_seq, to_seq=outcome.to_seq,
        first_user_seq=chosen.first_user_seq, cleared_through=outcome.cleared_through,
        cleared_over=outcome.cleared_over, summary=outcome.summary,
        summary_text=outcome.summary_text, model=outcome.model, tokens_before=before,
        tokens_after=max(outcome.tokens_after, 0), input_tokens=outcome.input_tokens,
        output_tokens=outcome.output_tokens, cost_micros=outcome.cost_micros,
        policy_version=policy.version, extends=active, turn_id=flow.turn.pk,
        error=outcome.error,
    )  # fmt: skip
    with flow.outbox.batch():
        # A revert may have committed since ``active`` was read (the API's, not a flow's:
        # this flow holds the thread): wait for any in flight, then supersede whatever is
        # active now, so that one overlay per side stays active.
        side_rows = Compaction.objects.filter(thread_id=flow.thread.pk, side=side)
        list(side_rows.select_for_update().exclude(status=CompactionStatus.REVERTED).values("id"))
        side_rows.filter(status=CompactionStatus.ACTIVE).update(status=CompactionStatus.SUPERSEDED)
        compaction.save(force_insert=True)
        flow.publish(
            "context.compaction.completed",
            {"compaction_id": str(compaction.id), "side": side, "trigger": trigger,
             "tier": outcome.tier, "from_seq": outcome.from_seq, "to_seq": outcome.to_seq,
             "tokens_before": before, "tokens_after": compaction.tokens_after,
             "extends": str(active.id) if active else None, "model": outcome.model or None,
             "input_tokens": outcome.input_tokens, "output_tokens": outcome.output_tokens,
             "cost_micros": outcome.cost_micros},
        )  # fmt: skip
    return compaction


def compaction_json(compaction: Compaction) -> dict[str, Any]:
    """A compaction as the API and the hooks see it."""
    return {
        "id": str(compaction.id), "thread_id": str(compaction.thread_id),
        "side": compaction.side, "status": compaction.status, "tier": compaction.tier,
        "trigger": compaction.trigger, "from_seq": compaction.from_seq,
        "to_seq": compaction.to_seq, "first_user_seq": compaction.first_user_seq,
        "cleared_through": compaction.cleared_through,
        "cleared_over": compaction.cleared_over, "summary": compaction.summary,
        "summary_text": compaction.summary_text, "model": compaction.model or None,
        "tokens_before": compaction.tokens_before, "tokens_after": compaction.tokens_after,
        "input_tokens": compaction.input_tokens, "output_tokens": compaction.output_tokens,
        "cost_micros": compaction.cost_micros, "policy_version": compaction.policy_version,
        "extends": str(compaction.extends_id) if compaction.extends_id else None,
        "turn_id": str(compaction.turn_id) if compaction.turn_id else None,
        "error": compaction.error or None, "created_at": compaction.created_at,
        "reverted_at": compaction.reverted_at,
    }  # fmt: skip

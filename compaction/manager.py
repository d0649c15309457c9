"""The context manager the engine's door calls (:mod:`threads.runtime.engine.context_door`):
the overlay-applied history, the three triggers (proactive before a step, reactive after
a context-length error, idle after a turn) and the ``recall`` tool."""

from __future__ import annotations

import logging
import weakref
from collections.abc import Mapping
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any

from agents.documents import PromptDoc
from agents.providers.base import LLMMessage
from compaction.compact import compact
from compaction.history import is_marker, overlay_history
from compaction.models import Compaction, CompactionStatus, Trigger
from compaction.policy import Policy, llm_tokens, policy_of
from compaction.recall import RECALL, recall_tool
from threads.models import Thread
from threads.runtime.definitions import ResolvedTool
from threads.runtime.engine.base import Side
from threads.runtime.engine.context_door import Rebuild
from threads.runtime.engine.spend import SpendHalt
from threads.runtime.tool_calls import FlowAborted
from threads.services.fence import StaleFence

if TYPE_CHECKING:
    from threads.runtime.engine.flow import Flow

logger = logging.getLogger(__name__)


@dataclass
class FlowContext:
    """What the manager remembers of one flow: the last history read per side, whether
    it was compacted, and the provider's count for the last call."""

    stored: dict[str, list[dict[str, Any]]] = field(default_factory=dict)
    compacted: dict[str, bool] = field(default_factory=dict)
    reported: tuple[int, int] | None = None  # (messages sent, input tokens)
    last_tokens: int = 0


class Compactor:
    def __init__(self) -> None:
        self._flows: weakref.WeakKeyDictionary[Flow, FlowContext] = weakref.WeakKeyDictionary()

    def _of(self, flow: Flow) -> FlowContext:
        context = self._flows.get(flow)
        if context is None:
            context = self._flows[flow] = FlowContext()
        return context

    def _policy(self, flow: Flow, prompt: PromptDoc) -> Policy:
        return policy_of(prompt, flow.defs.model(prompt.model))

    # The door ----------------------------------------------------------------------------------

    def history(
        self, flow: Flow, prompt: PromptDoc, acting: Side, after_seq: int
    ) -> list[dict[str, Any]]:
        stored = overlay_history(thread=flow.thread, side=acting, after_seq=after_seq)
        context = self._of(flow)
        context.stored[acting] = stored
        context.compacted[acting] = any(is_marker(message) for message in stored) or any(
            message.get("role") == "tool"
            and (message.get("content") or "").startswith("[Tool result cleared")
            for message in stored
        )
        return stored

    def fit(
        self, flow: Flow, prompt: PromptDoc, acting: Side, messages: list[LLMMessage],
        rebuild: Rebuild,
    ) -> list[LLMMessage]:  # fmt: skip
        context = self._of(flow)
        tokens = self._estimate(context, messages)
        context.last_tokens = tokens
        policy = self._policy(flow, prompt)
        limit = policy.limit
        if not policy.enabled or limit is None or tokens <= limit:
            return messages
        written = self._compact(flow, prompt, acting, policy, Trigger.PROACTIVE, tokens,
                                policy.target or limit)  # fmt: skip
        if not written:
            return messages
        rebuilt = rebuild()
        context.last_tokens = llm_tokens(rebuilt)
        return rebuilt

    def recover(self, flow: Flow, prompt: PromptDoc, acting: Side) -> bool:
        context = self._of(flow)
        policy = self._policy(flow, prompt)
        if not policy.enabled:
            return False
        before = context.last_tokens
        target = policy.target if policy.target is not None else before // 2
        return self._compact(flow, prompt, acting, policy, Trigger.REACTIVE, before,
                             min(target, before // 2))  # fmt: skip

    def observed(self, flow: Flow, prompt: PromptDoc, sent: int, input_tokens: int) -> None:
        self._of(flow).reported = (sent, input_tokens)

    def tools(self, flow: Flow, prompt: PromptDoc) -> Mapping[str, ResolvedTool]:
        context = self._flows.get(flow)
        side = flow.execution.current_side
        if context is None or not context.compacted.get(side):
            return {}
        return {RECALL: recall_tool()}

    def offered(self, thread: Thread, side: Side) -> Mapping[str, ResolvedTool]:
        """``recall`` while the side has an active compaction (as a step would see it)."""
        active = Compaction.objects.filter(
            thread_id=thread.pk, side=side, status=CompactionStatus.ACTIVE
        )
        return {RECALL: recall_tool()} if active.exists() else {}

    def turn_ended(self, flow: Flow, prompt: PromptDoc) -> None:
        """The idle trigger: the thread is at rest after this turn; when its context passed
        the policy's ``idle_trigger``, compact now, so the next turn does not wait for it."""
        context = self._flows.get(flow)
        if context is None or context.reported is None:
            return
        policy = self._policy(flow, prompt)
        side = flow.execution.current_side
        tokens = context.reported[1]
        if not policy.enabled or policy.window is None or policy.target is None:
            return
        if tokens < policy.window * policy.idle_trigger or side not in context.stored:
            return
        try:
            self._compact(flow, prompt, side, policy, Trigger.IDLE, tokens, policy.target)
        except (SpendHalt, FlowAborted, StaleFence):
            return  # the next step compacts (or halts) in its own time
        except Exception:  # the turn has ended well: a failure here must not change that
            logger.exception("flow %s: the idle compaction failed", flow.flow_id)

    # Inside ------------------------------------------------------------------------------------

    def _estimate(self, context: FlowContext, messages: list[LLMMessage]) -> int:
        """The provider's count for the last call plus an estimate of what was added since,
        when this context extends that call's; else the estimate of all of it."""
        if context.reported is not None:
            sent, counted = context.reported
            if sent <= len(messages):
                return counted + llm_tokens(messages[sent:])
        return llm_tokens(messages)

    def _compact(
        self, flow: Flow, prompt: PromptDoc, side: Side, policy: Policy, trigger: str,
        before: int, target: int,
    ) -> bool:  # fmt: skip
        context = self._of(flow)
        stored = context.stored.get(side)
        if stored is None:
            stored = self.history(flow, prompt, side, 0)
        try:
            written = compact(flow, prompt, side, policy, stored, trigger=trigger,
                              tokens_before=before, target=target)  # fmt: skip
        except (SpendHalt, FlowAborted, StaleFence):
            raise
        except Exception as error:  # a bug here must not fail the step: it goes uncompacted
            logger.exception("flow %s: compacting side %s failed", flow.flow_id, side)
            flow.publish(
                "runtime.warning",
                {"code": "compaction_error",
                 "message": f"compacting the context failed ({type(error).__name__}); the "
                            "step is sent without it"},
            )  # fmt: skip
            return False
        if written is None:
            return False
        context.reported = None  # the next call's context is a new one
        context.compacted[side] = True
        return True

"""The payloads of the context events: the tool catalog a step offered, compaction
(docs/compaction.md), the runtime's warnings and errors, and spilled outputs (declared with
the rest in :data:`threads.events.payloads.PAYLOADS`)."""

from __future__ import annotations

from typing import Any, TypedDict


class ToolCatalogResolved(TypedDict):
    """The tools side ``side``'s prompt offered its model: published by a turn's first model
    call of that side and prompt, and again when a later call's catalog differs (``digest``
    names a catalog). Each tool is ``{name, kind, description, parameters}``."""

    flow_id: str
    side: str
    prompt: str
    digest: str
    tools: list[dict[str, Any]]


class CompactionStarted(TypedDict):
    """Compaction of side ``side``'s context began (``trigger``: ``proactive`` before a step,
    ``reactive`` after the provider refused a context as too long, ``idle`` after a turn);
    ``tokens_before`` is the context's estimate."""

    flow_id: str
    side: str
    trigger: str
    tokens_before: int


class CompactionCompleted(TypedDict):
    """A compaction overlay was written: ``tier`` ``tool_results`` (old large results
    cleared), ``summary`` (a range summarized) or ``truncation`` (a range left out after
    summarizing failed); its range, token figures, the summarizer's model, tokens and cost."""

    flow_id: str
    compaction_id: str
    side: str
    trigger: str
    tier: str
    from_seq: int
    to_seq: int
    tokens_before: int
    tokens_after: int
    extends: str | None
    model: str | None
    input_tokens: int
    output_tokens: int
    cost_micros: int | None


class CompactionFailed(TypedDict):
    """Summarizing failed (``error``); ``fallback`` says what the step sees instead
    (``truncation``, or None when nothing changed)."""

    flow_id: str
    side: str
    trigger: str
    error: str
    fallback: str | None


class RuntimeWarned(TypedDict):
    """``runtime.warning``: something degraded without failing the turn; ``runtime.error``:
    something failed it (``code`` names it, ``message`` says it)."""

    flow_id: str
    code: str
    message: str


class OutputSpilled(TypedDict):
    """A large output was copied to the thread's file ``path`` (a compaction cleared the
    tool result of message ``seq`` from the context)."""

    flow_id: str
    path: str
    seq: int
    bytes: int
    tool_call_id: str

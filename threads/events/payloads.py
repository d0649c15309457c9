"""The payload of each thread event type, declared once (TypedDicts), and the keys each
requires; :func:`threads.events.publish` refuses a payload missing one."""

from __future__ import annotations

from typing import Any, NotRequired, TypedDict

from threads.events.context_payloads import (
    CompactionCompleted,
    CompactionFailed,
    CompactionStarted,
    OutputSpilled,
    RuntimeWarned,
    ToolCatalogResolved,
)
from threads.events.vocabulary import EventType

# Engine events also carry the flow's ``flow_id`` (lifted into the envelope).


class ThreadCreated(TypedDict):
    """A thread was created (API or a parent)."""

    id: str
    agent: str


class ThreadUpdated(TypedDict):
    """Tags or metadata changed (``fields``), the agent changed by a handoff (``agent``),
    or a compaction was reverted (``fields: ["compactions"]``)."""

    id: str
    fields: list[str]
    agent: NotRequired[str]


class ThreadTerminated(TypedDict):
    """Soft terminate: no more work will run. ``terminated_at`` in µs."""

    id: str
    terminated_at: int


class ThreadDeleted(TypedDict):
    """The thread and its children are gone (ephemeral: the log went with them)."""

    id: str


class ThreadStatusChanged(TypedDict):
    """The status read model changed; ``reason`` is the flow's stop reason when one ended it."""

    status: str
    reason: NotRequired[str]


class QueueChanged(TypedDict):
    """The thread's queue of turns changed: ``change`` is ``added``, ``taken`` (a flow
    started it), ``removed`` (remove_queued_turn), ``promoted`` (moved to the front) or
    ``cancelled`` (a terminate or a cancel dropped it); ``item`` is the turn as
    ``GET /turns/{id}`` shows it (``items`` when a change moved several)."""

    change: str
    item: NotRequired[dict[str, Any]]
    items: NotRequired[list[dict[str, Any]]]


class TurnStarted(TypedDict):
    """A flow started running turn ``turn_id`` (``resumed``: after its worker died),
    submitted at ``created_at`` (µs)."""

    flow_id: str
    fence: int
    turn_id: str
    resumed: NotRequired[bool]
    created_at: NotRequired[int]


class TurnEnded(TypedDict):
    """A turn ended: ``turn.completed``, ``turn.failed`` (``reason`` is ``step_error``,
    ``hook_blocked`` or ``session_fail``) or ``turn.cancelled``; ``status`` is its terminal
    status, ``usage`` its summed tokens and cost, ``started_at`` (µs) when it began running."""

    flow_id: str
    reason: str
    turn_id: str
    status: str
    usage: NotRequired[dict[str, Any] | None]
    started_at: NotRequired[int | None]


class StepStarted(TypedDict):
    """A step (one model call and its tools) began on ``side``."""

    step: int
    side: str


class StepCompleted(TypedDict):
    step: int
    side: str


class SideCompleted(TypedDict):
    """A side's turn ended (final answer or stop tool); ``turns`` counts each side's."""

    side: str
    turns: dict[str, int]


class ModelRequested(TypedDict):
    """A model call of ``prompt`` started; its answer will be the message ``message_id``."""

    message_id: str
    prompt: str


class ModelDelta(TypedDict):
    """Streamed text (ephemeral) of the answer ``message_id``."""

    message_id: str
    depth: int
    delta: str


class ModelCompleted(TypedDict):
    """A model call answered; the Log row ``log_id`` holds tokens, latency and cost.
    ``provider`` and ``model_id`` name the provider model that answered."""

    log_id: str
    message_id: str | None
    model: str
    provider: NotRequired[str]
    model_id: NotRequired[str]
    total_tokens: int | None  # None: the provider reported no usage
    latency_ms: float
    error: NotRequired[None]


class ModelFailed(TypedDict):
    """A model call failed after retries and fallbacks, or was aborted (``aborted``)."""

    log_id: str
    message_id: str | None
    model: str
    provider: NotRequired[str]
    model_id: NotRequired[str]
    error: str | None
    aborted: NotRequired[bool]


class MessagePayload(TypedDict):
    """The message as the API shows it; only ``id`` (and ``refs``) when it is large."""

    id: str


class MessageDeleted(TypedDict):
    id: str


class ToolStarted(TypedDict):
    """A tool call began with ``arguments`` (or, above ``INLINE_LIMIT`` bytes of JSON,
    ``arguments_ref``: the tool log that will hold them)."""

    tool_call_id: str
    name: str
    arguments: NotRequired[Any]


class ToolProgress(TypedDict):
    """A tool call's progress: its progress argument's value as the call starts (a registry
    tool's ``progress_argument``), or what the running tool reports
    (``state.report_progress``)."""

    tool_call_id: str
    progress: Any


class ToolEnded(TypedDict):
    """A tool call ended (``tool.result`` on success, ``tool.failed`` otherwise); the Log row
    ``log_id`` holds its arguments and duration."""

    tool_call_id: str
    name: str
    status: str
    log_id: str
    error: NotRequired[str | None]


class PermissionEvaluated(TypedDict):
    """The permission rules decided on tool call ``tool_call_id`` (of tool ``name``) before
    it ran: ``decision`` is ``allow``, ``ask`` or ``deny``; ``rule`` is the rule that decided
    (``{decision, source, when?, id?}``, ``source`` being ``registry``, ``prompt`` or
    ``tenant``), null when none applied and the call was allowed."""

    tool_call_id: str
    name: str
    decision: str
    rule: dict[str, Any] | None


class PermissionAsked(TypedDict):
    """``permission.requested``: an ``ask`` rule put tool call ``tool_call_id`` before a
    person (action ``action_id``). ``permission.resolved``: the person (or the expiry)
    decided; ``decision`` is ``allow`` or ``deny`` and ``by`` is ``person``, ``expiry`` or
    ``cancel`` (the turn ended first)."""

    action_id: str
    turn_id: str
    tool_call_id: str
    name: str
    rule: NotRequired[dict[str, Any] | None]
    decision: NotRequired[str]
    by: NotRequired[str]


class ActionChanged(TypedDict):
    """``action.required``: turn ``turn_id`` rests until a person answers action
    ``action_id`` (``kind`` ``approval`` of tool call ``tool_call_id``, or ``input`` a tool
    asked for), the action as ``GET .../actions/{id}`` shows it in ``action``.
    ``action.resolved``: it was answered, expired or cancelled (``status``). Also sent to
    the tenant's socket, so an inbox can list what waits."""

    action_id: str
    turn_id: str
    kind: str
    tool_call_id: str
    name: str
    status: str
    action: NotRequired[dict[str, Any]]


class KvChanged(TypedDict):
    """A KV value was set or deleted (never the value itself)."""

    key: str
    deleted: bool
    updated_at: int


class FileChanged(TypedDict):
    """``change``: ``written`` (a file), ``created`` (a directory) or ``deleted``."""

    path: str
    change: str


class EffectChanged(TypedDict):
    """A scheduled effect was scheduled (or replayed: ``replayed_from``), removed, ran, or
    failed (``error``); ``status`` is its row's (threads.services.effects)."""

    id: str
    name: str
    status: str
    scheduled_at: NotRequired[int]
    replayed_from: NotRequired[str]
    error: NotRequired[str]


class SubagentChanged(TypedDict):
    """A child thread's lifecycle, on its parent: ``spawned`` (created), ``status`` (its
    registry status changed), ``completed``/``failed`` (a session ended; ``turn_id`` is the
    child's turn), ``closed`` (terminated). ``subagent_id`` is the child thread's id."""

    subagent_id: str
    status: NotRequired[str]
    relationship: NotRequired[str]
    name: NotRequired[str]
    turn_id: NotRequired[str]


class WebhookDisabled(TypedDict):
    """The tenant's webhook endpoint ``endpoint_id`` failed ``failures`` deliveries in a row
    (the last one for an event of this thread) and no longer receives events."""

    endpoint_id: str
    url: str
    failures: int
    reason: str


class CostRecorded(TypedDict):
    """A model call's spend entered the usage ledger: its tokens and its cost in micro-units
    of ``currency`` (None with ``cost_known`` false: the model has no prices), and the output
    its reservation allowed (None: no budget applied); ``provider`` and ``model_id`` name
    the provider model that answered."""

    flow_id: str
    model: str
    provider: NotRequired[str]
    model_id: NotRequired[str]
    message_id: str | None  # None: a call that stored no message (a compaction's summary)
    input_tokens: int
    output_tokens: int
    cached_tokens: int
    cost_micros: int | None
    currency: str
    cost_known: bool
    reserved_max_output_tokens: int | None


class LimitChanged(TypedDict):
    """A budget's spend passed one of its thresholds (``threshold_percent`` of its limit) in
    the window that began at ``window_start`` (0: the turn or lifetime window)."""

    flow_id: str
    limit: str
    budget_id: str
    budget: str
    scope: str
    subject: str
    window: str
    window_start: int
    threshold_percent: int
    spent_micros: int
    spent_tokens: int
    limit_micros: int | None
    limit_tokens: int | None


class Custom(TypedDict):
    """``state.emit(name, data)``; ``data`` is the tool's JSON value."""

    name: str
    data: Any


PAYLOADS: dict[EventType, type] = {
    EventType.THREAD_CREATED: ThreadCreated,
    EventType.THREAD_UPDATED: ThreadUpdated,
    EventType.THREAD_TERMINATED: ThreadTerminated,
    EventType.THREAD_DELETED: ThreadDeleted,
    EventType.THREAD_STATUS: ThreadStatusChanged,
    EventType.QUEUE_CHANGED: QueueChanged,
    EventType.TURN_STARTED: TurnStarted,
    EventType.TURN_COMPLETED: TurnEnded,
    EventType.TURN_FAILED: TurnEnded,
    EventType.TURN_CANCELLED: TurnEnded,
    EventType.STEP_STARTED: StepStarted,
    EventType.STEP_COMPLETED: StepCompleted,
    EventType.SIDE_COMPLETED: SideCompleted,
    EventType.MODEL_REQUESTED: ModelRequested,
    EventType.MODEL_DELTA: ModelDelta,
    EventType.REASONING_DELTA: ModelDelta,
    EventType.MODEL_COMPLETED: ModelCompleted,
    EventType.MODEL_FAILED: ModelFailed,
    EventType.MESSAGE_CREATED: MessagePayload,
    EventType.MESSAGE_UPDATED: MessagePayload,
    EventType.MESSAGE_DELETED: MessageDeleted,
    EventType.TOOL_CATALOG_RESOLVED: ToolCatalogResolved,
    EventType.TOOL_STARTED: ToolStarted,
    EventType.TOOL_PROGRESS: ToolProgress,
    EventType.TOOL_RESULT: ToolEnded,
    EventType.TOOL_FAILED: ToolEnded,
    EventType.PERMISSION_EVALUATED: PermissionEvaluated,
    EventType.PERMISSION_REQUESTED: PermissionAsked,
    EventType.PERMISSION_RESOLVED: PermissionAsked,
    EventType.ACTION_REQUIRED: ActionChanged,
    EventType.ACTION_RESOLVED: ActionChanged,
    EventType.KV_CHANGED: KvChanged,
    EventType.FILE_CHANGED: FileChanged,
    EventType.EFFECT_SCHEDULED: EffectChanged,
    EventType.EFFECT_REMOVED: EffectChanged,
    EventType.EFFECT_COMPLETED: EffectChanged,
    EventType.EFFECT_FAILED: EffectChanged,
    EventType.SUBAGENT_SPAWNED: SubagentChanged,
    EventType.SUBAGENT_STATUS: SubagentChanged,
    EventType.SUBAGENT_COMPLETED: SubagentChanged,
    EventType.SUBAGENT_FAILED: SubagentChanged,
    EventType.SUBAGENT_CLOSED: SubagentChanged,
    EventType.WEBHOOK_DISABLED: WebhookDisabled,
    EventType.COST_RECORDED: CostRecorded,
    EventType.LIMIT_CHANGED: LimitChanged,
    EventType.CONTEXT_COMPACTION_STARTED: CompactionStarted,
    EventType.CONTEXT_COMPACTION_COMPLETED: CompactionCompleted,
    EventType.CONTEXT_COMPACTION_FAILED: CompactionFailed,
    EventType.RUNTIME_WARNING: RuntimeWarned,
    EventType.RUNTIME_ERROR: RuntimeWarned,
    EventType.OUTPUT_SPILLED: OutputSpilled,
    EventType.CUSTOM: Custom,
}


def _required_keys(payload_type: type) -> frozenset[str]:
    # Annotations are strings here (postponed evaluation), which TypedDict's own
    # ``__required_keys__`` cannot see through; NotRequired is read from the text.
    annotations: dict[str, Any] = payload_type.__annotations__
    return frozenset(
        name
        for name, note in annotations.items()
        if not getattr(note, "__forward_arg__", str(note)).startswith("NotRequired")
    )


REQUIRED = {kind: _required_keys(payload_type) for kind, payload_type in PAYLOADS.items()}

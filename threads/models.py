"""Thread storage: threads and everything a thread owns.

Timestamps are microseconds since the Unix epoch (``BigIntegerField``), as the
spec's ThreadState speaks them. Every row carries ``tenant`` (TenantOwned) as
well as ``thread`` so that scoping never depends on a join.
"""

from __future__ import annotations

from django.db import models

from common.ids import new_id
from common.time import now_us
from tenancy.models import TenantOwned


class RunStatus(models.TextChoices):
    """The status vocabulary of turns and of the thread read model (agent-runtime-events,
    "Completion and failure semantics"). docs/engine.md says when each is produced and which
    the platform never produces, and why."""

    ACCEPTED = "accepted"  # never stored: a turn is queued in the transaction accepting it
    QUEUED = "queued"  # waiting behind another turn, or parked by a stop
    PREPARING = "preparing"  # never stored: context is assembled inside ``running``
    RUNNING = "running"  # a flow is executing the turn
    STREAMING = "streaming"  # read model only: a model answer is being streamed
    RETRYING = "retrying"  # a model call is being retried or a fallback is active
    WAITING_INPUT = "waiting_input"  # the human side is next (thread)
    WAITING_PERMISSION = "waiting_permission"  # not produced yet: tool approvals
    WAITING_RESOURCE = "waiting_resource"  # read model only: work waits and no worker takes it
    BLOCKED = "blocked"  # a credential (a model's API key) is missing
    LOST = "lost"  # read model only: running, but no worker holds the thread
    TIMED_OUT = "timed_out"  # not produced yet: no time budget ends a turn
    COMPLETED = "completed"  # the work ended as its agent defines success
    FAILED = "failed"  # the work cannot continue without a new request
    CANCELLED = "cancelled"  # a stop, cancel, interrupt, rollback or terminate ended it
    STALE = "stale"  # read model only: the lock store is unreachable, liveness unknown


# A turn in one of these is over; nothing more will be written for it.
TURN_TERMINAL = frozenset(
    {
        RunStatus.COMPLETED,
        RunStatus.FAILED,
        RunStatus.CANCELLED,
        RunStatus.TIMED_OUT,
        RunStatus.BLOCKED,
    }
)
# A turn in one of these is being run by a flow.
TURN_ACTIVE = frozenset({RunStatus.RUNNING, RunStatus.RETRYING})
# What a thread rests in when no turn runs or waits.
THREAD_REST = frozenset(
    {
        RunStatus.COMPLETED,
        RunStatus.WAITING_INPUT,
        RunStatus.FAILED,
        RunStatus.CANCELLED,
        RunStatus.BLOCKED,
    }
)


class Thread(TenantOwned):
    id = models.UUIDField(primary_key=True, default=new_id, editable=False)
    agent_name = models.CharField(max_length=64)  # the current agent (changes on handoff)
    origin_agent_name = models.CharField(max_length=64)  # never changes
    user_id = models.CharField(max_length=200, blank=True)
    parent = models.ForeignKey(
        "self", null=True, blank=True, on_delete=models.CASCADE, related_name="children"
    )
    parent_relationship = models.CharField(max_length=64, blank=True)
    arguments = models.JSONField(null=True, blank=True)  # a subagent's initial arguments
    tags = models.JSONField(default=list, blank=True)
    metadata = models.JSONField(default=dict, blank=True)
    status = models.CharField(max_length=20, choices=RunStatus.choices, default=RunStatus.COMPLETED)
    # What the thread shows once no turn runs or waits (the last turn's end).
    rest_status = models.CharField(
        max_length=20, choices=RunStatus.choices, default=RunStatus.COMPLETED
    )
    created_at = models.BigIntegerField(default=now_us, editable=False)
    updated_at = models.BigIntegerField(default=now_us)
    last_activity_at = models.BigIntegerField(default=now_us)
    terminated_at = models.BigIntegerField(null=True, blank=True)
    # Incremented by each holder of the thread's lock; writes of a flow are
    # conditional on it, so a worker whose lock expired cannot write.
    fence = models.BigIntegerField(default=0)
    # The seq of the thread's newest message: every message insert increments it under the
    # row's lock and takes the new value (threads.services.messages).
    message_seq = models.BigIntegerField(default=0)
    # Set by POST .../stop; only a new user message clears it (queued work waits).
    stop_requested = models.BooleanField(default=False)
    # The side acting in the running flow ("" when none runs): a worker that finds it set
    # took over from one that died mid-flow, and resumes that side.
    acting_side = models.CharField(max_length=1, blank=True)

    class Meta:
        ordering = ["-created_at"]
        indexes = [
            models.Index(fields=["tenant", "-created_at"], name="thread_tenant_created"),
            models.Index(fields=["tenant", "agent_name"], name="thread_tenant_agent"),
            models.Index(fields=["tenant", "user_id"], name="thread_tenant_user"),
        ]

    def __str__(self) -> str:
        return f"thread {self.id} ({self.agent_name})"


class ThreadOwned(TenantOwned):
    """A row that belongs to one thread (and so to its tenant)."""

    thread = models.ForeignKey(Thread, on_delete=models.CASCADE, related_name="%(class)s_set")

    class Meta:
        abstract = True


class MessageRole(models.TextChoices):
    SYSTEM = "system"
    USER = "user"
    ASSISTANT = "assistant"
    TOOL = "tool"


class MessageStatus(models.TextChoices):
    PENDING = "pending"
    COMPLETED = "completed"
    FAILED = "failed"


class Message(ThreadOwned):
    """A message (spec Threads §2.1). ``seq`` is the per-thread order."""

    id = models.UUIDField(primary_key=True, default=new_id, editable=False)
    seq = models.BigIntegerField()
    role = models.CharField(max_length=16, choices=MessageRole.choices)
    content = models.TextField(null=True, blank=True)  # noqa: DJ001 - the spec has null content
    name = models.CharField(max_length=200, blank=True)  # tool name on tool results
    tool_calls = models.JSONField(null=True, blank=True)  # [{id, type, function{name, arguments}}]
    tool_call_id = models.CharField(max_length=200, blank=True)
    tool_status = models.CharField(max_length=8, blank=True)  # success | error on tool rows
    parent = models.ForeignKey(
        "self", null=True, blank=True, on_delete=models.CASCADE, related_name="+"
    )
    depth = models.PositiveIntegerField(default=0)
    silent = models.BooleanField(default=False)
    status = models.CharField(
        max_length=16, choices=MessageStatus.choices, default=MessageStatus.COMPLETED
    )
    side = models.CharField(max_length=1, blank=True)  # a | b (which side produced it)
    metadata = models.JSONField(default=dict, blank=True)
    attachments = models.JSONField(default=list, blank=True)  # AttachmentRef[]
    reasoning_content = models.TextField(blank=True)
    # The turn that wrote it (None: written outside a turn); a rollback deletes by it.
    turn_id = models.UUIDField(null=True, blank=True)
    created_at = models.BigIntegerField(default=now_us, editable=False)
    updated_at = models.BigIntegerField(default=now_us)

    class Meta:
        ordering = ["seq"]
        constraints = [
            models.UniqueConstraint(fields=["thread", "seq"], name="message_unique_seq"),
        ]
        indexes = [
            models.Index(
                fields=["thread", "turn_id"],
                name="message_turn",
                condition=models.Q(turn_id__isnull=False),
            )
        ]

    def __str__(self) -> str:
        return f"{self.role} message {self.id}"


class Log(ThreadOwned):
    """A record of one model call or tool call (spec Threads getLogs; fields by the engine)."""

    id = models.UUIDField(primary_key=True, default=new_id, editable=False)
    kind = models.CharField(max_length=32)  # llm | tool | ...
    message = models.ForeignKey(
        Message, null=True, blank=True, on_delete=models.SET_NULL, related_name="+"
    )
    parent = models.ForeignKey(
        "self", null=True, blank=True, on_delete=models.CASCADE, related_name="+"
    )
    data = models.JSONField(default=dict, blank=True)
    created_at = models.BigIntegerField(default=now_us, editable=False)

    class Meta:
        ordering = ["created_at", "id"]
        indexes = [models.Index(fields=["thread", "created_at"], name="log_thread_created")]


class ThreadFile(ThreadOwned):
    """A file or directory of a thread's file system (spec Threads §8 FileRecord)."""

    id = models.UUIDField(primary_key=True, default=new_id, editable=False)
    path = models.CharField(max_length=1024)  # normalised: leading /, no trailing /
    parent_path = models.CharField(max_length=1024)  # the directory holding it ("/" at top)
    name = models.CharField(max_length=255)
    is_directory = models.BooleanField(default=False)
    mime_type = models.CharField(max_length=255, blank=True)
    size = models.BigIntegerField(default=0)
    storage = models.CharField(max_length=16, default="local")
    storage_key = models.CharField(max_length=1024, blank=True)  # name in Django storage
    metadata = models.JSONField(default=dict, blank=True)
    width = models.PositiveIntegerField(null=True, blank=True)
    height = models.PositiveIntegerField(null=True, blank=True)
    created_at = models.BigIntegerField(default=now_us, editable=False)
    updated_at = models.BigIntegerField(default=now_us)

    class Meta:
        ordering = ["path"]
        constraints = [
            models.UniqueConstraint(fields=["thread", "path"], name="threadfile_unique_path"),
        ]
        indexes = [models.Index(fields=["thread", "parent_path"], name="threadfile_parent")]


class ThreadValue(ThreadOwned):
    """Durable per-thread KV (spec runtime §14); the JSON value is stored encrypted."""

    id = models.BigAutoField(primary_key=True)
    key = models.CharField(max_length=255)
    value_encrypted = models.BinaryField()
    size = models.PositiveIntegerField()  # bytes of the serialised JSON
    updated_at = models.BigIntegerField(default=now_us)

    class Meta:
        ordering = ["key"]
        constraints = [
            models.UniqueConstraint(fields=["thread", "key"], name="threadvalue_unique_key"),
        ]


class EnvType(models.TextChoices):
    TEXT = "text"  # may appear in prompts and tool output
    SECRET = "secret"  # noqa: S105 - a type name: only inside tools; never shown


class ThreadEnv(ThreadOwned):
    """A thread env variable; the value is always stored encrypted and never shown."""

    id = models.BigAutoField(primary_key=True)
    name = models.CharField(max_length=128)
    value_encrypted = models.BinaryField()
    type = models.CharField(max_length=8, choices=EnvType.choices, default=EnvType.SECRET)
    updated_at = models.BigIntegerField(default=now_us)

    class Meta:
        ordering = ["name"]
        constraints = [
            models.UniqueConstraint(fields=["thread", "name"], name="threadenv_unique_name"),
        ]


class TurnKind(models.TextChoices):
    """What a turn's input asks the engine to do."""

    MESSAGE = "message"  # a user/queued message
    TOOL = "tool"  # a queued tool call
    EFFECT = "effect"  # a fired effect
    CONTINUE = "continue"  # POST .../continue


class TurnSource(models.TextChoices):
    """Who submitted a turn."""

    MESSAGE = "message"  # POST .../messages
    SUBMIT = "submit"  # POST .../turns
    QUEUE_MESSAGE = "queue_message"  # state.queue_message
    QUEUE_TOOL = "queue_tool"  # state.queue_tool at rest
    CONTINUE = "continue"  # POST .../continue
    EFFECT = "effect"


class TurnStrategy(models.TextChoices):
    """What a submitted turn does to the thread's active turn (``multitask_strategy``)."""

    ENQUEUE = "enqueue"  # wait behind it (FIFO)
    REJECT = "reject"  # refuse with 409 when a turn is active or queued
    INTERRUPT = "interrupt"  # cancel it (what it wrote stays) and run next
    ROLLBACK = "rollback"  # cancel it, delete what it wrote, and run next


class Turn(ThreadOwned):
    """One submitted input cycle (agent-runtime-events "turn"); the thread's queue of turns
    is its inbox. Waiting turns run one at a time in ``position`` order (FIFO; a promoted
    turn moves to the front). An input queued by a running turn (``state.queue_message``)
    joins it (``host``) and is drained before its next step; it ends with its host.

    Status changes go through ``threads.services.status`` only."""

    id = models.UUIDField(primary_key=True, default=new_id, editable=False)
    # Drawn from a sequence after the thread row is locked, so positions follow commit order.
    position = models.BigIntegerField()
    host = models.ForeignKey(
        "self", null=True, blank=True, on_delete=models.CASCADE, related_name="+"
    )
    kind = models.CharField(max_length=16, choices=TurnKind.choices)
    source = models.CharField(max_length=16, choices=TurnSource.choices)
    strategy = models.CharField(
        max_length=16, choices=TurnStrategy.choices, default=TurnStrategy.ENQUEUE
    )
    payload = models.JSONField(default=dict)  # the input
    metadata = models.JSONField(default=dict, blank=True)
    status = models.CharField(max_length=20, choices=RunStatus.choices)
    # "" | cancel | interrupt | rollback: a cancel asked of the running flow.
    cancel_requested = models.CharField(max_length=16, blank=True)
    created_at = models.BigIntegerField(default=now_us, editable=False)
    started_at = models.BigIntegerField(null=True, blank=True)
    ended_at = models.BigIntegerField(null=True, blank=True)
    outcome = models.CharField(max_length=32, blank=True)  # the flow's stop reason
    error = models.TextField(blank=True)
    # {input_tokens, output_tokens, total_tokens, cost_usd}; a figure nobody reported is null.
    usage = models.JSONField(null=True, blank=True)
    # The fence of the flow that took it (None: never taken).
    fence = models.BigIntegerField(null=True, blank=True)

    class Meta:
        ordering = ["position"]
        indexes = [
            models.Index(
                fields=["thread", "position"],
                name="turn_waiting",
                condition=models.Q(status="queued"),
            ),
            models.Index(fields=["thread", "-created_at"], name="turn_thread_created"),
        ]

    def __str__(self) -> str:
        return f"turn {self.id} ({self.status})"


class IdempotencyKey(TenantOwned):
    """The first answer to a POST sent with ``Idempotency-Key``: a repeat within
    ``threads.services.idempotency.KEY_TTL_US`` with the same body gets it again. The unique
    constraint, not a read, decides which of two racing requests goes first."""

    id = models.BigAutoField(primary_key=True)
    key = models.CharField(max_length=255)
    request_hash = models.CharField(max_length=64)  # sha256 of method, path and body
    status_code = models.PositiveSmallIntegerField(null=True, blank=True)
    response = models.JSONField(null=True, blank=True)
    created_at = models.BigIntegerField(default=now_us)

    class Meta:
        constraints = [
            models.UniqueConstraint(fields=["tenant", "key"], name="idempotency_unique_key"),
        ]

    def __str__(self) -> str:
        return f"idempotency key {self.key}"


class EffectStatus(models.TextChoices):
    PENDING = "pending"
    PROCESSING = "processing"
    COMPLETED = "completed"
    FAILED = "failed"
    AGENT_CANCELED = "agent_canceled"
    USER_CANCELED = "user_canceled"


class ScheduledEffect(ThreadOwned):
    """A scheduled effect (spec DIGEST §9). Running them comes with the effects issue."""

    id = models.UUIDField(primary_key=True, default=new_id, editable=False)
    name = models.CharField(max_length=64)
    args = models.JSONField(null=True, blank=True)
    scheduled_at = models.BigIntegerField()
    created_at = models.BigIntegerField(default=now_us, editable=False)
    status = models.CharField(max_length=16, choices=EffectStatus.choices, default="pending")
    attempts = models.PositiveIntegerField(default=0)
    error = models.TextField(blank=True)
    completed_at = models.BigIntegerField(null=True, blank=True)
    manual_run = models.BooleanField(default=False)
    replayed_from = models.ForeignKey(
        "self", null=True, blank=True, on_delete=models.SET_NULL, related_name="+"
    )

    class Meta:
        ordering = ["scheduled_at"]
        indexes = [models.Index(fields=["status", "scheduled_at"], name="effect_due")]


class TenantEnv(TenantOwned):
    """A tenant-wide env variable: the tenant level of env lookups (after thread, tool
    config, agent and prompt; before the platform). Stored encrypted, never shown."""

    id = models.BigAutoField(primary_key=True)
    name = models.CharField(max_length=128)
    value_encrypted = models.BinaryField()
    type = models.CharField(max_length=8, choices=EnvType.choices, default=EnvType.SECRET)
    updated_at = models.BigIntegerField(default=now_us)

    class Meta:
        ordering = ["name"]
        constraints = [
            models.UniqueConstraint(fields=["tenant", "name"], name="tenantenv_unique_name"),
        ]


class Event(TenantOwned):
    """One persisted fact of a thread's event log (see ``threads.events``).

    ``sequence`` is gap-free per thread: it is taken from the thread's
    :class:`EventCounter` in the writer's transaction, so a rolled-back write leaves no hole
    and concurrent writers never share a number.

    ``thread`` has no database constraint on purpose: checking one takes a share lock on
    the thread row while the writer holds the counter row, which deadlocks with a writer
    that holds the thread row (a fenced write) and waits for the counter. Rows still go
    with their thread: Django cascades the delete.
    """

    id = models.UUIDField(primary_key=True, default=new_id, editable=False)
    thread = models.ForeignKey(
        Thread, on_delete=models.CASCADE, related_name="events", db_constraint=False
    )
    sequence = models.BigIntegerField()
    type = models.CharField(max_length=48)
    payload = models.JSONField(default=dict, blank=True)
    refs = models.JSONField(null=True, blank=True)
    flow_id = models.CharField(max_length=64, blank=True)
    turn_id = models.CharField(max_length=64, blank=True)
    step_id = models.CharField(max_length=80, blank=True)
    tool_call_id = models.CharField(max_length=200, blank=True)
    created_at = models.BigIntegerField(default=now_us, editable=False)

    class Meta:
        ordering = ["sequence"]
        constraints = [
            models.UniqueConstraint(fields=["thread", "sequence"], name="event_unique_sequence"),
        ]
        indexes = [
            models.Index(
                fields=["thread", "turn_id", "sequence"],
                name="event_turn",
                condition=~models.Q(turn_id=""),
            )
        ]

    def __str__(self) -> str:
        return f"{self.type} #{self.sequence} of thread {self.thread_id}"


class EventCounter(TenantOwned):
    """The last event sequence handed out for a thread; its row lock orders the writers."""

    # No database constraint, for the reason given on Event.thread.
    thread = models.OneToOneField(
        Thread,
        primary_key=True,
        on_delete=models.CASCADE,
        related_name="event_counter",
        db_constraint=False,
    )
    last_sequence = models.BigIntegerField(default=0)

    def __str__(self) -> str:
        return f"event counter of thread {self.thread_id}: {self.last_sequence}"

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


class ThreadStatus(models.TextChoices):
    """The read model of what a thread is doing (kept honest by the engine)."""

    IDLE = "idle"  # nothing to do
    QUEUED = "queued"  # inbox has work, no flow running yet
    RUNNING = "running"  # a flow is executing
    WAITING_INPUT = "waiting_input"  # parked for the human side
    STOPPED = "stopped"  # the last flow was stopped by a user
    TERMINATED = "terminated"  # terminate() was called; no more sends
    FAILED = "failed"  # the last flow ended in an error


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
    status = models.CharField(max_length=16, choices=ThreadStatus.choices, default="idle")
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
    created_at = models.BigIntegerField(default=now_us, editable=False)
    updated_at = models.BigIntegerField(default=now_us)

    class Meta:
        ordering = ["seq"]
        constraints = [
            models.UniqueConstraint(fields=["thread", "seq"], name="message_unique_seq"),
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


class WorkKind(models.TextChoices):
    MESSAGE = "message"  # a user/queued message
    TOOL = "tool"  # a queued tool call
    EFFECT = "effect"  # a fired effect
    CONTINUE = "continue"  # POST .../continue


class QueuedWork(ThreadOwned):
    """The durable FIFO inbox of a thread; ``id`` gives the order."""

    id = models.BigAutoField(primary_key=True)
    kind = models.CharField(max_length=16, choices=WorkKind.choices)
    payload = models.JSONField(default=dict)
    created_at = models.BigIntegerField(default=now_us, editable=False)
    consumed_at = models.BigIntegerField(null=True, blank=True)
    # The fence of the flow that consumed it (None: discarded by terminate).
    consumed_fence = models.BigIntegerField(null=True, blank=True)

    class Meta:
        ordering = ["id"]
        indexes = [
            models.Index(
                fields=["thread", "id"],
                name="queuedwork_pending",
                condition=models.Q(consumed_at__isnull=True),
            )
        ]


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

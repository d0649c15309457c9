"""Threads, what belongs to one thread, its messages and its log rows."""

from __future__ import annotations

from django.contrib.postgres.indexes import BrinIndex
from django.db import models

from common.ids import new_id
from common.time import now_us
from tenancy.models import TenantOwnedBulk
from threads.models.statuses import RunStatus

TITLE_MAX = 200  # characters of a thread's title


class Thread(TenantOwnedBulk):
    id = models.UUIDField(primary_key=True, default=new_id, editable=False)
    agent_name = models.CharField(max_length=64)  # the current agent (changes on handoff)
    origin_agent_name = models.CharField(max_length=64)  # never changes
    user_id = models.CharField(max_length=200, blank=True)
    # Set over the API; blank: lists show one derived from its first user message.
    title = models.CharField(max_length=TITLE_MAX, blank=True)
    parent = models.ForeignKey(
        "self", null=True, blank=True, on_delete=models.CASCADE, related_name="children"
    )
    parent_relationship = models.CharField(max_length=64, blank=True)
    # The root of its subagent tree (the session id); None for a top-level thread.
    root = models.ForeignKey(
        "self", null=True, blank=True, on_delete=models.CASCADE, related_name="+"
    )
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
    # The turn resting on a person's decision (``waiting_permission``/``waiting_input``):
    # while set, the thread's other turns wait behind it (threads.services.actions).
    paused_turn = models.ForeignKey(
        "threads.Turn", null=True, blank=True, on_delete=models.SET_NULL, related_name="+"
    )

    class Meta:
        ordering = ["-created_at"]
        indexes = [
            models.Index(fields=["tenant", "-created_at"], name="thread_tenant_created"),
            models.Index(fields=["tenant", "agent_name"], name="thread_tenant_agent"),
            models.Index(fields=["tenant", "user_id"], name="thread_tenant_user"),
        ]

    def __str__(self) -> str:
        return f"thread {self.id} ({self.agent_name})"


class ThreadOwned(TenantOwnedBulk):
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
            ),
            # The last user message of a thread in one probe (a compacted context keeps it).
            models.Index(
                fields=["thread", "seq"],
                name="message_top_user",
                condition=models.Q(role="user", depth=0),
            ),
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
        indexes = [
            models.Index(fields=["thread", "created_at"], name="log_thread_created"),
            # Retention finds old rows by age (a block range index: cheap to keep).
            BrinIndex(fields=["created_at"], name="log_created_brin"),
        ]

"""Turns (the queue of a thread's work), idempotency keys and scheduled effects."""

from __future__ import annotations

from django.contrib.postgres.indexes import BrinIndex
from django.db import models

from common.ids import new_id
from common.time import now_us
from tenancy.models import TenantOwnedBulk
from threads.models.statuses import RunStatus
from threads.models.threads import ThreadOwned


class TurnKind(models.TextChoices):
    """What a turn's input asks the engine to do."""

    MESSAGE = "message"  # a user/queued message
    TOOL = "tool"  # a queued tool call
    EFFECT = "effect"  # a fired effect
    CONTINUE = "continue"  # POST .../continue
    SPAWN = "spawn"  # the immediate subagents of a new thread


class TurnSource(models.TextChoices):
    """Who submitted a turn."""

    MESSAGE = "message"  # POST .../messages
    SUBMIT = "submit"  # POST .../turns
    QUEUE_MESSAGE = "queue_message"  # state.queue_message
    QUEUE_TOOL = "queue_tool"  # state.queue_tool at rest
    CONTINUE = "continue"  # POST .../continue
    EFFECT = "effect"  # an effect's handler queued a message
    SCHEDULE = "schedule"  # a recurring schedule's run
    SUBAGENT = "subagent"  # a child's result, failure or notification; a parent's message
    IMMEDIATE = "immediate"  # a new thread's immediate subagents


class TurnStrategy(models.TextChoices):
    """What a submitted turn does to the thread's active turn (``multitask_strategy``)."""

    ENQUEUE = "enqueue"  # wait behind it (FIFO)
    REJECT = "reject"  # refuse with 409 when a turn is active or queued
    INTERRUPT = "interrupt"  # cancel it (what it wrote stays) and run next
    ROLLBACK = "rollback"  # cancel it, delete what it wrote, and run next
    # Join the running turn: drained before its next model call (runtime §2, §9); with no
    # turn running, wait like ``enqueue``.
    JOIN = "join"


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
    # The end user the turn is for (the API's ``user``; the thread's user when not given).
    user = models.CharField(max_length=200, blank=True, default="", db_default="")
    # Where a turn paused without an action (a budget's pause) carries on: the step counters
    # and the acting side, as an action's ``resume`` holds them.
    resume = models.JSONField(null=True, blank=True)
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
            models.Index(
                fields=["tenant"], name="turn_waiting_resource",
                condition=models.Q(status="waiting_resource"),
            ),
            # Retention finds finished turns by age (a block range index: cheap to keep).
            BrinIndex(fields=["ended_at"], name="turn_ended_brin"),
        ]  # fmt: skip

    def __str__(self) -> str:
        return f"turn {self.id} ({self.status})"


class IdempotencyKey(TenantOwnedBulk):
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

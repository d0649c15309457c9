"""Actions: one pending decision of a person (agent-runtime-events ``action_id``), on which a
turn rests in ``waiting_permission`` (a tool call's approval) or ``waiting_input`` (structured
input a tool asked for) until ``respond_action`` answers it, it expires, or the turn ends."""

from __future__ import annotations

from django.db import models

from common.ids import new_id
from common.time import now_us
from threads.models.threads import Message, ThreadOwned


class ActionKind(models.TextChoices):
    APPROVAL = "approval"  # a permission rule asked before a tool call
    INPUT = "input"  # state.request_input: a tool needs structured input from a person


class ActionStatus(models.TextChoices):
    PENDING = "pending"
    APPROVED = "approved"
    DENIED = "denied"
    EDITED = "edited"  # approved with new arguments
    ANSWERED = "answered"  # an input request's data
    EXPIRED = "expired"  # nobody answered in time: resolved as ``on_expiry`` says
    CANCELLED = "cancelled"  # its turn ended first (a stop, cancel or terminate)


class Action(ThreadOwned):
    """One decision a turn waits for. ``arguments`` are the tool call's as the model wrote
    them; ``schema`` is what an answer must satisfy (the tool's parameters for ``edit``, the
    requested data for an input); ``resume`` is what the paused flow needs to carry on
    (its step counters, its queued tools, and code mode's recorded host calls)."""

    id = models.UUIDField(primary_key=True, default=new_id, editable=False)
    turn = models.ForeignKey("threads.Turn", on_delete=models.CASCADE, related_name="+")
    kind = models.CharField(max_length=16, choices=ActionKind.choices)
    # The message whose tool call waits (its issuer), and the call.
    issuer = models.ForeignKey(Message, null=True, on_delete=models.SET_NULL, related_name="+")
    tool_call_id = models.CharField(max_length=200)
    tool_name = models.CharField(max_length=200)
    arguments = models.JSONField(default=dict)
    decisions = models.JSONField(default=list)  # what respond_action may answer
    rule = models.JSONField(null=True, blank=True)  # the rule that asked
    prompt = models.TextField(blank=True)  # an input request's question
    schema = models.JSONField(null=True, blank=True)
    on_expiry = models.CharField(max_length=8, default="deny")  # deny | allow
    status = models.CharField(
        max_length=16, choices=ActionStatus.choices, default=ActionStatus.PENDING
    )
    # {reason} for a denial, {arguments} for an edit, {data} for an answer.
    response = models.JSONField(null=True, blank=True)
    responder = models.CharField(max_length=200, blank=True)  # who answered (a label)
    resume = models.JSONField(default=dict, blank=True)
    created_at = models.BigIntegerField(default=now_us, editable=False)
    expires_at = models.BigIntegerField()
    resolved_at = models.BigIntegerField(null=True, blank=True)

    class Meta:
        ordering = ["created_at", "id"]
        indexes = [
            models.Index(
                fields=["expires_at"],
                name="action_pending_expiry",
                condition=models.Q(status="pending"),
            ),
            models.Index(fields=["thread", "created_at"], name="action_thread_created"),
            models.Index(fields=["turn"], name="action_turn"),
        ]

    def __str__(self) -> str:
        return f"action {self.id} ({self.kind} {self.tool_name}, {self.status})"

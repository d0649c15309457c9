"""Subagents: the parent's registry entries of its child threads, and the pending requests
of the variable-bootstrap flow (spec DIGEST §6.4, §11; runtime §7.5)."""

from __future__ import annotations

from django.db import models

from common.ids import new_id
from common.time import now_us
from threads.models.threads import Thread, ThreadOwned


class SubagentLink(ThreadOwned):
    """A registry entry (``SubagentRegistryEntry``) kept by the parent (``thread``) for one
    child thread (``child``, whose id is the entry's ``reference``).

    ``awaited_turn`` is the child turn a blocking call of the parent waits for; the child's
    end leaves that session's outcome to the waiter instead of queueing it to the parent.
    ``outcome`` is the child's newest session outcome (``{turn_id, status, result|error,
    attachments}``)."""

    id = models.UUIDField(primary_key=True, default=new_id, editable=False)
    child = models.OneToOneField(Thread, on_delete=models.CASCADE, related_name="link")
    relationship = models.CharField(max_length=64)
    owner = models.CharField(max_length=1)  # a | b: the side of the parent that owns it
    agent_name = models.CharField(max_length=64)
    title = models.CharField(max_length=200, blank=True)  # the instance label (tag name:<..>)
    description = models.TextField(blank=True)
    blocking = models.BooleanField(default=True)
    resumable = models.BooleanField(default=False)
    receives_messages = models.CharField(max_length=8, default="side_a")  # side_a | side_b
    parent_communication = models.CharField(max_length=8, default="implicit")
    # running | idle | failed | awaiting_human | terminated, or a child's free-form text.
    status = models.CharField(max_length=200, default="running")
    initial_arguments = models.JSONField(null=True, blank=True)
    spawn_group_id = models.CharField(max_length=64, blank=True)
    awaited_turn = models.UUIDField(null=True, blank=True)
    outcome = models.JSONField(null=True, blank=True)
    terminated_at = models.BigIntegerField(null=True, blank=True)
    created_at = models.BigIntegerField(default=now_us, editable=False)
    updated_at = models.BigIntegerField(default=now_us)

    class Meta:
        ordering = ["created_at", "id"]
        indexes = [
            models.Index(
                fields=["thread", "relationship"],
                name="subagent_live",
                condition=models.Q(terminated_at__isnull=True),
            )
        ]

    def __str__(self) -> str:
        return f"subagent {self.child_id} of {self.thread_id} ({self.relationship})"


class VariableRequest(ThreadOwned):
    """A spawn deferred until required scoped variables are provided (the variable-bootstrap
    flow): ``spawn`` is what the create call asked for; ``POST .../variables/{id}`` with the
    missing values creates and boots the child (``child``)."""

    class Status(models.TextChoices):
        PENDING = "pending"
        COMPLETED = "completed"

    id = models.UUIDField(primary_key=True, default=new_id, editable=False)
    relationship = models.CharField(max_length=64)
    agent_name = models.CharField(max_length=64)
    required = models.JSONField(default=list)  # names of the child's required scoped variables
    missing = models.JSONField(default=list)
    spawn = models.JSONField(default=dict)
    # Scoped values the spawn did bring (an immediate group), encrypted as one JSON object.
    values_encrypted = models.BinaryField(null=True, blank=True)
    status = models.CharField(max_length=16, choices=Status.choices, default=Status.PENDING)
    child = models.ForeignKey(
        Thread, null=True, blank=True, on_delete=models.SET_NULL, related_name="+"
    )
    created_at = models.BigIntegerField(default=now_us, editable=False)
    expires_at = models.BigIntegerField()

    class Meta:
        ordering = ["created_at", "id"]

    def __str__(self) -> str:
        return f"variable request {self.id} ({self.agent_name}, {self.status})"

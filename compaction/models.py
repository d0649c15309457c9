"""Compactions: the durable overlays that stand for ranges of a thread's messages in the
context a model is sent. Originals are never edited; an overlay is written, superseded by
the one that extends it, or reverted."""

from __future__ import annotations

from django.db import models

from common.ids import new_id
from common.time import now_us
from tenancy.models import TenantOwned


class CompactionStatus(models.TextChoices):
    ACTIVE = "active"  # the side's context uses it
    SUPERSEDED = "superseded"  # a later compaction extends it
    REVERTED = "reverted"  # undone: the context sees the originals of its range again


class Tier(models.TextChoices):
    TOOL_RESULTS = "tool_results"  # old large tool results cleared (stubs with their seq)
    SUMMARY = "summary"  # a range summarized
    TRUNCATION = "truncation"  # a range left out (summarizing failed)


class Trigger(models.TextChoices):
    PROACTIVE = "proactive"
    REACTIVE = "reactive"
    IDLE = "idle"


class Compaction(TenantOwned):
    """One overlay of one side's context on one thread, complete in itself: the summary of
    messages ``from_seq``..``to_seq`` (none when ``to_seq`` is 0) and the tool results up
    to ``cleared_through`` longer than ``cleared_over`` characters, shown as stubs. The
    first user message (``first_user_seq``) and the last one stay verbatim. At most one
    per thread and side is active."""

    id = models.UUIDField(primary_key=True, default=new_id, editable=False)
    thread = models.ForeignKey(
        "threads.Thread", on_delete=models.CASCADE, related_name="compactions"
    )
    side = models.CharField(max_length=1)
    status = models.CharField(
        max_length=16, choices=CompactionStatus.choices, default=CompactionStatus.ACTIVE
    )
    tier = models.CharField(max_length=16, choices=Tier.choices)
    trigger = models.CharField(max_length=16, choices=Trigger.choices)
    # The summarized (or left out) range; 0 and 0: nothing summarized.
    from_seq = models.BigIntegerField(default=0)
    to_seq = models.BigIntegerField(default=0)
    first_user_seq = models.BigIntegerField(default=0)
    cleared_through = models.BigIntegerField(default=0)
    cleared_over = models.PositiveIntegerField(default=0)
    # {intent, decisions, state, artifacts, open_items}, and as the model is shown it.
    summary = models.JSONField(default=dict)
    summary_text = models.TextField(default="", blank=True)
    model = models.CharField(max_length=128, default="", blank=True)
    tokens_before = models.PositiveIntegerField(default=0)
    tokens_after = models.PositiveIntegerField(default=0)
    input_tokens = models.PositiveIntegerField(default=0)
    output_tokens = models.PositiveIntegerField(default=0)
    cost_micros = models.BigIntegerField(null=True, blank=True)
    policy_version = models.CharField(max_length=16, default="", blank=True)
    extends = models.ForeignKey(
        "self", null=True, blank=True, on_delete=models.SET_NULL, related_name="+"
    )
    turn_id = models.UUIDField(null=True, blank=True)
    error = models.TextField(default="", blank=True)
    created_at = models.BigIntegerField(default=now_us)
    reverted_at = models.BigIntegerField(null=True, blank=True)

    class Meta:
        ordering = ["-created_at"]
        constraints = [
            models.UniqueConstraint(
                fields=["thread", "side"],
                condition=models.Q(status="active"),
                name="compaction_one_active_per_side",
            ),
        ]
        indexes = [models.Index(fields=["thread", "created_at"], name="compaction_thread_idx")]

    def __str__(self) -> str:
        return f"compaction {self.id} of {self.thread_id} ({self.side}, {self.status})"

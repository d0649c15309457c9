"""Recurring schedules: a cron expression in a time zone that submits a turn (to a thread, or
to a new thread of an agent) or fires an effect on a thread (threads.runtime.schedules)."""

from __future__ import annotations

from django.db import models

from common.ids import new_id
from common.time import now_us
from tenancy.models import TenantOwned


class ScheduleAction(models.TextChoices):
    TURN = "turn"  # submit the input as a turn
    EFFECT = "effect"  # fire a registry effect on the thread


class Schedule(TenantOwned):
    """One recurring schedule. Exactly one target: ``thread`` (its turns or effects) or
    ``agent_name`` (each run opens a new thread of that agent). ``next_run_at`` is the next
    slot (µs); a run that finds several slots missed fires once and moves to the next slot
    after now."""

    id = models.UUIDField(primary_key=True, default=new_id, editable=False)
    name = models.CharField(max_length=200, blank=True)
    thread = models.ForeignKey(
        "threads.Thread", null=True, blank=True, on_delete=models.CASCADE, related_name="+"
    )
    agent_name = models.CharField(max_length=64, blank=True)
    cron = models.CharField(max_length=120)
    timezone = models.CharField(max_length=64, default="UTC")
    action = models.CharField(max_length=8, choices=ScheduleAction.choices)
    input = models.JSONField(null=True, blank=True)  # a turn's {content, role?, metadata?}
    effect_name = models.CharField(max_length=64, blank=True)
    effect_args = models.JSONField(null=True, blank=True)
    paused = models.BooleanField(default=False)
    next_run_at = models.BigIntegerField()
    last_run_at = models.BigIntegerField(null=True, blank=True)
    # {thread_id, turn_id | effect_id} of the last run, or {error}.
    last_run = models.JSONField(null=True, blank=True)
    runs = models.PositiveIntegerField(default=0)
    created_at = models.BigIntegerField(default=now_us, editable=False)
    updated_at = models.BigIntegerField(default=now_us)

    class Meta:
        ordering = ["created_at", "id"]
        indexes = [
            models.Index(
                fields=["next_run_at"], name="schedule_due", condition=models.Q(paused=False)
            ),
            models.Index(fields=["tenant", "created_at"], name="schedule_tenant_created"),
        ]

    def __str__(self) -> str:
        return f"schedule {self.id} ({self.cron} {self.timezone}, {self.action})"

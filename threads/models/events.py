"""The persisted event log of a thread and its sequence counter."""

from __future__ import annotations

from django.db import models

from common.ids import new_id
from common.time import now_us
from tenancy.models import TenantOwnedBulk
from threads.models.threads import Thread


class Event(TenantOwnedBulk):
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
    # The span that was active where the event was produced (W3C ids, hex); blank untraced.
    trace_id = models.CharField(max_length=32, blank=True, default="")
    span_id = models.CharField(max_length=16, blank=True, default="")
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


class EventCounter(TenantOwnedBulk):
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

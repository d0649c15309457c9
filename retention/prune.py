"""Pruning history past its retention, in bounded batches (the ``retention.prune`` beat task).

Each kind of history is deleted ``RETENTION_BATCH_ROWS`` rows per statement, each statement
its own short transaction, and at most ``RETENTION_MAX_BATCHES`` statements per kind per
run: a backlog (a new policy, a lowered default) drains over several runs, and no statement
holds its locks for long. A second run at the same time (a duplicate delivery) only finds
fewer rows: every delete repeats its conditions, so a row that changed since it was picked
(a delivery sent again, an idempotency key claimed again) stays.

What goes, per tenant's policy (:mod:`retention.policies`):

* events older than ``events_days``, oldest first and only as a prefix of each thread's log
  (sequence order, stopping at the first younger event), so the kept log stays gap-free and
  ``threads.services.events.event_pruned_through`` can say where it starts;
* log rows older than ``logs_days`` (with the rows nested under them);
* webhook deliveries created more than ``webhook_deliveries_days`` ago that are finished
  (delivered or failed; never pending or sending);
* turns that ended more than ``finished_turns_days`` ago, except each thread's last ended
  turn (the read model's ``last_outcome``); their actions and the inputs they hosted go with
  them, while messages, events and usage rows that name them stay;
* top-level threads terminated more than ``terminated_threads_days`` ago, whole, through
  ``thread_delete`` (their child threads, rows and stored files);
* idempotency keys past ``KEY_TTL_US``, for every tenant.

Never: messages, KV values, files or env of a thread that is not deleted whole, schedules,
effects (``threads.services.effects.effects_prune`` keeps their history), usage rows.
"""

from __future__ import annotations

import logging
from collections import Counter
from dataclasses import dataclass, field
from typing import Any

from django.conf import settings
from django.db import connection, transaction
from django.db.models import Exists, OuterRef, QuerySet, Subquery

from common.time import now_us
from retention.policies import Scope, retention_scopes
from threads.models import (
    TURN_TERMINAL,
    DeliveryStatus,
    Event,
    IdempotencyKey,
    Log,
    Thread,
    Turn,
    WebhookDelivery,
)
from threads.services.idempotency import KEY_TTL_US
from threads.services.threads import thread_delete

logger = logging.getLogger(__name__)

FINISHED_DELIVERIES = (DeliveryStatus.DELIVERED, DeliveryStatus.FAILED)


@dataclass
class PruneReport:
    """Rows deleted by one run, by kind (``events``, ``logs``, ``webhook_deliveries``,
    ``turns``, ``threads``, ``idempotency_keys``), and the kinds whose run stopped at its
    statement budget (more remains for the next run)."""

    deleted: Counter[str] = field(default_factory=Counter)
    unfinished: set[str] = field(default_factory=set)

    @property
    def total(self) -> int:
        return sum(self.deleted.values())


class _Budget:
    """Statements one kind may still run in this run."""

    def __init__(self) -> None:
        self.left = int(settings.RETENTION_MAX_BATCHES)

    def spend(self) -> bool:
        """Take one statement; False when none is left."""
        if self.left <= 0:
            return False
        self.left -= 1
        return True


def _batch() -> int:
    return int(settings.RETENTION_BATCH_ROWS)


def _delete_in_batches(rows: QuerySet[Any], budget: _Budget) -> tuple[int, bool]:
    """Delete ``rows`` ``RETENTION_BATCH_ROWS`` at a time, in the queryset's order; the
    delete repeats ``rows``' conditions. Returns (rows deleted of the
    queryset's model, whether rows may remain because the budget ran out)."""
    deleted, label, size = 0, rows.model._meta.label, _batch()
    while True:
        if not budget.spend():
            return deleted, True
        ids = list(rows.values_list("pk", flat=True)[:size])
        if not ids:
            return deleted, False
        with transaction.atomic():
            _, by_model = rows.filter(pk__in=ids).delete()
        deleted += by_model.get(label, 0)
        if len(ids) < size:
            return deleted, False


# Events ---------------------------------------------------------------------------------------

# The head of one thread's log (its lowest sequences, one batch), deleted up to its first
# event that is not past the cutoff: the log loses a prefix, never a middle.
_DELETE_EVENT_PREFIX = """
WITH head AS (
    SELECT id, sequence, created_at FROM {event} WHERE thread_id = %(thread)s
    ORDER BY sequence LIMIT %(batch)s
), stop AS (
    SELECT min(sequence) AS at FROM head WHERE created_at >= %(cutoff)s
)
DELETE FROM {event} WHERE id IN (
    SELECT head.id FROM head, stop WHERE stop.at IS NULL OR head.sequence < stop.at
)
"""


def _prune_events(scope: Scope, now: int, budget: _Budget) -> tuple[int, bool]:
    """Delete the events of ``scope``'s threads older than its cutoff, as a prefix of each
    thread's log. Candidate threads are those created before the cutoff whose oldest event
    is older than it (one index probe per thread, in the database)."""
    cutoff = scope.cutoff(now)
    oldest = Event.objects.filter(thread_id=OuterRef("pk")).order_by("sequence")
    candidates = (
        Thread.objects.filter(scope.q(), created_at__lt=cutoff)
        .annotate(oldest=Subquery(oldest.values("created_at")[:1]))
        .filter(oldest__lt=cutoff)
        .order_by("created_at")
        .values_list("pk", flat=True)
    )
    statement = _DELETE_EVENT_PREFIX.format(event=connection.ops.quote_name(Event._meta.db_table))
    deleted, size = 0, _batch()
    while True:
        if not budget.spend():
            return deleted, True
        threads = list(candidates[:size])
        if not threads:
            return deleted, False
        for thread_id in threads:
            while True:
                if not budget.spend():
                    return deleted, True
                with transaction.atomic(), connection.cursor() as cursor:
                    cursor.execute(statement, {"thread": thread_id, "batch": size,
                                               "cutoff": cutoff})  # fmt: skip
                    count = int(cursor.rowcount)
                deleted += count
                if count < size:
                    break


# The other kinds ------------------------------------------------------------------------------


# Logs, deliveries and turns are picked unordered: with no index on their age, an ordered
# pick would sort every row past the cutoff, where an unordered one stops at a batch.


def _logs(scope: Scope, now: int) -> QuerySet[Any]:
    return Log.objects.filter(scope.q(), created_at__lt=scope.cutoff(now)).order_by()


def _deliveries(scope: Scope, now: int) -> QuerySet[Any]:
    return WebhookDelivery.objects.filter(
        scope.q(), status__in=FINISHED_DELIVERIES, created_at__lt=scope.cutoff(now)
    ).order_by()


def _turns(scope: Scope, now: int) -> QuerySet[Any]:
    """Top-level turns (inputs they hosted go with them) that ended before the cutoff and
    are not their thread's last ended one, nor host an input still open."""
    later = Turn.objects.filter(
        thread_id=OuterRef("thread_id"), host__isnull=True, ended_at__gt=OuterRef("ended_at")
    )
    open_input = Turn.objects.filter(host_id=OuterRef("pk")).exclude(status__in=TURN_TERMINAL)
    return (
        Turn.objects.filter(
            scope.q(),
            host__isnull=True,
            status__in=TURN_TERMINAL,
            ended_at__lt=scope.cutoff(now),
        )
        .filter(Exists(later))
        .exclude(Exists(open_input))
        .order_by()
    )


def _prune_threads(scope: Scope, now: int, budget: _Budget) -> tuple[int, bool]:
    """Delete top-level threads terminated before the cutoff, one per transaction (each
    through ``thread_delete``: children, rows and stored files go with it)."""
    doomed = Thread.objects.filter(
        scope.q(), parent__isnull=True, terminated_at__lt=scope.cutoff(now)
    ).order_by("terminated_at")
    deleted = 0
    while True:
        if not budget.spend():
            return deleted, True
        with transaction.atomic():
            thread = doomed.select_for_update(skip_locked=True).first()
            if thread is None:
                return deleted, False
            deleted += thread_delete(thread=thread)


def _prune_idempotency_keys(now: int, budget: _Budget) -> tuple[int, bool]:
    expired = IdempotencyKey.objects.filter(created_at__lt=now - KEY_TTL_US).order_by("pk")
    return _delete_in_batches(expired, budget)


# The run --------------------------------------------------------------------------------------

# Kind -> the policy field that says how long it is kept.
KINDS = {
    "events": "events_days",
    "logs": "logs_days",
    "webhook_deliveries": "webhook_deliveries_days",
    "turns": "finished_turns_days",
    "threads": "terminated_threads_days",
}


def _prune_kind(kind: str, scope: Scope, now: int, budget: _Budget) -> tuple[int, bool]:
    if kind == "events":
        return _prune_events(scope, now, budget)
    if kind == "threads":
        return _prune_threads(scope, now, budget)
    rows = {"logs": _logs, "webhook_deliveries": _deliveries, "turns": _turns}[kind]
    return _delete_in_batches(rows(scope, now), budget)


def retention_prune(now: int | None = None) -> PruneReport:
    """Delete what every tenant's policy says is past retention, each kind within its
    statement budget (see the module docstring). Idempotent; safe to run concurrently."""
    now = now_us() if now is None else now
    report = PruneReport()
    for kind, policy_field in KINDS.items():
        budget = _Budget()
        for scope in retention_scopes(policy_field):
            deleted, more = _prune_kind(kind, scope, now, budget)
            report.deleted[kind] += deleted
            if more:
                report.unfinished.add(kind)
                break
    deleted, more = _prune_idempotency_keys(now, _Budget())
    report.deleted["idempotency_keys"] += deleted
    if more:
        report.unfinished.add("idempotency_keys")
    return report

"""The usage ledger, its rollups, budgets with their counters and reservations, and the
per-tenant quota overrides.

The ledger outlives what it counts: its rows name a thread, turn and agent by value (plain
ids and names, no foreign keys), so deleting a thread leaves them and their rollups.
"""

from __future__ import annotations

from django.db import models

from common.ids import new_id
from common.time import now_us
from tenancy.models import TenantOwned, TenantOwnedBulk


class LedgerKind(models.TextChoices):
    MODEL = "model"  # one model call (its tokens and cost)
    TOOL = "tool"  # one tool call
    SANDBOX = "sandbox"  # one sandbox call (its CPU time)
    TURN = "turn"  # one finished turn (its sums, for counting turns)


class LedgerEntry(TenantOwnedBulk):
    """One append-only row per model call, tool call, sandbox call and finished turn.

    ``key`` is the call's idempotency key: a second record with the same key counts nothing.
    ``cost_micros`` is in millionths of ``currency``; None when the model has no prices (its
    tokens still count, its cost is unknown, never 0)."""

    id = models.BigAutoField(primary_key=True)
    key = models.CharField(max_length=200)
    kind = models.CharField(max_length=16, choices=LedgerKind.choices)
    created_at = models.BigIntegerField(default=now_us)
    agent = models.CharField(max_length=64, blank=True)
    thread_id = models.UUIDField(null=True, blank=True)
    turn_id = models.UUIDField(null=True, blank=True)
    user = models.CharField(max_length=200, blank=True)
    model = models.CharField(max_length=200, blank=True)  # the model's name (model rows)
    name = models.CharField(max_length=200, blank=True)  # the tool's name (tool, sandbox rows)
    input_tokens = models.BigIntegerField(default=0)
    output_tokens = models.BigIntegerField(default=0)
    cached_tokens = models.BigIntegerField(default=0)
    cost_micros = models.BigIntegerField(null=True, blank=True)
    currency = models.CharField(max_length=3, default="USD")
    price_version = models.CharField(max_length=32, blank=True)
    cpu_ms = models.BigIntegerField(default=0)

    class Meta:
        constraints = [
            models.UniqueConstraint(fields=["tenant", "key"], name="usage_ledger_key"),
        ]
        indexes = [
            models.Index(fields=["tenant", "created_at"], name="usage_ledger_created"),
            models.Index(fields=["tenant", "thread_id"], name="usage_ledger_thread"),
        ]

    def __str__(self) -> str:
        return f"{self.kind} {self.key}"


class RollupPeriod(models.TextChoices):
    HOUR = "hour"  # UTC hours
    DAY = "day"  # days in the tenant's time zone (as it was when the row counted)


class Rollup(TenantOwnedBulk):
    """The ledger summed by period and dimensions, kept up to date by every ledger insert
    (:func:`usage.ledger.record`) in the same statement; the usage API reads only these."""

    id = models.BigAutoField(primary_key=True)
    period = models.CharField(max_length=4, choices=RollupPeriod.choices)
    start = models.BigIntegerField()  # µs since the epoch, the period's first moment
    kind = models.CharField(max_length=16, choices=LedgerKind.choices)
    agent = models.CharField(max_length=64, blank=True)
    user = models.CharField(max_length=200, blank=True)
    thread_id = models.CharField(max_length=36, blank=True)
    # The model's name (model rows), or the tool's (tool and sandbox rows).
    model = models.CharField(max_length=200, blank=True)
    calls = models.BigIntegerField(default=0)
    input_tokens = models.BigIntegerField(default=0)
    output_tokens = models.BigIntegerField(default=0)
    cached_tokens = models.BigIntegerField(default=0)
    cost_micros = models.BigIntegerField(default=0)  # of the rows whose cost is known
    unknown_cost_calls = models.BigIntegerField(default=0)
    cpu_ms = models.BigIntegerField(default=0)

    class Meta:
        constraints = [
            models.UniqueConstraint(
                fields=["tenant", "period", "start", "kind", "agent", "user", "thread_id",
                        "model"],
                name="usage_rollup_cell",
            ),
        ]  # fmt: skip
        indexes = [models.Index(fields=["tenant", "period", "start"], name="usage_rollup_time")]

    def __str__(self) -> str:
        return f"{self.period} {self.start} {self.kind}"


class BudgetScope(models.TextChoices):
    TENANT = "tenant"
    AGENT = "agent"
    USER = "user"
    THREAD = "thread"
    TURN = "turn"


class BudgetWindow(models.TextChoices):
    TURN = "turn"  # each turn (turn budgets only)
    LIFETIME = "lifetime"  # everything, ever (a thread's lifetime for thread budgets)
    DAY = "day"  # the calendar day in the tenant's time zone
    MONTH = "month"  # the calendar month in the tenant's time zone


class BudgetPolicy(models.TextChoices):
    PAUSE = "pause"  # the turn waits (waiting_resource, reason budget) until there is room
    REJECT = "reject"  # new turns are refused (402) while the budget has no room
    STOP = "stop"  # the turn ends with outcome budget_exceeded


class Budget(TenantOwned):
    """A cap on spend in cost (``limit_micros``) and/or tokens (``limit_tokens``) for one
    scope over one window. ``subject`` names the agent, user or thread it caps; empty means
    each one separately (every agent, every user, every thread, every turn). ``operator``
    budgets are the operator's caps (set in admin): tenants see them and cannot change them,
    and a tenant's own budget of the same scope and window may not exceed them."""

    id = models.UUIDField(primary_key=True, default=new_id, editable=False)
    name = models.CharField(max_length=100)
    scope = models.CharField(max_length=16, choices=BudgetScope.choices)
    subject = models.CharField(max_length=200, blank=True)
    window = models.CharField(max_length=16, choices=BudgetWindow.choices)
    limit_micros = models.BigIntegerField(null=True, blank=True)
    limit_tokens = models.BigIntegerField(null=True, blank=True)
    policy = models.CharField(
        max_length=16, choices=BudgetPolicy.choices, default=BudgetPolicy.PAUSE
    )
    # Percentages of the limit at which limit.changed and a webhook say how much is used.
    thresholds = models.JSONField(default=list, blank=True)
    operator = models.BooleanField(default=False)
    created_at = models.BigIntegerField(default=now_us, editable=False)
    updated_at = models.BigIntegerField(default=now_us)

    class Meta:
        ordering = ["name"]
        constraints = [
            models.UniqueConstraint(fields=["tenant", "name"], name="usage_budget_name"),
        ]

    def __str__(self) -> str:
        return self.name


class BudgetCounter(TenantOwned):
    """What one budget has spent and holds reserved for one subject in one window."""

    id = models.BigAutoField(primary_key=True)
    budget = models.ForeignKey(Budget, on_delete=models.CASCADE, related_name="counters")
    subject = models.CharField(max_length=200, blank=True)
    window_start = models.BigIntegerField()  # µs; 0 for the turn and lifetime windows
    spent_micros = models.BigIntegerField(default=0)
    spent_tokens = models.BigIntegerField(default=0)
    reserved_micros = models.BigIntegerField(default=0)
    reserved_tokens = models.BigIntegerField(default=0)
    # The highest threshold (percent) already announced in this window.
    announced = models.IntegerField(default=0)

    class Meta:
        constraints = [
            models.UniqueConstraint(
                fields=["budget", "subject", "window_start"], name="usage_counter_cell"
            ),
        ]

    def __str__(self) -> str:
        return f"{self.budget_id} {self.subject} {self.window_start}"


class Reservation(TenantOwnedBulk):
    """The worst case of one call, held against every counter it touches (``parts``:
    ``[[counter_id, micros, tokens], ...]``) until the call commits or is released. It lives
    as long as the flow's lock (``lock_key`` holding ``lock_token``): once that lock is gone
    the reservation is dead and released by the next reservation on its counters or by the
    sweep."""

    id = models.UUIDField(primary_key=True, default=new_id, editable=False)
    thread_id = models.UUIDField()
    turn_id = models.UUIDField(null=True, blank=True)
    lock_key = models.CharField(max_length=200, blank=True)
    lock_token = models.CharField(max_length=64, blank=True)
    parts = models.JSONField(default=list)
    created_at = models.BigIntegerField(default=now_us)

    class Meta:
        indexes = [models.Index(fields=["created_at"], name="usage_reservation_age")]

    def __str__(self) -> str:
        return f"reservation {self.id}"


class TenantQuota(TenantOwned):
    """The operator's per-tenant overrides of the quota settings; None: the setting."""

    requests_per_minute = models.PositiveIntegerField(null=True, blank=True)
    key_requests_per_minute = models.PositiveIntegerField(null=True, blank=True)
    turns_per_minute = models.PositiveIntegerField(null=True, blank=True)
    tokens_per_minute = models.PositiveBigIntegerField(null=True, blank=True)
    tokens_per_day = models.PositiveBigIntegerField(null=True, blank=True)

    class Meta:
        constraints = [
            models.UniqueConstraint(fields=["tenant"], name="usage_quota_tenant"),
        ]

    def __str__(self) -> str:
        return f"quotas of {self.tenant_id}"

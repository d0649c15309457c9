"""What a tenant's budgets are set to: created, changed and deleted (over the API and in the
admin) under the rules every budget keeps, and how each one stands in its current window.

The rules (:func:`budget_fields_check`), each refusal a ValidationFailed naming its field:

* ``scope`` tenant, agent, user, thread or turn; ``subject`` names the agent, user or thread
  it caps, ``""`` each one separately, and must be ``""`` for the tenant and turn scopes;
* ``window`` turn, lifetime, day or month: the turn scope takes the turn window, and only
  it does;
* ``limit_cost`` (a decimal amount of :data:`CURRENCY`, stored as ``limit_micros``) and/or
  ``limit_tokens``: at least one;
* ``policy`` pause, reject or stop; ``thresholds`` at most five distinct whole percentages
  from 1 to 99;
* a tenant's budget may not set a limit above an operator budget of the same scope and
  window (whose subject is ``""`` or the same), nor change or delete an operator budget
  (:class:`~common.errors.PermissionDenied`);
* names are unique in a tenant.

Every change sends :data:`usage.signals.budget_changed` in its transaction.
"""

from __future__ import annotations

import re
import uuid
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass
from decimal import Decimal
from typing import Any

from django.db import IntegrityError, transaction
from django.db.models import F, Q, Window
from django.db.models.functions import RowNumber

from common.errors import PermissionDenied, ValidationFailed
from common.payloads import object_body
from common.time import now_us
from tenancy.models import Tenant
from usage.models import Budget, BudgetCounter, BudgetPolicy, BudgetScope, BudgetWindow
from usage.prices import MICROS, micros_text
from usage.signals import budget_changed
from usage.windows import day_start, month_start

CURRENCY = "USD"
FIELDS = ("name", "scope", "subject", "window", "limit_cost", "limit_tokens", "policy",
          "thresholds", "operator")  # fmt: skip
MAX_NAME = 100
MAX_SUBJECT = {BudgetScope.AGENT: 64, BudgetScope.USER: 200, BudgetScope.THREAD: 36}
MAX_THRESHOLDS = 5
MAX_LIMIT = 2**63 - 1  # PostgreSQL's bigint
# The counters shown per budget: a budget of each agent, user or thread has one per subject.
STANDING_CAP = 20
_AMOUNT = re.compile(r"\d{1,12}(\.\d{1,6})?")

OPERATOR_READ_ONLY = (
    "operator budgets are set by the platform's operator; they cannot be created, changed or "
    "deleted over the API"
)


@dataclass(frozen=True)
class Standing:
    """One counter of a budget in its current window (money in micro-units; remaining
    None where the budget has no such limit)."""

    subject: str
    window_start: int
    spent_micros: int
    spent_tokens: int
    reserved_micros: int
    reserved_tokens: int
    remaining_micros: int | None
    remaining_tokens: int | None


def limit_micros_of(value: Any, field: str = "limit_cost") -> int | None:
    """A decimal amount of the currency (a string such as ``"12.50"`` or a number, at most
    six decimals, not negative) as micro-units; None stays None."""
    if value is None:
        return None
    if isinstance(value, bool) or not isinstance(value, int | float | str):
        text = ""
    elif isinstance(value, float):
        text = repr(value)
    else:
        text = str(value)
    if not _AMOUNT.fullmatch(text):
        raise ValidationFailed(
            f"{field} must be an amount of {CURRENCY} of at least 0 with at most 6 decimals "
            '(a string such as "12.50" or a number), or null',
            field=field,
        )
    return int(Decimal(text) * MICROS)


def _tokens_of(value: Any) -> int | None:
    if value is None:
        return None
    if isinstance(value, bool) or not isinstance(value, int) or not 0 <= value <= MAX_LIMIT:
        raise ValidationFailed(
            "limit_tokens must be a whole number of tokens of at least 0, or null",
            field="limit_tokens",
        )
    tokens: int = value
    return tokens


def _choice(data: Mapping[str, Any], field: str, choices: Sequence[str]) -> str:
    value = data.get(field)
    if not isinstance(value, str) or value not in choices:
        raise ValidationFailed(f"{field} must be one of {', '.join(choices)}", field=field)
    return value


def _name_of(value: Any) -> str:
    if not isinstance(value, str) or not value.strip() or len(value) > MAX_NAME:
        raise ValidationFailed(
            f"name must be a non-blank string of at most {MAX_NAME} characters", field="name"
        )
    return value


def _subject_of(value: Any, scope: str) -> str:
    if value is None:
        value = ""
    if not isinstance(value, str):
        raise ValidationFailed('subject must be a string ("": each one)', field="subject")
    if scope in (BudgetScope.TENANT, BudgetScope.TURN):
        if value:
            raise ValidationFailed(
                f'subject must be "" for a {scope} budget (it caps each {scope})',
                field="subject",
            )
        return ""
    if scope == BudgetScope.THREAD and value:
        try:
            return str(uuid.UUID(value))
        except ValueError:
            raise ValidationFailed(
                'subject must be a thread\'s id for a thread budget ("": each thread)',
                field="subject",
            ) from None
    cap = MAX_SUBJECT[BudgetScope(scope)]
    if len(value) > cap:
        raise ValidationFailed(f"subject must be at most {cap} characters", field="subject")
    return value


def _window_of(data: Mapping[str, Any], scope: str) -> str:
    window = _choice(data, "window", BudgetWindow.values)
    if scope == BudgetScope.TURN and window != BudgetWindow.TURN:
        raise ValidationFailed("window must be turn for a turn budget", field="window")
    if scope != BudgetScope.TURN and window == BudgetWindow.TURN:
        raise ValidationFailed(
            f"window turn is for turn budgets only; a {scope} budget takes lifetime, day or month",
            field="window",
        )
    return window


def _thresholds_of(value: Any) -> list[int]:
    if value is None:
        return []
    problem = ValidationFailed(
        f"thresholds must be a list of at most {MAX_THRESHOLDS} distinct whole percentages "
        "from 1 to 99",
        field="thresholds",
    )
    if not isinstance(value, list) or len(value) > MAX_THRESHOLDS:
        raise problem
    for item in value:
        if isinstance(item, bool) or not isinstance(item, int) or not 1 <= item <= 99:
            raise problem
    if len(set(value)) != len(value):
        raise problem
    return sorted(value)


def budget_fields_check(data: Mapping[str, Any]) -> dict[str, Any]:
    """The model's fields from a budget's settings ``data`` (see the module docstring for
    the rules; ``operator`` is not checked here)."""
    scope = _choice(data, "scope", BudgetScope.values)
    fields: dict[str, Any] = {
        "name": _name_of(data.get("name")),
        "scope": scope,
        "subject": _subject_of(data.get("subject", ""), scope),
        "window": _window_of(data, scope),
        "limit_micros": limit_micros_of(data.get("limit_cost")),
        "limit_tokens": _tokens_of(data.get("limit_tokens")),
        "policy": _choice({"policy": data.get("policy", BudgetPolicy.PAUSE)}, "policy",
                          BudgetPolicy.values),
        "thresholds": _thresholds_of(data.get("thresholds", [])),
    }  # fmt: skip
    if fields["limit_micros"] is None and fields["limit_tokens"] is None:
        raise ValidationFailed("set limit_cost, limit_tokens or both", field="limit_cost")
    return fields


def operator_caps_check(
    *, tenant: Tenant, fields: Mapping[str, Any], exclude: uuid.UUID | None = None
) -> None:
    """Refuse a tenant's budget whose limit is above an operator budget of the same scope
    and window (whose subject is ``""`` or the same), naming the field and the cap."""
    caps = Budget.objects.for_tenant(tenant).filter(
        operator=True, scope=fields["scope"], window=fields["window"],
        subject__in={"", fields["subject"]},
    )  # fmt: skip
    if exclude is not None:
        caps = caps.exclude(pk=exclude)
    for cap in caps.order_by("name"):
        where = f"the operator's cap for {cap.scope} budgets per {cap.window} ({cap.name!r})"
        mine, theirs = fields["limit_micros"], cap.limit_micros
        if mine is not None and theirs is not None and mine > theirs:
            raise ValidationFailed(
                f"limit_cost may not exceed {micros_text(theirs)} {CURRENCY}, {where}",
                field="limit_cost",
            )
        mine, theirs = fields["limit_tokens"], cap.limit_tokens
        if mine is not None and theirs is not None and mine > theirs:
            raise ValidationFailed(
                f"limit_tokens may not exceed {theirs} tokens, {where}", field="limit_tokens"
            )


def _name_free(tenant: Tenant, name: str, exclude: uuid.UUID | None) -> None:
    taken = Budget.objects.for_tenant(tenant).filter(name=name)
    if exclude is not None:
        taken = taken.exclude(pk=exclude)
    if taken.exists():
        raise ValidationFailed(f"the tenant has a budget named {name!r} already", field="name")


def _operator_refused(data: Mapping[str, Any]) -> None:
    operator = data.get("operator", False)
    if not isinstance(operator, bool):
        raise ValidationFailed("operator must be true or false", field="operator")
    if operator:
        raise PermissionDenied(OPERATOR_READ_ONLY, field="operator")


def budget_changed_send(budget: Budget) -> None:
    """Tell the engine a budget changed (paused turns may now have room)."""
    budget_changed.send(sender=Budget, tenant_id=budget.tenant_id, budget_id=budget.pk)


def budget_create(*, tenant: Tenant, data: Any) -> Budget:
    """A tenant's new budget from its settings (an API body). ValidationFailed names the
    field of any problem; PermissionDenied for ``operator: true``."""
    body = object_body(data, FIELDS)
    _operator_refused(body)
    fields = budget_fields_check(body)
    with transaction.atomic():
        _name_free(tenant, fields["name"], None)
        operator_caps_check(tenant=tenant, fields=fields)
        budget = _saved(lambda: Budget.objects.create(tenant=tenant, **fields), fields["name"])
        budget_changed_send(budget)
    return budget


def budget_update(*, tenant: Tenant, budget: Budget, data: Any) -> Budget:
    """``budget`` with the settings ``data`` holds changed (the others kept). Refused with
    PermissionDenied for an operator budget."""
    body = object_body(data, FIELDS)
    if budget.operator:
        raise PermissionDenied(OPERATOR_READ_ONLY)
    _operator_refused(body)
    fields = budget_fields_check({**budget_settings(budget), **body})
    with transaction.atomic():
        _name_free(tenant, fields["name"], budget.pk)
        operator_caps_check(tenant=tenant, fields=fields, exclude=budget.pk)
        for name, value in fields.items():
            setattr(budget, name, value)
        budget.updated_at = now_us()
        _saved(lambda: _stored(budget), fields["name"])
        budget_changed_send(budget)
    return budget


def budget_delete(*, tenant: Tenant, budget: Budget) -> None:
    """Delete ``budget`` and its counters; PermissionDenied for an operator budget."""
    if budget.operator:
        raise PermissionDenied(OPERATOR_READ_ONLY)
    with transaction.atomic():
        budget_id = budget.pk
        budget.delete()
        budget_changed.send(sender=Budget, tenant_id=tenant.pk, budget_id=budget_id)


def _stored(budget: Budget) -> Budget:
    budget.save()
    return budget


def _saved(save: Callable[[], Budget], name: str) -> Budget:
    """Run ``save``; a concurrent budget of the same name is the same 400 as a prior one."""
    try:
        with transaction.atomic():
            saved: Budget = save()
    except IntegrityError:
        raise ValidationFailed(
            f"the tenant has a budget named {name!r} already", field="name"
        ) from None
    return saved


def budget_settings(budget: Budget) -> dict[str, Any]:
    """The budget's settings as the API writes them."""
    return {
        "name": budget.name, "scope": budget.scope, "subject": budget.subject,
        "window": budget.window, "limit_cost": micros_text(budget.limit_micros),
        "limit_tokens": budget.limit_tokens, "policy": budget.policy,
        "thresholds": list(budget.thresholds or []),
    }  # fmt: skip


# Standing -------------------------------------------------------------------------------------


def current_window_start(window: str, time_zone: str, now: int) -> int:
    """The first moment of the budget window holding ``now`` (0: turn and lifetime)."""
    if window == BudgetWindow.DAY:
        return day_start(now, time_zone)
    if window == BudgetWindow.MONTH:
        return month_start(now, time_zone)
    return 0


def _remaining(limit: int | None, spent: int, reserved: int) -> int | None:
    return None if limit is None else max(0, limit - spent - reserved)


def budget_standings(
    *, tenant: Tenant, budgets: Sequence[Budget], now: int | None = None
) -> dict[uuid.UUID, list[Standing]]:
    """Each budget's counters in its current window, newest window first, then the most
    spent first, at most :data:`STANDING_CAP` each (one query for all)."""
    moment = now_us() if now is None else now
    standings: dict[uuid.UUID, list[Standing]] = {budget.pk: [] for budget in budgets}
    if not budgets:
        return standings
    current = Q()
    for budget in budgets:
        start = current_window_start(budget.window, tenant.time_zone, moment)
        current |= Q(budget_id=budget.pk, window_start__gte=start)
    ranked = (
        BudgetCounter.objects.for_tenant(tenant).filter(current)
        .annotate(rank=Window(
            RowNumber(), partition_by=[F("budget_id")],
            order_by=[F("window_start").desc(), F("spent_micros").desc(),
                      F("spent_tokens").desc(), F("id").asc()],
        ))
        .filter(rank__lte=STANDING_CAP)
        .order_by("budget_id", "rank")
    )  # fmt: skip
    limits = {budget.pk: budget for budget in budgets}
    for counter in ranked:
        budget = limits[counter.budget_id]
        standings[budget.pk].append(
            Standing(
                subject=counter.subject, window_start=counter.window_start,
                spent_micros=counter.spent_micros, spent_tokens=counter.spent_tokens,
                reserved_micros=counter.reserved_micros,
                reserved_tokens=counter.reserved_tokens,
                remaining_micros=_remaining(budget.limit_micros, counter.spent_micros,
                                            counter.reserved_micros),
                remaining_tokens=_remaining(budget.limit_tokens, counter.spent_tokens,
                                            counter.reserved_tokens),
            )
        )  # fmt: skip
    return standings


def standing_json(standing: Standing) -> dict[str, Any]:
    return {
        "subject": standing.subject,
        "window_start": standing.window_start,
        "spent_cost": micros_text(standing.spent_micros),
        "spent_tokens": standing.spent_tokens,
        "reserved_cost": micros_text(standing.reserved_micros),
        "reserved_tokens": standing.reserved_tokens,
        "remaining_cost": micros_text(standing.remaining_micros),
        "remaining_tokens": standing.remaining_tokens,
    }


def budget_json(budget: Budget, standing: Sequence[Standing]) -> dict[str, Any]:
    """A budget as the API shows it, with its standing."""
    return {
        "id": str(budget.pk),
        **budget_settings(budget),
        "limit_micros": budget.limit_micros,
        "currency": CURRENCY,
        "operator": budget.operator,
        "created_at": budget.created_at,
        "updated_at": budget.updated_at,
        "standing": [standing_json(item) for item in standing],
    }

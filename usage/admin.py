"""Admin pages of the usage app."""

from __future__ import annotations

from typing import Any

from django import forms
from django.conf import settings
from django.contrib import admin
from django.core.exceptions import PermissionDenied
from django.db import models, transaction
from django.http import HttpRequest

from common.errors import ValidationFailed
from common.time import now_us
from tenancy.admin import OperatorWritesAdmin, TenantScopedAdmin, format_us, is_operator
from tenancy.models import Role
from usage.budget_settings import budget_changed_send, budget_fields_check, operator_caps_check
from usage.models import Budget, LedgerEntry, Rollup, TenantQuota
from usage.prices import micros_text
from usage.quotas import QUOTAS, quota_counters_forget
from usage.signals import budget_changed

# Quotas ----------------------------------------------------------------------------------------


@admin.register(TenantQuota)
class TenantQuotaAdmin(OperatorWritesAdmin[TenantQuota]):
    """The operator's per-tenant overrides of the quota settings (usage.quotas): only
    superusers add, change or delete them; a tenant's staff see their own tenant's.
    A change applies at once in this process and within ``OVERRIDES_FOR_S`` in others."""

    list_display = ["tenant", *(quota.name for quota in QUOTAS)]
    list_filter = ["tenant"]
    search_fields = ["tenant__slug"]

    def get_readonly_fields(self, request: HttpRequest, obj: Any = None) -> Any:
        return [*super().get_readonly_fields(request, obj), *([] if obj is None else ["tenant"])]

    def formfield_for_dbfield(
        self, db_field: models.Field[Any, Any], request: HttpRequest, **kwargs: Any
    ) -> forms.Field | None:
        field = super().formfield_for_dbfield(db_field, request, **kwargs)
        quota = next((quota for quota in QUOTAS if quota.name == db_field.name), None)
        if field is not None and quota is not None:
            setting = getattr(settings, quota.setting)
            field.help_text = (
                f"{quota.counts} per {quota.per}. Empty: the setting {quota.setting} "
                f"(now {setting or 'unlimited'}); 0: unlimited."
            )
        return field

    def save_model(self, request: HttpRequest, obj: TenantQuota, form: Any, change: bool) -> None:
        super().save_model(request, obj, form, change)
        quota_counters_forget()

    def delete_model(self, request: HttpRequest, obj: TenantQuota) -> None:
        super().delete_model(request, obj)
        quota_counters_forget()

    def delete_queryset(self, request: HttpRequest, queryset: Any) -> None:
        super().delete_queryset(request, queryset)
        quota_counters_forget()


# Budgets, the ledger and its rollups ----------------------------------------------------------
# Operators set operator budgets here (tenants see them over the API and cannot change them);
# a tenant's admins may also keep the tenant's own budgets here, under the API's rules
# (usage.budget_settings). The ledger and its rollups are read-only: only usage.ledger writes.


class BudgetForm(forms.ModelForm[Budget]):
    """A budget's settings under the rules of :mod:`usage.budget_settings`, the cost limit
    and the thresholds as people write them."""

    limit_cost = forms.DecimalField(
        required=False, min_value=0, max_digits=18, decimal_places=6,
        help_text="USD; empty: no cost limit (set a cost limit, a token limit or both)",
    )  # fmt: skip
    thresholds_text = forms.CharField(
        required=False, label="Thresholds",
        help_text="up to 5 distinct percentages from 1 to 99, comma-separated (e.g. 50, 80)",
    )  # fmt: skip

    class Meta:
        model = Budget
        fields = ["tenant", "name", "scope", "subject", "window", "limit_tokens", "policy",
                  "operator"]  # fmt: skip

    def __init__(self, *args: Any, **kwargs: Any) -> None:
        super().__init__(*args, **kwargs)
        budget = self.instance
        if budget.limit_micros is not None:
            self.initial["limit_cost"] = micros_text(budget.limit_micros)
        self.initial["thresholds_text"] = ", ".join(str(t) for t in budget.thresholds or [])
        if budget._state.adding and "operator" in self.fields:
            self.initial["operator"] = True

    def _thresholds(self) -> Any:
        text = self.cleaned_data.get("thresholds_text") or ""
        parts = [part.strip() for part in text.split(",") if part.strip()]
        try:
            return [int(part) for part in parts]
        except ValueError:
            return parts  # refused by the rules, named at the field

    def clean(self) -> dict[str, Any]:
        cleaned = super().clean() or {}
        if self.errors:
            return cleaned
        cost = cleaned.get("limit_cost")
        data = {
            "name": cleaned.get("name"), "scope": cleaned.get("scope"),
            "subject": cleaned.get("subject") or "", "window": cleaned.get("window"),
            "limit_cost": None if cost is None else str(cost),
            "limit_tokens": cleaned.get("limit_tokens"), "policy": cleaned.get("policy"),
            "thresholds": self._thresholds(),
        }  # fmt: skip
        try:
            fields = budget_fields_check(data)
            tenant = cleaned.get("tenant") or getattr(self.instance, "tenant", None)
            if not cleaned.get("operator") and tenant is not None:
                operator_caps_check(tenant=tenant, fields=fields, exclude=self.instance.pk)
        except ValidationFailed as error:
            field = {"thresholds": "thresholds_text"}.get(error.field or "", error.field)
            self.add_error(field if field in self.fields else None, error.message)
            return cleaned
        self.checked = fields
        return cleaned

    def save(self, commit: bool = True) -> Budget:
        budget = super().save(commit=False)
        for name, value in self.checked.items():
            setattr(budget, name, value)
        if commit:
            budget.save()
        return budget


def _operator_only(request: HttpRequest, budget: Budget | None) -> bool:
    """Operator budgets are the superusers' to change."""
    return budget is None or not budget.operator or is_operator(request)


@admin.register(Budget)
class BudgetAdmin(TenantScopedAdmin[Budget]):
    """Budgets: superusers set operator budgets (``operator`` is checked on a new one); a
    tenant's admins keep its own. Every save and delete tells the engine
    (usage.signals.budget_changed), which resumes turns paused for room."""

    form = BudgetForm
    write_role = Role.ADMIN
    list_display = ["name", "tenant", "scope", "subject", "window", "limit", "policy",
                    "operator", "updated_at"]  # fmt: skip
    list_filter = ["operator", "scope", "window", "policy", "tenant"]
    search_fields = ["name", "subject", "tenant__slug"]
    fields = ["tenant", "name", "scope", "subject", "window", "limit_cost", "limit_tokens",
              "policy", "thresholds_text", "operator"]  # fmt: skip

    @admin.display(description="limit")
    def limit(self, budget: Budget) -> str:
        limits = []
        if budget.limit_micros is not None:
            limits.append(f"{micros_text(budget.limit_micros)} USD")
        if budget.limit_tokens is not None:
            limits.append(f"{budget.limit_tokens:,} tokens")
        return " and ".join(limits)

    def get_readonly_fields(self, request: HttpRequest, obj: Any = None) -> Any:
        fixed = [] if obj is None else ["tenant"]
        if not is_operator(request):
            fixed.append("operator")
        return [*super().get_readonly_fields(request, obj), *fixed]

    def has_change_permission(self, request: HttpRequest, obj: Any = None) -> bool:
        return super().has_change_permission(request, obj) and _operator_only(request, obj)

    def has_delete_permission(self, request: HttpRequest, obj: Any = None) -> bool:
        return super().has_delete_permission(request, obj) and _operator_only(request, obj)

    def save_model(self, request: HttpRequest, obj: Budget, form: Any, change: bool) -> None:
        with transaction.atomic():
            if change:
                obj.updated_at = now_us()
            super().save_model(request, obj, form, change)
            budget_changed_send(obj)

    def delete_model(self, request: HttpRequest, obj: Budget) -> None:
        with transaction.atomic():
            tenant_id, budget_id = obj.tenant_id, obj.pk
            super().delete_model(request, obj)
            budget_changed.send(sender=Budget, tenant_id=tenant_id, budget_id=budget_id)

    def delete_queryset(self, request: HttpRequest, queryset: Any) -> None:
        with transaction.atomic():
            gone = list(queryset.values_list("tenant_id", "id"))
            if any(operator for operator in queryset.values_list("operator", flat=True)) and (
                not is_operator(request)
            ):
                raise PermissionDenied("operator budgets are the operator's to delete")
            super().delete_queryset(request, queryset)
            for tenant_id, budget_id in gone:
                budget_changed.send(sender=Budget, tenant_id=tenant_id, budget_id=budget_id)


class ReadOnlyAdmin(TenantScopedAdmin[Any]):
    """Rows only :mod:`usage.ledger` writes: listed and shown, never added, changed or
    deleted here."""

    can_add = False
    can_change = False
    can_delete = False


@admin.register(LedgerEntry)
class LedgerEntryAdmin(ReadOnlyAdmin):
    """The ledger: one row per model call, tool call, sandbox call and finished turn."""

    list_display = ["created_at", "tenant", "kind", "agent", "user", "model", "name",
                    "input_tokens", "output_tokens", "cost", "cpu_ms"]  # fmt: skip
    list_filter = ["kind", "currency", "tenant"]
    search_fields = ["key", "agent", "user", "model", "name", "=thread_id", "=turn_id"]
    ordering = ["-created_at"]

    @admin.display(description="cost (USD)", ordering="cost_micros")
    def cost(self, entry: LedgerEntry) -> str:
        return micros_text(entry.cost_micros) or "unknown"


@admin.register(Rollup)
class RollupAdmin(ReadOnlyAdmin):
    """The ledger summed per UTC hour and per local day of the tenant, by kind, agent, user,
    thread and model: what the usage API reads."""

    list_display = ["period", "period_start", "tenant", "kind", "agent", "user", "thread_id",
                    "model", "calls", "input_tokens", "output_tokens", "cost",
                    "unknown_cost_calls", "cpu_ms"]  # fmt: skip
    list_filter = ["period", "kind", "tenant"]
    search_fields = ["agent", "user", "model", "=thread_id"]
    ordering = ["-start"]

    @admin.display(description="start", ordering="start")
    def period_start(self, rollup: Rollup) -> str | None:
        return format_us(rollup.start)

    @admin.display(description="known cost (USD)", ordering="cost_micros")
    def cost(self, rollup: Rollup) -> str:
        text = micros_text(rollup.cost_micros) or ""
        return text if not rollup.unknown_cost_calls else f"≥ {text}"

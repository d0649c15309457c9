"""Admin pages of retention: the operator sets each tenant's policy (superusers only); a
tenant's staff see their own tenant's."""

from __future__ import annotations

from typing import Any

from django import forms
from django.conf import settings
from django.contrib import admin
from django.db import models
from django.http import HttpRequest

from common.time import now_us
from retention.models import POLICY_FIELDS, RetentionPolicy
from tenancy.admin import OperatorWritesAdmin


@admin.register(RetentionPolicy)
class RetentionPolicyAdmin(OperatorWritesAdmin[RetentionPolicy]):
    """A tenant's retention in days per kind of history: empty is the operator's default
    (named next to each field), 0 keeps forever. The next run of ``retention.prune`` applies
    a change."""

    list_display = ["tenant", *POLICY_FIELDS]
    list_filter = ["tenant"]
    search_fields = ["tenant__slug"]
    exclude = ["updated_at"]

    def get_readonly_fields(self, request: HttpRequest, obj: Any = None) -> Any:
        return [*super().get_readonly_fields(request, obj), *([] if obj is None else ["tenant"])]

    def formfield_for_dbfield(
        self, db_field: models.Field[Any, Any], request: HttpRequest, **kwargs: Any
    ) -> forms.Field | None:
        field = super().formfield_for_dbfield(db_field, request, **kwargs)
        setting = POLICY_FIELDS.get(db_field.name)
        if field is not None and setting is not None:
            default = getattr(settings, setting)
            field.help_text = (
                f"Days to keep {db_field.help_text}. Empty: the setting {setting} (now "
                f"{default or 'forever'}); 0: forever."
            )
        return field

    def save_model(
        self, request: HttpRequest, obj: RetentionPolicy, form: Any, change: bool
    ) -> None:
        obj.updated_at = now_us()
        super().save_model(request, obj, form, change)

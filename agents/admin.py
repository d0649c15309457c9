"""Definitions and permission rules in the admin, written through the API's own door.

A definition's form parses its fields as the kind's document (``parse_document``) and runs
``definition_save`` (which checks the tenant's whole definition graph) in a savepoint that
is rolled back, so every problem shows at its field, or as a form error naming its path
and, for another definition, that definition. Saving then calls ``definition_save`` for
real; deleting calls ``definition_delete`` (refused while something refers to the row).
A model's API key is write-only: typed in, stored encrypted, never shown; so is a provider
credential's, written through ``credential_save`` as by the API.
"""

from __future__ import annotations

import copy
from collections.abc import Mapping
from typing import Any, ClassVar

from django import forms
from django.contrib import admin, messages
from django.db import transaction
from django.http import HttpRequest, HttpResponse, HttpResponseRedirect
from django.urls import reverse

from agents.credentials import credential_delete, credential_save
from agents.documents import Strict
from agents.form_errors import add_definition_problems, add_problem
from agents.models import (
    Agent,
    CodeTool,
    Definition,
    Model,
    PermissionRule,
    Prompt,
    ProviderCredential,
)
from agents.permission_rules import FIELDS as RULE_FIELDS
from agents.permission_rules import permission_rule_delete, permission_rule_save
from agents.services import KEEP, definition_delete, definition_save, parse_document
from agents.validation import SINGULAR, Kind
from common.errors import DomainError
from tenancy.admin import TenantScopedAdmin
from tenancy.models import Role, Tenant


class _DryRun(Exception):
    """Rolls back a write made only to validate it."""


class ServiceForm(forms.ModelForm[Any]):
    """A form whose rows are written by a service: ``clean()`` runs the service through
    ``dry_run()`` (a savepoint rolled back), and its errors land at their fields."""

    def tenant(self) -> Tenant | None:
        chosen = self.cleaned_data.get("tenant")
        if isinstance(chosen, Tenant):
            return chosen
        return self.instance.tenant if self.instance.tenant_id else None

    def dry_run(self, write: Any) -> Any:
        """``write()``'s result, with everything it wrote rolled back."""
        outcome: list[Any] = []
        try:
            with transaction.atomic():
                outcome.append(write())
                raise _DryRun
        except _DryRun:
            pass
        return outcome[0]

    def add_problem(self, path: str, message: str) -> None:
        """``message`` at the field ``path`` starts with, else as a form error naming it."""
        add_problem(self, path, message)


class DefinitionForm(ServiceForm):
    kind: ClassVar[Kind]
    document: Strict | None = None

    def __init__(self, *args: Any, **kwargs: Any) -> None:
        super().__init__(*args, **kwargs)
        self.current_name: str | None = None if self.instance._state.adding else self.instance.name

    def document_data(self) -> dict[str, Any]:
        """The document the fields describe; an empty optional field takes its default."""
        data: dict[str, Any] = {}
        for name in self.instance.DOCUMENT.model_fields:
            value = (
                self.cleaned_data.get(name) if name in self.fields else getattr(self.instance, name)
            )
            if value is None or value == "":
                continue
            data[name] = value
        return data

    def api_key(self) -> object:
        return KEEP

    def clean(self) -> dict[str, Any]:
        cleaned = super().clean() or {}
        tenant = self.tenant()
        if self.errors or tenant is None:
            return cleaned
        try:
            document = parse_document(self.kind, self.document_data())
            self.document = document
            self.dry_run(
                lambda: definition_save(
                    tenant=tenant,
                    kind=self.kind,
                    doc=document,
                    current_name=self.current_name,
                    api_key=self.api_key(),
                )
            )
        except DomainError as error:
            self.document = None
            self._add_domain_error(error)
        return cleaned

    def _add_domain_error(self, error: DomainError) -> None:
        name = self.cleaned_data.get("name")
        if not add_definition_problems(self, error, kind=SINGULAR[self.kind], name=name):
            self.add_problem(error.field or "", error.message)


def key_field(more: str = "") -> forms.CharField:
    """A write-only API key: typed in, never rendered back."""
    return forms.CharField(
        label="API key",
        required=False,
        widget=forms.PasswordInput(render_value=False),
        help_text=f"Write-only: stored encrypted and never shown. Leave empty to keep the "
        f"stored key{more}.",
    )


class ModelDefinitionForm(DefinitionForm):
    kind = "models"
    api_key_value = key_field()
    remove_api_key = forms.BooleanField(
        label="Remove the stored API key", required=False, initial=False
    )

    def api_key(self) -> object:
        if self.cleaned_data.get("remove_api_key"):
            return None
        return self.cleaned_data.get("api_key_value") or KEEP


class PromptForm(DefinitionForm):
    kind = "prompts"


class AgentForm(DefinitionForm):
    kind = "agents"


class CodeToolForm(DefinitionForm):
    kind = "code_tools"


class DefinitionAdmin(TenantScopedAdmin[Definition]):
    form: type[DefinitionForm]
    list_filter = ["tenant"]
    search_fields = ["name", "tenant__slug"]
    extra_fields: ClassVar[list[str]] = []

    def get_fields(self, request: HttpRequest, obj: Any = None) -> Any:
        document = list(self.model.DOCUMENT.model_fields)
        if obj is None:
            return ["tenant", *document, *self.extra_fields]
        return ["tenant", *document, *self.extra_fields, "created_at", "updated_at"]

    def get_readonly_fields(self, request: HttpRequest, obj: Any = None) -> Any:
        return [] if obj is None else ["tenant", "created_at", "updated_at"]

    def get_actions(self, request: HttpRequest) -> Any:
        found = super().get_actions(request)
        found.pop("delete_selected", None)  # deletes go one by one through definition_delete
        return found

    def save_model(self, request: HttpRequest, obj: Any, form: Any, change: bool) -> None:
        saved = definition_save(
            tenant=form.tenant(), kind=form.kind, doc=form.document,
            current_name=form.current_name, api_key=form.api_key(),
        )  # fmt: skip
        for field in type(obj)._meta.concrete_fields:
            setattr(obj, field.attname, getattr(saved.row, field.attname))
        obj._state.adding = False
        for warning in saved.warnings:
            self.message_user(request, f"Warning: {warning.describe()}", level=messages.WARNING)

    def delete_model(self, request: HttpRequest, obj: Any) -> None:
        definition_delete(tenant=obj.tenant, kind=self.form.kind, name=obj.name)

    def delete_view(
        self, request: HttpRequest, object_id: str, extra_context: dict[str, Any] | None = None
    ) -> HttpResponse:
        try:
            return super().delete_view(request, object_id, extra_context)
        except DomainError as error:
            self.message_user(request, error.message, level=messages.ERROR)
            info = (self.opts.app_label, self.opts.model_name)
            return HttpResponseRedirect(
                reverse("admin:{}_{}_change".format(*info), args=[object_id])
            )


@admin.register(Model)
class ModelAdmin(DefinitionAdmin):
    form = ModelDefinitionForm
    list_display = ["name", "tenant", "provider", "model_id", "has_api_key", "updated_at"]
    list_filter = ["tenant", "provider"]
    extra_fields = ["api_key_value", "remove_api_key", "has_api_key"]

    def get_fields(self, request: HttpRequest, obj: Any = None) -> Any:
        fields = super().get_fields(request, obj)
        return fields if obj is not None else [f for f in fields if f != "has_api_key"]

    def get_readonly_fields(self, request: HttpRequest, obj: Any = None) -> Any:
        fields = super().get_readonly_fields(request, obj)
        return fields if obj is None else [*fields, "has_api_key"]

    @admin.display(boolean=True, description="API key stored")
    def has_api_key(self, obj: Model) -> bool:
        return obj.has_api_key


@admin.register(Prompt)
class PromptAdmin(DefinitionAdmin):
    form = PromptForm
    list_display = ["name", "tenant", "model", "include_chat", "updated_at"]


@admin.register(Agent)
class AgentAdmin(DefinitionAdmin):
    form = AgentForm
    list_display = ["name", "tenant", "type", "expose_as_tool", "updated_at"]
    list_filter = ["tenant", "type"]


@admin.register(CodeTool)
class CodeToolAdmin(DefinitionAdmin):
    form = CodeToolForm
    list_display = ["name", "tenant", "language", "updated_at"]


class RowServiceForm(ServiceForm):
    """A form for a row one service writes, ``service_save(tenant=, data=, current=)``:
    ``clean()`` runs it on ``service_data()`` (rolled back), so its refusals show at their
    fields."""

    @staticmethod
    def service_save(*, tenant: Tenant, data: Mapping[str, Any], current: Any) -> Any:
        raise NotImplementedError

    def service_data(self) -> Mapping[str, Any]:
        raise NotImplementedError

    def clean(self) -> dict[str, Any]:
        cleaned = super().clean() or {}
        tenant = self.tenant()
        if self.errors or tenant is None:
            return cleaned
        current = None if self.instance._state.adding else copy.copy(self.instance)
        try:
            self.dry_run(
                lambda: self.service_save(tenant=tenant, data=self.service_data(), current=current)
            )
        except DomainError as error:
            self.add_problem(self.field_of(error.field or ""), error.message)
        return cleaned

    def field_of(self, field: str) -> str:
        """The form field where the service's ``field`` shows."""
        return field


class RowServiceAdmin(TenantScopedAdmin[Any]):
    """An admin whose rows its form's service writes and ``delete`` deletes, as the API
    does; ``fields`` are shown with their times once the row exists."""

    form: type[RowServiceForm]
    edited: ClassVar[list[str]]

    @staticmethod
    def delete(*, tenant: Tenant, row: Any) -> None:
        raise NotImplementedError

    def get_fields(self, request: HttpRequest, obj: Any = None) -> Any:
        fields = ["tenant", *self.edited]
        return fields if obj is None else [*fields, *self.times(obj)]

    def get_readonly_fields(self, request: HttpRequest, obj: Any = None) -> Any:
        return [] if obj is None else ["tenant", *self.times(obj)]

    def times(self, obj: Any) -> list[str]:
        return ["created_at", "updated_at"]

    def save_model(self, request: HttpRequest, obj: Any, form: Any, change: bool) -> None:
        row = form.service_save(
            tenant=form.tenant(), data=form.service_data(), current=obj if change else None
        )
        for field in type(obj)._meta.concrete_fields:
            setattr(obj, field.attname, getattr(row, field.attname))
        obj._state.adding = False

    def delete_model(self, request: HttpRequest, obj: Any) -> None:
        self.delete(tenant=obj.tenant, row=obj)

    def delete_queryset(self, request: HttpRequest, queryset: Any) -> None:
        for row in queryset.select_related("tenant"):
            self.delete(tenant=row.tenant, row=row)


class PermissionRuleForm(RowServiceForm):
    """Checks the rule with ``permission_rule_save`` (rolled back), as the API does."""

    service_save = staticmethod(permission_rule_save)

    class Meta:
        model = PermissionRule
        fields = ["tenant", *RULE_FIELDS]

    def service_data(self) -> Mapping[str, Any]:
        return {name: self.cleaned_data.get(name) for name in RULE_FIELDS}


@admin.register(PermissionRule)
class PermissionRuleAdmin(RowServiceAdmin):
    """Written through ``permission_rule_save`` / ``permission_rule_delete``, as by the API."""

    form = PermissionRuleForm
    edited = list(RULE_FIELDS)
    delete = staticmethod(permission_rule_delete)
    write_role = Role.ADMIN  # as the API: admins write permission rules
    list_display = ["decision", "tool", "agent", "tenant", "updated_at"]
    list_filter = ["tenant", "decision"]
    search_fields = ["tool", "agent", "description", "tenant__slug"]


CREDENTIAL_FIELDS = ["name", "provider", "base_url", "description"]


class CredentialForm(RowServiceForm):
    """Checks the credential with ``credential_save`` (rolled back), as the API does; the
    key is typed in, never shown."""

    service_save = staticmethod(credential_save)
    api_key_value = key_field("; a new one replaces it (rotation)")

    class Meta:
        model = ProviderCredential
        fields = ["tenant", *CREDENTIAL_FIELDS]

    def service_data(self) -> Mapping[str, Any]:
        data = {name: self.cleaned_data.get(name) or "" for name in CREDENTIAL_FIELDS}
        if self.cleaned_data.get("api_key_value"):
            data["api_key"] = self.cleaned_data["api_key_value"]
        return data

    def field_of(self, field: str) -> str:
        return "api_key_value" if field == "api_key" else field


@admin.register(ProviderCredential)
class ProviderCredentialAdmin(RowServiceAdmin):
    """A tenant's provider keys, written through ``credential_save`` / ``credential_delete``;
    the key is write-only."""

    form = CredentialForm
    edited = [*CREDENTIAL_FIELDS, "api_key_value"]
    delete = staticmethod(credential_delete)
    write_role = Role.ADMIN  # as the API: admins write credentials
    list_display = ["name", "provider", "tenant", "updated_at", "rotated_at"]
    list_filter = ["tenant", "provider"]
    search_fields = ["name", "description", "tenant__slug"]

    def times(self, obj: Any) -> list[str]:
        return ["created_at", "updated_at", "rotated_at"]

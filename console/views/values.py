"""A thread's KV values and env variables in the console.

Each page reads and writes through the services behind the API's ``kv`` and ``env`` routes:
the same validation, the same events, another tenant's thread a 404. A refusal is shown at
the form field it names, or as the page's message. Env values are write-only: no page ever
holds one, not even the form that set it.
"""

from __future__ import annotations

import datetime as dt
import json
import uuid
from dataclasses import dataclass
from typing import Any

from django import forms
from django.contrib import messages
from django.core.paginator import Paginator
from django.db import transaction
from django.http import HttpRequest, HttpResponse
from django.shortcuts import redirect
from django.urls import path, reverse
from django.views.decorators.http import require_GET, require_POST

from common.audit import AuditAction
from common.errors import DomainError, NotFound, ValidationFailed
from common.parsing import json_parse
from common.time import from_us
from console.scope import console_of, console_view
from console.views.common import THREAD, answer, refuse_at_field, tenant_thread, thread_page
from tenancy.auditing import audit_by
from threads.models import Thread, ThreadValue
from threads.services.env import (
    EnvEntry,
    env_entry_of,
    tenant_env_rows,
    thread_env_delete,
    thread_env_rows,
    thread_env_set,
)
from threads.services.values import value_delete, value_list, value_of, value_set, value_stored

ROWS_PER_PAGE = 100


class ValueForm(forms.Form):
    key = forms.CharField(label="Key", strip=False)
    value = forms.CharField(
        label="Value (JSON)", strip=False,
        widget=forms.Textarea(attrs={"rows": 6, "aria-describedby": "value-help"}),
        help_text='Any JSON: "text", 42, [1, 2], {"on": true}. null deletes the key.',
    )  # fmt: skip

    def clean_value(self) -> Any:
        try:
            return json_parse(self.cleaned_data["value"], field="value")
        except ValidationFailed as error:
            raise forms.ValidationError(error.message) from error


class EnvForm(forms.Form):
    name = forms.CharField(
        label="Name", widget=forms.TextInput(attrs={"aria-describedby": "id_name-help"}),
        help_text="Letters, digits and _, not starting with a digit.",
    )  # fmt: skip
    type = forms.ChoiceField(
        label="Type", required=False,
        widget=forms.Select(attrs={"aria-describedby": "id_type-help"}),
        choices=[("", "unchanged (a new one is secret)"), ("secret", "secret"), ("text", "text")],
        help_text="text may appear in prompts and tool output; secret only inside tools.",
    )  # fmt: skip
    value = forms.CharField(
        label="Value", required=False, strip=False,
        widget=forms.PasswordInput(
            attrs={"autocomplete": "new-password", "aria-describedby": "id_value-help"}
        ),
        help_text="Write-only: it is stored encrypted and never shown again.",
    )  # fmt: skip


# KV ------------------------------------------------------------------------------------------


@dataclass(frozen=True)
class ValueRow:
    key: str
    text: str  # the value as indented JSON, or why it cannot be read
    readable: bool
    size: int
    updated: dt.datetime


def _value_row(thread: Thread, row: ThreadValue) -> ValueRow:
    try:
        text, readable = json.dumps(value_of(thread=thread, row=row).value, indent=2), True
    except DomainError as error:
        text, readable = error.message, False
    return ValueRow(row.key, text, readable, row.size, from_us(row.updated_at))


def _kv_page(
    request: HttpRequest, thread: Thread, form: ValueForm, status: int = 200
) -> HttpResponse:
    search = request.GET.get("q", "").strip()
    rows = value_list(thread=thread, search=search or None)
    listing = Paginator(rows, ROWS_PER_PAGE).get_page(request.GET.get("page"))
    return thread_page(
        request, "console/storage/kv.html", thread, "console:thread-kv",
        {"values": [_value_row(thread, row) for row in listing], "page": listing,
         "q": search, "form": form}, status,
    )  # fmt: skip


@require_GET
@console_view()
def kv_page(request: HttpRequest, thread_id: uuid.UUID) -> HttpResponse:
    """The thread's KV values by key (``?q=`` keeps the keys that hold it); ``?edit=KEY``
    fills the form with that key's value."""
    thread = tenant_thread(console_of(request).principal.tenant, thread_id)
    initial = {}
    if edit := request.GET.get("edit"):
        try:
            stored = value_stored(thread=thread, key=edit)
        except DomainError:
            stored = None
        if stored is not None:
            initial = {"key": stored.key, "value": json.dumps(stored.value, indent=2)}
    return _kv_page(request, thread, ValueForm(initial=initial))


@require_POST
@console_view(write=True)
def kv_set(request: HttpRequest, thread_id: uuid.UUID) -> HttpResponse:
    """Set ``key`` to ``value`` (JSON; null deletes it), as ``PUT …/kv/<key>``."""
    thread = tenant_thread(console_of(request).principal.tenant, thread_id)
    form = ValueForm(request.POST)
    if not form.is_valid():
        return _kv_page(request, thread, form, status=400)
    key, value = form.cleaned_data["key"], form.cleaned_data["value"]
    try:
        value_set(thread=thread, key=key, value=value)
    except DomainError as error:
        refuse_at_field(form, error, {})
        return _kv_page(request, thread, form, status=error.status)
    messages.success(request, f"{'Deleted' if value is None else 'Set'} {key}.")
    return redirect("console:thread-kv", thread_id=thread.pk)


@require_POST
@console_view(write=True)
def kv_delete(request: HttpRequest, thread_id: uuid.UUID) -> HttpResponse:
    """Delete ``key`` (``DELETE …/kv/<key>``)."""
    thread = tenant_thread(console_of(request).principal.tenant, thread_id)
    key = request.POST.get("key", "")

    def delete() -> dict[str, Any]:
        if value_stored(thread=thread, key=key) is None:
            raise NotFound(f"no KV key {key!r} in this thread")
        value_delete(thread=thread, key=key)
        messages.success(request, f"Deleted {key}.")
        return {"key": key}

    return answer(request, reverse("console:thread-kv", args=[thread.pk]), delete)


# Env -----------------------------------------------------------------------------------------


@dataclass(frozen=True)
class EnvRow:
    """A variable as the page shows it: never its value."""

    name: str
    type: str
    updated: dt.datetime
    overridden: bool = False  # a tenant variable the thread has one of its own for


def _env_row(entry: EnvEntry, overridden: bool = False) -> EnvRow:
    return EnvRow(entry.name, entry.type, from_us(entry.updated_at), overridden)


def _env_page(
    request: HttpRequest, thread: Thread, form: EnvForm, status: int = 200
) -> HttpResponse:
    own = [_env_row(env_entry_of(row)) for row in thread_env_rows(thread=thread)]
    names = {row.name for row in own}
    inherited = [
        _env_row(entry, entry.name in names)
        for entry in map(env_entry_of, tenant_env_rows(tenant=thread.tenant))
    ]
    return thread_page(
        request, "console/storage/env.html", thread, "console:thread-env",
        {"variables": own, "inherited": inherited, "form": form}, status,
    )  # fmt: skip


@require_GET
@console_view()
def env_page(request: HttpRequest, thread_id: uuid.UUID) -> HttpResponse:
    """The thread's variables and the tenant's it inherits: names and types only."""
    thread = tenant_thread(console_of(request).principal.tenant, thread_id)
    return _env_page(request, thread, EnvForm(initial={"name": request.GET.get("name", "")}))


@require_POST
@console_view(write=True)
def env_set(request: HttpRequest, thread_id: uuid.UUID) -> HttpResponse:
    """Set a thread variable (``PUT …/env/<name>``); a blank type keeps the existing one."""
    principal = console_of(request).principal
    thread = tenant_thread(principal.tenant, thread_id)
    form = EnvForm(request.POST)
    if not form.is_valid():
        return _env_page(request, thread, form, status=400)
    data = form.cleaned_data
    try:
        with transaction.atomic():  # the entry names the variable, never its value
            entry = thread_env_set(
                thread=thread, name=data["name"], value=data["value"], type=data["type"] or None
            )
            audit_by(
                principal, AuditAction.ENV_SET, "thread_env", entry.name,
                {"thread_id": str(thread.pk), "type": entry.type},
            )  # fmt: skip
    except DomainError as error:
        refuse_at_field(form, error, {})
        return _env_page(request, thread, form, status=error.status)
    messages.success(request, f"Set {entry.name} ({entry.type}).")
    return redirect("console:thread-env", thread_id=thread.pk)


@require_POST
@console_view(write=True)
def env_delete(request: HttpRequest, thread_id: uuid.UUID) -> HttpResponse:
    """Delete a thread variable (``DELETE …/env/<name>``)."""
    principal = console_of(request).principal
    thread = tenant_thread(principal.tenant, thread_id)
    name = request.POST.get("name", "")

    def delete() -> dict[str, Any]:
        with transaction.atomic():
            if not thread_env_delete(thread=thread, name=name):
                raise NotFound(f"no environment variable {name} on this thread")
            audit_by(
                principal, AuditAction.ENV_DELETED, "thread_env", name,
                {"thread_id": str(thread.pk)},
            )  # fmt: skip
        messages.success(request, f"Deleted {name}.")
        return {"name": name}

    return answer(request, reverse("console:thread-env", args=[thread.pk]), delete)


urlpatterns = [
    path(THREAD + "kv/", kv_page, name="thread-kv"),
    path(THREAD + "kv/set/", kv_set, name="thread-kv-set"),
    path(THREAD + "kv/delete/", kv_delete, name="thread-kv-delete"),
    path(THREAD + "env/", env_page, name="thread-env"),
    path(THREAD + "env/set/", env_set, name="thread-env-set"),
    path(THREAD + "env/delete/", env_delete, name="thread-env-delete"),
]

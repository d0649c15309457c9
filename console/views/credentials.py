"""The console's Credentials page: the tenant's provider credentials, and the operator's
granted to it, listed by name with where their keys go; admins add one, rotate a key or
delete one.

Writes go through the services behind ``/api/v1/credentials`` (``credential_save``,
``credential_delete``), so they validate and refuse exactly as the API does; a refusal is
shown at the form field it names. Only the role the API requires for these writes (admin)
may make them: a member's or a read-only member's post is a 403, as the API answers. Keys
are write-only: no page holds one, not even a form that was refused.
"""

from __future__ import annotations

import datetime as dt
from collections.abc import Callable, Mapping
from dataclasses import dataclass
from typing import Any

from django import forms
from django.contrib import messages
from django.core.exceptions import PermissionDenied
from django.db import transaction
from django.http import Http404, HttpRequest, HttpResponse
from django.shortcuts import redirect
from django.urls import path, reverse
from django.views.decorators.http import require_GET, require_POST

from agents.auditing import credential_audit
from agents.credentials import (
    MAX_KEY_CHARS,
    credential_delete,
    credential_get,
    credential_listing,
    credential_save,
)
from agents.credentials_api import CredentialViewSet
from agents.models import CredentialProvider, ProviderCredential
from agents.providers.base import OFFICIAL_BASE_URLS
from common.audit import AuditAction
from common.errors import DomainError, NotFound
from common.time import from_us
from console.scope import console_of, console_view
from console.views.common import answer, page, refuse_at_field
from tenancy.models import Tenant

WRITE_ROLE = CredentialViewSet.write_role
KEY_HELP = "Write-only: it is stored encrypted and never shown again."


def _key_field(label: str) -> forms.CharField:
    return forms.CharField(
        label=label, max_length=MAX_KEY_CHARS, help_text=KEY_HELP,
        widget=forms.PasswordInput(attrs={"autocomplete": "new-password"}),
    )  # fmt: skip


class CredentialForm(forms.Form):
    """A new credential, as ``POST /api/v1/credentials`` takes it."""

    name = forms.CharField(
        label="Name", max_length=64,
        help_text="snake_case; a model names it in its credential field.",
    )  # fmt: skip
    provider = forms.ChoiceField(label="Provider", choices=CredentialProvider.choices)
    base_url = forms.CharField(
        label="Base URL", required=False, max_length=500,
        help_text="Only for an OpenAI-compatible endpoint: the one URL its key goes to.",
    )  # fmt: skip
    description = forms.CharField(label="Description", required=False, max_length=500)
    api_key = _key_field("API key")


class RotateForm(forms.Form):
    """A credential's new key (``PATCH /api/v1/credentials/{name}`` with ``api_key``)."""

    api_key = _key_field("New API key")

    def __init__(self, data: Mapping[str, Any] | None = None, *, credential: str) -> None:
        # Every credential on the page has this form: its ids are the credential's own.
        super().__init__(data, auto_id=f"rotate-{credential}-%s")
        self.credential = credential


@dataclass(frozen=True)
class CredentialRow:
    """A credential as the page shows it: never its key."""

    name: str
    provider: str
    endpoint: str
    description: str
    rotated: dt.datetime | None
    platform: bool
    rotate: RotateForm | None  # None for the operator's, which the tenant cannot change


def _row(item: Mapping[str, Any], forms_of: Mapping[str, RotateForm]) -> CredentialRow:
    platform = bool(item["platform"])
    name, provider = str(item["name"]), str(item["provider"])
    return CredentialRow(
        name=name,
        provider=provider,
        endpoint=str(item["base_url"] or OFFICIAL_BASE_URLS.get(provider, "")),
        description=str(item["description"]),
        rotated=from_us(item["rotated_at"]) if item["rotated_at"] else None,
        platform=platform,
        rotate=None if platform else forms_of.get(name) or RotateForm(credential=name),
    )


def _page(
    request: HttpRequest,
    form: CredentialForm | None = None,
    refused: RotateForm | None = None,
    status: int = 200,
) -> HttpResponse:
    """The page; ``form`` is the add form as posted, ``refused`` a credential's rotate
    form as posted (its errors shown in its row)."""
    console = console_of(request)
    forms_of = {} if refused is None else {refused.credential: refused}
    items = credential_listing(tenant=console.principal.tenant)
    return page(
        request, "console/agents/credentials.html",
        {"credentials": [_row(item, forms_of) for item in items],
         "form": form or CredentialForm(), "can_admin": _allowed(request),
         "write_role": WRITE_ROLE, "nav": "agents"},
        status,
    )  # fmt: skip


def _allowed(request: HttpRequest) -> bool:
    return console_of(request).principal.role.allows(WRITE_ROLE)


def _admin_tenant(request: HttpRequest) -> Tenant:
    """The tenant an admin writes for; any other role is refused 403, as the API's
    ``write_role`` for credentials refuses it (``console_view`` lets members write)."""
    principal = console_of(request).principal
    if not _allowed(request):
        raise PermissionDenied(
            f"role {principal.role.value} may not change credentials; "
            f"{WRITE_ROLE.value} is required"
        )
    return principal.tenant


def _credential(tenant: Tenant, name: str) -> ProviderCredential:
    """The tenant's credential; another tenant's (or none) is a 404, as in the API."""
    try:
        return credential_get(tenant=tenant, name=name)
    except NotFound as error:
        raise Http404(error.message) from error


@require_GET
@console_view()
def credentials_page(request: HttpRequest) -> HttpResponse:
    """The credentials by name (``GET /api/v1/credentials``); admins also get the forms."""
    return _page(request)


def _saved(
    request: HttpRequest,
    tenant: Tenant,
    form: forms.Form,
    *,
    data: Callable[[Mapping[str, Any]], Mapping[str, Any]],
    current: ProviderCredential | None,
    done: Callable[[ProviderCredential], str],
    as_posted: Mapping[str, Any],
) -> HttpResponse:
    """Save what ``form`` holds through ``credential_save`` (``data`` turns its cleaned data
    into the service's), then back to the page with ``done``'s message; when it cannot be
    saved, the page with ``as_posted`` (the form and where it shows), its errors at their
    fields: 400, or the refusal's status."""
    status = 400
    if form.is_valid():
        sent = data(form.cleaned_data)
        action = AuditAction.CREDENTIAL_UPDATED if current else AuditAction.CREDENTIAL_CREATED
        try:
            with transaction.atomic():
                row = credential_save(tenant=tenant, data=sent, current=current)
                credential_audit(console_of(request).principal, action, row.name, sent)
        except DomainError as error:
            refuse_at_field(form, error, {})
            status = error.status
        else:
            messages.success(request, done(row))
            return redirect("console:agents-credentials")
    return _page(request, status=status, **as_posted)


@require_POST
@console_view(write=True)
def credential_add(request: HttpRequest) -> HttpResponse:
    """Store a new credential (``credential_save``, as ``POST /api/v1/credentials``)."""
    tenant = _admin_tenant(request)
    form = CredentialForm(request.POST)
    return _saved(
        request, tenant, form, data=lambda cleaned: cleaned, current=None,
        done=lambda row: f"Stored credential {row.name}.", as_posted={"form": form},
    )  # fmt: skip


@require_POST
@console_view(write=True)
def credential_rotate(request: HttpRequest, name: str) -> HttpResponse:
    """Replace a credential's key (``credential_save`` with ``current``: calls use the
    old key until the new one is saved, the new one after)."""
    tenant = _admin_tenant(request)
    row = _credential(tenant, name)
    form = RotateForm(request.POST, credential=row.name)
    return _saved(
        request, tenant, form, data=lambda cleaned: {"api_key": cleaned["api_key"]}, current=row,
        done=lambda saved: f"Rotated the key of credential {saved.name}.",
        as_posted={"refused": form},
    )  # fmt: skip


@require_POST
@console_view(write=True)
def credential_delete_view(request: HttpRequest, name: str) -> HttpResponse:
    """Delete a credential (``credential_delete``: refused while a model names it)."""
    tenant = _admin_tenant(request)
    row = _credential(tenant, name)

    def delete() -> dict[str, Any]:
        with transaction.atomic():
            credential_delete(tenant=tenant, row=row)
            credential_audit(
                console_of(request).principal, AuditAction.CREDENTIAL_DELETED, row.name, {}
            )
        messages.success(request, f"Deleted credential {name}.")
        return {"name": name}

    return answer(request, reverse("console:agents-credentials"), delete)


CREDENTIAL = "agents/credentials/<str:name>/"

# Listed before the agents pages' routes: ``agents/<kind>/<name>/`` would take these.
urlpatterns = [
    path("agents/credentials/", credentials_page, name="agents-credentials"),
    path("agents/credentials/add/", credential_add, name="agents-credential-add"),
    path(CREDENTIAL + "rotate/", credential_rotate, name="agents-credential-rotate"),
    path(CREDENTIAL + "delete/", credential_delete_view, name="agents-credential-delete"),
]

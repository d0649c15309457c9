"""What the pages of a tenant's remote connections (its MCP servers and its A2A agents)
share: who may write them, their form (its own fields and its auth turned into what the
connectors' save services take, a service's refusal shown at its field), finding one (another
tenant's a 404), saving, refreshing and deleting one, and a connection's health as the pages
show it.

Secrets are write-only: their inputs are password boxes that never render a value, a blank
one on an edit leaves the secret out so the service keeps the stored one (it does when the
auth's type is unchanged), and no page holds one, not even a refused form.
"""

from __future__ import annotations

import datetime as dt
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass
from typing import Any, ClassVar, Generic, Self, TypeVar

from django import forms
from django.contrib import messages
from django.core.exceptions import PermissionDenied
from django.db import transaction
from django.http import Http404, HttpRequest, HttpResponse
from django.shortcuts import redirect
from django.urls import reverse

from common.audit import AuditAction
from common.errors import DomainError, NotFound
from common.time import from_us
from connectors.auditing import connection_audit
from connectors.models import RemoteAuth, RemoteConnection
from connectors.remote import AUTH_KEYS, SECRET_KEY, auth_json
from connectors.transport import RemoteUnavailable
from console.scope import console_of
from console.views.common import answer, refuse_at_field
from tenancy.models import Role, Tenant

Row = TypeVar("Row", bound=RemoteConnection)

AUTH_PREFIX = "auth_"
WRITE_ONLY_HELP = "Write-only: stored encrypted and never shown again."
KEEP_HELP = "A secret is stored: leave this blank to keep it."
# How the pages name each auth type.
AUTH_LABELS: dict[str, str] = {
    RemoteAuth.NONE: "None",
    RemoteAuth.BEARER: "Bearer token",
    RemoteAuth.HEADER: "Header",
    RemoteAuth.OAUTH_CLIENT_CREDENTIALS: "OAuth client credentials",
}


def may_write(request: HttpRequest, role: Role) -> bool:
    """Whether the console's user has ``role`` (the API's ``write_role`` for the kind)."""
    return console_of(request).principal.role.allows(role)


def writer_tenant(request: HttpRequest, *, role: Role, what: str) -> Tenant:
    """The tenant a user with ``role`` writes ``what`` (e.g. ``MCP servers``) for; any
    lower role is refused 403, as the API refuses it (``console_view`` lets members write)."""
    principal = console_of(request).principal
    if not may_write(request, role):
        raise PermissionDenied(
            f"role {principal.role.value} may not change {what}; {role.value} is required"
        )
    return principal.tenant


def _secret_field(label: str) -> forms.CharField:
    return forms.CharField(
        label=label, required=False, help_text=WRITE_ONLY_HELP,
        widget=forms.PasswordInput(attrs={"autocomplete": "new-password"}),
    )  # fmt: skip


def _text_field(label: str, help_text: str = "") -> forms.CharField:
    return forms.CharField(label=label, required=False, help_text=help_text)


@dataclass(frozen=True)
class AuthGroup:
    """One auth type's inputs, as a fieldset of the form."""

    type: str
    label: str
    fields: list[forms.BoundField]


class RemoteAuthForm(forms.Form):
    """A remote connection's form with its auth: the type, and each type's inputs named
    ``auth_<key>`` after the service's ``auth.<key>``. Only the chosen type's keys are sent;
    the form checks nothing the service checks (a refusal is shown at its field by
    :meth:`refuse`). A subclass adds the connection's own fields; ``auth_keys`` and
    ``secret_keys`` say which keys each type takes and which of them is its secret."""

    auth_keys: ClassVar[Mapping[str, Sequence[str]]] = AUTH_KEYS
    secret_keys: ClassVar[Mapping[str, str]] = SECRET_KEY

    auth_type = forms.ChoiceField(
        label="Type", choices=list(AUTH_LABELS.items()), initial=RemoteAuth.NONE,
        help_text="How calls authenticate; only the chosen type's fields below are used.",
    )  # fmt: skip
    auth_token = _secret_field("Bearer token")
    auth_header_name = _text_field("Header name", "The header every call carries, e.g. X-Api-Key.")
    auth_header_value = _secret_field("Header value")
    auth_client_id = _text_field("Client id")
    auth_token_url = _text_field("Token URL", "Where the access token is asked for.")
    auth_scopes = _text_field("Scopes", "Space-separated; optional.")
    auth_client_secret = _secret_field("Client secret")

    def __init__(
        self,
        data: Mapping[str, Any] | None = None,
        *,
        stored: Mapping[str, Any] | None = None,
        initial: Mapping[str, Any] | None = None,
    ) -> None:
        """``stored`` is the connection's auth as its JSON shows it (``type``, the public
        keys, ``secret_set``) when the form edits one; None for a new connection."""
        shown = dict(initial or {})
        if stored is not None:
            shown[AUTH_PREFIX + "type"] = stored["type"]
            for key, value in stored.items():
                if key not in ("type", "secret_set"):
                    shown[AUTH_PREFIX + key] = value
        super().__init__(data, initial=shown)
        self.stored = stored
        secret = self.secret_keys.get(stored["type"]) if stored else None
        if stored is not None and secret is not None and stored.get("secret_set"):
            self.fields[AUTH_PREFIX + secret].help_text = f"{KEEP_HELP} {WRITE_ONLY_HELP}"

    def own_fields(self) -> list[forms.BoundField]:
        """The connection's fields (not its auth's)."""
        return [self[name] for name in self.fields if not name.startswith(AUTH_PREFIX)]

    def auth_groups(self) -> list[AuthGroup]:
        """The auth types that take inputs, each with its inputs (for the form's fieldsets)."""
        return [
            AuthGroup(kind, AUTH_LABELS.get(kind, kind), [self[AUTH_PREFIX + k] for k in keys])
            for kind, keys in self.auth_keys.items()
            if keys
        ]

    def auth_data(self) -> dict[str, Any] | None:
        """The ``auth`` object to save, from the cleaned data: the chosen type and its keys, a
        blank secret left out (the service keeps the stored one, or asks for one). None when
        an edit changes nothing of the stored auth: sending it anyway would make the service
        forget what it learnt from the destination (a server's cached tools, its health)."""
        cleaned = self.cleaned_data
        kind = str(cleaned[AUTH_PREFIX + "type"])
        secret_key = self.secret_keys.get(kind)
        auth: dict[str, Any] = {"type": kind}
        for key in self.auth_keys.get(kind, ()):
            value = str(cleaned.get(AUTH_PREFIX + key) or "")
            if key != secret_key or value:
                auth[key] = value
        stored = self.stored
        if stored is not None and stored["type"] == kind and secret_key not in auth:
            public = {key: value for key, value in auth.items() if key != "type"}
            if all(str(stored.get(key, "")) == value.strip() for key, value in public.items()):
                return None
        return auth

    def refuse(self, error: DomainError, fields: Mapping[str, str] | None = None) -> None:
        """Show a service's refusal at its field: ``auth`` and ``auth.type`` at the type,
        ``auth.<key>`` at ``auth_<key>``, others by ``fields`` or their own name."""
        named = error.field or ""
        if named in ("auth", "auth.type"):
            target = AUTH_PREFIX + "type"
        elif named.startswith("auth."):
            target = AUTH_PREFIX + named.removeprefix("auth.")
        else:
            target = (fields or {}).get(named, named)
        refuse_at_field(self, error, {named: target})


def name_input(help_text: str) -> forms.CharField:
    return forms.CharField(label="Name", required=False, help_text=help_text)


def url_input(help_text: str) -> forms.CharField:
    return forms.CharField(label="URL", required=False, help_text=help_text)


def description_input() -> forms.CharField:
    return forms.CharField(label="Description", required=False)


def seconds_input(label: str, help_text: str) -> forms.IntegerField:
    return forms.IntegerField(label=label, required=False, help_text=help_text)


def timeout_input() -> forms.IntegerField:
    return seconds_input("Call timeout (seconds)", "How long one call may take.")


class ConnectionForm(RemoteAuthForm):
    """A connection as its save service takes it: each of its own fields is named after the
    model's field and the service's key (a subclass declares them, in the order shown, with
    the inputs above), then its auth."""

    @classmethod
    def editing(cls, row: RemoteConnection, data: Mapping[str, Any] | None = None) -> Self:
        """The form of an edit of ``row``: ``data`` as posted, else ``row``'s values."""
        stored = auth_json(row)
        if data is not None:
            return cls(data, stored=stored)
        return cls(stored=stored, initial={name: getattr(row, name) for name in cls.own_names()})

    @classmethod
    def own_names(cls) -> list[str]:
        """The names of the connection's own fields, in order."""
        return [name for name in cls.base_fields if not name.startswith(AUTH_PREFIX)]

    def save_data(self, current: RemoteConnection | None) -> dict[str, Any]:
        """What to save, from the cleaned data: for a new connection what was filled in (a
        blank name or URL left out, so the service says it is required), for ``current``
        only what changed (a blank number too is left out)."""
        data: dict[str, Any] = {}
        for name in self.own_names():
            value = self.cleaned_data[name]
            if current is None:
                changed = value not in (None, "")
            else:
                changed = value is not None and value != getattr(current, name)
            if changed:
                data[name] = value
        auth = self.auth_data()
        if auth is not None:
            data["auth"] = auth
        return data


@dataclass(frozen=True)
class ConnectionKind(Generic[Row]):
    """One kind of connection as its pages handle it, through its services (``get``,
    ``save``, ``delete`` as :mod:`connectors` names them): ``noun`` names one (``MCP
    server``), ``offered`` what it offered and the pages cache (``tools``), ``page`` and
    ``listing`` are the URL names of one's page (taking its name) and of the list, and
    ``write_role`` is the API's for the kind."""

    noun: str
    plural: str
    offered: str
    page: str
    listing: str
    write_role: Role
    get: Callable[..., Row]
    save: Callable[..., Row]
    delete: Callable[..., None]

    def may_write(self, request: HttpRequest) -> bool:
        return may_write(request, self.write_role)

    def writer(self, request: HttpRequest) -> Tenant:
        """The tenant the user writes for; a lower role than ``write_role`` is a 403."""
        return writer_tenant(request, role=self.write_role, what=self.plural)

    def row(self, tenant: Tenant, name: str) -> Row:
        """The tenant's connection ``name``; another tenant's (or none) is a 404, as in the
        API."""
        try:
            return self.get(tenant=tenant, name=name)
        except NotFound as error:
            raise Http404(error.message) from error

    def saved(
        self, request: HttpRequest, tenant: Tenant, form: ConnectionForm, current: Row | None
    ) -> tuple[Row | None, int]:
        """Save what ``form`` holds through ``save``: the row, or None and the status to
        answer with the form's errors at their fields. A new URL or auth forgets what the
        connection offered, and the message says so."""
        if not form.is_valid():
            return None, 400
        data = form.save_data(current)
        action = AuditAction.CONNECTION_UPDATED if current else AuditAction.CONNECTION_CREATED
        try:
            with transaction.atomic():
                row = self.save(tenant=tenant, data=data, current=current)
                connection_audit(console_of(request).principal, action, row, data)
        except DomainError as error:
            form.refuse(error)
            return None, error.status
        done = f"Saved {self.noun} {row.name}."
        if current is not None and ("url" in data or "auth" in data):
            done += (
                f" Its cached {self.offered} and health were cleared: refresh its {self.offered}."
            )
        messages.success(request, done)
        return row, 200

    def refreshed(self, request: HttpRequest, row: Row, fetch: Callable[[], str]) -> HttpResponse:
        """Contact ``row`` now through ``fetch`` (the connectors' fetch, which records the
        health and must run outside any transaction; it answers what to tell the user), back
        to its page: a failure is shown as a message naming its cause, the cache kept."""
        try:
            done = fetch()
        except RemoteUnavailable:  # recorded as the row's health, with the message shown
            messages.error(request, row.last_error)
        else:
            messages.success(request, done)
        return redirect(self.page, name=row.name)

    def deleted(self, request: HttpRequest, tenant: Tenant, row: Row) -> HttpResponse:
        """Delete ``row`` through ``delete``, back to the list."""
        name = row.name

        def delete() -> dict[str, Any]:
            with transaction.atomic():
                self.delete(tenant=tenant, row=row)
                connection_audit(
                    console_of(request).principal, AuditAction.CONNECTION_DELETED, row, {}
                )
            messages.success(request, f"Deleted {self.noun} {name}.")
            return {"name": name}

        return answer(request, reverse(self.listing), delete)


@dataclass(frozen=True)
class Health:
    """A connection's last contact as the pages show it: ``state`` is ``ok``, ``failing``
    (then ``last_error`` and ``last_error_at`` say what and when) or ``never`` (no contact
    yet)."""

    state: str
    checked_at: dt.datetime | None
    last_ok_at: dt.datetime | None
    last_error: str | None
    last_error_at: dt.datetime | None


def _moment(micros: Any) -> dt.datetime | None:
    return from_us(int(micros)) if micros is not None else None


def health_of(body: Mapping[str, Any]) -> Health:
    """The health from its JSON (``ok``: None before any contact, else whether the last one
    succeeded; the moments in microseconds since the epoch)."""
    ok = body["ok"]
    return Health(
        state="never" if ok is None else "ok" if ok else "failing",
        checked_at=_moment(body["checked_at"]),
        last_ok_at=_moment(body["last_ok_at"]),
        last_error=body["last_error"],
        last_error_at=_moment(body["last_error_at"]),
    )


def auth_summary(auth: Mapping[str, Any]) -> str:
    """The auth as a list shows it: its type's label and public detail, never a secret."""
    label = AUTH_LABELS.get(str(auth["type"]), str(auth["type"]))
    if auth.get("header_name"):
        return f"{label} ({auth['header_name']})"
    if auth.get("client_id"):
        return f"{label} ({auth['client_id']})"
    return label

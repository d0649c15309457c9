"""What every console page shares: rendering with the console's context, the tenant's
thread (another tenant's a 404), and answering a write to a script or a plain form.

A write answers JSON to the page's script (``Accept: application/json``): ``{"ok": true,
…}``, or ``{"error": {code, message, field?}}`` with the API's status; a plain form post
(no script) is redirected back, its error shown as a message.
"""

from __future__ import annotations

import uuid
from collections.abc import Callable, Mapping
from typing import Any

from django import forms
from django.contrib import messages
from django.http import Http404, HttpRequest, HttpResponse, JsonResponse
from django.shortcuts import redirect, render
from django.urls import reverse

from common.api import error_body
from common.errors import DomainError, NotFound
from console.scope import console_of
from tenancy.models import Tenant
from threads.models import RunStatus, Thread
from threads.services.threads import thread_get, thread_titles, threads_started
from threads.services.turns import read_status

# The status the console shows for a thread no turn was ever submitted to (its stored one is
# the initial ``completed``, which is no outcome).
NEW = "new"

# The path of a thread's console pages, under /console/.
THREAD = "threads/<uuid:thread_id>/"


def page(
    request: HttpRequest, template: str, context: Mapping[str, Any], status: int = 200
) -> HttpResponse:
    """Render a console page with ``console`` (the membership it acts through)."""
    return render(request, template, {"console": console_of(request), **context}, status=status)


def shown_status(thread: Thread, *, started: bool) -> str:
    """The status the console shows: the read model's, or :data:`NEW` for a thread that
    never ran."""
    status = read_status(thread)
    return NEW if not started and status == RunStatus.COMPLETED else status


def tenant_thread(tenant: Tenant, thread_id: uuid.UUID) -> Thread:
    """The tenant's thread; another tenant's is a 404, as in the API."""
    try:
        return thread_get(tenant=tenant, thread_id=thread_id)
    except NotFound as error:
        raise Http404(error.message) from error


def wants_json(request: HttpRequest) -> bool:
    return "application/json" in request.headers.get("Accept", "")


def answer(request: HttpRequest, back: str, write: Callable[[], dict[str, Any]]) -> HttpResponse:
    """Run ``write``; answer JSON to a script, else redirect to ``back`` (a URL), with a
    refusal shown there as a message."""
    try:
        body = write()
    except DomainError as error:
        if wants_json(request):
            return JsonResponse(
                error_body(error.code, error.message, error.field), status=error.status
            )
        messages.error(request, error.message)
    else:
        if wants_json(request):
            return JsonResponse({"ok": True, **body})
    return redirect(back)


# The thread's pages, in the order of the tabs every thread page shows: (URL name, label).
# Each takes the thread's id as its one argument.
THREAD_PANELS: list[tuple[str, str]] = [
    ("console:thread", "Chat"),
    ("console:thread-files", "Files"),
    ("console:thread-kv", "KV"),
    ("console:thread-env", "Env"),
    ("console:thread-logs", "Logs"),
    ("console:thread-events", "Events"),
    ("console:thread-effects", "Effects"),
    ("console:thread-subagents", "Subagents"),
    ("console:thread-code", "Run code"),
]


def thread_page(
    request: HttpRequest,
    template: str,
    thread: Thread,
    panel: str,
    context: Mapping[str, Any],
    status: int = 200,
) -> HttpResponse:
    """Render one of a thread's pages (``panel`` is its URL name), with the thread, its
    heading and the tabs of the others."""
    tabs = [
        {"url": reverse(name, args=[thread.pk]), "label": label, "current": name == panel}
        for name, label in THREAD_PANELS
    ]
    shown = shown_status(thread, started=bool(threads_started(threads=[thread])))
    title = thread_titles(threads=[thread]).get(thread.pk, "")
    return page(
        request, template,
        {"thread": thread, "status": shown, "title": title, "tabs": tabs, **context}, status,
    )  # fmt: skip


def refuse_at_field(form: forms.Form, error: DomainError, fields: Mapping[str, str]) -> None:
    """Show a service's refusal at the form field it names (``fields`` maps the service's
    field names to the form's), else above the form."""
    name = fields.get(error.field or "", error.field or "")
    form.add_error(name if name in form.fields else None, error.message)

"""The thread's run-code playground: a snippet run as ``POST /api/v1/threads/{id}/run-code``
runs it, with the same checks, the same tenant lease and runner wait, the same budget (or a
shorter one) and the same ``code`` log row.

Like the API route, the run is an async view: the checks and the page are short sync steps,
each giving its database connection back, and the wait for the code holds neither a
connection nor a worker thread.
"""

from __future__ import annotations

import asyncio
import json
import uuid
from dataclasses import dataclass
from typing import Any, ParamSpec, TypeVar

from django import forms
from django.http import HttpRequest, HttpResponse
from django.http.response import HttpResponseBase
from django.urls import path, reverse
from django.views.decorators.http import require_GET, require_POST

from common.connections import connection_returned
from common.errors import DomainError
from common.tenant_wall import tenant_enter
from console.scope import console_of, console_view
from console.views.common import THREAD, tenant_thread, thread_page
from threads.api.code import MAX_SOURCE_CHARS
from threads.models import Thread
from threads.services.code_endpoint import (
    ENDPOINT_BUDGET_S,
    code_endpoint_log,
    code_endpoint_run,
    code_lease_acquire,
    code_lease_release_abandoned,
)
from threads.services.leases import Lease

P = ParamSpec("P")
R = TypeVar("R")

STARTER = 'console.log("hello from the sandbox");\nexport default { sum: 1 + 2 };\n'
LANGUAGES = [("typescript", "TypeScript"), ("javascript", "JavaScript")]


class RunCodeForm(forms.Form):
    source = forms.CharField(
        label="Code", max_length=MAX_SOURCE_CHARS, strip=False, initial=STARTER,
        widget=forms.Textarea(attrs={"rows": 14, "spellcheck": "false", "autocomplete": "off",
                                     "class": "code", "aria-describedby": "code-help"}),
    )  # fmt: skip
    language = forms.ChoiceField(label="Language", choices=LANGUAGES, initial="typescript")
    timeout = forms.FloatField(
        label="Timeout (seconds)", required=False, min_value=0.1, max_value=ENDPOINT_BUDGET_S,
        widget=forms.NumberInput(attrs={"step": "0.1", "placeholder": f"{ENDPOINT_BUDGET_S:g}",
                                        "aria-describedby": "timeout-help"}),
    )  # fmt: skip
    report = forms.BooleanField(label="Collect report(value) calls", required=False)

    def options(self) -> dict[str, Any]:
        """run_code's options, as the API's ``options`` with ``report: true`` becomes them."""
        options: dict[str, Any] = {"language": self.cleaned_data["language"]}
        if self.cleaned_data["report"]:
            options["report"] = _collect
        return options

    def budget_s(self) -> float:
        """The run's budget: the timeout given, else the endpoint's (DIGEST §17)."""
        timeout: float | None = self.cleaned_data["timeout"]
        return ENDPOINT_BUDGET_S if timeout is None else timeout


def _collect(_value: Any) -> None:
    """The host side of ``report(value)``: the handle keeps the values in ``reports``."""


@dataclass(frozen=True)
class LogLine:
    level: str
    text: str


@dataclass(frozen=True)
class Outcome:
    """A run's result as the page shows it (``body`` is the API's answer)."""

    body: dict[str, Any]

    @property
    def status(self) -> str:
        return str(self.body["status"])

    @property
    def result(self) -> str:
        return json.dumps(self.body["result"], indent=2, ensure_ascii=False)

    @property
    def error(self) -> dict[str, Any] | None:
        error: dict[str, Any] | None = self.body["error"]
        return error

    @property
    def logs(self) -> list[LogLine]:
        """Each console call as a line: strings as they are, other arguments as JSON."""
        return [
            LogLine(level=log["level"], text=" ".join(_shown(arg) for arg in log["args"]))
            for log in self.body["logs"]
        ]

    @property
    def reports(self) -> list[str]:
        return [json.dumps(value, ensure_ascii=False) for value in self.body["reports"]]

    @property
    def duration_ms(self) -> float:
        return float(self.body["durationMs"])


def _shown(value: Any) -> str:
    return value if isinstance(value, str) else json.dumps(value, ensure_ascii=False)


def _code_page(
    request: HttpRequest,
    thread: Thread,
    form: RunCodeForm,
    *,
    outcome: Outcome | None = None,
    refusal: str | None = None,
) -> HttpResponse:
    console = console_of(request)
    context = {
        "form": form, "outcome": outcome, "refusal": refusal, "can_write": console.can_write,
        "run_url": reverse("console:thread-code-run", args=[thread.pk]),
        "budget_s": ENDPOINT_BUDGET_S,
    }  # fmt: skip
    return thread_page(request, "console/playground/code.html", thread, "console:thread-code",
                       context)  # fmt: skip


@require_GET
@console_view()
def code_page(request: HttpRequest, thread_id: uuid.UUID) -> HttpResponse:
    """The playground; a read-only member sees it without the run control."""
    thread = tenant_thread(console_of(request).principal.tenant, thread_id)
    return _code_page(request, thread, RunCodeForm())


class _Admitted(HttpResponse):
    """What :func:`_code_admit` answers for a run it admitted: checked and holding one of
    the tenant's run-code leases. The async view runs the code and renders the page."""

    def __init__(self, *, thread: Thread, form: RunCodeForm, lease: Lease) -> None:
        super().__init__(status=200)
        self.thread = thread
        self.form = form
        self.lease = lease


@console_view(write=True)
def _code_admit(request: HttpRequest, thread_id: uuid.UUID) -> HttpResponse:
    """The run's checks, as the API's: a writer, the tenant's thread, the form, then one of
    the tenant's leases (``RUN_CODE_TENANT_CONCURRENCY``; a refusal is the page's message)."""
    thread = tenant_thread(console_of(request).principal.tenant, thread_id)
    form = RunCodeForm(request.POST)
    if not form.is_valid():
        return _code_page(request, thread, form)
    try:
        lease = code_lease_acquire(tenant_id=thread.tenant_id, budget_s=form.budget_s())
    except DomainError as error:
        return _code_page(request, thread, form, refusal=error.message)
    return _Admitted(thread=thread, form=form, lease=lease)


@require_POST
async def code_run_view(request: HttpRequest, thread_id: uuid.UUID) -> HttpResponseBase:
    """Run the form's code and show the page with its result, logs and error, the code kept
    in the box. A run refused (the tenant's runs, busy runners) ran nothing and shows why."""
    checked = asyncio.ensure_future(connection_returned(_code_admit)(request, thread_id))
    try:
        admitted = await asyncio.shield(checked)
    except asyncio.CancelledError:  # the browser left while the checks ran
        checked.add_done_callback(code_lease_release_abandoned)
        raise
    if not isinstance(admitted, _Admitted):
        return admitted
    tenant_enter(admitted.thread.tenant_id)  # the checks ran in a task of their own
    form = admitted.form
    try:
        body = await code_endpoint_run(
            thread=admitted.thread, source=form.cleaned_data["source"], options=form.options(),
            lease=admitted.lease, budget_s=form.budget_s(),
        )  # fmt: skip
    except DomainError as error:
        return await connection_returned(_code_page)(
            request, admitted.thread, form, refusal=error.message
        )
    await connection_returned(code_endpoint_log)(thread=admitted.thread, body=body)
    return await connection_returned(_code_page)(
        request, admitted.thread, form, outcome=Outcome(body)
    )


urlpatterns = [
    path(THREAD + "code/", code_page, name="thread-code"),
    path(THREAD + "code/run/", code_run_view, name="thread-code-run"),
]

"""The console's tenant switcher, thread list, new-thread form and thread page with its
writes. Each reads and writes through the services the API uses, scoped to the membership
:func:`console.scope.console_view` resolved: the same validation, the same events, another
tenant's thread a 404. Writes answer as :func:`console.views.common.answer` says."""

from __future__ import annotations

import uuid
from typing import Any

from django.contrib import messages
from django.contrib.auth.decorators import login_required
from django.contrib.auth.models import User
from django.core.paginator import Paginator
from django.db import transaction
from django.db.models import Exists, OuterRef
from django.http import HttpRequest, HttpResponse, JsonResponse
from django.shortcuts import redirect, render
from django.urls import path, reverse
from django.views.decorators.http import require_GET, require_http_methods, require_POST

from agents.graph import GraphVariable, agent_graph_variables
from agents.selectors import agent_load, agent_names
from common.audit import AuditAction
from common.errors import DomainError, NotFound, ValidationFailed
from common.parsing import json_parse
from common.time import from_us
from console.forms import ENV_PREFIX, MessageForm, ThreadFilterForm, ThreadNewForm
from console.scope import SESSION_TENANT, Console, console_of, console_view
from console.views.common import (
    THREAD,
    answer,
    page,
    shown_status,
    tenant_thread,
    thread_page,
)
from tenancy.auditing import audit_by
from tenancy.models import Tenant
from tenancy.selectors import membership_list
from tenancy.services import ws_ticket_issue
from threads.api.base import turn_submitted_audit
from threads.models import RunStatus, Thread, Turn, TurnSource
from threads.runtime.bootstrap import variable_request_complete
from threads.runtime.lifecycle import thread_open
from threads.services.actions import ActionResolved, action_respond
from threads.services.control import thread_stop, turn_cancel
from threads.services.env import EnvInput
from threads.services.inbox import message_queue
from threads.services.spending import work_admit
from threads.services.threads import thread_list, thread_titles, threads_started
from threads.services.turns import turn_get
from threads.services.variable_requests import pending_variable_requests

THREADS_PER_PAGE = 50
NESTED_PER_PAGE = 500  # subagents' threads nested under one page of threads


# Tenants -------------------------------------------------------------------------------------


@login_required
@require_http_methods(["GET", "POST"])
def tenant_choose(request: HttpRequest) -> HttpResponse:
    """The tenant switcher: the user's memberships; choosing one keeps it in the session."""
    user = request.user
    assert isinstance(user, User)
    memberships = membership_list(user=user)
    if request.method == "POST":
        slug = request.POST.get("tenant", "")
        if any(row.tenant.slug == slug for row in memberships):
            request.session[SESSION_TENANT] = slug
            return redirect("console:threads")
        messages.error(request, "Choose one of your tenants.")
    current = request.session.get(SESSION_TENANT)
    return render(
        request, "console/tenant_choose.html", {"memberships": memberships, "current": current}
    )


# Threads -------------------------------------------------------------------------------------


@require_GET
@console_view()
def threads_page(request: HttpRequest) -> HttpResponse:
    """The tenant's threads, newest first, each with its title; the subagents' threads are
    nested under their parent's row, or listed as rows of their own (``flat``)."""
    console = console_of(request)
    tenant = console.principal.tenant
    agents = agent_names(tenant=tenant)
    filters = ThreadFilterForm(request.GET, agents=agents)
    rows: Any = Thread.objects.none()
    flat = False
    if filters.is_valid():
        data = filters.cleaned_data
        flat = data["flat"]
        rows = thread_list(
            tenant=tenant, agent=data["agent"] or None, status=data["status"] or None,
            search=data["q"] or None,
        )  # fmt: skip
        if data["status"] == RunStatus.COMPLETED:  # a thread that never ran completed nothing
            rows = rows.filter(Exists(Turn.objects.filter(thread_id=OuterRef("pk"))))
        if not flat:
            rows = rows.filter(parent__isnull=True)
    listing = Paginator(rows, THREADS_PER_PAGE).get_page(request.GET.get("page"))
    shown = list(listing)
    if not flat:
        shown = _nested(tenant, shown)
    titles, started = thread_titles(threads=shown), threads_started(threads=shown)
    threads = [
        {"thread": row, "title": titles.get(row.pk, ""),
         "status": shown_status(row, started=row.pk in started),
         "depth": depth, "last_activity": from_us(row.updated_at)}
        for row, depth in (_depths(shown) if not flat else [(row, 0) for row in shown])
    ]  # fmt: skip
    return page(
        request, "console/thread_list.html",
        {"filters": filters, "threads": threads, "page": listing, "nav": "threads",
         "live": {"ticket": reverse("console:tenant-ws-ticket"), "socket": "/ws/events/"}},
    )  # fmt: skip


def _nested(tenant: Tenant, tops: list[Thread]) -> list[Thread]:
    """``tops``, each followed by its subagents' threads (oldest first, each under its
    parent; at most :data:`NESTED_PER_PAGE` of them for the page)."""
    found = (
        Thread.objects.for_tenant(tenant)
        .filter(root_id__in=[top.pk for top in tops])
        .order_by("created_at", "id")[:NESTED_PER_PAGE]
    )
    children: dict[uuid.UUID | None, list[Thread]] = {}
    for child in found:
        children.setdefault(child.parent_id, []).append(child)
    ordered: list[Thread] = []

    def visit(thread: Thread) -> None:
        ordered.append(thread)
        for child in children.get(thread.pk, []):
            visit(child)

    for top in tops:
        visit(top)
    return ordered


def _depths(threads: list[Thread]) -> list[tuple[Thread, int]]:
    """Each thread with its depth under the nearest listed ancestor (0: none listed)."""
    depth: dict[uuid.UUID, int] = {}
    for thread in threads:
        depth[thread.pk] = depth[thread.parent_id] + 1 if thread.parent_id in depth else 0
    return [(thread, depth[thread.pk]) for thread in threads]


def _required_variables(tenant: Tenant, agent: str) -> list[GraphVariable]:
    """The variables a new thread of ``agent`` must be given, each once (as
    ``required_variables_check`` demands them)."""
    found: dict[str, GraphVariable] = {}
    for variable in agent_graph_variables(tenant=tenant, agent_name=agent):
        if variable.required and not (variable.scoped and variable.beyond):
            found.setdefault(variable.name, variable)
    return list(found.values())


@require_http_methods(["GET", "POST"])
@console_view(write=True)
def thread_new(request: HttpRequest) -> HttpResponse:
    """Create a thread: pick an agent, then give the variables it requires (if any)."""
    tenant = console_of(request).principal.tenant
    agents = agent_names(tenant=tenant)
    source = request.POST if request.method == "POST" else request.GET
    agent = source.get("agent") if source.get("agent") in agents else None
    variables = _required_variables(tenant, agent) if agent else []
    form = ThreadNewForm(
        request.POST if request.method == "POST" else None,
        agents=agents, variables=variables, initial={"agent": agent},
    )  # fmt: skip
    if request.method == "POST" and form.is_valid():
        env = {
            variable.name: EnvInput(value=form.cleaned_data[form.env_field(variable.name)])
            for variable in variables
            if form.cleaned_data.get(form.env_field(variable.name))
        }
        try:
            thread = thread_open(tenant=tenant, agent_name=form.cleaned_data["agent"], env=env)
        except DomainError as error:
            form.add_domain_error(error)
        else:
            return redirect("console:thread", thread_id=thread.pk)
    return page(request, "console/thread_new.html", {"form": form, "agent": agent, "nav": "new"})


@require_GET
@console_view()
def thread_detail(request: HttpRequest, thread_id: uuid.UUID) -> HttpResponse:
    """The thread: its chat (live over the thread's socket), turns and pending actions."""
    console = console_of(request)
    thread = tenant_thread(console.principal.tenant, thread_id)
    urls = {
        "messages": reverse("console:message-send", args=[thread.pk]),
        "stop": reverse("console:thread-stop", args=[thread.pk]),
        "ticket": reverse("console:ws-ticket", args=[thread.pk]),
        "socket": f"/ws/threads/{thread.pk}/",
        "cancel": reverse("console:turn-cancel", args=[thread.pk, uuid.UUID(int=0)]),
        "action": reverse("console:action-respond", args=[thread.pk, uuid.UUID(int=0)]),
        "variables": reverse("console:variable-requests", args=[thread.pk]),
    }
    return thread_page(
        request, "console/thread_detail.html", thread, "console:thread",
        {"urls": urls, "form": MessageForm(), "can_write": console.can_write,
         "sides": _side_labels(thread), "variable_requests": _variable_requests(thread)},
    )  # fmt: skip


def _side_labels(thread: Thread) -> dict[str, str]:
    """What the chat calls each side's messages: the agent's ``label`` of the side; a
    ``dual_ai`` side without one is ``Side A``/``Side B`` (both sides are models, so neither
    is the user). Empty for a side named by its role."""
    try:
        agent = agent_load(tenant=thread.tenant, name=thread.agent_name)
    except NotFound:  # the agent was deleted since: the roles name the messages
        return {}
    labels: dict[str, str] = {}
    for side, config in (("a", agent.side_a), ("b", agent.side_b)):
        if config is not None and config.label:
            labels[side] = config.label
        elif config is not None and agent.type == "dual_ai":
            labels[side] = f"Side {side.upper()}"
    return labels


# Writes on a thread --------------------------------------------------------------------------


@require_POST
@console_view(write=True)
def message_send(request: HttpRequest, thread_id: uuid.UUID) -> HttpResponse:
    """Submit a message as a turn (``POST …/turns``), with its ``multitask_strategy``."""
    principal = console_of(request).principal
    thread = tenant_thread(principal.tenant, thread_id)
    form = MessageForm(request.POST)

    def send() -> dict[str, Any]:
        if not form.is_valid():
            field, problems = next(iter(form.errors.items()))
            raise ValidationFailed(str(problems[0]), field=field)
        work_admit(thread=thread)  # the budgets and quotas of the API's submissions
        with transaction.atomic():
            turn = message_queue(
                thread=thread, role="user", content=form.cleaned_data["content"],
                source=TurnSource.SUBMIT, strategy=form.cleaned_data["multitask_strategy"],
            )  # fmt: skip
            turn_submitted_audit(principal, turn, None)
        return {"turn_id": str(turn.pk)}

    return answer(request, reverse("console:thread", args=[thread.pk]), send)


@require_POST
@console_view(write=True)
def thread_stop_view(request: HttpRequest, thread_id: uuid.UUID) -> HttpResponse:
    """Stop the running turn (``POST …/stop``)."""
    thread = tenant_thread(console_of(request).principal.tenant, thread_id)

    def stop() -> dict[str, Any]:
        stopped = thread_stop(thread=thread).stopped_turn
        return {"stopped_turn_id": str(stopped.pk) if stopped is not None else None}

    return answer(request, reverse("console:thread", args=[thread.pk]), stop)


@require_POST
@console_view(write=True)
def turn_cancel_view(
    request: HttpRequest, thread_id: uuid.UUID, turn_id: uuid.UUID
) -> HttpResponse:
    """Cancel one turn, queued or running (``POST /turns/{id}/cancel``)."""
    tenant = console_of(request).principal.tenant
    thread = tenant_thread(tenant, thread_id)

    def cancel() -> dict[str, Any]:
        turn = turn_get(tenant=tenant, turn_id=turn_id)
        if turn.thread_id != thread.pk:
            raise NotFound(f"no turn {turn_id} on this thread")
        return {"turn_id": str(turn_cancel(thread=thread, turn=turn).pk)}

    return answer(request, reverse("console:thread", args=[thread.pk]), cancel)


@require_POST
@console_view(write=True)
def action_respond_view(
    request: HttpRequest, thread_id: uuid.UUID, action_id: uuid.UUID
) -> HttpResponse:
    """Approve, deny or edit (``arguments``, JSON) a pending approval; answer (``data``,
    JSON) or deny an input request (``POST …/actions/{id}``)."""
    console = console_of(request)
    thread = tenant_thread(console.principal.tenant, thread_id)
    body: dict[str, Any] = {"decision": request.POST.get("decision", "")}
    if request.POST.get("reason"):
        body["reason"] = request.POST["reason"]
    user = console.principal.user
    responder = f"user:{user.get_username()}" if user is not None else ""

    def respond() -> dict[str, Any]:
        for name in ("data", "arguments"):  # an answer, or an approval's edited arguments
            if name in request.POST:
                body[name] = json_parse(request.POST[name], field=name)
        late: ActionResolved | None = None
        with transaction.atomic():
            try:
                action = action_respond(
                    thread=thread, action_id=action_id, body=body, responder=responder
                )
            except ActionResolved as refused:  # an expiry it committed must stay committed
                late = refused
            else:
                audit_by(
                    console.principal, AuditAction.ACTION_ANSWERED, "action", action.pk,
                    {"thread_id": str(action.thread_id), "decision": body["decision"]},
                )  # fmt: skip
        if late is not None:
            raise late
        return {"action_id": str(action.pk), "status": action.status}

    return answer(request, reverse("console:thread", args=[thread.pk]), respond)


# Variable-bootstrap requests ------------------------------------------------------------------


def _variable_requests(thread: Thread) -> list[dict[str, Any]]:
    """The thread's open variable-bootstrap requests, each missing name with its type
    (``secret`` ones are asked for masked)."""
    requests = pending_variable_requests(thread=thread)
    for request in requests:
        declared = {
            variable.name: variable
            for variable in agent_graph_variables(
                tenant=thread.tenant, agent_name=request["agent_name"]
            )
        }
        request["fields"] = [
            {"name": name, "field": ENV_PREFIX + name,
             "secret": name not in declared or declared[name].type == "secret",
             "declared_in": declared[name].declared_in if name in declared else ""}
            for name in request["missing"]
        ]  # fmt: skip
    return requests


@require_GET
@console_view()
def variable_requests_view(request: HttpRequest, thread_id: uuid.UUID) -> HttpResponse:
    """The thread's open variable-bootstrap requests, as the thread page's fragment (the page
    fetches it again when a tool fails or a turn ends)."""
    console = console_of(request)
    thread = tenant_thread(console.principal.tenant, thread_id)
    return render(
        request, "console/_variable_requests.html",
        {"thread": thread, "variable_requests": _variable_requests(thread),
         "can_write": console.can_write},
    )  # fmt: skip


@require_POST
@console_view(write=True)
def variable_request_complete_view(
    request: HttpRequest, thread_id: uuid.UUID, request_id: uuid.UUID
) -> HttpResponse:
    """Give a deferred subagent the variables it requires (``POST …/variables/{id}``): the
    child is created and starts. Empty fields are left out, so the refusal names the first
    one still missing (``env.NAME``)."""
    thread = tenant_thread(console_of(request).principal.tenant, thread_id)
    env = {
        name[len(ENV_PREFIX) :]: value
        for name in request.POST
        if name.startswith(ENV_PREFIX) and (value := request.POST.get(name, "")).strip()
    }

    def complete() -> dict[str, Any]:
        done = variable_request_complete(thread=thread, request_id=request_id, env=env)
        child = done["child_thread_id"]
        return {**done, "child_url": reverse("console:thread", args=[child])}

    return answer(request, reverse("console:thread", args=[thread.pk]), complete)


@require_POST
@console_view(write=False)
def tenant_ws_ticket(request: HttpRequest) -> HttpResponse:
    """A one-time ticket for the tenant's socket (``/ws/events/``), which the threads list
    follows to show status changes and new threads as they happen. Any role."""
    issued = ws_ticket_issue(principal=console_of(request).principal)
    return JsonResponse({"ticket": issued.ticket})


@require_POST
@console_view(write=False)
def ws_ticket(request: HttpRequest, thread_id: uuid.UUID) -> HttpResponse:
    """A one-time ticket for the thread's socket, standing for this membership (a browser
    cannot send ``X-Tenant`` on a socket). Any role may follow a thread."""
    console: Console = console_of(request)
    thread = tenant_thread(console.principal.tenant, thread_id)
    issued = ws_ticket_issue(principal=console.principal)
    return JsonResponse({"ticket": issued.ticket, "thread_id": str(thread.pk)})


urlpatterns = [
    path("tenant/", tenant_choose, name="tenant-choose"),
    path("", threads_page, name="threads"),
    path("ws-ticket/", tenant_ws_ticket, name="tenant-ws-ticket"),
    path("threads/new/", thread_new, name="thread-new"),
    path(THREAD, thread_detail, name="thread"),
    path(THREAD + "messages/", message_send, name="message-send"),
    path(THREAD + "stop/", thread_stop_view, name="thread-stop"),
    path(THREAD + "turns/<uuid:turn_id>/cancel/", turn_cancel_view, name="turn-cancel"),
    path(THREAD + "actions/<uuid:action_id>/", action_respond_view, name="action-respond"),
    path(THREAD + "ws-ticket/", ws_ticket, name="ws-ticket"),
    path(THREAD + "variables/", variable_requests_view, name="variable-requests"),
    path(
        THREAD + "variables/<uuid:request_id>/",
        variable_request_complete_view,
        name="variable-request-complete",
    ),
]

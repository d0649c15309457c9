"""What a thread did, in the console: its logs (tokens, cost, latency), its raw event log,
its effects and schedules, and its tree of subagents.

Each page reads through the selectors behind the API's ``logs``, ``events``, ``effects``,
``schedules`` and ``children`` routes, and writes (cancelling an effect, pausing or resuming
a schedule) through the same services: the same refusals, the same events, another
tenant's thread a 404. Writes answer as :func:`console.views.common.answer` says.
"""

from __future__ import annotations

import datetime as dt
import json
import uuid
from collections.abc import Callable, Mapping
from dataclasses import dataclass, field
from typing import Any

from django import forms
from django.core.paginator import Paginator
from django.db import transaction
from django.http import HttpRequest, HttpResponse
from django.urls import path, reverse
from django.views.decorators.http import require_GET, require_POST

from common.audit import AuditAction
from common.errors import Conflict, NotFound
from common.pagination import MAX_OFFSET
from common.time import from_us
from console.scope import console_of, console_view
from console.views.common import THREAD, answer, shown_status, tenant_thread, thread_page
from tenancy.auditing import audit_by
from threads.api.schedules import schedule_audit
from threads.events import EventType
from threads.models import EffectStatus, Log, RunStatus, Schedule, SubagentLink, Thread
from threads.runtime.records import TurnUsage
from threads.runtime.schedules import schedule_delete, schedule_json, schedule_pause
from threads.services.effects import effect_cancel, effect_get, effects_json, effects_of
from threads.services.events import event_envelopes
from threads.services.logs import log_rows
from threads.services.subagents import children_of
from threads.services.threads import threads_started
from threads.services.turns import turn_list

LOGS_PER_PAGE = 50
EVENTS_PER_PAGE = 50
EVENTS_SCANNED = 1000  # events a filtered page reads at most
EFFECTS_PER_PAGE = 50
TURN_CHOICES = 200  # the newest turns offered by the events page's turn filter
MAX_SUBAGENTS = 500  # threads shown in one subagent tree

LOG_KINDS = ["llm", "tool", "flow", "subagent", "code", "incident"]
# Events only streams carry (never stored, so never in the log).
UNSTORED = {EventType.MODEL_DELTA, EventType.REASONING_DELTA}


def _when(micros: int | None) -> dt.datetime | None:
    return from_us(micros) if micros is not None else None


def _pretty(value: Any) -> str:
    return json.dumps(value, indent=2, sort_keys=True, default=str)


# Logs ---------------------------------------------------------------------------------------


class LogFilterForm(forms.Form):
    kind = forms.ChoiceField(
        label="Kind", required=False,
        choices=[("", "any kind"), *((kind, kind) for kind in LOG_KINDS)],
    )  # fmt: skip


@dataclass(frozen=True)
class LogRow:
    """One log as the page's table shows it; a figure nobody reported is None (shown "—")."""

    log: Log
    name: str
    status: str
    input_tokens: int | None
    output_tokens: int | None
    cost_usd: float | None
    latency_ms: float | None
    at: dt.datetime
    detail: str


def _log_name(kind: str, data: Mapping[str, Any]) -> str:
    names = {"llm": "model", "tool": "tool", "flow": "agent", "subagent": "relationship",
             "incident": "incident"}  # fmt: skip
    return str(data.get(names.get(kind, "name")) or data.get("reference") or "")


def _log_status(kind: str, data: Mapping[str, Any]) -> str:
    if kind == "llm":
        return "failed" if data.get("error") else "aborted" if data.get("aborted") else "ok"
    found = {"flow": "reason", "subagent": "event", "incident": "incident"}.get(kind, "status")
    return str(data.get(found) or "")


def _log_latency(data: Mapping[str, Any]) -> float | None:
    """A model call's latency, a tool's or a code run's duration, or a flow's span (ms)."""
    for name in ("latency_ms", "duration_ms"):
        if isinstance(data.get(name), int | float):
            return float(data[name])
    started, ended = data.get("started_at"), data.get("ended_at")
    if isinstance(started, int) and isinstance(ended, int):
        return (ended - started) / 1000
    return None


def _log_row(log: Log) -> LogRow:
    data: Mapping[str, Any] = log.data if isinstance(log.data, dict) else {}
    return LogRow(
        log=log, name=_log_name(log.kind, data), status=_log_status(log.kind, data),
        input_tokens=data.get("input_tokens"), output_tokens=data.get("output_tokens"),
        cost_usd=data.get("cost_usd"), latency_ms=_log_latency(data), at=from_us(log.created_at),
        detail=_pretty(log.data),
    )  # fmt: skip


def _usage(thread: Thread) -> dict[str, Any] | None:
    """The thread's model calls summed as a turn's are (a figure any call did not report is
    None); None when it called no model."""
    usage = TurnUsage()
    for data in log_rows(thread=thread, kind="llm").values_list("data", flat=True):
        usage.add(data if isinstance(data, dict) else {})
    return usage.summary()


@require_GET
@console_view()
def logs_page(request: HttpRequest, thread_id: uuid.UUID) -> HttpResponse:
    """The thread's logs, newest first (``?kind=`` keeps one kind), with its usage totals."""
    thread = tenant_thread(console_of(request).principal.tenant, thread_id)
    filters = LogFilterForm(request.GET)
    rows: Any = Log.objects.none()
    if filters.is_valid():
        rows = log_rows(thread=thread, kind=filters.cleaned_data["kind"] or None)
    listing = Paginator(rows, LOGS_PER_PAGE).get_page(request.GET.get("page"))
    return thread_page(
        request, "console/observe/logs.html", thread, "console:thread-logs",
        {"filters": filters, "logs": [_log_row(log) for log in listing], "page": listing,
         "usage": _usage(thread)},
    )  # fmt: skip


# Events -------------------------------------------------------------------------------------


class EventFilterForm(forms.Form):
    type = forms.ChoiceField(label="Type", required=False)
    turn = forms.ChoiceField(label="Turn", required=False)
    after = forms.IntegerField(
        label="After sequence", required=False, min_value=0, max_value=MAX_OFFSET
    )

    def __init__(self, *args: Any, turns: list[tuple[str, str]], **kwargs: Any) -> None:
        super().__init__(*args, **kwargs)
        types = [kind.value for kind in EventType if kind not in UNSTORED]
        self.fields["type"].choices = [("", "any type"), *((t, t) for t in types)]  # type: ignore[attr-defined]
        self.fields["turn"].choices = [("", "any turn"), *turns]  # type: ignore[attr-defined]


def _turn_choices(thread: Thread) -> list[tuple[str, str]]:
    return [
        (str(turn.pk), f"{from_us(turn.created_at):%Y-%m-%d %H:%M:%S} · {turn.status} · "
                       f"…{str(turn.pk)[-8:]}")
        for turn in turn_list(thread=thread)[:TURN_CHOICES]
    ]  # fmt: skip


@dataclass(frozen=True)
class EventPage:
    """Events after ``after`` that match the filters, and where the next page starts (None
    when the log ends here)."""

    events: list[dict[str, Any]]
    next_after: int | None


def _event_page(thread: Thread, *, after: int, event_type: str, turn: str) -> EventPage:
    """A filtered page reads at most ``EVENTS_SCANNED`` events, so a page of a rare type may
    come up short (or empty) with more to read after it."""
    filtered = bool(event_type or turn)
    limit = EVENTS_SCANNED if filtered else EVENTS_PER_PAGE + 1
    read = event_envelopes(thread=thread, after=after, limit=limit)
    kept = [
        envelope for envelope in read
        if (not event_type or envelope["type"] == event_type)
        and (not turn or envelope["turn_id"] == turn)
    ]  # fmt: skip
    if len(kept) > EVENTS_PER_PAGE:
        shown = kept[:EVENTS_PER_PAGE]
        return EventPage(shown, shown[-1]["sequence"])
    if len(read) == limit:
        return EventPage(kept, read[-1]["sequence"])
    return EventPage(kept, None)


@require_GET
@console_view()
def events_page(request: HttpRequest, thread_id: uuid.UUID) -> HttpResponse:
    """The thread's event log, oldest first from ``?after=`` (a sequence), ``?type=`` and
    ``?turn=`` keeping one type or one turn's events."""
    thread = tenant_thread(console_of(request).principal.tenant, thread_id)
    filters = EventFilterForm(request.GET, turns=_turn_choices(thread))
    found = EventPage([], None)
    after = 0
    if filters.is_valid():
        data = filters.cleaned_data
        after = data["after"] or 0
        found = _event_page(thread, after=after, event_type=data["type"], turn=data["turn"])
    events = [
        {**envelope, "at": from_us(envelope["timestamp"]), "detail": _pretty(envelope)}
        for envelope in found.events
    ]
    return thread_page(
        request, "console/observe/events.html", thread, "console:thread-events",
        {"filters": filters, "events": events, "after": after, "next_after": found.next_after},
    )  # fmt: skip


# Effects and schedules ----------------------------------------------------------------------


class EffectFilterForm(forms.Form):
    status = forms.ChoiceField(
        label="Status", required=False, choices=[("", "any status"), *EffectStatus.choices]
    )


def _effect_view(effect: Mapping[str, Any]) -> dict[str, Any]:
    return {
        **effect,
        "due": _when(effect["scheduled_at"]),
        "scheduled": _when(effect["created_at"]),
        "finished": _when(effect["completed_at"]),
        "args_json": _pretty(effect["args"]),
        "cancellable": effect["status"] == EffectStatus.PENDING,
    }


def _thread_schedules(thread: Thread) -> list[Schedule]:
    """The thread's schedules, oldest first, as ``GET /schedules?thread_id=`` lists them."""
    return list(
        Schedule.objects.for_tenant(thread.tenant)
        .filter(thread_id=thread.pk)
        .order_by("created_at", "id")
    )


def _schedule_view(row: Schedule) -> dict[str, Any]:
    shown = schedule_json(row)
    target = shown["input"] if shown["action"] == "turn" else shown["effect"]
    return {
        **shown,
        "next": _when(shown["next_run_at"]),
        "last": _when(shown["last_run_at"]),
        "target_json": _pretty(target),
        "last_run_json": _pretty(shown["last_run"]) if shown["last_run"] is not None else "",
    }


@require_GET
@console_view()
def effects_page(request: HttpRequest, thread_id: uuid.UUID) -> HttpResponse:
    """The thread's effects, soonest first (``?status=`` keeps one status), and its
    schedules."""
    thread = tenant_thread(console_of(request).principal.tenant, thread_id)
    filters = EffectFilterForm(request.GET)
    rows: Any = []
    if filters.is_valid():
        rows = effects_of(thread=thread, status=filters.cleaned_data["status"] or None)
    listing = Paginator(rows, EFFECTS_PER_PAGE).get_page(request.GET.get("page"))
    effects = [_effect_view(effect) for effect in effects_json(list(listing))]
    schedules = [_schedule_view(row) for row in _thread_schedules(thread)]
    return thread_page(
        request, "console/observe/effects.html", thread, "console:thread-effects",
        {"filters": filters, "effects": effects, "page": listing, "schedules": schedules},
    )  # fmt: skip


@require_POST
@console_view(write=True)
def effect_cancel_view(
    request: HttpRequest, thread_id: uuid.UUID, effect_id: uuid.UUID
) -> HttpResponse:
    """Cancel a pending effect (``DELETE …/effects/{id}``): it ends ``user_canceled``."""
    thread = tenant_thread(console_of(request).principal.tenant, thread_id)

    def cancel() -> dict[str, Any]:
        cancelled = effect_cancel(thread=thread, effect_id=effect_id, by_agent=False)
        if cancelled is None:
            current = effects_json([effect_get(thread=thread, effect_id=effect_id)])[0]
            raise Conflict(f"effect {effect_id} is {current['status']}; only a pending one "
                           "can be cancelled")  # fmt: skip
        return {"effect": effects_json([cancelled])[0]}

    return answer(request, reverse("console:thread-effects", args=[thread.pk]), cancel)


def _schedule_changed(
    request: HttpRequest,
    thread_id: uuid.UUID,
    schedule_id: uuid.UUID,
    change: Callable[[Schedule], dict[str, Any]],
) -> HttpResponse:
    """``change`` one of the thread's schedules; another thread's is a 404."""
    thread = tenant_thread(console_of(request).principal.tenant, thread_id)

    def changed() -> dict[str, Any]:
        row = next((row for row in _thread_schedules(thread) if row.pk == schedule_id), None)
        if row is None:
            raise NotFound(f"no schedule {schedule_id} on this thread")
        return change(row)

    return answer(request, reverse("console:thread-effects", args=[thread.pk]), changed)


@require_POST
@console_view(write=True)
def schedule_pause_view(
    request: HttpRequest, thread_id: uuid.UUID, schedule_id: uuid.UUID
) -> HttpResponse:
    """Pause one of the thread's schedules (``POST /schedules/{id}/pause``)."""
    return _schedule_changed(
        request, thread_id, schedule_id, lambda row: _paused(request, row, paused=True)
    )


@require_POST
@console_view(write=True)
def schedule_resume_view(
    request: HttpRequest, thread_id: uuid.UUID, schedule_id: uuid.UUID
) -> HttpResponse:
    """Resume one of the thread's schedules from its next slot after now
    (``POST /schedules/{id}/resume``)."""
    return _schedule_changed(
        request, thread_id, schedule_id, lambda row: _paused(request, row, paused=False)
    )


def _paused(request: HttpRequest, row: Schedule, *, paused: bool) -> dict[str, Any]:
    """Pause or resume ``row`` (``schedule_pause``), recorded as the API records it."""
    action = AuditAction.SCHEDULE_PAUSED if paused else AuditAction.SCHEDULE_RESUMED
    with transaction.atomic():
        row = schedule_pause(row=row, paused=paused)
        audit_by(console_of(request).principal, action, "schedule", row.pk)
    return {"schedule": schedule_json(row)}


@require_POST
@console_view(write=True)
def schedule_delete_view(
    request: HttpRequest, thread_id: uuid.UUID, schedule_id: uuid.UUID
) -> HttpResponse:
    """Delete one of the thread's schedules (``DELETE /schedules/{id}``)."""

    def delete(row: Schedule) -> dict[str, Any]:
        with transaction.atomic():
            schedule_audit(
                console_of(request).principal, AuditAction.SCHEDULE_DELETED, row.pk,
                schedule_json(row), {},
            )  # fmt: skip
            schedule_delete(row=row)
        return {"deleted": str(schedule_id)}

    return _schedule_changed(request, thread_id, schedule_id, delete)


# Subagents ----------------------------------------------------------------------------------


# What a registry entry's status says that the child's own status says better (runtime §10);
# any other text is the child's own, set by ``set_status`` or a session-status binding.
REGISTRY_STATUSES = frozenset({"running", "idle", "failed", "awaiting_human", "terminated"})
# The statuses a closed child keeps: its work ended so before it was closed.
ENDED = frozenset({RunStatus.COMPLETED, RunStatus.FAILED})


@dataclass
class SubagentNode:
    """A child thread in the tree: its registry entry, the one state it is shown in, the
    status text it set itself (if any), whether it is closed, and its own children."""

    link: SubagentLink
    state: str
    note: str
    closed: bool
    children: list[SubagentNode] = field(default_factory=list)


def _subagent_node(link: SubagentLink, children: list[SubagentNode]) -> SubagentNode:
    """One state per child: its thread's status (``new`` when it never ran); a closed child
    whose work had not completed or failed is ``terminated``. A non-resumable child is
    closed once its session ends, so ``completed`` and closed is the ordinary end."""
    child = link.child
    state = shown_status(child, started=bool(threads_started(threads=[child])))
    closed = (
        link.terminated_at is not None
        or child.terminated_at is not None
        or link.status == "terminated"
    )
    if closed and state not in ENDED:
        state = "terminated"
    note = "" if link.status in REGISTRY_STATUSES else link.status
    return SubagentNode(link, state, note, closed, children)


def _subagent_tree(thread: Thread, seen: set[uuid.UUID]) -> list[SubagentNode]:
    """``thread``'s subagents, oldest first, each with its own; every thread once, and at
    most ``MAX_SUBAGENTS`` in all (``seen`` holds those already placed)."""
    nodes = []
    for link in children_of(thread=thread):
        if link.child_id in seen or len(seen) >= MAX_SUBAGENTS:
            continue
        seen.add(link.child_id)
        nodes.append(_subagent_node(link, _subagent_tree(link.child, seen)))
    return nodes


@require_GET
@console_view()
def subagents_page(request: HttpRequest, thread_id: uuid.UUID) -> HttpResponse:
    """The thread's subagents as a tree, each linked to its page, and the thread's parent."""
    thread = tenant_thread(console_of(request).principal.tenant, thread_id)
    seen: set[uuid.UUID] = set()
    tree = _subagent_tree(thread, seen)
    return thread_page(
        request, "console/observe/subagents.html", thread, "console:thread-subagents",
        {"tree": tree, "count": len(seen), "truncated": len(seen) >= MAX_SUBAGENTS},
    )  # fmt: skip


urlpatterns = [
    path(THREAD + "logs/", logs_page, name="thread-logs"),
    path(THREAD + "events/", events_page, name="thread-events"),
    path(THREAD + "effects/", effects_page, name="thread-effects"),
    path(THREAD + "effects/<uuid:effect_id>/cancel/", effect_cancel_view, name="effect-cancel"),
    path(
        THREAD + "schedules/<uuid:schedule_id>/pause/", schedule_pause_view, name="schedule-pause"
    ),
    path(
        THREAD + "schedules/<uuid:schedule_id>/resume/",
        schedule_resume_view,
        name="schedule-resume",
    ),
    path(
        THREAD + "schedules/<uuid:schedule_id>/delete/",
        schedule_delete_view,
        name="schedule-delete",
    ),
    path(THREAD + "subagents/", subagents_page, name="thread-subagents"),
]

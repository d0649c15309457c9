"""Recurring schedules (:class:`threads.models.Schedule`): created and changed with their
checks, and fired by beat's ``fire_schedules``.

Slots come from croniter in the schedule's time zone (so "9:00 every weekday" stays 9:00
across daylight-saving changes). Firing is exactly once per run: due rows are claimed with
``FOR UPDATE SKIP LOCKED`` in the transaction that submits the run and moves ``next_run_at``
to the first slot **after now**, so a schedule that missed several slots while everything
was down fires once, not once per missed slot.
"""

from __future__ import annotations

import logging
import uuid
from collections.abc import Mapping
from datetime import UTC, datetime
from typing import Any, Final
from zoneinfo import ZoneInfo, ZoneInfoNotFoundError

from croniter import croniter
from django.db import transaction

from agents.selectors import definitions_scope
from common.duties import duty_wake_on_commit
from common.errors import DomainError, ValidationFailed
from common.payloads import flag_field, known_keys_check, object_body, text_field
from common.tenant_wall import tenant_scope
from common.time import now_us
from tenancy.models import Tenant
from threads.models import Schedule, ScheduleAction, Thread, TurnSource
from threads.runtime.definitions import FlowDefinitions
from threads.runtime.lifecycle import thread_open
from threads.services.effects import effect_entry, effect_schedule
from threads.services.inbox import message_queue

logger = logging.getLogger(__name__)

FIELDS: Final = (
    "name", "thread_id", "agent", "cron", "timezone", "action", "input", "effect", "paused",
)  # fmt: skip
MAX_SCHEDULES: Final = 1000  # per tenant
FIRE_BATCH: Final = 200
# Beat's firing of schedules: every saved schedule opens it again (common.duties).
FIRE_SCHEDULES_TASK: Final = "threads.fire_schedules"


def schedule_json(row: Schedule) -> dict[str, Any]:
    return {
        "id": str(row.pk),
        "name": row.name,
        "thread_id": str(row.thread_id) if row.thread_id else None,
        "agent": row.agent_name or None,
        "cron": row.cron,
        "timezone": row.timezone,
        "action": row.action,
        "input": row.input,
        "effect": {"name": row.effect_name, "args": row.effect_args}
        if row.action == ScheduleAction.EFFECT
        else None,
        "paused": row.paused,
        "next_run_at": None if row.paused else row.next_run_at,
        "last_run_at": row.last_run_at,
        "last_run": row.last_run,
        "runs": row.runs,
        "created_at": row.created_at,
        "updated_at": row.updated_at,
    }


def next_slot(cron: str, timezone: str, after_us: int) -> int:
    """The first slot of ``cron`` in ``timezone`` strictly after ``after_us`` (µs)."""
    start = datetime.fromtimestamp(after_us / 1_000_000, tz=ZoneInfo(timezone))
    following: datetime = croniter(cron, start).get_next(datetime)
    return int(following.astimezone(UTC).timestamp() * 1_000_000)


# Writing ------------------------------------------------------------------------------------


def schedule_save(
    *, tenant: Tenant, data: Mapping[str, Any], current: Schedule | None = None
) -> Schedule:
    """Create a schedule (``current`` None) or change ``current`` by ``data`` (merged).
    ValidationFailed names the field of any problem."""
    object_body(data, FIELDS)
    merged = {**(_fields_of(current) if current is not None else {}), **data}
    fields = _checked(tenant, merged)
    with transaction.atomic():
        duty_wake_on_commit(FIRE_SCHEDULES_TASK)
        if current is None:
            if Schedule.objects.for_tenant(tenant).count() >= MAX_SCHEDULES:
                raise ValidationFailed(f"a tenant has at most {MAX_SCHEDULES} schedules")
            return Schedule.objects.create(tenant=tenant, **fields)
        timing_changed = (current.cron, current.timezone, current.paused) != (
            fields["cron"], fields["timezone"], fields["paused"],
        )  # fmt: skip
        for name, value in fields.items():
            if name != "next_run_at" or timing_changed:
                setattr(current, name, value)
        current.updated_at = now_us()
        current.save()
    return current


def _fields_of(row: Schedule) -> dict[str, Any]:
    return {
        "name": row.name, "thread_id": str(row.thread_id) if row.thread_id else None,
        "agent": row.agent_name or None, "cron": row.cron, "timezone": row.timezone,
        "action": row.action, "input": row.input,
        "effect": {"name": row.effect_name, "args": row.effect_args}
        if row.action == ScheduleAction.EFFECT else None,
        "paused": row.paused,
    }  # fmt: skip


def _checked(tenant: Tenant, data: Mapping[str, Any]) -> dict[str, Any]:
    cron, timezone = data.get("cron"), data.get("timezone") or "UTC"
    if not isinstance(cron, str) or not croniter.is_valid(cron) or len(cron) > 120:
        raise ValidationFailed(
            "cron must be a cron expression (minute hour day month weekday), e.g. '0 9 * * 1-5'",
            field="cron",
        )
    try:
        ZoneInfo(str(timezone))
    except (ZoneInfoNotFoundError, ValueError):
        raise ValidationFailed(
            f"timezone {timezone!r} is not an IANA time zone (e.g. Europe/Paris)", field="timezone"
        ) from None
    thread_id, agent = data.get("thread_id"), data.get("agent")
    if (thread_id is None) == (agent is None):
        raise ValidationFailed("a schedule targets one thread_id or one agent", field="thread_id")
    thread = _thread_of(tenant, thread_id) if thread_id is not None else None
    if agent is not None:
        _agent_check(tenant, agent)
    action = data.get("action", ScheduleAction.TURN)
    if action not in ScheduleAction.values:
        raise ValidationFailed(
            f"action must be one of {', '.join(ScheduleAction.values)}", field="action"
        )
    fields: dict[str, Any] = {
        "name": text_field(data.get("name"), "name", max_chars=200),
        "thread": thread, "agent_name": agent or "", "cron": cron, "timezone": str(timezone),
        "action": action, "input": None, "effect_name": "", "effect_args": None,
        "paused": flag_field(data.get("paused", False), "paused"),
    }  # fmt: skip
    if action == ScheduleAction.TURN:
        fields["input"] = _turn_input(data.get("input"))
    else:
        if thread is None:
            raise ValidationFailed("an effect runs on a thread: give thread_id", field="action")
        name, args = _effect(data.get("effect"))
        try:
            entry = effect_entry(thread=thread, name=name)
            entry.parse_args(args)
        except ValidationFailed as error:
            raise ValidationFailed(error.message, field=f"effect.{error.field or 'name'}") from None
        except DomainError as error:
            raise ValidationFailed(error.message, field="effect.args") from None
        fields["effect_name"], fields["effect_args"] = name, args
    fields["next_run_at"] = next_slot(cron, str(timezone), now_us())
    return fields


def _thread_of(tenant: Tenant, thread_id: Any) -> Thread:
    found = Thread.objects.for_tenant(tenant).filter(pk=_uuid(thread_id)).first()
    if found is None:
        raise ValidationFailed("no such thread in this tenant", field="thread_id")
    if found.terminated_at is not None:
        raise ValidationFailed("the thread is terminated", field="thread_id")
    return found


def _uuid(value: Any) -> Any:
    try:
        return uuid.UUID(str(value))
    except ValueError:
        raise ValidationFailed("thread_id must be a thread's id", field="thread_id") from None


def _agent_check(tenant: Tenant, agent: Any) -> None:
    with definitions_scope():
        found = FlowDefinitions(tenant=tenant, model_env=lambda _name: None).agent(str(agent))
    if not isinstance(agent, str) or found is None:
        raise ValidationFailed(f"unknown agent {agent!r}", field="agent")


def _turn_input(value: Any) -> dict[str, Any]:
    if not isinstance(value, Mapping) or not isinstance(value.get("content"), str):
        raise ValidationFailed("input must be {content, role?}", field="input.content")
    known_keys_check(value, ("content", "role", "metadata"), path="input")
    role = value.get("role", "user")
    if role not in ("user", "assistant", "system"):
        raise ValidationFailed("input.role must be user, assistant or system", field="input.role")
    return {
        "content": value["content"],
        "role": role,
        "metadata": dict(value.get("metadata") or {}),
    }


def _effect(value: Any) -> tuple[str, Any]:
    if not isinstance(value, Mapping) or not isinstance(value.get("name"), str):
        raise ValidationFailed("effect must be {name, args?}", field="effect.name")
    known_keys_check(value, ("name", "args"), path="effect")
    return value["name"], value.get("args")


def schedule_pause(*, row: Schedule, paused: bool) -> Schedule:
    """Pause, or resume (its next slot counted from now: what it missed is not made up)."""
    if row.paused != paused:
        row.paused = paused
        if not paused:
            row.next_run_at = next_slot(row.cron, row.timezone, now_us())
        row.updated_at = now_us()
        row.save(update_fields=["paused", "next_run_at", "updated_at"])
    return row


def schedule_delete(*, row: Schedule) -> None:
    """Delete a schedule: it runs no more (a run under way finishes)."""
    row.delete()


# Firing -------------------------------------------------------------------------------------


def schedules_fire(now: int | None = None) -> int:
    """Beat: run every schedule that is due, once, and move it to its first slot after
    ``now``. Returns how many ran."""
    now = now_us() if now is None else now
    with transaction.atomic():
        due = list(
            Schedule.objects.select_for_update(skip_locked=True, of=("self",))
            .select_related("tenant", "thread__tenant")
            .filter(paused=False, next_run_at__lte=now)
            .order_by("next_run_at")[:FIRE_BATCH]
        )
        for row in due:
            row.last_run = _run(row)
            row.last_run_at, row.runs = now, row.runs + 1
            row.next_run_at = next_slot(row.cron, row.timezone, now)
            row.save(update_fields=["last_run", "last_run_at", "runs", "next_run_at"])
    return len(due)


def _run(row: Schedule) -> dict[str, Any]:
    """One run of ``row`` in a savepoint: what it started, or the error that stopped it."""
    try:
        with transaction.atomic(), tenant_scope(row.tenant_id):
            if row.action == ScheduleAction.EFFECT:
                assert row.thread is not None
                effect = effect_schedule(
                    thread=row.thread, name=row.effect_name, args=row.effect_args, delay_ms=0
                )
                return {"thread_id": str(row.thread_id), "effect_id": str(effect.pk)}
            thread = row.thread or thread_open(tenant=row.tenant, agent_name=row.agent_name)
            payload = row.input or {}
            turn = message_queue(
                thread=thread, role=payload.get("role", "user"), content=payload.get("content"),
                metadata={**(payload.get("metadata") or {}), "schedule_id": str(row.pk)},
                source=TurnSource.SCHEDULE,
            )  # fmt: skip
            return {"thread_id": str(thread.pk), "turn_id": str(turn.pk)}
    except DomainError as error:
        logger.info("schedule %s: its run failed: %s", row.pk, error.message)
        return {"error": error.message}

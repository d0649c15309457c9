"""Idle duties (common.duties, config.beat_watch "Idle duties"): a duty says after its run
until when it has nothing to do, beat does not send it before then (nor later than its idle
maximum), and a writer of new work opens it again."""

from __future__ import annotations

import datetime as dt
import math
import time
from collections.abc import Iterator
from pathlib import Path

import pytest
from pytest_django.fixtures import Settings

from agents.bundles import bundle_import
from common.duties import duties_idle, duty_idle_until, duty_wake, idle_key
from config.beat_watch import HeartbeatScheduler, redis_client
from config.celery import app
from tenancy.models import Tenant
from tests.factories import make_tenant
from tests.reliability.platform import chat_bundle
from tests.worker import private_queue
from threads import tasks
from threads.runtime.schedules import FIRE_SCHEDULES_TASK, schedule_save
from threads.services.inbox import message_queue
from threads.services.threads import thread_create
from threads.services.wakeups import SWEEP_TASK, wake_thread


@pytest.fixture
def queue(settings: Settings) -> Iterator[str]:
    name = private_queue()
    settings.CELERY_TASK_DEFAULT_QUEUE = name
    previous = app.conf.task_default_queue
    app.conf.task_default_queue = name
    yield name
    app.conf.task_default_queue = previous
    redis_client(settings.REDIS_URL).delete(idle_key(name), name)


def _tenant() -> Tenant:
    tenant = make_tenant()
    bundle_import(tenant=tenant, document=chat_bundle([{"respond": {"text": "ok"}}]))
    return tenant


def _hints(settings: Settings, queue: str) -> dict[str, float]:
    return dict(duties_idle(redis_client(settings.REDIS_URL), queue=queue))


@pytest.mark.django_db
def test_an_idle_thread_sweep_closes_itself_and_a_wake_up_opens_it(
    queue: str, settings: Settings
) -> None:
    tasks.sweep_threads()
    assert _hints(settings, queue) == {SWEEP_TASK: math.inf}

    wake_thread("thread-1", "tenant-1")

    assert _hints(settings, queue) == {}


@pytest.mark.django_db
def test_the_sweep_stays_open_while_a_turn_is_unfinished(queue: str, settings: Settings) -> None:
    tenant = _tenant()
    thread = thread_create(tenant=tenant, agent_name="chat")
    message_queue(thread=thread, role="user", content="hi", wake=False)

    tasks.sweep_threads()

    assert SWEEP_TASK not in _hints(settings, queue)


@pytest.mark.django_db
def test_schedules_sleep_until_the_next_slot_and_a_saved_schedule_opens_them(
    queue: str, settings: Settings, django_capture_on_commit_callbacks: object
) -> None:
    tasks.fire_schedules()
    assert _hints(settings, queue) == {FIRE_SCHEDULES_TASK: math.inf}  # no schedule at all

    tenant = _tenant()
    thread = thread_create(tenant=tenant, agent_name="chat")
    with django_capture_on_commit_callbacks(execute=True):  # type: ignore[operator]
        schedule = schedule_save(tenant=tenant, data={
            "name": "hourly", "thread_id": str(thread.pk), "cron": "0 * * * *",
            "input": {"content": "tick"},
        })  # fmt: skip
    assert _hints(settings, queue) == {}

    tasks.fire_schedules()
    assert _hints(settings, queue)[FIRE_SCHEDULES_TASK] == pytest.approx(
        schedule.next_run_at / 1e6, abs=0.01
    )


def _scheduler(tmp_path: Path) -> HeartbeatScheduler:
    scheduler = HeartbeatScheduler(app=app, schedule_filename=str(tmp_path / "schedule"))
    scheduler._leading = True
    return scheduler


@pytest.mark.django_db
def test_beat_holds_an_idle_duty_back_until_its_hint_or_its_idle_maximum(
    queue: str, settings: Settings, tmp_path: Path
) -> None:
    settings.BEAT_IDLE_MAX_S = 30.0
    scheduler = _scheduler(tmp_path)
    try:
        entry = scheduler.schedule["sweep-effects"]
        entry.last_run_at = entry.default_now() - dt.timedelta(minutes=1)  # overdue
        task = str(entry.task)

        # Never sent since beat started leading: sent when due, whatever the hint.
        duty_idle_until(task, time.time() + 20)
        assert scheduler.is_due(entry).is_due is True

        scheduler._last_sent[task] = time.monotonic()
        scheduler._idle_read_at = -10.0
        held = scheduler.is_due(entry)
        assert held.is_due is False
        assert held.next == 5  # looked at again within IDLE_POLL_S (a writer may open it)

        duty_wake(task)
        scheduler._idle_read_at = -10.0
        assert scheduler.is_due(entry).is_due is True

        duty_idle_until(task, math.inf)
        scheduler._last_sent[task] = time.monotonic() - 29.5  # the idle maximum is near
        scheduler._idle_read_at = -10.0
        assert scheduler.is_due(entry) == (False, 1.0)
        scheduler._last_sent[task] = time.monotonic() - 30.5
        assert scheduler.is_due(entry).is_due is True
    finally:
        scheduler.close()


@pytest.mark.django_db
def test_the_thread_sweep_is_held_back_at_most_the_sweep_grace(
    queue: str, settings: Settings, tmp_path: Path
) -> None:
    settings.BEAT_IDLE_MAX_S = 600.0
    settings.THREAD_SWEEP_GRACE_S = 10
    scheduler = _scheduler(tmp_path)
    try:
        entry = scheduler.schedule["sweep-threads"]
        entry.last_run_at = entry.default_now() - dt.timedelta(minutes=1)
        duty_idle_until(SWEEP_TASK, math.inf)
        scheduler._last_sent[SWEEP_TASK] = time.monotonic() - 9.0
        scheduler._idle_read_at = -10.0
        assert scheduler.is_due(entry) == (False, 1.0)
        scheduler._last_sent[SWEEP_TASK] = time.monotonic() - 10.5
        assert scheduler.is_due(entry).is_due is True
    finally:
        scheduler.close()

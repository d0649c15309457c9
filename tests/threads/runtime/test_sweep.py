"""The beat sweeper (threads_sweep): what it wakes, and when."""

from __future__ import annotations

import pytest
from pytest_django.fixtures import Settings

from common.time import now_us
from tests.threads.runtime.conftest import Engine, prompt
from threads.models import Turn
from threads.runtime.driver import threads_sweep
from threads.services import wakeups
from threads.services.lock import lock_acquire

pytestmark = pytest.mark.django_db


def test_a_waiting_turn_is_swept_only_once_its_wake_up_had_time_to_arrive(
    engine: Engine, wakes: list[str], settings: Settings
) -> None:
    settings.THREAD_SWEEP_GRACE_S = 10
    engine.define(
        prompts=[prompt("helper")], agents=[{"name": "helper", "side_a": {"prompt": "helper"}}]
    )
    thread = engine.thread("helper")
    engine.send(thread, "hello")
    wakes.clear()  # the submission's own wake-up, still on its way to a worker

    assert threads_sweep() == 0
    assert wakes == []

    Turn.objects.filter(thread=thread).update(created_at=now_us() - 11_000_000)
    assert threads_sweep() == 1
    assert wakes == [str(thread.pk)]


def test_a_running_turn_whose_lock_missed_its_renewals_is_woken_as_the_lock_expires(
    engine: Engine, settings: Settings, monkeypatch: pytest.MonkeyPatch
) -> None:
    """Its holder most likely died: the takeover should wait for the lock's TTL only, not
    also for the next sweep. A lock renewed on time is left alone."""
    settings.THREAD_LOCK_TTL_MS = 4_000
    woken: list[tuple[str, float | None]] = []
    monkeypatch.setattr(
        wakeups, "wake_thread",
        lambda thread_id, _tenant, countdown=None, **_: woken.append((str(thread_id), countdown)),
    )  # fmt: skip
    engine.define(
        prompts=[prompt("helper")], agents=[{"name": "helper", "side_a": {"prompt": "helper"}}]
    )
    live, dead = engine.thread("helper"), engine.thread("helper")
    for thread in (live, dead):
        engine.send(thread, "hello")
    Turn.objects.filter(thread__in=[live, dead]).update(status="running")
    held = {
        thread.pk: lock_acquire(tenant_id=thread.tenant_id, thread_id=thread.pk, ttl_ms=ttl_ms)
        for thread, ttl_ms in ((live, 3_500), (dead, 1_500))
    }
    woken.clear()

    assert threads_sweep() == 0

    assert [thread_id for thread_id, _ in woken] == [str(dead.pk)]
    assert 1.3 < (woken[0][1] or 0) <= 1.6  # as its lock expires
    for lock in held.values():
        assert lock is not None
        lock.release()

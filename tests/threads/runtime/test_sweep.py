"""The beat sweeper (threads_sweep): what it wakes, and when."""

from __future__ import annotations

import pytest
from pytest_django.fixtures import Settings

from common.time import now_us
from tests.threads.runtime.conftest import Engine, prompt
from threads.models import Turn
from threads.runtime.driver import threads_sweep

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

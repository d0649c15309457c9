"""Scheduled effects end to end: two real Celery workers share one queue and fire 1,000
effects due over 5 s; one is killed (``kill -9``) half way, with deliveries in hand. The sweep
(beat's task body, run here once a second) re-sends what the dead worker held, and every
effect fires exactly once: its handler's message exists once, and its row is ``completed``.
Data is committed (``transaction=True``) so the workers see it."""

from __future__ import annotations

import time
from collections import Counter
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

from agents.registry import effect, use_registry
from tenancy.models import Tenant
from tests.factories import make_thread
from tests.support import current_database_url
from tests.worker import Worker, print_log, private_queue, tasks_routed_to, worker_start
from threads.models import Message, ScheduledEffect
from threads.services.effects import effect_schedule, effects_sweep
from threads.state import ThreadState

pytestmark = pytest.mark.django_db(transaction=True)

EFFECTS = 1000
THREADS = 100
SPREAD_MS = 5000
TIMEOUT_S = 90.0


def effects_register() -> None:
    """In the workers and here: ``mark`` writes one message naming its effect."""

    @effect(description="Leave a mark.", args={"type": "object",
            "properties": {"n": {"type": "integer"}}, "required": ["n"]})  # fmt: skip
    def mark(state: ThreadState, args: dict[str, Any]) -> None:
        state.inject_message(role="system", content=f"mark {args['n']}")


@pytest.fixture
def workers(tmp_path: Path) -> Iterator[list[Worker]]:
    queue = private_queue()
    started = [
        worker_start(
            queue=queue,
            database_url=current_database_url(),
            log_path=tmp_path / f"{name}.log",
            setup="tests.threads.test_effects_e2e:effects_register",
        )
        for name in ("doomed", "survivor")
    ]
    try:
        for worker in started:
            worker.wait_ready()
        with tasks_routed_to(queue):
            yield started
    finally:
        for worker in started:
            worker.stop()


def test_a_thousand_effects_fire_exactly_once_through_a_worker_kill(
    tenant: Tenant, workers: list[Worker]
) -> None:
    doomed, survivor = workers
    threads = [make_thread(tenant) for _ in range(THREADS)]
    started = time.monotonic()
    with use_registry():
        effects_register()
        for n in range(EFFECTS):
            effect_schedule(thread=threads[n % THREADS], name="mark", args={"n": n},
                            delay_ms=n * SPREAD_MS // EFFECTS)  # fmt: skip
    time.sleep(max(0.0, SPREAD_MS / 2000 - (time.monotonic() - started)))
    fired_before_kill = ScheduledEffect.objects.filter(status="completed").count()
    doomed.kill()

    deadline = time.monotonic() + TIMEOUT_S
    while ScheduledEffect.objects.exclude(status="completed").exists():
        if time.monotonic() > deadline:
            print_log(survivor)
            pytest.fail(
                f"{ScheduledEffect.objects.exclude(status='completed').count()} effects never fired"
            )
        effects_sweep()  # what beat runs every EFFECT_SWEEP_INTERVAL_S
        time.sleep(1.0)

    marks = Counter(
        message.metadata["scheduled_effect"]["id"]
        for message in Message.objects.filter(thread__tenant=tenant)
    )
    assert 0 < fired_before_kill < EFFECTS  # the kill came half way
    assert len(marks) == EFFECTS
    assert set(marks.values()) == {1}  # exactly once each
    assert set(ScheduledEffect.objects.values_list("attempts", flat=True)) == {1}

"""Two beat processes: one leads and sends the duties, the other stands by and sends nothing;
killing the leader makes the standby lead within its lease, and a once-a-minute schedule is
fired once per slot throughout, by whichever leads (config.beat_watch, "Two beats").

The leader's lease is 2 s here (``BEAT_LEADER_LEASE_S``) so the takeover is quick to watch;
the schedule's next slot is moved a few seconds ahead instead of waiting for the minute."""

from __future__ import annotations

import itertools
import subprocess
import sys
import time
from collections.abc import Iterator
from pathlib import Path

import pytest
from django.conf import settings
from pytest_django.fixtures import Settings

from agents.bundles import bundle_import
from common.duties import duty_wake
from config import env
from config.beat_watch import heartbeat_key, leader_key, redis_client, standbys_key
from tests.factories import make_tenant
from tests.reliability.platform import chat_bundle
from tests.support import current_database_url
from tests.worker import Worker, private_queue, worker_start
from threads.models import Message, MessageRole, Schedule
from threads.runtime.schedules import FIRE_SCHEDULES_TASK, schedule_save
from threads.services.threads import thread_create

pytestmark = [pytest.mark.reliability, pytest.mark.django_db(transaction=True)]

LEASE_S = 2.0
SENT = "Scheduler: Sending due task fire-schedules"


class Beat:
    def __init__(self, directory: Path, name: str, queue: str) -> None:
        self.log_path = directory / f"{name}.log"
        overrides = {"DJANGO_SETTINGS_MODULE": "config.settings", "PYTHONUNBUFFERED": "1",
                     "DATABASE_URL": current_database_url(), "CELERY_QUEUE": queue,
                     "BEAT_LEADER_LEASE_S": str(LEASE_S)}  # fmt: skip
        with self.log_path.open("wb") as log:
            self.process = subprocess.Popen(
                [sys.executable, "-m", "celery", "-A", "config", "beat", "--loglevel", "DEBUG",
                 "--schedule", str(directory / f"{name}-schedule")],
                cwd=env.REPO_DIR, env=env.child_environment(overrides), stdout=log,
                stderr=subprocess.STDOUT,
            )  # fmt: skip

    def log(self) -> str:
        return self.log_path.read_text(errors="replace")

    def wait_for(self, text: str, *, within_s: float) -> float:
        started = time.monotonic()
        while text not in self.log():
            assert self.process.poll() is None, self.log()[-3000:]
            assert time.monotonic() - started < within_s, f"no {text!r}:\n{self.log()[-3000:]}"
            time.sleep(0.05)
        return time.monotonic() - started

    def stop(self) -> None:
        if self.process.poll() is None:
            self.process.terminate()
            try:
                self.process.wait(timeout=10)
            except subprocess.TimeoutExpired:
                self.process.kill()


@pytest.fixture
def queue(settings: Settings) -> Iterator[str]:
    name = private_queue()
    settings.CELERY_TASK_DEFAULT_QUEUE = name
    yield name
    redis_client(settings.REDIS_URL).delete(
        heartbeat_key(name), leader_key(name), standbys_key(name), f"platform:beat:{name}:idle"
    )


@pytest.fixture
def worker(queue: str, tmp_path: Path) -> Iterator[Worker]:
    started = worker_start(queue=queue, database_url=current_database_url(),
                           log_path=tmp_path / "worker.log")  # fmt: skip
    try:
        started.wait_ready()
        yield started
    finally:
        started.stop()


def _due_in(schedule: Schedule, seconds: float) -> None:
    """Move the schedule's next slot ``seconds`` ahead (later when that is within 5 s of a
    minute's own slot, so the two stay apart), as a writer would say it (the hint)."""
    at_s = time.time() + seconds
    if not 5 <= at_s % 60 <= 55:
        at_s += 10
    Schedule.objects.filter(pk=schedule.pk).update(next_run_at=int(at_s * 1e6))
    duty_wake(FIRE_SCHEDULES_TASK)


def _wait_runs(schedule: Schedule, runs: int, *, within_s: float) -> None:
    deadline = time.monotonic() + within_s
    while Schedule.objects.get(pk=schedule.pk).runs < runs:
        assert time.monotonic() < deadline, f"the schedule did not run {runs} times"
        time.sleep(0.1)


def test_two_beats_fire_once_and_the_standby_takes_over_when_the_leader_is_killed(
    queue: str, worker: Worker, tmp_path: Path
) -> None:
    tenant = make_tenant("two-beats")
    bundle_import(tenant=tenant, document=chat_bundle([{"respond": {"text": "tick"}}]))
    thread = thread_create(tenant=tenant, agent_name="chat")
    schedule = schedule_save(tenant=tenant, data={
        "name": "every-minute", "thread_id": str(thread.pk), "cron": "* * * * *",
        "input": {"content": "scheduled"},
    })  # fmt: skip
    first = Beat(tmp_path, "beat-a", queue)
    second: Beat | None = None
    try:
        first.wait_for("beat: leading the duties", within_s=60)
        second = Beat(tmp_path, "beat-b", queue)
        second.wait_for("beat: standing by", within_s=60)
        assert f"pid {first.process.pid} on " in second.log()

        _due_in(schedule, 2)
        _wait_runs(schedule, 1, within_s=15)
        time.sleep(2 * LEASE_S)  # the standby keeps trying and keeps standing by
        assert SENT in first.log()
        assert "Sending due task" not in second.log(), "the standby sent a duty"
        assert "beat: leading" not in second.log()

        first.process.kill()
        killed = time.monotonic()
        second.wait_for("beat: leading the duties", within_s=3 * LEASE_S)
        took_over_s = time.monotonic() - killed
        _due_in(schedule, 2)
        _wait_runs(schedule, 2, within_s=15)
        time.sleep(3)  # a second firing of the slot would show by now

        # Each slot once: the two moved ones, and any minute that passed meanwhile (its own
        # slot, at least 5 s from the moved ones); a slot fired twice would be two messages
        # within moments of each other.
        runs = Schedule.objects.get(pk=schedule.pk).runs
        posted = list(
            Message.objects.filter(thread=thread, role=MessageRole.USER, content="scheduled")
            .order_by("created_at").values_list("created_at", flat=True)
        )  # fmt: skip
        assert 2 <= runs <= 3, runs
        assert len(posted) == runs
        gaps_s = [(later - earlier) / 1e6 for earlier, later in itertools.pairwise(posted)]
        assert min(gaps_s) > 1.0, gaps_s
        assert SENT in second.log()
        # The lease lapses LEASE_S after the last renewal, at most a third of it before the kill;
        # the standby tries every third of the lease.
        assert took_over_s <= LEASE_S + LEASE_S / 3 + 1.0, took_over_s
    finally:
        first.stop()
        if second is not None:
            second.stop()
    assert queue == settings.CELERY_TASK_DEFAULT_QUEUE


def test_a_leader_that_stops_cleanly_hands_over_at_once(queue: str, tmp_path: Path) -> None:
    first = Beat(tmp_path, "beat-a", queue)
    second: Beat | None = None
    try:
        first.wait_for("beat: leading the duties", within_s=60)
        second = Beat(tmp_path, "beat-b", queue)
        second.wait_for("beat: standing by", within_s=60)
        first.stop()
        stopped = time.monotonic()
        second.wait_for("beat: leading the duties", within_s=LEASE_S)
        assert time.monotonic() - stopped < LEASE_S / 3 + 0.5
        assert "beat: stopped" in first.log()
    finally:
        first.stop()
        if second is not None:
            second.stop()

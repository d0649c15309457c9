"""Beat's heartbeat (config.beat_watch): beat's scheduler writes it from its loop and logs its
lifecycle at INFO; ``python -m config.beat_watch`` is a liveness probe on it."""

from __future__ import annotations

import json
import logging
import os
import socket
import time
from collections.abc import Iterator
from pathlib import Path
from typing import cast

import pytest
import redis
from django.conf import settings
from pytest_django.fixtures import Settings

from config.beat_watch import (
    HEARTBEAT_EVERY_S,
    STALE_AFTER_S,
    HeartbeatScheduler,
    heartbeat_key,
    heartbeat_problem,
    heartbeat_read,
    heartbeat_write,
    main,
    redis_client,
)
from config.celery import app
from tests.worker import private_queue, queue_delete, tasks_routed_to


@pytest.fixture
def queue(settings: Settings, monkeypatch: pytest.MonkeyPatch) -> Iterator[str]:
    """A broker queue of the test's own, in the settings and the environment."""
    name = private_queue()
    client = redis_client(settings.REDIS_URL)
    settings.CELERY_TASK_DEFAULT_QUEUE = name
    monkeypatch.setenv("CELERY_QUEUE", name)
    yield name
    client.delete(heartbeat_key(name))


def _client() -> redis.Redis:
    return redis_client(settings.REDIS_URL)


def _store(queue: str, *, at: float) -> None:
    """A heartbeat as beat's loop stores it, written ``time.time() - at`` seconds ago."""
    value = {"at": at, "pid": 1, "host": "elsewhere"}
    _client().set(heartbeat_key(queue), json.dumps(value))


def test_a_heartbeat_is_fresh_until_it_is_older_than_the_stale_limit(queue: str) -> None:
    written = heartbeat_write(_client(), queue=queue)
    read = heartbeat_read(_client(), queue=queue)

    assert read == written
    assert (read.pid, read.host) == (os.getpid(), socket.gethostname())
    assert heartbeat_problem(read) is None
    _store(queue, at=time.time() - STALE_AFTER_S - 3)
    assert heartbeat_problem(heartbeat_read(_client(), queue=queue)) == (
        f"no heartbeat for {STALE_AFTER_S + 3:.0f} s (stale after {STALE_AFTER_S:g} s)"
    )
    assert heartbeat_problem(None) == "no heartbeat: beat is not running"


def test_the_probe_exits_1_on_a_stale_or_missing_heartbeat_and_0_on_a_fresh_one(
    queue: str, monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    monkeypatch.setenv("REDIS_URL", settings.REDIS_URL)
    assert main([]) == 1
    assert capsys.readouterr().out == "beat: no heartbeat: beat is not running\n"
    _store(queue, at=time.time() - 20)
    assert main([]) == 1
    assert main(["--stale-after", "30"]) == 0
    heartbeat_write(_client(), queue=queue)
    assert main([]) == 0
    assert capsys.readouterr().out.splitlines()[-1].startswith(f"beat: ok (pid {os.getpid()} on ")


def test_the_probe_does_not_fail_beat_for_an_unreachable_redis(
    monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    """Restarting beat cannot bring Redis back: the probe says so and passes."""
    with socket.socket() as probe:
        probe.bind(("127.0.0.1", 0))
        closed = probe.getsockname()[1]
    monkeypatch.setenv("REDIS_URL", f"redis://127.0.0.1:{closed}/0")
    assert main([]) == 0
    assert "cannot read its heartbeat (ConnectionError" in capsys.readouterr().out


class _SummarizingNow(HeartbeatScheduler):
    summary_every_s = 0.0  # a summary at every turn of the loop


@pytest.mark.django_db
def test_beats_loop_writes_the_heartbeat_and_logs_its_lifecycle_at_info(
    queue: str, tmp_path: Path, caplog: pytest.LogCaptureFixture
) -> None:
    caplog.set_level(logging.INFO, logger="config.beat_watch")
    with tasks_routed_to(queue):
        scheduler = _SummarizingNow(app=app, schedule_filename=str(tmp_path / "schedule"))
        try:
            assert heartbeat_read(_client(), queue=queue) is None
            for _ in range(3):
                scheduler.tick()
            beat = heartbeat_read(_client(), queue=queue)
        finally:
            scheduler.close()
            queue_delete(queue)

    assert beat is not None
    assert beat.pid == os.getpid()
    assert heartbeat_problem(beat) is None
    lines = [record.getMessage() for record in caplog.records if record.levelno == logging.INFO]
    assert lines[0].startswith(f"beat: started (pid {os.getpid()}); duties: ")
    assert "sweep-threads every 2 s" in lines[0]
    assert lines[0].endswith(f"heartbeat every 2 s at platform:beat:{queue}:heartbeat")
    summaries = [line for line in lines if line.startswith("beat: alive; sent in the last ")]
    assert summaries, lines
    assert all(f"{name} " in summaries[0] for name in settings.CELERY_BEAT_SCHEDULE)
    assert lines[-1] == f"beat: stopped (pid {os.getpid()})"


@pytest.mark.django_db
def test_a_heartbeat_redis_refuses_is_logged_once_and_the_schedule_goes_on(
    queue: str, tmp_path: Path, settings: Settings, caplog: pytest.LogCaptureFixture
) -> None:
    broker = redis.Redis.from_url(settings.REDIS_URL)  # the broker stays up
    with socket.socket() as probe:
        probe.bind(("127.0.0.1", 0))
        settings.REDIS_URL = f"redis://127.0.0.1:{probe.getsockname()[1]}/0"
    with tasks_routed_to(queue):
        scheduler = HeartbeatScheduler(app=app, schedule_filename=str(tmp_path / "schedule"))
        try:
            deadline = time.monotonic() + HEARTBEAT_EVERY_S + 0.5  # two heartbeats
            while time.monotonic() < deadline:
                time.sleep(min(scheduler.tick(), 0.2))
            sent = cast(int, broker.llen(queue))
        finally:
            scheduler.close()
            queue_delete(queue)

    warnings = [r.getMessage() for r in caplog.records if r.levelno == logging.WARNING]
    assert len(warnings) == 1, warnings
    assert warnings[0].startswith("beat: cannot write its heartbeat (ConnectionError: ")
    assert sent >= 3, "the due duties were sent all the same"

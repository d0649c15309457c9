"""``/readyz`` reports each dependency and each role: PostgreSQL, Redis, this web process, the
workers alive (their heartbeats: observability.workers), beat (leader and standbys) and the
queue's depth; the console and the admin show the same report.

A real worker writes its heartbeat once ready, removes it when it stops, and one killed is
reported gone within its heartbeat's TTL (well within 30 s)."""

from __future__ import annotations

import time
from collections.abc import Iterator
from pathlib import Path

import pytest
import redis
from django.conf import settings
from django.contrib.auth.models import User
from django.test import Client
from pytest_django.fixtures import Settings

from config.beat_watch import heartbeat_key, heartbeat_write, redis_client, standbys_key
from observability.workers import info_key, worker_beat, workers_alive, workers_key
from tenancy.models import Role
from tests.factories import make_member, make_tenant
from tests.support import closed_port, current_database_url
from tests.worker import private_queue, worker_start

REPORTED_WITHIN_S = 30.0


@pytest.fixture
def queue(settings: Settings) -> Iterator[str]:
    """A queue of the test's own, whose beat has just written its heartbeat."""
    name = private_queue()
    settings.CELERY_TASK_DEFAULT_QUEUE = name
    client = redis_client(settings.REDIS_URL)
    heartbeat_write(client, queue=name)
    yield name
    client.delete(heartbeat_key(name), workers_key(name), info_key(name), name,
                  standbys_key(name))  # fmt: skip


def _worker(queue: str, name: str = "w1@host") -> None:
    worker_beat(redis_client_of(), queue=queue, name=name,
                details={"pid": 4242, "host": "host", "concurrency": 8})  # fmt: skip


def redis_client_of() -> redis.Redis:
    return redis_client(settings.REDIS_URL)


@pytest.mark.django_db
def test_readyz_reports_every_dependency_and_role_with_a_status(client: Client, queue: str) -> None:
    _worker(queue, "w1@host")
    _worker(queue, "w2@host")
    redis_client_of().rpush(queue, b"one", b"two", b"three")

    response = client.get("/readyz")

    assert response.status_code == 200
    body = response.json()
    assert body["status"] == "ok", body
    checks = body["checks"]
    assert list(checks) == ["postgres", "redis", "web", "workers", "beat", "queue"]
    assert {name: check["status"] for name, check in checks.items()} == dict.fromkeys(checks, "ok")
    assert all(check["ok"] is True and check["latency_ms"] >= 0 for check in checks.values())
    assert checks["web"]["pid"] > 0
    assert checks["web"]["host"]
    assert (checks["workers"]["alive"], checks["workers"]["names"]) == (2, ["w1@host", "w2@host"])
    assert checks["beat"]["leader"]["heartbeat_age_s"] < 5
    assert checks["beat"]["standbys"] == 0
    assert checks["queue"] == {"ok": True, "status": "ok", "latency_ms": checks["queue"][
        "latency_ms"], "name": queue, "depth": 3}  # fmt: skip


@pytest.mark.django_db
def test_zero_live_workers_is_degraded_but_200_naming_workers_once_heartbeats_lapse(
    client: Client, queue: str, settings: Settings
) -> None:
    """A turn posted now is accepted and waits in the queue: the web still serves."""
    settings.WORKER_HEARTBEAT_TTL_S = 0.5
    _worker(queue)
    assert client.get("/readyz").json()["checks"]["workers"]["alive"] == 1

    time.sleep(0.6)
    response = client.get("/readyz")

    assert response.status_code == 200
    body = response.json()
    assert (body["status"], body["message"]) == ("degraded", "degraded: workers")
    workers = body["checks"]["workers"]
    assert (workers["ok"], workers["status"], workers["alive"]) == (False, "degraded", 0)
    assert workers["error"] == "no live worker: turns wait in the queue until one starts"
    # The lapsed record is forgotten, not only ignored.
    assert redis_client_of().zcard(workers_key(queue)) == 0
    assert redis_client_of().hlen(info_key(queue)) == 0


@pytest.mark.django_db
def test_a_failing_dependency_marks_its_check_unavailable_and_roles_degraded(
    client: Client, queue: str, settings: Settings
) -> None:
    settings.REDIS_URL = f"redis://127.0.0.1:{closed_port()}/0"

    response = client.get("/readyz")

    assert response.status_code == 503
    checks = response.json()["checks"]
    assert checks["redis"]["status"] == "unavailable"
    assert checks["postgres"]["status"] == "ok"
    assert checks["web"]["status"] == "ok"
    for role in ("workers", "beat", "queue"):
        assert checks[role]["status"] == "degraded", checks[role]
        assert "unreadable" in checks[role]["error"]
    assert response.json()["message"] == "unavailable: redis; degraded: workers, beat, queue"


@pytest.mark.django_db(transaction=True)
def test_a_real_worker_is_counted_and_reported_gone_within_30_s_of_being_killed(
    client: Client, queue: str, tmp_path: Path, settings: Settings
) -> None:
    worker = worker_start(queue=queue, database_url=current_database_url(),
                          log_path=tmp_path / "worker.log",
                          environment={"WORKER_HEARTBEAT_TTL_S": "3"})  # fmt: skip
    try:
        worker.wait_ready()
        deadline = time.monotonic() + 10
        while not (alive := workers_alive(redis_client_of(), queue=queue)):
            assert time.monotonic() < deadline, worker.log()[-3000:]
            time.sleep(0.1)
        assert [live.pid for live in alive] == [worker.pid]
        assert alive[0].name.startswith(f"{queue}-")
        assert alive[0].concurrency == 4
        assert client.get("/readyz").json()["checks"]["workers"]["alive"] == 1

        worker.kill()
        killed = time.monotonic()
        while (body := client.get("/readyz").json())["checks"]["workers"]["ok"]:
            assert time.monotonic() - killed < REPORTED_WITHIN_S, body
            time.sleep(0.25)
        reported_s = time.monotonic() - killed
        assert body["message"].startswith("degraded: workers"), body  # beat's may be stale
        assert (body["status"], body["checks"]["workers"]["alive"]) == ("degraded", 0)
        assert reported_s <= 3 + 1, reported_s  # its last record's TTL, plus a read
    finally:
        worker.stop()


@pytest.mark.django_db(transaction=True)
def test_a_worker_that_stops_cleanly_leaves_at_once(queue: str, tmp_path: Path) -> None:
    worker = worker_start(queue=queue, database_url=current_database_url(),
                          log_path=tmp_path / "worker.log")  # fmt: skip
    try:
        worker.wait_ready()
        deadline = time.monotonic() + 10
        while not workers_alive(redis_client_of(), queue=queue):
            assert time.monotonic() < deadline, worker.log()[-3000:]
            time.sleep(0.1)
    finally:
        worker.stop()
    assert workers_alive(redis_client_of(), queue=queue) == []
    assert "heartbeat every 5 s at platform:workers:" in worker.log()


def _admin_of(role: Role) -> User:
    return make_member(make_tenant(), role=role)


@pytest.mark.django_db
def test_the_console_shows_the_report_to_a_tenant_admin_only(queue: str) -> None:
    _worker(queue, "w1@host")
    admin = Client()
    admin.force_login(_admin_of(Role.ADMIN))
    member = Client()
    member.force_login(_admin_of(Role.MEMBER))

    shown = admin.get("/console/health/")
    refused = member.get("/console/health/")

    assert shown.status_code == 200
    html = shown.content.decode()
    for name in ("postgres", "redis", "web", "workers", "beat", "queue"):
        assert f'data-check="{name}"' in html
    assert "1 alive: w1@host" in html
    assert 'href="/console/health/" aria-current="page">Health</a>' in html
    assert refused.status_code == 403
    assert 'href="/console/health/"' not in member.get("/console/threads/").content.decode()


@pytest.mark.django_db
def test_the_admin_shows_the_report_to_staff_and_links_it(queue: str) -> None:
    staff = User.objects.create_user("ops", password="x", is_staff=True, is_superuser=True)
    client = Client()
    client.force_login(staff)

    shown = client.get("/admin/health/")
    index = client.get("/admin/")

    assert shown.status_code == 200
    assert 'data-check="workers"' in shown.content.decode()
    assert "no live worker" in shown.content.decode()
    assert 'href="/admin/health/"' in index.content.decode()
    anonymous = Client().get("/admin/health/")
    assert anonymous.status_code == 302
    assert "/admin/login/" in anonymous["Location"]

from __future__ import annotations

import json
import socket
import time
from collections.abc import Iterator

import pytest
from django.db import connection
from django.test import Client
from pytest_django.fixtures import Settings

from config.beat_watch import STALE_AFTER_S, heartbeat_key, heartbeat_write, redis_client
from config.health import CHECK_TIMEOUT_S
from observability.workers import info_key, worker_beat, workers_key
from tests.support import closed_port, postgres_unreachable
from tests.worker import private_queue


@pytest.fixture(autouse=True)
def beat(settings: Settings) -> Iterator[str]:
    """A queue of the test's own, whose beat and one worker have just written their
    heartbeats."""
    queue = private_queue()
    settings.CELERY_TASK_DEFAULT_QUEUE = queue
    client = redis_client(settings.REDIS_URL)
    heartbeat_write(client, queue=queue)
    worker_beat(client, queue=queue, name="worker@test", details={"pid": 1})
    yield queue
    client.delete(heartbeat_key(queue), workers_key(queue), info_key(queue))


@pytest.mark.django_db
def test_readyz_is_ok_when_postgres_and_redis_answer_and_beat_beats(client: Client) -> None:
    response = client.get("/readyz")

    assert response.status_code == 200
    assert response["Content-Type"] == "application/json"
    body = response.json()
    assert body["status"] == "ok"
    assert "message" not in body
    assert set(body["checks"]) == {"postgres", "redis", "web", "workers", "beat", "queue"}
    for check in body["checks"].values():
        assert check["ok"] is True
        assert "error" not in check
        assert check["latency_ms"] >= 0


@pytest.mark.django_db
def test_readyz_is_degraded_but_200_naming_beat_when_its_heartbeat_is_stale(
    client: Client, beat: str, settings: Settings
) -> None:
    """The web serves as well as before: a 503 would take it out of the load balancer."""
    stale = {"at": time.time() - STALE_AFTER_S - 5, "pid": 1, "host": "beat-host"}
    redis_client(settings.REDIS_URL).set(heartbeat_key(beat), json.dumps(stale))

    response = client.get("/readyz")

    assert response.status_code == 200
    body = response.json()
    assert (body["status"], body["message"]) == ("degraded", "degraded: beat")
    assert body["checks"]["beat"]["ok"] is False
    assert body["checks"]["beat"]["error"] == (
        f"no heartbeat for {STALE_AFTER_S + 5:.0f} s (stale after {STALE_AFTER_S:g} s)"
    )
    assert body["checks"]["postgres"]["ok"] is True
    assert body["checks"]["redis"]["ok"] is True


@pytest.mark.django_db
def test_readyz_is_degraded_naming_beat_when_no_beat_ever_ran(
    client: Client, beat: str, settings: Settings
) -> None:
    redis_client(settings.REDIS_URL).delete(heartbeat_key(beat))

    body = client.get("/readyz").json()

    assert (body["status"], body["message"]) == ("degraded", "degraded: beat")
    assert body["checks"]["beat"]["error"] == "no heartbeat: beat is not running"


@pytest.mark.django_db
def test_readyz_answers_with_a_trailing_slash(client: Client) -> None:
    assert client.get("/readyz/").status_code == 200


@pytest.mark.django_db
def test_readyz_is_unavailable_naming_redis_when_redis_is_down(
    client: Client, settings: Settings
) -> None:
    settings.REDIS_URL = f"redis://127.0.0.1:{closed_port()}/0"

    response = client.get("/readyz")

    assert response.status_code == 503
    body = response.json()
    assert body["status"] == "unavailable"
    assert body["message"] == "unavailable: redis; degraded: workers, beat, queue"
    assert body["checks"]["postgres"]["ok"] is True
    assert body["checks"]["redis"]["ok"] is False
    assert body["checks"]["redis"]["error"].startswith("ConnectionError: ")


@pytest.mark.django_db(transaction=True)
def test_readyz_is_unavailable_naming_postgres_when_postgres_is_down(client: Client) -> None:
    with postgres_unreachable():
        response = client.get("/readyz")

    assert response.status_code == 503
    body = response.json()
    assert body["status"] == "unavailable"
    assert body["message"] == "unavailable: postgres"
    assert body["checks"]["postgres"]["ok"] is False
    assert body["checks"]["postgres"]["error"].startswith("OperationalError: ")
    assert body["checks"]["redis"]["ok"] is True
    # The connection works again for whoever comes next.
    with connection.cursor() as cursor:
        cursor.execute("SELECT 1")
        assert cursor.fetchone() == (1,)


@pytest.mark.django_db(transaction=True)
def test_readyz_names_both_when_everything_is_down(client: Client, settings: Settings) -> None:
    settings.REDIS_URL = f"redis://127.0.0.1:{closed_port()}/0"

    with postgres_unreachable():
        response = client.get("/readyz")

    assert response.status_code == 503
    assert response.json()["message"] == (
        "unavailable: postgres, redis; degraded: workers, beat, queue"
    )


@pytest.mark.django_db(transaction=True)
def test_readyz_answers_within_its_deadline_when_postgres_hangs(client: Client) -> None:
    # A listener that never accepts: connections sit in the backlog, unanswered.
    with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as blackhole:
        blackhole.bind(("127.0.0.1", 0))
        blackhole.listen(64)
        with postgres_unreachable(port=blackhole.getsockname()[1], pool_timeout=10):
            started = time.monotonic()
            response = client.get("/readyz")
            elapsed = time.monotonic() - started

    assert response.status_code == 503
    assert response.json()["checks"]["postgres"]["error"] == (
        f"no answer within {CHECK_TIMEOUT_S:g}s"
    )
    assert response.json()["checks"]["redis"]["ok"] is True
    assert elapsed < CHECK_TIMEOUT_S + 1.5


@pytest.mark.django_db(transaction=True)
def test_healthz_is_liveness_and_stays_ok_when_dependencies_are_down(
    client: Client, settings: Settings
) -> None:
    """An orchestrator must not restart a process because PostgreSQL or Redis is away (or
    its pool busy): /healthz needs neither; /readyz says what is down."""
    settings.REDIS_URL = f"redis://127.0.0.1:{closed_port()}/0"

    with postgres_unreachable():
        alive = client.get("/healthz")
        ready = client.get("/readyz")

    assert (alive.status_code, alive.json()) == (200, {"status": "ok"})
    assert client.get("/healthz/").status_code == 200
    assert ready.status_code == 503

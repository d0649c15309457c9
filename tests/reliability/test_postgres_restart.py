"""PostgreSQL restarts while flows run: the web server, the worker and beat carry on, a POST
during the outage is a 503 with ``Retry-After`` (or a 202 when it committed), never a 500,
a retry with the same ``Idempotency-Key`` makes no duplicate, and every message posted is
answered once. While PostgreSQL is down, a read is a 503 within about the pool's
``read_timeout`` (1 s), not its full ``timeout`` (10 s), and reads answer again once it is
back.

The platform runs on a PostgreSQL of the test's own (the embedded server ``make test``
starts when ``DATABASE_URL`` is unset), migrated here, which the test stops and starts
again; everything is read back through the API.
"""

from __future__ import annotations

import shutil
import subprocess
import sys
import tempfile
import time
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import pytest

from config import dbroles, env
from config.devservices import EmbeddedPostgres
from tests.reliability.platform import (
    Platform,
    chat_bundle,
    outage_rounds,
    platform_processes,
    private_redis,
    unanswered,
)

pytestmark = pytest.mark.reliability

ROUNDS = 3
THREADS = 4
DOWN_S = 3.0
SETTLE_TIMEOUT_S = 120.0
RETRIES_AFTER_503 = 5
BUNDLE = chat_bundle([{"respond": {"text": "ok: {last_user_message}", "delay_ms": 300}}])
SEED = """
import django; django.setup()
from common.tenant_wall import system_scope
from tests.factories import make_api_key, make_tenant
with system_scope("tests"):
    print(make_api_key(make_tenant("{slug}")).secret)
"""
OUTAGE_READS = 5
READ_503_WITHIN_S = 2.0
RECOVERY_TIMEOUT_S = 60.0


@dataclass
class PrivatePostgres:
    server: EmbeddedPostgres
    port: int = 0

    @property
    def owner_url(self) -> str:
        return self.server.url(self.port)

    @property
    def url(self) -> str:
        """The application's role, beside the server's superuser (config.dbroles)."""
        return dbroles.application_url(self.owner_url)

    def restart(self, *, down_s: float) -> None:
        self.server.stop()
        time.sleep(down_s)
        url = self.server.start(self.port)
        assert url == self.owner_url, f"PostgreSQL came back on {url}, not {self.owner_url}"


@pytest.fixture(scope="module")
def postgres() -> Iterator[PrivatePostgres]:
    # Not under pytest's temporary directory: when the tests run as root, PostgreSQL runs as
    # an unprivileged user, and pytest keeps its directory private to root.
    root = Path(tempfile.mkdtemp(prefix="platform-postgres-"))
    server = EmbeddedPostgres(root)
    url = server.start(0)
    private = PrivatePostgres(server, int(url.rsplit(":", 1)[1].split("/")[0]))
    try:
        dbroles.ensure_application_role(private.owner_url)
        _manage(["migrate", "--noinput"], private)
        yield private
    finally:
        server.stop()
        shutil.rmtree(root, ignore_errors=True)


def _manage(args: list[str], postgres: PrivatePostgres, *, code: str | None = None) -> str:
    command = [sys.executable, "-c", code] if code else [sys.executable, "manage.py", *args]
    done = subprocess.run(
        command, cwd=env.REPO_DIR, capture_output=True, text=True, check=False, timeout=300,
        env=env.child_environment({"DATABASE_URL": postgres.url,
                                   "DATABASE_MIGRATE_URL": postgres.owner_url,
                                   "DJANGO_SETTINGS_MODULE": "config.settings"}),
    )  # fmt: skip
    assert done.returncode == 0, done.stderr[-3000:]
    return done.stdout.strip()


@pytest.fixture(scope="module")
def platform(
    postgres: PrivatePostgres, tmp_path_factory: pytest.TempPathFactory
) -> Iterator[Platform]:
    with (
        private_redis(tmp_path_factory.mktemp("valkey")) as redis_server,
        platform_processes(
            tmp_path_factory.mktemp("processes"), redis_server,
            environment={"DATABASE_URL": postgres.url, "THREAD_SWEEP_INTERVAL_S": "1",
                         "THREAD_SWEEP_GRACE_S": "1"},
        ) as started,
    ):  # fmt: skip
        yield started


def _get(platform: Platform, api_key: str, path: str) -> Any:
    """A read, retried as its 503's Retry-After says: after a restart, a web process may
    still hand out a pooled connection the restart broke (once; it then checks the rest)."""
    for _ in range(RETRIES_AFTER_503):
        status, headers, body = platform.request("GET", path, key=api_key)
        if status != 503:
            break
        assert {name.lower(): value for name, value in headers.items()}["retry-after"] == "5"
        time.sleep(0.2)
    assert status == 200, body
    return body


def test_postgres_restarts_lose_nothing_and_answer_no_500(
    postgres: PrivatePostgres, platform: Platform
) -> None:
    api_key = _manage([], postgres, code=SEED.format(slug="restart"))
    status, _, body = platform.request("POST", "/api/v1/bundles", key=api_key, body=BUNDLE)
    assert status == 200, body
    threads = []
    for _ in range(THREADS):
        status, _, created = platform.request(
            "POST", "/api/v1/threads", key=api_key, body={"agent": "chat"}
        )
        assert status == 201, created
        threads.append(created["id"])
    posts = outage_rounds(
        platform, api_key, threads, rounds=ROUNDS, down_after_s=1.0,
        outage=lambda: postgres.restart(down_s=DOWN_S),
    )  # fmt: skip

    assert any(503 in post.statuses for post in posts), "no POST met the outage"
    deadline = time.monotonic() + SETTLE_TIMEOUT_S
    for thread_id in threads:
        while True:
            turns = _get(platform, api_key, f"/api/v1/threads/{thread_id}/turns?limit=100")
            items = turns["results"]
            if all(turn["status"] in ("completed", "failed", "cancelled") for turn in items):
                break
            assert time.monotonic() < deadline, (items, platform.worker.log()[-4000:])
            time.sleep(0.5)
        assert {turn["status"] for turn in items} == {"completed"}, items
        messages = _get(platform, api_key, f"/api/v1/threads/{thread_id}/messages?limit=500")
        said = messages["results"]
        users = sorted(m["content"] for m in said if m["role"] == "user")
        mine = sorted(post.text for post in posts if post.thread_id == thread_id)
        assert users == mine, "each message once"
        ordered = [(m["role"], m["content"]) for m in sorted(said, key=lambda m: m["seq"])]
        assert unanswered(ordered) == [], f"thread {thread_id}: unanswered"
        incidents = _get(platform, api_key, f"/api/v1/threads/{thread_id}")["incidents"]
        assert {incident["incident"] for incident in incidents} <= {"outage"}, (
            incidents,
            platform.worker.log()[-6000:],
        )
    log = platform.worker.log()
    assert "Unrecoverable error" not in log
    assert "drive cut short by an outage" in log, "no flow met the outage"
    assert "taking over a turn whose worker stopped" not in log  # nobody died


def _timed_request(
    platform: Platform, api_key: str, method: str, path: str, payload: Any = None
) -> tuple[int, float]:
    """``(status, seconds)``; a 503 must carry ``Retry-After`` and the error shape."""
    started = time.monotonic()
    status, headers, body = platform.request(method, path, key=api_key, body=payload)
    elapsed = time.monotonic() - started
    assert status in (200, 503), (status, body)
    if status == 503:
        assert headers["retry-after"] == "5", headers
        assert body["error"]["code"] == "unavailable", body
    return status, elapsed


def test_reads_during_an_outage_answer_503_fast_and_recover(
    postgres: PrivatePostgres, platform: Platform
) -> None:
    api_key = _manage([], postgres, code=SEED.format(slug="reads"))
    assert _timed_request(platform, api_key, "GET", "/api/v1/threads")[0] == 200

    postgres.server.stop()
    try:
        reads = [
            _timed_request(platform, api_key, "GET", "/api/v1/threads") for _ in range(OUTAGE_READS)
        ]
        write = _timed_request(platform, api_key, "POST", "/api/v1/threads", {"agent": "chat"})
    finally:
        postgres.server.start(postgres.port)
    recovered_at = time.monotonic()
    while _timed_request(platform, api_key, "GET", "/api/v1/threads")[0] != 200:
        assert time.monotonic() - recovered_at < RECOVERY_TIMEOUT_S, "reads never recovered"
        time.sleep(0.2)

    print(f"reads during the outage (status, s): {reads}; a write: {write}; reads answered "
          f"{time.monotonic() - recovered_at:.1f} s after PostgreSQL was back")  # fmt: skip
    assert [status for status, _ in reads] == [503] * OUTAGE_READS
    assert max(elapsed for _, elapsed in reads) < READ_503_WITHIN_S, reads
    assert write[0] == 503

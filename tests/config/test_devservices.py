"""config.devservices against real embedded servers in a throwaway var dir.

Each test starts its own PostgreSQL and Valkey under a temporary directory, so
the project's var/ and the servers the test run itself uses are never touched.
"""

from __future__ import annotations

import json
import shutil
import sys
import tempfile
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path

import psycopg
import pytest
import redis

from config import devservices, env


@dataclass(frozen=True)
class Sandbox:
    var: Path
    outer_database_url: str
    outer_redis_url: str
    outer_services_json: str | None

    @property
    def services_file(self) -> Path:
        return self.var / "services.json"

    def recorded(self) -> dict[str, object]:
        loaded: dict[str, object] = json.loads(self.services_file.read_text())
        return loaded


@pytest.fixture
def sandbox(monkeypatch: pytest.MonkeyPatch) -> Iterator[Sandbox]:
    # The servers this test run uses, read before the environment changes.
    outer_database_url, outer_redis_url = env.database_url(), env.redis_url()
    real_services = env.services_file()
    outer_services_json = real_services.read_text() if real_services.exists() else None
    # Short (sockets, pid files) and traversable by the unprivileged postgres user.
    var = Path(tempfile.mkdtemp(prefix="ds", dir="/tmp"))
    var.chmod(0o755)
    monkeypatch.setenv("PLATFORM_VAR_DIR", str(var))
    monkeypatch.delenv("DATABASE_URL", raising=False)
    monkeypatch.delenv("DATABASE_MIGRATE_URL", raising=False)
    monkeypatch.delenv("REDIS_URL", raising=False)
    try:
        yield Sandbox(var, outer_database_url, outer_redis_url, outer_services_json)
    finally:
        # Stop by path, not through the environment, so nothing can leak a server.
        try:
            devservices.EmbeddedPostgres(var / "postgres").stop()
        finally:
            try:
                devservices.EmbeddedValkey(var / "valkey").stop()
            finally:
                shutil.rmtree(var, ignore_errors=True)


def _select_one(url: str) -> object:
    with psycopg.connect(url, connect_timeout=5) as conn:
        row = conn.execute("SELECT 1").fetchone()
    return row[0] if row else None


def _ping(url: str) -> bool:
    client = redis.Redis.from_url(url, socket_timeout=2, socket_connect_timeout=2)
    try:
        return bool(client.ping())
    finally:
        client.close()


def test_up_starts_reuses_and_down_stops_real_servers(sandbox: Sandbox) -> None:
    assert devservices.status() == {"postgres": "stopped", "valkey": "stopped"}

    services = devservices.up()

    assert services.started == ("postgres", "valkey")
    # Migrations as the server's superuser, the tables' owner; the platform as the
    # application's role beside it, which owns nothing (config.dbroles).
    owner = services.database_migrate_url
    assert owner is not None
    assert owner.startswith("postgresql://postgres@127.0.0.1:")
    assert owner.endswith("/platform")
    assert services.database_url.startswith("postgresql://platform_app:")
    assert services.database_url.endswith("/platform")
    assert services.redis_url.startswith("redis://127.0.0.1:")
    # Its own servers, not the ones this test run is using.
    assert services.database_url != sandbox.outer_database_url
    assert services.redis_url != sandbox.outer_redis_url
    assert _select_one(services.database_url) == 1
    assert _select_one(owner) == 1
    assert _ping(services.redis_url) is True
    assert sandbox.recorded() == {
        "database_url": services.database_url,
        "database_migrate_url": owner,
        "redis_url": services.redis_url,
    }
    assert services.environment() == {
        "DATABASE_URL": services.database_url,
        "DATABASE_MIGRATE_URL": owner,
        "REDIS_URL": services.redis_url,
    }
    assert (sandbox.var / "postgres" / "data" / "PG_VERSION").exists()
    # config.env now finds them in development.
    assert env.database_url() == services.database_url
    assert env.database_migrate_url() == owner
    assert env.redis_url() == services.redis_url

    again = devservices.up()

    assert again.started == ()
    assert again.database_url == services.database_url
    assert again.redis_url == services.redis_url
    assert devservices.status() == {"postgres": "running", "valkey": "running"}

    devservices.down()

    assert devservices.status() == {"postgres": "stopped", "valkey": "stopped"}
    assert sandbox.recorded() == {}
    with pytest.raises(psycopg.OperationalError):
        _select_one(services.database_url)
    with pytest.raises(redis.ConnectionError):
        _ping(services.redis_url)
    # The project's own var/ was left alone.
    real_services = env.REPO_DIR / "var" / "services.json"
    assert (real_services.read_text() if real_services.exists() else None) == (
        sandbox.outer_services_json
    )


def test_down_stops_only_the_named_server(sandbox: Sandbox) -> None:
    services = devservices.up()
    assert services.started == ("postgres", "valkey")

    devservices.down(["valkey"])

    assert devservices.status() == {"postgres": "running", "valkey": "stopped"}
    assert sandbox.recorded() == {
        "database_url": services.database_url,
        "database_migrate_url": services.database_migrate_url,
    }
    assert _select_one(services.database_url) == 1

    restarted = devservices.up()

    assert restarted.started == ("valkey",)
    assert restarted.database_url == services.database_url
    assert _ping(restarted.redis_url) is True


def test_up_starts_nothing_when_the_urls_are_configured(
    sandbox: Sandbox, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setenv("DATABASE_URL", sandbox.outer_database_url)
    monkeypatch.setenv("REDIS_URL", sandbox.outer_redis_url)

    services = devservices.up()

    assert services.started == ()
    assert services.database_url == sandbox.outer_database_url
    assert services.redis_url == sandbox.outer_redis_url
    assert devservices.status() == {"postgres": "stopped", "valkey": "stopped"}
    assert not (sandbox.var / "postgres").exists()
    assert not (sandbox.var / "valkey").exists()
    assert sandbox.recorded() == {}


def test_exec_runs_the_command_with_the_urls_and_stops_what_it_started(
    sandbox: Sandbox,
) -> None:
    seen = sandbox.var / "seen.json"
    child = (
        "import json, os, sys; "
        "json.dump({k: os.environ[k] for k in ('DATABASE_URL', 'DATABASE_MIGRATE_URL', "
        "'REDIS_URL')}, "
        "open(sys.argv[1], 'w')); sys.exit(3)"
    )

    returncode = devservices.main(["exec", "--", sys.executable, "-c", child, str(seen)])

    assert returncode == 3
    urls = json.loads(seen.read_text())
    assert urls["DATABASE_URL"].startswith("postgresql://platform_app:")
    assert urls["DATABASE_MIGRATE_URL"].startswith("postgresql://postgres@127.0.0.1:")
    assert urls["REDIS_URL"].startswith("redis://127.0.0.1:")
    assert urls["DATABASE_URL"] != sandbox.outer_database_url
    assert devservices.status() == {"postgres": "stopped", "valkey": "stopped"}
    assert sandbox.recorded() == {}

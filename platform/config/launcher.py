"""``make run``: the whole platform in the foreground, on one machine.

Starts (or reuses) PostgreSQL and Redis, migrates, seeds the demo tenant, then
runs the ASGI server, :data:`WORKERS` Celery workers (threads pool) and celery beat,
restarting any of them that exits and killing a beat whose heartbeat stopped
(:class:`Supervisor`), each writing to ``var/log/<name>.log``. It prints its banner (the URL,
the demo API key, what to try) last, once the web answers ``/readyz`` and the workers and
beat run. Ctrl-C (or SIGTERM) stops the processes, then the embedded servers this run
started.

A worker killed mid-turn leaves its thread locked until the lock expires
(``THREAD_LOCK_TTL_MS``); the sweeper then hands it to a worker. Two workers, so that one is
already up (with one, the takeover also waits for the replacement to boot), and sweeps of
our own across the moments the dead worker's locks expire (:class:`TakeoverSweeps`), so
the takeover does not also wait for beat's next sweep (``THREAD_SWEEP_INTERVAL_S``).
"""

from __future__ import annotations

import contextlib
import json
import shutil
import signal
import socket
import subprocess
import sys
import threading
import time
import urllib.error
import urllib.request
from collections.abc import Callable, Iterator, Mapping, Sequence
from pathlib import Path
from types import FrameType
from typing import Any, Protocol

from kombu.exceptions import OperationalError

from config import devservices, env
from config.beat_watch import BeatWatchdog, redis_client
from config.celery import WORKER_OPTIONS, app

SHUTDOWN_GRACE_S = 10
READY_TIMEOUT_S = 60
WORKERS = 2
CHECK_EVERY_S = 0.2
# A process that exits is started again after these delays: the first when it had been up
# (it said it takes work, or ran STABLE_AFTER_S): a crash, not a crash loop; longer ones for
# each exit in a row that came sooner (the last repeats).
RESTART_BACKOFF_S = (0.5, 2.0, 5.0, 10.0, 30.0)
STABLE_AFTER_S = 15.0
# uvicorn's logging with LOG_FORMAT=json (the formatter and ids filter of LOGGING).
UVICORN_JSON_LOGS = Path(__file__).with_name("uvicorn_logging.json")


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
    # JSON logs: uvicorn's own lines too, from the process that starts the web workers on
    # (each worker's Django setup then routes them through LOGGING).
    logs = ["--log-config", str(UVICORN_JSON_LOGS)] if env.log_format() == "json" else []
    return ["--workers", str(env.web_processes()), "--lifespan", "off",
            "--ws-per-message-deflate", deflate, *logs]  # fmt: skip


def process_commands(
    host: str, port: int, *, workers: int = WORKERS, var_dir: Path | None = None
) -> dict[str, list[str]]:
    """``make run``'s processes: ``web``, ``worker-1`` … ``worker-<workers>`` and ``beat``
    (its schedule in ``var_dir``, by default ``PLATFORM_VAR_DIR``)."""
    python = sys.executable
    var = var_dir or env.var_dir()
    worker = [python, "-m", "celery", "-A", "config", "worker", "--pool", "threads",
              "--concurrency", str(env.celery_concurrency()), "--loglevel", "INFO",
              *WORKER_OPTIONS]  # fmt: skip
    return {
        "web": [python, "-m", "uvicorn", "config.asgi:application", "--host", host,
                "--port", str(port), *web_options()],
        **{f"worker-{n}": [*worker, "--hostname", f"worker-{n}@%h"]
           for n in range(1, workers + 1)},
        # JSON logs: beat's banner (text, printed before its logging starts) is off.
        "beat": [python, "-m", "celery", "-A", "config",
                 *(["--quiet"] if env.log_format() == "json" else []), "beat", "--loglevel", "INFO",
                 "--schedule", str(var / "celerybeat-schedule")],
    }  # fmt: skip


def run_environment(overrides: Mapping[str, str], *, var_dir: Path | None = None) -> dict[str, str]:
    """The environment of ``make run``'s processes: this one's plus ``overrides``.

    A worker boots in about 6 s (8-10 s on a busy host) when Python may not cache bytecode
    (``PYTHONDONTWRITEBYTECODE``, common in containers and CI shells), against under 3 s from
    cached bytecode: the difference is compiling some 5,000 modules at every start. The
    processes then keep their bytecode under ``var/pycache`` (``PYTHONPYCACHEPREFIX``),
    still writing nothing beside the sources: ``migrate`` compiles most of it before they
    start, and every restart reuses it (docs/operations.md has the measurements).
    """
    cache: dict[str, str] = {}
    if sys.flags.dont_write_bytecode:
        prefix = sys.pycache_prefix or str((var_dir or env.var_dir()) / "pycache")
        cache = {"PYTHONDONTWRITEBYTECODE": "", "PYTHONPYCACHEPREFIX": prefix}
    return env.child_environment(
        {"DJANGO_SETTINGS_MODULE": "config.settings", "PYTHONUNBUFFERED": "1", **cache,
         **overrides}
    )  # fmt: skip


def metrics_directory() -> Path:
    """The directory where this run's web, workers and beat keep their Prometheus samples
    (``PROMETHEUS_MULTIPROC_DIR``, by default ``var/metrics``), emptied: samples a previous
    run's processes left would otherwise be counted again (observability.metrics)."""
    directory = Path(env.metrics_settings()["multiproc_dir"] or env.var_dir() / "metrics")
    shutil.rmtree(directory, ignore_errors=True)
    directory.mkdir(parents=True)
    return directory


@contextlib.contextmanager
def background_server(
    overrides: Mapping[str, str] | None = None, *, log_path: Path | None = None
) -> Iterator[tuple[int, int]]:
    """A quiet uvicorn serving the platform on a free loopback port, for benchmarks and
    tests: yields ``(port, pid)`` once the port accepts connections, stops it after. Its
    output goes to ``log_path`` when given (else this process's)."""
    with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as probe:
        probe.bind(("127.0.0.1", 0))
        port: int = probe.getsockname()[1]
    output = log_path.open("ab") if log_path is not None else None
    process = subprocess.Popen(
        [sys.executable, "-m", "uvicorn", "config.asgi:application", "--host", "127.0.0.1",
         "--port", str(port), *web_options(), "--no-access-log", "--log-level", "warning"],
        cwd=env.REPO_DIR,
        env=env.child_environment(
            {"DJANGO_SETTINGS_MODULE": "config.settings", **(overrides or {})}
        ),
        stdout=output, stderr=subprocess.STDOUT if output else None,
    )  # fmt: skip
    if output is not None:
        output.close()  # the server holds its own copy
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


def ready_mark(name: str) -> str | None:
    """What process ``name`` writes to its log once it takes work; None for the web, which
    answers ``/readyz`` instead."""
    if name == "web":
        return None
    return "beat: Starting..." if name == "beat" else " ready."


def _wait_ready(
    base_url: str, processes: dict[str, subprocess.Popen[bytes]], log_dir: Path
) -> None:
    """Until the web answers ``/readyz`` and the workers and beat say they run: the first
    request after the banner finds everything taking work."""
    deadline = time.monotonic() + READY_TIMEOUT_S
    waiting = set(processes)
    while time.monotonic() < deadline:
        for name, process in processes.items():
            if process.poll() is not None:
                raise LaunchError(
                    f"{name} exited with code {process.returncode} while starting; see "
                    f"{log_dir / (name + '.log')}"
                )
        if "web" in waiting and _answers(f"{base_url}readyz"):
            waiting.discard("web")
        for name in waiting - {"web"}:
            log = log_dir / f"{name}.log"
            if log.exists() and str(ready_mark(name)) in log.read_text(errors="replace"):
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


class Watchdog(Protocol):
    """Judges a running process by more than its being alive (beat: its heartbeat)."""

    def problem(self, *, pid: int, started_at: float) -> str | None:
        """Why process ``pid``, started at ``started_at`` (:func:`time.monotonic`), should be
        killed; None while it is well."""


class Supervisor:
    """Keeps named processes running: one that exits is started again after a backoff
    (:data:`RESTART_BACKOFF_S`), the shortest when it had been up (its log shows its
    :func:`ready_mark`, or it ran :data:`STABLE_AFTER_S`) and longer for each exit in a row
    that came sooner; one whose watchdog finds it hung is killed (SIGKILL) and so restarted.
    Each exit, kill and restart is said on stderr. A crashed or hung worker or beat never
    stays down."""

    def __init__(
        self,
        commands: Mapping[str, Sequence[str]],
        environment: Mapping[str, str],
        *,
        backoff_s: Sequence[float] = RESTART_BACKOFF_S,
        stable_after_s: float = STABLE_AFTER_S,
        log_dir: Path | None = None,
        watchdogs: Mapping[str, Watchdog] | None = None,
        on_exit: Callable[[str], None] | None = None,
    ) -> None:
        self.commands = dict(commands)
        self.log_dir = log_dir  # each process writes to <name>.log there (None: inherited)
        self.environment = dict(environment)
        self.backoff_s = tuple(backoff_s)
        self.stable_after_s = stable_after_s
        self.watchdogs = dict(watchdogs or {})
        self.on_exit = on_exit  # called with the name of each process seen to exit
        self.processes: dict[str, subprocess.Popen[bytes]] = {}
        self.restarts: dict[str, int] = dict.fromkeys(self.commands, 0)
        self.kills: dict[str, int] = dict.fromkeys(self.commands, 0)
        self._started_at: dict[str, float] = {}
        self._log_offset: dict[str, int] = {}
        self._failures: dict[str, int] = dict.fromkeys(self.commands, 0)
        self._due: dict[str, float] = {}

    def start(self, name: str) -> None:
        # Own session: a terminal Ctrl-C reaches only us; we stop children in order.
        output: Any = None
        if self.log_dir is not None:
            self.log_dir.mkdir(parents=True, exist_ok=True)
            output = (self.log_dir / f"{name}.log").open("ab")
            self._log_offset[name] = output.tell()
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
        """Kill what its watchdog finds hung, restart what exited once its backoff has
        passed; call it every fraction of a second (:meth:`run` does)."""
        for name, process in self.processes.items():
            if process.poll() is None and not self._hung(name, process):
                continue
            moment = time.monotonic()
            due = self._due.get(name)
            if due is None:
                if self._was_up(name, moment):
                    self._failures[name] = 0
                failures = self._failures[name]
                delay = self.backoff_s[min(failures, len(self.backoff_s) - 1)]
                self._failures[name] = failures + 1
                self._due[name] = moment + delay
                print(f"{name} exited with code {process.returncode}; restarting it in "
                      f"{delay:g} s", file=sys.stderr, flush=True)  # fmt: skip
                if self.on_exit is not None:
                    self.on_exit(name)
            elif moment >= due:
                del self._due[name]
                self.restarts[name] += 1
                self.start(name)
                print(f"{name} restarted", file=sys.stderr, flush=True)

    def _was_up(self, name: str, moment: float) -> bool:
        """Whether ``name``, which exited, had been up: ran :attr:`stable_after_s` or said in
        its log that it takes work."""
        if moment - self._started_at[name] >= self.stable_after_s:
            return True
        mark = ready_mark(name)
        if self.log_dir is None or mark is None:
            return False
        with (self.log_dir / f"{name}.log").open("rb") as log:
            log.seek(self._log_offset[name])
            return mark.encode() in log.read()

    def _hung(self, name: str, process: subprocess.Popen[bytes]) -> bool:
        """Whether ``name``'s watchdog found it hung; if so it is killed (and reaped)."""
        watchdog = self.watchdogs.get(name)
        if watchdog is None:
            return False
        problem = watchdog.problem(pid=process.pid, started_at=self._started_at[name])
        if problem is None:
            return False
        print(f"{name} (pid {process.pid}): {problem}; killing it (SIGKILL)",
              file=sys.stderr, flush=True)  # fmt: skip
        process.kill()
        process.wait()
        self.kills[name] += 1
        return True

    def run(self, stop: threading.Event) -> None:
        """:meth:`check` every :data:`CHECK_EVERY_S` until ``stop`` is set."""
        while not stop.wait(CHECK_EVERY_S):
            self.check()

    def stop(self) -> None:
        _stop(self.processes)


class TakeoverSweeps:
    """Called when a worker exits: sends beat's thread sweep to run across the moments at
    which the locks it held expire, so a standing worker takes its threads over within
    about half a second of that, not up to a sweep interval later.

    A lock expires ``THREAD_LOCK_TTL_MS`` after its last renewal, and renewals come every
    third of that; the worker died before we saw it exit, so its locks expire between two
    thirds of the TTL and the TTL from now. A sweep finding nothing to do costs one query;
    one the broker refuses is said and left to beat's own."""

    STEP_S = 0.5

    def __init__(self, redis_url: str, *, queue: str, lock_ttl_s: float) -> None:
        self.redis_url = redis_url
        self.queue = queue
        self.task: str = app.conf.beat_schedule["sweep-threads"]["task"]
        first, last = lock_ttl_s * 2 / 3, lock_ttl_s + 0.1
        steps = int((last - first) // self.STEP_S) + 1
        self.countdowns_s = [round(first + n * self.STEP_S, 2) for n in range(steps)]
        if self.countdowns_s[-1] < last:
            self.countdowns_s.append(round(last, 2))

    def __call__(self, name: str) -> None:
        if not name.startswith("worker-"):
            return
        try:
            with app.connection_for_write(self.redis_url) as connection:
                for countdown in self.countdowns_s:
                    app.send_task(self.task, countdown=countdown, queue=self.queue,
                                  connection=connection)  # fmt: skip
        except (OperationalError, OSError) as error:
            print(f"{name}: could not send the takeover sweeps ({error}); beat's sweep "
                  "will wake its threads", file=sys.stderr, flush=True)  # fmt: skip


def supervisor_for(
    commands: Mapping[str, Sequence[str]],
    environment: Mapping[str, str],
    *,
    log_dir: Path,
    redis_url: str,
) -> Supervisor:
    """``make run``'s supervisor of ``commands``: beat's watchdog and the takeover sweeps,
    both on ``redis_url``."""
    queue, lock_ttl_s = env.celery_queue(), env.thread_lock_ttl_ms() / 1000
    return Supervisor(
        commands, environment, log_dir=log_dir,
        watchdogs={"beat": BeatWatchdog(redis_client(redis_url), queue=queue)},
        on_exit=TakeoverSweeps(redis_url, queue=queue, lock_ttl_s=lock_ttl_s),
    )  # fmt: skip


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
        metrics = {"PROMETHEUS_MULTIPROC_DIR": str(metrics_directory())}
        environment = run_environment({**services.environment(), **metrics})
        _manage(["migrate", "--noinput"], environment)
        credentials = json.loads(_manage(["seed_demo", "--json"], environment, capture=True))
        credentials["agents"] = _manage(["seed_demo_agents"], environment, capture=True).strip()
        _check_port_free(host, port)
        log_dir = env.var_dir() / "log"
        _logs_rotate(log_dir)
        supervisor = supervisor_for(
            process_commands(host, port), environment, log_dir=log_dir,
            redis_url=services.redis_url,
        )  # fmt: skip
        supervisor.start_all()
        print(f"Starting web, {WORKERS} workers and beat (logs in {log_dir}) …", flush=True)
        _wait_ready(base_url, supervisor.processes, log_dir)
        print(_banner(base_url, credentials, log_dir), flush=True)
        supervisor.run(threading.Event())  # until Ctrl-C
        return 0
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

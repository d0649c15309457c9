"""``make run``: the whole platform in the foreground, on one machine.

Checks the port first (:func:`port_problem`), starts (or reuses) PostgreSQL and Redis, then
one management process (:class:`Preparation`: migrate when needed, seed the demo tenant) and,
once it says the schema is current, beside its seeding, the ASGI server, :data:`WORKERS`
Celery workers (threads pool) and celery beat,
restarting any of them that exits and killing a beat whose heartbeat stopped
(:class:`Supervisor`), each writing to ``var/log/<name>.log``. It prints its banner (the URL,
the demo API key, what to try) last, once the web answers ``/readyz`` and the workers and
beat run. Ctrl-C (or SIGTERM) stops the processes, then the embedded servers this run
started. ``--dev`` (``make dev``): :func:`dev_commands`.

A worker killed mid-turn leaves its thread locked until the lock expires
(``THREAD_LOCK_TTL_MS``); the sweeper then hands it to a worker. Two workers, so that one is
already up (with one, the takeover also waits for the replacement to boot), and sweeps of
our own across the moments the dead worker's locks expire (:class:`TakeoverSweeps`), so
the takeover does not also wait for beat's next sweep (``THREAD_SWEEP_INTERVAL_S``).
"""

from __future__ import annotations

import argparse
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
from collections.abc import Callable, Collection, Iterator, Mapping, Sequence
from pathlib import Path
from types import FrameType
from typing import IO, Any, Protocol

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


# Packages at the repository's root that ``make dev`` does not watch: no process runs them.
NOT_WATCHED = frozenset({"tests", "bench"})
# ``make dev``: after a change the worker starts again this much later than the web, which
# starts in about two seconds; together they would share two cores (config.devreload).
WORKER_RELOAD_DELAY_S = 2.0


class LaunchError(RuntimeError):
    pass


def port_problem(host: str, port: int, *, command: str = "make run") -> str | None:
    """Why ``make run`` cannot serve on ``host:port`` (one line naming the port and how to
    choose another); None when the port is free. Checked before anything else starts."""
    with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as probe:
        probe.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
        try:
            probe.bind((host, port))
        except OSError as error:
            return (
                f"cannot serve on {host}:{port} ({error.strerror}); stop what holds the port "
                f"or choose another: PORT={_other_port(host, port)} {command}"
            )
    return None


def _other_port(host: str, port: int) -> int:
    """A port near ``port`` that is free now, to suggest."""
    for candidate in range(port + 1, min(port + 100, 65536)):
        with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as probe:
            try:
                probe.bind((host, candidate))
            except OSError:
                continue
            return candidate
    return port + 1


def _check_port_free(host: str, port: int) -> None:
    problem = port_problem(host, port)
    if problem is not None:
        raise LaunchError(problem)


class Preparation:
    """``manage.py prepare --json`` running beside the launcher: :meth:`migrated` returns
    once the schema is current (what the processes may start on), :meth:`seeded` the demo
    credentials and the agents line once seeding is done. Its stderr (migrate's progress,
    any error) is the terminal's."""

    def __init__(self, environment: Mapping[str, str]) -> None:
        self.process = subprocess.Popen(
            [sys.executable, str(env.REPO_DIR / "manage.py"), "prepare", "--json"],
            env=dict(environment), stdout=subprocess.PIPE, text=True,
        )  # fmt: skip

    def _next(self) -> dict[str, Any]:
        """Its next event; any other line it prints is passed on."""
        assert self.process.stdout is not None
        for line in self.process.stdout:
            if line.startswith("{"):
                event: dict[str, Any] = json.loads(line)
                return event
            print(line, end="", flush=True)
        code = self.process.wait()
        raise LaunchError(f"manage.py prepare failed (exit code {code}); its error is above")

    def migrated(self) -> list[str]:
        applied: list[str] = self._next()["migrated"]
        return applied

    def seeded(self) -> dict[str, Any]:
        event = self._next()
        self.process.wait()
        return {**event["credentials"], "agents": event["agents"]}

    def stop(self) -> None:
        if self.process.poll() is None:
            self.process.terminate()
            self.process.wait()


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


def source_dirs() -> list[Path]:
    """The project's Python source directories, which ``make dev`` watches: each app at the
    repository's root (a directory with an ``__init__.py``, but not the tests or the
    benchmarks) and ``platform/``."""
    root = env.REPO_DIR
    apps = [path for path in root.iterdir()
            if (path / "__init__.py").is_file() and path.name not in NOT_WATCHED]  # fmt: skip
    return sorted([*apps, root / "platform"])


def dev_commands(
    host: str, port: int, *, bundle: Path | None = None, var_dir: Path | None = None
) -> dict[str, list[str]]:
    """``make dev``'s processes: ``make run``'s with one worker, and one web process; the web
    and the worker under :mod:`config.devreload`, which starts them again when a ``.py`` file
    under :func:`source_dirs` changes (the worker :data:`WORKER_RELOAD_DELAY_S` later); with
    ``bundle``, a ``bundle`` process importing that file into the demo tenant at each change
    (``manage.py dev_bundle``)."""
    python = sys.executable
    reload = [python, "-m", "config.devreload",
              *[arg for path in source_dirs() for arg in ("--watch", str(path))], "--"]  # fmt: skip
    commands = process_commands(host, port, workers=1, var_dir=var_dir)
    web = commands["web"]
    at = web.index("--workers")
    commands["web"] = [*reload, *web[2:at], "--workers", "1", *web[at + 2 :]]
    commands["worker-1"] = [*reload[:-1], "--delay", f"{WORKER_RELOAD_DELAY_S:g}", "--",
                            *commands["worker-1"][2:]]  # after "python -m"  # fmt: skip
    if bundle is not None:
        commands["bundle"] = [python, str(env.REPO_DIR / "manage.py"), "dev_bundle",
                              str(bundle)]  # fmt: skip
    return commands


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
    # Django's system checks run once, in ``manage.py prepare``, not again in each Celery
    # process (they import every view: a second of each one's start).
    return env.child_environment(
        {"DJANGO_SETTINGS_MODULE": "config.settings", "PYTHONUNBUFFERED": "1",
         "CELERY_SKIP_CHECKS": "1", **cache, **overrides}
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
    if name == "bundle":
        return " imported"  # its first import, done or refused ("not imported")
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


def _banner(
    base_url: str,
    credentials: dict[str, str],
    log_dir: Path,
    *,
    dev: bool = False,
    bundle: Path | None = None,
) -> str:
    key = credentials["api_key"]
    reloads = [
        "  Reload:   the web and the worker restart when a .py file of the project changes"
    ] if dev else []  # fmt: skip
    if bundle is not None:
        reloads.append(f"  Bundle:   {bundle} is imported into the demo tenant when it changes")
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
            *reloads,
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
        echo: Collection[str] = (),
    ) -> None:
        self.commands = dict(commands)
        self.echo = frozenset(echo)  # also copied to our stdout, each line after "<name> | "
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
        echoed = output is not None and name in self.echo
        try:
            self.processes[name] = subprocess.Popen(
                self.commands[name], env=self.environment, start_new_session=True,
                stdout=subprocess.PIPE if echoed else output,
                stderr=subprocess.STDOUT if output is not None else None,
            )  # fmt: skip
        finally:
            if output is not None and not echoed:
                output.close()  # the child has its own descriptor
        if echoed:
            copy = threading.Thread(
                target=_echo, args=(name, self.processes[name].stdout, output), daemon=True
            )
            copy.start()
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
    echo: Collection[str] = (),
) -> Supervisor:
    """``make run``'s supervisor of ``commands``: beat's watchdog and the takeover sweeps,
    both on ``redis_url``; the output of those named in ``echo`` also on our stdout."""
    queue, lock_ttl_s = env.celery_queue(), env.thread_lock_ttl_ms() / 1000
    return Supervisor(
        commands, environment, log_dir=log_dir, echo=echo,
        watchdogs={"beat": BeatWatchdog(redis_client(redis_url), queue=queue)},
        on_exit=TakeoverSweeps(redis_url, queue=queue, lock_ttl_s=lock_ttl_s),
    )  # fmt: skip


def _echo(name: str, source: IO[bytes] | None, log: IO[bytes]) -> None:
    """Copy a process's output to its log and, each line after ``<name> | ``, to our stdout,
    until it closes."""
    assert source is not None
    with log, source:
        for line in source:
            log.write(line)
            log.flush()
            sys.stdout.write(f"{name} | {line.decode(errors='replace')}")
            sys.stdout.flush()


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


def _arguments(argv: Sequence[str] | None) -> argparse.Namespace:
    parser = argparse.ArgumentParser(prog="python -m config.launcher", description=__doc__)
    parser.add_argument(
        "--dev", action="store_true", help="reload the web and the worker when a .py file changes"
    )
    parser.add_argument(
        "--bundle", type=Path, metavar="FILE", help="with --dev: import FILE at each change"
    )
    return parser.parse_args(argv)


def main(argv: Sequence[str] | None = None) -> int:
    """Check the port, start (or reuse) the services, then ``manage.py prepare`` and, once
    the schema is current, the processes beside its seeding; the banner once all take work."""
    options = _arguments(argv)
    # Explicit, because a launcher started in the background inherits an ignored SIGINT.
    signal.signal(signal.SIGINT, _interrupt)
    signal.signal(signal.SIGTERM, _interrupt)
    host, port = env.web_bind()
    base_url = f"http://{host}:{port}/"
    bundle = options.bundle.resolve() if options.dev and options.bundle else None
    problem = port_problem(host, port, command="make dev" if options.dev else "make run")
    if problem is None and bundle is not None and not bundle.is_file():
        problem = f"DEV_BUNDLE {bundle} is not a file"
    if problem is not None:
        print(f"error: {problem}", file=sys.stderr, flush=True)
        return 1
    services = devservices.up()
    supervisor: Supervisor | None = None
    preparation: Preparation | None = None
    try:
        metrics = {"PROMETHEUS_MULTIPROC_DIR": str(metrics_directory())}
        environment = run_environment({**services.environment(), **metrics})
        preparation = Preparation(environment)
        log_dir = env.var_dir() / "log"
        _logs_rotate(log_dir)
        commands = (
            dev_commands(host, port, bundle=bundle) if options.dev
            else process_commands(host, port)
        )  # fmt: skip
        supervisor = supervisor_for(
            commands, environment, log_dir=log_dir, redis_url=services.redis_url,
            echo=commands if options.dev else (),
        )  # fmt: skip
        preparation.migrated()  # the processes start on the current schema
        for name in commands:
            if name != "bundle":
                supervisor.start(name)
        workers = sum(name.startswith("worker-") for name in commands)
        print(f"Starting web, {workers} worker{'s' * (workers > 1)} and beat "
              f"(logs in {log_dir}) …", flush=True)  # fmt: skip
        credentials = preparation.seeded()
        if "bundle" in commands:  # into the demo tenant as seeded
            supervisor.start("bundle")
        _wait_ready(base_url, supervisor.processes, log_dir)
        print(_banner(base_url, credentials, log_dir, dev=options.dev, bundle=bundle), flush=True)
        supervisor.run(threading.Event())  # until Ctrl-C
        return 0
    except KeyboardInterrupt:
        print("\nStopping…", flush=True)
        return 0
    except (LaunchError, devservices.ServiceError) as error:
        print(f"error: {error}", file=sys.stderr, flush=True)
        return 1
    finally:
        if preparation is not None:
            preparation.stop()
        if supervisor is not None:
            supervisor.stop()
        if services.started:
            devservices.down(services.started)


if __name__ == "__main__":
    sys.exit(main())

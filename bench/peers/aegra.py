"""The peer: Aegra, the open durable LangGraph-compatible server, driven over its REST API.

Installed once into ``var/peers/aegra`` (a virtualenv of a Python 3.12 found on the machine:
Aegra needs it, this project runs 3.11) and reused after. Started as ``aegra serve`` starts
it in production: ``uvicorn aegra_api.main:app`` with ``AEGRA_CONFIG`` naming
:file:`aegra.json` (which registers the graphs of :mod:`bench.peers.graph`), on a fresh
database of the same PostgreSQL server (migrated first, as Aegra's docs advise for more than
one process) and the same Redis, in each of its two configurations (:data:`MODES`), the
bench taking the stronger of the two for each figure:

* ``aegra-redis``: ``REDIS_BROKER_ENABLED=true``, runs go through Aegra's Redis job queue to
  its in-process workers, with leases and crash recovery, as its docs recommend for
  production;
* ``aegra-local``: its in-process executor (runs are asyncio tasks of the process that took
  the request, no queue, no lease), cheaper per run.

Both run as many uvicorn processes as our web tier has (``WEB_PROCESSES``), and the Redis
mode's concurrency cap (3 workers x 10 jobs per process by default) is raised to
:data:`JOBS_PER_WORKER` jobs per worker so the concurrency scenarios measure the server, not
the cap. Everything else is Aegra's default, except logging: WARNING and no access log, as
for our side. A client follows each run on its event stream (see :class:`AegraClient`).

Aegra accepts ``multitask_strategy`` but runs a thread's runs concurrently whatever it says,
so messages sent back to back on one thread overwrite each other's checkpoints: scenario
(c) reports how many survive.
"""

from __future__ import annotations

import json
import shutil
import subprocess
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path
from typing import Any

from bench.peers import processes
from bench.peers.cpu import Sources, redis_server_pid
from bench.peers.databases import MAINTENANCE_DATABASE, database_name, with_database
from bench.peers.workload import (
    BenchError,
    Json,
    JsonConnection,
    Message,
    Running,
    check_final,
)
from config import env

REQUIREMENT = "aegra-api==0.11.0"
PYTHON = "3.12"
CONFIG = Path(__file__).resolve().parent / "aegra.json"
LOG_LEVEL = "WARNING"
START_TIMEOUT_S = 120.0
ROLES = {"human": "user", "ai": "assistant", "tool": "tool"}
MODES = {"aegra-redis": "true", "aegra-local": "false"}  # system name -> REDIS_BROKER_ENABLED
JOBS_PER_WORKER = 100  # x 3 workers per process: above the largest scenario's 200 runs


def _python_candidates() -> list[Path]:
    """Python 3.12 interpreters on PATH, then pyenv's."""
    found = shutil.which(f"python{PYTHON}")
    pyenv = sorted((Path.home() / ".pyenv" / "versions").glob(f"{PYTHON}.*/bin/python{PYTHON}"))
    return ([Path(found)] if found else []) + pyenv


def _runs(python: Path) -> bool:
    """Whether ``python`` starts and is the version we need (a pyenv shim may not be)."""
    completed = subprocess.run(
        [str(python), "-c", "import sys; print('%d.%d' % sys.version_info[:2])"],
        capture_output=True, text=True, check=False,
    )  # fmt: skip
    return completed.returncode == 0 and completed.stdout.strip() == PYTHON


def find_python() -> Path | None:
    return next((python for python in _python_candidates() if _runs(python)), None)


def install(var_dir: Path) -> Path | None:
    """The peer virtualenv's interpreter, installing ``REQUIREMENT`` the first time. None,
    after saying why on stdout, when there is no Python 3.12 or the install failed."""
    venv = var_dir / "peers" / "aegra"
    marker = venv / ".installed"
    if marker.exists() and marker.read_text() == REQUIREMENT:
        return venv / "bin" / "python"
    python = find_python()
    if python is None:
        print(f"peers: Aegra needs Python {PYTHON}; none was found (python{PYTHON} on PATH, "
              f"~/.pyenv/versions): the peer is skipped, our side runs alone")  # fmt: skip
        return None
    print(f"peers: installing {REQUIREMENT} into {venv} with {python}", flush=True)
    log = var_dir / "peers" / "aegra-install.log"
    if not _installed(python, venv, log):
        print(f"peers: installing {REQUIREMENT} failed (see {log}): the peer is skipped")
        return None
    marker.write_text(REQUIREMENT)
    return venv / "bin" / "python"


def _installed(python: Path, venv: Path, log: Path) -> bool:
    """A fresh virtualenv at ``venv`` with ``REQUIREMENT``; pip's output goes to ``log``."""
    log.parent.mkdir(parents=True, exist_ok=True)
    steps = [
        [str(python), "-m", "venv", "--clear", str(venv)],
        [str(venv / "bin" / "python"), "-m", "pip", "install", "--quiet", REQUIREMENT],
    ]
    with log.open("w") as output:
        for step in steps:
            if subprocess.run(
                step, stdout=output, stderr=subprocess.STDOUT, check=False
            ).returncode:
                return False
    return True


class AegraClient:
    """:class:`bench.peers.workload.Client` over Aegra's Agent Protocol API (no auth).

    A run is followed on its event stream (Server-Sent Events, ``stream_mode`` values):
    Aegra's ``/join`` and ``/runs/wait`` poll the run every 2 s in Redis mode, which would
    measure the poll, not the server."""

    def __init__(self, port: int) -> None:
        self.http = JsonConnection(port, {})

    def start_thread(self, agent: str) -> str:
        return str(self.http.expect(200, "POST", "/threads", {})["thread_id"])

    def run(self, agent: str, text: str) -> None:
        """``POST /runs/stream`` with ``on_completion: keep``: a thread made for the run and
        kept, the run's state after each step, then its end, in one request."""
        events = self._stream("POST", "/runs/stream", {**_run(agent, text),
                                                       "on_completion": "keep"})  # fmt: skip
        _check_ended(events, "a stateless run")
        values = [data for event, data in events if event == "values"]
        check_final([_message(one) for one in values[-1]["messages"]], "a stateless run")

    def submit(self, thread_id: str, agent: str, text: str) -> str:
        path = f"/threads/{thread_id}/runs"
        return str(self.http.expect(200, "POST", path, _run(agent, text))["run_id"])

    def wait(self, thread_id: str, run_id: str) -> None:
        """``GET …/runs/{id}/stream``: the rest of the run's events (only the end when it
        already ended)."""
        _check_ended(self._stream("GET", f"/threads/{thread_id}/runs/{run_id}/stream"), run_id)

    def messages(self, thread_id: str) -> list[Message]:
        state = self.http.expect(200, "GET", f"/threads/{thread_id}/state")
        return [_message(one) for one in state["values"]["messages"]]

    def close(self) -> None:
        self.http.close()

    def _stream(self, method: str, path: str, body: Json | None = None) -> list[Event]:
        status, text = self.http.text(method, path, body)
        if status != 200:
            raise BenchError(f"{method} {path} answered {status}: {text[:300]}")
        return _events(text)


Event = tuple[str, Any]  # (event type, parsed data)


def _run(agent: str, text: str) -> Json:
    return {"assistant_id": agent, "input": {"messages": [{"role": "user", "content": text}]}}


def _events(stream: str) -> list[Event]:
    """The events of a Server-Sent Events body (keep-alive comments left out)."""
    events = []
    for block in stream.replace("\r\n", "\n").split("\n\n"):
        fields = dict(line.split(": ", 1) for line in block.splitlines() if ": " in line)
        if "event" in fields:
            events.append((fields["event"], json.loads(fields.get("data") or "null")))
    return events


def _check_ended(events: list[Event], where: str) -> None:
    if not events or events[-1] != ("end", {"status": "success"}):
        last = str(events[-1])[:200] if events else "none"
        raise BenchError(f"{where}: the stream closed without a successful end; last: {last}")


def _message(stored: dict[str, Any]) -> Message:
    return Message(role=ROLES.get(stored["type"], stored["type"]), content=stored["content"])


def _migrate(python: Path, environment: dict[str, str], log: Path) -> None:
    """Aegra's migrations, once, before its processes start (as its docs advise for more than
    one process: each would otherwise migrate at start-up, racing the others)."""
    upgrade = "from aegra_api.core.migrations import run_migrations; run_migrations()"
    with log.open("wb") as output:
        completed = subprocess.run(
            [str(python), "-c", upgrade], env=environment, stdout=output,
            stderr=subprocess.STDOUT, check=False,
        )  # fmt: skip
    if completed.returncode:
        raise BenchError(f"Aegra's migrations failed:\n{processes.tail(log)}")


@contextmanager
def running(
    *, mode: str, python: Path, database_url: str, redis_url: str, log_dir: Path
) -> Iterator[Running]:
    """Aegra's server in ``mode`` (a key of :data:`MODES`) on ``database_url`` (empty; its
    migrations run first) and ``redis_url``, with ``WEB_PROCESSES`` processes."""
    port = processes.free_port()
    environment = env.child_environment({
        "AEGRA_CONFIG": str(CONFIG), "DATABASE_URL": database_url, "REDIS_URL": redis_url,
        "REDIS_BROKER_ENABLED": MODES[mode], "N_JOBS_PER_WORKER": str(JOBS_PER_WORKER),
        "AUTH_TYPE": "noop", "ENV_MODE": "PRODUCTION", "LOG_LEVEL": LOG_LEVEL,
        "PYTHONUNBUFFERED": "1",
    })  # fmt: skip
    log = log_dir / "aegra.log"
    _migrate(python, environment, log)
    environment["RUN_MIGRATIONS_ON_STARTUP"] = "false"
    with log.open("ab") as output:
        server = subprocess.Popen(
            [str(python), "-m", "uvicorn", "aegra_api.main:app", "--host", "127.0.0.1",
             "--port", str(port), "--workers", str(env.web_processes()), "--no-access-log",
             "--log-level", LOG_LEVEL.lower()],
            cwd=log_dir, env=environment, stdout=output, stderr=subprocess.STDOUT,
        )  # fmt: skip
    try:
        processes.wait_http_ok(port, "/health", server, log, timeout_s=START_TIMEOUT_S)
        sources = Sources(
            processes={"server": server.pid},
            conninfo=with_database(database_url, MAINTENANCE_DATABASE),
            database=database_name(database_url),
            redis_pid=redis_server_pid(redis_url),
        )
        yield Running(mode, lambda: AegraClient(port), sources)
        processes.check_alive(server, "Aegra", log)
    finally:
        processes.stop([server])

"""Start-up and reload: a warm ``make run`` to its banner, and ``make dev``'s reload.

``start``: ``python -m config.launcher`` as ``make run`` runs it, against the configured
PostgreSQL and Redis, timed from its start until it has printed its banner (web, workers and
beat all take work) and ``/healthz`` answers. One run first warms the bytecode cache and
applies any migration; the measured runs are warm: nothing to migrate, the demo seeded.

``reload``: ``make dev`` (``--dev``) with a probe tool module (named in ``PLATFORM_APPS``, in a
directory it watches) and a bundle file (``--bundle``). Each sample edits the tool's
description and times until ``GET /api/v1/registry/tools`` lists the new one, and edits the
bundle's prompt and times until ``GET /api/v1/prompts/<name>`` shows it.

Both run under :data:`VAR` (its logs, bytecode, demo credentials copied from ``var/``) with the
platform's secrets and a queue of their own. Wall time on a shared machine follows its load:
each row notes the load average and the CPU seconds the launch took (all its processes).
"""

from __future__ import annotations

import contextlib
import json
import os
import shutil
import signal
import socket
import statistics
import subprocess
import sys
import threading
import time
import urllib.error
import urllib.request
import uuid
from collections.abc import Callable, Iterator, Sequence
from pathlib import Path
from typing import Any

from bench.harness import Row, benchmark

WARM_RUNS = 3
RELOADS = 3
START_TARGET_S = 15.0
RELOAD_TARGET_S = 5.0
TIMEOUT_S = 180.0
BANNER_END = "Press Ctrl-C to stop."
_TICKS_PER_S = os.sysconf("SC_CLK_TCK")


VAR = "var/bench-start"


def _repo() -> Path:
    from config import env

    return env.REPO_DIR


@benchmark("start")
def start() -> Sequence[Row]:
    samples, cpu = [], []
    for run in range(WARM_RUNS + 1):
        with _launcher([]) as launch:
            if run:  # the first warms up
                samples.append(launch.ready_s)
                cpu.append(launch.cpu_s)
    p50 = statistics.median(samples)
    met = "met" if p50 <= START_TARGET_S else "MISSED"
    return [
        Row(
            benchmark="start",
            case="warm make run: banner printed and /healthz answers",
            samples=len(samples),
            p50_ms=round(p50 * 1000, 1),
            p95_ms=round(max(samples) * 1000, 1),
            p99_ms=round(max(samples) * 1000, 1),
            per_second=0.0,
            target=f"<= {START_TARGET_S:g} s",
            measured=f"{p50:.1f} s ({met}); {statistics.median(cpu):.1f} CPU s",
            notes={
                "samples_s": [round(s, 2) for s in samples],
                "cpu_s": cpu,
                "load_average": round(os.getloadavg()[0], 1),
                "cpus": os.cpu_count(),
            },
        )
    ]


@benchmark("reload")
def reload() -> Sequence[Row]:
    name = f"bench_reload_{uuid.uuid4().hex[:8]}"
    package = _repo() / name
    bundle = _repo() / VAR / f"{name}.yaml"
    package.mkdir()
    try:
        _write_tool(package, "v0")
        bundle.parent.mkdir(parents=True, exist_ok=True)
        _write_bundle(bundle, name, "v0")
        with _launcher(["--dev", "--bundle", str(bundle)], {"PLATFORM_APPS": name}) as launch:
            tools, prompts = [], []
            for n in range(1, RELOADS + 1):
                edited = time.monotonic()
                _write_tool(package, f"v{n}")
                launch.wait_for(_tool_description, name, f"probe {n}")
                tools.append(time.monotonic() - edited)
                edited = time.monotonic()
                _write_bundle(bundle, name, f"v{n}")
                launch.wait_for(_prompt_description, name, f"probe {n}")
                prompts.append(time.monotonic() - edited)
    finally:
        shutil.rmtree(package, ignore_errors=True)
        bundle.unlink(missing_ok=True)
    return [_reload_row("tool edit -> registry lists it", tools),
            _reload_row("bundle edit -> prompt API shows it", prompts)]  # fmt: skip


def _reload_row(case: str, samples: list[float]) -> Row:
    p50 = statistics.median(samples)
    met = "met" if p50 <= RELOAD_TARGET_S else "MISSED"
    return Row(
        benchmark="reload", case=f"make dev: {case}", samples=len(samples),
        p50_ms=round(p50 * 1000, 1), p95_ms=round(max(samples) * 1000, 1),
        p99_ms=round(max(samples) * 1000, 1), per_second=0.0,
        target=f"<= {RELOAD_TARGET_S:g} s", measured=f"{p50:.1f} s ({met})",
        notes={"samples_s": [round(s, 2) for s in samples],
               "load_average": round(os.getloadavg()[0], 1)},
    )  # fmt: skip


def _write_tool(package: Path, version: str) -> None:
    number = version.lstrip("v")
    (package / "__init__.py").write_text(
        "from agents.registry import tool\n\n\n"
        f'@tool(name="{package.name}", description="probe {number}")\n'
        f"def probe(state, args):\n    return {version!r}\n"
    )


def _write_bundle(path: Path, name: str, version: str) -> None:
    document = {"version": 1, "prompts": [{
        "name": name, "tool_description": f"probe {version.lstrip('v')}",
        "prompt": "You are a probe.", "model": "demo_model"}]}  # fmt: skip
    path.write_text(json.dumps(document))


class _Launch:
    def __init__(self, base_url: str, key: str, ready_s: float, cpu_s: float) -> None:
        self.base_url, self.key, self.ready_s, self.cpu_s = base_url, key, ready_s, cpu_s

    def get(self, path: str) -> Any:
        request = urllib.request.Request(  # noqa: S310 - the launch's own loopback URL
            f"{self.base_url}{path}", headers={"Authorization": f"Bearer {self.key}"}
        )
        with urllib.request.urlopen(request, timeout=5) as answer:  # noqa: S310
            return json.loads(answer.read())

    def wait_for(self, read: Callable[[_Launch, str], str | None], name: str, want: str) -> None:
        """Until ``read(self, name)`` answers ``want`` (the web restarting refuses meanwhile)."""
        deadline = time.monotonic() + TIMEOUT_S
        while time.monotonic() < deadline:
            with contextlib.suppress(urllib.error.URLError, ConnectionError, TimeoutError):
                if read(self, name) == want:
                    return
            time.sleep(0.05)
        raise RuntimeError("make dev did not show the edit")


def _tool_description(launch: _Launch, name: str) -> str | None:
    listed = launch.get("api/v1/registry/tools")
    items = listed["results"] if isinstance(listed, dict) else listed
    return next((item.get("description") for item in items if item["name"] == name), None)


def _prompt_description(launch: _Launch, name: str) -> str | None:
    try:
        description: str = launch.get(f"api/v1/prompts/{name}")["tool_description"]
    except urllib.error.HTTPError:
        return None
    return description


@contextlib.contextmanager
def _launcher(arguments: list[str], extra: dict[str, str] | None = None) -> Iterator[_Launch]:
    """``python -m config.launcher <arguments>`` until the block ends, once its banner is out
    and ``/healthz`` answers."""
    from config import env

    var = _repo() / VAR
    var.mkdir(parents=True, exist_ok=True)
    saved = env.var_dir() / "demo.json"  # the same demo credentials as make run's
    if saved.exists() and not (var / "demo.json").exists():
        shutil.copy2(saved, var / "demo.json")
    with socket.socket() as probe:
        probe.bind(("127.0.0.1", 0))
        port = probe.getsockname()[1]
    environment = env.child_environment({
        "PORT": str(port), "HOST": "127.0.0.1", "PLATFORM_VAR_DIR": str(var),
        "SECRET_KEY": env.secret_key(), "PLATFORM_ENCRYPTION_KEYS": ",".join(env.encryption_keys()),
        "CELERY_QUEUE": f"bench-start-{uuid.uuid4().hex[:8]}", **(extra or {}),
    })  # fmt: skip
    if sys.flags.dont_write_bytecode:  # as make run's launcher (Makefile)
        environment.update(PYTHONDONTWRITEBYTECODE="", PYTHONPYCACHEPREFIX=str(var / "pycache"))
    started = time.monotonic()
    process = subprocess.Popen(
        [sys.executable, "-m", "config.launcher", *arguments], cwd=_repo(), env=environment,
        stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True, start_new_session=True,
    )  # fmt: skip
    lines: list[str] = []
    threading.Thread(target=lambda: lines.extend(process.stdout or ()), daemon=True).start()
    try:
        while not any(line.startswith(BANNER_END) for line in list(lines)):
            if process.poll() is not None or time.monotonic() - started > TIMEOUT_S:
                raise RuntimeError("the launcher did not start:\n" + "".join(lines[-40:]))
            time.sleep(0.02)
        base_url = f"http://127.0.0.1:{port}/"
        with urllib.request.urlopen(f"{base_url}healthz", timeout=5) as answer:  # noqa: S310
            assert answer.status == 200
        ready_s = time.monotonic() - started
        key = next(line for line in lines if "API key:" in line).split("API key:")[1].strip()
        yield _Launch(base_url, key, ready_s, _cpu_s(process.pid))
    finally:
        with contextlib.suppress(ProcessLookupError):
            process.send_signal(signal.SIGINT)
        try:
            process.wait(timeout=60)
        except subprocess.TimeoutExpired:
            os.killpg(process.pid, signal.SIGKILL)
            process.wait()


def _cpu_s(root: int) -> float:
    """CPU seconds (user plus system) of ``root``, every live process below it and those they
    reaped."""
    parents, times = {}, {}
    for stat in Path("/proc").glob("[0-9]*/stat"):
        with contextlib.suppress(OSError, ValueError):
            fields = stat.read_text().rsplit(")", 1)[1].split()
            pid = int(stat.parent.name)
            parents[pid] = int(fields[1])
            # Its own time and that of its children it has reaped (the prepare step).
            times[pid] = sum(int(value) for value in fields[11:15]) / _TICKS_PER_S
    total = 0.0
    for pid, cpu in times.items():
        ancestor = pid
        while ancestor > 1 and ancestor != root:
            ancestor = parents.get(ancestor, 0)
        if ancestor == root:
            total += cpu
    return round(total, 1)

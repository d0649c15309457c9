"""``make run``'s start: a taken port stops it at once, before any migration or seeding, with
one line naming the port and how to choose another; ``make dev``'s processes."""

from __future__ import annotations

import socket
import subprocess
import sys
import time
from pathlib import Path

from config import env
from config.launcher import (
    WORKER_RELOAD_DELAY_S,
    dev_commands,
    port_problem,
    process_commands,
    source_dirs,
)

# A database that does not exist: a launcher that got as far as migrating would fail on it.
NO_DATABASE = "postgresql://postgres@127.0.0.1:5432/no_such_database_for_the_port_check"


def test_a_taken_port_stops_the_launcher_before_it_migrates_or_seeds(tmp_path: Path) -> None:
    with socket.socket() as holder:
        holder.bind(("127.0.0.1", 0))
        holder.listen()
        port = holder.getsockname()[1]
        started = time.monotonic()
        run = subprocess.run(
            [sys.executable, "-m", "config.launcher"], cwd=env.REPO_DIR, capture_output=True,
            text=True, timeout=60,
            env=env.child_environment({"PORT": str(port), "HOST": "127.0.0.1",
                                       "DATABASE_URL": NO_DATABASE,
                                       "PLATFORM_VAR_DIR": str(tmp_path / "var")}),
        )  # fmt: skip
        elapsed = time.monotonic() - started

    assert run.returncode == 1
    assert run.stdout == ""
    [line] = run.stderr.splitlines()
    assert line.startswith(f"error: cannot serve on 127.0.0.1:{port} (")
    assert "choose another: PORT=" in line
    assert line.endswith(" make run")
    assert not (tmp_path / "var" / "demo.json").exists()  # no seed ran
    assert not (tmp_path / "var" / "log").exists()  # no process started
    assert elapsed < 30


def test_port_problem_suggests_a_free_port_and_names_the_command() -> None:
    with socket.socket() as holder:
        holder.bind(("127.0.0.1", 0))
        holder.listen()
        port = holder.getsockname()[1]
        problem = port_problem("127.0.0.1", port, command="make dev")

    assert problem is not None
    suggested = int(problem.split("PORT=")[1].split()[0])
    assert suggested != port
    assert problem.endswith(f"PORT={suggested} make dev")
    with socket.socket() as probe:
        probe.bind(("127.0.0.1", suggested))  # it was free
    assert port_problem("127.0.0.1", suggested) is None


def test_make_dev_runs_one_reloaded_web_and_worker_and_the_watched_bundle(tmp_path: Path) -> None:
    bundle = tmp_path / "bundle.yaml"
    commands = dev_commands("127.0.0.1", 8123, bundle=bundle, var_dir=tmp_path)
    watched = [str(path) for path in source_dirs()]
    reload = [sys.executable, "-m", "config.devreload",
              *[arg for path in watched for arg in ("--watch", path)], "--"]  # fmt: skip

    assert set(commands) == {"web", "worker-1", "beat", "bundle"}
    assert commands["web"][: len(reload)] == reload
    assert commands["web"][len(reload) : len(reload) + 2] == ["uvicorn", "config.asgi:application"]
    assert commands["web"][commands["web"].index("--workers") + 1] == "1"
    run = process_commands("127.0.0.1", 8123, workers=1, var_dir=tmp_path)
    # The worker starts again after the web, not beside it.
    delayed = [*reload[:-1], "--delay", f"{WORKER_RELOAD_DELAY_S:g}", "--"]
    assert commands["worker-1"] == [*delayed, *run["worker-1"][2:]]
    assert WORKER_RELOAD_DELAY_S > 0
    assert commands["beat"] == run["beat"]
    assert commands["bundle"][-2:] == ["dev_bundle", str(bundle)]
    assert str(env.REPO_DIR / "platform") in watched
    assert str(env.REPO_DIR / "agents") in watched
    assert str(env.REPO_DIR / "tests") not in watched

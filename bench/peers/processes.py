"""Starting and stopping the servers under test."""

from __future__ import annotations

import http.client
import socket
import subprocess
import time
from collections.abc import Sequence
from pathlib import Path

from bench.peers.workload import BenchError

STOP_GRACE_S = 15.0
LOG_TAIL_CHARS = 3000


def free_port() -> int:
    with socket.socket() as probe:
        probe.bind(("127.0.0.1", 0))
        port: int = probe.getsockname()[1]
        return port


def tail(log: Path) -> str:
    return log.read_text(errors="replace")[-LOG_TAIL_CHARS:] if log.exists() else ""


def check_alive(process: subprocess.Popen[bytes], name: str, log: Path) -> None:
    if process.poll() is not None:
        raise BenchError(f"{name} exited with code {process.returncode}:\n{tail(log)}")


def wait_http_ok(
    port: int, path: str, process: subprocess.Popen[bytes], log: Path, *, timeout_s: float
) -> None:
    """Until ``GET path`` answers 200; BenchError if the process exits or time runs out."""
    deadline = time.monotonic() + timeout_s
    while time.monotonic() < deadline:
        check_alive(process, "the server", log)
        connection = http.client.HTTPConnection("127.0.0.1", port, timeout=2)
        try:
            connection.request("GET", path)
            if connection.getresponse().status == 200:
                return
        except OSError:
            pass
        finally:
            connection.close()
        time.sleep(0.2)
    raise BenchError(f"GET {path} did not answer 200 within {timeout_s:.0f} s:\n{tail(log)}")


def stop(processes: Sequence[subprocess.Popen[bytes]]) -> None:
    """SIGTERM to each, then SIGKILL to any still running after STOP_GRACE_S."""
    for process in processes:
        if process.poll() is None:
            process.terminate()
    deadline = time.monotonic() + STOP_GRACE_S
    for process in processes:
        try:
            process.wait(timeout=max(0.1, deadline - time.monotonic()))
        except subprocess.TimeoutExpired:
            process.kill()
            process.wait()

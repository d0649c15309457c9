"""The runner process: ``python -m sandbox.runner``, one guest execution at a time.

It reads protocol lines on stdin and writes them on stdout (nothing else may write
there: ``sys.stdout`` is pointed at stderr). A reader thread parses every incoming line
so that a ``cancel`` reaches the QuickJS interrupt handler while guest code is running on
the main thread. The process exits as soon as stdin closes, even mid-execution: nobody is
left to read what it would write.

Before anything else the runner confines itself (``sandbox.confine``: no network, death
with its parent, no new privileges, address-space, core, file-size and per-execution CPU
limits) and reports what was applied in its ``ready`` message. The host passes the
settings in argv, since the runner starts with an empty environment and no Django::

    python -m sandbox.runner --parent PID --cpu-seconds 60 --address-space-mb 1024
"""

from __future__ import annotations

import argparse
import json
import os
import queue
import sys
import threading
import time
import traceback
from collections.abc import Sequence
from typing import Any, BinaryIO

from sandbox import protocol
from sandbox.confine import (
    DEFAULT_ADDRESS_SPACE_LIMIT_MB,
    DEFAULT_CPU_LIMIT_SECONDS,
    Confinement,
    confine,
)

MiB = 1024 * 1024


class _Channel:
    def __init__(self, stdin: BinaryIO, stdout: BinaryIO) -> None:
        self.stdin = stdin
        self.stdout = stdout
        self.inbox: queue.Queue[dict[str, Any]] = queue.Queue()
        self.cancelled = threading.Event()
        self.active_id: str | None = None
        self._write_lock = threading.Lock()

    def write(self, message: Any) -> None:
        with self._write_lock:
            self.stdout.write(protocol.dumps(message))
            self.stdout.flush()

    def read_forever(self) -> None:
        try:
            self._read()
        except BaseException:  # without this thread the runner could never hear again
            traceback.print_exc()
            os._exit(70)
        os._exit(0)  # stdin closed: the pool closed or the host died

    def _read(self) -> None:
        for line in self.stdin:
            try:
                message = protocol.loads(line)
            except ValueError:
                continue
            # Set here, in arrival order, so a cancel that follows its execute is never
            # mistaken for a stale one while the main thread is still starting up.
            if message["type"] == "execute":
                self.active_id = str(message.get("id"))
                self.cancelled.clear()
            elif message["type"] == "cancel" and message.get("id") == self.active_id:
                self.cancelled.set()
            self.inbox.put(message)


class _ExecutionLink:
    """The engine's ``Link`` for one execution id."""

    def __init__(self, channel: _Channel, execution_id: str) -> None:
        self.channel = channel
        self.id = execution_id

    def send_tool_call(self, call_id: str, target: str, payload_json: str) -> None:
        self.channel.write(
            {
                "type": "tool_call",
                "id": self.id,
                "callId": call_id,
                "target": target,
                "input": json.loads(payload_json),
            }
        )

    def next_message(self) -> dict[str, Any]:
        while True:
            message = self.channel.inbox.get()
            if message.get("id") != self.id:
                continue  # a late answer for an execution that already finished
            if message["type"] in ("tool_result", "cancel"):
                return message


def serve(stdin: BinaryIO, stdout: BinaryIO, confinement: Confinement | None = None) -> int:
    """Answer protocol messages until stdin closes (the reader thread then ends the
    process)."""
    # Imported here, after ``confine``: importing the quickjs package starts a worker
    # thread, and the kernel grants a new user namespace only to a single-threaded process.
    from sandbox.engine import execute, warm_up

    confinement = confinement or Confinement()
    warm_up()  # compile the prelude and load the parser before saying ready
    channel = _Channel(stdin, stdout)
    threading.Thread(target=channel.read_forever, name="runner-reader", daemon=True).start()
    channel.write({"type": "ready", "pid": os.getpid(), "confinement": confinement.report()})
    while True:
        message = channel.inbox.get()
        if message["type"] != "execute":
            continue  # cancels and results that arrived after their execution ended
        execution_id = str(message["id"])
        channel.write({"type": "started", "id": execution_id})
        # The whole process's CPU time, the clock the CPU budget and RLIMIT_CPU count: the
        # guest runs on this thread and the reader thread parses only this call's messages.
        cpu_started = time.process_time()
        try:
            link = _ExecutionLink(channel, execution_id)
            body = execute(message["payload"], link, channel.cancelled, confinement.arm_cpu())
        except Exception as error:  # a runner bug must not take the process down
            body = {
                "status": "error",
                "error": {"name": "SandboxError", "message": f"sandbox internal error: {error!r}"},
                "logs": [],
                "durationMs": 0.0,
            }
        body["cpuMs"] = round((time.process_time() - cpu_started) * 1000, 3)
        channel.write({"type": "done", "id": execution_id, **body})


def main(argv: Sequence[str] | None = None) -> int:
    arguments = _parse(argv)
    # First, while this process has one thread (a new user namespace needs that).
    confinement = confine(
        parent_pid=arguments.parent,
        address_space_bytes=arguments.address_space_mb * MiB or None,
        cpu_seconds=arguments.cpu_seconds or None,
    )
    stdout = sys.stdout.buffer
    sys.stdout = sys.stderr  # a stray print must not corrupt the protocol stream
    return serve(sys.stdin.buffer, stdout, confinement)


def _parse(argv: Sequence[str] | None) -> argparse.Namespace:
    parser = argparse.ArgumentParser(prog="python -m sandbox.runner")
    parser.add_argument(
        "--parent", type=int, default=os.getppid(), help="the host's pid: die when it dies"
    )
    parser.add_argument(
        "--cpu-seconds", type=float, default=DEFAULT_CPU_LIMIT_SECONDS,
        help="CPU time per execution (0: none)",
    )  # fmt: skip
    parser.add_argument(
        "--address-space-mb", type=int, default=DEFAULT_ADDRESS_SPACE_LIMIT_MB,
        help="RLIMIT_AS of the whole runner in MiB (0: none)",
    )  # fmt: skip
    return parser.parse_args(argv)


if __name__ == "__main__":
    sys.exit(main())

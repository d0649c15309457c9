"""The runner process: ``python -m sandbox.runner``, one guest execution at a time.

It reads protocol lines on stdin and writes them on stdout (nothing else may write
there: ``sys.stdout`` is pointed at stderr). A reader thread parses every incoming line
so that a ``cancel`` reaches the QuickJS interrupt handler while guest code is running on
the main thread. The process exits when stdin closes.
"""

from __future__ import annotations

import json
import os
import queue
import sys
import threading
from typing import Any, BinaryIO

from sandbox import protocol
from sandbox.engine import execute, warm_up


class _Channel:
    def __init__(self, stdin: BinaryIO, stdout: BinaryIO) -> None:
        self.stdin = stdin
        self.stdout = stdout
        self.inbox: queue.Queue[dict[str, Any] | None] = queue.Queue()
        self.cancelled = threading.Event()
        self.active_id: str | None = None
        self._write_lock = threading.Lock()

    def write(self, message: Any) -> None:
        with self._write_lock:
            self.stdout.write(protocol.dumps(message))
            self.stdout.flush()

    def read_forever(self) -> None:
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
        self.inbox.put(None)


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
            if message is None:
                os._exit(0)  # the dispatcher is gone; nobody is waiting for this result
            if message.get("id") != self.id:
                continue  # a late answer for an execution that already finished
            if message["type"] in ("tool_result", "cancel"):
                return message


def serve(stdin: BinaryIO, stdout: BinaryIO) -> int:
    warm_up()  # compile the prelude and load the parser before saying ready
    channel = _Channel(stdin, stdout)
    threading.Thread(target=channel.read_forever, name="runner-reader", daemon=True).start()
    channel.write({"type": "ready", "pid": os.getpid()})
    while True:
        message = channel.inbox.get()
        if message is None:
            return 0
        if message["type"] != "execute":
            continue  # cancels and results that arrived after their execution ended
        execution_id = str(message["id"])
        channel.write({"type": "started", "id": execution_id})
        try:
            body = execute(
                message["payload"], _ExecutionLink(channel, execution_id), channel.cancelled
            )
        except Exception as error:  # a runner bug must not take the process down
            body = {
                "status": "error",
                "error": {"name": "SandboxError", "message": f"sandbox internal error: {error!r}"},
                "logs": [],
                "durationMs": 0.0,
            }
        channel.write({"type": "done", "id": execution_id, **body})


def main() -> int:
    stdout = sys.stdout.buffer
    sys.stdout = sys.stderr  # a stray print must not corrupt the protocol stream
    return serve(sys.stdin.buffer, stdout)


if __name__ == "__main__":
    sys.exit(main())

"""Tenant A's loops for the fairness test, in a process of their own: B's timings in the
test's process then share no interpreter lock with A's loops, only the machine.

Run as ``python -m tests.usage.hammer PORT KEY LOOPS PAUSE_S``; each line on stdin is
``on``, ``off`` or ``stop``. On ``stop`` it prints the answers it got, one JSON document
``[[status, body], ...]``, and exits."""

from __future__ import annotations

import http.client
import json
import sys
import threading
from typing import Any


def main(port: int, key: str, loops: int, pause_s: float) -> None:
    on, stopped = threading.Event(), threading.Event()
    answers: list[tuple[int, Any]] = []

    def loop() -> None:
        server = http.client.HTTPConnection("127.0.0.1", port, timeout=10)
        try:
            while on.wait() and not stopped.is_set():
                server.request("GET", "/api/v1/threads", headers={"Authorization": f"Bearer {key}"})
                response = server.getresponse()
                answers.append((response.status, json.loads(response.read())))
                stopped.wait(pause_s)
        finally:
            server.close()

    threads = [threading.Thread(target=loop) for _ in range(loops)]
    for thread in threads:
        thread.start()
    for line in sys.stdin:
        command = line.strip()
        if command == "on":
            on.set()
        elif command == "off":
            on.clear()
        elif command == "stop":
            break
    stopped.set()
    on.set()
    for thread in threads:
        thread.join()
    print(json.dumps(answers), flush=True)


if __name__ == "__main__":
    main(int(sys.argv[1]), sys.argv[2], int(sys.argv[3]), float(sys.argv[4]))

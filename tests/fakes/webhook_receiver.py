"""A loopback webhook receiver: an HTTP server on 127.0.0.1 that answers each POST from a
script of status codes (then 200) and keeps what came, for the tests of signed webhooks."""

from __future__ import annotations

import contextlib
import time
from collections.abc import Iterator
from dataclasses import dataclass, field
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from typing import Any

from tests.support import ContextThread


@dataclass
class Receiver:
    """What the receiver answers (``script``) and what it received: each request's headers
    (lower-cased names), body and arrival time (``time.monotonic``)."""

    port: int = 0
    script: list[int] = field(default_factory=list)
    received: list[tuple[dict[str, str], str, float]] = field(default_factory=list)

    @property
    def url(self) -> str:
        return f"http://127.0.0.1:{self.port}/hooks"

    @property
    def ids(self) -> list[str]:
        """The ``webhook-id`` of each request received, in order."""
        return [headers["webhook-id"] for headers, _, _ in self.received]


@contextlib.contextmanager
def webhook_receiver() -> Iterator[Receiver]:
    state = Receiver()

    class Handler(BaseHTTPRequestHandler):
        def do_POST(self) -> None:
            body = self.rfile.read(int(self.headers["content-length"])).decode()
            state.received.append(({k.lower(): v for k, v in self.headers.items()}, body,
                                   time.monotonic()))  # fmt: skip
            self.send_response(state.script.pop(0) if state.script else 200)
            self.end_headers()

        def log_message(self, *args: Any) -> None:
            return

    server = ThreadingHTTPServer(("127.0.0.1", 0), Handler)
    state.port = server.server_address[1]
    serving = ContextThread(target=server.serve_forever, daemon=True)
    serving.start()
    try:
        yield state
    finally:
        server.shutdown()
        server.server_close()

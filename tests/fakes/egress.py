"""What the egress tests stand in for: a resolver under the test's control and loopback HTTP
servers that count every connection they accept.

``Resolver`` replaces ``socket.getaddrinfo`` for the names it was given (other names resolve
as usual), answering each name's scripted answers in turn (the last one repeats) and counting
the lookups. ``Listener`` is a loopback server on any 127.0.0.0/8 address (``127.0.0.2`` is
"another host" on the same machine) that answers every request from ``answer`` and counts
connections, so a test can prove a server received **nothing**, not even a TCP handshake.
"""

from __future__ import annotations

import socket
import threading
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from typing import Any, Self

Answer = tuple[int, dict[str, str], bytes]
_REAL_GETADDRINFO = socket.getaddrinfo


@dataclass
class Resolver:
    """A stand-in for DNS: ``answers[name]`` is the list of successive answers for ``name``."""

    answers: dict[str, list[Sequence[str]]] = field(default_factory=dict)
    lookups: list[str] = field(default_factory=list)

    def answer(self, name: str, *answers: Sequence[str]) -> Self:
        self.answers[name] = list(answers)
        return self

    def __call__(self, host: Any, port: Any, *args: Any, **kwargs: Any) -> list[Any]:
        if host not in self.answers:
            return _REAL_GETADDRINFO(host, port, *args, **kwargs)
        self.lookups.append(host)
        queue = self.answers[host]
        addresses = queue.pop(0) if len(queue) > 1 else queue[0]
        number = int(port or 0)
        return [
            (socket.AF_INET6, socket.SOCK_STREAM, 6, "", (address, number, 0, 0))
            if ":" in address
            else (socket.AF_INET, socket.SOCK_STREAM, 6, "", (address, number))
            for address in addresses
        ]


def ok_json(_path: str) -> Answer:
    return 200, {"content-type": "application/json"}, b"{}"


def redirect_to(location: str) -> Callable[[str], Answer]:
    def answer(_path: str) -> Answer:
        return 302, {"location": location}, b""

    return answer


class _Server(ThreadingHTTPServer):
    daemon_threads = True
    owner: Listener

    def get_request(self) -> tuple[socket.socket, Any]:
        accepted = super().get_request()
        with self.owner.lock:
            self.owner.connections += 1
        return accepted


class _Handler(BaseHTTPRequestHandler):
    server: _Server

    def do_POST(self) -> None:
        owner = self.server.owner
        length = int(self.headers.get("content-length", "0"))
        body = self.rfile.read(length) if length else b""
        with owner.lock:
            owner.requests.append(({k.lower(): v for k, v in self.headers.items()}, body))
        status, headers, payload = owner.answer(self.path)
        self.send_response(status)
        for name, value in headers.items():
            self.send_header(name, value)
        self.send_header("content-length", str(len(payload)))
        self.end_headers()
        self.wfile.write(payload)

    def log_message(self, *args: Any) -> None:
        return


class Listener:
    """A loopback HTTP server at ``host:port`` (port 0: any) counting connections and
    requests; use it as a context manager."""

    def __init__(
        self, host: str = "127.0.0.1", port: int = 0, answer: Callable[[str], Answer] = ok_json
    ) -> None:
        self.lock = threading.Lock()
        self.connections = 0
        self.requests: list[tuple[dict[str, str], bytes]] = []
        self.answer = answer
        self._server = _Server((host, port), _Handler)
        self._server.owner = self
        self._thread = threading.Thread(
            target=self._server.serve_forever, kwargs={"poll_interval": 0.01}, daemon=True
        )

    @property
    def port(self) -> int:
        return int(self._server.server_address[1])

    def __enter__(self) -> Self:
        self._thread.start()
        return self

    def __exit__(self, *exc_info: object) -> None:
        self._server.shutdown()
        self._server.server_close()
        self._thread.join(timeout=5)

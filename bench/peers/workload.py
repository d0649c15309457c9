"""The workload both systems run, and the client contract each system implements.

One run: start a conversation with a user message and wait for the final answer, in each
system's most direct way (one request where the system has one). The model
(deterministic, no latency unless asked) answers the message with a ``count_words`` tool
call, the tool runs, the model answers the result in words: 2 model calls, 1 tool, 4
messages (user, assistant, tool, assistant). Agent ``instant`` has a zero-latency model,
``slow`` a model that takes 1 s per call (2 s per run, the ideal for the concurrency
scenarios).
"""

from __future__ import annotations

import http.client
import json
from collections.abc import Callable, Mapping
from dataclasses import dataclass
from typing import Any, Protocol

from bench.peers.cpu import Sources

INSTANT = "instant"
SLOW = "slow"
SLOW_MODEL_S = 1.0
TEXT = "count these four words"
FINAL_ANSWER = "That is 4 words."  # every text sent has four words
RUN_ROLES = ("user", "assistant", "tool", "assistant")
HTTP_TIMEOUT_S = 600.0

Json = dict[str, Any]


class BenchError(RuntimeError):
    pass


def numbered_text(number: int) -> str:
    """A four-word message that says which it is, for the back-to-back scenario."""
    return f"count words, message {number}"


@dataclass(frozen=True)
class Message:
    role: str  # user, assistant or tool (the peer's human and ai are mapped to these)
    content: str


class Client(Protocol):
    """One caller of a system, on one keep-alive connection; not shared between threads."""

    def start_thread(self, agent: str) -> str:
        """A new thread running ``agent``; returns its id."""

    def run(self, agent: str, text: str) -> None:
        """Start a conversation with ``agent`` on a user message and follow its run to the
        end, the system's most direct way (one request where it has one); BenchError unless
        the run ended with the final answer. The conversation is kept, as a thread."""

    def submit(self, thread_id: str, agent: str, text: str) -> str:
        """Submit a user message without waiting; returns the id of the run that answers."""

    def wait(self, thread_id: str, run_id: str) -> None:
        """Until a submitted run ended; BenchError unless it ended well."""

    def messages(self, thread_id: str) -> list[Message]:
        """The thread's messages, oldest first."""

    def close(self) -> None: ...


@dataclass(frozen=True)
class Running:
    """A system that is up: how to make clients, and what its CPU is measured on."""

    name: str
    client: Callable[[], Client]
    sources: Sources


class JsonConnection:
    """JSON requests on one keep-alive HTTP connection to 127.0.0.1:``port``."""

    def __init__(self, port: int, headers: Mapping[str, str]) -> None:
        self._connection = http.client.HTTPConnection("127.0.0.1", port, timeout=HTTP_TIMEOUT_S)
        self._headers = {"Content-Type": "application/json", **headers}

    def text(self, method: str, path: str, body: Json | None = None) -> tuple[int, str]:
        """``(status, body)`` of one request, the whole body read. A kept-alive connection
        the server closed meanwhile is opened again and the request sent once more, as
        HTTP clients do: only when sending it failed, so the server never read it (a
        connection lost while waiting for the answer is an error: the run may have
        started)."""
        payload = None if body is None else json.dumps(body)
        try:
            self._connection.request(method, path, body=payload, headers=self._headers)
        except (BrokenPipeError, ConnectionResetError):
            self._connection.close()
            self._connection.request(method, path, body=payload, headers=self._headers)
        response = self._connection.getresponse()
        return response.status, response.read().decode()

    def request(self, method: str, path: str, body: Json | None = None) -> tuple[int, Any]:
        """``(status, parsed JSON body)``; None for an empty body."""
        status, text = self.text(method, path, body)
        return status, json.loads(text) if text.strip() else None

    def expect(self, status: int, method: str, path: str, body: Json | None = None) -> Any:
        """The parsed body; BenchError naming the call when the status differs."""
        answered, parsed = self.request(method, path, body)
        if answered != status:
            raise BenchError(f"{method} {path} answered {answered}, not {status}: {parsed}")
        return parsed

    def close(self) -> None:
        self._connection.close()


def check_final(messages: list[Message], where: str) -> None:
    """BenchError unless the last message is the model's final answer."""
    last = messages[-1] if messages else None
    if last is None or last.role != "assistant" or last.content != FINAL_ANSWER:
        raise BenchError(f"{where}: the run did not end with the final answer: {last}")

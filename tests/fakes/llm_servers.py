"""Loopback LLM servers speaking the OpenAI Chat Completions and Anthropic Messages wire formats.

The official SDKs send through ``httpx2``, which respx does not patch, so tests run a real HTTP
server on 127.0.0.1 (port 0, TCP_NODELAY) and point the SDK at it with ``base_url``. Because it
is a real socket, the same server also serves SDK calls made from Celery workers, Channels
consumers or subprocesses.

Each server answers from a FIFO queue of scripted replies and records every request::

    with FakeOpenAIServer() as server:                      # or FakeAnthropicServer()
        server.enqueue(
            Reply(text="Hello there"),                      # JSON, or SSE when "stream": true
            Reply(tool_calls=(ToolCallReply("search", {"q": "tea"}),)),
            ErrorReply(503, "overloaded"),                  # HTTP error with a JSON error body
            Reply(text="partial", disconnect_after=2),      # drop the connection mid-stream
            Reply(text="slow", delay_s=5.0),                # wait before the first byte
        )
        spec = ModelSpec(name="m", kind="openai", model_id="gpt-test",
                         base_url=server.base_url, api_key="test-key")
        ...
        assert server.requests[0].body["messages"][0]["role"] == "system"

``Reply`` answers JSON for a plain request and Server-Sent Events when the request body has
``"stream": true`` (OpenAI: ``data:`` chunks with tool call fragments, a usage chunk and
``data: [DONE]``; Anthropic: ``message_start``, ``content_block_*`` with ``text_delta``,
``thinking_delta`` and ``input_json_delta``, ``message_delta``, ``message_stop``). When the
queue is empty the server answers HTTP 400 "no reply queued" so a test fails fast (400 is never
retried). Closing the server wakes delayed replies and drops open connections.
"""

from __future__ import annotations

import contextlib
import json
import socket
import threading
from collections import deque
from collections.abc import Iterator, Mapping
from dataclasses import dataclass, field
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from typing import Any, ClassVar, Self


@dataclass(frozen=True)
class ToolCallReply:
    """A tool call in a reply; ``arguments`` may be raw text (to send malformed JSON)."""

    name: str
    arguments: Mapping[str, Any] | str = field(default_factory=dict)
    id: str | None = None

    def arguments_json(self) -> str:
        if isinstance(self.arguments, str):
            return self.arguments
        return json.dumps(self.arguments)


@dataclass(frozen=True)
class Reply:
    """A successful answer.

    ``finish_reason`` is the wire value (default: ``stop``/``tool_calls`` for OpenAI,
    ``end_turn``/``tool_use`` for Anthropic). Streams cut text, reasoning and tool arguments
    into ``chunk_size``-character fragments. ``delay_s`` waits before the first byte;
    ``disconnect_after`` drops the connection after that many SSE events (0: before any byte,
    which also applies to JSON answers).
    """

    text: str = ""
    reasoning: str = ""
    tool_calls: tuple[ToolCallReply, ...] = ()
    finish_reason: str | None = None
    prompt_tokens: int = 11
    completion_tokens: int = 7
    cached_tokens: int = 0
    reasoning_tokens: int = 0
    chunk_size: int = 4
    delay_s: float = 0.0
    disconnect_after: int | None = None


@dataclass(frozen=True)
class ErrorReply:
    """An HTTP error with the provider's JSON error body."""

    status: int
    message: str = "scripted failure"
    error_type: str = "api_error"
    delay_s: float = 0.0
    code: str | None = None  # OpenAI's error code (``context_length_exceeded``)


@dataclass(frozen=True)
class RecordedRequest:
    path: str
    headers: dict[str, str]
    body: dict[str, Any]


class _HTTPServer(ThreadingHTTPServer):
    daemon_threads = True
    owner: FakeLLMServer

    def handle_error(self, request: Any, client_address: Any) -> None:
        """A client that went away (an abort, a closed stream) is expected here."""


class _Handler(BaseHTTPRequestHandler):
    protocol_version = "HTTP/1.1"
    disable_nagle_algorithm = True
    timeout = 30
    server: _HTTPServer

    def setup(self) -> None:
        super().setup()
        self.server.owner._track(self.connection)

    def finish(self) -> None:
        with contextlib.suppress(OSError):
            super().finish()
        self.server.owner._untrack(self.connection)

    def log_message(self, format: str, *args: Any) -> None:
        """Silent: tests assert on ``requests``, not on logs."""

    def do_POST(self) -> None:
        owner = self.server.owner
        length = int(self.headers.get("Content-Length", "0"))
        raw = self.rfile.read(length) if length else b"{}"
        body = json.loads(raw or b"{}")
        headers = {key.lower(): value for key, value in self.headers.items()}
        owner._record(RecordedRequest(path=self.path, headers=headers, body=body))
        if self.path.rstrip("/") != owner.path:
            self._json(404, owner.error_body(ErrorReply(404, f"no route {self.path}")))
            return
        reply = owner._next_reply()
        if reply.delay_s and owner._closing.wait(reply.delay_s):
            self._drop()
            return
        if isinstance(reply, ErrorReply):
            self._json(reply.status, owner.error_body(reply))
        elif reply.disconnect_after == 0:
            self._drop()
        elif body.get("stream"):
            self._events(owner.stream_events(reply, body), reply.disconnect_after)
        else:
            self._json(200, owner.response_body(reply, body))

    def _json(self, status: int, payload: dict[str, Any]) -> None:
        data = json.dumps(payload).encode()
        self.send_response(status)
        self.send_header("Content-Type", "application/json")
        self.send_header("Content-Length", str(len(data)))
        self.end_headers()
        self.wfile.write(data)
        self.wfile.flush()

    def _events(self, events: list[bytes], disconnect_after: int | None) -> None:
        self.send_response(200)
        self.send_header("Content-Type", "text/event-stream")
        self.send_header("Cache-Control", "no-cache")
        self.send_header("Transfer-Encoding", "chunked")
        self.end_headers()
        for index, event in enumerate(events):
            if disconnect_after is not None and index >= disconnect_after:
                self._drop()
                return
            self.wfile.write(b"%x\r\n%s\r\n" % (len(event), event))
            self.wfile.flush()
        self.wfile.write(b"0\r\n\r\n")
        self.wfile.flush()

    def _drop(self) -> None:
        self.close_connection = True
        with contextlib.suppress(OSError):
            self.wfile.flush()
            self.connection.shutdown(socket.SHUT_RDWR)


class FakeLLMServer:
    """The queue, the recording and the socket; subclasses render one wire format."""

    path: ClassVar[str]
    prefix: ClassVar[str]

    def __init__(self) -> None:
        self.requests: list[RecordedRequest] = []
        self._replies: deque[Reply | ErrorReply] = deque()
        self._lock = threading.Lock()
        self._closing = threading.Event()
        self._connections: set[socket.socket] = set()
        self._httpd = _HTTPServer(("127.0.0.1", 0), _Handler)
        self._httpd.owner = self
        self._thread = threading.Thread(
            target=self._httpd.serve_forever, kwargs={"poll_interval": 0.01}, daemon=True
        )

    # Lifecycle ---------------------------------------------------------------------------------

    def start(self) -> Self:
        self._thread.start()
        return self

    def close(self) -> None:
        self._closing.set()
        self._httpd.shutdown()
        self._httpd.server_close()
        with self._lock:
            connections = list(self._connections)
        for connection in connections:
            with contextlib.suppress(OSError):
                connection.shutdown(socket.SHUT_RDWR)
        self._thread.join(timeout=5)

    def __enter__(self) -> Self:
        return self.start()

    def __exit__(self, *exc_info: object) -> None:
        self.close()

    # Scripting and inspection ------------------------------------------------------------------

    @property
    def port(self) -> int:
        return int(self._httpd.server_address[1])

    @property
    def base_url(self) -> str:
        """What to give the SDK (and ``ModelSpec.base_url``)."""
        return f"http://127.0.0.1:{self.port}{self.prefix}"

    def enqueue(self, *replies: Reply | ErrorReply) -> Self:
        with self._lock:
            self._replies.extend(replies)
        return self

    @property
    def pending(self) -> int:
        """Replies not yet used."""
        with self._lock:
            return len(self._replies)

    @property
    def last_body(self) -> dict[str, Any]:
        return self.requests[-1].body

    def _next_reply(self) -> Reply | ErrorReply:
        with self._lock:
            if self._replies:
                return self._replies.popleft()
        return ErrorReply(400, "fake server: no reply queued for this request")

    def _record(self, request: RecordedRequest) -> None:
        with self._lock:
            self.requests.append(request)

    def _track(self, connection: socket.socket) -> None:
        with self._lock:
            self._connections.add(connection)

    def _untrack(self, connection: socket.socket) -> None:
        with self._lock:
            self._connections.discard(connection)

    # Wire format (subclasses) ------------------------------------------------------------------

    def response_body(self, reply: Reply, request: Mapping[str, Any]) -> dict[str, Any]:
        raise NotImplementedError

    def stream_events(self, reply: Reply, request: Mapping[str, Any]) -> list[bytes]:
        raise NotImplementedError

    def error_body(self, reply: ErrorReply) -> dict[str, Any]:
        raise NotImplementedError


def _pieces(text: str, size: int) -> list[str]:
    return [text[start : start + size] for start in range(0, len(text), max(size, 1))]


class FakeOpenAIServer(FakeLLMServer):
    """``POST /v1/chat/completions``; ``base_url`` ends in ``/v1`` as the SDK expects."""

    path = "/v1/chat/completions"
    prefix = "/v1"

    def response_body(self, reply: Reply, request: Mapping[str, Any]) -> dict[str, Any]:
        message: dict[str, Any] = {"role": "assistant", "content": reply.text or None}
        if reply.reasoning:
            message["reasoning_content"] = reply.reasoning
        if reply.tool_calls:
            message["tool_calls"] = [
                {
                    "id": call.id or f"call_fake_{index}",
                    "type": "function",
                    "function": {"name": call.name, "arguments": call.arguments_json()},
                }
                for index, call in enumerate(reply.tool_calls)
            ]
        return {
            "id": "chatcmpl-fake",
            "object": "chat.completion",
            "created": 0,
            "model": request.get("model", "fake"),
            "choices": [
                {
                    "index": 0,
                    "message": message,
                    "finish_reason": self._finish(reply),
                    "logprobs": None,
                }
            ],
            "usage": self._usage(reply),
        }

    def stream_events(self, reply: Reply, request: Mapping[str, Any]) -> list[bytes]:
        model = request.get("model", "fake")

        def chunk(delta: dict[str, Any], finish: str | None = None) -> dict[str, Any]:
            return {
                "id": "chatcmpl-fake",
                "object": "chat.completion.chunk",
                "created": 0,
                "model": model,
                "choices": [{"index": 0, "delta": delta, "finish_reason": finish}],
            }

        chunks = [chunk({"role": "assistant", "content": ""})]
        size = reply.chunk_size
        chunks += [chunk({"reasoning_content": p}) for p in _pieces(reply.reasoning, size)]
        chunks += [chunk({"content": p}) for p in _pieces(reply.text, size)]
        for index, call in enumerate(reply.tool_calls):
            opening = {
                "index": index,
                "id": call.id or f"call_fake_{index}",
                "type": "function",
                "function": {"name": call.name, "arguments": ""},
            }
            chunks.append(chunk({"tool_calls": [opening]}))
            chunks += [
                chunk({"tool_calls": [{"index": index, "function": {"arguments": piece}}]})
                for piece in _pieces(call.arguments_json(), size)
            ]
        chunks.append(chunk({}, self._finish(reply)))
        if (request.get("stream_options") or {}).get("include_usage"):
            usage_chunk = chunk({})
            usage_chunk["choices"] = []
            usage_chunk["usage"] = self._usage(reply)
            chunks.append(usage_chunk)
        events = [b"data: " + json.dumps(item).encode() + b"\n\n" for item in chunks]
        return [*events, b"data: [DONE]\n\n"]

    def error_body(self, reply: ErrorReply) -> dict[str, Any]:
        return {
            "error": {
                "message": reply.message,
                "type": reply.error_type,
                "param": None,
                "code": reply.code,
            }
        }

    @staticmethod
    def _finish(reply: Reply) -> str:
        return reply.finish_reason or ("tool_calls" if reply.tool_calls else "stop")

    @staticmethod
    def _usage(reply: Reply) -> dict[str, Any]:
        return {
            "prompt_tokens": reply.prompt_tokens,
            "completion_tokens": reply.completion_tokens,
            "total_tokens": reply.prompt_tokens + reply.completion_tokens,
            "prompt_tokens_details": {"cached_tokens": reply.cached_tokens},
            "completion_tokens_details": {"reasoning_tokens": reply.reasoning_tokens},
        }


class FakeAnthropicServer(FakeLLMServer):
    """``POST /v1/messages``; ``base_url`` is the bare origin as the SDK expects."""

    path = "/v1/messages"
    prefix = ""

    def response_body(self, reply: Reply, request: Mapping[str, Any]) -> dict[str, Any]:
        content: list[dict[str, Any]] = []
        if reply.reasoning:
            content.append({"type": "thinking", "thinking": reply.reasoning, "signature": "sig"})
        if reply.text:
            content.append({"type": "text", "text": reply.text})
        content += [
            {
                "type": "tool_use",
                "id": call.id or f"toolu_fake_{index}",
                "name": call.name,
                "input": json.loads(call.arguments_json()),
            }
            for index, call in enumerate(reply.tool_calls)
        ]
        return {
            **self._message(reply, request),
            "content": content,
            "stop_reason": self._stop(reply),
            "usage": self._usage(reply, output_tokens=reply.completion_tokens),
        }

    def stream_events(self, reply: Reply, request: Mapping[str, Any]) -> list[bytes]:
        size = reply.chunk_size
        start = {**self._message(reply, request), "content": [], "stop_reason": None}
        start["usage"] = self._usage(reply, output_tokens=1)
        events: list[dict[str, Any]] = [{"type": "message_start", "message": start}]
        index = 0
        if reply.reasoning:
            events.append(self._block_start(index, {"type": "thinking", "thinking": ""}))
            events += [
                self._delta(index, {"type": "thinking_delta", "thinking": piece})
                for piece in _pieces(reply.reasoning, size)
            ]
            events.append(self._delta(index, {"type": "signature_delta", "signature": "sig"}))
            events.append({"type": "content_block_stop", "index": index})
            index += 1
        if reply.text:
            events.append(self._block_start(index, {"type": "text", "text": ""}))
            events += [
                self._delta(index, {"type": "text_delta", "text": piece})
                for piece in _pieces(reply.text, size)
            ]
            events.append({"type": "content_block_stop", "index": index})
            index += 1
        for number, call in enumerate(reply.tool_calls):
            block = {
                "type": "tool_use",
                "id": call.id or f"toolu_fake_{number}",
                "name": call.name,
                "input": {},
            }
            events.append(self._block_start(index, block))
            events += [
                self._delta(index, {"type": "input_json_delta", "partial_json": piece})
                for piece in _pieces(call.arguments_json(), size)
            ]
            events.append({"type": "content_block_stop", "index": index})
            index += 1
        events.append(
            {
                "type": "message_delta",
                "delta": {"stop_reason": self._stop(reply), "stop_sequence": None},
                "usage": self._usage(reply, output_tokens=reply.completion_tokens),
            }
        )
        events.append({"type": "message_stop"})
        return [
            f"event: {event['type']}\ndata: {json.dumps(event)}\n\n".encode() for event in events
        ]

    def error_body(self, reply: ErrorReply) -> dict[str, Any]:
        return {"type": "error", "error": {"type": reply.error_type, "message": reply.message}}

    @staticmethod
    def _message(reply: Reply, request: Mapping[str, Any]) -> dict[str, Any]:
        return {
            "id": "msg_fake",
            "type": "message",
            "role": "assistant",
            "model": request.get("model", "fake"),
            "stop_sequence": None,
        }

    @staticmethod
    def _block_start(index: int, block: dict[str, Any]) -> dict[str, Any]:
        return {"type": "content_block_start", "index": index, "content_block": block}

    @staticmethod
    def _delta(index: int, delta: dict[str, Any]) -> dict[str, Any]:
        return {"type": "content_block_delta", "index": index, "delta": delta}

    @staticmethod
    def _stop(reply: Reply) -> str:
        return reply.finish_reason or ("tool_use" if reply.tool_calls else "end_turn")

    @staticmethod
    def _usage(reply: Reply, *, output_tokens: int) -> dict[str, Any]:
        """Anthropic's ``input_tokens`` excludes cache reads, which are reported apart."""
        usage: dict[str, Any] = {
            "input_tokens": reply.prompt_tokens - reply.cached_tokens,
            "output_tokens": output_tokens,
            "cache_read_input_tokens": reply.cached_tokens,
            "cache_creation_input_tokens": 0,
        }
        if reply.reasoning_tokens:
            usage["output_tokens_details"] = {"thinking_tokens": reply.reasoning_tokens}
        return usage


def serve_openai() -> Iterator[FakeOpenAIServer]:
    """Body of a pytest fixture: ``yield from serve_openai()``."""
    with FakeOpenAIServer() as server:
        yield server


def serve_anthropic() -> Iterator[FakeAnthropicServer]:
    """Body of a pytest fixture: ``yield from serve_anthropic()``."""
    with FakeAnthropicServer() as server:
        yield server

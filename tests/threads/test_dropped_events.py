"""A follower whose live message was dropped still receives the event, even the thread's last.

The channel layer may lose a message (capacity, expiry, a send racing a subscribe, a Redis
hiccup). A later event reveals the gap, but nothing reveals a lost *last* event: the
follower's idle recheck of the log (``threads.streams.IDLE_RECHECK_S``) brings it. These
tests drop broadcasts on their way to the layer (:class:`DroppedBroadcasts`: the event is
stored, its live message never sent) and follow the thread over a socket (in process, the
real channels-redis layer) and over Server-Sent Events (a real uvicorn server).
"""

from __future__ import annotations

import contextlib
import contextvars
import http.client
import json
import threading
import time
from collections.abc import Callable, Iterator, Mapping, Sequence
from typing import Any

import pytest
from asgiref.sync import sync_to_async
from channels.db import database_sync_to_async
from channels.routing import URLRouter
from channels.testing import WebsocketCommunicator
from django.db import connection

from config.launcher import background_server
from config.routing import websocket_urlpatterns
from tenancy.authentication import TenantAuthMiddlewareStack
from tenancy.models import Role, Tenant
from tests.factories import make_api_key, make_thread
from tests.support import ContextThread, current_database_url, server_warm_up
from tests.threads.runtime.conftest import Engine, engine, prompt  # noqa: F401 - the fixture
from threads import streams
from threads.broadcast import broadcast_many
from threads.events import outbox
from threads.models import Event, Thread, Turn
from threads.state import ThreadState

pytestmark = pytest.mark.django_db(transaction=True)

application = TenantAuthMiddlewareStack(URLRouter(websocket_urlpatterns))
Json = dict[str, Any]
# How late a dropped event may arrive: the first recheck delay, with room for a slow machine.
LATE_S = streams.IDLE_RECHECK_S[0] + 2.0


class DroppedBroadcasts:
    """Stops chosen envelopes between the log and the channel layer: they are stored and
    committed as usual, their live message is never sent. ``drop`` chooses (by envelope);
    ``dropped`` lists the sequences stopped. Thread-safe (writers may run on threads)."""

    def __init__(self, monkeypatch: pytest.MonkeyPatch) -> None:
        self.drop: Callable[[Mapping[str, Any]], bool] = lambda envelope: False
        self.dropped: list[int] = []
        self._lock = threading.Lock()
        monkeypatch.setattr(outbox, "broadcast_many", self._broadcast_many)

    def _broadcast_many(
        self, items: Sequence[tuple[Sequence[str], Mapping[str, Any]]], *, wake: Sequence[str] = ()
    ) -> None:
        kept = []
        for groups, envelope in items:
            if self.drop(envelope):
                with self._lock:
                    self.dropped.append(int(envelope["sequence"]))
            else:
                kept.append((groups, envelope))
        if kept or wake:
            broadcast_many(kept, wake=wake)


@pytest.fixture
def dropped(monkeypatch: pytest.MonkeyPatch) -> DroppedBroadcasts:
    return DroppedBroadcasts(monkeypatch)


async def _key(tenant: Tenant) -> str:
    issued = await database_sync_to_async(make_api_key)(tenant, role=Role.READ_ONLY)
    return str(issued.secret)


async def _socket(thread: Thread, key: str, after: int = 0) -> WebsocketCommunicator:
    socket = WebsocketCommunicator(
        application,
        f"/ws/threads/{thread.id}/?after={after}",
        headers=[(b"authorization", f"Bearer {key}".encode())],
    )
    connected, _ = await socket.connect()
    assert connected
    return socket


async def _next(socket: WebsocketCommunicator, timeout: float = LATE_S) -> Json:
    event: Json = json.loads(await socket.receive_from(timeout=timeout))
    return event


def _drive(engine: Engine, thread: Thread) -> None:  # noqa: F811
    """Run the thread's pending work here, as a worker would (on a thread of its own)."""
    try:
        engine.drive(thread)
    finally:
        connection.close()


def _log_of(thread: Thread) -> list[int]:
    rows = Event.objects.filter(thread=thread).order_by("sequence")
    return list(rows.values_list("sequence", flat=True))


# WebSocket -----------------------------------------------------------------------------------


@pytest.mark.asyncio
async def test_a_socket_receives_the_last_event_although_its_live_message_was_dropped(
    tenant: Tenant, dropped: DroppedBroadcasts
) -> None:
    thread = await database_sync_to_async(make_thread)(tenant)
    state = ThreadState(thread)
    socket = await _socket(thread, await _key(tenant))
    await database_sync_to_async(state.emit)("live", 1)
    assert (await _next(socket))["sequence"] == 1

    dropped.drop = lambda envelope: envelope["sequence"] == 2
    await database_sync_to_async(state.emit)("last", 2)
    started = time.monotonic()
    event = await _next(socket)

    assert (event["sequence"], event["payload"]) == (2, {"name": "last", "data": 2})
    assert time.monotonic() - started < LATE_S
    assert dropped.dropped == [2]
    assert await socket.receive_nothing(timeout=streams.IDLE_RECHECK_S[0] + 0.3)  # once
    await socket.disconnect()


@pytest.mark.asyncio
async def test_a_socket_backed_off_after_a_long_quiet_still_recovers_a_dropped_event_once(
    tenant: Tenant, dropped: DroppedBroadcasts, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setattr(streams, "IDLE_RECHECK_S", (0.05, 0.1, 0.2))
    thread = await database_sync_to_async(make_thread)(tenant)
    state = ThreadState(thread)
    socket = await _socket(thread, await _key(tenant))
    assert await socket.receive_nothing(timeout=0.6)  # several empty rechecks: backed off

    dropped.drop = lambda envelope: envelope["sequence"] in (1, 2)
    await database_sync_to_async(state.emit)("missed", 1)
    await database_sync_to_async(state.emit)("missed", 2)
    recovered = [await _next(socket, timeout=1.0), await _next(socket, timeout=1.0)]
    dropped.drop = lambda envelope: False
    await database_sync_to_async(state.emit)("live", 3)
    live = await _next(socket, timeout=1.0)

    assert [e["sequence"] for e in [*recovered, live]] == [1, 2, 3]
    assert dropped.dropped == [1, 2]
    assert await socket.receive_nothing(timeout=0.5)
    await socket.disconnect()


@pytest.mark.asyncio
async def test_a_socket_receives_turn_completed_when_its_live_message_was_dropped(
    engine: Engine,  # noqa: F811
    dropped: DroppedBroadcasts,
) -> None:
    """The fault seen under load: a client waiting on ``turn.completed`` waited forever."""
    await database_sync_to_async(engine.define)(
        prompts=[prompt("helper", tools=["echo"])],
        agents=[{"name": "helper", "side_a": {"prompt": "helper"}}],
    )
    thread = await database_sync_to_async(engine.thread)("helper")
    engine.script.tool_calls([{"name": "echo", "arguments": {"text": "one"}}])
    engine.script.text("Echoed.")
    await database_sync_to_async(engine.send)(thread, "echo a word")
    socket = await _socket(thread, await _key(engine.tenant))
    dropped.drop = lambda envelope: envelope["type"] == "turn.completed"
    await sync_to_async(_drive, thread_sensitive=False)(engine, thread)
    received = [await _next(socket, timeout=10)]
    while received[-1]["type"] != "turn.completed":
        received.append(await _next(socket))
    await socket.disconnect()

    log = await database_sync_to_async(_log_of)(thread)
    persisted = [e["sequence"] for e in received if e["sequence"] is not None]
    assert persisted == log == list(range(1, len(log) + 1))
    assert len(dropped.dropped) == 1


# Server-Sent Events --------------------------------------------------------------------------


@pytest.fixture
def port(transactional_db: None) -> Iterator[int]:
    with background_server({"DATABASE_URL": current_database_url()}) as (port, _):
        server_warm_up(port, timeout=30)
        yield port


@contextlib.contextmanager
def _stream(port: int, path: str, key: str) -> Iterator[Iterator[Json]]:
    """The envelopes the server streams from ``path``; a read waits at most a few seconds."""
    server = http.client.HTTPConnection("127.0.0.1", port, timeout=LATE_S + 5)
    try:
        server.request(
            "GET", path, headers={"Authorization": f"Bearer {key}", "Accept": "text/event-stream"}
        )
        response = server.getresponse()
        assert response.status == 200, response.read()
        yield _frames(response)
    finally:
        server.close()


def _frames(response: http.client.HTTPResponse) -> Iterator[Json]:
    """The envelopes of a Server-Sent Events stream as they arrive, until it ends."""
    data = ""
    for raw in response:
        line = raw.decode()
        if line.startswith("data: "):
            data = line[len("data: ") :].strip()
        elif line == "\n" and data:
            yield json.loads(data)
            data = ""


def test_an_event_stream_receives_the_last_event_although_its_live_message_was_dropped(
    port: int, tenant: Tenant, dropped: DroppedBroadcasts
) -> None:
    thread = make_thread(tenant)
    state = ThreadState(thread)
    state.emit("replayed", 0)
    key = make_api_key(tenant, role=Role.READ_ONLY).secret
    with _stream(port, f"/api/v1/threads/{thread.id}/events", key) as frames:
        assert next(frames)["sequence"] == 1  # replayed: the stream follows the thread now
        state.emit("live", 1)
        assert next(frames)["sequence"] == 2

        dropped.drop = lambda envelope: envelope["sequence"] == 3
        state.emit("last", 2)
        started = time.monotonic()
        event = next(frames)
        elapsed = time.monotonic() - started

    assert (event["sequence"], event["payload"]) == (3, {"name": "last", "data": 2})
    assert elapsed < LATE_S
    assert dropped.dropped == [3]


def test_a_turn_stream_ends_with_turn_completed_when_its_live_message_was_dropped(
    port: int,
    engine: Engine,  # noqa: F811
    dropped: DroppedBroadcasts,
) -> None:
    engine.define(
        prompts=[prompt("helper", tools=["echo"])],
        agents=[{"name": "helper", "side_a": {"prompt": "helper"}}],
    )
    thread = engine.thread("helper")
    engine.script.tool_calls([{"name": "echo", "arguments": {"text": "one"}}])
    engine.script.text("Echoed.")
    engine.send(thread, "echo a word")
    turn = Turn.objects.get(thread=thread)
    key = make_api_key(engine.tenant, role=Role.READ_ONLY).secret
    dropped.drop = lambda envelope: envelope["type"] == "turn.completed"
    with _stream(port, f"/api/v1/turns/{turn.id}/stream", key) as frames:
        assert next(frames)["type"] == "queue.changed"  # replayed: the stream follows the turn
        runner = ContextThread(target=contextvars.copy_context().run, args=(_drive, engine, thread))
        runner.start()
        try:
            received = list(frames)  # the server ends the stream after the turn's end
        finally:
            runner.join(timeout=30)

    stored = Event.objects.filter(thread=thread, turn_id=str(turn.id)).order_by("sequence")
    persisted = [e["sequence"] for e in received if e["sequence"] is not None]
    assert persisted == list(stored.values_list("sequence", flat=True)), [
        (e["type"], e["sequence"]) for e in received
    ]
    assert (received[-1]["type"], received[-1]["turn_id"]) == ("turn.completed", str(turn.id))
    assert len(dropped.dropped) == 1

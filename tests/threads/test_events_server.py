"""Events through a real uvicorn server, a real WebSocket client and a real SSE reader.

The flow runs in this process (scripted model) and its events reach the server's sockets
through Redis, as a worker's would.
"""

from __future__ import annotations

import http.client
import json
import threading
from collections.abc import Callable, Iterator
from typing import Any

import pytest
from django.db import connection
from websockets.exceptions import ConnectionClosed
from websockets.sync.client import ClientConnection, connect

from config.launcher import background_server
from tenancy.models import Role, Tenant
from tenancy.services import api_key_revoke
from tests.factories import make_api_key, make_thread
from tests.support import ContextThread, current_database_url
from tests.threads.runtime.conftest import Engine, engine, prompt  # noqa: F401 - the fixture
from threads.models import Event, Thread

pytestmark = pytest.mark.django_db(transaction=True)
Json = dict[str, Any]


@pytest.fixture
def port(transactional_db: None) -> Iterator[int]:
    with background_server({"DATABASE_URL": current_database_url()}) as (port, _):
        yield port


def _socket(port: int, thread: Thread, key: str, after: int = 0) -> ClientConnection:
    return connect(
        f"ws://127.0.0.1:{port}/ws/threads/{thread.id}/?after={after}",
        additional_headers={"Authorization": f"Bearer {key}"},
        open_timeout=10,
    )


def _receive_until(socket: ClientConnection, done: Callable[[Json], bool]) -> list[Json]:
    received: list[Json] = []
    while True:
        event = json.loads(socket.recv(timeout=10))
        received.append(event)
        if done(event):
            return received


def _persisted(events: list[Json]) -> list[Json]:
    return [event for event in events if event["sequence"] is not None]


def _script_three_echoes(engine: Engine) -> Thread:  # noqa: F811
    engine.define(
        prompts=[prompt("helper", tools=["echo"])],
        agents=[{"name": "helper", "side_a": {"prompt": "helper"}}],
    )
    thread = engine.thread("helper")
    for word in ("one", "two", "three"):
        engine.script.tool_calls([{"name": "echo", "arguments": {"text": word}}])
    engine.script.text("All three were echoed back.").streaming(chunk_size=4, chunk_delay_ms=15)
    engine.send(thread, "echo three words")
    return thread


def _drive_in_background(engine: Engine, thread: Thread) -> threading.Thread:  # noqa: F811
    def drive() -> None:
        try:
            engine.drive(thread)
        finally:
            connection.close()

    # The scoped tool registry lives in a context variable: the flow's thread needs it.
    runner = ContextThread(target=drive)
    runner.start()
    return runner


def test_a_websocket_client_resumes_with_after_and_agrees_with_a_steady_one(
    port: int,
    engine: Engine,  # noqa: F811
) -> None:
    thread = _script_three_echoes(engine)
    key = make_api_key(engine.tenant, role=Role.READ_ONLY).secret
    with _socket(port, thread, key) as steady:
        with _socket(port, thread, key) as leaving:
            runner = _drive_in_background(engine, thread)
            before = _receive_until(leaving, lambda e: e["type"] == "tool.result")
        runner.join(timeout=30)
        last_seen = _persisted(before)[-1]["sequence"]
        with _socket(port, thread, key, after=last_seen) as back:
            after = _receive_until(back, lambda e: e["type"] == "turn.completed")
        whole = _receive_until(steady, lambda e: e["type"] == "turn.completed")

    log = list(Event.objects.filter(thread=thread).values_list("sequence", flat=True))
    resumed = _persisted(before) + _persisted(after)
    assert [e["sequence"] for e in resumed] == sorted(log) == list(range(1, len(log) + 1))
    assert resumed == _persisted(whole)
    assert last_seen < len(log) - 5


def test_another_tenants_key_is_closed_4404_by_the_server(
    port: int, tenant: Tenant, other_tenant: Tenant
) -> None:
    thread = make_thread(tenant)
    key = make_api_key(other_tenant, role=Role.ADMIN).secret

    with _socket(port, thread, key) as socket, pytest.raises(ConnectionClosed) as closed:
        socket.recv(timeout=10)

    assert closed.value.rcvd is not None
    assert closed.value.rcvd.code == 4404


def _sse_frames(response: http.client.HTTPResponse, until: str) -> list[Json]:
    frames: list[Json] = []
    data = ""
    while True:
        line = response.readline().decode()
        if line.startswith("data: "):
            data = line[len("data: ") :].strip()
        elif line == "\n" and data:
            frames.append(json.loads(data))
            data = ""
            if frames[-1]["type"] == until:
                return frames


def test_server_sent_events_follow_a_flow_live_after_the_replay(
    port: int,
    engine: Engine,  # noqa: F811
) -> None:
    thread = _script_three_echoes(engine)
    key = make_api_key(engine.tenant, role=Role.READ_ONLY).secret
    stream = http.client.HTTPConnection("127.0.0.1", port, timeout=20)
    stream.request(
        "GET",
        f"/api/v1/threads/{thread.id}/events?after=1",
        headers={"Authorization": f"Bearer {key}", "Accept": "text/event-stream"},
    )
    response = stream.getresponse()
    assert response.status == 200
    assert response.getheader("Content-Type") == "text/event-stream"

    runner = _drive_in_background(engine, thread)
    frames = _sse_frames(response, until="turn.completed")
    runner.join(timeout=30)
    stream.close()

    log = list(Event.objects.filter(thread=thread).values_list("sequence", flat=True))
    assert [f["sequence"] for f in _persisted(frames)] == sorted(log)[1:]
    assert any(f["type"] == "model.delta" for f in frames)


def test_an_event_stream_ends_with_revoked_when_its_key_is_revoked(
    port: int, tenant: Tenant
) -> None:
    """Like a socket (closed 4401), a Server-Sent Events stream follows its credentials."""
    thread = make_thread(tenant)
    issued = make_api_key(tenant, role=Role.READ_ONLY)
    stream = http.client.HTTPConnection("127.0.0.1", port, timeout=10)
    stream.request(
        "GET", f"/api/v1/threads/{thread.id}/events",
        headers={"Authorization": f"Bearer {issued.secret}", "Accept": "text/event-stream"},
    )  # fmt: skip
    response = stream.getresponse()
    assert response.status == 200
    assert response.readline() == b"retry: 2000\n"

    api_key_revoke(tenant=tenant, api_key_id=issued.api_key.id)

    rest = response.read().decode()  # the server ends the stream
    stream.close()
    assert "event: revoked\n" in rest
    assert '"code": "unauthenticated"' in rest

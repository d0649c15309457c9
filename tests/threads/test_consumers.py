"""The event sockets over a real channels-redis layer: replay, live, resume, auth, close codes.

Flows run in process with the scripted model, in a thread of their own (as a worker would),
while the sockets run on the test's event loop.
"""

from __future__ import annotations

import asyncio
import datetime as dt
import json
from collections.abc import Callable
from typing import Any

import pytest
from asgiref.sync import sync_to_async
from channels.db import database_sync_to_async
from channels.routing import URLRouter
from channels.testing import WebsocketCommunicator
from django.conf import settings
from django.db import connection, transaction
from rest_framework.test import APIClient

from common.time import now
from config.asgi import application as asgi_application
from config.routing import websocket_urlpatterns
from tenancy.authentication import TenantAuthMiddlewareStack
from tenancy.models import Membership, Role, Tenant
from tenancy.services import api_key_revoke
from tests.agents.samples import seed_rich
from tests.factories import make_api_key, make_member, make_session, make_thread
from tests.threads.runtime.conftest import Engine, engine, prompt  # noqa: F401 - the fixture
from threads.consumers import TERMINATED_DRAIN_S
from threads.events import publish
from threads.models import Event, Thread
from threads.services.actions import action_open, action_respond
from threads.services.control import thread_terminate
from threads.services.inbox import message_queue
from threads.services.messages import message_inject
from threads.services.threads import thread_create
from threads.services.values import value_set
from threads.state import ThreadState

pytestmark = [pytest.mark.asyncio, pytest.mark.django_db(transaction=True)]

application = TenantAuthMiddlewareStack(URLRouter(websocket_urlpatterns))
Json = dict[str, Any]
MAX_CLOSE_REASON_BYTES = 123  # RFC 6455: a close frame's payload is at most 125 bytes


async def _key(tenant: Tenant, role: Role = Role.READ_ONLY) -> str:
    issued = await database_sync_to_async(make_api_key)(tenant, role=role)
    return str(issued.secret)


async def _open(path: str, *, key: str | None = None, **options: Any) -> WebsocketCommunicator:
    headers = [(b"authorization", f"Bearer {key}".encode())] if key else []
    socket = WebsocketCommunicator(application, path, headers=headers, **options)
    connected, _ = await socket.connect()
    assert connected
    return socket


async def _thread_socket(thread: Thread, key: str, after: int = 0) -> WebsocketCommunicator:
    return await _open(f"/ws/threads/{thread.id}/?after={after}", key=key)


async def _receive_until(
    socket: WebsocketCommunicator, done: Callable[[Json], bool], timeout: float = 10.0
) -> list[Json]:
    received: list[Json] = []
    while True:
        event = json.loads(await socket.receive_from(timeout=timeout))
        received.append(event)
        if done(event):
            return received


async def _close_code(socket: WebsocketCommunicator) -> int:
    """The code the socket was closed with; every close frame says why in its reason."""
    output = await socket.receive_output(timeout=5)
    assert output["type"] == "websocket.close", output
    assert output.get("reason"), output
    assert len(output["reason"].encode()) <= MAX_CLOSE_REASON_BYTES
    code: int = output["code"]
    return code


def _persisted(events: list[Json]) -> list[Json]:
    return [event for event in events if event["sequence"] is not None]


def _sequences(events: list[Json]) -> list[int]:
    return [event["sequence"] for event in _persisted(events)]


def _sequences_of(thread: Thread) -> list[int]:
    rows = Event.objects.filter(thread=thread).order_by("sequence")
    return list(rows.values_list("sequence", flat=True))


async def _log(thread: Thread) -> list[int]:
    found: list[int] = await database_sync_to_async(_sequences_of)(thread)
    return found


async def test_replay_then_live_events_arrive_once_in_order(tenant: Tenant) -> None:
    thread = await database_sync_to_async(make_thread)(tenant)
    state = ThreadState(thread)
    for index in range(3):
        await database_sync_to_async(state.emit)("before", index)

    socket = await _thread_socket(thread, await _key(tenant), after=1)
    replayed = await _receive_until(socket, lambda e: e["sequence"] == 3)
    for index in range(3):
        await database_sync_to_async(state.emit)("after", index)
    live = await _receive_until(socket, lambda e: e["sequence"] == 6)

    assert _sequences(replayed + live) == [2, 3, 4, 5, 6]
    assert [e["payload"]["name"] for e in replayed + live] == ["before"] * 2 + ["after"] * 3
    first = replayed[0]
    assert first["type"] == "custom"
    assert first["thread_id"] == first["session_id"] == str(thread.id)
    assert first["tenant_id"] == str(tenant.id)
    assert first["schema_version"] == 1
    assert await socket.receive_nothing(timeout=0.3)
    await socket.disconnect()


async def test_reasoning_deltas_reach_only_sockets_that_asked_for_them(tenant: Tenant) -> None:
    thread = await database_sync_to_async(make_thread)(tenant)
    key = await _key(tenant)
    plain = await _thread_socket(thread, key)
    opted = await _open(f"/ws/threads/{thread.id}/?after=0&reasoning=1", key=key)
    delta = {"message_id": "m", "depth": 0, "delta": "thinking"}
    # A live event first: both sockets are then known members of the thread's group.
    await database_sync_to_async(ThreadState(thread).emit)("before", 0)
    for socket in (plain, opted):
        await _receive_until(socket, lambda e: e["type"] == "custom")

    await database_sync_to_async(publish)(thread, "reasoning.delta", delta)
    await database_sync_to_async(ThreadState(thread).emit)("after", 1)

    to_opted = await _receive_until(opted, lambda e: e["type"] == "custom")
    to_plain = await _receive_until(plain, lambda e: e["type"] == "custom")
    assert [e["type"] for e in to_opted] == ["reasoning.delta", "custom"]
    assert [e["type"] for e in to_plain] == ["custom"]
    await plain.disconnect()
    await opted.disconnect()


async def test_a_client_that_reconnects_with_after_gets_exactly_what_it_missed(
    engine: Engine,  # noqa: F811
) -> None:
    await database_sync_to_async(engine.define)(
        prompts=[prompt("helper", tools=["echo"])],
        agents=[{"name": "helper", "side_a": {"prompt": "helper"}}],
    )
    thread = await database_sync_to_async(engine.thread)("helper")
    for word in ("one", "two", "three"):
        engine.script.tool_calls([{"name": "echo", "arguments": {"text": word}}])
    engine.script.text("All three were echoed back, one after the other.").streaming(
        chunk_size=4, chunk_delay_ms=15
    )
    await database_sync_to_async(engine.send)(thread, "echo three words")
    key = await _key(engine.tenant)
    steady = await _thread_socket(thread, key)
    leaving = await _thread_socket(thread, key)

    def drive() -> None:
        try:
            engine.drive(thread)
        finally:
            connection.close()

    flow = asyncio.ensure_future(sync_to_async(drive, thread_sensitive=False)())
    before = await _receive_until(leaving, lambda e: e["type"] == "tool.result")
    await leaving.disconnect()
    await flow
    last_seen = _sequences(before)[-1]
    back = await _thread_socket(thread, key, after=last_seen)
    after = await _receive_until(back, lambda e: e["type"] == "turn.completed")
    whole = await _receive_until(steady, lambda e: e["type"] == "turn.completed")
    await back.disconnect()
    await steady.disconnect()

    log = await _log(thread)
    assert _sequences(before) + _sequences(after) == log == list(range(1, len(log) + 1))
    assert _persisted(before) + _persisted(after) == _persisted(whole)
    assert "model.delta" in {e["type"] for e in whole}
    assert last_seen < log[-1] - 5  # it really left mid-flow


async def test_another_tenants_key_is_closed_4404_and_receives_nothing(
    tenant: Tenant, other_tenant: Tenant
) -> None:
    thread = await database_sync_to_async(make_thread)(tenant)
    await database_sync_to_async(ThreadState(thread).emit)("private", 1)

    socket = await _thread_socket(thread, await _key(other_tenant))

    assert await _close_code(socket) == 4404
    await database_sync_to_async(ThreadState(thread).emit)("private", 2)
    assert await socket.receive_nothing(timeout=0.3)


async def test_a_socket_without_valid_credentials_is_closed_4401(tenant: Tenant) -> None:
    thread = await database_sync_to_async(make_thread)(tenant)

    anonymous = await _open(f"/ws/threads/{thread.id}/")
    forged = await _open(f"/ws/threads/{thread.id}/", key="sap_aaaaaaaaaaaa_" + "b" * 40)

    assert await _close_code(anonymous) == 4401
    assert await _close_code(forged) == 4401


@pytest.mark.parametrize("path", ["/ws/nothing/", "/ws/threads/not-an-id/", "/api/v1/me"])
async def test_a_socket_on_a_path_no_route_takes_is_closed_4404_naming_the_routes(
    tenant: Tenant, path: str
) -> None:
    socket = WebsocketCommunicator(asgi_application, path)
    connected, _ = await socket.connect()
    assert connected
    output = await socket.receive_output(timeout=5)

    assert (output["type"], output["code"]) == ("websocket.close", 4404)
    assert "/ws/threads/{id}/" in output["reason"]


async def test_a_malformed_after_is_closed_4400(tenant: Tenant) -> None:
    thread = await database_sync_to_async(make_thread)(tenant)

    socket = await _open(f"/ws/threads/{thread.id}/?after=-1", key=await _key(tenant))

    assert await _close_code(socket) == 4400


async def test_a_ticket_opens_one_socket_once(tenant: Tenant) -> None:
    key = await _key(tenant)
    thread = await database_sync_to_async(make_thread)(tenant)
    await database_sync_to_async(ThreadState(thread).emit)("hello", 1)

    def issue() -> str:
        client = APIClient()
        client.credentials(HTTP_AUTHORIZATION=f"Bearer {key}")
        response = client.post("/api/v1/ws-tickets")
        assert response.status_code == 201, response.content
        assert response.json()["expires_in"] == 30
        ticket: str = response.json()["ticket"]
        return ticket

    ticket = await database_sync_to_async(issue)()
    first = await _open(f"/ws/threads/{thread.id}/?ticket={ticket}")
    second = await _open(f"/ws/threads/{thread.id}/?ticket={ticket}")

    assert json.loads(await first.receive_from())["sequence"] == 1
    assert await _close_code(second) == 4401
    await first.disconnect()


async def test_the_bearer_subprotocol_authenticates_and_is_not_echoed_when_another_is_offered(
    tenant: Tenant,
) -> None:
    key = await _key(tenant)
    thread = await database_sync_to_async(make_thread)(tenant)
    socket = WebsocketCommunicator(
        application, f"/ws/threads/{thread.id}/", subprotocols=["events.v1", f"bearer.{key}"]
    )

    connected, subprotocol = await socket.connect()

    assert connected
    assert subprotocol == "events.v1"
    assert await socket.receive_nothing(timeout=0.2)
    await socket.disconnect()


async def test_ping_is_answered_with_pong(tenant: Tenant) -> None:
    thread = await database_sync_to_async(make_thread)(tenant)
    socket = await _thread_socket(thread, await _key(tenant))

    await socket.send_to(text_data="ping")
    assert json.loads(await socket.receive_from()) == {"type": "pong"}
    await socket.send_to(text_data=json.dumps({"type": "ping"}))
    assert json.loads(await socket.receive_from()) == {"type": "pong"}
    await socket.disconnect()


async def test_a_terminated_thread_replays_its_events_then_closes_4410(tenant: Tenant) -> None:
    thread = await database_sync_to_async(make_thread)(tenant)
    await database_sync_to_async(thread_terminate)(thread=thread)

    socket = await _thread_socket(thread, await _key(tenant))

    assert json.loads(await socket.receive_from())["type"] == "thread.status"
    assert json.loads(await socket.receive_from())["type"] == "thread.terminated"
    assert await _close_code(socket) == 4410


async def test_a_live_terminate_is_delivered_then_the_socket_closes_4410(tenant: Tenant) -> None:
    thread = await database_sync_to_async(make_thread)(tenant)
    socket = await _thread_socket(thread, await _key(tenant))

    await database_sync_to_async(thread_terminate)(thread=thread)

    assert json.loads(await socket.receive_from())["type"] == "thread.status"
    assert json.loads(await socket.receive_from())["type"] == "thread.terminated"
    output = await socket.receive_output(timeout=TERMINATED_DRAIN_S + 3)
    assert (output["type"], output["code"]) == ("websocket.close", 4410)


async def test_the_tenant_stream_carries_lifecycle_events_of_its_tenant_only(
    tenant: Tenant, other_tenant: Tenant
) -> None:
    await database_sync_to_async(seed_rich)(tenant)
    await database_sync_to_async(seed_rich)(other_tenant)
    socket = await _open("/ws/events/", key=await _key(tenant))

    await database_sync_to_async(thread_create)(tenant=other_tenant, agent_name="helper")
    mine = await database_sync_to_async(thread_create)(tenant=tenant, agent_name="helper")
    await database_sync_to_async(value_set)(thread=mine, key="k", value=1)  # not lifecycle
    await database_sync_to_async(thread_terminate)(thread=mine)

    received = [json.loads(await socket.receive_from()) for _ in range(3)]
    assert [(e["type"], e["thread_id"]) for e in received] == [
        ("thread.created", str(mine.id)),
        ("thread.status", str(mine.id)),
        ("thread.terminated", str(mine.id)),
    ]
    assert await socket.receive_nothing(timeout=0.3)
    await socket.disconnect()


def _action_asked_and_answered(tenant: Tenant) -> str:
    """An approval opened on a new turn of ``tenant`` and then denied; its id."""
    thread = make_thread(tenant)
    turn = message_queue(thread=thread, role="user", content="refund", wake=False)
    issuer = message_inject(thread=thread, role="assistant", content=None, tool_calls=[
        {"id": "c", "type": "function", "function": {"name": "refund", "arguments": "{}"}},
    ])  # fmt: skip
    with transaction.atomic():
        action = action_open(
            thread=thread, turn=turn, kind="approval", issuer=issuer, tool_call_id="c",
            tool_name="refund", arguments={}, schema=None,
        )  # fmt: skip
    action_respond(thread=thread, action_id=action.pk, body={"decision": "deny"})
    return str(action.pk)


async def test_the_tenant_stream_carries_what_waits_for_a_person(
    tenant: Tenant, other_tenant: Tenant
) -> None:
    socket = await _open("/ws/events/", key=await _key(tenant))

    await database_sync_to_async(_action_asked_and_answered)(other_tenant)
    action_id = await database_sync_to_async(_action_asked_and_answered)(tenant)

    received: list[dict[str, Any]] = []
    while len(received) < 2:
        event = json.loads(await socket.receive_from())
        if event["type"].startswith("action."):
            received.append(event)
    assert [(e["type"], e["payload"]["action_id"]) for e in received] == [
        ("action.required", action_id), ("action.resolved", action_id),
    ]  # fmt: skip
    assert received[1]["payload"]["status"] == "denied"
    await socket.disconnect()


async def test_a_members_session_follows_its_tenants_thread(tenant: Tenant) -> None:
    thread = await database_sync_to_async(make_thread)(tenant)
    await database_sync_to_async(ThreadState(thread).emit)("hello", 1)
    session_key = await database_sync_to_async(make_session)(tenant, role=Role.READ_ONLY)
    cookie = f"{settings.SESSION_COOKIE_NAME}={session_key}"
    socket = WebsocketCommunicator(
        application, f"/ws/threads/{thread.id}/", headers=[(b"cookie", cookie.encode())]
    )

    connected, _ = await socket.connect()

    assert connected
    assert json.loads(await socket.receive_from())["payload"] == {"name": "hello", "data": 1}
    await socket.disconnect()


# Sockets follow credentials ---------------------------------------------------------------


async def _drained(socket: WebsocketCommunicator) -> WebsocketCommunicator:
    """The socket after its replay (an emitted event), so what comes next is live."""
    await socket.receive_from()
    return socket


@pytest.mark.parametrize("path", ["thread", "tenant"])
async def test_revoking_a_key_closes_its_open_sockets_4401(tenant: Tenant, path: str) -> None:
    thread = await database_sync_to_async(make_thread)(tenant)
    issued = await database_sync_to_async(make_api_key)(tenant, role=Role.READ_ONLY)
    other = await _key(tenant)
    if path == "thread":
        await database_sync_to_async(ThreadState(thread).emit)("hello", 1)
        socket = await _drained(await _thread_socket(thread, issued.secret))
    else:
        socket = await _open("/ws/events/", key=issued.secret)
    bystander = await _open("/ws/events/", key=other)

    await database_sync_to_async(api_key_revoke)(tenant=tenant, api_key_id=issued.api_key.id)

    assert await _close_code(socket) == 4401
    assert await bystander.receive_nothing(timeout=0.3)  # another key's socket stays open
    await bystander.disconnect()


async def test_an_expiring_key_closes_its_socket_when_it_expires(tenant: Tenant) -> None:
    thread = await database_sync_to_async(make_thread)(tenant)
    expires = now() + dt.timedelta(seconds=1)
    issued = await database_sync_to_async(make_api_key)(tenant, expires_at=expires)
    socket = await _thread_socket(thread, issued.secret)

    assert await socket.receive_nothing(timeout=0.5)
    assert await _close_code(socket) == 4401


async def test_deactivating_the_tenant_closes_its_sockets_4401(tenant: Tenant) -> None:
    socket = await _open("/ws/events/", key=await _key(tenant))

    def deactivate() -> None:
        tenant.is_active = False
        tenant.save(update_fields=["is_active"])

    await database_sync_to_async(deactivate)()

    assert await _close_code(socket) == 4401


async def test_removing_a_membership_closes_the_members_session_sockets(tenant: Tenant) -> None:
    user = await database_sync_to_async(make_member)(tenant, role=Role.READ_ONLY)
    session_key = await database_sync_to_async(_session_of)(user)
    cookie = f"{settings.SESSION_COOKIE_NAME}={session_key}"
    socket = WebsocketCommunicator(
        application, "/ws/events/", headers=[(b"cookie", cookie.encode())]
    )
    connected, _ = await socket.connect()
    assert connected

    await database_sync_to_async(Membership.objects.filter(user=user, tenant=tenant).delete)()

    assert await _close_code(socket) == 4401


def _session_of(user: Any) -> str:
    client = APIClient()
    client.force_login(user)
    return str(client.cookies[settings.SESSION_COOKIE_NAME].value)

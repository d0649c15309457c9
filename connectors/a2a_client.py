"""Talking to a remote A2A agent with the ``a2a-sdk`` client: fetching its card and sending it
a message, every connection through the egress guard
(:func:`connectors.transport.egress_transport`).

A message is streamed (``SendStreamingMessage``) to an agent whose card says it streams, and
sent without waiting (``SendMessage``, ``returnImmediately``) to one that does not; either way
the task it starts is followed until it ends or asks for input (``GetTask`` gives it whole), or
until the call's time is up, when it is cancelled. Callers are synchronous (a flow in a worker
thread, a request in a web thread): each operation runs an event loop of its own there.
"""

from __future__ import annotations

import time
import uuid
from collections.abc import Awaitable, Callable, Mapping
from typing import Any, Final, TypeVar
from urllib.parse import urlsplit

import anyio
import httpx
from a2a.client import A2ACardResolver, Client, ClientConfig, ClientFactory
from a2a.client.card_resolver import parse_agent_card
from a2a.types import (
    AgentCard,
    CancelTaskRequest,
    GetTaskRequest,
    Message,
    Part,
    Role,
    SendMessageRequest,
    Task,
    TaskState,
)
from google.protobuf.json_format import MessageToDict

from connectors.transport import (
    CONNECT_TIMEOUT_S,
    Endpoint,
    RemoteUnavailable,
    egress_transport,
    failure,
)

T = TypeVar("T")
# A task in one of these states has its answer (or its end); any other is still under way.
SETTLED: Final = frozenset({
    TaskState.TASK_STATE_COMPLETED, TaskState.TASK_STATE_FAILED, TaskState.TASK_STATE_CANCELED,
    TaskState.TASK_STATE_REJECTED, TaskState.TASK_STATE_INPUT_REQUIRED,
    TaskState.TASK_STATE_AUTH_REQUIRED,
})  # fmt: skip
POLL_FIRST_S: Final = 0.2
POLL_MAX_S: Final = 2.0
CANCEL_TIMEOUT_S: Final = 5.0


def _run(
    endpoint: Endpoint, operation: Callable[[httpx.AsyncClient], Awaitable[T]], *,
    timeout: float,
) -> T:  # fmt: skip
    """Run ``operation`` with an HTTP client sending ``endpoint``'s headers through the
    guard. Raises :class:`RemoteUnavailable` for whatever kept it from an answer."""
    transport, seen = egress_transport(httpx, timeout=timeout)

    async def session() -> T:
        async with httpx.AsyncClient(
            transport=transport, headers=dict(endpoint.headers),
            timeout=httpx.Timeout(timeout, connect=CONNECT_TIMEOUT_S),
        ) as http:  # fmt: skip
            with anyio.fail_after(timeout):
                return await operation(http)

    started = time.monotonic()
    try:
        return anyio.run(session)
    except RemoteUnavailable:
        raise
    except Exception as error:  # whatever the SDK or the network raised: reported, not raised
        raise failure(error, seen, protocol="a2a", timeout=timeout, started=started) from None


def card_get(endpoint: Endpoint, *, timeout: float) -> dict[str, Any]:
    """The card the agent at ``endpoint.url`` serves at its well-known path, as A2A 1.0 JSON."""

    async def fetch(http: httpx.AsyncClient) -> dict[str, Any]:
        card = await A2ACardResolver(http, endpoint.url).get_agent_card()
        found: dict[str, Any] = MessageToDict(card)
        return found

    return _run(endpoint, fetch, timeout=timeout)


def card_interface(card: Mapping[str, Any]) -> str | None:
    """The URL of the card's JSON-RPC interface, or None when it offers none."""
    for interface in card.get("supportedInterfaces") or ():
        if isinstance(interface, Mapping) and interface.get("protocolBinding") == "JSONRPC":
            url = interface.get("url")
            return str(url) if url else None
    return None


def same_origin(one: str, other: str) -> bool:
    a, b = urlsplit(one), urlsplit(other)
    return (a.scheme, a.hostname, a.port) == (b.scheme, b.hostname, b.port)


def message_send(
    endpoint: Endpoint, card: Mapping[str, Any], *, text: str, context_id: str = "",
    task_id: str = "", timeout: float,
) -> Task | Message:  # fmt: skip
    """Send ``text`` to the agent ``card`` describes (its interface's headers from
    ``endpoint``) and wait for its answer: a message, or a task that has ended or asks for
    input. A task still under way when ``timeout`` runs out is cancelled and reported as a
    timeout."""
    parsed: AgentCard = parse_agent_card(dict(card))
    streaming = parsed.capabilities.streaming

    async def send(http: httpx.AsyncClient) -> Task | Message:
        config = ClientConfig(httpx_client=http, streaming=streaming, polling=not streaming)
        client = ClientFactory(config).create(parsed)
        message = Message(
            message_id=uuid.uuid4().hex, context_id=context_id, task_id=task_id,
            role=Role.ROLE_USER, parts=[Part(text=text)],
        )  # fmt: skip
        progress = _Progress()
        with anyio.move_on_after(timeout):
            answer = await _answer(client, SendMessageRequest(message=message), progress)
            if answer is not None:
                return answer
        if progress.task_id:
            with anyio.move_on_after(CANCEL_TIMEOUT_S):
                await client.cancel_task(CancelTaskRequest(id=progress.task_id))
            raise RemoteUnavailable(
                f"the task {progress.task_id} was still {progress.state} when the call's "
                f"{timeout:g} s ran out; it was cancelled", code="a2a_timeout",
            )  # fmt: skip
        raise RemoteUnavailable(f"no answer within {timeout:g} s", code="a2a_timeout")

    # The loop's own deadline leaves time to cancel a task that outlives the call.
    return _run(endpoint, send, timeout=timeout + CANCEL_TIMEOUT_S)


class _Progress:
    """The task a message started, as far as it is known, and its last state."""

    task_id: str = ""
    state: str = "submitted"

    def saw(self, task_id: str, state: int) -> bool:
        """Note the task's state; whether it is settled."""
        self.task_id = task_id or self.task_id
        self.state = TaskState.Name(state).removeprefix("TASK_STATE_").lower()
        return state in SETTLED


async def _answer(
    client: Client, request: SendMessageRequest, progress: _Progress
) -> Task | Message | None:
    """The agent's answer to ``request``: streamed until the task settles (an agent that
    streams), or started and then polled (one that does not)."""
    responses = client.send_message(request)
    try:
        async for response in responses:
            if response.HasField("message"):
                return response.message
            if response.HasField("task"):
                settled = progress.saw(response.task.id, response.task.status.state)
            elif response.HasField("status_update"):
                update = response.status_update
                settled = progress.saw(update.task_id, update.status.state)
            else:
                continue
            if settled:
                break
    finally:
        await responses.aclose()  # type: ignore[attr-defined]  # an async generator
    if not progress.task_id:
        raise RemoteUnavailable("the agent answered nothing", code="a2a_unavailable")
    pause = POLL_FIRST_S
    while True:
        task = await client.get_task(GetTaskRequest(id=progress.task_id))
        if progress.saw(task.id, task.status.state):
            return task
        await anyio.sleep(pause)
        pause = min(pause * 2, POLL_MAX_S)

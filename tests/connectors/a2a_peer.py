"""A real A2A agent for the connector tests, built with the ``a2a-sdk`` (an ``AgentExecutor``
behind the SDK's ``DefaultRequestHandler``, its JSON-RPC and card routes), served by uvicorn on
loopback in a thread of the test process, every request (the card too) requiring a bearer.

The agent translates: a message is answered by a completed task whose artifact is
``Bonjour! (<text>)``; a message containing ``which`` asks for input ("Into which language?");
one containing ``slow`` works for a minute (a task to cancel). ``streaming`` chooses whether its
card says it streams. ``calls`` records the text of every message it ran, ``cancelled`` the
tasks it was asked to cancel."""

from __future__ import annotations

import asyncio
import contextlib
from collections.abc import Iterator
from dataclasses import dataclass, field

from a2a.helpers.proto_helpers import new_task_from_user_message
from a2a.server.agent_execution import AgentExecutor, RequestContext
from a2a.server.events import EventQueue
from a2a.server.request_handlers import DefaultRequestHandler
from a2a.server.routes import create_agent_card_routes, create_jsonrpc_routes
from a2a.server.tasks import InMemoryTaskStore, TaskUpdater
from a2a.types import (
    AgentCapabilities,
    AgentCard,
    AgentInterface,
    AgentSkill,
    Part,
)
from a2a.utils.constants import PROTOCOL_VERSION_1_0, TransportProtocol
from starlette.applications import Starlette
from starlette.middleware.base import BaseHTTPMiddleware, RequestResponseEndpoint
from starlette.requests import Request
from starlette.responses import JSONResponse, Response

from tests.connectors.serving import free_port, serving

TOKEN = "sentinel-a2a-bearer-7b2e90d1c4"


@dataclass
class Peer:
    url: str
    calls: list[str] = field(default_factory=list)
    cancelled: list[str] = field(default_factory=list)


class Translator(AgentExecutor):
    def __init__(self, peer: Peer) -> None:
        self.peer = peer

    async def execute(self, context: RequestContext, event_queue: EventQueue) -> None:
        text = context.get_user_input()
        self.peer.calls.append(text)
        task = context.current_task
        if task is None:
            assert context.message is not None
            task = new_task_from_user_message(context.message)
            await event_queue.enqueue_event(task)
        updater = TaskUpdater(event_queue, task.id, task.context_id)
        await updater.start_work()
        if "slow" in text:
            await asyncio.sleep(60)
        if "which" in text:
            question = updater.new_agent_message([Part(text="Into which language?")])
            await updater.requires_input(question)
            return
        await updater.add_artifact([Part(text=f"Bonjour! ({text})")], name="translation")
        await updater.complete()

    async def cancel(self, context: RequestContext, event_queue: EventQueue) -> None:
        assert context.task_id is not None
        assert context.context_id is not None
        self.peer.cancelled.append(context.task_id)
        await TaskUpdater(event_queue, context.task_id, context.context_id).cancel()


class BearerRequired(BaseHTTPMiddleware):
    async def dispatch(self, request: Request, call_next: RequestResponseEndpoint) -> Response:
        if request.headers.get("authorization") != f"Bearer {TOKEN}":
            return JSONResponse({"error": "unauthorized"}, status_code=401)
        return await call_next(request)


def _card(url: str, *, streaming: bool) -> AgentCard:
    return AgentCard(
        name="translator",
        description="Translates text into French.",
        version="1.0.0",
        supported_interfaces=[AgentInterface(
            url=url, protocol_binding=TransportProtocol.JSONRPC,
            protocol_version=PROTOCOL_VERSION_1_0,
        )],
        capabilities=AgentCapabilities(streaming=streaming),
        default_input_modes=["text/plain"],
        default_output_modes=["text/plain"],
        skills=[AgentSkill(id="french", name="French", description="Into French.",
                           tags=["translation"])],
    )  # fmt: skip


@contextlib.contextmanager
def a2a_peer(*, streaming: bool = True) -> Iterator[Peer]:
    """The agent, listening on loopback for the block."""
    port = free_port()
    peer = Peer(url=f"http://127.0.0.1:{port}/")
    card = _card(f"http://127.0.0.1:{port}/rpc", streaming=streaming)
    handler = DefaultRequestHandler(
        agent_executor=Translator(peer), task_store=InMemoryTaskStore(), agent_card=card
    )
    routes = [*create_agent_card_routes(card), *create_jsonrpc_routes(handler, rpc_url="/rpc")]
    app = Starlette(routes=routes)
    app.add_middleware(BearerRequired)
    with serving(app, port, "A2A peer"):
        yield peer

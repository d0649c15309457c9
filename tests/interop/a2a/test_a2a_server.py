"""Our agents as A2A agents, through the official SDK's client against a live server and a
real worker: the card, a blocking message and its task, a streamed task, a cancelled one, a
follow-up in the same context, and the tenant wall (docs/a2a.md)."""

from __future__ import annotations

import asyncio
import time
import uuid
from collections.abc import AsyncIterator

import httpx
import pytest
import pytest_asyncio
from a2a.client import (
    A2ACardResolver,
    A2AClientError,
    AgentCardResolutionError,
    AuthInterceptor,
    Client,
    ClientCallContext,
    ClientConfig,
    ClientFactory,
    CredentialService,
)
from a2a.types import (
    AgentCard,
    CancelTaskRequest,
    GetTaskRequest,
    ListTasksRequest,
    Message,
    Part,
    Role,
    SendMessageRequest,
    StreamResponse,
    SubscribeToTaskRequest,
    Task,
    TaskNotCancelableError,
    TaskNotFoundError,
    TaskState,
    UnsupportedOperationError,
)
from asgiref.sync import sync_to_async

from tests.interop.a2a.conftest import AGENT, Caller
from threads.models import Turn

TIMEOUT_S = 60.0


class ApiKey(CredentialService):
    """The key the SDK's AuthInterceptor puts where the card's security scheme says."""

    def __init__(self, key: str) -> None:
        self.key = key

    async def get_credentials(
        self, security_scheme_name: str, context: ClientCallContext | None
    ) -> str | None:
        return self.key


@pytest_asyncio.fixture
async def http() -> AsyncIterator[httpx.AsyncClient]:
    async with httpx.AsyncClient(timeout=TIMEOUT_S) as client:
        yield client


async def card_of(http: httpx.AsyncClient, caller: Caller, key: str | None = None) -> AgentCard:
    headers = {"Authorization": f"Bearer {key or caller.api_key}"}
    resolver = A2ACardResolver(http, caller.agent_url)
    return await resolver.get_agent_card(http_kwargs={"headers": headers})


async def client_for(
    http: httpx.AsyncClient, caller: Caller, *, streaming: bool, polling: bool = False,
    key: str | None = None,
) -> Client:  # fmt: skip
    """The SDK's client for ``caller``'s agent, its card fetched with the caller's key and
    its calls authenticated with ``key`` (default: the same)."""
    card = await card_of(http, caller)
    config = ClientConfig(httpx_client=http, streaming=streaming, polling=polling)
    interceptor = AuthInterceptor(ApiKey(key or caller.api_key))
    return ClientFactory(config).create(card, interceptors=[interceptor])


def user_message(text: str, *, context_id: str = "", message_id: str = "") -> SendMessageRequest:
    message = Message(
        message_id=message_id or uuid.uuid4().hex, context_id=context_id, role=Role.ROLE_USER,
        parts=[Part(text=text)],
    )  # fmt: skip
    return SendMessageRequest(message=message)


async def responses(client: Client, request: SendMessageRequest) -> list[StreamResponse]:
    return [response async for response in client.send_message(request)]


def texts(task: Task) -> list[tuple[int, str]]:
    return [(message.role, message.parts[0].text) for message in task.history]


async def ended(client: Client, task_id: str) -> Task:
    """The task once it is over (polled with GetTask)."""
    deadline = time.monotonic() + TIMEOUT_S
    while True:
        task = await client.get_task(GetTaskRequest(id=task_id))
        final = (TaskState.TASK_STATE_COMPLETED, TaskState.TASK_STATE_FAILED,
                 TaskState.TASK_STATE_CANCELED)  # fmt: skip
        if task.status.state in final:
            return task
        assert time.monotonic() < deadline, f"task {task_id} is still {task.status.state}"
        await asyncio.sleep(0.1)


@pytest.mark.asyncio
async def test_the_card_describes_the_agent_to_its_tenants_keys_only(
    http: httpx.AsyncClient, owner: Caller
) -> None:
    card = await card_of(http, owner)

    assert card.name == AGENT
    assert card.description == "The chat prompt"
    assert [(i.url, i.protocol_binding, i.protocol_version) for i in card.supported_interfaces] == [
        (owner.agent_url, "JSONRPC", "1.0")
    ]
    assert (card.capabilities.streaming, card.capabilities.push_notifications) == (True, True)
    assert [skill.id for skill in card.skills] == [AGENT]
    scheme = card.security_schemes["apiKey"].http_auth_security_scheme
    assert scheme.scheme == "Bearer"
    assert [list(r.schemes) for r in card.security_requirements] == [["apiKey"]]
    with pytest.raises(AgentCardResolutionError) as anonymous:
        await A2ACardResolver(http, owner.agent_url).get_agent_card()
    assert anonymous.value.status_code == 401


@pytest.mark.asyncio
async def test_a_message_is_answered_and_a_follow_up_continues_its_context(
    http: httpx.AsyncClient, owner: Caller
) -> None:
    client = await client_for(http, owner, streaming=False)
    first_id = uuid.uuid4().hex

    [answered] = await responses(client, user_message("hello", message_id=first_id))
    task = answered.task
    read = await client.get_task(GetTaskRequest(id=task.id))
    [again] = await responses(client, user_message("hello", message_id=first_id))
    [follow_up] = await responses(client, user_message("again", context_id=task.context_id))

    assert task.status.state == TaskState.TASK_STATE_COMPLETED
    assert task.status.message.parts[0].text == "You said: hello"
    assert [artifact.parts[0].text for artifact in task.artifacts] == ["You said: hello"]
    assert texts(task) == [(Role.ROLE_USER, "hello"), (Role.ROLE_AGENT, "You said: hello")]
    assert task.history[0].message_id == first_id
    assert (read.id, read.context_id) == (task.id, task.context_id)
    assert read.status.state == TaskState.TASK_STATE_COMPLETED
    assert texts(read) == texts(task)
    assert again.task.id == task.id  # the same messageId: the same task, nothing queued
    assert follow_up.task.context_id == task.context_id
    assert follow_up.task.id != task.id
    assert texts(follow_up.task)[-1] == (Role.ROLE_AGENT, "You said: again")
    turns = await sync_to_async(
        lambda: list(Turn.objects.filter(thread_id=task.context_id).values_list("id", flat=True))
    )()
    assert sorted(str(turn) for turn in turns) == sorted([task.id, follow_up.task.id])


@pytest.mark.asyncio
async def test_a_streamed_task_sends_its_status_and_answer_until_completed(
    http: httpx.AsyncClient, owner: Caller
) -> None:
    client = await client_for(http, owner, streaming=True)

    events = await responses(client, user_message("stream me"))

    kinds = [event.WhichOneof("payload") for event in events]
    assert kinds[0] == "task"
    first = events[0].task
    assert first.status.state in (TaskState.TASK_STATE_SUBMITTED, TaskState.TASK_STATE_WORKING)
    states = [e.status_update.status.state for e in events if e.HasField("status_update")]
    assert states[0] == TaskState.TASK_STATE_WORKING
    assert states[-1] == TaskState.TASK_STATE_COMPLETED
    assert kinds[-1] == "status_update"
    answers = [e.artifact_update for e in events if e.HasField("artifact_update")]
    assert [a.artifact.parts[0].text for a in answers] == ["You said: stream me"]
    assert {e.status_update.task_id for e in events if e.HasField("status_update")} == {first.id}
    read = await client.get_task(GetTaskRequest(id=first.id))
    assert read.status.state == TaskState.TASK_STATE_COMPLETED
    assert texts(read)[-1] == (Role.ROLE_AGENT, "You said: stream me")


@pytest.mark.asyncio
async def test_a_slow_task_is_cancelled(http: httpx.AsyncClient, owner: Caller) -> None:
    client = await client_for(http, owner, streaming=False, polling=True)

    [submitted] = await responses(client, user_message("slow please"))
    cancelled = await client.cancel_task(CancelTaskRequest(id=submitted.task.id))
    over = await ended(client, submitted.task.id)

    assert submitted.task.status.state in (
        TaskState.TASK_STATE_SUBMITTED, TaskState.TASK_STATE_WORKING
    )  # fmt: skip
    assert cancelled.id == submitted.task.id
    assert over.status.state == TaskState.TASK_STATE_CANCELED
    assert not over.artifacts  # it never answered
    with pytest.raises(TaskNotCancelableError):
        await client.cancel_task(CancelTaskRequest(id=over.id))


@pytest.mark.asyncio
async def test_a_subscription_follows_a_running_task_to_its_end(
    http: httpx.AsyncClient, owner: Caller
) -> None:
    client = await client_for(http, owner, streaming=True, polling=True)
    [submitted] = await responses(
        await client_for(http, owner, streaming=False, polling=True), user_message("slow one")
    )

    events = [
        event async for event in client.subscribe(SubscribeToTaskRequest(id=submitted.task.id))
    ]

    assert events[0].task.id == submitted.task.id
    answers = [
        e.artifact_update.artifact.parts[0].text for e in events if e.HasField("artifact_update")
    ]
    assert answers == ["done slowly"]
    assert events[-1].status_update.status.state == TaskState.TASK_STATE_COMPLETED
    assert events[-1].status_update.status.message.parts[0].text == "done slowly"
    with pytest.raises(UnsupportedOperationError):  # a task that is over has nothing to follow
        [event async for event in client.subscribe(SubscribeToTaskRequest(id=submitted.task.id))]


@pytest.mark.asyncio
async def test_task_lists_are_refused_with_their_error(
    http: httpx.AsyncClient, owner: Caller
) -> None:
    client = await client_for(http, owner, streaming=False)

    with pytest.raises(UnsupportedOperationError):
        await client.list_tasks(ListTasksRequest())


@pytest.mark.asyncio
async def test_another_tenant_sees_neither_the_agent_nor_its_tasks(
    http: httpx.AsyncClient, owner: Caller, intruder: Caller
) -> None:
    mine = await client_for(http, owner, streaming=False)
    [answered] = await responses(mine, user_message("private"))
    task_id = answered.task.id
    as_intruder = await client_for(http, owner, streaming=False, key=intruder.api_key)
    intruders_own = await client_for(http, intruder, streaming=False)

    with pytest.raises(AgentCardResolutionError) as card:
        await card_of(http, owner, key=intruder.api_key)
    with pytest.raises(A2AClientError, match="HTTP Error 404"):
        await as_intruder.get_task(GetTaskRequest(id=task_id))
    with pytest.raises(A2AClientError, match="HTTP Error 404"):
        await responses(as_intruder, user_message("let me in"))
    with pytest.raises(TaskNotFoundError):
        await intruders_own.get_task(GetTaskRequest(id=task_id))
    with pytest.raises(TaskNotFoundError):
        await intruders_own.cancel_task(CancelTaskRequest(id=task_id))

    assert card.value.status_code == 404
    assert (await mine.get_task(GetTaskRequest(id=task_id))).status.state == (
        TaskState.TASK_STATE_COMPLETED
    )


@pytest.mark.asyncio
async def test_a_call_without_a_key_is_a_401_json_rpc_error(
    http: httpx.AsyncClient, owner: Caller
) -> None:
    body = {"jsonrpc": "2.0", "id": "1", "method": "GetTask", "params": {"id": str(uuid.uuid4())}}

    answer = await http.post(owner.agent_url, json=body, headers={"A2A-Version": "1.0"})

    assert answer.status_code == 401
    assert answer.headers["WWW-Authenticate"].startswith("Bearer")
    error = answer.json()
    assert (error["jsonrpc"], error["id"]) == ("2.0", None)  # refused before the call is read
    assert error["error"]["code"] == -32000
    assert error["error"]["data"][0]["metadata"]["code"] == "unauthenticated"

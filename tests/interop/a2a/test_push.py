"""A2A push notifications through the official SDK's client against a live server and a real
worker, delivered to a loopback receiver: a config set on a message, the config methods, the
egress guard on its URL, the tenant wall, the bounds, and its secrets sealed at rest
(docs/a2a.md "Push notifications")."""

from __future__ import annotations

import asyncio
import time
import uuid
from collections.abc import AsyncIterator

import httpx
import pytest
import pytest_asyncio
from a2a.client import A2AClientError, Client
from a2a.types import (
    AuthenticationInfo,
    CancelTaskRequest,
    DeleteTaskPushNotificationConfigRequest,
    GetTaskPushNotificationConfigRequest,
    InvalidParamsError,
    ListTaskPushNotificationConfigsRequest,
    SendMessageConfiguration,
    SendMessageRequest,
    StreamResponse,
    TaskNotFoundError,
    TaskPushNotificationConfig,
    TaskState,
)
from asgiref.sync import sync_to_async
from google.protobuf.json_format import Parse

from tests.fakes.webhook_receiver import Receiver, webhook_receiver
from tests.interop.a2a.conftest import Caller
from tests.interop.a2a.test_a2a_server import client_for, ended, responses, user_message
from tests.support import database_text
from threads.models import Turn, WebhookEndpoint

TIMEOUT_S = 30.0
TOKEN = "tok-" + uuid.uuid4().hex
CREDENTIALS = "cred-" + uuid.uuid4().hex
FINAL = (TaskState.TASK_STATE_COMPLETED, TaskState.TASK_STATE_FAILED,
         TaskState.TASK_STATE_CANCELED)  # fmt: skip


@pytest_asyncio.fixture
async def http() -> AsyncIterator[httpx.AsyncClient]:
    async with httpx.AsyncClient(timeout=60.0) as client:
        yield client


def push_config(url: str, config_id: str = "", task_id: str = "") -> TaskPushNotificationConfig:
    return TaskPushNotificationConfig(
        id=config_id, task_id=task_id, url=url, token=TOKEN,
        authentication=AuthenticationInfo(scheme="Bearer", credentials=CREDENTIALS),
    )  # fmt: skip


def with_push(
    request: SendMessageRequest, config: TaskPushNotificationConfig
) -> SendMessageRequest:
    request.configuration.CopyFrom(SendMessageConfiguration(task_push_notification_config=config))
    return request


def notifications(receiver: Receiver) -> list[tuple[dict[str, str], StreamResponse]]:
    """What the receiver got, each body parsed as the SDK's StreamResponse."""
    return [(headers, Parse(body, StreamResponse())) for headers, body, _ in receiver.received]


def states(receiver: Receiver) -> list[int]:
    return [response.status_update.status.state for _, response in notifications(receiver)]


async def final_notification(receiver: Receiver) -> list[int]:
    """The states the receiver got, once one of them ends the task."""
    deadline = time.monotonic() + TIMEOUT_S
    while not any(state in FINAL for state in states(receiver)):
        assert time.monotonic() < deadline, f"no final notification: {states(receiver)}"
        await asyncio.sleep(0.05)
    return states(receiver)


async def arrived(receiver: Receiver, count: int) -> list[int]:
    """The states the receiver got, once it got ``count`` notifications."""
    deadline = time.monotonic() + TIMEOUT_S
    while len(receiver.received) < count:
        assert time.monotonic() < deadline, f"notifications missing: {states(receiver)}"
        await asyncio.sleep(0.05)
    return states(receiver)


async def finals(receiver: Receiver, count: int) -> None:
    """Wait until the receiver got ``count`` notifications that end a task (so no delivery
    is left behind the test)."""
    deadline = time.monotonic() + TIMEOUT_S
    while sum(state in FINAL for state in states(receiver)) < count:
        assert time.monotonic() < deadline, f"final notifications missing: {states(receiver)}"
        await asyncio.sleep(0.05)


async def configs(client: Client, task_id: str) -> list[tuple[str, str, str]]:
    listed = await client.list_task_push_notification_configs(
        ListTaskPushNotificationConfigsRequest(task_id=task_id)
    )
    return [(config.id, config.task_id, config.url) for config in listed.configs]


async def slow_task(client: Client) -> str:
    [submitted] = await responses(client, user_message("slow one"))
    return submitted.task.id


@pytest.mark.asyncio
async def test_a_config_set_on_a_message_pushes_its_status_until_completed(
    http: httpx.AsyncClient, owner: Caller
) -> None:
    client = await client_for(http, owner, streaming=False)
    with webhook_receiver() as receiver:
        request = with_push(user_message("push me"), push_config(receiver.url))

        [answered] = await responses(client, request)
        await final_notification(receiver)
        got = await arrived(receiver, 2)

    task = answered.task
    assert task.status.state == TaskState.TASK_STATE_COMPLETED
    # Each update is a delivery of its own: they may arrive in either order (each status
    # carries its time).
    assert sorted(got) == [TaskState.TASK_STATE_WORKING, TaskState.TASK_STATE_COMPLETED]
    pushed = notifications(receiver)
    for headers, response in pushed:
        assert headers["x-a2a-notification-token"] == TOKEN
        assert headers["authorization"] == f"Bearer {CREDENTIALS}"
        assert headers["content-type"] == "application/json"
        assert "webhook-signature" not in headers  # not a Standard Webhooks delivery
        assert (response.status_update.task_id, response.status_update.context_id) == (
            task.id, task.context_id,
        )  # fmt: skip
    statuses = [response.status_update.status for _, response in pushed]
    [completed] = [status for status in statuses if status.state == TaskState.TASK_STATE_COMPLETED]
    assert completed.message.parts[0].text == "You said: push me"
    assert completed.timestamp.ToMicroseconds() > 0
    # The task is over and its notifications delivered: its config goes with it.
    deadline = time.monotonic() + TIMEOUT_S
    while await configs(client, task.id):
        assert time.monotonic() < deadline, "the config of a finished task was not removed"
        await asyncio.sleep(0.1)


@pytest.mark.asyncio
async def test_a_config_hears_only_its_own_task_not_the_next_one_in_its_context(
    http: httpx.AsyncClient, owner: Caller
) -> None:
    client = await client_for(http, owner, streaming=False)
    with webhook_receiver() as receiver:
        [first] = await responses(client, with_push(user_message("one"), push_config(receiver.url)))
        [second] = await responses(client, user_message("two", context_id=first.task.context_id))
        await final_notification(receiver)
        await arrived(receiver, 2)
        await ended(client, second.task.id)
        await asyncio.sleep(0.5)  # what the second task would have pushed has arrived by now

    assert second.task.status.state == TaskState.TASK_STATE_COMPLETED
    assert len(receiver.received) == 2
    assert {response.status_update.task_id for _, response in notifications(receiver)} == {
        first.task.id
    }


@pytest.mark.asyncio
async def test_configs_are_created_read_listed_and_deleted_and_only_live_ones_push(
    http: httpx.AsyncClient, owner: Caller
) -> None:
    client = await client_for(http, owner, streaming=False, polling=True)
    task_id = await slow_task(client)
    with webhook_receiver() as kept, webhook_receiver() as dropped:
        created = await client.create_task_push_notification_config(
            push_config(kept.url, "kept", task_id)
        )
        await client.create_task_push_notification_config(push_config(dropped.url, "gone", task_id))
        read = await client.get_task_push_notification_config(
            GetTaskPushNotificationConfigRequest(task_id=task_id, id="kept")
        )
        both = await configs(client, task_id)
        await client.delete_task_push_notification_config(
            DeleteTaskPushNotificationConfigRequest(task_id=task_id, id="gone")
        )
        after_delete = await configs(client, task_id)
        with pytest.raises(TaskNotFoundError):
            await client.get_task_push_notification_config(
                GetTaskPushNotificationConfigRequest(task_id=task_id, id="gone")
            )
        rest = await http.get(
            f"{owner.base_url}/api/v1/webhooks",
            headers={"Authorization": f"Bearer {owner.api_key}"},
        )
        await client.cancel_task(CancelTaskRequest(id=task_id))
        got = await final_notification(kept)
        await ended(client, task_id)

    assert (created.id, created.task_id, created.url) == ("kept", task_id, kept.url)
    # Write-only: the token and the credentials are never read back; the scheme is.
    assert (read.id, read.url, read.token) == ("kept", kept.url, "")
    assert (read.authentication.scheme, read.authentication.credentials) == ("Bearer", "")
    assert both == [("kept", task_id, kept.url), ("gone", task_id, dropped.url)]
    assert after_delete == [("kept", task_id, kept.url)]
    assert got[-1] == TaskState.TASK_STATE_CANCELED
    assert dropped.received == []  # deleted before anything happened to the task
    # A task's configs are not the tenant's webhook endpoints.
    assert rest.status_code == 200
    assert rest.json()["results"] == []


@pytest.mark.asyncio
async def test_a_private_address_the_operator_did_not_allow_is_refused_when_saved(
    http: httpx.AsyncClient, owner: Caller
) -> None:
    client = await client_for(http, owner, streaming=False, polling=True)
    task_id = await slow_task(client)
    private = "http://10.20.30.40/hook"
    turns_before = await sync_to_async(Turn.objects.filter(tenant=owner.tenant).count)()

    with pytest.raises(InvalidParamsError) as on_create:
        await client.create_task_push_notification_config(push_config(private, "x", task_id))
    with pytest.raises(InvalidParamsError) as on_send:
        await responses(client, with_push(user_message("hi"), push_config(private)))
    listed = await configs(client, task_id)
    await client.cancel_task(CancelTaskRequest(id=task_id))

    assert on_create.value.message.startswith("url may not be used")
    assert "10.20.30.40" in on_create.value.message
    assert on_send.value.message.startswith("configuration.taskPushNotificationConfig.url")
    assert await sync_to_async(Turn.objects.filter(tenant=owner.tenant).count)() == turns_before
    assert listed == []


@pytest.mark.asyncio
async def test_another_tenant_can_neither_see_nor_delete_a_config(
    http: httpx.AsyncClient, owner: Caller, intruder: Caller
) -> None:
    mine = await client_for(http, owner, streaming=False, polling=True)
    task_id = await slow_task(mine)
    intruders_own = await client_for(http, intruder, streaming=False)
    as_intruder = await client_for(http, owner, streaming=False, key=intruder.api_key)
    by_id = GetTaskPushNotificationConfigRequest(task_id=task_id, id="mine")
    deletion = DeleteTaskPushNotificationConfigRequest(task_id=task_id, id="mine")
    with webhook_receiver() as receiver:
        await mine.create_task_push_notification_config(push_config(receiver.url, "mine", task_id))

        with pytest.raises(TaskNotFoundError):
            await intruders_own.get_task_push_notification_config(by_id)
        with pytest.raises(TaskNotFoundError):
            await intruders_own.list_task_push_notification_configs(
                ListTaskPushNotificationConfigsRequest(task_id=task_id)
            )
        with pytest.raises(TaskNotFoundError):
            await intruders_own.delete_task_push_notification_config(deletion)
        with pytest.raises(TaskNotFoundError):
            await intruders_own.create_task_push_notification_config(
                push_config(receiver.url, "theirs", task_id)
            )
        with pytest.raises(A2AClientError, match="HTTP Error 404"):
            await as_intruder.delete_task_push_notification_config(deletion)
        listed = await configs(mine, task_id)
        await mine.cancel_task(CancelTaskRequest(id=task_id))
        await finals(receiver, 1)

    assert listed == [("mine", task_id, receiver.url)]
    assert states(receiver)[-1] == TaskState.TASK_STATE_CANCELED  # still the owner's


@pytest.mark.asyncio
async def test_a_task_takes_at_most_ten_configs_and_a_second_save_of_one_replaces_it(
    http: httpx.AsyncClient, owner: Caller
) -> None:
    client = await client_for(http, owner, streaming=False, polling=True)
    task_id = await slow_task(client)
    with webhook_receiver() as receiver:
        for n in range(10):
            await client.create_task_push_notification_config(
                push_config(f"{receiver.url}/{n}", f"c{n}", task_id)
            )
        await client.create_task_push_notification_config(
            push_config(f"{receiver.url}/again", "c0", task_id)
        )

        with pytest.raises(InvalidParamsError, match="at most 10"):
            await client.create_task_push_notification_config(
                push_config(f"{receiver.url}/10", "c10", task_id)
            )
        listed = await configs(client, task_id)
        await client.cancel_task(CancelTaskRequest(id=task_id))
        await finals(receiver, 10)

    assert len(listed) == 10
    assert ("c0", task_id, f"{receiver.url}/again") in listed
    assert ("c0", task_id, f"{receiver.url}/0") not in listed


@pytest.mark.asyncio
async def test_the_token_and_credentials_are_stored_sealed(
    http: httpx.AsyncClient, owner: Caller
) -> None:
    client = await client_for(http, owner, streaming=False, polling=True)
    task_id = await slow_task(client)
    with webhook_receiver() as receiver:
        await client.create_task_push_notification_config(
            push_config(receiver.url, "sealed", task_id)
        )

        stored = await sync_to_async(database_text)()
        rows = await sync_to_async(
            lambda: list(WebhookEndpoint.every.filter(turn_id=task_id).values("url", "body_format"))
        )()
        await client.cancel_task(CancelTaskRequest(id=task_id))
        await finals(receiver, 1)
        delivered = await sync_to_async(database_text)()

    assert rows == [{"url": receiver.url, "body_format": "a2a"}]
    assert TOKEN not in stored
    assert CREDENTIALS not in stored
    assert TOKEN not in delivered  # nor in a delivery's row or attempt log
    assert CREDENTIALS not in delivered
    assert receiver.received[-1][0]["x-a2a-notification-token"] == TOKEN

"""The Channels middleware authenticates sockets with the same keys and sessions as the API."""

from __future__ import annotations

from typing import Any

import pytest
from channels.db import database_sync_to_async
from channels.generic.websocket import AsyncJsonWebsocketConsumer
from channels.layers import get_channel_layer
from channels.routing import URLRouter
from channels.testing import WebsocketCommunicator
from django.conf import settings
from django.urls import path

from tenancy.authentication import TenantAuthMiddlewareStack
from tenancy.models import Role, Tenant
from tests.factories import make_api_key, make_session

pytestmark = [pytest.mark.asyncio, pytest.mark.django_db(transaction=True)]


class WhoAmI(AsyncJsonWebsocketConsumer):
    """Reports the principal the middleware attached, then relays one layer message."""

    async def connect(self) -> None:
        principal = self.scope["principal"]
        if principal is None:
            await self.close(code=4401)
            return
        self.group = f"{principal.tenant.id}.whoami"
        await self.channel_layer.group_add(self.group, self.channel_name)
        await self.accept()
        await self.send_json(
            {"tenant": principal.tenant.slug, "role": principal.role.value, "kind": principal.kind}
        )

    async def relay(self, event: dict[str, Any]) -> None:
        await self.send_json({"relayed": event["text"]})


application = TenantAuthMiddlewareStack(URLRouter([path("ws/whoami/", WhoAmI.as_asgi())]))


async def _connect(
    headers: list[tuple[bytes, bytes]] | None = None, subprotocols: list[str] | None = None
) -> tuple[WebsocketCommunicator, bool, int | str | None]:
    communicator = WebsocketCommunicator(
        application, "/ws/whoami/", headers=headers or [], subprotocols=subprotocols
    )
    connected, code = await communicator.connect()
    return communicator, connected, code


async def test_api_key_header_authenticates_the_socket(tenant: Tenant) -> None:
    secret = (await database_sync_to_async(make_api_key)(tenant, role=Role.MEMBER)).secret

    communicator, connected, _ = await _connect([(b"authorization", f"Bearer {secret}".encode())])

    assert connected
    assert await communicator.receive_json_from() == {
        "tenant": "acme",
        "role": "member",
        "kind": "api_key",
    }
    await communicator.disconnect()


async def test_bearer_subprotocol_authenticates_the_socket(tenant: Tenant) -> None:
    secret = (await database_sync_to_async(make_api_key)(tenant, role=Role.READ_ONLY)).secret

    communicator, connected, _ = await _connect(subprotocols=[f"bearer.{secret}"])

    assert connected
    assert (await communicator.receive_json_from())["role"] == "read_only"
    await communicator.disconnect()


async def test_session_cookie_authenticates_the_socket(tenant: Tenant) -> None:
    session_key = await database_sync_to_async(make_session)(tenant, role=Role.ADMIN)
    cookie = f"{settings.SESSION_COOKIE_NAME}={session_key}".encode()

    communicator, connected, _ = await _connect([(b"cookie", cookie)])

    assert connected
    assert await communicator.receive_json_from() == {
        "tenant": "acme",
        "role": "admin",
        "kind": "user",
    }
    await communicator.disconnect()


@pytest.mark.parametrize(
    "headers",
    [
        [],
        [(b"authorization", b"Bearer sap_abcdefghijkl_" + b"a" * 40)],
        [(b"authorization", b"Token nope")],
    ],
)
async def test_unauthenticated_socket_is_closed_4401(
    tenant: Tenant, headers: list[tuple[bytes, bytes]]
) -> None:
    _, connected, code = await _connect(headers)

    assert not connected
    assert code == 4401


async def test_group_messages_reach_the_socket_through_channels_redis(tenant: Tenant) -> None:
    assert settings.CHANNEL_LAYERS["default"]["BACKEND"] == "channels_redis.core.RedisChannelLayer"
    secret = (await database_sync_to_async(make_api_key)(tenant)).secret
    communicator, connected, _ = await _connect([(b"authorization", f"Bearer {secret}".encode())])
    assert connected
    await communicator.receive_json_from()

    layer = get_channel_layer()
    assert layer is not None
    await layer.group_send(f"{tenant.id}.whoami", {"type": "relay", "text": "hello"})

    assert await communicator.receive_json_from(timeout=5) == {"relayed": "hello"}
    await communicator.disconnect()

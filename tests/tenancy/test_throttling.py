"""Failed API-key authentications are throttled per client address and per (key prefix,
address) (tenancy.throttling): over HTTP, on event streams and on sockets, without ever
refusing a key presented from another address."""

from __future__ import annotations

import json
import secrets
import string
import time
from typing import Any

import pytest
from channels.db import database_sync_to_async
from channels.routing import URLRouter
from channels.testing import WebsocketCommunicator
from pytest_django.fixtures import Settings
from rest_framework.test import APIClient

from common.redis_client import redis_client
from config.routing import websocket_urlpatterns
from tenancy.authentication import TenantAuthMiddlewareStack
from tenancy.models import Role, Tenant
from tenancy.services import api_key_revoke
from tenancy.throttling import KEY_PREFIX, api_key_failure_record, client_address
from tests.factories import make_api_key
from threads.models import Thread

ATTACKER = "203.0.113.66"
BYSTANDER = "198.51.100.7"
_ALPHABET = string.ascii_lowercase + string.digits


def _made_up_key(prefix: str | None = None) -> str:
    prefix = prefix or "".join(secrets.choice(_ALPHABET) for _ in range(12))
    return f"sap_{prefix}_{secrets.token_urlsafe(30)}"


def _me(key: str, address: str) -> Any:
    client = APIClient(REMOTE_ADDR=address)
    return client.get("/api/v1/me", HTTP_AUTHORIZATION=f"Bearer {key}")


def test_a_hundred_bad_keys_from_one_address_are_429_after_the_limit(tenant: Tenant) -> None:
    valid = make_api_key(tenant).secret

    answers = [_me(_made_up_key(), ATTACKER) for _ in range(100)]

    assert [answer.status_code for answer in answers[:30]] == [401] * 30
    assert {answer.json()["error"]["code"] for answer in answers[:30]} == {"invalid_api_key"}
    throttled = answers[30:]
    assert [answer.status_code for answer in throttled] == [429] * 70
    error = throttled[-1].json()["error"]
    assert error["code"] == "auth_throttled"
    assert error["message"].startswith(
        "too many failed API key authentications from this address "
        "(API_KEY_FAILURES_PER_ADDRESS: 30 per 60 s); retry in "
    )
    assert error["details"]["setting"] == "API_KEY_FAILURES_PER_ADDRESS"
    assert all(1 <= int(answer["Retry-After"]) <= 60 for answer in throttled)
    assert _me(valid, BYSTANDER).status_code == 200


def test_a_valid_key_from_the_throttled_address_waits_for_the_window(
    tenant: Tenant, settings: Settings
) -> None:
    settings.API_KEY_FAILURE_WINDOW_S = 2
    valid = make_api_key(tenant).secret
    for _ in range(30):  # as fast as 30 failed requests would count, well inside the window
        api_key_failure_record(address=ATTACKER, raw_key=_made_up_key(), code="invalid_api_key")

    refused = _me(valid, ATTACKER)
    assert refused.status_code == 429
    wait = int(refused["Retry-After"])
    assert wait in (1, 2)

    time.sleep(wait + 0.05)
    assert _me(valid, ATTACKER).status_code == 200


def test_guessing_one_prefix_is_limited_per_prefix_and_address(tenant: Tenant) -> None:
    victim = make_api_key(tenant).secret
    other = make_api_key(tenant).secret
    prefix = victim.split("_")[1]
    for _ in range(10):
        assert _me(_made_up_key(prefix), ATTACKER).status_code == 401

    refused = _me(victim, ATTACKER)

    assert refused.status_code == 429
    assert refused.json()["error"]["details"]["setting"] == "API_KEY_FAILURES_PER_PREFIX"
    assert _me(victim, BYSTANDER).status_code == 200
    assert _me(other, ATTACKER).status_code == 200


def test_keys_that_prove_their_secret_are_not_counted(tenant: Tenant) -> None:
    issued = make_api_key(tenant)
    api_key_revoke(tenant=tenant, api_key_id=issued.api_key.id)

    codes = {_me(issued.secret, ATTACKER).json()["error"]["code"] for _ in range(40)}

    assert codes == {"revoked_api_key"}
    assert list(redis_client().scan_iter(match=f"{KEY_PREFIX}*")) == []


def test_a_successful_authentication_writes_nothing(tenant: Tenant) -> None:
    valid = make_api_key(tenant).secret

    assert _me(valid, ATTACKER).status_code == 200
    assert list(redis_client().scan_iter(match=f"{KEY_PREFIX}*")) == []


def test_an_event_stream_from_a_throttled_address_is_429(thread: Thread) -> None:
    valid = make_api_key(thread.tenant, role=Role.READ_ONLY).secret
    for _ in range(30):
        _me(_made_up_key(), ATTACKER)
    client = APIClient(REMOTE_ADDR=ATTACKER)

    answer = client.get(
        f"/api/v1/threads/{thread.id}/events",
        HTTP_ACCEPT="text/event-stream",
        HTTP_AUTHORIZATION=f"Bearer {valid}",
    )

    assert answer.status_code == 429
    assert json.loads(answer.content)["error"]["code"] == "auth_throttled"
    assert int(answer["Retry-After"]) >= 1


@pytest.mark.parametrize(
    ("remote_addr", "counted_as"),
    [
        ("192.0.2.1", "192.0.2.1"),
        ("2001:db8:1:2:aaaa:bbbb:cccc:dddd", "2001:db8:1:2::"),
        ("::ffff:192.0.2.1", "192.0.2.1"),
        ("not an address", None),
        (None, None),
    ],
)
def test_client_address_counts_an_ipv6_host_as_its_64_network(
    remote_addr: str | None, counted_as: str | None
) -> None:
    assert client_address(remote_addr) == counted_as


application = TenantAuthMiddlewareStack(URLRouter(websocket_urlpatterns))


async def _socket_close(key: str, address: str) -> dict[str, Any]:
    socket = WebsocketCommunicator(
        application, "/ws/events/", headers=[(b"authorization", f"Bearer {key}".encode())]
    )
    socket.scope["client"] = (address, 50000)
    connected, _ = await socket.connect()
    assert connected
    output: dict[str, Any] = await socket.receive_output(timeout=5)
    await socket.disconnect()
    return output


@pytest.mark.asyncio
@pytest.mark.django_db(transaction=True)
async def test_sockets_with_bad_keys_are_closed_4429_after_the_limit(tenant: Tenant) -> None:
    valid = (await database_sync_to_async(make_api_key)(tenant)).secret

    closes = [await _socket_close(_made_up_key(), ATTACKER) for _ in range(31)]
    refused = await _socket_close(valid, ATTACKER)

    assert [close["code"] for close in closes] == [4401] * 30 + [4429]
    assert refused["code"] == 4429
    assert refused["reason"].startswith("too many failed authentications from your address; ")
    bystander = WebsocketCommunicator(
        application, "/ws/events/", headers=[(b"authorization", f"Bearer {valid}".encode())]
    )
    bystander.scope["client"] = (BYSTANDER, 50000)
    connected, _ = await bystander.connect()
    assert connected
    assert await bystander.receive_nothing(timeout=0.3)
    await bystander.disconnect()


def test_a_clear_address_is_trusted_for_a_second_unless_this_process_counts_a_failure(
    tenant: Tenant, monkeypatch: pytest.MonkeyPatch
) -> None:
    """Good requests cost no Redis call for CLEAR_FOR_S; another process's failures are seen
    after it, this process's at once."""
    valid = make_api_key(tenant).secret
    clock = [1000.0]
    monkeypatch.setattr("tenancy.throttling.time.monotonic", lambda: clock[0])
    assert _me(valid, ATTACKER).status_code == 200  # found clear, trusted from now
    redis_client().set(f"{KEY_PREFIX}address:{ATTACKER}", 30, px=60_000)  # another process

    trusted = _me(valid, ATTACKER).status_code
    clock[0] += 1.5
    refused = _me(valid, ATTACKER).status_code

    assert (trusted, refused) == (200, 429)


def test_a_failure_counted_here_ends_the_trust_at_once(tenant: Tenant, settings: Settings) -> None:
    settings.API_KEY_FAILURES_PER_ADDRESS = 1
    valid = make_api_key(tenant).secret
    assert _me(valid, ATTACKER).status_code == 200

    failed = _me(_made_up_key(), ATTACKER).status_code

    assert (failed, _me(valid, ATTACKER).status_code) == (401, 429)

"""Request bodies have a read timeout (common.body_timeout), on a real uvicorn server over raw
sockets: a body that stops short of its Content-Length is a 408 that closes the connection,
and a slow but steady upload is not cut (fault report: a request whose Content-Length
overstates its body held the connection with no timeout)."""

from __future__ import annotations

import asyncio
import json
import socket
import time
from collections.abc import Iterator
from typing import Any

import pytest

from common.body_timeout import BodyTimeout, Message
from config.launcher import background_server
from tenancy.models import Tenant
from tests.factories import make_api_key, make_thread
from tests.support import current_database_url, server_warm_up
from threads.services.values import value_get

pytestmark = pytest.mark.django_db(transaction=True)

TIMEOUT_S = 1


@pytest.fixture
def port(transactional_db: None) -> Iterator[int]:
    overrides = {"DATABASE_URL": current_database_url(), "REQUEST_BODY_TIMEOUT_S": str(TIMEOUT_S)}
    with background_server(overrides) as (port, _):
        server_warm_up(port, timeout=30)
        yield port


def _head(method: str, path: str, length: int, extra: str = "") -> bytes:
    return (
        f"{method} {path} HTTP/1.1\r\nHost: 127.0.0.1\r\nContent-Type: application/json\r\n"
        f"Content-Length: {length}\r\n{extra}\r\n"
    ).encode()


def _read_until_closed(connection: socket.socket) -> bytes:
    """Everything the server sends until it closes the connection (a timeout fails)."""
    received = b""
    while chunk := connection.recv(65536):
        received += chunk
    return received


def _split(response: bytes) -> tuple[int, dict[str, str], bytes]:
    head, _, body = response.partition(b"\r\n\r\n")
    status_line, *lines = head.decode().split("\r\n")
    headers = {name.lower(): value.strip() for name, value in (h.split(":", 1) for h in lines)}
    return int(status_line.split()[1]), headers, body


@pytest.mark.parametrize("path", ["/api/v1/threads", "/api/v1/nothing-here"])
def test_a_body_shorter_than_its_content_length_is_a_json_408_that_closes_the_connection(
    port: int, path: str
) -> None:
    with socket.create_connection(("127.0.0.1", port), timeout=TIMEOUT_S + 10) as connection:
        started = time.monotonic()
        connection.sendall(_head("POST", path, 100) + b'{"agent": ')  # 10 of 100 bytes

        status, headers, body = _split(_read_until_closed(connection))
        waited = time.monotonic() - started

    assert status == 408
    assert TIMEOUT_S <= waited < TIMEOUT_S + 5
    assert headers["connection"] == "close"
    assert headers["content-type"] == "application/json"
    error = json.loads(body)["error"]
    assert error["code"] == "request_timeout"
    assert "REQUEST_BODY_TIMEOUT_S" in error["message"]


def test_outside_the_api_the_408_is_plain_text(port: int) -> None:
    with socket.create_connection(("127.0.0.1", port), timeout=TIMEOUT_S + 10) as connection:
        connection.sendall(_head("POST", "/admin/login/", 50) + b"user")

        status, headers, body = _split(_read_until_closed(connection))

    assert status == 408
    assert headers["content-type"].startswith("text/plain")
    assert b"stopped arriving" in body


def test_a_slow_but_steady_upload_is_not_cut(port: int, tenant: Tenant) -> None:
    """Its pieces come further apart in total than the timeout, each well within it."""
    thread = make_thread(tenant)
    key = make_api_key(tenant).secret
    body = json.dumps({"value": {"note": "x" * 40}}).encode()
    pieces = [body[i : i + 10] for i in range(0, len(body), 10)]
    head = _head(
        "PUT", f"/api/v1/threads/{thread.pk}/kv/plan", len(body),
        f"Authorization: Bearer {key}\r\nConnection: close\r\n",
    )  # fmt: skip
    with socket.create_connection(("127.0.0.1", port), timeout=30) as connection:
        connection.sendall(head)
        started = time.monotonic()
        for piece in pieces:
            time.sleep(TIMEOUT_S / 3)
            connection.sendall(piece)

        status, _, answer = _split(_read_until_closed(connection))

    assert time.monotonic() - started > 2 * TIMEOUT_S
    assert status == 200, answer[:300]
    assert value_get(thread=thread, key="plan") == {"note": "x" * 40}


@pytest.mark.asyncio
async def test_once_the_body_is_complete_receive_is_not_timed() -> None:
    """Django listens on ``receive`` for the client's disconnect while it streams a response
    (an event stream lasts for hours): that wait is not a stalled body."""
    pending: asyncio.Queue[Message] = asyncio.Queue()
    await pending.put({"type": "http.request", "body": b"{}", "more_body": False})
    sent: list[Message] = []
    heard: list[Message] = []

    async def app(scope: dict[str, Any], receive: Any, send: Any) -> None:
        await receive()  # the whole body
        heard.append(await receive())  # the disconnect, long after the timeout

    async def send(message: Message) -> None:
        sent.append(message)

    async def disconnect_later() -> None:
        await asyncio.sleep(0.3)
        await pending.put({"type": "http.disconnect"})

    later = asyncio.create_task(disconnect_later())
    scope = {"type": "http", "method": "GET", "path": "/api/v1/threads/x/events"}
    await BodyTimeout(app, timeout_s=0.1)(scope, pending.get, send)
    await later

    assert heard == [{"type": "http.disconnect"}]
    assert sent == []

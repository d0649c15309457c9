"""The client's event log against a live server: pages by sequence, and following the
thread as Server-Sent Events, live, and resumed after a dropped connection without a gap
or a repeat (the drop is a transport that cuts the first stream after a few frames)."""

from __future__ import annotations

from collections.abc import AsyncIterator, Iterator

import httpx
import pytest
from standard_agents_client import AsyncClient, Client

from tests.client.conftest import LiveApi

FRAMES_BEFORE_DROP = 6


def _frames(chunks: Iterator[bytes]) -> Iterator[bytes]:
    """The stream's frames, one at a time (``…\\n\\n``)."""
    pending = b""
    for chunk in chunks:
        pending += chunk
        while b"\n\n" in pending:
            frame, pending = pending.split(b"\n\n", 1)
            yield frame + b"\n\n"


class _CutStream(httpx.SyncByteStream):
    def __init__(self, inner: httpx.SyncByteStream, frames: int) -> None:
        self.inner, self.frames = inner, frames

    def __iter__(self) -> Iterator[bytes]:
        for count, frame in enumerate(_frames(iter(self.inner)), start=1):
            yield frame
            if count == self.frames:
                raise httpx.RemoteProtocolError("the connection dropped (test)")

    def close(self) -> None:
        self.inner.close()


class DroppingTransport(httpx.BaseTransport):
    """The real transport; the first event stream it carries drops after a few frames."""

    def __init__(self) -> None:
        self.inner = httpx.HTTPTransport()
        self.streams: list[httpx.Request] = []

    def handle_request(self, request: httpx.Request) -> httpx.Response:
        response = self.inner.handle_request(request)
        if request.headers.get("accept") != "text/event-stream":
            return response
        self.streams.append(request)
        if len(self.streams) > 1:
            return response
        assert isinstance(response.stream, httpx.SyncByteStream)
        return httpx.Response(
            response.status_code, headers=response.headers,
            stream=_CutStream(response.stream, FRAMES_BEFORE_DROP),
            extensions=response.extensions,
        )  # fmt: skip

    def close(self) -> None:
        self.inner.close()


class _AsyncCutStream(httpx.AsyncByteStream):
    def __init__(self, inner: httpx.AsyncByteStream, frames: int) -> None:
        self.inner, self.frames = inner, frames

    async def __aiter__(self) -> AsyncIterator[bytes]:
        pending, count = b"", 0
        async for chunk in self.inner:
            pending += chunk
            while b"\n\n" in pending:
                frame, pending = pending.split(b"\n\n", 1)
                yield frame + b"\n\n"
                count += 1
                if count == self.frames:
                    raise httpx.ReadError("the connection dropped (test)")

    async def aclose(self) -> None:
        await self.inner.aclose()


class AsyncDroppingTransport(httpx.AsyncBaseTransport):
    def __init__(self) -> None:
        self.inner = httpx.AsyncHTTPTransport()
        self.streams: list[httpx.Request] = []

    async def handle_async_request(self, request: httpx.Request) -> httpx.Response:
        response = await self.inner.handle_async_request(request)
        if request.headers.get("accept") != "text/event-stream":
            return response
        self.streams.append(request)
        if len(self.streams) > 1:
            return response
        assert isinstance(response.stream, httpx.AsyncByteStream)
        return httpx.Response(
            response.status_code, headers=response.headers,
            stream=_AsyncCutStream(response.stream, FRAMES_BEFORE_DROP),
            extensions=response.extensions,
        )  # fmt: skip

    async def aclose(self) -> None:
        await self.inner.aclose()


def _finished_thread(client: Client, chat: str) -> str:
    """A terminated thread whose log holds two turns (its follow ends)."""
    thread = client.threads.create(chat)
    client.turns.submit_and_wait(thread["id"], "one", timeout=30)
    client.turns.submit_and_wait(thread["id"], "two", timeout=30)
    client.threads.terminate(thread["id"])
    return thread["id"]


def test_the_event_log_pages_by_sequence(client: Client, chat: str) -> None:
    thread_id = _finished_thread(client, chat)

    first = client.events.list(thread_id, limit=5)
    later = client.events.list(thread_id, after=5, limit=5)
    every = list(client.events.iter(thread_id, limit=7))

    assert [e["sequence"] for e in first] == [1, 2, 3, 4, 5]
    assert first.next is not None
    assert first.previous is None
    assert [e["sequence"] for e in later] == [6, 7, 8, 9, 10]
    assert [e["sequence"] for e in every] == list(range(1, len(every) + 1))
    assert every[0]["type"] == "thread.created"
    assert every[-1]["type"] == "thread.terminated"


def test_following_resumes_after_a_dropped_connection_without_gap_or_repeat(
    live_api: LiveApi, client: Client, chat: str
) -> None:
    thread_id = _finished_thread(client, chat)
    stored = [e["sequence"] for e in client.events.iter(thread_id, limit=500)]
    transport = DroppingTransport()

    with Client(live_api.base_url, live_api.api_key, transport=transport) as dropping:
        followed = list(dropping.events.follow(thread_id, reconnect_delay=0.01))

    assert [e["sequence"] for e in followed] == stored
    assert followed[-1]["type"] == "thread.terminated"
    first, second = transport.streams
    assert "Last-Event-ID" not in first.headers
    resumed_at = second.headers["Last-Event-ID"]
    # the first frame is the server's `retry:`; every other frame is one event
    assert int(resumed_at) == FRAMES_BEFORE_DROP - 1
    assert second.url.params["after"] == resumed_at


def test_following_from_a_sequence_starts_after_it(client: Client, chat: str) -> None:
    thread_id = _finished_thread(client, chat)

    followed = [e["sequence"] for e in client.events.follow(thread_id, after=10)]

    assert followed[0] == 11
    assert followed == list(range(11, 11 + len(followed)))


def test_following_sees_live_events_of_a_new_turn(client: Client, chat: str) -> None:
    thread = client.threads.create(chat)
    follower = client.events.follow(thread["id"])
    assert next(follower)["type"] == "thread.created"  # the stream is open

    turn = client.turns.submit(thread["id"], "live")
    seen = []
    for event in follower:
        seen.append(event)
        if event["type"] == "turn.completed":
            break
    follower.close()

    assert seen[-1]["payload"]["turn_id"] == turn["id"]
    created = [e["payload"] for e in seen if e["type"] == "message.created"]
    assert created[0]["content"] == "live"


def test_a_terminated_thread_with_nothing_newer_follows_to_nothing(
    client: Client, chat: str
) -> None:
    thread_id = _finished_thread(client, chat)
    last = client.events.list(thread_id, after=0, limit=500).results[-1]["sequence"]
    assert last is not None

    assert list(client.events.follow(thread_id, after=last)) == []


@pytest.mark.asyncio
async def test_the_async_client_follows_and_resumes_after_a_drop(
    live_api: LiveApi, client: Client, chat: str
) -> None:
    thread_id = _finished_thread(client, chat)
    stored = [e["sequence"] for e in client.events.iter(thread_id, limit=500)]
    transport = AsyncDroppingTransport()

    async with AsyncClient(live_api.base_url, live_api.api_key, transport=transport) as dropping:
        followed = [e async for e in dropping.events.follow(thread_id, reconnect_delay=0.01)]
        paged = [e["sequence"] async for e in dropping.events.iter(thread_id, limit=4)]

    assert [e["sequence"] for e in followed] == stored
    assert paged == stored
    assert len(transport.streams) == 2
    assert transport.streams[1].headers["Last-Event-ID"] == str(FRAMES_BEFORE_DROP - 1)

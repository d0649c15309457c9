"""Live delivery under load never silently drops an event, the thread's last one included.

A real uvicorn server serves 1,000 short-lived sockets on many threads while this process
appends events to those threads through the services that store and broadcast them. Each
socket connects with ``after=`` some sequence already stored, receives until the thread's
last sequence and closes. Every thread's last broadcast, and every fifth, is dropped on its
way to the channel layer (as channels-redis may drop one): a later event reveals a gap in
the middle, but only the sockets' idle recheck of the log brings the last one. Every socket
must receive every persisted event after its ``after``, in order, each once.
"""

from __future__ import annotations

import asyncio
import json
import random
import time
from collections.abc import Iterator
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass, field

import pytest
from django.db import connection
from websockets.asyncio.client import connect

from common.tenant_wall import tenant_scope
from config.launcher import background_server
from tenancy.models import Role, Tenant
from tests.factories import make_api_key, make_thread
from tests.support import current_database_url, server_warm_up
from tests.threads.test_dropped_events import DroppedBroadcasts
from threads.models import Event, Thread
from threads.services.values import value_set
from threads.state import ThreadState

pytestmark = [pytest.mark.reliability, pytest.mark.django_db(transaction=True)]

THREADS = 50
SOCKETS_PER_THREAD = 20  # 1,000 sockets
EVENTS_PER_THREAD = 20
CONCURRENT_THREADS = 10  # ~200 sockets open at a time
RECEIVE_TIMEOUT_S = 15.0  # far above the first recheck delay: a miss fails, it does not hang


@pytest.fixture
def port(transactional_db: None) -> Iterator[int]:
    with background_server({"DATABASE_URL": current_database_url()}) as (port, _):
        server_warm_up(port, timeout=30)
        yield port


@dataclass
class Socket:
    """One socket's plan and what it received: it connects once ``joins_at`` events were
    written, with ``after`` below that (so its replay proves it subscribed); when ``awaited``
    the writer holds the thread's next event until then, so the socket surely follows the
    rest live. Received: persisted events as (sequence, event_id), or an error."""

    joins_at: int
    after: int
    awaited: bool
    subscribed: asyncio.Event = field(default_factory=asyncio.Event)
    received: list[tuple[int, str]] = field(default_factory=list)
    error: str | None = None


def _write_one(thread: Thread, index: int) -> None:
    """One event, alternating two services that store and broadcast events."""
    try:
        with tenant_scope(thread.tenant_id):  # as a flow of the thread's tenant writes
            if index % 2:
                ThreadState(thread).emit("tick", index)
            else:
                value_set(thread=thread, key="tick", value=index)
    finally:
        connection.close()


async def _follow(port: int, key: str, thread: Thread, socket: Socket) -> None:
    uri = f"ws://127.0.0.1:{port}/ws/threads/{thread.pk}/?after={socket.after}"
    headers = {"Authorization": f"Bearer {key}"}
    try:
        async with connect(
            uri, additional_headers=headers, proxy=None, compression=None, open_timeout=30
        ) as live:
            while not socket.received or socket.received[-1][0] < EVENTS_PER_THREAD:
                text = await asyncio.wait_for(live.recv(), RECEIVE_TIMEOUT_S)
                event = json.loads(text)
                if event["sequence"] is not None:
                    socket.received.append((event["sequence"], event["event_id"]))
                    socket.subscribed.set()
    except Exception as error:  # recorded, so the assertion names every socket that failed
        socket.error = f"{type(error).__name__}: {error}"
    finally:
        socket.subscribed.set()


async def _thread_under_load(
    port: int, key: str, thread: Thread, writers: ThreadPoolExecutor
) -> list[Socket]:
    """Write the thread's events while its sockets come and go: each joins at a random
    point (a few after the last event), half of them awaited by the writer, the others
    racing its next writes."""
    chooser = random.Random(str(thread.pk))
    sockets = []
    for index in range(SOCKETS_PER_THREAD):
        joins_at = chooser.randint(1, EVENTS_PER_THREAD)
        after = chooser.randint(0, joins_at - 1)
        sockets.append(Socket(joins_at=joins_at, after=after, awaited=index % 2 == 0))
    written = [asyncio.Event() for _ in range(EVENTS_PER_THREAD + 1)]
    loop = asyncio.get_running_loop()

    async def write() -> None:
        for index in range(1, EVENTS_PER_THREAD + 1):
            for socket in sockets:
                if socket.awaited and socket.joins_at < index:
                    await socket.subscribed.wait()
            await loop.run_in_executor(writers, _write_one, thread, index)
            written[index].set()

    async def join(socket: Socket) -> None:
        await written[socket.joins_at].wait()
        await _follow(port, key, thread, socket)

    await asyncio.gather(write(), *(join(socket) for socket in sockets))
    return sockets


async def _all_under_load(
    port: int, key: str, threads: list[Thread]
) -> list[tuple[Thread, Socket]]:
    limit = asyncio.Semaphore(CONCURRENT_THREADS)
    with ThreadPoolExecutor(max_workers=CONCURRENT_THREADS) as writers:

        async def limited(thread: Thread) -> list[Socket]:
            async with limit:
                return await _thread_under_load(port, key, thread, writers)

        batches = await asyncio.gather(*(limited(thread) for thread in threads))
    return [
        (thread, socket) for thread, batch in zip(threads, batches, strict=True) for socket in batch
    ]


def _logs(threads: list[Thread]) -> dict[str, list[tuple[int, str]]]:
    logs: dict[str, list[tuple[int, str]]] = {str(thread.pk): [] for thread in threads}
    rows = Event.objects.filter(thread__in=threads).order_by("thread_id", "sequence")
    for thread_id, sequence, event_id in rows.values_list("thread_id", "sequence", "id"):
        logs[str(thread_id)].append((sequence, str(event_id)))
    return logs


def test_a_thousand_short_lived_sockets_each_receive_every_persisted_event_once_in_order(
    port: int, tenant: Tenant, monkeypatch: pytest.MonkeyPatch
) -> None:
    key = make_api_key(tenant, role=Role.READ_ONLY).secret
    threads = [make_thread(tenant) for _ in range(THREADS)]
    dropped = DroppedBroadcasts(monkeypatch)
    dropped.drop = lambda envelope: (
        envelope["sequence"] == EVENTS_PER_THREAD or envelope["sequence"] % 5 == 0
    )

    started = time.monotonic()
    followed = asyncio.run(_all_under_load(port, key, threads))
    elapsed = time.monotonic() - started

    logs = _logs(threads)
    assert all(len(log) == EVENTS_PER_THREAD for log in logs.values())
    wrong = [
        (str(thread.pk), one.after, one.error, [sequence for sequence, _ in one.received])
        for thread, one in followed
        if one.received != logs[str(thread.pk)][one.after :]
    ]
    assert len(followed) == THREADS * SOCKETS_PER_THREAD
    assert wrong == [], f"{len(wrong)} of {len(followed)} sockets: {wrong[:10]}"
    assert len(dropped.dropped) == THREADS * (EVENTS_PER_THREAD // 5)  # the last is a fifth
    live = sum(1 for _, one in followed if one.joins_at < EVENTS_PER_THREAD)
    delivered = sum(len(one.received) for _, one in followed)
    print(
        f"\n{len(followed)} sockets ({live} following the last event live), "
        f"{delivered} events delivered in {elapsed:.1f}s"
    )

"""Waking turn waiters through one Redis pub/sub channel (threads.turn_signals)."""

from __future__ import annotations

import asyncio
import json
import time

import pytest
from channels.db import database_sync_to_async
from django.db import connection
from django.test import AsyncClient

from tenancy.models import Role
from tests.factories import make_api_key
from threads import turn_signals
from threads.api import turn_wait
from threads.broadcast import broadcast_flush, broadcast_many
from threads.models import Thread, Turn
from threads.services.inbox import message_queue
from threads.services.turns import turn_remove

pytestmark = pytest.mark.asyncio


async def _woken(event: asyncio.Event, within: float) -> bool:
    try:
        await asyncio.wait_for(event.wait(), within)
    except TimeoutError:
        return False
    return True


async def test_a_notice_wakes_the_waiters_of_the_threads_it_names_only() -> None:
    signals = turn_signals.waiters()
    with signals.registered("thread-a") as a, signals.registered("thread-b") as b:
        assert await signals.ready()
        broadcast_many([], wake=["thread-a"])  # as a committed turn end sends it
        assert await _woken(a, 5.0)
        assert not b.is_set()
    assert "thread-a" not in signals.waiting  # nobody waits on it any more


async def test_a_thread_is_quiet_since_a_moment_when_no_notice_named_it_after() -> None:
    signals = turn_signals.waiters()
    before_live = time.monotonic()
    with signals.registered("thread-q"):
        assert await signals.ready()
        assert not signals.quiet_since("thread-q", before_live)  # notices could slip by
        moment = time.monotonic()
        assert signals.quiet_since("thread-q", moment)
        broadcast_many([], wake=["thread-q"])
        for _ in range(50):  # the notice comes back through Redis
            if not signals.quiet_since("thread-q", moment):
                break
            await asyncio.sleep(0.1)
        assert not signals.quiet_since("thread-q", moment)
        assert signals.quiet_since("thread-other", moment)
        assert signals.quiet_since("thread-q", time.monotonic())
        assert not signals.quiet_since("thread-q", moment - turn_signals.HEARD_KEEP_S)


def _checked_out() -> int:
    """Connections taken from this process's pool and not given back."""
    pool = getattr(connection, "pool")  # noqa: B009 - the PostgreSQL backend's, unknown to the stubs
    stats = pool.get_stats()
    return int(stats["pool_size"]) - int(stats["pool_available"])


async def _queued_wait(thread: Thread) -> tuple[Turn, asyncio.Task[bytes]]:
    """A turn queued on ``thread`` (no worker takes it), and a task waiting for it through
    ``GET /turns/{id}/wait`` (its body, once answered)."""
    key = await database_sync_to_async(lambda: make_api_key(thread.tenant, role=Role.MEMBER))()
    turn = await database_sync_to_async(
        lambda: message_queue(thread=thread, content="hi", role="user", wake=False)
    )()

    async def wait() -> bytes:
        response = await AsyncClient().get(
            f"/api/v1/turns/{turn.pk}/wait?timeout=30",
            headers={"Authorization": f"Bearer {key.secret}"},
        )
        assert response.status_code == 200
        return b"".join([part async for part in response.streaming_content])  # type: ignore[attr-defined]

    return turn, asyncio.create_task(wait())


@pytest.mark.django_db(transaction=True)
async def test_a_wait_on_a_live_subscription_reads_its_turn_only_once_it_is_woken(
    thread: Thread, monkeypatch: pytest.MonkeyPatch
) -> None:
    """The turn was read queued when the request began and no notice named its thread
    since: the first read would find it queued, so the wait goes straight to listening."""
    monkeypatch.setattr(turn_wait, "RECHECK_S", 60.0)
    reads: list[bool] = []
    body_once_ended = turn_wait._body_once_ended

    def counted(turn: Turn, *, woken: bool = False) -> bytes | None:
        reads.append(woken)
        return body_once_ended(turn, woken=woken)

    monkeypatch.setattr(turn_wait, "_body_once_ended", counted)
    signals = turn_signals.waiters()
    with signals.registered("someone-else"):  # the process listens already
        assert await signals.ready()
        held = _checked_out()  # this test's own
        turn, waiting = await _queued_wait(thread)
        await asyncio.sleep(0.5)
        assert str(thread.pk) in signals.waiting  # it listens
        assert reads == []  # and has not read
        assert _checked_out() == held  # nor holds a database connection while it waits
        await database_sync_to_async(lambda: turn_remove(thread=thread, turn=turn))()
        body = json.loads(await asyncio.wait_for(waiting, 10))

    assert (body["done"], body["turn"]["status"]) == (True, "cancelled")
    assert reads == [True]  # one read, after the notice
    assert broadcast_flush()


@pytest.mark.django_db(transaction=True)
async def test_a_wait_answers_as_soon_as_the_turn_ends_not_at_its_next_read(
    thread: Thread, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setattr(turn_wait, "RECHECK_S", 60.0)  # only a notice can end the wait early
    turn, waiting = await _queued_wait(thread)
    await asyncio.sleep(0.5)  # the wait has read the turn (still queued) and listens
    assert not waiting.done()

    started = time.monotonic()
    await database_sync_to_async(lambda: turn_remove(thread=thread, turn=turn))()
    body = json.loads(await asyncio.wait_for(waiting, 10))
    elapsed = time.monotonic() - started

    assert (body["done"], body["turn"]["status"]) == (True, "cancelled")
    assert elapsed < 2.0, elapsed  # woken by the notice, not by a read 60 s later
    assert broadcast_flush()
    assert await database_sync_to_async(Turn.objects.filter(pk=turn.pk).count)() == 1

"""The follower's cursor: idle rechecks of the log and their back-off schedule."""

from __future__ import annotations

import json

import pytest
from channels.db import database_sync_to_async

from tenancy.models import Tenant
from tests.factories import make_thread
from threads import streams
from threads.state import ThreadState
from threads.streams import EventCursor, IdleRecheck


class Clock:
    def __init__(self) -> None:
        self.now = 1000.0

    def __call__(self) -> float:
        return self.now


def test_an_idle_recheck_backs_off_while_reads_find_nothing_and_restarts_on_an_event() -> None:
    clock = Clock()
    idle = IdleRecheck((0.5, 2.0, 5.0), clock=clock)
    assert idle.seconds_left() == 0.5

    waits = []
    for _ in range(4):
        clock.now += idle.seconds_left()
        assert idle.seconds_left() == 0
        idle.quiet()
        waits.append(idle.seconds_left())
    assert waits == [2.0, 5.0, 5.0, 5.0]

    clock.now += 1.0
    idle.heard()
    assert idle.seconds_left() == 0.5
    idle.more()
    assert idle.seconds_left() == 0


def test_an_idle_follower_reads_the_log_twice_a_minute_once_backed_off() -> None:
    clock = Clock()
    idle = IdleRecheck(clock=clock)  # the default IDLE_RECHECK_S
    start = clock.now
    reads = []
    while clock.now - start < 600:
        clock.now += idle.seconds_left()
        reads.append(clock.now - start)
        idle.quiet()

    first_minute = [at for at in reads if at < 60]
    assert first_minute == [1.0, 3.0, 8.0, 23.0, 53.0]
    assert len([at for at in reads if 300 <= at < 600]) == 10  # 2 a minute, backed off


def test_recheck_delays_must_be_positive() -> None:
    with pytest.raises(ValueError, match="positive"):
        IdleRecheck(())
    with pytest.raises(ValueError, match="positive"):
        IdleRecheck((0.5, 0.0))


@pytest.mark.asyncio
@pytest.mark.django_db(transaction=True)  # the cursor reads the log on another thread
async def test_a_recheck_finds_an_event_no_live_message_announced_once(tenant: Tenant) -> None:
    thread = await database_sync_to_async(make_thread)(tenant)
    state = ThreadState(thread)
    await database_sync_to_async(state.emit)("seen", 1)
    cursor = EventCursor(thread=thread, after=0)
    replayed = [delivery async for delivery in cursor.replay()]
    assert [d.sequence for d in replayed] == [1]
    assert await cursor.recheck() == []

    await database_sync_to_async(state.emit)("missed", 2)  # its live message never comes
    found = await cursor.recheck()

    assert [(d.type, d.sequence) for d in found] == [("custom", 2)]
    assert json.loads(found[0].text)["payload"] == {"name": "missed", "data": 2}
    assert cursor.last == 2
    assert cursor.recheck_in() == pytest.approx(streams.IDLE_RECHECK_S[0], abs=0.2)
    late = {"event_type": "custom", "sequence": 2, "json": found[0].text}
    assert await cursor.admit(late) == []  # the live message, if it comes late, is skipped
    assert await cursor.recheck() == []


@pytest.mark.asyncio
@pytest.mark.django_db(transaction=True)  # the cursor reads the log on another thread
async def test_a_live_event_postpones_the_recheck_and_an_empty_one_backs_off(
    tenant: Tenant, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setattr(streams, "IDLE_RECHECK_S", (10.0, 20.0))
    thread = await database_sync_to_async(make_thread)(tenant)
    cursor = EventCursor(thread=thread, after=0)
    assert [d async for d in cursor.replay()] == []
    assert cursor.recheck_in() == pytest.approx(10.0, abs=0.5)

    assert await cursor.recheck() == []
    assert cursor.recheck_in() == pytest.approx(20.0, abs=0.5)
    await database_sync_to_async(ThreadState(thread).emit)("live", 1)
    text = json.dumps({"type": "custom", "sequence": 1})
    await cursor.admit({"event_type": "custom", "sequence": 1, "json": text})
    assert cursor.recheck_in() == pytest.approx(10.0, abs=0.5)


@pytest.mark.asyncio
@pytest.mark.django_db(transaction=True)  # the cursor reads the log on another thread
async def test_a_recheck_that_fills_a_batch_is_due_again_at_once(
    tenant: Tenant, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setattr(streams, "REPLAY_BATCH", 2)
    thread = await database_sync_to_async(make_thread)(tenant)
    cursor = EventCursor(thread=thread, after=0)
    assert [d async for d in cursor.replay()] == []
    for index in range(3):
        await database_sync_to_async(ThreadState(thread).emit)("missed", index)

    first = await cursor.recheck()
    assert cursor.recheck_in() == 0
    second = await cursor.recheck()

    assert [d.sequence for d in first + second] == [1, 2, 3]
    assert cursor.recheck_in() > 0

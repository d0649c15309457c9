"""The per-thread lock and control signals, against the real Redis (no database needed)."""

from __future__ import annotations

import contextlib
import os
import threading
import time
import uuid
from collections.abc import Callable, Iterator
from concurrent.futures import ThreadPoolExecutor
from typing import TypedDict, cast

import pytest
import redis

from common import redis_client as redis_client_module
from common.redis_client import redis_client
from threads.services import heartbeat as heartbeat_module
from threads.services import lock as lock_module
from threads.services.heartbeat import Heartbeat
from threads.services.lock import (
    CONTROL_TTL_MS,
    LOCK_TTL_MS,
    OUTAGE_NOTE_TTL_MS,
    RENEW_EVERY_MS,
    FlowsLimitReached,
    ThreadLock,
    control_key,
    control_send,
    flows_running,
    lock_acquire,
    lock_is_held,
    lock_key,
    outage_key,
    outage_note,
    outage_noted,
    wake_key,
)

SHORT_TTL_MS = 300


class ThreadIds(TypedDict):
    tenant_id: uuid.UUID
    thread_id: uuid.UUID


@pytest.fixture
def ids() -> Iterator[ThreadIds]:
    """Fresh tenant and thread ids, so no two tests share a key; their keys are deleted after."""
    ids = ThreadIds(tenant_id=uuid.uuid4(), thread_id=uuid.uuid4())
    yield ids
    redis_client().delete(lock_key(**ids), control_key(**ids), wake_key(**ids))


def acquired(ids: ThreadIds, ttl_ms: int = LOCK_TTL_MS) -> ThreadLock:
    held = lock_acquire(**ids, ttl_ms=ttl_ms)
    assert held is not None
    return held


def pttl(key: str) -> int:
    """Milliseconds until ``key`` expires (redis-py types sync answers as maybe-awaitable)."""
    return cast(int, redis_client().pttl(key))


def ignore(signal: str) -> None:
    pass


def test_lock_and_control_keys_start_with_the_tenant_id() -> None:
    tenant_id, thread_id = uuid.uuid4(), uuid.uuid4()

    assert lock_key(tenant_id=tenant_id, thread_id=thread_id) == (
        f"{tenant_id}:thread:{thread_id}:lock"
    )
    assert control_key(tenant_id=tenant_id, thread_id=thread_id) == (
        f"{tenant_id}:thread:{thread_id}:control"
    )


def test_redis_client_is_built_once_under_concurrent_first_use(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    monkeypatch.setattr(redis_client_module, "_client", None)
    start = threading.Barrier(8)

    def first_use() -> redis.Redis:
        start.wait()
        return redis_client()

    with ThreadPoolExecutor(max_workers=8) as pool:
        clients = list(pool.map(lambda _: first_use(), range(8)))

    assert len({id(client) for client in clients}) == 1
    assert redis_client() is clients[0]


def test_acquire_sets_the_key_with_the_token_and_ttl(ids: ThreadIds) -> None:
    held = acquired(ids)

    assert held.key == lock_key(**ids)
    assert len(held.token) == 32
    assert held.ttl_ms == LOCK_TTL_MS
    assert redis_client().get(held.key) == held.token.encode()
    assert 0 < pttl(held.key) <= LOCK_TTL_MS
    assert not held.lost.is_set()


def test_second_acquire_fails_while_the_lock_is_held(ids: ThreadIds) -> None:
    held = acquired(ids)

    assert lock_acquire(**ids) is None
    assert redis_client().get(held.key) == held.token.encode()


def test_acquiring_drops_signals_left_for_a_previous_holder(ids: ThreadIds) -> None:
    control_send(**ids, signal="stop")
    control_send(**ids, signal="terminate")

    held = acquired(ids)

    assert redis_client().exists(control_key(**ids)) == 0
    received: list[str] = []
    with Heartbeat(held, **ids, on_signal=received.append):
        time.sleep(0.2)
    assert received == []


def test_a_refused_acquire_leaves_the_holders_signals_alone(ids: ThreadIds) -> None:
    held = acquired(ids)
    control_send(**ids, signal="stop")

    assert lock_acquire(**ids) is None

    received: list[str] = []
    with Heartbeat(held, **ids, on_signal=received.append):
        deadline = time.monotonic() + 2
        while not received and time.monotonic() < deadline:
            time.sleep(0.01)
    assert received == ["stop"]


def test_a_refused_acquire_can_leave_the_holder_a_wake_note(ids: ThreadIds) -> None:
    held = acquired(ids)

    assert lock_acquire(**ids) is None
    assert redis_client().exists(wake_key(**ids)) == 0
    assert lock_acquire(**ids, note_if_held=True) is None

    assert 0 < pttl(wake_key(**ids)) <= LOCK_TTL_MS
    assert held.release() is True
    assert held.woken is True
    assert redis_client().exists(wake_key(**ids)) == 0


def test_a_release_without_a_note_is_not_woken(ids: ThreadIds) -> None:
    held = acquired(ids)

    assert held.release() is True
    assert held.woken is False


def test_the_wake_note_lives_as_long_as_the_lock(ids: ThreadIds) -> None:
    held = acquired(ids, ttl_ms=SHORT_TTL_MS)
    assert lock_acquire(**ids, ttl_ms=SHORT_TTL_MS, note_if_held=True) is None

    for _ in range(3):
        time.sleep(SHORT_TTL_MS / 2000)
        assert held.renew() is True
    time.sleep(SHORT_TTL_MS / 2000)

    assert redis_client().exists(wake_key(**ids)) == 1
    assert held.release() is True
    assert held.woken is True


def test_only_the_holders_release_takes_the_wake_note(ids: ThreadIds) -> None:
    held = acquired(ids)
    assert lock_acquire(**ids, note_if_held=True) is None
    impostor = ThreadLock(key=held.key, token="0" * 32, ttl_ms=LOCK_TTL_MS, renewed_at=0.0,
                          wake_key=held.wake_key)  # fmt: skip

    assert impostor.release() is False
    assert impostor.woken is False
    assert redis_client().exists(wake_key(**ids)) == 1


def test_release_frees_the_lock_for_the_next_acquire(ids: ThreadIds) -> None:
    held = acquired(ids)

    assert held.release() is True
    assert held.release() is False
    assert lock_acquire(**ids) is not None


def test_release_with_another_token_does_not_delete_the_lock(ids: ThreadIds) -> None:
    held = acquired(ids)
    impostor = ThreadLock(key=held.key, token="0" * 32, ttl_ms=LOCK_TTL_MS, renewed_at=0.0)

    assert impostor.release() is False
    assert redis_client().get(held.key) == held.token.encode()
    assert held.release() is True


def test_lock_is_held_reports_whether_anyone_holds_the_lock(ids: ThreadIds) -> None:
    assert lock_is_held(**ids) is False

    held = acquired(ids)
    assert lock_is_held(**ids) is True

    held.release()
    assert lock_is_held(**ids) is False


def test_renew_extends_the_lock_to_a_full_ttl(ids: ThreadIds) -> None:
    held = acquired(ids, ttl_ms=SHORT_TTL_MS)
    acquired_at = held.renewed_at
    time.sleep(0.2)

    assert held.renew() is True
    assert pttl(held.key) > 200
    assert held.renewed_at > acquired_at
    assert not held.lost.is_set()


def test_expired_lock_goes_to_the_next_acquirer_and_the_old_holder_cannot_touch_it(
    ids: ThreadIds,
) -> None:
    old = acquired(ids, ttl_ms=SHORT_TTL_MS)
    time.sleep(SHORT_TTL_MS / 1000 + 0.1)

    assert lock_is_held(**ids) is False
    new = acquired(ids)

    assert old.renew() is False
    assert old.lost.is_set()
    assert old.release() is False
    assert redis_client().get(new.key) == new.token.encode()
    assert new.release() is True


def test_heartbeat_keeps_a_short_ttl_lock_alive_well_past_its_ttl(ids: ThreadIds) -> None:
    held = acquired(ids, ttl_ms=SHORT_TTL_MS)
    lost = threading.Event()

    with Heartbeat(held, **ids, on_signal=ignore, on_lost=lost.set):
        time.sleep(4 * SHORT_TTL_MS / 1000)
        assert lock_acquire(**ids) is None
        assert redis_client().get(held.key) == held.token.encode()

    assert not lost.is_set()
    assert not held.lost.is_set()
    assert held.release() is True


def test_heartbeat_delivers_control_signals_within_100_ms(ids: ThreadIds) -> None:
    held = acquired(ids)  # default TTL: the heartbeat blocks for seconds between renewals
    received: list[tuple[str, float]] = []
    both = threading.Event()

    def on_signal(signal: str) -> None:
        received.append((signal, time.monotonic()))
        if len(received) == 2:
            both.set()

    with Heartbeat(held, **ids, on_signal=on_signal):
        time.sleep(0.1)  # the heartbeat's first beat is over: the next renewal is a second away
        sent_at = time.monotonic()
        control_send(**ids, signal="stop")
        control_send(**ids, signal="terminate")
        assert both.wait(timeout=1.0)

    assert [signal for signal, _ in received] == ["stop", "terminate"]
    assert received[1][1] - sent_at < 0.1
    assert redis_client().exists(control_key(**ids)) == 0


def test_heartbeat_delivers_signals_sent_before_it_started(ids: ThreadIds) -> None:
    held = acquired(ids)
    received: list[str] = []
    delivered = threading.Event()
    control_send(**ids, signal="terminate")

    def on_signal(signal: str) -> None:
        received.append(signal)
        delivered.set()

    with Heartbeat(held, **ids, on_signal=on_signal):
        assert delivered.wait(timeout=1.0)

    assert received == ["terminate"]


def test_heartbeat_survives_an_on_signal_that_raises(ids: ThreadIds) -> None:
    held = acquired(ids)
    received: list[str] = []
    second = threading.Event()

    def on_signal(signal: str) -> None:
        received.append(signal)
        if len(received) == 1:
            raise RuntimeError("handler bug")
        second.set()

    with Heartbeat(held, **ids, on_signal=on_signal):
        control_send(**ids, signal="stop")
        control_send(**ids, signal="terminate")
        assert second.wait(timeout=1.0)

    assert received == ["stop", "terminate"]
    assert not held.lost.is_set()


def test_heartbeat_calls_on_lost_once_when_the_key_is_stolen(ids: ThreadIds) -> None:
    held = acquired(ids, ttl_ms=SHORT_TTL_MS)
    calls: list[float] = []
    lost = threading.Event()

    def on_lost() -> None:
        calls.append(time.monotonic())
        lost.set()

    with Heartbeat(held, **ids, on_signal=ignore, on_lost=on_lost):
        redis_client().set(held.key, "thief", px=5_000)
        assert lost.wait(timeout=1.0)
        time.sleep(2 * SHORT_TTL_MS / 1000)  # a live heartbeat would renew and call again

    assert len(calls) == 1
    assert held.lost.is_set()
    assert redis_client().get(held.key) == b"thief"
    assert held.release() is False
    assert redis_client().get(held.key) == b"thief"


def test_heartbeat_declares_the_lock_lost_when_redis_fails_past_the_ttl(
    ids: ThreadIds, monkeypatch: pytest.MonkeyPatch
) -> None:
    held = acquired(ids, ttl_ms=SHORT_TTL_MS)
    unreachable = redis.Redis(host="127.0.0.1", port=1, socket_connect_timeout=0.1)
    monkeypatch.setattr(heartbeat_module, "redis_client", lambda: unreachable)
    lost = threading.Event()

    with Heartbeat(held, **ids, on_signal=ignore, on_lost=lost.set):
        assert lost.wait(timeout=2.0)
        lost_after = time.monotonic() - held.renewed_at

    assert held.lost.is_set()
    assert SHORT_TTL_MS / 1000 <= lost_after < 1.0


def test_heartbeat_exit_returns_promptly_between_renewals(ids: ThreadIds) -> None:
    held = acquired(ids)  # default TTL: the next renewal is more than a second away
    heartbeat = Heartbeat(held, **ids, on_signal=ignore)
    heartbeat.__enter__()
    time.sleep(0.1)

    started = time.monotonic()
    heartbeat.__exit__(None, None, None)
    elapsed = time.monotonic() - started

    assert elapsed < 0.1
    assert elapsed < RENEW_EVERY_MS / 1000


def test_heartbeat_exit_does_not_release_the_lock(ids: ThreadIds) -> None:
    held = acquired(ids)

    with Heartbeat(held, **ids, on_signal=ignore):
        pass

    assert redis_client().get(held.key) == held.token.encode()


def test_heartbeat_rejects_a_renew_interval_not_shorter_than_the_ttl(ids: ThreadIds) -> None:
    held = acquired(ids, ttl_ms=SHORT_TTL_MS)

    with pytest.raises(ValueError, match=r"renew_every_ms must be in \(0, 300\), got 300"):
        Heartbeat(held, **ids, on_signal=ignore, renew_every_ms=SHORT_TTL_MS)
    with pytest.raises(ValueError, match=r"renew_every_ms must be in \(0, 300\), got 0"):
        Heartbeat(held, **ids, on_signal=ignore, renew_every_ms=0)


def test_control_send_queues_signals_that_expire_after_a_minute(ids: ThreadIds) -> None:
    control_send(**ids, signal="stop")
    control_send(**ids, signal="terminate")

    key = control_key(**ids)
    assert redis_client().lrange(key, 0, -1) == [b"stop", b"terminate"]
    assert CONTROL_TTL_MS - 1_000 < pttl(key) <= CONTROL_TTL_MS


def test_control_send_rejects_an_unknown_signal(ids: ThreadIds) -> None:
    with pytest.raises(ValueError, match="unknown control signal 'pause'"):
        control_send(**ids, signal="pause")

    assert redis_client().exists(control_key(**ids)) == 0


# One heartbeat thread per process beats for every held lock.

HELD = 100


@pytest.fixture
def many_ids() -> Iterator[list[ThreadIds]]:
    """:data:`HELD` fresh threads of one tenant; their keys are deleted after."""
    tenant_id = uuid.uuid4()
    many = [ThreadIds(tenant_id=tenant_id, thread_id=uuid.uuid4()) for _ in range(HELD)]
    yield many
    redis_client().delete(
        *(key(**ids) for ids in many for key in (lock_key, control_key, wake_key))
    )


class Recorder:
    """One heartbeat's callbacks: the signals and losses it was told of, and when."""

    def __init__(self) -> None:
        self.signals: list[str] = []
        self.lost_calls = 0
        self.changed = threading.Event()

    def on_signal(self, signal: str) -> None:
        self.signals.append(signal)
        self.changed.set()

    def on_lost(self) -> None:
        self.lost_calls += 1
        self.changed.set()


def held_heartbeats(
    stack: contextlib.ExitStack, many: list[ThreadIds], ttl_ms: int = LOCK_TTL_MS
) -> list[tuple[ThreadLock, Recorder]]:
    """Take every thread's lock and enter a heartbeat for it, exited with ``stack``."""
    held = []
    for ids in many:
        lock, recorder = acquired(ids, ttl_ms=ttl_ms), Recorder()
        stack.enter_context(
            Heartbeat(lock, **ids, on_signal=recorder.on_signal, on_lost=recorder.on_lost)
        )
        held.append((lock, recorder))
    return held


def wait_until(condition: Callable[[], bool], timeout: float) -> bool:
    deadline = time.monotonic() + timeout
    while not condition():
        if time.monotonic() >= deadline:
            return False
        time.sleep(0.005)
    return True


def test_a_hundred_held_heartbeats_add_at_most_two_threads(many_ids: list[ThreadIds]) -> None:
    before = threading.active_count()

    with contextlib.ExitStack() as stack:
        held = held_heartbeats(stack, many_ids)
        time.sleep(0.2)
        during = threading.active_count()

    assert during - before <= 2
    assert not any(lock.lost.is_set() for lock, _ in held)


def test_a_signal_reaches_only_its_holder_at_once_and_in_order(
    many_ids: list[ThreadIds],
) -> None:
    with contextlib.ExitStack() as stack:
        held = held_heartbeats(stack, many_ids)  # default TTL: renewals are a second apart
        time.sleep(0.2)
        target = many_ids[HELD // 2]
        _, recorder = held[HELD // 2]

        sent_at = time.monotonic()
        for signal in ("stop", "cancel", "terminate"):
            control_send(**target, signal=signal)
        assert wait_until(lambda: len(recorder.signals) == 3, timeout=0.5)
        arrived_after = time.monotonic() - sent_at
        time.sleep(0.1)

    assert arrived_after < 0.5
    assert recorder.signals == ["stop", "cancel", "terminate"]
    others = [other for other in held if other[1] is not recorder]
    assert all(other.signals == [] and other.lost_calls == 0 for _, other in others)
    assert redis_client().exists(control_key(**target)) == 0


def test_without_the_doorbell_a_signal_arrives_within_one_renewal_interval(
    ids: ThreadIds, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setattr(lock_module, "_ring_doorbell", lambda pipe, key: None)
    held = acquired(ids, ttl_ms=1_500)
    every_s = 0.5
    recorder = Recorder()

    with Heartbeat(held, **ids, on_signal=recorder.on_signal, renew_every_ms=500):
        time.sleep(0.1)
        sent_at = time.monotonic()
        control_send(**ids, signal="stop")
        assert recorder.changed.wait(timeout=2 * every_s)
        arrived_after = time.monotonic() - sent_at

    assert recorder.signals == ["stop"]
    assert arrived_after < every_s + 0.1


def test_doorbells_for_threads_nobody_here_holds_are_harmless(ids: ThreadIds) -> None:
    held = acquired(ids)
    recorder = Recorder()

    with Heartbeat(held, **ids, on_signal=recorder.on_signal, on_lost=recorder.on_lost):
        time.sleep(0.1)
        stranger = control_key(tenant_id=uuid.uuid4(), thread_id=uuid.uuid4())
        for noise in (stranger, "", "\xff not a key", control_key(**ids) + "x"):
            redis_client().publish(lock_module.DOORBELL_CHANNEL, noise)
        time.sleep(0.1)
        assert recorder.signals == []

        control_send(**ids, signal="stop")
        assert recorder.changed.wait(timeout=0.5)

    assert recorder.signals == ["stop"]
    assert recorder.lost_calls == 0


def test_a_lock_deleted_behind_its_heartbeats_back_calls_its_on_lost_once(
    many_ids: list[ThreadIds],
) -> None:
    ttl_ms = 600  # renewed every 200 ms
    with contextlib.ExitStack() as stack:
        held = held_heartbeats(stack, many_ids, ttl_ms=ttl_ms)
        victim, recorder = held[7]

        redis_client().delete(victim.key)
        assert recorder.changed.wait(timeout=1.0)
        time.sleep(3 * ttl_ms / 1000)  # several renewals of the others
        still_held = [redis_client().get(lock.key) == lock.token.encode() for lock, _ in held]

    assert recorder.lost_calls == 1
    assert victim.lost.is_set()
    others = [other for other in held if other[0] is not victim]
    assert all(other.lost_calls == 0 and not lock.lost.is_set() for lock, other in others)
    assert still_held == [lock is not victim for lock, _ in held]


def test_no_callback_runs_after_exit_returned(ids: ThreadIds) -> None:
    held = acquired(ids, ttl_ms=SHORT_TTL_MS)
    recorder = Recorder()

    with Heartbeat(held, **ids, on_signal=recorder.on_signal, on_lost=recorder.on_lost):
        time.sleep(0.05)
    control_send(**ids, signal="stop")
    redis_client().set(held.key, "thief", px=5_000)
    time.sleep(3 * SHORT_TTL_MS / 1000)

    assert recorder.signals == []
    assert recorder.lost_calls == 0
    assert redis_client().lrange(control_key(**ids), 0, -1) == [b"stop"]  # nobody popped it


def test_exit_waits_for_a_running_callback_of_its_heartbeat(ids: ThreadIds) -> None:
    held = acquired(ids)
    entered, finished = threading.Event(), threading.Event()

    def slow_on_signal(signal: str) -> None:
        entered.set()
        time.sleep(0.2)
        finished.set()

    with Heartbeat(held, **ids, on_signal=slow_on_signal):
        control_send(**ids, signal="stop")
        assert entered.wait(timeout=1.0)

    assert finished.is_set()


def test_a_forked_child_runs_its_own_heartbeat(ids: ThreadIds) -> None:
    parent_lock = acquired(ids)
    child_ids = ThreadIds(tenant_id=ids["tenant_id"], thread_id=uuid.uuid4())
    with Heartbeat(parent_lock, **ids, on_signal=ignore):  # the parent's threads run
        pid = os.fork()
        if pid == 0:  # the child reports through its exit code
            code = 1
            try:
                child_lock = acquired(child_ids)
                delivered = threading.Event()
                with Heartbeat(child_lock, **child_ids, on_signal=lambda _: delivered.set()):
                    control_send(**child_ids, signal="stop")
                    code = 0 if delivered.wait(timeout=1.0) else 2
                child_lock.release()
            finally:
                os._exit(code)
        _, status = os.waitpid(pid, 0)

    assert os.waitstatus_to_exitcode(status) == 0
    redis_client().delete(lock_key(**child_ids), control_key(**child_ids))


# A tenant's flows: counted locks --------------------------------------------------------------


def test_counted_locks_are_limited_per_tenant_and_the_refused_wait_in_order() -> None:
    tenant, other = uuid.uuid4(), uuid.uuid4()
    held = [lock_acquire(tenant_id=tenant, thread_id=uuid.uuid4(), tenant_flows=2) for _ in "ab"]
    refused = [uuid.uuid4(), uuid.uuid4()]

    for thread_id in [*refused, refused[0]]:  # refused again: it keeps its place
        with pytest.raises(FlowsLimitReached):
            lock_acquire(tenant_id=tenant, thread_id=thread_id, tenant_flows=2)
    uncounted = lock_acquire(tenant_id=tenant, thread_id=uuid.uuid4())  # a subagent's child
    elsewhere = lock_acquire(tenant_id=other, thread_id=uuid.uuid4(), tenant_flows=2)

    assert uncounted is not None
    assert elsewhere is not None
    assert (flows_running(tenant_id=tenant), flows_running(tenant_id=other)) == (2, 1)
    first, second = (cast(ThreadLock, lock) for lock in held)
    assert first.release()
    assert first.next_waiting == str(refused[0])
    assert second.release()
    assert second.next_waiting == str(refused[1])
    assert flows_running(tenant_id=tenant) == 0
    woken = lock_acquire(tenant_id=tenant, thread_id=refused[0], tenant_flows=2)
    assert woken is not None
    assert woken.release()
    assert woken.next_waiting is None


def test_a_counted_lock_keeps_its_slot_while_its_heartbeat_beats_and_frees_it_when_it_dies(
    ids: ThreadIds,
) -> None:
    lock = lock_acquire(**ids, ttl_ms=SHORT_TTL_MS, tenant_flows=1)
    assert lock is not None

    with Heartbeat(lock, **ids, on_signal=lambda _signal: None):
        time.sleep(SHORT_TTL_MS * 3 / 1000)
        assert flows_running(tenant_id=ids["tenant_id"]) == 1
        with pytest.raises(FlowsLimitReached):
            lock_acquire(tenant_id=ids["tenant_id"], thread_id=uuid.uuid4(), tenant_flows=1)
    # Its holder died: no more renewals, no release.
    time.sleep(SHORT_TTL_MS * 1.5 / 1000)

    assert flows_running(tenant_id=ids["tenant_id"]) == 0
    assert lock_acquire(tenant_id=ids["tenant_id"], thread_id=uuid.uuid4(), tenant_flows=1)


def test_an_outage_note_holds_for_every_recovery_of_the_cut_turn_and_no_other(
    ids: ThreadIds,
) -> None:
    cut, later = uuid.uuid4(), uuid.uuid4()
    nothing_noted = outage_noted(**ids, turn_id=cut)

    outage_note(**ids)
    first = outage_noted(**ids, turn_id=cut)
    superseded_and_recovered_again = outage_noted(**ids, turn_id=cut)
    another_turn = outage_noted(**ids, turn_id=later)
    outage_note(**ids)  # a new outage, cutting the later turn short
    later_after_its_own_outage = outage_noted(**ids, turn_id=later)

    assert nothing_noted is False
    assert (first, superseded_and_recovered_again) == (True, True)
    assert another_turn is False
    assert later_after_its_own_outage is True
    assert 0 < pttl(outage_key(**ids)) <= OUTAGE_NOTE_TTL_MS
    redis_client().delete(outage_key(**ids))

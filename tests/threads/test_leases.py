"""Counted leases in Redis (threads.services.leases): a cap per tenant and name, released by
their holder, expired when their holder is gone."""

from __future__ import annotations

import threading
import time
import uuid
from collections.abc import Callable
from typing import cast

import pytest

from common.redis_client import redis_client
from tests.support import ContextThread
from threads.services.leases import (
    _QUEUED_ACQUIRE_LUA,
    Lease,
    LeaseLimitReached,
    lease_acquire,
    lease_count,
    lease_key,
    lease_wait,
)


def _tenant() -> str:
    return str(uuid.uuid4())


def test_leases_are_granted_up_to_the_limit_then_refused_with_when_to_retry() -> None:
    tenant = _tenant()
    held = [lease_acquire(tenant_id=tenant, name="jobs", limit=2, ttl_ms=8_000) for _ in "ab"]

    with pytest.raises(LeaseLimitReached) as refused:
        lease_acquire(tenant_id=tenant, name="jobs", limit=2, ttl_ms=8_000)

    assert (refused.value.limit, refused.value.retry_after_s) == (2, 8)
    assert lease_count(tenant_id=tenant, name="jobs") == 2
    assert all(lease.release() for lease in held)


def test_leases_are_counted_per_tenant_and_per_name() -> None:
    tenant, other = _tenant(), _tenant()
    lease_acquire(tenant_id=tenant, name="jobs", limit=1, ttl_ms=5_000)

    lease_acquire(tenant_id=other, name="jobs", limit=1, ttl_ms=5_000)
    lease_acquire(tenant_id=tenant, name="exports", limit=1, ttl_ms=5_000)

    assert lease_count(tenant_id=tenant, name="jobs") == 1
    assert lease_count(tenant_id=other, name="jobs") == 1
    assert lease_key(tenant_id=tenant, name="jobs") == f"{tenant}:leases:jobs"


def test_a_released_lease_frees_its_slot_once() -> None:
    tenant = _tenant()
    lease = lease_acquire(tenant_id=tenant, name="jobs", limit=1, ttl_ms=5_000)

    assert lease.release() is True
    assert lease.release() is False  # a second release gives back nothing
    again = lease_acquire(tenant_id=tenant, name="jobs", limit=1, ttl_ms=5_000)
    assert lease_count(tenant_id=tenant, name="jobs") == 1
    again.release()


def test_a_lease_its_holder_never_releases_expires_and_frees_its_slot() -> None:
    """A crashed process cannot keep a tenant's slot for longer than the lease's ttl."""
    tenant = _tenant()
    lease_acquire(tenant_id=tenant, name="jobs", limit=1, ttl_ms=100)
    with pytest.raises(LeaseLimitReached):
        lease_acquire(tenant_id=tenant, name="jobs", limit=1, ttl_ms=100)

    time.sleep(0.15)

    taken = lease_acquire(tenant_id=tenant, name="jobs", limit=1, ttl_ms=5_000)
    assert lease_count(tenant_id=tenant, name="jobs") == 1
    taken.release()


def test_an_idle_tenant_leaves_no_key_behind() -> None:
    tenant = _tenant()
    key = lease_key(tenant_id=tenant, name="jobs")
    lease_acquire(tenant_id=tenant, name="jobs", limit=3, ttl_ms=100)
    lease_acquire(tenant_id=tenant, name="jobs", limit=3, ttl_ms=300)

    ttl_ms = cast(int, redis_client().pttl(key))
    assert 100 < ttl_ms <= 300  # the set lives as long as its last lease
    time.sleep(0.35)
    assert redis_client().exists(key) == 0


def test_retry_after_counts_from_the_oldest_lease_and_is_at_least_one_second() -> None:
    tenant = _tenant()
    lease_acquire(tenant_id=tenant, name="jobs", limit=2, ttl_ms=400)
    lease_acquire(tenant_id=tenant, name="jobs", limit=2, ttl_ms=20_000)

    with pytest.raises(LeaseLimitReached) as refused:
        lease_acquire(tenant_id=tenant, name="jobs", limit=2, ttl_ms=20_000)

    assert refused.value.retry_after_s == 1


@pytest.mark.parametrize(("limit", "ttl_ms"), [(0, 1_000), (1, 0)])
def test_a_limit_or_ttl_below_one_is_refused(limit: int, ttl_ms: int) -> None:
    with pytest.raises(ValueError, match="at least 1"):
        lease_acquire(tenant_id=_tenant(), name="jobs", limit=limit, ttl_ms=ttl_ms)


class _Never(threading.Event):
    """A waiter nobody stops."""


def test_waiters_are_granted_in_the_order_they_asked_as_slots_free() -> None:
    tenant = _tenant()
    first = lease_acquire(tenant_id=tenant, name="jobs", limit=1, ttl_ms=5_000)
    granted: list[int] = []
    leases: dict[int, Lease] = {}

    def wait(index: int) -> None:
        lease = lease_wait(
            tenant_id=tenant, name="jobs", limit=1, ttl_ms=5_000, timeout_s=10, until=_Never()
        )
        assert lease is not None
        granted.append(index)
        leases[index] = lease

    waiters = []
    for index in range(4):  # each joins the queue before the next starts
        waiters.append(ContextThread(target=wait, args=(index,)))
        waiters[-1].start()
        _until(lambda joined=index + 1: _queued(tenant) == joined)  # type: ignore[misc]
    first.release()
    for index in range(4):
        _until(lambda granted=index: granted in leases)  # type: ignore[misc]
        assert lease_count(tenant_id=tenant, name="jobs") == 1
        leases[index].release()
    for waiter in waiters:
        waiter.join(timeout=5)

    assert granted == [0, 1, 2, 3]
    assert not redis_client().exists(f"{lease_key(tenant_id=tenant, name='jobs')}:queue")


def test_a_newcomer_does_not_pass_the_waiters_ahead_of_it() -> None:
    tenant = _tenant()
    held = lease_acquire(tenant_id=tenant, name="jobs", limit=1, ttl_ms=5_000)
    waiter = ContextThread(
        target=lambda: lease_wait(
            tenant_id=tenant, name="jobs", limit=1, ttl_ms=5_000, timeout_s=10, until=_Never()
        )
    )
    waiter.start()
    _until(lambda: _queued(tenant) == 1)
    held.release()

    newcomer = lease_wait(
        tenant_id=tenant, name="jobs", limit=1, ttl_ms=5_000, timeout_s=0.2, until=_Never()
    )

    assert newcomer is None  # the slot went to the waiter ahead, who holds it now
    waiter.join(timeout=5)
    assert lease_count(tenant_id=tenant, name="jobs") == 1


def test_a_waiter_that_times_out_or_is_stopped_holds_nothing_and_leaves_the_queue() -> None:
    tenant = _tenant()
    held = lease_acquire(tenant_id=tenant, name="jobs", limit=1, ttl_ms=5_000)
    stopped = threading.Event()
    stopped.set()
    started = time.monotonic()

    timed_out = lease_wait(
        tenant_id=tenant, name="jobs", limit=1, ttl_ms=5_000, timeout_s=0.3, until=_Never()
    )
    gave_up = lease_wait(
        tenant_id=tenant, name="jobs", limit=1, ttl_ms=5_000, timeout_s=10, until=stopped
    )

    assert (timed_out, gave_up) == (None, None)
    assert time.monotonic() - started < 2
    assert _queued(tenant) == 0
    assert lease_count(tenant_id=tenant, name="jobs") == 1
    held.release()


def test_the_place_of_a_waiter_whose_process_died_lapses() -> None:
    """A waiter that stops asking (its process was killed) is dropped from the queue within
    the queue's ttl, so the waiters behind it are not blocked for good."""
    tenant = _tenant()
    key = lease_key(tenant_id=tenant, name="jobs")
    queue = [key, f"{key}:queue", f"{key}:queue:expiry", f"{key}:queue:tickets"]
    # The dead waiter asked once, while the slot was held, then never again.
    held = lease_acquire(tenant_id=tenant, name="jobs", limit=1, ttl_ms=5_000)
    redis_client().eval(_QUEUED_ACQUIRE_LUA, 4, *queue, "dead", "1", "5000", "200")
    held.release()

    behind = lease_wait(
        tenant_id=tenant, name="jobs", limit=1, ttl_ms=5_000, timeout_s=3, until=_Never()
    )

    assert behind is not None
    behind.release()


def _queued(tenant: str) -> int:
    key = f"{lease_key(tenant_id=tenant, name='jobs')}:queue"
    return int(cast(int, redis_client().zcard(key)))


def _until(condition: Callable[[], bool], timeout_s: float = 5.0) -> None:
    deadline = time.monotonic() + timeout_s
    while not condition():
        assert time.monotonic() < deadline, "timed out"
        time.sleep(0.01)


def test_a_kept_lease_outlives_its_ttl_and_lapses_within_it_once_its_holder_is_gone() -> None:
    tenant = _tenant()
    lease = lease_acquire(tenant_id=tenant, name="jobs", limit=1, ttl_ms=300)

    with lease.kept(ttl_ms=300):
        time.sleep(1.0)  # its holder works past the ttl
        assert lease_count(tenant_id=tenant, name="jobs") == 1
    # The holder died without releasing it: no more renewals.
    time.sleep(0.4)

    assert lease_count(tenant_id=tenant, name="jobs") == 0

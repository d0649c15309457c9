"""Counted leases in Redis (threads.services.leases): a cap per tenant and name, released by
their holder, expired when their holder is gone."""

from __future__ import annotations

import time
import uuid
from typing import cast

import pytest

from common.redis_client import redis_client
from threads.services.leases import (
    LeaseLimitReached,
    lease_acquire,
    lease_count,
    lease_key,
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

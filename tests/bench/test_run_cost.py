"""``make bench run_cost`` counts a whole run's round trips, by side: the request that
starts it and the drive that answers it."""

from __future__ import annotations

import pytest

from bench.run_cost import measure, rows
from tenancy.models import Tenant

pytestmark = pytest.mark.django_db(transaction=True)


def test_a_runs_statements_transactions_and_redis_commands_are_counted_by_side(
    tenant: Tenant,
) -> None:
    web, worker = measure(tenant, runs=2)

    # The request: the thread, its turn and events in one transaction, plus the wait's reads.
    assert web.statements >= 2 * 5
    assert web.transactions >= 2
    assert web.shapes["COMMIT"] >= 2
    # The drive: the turn taken, two model calls, the tool, the end (issue 15's budget).
    assert worker.transactions >= 2 * 5
    assert any("INSERT INTO threads_log" in shape for shape in worker.shapes)
    assert worker.redis_commands > 0
    (row,) = rows(web, worker, 2)
    assert row.measured.startswith(
        f"{(web.statements + worker.statements) / 2:.1f} statements, "
        f"{(web.transactions + worker.transactions) / 2:.1f} transactions"
    )

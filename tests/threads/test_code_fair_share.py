"""Flows' sandbox calls share the runners fairly (threads.services.code.sandbox_turn): a
tenant runs ``SANDBOX_TENANT_CONCURRENCY`` code calls at once across workers and its others
wait their turn, in order, holding nothing; a wait for a runner is bounded by
``SANDBOX_WAIT_S`` with a clear error; a code tool's budget counts its run, not its wait."""

from __future__ import annotations

import threading
import time
import uuid
from collections.abc import Iterator

import pytest
from pytest_django.fixtures import Settings

from agents.documents import CodeToolDoc
from agents.registry import ToolResult
from sandbox import CodeExecution
from tests.support import ContextThread
from threads.services.code import SANDBOX_LEASE, SandboxBusy, code_pool, code_run, code_tool_run
from threads.services.leases import lease_count

# Busy for about ``ms`` of wall time, then answers "done".
SPINNER = CodeToolDoc(
    name="spin", description="Spins",
    source="export default ({ ms }) => { const end = Date.now() + ms; "
    "while (Date.now() < end) {} return 'done' }",
)  # fmt: skip


@pytest.fixture
def occupied() -> Iterator[list[CodeExecution]]:
    """Every runner of this process's pool busy with an endless loop, until the test ends."""
    pool = code_pool()
    pool.wait_ready(10)
    loops = [code_run("for (;;) {}") for _ in range(pool.size)]
    for loop in loops:
        assert loop.wait_started(5)
    yield loops
    for loop in loops:
        loop.terminate("the test is over")
    pool.wait_ready(10)


def _spin(tenant: object, ms: int, *, budget_s: float = 10) -> ToolResult:
    return code_tool_run(SPINNER, {"ms": ms}, tenant_id=str(tenant), budget_s=budget_s)


def test_a_code_tools_budget_counts_from_its_start_on_a_runner(
    occupied: list[CodeExecution], settings: Settings
) -> None:
    """It waits 1.5 s for a runner, then runs 0.5 s of its 1 s budget: it succeeds."""
    settings.SANDBOX_WAIT_S = 10
    threading.Timer(1.5, occupied[0].terminate).start()
    started = time.monotonic()

    result = _spin(uuid.uuid4(), 500, budget_s=1)

    assert result.status == "success", result.error
    assert result.result == "done"
    assert time.monotonic() - started >= 1.9


def test_a_wait_for_a_runner_is_bounded_with_an_error_naming_the_setting(
    occupied: list[CodeExecution], settings: Settings
) -> None:
    settings.SANDBOX_WAIT_S = 1
    tenant = uuid.uuid4()
    started = time.monotonic()

    with pytest.raises(SandboxBusy) as busy:
        _spin(tenant, 10)

    assert 1 <= time.monotonic() - started < 3
    assert busy.value.code == "sandbox_busy"
    assert busy.value.message == (
        "the sandbox is busy: no runner of this worker was free within 1 s (SANDBOX_WAIT_S); "
        "the code did not start"
    )
    assert lease_count(tenant_id=tenant, name=SANDBOX_LEASE) == 0  # its turn was given back


def test_a_tenant_at_its_share_waits_in_order_while_another_tenant_runs_at_once(
    settings: Settings,
) -> None:
    settings.SANDBOX_TENANT_CONCURRENCY, settings.SANDBOX_WAIT_S = 1, 10
    code_pool().wait_ready(10)
    noisy, quiet = uuid.uuid4(), uuid.uuid4()
    finished: list[tuple[str, float]] = []
    started = time.monotonic()

    def noisy_call(name: str) -> None:
        assert _spin(noisy, 700).status == "success"
        finished.append((name, time.monotonic() - started))

    first = ContextThread(target=noisy_call, args=("first",))
    first.start()
    time.sleep(0.2)  # the first holds the noisy tenant's one turn
    second = ContextThread(target=noisy_call, args=("second",))
    second.start()
    time.sleep(0.1)

    quiet_started = time.monotonic()
    assert _spin(quiet, 10).status == "success"
    quiet_s = time.monotonic() - quiet_started
    first.join(10)
    second.join(10)

    assert quiet_s < 0.5  # the other runner was free for it: the noisy tenant holds one
    assert [name for name, _ in finished] == ["first", "second"]
    assert finished[1][1] >= 1.4  # the second ran only after the first: 0.7 s each


def test_a_tenant_whose_turn_does_not_come_in_time_gets_an_error_naming_its_share(
    settings: Settings,
) -> None:
    settings.SANDBOX_TENANT_CONCURRENCY, settings.SANDBOX_WAIT_S = 1, 1
    tenant = uuid.uuid4()
    code_pool().wait_ready(10)
    holder = ContextThread(target=_spin, args=(tenant, 2500))
    holder.start()
    time.sleep(0.3)

    with pytest.raises(SandboxBusy) as busy:
        _spin(tenant, 10)

    holder.join(10)
    assert busy.value.message == (
        "the sandbox is busy: this tenant's flows already run 1 code call, the most "
        "SANDBOX_TENANT_CONCURRENCY allows at once, and this one waited 1 s (SANDBOX_WAIT_S) "
        "for its turn"
    )

"""Sandbox calls in the usage ledger: whom a call counts for (:func:`sandbox_payer`), its
one ``sandbox`` row with the CPU time its runner spent (:func:`sandbox_charge`), and the
``state.run_code`` handle that records it when its result is collected
(:class:`ChargedExecution`). A row is always recorded by the thread that waited for the call.
"""

from __future__ import annotations

import dataclasses
import math
import threading
from collections.abc import Callable, Generator
from typing import TYPE_CHECKING, Any, Final
from uuid import UUID

from common.connections import connection_returned
from threads.models import Thread, Turn
from usage.ledger import Entry, record
from usage.models import LedgerKind

if TYPE_CHECKING:
    from sandbox import CodeExecution, CodeExecutionResult

# How long a charge waits for a terminated call's runner to report its CPU time (it answers
# or is killed within the pool's cancel grace, 20 ms by default).
CPU_REPORT_WAIT_S: Final = 1.0


@dataclasses.dataclass(frozen=True)
class SandboxPayer:
    """Whom a sandbox call counts for in the usage ledger (the dimensions of its row)."""

    tenant_id: UUID
    time_zone: str = "UTC"
    agent: str = ""
    thread_id: UUID | None = None
    turn_id: UUID | None = None
    user: str = ""


def sandbox_payer(*, thread: Thread, turn: Turn | None = None) -> SandboxPayer:
    """A thread's sandbox calls count for its tenant, agent and thread, the running ``turn``
    (None at rest) and its end user (the turn's ``user``, else the thread's), as its model
    calls do. Reads the thread's tenant (a query unless it is loaded)."""
    return SandboxPayer(
        tenant_id=thread.tenant_id, time_zone=thread.tenant.time_zone, agent=thread.agent_name,
        thread_id=thread.pk, turn_id=turn.pk if turn is not None else None,
        user=(turn.user if turn is not None else "") or thread.user_id,
    )  # fmt: skip


def sandbox_charge(execution: CodeExecution, *, payer: SandboxPayer, name: str) -> bool:
    """The ledger row of a settled ``execution``: kind ``sandbox``, ``name`` (a code tool's
    name, ``code`` for a code-mode program, ``runCode``), the CPU time its runner reported in
    whole milliseconds, rounded up (for a terminated call, once its runner stopped: up to
    ``CPU_REPORT_WAIT_S``), keyed ``sandbox:<execution id>``; False when counted before.

    Call it on the thread that waited for the result, never from a done-callback: those run
    on a runner's reader thread, which has no request, transaction or connection to use."""
    return record(
        Entry(
            tenant_id=payer.tenant_id, key=f"sandbox:{execution.id}", kind=LedgerKind.SANDBOX,
            time_zone=payer.time_zone, agent=payer.agent, thread_id=payer.thread_id,
            turn_id=payer.turn_id, user=payer.user, name=name,
            cpu_ms=math.ceil(execution.cpu_ms(timeout=CPU_REPORT_WAIT_S)),
        )
    )  # fmt: skip


class ChargedExecution:
    """A ``CodeExecution`` handle (``ThreadState.run_code``'s) that records its ledger row
    (:func:`sandbox_charge`) the first time its result is collected, on the collecting
    thread: after ``result()`` returns, or on a worker thread after ``await`` (the event loop
    may not touch the database). A call whose result is never collected leaves no row."""

    def __init__(self, execution: CodeExecution, *, payer: SandboxPayer, name: str) -> None:
        self.execution = execution
        self._payer = payer
        self._name = name
        self._charged = threading.Lock()

    @property
    def id(self) -> str:
        return self.execution.id

    @property
    def running(self) -> bool:
        return self.execution.running

    @property
    def reports(self) -> list[Any]:
        return self.execution.reports

    @property
    def runner_pid(self) -> int | None:
        return self.execution.runner_pid

    def wait_started(self, timeout: float | None = None) -> bool:
        return self.execution.wait_started(timeout)

    def add_done_callback(self, callback: Callable[[CodeExecutionResult], None]) -> None:
        self.execution.add_done_callback(callback)

    def terminate(self, reason: str | None = None) -> None:
        self.execution.terminate(reason)

    def result(self, timeout: float | None = None) -> CodeExecutionResult:
        """The settled result (``CodeExecution.result``), its row recorded first."""
        outcome = self.execution.result(timeout)
        self._charge()
        return outcome

    def __await__(self) -> Generator[Any, None, CodeExecutionResult]:
        return self._collect().__await__()

    async def _collect(self) -> CodeExecutionResult:
        outcome = await self.execution
        await connection_returned(self._charge)()
        return outcome

    def _charge(self) -> None:
        if not self._charged.acquire(blocking=False):  # held once charged: one row per handle
            return
        try:
            sandbox_charge(self.execution, payer=self._payer, name=self._name)
        except BaseException:
            self._charged.release()  # the next collection tries again
            raise

"""Code execution for threads (ARCHITECTURE §8): ``run_code`` on this process's warm runner
pool, tied to a flow's abort signal; code tools; results in the spec's JSON shape. Who may
start code from the run-code endpoint is :mod:`threads.services.code_endpoint`.

The sandbox itself (``sandbox``) knows nothing of threads: this module is the only door to
it, so the pool's size, the budgets and the limits have one home. Every sandbox call leaves
one ``sandbox`` row in the usage ledger (:mod:`threads.services.code_usage`).
"""

from __future__ import annotations

import asyncio
import base64
import contextlib
import dataclasses
import datetime
import json
import math
import threading
import time
from collections.abc import Iterator, Mapping
from typing import Any, Final
from uuid import UUID

from django.conf import settings

from agents.documents import CodeToolDoc
from agents.providers.base import AbortSignal as FlowAbortSignal
from agents.registry import ToolResult
from common.errors import DomainError, ValidationFailed
from common.payloads import payload_check
from sandbox import (
    UNDEFINED,
    AbortSignal,
    CodeExecution,
    CodeExecutionResult,
    ExecutionError,
    JSMap,
    RunnerPool,
    TypedArray,
    default_pool,
    run_code,
)
from threads.services.code_usage import SandboxPayer, sandbox_charge
from threads.services.leases import lease_wait

# The name of the tenant leases that count flows' sandbox calls (threads.services.leases).
SANDBOX_LEASE: Final = "sandbox"
# A flow's sandbox lease is renewed while its call runs and lapses this long after its process
# died (so a crashed worker holds its tenant's turn for seconds, not for a whole budget).
SANDBOX_LEASE_TTL_MS: Final = 5_000


def code_pool() -> RunnerPool:
    """This process's warm pool of runner processes (``SANDBOX_POOL_SIZE``, each confined to
    ``SANDBOX_CPU_LIMIT_S`` per call and ``SANDBOX_ADDRESS_SPACE_MB``), started on first use.
    Thread-safe."""
    return default_pool(
        settings.SANDBOX_POOL_SIZE,
        cpu_limit_seconds=settings.SANDBOX_CPU_LIMIT_S,
        address_space_limit_mb=settings.SANDBOX_ADDRESS_SPACE_MB,
    )


def code_run(
    source: str,
    options: Mapping[str, Any] | None = None,
    *,
    abort: FlowAbortSignal | None = None,
) -> CodeExecution:
    """Start ``source`` in a fresh sandbox and return its handle at once (DIGEST §17).

    ``abort`` (a flow's signal: stop, terminate, a lost lock) terminates the execution when
    it fires, or at once if it already has. Invalid options settle as ``link_error``.
    """
    signal = AbortSignal()
    execution = run_code(source, options, pool=code_pool(), abort_signal=signal)
    if abort is not None:
        unregister = abort.add_callback(lambda: signal.abort("the flow was stopped"))
        execution.add_done_callback(lambda _result: unregister())
    return execution


class SandboxBusy(DomainError):
    """A flow's code call did not get its start within ``SANDBOX_WAIT_S``: its tenant's turn
    (``SANDBOX_TENANT_CONCURRENCY``), then a free runner of its worker."""

    code = "sandbox_busy"


@contextlib.contextmanager
def sandbox_turn(*, tenant_id: UUID | str, abort: FlowAbortSignal | None) -> Iterator[float]:
    """One of the tenant's ``SANDBOX_TENANT_CONCURRENCY`` sandbox calls of flows, across every
    worker process, for the block: a code tool's or a ``code`` program's. The call waits its
    turn behind the tenant's earlier ones, in order, holding nothing (no runner, no database
    connection), up to ``SANDBOX_WAIT_S``; its turn is renewed while the call runs and lapses
    within seconds if its process dies. Yields the part of that wait left for a free runner
    (:func:`code_started`). Raises :class:`SandboxBusy` naming the limit when its turn did not
    come in time, or the flow was stopped while it waited."""
    limit, wait_s = settings.SANDBOX_TENANT_CONCURRENCY, settings.SANDBOX_WAIT_S
    started = time.monotonic()
    lease = lease_wait(
        tenant_id=tenant_id, name=SANDBOX_LEASE, limit=limit, ttl_ms=SANDBOX_LEASE_TTL_MS,
        timeout_s=wait_s, until=abort if abort is not None else threading.Event(),
    )  # fmt: skip
    if lease is None:
        if abort is not None and abort.is_set:
            raise SandboxBusy("the flow was stopped while its code waited for its turn")
        calls = "call" if limit == 1 else "calls"
        raise SandboxBusy(
            f"the sandbox is busy: this tenant's flows already run {limit} code {calls}, the "
            f"most SANDBOX_TENANT_CONCURRENCY allows at once, and this one waited "
            f"{wait_s:g} s (SANDBOX_WAIT_S) for its turn"
        )
    try:
        with lease.kept(ttl_ms=SANDBOX_LEASE_TTL_MS):
            yield max(0.0, wait_s - (time.monotonic() - started))
    finally:
        lease.release()


def code_started(execution: CodeExecution, *, wait_s: float) -> None:
    """Wait up to ``wait_s`` (what :func:`sandbox_turn` left of ``SANDBOX_WAIT_S``) for a free
    runner of this process to take ``execution`` (a budget counts from then); past it,
    terminate the execution and raise :class:`SandboxBusy` naming the setting."""
    if not execution.wait_started(wait_s):
        message = (
            f"the sandbox is busy: no runner of this worker was free within "
            f"{settings.SANDBOX_WAIT_S} s (SANDBOX_WAIT_S); the code did not start"
        )
        execution.terminate(message)
        raise SandboxBusy(message)


def code_settle(execution: CodeExecution, *, budget_s: float) -> CodeExecutionResult:
    """Wait up to ``budget_s`` for ``execution``; past it, terminate it with a message naming
    the budget and return that ``terminated`` result."""
    try:
        return execution.result(timeout=budget_s)
    except TimeoutError:
        execution.terminate(f"the code ran past its budget of {budget_s:g} s")
        return execution.result()


async def code_settle_async(execution: CodeExecution, *, budget_s: float) -> CodeExecutionResult:
    """:func:`code_settle` on the event loop: wait up to ``budget_s`` without holding a
    thread, then terminate the execution naming the budget. A waiter that is cancelled
    (the client went away) terminates the execution before it lets the cancellation go on."""
    try:
        async with asyncio.timeout(budget_s):
            return await execution
    except TimeoutError:
        execution.terminate(f"the code ran past its budget of {budget_s:g} s")
        return execution.result(timeout=0)  # terminate() has settled it
    except asyncio.CancelledError:
        execution.terminate("the request was cancelled")
        raise


def code_tool_run(
    tool: CodeToolDoc,
    arguments: Mapping[str, Any],
    *,
    tenant_id: UUID | str,
    abort: FlowAbortSignal | None = None,
    budget_s: float | None = None,
    entry_env: Mapping[str, str] | None = None,
    entry_options: Mapping[str, Any] | None = None,
    payer: SandboxPayer | None = None,
) -> ToolResult:
    """Run a tenant's code tool: its module's default export is called with the validated
    arguments and ``{env, options}`` (the ``env`` and ``options`` of the prompt's ``tools[]``
    entry, ``{}`` when it sets none), and what it returns (or resolves to) is the tool's
    result: a string as it is, anything else as JSON. An error, a failed link, an overrun of
    memory or of the budget (``CODE_TOOL_TIMEOUT_S``, counted from its start on a runner) is a
    failed call whose message says which. It runs in its tenant's turn (:func:`sandbox_turn`),
    which raises :class:`SandboxBusy` when it does not come in time. With a ``payer`` (a
    flow's) the call leaves its ledger row (:mod:`threads.services.code_usage`)."""
    extension = "ts" if tool.language == "typescript" else "js"
    context = {"env": dict(entry_env or {}), "options": dict(entry_options or {})}
    options = {
        "language": tool.language,
        "filename": f"{tool.name}.{extension}",
        "execute": {"fn": "default", "args": [dict(arguments), context]},
    }
    budget = settings.CODE_TOOL_TIMEOUT_S if budget_s is None else budget_s
    with sandbox_turn(tenant_id=tenant_id, abort=abort) as runner_wait_s:
        execution = code_run(tool.source, options, abort=abort)
        code_started(execution, wait_s=runner_wait_s)
        result = code_settle(execution, budget_s=budget)
    if payer is not None:
        sandbox_charge(execution, payer=payer, name=tool.name)
    if result.status == "success":
        value = plain(result.result)
        problem = unstorable(value)
        if problem is not None:
            return ToolResult.failure(problem, code="code_unstorable_result")
        if value is None:
            return ToolResult.success("")
        return ToolResult.success(value if isinstance(value, str) else json.dumps(value))
    return ToolResult.failure(_failure_text(result), code=f"code_{result.status}")


def _failure_text(result: CodeExecutionResult) -> str:
    error = result.error
    if error is None:
        return f"the code tool ended with status {result.status}"
    where = ""
    if error.line is not None:
        column = f":{error.column}" if error.column is not None else ""
        where = f" ({error.filename or 'code'}:{error.line}{column})"
    prefix = {"link_error": "the code could not be loaded: ", "terminated": "terminated: "}
    return f"{prefix.get(result.status, '')}{error.name}: {error.message}{where}"


def unstorable(value: Any) -> str | None:
    """Why a result cannot be stored or sent as JSON text (a NUL, a lone surrogate, deep
    nesting: :func:`common.payloads.payload_check`), or None."""
    try:
        payload_check(value, path="result")
    except ValidationFailed as problem:
        return f"the code's {problem.field or 'result'} {problem.message}; encode it first"
    return None


def code_result_json(result: CodeExecutionResult) -> dict[str, Any]:
    """A result in the spec's shape (DIGEST §17: camelCase ``durationMs``), JSON-safe: a
    result JSON cannot carry (a lone surrogate, say) settles as an ``error``."""
    value = plain(result.result) if result.status == "success" else None
    problem = unstorable(value)
    if problem is not None:
        failure = ExecutionError(name="EncodingError", message=problem)
        result = dataclasses.replace(result, status="error", error=failure)
        value = None
    error = result.error
    return {
        "status": result.status,
        "result": value,
        "error": None
        if error is None
        else {
            "name": error.name,
            "message": _printable(error.message),
            "stack": _printable(error.stack),
            "line": error.line,
            "column": error.column,
            "filename": error.filename,
            "specifier": error.specifier,
        },
        "logs": [
            {"level": log.level, "args": _printable(plain(log.args)), "timestamp": log.timestamp}
            for log in result.logs
        ],
        "reports": _printable(plain(result.reports)),
        "durationMs": result.duration_ms,
    }


def _printable(value: Any) -> Any:
    """Diagnostics (logs, reports, messages) with each lone surrogate replaced by U+FFFD, so
    they can always be sent as JSON."""
    if isinstance(value, str):
        return value.encode("utf-16", "surrogatepass").decode("utf-16", "replace")
    if isinstance(value, Mapping):
        return {_printable(key): _printable(item) for key, item in value.items()}
    if isinstance(value, list):
        return [_printable(item) for item in value]
    return value


def plain(value: Any) -> Any:
    """A value that crossed back from the sandbox, as JSON: ``undefined`` and non-finite
    numbers become null, a Map a list of ``[key, value]`` pairs, a Set a list, a Date an
    ISO 8601 string, bytes and typed arrays ``{"type", "base64"}``."""
    if value is UNDEFINED or value is None:
        return None
    if isinstance(value, float) and not math.isfinite(value):
        return None
    if isinstance(value, str | int | float | bool):
        return value
    if isinstance(value, JSMap):
        return [[plain(key), plain(item)] for key, item in value.items()]
    if isinstance(value, Mapping):
        return {str(key): plain(item) for key, item in value.items()}
    if isinstance(value, set | frozenset | list | tuple):
        return [plain(item) for item in value]
    if isinstance(value, datetime.datetime):
        return value.isoformat()
    if isinstance(value, bytes | bytearray):
        return {"type": "Uint8Array", "base64": base64.b64encode(value).decode()}
    if isinstance(value, TypedArray):
        return {"type": value.kind, "base64": base64.b64encode(value.data).decode()}
    return str(value)

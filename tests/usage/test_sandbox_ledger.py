"""Sandbox calls in the usage ledger (threads.services.code.sandbox_charge): each code tool
call, code-mode program, ``state.run_code`` call and run-code endpoint call leaves one
``sandbox`` row with the CPU time its runner spent, in its thread, and the rollups sum them."""

from __future__ import annotations

import asyncio
import uuid
from collections.abc import Callable
from typing import Any, TypeVar

import pytest
from django.db import connection
from django.db.models import Sum
from rest_framework.test import APIClient

from agents.bundles import bundle_import
from agents.registry import tool
from tests.threads.runtime.conftest import Engine, engine, prompt  # noqa: F401 - the fixture
from threads.models import Message, Thread, Turn
from threads.state import ThreadState
from usage.models import LedgerEntry, Rollup

pytestmark = pytest.mark.django_db
T = TypeVar("T")

# About 50 ms of CPU: a fixed amount of work (a busy machine stretches its wall time only).
BUSY = "for (let i = 0; i < 1e6; i++) { n = (n + i) % 1000003; }"


def _sandbox_rows(thread_id: uuid.UUID | None = None) -> list[LedgerEntry]:
    rows = LedgerEntry.objects.filter(kind="sandbox").order_by("id")
    return list(rows if thread_id is None else rows.filter(thread_id=thread_id))


def _agent(driven: Engine, name: str, **fields: Any) -> Thread:
    driven.define(
        prompts=[prompt(name, **fields)], agents=[{"name": name, "side_a": {"prompt": name}}]
    )
    return driven.thread(name)


def _only_turn(thread: Thread) -> Turn:
    (turn,) = Turn.objects.filter(thread=thread)
    return turn


def test_a_code_tool_call_leaves_one_sandbox_row_with_its_cpu_time(engine: Engine) -> None:  # noqa: F811
    bundle_import(
        tenant=engine.tenant,
        document={"version": 1, "code_tools": [{
            "name": "crunch", "description": "Crunches numbers", "language": "typescript",
            "args_schema": {"type": "object", "properties": {}},
            "source": f"export default () => {{ let n = 0; {BUSY} return n; }}",
        }]},
    )  # fmt: skip
    thread = _agent(engine, "cruncher", tools=["crunch"])
    engine.script.tool_calls([{"name": "crunch", "arguments": {}}]).text("Crunched.")
    engine.send(thread, "crunch")

    engine.drive(thread)

    assert Message.objects.get(thread=thread, role="tool").tool_status == "success"
    (row,) = _sandbox_rows()
    turn = _only_turn(thread)
    assert (row.tenant_id, row.thread_id, row.turn_id, row.agent, row.name) == (
        engine.tenant.pk, thread.pk, turn.pk, "cruncher", "crunch",
    )  # fmt: skip
    assert row.key.startswith("sandbox:x")
    assert row.cpu_ms > 10


def test_a_code_mode_program_leaves_one_sandbox_row_named_code(engine: Engine) -> None:  # noqa: F811
    @tool(description="Says hi.")
    def greet(state: Any) -> str:
        return "hi"

    thread = _agent(engine, "coder", code_mode=True, tools=["greet"])
    source = (
        f"export default async function () {{ let n = 0; {BUSY} "
        "return `${await tools.greet({})} ${n}`; }"
    )
    engine.script.tool_calls([{"name": "code", "arguments": {"source": source}}]).text("Done.")
    engine.send(thread, "run it")

    engine.drive(thread)

    assert Message.objects.get(thread=thread, role="tool", depth=0).tool_status == "success"
    (row,) = _sandbox_rows()
    assert (row.thread_id, row.turn_id, row.agent, row.name) == (
        thread.pk, _only_turn(thread).pk, "coder", "code",
    )  # fmt: skip
    assert row.cpu_ms > 10


def test_run_code_from_a_tool_leaves_one_row_per_call_and_the_rollup_sums_them(
    engine: Engine,  # noqa: F811
) -> None:
    @tool(description="Runs code twice.")
    def twice(state: Any) -> str:
        busy = state.run_code(f"let n = 0; {BUSY} export default n;")
        light = state.run_code("export default 1")
        first, second = busy.result(timeout=30), light.result(timeout=30)
        busy.result(timeout=30)  # collecting again counts nothing more
        return f"{first.status} {second.status}"

    thread = _agent(engine, "runner", tools=["twice"])
    engine.script.tool_calls([{"name": "twice", "arguments": {}}]).text("Ran.")
    engine.send(thread, "run")

    engine.drive(thread)

    assert Message.objects.get(thread=thread, role="tool").content == "success success"
    busy, light = _sandbox_rows()
    turn = _only_turn(thread)
    assert {(row.name, row.thread_id, row.turn_id, row.agent) for row in (busy, light)} == {
        ("runCode", thread.pk, turn.pk, "runner")
    }
    assert busy.key != light.key
    assert busy.cpu_ms > 10
    assert light.cpu_ms >= 0
    for period in ("hour", "day"):
        cell = Rollup.objects.get(tenant=engine.tenant, kind="sandbox", period=period)
        assert (cell.model, cell.thread_id, cell.calls, cell.cpu_ms) == (
            "runCode", str(thread.pk), 2, busy.cpu_ms + light.cpu_ms,
        )  # fmt: skip


def test_run_code_at_rest_counts_for_the_thread_without_a_turn(thread: Thread) -> None:
    execution = ThreadState(thread).run_code("export default 6 * 7")

    assert execution.result(timeout=30).result == 42
    (row,) = _sandbox_rows()
    assert (row.thread_id, row.turn_id, row.name, row.agent) == (
        thread.pk, None, "runCode", thread.agent_name,
    )  # fmt: skip


@pytest.mark.asyncio
@pytest.mark.django_db(transaction=True)
async def test_an_awaited_run_code_counts_once_it_settles(thread: Thread) -> None:
    execution = await _closing(ThreadState(thread).run_code, "export default 'ok'")

    result = await execution

    assert result.result == "ok"
    rows = await _closing(_sandbox_rows, thread.pk)
    assert [(row.name, row.key) for row in rows] == [("runCode", f"sandbox:{execution.id}")]


async def _closing(function: Callable[..., T], *args: Any) -> T:
    """``function(*args)`` on a worker thread whose database connection is closed after."""

    def step() -> T:
        try:
            return function(*args)
        finally:
            connection.close()

    return await asyncio.to_thread(step)


def test_the_run_code_endpoint_leaves_one_row_for_its_thread(
    thread: Thread, member: APIClient
) -> None:
    response = member.post(
        f"/api/v1/threads/{thread.id}/run-code",
        {"source": f"let n = 0; {BUSY} export default n;"}, format="json",
    )  # fmt: skip

    assert response.status_code == 200
    assert response.json()["status"] == "success"
    (row,) = _sandbox_rows()
    assert (row.tenant_id, row.thread_id, row.turn_id, row.name) == (
        thread.tenant_id, thread.pk, None, "runCode",
    )  # fmt: skip
    assert row.cpu_ms > 10


def test_every_sandbox_row_of_a_tenant_is_in_its_rollups(engine: Engine) -> None:  # noqa: F811
    """Two code tools and a program in one turn: the day rollups sum the ledger exactly."""
    bundle_import(
        tenant=engine.tenant,
        document={"version": 1, "code_tools": [
            {"name": name, "description": name, "language": "javascript",
             "args_schema": {"type": "object", "properties": {}},
             "source": f"export default () => {{ let n = 0; {BUSY} return n; }}"}
            for name in ("one", "two")
        ]},
    )  # fmt: skip
    thread = _agent(engine, "many", code_mode=True, tools=["one", "two"])
    engine.script.tool_calls([
        {"name": "one", "arguments": {}, "id": "c1"}, {"name": "two", "arguments": {}, "id": "c2"},
        {"name": "code", "arguments": {"source": "export default 1"}, "id": "c3"},
    ]).text("Done.")  # fmt: skip
    engine.send(thread, "go")

    engine.drive(thread)

    rows = _sandbox_rows()
    assert sorted(row.name for row in rows) == ["code", "one", "two"]
    cells = Rollup.objects.filter(tenant=engine.tenant, kind="sandbox", period="day")
    sums = cells.aggregate(calls=Sum("calls"), cpu=Sum("cpu_ms"))
    assert sums == {"calls": 3, "cpu": sum(row.cpu_ms for row in rows)}

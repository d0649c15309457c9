"""Round trips to PostgreSQL on the hot path (issue 15): opening a thread and submitting a
turn each take one transaction of two statements, events included; a run's drive takes
one transaction per write it must commit on its own."""

from __future__ import annotations

from typing import Any

import pytest
from django.db import connection
from django.test.utils import CaptureQueriesContext

from common.db_backend.base import SYNC_SQL
from common.tenant_wall import system_scope, tenant_scope
from tests.threads.runtime.conftest import Engine, prompt
from threads.events.webhooks import subscriptions
from threads.models import Event, Thread
from threads.runtime.driver import thread_drive
from threads.services.inbox import message_queue

pytestmark = pytest.mark.django_db(transaction=True)


def _statements(queries: CaptureQueriesContext) -> list[str]:
    return [query["sql"].split()[0].upper() for query in queries.captured_queries]


def test_opening_a_thread_and_submitting_a_turn_take_one_short_transaction_each(
    engine: Engine,
) -> None:
    engine.define(prompts=[prompt("p")], agents=[{"name": "chat", "side_a": {"prompt": "p"}}])
    engine.thread("chat")  # the definitions are cached from here on
    subscriptions(engine.tenant.pk)  # and the tenant's webhooks (read once per WEBHOOK_CACHE_S)

    with CaptureQueriesContext(connection) as opened:
        thread = engine.thread("chat")
    with CaptureQueriesContext(connection) as submitted:
        message_queue(thread=thread, role="user", content="hi", wake=False)

    # The thread row, then its events; the turn with the thread's status, then both events.
    assert _statements(opened) == ["BEGIN", "INSERT", "WITH", "COMMIT"]
    assert _statements(submitted) == ["BEGIN", "WITH", "WITH", "COMMIT"]
    events = Event.objects.filter(thread=thread).order_by("sequence")
    assert list(events.values_list("type", flat=True)) == [
        "thread.created", "thread.status", "queue.changed",
    ]  # fmt: skip


def test_opening_a_thread_through_the_api_reads_no_counts_of_a_thread_just_made(
    engine: Engine, client_for: Any
) -> None:
    """A new thread nothing else wrote to has none of anything: no COUNT statement."""
    engine.define(prompts=[prompt("p")], agents=[{"name": "chat", "side_a": {"prompt": "p"}}])
    client = client_for(engine.tenant)
    assert client.post("/api/v1/threads", {"agent": "chat"}, format="json").status_code == 201
    subscriptions(engine.tenant.pk)

    with CaptureQueriesContext(connection) as opened:
        created = client.post("/api/v1/threads", {"agent": "chat"}, format="json")

    assert created.status_code == 201
    assert created.json()["counts"] == {"messages": 0, "logs": 0, "files": 0, "children": 0}
    assert [sql for sql in opened.captured_queries if "count(" in sql["sql"].lower()] == []


def _transactions(statements: list[str]) -> list[list[str]]:
    """The statements between each BEGIN and its COMMIT."""
    found: list[list[str]] = []
    current: list[str] | None = None
    for statement in statements:
        if statement == "BEGIN":
            current = []
        elif statement == "COMMIT" and current is not None:
            found.append(current)
            current = None
        elif current is not None:
            current.append(statement)
    return found


def test_a_run_commits_each_step_of_its_work_once(engine: Engine) -> None:
    """A message, a tool call, the tool, the answer: the taken turn with its message, each
    model call's pending row and its answer with its log, the tool's result with its log,
    the turn's end. The second step reads no inbox (nothing joined the turn)."""
    engine.define(
        prompts=[prompt("p", tools=["echo"])], agents=[{"name": "chat", "side_a": {"prompt": "p"}}]
    )
    # As on a worker serving the tenant: its connection already acts for the tenant.
    for _ in range(2):  # the first warms the caches (definitions, the tenant's env)
        with tenant_scope(engine.tenant.pk):
            thread = engine.thread("chat")
            message_queue(thread=thread, role="user", content="hi", wake=False)
            engine.script.tool_calls([{"name": "echo", "arguments": {"text": "x"}}]).text("done")
            with CaptureQueriesContext(connection) as driven:
                thread_drive(
                    thread_id=thread.pk, tenant_id=thread.tenant_id, runtime=engine.runtime()
                )

    statements = _statements(driven)
    transactions = _transactions(statements)
    assert len(transactions) == 7  # taken, pending, answer, tool, pending, answer, end
    # The result, its log, its ledger row (with its rollups), the events.
    assert transactions[3] == ["WITH", "INSERT", "WITH", "WITH"]
    # Each model call, tool call and the turn add their ledger row to a write that was
    # there anyway (usage.ledger); with no budget, no reservation is made. The turn's end
    # locks the thread row before it ends the turn, so it sees every input that joined it.
    assert transactions[-1][0] == "SELECT"
    assert len(statements) == 42


def test_a_connection_that_acted_for_another_context_costs_one_statement_more(
    engine: Engine,
) -> None:
    """The tenant wall sets a connection's tenant when it changes, not per statement
    (common.tenant_wall): a drive on a connection that last acted for the tenant takes no
    extra statement; one that last acted for another context takes one, its ``set_config``."""
    engine.define(prompts=[prompt("p")], agents=[{"name": "chat", "side_a": {"prompt": "p"}}])
    driven: dict[str, list[str]] = {}
    for last in ("warm-up", "tenant", "system"):
        thread = engine.thread("chat")
        message_queue(thread=thread, role="user", content="hi", wake=False)
        engine.script.text("done")
        with tenant_scope(engine.tenant.pk) if last == "tenant" else system_scope("tests"):
            Thread.objects.filter(pk=thread.pk).exists()  # the connection's last context
        with CaptureQueriesContext(connection) as queries:
            thread_drive(thread_id=thread.pk, tenant_id=thread.tenant_id, runtime=engine.runtime())
        driven[last] = [query["sql"] for query in queries.captured_queries]

    assert SYNC_SQL not in driven["tenant"]
    assert driven["system"][0] == SYNC_SQL
    assert len(driven["system"]) == len(driven["tenant"]) + 1

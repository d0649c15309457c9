"""Budgets in the engine: every model call reserves its worst case first, its output clamped
to what the tightest budget leaves; at a cap the turn pauses (``waiting_resource``, reason
``budget``) or ends (``budget_exceeded``), and a raised cap lets it carry on. In process,
with the scripted model and real PostgreSQL and Redis."""

from __future__ import annotations

import uuid
from typing import Any

from rest_framework.test import APIClient

from tests.threads.runtime.conftest import Engine, drive_with, model, priced_runtime, prompt
from threads.models import Event, Log, Thread, Turn, WebhookDelivery
from threads.runtime.stops import StopReason
from threads.services.waits import waits_release
from threads.services.webhooks import endpoint_save
from usage.budgets import budgets_forget
from usage.models import Budget, BudgetCounter, LedgerEntry, Reservation, Rollup


def looping(engine: Engine, *, prices: bool = True, steps: int = 12) -> Thread:
    """An agent whose model calls ``echo`` ``steps`` times, then answers."""
    priced = {"input_price": "1", "output_price": "2"} if prices else {}
    engine.define(
        models=[{**model(), **priced}],
        prompts=[prompt("helper", tools=["echo"])],
        agents=[{"name": "helper", "side_a": {"prompt": "helper", "max_steps": 50}}],
    )
    for n in range(steps):
        engine.script.tool_calls([{"name": "echo", "arguments": {"text": f"n{n}"}}])
    engine.script.text("done")
    return engine.thread("helper")


def budget(engine: Engine, **fields: Any) -> Budget:
    values: dict[str, Any] = {
        "name": f"b-{uuid.uuid4().hex[:6]}", "scope": "tenant", "window": "lifetime",
        "policy": "pause", **fields,
    }  # fmt: skip
    return Budget.objects.create(tenant=engine.tenant, **values)


def spent(row: Budget) -> tuple[int, int]:
    counters = BudgetCounter.objects.filter(budget=row)
    return (
        sum(c.spent_micros for c in counters),
        sum(c.spent_tokens for c in counters),
    )


def test_a_call_reserves_its_worst_case_and_sends_the_clamped_output(engine: Engine) -> None:
    thread = looping(engine, steps=0)
    cap = budget(engine, limit_tokens=2_000)
    engine.send(thread, "hi")

    drive_with(engine, thread, priced_runtime(engine))

    request = engine.script.requests[0]
    assert request.max_output_tokens is not None
    # The output allowed is what the cap leaves after the input's upper bound.
    assert 16 <= request.max_output_tokens < 2_000
    entry = LedgerEntry.objects.get(tenant=engine.tenant, kind="model")
    assert entry.thread_id == thread.pk
    assert entry.agent == "helper"
    assert entry.cost_micros == entry.input_tokens * 1 + entry.output_tokens * 2
    assert spent(cap) == (entry.cost_micros, entry.input_tokens + entry.output_tokens)
    assert not Reservation.objects.exists()
    counter = BudgetCounter.objects.get(budget=cap)
    assert (counter.reserved_micros, counter.reserved_tokens) == (0, 0)
    recorded = Event.objects.get(thread=thread, type="cost.recorded")
    assert recorded.payload["cost_micros"] == entry.cost_micros
    assert recorded.payload["reserved_max_output_tokens"] == request.max_output_tokens


def test_at_the_cap_the_turn_pauses_for_the_budget_and_never_overshoots(engine: Engine) -> None:
    thread = looping(engine)
    cap = budget(engine, limit_tokens=700, thresholds=[10])
    endpoint_save(
        tenant=engine.tenant,
        data={"url": "https://hooks.example.com/budget", "event_types": ["limit.changed"]},
    )
    engine.send(thread, "go")

    result = drive_with(engine, thread, priced_runtime(engine))

    assert result.reasons == [StopReason.WAITING_RESOURCE]
    turn = Turn.objects.get(thread=thread)
    assert turn.status == thread.status == "waiting_resource"
    assert turn.resume is not None
    waiting = turn.resume["waiting"]
    assert waiting["reason"] == "budget"
    assert waiting["budget"] == cap.name
    assert "no room left" in waiting["message"]
    calls = LedgerEntry.objects.filter(kind="model").count()
    assert 1 <= calls < 12
    assert spent(cap)[1] <= 700
    assert not Reservation.objects.exists()
    status = Event.objects.filter(thread=thread, type="thread.status").last()
    assert status is not None
    assert status.payload == {
        "status": "waiting_resource",
        "reason": "budget",
    }
    (crossed,) = Event.objects.filter(thread=thread, type="limit.changed")
    assert crossed.payload["threshold_percent"] == 10
    assert crossed.payload["budget"] == cap.name
    # Signed to the endpoints subscribed to it, like every webhook event.
    (delivery,) = WebhookDelivery.objects.filter(event_type="limit.changed")
    assert delivery.payload["payload"]["budget_id"] == str(cap.pk)


def test_a_raised_cap_lets_the_paused_turn_carry_on_to_its_end(engine: Engine) -> None:
    thread = looping(engine, steps=4)
    cap = budget(engine, limit_tokens=400)
    engine.send(thread, "go")
    drive_with(engine, thread, priced_runtime(engine))
    assert Turn.objects.get(thread=thread).status == "waiting_resource"
    steps_before = LedgerEntry.objects.filter(kind="model").count()

    Budget.objects.filter(pk=cap.pk).update(limit_tokens=100_000)
    budgets_forget(tenant_id=engine.tenant.pk)  # as the API's budget_changed does
    assert waits_release(tenant_id=engine.tenant.pk) == 1
    result = drive_with(engine, thread, priced_runtime(engine))

    turn = Turn.objects.get(thread=thread)
    assert turn.status == "completed"
    assert turn.resume is None
    assert result.reasons[-1] == StopReason.STOP_ON_RESPONSE
    # Every call is counted once: the paused step called no model.
    assert LedgerEntry.objects.filter(kind="model").count() == 5 > steps_before
    echoes = [args for name, args in engine.tool_calls if name == "echo"]
    assert echoes == ["n0", "n1", "n2", "n3"]


def test_a_stop_budget_ends_the_turn_with_budget_exceeded(engine: Engine) -> None:
    thread = looping(engine)
    budget(engine, limit_tokens=600, policy="stop")
    engine.send(thread, "go")

    result = drive_with(engine, thread, priced_runtime(engine))

    assert result.reasons == [StopReason.BUDGET_EXCEEDED]
    turn = Turn.objects.get(thread=thread)
    assert (turn.status, turn.outcome) == ("failed", "budget_exceeded")
    assert "no room left" in turn.error
    assert not Reservation.objects.exists()


def test_a_cost_cap_refuses_a_model_without_prices(engine: Engine) -> None:
    thread = looping(engine, prices=False, steps=0)
    budget(engine, limit_micros=1_000_000)
    engine.send(thread, "go")

    drive_with(engine, thread, priced_runtime(engine))

    turn = Turn.objects.get(thread=thread)
    assert turn.status == "waiting_resource"
    assert turn.resume is not None
    assert "has no prices" in turn.resume["waiting"]["message"]
    assert engine.script.requests == []


def test_a_model_without_prices_is_counted_in_tokens_with_its_cost_unknown(
    engine: Engine,
) -> None:
    thread = looping(engine, prices=False, steps=0)
    engine.send(thread, "go")

    drive_with(engine, thread, priced_runtime(engine))

    entry = LedgerEntry.objects.get(kind="model")
    assert entry.cost_micros is None
    assert entry.input_tokens > 0
    day = Rollup.objects.get(period="day", kind="model")
    assert (day.unknown_cost_calls, day.cost_micros, day.calls) == (1, 0, 1)


def test_deleting_the_thread_keeps_its_ledger_and_the_usage_api_totals_equal_it(
    engine: Engine, member: APIClient
) -> None:
    thread = looping(engine, steps=2)
    engine.send(thread, "go")
    drive_with(engine, thread, priced_runtime(engine))
    thread_id = thread.pk
    assert Log.objects.filter(thread_id=thread_id, kind="llm").count() == 3

    thread.delete()

    entries = LedgerEntry.objects.filter(thread_id=thread_id, kind="model")
    assert entries.count() == 3
    for period in ("hour", "day"):
        cells = Rollup.objects.filter(period=period, thread_id=str(thread_id), kind="model")
        assert sum(c.calls for c in cells) == 3
        assert sum(c.input_tokens for c in cells) == sum(e.input_tokens for e in entries)
        assert sum(c.cost_micros for c in cells) == sum(e.cost_micros or 0 for e in entries)
    (totals,) = member.get("/api/v1/usage").json()["results"]
    ledger = LedgerEntry.objects.filter(tenant=engine.tenant)
    assert totals["model_calls"] == ledger.filter(kind="model").count() == 3
    assert totals["tool_calls"] == ledger.filter(kind="tool").count() == 2
    assert totals["turns"] == ledger.filter(kind="turn").count() == 1
    assert totals["input_tokens"] == sum(e.input_tokens for e in entries)
    assert totals["output_tokens"] == sum(e.output_tokens for e in entries)
    assert totals["cost_micros"] == sum(e.cost_micros or 0 for e in ledger)
    assert totals["cost_known"] is True


# Visible: the read model, the turn, the estimate; refused: a reject budget -----------------


def test_the_read_model_and_the_turn_show_where_the_budgets_stand(
    engine: Engine, member: APIClient
) -> None:
    thread = looping(engine, steps=4)
    cap = budget(engine, limit_tokens=400)
    engine.send(thread, "go")
    drive_with(engine, thread, priced_runtime(engine))
    turn = Turn.objects.get(thread=thread)

    read = member.get(f"/api/v1/threads/{thread.pk}").json()
    detail = member.get(f"/api/v1/turns/{turn.pk}").json()

    assert read["status"] == "waiting_resource"
    for summary in (read["routing_limit_summary"], detail["routing_limit_summary"]):
        assert summary["waiting"]["reason"] == "budget"
        assert summary["waiting"]["budget"] == cap.name
        (row,) = summary["budgets"]
        spent_tokens = spent(cap)[1]
        assert (row["budget"], row["limit_tokens"], row["spent_tokens"]) == (
            cap.name, 400, spent_tokens,
        )  # fmt: skip
        assert row["reserved_tokens"] == 0
        assert row["remaining_tokens"] == 400 - spent_tokens
        assert summary["cost_state"] in {"near", "exhausted"}


def test_the_estimate_is_what_the_first_call_would_reserve_and_reserves_nothing(
    engine: Engine, member: APIClient
) -> None:
    thread = looping(engine, steps=0)
    budget(engine, limit_tokens=100, policy="stop", name="small")
    budget(engine, limit_micros=10_000_000, name="large")

    response = member.post(
        f"/api/v1/threads/{thread.pk}/turns/estimate", {"content": "hello"}, format="json"
    )

    assert response.status_code == 200, response.content
    body = response.json()
    assert (body["agent"], body["model"], body["cost_known"]) == ("helper", "m", True)
    assert body["input_tokens_max"] > len("hello")
    worst = body["input_tokens_max"] * 1 + body["output_tokens_max"] * 2
    assert body["worst_cost"] == f"{worst / 1_000_000:.6f}"
    by_name = {row["budget"]: row for row in body["budgets"]}
    assert by_name["small"]["fits"] is False
    assert by_name["large"]["fits"] is True
    assert body["would"] == "stop"
    assert not Reservation.objects.exists()
    assert not BudgetCounter.objects.exists()
    unknown = member.post(
        f"/api/v1/threads/{thread.pk}/turns/estimate", {"contents": "x"}, format="json"
    )
    assert unknown.status_code == 400
    assert unknown.json()["error"]["field"] == "contents"


def test_a_reject_budget_with_nothing_left_refuses_new_turns_with_402(
    engine: Engine, member: APIClient
) -> None:
    thread = looping(engine, steps=0)
    cap = budget(engine, limit_tokens=50, policy="reject", name="hard")
    counter = BudgetCounter.objects.create(
        tenant=engine.tenant, budget=cap, subject="", window_start=0, spent_tokens=50
    )
    turns_before = Turn.objects.count()

    response = member.post(
        f"/api/v1/threads/{thread.pk}/messages", {"content": "more"}, format="json"
    )

    assert response.status_code == 402, response.content
    error = response.json()["error"]
    assert error["code"] == "budget_exceeded"
    assert "'hard'" in error["message"]
    assert Turn.objects.count() == turns_before  # nothing was written
    counter.spent_tokens = 10
    counter.save()
    accepted = member.post(
        f"/api/v1/threads/{thread.pk}/messages", {"content": "more"}, format="json"
    )
    assert accepted.status_code == 202


def test_a_turn_waiting_for_its_budget_ends_cancelled_when_the_thread_is_stopped(
    engine: Engine, member: APIClient, wakes: list[str]
) -> None:
    thread = looping(engine, steps=4)
    budget(engine, limit_tokens=400)
    engine.send(thread, "go")
    drive_with(engine, thread, priced_runtime(engine))
    assert Turn.objects.get(thread=thread).status == "waiting_resource"

    stopped = member.post(f"/api/v1/threads/{thread.pk}/stop", format="json")
    drive_with(engine, thread, priced_runtime(engine))

    assert stopped.status_code in (200, 202), stopped.content
    turn = Turn.objects.get(thread=thread)
    assert turn.status == "cancelled"
    thread.refresh_from_db()
    assert thread.status == "cancelled"
    assert thread.paused_turn_id is None
    assert not Reservation.objects.exists()

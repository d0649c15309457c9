"""Recurring schedules in process (real PostgreSQL and Redis; the clock is passed, nothing
sleeps): slots in a time zone, a run at the next slot, one run after an outage of several
slots, pause and resume, per-agent runs on new threads, effects, and the API's checks."""

from __future__ import annotations

from collections.abc import Callable, Iterator
from datetime import UTC, datetime
from typing import Any

import pytest
from rest_framework.test import APIClient

from agents.registry import effect, use_registry
from common.time import now_us
from tenancy.models import Role, Tenant
from tests.agents.samples import seed_rich
from tests.answers import assert_answers, pages
from tests.factories import make_thread
from threads.models import Schedule, ScheduledEffect, Thread, Turn
from threads.runtime.schedules import next_slot, schedules_fire

pytestmark = pytest.mark.django_db
MINUTE_US = 60 * 1_000_000


def _us(text: str) -> int:
    return int(datetime.fromisoformat(text).timestamp() * 1_000_000)


def test_slots_follow_the_schedules_time_zone_across_a_clock_change() -> None:
    # 9:00 in Paris is 07:00 UTC in summer time and 08:00 UTC after it ends (Oct 25, 2026).
    before = _us("2026-10-22T12:00:00+00:00")
    after = _us("2026-10-26T12:00:00+00:00")

    summer = next_slot("0 9 * * *", "Europe/Paris", before)
    winter = next_slot("0 9 * * *", "Europe/Paris", after)

    assert datetime.fromtimestamp(summer / 1e6, UTC).isoformat() == "2026-10-23T07:00:00+00:00"
    assert datetime.fromtimestamp(winter / 1e6, UTC).isoformat() == "2026-10-27T08:00:00+00:00"
    assert next_slot("*/15 * * * *", "UTC", _us("2026-11-24T14:00:00+00:00")) == _us(
        "2026-11-24T14:15:00+00:00"
    )


@pytest.fixture
def api(tenant: Tenant, client_for: Callable[..., APIClient]) -> APIClient:
    seed_rich(tenant)
    return client_for(tenant, Role.MEMBER)


@pytest.fixture
def pinged() -> Iterator[list[Any]]:
    ran: list[Any] = []
    with use_registry():

        @effect(description="Pings.")
        def ping(state: Any) -> None:
            ran.append(state.thread_id)

        yield ran


def _create(api: APIClient, **body: Any) -> dict[str, Any]:
    response = api.post("/api/v1/schedules", body, format="json")
    assert response.status_code == 201, response.json()
    created: dict[str, Any] = response.json()
    return created


def test_a_thread_schedule_submits_a_turn_at_its_next_slot_and_moves_on(
    tenant: Tenant, api: APIClient
) -> None:
    thread = make_thread(tenant)
    created = _create(api, thread_id=str(thread.id), cron="*/5 * * * *",
                      input={"content": "standup?"})  # fmt: skip
    slot = created["next_run_at"]

    early = schedules_fire(now=slot - 1)
    on_time = schedules_fire(now=slot)
    again = schedules_fire(now=slot + 1)

    assert (early, on_time, again) == (0, 1, 0)
    turn = Turn.objects.get(thread=thread)
    assert (turn.source, turn.payload["content"]) == ("schedule", "standup?")
    assert turn.payload["metadata"]["schedule_id"] == created["id"]
    row = Schedule.objects.get(pk=created["id"])
    assert row.next_run_at == slot + 5 * MINUTE_US
    assert (row.runs, row.last_run) == (1, {"thread_id": str(thread.id), "turn_id": str(turn.pk)})


def test_after_an_outage_of_several_slots_it_fires_once(tenant: Tenant, api: APIClient) -> None:
    thread = make_thread(tenant)
    created = _create(api, thread_id=str(thread.id), cron="*/5 * * * *",
                      input={"content": "tick"})  # fmt: skip
    back = created["next_run_at"] + 47 * MINUTE_US  # nine slots missed

    fired = schedules_fire(now=back)

    assert fired == 1
    assert Turn.objects.filter(thread=thread).count() == 1
    row = Schedule.objects.get(pk=created["id"])
    assert back < row.next_run_at <= back + 5 * MINUTE_US


def test_an_agent_schedule_opens_a_new_thread_for_each_run(tenant: Tenant, api: APIClient) -> None:
    created = _create(api, agent="helper", cron="0 * * * *", input={"content": "report"})

    schedules_fire(now=created["next_run_at"])
    schedules_fire(now=created["next_run_at"] + 60 * MINUTE_US)

    opened = Thread.objects.filter(tenant=tenant, agent_name="helper")
    assert opened.count() == 2
    assert Turn.objects.filter(thread__in=opened, source="schedule").count() == 2


def test_an_effect_schedule_fires_the_effect_on_its_thread(
    tenant: Tenant, api: APIClient, pinged: list[Any]
) -> None:
    thread = make_thread(tenant)
    created = _create(api, thread_id=str(thread.id), cron="0 9 * * *", action="effect",
                      effect={"name": "ping"})  # fmt: skip

    schedules_fire(now=created["next_run_at"])

    scheduled = ScheduledEffect.objects.get(thread=thread)
    assert (scheduled.name, scheduled.status) == ("ping", "pending")
    assert Schedule.objects.get(pk=created["id"]).last_run == {
        "thread_id": str(thread.id), "effect_id": str(scheduled.pk),
    }  # fmt: skip


def test_a_paused_schedule_does_not_run_and_resumes_from_now(
    tenant: Tenant, api: APIClient
) -> None:
    thread = make_thread(tenant)
    created = _create(api, thread_id=str(thread.id), cron="*/5 * * * *", input={"content": "x"})
    url = f"/api/v1/schedules/{created['id']}"

    paused = api.post(f"{url}/pause").json()
    fired_while_paused = schedules_fire(now=created["next_run_at"] + 60 * MINUTE_US)
    resumed = api.post(f"{url}/resume").json()

    assert (paused["paused"], paused["next_run_at"]) == (True, None)
    assert fired_while_paused == 0
    assert resumed["paused"] is False
    assert now_us() < resumed["next_run_at"] <= now_us() + 5 * MINUTE_US


def test_a_run_that_cannot_start_records_why_and_the_schedule_goes_on(
    tenant: Tenant, api: APIClient
) -> None:
    thread = make_thread(tenant)
    created = _create(api, thread_id=str(thread.id), cron="*/5 * * * *", input={"content": "x"})
    Thread.objects.filter(pk=thread.pk).update(terminated_at=now_us())

    fired = schedules_fire(now=created["next_run_at"])

    row = Schedule.objects.get(pk=created["id"])
    assert fired == 1
    assert "terminated" in (row.last_run or {})["error"]
    assert row.next_run_at > created["next_run_at"]


@pytest.mark.parametrize(
    ("body", "field"),
    [
        ({"cron": "every day", "agent": "helper", "input": {"content": "x"}}, "cron"),
        ({"cron": "0 9 * * *", "timezone": "Mars/Olympus", "agent": "helper",
          "input": {"content": "x"}}, "timezone"),
        ({"cron": "0 9 * * *", "input": {"content": "x"}}, "thread_id"),
        ({"cron": "0 9 * * *", "agent": "nobody", "input": {"content": "x"}}, "agent"),
        ({"cron": "0 9 * * *", "agent": "helper"}, "input.content"),
        ({"cron": "0 9 * * *", "agent": "helper", "action": "effect",
          "effect": {"name": "ping"}}, "action"),
        ({"cron": "0 9 * * *", "thread_id": "nope", "input": {"content": "x"}}, "thread_id"),
        ({"cron": "0 9 * * *", "agent": "helper", "input": {"content": "x"}, "when": 1}, "when"),
    ],
)  # fmt: skip
def test_a_bad_schedule_is_a_400_naming_the_field(
    api: APIClient, body: dict[str, Any], field: str
) -> None:
    response = api.post("/api/v1/schedules", body, format="json")

    assert response.status_code == 400, response.json()
    assert response.json()["error"]["field"] == field


def test_an_unknown_effect_is_refused_when_the_schedule_is_saved(
    tenant: Tenant, api: APIClient, pinged: list[Any]
) -> None:
    thread = make_thread(tenant)

    response = api.post(
        "/api/v1/schedules",
        {"cron": "0 9 * * *", "thread_id": str(thread.id), "action": "effect",
         "effect": {"name": "pong"}},
        format="json",
    )  # fmt: skip

    assert response.status_code == 400
    assert response.json()["error"]["field"] == "effect.name"


def test_a_schedule_is_listed_changed_and_deleted(tenant: Tenant, api: APIClient) -> None:
    thread = make_thread(tenant)
    created = _create(api, thread_id=str(thread.id), cron="0 9 * * *", input={"content": "x"})
    url = f"/api/v1/schedules/{created['id']}"

    listed = api.get("/api/v1/schedules", {"thread_id": str(thread.id)}).json()
    changed = api.patch(url, {"cron": "30 9 * * *", "name": "standup"}, format="json").json()
    deleted = api.delete(url)

    assert [item["id"] for item in listed["results"]] == [created["id"]]
    assert (changed["cron"], changed["name"]) == ("30 9 * * *", "standup")
    assert changed["next_run_at"] != created["next_run_at"]
    assert deleted.status_code == 204
    assert api.get(url).status_code == 404
    assert api.get("/api/v1/schedules", {"thread_id": "nope"}).status_code == 400


def test_answers_are_what_their_components_document(
    tenant: Tenant, api: APIClient, pinged: list[Any]
) -> None:
    thread = make_thread(tenant)
    turn = _create(api, agent="helper", cron="0 9 * * *", input={"content": "x"})
    effect = _create(api, thread_id=str(thread.id), cron="0 9 * * *", action="effect",
                     effect={"name": "ping", "args": None})  # fmt: skip
    schedules_fire(now=max(turn["next_run_at"], effect["next_run_at"]))

    paused = api.post(f"/api/v1/schedules/{turn['id']}/pause").json()
    resumed = api.post(f"/api/v1/schedules/{turn['id']}/resume").json()
    listed = api.get("/api/v1/schedules").json()

    for answer in (turn, effect, paused, resumed):
        assert_answers("Schedule", answer)
    assert_answers("PaginatedScheduleList", listed)
    assert {item["last_run"]["thread_id"] is not None for item in listed["results"]} == {True}
    assert turn["created_at"] <= turn["updated_at"] < paused["updated_at"]


def test_the_list_pages_oldest_first_keeping_its_filter(tenant: Tenant, api: APIClient) -> None:
    thread, other = make_thread(tenant), make_thread(tenant)
    made = [
        _create(api, thread_id=str(thread.id), cron="0 9 * * *", input={"content": str(n)})["id"]
        for n in range(3)
    ]
    _create(api, thread_id=str(other.id), cron="0 9 * * *", input={"content": "elsewhere"})

    walked = pages(api, f"/api/v1/schedules?limit=2&thread_id={thread.id}")

    assert [[s["id"] for s in page["results"]] for page in walked] == [made[:2], made[2:]]
    assert f"thread_id={thread.id}" in walked[0]["next"]
    assert api.get("/api/v1/schedules?limit=x").json()["error"]["field"] == "limit"
    assert api.get("/api/v1/schedules?cursor=x").json()["error"]["field"] == "cursor"


def test_a_repeated_idempotency_key_makes_one_schedule_and_answers_the_first(
    tenant: Tenant, api: APIClient
) -> None:
    body = {"agent": "helper", "cron": "0 9 * * *", "input": {"content": "standup?"}}
    headers = {"Idempotency-Key": "schedule-1"}

    first = api.post("/api/v1/schedules", body, format="json", headers=headers)
    again = api.post("/api/v1/schedules", body, format="json", headers=headers)

    assert (first.status_code, again.status_code) == (201, 201)
    assert again.json() == first.json()
    assert again["Idempotent-Replayed"] == "true"
    assert "Idempotent-Replayed" not in first
    assert Schedule.objects.for_tenant(tenant).count() == 1


def test_the_same_idempotency_key_with_another_schedule_is_a_conflict(
    tenant: Tenant, api: APIClient
) -> None:
    body = {"agent": "helper", "cron": "0 9 * * *", "input": {"content": "standup?"}}
    headers = {"Idempotency-Key": "schedule-1"}
    api.post("/api/v1/schedules", body, format="json", headers=headers)

    other = api.post(
        "/api/v1/schedules", {**body, "cron": "0 10 * * *"}, format="json", headers=headers
    )

    assert other.status_code == 409
    assert other.json()["error"]["code"] == "idempotency_key_reused"
    assert list(Schedule.objects.for_tenant(tenant).values_list("cron", flat=True)) == ["0 9 * * *"]

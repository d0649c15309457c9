"""The usage report (usage.reports) and GET /api/v1/usage and its export: figures summed from
the rollups only, by kind (tokens of model calls, turns of turn rows, CPU of sandbox calls),
grouped by dimension and by UTC hour or the tenant's local day, filtered by range and
dimension, cost honestly unknown, paged by position, strict query parameters."""

from __future__ import annotations

import csv
import datetime as dt
import io
import json
import uuid
from collections.abc import Callable
from typing import Any

import pytest
from rest_framework.test import APIClient

from common.time import to_us
from tenancy.models import Role, Tenant
from tests.answers import documented, pages
from usage.ledger import Entry, record
from usage.models import LedgerEntry, Rollup
from usage.reports import UsageQuery, usage_report, usage_totals

pytestmark = pytest.mark.django_db

HOUR = 3_600_000_000
# 2026-03-10 14:30 UTC: 10:30 in New York (UTC-4 after the DST change of 2026-03-08).
NOON = to_us(dt.datetime(2026, 3, 10, 14, 30, tzinfo=dt.UTC))
THREAD = uuid.UUID("11111111-1111-4111-8111-111111111111")
OTHER_THREAD = uuid.UUID("22222222-2222-4222-8222-222222222222")
_keys = iter(range(1_000_000))


def _record(tenant: Tenant, kind: str = "model", at: int = NOON, **fields: Any) -> None:
    entry = Entry(
        tenant_id=tenant.pk, key=f"k{next(_keys)}", kind=kind, time_zone=tenant.time_zone,
        created_at=at, **fields,
    )  # fmt: skip
    assert record(entry)


def _model(tenant: Tenant, *, cost: int | None = 1_000, at: int = NOON, **fields: Any) -> None:
    fields.setdefault("agent", "helper")
    fields.setdefault("model", "fast")
    fields.setdefault("thread_id", THREAD)
    _record(tenant, "model", at, input_tokens=100, output_tokens=10, cached_tokens=40,
            cost_micros=cost, **fields)  # fmt: skip


def _report(tenant: Tenant, **query: Any) -> list[dict[str, Any]]:
    report = usage_report(tenant=tenant, query=UsageQuery(**query))
    return [
        {**group.keys, **({"start": group.start} if group.start is not None else {}),
         **group.figures.__dict__}
        for group in report.page(limit=500)
    ]  # fmt: skip


@pytest.fixture
def used(tenant: Tenant, other_tenant: Tenant) -> Tenant:
    """A turn of two model calls (one without prices), a tool call, a sandbox call, another
    agent's model call, and another tenant's call."""
    _model(tenant, user="ann")
    _model(tenant, user="ann", cost=None, model="local")
    _record(tenant, "tool", agent="helper", thread_id=THREAD, user="ann", name="search",
            cost_micros=0)  # fmt: skip
    _record(tenant, "sandbox", agent="helper", thread_id=THREAD, user="ann", name="run_code",
            cost_micros=0, cpu_ms=25)  # fmt: skip
    _record(tenant, "turn", agent="helper", thread_id=THREAD, user="ann", input_tokens=200,
            output_tokens=20, cost_micros=1_000, cpu_ms=25)  # fmt: skip
    _model(tenant, agent="careful", user="bob", thread_id=OTHER_THREAD, cost=5_000_000)
    _model(other_tenant, cost=9_999_999)
    return tenant


def test_totals_count_tokens_of_model_calls_turns_of_turn_rows_and_cpu_of_sandbox_calls(
    used: Tenant,
) -> None:
    totals = usage_totals(tenant=used, query=UsageQuery())

    assert (totals.calls, totals.model_calls, totals.tool_calls, totals.sandbox_calls) == (
        5, 3, 1, 1,
    )  # fmt: skip
    assert totals.turns == 1
    assert (totals.input_tokens, totals.output_tokens, totals.cached_tokens) == (300, 30, 120)
    assert totals.cpu_ms == 25
    assert totals.cost_micros == 5_001_000  # the known costs only, never the turn's again
    assert totals.unknown_cost_calls == 1
    assert not totals.cost_known
    assert totals.cost == "5.001000"


def test_groups_by_agent_and_model_each_with_its_own_figures(used: Tenant) -> None:
    rows = _report(used, group_by=("agent", "model"), kind="model")

    assert [(r["agent"], r["model"], r["calls"], r["cost_micros"], r["unknown_cost_calls"])
            for r in rows] == [
        ("careful", "fast", 1, 5_000_000, 0),
        ("helper", "fast", 1, 1_000, 0),
        ("helper", "local", 1, 0, 1),
    ]  # fmt: skip


def test_groups_by_kind_and_user_and_thread(used: Tenant) -> None:
    by_kind = {r["kind"]: r for r in _report(used, group_by=("kind",))}
    by_user = {r["user"]: r["calls"] for r in _report(used, group_by=("user",))}
    by_thread = {r["thread"]: r["input_tokens"] for r in _report(used, group_by=("thread",))}

    assert by_kind["turn"]["turns"] == 1
    assert by_kind["turn"]["calls"] == 0
    assert by_kind["turn"]["input_tokens"] == 0  # a turn row repeats its calls' sums
    assert by_kind["sandbox"]["cpu_ms"] == 25
    assert by_user == {"ann": 4, "bob": 1}
    assert by_thread == {str(THREAD): 200, str(OTHER_THREAD): 100}


def test_filters_select_an_agent_a_user_a_thread_a_model_or_a_kind(used: Tenant) -> None:
    def calls(**query: Any) -> int:
        return usage_totals(tenant=used, query=UsageQuery(**query)).calls

    assert calls(agent="careful") == 1
    assert calls(user="ann") == 4
    assert calls(thread=str(OTHER_THREAD)) == 1
    assert calls(model="local") == 1
    assert calls(model="search") == 1  # a tool call's model is its tool's name
    assert calls(kind="sandbox") == 1
    assert calls(agent="nobody") == 0
    assert calls(thread="") == 0  # every call here ran in a thread


def test_cost_is_known_only_when_every_call_had_a_price(tenant: Tenant) -> None:
    _model(tenant, agent="priced", cost=2_500)
    _model(tenant, agent="unpriced", cost=None)
    _model(tenant, agent="mixed", cost=700)
    _model(tenant, agent="mixed", cost=None)

    rows = {r["agent"]: r for r in _report(tenant, group_by=("agent",))}
    groups = usage_report(tenant=tenant, query=UsageQuery(group_by=("agent",))).page(limit=10)
    known = {g.keys["agent"]: (g.figures.cost, g.figures.cost_known) for g in groups}

    assert known == {
        "priced": ("0.002500", True), "unpriced": ("0.000000", False),
        "mixed": ("0.000700", False),
    }  # fmt: skip
    assert rows["unpriced"]["unknown_cost_calls"] == 1


def test_hours_are_utc_and_days_the_tenants_local_days(tenant: Tenant) -> None:
    tenant.time_zone = "America/New_York"
    tenant.save()
    late = to_us(dt.datetime(2026, 3, 11, 2, 0, tzinfo=dt.UTC))  # 22:00 on the 10th locally
    next_day = to_us(dt.datetime(2026, 3, 11, 5, 0, tzinfo=dt.UTC))  # 01:00 on the 11th
    for at in (NOON, late, next_day):
        _model(tenant, at=at)

    hours = _report(tenant, period="hour")
    days = _report(tenant, period="day")

    assert [(r["start"], r["calls"]) for r in hours] == [
        (NOON - 30 * 60_000_000, 1), (late, 1), (next_day, 1),
    ]  # fmt: skip
    local_midnight = to_us(dt.datetime(2026, 3, 10, 4, 0, tzinfo=dt.UTC))
    assert [(r["start"], r["calls"]) for r in days] == [
        (local_midnight, 2), (local_midnight + 24 * HOUR, 1),
    ]  # fmt: skip


def test_a_range_keeps_each_bucket_that_overlaps_it(tenant: Tenant) -> None:
    for hours_ago in (0, 1, 2, 3):
        _model(tenant, at=NOON - hours_ago * HOUR)

    # From the middle of the hour 2 hours back, to the start of the current hour.
    counted = usage_totals(
        tenant=tenant, query=UsageQuery(start_us=NOON - 2 * HOUR, end_us=NOON - 30 * 60_000_000)
    )

    assert counted.calls == 2


def test_the_report_reads_the_rollups_not_the_ledger(tenant: Tenant) -> None:
    _model(tenant)
    LedgerEntry.objects.for_tenant(tenant).delete()
    Rollup.objects.create(
        tenant=tenant, period="hour", start=NOON, kind="model", agent="helper", calls=2,
        input_tokens=7, cost_micros=3,
    )  # fmt: skip

    totals = usage_totals(tenant=tenant, query=UsageQuery())

    assert (totals.calls, totals.input_tokens, totals.cost_micros) == (3, 107, 1_003)


def test_pages_by_position_forward_and_back(tenant: Tenant) -> None:
    for n in range(7):
        _model(tenant, agent=f"agent_{n}")
    report = usage_report(tenant=tenant, query=UsageQuery(group_by=("agent",)))

    first = report.page(limit=3)
    second = report.page(limit=3, after=report.key(first[-1]))
    back = report.page(limit=3, before=report.key(second[0]))
    chunks = list(report.chunks(size=3))

    assert [g.keys["agent"] for g in first] == ["agent_0", "agent_1", "agent_2"]
    assert [g.keys["agent"] for g in second] == ["agent_3", "agent_4", "agent_5"]
    assert back == first
    assert [len(chunk) for chunk in chunks] == [3, 3, 1]


# The API --------------------------------------------------------------------------------------


@pytest.fixture
def reader(used: Tenant, client_for: Callable[..., APIClient]) -> APIClient:
    return client_for(used, Role.READ_ONLY)


def test_a_read_only_key_reads_the_usage_grouped_in_the_list_shape(reader: APIClient) -> None:
    response = reader.get("/api/v1/usage", {"group_by": "agent", "period": "day"})

    body = documented("get", "/api/v1/usage/", response)
    assert response.status_code == 200
    assert body["next"] is None
    helper = next(item for item in body["results"] if item["agent"] == "helper")
    assert helper["period"] == "day"
    assert (helper["calls"], helper["turns"], helper["cpu_ms"]) == (4, 1, 25)
    assert (helper["cost"], helper["cost_known"], helper["unknown_cost_calls"]) == (
        "0.001000", False, 1,
    )  # fmt: skip
    assert helper["currency"] == "USD"


def test_without_grouping_the_answer_is_the_totals(reader: APIClient, tenant: Tenant) -> None:
    body = reader.get("/api/v1/usage").json()
    empty = reader.get("/api/v1/usage", {"agent": "nobody"}).json()

    assert [item["calls"] for item in body["results"]] == [5]
    assert "agent" not in body["results"][0]
    assert empty["results"][0]["calls"] == 0
    assert empty["results"][0]["cost_known"] is True


def test_the_list_pages_with_its_cursor(
    tenant: Tenant, client_for: Callable[..., APIClient]
) -> None:
    for n in range(5):
        _model(tenant, user=f"user_{n}")
    client = client_for(tenant, Role.READ_ONLY)

    found = pages(client, "/api/v1/usage?group_by=user&limit=2")
    back = client.get(found[1]["previous"]).json()

    users = [item["user"] for page in found for item in page["results"]]
    assert users == [f"user_{n}" for n in range(5)]
    assert back["results"] == found[0]["results"]
    assert back["previous"] is None


def test_a_range_in_iso_or_microseconds_and_a_date_in_the_tenants_zone(
    reader: APIClient, used: Tenant
) -> None:
    iso = reader.get("/api/v1/usage", {"from": "2026-03-10T14:00:00Z", "to": str(NOON + HOUR)})
    date = reader.get("/api/v1/usage", {"from": "2026-03-10", "to": "2026-03-11"})
    before = reader.get("/api/v1/usage", {"to": "2026-03-10T14:00:00"})
    used.time_zone = "Asia/Tokyo"  # 2026-03-10 14:30 UTC is 23:30 there
    used.save()
    tokyo_day = reader.get("/api/v1/usage", {"from": "2026-03-10", "to": "2026-03-10T15:00Z"})
    tokyo_next = reader.get("/api/v1/usage", {"from": "2026-03-11"})

    assert iso.json()["results"][0]["calls"] == 5
    assert date.json()["results"][0]["calls"] == 5
    assert before.json()["results"][0]["calls"] == 0
    assert tokyo_day.json()["results"][0]["calls"] == 5
    assert tokyo_next.json()["results"][0]["calls"] == 0


@pytest.mark.parametrize(
    ("params", "field"),
    [
        ({"group_by": "agent,colour"}, "group_by"),
        ({"group_by": "agent,agent"}, "group_by"),
        ({"period": "week"}, "period"),
        ({"from": "yesterday"}, "from"),
        ({"from": "2026-03-10", "to": "2026-03-09"}, "to"),
        ({"to": "9" * 30}, "to"),
        ({"kind": "coffee"}, "kind"),
        ({"thread": "not-a-uuid"}, "thread"),
        ({"agent": "a" * 65}, "agent"),
        ({"agnet": "helper"}, "agnet"),
        ({"format": "csv"}, "format"),
        ({"limit": "0"}, "limit"),
        ({"cursor": "bm9wZQ"}, "cursor"),
    ],
)
def test_bad_query_parameters_are_400_naming_them(
    reader: APIClient, params: dict[str, str], field: str
) -> None:
    response = reader.get("/api/v1/usage", params)

    assert response.status_code == 400, response.json()
    assert response.json()["error"]["field"] == field


def test_a_parameter_given_twice_is_400(reader: APIClient) -> None:
    response = reader.get("/api/v1/usage?agent=a&agent=b")

    assert response.status_code == 400
    assert response.json()["error"]["field"] == "agent"


def test_a_cursor_of_another_grouping_is_400(reader: APIClient, tenant: Tenant) -> None:
    for n in range(3):
        _model(tenant, user=f"user_{n}")
    page = reader.get("/api/v1/usage", {"group_by": "user", "limit": "1"}).json()
    cursor = page["next"].split("cursor=")[1]

    response = reader.get("/api/v1/usage", {"group_by": "user,agent", "cursor": cursor})

    assert response.status_code == 400
    assert response.json()["error"]["field"] == "cursor"


# The export -----------------------------------------------------------------------------------


def _streamed(response: Any) -> str:
    return b"".join(response.streaming_content).decode()


def test_the_csv_export_has_a_header_and_a_row_per_group(reader: APIClient) -> None:
    response = reader.get(
        "/api/v1/usage/export", {"format": "csv", "group_by": "agent", "period": "hour"}
    )

    assert response.status_code == 200
    assert response["Content-Type"] == "text/csv"
    assert response["Content-Disposition"] == 'attachment; filename="usage-acme.csv"'
    rows = list(csv.DictReader(io.StringIO(_streamed(response))))
    assert [(r["agent"], r["calls"], r["cost"], r["cost_known"]) for r in rows] == [
        ("careful", "1", "5.000000", "true"), ("helper", "4", "0.001000", "false"),
    ]  # fmt: skip
    assert rows[0]["period"] == "hour"
    assert rows[0]["start_utc"] == "2026-03-10T14:00:00+00:00"
    assert list(rows[0])[:4] == ["period", "start", "start_utc", "agent"]


def test_the_json_lines_export_holds_the_apis_items(reader: APIClient) -> None:
    response = reader.get("/api/v1/usage/export", {"format": "json", "group_by": "user"})
    listed = reader.get("/api/v1/usage", {"group_by": "user"}).json()["results"]

    assert response["Content-Type"] == "application/x-ndjson"
    lines = [json.loads(line) for line in _streamed(response).splitlines()]
    assert lines == listed


def test_the_export_defaults_to_csv_and_quotes_what_a_spreadsheet_would_run(
    tenant: Tenant, client_for: Callable[..., APIClient]
) -> None:
    _model(tenant, user='=HYPERLINK("http://x")')

    text = _streamed(client_for(tenant, Role.READ_ONLY).get(
        "/api/v1/usage/export", {"group_by": "user"}
    ))  # fmt: skip

    assert text.splitlines()[0].startswith("user,calls,")
    assert "'=HYPERLINK" in text


@pytest.mark.parametrize(
    ("params", "field"),
    [({"format": "xml"}, "format"), ({"limit": "5"}, "limit"), ({"period": "year"}, "period")],
)
def test_a_bad_export_query_is_a_json_400(
    reader: APIClient, params: dict[str, str], field: str
) -> None:
    response = reader.get("/api/v1/usage/export", params, HTTP_ACCEPT="text/csv")

    assert response.status_code == 400
    assert response["Content-Type"] == "application/json"
    assert response.json()["error"]["field"] == field


def test_another_tenants_usage_is_never_counted(
    used: Tenant, other_tenant: Tenant, client_for: Callable[..., APIClient]
) -> None:
    theirs = client_for(other_tenant, Role.ADMIN).get("/api/v1/usage").json()
    exported = _streamed(client_for(other_tenant, Role.ADMIN).get(
        "/api/v1/usage/export", {"group_by": "agent"}
    ))  # fmt: skip

    assert theirs["results"][0]["calls"] == 1
    assert theirs["results"][0]["cost_micros"] == 9_999_999
    assert "careful" not in exported

"""A thread's title over REST (given on create or patch, else derived from its first user
message) and ``started`` (false for a thread that never ran, whose ``status`` is the initial
``completed``)."""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

import pytest
from django.db import connection
from django.test.utils import CaptureQueriesContext
from rest_framework.test import APIClient

from tenancy.models import Role, Tenant
from tests.agents.samples import seed_rich
from tests.factories import make_thread
from threads.models import Event, Thread
from threads.services.inbox import message_queue
from threads.services.messages import message_inject

pytestmark = pytest.mark.django_db


@pytest.fixture
def member(tenant: Tenant, client_for: Callable[..., APIClient]) -> APIClient:
    seed_rich(tenant)
    return client_for(tenant, Role.MEMBER)


def test_a_title_given_on_create_is_shown_and_searched(member: APIClient) -> None:
    created = member.post(
        "/api/v1/threads", {"agent": "helper", "title": "  Quarterly   report "}, format="json"
    )
    thread_id = created.json()["id"]

    detail = member.get(f"/api/v1/threads/{thread_id}").json()
    listed = member.get("/api/v1/threads").json()["results"]

    assert created.status_code == 201
    assert (detail["title"], detail["title_set"]) == ("Quarterly report", True)
    assert [(row["id"], row["title"]) for row in listed] == [(thread_id, "Quarterly report")]


def test_without_a_title_the_first_user_messages_first_line_is_the_title(
    tenant: Tenant, member: APIClient
) -> None:
    thread = make_thread(tenant, agent_name="helper")
    message_inject(thread=thread, role="system", content="You help.")
    message_inject(thread=thread, role="user", content="\n  Plan a trip to Lisbon \nin May")
    message_inject(thread=thread, role="user", content="and book it")
    long = make_thread(tenant, agent_name="helper")
    message_inject(thread=long, role="user", content="word " * 40)
    empty = make_thread(tenant, agent_name="helper")

    titles = {row["id"]: row["title"] for row in member.get("/api/v1/threads").json()["results"]}

    assert titles[str(thread.pk)] == "Plan a trip to Lisbon"
    assert len(titles[str(long.pk)]) == 80
    assert titles[str(long.pk)].endswith("…")
    assert titles[str(empty.pk)] is None
    assert member.get(f"/api/v1/threads/{thread.pk}").json()["title_set"] is False


def test_a_list_reads_titles_and_started_in_a_fixed_number_of_queries(
    tenant: Tenant, member: APIClient
) -> None:
    def queries() -> int:
        """The request's reads of threads and their rows (the tenant wall's session setting
        is left out: it is written only when the connection's tenant changed)."""
        with CaptureQueriesContext(connection) as captured:
            assert member.get("/api/v1/threads").status_code == 200
        return sum("threads_" in query["sql"] for query in captured.captured_queries)

    for _ in range(2):
        message_inject(thread=make_thread(tenant, agent_name="helper"), role="user", content="hi")
    few = queries()
    for _ in range(5):
        message_inject(thread=make_thread(tenant, agent_name="helper"), role="user", content="hi")

    assert queries() == few


def test_patch_sets_and_clears_the_title(thread: Thread, member: APIClient) -> None:
    message_inject(thread=thread, role="user", content="What is the weather?")

    named = member.patch(f"/api/v1/threads/{thread.pk}", {"title": "Weather"}, format="json")
    cleared = member.patch(f"/api/v1/threads/{thread.pk}", {"title": ""}, format="json")

    assert (named.status_code, named.json()["title"]) == (200, "Weather")
    assert (cleared.json()["title"], cleared.json()["title_set"]) == (
        "What is the weather?",
        False,
    )
    updated = Event.objects.filter(thread=thread, type="thread.updated").first()
    assert updated is not None
    assert updated.payload["fields"] == ["title"]


@pytest.mark.parametrize(
    ("method", "payload"),
    [
        ("post", {"agent": "helper", "title": "x" * 201}),
        ("post", {"agent": "helper", "title": 7}),
        ("post", {"agent": "helper", "title": None}),
        ("patch", {"title": "x" * 201}),
        ("patch", {"title": ["a"]}),
    ],
)
def test_a_bad_title_is_400_naming_the_field(
    thread: Thread, member: APIClient, method: str, payload: dict[str, Any]
) -> None:
    url = "/api/v1/threads" if method == "post" else f"/api/v1/threads/{thread.pk}"

    response = getattr(member, method)(url, payload, format="json")

    assert response.status_code == 400
    assert response.json()["error"]["field"] == "title"


def test_a_thread_that_never_ran_is_not_started(tenant: Tenant, member: APIClient) -> None:
    fresh = member.post("/api/v1/threads", {"agent": "helper"}, format="json").json()
    ran = make_thread(tenant, agent_name="helper")
    message_queue(thread=ran, role="user", content="hello")

    detail = member.get(f"/api/v1/threads/{fresh['id']}").json()
    listed = {row["id"]: row["started"] for row in member.get("/api/v1/threads").json()["results"]}

    assert (fresh["started"], detail["started"], detail["status"]) == (False, False, "completed")
    assert listed == {fresh["id"]: False, str(ran.pk): True}

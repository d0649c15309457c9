"""A turn's end user (``Turn.user``, which usage and budgets count): the ``user`` of
``POST …/messages`` and ``POST …/turns`` bodies, else the thread's ``user_id``; shown in the
turn's JSON; a non-string or one over 200 characters is a 400 naming ``user``."""

from __future__ import annotations

from typing import Any

import pytest
from rest_framework.test import APIClient

from tenancy.models import Tenant
from tests.answers import documented
from tests.factories import make_thread
from threads.models import Turn

pytestmark = pytest.mark.django_db


def _send(member: APIClient, thread_id: str, route: str, **body: Any) -> Any:
    if route == "turns":
        return member.post(f"/api/v1/threads/{thread_id}/turns",
                           {"input": {"content": "hi"}, **body}, format="json")  # fmt: skip
    return member.post(f"/api/v1/threads/{thread_id}/messages", {"content": "hi", **body},
                       format="json")  # fmt: skip


@pytest.mark.parametrize("route", ["messages", "turns"])
def test_the_bodys_user_is_the_turns_else_the_threads(
    tenant: Tenant, member: APIClient, route: str
) -> None:
    thread = make_thread(tenant, user_id="thread-owner")

    given = _send(member, str(thread.pk), route, user="end-user-42")
    default = _send(member, str(thread.pk), route)
    empty = _send(member, str(thread.pk), route, user="")

    assert given.status_code == 202, given.json()
    turn = given.json() if route == "turns" else given.json()["turn"]
    assert turn["user"] == "end-user-42"
    users = list(Turn.objects.filter(thread=thread).order_by("created_at").values_list("user"))
    assert users == [("end-user-42",), ("thread-owner",), ("thread-owner",)]
    assert default.status_code == empty.status_code == 202
    if route == "turns":
        documented("post", "/api/v1/threads/{thread_id}/turns", given)


def test_a_thread_without_a_user_gives_turns_none(tenant: Tenant, member: APIClient) -> None:
    thread = make_thread(tenant)

    answer = _send(member, str(thread.pk), "messages")

    assert answer.json()["turn"]["user"] is None
    assert Turn.objects.get(thread=thread).user == ""


@pytest.mark.parametrize("route", ["messages", "turns"])
@pytest.mark.parametrize("user", [42, "u" * 201, ["a"], {"id": "a"}, True])
def test_a_bad_user_is_a_400_naming_it(
    tenant: Tenant, member: APIClient, route: str, user: Any
) -> None:
    thread = make_thread(tenant)

    answer = _send(member, str(thread.pk), route, user=user)

    assert answer.status_code == 400, answer.json()
    assert answer.json()["error"]["field"] == "user"
    assert not Turn.objects.filter(thread=thread).exists()


def test_a_user_inside_a_turns_input_is_an_unknown_key(tenant: Tenant, member: APIClient) -> None:
    thread = make_thread(tenant)

    answer = member.post(f"/api/v1/threads/{thread.pk}/turns",
                         {"input": {"content": "hi", "user": "a"}}, format="json")  # fmt: skip

    assert answer.status_code == 400
    assert answer.json()["error"]["field"] == "input.user"

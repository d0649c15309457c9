"""threads/api/env.py: ``/api/v1/threads/{id}/env`` and the tenant-level ``/api/v1/env``."""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

import pytest
from rest_framework.test import APIClient

from tenancy.models import Role, Tenant
from threads.models import Thread
from threads.services.env import (
    EnvValue,
    tenant_env_get,
    tenant_env_set,
    thread_env_get,
    thread_env_set,
)

pytestmark = pytest.mark.django_db


def _env(thread: Thread, name: str = "") -> str:
    return f"/api/v1/threads/{thread.id}/env" + (f"/{name}" if name else "")


def test_put_creates_a_secret_and_answers_name_and_type_only(
    member: APIClient, thread: Thread
) -> None:
    response = member.put(_env(thread, "API_KEY"), {"value": "sk-live"}, format="json")

    assert response.status_code == 200
    body = response.json()
    assert set(body) == {"name", "type", "updated_at"}
    assert (body["name"], body["type"]) == ("API_KEY", "secret")
    assert thread_env_get(thread=thread, name="API_KEY") == EnvValue("sk-live", "secret")


def test_list_shows_names_and_types_never_values(member: APIClient, thread: Thread) -> None:
    thread_env_set(thread=thread, name="B_SECRET", value="hidden-b")
    thread_env_set(thread=thread, name="A_TEXT", value="shown-a", type="text")

    response = member.get(_env(thread))

    assert response.status_code == 200
    assert [(e["name"], e["type"]) for e in response.json()["results"]] == [
        ("A_TEXT", "text"),
        ("B_SECRET", "secret"),
    ]
    assert all(set(e) == {"name", "type", "updated_at"} for e in response.json()["results"])
    assert (response.json()["next"], response.json()["previous"]) == (None, None)
    assert b"hidden-b" not in response.content
    assert b"shown-a" not in response.content


@pytest.mark.parametrize("level", ["thread", "tenant"])
def test_both_lists_page_by_name(
    tenant: Tenant, thread: Thread, client_for: Callable[..., APIClient], level: str
) -> None:
    for name in ["C", "A", "D", "B", "E"]:
        if level == "thread":
            thread_env_set(thread=thread, name=name, value="v")
        else:
            tenant_env_set(tenant=tenant, name=name, value="v")
    reader = client_for(tenant, Role.READ_ONLY)
    url = _env(thread) if level == "thread" else "/api/v1/env"

    first = reader.get(url, {"limit": 2}).json()
    second = reader.get(first["next"]).json()
    last = reader.get(second["next"]).json()
    back = reader.get(last["previous"]).json()

    assert [e["name"] for e in first["results"]] == ["A", "B"]
    assert [e["name"] for e in second["results"]] == ["C", "D"]
    assert ([e["name"] for e in last["results"]], last["next"]) == (["E"], None)
    assert (back, first["previous"]) == (second, None)


@pytest.mark.parametrize("url", ["/api/v1/env", "{thread}/env"])
@pytest.mark.parametrize(
    ("query", "field"), [({"limit": "x"}, "limit"), ({"cursor": "bogus"}, "cursor")]
)
def test_a_bad_limit_or_cursor_is_400_naming_it(
    member: APIClient, thread: Thread, url: str, query: dict[str, str], field: str
) -> None:
    response = member.get(url.format(thread=f"/api/v1/threads/{thread.id}"), query)

    assert (response.status_code, response.json()["error"]["field"]) == (400, field)


def test_put_without_type_keeps_the_type(member: APIClient, thread: Thread) -> None:
    thread_env_set(thread=thread, name="REGION", value="eu", type="text")

    response = member.put(_env(thread, "REGION"), {"value": "us"}, format="json")

    assert response.json()["type"] == "text"
    assert thread_env_get(thread=thread, name="REGION") == EnvValue("us", "text")


def test_put_with_a_blank_value_is_allowed(member: APIClient, thread: Thread) -> None:
    response = member.put(_env(thread, "FILL_ME"), {"value": ""}, format="json")

    assert response.status_code == 200
    assert thread_env_get(thread=thread, name="FILL_ME") == EnvValue("", "secret")


def test_delete_removes_and_a_missing_name_is_404(member: APIClient, thread: Thread) -> None:
    thread_env_set(thread=thread, name="GONE", value="x")

    first = member.delete(_env(thread, "GONE"))
    second = member.delete(_env(thread, "GONE"))

    assert (first.status_code, second.status_code) == (204, 404)
    assert thread_env_get(thread=thread, name="GONE") is None


@pytest.mark.parametrize(
    ("name", "body", "field"),
    [
        ("1BAD", {"value": "x"}, "name"),
        ("BAD-NAME", {"value": "x"}, "name"),
        ("OK", {}, "value"),
        ("OK", {"value": 5}, "value"),
        ("OK", {"value": "x", "type": "public"}, "type"),
    ],
)
def test_bad_input_is_400_naming_the_field(
    member: APIClient, thread: Thread, name: str, body: dict[str, Any], field: str
) -> None:
    response = member.put(_env(thread, name), body, format="json")

    assert response.status_code == 400
    assert response.json()["error"]["field"] == field
    assert thread.threadenv_set.count() == 0


def test_read_only_may_list_but_not_write(
    tenant: Tenant, thread: Thread, client_for: Callable[..., APIClient]
) -> None:
    thread_env_set(thread=thread, name="KEEP", value="v")
    reader = client_for(tenant, Role.READ_ONLY)

    assert reader.get(_env(thread)).status_code == 200
    assert reader.put(_env(thread, "KEEP"), {"value": "w"}, format="json").status_code == 403
    assert reader.delete(_env(thread, "KEEP")).status_code == 403
    assert thread_env_get(thread=thread, name="KEEP") == EnvValue("v", "secret")


def test_another_tenant_gets_404_and_changes_nothing(
    other_tenant: Tenant, thread: Thread, client_for: Callable[..., APIClient]
) -> None:
    thread_env_set(thread=thread, name="MINE", value="v")
    intruder = client_for(other_tenant, Role.ADMIN)

    responses = [
        intruder.get(_env(thread)),
        intruder.put(_env(thread, "MINE"), {"value": "theirs"}, format="json"),
        intruder.put(_env(thread, "NEW"), {"value": "x"}, format="json"),
        intruder.delete(_env(thread, "MINE")),
    ]

    assert [r.status_code for r in responses] == [404] * 4
    assert thread_env_get(thread=thread, name="MINE") == EnvValue("v", "secret")
    assert thread_env_get(thread=thread, name="NEW") is None


def test_tenant_env_admin_writes_and_lists_without_values(
    tenant: Tenant, client_for: Callable[..., APIClient]
) -> None:
    admin = client_for(tenant, Role.ADMIN)

    put = admin.put("/api/v1/env/ORG_TOKEN", {"value": "org-secret", "type": "text"}, format="json")
    listed = admin.get("/api/v1/env")

    assert put.status_code == 200
    assert (put.json()["name"], put.json()["type"]) == ("ORG_TOKEN", "text")
    assert [(e["name"], e["type"]) for e in listed.json()["results"]] == [("ORG_TOKEN", "text")]
    assert b"org-secret" not in listed.content + put.content
    assert tenant_env_get(tenant=tenant, name="ORG_TOKEN") == EnvValue("org-secret", "text")


def test_tenant_env_needs_admin_to_write_and_read_only_to_list(
    tenant: Tenant, client_for: Callable[..., APIClient]
) -> None:
    tenant_env_set(tenant=tenant, name="ORG", value="v")
    member = client_for(tenant, Role.MEMBER)
    reader = client_for(tenant, Role.READ_ONLY)

    assert reader.get("/api/v1/env").status_code == 200
    assert member.put("/api/v1/env/ORG", {"value": "w"}, format="json").status_code == 403
    assert member.delete("/api/v1/env/ORG").status_code == 403
    assert tenant_env_get(tenant=tenant, name="ORG") == EnvValue("v", "secret")


def test_tenant_env_delete_and_404(tenant: Tenant, client_for: Callable[..., APIClient]) -> None:
    tenant_env_set(tenant=tenant, name="ORG", value="v")
    admin = client_for(tenant, Role.ADMIN)

    assert admin.delete("/api/v1/env/ORG").status_code == 204
    assert admin.delete("/api/v1/env/ORG").status_code == 404


def test_tenant_env_is_scoped_to_the_callers_tenant(
    tenant: Tenant, other_tenant: Tenant, client_for: Callable[..., APIClient]
) -> None:
    tenant_env_set(tenant=tenant, name="ORG", value="acme")
    intruder = client_for(other_tenant, Role.ADMIN)

    listed = intruder.get("/api/v1/env")
    deleted = intruder.delete("/api/v1/env/ORG")

    assert listed.json() == {"results": [], "next": None, "previous": None}
    assert deleted.status_code == 404
    assert tenant_env_get(tenant=tenant, name="ORG") == EnvValue("acme", "secret")

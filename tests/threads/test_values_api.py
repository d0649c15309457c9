"""threads/api/values.py: ``/api/v1/threads/{id}/kv``."""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

import pytest
from rest_framework.test import APIClient

from tenancy.models import Role, Tenant
from threads.models import Thread
from threads.services.values import MAX_VALUE_BYTES, value_get, value_set

pytestmark = pytest.mark.django_db


def _kv(thread: Thread, key: str = "") -> str:
    return f"/api/v1/threads/{thread.id}/kv" + (f"/{key}" if key else "")


def test_put_then_get_returns_key_value_size_and_updated_at(
    member: APIClient, thread: Thread
) -> None:
    put = member.put(_kv(thread, "plan"), {"value": {"steps": [1, 2]}}, format="json")
    got = member.get(_kv(thread, "plan"))

    assert put.status_code == 200
    assert got.status_code == 200
    body = got.json()
    assert set(body) == {"key", "value", "size", "updated_at"}
    assert (body["key"], body["value"], body["size"]) == ("plan", {"steps": [1, 2]}, 15)
    assert body["updated_at"] == put.json()["updated_at"]
    assert isinstance(body["updated_at"], int)


def test_keys_may_contain_slashes(member: APIClient, thread: Thread) -> None:
    member.put(_kv(thread, "dir/sub/key"), {"value": 1}, format="json")

    assert member.get(_kv(thread, "dir/sub/key")).json()["value"] == 1
    assert value_get(thread=thread, key="dir/sub/key") == 1


def test_list_pages_by_key_in_the_list_shape_and_keeps_search(
    member: APIClient, thread: Thread
) -> None:
    for key in ["a", "b", "c", "ab"]:
        value_set(thread=thread, key=key, value=key.upper())

    first = member.get(_kv(thread), {"limit": 2}).json()
    last = member.get(first["next"]).json()
    back = member.get(last["previous"]).json()
    found = member.get(_kv(thread), {"search": "B", "limit": "1"}).json()
    found_next = member.get(found["next"]).json()

    assert set(first) == {"results", "next", "previous"}
    assert first["results"][1] == {
        "key": "ab", "value": "AB", "size": 4, "updated_at": first["results"][1]["updated_at"],
    }  # fmt: skip
    assert ([v["key"] for v in first["results"]], first["previous"]) == (["a", "ab"], None)
    assert ([v["key"] for v in last["results"]], last["next"]) == (["b", "c"], None)
    assert back == first
    assert [v["key"] for v in found["results"]] == ["ab"]
    assert "search=B" in found["next"]
    assert ([v["key"] for v in found_next["results"]], found_next["next"]) == (["b"], None)


def test_put_null_deletes_and_answers_204(member: APIClient, thread: Thread) -> None:
    value_set(thread=thread, key="k", value=1)

    response = member.put(_kv(thread, "k"), {"value": None}, format="json")

    assert response.status_code == 204
    assert value_get(thread=thread, key="k") is None


def test_delete_removes_the_key_and_a_missing_key_is_404(member: APIClient, thread: Thread) -> None:
    value_set(thread=thread, key="k", value=1)

    first = member.delete(_kv(thread, "k"))
    second = member.delete(_kv(thread, "k"))

    assert (first.status_code, second.status_code) == (204, 404)
    assert member.get(_kv(thread, "k")).status_code == 404


def test_put_with_previous_key_renames(member: APIClient, thread: Thread) -> None:
    value_set(thread=thread, key="old", value=1)

    response = member.put(_kv(thread, "new"), {"value": 2, "previous_key": "old"}, format="json")

    assert response.status_code == 200
    assert (value_get(thread=thread, key="old"), value_get(thread=thread, key="new")) == (None, 2)


@pytest.mark.parametrize(
    ("body", "field"),
    [({}, "value"), ({"value": 1, "previous_key": 5}, "previous_key")],
)
def test_bad_bodies_are_400_naming_the_field(
    member: APIClient, thread: Thread, body: dict[str, Any], field: str
) -> None:
    response = member.put(_kv(thread, "k"), body, format="json")

    assert response.status_code == 400
    assert response.json()["error"]["field"] == field


def test_a_too_long_key_is_413_naming_the_cap(member: APIClient, thread: Thread) -> None:
    response = member.put(_kv(thread, "k" * 256), {"value": 1}, format="json")

    assert response.status_code == 413
    assert response.json()["error"]["field"] == "key"
    assert "MAX_KEY_LENGTH" in response.json()["error"]["message"]


def test_a_too_large_value_is_413_naming_the_cap(
    member: APIClient, thread: Thread, settings: Any
) -> None:
    settings.DATA_UPLOAD_MAX_MEMORY_SIZE = 4 * MAX_VALUE_BYTES
    response = member.put(_kv(thread, "k"), {"value": "x" * MAX_VALUE_BYTES}, format="json")

    assert response.status_code == 413
    assert response.json()["error"]["field"] == "value"
    assert "MAX_VALUE_BYTES" in response.json()["error"]["message"]


@pytest.mark.parametrize(
    ("query", "field"),
    [({"limit": 5000}, "limit"), ({"limit": 0}, "limit"), ({"cursor": "bogus"}, "cursor")],
)
def test_a_bad_list_limit_or_cursor_is_400_naming_it(
    member: APIClient, thread: Thread, query: dict[str, Any], field: str
) -> None:
    response = member.get(_kv(thread), query)

    assert response.status_code == 400
    assert response.json()["error"]["field"] == field


def test_read_only_may_read_but_not_write(
    tenant: Tenant, thread: Thread, client_for: Callable[..., APIClient]
) -> None:
    value_set(thread=thread, key="k", value=1)
    reader = client_for(tenant, Role.READ_ONLY)

    assert reader.get(_kv(thread)).status_code == 200
    assert reader.get(_kv(thread, "k")).status_code == 200
    assert reader.put(_kv(thread, "k"), {"value": 2}, format="json").status_code == 403
    assert reader.delete(_kv(thread, "k")).status_code == 403
    assert value_get(thread=thread, key="k") == 1


def test_another_tenant_gets_404_everywhere_and_changes_nothing(
    other_tenant: Tenant, thread: Thread, client_for: Callable[..., APIClient]
) -> None:
    value_set(thread=thread, key="k", value="mine")
    intruder = client_for(other_tenant, Role.ADMIN)

    responses = [
        intruder.get(_kv(thread)),
        intruder.get(_kv(thread, "k")),
        intruder.put(_kv(thread, "k"), {"value": "theirs"}, format="json"),
        intruder.put(_kv(thread, "new"), {"value": 1}, format="json"),
        intruder.delete(_kv(thread, "k")),
    ]

    assert [r.status_code for r in responses] == [404] * 5
    assert value_get(thread=thread, key="k") == "mine"
    assert value_get(thread=thread, key="new") is None


def test_unknown_thread_is_404(member: APIClient) -> None:
    response = member.get("/api/v1/threads/00000000-0000-0000-0000-000000000000/kv")

    assert response.status_code == 404

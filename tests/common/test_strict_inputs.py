"""Every JSON body of every /api/ route refuses a key the route does not know (common.inputs):
a 400 naming the key, with the nearest known key in the message, and nothing changed.

``test_every_json_body_refuses_an_unknown_key`` walks the operations of the generated
schema, so a new route is covered without being listed; its objects come from the
cross-tenant matrix's builders (tests/tenancy/test_isolation.py).
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

import pytest
from django.urls import path, resolve, reverse
from drf_spectacular.generators import SchemaGenerator
from drf_spectacular.utils import extend_schema
from rest_framework import serializers
from rest_framework.test import APIClient
from rest_framework.views import APIView

from common.errors import ValidationFailed
from common.inputs import StrictInput, StrictMapField
from common.payloads import unknown_field_message
from tenancy.models import ApiKey, Role, Tenant
from tests.tenancy.test_isolation import OBJECT_ROUTES, _tenant_state
from threads.models import (
    Log,
    Message,
    Schedule,
    Thread,
    ThreadEnv,
    ThreadFile,
    ThreadValue,
    Turn,
)
from threads.services.values import value_set

UNKNOWN = "zz_unknown_field"
# A value for each kind of path parameter that the URL patterns accept, to find the route.
PLACEHOLDER_UUID = "00000000-0000-4000-8000-000000000000"


def _json_object_operations() -> list[tuple[str, str]]:
    """(method, schema path) of each operation whose body may be a JSON object. An operation
    whose JSON body is a file's bytes (a string schema) is an upload, not an object."""
    document = SchemaGenerator().get_schema(request=None, public=True)
    found = []
    for route, item in document["paths"].items():
        for method, operation in item.items():
            content = operation.get("requestBody", {}).get("content", {})
            schema = content.get("application/json", {}).get("schema")
            if schema is None:
                continue
            if "$ref" in schema:
                schema = document["components"]["schemas"][schema["$ref"].rsplit("/", 1)[1]]
            if schema.get("type") == "object":
                found.append((method, route))
    return sorted(found)


OPERATIONS = _json_object_operations()


def _url(path: str, tenant: Tenant) -> str:
    """The operation's URL, addressing real objects of ``tenant``."""
    probe = path
    for name in ("thread_id", "turn_id", "id", "action_id", "request_id", "message_id"):
        probe = probe.replace(f"{{{name}}}", PLACEHOLDER_UUID)
    for name in ("name", "key", "file_path", "kind"):
        probe = probe.replace(f"{{{name}}}", "x")
    route = resolve(probe).url_name
    if route not in OBJECT_ROUTES:  # no parameter, or one that names no stored object
        return probe
    return reverse(route, kwargs=OBJECT_ROUTES[route](tenant))


def _names(error: dict[str, Any], key: str) -> bool:
    """The error names ``key``: as its field, or (a definitions document, which reports
    every problem at once) as the path of one of its details."""
    if error.get("field") == key:
        return key in error["message"]
    details = error.get("details")
    return isinstance(details, list) and any(d.get("path") == key for d in details)


def test_the_walk_finds_every_json_body() -> None:
    assert len(OPERATIONS) >= 30
    assert ("post", "/api/v1/threads/{thread_id}/turns") in OPERATIONS
    assert ("put", "/api/v1/threads/{thread_id}/kv/{key}") in OPERATIONS
    assert ("post", "/api/v1/bundles/") in OPERATIONS


@pytest.mark.django_db
@pytest.mark.parametrize(("method", "path"), OPERATIONS)
def test_every_json_body_refuses_an_unknown_key(
    method: str, path: str, tenant: Tenant, client_for: Callable[..., APIClient]
) -> None:
    client = client_for(tenant, Role.ADMIN)
    client.get("/api/v1/me")  # the key's first use is recorded before the state is taken
    url = _url(path, tenant)
    before = _tenant_state(tenant)

    response = getattr(client, method)(url, {UNKNOWN: 1}, format="json")

    assert response.status_code == 400, (method, url, response.content)
    assert _names(response.json()["error"], UNKNOWN), response.json()
    assert _tenant_state(tenant) == before


# The mechanism ------------------------------------------------------------------------------


class _Item(StrictInput):
    name = serializers.CharField()


class _Pair(StrictInput):
    value = serializers.CharField()
    kind = serializers.CharField(required=False)


class _Map(StrictMapField):
    value_input = _Pair()


class _Outer(StrictInput):
    items = _Item(many=True, required=False)
    nested = _Item(required=False)
    listed = serializers.ListField(child=_Item(), required=False)
    mapped = serializers.DictField(child=_Item(), required=False)
    pairs = _Map(required=False)
    free = serializers.DictField(required=False)
    blob = serializers.JSONField(required=False)
    shown = serializers.CharField(read_only=True)


@pytest.mark.parametrize(
    ("data", "field"),
    [
        ({"itmes": []}, "itmes"),
        ({"nested": {"name": "a", "nmae": "b"}}, "nested.nmae"),
        ({"items": [{"name": "a"}, {"name": "b", "nmae": "c"}]}, "items[1].nmae"),
        ({"listed": [{"nmae": "a"}]}, "listed[0].nmae"),
        ({"mapped": {"K": {"name": "a", "extra": 1}}}, "mapped.K.extra"),
        ({"pairs": {"A": "plain", "B": {"value": "v", "knid": "x"}}}, "pairs.B.knid"),
        ({"shown": "read-only fields are not input"}, "shown"),
    ],
)
def test_an_unknown_key_is_named_by_its_full_path(data: dict[str, Any], field: str) -> None:
    with pytest.raises(ValidationFailed) as refused:
        _Outer(data=data).is_valid(raise_exception=True)

    assert refused.value.field == field


def test_unknown_keys_are_refused_before_any_field_is_validated() -> None:
    with pytest.raises(ValidationFailed) as refused:
        _Item(data={"nmae": "a"}).is_valid(raise_exception=True)

    assert refused.value.field == "nmae"
    assert refused.value.message == "unknown field 'nmae' (did you mean 'name'?)"


def test_free_form_fields_stay_free_form() -> None:
    payload = _Outer(data={"free": {"any": {"thing": 1}}, "blob": {"x": [{"y": 2}]}})

    assert payload.is_valid(), payload.errors
    assert payload.validated_data["free"] == {"any": {"thing": 1}}


def test_the_message_names_the_nearest_known_key_or_else_every_one() -> None:
    assert (
        unknown_field_message("multitask_stratgy", ["input", "multitask_strategy", "metadata"])
        == "unknown field 'multitask_stratgy' (did you mean 'multitask_strategy'?)"
    )
    assert (
        unknown_field_message("zzz", ["value", "type"])
        == "unknown field 'zzz' (known: value, type)"
    )


class _Lax(serializers.Serializer[Any]):
    name = serializers.CharField()


class _Strict(StrictInput):
    lax = _Lax()


def _schema_of(body: type[serializers.Serializer[Any]]) -> dict[str, Any]:
    class View(APIView):
        @extend_schema(summary="Take a body", request=body, responses={204: None})
        def post(self, request: Any) -> None: ...

    generator = SchemaGenerator(patterns=[path("api/v1/take", View.as_view())])
    document: dict[str, Any] = generator.get_schema(request=None, public=True)
    return document


@pytest.mark.parametrize("body", [_Lax, _Strict], ids=["the body", "a nested body"])
def test_a_request_body_that_is_not_strict_cannot_be_documented(
    body: type[serializers.Serializer[Any]],
) -> None:
    with pytest.raises(TypeError, match="_Lax is in the request body of POST /api/v1/take"):
        _schema_of(body)


def test_a_strict_body_is_documented_as_closed() -> None:
    components = _schema_of(_Item)["components"]["schemas"]

    assert components["_ItemRequest"]["additionalProperties"] is False


# The typos that used to pass --------------------------------------------------------------


def _refused(response: Any, field: str, suggestion: str | None) -> None:
    assert response.status_code == 400, response.content
    error = response.json()["error"]
    assert (error["code"], error["field"]) == ("invalid", field)
    name = field.rsplit(".", 1)[-1]
    expected = f"unknown field {name!r}" + (
        f" (did you mean {suggestion!r}?)" if suggestion else ""
    )
    assert error["message"].startswith(expected), error["message"]


@pytest.mark.parametrize(
    ("body", "field", "suggestion"),
    [
        ({"name": "ro", "rol": "read_only"}, "rol", "role"),
        ({"name": "ro", "expires": "2030-01-01T00:00:00Z"}, "expires", "expires_at"),
    ],
)
def test_an_api_key_with_a_misspelt_field_is_refused_and_not_created(
    body: dict[str, Any],
    field: str,
    suggestion: str,
    tenant: Tenant,
    client_for: Callable[..., APIClient],
) -> None:
    client = client_for(tenant, Role.ADMIN)

    response = client.post("/api/v1/api-keys", body, format="json")

    _refused(response, field, suggestion)
    assert not ApiKey.objects.for_tenant(tenant).filter(name="ro").exists()


@pytest.mark.parametrize(
    ("body", "field", "suggestion"),
    [
        ({"input": {"content": "hi"}, "multitask_stratgy": "reject"}, "multitask_stratgy",
         "multitask_strategy"),
        ({"input": {"content": "hi", "sileent": True}}, "input.sileent", "silent"),
    ],
)  # fmt: skip
def test_a_turn_with_a_misspelt_field_is_refused_and_not_queued(
    body: dict[str, Any], field: str, suggestion: str, thread: Thread, member: APIClient
) -> None:
    response = member.post(f"/api/v1/threads/{thread.id}/turns", body, format="json")

    _refused(response, field, suggestion)
    assert not Turn.objects.filter(thread=thread).exists()


@pytest.mark.parametrize("route", ["messages", "messages/inject"])
def test_a_message_with_a_misspelt_role_is_refused_and_not_stored(
    route: str, thread: Thread, member: APIClient
) -> None:
    body = {"role": "user", "content": "hi", "rol": "system"}

    response = member.post(f"/api/v1/threads/{thread.id}/{route}", body, format="json")

    _refused(response, "rol", "role")
    assert not Message.objects.filter(thread=thread).exists()
    assert not Turn.objects.filter(thread=thread).exists()


@pytest.mark.parametrize(
    ("body", "field", "suggestion"),
    [
        ({"agent": "helper", "tag": ["a"]}, "tag", "tags"),
        ({"agent": "helper", "metdata": {"a": 1}}, "metdata", "metadata"),
        ({"agent": "helper", "evn": {"TOKEN": "x"}}, "evn", "env"),
        ({"agent": "helper", "env": {"TOKEN": {"value": "x", "tipe": "text"}}}, "env.TOKEN.tipe",
         "type"),
    ],
)  # fmt: skip
def test_a_thread_with_a_misspelt_field_is_refused_and_not_created(
    body: dict[str, Any], field: str, suggestion: str, tenant: Tenant, member: APIClient
) -> None:
    response = member.post("/api/v1/threads", body, format="json")

    _refused(response, field, suggestion)
    assert not Thread.objects.for_tenant(tenant).exists()


def test_a_thread_change_with_a_misspelt_field_is_refused_and_changes_nothing(
    thread: Thread, member: APIClient
) -> None:
    response = member.patch(f"/api/v1/threads/{thread.id}", {"tagz": ["a"]}, format="json")

    _refused(response, "tagz", "tags")
    thread.refresh_from_db()
    assert thread.tags == []


def test_a_kv_write_with_a_misspelt_previous_key_is_refused_and_renames_nothing(
    thread: Thread, member: APIClient
) -> None:
    value_set(thread=thread, key="old", value=1)
    body = {"value": 2, "previous_kye": "old"}

    response = member.put(f"/api/v1/threads/{thread.id}/kv/new", body, format="json")

    _refused(response, "previous_kye", "previous_key")
    assert list(ThreadValue.objects.filter(thread=thread).values_list("key", flat=True)) == ["old"]


def test_an_env_write_with_a_misspelt_type_is_refused_and_stores_nothing(
    thread: Thread, member: APIClient
) -> None:
    body = {"value": "v", "typ": "text"}

    response = member.put(f"/api/v1/threads/{thread.id}/env/TOKEN", body, format="json")

    _refused(response, "typ", "type")
    assert not ThreadEnv.objects.filter(thread=thread).exists()


def test_run_code_with_a_misspelt_option_is_refused_and_runs_nothing(
    thread: Thread, member: APIClient
) -> None:
    body = {"source": "1 + 1", "option": {"report": True}}

    response = member.post(f"/api/v1/threads/{thread.id}/run-code", body, format="json")

    _refused(response, "option", "options")
    assert not Log.objects.filter(thread=thread).exists()


def test_a_schedule_effect_with_a_misspelt_field_is_refused_and_not_created(
    tenant: Tenant, thread: Thread, member: APIClient
) -> None:
    body = {"cron": "0 9 * * *", "thread_id": str(thread.id), "action": "effect",
            "effect": {"name": "remind", "arggs": {}}}  # fmt: skip

    response = member.post("/api/v1/schedules", body, format="json")

    _refused(response, "effect.arggs", "args")
    assert not Schedule.objects.for_tenant(tenant).exists()


def test_a_directory_command_with_an_unknown_field_is_refused_and_creates_nothing(
    thread: Thread, member: APIClient
) -> None:
    body = {"type": "directory", "parents": True}

    response = member.post(f"/api/v1/threads/{thread.id}/fs/notes", body, format="json")

    _refused(response, "parents", None)
    assert not ThreadFile.objects.filter(thread=thread).exists()

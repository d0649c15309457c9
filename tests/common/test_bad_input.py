"""Ordinary bad input is a 4xx with the error shape, never a 500 or an HTML page: NUL
characters, deep nesting, non-finite numbers, lone surrogates, too many query parameters,
OPTIONS on every route, and writes without a CSRF token (issue: faults and bad input)."""

from __future__ import annotations

import json
from collections.abc import Callable, Iterator
from typing import Any

import pytest
from django.urls import URLPattern, URLResolver, get_resolver, reverse
from rest_framework.test import APIClient

from common.errors import ValidationFailed
from common.pagination import MAX_OFFSET
from common.payloads import MAX_DEPTH, payload_check
from tenancy.models import Role, Tenant
from tests.agents.samples import seed_rich
from tests.factories import make_api_key, make_member, make_thread
from tests.tenancy.test_isolation import NOT_TENANT_OBJECTS, OBJECT_ROUTES
from threads.services.webhooks import endpoint_save

pytestmark = pytest.mark.django_db


def assert_error(response: Any, status: int, field: str | None = None) -> dict[str, Any]:
    assert response.status_code == status, response.content[:300]
    assert response["Content-Type"].startswith("application/json")
    error: dict[str, Any] = response.json()["error"]
    assert error["code"]
    assert error["message"]
    if field is not None:
        assert error.get("field") == field, error
    return error


def nested(depth: int) -> str:
    return '{"a":' * depth + "1" + "}" * depth


# The payload walk -----------------------------------------------------------------------------


@pytest.mark.parametrize(
    ("value", "field", "words"),
    [
        ({"a": {"b": ["ok", "x\x00y"]}}, "a.b[1]", "NUL"),
        ({"k\x00": 1}, None, "NUL"),
        ({"a": "\ud800"}, "a", "lone surrogate"),
        ({"a": [1.0, float("inf")]}, "a[1]", "finite"),
        ({"a": float("nan")}, "a", "finite"),
        (json.loads(nested(MAX_DEPTH + 1)), "a." * MAX_DEPTH + "a", "MAX_DEPTH"),
    ],
)
def test_payload_check_names_the_first_value_that_cannot_be_stored(
    value: Any, field: str | None, words: str
) -> None:
    with pytest.raises(ValidationFailed, match=words) as raised:
        payload_check(value)
    if field is not None:
        assert raised.value.field == field


def test_payload_check_accepts_what_postgres_stores() -> None:
    payload_check({"text": "é ✓ \n\t", "n": [1, 2.5, -0.0, None, True], "deep": json.loads(
        nested(MAX_DEPTH - 1))})  # fmt: skip


# Bodies -------------------------------------------------------------------------------------


BODY_CASES = [
    ("NUL in thread metadata", "/api/v1/threads",
     '{"agent": "helper", "metadata": {"note": "a\\u0000b"}}', "metadata.note"),
    ("NUL in prompt text", "/api/v1/prompts",
     '{"name": "p", "tool_description": "d", "model": "fast", "prompt": "x\\u0000"}', "prompt"),
    ("NUL in code-tool source", "/api/v1/code-tools",
     '{"name": "c", "description": "d", "source": "export default () => \\"\\u0000\\""}',
     "source"),
    ("NUL in model config", "/api/v1/models",
     '{"name": "m2", "provider": "openai", "model_id": "x", "config": {"k": "\\u0000"}}',
     "config.k"),
    ("metadata 1000 deep", "/api/v1/threads",
     '{"agent": "helper", "metadata": ' + nested(1000) + "}", None),
    ("1e999 in metadata", "/api/v1/threads", '{"agent": "helper", "metadata": {"n": 1e999}}',
     "metadata.n"),
    ("NaN in metadata", "/api/v1/threads", '{"agent": "helper", "metadata": {"n": NaN}}', None),
    ("a lone surrogate", "/api/v1/threads",
     '{"agent": "helper", "metadata": {"s": "\\ud800"}}', "metadata.s"),
]  # fmt: skip


@pytest.mark.parametrize(
    ("what", "path", "body", "field"), BODY_CASES, ids=[c[0] for c in BODY_CASES]
)
def test_bad_bodies_are_400_naming_the_field(
    tenant: Tenant, client_for: Callable[..., APIClient], what: str, path: str, body: str,
    field: str | None,
) -> None:  # fmt: skip
    seed_rich(tenant)

    response = client_for(tenant).post(path, body, content_type="application/json")

    assert_error(response, 400, field)


@pytest.mark.parametrize(
    ("what", "body", "kind"),
    [
        ("metadata 1000 deep", nested(1000), "json"),
        ("kv 1000 deep", nested(1000), "kv"),
        ("NUL in a KV value", '{"value": {"a": "\\u0000"}}', "kv"),
        ("NUL in injected metadata",
         '{"role": "user", "content": "x", "metadata": {"a": "\\u0000"}}', "inject"),
    ],
)  # fmt: skip
def test_bad_thread_bodies_are_400(
    tenant: Tenant, client_for: Callable[..., APIClient], what: str, body: str, kind: str
) -> None:
    thread = make_thread(tenant)
    client = client_for(tenant)
    path = {
        "json": f"/api/v1/threads/{thread.pk}/messages",
        "kv": f"/api/v1/threads/{thread.pk}/kv/key",
        "inject": f"/api/v1/threads/{thread.pk}/messages/inject",
    }[kind]
    method = client.put if kind == "kv" else client.post

    assert_error(method(path, body, content_type="application/json"), 400)


@pytest.mark.parametrize(
    ("what", "document"),
    [
        ("deep YAML", "a: " + "[" * 2000 + "]" * 2000),
        ("deep JSON", nested(2000)),
        ("NUL in YAML", 'version: 1\nprompts: [{name: "a\\0b"}]'),
    ],
)
def test_bad_bundles_are_400(
    tenant: Tenant, client_for: Callable[..., APIClient], what: str, document: str
) -> None:
    response = client_for(tenant).post("/api/v1/bundles", document, content_type="application/yaml")

    assert_error(response, 400)


# URLs ------------------------------------------------------------------------------------------


@pytest.mark.parametrize(
    ("what", "path", "field"),
    [
        ("NUL in a query value", "/api/v1/threads?agent=a%00b", "agent"),
        ("NUL in a path name", "/api/v1/prompts/a%00b", "path"),
        ("more than 1000 query parameters",
         "/api/v1/threads?" + "&".join(f"p{i}=1" for i in range(1500)), None),
    ],
)  # fmt: skip
def test_bad_urls_are_400(
    tenant: Tenant, client_for: Callable[..., APIClient], what: str, path: str, field: str | None
) -> None:
    assert_error(client_for(tenant).get(path), 400, field)


THREAD_LISTS = ["/api/v1/threads", "{thread}/messages", "{thread}/turns", "{thread}/actions",
                "{thread}/effects", "{thread}/children"]  # fmt: skip


@pytest.mark.parametrize("route", THREAD_LISTS)
@pytest.mark.parametrize(
    ("query", "field"),
    [("limit=0", "limit"), ("limit=501", "limit"), ("limit=ten", "limit"),
     (f"limit={MAX_OFFSET + 1}", "limit"), ("cursor=bz14", "cursor"),
     ("cursor=%C3%A9", "cursor"),
     # a position the ordering field cannot hold: `p=abc`, a number past a bigint
     ("cursor=cD1hYmM%3D", "cursor"),
     ("cursor=cD05OTk5OTk5OTk5OTk5OTk5OTk5OTk5OQ%3D%3D", "cursor")],
)  # fmt: skip
def test_a_bad_limit_or_cursor_on_a_thread_list_is_400_naming_it(
    tenant: Tenant, client_for: Callable[..., APIClient], route: str, query: str, field: str
) -> None:
    path = route.format(thread=f"/api/v1/threads/{make_thread(tenant).pk}")
    client = client_for(tenant)

    assert_error(client.get(f"{path}?{query}"), 400, field)
    assert client.get(f"{path}?limit=500").status_code == 200


TENANT_LISTS = ["/api/v1/models", "/api/v1/prompts", "/api/v1/agents", "/api/v1/code-tools",
                "/api/v1/permission-rules", "/api/v1/api-keys", "/api/v1/schedules",
                "/api/v1/webhooks", "{webhook}/deliveries", "/api/v1/registry/tools",
                "/api/v1/registry/hooks", "/api/v1/registry/effects",
                "/api/v1/registry/endpoints"]  # fmt: skip
# The tenant's lists ordered by a time: a cursor whose position is not a time.
TIMED_LISTS = ["/api/v1/permission-rules", "/api/v1/api-keys", "/api/v1/schedules",
               "/api/v1/webhooks", "{webhook}/deliveries"]  # fmt: skip


def _tenant_list(tenant: Tenant, route: str) -> str:
    if "{webhook}" not in route:
        return route
    data = {"url": "https://example.com/hooks", "event_types": ["thread.status"]}
    endpoint, _ = endpoint_save(tenant=tenant, data=data)
    return route.format(webhook=f"/api/v1/webhooks/{endpoint.pk}")


@pytest.mark.parametrize("route", TENANT_LISTS)
@pytest.mark.parametrize(
    ("query", "field"),
    [("limit=0", "limit"), ("limit=501", "limit"), ("limit=ten", "limit"),
     (f"limit={MAX_OFFSET + 1}", "limit"), ("cursor=bz14", "cursor"),
     ("cursor=%C3%A9", "cursor")],
)  # fmt: skip
def test_a_bad_limit_or_cursor_on_a_tenant_list_is_400_naming_it(
    tenant: Tenant, client_for: Callable[..., APIClient], route: str, query: str, field: str
) -> None:
    path = _tenant_list(tenant, route)
    client = client_for(tenant, Role.ADMIN)

    assert_error(client.get(f"{path}?{query}"), 400, field)
    assert client.get(f"{path}?limit=500").status_code == 200


@pytest.mark.parametrize("route", TIMED_LISTS)
def test_a_forged_position_on_a_tenant_list_ordered_by_time_is_400(
    tenant: Tenant, client_for: Callable[..., APIClient], route: str
) -> None:
    path = _tenant_list(tenant, route)

    assert_error(client_for(tenant, Role.ADMIN).get(f"{path}?cursor=cD1hYmM%3D"), 400, "cursor")


@pytest.mark.parametrize(
    "route", ["{thread}/kv", "{thread}/logs", "{thread}/env", "/api/v1/env", "{thread}/fs",
              "{thread}/fs-search?find=*", "{thread}/events"],
)  # fmt: skip
@pytest.mark.parametrize("limit", ["0", "501", "x", str(MAX_OFFSET + 1)])
def test_a_bad_page_limit_of_a_threads_storage_list_is_400_naming_it(
    tenant: Tenant, client_for: Callable[..., APIClient], route: str, limit: str
) -> None:
    path = route.format(thread=f"/api/v1/threads/{make_thread(tenant).pk}")
    joiner = "&" if "?" in path else "?"

    assert_error(client_for(tenant).get(f"{path}{joiner}limit={limit}"), 400, "limit")


@pytest.mark.parametrize(
    ("route", "query", "field"),
    [
        ("{thread}/kv", "cursor=bogus", "cursor"),
        ("{thread}/logs", "cursor=bogus", "cursor"),
        ("{thread}/env", "cursor=%C3%A9", "cursor"),
        ("{thread}/fs", "cursor=bogus", "cursor"),
        ("{thread}/fs", "cursor=YXQ9LTE%3D", "cursor"),  # at=-1
        ("{thread}/logs", "cursor=cD1hYmM%3D", "cursor"),
        ("{thread}/events", f"after={MAX_OFFSET + 1}", "after"),
        ("{thread}/events", "after=-1", "after"),
    ],
)
def test_a_bad_position_in_a_threads_storage_list_is_400_naming_it(
    tenant: Tenant, client_for: Callable[..., APIClient], route: str, query: str, field: str
) -> None:
    """A cursor the list did not give; an event sequence past what PostgreSQL counts (it
    was a DataError, a 500)."""
    path = route.format(thread=f"/api/v1/threads/{make_thread(tenant).pk}")
    client = client_for(tenant)

    assert_error(client.get(f"{path}?{query}"), 400, field)
    assert client.get(f"{path}?after={MAX_OFFSET}").status_code == 200


def test_options_answers_on_every_route(
    tenant: Tenant, client_for: Callable[..., APIClient]
) -> None:
    """Every /api/ route answers OPTIONS with its methods (the caller's own objects)."""
    seed_rich(tenant)
    client = client_for(tenant)
    answered: list[str] = []
    for route, name, takes_arguments in _routes(get_resolver().url_patterns):
        if name in NOT_TENANT_OBJECTS or (takes_arguments and name not in OBJECT_ROUTES):
            continue
        kwargs = OBJECT_ROUTES[name](tenant) if takes_arguments else {}
        response = client.options(reverse(name, kwargs=kwargs))
        assert response.status_code == 200, (route, response.content[:200])
        assert response.json()["allowed_methods"], route
        answered.append(route)
    assert len(answered) >= len(OBJECT_ROUTES) + 10


def _routes(
    patterns: list[URLPattern | URLResolver], prefix: str = "", arguments: bool = False
) -> Iterator[tuple[str, str, bool]]:
    """(route, name, whether it takes URL arguments) of every named /api/v1/ route."""
    for entry in patterns:
        route = prefix + str(entry.pattern)
        takes = arguments or bool(entry.pattern.regex.groupindex)
        if isinstance(entry, URLResolver):
            yield from _routes(entry.url_patterns, route, takes)
        elif route.startswith("api/v1/") and entry.name:
            yield route, entry.name, takes


# CSRF --------------------------------------------------------------------------------------


@pytest.mark.parametrize("path", ["/api/v1/nothing-here", "/api/v1/threads/not-a-uuid/messages"])
def test_writes_to_unknown_api_paths_are_json_404s_even_with_csrf_checks(
    tenant: Tenant, path: str
) -> None:
    for client in (APIClient(enforce_csrf_checks=True), _bearer(tenant)):
        assert_error(client.post(path, "{}", content_type="application/json"), 404)


def test_a_session_write_without_its_csrf_token_is_a_json_403(tenant: Tenant) -> None:
    user = make_member(tenant, role=Role.ADMIN)
    client = APIClient(enforce_csrf_checks=True)
    client.force_login(user)

    response = client.post("/api/v1/threads", {"agent": "helper"}, format="json")

    error = assert_error(response, 403)
    assert "CSRF" in error["message"]


def _bearer(tenant: Tenant) -> APIClient:
    client = APIClient(enforce_csrf_checks=True)
    client.credentials(HTTP_AUTHORIZATION=f"Bearer {make_api_key(tenant).secret}")
    return client


@pytest.mark.parametrize("debug", [True, False])
def test_a_host_header_not_allowed_is_a_json_400_naming_it(
    tenant: Tenant, client_for: Callable[..., APIClient], settings: Any, debug: bool
) -> None:
    settings.DEBUG = debug
    client = client_for(tenant)

    response = client.get("/api/v1/prompts/", HTTP_HOST="}2\\Bu4Q1e.yBj")

    assert response.status_code == 400
    assert response["Content-Type"] == "application/json"
    assert response.json()["error"]["field"] == "Host"


def test_outside_the_api_a_bad_request_keeps_djangos_page(client: Any, settings: Any) -> None:
    settings.DEBUG = False

    response = client.get("/admin/", HTTP_HOST="}2\\Bu4Q1e.yBj")

    assert response.status_code == 400
    assert response["Content-Type"].startswith("text/html")

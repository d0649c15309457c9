"""The cross-tenant matrix: tenant B's admin key gets 404 on every tenant-A object route.

Every API route that takes an object id must appear in ``OBJECT_ROUTES``; a new
route without an entry fails ``test_every_object_route_is_covered``, so the
matrix grows with the API.
"""

from __future__ import annotations

from collections.abc import Callable, Iterator

import pytest
from django.urls import URLPattern, URLResolver, get_resolver, reverse
from rest_framework.test import APIClient

from agents.bundles import bundle_export
from tenancy.models import ApiKey, Role, Tenant
from tests.agents.samples import seed_rich
from tests.factories import make_api_key

pytestmark = pytest.mark.django_db

METHODS = ("get", "post", "put", "patch", "delete")


def _owned_api_key(tenant: Tenant) -> str:
    return str(make_api_key(tenant, name="victim", role=Role.MEMBER).api_key.id)


def _owned_definition(name: str) -> Callable[[Tenant], dict[str, str]]:
    def build(tenant: Tenant) -> dict[str, str]:
        seed_rich(tenant)
        return {"name": name}

    return build


# Route name -> builds an object of the given tenant and returns the URL kwargs.
OBJECT_ROUTES: dict[str, Callable[[Tenant], dict[str, str]]] = {
    "api-key-detail": lambda tenant: {"pk": _owned_api_key(tenant)},
    "api-key-revoke": lambda tenant: {"pk": _owned_api_key(tenant)},
    "model-detail": _owned_definition("fast"),
    "prompt-detail": _owned_definition("assistant"),
    "agent-detail": _owned_definition("helper"),
    "code-tool-detail": _owned_definition("tally_words"),
}


# Routes with parameters that do not address a tenant's object, and where their
# tenant isolation is tested instead.
NOT_TENANT_OBJECTS = {
    "registry-listing": "tests/agents/test_registry_api.py (restricted items per tenant)",
}


def _tenant_state(tenant: Tenant) -> object:
    """Everything the matrix checks stays untouched: keys and definitions."""
    return list(ApiKey.objects.for_tenant(tenant).values()), bundle_export(tenant=tenant)


def _api_patterns(
    patterns: list[URLPattern | URLResolver], prefix: str = ""
) -> Iterator[tuple[str, URLPattern]]:
    for entry in patterns:
        route = prefix + str(entry.pattern)
        if isinstance(entry, URLResolver):
            yield from _api_patterns(entry.url_patterns, route)
        elif route.startswith("api/v1/") and entry.pattern.regex.groupindex:
            yield route, entry


def test_every_object_route_is_covered() -> None:
    names = {pattern.name for _, pattern in _api_patterns(get_resolver().url_patterns)}

    known = set(OBJECT_ROUTES) | set(NOT_TENANT_OBJECTS)
    assert names <= known, f"add to OBJECT_ROUTES: {names - known}"
    assert names, "no object routes found; the walker is broken"


@pytest.mark.parametrize("route_name", sorted(OBJECT_ROUTES))
def test_other_tenants_admin_gets_404_on_every_method(
    route_name: str,
    tenant: Tenant,
    other_tenant: Tenant,
    client_for: Callable[..., APIClient],
) -> None:
    intruder = client_for(other_tenant, Role.ADMIN)
    url = reverse(route_name, kwargs=OBJECT_ROUTES[route_name](tenant))
    before = _tenant_state(tenant)

    statuses = {method: getattr(intruder, method)(url, {}, format="json") for method in METHODS}

    answered = {m: r.status_code for m, r in statuses.items() if r.status_code != 405}
    assert answered, f"{url} allows no method at all"
    assert set(answered.values()) == {404}, answered
    for response in statuses.values():
        assert response.json()["error"]["code"] in {"not_found", "method_not_allowed"}
    assert _tenant_state(tenant) == before
    # Control: the URL is right, since its own tenant's admin gets an answer.
    owner = client_for(tenant, Role.ADMIN)
    owner_statuses = [getattr(owner, m)(url, {}, format="json").status_code for m in answered]
    assert any(200 <= code < 300 for code in owner_statuses), owner_statuses


def test_other_tenants_objects_never_appear_in_lists(
    tenant: Tenant, other_tenant: Tenant, client_for: Callable[..., APIClient]
) -> None:
    make_api_key(tenant, name="a-only")

    listed = client_for(other_tenant, Role.ADMIN).get("/api/v1/api-keys").json()

    assert "a-only" not in {item["name"] for item in listed["results"]}

"""Every path parameter is matched by a registered converter (common.converters): an id by
the ``uuid`` one, so a malformed id matches no route and answers the API's JSON 404, never
reaching a view (where it was a 500). The rule is held by walking the URL resolver, so a
new route is covered without being listed."""

from __future__ import annotations

import re
from collections.abc import Callable, Iterator, Sequence
from typing import Any

import pytest
from django.core.exceptions import ImproperlyConfigured
from django.urls import URLPattern, URLResolver, get_resolver
from django.urls.converters import PathConverter, StringConverter, UUIDConverter
from django.urls.resolvers import RegexPattern, RoutePattern
from rest_framework import viewsets
from rest_framework.test import APIClient

from common.api import Router
from common.converters import FREE_FORM, group, pattern
from tenancy.models import Role, Tenant
from threads.models import WebhookDelivery
from threads.services.webhooks import endpoint_save

# Django's admin takes any object id and answers its own "does not exist" page.
NOT_OURS = ("admin/",)
FREE_FORM_CONVERTERS = (StringConverter, PathConverter)
# A free-form regular-expression group: a converter's pattern, or (``route``) anything.
FREE_FORM_PATTERNS = {pattern("str"), pattern("path"), ".*"}
MALFORMED_IDS = [
    "0" * 36,  # 36 hex digits without dashes: matched the old [0-9a-fA-F-]{36}
    "-" * 36,
    "0" * 32,
    "01234567-89ab-cdef-0123-456789abcdeg",
    "01234567-89AB-CDEF-0123-456789ABCDEF",  # ids are written lower-case
    "not-an-id",
]


def _groups(regex: str) -> dict[str, str]:
    """``{name: pattern}`` of the named groups of ``regex``."""
    groups = {}
    for start in re.finditer(r"\(\?P<(\w+)>", regex):
        depth, index = 1, start.end()
        while depth:
            if regex[index] == "\\":
                index += 2
                continue
            depth += {"(": 1, ")": -1}.get(regex[index], 0)
            index += 1
        groups[start.group(1)] = regex[start.end() : index - 1]
    return groups


def _parameters(pattern_: Any) -> Iterator[tuple[str, str]]:
    """``(name, how it is matched)`` of a pattern's parameters: ``uuid``, ``free`` or what
    else it is (a converter class or a regular expression)."""
    if isinstance(pattern_, RoutePattern):
        for name, converter in pattern_.converters.items():
            if isinstance(converter, UUIDConverter):
                yield name, "uuid"
            elif isinstance(converter, FREE_FORM_CONVERTERS):
                yield name, "free"
            else:
                yield name, type(converter).__name__
    elif isinstance(pattern_, RegexPattern):
        for name, regex in _groups(pattern_.regex.pattern).items():
            if regex == pattern("uuid"):
                yield name, "uuid"
            elif regex in FREE_FORM_PATTERNS:
                yield name, "free"
            else:
                yield name, regex


def _routes(
    patterns: Sequence[Any], prefix: str = "", inherited: tuple[tuple[str, str], ...] = ()
) -> Iterator[tuple[str, dict[str, str]]]:
    for entry in patterns:
        route = prefix + str(entry.pattern)
        if route.startswith(NOT_OURS):
            continue
        parameters = (*inherited, *_parameters(entry.pattern))
        if isinstance(entry, URLResolver):
            yield from _routes(entry.url_patterns, route, parameters)
        else:
            assert isinstance(entry, URLPattern)
            yield route, dict(parameters)


def test_every_path_parameter_is_matched_by_a_strict_converter() -> None:
    wrong = []
    routes = list(_routes(get_resolver().url_patterns))
    for route, parameters in routes:
        for name, matched_by in parameters.items():
            expected = "free" if name in FREE_FORM else "uuid"
            if matched_by != expected:
                wrong.append(f"{route}: {name} is matched by {matched_by}, not {expected}")
    assert wrong == []
    assert sum("uuid" in parameters.values() for _, parameters in routes) > 50


@pytest.mark.parametrize("malformed", MALFORMED_IDS)
def test_a_malformed_id_matches_no_route_with_an_id(malformed: str) -> None:
    for route, parameters in _routes(get_resolver().url_patterns):
        for name, matched_by in parameters.items():
            if matched_by == "uuid":
                one = "01234567-89ab-cdef-0123-456789abcdef"
                assert re.fullmatch(group(name), one), route
                assert not re.fullmatch(group(name), malformed), (route, malformed)


def test_the_router_refuses_a_viewset_with_its_own_lookup_pattern() -> None:
    class Loose(viewsets.ViewSet):
        lookup_value_regex = "[0-9a-fA-F-]{36}"

        def retrieve(self, request: Any, pk: str) -> None: ...

    router = Router()
    router.register("loose", Loose, basename="loose")

    with pytest.raises(ImproperlyConfigured, match="set lookup_value_converter"):
        router.get_urls()


def test_the_router_matches_a_lookup_by_its_converter() -> None:
    class ById(viewsets.ViewSet):
        def retrieve(self, request: Any, pk: str) -> None: ...

    class ByName(viewsets.ViewSet):
        lookup_field = "name"
        lookup_value_converter = "str"

        def retrieve(self, request: Any, name: str) -> None: ...

    router = Router()
    router.register("things", ById, basename="thing")
    router.register("names", ByName, basename="name")

    regexes = [str(url.pattern) for url in router.get_urls()]
    assert regexes == [
        f"^things/{group('pk')}/?$",
        f"^names/{group('name', 'str')}/?$",
    ]


@pytest.mark.django_db
def test_redelivering_with_a_malformed_delivery_id_is_a_json_404(
    tenant: Tenant, client_for: Callable[..., APIClient]
) -> None:
    client = client_for(tenant, Role.ADMIN)
    endpoint, _ = endpoint_save(
        tenant=tenant, data={"url": "https://example.com/hooks", "event_types": ["thread.status"]}
    )
    delivery = WebhookDelivery.objects.create(
        tenant=tenant, endpoint=endpoint, event_type="thread.status", payload={"type": "x"}
    )
    base = f"/api/v1/webhooks/{endpoint.pk}/deliveries"

    for malformed in MALFORMED_IDS:
        response = client.post(f"{base}/{malformed}/redeliver")

        assert response.status_code == 404, (malformed, response.content)
        assert response["Content-Type"] == "application/json"
        assert response.json()["error"]["code"] == "not_found"
    assert client.post(f"{base}/{delivery.pk}/redeliver").status_code == 200

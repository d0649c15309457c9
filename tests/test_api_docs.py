"""docs/api.md lists the API's routes as they are: one row per route, every operation of the
OpenAPI schema with its path parameters named as the schema names them, under the heading of
its resource's tag and with the lowest role its view lets in; and the routes the schema
leaves out (thread endpoints, the schema itself, health checks, WebSockets) are real ones."""

from __future__ import annotations

import re
from collections import Counter
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import pytest
from django.urls import Resolver404, resolve
from drf_spectacular.generators import SchemaGenerator
from rest_framework.permissions import SAFE_METHODS

from config import env
from config.routing import websocket_urlpatterns
from tenancy.models import Role
from tenancy.permissions import HasTenantRole

API_DOC = Path(env.REPO_DIR) / "docs" / "api.md"
METHODS = ("get", "post", "put", "patch", "delete")
# The section whose rows are routes the schema leaves out on purpose.
OUTSIDE = "Outside the schema"
ROW = re.compile(r"^\| `(?P<method>[A-Z]+) (?P<path>/\S*)` \| (?P<role>[^|]+?) \| .+ \|$")
HEADING = re.compile(r"^#{2,3} (?P<title>.+)$")
PARAMETER = re.compile(r"\{[^}/]+\}")
SAMPLE_ID = "0190a1b2-c3d4-7e5f-8a6b-7c8d9e0f1a2b"
SOCKET_FALLBACK = "ws-not-found"

Route = tuple[str, str]


@dataclass(frozen=True)
class Row:
    """A route table row: ``method`` is an HTTP method, ``WS`` or ``ANY`` (every method the
    route takes); ``path`` is kept without its trailing slash."""

    method: str
    path: str
    role: str
    section: str
    line: int

    @property
    def route(self) -> Route:
        return (self.method, self.path)


def _route(method: str, path: str) -> Route:
    return (method.upper(), path.rstrip("/") or "/")


def _rows() -> list[Row]:
    rows, section = [], ""
    for number, line in enumerate(API_DOC.read_text().splitlines(), start=1):
        if heading := HEADING.match(line):
            section = heading["title"]
        elif row := ROW.match(line):
            method, path = _route(row["method"], row["path"])
            rows.append(Row(method, path, row["role"].strip(), section, number))
    return rows


def _tag_of(section: str) -> str:
    """The tag a heading names: `Code tools` is `code-tools`."""
    return section.lower().replace(" ", "-")


@dataclass
class Api:
    operations: dict[Route, dict[str, Any]]  # the schema's, by route
    views: dict[Route, Any]  # every DRF route's view, the schema's and those it leaves out


@pytest.fixture(scope="module")
def api() -> Api:
    generator = SchemaGenerator()
    document = generator.get_schema(request=None, public=True)
    paths = list(document["paths"])
    assert len({p.rstrip("/") for p in paths}) == len(paths), "two paths differ only by a slash"
    operations = {
        _route(method, path): operation
        for path, item in document["paths"].items()
        for method, operation in item.items()
        if method in METHODS
    }
    views = {
        _route(method, path): view
        for path, _regex, method, view in generator._get_paths_and_endpoints()
    }
    return Api(operations, views)


@pytest.fixture(scope="module")
def rows() -> list[Row]:
    found = _rows()
    assert len(found) > 100, "the route tables were not found"
    return found


def _required_role(view: Any, method: str) -> str:
    """The lowest role `HasTenantRole` lets call ``method`` on ``view`` (``none`` when the
    view asks for no credentials)."""
    if not any(issubclass(permission, HasTenantRole) for permission in view.permission_classes):
        return "none"
    if method in SAFE_METHODS:
        return Role(getattr(view, "read_role", Role.READ_ONLY)).value
    return Role(getattr(view, "write_role", Role.MEMBER)).value


def test_each_route_has_one_row(rows: list[Row]) -> None:
    repeated = [route for route, count in Counter(r.route for r in rows).items() if count > 1]
    assert repeated == []


def test_every_operation_of_the_schema_is_documented(api: Api, rows: list[Row]) -> None:
    documented = {row.route for row in rows if row.section != OUTSIDE}
    assert sorted(set(api.operations) - documented) == []


def test_nothing_is_documented_that_the_schema_lacks(api: Api, rows: list[Row]) -> None:
    lacking = [(row.line, *row.route) for row in rows if row.section != OUTSIDE]
    assert [row for row in lacking if (row[1], row[2]) not in api.operations] == []


def test_each_operation_sits_under_its_resource(api: Api, rows: list[Row]) -> None:
    misplaced = [
        (row.line, *row.route, row.section, api.operations[row.route]["tags"])
        for row in rows
        if row.route in api.operations
        and api.operations[row.route]["tags"] != [_tag_of(row.section)]
    ]
    assert misplaced == []


def test_each_row_names_the_role_its_view_requires(api: Api, rows: list[Row]) -> None:
    wrong = [
        (row.line, *row.route, row.role, _required_role(api.views[row.route], row.method))
        for row in rows
        if row.route in api.operations
        and row.role != _required_role(api.views[row.route], row.method)
    ]
    assert wrong == []


def _resolves(path: str) -> bool:
    sample = PARAMETER.sub(SAMPLE_ID, path)
    for candidate in (sample, f"{sample}/"):
        try:
            resolve(candidate)
        except Resolver404:
            continue
        return True
    return False


def test_routes_outside_the_schema_are_left_out_of_it(api: Api, rows: list[Row]) -> None:
    outside = [row for row in rows if row.section == OUTSIDE and row.method != "WS"]
    in_schema = [
        (row.line, *row.route)
        for row in outside
        if any(route in api.operations for route in _routes(row, api))
    ]
    assert in_schema == []


def test_routes_outside_the_schema_exist(api: Api, rows: list[Row]) -> None:
    outside = [row for row in rows if row.section == OUTSIDE and row.method != "WS"]
    assert [(row.line, *row.route) for row in outside if not _resolves(row.path)] == []
    taken = [row for row in outside if row.method == "ANY" or row.route in api.views]
    assert all(_routes(row, api) for row in taken)


def _routes(row: Row, api: Api) -> list[Route]:
    """The routes a row stands for: ``ANY`` is every method the route takes."""
    if row.method != "ANY":
        return [row.route]
    return [(method, path) for method, path in api.views if path == row.path]


def test_the_websockets_are_documented_as_routed(rows: list[Row]) -> None:
    sockets = [row for row in rows if row.method == "WS"]
    routed = {p.name for p in websocket_urlpatterns if p.name != SOCKET_FALLBACK}
    found: dict[int, str | None] = {}
    for row in sockets:
        sample = PARAMETER.sub(SAMPLE_ID, row.path).lstrip("/") + "/"
        found[row.line] = next(
            (p.name for p in websocket_urlpatterns
             if p.name != SOCKET_FALLBACK and p.resolve(sample) is not None),
            None,
        )  # fmt: skip
    assert {line: name for line, name in found.items() if name is None} == {}
    assert set(found.values()) == routed

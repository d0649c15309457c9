"""The OpenAPI schema is a product: every response typed, every operation summarised and
tagged by resource, and every collection in the one list shape (common.pagination)."""

from __future__ import annotations

from typing import Any

import pytest
from drf_spectacular.generators import SchemaGenerator

METHODS = ("get", "post", "put", "patch", "delete")

# GET operations that answer one thing, not a collection, though their path does not end
# with an id: the caller, a bundle document, the file tree's totals, a turn's wait and
# stream, the usage export (a CSV or JSON-lines file), a thread's storage report.
NOT_COLLECTIONS = {
    "/api/v1/me",
    "/api/v1/bundles/",
    "/api/v1/usage/export/",
    "/api/v1/threads/{thread_id}/fs-stats",
    "/api/v1/threads/{thread_id}/storage",
    "/api/v1/threads/{thread_id}/tools",
    "/api/v1/mcp-servers/{name}/tools/",
    "/api/v1/a2a-agents/{name}/card/",
    "/api/v1/threads/{thread_id}/export",
    "/api/v1/sessions/{session_id}/export",
    "/api/v1/turns/{turn_id}/tools",
    "/api/v1/turns/{turn_id}/wait",
    "/api/v1/turns/{turn_id}/stream",
}
# Collections addressed by a path parameter: the registry's kinds.
COLLECTIONS_WITH_A_PARAMETER = {"/api/v1/registry/{kind}/"}


@pytest.fixture(scope="module")
def document() -> dict[str, Any]:
    generated: dict[str, Any] = SchemaGenerator().get_schema(request=None, public=True)
    return generated


def _operations(document: dict[str, Any]) -> list[tuple[str, str, dict[str, Any]]]:
    return [
        (method, path, operation)
        for path, item in document["paths"].items()
        for method, operation in item.items()
        if method in METHODS
    ]


def _resolve(document: dict[str, Any], schema: dict[str, Any]) -> dict[str, Any]:
    while "$ref" in schema:
        schema = document["components"]["schemas"][schema["$ref"].rsplit("/", 1)[1]]
    return schema


def _untyped(document: dict[str, Any], schema: dict[str, Any] | None) -> bool:
    """An object that says nothing of its properties, or an array of such."""
    if not schema:
        return True
    schema = _resolve(document, schema)
    if schema.get("type") == "array":
        return _untyped(document, schema.get("items"))
    choices = schema.get("oneOf") or schema.get("anyOf")
    if choices:
        return any(_untyped(document, choice) for choice in choices)
    if schema.get("type") in ("object", None) and not schema.get("properties"):
        extra = schema.get("additionalProperties")
        return not isinstance(extra, dict) or not extra  # a map must say what it maps to
    return False


def _is_collection(path: str) -> bool:
    return path in COLLECTIONS_WITH_A_PARAMETER or (
        not path.rstrip("/").endswith("}") and path not in NOT_COLLECTIONS
    )


def test_no_response_is_untyped(document: dict[str, Any]) -> None:
    untyped = [
        (method, path, status, media)
        for method, path, operation in _operations(document)
        for status, response in operation["responses"].items()
        for media, content in response.get("content", {}).items()
        if media.endswith("json") and _untyped(document, content.get("schema"))
    ]
    assert untyped == []


def test_every_component_says_what_it_holds(document: dict[str, Any]) -> None:
    vague = [
        name
        for name, schema in document["components"]["schemas"].items()
        if schema.get("type") == "object" and _untyped(document, schema)
    ]
    assert vague == []


def test_every_operation_has_a_one_line_summary_and_its_resource_tag(
    document: dict[str, Any],
) -> None:
    for method, path, operation in _operations(document):
        summary = operation.get("summary", "")
        assert summary, (method, path)
        assert "\n" not in summary, (method, path, summary)
        assert len(summary) <= 80, (method, path, summary)
        assert not summary.endswith("."), (method, path, summary)
        assert len(operation["tags"]) == 1, (method, path)
        assert operation["tags"] != ["v1"], (method, path)


def test_descriptions_are_written_for_users_not_copied_from_docstrings(
    document: dict[str, Any],
) -> None:
    for method, path, operation in _operations(document):
        description = operation.get("description", "")
        assert "``" not in description, (method, path)
        assert ":func:" not in description, (method, path)
    for name, schema in document["components"]["schemas"].items():
        description = schema.get("description", "")
        assert "``" not in description, name
        assert ":func:" not in description, name


def test_every_success_is_declared_with_its_body_or_as_empty(document: dict[str, Any]) -> None:
    for method, path, operation in _operations(document):
        successes = [s for s in operation["responses"] if s.startswith("2")]
        assert successes, (method, path)
        assert "default" not in operation["responses"], (method, path)
        for status in successes:
            response = operation["responses"][status]
            assert response.get("content") or status == "204", (method, path, status)


def test_every_collection_answers_the_one_list_shape(document: dict[str, Any]) -> None:
    lists = [
        (path, operation)
        for method, path, operation in _operations(document)
        if method == "get" and _is_collection(path)
    ]
    assert len(lists) >= 20
    for path, operation in lists:
        schema = _resolve(
            document, operation["responses"]["200"]["content"]["application/json"]["schema"]
        )
        assert set(schema["required"]) >= {"results", "next", "previous"}, path
        assert schema["properties"]["results"]["type"] == "array", path
        assert not _untyped(document, schema["properties"]["results"]["items"]), path
        parameters = {p["name"] for p in operation.get("parameters", []) if p["in"] == "query"}
        assert "limit" in parameters, path
        assert "cursor" in parameters or "after" in parameters, path

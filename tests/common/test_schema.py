"""The OpenAPI schema documents the error statuses every operation can answer
(common.schema), so a client, and the schema fuzz, knows a 4xx for what it is."""

from __future__ import annotations

from typing import Any

import pytest
from drf_spectacular.generators import SchemaGenerator

ERROR_REF = "#/components/schemas/ErrorOutput"
METHODS = ("get", "post", "put", "patch", "delete")


@pytest.fixture(scope="module")
def document() -> dict[str, Any]:
    generator = SchemaGenerator()
    generated: dict[str, Any] = generator.get_schema(request=None, public=True)
    return generated


def _operations(document: dict[str, Any]) -> list[tuple[str, str, dict[str, Any]]]:
    return [
        (method, path, operation)
        for path, item in document["paths"].items()
        for method, operation in item.items()
        if method in METHODS
    ]


def test_every_operation_documents_the_statuses_it_can_always_answer(
    document: dict[str, Any],
) -> None:
    for method, path, operation in _operations(document):
        expected = {"400", "401", "403", "429", "503"}
        if "{" in path:
            expected.add("404")
        if "requestBody" in operation:
            expected |= {"408", "413", "415"}
        documented = set(operation["responses"])
        assert expected <= documented, (method, path, expected - documented)


def test_every_documented_error_has_the_error_shape(document: dict[str, Any]) -> None:
    for method, path, operation in _operations(document):
        for status, response in operation["responses"].items():
            if int(status) >= 400:
                schema = response["content"]["application/json"]["schema"]
                assert schema == {"$ref": ERROR_REF}, (method, path, status)
    error = document["components"]["schemas"]["ErrorOutput"]
    assert error["required"] == ["error"]
    detail = document["components"]["schemas"]["ErrorDetailOutput"]
    assert set(detail["required"]) == {"code", "message"}


@pytest.mark.parametrize(
    ("method", "path", "status"),
    [
        ("delete", "/api/v1/agents/{name}/", "409"),  # still referenced
        ("post", "/api/v1/models/", "409"),  # the name is taken
        ("delete", "/api/v1/turns/{turn_id}", "409"),  # not queued
        ("post", "/api/v1/turns/{turn_id}/promote", "409"),
        ("post", "/api/v1/threads/{thread_id}/turns", "409"),  # terminated, busy, key reused
        ("put", "/api/v1/threads/{thread_id}/kv/{key}", "409"),  # renamed onto a key
        ("delete", "/api/v1/threads/{thread_id}/fs/{file_path}", "409"),  # not empty
        ("get", "/api/v1/threads/{thread_id}/fs/{file_path}", "416"),
        ("post", "/api/v1/threads/{thread_id}/variables/{request_id}", "410"),
    ],
)
def test_a_route_documents_the_conflicts_its_services_raise(
    document: dict[str, Any], method: str, path: str, status: str
) -> None:
    assert status in document["paths"][path][method]["responses"]


def test_what_answers_200_with_a_body_is_not_documented_as_204(document: dict[str, Any]) -> None:
    """Found by the schema fuzz: removing a queued turn answers the turn."""
    responses = document["paths"]["/api/v1/turns/{turn_id}"]["delete"]["responses"]

    assert "200" in responses
    assert "204" not in responses

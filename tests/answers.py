"""Helpers for the API's answers: one checked against the OpenAPI schema, strictly (an
object may hold only the properties its component declares, unless the component is a map),
as a generated client parses it, so the schema must hold what the views really answer; and
a list read page by page."""

from __future__ import annotations

import copy
import functools
import json
from typing import Any

from django.http import HttpResponse, HttpResponseBase, StreamingHttpResponse
from drf_spectacular.generators import SchemaGenerator
from jsonschema import Draft202012Validator

Json = dict[str, Any]


@functools.cache
def schema_document() -> Json:
    generated: Json = SchemaGenerator().get_schema(request=None, public=True)
    return generated


@functools.cache
def _strict_components() -> Json:
    components: Json = copy.deepcopy(schema_document()["components"])
    _close(components)
    return components


def _close(schema: Any) -> None:
    """Objects that list their properties accept no others."""
    if isinstance(schema, list):
        for item in schema:
            _close(item)
    if not isinstance(schema, dict):
        return
    if isinstance(schema.get("properties"), dict):
        schema.setdefault("additionalProperties", False)
    for value in schema.values():
        _close(value)


def _problems(schema: Json, body: Any) -> list[str]:
    schema = copy.deepcopy(schema)
    _close(schema)
    validator = Draft202012Validator(
        {**schema, "components": _strict_components()},
        format_checker=Draft202012Validator.FORMAT_CHECKER,
    )
    return [
        f"{'/'.join(map(str, error.absolute_path))}: {error.message}"
        for error in validator.iter_errors(body)
    ]


def assert_answers(component: str, body: Any) -> None:
    """``body`` is valid against ``#/components/schemas/<component>`` (formats included)."""
    problems = _problems({"$ref": f"#/components/schemas/{component}"}, body)
    assert problems == [], f"{component}: {problems}"


def body_of(response: HttpResponseBase) -> Any:
    """The JSON body of a response, also of a streamed one (a wait's)."""
    if isinstance(response, StreamingHttpResponse):
        return json.loads(b"".join(response.streaming_content))  # type: ignore[arg-type]
    assert isinstance(response, HttpResponse)
    return json.loads(response.content)


def documented(method: str, path: str, response: HttpResponseBase) -> Any:
    """The body of ``response`` to ``method path`` (the schema's path template), after
    checking it is the body the schema documents for its status."""
    operation = schema_document()["paths"][path][method]
    declared = operation["responses"][str(response.status_code)]
    if "content" not in declared:
        assert response.status_code == 204, (method, path, response.status_code)
        assert isinstance(response, HttpResponse)
        assert not response.content
        return None
    body = body_of(response)
    problems = _problems(declared["content"]["application/json"]["schema"], body)
    assert problems == [], (method, path, response.status_code, problems)
    return body


def pages(client: Any, url: str) -> list[dict[str, Any]]:
    """Every page of the list at ``url``, following ``next`` to the end."""
    found = [client.get(url).json()]
    while found[-1]["next"] is not None:
        assert len(found) < 100, "the list does not end"
        found.append(client.get(found[-1]["next"]).json())
    return found

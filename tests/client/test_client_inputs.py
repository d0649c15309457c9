"""The client sends no key the server does not know: every operation of the client is
called with each of its arguments given, and the JSON body it builds is checked against
the request body the OpenAPI schema documents (closed objects: common.inputs). No server
is needed, since an operation is a pure function that builds a ``Call``."""

from __future__ import annotations

import datetime as dt
import inspect
import re
import types
import typing
from collections.abc import Iterable, Iterator, Mapping, Sequence
from typing import Any

import pytest
from drf_spectacular.generators import SchemaGenerator
from standard_agents_client._call import Call
from standard_agents_client._operations import access, storage, tenant, threads, turns, work

MODULES = (access, storage, tenant, threads, turns, work)


def _example(annotation: Any) -> Any:
    """A value of ``annotation`` that is not None; a mapping the caller passes is empty, so
    the keys of a body are the client's own."""
    origin = typing.get_origin(annotation)
    if origin in (typing.Union, types.UnionType):
        given = [a for a in typing.get_args(annotation) if a is not type(None)]
        return _example(given[0])
    if origin is typing.Literal:
        return typing.get_args(annotation)[0]
    if origin is tuple:
        return tuple(_example(item) for item in typing.get_args(annotation))
    if origin in (list, Sequence, Iterable):
        return [_example(typing.get_args(annotation)[0])]
    simple = {str: "x", bool: True, int: 1, float: 1.0, bytes: b"x",
              dt.datetime: dt.datetime(2030, 1, 1, tzinfo=dt.UTC)}  # fmt: skip
    if annotation in simple:
        return simple[annotation]
    if origin in (dict, Mapping) or typing.is_typeddict(annotation):
        return {}
    return 1


def _calls() -> Iterator[tuple[str, Call[Any]]]:
    for module in MODULES:
        for name, operation in inspect.getmembers(module, inspect.isfunction):
            if operation.__module__ != module.__name__ or name.startswith("_"):
                continue
            hints = typing.get_type_hints(operation)
            arguments = {
                parameter: _example(hints.get(parameter, str))
                for parameter in inspect.signature(operation).parameters
            }
            call = operation(**arguments)
            if isinstance(call, Call) and isinstance(call.json, Mapping):
                yield name, call  # not an upload (a raw or multipart body)


@pytest.fixture(scope="module")
def document() -> dict[str, Any]:
    generated: dict[str, Any] = SchemaGenerator().get_schema(request=None, public=True)
    return generated


def _resolve(document: dict[str, Any], schema: dict[str, Any]) -> dict[str, Any]:
    while "$ref" in schema:
        schema = document["components"]["schemas"][schema["$ref"].rsplit("/", 1)[1]]
    return schema


def _request_schema(document: dict[str, Any], call: Call[Any]) -> dict[str, Any]:
    for template, item in document["paths"].items():
        pattern = re.sub(r"\{[^}]+\}", "[^/]+", template.removeprefix("/api/v1").rstrip("/"))
        operation = item.get(call.method.lower())
        if operation is not None and re.fullmatch(pattern, call.path.rstrip("/")):
            content = operation["requestBody"]["content"]["application/json"]
            return _resolve(document, content["schema"])
    raise AssertionError(f"no operation {call.method} {call.path} in the schema")


def _unknown(document: dict[str, Any], schema: dict[str, Any], body: Any, path: str) -> list[str]:
    """The keys of ``body`` that a closed object of ``schema`` does not declare."""
    schema = _resolve(document, schema)
    if not isinstance(body, Mapping) or "properties" not in schema:
        return []
    found = []
    for key, value in body.items():
        where = f"{path}.{key}" if path else key
        declared = schema["properties"].get(key)
        if declared is None:
            found.append(where)
        else:
            found += _unknown(document, declared, value, where)
    return found


CALLS = sorted(_calls(), key=lambda item: item[0])


def test_the_walk_builds_every_body() -> None:
    names = {name for name, _ in CALLS}
    assert {"schedule_create", "turn_submit", "api_key_create", "kv_set"} <= names


@pytest.mark.parametrize(("name", "call"), CALLS, ids=[name for name, _ in CALLS])
def test_no_operation_sends_a_key_the_server_does_not_know(
    document: dict[str, Any], name: str, call: Call[Any]
) -> None:
    schema = _request_schema(document, call)

    assert _unknown(document, schema, call.json, "") == []

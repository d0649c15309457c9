"""Tool schemas as sent to providers (spec DIGEST section 7)."""

from __future__ import annotations

import copy
from typing import Any

import pytest
from hypothesis import given
from hypothesis import strategies as st

from agents.providers.schemas import provider_tool_schema

EMPTY = {"type": "object", "properties": {}, "additionalProperties": False}


@pytest.mark.parametrize("schema", [None, {}], ids=["none", "empty"])
def test_missing_arguments_schema_becomes_an_empty_closed_object(schema: Any) -> None:
    assert provider_tool_schema(schema) == EMPTY


def test_every_nested_object_schema_is_closed() -> None:
    schema = {
        "type": "object",
        "properties": {
            "address": {"type": "object", "properties": {"city": {"type": "string"}}},
            "tags": {"type": "array", "items": {"type": "object", "properties": {}}},
            "either": {"anyOf": [{"type": "object"}, {"type": "null"}]},
        },
        "$defs": {"Point": {"properties": {"x": {"type": "number"}}}},
    }

    shaped = provider_tool_schema(schema)

    assert shaped["additionalProperties"] is False
    properties = shaped["properties"]
    assert properties["address"]["additionalProperties"] is False
    assert properties["tags"]["items"]["additionalProperties"] is False
    assert properties["either"]["anyOf"][0]["additionalProperties"] is False
    assert "additionalProperties" not in properties["either"]["anyOf"][1]
    assert "additionalProperties" not in properties["address"]["properties"]["city"]
    assert shaped["$defs"]["Point"]["additionalProperties"] is False


def test_an_explicit_additional_properties_is_kept() -> None:
    schema = {
        "type": "object",
        "properties": {
            "open": {"type": "object", "additionalProperties": True},
            "map": {"type": "object", "additionalProperties": {"type": "integer"}},
        },
    }

    shaped = provider_tool_schema(schema)

    assert shaped["properties"]["open"]["additionalProperties"] is True
    assert shaped["properties"]["map"]["additionalProperties"] == {"type": "integer"}


def test_schema_and_property_names_keywords_are_stripped_at_every_depth() -> None:
    schema = {
        "$schema": "https://json-schema.org/draft/2020-12/schema",
        "type": "object",
        "propertyNames": {"pattern": "^[a-z]+$"},
        "properties": {
            "inner": {
                "$schema": "https://json-schema.org/draft/2020-12/schema",
                "type": "object",
                "propertyNames": {"maxLength": 3},
            }
        },
    }

    shaped = provider_tool_schema(schema)

    assert "$schema" not in shaped
    assert "propertyNames" not in shaped
    assert shaped["properties"]["inner"] == {"type": "object", "additionalProperties": False}


def test_a_property_named_like_a_stripped_keyword_is_kept() -> None:
    schema = {"type": "object", "properties": {"$schema": {"type": "string"}}}

    assert provider_tool_schema(schema)["properties"] == {"$schema": {"type": "string"}}


def test_data_values_are_not_treated_as_schemas() -> None:
    default = {"type": "object", "$schema": "kept"}
    schema = {
        "type": "object",
        "properties": {"config": {"type": "object", "default": default, "enum": [default]}},
    }

    config = provider_tool_schema(schema)["properties"]["config"]

    assert config["default"] == {"type": "object", "$schema": "kept"}
    assert config["enum"] == [{"type": "object", "$schema": "kept"}]


def test_top_level_gets_type_and_properties_when_missing() -> None:
    shaped = provider_tool_schema({"required": []})

    assert shaped == {
        "required": [],
        "type": "object",
        "properties": {},
        "additionalProperties": False,
    }


def test_boolean_subschemas_pass_through() -> None:
    schema = {"type": "object", "properties": {"anything": True, "nothing": False}}

    assert provider_tool_schema(schema)["properties"] == {"anything": True, "nothing": False}


_leaf = st.fixed_dictionaries({"type": st.sampled_from(["string", "integer", "boolean"])})
_schemas = st.recursive(
    _leaf,
    lambda children: st.one_of(
        st.fixed_dictionaries(
            {
                "type": st.just("object"),
                "properties": st.dictionaries(
                    st.text(min_size=1, max_size=8), children, max_size=3
                ),
            },
            optional={
                "$schema": st.just("https://json-schema.org/draft/2020-12/schema"),
                "propertyNames": st.just({"maxLength": 5}),
            },
        ),
        st.fixed_dictionaries({"type": st.just("array"), "items": children}),
        st.fixed_dictionaries({"anyOf": st.lists(children, min_size=1, max_size=3)}),
    ),
    max_leaves=10,
)


def _object_schemas(schema: Any) -> list[dict[str, Any]]:
    found = [schema] if schema.get("type") == "object" else []
    for sub in schema.get("properties", {}).values():
        found += _object_schemas(sub)
    if "items" in schema:
        found += _object_schemas(schema["items"])
    for sub in schema.get("anyOf", []):
        found += _object_schemas(sub)
    return found


@given(_schemas)
def test_shaping_closes_every_object_strips_keywords_and_leaves_the_input_alone(
    schema: dict[str, Any],
) -> None:
    before = copy.deepcopy(schema)

    shaped = provider_tool_schema({"type": "object", "properties": {"root": schema}})

    assert schema == before
    for node in _object_schemas(shaped):
        assert node["additionalProperties"] is False
        assert "$schema" not in node
        assert "propertyNames" not in node

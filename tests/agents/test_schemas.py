from __future__ import annotations

from typing import Any

import pytest
from pydantic import BaseModel, Field, RootModel, ValidationError, field_validator

from agents.schemas import (
    ArgumentsInvalid,
    SchemaInvalid,
    SchemaProblem,
    check_schema,
    format_path,
    problems_from_pydantic,
    schema_from_args,
    validate_args,
)
from common.errors import ValidationFailed


class LineItem(BaseModel):
    sku: str
    qty: int = Field(ge=1)


class Order(BaseModel):
    customer: str
    items: list[LineItem]


# The JSON Schema an operator would write by hand for Order.
ORDER_SCHEMA: dict[str, Any] = {
    "type": "object",
    "properties": {
        "customer": {"type": "string"},
        "items": {
            "type": "array",
            "items": {
                "type": "object",
                "properties": {"sku": {"type": "string"}, "qty": {"type": "integer", "minimum": 1}},
                "required": ["sku", "qty"],
            },
        },
    },
    "required": ["customer", "items"],
}

BAD_ORDER = {"items": [{"sku": "a", "qty": 1}, {"sku": 7, "qty": 0}, {"qty": 2}]}
BAD_ORDER_MESSAGE = (
    "Tool argument validation failed: "
    "[customer] is a required property; "
    "[items[1].qty] 0 is less than the minimum of 1; "
    "[items[1].sku] 7 is not of type 'string'; "
    "[items[2].sku] is a required property"
)


def test_format_path_dots_keys_brackets_indexes_and_quotes_odd_keys() -> None:
    assert format_path([]) == "$"
    assert format_path(["items", 2, "name"]) == "items[2].name"
    assert format_path([0]) == "[0]"
    assert format_path(["labels", "first name"]) == 'labels["first name"]'
    assert format_path(["properties", "item", "$ref"]) == "properties.item.$ref"


def test_check_schema_accepts_an_object_schema() -> None:
    assert check_schema(ORDER_SCHEMA) == []


def test_check_schema_accepts_a_draft_07_schema_with_local_definitions() -> None:
    schema = {
        "$schema": "http://json-schema.org/draft-07/schema#",
        "type": "object",
        "definitions": {"City": {"type": "string"}},
        "properties": {"city": {"$ref": "#/definitions/City"}},
    }

    assert check_schema(schema) == []


def test_check_schema_refuses_what_is_not_a_json_object() -> None:
    assert check_schema(["type", "object"]) == [SchemaProblem("$", "must be a JSON object")]
    assert check_schema(True) == [SchemaProblem("$", "must be a JSON object")]


def test_check_schema_requires_an_object_at_the_top() -> None:
    assert check_schema({"type": "string"}) == [
        SchemaProblem("type", 'must be "object": tool arguments are a JSON object')
    ]


def test_check_schema_names_the_path_of_each_metaschema_violation() -> None:
    schema = {
        "type": "object",
        "properties": {"city": {"type": "strin"}, "code": {"pattern": "("}},
        "required": "city",
    }

    assert check_schema(schema) == [
        SchemaProblem(
            "properties.city.type", "'strin' is not valid under any of the given schemas"
        ),
        SchemaProblem("properties.code.pattern", "'(' is not a 'regex'"),
        SchemaProblem("required", "'city' is not of type 'array'"),
    ]


def test_check_schema_requires_references_to_resolve_inside_the_schema() -> None:
    schema = {
        "type": "object",
        "$defs": {"City": {"type": "string"}},
        "properties": {
            "home": {"$ref": "#/$defs/City"},
            "work": {"$ref": "#/$defs/Town"},
            "remote": {"$ref": "https://example.com/city.json"},
            "default": {"$ref": "#/$defs/Missing"},
        },
        "default": {"$ref": "not a reference: default values are data"},
    }

    assert check_schema(schema) == [
        SchemaProblem(
            "properties.default.$ref", "'#/$defs/Missing' does not resolve inside the schema"
        ),
        SchemaProblem(
            "properties.remote.$ref",
            "only local references (#...) are allowed: the schema must be self-contained",
        ),
        SchemaProblem("properties.work.$ref", "'#/$defs/Town' does not resolve inside the schema"),
    ]


def test_validate_args_returns_a_copy_of_valid_arguments() -> None:
    args = {"customer": "acme", "items": [{"sku": "a", "qty": 2}]}

    validated = validate_args(ORDER_SCHEMA, args)

    assert validated == args
    assert validated is not args


def test_validate_args_lists_every_error_with_its_path_sorted() -> None:
    with pytest.raises(ArgumentsInvalid) as caught:
        validate_args(ORDER_SCHEMA, BAD_ORDER)

    assert caught.value.message == BAD_ORDER_MESSAGE
    assert str(caught.value) == BAD_ORDER_MESSAGE
    assert caught.value.field == "customer"
    assert caught.value.code == "invalid_arguments"
    assert caught.value.errors == [
        SchemaProblem("customer", "is a required property"),
        SchemaProblem("items[1].qty", "0 is less than the minimum of 1"),
        SchemaProblem("items[1].sku", "7 is not of type 'string'"),
        SchemaProblem("items[2].sku", "is a required property"),
    ]
    assert isinstance(caught.value, ValidationFailed)


def test_a_pydantic_model_and_the_equivalent_json_schema_give_the_same_errors() -> None:
    model_schema = schema_from_args(Order)
    assert model_schema is not None

    with pytest.raises(ArgumentsInvalid) as from_model:
        validate_args(model_schema, BAD_ORDER)
    with pytest.raises(ArgumentsInvalid) as from_json:
        validate_args(ORDER_SCHEMA, BAD_ORDER)

    assert from_model.value.errors == from_json.value.errors
    assert from_model.value.message == BAD_ORDER_MESSAGE


def test_validate_args_orders_array_indexes_numerically() -> None:
    schema = {
        "type": "object",
        "properties": {"n": {"type": "array", "items": {"type": "integer"}}},
    }
    args = {"n": ["x" if i in (2, 10) else i for i in range(11)]}

    with pytest.raises(ArgumentsInvalid) as caught:
        validate_args(schema, args)

    assert [problem.path for problem in caught.value.errors] == ["n[2]", "n[10]"]


def test_validate_args_names_each_unexpected_property() -> None:
    schema = {
        "type": "object",
        "properties": {"a": {"type": "integer"}},
        "additionalProperties": False,
    }

    with pytest.raises(ArgumentsInvalid) as caught:
        validate_args(schema, {"a": 1, "zeta": 1, "first name": 2})

    assert caught.value.message == (
        "Tool argument validation failed: "
        '[["first name"]] is not an allowed property; [zeta] is not an allowed property'
    )


def test_validate_args_refuses_arguments_that_are_not_an_object() -> None:
    with pytest.raises(ArgumentsInvalid) as caught:
        validate_args(ORDER_SCHEMA, ["acme"])

    assert caught.value.message == (
        "Tool argument validation failed: [$] ['acme'] is not of type 'object'"
    )
    assert caught.value.field == "$"


def test_validate_args_refuses_a_non_object_even_when_the_schema_does_not_say_object() -> None:
    with pytest.raises(ArgumentsInvalid, match=r"\[\$\] arguments must be a JSON object"):
        validate_args({}, 3)


def test_validate_args_treats_missing_arguments_as_an_empty_object() -> None:
    assert validate_args({"type": "object"}, None) == {}
    with pytest.raises(ArgumentsInvalid) as caught:
        validate_args(ORDER_SCHEMA, None)

    assert [problem.path for problem in caught.value.errors] == ["customer", "items"]


@pytest.mark.parametrize("args", [None, {}])
def test_a_tool_without_schema_accepts_no_arguments(args: object) -> None:
    assert validate_args(None, args) == {}


@pytest.mark.parametrize("args", [{"city": "Oslo"}, [], "", 0])
def test_a_tool_without_schema_refuses_any_argument(args: object) -> None:
    with pytest.raises(ArgumentsInvalid) as caught:
        validate_args(None, args)

    assert (
        caught.value.message == "Tool argument validation failed: [$] this tool takes no arguments"
    )


def test_validate_args_checks_formats() -> None:
    schema = {"type": "object", "properties": {"day": {"type": "string", "format": "date"}}}

    assert validate_args(schema, {"day": "2025-01-31"}) == {"day": "2025-01-31"}
    with pytest.raises(ArgumentsInvalid, match=r"\[day\] 'tomorrow' is not a 'date'"):
        validate_args(schema, {"day": "tomorrow"})


def test_schema_from_args_keeps_a_pydantic_models_defs_so_it_stands_alone() -> None:
    schema = schema_from_args(Order)

    assert schema is not None
    assert schema["type"] == "object"
    assert schema["properties"]["items"]["items"] == {"$ref": "#/$defs/LineItem"}
    assert set(schema["$defs"]) == {"LineItem"}
    assert check_schema(schema) == []


def test_schema_from_args_copies_a_json_schema() -> None:
    schema = schema_from_args(ORDER_SCHEMA)
    assert schema == ORDER_SCHEMA

    assert schema is not None
    schema["properties"]["customer"]["type"] = "integer"
    assert ORDER_SCHEMA["properties"]["customer"]["type"] == "string"


def test_schema_from_args_passes_none_through() -> None:
    assert schema_from_args(None) is None


def test_schema_from_args_names_every_problem_of_a_bad_schema() -> None:
    with pytest.raises(SchemaInvalid) as caught:
        schema_from_args(
            {"type": "object", "properties": {"city": {"type": "strin"}}, "required": 1}
        )

    assert caught.value.message == (
        "Invalid arguments schema: "
        "[properties.city.type] 'strin' is not valid under any of the given schemas; "
        "[required] 1 is not of type 'array'"
    )
    assert caught.value.field == "args"
    assert [problem.path for problem in caught.value.problems] == [
        "properties.city.type",
        "required",
    ]
    assert isinstance(caught.value, ValidationFailed)


def test_schema_from_args_refuses_a_model_that_is_not_an_object() -> None:
    with pytest.raises(SchemaInvalid, match=r'\[type\] must be "object"'):
        schema_from_args(RootModel[list[int]])


@pytest.mark.parametrize("args", [Order(customer="x", items=[]), 3, "schema", [ORDER_SCHEMA], dict])
def test_schema_from_args_refuses_other_values(args: object) -> None:
    with pytest.raises(ValidationFailed, match="args must be a pydantic model class") as caught:
        schema_from_args(args)

    assert caught.value.field == "args"


def test_problems_from_pydantic_use_the_same_paths_and_order() -> None:
    class Odd(BaseModel):
        qty: int

        @field_validator("qty")
        @classmethod
        def odd(cls, value: int) -> int:
            if value % 2 == 0:
                raise ValueError("must be odd")
            return value

    class Basket(BaseModel):
        items: list[Odd]

    with pytest.raises(ValidationError) as caught:
        Basket.model_validate({"items": [{"qty": 1}] * 10 + [{"qty": 2}, {}]})

    assert problems_from_pydantic(caught.value) == [
        SchemaProblem("items[10].qty", "Value error, must be odd"),
        SchemaProblem("items[11].qty", "Field required"),
    ]


def test_long_messages_are_shortened() -> None:
    schema = {"type": "object", "properties": {"tags": {"type": "string"}}}

    with pytest.raises(ArgumentsInvalid) as caught:
        validate_args(schema, {"tags": ["x" * 50] * 10})

    (problem,) = caught.value.errors
    assert len(problem.message) == 200
    assert problem.message.endswith("…")

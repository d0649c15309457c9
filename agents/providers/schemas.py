"""Tool JSON schemas as sent to providers (spec DIGEST section 7).

Every object schema gets ``additionalProperties: false`` unless it sets the keyword itself;
``$schema`` and ``propertyNames`` are stripped. The walk knows which keywords hold
subschemas, so a property *named* ``$schema`` and data such as ``default`` or ``enum``
values are left alone.
"""

from __future__ import annotations

import copy
from collections.abc import Mapping
from typing import Any

_STRIPPED = frozenset({"$schema", "propertyNames"})
_SUBSCHEMA = frozenset(
    {
        "additionalItems",
        "additionalProperties",
        "contains",
        "else",
        "if",
        "items",
        "not",
        "then",
        "unevaluatedItems",
        "unevaluatedProperties",
    }
)
_SUBSCHEMA_LIST = frozenset({"allOf", "anyOf", "oneOf", "prefixItems", "items"})
_SUBSCHEMA_MAP = frozenset(
    {"properties", "patternProperties", "$defs", "definitions", "dependentSchemas"}
)


def empty_object_schema() -> dict[str, Any]:
    return {"type": "object", "properties": {}, "additionalProperties": False}


def provider_tool_schema(schema: Mapping[str, Any] | None) -> dict[str, Any]:
    """A shaped copy of ``schema`` (never mutated); None or ``{}`` means "no arguments".

    The top level is always an object schema with ``properties``, as providers require.
    """
    if not schema:
        return empty_object_schema()
    shaped = _shape(schema)
    shaped.setdefault("type", "object")
    if shaped["type"] == "object":
        shaped.setdefault("properties", {})
        shaped.setdefault("additionalProperties", False)
    return shaped


def _shape(schema: Mapping[str, Any]) -> dict[str, Any]:
    shaped: dict[str, Any] = {}
    for key, value in schema.items():
        if key in _STRIPPED:
            continue
        if key in _SUBSCHEMA_LIST and isinstance(value, list):
            shaped[key] = [_shape_any(item) for item in value]
        elif key in _SUBSCHEMA:
            shaped[key] = _shape_any(value)
        elif key in _SUBSCHEMA_MAP and isinstance(value, Mapping):
            shaped[key] = {name: _shape_any(sub) for name, sub in value.items()}
        else:
            shaped[key] = copy.deepcopy(value)
    if _is_object_schema(shaped):
        shaped.setdefault("additionalProperties", False)
    return shaped


def _shape_any(value: Any) -> Any:
    """Subschemas may be booleans (``true``/``false``); only mappings are walked."""
    return _shape(value) if isinstance(value, Mapping) else copy.deepcopy(value)


def _is_object_schema(schema: Mapping[str, Any]) -> bool:
    kind = schema.get("type")
    if kind == "object" or (isinstance(kind, list) and "object" in kind):
        return True
    return kind is None and "properties" in schema

"""How the OpenAPI schema shows the AG-UI route's body: the protocol's ``RunAgentInput``,
from the ``ag-ui-protocol`` models themselves, its parts as components named ``AgUi<Part>``
(never confused with ours), each closed to unknown keys, as the route refuses them."""

from __future__ import annotations

from typing import Any

from ag_ui.core import RunAgentInput
from drf_spectacular.extensions import OpenApiSerializerExtension
from drf_spectacular.plumbing import ResolvedComponent
from pydantic.json_schema import GenerateJsonSchema, JsonSchemaValue, model_json_schema

PREFIX = "AgUi"


class _Closed(GenerateJsonSchema):
    """The protocol's JSON Schema without titles, each model closed to unknown keys."""

    def field_title_should_be_set(self, schema: Any) -> bool:
        return False

    def model_schema(self, schema: Any) -> JsonSchemaValue:
        json_schema = super().model_schema(schema)
        json_schema.pop("title", None)
        if json_schema.get("type") == "object":
            json_schema["additionalProperties"] = False
        return json_schema


class RunAgentInputSchema(OpenApiSerializerExtension):  # type: ignore[no-untyped-call]
    """Renders ``RunAgentInput`` (a request body) with its parts as ``AgUi…`` components."""

    target_class = RunAgentInput
    priority = 1  # before drf-spectacular's own pydantic extension

    def get_name(self, auto_schema: Any, direction: Any) -> str:
        return f"{PREFIX}RunAgentInput"

    def map_serializer(self, auto_schema: Any, direction: Any) -> dict[str, Any]:
        schema: dict[str, Any] = model_json_schema(
            RunAgentInput,
            by_alias=True,
            ref_template=f"#/components/schemas/{PREFIX}{{model}}",
            mode="validation",
            schema_generator=_Closed,
        )
        for name, part in schema.pop("$defs", {}).items():
            component = ResolvedComponent(  # type: ignore[no-untyped-call]
                name=f"{PREFIX}{name}", type=ResolvedComponent.SCHEMA, object=f"{PREFIX}{name}",
                schema=part,
            )  # fmt: skip
            auto_schema.registry.register_on_missing(component)
        return schema

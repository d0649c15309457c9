"""What the agents API reads and answers, as the OpenAPI schema shows it.

A definition's shapes come from its pydantic document (:mod:`agents.documents`): the
``<Kind>Document`` a write sends and a bundle holds, the ``<Kind>`` a read answers (the
document with its row's id and times) and the ``<Kind>Saved`` a write answers (plus its
warnings). :class:`DocumentSchema` renders them: descriptions written for users, no
per-field titles, and a PATCH body that requires nothing (it is merged into the stored
definition). The other shapes are DRF serializers.
"""

from __future__ import annotations

import re
import uuid
from dataclasses import dataclass
from typing import Any, Literal

from drf_spectacular.extensions import OpenApiSerializerExtension
from drf_spectacular.plumbing import ResolvedComponent
from pydantic import BaseModel, ConfigDict, Field, create_model
from pydantic.json_schema import GenerateJsonSchema, JsonSchemaValue, model_json_schema
from rest_framework import serializers

from agents.documents import (
    AgentDoc,
    CodeToolDoc,
    ModelDoc,
    PromptDoc,
    PromptPart,
    ToolConfig,
)
from agents.field_docs import field_doc
from agents.permissions import DECISIONS
from agents.registry.entries import HookName, SourceKind
from agents.validation import Kind
from common.inputs import StrictInput
from common.schema import US_SINCE_EPOCH

# Definitions ------------------------------------------------------------------------------


class ApiDocument(BaseModel):
    """A pydantic model the API documents through :class:`DocumentSchema`."""


class _Answer(ApiDocument):
    """An answer holds every field of its document, defaults included."""

    model_config = ConfigDict(json_schema_serialization_defaults_required=True)


# Documents whose docstrings speak to the code's readers: what users read instead.
_DESCRIPTIONS: dict[type[BaseModel], str] = {
    ToolConfig: "A `tools` entry with settings. Which keys apply follows from what `name` "
    "refers to: a registry or code tool (`env`, `options`), a prompt "
    "(`include_text_response`, `include_tool_calls`, `include_errors`, "
    "`init_user_message_property`, `init_attachments_property`) or an agent (`blocking`, "
    "`resumable`, `immediate`, `init_user_message_property`, `init_attachments_property`, "
    "`init_agent_name_property`). `optional` and `approval` apply to every kind.",
}


class _UserSchema(GenerateJsonSchema):
    """pydantic's JSON Schema without titles, and with descriptions for users (the
    documents' docstrings are written for the code's readers)."""

    def field_title_should_be_set(self, schema: Any) -> bool:
        return False

    def model_schema(self, schema: Any) -> JsonSchemaValue:
        json_schema = super().model_schema(schema)
        # A client generator names a model by its title, which would be the class's for
        # `X` and `XRequest` alike: the component's name says it instead.
        json_schema.pop("title", None)
        described = _DESCRIPTIONS.get(schema["cls"])
        if described is not None or "description" in json_schema:
            json_schema["description"] = _for_users(described or json_schema["description"])
        for name, field in json_schema.get("properties", {}).items():
            documented = field_doc(schema["cls"], name)
            if documented and "description" not in field:
                field["description"] = documented
        return json_schema


def _for_users(text: str) -> str:
    """reStructuredText's roles and double backticks as plain Markdown code, and a
    docstring's wrapped lines as one paragraph."""
    text = re.sub(r":\w+:`", "`", text).replace("``", "`")
    return re.sub(r"(?<!\n)\n(?!\n)", " ", text)


class DocumentSchema(OpenApiSerializerExtension):  # type: ignore[no-untyped-call]
    """Renders an :class:`ApiDocument` (see the module docstring)."""

    target_class = ApiDocument
    match_subclasses = True
    priority = 1  # before drf-spectacular's own pydantic extension

    def get_name(self, auto_schema: Any, direction: Any) -> str:
        name: str = self.target.__name__
        return name

    def map_serializer(self, auto_schema: Any, direction: Any) -> dict[str, Any]:
        schema: dict[str, Any] = model_json_schema(
            self.target,
            ref_template="#/components/schemas/{model}",
            mode="serialization",
            schema_generator=_UserSchema,
        )
        for name, part in schema.pop("$defs", {}).items():
            component = ResolvedComponent(  # type: ignore[no-untyped-call]
                name=name, type=ResolvedComponent.SCHEMA, object=name, schema=part
            )
            auto_schema.registry.register_on_missing(component)
        if direction == "request":
            fields = self.target.model_fields
            required = [] if auto_schema.method == "PATCH" else [
                name for name, field in fields.items() if field.is_required()
            ]  # fmt: skip
            schema.pop("required", None)
            if required:
                schema["required"] = required
        return schema


class ModelDocument(ModelDoc, ApiDocument):
    """A model: a named use of one provider's model, with its fallbacks, prices and
    capabilities. Prices are decimal strings, per million tokens."""

    api_key: str | None = Field(
        None,
        description="write-only: the provider's API key, stored encrypted and never answered; "
        "left out, the stored one is kept; null removes it (not in a bundle)",
    )


class PromptDocument(PromptDoc, ApiDocument):
    """A prompt: instructions, a model and tools. Every prompt can also be called as a
    tool."""

    prompt: str | list[PromptPart] = Field(  # type: ignore[assignment]
        description="its parts; one string is one text part"
    )


class AgentDocument(AgentDoc, ApiDocument):
    """An agent: one side (`ai_human`) or two (`dual_ai`), each run by a prompt, and the
    rules of its sessions."""


class CodeToolDocument(CodeToolDoc, ApiDocument):
    """A tool the tenant writes in TypeScript or JavaScript, run in the sandbox."""


class DefinitionProblem(ApiDocument):
    """Something a write found in the tenant's definitions: in definition `name` of `kind`,
    at `path`."""

    kind: Literal["model", "prompt", "agent", "code_tool"]
    name: str
    path: str = Field(description="where in the definition, e.g. `tools[2].name`; empty: all of it")
    message: str
    severity: Literal["error", "warning"]


@dataclass(frozen=True)
class DefinitionSchemas:
    singular: str  # "a model"
    plural: str  # "models"
    document: type[BaseModel]
    answer: type[BaseModel]
    saved: type[BaseModel]


def _definition_schemas(
    doc: type[BaseModel], name: str, singular: str, plural: str
) -> DefinitionSchemas:
    fields: dict[str, Any] = {
        "id": (uuid.UUID, ...),
        "created_at": (int, Field(description=US_SINCE_EPOCH)),
        "updated_at": (int, Field(description=f"{US_SINCE_EPOCH}; never before `created_at`")),
    }
    if doc is ModelDoc:
        fields["has_api_key"] = (bool, Field(description="whether the model holds an API key"))
    answer: type[BaseModel] = create_model(
        name, __base__=(doc, _Answer), __module__=__name__,
        __doc__=f"{singular.capitalize()} as stored: its document, its `id` and its times.",
        **fields,
    )  # fmt: skip
    saved: type[BaseModel] = create_model(
        f"{name}Saved", __base__=answer, __module__=__name__,
        __doc__=f"{singular.capitalize()} as saved, and the `warnings` the write found.",
        warnings=(
            list[DefinitionProblem],
            Field(description="what is legal but suspicious in the tenant's definitions now"),
        ),
    )  # fmt: skip
    documents: dict[type[BaseModel], type[BaseModel]] = {
        ModelDoc: ModelDocument,
        PromptDoc: PromptDocument,
        AgentDoc: AgentDocument,
        CodeToolDoc: CodeToolDocument,
    }
    return DefinitionSchemas(singular, plural, documents[doc], answer, saved)


DEFINITION_SCHEMAS: dict[Kind, DefinitionSchemas] = {
    "models": _definition_schemas(ModelDoc, "Model", "a model", "models"),
    "prompts": _definition_schemas(PromptDoc, "Prompt", "a prompt", "prompts"),
    "agents": _definition_schemas(AgentDoc, "Agent", "an agent", "agents"),
    "code_tools": _definition_schemas(CodeToolDoc, "CodeTool", "a code tool", "code tools"),
}


# Bundles --------------------------------------------------------------------------------------


class Bundle(ApiDocument):
    """A tenant's definitions in one document, in YAML or JSON. An export lists each kind
    by name, leaves out unset fields, and never holds API keys; an import may give a model
    its `api_key`."""

    version: int = Field(1, description="the bundle format: 1")
    models: list[ModelDocument] = Field(default_factory=list)
    prompts: list[PromptDocument] = Field(default_factory=list)
    agents: list[AgentDocument] = Field(default_factory=list)
    code_tools: list[CodeToolDocument] = Field(default_factory=list)


class BundleProblemSerializer(serializers.Serializer[Any]):
    path = serializers.CharField(help_text="where in the bundle, e.g. `prompts[2].tools[0]`")
    message = serializers.CharField()


class BundleReportSerializer(serializers.Serializer[Any]):
    """What an import did (or, with `dry_run`, would do). Each definition is named
    `<kind> <name>`, e.g. `prompt helper`."""

    dry_run = serializers.BooleanField()
    created = serializers.ListField(child=serializers.CharField())
    updated = serializers.ListField(child=serializers.CharField())
    unchanged = serializers.ListField(child=serializers.CharField())
    deleted = serializers.ListField(
        child=serializers.CharField(), help_text="with `replace`: what the bundle did not hold"
    )
    warnings = BundleProblemSerializer(many=True, help_text="legal but suspicious")
    # A declared field leaves the class (DRF's metaclass), so it hides no attribute.
    errors = BundleProblemSerializer(  # type: ignore[assignment]
        many=True, help_text="always empty: a bundle with errors is refused"
    )


# The registry ---------------------------------------------------------------------------------


class RegistryVariableSerializer(serializers.Serializer[Any]):
    name = serializers.CharField()
    type = serializers.ChoiceField(choices=["text", "secret"])
    # Like `errors` above: the declared field leaves the class, hiding no attribute.
    required = serializers.BooleanField()  # type: ignore[assignment]
    scoped = serializers.BooleanField()
    description = serializers.CharField(allow_blank=True)


class RegistrySourceSerializer(serializers.Serializer[Any]):
    """Where a registry item came from."""

    kind = serializers.ChoiceField(
        choices=[str(kind) for kind in SourceKind],
        help_text="`app`: an app of the platform's settings; `package`: an entry point of an "
        "installed distribution; `setting`: a module named in `PLATFORM_APPS`; `module`: a "
        "module registering outside discovery",
    )
    name = serializers.CharField(
        help_text="the app, the distribution, or the module (`setting`, `module`)"
    )
    version = serializers.CharField(
        allow_null=True, help_text="the distribution's version (`package`); else null"
    )


class RegistryToolSerializer(serializers.Serializer[Any]):
    """A tool of the operator's registry that prompts may list in `tools`."""

    name = serializers.CharField()
    description = serializers.CharField(allow_blank=True)
    args_schema = serializers.DictField(help_text="the JSON Schema of its arguments")
    variables = RegistryVariableSerializer(many=True, help_text="the variables it reads")
    progress_argument = serializers.CharField(
        allow_null=True, help_text="the argument streamed to clients as progress, if any"
    )
    # The declared field leaves the class (like `errors` above), hiding no attribute.
    source = RegistrySourceSerializer()  # type: ignore[assignment]


class RegistryHookSerializer(serializers.Serializer[Any]):
    """A hook of the operator's registry that prompts and agents may list in `hooks`."""

    id = serializers.CharField()
    hook = serializers.ChoiceField(choices=[str(name) for name in HookName])
    source = RegistrySourceSerializer()  # type: ignore[assignment]


class RegistryEffectSerializer(serializers.Serializer[Any]):
    """An effect of the operator's registry that threads may schedule."""

    name = serializers.CharField()
    description = serializers.CharField(allow_blank=True)
    args_schema = serializers.DictField(
        allow_null=True, help_text="the JSON Schema of its arguments; null: none"
    )
    source = RegistrySourceSerializer()  # type: ignore[assignment]


class RegistryEndpointSerializer(serializers.Serializer[Any]):
    """A thread endpoint of the operator's registry."""

    route = serializers.CharField(help_text="e.g. `reports/[id]`")
    methods = serializers.ListField(child=serializers.CharField())
    public = serializers.BooleanField(help_text="whether it answers without credentials")
    source = RegistrySourceSerializer()  # type: ignore[assignment]


# Permission rules -----------------------------------------------------------------------------


class PermissionRuleInput(StrictInput):
    """A tenant permission rule: `decision` for calls of `tool` by agent `agent` (empty:
    every tool, every agent), limited by the condition `when` on the call's arguments."""

    agent = serializers.CharField(
        required=False, allow_blank=True, help_text="an agent's name; empty: every agent"
    )
    tool = serializers.CharField(
        required=False, allow_blank=True, help_text="a tool's name; empty: every tool"
    )
    decision = serializers.ChoiceField(choices=list(DECISIONS))
    when = serializers.JSONField(
        required=False, help_text="a JSON-logic condition on the call's arguments; null: every call"
    )
    expires_in = serializers.IntegerField(
        required=False, allow_null=True, min_value=1,
        help_text="`ask` only: seconds a person has to decide (default: the platform's)",
    )  # fmt: skip
    on_expiry = serializers.ChoiceField(
        choices=["deny", "allow"], required=False, allow_null=True,
        help_text="`ask` only: what an unanswered request resolves to (default `deny`)",
    )  # fmt: skip
    description = serializers.CharField(required=False, allow_blank=True, max_length=500)


class PermissionRuleSerializer(serializers.Serializer[Any]):
    """A tenant permission rule: `decision` for calls of `tool` by agent `agent` (empty:
    every tool, every agent), limited by the condition `when` on the call's arguments.
    The tenant's rules are weighed with the registry's and the prompts' before every tool
    call; the most restrictive wins."""

    id = serializers.UUIDField()
    agent = serializers.CharField(allow_blank=True, help_text="empty: every agent")
    tool = serializers.CharField(allow_blank=True, help_text="empty: every tool")
    decision = serializers.ChoiceField(choices=list(DECISIONS))
    when = serializers.JSONField(help_text="a JSON-logic condition; null: every call")
    expires_in = serializers.IntegerField(
        allow_null=True, help_text="`ask`: seconds a person has to decide; null: the default"
    )
    on_expiry = serializers.ChoiceField(
        choices=["deny", "allow"], allow_null=True,
        help_text="`ask`: what an unanswered request resolves to; null for other decisions",
    )  # fmt: skip
    description = serializers.CharField(allow_blank=True)
    created_at = serializers.IntegerField(help_text=US_SINCE_EPOCH)
    updated_at = serializers.IntegerField(help_text=f"{US_SINCE_EPOCH}; never before `created_at`")

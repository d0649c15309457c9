"""Every field of a definition document is documented for the people who write definitions
(the docstring under it), and that documentation reaches the API schema."""

from __future__ import annotations

from typing import Any

import pytest
from drf_spectacular.generators import SchemaGenerator
from pydantic import BaseModel

from agents.documents import (
    DOCUMENTS,
    AgentDoc,
    Capabilities,
    CodeToolDoc,
    CompactionDoc,
    ModelDoc,
    PromptDoc,
    Reasoning,
    SideConfig,
    Strict,
    ToolConfig,
    VariableDefinition,
)
from agents.field_docs import field_doc

# The definition documents and those they nest, whose fields the console's forms show.
DOCUMENTED: list[type[BaseModel]] = [
    ModelDoc, Capabilities, PromptDoc, Reasoning, CompactionDoc, VariableDefinition, ToolConfig,
    AgentDoc, SideConfig, CodeToolDoc,
]  # fmt: skip


def test_every_field_of_every_definition_document_is_documented() -> None:
    undocumented = [
        f"{model.__name__}.{name}"
        for model in DOCUMENTED
        for name in model.model_fields
        if not field_doc(model, name)
    ]

    assert set(DOCUMENTS.values()) <= set(DOCUMENTED)
    assert undocumented == []


def test_a_subclass_reads_its_documents_field_docs_and_an_unknown_field_has_none() -> None:
    class Answer(PromptDoc):
        extra: int = 0

    assert field_doc(Answer, "include_chat").startswith("The model sees the conversation")
    assert field_doc(Answer, "extra") == ""
    assert issubclass(Answer, Strict)


@pytest.mark.django_db
def test_the_api_schema_describes_each_field_of_a_prompt_and_an_agents_side() -> None:
    document: dict[str, Any] = SchemaGenerator().get_schema(request=None, public=True)
    schemas = document["components"]["schemas"]
    prompt = schemas["PromptDocument"]["properties"]
    side = schemas["SideConfig"]["properties"]

    assert prompt["include_chat"]["description"] == field_doc(DOCUMENTS["prompts"], "include_chat")
    assert "tools" in prompt["tools"]["description"].lower()
    assert side["label"]["description"].startswith("The side's name")
    assert all(part.get("description") for part in side.values())

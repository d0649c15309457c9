"""CRUD for definitions over REST: addressed by name, validated as a graph, tenant-scoped."""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

import pytest
from rest_framework.test import APIClient

from agents.models import Model
from agents.selectors import model_load, prompt_load
from common.time import now_us
from tenancy.models import Role, Tenant
from tests.agents.samples import seed_rich
from tests.answers import assert_answers, pages

pytestmark = pytest.mark.django_db

MODEL = {
    "name": "fast",
    "provider": "scripted",
    "model_id": "scripted",
    "config": {"rules": [{"when": {}, "respond": {"text": "ok"}}]},
}
PROMPT = {"name": "helper", "tool_description": "Helps", "prompt": "Help.", "model": "fast"}
OTHER = {**PROMPT, "name": "other"}


def test_create_read_update_delete_a_prompt(member: APIClient) -> None:
    assert member.post("/api/v1/models", MODEL, format="json").status_code == 201

    created = member.post("/api/v1/prompts", PROMPT, format="json")
    fetched = member.get("/api/v1/prompts/helper")
    patched = member.patch("/api/v1/prompts/helper", {"include_chat": True}, format="json")
    replaced = member.put("/api/v1/prompts/helper", {**PROMPT, "prompt": "New."}, format="json")
    listed = member.get("/api/v1/prompts")
    deleted = member.delete("/api/v1/prompts/helper")

    assert created.status_code == 201
    assert created.json()["prompt"] == [{"type": "text", "content": "Help."}]
    assert created.json()["tool_choice"] == "auto"
    assert created.json()["warnings"] == []
    assert fetched.json()["id"] == created.json()["id"]
    assert patched.json()["include_chat"] is True
    assert patched.json()["prompt"] == [{"type": "text", "content": "Help."}]
    assert replaced.json()["include_chat"] is False
    assert replaced.json()["prompt"] == [{"type": "text", "content": "New."}]
    assert [item["name"] for item in listed.json()["results"]] == ["helper"]
    assert deleted.status_code == 204
    assert member.get("/api/v1/prompts/helper").status_code == 404


def test_rename_through_patch(member: APIClient) -> None:
    member.post("/api/v1/models", MODEL, format="json")
    member.post("/api/v1/prompts", PROMPT, format="json")

    response = member.patch("/api/v1/prompts/helper", {"name": "aide"}, format="json")

    assert response.status_code == 200
    assert member.get("/api/v1/prompts/aide").status_code == 200
    assert member.get("/api/v1/prompts/helper").status_code == 404


@pytest.mark.parametrize(
    ("path", "payload", "field", "fragment"),
    [
        ("/api/v1/prompts", {**PROMPT, "name": "Bad-Name"}, "name", "snake_case"),
        ("/api/v1/prompts", {**OTHER, "model": "ghost"}, "model", "unknown model 'ghost'"),
        ("/api/v1/prompts", {**OTHER, "tools": ["nope"]}, "tools[0]", "unknown tool 'nope'"),
        ("/api/v1/prompts", {**PROMPT, "colour": 1}, "colour", "Extra inputs"),
        (
            "/api/v1/prompts",
            {**OTHER, "required_schema": {"type": "object", "properties": {"a": {"type": 7}}}},
            "required_schema.properties.a.type",
            "",
        ),
        ("/api/v1/prompts", {**OTHER, "tool_choice": "required"}, "tool_choice", "at least one"),
        (
            "/api/v1/agents",
            {"name": "duo", "type": "dual_ai", "side_a": {"prompt": "helper"}},
            "side_b",
            "needs side_b",
        ),
        (
            "/api/v1/agents",
            {"name": "pub", "side_a": {"prompt": "helper"}, "expose_as_tool": True},
            "tool_description",
            "required when expose_as_tool",
        ),
        (
            "/api/v1/agents",
            {"name": "a", "side_a": {"prompt": "helper", "stop_tool": "finish"}},
            "side_a.stop_tool",
            "not among the tools",
        ),
        (  # was a database error, a 500
            "/api/v1/agents",
            {"name": "a", "side_a": {"prompt": "helper"}, "max_session_turns": 2**31},
            "max_session_turns",
            "less than or equal to 2147483647",
        ),
        (
            "/api/v1/code-tools",
            {"name": "t", "description": "d", "source": "x", "args_schema": {"type": "string"}},
            "args_schema.type",
            "",
        ),
        (
            "/api/v1/models",
            {**MODEL, "name": "slow", "fallbacks": ["slow"]},
            "fallbacks[0]",
            "itself",
        ),
    ],
)
def test_invalid_definitions_are_400_naming_the_field(
    member: APIClient, path: str, payload: dict[str, Any], field: str, fragment: str
) -> None:
    member.post("/api/v1/models", MODEL, format="json")
    member.post("/api/v1/prompts", PROMPT, format="json")

    response = member.post(path, payload, format="json")

    assert response.status_code == 400, response.json()
    error = response.json()["error"]
    assert error["field"] == field
    assert fragment in error["message"]
    assert error["details"]


def test_include_cycle_is_refused_with_its_path(member: APIClient) -> None:
    member.post("/api/v1/models", MODEL, format="json")
    member.post("/api/v1/prompts", {**PROMPT, "name": "a"}, format="json")
    member.post(
        "/api/v1/prompts",
        {**PROMPT, "name": "b", "prompt": [{"type": "include", "prompt": "a"}]},
        format="json",
    )

    response = member.patch(
        "/api/v1/prompts/a", {"prompt": [{"type": "include", "prompt": "b"}]}, format="json"
    )

    assert response.status_code == 400
    assert "include cycle: a -> b -> a" in response.json()["error"]["message"]


def test_tool_config_keys_must_fit_their_target(tenant: Tenant, member: APIClient) -> None:
    seed_rich(tenant)

    response = member.patch(
        "/api/v1/prompts/assistant", {"tools": [{"name": "summarize", "blocking": True}]},
        format="json",
    )  # fmt: skip

    assert response.status_code == 400
    assert response.json()["error"]["field"] == "tools[0].blocking"
    assert "is a prompt (subprompt)" in response.json()["error"]["message"]


def test_side_prompt_without_chat_is_saved_with_a_warning(member: APIClient) -> None:
    member.post("/api/v1/models", MODEL, format="json")
    member.post("/api/v1/prompts", PROMPT, format="json")

    response = member.post(
        "/api/v1/agents", {"name": "bot", "side_a": {"prompt": "helper"}}, format="json"
    )

    assert response.status_code == 201
    assert response.json()["warnings"] == [
        {
            "kind": "agent",
            "name": "bot",
            "path": "side_a.prompt",
            "message": "prompt 'helper' has include_chat false: this side will not see the "
            "conversation",
            "severity": "warning",
        }
    ]


def test_duplicate_names_conflict_within_a_tenant_but_not_across(
    member: APIClient, other_tenant: Tenant, client_for: Callable[..., APIClient]
) -> None:
    first = member.post("/api/v1/models", MODEL, format="json")
    again = member.post("/api/v1/models", MODEL, format="json")
    elsewhere = client_for(other_tenant, Role.MEMBER).post("/api/v1/models", MODEL, format="json")

    assert first.status_code == 201
    assert again.status_code == 409
    assert again.json()["error"]["field"] == "name"
    assert elsewhere.status_code == 201


def test_referenced_definition_cannot_be_deleted(tenant: Tenant, member: APIClient) -> None:
    seed_rich(tenant)

    response = member.delete("/api/v1/models/fast")

    assert response.status_code == 409
    assert "still referenced" in response.json()["error"]["message"]
    assert {d["name"] for d in response.json()["error"]["details"]} >= {"house_rules", "smart"}
    assert Model.objects.for_tenant(tenant).filter(name="fast").exists()


def test_api_key_is_write_only_encrypted_and_resolved_by_model_load(
    tenant: Tenant, member: APIClient
) -> None:
    model = {"name": "gpt", "provider": "openai", "model_id": "gpt-4o-mini"}

    created = member.post("/api/v1/models", {**model, "api_key": "sk-secret-1"}, format="json")
    kept = member.patch("/api/v1/models/gpt", {"model_id": "gpt-4o"}, format="json")
    spec = model_load(tenant=tenant, name="gpt")
    cleared = member.patch("/api/v1/models/gpt", {"api_key": None}, format="json")

    assert created.status_code == 201
    assert "api_key" not in created.json()
    assert created.json()["has_api_key"] is True
    assert kept.json()["has_api_key"] is True
    assert spec.api_key == "sk-secret-1"
    assert spec.model_id == "gpt-4o"
    assert cleared.json()["has_api_key"] is False
    assert cleared.json()["warnings"][0]["path"] == "api_key"
    assert "sk-secret-1" not in str(member.get("/api/v1/models/gpt").content)


def test_model_load_resolves_env_keys_and_fallbacks(tenant: Tenant) -> None:
    seed_rich(tenant)

    spec = model_load(tenant=tenant, name="smart", env={"OPENAI_API_KEY": "sk-env"}.get)

    assert spec.api_key == "sk-env"
    assert spec.kind == "openai"
    assert [fallback.name for fallback in spec.fallbacks] == ["fast"]
    assert str(spec.prices.input_per_million) == "0.15"
    assert spec.capabilities.vision is True
    assert prompt_load(tenant=tenant, name="assistant").include_chat is True


def test_read_only_may_read_but_not_write(
    tenant: Tenant, client_for: Callable[..., APIClient]
) -> None:
    seed_rich(tenant)
    reader = client_for(tenant, Role.READ_ONLY)

    assert reader.get("/api/v1/agents/helper").status_code == 200
    assert reader.post("/api/v1/models", MODEL, format="json").status_code == 403
    assert reader.delete("/api/v1/agents/helper").status_code == 403


def test_a_tools_entry_naming_both_a_prompt_and_an_agent_is_ambiguous(member: APIClient) -> None:
    member.post("/api/v1/models", MODEL, format="json")
    member.post("/api/v1/prompts", {**PROMPT, "include_chat": True}, format="json")
    agent = {"name": "helper", "side_a": {"prompt": "helper"}, "expose_as_tool": True,
             "tool_description": "Hands off"}  # fmt: skip
    assert member.post("/api/v1/agents", agent, format="json").status_code == 201

    response = member.post("/api/v1/prompts", {**OTHER, "tools": ["helper"]}, format="json")

    assert response.status_code == 400
    assert response.json()["error"]["field"] == "tools[0]"
    assert "names a prompt and an agent" in response.json()["error"]["message"]


def test_each_answer_is_what_its_component_documents(tenant: Tenant, member: APIClient) -> None:
    seed_rich(tenant)
    code_tool = {"name": "shout", "description": "Shouts", "source": "export default () => 1"}
    written = {
        "Model": member.post(
            "/api/v1/models", {**MODEL, "name": "keyed", "api_key": "sk-1"}, format="json"
        ),
        "Prompt": member.post("/api/v1/prompts", {**PROMPT, "name": "aide"}, format="json"),
        "Agent": member.post(
            "/api/v1/agents", {"name": "bot", "side_a": {"prompt": "aide"}}, format="json"
        ),
        "CodeTool": member.post("/api/v1/code-tools", code_tool, format="json"),
    }

    for component, response in written.items():
        assert response.status_code == 201, response.json()
        assert_answers(f"{component}Saved", response.json())
    assert written["Agent"].json()["warnings"][0]["severity"] == "warning"
    for component, path in [
        ("Model", "models/smart"),
        ("Prompt", "prompts/assistant"),
        ("Agent", "agents/helper"),
        ("CodeTool", "code-tools/tally_words"),
    ]:
        assert_answers(component, member.get(f"/api/v1/{path}").json())
        listed = member.get(f"/api/v1/{path.split('/')[0]}").json()
        assert_answers(f"Paginated{component}List", listed)


def test_times_are_microseconds_and_a_change_moves_only_updated_at(member: APIClient) -> None:
    created = member.post("/api/v1/models", MODEL, format="json").json()

    changed = member.patch("/api/v1/models/fast", {"model_id": "other"}, format="json").json()

    assert isinstance(created["created_at"], int)
    assert abs(created["created_at"] - now_us()) < 60_000_000
    assert created["created_at"] <= created["updated_at"]
    assert changed["created_at"] == created["created_at"]
    assert changed["updated_at"] > created["updated_at"]


def test_a_list_pages_by_name_forwards_and_back(member: APIClient) -> None:
    for name in ("echo", "alpha", "delta", "bravo", "charlie"):
        member.post("/api/v1/models", {**MODEL, "name": name}, format="json")

    walked = pages(member, "/api/v1/models?limit=2")
    back = member.get(walked[-1]["previous"]).json()

    assert [[m["name"] for m in page["results"]] for page in walked] == [
        ["alpha", "bravo"], ["charlie", "delta"], ["echo"],
    ]  # fmt: skip
    assert walked[0]["previous"] is None
    assert "limit=2" in walked[1]["next"]
    assert [m["name"] for m in back["results"]] == ["charlie", "delta"]


@pytest.mark.parametrize(
    ("query", "field"),
    [("limit=0", "limit"), ("limit=501", "limit"), ("limit=two", "limit"),
     ("cursor=bm9wZQ", "cursor"), ("cursor=bz14", "cursor")],
)  # fmt: skip
def test_a_bad_page_is_a_400_naming_it(member: APIClient, query: str, field: str) -> None:
    for kind in ("models", "prompts", "agents", "code-tools"):
        response = member.get(f"/api/v1/{kind}?{query}")

        assert response.status_code == 400, (kind, response.json())
        assert response.json()["error"]["field"] == field

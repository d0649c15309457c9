"""Spec DIGEST §11: all required variables in the agent graph must be provided when a thread
is created; scoped ones come from a spawn and are not demanded."""

from __future__ import annotations

from collections.abc import Iterator
from typing import Any

import pytest
from pytest_django.fixtures import Settings
from rest_framework.test import APIClient

from agents.bundles import bundle_import
from agents.registry import Registry, VariableDefinition, tool, use_registry
from common.errors import ValidationFailed
from tenancy.models import Tenant
from threads.models import Thread
from threads.services.env import EnvInput, tenant_env_set, thread_env_get
from threads.services.threads import thread_create
from threads.services.variables import required_variables_check

pytestmark = pytest.mark.django_db

MISSING_BOTH = (
    "missing required variables: API_KEY (prompt writer), REGION (tool lookup); provide them in env"
)


def prompt(name: str, **fields: Any) -> dict[str, Any]:
    return {
        "name": name, "tool_description": f"The {name} prompt", "prompt": f"You are {name}.",
        "model": "m", "include_chat": True, **fields,
    }  # fmt: skip


@pytest.fixture
def definitions(tenant: Tenant) -> Iterator[Registry]:
    """Agent ``scribe``: prompt ``writer`` requires API_KEY, its tool ``lookup`` requires
    REGION, its subagent ``research`` requires SEARCH_KEY (scoped) and has DEPTH (optional)."""
    with use_registry() as scoped:

        @tool(
            description="Look a word up.",
            variables=[VariableDefinition(name="REGION", type="text", required=True)],
        )
        def lookup(state: Any) -> str:
            return "found"

        bundle_import(
            tenant=tenant,
            document={
                "version": 1,
                "models": [
                    {
                        "name": "m",
                        "provider": "scripted",
                        "model_id": "scripted",
                        "config": {"rules": [{"respond": {"text": "x"}}]},
                    }
                ],
                "prompts": [
                    prompt(
                        "writer",
                        tools=["lookup", "research"],
                        variables=[{"name": "API_KEY", "required": True}],
                    ),
                    prompt(
                        "pro",
                        variables=[
                            {"name": "SEARCH_KEY", "required": True, "scoped": True},
                            {"name": "DEPTH"},
                        ],
                    ),
                    prompt("con"),
                ],
                "agents": [
                    {"name": "scribe", "side_a": {"prompt": "writer"}},
                    {
                        "name": "research",
                        "type": "dual_ai",
                        "side_a": {"prompt": "pro"},
                        "side_b": {"prompt": "con"},
                        "max_session_turns": 2,
                        "expose_as_tool": True,
                        "tool_description": "Research",
                    },
                ],
            },
        )
        yield scoped


def create(client: APIClient, **payload: Any) -> Any:
    return client.post("/api/v1/threads", {"agent": "scribe", **payload}, format="json")


def test_missing_required_variables_are_a_400_naming_each_and_where_declared(
    definitions: Registry, tenant: Tenant, member: APIClient
) -> None:
    response = create(member)

    assert response.status_code == 400
    assert response.json() == {
        "error": {
            "code": "invalid",
            "message": MISSING_BOTH,
            "field": "env.API_KEY",
            "details": {
                "missing": [
                    {"name": "API_KEY", "declared_in": ["prompt writer"]},
                    {"name": "REGION", "declared_in": ["tool lookup"]},
                ]
            },
        }
    }
    assert not Thread.objects.filter(tenant=tenant).exists()


def test_one_missing_variable_is_named_alone(definitions: Registry, member: APIClient) -> None:
    response = create(member, env={"API_KEY": "k"})

    assert response.status_code == 400
    assert response.json()["error"]["message"] == (
        "missing required variable: REGION (tool lookup); provide it in env"
    )
    assert response.json()["error"]["field"] == "env.REGION"


def test_providing_them_in_env_creates_the_thread(definitions: Registry, member: APIClient) -> None:
    response = create(member, env={"API_KEY": "k", "REGION": {"value": "eu", "type": "text"}})

    assert response.status_code == 201
    thread = Thread.objects.get(id=response.json()["id"])
    assert thread_env_get(thread=thread, name="REGION") is not None


@pytest.mark.parametrize("blank", ["", "   "])
def test_a_blank_value_does_not_provide_a_variable(
    definitions: Registry, member: APIClient, blank: str
) -> None:
    response = create(member, env={"API_KEY": blank, "REGION": "eu"})

    assert response.status_code == 400
    assert response.json()["error"]["field"] == "env.API_KEY"


def test_the_tenant_env_satisfies_required_variables_and_the_platform_env_does_not(
    definitions: Registry, tenant: Tenant, member: APIClient, settings: Settings
) -> None:
    """A prompt cannot read the platform level, so a platform value satisfies nothing."""
    tenant_env_set(tenant=tenant, name="API_KEY", value="from-tenant")
    settings.AGENT_PLATFORM_ENV_SECRETS = {"REGION": "from-platform"}

    refused = create(member)
    tenant_env_set(tenant=tenant, name="REGION", value="eu")

    assert refused.status_code == 400
    assert refused.json()["error"]["field"] == "env.REGION"
    assert create(member).status_code == 201


def test_agent_prompt_and_tool_config_env_defaults_satisfy_required_variables(
    definitions: Registry, tenant: Tenant, member: APIClient
) -> None:
    bundle_import(
        tenant=tenant,
        document={
            "version": 1,
            "prompts": [
                prompt(
                    "writer",
                    tools=[{"name": "lookup", "env": {"REGION": "eu"}}, "research"],
                    variables=[{"name": "API_KEY", "required": True}],
                )
            ],
            "agents": [{"name": "scribe", "side_a": {"prompt": "writer"}, "env": {"API_KEY": "k"}}],
        },
    )

    assert create(member).status_code == 201


def test_required_variables_of_a_subagent_target_are_demanded_unless_scoped(
    definitions: Registry, tenant: Tenant, member: APIClient
) -> None:
    """SEARCH_KEY (scoped, in the subagent) is not demanded; made non-scoped, it is: a child
    inherits the env of the thread being created."""
    assert create(member, env={"API_KEY": "k", "REGION": "eu"}).status_code == 201

    bundle_import(
        tenant=tenant,
        document={
            "version": 1,
            "prompts": [prompt("pro", variables=[{"name": "SEARCH_KEY", "required": True}])],
        },
    )
    response = create(member, env={"API_KEY": "k", "REGION": "eu"})

    assert response.status_code == 400
    assert response.json()["error"]["message"] == (
        "missing required variable: SEARCH_KEY (prompt pro); provide it in env"
    )


def test_a_variable_declared_in_several_places_is_named_once_with_each_place(
    definitions: Registry, tenant: Tenant
) -> None:
    bundle_import(
        tenant=tenant,
        document={
            "version": 1,
            "prompts": [
                prompt(
                    "writer",
                    tools=["lookup"],
                    variables=[{"name": "REGION", "required": True}],
                )
            ],
        },
    )

    with pytest.raises(ValidationFailed) as caught:
        required_variables_check(tenant=tenant, agent_name="scribe", env={})

    assert caught.value.message == (
        "missing required variable: REGION (prompt writer, tool lookup); provide it in env"
    )


def test_child_threads_are_created_without_the_check(definitions: Registry, tenant: Tenant) -> None:
    """thread_create (the path of child threads) does not demand: children inherit env."""
    parent = thread_create(tenant=tenant, agent_name="scribe", env={"API_KEY": EnvInput("k")})

    child = thread_create(tenant=tenant, agent_name="scribe", parent=parent)

    assert child.parent_id == parent.id


def test_an_unknown_agent_is_still_reported_as_the_agent(member: APIClient) -> None:
    response = member.post("/api/v1/threads", {"agent": "ghost"}, format="json")

    assert response.status_code == 400
    assert response.json()["error"]["field"] == "agent"

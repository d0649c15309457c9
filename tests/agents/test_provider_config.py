"""A model's ``config`` holds only the keys its SDK adapter reads, with values of the right
type: anything else is refused when the model is defined (400 naming ``config.<key>``),
through the definitions API and a bundle import alike."""

from __future__ import annotations

from typing import Any

import pytest
from rest_framework.test import APIClient

from agents.models import Model
from agents.providers.config_keys import ANTHROPIC_CONFIG_KEYS as ANTHROPIC_KEYS
from agents.providers.config_keys import OPENAI_CONFIG_KEYS as OPENAI_KEYS
from tenancy.models import Tenant

pytestmark = pytest.mark.django_db

OPENAI = {"name": "gpt", "provider": "openai", "model_id": "gpt-4o-mini"}
ANTHROPIC = {"name": "claude", "provider": "anthropic", "model_id": "claude-3-5-haiku-latest"}
OPENAI_KNOWN = "known: max_tokens_param, provider_options, timeout_s"
ANTHROPIC_KNOWN = "known: provider_options, timeout_s"


def _error(response: Any) -> dict[str, Any]:
    assert response.status_code == 400, response.json()
    error: dict[str, Any] = response.json()["error"]
    return error


def test_the_keys_each_adapter_reads_are_the_keys_it_accepts() -> None:
    assert sorted(OPENAI_KEYS) == ["max_tokens_param", "provider_options", "timeout_s"]
    assert sorted(ANTHROPIC_KEYS) == ["provider_options", "timeout_s"]


@pytest.mark.parametrize(
    ("model", "key", "known"),
    [
        (OPENAI, "temperature", OPENAI_KNOWN),
        (ANTHROPIC, "temperature", ANTHROPIC_KNOWN),
        (ANTHROPIC, "max_tokens_param", ANTHROPIC_KNOWN),  # an openai-only key
    ],
)
def test_an_unknown_config_key_is_a_400_naming_it_and_the_known_keys(
    member: APIClient, model: dict[str, Any], key: str, known: str
) -> None:
    response = member.post("/api/v1/models", {**model, "config": {key: 1}}, format="json")

    error = _error(response)
    assert error["code"] == "invalid_definition"
    assert error["field"] == f"config.{key}"
    assert error["message"] == (
        f"model {model['name']!r}: config.{key}: unknown key for provider "
        f"{model['provider']}; {known}"
    )
    assert not Model.objects.filter(name=model["name"]).exists()


@pytest.mark.parametrize(
    ("model", "config", "message"),
    [
        (OPENAI, {"timeout_s": "30"}, "must be a positive number of seconds"),
        (OPENAI, {"timeout_s": 0}, "must be a positive number of seconds"),
        (ANTHROPIC, {"timeout_s": True}, "must be a positive number of seconds"),
        (ANTHROPIC, {"provider_options": ["top_k"]}, "must be an object (merged into the body)"),
        (
            OPENAI,
            {"max_tokens_param": "max_output_tokens"},
            "must be one of max_completion_tokens, max_tokens",
        ),
    ],
)
def test_a_known_config_key_with_a_wrong_value_is_a_400_naming_it(
    member: APIClient, model: dict[str, Any], config: dict[str, Any], message: str
) -> None:
    (key,) = config

    error = _error(member.post("/api/v1/models", {**model, "config": config}, format="json"))

    assert error["field"] == f"config.{key}"
    assert error["message"] == f"model {model['name']!r}: config.{key}: {message}"


def test_every_problem_of_a_config_is_listed(member: APIClient) -> None:
    config = {"temperature": 0.2, "timeout_s": -1}

    error = _error(member.post("/api/v1/models", {**OPENAI, "config": config}, format="json"))

    assert [(d["path"], d["message"]) for d in error["details"]] == [
        ("config.temperature", f"unknown key for provider openai; {OPENAI_KNOWN}"),
        ("config.timeout_s", "must be a positive number of seconds"),
    ]


def test_the_keys_the_adapters_read_are_accepted(member: APIClient) -> None:
    openai = {"timeout_s": 12.5, "provider_options": {"seed": 7}, "max_tokens_param": "max_tokens"}
    anthropic = {"timeout_s": 30, "provider_options": {"top_k": 5}}

    created = [
        member.post("/api/v1/models", {**OPENAI, "config": openai}, format="json"),
        member.post("/api/v1/models", {**ANTHROPIC, "config": anthropic}, format="json"),
    ]

    assert [response.status_code for response in created] == [201, 201]
    assert [response.json()["config"] for response in created] == [openai, anthropic]


def test_a_bundle_with_an_unknown_config_key_is_a_400_with_its_path(
    tenant: Tenant, member: APIClient
) -> None:
    bundle = {
        "version": 1,
        "models": [
            {**ANTHROPIC, "config": {"timeout_s": 30}},
            {**OPENAI, "config": {"max_token": 100}},
        ],
    }

    error = _error(member.post("/api/v1/bundles", bundle, format="json"))

    assert error["code"] == "invalid_definition"
    assert error["details"] == [
        {
            "path": "models[1].config.max_token",
            "message": f"unknown key for provider openai; {OPENAI_KNOWN}",
        }
    ]
    assert not Model.objects.for_tenant(tenant).exists()

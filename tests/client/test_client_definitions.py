"""The client's definitions against a live server: models, prompts, agents and code tools
by name, bundles exported and imported (dry run, YAML, errors), and the registry."""

from __future__ import annotations

import pytest
from standard_agents_client import AsyncClient, Client, Conflict, NotFound, ValidationError

from tests.client.conftest import scripted_bundle

MODEL = {"name": "fast", "provider": "scripted", "model_id": "scripted",
         "config": {"rules": [{"respond": {"text": "ok"}}]}}  # fmt: skip
PROMPT = {"name": "helper", "tool_description": "Helps", "prompt": "You help.", "model": "fast"}
AGENT = {"name": "helper_agent", "side_a": {"prompt": "helper"}}
CODE_TOOL = {"name": "double", "description": "Doubles a number.",
             "source": "export default async (args) => String(args.n * 2)",
             "args_schema": {"type": "object",
                             "properties": {"n": {"type": "number"}}}}  # fmt: skip


def test_definitions_are_created_read_changed_listed_and_deleted(client: Client) -> None:
    model = client.models.create(MODEL)
    prompt = client.prompts.create(PROMPT)
    agent = client.agents.create(AGENT)
    tool = client.code_tools.create(CODE_TOOL)

    assert (model["name"], model["provider"], model["has_api_key"]) == ("fast", "scripted", False)
    assert isinstance(model["created_at"], int)
    assert prompt["model"] == "fast"
    assert agent["side_a"]["prompt"] == "helper"
    assert tool["language"] == "typescript"

    changed = client.prompts.update("helper", {"include_chat": True})
    replaced = client.agents.replace("helper_agent", {**AGENT, "description": "mine"})
    assert changed["include_chat"] is True
    assert replaced["description"] == "mine"
    assert client.models.get("fast")["model_id"] == "scripted"
    with pytest.raises(Conflict):
        client.models.delete("fast")  # the prompt refers to it
    with pytest.raises(ValidationError) as broken:
        client.prompts.create({**PROMPT, "name": "other", "model": "missing"})
    assert broken.value.status == 400

    client.code_tools.delete("double")
    with pytest.raises(NotFound):
        client.code_tools.get("double")


def test_definitions_are_listed_by_name_across_pages(client: Client) -> None:
    client.models.create(MODEL)
    for name in ("c_model", "a_model", "b_model"):
        client.models.create({**MODEL, "name": name})

    first = client.models.list(limit=2)
    names = [model["name"] for model in client.models.iter(limit=2)]

    assert [m["name"] for m in first] == ["a_model", "b_model"]
    assert first.next is not None
    assert names == ["a_model", "b_model", "c_model", "fast"]


def test_a_bundle_is_dry_run_imported_and_exported(client: Client) -> None:
    bundle = scripted_bundle()

    dry = client.bundles.import_(bundle, dry_run=True)
    assert dry["dry_run"] is True
    assert client.agents.list().results == []

    report = client.bundles.import_(bundle)
    again = client.bundles.import_(bundle)
    exported = client.bundles.export()
    yaml = client.bundles.export_yaml()

    assert sorted(report["created"]) == sorted(dry["created"])
    assert report["dry_run"] is False
    assert again["created"] == []
    assert [agent["name"] for agent in exported.get("agents", [])] == ["chat"]
    assert "name: chat" in yaml
    assert client.bundles.import_(yaml, dry_run=True)["created"] == []

    with pytest.raises(ValidationError) as broken:
        client.bundles.import_({"version": 1, "agents": [{"name": "x", "side_a": {}}]})
    assert broken.value.details


def test_the_registry_lists_what_the_operator_offers(client: Client) -> None:
    tools = [tool["name"] for tool in client.registry.iter("tools")]
    effects = client.registry.list("effects").results

    assert "current_time" in tools
    assert "remind" in [effect["name"] for effect in effects]
    assert isinstance(client.registry.list("hooks").results, list)
    assert isinstance(client.registry.list("endpoints").results, list)


@pytest.mark.asyncio
async def test_the_async_client_imports_and_reads_definitions(aclient: AsyncClient) -> None:
    report = await aclient.bundles.import_(scripted_bundle())

    agents = [agent["name"] async for agent in aclient.agents.iter()]
    model = await aclient.models.get("m")

    assert "agent chat" in report["created"]
    assert agents == ["chat"]
    assert model["provider"] == "scripted"
    exported = await aclient.bundles.export()
    assert exported["version"] == 1

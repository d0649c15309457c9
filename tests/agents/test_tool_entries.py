"""Every key of a ``tools[]`` object either drives the runtime or is refused with a clear
error (spec DIGEST §4.2, §6.1): what validation refuses, and what it accepts."""

from __future__ import annotations

from typing import Any

import pytest

from agents.bundles import bundle_import
from agents.services import DefinitionInvalid
from tenancy.models import Tenant
from tests.agents.samples import rich_bundle

pytestmark = pytest.mark.django_db

RESUMABLE = {"receives_messages": "side_a", "max_instances": 2}


def errors_of(tenant: Tenant, bundle: dict[str, Any]) -> dict[str, str]:
    with pytest.raises(DefinitionInvalid) as raised:
        bundle_import(tenant=tenant, document=bundle)
    return {item["path"]: item["message"] for item in raised.value.details}


def with_tools(*tools: Any, **pro: Any) -> dict[str, Any]:
    """The rich bundle, its ``assistant`` prompt listing ``tools``; ``pro`` (side A of the
    ``debate`` subagent) changed by ``pro``."""
    bundle = rich_bundle()
    bundle["prompts"][0]["tools"] = list(tools)
    bundle["prompts"][3].update(pro)
    return bundle


def test_init_keys_do_not_apply_to_a_resumable_subagent(tenant: Tenant) -> None:
    entry = {"name": "debate", "resumable": RESUMABLE, "init_user_message_property": "topic"}

    errors = errors_of(tenant, with_tools(entry))

    assert errors["prompts[0].tools[0].init_user_message_property"].startswith(
        "init_user_message_property does not apply to a resumable subagent"
    )


def test_an_init_property_must_be_an_argument_of_the_call(tenant: Tenant) -> None:
    entry = {"name": "debate", "init_user_message_property": "topic"}

    errors = errors_of(tenant, with_tools(entry))

    assert errors["prompts[0].tools[0].init_user_message_property"] == (
        "'topic' is not an argument of 'debate' (its arguments: message)"
    )


def test_an_immediate_subagent_may_not_require_arguments(tenant: Tenant) -> None:
    schema = {"type": "object", "properties": {"topic": {"type": "string"}},
              "required": ["topic"]}  # fmt: skip
    bundle = with_tools({"name": "debate", "immediate": True}, required_schema=schema)

    errors = errors_of(tenant, bundle)

    assert errors["prompts[0].tools[0].immediate"] == (
        "an immediate subagent starts without arguments, but 'debate' requires topic (its "
        "side A prompt's required_schema)"
    )


def test_lifecycle_tool_names_cannot_sit_beside_a_resumable_subagent(tenant: Tenant) -> None:
    bundle = with_tools({"name": "debate", "resumable": RESUMABLE}, "subagents")
    bundle["code_tools"].append(
        {"name": "subagents", "description": "x", "source": "export default () => ''"}
    )

    errors = errors_of(tenant, bundle)

    assert errors["prompts[0].tools[0]"] == (
        "'subagents' is the lifecycle tool of resumable subagents; a tool of that name cannot "
        "be listed beside one"
    )


@pytest.mark.parametrize(
    "entry",
    [
        {"name": "debate", "blocking": False, "init_user_message_property": "message",
         "init_agent_name_property": "message", "optional": "DEBATES"},
        {"name": "debate", "resumable": {**RESUMABLE, "parent_communication": "explicit"}},
        {"name": "debate", "immediate": {"name_env": "NAME", "scoped_env": ["TOKEN"]},
         "resumable": RESUMABLE},
        {"name": "tally_words", "env": {"MODE": "x"}, "options": {"strict": True}},
    ],
    ids=["agent-call", "resumable", "immediate", "code-tool"],
)  # fmt: skip
def test_every_key_the_runtime_drives_is_accepted(tenant: Tenant, entry: dict[str, Any]) -> None:
    bundle_import(tenant=tenant, document=with_tools(entry))

"""The structured definition forms without a browser: nested documents (an agent's sides,
their labels and stop rules) as inputs, a prompt's tools as rows with approvals and
settings, lists to pick names from, each field's documentation, an unchanged form that
changes nothing, and the whole document as JSON (the advanced view)."""

from __future__ import annotations

import json
import re
from typing import Any

import pytest
from django.urls import reverse

from agents.bundles import bundle_import
from agents.documents import SideConfig
from agents.field_docs import field_doc
from agents.models import Agent, Model, Prompt
from agents.services import document_json, row_document
from tests.console.conftest import CHAT, Team, client_of, team_make
from tests.console.definition_pages import form_values, posted_form

pytestmark = pytest.mark.django_db

PAIR = "pair"


@pytest.fixture
def team(db: None) -> Team:
    team = team_make()
    report = bundle_import(tenant=team.tenant, document={"version": 1, "prompts": [
        {"name": "writer", "tool_description": "Writes", "prompt": "You write.", "model": "m",
         "include_chat": True, "tools": [
             "p_careful",
             {"name": "current_time", "approval": {"decision": "ask", "when": {
                 "==": [{"var": "timezone"}, "UTC"]}}, "optional": "USE_CLOCK"}]},
    ], "agents": [
        {"name": PAIR, "type": "dual_ai", "max_session_turns": 3,
         "side_a": {"prompt": "writer", "label": "Writer", "stop_tool": "current_time",
                    "stop_tool_response_property": "timezone", "max_steps": 4},
         "side_b": {"prompt": "p", "label": "Reviewer", "stop_on_response": False,
                    "session_stop": {"name": "current_time", "message_property": "timezone"}}},
    ]})  # fmt: skip
    assert report.errors == [], report.errors
    return team


def _url(kind: str, name: str) -> str:
    return reverse("console:agents-definition", args=[kind, name])


def _stored(team: Team, model: Any, name: str) -> dict[str, Any]:
    row = model.objects.for_tenant(team.tenant).get(name=name)
    stored: dict[str, Any] = document_json(row_document(row))
    return stored


def _errors_at(html: str, field: str) -> str:
    found = re.search(rf'id="id_{re.escape(field)}_error"[^>]*>(.*?)</ul>', html, re.DOTALL)
    assert found is not None, f"no errors at {field}"
    return found.group(1)


@pytest.mark.parametrize(
    ("kind", "model", "name"),
    [("models", Model, "m"), ("prompts", Prompt, "writer"), ("prompts", Prompt, "p_careful"),
     ("agents", Agent, PAIR), ("agents", Agent, CHAT)],
)  # fmt: skip
def test_saving_a_form_as_it_was_shown_changes_nothing(
    team: Team, kind: str, model: Any, name: str
) -> None:
    client = client_of(team.member)
    before = _stored(team, model, name)

    answer = client.post(_url(kind, name), posted_form(client, _url(kind, name)))

    assert answer.status_code == 302, answer.content.decode()[-3000:]
    assert _stored(team, model, name) == before


def test_an_agents_sides_are_inputs_with_their_labels_and_stop_rules(team: Team) -> None:
    client = client_of(team.member)
    shown = form_values(client.get(_url("agents", PAIR)).content.decode())
    changes = {"side_a-label": "Author", "side_a-max_steps": "6", "side_b-label": "Critic",
               "side_b-stop_on_response": "on", "side_b-session_stop": "current_time"}  # fmt: skip

    answer = client.post(_url("agents", PAIR), posted_form(client, _url("agents", PAIR), **changes))
    stored = _stored(team, Agent, PAIR)

    assert (shown["side_a-label"], shown["side_b-label"]) == ("Writer", "Reviewer")
    assert shown["side_a-stop_tool"] == "current_time"
    assert "side_b-stop_on_response" not in shown  # unchecked: the stored False
    assert json.loads(shown["side_b-session_stop"]) == {
        "name": "current_time", "message_property": "timezone"}  # fmt: skip
    assert answer.status_code == 302
    assert stored["side_a"]["label"] == "Author"
    assert stored["side_a"]["max_steps"] == 6
    assert stored["side_a"]["stop_tool_response_property"] == "timezone"
    assert stored["side_b"]["label"] == "Critic"
    assert stored["side_b"]["stop_on_response"] is True
    assert stored["side_b"]["session_stop"] == "current_time"


def test_a_second_side_left_empty_is_no_side_and_a_dual_agent_needs_one(team: Team) -> None:
    client = client_of(team.member)
    empty = {f"side_b-{key}": "" for key in SideConfig.model_fields} | {
        "side_b-stop_on_response": "on"}  # fmt: skip

    as_human = client.post(_url("agents", PAIR), posted_form(
        client, _url("agents", PAIR), type="ai_human", max_session_turns="", **empty))  # fmt: skip
    human = _stored(team, Agent, PAIR)
    dual = client.post(_url("agents", PAIR), posted_form(
        client, _url("agents", PAIR), type="dual_ai", **empty))  # fmt: skip

    assert as_human.status_code == 302
    assert human["type"] == "ai_human"
    assert human["side_b"] is None
    assert dual.status_code == 200
    assert "side_b" in dual.content.decode()
    assert _stored(team, Agent, PAIR)["type"] == "ai_human"


def test_a_prompts_tools_are_rows_with_approvals_and_settings(team: Team) -> None:
    client = client_of(team.member)
    url = _url("prompts", "writer")
    shown = form_values(client.get(url).content.decode())
    changes = {
        "tools-0-approval": "deny",
        "tools-2": "p",
        "tools-2-settings": '{"include_errors": false}',
        "tools-3": "writer_missing",
    }

    refused = client.post(url, posted_form(client, url, **changes))
    changes.pop("tools-3")
    saved = client.post(url, posted_form(client, url, **changes))

    assert (shown["tools-0"], shown["tools-0-approval"], shown["tools-0-settings"]) == (
        "p_careful", "", "")  # fmt: skip
    assert shown["tools-1"] == "current_time"
    assert json.loads(shown["tools-1-settings"]) == {
        "approval": {"decision": "ask", "when": {"==": [{"var": "timezone"}, "UTC"]}},
        "optional": "USE_CLOCK",
    }
    assert shown["tools-2"] == ""  # the empty row
    assert "writer_missing" in _errors_at(refused.content.decode(), "tools-3")
    assert saved.status_code == 302
    assert _stored(team, Prompt, "writer")["tools"] == [
        {"name": "p_careful", "approval": "deny"},
        {"name": "current_time", "optional": "USE_CLOCK",
         "approval": {"decision": "ask", "when": {"==": [{"var": "timezone"}, "UTC"]}}},
        {"name": "p", "include_errors": False},
    ]  # fmt: skip


@pytest.mark.parametrize(
    ("row", "wrong", "message"),
    [
        ({"tools-2-approval": "ask"}, "tools-2", "name what the row offers"),
        ({"tools-2": "p", "tools-2-settings": "[1]"}, "tools-2-settings", "a JSON object"),
        ({"tools-2": "p", "tools-2-settings": "{x"}, "tools-2-settings", "not JSON"),
        ({"tools-2": "p", "tools-2-approval": "ask", "tools-2-settings": '{"approval": "deny"}'},
         "tools-2-settings", "approval is chosen beside it"),
        ({"tools-2": "p", "tools-2-settings": '{"name": "q"}'}, "tools-2-settings",
         "leave name out"),
    ],
)  # fmt: skip
def test_a_tools_row_that_says_something_wrong_is_refused_at_its_input(
    team: Team, row: dict[str, str], wrong: str, message: str
) -> None:
    client = client_of(team.member)
    url = _url("prompts", "writer")
    before = _stored(team, Prompt, "writer")

    answer = client.post(url, posted_form(client, url, **row))

    assert answer.status_code == 200
    assert message in _errors_at(answer.content.decode(), wrong)
    assert _stored(team, Prompt, "writer") == before


def test_name_inputs_offer_lists_of_what_the_tenant_and_registry_have(team: Team) -> None:
    html = client_of(team.member).get(_url("agents", PAIR)).content.decode()
    prompt_html = client_of(team.member).get(_url("prompts", "writer")).content.decode()

    tools = re.search(r'<datalist id="pick-tools">(.*?)</datalist>', prompt_html, re.DOTALL)
    prompts = re.search(r'<datalist id="pick-prompts">(.*?)</datalist>', html, re.DOTALL)
    assert tools is not None
    assert prompts is not None
    assert '<option value="current_time" label="registry tool">' in tools.group(1)
    assert '<option value="p_careful" label="prompt">' in tools.group(1)
    assert f'<option value="{CHAT}" label="agent">' in tools.group(1)
    assert '<option value="subagent_create" label="subagent lifecycle tool">' in tools.group(1)
    assert '<option value="writer" label="prompt">' in prompts.group(1)
    assert 'id="id_side_a-prompt"' in html
    assert 'list="pick-prompts"' in html


def test_each_input_shows_its_fields_documentation(team: Team) -> None:
    html = client_of(team.member).get(_url("agents", PAIR)).content.decode()

    for key in ("label", "stop_on_response", "stop_tool", "max_steps"):
        assert field_doc(SideConfig, key).replace("'", "&#x27;").split("`")[0] in html, key
    assert "<code>dual_ai</code>" in html


def test_the_json_view_edits_the_whole_document(team: Team) -> None:
    client = client_of(team.member)
    url = _url("prompts", "writer")
    shown = client.get(url, {"view": "json"}).content.decode()
    document = json.loads(form_values(shown)["document"])
    document["tool_description"] = "Writes well"
    document["reasoning"] = {"effort": "low"}

    saved = client.post(url, {"view": "json", "document": json.dumps(document)})
    document["model"] = "absent"
    refused = client.post(url, {"view": "json", "document": json.dumps(document)})
    not_an_object = client.post(url, {"view": "json", "document": "[1]"})

    assert document["name"] == "writer"
    assert saved.status_code == 302
    stored = _stored(team, Prompt, "writer")
    assert (stored["tool_description"], stored["reasoning"]["effort"]) == ("Writes well", "low")
    assert refused.status_code == 200
    assert "model: " in refused.content.decode()
    assert "absent" in refused.content.decode()
    assert "must be a JSON object" in not_an_object.content.decode()
    assert _stored(team, Prompt, "writer")["model"] == "m"


def test_a_new_prompt_from_the_structured_form(team: Team) -> None:
    client = client_of(team.member)
    url = reverse("console:agents-new", args=["prompts"])
    fields = {"name": "helper", "tool_description": "Helps", "prompt": "You help.",
              "model": "m", "include_chat": "on", "tools-0": "current_time",
              "tools-0-approval": "ask"}  # fmt: skip

    answer = client.post(url, posted_form(client, url, **fields))

    assert answer.status_code == 302, answer.content.decode()[-2000:]
    stored = _stored(team, Prompt, "helper")
    assert stored["tools"] == [{"name": "current_time", "approval": "ask"}]
    assert stored["include_chat"] is True
    assert stored["compaction"]["enabled"] is True  # the default the new form showed

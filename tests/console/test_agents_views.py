"""The agents pages without a browser: definitions listed, edited and created through
``definition_save`` with each refusal at its field, deletes through ``definition_delete``,
model keys write-only, bundles checked (a dry run) before they are applied, the export and
the registry; scoped as the API is (another tenant's definition a 404, a read-only
member's writes a 403 with no side effect)."""

from __future__ import annotations

import json
import re
from typing import Any

import pytest
import yaml
from django.core.files.uploadedfile import SimpleUploadedFile
from django.urls import reverse

from agents.bundles import bundle_import
from agents.models import Agent, CodeTool, Model, Prompt
from tests.console.conftest import CHAT, Team, client_of, team_make
from tests.console.definition_pages import posted_form
from tests.factories import make_tenant

pytestmark = pytest.mark.django_db

SECRET = "sk-console-secret-0123456789"
RULES = [{"respond": {"text": "hi"}}]
THEIR_TOOL = {"name": "theirs", "description": "Theirs", "source": "export default () => 1;"}


def _scripted_model(name: str) -> dict[str, Any]:
    return {
        "name": name,
        "provider": "scripted",
        "model_id": "scripted",
        "config": {"rules": RULES},
    }


@pytest.fixture
def team(db: None) -> Team:
    return team_make()


def _definition_url(kind: str, name: str) -> str:
    return reverse("console:agents-definition", args=[kind, name])


def _field_html(html: str, field: str) -> str:
    """The markup of one field of a definition form (its input, help and errors)."""
    found = re.search(rf'data-field="{field}">(.*?)</div>', html, re.DOTALL)
    assert found is not None, f"no field {field}"
    return found.group(1)


def _entry_html(html: str, entry: str) -> str:
    """The row of one bundle entry in a dry run's table."""
    found = re.search(rf'<tr data-entry="{re.escape(entry)}"[^>]*>(.*?)</tr>', html, re.DOTALL)
    assert found is not None, f"no entry {entry}"
    return found.group(1)


def _prompt_form(team: Team, **changes: Any) -> dict[str, Any]:
    """The form of the team's prompt ``p`` as a browser posts it, changed."""
    return posted_form(client_of(team.member), _definition_url("prompts", "p"), **changes)


def _cell_html(html: str, field: str) -> str:
    """The markup of one input of a prompt's tools rows (its input and errors)."""
    found = re.search(rf'<td data-field="{field}">(.*?)</td>', html, re.DOTALL)
    assert found is not None, f"no cell {field}"
    return found.group(1)


# The index and a definition's page ----------------------------------------------------------


def test_index_lists_the_tenants_definitions_by_kind_with_links(team: Team) -> None:
    html = client_of(team.reader).get(reverse("console:agents")).content.decode()

    for kind, name in (("models", "m"), ("prompts", "p_careful"), ("agents", CHAT)):
        assert f'href="{_definition_url(kind, name)}"' in html
    assert 'id="kind-code_tools-title">Code tools</h2>' in html
    assert "No code tools yet." in html
    assert "<title>Agents · Standard Agents Console</title>" in html


def test_definition_page_shows_top_level_fields_as_inputs_by_type(team: Team) -> None:
    html = client_of(team.member).get(_definition_url("prompts", "p")).content.decode()

    assert 'value="p"' in _field_html(html, "name")
    assert "<textarea" in _field_html(html, "tool_description")
    assert 'type="checkbox" name="include_chat"' in _field_html(html, "include_chat")
    assert "checked" in _field_html(html, "include_chat")
    assert '<option value="auto" selected>' in _field_html(html, "tool_choice")
    assert 'value="current_time"' in _cell_html(html, "tools-0")
    assert 'list="pick-tools"' in _cell_html(html, "tools-0")
    assert "value=" not in _cell_html(html, "tools-1")  # an empty row, to add one more
    assert 'class="json"' in _field_html(html, "env")
    assert '<label for="id_model"><code>model</code>' in html
    assert 'list="pick-models"' in _field_html(html, "model")
    assert "The model sees the conversation." in _field_html(html, "include_chat")


def test_saving_a_definition_writes_through_the_service(team: Team) -> None:
    answer = client_of(team.member).post(
        _definition_url("prompts", "p"), _prompt_form(team, tool_description="Helps with time")
    )

    assert answer.status_code == 302
    assert answer["Location"] == _definition_url("prompts", "p")
    assert Prompt.objects.for_tenant(team.tenant).get(name="p").tool_description == (
        "Helps with time"
    )


def test_a_prompts_text_is_edited_as_text_and_parts_as_json(team: Team) -> None:
    client = client_of(team.member)
    shown = _field_html(client.get(_definition_url("prompts", "p")).content.decode(), "prompt")

    as_text = client.post(
        _definition_url("prompts", "p"), _prompt_form(team, prompt="Be brief.\nBe kind.")
    )
    text_parts = Prompt.objects.for_tenant(team.tenant).get(name="p").prompt
    parts = [{"type": "text", "content": "One."}, {"type": "text", "content": "Two."}]
    as_json = client.post(
        _definition_url("prompts", "p"), _prompt_form(team, prompt=json.dumps(parts))
    )
    json_parts = Prompt.objects.for_tenant(team.tenant).get(name="p").prompt

    assert ">\nYou help.</textarea>" in shown
    assert (as_text.status_code, as_json.status_code) == (302, 302)
    assert text_parts == [{"type": "text", "content": "Be brief.\nBe kind."}]
    assert json_parts == parts


def test_a_reference_error_is_shown_at_its_field_and_nothing_changes(team: Team) -> None:
    answer = client_of(team.member).post(
        _definition_url("prompts", "p"), _prompt_form(team, model="nope")
    )

    html = answer.content.decode()
    assert answer.status_code == 200
    assert "model: " in _field_html(html, "model")
    assert "nope" in _field_html(html, "model")
    assert 'aria-invalid="true"' in _field_html(html, "model")
    assert Prompt.objects.for_tenant(team.tenant).get(name="p").model == "m"


def test_an_error_inside_a_field_names_its_full_path_at_that_field(team: Team) -> None:
    client, url = client_of(team.member), _definition_url("agents", CHAT)
    answer = client.post(url, posted_form(client, url, **{"side_a-prompt": "missing"}))

    errors = _field_html(answer.content.decode(), "side_a-prompt")
    assert "side_a.prompt: " in errors
    assert "missing" in errors
    assert Agent.objects.for_tenant(team.tenant).get(name=CHAT).side_a["prompt"] == "p"


def test_a_structural_error_is_shown_at_its_field(team: Team) -> None:
    answer = client_of(team.member).post(
        _definition_url("prompts", "p"), _prompt_form(team, **{"tools-0-settings": '{"nmae": 1}'})
    )

    errors = _cell_html(answer.content.decode(), "tools-0")
    assert "tools[0].nmae" in errors
    assert Prompt.objects.for_tenant(team.tenant).get(name="p").tools == ["current_time"]


def test_text_that_is_not_json_is_refused_at_its_field(team: Team) -> None:
    answer = client_of(team.member).post(
        _definition_url("prompts", "p"), _prompt_form(team, env="{x")
    )

    assert "not JSON" in _field_html(answer.content.decode(), "env")


def test_another_definitions_problem_is_shown_at_the_top_naming_it(team: Team) -> None:
    answer = client_of(team.member).post(
        _definition_url("prompts", "p"), _prompt_form(team, name="p_renamed")
    )

    html = answer.content.decode()
    top = re.search(r'id="form-errors">(.*?)</div>', html, re.DOTALL)
    assert top is not None
    assert f"agent &#x27;{CHAT}&#x27;: side_a.prompt: " in top.group(1)
    assert not Prompt.objects.for_tenant(team.tenant).filter(name="p_renamed").exists()


def test_creating_a_definition_and_a_name_that_is_taken(team: Team) -> None:
    client = client_of(team.member)
    url = reverse("console:agents-new", args=["code_tools"])
    fields = {"name": "shout", "description": "Shouts", "language": "javascript",
              "source": "export default (s, a) => 'HI';"}  # fmt: skip

    form = client.get(url).content.decode()
    created = client.post(url, fields)
    taken = client.post(url, fields)

    assert '<option value="typescript" selected>' in _field_html(form, "language")
    assert created["Location"] == _definition_url("code_tools", "shout")
    assert "already exists" in _field_html(taken.content.decode(), "name")


def test_deleting_a_definition_others_refer_to_is_refused(team: Team) -> None:
    client = client_of(team.member)

    refused = client.post(reverse("console:agents-delete", args=["models", "m"]), follow=True)
    client.post(reverse("console:agents-delete", args=["agents", CHAT]))

    assert "still referenced" in refused.content.decode()
    assert Model.objects.for_tenant(team.tenant).filter(name="m").exists()
    assert not Agent.objects.for_tenant(team.tenant).filter(name=CHAT).exists()


def test_an_unknown_kind_is_404(team: Team) -> None:
    client = client_of(team.member)

    assert client.get(_definition_url("widgets", "m")).status_code == 404
    assert client.get(reverse("console:agents-new", args=["widgets"])).status_code == 404


# Secrets ------------------------------------------------------------------------------------


def _model_form(**changes: Any) -> dict[str, Any]:
    return {"name": "m", "provider": "scripted", "model_id": "scripted",
            "config": json.dumps({"rules": RULES}), **changes}  # fmt: skip


def test_a_models_api_key_is_write_only_and_never_rendered(team: Team) -> None:
    client = client_of(team.member)
    url = _definition_url("models", "m")

    client.post(url, _model_form(api_key=SECRET))
    stored = Model.objects.for_tenant(team.tenant).get(name="m").has_api_key
    kept = client.post(url, _model_form(api_key=""))
    pages = [
        client.get(url).content.decode(),
        client_of(team.reader).get(url).content.decode(),
        client.post(url, _model_form(api_key=SECRET, model_id="")).content.decode(),
        client.get(reverse("console:agents-export")).content.decode(),
    ]
    still = Model.objects.for_tenant(team.tenant).get(name="m").has_api_key
    client.post(url, _model_form(remove_api_key="on"))

    assert (stored, kept.status_code, still) == (True, 302, True)
    assert all(SECRET not in html for html in pages)
    assert 'type="password" name="api_key"' in pages[0]
    assert "A key is stored." in pages[0]
    assert Model.objects.for_tenant(team.tenant).get(name="m").has_api_key is False


# Scoping ------------------------------------------------------------------------------------


def test_another_tenants_definition_is_404_with_no_side_effect(team: Team) -> None:
    theirs = make_tenant()
    bundle_import(tenant=theirs, document={"version": 1, "code_tools": [THEIR_TOOL]})
    client = client_of(team.admin)
    url = _definition_url("code_tools", "theirs")
    forged = {**THEIR_TOOL, "language": "javascript", "description": "forged"}

    answers = [
        client.get(url).status_code,
        client.post(url, forged).status_code,
        client.post(reverse("console:agents-delete", args=["code_tools", "theirs"])).status_code,
    ]

    assert answers == [404, 404, 404]
    assert CodeTool.objects.for_tenant(theirs).get(name="theirs").description == "Theirs"
    assert not CodeTool.objects.for_tenant(team.tenant).exists()


def test_read_only_member_sees_no_write_controls(team: Team) -> None:
    client = client_of(team.reader)

    index = client.get(reverse("console:agents")).content.decode()
    definition = client.get(_definition_url("models", "m")).content.decode()

    assert reverse("console:agents-import") not in index
    assert reverse("console:agents-new", args=["prompts"]) not in index
    assert 'method="post"' not in definition.split('<main id="main">')[1]
    assert "<dt><code>model_id</code></dt>" in definition
    assert "Delete" not in definition
    assert client.get(reverse("console:agents-import")).status_code == 403


def test_read_only_members_forged_posts_are_refused_403_with_no_side_effect(team: Team) -> None:
    client = client_of(team.reader)
    bundle = yaml.safe_dump({"version": 1, "models": [
        {"name": "forged", "provider": "scripted", "model_id": "scripted"}]})  # fmt: skip
    posts = [
        (_definition_url("prompts", "p"), _prompt_form(team, tool_description="forged")),
        (reverse("console:agents-new", args=["models"]), _model_form(name="forged")),
        (reverse("console:agents-delete", args=["agents", CHAT]), {}),
        (reverse("console:agents-import"), {"document": bundle, "apply": "1"}),
    ]

    answers = [client.post(url, data).status_code for url, data in posts]

    assert answers == [403, 403, 403, 403]
    assert Prompt.objects.for_tenant(team.tenant).get(name="p").tool_description == (
        "The chat prompt"
    )
    assert not Model.objects.for_tenant(team.tenant).filter(name="forged").exists()
    assert Agent.objects.for_tenant(team.tenant).filter(name=CHAT).exists()


# Bundles ------------------------------------------------------------------------------------


def _bundle(model: str) -> str:
    return json.dumps({"version": 1, "prompts": [
        {"name": "q", "tool_description": "Q", "prompt": "Hi.", "model": model}]})  # fmt: skip


def test_import_is_a_dry_run_first_showing_each_error_at_its_entry(team: Team) -> None:
    client = client_of(team.member)
    document = json.dumps({"version": 1, "models": [_scripted_model("m2")], "prompts": [
        {"name": "q", "tool_description": "Q", "prompt": "Hi.", "model": "nope"}]})  # fmt: skip

    answer = client.post(reverse("console:agents-import"), {"document": document})
    html = answer.content.decode()

    assert "Dry run: 1 error, nothing imported" in html
    assert "prompts[0].model" in _entry_html(html, "prompts[0]")
    assert "nope" in _entry_html(html, "prompts[0]")
    assert "none" in _entry_html(html, "models[0]")
    assert 'id="apply-form"' not in html
    assert not Model.objects.for_tenant(team.tenant).filter(name="m2").exists()


def test_a_valid_bundle_is_checked_then_applied_with_the_same_document(team: Team) -> None:
    client = client_of(team.member)
    url = reverse("console:agents-import")

    checked = client.post(url, {"document": _bundle("m")}).content.decode()
    after_check = Prompt.objects.for_tenant(team.tenant).filter(name="q").exists()
    carried = re.search(r'<input type="hidden" name="document" value="([^"]*)">', checked)
    assert carried is not None
    applied = client.post(url, {"document": carried.group(1).replace("&quot;", '"'),
                                "apply": "1"}, follow=True)  # fmt: skip

    assert "would be created" in _entry_html(checked, "prompts[0]")
    assert after_check is False
    assert "Imported the bundle: created prompt q." in applied.content.decode()
    assert Prompt.objects.for_tenant(team.tenant).get(name="q").model == "m"


def test_an_uploaded_yaml_bundle_and_one_that_does_not_parse(team: Team) -> None:
    client = client_of(team.member)
    url = reverse("console:agents-import")
    upload = SimpleUploadedFile("b.yaml", yaml.safe_dump(json.loads(_bundle("m"))).encode())

    checked = client.post(url, {"upload": upload}).content.decode()
    broken = client.post(url, {"document": "models: [unclosed"}).content.decode()
    empty = client.post(url, {"document": "  "}).content.decode()

    assert "would be created" in _entry_html(checked, "prompts[0]")
    assert "neither valid YAML nor JSON" in broken
    assert "paste a bundle or choose a file" in empty
    assert not Prompt.objects.for_tenant(team.tenant).filter(name="q").exists()


def test_a_replacing_bundle_says_what_it_would_delete(team: Team) -> None:
    document = {**json.loads(_bundle("m")), "models": [_scripted_model("m")]}

    html = (
        client_of(team.member)
        .post(reverse("console:agents-import"), {"document": json.dumps(document), "replace": "on"})
        .content.decode()
    )

    assert "Would delete" in html
    assert "agent chat" in html
    assert '<input type="hidden" name="replace" value="on">' in html
    assert Agent.objects.for_tenant(team.tenant).filter(name=CHAT).exists()


def test_export_downloads_the_tenants_bundle(team: Team) -> None:
    answer = client_of(team.reader).get(reverse("console:agents-export"), {"format": "yaml"})

    document = yaml.safe_load(answer.content)
    assert answer["Content-Disposition"] == (
        f'attachment; filename="{team.tenant.slug}-bundle.yaml"'
    )
    assert [agent["name"] for agent in document["agents"]] == ["careful", "chat", "needy"]


# The registry -------------------------------------------------------------------------------


def test_registry_shows_tools_and_effects_with_their_argument_schemas(team: Team) -> None:
    html = client_of(team.reader).get(reverse("console:agents-registry")).content.decode()

    tool = re.search(r'data-tool="current_time"(.*?)</article>', html, re.DOTALL)
    effect = re.search(r'data-effect="remind"(.*?)</article>', html, re.DOTALL)
    assert tool is not None
    assert effect is not None
    assert "The current date and time in a time zone." in tool.group(1)
    assert "&quot;timezone&quot;" in tool.group(1)
    assert "&quot;properties&quot;" in effect.group(1)
    assert 'id="hooks-title">Hooks</h2>' in html

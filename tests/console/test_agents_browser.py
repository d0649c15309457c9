"""The agents pages in a real browser (Debian's Chromium through Playwright) against the
live server: a bundle with an error is checked (a dry run), its error shown at its entry
and nothing imported, then fixed and applied; a definition's refusal shown at its field;
titles and labelled controls on every page."""

from __future__ import annotations

from typing import Any

import pytest

from agents.models import Agent, Prompt
from tests.console.conftest import CHAT, Team, log_in
from tests.console.test_browser import _assert_accessible
from tests.live import Live

pytestmark = pytest.mark.django_db(transaction=True)

BUNDLE = """version: 1
prompts:
  - name: helper
    tool_description: Helps
    prompt: You help.
    model: {model}
agents:
  - name: helped
    side_a:
      prompt: helper
"""


def test_import_a_bundle_with_an_error_see_it_at_its_entry_then_fix_and_apply(
    page: Any, served: Live, team: Team
) -> None:
    log_in(page, served, team.member)
    page.goto("/console/agents/import/")
    _assert_accessible(page)

    page.get_by_label("Bundle (YAML or JSON)").fill(BUNDLE.format(model="no_such_model"))
    page.get_by_role("button", name="Check (dry run)").click()
    entry = page.locator('tr[data-entry="prompts[0]"]')
    entry.wait_for()
    error = entry.locator('li[data-path="prompts[0].model"]')
    error_text = error.inner_text()
    imported_by_dry_run = Prompt.objects.for_tenant(team.tenant).filter(name="helper").exists()
    _assert_accessible(page)
    assert page.get_by_role("heading", name="Dry run: 1 error, nothing imported").count() == 1
    assert page.get_by_role("button", name="Apply: import this bundle").count() == 0

    page.get_by_label("Bundle (YAML or JSON)").fill(BUNDLE.format(model="m"))
    page.get_by_role("button", name="Check (dry run)").click()
    page.get_by_role("heading", name="Dry run: the bundle is valid").wait_for()
    outcome = entry.locator(".outcome").inner_text()
    checked_only = Prompt.objects.for_tenant(team.tenant).filter(name="helper").exists()
    page.get_by_role("button", name="Apply: import this bundle").click()
    flash = page.locator(".flash li", has_text="Imported the bundle")
    flash.wait_for()

    assert "no_such_model" in error_text
    assert imported_by_dry_run is False
    assert outcome == "would be created"
    assert checked_only is False
    assert "created prompt helper" in flash.inner_text()
    assert page.get_by_role("link", name="helper").count() == 1
    assert Prompt.objects.for_tenant(team.tenant).get(name="helper").model == "m"


def test_a_definitions_refusal_is_shown_at_its_field(page: Any, served: Live, team: Team) -> None:
    log_in(page, served, team.member)
    page.goto(f"/console/agents/agents/{CHAT}/")

    page.locator("#id_side_a-prompt").fill("absent")
    page.get_by_role("button", name="Save").click()
    errors = page.locator('[data-field="side_a-prompt"] .field-errors')
    errors.wait_for()

    assert "side_a.prompt" in errors.inner_text()
    assert page.locator("#id_side_a-prompt").get_attribute("aria-invalid") == "true"
    _assert_accessible(page)


def test_the_structured_forms_make_a_prompt_and_an_agent_that_answer_with_a_tool(
    page: Any, served: Live, team: Team
) -> None:
    log_in(page, served, team.member)
    page.goto("/console/agents/new/prompts/")
    _assert_accessible(page)
    page.locator("#id_name").fill("clock_helper")
    page.locator("#id_tool_description").fill("Tells the time")
    page.locator("#id_prompt").fill("You tell the time.")
    page.locator("#id_model").fill("m")
    page.locator("#id_include_chat").check()
    page.get_by_label("Tool 1", exact=True).fill("current_time")
    page.get_by_role("button", name="Add a tool").click()
    page.get_by_label("Tool 2", exact=True).fill("p")
    page.get_by_label("Approval of tool 2").select_option("deny")
    page.get_by_role("button", name="Create prompt").click()
    page.locator(".flash li", has_text="Saved prompt clock_helper").wait_for()

    page.goto("/console/agents/new/agents/")
    page.locator("#id_name").fill("clock")
    page.locator("#id_side_a-prompt").fill("clock_helper")
    page.locator("#id_side_a-label").fill("Clock")
    page.get_by_role("button", name="Create agent").click()
    page.locator(".flash li", has_text="Saved agent clock").wait_for()

    page.goto("/console/threads/new/")
    page.get_by_label("Agent").select_option("clock")
    page.get_by_role("button", name="Choose").click()
    page.get_by_role("button", name="Create thread").click()
    page.locator("#connection", has_text="Live").wait_for()
    page.get_by_label("Message").fill("what time is it?")
    page.get_by_label("Message").press("Enter")
    page.locator("details.tool-call[data-tool=current_time]").wait_for()
    answer = page.locator(".message.role-assistant .content", has_text="It is")
    answer.wait_for()

    prompt = Prompt.objects.for_tenant(team.tenant).get(name="clock_helper")
    agent = Agent.objects.for_tenant(team.tenant).get(name="clock")
    assert prompt.tools == ["current_time", {"name": "p", "approval": "deny"}]
    assert prompt.include_chat is True
    assert agent.side_a == {**agent.side_a, "prompt": "clock_helper", "label": "Clock"}
    assert "It is" in answer.inner_text()


@pytest.mark.parametrize("role", ["member", "reader"])
def test_agents_pages_have_titles_and_labelled_controls(
    page: Any, served: Live, team: Team, role: str
) -> None:
    log_in(page, served, getattr(team, role))
    urls = [
        "/console/agents/", "/console/agents/models/m/", "/console/agents/prompts/p/",
        f"/console/agents/agents/{CHAT}/", "/console/agents/registry/",
    ]  # fmt: skip
    if role == "member":
        urls += ["/console/agents/new/code_tools/", "/console/agents/import/"]

    for url in urls:
        answer = page.goto(url)
        assert answer is not None
        assert answer.status == 200, url
        _assert_accessible(page)
    page.goto("/console/agents/prompts/p/")

    write_forms = page.locator("main form[method=post]").count()
    assert (write_forms > 0) is (role == "member")

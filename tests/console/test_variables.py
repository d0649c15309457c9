"""The thread page's variable-bootstrap requests (spec runtime §7.5): a subagent deferred for
want of a required scoped variable is shown as a form; filling it in starts the child. In a
real browser against a live worker, and without one for the refusals and the scoping."""

from __future__ import annotations

from typing import Any

import pytest
from django.urls import reverse

from agents.bundles import bundle_import
from tenancy.models import Tenant
from tests.console.conftest import CHAT, Team, agents_for, client_of, log_in, team_make
from tests.factories import make_tenant
from tests.live import Live
from threads.models import Thread, ThreadEnv, VariableRequest
from threads.runtime.lifecycle import thread_open
from threads.services.env import thread_env_get
from threads.services.variable_requests import variable_request_create

BOSS = "boss"
VAULT = "vault"
SECRET = "vault-token-3f1e"

# ``boss`` calls its subagent ``vault`` when told to, and says so once the call is refused;
# ``vault``'s side A declares the required scoped secret VAULT_TOKEN.
SUBAGENT_RULES: list[dict[str, Any]] = [
    {"when": {"last_tool": VAULT}, "respond": {"text": "The vault needs its token."}},
    {"when": {"last_role": "user", "last_user_contains": "open the vault"},
     "respond": {"tool_calls": [{"name": VAULT, "arguments": {"message": "unlock please"}}]}},
    {"respond": {"text": "You said: {last_user_message}"}},
]  # fmt: skip


def subagents_for(tenant: Tenant) -> Tenant:
    document = {
        "version": 1,
        "models": [{"name": "m_boss", "provider": "scripted", "model_id": "scripted",
                    "config": {"rules": SUBAGENT_RULES}}],
        "prompts": [
            {"name": "p_boss", "tool_description": "The boss", "prompt": "You delegate.",
             "model": "m_boss", "include_chat": True, "tools": [VAULT]},
            {"name": "p_vault_a", "tool_description": "Vault side A", "prompt": "You open.",
             "model": "m_boss", "include_chat": True,
             "variables": [{"name": "VAULT_TOKEN", "type": "secret", "required": True,
                            "scoped": True, "description": "The vault's token"}]},
            {"name": "p_vault_b", "tool_description": "Vault side B", "prompt": "You check.",
             "model": "m_boss", "include_chat": True},
        ],
        "agents": [
            {"name": BOSS, "side_a": {"prompt": "p_boss"}},
            {"name": VAULT, "type": "dual_ai", "side_a": {"prompt": "p_vault_a"},
             "side_b": {"prompt": "p_vault_b"}, "max_session_turns": 1,
             "expose_as_tool": True, "tool_description": "The vault subagent"},
        ],
    }  # fmt: skip
    report = bundle_import(tenant=tenant, document=document)
    assert report.errors == [], report.errors
    return tenant


def _pending(thread: Thread) -> VariableRequest:
    """A request as a refused spawn of ``vault`` leaves it."""
    return variable_request_create(
        parent=thread, relationship=VAULT, agent_name=VAULT, required=["VAULT_TOKEN"],
        missing=["VAULT_TOKEN"], values={},
        spawn={"message": "unlock please", "attachments": [], "label": "", "owner": "a"},
    )  # fmt: skip


# Without a browser ---------------------------------------------------------------------------


@pytest.fixture
def quiet(db: None) -> Team:
    """A team without the live server (these tests need no worker)."""
    return team_make()


@pytest.mark.django_db
def test_a_pending_request_is_a_masked_labelled_form_for_writers_only(quiet: Team) -> None:
    thread = thread_open(tenant=subagents_for(quiet.tenant), agent_name=BOSS)
    pending = _pending(thread)
    page = reverse("console:thread", args=[thread.pk])

    html = client_of(quiet.member).get(page).content.decode()
    read_only = client_of(quiet.reader).get(page).content.decode()

    field = f"env_VAULT_TOKEN-{pending.pk}"
    assert f'<label for="{field}">VAULT_TOKEN</label>' in html
    assert f'id="{field}" name="env_VAULT_TOKEN" type="password"' in html
    assert "declared in prompt p_vault_a" in html
    assert "Start the subagent" in html
    assert f'id="variables-{pending.pk}"' in read_only
    assert "Start the subagent" not in read_only


@pytest.mark.django_db
def test_an_empty_field_is_refused_at_that_field_and_nothing_starts(quiet: Team) -> None:
    thread = thread_open(tenant=subagents_for(quiet.tenant), agent_name=BOSS)
    pending = _pending(thread)
    url = reverse("console:variable-request-complete", args=[thread.pk, pending.pk])

    answer = client_of(quiet.member).post(
        url, {"env_VAULT_TOKEN": "  "}, headers={"Accept": "application/json"}
    )

    assert answer.status_code == 400
    assert answer.json()["error"]["field"] == "env.VAULT_TOKEN"
    assert "still missing: VAULT_TOKEN" in answer.json()["error"]["message"]
    pending.refresh_from_db()
    assert pending.status == VariableRequest.Status.PENDING
    assert not Thread.objects.filter(parent=thread).exists()


@pytest.mark.django_db
def test_a_read_only_member_cannot_complete_a_request(quiet: Team) -> None:
    thread = thread_open(tenant=subagents_for(quiet.tenant), agent_name=BOSS)
    pending = _pending(thread)
    url = reverse("console:variable-request-complete", args=[thread.pk, pending.pk])

    answer = client_of(quiet.reader).post(url, {"env_VAULT_TOKEN": SECRET})

    assert answer.status_code == 403
    pending.refresh_from_db()
    assert pending.status == VariableRequest.Status.PENDING
    assert not ThreadEnv.objects.exists()


@pytest.mark.django_db
def test_another_tenants_request_is_404(quiet: Team) -> None:
    theirs = thread_open(tenant=subagents_for(agents_for(make_tenant())), agent_name=BOSS)
    pending = _pending(theirs)
    mine = thread_open(tenant=quiet.tenant, agent_name=CHAT)
    client = client_of(quiet.admin)

    through_theirs = client.post(
        reverse("console:variable-request-complete", args=[theirs.pk, pending.pk]),
        {"env_VAULT_TOKEN": SECRET},
    )  # fmt: skip
    through_mine = client.post(
        reverse("console:variable-request-complete", args=[mine.pk, pending.pk]),
        {"env_VAULT_TOKEN": SECRET}, headers={"Accept": "application/json"},
    )  # fmt: skip
    fragment = client.get(reverse("console:variable-requests", args=[theirs.pk]))

    assert (through_theirs.status_code, through_mine.status_code) == (404, 404)
    assert fragment.status_code == 404
    pending.refresh_from_db()
    assert pending.status == VariableRequest.Status.PENDING


@pytest.mark.django_db
def test_the_fragment_lists_only_open_requests(quiet: Team) -> None:
    thread = thread_open(tenant=subagents_for(quiet.tenant), agent_name=BOSS)
    pending = _pending(thread)
    url = reverse("console:variable-requests", args=[thread.pk])
    before = client_of(quiet.member).get(url).content.decode()
    VariableRequest.objects.filter(pk=pending.pk).update(status=VariableRequest.Status.COMPLETED)

    after = client_of(quiet.member).get(url).content.decode()

    assert f'id="variables-{pending.pk}"' in before
    assert after.strip() == ""


# In a browser --------------------------------------------------------------------------------


@pytest.mark.django_db(transaction=True)
def test_fill_a_variable_bootstrap_form_and_see_the_child_start(
    page: Any, served: Live, team: Team
) -> None:
    thread = thread_open(tenant=subagents_for(team.tenant), agent_name=BOSS)
    log_in(page, served, team.member)
    page.goto(f"/console/threads/{thread.pk}/")
    page.locator("#connection", has_text="Live").wait_for()

    page.get_by_label("Message").fill("open the vault")
    page.get_by_label("Message").press("Enter")
    page.locator(".message.role-assistant .content", has_text="needs its token").wait_for()
    form = page.locator("#variable-requests form")
    field = form.get_by_label("VAULT_TOKEN")
    form.get_by_role("button", name="Start the subagent").click()  # empty: the field refuses
    missing = field.evaluate("(input) => input.validity.valueMissing")
    started_early = Thread.objects.filter(parent=thread).exists()
    masked = field.get_attribute("type") == "password"
    field.fill(SECRET)
    field.press("Enter")
    started = page.locator("#variable-requests .started a")
    started.wait_for()
    started.click()

    page.locator(".message.role-assistant .content", has_text="You said: unlock please").wait_for()
    page.locator("#connection", has_text="terminated").wait_for()  # its one session is over
    [child] = Thread.objects.filter(parent=thread)
    assert page.url.endswith(f"/console/threads/{child.pk}/")
    assert child.agent_name == VAULT
    assert (missing, started_early) == (True, False)
    assert masked
    assert page.locator("#compose").is_hidden()
    assert SECRET not in page.content()
    stored = thread_env_get(thread=child, name="VAULT_TOKEN")
    assert stored is not None
    assert stored.value == SECRET

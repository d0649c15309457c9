"""The console's writes are audited as the API's are (docs/audit.md): each audited action
made from a console page leaves one entry with the API's action name and details, naming
the logged-in user; a refused write, a dry run and an answer too late leave none."""

from __future__ import annotations

import json
from typing import Any

import pytest
from django.contrib.auth.models import User
from django.urls import reverse

from agents.credentials import credential_save
from agents.models import Prompt
from audit.models import AuditEntry
from common.time import now_us
from tenancy.models import Tenant
from tests.console.conftest import CHAT, Team, client_of, team_make
from tests.console.definition_pages import posted_form
from threads.models import Action, Schedule, Thread
from threads.runtime.lifecycle import thread_open
from threads.runtime.schedules import schedule_save
from threads.services.env import thread_env_get
from threads.services.inbox import message_queue

pytestmark = pytest.mark.django_db

SECRET = "sk-console-audit-never-stored-0123"
JSON = {"Accept": "application/json"}


@pytest.fixture
def team(db: None) -> Team:
    return team_make()


def _entries(tenant: Tenant, action: str) -> list[AuditEntry]:
    return list(AuditEntry.objects.for_tenant(tenant).filter(action=action).order_by("created_at"))


def _only(tenant: Tenant, action: str) -> AuditEntry:
    (entry,) = _entries(tenant, action)
    return entry


def _by(entry: AuditEntry, user: User) -> None:
    assert (entry.actor_kind, entry.actor_id, entry.actor_name) == (
        "user",
        str(user.pk),
        user.username,
    )


def _all_details(tenant: Tenant) -> str:
    return json.dumps([row.details for row in AuditEntry.objects.for_tenant(tenant)])


# Definitions and bundles ----------------------------------------------------------------------


def _prompt_form(team: Team, **changes: Any) -> dict[str, Any]:
    """The form of the team's prompt ``p`` as a browser posts it, changed."""
    url = reverse("console:agents-definition", args=["prompts", "p"])
    return posted_form(client_of(team.member), url, **changes)


def test_console_definition_writes_record_the_users_diff_and_never_a_model_key(
    team: Team,
) -> None:
    client = client_of(team.member)
    tool = {"name": "shout", "description": "Shouts", "language": "javascript",
            "source": "export default (s, a) => 'HI';"}  # fmt: skip
    rules = json.dumps({"rules": [{"respond": {"text": "hi"}}]})
    model = {"name": "m", "provider": "scripted", "model_id": "scripted", "config": rules,
             "api_key": SECRET}  # fmt: skip

    created = client.post(reverse("console:agents-new", args=["code_tools"]), tool)
    taken = client.post(reverse("console:agents-new", args=["code_tools"]), tool)
    prompt_url = reverse("console:agents-definition", args=["prompts", "p"])
    renamed = client.post(prompt_url, _prompt_form(team, name="p2"))  # the chat agent names p
    described = client.post(prompt_url, _prompt_form(team, tool_description="Helps"))
    keyed = client.post(reverse("console:agents-definition", args=["models", "m"]), model)
    deleted = client.post(reverse("console:agents-delete", args=["code_tools", "shout"]))

    answers = (created, taken, renamed, described, keyed, deleted)
    assert [answer.status_code for answer in answers] == [302, 200, 200, 302, 302, 302]
    made = _only(team.tenant, "definition.created")
    _by(made, team.member)
    assert (made.target_type, made.target_id) == ("code tool", "shout")
    assert made.details["changes"]["source"] == {
        "before": None, "after": "export default (s, a) => 'HI';",
    }  # fmt: skip
    prompt, key = _entries(team.tenant, "definition.updated")
    _by(prompt, team.member)
    assert (prompt.target_type, prompt.target_id) == ("prompt", "p")
    assert prompt.details == {
        "changes": {"tool_description": {"before": "The chat prompt", "after": "Helps"}}
    }
    assert (key.target_type, key.target_id) == ("model", "m")
    assert key.details["changes"]["api_key"] == {"before": "***", "after": "***"}
    gone = _only(team.tenant, "definition.deleted")
    _by(gone, team.member)
    assert (gone.target_type, gone.target_id, gone.details) == ("code tool", "shout", {})
    assert SECRET not in _all_details(team.tenant)


def test_a_console_bundle_import_records_once_when_applied_never_on_the_dry_run(
    team: Team,
) -> None:
    client = client_of(team.member)
    url = reverse("console:agents-import")
    document = json.dumps({"version": 1, "prompts": [
        {"name": "q", "tool_description": "Q", "prompt": "Hi.", "model": "m"},
        {"name": "p", "tool_description": "Changed", "prompt": "You help.", "model": "m",
         "include_chat": True, "tools": ["current_time"]},
    ]})  # fmt: skip

    checked = client.post(url, {"document": document})
    after_check = _entries(team.tenant, "bundle.imported")
    applied = client.post(url, {"document": document, "apply": "1"})

    assert (checked.status_code, applied.status_code, after_check) == (200, 302, [])
    assert Prompt.objects.for_tenant(team.tenant).filter(name="q").exists()
    entry = _only(team.tenant, "bundle.imported")
    _by(entry, team.member)
    assert (entry.target_type, entry.target_id) == ("bundle", "")
    assert entry.details == {
        "created": ["prompt q"], "updated": ["prompt p"], "deleted": [], "replace": False,
        "changes": {"prompt p": {"tool_description": {"before": "The chat prompt",
                                                      "after": "Changed"}}},
    }  # fmt: skip


# Credentials ----------------------------------------------------------------------------------


def test_console_credential_writes_name_the_fields_never_the_key(team: Team) -> None:
    client = client_of(team.admin)
    credential_save(
        tenant=team.tenant, data={"name": "spare", "provider": "openai", "api_key": "sk-spare-1"}
    )
    body = {"name": "main", "provider": "openai", "base_url": "", "description": "",
            "api_key": SECRET}  # fmt: skip

    added = client.post(reverse("console:agents-credential-add"), body)
    rotated = client.post(
        reverse("console:agents-credential-rotate", args=["main"]), {"api_key": SECRET + "2"}
    )
    deleted = client.post(reverse("console:agents-credential-delete", args=["spare"]))

    assert [r.status_code for r in (added, rotated, deleted)] == [302, 302, 302]
    made = _only(team.tenant, "credential.created")
    _by(made, team.admin)
    assert (made.target_type, made.target_id) == ("credential", "main")
    assert made.details == {"fields": ["api_key", "base_url", "description", "name", "provider"]}
    changed = _only(team.tenant, "credential.updated")
    assert (changed.target_id, changed.details) == ("main", {"fields": ["api_key"]})
    gone = _only(team.tenant, "credential.deleted")
    _by(gone, team.admin)
    assert (gone.target_id, gone.details) == ("spare", {"fields": []})
    assert SECRET not in _all_details(team.tenant)


def test_console_connection_writes_name_the_fields_never_the_secret(team: Team) -> None:
    client = client_of(team.admin)
    blank_auth = dict.fromkeys(
        ["auth_token", "auth_header_name", "auth_header_value", "auth_client_id",
         "auth_token_url", "auth_scopes", "auth_client_secret"], "",
    )  # fmt: skip
    server = {**blank_auth, "name": "weather", "url": "https://mcp.example.com/mcp",
              "description": "", "tools_ttl_s": "", "call_timeout_s": "",
              "auth_type": "bearer", "auth_token": SECRET}  # fmt: skip
    agent = {
        **blank_auth,
        "name": "translator",
        "url": "https://a2a.example.com/",
        "description": "",
        "card_ttl_s": "",
        "call_timeout_s": "",
        "auth_type": "none",
    }

    added = client.post(reverse("console:mcp-servers"), server)
    edited = client.post(reverse("console:mcp-server-edit", args=["weather"]),
                         {**server, "description": "Forecasts", "auth_token": ""})  # fmt: skip
    agent_added = client.post(reverse("console:a2a-agents"), agent)
    agent_deleted = client.post(reverse("console:a2a-agent-delete", args=["translator"]))

    assert [r.status_code for r in (added, edited, agent_added, agent_deleted)] == [302] * 4
    entries = list(
        AuditEntry.objects.for_tenant(team.tenant)
        .filter(action__startswith="connection.")
        .order_by("created_at")
    )
    shown = [(e.action, e.target_type, e.target_id) for e in entries]
    assert shown == [
        ("connection.created", "mcp_server", "weather"),
        ("connection.updated", "mcp_server", "weather"),
        ("connection.created", "a2a_agent", "translator"),
        ("connection.deleted", "a2a_agent", "translator"),
    ]
    for entry in entries:
        _by(entry, team.admin)
    assert entries[0].details["auth_fields"] == ["token", "type"]
    assert entries[1].details == {"fields": ["description"]}
    assert SECRET not in _all_details(team.tenant)


# Threads: turns, approvals, env, schedules ---------------------------------------------------


def test_a_turn_submitted_from_the_console_names_the_user_and_a_refused_one_nothing(
    team: Team,
) -> None:
    thread = thread_open(tenant=team.tenant, agent_name=CHAT)
    client = client_of(team.member)
    url = reverse("console:message-send", args=[thread.pk])

    sent = client.post(url, {"content": "hi", "multitask_strategy": "enqueue"}, headers=JSON)
    refused = client.post(url, {"content": "no", "multitask_strategy": "reject"}, headers=JSON)

    assert (sent.status_code, refused.status_code) == (200, 409)
    entry = _only(team.tenant, "turn.submitted")
    _by(entry, team.member)
    assert (entry.target_type, entry.target_id) == ("turn", sent.json()["turn_id"])
    assert entry.details == {"thread_id": str(thread.pk), "user": None}


def _pending_approval(thread: Thread, *, expires_in_us: int) -> Action:
    turn = message_queue(thread=thread, role="user", content="refund me", wake=False)
    return Action.objects.create(
        tenant=thread.tenant, thread=thread, turn=turn, kind="approval", tool_call_id="c",
        tool_name="refund", arguments={"amount": 1}, decisions=["approve", "deny", "edit"],
        expires_at=now_us() + expires_in_us,
    )  # fmt: skip


def test_an_approval_answered_in_the_console_names_the_user_and_a_late_one_nothing(
    team: Team,
) -> None:
    thread = thread_open(tenant=team.tenant, agent_name=CHAT)
    pending = _pending_approval(thread, expires_in_us=3_600_000_000)
    client = client_of(team.member)

    answered = client.post(
        reverse("console:action-respond", args=[thread.pk, pending.pk]),
        {"decision": "deny", "reason": "no"}, headers=JSON,
    )  # fmt: skip
    late = _pending_approval(thread, expires_in_us=-1)
    too_late = client.post(
        reverse("console:action-respond", args=[thread.pk, late.pk]), {"decision": "approve"},
        headers=JSON,
    )  # fmt: skip

    assert (answered.status_code, too_late.status_code) == (200, 409)
    entry = _only(team.tenant, "action.answered")
    _by(entry, team.member)
    assert (entry.target_type, entry.target_id) == ("action", str(pending.pk))
    assert entry.details == {"thread_id": str(thread.pk), "decision": "deny"}
    late.refresh_from_db()
    assert late.status == "expired"  # the expiry committed though the answer was refused


def test_console_env_writes_name_the_variable_never_its_value(team: Team) -> None:
    thread = thread_open(tenant=team.tenant, agent_name=CHAT)
    client = client_of(team.member)

    set_ = client.post(
        reverse("console:thread-env-set", args=[thread.pk]),
        {"name": "API_TOKEN", "type": "secret", "value": SECRET},
    )
    deleted = client.post(
        reverse("console:thread-env-delete", args=[thread.pk]), {"name": "API_TOKEN"},
        headers=JSON,
    )  # fmt: skip
    missing = client.post(
        reverse("console:thread-env-delete", args=[thread.pk]), {"name": "API_TOKEN"},
        headers=JSON,
    )  # fmt: skip

    assert (set_.status_code, deleted.status_code, missing.status_code) == (302, 200, 404)
    assert thread_env_get(thread=thread, name="API_TOKEN") is None
    stored = _only(team.tenant, "env.set")
    _by(stored, team.member)
    assert (stored.target_type, stored.target_id) == ("thread_env", "API_TOKEN")
    assert stored.details == {"thread_id": str(thread.pk), "type": "secret"}
    gone = _only(team.tenant, "env.deleted")
    assert (gone.target_id, gone.details) == ("API_TOKEN", {"thread_id": str(thread.pk)})
    assert SECRET not in _all_details(team.tenant)


def test_console_schedule_pause_resume_and_delete_name_the_user(team: Team) -> None:
    thread = thread_open(tenant=team.tenant, agent_name=CHAT)
    schedule = schedule_save(
        tenant=team.tenant,
        data={"name": "morning", "thread_id": str(thread.pk), "cron": "0 9 * * *",
              "action": "turn", "input": {"content": "good morning"}},
    )  # fmt: skip
    client = client_of(team.member)

    answers = [
        client.post(reverse(f"console:schedule-{verb}", args=[thread.pk, schedule.pk]))
        for verb in ("pause", "resume", "delete")
    ]

    assert [answer.status_code for answer in answers] == [302, 302, 302]
    assert not Schedule.objects.filter(pk=schedule.pk).exists()
    rows = list(AuditEntry.objects.for_tenant(team.tenant).filter(target_type="schedule"))
    assert sorted(row.action for row in rows) == [
        "schedule.deleted", "schedule.paused", "schedule.resumed",
    ]  # fmt: skip
    for row in rows:
        _by(row, team.member)
        assert row.target_id == str(schedule.pk)
    gone = _only(team.tenant, "schedule.deleted")
    assert gone.details["changes"]["name"] == {"before": "morning", "after": None}
    assert "next_run_at" not in gone.details["changes"]
    assert _only(team.tenant, "schedule.paused").details == {}

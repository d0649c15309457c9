"""The audit trail (docs/audit.md): every audited action, made as a client makes it, leaves
one entry naming its actor (the API key or the user); env and credential writes name the
variable, never its value; a change that rolls back leaves no entry; the list is the
tenant's, for its admins, filtered and paged like every list."""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

import pytest
from django.contrib.auth.models import User
from django.test import Client
from django.urls import reverse
from rest_framework.test import APIClient

from audit.models import AuditEntry
from audit.services import DAY_US, audit_prune
from common.time import now_us
from tenancy.models import ApiKey, Membership, Role, Tenant
from tests.agents.samples import seed_rich
from tests.factories import make_api_key, make_member, make_thread
from threads.models import Action, Schedule
from threads.services.inbox import message_queue

pytestmark = pytest.mark.django_db

SECRET_VALUE = "s3cr3t-value-never-stored"


def _text(content: str) -> dict[str, str]:
    return {"type": "text", "content": content}


TERSE = {"name": "terse", "tool_description": "Terse", "prompt": "Be terse.", "model": "fast"}


def _admin(tenant: Tenant, name: str = "ops") -> tuple[APIClient, ApiKey]:
    issued = make_api_key(tenant, name=name, role=Role.ADMIN)
    client = APIClient()
    client.credentials(HTTP_AUTHORIZATION=f"Bearer {issued.secret}")
    return client, issued.api_key


def _entries(tenant: Tenant, action: str) -> list[AuditEntry]:
    return list(AuditEntry.objects.for_tenant(tenant).filter(action=action).order_by("created_at"))


def _only(tenant: Tenant, action: str) -> AuditEntry:
    (entry,) = _entries(tenant, action)
    return entry


def _by_key(entry: AuditEntry, key: ApiKey) -> None:
    assert (entry.actor_kind, entry.actor_id, entry.actor_name) == (
        "api_key",
        str(key.pk),
        key.name,
    )


# API keys and memberships ---------------------------------------------------------------------


def test_api_key_creation_and_revocation_name_the_admin_key(tenant: Tenant) -> None:
    client, admin_key = _admin(tenant)

    created = client.post("/api/v1/api-keys", {"name": "ci", "role": "member"}, format="json")
    revoked = client.post(f"/api/v1/api-keys/{created.json()['id']}/revoke")

    assert (created.status_code, revoked.status_code) == (201, 200)
    made = _only(tenant, "api_key.created")
    _by_key(made, admin_key)
    assert (made.target_type, made.target_id) == ("api_key", created.json()["id"])
    assert made.details == {"name": "ci", "role": "member"}
    assert created.json()["key"] not in str(made.details)
    gone = _only(tenant, "api_key.revoked")
    _by_key(gone, admin_key)
    assert gone.target_id == created.json()["id"]


def test_membership_changes_in_the_admin_name_the_admin_user(tenant: Tenant) -> None:
    root = User.objects.create_superuser("root", password="pw-for-tests")
    client = Client()
    client.force_login(root)
    person = User.objects.create_user("pat", password="pw-for-tests")

    added = client.post(
        reverse("admin:tenancy_membership_add"),
        {"tenant": str(tenant.pk), "user": str(person.pk), "role": "member"},
    )
    membership = Membership.objects.get(tenant=tenant, user=person)
    changed = client.post(
        reverse("admin:tenancy_membership_change", args=[membership.pk]), {"role": "admin"}
    )
    deleted = client.post(
        reverse("admin:tenancy_membership_delete", args=[membership.pk]), {"post": "yes"}
    )

    assert [added.status_code, changed.status_code, deleted.status_code] == [302, 302, 302]
    actions = [
        (e.action, e.actor_kind, e.actor_name, e.details["role"])
        for e in AuditEntry.objects.for_tenant(tenant)
        .filter(target_type="membership")
        .order_by("created_at")
    ]
    assert actions == [
        ("membership.created", "user", "root", "member"),
        ("membership.changed", "user", "root", "admin"),
        ("membership.deleted", "user", "root", "admin"),
    ]


# Definitions and bundles ----------------------------------------------------------------------


def test_a_definition_change_records_its_diff_and_never_the_model_key(tenant: Tenant) -> None:
    seed_rich(tenant)
    client, admin_key = _admin(tenant)

    changed = client.patch(
        "/api/v1/models/smart",
        {"output_price": "0.9", "api_key": SECRET_VALUE},
        format="json",
    )

    assert changed.status_code == 200
    entry = _only(tenant, "definition.updated")
    _by_key(entry, admin_key)
    assert (entry.target_type, entry.target_id) == ("model", "smart")
    assert entry.details == {
        "changes": {
            "output_price": {"before": "0.6", "after": "0.9"},
            "api_key": {"before": "***", "after": "***"},
        }
    }
    assert SECRET_VALUE not in str(entry.details)


def test_a_definition_created_and_deleted_names_the_key(tenant: Tenant) -> None:
    seed_rich(tenant)
    client, admin_key = _admin(tenant)

    created = client.post("/api/v1/prompts", TERSE, format="json")
    deleted = client.delete("/api/v1/prompts/terse")

    assert (created.status_code, deleted.status_code) == (201, 204), created.json()
    entry = _only(tenant, "definition.created")
    _by_key(entry, admin_key)
    assert (entry.target_type, entry.target_id) == ("prompt", "terse")
    assert entry.details["changes"]["prompt"] == {"before": None, "after": [_text("Be terse.")]}
    gone = _only(tenant, "definition.deleted")
    _by_key(gone, admin_key)
    assert (gone.target_type, gone.target_id) == ("prompt", "terse")


def test_a_refused_definition_write_leaves_no_entry(tenant: Tenant) -> None:
    seed_rich(tenant)
    client, _ = _admin(tenant)

    refused = client.post("/api/v1/prompts", {**TERSE, "model": "no_such_model"}, format="json")

    assert refused.status_code == 400
    assert not AuditEntry.objects.for_tenant(tenant).exists()


def test_a_bundle_import_records_what_it_created_and_the_diff_of_what_it_updated(
    tenant: Tenant,
) -> None:
    seed_rich(tenant)
    client, admin_key = _admin(tenant)
    bundle = {
        "version": 1,
        "prompts": [
            {"name": "house_rules", "tool_description": "Shared rules", "prompt": "Be kind.",
             "model": "fast"},
            {**TERSE, "name": "fresh"},
        ],
    }  # fmt: skip

    dry = client.post("/api/v1/bundles?dry_run=1", bundle, format="json")
    imported = client.post("/api/v1/bundles", bundle, format="json")

    assert (dry.status_code, imported.status_code) == (200, 200), imported.json()
    entry = _only(tenant, "bundle.imported")  # the dry run changed nothing: no entry
    _by_key(entry, admin_key)
    assert entry.details["created"] == ["prompt fresh"]
    assert entry.details["updated"] == ["prompt house_rules"]
    assert entry.details["changes"] == {
        "prompt house_rules": {
            "prompt": {"before": [_text("Be brief.")], "after": [_text("Be kind.")]}
        }
    }


# Env and credentials: names, never values ------------------------------------------------------


def test_env_writes_name_the_variable_never_its_value(tenant: Tenant) -> None:
    client, admin_key = _admin(tenant)
    thread = make_thread(tenant)

    responses = [
        client.put("/api/v1/env/TOKEN", {"value": SECRET_VALUE, "type": "secret"}, format="json"),
        client.put(f"/api/v1/threads/{thread.pk}/env/REGION", {"value": SECRET_VALUE},
                   format="json"),
        client.delete(f"/api/v1/threads/{thread.pk}/env/REGION"),
        client.delete("/api/v1/env/TOKEN"),
    ]  # fmt: skip

    assert [r.status_code for r in responses] == [200, 200, 204, 204]
    rows = list(AuditEntry.objects.for_tenant(tenant).order_by("created_at"))
    assert [(e.action, e.target_type, e.target_id) for e in rows] == [
        ("env.set", "tenant_env", "TOKEN"),
        ("env.set", "thread_env", "REGION"),
        ("env.deleted", "thread_env", "REGION"),
        ("env.deleted", "tenant_env", "TOKEN"),
    ]
    for entry in rows:
        _by_key(entry, admin_key)
        assert SECRET_VALUE not in str(entry.details)
    assert rows[1].details == {"thread_id": str(thread.pk), "type": "secret"}


def test_credential_writes_name_the_fields_never_the_key(tenant: Tenant) -> None:
    client, admin_key = _admin(tenant)

    responses = [
        client.post("/api/v1/credentials", {"name": "team", "provider": "openai",
                                             "api_key": SECRET_VALUE}, format="json"),
        client.patch("/api/v1/credentials/team", {"api_key": SECRET_VALUE + "2"},
                     format="json"),
        client.delete("/api/v1/credentials/team"),
    ]  # fmt: skip

    assert [r.status_code for r in responses] == [201, 200, 204]
    rows = list(AuditEntry.objects.for_tenant(tenant).order_by("created_at"))
    assert [(e.action, e.target_id, e.details) for e in rows] == [
        ("credential.created", "team", {"fields": ["api_key", "name", "provider"]}),
        ("credential.updated", "team", {"fields": ["api_key"]}),
        ("credential.deleted", "team", {"fields": []}),
    ]
    for entry in rows:
        _by_key(entry, admin_key)


def test_remote_connection_writes_name_the_fields_never_the_secret(tenant: Tenant) -> None:
    client, admin_key = _admin(tenant)
    bearer = {"type": "bearer", "token": SECRET_VALUE}

    responses = [
        client.post("/api/v1/mcp-servers", {"name": "weather", "url": "https://mcp.example.com/",
                                             "auth": bearer}, format="json"),
        client.patch("/api/v1/mcp-servers/weather", {"description": "Forecasts"}, format="json"),
        client.post("/api/v1/a2a-agents", {"name": "translator", "url": "https://a2a.example.com/",
                                            "auth": bearer}, format="json"),
        client.delete("/api/v1/a2a-agents/translator"),
        client.post("/api/v1/a2a-agents", {"name": "bad", "url": "ftp://x"}, format="json"),
    ]  # fmt: skip

    assert [r.status_code for r in responses] == [201, 200, 201, 204, 400]
    rows = list(AuditEntry.objects.for_tenant(tenant).order_by("created_at"))
    with_auth = {"fields": ["auth", "name", "url"], "auth_fields": ["token", "type"]}
    assert [(e.action, e.target_type, e.target_id, e.details) for e in rows] == [
        ("connection.created", "mcp_server", "weather", with_auth),
        ("connection.updated", "mcp_server", "weather", {"fields": ["description"]}),
        ("connection.created", "a2a_agent", "translator", with_auth),
        ("connection.deleted", "a2a_agent", "translator", {"fields": []}),
    ]  # the refused write left none
    for entry in rows:
        _by_key(entry, admin_key)
        assert SECRET_VALUE not in str(entry.details)


# Threads, turns and approvals -----------------------------------------------------------------


def test_thread_termination_and_deletion_name_the_key(tenant: Tenant) -> None:
    client, admin_key = _admin(tenant)
    thread = make_thread(tenant)

    terminated = client.post(f"/api/v1/threads/{thread.pk}/terminate")
    again = client.post(f"/api/v1/threads/{thread.pk}/terminate")
    deleted = client.delete(f"/api/v1/threads/{thread.pk}")

    assert [terminated.status_code, again.status_code, deleted.status_code] == [200, 200, 200]
    ended = _only(tenant, "thread.terminated")  # the repeat changed nothing: no entry
    _by_key(ended, admin_key)
    assert ended.target_id == str(thread.pk)
    gone = _only(tenant, "thread.deleted")
    _by_key(gone, admin_key)
    assert gone.details == {"agent": "helper", "deleted_threads": 1}


def test_a_submitted_turn_names_the_key_or_the_user_that_submitted_it(tenant: Tenant) -> None:
    seed_rich(tenant)
    thread = make_thread(tenant)
    key_client, admin_key = _admin(tenant)
    person = make_member(tenant, role=Role.MEMBER)
    user_client = APIClient()
    user_client.force_login(person)

    by_key = key_client.post(
        f"/api/v1/threads/{thread.pk}/turns", {"input": {"content": "hi"}, "user": "end-1"},
        format="json",
    )  # fmt: skip
    by_user = user_client.post(
        f"/api/v1/threads/{thread.pk}/messages", {"content": "again"}, format="json"
    )

    assert (by_key.status_code, by_user.status_code) == (202, 202)
    first, second = _entries(tenant, "turn.submitted")
    _by_key(first, admin_key)
    assert (first.target_type, first.target_id) == ("turn", by_key.json()["id"])
    assert first.details == {"thread_id": str(thread.pk), "user": "end-1"}
    assert (second.actor_kind, second.actor_id, second.actor_name) == (
        "user", str(person.pk), person.username,
    )  # fmt: skip


def test_a_refused_submission_leaves_no_entry(tenant: Tenant) -> None:
    client, _ = _admin(tenant)
    thread = make_thread(tenant)
    client.post(f"/api/v1/threads/{thread.pk}/terminate")

    refused = client.post(
        f"/api/v1/threads/{thread.pk}/turns", {"input": {"content": "hi"}}, format="json"
    )

    assert refused.status_code == 409
    assert _entries(tenant, "turn.submitted") == []


def _pending_approval(tenant: Tenant, *, expires_in_us: int = 3_600_000_000) -> Action:
    thread = make_thread(tenant)
    turn = message_queue(thread=thread, role="user", content="refund me", wake=False)
    return Action.objects.create(
        tenant=tenant, thread=thread, turn=turn, kind="approval", tool_call_id="c",
        tool_name="refund", arguments={"amount": 1}, decisions=["approve", "deny", "edit"],
        expires_at=now_us() + expires_in_us,
    )  # fmt: skip


def test_an_answered_approval_names_the_person_who_answered(tenant: Tenant) -> None:
    action = _pending_approval(tenant)
    person = make_member(tenant, role=Role.MEMBER)
    client = APIClient()
    client.force_login(person)

    answered = client.post(
        f"/api/v1/threads/{action.thread_id}/actions/{action.pk}",
        {"decision": "deny", "reason": "no"}, format="json",
    )  # fmt: skip

    assert answered.status_code == 200, answered.json()
    entry = _only(tenant, "action.answered")
    assert (entry.actor_kind, entry.actor_name) == ("user", person.username)
    assert entry.target_id == str(action.pk)
    assert entry.details == {"thread_id": str(action.thread_id), "decision": "deny"}


def test_an_answer_too_late_keeps_the_expiry_and_records_no_answer(tenant: Tenant) -> None:
    action = _pending_approval(tenant, expires_in_us=-1)
    client, _ = _admin(tenant)

    late = client.post(
        f"/api/v1/threads/{action.thread_id}/actions/{action.pk}", {"decision": "approve"},
        format="json",
    )  # fmt: skip

    assert late.status_code == 409
    action.refresh_from_db()
    assert action.status == "expired"
    assert _entries(tenant, "action.answered") == []


# Schedules and webhooks -----------------------------------------------------------------------


def test_schedule_changes_name_the_key(tenant: Tenant) -> None:
    seed_rich(tenant)
    client, admin_key = _admin(tenant)
    thread = make_thread(tenant)

    created = client.post(
        "/api/v1/schedules",
        {"thread_id": str(thread.pk), "cron": "0 9 * * *", "input": {"content": "standup"}},
        format="json",
    )
    pk = created.json()["id"]
    responses = [
        client.patch(f"/api/v1/schedules/{pk}", {"cron": "0 10 * * *"}, format="json"),
        client.post(f"/api/v1/schedules/{pk}/pause"),
        client.post(f"/api/v1/schedules/{pk}/resume"),
        client.delete(f"/api/v1/schedules/{pk}"),
    ]

    assert [created.status_code, *(r.status_code for r in responses)] == [201, 200, 200, 200, 204]
    rows = list(AuditEntry.objects.for_tenant(tenant).order_by("created_at"))
    assert [e.action for e in rows] == [
        "schedule.created", "schedule.updated", "schedule.paused", "schedule.resumed",
        "schedule.deleted",
    ]  # fmt: skip
    for entry in rows:
        _by_key(entry, admin_key)
        assert entry.target_id == pk
    assert rows[1].details["changes"]["cron"] == {"before": "0 9 * * *", "after": "0 10 * * *"}
    assert not Schedule.objects.filter(pk=pk).exists()


def test_webhook_changes_name_the_key_and_never_a_secret(tenant: Tenant) -> None:
    client, admin_key = _admin(tenant)

    created = client.post(
        "/api/v1/webhooks",
        {"url": "https://hooks.example.com/in?token=abc", "event_types": ["thread.status"]},
        format="json",
    )
    pk = created.json()["id"]
    responses = [
        client.patch(f"/api/v1/webhooks/{pk}", {"description": "ops"}, format="json"),
        client.post(f"/api/v1/webhooks/{pk}/rotate-secret"),
        client.delete(f"/api/v1/webhooks/{pk}"),
    ]

    assert [created.status_code, *(r.status_code for r in responses)] == [201, 200, 200, 204]
    rows = list(AuditEntry.objects.for_tenant(tenant).order_by("created_at"))
    assert [e.action for e in rows] == [
        "webhook.created", "webhook.updated", "webhook.secret_rotated", "webhook.deleted",
    ]  # fmt: skip
    for entry in rows:
        _by_key(entry, admin_key)
        text = str(entry.details)
        assert created.json()["secret"] not in text
        assert responses[1].json()["secret"] not in text
        assert "token=abc" not in text
    assert rows[1].details == {"changes": {"description": {"before": "", "after": "ops"}}}


# Logins ---------------------------------------------------------------------------------------


def test_console_logins_succeeded_and_failed_are_recorded_in_the_users_tenants(
    tenant: Tenant, other_tenant: Tenant
) -> None:
    person = make_member(tenant, role=Role.MEMBER, username="pat")
    person.set_password("pw-for-tests")
    person.save()
    Membership.objects.create(tenant=other_tenant, user=person, role=Role.READ_ONLY)
    login = reverse("console:login")

    failed = Client(REMOTE_ADDR="198.51.100.7").post(
        login, {"username": "pat", "password": "wrong"}
    )
    nobody = Client(REMOTE_ADDR="198.51.100.7").post(
        login, {"username": "nobody", "password": "wrong"}
    )
    succeeded = Client(REMOTE_ADDR="198.51.100.7").post(
        login, {"username": "pat", "password": "pw-for-tests"}
    )

    assert [failed.status_code, nobody.status_code, succeeded.status_code] == [200, 200, 302]
    for owner in (tenant, other_tenant):
        rows = list(AuditEntry.objects.for_tenant(owner).order_by("created_at"))
        assert [(e.action, e.actor_kind, e.actor_name, e.target_id) for e in rows] == [
            ("login.failed", "user", "pat", str(person.pk)),
            ("login.succeeded", "user", "pat", str(person.pk)),
        ]
        assert rows[0].details == {"ip": "198.51.100.7", "path": login}
        assert "wrong" not in str(rows[0].details)
    assert AuditEntry.objects.count() == 4  # the unknown name belongs to no tenant


# The API, the console page, the admin ---------------------------------------------------------


def _seeded(tenant: Tenant, client: APIClient, count: int) -> list[str]:
    ids = []
    for n in range(count):
        created = client.post("/api/v1/api-keys", {"name": f"k{n}"}, format="json")
        ids.append(created.json()["id"])
    return ids


def test_the_audit_list_is_for_admins_only(
    tenant: Tenant, client_for: Callable[..., APIClient]
) -> None:
    for role, expected in [(Role.ADMIN, 200), (Role.MEMBER, 403), (Role.READ_ONLY, 403)]:
        response = client_for(tenant, role).get("/api/v1/audit")
        assert response.status_code == expected, role
    assert client_for(tenant, Role.MEMBER).get("/api/v1/audit").json()["error"]["code"] == (
        "forbidden"
    )


def test_the_audit_list_pages_newest_first_without_repeats(tenant: Tenant) -> None:
    client, _ = _admin(tenant)
    ids = _seeded(tenant, client, 5)

    first = client.get("/api/v1/audit", {"limit": 2}).json()
    seen = [entry["target_id"] for entry in first["results"]]
    url = first["next"]
    while url:
        page = client.get(url).json()
        seen += [entry["target_id"] for entry in page["results"]]
        url = page["next"]

    assert seen == list(reversed(ids))
    assert first["previous"] is None
    entry = first["results"][0]
    assert set(entry) == {"id", "created_at", "action", "actor", "target_type", "target_id",
                          "details"}  # fmt: skip
    assert entry["actor"]["kind"] == "api_key"


def test_the_audit_list_filters_by_action_actor_target_and_time(tenant: Tenant) -> None:
    client, _ = _admin(tenant)
    other, other_key = _admin(tenant, "other")
    first, second = _seeded(tenant, client, 2)
    other.post(f"/api/v1/api-keys/{first}/revoke")
    middle = AuditEntry.objects.get(target_id=second, action="api_key.created").created_at

    def targets(**query: Any) -> list[tuple[str, str]]:
        response = client.get("/api/v1/audit", query)
        assert response.status_code == 200, response.json()
        return [(e["action"], e["target_id"]) for e in response.json()["results"]]

    assert targets(action="api_key.revoked") == [("api_key.revoked", first)]
    assert targets(actor_id=str(other_key.pk)) == [("api_key.revoked", first)]
    assert targets(actor_kind="api_key", target_type="api_key", target_id=second) == [
        ("api_key.created", second)
    ]
    assert targets(since=middle) == [("api_key.revoked", first), ("api_key.created", second)]
    assert targets(until=middle) == [("api_key.created", first)]
    assert len(targets(since="2000-01-01T00:00:00")) == 3
    bad = client.get("/api/v1/audit", {"action": "nope"})
    assert bad.status_code == 400
    assert "action" in str(bad.json()["error"])
    assert client.get("/api/v1/audit", {"since": "yesterday"}).status_code == 400


def test_the_console_audit_page_is_for_admins(tenant: Tenant) -> None:
    client, _ = _admin(tenant)
    _seeded(tenant, client, 1)
    admin_user = make_member(tenant, role=Role.ADMIN)
    member_user = make_member(tenant, role=Role.MEMBER)
    browser = Client()
    browser.force_login(admin_user)
    page = browser.get(reverse("console:audit"), {"action": "api_key.created"})
    refused = Client()
    refused.force_login(member_user)

    assert page.status_code == 200
    text = page.content.decode()
    assert 'data-action="api_key.created"' in text
    assert 'data-action="login.succeeded"' not in text  # filtered out
    assert 'href="/console/audit/"' in text  # the nav link
    assert refused.get(reverse("console:audit")).status_code == 403


def test_the_admin_shows_entries_read_only(tenant: Tenant) -> None:
    client, _ = _admin(tenant)
    _seeded(tenant, client, 1)
    entry = AuditEntry.objects.for_tenant(tenant).get()
    root = User.objects.create_superuser("root", password="pw-for-tests")
    browser = Client()
    browser.force_login(root)

    listing = browser.get(reverse("admin:audit_auditentry_changelist"))
    detail = browser.get(reverse("admin:audit_auditentry_change", args=[entry.pk]))
    change = browser.post(reverse("admin:audit_auditentry_change", args=[entry.pk]), {})
    delete = browser.post(
        reverse("admin:audit_auditentry_delete", args=[entry.pk]), {"post": "yes"}
    )

    assert (listing.status_code, detail.status_code) == (200, 200)
    assert change.status_code == 403
    assert delete.status_code == 403
    assert AuditEntry.objects.filter(pk=entry.pk).exists()


def test_an_entry_is_never_changed_once_written(tenant: Tenant) -> None:
    client, _ = _admin(tenant)
    _seeded(tenant, client, 1)
    entry = AuditEntry.objects.for_tenant(tenant).get()

    entry.action = "api_key.revoked"
    with pytest.raises(ValueError, match="append-only"):
        entry.save()


def test_prune_deletes_entries_past_retention_only(tenant: Tenant, settings: Any) -> None:
    client, _ = _admin(tenant)
    old, recent = _seeded(tenant, client, 2)
    settings.RETENTION_AUDIT_DAYS = 30
    AuditEntry.objects.filter(target_id=old).update(created_at=now_us() - 31 * DAY_US)

    assert audit_prune() == 1
    assert list(AuditEntry.objects.values_list("target_id", flat=True)) == [recent]
    settings.RETENTION_AUDIT_DAYS = 0
    AuditEntry.objects.update(created_at=0)
    assert audit_prune() == 0

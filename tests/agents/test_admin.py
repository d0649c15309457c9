"""Definitions and permission rules are written in the admin through the API's validation
(documents, the whole graph), errors show at their fields, and model keys are write-only."""

from __future__ import annotations

import json
from typing import Any

import pytest
from django.contrib.auth.models import User
from django.contrib.messages import get_messages
from django.db import models
from django.test import Client

from agents.credentials import credential_secret
from agents.models import (
    Agent,
    CodeTool,
    Definition,
    Model,
    PermissionRule,
    Prompt,
    ProviderCredential,
)
from agents.services import document_json, row_document
from tenancy.encryption import secret_decrypt
from tenancy.models import Role, Tenant
from tests.agents.samples import seed_rich
from tests.factories import make_member

pytestmark = pytest.mark.django_db

MODEL_KEY = "sk-admin-test-key-never-shown-4242"


@pytest.fixture
def admin_client(client: Client, tenant: Tenant) -> Client:
    seed_rich(tenant)
    client.force_login(User.objects.create_superuser("root", password="pw-for-tests"))
    return client


def form_data(model: type[Definition], document: dict[str, Any]) -> dict[str, str]:
    """What a browser posts for ``document`` on the definition's admin form."""
    data: dict[str, str] = {}
    for name, value in document.items():
        field = model._meta.get_field(name)
        if isinstance(field, models.JSONField):
            data[name] = json.dumps(value)
        elif isinstance(field, models.BooleanField):
            if value:
                data[name] = "on"
        else:
            data[name] = "" if value is None else str(value)
    return data


def row_form_data(row: Definition) -> dict[str, str]:
    return form_data(type(row), document_json(row_document(row)))


def errors_of(response: Any) -> tuple[dict[str, list[str]], list[str]]:
    """The form's field errors and its non-field errors, as rendered."""
    form = response.context["adminform"].form
    return (
        {name: list(errors) for name, errors in form.errors.items() if name != "__all__"},
        list(form.non_field_errors()),
    )


@pytest.mark.parametrize(
    "model", ["model", "prompt", "agent", "codetool", "permissionrule", "providercredential"]
)
def test_definition_list_and_add_pages_render(admin_client: Client, model: str) -> None:
    assert admin_client.get(f"/admin/agents/{model}/").status_code == 200
    assert admin_client.get(f"/admin/agents/{model}/add/").status_code == 200


def test_a_valid_definition_added_in_admin_is_saved(admin_client: Client, tenant: Tenant) -> None:
    document = {
        "name": "shout",
        "description": "Shout a text",
        "language": "javascript",
        "source": "export default ({ text }) => text.toUpperCase()",
    }

    response = admin_client.post(
        "/admin/agents/codetool/add/", {"tenant": str(tenant.id), **form_data(CodeTool, document)}
    )

    assert response.status_code == 302
    row = CodeTool.objects.for_tenant(tenant).get(name="shout")
    assert (row.language, row.source) == ("javascript", document["source"])
    assert response["Location"] == "/admin/agents/codetool/"


def test_a_dangling_reference_is_shown_at_its_field_and_nothing_is_saved(
    admin_client: Client, tenant: Tenant
) -> None:
    document = {
        "name": "orphan",
        "tool_description": "Refers to a model that does not exist",
        "prompt": [{"type": "text", "content": "Hi."}],
        "model": "no_such_model",
        "tool_choice": "auto",
    }

    response = admin_client.post(
        "/admin/agents/prompt/add/", {"tenant": str(tenant.id), **form_data(Prompt, document)}
    )

    assert response.status_code == 200
    fields, general = errors_of(response)
    assert list(fields) == ["model"]
    assert fields["model"][0].startswith("model: ")
    assert "no_such_model" in fields["model"][0]
    assert general == []
    assert not Prompt.objects.for_tenant(tenant).filter(name="orphan").exists()


def test_a_malformed_nested_field_names_its_path(admin_client: Client, tenant: Tenant) -> None:
    row = Agent.objects.for_tenant(tenant).get(name="helper")
    data = row_form_data(row)
    data["side_a"] = json.dumps({"prompt": "assistant", "max_steps": 0})

    response = admin_client.post(f"/admin/agents/agent/{row.id}/change/", data)

    assert response.status_code == 200
    fields, _ = errors_of(response)
    assert list(fields) == ["side_a"]
    assert fields["side_a"][0].startswith("side_a.max_steps: ")
    row.refresh_from_db()
    assert row.side_a["max_steps"] == 10


def test_a_rename_that_breaks_another_definition_names_it_and_its_path(
    admin_client: Client, tenant: Tenant
) -> None:
    row = Prompt.objects.for_tenant(tenant).get(name="house_rules")
    data = row_form_data(row) | {"name": "rules_of_the_house"}

    response = admin_client.post(f"/admin/agents/prompt/{row.id}/change/", data)

    assert response.status_code == 200
    fields, general = errors_of(response)
    assert fields == {}
    assert len(general) == 1
    assert general[0].startswith("prompt 'assistant': prompt[1].prompt: ")
    assert Prompt.objects.for_tenant(tenant).filter(name="house_rules").exists()


def test_a_valid_change_is_saved_through_the_service(admin_client: Client, tenant: Tenant) -> None:
    row = Agent.objects.for_tenant(tenant).get(name="helper")
    before = row.updated_at
    data = row_form_data(row) | {"description": "The friendly assistant"}

    response = admin_client.post(f"/admin/agents/agent/{row.id}/change/", data)

    assert response.status_code == 302
    row.refresh_from_db()
    assert row.description == "The friendly assistant"
    assert row.updated_at > before


def test_a_model_key_is_write_only(admin_client: Client, tenant: Tenant) -> None:
    row = Model.objects.for_tenant(tenant).get(name="smart")
    data = row_form_data(row)

    stored = admin_client.post(
        f"/admin/agents/model/{row.id}/change/", data | {"api_key_value": MODEL_KEY}
    )
    row.refresh_from_db()
    assert stored.status_code == 302
    assert row.api_key_encrypted is not None
    sealed = bytes(row.api_key_encrypted)
    context = f"agents.Model:{row.id}:api_key"
    assert secret_decrypt(tenant=tenant, ciphertext=sealed, context=context) == MODEL_KEY.encode()

    page = admin_client.get(f"/admin/agents/model/{row.id}/change/")
    assert page.status_code == 200
    assert b"gpt-4o-mini" in page.content
    assert MODEL_KEY.encode() not in page.content
    assert sealed.hex().encode() not in page.content
    assert b"api_key_encrypted" not in page.content

    kept = admin_client.post(f"/admin/agents/model/{row.id}/change/", data)
    row.refresh_from_db()
    assert kept.status_code == 302
    assert row.api_key_encrypted is not None

    removed = admin_client.post(
        f"/admin/agents/model/{row.id}/change/", data | {"remove_api_key": "on"}
    )
    row.refresh_from_db()
    assert removed.status_code == 302
    assert row.api_key_encrypted is None


def test_deleting_a_referenced_definition_is_refused(admin_client: Client, tenant: Tenant) -> None:
    row = Model.objects.for_tenant(tenant).get(name="fast")

    response = admin_client.post(f"/admin/agents/model/{row.id}/delete/", {"post": "yes"})

    assert response.status_code == 302
    assert response["Location"] == f"/admin/agents/model/{row.id}/change/"
    texts = [str(m) for m in get_messages(response.wsgi_request)]
    assert len(texts) == 1
    assert texts[0].startswith("model 'fast' is still referenced")
    assert Model.objects.filter(id=row.id).exists()


def test_deleting_an_unreferenced_definition_works(admin_client: Client, tenant: Tenant) -> None:
    row = Agent.objects.for_tenant(tenant).get(name="helper")

    response = admin_client.post(f"/admin/agents/agent/{row.id}/delete/", {"post": "yes"})

    assert response.status_code == 302
    assert not Agent.objects.filter(id=row.id).exists()


def test_a_permission_rule_is_checked_as_the_api_checks_it(
    admin_client: Client, tenant: Tenant
) -> None:
    base = {"tenant": str(tenant.id), "tool": "tally_words", "agent": "", "description": ""}

    refused = admin_client.post(
        "/admin/agents/permissionrule/add/",
        base | {"decision": "deny", "when": json.dumps({"no_such_operator": 1})},
    )
    accepted = admin_client.post(
        "/admin/agents/permissionrule/add/", base | {"decision": "ask", "when": "null"}
    )

    assert refused.status_code == 200
    fields, general = errors_of(refused)
    assert general == []
    assert list(fields) == ["when"]
    assert fields["when"][0].startswith("when.no_such_operator: unknown operator")
    assert accepted.status_code == 302
    rule = PermissionRule.objects.for_tenant(tenant).get()
    assert (rule.tool, rule.decision, rule.on_expiry) == ("tally_words", "ask", "deny")


# Tenant staff ---------------------------------------------------------------------------------


def test_tenant_staff_see_and_pick_only_their_tenant(
    client: Client, tenant: Tenant, other_tenant: Tenant
) -> None:
    seed_rich(tenant)
    seed_rich(other_tenant)
    client.force_login(make_member(tenant, role=Role.MEMBER, is_staff=True))
    mine = Agent.objects.for_tenant(tenant).get(name="helper")
    theirs = Agent.objects.for_tenant(other_tenant).get(name="helper")

    listing = client.get("/admin/agents/agent/")
    add_page = client.get("/admin/agents/agent/add/")

    assert listing.status_code == 200
    assert list(listing.context["cl"].result_list) == list(
        Agent.objects.for_tenant(tenant).order_by("name")
    )
    assert client.get(f"/admin/agents/agent/{mine.id}/change/").status_code == 200
    assert client.get(f"/admin/agents/agent/{theirs.id}/change/").status_code == 302
    choices = add_page.context["adminform"].form.fields["tenant"].queryset
    assert list(choices) == [tenant]
    refused = client.post(
        "/admin/agents/codetool/add/",
        {
            "tenant": str(other_tenant.id),
            **form_data(CodeTool, {"name": "x", "description": "x", "source": "1"}),
        },
    )
    assert refused.status_code == 200
    assert "tenant" in errors_of(refused)[0]
    assert not CodeTool.objects.filter(name="x").exists()


def test_a_read_only_member_can_view_definitions_but_not_change_them(
    client: Client, tenant: Tenant
) -> None:
    seed_rich(tenant)
    client.force_login(make_member(tenant, role=Role.READ_ONLY, is_staff=True))
    row = Agent.objects.for_tenant(tenant).get(name="helper")

    assert client.get("/admin/agents/agent/").status_code == 200
    assert client.get(f"/admin/agents/agent/{row.id}/change/").status_code == 200
    assert client.get("/admin/agents/agent/add/").status_code == 403
    data = row_form_data(row) | {"description": "changed"}
    assert client.post(f"/admin/agents/agent/{row.id}/change/", data).status_code == 403
    assert client.post(f"/admin/agents/agent/{row.id}/delete/", {"post": "yes"}).status_code == 403
    row.refresh_from_db()
    assert row.description == "The assistant"


def test_permission_rules_need_the_admin_role(client: Client, tenant: Tenant) -> None:
    client.force_login(make_member(tenant, role=Role.MEMBER, is_staff=True))

    assert client.get("/admin/agents/permissionrule/").status_code == 200
    assert client.get("/admin/agents/permissionrule/add/").status_code == 403


def test_a_credential_is_written_through_the_service_and_its_key_never_shown(
    admin_client: Client, tenant: Tenant
) -> None:
    fields = {"tenant": str(tenant.pk), "name": "team", "provider": "openai", "base_url": ""}

    missing_key = admin_client.post("/admin/agents/providercredential/add/", fields)
    added = admin_client.post(
        "/admin/agents/providercredential/add/", fields | {"api_key_value": MODEL_KEY}
    )
    row = ProviderCredential.objects.for_tenant(tenant).get(name="team")
    page = admin_client.get(f"/admin/agents/providercredential/{row.id}/change/")
    rotated = admin_client.post(
        f"/admin/agents/providercredential/{row.id}/change/",
        fields | {"api_key_value": "sk-rotated"},
    )
    row.refresh_from_db()

    assert "api_key is required" in errors_of(missing_key)[0]["api_key_value"][0]
    assert added.status_code == 302
    assert page.status_code == 200
    assert MODEL_KEY.encode() not in page.content
    assert rotated.status_code == 302
    assert credential_secret(row) == "sk-rotated"
    assert row.rotated_at is not None


def test_a_superuser_grants_platform_credentials_to_a_tenant(
    admin_client: Client, tenant: Tenant
) -> None:
    page = admin_client.get(f"/admin/tenancy/tenant/{tenant.pk}/change/")
    granted = admin_client.post(
        f"/admin/tenancy/tenant/{tenant.pk}/change/",
        {
            "slug": tenant.slug, "name": tenant.name, "is_active": "on",
            "platform_credentials": "true",
            "tenancy_membership_set-TOTAL_FORMS": "0",
            "tenancy_membership_set-INITIAL_FORMS": "0",
        },
    )  # fmt: skip
    tenant.refresh_from_db()

    assert b"platform credentials granted" in page.content.lower()
    assert granted.status_code == 302, errors_of(granted)
    assert tenant.platform_credentials is True
